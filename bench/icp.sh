#!/usr/bin/env bash
# bench/icp.sh -- what `rivet optimize --indirect-call-promotion=calls` changes on the real
# programs with indirect calls: cppcheck (virtual calls), Lua (C functions through pointers)
# and PostgreSQL (function-pointer dispatch in the executor). For each, the same optimize from
# the same instrumentation profile with and without the option (both with --verify), then
#   - sites promoted and the share of the profiled indirect calls now direct (--json summary),
#   - cachegrind (bench/real-programs.sh's geometry, --branch-sim=yes): executed
#     instructions, I1 misses, all and indirect branch mispredicts, on one run of each,
#   - CPU time of with / without (`rivet bench`: interleaved rounds, median of per-round
#     ratios with its sign-test interval), and the outputs compared with the original's.
#
#  cppcheck: bench/cppcheck.sh's analyses (trained on tinyxml2.cpp with --enable=all
#    --inconclusive; cachegrind on the same; bench on it and on the unseen simplecpp.cpp).
#  Lua (lua-gcc): bench/real-programs.sh's train input (cachegrind: its small version).
#  PostgreSQL (postgres-gcc): bench/hugify.sh's single-user workload (POINT_QUERIES point
#    selects through an index, 20 scans with an expression filter), trained on it; as root.
#
# Usage: bench/icp.sh [ROUNDS]   (ROUNDS defaults to 10); prints Markdown for docs/passes.md
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
#        ONLY="cppcheck lua postgres" (the default), POINT_QUERIES (5000)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s\n' "bench/icp: $*" >&2; }
die() { printf '%s\n' "bench/icp: error: $*" >&2; exit 1; }
REAL_PROGRAMS="cppcheck lua postgresql"
# shellcheck source=bench/real-programs.sh
source bench/real-programs.sh
command -v jq >/dev/null || die "jq missing (apt-get install jq)"
ROUNDS=${1:-10}
ONLY=${ONLY:-cppcheck lua postgres}
POINT_QUERIES=${POINT_QUERIES:-5000}
W=$(mktemp -d /tmp/rivet-icp.XXXXXX)
WORK=$W # select_program's
chmod 755 "$W"
trap 'rm -rf -- "$W"' EXIT
start=$(date +%s)
: >"$W/rows"

# optimize_both BIN PROFILE DIR: DIR/plain and DIR/icp (with their --json summaries).
optimize_both() {
    "$RIVET" optimize "$1" --profile "$2" -o "$3/plain" --verify --json >"$3/plain.json" 2>"$3/plain.err" ||
        die "optimize $1: $(tail -n 3 "$3/plain.err")"
    "$RIVET" optimize "$1" --profile "$2" -o "$3/icp" --verify --json --indirect-call-promotion=calls \
        >"$3/icp.json" 2>"$3/icp.err" || die "optimize --indirect-call-promotion $1: $(tail -n 3 "$3/icp.err")"
}
# promoted DIR: "sites of profiled (targets callees), share%"
promoted() {
    jq -r '.indirect_call_promotion | "\(.promoted_sites) of \(.profiled_sites) (\(.promoted_targets) callees) | \(if .profiled_calls > 0 then (1000 * .promoted_calls / .profiled_calls | round) / 10 else 0 end)%"' "$1/icp.json"
}
# cg LOG... -> "irefs i1 mispredicts indirect_branches indirect_mispredicts", summed
cg() {
    cat "$@" | tr -d , | awk '
        /== I +refs:/ { ir += $4 } /== I1 +misses:/ { i1 += $4 }
        # "(N cond + M ind)": the field before "ind)", wherever the padding puts it.
        function ind() { for (i = 4; i <= NF; i++) if ($i ~ /^ind\)?$/) return $(i - 1); return 0 }
        /== Branches:/ { bi += ind() } /== Mispredicts:/ { mp += $3; bim += ind() }
        END { printf "%.0f %.0f %.0f %.0f %.0f\n", ir, i1, mp, bi, bim }'
}
# cg_cells LOGPREFIX_PLAIN LOGPREFIX_ICP: the cachegrind cells, without -> with
cg_cells() {
    local a b
    read -r -a a < <(cg "$1".*)
    read -r -a b < <(cg "$2".*)
    printf '%s → %s | %s → %s | %s → %s | %s → %s | %s → %s' \
        "$(commas "${a[0]}")" "$(commas "${b[0]}")" "$(commas "${a[1]}")" "$(commas "${b[1]}")" \
        "$(commas "${a[2]}")" "$(commas "${b[2]}")" "$(commas "${a[3]}")" "$(commas "${b[3]}")" \
        "$(commas "${a[4]}")" "$(commas "${b[4]}")"
}
pair() { # pair A B CMD...: "ratio lo hi a_median_s" of B / A in CPU time
    local a=$1 b=$2
    shift 2
    "$RIVET" bench "$a" "$b" -n "$ROUNDS" --json -- "$@" >"$W/bench.json" || [[ $? == 3 ]] ||
        die "rivet bench $a $b failed"
    jq -r '"\(.ratio) \(.ci_low) \(.ci_high) \(.a.median_cpu_s // .a.median_wall_s)"' "$W/bench.json"
}
fmt() { awk '{ printf "%.3f (%.3f..%.3f) | %.2f s", $1, $2, $3, $4 }' <<<"$1"; }
VG=(valgrind "${CG_OPTS[@]}")

cppcheck_bench() {
    local bin=${REAL[cppcheck-gcc]:-} d=$W/cpp
    [[ -x $bin ]] || die "scripts/build-real-programs.sh built no cppcheck-gcc"
    local tree
    tree=$(dirname "$bin")
    mkdir -p "$d"
    ln -s "$tree/cfg" "$d/cfg"
    cp "$bin" "$d/original"
    local train=(--enable=all --inconclusive --library=cppcheck-lib -q "$tree/externals/tinyxml2/tinyxml2.cpp")
    local unseen=(--enable=all -q "$tree/externals/simplecpp/simplecpp.cpp")
    log "cppcheck: training, optimizing"
    "$RIVET" instrument "$d/original" -o "$d/instrumented" --profile "$d/P" >/dev/null 2>&1
    (cd "$tree" && "$d/instrumented" "${train[@]}" >/dev/null 2>&1)
    optimize_both "$d/original" "$d/P" "$d"
    local b input
    for b in original plain icp; do
        for input in train unseen; do
            local -n args=$input
            (cd "$tree" && "$d/$b" "${args[@]}" >"$d/$b.$input.out" 2>&1) || die "cppcheck $b $input failed"
        done
    done
    for input in train unseen; do
        cmp -s "$d/original.$input.out" "$d/icp.$input.out" || die "cppcheck --indirect-call-promotion: $input output differs"
    done
    log "cppcheck: cachegrind (train)"
    (cd "$tree" && "${VG[@]}" --log-file="$d/cg.plain.1" "$d/plain" "${train[@]}" >/dev/null 2>&1) &
    (cd "$tree" && "${VG[@]}" --log-file="$d/cg.icp.1" "$d/icp" "${train[@]}" >/dev/null 2>&1) &
    wait
    log "cppcheck: bench ($ROUNDS rounds per analysis)"
    local t u
    t=$(cd "$tree" && pair "$d/plain" "$d/icp" "${train[@]}")
    u=$(cd "$tree" && pair "$d/plain" "$d/icp" "${unseen[@]}")
    echo "| cppcheck | train | $(promoted "$d") | $(cg_cells "$d/cg.plain" "$d/cg.icp") | $(fmt "$t") |" >>"$W/rows"
    echo "| cppcheck | unseen | (same binaries) | | | | | | | $(fmt "$u") |" >>"$W/rows"
}

lua_bench() {
    select_program lua
    local d=$dir
    log "lua: training, optimizing"
    train_profile lua "$BIN" "$d"
    optimize_both "$BIN" "$d/P" "$d"
    run_input lua train "$d/icp" >"$d/icp.train"
    cmp -s "$d/icp.train" "$d/expected.train" || die "lua --indirect-call-promotion: output differs"
    log "lua: cachegrind (small train input)"
    cg_job lua train plain "$d/plain" "$d" &
    cg_job lua train icp "$d/icp" "$d" &
    wait
    cmp -s "$d/cg.train.plain.out" "$d/cg.train.icp.out" || die "lua: outputs differ under cachegrind"
    log "lua: bench ($ROUNDS rounds)"
    local cmds=() item script size
    IFS=';' read -r -a items <<<"${INPUT[lua.train]}"
    for item in "${items[@]}"; do read -r script size <<<"$item"; cmds+=("{} $script $size >/dev/null"); done
    local IFS=';'
    local t
    t=$(pair "$d/plain" "$d/icp" sh -c "${cmds[*]}")
    unset IFS
    echo "| $TITLE | train (cachegrind: small) | $(promoted "$d") | $(cg_cells "$d/cg.train.plain" "$d/cg.train.icp") | $(fmt "$t") |" >>"$W/rows"
}

postgres_bench() {
    local PG=${REAL[postgres-gcc]:-} d=$W/pg
    [[ -x $PG ]] || die "scripts/build-real-programs.sh built no postgres-gcc"
    [[ $(id -u) -eq 0 ]] || die "run as root: PostgreSQL runs as the OS user postgres"
    id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    local install
    install=$(dirname "$(dirname "$PG")")
    mkdir -p "$d/common"
    chown postgres "$d"
    cp -a "$install/share" "$install/lib" "$d/common/"
    tree() {
        mkdir -p "$d/$1/bin"
        ln -s "$d/common/share" "$d/$1/share"
        ln -s "$d/common/lib" "$d/$1/lib"
        cp "$2" "$d/$1/bin/postgres"
    }
    as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups env -i LANG=C LC_ALL=C TZ=UTC "$@"; }
    local run=(setpriv --reuid=postgres --regid=postgres --init-groups sh -c "exec {} --single -D '$d/data' postgres < '$d/workload.sql'")
    tree original "$PG"
    cp "$install/bin/initdb" "$d/original/bin/"
    log "PostgreSQL: initdb and data"
    as_pg "$d/original/bin/initdb" -D "$d/data" --no-sync >/dev/null
    printf '%s\n' "CREATE TABLE t AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 200000) g;" \
        "CREATE UNIQUE INDEX t_id ON t(id);" "VACUUM ANALYZE t;" >"$d/setup.sql"
    awk -v n="$POINT_QUERIES" 'BEGIN { srand(7); for (i = 0; i < n; i++) printf "SELECT v FROM t WHERE id = %d;\n", 1 + int(rand() * 200000);
        for (i = 0; i < 20; i++) printf "SELECT count(*), max(v) FROM t WHERE id %% 7 = %d AND v LIKE '"'"'%%a%%'"'"';\n", i % 7 }' >"$d/workload.sql"
    chmod 644 "$d/setup.sql" "$d/workload.sql"
    as_pg sh -c "'$d/original/bin/postgres' --single -D '$d/data' postgres < '$d/setup.sql'" >/dev/null
    log "PostgreSQL: training, optimizing"
    mkdir -p "$d/profile"
    chown postgres "$d/profile"
    "$RIVET" instrument "$PG" -o "$d/postgres.inst" --profile "$d/profile/P" >/dev/null 2>&1
    tree instrumented "$d/postgres.inst"
    "${run[@]//\{\}/$d/instrumented/bin/postgres}" >/dev/null 2>&1
    optimize_both "$PG" "$d/profile/P" "$d"
    tree plainb "$d/plain"
    tree icpb "$d/icp"
    local b
    for b in original plainb icpb; do
        "${run[@]//\{\}/$d/$b/bin/postgres}" >"$d/$b.out" 2>"$d/$b.err" || die "postgres $b failed: $(tail -n 3 "$d/$b.err")"
    done
    cmp -s "$d/original.out" "$d/icpb.out" || die "postgres --indirect-call-promotion: output differs"
    log "PostgreSQL: cachegrind"
    # One after the other: a single-user postgres holds the data directory's lock, so a second
    # one at the same time stops at once (and its few instructions would pass for a result).
    for b in plainb icpb; do
        "${run[@]//\{\}/valgrind ${CG_OPTS[*]} --log-file=$d/cg.$b.1 $d/$b/bin/postgres}" >"$d/cg.$b.out" 2>"$d/cg.$b.err" ||
            die "postgres $b under cachegrind failed: $(tail -n 3 "$d/cg.$b.err")"
        cmp -s "$d/original.out" "$d/cg.$b.out" || die "postgres $b: output under cachegrind differs"
    done
    log "PostgreSQL: bench ($ROUNDS rounds)"
    local t
    t=$(pair "$d/plainb/bin/postgres" "$d/icpb/bin/postgres" "${run[@]}")
    echo "| PostgreSQL | $POINT_QUERIES point selects + 20 scans | $(promoted "$d") | $(cg_cells "$d/cg.plainb" "$d/cg.icpb") | $(fmt "$t") |" >>"$W/rows"
}

for p in $ONLY; do
    case $p in
        cppcheck) cppcheck_bench ;;
        lua) lua_bench ;;
        postgres) postgres_bench ;;
        *) die "ONLY takes cppcheck, lua, postgres" ;;
    esac
done

cat <<EOT
$(measured_on)
Reproduce: \`ONLY="$ONLY" bench/icp.sh $ROUNDS\` (took $((($(date +%s) - start + 59) / 60)) minutes).

| program | input | sites promoted (callees) | indirect calls made direct | executed instructions (cachegrind), without → with | I1 misses (32 KiB 8-way) | branch mispredicts | indirect branches executed | indirect mispredicts | CPU time, with / without (95% CI) | without, median |
|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|
$(cat "$W/rows")
EOT
