#!/usr/bin/env bash
# bench/icache-offsets.sh -- how much of each optimizer's simulated I1 misses is the luck of
# where its hot text lands.
#
# An L1 instruction cache picks a line's set from address bits 6-11, the offset in the page.
# Shared libraries, the PLT and the functions an optimizer leaves in place keep their page
# offsets, so moving the hot text by some cache lines changes which hot lines compete with
# them for a set. bench/optimize.sh measures one such placement per optimizer; on a program
# whose warm code overfills the cache the placement alone can move I1 misses by 2x or more.
# This script measures SHIFTS placements for each optimizer, from the same profile, and
# compares the distributions:
#   Rivet:  rivet optimize BIN --profile P -o OUT --hot-text-offset K*256
#   BOLT:   llvm-bolt BIN -o OUT -data=P.fdata (bench/optimize.sh's options, without
#           -update-debug-sections) -pad-funcs=FIRST:K*256, where FIRST is the first function
#           of BOLT's hot text: its padding moves everything after it by K*256 bytes (the
#           script checks that it did).
# for K = 0 .. SHIFTS-1 (256 bytes = 4 sets; 16 shifts walk the hot text around all 64 sets).
# Each output must print what the original prints on both small inputs under cachegrind (the
# script stops otherwise). Cachegrind: I1 and D1 32 KiB 8-way, LL 1 MiB 16-way, 64 B lines,
# the small inputs of bench/optimize.sh (Lua: 3 training scripts, 3 unseen; SQLite: the
# training SQL file and the unseen one).
#
# Report (markdown on stdout): per program and input, each optimizer's I1 misses at its own
# default placement (K = 0), the mean, median, min and max over the shifts, and the share of
# (Rivet shift, BOLT shift) pairs in which Rivet misses less (0.5 = no difference); then every
# shift's figures.
#
# Usage: bench/icache-offsets.sh [SHIFTS] > docs/icache-offsets.md   (SHIFTS defaults to 16)
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
#        PROGRAMS    "lua sqlite" (default) or a subset
#        RIVET_OPTIONS  more options for rivet optimize, space-separated (say
#                    --cache-set-padding=0 to see the placements without the set balancing)
# Needs: llvm-bolt-19 (apt-get install bolt-19), valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
SHIFTS="${1:-16}"
[[ $SHIFTS =~ ^[1-9][0-9]*$ && $SHIFTS -le 64 ]] || { echo "usage: bench/icache-offsets.sh [SHIFTS (1-64)]" >&2; exit 2; }
PROGRAMS="${PROGRAMS:-lua sqlite}"
STEP=256
log() { printf 'bench/icache-offsets: %s\n' "$*" >&2; }
die() { printf 'bench/icache-offsets: error: %s\n' "$*" >&2; exit 1; }
source bench/real-programs.sh
"$RIVET" optimize --help 2>/dev/null | grep -q -- --hot-text-offset ||
    die "$RIVET has no optimize --hot-text-offset"
WORK="$(mktemp -d)"
trap 'rm -rf -- "$WORK"' EXIT
started=$(date +%s)

# addr_of BIN SYMBOL: the symbol's address (decimal), from nm
addr_of() {
    local hex
    hex=$(nm "$1" | awk -v s="$2" '$3 == s { print $1; exit }')
    [[ -n $hex ]] || die "no $2 in $1"
    echo $((16#$hex))
}
# hot_functions BIN: "address name" of the function symbols in [__hot_start, __hot_end)
hot_functions() {
    local start end hex kind name x
    start=$(addr_of "$1" __hot_start) end=$(addr_of "$1" __hot_end)
    nm -n "$1" | while read -r hex kind name; do
        [[ $kind == [tT] && $name != __hot* ]] || continue
        x=$((16#$hex))
        ((x >= start && x < end)) && echo "$x $name"
    done
    return 0
}
# fdata_name FDATA NAME: the profile's spelling of NAME (BOLT adds /N to local symbols)
fdata_name() {
    awk -v n="$2" '{ for (i = 2; i <= NF; i++) if ($i == n || index($i, n "/") == 1) { print $i; exit } }' "$1"
}
# stats FILE COLUMN -> "mean median min max" of that column
stats() {
    awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ v[NR] = $1; s += $1 }
        END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%.0f %.0f %.0f %.0f\n", s / NR, m, v[1], v[NR] }'
}
# rivet_wins A B COLUMN: share of (row of A, row of B) pairs where A's value is below B's,
# ties counting half
rivet_wins() {
    awk -v c="$3" 'NR == FNR { a[NR] = $c; na = NR; next } { b[++nb] = $c }
        END { for (i = 1; i <= na; i++) for (j = 1; j <= nb; j++) w += (a[i] < b[j]) + 0.5 * (a[i] == b[j])
              printf "%.2f\n", w / (na * nb) }' "$1" "$2"
}

body="$WORK/body.md"
summary="$WORK/summary.md"
: >"$body"
: >"$summary"
for program in $PROGRAMS; do
    select_program "$program"
    log "$program: instrumenting and training"
    train_profile "$program" "$BIN" "$dir"
    bolt_cmd=("$BOLT" "$BIN" -data="$dir/P.fdata" "${BOLT_LAYOUT[@]}" "${BOLT_SKIP[@]}")

    # BOLT's default placement, and the function whose padding shifts the rest of its hot text.
    "${bolt_cmd[@]}" -o "$dir/bolt.0" >"$dir/bolt.0.log" 2>&1 || die "llvm-bolt failed on $program: $(tail -n 1 "$dir/bolt.0.log")"
    hot_functions "$dir/bolt.0" >"$dir/bolt.0.hot"
    [[ $(wc -l <"$dir/bolt.0.hot") -ge 2 ]] || die "$program: BOLT's output has no hot text to shift"
    first=$(awk 'NR == 1 { print $2 }' "$dir/bolt.0.hot")
    pad_name=$(fdata_name "$dir/P.fdata" "$first")
    [[ -n $pad_name ]] || die "$program: $first, first in BOLT's hot text, is not in the profile"
    cg_job "$program" train original "$BIN" "$dir" &
    cg_job "$program" unseen original "$BIN" "$dir"
    wait
    : >"$dir/rivet.txt"
    : >"$dir/bolt.txt"
    for ((k = 0; k < SHIFTS; k++)); do
        shift_bytes=$((k * STEP))
        log "$program: shift $((k + 1))/$SHIFTS ($shift_bytes bytes)"
        # shellcheck disable=SC2086 # RIVET_OPTIONS is a list of words
        "$RIVET" optimize "$BIN" --profile "$dir/P" -o "$dir/rivet.$k" --hot-text-offset "$shift_bytes" \
            ${RIVET_OPTIONS:-} >"$dir/rivet.$k.log" 2>&1 || die "rivet optimize failed on $program: $(tail -n 1 "$dir/rivet.$k.log")"
        if ((k > 0)); then
            "${bolt_cmd[@]}" -o "$dir/bolt.$k" -pad-funcs="$pad_name:$shift_bytes" >"$dir/bolt.$k.log" 2>&1 ||
                die "llvm-bolt failed on $program: $(tail -n 1 "$dir/bolt.$k.log")"
            # Everything after the padded function moved by exactly the shift.
            hot_functions "$dir/bolt.$k" >"$dir/bolt.$k.hot"
            paste -d' ' "$dir/bolt.0.hot" "$dir/bolt.$k.hot" | awk -v d="$shift_bytes" '
                NR > 1 && ($2 != $4 || $3 - $1 != d) { bad = 1 } END { exit bad }' ||
                die "$program: -pad-funcs=$pad_name:$shift_bytes did not shift BOLT's hot text by $shift_bytes bytes"
        fi
        cg_both "$program" "$dir" "$k" "$dir/rivet.$k" "$dir/bolt.$k"
        if ((k == 0)); then
            rivet_page=$(($(addr_of "$dir/rivet.0" __hot_start) % 4096))
            bolt_page=$(($(addr_of "$dir/bolt.0" __hot_start) % 4096))
        fi
        for v in rivet bolt; do
            row="$shift_bytes"
            for input in train unseen; do
                checked_i1 "$program" "$dir" "$input" "$v.$k" "$v shifted by $shift_bytes"
                row+=" $I1"
            done
            echo "$row" >>"$dir/$v.txt"
            rm -f "$dir/$v.$k"
        done
    done

    # ------------------------------------------------------------ report
    {
        echo "## $TITLE"
        echo
        echo "Hot text start, offset in its page at shift 0: Rivet $rivet_page, BOLT $bolt_page."
        echo "BOLT's shifts pad \`$pad_name\`, the first function of its hot text."
        echo
        echo "| input | optimizer | at shift 0 | mean | median | min | max | Rivet below BOLT |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|"
        for input in train unseen; do
            col=2; [[ $input == unseen ]] && col=3
            read -r _ oi1 _ _ < <(cg_sum "$dir" "$input" original)
            wins=$(rivet_wins "$dir/rivet.txt" "$dir/bolt.txt" "$col")
            for v in rivet bolt; do
                read -r mean med min max < <(stats "$dir/$v.txt" "$col")
                zero=$(awk -v c="$col" 'NR == 1 { print $c }' "$dir/$v.txt")
                case $v in rivet) name="Rivet"; w="$wins" ;; bolt) name="BOLT"; w="" ;; esac
                printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$input" "$name" "$(commas "$zero")" "$(commas "$mean")" \
                    "$(commas "$med")" "$(commas "$min")" "$(commas "$max")" "$w"
                echo "| $TITLE | $input | $name | $(commas "$zero") | $(commas "$med") | $(commas "$min")..$(commas "$max") | $w |" >>"$summary"
            done
            echo "| $input | original | $(commas "$oi1") | | | | | |"
        done
        echo
        echo "Every shift (I1 misses):"
        echo
        echo "| shift (bytes) | Rivet train | BOLT train | Rivet unseen | BOLT unseen |"
        echo "|---:|---:|---:|---:|---:|"
        paste -d' ' "$dir/rivet.txt" "$dir/bolt.txt" | while read -r s rt ru _ bt bu; do
            echo "| $s | $(commas "$rt") | $(commas "$bt") | $(commas "$ru") | $(commas "$bu") |"
        done
        echo
    } >>"$body"
done

{
    echo "# Instruction-cache misses over hot text placements: Rivet and llvm-bolt-19"
    echo
    measured_on
    echo "Reproduce: \`bench/icache-offsets.sh $SHIFTS > docs/icache-offsets.md\` (took $(( ($(date +%s) - started + 59) / 60 )) minutes)."
    echo
    echo "Each optimizer's output is measured at $SHIFTS placements of its hot text, $STEP bytes"
    echo "(4 cache sets) apart: Rivet with \`--hot-text-offset\`, BOLT with \`-pad-funcs\` on the first"
    echo "function of its hot text. Same profile for both (Rivet's instrumentation, converted to fdata"
    echo "for BOLT), bench/optimize.sh's options. Cachegrind: I1 32 KiB 8-way, 64 B lines; small inputs"
    echo "of bench/optimize.sh. *Rivet below BOLT*: the share of (Rivet placement, BOLT placement) pairs"
    echo "in which Rivet's output misses less; 0.5 means neither is better."
    echo
    echo "| program | input | optimizer | at shift 0 | median | range | Rivet below BOLT |"
    echo "|---|---|---|---:|---:|---:|---:|"
    cat "$summary"
    echo
    cat "$body"
}
