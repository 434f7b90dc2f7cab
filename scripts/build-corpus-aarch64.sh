#!/usr/bin/env bash
# build-corpus-aarch64.sh [OUTDIR] -- cross-build the test corpus (tests/corpus/src) for
# AArch64, run every executable under qemu-aarch64 and compare it with the x86-64
# expectation. The AArch64 twin of scripts/build-corpus.sh (read tests/corpus/README.md
# first; everything said there holds here unless noted below).
#
#   compiler {gcc, clang} x opt {O0, O2, O3} x {pie, nopie}, all "-g -Wl,--emit-relocs",
#   gcc = aarch64-linux-gnu-gcc/g++ 12 (+ -fno-reorder-blocks-and-partition, except O2split),
#   clang = clang-19/clang++-19 --target=aarch64-linux-gnu -fuse-ld=lld; plus
#     "gcc O2split pie"   gcc -O2 -freorder-blocks-and-partition: functions split into
#                         .cold parts (unlike x86-64, aarch64 gcc-12 leaves this off at -O2);
#     "clang O2pac pie", "clang O2pac nopie", "gcc O2pac pie"
#                         -O2 -mbranch-protection=standard (PAC-RET + BTI landing pads);
#                         Debian's start files have no GNU property note, so these
#                         executables lose the BTI bit and run unguarded;
#     "clang O2bti pie", "gcc O2bti nopie"
#                         the same, linked with tests/aarch64/bti_start.S instead of the
#                         start files and -z force-bti: the executables keep the BTI bit, and
#                         qemu's default CPU checks every indirect branch into their code
#                         (libcorpus_shared of these variants is built as O2pac: a shared
#                         library keeps the usual start files, and forcing the bit on them
#                         would trap in crtbeginS's frame_dummy).
#
# Check: every executable runs twice under `qemu-aarch64 -L /usr/aarch64-linux-gnu`
# (timeout RIVET_QEMU_TIMEOUT, default 120 s); both runs of every variant must exit
# with the documented status and print exactly the stdout of the x86-64 corpus
# (expected/<program>.stdout of scripts/build-corpus.sh, built or taken from its cache;
# RIVET_X86_CORPUS=DIR points at an existing one instead). A program whose AArch64
# variants all agree with each other but not with x86-64 is reported as
# "ARCH DIFFERENCE" and fails the check like any other mismatch.
#
# Output: OUTDIR/<program>.<cc>.<opt>.<pie|nopie> (+ libcorpus_shared.<variant>.so),
# manifest.tsv (same columns as the x86-64 one), expected/<program>.stdout (copied from
# the x86-64 corpus), logs/, runs/ (stdout, stderr and exit status of each run, kept
# here, unlike the x86-64 script, because a qemu run is worth looking at),
# status.tsv (name, build ok/FAIL, run ok/FAIL, reason), build-info.txt.
#
# Default OUTDIR: ${RIVET_CACHE:-$HOME/.cache/rivet}/corpus-aarch64/<key>, key = hash of
# the sources, this script, the compiler and qemu versions and the x86-64 expectation.
# A finished OUTDIR (.complete) is reused as is. Unlike the x86-64 script, a failed
# build or run does not throw the directory away: it is kept (without .complete) so
# the failures can be read, and the script exits 1 naming them.
#
# Installs its own packages (scripts/lib.sh need_packages). stdout: only the last
# line, the absolute OUTDIR. Logs go to stderr.
# Environment: RIVET_CACHE, RIVET_JOBS (default nproc), RIVET_QEMU_TIMEOUT, RIVET_X86_CORPUS.
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"
SRC="$REPO/tests/corpus/src"
SYSROOT=/usr/aarch64-linux-gnu
QEMU=(qemu-aarch64 -L "$SYSROOT")

VARIANTS=()
for cc in gcc clang; do
    for opt in O0 O2 O3; do
        for pie in pie nopie; do VARIANTS+=("$cc $opt $pie"); done
    done
done
VARIANTS+=("gcc O2split pie" "clang O2pac pie" "clang O2pac nopie" "gcc O2pac pie")
VARIANTS+=("clang O2bti pie" "gcc O2bti nopie")

declare -A NEEDS=([shared_user]=libcorpus_shared)
declare -A EXPECT_EXIT=([tailcalls_noreturn]=42)
COLD_PROGRAM=cold_split

log() { printf '%s\n' "build-corpus-aarch64: $*" >&2; }
die() { printf '%s\n' "build-corpus-aarch64: error: $*" >&2; exit 1; }

# Sets the globals TOOL (array: driver and target flags) and FLAGS (array).
flags_for() { # cc opt pie lang kind
    local cc=$1 opt=$2 pie=$3 lang=$4 kind=$5
    if [[ $cc == gcc ]]; then
        if [[ $lang == c ]]; then TOOL=(aarch64-linux-gnu-gcc); else TOOL=(aarch64-linux-gnu-g++); fi
    else
        if [[ $lang == c ]]; then TOOL=(clang-19); else TOOL=(clang++-19); fi
        TOOL+=(--target=aarch64-linux-gnu -fuse-ld=lld)
    fi
    # shellcheck disable=SC2054  # the commas belong to -Wl,...
    FLAGS=(-g -pthread -Wl,--emit-relocs)
    if [[ $lang == c ]]; then FLAGS+=(-std=gnu11); else FLAGS+=(-std=gnu++17); fi
    case $opt in
        O2split) FLAGS+=(-O2 -freorder-blocks-and-partition) ;;
        O2pac) FLAGS+=(-O2 -mbranch-protection=standard) ;;
        O2bti)
            FLAGS+=(-O2 -mbranch-protection=standard)
            if [[ $kind != shared-lib ]]; then
                FLAGS+=(-nostartfiles "$REPO/tests/aarch64/bti_start.S" -Wl,-z,force-bti)
            fi
            ;;
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

source_of() { if [[ -f $SRC/$1.c ]]; then echo "$SRC/$1.c"; else echo "$SRC/$1.cpp"; fi; }
lang_of() { if [[ $1 == *.c ]]; then echo c; else echo c++; fi; }
kind_of() { if [[ $1 == lib* ]]; then echo shared-lib; else echo exe; fi; }
out_name() { if [[ $1 == lib* ]]; then echo "$1.$2.$3.$4.so"; else echo "$1.$2.$3.$4"; fi; }

# ---------------------------------------------------------------------------
# Internal sub-commands, run by xargs in parallel. Env: CORPUS_TMP.
if [[ ${1:-} == --compile-one ]]; then
    cc=$2 opt=$3 pie=$4 prog=$5
    src="$(source_of "$prog")"
    lang="$(lang_of "$src")"
    kind="$(kind_of "$prog")"
    name="$(out_name "$prog" "$cc" "$opt" "$pie")"
    flags_for "$cc" "$opt" "$pie" "$lang" "$kind"
    extra=()
    if [[ $kind == shared-lib ]]; then extra+=("-Wl,-soname,$name"); fi
    if [[ -n ${NEEDS[$prog]:-} ]]; then
        lib="$(out_name "${NEEDS[$prog]}" "$cc" "$opt" "$pie")"
        if [[ ! -f $CORPUS_TMP/$lib ]]; then
            printf 'FAILED: its library %s was not built\n' "$lib" >"$CORPUS_TMP/logs/$name.log"
            exit 0
        fi
        # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader
        extra+=("$CORPUS_TMP/$lib" '-Wl,-rpath,$ORIGIN')
    fi
    cmd=("${TOOL[@]}" "${FLAGS[@]}" -o "$CORPUS_TMP/$name" "$src" "${extra[@]}")
    printf '%s\t%s\n' "$name" "${TOOL[*]:1} ${FLAGS[*]}" >"$CORPUS_TMP/logs/$name.flags"
    if ! "${cmd[@]}" >"$CORPUS_TMP/logs/$name.log" 2>&1; then
        printf 'FAILED: %s\n' "${cmd[*]}" >>"$CORPUS_TMP/logs/$name.log"
        rm -f -- "$CORPUS_TMP/$name"
    fi
    exit 0 # failures are collected afterwards, so one bad file does not stop the rest
fi
if [[ ${1:-} == --run-one ]]; then
    name=$2
    for i in 1 2; do
        rc=0
        (cd "$CORPUS_TMP" && timeout "${RIVET_QEMU_TIMEOUT:-120}" "${QEMU[@]}" "./$name" </dev/null \
            >"runs/$name.$i.stdout" 2>"runs/$name.$i.stderr") || rc=$?
        echo "$rc" >"$CORPUS_TMP/runs/$name.$i.rc"
    done
    exit 0
fi
# ---------------------------------------------------------------------------

exec 3>&1 1>&2

if [[ $# -gt 1 ]]; then die "usage: $0 [OUTDIR]"; fi

# shellcheck source=lib.sh
source "$REPO/scripts/lib.sh"
need_packages qemu-user gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross \
    binutils-aarch64-linux-gnu clang-19 lld-19 util-linux coreutils binutils

SOURCES=()
while IFS= read -r f; do SOURCES+=("$f"); done < <(
    cd "$SRC" && shopt -s nullglob && for f in *.c *.cpp; do printf '%s\n' "$f"; done | LC_ALL=C sort
)
[[ ${#SOURCES[@]} -gt 0 ]] || die "no sources in $SRC"
PROGRAMS=()
for f in "${SOURCES[@]}"; do PROGRAMS+=("${f%.*}"); done

# The expectation: the x86-64 corpus's expected stdout of every program.
if [[ -n ${RIVET_X86_CORPUS:-} ]]; then
    X86="$RIVET_X86_CORPUS"
else
    log "getting the x86-64 expectation from scripts/build-corpus.sh ..."
    X86="$("$REPO/scripts/build-corpus.sh" | tail -n 1)"
fi
[[ -f $X86/.complete ]] || die "x86-64 corpus $X86 is not complete"

key="$(
    {
        for f in "${SOURCES[@]}"; do
            printf '== %s\n' "$f"
            cat "$SRC/$f"
        done
        printf '== script\n'
        cat "$SELF"
        for p in "${PROGRAMS[@]}"; do
            if [[ -f $X86/expected/$p.stdout ]]; then cat "$X86/expected/$p.stdout"; fi
        done
        for t in aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ clang-19 clang++-19 ld.lld-19 qemu-aarch64; do
            "$t" --version
        done
        dpkg-query -W -f='${Version}\n' libc6-dev-arm64-cross
    } | sha256sum | cut -c1-16
)"

if [[ $# -eq 1 ]]; then
    OUTDIR=$1
else
    OUTDIR="${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}/corpus-aarch64/$key"
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

phase1=() phase2=()
for v in "${VARIANTS[@]}"; do
    for p in "${PROGRAMS[@]}"; do
        if [[ -n ${NEEDS[$p]:-} ]]; then phase2+=("$v $p"); else phase1+=("$v $p"); fi
    done
done
for phase in phase1 phase2; do
    declare -n jobs=$phase
    if [[ ${#jobs[@]} -gt 0 ]]; then
        printf '%s\n' "${jobs[@]}" | xargs -P "$JOBS" -L 1 "$SELF" --compile-one
    fi
    unset -n jobs
done
built=$(date +%s.%N)

# status.tsv rows are collected in STATUS[name] = "build<TAB>run<TAB>reason".
declare -A STATUS=()
ALL_ELF=() EXES=()
failures=0
for v in "${VARIANTS[@]}"; do
    read -r cc opt pie <<<"$v"
    for p in "${PROGRAMS[@]}"; do
        n="$(out_name "$p" "$cc" "$opt" "$pie")"
        ALL_ELF+=("$n")
        if [[ ! -f $TMP/$n ]]; then
            reason="$(grep -m1 -E 'error|FAILED' "$TMP/logs/$n.log" | cut -c1-200 || true)"
            STATUS[$n]="FAIL	-	build: $reason"
            log "BUILD FAILED: $n: $reason"
            failures=$((failures + 1))
            continue
        fi
        sections="$(readelf -S -W "$TMP/$n")"
        if ! grep -q ' \.rela\.text ' <<<"$sections"; then
            STATUS[$n]="FAIL	-	no .rela.text"
            log "BUILD FAILED: $n has no .rela.text (was --emit-relocs honoured?)"
            failures=$((failures + 1))
            continue
        fi
        STATUS[$n]="ok	-	"
        if [[ $(kind_of "$p") == exe ]]; then EXES+=("$n"); fi
    done
done

cold_bin="$TMP/$(out_name "$COLD_PROGRAM" gcc O2split pie)"
if [[ -f $cold_bin ]]; then
    cold_syms="$(nm "$cold_bin" | grep '\.cold$' || true)"
    if [[ -z $cold_syms ]]; then
        log "NO COLD PARTS: $(basename "$cold_bin") has no .cold symbols; gcc did not split functions"
        failures=$((failures + 1))
    else
        log ".cold symbols in $(basename "$cold_bin"): $(awk '{print $3}' <<<"$cold_syms" | tr '\n' ' ')"
    fi
fi

if [[ ${#EXES[@]} -gt 0 ]]; then
    printf '%s\n' "${EXES[@]}" | xargs -P "$JOBS" -L 1 "$SELF" --run-one
fi
ran=$(date +%s.%N)

for p in "${PROGRAMS[@]}"; do
    [[ $(kind_of "$p") == exe ]] || continue
    want_rc="${EXPECT_EXIT[$p]:-0}"
    want="$X86/expected/$p.stdout"
    [[ -f $want ]] || die "the x86-64 corpus has no expected/$p.stdout"
    cp "$want" "$TMP/expected/$p.stdout"
    agree_a64=1 first="" p_bad=0
    for v in "${VARIANTS[@]}"; do
        read -r cc opt pie <<<"$v"
        n="$(out_name "$p" "$cc" "$opt" "$pie")"
        [[ -f $TMP/runs/$n.1.rc ]] || continue
        reasons=()
        for i in 1 2; do
            out="$TMP/runs/$n.$i.stdout"
            rc="$(cat "$TMP/runs/$n.$i.rc")"
            if [[ $rc != "$want_rc" ]]; then
                reasons+=("run $i exit $rc (want $want_rc)")
                log "WRONG EXIT: $n (run $i) exited $rc, expected $want_rc"
                sed 's/^/    stderr: /' "$TMP/runs/$n.$i.stderr" | head -10 >&2
            elif ! cmp -s "$out" "$want"; then
                reasons+=("run $i stdout differs from x86-64")
                log "WRONG OUTPUT: $n (run $i) differs from the x86-64 expectation:"
                diff "$want" "$out" | head -10 | sed 's/^/    /' >&2 || true
            fi
            if [[ -z $first ]]; then
                first="$out"
            elif ! cmp -s "$out" "$first"; then
                agree_a64=0
            fi
        done
        if [[ ${#reasons[@]} -gt 0 ]]; then
            STATUS[$n]="ok	FAIL	${reasons[*]}"
            failures=$((failures + 1))
            p_bad=1
        else
            STATUS[$n]="ok	ok	"
        fi
    done
    if [[ $p_bad -ne 0 && $agree_a64 -eq 1 && -n $first ]]; then
        log "ARCH DIFFERENCE: $p: every AArch64 run printed the same stdout, which differs from x86-64"
    fi
done

{
    printf 'name\tbuild\trun\treason\n'
    for n in "${ALL_ELF[@]}"; do printf '%s\t%s\n' "$n" "${STATUS[$n]}"; done
} >"$TMP/status.tsv"
{
    printf 'name\tkind\tprogram\tcompiler\topt\tpie\tlanguage\tpath\texpected_exit\texpected_stdout\tneeds\tflags\n'
    for p in "${PROGRAMS[@]}"; do
        src="$(source_of "$p")"
        lang="$(lang_of "$src")"
        kind="$(kind_of "$p")"
        for v in "${VARIANTS[@]}"; do
            read -r cc opt pie <<<"$v"
            n="$(out_name "$p" "$cc" "$opt" "$pie")"
            [[ -f $TMP/$n ]] || continue
            flags="$(cut -f2 "$TMP/logs/$n.flags")"
            if [[ $kind == exe ]]; then rc="${EXPECT_EXIT[$p]:-0}" exp="expected/$p.stdout"; else rc=- exp=-; fi
            needs=-
            if [[ -n ${NEEDS[$p]:-} ]]; then needs="$(out_name "${NEEDS[$p]}" "$cc" "$opt" "$pie")"; fi
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
                "$n" "$kind" "$p" "$cc" "$opt" "$pie" "$lang" "$n" "$rc" "$exp" "$needs" "$flags"
        done
    done
} >"$TMP/manifest.tsv"
{
    printf 'key %s\nx86-64 expectation %s\n' "$key" "$X86"
    for t in aarch64-linux-gnu-gcc clang-19 qemu-aarch64; do "$t" --version | head -n 1; done
} >"$TMP/build-info.txt"

end=$(date +%s.%N)
ok_runs="$(awk -F'\t' 'NR > 1 && $3 == "ok"' "$TMP/status.tsv" | wc -l)"
log "$(awk -v n="${#ALL_ELF[@]}" -v e="${#EXES[@]}" -v o="$ok_runs" -v s="$start" -v b="$built" -v r="$ran" -v z="$end" \
    'BEGIN { printf "%d ELF files (%d executables built, %d ran as expected): compiled in %.1fs, run under qemu in %.1fs, total %.1fs", n, e, o, b - s, r - b, z - s }')"

if [[ $failures -ne 0 ]]; then
    # Keep the evidence: rename the temp dir to OUTDIR without .complete.
    mv -T -- "$TMP" "$OUTDIR"
    TMP=""
    die "$failures failure(s); see $OUTDIR/status.tsv and the log above"
fi
touch "$TMP/.complete"
mv -T -- "$TMP" "$OUTDIR"
TMP=""
log "manifest: $OUTDIR/manifest.tsv"
echo "$OUTDIR" >&3
