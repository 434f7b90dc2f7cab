//! `rivet optimize` on AArch64 binaries, from a real profile of a real run, checked by running
//! the optimized program under qemu-aarch64.
//!
//! No Arm profiling source exists on this x86-64 host, so the profile is read from qemu
//! itself: `-d exec,nochain` logs the start of every translated block each time it runs, which
//! is an exact count of block entries. Each count becomes a sample at its address (`no_lbr`
//! fdata, function and offset from the symbol table), and Rivet's flow inference turns the
//! samples into edge counts as it does for `perf` samples without branch stacks.
//!
//! Every option set of the x86-64 differential tests (`corpus::optimize_option_sets`: block
//! and function orders, splitting, landing pads, alignments, hot text, llvm-bolt's spellings,
//! in place) also runs on AArch64 programs profiled by their instrumented builds, with the
//! warnings for options AArch64 does not have yet (`--plt`, `--hugify`,
//! `--indirect-call-promotion`).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::corpus::{
    NO_RELOCATIONS, ORDER_FILE, Target, check_on, corpus_of, optimize_option_sets,
};
use common::{cross_build_aarch64, rivet, s, scratch};

/// Function symbols of `binary` with a size, sorted by address: (start, end, name).
fn functions(binary: &Path) -> Vec<(u64, u64, String)> {
    let out = Command::new("aarch64-linux-gnu-nm")
        .args(["-S", "--defined-only"])
        .arg(binary)
        .output()
        .expect("aarch64-linux-gnu-nm is required (binutils-aarch64-linux-gnu)");
    let mut v: Vec<(u64, u64, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [addr, size, kind, name] = f[..] else {
                return None;
            };
            if !matches!(kind, "T" | "t") {
                return None;
            }
            let start = u64::from_str_radix(addr, 16).ok()?;
            let size = u64::from_str_radix(size, 16).ok()?;
            Some((start, start + size, name.to_string()))
        })
        .collect();
    v.sort();
    v
}

/// A `no_lbr` profile of one run of `binary` (non-PIE: qemu's guest addresses are the
/// binary's own) with `lib_dir` on its library path.
fn profile_of_run(binary: &Path, lib_dir: &Path, dir: &Path) -> String {
    let log = dir.join("exec.log");
    let status = Command::new("qemu-aarch64")
        .args(["-L", "/usr/aarch64-linux-gnu", "-d", "exec,nochain", "-D"])
        .arg(&log)
        .arg("-E")
        .arg(format!("LD_LIBRARY_PATH={}", lib_dir.display()))
        .arg(binary)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)");
    assert!(status.code().is_some(), "{}: killed", binary.display());
    let text = std::fs::read_to_string(&log).unwrap();
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("Trace ")) {
        // Trace N: HOST [cs_base/PC/flags/cflags] symbol
        let Some(pc) = line
            .split('[')
            .nth(1)
            .and_then(|rest| rest.split('/').nth(1))
            .and_then(|pc| u64::from_str_radix(pc, 16).ok())
        else {
            continue;
        };
        *counts.entry(pc).or_default() += 1;
    }
    let funcs = functions(binary);
    let mut fdata = String::from("no_lbr cycles:u\n");
    for (pc, n) in counts {
        let i = funcs.partition_point(|f| f.0 <= pc);
        if let Some((start, end, name)) = i.checked_sub(1).map(|i| &funcs[i])
            && pc < *end
        {
            fdata.push_str(&format!("1 {name} {:x} {n}\n", pc - start));
        }
    }
    fdata
}

#[test]
fn optimized_aarch64_programs_behave_the_same() {
    let (dir, entries) = corpus_of(Target::Aarch64);
    for name in [
        "switch_dense.gcc.O2.nopie",
        "switch_sparse_nested.clang.O2.nopie",
        "computed_goto.gcc.O3.nopie",
        "exceptions.clang.O2.nopie",
        "virtual_calls.gcc.O2.nopie",
        "tailcalls_noreturn.clang.O3.nopie",
    ] {
        let e = entries
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} is not in the AArch64 corpus"));
        let work = scratch("aarch64_optimize", name);
        let fdata = profile_of_run(&e.path, &dir, &work);
        assert!(
            fdata.lines().count() > 10,
            "{name}: empty profile:\n{fdata}"
        );
        let profile = work.join("profile.fdata");
        std::fs::write(&profile, &fdata).unwrap();
        let out = work.join(name);
        let run = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .arg("optimize")
            .arg(&e.path)
            .arg("--profile")
            .arg(&profile)
            .arg("-o")
            .arg(&out)
            .arg("--verify")
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let summary = String::from_utf8_lossy(&run.stdout);
        // "optimized OUT: N of M functions moved to the hot text": the profile was used.
        let moved: u32 = summary
            .split(": ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no summary line in {summary}"));
        assert!(moved > 0, "{name}: nothing moved: {summary}");
        assert!(
            summary.contains("100.0% of the counts matched"),
            "{name}: {summary}"
        );
        assert_eq!(
            check_on(Target::Aarch64, &entries, e, &out, &dir),
            Ok(true),
            "{name}"
        );
    }
}

/// `binary` run under qemu-aarch64 (with `RIVET_PROFILE=counts` when given): exit code,
/// standard output.
fn run_qemu(binary: &Path, counts: Option<&Path>) -> (Option<i32>, Vec<u8>) {
    let mut command = Command::new("timeout");
    command
        .args(["120", "qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"])
        .arg(binary);
    if let Some(counts) = counts {
        command.env("RIVET_PROFILE", counts);
    }
    let out = command
        .output()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)");
    (out.status.code(), out.stdout)
}

#[test]
fn every_option_set_optimizes_aarch64_programs_that_behave_the_same() {
    for (src, cc, flags) in [
        ("cold_split.c", "gcc", &["-O2"][..]),
        ("exceptions.cpp", "clang", &["-O2", "-no-pie"][..]),
        (
            "switch_sparse_nested.c",
            "clang",
            &["-O2", "-mbranch-protection=standard"][..],
        ),
    ] {
        let what = format!("{src} {cc} {flags:?}");
        let dir = scratch("aarch64_optimize_options", &format!("{src}-{cc}"));
        let program = cross_build_aarch64(&dir, src, cc, flags, "prog");
        let expected = run_qemu(&program, None);
        let inst = dir.join("prog.inst");
        let counts = dir.join("prog.counts");
        let out = rivet(&[
            "instrument",
            s(&program),
            "-o",
            s(&inst),
            "--profile",
            s(&counts),
        ]);
        assert!(out.status.success(), "{what}: instrument");
        assert_eq!(
            run_qemu(&inst, Some(&counts)),
            expected,
            "{what}: instrumented"
        );
        let order = dir.join("order.txt");
        std::fs::write(&order, "main\nno_such_function\n").unwrap();
        let stripped = dir.join("prog.norelocs");
        for (i, set) in optimize_option_sets().iter().enumerate() {
            let mut input = program.clone();
            let mut args: Vec<String> = Vec::new();
            for &a in set {
                match a {
                    NO_RELOCATIONS => {
                        let st = Command::new("aarch64-linux-gnu-objcopy")
                            .arg("--remove-relocations=*")
                            .arg(&program)
                            .arg(&stripped)
                            .status()
                            .expect("aarch64-linux-gnu-objcopy is required (binutils-aarch64-linux-gnu)");
                        assert!(st.success());
                        input = stripped.clone();
                    }
                    ORDER_FILE => args.push(s(&order).to_string()),
                    other => args.push(other.to_string()),
                }
            }
            let output = dir.join(format!("prog.{i}"));
            let run = Command::new(env!("CARGO_BIN_EXE_rivet"))
                .arg("optimize")
                .arg(&input)
                .arg("--profile")
                .arg(&counts)
                .arg("-o")
                .arg(&output)
                .arg("--verify")
                .args(&args)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&run.stderr);
            assert!(run.status.success(), "{what} {set:?}: {stderr}");
            let stdout = String::from_utf8_lossy(&run.stdout);
            assert!(
                stdout.lines().any(|l| l.starts_with("optimized ")),
                "{what} {set:?}: {stdout}"
            );
            // The options AArch64 lacks say so, and nothing else warns of them.
            for (option, warning) in [
                (
                    "-plt=all",
                    "--plt: calls through the GOT are not implemented for AArch64",
                ),
                ("-hugify", "--hugify: no start-up code for Aarch64"),
                (
                    "-indirect-call-promotion=calls",
                    "--indirect-call-promotion is implemented for x86-64 only",
                ),
                (
                    "-tail-duplication=cache",
                    "--tail-duplication is implemented for x86-64 only",
                ),
            ] {
                assert_eq!(
                    set.contains(&option),
                    stderr.contains(warning),
                    "{what} {set:?}: {stderr}"
                );
            }
            assert!(
                !stderr.contains("debug info removed"),
                "{what} {set:?}: {stderr}"
            );
            assert_eq!(run_qemu(&output, None), expected, "{what} {set:?}");
        }
    }
}
