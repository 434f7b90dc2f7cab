#!/usr/bin/env bash
# bench/cppcheck.sh -- cppcheck (C++) optimized by Rivet and by llvm-bolt-19 from one
# instrumented profile; every binary checked by scripts/check-cppcheck.sh; speed as wall time
# in interleaved rounds (`rivet bench`), on the analysis the profile was taken on and on one
# it never saw.
#
# The binary is scripts/build-real-programs.sh's cppcheck-gcc (Debian's cppcheck source,
# upstream Makefile, g++ -O2 -g -DNDEBUG, -Wl,--emit-relocs; gcc's `.cold` parts kept).
# cppcheck finds its cfg/ beside its own path, so every binary sits in the work directory
# next to a link to the tree's cfg/.
#
#  1. Training: `rivet instrument` and one run of the training analysis (below);
#     `rivet merge P -o P.fdata --format fdata` for BOLT.
#  2. Optimizing, each with its defaults for a profile-guided layout, timed (GNU time, the
#     median of 3 runs): `rivet optimize BIN --profile P` and
#     `llvm-bolt BIN -data=P.fdata -reorder-blocks=ext-tsp -reorder-functions=cdsort
#     -split-functions -split-all-cold -split-eh -dyno-stats -update-debug-sections`.
#  3. Correctness: scripts/check-cppcheck.sh on both outputs (the script stops on a
#     difference), and the unseen analysis's output compared with the original's.
#  4. Speed: `rivet bench --metric wall -n ROUNDS` for Rivet / BOLT, Rivet / original and
#     BOLT / original, on each analysis: the median of per-round ratios with its sign-test
#     interval. No thresholds anywhere.
#
# Analyses (run in the source tree):
#   train:  --enable=all --inconclusive --library=cppcheck-lib externals/tinyxml2/tinyxml2.cpp
#   unseen: --enable=all externals/simplecpp/simplecpp.cpp
#
# Usage: bench/cppcheck.sh [ROUNDS] > docs/cppcheck-benchmark.md   (ROUNDS defaults to 10)
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s\n' "bench/cppcheck: $*" >&2; }
die() { printf '%s\n' "bench/cppcheck: error: $*" >&2; exit 1; }
# shellcheck source=bench/real-programs.sh
source bench/real-programs.sh
command -v jq >/dev/null || die "jq missing (apt-get install jq)"

ROUNDS=${1:-10}
ORIG=${REAL[cppcheck-gcc]:-}
[[ -x $ORIG ]] || die "scripts/build-real-programs.sh built no cppcheck-gcc"
TREE=$(dirname "$ORIG")
W=$(mktemp -d)
trap 'rm -rf -- "$W"' EXIT
ln -s "$TREE/cfg" "$W/cfg"
cp "$ORIG" "$W/original"
TRAIN=(--enable=all --inconclusive --library=cppcheck-lib -q "$TREE/externals/tinyxml2/tinyxml2.cpp")
UNSEEN=(--enable=all -q "$TREE/externals/simplecpp/simplecpp.cpp")
start=$(date +%s)

log "training"
"$RIVET" instrument "$W/original" -o "$W/instrumented" --profile "$W/P" >/dev/null 2>&1
(cd "$TREE" && "$W/instrumented" "${TRAIN[@]}" >/dev/null 2>&1)
"$RIVET" merge "$W/P" -o "$W/P.fdata" --format fdata >/dev/null 2>&1

# timed NAME COMMAND...: runs COMMAND 3 times under GNU time; prints "seconds megabytes" medians
timed() {
    local name=$1 i
    shift
    for i in 1 2 3; do
        /usr/bin/time -f '%e %M' -o "$W/$name.time.$i" "$@" >"$W/$name.log" 2>&1 ||
            die "$name failed: $(tail -n 5 "$W/$name.log")"
    done
    local t m
    t=$(cat "$W/$name".time.* | awk '{ print $1 }' | median)
    m=$(cat "$W/$name".time.* | awk '{ print $2 / 1024 }' | median)
    printf '%s %.0f\n' "$t" "$m"
}
log "optimizing"
read -r rivet_s rivet_mb < <(timed rivet "$RIVET" optimize "$W/original" --profile "$W/P" -o "$W/rivet")
read -r bolt_s bolt_mb < <(timed bolt "$BOLT" "$W/original" -o "$W/bolt" -data="$W/P.fdata" \
    "${BOLT_LAYOUT[@]}" -dyno-stats -update-debug-sections)

log "checking"
for b in rivet bolt; do
    scripts/check-cppcheck.sh "$W/$b" --reference "$ORIG" >&2 || die "$b's cppcheck differs from the original"
    (cd "$TREE" && "$W/$b" "${UNSEEN[@]}" >"$W/$b.unseen" 2>&1) || die "$b failed the unseen analysis"
done
(cd "$TREE" && "$W/original" "${UNSEEN[@]}" >"$W/original.unseen" 2>&1)
for b in rivet bolt; do
    cmp -s "$W/original.unseen" "$W/$b.unseen" || die "$b's unseen analysis differs from the original's"
done

# pair A B INPUT-NAME ARGS...: "ratio lo hi confidence" of B / A in wall time
pair() {
    local a=$1 b=$2 name=$3
    shift 3
    log "bench $b / $a on $name ($ROUNDS rounds)"
    "$RIVET" bench "$W/$a" "$W/$b" --metric wall -n "$ROUNDS" --json -- "$@" >"$W/bench.$b.$a.$name.json" ||
        [[ $? == 3 ]] || die "rivet bench $a $b failed"
    jq -r '"\(.ratio * 1000 | round / 1000) \(.ci_low * 1000 | round / 1000) \(.ci_high * 1000 | round / 1000) \(.coverage) \(.a.median_wall_s * 100 | round / 100) \(.b.median_wall_s * 100 | round / 100)"' \
        "$W/bench.$b.$a.$name.json"
}
declare -A R
for input in train unseen; do
    if [[ $input == train ]]; then args=("${TRAIN[@]}"); else args=("${UNSEEN[@]}"); fi
    R[$input.rivet.bolt]=$(pair bolt rivet "$input" "${args[@]}")
    R[$input.rivet.original]=$(pair original rivet "$input" "${args[@]}")
    R[$input.bolt.original]=$(pair original bolt "$input" "${args[@]}")
done

fmt() { # "ratio lo hi conf a_s b_s" -> "ratio (lo..hi)"
    awk '{ printf "%.3f (%.3f..%.3f)", $1, $2, $3 }' <<<"$1"
}
secs() { awk -v i="$2" '{ print $i }' <<<"$1"; }
conf=$(awk '{ printf "%.0f%%", $4 * 100 }' <<<"${R[train.rivet.bolt]}")

cat <<EOF
# cppcheck (C++): Rivet and llvm-bolt-19

$(measured_on)
Reproduce: \`bench/cppcheck.sh $ROUNDS > docs/cppcheck-benchmark.md\` (took $((($(date +%s) - start) / 60)) minutes).

cppcheck 2.10, the static analyser (C++11, exceptions, templates, gcc's \`.cold\` parts), from
Debian's source package: upstream's Makefile, g++ -O2 -g -DNDEBUG -Wl,--emit-relocs
(scripts/build-real-programs.sh). One profile for both optimizers: Rivet's instrumentation on
the *train* analysis, converted to fdata for BOLT. *Unseen* is an analysis the profile never
saw. Both outputs pass scripts/check-cppcheck.sh (eight analyses, same output and status as
the original) and give the original's output on the unseen analysis.

| analysis | command (paths relative to the source tree) |
|---|---|
| train | \`cppcheck ${TRAIN[*]//$TREE\//}\` |
| unseen | \`cppcheck ${UNSEEN[*]//$TREE\//}\` |

## Wall time ($ROUNDS interleaved rounds per pair, \`rivet bench --metric wall\`)

Median of per-round ratios, with its sign-test interval ($conf confidence). Below 1: the
first binary is faster.

| analysis | original | Rivet / original | BOLT / original | Rivet / BOLT |
|---|---:|---:|---:|---:|
| train | $(secs "${R[train.rivet.original]}" 5) s | $(fmt "${R[train.rivet.original]}") | $(fmt "${R[train.bolt.original]}") | $(fmt "${R[train.rivet.bolt]}") |
| unseen | $(secs "${R[unseen.rivet.original]}" 5) s | $(fmt "${R[unseen.rivet.original]}") | $(fmt "${R[unseen.bolt.original]}") | $(fmt "${R[unseen.rivet.bolt]}") |

## The optimizers (median of 3 runs)

| optimizer | time | peak RSS | output size |
|---|---:|---:|---:|
| Rivet | $rivet_s s | $rivet_mb MB | $(($(stat -c %s "$W/rivet") / 1000000)) MB |
| BOLT, -update-debug-sections | $bolt_s s | $bolt_mb MB | $(($(stat -c %s "$W/bolt") / 1000000)) MB |

Input: $(($(stat -c %s "$W/original") / 1000000)) MB with debug info.

<details><summary>What the optimizers reported</summary>

rivet:

\`\`\`
$(grep -v '^ *$' "$W/rivet.log")
\`\`\`

bolt:

\`\`\`
$(grep -E 'BOLT-(INFO|WARNING)' "$W/bolt.log" | sort | uniq -c | sed 's/^ *1 //' | head -n 40)
\`\`\`

</details>
EOF
