# bench/real-programs.sh -- sourced by the benchmarks that optimize the real programs
# (bench/optimize.sh, bench/icache-offsets.sh, bench/training-runs.sh, bench/postgres.sh):
# the tools they need, the programs of scripts/build-real-programs.sh, their inputs, the
# training of one profile, cachegrind, and the statistics of interleaved rounds.
# The sourcing script defines log and die first and runs from the repository's root.

BOLT=/usr/lib/llvm-19/bin/llvm-bolt
[[ -x $BOLT ]] || die "$BOLT missing (apt-get install bolt-19)"
PERF2BOLT=/usr/lib/llvm-19/bin/perf2bolt # the same package; train_samples checks it
# llvm-bolt's recommended layout options, the counterpart of `rivet optimize`'s defaults.
BOLT_LAYOUT=(-reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold -split-eh)
command -v valgrind >/dev/null || die "valgrind missing (apt-get install valgrind)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing (apt-get install time)"
if [[ -z ${RIVET:-} ]]; then
    cargo build --release -q -p rivet
    RIVET="$PWD/target/release/rivet"
fi
RIVET="$(readlink -f "$RIVET")"
export RIVET
declare -A REAL
# REAL_PROGRAMS (set by the sourcing script): the programs it needs, by build-real-programs.sh's
# names; unset: all of them.
# RIVET_REAL_PATHS: a file of build-real-programs.sh's output ("name path" lines), for a run
# that must only read the cache, never build (a shared machine whose cache is complete).
# shellcheck disable=SC2086 # a list of words
real_paths() {
    if [[ -n ${RIVET_REAL_PATHS:-} ]]; then cat "$RIVET_REAL_PATHS"; else scripts/build-real-programs.sh ${REAL_PROGRAMS:-} 2>/dev/null; fi
}
while read -r name path; do REAL[$name]=$path; done < <(real_paths)
export LC_ALL=C TZ=UTC

# ---------------------------------------------------------------- inputs
# An input is a list of runs separated by ";": for Lua "script size", for SQLite a SQL file
# (fed on stdin to `sqlite3 -bail :memory:`).
declare -A INPUT=(
    [lua.train]="bench/lua/binarytrees.lua 14;bench/lua/fannkuch.lua 9;bench/lua/strings.lua 200000"
    [lua.unseen]="bench/lua/nbody.lua 100000;bench/lua/spectralnorm.lua 250;bench/lua/objects.lua 100000"
    [lua.train.small]="bench/lua/binarytrees.lua 12;bench/lua/fannkuch.lua 8;bench/lua/strings.lua 50000"
    [lua.unseen.small]="bench/lua/nbody.lua 20000;bench/lua/spectralnorm.lua 100;bench/lua/objects.lua 20000"
    [sqlite.train]="bench/sqlite/workload.sql"
    [sqlite.unseen]="bench/sqlite/unseen.sql"
    [sqlite.train.small]="bench/sqlite/workload.sql"
    [sqlite.unseen.small]="bench/sqlite/unseen.sql"
)
# run_one PROGRAM ITEM CMD...: one run of ITEM with the command CMD (a binary, or a binary
# behind a wrapper such as valgrind), output on stdout and stderr.
run_one() {
    local program=$1 item=$2 script size
    shift 2
    case $program in
        lua) read -r script size <<<"$item"; "$@" "$script" "$size" </dev/null ;;
        sqlite) "$@" -bail :memory: <"$item" ;;
    esac
}
# run_input PROGRAM INPUT BIN: the whole input, every run's output in order.
run_input() {
    local item
    local -a items
    IFS=';' read -r -a items <<<"${INPUT[$1.$2]}"
    for item in "${items[@]}"; do run_one "$1" "$item" "$3" 2>&1; done
}
describe_input() { # PROGRAM INPUT -> markdown text
    local item
    local -a items out=()
    IFS=';' read -r -a items <<<"${INPUT[$1.$2]}"
    for item in "${items[@]}"; do
        case $1 in
            lua) out+=("\`$item\`") ;;
            sqlite) out+=("\`$item\`") ;;
        esac
    done
    local IFS=,
    echo "${out[*]}" | sed 's/,/, /g'
}

# select_program PROGRAM: sets BIN (its binary from scripts/build-real-programs.sh), TITLE (its
# name in reports), BOLT_SKIP (what llvm-bolt must be told to skip to process it) and dir (its
# work directory under WORK, created).
select_program() {
    case $1 in
        lua) BIN="${REAL[lua-gcc]:-}"; TITLE="Lua 5.4 (lua-gcc)"; BOLT_SKIP=(-skip-funcs=luaV_execute/1) ;;
        sqlite) BIN="${REAL[sqlite3-gcc]:-}"; TITLE="SQLite 3 shell (sqlite3-gcc)"; BOLT_SKIP=() ;;
        *) die "unknown program $1" ;;
    esac
    [[ -n $BIN ]] || die "build-real-programs.sh gave no binary for $1"
    dir="$WORK/$1"
    mkdir -p "$dir"
}
# measured_on: a report's lines on when and where it was measured, with which rivet (and
# RIVET_OPTIONS), llvm-bolt and valgrind.
measured_on() {
    echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')),"
    echo "$(. /etc/os-release && echo "$PRETTY_NAME"), Linux $(uname -r); rivet $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' (with uncommitted changes in crates/)')${RIVET_OPTIONS:+ with $RIVET_OPTIONS},"
    echo "$("$BOLT" --version 2>/dev/null | grep -m1 -o 'LLVM version [0-9.]*' | sed 's/LLVM/llvm-bolt/'), $(valgrind --version)."
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# median_ci: reads ratios, prints "median lo hi confidence": the sign-test interval for the
# median, the widest pair of order statistics (k, n+1-k) whose coverage is at least 95%, or
# [min, max] when even that falls short (below 6 values)
median_ci() {
    sort -g | awk '{ v[NR] = $1 }
        END {
            n = NR; if (n == 0) { print "nan nan nan 0"; exit }
            m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            # tail = P(X <= k - 1) for X ~ Binomial(n, 1/2)
            k = 1; term = 0.5 ^ n; tail = term
            while (k + 1 <= (n + 1) / 2) {
                next_term = term * (n - k + 1) / k
                if (2 * (tail + next_term) > 0.05) break
                term = next_term; tail += term; k++
            }
            printf "%s %s %s %.3f\n", m, v[k], v[n + 1 - k], 1 - 2 * tail
        }'
}
# exec_bytes BIN: bytes in sections with the X flag
exec_bytes() {
    readelf -SW "$1" | sed -n 's/^ *\[ *[0-9]*\] //p' |
        awk '$7 ~ /X/ { print $5 }' | { t=0; while read -r s; do t=$((t + 16#$s)); done; echo "$t"; }
}
commas() { printf '%s' "$1" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta'; }

# ---------------------------------------------------------------- training
# train_profile PROGRAM BIN DIR: `rivet instrument`, the training input run with the
# instrumented binary (whose output must be the original's), then its counter file DIR/P
# converted to BOLT's fdata, DIR/P.fdata. DIR/expected.train is the original's output.
train_profile() {
    local program=$1 bin=$2 dir=$3
    "$RIVET" instrument "$bin" -o "$dir/inst" --profile "$dir/P" >"$dir/instrument.log" 2>&1 ||
        die "rivet instrument failed on $program: $(tail -n 3 "$dir/instrument.log")"
    run_input "$program" train "$bin" >"$dir/expected.train"
    run_input "$program" train "$dir/inst" >"$dir/inst.train"
    cmp -s "$dir/inst.train" "$dir/expected.train" || die "$program: the instrumented binary's output differs on the training input"
    "$RIVET" merge "$dir/P" -o "$dir/P.fdata" --format fdata >"$dir/merge.log" 2>&1 ||
        die "rivet merge failed on $program: $(tail -n 3 "$dir/merge.log")"
}

# train_samples PROGRAM BIN DIR FREQ REPEAT: the training input run REPEAT times with the
# original binary under one `perf record -e cpu-clock:u -F FREQ` (plain timer samples, no branch
# stacks: what a VM without hardware counters gives), then the same perf.data read by each
# optimizer's own aggregator: `rivet aggregate` writes DIR/P, `perf2bolt -nl` writes
# DIR/P.fdata. One recording, because merge-fdata 19 refuses to merge no-LBR fdata
# ("Malformed / corrupted profile counter"). DIR/expected.train is the original's output.
train_samples() {
    local program=$1 bin=$2 dir=$3 freq=$4 repeat=$5
    command -v perf >/dev/null || die "perf missing (apt-get install linux-perf)"
    [[ -x $PERF2BOLT ]] || die "$PERF2BOLT missing (apt-get install bolt-19)"
    run_input "$program" train "$bin" >"$dir/expected.train"
    export -f run_input run_one
    INPUT_DECL=$(declare -p INPUT) perf record -q -F "$freq" -e cpu-clock:u -o "$dir/perf.data" -- \
        bash -c 'eval "$INPUT_DECL"; for ((r = 0; r < $3; r++)); do run_input "$1" train "$2"; done' \
        train "$program" "$bin" "$repeat" >"$dir/perf.out" 2>"$dir/perf.log" ||
        die "perf record failed on $program: $(tail -n 3 "$dir/perf.log")"
    "$RIVET" aggregate "$dir/perf.data" "$bin" -o "$dir/P" >"$dir/aggregate.log" 2>&1 ||
        die "rivet aggregate failed on $program: $(tail -n 3 "$dir/aggregate.log")"
    "$PERF2BOLT" -nl -p "$dir/perf.data" -o "$dir/P.fdata" "$bin" >"$dir/perf2bolt.log" 2>&1 ||
        die "perf2bolt failed on $program: $(tail -n 3 "$dir/perf2bolt.log")"
}

# ---------------------------------------------------------------- cachegrind
CG_OPTS=(--tool=cachegrind --cache-sim=yes --branch-sim=yes --cachegrind-out-file=/dev/null
    --I1=32768,8,64 --D1=32768,8,64 --LL=1048576,16,64)
# The same I1 size and line, fully associative (one set of 512 ways): no line competes for a
# set, so its misses measure how many lines the code touches and how often it comes back to
# them, whatever the addresses. The difference to CG_OPTS' I1 misses is conflict misses,
# which depend on where the code lands relative to the libraries (bench/icache-offsets.sh).
FA_OPTS=(--tool=cachegrind --cache-sim=yes --branch-sim=no --cachegrind-out-file=/dev/null
    --I1=32768,512,64 --D1=32768,8,64 --LL=1048576,16,64)
# cg_job PROGRAM INPUT VARIANT BIN DIR [fa]: cachegrind every run of the small input; the logs
# go to DIR/cg.INPUT.VARIANT.N, the program's output to DIR/cg.INPUT.VARIANT.out (fa.* with
# the fully associative I1).
cg_job() {
    local program=$1 input=$2 variant=$3 bin=$4 dir=$5 kind=${6:-cg} item n=0
    local -a items opts=("${CG_OPTS[@]}")
    [[ $kind == fa ]] && opts=("${FA_OPTS[@]}")
    IFS=';' read -r -a items <<<"${INPUT[$program.$input.small]}"
    : >"$dir/$kind.$input.$variant.out"
    for item in "${items[@]}"; do
        n=$((n + 1))
        run_one "$program" "$item" valgrind "${opts[@]}" "--log-file=$dir/$kind.$input.$variant.$n" "$bin" \
            >>"$dir/$kind.$input.$variant.out" 2>&1
    done
}
# cg_both PROGRAM DIR K RIVET_BIN BOLT_BIN: cg_job of both optimizers' binaries on both inputs,
# as variants rivet.K and bolt.K, as many at once as there are cores.
cg_both() {
    local program=$1 dir=$2 k=$3 rivet_bin=$4 bolt_bin=$5 v input bin
    for v in rivet bolt; do
        bin=$rivet_bin
        [[ $v == bolt ]] && bin=$bolt_bin
        for input in train unseen; do
            while [[ $(jobs -rp | wc -l) -ge $(nproc) ]]; do wait -n || true; done
            cg_job "$program" "$input" "$v.$k" "$bin" "$dir" &
        done
    done
    wait
}
# checked_i1 PROGRAM DIR INPUT VARIANT WHAT: sets I1 to the I1 misses of cg_job's runs of
# VARIANT on INPUT, after checking that they printed what the original's did (cg_job's
# "original" variant); WHAT names the binary in the error.
checked_i1() {
    local program=$1 dir=$2 input=$3 variant=$4 what=$5
    if ! cmp -s "$dir/cg.$input.$variant.out" "$dir/cg.$input.original.out"; then
        diff "$dir/cg.$input.original.out" "$dir/cg.$input.$variant.out" | head -n 20 >&2 || true
        die "$program: $what prints something else than the original on the $input input"
    fi
    read -r _ I1 _ _ < <(cg_sum "$dir" "$input" "$variant")
}
# cg_sum DIR INPUT VARIANT [fa] -> "irefs i1 lli mispredicts", summed over the runs
cg_sum() {
    cat "$1/${4:-cg}.$2.$3".[0-9]* | tr -d , | awk '
        /== I +refs:/ { ir += $4 } /== I1 +misses:/ { i1 += $4 } /== LLi +misses:/ { lli += $4 }
        /== Mispredicts:/ { mp += $3 }
        END { printf "%.0f %.0f %.0f %.0f\n", ir, i1, lli, mp }'
}
