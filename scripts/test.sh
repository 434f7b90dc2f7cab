#!/usr/bin/env bash
# The README's test command: installs the system packages the tests use when they are missing,
# builds the test corpus and the real programs (cached under ~/.cache/rivet), and runs every
# check: formatting, clippy, unit, golden, corpus and real-program tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
need_cargo
need_packages gcc g++ clang-19 lld-19 bolt-19 valgrind make dpkg-dev binutils file time gdb linux-perf chromium strace python3 python3-venv

echo "== corpus and real programs" >&2
scripts/build-corpus.sh >/dev/null
scripts/build-real-programs.sh >/dev/null
scripts/build-real-aarch64.sh >/dev/null

echo "== Dask for examples/fleet (a venv under ~/.cache/rivet)" >&2
# Fails the run when Dask cannot be installed: the fleet example's test needs it.
examples/fleet/setup.sh >/dev/null

echo "== format and lints" >&2
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings

echo "== tests" >&2
cargo test --workspace -q

echo "== the README's demo" >&2
scripts/demo.sh >/dev/null
