#!/usr/bin/env bash
# fuzz-counter-headers.sh: runs a real instrumented program on mutated counter files for a
# while, and checks that the runtime never writes outside the counters of a file it accepts,
# never changes a file it refuses, and never crashes the program.
#
# It is the test crates/cli/tests/instrument_hardening.rs
# (mutated_counter_file_headers_never_make_the_program_write_outside_its_counters), which
# normally runs 300 mutations, told to go on for SECONDS (RIVET_HEADER_FUZZ_SECS). Mutations
# (xorshift, seeded from SECONDS): header size and offset fields set to lying or extreme
# values, header bytes replaced, bits flipped anywhere, the file cut or extended, counters set
# to u64::MAX. Every execution: the program exits 0 and prints what the original prints; an
# accepted file (exact header and size) changed only in its counters; a refused one not at all,
# with one line on stderr.
#
# Usage:  scripts/fuzz-counter-headers.sh [SECONDS]     (default 1800)
# Prints: the executions done, how many files were accepted and refused; exit 1 on a finding.
set -euo pipefail

seconds=${1:-1800}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
mkdir -p target/fuzz
log=target/fuzz/counter-headers-$(date -u +%Y%m%dT%H%M%SZ).log
echo "fuzz-counter-headers.sh: ${seconds}s; log in $log" >&2
status=0
RIVET_HEADER_FUZZ_SECS=$seconds cargo test --release -p rivet --test instrument_hardening -- \
    --exact mutated_counter_file_headers_never_make_the_program_write_outside_its_counters \
    --nocapture >"$log" 2>&1 || status=$?
grep -E "^header fuzz:|panicked|assertion" "$log" | tail -n 5 || true
exit $((status == 0 ? 0 : 1))
