#!/usr/bin/env bash
# bench/openssl.sh -- OpenSSL 3.0's libcrypto.so.3 and libssl.so.3 optimized by Rivet and by
# llvm-bolt-19 from one instrumented profile of real use; every pair of libraries checked by
# OpenSSL's own tests; speed as CPU time in interleaved rounds (`rivet bench`) of TLS
# handshakes and of certificate parsing.
#
# The libraries are scripts/build-real-programs.sh's OpenSSL build (Debian's source, upstream
# Configure `linux-x86_64 shared -O2 -g -fno-reorder-blocks-and-partition -Wl,--emit-relocs`);
# every run uses the tree's `openssl` app with LD_LIBRARY_PATH pointing at one directory per
# variant (original/, rivet/, bolt/), each holding both libraries.
#
#  1. Training: `rivet instrument` of both libraries, scripts/openssl-load.sh's training load
#     (TLS 1.3 and 1.2 handshakes with RSA and ECDSA keys, certificate parsing, a request,
#     verification, signatures, a short `speed`); `rivet merge P -o P.fdata --format fdata`
#     of each library's counts for BOLT.
#  2. Optimizing, each optimizer with its defaults for a profile-guided layout, timed (GNU
#     time, median of 3): `rivet optimize LIB --profile P -o OUT` and `llvm-bolt LIB -o OUT
#     -data=P.fdata -reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions
#     -split-all-cold -split-eh -dyno-stats`. When llvm-bolt fails on a library, its exact
#     error is reported and the BOLT variant uses the original of that library.
#  3. Correctness: scripts/check-openssl.sh (OpenSSL's `make test` on a subset, TESTS below)
#     with each variant's libraries; the script stops when Rivet's fail a test the originals
#     pass, and reports BOLT's result as it is.
#  4. Speed: `rivet bench -n ROUNDS --json` (CPU time of everything the load starts, user +
#     system; interleaved rounds; median of per-round ratios with a sign-test interval), `{}`
#     being the variant's libcrypto.so.3, for Rivet / original, BOLT / original, Rivet / BOLT:
#       handshakes: `openssl-load.sh TREE {} handshakes HANDSHAKES`: one `s_server -naccept N`
#         on 127.0.0.1 and N `s_client` processes, one after the other (full TLS 1.3
#         handshakes, X25519 + RSA-PSS 2048); the CPU time includes each client's process
#         start and OpenSSL initialisation, which is library code too.
#       certs: `openssl-load.sh TREE {} certs CERT_COPIES BUNDLE`: 137 test certificates x
#         CERT_COPIES read into a PKCS#7 bundle and printed as text (two processes).
#     Handshakes per CPU second = HANDSHAKES / median CPU time of a run. No thresholds.
#
# Usage: bench/openssl.sh [ROUNDS] > docs/openssl-benchmark.md   (ROUNDS defaults to 10)
# Env:   RIVET=path  a rivet binary (default: cargo build --release -p rivet)
#        RIVET_OPTIONS  more options for rivet optimize, space-separated
#        HANDSHAKES (default 200), CERT_COPIES (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s\n' "bench/openssl: $*" >&2; }
die() { printf '%s\n' "bench/openssl: error: $*" >&2; exit 1; }
REAL_PROGRAMS=openssl # the only build this needs
# shellcheck source=bench/real-programs.sh
source bench/real-programs.sh
command -v jq >/dev/null || die "jq missing (apt-get install jq)"

ROUNDS=${1:-10}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "usage: bench/openssl.sh [ROUNDS]" >&2; exit 2; }
HANDSHAKES=${HANDSHAKES:-200}
CERT_COPIES=${CERT_COPIES:-20}
TREE=${REAL[openssl-tree]:-}
[[ -n $TREE && -f $TREE/libcrypto.so.3 ]] || die "scripts/build-real-programs.sh built no OpenSSL tree"
LIBS=(libcrypto.so.3 libssl.so.3)
TESTS=(test_evp test_evp_extra test_rsa test_ecdsa test_x509 test_verify test_ssl_old test_req test_sslapi)
W=$(mktemp -d /tmp/rivet-openssl-bench.XXXXXX)
trap 'rm -rf -- "$W"' EXIT
mkdir -p "$W/original" "$W/inst" "$W/rivet" "$W/bolt" "$W/profile"
for lib in "${LIBS[@]}"; do cp -- "$TREE/$lib" "$W/original/$lib"; done
LOAD=(bash scripts/openssl-load.sh "$TREE")
start=$(date +%s)

log "training (work dir $W)"
for lib in "${LIBS[@]}"; do
    "$RIVET" instrument "$W/original/$lib" -o "$W/inst/$lib" --profile "$W/profile/$lib" >"$W/instrument.$lib.log" 2>&1 ||
        die "rivet instrument $lib failed: $(tail -n 3 "$W/instrument.$lib.log")"
done
"${LOAD[@]}" "$W/inst" train || die "the training load failed with the instrumented libraries"
for lib in "${LIBS[@]}"; do
    "$RIVET" merge "$W/profile/$lib" -o "$W/profile/$lib.fdata" --format fdata >"$W/merge.log" 2>&1 ||
        die "rivet merge $lib failed: $(tail -n 3 "$W/merge.log")"
done

# timed NAME COMMAND...: COMMAND 3 times under GNU time; prints "seconds megabytes" medians,
# or returns 1 (the log in W/NAME.log) when it fails
timed() {
    local name=$1 i t m
    shift
    for i in 1 2 3; do
        /usr/bin/time -f '%e %M' -o "$W/$name.time.$i" "$@" >"$W/$name.log" 2>&1 || return 1
    done
    t=$(cat "$W/$name".time.* | awk '{ print $1 }' | median)
    m=$(cat "$W/$name".time.* | awk '{ print $2 / 1024 }' | median)
    printf '%s %.0f\n' "$t" "$m"
}
log "optimizing"
declare -A PROC BOLT_ERROR
for lib in "${LIBS[@]}"; do
    # shellcheck disable=SC2086 # RIVET_OPTIONS is a list of words
    PROC[rivet.$lib]=$(timed "rivet.$lib" "$RIVET" optimize "$W/original/$lib" --profile "$W/profile/$lib" \
        -o "$W/rivet/$lib" ${RIVET_OPTIONS:-}) || die "rivet optimize $lib failed: $(tail -n 5 "$W/rivet.$lib.log")"
    if PROC[bolt.$lib]=$(timed "bolt.$lib" "$BOLT" "$W/original/$lib" -o "$W/bolt/$lib" \
        -data="$W/profile/$lib.fdata" "${BOLT_LAYOUT[@]}" -dyno-stats); then
        BOLT_ERROR[$lib]=""
    else
        BOLT_ERROR[$lib]=$(grep -v '^BOLT-INFO' "$W/bolt.$lib.log" | tail -n 5)
        log "llvm-bolt failed on $lib: ${BOLT_ERROR[$lib]}"
        cp -- "$W/original/$lib" "$W/bolt/$lib"
        PROC[bolt.$lib]="failed failed"
    fi
done

log "OpenSSL's tests on each variant (scripts/check-openssl.sh ${TESTS[*]})"
declare -A SUITE_RESULT
for v in original rivet bolt; do
    line=$(OPENSSL_TREE="$TREE" scripts/check-openssl.sh --libcrypto "$W/$v/libcrypto.so.3" \
        --libssl "$W/$v/libssl.so.3" "${TESTS[@]}" 2>"$W/suite.$v.err" | tail -n 1 || true)
    [[ $line =~ ^openssl-tests:\ ([0-9]+)\ of\ ([0-9]+) ]] || { cat "$W/suite.$v.err" >&2; die "check-openssl.sh said '$line'"; }
    SUITE_RESULT[$v]="${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
    log "  $v: ${BASH_REMATCH[1]} of ${BASH_REMATCH[2]} test files passed"
done
read -r orig_passed orig_total <<<"${SUITE_RESULT[original]}"
((orig_total > 0 && orig_passed == orig_total)) || { cat "$W/suite.original.err" >&2; die "the original libraries fail OpenSSL's tests"; }
[[ ${SUITE_RESULT[rivet]} == "${SUITE_RESULT[original]}" ]] ||
    { cat "$W/suite.rivet.err" >&2; die "Rivet's libraries fail tests the originals pass"; }

# pair A B LOAD ARG...: "ratio lo hi confidence a_cpu_s b_cpu_s" of B / A in CPU time
pair() {
    local a=$1 b=$2 what=$3 rc=0
    shift 3
    log "rivet bench $b / $a on $what $* ($ROUNDS rounds)"
    "$RIVET" bench "$W/$a/libcrypto.so.3" "$W/$b/libcrypto.so.3" -n "$ROUNDS" --json -- \
        "${LOAD[@]}" '{}' "$what" "$@" >"$W/bench.$b.$a.$what.json" || rc=$?
    ((rc == 0 || rc == 3)) || die "rivet bench $a $b on $what failed"
    jq -r '"\(.ratio) \(.ci_low) \(.ci_high) \(.coverage) \(.a.median_cpu_s) \(.b.median_cpu_s)"' \
        "$W/bench.$b.$a.$what.json" | tee >(sed "s|^|bench/openssl:   $b / $a on $what: ratio lo hi confidence cpu_a cpu_b = |" >&2)
}
"${LOAD[@]}" "$W/original" bundle "$W/certs.pem" || die "collecting the test certificates failed"
declare -A R
for what in handshakes certs; do
    args=("$HANDSHAKES")
    [[ $what == certs ]] && args=("$CERT_COPIES" "$W/certs.pem")
    R[$what.rivet.original]=$(pair original rivet "$what" "${args[@]}")
    R[$what.bolt.original]=$(pair original bolt "$what" "${args[@]}")
    R[$what.rivet.bolt]=$(pair bolt rivet "$what" "${args[@]}")
done

fmt() { awk '{ printf "%.3f (%.3f..%.3f)", $1, $2, $3 }' <<<"$1"; }
cpu() { awk -v i="$2" '{ printf "%.3f", $i }' <<<"$1"; }
per_cpu_s() { awk -v n="$HANDSHAKES" -v i="$2" '{ printf "%.0f", n / $i }' <<<"$1"; }
conf=$(awk '{ printf "%.0f%%", $4 * 100 }' <<<"${R[handshakes.rivet.original]}")
proc_row() { # variant lib
    read -r t m <<<"${PROC[$1.$2]}"
    if [[ $t == failed ]]; then
        echo "| $1 | $2 | failed | | | |"
    else
        echo "| $1 | $2 | $t s | $m MB | $(stat -c %s "$W/$1/$2") | $(exec_bytes "$W/$1/$2") |"
    fi
}

cat <<EOF
# OpenSSL 3.0: Rivet and llvm-bolt-19 on libcrypto and libssl

$(measured_on)
Reproduce: \`bench/openssl.sh $ROUNDS > docs/openssl-benchmark.md\` (HANDSHAKES=$HANDSHAKES
CERT_COPIES=$CERT_COPIES); $(($(date +%s) - start)) s.

- **Libraries**: $("$TREE/util/shlib_wrap.sh" "$TREE/apps/openssl" version), \`libcrypto.so.3\` and
  \`libssl.so.3\` built by scripts/build-real-programs.sh ($(cat "$TREE/../flags.txt" 2>/dev/null || echo "Configure linux-x86_64 shared")).
- **Profile**: Rivet's instrumentation of both libraries, one run of
  \`scripts/openssl-load.sh TREE LIBDIR train\` (200 TLS handshakes through \`s_server\` /
  \`s_client\` on 127.0.0.1 with RSA and ECDSA keys, TLS 1.3 and 1.2; certificate parsing, a
  request, verification, signatures; \`speed -seconds 1\` of RSA, ECDSA, AES-GCM, SHA-256); the
  same counts as BOLT fdata (\`rivet merge --format fdata\`) for llvm-bolt-19.
- **Options**: \`rivet optimize LIB --profile P -o OUT${RIVET_OPTIONS:+ $RIVET_OPTIONS}\` (its defaults);
  \`llvm-bolt LIB -o OUT -data=P.fdata ${BOLT_LAYOUT[*]} -dyno-stats\`.
- **Measurement**: \`rivet bench -n $ROUNDS\`, CPU time (user + system) of every process a
  load starts, interleaved rounds, median of the per-round ratios B / A with a $conf
  sign-test interval (below 1: B is faster). \`{}\` is the variant's \`libcrypto.so.3\`; its
  directory holds the variant's \`libssl.so.3\` too.
  - *handshakes*: \`scripts/openssl-load.sh TREE {} handshakes $HANDSHAKES\`: \`openssl s_server
    -naccept $HANDSHAKES\` on 127.0.0.1 and $HANDSHAKES \`openssl s_client\` processes, one after
    the other: full TLS 1.3 handshakes (X25519, RSA-PSS with a 2048-bit key). The CPU time
    includes each client's process start and OpenSSL initialisation (loading the libraries,
    the configuration, the providers), which is library work too; handshakes per CPU second
    below divide $HANDSHAKES by the median CPU time of a run of the whole load.
  - *certs*: \`scripts/openssl-load.sh TREE {} certs $CERT_COPIES BUNDLE\`: the readable certificates of
    OpenSSL's test/certs, $CERT_COPIES copies, read into a PKCS#7 bundle (\`crl2pkcs7\`) and
    printed as text (\`pkcs7 -print_certs -text\`).

## OpenSSL's tests

\`scripts/check-openssl.sh ${TESTS[*]}\` (\`make test\` on that subset, in a copy of the
build tree holding the variant's two libraries).

| libraries | test files passed |
|---|---:|
EOF
for v in original rivet bolt; do
    read -r p t <<<"${SUITE_RESULT[$v]}"
    echo "| $v | $p of $t |"
done
cat <<EOF

## Speed (CPU time, $ROUNDS interleaved rounds per pair)

| load | original | Rivet | BOLT | Rivet / original | BOLT / original | Rivet / BOLT |
|---|---:|---:|---:|---:|---:|---:|
| handshakes: CPU s per run | $(cpu "${R[handshakes.rivet.original]}" 5) | $(cpu "${R[handshakes.rivet.original]}" 6) | $(cpu "${R[handshakes.bolt.original]}" 6) | $(fmt "${R[handshakes.rivet.original]}") | $(fmt "${R[handshakes.bolt.original]}") | $(fmt "${R[handshakes.rivet.bolt]}") |
| handshakes per CPU second | $(per_cpu_s "${R[handshakes.rivet.original]}" 5) | $(per_cpu_s "${R[handshakes.rivet.original]}" 6) | $(per_cpu_s "${R[handshakes.bolt.original]}" 6) | | | |
| certs: CPU s per run | $(cpu "${R[certs.rivet.original]}" 5) | $(cpu "${R[certs.rivet.original]}" 6) | $(cpu "${R[certs.bolt.original]}" 6) | $(fmt "${R[certs.rivet.original]}") | $(fmt "${R[certs.bolt.original]}") | $(fmt "${R[certs.rivet.bolt]}") |

(The original's and Rivet's columns are the medians of the Rivet / original pair, BOLT's of
the BOLT / original pair.)

## Processing (median of 3 runs, GNU time)

| optimizer | library | time | peak RSS | file size | executable bytes |
|---|---|---:|---:|---:|---:|
EOF
for lib in "${LIBS[@]}"; do proc_row rivet "$lib"; proc_row bolt "$lib"; done
for lib in "${LIBS[@]}"; do echo "| (original) | $lib | | | $(stat -c %s "$W/original/$lib") | $(exec_bytes "$W/original/$lib") |"; done
for lib in "${LIBS[@]}"; do
    if [[ -n ${BOLT_ERROR[$lib]} ]]; then
        echo
        echo "llvm-bolt failed on $lib (the BOLT variant uses the original $lib):"
        echo
        echo '```'
        echo "${BOLT_ERROR[$lib]}"
        echo '```'
    fi
done
echo
echo "Rivet's summaries:"
echo
echo '```'
for lib in "${LIBS[@]}"; do cat "$W/rivet.$lib.log"; done
echo '```'
echo
echo "llvm-bolt's dyno stats and warnings (first lines of each log):"
echo
echo '```'
for lib in "${LIBS[@]}"; do grep -E 'BOLT-(WARNING|ERROR)|functions' "$W/bolt.$lib.log" | head -n 15 || true; done
echo '```'
