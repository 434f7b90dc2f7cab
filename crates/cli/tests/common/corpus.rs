//! The corpus as differential tests see it: its programs with their expected exit code and
//! output, how to run one (a shared library through the executable that loads it), and a
//! worker pool that checks many (program, configuration) pairs and reports every failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Marker arguments of `optimize_option_sets` the caller replaces: the function order file,
/// and "strip relocations" (`objcopy --remove-relocations=*` of the input).
pub const ORDER_FILE: &str = "{order-file}";
pub const NO_RELOCATIONS: &str = "{no-relocations}";

/// The option sets of `rivet optimize` the differential tests run: every block order, function
/// order and splitting option, llvm-bolt's spellings, and in place (no relocations).
pub fn optimize_option_sets() -> Vec<Vec<&'static str>> {
    vec![
        // The defaults: ext-TSP, cdsort, all cold blocks and cold landing pads split.
        vec![],
        // llvm-bolt's spellings, C3 and hot/cold (trailing) splitting.
        vec![
            "-reorder-blocks=ext-tsp",
            "-reorder-functions=hfsort",
            "-split-functions",
            "-split-all-cold=0",
            "-split-eh",
            "-dyno-stats",
            "-update-debug-sections",
            "-plt=all",
            // The hot text on huge pages, from start-up code hooked on the entry or DT_INIT.
            "-hugify",
            // Identical code folding (x86-64; AArch64 warns and folds nothing).
            "-icf",
            // Peepholes and conditional tail calls (x86-64; AArch64 warns, changes nothing).
            "-peepholes=all",
            "-simplify-conditional-tail-calls",
            // Indirect call promotion (x86-64; AArch64 warns and promotes nothing).
            "-indirect-call-promotion=calls",
            // Tail duplication (x86-64; AArch64 warns and copies nothing).
            "-tail-duplication=cache",
        ],
        // The peepholes and conditional tail calls alone, over the default layout, in
        // relocation mode and in place.
        vec!["--peepholes", "--simplify-conditional-tail-calls"],
        vec![
            NO_RELOCATIONS,
            "--peepholes=double-jumps,useless-branches,jumps-to-returns",
            "--simplify-conditional-tail-calls",
        ],
        vec![
            "--reorder-blocks",
            "reverse",
            "--reorder-functions",
            "exec-count",
            "--split-functions=false",
        ],
        vec![
            "--reorder-blocks",
            "none",
            "--reorder-functions",
            "none",
            "--cold-landing-pads",
            "--icf",
        ],
        vec![
            "--reorder-blocks=cache+",
            "--split-eh=false",
            "--align-functions",
            "64",
            "--hot-text",
            "--min-hot-count",
            "3",
            "-align-blocks",
            "--block-alignment",
            "32",
        ],
        vec![
            "--reorder-functions",
            "user",
            "--function-order",
            ORDER_FILE,
        ],
        vec![NO_RELOCATIONS],
    ]
}

/// Which corpus: the same sources built for x86-64 (run natively) or for AArch64 (run under
/// `qemu-aarch64` with the cross sysroot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)]
pub enum Target {
    X86_64,
    Aarch64,
}

/// Where the AArch64 C library and loader are (Debian's libc6-dev-arm64-cross).
const AARCH64_SYSROOT: &str = "/usr/aarch64-linux-gnu";

pub struct Entry {
    pub name: String,
    pub kind: String,
    pub path: PathBuf,
    pub expected_exit: Option<i32>,
    pub expected_stdout: Option<PathBuf>,
    pub needs: Option<String>,
}

impl Entry {
    pub fn is_shared_lib(&self) -> bool {
        self.kind == "shared-lib"
    }
}

/// The corpus directory and its programs (`manifest.tsv`).
pub fn corpus() -> (PathBuf, Vec<Entry>) {
    corpus_of(Target::X86_64)
}

/// The corpus of `target`.
pub fn corpus_of(target: Target) -> (PathBuf, Vec<Entry>) {
    let dir = match target {
        Target::X86_64 => super::corpus_dir(),
        Target::Aarch64 => super::corpus_dir_aarch64(),
    };
    let manifest = std::fs::read_to_string(dir.join("manifest.tsv")).unwrap();
    let mut lines = manifest.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let dash = |s: &str| (s != "-").then(|| s.to_string());
    let entries = lines
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Entry {
                name: f[col("name")].to_string(),
                kind: f[col("kind")].to_string(),
                path: dir.join(f[col("path")]),
                expected_exit: dash(f[col("expected_exit")]).map(|s| s.parse().unwrap()),
                expected_stdout: dash(f[col("expected_stdout")]).map(|s| dir.join(s)),
                needs: dash(f[col("needs")]),
            }
        })
        .collect();
    (dir, entries)
}

/// Runs `binary` (with `lib_dir` first on the library path) and returns (exit code, stdout).
pub fn run(binary: &Path, lib_dir: &Path) -> (Option<i32>, Vec<u8>) {
    run_on(Target::X86_64, binary, lib_dir)
}

/// [`run`] for `target`'s binaries: AArch64 ones under qemu-aarch64 (the library path goes
/// to the emulated program, not to qemu).
pub fn run_on(target: Target, binary: &Path, lib_dir: &Path) -> (Option<i32>, Vec<u8>) {
    let mut cmd = Command::new("timeout");
    match target {
        Target::X86_64 => {
            cmd.arg("20").arg(binary).env("LD_LIBRARY_PATH", lib_dir);
        }
        Target::Aarch64 => {
            cmd.arg("60")
                .arg("qemu-aarch64")
                .arg("-L")
                .arg(AARCH64_SYSROOT)
                .arg("-E")
                .arg(format!("LD_LIBRARY_PATH={}", lib_dir.display()))
                .arg(binary);
        }
    }
    let out = cmd.output().unwrap();
    (out.status.code(), out.stdout)
}

/// What to run to exercise `e` built as `binary`: the binary itself (libraries from the corpus
/// directory), or for a shared library the corpus executable that loads it, with `binary`'s
/// directory first on the library path. `None` for a library nothing loads.
pub fn runnable<'a>(
    entries: &'a [Entry],
    e: &'a Entry,
    binary: &Path,
    corpus_dir: &Path,
) -> Option<(PathBuf, PathBuf, &'a Entry)> {
    if e.is_shared_lib() {
        let user = entries
            .iter()
            .find(|u| u.needs.as_deref() == Some(e.name.as_str()))?;
        Some((
            user.path.clone(),
            binary.parent().unwrap().to_path_buf(),
            user,
        ))
    } else {
        Some((binary.to_path_buf(), corpus_dir.to_path_buf(), e))
    }
}

/// Runs `binary` (built from `e`) and compares exit code and output with the expected ones.
/// `Ok(false)` when there is nothing to run.
pub fn check(
    entries: &[Entry],
    e: &Entry,
    binary: &Path,
    corpus_dir: &Path,
) -> Result<bool, String> {
    check_on(Target::X86_64, entries, e, binary, corpus_dir)
}

/// [`check`] for `target`'s corpus.
pub fn check_on(
    target: Target,
    entries: &[Entry],
    e: &Entry,
    binary: &Path,
    corpus_dir: &Path,
) -> Result<bool, String> {
    let Some((exe, lib_dir, expect)) = runnable(entries, e, binary, corpus_dir) else {
        return Ok(false);
    };
    let (code, stdout) = run_on(target, &exe, &lib_dir);
    let want_stdout = expect
        .expected_stdout
        .as_ref()
        .map(|p| std::fs::read(p).unwrap());
    if code != expect.expected_exit || want_stdout.as_ref().is_some_and(|w| *w != stdout) {
        return Err(format!(
            "exit {code:?} (expected {:?}), stdout {}",
            expect.expected_exit,
            if want_stdout.is_some_and(|w| w == stdout) {
                "same"
            } else {
                "DIFFERENT"
            }
        ));
    }
    Ok(true)
}

/// Instruments `e` into `dir` (`rivet instrument`) and runs the instrumented build once (a
/// library through the executable that loads it), which must behave as the original. Returns
/// the counter file the run wrote.
#[allow(dead_code)]
pub fn instrument_and_run(
    entries: &[Entry],
    corpus_dir: &Path,
    e: &Entry,
    dir: &Path,
) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).unwrap();
    let inst = dir.join(e.path.file_name().unwrap());
    let counts = dir.join("counts");
    let out = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .arg("instrument")
        .arg(&e.path)
        .arg("-o")
        .arg(&inst)
        .arg("--profile")
        .arg(&counts)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(format!(
            "{}: instrument failed: {}",
            e.name,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    check(entries, e, &inst, corpus_dir).map_err(|m| format!("{} instrumented: {m}", e.name))?;
    Ok(counts)
}

/// Calls `work(worker, item)` for every item on one thread per core; collects the errors.
pub fn parallel<T: Sync>(
    items: &[T],
    work: impl Fn(usize, &T) -> Result<(), String> + Sync,
) -> Vec<String> {
    let failures = Mutex::new(Vec::new());
    let next = Mutex::new(0usize);
    std::thread::scope(|s| {
        for worker in 0..std::thread::available_parallelism().map_or(2, |n| n.get()) {
            let (failures, next, work) = (&failures, &next, &work);
            s.spawn(move || {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(item) = items.get(i) else { break };
                    if let Err(e) = work(worker, item) {
                        failures.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

/// Checks every (program, configuration) pair: `make(entry, config, slot, out)` writes the
/// binary to test at `out` (in the worker's scratch directory `slot`); it must then behave as
/// the original. Fails with every misbehaving pair listed, or when fewer than
/// `min_checked_per_config` programs per configuration were actually run.
pub fn differential<C: Sync>(
    work: &Path,
    configs: &[C],
    describe: impl Fn(&C) -> String + Sync,
    make: impl Fn(&Entry, &C, &Path, &Path) -> Result<(), String> + Sync,
    min_checked_per_config: usize,
) {
    differential_on(
        Target::X86_64,
        work,
        configs,
        describe,
        make,
        min_checked_per_config,
    )
}

/// [`differential`] over `target`'s corpus.
pub fn differential_on<C: Sync>(
    target: Target,
    work: &Path,
    configs: &[C],
    describe: impl Fn(&C) -> String + Sync,
    make: impl Fn(&Entry, &C, &Path, &Path) -> Result<(), String> + Sync,
    min_checked_per_config: usize,
) {
    let (dir, entries) = corpus_of(target);
    std::fs::create_dir_all(work).unwrap();
    let checked = Mutex::new(0usize);
    let jobs: Vec<(&Entry, &C)> = entries
        .iter()
        .flat_map(|e| configs.iter().map(move |c| (e, c)))
        .collect();
    let failures = parallel(&jobs, |worker, (e, config)| {
        let slot = work.join(format!("w{worker}"));
        std::fs::create_dir_all(&slot).unwrap();
        let out = slot.join(e.path.file_name().unwrap());
        let _ = std::fs::remove_file(&out);
        let what = format!("{} {}", e.name, describe(config));
        make(e, config, &slot, &out).map_err(|m| format!("{what}: {m}"))?;
        if check_on(target, &entries, e, &out, &dir).map_err(|m| format!("{what}: {m}"))? {
            *checked.lock().unwrap() += 1;
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(work);
    assert!(
        failures.is_empty(),
        "{} of {} outputs misbehave:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n")
    );
    let checked = *checked.lock().unwrap();
    assert!(
        checked >= min_checked_per_config * configs.len(),
        "only {checked} of {} outputs were run and compared",
        jobs.len()
    );
}
