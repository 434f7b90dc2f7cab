//! Real programs optimized from real profiles, then run on their own test suites: Lua 5.4
//! (every test and benchmark script of check-lua.sh), SQLite 3 (the shell workload, and the
//! `smoke` subset of SQLite's TCL suite through `testfixture`), PostgreSQL 15 (its
//! regression suite, check-postgres.sh) and cppcheck, in C++ (its analyses and its unit
//! tests, check-cppcheck.sh).
//!
//! Each program is instrumented and trained on the same checks (the instrumented build must pass
//! them too), then optimized with several option sets, `--verify` on; outputs must behave
//! exactly as the originals. Lua is also optimized from a `perf record -e cpu-clock:u` sample
//! profile (edge counts inferred), the workflow of machines without instrumentation.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{real_program, repo_root, s, scratch};

/// Runs rivet, which must succeed and keep the debug info; returns its standard output.
fn rivet(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rivet {args:?}: {stderr}");
    // These programs carry DWARF that Rivet converts: losing it would be a regression.
    assert!(
        !stderr.contains("debug info removed"),
        "rivet {args:?}: {stderr}"
    );
    out.stdout
}

use common::check_script as check;

/// Instruments `original` into `dir`, runs `train` with the instrumented binary, returns the
/// counter file.
fn train(original: &Path, dir: &Path, train: impl FnOnce(&Path)) -> PathBuf {
    let inst = dir.join("instrumented");
    let counts = dir.join("counts");
    rivet(&[
        "instrument",
        s(original),
        "-o",
        s(&inst),
        "--profile",
        s(&counts),
    ]);
    train(&inst);
    assert!(counts.exists(), "training left no profile");
    counts
}

/// Optimizes `original` with `profile` and `options` (verified) into `dir`.
fn optimize(original: &Path, profile: &Path, dir: &Path, options: &[&str]) -> PathBuf {
    optimize_summarized(original, profile, dir, options).0
}

/// `optimize`, also returning the run's summary (`--json`).
fn optimize_summarized(
    original: &Path,
    profile: &Path,
    dir: &Path,
    options: &[&str],
) -> (PathBuf, serde_json::Value) {
    let out = dir.join(format!("opt{}", options.join("").replace(['-', '='], "")));
    let mut args = vec![
        "optimize",
        s(original),
        "-o",
        s(&out),
        "--profile",
        s(profile),
        "--verify",
        "--json",
    ];
    args.extend_from_slice(options);
    let summary = serde_json::from_slice(&rivet(&args)).expect("JSON summary");
    (out, summary)
}

const OPTION_SETS: [&[&str]; 4] = [
    &[],
    &[
        "-reorder-blocks=ext-tsp",
        "-reorder-functions=hfsort",
        "-split-functions",
        "-split-all-cold=0",
        "-split-eh",
        "-align-functions=64",
        "-plt=hot",
        // The hot text on a huge page at start-up (docs/passes.md).
        "-hugify",
    ],
    &[
        "--reorder-blocks=reverse",
        "--reorder-functions=exec-count",
        "--split-functions=false",
        "--cache-set-padding=0",
        "--plt=all",
    ],
    &[
        "--reorder-blocks=none",
        "--reorder-functions=none",
        "--cold-landing-pads",
        "--hot-text",
        "--align-blocks",
        "--cache-set-padding=512",
    ],
];

#[test]
fn lua_optimized_runs_every_script_identically() {
    for name in ["lua-gcc", "lua-clang"] {
        let dir = scratch("real-optimize", name);
        let original = real_program(name);
        let profile = train(original, &dir, |inst| {
            check("check-lua.sh", &[inst, original], &[])
        });
        for options in OPTION_SETS {
            let out = optimize(original, &profile, &dir, options);
            check("check-lua.sh", &[&out, original], &[]);
        }
    }
    // Without relocations: blocks reordered and split, functions in place.
    let dir = scratch("real-optimize", "lua-norelocs");
    let original = real_program("lua-gcc-norelocs");
    let with_relocs = real_program("lua-gcc");
    // Instrumentation needs relocations: train the relocatable build of the same source; the
    // profile names functions, which both builds share.
    let profile = train(with_relocs, &dir, |inst| {
        check(
            "check-lua.sh",
            &[],
            &["--only", "bench/*", s(inst), s(with_relocs)],
        )
    });
    let out = dir.join("opt");
    let r = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(["optimize", s(original), "-o", s(&out), "--profile"])
        .arg(&profile)
        .args(["--verify", "--force"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("no relocations"),
        "no warning about the missing relocations"
    );
    check("check-lua.sh", &[&out, original], &[]);
}

#[test]
fn lua_optimized_from_perf_samples_runs_identically() {
    let dir = scratch("real-optimize", "lua-perf");
    let original = real_program("lua-gcc");
    let data = dir.join("perf.data");
    let st = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock:u", "-F", "5000", "-o"])
        .arg(&data)
        .arg("--")
        .arg(original)
        .arg(repo_root().join("bench/lua/fannkuch.lua"))
        .arg("8")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("perf is required (scripts/test.sh installs linux-perf)");
    assert!(st.success());
    let profile = dir.join("samples.prof");
    rivet(&["aggregate", s(&data), s(original), "-o", s(&profile)]);
    // Unasked, a profile of plain samples splits nothing (a block without samples may run);
    // asked, it does. Both outputs must behave as the original.
    for (options, splits) in [(&[][..], false), (&["--split-functions"][..], true)] {
        let (out, summary) = optimize_summarized(original, &profile, &dir, options);
        check("check-lua.sh", &[&out, original], &[]);
        let split = summary["split"].as_u64().expect("split count");
        assert_eq!(split > 0, splits, "{options:?}: {split} functions split");
        assert_eq!(summary["profile"]["inferred"], true);
    }
}

#[test]
fn sqlite_shell_optimized_gives_identical_results() {
    let dir = scratch("real-optimize", "sqlite3-gcc");
    let original = real_program("sqlite3-gcc");
    let reference = ["--reference", s(original)];
    let profile = train(original, &dir, |inst| {
        check("check-sqlite.sh", &[inst], &reference)
    });
    for options in &OPTION_SETS[..2] {
        let out = optimize(original, &profile, &dir, options);
        check("check-sqlite.sh", &[&out], &reference);
    }
}

/// SQLite's own tests against testfixture optimized from a profile of those tests; failures
/// must be exactly the original testfixture's.
#[test]
fn sqlite_test_suite_passes_on_optimized_testfixture() {
    let dir = scratch("real-optimize", "testfixture-gcc");
    let original = real_program("testfixture-gcc");
    let reference = ["smoke", "--reference", s(original)];
    let profile = train(original, &dir, |inst| {
        check("check-sqlite.sh", &[inst], &reference)
    });
    let out = optimize(original, &profile, &dir, &[]);
    check("check-sqlite.sh", &[&out], &reference);
}

/// PostgreSQL's server trained on its own regression suite (every backend a forked child of the
/// instrumented postmaster, all counting into one profile), optimized with the defaults and with
/// another option set, then the suite again on each output. Its gcc build keeps the compiler's
/// `.cold` parts, thousands of which end in a call to `errfinish()` that does not come back.
#[test]
fn postgres_regression_suite_passes_on_optimized_server() {
    let dir = scratch("real-optimize", "postgres-gcc");
    let original = real_program("postgres-gcc");
    // The harness works and the original passes (this also creates the user postgres).
    check("check-postgres.sh", &[original], &[]);
    // The instrumented server runs as postgres and writes its profile here.
    let status = Command::new("chown")
        .arg("postgres")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(status.success(), "chown postgres {}", dir.display());
    let profile = train(original, &dir, |inst| {
        check("check-postgres.sh", &[inst], &[])
    });
    for options in [OPTION_SETS[0], OPTION_SETS[1]] {
        let (out, summary) = optimize_summarized(original, &profile, &dir, options);
        let rewritten = summary["rewritten"].as_u64().expect("rewritten count");
        assert!(
            rewritten > 1000,
            "{options:?}: only {rewritten} functions rewritten: {summary}"
        );
        check("check-postgres.sh", &[&out], &[]);
    }
}

/// cppcheck, C++ with exceptions and gcc's `.cold` parts, trained on check-cppcheck.sh's
/// analyses and optimized with the defaults and BOLT's recipe. Every function the training run
/// entered must be rewritten: `Token::addValue` dispatches on three `switch`es whose table bases
/// gcc keeps in callee-saved registers across loops, one of them a register that holds `this`
/// elsewhere in the function.
#[test]
fn cppcheck_optimized_analyses_identically() {
    let dir = scratch("real-optimize", "cppcheck-gcc");
    let original = real_program("cppcheck-gcc");
    let reference = ["--reference", s(original)];
    let profile = train(original, &dir, |inst| {
        check("check-cppcheck.sh", &[inst], &reference)
    });
    for options in &OPTION_SETS[..2] {
        let (out, summary) = optimize_summarized(original, &profile, &dir, options);
        let left = &summary["profiled_not_rewritten"]["functions"];
        assert_eq!(
            left.as_array().map(Vec::len),
            Some(0),
            "{options:?}: profiled functions left as they were: {left}"
        );
        check("check-cppcheck.sh", &[&out], &reference);
    }
}

/// cppcheck's 4,000-odd unit tests (`testrunner`), trained on themselves and optimized.
#[test]
fn cppcheck_unit_tests_pass_on_optimized_testrunner() {
    let dir = scratch("real-optimize", "cppcheck-testrunner");
    let original = real_program("cppcheck-testrunner");
    let reference = ["--reference", s(original)];
    let profile = train(original, &dir, |inst| {
        check("check-cppcheck.sh", &[inst], &reference)
    });
    let out = optimize(original, &profile, &dir, &[]);
    check("check-cppcheck.sh", &[&out], &reference);
}
