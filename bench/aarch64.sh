#!/usr/bin/env bash
# bench/aarch64.sh -- the AArch64 optimization benchmark: Rivet's `optimize` side by side with
# llvm-bolt-19 on Lua 5.4 and the SQLite 3 shell cross-built for AArch64 with relocations
# (scripts/build-real-aarch64.sh: gcc PIE, gcc non-PIE, clang, clang with PAC/BTI), every
# program run under qemu-aarch64 on this x86-64 host (no Arm hardware is involved).
#
# Per build (8 of them: lua-* and sqlite3-* of gcc-pie gcc-nopie clang clang-pac):
#  1. Training: `rivet instrument BIN -o inst --profile P`, the training input run with inst
#     under qemu (its output must be the original's), then `rivet merge P -o P.fdata --format
#     fdata`: Rivet reads P, BOLT reads P.fdata. One profile, two readers (as bench/optimize.sh).
#  2. Optimizing, each with its profile-guided layout recipe (bench/real-programs.sh's
#     BOLT_LAYOUT, the counterpart of Rivet's defaults):
#       rivet optimize BIN --profile P -o OUT --verify
#       llvm-bolt BIN -o OUT -data=P.fdata -reorder-blocks=ext-tsp -reorder-functions=cdsort
#         -split-functions -split-all-cold -split-eh -dyno-stats -update-debug-sections
#     BOLT is first run without -skip-funcs; when it stops with an error that names a function
#     ("... in function NAME"), that function is added to -skip-funcs and BOLT runs again (at
#     most 4 times). The report says which functions it had to skip, per build.
#  3. Every output must print (stdout + stderr) and exit as the original on both inputs, run
#     under qemu: the script stops with an error otherwise.
#  4. `rivet simulate` (docs/simulate.md: qemu's exec log replayed through a Neoverse N1 L1i
#     of 64 KiB 4-way and a 48-entry iTLB) of original, BOLT and Rivet on both inputs:
#     executed instructions, taken branches, I1 misses fully associative, and I1 and iTLB
#     misses at PLACEMENTS placements of each binary's `.text` (where both tools put the code
#     they move; the original's is all its code), 1 KiB apart by default. An input of several
#     runs sums each placement's counts over its runs; reported: median, min..max. Simulated
#     counts do not depend on the machine's load, so these run two at a time.
#  5. Optimizer wall time, CPU time (user + system) and peak RSS (GNU time), REPEATS
#     interleaved pairs (order alternating), without --verify (BOLT verifies nothing either);
#     medians, and the median of the per-pair ratios Rivet / BOLT. Rivet's timed outputs must
#     be byte-identical to the measured one.
#  6. Markdown report on stdout; progress on stderr.
#
# Inputs (a list of runs separated by ";"; Lua "script size", SQLite a SQL file on stdin of
# `sqlite3 -bail :memory:`), small because every run is emulated and a traced run costs some
# 5 M instructions per CPU second:
#   LUA_TRAIN    default "bench/lua/fannkuch.lua 7;bench/lua/binarytrees.lua 8;bench/lua/strings.lua 3000"
#   LUA_UNSEEN   default "bench/lua/nbody.lua 1000;bench/lua/spectralnorm.lua 30;bench/lua/objects.lua 30"
#   SQLITE_TRAIN default bench/sqlite/workload.sql      SQLITE_UNSEEN default bench/sqlite/unseen.sql
#   SQLITE_SCALE default 20: the SQL files as run are scaled down, every recursive CTE's bound
#                of 1000 or more (`WHERE i < 20000`) divided by it, and unseen.sql's sudoku
#                left out (about 700 M instructions on its own); 1 runs the files as they are.
#                x86-64 sqlite3-gcc runs 4.37 G / 9.01 G instructions on the whole files,
#                0.34 G / 0.30 G at the default (valgrind).
#
# Usage: bench/aarch64.sh [REPEATS] > docs/aarch64-benchmark.md     (REPEATS defaults to 5)
# Env:   RIVET       a rivet binary (default: cargo build --release -p rivet)
#        BUILDS      the builds, by build-real-aarch64.sh's names (default: all eight)
#        PLACEMENTS  placements per simulated run (default 8)
#        BUILD_DIRS  a directory holding build-real-aarch64.sh's finished output
#                    (lua5.4-*-<variant>/lua, sqlite3-*-<variant>/sqlite3 with .complete);
#                    default: ask scripts/build-real-aarch64.sh (which builds what is missing)
#        JOBS        simulations at a time (default 2)
#        KEEP        a directory to copy the raw results to (simulate's JSON, timings, logs)
#        REPORT_ONLY directories of kept results (KEEP=DIR of earlier runs, space-separated):
#                    measure nothing, write the report of their builds
# Needs: llvm-bolt-19 (apt-get install bolt-19), qemu-user, binutils-aarch64-linux-gnu,
# GNU time, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
REPEATS="${1:-5}"
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench/aarch64.sh [REPEATS]" >&2; exit 2; }
PLACEMENTS="${PLACEMENTS:-8}"
JOBS="${JOBS:-2}"
[[ $PLACEMENTS =~ ^[1-9][0-9]*$ && $JOBS =~ ^[1-9][0-9]*$ ]] ||
    { echo "bench/aarch64: PLACEMENTS and JOBS must be positive integers" >&2; exit 2; }
BUILDS="${BUILDS:-lua-gcc-pie lua-gcc-nopie lua-clang lua-clang-pac sqlite3-gcc-pie sqlite3-gcc-nopie sqlite3-clang sqlite3-clang-pac}"
LUA_TRAIN="${LUA_TRAIN:-bench/lua/fannkuch.lua 7;bench/lua/binarytrees.lua 8;bench/lua/strings.lua 3000}"
LUA_UNSEEN="${LUA_UNSEEN:-bench/lua/nbody.lua 1000;bench/lua/spectralnorm.lua 30;bench/lua/objects.lua 30}"
SQLITE_TRAIN="${SQLITE_TRAIN:-bench/sqlite/workload.sql}"
SQLITE_UNSEEN="${SQLITE_UNSEEN:-bench/sqlite/unseen.sql}"
SQLITE_SCALE="${SQLITE_SCALE:-20}"
[[ $SQLITE_SCALE =~ ^[1-9][0-9]*$ ]] || { echo "bench/aarch64: SQLITE_SCALE must be a positive integer" >&2; exit 2; }
log() { printf 'bench/aarch64: %s\n' "$*" >&2; }
die() { printf 'bench/aarch64: error: %s\n' "$*" >&2; exit 1; }

BOLT=/usr/lib/llvm-19/bin/llvm-bolt
[[ -x $BOLT ]] || die "$BOLT missing (apt-get install bolt-19)"
BOLT_LAYOUT=(-reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold -split-eh)
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing (apt-get install time)"
command -v qemu-aarch64 >/dev/null || die "qemu-aarch64 missing (apt-get install qemu-user)"
command -v python3 >/dev/null || die "python3 missing"
SYSROOT=/usr/aarch64-linux-gnu
# build-real-aarch64.sh's runner: `-cpu max` enforces PAC (and BTI where marked);
# pauth-impdef=on makes qemu compute PACs with its cheap hash instead of QARMA.
RUNNER="qemu-aarch64 -L $SYSROOT -cpu max,pauth-impdef=on"
if [[ -z ${RIVET:-} ]]; then
    cargo build --release -q -p rivet
    RIVET="$PWD/target/release/rivet"
fi
RIVET="$(readlink -f "$RIVET")"
# One environment for every run: qemu-user hands its own to the program, and the dynamic
# loader's and the C library's start-up depend on it (docs/simulate.md, Determinism).
CLEANENV=(env -i PATH=/usr/bin:/bin LC_ALL=C TZ=UTC)
export LC_ALL=C TZ=UTC

if [[ -z ${REPORT_ONLY:-} ]]; then
declare -A BUILD
if [[ -n ${BUILD_DIRS:-} ]]; then
    for b in $BUILDS; do
        case $b in
            lua-*) pat="lua5.4-*-fixedseed-${b#lua-}" exe=lua ;;
            sqlite3-*) pat="sqlite3-*-${b#sqlite3-}" exe=sqlite3 ;;
            *) die "unknown build $b" ;;
        esac
        # shellcheck disable=SC2086 # a glob
        d=$(cd "$BUILD_DIRS" && ls -d $pat 2>/dev/null | grep -v '\.tmp\.' | head -n 1 || true)
        [[ -n $d && -f $BUILD_DIRS/$d/.complete && -x $BUILD_DIRS/$d/$exe ]] ||
            die "$b: no finished build in $BUILD_DIRS ($pat/$exe with .complete)"
        BUILD[$b]="$BUILD_DIRS/$d/$exe"
    done
else
    # shellcheck disable=SC2086 # a list of words
    while read -r name path; do BUILD[$name]=$path; done < <(scripts/build-real-aarch64.sh $BUILDS)
fi
for b in $BUILDS; do [[ -n ${BUILD[$b]:-} ]] || die "no binary for $b"; done
fi

WORK="$(mktemp -d)"
# Background simulations are stopped first; KEEP=DIR keeps the raw results (simulate's JSON,
# the timings) there, also when the script stops early.
cleanup() {
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [[ -n ${KEEP:-} ]]; then mkdir -p "$KEEP" && cp -r "$WORK/results/." "$KEEP/" 2>/dev/null || true; fi
    rm -rf -- "$WORK"
}
trap cleanup EXIT
RES="$WORK/results"
mkdir -p "$RES" "$WORK/sql"

# scale_sql FILE: FILE as the benchmark runs it (SQLITE_SCALE above), written to $WORK/sql/.
scale_sql() {
    local out
    out="$WORK/sql/$(basename "$1")"
    if [[ $SQLITE_SCALE == 1 ]]; then cp "$1" "$out"; echo "$out"; return; fi
    SCALE=$SQLITE_SCALE perl -ne 's/(WHERE (?:i|x|value) < )(\d{4,})/$1 . int($2 \/ $ENV{SCALE})/ge;
        $skip = 1 if /^-- sudoku/; print unless $skip; $skip = 0 if /^SELECT s FROM x WHERE ind = 0;/' "$1" >"$out"
    echo "$out"
}
SQL_TRAIN=$(scale_sql "$SQLITE_TRAIN")
SQL_UNSEEN=$(scale_sql "$SQLITE_UNSEEN")

# ---------------------------------------------------------------- inputs and runs
program_of() { case $1 in lua-*) echo lua ;; sqlite3-*) echo sqlite ;; esac; }
input_of() { # PROGRAM INPUT -> the list of runs
    case $1.$2 in
        lua.train) echo "$LUA_TRAIN" ;; lua.unseen) echo "$LUA_UNSEEN" ;;
        sqlite.train) echo "$SQL_TRAIN" ;; sqlite.unseen) echo "$SQL_UNSEEN" ;;
    esac
}
# run_input PROGRAM INPUT BIN: every run of the input under qemu, each one's stdout and
# stderr and exit status, in order.
run_input() {
    local program=$1 item script size rc
    local -a items
    IFS=';' read -r -a items <<<"$(input_of "$1" "$2")"
    for item in "${items[@]}"; do
        rc=0
        case $program in
            lua) read -r script size <<<"$item"
                # shellcheck disable=SC2086 # the runner is words
                "${CLEANENV[@]}" $RUNNER "$3" "$script" "$size" </dev/null 2>&1 || rc=$? ;;
            # shellcheck disable=SC2086
            sqlite) "${CLEANENV[@]}" $RUNNER "$3" -bail :memory: <"$item" 2>&1 || rc=$? ;;
        esac
        echo "[exit $rc]"
    done
}
# simulate_input PROGRAM INPUT BIN OUTPREFIX: `rivet simulate` of each run, JSON in
# OUTPREFIX.N.json, the program's stdout in OUTPREFIX.N.out.
simulate_input() {
    local program=$1 bin=$3 prefix=$4 item script size n=0
    local -a items common
    common=(simulate "$bin" --runner "$RUNNER" --placements "$PLACEMENTS" --shift-section .text --json)
    IFS=';' read -r -a items <<<"$(input_of "$1" "$2")"
    for item in "${items[@]}"; do
        case $program in
            lua) read -r script size <<<"$item"
                "${CLEANENV[@]}" "$RIVET" "${common[@]}" --stdout "$prefix.$n.out" -- "$script" "$size" >"$prefix.$n.json" 2>"$prefix.$n.err" ;;
            sqlite) "${CLEANENV[@]}" "$RIVET" "${common[@]}" --stdout "$prefix.$n.out" --stdin "$item" -- -bail :memory: >"$prefix.$n.json" 2>"$prefix.$n.err" ;;
        esac || { echo "simulate failed: $(tail -n 3 "$prefix.$n.err")" >"$prefix.failed"; return 1; }
        n=$((n + 1))
    done
}

# ---------------------------------------------------------------- optimizer commands
# set_cmd TOOL BIN P FDATA OUT [SKIP]: the command line in CMD (SKIP: BOLT's -skip-funcs list)
set_cmd() {
    local tool=$1 bin=$2 prof=$3 fdata=$4 out=$5 skip=${6:-}
    case $tool in
        rivet) CMD=("$RIVET" optimize "$bin" --profile "$prof" -o "$out") ;;
        bolt) CMD=("$BOLT" "$bin" -o "$out" "-data=$fdata" "${BOLT_LAYOUT[@]}" -dyno-stats -update-debug-sections)
            if [[ -n $skip ]]; then CMD+=("-skip-funcs=$skip"); fi ;;
    esac
}
show_cmd() { printf '%s ' "${CMD[@]}" | sed "s|$WORK/[^ ]*/||g; s|$RIVET|rivet|g; s|$BOLT|llvm-bolt|g; s| $||"; }

# ---------------------------------------------------------------- per build
if [[ -z ${REPORT_ONLY:-} ]]; then
sim_pids=()
for b in $BUILDS; do
    bin=${BUILD[$b]}
    program=$(program_of "$b")
    exe=$(basename "$bin")
    d="$WORK/$b"
    r="$RES/$b"
    # Same-length directories, so the three binaries see the same argv[0] and auxv sizes.
    mkdir -p "$d/orig" "$d/bolt" "$d/rivt" "$r"
    cp "$bin" "$d/orig/$exe"
    echo "$b $program $(readlink -f "$bin")" >"$r/meta"

    log "$b: instrumenting and training"
    "$RIVET" instrument "$bin" -o "$d/inst" --profile "$d/P" >"$d/instrument.log" 2>&1 ||
        die "$b: rivet instrument failed: $(tail -n 3 "$d/instrument.log")"
    run_input "$program" train "$d/orig/$exe" >"$d/expected.train"
    run_input "$program" unseen "$d/orig/$exe" >"$d/expected.unseen"
    grep -q '^\[exit 0\]$' "$d/expected.train" || die "$b: the original fails on the training input"
    run_input "$program" train "$d/inst" >"$d/inst.train"
    cmp -s "$d/inst.train" "$d/expected.train" || die "$b: the instrumented binary's output differs on the training input"
    "$RIVET" merge "$d/P" -o "$d/P.fdata" --format fdata >"$d/merge.log" 2>&1 ||
        die "$b: rivet merge failed: $(tail -n 3 "$d/merge.log")"

    log "$b: rivet optimize"
    set_cmd rivet "$bin" "$d/P" "$d/P.fdata" "$d/rivt/$exe"
    show_cmd >"$r/cmd.rivet"; echo >>"$r/cmd.rivet"
    "${CMD[@]}" --verify >"$d/rivet.log" 2>&1 || die "$b: rivet optimize failed: $(grep -m1 -i error "$d/rivet.log" || tail -n 1 "$d/rivet.log")"

    skip=""
    for attempt in 1 2 3 4 5; do
        log "$b: llvm-bolt${skip:+ -skip-funcs=$skip}"
        rm -f "$d/bolt/$exe"
        set_cmd bolt "$bin" "$d/P" "$d/P.fdata" "$d/bolt/$exe" "$skip"
        if "${CMD[@]}" >"$d/bolt.log" 2>&1 && [[ -s $d/bolt/$exe ]]; then break; fi
        # "in function luaV_execute/1(*2)." names luaV_execute/1 (BOLT adds "(*N)" for a
        # function known by N names, which -skip-funcs does not match).
        f=$(grep -m1 -o 'in function [^ ]*' "$d/bolt.log" | sed 's/^in function //; s/[.,:]$//; s/([*][0-9]*)$//' || true)
        grep -m1 'BOLT-ERROR' "$d/bolt.log" >>"$r/bolt.errors" || tail -n 1 "$d/bolt.log" >>"$r/bolt.errors"
        [[ -n $f && $attempt -lt 5 ]] || die "$b: llvm-bolt failed: $(tail -n 1 "$r/bolt.errors")"
        skip=${skip:+$skip,}$f
    done
    echo "$skip" >"$r/bolt.skip"
    cp "$d/bolt.log" "$d/rivet.log" "$r/"
    show_cmd >"$r/cmd.bolt"; echo >>"$r/cmd.bolt"
    grep -m1 -o '[0-9]* out of [0-9]* functions in the binary' "$d/bolt.log" >"$r/bolt.profiled" || true

    for tool in bolt rivt; do
        for input in train unseen; do
            run_input "$program" "$input" "$d/$tool/$exe" >"$d/$tool.$input"
            if ! cmp -s "$d/$tool.$input" "$d/expected.$input"; then
                diff "$d/expected.$input" "$d/$tool.$input" | head -n 20 >&2 || true
                die "$b: $tool's output behaves differently from the original on the $input input"
            fi
        done
    done
    log "$b: both outputs print and exit as the original on both inputs"
    for tool in orig bolt rivt; do stat -c %s "$d/$tool/$exe" >"$r/size.$tool"; done

    # Simulations in the background, JOBS at a time, while the next build trains.
    for input in train unseen; do
        for tool in orig bolt rivt; do
            while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
            simulate_input "$program" "$input" "$d/$tool/$exe" "$r/sim.$tool.$input" &
            sim_pids+=($!)
        done
    done
done

log "waiting for the simulations"
for p in "${sim_pids[@]}"; do wait "$p" || true; done
for b in $BUILDS; do
    r="$RES/$b"
    for f in "$r"/sim.*.failed; do [[ -e $f ]] && die "$b: $(basename "$f" .failed): $(cat "$f")"; done
    # What the program printed under simulate is what it printed under plain qemu.
    for f in "$r"/sim.*.out; do
        input=$(basename "$f" | cut -d. -f3) n=$(basename "$f" | cut -d. -f4)
        cmp -s "$f" "$r/sim.orig.$input.$n.out" || die "$b: $(basename "$f") differs from the original's under simulate"
    done
done

# ---------------------------------------------------------------- optimizer time and memory
# After the simulations, so that they do not compete with them for the two cores.
for b in $BUILDS; do
    bin=${BUILD[$b]}
    exe=$(basename "$bin")
    d="$WORK/$b" r="$RES/$b"
    : >"$r/time.rivet"; : >"$r/time.bolt"
    for ((i = 0; i < REPEATS; i++)); do
        log "$b: optimizer time and memory, pair $((i + 1))/$REPEATS"
        if ((i % 2)); then order=(bolt rivet); else order=(rivet bolt); fi
        for tool in "${order[@]}"; do
            out="$d/timed.$tool"
            rm -f "$out"
            set_cmd "$tool" "$bin" "$d/P" "$d/P.fdata" "$out" "$(cat "$r/bolt.skip")"
            /usr/bin/time -f '%e %U %S %M' -o "$d/time.txt" "${CMD[@]}" >/dev/null 2>&1 || die "$b: $tool failed (timed run)"
            echo "$i $(tail -n 1 "$d/time.txt")" >>"$r/time.$tool"
        done
        cmp -s "$d/timed.rivet" "$d/rivt/$exe" || echo "$i" >>"$r/rivet.nondeterministic"
    done
done

    echo "$BUILDS	$(($(date +%s) - started))	$(date -u '+%Y-%m-%d %H:%M')	$(git rev-parse --short HEAD)	$REPEATS	$PLACEMENTS" >"$RES/run.$(date +%s)"
else
    # The raw results of earlier runs (KEEP=DIR), one directory or several, made into one report.
    for k in $REPORT_ONLY; do cp -r "$k/." "$RES/"; done
fi

# ---------------------------------------------------------------- report
elapsed=$(($(date +%s) - started))
{
    echo "# AArch64: Rivet and llvm-bolt-19 on Lua 5.4 and SQLite 3 (simulated Neoverse N1 front end)"
    echo
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) x86-64 cores ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
    echo "$(. /etc/os-release && echo "$PRETTY_NAME"), Linux $(uname -r), load average at the end $(cut -d' ' -f1-3 /proc/loadavg);"
    echo "rivet $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (with uncommitted changes in crates/)'),"
    echo "$("$BOLT" --version 2>/dev/null | grep -m1 -o 'LLVM version [0-9.]*' | sed 's/LLVM/llvm-bolt/'), $(qemu-aarch64 --version | head -n 1)."
    echo "**Every AArch64 program here ran under qemu-aarch64 on x86-64; nothing ran on Arm hardware.**"
    echo "Reproduce: \`bench/aarch64.sh $REPEATS\` (PLACEMENTS=$PLACEMENTS, SQLITE_SCALE=$SQLITE_SCALE). Runs (builds: minutes, finished, rivet, repeats, placements):"
    for f in "$RES"/run.*; do
        IFS=$'\t' read -r rb rt rd rc rr rp <"$f"
        echo "- $rb: $((rt / 60)) min, $rd UTC, rivet $rc, $rr repeats, $rp placements"
    done
    echo
} >"$WORK/head.md"
python3 - "$RES" "$PLACEMENTS" "$REPEATS" "$LUA_TRAIN" "$LUA_UNSEEN" "$SQLITE_TRAIN" "$SQLITE_UNSEEN" "$SQLITE_SCALE" <<'PY' >"$WORK/body.md"
import glob, json, os, statistics, sys

res, placements, repeats, sql_scale = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[8])
inputs = {("lua", "train"): sys.argv[4], ("lua", "unseen"): sys.argv[5],
          ("sqlite", "train"): sys.argv[6], ("sqlite", "unseen"): sys.argv[7]}
TOOLS = [("orig", "original"), ("bolt", "BOLT"), ("rivt", "Rivet")]

def c(n): return f"{n:,}"
def med(v): return statistics.median(v)

def load(r, tool, inp):
    files = sorted(glob.glob(f"{r}/sim.{tool}.{inp}.*.json"), key=lambda f: int(f.split(".")[-2]))
    runs = [json.load(open(f)) for f in files]
    assert runs, f"no simulation in {r} for {tool} {inp}"
    tot = {k: sum(x[k] for x in runs) for k in ("instructions", "taken_branches", "icache_misses_fully_associative")}
    k = len(runs[0]["placements"])
    tot["i1"] = [sum(x["placements"][j]["icache_misses"] for x in runs) for j in range(k)]
    tot["itlb"] = [sum(x["placements"][j]["itlb_misses"] for x in runs) for j in range(k)]
    tot["shifts"] = [p["shift"] for p in runs[0]["placements"]]
    tot["lines"] = sum(x["lines_touched"] for x in runs)
    tot["short"] = sum(x["short_listings"] + x["unlisted_block_runs"] for x in runs)
    return tot

def times(r, tool):
    rows = [l.split() for l in open(f"{r}/time.{tool}") if l.strip()]
    return {int(x[0]): (float(x[1]), float(x[2]) + float(x[3]), int(x[4])) for x in rows}

builds = [l.split()[0] for l in sorted(open(m).readline() for m in glob.glob(f"{res}/*/meta"))]
order = ["lua-gcc-pie", "lua-gcc-nopie", "lua-clang", "lua-clang-pac",
         "sqlite3-gcc-pie", "sqlite3-gcc-nopie", "sqlite3-clang", "sqlite3-clang-pac"]
builds.sort(key=lambda b: order.index(b) if b in order else 99)
data, summary, opt = {}, [], []
for b in builds:
    r = f"{res}/{b}"
    prog = open(f"{r}/meta").read().split()[1]
    skip = open(f"{r}/bolt.skip").read().strip()
    data[b] = {inp: {t: load(r, t, inp) for t, _ in TOOLS} for inp in ("train", "unseen")}
    for inp in ("train", "unseen"):
        o, bo, ri = (data[b][inp][t] for t, _ in TOOLS)
        bar = 0.8 if skip else 1.0
        rb = med(ri["i1"]) / med(bo["i1"])
        wins = sum(x < y for x in ri["i1"] for y in bo["i1"]) + 0.5 * sum(x == y for x in ri["i1"] for y in bo["i1"])
        summary.append((b, inp, skip, med(o["i1"]), med(bo["i1"]), med(ri["i1"]), rb, bar,
                        wins / (len(ri["i1"]) * len(bo["i1"])),
                        bo["taken_branches"], ri["taken_branches"],
                        (med(ri["i1"]) - ri["lines"]) / max(1, med(bo["i1"]) - bo["lines"])))
    tr, tb = times(r, "rivet"), times(r, "bolt")
    pairs = sorted(set(tr) & set(tb))
    opt.append((b, [tr[i] for i in pairs], [tb[i] for i in pairs],
                os.path.exists(f"{r}/rivet.nondeterministic")))

print("## Summary\n")
print("I1 misses: the median over the placements of each binary's `.text`; *Rivet below BOLT*: the share")
print("of (Rivet placement, BOLT placement) pairs in which Rivet's output misses less (ties count half).")
print("Bar: Rivet's median at most BOLT's, or at most 0.8 of it where BOLT had to skip a function.")
print("*Beyond first touches*: the median less the code lines the run touched at all (each one's first")
print("fetch misses in any cache), Rivet / BOLT: the misses a layout can still remove.\n")
print("| build | input | BOLT skipped | I1 original | I1 BOLT | I1 Rivet | Rivet / BOLT | bar | Rivet below BOLT | beyond first touches, Rivet / BOLT | taken branches Rivet / BOLT |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for b, inp, skip, o, bo, ri, rb, bar, w, tbo, tri, beyond in summary:
    ok = "met" if rb <= bar else "**missed**"
    print(f"| {b} | {inp} | {('`' + skip + '`') if skip else '-'} | {c(round(o))} | {c(round(bo))} | {c(round(ri))} | "
          f"{rb:.3f} | {bar} ({ok}) | {w:.2f} | {beyond:.3f} | {tri / tbo:.3f}{'' if tri <= tbo else ' **more**'} |")
print()
print("Optimizer time and memory, Rivet / BOLT (median of the per-pair ratios; bar: at most 0.5):\n")
print("| build | Rivet wall | BOLT wall | wall ratio | Rivet CPU | BOLT CPU | CPU ratio | Rivet peak RSS | BOLT peak RSS | memory ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for b, tr, tb, nondet in opt:
    w = med([x[0] / y[0] for x, y in zip(tr, tb)])
    cp = med([x[1] / y[1] for x, y in zip(tr, tb)])
    m = med([x[2] / y[2] for x, y in zip(tr, tb)])
    print(f"| {b} | {med([x[0] for x in tr]):.2f} s | {med([x[0] for x in tb]):.2f} s | {w:.2f} | "
          f"{med([x[1] for x in tr]):.2f} s | {med([x[1] for x in tb]):.2f} s | {cp:.2f} | "
          f"{med([x[2] for x in tr]) / 1024:.0f} MB | {med([x[2] for x in tb]) / 1024:.0f} MB | {m:.2f} |")
print(f"\n{repeats} interleaved pairs per build, the order alternating; wall and CPU (user + system) "
      "time and peak RSS from GNU time; neither tool verifying its output in these runs.")
nd = [b for b, _, _, n in opt if n]
print("Rivet's outputs were byte-identical across the timed runs" + (f", except on {', '.join(nd)}." if nd else " on every build."))
print()
print("## Inputs\n")
print("| program | train (the profile's) | unseen |")
print("|---|---|---|")
for p in ("lua", "sqlite"):
    print(f"| {p} | {', '.join('`' + x + '`' for x in inputs[(p, 'train')].split(';'))} | "
          f"{', '.join('`' + x + '`' for x in inputs[(p, 'unseen')].split(';'))} |")
print()
if sql_scale > 1:
    print(f"The SQL files run scaled down (SQLITE_SCALE={sql_scale}): every recursive CTE bound of 1000 or more divided")
    print(f"by {sql_scale}, unseen.sql's sudoku left out. Lua scripts take their size argument.\n")
for b in builds:
    r = f"{res}/{b}"
    skip = open(f"{r}/bolt.skip").read().strip()
    print(f"## {b}\n")
    print(f"`{open(f'{r}/meta').read().split()[2]}`\n")
    print("```")
    print(open(f"{r}/cmd.rivet").read().strip().replace(open(f"{r}/meta").read().split()[2], "BIN"))
    print(open(f"{r}/cmd.bolt").read().strip().replace(open(f"{r}/meta").read().split()[2], "BIN"))
    print("```\n")
    if skip:
        errs = [l.strip() for l in open(f"{r}/bolt.errors")]
        print(f"BOLT stopped without `-skip-funcs={skip}`: " + "; ".join(f"`{e}`" for e in errs) + "\n")
    else:
        print("BOLT needed no `-skip-funcs`.\n")
    prof = open(f"{r}/bolt.profiled").read().strip()
    if prof:
        print(f"BOLT: {prof} have a profile.\n")
    sizes = {t: int(open(f"{r}/size.{t}").read()) for t, _ in TOOLS}
    print("File sizes: " + ", ".join(f"{n} {sizes[t] / 1e6:.2f} MB" for t, n in TOOLS) + ".\n")
    print(f"| input | binary | instructions | taken branches | code lines touched | I1 misses, fully associative | I1 misses, median of {placements} (min..max) | iTLB misses, median (min..max) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for inp in ("train", "unseen"):
        for t, n in TOOLS:
            x = data[b][inp][t]
            print(f"| {inp} | {n} | {c(x['instructions'])} | {c(x['taken_branches'])} | {c(x['lines'])} | {c(x['icache_misses_fully_associative'])} | "
                  f"{c(round(med(x['i1'])))} ({c(min(x['i1']))}..{c(max(x['i1']))}) | "
                  f"{c(round(med(x['itlb'])))} ({c(min(x['itlb']))}..{c(max(x['itlb']))}) |")
    short = sum(data[b][i][t]["short"] for i in ("train", "unseen") for t, _ in TOOLS)
    if short:
        print(f"\nBlocks qemu could not list whole, or ran unlisted: {short}.")
    print()
    print(f"I1 misses at each placement (shift of `.text` in bytes):\n")
    shifts = data[b]["train"]["orig"]["shifts"]
    print("| shift | " + " | ".join(f"{n} {inp}" for inp in ("train", "unseen") for _, n in TOOLS) + " |")
    print("|---:|" + "---:|" * 6)
    for j, s in enumerate(shifts):
        print(f"| {s} | " + " | ".join(c(data[b][inp][t]["i1"][j]) for inp in ("train", "unseen") for t, _ in TOOLS) + " |")
    print()
PY
cat "$WORK/head.md" "$WORK/body.md"
log "done in $((elapsed / 60)) min $((elapsed % 60)) s"
