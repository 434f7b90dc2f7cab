//! An instrumented program is guest code in someone else's process: these tests check that
//! what it reads at run time cannot turn it against its host, and that what operators do to
//! its counter file costs counts, never the program.
//!
//! - Privilege: a set-user-ID or set-group-ID program (AT_SECURE) ignores `RIVET_PROFILE`
//!   and counts only into the path fixed at instrumentation time, and only when that path is
//!   safe (absolute, no symbolic link on the way, a directory no other user may write, a file
//!   of its own). The tests run as root (CI does) and run the programs as `nobody`.
//! - The counter file under a running program: truncated (at start-up too), deleted, moved,
//!   reset with `rivet reset-counts`, on a full or read-only file system; and faults that are
//!   not the runtime's end the program exactly as they would without it.
//! - Inputs: a program started with its standard descriptors closed, and counter files with
//!   a right magic but mutated headers and sizes (a bounded fuzz run; `RIVET_HEADER_FUZZ_SECS`
//!   makes it run for that long instead, which `scripts/fuzz-counter-headers.sh` uses).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::{build_instrument_program, rivet, s, scratch};
use rivet_profile::counters::CounterFile;
use rivet_profile::{LocKind, Profile};

/// The runtime's line when the file loses counter pages under the program.
const LOST_PAGES: &str = "rivet: the profile file lost pages under the running program (truncated, or no disk space); this process's counts from now on are not saved\n";

fn require_root() {
    let out = Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0",
        "the hardening tests make set-user-ID programs and mount file systems: run them as root (CI does)"
    );
}

/// A directory under /tmp that `nobody` can traverse (the checkout may not be), emptied first.
fn shared_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/rivet-hardening-{name}"));
    let _ = Command::new("umount").arg(dir.join("small")).output();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    chmod(&dir, 0o755);
    dir
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mkdir(p: &Path, mode: u32) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    chmod(p, mode);
    p.to_path_buf()
}

fn counts_program(dir: &Path) -> PathBuf {
    build_instrument_program(dir, "counts.c", "gcc", &["-O2"], "counts")
}

/// tests/instrument/lib.c built as `dir/libcount.so`, with relocations kept.
fn count_library(dir: &Path) -> PathBuf {
    let lib = dir.join("libcount.so");
    let st = Command::new("gcc")
        .args(["-g", "-O2", "-Wl,--emit-relocs", "-shared", "-fPIC"])
        .arg(common::instrument_source("lib.c"))
        .arg("-o")
        .arg(&lib)
        .status()
        .expect("gcc is required (scripts/test.sh installs it)");
    assert!(st.success(), "gcc lib.c");
    lib
}

/// `: > file`, as an operator resets a profile by hand.
fn truncate_to_nothing(file: &Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(0)
        .unwrap();
}

fn instrument(input: &Path, out: &Path, profile: &str) {
    let r = rivet(&["instrument", s(input), "-o", s(out), "--profile", profile]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// `program args` run as `nobody` (group `nogroup`), with `env` set.
fn as_nobody(program: &Path, args: &[&str], env: &[(&str, &str)], cwd: &Path) -> Output {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .output()
        .expect("setpriv (util-linux) runs the program as nobody")
}

fn profile(counts: &Path) -> Profile {
    let bytes = std::fs::read(counts).unwrap_or_else(|e| panic!("{}: {e}", counts.display()));
    CounterFile::parse(&bytes).unwrap().to_profile()
}

/// The counters of a counter file, with the targets recorded at indirect calls set to zero:
/// those are addresses, not counts (and, outside the binary, differ from run to run with
/// address randomization).
fn raw_counts(counts: &Path) -> Vec<u64> {
    let file = CounterFile::parse(&std::fs::read(counts).unwrap()).unwrap();
    let mut v = file.counters;
    for f in &file.map.functions {
        for &(_, first) in &f.indirect {
            for pair in 0..rivet_profile::counters::SITE_TARGETS {
                v[(first + 2 * pair) as usize] = 0;
            }
        }
    }
    v
}

/// Times `name` was entered (as in instrument_counts.rs).
fn entries(p: &Profile, name: &str) -> u64 {
    p.branches
        .iter()
        .filter(|((_, to), _)| to.kind != LocKind::External && to.name == name && to.offset == 0)
        .map(|(_, c)| c.count)
        .sum()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn privileged_programs_ignore_rivet_profile_and_count_only_into_a_safe_fixed_path() {
    require_root();
    let root = shared_dir("privileged");
    let counts = counts_program(&root);
    let prof = mkdir(&root.join("prof"), 0o755);
    let root_only = mkdir(&root.join("root-only"), 0o700);
    let open = mkdir(&root.join("open"), 0o777);

    // The reproduction of the issue: set-user-ID root, run by nobody, RIVET_PROFILE aimed
    // at a directory only root may write, as a file and as a directory.
    let su = root.join("su.inst");
    instrument(&counts, &su, s(&prof.join("su.counts")));
    chmod(&su, 0o4755);
    let evil_file = format!("{}/evil.counts", s(&root_only));
    let evil_dir = format!("{}/", s(&root_only));
    for env in [&evil_file, &evil_dir] {
        let out = as_nobody(&su, &["loop", "7"], &[("RIVET_PROFILE", env)], &root);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "sink 7\n");
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
        assert!(listing(&root_only).is_empty(), "{:?}", listing(&root_only));
    }
    // The counts went to the fixed path, a root-owned directory: the file is root's, 0600.
    let fixed = prof.join("su.counts");
    let meta = std::fs::metadata(&fixed).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600));
    assert_eq!(entries(&profile(&fixed), "tick"), 14);

    // Set-group-ID (group staff): a directory writable by that group is the program's own.
    let gprof = mkdir(&root.join("gprof"), 0o775);
    let sg = root.join("sg.inst");
    instrument(&counts, &sg, s(&gprof.join("sg.counts")));
    for p in [&gprof, &sg] {
        let st = Command::new("chgrp").arg("staff").arg(p).status().unwrap();
        assert!(st.success());
    }
    chmod(&sg, 0o2755);
    let out = as_nobody(&sg, &["loop", "3"], &[("RIVET_PROFILE", &evil_dir)], &root);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(text(&out.stdout), "sink 3\n");
    assert!(listing(&root_only).is_empty());
    let g = gprof.join("sg.counts");
    let meta = std::fs::metadata(&g).unwrap();
    let nobody = 65534;
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (nobody, 50, 0o600)
    );
    assert_eq!(entries(&profile(&g), "tick"), 3);

    // Fixed paths a privileged process refuses: the program runs, says so, creates nothing.
    let theirs = prof.join("theirs.counts");
    std::fs::copy(&fixed, &theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(nobody), None).unwrap();
    let link = root.join("link");
    std::os::unix::fs::symlink(&prof, &link).unwrap();
    // A directory the caller's own group may write (here nogroup, which `nobody` runs as).
    let callers = mkdir(&root.join("callers-group"), 0o775);
    let st = Command::new("chgrp")
        .arg("nogroup")
        .arg(&callers)
        .status()
        .unwrap();
    assert!(st.success());
    let cases: [(&str, String, &Path, &str); 5] = [
        (
            "directory the caller's group may write",
            format!("{}/c.counts", s(&callers)),
            &callers,
            "a directory another user owns or may write",
        ),
        (
            "world-writable directory",
            format!("{}/o.counts", s(&open)),
            &open,
            "a directory another user owns or may write",
        ),
        (
            "relative path",
            "rel.counts".into(),
            &open,
            "a relative profile path",
        ),
        (
            "symbolic link on the way",
            format!("{}/l.counts", s(&link)),
            &prof,
            "without following symbolic links",
        ),
        (
            "a file another user owns",
            s(&theirs).to_string(),
            &prof,
            "a profile file another user owns",
        ),
    ];
    for (what, path, watched, message) in cases {
        let bin = root.join("refused.inst");
        instrument(&counts, &bin, &path);
        chmod(&bin, 0o4755);
        let before = listing(watched);
        let out = as_nobody(
            &bin,
            &["loop", "2"],
            &[("RIVET_PROFILE", &evil_file)],
            &open,
        );
        assert!(out.status.success(), "{what}: {out:?}");
        assert_eq!(text(&out.stdout), "sink 2\n", "{what}");
        let err = text(&out.stderr);
        assert!(
            err.contains(message) && err.ends_with("this run's counts are not saved\n"),
            "{what}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{what}: {err}");
        assert_eq!(listing(watched), before, "{what}");
        assert!(listing(&root_only).is_empty(), "{what}");
    }
    // Unprivileged, the same binaries honour RIVET_PROFILE as documented.
    let plain = root.join("plain.inst");
    instrument(&counts, &plain, s(&prof.join("plain.counts")));
    let mine = mkdir(&root.join("mine"), 0o777);
    let want = format!("{}/p.counts", s(&mine));
    let out = as_nobody(&plain, &["loop", "4"], &[("RIVET_PROFILE", &want)], &root);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(entries(&profile(&mine.join("p.counts")), "tick"), 4);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_privileged_program_ignores_rivet_profile_in_an_instrumented_library() {
    require_root();
    let root = shared_dir("library");
    let lib_dir = mkdir(&root.join("lib"), 0o755);
    let inst_dir = mkdir(&root.join("inst"), 0o755);
    let prof = mkdir(&root.join("prof"), 0o755);
    let root_only = mkdir(&root.join("root-only"), 0o700);
    let lib = count_library(&lib_dir);
    // The user finds the instrumented library through its RUNPATH: a set-user-ID program
    // ignores LD_LIBRARY_PATH.
    let user = root.join("user");
    let st = Command::new("gcc")
        .args(["-g", "-O2"])
        .arg(common::instrument_source("libuser.c"))
        .arg(format!("-L{}", s(&lib_dir)))
        .arg(format!("-Wl,-rpath,{}", s(&inst_dir)))
        .args(["-lcount", "-o"])
        .arg(&user)
        .status()
        .unwrap();
    assert!(st.success());
    instrument(
        &lib,
        &inst_dir.join("libcount.so"),
        s(&prof.join("lib.counts")),
    );
    chmod(&user, 0o4755);
    let evil = format!("{}/", s(&root_only));
    let out = as_nobody(&user, &["20", "7"], &[("RIVET_PROFILE", &evil)], &root);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert!(listing(&root_only).is_empty(), "{:?}", listing(&root_only));
    let counted = profile(&prof.join("lib.counts"));
    assert_eq!(entries(&counted, "lib_work"), 7);
    assert_eq!(entries(&counted, "lib_leaf"), 140);
    // Unprivileged, the library honours RIVET_PROFILE=DIR/.
    chmod(&user, 0o755);
    let mine = mkdir(&root.join("mine"), 0o777);
    let out = as_nobody(
        &user,
        &["20", "7"],
        &[("RIVET_PROFILE", &format!("{}/", s(&mine)))],
        &root,
    );
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(entries(&profile(&mine.join("lib.counts")), "lib_leaf"), 140);
    let _ = std::fs::remove_dir_all(&root);
}

/// A `step N M` run: started, stopped after its first N ticks until `between` is done, then
/// let go for M more.
fn stepped(
    binary: &Path,
    mode: &str,
    n: u64,
    m: u64,
    env: &[(&str, &Path)],
    between: impl FnOnce(),
) -> Output {
    let mut child: Child = Command::new(binary)
        .args([mode, &n.to_string(), &m.to_string()])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    between();
    // A child that set SIGBUS to its default may die of the truncation before it reads
    // this line (the code between its "ready" and its read increments counters): the write
    // then fails with a broken pipe, and the caller's assertions on the exit status say
    // whether that death was the expected one.
    let _ = child.stdin.as_mut().unwrap().write_all(b"go\n");
    child.wait_with_output().unwrap()
}

#[test]
fn truncation_deletion_and_replacement_leave_the_program_running() {
    let dir = scratch("hardening", "truncation");
    let counts = counts_program(&dir);
    let bin = dir.join("counts.inst");
    instrument(&counts, &bin, s(&dir.join("default.counts")));
    let file = dir.join("live.counts");
    let env = [("RIVET_PROFILE", file.as_path())];

    // Truncated to nothing, or to half its size, under the running program: it goes on, and
    // says once that its counts are no longer saved.
    for keep in [0u64, 1] {
        let _ = std::fs::remove_file(&file);
        let out = stepped(&bin, "step", 100, 50, &env, || {
            let len = std::fs::metadata(&file).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            f.set_len(len / 2 * keep).unwrap();
        });
        assert!(out.status.success(), "{out:?}");
        assert_eq!(text(&out.stdout), "sink 150\n");
        assert_eq!(text(&out.stderr), LOST_PAGES);
    }
    // The next run after a truncation to nothing starts the file afresh.
    truncate_to_nothing(&file);
    let out = Command::new(&bin)
        .args(["loop", "5"])
        .envs(env)
        .output()
        .unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(entries(&profile(&file), "tick"), 5);

    // Deleted: the program counts into the unlinked file, quietly, and nothing reappears.
    std::fs::remove_file(&file).unwrap();
    let out = stepped(&bin, "step", 10, 20, &env, || {
        std::fs::remove_file(&file).unwrap();
    });
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert!(!file.exists());

    // Replaced by mv: the program keeps counting into the file it opened, under its new name.
    let moved = dir.join("moved.counts");
    let out = stepped(&bin, "step", 10, 20, &env, || {
        std::fs::rename(&file, &moved).unwrap();
        std::fs::write(&file, b"someone else's file").unwrap();
    });
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(entries(&profile(&moved), "tick"), 30);
    assert_eq!(std::fs::read(&file).unwrap(), b"someone else's file");
    std::fs::remove_file(&file).unwrap();

    // A program that sets its own SIGBUS disposition (here the default) takes the fault of a
    // truncation itself: the documented price of its choice.
    let out = stepped(&bin, "step-dfl", 1, 1, &env, || {
        truncate_to_nothing(&file);
    });
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(7), "{out:?}");
}

/// The start-up: the runtime maps the file and adds the counts made before it (an IFUNC
/// resolver the loader ran) with its SIGBUS handler already in place, so a truncation in that
/// moment costs counts, not the program. strace holds the program for a few seconds right
/// after the runtime's `fallocate` (the call before the file is first mapped), the test
/// truncates the file then, and the program must finish as it would have.
#[test]
fn a_truncation_during_start_up_costs_counts_not_the_program() {
    let dir = scratch("hardening", "start-up");
    let early = build_instrument_program(&dir, "early.c", "gcc", &["-O2"], "early");
    let bin = dir.join("early.inst");
    let file = dir.join("early.counts");
    instrument(&early, &bin, s(&file));

    // Undisturbed, the resolver's count (made before the runtime ran) reaches the file.
    let out = Command::new(&bin).args(["early", "5"]).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(text(&out.stdout), "total 5\n");
    let p = profile(&file);
    // The resolver carries two symbols: the IFUNC `step` and its own `resolve_step`.
    assert_eq!(entries(&p, "resolve_step") + entries(&p, "step"), 1);
    assert_eq!(entries(&p, "main"), 1);

    let trace = dir.join("strace.out");
    let _ = std::fs::remove_file(&trace);
    let child = Command::new("strace")
        .args(["-qq", "-e", "trace=fallocate", "-e"])
        .arg("inject=fallocate:delay_exit=3000000")
        .arg("-o")
        .arg(&trace)
        .arg(&bin)
        .args(["early", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace is required (apt-get install strace)");
    // Bounded wait for the runtime's fallocate to be under way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&trace).is_ok_and(|t| t.contains("fallocate(")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the runtime made no fallocate call under strace"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    truncate_to_nothing(&file);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "total 5\n");
    assert_eq!(text(&out.stderr), LOST_PAGES);
}

#[test]
fn faults_that_are_not_the_runtimes_end_the_program_as_without_it() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("hardening", "foreign-faults");
    let counts = counts_program(&dir);
    let bin = dir.join("counts.inst");
    instrument(&counts, &bin, s(&dir.join("c.counts")));
    for mode in ["bus", "raise"] {
        let original = Command::new(&counts).args([mode, "x"]).output().unwrap();
        let instrumented = Command::new(&bin).args([mode, "x"]).output().unwrap();
        assert_eq!(original.status.signal(), Some(7), "{mode}: {original:?}");
        assert_eq!(
            instrumented.status.signal(),
            original.status.signal(),
            "{mode}"
        );
        assert_eq!(
            instrumented.status.core_dumped(),
            original.status.core_dumped()
        );
        assert_eq!(instrumented.stdout, original.stdout, "{mode}");
        assert!(instrumented.stderr.is_empty(), "{mode}: {instrumented:?}");
    }
}

/// A program's own SIGBUS handler, set before it loads an instrumented library: the runtime's
/// handler takes its place and passes on the faults it did not cause, which must reach the
/// program's handler as they would without the runtime: on the alternate stack it asked for,
/// with its mask, and, for a one-shot handler, once (the second fault ends the program).
#[test]
fn a_programs_own_sigbus_handler_sees_its_faults_as_without_the_runtime() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("hardening", "own-handler");
    let lib = count_library(&dir);
    let program = dir.join("busowner");
    let st = Command::new("gcc")
        .args(["-g", "-O2"])
        .arg(common::instrument_source("busowner.c"))
        .arg("-o")
        .arg(&program)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(st.success());
    let inst = dir.join("libcount.inst.so");
    let counts = dir.join("lib.counts");
    instrument(&lib, &inst, s(&counts));
    for (mode, expected_signal) in [("keep", None), ("once", Some(7))] {
        let original = Command::new(&program)
            .args([s(&lib), mode])
            .output()
            .unwrap();
        let instrumented = Command::new(&program)
            .args([s(&inst), mode])
            .output()
            .unwrap();
        assert_eq!(original.status.signal(), expected_signal, "{original:?}");
        assert!(
            text(&original.stdout).contains("fault 1: alternate stack"),
            "{original:?}"
        );
        assert_eq!(
            text(&instrumented.stdout),
            text(&original.stdout),
            "{mode}: {}",
            text(&instrumented.stderr)
        );
        assert_eq!(
            instrumented.status.signal(),
            original.status.signal(),
            "{mode}"
        );
        assert_eq!(instrumented.status.code(), original.status.code(), "{mode}");
        assert!(instrumented.stderr.is_empty(), "{mode}: {instrumented:?}");
    }
    // The library counted all the while.
    assert_eq!(entries(&profile(&counts), "lib_work"), 2 + 1);
}

#[test]
fn reset_counts_gives_a_clean_next_phase() {
    let dir = scratch("hardening", "reset");
    let counts = counts_program(&dir);
    let bin = dir.join("counts.inst");
    instrument(&counts, &bin, s(&dir.join("default.counts")));
    let file = dir.join("live.counts");
    let phase1 = dir.join("phase1.counts");
    let env = [("RIVET_PROFILE", file.as_path())];
    let out = stepped(&bin, "step", 100, 40, &env, || {
        let r = rivet(&["reset-counts", s(&file), "-o", s(&phase1)]);
        assert!(r.status.success(), "{}", text(&r.stderr));
        assert!(text(&r.stdout).contains("counters reset"), "{r:?}");
    });
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(entries(&profile(&phase1), "tick"), 100);
    assert_eq!(entries(&profile(&file), "tick"), 40);
    // Without -o the counts are discarded; the file stays a valid counter file, all counts 0.
    let r = rivet(&["reset-counts", s(&file)]);
    assert!(r.status.success(), "{r:?}");
    assert!(raw_counts(&file).iter().all(|&c| c == 0));

    // Phases taken while four threads count: every increment lands in exactly one phase, so
    // the phases add up to an unphased run's counters, counter for counter.
    let whole = dir.join("whole.counts");
    let out = Command::new(&bin)
        .args(["threads", "4", "300000"])
        .env("RIVET_PROFILE", &whole)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let want = raw_counts(&whole);
    let phased = dir.join("phased.counts");
    let mut child = Command::new(&bin)
        .args(["threads", "4", "300000"])
        .env("RIVET_PROFILE", &phased)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut sum = vec![0u64; want.len()];
    let mut phases = 0;
    loop {
        let done = child.try_wait().unwrap().is_some();
        if phased.exists() {
            let p = dir.join(format!("phase-{phases}.counts"));
            let r = rivet(&["reset-counts", s(&phased), "-o", s(&p)]);
            if r.status.success() {
                for (a, b) in sum.iter_mut().zip(raw_counts(&p)) {
                    *a += b;
                }
                phases += 1;
            } else {
                // The file exists but the runtime has not written its header yet.
                assert!(text(&r.stderr).contains("not a counter file"), "{r:?}");
            }
        }
        if done {
            break;
        }
    }
    for (a, b) in sum.iter_mut().zip(raw_counts(&phased)) {
        *a += b;
    }
    assert!(phases >= 1);
    assert_eq!(sum, want, "{phases} phases");
}

/// Mounts a small tmpfs at `at`, unmounted on drop.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(at: &Path) -> SmallFs {
        std::fs::create_dir_all(at).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs"])
            .arg(at)
            .status()
            .unwrap();
        assert!(
            st.success(),
            "mounting a tmpfs needs root (CI runs as root)"
        );
        SmallFs(at.to_path_buf())
    }

    /// Fills the file system: returns the filler's path.
    fn fill(&self) -> PathBuf {
        let filler = self.0.join("filler");
        let st = Command::new("dd")
            .args(["if=/dev/zero", "bs=4096", "status=none"])
            .arg(format!("of={}", s(&filler)))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(!st.success(), "dd stops at a full disk");
        filler
    }

    fn remount(&self, option: &str) -> Output {
        Command::new("mount")
            .args(["-o", &format!("remount,{option}")])
            .arg(&self.0)
            .output()
            .unwrap()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_or_read_only_file_system_costs_counts_not_the_program() {
    require_root();
    let root = shared_dir("filesystems");
    let counts = counts_program(&root);
    let bin = root.join("counts.inst");
    instrument(&counts, &bin, s(&root.join("default.counts")));
    let fs = SmallFs::mount(&root.join("small"));
    let file = fs.0.join("p.counts");
    let env = [("RIVET_PROFILE", file.as_path())];
    let run = |args: &[&str]| Command::new(&bin).args(args).envs(env).output().unwrap();

    // Every counter page has its blocks from the start: a full disk later costs nothing.
    let out = stepped(&bin, "step", 10, 5, &env, || {
        let filler = fs.fill();
        std::fs::remove_file(filler).unwrap();
    });
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(entries(&profile(&file), "tick"), 15);

    // A counter page turned into a hole while the disk is full (what a file without
    // fallocate would be): the first increment that needs it faults, the runtime gives up
    // the counts with one line, and the program goes on.
    let filler = fs.0.join("filler");
    let out = stepped(&bin, "step", 10, 5, &env, || {
        let len = std::fs::metadata(&file).unwrap().len();
        let st = Command::new("fallocate")
            .args(["-p", "-o", &(len - 4096).to_string(), "-l", "4096"])
            .arg(&file)
            .status()
            .unwrap();
        assert!(st.success());
        fs.fill();
    });
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), "sink 15\n");
    assert_eq!(text(&out.stderr), LOST_PAGES);

    // Started with the disk still full: the existing file with a hole cannot get its blocks,
    // and a new file cannot be set up (it is left empty for a later run).
    let before = std::fs::read(&file).unwrap();
    for (path, message) in [
        (&file, "cannot reserve disk space for the profile"),
        (&fs.0.join("new.counts"), "cannot write the profile"),
    ] {
        let out = Command::new(&bin)
            .args(["loop", "3"])
            .env("RIVET_PROFILE", path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(text(&out.stdout), "sink 3\n");
        let err = text(&out.stderr);
        assert!(
            err.contains(message) && err.contains("(errno 28)") && err.lines().count() == 1,
            "{err}"
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), before);
    assert_eq!(std::fs::metadata(fs.0.join("new.counts")).unwrap().len(), 0);
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(fs.0.join("new.counts")).unwrap();
    std::fs::remove_file(&file).unwrap();

    // Read-only: the kernel refuses to remount while a program maps a counter file for
    // writing (measured: "mount point is busy"), and the program is untouched.
    let out = stepped(&bin, "step", 2, 2, &env, || {
        let r = fs.remount("ro");
        assert!(!r.status.success(), "{r:?}");
        assert!(text(&r.stderr).contains("busy"), "{r:?}");
    });
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(entries(&profile(&file), "tick"), 4);
    // Read-only at start: the program runs, says it cannot open the file (EROFS).
    let r = fs.remount("ro");
    assert!(r.status.success(), "{r:?}");
    let before = std::fs::read(&file).unwrap();
    let out = run(&["loop", "3"]);
    assert!(out.status.success(), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot open the profile") && err.contains("(errno 30)"),
        "{err}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);
    drop(fs);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn closed_standard_descriptors_never_receive_the_profile() {
    let dir = scratch("hardening", "closed-fds");
    let counts = counts_program(&dir);
    let bin = dir.join("counts.inst");
    instrument(&counts, &bin, s(&dir.join("default.counts")));
    let file = dir.join("p.counts");
    // With 0, 1 and 2 closed the profile is opened as descriptor 0; the runtime closes it
    // before the program starts, so the program's own output cannot reach it.
    let sh = |profile: &Path| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("exec {} loop 9 <&- >&- 2>&-", s(&bin)))
            .env("RIVET_PROFILE", profile)
            .output()
            .unwrap()
    };
    let out = sh(&file);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(entries(&profile(&file), "tick"), 9);
    // A file of another build: the runtime's complaint goes to a closed stderr, never into
    // the file it opened.
    let other = dir.join("other.counts");
    let mut foreign = std::fs::read(&file).unwrap();
    foreign[40] ^= 0xff;
    std::fs::write(&other, &foreign).unwrap();
    let out = sh(&other);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read(&other).unwrap(), foreign);
}

/// xorshift64*: the header fuzzing's mutations, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A mutation of a valid counter file `good`: header fields set to lying or extreme values,
/// random bytes flipped, the file cut or extended.
fn mutate(good: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut f = good.to_vec();
    let extremes = [
        0u64,
        1,
        8,
        4095,
        4096,
        u64::MAX,
        u64::MAX / 8,
        i64::MAX as u64,
        good.len() as u64,
    ];
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            // A size or offset field of the header (16..48) set to a lying value.
            0 if f.len() >= 48 => {
                let at = 16 + 8 * rng.below(4) as usize;
                let v = if rng.below(2) == 0 {
                    extremes[rng.below(extremes.len() as u64) as usize]
                } else {
                    rng.next() >> rng.below(64)
                };
                f[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            // A byte of the header.
            1 => {
                let at = rng.below(64.min(f.len() as u64)) as usize;
                f[at] = rng.next() as u8;
            }
            // A byte anywhere.
            2 => {
                let at = rng.below(f.len() as u64) as usize;
                f[at] ^= 1 << rng.below(8);
            }
            // Cut.
            3 => {
                let len = rng.below(f.len() as u64 + 1) as usize;
                f.truncate(len);
                if f.is_empty() {
                    f.extend_from_slice(b"RIVETCNT");
                }
            }
            // Extended.
            4 => {
                let extra = [1u64, 8, 4096, 8192, rng.below(20000)][rng.below(5) as usize];
                f.resize(f.len() + extra as usize, rng.next() as u8);
            }
            // Counters set to extreme values (they are added to, never trusted).
            _ => {
                if f.len() > good.len() - 4096 {
                    let at = good.len() - 4096 + 8 * rng.below(512) as usize;
                    if at + 8 <= f.len() {
                        f[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
                    }
                }
            }
        }
    }
    f
}

#[test]
fn mutated_counter_file_headers_never_make_the_program_write_outside_its_counters() {
    let seconds: u64 = std::env::var("RIVET_HEADER_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // A long run gets a directory of its own: a test run meanwhile must not pull its files
    // away.
    let name = if seconds > 0 {
        format!("header-fuzz-long-{}", std::process::id())
    } else {
        "header-fuzz".to_string()
    };
    let dir = scratch("hardening", &name);
    let counts = counts_program(&dir);
    let bin = dir.join("counts.inst");
    instrument(&counts, &bin, s(&dir.join("default.counts")));
    let good_path = dir.join("good.counts");
    let out = Command::new(&bin)
        .args(["loop", "1"])
        .env("RIVET_PROFILE", &good_path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let good = std::fs::read(&good_path).unwrap();
    let counters_at = u64::from_le_bytes(good[16..24].try_into().unwrap()) as usize;
    assert_eq!(
        counters_at + 4096,
        good.len(),
        "the test program has one counter page"
    );
    let expected = Command::new(&counts).args(["loop", "3"]).output().unwrap();

    let start = std::time::Instant::now();
    let mut rng = Rng(0x5eed_0000_0000_0001 ^ seconds);
    let file = dir.join("fuzzed.counts");
    let (mut runs, mut accepted, mut refused) = (0u64, 0u64, 0u64);
    while runs < 300 || start.elapsed().as_secs() < seconds {
        let input = mutate(&good, &mut rng);
        std::fs::write(&file, &input).unwrap();
        let out = Command::new(&bin)
            .args(["loop", "3"])
            .env("RIVET_PROFILE", &file)
            .output()
            .unwrap();
        let after = std::fs::read(&file).unwrap();
        let case = format!("run {runs}, input {} bytes", input.len());
        assert_eq!(out.status.code(), Some(0), "{case}: {out:?}");
        assert_eq!(out.stdout, expected.stdout, "{case}");
        // Accepted only with the header and size the binary would write; then only the
        // counters change (by what this run counted). Anything else is left as it was.
        let same_header = input.len() == good.len() && input[..64] == good[..64];
        assert_eq!(after.len(), input.len(), "{case}: the file's size changed");
        assert_eq!(
            after[..counters_at.min(input.len())],
            input[..counters_at.min(input.len())],
            "{case}: bytes before the counters changed"
        );
        if same_header {
            assert!(out.stderr.is_empty(), "{case}: {}", text(&out.stderr));
            assert_ne!(after, input, "{case}: nothing counted");
            accepted += 1;
        } else {
            assert_eq!(after, input, "{case}: a refused file changed");
            let err = text(&out.stderr);
            assert!(
                err.starts_with("rivet: the profile holds counts of another binary")
                    && err.lines().count() == 1,
                "{case}: {err}"
            );
            refused += 1;
        }
        runs += 1;
        if runs % 2000 == 0 {
            println!(
                "header fuzz: {runs} executions in {:.0} s so far: {accepted} accepted, {refused} refused",
                start.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "header fuzz: {runs} executions in {:.0} s: {accepted} accepted, {refused} refused, no write outside the counters, no crash",
        start.elapsed().as_secs_f64()
    );
    assert!(accepted > 0 && refused > 0);
}
