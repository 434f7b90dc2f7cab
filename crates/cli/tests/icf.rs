//! `rivet optimize --icf` end to end: a C program with duplicate functions (built with gcc
//! -O2 and --emit-relocs), profiled, optimized with folding and `--verify`; the output must
//! print what the input prints on another input, fold what it should, keep the two functions
//! whose addresses are compared apart, send no call of the new text to a folded function's
//! old body, and pass `rivet verify` after the fact.

mod common;

use std::path::Path;
use std::process::Command;

use common::{
    build_instrument_program, instrument_and_train, nm_symbol as symbol, rivet, s, scratch,
};

fn run(bin: &Path, arg: &str) -> std::process::Output {
    let out = Command::new(bin).arg(arg).output().unwrap();
    assert!(out.status.success(), "{} {arg}", bin.display());
    out
}

/// `rivet optimize BIN --profile COUNTS -o OUT --json` plus `extra`, which must succeed; its
/// summary.
fn optimize_json(bin: &Path, counts: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "optimize",
        s(bin),
        "--profile",
        s(counts),
        "-o",
        s(out),
        "--json",
    ];
    args.extend_from_slice(extra);
    let r = rivet(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

#[test]
fn duplicates_fold_and_the_output_behaves_the_same() {
    let dir = scratch("icf", "duplicates");
    let bin = build_instrument_program(
        &dir,
        "duplicates.c",
        "gcc",
        &["-O2", "-fno-ipa-icf", "-fno-reorder-blocks-and-partition"],
        "duplicates",
    );
    let counts = instrument_and_train(&bin, &dir, &[&["2000"]]);
    let opt = dir.join("duplicates.icf");
    let summary = optimize_json(&bin, &counts, &opt, &["--icf", "--verify"]);
    let icf = &summary["icf"];
    // sum_b, leaf_b, mid_b (once its leaves are one), even_b and odd_b (at the fixed point).
    assert_eq!(icf["folded"], 5, "{summary}");
    assert_eq!(icf["hot_folded"], 5, "{summary}");
    // ptr_a and ptr_b: identical, but their addresses are taken.
    assert_eq!(icf["address_taken_not_folded"], 1, "{summary}");
    assert!(
        icf["hot_bytes_after"].as_u64() < icf["hot_bytes_before"].as_u64(),
        "{summary}"
    );
    assert_eq!(icf["hot_bytes_after"], summary["hot_bytes"], "{summary}");

    // Same output on an input the profile did not see; `distinct=1` is in it.
    let want = run(&bin, "3000");
    assert!(String::from_utf8_lossy(&want.stdout).contains("distinct=1"));
    assert_eq!(run(&opt, "3000").stdout, want.stdout);

    // The new text (from __hot_start on) calls no folded function's old entry.
    let hot_start = symbol(&opt, "__hot_start");
    let folded: Vec<u64> = ["sum_b", "leaf_b", "mid_b", "even_b", "odd_b"]
        .iter()
        .map(|n| symbol(&bin, n))
        .collect();
    let dump = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(&opt)
        .output()
        .expect("objdump (binutils)");
    let mut calls = 0;
    for line in String::from_utf8_lossy(&dump.stdout).lines() {
        let Some((addr, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if addr < hot_start || !(rest.contains("call") || rest.contains("jmp")) {
            continue;
        }
        let target = rest
            .split_whitespace()
            .find_map(|w| u64::from_str_radix(w, 16).ok());
        if let Some(t) = target {
            calls += 1;
            assert!(
                !folded.contains(&t),
                "{line}: into a folded function's old body"
            );
        }
    }
    assert!(
        calls > 5,
        "{calls} direct calls and jumps seen in the new text"
    );

    // `rivet verify` checks the folds again from the output's own tables.
    let verified = rivet(&["verify", s(&bin), s(&opt)]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );

    // Without --icf nothing is folded, and the summary has no `icf` entry.
    let plain = dir.join("duplicates.plain");
    let summary = optimize_json(&bin, &counts, &plain, &[]);
    assert!(summary.get("icf").is_none(), "{summary}");
    assert_eq!(run(&plain, "3000").stdout, want.stdout);
}
