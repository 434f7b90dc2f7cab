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
//! fragment goes straight there when the whole new text is within its reach (these small
//! programs), else to an island, a `b` after the hot fragment's code, so reaching the cold
//! block runs one branch more; the dyno stats are checked in both regimes
//! (`--aarch64-islands=always` forces the second). Block alignment is off in both: the `nop`s of padding that runs are not in
//! the dyno stats (their number depends on the final addresses).
//!
//! Calls and returns are the same in any layout, and so is every branch of code left in
//! place; the taken branches of simulate also count those, and they cancel out.

mod common;

use std::path::{Path, PathBuf};
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

/// Instruments `program` into `dir`, runs it once under qemu and returns its counter file.
fn instrumented_run(dir: &Path, program: &Path, what: &str) -> PathBuf {
    let inst = dir.join("prog.inst");
    let counts = dir.join("prog.counts");
    let out = rivet(&[
        "instrument",
        s(program),
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
    counts
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
        let counts = instrumented_run(&dir, &program, &what);

        // (predicted, simulated, optimize's summary) of each layout.
        let layouts: Vec<(Counts, Counts, Value)> = [
            &[][..],
            &["--split-functions=false", "--reorder-blocks=none"][..],
            &["--aarch64-islands=always"][..],
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
        let (p1, s1, _) = &layouts[1];
        for (p0, s0, summary) in [&layouts[0], &layouts[2]] {
            assert!(
                summary["split"].as_u64().unwrap() > 0,
                "{what}: the default layout splits nothing, so it tests nothing AArch64-specific: {summary}"
            );
            let form = &summary["fragment_exits"]["form"];
            eprintln!(
                "{what} ({form}): taken branches {} (predicted {}), instructions {} (predicted {})",
                s0.0 - s1.0,
                p0.0 - p1.0,
                s0.1 - s1.1,
                p0.1 - p1.1
            );
            assert_eq!(s0.0 - s1.0, p0.0 - p1.0, "{what} ({form}): taken branches");
            assert_eq!(
                s0.1 - s1.1,
                p0.1 - p1.1,
                "{what} ({form}): executed instructions"
            );
        }
        assert_eq!(layouts[0].2["fragment_exits"]["form"], "direct", "{what}");
        assert_eq!(layouts[2].2["fragment_exits"]["form"], "islands", "{what}");
    }
}

/// (address, mnemonic, operands) of every instruction `aarch64-linux-gnu-objdump` shows in
/// the sections named `section` of `binary` (an output has the input's `.text` and its own).
fn disassembly(binary: &Path, section: &str) -> Vec<(u64, String, String)> {
    let out = Command::new("aarch64-linux-gnu-objdump")
        .args(["-d", "--no-show-raw-insn", "-j", section])
        .arg(binary)
        .output()
        .expect(
            "aarch64-linux-gnu-objdump is required (apt-get install binutils-aarch64-linux-gnu)",
        );
    assert!(
        out.status.success(),
        "objdump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let (addr, rest) = line.split_once(":\t")?;
            let addr = u64::from_str_radix(addr.trim(), 16).ok()?;
            let mut parts = rest.splitn(2, '\t');
            let mnemonic = parts.next()?.trim().to_string();
            let operands = parts.next().unwrap_or("").trim().to_string();
            Some((addr, mnemonic, operands))
        })
        .collect()
}

/// The branch target objdump prints first among `operands` (`cbz w0, 4101a0 <f+0x20>`).
fn branch_target(operands: &str) -> Option<u64> {
    operands
        .split([',', ' '])
        .filter(|w| !w.is_empty())
        .find_map(|w| u64::from_str_radix(w, 16).ok().filter(|_| w.len() >= 4))
}

/// AArch64 exits to cold code go straight there below the new-text bound, through islands
/// above it. A small program's whole new text is far within a conditional branch's reach, so
/// by default every conditional branch from hot code into the cold fragment goes straight to
/// its cold block: one taken branch to get there, no island. With `--aarch64-islands=always`
/// (the regime of new text over 1 MiB) each goes in its short form to an island, a `b` to the
/// cold block after the hot fragment's code, and none goes there directly. Either way the
/// run (which never enters the cold paths of `cold_split.c`) falls through every such
/// branch, so the split layout takes no more branches than the same block order unsplit.
/// (The opposite test over a `b`, the form before islands, was taken on every hot run of
/// each exit.)
#[test]
fn exits_to_cold_code_go_direct_below_the_bound_and_through_islands_above_it() {
    let dir = scratch("aarch64-dyno-measured", "islands");
    let program = cross_build_aarch64(&dir, "cold_split.c", "gcc", &["-O2"], "prog");
    let counts = instrumented_run(&dir, &program, "cold_split.c");
    let optimize = |name: &str, options: &[&str]| {
        let output = dir.join(name);
        let mut args = vec![
            "optimize",
            s(&program),
            "--profile",
            s(&counts),
            "-o",
            s(&output),
            "--align-blocks=false",
            "--verify",
            "--json",
        ];
        args.extend_from_slice(options);
        let summary = ok(&rivet(&args), &format!("optimize {options:?}"));
        (output, summary)
    };
    // Names of one length: the loader's and the C library's work, which the whole run's
    // counts include, depends on the program's path (2 taken branches and 13 instructions
    // for two characters more).
    let (direct, direct_summary) = optimize("prog.split", &[]);
    let (islands, islands_summary) = optimize("prog.islnd", &["--aarch64-islands=always"]);
    let (whole, _) = optimize("prog.whole", &["--split-functions=false"]);
    for summary in [&direct_summary, &islands_summary] {
        assert!(
            summary["split"].as_u64().unwrap() > 0,
            "nothing split: {summary}"
        );
    }
    let bound = direct_summary["new_text_bound"].as_u64().unwrap();
    assert!(
        bound > 0 && bound < 32 * 1024,
        "a small program's new text is bounded below tbz's reach: {bound}"
    );
    assert_eq!(direct_summary["fragment_exits"]["form"], "direct");
    assert_eq!(islands_summary["fragment_exits"]["form"], "islands");

    // (exits straight into the cold section, exits through an island) of a program's hot
    // code: conditional branches whose target is a cold block, and those whose target,
    // after them, is a `b` into the cold section.
    let exits = |binary: &Path| {
        let code = disassembly(binary, ".text");
        let cold = disassembly(binary, ".text.cold");
        let (cold_lo, cold_hi) = (
            cold.iter().map(|i| i.0).min().expect("a cold section"),
            cold.iter().map(|i| i.0).max().expect("a cold section"),
        );
        let in_cold = |t: u64| (cold_lo..=cold_hi).contains(&t);
        let at: std::collections::HashMap<u64, &(u64, String, String)> =
            code.iter().map(|i| (i.0, i)).collect();
        let conditional =
            |m: &str| m.starts_with("b.") || ["cbz", "cbnz", "tbz", "tbnz"].contains(&m);
        let branches: Vec<_> = code.iter().filter(|(_, m, _)| conditional(m)).collect();
        let straight = branches
            .iter()
            .filter(|(_, _, ops)| branch_target(ops).is_some_and(in_cold))
            .count();
        let through_islands = branches
            .iter()
            .filter(|(addr, _, ops)| {
                branch_target(ops)
                    .and_then(|t| at.get(&t))
                    .is_some_and(|island| {
                        island.0 > *addr
                            && island.1 == "b"
                            && branch_target(&island.2).is_some_and(in_cold)
                    })
            })
            .count();
        (straight, through_islands)
    };
    let (straight, through_islands) = exits(&direct);
    assert!(
        straight > 0 && through_islands == 0,
        "below the bound: {straight} exits straight to cold code, {through_islands} through islands"
    );
    let (straight_above, through_islands_above) = exits(&islands);
    assert!(
        straight_above == 0 && through_islands_above > 0,
        "above the bound: {straight_above} exits straight to cold code, {through_islands_above} through islands"
    );
    // Islands cost the hot text a word each (here within the functions' alignment padding,
    // so the hot text's size is the same): the same layout with islands holds more `b`s.
    let jumps = |binary: &Path| {
        disassembly(binary, ".text")
            .iter()
            .filter(|(_, m, _)| m == "b")
            .count()
    };
    assert!(
        jumps(&islands) > jumps(&direct),
        "`b` in the hot text: with islands {}, direct {}",
        jumps(&islands),
        jumps(&direct)
    );

    let s_whole = simulated(&whole);
    for (binary, form) in [(&direct, "direct"), (&islands, "islands")] {
        let s_split = simulated(binary);
        eprintln!(
            "{form}: taken branches split {} unsplit {}; instructions split {} unsplit {}",
            s_split.0, s_whole.0, s_split.1, s_whole.1
        );
        assert!(
            s_split.0 <= s_whole.0,
            "{form}: splitting added taken branches on the path that runs: {} > {}",
            s_split.0,
            s_whole.0
        );
        assert!(
            s_split.1 <= s_whole.1,
            "{form}: splitting added executed instructions"
        );
    }
    // All behave as the original.
    let run = |binary: &Path| {
        Command::new("qemu-aarch64")
            .args(["-L", SYSROOT])
            .arg(binary)
            .output()
            .expect("qemu-aarch64")
    };
    let a = run(&program);
    for binary in [&direct, &islands, &whole] {
        let b = run(binary);
        assert_eq!(
            (a.status.code(), &a.stdout),
            (b.status.code(), &b.stdout),
            "{}",
            binary.display()
        );
    }
}
