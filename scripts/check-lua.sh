#!/usr/bin/env bash
# check-lua.sh -- prove that a (rewritten) Lua 5.4 interpreter behaves like the original.
#
# Runs every tests/lua/*.lua and every bench/lua/*.lua (benchmarks at the small size
# declared by their "-- check-size: N" line) with LUA_BINARY and compares, per script,
# stdout, stderr and the exit status:
#   - with REFERENCE_LUA_BINARY: against that binary's run of the same script;
#   - without: against the stored <script>.expected next to the script (written by
#     --update-expected from the stock interpreter, lua-gcc of build-real-programs.sh).
# One line per script (ok / DIFF, with the run time), a unified diff of the first lines
# of each difference on stderr, exit 1 if anything differs (2 on usage errors).
#
# Every run: cwd = the repo root, the script given by its relative path (error messages
# and tracebacks contain it), argv[0] = "lua" (the interpreter prints it in front of
# uncaught errors), a clean environment for Lua (no LUA_INIT / LUA_PATH / LUA_CPATH),
# LC_ALL=C, TZ=UTC, stdin from /dev/null, under `timeout` (default 60 s per run).
#
# Usage:
#   scripts/check-lua.sh LUA_BINARY [REFERENCE_LUA_BINARY]
#   scripts/check-lua.sh --update-expected LUA_BINARY
# Options (before the binaries): --timeout SECS, --only GLOB (e.g. --only 'tests/*'),
#   --keep (keep the outputs, print their directory).
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"

# shellcheck disable=SC2317  # only used by the EXIT trap
log() { printf '%s\n' "check-lua: $*" >&2; }
die() { printf '%s\n' "check-lua: error: $*" >&2; exit 2; }
now() { date +%s.%N; }

# The rest is one brace group: bash parses it completely before running it, so editing
# or checking out this file while a check runs cannot derail that check.
{
limit=60 update=0 only="" keep=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --update-expected) update=1; shift ;;
        --timeout) limit=${2:?--timeout needs seconds}; shift 2 ;;
        --only) only=${2:?--only needs a glob}; shift 2 ;;
        --keep) keep=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) break ;;
    esac
done
[[ $# -ge 1 && $# -le 2 ]] || die "usage: check-lua.sh LUA_BINARY [REFERENCE_LUA_BINARY] (see --help)"
bin=$1 ref=${2:-}
[[ $update -eq 0 || -z $ref ]] || die "--update-expected takes one binary"
for b in "$bin" ${ref:+"$ref"}; do
    [[ -f $b && -x $b ]] || die "not an executable file: $b"
done
bin="$(readlink -f "$bin")"
if [[ -n $ref ]]; then ref="$(readlink -f "$ref")"; fi

OUT="$(mktemp -d "${TMPDIR:-/tmp}/check-lua.XXXXXX")"
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    if [[ $keep -eq 1 ]]; then log "outputs kept in $OUT"; else rm -rf -- "$OUT"; fi
}
trap cleanup EXIT

# run_lua BINARY SCRIPT(relative) OUTFILE ARGS...: stdout, then stderr and exit status
run_lua() {
    local lua=$1 script=$2 outf=$3 rc=0
    shift 3
    (
        cd "$REPO"
        exec env -u LUA_INIT -u LUA_INIT_5_4 -u LUA_PATH -u LUA_PATH_5_4 -u LUA_CPATH -u LUA_CPATH_5_4 \
            LC_ALL=C TZ=UTC timeout -k 5 "$limit" bash -c 'exec -a lua "$@"' lua "$lua" "$script" "$@" \
            <"/dev/null" >"$outf.stdout" 2>"$outf.stderr"
    ) || rc=$?
    {
        cat "$outf.stdout"
        if [[ -s $outf.stderr ]]; then
            printf -- '--- stderr ---\n'
            cat "$outf.stderr"
        fi
        printf '[exit status %d]\n' "$rc"
    } >"$outf"
    rm -f -- "$outf.stdout" "$outf.stderr"
}

cd "$REPO"
shopt -s nullglob
scripts=(tests/lua/*.lua bench/lua/*.lua)
[[ ${#scripts[@]} -gt 0 ]] || die "no tests/lua/*.lua or bench/lua/*.lua in $REPO"

bad=0 n=0
for s in "${scripts[@]}"; do
    # shellcheck disable=SC2053  # $only is a glob on purpose
    if [[ -n $only && $s != $only ]]; then continue; fi
    n=$((n + 1))
    args=()
    size="$(sed -n 's/^-- check-size:[[:space:]]*\([0-9][0-9]*\).*/\1/p; T; q' "$s")"
    if [[ -n $size ]]; then args=("$size"); fi
    id="${s//\//_}"
    t0=$(now)
    run_lua "$bin" "$s" "$OUT/$id.out" "${args[@]}"
    took="$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2fs", b - a }')"
    expected="${s%.lua}.expected"
    label="$s${size:+ $size}"
    if [[ $update -eq 1 ]]; then
        cp -- "$OUT/$id.out" "$expected"
        printf 'updated %-34s %s, %s\n' "$expected" "$took" "$(tail -n 1 "$expected")"
        continue
    fi
    if [[ -n $ref ]]; then
        run_lua "$ref" "$s" "$OUT/$id.ref" "${args[@]}"
        want="$OUT/$id.ref"
    else
        [[ -f $expected ]] || die "missing $expected (generate it: check-lua.sh --update-expected STOCK_LUA)"
        want=$expected
    fi
    if cmp -s "$want" "$OUT/$id.out"; then
        printf 'ok   %-34s %s\n' "$label" "$took"
    else
        printf 'DIFF %-34s %s\n' "$label" "$took"
        diff -u -a --label expected --label actual "$want" "$OUT/$id.out" | head -n 30 >&2 || true
        bad=$((bad + 1))
    fi
done
[[ $n -gt 0 ]] || die "no script matches --only '$only'"
[[ $update -eq 0 ]] || exit 0
if [[ $bad -gt 0 ]]; then
    printf '%d of %d Lua scripts differ\n' "$bad" "$n"
    exit 1
fi
printf 'all %d Lua scripts identical\n' "$n"
exit 0
}
