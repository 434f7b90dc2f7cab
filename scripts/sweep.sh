#!/usr/bin/env bash
# sweep.sh: run `rivet inspect --json` over every ELF file of the system and report how it went.
#
# Every regular file under the roots whose first bytes are "\x7fELF" is inspected once (a
# symlink to a file already seen is skipped), two at a time, each under a timeout (120 s for
# files over 50 MB, 30 s otherwise). Each outcome is one of:
#   OK           exit 0 and a JSON summary on stdout
#   ERROR        exit 1 and exactly one stderr line starting "rivet: error:" (a clean refusal)
#   PANIC        stderr mentions "panicked", or exit code 101
#   HANG         killed by the timeout
#   CRASH        killed by a signal (SIGSEGV, SIGABRT of a stack overflow, ...)
#   UNCLEAN      anything else: another exit code, a malformed error, unparsable JSON
# The report (report.md) has the counts, every PANIC/HANG/CRASH/UNCLEAN with a repro command,
# the error messages grouped, the aggregate simple-function and simple-byte percentages, the
# worst files and the slowest ones; results.tsv has one row per file.
#
# Usage:   scripts/sweep.sh [-o OUTDIR] [-j JOBS] [ROOT...]
#          (default OUTDIR target/sweep, JOBS 2, ROOTs /usr/bin /usr/lib/x86_64-linux-gnu
#          /usr/lib/llvm-19/lib; RIVET=path/to/rivet to test another build)
# Needs:   jq, GNU time (/usr/bin/time), coreutils timeout.
# Exit:    0 if no file ended PANIC, HANG, CRASH or UNCLEAN; 1 otherwise; 2 on usage errors.
set -euo pipefail

# --- worker: inspects one file, prints one TSV row (called by xargs below) -------------------
if [[ ${1:-} == __worker ]]; then
    file=$2
    size=$(stat -L -c %s -- "$file" 2>/dev/null) || size=0
    limit=$SWEEP_TIMEOUT_SMALL
    ((size > SWEEP_BIG_BYTES)) && limit=$SWEEP_TIMEOUT_BIG
    tmp=$(mktemp -d "$SWEEP_TMP/w.XXXXXX")
    rc=0
    # time wraps timeout (not the reverse) so that a timeout kills rivet itself; GNU time's
    # peak RSS covers the descendants it waited for, so %M is rivet's.
    /usr/bin/time -o "$tmp/time" -f '%e %M' \
        timeout --kill-after=5 "$limit" "$SWEEP_RIVET" inspect "$file" --json \
        >"$tmp/out" 2>"$tmp/err" || rc=$?
    read -r wall rss < <(tail -n 1 "$tmp/time")
    functions='' simple='' fbytes='' sbytes='' reasons='' message='' ways_in=''
    stderr_lines=$(wc -l <"$tmp/err")
    if ((rc == 124)) || { ((rc == 137)) && awk -v w="$wall" -v l="$limit" 'BEGIN{exit !(w >= l)}'; }; then
        outcome=HANG
        message="no result after ${limit}s"
    elif ((rc == 101)) || grep -q panicked "$tmp/err"; then
        outcome=PANIC
        # "thread 'x' panicked at FILE:LINE:COL:" is followed by the payload on the next line.
        message=$(grep -m1 -A1 panicked "$tmp/err" | tr '\n\t' '  ' || true)
        [[ -n $message ]] || message=$(head -c 300 "$tmp/err" | tr '\n\t' '  ')
    elif ((rc > 128)); then
        outcome=CRASH
        message="killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null || echo '?')): $(head -c 300 "$tmp/err" | tr '\n\t' '  ')"
    elif ((rc == 1)) && ((stderr_lines == 1)) && grep -q '^rivet: error:' "$tmp/err"; then
        outcome=ERROR
        message=$(tr '\t' ' ' <"$tmp/err")
    elif ((rc == 0)) && jq -e 'has("functions")' "$tmp/out" >/dev/null 2>&1; then
        outcome=OK
        IFS=$'\t' read -r functions simple fbytes sbytes reasons ways_in < <(jq -r '[.functions,
            .simple_functions, .function_bytes, .simple_bytes,
            ([.skipped_by_reason | to_entries[] | "\(.key)=\(.value)"] | join(",")
                | if . == "" then "-" else . end),
            (.ways_in | [.interior_branches, .interior_branches_without_relocation,
                .interior_short_branches, .interior_code_addresses,
                .entered_under_forwarding_jump] | map(tostring) | join(","))] | @tsv' \
            "$tmp/out")
        [[ -s $tmp/err ]] && message="stderr: $(head -c 300 "$tmp/err" | tr '\n\t' '  ')"
    else
        outcome=UNCLEAN
        message="exit $rc, $stderr_lines stderr lines: $(head -c 300 "$tmp/err" | tr '\n\t' '  ')"
    fi
    rm -rf -- "$tmp"
    case $outcome in
        PANIC | HANG | CRASH | UNCLEAN) printf '%-7s %s: %s\n' "$outcome" "$file" "$message" >&2 ;;
    esac
    # One printf = one write(2) on an O_APPEND file: rows from parallel workers never interleave.
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$file" "$size" "$outcome" \
        "$rc" "$wall" "$rss" "$functions" "$simple" "$fbytes" "$sbytes" "${reasons:--}" \
        "${message:--}" "${ways_in:--}"
    exit 0
fi

# --- driver -----------------------------------------------------------------------------------
script=$(realpath -- "${BASH_SOURCE[0]}")
repo=$(cd "$(dirname "$script")/.." && pwd)
outdir=$repo/target/sweep
jobs=2
while getopts 'o:j:h' opt; do
    case $opt in
        o) outdir=$OPTARG ;;
        j) jobs=$OPTARG ;;
        h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
roots=("$@")
((${#roots[@]})) || roots=(/usr/bin /usr/lib/x86_64-linux-gnu /usr/lib/llvm-19/lib)

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_packages jq time coreutils
[[ -x /usr/bin/time ]] || { echo "sweep.sh: needs GNU time (apt-get install time)" >&2; exit 2; }

rivet=${RIVET:-$repo/target/release/rivet}
if [[ ! -x $rivet ]]; then
    echo "sweep.sh: building $rivet" >&2
    (cd "$repo" && cargo build --release -p rivet)
fi
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
tmpdir=$(mktemp -d)
trap 'rm -rf -- "$tmpdir"' EXIT
# Others rebuild target/release concurrently: run a private copy so every file sees one build.
rivet_stamp="$(stat -c %y -- "$rivet" | cut -d. -f1)"
cp -- "$rivet" "$tmpdir/rivet"

# Candidate list: regular files first, then symlinks whose target was not seen yet (so a
# file reached both ways keeps its own name). Magic checked by reading 4 bytes in bash.
declare -A seen=()
: >"$tmpdir/files"
export LC_ALL=C
add_candidate() {
    local path=$1 real magic
    real=$(realpath -e -- "$path" 2>/dev/null) || return 0
    [[ -f $real && -r $real && -z ${seen[$real]:-} ]] || return 0
    seen[$real]=1
    IFS= read -r -n 4 -d '' magic <"$real" 2>/dev/null || true
    [[ $magic == $'\x7fELF' ]] || return 0
    printf '%s\t%s\0' "$(stat -c %s -- "$real")" "$path" >>"$tmpdir/files"
}
for type in f l; do
    while IFS= read -r -d '' path; do
        add_candidate "$path"
    done < <(find "${roots[@]}" -type "$type" -print0 | sort -z)
done
total=$(tr -cd '\0' <"$tmpdir/files" | wc -c)
echo "sweep.sh: $total ELF files under ${roots[*]}; $jobs jobs; rivet = $rivet" >&2

# Largest first, so that the long runs do not end up alone at the tail of the schedule.
export SWEEP_RIVET=$tmpdir/rivet SWEEP_TMP=$tmpdir
export SWEEP_BIG_BYTES=$((50 * 1024 * 1024)) SWEEP_TIMEOUT_BIG=120 SWEEP_TIMEOUT_SMALL=30
rows=$tmpdir/rows
: >"$rows"
start=$(date +%s)
sort -z -t $'\t' -k1,1nr "$tmpdir/files" | cut -z -f2- |
    xargs -0 -n 1 -P "$jobs" bash "$script" __worker >>"$rows" ||
    echo "sweep.sh: warning: some workers failed (missing rows are files that vanished?)" >&2
elapsed=$(($(date +%s) - start))

tsv=$outdir/results.tsv
{
    printf 'file\tbytes\toutcome\texit\twall_s\tpeak_rss_kb\tfunctions\tsimple_functions'
    printf '\tfunction_bytes\tsimple_bytes\tskipped_by_reason\tmessage\tways_in\n'
    sort -t $'\t' -k1,1 "$rows"
} >"$tsv"

# --- report -------------------------------------------------------------------------------
report=$outdir/report.md
rivet_rev="$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown), built $rivet_stamp"
awk -F '\t' -v total="$total" -v elapsed="$elapsed" -v roots="${roots[*]}" \
    -v rivet="$rivet" -v rev="$rivet_rev" -v date="$(date -u '+%Y-%m-%d %H:%M UTC')" '
function pct(a, b) { return b > 0 ? sprintf("%.2f", 100 * a / b) : "n/a" }
# Error messages mention the file, addresses and counts: fold them so that alike errors group.
function normalize(msg, file) {
    gsub(/\t/, " ", msg)
    n = index(msg, file)
    while (n > 0) { msg = substr(msg, 1, n - 1) "FILE" substr(msg, n + length(file)); n = index(msg, file) }
    gsub(/0x[0-9a-fA-F]+/, "0x_", msg)
    gsub(/[0-9][0-9][0-9]+/, "N", msg)
    return msg
}
NR == 1 { next }
{
    file = $1; outcome = $3; count[outcome]++
    wall[NR] = $5; rss[NR] = $6; name[NR] = file; rows = NR
    if ($6 > max_rss) { max_rss = $6; max_rss_file = file }
    sum_wall += $5
    if (outcome == "OK") {
        ok_fn += $7; ok_simple += $8; ok_fb += $9; ok_sb += $10
        if ($7 > 0) { worst[++nworst] = file; wfn[nworst] = $7; wsimple[nworst] = $8
                      wfb[nworst] = $9; wsb[nworst] = $10; wreason[nworst] = $11 }
        if ($11 != "-") {
            nr = split($11, parts, ",")
            for (i = 1; i <= nr; i++) { split(parts[i], kv, "="); reason[kv[1]] += kv[2] }
        }
        if ($12 != "-") { oddities[++nodd] = file ": " $12 }
        if ($13 != "-") {
            split($13, w, ",")
            for (i = 1; i <= 5; i++) { ways[i] += w[i]; if (w[i] > 0) ways_files[i]++ }
            if (w[5] > 0) near_entry[++nnear] = sprintf("`%s` (%d)", file, w[5])
        }
    } else if (outcome == "ERROR") {
        key = normalize($12, file); errors[key]++
        if (!(key in example)) example[key] = file
    } else {
        problems[++nprob] = sprintf("- **%s** `%s` (exit %s, %s s, %s KB)\n  - %s\n  - repro: `%s inspect %s --json`", outcome, file, $4, $5, $6, $12, rivet, file)
    }
}
END {
    bad = count["PANIC"] + count["HANG"] + count["CRASH"] + count["UNCLEAN"]
    print "# rivet inspect sweep"
    print ""
    printf "%s, rivet %s (`%s`), roots: %s. %d ELF files in %d s of wall time (sum of per-file times %.0f s).\n\n", date, rev, rivet, roots, total, elapsed, sum_wall
    print "## Outcomes"
    print ""
    print "| outcome | files |"
    print "|---|---:|"
    split("OK ERROR PANIC HANG CRASH UNCLEAN", order, " ")
    for (i = 1; i <= 6; i++) printf "| %s | %d |\n", order[i], count[order[i]]
    printf "| total | %d |\n\n", rows - 1
    print "## Panics, hangs, crashes, unclean exits"
    print ""
    if (nprob == 0) print "None."
    for (i = 1; i <= nprob; i++) print problems[i]
    print ""
    print "## Discovery over the successes"
    print ""
    # %.0f, not %d: %d stops at 2^31 in mawk, and byte sums of corrupt inputs go far beyond.
    printf "- functions: %.0f, simple: %.0f = **%s%%**\n", ok_fn, ok_simple, pct(ok_simple, ok_fn)
    printf "- bytes in functions: %.0f, in simple functions: %.0f = **%s%%**\n", ok_fb, ok_sb, pct(ok_sb, ok_fb)
    printf "- peak RSS: %.0f KB (%s)\n\n", max_rss, max_rss_file
    print "Skipped functions by reason, summed over all files:"
    print ""
    print "| reason | functions |"
    print "|---|---:|"
    cmd = "sort -t \"|\" -k3,3nr"
    for (r in reason) printf "| %s | %d |\n", r, reason[r] | cmd
    close(cmd)
    print ""
    print "Ways into a function other than its entry (what moving some functions and not others"
    print "can break; `rivet_emit::ways_in`), summed over the successes:"
    print ""
    print "| kind | count | files |"
    print "|---|---:|---:|"
    split("branches into another function|of those without a relocation|of those short (rel8)|code addresses into another function|functions entered within 5 bytes of their entry", wname, "|")
    for (i = 1; i <= 5; i++) printf "| %s | %.0f | %d |\n", wname[i], ways[i], ways_files[i]
    if (nnear > 0) {
        print ""
        printf "Files with functions entered within 5 bytes of their entry:"
        for (i = 1; i <= nnear && i <= 30; i++) printf " %s", near_entry[i]
        print (nnear > 30 ? ", ..." : "")
    }
    print ""
    print "## Error messages (clean refusals), grouped"
    print ""
    print "| files | message (FILE = the input; addresses and numbers folded) | example |"
    print "|---:|---|---|"
    cmd = "sort -t \"|\" -k2,2nr"
    for (k in errors) { m = k; gsub(/\|/, "\\|", m); printf "| %d | %s | `%s` |\n", errors[k], m, example[k] | cmd }
    close(cmd)
    print ""
    print "## 20 worst files by simple-function %"
    print ""
    print "| file | functions | simple % | simple-byte % | skipped by reason |"
    print "|---|---:|---:|---:|---|"
    cmd = "sort -t \"|\" -k4,4g -k3,3nr | head -n 20"
    for (i = 1; i <= nworst; i++)
        printf "| `%s` | %d | %s | %s | %s |\n", worst[i], wfn[i], pct(wsimple[i], wfn[i]), pct(wsb[i], wfb[i]), wreason[i] | cmd
    close(cmd)
    print ""
    print "## 10 slowest files"
    print ""
    print "| file | wall s | peak RSS KB |"
    print "|---|---:|---:|"
    cmd = "sort -t \"|\" -k3,3gr | head -n 10"
    for (i = 2; i <= rows; i++) printf "| `%s` | %s | %s |\n", name[i], wall[i], rss[i] | cmd
    close(cmd)
    if (nodd > 0) {
        print ""
        print "## Successes that wrote to stderr"
        print ""
        for (i = 1; i <= nodd; i++) print "- " oddities[i]
    }
    exit (bad > 0 ? 1 : 0)
}' "$tsv" >"$report" || status=$?

echo "sweep.sh: report in $report, rows in $tsv" >&2
sed -n '/^## Outcomes/,/^## Error messages/p' "$report" | sed '$d' >&2
exit "${status:-0}"
