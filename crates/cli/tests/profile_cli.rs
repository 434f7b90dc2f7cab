//! Profiles as a user handles them: `rivet merge` sums runs deterministically and refuses to
//! mix kinds or builds; `rivet inspect --profile` reports what matched and refuses a profile of
//! another build unless forced.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    assert_one_error_line, build_instrument_program, instrument_source, rivet, s, scratch,
};
use rivet_profile::{Location, native};

fn build(dir: &Path, flags: &[&str], name: &str) -> PathBuf {
    build_instrument_program(dir, "counts.c", "gcc", flags, name)
}

/// Instruments `binary`, runs it once per argument list, each into its own counter file.
fn counts(binary: &Path, runs: &[&[&str]]) -> Vec<PathBuf> {
    let inst = binary.with_extension("inst");
    let r = rivet(&["instrument", s(binary), "-o", s(&inst)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    runs.iter()
        .enumerate()
        .map(|(i, args)| {
            let file = binary.with_extension(format!("run{i}.counts"));
            let _ = std::fs::remove_file(&file);
            let out = Command::new(&inst)
                .args(*args)
                .env("RIVET_PROFILE", &file)
                .output()
                .unwrap();
            assert!(out.status.success());
            file
        })
        .collect()
}

fn entries(text: &str, name: &str) -> u64 {
    native::parse(text)
        .unwrap()
        .branches
        .iter()
        .filter(|((_, to), _)| to.name == name && to.offset == 0)
        .map(|(_, c)| c.count)
        .sum()
}

#[test]
fn merge_sums_runs_deterministically_and_refuses_mixtures() {
    let dir = scratch("profile-cli", "merge");
    let binary = build(&dir, &["-O2"], "prog");
    let files = counts(
        &binary,
        &[&["loop", "100"], &["loop", "23"], &["switch", "50"]],
    );
    let ab = dir.join("ab.rprof");
    let r = rivet(&[
        "merge",
        s(&files[0]),
        s(&files[1]),
        s(&files[2]),
        "-o",
        s(&ab),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = std::fs::read_to_string(&ab).unwrap();
    assert_eq!(entries(&text, "tick"), 123);
    assert_eq!(entries(&text, "dispatch"), 50);
    assert_eq!(entries(&text, "main"), 3);
    // Any order, same bytes; merging merged profiles sums again.
    let ba = dir.join("ba.rprof");
    let r = rivet(&[
        "merge",
        s(&files[2]),
        s(&files[1]),
        s(&files[0]),
        "-o",
        s(&ba),
    ]);
    assert!(r.status.success());
    assert_eq!(std::fs::read(&ab).unwrap(), std::fs::read(&ba).unwrap());
    let twice = dir.join("twice.fdata");
    let r = rivet(&["merge", s(&ab), s(&ba), "-o", s(&twice)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let fdata = rivet_profile::fdata::parse(&std::fs::read_to_string(&twice).unwrap()).unwrap();
    let tick: u64 = fdata
        .branches
        .iter()
        .filter(|((_, to), _)| *to == Location::symbol("tick", 0))
        .map(|(_, c)| c.count)
        .sum();
    assert_eq!(tick, 246);

    // A sample profile does not mix with branch counts.
    let samples = dir.join("samples.fdata");
    std::fs::write(&samples, "no_lbr cpu-clock:u\n1 main 10 5\n").unwrap();
    let out = dir.join("mixed.rprof");
    let r = rivet(&["merge", s(&ab), s(&samples), "-o", s(&out)]);
    assert_one_error_line(&r, s(&samples));
    assert!(!out.exists());

    // Nor does a profile of another build.
    let other = build(&dir, &["-O1"], "other");
    let other_counts = counts(&other, &[&["loop", "5"]]);
    let r = rivet(&["merge", s(&files[0]), s(&other_counts[0]), "-o", s(&out)]);
    assert_one_error_line(&r, "build");
    assert!(!out.exists());

    // Garbage in: one line, nothing out.
    let junk = dir.join("junk.counts");
    std::fs::write(&junk, b"RIVETCNT\x01\x00\x00\x00truncated").unwrap();
    let r = rivet(&["merge", s(&junk), "-o", s(&out)]);
    assert_one_error_line(&r, "junk.counts");
    assert!(!out.exists());
}

#[test]
fn merge_weighs_inputs_and_reads_colons_in_paths() {
    let dir = scratch("profile-cli", "weights");
    let binary = build(&dir, &["-O2"], "prog");
    let files = counts(&binary, &[&["loop", "100"], &["loop", "7"]]);
    // tick entered 100*3 + 7*0.5 = 300 + 3.5 -> 304 (halves go to even).
    let weighted = dir.join("weighted.rprof");
    let (a, b) = (
        format!("{}:3", s(&files[0])),
        format!("{}:0.5", s(&files[1])),
    );
    let r = rivet(&["merge", &a, &b, "-o", s(&weighted)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let text = std::fs::read_to_string(&weighted).unwrap();
    assert_eq!(entries(&text, "tick"), 304);
    // main was entered once per run: each input is weighted before the sum, so 1*3 plus 1*0.5,
    // which rounds to 0 (halves to even): 3.
    assert_eq!(entries(&text, "main"), 3);

    // Colons: only a trailing :NUMBER is a weight; a path ending in one is given as PATH:1.
    let colon = dir.join("host:a.counts");
    let numbered = dir.join("run:2");
    std::fs::copy(&files[0], &colon).unwrap();
    std::fs::copy(&files[1], &numbered).unwrap();
    let out = dir.join("colons.rprof");
    let n = format!("{}:1", s(&numbered));
    let r = rivet(&["merge", s(&colon), &n, "-o", s(&out)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        entries(&std::fs::read_to_string(&out).unwrap(), "tick"),
        107
    );
    // Without the :1 the 2 is a weight, and the path "run" does not exist.
    let r = rivet(&["merge", s(&numbered), "-o", s(&out)]);
    assert_one_error_line(&r, "cannot read");
    for bad in ["0", "-1", "1.2.3"] {
        let arg = format!("{}:{bad}", s(&files[0]));
        let r = rivet(&["merge", &arg, "-o", s(&out)]);
        if bad == "-1" {
            // Not a number: part of the path, which does not exist.
            assert_one_error_line(&r, "cannot read");
        } else {
            assert_one_error_line(&r, "weight");
        }
    }

    // The same inputs from a list file, with a bad weight in it, then without.
    let list = dir.join("inputs.txt");
    std::fs::write(&list, format!("{a}\n{b}\n")).unwrap();
    let listed = dir.join("listed.rprof");
    let r = rivet(&["merge", "--inputs-from", s(&list), "-o", s(&listed)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&listed).unwrap(), text.as_bytes());
    std::fs::write(&list, format!("{a}\n{}:x.5\n", s(&files[1]))).unwrap();
    let r = rivet(&["merge", "--inputs-from", s(&list), "-o", s(&listed)]);
    assert_one_error_line(&r, "cannot read");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let r = rivet(&["merge", "--inputs-from", s(&empty), "-o", s(&listed)]);
    assert_one_error_line(&r, "lists no inputs");
}

#[test]
fn inspect_reports_matches_and_refuses_other_builds() {
    let dir = scratch("profile-cli", "inspect");
    let binary = build(&dir, &["-O2"], "prog");
    let files = counts(&binary, &[&["switch", "1100"]]);
    let r = rivet(&["inspect", s(&binary), "--profile", s(&files[0]), "--json"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let report: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(report["matched"], report["records"], "{report}");
    assert!(report["unknown_functions"].as_array().unwrap().is_empty());
    assert!(report["stale_functions"].as_array().unwrap().is_empty());
    let hot: Vec<&str> = report["hot"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    // main's loop and the dispatch it calls 1100 times, then the cases.
    assert_eq!(hot[..2], ["main", "dispatch"], "{hot:?}");
    assert_eq!(hot[2], "fallback", "{hot:?}");

    // The same source built otherwise is another build.
    let other = build(&dir, &["-O1"], "other");
    let r = rivet(&["inspect", s(&other), "--profile", s(&files[0])]);
    assert_one_error_line(&r, "another build");
    let r = rivet(&[
        "inspect",
        s(&other),
        "--profile",
        s(&files[0]),
        "--force",
        "--json",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let report: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(
        report["matched"].as_u64().unwrap() < report["records"].as_u64().unwrap(),
        "a profile of -O2 code cannot match -O1 code everywhere: {report}"
    );
    assert!(!report["stale_functions"].as_array().unwrap().is_empty());
}

#[test]
fn instrument_refuses_what_it_cannot_do_with_one_line() {
    let dir = scratch("profile-cli", "refuse");
    // No relocations.
    let plain = dir.join("plain");
    let status = Command::new("gcc")
        .args(["-O2"])
        .arg(instrument_source("counts.c"))
        .arg("-o")
        .arg(&plain)
        .arg("-lpthread")
        .status()
        .unwrap();
    assert!(status.success());
    let out = dir.join("plain.inst");
    let r = rivet(&["instrument", s(&plain), "-o", s(&out)]);
    assert_one_error_line(&r, "instrumentation needs relocations");
    assert!(!out.exists());
    // Output over the input, an unwritable directory, an instrumented binary again.
    let binary = build(&dir, &["-O2"], "prog");
    let r = rivet(&["instrument", s(&binary), "-o", s(&binary)]);
    assert_one_error_line(&r, "is the input");
    let r = rivet(&["instrument", s(&binary), "-o", "/proc/nonexistent/x"]);
    assert_one_error_line(&r, "cannot write");
    let inst = dir.join("prog.inst");
    let r = rivet(&["instrument", s(&binary), "-o", s(&inst)]);
    assert!(r.status.success());
    let again = dir.join("prog.inst2");
    let r = rivet(&["instrument", s(&inst), "-o", s(&again)]);
    assert_one_error_line(&r, "already rewritten");
    assert!(!again.exists());
}
