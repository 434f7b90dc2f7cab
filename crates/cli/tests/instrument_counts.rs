//! `rivet instrument` counts exactly: programs with known dynamic behaviour (a loop of N
//! iterations, a switch hit in a known pattern, a recursion of known depth, exceptions thrown
//! K times, threads, fork, a process killed with SIGKILL) give exactly the expected entry and
//! call counts, for gcc and clang, PIE and not, and statically linked. The instrumented program prints what the
//! original prints. The counter file is the runtime's: created 0600, never through a symlink,
//! accumulated across runs, left alone when it belongs to another binary.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{build_instrument_program, instrument_source, rivet, s, scratch};
use rivet_profile::counters::CounterFile;
use rivet_profile::{LocKind, Profile};

fn instrument(input: &Path, extra: &[&str]) -> PathBuf {
    let out = input.with_extension("inst");
    let mut args = vec!["instrument", s(input), "-o", s(&out)];
    args.extend_from_slice(extra);
    let r = rivet(&args);
    assert!(
        r.status.success(),
        "rivet instrument {}: {}",
        input.display(),
        String::from_utf8_lossy(&r.stderr)
    );
    out
}

fn run(binary: &Path, args: &[&str], counts: &Path) -> Output {
    Command::new(binary)
        .args(args)
        .env("RIVET_PROFILE", counts)
        .output()
        .unwrap()
}

fn profile(counts: &Path) -> Profile {
    let bytes = std::fs::read(counts).unwrap_or_else(|e| panic!("{}: {e}", counts.display()));
    CounterFile::parse(&bytes).unwrap().to_profile()
}

/// Times `name` was entered: calls and tail calls from instrumented code, plus entries from
/// code the profile does not see.
fn entries(p: &Profile, name: &str) -> u64 {
    p.branches
        .iter()
        .filter(|((_, to), _)| to.kind != LocKind::External && to.name == name && to.offset == 0)
        .map(|(_, c)| c.count)
        .sum()
}

/// Counts of calls from `caller` to `callee`.
fn calls(p: &Profile, caller: &str, callee: &str) -> u64 {
    p.branches
        .iter()
        .filter(|((from, to), _)| from.name == caller && to.name == callee && to.offset == 0)
        .map(|(_, c)| c.count)
        .sum()
}

/// The builds every count test runs on.
fn builds(dir: &Path, src: &str) -> Vec<PathBuf> {
    let cxx = src.ends_with(".cpp");
    let (gcc, clang) = if cxx {
        ("g++", "clang++-19")
    } else {
        ("gcc", "clang-19")
    };
    let mut v = vec![
        build_instrument_program(dir, src, gcc, &["-O2"], "gcc-O2-pie"),
        build_instrument_program(dir, src, gcc, &["-O0", "-no-pie"], "gcc-O0-nopie"),
        build_instrument_program(dir, src, clang, &["-O2", "-fuse-ld=lld"], "clang-O2-pie"),
        build_instrument_program(dir, src, clang, &["-O3", "-no-pie"], "clang-O3-nopie"),
    ];
    if !cxx {
        // Statically linked: no dynamic loader, the C library instrumented too.
        v.push(build_instrument_program(
            dir,
            src,
            gcc,
            &["-O2", "-static"],
            "gcc-O2-static",
        ));
    }
    v
}

/// Runs `args` on the original and the instrumented build; same stdout and exit; the profile.
fn counted(original: &Path, inst: &Path, args: &[&str]) -> Profile {
    let counts = inst.with_extension(format!("{}.counts", args.join("-")));
    let _ = std::fs::remove_file(&counts);
    let expected = Command::new(original).args(args).output().unwrap();
    let got = run(inst, args, &counts);
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&expected.stdout),
        "{} {args:?}",
        inst.display()
    );
    assert_eq!(got.status.code(), expected.status.code());
    assert!(
        got.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    profile(&counts)
}

#[test]
fn loops_switches_recursion_threads_and_fork_count_exactly() {
    let dir = scratch("instrument", "counts");
    for original in builds(&dir, "counts.c") {
        let inst = instrument(&original, &[]);
        let what = original.file_name().unwrap().to_string_lossy().into_owned();

        let p = counted(&original, &inst, &["loop", "1000"]);
        assert_eq!(entries(&p, "tick"), 1000, "{what} loop");
        assert_eq!(entries(&p, "main"), 1, "{what} loop");

        let p = counted(&original, &inst, &["switch", "1100"]);
        assert_eq!(entries(&p, "dispatch"), 1100, "{what} switch");
        for k in 0..8 {
            assert_eq!(entries(&p, &format!("case{k}")), 100, "{what} case{k}");
        }
        assert_eq!(entries(&p, "fallback"), 300, "{what} switch default");

        let p = counted(&original, &inst, &["recurse", "50"]);
        assert_eq!(entries(&p, "rec"), 51, "{what} recursion");
        assert_eq!(calls(&p, "rec", "rec"), 50, "{what} recursion");
        assert_eq!(entries(&p, "tick"), 1, "{what} recursion");

        let p = counted(&original, &inst, &["threads", "4", "100000"]);
        assert_eq!(entries(&p, "worker"), 4, "{what} threads");
        assert_eq!(entries(&p, "tick"), 400_000, "{what} threads");

        // Indirect calls: the first seven targets a site sees are told apart, the others are
        // counted together as `[unknown]`; entries are exact for all.
        let p = counted(&original, &inst, &["fptr", "900"]);
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

        let p = counted(&original, &inst, &["fork", "300", "200"]);
        assert_eq!(entries(&p, "tick"), 500, "{what} fork");
        assert_eq!(entries(&p, "main"), 1, "{what} fork");
    }
}

#[test]
fn exceptions_count_exactly() {
    let dir = scratch("instrument", "throws");
    for original in builds(&dir, "throws.cpp") {
        let inst = instrument(&original, &[]);
        let what = original.file_name().unwrap().to_string_lossy().into_owned();
        let p = counted(&original, &inst, &["10"]);
        assert_eq!(entries(&p, "_Z7throweri"), 10, "{what}");
        assert_eq!(entries(&p, "_Z4tickv"), 6, "{what}");
        assert_eq!(entries(&p, "_Z5afterv"), 6, "{what}");
        assert_eq!(entries(&p, "_Z8on_catchv"), 4, "{what}");
        assert_eq!(entries(&p, "_Z3runi"), 1, "{what}");
    }
}

#[test]
fn a_process_killed_with_sigkill_leaves_its_counts() {
    let dir = scratch("instrument", "sigkill");
    let original = build_instrument_program(&dir, "counts.c", "gcc", &["-O2"], "gcc-O2-pie");
    let inst = instrument(&original, &[]);
    let counts = dir.join("killed.counts");
    let mut child = Command::new(&inst)
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
    assert_eq!(entries(&p, "tick"), 700);
    assert_eq!(entries(&p, "main"), 1);
}

#[test]
fn the_counter_file_is_private_accumulates_and_is_never_misused() {
    let dir = scratch("instrument", "file");
    let original = build_instrument_program(&dir, "counts.c", "gcc", &["-O2"], "prog");
    let inst = instrument(&original, &[]);
    // The default path: next to the output, created 0600.
    let default = dir.join("prog.inst.counts");
    let out = Command::new(&inst).args(["loop", "10"]).output().unwrap();
    assert!(out.status.success());
    let mode = std::fs::metadata(&default).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Runs accumulate.
    let out = Command::new(&inst).args(["loop", "15"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(entries(&profile(&default), "tick"), 25);

    // A file of another instrumentation is left alone; the program still runs.
    let other = build_instrument_program(&dir, "throws.cpp", "g++", &["-O2"], "other");
    let other_inst = instrument(&other, &[]);
    let before = std::fs::read(&default).unwrap();
    let out = run(&other_inst, &["4"], &default);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sink 12\n");
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
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = run(&inst, &["loop", "3"], &link);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot open the profile"), "{stderr}");
    assert!(stderr.contains("errno 40"), "{stderr}"); // ELOOP
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");

    // One file per process on request.
    let per = dir.join("per");
    std::fs::create_dir_all(&per).unwrap();
    let inst_per = {
        let out = dir.join("prog.per");
        let base = per.join("p.counts");
        let r = rivet(&[
            "instrument",
            s(&original),
            "-o",
            s(&out),
            "--profile",
            s(&base),
            "--per-process",
        ]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        out
    };
    let child = Command::new(&inst_per)
        .args(["loop", "5"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait_with_output().unwrap().status.success());
    let file = per.join(format!("p.counts.{pid}"));
    assert_eq!(entries(&profile(&file), "tick"), 5);
    let files: BTreeMap<String, ()> = std::fs::read_dir(&per)
        .unwrap()
        .map(|e| (e.unwrap().file_name().to_string_lossy().into_owned(), ()))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
}

#[test]
fn a_shared_library_and_its_user_each_keep_their_own_counts() {
    let dir = scratch("instrument", "shared");
    for (cc, flags) in [
        ("gcc", &["-O2"][..]),
        ("clang-19", &["-O2", "-fuse-ld=lld"][..]),
    ] {
        let sub = dir.join(cc);
        std::fs::create_dir_all(sub.join("lib")).unwrap();
        std::fs::create_dir_all(sub.join("inst")).unwrap();
        let lib = sub.join("lib/libcount.so");
        let status = Command::new(cc)
            .args(["-g", "-Wl,--emit-relocs", "-shared", "-fPIC"])
            .args(flags)
            .arg(instrument_source("lib.c"))
            .arg("-o")
            .arg(&lib)
            .status()
            .unwrap();
        assert!(status.success());
        let user = sub.join("user");
        let status = Command::new(cc)
            .args(["-g", "-Wl,--emit-relocs"])
            .args(flags)
            .arg(instrument_source("libuser.c"))
            .arg(format!("-L{}", s(&sub.join("lib"))))
            .arg("-lcount")
            .arg("-o")
            .arg(&user)
            .status()
            .unwrap();
        assert!(status.success());
        // Instrumented copies, the library under its own name in another directory.
        let inst_lib = sub.join("inst/libcount.so");
        let r = rivet(&["instrument", s(&lib), "-o", s(&inst_lib)]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let inst_user = sub.join("user.inst");
        let r = rivet(&["instrument", s(&user), "-o", s(&inst_user)]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

        let expected = Command::new(&user)
            .args(["20", "7"])
            .env("LD_LIBRARY_PATH", sub.join("lib"))
            .output()
            .unwrap();
        // RIVET_PROFILE as a directory: each object counts into its own file there.
        let counts = sub.join("counts");
        std::fs::create_dir_all(&counts).unwrap();
        let got = Command::new(&inst_user)
            .args(["20", "7"])
            .env("LD_LIBRARY_PATH", sub.join("inst"))
            .env("RIVET_PROFILE", format!("{}/", s(&counts)))
            .output()
            .unwrap();
        assert_eq!(got.stdout, expected.stdout);
        assert!(
            got.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&got.stderr)
        );
        let lib_profile = profile(&counts.join("libcount.so.counts"));
        assert_eq!(entries(&lib_profile, "lib_work"), 7, "{cc}");
        assert_eq!(entries(&lib_profile, "lib_leaf"), 140, "{cc}");
        let user_profile = profile(&counts.join("user.inst.counts"));
        assert_eq!(entries(&user_profile, "user_leaf"), 7, "{cc}");
        assert_eq!(entries(&user_profile, "main"), 1, "{cc}");
        assert_eq!(
            user_profile.build_id.as_deref(),
            Some(
                hex(rivet_elf::ElfFile::parse(&std::fs::read(&user).unwrap())
                    .unwrap()
                    .build_id()
                    .unwrap())
                .as_str()
            )
        );
        // Without the override, each uses the path given at instrumentation time.
        let got = Command::new(&inst_user)
            .args(["20", "7"])
            .env("LD_LIBRARY_PATH", sub.join("inst"))
            .output()
            .unwrap();
        assert_eq!(got.stdout, expected.stdout);
        assert_eq!(
            entries(&profile(&sub.join("inst/libcount.so.counts")), "lib_leaf"),
            140
        );
        assert_eq!(
            entries(&profile(&sub.join("user.inst.counts")), "user_leaf"),
            7
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The runtime fills the site tables the profile reader reads: same layout.
#[test]
fn site_table_layouts_agree() {
    assert_eq!(
        rivet_runtime::SITE_TARGETS,
        rivet_profile::counters::SITE_TARGETS
    );
}
