#!/usr/bin/env bash
# check-openssl.sh -- prove that (rewritten) OpenSSL libraries behave like the originals:
# OpenSSL's own test suite (`make test`: test/run_tests.pl over test/recipes, 257 test files
# and 3,410 subtests in 3.0.20, 10 files skipped by this configuration: FIPS, RC5, ACVP and the
# external suites) run in a copy of scripts/build-real-programs.sh's OpenSSL build tree whose
# libcrypto.so.3 and libssl.so.3 are replaced by the given ones. The `openssl` app and the test programs linked against the shared
# libraries (107 of 248; the others link libcrypto.a to reach internal functions) load them
# from the tree (util/wrap.pl sets LD_LIBRARY_PATH), so every recipe's `openssl` commands and
# those programs run the libraries under test. The whole suite took 20 to 38 minutes of wall
# time on a shared 2-core machine (about 6 minutes of CPU).
#
# The copy keeps the tree's objects and timestamps, and the replaced libraries get the
# originals' mtimes, so `make test` finds everything up to date and rebuilds nothing (the
# script checks that no library or program was relinked). Tests run HARNESS_JOBS at a time
# (default: the number of cores), under timeout.
#
# Prints "openssl-tests: N of M test files passed (S subtests, K files skipped, T s)"; exit 0
# when all M passed (skipped files are OpenSSL's own skips, the same for every library), 1
# otherwise (the failing files on stderr; the harness output kept in a dir under /tmp named
# on stderr), 2 on bad usage.
#
# Usage: scripts/check-openssl.sh [--libcrypto PATH] [--libssl PATH] [TEST...]
#   TEST: OpenSSL's test names (test_evp, test_x509, ...; `make test TESTS=...` syntax, so
#         -test_fuzz excludes one); none: the whole suite, as `make test`
# Env:   OPENSSL_TREE: a build tree to use instead of build-real-programs.sh's
#        HARNESS_JOBS (default nproc), OPENSSL_TEST_TIMEOUT seconds (default 3600)
# Instrumented libraries work too: each writes its profile where `rivet instrument` said.
set -euo pipefail
usage() { echo "usage: scripts/check-openssl.sh [--libcrypto PATH] [--libssl PATH] [TEST...]" >&2; exit 2; }
log() { printf 'check-openssl: %s\n' "$*" >&2; }
die() { printf 'check-openssl: error: %s\n' "$*" >&2; exit 1; }
LIBCRYPTO="" LIBSSL=""
TESTS=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --libcrypto) [[ $# -ge 2 && -f $2 ]] || usage; LIBCRYPTO="$(readlink -f "$2")"; shift 2 ;;
        --libssl) [[ $# -ge 2 && -f $2 ]] || usage; LIBSSL="$(readlink -f "$2")"; shift 2 ;;
        --help | -h) usage ;;
        *) [[ $1 =~ ^-?test_[a-z0-9_]+$ ]] || usage; TESTS+=("$1"); shift ;;
    esac
done
command -v perl >/dev/null || die "perl missing (apt-get install perl)"
command -v make >/dev/null || die "make missing (apt-get install make)"
TIMEOUT="${OPENSSL_TEST_TIMEOUT:-3600}"
JOBS="${HARNESS_JOBS:-$(nproc)}"
if [[ -z ${OPENSSL_TREE:-} ]]; then
    OPENSSL_TREE=$("$(dirname "$0")/build-real-programs.sh" openssl 2>/dev/null | awk '$1 == "openssl-tree" { print $2 }')
    [[ -n $OPENSSL_TREE ]] || die "scripts/build-real-programs.sh openssl built no OpenSSL tree"
fi
[[ -f $OPENSSL_TREE/Makefile && -f $OPENSSL_TREE/libcrypto.so.3 ]] || die "no OpenSSL build tree at $OPENSSL_TREE"

TMP="$(mktemp -d /tmp/rivet-check-openssl.XXXXXX)"
trap 'rm -rf -- "$TMP"' EXIT
TREE=$TMP/tree
cp -a -- "$OPENSSL_TREE" "$TREE"
# Two generated Perl files name the tree by its absolute path: the copy's own (same mtimes).
for f in configdata.pm util/wrap.pl; do
    stamp="$(stat -c %y "$TREE/$f")"
    sed -i "s|$OPENSSL_TREE|$TREE|g" "$TREE/$f"
    touch -d "$stamp" "$TREE/$f"
done
replace() { # library-name new-file
    [[ -n $2 ]] || return 0
    cp --remove-destination -- "$2" "$TREE/$1"
    chmod 755 "$TREE/$1"
    touch -r "$OPENSSL_TREE/$1" "$TREE/$1"
}
replace libcrypto.so.3 "$LIBCRYPTO"
replace libssl.so.3 "$LIBSSL"
# What the tests must load: the replaced files, byte for byte, after make ran.
sums() { sha256sum "$TREE/libcrypto.so.3" "$TREE/libssl.so.3" "$TREE/apps/openssl" "$TREE/test/evp_test" | awk '{ print $1 }'; }
before=$(sums)

start=$(date +%s)
rc=0
(cd "$TREE" && HARNESS_JOBS=$JOBS timeout -k 30 "$TIMEOUT" make test ${TESTS[@]+TESTS="${TESTS[*]}"}) \
    >"$TMP/test.out" 2>&1 || rc=$?
secs=$(($(date +%s) - start))
[[ $(sums) == "$before" ]] || die "make test rebuilt the libraries or programs of the copied tree (see $TREE)"

# TAP::Harness: "Files=N, Tests=M, ..." and "Result: PASS|FAIL"; a failed file is listed in the
# summary report as "NN-test_name.t (Wstat: ... Tests: ... Failed: ...)", or has a line
# "NN-test_name.t ... Dubious" / "... Failed" / "... No subtests run" while the run goes on.
files=$(sed -n 's/^Files=\([0-9]*\), Tests=.*/\1/p' "$TMP/test.out" | tail -n 1)
subtests=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$TMP/test.out" | tail -n 1)
skipped=$(grep -cE '^[0-9]+-[a-z0-9_]+\.t \.+ skipped' "$TMP/test.out" || true)
grep -oE '^[0-9]+-[a-z0-9_]+\.t +\(Wstat' "$TMP/test.out" | awk '{ print $1 }' >"$TMP/failed" || true
grep -E '^[0-9]+-[a-z0-9_]+\.t \.+ *(Dubious|Failed|No subtests)' "$TMP/test.out" |
    awk '{ print $1 }' >>"$TMP/failed" || true
sort -u -o "$TMP/failed" "$TMP/failed"
failed=$(wc -l <"$TMP/failed")
result=$(sed -n 's/^Result: \([A-Z]*\)$/\1/p' "$TMP/test.out" | tail -n 1)
note="$skipped files skipped, ${secs} s"
if [[ -z $files ]]; then # no summary: the harness died or timed out
    files=$(grep -cE '^[0-9]+-[a-z0-9_]+\.t \.+' "$TMP/test.out" || true)
    note+=", no harness summary (make test exit $rc)"
    result=FAIL
fi
passed=$((files - failed))
echo "openssl-tests: $passed of $files test files passed (${subtests:-?} subtests, $note)"
if ((rc == 0 && failed == 0 && files > 0)) && [[ $result == PASS ]]; then
    exit 0
fi
sed 's/^/  failed: /' "$TMP/failed" >&2
KEEP="$(mktemp -d /tmp/rivet-check-openssl-failed.XXXXXX)"
cp -- "$TMP/test.out" "$KEEP/"
log "make test exited $rc, result ${result:-none}; its output is in $KEEP/test.out"
tail -n 40 "$TMP/test.out" >&2
exit 1
