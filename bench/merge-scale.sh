#!/usr/bin/env bash
# merge-scale.sh: `rivet merge` of thousands of SQLite profiles: peak memory against the size
# of one profile in memory, and time against the number of inputs.
#
# 1. A real profile: SQLite's shell (scripts/build-real-programs.sh, gcc build) instrumented
#    and run on bench/sqlite/workload.sql and unseen.sql, the two counter files merged:
#    base.prof (Rivet's format).
# 2. N "hosts": profiles made from base.prof by `merge_bench generate` (crates/profile/
#    examples/merge_bench.rs): each keeps a record with probability KEEP, and has counts of
#    its own (x0.5..2 per host, x0.8..1.2 per record). Every tenth input is weighted :0.5
#    (decayed) and every tenth :3, so weighting is part of the cost.
# 3. For each size in SIZES, `rivet merge --inputs-from LIST` of the first SIZE hosts under
#    /usr/bin/time -v: wall and CPU time, peak resident memory.
# 4. `merge_bench heap` of the largest merge's output and of one host: the heap bytes their
#    records take as a `Profile` (counted by the allocator), the figure peak memory is
#    compared with. The peak also holds the program itself; a merge of one tiny profile
#    shows that floor.
#
# Usage:  bench/merge-scale.sh            (env: SIZES="1000 3000 10000", KEEP=0.5, SEED=37,
#                                          MERGE_BENCH_DIR=~/.cache/rivet/merge-bench)
# Needs:  what scripts/build-real-programs.sh needs; ~0.9 MB of disk per host at KEEP=0.5
#         (9 GB for 10,000; kept in MERGE_BENCH_DIR for reruns; delete it when done).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
source scripts/lib.sh
need_cargo
need_packages time

sizes=${SIZES:-"1000 3000 10000"}
keep=${KEEP:-0.5}
seed=${SEED:-37}
work=${MERGE_BENCH_DIR:-$HOME/.cache/rivet/merge-bench}
mkdir -p "$work"

echo "merge-scale: building rivet and merge_bench (release)" >&2
nice cargo build --release -q -p rivet
nice cargo build --release -q -p rivet-profile --example merge_bench
rivet=$repo/target/release/rivet
tool=$repo/target/release/examples/merge_bench

sqlite=$(scripts/build-real-programs.sh sqlite3 | awk '$1 == "sqlite3-gcc" { print $2 }')
[[ -x $sqlite ]] || { echo "merge-scale: no SQLite build" >&2; exit 1; }

if [[ ! -s $work/base.prof ]]; then
    echo "merge-scale: profiling SQLite" >&2
    "$rivet" instrument "$sqlite" -o "$work/sqlite3.inst" >/dev/null
    rm -f "$work"/*.counts
    for sql in workload unseen; do
        RIVET_PROFILE=$work/$sql.counts "$work/sqlite3.inst" -bail :memory: \
            <"bench/sqlite/$sql.sql" >/dev/null
    done
    "$rivet" merge "$work/workload.counts" "$work/unseen.counts" -o "$work/base.prof"
fi

largest=$(tr ' ' '\n' <<<"$sizes" | sort -n | tail -1)
stamp="base $(sha256sum <"$work/base.prof" | cut -c1-16) keep $keep seed $seed hosts $largest"
if [[ $(cat "$work/hosts.stamp" 2>/dev/null) != "$stamp" ]]; then
    echo "merge-scale: generating $largest host profiles in $work/hosts" >&2
    rm -rf "$work/hosts" "$work/hosts.stamp"
    "$tool" generate "$work/base.prof" "$work/hosts" "$largest" "$seed" "$keep"
    echo "$stamp" >"$work/hosts.stamp"
fi
ls "$work/hosts"/host-*.prof | sort |
    awk '{ w = (NR % 10 == 3) ? ":0.5" : (NR % 10 == 7) ? ":3" : ""; print $0 w }' >"$work/all.txt"

# One tiny profile: the program's own floor.
printf 'rivet-profile 1\nmode branches\norigin unknown\nrecords\n1 f 0 1 f 4 0 1\nend\n' >"$work/tiny.prof"

measure() { # LABEL ARGS...: runs rivet merge ARGS under time -v; prints wall, cpu, peak
    local label=$1 log=$work/time.$1
    shift
    /usr/bin/time -v "$rivet" merge "$@" 2>"$log" >/dev/null ||
        { cat "$log" >&2; exit 1; }
    awk -v label="$label" -F': ' '
        /Elapsed \(wall clock\)/ { n = split($2, t, ":"); wall = (n == 3) ? t[1] * 3600 + t[2] * 60 + t[3] : t[1] * 60 + t[2] }
        /User time/ { cpu += $2 } /System time/ { cpu += $2 }
        /Maximum resident set size/ { rss = $2 }
        END { printf "%s %.2f %.2f %d\n", label, wall, cpu, rss }' "$log"
}

results=$work/results.txt
: >"$results"
measure tiny "$work/tiny.prof" -o "$work/out.tiny.prof" >>"$results"
for n in $sizes; do
    head -n "$n" "$work/all.txt" >"$work/list.$n"
    echo "merge-scale: merging $n profiles" >&2
    measure "$n" --inputs-from "$work/list.$n" -o "$work/out.$n.prof" >>"$results"
done

read -r _ out_records _ out_text _ out_heap _ out_compact < <("$tool" heap "$work/out.$largest.prof")
read -r _ host_records _ host_text _ host_heap _ _ < <("$tool" heap "$work/hosts/host-00000.prof")
kib() { echo $(($1 / 1024)); }
echo
echo "SQLite profiles ($(basename "$(dirname "$sqlite")")), merged with $rivet"
echo "one host's profile: $host_records records, $(kib "$host_text") KiB of text, $(kib "$host_heap") KiB in memory (Profile)"
echo "the merged profile: $out_records records, $(kib "$out_text") KiB of text, $(kib "$out_heap") KiB in memory (Profile), $(kib "$out_compact") KiB as Merger's compact sum"
echo
printf '%8s %9s %9s %14s %14s %15s\n' inputs wall_s cpu_s cpu_ms/input peak_rss_KiB peak/merged_heap
while read -r label wall cpu rss; do
    per=$([[ $label == tiny ]] && echo - || awk -v c="$cpu" -v n="$label" 'BEGIN { printf "%.2f", 1000 * c / n }')
    ratio=$(awk -v r="$rss" -v h="$out_heap" 'BEGIN { printf "%.2f", r * 1024 / h }')
    printf '%8s %9s %9s %14s %14s %15s\n' "$label" "$wall" "$cpu" "$per" "$rss" "$ratio"
done <"$results"
