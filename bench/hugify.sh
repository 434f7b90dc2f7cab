#!/usr/bin/env bash
# bench/hugify.sh -- what `rivet optimize --hugify` changes on the largest real programs,
# cppcheck and PostgreSQL: the same optimize from the same profile with and without --hugify,
# compared with `rivet bench` (CPU time, interleaved rounds, median of per-round ratios with
# its sign-test interval), and the transparent huge pages the hugified process actually holds
# (AnonHugePages of its anonymous executable mappings in /proc/PID/smaps, sampled while it
# runs).
#
#  cppcheck (scripts/build-real-programs.sh's cppcheck-gcc): trained and measured on
#    bench/cppcheck.sh's analyses (train: tinyxml2.cpp with --enable=all --inconclusive;
#    unseen: simplecpp.cpp with --enable=all); outputs compared with the original's.
#  PostgreSQL (postgres-gcc): single-user mode (`postgres --single`, one process, no client),
#    on a table of 200,000 rows with an index: POINT_QUERIES point selects by key (parse, plan,
#    execute through the index: the wide code path of pgbench -S), then 20 scans with an
#    expression filter. Trained on that workload; outputs compared with the original's.
#    Each binary runs from its own tree (bin/postgres, share/ and lib/ linked to the install),
#    as the OS user postgres (the server refuses root).
#
# Usage: bench/hugify.sh [ROUNDS]   (ROUNDS defaults to 15); prints Markdown for docs/passes.md
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
#        POINT_QUERIES (20000), ONLY=cppcheck|postgres (default: both)
# Needs: root (runs PostgreSQL as postgres via setpriv), THP `always` or `madvise` for the
#        huge pages to show (the script reports the setting it ran under).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s\n' "bench/hugify: $*" >&2; }
die() { printf '%s\n' "bench/hugify: error: $*" >&2; exit 1; }
REAL_PROGRAMS="cppcheck postgresql"
# shellcheck source=bench/real-programs.sh
source bench/real-programs.sh
command -v jq >/dev/null || die "jq missing (apt-get install jq)"
command -v setpriv >/dev/null || die "setpriv missing (apt-get install util-linux)"
[[ $(id -u) -eq 0 ]] || die "run as root: PostgreSQL runs as the OS user postgres"
id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
ROUNDS=${1:-15}
POINT_QUERIES=${POINT_QUERIES:-20000}
CPPCHECK=${REAL[cppcheck-gcc]:-}
PG=${REAL[postgres-gcc]:-}
[[ -x $CPPCHECK ]] || die "scripts/build-real-programs.sh built no cppcheck-gcc"
[[ -x $PG ]] || die "scripts/build-real-programs.sh built no postgres-gcc"
THP=$(cat /sys/kernel/mm/transparent_hugepage/enabled)
W=$(mktemp -d /tmp/rivet-hugify.XXXXXX)
chmod 755 "$W"
trap 'rm -rf -- "$W"' EXIT
start=$(date +%s)

# thp_kb PID: kB of AnonHugePages in PID's anonymous executable mappings (the hugified text).
thp_kb() {
    awk '/^[0-9a-f]+-[0-9a-f]+ / { anon_exec = ($2 ~ /x/ && NF == 5) }
         anon_exec && /^AnonHugePages:/ { kb += $2 }
         END { print kb + 0 }' "/proc/$1/smaps"
}
# sampled_thp CMD...: runs CMD in the background; prints the most thp_kb showed in samples
# every 0.1 s while it ran.
sampled_thp() {
    "$@" >/dev/null 2>&1 &
    local pid=$! kb most=0
    while kill -0 "$pid" 2>/dev/null; do
        kb=$(thp_kb "$pid" 2>/dev/null || echo 0)
        ((kb > most)) && most=$kb
        sleep 0.1
    done
    wait "$pid" || true
    echo "$most"
}
# pair A B CMD...: "ratio lo hi a_median_s" of B / A in CPU time.
pair() {
    local a=$1 b=$2
    shift 2
    "$RIVET" bench "$a" "$b" -n "$ROUNDS" --json -- "$@" >"$W/bench.json" || [[ $? == 3 ]] ||
        die "rivet bench $a $b failed"
    jq -r '"\(.ratio) \(.ci_low) \(.ci_high) \(.a.median_cpu_s // .a.median_wall_s)"' "$W/bench.json"
}
fmt() { awk '{ printf "%.3f (%.3f..%.3f)", $1, $2, $3 }' <<<"$1"; }
secs() { awk '{ printf "%.2f", $4 }' <<<"$1"; }

# ---------------------------------------------------------------- cppcheck
cppcheck_bench() {
TREE=$(dirname "$CPPCHECK")
mkdir -p "$W/cpp"
ln -s "$TREE/cfg" "$W/cpp/cfg"
cp "$CPPCHECK" "$W/cpp/original"
TRAIN=(--enable=all --inconclusive --library=cppcheck-lib -q "$TREE/externals/tinyxml2/tinyxml2.cpp")
UNSEEN=(--enable=all -q "$TREE/externals/simplecpp/simplecpp.cpp")
log "cppcheck: training"
"$RIVET" instrument "$W/cpp/original" -o "$W/cpp/instrumented" --profile "$W/cpp/P" >/dev/null 2>&1
(cd "$TREE" && "$W/cpp/instrumented" "${TRAIN[@]}" >/dev/null 2>&1)
"$RIVET" optimize "$W/cpp/original" --profile "$W/cpp/P" -o "$W/cpp/rivet" >"$W/cpp/rivet.log" 2>&1
"$RIVET" optimize "$W/cpp/original" --profile "$W/cpp/P" -o "$W/cpp/hugify" --hugify --verify >"$W/cpp/hugify.log" 2>&1 ||
    die "optimize --hugify cppcheck: $(tail -n 3 "$W/cpp/hugify.log")"
cpp_range=$(grep -o 'hot text [^ ]* mapped' "$W/cpp/hugify.log" | awk '{ print $3 }')
for b in original rivet hugify; do
    for input in train unseen; do
        if [[ $input == train ]]; then args=("${TRAIN[@]}"); else args=("${UNSEEN[@]}"); fi
        (cd "$TREE" && "$W/cpp/$b" "${args[@]}" >"$W/cpp/$b.$input.out" 2>&1) || die "cppcheck $b $input failed"
    done
done
for input in train unseen; do
    cmp -s "$W/cpp/original.$input.out" "$W/cpp/hugify.$input.out" || die "hugified cppcheck's $input output differs"
done
cpp_thp=$(cd "$TREE" && sampled_thp "$W/cpp/hugify" "${TRAIN[@]}")
log "cppcheck: bench ($ROUNDS rounds per analysis)"
cpp_train=$(cd "$TREE" && pair "$W/cpp/rivet" "$W/cpp/hugify" "${TRAIN[@]}")
cpp_unseen=$(cd "$TREE" && pair "$W/cpp/rivet" "$W/cpp/hugify" "${UNSEEN[@]}")
echo "| cppcheck | train | $cpp_range | $cpp_thp kB | $(fmt "$cpp_train") | $(secs "$cpp_train") s |" >>"$W/rows"
echo "| cppcheck | unseen | $cpp_range | (same binary) | $(fmt "$cpp_unseen") | $(secs "$cpp_unseen") s |" >>"$W/rows"
}

# ---------------------------------------------------------------- PostgreSQL
INSTALL=$(dirname "$(dirname "$PG")")
tree() { # tree NAME BINARY: a tree whose bin/postgres is BINARY
    mkdir -p "$W/pg/$1/bin"
    ln -s "$W/pg/common/share" "$W/pg/$1/share"
    ln -s "$W/pg/common/lib" "$W/pg/$1/lib"
    cp "$2" "$W/pg/$1/bin/postgres"
}
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups env -i LANG=C LC_ALL=C TZ=UTC "$@"; }
# The workload as one command, {} the binary (rivet bench's placeholder).
PG_RUN=(setpriv --reuid=postgres --regid=postgres --init-groups sh -c "exec {} --single -D '$W/pg/data' postgres < '$W/pg/workload.sql'")
pg_run() { "${PG_RUN[@]//\{\}/$1}"; }
postgres_bench() {
mkdir -p "$W/pg/common"
chown postgres "$W/pg"
# share/ and lib/ copied once (the install lives under root's home, closed to postgres).
cp -a "$INSTALL/share" "$INSTALL/lib" "$W/pg/common/"
tree original "$PG"
cp "$INSTALL/bin/initdb" "$W/pg/original/bin/"
log "PostgreSQL: initdb and data"
as_pg "$W/pg/original/bin/initdb" -D "$W/pg/data" --no-sync >/dev/null
printf '%s\n' "CREATE TABLE t AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 200000) g;" \
    "CREATE UNIQUE INDEX t_id ON t(id);" "VACUUM ANALYZE t;" >"$W/pg/setup.sql"
awk -v n="$POINT_QUERIES" 'BEGIN { srand(7); for (i = 0; i < n; i++) printf "SELECT v FROM t WHERE id = %d;\n", 1 + int(rand() * 200000);
    for (i = 0; i < 20; i++) printf "SELECT count(*), max(v) FROM t WHERE id %% 7 = %d AND v LIKE '"'"'%%a%%'"'"';\n", i % 7 }' >"$W/pg/workload.sql"
chmod 644 "$W/pg/setup.sql" "$W/pg/workload.sql"
as_pg sh -c "'$W/pg/original/bin/postgres' --single -D '$W/pg/data' postgres < '$W/pg/setup.sql'" >/dev/null
log "PostgreSQL: training"
mkdir -p "$W/pg/profile"
chown postgres "$W/pg/profile"
"$RIVET" instrument "$PG" -o "$W/pg/postgres.inst" --profile "$W/pg/profile/P" >/dev/null 2>&1
tree instrumented "$W/pg/postgres.inst"
pg_run "$W/pg/instrumented/bin/postgres" >/dev/null 2>&1
"$RIVET" optimize "$PG" --profile "$W/pg/profile/P" -o "$W/pg/postgres.rivet" >"$W/pg/rivet.log" 2>&1
"$RIVET" optimize "$PG" --profile "$W/pg/profile/P" -o "$W/pg/postgres.hugify" --hugify --verify >"$W/pg/hugify.log" 2>&1 ||
    die "optimize --hugify postgres: $(tail -n 3 "$W/pg/hugify.log")"
pg_range=$(grep -o 'hot text [^ ]* mapped' "$W/pg/hugify.log" | awk '{ print $3 }')
tree rivet "$W/pg/postgres.rivet"
tree hugify "$W/pg/postgres.hugify"
for b in original rivet hugify; do
    pg_run "$W/pg/$b/bin/postgres" >"$W/pg/$b.out" 2>"$W/pg/$b.err" ||
        die "postgres $b failed the workload: $(tail -n 3 "$W/pg/$b.err")"
done
# Results on stdout; stderr has the log's timestamps and pids.
cmp -s "$W/pg/original.out" "$W/pg/hugify.out" ||
    die "hugified postgres's output differs: $(diff "$W/pg/original.out" "$W/pg/hugify.out" | head -n 5)"
pg_thp=$(sampled_thp "${PG_RUN[@]//\{\}/$W/pg/hugify/bin/postgres}")
log "PostgreSQL: bench ($ROUNDS rounds)"
pg=$(pair "$W/pg/rivet/bin/postgres" "$W/pg/hugify/bin/postgres" "${PG_RUN[@]}")
echo "| PostgreSQL | $POINT_QUERIES point selects + 20 scans | $pg_range | $pg_thp kB | $(fmt "$pg") | $(secs "$pg") s |" >>"$W/rows"
}

: >"$W/rows"
case ${ONLY:-all} in
all) cppcheck_bench; postgres_bench ;;
cppcheck) cppcheck_bench ;;
postgres) postgres_bench ;;
*) die "ONLY must be cppcheck or postgres" ;;
esac

cat <<EOF
$(measured_on)
Transparent huge pages on this machine: \`$THP\` (\`/sys/kernel/mm/transparent_hugepage/enabled\`).
Reproduce: \`bench/hugify.sh $ROUNDS\` (took $((($(date +%s) - start) / 60)) minutes).

| program | workload | hot range | AnonHugePages of the hot text | CPU time, --hugify / without (95% CI) | without, median |
|---|---|---|---:|---:|---:|
$(cat "$W/rows")
EOF
