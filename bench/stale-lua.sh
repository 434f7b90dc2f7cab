#!/usr/bin/env bash
# stale-lua.sh -- a profile of one Lua release used on the next (stale profiles, issue 37).
#
#   bench/stale-lua.sh [OUT_DIR] [ROUNDS]
#
# Lua 5.4.4 and 5.4.6 (5.4.5 was withdrawn; 5.4.6 is the release after 5.4.4) come from a
# package registry: the sdists of PyPI's `lupa` 2.0 and 2.2 bundle upstream Lua's source tree
# as third-party/lua54 (5.4.4 and 5.4.6; checked file by file against upstream's v5.4.4 and
# v5.4.6 tags: identical). The sdists are pinned by their sha256, and the script checks
# LUA_VERSION_RELEASE in lua.h. They are cached in
# ${RIVET_CACHE:-~/.cache/rivet}/stale-lua/lupa-<version>.tar.gz.
# Both releases are built alike, as scripts/build-real-programs.sh builds Lua (gcc -O2 -g
# -fno-reorder-blocks-and-partition, --emit-relocs, the fixed string-hash seed). Both are
# instrumented and trained on the benchmark's training inputs
# (bench/lua: binarytrees 14, fannkuch 9, strings 200000). Then 5.4.6 is optimized
#   - with its own profile (fresh),
#   - with 5.4.4's profile, matched by code hashes (stale),
#   - with 5.4.4's profile forced onto 5.4.6's offsets (--force: what Rivet did before),
# and llvm-bolt-19 does the same with its recipe (luaV_execute skipped: BOLT cannot rewrite
# it), fresh from 5.4.6's fdata and stale from 5.4.4's YAML with -infer-stale-profile.
# Every output is compared with 5.4.6 by `rivet bench` (CPU time, ROUNDS rounds, default 20)
# on binarytrees 14, and (SIMULATE=1, the default; 0 skips it) counted by `rivet simulate` on
# binarytrees 9 under qemu-x86_64: taken branches and I1 misses, the same on any machine,
# which a shared one needs when its CPU times cannot separate the outputs. The kept share of the speedup is (1 - stale) / (1 - fresh) of the
# median ratios; then each stale output is compared with its fresh one directly. Prints the
# match reports and the bench lines; everything lands in OUT_DIR
# (default /tmp/rivet-stale-lua).
set -euo pipefail

OUT=${1:-/tmp/rivet-stale-lua}
ROUNDS=${2:-20}
CACHE="${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}/stale-lua"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RIVET=${RIVET:-$ROOT/target/release/rivet}
BOLT=${BOLT:-llvm-bolt-19}
[[ -x $RIVET ]] || { echo "stale-lua: $RIVET is missing (cargo build --release -p rivet)" >&2; exit 2; }
command -v "$BOLT" >/dev/null || { echo "stale-lua: $BOLT is missing (apt-get install bolt-19)" >&2; exit 2; }
command -v curl >/dev/null || { echo "stale-lua: curl is missing (apt-get install curl)" >&2; exit 2; }
mkdir -p "$OUT" "$CACHE"
cd "$OUT"

# lupa's sdist that bundles each Lua release, where PyPI keeps it, and its sha256 (PyPI's digest).
declare -A LUPA=([5.4.4]=2.0 [5.4.6]=2.2)
PYPI=https://files.pythonhosted.org/packages
declare -A LUPA_URL=(
    [2.0]=$PYPI/5a/c2/34a30377e96ed0e1042067604b9c9cbb14eb8833583e2668c724c6eafe49/lupa-2.0.tar.gz
    [2.2]=$PYPI/b6/13/3a0d2c231ae39bced22f14ded420915be1b88f030bfd2388900d89a74a4b/lupa-2.2.tar.gz
)
declare -A LUPA_SHA256=(
    [2.0]=ad3fef486be7adddd349fe9a9c393789061312cf98ebc533b489be34f484cb79
    [2.2]=665a006bcf8d9aacdfdb953824b929d06a0c55910a662b59be2f157ab4c8924d
)
# lua_source VERSION DIR: upstream Lua VERSION's source tree, unpacked into DIR.
lua_source() {
    local v=$1 dir=$2 lupa=${LUPA[$1]} tarball
    tarball="$CACHE/lupa-$lupa.tar.gz"
    if [[ ! -f $tarball ]]; then
        curl -fsSL -o "$tarball.part" "${LUPA_URL[$lupa]}" ||
            { echo "stale-lua: cannot download lupa $lupa's sdist from PyPI" >&2; exit 1; }
        mv "$tarball.part" "$tarball"
    fi
    echo "${LUPA_SHA256[$lupa]}  $tarball" | sha256sum -c --quiet - ||
        { echo "stale-lua: $tarball is not PyPI's lupa $lupa (sha256 differs; remove it)" >&2; exit 1; }
    tar -xzf "$tarball" -C "$dir" --strip-components=3 "lupa-$lupa/third-party/lua54"
    rm -f "$dir/.git"
    grep -q "LUA_VERSION_RELEASE.*\"${v##*.}\"" "$dir/lua.h" ||
        { echo "stale-lua: lupa $lupa does not hold Lua $v" >&2; exit 1; }
}

for v in 5.4.4 5.4.6; do
    if [[ ! -x build-$v/lua ]]; then
        rm -rf "src-$v" "build-$v"
        mkdir -p "src-$v" "build-$v"
        lua_source "$v" "src-$v"
        objs=()
        for f in "src-$v"/*.c; do
            b=$(basename "$f" .c)
            case $b in lua | luac | ltests | onelua) continue ;; esac
            objs+=("obj/$b.o")
        done
        {
            printf 'CC = gcc\nCFLAGS = -O2 -g -fno-reorder-blocks-and-partition -std=gnu99 -DLUA_COMPAT_5_3 -DLUA_USE_LINUX %s\n' "'-Dluai_makeseed(L)=0x2545f491'"
            printf 'LDFLAGS = -Wl,--emit-relocs -Wl,-E\nLIBS = -lm -ldl\nSRC = %s/src-%s\nOBJS = %s\n' "$OUT" "$v" "${objs[*]}"
            printf 'lua: obj/lua.o liblua.a\n\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ obj/lua.o liblua.a $(LIBS)\n'
            printf 'liblua.a: $(OBJS)\n\tar rcs $@ $(OBJS)\n'
            printf 'obj/%%.o: $(SRC)/%%.c\n\t@mkdir -p obj\n\t$(CC) $(CFLAGS) -c -o $@ $<\n'
        } >"build-$v/Makefile"
        make -C "build-$v" lua >"build-$v/log" 2>&1
    fi
    "$RIVET" instrument "build-$v/lua" -o "lua-$v.inst" --profile "lua-$v.counts" >/dev/null
    rm -f "lua-$v.counts"
    ./"lua-$v.inst" "$ROOT/bench/lua/binarytrees.lua" 14 >/dev/null
    ./"lua-$v.inst" "$ROOT/bench/lua/fannkuch.lua" 9 >/dev/null
    ./"lua-$v.inst" "$ROOT/bench/lua/strings.lua" 200000 >/dev/null
    "$RIVET" merge --binary "build-$v/lua" "lua-$v.counts" -o "lua-$v.prof"
    "$RIVET" merge "lua-$v.counts" -o "lua-$v.fdata"
done

NEW=build-5.4.6/lua
"$RIVET" optimize $NEW --profile lua-5.4.6.prof -o new.rivet-fresh >/dev/null
"$RIVET" optimize $NEW --profile lua-5.4.4.prof -o new.rivet-stale --json >stale.json 2>stale.err
cat stale.err
"$RIVET" inspect $NEW --profile lua-5.4.4.prof --top 10 2>/dev/null | sed -n '/^stale profile/,$p'
"$RIVET" optimize $NEW --profile lua-5.4.4.prof --force -o new.rivet-forced --json >forced.json 2>/dev/null
echo "forced onto the new offsets: matched share $(grep -o '"matched_share":[0-9.e-]*' forced.json)"

RECIPE=(-reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions -split-all-cold -split-eh -skip-funcs=luaV_execute/1)
"$BOLT" build-5.4.4/lua -data=lua-5.4.4.fdata -w lua-5.4.4.yaml -o old.bolt "${RECIPE[@]}" >bolt-yaml.log 2>&1
"$BOLT" $NEW -o new.bolt-fresh -data=lua-5.4.6.fdata "${RECIPE[@]}" >bolt-fresh.log 2>&1
"$BOLT" $NEW -o new.bolt-stale -data=lua-5.4.4.yaml -infer-stale-profile "${RECIPE[@]}" >bolt-stale.log 2>&1
grep -E 'stale|inference' bolt-stale.log || true

for out in new.rivet-fresh new.rivet-stale new.rivet-forced new.bolt-fresh new.bolt-stale; do
    cmp <(./$out "$ROOT/bench/lua/binarytrees.lua" 12) <($NEW "$ROOT/bench/lua/binarytrees.lua" 12)
    echo "== $out vs lua 5.4.6"
    # Exit 3 means "significantly slower": a result, not a failure.
    { "$RIVET" bench $NEW "$out" --runs "$ROUNDS" -- "$ROOT/bench/lua/binarytrees.lua" 14 || true; } | tail -1
done

# The stale output against the fresh one directly, for each tool (the kept share's error is
# then that of one ratio, not of two).
for pair in "new.rivet-fresh new.rivet-stale" "new.bolt-fresh new.bolt-stale"; do
    echo "== ${pair/ / vs }"
    # shellcheck disable=SC2086 # two binaries
    { "$RIVET" bench $pair --runs "$ROUNDS" -- "$ROOT/bench/lua/binarytrees.lua" 14 || true; } | tail -1
done

# Deterministic counts of the same outputs (one run each under qemu, a minute or so apiece).
if [[ ${SIMULATE:-1} != 0 ]]; then
    for out in $NEW new.rivet-fresh new.rivet-stale new.rivet-forced new.bolt-fresh new.bolt-stale; do
        echo "== simulate $out (binarytrees.lua 9)"
        "$RIVET" simulate "./$out" --placements 4 -- "$ROOT/bench/lua/binarytrees.lua" 9 |
            grep -E 'instructions|taken branches|I1 misses'
    done
fi
