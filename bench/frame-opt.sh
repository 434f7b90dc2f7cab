#!/usr/bin/env bash
# bench/frame-opt.sh -- whether frame optimizations (issue 38, item 5) would pay on the real
# programs, measured with the one implementation there is: llvm-bolt-19's `-frame-opt=hot`
# (redundant stack loads and unused stores removed, callee-saved spills shrink-wrapped into
# the blocks that need them). For each program, one instrumentation profile (Rivet's, as
# fdata) feeds two llvm-bolt runs that differ only in `-frame-opt=hot`:
#   - what the pass found: BOLT's own FOP and shrink-wrapping counts (loads and stores removed
#     and their execution counts under the profile, the share of executed instructions), and
#     the share of hot code its frame analysis could not handle;
#   - executed instructions and data references (cachegrind, the small train input) of both
#     outputs, whose output must be the original's;
#   - CPU time of `-frame-opt=hot` over without (`rivet bench`: interleaved rounds, median of
#     the per-round ratios with its sign-test interval) on the train input.
# The upper bound of what Rivet could gain by building the pass is what BOLT's removes.
# Programs: Lua and SQLite, gcc and clang builds, and cppcheck (C++), from
# scripts/build-real-programs.sh. llvm-bolt is told to skip what it cannot rewrite (both Lua builds'
# luaV_execute), as in bench/optimize.sh.
#
# Usage: bench/frame-opt.sh [ROUNDS]   (ROUNDS defaults to 15); prints Markdown for docs/passes.md
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
#        PROGRAMS="lua-gcc lua-clang sqlite3-gcc sqlite3-clang cppcheck-gcc"
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s\n' "bench/frame-opt: $*" >&2; }
die() { printf '%s\n' "bench/frame-opt: error: $*" >&2; exit 1; }
REAL_PROGRAMS="lua sqlite3 cppcheck"
# shellcheck source=bench/real-programs.sh
source bench/real-programs.sh
command -v jq >/dev/null || die "jq missing (apt-get install jq)"
ROUNDS=${1:-15}
PROGRAMS=${PROGRAMS:-lua-gcc lua-clang sqlite3-gcc sqlite3-clang cppcheck-gcc}
WORK=$(mktemp -d /tmp/rivet-frame-opt.XXXXXX)
trap 'rm -rf -- "$WORK"' EXIT
start=$(date +%s)

CPPCHECK_TREE=$(dirname "${REAL[cppcheck-gcc]:-/nonexistent/x}")
CPPCHECK_TRAIN="--enable=all --inconclusive --library=cppcheck-lib -q externals/tinyxml2/tinyxml2.cpp"
CPPCHECK_SMALL="--enable=all -q externals/simplecpp/simplecpp.h"

# family NAME: lua, sqlite or cppcheck (how the program is run)
family() { case $1 in lua-*) echo lua ;; sqlite3-*) echo sqlite ;; cppcheck-*) echo cppcheck ;; esac; }
# workload NAME SIZE: the input as one `sh -c` command line, {} standing for the binary; SIZE is
# train or train.small.
workload() {
    local item script size
    local -a items cmds=()
    case $(family "$1") in
        cppcheck)
            if [[ $2 == train ]]; then echo "cd '$CPPCHECK_TREE' && {} $CPPCHECK_TRAIN"; else echo "cd '$CPPCHECK_TREE' && {} $CPPCHECK_SMALL"; fi
            return ;;
    esac
    IFS=';' read -r -a items <<<"${INPUT[$(family "$1").$2]}"
    for item in "${items[@]}"; do
        case $(family "$1") in
            lua) read -r script size <<<"$item"; cmds+=("{} $PWD/$script $size") ;;
            sqlite) cmds+=("{} -bail :memory: <$PWD/$item") ;;
        esac
    done
    local IFS=';'
    echo "${cmds[*]}"
}
# run WORKLOAD BIN [WRAPPER...]: the workload with {} replaced by the (wrapped) binary
run() {
    local cmd=$1 bin=$2
    shift 2
    local with="$*${*:+ }$bin"
    sh -c "${cmd//\{\}/$with}" 2>&1
}
# dyno LOG WHAT: the "after all optimizations" count of WHAT in llvm-bolt's -dyno-stats output
dyno() { awk -v what="$2" '/dynostats after all optimizations/ { on = 1 } on && index($0, ": " what) { gsub(/[^0-9]/, "", $1); print $1; exit }' "$1"; }
fmt() { awk '{ printf "%.3f (%.3f..%.3f)", $1, $2, $3 }' <<<"$1"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.3f%%", 100 * (b - a) / a }'; }
# cg LOGS...: "irefs drefs" summed over cachegrind logs
cg() { cat "$@" | tr -d , | awk '/== I +refs:/ { ir += $4 } /== D +refs:/ { d += $4 } END { printf "%.0f %.0f\n", ir, d }'; }

rows=()
found=()
for name in $PROGRAMS; do
    BIN=${REAL[$name]:-}
    [[ -x $BIN ]] || die "scripts/build-real-programs.sh built no $name"
    dir="$WORK/$name"
    mkdir -p "$dir"
    # cppcheck reads its cfg/ beside the executable.
    [[ $(family "$name") == cppcheck ]] && ln -s "$CPPCHECK_TREE/cfg" "$dir/cfg"
    skip=()
    [[ $name == lua-* ]] && skip=(-skip-funcs=luaV_execute/1)
    log "$name: training"
    "$RIVET" instrument "$BIN" -o "$dir/inst" --profile "$dir/P" >"$dir/instrument.log" 2>&1 ||
        die "rivet instrument failed on $name: $(tail -n 3 "$dir/instrument.log")"
    train=$(workload "$name" train)
    run "$train" "$BIN" >"$dir/expected"
    run "$train" "$dir/inst" >"$dir/inst.out"
    cmp -s "$dir/expected" "$dir/inst.out" || die "$name: the instrumented binary's output differs"
    "$RIVET" merge "$dir/P" -o "$dir/P.fdata" --format fdata >"$dir/merge.log" 2>&1 ||
        die "rivet merge failed on $name: $(tail -n 3 "$dir/merge.log")"
    for v in base fop; do
        extra=()
        [[ $v == fop ]] && extra=(-frame-opt=hot)
        rc=0
        "$BOLT" "$BIN" -o "$dir/$v" -data="$dir/P.fdata" "${BOLT_LAYOUT[@]}" "${skip[@]}" "${extra[@]}" -dyno-stats \
            >"$dir/$v.log" 2>&1 || rc=$?
        [[ $rc == 0 ]] || rm -f "$dir/$v"
    done
    [[ -x $dir/base ]] || die "$name: llvm-bolt failed without -frame-opt: $(tail -n 2 "$dir/base.log")"
    insts=$(dyno "$dir/fop.log" "executed instructions")
    fop_loads=$(sed -n 's/.*FOP deleted \([0-9]*\) load(s) (dyn count: \([0-9]*\)) and \([0-9]*\) store.*/\1 \2 \3/p' "$dir/fop.log")
    sw_stores=$(sed -n 's/.*Shrink wrapping reduced \([0-9]*\) store executions.*/\1/p' "$dir/fop.log")
    sw_moved=$(sed -n 's/.*Shrink wrapping moved \([0-9]*\) spills inserting load\/stores and \([0-9]*\) spills inserting push.*/\1 + \2/p' "$dir/fop.log")
    unrestored=$(sed -n 's/.*FRAME ANALYSIS: \([0-9]*\) function(s) (\([0-9.]*\)% dyn cov) could not have its frame indices restored.*/\1 (\2%)/p' "$dir/fop.log")
    read -r n_loads dyn_loads n_stores <<<"$fop_loads"
    removed=$((dyn_loads + sw_stores))
    share=$(awk -v r="$removed" -v n="$insts" 'BEGIN { printf "%.2f%%", 100 * r / n }')
    found+=("| $name | $n_loads loads ($(commas "$dyn_loads") executions), $n_stores stores | $sw_moved ($(commas "$sw_stores") store executions fewer) | $share of $(commas "$insts") | $unrestored |")
    if [[ ! -x $dir/fop ]]; then
        rows+=("| $name | llvm-bolt fails with -frame-opt=hot: \`$(grep -m1 BOLT-ERROR "$dir/fop.log" | cut -c1-110)\` | - | - | - |")
        continue
    fi
    for v in base fop; do
        run "$train" "$dir/$v" >"$dir/$v.out"
        cmp -s "$dir/$v.out" "$dir/expected" || die "$name: BOLT's $v output prints something else than the original"
    done
    log "$name: cachegrind"
    small=$(workload "$name" train.small)
    for v in base fop; do
        (
            n=0
            IFS=';' read -r -a parts <<<"$small"
            for part in "${parts[@]}"; do
                n=$((n + 1))
                run "$part" "$dir/$v" valgrind "${CG_OPTS[@]}" "--log-file=$dir/cg.$v.$n" >"$dir/cg.$v.$n.out"
            done
        ) &
    done
    wait
    for n in $(cd "$dir" && ls cg.base.*.out | sed 's/cg.base.\([0-9]*\).out/\1/'); do
        cmp -s "$dir/cg.base.$n.out" "$dir/cg.fop.$n.out" || die "$name: the two outputs differ under cachegrind"
    done
    read -r ir_b d_b < <(cd "$dir" && cg $(ls cg.base.* | grep -v '\.out$'))
    read -r ir_f d_f < <(cd "$dir" && cg $(ls cg.fop.* | grep -v '\.out$'))
    if cmp -s "$dir/base" "$dir/fop"; then
        rows+=("| $name | $(commas "$ir_b") (the same file) | $(commas "$d_b") | 1 (the same file) | - |")
        continue
    fi
    log "$name: rivet bench ($ROUNDS rounds)"
    "$RIVET" bench "$dir/base" "$dir/fop" -n "$ROUNDS" --json -- sh -c "$train >/dev/null 2>&1" \
        >"$dir/bench.json" || [[ $? == 3 ]] || die "rivet bench failed on $name"
    ratio=$(jq -r '"\(.ratio) \(.ci_low) \(.ci_high)"' "$dir/bench.json")
    median=$(jq -r '.a.median_cpu_s // .a.median_wall_s' "$dir/bench.json")
    rows+=("| $name | $(commas "$ir_b") → $(commas "$ir_f") ($(pct "$ir_b" "$ir_f")) | $(commas "$d_b") → $(commas "$d_f") ($(pct "$d_b" "$d_f")) | $(fmt "$ratio") | $(printf '%.2f' "$median") s |")
done

measured_on
echo "Reproduce: \`bench/frame-opt.sh $ROUNDS\` (took $(((($(date +%s) - start) + 59) / 60)) minutes)."
echo
echo "What llvm-bolt-19 \`-frame-opt=hot\` finds under the training profile (its own counts):"
echo
echo "| program | redundant loads / unused stores removed | spills shrink-wrapped (load/store + push/pop) | executions removed, of executed instructions | functions whose frame analysis failed (share of executed code) |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${found[@]}"
echo
echo "What it changes (BOLT's layout recipe with and without \`-frame-opt=hot\`, from the same profile):"
echo
echo "| program | executed instructions (cachegrind, small train input) | data references | CPU time, -frame-opt=hot / without (95% CI, train input) | without, median |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
