//! Real programs nobody here wrote, rewritten and run on their own workloads: Lua 5.4 (our
//! scripts exercising the whole interpreter, and benchmark scripts), SQLite 3 (an SQL
//! workload through the shell, and SQLite's own TCL test suite through `testfixture`) and
//! cppcheck (C++: its analyses, and its unit tests through `testrunner`).
//!
//! Builds come from `scripts/build-real-programs.sh` (Debian source packages, cached); the
//! comparisons are done by `scripts/check-lua.sh`, `scripts/check-sqlite.sh` and
//! `scripts/check-cppcheck.sh` against the original binaries.

mod common;

use common::real_program;
use common::scratch;
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(name: &str) -> &'static Path {
    real_program(name)
}

/// Rewrites `input` with `layout` (verified) into `dir`, returns the output path.
fn rewrite(input: &Path, dir: &Path, layout: &[&str]) -> PathBuf {
    let out = dir.join(format!(
        "{}.{}",
        input.file_name().unwrap().to_string_lossy(),
        layout.join("-").replace("--", "")
    ));
    let r = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .arg("rewrite")
        .arg(input)
        .arg("-o")
        .arg(&out)
        .arg("--verify")
        .args(layout)
        .output()
        .unwrap();
    assert!(
        r.status.success(),
        "rewrite {} {layout:?}: {}",
        input.display(),
        String::from_utf8_lossy(&r.stderr)
    );
    out
}

use common::check_script as check;

const SHUFFLES: [&str; 5] = ["1", "2", "3", "4", "5"];

fn relocation_mode_layouts() -> Vec<Vec<&'static str>> {
    let mut v = vec![vec!["--layout", "identity"], vec!["--layout", "reverse"]];
    v.extend(
        SHUFFLES
            .iter()
            .map(|s| vec!["--layout", "shuffle", "--seed", s]),
    );
    v
}

#[test]
fn lua_rewritten_runs_every_script_identically() {
    for name in ["lua-gcc", "lua-clang"] {
        let dir = scratch("real-rewrite", name);
        let original = build(name);
        for layout in relocation_mode_layouts() {
            let out = rewrite(original, &dir, &layout);
            check("check-lua.sh", &[&out, original], &[]);
        }
    }
}

#[test]
fn lua_without_relocations_rewritten_in_place_runs_identically() {
    let dir = scratch("real-rewrite", "lua-norelocs");
    let original = build("lua-gcc-norelocs");
    for layout in [
        &["--layout", "identity"][..],
        &["--layout", "shuffle-blocks", "--seed", "1"],
    ] {
        let out = rewrite(original, &dir, layout);
        check("check-lua.sh", &[&out, original], &[]);
    }
}

#[test]
fn sqlite_shell_rewritten_gives_identical_results() {
    for name in ["sqlite3-gcc", "sqlite3-clang"] {
        let dir = scratch("real-rewrite", name);
        let original = build(name);
        for layout in relocation_mode_layouts() {
            let out = rewrite(original, &dir, &layout);
            check(
                "check-sqlite.sh",
                &[&out],
                &["--reference", original.to_str().unwrap()],
            );
        }
    }
    let dir = scratch("real-rewrite", "sqlite3-norelocs");
    let original = build("sqlite3-gcc-norelocs");
    for layout in [
        &["--layout", "identity"][..],
        &["--layout", "shuffle-blocks", "--seed", "1"],
    ] {
        let out = rewrite(original, &dir, layout);
        check(
            "check-sqlite.sh",
            &[&out],
            &["--reference", original.to_str().unwrap()],
        );
    }
}

/// SQLite's own test suite (the `smoke` subset of check-sqlite.sh, ~40 files over every
/// subsystem) against testfixture rewritten with shuffled layouts; failures must be exactly
/// the original testfixture's.
#[test]
fn sqlite_test_suite_passes_on_shuffled_testfixture() {
    for (name, seeds) in [
        ("testfixture-gcc", &SHUFFLES[..]),
        ("testfixture-clang", &SHUFFLES[..2]),
    ] {
        let dir = scratch("real-rewrite", name);
        let original = build(name);
        for seed in seeds {
            let out = rewrite(original, &dir, &["--layout", "shuffle", "--seed", seed]);
            check(
                "check-sqlite.sh",
                &[&out],
                &["smoke", "--reference", original.to_str().unwrap()],
            );
        }
    }
}

/// The same suite against testfixture built without relocations and rewritten in place
/// (original function order, blocks of each function reordered where the new image fits).
#[test]
fn sqlite_test_suite_passes_on_testfixture_rewritten_in_place() {
    let dir = scratch("real-rewrite", "testfixture-norelocs");
    let original = build("testfixture-gcc-norelocs");
    for layout in [
        &["--layout", "identity"][..],
        &["--layout", "shuffle-blocks", "--seed", "1"],
    ] {
        let out = rewrite(original, &dir, layout);
        check(
            "check-sqlite.sh",
            &[&out],
            &["smoke", "--reference", original.to_str().unwrap()],
        );
    }
}

/// cppcheck and its unit tests (C++: exceptions through thousands of landing pads, gcc's
/// `.cold` parts, `switch` tables): cppcheck reversed and shuffled, testrunner shuffled with
/// another seed. Each output is deleted once checked: with their debug info these binaries
/// weigh a quarter of a gigabyte.
#[test]
fn cppcheck_rewritten_analyses_identically() {
    let dir = scratch("real-rewrite", "cppcheck-gcc");
    let runs: [(&str, &[&str]); 3] = [
        ("cppcheck-gcc", &["--layout", "reverse"]),
        ("cppcheck-gcc", &["--layout", "shuffle", "--seed", "1"]),
        (
            "cppcheck-testrunner",
            &["--layout", "shuffle", "--seed", "2"],
        ),
    ];
    for (name, layout) in runs {
        let original = build(name);
        let reference = original.to_str().expect("UTF-8 path");
        let out = rewrite(original, &dir, layout);
        check("check-cppcheck.sh", &[&out], &["--reference", reference]);
        std::fs::remove_file(&out).unwrap();
    }
}

/// The AArch64 builds of Lua and SQLite (`scripts/build-real-aarch64.sh`: gcc PIE and not,
/// clang, clang with PAC and BTI), rewritten and run on their workloads under qemu-aarch64
/// (the `.qemu` wrapper the build script writes next to each binary, pointed at the output),
/// against the x86-64 builds' results. Reordered functions for the gcc builds, shuffled and
/// split blocks for the clang ones; `RIVET_AARCH64_SEEDS=N` runs every build with identity,
/// reverse and N seeds each of `shuffle` and `shuffle-blocks` instead (the acceptance run of
/// the AArch64 work: N = 20, hours under qemu, so not in CI; `A..B` runs seeds A to B and
/// `RIVET_AARCH64_BUILDS=a,b` only those builds, to split it over sittings).
#[test]
fn aarch64_lua_and_sqlite_rewritten_behave_the_same() {
    let builds = common::aarch64_real_builds(&[]);
    assert_eq!(builds.len(), 8, "{builds:?}");
    let seeds = common::aarch64_seeds().map(common::seed_layouts);
    for (name, input) in &builds {
        if !common::aarch64_build_selected(name) {
            continue;
        }
        let default: Vec<String> = if name.contains("gcc") {
            vec!["--layout".into(), "reverse".into()]
        } else {
            ["--layout", "shuffle-blocks", "--seed", "1"]
                .map(String::from)
                .to_vec()
        };
        for layout in seeds.clone().unwrap_or_else(|| vec![default.clone()]) {
            let layout: Vec<&str> = layout.iter().map(String::as_str).collect();
            run_aarch64_workload(name, input, &layout);
            // Printed so that a long acceptance run (`--nocapture`) shows what it covered.
            eprintln!("aarch64 {name} {layout:?}: same results");
        }
    }
}

/// Rewrites the AArch64 build `name` (at `input`) with `layout` and `--verify`, and runs its
/// workload under qemu against the x86-64 build's results.
fn run_aarch64_workload(name: &str, input: &Path, layout: &[&str]) {
    let dir = scratch("real-rewrite-aarch64", name);
    let rewritten = rewrite(input, &dir, layout);
    let wrapper_path = common::qemu_wrapper(input, &rewritten, &dir);
    // Options go before the binaries for both scripts (as build-real-aarch64.sh runs
    // them); the reference runs natively.
    let script = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("bash").args(args).output().expect("bash");
        assert!(
            out.status.success(),
            "{name} {layout:?}: {args:?} found differences:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let scripts = common::repo_root().join("scripts");
    if name.starts_with("lua") {
        script(&[
            scripts.join("check-lua.sh").as_os_str(),
            "--timeout".as_ref(),
            "300".as_ref(),
            "--only".as_ref(),
            "tests/*".as_ref(),
            wrapper_path.as_os_str(),
            build("lua-gcc").as_os_str(),
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
            build("sqlite3-gcc").as_os_str(),
        ]);
    }
    std::fs::remove_file(&rewritten).unwrap();
}

/// The file offset of the symbol `name` of the AArch64 binary `bin` (through its `.text`).
fn text_symbol_offset(bin: &Path, name: &str) -> usize {
    let nm = Command::new("aarch64-linux-gnu-nm")
        .arg(bin)
        .output()
        .expect("aarch64-linux-gnu-nm (binutils-aarch64-linux-gnu)");
    let symbols = String::from_utf8_lossy(&nm.stdout);
    let addr = symbols
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            let (a, _, n) = (w.next()?, w.next()?, w.next()?);
            (n == name)
                .then(|| u64::from_str_radix(a, 16).ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no symbol {name} in {}", bin.display()));
    let sections = Command::new("readelf")
        .args(["-SW"])
        .arg(bin)
        .output()
        .expect("readelf (binutils)");
    let sections = String::from_utf8_lossy(&sections.stdout);
    let (text_addr, text_off) = sections
        .lines()
        .find_map(|l| {
            let l = l.split(']').nth(1)?;
            let mut w = l.split_whitespace();
            (w.next()? == ".text").then_some(())?;
            let _type = w.next()?;
            let a = u64::from_str_radix(w.next()?, 16).ok()?;
            let o = u64::from_str_radix(w.next()?, 16).ok()?;
            Some((a, o))
        })
        .expect("a .text section");
    (addr - text_addr + text_off) as usize
}

/// A real program with BTI enforced: Lua built by clang with PAC and BTI and linked with
/// start files that have landing pads (`build-real-aarch64.sh lua-clang-bti`: Debian's have
/// none), so its property note keeps the BTI bit and qemu's `max` CPU checks every indirect
/// branch into its code. First the enforcement is shown on this very binary: with the `bti c`
/// of `str_find` (a C function Lua calls through a pointer) made a `nop`, `string.find` dies
/// of SIGILL. Then rewritten with functions reversed, with blocks shuffled and split, and
/// with both, it runs the Lua test scripts as the x86-64 build does (`RIVET_AARCH64_SEEDS=N`:
/// the seed layouts instead).
#[test]
fn aarch64_lua_with_bti_enforced_rewritten_behaves_the_same() {
    if !common::aarch64_build_selected("lua-clang-bti") {
        eprintln!("not run: RIVET_AARCH64_BUILDS does not name lua-clang-bti");
        return;
    }
    let builds = common::aarch64_real_builds(&["lua-clang-bti"]);
    let input = builds
        .into_iter()
        .find_map(|(name, path)| (name == "lua-clang-bti").then_some(path))
        .expect("the build's path");
    let notes = Command::new("readelf")
        .arg("-n")
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&notes.stdout).contains("AArch64 feature: BTI"),
        "no BTI property"
    );
    let dir = scratch("real-rewrite-aarch64", "lua-clang-bti");
    let find = |wrapper: &Path| {
        Command::new(wrapper)
            .args(["-e", "print(('abc'):find('b'))"])
            .output()
            .unwrap()
    };
    let original = common::qemu_wrapper(&input, &input, &dir);
    let ran = find(&original);
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "2\t2\n");
    let unpadded = dir.join("lua.unpadded");
    let mut bytes = std::fs::read(&input).unwrap();
    let at = text_symbol_offset(&input, "str_find");
    assert_eq!(
        bytes[at..at + 4],
        0xd503_245fu32.to_le_bytes(),
        "str_find starts with bti c"
    );
    bytes[at..at + 4].copy_from_slice(&0xd503_201fu32.to_le_bytes());
    // A copy first, so the file is executable (qemu-user runs only those).
    std::fs::copy(&input, &unpadded).unwrap();
    std::fs::write(&unpadded, bytes).unwrap();
    let died = find(&common::qemu_wrapper(&input, &unpadded, &dir));
    // The wrapper execs qemu, which dies of the guest's SIGILL itself.
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&died.status),
        Some(4),
        "BTI is not enforced: {died:?}"
    );
    let default: Vec<Vec<String>> = [
        &["--layout", "reverse"][..],
        &["--layout", "shuffle-blocks", "--seed", "1"],
        &["--layout", "shuffle", "--seed", "2"],
    ]
    .iter()
    .map(|l| l.iter().map(|s| s.to_string()).collect())
    .collect();
    for layout in common::aarch64_seeds()
        .map(common::seed_layouts)
        .unwrap_or(default)
    {
        let layout: Vec<&str> = layout.iter().map(String::as_str).collect();
        let layout = &layout[..];
        let rewritten = rewrite(&input, &dir, layout);
        let wrapper = common::qemu_wrapper(&input, &rewritten, &dir);
        // Options before the binaries (check-lua.sh reads them first).
        let run = Command::new("bash")
            .arg(common::repo_root().join("scripts/check-lua.sh"))
            .args(["--timeout", "300", "--only", "tests/*"])
            .arg(&wrapper)
            .arg(build("lua-gcc"))
            .output()
            .expect("bash");
        assert!(
            run.status.success(),
            "lua-clang-bti {layout:?}: check-lua.sh found differences:\n{}\n{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        std::fs::remove_file(&rewritten).unwrap();
        eprintln!("aarch64 lua-clang-bti {layout:?}: same results");
    }
}
