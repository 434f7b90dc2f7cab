#!/usr/bin/env bash
# fuzz.sh: build one fuzz target (fuzz/) and fuzz it for a while.
#
# Targets (fuzz/fuzz_targets/):
#   inspect  (default) parses its input as an ELF file and, when that succeeds, runs discovery
#            and dumps every function; seeds in fuzz/seeds (built by fuzz/make-seeds.sh when
#            missing)
#   fdata    reads BOLT fdata; what it accepts must write and read back unchanged
#   yaml     reads a BOLT YAML profile; the same round trip, plus merging it with itself
#   native   reads Rivet's own profile format (and goes through read_any); the same round trip,
#            plus merging it with itself and with a weight (`rivet merge`'s Merger), and its
#            input read as a merge weight
#   perf_sources  reads Arm's profiling sources in perf script text (BRBE stacks, ETM trace
#            branches, SPE samples) as `rivet aggregate` does, its first byte picking the source
#            (told from the text or named); seeds in fuzz/seeds-perf_sources
#   writers  parses its input as an ELF file and, when discovery accepts it, rewrites it with a
#            layout picked from the input's length and verifies the output as --verify does (a
#            verification failure panics); seeds in fuzz/seeds, like inspect
# The profile targets start from fuzz/seeds-<target> and use fuzz/<target>.dict.
# The corpus grows in fuzz/corpus/<target> (gitignored); findings land in
# fuzz/artifacts/<target>/. libFuzzer runs in fork mode with FUZZ_JOBS workers and keeps
# going after a crash, so one run can find several bugs. Inputs are capped at 64 KiB, one input
# may take at most 10 s (else: a hang) and 2 GB. The build has overflow checks and debug
# assertions on (-a): an arithmetic overflow on untrusted input is a bug even though release
# builds would wrap silently.
#
# At the end it prints the executions done and, for every new finding, its kind, the panic
# message (replayed through the target) and, for `inspect`, what the release `rivet inspect`
# does with it; the whole libFuzzer log is kept in target/fuzz/.
#
# Usage:  scripts/fuzz.sh [SECONDS [TARGET]]     (defaults: 600 inspect)
# Env:    FUZZ_JOBS (default 2), FUZZ_SANITIZER (address|none, default address),
#         FUZZ_TOOLCHAIN (default: nightly when rustup has one, else stable + RUSTC_BOOTSTRAP=1)
# Needs:  cargo-fuzz (`cargo install cargo-fuzz`), gcc/g++ for the inspect seeds.
# Exit:   0 if nothing new was found, 1 if there are new findings, 2 on setup errors.
set -euo pipefail

seconds=${1:-600}
jobs=${FUZZ_JOBS:-2}
sanitizer=${FUZZ_SANITIZER:-address}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fuzz=$repo/fuzz
target=${2:-inspect}
case $target in
    inspect) seeds=$fuzz/seeds ;;
    writers) seeds=$fuzz/seeds dict=inspect ;;
    fdata | yaml | native | perf | perf_sources | counters) seeds=$fuzz/seeds-$target ;;
    *) echo "fuzz.sh: unknown target '$target' (inspect, writers, fdata, yaml, native, perf, perf_sources or counters)" >&2; exit 2 ;;
esac

command -v cargo-fuzz >/dev/null ||
    { echo "fuzz.sh: cargo-fuzz is missing (cargo install cargo-fuzz)" >&2; exit 2; }

# cargo-fuzz passes -Z flags (sanitizers, coverage instrumentation) to rustc: those need a
# nightly compiler, or a stable one told to accept them.
toolchain=${FUZZ_TOOLCHAIN:-}
if [[ -z $toolchain ]]; then
    if rustup run nightly rustc --version >/dev/null 2>&1; then toolchain=nightly; else toolchain=stable; fi
fi
cargo_fuzz=(cargo "+$toolchain" fuzz)
[[ $toolchain == nightly* ]] || export RUSTC_BOOTSTRAP=1

if [[ $target == inspect || $target == writers ]]; then
    [[ -n $(find "$seeds" -type f 2>/dev/null) ]] || "$fuzz/make-seeds.sh" >/dev/null
fi
[[ -n $(find "$seeds" -type f 2>/dev/null) ]] ||
    { echo "fuzz.sh: no seeds in $seeds" >&2; exit 2; }
corpus=$fuzz/corpus/$target
artifacts=$fuzz/artifacts/$target
mkdir -p "$corpus" "$artifacts"

cd "$repo"
build_flags=(--fuzz-dir "$fuzz" --sanitizer "$sanitizer" --debug-assertions)
echo "fuzz.sh: building $target ($toolchain, sanitizer $sanitizer)" >&2
"${cargo_fuzz[@]}" build "${build_flags[@]}" "$target"
binary=$fuzz/target/x86_64-unknown-linux-gnu/release/$target

before=$(mktemp)
trap 'rm -f -- "$before"' EXIT
mkdir -p "$repo/target/fuzz"
log=$repo/target/fuzz/$target-$(date -u +%Y%m%dT%H%M%SZ).log
find "$artifacts" -maxdepth 1 -type f -printf '%f\n' | sort >"$before"

echo "fuzz.sh: fuzzing $target for ${seconds}s with $jobs jobs; log in $log" >&2
# One rayon thread per worker process: FUZZ_JOBS processes already use the cores, and
# discovery's output does not depend on the thread count.
status=0
RAYON_NUM_THREADS=1 "${cargo_fuzz[@]}" run "${build_flags[@]}" "$target" "$corpus" "$seeds" -- \
    -max_len=65536 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -dict="$fuzz/${dict:-$target}.dict" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 \
    -ignore_ooms=1 -print_final_stats=1 -artifact_prefix="$artifacts/" 2>&1 |
    tee "$log" | grep --line-buffered -E '^#[0-9]+:|INFO: (fuzzed|exiting)|ERROR|panicked' >&2 ||
    status=$?

# Fork mode prints "#<execs>: cov: .. ft: .. corp: .. exec/s: .. oom/timeout/crash: a/b/c time: ..".
last=$(grep -E '^#[0-9]+:' "$log" | tail -n 1 || true)
execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
echo
echo "## fuzz.sh summary"
echo
echo "- target \`$target\`, ${seconds}s, $jobs jobs, sanitizer $sanitizer, toolchain $toolchain"
echo "- executions: ${execs:-unknown}"
echo "- last status line: \`${last:-none}\`; libFuzzer exit status $status"
echo "- corpus: $(find "$corpus" -type f | wc -l) inputs in $corpus"

mapfile -t new < <(find "$artifacts" -maxdepth 1 -type f -printf '%f\n' | sort | comm -13 "$before" -)
if ((${#new[@]} == 0)); then
    echo "- new findings: none"
    exit 0
fi
echo "- new findings: ${#new[@]} in $artifacts"
echo
rivet=$repo/target/release/rivet
for name in "${new[@]}"; do
    artifact=$artifacts/$name
    # Replay once through the target to get the panic message (first "panicked" + payload).
    message=$(timeout 30 "$binary" "$artifact" 2>&1 | grep -m1 -A1 panicked | tr '\n' ' ' || true)
    cli='(no release build of rivet)'
    if [[ $target == inspect && -x $rivet ]]; then
        rc=0
        cli_err=$(timeout 30 "$rivet" inspect "$artifact" 2>&1 >/dev/null) || rc=$?
        cli="exit $rc${cli_err:+: $(head -c 300 <<<"$cli_err" | tr '\n' ' ')}"
    elif [[ $target == writers && -x $rivet ]]; then
        rc=0
        out=$(mktemp -u)
        cli_err=$(timeout 60 "$rivet" rewrite "$artifact" -o "$out" --verify 2>&1 >/dev/null) || rc=$?
        rm -f -- "$out"
        cli="exit $rc${cli_err:+: $(head -c 300 <<<"$cli_err" | tr '\n' ' ')}"
    fi
    echo "- \`$name\` ($(stat -c %s -- "$artifact") bytes)"
    echo "  - target: ${message:-no panic on replay (timeout, OOM or flaky?)}"
    if [[ $target == writers ]]; then
        echo "  - release rivet rewrite --verify: $cli"
        echo "  - repro: \`$binary $artifact\` or \`target/release/rivet rewrite $artifact -o OUT --verify\`"
    elif [[ $target == inspect ]]; then
        echo "  - release rivet inspect: $cli"
        echo "  - repro: \`$binary $artifact\` or \`target/release/rivet inspect $artifact\`"
    else
        echo "  - repro: \`$binary $artifact\`"
    fi
done
exit 1
