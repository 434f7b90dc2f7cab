#!/usr/bin/env bash
# check-qemu-bti.sh -- shows that qemu-aarch64 enforces BTI on a binary whose GNU
# property note has the BTI bit: tests/aarch64/bti_landing.S branches with `br` to a
# label that starts with `bti j` only when LANDING is defined. Expected:
#   property + no pad  -> SIGILL (exit 132) with the default CPU and with -cpu max,
#                         runs (exit 0) with -cpu cortex-a72 (no BTI in that CPU);
#   property + pad     -> exit 0;   no property, no pad -> exit 0 (page not guarded).
# And that it enforces PAC: tests/aarch64/pac_mismatch.S authenticates its return
# address with the wrong modifier -> SIGSEGV (exit 139) with the default CPU and
# -cpu max, exit 0 with -cpu cortex-a72 (PAC hints are NOPs there).
# Prints one line per case and exits 1 if any case differs from the expectation.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib.sh
source "$REPO/scripts/lib.sh"
need_packages qemu-user gcc-aarch64-linux-gnu
tmp="$(mktemp -d)"
trap 'rm -rf -- "$tmp"' EXIT
bad=0
check() { # name defines cpu-flag expected-exit [source]
    local name=$1 defs=$2 cpu=$3 want=$4 src=${5:-bti_landing.S} rc=0
    # shellcheck disable=SC2086  # defs and cpu are word lists
    aarch64-linux-gnu-gcc -march=armv8.5-a -nostdlib -static $defs \
        "$REPO/tests/aarch64/$src" -o "$tmp/$name"
    # shellcheck disable=SC2086
    { qemu-aarch64 $cpu "$tmp/$name"; } >/dev/null 2>&1 || rc=$?
    printf '%-22s %-18s exit %-3s (expected %s)\n' "$name" "${cpu:-default cpu}" "$rc" "$want"
    [[ $rc == "$want" ]] || bad=1
}
check property-no-pad "-DPROPERTY" "" 132
check property-no-pad "-DPROPERTY" "-cpu max" 132
check property-no-pad "-DPROPERTY" "-cpu cortex-a72" 0
check property-pad "-DPROPERTY -DLANDING" "-cpu max" 0
check no-property-no-pad "" "-cpu max" 0
check pac-mismatch "" "" 139 pac_mismatch.S
check pac-mismatch "" "-cpu max" 139 pac_mismatch.S
check pac-mismatch "" "-cpu cortex-a72" 0 pac_mismatch.S
exit $bad
