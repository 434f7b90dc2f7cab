#!/usr/bin/env bash
# bench/rewrite.sh -- Rivet's rewriter side by side with llvm-bolt-19 on layout randomization.
#
#   rivet rewrite BIN -o OUT --layout shuffle --seed N
#   llvm-bolt-19 BIN -o OUT -reorder-blocks=cluster-shuffle -reorder-functions=random -lite=0
#
# 1. Processing time and peak memory (GNU time) on the real programs (Lua, SQLite, built by
#    scripts/build-real-programs.sh), as interleaved pairs: rivet, bolt, rivet, bolt, ...;
#    medians of each side and the median of the per-pair ratios.
# 2. Which binaries each tool rewrites correctly: every corpus program (scripts/build-corpus.sh;
#    same exit code and stdout as expected), Lua (scripts/check-lua.sh) and SQLite
#    (scripts/check-sqlite.sh on the shell workload).
#
# Usage: bench/rewrite.sh [PAIRS] > docs/rewrite-benchmark.md   (PAIRS defaults to 5)
# Needs a release build of rivet (built here) and llvm-bolt-19 (apt-get install bolt-19).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS="${1:-5}"
log() { printf 'bench/rewrite: %s\n' "$*" >&2; }

command -v llvm-bolt-19 >/dev/null || { log "error: llvm-bolt-19 missing (apt-get install bolt-19)"; exit 1; }
cargo build --release -q -p rivet
RIVET="$PWD/target/release/rivet"
CORPUS="$(scripts/build-corpus.sh 2>/dev/null | tail -n 1)"
declare -A REAL
while read -r name path; do REAL[$name]=$path; done < <(scripts/build-real-programs.sh 2>/dev/null)
WORK="$(mktemp -d)"
trap 'rm -rf -- "$WORK"' EXIT

# set_cmd TOOL BIN OUT SEED: the command line in CMD
set_cmd() {
    case $1 in
        rivet) CMD=("$RIVET" rewrite "$2" -o "$3" --layout shuffle --seed "$4") ;;
        bolt) CMD=(llvm-bolt-19 "$2" -o "$3" -reorder-blocks=cluster-shuffle
            -reorder-functions=random -lite=0 -bolt-seed="$4") ;;
        # Rivet always carries debug info over; BOLT only when asked.
        bolt-debug) CMD=(llvm-bolt-19 "$2" -o "$3" -reorder-blocks=cluster-shuffle
            -reorder-functions=random -lite=0 -bolt-seed="$4" -update-debug-sections) ;;
    esac
}

# measure TOOL BIN OUT SEED -> "seconds kilobytes status"
measure() {
    local tool=$1 bin=$2 out=$3 seed=$4 t status
    rm -f "$out"
    t="$WORK/time.txt"
    set_cmd "$tool" "$bin" "$out" "$seed"
    if /usr/bin/time -f '%e %M' -o "$t" "${CMD[@]}" >/dev/null 2>&1; then
        status=ok
    else
        status=failed
    fi
    printf '%s %s\n' "$(tail -n 1 "$t")" "$status"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# Rewriting with random layouts: Rivet and llvm-bolt-19"
echo
echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo),"
echo "$(grep -m1 '^PRETTY_NAME=' /etc/os-release | cut -d'"' -f2), rivet $(git rev-parse --short HEAD), $(llvm-bolt-19 --version 2>/dev/null | grep -m1 -o 'LLVM version [0-9.]*')."
echo "Reproduce: \`bench/rewrite.sh $PAIRS\`."
echo
echo "Rivet: \`rivet rewrite BIN -o OUT --layout shuffle --seed N\`;"
echo "BOLT: \`llvm-bolt-19 BIN -o OUT -reorder-blocks=cluster-shuffle -reorder-functions=random -lite=0\`;"
echo "BOLT+debug: the same with \`-update-debug-sections\` (Rivet always updates debug info)."
echo
echo "## Processing time and peak memory ($PAIRS interleaved triples, medians)"
echo
echo "Ratios are Rivet / BOLT, the median of the per-triple ratios."
echo
echo "| binary | size | Rivet time | BOLT time | BOLT+debug time | time ratio | time ratio, +debug | Rivet peak RSS | BOLT peak RSS | BOLT+debug peak RSS | memory ratio | memory ratio, +debug |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for name in lua-gcc lua-clang sqlite3-gcc sqlite3-clang; do
    bin="${REAL[$name]:-}"
    [[ -n $bin ]] || { log "error: build-real-programs.sh gave no $name"; exit 1; }
    : >"$WORK/r" && : >"$WORK/b" && : >"$WORK/d"
    : >"$WORK/tr" && : >"$WORK/mr" && : >"$WORK/tdr" && : >"$WORK/mdr"
    for seed in $(seq 1 "$PAIRS"); do
        read -r rt rm rs < <(measure rivet "$bin" "$WORK/out.rivet" "$seed")
        read -r bt bm bs < <(measure bolt "$bin" "$WORK/out.bolt" "$seed")
        read -r dt dm ds < <(measure bolt-debug "$bin" "$WORK/out.bolt" "$seed")
        echo "$rt $rm $rs" >>"$WORK/r"
        echo "$bt $bm $bs" >>"$WORK/b"
        echo "$dt $dm $ds" >>"$WORK/d"
        awk -v a="$rt" -v b="$bt" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }' >>"$WORK/tr"
        awk -v a="$rm" -v b="$bm" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }' >>"$WORK/mr"
        awk -v a="$rt" -v b="$dt" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }' >>"$WORK/tdr"
        awk -v a="$rm" -v b="$dm" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }' >>"$WORK/mdr"
    done
    size=$(stat -c %s "$bin")
    mb() { cut -d' ' -f2 "$1" | median | awk '{ print $1 / 1024 }'; }
    # A tool that failed on the binary gets its times marked: they are of a failed run.
    failed() { if grep -q failed "$1"; then printf ' (failed)'; fi; }
    printf '| %s | %.1f MB | %s s%s | %s s%s | %s s%s | %s | %s | %.0f MB | %.0f MB | %.0f MB | %s | %s |\n' "$name" \
        "$(awk -v s="$size" 'BEGIN { print s / 1e6 }')" \
        "$(cut -d' ' -f1 "$WORK/r" | median)" "$(failed "$WORK/r")" \
        "$(cut -d' ' -f1 "$WORK/b" | median)" "$(failed "$WORK/b")" \
        "$(cut -d' ' -f1 "$WORK/d" | median)" "$(failed "$WORK/d")" \
        "$(median <"$WORK/tr")" "$(median <"$WORK/tdr")" \
        "$(mb "$WORK/r")" "$(mb "$WORK/b")" "$(mb "$WORK/d")" \
        "$(median <"$WORK/mr")" "$(median <"$WORK/mdr")"
done

echo
echo "## Correct rewrites (seed 1)"
echo
# corpus: same exit and stdout as the manifest expects; libraries through their user
corpus_ok() { # tool -> prints "ok total"
    local tool=$1 ok=0 total=0 name kind path ex exp out rc user
    local manifest="$CORPUS/manifest.tsv"
    while IFS=$'\t' read -r name kind _ _ _ _ _ path ex exp _; do
        [[ $name == name ]] && continue
        total=$((total + 1))
        out="$WORK/lib/$path"
        mkdir -p "$WORK/lib"
        rm -f "$out"
        set_cmd "$tool" "$CORPUS/$path" "$out" 1
        if ! "${CMD[@]}" >/dev/null 2>&1; then
            echo "$tool: $name: rewrite failed" >>"$WORK/failures"
            continue
        fi
        if [[ $kind == shared-lib ]]; then
            user=$(awk -F'\t' -v n="$name" '$11 == n { print $8 }' "$manifest")
            (cd "$CORPUS" && LD_LIBRARY_PATH="$WORK/lib" timeout 10 "./$user" >"$WORK/stdout" 2>/dev/null) && rc=0 || rc=$?
            ex=0
            exp=expected/shared_user.stdout
        else
            (cd "$CORPUS" && LD_LIBRARY_PATH="$CORPUS" timeout 10 "$out" >"$WORK/stdout" 2>/dev/null) && rc=0 || rc=$?
        fi
        rm -f "$out"
        if [[ $rc == "$ex" ]] && { [[ $exp == - ]] || cmp -s "$WORK/stdout" "$CORPUS/$exp"; }; then
            ok=$((ok + 1))
        else
            echo "$tool: $name: behaves differently (exit $rc)" >>"$WORK/failures"
        fi
    done < <(cat "$manifest")
    echo "$ok $total"
}
: >"$WORK/failures"
read -r r_ok total < <(corpus_ok rivet)
read -r b_ok _ < <(corpus_ok bolt)
echo "| binaries | Rivet | BOLT |"
echo "|---|---|---|"
echo "| corpus (C/C++, gcc and clang, -O0/-O2/-O3, PIE and not, a shared library) | $r_ok / $total | $b_ok / $total |"
real_ok() { # tool name checker -> ok|failed
    local out="$WORK/real.$1"
    rm -f "$out"
    set_cmd "$1" "${REAL[$2]}" "$out" 1
    "${CMD[@]}" >/dev/null 2>&1 || { echo "rewrite failed"; return; }
    case $3 in
        lua) scripts/check-lua.sh "$out" "${REAL[$2]}" >/dev/null 2>&1 && echo ok || echo "scripts differ" ;;
        sqlite) scripts/check-sqlite.sh "$out" --reference "${REAL[$2]}" >/dev/null 2>&1 && echo ok || echo "results differ" ;;
    esac
}
for name in lua-gcc lua-clang sqlite3-gcc sqlite3-clang; do
    checker=lua
    [[ $name == sqlite3* ]] && checker=sqlite
    echo "| $name ($checker workload) | $(real_ok rivet "$name" "$checker") | $(real_ok bolt "$name" "$checker") |"
done
if [[ -s $WORK/failures ]]; then
    echo
    echo "Failures:"
    echo
    sed 's/^/- /' "$WORK/failures"
fi
