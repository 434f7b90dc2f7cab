//! `rivet bench A B -- COMMAND...`: is B faster than A, on this workload, beyond the noise?
//!
//! **What runs.** COMMAND is run once per measurement with stdin, stdout and stderr
//! redirected away (stderr goes to a scratch file, quoted when a run fails). Every `{}` in
//! COMMAND stands for the binary under test; without any `{}` the binary itself is the program
//! and COMMAND its arguments. A run that does not exit 0 is an error: a benchmark of a failing
//! workload measures nothing.
//!
//! **Emulators.** With `--runner PREFIX`, every run of A and B is `PREFIX... BINARY ARGS`
//! (with `{}`, `{}` stands for a script that runs the binary so: `run_prefix`), e.g. AArch64
//! binaries on an x86-64 host under `qemu-aarch64 -L /usr/aarch64-linux-gnu`. The times are
//! then the emulator's: they compare two binaries under that emulator, which says little about
//! an Arm core's front end (`rivet simulate` counts that deterministically), and cachegrind
//! would count the emulator's own instructions, so `--cachegrind` is refused there. Without
//! `--runner`, a binary this host cannot run by itself (another ISA, no binfmt_misc handler)
//! is refused before anything runs when the command runs it directly, and a failing command
//! with `{}` gets the same hint (such a command may name an emulator itself).
//!
//! **Interleaving.** One warm-up round (A, then B) is discarded. Then each round runs A and B
//! once each, back to back, so both see the same machine state; the order alternates between
//! successive visits of a pair (AB, BA, AB, ...), so neither side always runs first.
//!
//! **Metric.** Every run records wall time and CPU time (user + system, of the child and its
//! waited-for descendants, from `getrusage(RUSAGE_CHILDREN)` around the wait). The statistics
//! use CPU time by default: on a loaded machine the wall time mostly measures the scheduler
//! (here, with other jobs on 2 cores, half of a Lua run's wall time is spent waiting for a CPU),
//! while code layout changes the CPU time. `--metric wall` uses wall time instead (workloads
//! that sleep or wait on I/O).
//!
//! **Statistics, without `--randomize-layout`.** Each round gives a per-pair ratio B/A. The
//! estimate is the median of the ratios; its confidence interval is distribution-free: with `n`
//! ratios sorted, `[r(l), r(n+1-l)]` with the largest `l` such that
//! `1 - 2 P(Binomial(n, 1/2) < l) >= confidence` (the sign-test interval for a median: no
//! assumption on the shape of the noise, only that rounds are independent). 95% needs at
//! least 6 rounds.
//!
//! **Statistics, with `--randomize-layout K`.** Each side is also measured over K layouts of
//! itself: shuffled rewrites by Rivet's own engine, in process (`LayoutStrategy::Shuffle`,
//! `ShuffleBlocks` for binaries without relocations), written to a private temporary
//! directory; variant `i` of A uses seed `SEED + i`, variant `i` of B seed `SEED + K + i`, so
//! two sides that are the same file still get distinct layouts. Each variant also runs with its
//! own environment size (a `RIVET_BENCH_PAD` variable of 0..4095 bytes), which moves the
//! initial stack, another accidental factor. Round `r` uses variant pair `r mod K`. Runs of one
//! variant are not independent samples of "the layout", so the unit of the statistics is the
//! variant pair: each pair's ratio is the median of its rounds' ratios, and the interval is a
//! Student t interval over the K log-ratios (their mean, exponentiated, is the estimate). It is
//! wide for small K, as it must be: layout noise is estimated from K draws. A binary that is
//! already Rivet's output cannot be shuffled again: its variants keep its code layout and vary
//! only the stack offset (the report says so).
//!
//! **Verdict and exit code.** B is faster when the whole interval is below 1, slower when it is
//! above 1, otherwise there is no significant difference. Exit 0: B faster or no significant
//! difference; 3: B significantly slower; 1: error; 2: bad usage.
//!
//! **Cachegrind.** `--cachegrind` also runs A and B once each under
//! `valgrind --tool=cachegrind` with branch simulation and a fixed cache geometry
//! (I1/D1 32 KiB 8-way, LL 8 MiB 16-way, 64-byte lines): deterministic counts, comparable across
//! machines. With `{}` in COMMAND, valgrind follows children and the counts are summed over
//! every process the command starts.
//!
//! Temporary files live in one directory removed at the end, on success or error. A run
//! killed by ctrl-c cannot clean up (no signal handler without unsafe code); the next
//! `rivet bench` removes directories left by processes that no longer exist.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::IsTerminal as _;
use std::io::Write as _;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};
use rivet_discover::{CfiRows, DiscoverError, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_emit::rewrite::{RewriteError, RewriteOptions, rewrite};
use rivet_ir::layout::LayoutStrategy;

use crate::error::{UserError, elf_error, rewrite_error};
use crate::files::map_input;
use crate::run_prefix::{self, RunPrefix, cannot_run_here, needs_runner, shell_words};

/// Exit code when B is significantly slower than A.
const EXIT_SLOWER: u8 = 3;
/// Default number of measured rounds without `--randomize-layout`.
const DEFAULT_ROUNDS: usize = 10;
/// At most this many rounds (the binomial tail is computed in plain f64).
const MAX_ROUNDS: usize = 1000;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// User + system CPU time of the command (robust on a loaded machine).
    Cpu,
    /// Elapsed wall-clock time.
    Wall,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "\
COMMAND: every `{}` stands for the binary under test; without `{}`, the binary is the program \
and COMMAND its arguments. Runs get no stdin and their output is discarded; a run that exits \
non-zero is an error.

Statistics: interleaved rounds (A and B back to back, order alternating), one warm-up round \
discarded; the estimate is the median of per-round ratios B/A with a distribution-free \
(sign-test) interval. With --randomize-layout K, each side runs over K shuffled layouts of \
itself and the interval is a Student t interval over the K per-layout ratios.

Exit status: 0 = B faster or no significant difference, 3 = B significantly slower, \
1 = error, 2 = bad usage.

AArch64 binaries on an x86-64 host: --runner 'qemu-aarch64 -L /usr/aarch64-linux-gnu' runs \
every run as PREFIX BINARY ARGS ({} then stands for a script that does so). The times are \
the emulator's; rivet simulate counts what an Arm core would fetch.")]
pub struct BenchArgs {
    /// The baseline binary.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The binary compared with A (ratios are B/A: below 1 means B is faster).
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Anything between B and `--` (a mistake: the command goes after `--`).
    #[arg(hide = true, value_name = "EXTRA")]
    pub extra: Vec<OsString>,
    /// The workload, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
    /// Measured rounds (one run of A and one of B each) [default: 10, or with
    /// --randomize-layout K: enough for 3 rounds per layout, at least 10].
    #[arg(long, short = 'n', value_name = "N")]
    pub runs: Option<usize>,
    /// Measure each side over K shuffled layouts of itself, so that an accidental layout
    /// effect is not taken for a real difference.
    #[arg(long, value_name = "K")]
    pub randomize_layout: Option<usize>,
    /// First seed of the shuffled layouts.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// What is compared.
    #[arg(long, value_enum, default_value_t = Metric::Cpu)]
    pub metric: Metric,
    /// Confidence level of the interval.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// Start no new round after this many seconds (the minimum for the interval still runs).
    #[arg(long, value_name = "SECONDS")]
    pub max_time: Option<f64>,
    /// Also run A and B once under cachegrind: instruction refs, I1 and LLi misses, branch
    /// mispredicts.
    #[arg(long)]
    pub cachegrind: bool,
    /// Run each binary under this program, e.g. an emulator: 'qemu-aarch64 -L
    /// /usr/aarch64-linux-gnu' for AArch64 binaries on an x86-64 host. Words split as a shell
    /// splits them (quotes, backslashes), without expansions; the binary and its arguments
    /// follow them in every run.
    #[arg(long, value_name = "PREFIX")]
    pub runner: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

// ---------------------------------------------------------------------------------------------
// Statistics (pure).

/// The median of `values` (which it sorts); NaN when empty.
fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// `P(Binomial(n, 1/2) <= k)`.
fn binomial_half_cdf(n: usize, k: usize) -> f64 {
    let mut term = 0.5f64.powi(i32::try_from(n).unwrap_or(i32::MAX));
    let mut sum = 0.0;
    for i in 0..=k.min(n) {
        sum += term;
        // C(n, i+1) = C(n, i) * (n - i) / (i + 1)
        term *= (n - i) as f64 / (i + 1) as f64;
    }
    sum.min(1.0)
}

/// The distribution-free interval of a median: 1-based ranks `(l, n+1-l)` of the sorted sample
/// and the exact coverage, for the largest `l` whose coverage reaches `confidence`.
fn median_interval_ranks(n: usize, confidence: f64) -> Option<(usize, usize, f64)> {
    let mut best = None;
    for l in 1..=n / 2 {
        let coverage = 1.0 - 2.0 * binomial_half_cdf(n, l - 1);
        if coverage >= confidence {
            best = Some((l, n + 1 - l, coverage));
        } else {
            break;
        }
    }
    best
}

/// The fewest rounds whose median interval reaches `confidence`.
fn min_rounds_for(confidence: f64) -> usize {
    (2..=MAX_ROUNDS)
        .find(|&n| median_interval_ranks(n, confidence).is_some())
        .unwrap_or(MAX_ROUNDS)
}

/// `P(|T| < t)` for Student's t with `df` degrees of freedom (Abramowitz & Stegun 26.7.3-4:
/// finite series in cos(theta), theta = atan(t / sqrt(df)), exact for integer df).
fn student_t_central(t: f64, df: usize) -> f64 {
    let theta = (t / (df as f64).sqrt()).atan();
    let (s, c) = theta.sin_cos();
    let c2 = c * c;
    if df % 2 == 1 {
        let mut series = 0.0;
        if df > 1 {
            let mut term = 1.0;
            series = 1.0;
            let mut j = 2;
            while j + 1 < df {
                term *= c2 * j as f64 / (j + 1) as f64;
                series += term;
                j += 2;
            }
        }
        2.0 / std::f64::consts::PI * (theta + s * c * series)
    } else {
        let mut term = 1.0;
        let mut series = 1.0;
        let mut j = 1;
        while j + 1 < df {
            term *= c2 * j as f64 / (j + 1) as f64;
            series += term;
            j += 2;
        }
        s * series
    }
}

/// The two-sided critical value: `t` with `P(|T| < t) = confidence`.
fn student_t_critical(confidence: f64, df: usize) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while student_t_central(hi, df) < confidence && hi < 1e12 {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if student_t_central(mid, df) < confidence {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// The estimate of B/A and its interval.
#[derive(Debug, Clone, PartialEq)]
struct Estimate {
    ratio: f64,
    low: f64,
    high: f64,
    /// The exact coverage of a sign-test interval (>= the confidence asked), or the confidence.
    coverage: f64,
    method: &'static str,
}

/// Median of per-round ratios with the sign-test interval.
fn estimate_rounds(ratios: &[f64], confidence: f64) -> Option<Estimate> {
    let mut sorted = ratios.to_vec();
    let ratio = median(&mut sorted);
    let (l, u, coverage) = median_interval_ranks(sorted.len(), confidence)?;
    Some(Estimate {
        ratio,
        low: sorted[l - 1],
        high: sorted[u - 1],
        coverage,
        method: "median of per-round ratios, distribution-free (sign-test) interval",
    })
}

/// Geometric mean of per-variant-pair ratios with a Student t interval on their logarithms.
fn estimate_variants(pair_ratios: &[f64], confidence: f64) -> Option<Estimate> {
    let k = pair_ratios.len();
    if k < 2 {
        return None;
    }
    let logs: Vec<f64> = pair_ratios.iter().map(|r| r.ln()).collect();
    let mean = logs.iter().sum::<f64>() / k as f64;
    let var = logs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (k - 1) as f64;
    let half = student_t_critical(confidence, k - 1) * (var / k as f64).sqrt();
    Some(Estimate {
        ratio: mean.exp(),
        low: (mean - half).exp(),
        high: (mean + half).exp(),
        coverage: confidence,
        method: "geometric mean of per-layout ratios, Student t interval over layouts",
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Faster,
    Slower,
    NoDifference,
}

impl Verdict {
    fn of(e: &Estimate) -> Verdict {
        if e.high < 1.0 {
            Verdict::Faster
        } else if e.low > 1.0 {
            Verdict::Slower
        } else {
            Verdict::NoDifference
        }
    }
    /// Only a significant slowdown fails, so that a script can gate on "B is not slower".
    fn exit_status(self) -> u8 {
        match self {
            Verdict::Slower => EXIT_SLOWER,
            Verdict::Faster | Verdict::NoDifference => 0,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::NoDifference => "no-difference",
        }
    }
}

/// SplitMix64: the deterministic source of the stack offsets.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------------------------
// Running.

/// A private scratch directory, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn create() -> Result<ScratchDir, UserError> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("rivet-bench-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                UserError::new(format!(
                    "cannot create a directory in {}: {e}",
                    base.display()
                ))
                .hint("set TMPDIR to a writable directory")
            })?;
        remove_stale_dirs(&base, &dir);
        Ok(ScratchDir(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes `rivet-bench-PID-*` directories whose process is gone (left by a ctrl-c).
fn remove_stale_dirs(base: &Path, ours: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(uid) = std::fs::metadata(ours).map(|m| m.uid()) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("rivet-bench-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let mine = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if mine && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// One binary measured: a layout of one side.
#[derive(Debug, Clone)]
struct Variant {
    path: PathBuf,
    /// What `{}` stands for, when not `path`: with `--runner`, the script running `path`
    /// under the prefix.
    run_as: Option<PathBuf>,
    /// The shuffle seed, when this is a shuffled rewrite.
    seed: Option<u64>,
    /// Bytes of `RIVET_BENCH_PAD` in the environment (None: the variable is not set).
    env_pad: Option<usize>,
}

/// A or B.
#[derive(Debug)]
struct Side {
    name: &'static str,
    input: PathBuf,
    variants: Vec<Variant>,
    /// How the variants were made, for the report.
    layouts: String,
}

/// The measurement of one run.
#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: f64,
    cpu: f64,
}

impl Sample {
    fn get(self, metric: Metric) -> f64 {
        match metric {
            Metric::Cpu => self.cpu,
            Metric::Wall => self.wall,
        }
    }
}

/// One measured round: a run of A and a run of B of the same variant pair.
#[derive(Debug, Clone, Copy)]
struct Round {
    pair: usize,
    a_first: bool,
    a: Sample,
    b: Sample,
}

/// The per-round ratios B/A of `metric`, in round order.
fn round_ratios(rounds: &[Round], metric: Metric) -> Vec<f64> {
    rounds
        .iter()
        .map(|r| r.b.get(metric) / r.a.get(metric))
        .collect()
}

/// The estimate from `rounds` and their `ratios`: without layout variants, the sign-test
/// interval over rounds; over `layout_pairs` variant pairs, each pair's median ratio (its
/// rounds are not independent draws of a layout) and the t interval over pairs. None when
/// there are too few rounds or pairs for an interval.
fn estimate_of(
    rounds: &[Round],
    ratios: &[f64],
    layout_pairs: Option<usize>,
    confidence: f64,
) -> Option<Estimate> {
    match layout_pairs {
        None => estimate_rounds(ratios, confidence),
        Some(pairs) => {
            let per_pair: Vec<f64> = (0..pairs)
                .map(|p| {
                    let mut of_pair: Vec<f64> = rounds
                        .iter()
                        .zip(ratios)
                        .filter(|(r, _)| r.pair == p)
                        .map(|(_, &x)| x)
                        .collect();
                    median(&mut of_pair)
                })
                .collect();
            estimate_variants(&per_pair, confidence)
        }
    }
}

/// Replaces every `{}` in `arg` with `binary`.
fn substitute(arg: &OsStr, binary: &Path) -> OsString {
    let bytes = arg.as_bytes();
    let with = binary.as_os_str().as_bytes();
    let mut out = Vec::with_capacity(bytes.len() + with.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"{}") {
            out.extend_from_slice(with);
            i += 2;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

fn has_placeholder(command: &[OsString]) -> bool {
    command
        .iter()
        .any(|a| a.as_bytes().windows(2).any(|w| w == b"{}"))
}

/// The argv that runs `command` with `binary` under test.
fn argv(command: &[OsString], binary: &Path) -> Vec<OsString> {
    if has_placeholder(command) {
        command.iter().map(|a| substitute(a, binary)).collect()
    } else {
        std::iter::once(binary.as_os_str().to_owned())
            .chain(command.iter().cloned())
            .collect()
    }
}

/// CPU time (user + system) of the waited-for children so far, in seconds.
fn children_cpu() -> f64 {
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(u) => {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
            secs(u.user_time()) + secs(u.system_time())
        }
        Err(_) => f64::NAN,
    }
}

/// The last non-empty line of a run's stderr, shortened.
fn last_line(path: &Path) -> Option<String> {
    let text = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&text);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    let mut short: String = line.chars().take(200).collect();
    if short.len() < line.len() {
        short.push_str("...");
    }
    Some(short)
}

struct Runner<'a> {
    command: &'a [OsString],
    prefix: Option<&'a RunPrefix>,
    stderr_path: PathBuf,
}

impl Runner<'_> {
    /// The argv of one run of `variant`.
    fn argv(&self, variant: &Variant) -> Vec<OsString> {
        match (self.prefix, &variant.run_as) {
            (_, Some(script)) => argv(self.command, script),
            (Some(prefix), None) if !has_placeholder(self.command) => {
                prefix.argv(&variant.path, self.command)
            }
            _ => argv(self.command, &variant.path),
        }
    }

    /// The same run as a user types it (the script of `run_as` lives only while rivet runs).
    fn by_hand(&self, variant: &Variant) -> String {
        match (self.prefix, &variant.run_as) {
            (Some(prefix), Some(_)) => {
                let binary = format!("{} {}", prefix.command_line(), variant.path.display());
                shell_words(&argv(self.command, Path::new(&binary)))
            }
            _ => shell_words(&self.argv(variant)),
        }
    }

    fn run(&self, side: &Side, variant: &Variant) -> Result<Sample, UserError> {
        let argv = self.argv(variant);
        let stderr = File::create(&self.stderr_path).map_err(|e| {
            UserError::new(format!("cannot write {}: {e}", self.stderr_path.display()))
        })?;
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if let Some(pad) = variant.env_pad {
            command.env("RIVET_BENCH_PAD", "x".repeat(pad));
        }
        let cpu_before = children_cpu();
        let start = Instant::now();
        let status = command.status();
        let wall = start.elapsed().as_secs_f64();
        let cpu = children_cpu() - cpu_before;
        let status = status.map_err(|e| {
            UserError::new(format!("cannot run {}: {e}", argv[0].to_string_lossy())).hint(
                if has_placeholder(self.command) {
                    "check the program named in COMMAND".to_string()
                } else {
                    format!(
                        "{} must be an executable (or put {{}} in COMMAND where the binary goes)",
                        side.name
                    )
                },
            )
        })?;
        if !status.success() {
            let how = match status.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed by a signal".to_string(),
            };
            let said = last_line(&self.stderr_path)
                .map(|l| format!(": {l}"))
                .unwrap_or_default();
            let hint = match cannot_run_here(&side.input).filter(|_| self.prefix.is_none()) {
                Some(isa) => needs_runner(&side.input, isa).hint.unwrap_or_default(),
                None => format!(
                    "the workload must succeed with both binaries; try it by hand: {}",
                    self.by_hand(variant)
                ),
            };
            return Err(UserError::new(format!(
                "the command with {} ({}) {how}{said}",
                side.name,
                variant.path.display()
            ))
            .hint(hint));
        }
        Ok(Sample { wall, cpu })
    }
}

// ---------------------------------------------------------------------------------------------
// Layout variants.

fn side_without_variants(name: &'static str, input: &Path) -> Side {
    Side {
        name,
        input: input.to_path_buf(),
        variants: vec![Variant {
            path: input.to_path_buf(),
            run_as: None,
            seed: None,
            env_pad: None,
        }],
        layouts: "as is".to_string(),
    }
}

/// K shuffled rewrites of `input` (or, for Rivet's own output, K stack offsets of it).
fn side_with_variants(
    name: &'static str,
    index: u64,
    input: &Path,
    k: usize,
    first_seed: u64,
    dir: &Path,
) -> Result<Side, UserError> {
    let mapped = map_input(input)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(input, &e))?;
    let program =
        discover(&elf, &DiscoverOptions::with_cfi(CfiRows::Keep)).map_err(|e| match e {
            DiscoverError::Elf(e) => elf_error(input, &e),
        })?;
    let seeds: Vec<u64> = (0..k as u64)
        .map(|i| first_seed.wrapping_add(index * k as u64 + i))
        .collect();
    let pad = |seed: u64| Some((splitmix64(seed ^ (index << 32)) % 4096) as usize);
    let mut keep_function_order = false;
    let mut variants = Vec::with_capacity(k);
    for &seed in &seeds {
        let strategy = |blocks_only: bool| {
            if blocks_only {
                LayoutStrategy::ShuffleBlocks { seed }
            } else {
                LayoutStrategy::Shuffle { seed }
            }
        };
        let mut result = rewrite(
            &elf,
            &program,
            &RewriteOptions::strategy(strategy(keep_function_order)),
            None,
        );
        if matches!(result, Err(RewriteError::NeedsRelocations { .. })) && !keep_function_order {
            keep_function_order = true;
            result = rewrite(
                &elf,
                &program,
                &RewriteOptions::strategy(strategy(true)),
                None,
            );
        }
        let output = match result {
            Ok(output) => output,
            Err(RewriteError::AlreadyRewritten) => {
                return Ok(Side {
                    name,
                    input: input.to_path_buf(),
                    variants: seeds
                        .iter()
                        .map(|&seed| Variant {
                            path: input.to_path_buf(),
                            run_as: None,
                            seed: None,
                            env_pad: pad(seed),
                        })
                        .collect(),
                    layouts: format!(
                        "{k} stack offsets; code layout kept (Rivet's output cannot be shuffled again)"
                    ),
                });
            }
            Err(e) => return Err(rewrite_error(input, e)),
        };
        let path = dir.join(format!("{}.{seed}", name.to_lowercase()));
        let write = || -> std::io::Result<()> {
            let mut file = File::create(&path)?;
            file.write_all(&output.image)?;
            file.set_permissions(std::fs::Permissions::from_mode(0o700))
        };
        write().map_err(|e| {
            UserError::new(format!("cannot write {}: {e}", path.display()))
                .hint("set TMPDIR to a directory with free space")
        })?;
        variants.push(Variant {
            path,
            run_as: None,
            seed: Some(seed),
            env_pad: pad(seed),
        });
    }
    let kind = if keep_function_order {
        "shuffle-blocks (no relocations)"
    } else {
        "shuffle"
    };
    Ok(Side {
        name,
        input: input.to_path_buf(),
        variants,
        layouts: format!(
            "{k} layouts, {kind} seeds {}..={}, each with its own stack offset",
            seeds[0],
            seeds[k - 1]
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// Cachegrind.

const CACHEGRIND_EVENTS: [(&str, &str); 5] = [
    ("I   refs:", "i_refs"),
    ("I1  misses:", "i1_misses"),
    ("LLi misses:", "lli_misses"),
    ("Branches:", "branches"),
    ("Mispredicts:", "mispredicts"),
];

fn valgrind_missing() -> UserError {
    UserError::new("--cachegrind needs valgrind, which is not installed")
        .hint("apt-get install valgrind")
}

/// Fails early, before the timed rounds, when valgrind cannot run.
fn check_valgrind() -> Result<(), UserError> {
    match Command::new("valgrind")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(valgrind_missing()),
        Ok(status) => Err(
            UserError::new(format!("valgrind --version failed ({status})"))
                .hint("check the valgrind installation"),
        ),
        Err(e) => Err(UserError::new(format!("cannot run valgrind: {e}"))
            .hint("check the valgrind installation")),
    }
}

/// Runs `binary` once under cachegrind; counts in `CACHEGRIND_EVENTS` order.
fn cachegrind(
    command: &[OsString],
    side: &Side,
    dir: &Path,
) -> Result<[u64; CACHEGRIND_EVENTS.len()], UserError> {
    let log_prefix = format!("cg-{}.", side.name);
    let argv = argv(command, &side.input);
    let mut valgrind = Command::new("valgrind");
    valgrind.args([
        "--tool=cachegrind",
        "--cache-sim=yes",
        "--branch-sim=yes",
        "--cachegrind-out-file=/dev/null",
        "--I1=32768,8,64",
        "--D1=32768,8,64",
        "--LL=8388608,16,64",
    ]);
    if has_placeholder(command) {
        valgrind.arg("--trace-children=yes");
    }
    let status = valgrind
        .arg(format!(
            "--log-file={}",
            dir.join(format!("{log_prefix}%p.log")).display()
        ))
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                valgrind_missing()
            } else {
                UserError::new(format!("cannot run valgrind: {e}"))
                    .hint("check that valgrind runs: valgrind --version")
            }
        })?;
    if !status.success() {
        return Err(UserError::new(format!(
            "the command with {} ({}) failed under cachegrind ({status})",
            side.name,
            side.input.display()
        ))
        .hint(format!(
            "try it by hand: valgrind --tool=cachegrind {}",
            shell_words(&argv)
        )));
    }
    let mut counts = [0u64; CACHEGRIND_EVENTS.len()];
    let mut found = [false; CACHEGRIND_EVENTS.len()];
    let entries = std::fs::read_dir(dir)
        .map_err(|e| UserError::new(format!("cannot read {}: {e}", dir.display())))?;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(&log_prefix) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            // "==PID== I1  misses:      2,376"
            let Some(rest) = line.split_once("== ").map(|(_, r)| r) else {
                continue;
            };
            for (i, (label, _)) in CACHEGRIND_EVENTS.iter().enumerate() {
                if let Some(value) = rest.strip_prefix(label) {
                    let digits: String = value
                        .trim_start()
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == ',')
                        .filter(char::is_ascii_digit)
                        .collect();
                    if let Ok(v) = digits.parse::<u64>() {
                        counts[i] += v;
                        found[i] = true;
                    }
                }
            }
        }
    }
    if found.iter().any(|f| !f) {
        return Err(UserError::new(format!(
            "cachegrind printed no summary for {} ({})",
            side.name,
            side.input.display()
        ))
        .hint("check that `valgrind --tool=cachegrind --branch-sim=yes` works here"));
    }
    Ok(counts)
}

// ---------------------------------------------------------------------------------------------
// The command.

fn check_binary(name: &str, path: &Path) -> Result<PathBuf, UserError> {
    let meta = std::fs::metadata(path).map_err(|e| {
        UserError::new(format!("cannot read {name} ({}): {e}", path.display()))
            .hint("check the path and its permissions")
    })?;
    if !meta.is_file() {
        return Err(
            UserError::new(format!("{name} ({}) is not a file", path.display()))
                .hint("A and B are the two binaries to compare"),
        );
    }
    std::fs::canonicalize(path).map_err(|e| {
        UserError::new(format!("cannot read {name} ({}): {e}", path.display()))
            .hint("check the path and its permissions")
    })
}

fn check_args(args: &BenchArgs) -> Result<(), UserError> {
    let usage = "rivet bench A B [OPTIONS] -- COMMAND...";
    if let Some(first) = args.extra.first() {
        return Err(UserError::new(format!(
            "unexpected argument {:?} after A and B",
            first.to_string_lossy()
        ))
        .hint(format!("the workload goes after `--`: {usage}")));
    }
    if args.command.is_empty() {
        return Err(UserError::new("no command to run").hint(format!(
            "give the workload after `--`, e.g. rivet bench ./app ./app.fast -- input.txt ({{}} stands for the binary): {usage}"
        )));
    }
    if !(args.confidence > 0.5 && args.confidence < 1.0) {
        return Err(UserError::new(format!(
            "--confidence {} is not between 0.5 and 1",
            args.confidence
        ))
        .hint("e.g. --confidence 0.95"));
    }
    if let Some(t) = args.max_time.filter(|t| !(*t > 0.0 && t.is_finite())) {
        return Err(UserError::new(format!(
            "--max-time {t} is not a positive number of seconds"
        ))
        .hint("e.g. --max-time 60"));
    }
    Ok(())
}

/// Rounds to run: (minimum for the interval, planned).
fn planned_rounds(args: &BenchArgs) -> Result<(usize, usize), UserError> {
    let planned = match (args.runs, args.randomize_layout) {
        (Some(n), _) => n,
        (None, None) => DEFAULT_ROUNDS,
        (None, Some(k)) => k * 3.max(DEFAULT_ROUNDS.div_ceil(k)),
    };
    let minimum = match args.randomize_layout {
        None => min_rounds_for(args.confidence),
        Some(k) => k,
    };
    if let Some(k) = args.randomize_layout {
        if k < 2 {
            return Err(UserError::new(format!(
                "--randomize-layout {k}: an interval over layouts needs at least 2"
            ))
            .hint("use --randomize-layout 5 or more for a useful interval"));
        }
        if planned < k {
            return Err(UserError::new(format!(
                "--runs {planned} is fewer than the {k} layouts of --randomize-layout"
            ))
            .hint(format!("use --runs {} or more", 3 * k)));
        }
    } else if planned < minimum {
        return Err(UserError::new(format!(
            "{planned} rounds cannot give a {}% interval",
            args.confidence * 100.0
        ))
        .hint(format!("use --runs {minimum} or more")));
    }
    if planned > MAX_ROUNDS {
        return Err(
            UserError::new(format!("--runs {planned} is more than {MAX_ROUNDS}"))
                .hint(format!("use --runs {MAX_ROUNDS} or fewer")),
        );
    }
    Ok((minimum, planned))
}

pub fn run(args: &BenchArgs) -> Result<ExitCode, UserError> {
    run_with(args, true).map(|(code, _)| code)
}

/// Measures as `args` say; prints the report (text or JSON, per `args.json`) only when
/// `print`, and returns the exit code and the report as JSON either way (`rivet auto`).
pub fn run_with(args: &BenchArgs, print: bool) -> Result<(ExitCode, serde_json::Value), UserError> {
    check_args(args)?;
    let a_path = check_binary("A", &args.a)?;
    let b_path = check_binary("B", &args.b)?;
    let (minimum, planned) = planned_rounds(args)?;
    let prefix = run_prefix::parse_option(args.runner.as_deref(), "--runner")?;
    if args.cachegrind && prefix.is_some() {
        return Err(UserError::new(
            "--cachegrind with --runner would count the runner's instructions (the emulator's), not the binaries'",
        )
        .hint("leave out --cachegrind; `rivet simulate A -- ARGS` (and B) counts instructions, taken branches and I-cache misses of an emulated run"));
    }
    if args.cachegrind {
        check_valgrind()?;
    }
    // A command without {} runs the binaries themselves: ones this host cannot run fail.
    if prefix.is_none() && !has_placeholder(&args.command) {
        for path in [&a_path, &b_path] {
            if let Some(isa) = cannot_run_here(path) {
                return Err(needs_runner(path, isa));
            }
        }
    }
    let progress = std::io::stderr().is_terminal();
    let scratch = ScratchDir::create()?;

    let (mut side_a, mut side_b) = match args.randomize_layout {
        None => (
            side_without_variants("A", &a_path),
            side_without_variants("B", &b_path),
        ),
        Some(k) => {
            if progress {
                eprint!("\rrivet bench: writing {} shuffled layouts...", 2 * k);
            }
            let a = side_with_variants("A", 0, &a_path, k, args.seed, &scratch.0)?;
            let b = side_with_variants("B", 1, &b_path, k, args.seed, &scratch.0)?;
            (a, b)
        }
    };
    if let Some(prefix) = &prefix
        && has_placeholder(&args.command)
    {
        for side in [&mut side_a, &mut side_b] {
            for (i, v) in side.variants.iter_mut().enumerate() {
                let dir = scratch
                    .0
                    .join(format!("run-{}-{i}", side.name.to_lowercase()));
                v.run_as = Some(prefix.write_script(&v.path, &dir)?);
            }
        }
    }
    let pairs = side_a.variants.len();
    let runner = Runner {
        command: &args.command,
        prefix: prefix.as_ref(),
        stderr_path: scratch.0.join("stderr"),
    };

    // Warm-up: page cache, CPU frequency, and an early error if the workload fails.
    if progress {
        eprint!("\r\x1b[Krivet bench: warm-up round");
    }
    runner.run(&side_a, &side_a.variants[0])?;
    runner.run(&side_b, &side_b.variants[0])?;

    let start = Instant::now();
    let deadline = args.max_time.map(Duration::from_secs_f64);
    let mut rounds: Vec<Round> = Vec::with_capacity(planned);
    for r in 0..planned {
        if r >= minimum && deadline.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        if progress {
            eprint!("\r\x1b[Krivet bench: round {}/{planned}", r + 1);
        }
        let pair = r % pairs;
        let a_first = (r / pairs) % 2 == 0;
        let (va, vb) = (&side_a.variants[pair], &side_b.variants[pair]);
        let (a, b) = if a_first {
            let a = runner.run(&side_a, va)?;
            (a, runner.run(&side_b, vb)?)
        } else {
            let b = runner.run(&side_b, vb)?;
            (runner.run(&side_a, va)?, b)
        };
        rounds.push(Round {
            pair,
            a_first,
            a,
            b,
        });
    }
    if progress {
        eprint!("\r\x1b[K");
    }

    if rounds
        .iter()
        .any(|r| !(r.a.get(args.metric) > 0.0 && r.b.get(args.metric) > 0.0))
    {
        return Err(UserError::new(format!(
            "the workload takes no measurable {} time",
            match args.metric {
                Metric::Cpu => "CPU",
                Metric::Wall => "wall",
            }
        ))
        .hint("give a longer workload (a tenth of a second or more)"));
    }
    let ratios = round_ratios(&rounds, args.metric);
    let layout_pairs = args.randomize_layout.map(|_| pairs);
    let estimate =
        estimate_of(&rounds, &ratios, layout_pairs, args.confidence).ok_or_else(|| {
            UserError::new("too few rounds for an interval")
                .hint(format!("use --runs {} or more", minimum.max(6)))
        })?;
    let verdict = Verdict::of(&estimate);

    let cachegrind_counts = if args.cachegrind {
        if progress {
            eprint!("\rrivet bench: cachegrind...");
        }
        let a = cachegrind(&args.command, &side_a, &scratch.0)?;
        let b = cachegrind(&args.command, &side_b, &scratch.0)?;
        if progress {
            eprint!("\r\x1b[K");
        }
        Some((a, b))
    } else {
        None
    };

    let report = Report {
        args,
        prefix: prefix.as_ref(),
        sides: [&side_a, &side_b],
        rounds: &rounds,
        ratios: &ratios,
        estimate: &estimate,
        verdict,
        cachegrind: cachegrind_counts,
    };
    let json = report.json();
    if print && args.json {
        println!("{json}");
    } else if print {
        report.print();
    }
    drop(scratch);
    Ok((ExitCode::from(verdict.exit_status()), json))
}

// ---------------------------------------------------------------------------------------------
// Report.

struct Report<'a> {
    args: &'a BenchArgs,
    prefix: Option<&'a RunPrefix>,
    sides: [&'a Side; 2],
    rounds: &'a [Round],
    ratios: &'a [f64],
    estimate: &'a Estimate,
    verdict: Verdict,
    cachegrind: Option<([u64; 5], [u64; 5])>,
}

impl Report<'_> {
    fn medians(&self, side: usize, metric: Metric) -> f64 {
        let mut values: Vec<f64> = self
            .rounds
            .iter()
            .map(|r| if side == 0 { r.a } else { r.b }.get(metric))
            .collect();
        median(&mut values)
    }

    fn metric_name(&self) -> &'static str {
        match self.args.metric {
            Metric::Cpu => "cpu",
            Metric::Wall => "wall",
        }
    }

    fn sentence(&self) -> String {
        let e = self.estimate;
        let pct = |x: f64| x * 100.0;
        match self.verdict {
            Verdict::Faster => format!(
                "B is {:.1}% faster than A ({:.0}% CI {:.1}%..{:.1}%)",
                pct(1.0 - e.ratio),
                pct(self.args.confidence),
                pct(1.0 - e.high),
                pct(1.0 - e.low)
            ),
            Verdict::Slower => format!(
                "B is {:.1}% slower than A ({:.0}% CI {:.1}%..{:.1}%)",
                pct(e.ratio - 1.0),
                pct(self.args.confidence),
                pct(e.low - 1.0),
                pct(e.high - 1.0)
            ),
            Verdict::NoDifference => "no significant difference (CI includes 1.00)".to_string(),
        }
    }

    fn print(&self) {
        let e = self.estimate;
        let conf = self.args.confidence * 100.0;
        println!(
            "{} rounds, {} time compared (A ran first in {} of them)",
            self.rounds.len(),
            self.metric_name(),
            self.rounds.iter().filter(|r| r.a_first).count()
        );
        if let Some(prefix) = self.prefix {
            println!("  runner: {}", prefix.command_line());
        }
        for (i, side) in self.sides.iter().enumerate() {
            println!(
                "  {}: {}  median {:.4} s cpu, {:.4} s wall  [{}]",
                side.name,
                side.input.display(),
                self.medians(i, Metric::Cpu),
                self.medians(i, Metric::Wall),
                side.layouts
            );
        }
        let (lo_r, hi_r) = self
            .ratios
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &r| {
                (lo.min(r), hi.max(r))
            });
        println!(
            "  B/A {}: {:.4}  ({conf:.0}% CI {:.4}..{:.4}; per-round ratios {:.4}..{:.4}; {})",
            self.metric_name(),
            e.ratio,
            e.low,
            e.high,
            lo_r,
            hi_r,
            e.method
        );
        if let Some((a, b)) = &self.cachegrind {
            println!("  cachegrind (I1 32 KiB 8-way, LL 8 MiB 16-way):");
            for (i, (label, _)) in CACHEGRIND_EVENTS.iter().enumerate() {
                let label = label
                    .trim_end_matches(':')
                    .split_whitespace()
                    .collect::<Vec<_>>();
                println!(
                    "    {:<12} A {:>15}  B {:>15}  B/A {:.4}",
                    label.join(" "),
                    a[i],
                    b[i],
                    b[i] as f64 / a[i].max(1) as f64
                );
            }
        }
        println!("{}", self.sentence());
    }

    fn json(&self) -> serde_json::Value {
        let e = self.estimate;
        let sides: Vec<serde_json::Value> = self
            .sides
            .iter()
            .enumerate()
            .map(|(i, s)| {
                serde_json::json!({
                    "path": s.input.display().to_string(),
                    "median_cpu_s": self.medians(i, Metric::Cpu),
                    "median_wall_s": self.medians(i, Metric::Wall),
                    "layouts": s.layouts,
                    "variants": s.variants.iter().map(|v| serde_json::json!({
                        "seed": v.seed,
                        "env_pad": v.env_pad,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let cachegrind = self.cachegrind.map(|(a, b)| {
            let obj = |c: [u64; 5]| {
                CACHEGRIND_EVENTS
                    .iter()
                    .zip(c)
                    .map(|((_, key), v)| ((*key).to_string(), serde_json::json!(v)))
                    .collect::<serde_json::Map<_, _>>()
            };
            serde_json::json!({ "a": obj(a), "b": obj(b) })
        });
        serde_json::json!({
            "a": sides[0],
            "b": sides[1],
            "command": self.args.command.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>(),
            "runner": self.prefix.map(RunPrefix::words),
            "metric": self.metric_name(),
            "rounds": self.rounds.len(),
            "randomize_layout": self.args.randomize_layout,
            "ratio": e.ratio,
            "ci_low": e.low,
            "ci_high": e.high,
            "confidence": self.args.confidence,
            "coverage": e.coverage,
            "method": e.method,
            "verdict": self.verdict.name(),
            "summary": self.sentence(),
            "cachegrind": cachegrind,
            "samples": self.rounds.iter().map(|r| serde_json::json!({
                "pair": r.pair,
                "a_first": r.a_first,
                "a_cpu_s": r.a.cpu,
                "a_wall_s": r.a.wall,
                "b_cpu_s": r.b.cpu,
                "b_wall_s": r.b.wall,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn sign_test_ranks() {
        // n = 10: ranks 2 and 9, coverage 1 - 2 * 11/1024.
        let (l, u, c) = median_interval_ranks(10, 0.95).unwrap();
        assert_eq!((l, u), (2, 9));
        assert!((c - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        // n = 5 cannot reach 95% (1 - 2/32 = 0.9375); n = 6 can (1 - 2/64).
        assert!(median_interval_ranks(5, 0.95).is_none());
        assert_eq!(median_interval_ranks(6, 0.95).unwrap().0, 1);
        assert_eq!(min_rounds_for(0.95), 6);
        // n = 20: ranks 6 and 15 (P(Bin <= 5) = 0.0207).
        assert_eq!(median_interval_ranks(20, 0.95).unwrap().0, 6);
        assert!((binomial_half_cdf(20, 5) - 21700.0 / 1_048_576.0).abs() < 1e-12);
    }

    #[test]
    fn student_t_quantiles() {
        // Two-sided 95% and 99% critical values from the usual tables.
        for (df, t95, t99) in [
            (1, 12.706, 63.657),
            (2, 4.303, 9.925),
            (3, 3.182, 5.841),
            (4, 2.776, 4.604),
            (9, 2.262, 3.250),
            (30, 2.042, 2.750),
        ] {
            assert!((student_t_critical(0.95, df) - t95).abs() < 2e-3, "df {df}");
            assert!((student_t_critical(0.99, df) - t99).abs() < 2e-3, "df {df}");
        }
    }

    #[test]
    fn estimates_and_verdicts() {
        let faster = estimate_rounds(&[0.9, 0.91, 0.92, 0.89, 0.9, 0.93, 0.88, 0.9], 0.95).unwrap();
        assert_eq!(Verdict::of(&faster), Verdict::Faster);
        let same =
            estimate_rounds(&[0.99, 1.01, 1.0, 1.02, 0.98, 1.0, 0.995, 1.005], 0.95).unwrap();
        assert_eq!(Verdict::of(&same), Verdict::NoDifference);
        let slower = estimate_variants(&[1.1, 1.12, 1.09], 0.95).unwrap();
        assert_eq!(Verdict::of(&slower), Verdict::Slower);
        // Layout noise of +-5% over 3 layouts: not a difference.
        let noisy = estimate_variants(&[0.95, 1.04, 1.0], 0.95).unwrap();
        assert_eq!(Verdict::of(&noisy), Verdict::NoDifference);
        assert!(estimate_variants(&[1.0], 0.95).is_none());
    }

    /// `a` and `b` within a relative 1e-12 (values computed along another path than the
    /// code's, e.g. a median recomputed by hand).
    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
    }

    fn estimate(ratio: f64, low: f64, high: f64) -> Estimate {
        Estimate {
            ratio,
            low,
            high,
            coverage: 0.95,
            method: "test",
        }
    }

    #[test]
    fn the_sign_test_interval_is_a_pair_of_order_statistics() {
        // n = 10 at 95%: ranks 2 and 9 of the sorted ratios, whatever their values.
        let ratios = [0.95, 0.80, 1.10, 0.85, 0.90, 0.70, 0.88, 0.92, 0.86, 1.30];
        let e = estimate_rounds(&ratios, 0.95).unwrap();
        assert!(close(e.ratio, (0.88 + 0.90) / 2.0), "{e:?}");
        assert_eq!((e.low, e.high), (0.80, 1.10));
        assert!(close(e.coverage, 1.0 - 22.0 / 1024.0), "{e:?}");
        // Two rounds at or above 1.00 of ten: the 9th ratio is above 1, no difference.
        assert_eq!(Verdict::of(&e), Verdict::NoDifference);
        // One round above 1.00 (the outlier 1.30) is outside ranks 2..9: faster.
        let mut one_outlier = ratios;
        one_outlier[2] = 0.99;
        let e = estimate_rounds(&one_outlier, 0.95).unwrap();
        assert_eq!((e.low, e.high), (0.80, 0.99));
        assert_eq!(Verdict::of(&e), Verdict::Faster);
    }

    #[test]
    fn all_equal_samples_give_a_zero_width_interval() {
        for (value, verdict) in [
            (1.0, Verdict::NoDifference),
            (0.8, Verdict::Faster),
            (1.25, Verdict::Slower),
        ] {
            let e = estimate_rounds(&[value; 10], 0.95).unwrap();
            assert_eq!((e.ratio, e.low, e.high), (value, value, value));
            assert_eq!(Verdict::of(&e), verdict, "{value}");
            let e = estimate_variants(&[value; 4], 0.95).unwrap();
            assert!(close(e.ratio, value) && close(e.low, value) && close(e.high, value));
            assert_eq!(Verdict::of(&e), verdict, "{value}");
        }
    }

    #[test]
    fn one_outlier_is_ignored_over_rounds_and_widens_the_interval_over_layouts() {
        // Eleven rounds at 0.6 and one at 50 (a run that stalled): the median and its
        // interval ignore it.
        let mut ratios = [0.6; 12];
        ratios[7] = 50.0;
        let e = estimate_rounds(&ratios, 0.95).unwrap();
        assert_eq!((e.ratio, e.low, e.high), (0.6, 0.6, 0.6));
        assert_eq!(Verdict::of(&e), Verdict::Faster);
        // Over layouts the unit is the layout, and one layout 80 times slower is real
        // evidence: the t interval widens to include 1.00.
        let e = estimate_variants(&[0.6, 0.6, 0.6, 0.6, 50.0], 0.95).unwrap();
        assert!(e.low < 1.0 && 1.0 < e.high, "{e:?}");
        assert_eq!(Verdict::of(&e), Verdict::NoDifference);
    }

    #[test]
    fn few_rounds() {
        // No interval at all from nothing, or from fewer rounds than the confidence needs.
        assert!(estimate_rounds(&[], 0.95).is_none());
        assert!(estimate_rounds(&[0.5, 0.5], 0.95).is_none());
        assert!(estimate_rounds(&[0.5; 5], 0.95).is_none());
        // 5 rounds reach 90% (1 - 2/32): the interval is [min, max].
        let e = estimate_rounds(&[0.5, 0.7, 0.6, 0.9, 0.8], 0.90).unwrap();
        assert_eq!((e.ratio, e.low, e.high), (0.7, 0.5, 0.9));
        assert!(close(e.coverage, 1.0 - 2.0 / 32.0));
        // 6 rounds at 95% (1 - 2/64): [min, max] again, so one round on the other side of
        // 1.00 is enough to make it no difference.
        let e = estimate_rounds(&[0.9, 0.9, 0.9, 0.9, 0.9, 0.95], 0.95).unwrap();
        assert_eq!((e.low, e.high), (0.9, 0.95));
        assert!(close(e.coverage, 1.0 - 2.0 / 64.0));
        assert_eq!(Verdict::of(&e), Verdict::Faster);
        let e = estimate_rounds(&[0.9, 0.9, 0.9, 0.9, 0.9, 1.01], 0.95).unwrap();
        assert_eq!(Verdict::of(&e), Verdict::NoDifference);
        // Two layouts are the fewest for a t interval (df = 1: t = 12.706 at 95%).
        assert!(estimate_variants(&[], 0.95).is_none());
        assert!(estimate_variants(&[0.9], 0.95).is_none());
        let e = estimate_variants(&[0.9, 1.0], 0.95).unwrap();
        let (mean, sd) = ((0.9f64.ln() + 0.0) / 2.0, (0.9f64.ln()).abs() / 2f64.sqrt());
        // df = 1 is the Cauchy distribution: t = tan(pi c / 2) exactly.
        let t = (std::f64::consts::FRAC_PI_2 * 0.95).tan();
        let half = t * sd / 2f64.sqrt();
        assert!((e.ratio - mean.exp()).abs() < 1e-12, "{e:?}");
        assert!((e.low - (mean - half).exp()).abs() < 1e-9, "{e:?}");
        assert!((e.high - (mean + half).exp()).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn the_t_interval_over_layouts_is_exact_for_two_degrees_of_freedom() {
        // Log-ratios -0.1, 0, 0.1: mean 0, standard deviation 0.1. For df = 2 the critical
        // value has a closed form, t = c * sqrt(2 / (1 - c^2)), independent of the series.
        let e = estimate_variants(&[(-0.1f64).exp(), 1.0, 0.1f64.exp()], 0.95).unwrap();
        let t = 0.95 * (2.0f64 / (1.0 - 0.95 * 0.95)).sqrt();
        let half = t * 0.1 / 3f64.sqrt();
        assert!((e.ratio - 1.0).abs() < 1e-12, "{e:?}");
        assert!((e.low - (-half).exp()).abs() < 1e-9, "{e:?}");
        assert!((e.high - half.exp()).abs() < 1e-9, "{e:?}");
        assert_eq!(e.coverage, 0.95);
        assert_eq!(Verdict::of(&e), Verdict::NoDifference);
    }

    #[test]
    fn an_interval_touching_one_is_no_difference() {
        // The verdict needs the whole interval strictly on one side of 1.00.
        for (low, high, verdict) in [
            (0.9, 1.0, Verdict::NoDifference),
            (1.0, 1.1, Verdict::NoDifference),
            (1.0, 1.0, Verdict::NoDifference),
            (0.9, 1.0 - f64::EPSILON, Verdict::Faster),
            (1.0 + f64::EPSILON, 1.1, Verdict::Slower),
        ] {
            let e = estimate((low + high) / 2.0, low, high);
            assert_eq!(Verdict::of(&e), verdict, "{low}..{high}");
        }
    }

    #[test]
    fn exit_status_follows_the_verdict() {
        assert_eq!(Verdict::Faster.exit_status(), 0);
        assert_eq!(Verdict::NoDifference.exit_status(), 0);
        assert_eq!(Verdict::Slower.exit_status(), 3);
    }

    #[test]
    fn intervals_hold_their_estimate() {
        // Deterministic pseudo-random samples of many shapes: the estimate is inside its
        // interval, the interval ends are rounds' ratios, the coverage is what was asked.
        let mut state = 7u64;
        let mut next = || {
            state = splitmix64(state);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for confidence in [0.9, 0.95, 0.99, 0.999] {
            for n in min_rounds_for(confidence)..=40 {
                let center = 0.5 + next();
                let ratios: Vec<f64> = (0..n)
                    .map(|_| center * (1.0 + 0.6 * (next() - 0.5)) + f64::from(next() < 0.1))
                    .collect();
                let e = estimate_rounds(&ratios, confidence).unwrap();
                assert!(e.low <= e.ratio && e.ratio <= e.high, "{n}: {e:?}");
                assert!(ratios.contains(&e.low) && ratios.contains(&e.high));
                assert!(e.coverage >= confidence, "{n}: {e:?}");
            }
            for k in 2..=12 {
                let ratios: Vec<f64> = (0..k).map(|_| 0.7 + 0.6 * next()).collect();
                let e = estimate_variants(&ratios, confidence).unwrap();
                assert!(e.low <= e.ratio && e.ratio <= e.high, "{k}: {e:?}");
            }
        }
    }

    fn sample(cpu: f64) -> Sample {
        Sample { wall: 1.0, cpu }
    }

    /// `ratios[i]` as round `i` of `pairs` variant pairs (A's CPU time 1 s).
    fn rounds_of(ratios: &[f64], pairs: usize) -> Vec<Round> {
        ratios
            .iter()
            .enumerate()
            .map(|(i, &r)| Round {
                pair: i % pairs,
                a_first: (i / pairs).is_multiple_of(2),
                a: sample(1.0),
                b: sample(r),
            })
            .collect()
    }

    #[test]
    fn ratios_use_the_chosen_metric() {
        let round = Round {
            pair: 0,
            a_first: true,
            a: Sample {
                wall: 2.0,
                cpu: 1.0,
            },
            b: Sample {
                wall: 1.0,
                cpu: 1.5,
            },
        };
        assert_eq!(round_ratios(&[round], Metric::Cpu), [1.5]);
        assert_eq!(round_ratios(&[round], Metric::Wall), [0.5]);
    }

    #[test]
    fn layout_noise_is_not_a_difference() {
        // Same binary on both sides, 5 layouts a side whose speeds differ by accident by up
        // to 25%, 3 rounds each with 1% jitter. Each pair counts once (its median, the layout's
        // ratio itself here), and the 99% t interval over 5 layouts holds 1.00.
        let layouts = [0.80, 1.25, 0.95, 1.10, 0.90];
        let ratios: Vec<f64> = [1.0, 1.01, 0.99]
            .iter()
            .flat_map(|jitter| layouts.iter().map(move |l| l * jitter))
            .collect();
        let rounds = rounds_of(&ratios, 5);
        assert_eq!(round_ratios(&rounds, Metric::Cpu), ratios);
        let e = estimate_of(&rounds, &ratios, Some(5), 0.99).unwrap();
        assert_eq!(e, estimate_variants(&layouts, 0.99).unwrap());
        assert!(e.low < 1.0 && 1.0 < e.high, "{e:?}");
        assert_eq!(Verdict::of(&e), Verdict::NoDifference);
    }

    #[test]
    fn rounds_of_one_layout_are_not_independent_evidence() {
        // Two layout pairs that both happen to favour B (0.8 and 0.9), ten rounds each with 1%
        // jitter. As 20 independent rounds the sign test calls B faster; over layouts, two
        // draws of layout luck are no evidence of a difference.
        let layouts = [0.8, 0.9];
        let ratios: Vec<f64> = (0..20)
            .map(|i| layouts[i % 2] * [0.99, 1.0, 1.01][(i / 2) % 3])
            .collect();
        let rounds = rounds_of(&ratios, 2);
        let naive = estimate_of(&rounds, &ratios, None, 0.95).unwrap();
        assert_eq!(Verdict::of(&naive), Verdict::Faster, "{naive:?}");
        let paired = estimate_of(&rounds, &ratios, Some(2), 0.95).unwrap();
        assert_eq!(paired, estimate_variants(&layouts, 0.95).unwrap());
        assert_eq!(Verdict::of(&paired), Verdict::NoDifference, "{paired:?}");
    }

    #[test]
    fn a_real_difference_survives_layout_noise() {
        // B is 30% faster than A, with +-3% of layout noise: faster over layouts too.
        let layouts = [0.70, 0.68, 0.72, 0.71, 0.69];
        let ratios: Vec<f64> = (0..15).map(|i| layouts[i % 5]).collect();
        let e = estimate_of(&rounds_of(&ratios, 5), &ratios, Some(5), 0.99).unwrap();
        assert_eq!(Verdict::of(&e), Verdict::Faster, "{e:?}");
        // Without layouts, the sign test over the rounds.
        let e = estimate_of(&rounds_of(&ratios, 1), &ratios, None, 0.95).unwrap();
        assert_eq!(e, estimate_rounds(&ratios, 0.95).unwrap());
        assert_eq!(Verdict::of(&e), Verdict::Faster, "{e:?}");
        assert!(estimate_of(&rounds_of(&ratios[..1], 1), &ratios[..1], Some(1), 0.95).is_none());
    }

    fn args(confidence: f64) -> BenchArgs {
        BenchArgs {
            a: "/x/a".into(),
            b: "/x/b".into(),
            extra: Vec::new(),
            command: vec!["{}".into()],
            runs: None,
            randomize_layout: None,
            seed: 1,
            metric: Metric::Cpu,
            confidence,
            max_time: None,
            cachegrind: false,
            runner: None,
            json: true,
        }
    }

    /// The report of `ratios` as rounds (A 1 s of CPU each): its JSON and its sentence.
    fn report(ratios: &[f64], confidence: f64) -> (serde_json::Value, String, Verdict) {
        let args = args(confidence);
        let a = side_without_variants("A", Path::new("/x/a"));
        let b = side_without_variants("B", Path::new("/x/b"));
        let rounds = rounds_of(ratios, 1);
        let e = estimate_of(&rounds, ratios, None, confidence).unwrap();
        let report = Report {
            args: &args,
            prefix: None,
            sides: [&a, &b],
            rounds: &rounds,
            ratios,
            estimate: &e,
            verdict: Verdict::of(&e),
            cachegrind: None,
        };
        (report.json(), report.sentence(), report.verdict)
    }

    #[test]
    fn the_report_states_the_verdict_and_its_interval() {
        let (json, sentence, verdict) = report(&[0.6; 10], 0.95);
        assert_eq!(verdict, Verdict::Faster);
        assert_eq!(sentence, "B is 40.0% faster than A (95% CI 40.0%..40.0%)");
        assert_eq!(json["verdict"], "faster");
        assert_eq!(json["summary"], sentence.as_str());
        assert_eq!(json["metric"], "cpu");
        assert_eq!(json["rounds"], 10);
        assert_eq!(json["samples"].as_array().unwrap().len(), 10);
        assert_eq!(json["a"]["median_cpu_s"], 1.0);
        assert_eq!(json["b"]["median_cpu_s"], 0.6);
        assert_eq!(
            (json["ratio"].as_f64(), json["ci_low"].as_f64()),
            (Some(0.6), Some(0.6))
        );

        let ratios = [1.5, 1.4, 1.6, 1.45, 1.7, 1.5, 1.55, 1.4, 1.6, 1.5];
        let (json, sentence, verdict) = report(&ratios, 0.95);
        assert_eq!(verdict, Verdict::Slower);
        assert_eq!(verdict.exit_status(), 3);
        assert_eq!(sentence, "B is 50.0% slower than A (95% CI 40.0%..60.0%)");
        assert_eq!(json["verdict"], "slower");
        assert_eq!(
            (json["ci_low"].as_f64(), json["ci_high"].as_f64()),
            (Some(1.4), Some(1.6))
        );

        let (json, sentence, verdict) = report(&[1.0; 30], 0.999);
        assert_eq!(verdict, Verdict::NoDifference);
        assert_eq!(sentence, "no significant difference (CI includes 1.00)");
        assert_eq!(json["verdict"], "no-difference");
        assert_eq!(json["confidence"], 0.999);
        // n = 30 at 99.9%: ranks 6 and 25, coverage 1 - 2 P(Bin(30, 1/2) <= 5).
        let coverage = json["coverage"].as_f64().unwrap();
        assert!(
            (coverage - 0.999_675_085_768_103_6).abs() < 1e-12,
            "{coverage}"
        );
    }

    #[test]
    fn commands() {
        let bin = Path::new("/x/lua");
        let cmd: Vec<OsString> = ["bash", "-c", "{} a.lua; {}"].map(OsString::from).to_vec();
        assert_eq!(
            argv(&cmd, bin),
            ["bash", "-c", "/x/lua a.lua; /x/lua"].map(OsString::from)
        );
        let cmd: Vec<OsString> = ["a.lua", "8"].map(OsString::from).to_vec();
        assert_eq!(
            argv(&cmd, bin),
            ["/x/lua", "a.lua", "8"].map(OsString::from)
        );
        assert_eq!(
            shell_words(&["a b".into(), "c".into(), "it's".into()]),
            r"'a b' c 'it'\''s'"
        );
    }
}
