#!/usr/bin/env bash
# bench/training-runs.sh -- how much each optimizer's simulated I1 misses depend on the
# training run its profile came from.
#
# Some programs do not run the same way twice: a stock Lua seeds its string hashes from the
# clock and from addresses, so two runs of one training input count slightly different paths,
# and an optimizer lays the binary out slightly differently from each profile. The Lua of
# scripts/build-real-programs.sh has one fixed seed, so its profiles differ much less: only
# where memory sizes (paths, addresses) move the garbage collector's steps. bench/optimize.sh
# measures one training run. This script trains RUNS profiles, each a fresh run of the
# instrumented binary on the training input. Run K works in a directory whose name is K
# characters longer than run 0's: real training runs differ in their paths and environment,
# while in one directory the fixed-seed Lua's runs differ in a few counts and give the same
# layouts. It optimizes the binary from each profile with both optimizers (bench/optimize.sh's
# options, each at its default placement), and measures every output under cachegrind on both
# small inputs. Each output must print what the original prints (the script stops otherwise).
#
# Report (markdown on stdout): per program and input, each optimizer's minimum, median and
# maximum I1 misses over the runs, the share of runs in which Rivet's output misses less than
# BOLT's from the same profile, how many of the profiles differ, and every run's figures.
# Over placements, for one profile: bench/icache-offsets.sh.
#
# Usage: bench/training-runs.sh [RUNS] > docs/training-runs.md   (RUNS defaults to 10)
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
#        PROGRAMS    "lua sqlite" (default) or a subset
#        RIVET_OPTIONS  more options for rivet optimize, space-separated
# Needs: llvm-bolt-19 (apt-get install bolt-19), valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-10}"
[[ $RUNS =~ ^[1-9][0-9]*$ && $RUNS -le 100 ]] || { echo "usage: bench/training-runs.sh [RUNS (1-100)]" >&2; exit 2; }
PROGRAMS="${PROGRAMS:-lua sqlite}"
log() { printf 'bench/training-runs: %s\n' "$*" >&2; }
die() { printf 'bench/training-runs: error: %s\n' "$*" >&2; exit 1; }
source bench/real-programs.sh
WORK="$(mktemp -d)"
trap 'rm -rf -- "$WORK"' EXIT
started=$(date +%s)

# range FILE COLUMN -> "min median max" of that column
range() {
    awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ v[NR] = $1 }
        END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%.0f %.0f %.0f\n", v[1], m, v[NR] }'
}
# below FILE A B -> share of rows where column A is below column B, ties counting half
below() {
    awk -v a="$2" -v b="$3" '{ w += ($a < $b) + 0.5 * ($a == $b) } END { printf "%.2f\n", w / NR }' "$1"
}

body="$WORK/body.md"
summary="$WORK/summary.md"
: >"$body"
: >"$summary"
for program in $PROGRAMS; do
    select_program "$program"
    cg_job "$program" train original "$BIN" "$dir" &
    cg_job "$program" unseen original "$BIN" "$dir"
    wait
    # One row per run: run rivet-train rivet-unseen bolt-train bolt-unseen
    : >"$dir/runs.txt"
    : >"$dir/profiles.txt"
    for ((k = 0; k < RUNS; k++)); do
        log "$program: training run $((k + 1))/$RUNS"
        run="$dir/run.$k$(printf '%*s' "$k" '' | tr ' ' x)"
        mkdir -p "$run"
        train_profile "$program" "$BIN" "$run"
        # Its counts, in the fdata conversion (the counter file also holds its own path).
        sha256sum <"$run/P.fdata" | cut -d' ' -f1 >>"$dir/profiles.txt"
        # shellcheck disable=SC2086 # RIVET_OPTIONS is a list of words
        "$RIVET" optimize "$BIN" --profile "$run/P" -o "$run/rivet" ${RIVET_OPTIONS:-} >"$run/rivet.log" 2>&1 ||
            die "rivet optimize failed on $program: $(tail -n 1 "$run/rivet.log")"
        "$BOLT" "$BIN" -o "$run/bolt" -data="$run/P.fdata" "${BOLT_LAYOUT[@]}" "${BOLT_SKIP[@]}" >"$run/bolt.log" 2>&1 ||
            die "llvm-bolt failed on $program: $(tail -n 1 "$run/bolt.log")"
        cg_both "$program" "$dir" "$k" "$run/rivet" "$run/bolt"
        row="$k"
        for v in rivet bolt; do
            for input in train unseen; do
                checked_i1 "$program" "$dir" "$input" "$v.$k" "$v from training run $k"
                row+=" $I1"
            done
        done
        echo "$row" >>"$dir/runs.txt"
        rm -rf "$run"
    done

    # ------------------------------------------------------------ report
    distinct=$(sort -u "$dir/profiles.txt" | wc -l)
    {
        echo "## $TITLE"
        echo
        if ((distinct == 1)); then
            echo "$RUNS training runs gave 1 profile."
        else
            echo "$RUNS training runs gave $distinct different profiles."
        fi
        echo
        echo "| input | optimizer | min | median | max | Rivet below BOLT |"
        echo "|---|---|---:|---:|---:|---:|"
        for input in train unseen; do
            rc=2 bc=4
            [[ $input == unseen ]] && rc=3 bc=5
            read -r _ oi1 _ _ < <(cg_sum "$dir" "$input" original)
            wins=$(below "$dir/runs.txt" "$rc" "$bc")
            for v in rivet bolt; do
                col=$rc name=Rivet w=$wins
                [[ $v == bolt ]] && col=$bc name=BOLT w=""
                read -r min med max < <(range "$dir/runs.txt" "$col")
                echo "| $input | $name | $(commas "$min") | $(commas "$med") | $(commas "$max") | $w |"
                echo "| $TITLE | $input | $name | $(commas "$med") | $(commas "$min")..$(commas "$max") | $w |" >>"$summary"
            done
            echo "| $input | original | $(commas "$oi1") | | | |"
        done
        echo
        echo "Every run (I1 misses):"
        echo
        echo "| run | Rivet train | BOLT train | Rivet unseen | BOLT unseen |"
        echo "|---:|---:|---:|---:|---:|"
        while read -r k rt ru bt bu; do
            echo "| $k | $(commas "$rt") | $(commas "$bt") | $(commas "$ru") | $(commas "$bu") |"
        done <"$dir/runs.txt"
        echo
    } >>"$body"
done

{
    echo "# Instruction-cache misses over training runs: Rivet and llvm-bolt-19"
    echo
    measured_on
    echo "Reproduce: \`bench/training-runs.sh $RUNS > docs/training-runs.md\` (took $(( ($(date +%s) - started + 59) / 60 )) minutes)."
    echo
    echo "Each training run is a fresh run of the instrumented binary on the training input"
    echo "(bench/optimize.sh's); both optimizers get its profile (Rivet's counter file, converted to"
    echo "fdata for BOLT) with bench/optimize.sh's options, each output at its default placement."
    echo "Run K trains in a directory whose name is K characters longer than run 0's, as real training"
    echo "runs differ in their paths."
    echo "Cachegrind: I1 32 KiB 8-way, 64 B lines; small inputs of bench/optimize.sh. *Rivet below"
    echo "BOLT*: the share of runs in which Rivet's output misses less than BOLT's from the same"
    echo "profile. Placements, for one profile: docs/icache-offsets.md."
    echo
    echo "| program | input | optimizer | median | range | Rivet below BOLT |"
    echo "|---|---|---|---:|---:|---:|"
    cat "$summary"
    echo
    cat "$body"
}
