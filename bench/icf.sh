#!/usr/bin/env bash
# bench/icf.sh -- what `rivet optimize --icf` (identical code folding) changes on the real
# programs: the same optimize from the same instrumentation profile with and without --icf
# (--verify on), then per program
#   - functions folded, and the hot text's bytes (`hot_bytes` of each run's --json summary),
#   - executed instructions and I1 misses (cachegrind, bench/real-programs.sh's geometry) of
#     both binaries on the small train and unseen inputs, outputs compared with the original's,
#   - CPU time of --icf over without (`rivet bench`: interleaved rounds, median of per-round
#     ratios with its sign-test interval) on the train and unseen inputs.
# Programs: those of bench/real-programs.sh (Lua, SQLite; PROGRAMS selects).
#
# Usage: bench/icf.sh [ROUNDS]   (ROUNDS defaults to 10); prints Markdown for docs/passes.md
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
#        PROGRAMS="lua sqlite"
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s\n' "bench/icf: $*" >&2; }
die() { printf '%s\n' "bench/icf: error: $*" >&2; exit 1; }
REAL_PROGRAMS="lua sqlite3"
# shellcheck source=bench/real-programs.sh
source bench/real-programs.sh
command -v jq >/dev/null || die "jq missing (apt-get install jq)"
ROUNDS=${1:-10}
PROGRAMS=${PROGRAMS:-lua sqlite}
WORK=$(mktemp -d /tmp/rivet-icf.XXXXXX)
trap 'rm -rf -- "$WORK"' EXIT
start=$(date +%s)

# workload PROGRAM INPUT: the input as one `sh -c` command line, {} standing for the binary.
workload() {
    local item script size
    local -a items cmds=()
    IFS=';' read -r -a items <<<"${INPUT[$1.$2]}"
    for item in "${items[@]}"; do
        case $1 in
            lua) read -r script size <<<"$item"; cmds+=("{} $script $size >/dev/null") ;;
            sqlite) cmds+=("{} -bail :memory: <$item >/dev/null") ;;
        esac
    done
    local IFS=';'
    echo "${cmds[*]}"
}
fmt() { awk '{ printf "%.3f (%.3f..%.3f)", $1, $2, $3 }' <<<"$1"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f%%", 100 * (b - a) / a }'; }

rows=()
for program in $PROGRAMS; do
    select_program "$program"
    log "$program: training"
    train_profile "$program" "$BIN" "$dir"
    "$RIVET" optimize "$BIN" --profile "$dir/P" -o "$dir/plain" --verify --json >"$dir/plain.json" ||
        die "$program: optimize failed"
    "$RIVET" optimize "$BIN" --profile "$dir/P" -o "$dir/icf" --icf --verify --json >"$dir/icf.json" ||
        die "$program: optimize --icf failed"
    folded=$(jq -r '.icf.folded' "$dir/icf.json")
    hot_folded=$(jq -r '.icf.hot_folded' "$dir/icf.json")
    kept_apart=$(jq -r '.icf.address_taken_not_folded' "$dir/icf.json")
    hot_plain=$(jq -r '.hot_bytes' "$dir/plain.json")
    hot_icf=$(jq -r '.hot_bytes' "$dir/icf.json")
    for input in train unseen; do
        run_input "$program" "$input" "$BIN" >"$dir/expected.$input"
        for v in plain icf; do
            run_input "$program" "$input" "$dir/$v" >"$dir/$v.$input"
            cmp -s "$dir/$v.$input" "$dir/expected.$input" ||
                die "$program: $v prints something else than the original on the $input input"
        done
    done
    log "$program: cachegrind"
    for input in train unseen; do
        cg_job "$program" "$input" original "$BIN" "$dir" &
        cg_job "$program" "$input" plain "$dir/plain" "$dir" &
        cg_job "$program" "$input" icf "$dir/icf" "$dir" &
        wait
    done
    for input in train unseen; do
        read -r ir_p i1_p _ _ < <(cg_sum "$dir" "$input" plain)
        read -r ir_i i1_i _ _ < <(cg_sum "$dir" "$input" icf)
        cmp -s "$dir/cg.$input.icf.out" "$dir/cg.$input.original.out" ||
            die "$program: --icf prints something else under cachegrind ($input)"
        if cmp -s "$dir/plain" "$dir/icf"; then
            # Nothing folded: the two outputs are the same file, and timing them says nothing.
            rows+=("| $TITLE | $input | 0 ($(jq -r '.icf.classes' "$dir/icf.json") classes) | $(commas "$hot_plain") (the same file) | $(commas "$ir_p") (the same file) | $(commas "$i1_p") | 1 (the same file) | - |")
            continue
        fi
        log "$program: rivet bench ($input, $ROUNDS rounds)"
        "$RIVET" bench "$dir/plain" "$dir/icf" -n "$ROUNDS" --json -- sh -c "$(workload "$program" "$input")" \
            >"$dir/bench.$input.json" || [[ $? == 3 ]] || die "rivet bench failed on $program"
        ratio=$(jq -r '"\(.ratio) \(.ci_low) \(.ci_high)"' "$dir/bench.$input.json")
        median=$(jq -r '.a.median_cpu_s // .a.median_wall_s' "$dir/bench.$input.json")
        rows+=("| $TITLE | $input | $folded ($hot_folded ran; $kept_apart kept apart) | $(commas "$hot_plain") → $(commas "$hot_icf") | $(commas "$ir_p") → $(commas "$ir_i") ($(pct "$ir_p" "$ir_i")) | $(commas "$i1_p") → $(commas "$i1_i") | $(fmt "$ratio") | $(printf '%.2f' "$median") s |")
    done
done

measured_on
echo "Reproduce: \`bench/icf.sh $ROUNDS\` (took $(( ($(date +%s) - start + 59) / 60 )) minutes)."
echo
echo "| program | input | functions folded | hot text bytes, without → with | executed instructions (cachegrind, small input) | I1 misses (32 KiB 8-way) | CPU time, --icf / without (95% CI) | without, median |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
