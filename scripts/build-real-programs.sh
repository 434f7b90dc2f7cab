#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted $(...) / $@ below are Makefile text
# build-real-programs.sh -- build real programs nobody here wrote, from Debian
# source packages, with relocations kept (-Wl,--emit-relocs), for Rivet's
# end-to-end tests and benchmarks (docs/architecture.md, "Testing").
#
#   lua5.4  -> the `lua` interpreter, liblua linked statically (no readline)
#   sqlite3 -> the `sqlite3` shell from the amalgamation (sqlite3.c + shell.c)
#   sqlite3 -> `testfixture`, SQLite's TCL test harness (the amalgamation + the
#              src/test*.c and ext/ test sources of upstream's TESTSRC, tclsqlite.c),
#              linked against the system Tcl (tcl-dev); scripts/check-sqlite.sh runs
#              the source tree's test/ suite with it
#
#   redis   -> `redis-server`, `redis-benchmark` and `redis-cli` (gcc only), with the
#              bundled deps (hiredis, lua, hdr_histogram, linenoise) and libc malloc
#              (MALLOC=libc: no jemalloc build), no TLS, no systemd; for server workloads
#   postgresql-15 -> PostgreSQL's server `postgres`, installed with its tools (initdb,
#              pg_ctl, psql, pgbench) and its regression suite (pg_regress, regress.so,
#              the SQL files), gcc only, from the upstream tarball of the Debian source
#              package (no Debian patches), no ICU, no readline; plain -O2 -g as the
#              upstream build and Tomas Vondra's "Playing with BOLT and Postgres" use,
#              so gcc's own hot/cold split (`.cold` parts) stays in
#   cppcheck -> the `cppcheck` static analyser and its `testrunner` (4,000-odd unit tests),
#              C++ with exceptions, gcc only, upstream's Makefile, plain -O2 -g -DNDEBUG
#              (gcc's `.cold` parts stay in), with the bundled tinyxml2 and simplecpp
#   openssl -> OpenSSL 3.0's `libcrypto.so.3` and `libssl.so.3`, the `openssl` app and the
#              test programs, gcc only, upstream's Configure (`linux-x86_64 shared`) on the
#              Debian source tree (Debian's patches applied), built in that tree and kept with
#              its objects so that `make test` runs there without rebuilding
#
# each with CC in {gcc, clang-19}; flags: -O2 -g -Wl,--emit-relocs, and for gcc
# also -fno-reorder-blocks-and-partition. Default PIE (the compilers' default).
# Also lua and sqlite3 with gcc WITHOUT -Wl,--emit-relocs (otherwise identical),
# for Rivet's in-place (no relocations) mode.
#
# Cache (outside the repo), R = ${RIVET_CACHE:-$HOME/.cache/rivet}/real:
#   R/src/<package>-<debian-version>/       apt-get source output (.dsc, tarballs)
#   R/src/<package>-<debian-version>/<dir>/ the unpacked, patched source tree
#   R/<package>-<debian-version>-<cc>/      one build: the binary (lua | sqlite3; Lua's
#        directory is lua5.4-<debian-version>-fixedseed-<cc>, see build_lua),
#        `source` -> the unpacked tree, build.log, flags.txt, .complete
#   R/<package>-<debian-version>-gcc-norelocs/         the same without --emit-relocs
#   R/sqlite3-<debian-version>-testfixture-<cc>/     testfixture
#   R/sqlite3-<debian-version>-testfixture-gcc-norelocs/  the same without --emit-relocs
#   R/redis-<debian-version>-gcc/           redis-server, redis-benchmark, redis-cli
#   R/postgresql-15-<debian-version>-gcc/   install/ (bin/postgres ...), regress/
#   R/cppcheck-<debian-version>-gcc/        tree/: the source tree with cppcheck and
#        testrunner built in it (both look for cfg/ and the test files there)
#   R/openssl-<debian-version>-gcc/         tree/: the source tree with OpenSSL built in it
#        (libcrypto.so.3, libssl.so.3, apps/openssl, test/*); run `make test` in a copy
# Complete directories (.complete marker) are reused; builds happen in a temp
# dir renamed into place; a flock on R/.lock serialises concurrent invocations.
#
# Needs root only the first time on a machine (adds a deb-src entry for
# bookworm, apt-get update, installs dpkg-dev / tcl / tcl-dev / zlib1g-dev if missing).
#
# stdout: the last lines are "<name> <absolute path>":
#   lua-src, sqlite3-src (source trees), sqlite3-amalgamation (its sqlite3.c, shell.c),
#   then lua-gcc, lua-clang, sqlite3-gcc, sqlite3-clang, testfixture-gcc, testfixture-clang,
#   lua-gcc-norelocs, sqlite3-gcc-norelocs, testfixture-gcc-norelocs, redis-gcc (redis-server),
#   redis-benchmark, redis-cli, postgres-gcc (install/bin/postgres), postgres-regress
#   (the directory to run pg_regress in), cppcheck-gcc, cppcheck-testrunner (run it in its
#   own directory), openssl-tree (the built tree), openssl-libcrypto, openssl-libssl,
#   openssl-app (apps/openssl; run it through the tree's util/shlib_wrap.sh, which points
#   LD_LIBRARY_PATH at the tree). Everything else goes to stderr.
#
# Arguments: names of programs to build (lua sqlite3 redis postgresql cppcheck openssl);
# none means all of them. Only the named programs' result lines are printed.
set -euo pipefail

exec 3>&1 1>&2 # real stdout only for the result lines

PROGRAMS=(lua sqlite3 redis postgresql cppcheck openssl)
WANTED=("$@")
for w in "${WANTED[@]}"; do
    [[ " ${PROGRAMS[*]} " == *" $w "* ]] || { echo "build-real-programs: error: unknown program '$w' (known: ${PROGRAMS[*]})" >&2; exit 2; }
done
want() { # program -> true when it is to be built (no arguments: all)
    [[ ${#WANTED[@]} -eq 0 || " ${WANTED[*]} " == *" $1 "* ]]
}

CACHE_ROOT="${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}"
R="$CACHE_ROOT/real"
DEB_SRC_FILE=/etc/apt/sources.list.d/rivet-debian-src.sources
COMPILERS=(gcc clang)

log() { printf '%s\n' "build-real-programs: $*" >&2; }
die() { printf '%s\n' "build-real-programs: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root for: $* (run this script once as root)"
    fi
}

cc_tool() { if [[ $1 == gcc ]]; then echo gcc; else echo clang-19; fi; }
cflags_for() { # cc -> flags, one word per line
    printf '%s\n' -O2 -g
    if [[ $1 == gcc ]]; then printf '%s\n' -fno-reorder-blocks-and-partition; fi
}

start_all=$(now)

# shellcheck source=lib.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"

# Temp dirs still to be removed if we stop early (they vanish when renamed into place).
TMPS=()
new_tmp() { # final-path -> creates and registers "<final>.tmp.XXXXXX" (0755), sets NEW_TMP
    NEW_TMP="$(mktemp -d "$1.tmp.XXXXXX")"
    chmod 755 "$NEW_TMP" # apt-get source drops to user _apt, which must write here
    TMPS+=("$NEW_TMP")
}
cleanup() {
    local d
    for d in "${TMPS[@]}"; do if [[ -d $d ]]; then rm -rf -- "$d"; fi; done
}
trap cleanup EXIT

for t in gcc clang-19 make ar readelf flock; do
    if ! command -v "$t" >/dev/null 2>&1; then
        case $t in
            clang-19) pkg=clang-19 ;; ar | readelf) pkg=binutils ;; flock) pkg=util-linux ;; *) pkg=$t ;;
        esac
        die "missing $t: apt-get install $pkg"
    fi
done

mkdir -p "$R/src"
exec 9>"$R/.lock"
if ! flock -n 9; then
    log "waiting for another invocation (lock $R/.lock) ..."
    flock 9
fi

# --- 1. deb-src entry, dpkg-dev, tcl ----------------------------------------
have_deb_src() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        # one-line format: "deb-src <uri> bookworm main"; deb822: "Types: ... deb-src"
        if grep -Eq '^[[:space:]]*deb-src[[:space:]].*[[:space:]]bookworm[[:space:]].*main' "$f" ||
            { grep -Eq '^Types:.*deb-src' "$f" && grep -Eq '^Suites:.*bookworm( |$)' "$f"; }; then
            return 0
        fi
    done
    return 1
}
src_known() { [[ -n "$(apt-cache showsrc lua5.4 2>/dev/null)" ]]; }

if ! have_deb_src; then
    log "adding deb-src entry for bookworm main: $DEB_SRC_FILE"
    as_root tee "$DEB_SRC_FILE" >/dev/null <<'EOF'
# Added by rivet scripts/build-real-programs.sh: source packages for apt-get source.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
fi
if ! src_known; then
    log "apt-get update (source indexes)"
    as_root apt-get update -q >&2
    src_known || die "apt-cache showsrc lua5.4 finds nothing even after apt-get update"
fi
need_pkgs=()
command -v dpkg-source >/dev/null 2>&1 || need_pkgs+=(dpkg-dev)
command -v tclsh >/dev/null 2>&1 || need_pkgs+=(tcl)
find_tcl_config() { # -> path of tclConfig.sh (tcl-dev), or nothing
    local f
    for f in /usr/lib/*/tcl8.*/tclConfig.sh /usr/lib/tcl8.*/tclConfig.sh; do
        if [[ -f $f ]] && grep -q '^TCL_INCLUDE_SPEC=' "$f"; then
            printf '%s\n' "$f"
            return 0
        fi
    done
}
[[ -n "$(find_tcl_config)" && -f /usr/include/tcl8.6/tcl.h ]] || need_pkgs+=(tcl-dev)
[[ -f /usr/include/zlib.h ]] || need_pkgs+=(zlib1g-dev)
# OpenSSL 3's Configure and test harness use Perl modules that perl-base lacks (IPC::Cmd).
perl -MIPC::Cmd -e 1 >/dev/null 2>&1 || need_pkgs+=(perl)
if [[ ${#need_pkgs[@]} -gt 0 ]]; then
    log "installing ${need_pkgs[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >&2
fi

# --- 2. sources -------------------------------------------------------------
# Version that `apt-get source` would fetch, from the .dsc file name.
src_version() { # package
    local uris dsc
    uris="$(apt-get source --print-uris -q "$1" 2>/dev/null)" || die "apt-get source --print-uris $1 failed"
    # lines: '<url-encoded uri>' <file name> <size> <hash>
    dsc="$(awk '$2 ~ /\.dsc$/ { print $2; exit }' <<<"$uris")"
    dsc="${dsc%.dsc}"
    [[ $dsc == "$1"_* ]] || die "cannot find the .dsc of $1 in: $uris"
    printf '%s\n' "${dsc#"$1"_}"
}

# Downloads + unpacks once; sets FETCHED to the unpacked tree's path. (Not
# called in $(...): the EXIT trap must see the temp dir it registers.)
fetch_source() { # package version [apt-version: with the epoch, when the package has one]
    local pkg=$1 ver=$2 apt_ver=${3:-$2} dir="$R/src/$1-$2" tmp tree
    if [[ ! -f $dir/.complete ]]; then
        rm -rf -- "$dir"
        new_tmp "$dir"
        tmp=$NEW_TMP
        log "apt-get source $pkg=$apt_ver -> $dir"
        (cd "$tmp" && apt-get source -q "$pkg=$apt_ver" >&2) || die "apt-get source $pkg=$apt_ver failed"
        tree="$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
        [[ -n $tree ]] || die "apt-get source $pkg produced no directory"
        basename "$tree" >"$tmp/.tree"
        touch "$tmp/.complete"
        mv -T -- "$tmp" "$dir"
    fi
    FETCHED="$dir/$(cat "$dir/.tree")"
}

# The version apt-get wants: the .dsc name without its epoch, the epoch put back (redis: 5:).
apt_version() { # package version-without-epoch
    apt-cache showsrc "$1" 2>/dev/null | awk -v v="$2" '
        $1 == "Version:" && ($2 == v || $2 ~ ("^[0-9]+:" v "$")) { print $2; exit }'
}

# The newest version of a source package that downloads: bookworm-security lists versions the
# mirror no longer serves (postgresql-15 15.20 gave 404 while 15.18 came from bookworm).
# An already fetched version is reused.
fetchable_source() { # package -> sets FETCHED and FETCHED_VER
    local pkg=$1 ver ok versions
    versions=$(apt-cache showsrc "$pkg" 2>/dev/null | awk '$1 == "Version:" { print $2 }' | sort -V -r -u)
    for ver in $versions; do
        if [[ -f $R/src/$pkg-$ver/.complete ]]; then
            FETCHED_VER=$ver
            FETCHED="$R/src/$pkg-$ver/$(cat "$R/src/$pkg-$ver/.tree")"
            return 0
        fi
    done
    for ver in $versions; do
        # A trial download (removed again; fetch_source then fetches and unpacks for good).
        new_tmp "$R/src/.probe-$pkg"
        ok=0
        (cd "$NEW_TMP" && apt-get source -q --download-only "$pkg=$ver" >/dev/null 2>&1) && ok=1
        rm -rf -- "$NEW_TMP"
        if ((ok)); then
            FETCHED_VER=$ver
            fetch_source "$pkg" "$ver"
            return 0
        fi
        log "apt-get source $pkg=$ver does not download; trying an older version"
    done
    die "no version of $pkg's source package downloads (apt-cache showsrc $pkg)"
}

if want lua; then
    LUA_VER="$(src_version lua5.4)"
    log "lua5.4 $LUA_VER"
    fetch_source lua5.4 "$LUA_VER"
    LUA_SRC=$FETCHED
fi
if want sqlite3; then
    SQLITE_VER="$(src_version sqlite3)"
    log "sqlite3 $SQLITE_VER"
    fetch_source sqlite3 "$SQLITE_VER"
    SQLITE_SRC=$FETCHED
fi
if want redis; then
    REDIS_VER="$(src_version redis)"
    log "redis $REDIS_VER"
    fetch_source redis "$REDIS_VER" "$(apt_version redis "$REDIS_VER")"
    REDIS_SRC=$FETCHED
fi
if want postgresql; then
    fetchable_source postgresql-15
    PG_VER=$FETCHED_VER
    PG_SRC=$FETCHED
    log "postgresql-15 $PG_VER"
fi
if want cppcheck; then
    fetchable_source cppcheck
    CPPCHECK_VER=$FETCHED_VER
    CPPCHECK_SRC=$FETCHED
    log "cppcheck $CPPCHECK_VER"
fi
if want openssl; then
    fetchable_source openssl
    OPENSSL_VER=$FETCHED_VER
    OPENSSL_SRC=$FETCHED
    log "openssl $OPENSSL_VER"
fi

# --- 3. builds --------------------------------------------------------------
# new_build <package> <version> <cc>: prints the build dir if already complete
# (sets BUILD_DONE=1) or a fresh temp dir to build in (BUILD_DONE=0).
check_binary() { # path kind [relocs|norelocs]
    local bin=$1 kind=$2 relocs=${3:-relocs} out sections
    case $kind in
        lua) out="$("$bin" -e 'print(1+1)' 2>&1)" || die "$bin -e 'print(1+1)' failed: $out" ;;
        sqlite3) out="$(echo 'select 1+1;' | "$bin" 2>&1)" || die "sqlite3 smoke test failed: $out" ;;
        redis) # redis-server: its version line; the tools next to it must run too
            out="$("$bin" --version 2>&1)" || die "$bin --version failed: $out"
            [[ $out == "Redis server v="* ]] || die "$bin --version printed '$out'"
            "$(dirname "$bin")/redis-cli" --version >/dev/null 2>&1 || die "redis-cli next to $bin does not run"
            "$(dirname "$bin")/redis-benchmark" --version >/dev/null 2>&1 || die "redis-benchmark next to $bin does not run"
            out=2 ;;
        postgres) # the server's version line; the tools it needs next to it
            out="$("$bin" -V 2>&1)" || die "$bin -V failed: $out"
            [[ $out == "postgres (PostgreSQL) "* ]] || die "$bin -V printed '$out'"
            for b in initdb pg_ctl psql pgbench; do # no rpath: the install moves (see build_postgres)
                LD_LIBRARY_PATH="$(dirname "$bin")/../lib" "$(dirname "$bin")/$b" -V >/dev/null 2>&1 ||
                    die "$b next to $bin does not run"
            done
            [[ -x $(dirname "$bin")/../../regress/pg_regress ]] || die "no pg_regress beside $bin's install"
            out=2 ;;
        cppcheck) # its version line; finds its cfg/ beside it; testrunner beside it
            out="$("$bin" --version 2>&1)" || die "$bin --version failed: $out"
            [[ $out == "Cppcheck "* ]] || die "$bin --version printed '$out'"
            [[ -f $(dirname "$bin")/cfg/std.cfg ]] || die "no cfg/std.cfg beside $bin"
            [[ -x $(dirname "$bin")/testrunner ]] || die "no testrunner beside $bin"
            out=2 ;;
        testfixture) # runs a Tcl script file
            printf 'sqlite3 db :memory:\nputs [db eval {select 1+1}]\ndb close\n' >"$R/.smoke.tcl"
            out="$("$bin" "$R/.smoke.tcl" </dev/null 2>&1)" || die "testfixture smoke test failed: $out" ;;
    esac
    [[ $out == 2 ]] || die "smoke test of $bin printed '$out', expected 2"
    sections="$(readelf -S -W "$bin")"
    if [[ $relocs == relocs ]]; then
        grep -q ' \.rela\.text ' <<<"$sections" || die "$bin has no .rela.text section"
    else
        if grep -q ' \.rela\.text ' <<<"$sections"; then die "$bin has a .rela.text section"; fi
    fi
}

finish_build() { # tmp final binary-name kind [relocs|norelocs]
    local tmp=$1 final=$2 name=$3 kind=$4 relocs=${5:-relocs}
    check_binary "$tmp/$name" "$kind" "$relocs"
    touch "$tmp/.complete"
    rm -rf -- "$final"
    mv -T -- "$tmp" "$final"
    check_binary "$final/$name" "$kind" "$relocs"
}

# Lua: the interpreter with liblua linked statically (write_lua_build in lib.sh: the
# upstream Makefile's LUA_A set, -DLUA_USE_LINUX, no readline); -Wl,-E as upstream so C
# modules can be loaded.
# One fixed string-hash seed (LUA_FIXED_SEED in lib.sh): Lua seeds its string hashes from
# time(NULL) and from addresses (luai_makeseed in lstate.c), so hash chains, and with them
# the work done, changed from run to run and from one rewritten binary to the next
# (lua_newstate moves). Three runs of one binary on bench/lua/nbody.lua 20000 executed
# 524.6 M, 539.6 M and 533.6 M instructions (callgrind), and every training run gave another
# profile. With the seed fixed, a binary does the same work on every run under valgrind
# (which places memory the same way each time), so optimizers and layouts are compared on
# the same work; training runs still differ in a few counts, where memory sizes (paths,
# addresses) move the garbage collector's steps. Nothing here depends on hash flooding
# protection. The directory name says so, so that builds without it are not reused.
lua_dir() { printf '%s' "$R/lua5.4-$LUA_VER-fixedseed-$1"; } # cc, or gcc-norelocs
build_lua() { # cc [relocs|norelocs]
    local cc=$1 relocs=${2:-relocs} final="$(lua_dir "$1")" tmp tool t0 flags ldflags
    ldflags="-Wl,--emit-relocs -Wl,-E"
    if [[ $relocs == norelocs ]]; then final="$final-norelocs" ldflags="-Wl,-E"; fi
    if [[ -f $final/.complete ]]; then
        log "cached: $final/lua"
        return 0
    fi
    t0=$(now)
    tool="$(cc_tool "$cc")"
    flags="$(cflags_for "$cc" | tr '\n' ' ')"
    rm -rf -- "$final"
    new_tmp "$final"
    tmp=$NEW_TMP
    ln -s "$LUA_SRC" "$tmp/source"
    write_lua_build "$tmp" "$LUA_SRC" "$tool" "$flags" "$ldflags" \
        "$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)"
    log "building lua with $tool ($flags $ldflags) ..."
    if ! make -C "$tmp" -j "$(nproc)" lua >"$tmp/build.log" 2>&1; then
        cat "$tmp/build.log" >&2
        die "lua build with $tool failed (log above)"
    fi
    rm -rf -- "$tmp/obj"
    finish_build "$tmp" "$final" lua lua "$relocs"
    log "built $final/lua in $(elapsed "$t0")"
}

# SQLite: the amalgamation (sqlite3.c, shell.c) is generated once per version
# with the package's own build (configure + make, needs tclsh), out of tree.
# (SQLITE_DEFS, the feature set, is in lib.sh.)

make_amalgamation() { # -> sets AMALG
    AMALG="$R/src/sqlite3-$SQLITE_VER/amalgamation"
    if [[ -f $AMALG/.complete ]]; then return 0; fi
    local tmp t0
    t0=$(now)
    rm -rf -- "$AMALG"
    new_tmp "$AMALG"
    tmp=$NEW_TMP
    log "generating the sqlite amalgamation (configure && make sqlite3.c shell.c) in $AMALG ..."
    if ! (cd "$tmp" && "$SQLITE_SRC/configure" --disable-tcl --disable-readline --disable-editline \
        >configure.log 2>&1 && make sqlite3.c shell.c >make.log 2>&1); then
        tail -n 40 "$tmp"/configure.log "$tmp"/make.log >&2 || true
        die "generating the sqlite amalgamation failed"
    fi
    for f in sqlite3.c sqlite3.h shell.c; do
        [[ -s $tmp/$f ]] || die "amalgamation: $f missing"
    done
    touch "$tmp/.complete"
    mv -T -- "$tmp" "$AMALG"
    log "amalgamation ready in $(elapsed "$t0")"
}

# The sqlite-family builds (sqlite3 shells, testfixtures) are prepared one build
# dir (Makefile) each, unless cached, and then all run under one make jobserver,
# so the long sqlite3.c compiles overlap on a 2-core machine. A job is a name
# (the result-line name) in SQLITE_JOBS plus its JOB_* fields.
SQLITE_JOBS=()
declare -A JOB_TMP=() JOB_FINAL=() JOB_BIN=() JOB_KIND=() JOB_RELOCS=()
add_sqlite_job() { # name final binary kind relocs -> NEW_TMP (a fresh build dir), or returns 1 if cached
    local name=$1 final=$2
    if [[ -f $final/.complete ]]; then
        log "cached: $final/$3"
        return 1
    fi
    rm -rf -- "$final"
    new_tmp "$final"
    ln -s "$SQLITE_SRC" "$NEW_TMP/source"
    ln -s "$AMALG" "$NEW_TMP/amalgamation"
    SQLITE_JOBS+=("$name")
    JOB_TMP[$name]=$NEW_TMP JOB_FINAL[$name]=$final JOB_BIN[$name]=$3 JOB_KIND[$name]=$4 JOB_RELOCS[$name]=$5
}

sqlite_final() { # cc relocs -> final dir of that sqlite3 shell build
    if [[ $2 == relocs ]]; then echo "$R/sqlite3-$SQLITE_VER-$1"; else echo "$R/sqlite3-$SQLITE_VER-$1-norelocs"; fi
}

prepare_sqlite() { # cc [relocs|norelocs]
    local cc=$1 relocs=${2:-relocs} final tool flags ldflags=-Wl,--emit-relocs name="sqlite3-$1"
    final="$(sqlite_final "$cc" "$relocs")"
    if [[ $relocs == norelocs ]]; then ldflags="" name="$name-norelocs"; fi
    add_sqlite_job "$name" "$final" sqlite3 sqlite3 "$relocs" || return 0
    tool="$(cc_tool "$cc")"
    flags="$(cflags_for "$cc" | tr '\n' ' ')"
    write_sqlite_shell_build "$NEW_TMP" "$AMALG" "$tool" "$flags" "$ldflags"
    log "building sqlite3 with $tool ($flags $ldflags) in $NEW_TMP ..."
}

# One variable of the source tree's Makefile.in (NAME = ... / NAME += ..., with
# backslash continuations), one word per line, $(TOP) replaced by the source tree.
makefile_in_var() { # name
    awk -v name="$1" '
        !on && $0 ~ "^" name "[ \t]*[+]?=" { on = 1; sub("^" name "[ \t]*[+]?=", "") }
        on {
            line = $0; cont = sub(/\\[ \t]*$/, "", line)
            n = split(line, w); for (i = 1; i <= n; i++) print w[i]
            if (!cont) on = 0
        }' "$SQLITE_SRC/Makefile.in" | sed "s|\$(TOP)|$SQLITE_SRC|g"
}

# testfixture as upstream's `make testfixture` (Makefile.in, USE_AMALGAMATION=1)
# builds it: TESTSRC + src/tclsqlite.c + sqlite3.c, compiled with upstream's TCC
# flags (-D_HAVE_SQLITE_CONFIG_H with the configured sqlite_cfg.h, -DNDEBUG,
# zlib), -DSQLITE_NO_SYNC=1 -DSQLITE_TEMP_STORE=1 and TESTFIXTURE_FLAGS, plus our
# flags and the same SQLITE_DEFS feature set as the sqlite3 shell (so FTS3/4/5,
# R-Tree, sessions, ... get tested), linked with -ltcl8.6 -lz. Each file is its
# own make target (parallel), not one compiler call as upstream.
prepare_testfixture() { # cc [relocs|norelocs]
    local cc=$1 relocs=${2:-relocs} tool flags tclcfg tcl_inc tcl_lib srcs tfflags dups
    local name="testfixture-$cc" ldflags=-Wl,--emit-relocs
    if [[ $relocs == norelocs ]]; then name="$name-norelocs" ldflags=""; fi
    add_sqlite_job "$name" "$R/sqlite3-$SQLITE_VER-$name" testfixture testfixture "$relocs" || return 0
    tool="$(cc_tool "$cc")"
    flags="$(cflags_for "$cc" | tr '\n' ' ')"
    tclcfg="$(find_tcl_config)"
    [[ -n $tclcfg ]] || die "no tclConfig.sh (apt-get install tcl-dev)"
    # shellcheck disable=SC1090  # tclConfig.sh is plain VAR='value' lines
    tcl_inc="$(. "$tclcfg" && printf '%s' "$TCL_INCLUDE_SPEC")"
    # shellcheck disable=SC1090
    tcl_lib="$(. "$tclcfg" && printf '%s' "$TCL_LIB_SPEC")"
    srcs="$(makefile_in_var TESTSRC)"
    [[ $(wc -l <<<"$srcs") -gt 50 ]] || die "cannot read TESTSRC from $SQLITE_SRC/Makefile.in"
    # sqlite3.c first: the longest compile starts first under make -j
    srcs="$AMALG/sqlite3.c"$'\n'"$srcs"$'\n'"$SQLITE_SRC/src/tclsqlite.c"
    dups="$(xargs -n 1 basename <<<"$srcs" | sort | uniq -d)"
    [[ -z $dups ]] || die "testfixture sources with the same file name: $dups"
    tfflags="$(makefile_in_var TESTFIXTURE_FLAGS | tr '\n' ' ')"
    [[ $tfflags == *-DSQLITE_TEST=1* ]] || die "cannot read TESTFIXTURE_FLAGS from $SQLITE_SRC/Makefile.in"
    {
        printf 'CC = %s\nCFLAGS = %s\nDEFS = %s\nA = %s\nS = %s\n' "$tool" "$flags" "$SQLITE_DEFS" "$AMALG" "$SQLITE_SRC"
        printf 'TCC = -D_HAVE_SQLITE_CONFIG_H -DBUILD_sqlite -DNDEBUG -DSQLITE_OS_UNIX=1 -DSQLITE_HAVE_ZLIB=1\n'
        printf 'TF = -DSQLITE_NO_SYNC=1 -DSQLITE_TEMP_STORE=1 %s\n' "$tfflags"
        printf 'INC = -I$(A) -I$(S)/src -I$(S)/ext/rtree -I$(S)/ext/icu -I$(S)/ext/fts3 -I$(S)/ext/async'
        printf ' -I$(S)/ext/session -I$(S)/ext/userauth %s\n' "$tcl_inc"
        printf 'LDFLAGS = %s\nLIBS = %s -lm -lz -ldl -lpthread\n' "$ldflags" "$tcl_lib"
        printf 'SRCS = %s\n' "$(tr '\n' ' ' <<<"$srcs")"
        printf 'OBJS = $(addprefix obj/,$(notdir $(SRCS:.c=.o)))\n'
        printf 'vpath %%.c $(sort $(dir $(SRCS)))\n'
        printf 'testfixture: $(OBJS)\n\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(OBJS) $(LIBS)\n'
        printf 'obj/%%.o: %%.c\n\t@mkdir -p obj\n\t$(CC) $(CFLAGS) $(DEFS) $(TCC) $(TF) $(INC) -c -o $@ $<\n'
    } >"$NEW_TMP/Makefile"
    log "building testfixture with $tool ($flags $ldflags) in $NEW_TMP ..."
}

build_sqlites() {
    local t0 top name tmp failed=0
    [[ ${#SQLITE_JOBS[@]} -gt 0 ]] || return 0
    t0=$(now)
    new_tmp "$R/sqlite3-top"
    top=$NEW_TMP
    {
        printf 'all: %s\n' "${SQLITE_JOBS[*]}"
        for name in "${SQLITE_JOBS[@]}"; do
            tmp=${JOB_TMP[$name]}
            printf '%s:\n\t+$(MAKE) -C %s %s >%s/build.log 2>&1\n' "$name" "$tmp" "${JOB_BIN[$name]}" "$tmp"
        done
    } >"$top/Makefile"
    log "running ${SQLITE_JOBS[*]} (make -j $(nproc)) ..."
    make -C "$top" -k -j "$(nproc)" >&2 || failed=1
    for name in "${SQLITE_JOBS[@]}"; do
        tmp=${JOB_TMP[$name]}
        if [[ ! -x $tmp/${JOB_BIN[$name]} ]]; then
            cat "$tmp/build.log" >&2
            log "$name build failed (log above)"
            failed=1
        fi
    done
    [[ $failed -eq 0 ]] || die "sqlite3 build failed"
    for name in "${SQLITE_JOBS[@]}"; do
        tmp=${JOB_TMP[$name]}
        rm -rf -- "$tmp"/*.o "$tmp/obj"
        finish_build "$tmp" "${JOB_FINAL[$name]}" "${JOB_BIN[$name]}" "${JOB_KIND[$name]}" "${JOB_RELOCS[$name]}"
        log "built ${JOB_FINAL[$name]}/${JOB_BIN[$name]}"
    done
    rm -rf -- "$top"
    log "sqlite3 builds took $(elapsed "$t0")"
}

# Redis: upstream's own Makefile (src/Makefile, deps/Makefile) on a copy of the tree (it builds
# in place), gcc only: MALLOC=libc skips the jemalloc build (minutes of configure), the other
# bundled deps are small. OPTIMIZATION/CFLAGS/LDFLAGS on the make command line reach the deps'
# makes as well (hiredis, hdr_histogram; lua takes -O2 from deps/Makefile).
build_redis() {
    local final="$R/redis-$REDIS_VER-gcc" tmp t0 flags b
    if [[ -f $final/.complete ]]; then
        log "cached: $final/redis-server"
        return 0
    fi
    t0=$(now)
    flags="$(cflags_for gcc | grep -v '^-O' | tr '\n' ' ')"
    rm -rf -- "$final"
    new_tmp "$final"
    tmp=$NEW_TMP
    ln -s "$REDIS_SRC" "$tmp/source"
    cp -a -- "$REDIS_SRC" "$tmp/tree"
    log "building redis with gcc (-O2 $flags -Wl,--emit-relocs, MALLOC=libc) ..."
    if ! make -C "$tmp/tree/src" -j "$(nproc)" CC=gcc MALLOC=libc OPTIMIZATION=-O2 CFLAGS="$flags" \
        LDFLAGS=-Wl,--emit-relocs BUILD_TLS=no USE_SYSTEMD=no V=1 \
        redis-server redis-benchmark redis-cli >"$tmp/build.log" 2>&1; then
        tail -n 60 "$tmp/build.log" >&2
        die "redis build failed (log above)"
    fi
    for b in redis-server redis-benchmark redis-cli; do cp -- "$tmp/tree/src/$b" "$tmp/$b"; done
    rm -rf -- "$tmp/tree"
    finish_build "$tmp" "$final" redis-server redis
    log "built $final/redis-server in $(elapsed "$t0")"
}

# PostgreSQL: configure + make of the upstream tarball, installed under the build's install/
# (the server finds share/ and lib/ relative to its own path, so a copy of install/ with
# another bin/postgres runs that binary); the regression suite's directory (pg_regress,
# regress.so, sql/, expected/, schedules) copied to regress/, to run `pg_regress` in.
# No rpath, since the install is built in a temp dir and moved: the client tools (psql,
# pgbench) need LD_LIBRARY_PATH=install/lib for this build's libpq.
build_postgres() {
    local final="$R/postgresql-15-$PG_VER-gcc" tmp t0 tarball tree
    if [[ -f $final/.complete ]]; then
        log "cached: $final/install/bin/postgres"
        return 0
    fi
    t0=$(now)
    rm -rf -- "$final"
    new_tmp "$final"
    tmp=$NEW_TMP
    ln -s "$PG_SRC" "$tmp/source"
    tarball="$(find "$(dirname "$PG_SRC")" -maxdepth 1 -name 'postgresql-15_*.orig.tar.*' | head -n 1)"
    [[ -n $tarball ]] || die "no upstream tarball next to $PG_SRC"
    mkdir "$tmp/tree"
    tar -xf "$tarball" -C "$tmp/tree" --strip-components=1 --no-same-owner
    tree=$tmp/tree
    log "building postgresql 15 with gcc (-O2 -g -Wl,--emit-relocs) ..."
    if ! (cd "$tree" && ./configure --prefix="$tmp/install" --without-icu --without-readline --disable-rpath \
        CC=gcc CFLAGS='-O2 -g' LDFLAGS=-Wl,--emit-relocs &&
        make -j "$(nproc)" && make install && make -C src/test/regress) >"$tmp/build.log" 2>&1; then
        tail -n 60 "$tmp/build.log" >&2
        die "postgresql build failed (log above)"
    fi
    cp -a -- "$tree/src/test/regress" "$tmp/regress"
    rm -f -- "$tmp"/regress/*.o
    rm -rf -- "$tree"
    # The install's paths are relative to bin/, so the directory can move; check it there.
    check_binary "$tmp/install/bin/postgres" postgres
    touch "$tmp/.complete"
    mv -T -- "$tmp" "$final"
    log "built $final/install/bin/postgres in $(elapsed "$t0")"
}

# cppcheck: upstream's Makefile in a copy of the Debian source tree (the Debian build uses
# CMake and its GUI needs Qt; the Makefile builds the command line tool and the unit tests
# alone). Both binaries stay in the tree: cppcheck reads cfg/ beside itself, and testrunner
# reads test files relative to the working directory, which must be the tree.
build_cppcheck() {
    local final="$R/cppcheck-$CPPCHECK_VER-gcc" tmp t0
    if [[ -f $final/.complete ]]; then
        log "cached: $final/tree/cppcheck"
        return 0
    fi
    t0=$(now)
    rm -rf -- "$final"
    new_tmp "$final"
    tmp=$NEW_TMP
    ln -s "$CPPCHECK_SRC" "$tmp/source"
    cp -a -- "$CPPCHECK_SRC" "$tmp/tree"
    log "building cppcheck and testrunner with g++ (-O2 -g -DNDEBUG -Wl,--emit-relocs) ..."
    if ! make -C "$tmp/tree" -j "$(nproc)" CXX=g++ CXXFLAGS='-O2 -g -DNDEBUG' \
        LDFLAGS=-Wl,--emit-relocs cppcheck testrunner >"$tmp/build.log" 2>&1; then
        tail -n 60 "$tmp/build.log" >&2
        die "cppcheck build failed (log above)"
    fi
    find "$tmp/tree" -name '*.o' -delete
    check_binary "$tmp/tree/cppcheck" cppcheck
    touch "$tmp/.complete"
    mv -T -- "$tmp" "$final"
    log "built $final/tree/cppcheck in $(elapsed "$t0")"
}

# OpenSSL: upstream's Configure and Makefile in a copy of the Debian source tree (Debian's
# patches applied; debian/rules builds three flavours with its own options, we build the one
# the issue tracker's reproduction used): `linux-x86_64 shared` plus our flags, which Configure
# appends to its own -O3 (so -O2 wins) and to the link lines (--emit-relocs on libcrypto.so.3,
# libssl.so.3, apps/openssl and every test program). `make build_sw` (no manual pages). The
# tree keeps its objects: `make test` in a copy of it then runs the suite without rebuilding
# (a copy whose libraries are replaced must keep their mtimes, or make relinks everything).
# Nothing has an rpath: util/shlib_wrap.sh points LD_LIBRARY_PATH at the tree, as `make test`
# does.
check_openssl() { # tree
    local tree=$1 out lib
    out="$("$tree/util/shlib_wrap.sh" "$tree/apps/openssl" version 2>&1)" ||
        die "$tree/apps/openssl version failed: $out"
    [[ $out == "OpenSSL 3."* ]] || die "$tree/apps/openssl version printed '$out'"
    # The app must use the tree's libraries, not the system's.
    out="$(env LD_LIBRARY_PATH="$tree" ldd "$tree/apps/openssl")"
    grep -q "libcrypto.so.3 => $tree/libcrypto.so.3" <<<"$out" || die "apps/openssl does not load $tree/libcrypto.so.3: $out"
    for lib in libcrypto.so.3 libssl.so.3; do
        out="$(readelf -S -W "$tree/$lib")" # (not piped into grep -q: pipefail and SIGPIPE)
        grep -q ' \.rela\.text ' <<<"$out" || die "$tree/$lib has no .rela.text section"
    done
    [[ -x $tree/test/evp_test && -x $tree/test/sslapitest ]] || die "no test programs in $tree/test"
}
build_openssl() {
    local final="$R/openssl-$OPENSSL_VER-gcc" tmp t0 flags
    if [[ -f $final/.complete ]]; then
        log "cached: $final/tree/libcrypto.so.3"
        return 0
    fi
    command -v perl >/dev/null || die "missing perl: apt-get install perl"
    t0=$(now)
    flags="$(cflags_for gcc | tr '\n' ' ')-Wl,--emit-relocs"
    rm -rf -- "$final"
    new_tmp "$final"
    tmp=$NEW_TMP
    ln -s "$OPENSSL_SRC" "$tmp/source"
    cp -a -- "$OPENSSL_SRC" "$tmp/tree"
    # Test data of Debian's security patches (binary files no patch can carry), unpacked as
    # debian/rules does before configuring; without them test_cms and test_cmsapi fail.
    if [[ -f $tmp/tree/debian/binary.tar ]]; then
        tar -xf "$tmp/tree/debian/binary.tar" -C "$tmp/tree" --no-same-owner || die "cannot unpack debian/binary.tar"
    fi
    log "building openssl with gcc (./Configure linux-x86_64 shared $flags; make build_sw) ..."
    # shellcheck disable=SC2086  # $flags: one Configure argument per word
    if ! (cd "$tmp/tree" && ./Configure linux-x86_64 shared $flags &&
        make -j "$(nproc)" build_sw) >"$tmp/build.log" 2>&1; then
        tail -n 60 "$tmp/build.log" >&2
        die "openssl build failed (log above)"
    fi
    printf '%s\n' "./Configure linux-x86_64 shared $flags" >"$tmp/flags.txt"
    # Configure writes the tree's absolute path into two generated Perl files (module paths
    # for `make` and the test harness); point them at the final place, keeping their mtimes
    # (make would reconfigure if configdata.pm looked newer than the Makefile).
    local f stamp left
    for f in configdata.pm util/wrap.pl; do
        stamp="$(stat -c %y "$tmp/tree/$f")"
        sed -i "s|$tmp/tree|$final/tree|g" "$tmp/tree/$f"
        touch -d "$stamp" "$tmp/tree/$f"
    done
    left="$(grep -rlIF --exclude='*.[oad]' --exclude='*.so*' --exclude=build.log "$tmp" "$tmp/tree" | head -n 5 || true)"
    [[ -z $left ]] || die "the OpenSSL tree still names its build directory $tmp in: $left"
    check_openssl "$tmp/tree"
    touch "$tmp/.complete"
    mv -T -- "$tmp" "$final"
    check_openssl "$final/tree"
    log "built $final/tree/libcrypto.so.3 in $(elapsed "$t0")"
}

if want lua; then
    for cc in "${COMPILERS[@]}"; do build_lua "$cc"; done
fi
if want redis; then build_redis; fi
if want postgresql; then build_postgres; fi
if want cppcheck; then build_cppcheck; fi
if want openssl; then build_openssl; fi
if want lua; then build_lua gcc norelocs; fi
if want sqlite3; then
    make_amalgamation
    for cc in "${COMPILERS[@]}"; do prepare_sqlite "$cc"; done
    for cc in "${COMPILERS[@]}"; do prepare_testfixture "$cc"; done
    prepare_sqlite gcc norelocs
    prepare_testfixture gcc norelocs
    build_sqlites
fi

# Final checks (also on cached builds) and the result lines.
if want lua; then
    for cc in "${COMPILERS[@]}"; do check_binary "$(lua_dir "$cc")/lua" lua; done
    check_binary "$(lua_dir gcc-norelocs)/lua" lua norelocs
fi
if want sqlite3; then
    for cc in "${COMPILERS[@]}"; do
        check_binary "$R/sqlite3-$SQLITE_VER-$cc/sqlite3" sqlite3
        check_binary "$R/sqlite3-$SQLITE_VER-testfixture-$cc/testfixture" testfixture
    done
    check_binary "$R/sqlite3-$SQLITE_VER-gcc-norelocs/sqlite3" sqlite3 norelocs
    check_binary "$R/sqlite3-$SQLITE_VER-testfixture-gcc-norelocs/testfixture" testfixture norelocs
fi
if want redis; then check_binary "$R/redis-$REDIS_VER-gcc/redis-server" redis; fi
if want postgresql; then check_binary "$R/postgresql-15-$PG_VER-gcc/install/bin/postgres" postgres; fi
if want cppcheck; then check_binary "$R/cppcheck-$CPPCHECK_VER-gcc/tree/cppcheck" cppcheck; fi
if want openssl; then check_openssl "$R/openssl-$OPENSSL_VER-gcc/tree"; fi
log "all done in $(elapsed "$start_all")"
{
    if want lua; then printf 'lua-src %s\n' "$LUA_SRC"; fi
    if want sqlite3; then printf 'sqlite3-src %s\n' "$SQLITE_SRC"; fi
    if want sqlite3; then printf 'sqlite3-amalgamation %s\n' "$AMALG"; fi
    if want lua; then
        for cc in "${COMPILERS[@]}"; do printf 'lua-%s %s\n' "$cc" "$(lua_dir "$cc")/lua"; done
    fi
    if want sqlite3; then
        for cc in "${COMPILERS[@]}"; do printf 'sqlite3-%s %s\n' "$cc" "$R/sqlite3-$SQLITE_VER-$cc/sqlite3"; done
        for cc in "${COMPILERS[@]}"; do
            printf 'testfixture-%s %s\n' "$cc" "$R/sqlite3-$SQLITE_VER-testfixture-$cc/testfixture"
        done
    fi
    if want lua; then printf 'lua-gcc-norelocs %s\n' "$(lua_dir gcc-norelocs)/lua"; fi
    if want sqlite3; then
        printf 'sqlite3-gcc-norelocs %s\n' "$R/sqlite3-$SQLITE_VER-gcc-norelocs/sqlite3"
        printf 'testfixture-gcc-norelocs %s\n' "$R/sqlite3-$SQLITE_VER-testfixture-gcc-norelocs/testfixture"
    fi
    if want redis; then
        printf 'redis-gcc %s\n' "$R/redis-$REDIS_VER-gcc/redis-server"
        printf 'redis-benchmark %s\n' "$R/redis-$REDIS_VER-gcc/redis-benchmark"
        printf 'redis-cli %s\n' "$R/redis-$REDIS_VER-gcc/redis-cli"
    fi
    if want postgresql; then
        printf 'postgres-gcc %s\n' "$R/postgresql-15-$PG_VER-gcc/install/bin/postgres"
        printf 'postgres-regress %s\n' "$R/postgresql-15-$PG_VER-gcc/regress"
    fi
    if want cppcheck; then
        printf 'cppcheck-gcc %s\n' "$R/cppcheck-$CPPCHECK_VER-gcc/tree/cppcheck"
        printf 'cppcheck-testrunner %s\n' "$R/cppcheck-$CPPCHECK_VER-gcc/tree/testrunner"
    fi
    if want openssl; then
        printf 'openssl-tree %s\n' "$R/openssl-$OPENSSL_VER-gcc/tree"
        printf 'openssl-libcrypto %s\n' "$R/openssl-$OPENSSL_VER-gcc/tree/libcrypto.so.3"
        printf 'openssl-libssl %s\n' "$R/openssl-$OPENSSL_VER-gcc/tree/libssl.so.3"
        printf 'openssl-app %s\n' "$R/openssl-$OPENSSL_VER-gcc/tree/apps/openssl"
    fi
} >&3
