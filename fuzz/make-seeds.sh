#!/usr/bin/env bash
# make-seeds.sh: build the seed ELF files of the `inspect` fuzz corpus.
#
# From fuzz/seed.c (jump table, computed goto, function pointers, noreturn call, constructor):
# gcc -O2 as PIE and as a fixed-address executable, each with and without -Wl,--emit-relocs
# (relocation mode), each also stripped (then only .dynsym and .eh_frame tell functions apart).
# From fuzz/seed-eh.cpp (throw, catch, rethrow, cleanups: LSDAs, landing pads, cold parts):
# g++ -O2 PIE with --emit-relocs, and a stripped variant. -z noseparate-code keeps the files
# free of page padding, so every seed is a few KB of real tables for the mutator.
#
# Usage:  fuzz/make-seeds.sh [OUTDIR]      (default fuzz/seeds; needs gcc, g++ and strip)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/seeds}
mkdir -p "$out"

# shellcheck disable=SC2054 # the commas belong to -Wl, options
common=(-O2 -g0 -fasynchronous-unwind-tables -Wl,-z,noseparate-code -Wl,--build-id)

# build COMPILER SOURCE NAME FLAGS...: the seed NAME and NAME-stripped.
build() {
    local compiler=$1 source=$2 name=$3
    shift 3
    "$compiler" "${common[@]}" "$@" -o "$out/$name" "$here/$source"
    strip -o "$out/$name-stripped" "$out/$name"
}

build gcc seed.c seed-pie-relocs -fPIE -pie -Wl,--emit-relocs
build gcc seed.c seed-pie -fPIE -pie
build gcc seed.c seed-nopie-relocs -fno-pie -no-pie -Wl,--emit-relocs
build gcc seed.c seed-nopie -fno-pie -no-pie
build g++ seed-eh.cpp seed-eh-pie-relocs -fPIE -pie -Wl,--emit-relocs

too_big=$(find "$out" -type f -size +20k)
[[ -z $too_big ]] || echo "make-seeds.sh: warning: seeds over 20 KB: $too_big" >&2
ls -l "$out"
