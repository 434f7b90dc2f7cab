#!/usr/bin/env bash
# bench/taildup.sh -- what `rivet optimize --tail-duplication=MODE` changes on the real
# programs: the same optimize (Rivet's defaults: ext-TSP, hot/cold split) from the same
# instrumentation profile without the option and with each mode (--verify on), then per
# program and mode
#   - jumps replaced by a copy, bytes copied, taken jumps of the profile removed, and the dyno
#     stats' taken branches and executed instructions (each run's --json summary),
#   - executed instructions, I1 misses (8-way and fully associative) and branch mispredicts
#     (cachegrind with bench/real-programs.sh's geometry and its branch simulator) on the small
#     inputs,
#   - CPU time of the mode over without (`rivet bench`: interleaved rounds, median of per-round
#     ratios with its sign-test interval) on the full inputs.
# Every output must print what the original prints, on the train and unseen inputs.
#
# Usage: bench/taildup.sh [ROUNDS]   (ROUNDS defaults to 10); prints Markdown for docs/passes.md
# Env:   RIVET=path          a rivet binary (default: cargo build --release -p rivet)
#        PROGRAMS="lua sqlite"
#        MODES="moderate aggressive cache"   the modes measured
#        STAGES="counts cachegrind bench"    what is measured (counts always run: they make
#                                             the binaries)
#        CG_MODES, BENCH_MODES               the modes cachegrind / rivet bench run (default:
#                                             MODES; a mode whose output is the plain file is
#                                             skipped)
#        BENCH_INPUTS="train unseen"
#        CG_FA=fa            also cachegrind with a fully associative I1 (its misses are
#                            capacity misses: conflict misses, which move with addresses, left
#                            out; CG_FA= to skip)
#        TAILDUP_WORK=dir    keep the work directory there (reused: a profile already there
#                            is not trained again)
#        RIVET_REAL_PATHS    see bench/real-programs.sh (read the cache, never build)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s\n' "bench/taildup: $*" >&2; }
die() { printf '%s\n' "bench/taildup: error: $*" >&2; exit 1; }
REAL_PROGRAMS="lua sqlite3"
# shellcheck source=bench/real-programs.sh
source bench/real-programs.sh
command -v jq >/dev/null || die "jq missing (apt-get install jq)"
ROUNDS=${1:-10}
PROGRAMS=${PROGRAMS:-lua sqlite}
MODES=${MODES:-moderate aggressive cache}
STAGES=${STAGES:-counts cachegrind bench}
CG_MODES=${CG_MODES:-$MODES}
BENCH_MODES=${BENCH_MODES:-$MODES}
BENCH_INPUTS=${BENCH_INPUTS:-train unseen}
CG_FA=${CG_FA-fa}
if [[ -n ${TAILDUP_WORK:-} ]]; then
    WORK=$TAILDUP_WORK
    mkdir -p "$WORK"
else
    WORK=$(mktemp -d /tmp/rivet-taildup.XXXXXX)
    trap 'rm -rf -- "$WORK"' EXIT
fi
start=$(date +%s)
staged() { [[ " $STAGES " == *" $1 "* ]]; }

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
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == 0) print "-"; else printf "%+.3f%%", 100 * (b - a) / a }'; }
taken() { jq -r '.dyno_stats.after["taken branches"]' "$1"; }
executed() { jq -r '.dyno_stats.after["executed instructions"]' "$1"; }

count_rows=() cg_rows=() bench_rows=()
for program in $PROGRAMS; do
    select_program "$program"
    if [[ ! -s $dir/P ]]; then
        log "$program: training"
        train_profile "$program" "$BIN" "$dir"
    fi
    run_input "$program" train "$BIN" >"$dir/expected.train"
    run_input "$program" unseen "$BIN" >"$dir/expected.unseen"
    "$RIVET" optimize "$BIN" --profile "$dir/P" -o "$dir/plain" --verify --json >"$dir/plain.json" ||
        die "$program: optimize failed"
    count_rows+=("| $TITLE | none | - | - | - | $(commas "$(taken "$dir/plain.json")") | $(commas "$(executed "$dir/plain.json")") | $(commas "$(jq -r .hot_bytes "$dir/plain.json")") |")
    for mode in $MODES; do
        "$RIVET" optimize "$BIN" --profile "$dir/P" -o "$dir/$mode" --tail-duplication="$mode" \
            --verify --json >"$dir/$mode.json" || die "$program: optimize --tail-duplication=$mode failed"
        for input in train unseen; do
            run_input "$program" "$input" "$dir/$mode" >"$dir/$mode.$input"
            cmp -s "$dir/$mode.$input" "$dir/expected.$input" ||
                die "$program: $mode prints something else than the original on the $input input"
        done
        t0=$(taken "$dir/plain.json") t1=$(taken "$dir/$mode.json")
        e0=$(executed "$dir/plain.json") e1=$(executed "$dir/$mode.json")
        count_rows+=("| $TITLE | $mode | $(jq -r .tail_duplication.duplicated "$dir/$mode.json") | $(jq -r .tail_duplication.bytes "$dir/$mode.json") | $(commas "$(jq -r .tail_duplication.jumps_removed "$dir/$mode.json")") | $(commas "$t1") ($(pct "$t0" "$t1")) | $(commas "$e1") ($(pct "$e0" "$e1")) | $(commas "$(jq -r .hot_bytes "$dir/$mode.json")") |")
    done
    log "$program: optimized ($MODES)"

    if staged cachegrind; then
        log "$program: cachegrind"
        for input in train unseen; do
            for mode in plain $CG_MODES; do
                [[ $mode != plain ]] && cmp -s "$dir/plain" "$dir/$mode" && continue
                for kind in cg $CG_FA; do
                    # As many at once as there are cores.
                    while [[ $(jobs -rp | wc -l) -ge $(nproc) ]]; do wait -n || true; done
                    cg_job "$program" "$input" "$mode" "$dir/$mode" "$dir" "$kind" &
                done
            done
            wait
        done
        for input in train unseen; do
            read -r ir_p i1_p _ mp_p < <(cg_sum "$dir" "$input" plain)
            fa_p=-
            [[ -n $CG_FA ]] && read -r _ fa_p _ _ < <(cg_sum "$dir" "$input" plain fa)
            cg_rows+=("| $TITLE | $input | none | $(commas "$ir_p") | $(commas "$i1_p") | $(commas "$fa_p") | $(commas "$mp_p") |")
            for mode in $CG_MODES; do
                if cmp -s "$dir/plain" "$dir/$mode"; then
                    cg_rows+=("| $TITLE | $input | $mode | the same file | | | |")
                    continue
                fi
                cmp -s "$dir/cg.$input.$mode.out" "$dir/cg.$input.plain.out" ||
                    die "$program: $mode prints something else under cachegrind ($input)"
                read -r ir i1 _ mp < <(cg_sum "$dir" "$input" "$mode")
                fa=-
                if [[ -n $CG_FA ]]; then
                    read -r _ fa _ _ < <(cg_sum "$dir" "$input" "$mode" fa)
                    fa="$(commas "$fa") ($(pct "$fa_p" "$fa"))"
                fi
                cg_rows+=("| $TITLE | $input | $mode | $(commas "$ir") ($(pct "$ir_p" "$ir")) | $(commas "$i1") ($(pct "$i1_p" "$i1")) | $fa | $(commas "$mp") ($(pct "$mp_p" "$mp")) |")
            done
        done
    fi

    if staged bench; then
        for input in $BENCH_INPUTS; do
            for mode in $BENCH_MODES; do
                cmp -s "$dir/plain" "$dir/$mode" && continue
                log "$program: rivet bench $mode ($input, $ROUNDS rounds)"
                "$RIVET" bench "$dir/plain" "$dir/$mode" -n "$ROUNDS" --json -- sh -c "$(workload "$program" "$input")" \
                    >"$dir/bench.$input.$mode.json" || [[ $? == 3 ]] || die "rivet bench failed on $program"
                ratio=$(jq -r '"\(.ratio) \(.ci_low) \(.ci_high)"' "$dir/bench.$input.$mode.json")
                median=$(jq -r '.a.median_cpu_s // .a.median_wall_s' "$dir/bench.$input.$mode.json")
                bench_rows+=("| $TITLE | $input | $mode | $(fmt "$ratio") | $(printf '%.2f' "$median") s |")
            done
        done
    fi
done

measured_on
echo "Reproduce: \`bench/taildup.sh $ROUNDS\` (STAGES=\"$STAGES\"; took $(( ($(date +%s) - start + 59) / 60 )) minutes)."
echo
echo "| program | mode | jumps replaced by a copy | bytes copied | taken jumps of the profile removed | taken branches (dyno, after) | executed instructions (dyno) | hot bytes |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${count_rows[@]}"
if staged cachegrind; then
    echo
    echo "| program | input (small) | mode | executed instructions (cachegrind) | I1 misses (32 KiB 8-way) | I1 misses, fully associative | branch mispredicts |"
    echo "|---|---|---|---:|---:|---:|---:|"
    printf '%s\n' "${cg_rows[@]}"
fi
if staged bench; then
    echo
    echo "| program | input | mode | CPU time, mode / none (95% CI) | none, median |"
    echo "|---|---|---|---:|---:|"
    printf '%s\n' "${bench_rows[@]}"
fi
