#!/usr/bin/env python3
"""bench/scale/gen.py -- generates a big C/C++ program with a chosen amount of .text, for
bench/scale.sh (issue 36: what Rivet and llvm-bolt-19 cost on binaries of 50 MB to 1 GB).

Usage: bench/scale/gen.py SIZE_MB [--cache DIR] [--units N] [--jobs J]
       prints the path of the linked program (DIR/gen-vV/SIZE_MBmb/prog) on stdout.

How (everything is cached under DIR, default ~/.cache/rivet/scale, keyed by GEN_VERSION):
  1. One *module* is written as C (modc.c) and C++ (modx.cc) sources: N units (default 500),
     each unit a handful of functions of the shapes big servers are made of, with shapes and
     constants drawn per unit from a fixed seed:
       - a switch over 12..40 cases of 2..4 statements (a jump table), cases calling small leaf helpers;
       - a loop over a local array with a data-dependent branch;
       - a check with a __builtin_expect-unlikely error path into a cold function
         (.text.unlikely) that calls a shared reporting hub;
       - two calls through a constant table of function pointers;
       - a C++ function with try/catch and an object with a destructor (an LSDA, a cleanup
         and a catch landing pad), calling a hub that throws now and then (1 in 4096);
       - the unit's entry, which calls all of the above and the mixing hub;
     plus the module's dispatcher `zqMMMMM_run(unit, x)`, a switch over all units (a jump
     table of N entries). Every symbol of the module carries the marker `zq00000`.
     Both files are compiled ONCE with gcc/g++ -O2 -g -fno-reorder-blocks-and-partition
     (PIE, Debian's default), so the objects have CFI, LSDAs, jump tables and DWARF 5 lines.
  2. Copies: the module's objects are copied K times with the marker replaced by zq00001,
     zq00002, ... (same length, so only names change: symbol names in .strtab and the
     function names in .debug_str; the copy is checked to have the marker nowhere else).
     Each copy is a distinct set of functions with its own code, CFI, LSDA, jump tables,
     relocations and line table, at the cost of a file copy instead of a compilation. K is
     the smallest number of copies that reaches SIZE_MB MiB of executable code.
  3. A driver is generated per size: hubs (hub_mix called by every unit, hub_check which
     throws, hub_report), a dispatcher over the K modules, and a main that runs a fixed
     workload: for each module and unit a hash picks ~15% of the units (HOT_PERMILLE),
     one in 32 of those runs 40 times as often; `prog [REPS]` repeats it REPS times (default
     1) and prints `checksum XXXXXXXX`, the same for any correct layout of the program.
  4. Linked with g++ -fuse-ld=lld (llvm-19's lld) -Wl,--emit-relocs: a PIE with its
     relocations kept, as Rivet and BOLT need.
Times of each step and the program's figures go to DIR/gen-vV/SIZE_MBmb/meta.json.
"""
import argparse, json, os, random, shutil, struct, subprocess, sys, time

GEN_VERSION = 1
MARK = b"zq00000"
HOT_PERMILLE = 150
LLVM_BIN = "/usr/lib/llvm-19/bin"
CFLAGS = ["-O2", "-g", "-fno-reorder-blocks-and-partition"]


def die(msg):
    print("gen.py: error: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    r = subprocess.run(cmd, **kw)
    if r.returncode != 0:
        die("failed (%d): %s" % (r.returncode, " ".join(cmd)))


def c_unit(i, rnd):
    """C source of unit i (leaf helpers, switch, loop, check + cold path, pointer calls, entry)."""
    m = "zq00000"
    c = [rnd.randrange(3, 1 << 20) | 1 for _ in range(40)]
    s = [rnd.randrange(1, 13) for _ in range(8)]
    ncase = rnd.randrange(12, 41)
    n = rnd.choice([8, 12, 16, 24, 32])
    L = []
    L.append(f"__attribute__((noinline)) static unsigned {m}_leaf{i}a(unsigned x)\n{{\n"
             f"    return (x ^ {c[0]}u) * {c[1]}u + (x >> {s[0]});\n}}\n")
    L.append(f"__attribute__((noinline)) static unsigned {m}_leaf{i}b(unsigned x)\n{{\n"
             f"    unsigned y = x + {c[2]}u;\n    return y - (y << {s[1]}) + (y >> {s[2]});\n}}\n")
    L.append(f"__attribute__((noinline)) unsigned {m}_leaf{i}c(unsigned x)\n{{\n"
             f"    return x * {c[3]}u ^ (x >> {s[3]});\n}}\n")
    cases = []
    for k in range(ncase):
        stmts = []
        for _ in range(rnd.randrange(2, 5)):
            kind = rnd.randrange(6)
            a, b = rnd.randrange(1, 1 << 16), rnd.randrange(1, 31)
            if kind == 0:
                stmts.append(f"r ^= {m}_leaf{i}a(x + {a}u) ^ (x >> {b});")
            elif kind == 1:
                stmts.append(f"r += {m}_leaf{i}b(x ^ r) * {a}u;")
            elif kind == 2:
                stmts.append(f"r = hub_mix(r, x + {a}u);")
            elif kind == 3:
                stmts.append(f"if (r & {1 << (b % 16)}u)\n            r = {m}_leaf{i}c(r + {a}u);\n"
                             f"        else\n            r -= x << {b % 7 + 1};")
            elif kind == 4:
                stmts.append(f"r = r * {a}u + {c[4 + k % 30]}u;\n        r ^= r >> {b};")
            else:
                stmts.append(f"for (unsigned j = 0; j < (x & {rnd.choice([3, 7, 15])}u); j++)\n"
                             f"            r += (r >> {b}) ^ j * {a}u;")
        body = "\n        ".join(stmts)
        cases.append(f"    case {k}:\n        {body}\n        break;")
    L.append(f"unsigned {m}_sw{i}(unsigned x)\n{{\n    unsigned r = x;\n    switch (x % {ncase}u) {{\n"
             + "\n".join(cases) + f"\n    default:\n        r = x;\n    }}\n    return r + {c[5]}u;\n}}\n")
    L.append(f"unsigned {m}_loop{i}(const unsigned *a, unsigned n, unsigned x)\n{{\n"
             f"    unsigned s = x;\n    for (unsigned j = 0; j < n; j++) {{\n"
             f"        if (a[j] & {1 << s[4]}u)\n            s += a[j] * {c[6]}u;\n"
             f"        else\n            s ^= (a[j] >> {s[5]}) + j;\n    }}\n    return s;\n}}\n")
    L.append(f"__attribute__((cold, noinline)) static unsigned {m}_fail{i}(unsigned x)\n{{\n"
             f"    hub_report({i}, x);\n    return x ^ {c[7]}u;\n}}\n")
    L.append(f"unsigned {m}_chk{i}(unsigned x)\n{{\n"
             f"    if (__builtin_expect(x % {rnd.randrange(5000, 20000)}u == {c[8] % 5000}u, 0))\n"
             f"        return {m}_fail{i}(x);\n"
             f"    if (__builtin_expect(x == 0xffffffffu, 0)) {{\n        hub_report(-{i} - 1, x);\n        return 0;\n    }}\n"
             f"    return {m}_sw{i}(x) + {c[9]}u;\n}}\n")
    L.append(f"static unsigned (*const {m}_ops{i}[4])(unsigned) = {{\n"
             f"    {m}_leaf{i}a, {m}_leaf{i}b, hub_twist, {m}_leaf{i}c,\n}};\n")
    L.append(f"unsigned {m}_fp{i}(unsigned x)\n{{\n"
             f"    return {m}_ops{i}[x & 3](x) + {m}_ops{i}[(x >> {s[6]}) & 3](x + {c[10]}u);\n}}\n")
    L.append(f"unsigned {m}_eh{i}(unsigned x);\n")
    L.append(f"unsigned {m}_unit{i}(unsigned x)\n{{\n    unsigned buf[{n}];\n"
             f"    for (unsigned j = 0; j < {n}u; j++)\n        buf[j] = x * {c[11]}u + j * {c[12]}u;\n"
             f"    unsigned r = {m}_chk{i}(x);\n"
             f"    r = hub_mix(r, {m}_loop{i}(buf, {n}u, x));\n"
             f"    r = hub_mix(r, {m}_fp{i}(r));\n"
             f"    r = hub_mix(r, {m}_eh{i}(r ^ {c[13]}u));\n    return r;\n}}\n")
    return "\n".join(L)


def cxx_unit(i, rnd):
    m = "zq00000"
    c = [rnd.randrange(3, 1 << 20) | 1 for _ in range(8)]
    return (f"namespace {m} {{\n"
            f"struct Guard{i} {{\n    unsigned *p;\n    unsigned v;\n"
            f"    ~Guard{i}() {{ *p ^= v; }}\n}};\n\n"
            f"__attribute__((noinline)) unsigned step{i}(unsigned x)\n{{\n"
            f"    Guard{i} g{{&x, {c[0]}u}};\n    return hub_check(x * {c[1]}u + {c[2]}u) + x;\n}}\n}}\n\n"
            f"extern \"C\" unsigned {m}_eh{i}(unsigned x)\n{{\n    unsigned acc = x;\n    try {{\n"
            f"        {m}::Guard{i} g{{&acc, {c[3]}u}};\n"
            f"        acc += {m}::step{i}(x);\n        acc ^= hub_check(acc + {c[4]}u);\n"
            f"    }} catch (const std::range_error &) {{\n        acc = acc * 3u + {c[5]}u;\n"
            f"    }} catch (...) {{\n        acc = ~acc;\n    }}\n    return acc;\n}}\n")


HUB_DECLS = """unsigned hub_mix(unsigned a, unsigned b);
unsigned hub_twist(unsigned x);
void hub_report(int unit, unsigned x);
"""


def write_module(d, units):
    rnd = random.Random(36)
    with open(os.path.join(d, "modc.c"), "w") as f:
        f.write("/* generated by bench/scale/gen.py: one module, copied per size */\n")
        f.write(HUB_DECLS + "\n")
        for i in range(units):
            f.write(c_unit(i, rnd) + "\n")
        f.write("unsigned zq00000_run(unsigned u, unsigned x)\n{\n    switch (u) {\n")
        for i in range(units):
            f.write(f"    case {i}:\n        return zq00000_unit{i}(x);\n")
        f.write("    default:\n        return x;\n    }\n}\n")
    rnd = random.Random(3636)
    with open(os.path.join(d, "modx.cc"), "w") as f:
        f.write("// generated by bench/scale/gen.py: the C++ half of one module\n#include <stdexcept>\n")
        f.write('extern "C" unsigned hub_check(unsigned x);\n\n')
        for i in range(units):
            f.write(cxx_unit(i, rnd) + "\n")


HUBS = r"""// generated by bench/scale/gen.py: hubs shared by every module
#include <stdexcept>
#include <cstdio>
extern "C" {
unsigned hub_mix(unsigned a, unsigned b)
{
    unsigned h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u + (a << 6) + (a >> 2));
    return h ^ (h >> 15);
}
unsigned hub_twist(unsigned x)
{
    return (x << 7 | x >> 25) ^ 0x5bd1e995u;
}
unsigned hub_reports;
__attribute__((cold, noinline)) void hub_report(int unit, unsigned x)
{
    hub_reports += (unsigned)unit ^ x;
}
__attribute__((noinline)) unsigned hub_check(unsigned x)
{
    if ((x & 0xfffu) == 0x5a5u)
        throw std::range_error("hub_check");
    if (__builtin_expect((x & 0xfffffu) == 0xdead5u, 0))
        throw 7;
    return x >> 3;
}
}
"""


def write_driver(path, nmod, units):
    with open(path, "w") as f:
        f.write("/* generated by bench/scale/gen.py: the driver of a %d-module program */\n" % nmod)
        f.write("#include <stdio.h>\n#include <stdlib.h>\n" + HUB_DECLS)
        f.write("extern unsigned hub_reports;\n")
        for k in range(nmod):
            f.write(f"unsigned zq{k:05d}_run(unsigned u, unsigned x);\n")
        f.write("\n__attribute__((noinline)) static unsigned call_module(unsigned k, unsigned u, unsigned x)\n{\n"
                "    switch (k) {\n")
        for k in range(nmod):
            f.write(f"    case {k}:\n        return zq{k:05d}_run(u, x);\n")
        f.write("    default:\n        return x;\n    }\n}\n\n")
        f.write(f"""int main(int argc, char **argv)
{{
    unsigned reps = argc > 1 ? (unsigned)strtoul(argv[1], 0, 10) : 1u;
    unsigned acc = 0x12345678u, calls = 0;
    for (unsigned r = 0; r < reps; r++)
        for (unsigned k = 0; k < {nmod}u; k++)
            for (unsigned u = 0; u < {units}u; u++) {{
                unsigned h = k * 2654435761u ^ u * 40503u;
                h ^= h >> 15;
                h *= 0x2c1b3c6du;
                h ^= h >> 12;
                if (h % 1000u >= {HOT_PERMILLE}u)
                    continue;
                unsigned times = (h >> 24) % 32u == 0 ? 40u : 1u;
                for (unsigned t = 0; t < times; t++) {{
                    acc = hub_mix(acc, call_module(k, u, acc + r * 977u + t));
                    calls++;
                }}
            }}
    printf("checksum %08x reports %08x calls %u\\n", acc, hub_reports, calls);
    return 0;
}}
""")


def elf_sections(data):
    """[(name, offset, size, flags)] of an ELF64 little-endian file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        die("not an ELF64 LE file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3a)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + j * shentsize) for j in range(shnum)]
    stroff = hdrs[shstrndx][4]
    out = []
    for h in hdrs:
        nend = data.index(b"\0", stroff + h[0])
        out.append((data[stroff + h[0]:nend].decode(), h[4], h[5], h[2]))
    return out


def check_marks(data, what):
    """The marker must occur only in string tables (names), never in code or data."""
    allowed = [(o, o + s) for (n, o, s, _) in elf_sections(data)
               if n in (".strtab", ".debug_str", ".debug_line_str")]
    pos, count = data.find(MARK), 0
    while pos >= 0:
        if not any(a <= pos < b for a, b in allowed):
            die(f"{what}: the marker {MARK.decode()} occurs at offset {pos}, outside the string tables")
        count += 1
        pos = data.find(MARK, pos + 1)
    if count == 0:
        die(f"{what}: no marker")
    return count


def text_bytes(path):
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    # section headers may be far: read the whole file only for the headers' region
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3a)
    with open(path, "rb") as f:
        f.seek(shoff)
        hdr = f.read(shentsize * shnum)
    total = 0
    for j in range(shnum):
        h = struct.unpack_from("<IIQQQQIIQQ", hdr, j * shentsize)
        if h[1] == 1 and h[2] & 0x4:  # SHT_PROGBITS, SHF_EXECINSTR
            total += h[5]
    return total


def defined_functions(path):
    """Number of defined STT_FUNC symbols in an ELF object (module objects only: small)."""
    with open(path, "rb") as f:
        data = f.read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", data, 0x3a)
    count = 0
    for j in range(shnum):
        h = struct.unpack_from("<IIQQQQIIQQ", data, shoff + j * shentsize)
        if h[1] != 2:  # SHT_SYMTAB
            continue
        for off in range(h[4], h[4] + h[5], 24):
            _, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, off)
            if info & 0xf == 2 and shndx != 0:
                count += 1
    return count


def main():
    ap = argparse.ArgumentParser(description="generate a big program for bench/scale.sh")
    ap.add_argument("size_mb", type=int, help="executable code to reach, in MiB")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/rivet/scale"))
    ap.add_argument("--units", type=int, default=500, help="units per module (changes the module)")
    a = ap.parse_args()
    if a.size_mb < 1:
        die("SIZE_MB must be at least 1")
    for tool in ("gcc", "g++"):
        if not shutil.which(tool):
            die(f"{tool} not found (apt-get install g++)")
    if not os.path.exists(os.path.join(LLVM_BIN, "ld.lld")):
        die(f"{LLVM_BIN}/ld.lld not found (apt-get install lld-19)")
    env = dict(os.environ, PATH=LLVM_BIN + ":" + os.environ["PATH"])
    root = os.path.join(a.cache, f"gen-v{GEN_VERSION}")
    mdir = os.path.join(root, f"module-u{a.units}")
    os.makedirs(mdir, exist_ok=True)
    times = {}
    t0 = time.time()
    objs = {"modc.o": "modc.c", "modx.o": "modx.cc", "hubs.o": "hubs.cc"}
    if not all(os.path.exists(os.path.join(mdir, o)) for o in objs):
        write_module(mdir, a.units)
        with open(os.path.join(mdir, "hubs.cc"), "w") as f:
            f.write(HUBS)
        procs = []
        for o, src in objs.items():
            cc = "g++" if src.endswith(".cc") else "gcc"
            procs.append((o, subprocess.Popen([cc] + CFLAGS + ["-c", src, "-o", o + ".tmp"], cwd=mdir)))
        for o, p in procs:
            if p.wait() != 0:
                die(f"compiling {o} failed")
            os.replace(os.path.join(mdir, o + ".tmp"), os.path.join(mdir, o))
        times["module_compile_s"] = round(time.time() - t0, 1)
    mod_text = text_bytes(os.path.join(mdir, "modc.o")) + text_bytes(os.path.join(mdir, "modx.o"))
    nmod = max(1, -(-(a.size_mb << 20) // mod_text))
    out = os.path.join(root, f"{a.size_mb}mb")
    prog = os.path.join(out, "prog")
    meta_path = os.path.join(out, "meta.json")
    mod_funcs = sum(defined_functions(os.path.join(mdir, o)) for o in ("modc.o", "modx.o"))
    if os.path.exists(prog) and os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if "module_functions" not in meta:  # results of an older gen.py of this version
            meta["module_functions"] = mod_funcs
            meta["functions_in_modules"] = mod_funcs * nmod
            with open(meta_path, "w") as f:
                json.dump(meta, f, indent=1)
        print(prog)
        return
    odir = os.path.join(out, "obj")
    os.makedirs(odir, exist_ok=True)
    t1 = time.time()
    tmpl = {}
    for o in ("modc.o", "modx.o"):
        with open(os.path.join(mdir, o), "rb") as f:
            tmpl[o] = f.read()
        check_marks(tmpl[o], o)
    paths = []
    for k in range(nmod):
        new = b"zq%05d" % k
        for o, data in tmpl.items():
            p = os.path.join(odir, f"m{k:05d}_{o}")
            if not os.path.exists(p):
                with open(p + ".tmp", "wb") as f:
                    f.write(data.replace(MARK, new))
                os.replace(p + ".tmp", p)
            paths.append(p)
    times["copy_s"] = round(time.time() - t1, 1)
    t2 = time.time()
    write_driver(os.path.join(out, "driver.c"), nmod, a.units)
    run(["gcc"] + CFLAGS + ["-c", "driver.c", "-o", "driver.o"], cwd=out)
    times["driver_compile_s"] = round(time.time() - t2, 1)
    t3 = time.time()
    lst = os.path.join(out, "objects.rsp")
    with open(lst, "w") as f:
        f.write("\n".join(paths) + "\n")
    run(["g++", "-fuse-ld=lld", "-Wl,--emit-relocs", "-o", prog + ".tmp", "driver.o",
         os.path.join(mdir, "hubs.o"), "@" + lst], cwd=out, env=env)
    os.replace(prog + ".tmp", prog)
    times["link_s"] = round(time.time() - t3, 1)
    shutil.rmtree(odir)  # the copies are only the link's input
    meta = {"gen_version": GEN_VERSION, "size_mb": a.size_mb, "units_per_module": a.units,
            "modules": nmod, "module_text_bytes": mod_text, "module_functions": mod_funcs,
            "functions_in_modules": mod_funcs * nmod, "text_bytes": text_bytes(prog),
            "file_bytes": os.path.getsize(prog), "times": times,
            "cflags": " ".join(CFLAGS), "link": "g++ -fuse-ld=lld -Wl,--emit-relocs (PIE)"}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    print(prog)


if __name__ == "__main__":
    main()
