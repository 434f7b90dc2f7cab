#!/usr/bin/env bash
# bench/scale.sh -- what Rivet and llvm-bolt-19 cost on big binaries (issue 36): time (wall and
# CPU) and peak memory of instrument, a training run, aggregate, merge and optimize, on programs
# of 50 MB, 200 MB and 1 GB of executable code made by bench/scale/gen.py.
#
# Per size S (MiB of code), with prog = the generated program (cached, see bench/scale/README.md):
#  1. reference: `prog` and `prog 2` print the checksums every correct rewrite must print.
#  2. instrument:  rivet instrument prog -o prog.rinst --profile r1.counts
#                  llvm-bolt prog -instrument -o prog.binst -instrumentation-file=b.fdata
#  3. train:       each instrumented binary runs `prog.Xinst` (timed: the "train" row) and
#                  `prog.Xinst 2` (a second profile, for merge); both must print the original's
#                  checksums. Rivet's runs count into r1.counts / r2.counts (RIVET_PROFILE),
#                  BOLT's into b.fdata, copied to b1.fdata / b2.fdata after each run.
#  4. merge:       rivet merge r1.counts r2.counts -o r.prof
#     merge-sum:   rivet merge r1.counts r2.counts -o r-sum.counts   (summed counter file)
#                  merge-fdata b1.fdata b2.fdata -o b.fdata
#  5. aggregate:   perf record -e cpu-clock:u -F $SAMPLE_FREQ -o perf.data -- prog $SAMPLE_REPS
#                  (one recording, not timed), then
#                  rivet aggregate perf.data prog -o s.prof
#                  perf2bolt -nl -p perf.data -o s.fdata prog
#  6. optimize:    rivet optimize prog --profile r.prof -o prog.rivet        (Rivet's defaults)
#                  llvm-bolt prog -o prog.bolt -data=b.fdata -reorder-blocks=ext-tsp
#                    -reorder-functions=cdsort -split-functions -split-all-cold -split-eh
#                    -dyno-stats -update-debug-sections
#                  (BOLT's usual recipe; -lite is its default). -update-debug-sections because
#                  without it llvm-bolt-19 writes no debug sections at all (the 50 MB program's
#                  output: 95 MB and no .debug_*, against 276 MB with them), while Rivet always
#                  carries the debug info over, rewritten: the two outputs would not be the
#                  same product. BOLT_DEBUG=0 measures BOLT without it.
#                  each from its own merged instrumentation profile; both outputs must print
#                  the original's checksum (`prog`) or the row says "WRONG OUTPUT".
#     Fallbacks, so that every size has an optimize row: a tool whose instrumentation chain
#     fails (does not fit in $MEM_CAP_GB) optimizes from the samples of step 5 instead
#     (optimize-samples, both tools; BOLT from rivet aggregate's profile as fdata when
#     perf2bolt failed too); when neither tool could instrument, both also optimize from the
#     instrumentation profile of the largest smaller size measured, carried over to this
#     program by bench/scale/synth_profile.py (optimize-synth: ~11% of functions profiled,
#     like the instrumented sizes, where samples profile ~1%).
# Every step runs under `/usr/bin/time` (wall, user+sys, maximum resident set size) and
# `timeout $STEP_TIMEOUT`, and is killed when its resident memory passes $MEM_CAP_GB, so that a
# run which does not fit fails alone instead of pushing the shared machine into the OOM killer.
# A step that fails, times out or runs out of memory is recorded as such, and the steps that
# need its output are skipped; the script goes on with the other tool and the other sizes.
#
# Results accumulate in $RESULTS (one row per size, tool and step; re-running a size replaces
# its rows), so sizes can be measured in separate runs; each run then writes the report of all
# sizes measured so far: a markdown table on stdout and the plot $PLOT (PNG, gnuplot).
#
# Usage: bench/scale.sh [SIZE_MB...]        (default: 50 200)
#        bench/scale.sh --report            (only the table and plot of the results so far)
# Env:   RIVET=path       the rivet binary (default: target/release/rivet, built with cargo)
#        STEP_TIMEOUT     seconds per step (default 3600)
#        MEM_CAP_GB       resident-memory cap per step, GiB (default 16)
#        SAMPLE_FREQ      perf sampling frequency (default 10000), SAMPLE_REPS workload
#                         repetitions under perf (default 10000 / SIZE_MB: the workload grows
#                         with the program, so every size gets about the same number of samples)
#        TOOLS            "rivet bolt" (default) or one of them
#        GEN_UNITS        units per generated module (default 500; a smaller one for quick tests)
#        KEEP=1           keep the outputs in the work directory $CACHE/work/SIZE (default:
#                         only the logs and times stay; outputs are several copies of the program)
#        CACHE            default ~/.cache/rivet/scale; RESULTS default $CACHE/results.tsv;
#                         PLOT default docs/scale.png
# Needs: python3, gcc/g++, lld-19, bolt-19, linux-perf, gnuplot (installed with apt-get when
# missing), GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

CACHE="${CACHE:-$HOME/.cache/rivet/scale}"
RESULTS="${RESULTS:-$CACHE/results.tsv}"
PLOT="${PLOT:-docs/scale.png}"
STEP_TIMEOUT="${STEP_TIMEOUT:-3600}"
MEM_CAP_GB="${MEM_CAP_GB:-16}"
SAMPLE_FREQ="${SAMPLE_FREQ:-10000}"
SAMPLE_REPS="${SAMPLE_REPS:-}"  # per size when empty: 10000 / SIZE_MB, at least 1
TOOLS="${TOOLS:-rivet bolt}"
GEN_UNITS="${GEN_UNITS:-500}"
LLVM=/usr/lib/llvm-19/bin
BOLT="$LLVM/llvm-bolt"
PERF2BOLT="$LLVM/perf2bolt"
MERGE_FDATA="$LLVM/merge-fdata"
BOLT_RECIPE=(-reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold -split-eh -dyno-stats)
if [ "${BOLT_DEBUG:-1}" = 1 ]; then
    BOLT_RECIPE+=(-update-debug-sections)
fi

die() { echo "bench/scale: error: $*" >&2; exit 1; }
log() { echo "[scale $(date -u +%H:%M:%S)] $*" >&2; }

report_only=0
sizes=()
for a in "$@"; do
    case $a in
        --report) report_only=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) [[ $a =~ ^[1-9][0-9]*$ ]] || die "usage: bench/scale.sh [SIZE_MB...] | --report (not '$a')"
           sizes+=("$a") ;;
    esac
done
[ ${#sizes[@]} -gt 0 ] || sizes=(50 200)
for v in STEP_TIMEOUT MEM_CAP_GB SAMPLE_FREQ GEN_UNITS ${SAMPLE_REPS:+SAMPLE_REPS}; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
done
mkdir -p "$CACHE"

need_packages gnuplot-nox time
if [ $report_only = 0 ]; then
    need_packages python3 gcc g++ lld-19 bolt-19 linux-perf
    for t in "$BOLT" "$PERF2BOLT" "$MERGE_FDATA" "$LLVM/ld.lld"; do
        [ -x "$t" ] || die "$t missing after installing bolt-19 and lld-19"
    done
    command -v perf >/dev/null || die "perf missing after installing linux-perf"
    if [ -z "${RIVET:-}" ]; then
        need_cargo
        log "building rivet (cargo build --release -p rivet)"
        nice cargo build --release -q -p rivet >&2 || die "cargo build --release -p rivet failed"
        RIVET=$PWD/target/release/rivet
    fi
    [ -x "$RIVET" ] || die "RIVET=$RIVET is not an executable"
    RIVET_VERSION="$("$RIVET" --version) ($(realpath "$RIVET"), built $(date -u -r "$RIVET" +%Y-%m-%dT%H:%MZ))"
    echo "$RIVET_VERSION" > "$CACHE/rivet-version.txt"
fi

# tree_rss_kb PID: resident memory of PID and all its descendants, in kB.
tree_rss_kb() {
    ps -eo pid=,ppid=,rss= | awk -v root="$1" '
        { parent[$1] = $2; rss[$1] = $3 }
        END {
            total = 0
            for (p in parent) {
                q = p
                while (q != "" && q != root && q > 1) q = parent[q]
                if (q == root) total += rss[p]
            }
            print total
        }'
}

# measure SIZE TOOL STEP DIR CMD...: runs CMD bounded, appends a row to $RESULTS.tmp.$SIZE.
# Row: size tool step status wall_s cpu_s maxrss_kb  (status: ok, timeout, over-cap, oom,
# failed:RC). The bounds: `timeout $STEP_TIMEOUT`, and a watchdog that polls the resident
# memory of the command's process tree every second and kills it above $MEM_CAP_GB (an RSS
# cap, not an address-space one: LLVM reserves far more address space than it touches).
measure() {
    local size=$1 tool=$2 step=$3 dir=$4
    shift 4
    local tf="$dir/$tool-$step.time" lf="$dir/$tool-$step.log" rc=0 capped=0
    local cap_kb=$((MEM_CAP_GB * 1024 * 1024))
    log "$size MB: $tool $step"
    /usr/bin/time -f '%e %U %S %M' -o "$tf" timeout -k 30 "$STEP_TIMEOUT" nice -n 5 "$@" >"$lf" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$(tree_rss_kb "$pid")" -gt "$cap_kb" ]; then
            capped=1
            local g   # time's child is timeout, which leads the process group of the command
            for g in $(ps -eo pid=,ppid= | awk -v p="$pid" '$2 == p { print $1 }'); do
                kill -KILL -- "-$g" 2>/dev/null || true
            done
            break
        fi
        sleep 1
    done
    wait "$pid" || rc=$?
    local wall user sys rss status
    read -r wall user sys rss < <(grep -E '^[0-9.]+ [0-9.]+ [0-9.]+ [0-9]+$' "$tf" | tail -n 1) ||
        { wall=0 user=0 sys=0 rss=0; }
    if [ $capped = 1 ]; then status=over-cap; rss=$cap_kb
    elif [ $rc = 0 ]; then status=ok
    elif [ $rc = 124 ] || [ $rc = 137 ]; then status=timeout
    elif grep -qiE 'out of memory|memory allocation of|std::bad_alloc|cannot allocate' "$lf"; then status=oom
    else status="failed:$rc"
    fi
    [ $status = ok ] || log "$size MB: $tool $step: $status (see $lf: $(tail -n 2 "$lf" | tr '\n' ' ' | cut -c1-200))"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$tool" "$step" "$status" "$wall" \
        "$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')" "$rss" >> "$RESULTS.tmp.$size"
    [ $status = ok ]
}

# checksum_of DIR NAME BIN ARGS...: the binary's first output line, or "" if it failed.
check_output() {
    local size=$1 tool=$2 step=$3 want=$4 got=$5
    if [ "$got" != "$want" ]; then
        log "$size MB: $tool $step: WRONG OUTPUT: '$got', the original prints '$want'"
        printf '%s\t%s\t%s-output\twrong\t0\t0\t0\n' "$size" "$tool" "$step" >> "$RESULTS.tmp.$size"
        return 1
    fi
}

# optimize_run SIZE TOOL STEP PROFILE: optimize prog with PROFILE, run the output, compare.
optimize_run() {
    local size=$1 tool=$2 step=$3 profile=$4 got out="$w/prog.$2"
    if [ "$tool" = rivet ]; then
        measure "$size" rivet "$step" "$w" "$RIVET" optimize "$prog" --profile "$profile" -o "$out" || return 0
    else
        measure "$size" bolt "$step" "$w" "$BOLT" "$prog" -o "$out" -data="$profile" "${BOLT_RECIPE[@]}" || return 0
    fi
    got=$("$out" | head -n 1) || got="(exit $?)"
    check_output "$size" "$tool" "$step" "$want1" "$got" || true
    rm -f "$out"
}

# train TOOL BIN PROFILE1 PROFILE2: the two training runs of an instrumented binary.
train() {
    local tool=$1 bin=$2
    if [ "$tool" = rivet ]; then
        RIVET_PROFILE="$3" measure "$size" rivet train "$w" "$bin" &&
            check_output "$size" rivet train "$want1" "$(grep -m1 '^checksum' "$w/rivet-train.log")" &&
            RIVET_PROFILE="$4" measure "$size" rivet train2 "$w" "$bin" 2 &&
            check_output "$size" rivet train2 "$want2" "$(grep -m1 '^checksum' "$w/rivet-train2.log")"
    else
        measure "$size" bolt train "$w" "$bin" && mv "$w/b.fdata" "$3" &&
            check_output "$size" bolt train "$want1" "$(grep -m1 '^checksum' "$w/bolt-train.log")" &&
            measure "$size" bolt train2 "$w" "$bin" 2 && mv "$w/b.fdata" "$4" &&
            check_output "$size" bolt train2 "$want2" "$(grep -m1 '^checksum' "$w/bolt-train2.log")"
    fi
}

has_tool() { case " $TOOLS " in *" $1 "*) return 0 ;; esac; return 1; }

run_size() {
    local size=$1 t0
    t0=$(date +%s)
    log "$size MB: generating (bench/scale/gen.py $size)"
    prog=$(nice python3 bench/scale/gen.py "$size" --cache "$CACHE" --units "$GEN_UNITS") || die "bench/scale/gen.py $size failed"
    w="$CACHE/work/$size"
    rm -rf "$w" "$RESULTS.tmp.$size"
    mkdir -p "$w"
    : > "$RESULTS.tmp.$size"
    want1=$("$prog" | head -n 1) || die "$prog failed"
    want2=$("$prog" 2 | head -n 1) || die "$prog 2 failed"
    log "$size MB: $prog prints '$want1'"
    measure "$size" original train "$w" "$prog" || die "$prog failed under measure"

    # Samples first: their profiles are the fallback of a tool whose instrumentation fails.
    local reps=${SAMPLE_REPS:-$(( 10000 / size > 0 ? 10000 / size : 1 ))}
    log "$size MB: perf record -e cpu-clock:u -F $SAMPLE_FREQ -- prog $reps"
    perf record -q -F "$SAMPLE_FREQ" -e cpu-clock:u -o "$w/perf.data" -- "$prog" "$reps" >"$w/perf.log" 2>&1 ||
        die "perf record failed: $(tail -n 3 "$w/perf.log")"
    echo "$reps $(perf report -i "$w/perf.data" --stats 2>/dev/null | awk '/SAMPLE events:/ { print $3; exit }')" > "$CACHE/samples-$size.txt"
    local rs="" bs=""   # sample profiles: Rivet's, BOLT's
    if has_tool rivet && measure "$size" rivet aggregate "$w" "$RIVET" aggregate "$w/perf.data" "$prog" -o "$w/s.prof"; then
        rs="$w/s.prof"
    fi
    if has_tool bolt; then
        if measure "$size" bolt aggregate "$w" "$PERF2BOLT" -nl -p "$w/perf.data" -o "$w/s.fdata" "$prog"; then
            bs="$w/s.fdata"
        elif [ -n "$rs" ] && "$RIVET" merge "$rs" -o "$w/rs.fdata" --format fdata >"$w/rs-fdata.log" 2>&1; then
            bs="$w/rs.fdata"   # perf2bolt did not fit: Rivet's reading of the same samples
            log "$size MB: BOLT's fallback profile is rivet aggregate's, as fdata"
        fi
    fi
    rm -f "$w/perf.data"

    # Instrumentation, training, merge, optimize; a tool whose chain breaks optimizes from
    # the samples instead (the optimize-samples row), as a user without the memory would.
    local rp="" bp=""   # instrumentation profiles, merged: Rivet's, BOLT's
    if has_tool rivet; then
        if measure "$size" rivet instrument "$w" "$RIVET" instrument "$prog" -o "$w/prog.rinst" --profile "$w/r0.counts" &&
            train rivet "$w/prog.rinst" "$w/r1.counts" "$w/r2.counts"; then
            # prog.rinst stays until the merges are done: it holds the counter files' map.
            measure "$size" rivet merge "$w" "$RIVET" merge "$w/r1.counts" "$w/r2.counts" -o "$w/r.prof" && rp="$w/r.prof"
            # The fleet's form: the counter files summed slot by slot into one counter file
            # (no map decoded, no profile made), the closest to merge-fdata's
            # job. Compared with BOLT's merge row.
            measure "$size" rivet merge-sum "$w" "$RIVET" merge "$w/r1.counts" "$w/r2.counts" -o "$w/r-sum.counts"
            rm -f "$w/r-sum.counts"
            # kept (as fdata) for optimize-synth of the sizes too big to instrument
            "$RIVET" merge "$w/r1.counts" "$w/r2.counts" -o "$CACHE/profile-$size.fdata" --format fdata \
                >"$w/profile-fdata.log" 2>&1 || rm -f "$CACHE/profile-$size.fdata"
        fi
        rm -f "$w/prog.rinst" "$w"/r?.counts
        if [ -n "$rp" ]; then optimize_run "$size" rivet optimize "$rp"
        elif [ -n "$rs" ]; then optimize_run "$size" rivet optimize-samples "$rs"
        fi
    fi
    if has_tool bolt; then
        if measure "$size" bolt instrument "$w" "$BOLT" "$prog" -instrument -o "$w/prog.binst" \
                -instrumentation-file="$w/b.fdata" &&
            train bolt "$w/prog.binst" "$w/b1.fdata" "$w/b2.fdata"; then
            rm -f "$w/prog.binst"
            measure "$size" bolt merge "$w" "$MERGE_FDATA" "$w/b1.fdata" "$w/b2.fdata" -o "$w/b-merged.fdata" && bp="$w/b-merged.fdata"
        fi
        rm -f "$w/prog.binst" "$w"/b?.fdata
        if [ -n "$bp" ]; then optimize_run "$size" bolt optimize "$bp"
        elif [ -n "$bs" ]; then optimize_run "$size" bolt optimize-samples "$bs"
        fi
    fi
    # When one tool optimized from samples, the other does too, for a like-for-like row.
    if grep -q $'\toptimize-samples\t' "$RESULTS.tmp.$size"; then
        has_tool rivet && [ -n "$rs" ] && ! grep -q $'\trivet\toptimize-samples\t' "$RESULTS.tmp.$size" &&
            optimize_run "$size" rivet optimize-samples "$rs" || true
        has_tool bolt && [ -n "$bs" ] && ! grep -q $'\tbolt\toptimize-samples\t' "$RESULTS.tmp.$size" &&
            optimize_run "$size" bolt optimize-samples "$bs" || true
    fi

    # Neither instrumentation fitted: both optimize from the instrumentation profile of the
    # largest smaller size, carried over to this program (bench/scale/synth_profile.py).
    if [ -z "$rp" ] && [ -z "$bp" ]; then
        local from="" f n
        for f in "$CACHE"/profile-*.fdata; do
            [ -f "$f" ] || continue
            n=${f##*/profile-}; n=${n%.fdata}
            [ "$n" -lt "$size" ] && [ -f "$CACHE/meta-$n.json" ] && { [ -z "$from" ] || [ "$n" -gt "$from" ]; } && from=$n
        done
        if [ -n "$from" ]; then
            local small big
            small=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["modules"])' "$CACHE/meta-$from.json")
            big=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["modules"])' "$(dirname "$prog")/meta.json")
            log "$size MB: optimize-synth: the $from MB instrumentation profile carried over ($small -> $big modules)"
            python3 bench/scale/synth_profile.py "$CACHE/profile-$from.fdata" "$small" "$big" "$GEN_UNITS" \
                > "$w/synth.fdata" 2> "$w/synth.log" || die "synth_profile.py failed: $(cat "$w/synth.log")"
            echo "$from $(cat "$w/synth.log")" > "$CACHE/synth-$size.txt"
            has_tool rivet && optimize_run "$size" rivet optimize-synth "$w/synth.fdata"
            has_tool bolt && optimize_run "$size" bolt optimize-synth "$w/synth.fdata"
        fi
    fi

    # Results of this size replace the earlier ones of the same tools.
    { [ -f "$RESULTS" ] && awk -F'\t' -v s="$size" -v tools=" $TOOLS original " \
        '$1 != s || index(tools, " " $2 " ") == 0' "$RESULTS"; cat "$RESULTS.tmp.$size"; } > "$RESULTS.new"
    mv "$RESULTS.new" "$RESULTS"
    rm -f "$RESULTS.tmp.$size"
    cp "$(dirname "$prog")/meta.json" "$CACHE/meta-$size.json"
    # The logs and times stay (small); the programs, profiles and perf.data go unless KEEP=1.
    [ "${KEEP:-0}" = 1 ] || find "$w" -type f ! -name '*.log' ! -name '*.time' -delete
    log "$size MB: done in $(( $(date +%s) - t0 )) s"
}

report() {
    [ -s "$RESULTS" ] || die "no results in $RESULTS yet: run bench/scale.sh SIZE_MB first"
    local rv="(unknown)"
    [ -f "$CACHE/rivet-version.txt" ] && rv=$(cat "$CACHE/rivet-version.txt")
    echo "Rivet: $rv; BOLT: $("$BOLT" --version 2>/dev/null | grep -m1 -i 'version' | sed 's/^ *//')."
    echo
    echo "| text | program | step | Rivet wall / CPU | Rivet peak RSS | BOLT wall / CPU | BOLT peak RSS | time ratio R/B (wall, CPU) | memory ratio R/B |"
    echo "|---|---|---|---|---|---|---|---|---|"
    local size
    for size in $(cut -f1 "$RESULTS" | sort -n -u); do
        local m="$CACHE/meta-$size.json" prog="-"
        [ -f "$m" ] && prog=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f MiB text, %s functions, %.2f GiB file" % (d["text_bytes"]/2**20, format(d.get("functions_in_modules", 0), ","), d["file_bytes"]/2**30))' "$m")
        awk -F'\t' -v s="$size" -v prog="$prog" '
            function cell(st, w, c, r) {
                if (st == "") return "| not run | "
                if (st != "ok") return sprintf("| **%s** after %.0f s wall | %s%.2f GiB ", st, w, (st == "over-cap" ? "> " : ""), r / 1048576)
                return sprintf("| %.1f s / %.1f s | %.2f GiB ", w, c, r / 1048576)
            }
            $1 == s { st[$2, $3] = $4; w[$2, $3] = $5; c[$2, $3] = $6; r[$2, $3] = $7; steps[$3] = 1 }
            END {
                n = split("aggregate instrument train train2 merge merge-sum optimize optimize-synth optimize-samples optimize-output optimize-synth-output optimize-samples-output train-output train2-output", order, " ")
                for (i = 1; i <= n; i++) {
                    k = order[i]
                    if (!(k in steps)) continue
                    if (k ~ /-output$/) {
                        printf "| %s MB | %s | %s | %s | | %s | | | |\n", s, prog, k,
                            (st["rivet", k] == "" ? "" : "**" st["rivet", k] "**"), (st["bolt", k] == "" ? "" : "**" st["bolt", k] "**")
                        continue
                    }
                    printf "| %s MB | %s | %s ", s, prog, k
                    # the one merge-fdata row stands against both Rivet merges
                    b = (k == "merge-sum" ? "merge" : k)
                    printf "%s", cell(st["rivet", k], w["rivet", k], c["rivet", k], r["rivet", k])
                    printf "%s", cell(st["bolt", b], w["bolt", b], c["bolt", b], r["bolt", b])
                    if (st["rivet", k] == "ok" && st["bolt", b] == "ok" && w["bolt", b] > 0 && c["bolt", b] > 0 && r["bolt", b] > 0)
                        printf "| %.2f, %.2f | %.2f |\n", w["rivet", k] / w["bolt", b], c["rivet", k] / c["bolt", b], r["rivet", k] / r["bolt", b]
                    else
                        printf "| - | - |\n"
                }
            }' "$RESULTS"
    done
    echo
    echo "The original program's own run (\`prog\`, the workload the training rows run instrumented):"
    awk -F'\t' '$2 == "original" && $4 == "ok" { printf "%s MB: %.2f s wall, %.2f s CPU, %.2f GiB peak RSS; ", $1, $5, $6, $7 / 1048576 } END { print "" }' "$RESULTS"
    echo
    echo "Samples that aggregate read (\`perf record -e cpu-clock:u -F $SAMPLE_FREQ -- prog REPS\`):"
    for f in "$CACHE"/samples-*.txt; do
        [ -f "$f" ] || continue
        local sz=${f##*/samples-}
        echo "${sz%.txt} MB: REPS $(cut -d' ' -f1 "$f"), $(cut -d' ' -f2 "$f") samples;"
    done | sort -n | tr '\n' ' '
    echo
    plot
    echo
    echo "Plot: $PLOT. Raw rows (size tool step status wall_s cpu_s maxrss_kB): $RESULTS."
}

# plot: CPU time and peak memory against text size, one line per tool and step, log-log;
# runs killed at the memory cap are marked at the cap in the memory panel.
plot() {
    local d="$CACHE/plot"
    rm -rf "$d"; mkdir -p "$d"
    # optimize-synth (a profile carried over from a smaller size) continues the optimize line:
    # both profile about the same share of the functions
    local steps="instrument aggregate merge optimize optimize-samples" tool step
    for tool in rivet bolt; do
        for step in $steps; do
            awk -F'\t' -v t="$tool" -v s="$step" '$2 == t && ($3 == s || (s == "optimize" && $3 == "optimize-synth")) &&
                $4 == "ok" { print $1, $6, $7 / 1048576 }' "$RESULTS" | sort -n > "$d/$tool-$step.dat"
        done
    done
    awk -F'\t' '$4 == "over-cap" { print $1, $7 / 1048576 }' "$RESULTS" | sort -n > "$d/over-cap.dat"
    local pt="" pm="" sep=""
    for tool in rivet bolt; do
        local dash=1 i=0 name
        [ $tool = bolt ] && dash=2
        for step in $steps; do
            i=$((i + 1))
            [ -s "$d/$tool-$step.dat" ] || continue
            name="$([ $tool = rivet ] && echo Rivet || echo BOLT) $step"
            [ $step = optimize ] && name+=" (+synth)"
            pt+="$sep'$d/$tool-$step.dat' using 1:2 with linespoints dt $dash lw 2 lc $i pt $((dash * 2 + 5)) ps 1.3 title '$name'"
            pm+="$sep'$d/$tool-$step.dat' using 1:3 with linespoints dt $dash lw 2 lc $i pt $((dash * 2 + 5)) ps 1.3 title '$name'"
            sep=", "
        done
    done
    [ -n "$pt" ] || { log "nothing to plot"; return 0; }
    [ -s "$d/over-cap.dat" ] && pm+=", '$d/over-cap.dat' using 1:2 with points pt 9 ps 2 lc rgb 'red' title 'killed at the memory cap'"
    mkdir -p "$(dirname "$PLOT")"
    gnuplot <<EOF || die "gnuplot failed"
set terminal pngcairo size 1400,600 font 'sans,10'
set output '$PLOT'
set multiplot layout 1,2 title 'Rivet (solid) and llvm-bolt-19 (dashed) on programs from bench/scale/gen.py (bench/scale.sh; 2 shared cores)'
set logscale xy
set grid
set xrange [30:1800]
set key outside below font ',9' maxrows 4
set xlabel 'executable code (MiB)'
set ylabel 'CPU time, user + system (s)'
plot $pt
set ylabel 'peak resident memory (GiB)'
plot $pm
unset multiplot
EOF
}

if [ $report_only = 0 ]; then
    for s in "${sizes[@]}"; do run_size "$s"; done
fi
report
