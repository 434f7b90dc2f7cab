#!/usr/bin/env bash
# stale-sqlite.sh -- a profile of one SQLite release used on a later one (stale profiles,
# issue 37; the second real version pair after bench/stale-lua.sh).
#
#   bench/stale-sqlite.sh [OUT_DIR] [ROUNDS]
#
# The pair, both from package registries:
#   old: SQLite 3.40.1 (2022-12-28), Debian bookworm's source package sqlite3 3.40.1-2+deb12u2
#        (`apt-get source sqlite3`), whose amalgamation (sqlite3.c, shell.c) is generated with
#        the package's own configure && make, as scripts/build-real-programs.sh does;
#   new: SQLite 3.44.2 (2023-11-24), upstream's sqlite-autoconf-3440200.tar.gz (amalgamation
#        sqlite3.c + shell.c) as bundled in npm's `sqlite3` package 5.1.7
#        (deps/sqlite-autoconf-3440200.tar.gz; `npm pack sqlite3@5.1.7`).
# Both shells are built alike, as scripts/build-real-programs.sh builds sqlite3 (gcc -O2 -g
# -fno-reorder-blocks-and-partition, SQLITE_DEFS of scripts/lib.sh, -Wl,--emit-relocs). When
# ~/.cache/rivet/real already holds that very 3.40.1 build (same Makefile), it is reused
# instead of compiling sqlite3.c again. Builds are cached in
# ${RIVET_CACHE:-~/.cache/rivet}/stale-sqlite/build-<version>/ (a .complete marker).
#
# Both are instrumented and trained on bench/sqlite/workload.sql (:memory:); 3.40.1's counts
# become sqlite-3.40.1.prof with its code hashes (`rivet merge --binary`). Then 3.44.2 is
# optimized with its own profile (fresh), with 3.40.1's profile matched by code hashes
# (stale) and with it forced onto 3.44.2's offsets (--force); llvm-bolt-19 does fresh from
# 3.44.2's fdata and stale from 3.40.1's YAML (written by `llvm-bolt -w`) with
# -infer-stale-profile. Every output is compared with 3.44.2 by `rivet bench` (CPU time,
# ROUNDS rounds, default 20) on the same workload, then each stale output with its fresh one.
# Everything lands in OUT_DIR (default /tmp/rivet-stale-sqlite).
set -euo pipefail

OUT=${1:-/tmp/rivet-stale-sqlite}
ROUNDS=${2:-20}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RIVET=${RIVET:-$ROOT/target/release/rivet}
BOLT=${BOLT:-llvm-bolt-19}
CACHE_ROOT="${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}"
C="$CACHE_ROOT/stale-sqlite"
OLD_V=3.40.1 OLD_DEB=3.40.1-2+deb12u2
NEW_V=3.44.2 NEW_NPM=sqlite3@5.1.7 NEW_TGZ=sqlite-autoconf-3440200
WORKLOAD="$ROOT/bench/sqlite/workload.sql"
[[ -x $RIVET ]] || { echo "stale-sqlite: $RIVET is missing (cargo build --release -p rivet)" >&2; exit 2; }
command -v "$BOLT" >/dev/null || { echo "stale-sqlite: $BOLT is missing (apt-get install bolt-19)" >&2; exit 2; }
# shellcheck source=../scripts/lib.sh
source "$ROOT/scripts/lib.sh" # SQLITE_DEFS, write_sqlite_shell_build
mkdir -p "$C" "$OUT"

# amalgamation VERSION -> prints the directory holding that version's sqlite3.c and shell.c
amalgamation() {
    local d
    case $1 in
        "$OLD_V")
            d="$CACHE_ROOT/real/src/sqlite3-$OLD_DEB/amalgamation"
            if [[ ! -f $d/.complete ]]; then
                d="$C/src-$OLD_V/amalgamation"
                if [[ ! -f $d/.complete ]]; then
                    rm -rf "$C/src-$OLD_V" && mkdir -p "$C/src-$OLD_V" "$d"
                    (cd "$C/src-$OLD_V" && apt-get source "sqlite3=$OLD_DEB" >apt.log 2>&1) ||
                        { echo "stale-sqlite: apt-get source sqlite3=$OLD_DEB failed (needs a bookworm deb-src line)" >&2; exit 2; }
                    local src
                    src=$(find "$C/src-$OLD_V" -maxdepth 1 -type d -name "sqlite3-$OLD_V*" | head -1)
                    (cd "$d" && "$src/configure" --disable-tcl --disable-readline --disable-editline >configure.log 2>&1 &&
                        make sqlite3.c shell.c >make.log 2>&1) ||
                        { echo "stale-sqlite: generating the $OLD_V amalgamation failed (needs tclsh)" >&2; exit 2; }
                    touch "$d/.complete"
                fi
            fi ;;
        "$NEW_V")
            d="$C/src-$NEW_V/$NEW_TGZ"
            if [[ ! -s $d/shell.c ]]; then
                rm -rf "$C/src-$NEW_V" && mkdir -p "$C/src-$NEW_V"
                (cd "$C/src-$NEW_V" && npm pack "$NEW_NPM" >npm.log 2>&1 &&
                    tar -xzf "${NEW_NPM/@/-}.tgz" "package/deps/$NEW_TGZ.tar.gz" &&
                    tar -xzf "package/deps/$NEW_TGZ.tar.gz") ||
                    { echo "stale-sqlite: npm pack $NEW_NPM failed (needs npm and the registry)" >&2; exit 2; }
            fi ;;
    esac
    grep -q "^#define SQLITE_VERSION *\"$1\"" "$d/sqlite3.c" ||
        { echo "stale-sqlite: $d/sqlite3.c is not SQLite $1" >&2; exit 2; }
    echo "$d"
}

for v in $OLD_V $NEW_V; do
    b="$C/build-$v"
    real="$CACHE_ROOT/real/sqlite3-$OLD_DEB-gcc"
    if [[ ! -f $b/.complete ]]; then
        # An assignment, so that a failure inside amalgamation stops the script (set -e).
        amalg=$(amalgamation "$v")
        rm -rf "$b" && mkdir -p "$b"
        write_sqlite_shell_build "$b" "$amalg" gcc "-O2 -g -fno-reorder-blocks-and-partition " -Wl,--emit-relocs
        if [[ $v == "$OLD_V" && -f $real/.complete ]] && cmp -s "$b/Makefile" "$real/Makefile"; then
            cp "$real/sqlite3" "$b/sqlite3" # the same build, already made by build-real-programs.sh
            echo "reused $real/sqlite3" >"$b/build.log"
        else
            nice -n 10 make -C "$b" -j "$(nproc)" sqlite3 >"$b/build.log" 2>&1 ||
                { tail -20 "$b/build.log" >&2; echo "stale-sqlite: building SQLite $v failed" >&2; exit 2; }
        fi
        touch "$b/.complete"
    fi
    "$b/sqlite3" -version | grep -q "^$v " || { echo "stale-sqlite: $b/sqlite3 is not SQLite $v" >&2; exit 2; }
done

cd "$OUT"
for v in $OLD_V $NEW_V; do
    cp "$C/build-$v/sqlite3" "sqlite3-$v"
    "$RIVET" instrument "sqlite3-$v" -o "sqlite3-$v.inst" --profile "sqlite3-$v.counts" >/dev/null
    rm -f "sqlite3-$v.counts"
    ./"sqlite3-$v.inst" -bail :memory: <"$WORKLOAD" >/dev/null
    "$RIVET" merge --binary "sqlite3-$v" "sqlite3-$v.counts" -o "sqlite-$v.prof"
    "$RIVET" merge "sqlite3-$v.counts" -o "sqlite-$v.fdata"
done

NEW=sqlite3-$NEW_V
"$RIVET" optimize $NEW --profile sqlite-$NEW_V.prof -o new.rivet-fresh >/dev/null
"$RIVET" optimize $NEW --profile sqlite-$OLD_V.prof -o new.rivet-stale --json >stale.json 2>stale.err
cat stale.err
"$RIVET" inspect $NEW --profile sqlite-$OLD_V.prof --top 10 2>/dev/null | sed -n '/^stale profile/,$p'
"$RIVET" optimize $NEW --profile sqlite-$OLD_V.prof --force -o new.rivet-forced --json >forced.json 2>/dev/null
echo "forced onto the new offsets: matched share $(grep -o '"matched_share":[0-9.e-]*' forced.json)"

RECIPE=(-reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold -split-eh)
"$BOLT" sqlite3-$OLD_V -data=sqlite-$OLD_V.fdata -w sqlite-$OLD_V.yaml -o old.bolt "${RECIPE[@]}" >bolt-yaml.log 2>&1
"$BOLT" $NEW -o new.bolt-fresh -data=sqlite-$NEW_V.fdata "${RECIPE[@]}" >bolt-fresh.log 2>&1
"$BOLT" $NEW -o new.bolt-stale -data=sqlite-$OLD_V.yaml -infer-stale-profile "${RECIPE[@]}" >bolt-stale.log 2>&1
grep -E 'stale|inference' bolt-stale.log || true

cmd=(sh -c "{} -bail :memory: <'$WORKLOAD' >/dev/null")
for out in new.rivet-fresh new.rivet-stale new.rivet-forced new.bolt-fresh new.bolt-stale; do
    cmp <(./$out -bail :memory: <"$WORKLOAD") <(./$NEW -bail :memory: <"$WORKLOAD")
    echo "== $out vs sqlite $NEW_V"
    # Exit 3 means "significantly slower": a result, not a failure.
    { "$RIVET" bench ./$NEW ./$out --runs "$ROUNDS" -- "${cmd[@]}" || true; } | tail -1
done

# The stale output against the fresh one directly (the kept share's error is then that of
# one ratio, not of two).
for pair in "new.rivet-fresh new.rivet-stale" "new.bolt-fresh new.bolt-stale"; do
    # shellcheck disable=SC2086 # two binaries
    set -- $pair
    echo "== $1 vs $2"
    { "$RIVET" bench "./$1" "./$2" --runs "$ROUNDS" -- "${cmd[@]}" || true; } | tail -1
done
