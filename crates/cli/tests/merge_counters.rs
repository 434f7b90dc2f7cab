//! `rivet merge` of counter files sums their records without building a profile per input
//! (issue 36): the bytes it writes must be those of the old way, each counter file turned into
//! a profile (`CounterFile::to_profile`) and the profiles summed by `Merger::add`, on corpus
//! programs and on SQLite, with weights, in any order, and across two instrumentations of one
//! binary. Bad counter files give one error line and leave no output.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_one_error_line, corpus_dir, real_program, repo_root, rivet, s, scratch};
use rivet_profile::counters::CounterFile;
use rivet_profile::merge::{Merger, Weight};
use rivet_profile::{fdata, native};

/// The old way: every input a profile, summed, written in Rivet's format and as fdata.
fn old_way(inputs: &[(PathBuf, &str)]) -> (Vec<u8>, String) {
    let merger = || {
        let mut merger = Merger::new();
        for (path, weight) in inputs {
            let file = CounterFile::parse(&std::fs::read(path).unwrap()).unwrap();
            let weight: Weight = weight.parse().unwrap();
            merger.add(file.to_profile(), weight).unwrap();
        }
        merger
    };
    let mut native_bytes = Vec::new();
    merger().write_native(&mut native_bytes).unwrap();
    let fdata_text = fdata::write(&merger().finish().unwrap()).unwrap();
    (native_bytes, fdata_text)
}

/// `rivet merge` of `inputs` (PATH:WEIGHT) into `out`; its bytes.
fn new_way(inputs: &[(PathBuf, &str)], out: &Path) -> Vec<u8> {
    let args: Vec<String> = inputs
        .iter()
        .map(|(p, w)| format!("{}:{w}", p.display()))
        .collect();
    let mut argv = vec!["merge"];
    argv.extend(args.iter().map(String::as_str));
    argv.extend(["-o", s(out)]);
    let r = rivet(&argv);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::read(out).unwrap()
}

/// Instruments `binary` into `dir` (extra options `extra`, output named `tag`).
fn instrument(binary: &Path, dir: &Path, tag: &str, extra: &[&str]) -> PathBuf {
    let inst = dir.join(format!("{tag}.inst"));
    let mut args = vec!["instrument", s(binary), "-o", s(&inst)];
    args.extend_from_slice(extra);
    let r = rivet(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    inst
}

/// Runs `inst` with `args` (standard input from `stdin` if given) into a fresh counter file.
fn train(inst: &Path, counts: &Path, args: &[&str], stdin: Option<&Path>) -> PathBuf {
    let _ = std::fs::remove_file(counts);
    let mut cmd = Command::new(inst);
    cmd.args(args).env("RIVET_PROFILE", counts);
    if let Some(input) = stdin {
        cmd.stdin(std::fs::File::open(input).unwrap());
    }
    // Some corpus programs exit with a status of their own (noreturn paths): what matters
    // here is the counter file they leave.
    cmd.output().unwrap();
    assert!(counts.exists(), "{} {args:?}", inst.display());
    counts.to_path_buf()
}

/// Checks the new way against the old on these inputs: Rivet's format and fdata, weights of
/// 1, whole and fractional, in two orders.
fn same_as_old_way(dir: &Path, files: &[PathBuf]) {
    let weightings: [&[&str]; 3] = [&["1"], &["3", "0.5", "1.25"], &["0.3", "2"]];
    for (k, weights) in weightings.iter().enumerate() {
        let inputs: Vec<(PathBuf, &str)> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.clone(), weights[i % weights.len()]))
            .collect();
        let (native_old, fdata_old) = old_way(&inputs);
        assert!(native::parse(std::str::from_utf8(&native_old).unwrap()).is_ok());
        let out = dir.join(format!("merged{k}.rprof"));
        assert_eq!(
            new_way(&inputs, &out),
            native_old,
            "{} weights {weights:?}",
            dir.display()
        );
        let reversed: Vec<_> = inputs.iter().rev().cloned().collect();
        assert_eq!(new_way(&reversed, &out), native_old, "reversed");
        let out = dir.join(format!("merged{k}.fdata"));
        let fdata_new = String::from_utf8(new_way(&inputs, &out)).unwrap();
        assert_eq!(fdata_new, fdata_old, "{} fdata", dir.display());
    }
}

#[test]
fn corpus_counter_files_merge_as_their_profiles_do() {
    let corpus = corpus_dir();
    let mut checked = 0;
    for name in [
        "switch_dense.gcc.O2.pie",
        "computed_goto.clang.O2.pie",
        "virtual_calls.gcc.O3.nopie",
        "exceptions.clang.O0.pie",
        "function_pointers.gcc.O2.nopie",
        "tailcalls_noreturn.clang.O3.pie",
    ] {
        let binary = corpus.join(name);
        assert!(binary.exists(), "{} is missing", binary.display());
        let dir = scratch("merge-counters", name);
        let inst = instrument(&binary, &dir, "prog", &[]);
        let a = train(&inst, &dir.join("a.counts"), &[], None);
        // A second run into the same file accumulates: other counts than one run's.
        let b = train(&inst, &dir.join("b.counts"), &[], None);
        Command::new(&inst)
            .env("RIVET_PROFILE", &b)
            .output()
            .unwrap();
        // Another instrumentation of the same binary (main left out): another map, whose
        // profile still sums with the others.
        let other = instrument(&binary, &dir, "other", &["--skip-funcs", "main"]);
        let c = train(&other, &dir.join("c.counts"), &[], None);
        assert_ne!(
            CounterFile::parse(&std::fs::read(&a).unwrap())
                .unwrap()
                .map_hash,
            CounterFile::parse(&std::fs::read(&c).unwrap())
                .unwrap()
                .map_hash
        );
        same_as_old_way(&dir, &[a.clone(), b.clone()]);
        same_as_old_way(&dir, &[a, c, b]);
        checked += 1;
    }
    assert_eq!(checked, 6);
}

#[test]
fn sqlite_counter_files_merge_as_their_profiles_do() {
    let sqlite = real_program("sqlite3-gcc");
    let dir = scratch("merge-counters", "sqlite3-gcc");
    let inst = instrument(sqlite, &dir, "sqlite3", &[]);
    let files: Vec<PathBuf> = ["workload", "unseen"]
        .iter()
        .map(|sql| {
            let script = repo_root().join(format!("bench/sqlite/{sql}.sql"));
            train(
                &inst,
                &dir.join(format!("{sql}.counts")),
                &["-bail", ":memory:"],
                Some(&script),
            )
        })
        .collect();
    same_as_old_way(&dir, &files);
}

#[test]
fn bad_counter_files_give_one_line_and_no_output() {
    let binary = corpus_dir().join("switch_dense.gcc.O2.pie");
    let dir = scratch("merge-counters", "bad");
    let inst = instrument(&binary, &dir, "prog", &[]);
    let good = train(&inst, &dir.join("good.counts"), &[], None);
    let bytes = std::fs::read(&good).unwrap();
    let out = dir.join("out.rprof");
    let _ = std::fs::remove_file(&out);
    // Truncated in the header, in the map and in the counters, after a good input (the
    // runtime's file runs to a page boundary past the counters' end).
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let counters_end = word(16) + 8 * word(24);
    for (k, len) in [40, 200, counters_end - 8].into_iter().enumerate() {
        let cut = dir.join(format!("cut{k}.counts"));
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let r = rivet(&["merge", s(&good), s(&cut), "-o", s(&out)]);
        assert_one_error_line(&r, s(&cut));
        assert!(!out.exists());
    }
    // The same map with a flipped byte: its hash no longer matches.
    let mut flipped = bytes.clone();
    flipped[100] ^= 0x40;
    let bad = dir.join("flipped.counts");
    std::fs::write(&bad, &flipped).unwrap();
    let r = rivet(&["merge", s(&good), s(&bad), "-o", s(&out)]);
    assert_one_error_line(&r, "hash");
    assert!(!out.exists());
    // A counter file of another binary: another build-id.
    let other_binary = corpus_dir().join("recursion.gcc.O2.pie");
    let other_inst = instrument(&other_binary, &dir, "other", &[]);
    let other = train(&other_inst, &dir.join("other.counts"), &[], None);
    let r = rivet(&["merge", s(&good), s(&other), "-o", s(&out)]);
    assert_one_error_line(&r, "build-id");
    assert!(!out.exists());
    // Not a profile at all.
    let foreign = dir.join("foreign.counts");
    std::fs::write(&foreign, b"\x7fELF not a counter file").unwrap();
    let r = rivet(&["merge", s(&good), s(&foreign), "-o", s(&out)]);
    assert_one_error_line(&r, s(&foreign));
    assert!(!out.exists());
}
