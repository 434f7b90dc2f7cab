#!/usr/bin/env bash
# optimized-profiles.sh -- re-optimizing from perf samples of the *optimized* binary (issue 37,
# item 1): are they as good as samples of the original?
#
#   bench/optimized-profiles.sh [OUT_DIR] [ROUNDS]
#
# For Lua 5.4 and SQLite 3 (the x86-64 gcc builds of scripts/build-real-programs.sh, in
# ~/.cache/rivet/real), on the same workload (Lua: bench/lua/binarytrees.lua 14; SQLite:
# bench/sqlite/workload.sql on :memory:):
#   A  perf record -e cpu-clock:u of the original, aggregated, optimized;
#   B  perf record -e cpu-clock:u of A's output, aggregated back onto the original
#      (`rivet aggregate --original`), optimized again from the original.
# Prints the share of A's samples that mapped back, the dyno stats of both optimizations
# (`rivet optimize --json`), and `rivet bench A B` (CPU time, ROUNDS rounds, default 20): a
# ratio B/A near 1 with an interval holding 1 means "within noise". Everything lands in
# OUT_DIR (default /tmp/rivet-optimized-profiles).
set -euo pipefail

OUT=${1:-/tmp/rivet-optimized-profiles}
ROUNDS=${2:-20}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RIVET=${RIVET:-$ROOT/target/release/rivet}
REAL=${REAL:-$HOME/.cache/rivet/real}
[[ -x $RIVET ]] || { echo "optimized-profiles: $RIVET is missing (cargo build --release -p rivet)" >&2; exit 2; }
command -v perf >/dev/null || { echo "optimized-profiles: perf is missing (apt-get install linux-perf)" >&2; exit 2; }
LUA=$(ls -d "$REAL"/lua5.4-*-fixedseed-gcc/lua 2>/dev/null | head -1)
SQLITE=$(ls -d "$REAL"/sqlite3-*-gcc/sqlite3 2>/dev/null | grep -v testfixture | head -1)
[[ -x $LUA && -x $SQLITE ]] || { echo "optimized-profiles: Lua or SQLite missing in $REAL (scripts/build-real-programs.sh)" >&2; exit 2; }
mkdir -p "$OUT"
cd "$OUT"

# run NAME BINARY: the workload of NAME with BINARY.
run() {
    case $1 in
        lua) "$2" "$ROOT/bench/lua/binarytrees.lua" 14 ;;
        sqlite) "$2" -bail :memory: <"$ROOT/bench/sqlite/workload.sql" ;;
    esac
}

# dyno FILE: the changes the optimization's dyno stats predict on its own profile's run.
dyno() {
    python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["dyno_stats"]
b, a = d["before"], d["after"]
keys = ["taken branches", "unconditional branches", "executed instructions"]
print(", ".join(f"{k} {100 * (a[k] - b[k]) / b[k]:+.1f}%" for k in keys if b[k]))
EOF
}

for name in lua sqlite; do
    case $name in lua) bin=$LUA ;; sqlite) bin=$SQLITE ;; esac
    cp "$bin" "$name"
    echo "== $name ($bin)"
    # perf follows the shell's child, which runs the binary.
    perf record -q -e cpu-clock:u -F 5000 -o "$name.A.data" -- bash -c "$(declare -f run); ROOT='$ROOT'; run $name ./$name" >/dev/null
    "$RIVET" aggregate "$name.A.data" "$name" -o "$name.A.prof" --json >"$name.A.agg.json"
    "$RIVET" optimize "$name" --profile "$name.A.prof" -o "$name.A" --json >"$name.A.opt.json"
    perf record -q -e cpu-clock:u -F 5000 -o "$name.B.data" -- bash -c "$(declare -f run); ROOT='$ROOT'; run $name ./$name.A" >/dev/null
    "$RIVET" aggregate --original "$name" "$name.B.data" "$name.A" -o "$name.B.prof" --json >"$name.B.agg.json"
    "$RIVET" optimize "$name" --profile "$name.B.prof" -o "$name.B" --json >"$name.B.opt.json"
    python3 - "$name.B.agg.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))["mapped_back"]
print(f"samples of the optimized build mapped back: {m['samples_mapped']} of {m['samples']} ({100 * m['samples_share']:.2f}%), {m['samples_in_forwarding_jumps']} in forwarding jumps")
EOF
    echo "dyno A: $(dyno "$name.A.opt.json")"
    echo "dyno B: $(dyno "$name.B.opt.json")"
    cmp <(run $name ./$name.A) <(run $name ./$name.B)
    echo "bench B/A (CPU time, $ROUNDS rounds):"
    # Exit 3 means "significantly slower": a result, not a failure.
    case $name in
        lua) cmd=("$ROOT/bench/lua/binarytrees.lua" 14) ;;
        sqlite) cmd=(sh -c "{} -bail :memory: <'$ROOT/bench/sqlite/workload.sql' >/dev/null") ;;
    esac
    { "$RIVET" bench "./$name.A" "./$name.B" --runs "$ROUNDS" -- "${cmd[@]}" || true; } | tail -4
done
