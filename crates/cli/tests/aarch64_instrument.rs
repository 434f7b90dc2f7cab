//! `rivet instrument` on AArch64, checked under `qemu-aarch64 -L /usr/aarch64-linux-gnu` (no
//! Arm hardware here): the programs of `tests/instrument` count exactly (entries, calls,
//! indirect call targets, threads, fork, SIGKILL) with LSE and with LL/SC increments, gcc and
//! clang, PIE and not, statically linked, with PAC/BTI landing pads and with inline exclusive
//! loops; the counter file keeps its promises (0600, no symlink followed, another binary's
//! file left alone, runs accumulate); and every AArch64 corpus program, instrumented, prints
//! what it printed, leaves counts that conserve flow and double exactly over two runs, and
//! optimized from them with `--verify` still behaves.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use common::corpus::{Target, check_on, corpus_of, parallel, runnable};
use common::{instrument_source, rivet, s, scratch};
use rivet_profile::counters::{CounterArch, CounterFile, OUTSIDE, solve_edges};
use rivet_profile::{LocKind, Profile};

const SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// `qemu-aarch64` on `binary` with `cpu` (`max` has LSE; `cortex-a53` is Armv8.0, without).
fn qemu(cpu: &str, binary: &Path) -> Command {
    let mut c = Command::new("timeout");
    c.args(["120", "qemu-aarch64", "-cpu", cpu, "-L", SYSROOT])
        .arg(binary);
    c
}

/// Cross-builds `tests/instrument/SRC` for AArch64 with `-g -Wl,--emit-relocs`.
fn build(dir: &Path, src: &str, compiler: &str, flags: &[&str], name: &str) -> PathBuf {
    let out = dir.join(name);
    let mut c = Command::new(compiler);
    if compiler.starts_with("clang") {
        c.args(["--target=aarch64-linux-gnu", "-fuse-ld=lld"]);
    }
    let status = c
        .args(["-g", "-Wl,--emit-relocs"])
        .args(flags)
        .arg(instrument_source(src))
        .arg("-o")
        .arg(&out)
        .arg("-lpthread")
        .status()
        .unwrap_or_else(|e| {
            panic!("{compiler} is required (gcc-aarch64-linux-gnu, clang-19, lld-19): {e}")
        });
    assert!(status.success(), "{compiler} {flags:?} {src}");
    out
}

fn instrument(input: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["instrument", s(input), "-o", s(out), "--json"];
    args.extend_from_slice(extra);
    let r = rivet(&args);
    assert!(
        r.status.success(),
        "rivet instrument {}: {}",
        input.display(),
        String::from_utf8_lossy(&r.stderr)
    );
    serde_json::from_slice(&r.stdout).unwrap()
}

fn counter_file(counts: &Path) -> CounterFile {
    let bytes = std::fs::read(counts).unwrap_or_else(|e| panic!("{}: {e}", counts.display()));
    let file = CounterFile::parse(&bytes).unwrap();
    assert_eq!(file.map.arch, CounterArch::Aarch64);
    file
}

fn profile(counts: &Path) -> Profile {
    counter_file(counts).to_profile()
}

/// Times `name` was entered.
fn entries(p: &Profile, name: &str) -> u64 {
    p.branches
        .iter()
        .filter(|((_, to), _)| to.kind != LocKind::External && to.name == name && to.offset == 0)
        .map(|(_, c)| c.count)
        .sum()
}

fn calls(p: &Profile, caller: &str, callee: &str) -> u64 {
    p.branches
        .iter()
        .filter(|((from, to), _)| from.name == caller && to.name == callee && to.offset == 0)
        .map(|(_, c)| c.count)
        .sum()
}

/// Functions a call to which may return more often than it was made (GCC's
/// `returns_twice` list): flow through their callers is not conserved, by nature.
const RETURNS_TWICE: &[&str] = &[
    "setjmp",
    "sigsetjmp",
    "savectx",
    "vfork",
    "fork",
    "getcontext",
];

/// Every vertex of every function's counting graph but the outside balances: what came in
/// went out. The solver infers the uncounted edges from the others, clamping what would be
/// negative, so a counter that missed or doubled increments shows as an imbalance. Callers
/// of a `RETURNS_TWICE` function are left out (`setjmp` returns again at each `longjmp`,
/// `fork` in both processes).
fn flow_conserved(file: &CounterFile) -> Result<(), String> {
    let names: std::collections::HashMap<u64, &str> = file
        .map
        .symbols
        .iter()
        .map(|(a, n)| (*a, n.split('@').next().unwrap_or(n)))
        .collect();
    // As GCC matches them: leading underscores do not count (`_setjmp`, `__sigsetjmp`), nor
    // glibc's `__libc_` prefix (a static C library names `fork` `__libc_fork`).
    let returns_twice = |target: u64| {
        names.get(&target).is_some_and(|n| {
            let bare = n.trim_start_matches('_');
            let bare = bare.strip_prefix("libc_").unwrap_or(bare);
            RETURNS_TWICE.contains(&bare)
        })
    };
    for f in &file.map.functions {
        if f.calls.iter().any(|c| returns_twice(c.target)) {
            continue;
        }
        let counts = solve_edges(f, &file.counters);
        let mut balance = vec![0i128; f.vertices.len()];
        for (e, &c) in f.edges.iter().zip(&counts) {
            balance[e.to as usize] += i128::from(c);
            balance[e.from as usize] -= i128::from(c);
        }
        if let Some(v) = (0..balance.len()).find(|&v| v != OUTSIDE as usize && balance[v] != 0) {
            return Err(format!(
                "{}: flow not conserved at vertex {v} ({:#x}): {}",
                f.name, f.vertices[v], balance[v]
            ));
        }
    }
    Ok(())
}

/// Runs `args` on the original and the instrumented build under qemu (`cpu`): same stdout
/// and exit, nothing on stderr; the profile, whose flow must be conserved (`flow_conserved`)
/// unless, in a static build, where the C library is instrumented too, the run forks or ends
/// threads: the system calls that return twice (`clone` in `_Fork`) or never (a thread's
/// `exit` in `start_thread`) then sit inside instrumented blocks.
fn counted(cpu: &str, original: &Path, inst: &Path, args: &[&str]) -> Profile {
    let counts = inst.with_extension(format!("{}.counts", args.join("-")));
    let _ = std::fs::remove_file(&counts);
    let expected = qemu(cpu, original).args(args).output().unwrap();
    let got: Output = qemu(cpu, inst)
        .args(args)
        .env("RIVET_PROFILE", &counts)
        .output()
        .unwrap();
    let what = format!("{} {args:?} on {cpu}", inst.display());
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&expected.stdout),
        "{what}"
    );
    assert_eq!(got.status.code(), expected.status.code(), "{what}");
    assert!(
        got.stderr.is_empty(),
        "{what}: {}",
        String::from_utf8_lossy(&got.stderr)
    );
    let file = counter_file(&counts);
    let static_build = inst.to_string_lossy().contains("static");
    if !(static_build && matches!(args[0], "threads" | "fork")) {
        flow_conserved(&file).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    file.to_profile()
}

/// The counts of `tests/instrument/counts.c`'s modes, exactly (as the x86-64 test has them).
fn check_counts(cpu: &str, original: &Path, inst: &Path) {
    let what = format!("{} on {cpu}", inst.display());
    let p = counted(cpu, original, inst, &["loop", "1000"]);
    assert_eq!(entries(&p, "tick"), 1000, "{what} loop");
    assert_eq!(entries(&p, "main"), 1, "{what} loop");

    let p = counted(cpu, original, inst, &["switch", "1100"]);
    assert_eq!(entries(&p, "dispatch"), 1100, "{what} switch");
    for k in 0..8 {
        assert_eq!(entries(&p, &format!("case{k}")), 100, "{what} case{k}");
    }
    assert_eq!(entries(&p, "fallback"), 300, "{what} switch default");

    let p = counted(cpu, original, inst, &["recurse", "50"]);
    assert_eq!(entries(&p, "rec"), 51, "{what} recursion");
    assert_eq!(calls(&p, "rec", "rec"), 50, "{what} recursion");

    let p = counted(cpu, original, inst, &["threads", "4", "20000"]);
    assert_eq!(entries(&p, "worker"), 4, "{what} threads");
    assert_eq!(entries(&p, "tick"), 80_000, "{what} threads");

    let p = counted(cpu, original, inst, &["fptr", "900"]);
    for k in 0..9 {
        assert_eq!(entries(&p, &format!("target{k}")), 100, "{what} target{k}");
    }
    for k in 0..7 {
        assert_eq!(
            calls(&p, "call_through", &format!("target{k}")),
            100,
            "{what} site target{k}"
        );
    }
    let unknown: u64 = p
        .branches
        .iter()
        .filter(|((from, to), _)| from.name == "call_through" && to.kind == LocKind::External)
        .map(|(_, c)| c.count)
        .sum();
    assert_eq!(unknown, 200, "{what} overflow");

    let p = counted(cpu, original, inst, &["fork", "300", "200"]);
    assert_eq!(entries(&p, "tick"), 500, "{what} fork");
    assert_eq!(entries(&p, "main"), 1, "{what} fork");
}

#[test]
fn counts_are_exact_with_lse_and_with_llsc() {
    let dir = scratch("aarch64-instrument", "counts");
    let builds = [
        build(
            &dir,
            "counts.c",
            "aarch64-linux-gnu-gcc",
            &["-O2"],
            "gcc-O2-pie",
        ),
        build(
            &dir,
            "counts.c",
            "aarch64-linux-gnu-gcc",
            &["-O0", "-no-pie"],
            "gcc-O0-nopie",
        ),
        build(&dir, "counts.c", "clang-19", &["-O2"], "clang-O2-pie"),
        build(
            &dir,
            "counts.c",
            "clang-19",
            &["-O3", "-no-pie"],
            "clang-O3-nopie",
        ),
        build(
            &dir,
            "counts.c",
            "aarch64-linux-gnu-gcc",
            &["-O2", "-static"],
            "gcc-O2-static",
        ),
        // PAC-RET and BTI landing pads, which probes must stay behind.
        build(
            &dir,
            "counts.c",
            "aarch64-linux-gnu-gcc",
            &["-O2", "-mbranch-protection=standard"],
            "gcc-O2-pac",
        ),
        // tick()'s atomic add inline as an ldxr..stxr loop, where no probe may go.
        build(
            &dir,
            "counts.c",
            "aarch64-linux-gnu-gcc",
            &["-O2", "-mno-outline-atomics"],
            "gcc-O2-inline-llsc",
        ),
    ];
    for original in &builds {
        for (atomics, cpus) in [("lse", &["max"][..]), ("llsc", &["max", "cortex-a53"][..])] {
            let inst = original.with_extension(format!("inst-{atomics}"));
            let summary = instrument(original, &inst, &["--atomics", atomics]);
            assert_eq!(summary["atomics"], atomics);
            assert_eq!(summary["flag_saving_probes"], 0);
            for cpu in cpus {
                check_counts(cpu, original, &inst);
            }
        }
    }
}

#[test]
fn the_default_atomics_follow_the_binary() {
    let dir = scratch("aarch64-instrument", "default-atomics");
    // gcc's default: outline atomics (libgcc picks LSE or LL/SC at run time), so the
    // binary's own code says nothing of LSE: LL/SC, which every core runs.
    let plain = build(&dir, "counts.c", "aarch64-linux-gnu-gcc", &["-O2"], "plain");
    let summary = instrument(&plain, &dir.join("plain.inst"), &[]);
    assert_eq!(summary["atomics"], "llsc");
    // Built for Armv8.1: the compiler emits LSE itself, so the cores have it.
    let v81 = build(
        &dir,
        "counts.c",
        "aarch64-linux-gnu-gcc",
        &["-O2", "-march=armv8.1-a"],
        "v81",
    );
    let inst = dir.join("v81.inst");
    let summary = instrument(&v81, &inst, &[]);
    assert_eq!(summary["atomics"], "lse");
    check_counts("max", &v81, &inst);
    // The text summary says which and why.
    let r = rivet(&["instrument", s(&v81), "-o", s(&dir.join("v81.text"))]);
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("atomic increments: lse (from the binary's own atomics)"),
        "{text}"
    );
}

#[test]
fn a_process_killed_with_sigkill_leaves_its_counts() {
    let dir = scratch("aarch64-instrument", "sigkill");
    let original = build(&dir, "counts.c", "aarch64-linux-gnu-gcc", &["-O2"], "prog");
    for atomics in ["lse", "llsc"] {
        let inst = dir.join(format!("prog.{atomics}"));
        instrument(&original, &inst, &["--atomics", atomics]);
        let counts = dir.join(format!("killed.{atomics}.counts"));
        // qemu itself, not under `timeout`: the process killed is the emulated program.
        let mut child = Command::new("qemu-aarch64")
            .args(["-cpu", "max", "-L", SYSROOT])
            .arg(&inst)
            .args(["block", "700"])
            .env("RIVET_PROFILE", &counts)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        let p = profile(&counts);
        assert_eq!(entries(&p, "tick"), 700, "{atomics}");
        assert_eq!(entries(&p, "main"), 1, "{atomics}");
    }
}

#[test]
fn the_counter_file_is_private_accumulates_and_is_never_misused() {
    let dir = scratch("aarch64-instrument", "file");
    let original = build(&dir, "counts.c", "aarch64-linux-gnu-gcc", &["-O2"], "prog");
    let inst = dir.join("prog.inst");
    instrument(&original, &inst, &[]);
    // The default path: next to the output, created 0600.
    let default = dir.join("prog.inst.counts");
    let _ = std::fs::remove_file(&default);
    let out = qemu("max", &inst).args(["loop", "10"]).output().unwrap();
    assert!(out.status.success());
    let mode = std::fs::metadata(&default).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Runs accumulate.
    let out = qemu("max", &inst).args(["loop", "15"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(entries(&profile(&default), "tick"), 25);

    // A stale file, of another instrumentation, is left alone; the program still runs.
    let other_prog = build(&dir, "counts.c", "aarch64-linux-gnu-gcc", &["-O1"], "other");
    let other_inst = dir.join("other.inst");
    instrument(&other_prog, &other_inst, &[]);
    let before = std::fs::read(&default).unwrap();
    let out = qemu("max", &other_inst)
        .args(["loop", "4"])
        .env("RIVET_PROFILE", &default)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sink 4\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("another binary or instrumentation") && stderr.contains(s(&default)),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&default).unwrap(), before);

    // Never through a symlink: the target is untouched.
    let target = dir.join("precious");
    std::fs::write(&target, b"keep me").unwrap();
    let link = dir.join("link.counts");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = qemu("max", &inst)
        .args(["loop", "3"])
        .env("RIVET_PROFILE", &link)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot open the profile"), "{stderr}");
    assert!(stderr.contains("errno 40"), "{stderr}"); // ELOOP
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");

    // RIVET_PROFILE naming a directory, and one file per process.
    let per = dir.join("per");
    let _ = std::fs::remove_dir_all(&per);
    std::fs::create_dir_all(&per).unwrap();
    let out = qemu("max", &inst)
        .args(["loop", "6"])
        .env("RIVET_PROFILE", format!("{}/", s(&per)))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(entries(&profile(&per.join("prog.inst.counts")), "tick"), 6);
    let inst_per = dir.join("prog.per");
    let r = rivet(&[
        "instrument",
        s(&original),
        "-o",
        s(&inst_per),
        "--profile",
        s(&per.join("p.counts")),
        "--per-process",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let out = qemu("max", &inst_per).args(["loop", "5"]).output().unwrap();
    assert!(out.status.success());
    let files: Vec<String> = std::fs::read_dir(&per)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("p.counts."))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let pid = files[0].trim_start_matches("p.counts.");
    assert!(pid.parse::<u32>().is_ok(), "{files:?}");
    assert_eq!(entries(&profile(&per.join(&files[0])), "tick"), 5);
}

fn file_map(counts: &Path) -> rivet_profile::counters::CounterMap {
    counter_file(counts).map
}

/// The first 64-bit word of the counter area that a second identical run did not double:
/// every word is a count but the target addresses of indirect call sites' tables, which the
/// second run finds already claimed and must leave as they were.
fn first_undoubled(
    map: &rivet_profile::counters::CounterMap,
    once: &[u64],
    twice: &[u64],
) -> Option<usize> {
    let mut target_word = vec![false; once.len()];
    for f in &map.functions {
        for &(_, table) in &f.indirect {
            for pair in 0..=rivet_profile::counters::SITE_TARGETS {
                if let Some(w) = target_word.get_mut((table + 2 * pair) as usize) {
                    *w = true;
                }
            }
        }
    }
    (0..once.len()).find(|&k| {
        if target_word[k] {
            twice[k] != once[k]
        } else {
            once[k].checked_mul(2) != Some(twice[k])
        }
    })
}

/// Runs the corpus program `exe` under qemu (libraries from `lib_dir`) counting into `counts`;
/// (exit code, stdout).
fn run_counting(exe: &Path, lib_dir: &Path, counts: &Path) -> (Option<i32>, Vec<u8>) {
    let out = Command::new("timeout")
        .args(["120", "qemu-aarch64", "-L", SYSROOT])
        .arg("-E")
        .arg(format!("LD_LIBRARY_PATH={}", lib_dir.display()))
        .arg(exe)
        .env("RIVET_PROFILE", counts)
        .output()
        .unwrap();
    (out.status.code(), out.stdout)
}

#[test]
fn every_corpus_program_counts_consistently_and_optimizes_from_its_counts() {
    let (corpus_dir, entries) = corpus_of(Target::Aarch64);
    let work = scratch("aarch64-instrument", "corpus");
    let checked = Mutex::new((0usize, 0usize));
    let failures = parallel(&entries, |_, e| {
        let dir = work.join(&e.name);
        std::fs::create_dir_all(&dir).unwrap();
        let inst = dir.join(e.path.file_name().unwrap());
        let counts = dir.join("counts");
        let _ = std::fs::remove_file(&counts);
        let r = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .arg("instrument")
            .arg(&e.path)
            .arg("-o")
            .arg(&inst)
            .output()
            .unwrap();
        if !r.status.success() {
            return Err(format!(
                "{}: instrument: {}",
                e.name,
                String::from_utf8_lossy(&r.stderr)
            ));
        }
        let Some((exe, lib_dir, expect)) = runnable(&entries, e, &inst, &corpus_dir) else {
            return Ok(());
        };
        let want = expect
            .expected_stdout
            .as_ref()
            .map(|p| std::fs::read(p).unwrap());
        // Two runs into one file: the same output each time, and every counter exactly
        // twice what the first run left (the corpus programs are deterministic).
        let mut after = Vec::new();
        for run in 0..2 {
            let (code, stdout) = run_counting(&exe, &lib_dir, &counts);
            if code != expect.expected_exit || want.as_ref().is_some_and(|w| *w != stdout) {
                return Err(format!(
                    "{} instrumented, run {run}: exit {code:?} (expected {:?}), stdout {}",
                    e.name,
                    expect.expected_exit,
                    if want.as_ref().is_some_and(|w| *w == stdout) {
                        "same"
                    } else {
                        "DIFFERENT"
                    }
                ));
            }
            let bytes = std::fs::read(&counts)
                .map_err(|err| format!("{}: no counter file: {err}", e.name))?;
            let file = CounterFile::parse(&bytes).map_err(|err| format!("{}: {err}", e.name))?;
            if file.map.arch != CounterArch::Aarch64 {
                return Err(format!("{}: counter file not marked AArch64", e.name));
            }
            flow_conserved(&file).map_err(|m| format!("{} run {run}: {m}", e.name))?;
            after.push(file.counters);
        }
        if let Some(k) = first_undoubled(&file_map(&counts), &after[0], &after[1]) {
            return Err(format!(
                "{}: counter {k} is {} after one run, {} after two",
                e.name, after[0][k], after[1][k]
            ));
        }
        // Optimized from the counts, verified, and run.
        let optimized = dir.join(format!(
            "opt-{}",
            e.path.file_name().unwrap().to_string_lossy()
        ));
        let opt = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .arg("optimize")
            .arg(&e.path)
            .arg("-o")
            .arg(&optimized)
            .arg("--profile")
            .arg(&counts)
            .arg("--verify")
            .output()
            .unwrap();
        if !opt.status.success() {
            return Err(format!(
                "{}: optimize: {}",
                e.name,
                String::from_utf8_lossy(&opt.stderr)
            ));
        }
        // The optimized library under the name its user loads.
        let optimized = if e.is_shared_lib() {
            let named = dir.join("lib").join(e.path.file_name().unwrap());
            std::fs::create_dir_all(named.parent().unwrap()).unwrap();
            std::fs::rename(&optimized, &named).unwrap();
            named
        } else {
            optimized
        };
        check_on(Target::Aarch64, &entries, e, &optimized, &corpus_dir)
            .map_err(|m| format!("{} optimized: {m}", e.name))?;
        let mut c = checked.lock().unwrap();
        c.0 += 1;
        c.1 += usize::from(e.is_shared_lib());
        Ok(())
    });
    let (programs, libraries) = *checked.lock().unwrap();
    let _ = std::fs::remove_dir_all(&work);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        programs >= 230 && libraries >= 10,
        "only {programs} corpus programs ({libraries} libraries) were run"
    );
}

/// The AArch64 builds of Lua and SQLite (`scripts/build-real-aarch64.sh`: gcc PIE and not,
/// clang, clang with PAC and BTI), instrumented, pass their workloads under qemu-aarch64
/// against the x86-64 builds' results while counting, and their counts are consistent: flow
/// conserved in every function, and (Lua) one deterministic run repeated doubles every counter.
#[test]
fn aarch64_lua_and_sqlite_instrumented_pass_their_workloads_and_count_consistently() {
    let builds = common::aarch64_real_builds(&[]);
    assert_eq!(builds.len(), 8, "{builds:?}");
    let scripts = common::repo_root().join("scripts");
    for (name, input) in &builds {
        let dir = scratch("real-instrument-aarch64", name);
        let file = input.file_name().unwrap().to_string_lossy().into_owned();
        let inst = dir.join(&file);
        let counts = dir.join(format!("{file}.counts"));
        let _ = std::fs::remove_file(&counts);
        instrument(input, &inst, &["--profile", s(&counts)]);
        // The build's wrapper runs the binary next to it: the same, for the instrumented one.
        let wrapper_path = common::qemu_wrapper(input, &inst, &dir);
        let script = |args: &[&std::ffi::OsStr]| {
            let out = Command::new("bash").args(args).output().expect("bash");
            assert!(
                out.status.success(),
                "{name} instrumented: {args:?} found differences:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        // One run, then the same again: flow conserved both times, and for Lua every counter doubles.
        let deterministic = |what: &str| {
            let run = || {
                let mut c = Command::new(&wrapper_path);
                if name.starts_with("lua") {
                    // Not tables.lua: it draws from math.random, which Lua 5.4 seeds from
                    // the clock and an address at start-up, so two runs differ.
                    c.arg(common::repo_root().join("tests/lua/strings.lua"));
                } else {
                    c.arg(":memory:").stdin(
                        std::fs::File::open(common::repo_root().join("bench/sqlite/workload.sql"))
                            .unwrap(),
                    );
                }
                let out = c.output().unwrap();
                assert!(
                    out.status.success(),
                    "{name} {what}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                out.stdout
            };
            let _ = std::fs::remove_file(&counts);
            let first_out = run();
            let once = counter_file(&counts);
            flow_conserved(&once).unwrap_or_else(|e| panic!("{name} {what}: {e}"));
            assert_eq!(
                run(),
                first_out,
                "{name} {what}: the two runs printed differently"
            );
            let twice = counter_file(&counts);
            flow_conserved(&twice).unwrap_or_else(|e| panic!("{name} {what}: {e}"));
            // SQLite's run is not repeatable to the branch: it seeds its PRNG from the OS and
            // the clock (the x86-64 build, instrumented, differs between two runs of this
            // workload too), so only Lua's counts must double.
            if name.starts_with("lua") {
                let k = first_undoubled(&once.map, &once.counters, &twice.counters);
                assert!(k.is_none(), "{name} {what}: counter {k:?} did not double");
            }
            let counted = once.counters.iter().filter(|&&c| c > 0).count();
            assert!(
                counted > 500,
                "{name} {what}: only {counted} counters moved"
            );
        };
        deterministic("workload");
        let _ = std::fs::remove_file(&counts);
        if name.starts_with("lua") {
            script(&[
                scripts.join("check-lua.sh").as_os_str(),
                "--timeout".as_ref(),
                "300".as_ref(),
                "--only".as_ref(),
                "tests/*".as_ref(),
                wrapper_path.as_os_str(),
                common::real_program("lua-gcc").as_os_str(),
            ]);
        } else {
            script(&[
                scripts.join("check-sqlite.sh").as_os_str(),
                "--mode".as_ref(),
                "shell".as_ref(),
                "--timeout".as_ref(),
                "300".as_ref(),
                wrapper_path.as_os_str(),
                "--reference".as_ref(),
                common::real_program("sqlite3-gcc").as_os_str(),
            ]);
        }
        // The check scripts' runs all counted into the file: the profile of the input.
        let file_counts = counter_file(&counts);
        let profile = file_counts.to_profile();
        let elf_data = std::fs::read(input).unwrap();
        let elf = rivet_elf::ElfFile::parse(&elf_data).unwrap();
        let id: String = elf
            .build_id()
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(profile.build_id.as_deref(), Some(id.as_str()), "{name}");
    }
}

/// The runtime's SIGBUS handler, as on x86-64: the counter file truncated under the running
/// program costs the counts from then on, not the program (one line on stderr); a SIGBUS the
/// runtime did not cause ends the program exactly as it ends the original.
#[test]
fn truncation_costs_counts_not_the_program_and_other_sigbus_end_it_as_before() {
    let dir = scratch("aarch64-instrument", "sigbus");
    let original = build(&dir, "counts.c", "aarch64-linux-gnu-gcc", &["-O2"], "prog");
    for atomics in ["lse", "llsc"] {
        let inst = dir.join(format!("prog.{atomics}"));
        instrument(&original, &inst, &["--atomics", atomics]);
        let counts = dir.join(format!("truncated.{atomics}.counts"));
        let _ = std::fs::remove_file(&counts);
        let mut child = qemu("max", &inst)
            .args(["step", "100", "200"])
            .env("RIVET_PROFILE", &counts)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        std::fs::File::create(&counts).unwrap(); // truncated to nothing
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        assert!(out.status.success(), "{atomics}: {:?}", out.status);
        assert_eq!(rest, "sink 300\n", "{atomics}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("the profile file lost pages under the running program"),
            "{atomics}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{atomics}: {stderr}");
        // raise(SIGBUS): not the runtime's fault; the same end as the original's.
        let expected = qemu("max", &original).arg("raise").output().unwrap();
        let got = qemu("max", &inst)
            .arg("raise")
            .env("RIVET_PROFILE", dir.join("raise.counts"))
            .output()
            .unwrap();
        assert_eq!(got.status.code(), expected.status.code(), "{atomics}");
        assert_eq!(got.stdout, expected.stdout, "{atomics}");
    }
}
