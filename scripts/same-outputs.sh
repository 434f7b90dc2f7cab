#!/usr/bin/env bash
# same-outputs.sh OLD_RIVET NEW_RIVET -- proves a refactoring changed nothing: runs two rivet
# binaries over the x86-64 corpus and a few real programs and compares every result byte for
# byte (stdout, exit status, and the output file where there is one).
#
# Per program: `inspect --dump`, `inspect --json`, `rewrite --layout` identity / reverse /
# shuffle (seeds 1, 2) / shuffle-blocks (seeds 1, 2), `instrument`, and for executables
# `optimize` from a profile with two option sets (the defaults, and llvm-bolt's spellings
# with hfsort and hot/cold splitting), and in place (the input without its relocations).
# Programs built without relocations (the real `-norelocs` ones) have no instrumented run,
# so no profile: their in-place rewrites are what `rewrite identity` / `shuffle-blocks` show. Profiles come from OLD_RIVET's instrumented build run
# once (the corpus programs take no input; the real programs get a short workload) and are
# kept in the work directory, so both binaries read the same profile.
#
# Every command writes its output file to the same path for both binaries (outputs may name
# their own path, e.g. the counter file of an instrumented build), and the result is moved
# aside before the other binary runs.
#
# Prints one line per difference and a summary; exits 1 on any difference.
# Environment: RIVET_CORPUS (corpus directory; default: the newest complete one under
# ~/.cache/rivet/corpus), RIVET_REAL (default ~/.cache/rivet/real), SAME_OUTPUTS_DIR (work
# directory, default /tmp/same-outputs), SAME_OUTPUTS_JOBS (parallel jobs, default 2),
# SAME_OUTPUTS_ONLY (a grep -E pattern selecting programs by name).
set -uo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 OLD_RIVET NEW_RIVET" >&2
    exit 2
fi
OLD="$(readlink -f "$1")"
NEW="$(readlink -f "$2")"
CACHE="${RIVET_CACHE:-$HOME/.cache/rivet}"
REAL="${RIVET_REAL:-$CACHE/real}"
WORK="${SAME_OUTPUTS_DIR:-/tmp/same-outputs}"
JOBS="${SAME_OUTPUTS_JOBS:-2}"
if [ -z "${RIVET_CORPUS:-}" ]; then
    RIVET_CORPUS="$(ls -td "$CACHE"/corpus/*/ 2>/dev/null | while read -r d; do
        [ -f "$d/manifest.tsv" ] && { echo "${d%/}"; break; }
    done)"
fi
CORPUS="$RIVET_CORPUS"
[ -f "$CORPUS/manifest.tsv" ] || { echo "no corpus (run scripts/build-corpus.sh)" >&2; exit 2; }
mkdir -p "$WORK/profiles" "$WORK/results"
rm -f "$WORK"/results/*

# The programs: "name<TAB>path<TAB>kind<TAB>workload" (workload: a shell command, {} = binary).
list_programs() {
    tail -n +2 "$CORPUS/manifest.tsv" | while IFS=$'\t' read -r name kind _ _ _ _ _ path _; do
        printf '%s\t%s\t%s\t%s\n' "$name" "$CORPUS/$path" "$kind" '{}'
    done
    local lua_work="{} -e 'local t={} for i=1,20000 do t[i]=tostring(i*7) end table.sort(t) print(#t, t[1])'"
    local sql_work="printf 'create table t(a,b); insert into t values(1,2),(3,4); select sum(a*b) from t;\n' | {} :memory:"
    for d in "$REAL"/lua5.4-*-fixedseed-gcc "$REAL"/lua5.4-*-fixedseed-gcc-norelocs "$REAL"/lua5.4-*-fixedseed-clang; do
        [ -x "$d/lua" ] && printf '%s\t%s\t%s\t%s\n' "$(basename "$d")" "$d/lua" exe "$lua_work"
    done
    for d in "$REAL"/sqlite3-*-gcc "$REAL"/sqlite3-*-gcc-norelocs; do
        [ -x "$d/sqlite3" ] && printf '%s\t%s\t%s\t%s\n' "$(basename "$d")" "$d/sqlite3" exe "$sql_work"
    done
}

# Runs `$1` (old or new binary) with the remaining arguments in directory $dir, output file
# at $dir/out; records "exit status + stdout + output bytes" in $dir/$tag.
run_one() {
    local which="$1" tag="$2"
    shift 2
    rm -f "$dir/out" "$dir/out.counts"
    (cd "$dir" && timeout 600 "$which" "$@" >"$dir/$tag.stdout" 2>"$dir/$tag.stderr")
    echo "exit $?" >"$dir/$tag.status"
    if [ -e "$dir/out" ]; then mv "$dir/out" "$dir/$tag.file"; else : >"$dir/$tag.file"; fi
}

# Compares old and new on one command; appends "same"/"DIFF" lines to the results.
compare() {
    local key="$1"
    shift
    run_one "$OLD" old "$@"
    run_one "$NEW" new "$@"
    local what=""
    cmp -s "$dir/old.status" "$dir/new.status" || what+=" exit($(cat "$dir/old.status") vs $(cat "$dir/new.status"))"
    cmp -s "$dir/old.stdout" "$dir/new.stdout" || what+=" stdout"
    cmp -s "$dir/old.file" "$dir/new.file" || what+=" output-file"
    local bytes
    bytes=$(($(stat -c %s "$dir/old.file") + $(stat -c %s "$dir/old.stdout")))
    if [ -z "$what" ]; then
        printf 'same\t%s\t%s\t%s\n' "$name" "$key" "$bytes" >>"$results"
    else
        printf 'DIFF\t%s\t%s\t%s\n' "$name" "$key" "$what" >>"$results"
        echo "DIFF $name $key:$what" >&2
    fi
    rm -f "$dir"/old.* "$dir"/new.*
}

# Makes (once) the profile of an executable: OLD's instrumented build run on its workload.
profile_of() {
    local prof="$WORK/profiles/$name"
    if [ ! -s "$prof/counts" ]; then
        mkdir -p "$prof"
        rm -f "$prof/counts"
        "$OLD" instrument "$path" -o "$prof/inst" --profile "$prof/counts" >/dev/null 2>&1 || return 1
        local cmd="${workload//\{\}/$prof/inst}"
        (cd "$prof" && LD_LIBRARY_PATH="$CORPUS" timeout 120 bash -c "$cmd" >/dev/null 2>&1 </dev/null)
        [ -s "$prof/counts" ] || return 1
    fi
    echo "$prof/counts"
}

check_program() {
    local name path kind workload
    IFS=$'\t' read -r name path kind workload <<<"$1"
    local dir="$WORK/slot.$name"
    local results="$WORK/results/$name"
    rm -rf "$dir"
    mkdir -p "$dir"
    compare "inspect --dump" inspect "$path" --dump
    compare "inspect --json" inspect "$path" --json
    for layout in identity reverse; do
        compare "rewrite $layout" rewrite "$path" -o out --layout "$layout"
    done
    for layout in shuffle shuffle-blocks; do
        for seed in 1 2; do
            compare "rewrite $layout seed $seed" rewrite "$path" -o out --layout "$layout" --seed "$seed"
        done
    done
    compare "instrument" instrument "$path" -o out --profile "$dir/inst.counts"
    if [ "$kind" = exe ]; then
        local counts
        if counts="$(profile_of)"; then
            compare "optimize defaults" optimize "$path" -o out --profile "$counts"
            compare "optimize bolt-spellings" optimize "$path" -o out --profile "$counts" \
                -reorder-blocks=ext-tsp -reorder-functions=hfsort -split-functions \
                -split-all-cold=0 -split-eh -dyno-stats -plt=all
            # In place: the same program without its relocations (same build-id, so the
            # profile still applies), as the corpus tests make it.
            if objcopy --remove-relocations='*' "$path" "$dir/norelocs" 2>/dev/null; then
                compare "optimize in place" optimize "$dir/norelocs" -o out --profile "$counts"
            fi
        else
            printf 'noprofile\t%s\toptimize\t0\n' "$name" >>"$results"
        fi
    fi
    rm -rf "$dir"
}

export OLD NEW WORK CORPUS
export -f run_one compare profile_of check_program

list_programs | grep -E "^(${SAME_OUTPUTS_ONLY:-.*})"$'\t' |
    tr '\n' '\0' | xargs -0 -P "$JOBS" -I{} bash -c 'check_program "$1"' _ {}

cat "$WORK"/results/* >"$WORK/summary.tsv" 2>/dev/null
programs=$(cut -f2 "$WORK/summary.tsv" | sort -u | wc -l)
same=$(grep -c '^same' "$WORK/summary.tsv")
diff=$(grep -c '^DIFF' "$WORK/summary.tsv")
noprofile=$(grep -c '^noprofile' "$WORK/summary.tsv")
bytes=$(awk -F'\t' '$1 == "same" { s += $4 } END { print s + 0 }' "$WORK/summary.tsv")
echo "same-outputs: $programs programs, $((same + diff)) commands compared: $same identical ($bytes bytes of stdout and output files), $diff different; $noprofile executables without a profile (optimize not compared)"
echo "same-outputs: old $OLD"
echo "same-outputs: new $NEW"
[ "$diff" -eq 0 ] && [ "$((same + diff))" -gt 0 ]
