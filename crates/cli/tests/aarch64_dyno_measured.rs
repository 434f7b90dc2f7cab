//! `rivet optimize`'s dyno stats on AArch64 against what the optimized programs run, counted
//! by `rivet simulate` under qemu-aarch64 (the AArch64 twin of `dyno_measured.rs`, which
//! compares x86-64 programs with callgrind).
//!
//! A corpus program is profiled by its instrumented build's one run (exact counts of that
//! run), then optimized twice from the profile: with the defaults (ext-TSP, cold blocks split
//! out) and with the input's block order unsplit. Simulate counts every instruction and taken
//! branch of a whole run, the dynamic loader and the C library included; those parts run the
//! same for both outputs (the same segments to map, the same work), so the difference between
//! the two runs is the difference between the two layouts of the program's own code, which
//! the dyno stats predict: taken branches and executed instructions must match to the unit.
//! Splitting is where AArch64 differs from x86-64: a conditional branch into the cold
//! fragment is written as the opposite test over a `b`, which is taken when the branch it
//! replaces is not. Block alignment is off in both: the `nop`s of padding that runs are not in
//! the dyno stats (their number depends on the final addresses).
//!
//! Calls and returns are the same in any layout, and so is every branch of code left in
//! place; the taken branches of simulate also count those, and they cancel out.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{cross_build_aarch64, rivet, s, scratch};
use serde_json::Value;

const SYSROOT: &str = "/usr/aarch64-linux-gnu";

fn ok(out: &std::process::Output, what: &str) -> Value {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Taken branches and executed instructions.
type Counts = (i64, i64);

/// (taken branches, executed instructions) of one run of `binary`, by `rivet simulate`.
fn simulated(binary: &Path) -> Counts {
    let json = ok(
        &rivet(&["simulate", s(binary), "--placements", "1", "--json"]),
        "rivet simulate",
    );
    let get = |k: &str| {
        json[k]
            .as_i64()
            .unwrap_or_else(|| panic!("no {k} in {json}"))
    };
    (get("taken_branches"), get("instructions"))
}

/// (taken branches, executed instructions) the dyno stats predict for `optimize`'s output.
fn predicted(summary: &Value) -> Counts {
    let after = &summary["dyno_stats"]["after"];
    let get = |k: &str| {
        after[k]
            .as_i64()
            .unwrap_or_else(|| panic!("no {k} in {after}"))
    };
    (get("taken branches"), get("executed instructions"))
}

#[test]
fn dyno_stats_predict_what_the_optimized_aarch64_programs_run() {
    for (src, cc, flags) in [
        ("cold_split.c", "gcc", &["-O2"][..]),
        ("switch_dense.c", "gcc", &["-O2", "-no-pie"][..]),
        ("recursion.c", "clang", &["-O2"][..]),
    ] {
        let what = format!("{src} {cc} {flags:?}");
        let dir = scratch("aarch64-dyno-measured", &format!("{src}-{cc}"));
        let program = cross_build_aarch64(&dir, src, cc, flags, "prog");
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
        let status = Command::new("qemu-aarch64")
            .args(["-L", SYSROOT])
            .arg(&inst)
            .stdout(Stdio::null())
            .status()
            .expect("qemu-aarch64 is required (apt-get install qemu-user)");
        assert!(status.success(), "{what}: the instrumented run");

        // (predicted, simulated, optimize's summary) of each layout.
        let layouts: Vec<(Counts, Counts, Value)> = [
            &[][..],
            &["--split-functions=false", "--reorder-blocks=none"][..],
        ]
        .iter()
        .enumerate()
        .map(|(i, options)| {
            let output = dir.join(format!("prog.{i}"));
            let mut args = vec![
                "optimize",
                s(&program),
                "--profile",
                s(&counts),
                "-o",
                s(&output),
                "--align-blocks=false",
                "--json",
            ];
            args.extend_from_slice(options);
            let summary = ok(&rivet(&args), &format!("{what}: optimize {options:?}"));
            (predicted(&summary), simulated(&output), summary)
        })
        .collect();
        let ((p0, s0, summary), (p1, s1, _)) = (&layouts[0], &layouts[1]);
        assert!(
            summary["split"].as_u64().unwrap() > 0,
            "{what}: the default layout splits nothing, so it tests nothing AArch64-specific: {summary}"
        );
        eprintln!(
            "{what}: taken branches {} (predicted {}), instructions {} (predicted {})",
            s0.0 - s1.0,
            p0.0 - p1.0,
            s0.1 - s1.1,
            p0.1 - p1.1
        );
        assert_eq!(s0.0 - s1.0, p0.0 - p1.0, "{what}: taken branches");
        assert_eq!(s0.1 - s1.1, p0.1 - p1.1, "{what}: executed instructions");
    }
}
