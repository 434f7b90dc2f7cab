#!/usr/bin/env python3
"""bench/scale/synth_profile.py -- a branch profile (BOLT fdata) for a generated program that
is too big to instrument on this machine, made from the instrumentation profile of a smaller
program of the same generator version.

Usage: synth_profile.py SMALL.fdata SMALL_MODULES BIG_MODULES UNITS > BIG.fdata

Why this is sound for measuring optimizer cost: every module of a generated program is the
same compiled code with the module number in its names (bench/scale/README.md), and main
picks the units it runs with a hash of (module, unit) that gen.py's driver and this script
compute alike. So the profile of unit u of module k in the big program is the profile of
unit u in any small-program module that ran it (same code, same offsets), renamed. For each
unit the big program runs, the records of the first small-program module (counting from
k mod SMALL_MODULES) that ran the same unit are copied with the module number replaced; a
module's dispatcher gets the records of small module k mod SMALL_MODULES; records of the hubs
are kept; records from main and the module dispatcher of the driver are dropped (the driver
differs between sizes, so their offsets would not hold). Counts are not rescaled: the
profile has the shape of the big program's run, not its exact counts.
"""
import os, re, sys
from collections import defaultdict

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import HOT_PERMILLE  # noqa: E402  (the driver's selection threshold)

NAME = re.compile(r"zq(\d{5})(?:_(?:leaf|sw|loop|fail|chk|fp|eh|unit)(\d+)|\d+step(\d+)Ej)?")


def selected(k, u):
    """Whether the driver of gen.py runs unit u of module k (the same 32-bit hash)."""
    m = 0xffffffff
    h = ((k * 2654435761) & m) ^ ((u * 40503) & m)
    h ^= h >> 15
    h = (h * 0x2c1b3c6d) & m
    h ^= h >> 12
    return h % 1000 < HOT_PERMILLE


def owner(name):
    """(module, unit or None) of a function name, or None for functions outside modules."""
    mt = NAME.search(name)
    if not mt:
        return None
    unit = mt.group(2) or mt.group(3)
    return int(mt.group(1)), (int(unit) if unit is not None else None)


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: synth_profile.py SMALL.fdata SMALL_MODULES BIG_MODULES UNITS > BIG.fdata")
    path, small, big, units = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    by_owner = defaultdict(list)  # (module, unit) -> records (fields) from that owner
    keep = []
    for line in open(path):
        f = line.split()
        if len(f) != 8:
            continue
        src = f[1]
        if src.startswith(("main", "call_module")):
            continue
        o = owner(src) if f[0] == "1" else owner(f[4])
        if o is None:
            keep.append(line)
        else:
            by_owner[o].append(f)
    out = sys.stdout
    out.writelines(keep)
    missing = units_out = 0
    for k in range(big):
        tag = "zq%05d" % k
        for u in [None] + list(range(units)):
            if u is not None and not selected(k, u):
                continue
            start = k % small
            src = None
            for j in range(small):
                cand = (start + j) % small
                if (cand, u) in by_owner and (u is None or selected(cand, u)):
                    src = cand
                    break
            if src is None:
                missing += u is not None
                continue
            units_out += u is not None
            old = "zq%05d" % src
            for f in by_owner[(src, u)]:
                out.write(" ".join(x.replace(old, tag) for x in f) + "\n")
    print(f"synth_profile: {units_out} units of {big} modules profiled, {missing} without a source",
          file=sys.stderr)


if __name__ == "__main__":
    main()
