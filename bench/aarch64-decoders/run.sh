#!/usr/bin/env bash
# run.sh [correctness|random|speed|all] -- the AArch64 decoder comparison (see README.md).
#
# correctness: every executable section of
#   - the cross-built corpus (scripts/build-corpus-aarch64.sh; built if missing),
#   - extra/isa_features.c built by gcc-12 and clang-19 for armv9-a+sve2+crypto and
#     armv8.5-a+crypto+lse with -mbranch-protection=standard, and extra/rivet_forms.S,
#   - the arm64 cross libc, libm and libstdc++ (hand-written SIMD string functions),
# decoded by each crate and compared with binutils objdump and llvm-objdump-19.
# random: 1 M pseudo-random words (fixed seed) through the same comparison.
# speed: linear sweep over .text of libLLVM.so.19.1 from Debian's libllvm19:arm64
#   (downloaded once into the cache; needs the arm64 architecture in apt for the
#   download, which is added and removed again) and of the cross libstdc++.
# Results go to stdout and to results/ (overwritten).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}/aarch64-decoders"
what="${1:-all}"
mkdir -p "$CACHE" "$HERE/results"
# shellcheck source=../../scripts/lib.sh
source "$REPO/scripts/lib.sh"
need_packages gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross \
    binutils-aarch64-linux-gnu clang-19 llvm-19 libclang1-19
need_cargo

(cd "$HERE" && nice -n 10 cargo build --release -q)
BIN="$HERE/target/release/aarch64-decoders"

if [[ $what == correctness || $what == all ]]; then
    corpus="$("$REPO/scripts/build-corpus-aarch64.sh" | tail -n 1)" || {
        echo "run.sh: the AArch64 corpus did not build cleanly; using what it left in $corpus" >&2
    }
    extra="$CACHE/extra"
    mkdir -p "$extra"
    for cc in gcc clang; do
        if [[ $cc == gcc ]]; then C=(aarch64-linux-gnu-gcc); else C=(clang-19 --target=aarch64-linux-gnu); fi
        for march in armv9-a+sve2+sve2-bitperm+crypto+sha3+sm4 armv8.5-a+crypto+sha3+lse; do
            "${C[@]}" -O3 -march="$march" -mbranch-protection=standard -c "$HERE/extra/isa_features.c" \
                -o "$extra/isa_features.$cc.${march%%+*}.o"
        done
    done
    aarch64-linux-gnu-gcc -c "$HERE/extra/rivet_forms.S" -o "$extra/rivet_forms.o"
    # Real code: Lua 5.4 from the Debian source that scripts/build-real-programs.sh
    # unpacks into the cache (skipped when it is not there).
    lua_src="$(find "${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}/real/src" -maxdepth 3 -type d -path '*lua5.4-*/src' 2>/dev/null | head -n 1)"
    if [[ -n $lua_src ]]; then
        # Debian's luaconf.h includes a header its debian/rules generates.
        mkdir -p "$extra/lua-gen"
        printf '#define DEB_HOST_MULTIARCH "aarch64-linux-gnu"\n' >"$extra/lua-gen/lua5.4-deb-multiarch.h"
        for cc in gcc clang; do
            if [[ $cc == gcc ]]; then C=(aarch64-linux-gnu-gcc); else C=(clang-19 --target=aarch64-linux-gnu -fuse-ld=lld); fi
            srcs=()
            for c in "$lua_src"/*.c; do
                case ${c##*/} in lua.c | luac.c) ;; *) srcs+=("$c") ;; esac
            done
            [[ -f $extra/liblua.$cc.so ]] ||
                nice -n 10 "${C[@]}" -O2 -fPIC -shared -DLUA_USE_LINUX -I"$extra/lua-gen" -o "$extra/liblua.$cc.so" "${srcs[@]}"
        done
    else
        echo "run.sh: no Lua source in the cache (scripts/build-real-programs.sh unpacks it); skipping it" >&2
    fi
    files=()
    while IFS= read -r f; do files+=("$f"); done < <(
        find "$corpus" -maxdepth 1 -type f -name '*.*.*' ! -name '*.tsv' ! -name '*.txt' | LC_ALL=C sort
    )
    files+=("$extra"/*.o "$extra"/*.so)
    sysroot=/usr/aarch64-linux-gnu/lib
    files+=("$sysroot/libc.so.6" "$sysroot/libm.so.6" "$(readlink -f "$sysroot/libstdc++.so.6")")
    echo "correctness over ${#files[@]} files" >&2
    "$BIN" correctness "${files[@]}" | tee "$HERE/results/correctness.md"
    "$BIN" classify "${files[@]}" | tee "$HERE/results/classify.md"
fi

if [[ $what == random || $what == all ]]; then
    # The whole encoding space, not only what compilers emit: 1 M pseudo-random words
    # wrapped into an ELF code section (no mapping symbols, so everything is code).
    raw="$CACHE/random-words.bin"
    "$BIN" random-words 1000000 20261128 "$raw"
    aarch64-linux-gnu-objcopy -I binary -O elf64-littleaarch64 -B aarch64 \
        --rename-section .data=.text,alloc,load,readonly,code,contents "$raw" "$CACHE/random-words.elf"
    "$BIN" correctness "$CACHE/random-words.elf" | tee "$HERE/results/random-words.md"
    "$BIN" classify "$CACHE/random-words.elf" | tee "$HERE/results/random-words-classify.md"
fi

if [[ $what == speed || $what == all ]]; then
    llvm="$CACHE/libLLVM.so.19.1"
    if [[ ! -f $llvm ]]; then
        tmp="$(mktemp -d)"
        added=0
        if ! dpkg --print-foreign-architectures | grep -qx arm64; then
            dpkg --add-architecture arm64
            added=1
        fi
        ok=1
        apt-get update -qq &&
            (cd "$tmp" && apt-get download libllvm19:arm64 && dpkg-deb -x libllvm19_*_arm64.deb x) &&
            cp "$tmp/x/usr/lib/aarch64-linux-gnu/libLLVM.so.19.1" "$llvm" || ok=0
        rm -rf -- "$tmp"
        if [[ $added -eq 1 ]]; then # leave apt as it was, also on failure
            dpkg --remove-architecture arm64
            apt-get update -qq
        fi
        [[ $ok -eq 1 ]] || { echo "run.sh: could not download libllvm19:arm64" >&2; exit 1; }
    fi
    {
        "$BIN" speed "$llvm" 3
        "$BIN" speed "$(readlink -f /usr/aarch64-linux-gnu/lib/libstdc++.so.6)" 3
    } | tee "$HERE/results/speed.md"
fi
