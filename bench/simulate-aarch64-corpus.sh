#!/usr/bin/env bash
# bench/simulate-aarch64-corpus.sh [PROGRAM...]: AArch64 corpus programs, original and
# optimized by Rivet and by llvm-bolt-19 from the same profile, measured by `rivet simulate`
# (docs/simulate.md): executed instructions, taken branches, I1 misses fully associative and
# the median over 16 placements (Neoverse N1 geometry), iTLB misses. Prints a Markdown table.
#
# The profile is the one tests/aarch64_optimize.rs takes: qemu-aarch64 -d exec,nochain logs
# every executed block's start; their counts become `no_lbr` fdata (function and offset from
# the symbol table), which both optimizers read. Options: Rivet's defaults; llvm-bolt-19
# -reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold -split-eh.
# The corpus programs are small: their code fits the 64 KiB I1, so its misses are nearly all
# cold ones; taken branches and instructions are what tells the layouts apart here.
#
# Default programs: computed_goto.gcc.O3.nopie switch_dense.gcc.O2.nopie
# virtual_calls.gcc.O2.nopie. Needs what the AArch64 corpus needs (qemu-user, the cross
# toolchain), llvm-bolt-19, python3.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
source "$REPO/scripts/lib.sh"
need_cargo
need_packages bolt-19 python3 binutils-aarch64-linux-gnu
PROGRAMS=("$@")
[ ${#PROGRAMS[@]} -gt 0 ] || PROGRAMS=(computed_goto.gcc.O3.nopie switch_dense.gcc.O2.nopie virtual_calls.gcc.O2.nopie)

CORPUS="$(bash "$REPO/scripts/build-corpus-aarch64.sh" | tail -n 1)"
(cd "$REPO" && cargo build --release -q -p rivet)
RIVET="$REPO/target/release/rivet"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=$CORPUS"

# Block-start counts on stdin (qemu's exec log) -> no_lbr fdata, with the symbols in $1.
cat >"$WORK/to_fdata.py" <<'PY'
import bisect, collections, sys
syms = sorted((int(a, 16), int(a, 16) + int(n, 16), name)
              for a, n, name in (l.split() for l in open(sys.argv[1])))
starts = [s[0] for s in syms]
counts = collections.Counter(l.split("/")[1] for l in sys.stdin if l.startswith("Trace "))
print("no_lbr cycles:u")
for pc, n in sorted(counts.items()):
    x = int(pc, 16)
    i = bisect.bisect_right(starts, x) - 1
    if i >= 0 and x < syms[i][1]:
        print(f"1 {syms[i][2]} {x - syms[i][0]:x} {n}")
PY
# One table row from `rivet simulate --json` on stdin.
cat >"$WORK/row.py" <<'PY'
import json, sys
v = json.load(sys.stdin)
i = v["icache_misses"]
cells = [sys.argv[1], sys.argv[2], f"{v['instructions']:,}", f"{v['taken_branches']:,}",
         f"{v['icache_misses_fully_associative']:,}",
         f"{i['median']:,} ({i['min']:,}..{i['max']:,})", f"{v['itlb_misses']['median']:,}"]
print("| " + " | ".join(cells) + " |")
PY

echo "| program | binary | instructions | taken branches | I1 misses, fully associative | I1 misses, 4-way, median of 16 (min..max) | iTLB misses, median |"
echo "|---|---|---:|---:|---:|---:|---:|"
for p in "${PROGRAMS[@]}"; do
    bin="$CORPUS/$p"
    [ -x "$bin" ] || { echo "error: $p is not in the AArch64 corpus ($CORPUS)" >&2; exit 1; }
    aarch64-linux-gnu-nm -S --defined-only "$bin" | awk '$3 ~ /^[Tt]$/ { print $1, $2, $4 }' >"$WORK/$p.syms"
    mkfifo "$WORK/$p.log"
    python3 "$WORK/to_fdata.py" "$WORK/$p.syms" <"$WORK/$p.log" >"$WORK/$p.fdata" &
    $RUNNER -d exec,nochain -D "$WORK/$p.log" "$bin" >/dev/null
    wait $!
    "$RIVET" optimize "$bin" --profile "$WORK/$p.fdata" -o "$WORK/$p.rivet" --verify >/dev/null
    llvm-bolt-19 "$bin" -o "$WORK/$p.bolt" -data="$WORK/$p.fdata" -reorder-blocks=ext-tsp \
        -reorder-functions=cdsort -split-functions -split-all-cold -split-eh >/dev/null 2>&1
    for side in original bolt rivet; do
        b="$bin"; [ "$side" = original ] || b="$WORK/$p.$side"
        "$RIVET" simulate "$b" --runner "$RUNNER" --json | python3 "$WORK/row.py" "$p" "$side"
    done
done
