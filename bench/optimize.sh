#!/usr/bin/env bash
# bench/optimize.sh -- the optimization benchmark: Rivet's `optimize` side by side with
# llvm-bolt-19 on the real programs (Lua 5.4 and the SQLite 3 shell, built by
# scripts/build-real-programs.sh with -Wl,--emit-relocs), from the SAME profile.
#
# Per program:
#  1. Training: `rivet instrument BIN -o BIN.inst --profile P`, the training input run with
#     BIN.inst gives the counter file P; `rivet merge P -o P.fdata --format fdata` converts it
#     to BOLT's fdata. Rivet reads P, BOLT reads P.fdata: one profile, two readers.
#  2. Optimizing, both with their defaults for a profile-guided layout:
#       rivet optimize BIN --profile P -o BIN.rivet
#         (defaults: ext-tsp blocks, cdsort functions, hot/cold split, split-all-cold, split-eh)
#       llvm-bolt BIN -o BIN.bolt -data=P.fdata -reorder-blocks=ext-tsp -reorder-functions=cdsort
#         -split-functions -split-all-cold -split-eh -dyno-stats -update-debug-sections
#     -update-debug-sections makes it like for like: Rivet always carries DWARF over (its
#     output keeps correct debug info), BOLT strips debug info unless asked. BOLT without it is
#     also timed, for reference. On Lua, BOLT needs -skip-funcs=luaV_execute/1 (the interpreter
#     loop's computed-goto label table: "unable to get new address ... in function
#     luaV_execute/1" otherwise); Rivet optimizes the whole binary, and is also run with the
#     same function skipped (the like-for-like variant), when its optimize has --skip-funcs.
#  3. Every optimized binary's output (stdout + stderr) must equal the original's, on every
#     input and size it runs here: the script stops with an error otherwise.
#  4. Measurements:
#     - simulated caches: cachegrind with a fixed geometry (I1 and D1 32 KiB 8-way, LL 1 MiB
#       16-way, 64 B lines) on a smaller deterministic input (Lua: the same scripts at smaller
#       sizes; SQLite: the same SQL files, which are deterministic and bounded); I1 misses,
#       LLi misses, branch mispredicts (Bcm + Bim) and instructions executed; then I1 misses
#       again with the I1 fully associative (no set conflicts, so independent of where the
#       code lands). The cachegrind runs are independent of machine load, so they run in
#       parallel (nproc jobs).
#     - wall time and CPU time (user + system, from the shell's `time`, 1 ms resolution):
#       ROUNDS interleaved rounds; each round runs every binary once on an input, in an order
#       rotated per round; reported: median time, and the median over rounds of the per-round
#       ratios (binary / original, and Rivet / BOLT with a sign-test confidence interval: the
#       order statistics that cover the median ratio with at least 95%, or [min, max] with
#       fewer than 6 rounds). CPU time leaves out the time a run waits for a CPU; it does not
#       remove the host's own speed swings, which on this VM are most of the noise (CPU and
#       wall time agreed within 1% here). No thresholds anywhere.
#     - each optimizer's processing time and peak RSS (GNU time "%e %M"), ROUNDS interleaved
#       runs, medians; whether Rivet's output bytes are identical across the runs.
#     - binary sizes: file size and bytes in executable sections.
#  5. Two inputs per program: the training input and an unseen one, which the profile never saw:
#       Lua    train  bench/lua/{binarytrees,fannkuch,strings}.lua
#              unseen bench/lua/{nbody,spectralnorm,objects}.lua
#       SQLite train  bench/sqlite/workload.sql     unseen bench/sqlite/unseen.sql
#  6. Markdown report on stdout; progress on stderr.
#
# Usage: bench/optimize.sh [ROUNDS] > docs/benchmarks.md    (ROUNDS defaults to 7)
# Env:   RIVET=path     a rivet binary to use (default: cargo build --release -p rivet)
#        RIVET_OPT_CMD  a stand-in for `rivet optimize`, a bash command run with $1 = binary,
#                       $2 = profile (counter file), $3 = output and $RIVET set; for testing
#                       the script before `rivet optimize` existed, e.g.
#                       RIVET_OPT_CMD='"$RIVET" rewrite "$1" -o "$3" --layout identity'
#                       (the report then says so at the top)
#        PROGRAMS       "lua sqlite" (default) or a subset
#        PROFILE_SOURCE instrument (default: step 1) or samples: the profile is perf's timer
#                       samples instead (`perf record -e cpu-clock:u -F SAMPLE_FREQ` of the
#                       training input run SAMPLE_REPEAT times, defaults 20000 and 4; no branch
#                       stacks, as on a VM), read by `rivet aggregate` for Rivet and by
#                       `perf2bolt -nl` for BOLT: one recording, each optimizer's own reader
#                       (bench/real-programs.sh, train_samples). Reproduce the committed report
#                       with PROFILE_SOURCE=samples bench/optimize.sh 21 > docs/benchmarks-samples.md
# Needs: llvm-bolt-19 (apt-get install bolt-19), valgrind, GNU time; perf (linux-perf) for samples.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
ROUNDS="${1:-7}"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench/optimize.sh [ROUNDS]" >&2; exit 2; }
PROGRAMS="${PROGRAMS:-lua sqlite}"
PROFILE_SOURCE="${PROFILE_SOURCE:-instrument}"
SAMPLE_FREQ="${SAMPLE_FREQ:-20000}"
SAMPLE_REPEAT="${SAMPLE_REPEAT:-4}"
case $PROFILE_SOURCE in
    instrument) REPRODUCE="bench/optimize.sh $ROUNDS > docs/benchmarks.md" ;;
    samples)
        [[ $SAMPLE_FREQ =~ ^[1-9][0-9]*$ && $SAMPLE_REPEAT =~ ^[1-9][0-9]*$ ]] ||
            { echo "bench/optimize: SAMPLE_FREQ and SAMPLE_REPEAT must be positive integers" >&2; exit 2; }
        REPRODUCE="PROFILE_SOURCE=samples SAMPLE_FREQ=$SAMPLE_FREQ SAMPLE_REPEAT=$SAMPLE_REPEAT bench/optimize.sh $ROUNDS > docs/benchmarks-samples.md" ;;
    *) echo "bench/optimize: PROFILE_SOURCE must be instrument or samples, not '$PROFILE_SOURCE'" >&2; exit 2 ;;
esac
log() { printf 'bench/optimize: %s\n' "$*" >&2; }
die() { printf 'bench/optimize: error: %s\n' "$*" >&2; exit 1; }
source bench/real-programs.sh
if [[ -z ${RIVET_OPT_CMD:-} ]]; then
    "$RIVET" optimize --help >/dev/null 2>&1 ||
        die "$RIVET has no optimize subcommand (set RIVET_OPT_CMD to a stand-in to test this script)"
    RIVET_SKIP_OK=$("$RIVET" optimize --help 2>/dev/null | grep -q -- --skip-funcs && echo 1 || echo 0)
else
    RIVET_SKIP_OK=0
fi
WORK="$(mktemp -d)"
trap 'rm -rf -- "$WORK"' EXIT

# ratios A B COLUMN: per-round ratios A/B of COLUMN (2 = wall, 3 = CPU) of two time files
ratios() {
    join <(sort "$1") <(sort "$2") | awk -v c="$3" '{ print $c / $(c + 2) }'
}
# same_loaded A B: A and B have the same PT_LOAD segments with the same file bytes, but for
# the ELF header (where the section headers are differs)
same_loaded() {
    local off filesz
    cmp -s <(readelf -lW "$1" | grep -E '^ +LOAD') <(readelf -lW "$2" | grep -E '^ +LOAD') || return 1
    while read -r off filesz; do
        off=$((off)) filesz=$((filesz))
        if [[ $off == 0 ]]; then off=64 filesz=$((filesz - 64)); fi
        cmp -s -i "$off:$off" -n "$filesz" "$1" "$2" || return 1
    done < <(readelf -lW "$1" | awk '$1 == "LOAD" { print $2, $5 }')
}

# ---------------------------------------------------------------- optimizer commands
# set_cmd VARIANT PROGRAM BIN PROFILE FDATA OUT: the command line in CMD
set_cmd() {
    local variant=$1 program=$2 bin=$3 prof=$4 fdata=$5 out=$6
    local -a skip=()
    [[ $program == lua ]] && skip=(-skip-funcs=luaV_execute/1)
    case $variant in
        rivet)
            if [[ -n ${RIVET_OPT_CMD:-} ]]; then
                CMD=(bash -c "$RIVET_OPT_CMD" rivet-optimize "$bin" "$prof" "$out")
            else
                CMD=("$RIVET" optimize "$bin" --profile "$prof" -o "$out")
            fi ;;
        rivet-skip) CMD=("$RIVET" optimize "$bin" --profile "$prof" -o "$out" --skip-funcs luaV_execute/1) ;;
        bolt) CMD=("$BOLT" "$bin" -o "$out" "-data=$fdata" "${BOLT_LAYOUT[@]}" -dyno-stats -update-debug-sections "${skip[@]}") ;;
        bolt-nodebug) CMD=("$BOLT" "$bin" -o "$out" "-data=$fdata" "${BOLT_LAYOUT[@]}" -dyno-stats "${skip[@]}") ;;
    esac
}
# Prints a command line for the report, paths shortened.
show_cmd() { printf '%s ' "${CMD[@]}" | sed "s|$WORK/[a-z]*/||g; s|$RIVET|rivet|g; s|$BOLT|llvm-bolt|g; s| $||"; }

# ---------------------------------------------------------------- report header
{
    if [[ $PROFILE_SOURCE == samples ]]; then
        echo "# Profile-guided optimization from perf samples: Rivet and llvm-bolt-19"
    else
        echo "# Profile-guided optimization: Rivet and llvm-bolt-19"
    fi
    echo
    if [[ -n ${RIVET_OPT_CMD:-} ]]; then
        echo "> **Stand-in:** this report was made with RIVET_OPT_CMD=\`$RIVET_OPT_CMD\` in place"
        echo "> of \`rivet optimize\`: the Rivet figures are NOT those of Rivet's optimizer."
        echo
    fi
    echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
    echo "$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(. /etc/os-release && echo "$PRETTY_NAME"), Linux $(uname -r);"
    echo "rivet $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (with uncommitted changes in crates/)'),"
    echo "$("$BOLT" --version 2>/dev/null | grep -m1 -o 'LLVM version [0-9.]*' | sed 's/LLVM/llvm-bolt/'), $(valgrind --version)."
    echo "Reproduce: \`$REPRODUCE\` (how long it took is at the end)."
    echo
    echo "## Method"
    echo
    echo "- **Programs**: Lua 5.4 (\`lua-gcc\`) and the SQLite 3 shell (\`sqlite3-gcc\`) of"
    echo "  \`scripts/build-real-programs.sh\`: Debian sources, gcc -O2 -g -fno-reorder-blocks-and-partition,"
    echo "  PIE, linked with -Wl,--emit-relocs."
    if [[ $PROFILE_SOURCE == samples ]]; then
        echo "- **One recording for both**: the training input run $SAMPLE_REPEAT times by the original binary"
        echo "  under \`perf record -e cpu-clock:u -F $SAMPLE_FREQ\`: timer samples without branch stacks, all"
        echo "  a VM without hardware counters gives. Each optimizer reads it with its own tool:"
        echo "  \`rivet aggregate perf.data BIN -o P\` (edge counts by flow inference when attached) and"
        echo "  \`perf2bolt -nl -p perf.data -o P.fdata BIN\`. Samples differ from run to run, so do the"
        echo "  profiles and the layouts made from them."
    else
        echo "- **One profile for both**: \`rivet instrument BIN -o BIN.inst --profile P\`, the training input"
        echo "  run with BIN.inst, then \`rivet merge P -o P.fdata --format fdata\`. Rivet reads P, BOLT P.fdata."
    fi
    echo "- **Inputs**: *train* is the input the profile was taken on; *unseen* is one it never saw."
    echo "  Wall time runs the inputs below; cachegrind runs the *small* ones."
    echo
    echo "| program | input | runs | small (cachegrind) |"
    echo "|---|---|---|---|"
    for program in $PROGRAMS; do
        for input in train unseen; do
            echo "| $program | $input | $(describe_input "$program" "$input") | $(describe_input "$program" "$input.small") |"
        done
    done
    echo
} >"$WORK/head.md"
: >"$WORK/summary.md"
: >"$WORK/body.md"

for program in $PROGRAMS; do
    case $program in
        lua) bin="${REAL[lua-gcc]:-}"; title="Lua 5.4 (lua-gcc)" ;;
        sqlite) bin="${REAL[sqlite3-gcc]:-}"; title="SQLite 3 shell (sqlite3-gcc)" ;;
        *) die "unknown program $program" ;;
    esac
    [[ -n $bin ]] || die "build-real-programs.sh gave no binary for $program"
    dir="$WORK/$program"
    mkdir -p "$dir"

    # 1. training
    if [[ $PROFILE_SOURCE == samples ]]; then
        log "$program: sampling the training input ($SAMPLE_REPEAT runs at $SAMPLE_FREQ Hz)"
        train_samples "$program" "$bin" "$dir" "$SAMPLE_FREQ" "$SAMPLE_REPEAT"
    else
        log "$program: instrumenting and training"
        train_profile "$program" "$bin" "$dir"
    fi

    # 2. optimizing (the binaries measured below come from this first run)
    variants=(original bolt rivet)
    [[ $program == lua && $RIVET_SKIP_OK == 1 ]] && variants+=(rivet-skip)
    declare -A BIN=([original]="$bin")
    declare -A CMDLINE=()
    for v in bolt rivet rivet-skip bolt-nodebug; do
        [[ $v == rivet-skip && $RIVET_SKIP_OK != 1 ]] && continue
        [[ $v == rivet-skip && $program != lua ]] && continue
        log "$program: $v"
        set_cmd "$v" "$program" "$bin" "$dir/P" "$dir/P.fdata" "$dir/BIN.$v"
        CMDLINE[$v]="$(show_cmd)"
        "${CMD[@]}" >"$dir/$v.log" 2>&1 || die "$v failed on $program: $(grep -m1 -E 'ERROR|error' "$dir/$v.log" || tail -n 1 "$dir/$v.log")"
        [[ -f $dir/BIN.$v ]] || die "$v wrote no output on $program"
        BIN[$v]="$dir/BIN.$v"
    done

    # 3. same output as the original, on both inputs
    run_input "$program" unseen "$bin" >"$dir/expected.unseen"
    for input in train unseen; do
        for v in "${variants[@]}"; do
            [[ $v == original ]] && continue
            run_input "$program" "$input" "${BIN[$v]}" >"$dir/$v.$input.out"
            if ! cmp -s "$dir/$v.$input.out" "$dir/expected.$input"; then
                diff "$dir/expected.$input" "$dir/$v.$input.out" | head -n 20 >&2 || true
                die "$program/$v: output differs from the original on the $input input"
            fi
        done
    done
    log "$program: outputs identical to the original's on both inputs"

    # 4a. cachegrind, in parallel (simulated counts do not depend on the machine's load).
    # valgrind 3.19 gives up on the DWARF that llvm-bolt writes with -update-debug-sections
    # ("Possibly corrupted debuginfo file"), and objcopy --strip-debug breaks BOLT's segment
    # layout: BOLT's cachegrind runs use its output without -update-debug-sections, checked to
    # load exactly the same bytes.
    declare -A CGBIN=()
    for v in "${variants[@]}"; do CGBIN[$v]=${BIN[$v]}; done
    same_loaded "${BIN[bolt]}" "${BIN[bolt-nodebug]}" ||
        die "$program: BOLT's outputs with and without -update-debug-sections load different bytes"
    CGBIN[bolt]=${BIN[bolt-nodebug]}
    log "$program: cachegrind (${#variants[@]} binaries x 2 inputs x 2 caches, $(nproc) at a time)"
    for kind in cg fa; do
        for input in train unseen; do
            for v in "${variants[@]}"; do
                while [[ $(jobs -rp | wc -l) -ge $(nproc) ]]; do wait -n || true; done
                cg_job "$program" "$input" "$v" "${CGBIN[$v]}" "$dir" "$kind" &
            done
        done
    done
    wait
    for kind in cg fa; do
        for input in train unseen; do
            for v in "${variants[@]}"; do
                [[ -s $dir/$kind.$input.$v.1 ]] || die "$program/$v: cachegrind produced no log"
                if ! cmp -s "$dir/$kind.$input.$v.out" "$dir/cg.$input.original.out"; then
                    diff "$dir/cg.$input.original.out" "$dir/$kind.$input.$v.out" | head -n 20 >&2 || true
                    die "$program/$v: output differs from the original on the small $input input (under cachegrind)"
                fi
            done
        done
    done

    # 4b. wall and CPU time, interleaved rounds, rotated order; a time file's lines are
    # "round wall cpu"
    n=${#variants[@]}
    for input in train unseen; do for v in "${variants[@]}"; do : >"$dir/time.$input.$v"; done; done
    for ((round = 0; round < ROUNDS; round++)); do
        log "$program: wall and CPU time, round $((round + 1))/$ROUNDS"
        for input in train unseen; do
            for ((k = 0; k < n; k++)); do
                v=${variants[$(((round + k) % n))]}
                t=$(
                    TIMEFORMAT='%3R %3U %3S'
                    { time run_input "$program" "$input" "${BIN[$v]}" >/dev/null 2>&1; } 2>&1
                )
                read -r wall user sys <<<"$t"
                [[ -n $sys ]] || die "$program/$v: could not time a run ($t)"
                echo "$round $wall $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')" >>"$dir/time.$input.$v"
            done
        done
    done

    # 4c. processing time and peak memory of the optimizers, interleaved, rotated
    pvariants=(rivet bolt bolt-nodebug)
    for v in "${pvariants[@]}"; do : >"$dir/proc.$v"; done
    for ((round = 0; round < ROUNDS; round++)); do
        log "$program: optimizer runs, round $((round + 1))/$ROUNDS"
        for ((k = 0; k < ${#pvariants[@]}; k++)); do
            v=${pvariants[$(((round + k) % ${#pvariants[@]}))]}
            out="$dir/proc.out.$v"
            rm -f "$out"
            set_cmd "$v" "$program" "$bin" "$dir/P" "$dir/P.fdata" "$out"
            /usr/bin/time -f '%e %M' -o "$dir/time.txt" "${CMD[@]}" >/dev/null 2>&1 || die "$v failed on $program (timed run)"
            echo "$round $(tail -n 1 "$dir/time.txt")" >>"$dir/proc.$v"
            if [[ $v == rivet ]] && ! cmp -s "$out" "${BIN[rivet]}"; then
                echo "round $round" >>"$dir/rivet.nondeterministic"
            fi
        done
    done

    # ------------------------------------------------------------ report
    label() {
        case $1 in
            original) echo "original" ;;
            bolt) if [[ $program == lua ]]; then echo "BOLT (luaV_execute skipped)"; else echo "BOLT"; fi ;;
            rivet) echo "Rivet" ;;
            rivet-skip) echo "Rivet, luaV_execute skipped" ;;
        esac
    }
    {
        echo "## $title"
        echo
        if [[ $PROFILE_SOURCE == samples ]]; then
            echo "Commands (perf.data = the recording of the training runs):"
            echo
            echo '```'
            echo "perf record -e cpu-clock:u -F $SAMPLE_FREQ -o perf.data -- (the training input, $SAMPLE_REPEAT times)"
            echo "rivet aggregate perf.data BIN -o P"
            echo "perf2bolt -nl -p perf.data -o P.fdata BIN"
        else
            echo "Commands (P = the counter file of the training run, P.fdata = its conversion):"
            echo
            echo '```'
            echo "rivet instrument BIN -o BIN.inst --profile P     # then the training input, run with BIN.inst"
            echo "rivet merge P -o P.fdata --format fdata"
        fi
        for v in rivet rivet-skip bolt bolt-nodebug; do
            [[ -n ${CMDLINE[$v]:-} ]] && echo "${CMDLINE[$v]}" | sed "s|$bin|BIN|g"
        done
        echo '```'
        echo
        if [[ $PROFILE_SOURCE == samples ]]; then
            echo "Samples: $(grep -m1 -o '[0-9]* of [0-9]* samples in' "$dir/aggregate.log" | sed 's/ in$//') in the binary (rivet aggregate);"
            echo "functions with counts: Rivet $(grep -m1 -o '[0-9]* functions with counts' "$dir/rivet.log" | cut -d' ' -f1),"
            echo "BOLT $(grep -m1 -o '[0-9]* out of [0-9]* functions in the binary' "$dir/bolt.log" | cut -d' ' -f1) (its \"non-empty execution profile\")."
            echo
        fi
        echo "Every optimized binary printed exactly what the original printed, on both inputs"
        echo "and on the small inputs under cachegrind."
        echo
        echo "### Simulated caches (cachegrind, small inputs)"
        echo
        echo "I1, D1: 32 KiB 8-way; LL: 1 MiB 16-way; 64 B lines. Mispredicts = Bcm + Bim (conditional + indirect)."
        echo "*I1, fully assoc.*: the same I1 with one set of 512 ways, where no line competes for a set:"
        echo "misses that do not depend on where the code lands. The rest of the 8-way I1's misses are"
        echo "conflicts, which move with the placement of the hot text (docs/icache-offsets.md)."
        echo
        echo "| input | binary | instructions | I1 misses | vs original | I1, fully assoc. | LLi misses | branch mispredicts | vs original |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
        for input in train unseen; do
            read -r _ oi1 _ omp < <(cg_sum "$dir" "$input" original)
            for v in "${variants[@]}"; do
                read -r ir i1 lli mp < <(cg_sum "$dir" "$input" "$v")
                read -r _ fa _ _ < <(cg_sum "$dir" "$input" "$v" fa)
                echo "$input $v $ir $i1 $lli $mp $fa" >>"$dir/cg.summary"
                printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$input" "$(label "$v")" "$(commas "$ir")" "$(commas "$i1")" \
                    "$(awk -v a="$i1" -v b="$oi1" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')" \
                    "$(commas "$fa")" "$(commas "$lli")" "$(commas "$mp")" \
                    "$(awk -v a="$mp" -v b="$omp" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')"
            done
        done
        echo
        echo "### Wall and CPU time ($ROUNDS interleaved rounds)"
        echo
        echo "Each round runs every binary once per input, in an order rotated per round. Ratio = the"
        echo "median over rounds of the binary's time / the other's time in the same round; after"
        echo "the Rivet / BOLT ratios, the sign-test confidence interval of that median (its level"
        echo "in the note below the table). CPU = user + system time."
        echo
        echo "| input | binary | wall | / original | / BOLT | CPU | / original | / BOLT |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|"
        for input in train unseen; do
            for v in "${variants[@]}"; do
                t=$(awk '{ print $2 }' "$dir/time.$input.$v" | median)
                c=$(awk '{ print $3 }' "$dir/time.$input.$v" | median)
                read -r r _ < <(ratios "$dir/time.$input.$v" "$dir/time.$input.original" 2 | median_ci)
                read -r cr _ < <(ratios "$dir/time.$input.$v" "$dir/time.$input.original" 3 | median_ci)
                read -r rb rblo rbhi level < <(ratios "$dir/time.$input.$v" "$dir/time.$input.bolt" 2 | median_ci)
                read -r cb cblo cbhi _ < <(ratios "$dir/time.$input.$v" "$dir/time.$input.bolt" 3 | median_ci)
                echo "$input $v $t $r $rb $rblo $rbhi $cr $cb $cblo $cbhi" >>"$dir/time.summary"
                case $v in
                    rivet*) rbs=$(printf '%.3f (%.3f..%.3f)' "$rb" "$rblo" "$rbhi")
                        cbs=$(printf '%.3f (%.3f..%.3f)' "$cb" "$cblo" "$cbhi") ;;
                    *) rbs="" cbs="" ;;
                esac
                printf '| %s | %s | %.3f s | %.3f | %s | %.3f s | %.3f | %s |\n' "$input" "$(label "$v")" \
                    "$t" "$r" "$rbs" "$c" "$cr" "$cbs"
            done
        done
        echo
        echo "Confidence of the intervals: $(awk -v l="$level" 'BEGIN { printf "%.1f%%", 100 * l }') ($ROUNDS rounds)."
        echo
        echo "### The optimizers: processing time, peak memory, output size ($ROUNDS interleaved runs, medians)"
        echo
        echo "| optimizer | time | peak RSS | time / Rivet's | memory / Rivet's | output size | executable sections |"
        echo "|---|---:|---:|---:|---:|---:|---:|"
        printf '| (original binary) | | | | | %.2f MB | %s KB |\n' "$(awk -v s="$(stat -c %s "$bin")" 'BEGIN { print s / 1e6 }')" \
            "$(( $(exec_bytes "$bin") / 1024 ))"
        for v in rivet bolt bolt-nodebug; do
            t=$(awk '{ print $2 }' "$dir/proc.$v" | median)
            m=$(awk '{ print $3 }' "$dir/proc.$v" | median)
            tr=$(join <(sort "$dir/proc.$v") <(sort "$dir/proc.rivet") | awk '{ print $2 / $4 }' | median)
            mr=$(join <(sort "$dir/proc.$v") <(sort "$dir/proc.rivet") | awk '{ print $3 / $5 }' | median)
            case $v in
                rivet) what="Rivet"; f="${BIN[rivet]}" ;;
                bolt) what="BOLT, -update-debug-sections"; f="${BIN[bolt]}" ;;
                bolt-nodebug) what="BOLT, debug info stripped"; f="${BIN[bolt-nodebug]}" ;;
            esac
            printf '| %s | %.2f s | %.0f MB | %.2f | %.2f | %.2f MB | %s KB |\n' "$what" "$t" "$(awk -v m="$m" 'BEGIN { print m / 1024 }')" \
                "$tr" "$mr" "$(awk -v s="$(stat -c %s "$f")" 'BEGIN { print s / 1e6 }')" "$(( $(exec_bytes "$f") / 1024 ))"
            echo "$v $t $m" >>"$dir/proc.summary"
        done
        echo
        if [[ -s $dir/rivet.nondeterministic ]]; then
            echo "**Rivet's output differed between runs** ($(wc -l <"$dir/rivet.nondeterministic") of $ROUNDS timed runs)."
        else
            echo "Rivet's output was byte-identical in all $((ROUNDS + 1)) runs."
        fi
        echo
        echo "<details><summary>What the optimizers reported</summary>"
        echo
        for v in rivet rivet-skip bolt; do
            [[ -f $dir/$v.log ]] || continue
            echo "$v:"
            echo
            echo '```'
            if [[ $v == bolt* ]]; then
                grep -E 'BOLT-INFO: ([0-9]+ out of|basic block reordering|splitting separates|[0-9]+ functions with profile|profile for|setting __hot)|BOLT-WARNING|BOLT-ERROR|executed forward branches|taken forward branches|executed backward|taken backward|executed unconditional|all function calls|indirect calls|executed instructions|taken branches|total branches' "$dir/$v.log" |
                    grep -v 'internal-dwarf-error' | head -n 40
                n_dw=$(grep -c 'internal-dwarf-error' "$dir/$v.log" || true)
                [[ $n_dw -gt 0 ]] && echo "($n_dw x BOLT-WARNING: [internal-dwarf-error]: unsupported DW_OP encoding.)"
            else
                sed -n '1,60p' "$dir/$v.log" | sed "s|$WORK/[a-z]*/||g"
            fi
            echo '```'
            echo
        done
        echo "</details>"
        echo
    } >>"$WORK/body.md"

    # summary rows
    for input in train unseen; do
        read -r _ _ oir oi1 olli omp ofa < <(grep "^$input original " "$dir/cg.summary")
        read -r _ _ bir bi1 blli bmp bfa < <(grep "^$input bolt " "$dir/cg.summary")
        read -r _ _ rir ri1 rlli rmp rfa < <(grep "^$input rivet " "$dir/cg.summary")
        read -r _ _ _ bt _ _ _ bc _ < <(grep "^$input bolt " "$dir/time.summary")
        read -r _ _ _ rt rb rblo rbhi rc cb cblo cbhi < <(grep "^$input rivet " "$dir/time.summary")
        printf '| %s | %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %.3f / %.3f | %.3f / %.3f | %.3f (%.3f..%.3f) | %.3f (%.3f..%.3f) |\n' \
            "$program" "$input" \
            "$(commas "$oir")" "$(commas "$bir")" "$(commas "$rir")" \
            "$(commas "$oi1")" "$(commas "$bi1")" "$(commas "$ri1")" "$(commas "$ofa")" "$(commas "$bfa")" "$(commas "$rfa")" \
            "$(commas "$omp")" "$(commas "$bmp")" "$(commas "$rmp")" \
            "$bt" "$bc" "$rt" "$rc" "$rb" "$rblo" "$rbhi" "$cb" "$cblo" "$cbhi" >>"$WORK/summary.md"
    done
    read -r _ rpt rpm < <(grep '^rivet ' "$dir/proc.summary")
    read -r _ bpt bpm < <(grep '^bolt ' "$dir/proc.summary")
    printf '%s %s %s %s %s\n' "$program" "$rpt" "$rpm" "$bpt" "$bpm" >>"$WORK/proc.all"
    unset BIN CMDLINE CGBIN
done

cat "$WORK/head.md"
echo "## Summary"
echo
echo "Instructions, I1 misses and mispredicts: original / BOLT / Rivet (cachegrind, small inputs)."
echo "I1, fully assoc.: the misses of the same I1 with no set conflicts, which do not depend on"
echo "where the code lands (the 8-way I1's conflict misses do: docs/icache-offsets.md)."
echo "Times: medians of per-round ratios, wall / CPU; Rivet / BOLT with the sign-test confidence"
echo "interval of the median. Lua's BOLT skips luaV_execute (it cannot rewrite it); Rivet optimizes it."
echo
echo "| program | input | instructions | I1 misses | I1, fully assoc. | branch mispredicts | BOLT time / original | Rivet time / original | Rivet / BOLT, wall | Rivet / BOLT, CPU |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
cat "$WORK/summary.md"
echo
echo "| program | Rivet: time, peak RSS | BOLT (-update-debug-sections): time, peak RSS |"
echo "|---|---:|---:|"
while read -r program rpt rpm bpt bpm; do
    printf '| %s | %.2f s, %.0f MB | %.2f s, %.0f MB |\n' "$program" "$rpt" "$(awk -v m="$rpm" 'BEGIN { print m / 1024 }')" \
        "$bpt" "$(awk -v m="$bpm" 'BEGIN { print m / 1024 }')"
done <"$WORK/proc.all"
echo
cat "$WORK/body.md"
echo "## Notes"
echo
echo "- BOLT on Lua: with the recipe alone llvm-bolt-19 stops with \"BOLT-ERROR: unable to get new"
echo "  address corresponding to input address 0x... in function luaV_execute/1\". The address is an"
echo "  entry of the interpreter's computed-goto label table (an R_X86_64_RELATIVE in .data.rel.ro)."
echo "  -jump-tables=none, -jump-tables=move, -strict, -lite=0, -split-functions=0 and -reorder-blocks=none"
echo "  do not help; -skip-funcs=luaV_execute/1 does. BOLT then leaves the interpreter's hottest"
echo "  function in place (in .bolt.org.text) and optimizes the rest."
echo "- BOLT on SQLite needs nothing beyond the recipe."
echo "- BOLT runs in its default lite mode (X86: only functions with a profile are processed)."
echo "- BOLT puts its new text at a 2 MiB boundary (huge pages); its output files are padded accordingly."
echo "- Rivet aligns hot loop heads by default (BOLT's -align-blocks, off in BOLT): the padding nops"
echo "  run where a block falls into an aligned one, which is why Rivet can execute more"
echo "  instructions than BOLT here (SQLite: about 0.3% more). Measured pairwise with \`rivet bench\`"
echo "  (120 rounds), aligned against not aligned made SQLite about 1% faster (docs/from-bolt.md)."
echo "- \"executable sections\" counts every section with the X flag: both tools keep the original"
echo "  code (BOLT as .bolt.org.text, Rivet in place with forwarding jumps) next to the new text."
echo "- cachegrind runs BOLT's output made without -update-debug-sections (the script checks that"
echo "  it loads exactly the same bytes as the one with it): valgrind 3.19 gives up on the DWARF"
echo "  that llvm-bolt-19 -update-debug-sections writes (\"unhandled dwarf2 abbrev form code 0x23 ..."
echo "  Possibly corrupted debuginfo file. I can't recover.\"), on Lua and on SQLite alike, and"
echo "  \`objcopy --strip-debug\` breaks BOLT's segment layout."
echo "- Wall time on this shared 2-core VM is noisy: between two complete runs of this script the"
echo "  wall-time ratios moved by up to about 0.1, and CPU time moves with them (the host's speed"
echo "  swings within seconds); the cachegrind counts are the stable measure."
echo "- Lua is built with one fixed string-hash seed (scripts/build-real-programs.sh): a stock Lua"
echo "  seeds it from the time and from addresses, which made one binary's work vary by about 3%"
echo "  from run to run. With it, one binary's cachegrind counts are the same on every run;"
echo "  training runs can still differ in a few counts (the garbage collector's steps move with"
echo "  memory sizes: paths, addresses), and so can the layouts made from them."
echo
echo "This run took $(( ($(date +%s) - started + 59) / 60 )) minutes."
echo
echo "AArch64 (the same programs cross-built, both compilers, PIE and not, measured on a simulated"
echo "Neoverse N1 front end under qemu-aarch64): [aarch64-benchmark.md](aarch64-benchmark.md)."
