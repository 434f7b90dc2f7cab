#!/usr/bin/env bash
# The README's first command: the whole workflow on the bundled sample, in well under a minute.
#
#   1. build examples/handlers.c with relocations kept (-Wl,--emit-relocs)
#   2. profile it: rivet instrument, then one training run of the instrumented build
#   3. optimize it with that profile (and verify the output)
#   4. benchmark original against optimized (interleaved runs, CPU time, confidence interval)
#   5. write the HTML report (hot functions, dyno stats, heatmaps before and after)
#
# Installs the C compiler if it is missing. Everything goes to target/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
need_cargo
need_packages gcc
step() { printf '\n== %s\n' "$*"; }

step "building Rivet (release)"
cargo build --release -q -p rivet
rivet=target/release/rivet
out=target/demo
mkdir -p "$out"
rm -f "$out"/handlers.counts

step "1. the sample, built with relocations kept"
(
    set -x
    gcc -O2 -g -fno-reorder-blocks-and-partition -Wl,--emit-relocs examples/handlers.c -o "$out/handlers"
)
echo "a request dispatcher: 256 handlers whose hot paths are scattered over $(size -A "$out/handlers" | awk '$1 == ".text" { printf "%d KiB", $2 / 1024 }') of code"

step "2. profile: instrument, then a training run"
(
    set -x
    "$rivet" instrument "$out/handlers" -o "$out/handlers.inst" --profile "$out/handlers.counts"
    "$out/handlers.inst" 2000000 >/dev/null
)

step "3. optimize with the profile"
(
    set -x
    "$rivet" optimize "$out/handlers" --profile "$out/handlers.counts" -o "$out/handlers.fast" --verify
)

step "4. benchmark: original (A) against optimized (B)"
(
    set -x
    "$rivet" bench "$out/handlers" "$out/handlers.fast" --runs 10 -- 20000000
) | tee "$out/bench.txt"

step "5. report"
(
    set -x
    "$rivet" report "$out/handlers" --profile "$out/handlers.counts" \
        --optimized "$out/handlers.fast" -o "$out/report.html"
)

echo
grep -E '^(B is|no significant)' "$out/bench.txt" | sed 's/^/result: /' || true
echo "report: $(pwd)/$out/report.html (open it in a browser)"
