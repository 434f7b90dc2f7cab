#!/usr/bin/env bash
# openssl-load.sh -- real use of OpenSSL's libcrypto.so.3 and libssl.so.3 through the `openssl`
# app of scripts/build-real-programs.sh's OpenSSL tree, with the libraries of another directory
# (originals, instrumented or optimized ones): the training load of the tests and of
# bench/openssl.sh, and the two loads bench/openssl.sh measures.
#
#   handshakes N   `openssl s_server -naccept N` on 127.0.0.1 (an ephemeral port) and N
#                  `openssl s_client` connections to it, one after the other: N full TLS 1.3
#                  handshakes (X25519, RSA-PSS with the tree's 2048-bit RSA test server key),
#                  then the server exits. Every client must complete its handshake.
#   certs K [BUNDLE]  the certificates of the tree's test/certs (137 good ones in 3.0.20, RSA, EC,
#                  Ed25519, DSA, with odd extensions) concatenated K times, read into a PKCS#7
#                  bundle (`crl2pkcs7`) and printed as text (`pkcs7 -print_certs -text`): two
#                  processes parsing, checking and printing 137 x K certificates. BUNDLE is
#                  those certificates once, as `bundle` wrote them (without it, they are
#                  picked from test/certs first, a few hundred runs of `openssl x509`).
#   bundle FILE    writes that bundle to FILE
#   train          what the tests and the benchmark profile: 120 handshakes with TLS 1.3, 40 with
#                  TLS 1.2 (ECDHE-RSA-AES128-GCM-SHA256) and 40 with an ECDSA P-256 key and
#                  P-256 key exchange; `certs 2`; x509 parsing (-text, -fingerprint, -pubkey) of
#                  every test certificate; a certificate request (the issue's `openssl req`),
#                  self-signing, chain verification (`verify`), an RSA and an EC signature with
#                  `dgst`; `speed -seconds 1` of rsa2048, ecdsap256, and (EVP) aes-128-gcm and
#                  sha256 on 1 KiB blocks.
#
# Every command runs under `timeout`, the server's accept loop is bounded by -naccept and by
# timeout, and it listens on 127.0.0.1 only. Output is discarded unless a step fails (then its
# output goes to stderr and the script exits 1).
#
# Usage: scripts/openssl-load.sh TREE LIBDIR LOAD [ARG...]
#   TREE:   the OpenSSL build tree (openssl-tree of build-real-programs.sh)
#   LIBDIR: the directory holding the libcrypto.so.3 and libssl.so.3 to run with; a path to a
#           file in it works too (so `rivet bench` can put `{}`, the library, there)
set -euo pipefail
die() { printf 'openssl-load: error: %s\n' "$*" >&2; exit 1; }
[[ $# -ge 3 ]] || { echo "usage: scripts/openssl-load.sh TREE LIBDIR handshakes N | certs K [BUNDLE] | bundle FILE | train" >&2; exit 2; }
TREE="$(readlink -f "$1")"
LIBDIR="$(readlink -f "$2")"
LOAD=$3
ARG=${4:-}
[[ -f $LIBDIR ]] && LIBDIR="$(dirname "$LIBDIR")"
[[ -x $TREE/apps/openssl ]] || die "no apps/openssl in $TREE"
[[ -f $LIBDIR/libcrypto.so.3 && -f $LIBDIR/libssl.so.3 ]] || die "no libcrypto.so.3 and libssl.so.3 in $LIBDIR"

W="$(mktemp -d /tmp/rivet-openssl-load.XXXXXX)"
SERVER_PID=""
cleanup() {
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then kill "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf -- "$W"
}
trap cleanup EXIT

# The app with LIBDIR's libraries, the tree's providers and a fixed configuration, nothing from
# the caller's environment that OpenSSL reads (exported once: no wrapper process per command).
unset SSL_CERT_FILE SSL_CERT_DIR OPENSSL_CONF_INCLUDE OPENSSL_ia32cap
export LD_LIBRARY_PATH="$LIBDIR" OPENSSL_MODULES="$TREE/providers" OPENSSL_ENGINES="$TREE/engines" \
    OPENSSL_CONF="$TREE/apps/openssl.cnf"
ossl() { timeout 120 "$TREE/apps/openssl" "$@"; }
# step NAME CMD...: CMD with its output in W/NAME.log, shown when it fails
step() {
    local name=$1
    shift
    if ! "$@" >"$W/$name.log" 2>&1 </dev/null; then
        tail -n 30 "$W/$name.log" >&2
        die "$name failed: $*"
    fi
}

# handshakes N [SERVER-OPTIONS... -- CLIENT-OPTIONS...]
handshakes() {
    local n=$1 port="" i server=() client=()
    shift
    while [[ $# -gt 0 && $1 != -- ]]; do server+=("$1"); shift; done
    [[ $# -gt 0 ]] && shift
    client=("$@")
    [[ $n =~ ^[1-9][0-9]*$ && $n -le 100000 ]] || die "handshakes: bad count '$n'"
    [[ ${#server[@]} -gt 0 ]] || server=(-cert "$TREE/apps/server.pem" -key "$TREE/apps/server.pem")
    # -www: the server answers HTTP requests and never reads its stdin (plain s_server stops at
    # its end of file).
    : >"$W/server.out" # (before the server starts: the loop below reads it at once)
    ossl s_server -accept 127.0.0.1:0 -naccept "$n" -www "${server[@]}" </dev/null >"$W/server.out" 2>"$W/server.err" &
    SERVER_PID=$!
    for ((i = 0; i < 200; i++)); do # up to 10 s for the listening line
        port=$(sed -n 's/^ACCEPT 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$W/server.out")
        [[ -n $port ]] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    [[ -n $port ]] || { cat "$W/server.out" "$W/server.err" >&2; die "s_server did not start listening"; }
    # The clients' reports are checked once at the end: the loop itself runs nothing but the
    # clients, so that a benchmark of it measures OpenSSL.
    : >"$W/client.log"
    for ((i = 0; i < n; i++)); do
        if ! ossl s_client -connect "127.0.0.1:$port" -brief "${client[@]}" </dev/null >>"$W/client.log" 2>&1; then
            tail -n 20 "$W/client.log" >&2
            die "s_client connection $((i + 1)) of $n failed"
        fi
    done
    local done_count
    done_count=$(grep -c '^CONNECTION ESTABLISHED' "$W/client.log" || true)
    ((done_count == n)) || { tail -n 20 "$W/client.log" >&2; die "$done_count of $n handshakes completed"; }
    # The server exits after its N-th connection.
    local rc=0
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=""
    ((rc == 0)) || { cat "$W/server.err" >&2; die "s_server exited with $rc"; }
}

# The good certificates of test/certs: those `x509` reads with their public key (some files
# are keys, requests, deliberately broken certificates or keys of algorithms not built in).
good_certs() {
    local f
    : >"$W/certs.list"
    for f in "$TREE"/test/certs/*.pem; do
        grep -q -- '-----BEGIN CERTIFICATE-----' "$f" || continue
        ossl x509 -in "$f" -noout -pubkey >/dev/null 2>&1 && echo "$f" >>"$W/certs.list"
    done
    [[ $(wc -l <"$W/certs.list") -ge 100 ]] || die "fewer than 100 readable certificates in $TREE/test/certs"
}
# bundle FILE: the good certificates, once each, as PEM (what `certs` reads)
bundle() {
    local f
    good_certs
    : >"$W/one.pem"
    while read -r f; do ossl x509 -in "$f" >>"$W/one.pem"; done <"$W/certs.list"
    mv -- "$W/one.pem" "$1"
}
certs() { # K [BUNDLE]
    local k=$1 one=${2:-} i
    [[ $k =~ ^[1-9][0-9]*$ && $k -le 1000 ]] || die "certs: bad count '$k'"
    if [[ -z $one ]]; then
        one=$W/one-bundle.pem
        bundle "$one"
    fi
    [[ -s $one ]] || die "certs: no bundle $one"
    for ((i = 0; i < k; i++)); do cat -- "$one"; done >"$W/bundle.pem"
    step crl2pkcs7 ossl crl2pkcs7 -nocrl -certfile "$W/bundle.pem" -outform DER -out "$W/bundle.p7b"
    step print_certs ossl pkcs7 -inform DER -in "$W/bundle.p7b" -print_certs -text -noout
}

case $LOAD in
    handshakes) handshakes "$ARG" ;;
    certs) certs "$ARG" "${5:-}" ;;
    bundle) [[ -n $ARG ]] || die "bundle: no output file"; bundle "$ARG" ;;
    train)
        handshakes 120
        handshakes 40 -cert "$TREE/apps/server.pem" -key "$TREE/apps/server.pem" -- \
            -tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256
        step eckey ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$W/ec.key"
        step eccert ossl req -x509 -new -key "$W/ec.key" -subj /CN=localhost -days 1 -out "$W/ec.pem"
        handshakes 40 -cert "$W/ec.pem" -key "$W/ec.key" -- -groups P-256
        certs 2
        good_certs
        while read -r f; do
            step x509 ossl x509 -in "$f" -noout -text -fingerprint -sha256 -pubkey
        done <"$W/certs.list"
        step req ossl req -new -key "$TREE/test/certs/ee-key.pem" -config "$TREE/test/test.cnf" \
            -addext subjectAltName=DNS:example.com -out "$W/req.pem"
        step req_verify ossl req -in "$W/req.pem" -verify -noout -text
        step selfsign ossl x509 -req -in "$W/req.pem" -key "$TREE/test/certs/ee-key.pem" -days 1 -out "$W/self.pem"
        step verify ossl verify -CAfile "$TREE/test/certs/root-cert.pem" -untrusted "$TREE/test/certs/ca-cert.pem" \
            "$TREE/test/certs/ee-cert.pem"
        echo "data to sign" >"$W/data"
        step sign_rsa ossl dgst -sha256 -sign "$TREE/test/certs/ee-key.pem" -out "$W/sig.rsa" "$W/data"
        step verify_rsa ossl dgst -sha256 -prverify "$TREE/test/certs/ee-key.pem" -signature "$W/sig.rsa" "$W/data"
        step sign_ec ossl dgst -sha256 -sign "$W/ec.key" -out "$W/sig.ec" "$W/data"
        step verify_ec ossl dgst -sha256 -prverify "$W/ec.key" -signature "$W/sig.ec" "$W/data"
        step speed_pk ossl speed -seconds 1 rsa2048 ecdsap256
        step speed_evp ossl speed -seconds 1 -bytes 1024 -evp aes-128-gcm
        step speed_sha ossl speed -seconds 1 -bytes 1024 -evp sha256
        ;;
    *) die "unknown load '$LOAD' (handshakes N, certs K [BUNDLE], bundle FILE, train)" ;;
esac
