#!/usr/bin/env bash
# check-postgres.sh -- prove that a (rewritten) PostgreSQL server behaves like the original:
# PostgreSQL's own regression suite (`make installcheck`: pg_regress, the parallel schedule,
# 217 tests in 15.x) against a fresh cluster served by the given binary.
#
# The server is scripts/build-real-programs.sh's build (postgres-gcc): its install tree is
# copied to a temp dir with bin/postgres replaced by BIN (PostgreSQL finds share/ and lib/
# relative to its own executable, and initdb runs the server binary next to it, so the
# binary under test also bootstraps the cluster). initdb and the server run as the OS user
# postgres (they refuse root; the user is created if missing), with -E UTF8 --no-locale and
# fsync off; the server listens on a unix socket in the temp dir only (listen_addresses='').
# Everything is bounded by timeout; the server is stopped (killed if it must be) on any exit.
#
# Prints "regress: N of M tests passed"; exit 0 when all passed, 1 otherwise (the failing
# tests on stderr, regression.diffs and the server log kept in $KEEP, default a dir under
# /tmp named on stderr), 2 on bad usage.
#
# Usage: scripts/check-postgres.sh POSTGRES_BINARY
# Env:   PG_SCHEDULE=parallel (default; up to 20 sessions at once) or serial
#        PG_TIMEOUT=seconds for pg_regress (default 1200)
#        PG_INSTALL, PG_REGRESS: an install tree and regress directory to use instead of
#        build-real-programs.sh's
# A binary instrumented by `rivet instrument` works too: its profile file's directory must
# be writable by the user postgres.
set -euo pipefail
[[ $# -eq 1 && -f $1 && -x $1 ]] || { echo "usage: scripts/check-postgres.sh POSTGRES_BINARY" >&2; exit 2; }
BIN="$(readlink -f "$1")"
log() { printf 'check-postgres: %s\n' "$*" >&2; }
die() { printf 'check-postgres: error: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root: initdb and the server run as the OS user postgres, via runuser"
command -v runuser >/dev/null || die "runuser missing (apt-get install util-linux)"
SCHEDULE="${PG_SCHEDULE:-parallel}"
TIMEOUT="${PG_TIMEOUT:-1200}"
if [[ -z ${PG_INSTALL:-} || -z ${PG_REGRESS:-} ]]; then
    declare -A REAL
    while read -r name path; do REAL[$name]=$path; done < <("$(dirname "$0")/build-real-programs.sh" 2>/dev/null)
    [[ -n ${REAL[postgres-gcc]:-} ]] || die "scripts/build-real-programs.sh did not build postgresql"
    PG_INSTALL="$(dirname "$(dirname "${REAL[postgres-gcc]}")")"
    PG_REGRESS="${REAL[postgres-regress]}"
fi
[[ -x $PG_INSTALL/bin/initdb && -x $PG_REGRESS/pg_regress ]] || die "no PostgreSQL install at $PG_INSTALL or pg_regress in $PG_REGRESS"
id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres

TMP="$(mktemp -d /tmp/rivet-check-postgres.XXXXXX)"
chmod 755 "$TMP"
TREE=$TMP/install
DATA=$TMP/data
SOCK=$TMP/sock
SERVER_LOG=$TMP/server.log
PORT=$((5400 + RANDOM % 100)) # names the socket file only: no TCP

as_postgres() {
    runuser -u postgres -- env -i PATH="$TREE/bin:/usr/bin:/bin" LD_LIBRARY_PATH="$TREE/lib" \
        HOME="$TMP" LANG=C LC_ALL=C TZ=UTC PGHOST="$SOCK" PGPORT="$PORT" "$@"
}
stop_server() {
    [[ -f $DATA/postmaster.pid ]] || return 0
    local pid
    pid=$(head -n 1 "$DATA/postmaster.pid")
    timeout 90 runuser -u postgres -- "$TREE/bin/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null 2>&1 ||
        timeout 40 runuser -u postgres -- "$TREE/bin/pg_ctl" -D "$DATA" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
        true
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        pkill -KILL -P "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
    fi
}
KEEP=""
keep() { # the evidence of a failure, outside the temp dir
    KEEP="$(mktemp -d /tmp/rivet-check-postgres-failed.XXXXXX)"
    for f in "$TMP/regress/regression.diffs" "$TMP/regress.out" "$SERVER_LOG" "$TMP/initdb.log"; do
        if [[ -s $f ]]; then cp -- "$f" "$KEEP/"; fi
    done
    log "kept regression.diffs and the logs in $KEEP"
}
cleanup() {
    stop_server
    rm -rf -- "$TMP"
}
trap cleanup EXIT

cp -a -- "$PG_INSTALL" "$TREE"
cp --remove-destination -- "$BIN" "$TREE/bin/postgres"
chmod 755 "$TREE/bin/postgres"
cp -a -- "$PG_REGRESS" "$TMP/regress"
rm -rf -- "$TMP/regress/results" "$TMP"/regress/regression.*
mkdir "$SOCK"
chown -R postgres "$TMP"

if ! as_postgres timeout 300 "$TREE/bin/initdb" -D "$DATA" -A trust -E UTF8 --no-locale --no-sync \
    >"$TMP/initdb.log" 2>&1; then
    echo "regress: 0 tests passed (initdb failed)"
    keep
    exit 1
fi
cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$SOCK'
port = $PORT
fsync = off
EOF
if ! timeout 180 runuser -u postgres -- env -i PATH="$TREE/bin:/usr/bin:/bin" LANG=C LC_ALL=C TZ=UTC \
    "$TREE/bin/pg_ctl" -D "$DATA" -l "$SERVER_LOG" -w -t 120 start >/dev/null 2>&1; then
    echo "regress: 0 tests passed (the server did not start)"
    keep
    exit 1
fi
connections=()
[[ $SCHEDULE == serial ]] && connections=(--max-connections=1)
rc=0
(cd "$TMP/regress" && as_postgres timeout -k 30 "$TIMEOUT" ./pg_regress --inputdir=. \
    --bindir="$TREE/bin" --dlpath=. --max-concurrent-tests=20 --schedule=./parallel_schedule \
    "${connections[@]}") >"$TMP/regress.out" 2>&1 || rc=$?
stop_server

# pg_regress 15 ends with "All N tests passed." or "M of N tests failed."
summary=$(grep -E 'tests (passed|failed)' "$TMP/regress.out" | tail -n 1 || true)
total=$(grep -E '^test:' "$TMP/regress/parallel_schedule" | sed 's/^test://' | wc -w)
if [[ $summary =~ All\ ([0-9]+)\ tests\ passed ]]; then
    passed=${BASH_REMATCH[1]}
    total=$passed
elif [[ $summary =~ ([0-9]+)\ of\ ([0-9]+)\ tests\ failed ]]; then
    total=${BASH_REMATCH[2]}
    passed=$((total - BASH_REMATCH[1]))
else # no summary: pg_regress died or timed out
    passed=$(grep -cE '\.\.\. ok ' "$TMP/regress.out" || true)
fi
crashes=$(grep -c 'terminated by signal' "$SERVER_LOG" || true)
note="$SCHEDULE schedule"
((rc == 0)) || note+=", pg_regress exit $rc"
((crashes == 0)) || note+=", $crashes server processes killed by a signal"
echo "regress: $passed of $total tests passed ($note)"
if ((rc == 0 && passed == total && total > 0 && crashes == 0)); then
    exit 0
fi
grep -E '\.\.\. (FAILED|failed)' "$TMP/regress.out" | sed 's/^/  /' | head -n 50 >&2 || true
keep
exit 1
