# gdb script: break on source lines, run, and print every stop in an address-free form.
#
# Usage: gdb -q -batch -ex "py SOURCE='file.c'; LINES=[...] or None" -x line_breakpoints.py BIN
#
# With LINES = None, prints "exact L" for every line L of SOURCE on which `tbreak` lands on
# line L itself (lines with code) and stops. Otherwise sets a temporary breakpoint on each
# line of LINES, runs the program and, at each stop, prints the breakpoint's line and the
# backtrace as function names, source lines and argument values, until the program ends.
# Rivet's tests run it on an input and its rewritten output and compare what it prints.
import re
import gdb

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set print address off")
gdb.execute("set print frame-arguments scalars")
gdb.execute("set print entry-values no")

def tbreak(line):
    """A temporary breakpoint on SOURCE:line, and the sorted lines of its locations."""
    try:
        bp = gdb.Breakpoint("%s:%d" % (SOURCE, line), temporary=True)
    except gdb.error:
        return None, []
    return bp, sorted(loc.source[1] for loc in bp.locations if loc.source)

if LINES is None:
    n = sum(1 for _ in open(SOURCE_PATH))
    for line in range(1, n + 1):
        bp, lines = tbreak(line)
        if lines and all(l == line for l in lines):
            print("exact %d" % line)
        if bp is not None:
            bp.delete()
else:
    for line in LINES:
        _, lines = tbreak(line)
        print("break %d -> %s" % (line, lines))
    gdb.execute("run > /dev/null 2>&1")
    stops = 0
    while gdb.selected_inferior().pid and stops < 1000:
        stops += 1
        frame = gdb.newest_frame()
        out = []
        while frame is not None:
            sal = frame.find_sal()
            name = frame.name() or "??"
            line = sal.line if sal.symtab else 0
            args = []
            try:
                block = frame.block()
                fn = block.function
                while block is not None and block.function is None:
                    block = block.superblock
                if block is not None:
                    for sym in block:
                        if sym.is_argument:
                            try:
                                v = frame.read_var(sym)
                                args.append("%s=%s" % (sym.name, v if v.type.code in (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_BOOL, gdb.TYPE_CODE_ENUM) else "_"))
                            except Exception:
                                args.append("%s=?" % sym.name)
            except RuntimeError:
                pass
            out.append("%s:%d(%s)" % (name, line, ",".join(args)))
            frame = frame.older()
        print("stop " + " < ".join(out))
        try:
            gdb.execute("continue", to_string=True)
        except gdb.error:
            break
    print("stops %d" % stops)
