#!/usr/bin/env bash
# discovery.sh: benchmark Rivet's discovery + CFG construction against llvm-bolt-19's.
#
# A benchmark, not a test: it measures and prints, it never fails on a number. For each input
# it runs N interleaved rounds (the order inside a round alternates) of:
#   rivet       rivet inspect FILE --json: function discovery, disassembly, CFGs, summary
#   bolt-cfg    perf2bolt FILE -pa -p EMPTY -lite=0: BOLT's own "aggregate only" mode, which
#               reads the binary, disassembles and builds the CFG of every function, attaches
#               the (here empty) profile and exits: the same work as rivet, and nothing more
#   bolt-full   llvm-bolt FILE -o OUT -lite=0 -time-rewrite -time-build: a whole rewrite; its
#               timers give the discovery phases (discover storage, read special sections,
#               discover file objects, read debug info, disassemble functions, buildCFG),
#               reported as "bolt phases"; its total also optimizes, emits and writes OUT
# each under /usr/bin/time (wall seconds, peak RSS). It prints a markdown table of medians and
# of the per-round ratios to rivet, and keeps every run in target/bench/discovery-*.tsv.
# --allow-stripped lets BOLT read binaries without .symtab, as Rivet does.
#
# Usage:  bench/discovery.sh [-n ROUNDS] [-x] [FILE...]
#         default 3 rounds; inputs: libLLVM-19 plus the FILEs (-x: the FILEs only)
# Env:    RIVET=path/to/rivet (default target/release/rivet, built if missing),
#         BOLT_DIR=directory of llvm-bolt and perf2bolt (default /usr/lib/llvm-19/bin)
# Needs:  llvm-bolt-19 (Debian bolt-19), GNU time, jq.
# Example: bench/discovery.sh -n 5 ~/.cache/rivet/real/*/lua ~/.cache/rivet/real/*/sqlite3
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
: >"$tmp/empty.pa" # an empty pre-aggregated profile: perf2bolt needs one, and no perf run
mkdir -p "$repo/target/bench"
raw=$repo/target/bench/discovery-$(date -u +%Y%m%dT%H%M%SZ).tsv
printf 'file\tround\ttool\texit\twall_s\tpeak_rss_kb\tphases_s\tdisassemble_s\tbuildcfg_s\n' >"$raw"

# measure TOOL FILE ROUND: one timed run, appended to $raw.
measure() {
    local tool=$1 file=$2 round=$3 rc=0 wall rss phases='' disasm='' cfg='' cmd
    local out=$tmp/$tool.out
    case $tool in
        rivet) cmd=("$tmp/rivet" inspect "$file" --json) ;;
        bolt-cfg) cmd=("$perf2bolt" "$file" -pa -p "$tmp/empty.pa" -o "$tmp/x.fdata" -lite=0
            --allow-stripped) ;;
        bolt-full) cmd=("$llvm_bolt" "$file" -o "$tmp/x.bolt" -lite=0 --allow-stripped
            -time-rewrite -time-build) ;;
    esac
    /usr/bin/time -o "$tmp/time" -f '%e %M' "${cmd[@]}" >"$out" 2>&1 || rc=$?
    read -r wall rss < <(tail -n 1 "$tmp/time")
    if [[ $tool == bolt-full && $rc == 0 ]]; then
        # LLVM timer rows end "<wall> (<pct>%)  <name>"; the greedy match keeps the last column.
        sed -nE 's/.* ([0-9]+\.[0-9]+) +\( *[0-9.]+%\) +([a-zA-Z].*)$/\1\t\2/p' "$out" >"$tmp/timers"
        read -r phases disasm cfg < <(awk -F '\t' '
            $2 ~ /^(discover storage|read special sections|discover file objects|read debug info|disassemble functions|buildCFG)$/ { sum += $1 }
            $2 == "disassemble functions" { d = $1 } $2 == "buildCFG" { c = $1 }
            END { printf "%.3f %.3f %.3f\n", sum, d, c }' "$tmp/timers")
    fi
    if ((rc != 0)); then
        echo "discovery.sh: $tool failed on $file (exit $rc): $(grep -m1 -iE 'error|assert' "$out" || tail -n 1 "$out")" >&2
        cp -- "$out" "$raw.$tool.$(basename "$file").log"
    fi
    # Keep one output of each tool for the function counts below.
    if ((round == 1)); then cp -- "$out" "$tmp/$tool.$(basename "$file").first"; fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$file" "$round" "$tool" "$rc" "$wall" "$rss" \
        "$phases" "$disasm" "$cfg" >>"$raw"
}

for file in "${inputs[@]}"; do
    [[ -f $file ]] || { echo "discovery.sh: skipping $file (not a file)" >&2; continue; }
    echo "discovery.sh: $file, $rounds rounds" >&2
    for ((round = 1; round <= rounds; round++)); do
        order=(rivet bolt-cfg bolt-full)
        ((round % 2 == 0)) && order=(bolt-full bolt-cfg rivet)
        for tool in "${order[@]}"; do measure "$tool" "$file" "$round"; done
    done
done

# --- table ----------------------------------------------------------------------------------
echo
echo "## Discovery + CFG: rivet vs llvm-bolt-19 ($rounds interleaved rounds, medians)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, rivet $(git -C "$repo" describe --always --dirty 2>/dev/null || echo '?') ($rivet), $("$llvm_bolt" --version 2>/dev/null | grep -m1 -i 'llvm version' | sed 's/^ *//')"
echo
echo "| input | tool | wall s | peak RSS MB | wall / rivet | RSS / rivet | wall s per round |"
echo "|---|---|---:|---:|---:|---:|---|"
awk -F '\t' '
function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function add(key, value) { vals[key] = (key in vals) ? vals[key] " " value : value }
NR == 1 { next }
$4 != 0 { failed[$1, $3] = 1 }
$4 == 0 {
    file = $1; round = $2; tool = $3
    if (!(file in seen)) { seen[file] = 1; files[++nfiles] = file }
    if (round > rounds[file]) rounds[file] = round
    wall[file, round, tool] = $5; rss[file, round, tool] = $6
    if (tool == "bolt-full") wall[file, round, "bolt-phases"] = $7
}
END {
    split("rivet bolt-cfg bolt-phases bolt-full", tools, " ")
    label["rivet"] = "rivet inspect --json"
    label["bolt-cfg"] = "perf2bolt -lite=0, empty profile (BOLT discovery + CFG, then exit)"
    label["bolt-phases"] = "llvm-bolt timers: discover + disassemble + buildCFG"
    label["bolt-full"] = "llvm-bolt -lite=0 full rewrite (+ passes, emission, writing)"
    for (f = 1; f <= nfiles; f++) {
        file = files[f]; name = file; sub(/.*\//, "", name)
        for (t = 1; t <= 4; t++) {
            tool = tools[t]
            cell = t == 1 ? "`" name "`" : ""
            ws = ""; rs = ""; wr = ""; rr = ""
            # Per-round ratios: each round is an interleaved pair with rivet.
            for (r = 1; r <= rounds[file]; r++) {
                if (!((file, r, tool) in wall)) continue
                ws = ws (ws == "" ? "" : " ") wall[file, r, tool]
                if (tool != "bolt-phases") rs = rs " " rss[file, r, tool]
                if (!((file, r, "rivet") in wall)) continue
                if (wall[file, r, "rivet"] > 0) wr = wr " " wall[file, r, tool] / wall[file, r, "rivet"]
                if (tool != "bolt-phases" && rss[file, r, "rivet"] > 0) rr = rr " " rss[file, r, tool] / rss[file, r, "rivet"]
            }
            src = tool == "bolt-phases" ? "bolt-full" : tool
            if (ws == "" || (file, src) in failed) {
                printf "| %s | %s | failed | | | | %s |\n", cell, label[tool], ws; continue
            }
            printf "| %s | %s | %.2f | %s | %s | %s | %s |\n", cell, label[tool], median(ws),
                rs == "" ? "n/a" : sprintf("%.0f", median(rs) / 1024),
                wr == "" ? "n/a" : sprintf("%.2f", median(wr)),
                rr == "" ? "n/a" : sprintf("%.2f", median(rr)), ws
        }
    }
}' "$raw"

echo
echo "Functions seen (first round):"
echo
for file in "${inputs[@]}"; do
    name=$(basename "$file")
    [[ -f $tmp/rivet.$name.first ]] || continue
    rivet_counts=$(jq -r '"\(.functions) functions, \(.simple_functions) simple"' "$tmp/rivet.$name.first" 2>/dev/null || echo '?')
    # "BOLT-INFO: 0 out of N functions in the binary (0.0%) have non-empty execution profile"
    bolt_total=$(sed -nE 's/.* out of ([0-9]+) functions in the binary.*/\1/p' "$tmp/bolt-cfg.$name.first" | head -n 1)
    echo "- \`$name\`: rivet $rivet_counts; BOLT ${bolt_total:-?} functions"
done
echo
echo "Raw runs: $raw"
