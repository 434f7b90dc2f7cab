#!/usr/bin/env bash
# bench/postgres.sh -- PostgreSQL 15 optimized by Rivet and by llvm-bolt-19 from one profile of
# a read-only pgbench load, the workload of Tomas Vondra's "Playing with BOLT and Postgres";
# every binary checked by PostgreSQL's own regression suite; speed as pgbench transactions per
# second in interleaved rounds.
#
# The server is scripts/build-real-programs.sh's build (upstream 15.x from the Debian source
# package, gcc -O2 -g, -Wl,--emit-relocs, installed with its tools and regression suite).
# PostgreSQL finds share/ and lib/ relative to its own executable, so each binary runs from a
# copy of the install tree with bin/postgres replaced.
#
#  1. Data: initdb (as the OS user postgres: the server refuses root) and
#     `pgbench -i -s SCALE`, with the original server.
#  2. Training: `rivet instrument postgres -o inst --profile P`; the instrumented server
#     serves `pgbench -n -S -c 1 -T TRAIN` once with the simple query protocol and once with
#     prepared statements (every backend is a forked child; the counters are a shared mapping
#     of P, so all of them count). `rivet merge P -o P.fdata --format fdata` for BOLT.
#  3. Optimizing, each with its defaults for a profile-guided layout, timed (GNU time):
#       rivet optimize postgres --profile P -o postgres.rivet
#       llvm-bolt postgres -o postgres.bolt -data=P.fdata -reorder-blocks=ext-tsp
#         -reorder-functions=cdsort -split-functions -split-all-cold -split-eh -dyno-stats
#  4. Correctness: the regression suite (`pg_regress` with the parallel schedule, as
#     `make installcheck`) on a fresh cluster of each binary: original, Rivet, BOLT. The
#     script stops if Rivet's binary fails a test the original passes.
#  5. Speed: ROUNDS rounds; each starts each server once on the shared data directory (the
#     order rotated per round), pinned to CPU 0, and runs pgbench pinned to CPU 1: a warm-up
#     of 2 s, then `pgbench -n -S -c 1 -T SECONDS` with the simple protocol and again with
#     prepared statements. Reported: median tps per binary and mode, and the median over
#     rounds of the per-round ratio of tps (optimized / original, Rivet / BOLT) with a
#     distribution-free 95% interval (sign test on order statistics). Higher tps is faster.
#     No thresholds anywhere.
#
# Servers listen on a unix socket in the work directory only (listen_addresses=''); every
# load is bounded by pgbench -T and by timeout.
#
# Usage: bench/postgres.sh [ROUNDS] > docs/postgres-benchmark.md   (ROUNDS defaults to 10)
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
#        SCALE (10), TRAIN (20 s per protocol), RUN_SECONDS (10 s per measurement)
# Needs: what bench/real-programs.sh checks (llvm-bolt-19, valgrind, GNU time), util-linux
# (taskset, runuser).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-10}"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench/postgres.sh [ROUNDS]" >&2; exit 2; }
SCALE="${SCALE:-10}"
TRAIN="${TRAIN:-20}"
SECONDS_PER_RUN="${RUN_SECONDS:-10}"
log() { printf 'bench/postgres: %s\n' "$*" >&2; }
die() { printf 'bench/postgres: error: %s\n' "$*" >&2; exit 1; }
source bench/real-programs.sh # RIVET, BOLT, REAL, median, median_ci, exec_bytes, measured_on
command -v taskset >/dev/null || die "taskset missing (apt-get install util-linux)"
command -v runuser >/dev/null || die "runuser missing (apt-get install util-linux)"
[[ $(id -u) -eq 0 ]] || die "run as root: the servers run as the OS user postgres, via runuser"
id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
PG="${REAL[postgres-gcc]:-}"
REGRESS="${REAL[postgres-regress]:-}"
[[ -x $PG && -x $REGRESS/pg_regress ]] || die "scripts/build-real-programs.sh did not build postgresql"
INSTALL="$(dirname "$(dirname "$PG")")"
WORK="$(mktemp -d /tmp/rivet-pgbench.XXXXXX)"
chmod 755 "$WORK"
chown postgres "$WORK" # initdb creates its data directories here, as postgres
SOCK="$WORK/sock"
PORT=$((5400 + RANDOM % 100))
DATA="$WORK/data"
RUNNING="" # the tree whose server runs on $DATA
cleanup() {
    if [[ -n $RUNNING ]]; then stop_server "$RUNNING" "$DATA" || true; fi
    rm -rf -- "$WORK"
}
trap cleanup EXIT
mkdir -p "$SOCK" "$WORK/profile"
chown postgres "$SOCK" "$WORK/profile"

# as_postgres TREE CMD...: CMD as the OS user postgres, with TREE's libpq and nothing else
# of the caller's environment.
as_postgres() {
    local tree=$1
    shift
    runuser -u postgres -- env -i PATH="$tree/bin:/usr/bin:/bin" LD_LIBRARY_PATH="$tree/lib" \
        HOME="$WORK" LANG=C LC_ALL=C TZ=UTC PGHOST="$SOCK" PGPORT="$PORT" "$@"
}
# make_tree NAME BIN: a copy of the install tree with BIN as its server.
make_tree() {
    cp -a -- "$INSTALL" "$WORK/$1"
    cp -- "$2" "$WORK/$1/bin/postgres"
    chmod 755 "$WORK/$1/bin/postgres"
}
start_server() { # TREE DATADIR [PORT]
    local port=${3:-$PORT}
    taskset -c 0 runuser -u postgres -- env -i PATH="$1/bin:/usr/bin:/bin" LANG=C LC_ALL=C TZ=UTC \
        timeout 7200 "$1/bin/pg_ctl" -D "$2" -w -t 120 -l "$2.log" \
        -o "-k $SOCK -p $port -c listen_addresses=''" start >/dev/null ||
        { tail -n 20 "$2.log" >&2; die "the server of $(basename "$1") did not start"; }
}
stop_server() { # TREE DATADIR
    timeout 120 runuser -u postgres -- "$1/bin/pg_ctl" -D "$2" -m fast -w -t 90 stop >/dev/null
}
pgbench() { # TREE ARGS...: pgbench on CPU 1 against $PORT, bounded
    local tree=$1
    shift
    as_postgres "$tree" taskset -c 1 timeout 600 "$tree/bin/pgbench" "$@"
}

log "work dir $WORK; postgres $("$PG" -V)"
make_tree original "$PG"

log "instrumenting"
"$RIVET" instrument "$PG" -o "$WORK/postgres.inst" --profile "$WORK/profile/P" >"$WORK/instrument.log" 2>&1 ||
    { cat "$WORK/instrument.log" >&2; die "rivet instrument failed"; }
make_tree inst "$WORK/postgres.inst"

log "initdb and pgbench -i -s $SCALE"
as_postgres "$WORK/original" timeout 300 "$WORK/original/bin/initdb" -D "$DATA" -E UTF8 --no-locale \
    -A trust --no-sync >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; die "initdb failed"; }
start_server "$WORK/original" "$DATA"
RUNNING="$WORK/original"
pgbench "$WORK/original" -i -q -s "$SCALE" >"$WORK/pgbench-init.log" 2>&1 ||
    { cat "$WORK/pgbench-init.log" >&2; die "pgbench -i failed"; }
stop_server "$WORK/original" "$DATA"

log "training: pgbench -S, simple and prepared, ${TRAIN} s each"
start_server "$WORK/inst" "$DATA"
RUNNING="$WORK/inst"
for mode in simple prepared; do
    pgbench "$WORK/inst" -n -S -c 1 -M "$mode" -T "$TRAIN" >"$WORK/train.$mode" 2>&1 ||
        { cat "$WORK/train.$mode" >&2; die "pgbench against the instrumented server failed"; }
done
stop_server "$WORK/inst" "$DATA"
RUNNING=""
"$RIVET" merge "$WORK/profile/P" -o "$WORK/P.fdata" --format fdata >"$WORK/merge.log" 2>&1 ||
    { cat "$WORK/merge.log" >&2; die "rivet merge failed"; }

# BOLT cannot rewrite the expression interpreter's computed-goto table ("unable to get new
# address corresponding to input address ... in function ExecInterpExpr/1"), so it skips it;
# Rivet optimizes the whole binary, and is also measured with the same function skipped.
SKIP=ExecInterpExpr/1
BOLT_OPTS=("${BOLT_LAYOUT[@]}" -dyno-stats "-skip-funcs=$SKIP")
log "optimizing (each optimizer 3 times, interleaved, for its time and memory)"
: >"$WORK/times.rivet"
: >"$WORK/times.bolt"
: >"$WORK/times.bolt-debug"
for k in 1 2 3; do
    # Like for like with Rivet, which always carries the debug info over: BOLT drops it unless
    # asked. The binary measured below is the one without (debug info does not run).
    /usr/bin/time -f "%e %M" -o "$WORK/t" "$BOLT" "$PG" -o "$WORK/postgres.bolt-debug" -data="$WORK/P.fdata" \
        "${BOLT_OPTS[@]}" -update-debug-sections >"$WORK/bolt-debug.log" 2>&1 ||
        { tail -n 20 "$WORK/bolt-debug.log" >&2; die "llvm-bolt -update-debug-sections failed"; }
    tail -n 1 "$WORK/t" >>"$WORK/times.bolt-debug"
    /usr/bin/time -f "%e %M" -o "$WORK/t" "$RIVET" optimize "$PG" --profile "$WORK/profile/P" \
        -o "$WORK/postgres.rivet" >"$WORK/rivet.log" 2>&1 || { cat "$WORK/rivet.log" >&2; die "rivet optimize failed"; }
    tail -n 1 "$WORK/t" >>"$WORK/times.rivet"
    /usr/bin/time -f "%e %M" -o "$WORK/t" "$BOLT" "$PG" -o "$WORK/postgres.bolt" -data="$WORK/P.fdata" \
        "${BOLT_OPTS[@]}" >"$WORK/bolt.log" 2>&1 || { tail -n 20 "$WORK/bolt.log" >&2; die "llvm-bolt failed"; }
    tail -n 1 "$WORK/t" >>"$WORK/times.bolt"
done
"$RIVET" optimize "$PG" --profile "$WORK/profile/P" -o "$WORK/postgres.rivet-skip" --skip-funcs "$SKIP" \
    >"$WORK/rivet-skip.log" 2>&1 || { cat "$WORK/rivet-skip.log" >&2; die "rivet optimize --skip-funcs failed"; }
make_tree rivet "$WORK/postgres.rivet"
make_tree bolt "$WORK/postgres.bolt"
make_tree rivet-skip "$WORK/postgres.rivet-skip"
VARIANTS=(original rivet bolt rivet-skip)

log "regression suite on each binary (scripts/check-postgres.sh)"
declare -A REGRESS_RESULT
for v in "${VARIANTS[@]}"; do
    # "regress: N of M tests passed (...)"; a failing suite exits 1, judged below.
    line=$(PG_INSTALL="$INSTALL" PG_REGRESS="$REGRESS" scripts/check-postgres.sh "$WORK/$v/bin/postgres" \
        2>"$WORK/regress.$v" | tail -n 1 || true)
    [[ $line =~ ^regress:\ ([0-9]+)\ of\ ([0-9]+) ]] || { cat "$WORK/regress.$v" >&2; die "check-postgres.sh said '$line'"; }
    REGRESS_RESULT[$v]="${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
    log "  $v: ${REGRESS_RESULT[$v]% *} of ${REGRESS_RESULT[$v]#* } tests passed"
done
read -r orig_passed orig_total <<<"${REGRESS_RESULT[original]}"
((orig_total > 0 && orig_passed == orig_total)) ||
    { cat "$WORK/regress.original" >&2; die "the original server fails its regression suite"; }
for v in rivet rivet-skip; do
    [[ ${REGRESS_RESULT[$v]} == "${REGRESS_RESULT[original]}" ]] ||
        { cat "$WORK/regress.$v" >&2; die "Rivet's server ($v) fails regression tests the original passes"; }
done

log "$ROUNDS rounds of pgbench -S (${SECONDS_PER_RUN} s per binary and protocol)"
: >"$WORK/rounds"
for ((r = 0; r < ROUNDS; r++)); do
    order=()
    for ((i = 0; i < ${#VARIANTS[@]}; i++)); do order+=("${VARIANTS[(i + r) % ${#VARIANTS[@]}]}"); done
    declare -A TPS=()
    for v in "${order[@]}"; do
        start_server "$WORK/$v" "$DATA"
        RUNNING="$WORK/$v"
        pgbench "$WORK/$v" -n -S -c 1 -T 2 >/dev/null 2>&1 || die "warm-up against $v failed"
        for mode in simple prepared; do
            out=$(pgbench "$WORK/$v" -n -S -c 1 -M "$mode" -T "$SECONDS_PER_RUN" 2>&1) || die "pgbench against $v failed: $out"
            TPS[$v.$mode]=$(awk '/^tps = / { printf "%.0f\n", $3; exit }' <<<"$out")
            [[ -n ${TPS[$v.$mode]} ]] || die "no tps from pgbench against $v: $out"
        done
        stop_server "$WORK/$v" "$DATA"
        RUNNING=""
    done
    line=""
    for mode in simple prepared; do for v in "${VARIANTS[@]}"; do line+="${TPS[$v.$mode]} "; done; done
    echo "$line" >>"$WORK/rounds"
    log "round $((r + 1)): $line"
done

# Columns of $WORK/rounds: simple original rivet bolt rivet-skip, then the same prepared.
col() { awk -v c="$1" '{ print $c }' "$WORK/rounds"; }
ratio() { awk -v a="$1" -v b="$2" '{ printf "%.4f\n", $a / $b }' "$WORK/rounds"; }
fmt_ratio() { # NUM DEN -> "median (low..high)"
    local m lo hi
    read -r m lo hi _ < <(ratio "$1" "$2" | median_ci)
    printf '%.3f (%.3f..%.3f)' "$m" "$lo" "$hi"
}
t_med() { awk '{ print $1 }' "$WORK/times.$1" | median; }
m_med() { awk '{ print $2 }' "$WORK/times.$1" | median; }

cat <<EOF
# PostgreSQL benchmark: Rivet and llvm-bolt-19 on pgbench

$(measured_on)
Reproduce: \`bench/postgres.sh $ROUNDS > docs/postgres-benchmark.md\` (SCALE=$SCALE TRAIN=$TRAIN RUN_SECONDS=$SECONDS_PER_RUN).

- **Server**: $("$PG" -V), built by scripts/build-real-programs.sh (gcc -O2 -g,
  -Wl,--emit-relocs, upstream tarball of the Debian source package).
- **Profile**: Rivet's instrumentation, one training run: \`pgbench -n -S -c 1 -T $TRAIN\`,
  simple protocol then prepared statements, on a scale-$SCALE database; the same counts as
  BOLT fdata (\`rivet merge --format fdata\`) for llvm-bolt-19.
- **Options**: \`rivet optimize postgres --profile P -o postgres.rivet\` (its defaults), and
  with \`--skip-funcs $SKIP\`; \`llvm-bolt postgres -o postgres.bolt -data=P.fdata ${BOLT_OPTS[*]}\`.
- **Measurement**: $ROUNDS rounds; per round each server is started once on the same data
  directory (order rotated), pinned to CPU 0, with pgbench pinned to CPU 1: 2 s warm-up, then
  \`pgbench -n -S -c 1 -T $SECONDS_PER_RUN\` with the simple protocol and with \`-M prepared\`.
  Ratios are per round (higher tps is faster), median with a 95% sign-test interval.

## Regression suite

PostgreSQL's \`pg_regress\` with the parallel schedule (\`make installcheck\`), on a fresh
cluster of each binary.

| binary | tests passed |
|---|---:|
EOF
for v in "${VARIANTS[@]}"; do
    read -r p t <<<"${REGRESS_RESULT[$v]}"
    echo "| $v | $p of $t |"
done
cat <<EOF

## Read-only pgbench (transactions per second)

BOLT skips \`$SKIP\` (it cannot rewrite it); *Rivet, skipped* is Rivet with
\`--skip-funcs $SKIP\` too, the like-for-like comparison.

| protocol | original | Rivet | BOLT | Rivet, skipped | Rivet / original | BOLT / original | Rivet / BOLT | Rivet, skipped / BOLT |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
| simple | $(col 1 | median) | $(col 2 | median) | $(col 3 | median) | $(col 4 | median) | $(fmt_ratio 2 1) | $(fmt_ratio 3 1) | $(fmt_ratio 2 3) | $(fmt_ratio 4 3) |
| prepared | $(col 5 | median) | $(col 6 | median) | $(col 7 | median) | $(col 8 | median) | $(fmt_ratio 6 5) | $(fmt_ratio 7 5) | $(fmt_ratio 6 7) | $(fmt_ratio 8 7) |

## Processing

| optimizer | time (median of 3) | peak RSS | file size | executable bytes |
|---|---:|---:|---:|---:|
| Rivet | $(t_med rivet) s | $(($(m_med rivet) / 1024)) MB | $(stat -c %s "$WORK/postgres.rivet") | $(exec_bytes "$WORK/postgres.rivet") |
| BOLT, -update-debug-sections | $(t_med bolt-debug) s | $(($(m_med bolt-debug) / 1024)) MB | $(stat -c %s "$WORK/postgres.bolt-debug") | $(exec_bytes "$WORK/postgres.bolt-debug") |
| BOLT, debug info dropped (the binary measured) | $(t_med bolt) s | $(($(m_med bolt) / 1024)) MB | $(stat -c %s "$WORK/postgres.bolt") | $(exec_bytes "$WORK/postgres.bolt") |
| (original) | | | $(stat -c %s "$PG") | $(exec_bytes "$PG") |

## Every round (tps)

| round | simple: original | Rivet | BOLT | Rivet, skipped | prepared: original | Rivet | BOLT | Rivet, skipped |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|
EOF
awk '{ printf "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", NR, $1, $2, $3, $4, $5, $6, $7, $8 }' "$WORK/rounds"
echo
echo "Rivet's summary:"
echo
echo '```'
cat "$WORK/rivet.log"
echo '```'
