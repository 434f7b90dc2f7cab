#!/usr/bin/env bash
# discovery.sh: benchmark Rivet's discovery + CFG construction against llvm-bolt-19's.
#
# A benchmark, not a test: it measures and prints, it never fails on a number. For each input
# it runs N interleaved rounds (the order inside a round alternates) of:
#   rivet       rivet inspect FILE --json: function discovery, disassembly, CFGs, summary
#   bolt-cfg    perf2bolt FILE -pa -p EMPTY -lite=0: BOLT's "aggregate only" mode reads the
#               binary, disassembles and builds the CFG of every function (-lite=0; with the
#               default -lite it would skip every function without samples), attaches the
#               empty profile and exits: the same work as rivet, and nothing more
#   bolt-full   llvm-bolt FILE -o OUT -lite=0 -time-rewrite: a whole rewrite. Its phase timers
#               give "discover storage", "read special sections", "discover file objects",
#               "read debug info" and "disassemble functions", summed as bolt-phases. BOLT 19
#               times CFG construction only under -time-build, whose per-function timers slow
#               disassembly by a third, so bolt-phases leaves the CFG out: bolt-cfg is the
#               number to compare. The total also runs the passes, emits and writes OUT.
# Wall time is taken around each run (bash EPOCHREALTIME, ms), peak RSS by GNU time (%M).
# BOLT gets --allow-stripped so it reads binaries without .symtab, as Rivet does. The table
# (markdown, on stdout) has medians and the median of per-round ratios to rivet; every run is
# kept in target/bench/discovery-*.tsv.
#
# Usage:  bench/discovery.sh [-n ROUNDS] [-x] [FILE...]
#         default 3 rounds; inputs: libLLVM-19 plus the FILEs (-x: the FILEs only)
# Env:    RIVET=path/to/rivet (default target/release/rivet, built if missing),
#         BOLT_DIR=directory of llvm-bolt and perf2bolt (default /usr/lib/llvm-19/bin)
# Needs:  llvm-bolt-19 (Debian bolt-19), GNU time, jq.
# Example: bench/discovery.sh ~/.cache/rivet/real/*/lua ~/.cache/rivet/real/*/sqlite3
set -euo pipefail

rounds=3
default_inputs=yes
while getopts 'n:xh' opt; do
    case $opt in
        n) rounds=$OPTARG ;;
        x) default_inputs=no ;;
        h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bolt_dir=${BOLT_DIR:-/usr/lib/llvm-19/bin}
llvm_bolt=$bolt_dir/llvm-bolt
perf2bolt=$bolt_dir/perf2bolt # a symlink to llvm-bolt: the name selects aggregation mode
[[ -x $llvm_bolt && -x $perf2bolt ]] || { echo "discovery.sh: no llvm-bolt in $bolt_dir" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "discovery.sh: needs GNU time (apt-get install time)" >&2; exit 2; }
command -v jq >/dev/null || { echo "discovery.sh: needs jq (apt-get install jq)" >&2; exit 2; }

rivet=${RIVET:-$repo/target/release/rivet}
if [[ ! -x $rivet ]]; then
    echo "discovery.sh: building $rivet" >&2
    (cd "$repo" && cargo build --release -p rivet)
fi

inputs=()
# libLLVM-19.so is a symlink to libLLVM.so.19.1 (Debian's llvm-19 package).
[[ $default_inputs == yes ]] && inputs+=("$(realpath /usr/lib/x86_64-linux-gnu/libLLVM-19.so)")
inputs+=("$@")
((${#inputs[@]})) || { echo "discovery.sh: no input files" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
# Others rebuild target/release while we measure: time a private copy.
cp -- "$rivet" "$tmp/rivet"
: >"$tmp/empty.pa" # an empty pre-aggregated profile: perf2bolt needs one, not a perf run
mkdir -p "$repo/target/bench"
raw=$repo/target/bench/discovery-$(date -u +%Y%m%dT%H%M%SZ).tsv
printf 'input\tfile\tround\ttool\texit\twall_s\tpeak_rss_kb\tbolt_phases_s\tdisassemble_s\n' >"$raw"

# measure INDEX FILE ROUND TOOL: one run, appended to $raw; the first round's output is kept.
measure() {
    local index=$1 file=$2 round=$3 tool=$4 rc=0 start end rss phases='' disasm='' cmd
    local out=$tmp/$index.$tool.out
    case $tool in
        rivet) cmd=("$tmp/rivet" inspect "$file" --json) ;;
        bolt-cfg) cmd=("$perf2bolt" "$file" -pa -p "$tmp/empty.pa" -o "$tmp/x.fdata" -lite=0
            --allow-stripped) ;;
        bolt-full) cmd=("$llvm_bolt" "$file" -o "$tmp/x.bolt" -lite=0 --allow-stripped
            -time-rewrite) ;;
    esac
    start=$EPOCHREALTIME
    /usr/bin/time -o "$tmp/time" -f '%M' "${cmd[@]}" >"$out" 2>&1 || rc=$?
    end=$EPOCHREALTIME
    rss=$(tail -n 1 "$tmp/time")
    if [[ $tool == bolt-full && $rc == 0 ]]; then
        # LLVM timer rows end "<wall> (<pct>%)  <name>"; the greedy .* keeps the last column.
        read -r phases disasm < <(sed -nE 's/.* ([0-9]+\.[0-9]+) +\( *[0-9.]+%\) +([a-z].*)$/\1\t\2/p' "$out" |
            awk -F '\t' '
                $2 ~ /^(discover storage|read special sections|discover file objects|read debug info|disassemble functions)$/ { sum += $1 }
                $2 == "disassemble functions" { d = $1 }
                END { printf "%.3f %.3f\n", sum, d }')
    fi
    if ((rc != 0)); then
        echo "discovery.sh: $tool failed on $file (exit $rc): $(grep -m1 -E 'ERROR|error:|Assertion' "$out" || tail -n 1 "$out")" >&2
        grep -m1 -E 'ERROR|error:|Assertion' "$out" >"$tmp/$index.$tool.failure" || tail -n 1 "$out" >"$tmp/$index.$tool.failure"
    fi
    if ((round == 1)); then cp -- "$out" "$tmp/$index.$tool.first"; fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$index" "$file" "$round" "$tool" "$rc" \
        "$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }')" "$rss" "$phases" "$disasm" >>"$raw"
}

for index in "${!inputs[@]}"; do
    file=${inputs[$index]}
    [[ -f $file ]] || { echo "discovery.sh: skipping $file (not a file)" >&2; continue; }
    echo "discovery.sh: $file, $rounds rounds" >&2
    for ((round = 1; round <= rounds; round++)); do
        order=(rivet bolt-cfg bolt-full)
        ((round % 2 == 0)) && order=(bolt-full bolt-cfg rivet)
        for tool in "${order[@]}"; do measure "$index" "$file" "$round" "$tool"; done
    done
done

# --- table ----------------------------------------------------------------------------------
echo
echo "## Discovery + CFG: rivet vs llvm-bolt-19 ($rounds interleaved rounds, medians)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, rivet $(git -C "$repo" describe --always --dirty 2>/dev/null || echo '?'), $("$llvm_bolt" --version 2>/dev/null | grep -m1 -i 'llvm version' | sed 's/^ *//')"
echo
echo "| input | tool | wall s | peak RSS MB | wall / rivet | RSS / rivet | wall s per round |"
echo "|---|---|---:|---:|---:|---:|---|"
awk -F '\t' '
function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
NR == 1 { next }
{
    input = $1; round = $3; tool = $4
    if (!(input in file)) { file[input] = $2; inputs[++ninputs] = input }
    if (round > rounds[input]) rounds[input] = round
}
$5 != 0 { failed[input, tool] = 1; if (tool == "bolt-full") failed[input, "bolt-phases"] = 1; next }
{
    wall[input, round, tool] = $6; rss[input, round, tool] = $7
    if (tool == "bolt-full") wall[input, round, "bolt-phases"] = $8
}
END {
    split("rivet bolt-cfg bolt-phases bolt-full", tools, " ")
    label["rivet"] = "rivet inspect --json"
    label["bolt-cfg"] = "perf2bolt -lite=0, empty profile: discovery + CFG, exit"
    label["bolt-phases"] = "llvm-bolt timers: discover + disassemble (no CFG)"
    label["bolt-full"] = "llvm-bolt -lite=0: full rewrite, output written"
    for (i = 1; i <= ninputs; i++) {
        input = inputs[i]
        # parent/name: the same program built by two compilers stays distinguishable.
        n = split(file[input], part, "/"); name = n > 1 ? part[n - 1] "/" part[n] : part[n]
        for (t = 1; t <= 4; t++) {
            tool = tools[t]
            cell = t == 1 ? "`" name "`" : ""
            ws = ""; rs = ""; wr = ""; rr = ""
            for (r = 1; r <= rounds[input]; r++) {
                if (!((input, r, tool) in wall)) continue
                ws = ws (ws == "" ? "" : " ") wall[input, r, tool]
                if (tool != "bolt-phases") rs = rs " " rss[input, r, tool]
                # A round is an interleaved pair with rivet: the ratio is taken inside it.
                if (!((input, r, "rivet") in wall)) continue
                if (wall[input, r, "rivet"] > 0) wr = wr " " wall[input, r, tool] / wall[input, r, "rivet"]
                if (tool != "bolt-phases" && rss[input, r, "rivet"] > 0) rr = rr " " rss[input, r, tool] / rss[input, r, "rivet"]
            }
            if ((input, tool) in failed) { printf "| %s | %s | failed (see below) | | | | |\n", cell, label[tool]; continue }
            if (ws == "") continue
            printf "| %s | %s | %.3f | %s | %s | %s | %s |\n", cell, label[tool], median(ws),
                rs == "" ? "n/a" : sprintf("%.0f", median(rs) / 1024),
                wr == "" ? "n/a" : sprintf("%.1f", median(wr)),
                rr == "" ? "n/a" : sprintf("%.1f", median(rr)), ws
        }
    }
}' "$raw"

echo
echo "Functions found (first round) and failures:"
echo
for index in "${!inputs[@]}"; do
    file=${inputs[$index]}
    [[ -f $tmp/$index.rivet.first ]] || continue
    rivet_counts=$(jq -r '"\(.functions) functions, \(.simple_functions) simple"' "$tmp/$index.rivet.first" 2>/dev/null || echo '?')
    # "BOLT-INFO: 0 out of N functions in the binary (0.0%) have non-empty execution profile"
    bolt_total=$(sed -nE 's/.* out of ([0-9]+) functions in the binary.*/\1/p' "$tmp/$index.bolt-cfg.first" | head -n 1)
    echo "- \`$file\`: rivet $rivet_counts; BOLT ${bolt_total:-?} functions"
    for tool in rivet bolt-cfg bolt-full; do
        if [[ -f $tmp/$index.$tool.failure ]]; then
            echo "  - $tool failed: \`$(cut -c1-200 "$tmp/$index.$tool.failure")\`"
        fi
    done
done
echo
echo "Raw runs: $raw"
