#!/usr/bin/env bash
# check-sqlite.sh -- prove that a (rewritten) SQLite binary behaves like the original.
#
# Two kinds of binary, told apart by probing (`BIN -version` works for the shell only;
# --mode shell|testfixture overrides the probe):
#
# 1. testfixture (SQLite's TCL test harness, built by scripts/build-real-programs.sh as
#    testfixture-gcc / testfixture-clang): runs a subset of SQLite's own TCL test suite,
#    from the Debian source tree's test/ directory, one test file per process, each under
#    `timeout`, NJOBS at a time, each in its own scratch directory. Prints one line per
#    file that is not clean, then "N errors out of M tests" (N counts failed test cases,
#    plus one per file that crashed, timed out or died on a TCL error).
#      without --reference: exit 1 if N > 0.
#      with --reference REF: REF runs the same files (or its cached baseline is reused, see
#      below); the verdict compares, per file, the status, the error count and the names of
#      the failed test cases (the test count too: a file that silently stops early is a
#      difference). Exit 1 if any file differs, i.e. "same failures as the original".
#      A file that differs is run once more with both binaries; if the rerun agrees it is
#      reported as FLAKY and does not fail the check.
#
#    Subsets (second argument, default veryquick):
#      veryquick  upstream's `make tcltest` set (test/veryquick.test: every test file minus
#                 the slow ones and the malloc/IO-error/fault-injection ones): 1110 files,
#                 ~299,000 test cases. The default: the broadest set that finishes in a few
#                 minutes here. Measured on the 2-core dev VM: 2.5-4.5 min for one binary
#                 (reference baseline cached), ~5 min for subject + reference (11+ min when
#                 the machine is busy with other work).
#      extraquick upstream's test/extraquick.test (veryquick minus a few slow files, plus
#                 the fts5 corruption tests): 1111 files, ~3 min for one binary
#      quick      upstream's test/quick.test: adds the malloc/IO-error/fault simulations:
#                 1217 files, ~706,000 test cases, ~8.5 min for one binary
#      full, or any other suite in test/permutations.test (mmap, inmemory_journal, ...:
#                 their -presql/-initialize settings apply); full takes hours
#      smoke      a fixed list of 60 files covering the main subsystems (~15 s for subject
#                 and reference)
#      LIST       a file with one test file per line (paths relative to the source tree,
#                 e.g. test/select1.test, or basenames of files under test/), '#' comments
#      PATTERN,.. comma-separated glob patterns matched against the veryquick file names,
#                 e.g. 'select*,where*,fts5a*'
#    smoke, LIST and PATTERN files run with veryquick's settings.
#
#    Baseline here (unmodified testfixture-gcc and -clang, run as root on the dev VM):
#    veryquick has 109 errors in 15 files, identical for both compilers and across runs:
#      - attach, e_delete, e_update: abort with "Tests do not work when run as root";
#        delete (6), pager1 (2), wal2 (8), temptable (3), tkt3457 (3), backup2 (1),
#        extension01 (1), oserror (2): expect permission errors that root does not get
#      - io (1): io-5.5 expects an 8192-byte page, Debian's 32k max-default-page-size patch
#      - wherelimit (47), wherelimit2 (20), upfrom2 (12): SQLITE_ENABLE_UPDATE_DELETE_LIMIT
#        is in the feature set (as in Debian's build) but the amalgamation's parser was
#        generated without it, so UPDATE/DELETE ... LIMIT/ORDER BY are syntax errors
#    quick adds mallocJ (2) and wherelfault (27), same UPDATE/DELETE ... LIMIT cause: 138.
#    Known flaky: like.test like-14.1 times a LIKE pattern (fails on a busy machine);
#    trans.test trans-9.N.1/9.N.2 (ROLLBACK signature, random data) fails about 1 run in 8
#    with the unmodified testfixture too (measured: 2 of 8 original, 1 of 8 rewritten).
#
#    Reference baselines are cached (they are the slow half) in
#    ${RIVET_CACHE:-$HOME/.cache/rivet}/sqlite-baseline/<sha256 of REF>-<hash of the file
#    list, suite, driver and timeout>.tsv; --fresh ignores and rewrites the cache.
#
# 2. the sqlite3 shell (sqlite3-gcc, sqlite3-clang, ...): runs every bench/sqlite/*.sql with
#    `BIN -bail :memory:` (output and exit status), compared with REF's output when
#    --reference REF is given, else with the stored bench/sqlite/<name>.expected (written by
#    --update-expected from the stock shell). One line per script (ok / DIFF).
#
# Usage:
#   scripts/check-sqlite.sh TESTFIXTURE [SUBSET] [--reference REF] [options]
#   scripts/check-sqlite.sh SQLITE3 [--reference REF | --update-expected]
# Options:
#   --reference REF   compare with this (original) binary
#   --jobs N          parallel test files (default: nproc)
#   --timeout SECS    per test file (default 600; shell scripts: 120)
#   --src DIR         sqlite3 source tree (default: sqlite3-src of build-real-programs.sh)
#   --fresh           do not reuse a cached reference baseline
#   --keep            keep the run directory (logs of every test file) and print its path
#   --mode MODE       shell or testfixture: skip the probe
#   --update-expected (shell only) rewrite bench/sqlite/*.expected with BIN's output
# Environment: RIVET_CACHE (cache root).
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
REPO="$(cd "$(dirname "$SELF")/.." && pwd)"

log() { printf '%s\n' "check-sqlite: $*" >&2; }
die() { printf '%s\n' "check-sqlite: error: $*" >&2; exit 2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# ---------------------------------------------------------------------------
# Internal sub-command, run by xargs in parallel:
#   --run-one TAG BIN SRC OUT TIMEOUT RELPATH
# runs one test file in a scratch dir, through OUT/driver.tcl (written below: the
# file runs as permutations.test's run_tests runs it inside veryquick.test etc., with
# the suite's settings from OUT/suite) and writes OUT/<TAG>/<id>.tsv with one line:
#   relpath status nerr ntest seconds failures(space separated, or -)
# status: ok | fail | tclerror (no summary line, exit != 0) | timeout | crash (signal)
run_one() {
    local tag=$1 bin=$2 src=$3 out=$4 limit=$5 rel=$6
    local id="${rel//\//_}" work logf rc t0 secs summary nerr ntest status failures
    work="$(mktemp -d "$out/work/$tag.$id.XXXXXX")"
    logf="$out/$tag/$id.log"
    t0=$(now)
    rc=0
    # stdin from /dev/null: a few tests read stdin when run interactively
    (cd "$work" && exec timeout -k 10 "$limit" "$bin" "$out/driver.tcl" "$src/test" "$(cat "$out/suite")" "$src/$rel" \
        </dev/null >"$logf" 2>&1) || rc=$?
    secs="$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
    rm -rf -- "$work"
    summary="$(grep -aE '^[0-9]+ errors? out of [0-9]+ tests' "$logf" | tail -n 1 || true)"
    nerr=-1 ntest=-1
    if [[ -n $summary ]]; then
        read -r nerr _ _ _ ntest _ <<<"$summary"
    fi
    failures="$(grep -a '^!Failures on these tests:' "$logf" | tail -n 1 | sed 's/^!Failures on these tests://' |
        tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ' | sed 's/ $//' || true)"
    [[ -n $failures ]] || failures=-
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        status=timeout
    elif [[ $rc -gt 128 ]]; then
        status=crash
    elif [[ -z $summary ]]; then
        if [[ $rc -eq 0 ]]; then status=ok nerr=0 ntest=0; else status=tclerror; fi
    elif [[ $nerr -eq 0 && $rc -eq 0 ]]; then
        status=ok
    else
        status=fail
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$rel" "$status" "$nerr" "$ntest" "$secs" "$failures" >"$out/$tag/$id.tsv"
}
if [[ ${1:-} == --run-one ]]; then
    shift
    run_one "$@"
    exit 0
fi

# ---------------------------------------------------------------------------
# The rest is one brace group: bash parses it completely before running it, so editing
# or checking out this file while a (long) check runs cannot derail that check.
{
bin="" subset="" ref="" jobs="$(nproc)" limit="" src="" fresh=0 keep=0 update=0 mode=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --reference) ref=${2:?--reference needs a binary}; shift 2 ;;
        --jobs) jobs=${2:?}; shift 2 ;;
        --timeout) limit=${2:?}; shift 2 ;;
        --src) src=${2:?}; shift 2 ;;
        --fresh) fresh=1; shift ;;
        --keep) keep=1; shift ;;
        --mode) mode=${2:?--mode needs shell or testfixture}; shift 2 ;;
        --update-expected) update=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *)
            if [[ -z $bin ]]; then
                bin=$1
            elif [[ -z $subset ]]; then
                subset=$1
            else
                die "unexpected argument $1"
            fi
            shift
            ;;
    esac
done
[[ -n $bin ]] || die "usage: check-sqlite.sh BINARY [SUBSET] [--reference REF] (see --help)"
for b in "$bin" ${ref:+"$ref"}; do
    [[ -f $b && -x $b ]] || die "not an executable file: $b"
done
bin="$(readlink -f "$bin")"
if [[ -n $ref ]]; then ref="$(readlink -f "$ref")"; fi
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs wants a positive number"
[[ -z $mode || $mode == shell || $mode == testfixture ]] || die "--mode wants shell or testfixture"

CACHE_ROOT="${RIVET_CACHE:-${HOME:-/tmp}/.cache/rivet}"
RUN="$(mktemp -d "${TMPDIR:-/tmp}/check-sqlite.XXXXXX")"
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    if [[ $keep -eq 1 ]]; then log "run directory kept: $RUN"; else rm -rf -- "$RUN"; fi
}
trap cleanup EXIT

is_shell() { # the sqlite3 shell answers -version; testfixture treats it as a script name
    local out
    out="$(timeout 10 "$1" -version </dev/null 2>/dev/null)" || return 1
    [[ $out =~ ^3\.[0-9]+\.[0-9]+ ]]
}

# ---------------------------------------------------------------------------
# Mode 2: the shell and bench/sqlite/*.sql
if [[ $mode == shell ]] || { [[ -z $mode ]] && is_shell "$bin"; }; then
    [[ -z $subset ]] || die "a subset applies to testfixture only"
    if [[ -n $ref && -z $mode ]] && ! is_shell "$ref"; then die "$ref is not a sqlite3 shell"; fi
    [[ $update -eq 0 || -z $ref ]] || die "--update-expected takes no --reference"
    limit=${limit:-120}
    shopt -s nullglob
    scripts=("$REPO"/bench/sqlite/*.sql)
    [[ ${#scripts[@]} -gt 0 ]] || die "no bench/sqlite/*.sql"
    run_sql() { # bin script outfile: stdout+stderr, then the exit status
        local rc=0
        (cd "$RUN" && timeout -k 5 "$limit" "$1" -bail :memory: <"$2" >"$3" 2>&1) || rc=$?
        printf '[exit status %d]\n' "$rc" >>"$3"
    }
    bad=0
    for s in "${scripts[@]}"; do
        name="$(basename "$s" .sql)"
        t0=$(now)
        run_sql "$bin" "$s" "$RUN/$name.out"
        took="$(elapsed "$t0")"
        if [[ $update -eq 1 ]]; then
            cp -- "$RUN/$name.out" "${s%.sql}.expected"
            printf 'updated %s (%s)\n' "bench/sqlite/$name.expected" "$took"
            continue
        fi
        if [[ -n $ref ]]; then
            run_sql "$ref" "$s" "$RUN/$name.ref"
            want="$RUN/$name.ref"
        else
            want="${s%.sql}.expected"
            [[ -f $want ]] || die "missing $want (run with --update-expected on the stock shell)"
        fi
        if cmp -s "$want" "$RUN/$name.out"; then
            printf 'ok   %s (%s)\n' "bench/sqlite/$name.sql" "$took"
        else
            printf 'DIFF %s (%s)\n' "bench/sqlite/$name.sql" "$took"
            diff -u -a --label expected --label actual "$want" "$RUN/$name.out" | head -n 20 >&2 || true
            bad=$((bad + 1))
        fi
    done
    [[ $update -eq 1 ]] && exit 0
    if [[ $bad -gt 0 ]]; then
        printf '%d of %d scripts differ\n' "$bad" "${#scripts[@]}"
        exit 1
    fi
    printf 'all %d scripts identical\n' "${#scripts[@]}"
    exit 0
fi

# ---------------------------------------------------------------------------
# Mode 1: testfixture and the TCL test suite
[[ $update -eq 0 ]] || die "--update-expected is for the sqlite3 shell"
limit=${limit:-600}
subset=${subset:-veryquick}
if [[ -z $src ]]; then
    log "finding the sqlite3 source tree (scripts/build-real-programs.sh) ..."
    src="$("$REPO/scripts/build-real-programs.sh" | awk '$1 == "sqlite3-src" { print $2 }')"
fi
[[ -f $src/test/tester.tcl ]] || die "no SQLite test suite in '$src' (want \$src/test/tester.tcl)"
src="$(readlink -f "$src")"

# Files of a permutations.test suite, as absolute paths, sorted. Listed by the reference
# binary when there is one (a broken subject must not change the file list).
lister=${ref:-$bin}
suite_files() { # bin suite
    cat >"$RUN/lister.tcl" <<'EOF'
set testdir [lindex $argv 0]
set suite [lindex $argv 1]
set argv0 [file join $testdir lister.tcl]
set argv {}
source [file join $testdir permutations.test]
if {![info exists ::testspec($suite)]} { puts stderr "no such suite: $suite"; exit 1 }
array set O $::testspec($suite)
foreach f [lsort $O(-files)] {
  if {[file pathtype $f] ne "absolute"} { set f [file join $testdir $f] }
  puts [file normalize $f]
}
exit 0
EOF
    mkdir -p "$RUN/lister"
    (cd "$RUN/lister" && timeout 60 "$1" "$RUN/lister.tcl" "$src/test" "$2" </dev/null 2>"$RUN/lister.err") ||
        { cat "$RUN/lister.err" >&2; die "cannot list the files of suite '$2' with $1"; }
}

# A quick cross-section: core SQL, planner, btree/pager/WAL, FTS3/4/5, R-Tree, JSON,
# window functions, sessions, virtual tables, triggers, collation, date/time, printf.
SMOKE="select1 select2 select4 select6 where where2 join join5 insert update delete
expr func func2 printf date in subquery view trigger1 trigger2 fkey1 index autoinc
collate1 like types vacuum analyze btree01 pager1 wal wal2 savepoint tempdb misc1
window1 window4 json101 json102 with1 with2 upsert1 vtab1 alter rowvalue distinct
orderby1 unionall strict1 fts3aa fts4aa fts5aa fts5ab rtree1 rtree2 sessionA
bestindex1 e_select e_expr"

mkdir -p "$RUN/work" "$RUN/subject" "$RUN/reference"
# Each file runs as upstream's suites run it: test/veryquick.test sources
# permutations.test and calls run_tests, which runs every file in a child interpreter
# with ::G(isquick) set (some files then do less), the suite's -presql/-dbconfig/
# -initialize settings, and per-file checks (all files closed, shared-cache setting
# restored); finish_test prints "N errors out of M tests". The driver does the same for
# one file. veryquick, extraquick and quick have no settings besides their file list, so
# for them it inlines run_tests instead of sourcing permutations.test (which takes 0.3 s
# per process: a third of the whole veryquick run). argv0 must sit in test/: test files
# find tester.tcl through it.
cat >"$RUN/driver.tcl" <<'EOF'
set testdir [lindex $argv 0]
set suite [lindex $argv 1]
set file [lindex $argv 2]
set argv0 [file join $testdir veryquick.test]
set argv {}
if {$suite in {veryquick extraquick quick}} {
  source [file join $testdir tester.tcl]
  db close
  set ::G(perm:name) $suite
  set ::G(perm:prefix) ""
  set ::G(isquick) 1
  set ::G(perm:dbconfig) ""
  set ::G(perm:presql) ""
  slave_test_file $file
  unset -nocomplain ::G(perm:sqlite3_args)
  unset ::G(perm:name) ::G(perm:prefix) ::G(perm:dbconfig) ::G(perm:presql)
} else {
  source [file join $testdir permutations.test]
  eval [list run_tests $suite] $::testspec($suite) [list -files [list $file]]
}
finish_test
EOF
case $subset in
    smoke | *,* | *'*'* | *'?'*) echo veryquick >"$RUN/suite" ;;
    *) if [[ -f $subset ]]; then echo veryquick >"$RUN/suite"; else echo "$subset" >"$RUN/suite"; fi ;;
esac
case $subset in
    smoke)
        for n in $SMOKE; do
            found=""
            for d in test ext/fts5/test ext/rtree ext/session; do
                if [[ -f $src/$d/$n.test ]]; then found=$src/$d/$n.test; break; fi
            done
            [[ -n $found ]] || die "smoke subset: no $n.test in $src"
            printf '%s\n' "$found"
        done >"$RUN/files.abs"
        ;;
    *,* | *'*'* | *'?'*)
        suite_files "$lister" veryquick >"$RUN/all.abs"
        IFS=, read -r -a pats <<<"$subset"
        while IFS= read -r f; do
            for p in "${pats[@]}"; do
                # shellcheck disable=SC2053  # $p is a glob on purpose
                if [[ $(basename "$f") == $p || $(basename "$f" .test) == $p ]]; then
                    printf '%s\n' "$f"
                    break
                fi
            done
        done <"$RUN/all.abs" >"$RUN/files.abs"
        ;;
    *)
        if [[ -f $subset ]]; then
            sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$subset" | while IFS= read -r f; do
                if [[ -f $src/$f ]]; then
                    printf '%s/%s\n' "$src" "$f"
                elif [[ -f $src/test/$f ]]; then
                    printf '%s/test/%s\n' "$src" "$f"
                else
                    die "list $subset: no test file $f under $src"
                fi
            done >"$RUN/files.abs"
        else
            suite_files "$lister" "$subset" >"$RUN/files.abs"
        fi
        ;;
esac
# relative to the source tree, sorted, unique
sed "s|^$src/||" "$RUN/files.abs" | sort -u >"$RUN/files"
nfiles="$(wc -l <"$RUN/files")"
[[ $nfiles -gt 0 ]] || die "subset '$subset' selects no test files"
while IFS= read -r f; do
    [[ $f != /* && -f $src/$f ]] || die "test file outside the source tree: $f"
done <"$RUN/files"

# Reference baseline: cached per (reference binary, file list, timeout).
baseline=""
if [[ -n $ref ]]; then
    # key: the reference binary, then the file list, suite, timeout and driver together
    key="$( { sha256sum <"$ref" | cut -c1-16; cat "$RUN/files" "$RUN/suite" "$RUN/driver.tcl" <(echo "$limit") |
        sha256sum | cut -c1-16; } | tr '\n' '-')"
    baseline="$CACHE_ROOT/sqlite-baseline/${key%-}.tsv"
    if [[ $fresh -eq 0 && -s $baseline ]]; then
        log "reusing the reference baseline $baseline"
        ref_cached=1
    else
        ref_cached=0
    fi
fi

# Job list (NUL separated, 6 fields per job), slowest-known files first is not worth the
# bookkeeping: the list is interleaved subject/reference so both finish together.
{
    while IFS= read -r f; do
        printf '%s\0' subject "$bin" "$src" "$RUN" "$limit" "$f"
        if [[ -n $ref && $ref_cached -eq 0 ]]; then
            printf '%s\0' reference "$ref" "$src" "$RUN" "$limit" "$f"
        fi
    done <"$RUN/files"
} >"$RUN/jobs"

what="$nfiles test files ($subset)"
if [[ -n $ref && $ref_cached -eq 0 ]]; then what="$what, subject and reference"; fi
log "running $what, $jobs at a time, timeout ${limit}s each; source $src"
t0=$(now)
xargs -0 -n 6 -P "$jobs" "$SELF" --run-one <"$RUN/jobs"
log "test runs took $(elapsed "$t0")"

collect() { # tag -> sorted results
    local f
    while IFS= read -r f; do
        cat "$RUN/$1/${f//\//_}.tsv" 2>/dev/null || printf '%s\tmissing\t-1\t-1\t0\t-\n' "$f"
    done <"$RUN/files"
}
collect subject >"$RUN/subject.tsv"
if [[ -n $ref ]]; then
    if [[ $ref_cached -eq 1 ]]; then
        cp -- "$baseline" "$RUN/reference.tsv"
    else
        collect reference >"$RUN/reference.tsv"
    fi
fi

# Summary of one result table: N errors out of M tests, plus the unclean files.
summarize() { # tsv label [brief: the summary line only]
    awk -F'\t' -v label="$2" -v brief="${3:-}" '
        { files++ }
        $2 == "ok" || $2 == "fail" { tests += $4; errs += $3 }
        $2 != "ok" && $2 != "fail" { errs++; broken++ }
        $2 != "ok" && !brief { printf "  %-8s %-44s %s errors / %s tests  %s\n", $2, $1, $3, $4, ($6 == "-" ? "" : $6) }
        END {
            printf "%s: %d errors out of %d tests (%d files", label, errs, tests, files
            if (broken) printf ", %d crashed, timed out or aborted", broken
            printf ")\n"
        }' "$1"
}

status=0
if [[ -z $ref ]]; then
    summarize "$RUN/subject.tsv" subject
    errs="$(awk -F'\t' '$2 != "ok" { n++ } END { print n + 0 }' "$RUN/subject.tsv")"
    if [[ $errs -gt 0 ]]; then status=1; fi
    awk -F'\t' '{ e += ($2 == "ok" || $2 == "fail") ? $3 : 1; t += ($2 == "ok" || $2 == "fail") ? $4 : 0 }
        END { printf "%d errors out of %d tests\n", e, t }' "$RUN/subject.tsv"
else
    if [[ $ref_cached -eq 0 ]]; then
        mkdir -p "$(dirname "$baseline")"
        cp -- "$RUN/reference.tsv" "$baseline.tmp.$$"
        mv -f -- "$baseline.tmp.$$" "$baseline"
        log "reference baseline saved: $baseline"
    fi
    summarize "$RUN/reference.tsv" reference
    summarize "$RUN/subject.tsv" subject brief
    # per-file comparison on status, nerr, ntest, failure names (not the time)
    cut -f1-4,6 "$RUN/reference.tsv" >"$RUN/ref.key"
    cut -f1-4,6 "$RUN/subject.tsv" >"$RUN/sub.key"
    paste "$RUN/ref.key" "$RUN/sub.key" | awk -F'\t' '{
        r = $2 " " $3 " " $4 " " $5; s = $7 " " $8 " " $9 " " $10
        if (r != s) print $1 }' >"$RUN/differ"
    ndiff=0 nflaky=0
    if [[ -s $RUN/differ ]]; then
        log "$(wc -l <"$RUN/differ") files differ; running them once more with both binaries"
        mkdir -p "$RUN/subject2" "$RUN/reference2"
        while IFS= read -r f; do
            printf '%s\0' subject2 "$bin" "$src" "$RUN" "$limit" "$f" reference2 "$ref" "$src" "$RUN" "$limit" "$f"
        done <"$RUN/differ" | xargs -0 -n 6 -P "$jobs" "$SELF" --run-one
        while IFS= read -r f; do
            id="${f//\//_}"
            r1="$(awk -F'\t' -v f="$f" '$1 == f { print $2, $3, $4, $5 }' "$RUN/ref.key")"
            s1="$(awk -F'\t' -v f="$f" '$1 == f { print $2, $3, $4, $5 }' "$RUN/sub.key")"
            r2="$(awk -F'\t' '{ print $2, $3, $4, $6 }' "$RUN/reference2/$id.tsv" 2>/dev/null || echo missing)"
            s2="$(awk -F'\t' '{ print $2, $3, $4, $6 }' "$RUN/subject2/$id.tsv" 2>/dev/null || echo missing)"
            # the rerun agrees: one of the first runs was a fluke (e.g. like-14.1 times a LIKE
            # pattern and fails when the machine is busy); the baseline keeps the rerun
            if [[ $r2 == "$s2" ]]; then
                verdict=FLAKY nflaky=$((nflaky + 1))
                if [[ $r1 != "$r2" ]]; then cat "$RUN/reference2/$id.tsv" >>"$RUN/ref-updates.tsv"; fi
            else
                verdict=DIFF ndiff=$((ndiff + 1))
            fi
            printf '%-5s %s (status nerr ntest failures)\n  reference: %s | rerun: %s\n  subject:   %s | rerun: %s\n' \
                "$verdict" "$f" "$r1" "$r2" "$s1" "$s2"
        done <"$RUN/differ"
        if [[ -s $RUN/ref-updates.tsv ]]; then
            awk -F'\t' 'NR == FNR { upd[$1] = $0; next } { print ($1 in upd) ? upd[$1] : $0 }' \
                "$RUN/ref-updates.tsv" "$baseline" >"$baseline.tmp.$$"
            mv -f -- "$baseline.tmp.$$" "$baseline"
            log "reference baseline updated with the reruns of $(wc -l <"$RUN/ref-updates.tsv") flaky files"
        fi
    fi
    awk -F'\t' '{ e += ($2 == "ok" || $2 == "fail") ? $3 : 1; t += ($2 == "ok" || $2 == "fail") ? $4 : 0 }
        END { printf "%d errors out of %d tests\n", e, t }' "$RUN/subject.tsv"
    if [[ $ndiff -gt 0 ]]; then
        printf 'DIFFERENT from the reference: %d of %d files (%d flaky)\n' "$ndiff" "$nfiles" "$nflaky"
        status=1
    else
        printf 'same results as the reference on all %d files (%d flaky)\n' "$nfiles" "$nflaky"
    fi
fi
# slowest files, for tuning the subset
sort -t$'\t' -k5,5 -g -r "$RUN/subject.tsv" | awk -F'\t' 'NR <= 5 { printf "  slowest: %-44s %6.1fs\n", $1, $5 }' >&2
exit "$status"
}
