//! `rivet auto BINARY -o OUT --train CMD...`: the whole workflow in one command: check,
//! instrument, train, merge, optimize, verify, summarize.
//!
//! **Check.** The input must be an x86-64 or AArch64 ELF file with relocations
//! (`-Wl,--emit-relocs`): instrumentation moves code, which needs them. Without relocations `auto` stops with one line
//! saying so, how to relink, and what the alternative costs (`perf record -e cpu-clock:u` +
//! `rivet aggregate` + `rivet optimize`: functions then stay in place, only their blocks move).
//! `auto` does not fall back to sampling by itself: with no hardware branch records (VMs) the
//! sampled profile is much weaker than exact counts, and a silent downgrade would hide that.
//!
//! **Training.** The instrumented binary is written into a private temporary directory
//! (mode 0700, removed at the end, also on errors and on ctrl-c) under the input's file name,
//! so programs that look at `argv[0]` (redis-server, busybox) behave the same. Each `--train
//! CMD` runs once through `sh -c` (pipes and redirections work); every `{}` in it becomes the
//! instrumented binary's path (as `"$1"`, so any path is one word: do not put `{}` in quotes);
//! without `{}` the binary is the program and CMD its arguments. Words after `--` are one more
//! training command, run directly (no shell), with the same `{}` rule. Each command gets its own
//! counter file through `RIVET_PROFILE` in its environment: every process it starts that runs
//! the binary (children, repeated runs) adds to that file; one file per command, not per
//! process, keeps the disk use bounded for commands that run the binary thousands of times.
//! Commands get no stdin (/dev/null) and their output is discarded; stderr is kept to quote the
//! last line when a command fails. A command that exits non-zero, runs longer than `--timeout`,
//! or never runs the binary (no counter file) is an error.
//!
//! **Emulators.** `--runner PREFIX` runs every run of the instrumented binary (and the
//! original and optimized ones under `--bench`) as `PREFIX... BINARY ARGS`, e.g. an AArch64
//! program on an x86-64 host under `qemu-aarch64 -L /usr/aarch64-linux-gnu`; `{}` then stands
//! for a script that does that (`run_prefix` says how, and how the words are split). The
//! counter file's variable reaches the program through the emulator's environment. A program
//! this host cannot run by itself (another ISA, no binfmt_misc handler) is refused before
//! anything runs when a command would run it directly, with the `--runner` to give; a failing
//! command with `{}` gets the same hint (such a command may name an emulator itself). Processes
//! left running are found by their command line as well as by their executable (an emulated
//! program's executable is the emulator's).
//!
//! **Servers.** `--server CMD` is started like a training command, then `--ready CMD` (a probe,
//! e.g. `redis-cli -p 7000 ping`) is retried every 100 ms until it succeeds, for at most
//! `--ready-timeout` seconds (without a probe `auto` waits that long, 2 s by default, and checks
//! the server still runs). Each `--load CMD` then runs against it, bounded by `--timeout`. The
//! server is stopped with SIGTERM to its whole process group, given `--stop-timeout` seconds,
//! then SIGKILLed; counters reach the file while the program runs, so even a SIGKILL keeps the
//! profile. A server that exits before it is stopped is an error.
//!
//! **No stray processes.** Every command runs in a process group of its own; when it ends (or
//! fails, or times out), whatever is left in its group is stopped the same way as a server.
//! Afterwards `/proc` is scanned for any process still running the instrumented binary; those
//! are killed and reported. Ctrl-c, SIGTERM and SIGHUP are handled without unsafe code: they are
//! blocked in rivet's threads and waited for by a watcher thread (std clears the signal mask of
//! the children it starts), which kills the live groups, removes the temporary directory and
//! exits with 128 + the signal number.
//!
//! **Optimize.** The counter files are merged (sorted: same counts, same bytes) and `rivet
//! optimize` runs in process with its defaults, `--verify` always, `--skip-funcs` (which also
//! leaves those functions uninstrumented) and any `--optimize-option ARG`; the output is
//! written to a temporary file renamed into place. `--profile-out` keeps the merged profile.
//!
//! **Summary.** Training runs with their times, then optimize's summary (functions moved and
//! split, profile coverage, the dyno-stats line). `--bench` then compares the input and the
//! output on the first training command with `rivet bench` (interleaved rounds, CPU time,
//! median ratio with a confidence interval); with only a server workload there is nothing it can
//! rerun, so `--bench` is an error there. `--json` prints one JSON document instead. Progress
//! lines go to stderr when it is a terminal.

use std::ffi::OsString;
use std::fs::File;
use std::io::IsTerminal as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser as _;
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::Pid;
use rivet_discover::DiscoverError;
use rivet_elf::ElfFile;
use rivet_ir::RelocationMode;

use crate::error::{UserError, elf_error};
use crate::files::{PendingOutput, map_input, same_file};
use crate::profile_use::{Input, hashes_from_binary, read_profile};
use crate::run_prefix::{self, RunPrefix, cannot_run_here, needs_runner};

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  rivet auto ./lua -o lua.fast --train '{} bench/fib.lua' --train '{} bench/strings.lua 2000'
  rivet auto ./sqlite3 -o sqlite3.fast --train '{} /tmp/t.db < workload.sql' --bench
  rivet auto ./redis-server -o redis-server.fast \\
      --server '{} --port 7000 --save \"\" --bind 127.0.0.1' --ready 'redis-cli -p 7000 ping' \\
      --load 'redis-benchmark -p 7000 -n 100000 -q'
  rivet auto ./app -o app.fast -- input.txt        (after --: the binary's arguments)
  rivet auto ./lua.aarch64 -o lua.fast --runner 'qemu-aarch64 -L /usr/aarch64-linux-gnu' \\
      --train '{} bench/fib.lua' --bench               (an AArch64 program on an x86-64 host)

COMMANDS run through `sh -c`; every `{}` stands for the instrumented binary (do not quote it); \
without `{}` the command is the binary's arguments. They get no stdin, their output is \
discarded, and each must exit 0. The binary needs relocations (link with -Wl,--emit-relocs). \
With --runner, every run of the binary is PREFIX BINARY ARGS, and {} stands for a script \
that runs it so.")]
pub struct AutoArgs {
    /// The executable to optimize (never modified), linked with -Wl,--emit-relocs.
    pub binary: PathBuf,
    /// Where to write the optimized binary.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// A training command (repeatable; their profiles are merged).
    #[arg(long, value_name = "CMD")]
    pub train: Vec<String>,
    /// A server to train: started with the instrumented binary, loaded with --load, stopped.
    #[arg(long, value_name = "CMD")]
    pub server: Option<String>,
    /// With --server: a command probing whether the server is ready, retried until it exits 0.
    #[arg(long, value_name = "CMD")]
    pub ready: Option<String>,
    /// With --server: the load to run against it (repeatable, run in order).
    #[arg(long, value_name = "CMD")]
    pub load: Vec<String>,
    /// With --server: how long to wait for readiness [default: 30 with --ready, else 2].
    #[arg(long, value_name = "SECONDS")]
    pub ready_timeout: Option<f64>,
    /// Longest a training or load command may run.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600.0)]
    pub timeout: f64,
    /// How long a server (or what a command left running) gets to exit after SIGTERM.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub stop_timeout: f64,
    /// Functions to leave alone: neither instrumented nor optimized (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub skip_funcs: Vec<String>,
    /// One more option for the optimization, as `rivet optimize` takes it (repeatable, one
    /// argument each, e.g. --optimize-option=--hot-text).
    #[arg(
        long = "optimize-option",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub optimize_options: Vec<String>,
    /// Also write the merged profile here (Rivet's format, with the binary's code hashes so that
    /// the next build can use it too, or fdata for a .fdata path).
    #[arg(long, value_name = "PATH")]
    pub profile_out: Option<PathBuf>,
    /// Compare input and output on the first training command (`rivet bench`).
    #[arg(long)]
    pub bench: bool,
    /// With --bench: measured rounds.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub bench_runs: usize,
    /// Run the binary under this program, e.g. an emulator: 'qemu-aarch64 -L
    /// /usr/aarch64-linux-gnu' for an AArch64 binary on an x86-64 host. Words split as a shell
    /// splits them (quotes, backslashes), without expansions; the binary and its arguments
    /// follow them in every run (training, server, --bench).
    #[arg(long, value_name = "PREFIX")]
    pub runner: Option<String>,
    /// Print the summary as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// A training command after `--`: the binary's arguments, or a command with `{}`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// How often a child is polled while waiting for it.
const POLL: Duration = Duration::from_millis(20);
/// How often the readiness probe is retried.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// Longest one readiness probe may take.
const PROBE_LIMIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// Commands.

/// A training workload: how it is given, and how it runs.
#[derive(Debug, Clone)]
enum Workload {
    /// `--train CMD`: `sh -c`.
    Shell(String),
    /// Words after `--`: run directly.
    Argv(Vec<OsString>),
    /// A server's `--load` without `{}`: a program of its own, through `sh -c`.
    Client(String),
}

impl Workload {
    fn has_placeholder(&self) -> bool {
        match self {
            Workload::Shell(s) => s.contains("{}"),
            Workload::Client(_) => true,
            Workload::Argv(words) => words.iter().any(|w| w.to_string_lossy().contains("{}")),
        }
    }

    /// The argv running this workload with `binary`.
    fn argv(&self, binary: &Path) -> Vec<OsString> {
        match self {
            Workload::Shell(s) => shell_argv(s, binary),
            Workload::Client(s) => vec!["sh".into(), "-c".into(), s.into()],
            Workload::Argv(words) if self.has_placeholder() => words
                .iter()
                .map(|w| {
                    let text = w.to_string_lossy();
                    OsString::from(text.replace("{}", &binary.to_string_lossy()))
                })
                .collect(),
            Workload::Argv(words) => std::iter::once(binary.as_os_str().to_owned())
                .chain(words.iter().cloned())
                .collect(),
        }
    }

    /// The workload as `rivet bench` takes it (`{}` for the binary).
    fn bench_command(&self) -> Vec<OsString> {
        match self {
            Workload::Shell(s) => shell_argv(s, Path::new("{}")),
            Workload::Client(s) => vec!["sh".into(), "-c".into(), s.into()],
            Workload::Argv(words) => words.clone(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Workload::Shell(s) | Workload::Client(s) => s.clone(),
            Workload::Argv(words) => words
                .iter()
                .map(|w| w.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// `sh -c CMD sh BINARY`, with every `{}` in CMD replaced by `"$1"` (so any path stays one
/// word), or CMD prefixed with `"$1"` when it has no `{}`.
fn shell_argv(command: &str, binary: &Path) -> Vec<OsString> {
    let script = if command.contains("{}") {
        command.replace("{}", "\"$1\"")
    } else {
        format!("\"$1\" {command}")
    };
    vec![
        "sh".into(),
        "-c".into(),
        script.into(),
        "sh".into(),
        binary.as_os_str().to_owned(),
    ]
}

/// A command with `{}` replaced by `binary`, the way to run it (for the user's eyes, in hints).
fn shown(command: &str, binary: &str) -> String {
    if command.contains("{}") {
        command.replace("{}", binary)
    } else {
        format!("{binary} {command}")
    }
}

// ---------------------------------------------------------------------------------------------
// Process groups.

/// What the ctrl-c watcher must clean up: live process groups and the scratch directory.
#[derive(Default)]
struct Live {
    groups: Vec<Pid>,
    scratch: Option<PathBuf>,
}

type Shared = Arc<Mutex<Live>>;

fn lock(live: &Shared) -> std::sync::MutexGuard<'_, Live> {
    live.lock().unwrap_or_else(|e| e.into_inner())
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it starts later) and
/// starts a thread that waits for them: it kills the live groups, removes the scratch
/// directory and exits. Children get an empty signal mask from std.
fn watch_signals(live: &Shared) {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    if set.thread_block().is_err() {
        return;
    }
    let live = Arc::clone(live);
    std::thread::spawn(move || {
        let Ok(signal) = set.wait() else { return };
        let live = lock(&live);
        for &g in &live.groups {
            let _ = killpg(g, Signal::SIGKILL);
        }
        if let Some(dir) = &live.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
        eprintln!("rivet: error: interrupted by {signal}; the training processes were killed");
        std::process::exit(128 + signal as i32);
    });
}

/// A child in a process group of its own; whatever is left of the group is killed on drop.
struct Group {
    child: Child,
    pgid: Pid,
    status: Option<ExitStatus>,
    live: Shared,
}

impl Group {
    fn spawn(command: &mut Command, live: &Shared) -> std::io::Result<Group> {
        // Registered under the lock, so the watcher cannot miss a group just started.
        let mut guard = lock(live);
        let child = command.process_group(0).spawn()?;
        let pgid = Pid::from_raw(child.id() as i32);
        guard.groups.push(pgid);
        drop(guard);
        Ok(Group {
            child,
            pgid,
            status: None,
            live: Arc::clone(live),
        })
    }

    fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits for the group leader at most `limit`.
    fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Whether any process of the group still exists (the leader reaped or not).
    fn group_alive(&mut self) -> bool {
        self.try_wait();
        killpg(self.pgid, None).is_ok()
    }

    /// Stops the whole group: SIGTERM, up to `grace` for all of it to exit, then SIGKILL.
    /// Returns whether SIGKILL was needed.
    fn stop(&mut self, grace: Duration) -> bool {
        if !self.group_alive() {
            return false;
        }
        let _ = killpg(self.pgid, Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < grace {
            if !self.group_alive() {
                return false;
            }
            std::thread::sleep(POLL);
        }
        self.kill();
        true
    }

    /// SIGKILL to the group, then reaps the leader.
    fn kill(&mut self) {
        let _ = killpg(self.pgid, Signal::SIGKILL);
        if self.status.is_none() {
            self.status = self.child.wait().ok();
        }
        // The others are reparented to init, which reaps them; wait a little for that.
        let start = Instant::now();
        while killpg(self.pgid, None).is_ok() && start.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.status.is_none() || killpg(self.pgid, None).is_ok() {
            self.kill();
        }
        let mut live = lock(&self.live);
        live.groups.retain(|&g| g != self.pgid);
    }
}

/// How a command ended, in words.
fn how(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!(
            "was killed by {}",
            Signal::try_from(sig).map_or_else(|_| format!("signal {sig}"), |s| s.to_string())
        ),
        _ => "failed".to_string(),
    }
}

/// The last non-empty line of a log, shortened.
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

/// The private scratch directory, removed when dropped.
struct Scratch {
    dir: PathBuf,
    live: Shared,
}

impl Scratch {
    fn create(live: &Shared) -> Result<Scratch, UserError> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("rivet-auto-{}-{nanos}", std::process::id()));
        let made = std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .and_then(|_| {
                for sub in ["bin", "profiles", "logs"] {
                    std::fs::DirBuilder::new()
                        .mode(0o700)
                        .create(dir.join(sub))?;
                }
                Ok(())
            });
        lock(live).scratch = Some(dir.clone());
        let scratch = Scratch {
            dir,
            live: Arc::clone(live),
        };
        made.map_err(|e| {
            UserError::new(format!(
                "cannot create a directory in {}: {e}",
                base.display()
            ))
            .hint("set TMPDIR to a writable directory")
        })?;
        Ok(scratch)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        lock(&self.live).scratch = None;
    }
}

/// Processes (other than ours) whose executable is `binary`, or with `emulated`, whose
/// command line names it (an emulator running it): what a training left running.
fn processes_running(binary: &Path, emulated: bool) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
                exe == binary
                    || exe.to_string_lossy().strip_suffix(" (deleted)")
                        == Some(&*binary.to_string_lossy())
            }) || (emulated
                && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                    cmdline
                        .split(|&b| b == 0)
                        .any(|arg| arg == binary.as_os_str().as_bytes())
                }))
        })
        .map(Pid::from_raw)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The workflow.

struct Runner<'a> {
    args: &'a AutoArgs,
    live: Shared,
    scratch: &'a Scratch,
    /// What `{}` stands for: the instrumented binary, or with `--runner` the script that runs
    /// it under the prefix.
    run_as: PathBuf,
    prefix: Option<&'a RunPrefix>,
    progress: bool,
    warnings: Vec<String>,
}

/// One finished training run, for the summary.
struct Run {
    what: String,
    command: String,
    seconds: f64,
    profile: PathBuf,
}

impl Runner<'_> {
    fn note(&self, text: &str) {
        if self.progress {
            eprint!("\r\x1b[Krivet auto: {text}");
        }
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.scratch.dir.join("logs").join(name)
    }

    /// How the original binary is run by hand: its path, after the prefix if any.
    fn original_by_hand(&self) -> String {
        match self.prefix {
            Some(p) => format!("{} {}", p.command_line(), self.args.binary.display()),
            None => self.args.binary.display().to_string(),
        }
    }

    /// The hint for a command that failed, when the reason is likely that the host cannot run
    /// the binary at all: a foreign program and no `--runner`.
    fn foreign_hint(&self) -> Option<String> {
        if self.prefix.is_some() {
            return None;
        }
        let isa = cannot_run_here(&self.args.binary)?;
        needs_runner(&self.args.binary, isa).hint
    }

    /// A command set up to run with the instrumented binary counting into `profile`.
    fn command(&self, argv: &[OsString], profile: &Path, log: &Path) -> Result<Command, UserError> {
        let stderr = File::create(log)
            .map_err(|e| UserError::new(format!("cannot write {}: {e}", log.display())))?;
        let stdout = stderr
            .try_clone()
            .map_err(|e| UserError::new(format!("cannot write {}: {e}", log.display())))?;
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .env(rivet_runtime::ENV_PROFILE, profile)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        Ok(command)
    }

    fn spawn(
        &self,
        what: &str,
        argv: &[OsString],
        command: &mut Command,
    ) -> Result<Group, UserError> {
        Group::spawn(command, &self.live).map_err(|e| {
            UserError::new(format!(
                "cannot run the {what} ({}): {e}",
                argv[0].to_string_lossy()
            ))
            .hint("check the program named in the command")
        })
    }

    fn grace(&self) -> Duration {
        Duration::from_secs_f64(self.args.stop_timeout)
    }

    /// Runs one command to completion (bounded by --timeout), then stops whatever it left in
    /// its group. A failure is an error quoting the command, its status and its last line.
    fn run_to_end(
        &mut self,
        what: &str,
        workload: &Workload,
        profile: &Path,
        log_name: &str,
    ) -> Result<f64, UserError> {
        let argv = workload.argv(&self.run_as);
        let log = self.log_path(log_name);
        let mut command = self.command(&argv, profile, &log)?;
        let start = Instant::now();
        let mut group = self.spawn(what, &argv, &mut command)?;
        let status = group.wait_for(Duration::from_secs_f64(self.args.timeout));
        let seconds = start.elapsed().as_secs_f64();
        let left_running = group.stop(self.grace());
        let try_it = format!(
            "try it by hand with the original binary: {}",
            match workload {
                Workload::Shell(s) => shown(s, &self.original_by_hand()),
                Workload::Client(s) => s.clone(),
                Workload::Argv(_) => workload
                    .argv(Path::new(&self.original_by_hand()))
                    .iter()
                    .map(|w| w.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" "),
            }
        );
        let Some(status) = status else {
            return Err(UserError::new(format!(
                "the {what} `{}` did not finish within --timeout {} s and was killed",
                workload.describe(),
                self.args.timeout
            ))
            .hint(format!(
                "give it more time with --timeout, or a shorter workload; {try_it}"
            )));
        };
        if !status.success() {
            let said = last_line(&log)
                .map(|l| format!(": {l}"))
                .unwrap_or_default();
            let hint = if let Some(hint) = self.foreign_hint() {
                hint
            } else if workload.has_placeholder() {
                format!("the command must succeed with the instrumented binary; {try_it}")
            } else {
                format!(
                    "without {{}} the command is the arguments of {}; put {{}} where the binary goes; {try_it}",
                    self.args.binary.display()
                )
            };
            return Err(UserError::new(format!(
                "the {what} `{}` {}{said}",
                workload.describe(),
                how(status)
            ))
            .hint(hint));
        }
        if left_running {
            self.warnings.push(format!(
                "the {what} `{}` left processes that did not exit on SIGTERM; they were killed",
                workload.describe()
            ));
        }
        Ok(seconds)
    }

    fn check_profile_written(
        &self,
        what: &str,
        command: &str,
        profile: &Path,
    ) -> Result<(), UserError> {
        if profile.exists() {
            return Ok(());
        }
        Err(UserError::new(format!(
            "the {what} `{command}` never ran {}: no profile was written",
            self.args.binary.display()
        ))
        .hint(
            "put {} in the command where the binary goes (it stands for the instrumented binary)",
        ))
    }

    fn train(&mut self, index: usize, total: usize, workload: &Workload) -> Result<Run, UserError> {
        let profile = self
            .scratch
            .dir
            .join(format!("profiles/train-{index}.counts"));
        let what = format!("training command {}", index + 1);
        self.note(&format!(
            "training {}/{total}: {}",
            index + 1,
            workload.describe()
        ));
        let seconds = self.run_to_end(&what, workload, &profile, &format!("train-{index}.log"))?;
        self.check_profile_written(&what, &workload.describe(), &profile)?;
        Ok(Run {
            what: format!("training {}/{total}", index + 1),
            command: workload.describe(),
            seconds,
            profile,
        })
    }

    /// Starts the server, waits until it is ready, runs the loads, stops it.
    fn serve(&mut self, server: &str) -> Result<Run, UserError> {
        let profile = self.scratch.dir.join("profiles/server.counts");
        let argv = shell_argv(server, &self.run_as);
        let log = self.log_path("server.log");
        let mut command = self.command(&argv, &profile, &log)?;
        self.note(&format!("starting the server: {server}"));
        let start = Instant::now();
        let mut group = self.spawn("server", &argv, &mut command)?;
        let died_hint = self.foreign_hint().unwrap_or_else(|| {
            format!(
                "try it by hand with the original binary: {}",
                shown(server, &self.original_by_hand())
            )
        });
        let died = |group: &mut Group, when: &str| {
            let status = group.try_wait()?;
            let said = last_line(&log)
                .map(|l| format!(": {l}"))
                .unwrap_or_default();
            Some(
                UserError::new(format!(
                    "the server `{server}` {} {when}{said}",
                    how(status)
                ))
                .hint(died_hint.clone()),
            )
        };

        // Ready?
        let with_probe = self.args.ready.is_some();
        let limit = Duration::from_secs_f64(self.args.ready_timeout.unwrap_or(if with_probe {
            30.0
        } else {
            2.0
        }));
        let waited = Instant::now();
        match &self.args.ready {
            Some(probe) => loop {
                if let Some(e) = died(&mut group, "before it was ready") {
                    return Err(e);
                }
                let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), probe.into()];
                let mut command = Command::new(&argv[0]);
                command
                    .args(&argv[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                let mut p = self.spawn("readiness probe", &argv, &mut command)?;
                let left = limit.saturating_sub(waited.elapsed());
                let ok = p
                    .wait_for(left.min(PROBE_LIMIT))
                    .is_some_and(|s| s.success());
                drop(p);
                if ok {
                    break;
                }
                if waited.elapsed() >= limit {
                    return Err(UserError::new(format!(
                        "the server `{server}` was not ready after {} s: `{probe}` never succeeded",
                        limit.as_secs_f64()
                    ))
                    .hint("check the probe by hand, or give the server more time with --ready-timeout"));
                }
                std::thread::sleep(PROBE_INTERVAL);
            },
            None => {
                while waited.elapsed() < limit {
                    if let Some(e) = died(&mut group, "right after it started") {
                        return Err(e);
                    }
                    std::thread::sleep(POLL);
                }
            }
        }

        // Load.
        for (i, load) in self.args.load.iter().enumerate() {
            self.note(&format!("load {}/{}: {load}", i + 1, self.args.load.len()));
            let what = format!("load command {}", i + 1);
            // `{}` in a load stands for the instrumented binary too; without it, the load is a
            // program of its own (a client), not the binary's arguments.
            let workload = if load.contains("{}") {
                Workload::Shell(load.clone())
            } else {
                Workload::Client(load.clone())
            };
            self.run_to_end(&what, &workload, &profile, &format!("load-{i}.log"))?;
            if let Some(e) = died(&mut group, "while it was being loaded") {
                return Err(e);
            }
        }

        // Stop.
        self.note("stopping the server");
        if group.stop(self.grace()) {
            self.warnings.push(format!(
                "the server did not exit within --stop-timeout {} s of SIGTERM and was killed (its profile is complete)",
                self.args.stop_timeout
            ));
        }
        let seconds = start.elapsed().as_secs_f64();
        drop(group);
        self.check_profile_written("server", server, &profile)?;
        Ok(Run {
            what: "server".to_string(),
            command: server.to_string(),
            seconds,
            profile,
        })
    }
}

fn check_args(args: &AutoArgs) -> Result<(), UserError> {
    let usage = "rivet auto BINARY -o OUT --train '{} ARGS...'";
    if args.server.is_none() {
        if !args.load.is_empty() || args.ready.is_some() {
            return Err(UserError::new("--load and --ready need --server").hint(
                "start the server with --server '{} ARGS' and load it with --load 'CLIENT ...'",
            ));
        }
    } else if args.load.is_empty() {
        return Err(
            UserError::new("--server needs a --load command to run against it")
                .hint("e.g. --load 'redis-benchmark -p 7000 -n 100000 -q'"),
        );
    }
    if args.train.is_empty() && args.command.is_empty() && args.server.is_none() {
        return Err(
            UserError::new("no training command").hint(format!(
                "give one with --train ({{}} stands for the binary), a server with --server and --load, or the binary's arguments after --: {usage}"
            )),
        );
    }
    if let Some(empty) = args.train.iter().find(|t| t.trim().is_empty()) {
        return Err(UserError::new(format!("empty --train command {empty:?}"))
            .hint(format!("e.g. {usage}")));
    }
    for (name, value) in [
        ("--timeout", Some(args.timeout)),
        ("--stop-timeout", Some(args.stop_timeout)),
        ("--ready-timeout", args.ready_timeout),
    ] {
        if let Some(v) = value.filter(|v| !(*v > 0.0 && v.is_finite() && *v < 1e9)) {
            return Err(
                UserError::new(format!("{name} {v} is not a positive number of seconds"))
                    .hint(format!("e.g. {name} 60")),
            );
        }
    }
    if args.bench && args.train.is_empty() && args.command.is_empty() {
        return Err(UserError::new("--bench needs a training command to rerun")
            .hint("a server workload cannot be rerun by rivet bench; measure the server with its load tool, e.g. redis-benchmark, on both binaries"));
    }
    if same_file(&args.binary, &args.output) {
        return Err(
            UserError::new(format!("the output {} is the input", args.output.display()))
                .hint("Rivet never modifies its input; give another -o path"),
        );
    }
    Ok(())
}

/// Reads the input and says whether it can be instrumented and trained by these commands:
/// `args_all_have_placeholder` when every command names the binary with `{}` (none runs it
/// directly), `prefix` the `--runner`.
fn check_binary(
    binary: &Path,
    args_all_have_placeholder: bool,
    prefix: Option<&RunPrefix>,
) -> Result<(), UserError> {
    let mapped = map_input(binary)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(binary, &e))?;
    crate::files::refuse_rivet_output(&elf, binary)?;
    let relocation_mode = rivet_discover::relocation_mode(&elf).map_err(|e| match e {
        DiscoverError::Elf(e) => elf_error(binary, &e),
    })?;
    if let RelocationMode::Unavailable { reason } = &relocation_mode {
        return Err(UserError::new(format!(
            "{} cannot be instrumented: {reason}",
            binary.display()
        ))
        .hint(
            "relink with -Wl,--emit-relocs (gcc: also -fno-reorder-blocks-and-partition) and rerun; \
             without relocations only sampling works (perf record -e cpu-clock:u, rivet aggregate, \
             rivet optimize), with a weaker profile, functions kept in place and no function reordering",
        ));
    }
    if elf.kind == rivet_elf::ElfKind::SharedLibrary && !args_all_have_placeholder {
        return Err(UserError::new(format!(
            "{} is a shared library, not a program: every command needs {{}}",
            binary.display()
        ))
        .hint("{} is the instrumented library, under the same file name: e.g. --train 'LD_LIBRARY_PATH=$(dirname {}) ./app'"));
    }
    if elf.kind == rivet_elf::ElfKind::SharedLibrary && prefix.is_some() {
        return Err(UserError::new(format!(
            "--runner runs the binary under a prefix, but {} is a shared library, which the commands' programs load",
            binary.display()
        ))
        .hint("leave out --runner and run the program that loads it under the emulator in each command, e.g. --train \"qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=$(dirname {}) ./app\""));
    }
    // A command without {} runs the binary itself: one this host cannot run fails for sure.
    if prefix.is_none()
        && !args_all_have_placeholder
        && let Some(isa) = cannot_run_here(binary)
    {
        return Err(needs_runner(binary, isa));
    }
    Ok(())
}

/// Merges the training profiles into one, written to `dest` (Rivet's format, or fdata); with
/// `hashes_of`, the binary's code hashes go in too (Rivet's format), so that the profile kept
/// serves the next build as well (stale matching).
fn merge_profiles(runs: &[Run], dest: &Path, hashes_of: Option<&Path>) -> Result<(), UserError> {
    let mut located = Vec::new();
    for run in runs {
        match read_profile(&run.profile, None)? {
            Input::Located(p) => located.push(p),
            Input::Yaml(_) => {
                return Err(UserError::new("a counter file read as a YAML profile")
                    .hint("please report this"));
            }
        }
    }
    let mut merged = rivet_profile::merge::merge(located).map_err(|e| {
        UserError::new(format!("cannot merge the training profiles: {e}"))
            .hint("the binary must not change while rivet auto runs")
    })?;
    let fdata = dest.extension().is_some_and(|e| e == "fdata");
    // fdata has no room for hashes.
    if let Some(binary) = hashes_of.filter(|_| !fdata) {
        let named = merged
            .branches
            .keys()
            .flat_map(|(from, to)| [from, to])
            .chain(merged.samples.keys())
            .map(|l| l.name.as_str());
        merged.hashes = hashes_from_binary(binary, merged.build_id.as_deref(), named)?;
    }
    let fail =
        |e: &dyn std::fmt::Display| UserError::new(format!("cannot write the merged profile: {e}"));
    let text = if fdata {
        rivet_profile::fdata::write(&merged).map_err(|e| fail(&e))?
    } else {
        rivet_profile::native::write(&merged).map_err(|e| fail(&e))?
    };
    let (pending, file) = PendingOutput::create(dest)?;
    pending.finish(file, text.as_bytes(), 0o644)
}

/// `rivet optimize`'s arguments: the defaults, --verify, and the user's extras.
fn optimize_args(
    args: &AutoArgs,
    profile: &Path,
) -> Result<(crate::optimize::OptimizeArgs, Vec<String>), UserError> {
    #[derive(clap::Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        optimize: crate::optimize::OptimizeArgs,
    }
    let mut argv: Vec<OsString> = vec![
        "rivet optimize".into(),
        args.binary.clone().into(),
        "-o".into(),
        args.output.clone().into(),
        "--profile".into(),
        profile.into(),
        "--verify".into(),
    ];
    if !args.skip_funcs.is_empty() {
        argv.push(format!("--skip-funcs={}", args.skip_funcs.join(",")).into());
    }
    let (extra, warnings) = crate::optimize::translate_bolt_args(
        args.optimize_options.iter().map(OsString::from).collect(),
    );
    argv.extend(extra);
    let parsed = Wrapper::try_parse_from(argv).map_err(|e| {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("").trim_start_matches("error: ");
        UserError::new(format!("bad --optimize-option: {first}"))
            .hint("each --optimize-option is one argument of rivet optimize, e.g. --optimize-option=--hot-text")
    })?;
    Ok((parsed.optimize, warnings))
}

/// The training commands, in order: --train, then the words after `--`.
fn workloads(args: &AutoArgs) -> Vec<Workload> {
    let mut workloads: Vec<Workload> = args.train.iter().cloned().map(Workload::Shell).collect();
    if !args.command.is_empty() {
        workloads.push(Workload::Argv(args.command.clone()));
    }
    workloads
}

pub fn run(args: &AutoArgs) -> Result<(), UserError> {
    // First, before any thread exists (discovery starts rayon's): threads inherit the mask.
    let live: Shared = Arc::default();
    watch_signals(&live);
    check_args(args)?;
    let prefix = run_prefix::parse_option(args.runner.as_deref(), "--runner")?;
    let workloads = workloads(args);
    check_binary(
        &args.binary,
        workloads.iter().all(Workload::has_placeholder)
            && args.server.as_ref().is_none_or(|s| s.contains("{}")),
        prefix.as_ref(),
    )?;
    // Fail on an unwritable output now, not after the training.
    drop(PendingOutput::create(&args.output)?);
    let scratch = Scratch::create(&live)?;
    let progress = std::io::stderr().is_terminal();
    let name = args
        .binary
        .file_name()
        .map_or_else(|| OsString::from("binary"), |n| n.to_owned());
    let instrumented = scratch.dir.join("bin").join(&name);

    // Instrument.
    if progress {
        eprint!(
            "\r\x1b[Krivet auto: instrumenting {}",
            args.binary.display()
        );
    }
    let instrument_args = crate::instrument::InstrumentArgs {
        binary: args.binary.clone(),
        output: instrumented.clone(),
        profile: Some(scratch.dir.join("profiles/default.counts")),
        per_process: false,
        skip_funcs: args.skip_funcs.clone(),
        json: false,
        atomics: None,
    };
    let instrumented_summary = crate::instrument::run_with(&instrument_args, false)?;
    let run_as = match &prefix {
        Some(p) => p.write_script(&instrumented, &scratch.dir.join("run"))?,
        None => instrumented.clone(),
    };

    // Train.
    let mut runner = Runner {
        args,
        live: Arc::clone(&live),
        scratch: &scratch,
        run_as,
        prefix: prefix.as_ref(),
        progress,
        warnings: Vec::new(),
    };
    let mut runs = Vec::new();
    let total = workloads.len();
    let result = (|| {
        for (i, w) in workloads.iter().enumerate() {
            runs.push(runner.train(i, total, w)?);
        }
        if let Some(server) = &args.server {
            runs.push(runner.serve(server)?);
        }
        Ok::<(), UserError>(())
    })();
    let stray = processes_running(&instrumented, prefix.is_some());
    for &pid in &stray {
        let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
    }
    if !stray.is_empty() {
        runner.warnings.push(format!(
            "{} processes of the instrumented binary were still running outside the training commands' process groups; they were killed",
            stray.len()
        ));
    }
    result?;
    let mut warnings = std::mem::take(&mut runner.warnings);

    // Merge, optimize, verify.
    runner.note("merging profiles");
    let merged = scratch.dir.join("profiles/merged.prof");
    merge_profiles(&runs, &merged, None)?;
    if let Some(keep) = &args.profile_out {
        merge_profiles(&runs, keep, Some(&args.binary))?;
    }
    runner.note("optimizing");
    let (optimize_args, optimize_warnings) = optimize_args(args, &merged)?;
    if progress {
        eprint!("\r\x1b[K");
    }
    if !args.json {
        println!(
            "rivet auto: instrumented {} of {} functions of {}{}",
            instrumented_summary["instrumented"],
            instrumented_summary["functions"],
            args.binary.display(),
            prefix
                .as_ref()
                .map(|p| format!(", run under `{}`", p.command_line()))
                .unwrap_or_default()
        );
        for run in &runs {
            println!("  {}: {:.2} s  {}", run.what, run.seconds, run.command);
        }
    }
    let optimized = crate::optimize::run_with(&optimize_args, optimize_warnings, !args.json)?;

    // Measure.
    let bench = if args.bench {
        let workload = workloads
            .first()
            .expect("checked: --bench needs a training command");
        let bench_args = crate::bench::BenchArgs {
            a: args.binary.clone(),
            b: args.output.clone(),
            extra: Vec::new(),
            command: workload.bench_command(),
            runs: Some(args.bench_runs),
            randomize_layout: None,
            seed: 1,
            metric: crate::bench::Metric::Cpu,
            confidence: 0.95,
            max_time: None,
            cachegrind: false,
            runner: args.runner.clone(),
            json: false,
        };
        if !args.json {
            println!(
                "rivet auto: {} (A) vs {} (B) on `{}`:",
                args.binary.display(),
                args.output.display(),
                workload.describe()
            );
        }
        let (_, json) = crate::bench::run_with(&bench_args, !args.json)?;
        if json["verdict"] == "slower" {
            warnings.push(format!(
                "the optimized binary is slower on `{}`: {}",
                workload.describe(),
                json["summary"].as_str().unwrap_or_default()
            ));
        }
        Some(json)
    } else {
        None
    };

    if args.json {
        let json = serde_json::json!({
            "binary": args.binary.display().to_string(),
            "output": args.output.display().to_string(),
            "runner": prefix.as_ref().map(RunPrefix::words),
            "instrumented": {
                "functions": instrumented_summary["functions"],
                "instrumented": instrumented_summary["instrumented"],
                "counters": instrumented_summary["counters"],
            },
            "training": runs.iter().map(|r| serde_json::json!({
                "kind": r.what,
                "command": r.command,
                "seconds": r.seconds,
            })).collect::<Vec<_>>(),
            "profile_out": args.profile_out.as_ref().map(|p| p.display().to_string()),
            "optimize": optimized,
            "bench": bench,
            "warnings": warnings,
        });
        println!("{json}");
    }
    for w in &warnings {
        eprintln!("rivet: warning: {w}");
    }
    drop(scratch);
    Ok(())
}
