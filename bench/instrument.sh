#!/usr/bin/env bash
# bench/instrument.sh -- the run-time cost of instrumentation: Rivet's instrumented binaries
# side by side with llvm-bolt-19's, on the real programs' benchmark workloads.
#
#   rivet instrument BIN -o OUT --profile FILE
#   /usr/lib/llvm-19/bin/llvm-bolt BIN -instrument -o OUT -instrumentation-file=FILE
#
# llvm-bolt-19 cannot instrument Lua's interpreter loop ("unable to get new address ... in
# function luaV_execute"): it runs with -skip-funcs=luaV_execute/1, and Rivet is measured
# both whole and with the same function skipped, the like-for-like comparison.
#
# Each round runs every variant once, in an order rotated per round, with its counter file
# removed first (both tools then create it: a run's full cost). Per variant: the median wall
# time, and the median over rounds of its time divided by the original's in the same round.
#
# Workloads: Lua runs bench/lua/*.lua at fixed sizes; SQLite's shell runs
# bench/sqlite/workload.sql. Every instrumented run's output is compared with the original's.
#
# Usage: bench/instrument.sh [ROUNDS] > docs/instrument-benchmark.md   (ROUNDS defaults to 7)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-7}"
log() { printf 'bench/instrument: %s\n' "$*" >&2; }
BOLT=/usr/lib/llvm-19/bin/llvm-bolt
[[ -x $BOLT ]] || { log "error: $BOLT missing (apt-get install bolt-19)"; exit 1; }
cargo build --release -q -p rivet
RIVET="$PWD/target/release/rivet"
declare -A REAL
while read -r name path; do REAL[$name]=$path; done < <(scripts/build-real-programs.sh 2>/dev/null)
WORK="$(mktemp -d)"
trap 'rm -rf -- "$WORK"' EXIT

LUA_SCRIPTS=("binarytrees.lua 14" "fannkuch.lua 9" "nbody.lua 100000" "spectralnorm.lua 250" "strings.lua 200000")

# workload PROGRAM BINARY: runs the program's workload with BINARY, output on stdout.
workload() {
    case $1 in
        lua) for s in "${LUA_SCRIPTS[@]}"; do read -r script size <<<"$s"; "$2" "bench/lua/$script" "$size"; done ;;
        sqlite) "$2" -bail :memory: <bench/sqlite/workload.sql ;;
    esac
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# Instrumentation overhead: Rivet and llvm-bolt-19"
echo
echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo),"
echo "$(. /etc/os-release && echo "$PRETTY_NAME"), with \`bench/instrument.sh $ROUNDS\` ($ROUNDS rounds, each variant once per"
echo "round in rotated order; ratio = the median over rounds of the variant's time / the original's in that round)."
echo

for program in lua sqlite; do
    case $program in
        lua) bin="${REAL[lua-gcc]}"; skip=luaV_execute/1 ;;
        sqlite) bin="${REAL[sqlite3-gcc]}"; skip= ;;
    esac
    dir="$WORK/$program"
    mkdir -p "$dir"
    variants=(original rivet bolt)
    declare -A BIN=([original]="$bin")
    declare -A COUNTS=()
    log "$program: instrumenting"
    "$RIVET" instrument "$bin" -o "$dir/rivet" --profile "$dir/rivet.counts" >"$dir/rivet.log"
    BIN[rivet]="$dir/rivet" COUNTS[rivet]="$dir/rivet.counts"
    bolt_args=()
    [[ -n $skip ]] && bolt_args=("-skip-funcs=$skip")
    "$BOLT" "$bin" -instrument -o "$dir/bolt" "-instrumentation-file=$dir/bolt.fdata" "${bolt_args[@]}" >"$dir/bolt.log" 2>&1 ||
        { log "llvm-bolt failed on $program: $(tail -n 1 "$dir/bolt.log")"; exit 1; }
    BIN[bolt]="$dir/bolt" COUNTS[bolt]="$dir/bolt.fdata"
    if [[ -n $skip ]]; then
        "$RIVET" instrument "$bin" -o "$dir/rivet-skip" --profile "$dir/rivet-skip.counts" --skip-funcs "$skip" >"$dir/rivet-skip.log"
        BIN[rivet-skip]="$dir/rivet-skip" COUNTS[rivet-skip]="$dir/rivet-skip.counts"
        variants+=(rivet-skip)
    fi
    workload "$program" "$bin" >"$dir/expected.out" 2>&1
    for v in "${variants[@]}"; do
        workload "$program" "${BIN[$v]}" >"$dir/$v.out" 2>&1
        cmp -s "$dir/$v.out" "$dir/expected.out" || { log "$program/$v: output differs from the original"; exit 1; }
        : >"$dir/$v.times"
    done
    n=${#variants[@]}
    for ((round = 0; round < ROUNDS; round++)); do
        log "$program: round $((round + 1))/$ROUNDS"
        for ((k = 0; k < n; k++)); do
            v=${variants[$(((round + k) % n))]}
            [[ -n ${COUNTS[$v]:-} ]] && rm -f "${COUNTS[$v]}"
            start=$(date +%s.%N)
            workload "$program" "${BIN[$v]}" >/dev/null 2>&1
            end=$(date +%s.%N)
            echo "$round $(echo "$end - $start" | bc -l)" >>"$dir/$v.times"
        done
    done
    echo "## $( [[ $program == lua ]] && echo "Lua 5.4 (lua-gcc, bench/lua scripts)" || echo "SQLite 3 shell (sqlite3-gcc, bench/sqlite/workload.sql)")"
    echo
    echo "| variant | counters | median time | time / original (median of rounds) |"
    echo "|---|---:|---:|---:|"
    for v in "${variants[@]}"; do
        t=$(awk '{ print $2 }' "$dir/$v.times" | median)
        ratio=$(join <(sort "$dir/$v.times") <(sort "$dir/original.times") | awk '{ print $2 / $3 }' | median)
        case $v in
            original) what="original"; counters="" ;;
            rivet) what="Rivet"; counters=$(sed -n 's/.*functions, \([0-9]*\) counters.*/\1/p' "$dir/rivet.log") ;;
            rivet-skip) what="Rivet, $skip skipped"; counters=$(sed -n 's/.*functions, \([0-9]*\) counters.*/\1/p' "$dir/rivet-skip.log") ;;
            bolt) what="llvm-bolt-19${skip:+, $skip skipped}"; counters=$(sed -n 's/.*BOLT-INSTRUMENTER: Total number of counters: \([0-9]*\).*/\1/p' "$dir/bolt.log" | head -n 1) ;;
        esac
        printf '| %s | %s | %.3f s | %.3f |\n' "$what" "${counters:-}" "$t" "$ratio"
    done
    echo
    unset BIN COUNTS
done
