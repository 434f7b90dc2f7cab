#!/usr/bin/env bash
# check-cppcheck.sh -- prove that a (rewritten) cppcheck binary behaves like the original.
#
#   scripts/check-cppcheck.sh BINARY --reference ORIGINAL
#
# ORIGINAL is the cppcheck or testrunner that scripts/build-real-programs.sh built
# (cppcheck-gcc, cppcheck-testrunner); the source tree it sits in is the working directory
# of every run, where testrunner finds its test files. Both programs look for cfg/ beside
# the path they were started by (argv[0]), so BINARY is started through a link in a
# scratch directory that also links the tree's cfg/.
# What runs (analyses or unit tests) follows ORIGINAL's name: testrunner*, or cppcheck.
#
#   cppcheck:   the analyses below, each run with BINARY and ORIGINAL; their standard output,
#               standard error and exit status must be identical. About 15 s for both.
#               (The tinyxml2 run is most of it.)
#               - every sample of samples/ (one finding or none per file), with --enable=all
#               - externals/tinyxml2/tinyxml2.cpp, --enable=all --inconclusive with the
#                 cppcheck-lib library: C++ classes, templates, 900-odd findings
#               - the samples again as XML (--xml), and with a custom --template
#               - --errorlist and --doc (every checker's messages and documentation)
#               - a file that does not exist, and an unknown option (error paths)
#   testrunner: cppcheck's own unit tests (`testrunner -q`, 4,000-odd tests, a C++ test
#               framework that reports failures through exceptions); output and status
#               must be identical to ORIGINAL's. About 30 s for both.
#
# Prints one line per case that differs (with the first lines of the difference), then a
# verdict; exit 1 if anything differs. Each run is bounded by `timeout` (TIMEOUT, default
# 300 s), so a rewritten binary that loops fails the check instead of hanging it.
set -euo pipefail

usage() {
    echo "usage: $0 BINARY --reference ORIGINAL" >&2
    exit 2
}
[[ $# -eq 3 && $2 == --reference ]] || usage
bin=$(realpath -- "$1")
ref=$(realpath -- "$3")
[[ -x $bin ]] || { echo "check-cppcheck: $bin is not an executable" >&2; exit 2; }
[[ -x $ref ]] || { echo "check-cppcheck: $ref is not an executable" >&2; exit 2; }
tree=$(dirname -- "$ref")
[[ -f $tree/cfg/std.cfg ]] || { echo "check-cppcheck: no cfg/std.cfg beside $ref (not a built source tree)" >&2; exit 2; }
timeout_s=${TIMEOUT:-300}

work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
mkdir "$work/bin"
name=$(basename -- "$ref")
subject=$work/bin/$name # BINARY, started under ORIGINAL's name beside a link to cfg/
ln -s -- "$bin" "$subject"
ln -s -- "$tree/cfg" "$work/bin/cfg"

failures=0
cases=0
# run_case NAME ARGS...: BINARY and ORIGINAL with ARGS in the tree; compares the results.
run_case() {
    local name=$1 who exe
    shift
    cases=$((cases + 1))
    for who in subject reference; do
        if [[ $who == subject ]]; then exe=$subject; else exe=$ref; fi
        set +e
        (cd "$tree" && timeout "$timeout_s" "$exe" "$@" >"$work/$who.out" 2>"$work/$who.err")
        echo "exit $?" >"$work/$who.status"
        set -e
    done
    local part
    for part in status out err; do
        if ! cmp -s "$work/subject.$part" "$work/reference.$part"; then
            failures=$((failures + 1))
            echo "DIFFERS: $name ($part):"
            diff "$work/reference.$part" "$work/subject.$part" | head -n 8 | sed 's/^/    /' || true
            return 0
        fi
    done
}

case $name in
    testrunner*)
        run_case "testrunner -q" -q
        ;;
    *)
        run_case "samples" --enable=all -q samples
        run_case "tinyxml2" --enable=all --inconclusive --library=cppcheck-lib -q \
            externals/tinyxml2/tinyxml2.cpp
        run_case "samples --xml" --enable=all --xml -q samples
        run_case "samples --template" --enable=all -q \
            '--template={file}:{line}:{column}:{severity}:{id}:{message}' samples
        run_case "--errorlist" --errorlist
        run_case "--doc" --doc
        run_case "missing file" -q does/not/exist.cpp
        run_case "unknown option" --no-such-option
        ;;
esac

if ((failures > 0)); then
    echo "check-cppcheck: $failures of $cases cases differ from $ref"
    exit 1
fi
echo "check-cppcheck: all $cases cases identical to $ref"
