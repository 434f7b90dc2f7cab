#!/usr/bin/env bash
# The README's first command: build the bundled sample with relocations kept and show how
# Rivet models it. Installs the C compiler if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
need_packages gcc
cargo build --release -q -p rivet
out=target/demo
mkdir -p "$out"
gcc -O2 -g -fno-reorder-blocks-and-partition -Wl,--emit-relocs examples/sample.c -o "$out/sample"
echo "built $out/sample: $("$out/sample")"
echo
target/release/rivet inspect "$out/sample"
echo
target/release/rivet inspect "$out/sample" --function run_switch | head -40
echo "..."
