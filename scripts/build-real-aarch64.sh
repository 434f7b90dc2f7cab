#!/usr/bin/env bash
# build-real-aarch64.sh -- cross-build the real programs of scripts/build-real-programs.sh
# (Lua 5.4's interpreter and SQLite 3's shell, from the same Debian source packages) for
# AArch64, run each under qemu-aarch64 and check that it prints what the x86-64 build prints.
# For Rivet's AArch64 discovery tests (crates/discover/tests/real_programs.rs) and benchmark
# (bench/discovery-aarch64.sh, docs/aarch64-discovery.md).
#
# The sources, Lua's fixed string-hash seed, Lua's build recipe and SQLite's feature set are
# the x86-64 ones: build-real-programs.sh fetches and caches the source trees (and builds the
# x86-64 binaries, the reference below), scripts/lib.sh holds the recipes both scripts use
# (write_lua_build, write_sqlite_shell_build, SQLITE_DEFS, LUA_FIXED_SEED). Variants, all
# "-O2 -g -Wl,--emit-relocs":
#   gcc-pie    aarch64-linux-gnu-gcc-12 -fPIE -pie
#   gcc-nopie  aarch64-linux-gnu-gcc-12 -fno-pie -no-pie
#   (gcc also gets -fno-reorder-blocks-and-partition, as on x86-64; AArch64 gcc 12 leaves
#   partitioning off at -O2 anyway, so it changes nothing there)
#   clang      clang-19 --target=aarch64-linux-gnu -fuse-ld=lld (PIE, clang's default)
#   clang-pac  the same with -mbranch-protection=standard (PAC-RET and BTI landing pads;
#              qemu-aarch64 enforces PAC, see scripts/check-qemu-bti.sh)
#   clang-bti  clang-pac linked with tests/aarch64/bti_start.S instead of Debian's start
#              files (which have no landing pads) and -z force-bti: the BTI bit in the
#              program's property note, so qemu-aarch64 -cpu max enforces BTI on all its code.
#              Not among the default builds: ask for it by name (lua-clang-bti, sqlite3-clang-bti).
# Lua as on x86-64 also gets -Wl,-E.
#
# Check of each build, before it is kept: ELF machine AArch64, ET_DYN or ET_EXEC as the
# variant says, a .rela.text section, PAC/BTI instructions in clang-pac; then the workload
# under `qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max,pauth-impdef=on`, compared with the x86-64 gcc build's run
# of the same workload: scripts/check-lua.sh over tests/lua/*.lua (bench/lua is left out:
# its check sizes take minutes under emulation) and scripts/check-sqlite.sh over
# bench/sqlite/*.sql, 300 s allowed per script (emulation is slow and the machine shared).
# They run the `<binary>.qemu` wrapper written next to each binary.
#
# Cache (outside the repo), A = ${RIVET_CACHE:-$HOME/.cache/rivet}/real-aarch64:
#   A/lua5.4-<debian-version>-fixedseed-<variant>/   lua, lua.qemu, build.log, key.txt, check.log
#   A/sqlite3-<debian-version>-<variant>/            sqlite3, sqlite3.qemu, ...
# key.txt records the compilers', linkers', qemu's and the cross libc's versions and the
# exact flags; a directory is reused only when it is complete (.complete) and its key.txt is
# what this run would write, so a toolchain upgrade or a recipe change rebuilds it. Builds
# happen in a temp dir renamed into place; a flock on A/.lock serialises invocations.
#
# Installs its own packages (scripts/lib.sh need_packages). stdout: lines
# "<name> <absolute path>": lua-gcc-pie, lua-gcc-nopie, lua-clang, lua-clang-pac,
# sqlite3-gcc-pie, ..., sqlite3-clang-pac; or, given names as arguments
# (`build-real-aarch64.sh lua-clang-bti`), those builds only, in that order. Everything else
# goes to stderr.
# Environment: RIVET_CACHE.
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"
SYSROOT=/usr/aarch64-linux-gnu
VARIANTS=(gcc-pie gcc-nopie clang clang-pac)
BTI_START="$REPO/tests/aarch64/bti_start.S"

exec 3>&1 1>&2 # real stdout only for the result lines

log() { printf '%s\n' "build-real-aarch64: $*" >&2; }
die() { printf '%s\n' "build-real-aarch64: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# shellcheck source=lib.sh
source "$REPO/scripts/lib.sh"
need_packages qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu \
    clang-19 lld-19 make util-linux

# variant -> the compiler command (V_CC), compile flags (V_CFLAGS) and link flags (V_LDFLAGS);
# not CC and friends, which a caller may have exported.
# shellcheck disable=SC2034  # set for the caller
set_variant() {
    case $1 in
        gcc-pie) V_CC=aarch64-linux-gnu-gcc-12 V_CFLAGS="-O2 -g -fno-reorder-blocks-and-partition -fPIE" V_LDFLAGS="-pie" ;;
        gcc-nopie) V_CC=aarch64-linux-gnu-gcc-12 V_CFLAGS="-O2 -g -fno-reorder-blocks-and-partition -fno-pie" V_LDFLAGS="-no-pie" ;;
        clang) V_CC="clang-19 --target=aarch64-linux-gnu -fuse-ld=lld" V_CFLAGS="-O2 -g" V_LDFLAGS="" ;;
        clang-pac) V_CC="clang-19 --target=aarch64-linux-gnu -fuse-ld=lld" V_CFLAGS="-O2 -g -mbranch-protection=standard" V_LDFLAGS="" ;;
        # lld warns that libc_nonshared.a's objects have no BTI property: their functions
        # (atexit...) are only called directly, which needs no landing pad.
        clang-bti) V_CC="clang-19 --target=aarch64-linux-gnu -fuse-ld=lld" V_CFLAGS="-O2 -g -mbranch-protection=standard" V_LDFLAGS="-nostartfiles $BTI_START -Wl,-z,force-bti" ;;
        *) die "unknown variant $1" ;;
    esac
    V_LDFLAGS="${V_LDFLAGS:+$V_LDFLAGS }-Wl,--emit-relocs"
}
# qemu's default CPU computes pointer authentication codes with QARMA, which made PAC code
# three times slower (tests/lua/programs.lua: 57 s against 18 s); pauth-impdef=on uses
# qemu's own cheaper hash and still faults on a failed authentication and on a missing BTI
# landing pad (checked with the programs of scripts/check-qemu-bti.sh: exit 139 and 132).
QEMU="qemu-aarch64 -L $SYSROOT -cpu max,pauth-impdef=on"

# The toolchain part of every key.txt.
TOOLCHAIN="$(
    for t in aarch64-linux-gnu-gcc-12 clang-19 ld.lld-19 aarch64-linux-gnu-ld aarch64-linux-gnu-ar qemu-aarch64; do
        command -v "$t" >/dev/null || die "missing $t"
        "$t" --version | head -n 1
    done
    printf 'libc6-dev-arm64-cross %s\n' "$(dpkg-query -W -f='${Version}' libc6-dev-arm64-cross)"
)"

# The rest is one brace group: bash parses it completely before running it, so editing this
# file while a (long) build runs cannot derail that build.
{
# --- sources and the x86-64 reference --------------------------------------------------------
log "sources and x86-64 builds: scripts/build-real-programs.sh lua sqlite3 ..."
declare -A X86=()
while read -r name path; do X86[$name]=$path; done < <("$REPO/scripts/build-real-programs.sh" lua sqlite3)
for n in lua-src sqlite3-src sqlite3-amalgamation lua-gcc sqlite3-gcc; do
    [[ -n ${X86[$n]:-} ]] || die "scripts/build-real-programs.sh printed no $n line"
done
LUA_SRC=${X86[lua-src]} AMALG=${X86[sqlite3-amalgamation]}
# build-real-programs.sh keeps each source package in src/<package>-<debian-version>/<tree>:
# that directory name is the version key here too.
LUA_PKG="$(basename "$(dirname "$LUA_SRC")")"
SQLITE_PKG="$(basename "$(dirname "${X86[sqlite3-src]}")")"
[[ $LUA_PKG == lua5.4-* && $SQLITE_PKG == sqlite3-* ]] || die "unexpected source layout: $LUA_SRC, ${X86[sqlite3-src]}"

A="${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}/real-aarch64"
mkdir -p "$A"
exec 9>"$A/.lock"
if ! flock -n 9; then
    log "waiting for another invocation (lock $A/.lock) ..."
    flock 9
fi

TMPS=()
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    local d
    for d in "${TMPS[@]}"; do if [[ -d $d ]]; then rm -rf -- "$d"; fi; done
}
trap cleanup EXIT

# check_build DIR PROGRAM VARIANT: the static checks and the workload; the log in DIR/check.log.
check_build() {
    local dir=$1 prog=$2 variant=$3 bin="$1/$2" hdr sections want_type out
    hdr="$(readelf -h "$bin")"
    grep -Eq 'Machine: +AArch64' <<<"$hdr" || die "$bin is not an AArch64 ELF file"
    want_type=DYN
    [[ $variant == gcc-nopie ]] && want_type=EXEC
    grep -Eq "Type: +$want_type " <<<"$hdr" || die "$bin: ELF type is not $want_type: $(grep Type: <<<"$hdr")"
    sections="$(readelf -S -W "$bin")"
    grep -q ' \.rela\.text ' <<<"$sections" || die "$bin has no .rela.text section"
    if [[ $variant == clang-pac || $variant == clang-bti ]]; then
        out="$(aarch64-linux-gnu-objdump -d --no-show-raw-insn "$bin")"
        grep -Eq $'\t(paciasp|hint\t#0x19)' <<<"$out" || die "$bin ($variant) has no paciasp"
        grep -Eq $'\tbti\t' <<<"$out" || die "$bin ($variant) has no bti"
    fi
    if [[ $variant == clang-bti ]]; then
        readelf -n "$bin" | grep -q 'AArch64 feature: BTI' || die "$bin (clang-bti) has no BTI property"
    fi
    # argv[0] as the x86-64 checks give it: check-lua.sh runs the interpreter as "lua".
    # shellcheck disable=SC2016  # "$0", "$@" are for the wrapper
    if [[ $prog == lua ]]; then
        printf '#!/bin/sh\nexec %s -0 lua "$(dirname "$0")/lua" "$@"\n' "$QEMU" >"$bin.qemu"
    else
        printf '#!/bin/sh\nexec %s "$(dirname "$0")/%s" "$@"\n' "$QEMU" "$prog" >"$bin.qemu"
    fi
    chmod +x "$bin.qemu"
    local t0
    t0=$(now)
    if [[ $prog == lua ]]; then
        out="$("$bin.qemu" -e 'print(1+1)' 2>&1)" || die "$bin.qemu -e 'print(1+1)' failed: $out"
        [[ $out == 2 ]] || die "$bin.qemu -e 'print(1+1)' printed '$out'"
        "$REPO/scripts/check-lua.sh" --timeout 300 --only 'tests/*' "$bin.qemu" "${X86[lua-gcc]}" >"$dir/check.log" 2>&1 ||
            { cat "$dir/check.log" >&2; die "$bin under qemu does not print what ${X86[lua-gcc]} prints"; }
    else
        out="$(echo 'select 1+1;' | "$bin.qemu" 2>&1)" || die "$bin.qemu smoke test failed: $out"
        [[ $out == 2 ]] || die "$bin.qemu printed '$out' for 'select 1+1;'"
        "$REPO/scripts/check-sqlite.sh" --mode shell --timeout 300 "$bin.qemu" --reference "${X86[sqlite3-gcc]}" >"$dir/check.log" 2>&1 ||
            { cat "$dir/check.log" >&2; die "$bin under qemu does not print what ${X86[sqlite3-gcc]} prints"; }
    fi
    log "$bin: workload under qemu as on x86-64 ($(elapsed "$t0")): $(tail -n 1 "$dir/check.log")"
}

# build PROGRAM VARIANT: builds (unless cached and current) A/<dir>/<PROGRAM>; sets BUILT.
build() {
    local prog=$1 variant=$2 final tmp key t0
    set_variant "$variant"
    if [[ $prog == lua ]]; then
        final="$A/$LUA_PKG-fixedseed-$variant"
        V_LDFLAGS="$V_LDFLAGS -Wl,-E"
    else
        final="$A/$SQLITE_PKG-$variant"
    fi
    key="$(printf '%s\nqemu %s\nCC %s\nCFLAGS %s\nLDFLAGS %s\nrecipe %s\n' "$TOOLCHAIN" "$QEMU" "$V_CC" "$V_CFLAGS" "$V_LDFLAGS" \
        "$(declare -f write_lua_build write_sqlite_shell_build | sha256sum | cut -c1-16) $LUA_FIXED_SEED")"
    if [[ $variant == clang-bti ]]; then key+=$'\n'"start files $(sha256sum <"$BTI_START" | cut -c1-16)"; fi
    BUILT="$final/$prog"
    if [[ -f $final/.complete && "$(cat "$final/key.txt")" == "$key" ]]; then
        log "cached: $final/$prog"
        return 0
    fi
    t0=$(now)
    tmp="$(mktemp -d "$final.tmp.XXXXXX")"
    TMPS+=("$tmp")
    printf '%s\n' "$key" >"$tmp/key.txt"
    if [[ $prog == lua ]]; then
        ln -s "$LUA_SRC" "$tmp/source"
        write_lua_build "$tmp" "$LUA_SRC" "$V_CC" "$V_CFLAGS" "$V_LDFLAGS" aarch64-linux-gnu
    else
        ln -s "$AMALG" "$tmp/amalgamation"
        write_sqlite_shell_build "$tmp" "$AMALG" "$V_CC" "$V_CFLAGS" "$V_LDFLAGS"
    fi
    log "building $prog ($variant: $V_CC $V_CFLAGS $V_LDFLAGS) ..."
    # The cross ar: the host's may not index AArch64 objects.
    if ! make -C "$tmp" -j "$(nproc)" AR=aarch64-linux-gnu-ar "$prog" >"$tmp/build.log" 2>&1; then
        tail -n 40 "$tmp/build.log" >&2
        die "$prog ($variant) build failed (log above)"
    fi
    rm -rf -- "$tmp/obj" "$tmp"/*.o "$tmp"/*.a
    check_build "$tmp" "$prog" "$variant"
    touch "$tmp/.complete"
    rm -rf -- "$final"
    mv -T -- "$tmp" "$final"
    log "built $final/$prog in $(elapsed "$t0")"
}

NAMES=("$@")
if [[ ${#NAMES[@]} -eq 0 ]]; then
    for prog in lua sqlite3; do
        for v in "${VARIANTS[@]}"; do NAMES+=("$prog-$v"); done
    done
fi
declare -A OUT=()
start_all=$(now)
for name in "${NAMES[@]}"; do
    case $name in
        lua-*) build lua "${name#lua-}" ;;
        sqlite3-*) build sqlite3 "${name#sqlite3-}" ;;
        *) die "unknown build $name (lua-VARIANT or sqlite3-VARIANT)" ;;
    esac
    OUT[$name]=$BUILT
done
log "all done in $(elapsed "$start_all")"
for name in "${NAMES[@]}"; do printf '%s %s\n' "$name" "${OUT[$name]}" >&3; done
exit 0
}
