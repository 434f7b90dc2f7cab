#!/usr/bin/env bash
# build-corpus.sh [OUTDIR] -- build the C/C++ test corpus (tests/corpus/src) in the
# full matrix and write OUTDIR/manifest.tsv. See tests/corpus/README.md.
#
#   compiler {gcc, clang} x opt {O0, O2, O3} x {pie, nopie}, all "-g -Wl,--emit-relocs";
#   gcc builds add -fno-reorder-blocks-and-partition, except the extra variant
#   "gcc O2split pie" (plain gcc -O2, so functions get split into .cold parts).
#
# Output names: OUTDIR/<program>.<cc>.<opt>.<pie|nopie>; the shared library of a
# variant is OUTDIR/libcorpus_shared.<cc>.<opt>.<pie|nopie>.so with that same file
# name as its DT_SONAME, so every variant sits in one flat directory and
# shared_user.<variant> (DT_RUNPATH $ORIGIN) loads exactly its own library.
#
# Default OUTDIR: ${RIVET_CACHE:-$HOME/.cache/rivet}/corpus/<key>, key = hash of the
# sources, this script and the compiler versions. A complete OUTDIR (.complete
# marker) is reused as is. The build happens in a sibling temp dir that is renamed
# into place; a flock on OUTDIR.lock serialises concurrent invocations.
#
# stdout: only the last line, the absolute OUTDIR. Logs go to stderr.
# Environment: RIVET_CACHE (cache root), RIVET_JOBS (parallel jobs, default nproc).
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"
SRC="$REPO/tests/corpus/src"

# Variants: "<cc> <opt> <pie>". O2split exists for gcc/pie only.
VARIANTS=()
for cc in gcc clang; do
    for opt in O0 O2 O3; do
        for pie in pie nopie; do VARIANTS+=("$cc $opt $pie"); done
    done
done
VARIANTS+=("gcc O2split pie")

# Programs that link a corpus shared library, and their library.
declare -A NEEDS=([shared_user]=libcorpus_shared)
# Programs whose documented exit status is not 0.
declare -A EXPECT_EXIT=([tailcalls_noreturn]=42)
# Program whose O2split build must contain .cold fragments.
COLD_PROGRAM=cold_split

log() { printf '%s\n' "build-corpus: $*" >&2; }
die() { printf '%s\n' "build-corpus: error: $*" >&2; exit 1; }

# Compile flags for one output. Sets the globals: TOOL, FLAGS (array).
flags_for() { # cc opt pie lang kind
    local cc=$1 opt=$2 pie=$3 lang=$4 kind=$5
    if [[ $cc == gcc ]]; then
        if [[ $lang == c ]]; then TOOL=gcc; else TOOL=g++; fi
    else
        if [[ $lang == c ]]; then TOOL=clang-19; else TOOL=clang++-19; fi
    fi
    # shellcheck disable=SC2054  # the commas belong to -Wl,...
    FLAGS=(-g -pthread -Wl,--emit-relocs)
    if [[ $lang == c ]]; then FLAGS+=(-std=gnu11); else FLAGS+=(-std=gnu++17); fi
    case $opt in
        O2split) FLAGS+=(-O2) ;;
        *) FLAGS+=("-$opt") ;;
    esac
    if [[ $cc == gcc && $opt != O2split ]]; then FLAGS+=(-fno-reorder-blocks-and-partition); fi
    if [[ $kind == shared-lib ]]; then
        FLAGS+=(-fPIC -shared)
    elif [[ $pie == pie ]]; then
        FLAGS+=(-fPIE -pie)
    else
        FLAGS+=(-fno-pie -no-pie)
    fi
}

# Source file of a program (exactly one of .c / .cpp).
source_of() {
    if [[ -f $SRC/$1.c ]]; then echo "$SRC/$1.c"; else echo "$SRC/$1.cpp"; fi
}
lang_of() { if [[ $1 == *.c ]]; then echo c; else echo c++; fi; }
kind_of() { if [[ $1 == lib* ]]; then echo shared-lib; else echo exe; fi; }
out_name() { # prog cc opt pie
    if [[ $1 == lib* ]]; then echo "$1.$2.$3.$4.so"; else echo "$1.$2.$3.$4"; fi
}

# ---------------------------------------------------------------------------
# Internal sub-commands (run by xargs in parallel). Env: CORPUS_TMP.
if [[ ${1:-} == --compile-one ]]; then
    shift
    cc=$1 opt=$2 pie=$3 prog=$4
    src="$(source_of "$prog")"
    lang="$(lang_of "$src")"
    kind="$(kind_of "$prog")"
    name="$(out_name "$prog" "$cc" "$opt" "$pie")"
    flags_for "$cc" "$opt" "$pie" "$lang" "$kind"
    extra=()
    if [[ $kind == shared-lib ]]; then extra+=("-Wl,-soname,$name"); fi
    if [[ -n ${NEEDS[$prog]:-} ]]; then
        lib="$(out_name "${NEEDS[$prog]}" "$cc" "$opt" "$pie")"
        # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
        extra+=("$CORPUS_TMP/$lib" '-Wl,-rpath,$ORIGIN')
    fi
    cmd=("$TOOL" "${FLAGS[@]}" -o "$CORPUS_TMP/$name" "$src" "${extra[@]}")
    printf '%s\t%s\n' "$name" "${FLAGS[*]}" >"$CORPUS_TMP/logs/$name.flags"
    if ! "${cmd[@]}" >"$CORPUS_TMP/logs/$name.log" 2>&1; then
        printf 'FAILED: %s\n' "${cmd[*]}" >>"$CORPUS_TMP/logs/$name.log"
        exit 1
    fi
    exit 0
fi
if [[ ${1:-} == --run-one ]]; then
    # Run one executable twice (from its directory, no input); record stdout and
    # exit status of both runs so run-to-run nondeterminism is caught too.
    name=$2
    for i in 1 2; do
        rc=0
        (cd "$CORPUS_TMP" && timeout 20 "./$name" </dev/null >"runs/$name.$i.stdout" \
            2>"runs/$name.$i.stderr") || rc=$?
        echo "$rc" >"$CORPUS_TMP/runs/$name.$i.rc"
    done
    exit 0
fi
# ---------------------------------------------------------------------------

exec 3>&1 1>&2 # keep real stdout for the final path line only

if [[ $# -gt 1 ]]; then die "usage: $0 [OUTDIR]"; fi

missing=()
for tool_pkg in gcc:gcc g++:g++ clang-19:clang-19 clang++-19:clang-19 flock:util-linux \
    sha256sum:coreutils timeout:coreutils nm:binutils readelf:binutils; do
    command -v "${tool_pkg%%:*}" >/dev/null 2>&1 || missing+=("${tool_pkg%%:*} (apt-get install ${tool_pkg#*:})")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    die "missing required tools: ${missing[*]}"
fi

SOURCES=()
while IFS= read -r f; do SOURCES+=("$f"); done < <(
    cd "$SRC" && shopt -s nullglob && for f in *.c *.cpp; do printf '%s\n' "$f"; done | LC_ALL=C sort
)
[[ ${#SOURCES[@]} -gt 0 ]] || die "no sources in $SRC"

key="$(
    {
        for f in "${SOURCES[@]}"; do
            printf '== %s\n' "$f"
            cat "$SRC/$f"
        done
        printf '== script\n'
        cat "$SELF"
        for t in gcc g++ clang-19 clang++-19; do "$t" --version; done
    } | sha256sum | cut -c1-16
)"

if [[ $# -eq 1 ]]; then
    OUTDIR=$1
else
    OUTDIR="${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}/corpus/$key"
fi
mkdir -p "$(dirname "$OUTDIR")"
OUTDIR="$(cd "$(dirname "$OUTDIR")" && pwd)/$(basename "$OUTDIR")"

if [[ -f $OUTDIR/.complete ]]; then
    log "up to date: $OUTDIR"
    echo "$OUTDIR" >&3
    exit 0
fi

exec 9>"$OUTDIR.lock"
if ! flock -n 9; then
    log "waiting for another build of $OUTDIR ..."
    flock 9
fi
if [[ -f $OUTDIR/.complete ]]; then
    log "built by a concurrent invocation: $OUTDIR"
    echo "$OUTDIR" >&3
    exit 0
fi
if [[ -e $OUTDIR ]]; then
    # Only ever delete a directory that this script created.
    if [[ -f $OUTDIR/.rivet-corpus ]]; then
        rm -rf -- "$OUTDIR"
    elif [[ -d $OUTDIR && -z "$(ls -A -- "$OUTDIR")" ]]; then
        rmdir -- "$OUTDIR"
    else
        die "$OUTDIR exists, is not empty and is not an (incomplete) corpus build; refusing to touch it"
    fi
fi

TMP="$(mktemp -d "$OUTDIR.tmp.XXXXXX")"
cleanup() { if [[ -n ${TMP:-} && -d $TMP ]]; then rm -rf -- "$TMP"; fi; }
trap cleanup EXIT
touch "$TMP/.rivet-corpus"
mkdir -p "$TMP/logs" "$TMP/runs" "$TMP/expected"
export CORPUS_TMP="$TMP"
JOBS="${RIVET_JOBS:-$(nproc)}"

start=$(date +%s.%N)
log "key $key; ${#SOURCES[@]} sources x ${#VARIANTS[@]} variants; $JOBS jobs; building in $TMP"

PROGRAMS=()
for f in "${SOURCES[@]}"; do PROGRAMS+=("${f%.*}"); done

# Phase 1: everything that needs no other corpus output; phase 2: the users.
phase1=() phase2=()
for v in "${VARIANTS[@]}"; do
    for p in "${PROGRAMS[@]}"; do
        if [[ -n ${NEEDS[$p]:-} ]]; then phase2+=("$v $p"); else phase1+=("$v $p"); fi
    done
done
compile_all() { # job lines "<cc> <opt> <pie> <program>"
    [[ $# -gt 0 ]] || return 0
    if ! printf '%s\n' "$@" | xargs -P "$JOBS" -L 1 "$SELF" --compile-one; then
        for l in "$TMP"/logs/*.log; do
            if grep -q '^FAILED: ' "$l"; then
                log "compile failed: $(basename "$l" .log)"
                sed 's/^/    /' "$l" >&2
            fi
        done
        die "compilation failed (see above)"
    fi
}
compile_all "${phase1[@]}"
compile_all "${phase2[@]}"
built=$(date +%s.%N)

# Every ELF must keep its relocations.
ALL_ELF=()
EXES=()
for v in "${VARIANTS[@]}"; do
    read -r cc opt pie <<<"$v"
    for p in "${PROGRAMS[@]}"; do
        n="$(out_name "$p" "$cc" "$opt" "$pie")"
        ALL_ELF+=("$n")
        if [[ $(kind_of "$p") == exe ]]; then EXES+=("$n"); fi
    done
done
for n in "${ALL_ELF[@]}"; do
    sections="$(readelf -S -W "$TMP/$n")" # no pipe into grep -q: SIGPIPE + pipefail
    grep -q ' \.rela\.text ' <<<"$sections" || die "$n has no .rela.text (was --emit-relocs honoured?)"
done

# The O2split build of the cold-path program must have .cold fragments.
cold_bin="$TMP/$(out_name "$COLD_PROGRAM" gcc O2split pie)"
if [[ -f $cold_bin ]]; then
    cold_syms="$(nm "$cold_bin" | grep '\.cold$' || true)"
    [[ -n $cold_syms ]] || die "$(basename "$cold_bin") has no .cold symbols; gcc did not split functions"
    log ".cold symbols in $(basename "$cold_bin"):"
    printf '%s\n' "$cold_syms" | sed 's/^/    /' >&2
fi

# Run everything, twice.
printf '%s\n' "${EXES[@]}" | xargs -P "$JOBS" -L 1 "$SELF" --run-one
ran=$(date +%s.%N)

# Determinism check: per program, every variant and both runs print exactly the
# same stdout and exit with the same (documented) status.
bad=()
for p in "${PROGRAMS[@]}"; do
    [[ $(kind_of "$p") == exe ]] || continue
    want_rc="${EXPECT_EXIT[$p]:-0}"
    ref=""
    p_bad=0
    for v in "${VARIANTS[@]}"; do
        read -r cc opt pie <<<"$v"
        n="$(out_name "$p" "$cc" "$opt" "$pie")"
        for i in 1 2; do
            out="$TMP/runs/$n.$i.stdout"
            rc="$(cat "$TMP/runs/$n.$i.rc")"
            if [[ $rc != "$want_rc" ]]; then
                log "WRONG EXIT: program $p: $n (run $i) exited $rc, expected $want_rc"
                sed 's/^/    stderr: /' "$TMP/runs/$n.$i.stderr" | head -20 >&2
                p_bad=1
            fi
            if ! grep -Eq '^checksum: [0-9a-f]+$' <<<"$(tail -n 1 "$out")"; then
                log "BAD OUTPUT: program $p: $n (run $i) does not end with a 'checksum: <hex>' line"
                p_bad=1
            fi
            if [[ -z $ref ]]; then
                ref="$n.$i"
                cp "$out" "$TMP/expected/$p.stdout"
            elif ! cmp -s "$out" "$TMP/expected/$p.stdout"; then
                if [[ $p_bad -eq 0 ]]; then
                    log "NONDETERMINISTIC: program $p: stdout of $n (run $i) differs from $ref:"
                    diff "$TMP/expected/$p.stdout" "$out" | head -20 | sed 's/^/    /' >&2 || true
                else
                    log "NONDETERMINISTIC: program $p: stdout of $n (run $i) differs from $ref"
                fi
                p_bad=1
            fi
        done
    done
    if [[ $p_bad -ne 0 ]]; then bad+=("$p"); fi
done
[[ ${#bad[@]} -eq 0 ]] || die "determinism check failed for program(s): ${bad[*]} (see above)"

# Manifest.
{
    printf 'name\tkind\tprogram\tcompiler\topt\tpie\tlanguage\tpath\texpected_exit\texpected_stdout\tneeds\tflags\n'
    for p in "${PROGRAMS[@]}"; do
        src="$(source_of "$p")"
        lang="$(lang_of "$src")"
        kind="$(kind_of "$p")"
        for v in "${VARIANTS[@]}"; do
            read -r cc opt pie <<<"$v"
            n="$(out_name "$p" "$cc" "$opt" "$pie")"
            flags="$(cut -f2 "$TMP/logs/$n.flags")"
            if [[ $kind == exe ]]; then
                rc="${EXPECT_EXIT[$p]:-0}"
                exp="expected/$p.stdout"
            else
                rc=- exp=-
            fi
            needs=-
            if [[ -n ${NEEDS[$p]:-} ]]; then needs="$(out_name "${NEEDS[$p]}" "$cc" "$opt" "$pie")"; fi
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
                "$n" "$kind" "$p" "$cc" "$opt" "$pie" "$lang" "$n" "$rc" "$exp" "$needs" "$flags"
        done
    done
} >"$TMP/manifest.tsv"
rm -rf -- "$TMP/runs"
{
    printf 'key %s\n' "$key"
    for t in gcc clang-19; do "$t" --version | head -n 1; done
} >"$TMP/build-info.txt"

touch "$TMP/.complete"
mv -T -- "$TMP" "$OUTDIR"
TMP=""
end=$(date +%s.%N)
log "$(awk -v n="${#ALL_ELF[@]}" -v e="${#EXES[@]}" -v s="$start" -v b="$built" -v r="$ran" -v z="$end" \
    'BEGIN { printf "%d ELF files (%d executables): compiled in %.1fs, run and checked in %.1fs, total %.1fs", n, e, b - s, r - b, z - s }')"
log "manifest: $OUTDIR/manifest.tsv"
echo "$OUTDIR" >&3
