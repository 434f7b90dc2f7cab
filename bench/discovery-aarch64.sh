#!/usr/bin/env bash
# discovery-aarch64.sh: Rivet's discovery + CFG construction against llvm-bolt-19's on AArch64
# inputs: the Lua and SQLite builds of scripts/build-real-aarch64.sh (issue 34's side by side).
#
# A benchmark, not a test: it measures and prints, it never fails on a number.
# 1. Timing and memory: bench/discovery.sh -x over the inputs (N interleaved rounds of
#    `rivet inspect --json`, `perf2bolt -lite=0` with an empty profile, which reads the binary,
#    disassembles and builds every CFG and exits, and a full `llvm-bolt -lite=0` rewrite; wall
#    time and peak RSS by GNU time; medians and per-round ratios; see that script's header).
# 2. Which functions each models: `rivet inspect --list` (simple or skipped, with the reason)
#    against one untimed `llvm-bolt -lite=0 -print-cfg` run, whose print of every function
#    after CFG construction says `IsSimple: 0/1` (perf2bolt prints no CFGs). BOLT's local
#    names `foo/1(*2)` are compared as `foo`. Per input: counts, then the functions BOLT
#    leaves non-simple and those Rivet skips, with BOLT's -v=1 warnings about them.
# Everything runs on the host (x86-64): BOLT and Rivet read the AArch64 files, nothing runs
# them.
#
# Usage:  bench/discovery-aarch64.sh [-n ROUNDS] [FILE...]
#         default 5 rounds; inputs: every build of scripts/build-real-aarch64.sh, or the FILEs
# Env:    RIVET, BOLT_DIR as for bench/discovery.sh.
# Needs:  llvm-bolt-19 (Debian bolt-19), GNU time, jq; the build script installs the rest.
set -euo pipefail

rounds=5
while getopts 'n:h' opt; do
    case $opt in
        n) rounds=$OPTARG ;;
        h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bolt_dir=${BOLT_DIR:-/usr/lib/llvm-19/bin}
llvm_bolt=$bolt_dir/llvm-bolt
[[ -x $llvm_bolt ]] || { echo "discovery-aarch64.sh: no llvm-bolt in $bolt_dir" >&2; exit 2; }
rivet=${RIVET:-$repo/target/release/rivet}
if [[ ! -x $rivet ]]; then
    echo "discovery-aarch64.sh: building $rivet" >&2
    (cd "$repo" && cargo build --release -p rivet)
fi

inputs=("$@")
if ((${#inputs[@]} == 0)); then
    while read -r _ path; do inputs+=("$path"); done < <("$repo/scripts/build-real-aarch64.sh")
fi
((${#inputs[@]})) || { echo "discovery-aarch64.sh: no input files" >&2; exit 2; }

# --- 1. time and memory ---------------------------------------------------------------------
RIVET=$rivet BOLT_DIR=$bolt_dir "$repo/bench/discovery.sh" -x -n "$rounds" "${inputs[@]}"

# --- 2. simple functions, side by side --------------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
echo
echo "## Simple functions: rivet vs llvm-bolt-19 (after CFG construction)"
echo
echo "| input | rivet functions | rivet simple | BOLT functions | BOLT simple | BOLT non-simple, Rivet simple | Rivet skipped, BOLT simple |"
echo "|---|---:|---:|---:|---:|---:|---:|"
details=()
for file in "${inputs[@]}"; do
    name="$(basename "$(dirname "$file")")/$(basename "$file")"
    # rivet --list: "<address> <size> <name>[/<file>] simple" or "... skipped: <why>"; locals'
    # file names dropped, as BOLT's suffixes are.
    "$rivet" inspect "$file" --list |
        awk '$1 ~ /^0x[0-9a-f]+$/ && $2 ~ /^0x[0-9a-f]+$/ {
            n = $3; sub(/\/.*/, "", n)
            if ($4 == "simple") print "simple\t" n "\t"
            else { why = $0; sub(/^.* skipped: /, "", why); print "skipped\t" n "\t" why } }' |
        sort -u >"$tmp/rivet.tsv"
    rc=0
    "$llvm_bolt" "$file" -o "$tmp/x.bolt" -lite=0 --allow-stripped -print-cfg -print-unknown -v=1 \
        >"$tmp/bolt.txt" 2>&1 || rc=$?
    awk '
        /^Binary Function "/ { n = $0; sub(/^Binary Function "/, "", n); sub(/".*/, "", n); sub(/\/[0-9]+(\(\*[0-9]+\))?$/, "", n) }
        /^  IsSimple +: / { print ($3 == 1 ? "simple" : "non-simple") "\t" n }' "$tmp/bolt.txt" | sort -u >"$tmp/bolt.tsv"
    cut -f2 "$tmp/rivet.tsv" | sort -u >"$tmp/rivet.names"
    awk -F '\t' '$1 == "simple" { print $2 }' "$tmp/rivet.tsv" | sort -u >"$tmp/rivet.simple"
    awk -F '\t' '$1 == "skipped" { print $2 }' "$tmp/rivet.tsv" | sort -u >"$tmp/rivet.skipped"
    awk -F '\t' '$1 == "simple" { print $2 }' "$tmp/bolt.tsv" | sort -u >"$tmp/bolt.simple"
    awk -F '\t' '$1 == "non-simple" { print $2 }' "$tmp/bolt.tsv" | sort -u >"$tmp/bolt.nonsimple"
    comm -12 "$tmp/bolt.nonsimple" "$tmp/rivet.simple" >"$tmp/only-rivet"
    comm -12 "$tmp/rivet.skipped" "$tmp/bolt.simple" >"$tmp/only-bolt"
    # shellcheck disable=SC2016  # the backquotes are markdown
    printf '| `%s` | %d | %d | %d | %d | %d | %d |\n' "$name" \
        "$(wc -l <"$tmp/rivet.tsv")" "$(wc -l <"$tmp/rivet.simple")" \
        "$(wc -l <"$tmp/bolt.tsv")" "$(wc -l <"$tmp/bolt.simple")" \
        "$(wc -l <"$tmp/only-rivet")" "$(wc -l <"$tmp/only-bolt")"
    d="- \`$name\`"
    if ((rc != 0)); then d+=" (llvm-bolt then failed: \`$(grep -m1 -E 'BOLT-ERROR|error:' "$tmp/bolt.txt" | cut -c1-160)\`)"; fi
    d+=$'\n'"  - BOLT non-simple: $(paste -sd ' ' "$tmp/bolt.nonsimple")"
    # BOLT says "potentially escaped address" for a jump table it could not bound, then
    # "failed to post-process indirect branches" for every function with an indirect
    # branch it could not classify.
    escaped=0
    while read -r f; do
        if grep -qE -- "potentially escaped address .* in function $f(/[0-9]+)?(\(\*[0-9]+\))?$" "$tmp/bolt.txt"; then
            escaped=$((escaped + 1))
        fi
    done <"$tmp/bolt.nonsimple"
    d+=$'\n'"  - BOLT non-simple with a table it could not bound (\"potentially escaped address\"): $escaped of $(wc -l <"$tmp/bolt.nonsimple")"
    if [[ -s $tmp/rivet.skipped ]]; then
        d+=$'\n'"  - Rivet skipped: $(awk -F '\t' '$1 == "skipped" { printf "%s (%s); ", $2, $3 }' "$tmp/rivet.tsv")"
    else
        d+=$'\n'"  - Rivet skipped: none"
    fi
    # BOLT's own words about its non-simple functions (-v=1), one line each, deduplicated.
    while read -r f; do
        why="$(grep -E -- "(function|for|flow:) $f(/[0-9]+)?(\(\*[0-9]+\))?( |$)" "$tmp/bolt.txt" |
            grep -vE 'setting size|marking' |
            sed -E 's/ (in function|for) [^ ]+$//; s/: [^ ]+$//; s/0x[0-9a-f]+/ADDR/g' | sort -u | paste -sd ';' - || true)"
        d+=$'\n'"    - $f: ${why:-(no -v=1 message)}"
    done <"$tmp/bolt.nonsimple"
    details+=("$d")
done
echo
echo "Functions each tool leaves out:"
echo
printf '%s\n' "${details[@]}"
