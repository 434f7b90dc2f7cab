#!/usr/bin/env bash
# bench/rewrite-aarch64.sh -- Rivet's rewriter beside llvm-bolt-19 on the AArch64 corpus,
# every output run under qemu-aarch64 (this host is x86-64; no Arm hardware is involved).
#
#   rivet rewrite BIN -o OUT --layout shuffle --seed N --verify
#   llvm-bolt-19 BIN -o OUT -reorder-blocks=cluster-shuffle -reorder-functions=random -lite=0 -bolt-seed=N -v=1
#
# For every executable of the AArch64 corpus (scripts/build-corpus-aarch64.sh) and each
# seed: does the tool write an output, and does that output print and exit as the original?
# Which functions does each leave alone (Rivet: its "not rewritten" summary; BOLT: the
# functions it names in "failed to post-process indirect branches", which it then does not
# rewrite, and a stop with BOLT-ERROR)? Then time and peak memory (GNU time) on the largest
# corpus binaries, as interleaved pairs, medians of the per-pair ratios.
#
# Usage: bench/rewrite-aarch64.sh [SEEDS] [PAIRS] > docs/aarch64-rewrite-benchmark.md
# (SEEDS defaults to 3, PAIRS to 5). Needs llvm-bolt-19 (apt-get install bolt-19).
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS="${1:-3}"
PAIRS="${2:-5}"
log() { printf 'bench/rewrite-aarch64: %s\n' "$*" >&2; }
command -v llvm-bolt-19 >/dev/null || { log "error: llvm-bolt-19 missing (apt-get install bolt-19)"; exit 1; }
cargo build --release -q -p rivet
RIVET="$PWD/target/release/rivet"
C="$(scripts/build-corpus-aarch64.sh 2>/dev/null | tail -n 1)"
SYSROOT=/usr/aarch64-linux-gnu
WORK="$(mktemp -d)"
trap 'rm -rf -- "$WORK"' EXIT

# rewrite TOOL BIN OUT SEED LOG
rewrite() {
    case $1 in
        rivet) "$RIVET" rewrite "$2" -o "$3" --layout shuffle --seed "$4" --verify >"$5" 2>&1 ;;
        bolt) llvm-bolt-19 "$2" -o "$3" -reorder-blocks=cluster-shuffle -reorder-functions=random \
            -lite=0 -bolt-seed="$4" -v=1 >"$5" 2>&1 ;;
    esac
}

declare -A OK FAIL SKIPPED
for tool in rivet bolt; do OK[$tool]=0; FAIL[$tool]=0; SKIPPED[$tool]=0; done
failures=()
runs=0
while IFS=$'\t' read -r name kind _prog _cc _opt _pie _lang path rc exp _needs _flags; do
    [[ $kind == exe ]] || continue
    for seed in $(seq 1 "$SEEDS"); do
        runs=$((runs + 1))
        for tool in rivet bolt; do
            out="$WORK/$tool.out" log="$WORK/$tool.log"
            rm -f "$out"
            if ! rewrite "$tool" "$C/$path" "$out" "$seed" "$log" || [[ ! -s $out ]]; then
                FAIL[$tool]=$((FAIL[$tool] + 1))
                failures+=("$tool: $name seed $seed: rewrite failed: $(grep -m1 -E 'error|ERROR' "$log" | cut -c1-160)")
                continue
            fi
            if [[ $tool == rivet ]]; then
                n="$(awk '/not rewritten:/{f=1; next} f && $1 ~ /^[0-9]+$/ {s += $1} END {print s + 0}' "$log")"
            else
                n="$(grep -c 'failed to post-process indirect branches' "$log" || true)"
            fi
            SKIPPED[$tool]=$((SKIPPED[$tool] + n))
            got=0
            timeout 60 qemu-aarch64 -L "$SYSROOT" -E LD_LIBRARY_PATH="$C" "$out" >"$WORK/stdout" 2>/dev/null || got=$?
            if [[ $got == "$rc" ]] && cmp -s "$WORK/stdout" "$C/$exp"; then
                OK[$tool]=$((OK[$tool] + 1))
            else
                FAIL[$tool]=$((FAIL[$tool] + 1))
                failures+=("$tool: $name seed $seed: runs differently (exit $got, expected $rc)")
            fi
        done
    done
done < <(tail -n +2 "$C/manifest.tsv")

# Time and memory on the three largest executables.
mapfile -t largest < <(awk -F'\t' 'NR>1 && $2=="exe" {print $8}' "$C/manifest.tsv" |
    while read -r p; do printf '%s %s\n' "$(stat -c %s "$C/$p")" "$p"; done | sort -rn | head -3 | cut -d' ' -f2)
measure() { # tool bin -> "seconds kilobytes"
    local t="$WORK/time"
    case $1 in
        rivet) /usr/bin/time -f '%e %M' -o "$t" "$RIVET" rewrite "$2" -o "$WORK/m.out" --layout shuffle --seed 1 >/dev/null 2>&1 || true ;;
        bolt) /usr/bin/time -f '%e %M' -o "$t" llvm-bolt-19 "$2" -o "$WORK/m.out" -reorder-blocks=cluster-shuffle \
            -reorder-functions=random -lite=0 -bolt-seed=1 >/dev/null 2>&1 || true ;;
    esac
    tail -n 1 "$t"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "# Rewriting AArch64 binaries: Rivet and llvm-bolt-19"
echo
echo "Measured $(date -u +%Y-%m-%d) on this project's x86-64 host ($(nproc) cores), rivet $(git rev-parse --short HEAD),"
echo "$(llvm-bolt-19 --version 2>/dev/null | grep -m1 -o 'LLVM version [0-9.]*'), $(qemu-aarch64 --version | head -n 1)."
echo "Every output ran under qemu-aarch64; nothing here ran on Arm hardware."
echo "Reproduce: \`bench/rewrite-aarch64.sh $SEEDS $PAIRS\`."
echo
echo "Rivet: \`rivet rewrite BIN -o OUT --layout shuffle --seed N --verify\`;"
echo "BOLT: \`llvm-bolt-19 BIN -o OUT -reorder-blocks=cluster-shuffle -reorder-functions=random -lite=0 -bolt-seed=N\`."
echo
echo "## Correct rewrites ($runs rewrites of the AArch64 corpus's executables: each with seeds 1 to $SEEDS)"
echo
echo "| | Rivet | BOLT |"
echo "|---|---|---|"
echo "| output written and runs as the original | ${OK[rivet]} / $runs | ${OK[bolt]} / $runs |"
echo "| no output, or output misbehaves | ${FAIL[rivet]} | ${FAIL[bolt]} |"
echo "| functions left as they were (sum over the runs) | ${SKIPPED[rivet]} | ${SKIPPED[bolt]} |"
echo
echo "Rivet counts every function its summary lists as not rewritten (mostly the start files'"
echo "functions outside \`.text\`); BOLT counts the functions whose indirect branches it could"
echo "not analyse (it leaves them in place), and BOLT-ERROR stops count as failed rewrites."
echo
if [[ ${#failures[@]} -gt 0 ]]; then
    echo "Failures:"
    echo
    for f in "${failures[@]}"; do echo "- $f"; done
    echo
fi
echo "## Time and peak memory ($PAIRS interleaved pairs per binary, medians)"
echo
echo "| binary | size | Rivet time | BOLT time | time ratio | Rivet peak RSS | BOLT peak RSS | memory ratio |"
echo "|---|---|---|---|---|---|---|---|"
for p in "${largest[@]}"; do
    : >"$WORK/rt"; : >"$WORK/bt"; : >"$WORK/rm"; : >"$WORK/bm"; : >"$WORK/tr"; : >"$WORK/mr"
    for _ in $(seq 1 "$PAIRS"); do
        read -r rt rm < <(measure rivet "$C/$p")
        read -r bt bm < <(measure bolt "$C/$p")
        echo "$rt" >>"$WORK/rt"; echo "$bt" >>"$WORK/bt"; echo "$rm" >>"$WORK/rm"; echo "$bm" >>"$WORK/bm"
        awk -v a="$rt" -v b="$bt" 'BEGIN {print (b > 0) ? a / b : 0}' >>"$WORK/tr"
        awk -v a="$rm" -v b="$bm" 'BEGIN {print (b > 0) ? a / b : 0}' >>"$WORK/mr"
    done
    printf '| %s | %s KB | %s s | %s s | %.3f | %s MB | %s MB | %.3f |\n' "$p" "$(($(stat -c %s "$C/$p") / 1024))" \
        "$(median <"$WORK/rt")" "$(median <"$WORK/bt")" "$(median <"$WORK/tr")" \
        "$(($(median <"$WORK/rm" | cut -d. -f1) / 1024))" "$(($(median <"$WORK/bm" | cut -d. -f1) / 1024))" "$(median <"$WORK/mr")"
done
