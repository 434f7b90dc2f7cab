#!/usr/bin/env bash
# bench/aarch64-variants.sh -- how much of a simulated I1 count is the draw of one layout:
# one AArch64 build of Lua or SQLite (scripts/build-real-aarch64.sh), one profile of the
# benchmark's training input, and several outputs made from it (Rivet with different options,
# llvm-bolt-19 with bench/aarch64.sh's recipe plus options), each simulated on the training and
# the unseen input of bench/aarch64.sh. Everything runs under qemu-aarch64 on this host.
#
# Usage: bench/aarch64-variants.sh BINARY lua|sqlite VARIANTS-FILE
#   VARIANTS-FILE: one variant a line, `LABEL|rivet|OPTIONS` or `LABEL|bolt|OPTIONS` (LABEL a
#   short word; the options are added to `rivet optimize BIN --profile P -o OUT`, or to BOLT's
#   recipe); `#` lines are comments.
# Env: RIVET (default target/release/rivet), PLACEMENTS (8), OUT (a directory to keep the
#   profile, the outputs and simulate's JSON; default a temporary one, removed at the end),
#   SQLITE_SCALE (20, as bench/aarch64.sh).
# Prints one Markdown row per variant: I1 misses, median over placements of the sums over an
# input's runs (min..max), and the fully associative count, for each input. Every output must
# print what the original prints under simulate, or the script stops.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "bench/aarch64-variants: $*" >&2; exit 1; }
[[ $# -eq 3 ]] || die "usage: bench/aarch64-variants.sh BINARY lua|sqlite VARIANTS-FILE"
bin=$(readlink -f "$1") program=$2 variants=$3
[[ -x $bin ]] || die "$1: not an executable"
[[ $program == lua || $program == sqlite ]] || die "$program: the program is lua or sqlite"
[[ -r $variants ]] || die "$variants: cannot read the variants"
RIVET=$(readlink -f "${RIVET:-target/release/rivet}")
[[ -x $RIVET ]] || die "no rivet at $RIVET (cargo build --release -p rivet, or RIVET=...)"
command -v llvm-bolt-19 >/dev/null || die "llvm-bolt-19 is needed (apt-get install bolt-19)"
PLACEMENTS=${PLACEMENTS:-8}
SQLITE_SCALE=${SQLITE_SCALE:-20}
if [[ -n ${OUT:-} ]]; then W=$OUT; mkdir -p "$W"; else
    W=$(mktemp -d); trap 'rm -rf -- "$W"' EXIT; fi
RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max,pauth-impdef=on"
CLEANENV=(env -i PATH=/usr/bin:/bin LC_ALL=C TZ=UTC)
LUA_TRAIN="bench/lua/fannkuch.lua 7;bench/lua/binarytrees.lua 8;bench/lua/strings.lua 3000"
LUA_UNSEEN="bench/lua/nbody.lua 1000;bench/lua/spectralnorm.lua 30;bench/lua/objects.lua 30"
# The SQL files scaled as bench/aarch64.sh scales them.
mkdir -p "$W/sql"
for f in workload unseen; do
    SCALE=$SQLITE_SCALE perl -ne 's/(WHERE (?:i|x|value) < )(\d{4,})/$1 . int($2 \/ $ENV{SCALE})/ge;
        $skip = 1 if /^-- sudoku/; print unless $skip; $skip = 0 if /^SELECT s FROM x WHERE ind = 0;/' \
        "bench/sqlite/$f.sql" >"$W/sql/$f.sql"
done
runs_of() {
    case $program.$1 in
        lua.train) echo "$LUA_TRAIN" ;; lua.unseen) echo "$LUA_UNSEEN" ;;
        sqlite.train) echo "$W/sql/workload.sql" ;; sqlite.unseen) echo "$W/sql/unseen.sql" ;;
    esac
}
exe=$(basename "$bin")

# One profile for every variant (BOLT reads it as fdata).
if [[ ! -s $W/P ]]; then
    echo "bench/aarch64-variants: instrumenting and training" >&2
    "$RIVET" instrument "$bin" -o "$W/inst" --profile "$W/P" >/dev/null
    IFS=';' read -r -a items <<<"$(runs_of train)"
    for item in "${items[@]}"; do
        if [[ $program == lua ]]; then
            read -r script size <<<"$item"
            # shellcheck disable=SC2086 # the runner is words
            "${CLEANENV[@]}" $RUNNER "$W/inst" "$script" "$size" </dev/null >/dev/null
        else
            # shellcheck disable=SC2086
            "${CLEANENV[@]}" $RUNNER "$W/inst" -bail :memory: <"$item" >/dev/null
        fi
    done
    "$RIVET" merge "$W/P" -o "$W/P.fdata" --format fdata >/dev/null
fi

# simulate BIN INPUT LABEL: simulate's JSON of each run in $W/LABEL.INPUT.N.json, what the
# program printed in $W/LABEL.INPUT.N.out.
simulate() {
    local b=$1 input=$2 label=$3 n=0 item script size
    local -a items c
    c=(simulate "$b" --runner "$RUNNER" --placements "$PLACEMENTS" --shift-section .text --json)
    IFS=';' read -r -a items <<<"$(runs_of "$input")"
    for item in "${items[@]}"; do
        if [[ $program == lua ]]; then
            read -r script size <<<"$item"
            "${CLEANENV[@]}" "$RIVET" "${c[@]}" --stdout "$W/$label.$input.$n.out" -- "$script" "$size" >"$W/$label.$input.$n.json"
        else
            "${CLEANENV[@]}" "$RIVET" "${c[@]}" --stdout "$W/$label.$input.$n.out" --stdin "$item" -- -bail :memory: >"$W/$label.$input.$n.json"
        fi
        n=$((n + 1))
    done
}

summary() { # LABEL: one Markdown row
    python3 - "$W" "$1" <<'EOF'
import glob, json, statistics, sys
w, label = sys.argv[1], sys.argv[2]
cells = [label]
for input in ("train", "unseen"):
    runs = [json.load(open(f)) for f in sorted(glob.glob(f"{w}/{label}.{input}.*.json"))]
    per_shift = {}
    for run in runs:
        for p in run["placements"]:
            per_shift[p["shift"]] = per_shift.get(p["shift"], 0) + p["icache_misses"]
    v = sorted(per_shift.values())
    fa = sum(r["icache_misses_fully_associative"] for r in runs)
    cells.append(f"{statistics.median(v):,.0f} ({v[0]:,}..{v[-1]:,})")
    cells.append(f"{fa:,}")
print("| " + " | ".join(cells) + " |", flush=True)
EOF
}

# Binaries in directories of one length (d000, d001, ...), so that every run sees the same
# argv[0] and the same stack below it.
mkdir -p "$W/d000"
cp "$bin" "$W/d000/$exe"
echo "bench/aarch64-variants: the original" >&2
for input in train unseen; do simulate "$W/d000/$exe" "$input" orig; done
echo "| variant | train: I1 median (min..max) | fully assoc. | unseen: I1 median (min..max) | fully assoc. |"
echo "|---|---:|---:|---:|---:|"
summary orig
i=0
while IFS='|' read -r label tool options; do
    [[ -z $label || $label == \#* ]] && continue
    i=$((i + 1)); d=$W/$(printf 'd%03d' "$i")
    [[ $label =~ ^[A-Za-z0-9_-]+$ ]] || die "$label: a label is one word"
    echo "bench/aarch64-variants: $label ($tool $options)" >&2
    mkdir -p "$d"
    read -r -a opts <<<"$options"
    case $tool in
        rivet) "$RIVET" optimize "$bin" --profile "$W/P" -o "$d/$exe" --verify "${opts[@]}" >"$W/$label.log" 2>&1 ;;
        bolt) llvm-bolt-19 "$bin" -o "$d/$exe" "-data=$W/P.fdata" -reorder-blocks=ext-tsp \
            -reorder-functions=cdsort -split-functions -split-all-cold -split-eh -dyno-stats \
            -update-debug-sections "${opts[@]}" >"$W/$label.log" 2>&1 ;;
        *) die "$label: the tool is rivet or bolt, not $tool" ;;
    esac || die "$label: $tool failed: $(tail -n 2 "$W/$label.log")"
    for input in train unseen; do
        simulate "$d/$exe" "$input" "$label"
        for f in "$W/$label.$input".*.out; do
            n=${f%.out}; n=${n##*.}
            cmp -s "$f" "$W/orig.$input.$n.out" || die "$label: run $n of the $input input prints something else than the original"
        done
    done
    summary "$label"
done <"$variants"
