#!/usr/bin/env bash
# build-real-programs.sh -- build real programs nobody here wrote, from Debian
# source packages, with relocations kept (-Wl,--emit-relocs), for Rivet's
# end-to-end tests and benchmarks (DESIGN.md section 4, item 4).
#
#   lua5.4  -> the `lua` interpreter, liblua linked statically (no readline)
#   sqlite3 -> the `sqlite3` shell from the amalgamation (sqlite3.c + shell.c)
#
# each with CC in {gcc, clang-19}; flags: -O2 -g -Wl,--emit-relocs, and for gcc
# also -fno-reorder-blocks-and-partition. Default PIE (the compilers' default).
#
# Cache (outside the repo), R = ${RIVET_CACHE:-$HOME/.cache/rivet}/real:
#   R/src/<package>-<debian-version>/       apt-get source output (.dsc, tarballs)
#   R/src/<package>-<debian-version>/<dir>/ the unpacked, patched source tree
#   R/<package>-<debian-version>-<cc>/      one build: the binary (lua | sqlite3),
#        `source` -> the unpacked tree, build.log, flags.txt, .complete
# Complete directories (.complete marker) are reused; builds happen in a temp
# dir renamed into place; a flock on R/.lock serialises concurrent invocations.
#
# Needs root only the first time on a machine (adds a deb-src entry for
# bookworm, apt-get update, installs dpkg-dev / tcl if missing).
#
# stdout: the last lines are "<name> <absolute path>":
#   lua-src, sqlite3-src (source trees), then lua-gcc, lua-clang, sqlite3-gcc,
#   sqlite3-clang (binaries). Everything else goes to stderr.
set -euo pipefail

exec 3>&1 1>&2 # real stdout only for the result lines

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
if [[ ${#need_pkgs[@]} -gt 0 ]]; then
    log "installing ${need_pkgs[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >&2
fi

# --- 2. sources -------------------------------------------------------------
# Version that `apt-get source` would fetch, from the .dsc file name.
src_version() { # package
    local uris dsc
    uris="$(apt-get source --print-uris -q "$1" 2>/dev/null)" || die "apt-get source --print-uris $1 failed"
    dsc="$(grep -Eo "'[^']*\\.dsc'" <<<"$uris" | head -n 1 | tr -d "'")"
    dsc="$(basename "$dsc" .dsc)"
    [[ $dsc == "$1"_* ]] || die "cannot find the .dsc of $1 in: $uris"
    printf '%s\n' "${dsc#"$1"_}"
}

# Downloads + unpacks once; prints the unpacked tree's path.
fetch_source() { # package version
    local pkg=$1 ver=$2 dir="$R/src/$1-$2" tmp tree
    if [[ ! -f $dir/.complete ]]; then
        rm -rf -- "$dir"
        tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
        log "apt-get source $pkg=$ver -> $dir"
        (cd "$tmp" && apt-get source -q "$pkg=$ver" >&2) || { rm -rf -- "$tmp"; die "apt-get source $pkg=$ver failed"; }
        tree="$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
        [[ -n $tree ]] || { rm -rf -- "$tmp"; die "apt-get source $pkg produced no directory"; }
        basename "$tree" >"$tmp/.tree"
        touch "$tmp/.complete"
        mv -T -- "$tmp" "$dir"
    fi
    printf '%s\n' "$dir/$(cat "$dir/.tree")"
}

LUA_VER="$(src_version lua5.4)"
SQLITE_VER="$(src_version sqlite3)"
log "lua5.4 $LUA_VER, sqlite3 $SQLITE_VER"
LUA_SRC="$(fetch_source lua5.4 "$LUA_VER")"
SQLITE_SRC="$(fetch_source sqlite3 "$SQLITE_VER")"

# --- 3. builds --------------------------------------------------------------
# new_build <package> <version> <cc>: prints the build dir if already complete
# (sets BUILD_DONE=1) or a fresh temp dir to build in (BUILD_DONE=0).
check_binary() { # path kind
    local bin=$1 kind=$2 out sections
    case $kind in
        lua) out="$("$bin" -e 'print(1+1)' 2>&1)" || die "$bin -e 'print(1+1)' failed: $out" ;;
        sqlite3) out="$(echo 'select 1+1;' | "$bin" 2>&1)" || die "sqlite3 smoke test failed: $out" ;;
    esac
    [[ $out == 2 ]] || die "smoke test of $bin printed '$out', expected 2"
    sections="$(readelf -S -W "$bin")"
    grep -q ' \.rela\.text ' <<<"$sections" || die "$bin has no .rela.text section"
}

finish_build() { # tmp final binary-name kind
    local tmp=$1 final=$2 name=$3 kind=$4
    check_binary "$tmp/$name" "$kind"
    touch "$tmp/.complete"
    rm -rf -- "$final"
    mv -T -- "$tmp" "$final"
    check_binary "$final/$name" "$kind"
}

build_lua() { # cc -> dir
    local cc=$1 final="$R/lua5.4-$LUA_VER-$1" tmp tool t0 f objs=()
    if [[ -f $final/.complete ]]; then
        log "cached: $final/lua"
        return
    fi
    t0=$(now)
    tool="$(cc_tool "$cc")"
    mapfile -t flags < <(cflags_for "$cc")
    tmp="$(mktemp -d "$final.tmp.XXXXXX")"
    ln -s "$LUA_SRC" "$tmp/source"
    printf '%s\n' "$tool ${flags[*]} -std=gnu99 -DLUA_COMPAT_5_3 -DLUA_USE_LINUX; link: -Wl,--emit-relocs -Wl,-E -lm -ldl" >"$tmp/flags.txt"
    log "building lua with $tool ..."
    mkdir -p "$tmp/obj"
    # liblua.a: every src/*.c except the two programs (lua.c, luac.c); this is
    # the upstream Makefile's LUA_A set (core + library objects). No readline.
    for f in "$LUA_SRC"/src/*.c; do
        case "$(basename "$f")" in lua.c | luac.c) continue ;; esac
        objs+=("$tmp/obj/$(basename "$f" .c).o")
        printf '%s\n' "$f"
    done | xargs -P "$(nproc)" -I{} sh -c '"$0" "$@" -c -o "$1/obj/$(basename "$2" .c).o" "$2"' \
        "$tool" "$tmp" {} 2>/dev/null || true
    # (the xargs line above only warms up in parallel; the loop below is the
    # authoritative build and reports errors)
    for f in "$LUA_SRC"/src/*.c; do
        case "$(basename "$f")" in lua.c | luac.c) continue ;; esac
        "$tool" "${flags[@]}" -std=gnu99 -Wall -DLUA_COMPAT_5_3 -DLUA_USE_LINUX -c \
            -o "$tmp/obj/$(basename "$f" .c).o" "$f" >>"$tmp/build.log" 2>&1 ||
            { cat "$tmp/build.log" >&2; die "lua ($cc): compiling $f failed"; }
    done
    ar rcs "$tmp/liblua.a" "${objs[@]}"
    "$tool" "${flags[@]}" -std=gnu99 -Wall -DLUA_COMPAT_5_3 -DLUA_USE_LINUX -o "$tmp/lua" \
        "$LUA_SRC/src/lua.c" "$tmp/liblua.a" -Wl,--emit-relocs -Wl,-E -lm -ldl >>"$tmp/build.log" 2>&1 ||
        { cat "$tmp/build.log" >&2; die "lua ($cc): link failed"; }
    rm -rf -- "$tmp/obj"
    finish_build "$tmp" "$final" lua lua
    log "built $final/lua in $(elapsed "$t0")"
}
