//! `rivet merge` of counter files sums their records without building a profile per input
//! (issue 36): the bytes it writes must be those of the old way, each counter file turned into
//! a profile (`CounterFile::to_profile`) and the profiles summed by `Merger::add`, on corpus
//! programs and on SQLite, with weights, in any order, and across two instrumentations of one
//! binary. Bad counter files give one error line and leave no output.
//!
//! Counter files of version 2 hold no map: it is in the instrumented binary (`.rivet.map`),
//! found where the file says or given by `--instrumented`. They merge to the bytes the same
//! counters give in a version 1 file (which carries the map), and a binary missing, changed or
//! not instrumented is one error line.

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
    // The same map with a flipped byte (in a version 1 file, which carries it): its hash no
    // longer matches.
    let mut flipped = self_contained(&good);
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

/// The version 1 file (map inside) of the same counters as the counter file at `path`.
fn self_contained(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let file = CounterFile::parse(&bytes).unwrap();
    let (mut out, _) = file.map.file_prefix_self_contained();
    for c in &file.counters {
        out.extend_from_slice(&c.to_le_bytes());
    }
    out
}

#[test]
fn version_2_files_find_their_map_in_the_instrumented_binary() {
    let binary = corpus_dir().join("switch_dense.gcc.O2.pie");
    let dir = scratch("merge-counters", "v2");
    let inst = instrument(&binary, &dir, "prog", &[]);
    let a = train(&inst, &dir.join("a.counts"), &[], None);
    let b = train(&inst, &dir.join("b.counts"), &["x", "y"], None);
    let bytes = std::fs::read(&a).unwrap();
    // Version 2, no map: a page of header and path, then the counters.
    assert_eq!(bytes[8..12], 2u32.to_le_bytes());
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    assert_eq!(word(16), 4096);
    let recorded = std::fs::canonicalize(&inst).unwrap();
    let path_len = u32::from_le_bytes(bytes[64..68].try_into().unwrap()) as usize;
    assert_eq!(
        &bytes[68..68 + path_len],
        recorded.as_os_str().as_encoded_bytes()
    );
    // The instrumented binary has the map, in a section that is not loaded.
    let sections = Command::new("readelf")
        .args(["-SW", s(&inst)])
        .output()
        .unwrap();
    let sections = String::from_utf8_lossy(&sections.stdout);
    let line = sections.lines().find(|l| l.contains(".rivet.map")).unwrap();
    assert!(!line.contains(" A "), "{line}");
    // The same counters in a version 1 file merge to the same bytes, alone or mixed.
    let a1 = dir.join("a1.counts");
    std::fs::write(&a1, self_contained(&a)).unwrap();
    assert_eq!(std::fs::read(&a1).unwrap()[8..12], 1u32.to_le_bytes());
    let out = dir.join("out.rprof");
    let v2 = new_way(&[(a.clone(), "1"), (b.clone(), "1")], &out);
    assert_eq!(new_way(&[(a1.clone(), "1"), (b.clone(), "1")], &out), v2);
    assert_eq!(new_way(&[(b.clone(), "1"), (a1.clone(), "1")], &out), v2);
    let (native_old, _) = old_way(&[(a1.clone(), "1"), (b.clone(), "1")]);
    assert_eq!(v2, native_old);
    let optimize = |profile: &Path, extra: &[&str], out: &Path| {
        let mut argv = vec![
            "optimize",
            s(&binary),
            "--profile",
            s(profile),
            "-o",
            s(out),
        ];
        argv.extend_from_slice(extra);
        rivet(&argv)
    };
    let fast = dir.join("fast");
    let r = optimize(&a, &[], &fast);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let fast_bytes = std::fs::read(&fast).unwrap();
    let fast1 = dir.join("fast1");
    assert!(optimize(&a1, &[], &fast1).status.success());
    assert_eq!(std::fs::read(&fast1).unwrap(), fast_bytes);

    // The binary moved: one line naming it and its map hash, with the hint; --instrumented
    // finds it, for merge and optimize, with the same bytes.
    let moved = dir.join("moved.inst");
    std::fs::rename(&inst, &moved).unwrap();
    let _ = std::fs::remove_file(&out);
    let r = rivet(&["merge", s(&a), s(&b), "-o", s(&out)]);
    assert_one_error_line(&r, "which is missing");
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        stderr.contains(s(&recorded)) && stderr.contains("map hash"),
        "{stderr}"
    );
    assert!(stderr.contains("--instrumented"), "{stderr}");
    assert!(!out.exists());
    // A version 1 file needs no binary.
    assert!(rivet(&["merge", s(&a1), "-o", s(&out)]).status.success());
    let r = rivet(&[
        "merge",
        s(&a),
        s(&b),
        "--instrumented",
        s(&moved),
        "-o",
        s(&out),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), v2);
    assert_one_error_line(&optimize(&a, &[], &fast), "which is missing");
    let r = optimize(&a, &["--instrumented", s(&moved)], &fast);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&fast).unwrap(), fast_bytes);

    // Another instrumentation where the binary was: its map's hash differs.
    instrument(&binary, &dir, "prog", &["--skip-funcs", "main"]);
    let _ = std::fs::remove_file(&out);
    let r = rivet(&["merge", s(&a), "-o", s(&out)]);
    assert_one_error_line(&r, "which differs (its map hash is ");
    // A binary that is not instrumented.
    let r = rivet(&["merge", s(&a), "--instrumented", s(&binary), "-o", s(&out)]);
    assert_one_error_line(&r, "has no .rivet.map section");
    assert!(!out.exists());
    // Truncated in the path and in the counters.
    let counters_end = (word(16) + 8 * word(24)) as usize;
    for (k, len) in [66, 100, counters_end - 8].into_iter().enumerate() {
        let cut = dir.join(format!("cut{k}.counts"));
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let r = rivet(&["merge", s(&cut), "--instrumented", s(&moved), "-o", s(&out)]);
        assert_one_error_line(&r, s(&cut));
        assert!(!out.exists());
    }
}

/// A copy of the instrumented binary at `inst` as an older `rivet instrument` wrote it: the
/// index section's name changed (same length), so no reader finds it.
fn without_index(inst: &Path, out: &Path) -> PathBuf {
    renamed_section(inst, b".rivet.mapidx\0", out)
}

/// A copy of the binary at `inst` whose section `name` (NUL-terminated) has another name of
/// the same length, so that no reader finds it.
fn renamed_section(inst: &Path, name: &[u8], out: &Path) -> PathBuf {
    let mut bytes = std::fs::read(inst).unwrap();
    let at = bytes
        .windows(name.len())
        .rposition(|w| w == name)
        .expect("the section is named");
    bytes[at + name.len() - 2] ^= 0x20;
    std::fs::write(out, &bytes).unwrap();
    out.to_path_buf()
}

/// The (file offset, size) of section `name` of the binary at `path`.
fn section(path: &Path, name: &str) -> (usize, usize) {
    let mut file = std::fs::File::open(path).unwrap();
    let (offset, size) = rivet_profile::counters::find_section(&mut file, name)
        .unwrap()
        .unwrap();
    (offset as usize, size as usize)
}

#[test]
fn the_map_index_gives_the_bytes_of_a_full_decode() {
    use rivet_profile::counters::{CounterLayout, INDEX_SECTION, IndexedMap, MAP_SECTION};
    // Its error paths (cold, split off by gcc) never run.
    let binary = corpus_dir().join("cold_split.gcc.O2.pie");
    let dir = scratch("merge-counters", "index");
    let inst = instrument(&binary, &dir, "prog", &[]);
    let a = train(&inst, &dir.join("a.counts"), &[], None);
    let b = train(&inst, &dir.join("b.counts"), &["x", "y", "z"], None);
    let old = without_index(&inst, &dir.join("old.inst"));
    // The index is a section of its own, not loaded; an older binary has none.
    let sections = Command::new("readelf")
        .args(["-SW", s(&inst)])
        .output()
        .unwrap();
    let sections = String::from_utf8_lossy(&sections.stdout);
    let line = sections
        .lines()
        .find(|l| l.contains(INDEX_SECTION))
        .unwrap();
    assert!(!line.contains(" A "), "{line}");
    let mut file = std::fs::File::open(&old).unwrap();
    assert_eq!(
        rivet_profile::counters::find_section(&mut file, INDEX_SECTION).unwrap(),
        None
    );

    // Some instrumented functions never ran: only those that ran in some run are decoded,
    // the union over the runs, each once.
    let full_a = CounterFile::parse(&std::fs::read(&a).unwrap()).unwrap();
    let full_b = CounterFile::parse(&std::fs::read(&b).unwrap()).unwrap();
    let ran = |file: &CounterFile, i: usize| {
        file.map.functions[i].edges.iter().any(|e| {
            file.counters
                .get(e.counter as usize)
                .is_some_and(|&c| c != 0)
        })
    };
    let total = full_a.map.functions.len();
    let ran_a = (0..total).filter(|&i| ran(&full_a, i)).count();
    let ran_union = (0..total)
        .filter(|&i| ran(&full_a, i) || ran(&full_b, i))
        .count();
    assert!(
        ran_a > 0 && ran_union < total,
        "{ran_a} {ran_union} {total}"
    );
    let bytes_a = std::fs::read(&a).unwrap();
    let layout = CounterLayout::read(&bytes_a).unwrap();
    let mut indexed = IndexedMap::open(&layout, None).unwrap().unwrap();
    assert_eq!(indexed.decoded(), 0);
    assert_eq!(indexed.map().functions.len(), total);
    indexed.decode_ran(&full_a.counters).unwrap();
    assert_eq!(indexed.decoded(), ran_a);
    indexed.decode_ran(&full_b.counters).unwrap();
    indexed.decode_ran(&full_a.counters).unwrap();
    assert_eq!(indexed.decoded(), ran_union);
    for (got, full) in indexed.map().functions.iter().zip(&full_a.map.functions) {
        assert_eq!((got.start, &got.name), (full.start, &full.name));
        assert!(got.edges.is_empty() || got == full, "{}", full.name);
    }
    assert!(
        IndexedMap::open(&layout, Some(&old)).unwrap().is_none(),
        "no index, no indexed map"
    );

    // Merged through the index (v2 files, this binary) and through a full decode (the same
    // files read with the older binary; their version 1 copies): the same bytes, in Rivet's
    // format and as fdata, weighted or not, alone, together and mixed.
    let a1 = dir.join("a1.counts");
    std::fs::write(&a1, self_contained(&a)).unwrap();
    let b1 = dir.join("b1.counts");
    std::fs::write(&b1, self_contained(&b)).unwrap();
    let merge = |inputs: &[&Path], extra: &[&str], out: &Path| {
        let mut argv = vec!["merge"];
        argv.extend(inputs.iter().map(|p| s(p)));
        argv.extend(extra);
        argv.extend(["-o", s(out)]);
        let r = rivet(&argv);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        std::fs::read(out).unwrap()
    };
    let no_index = ["--instrumented", s(&old)];
    for out in [dir.join("m.rprof"), dir.join("m.fdata")] {
        for inputs in [
            vec![a.as_path()],
            vec![a.as_path(), b.as_path()],
            vec![b.as_path(), a.as_path(), b.as_path()],
        ] {
            let indexed = merge(&inputs, &[], &out);
            assert_eq!(merge(&inputs, &no_index, &out), indexed, "{inputs:?}");
            let v1: Vec<&Path> = inputs
                .iter()
                .map(|p| if *p == a { a1.as_path() } else { b1.as_path() })
                .collect();
            assert_eq!(merge(&v1, &[], &out), indexed, "{v1:?}");
        }
        let weighted = [format!("{}:3", s(&a)), format!("{}:0.5", s(&b))];
        let weighted: Vec<&Path> = weighted.iter().map(Path::new).collect();
        let indexed = merge(&weighted, &[], &out);
        assert_eq!(merge(&weighted, &no_index, &out), indexed);
        let mixed = [format!("{}:3", s(&a1)), format!("{}:0.5", s(&b))];
        let mixed: Vec<&Path> = mixed.iter().map(Path::new).collect();
        assert_eq!(merge(&mixed, &[], &out), indexed);
    }
    let (native_old, _) = old_way(&[(a.clone(), "1"), (b.clone(), "1")]);
    assert_eq!(merge(&[&a, &b], &[], &dir.join("m.rprof")), native_old);

    // Optimized from a counter file: the same binary either way.
    let optimize = |extra: &[&str], out: &Path| {
        let mut argv = vec!["optimize", s(&binary), "--profile", s(&a), "-o", s(out)];
        argv.extend_from_slice(extra);
        let r = rivet(&argv);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        std::fs::read(out).unwrap()
    };
    let fast = dir.join("fast");
    assert_eq!(optimize(&[], &fast), optimize(&no_index, &fast));

    // A damaged index is one error line naming it, with the hint, and no output: in its
    // header, its body, and a graph of a function that ran which no longer matches it.
    let (at, size) = section(&inst, INDEX_SECTION);
    let (map_at, _) = section(&inst, MAP_SECTION);
    let first_ran = (0..total).find(|&i| ran(&full_a, i)).unwrap();
    let name = full_a.map.functions[first_ran].name.as_bytes();
    let image = std::fs::read(&inst).unwrap();
    let mut graph = name.len().to_le_bytes()[..4].to_vec();
    graph.extend_from_slice(name);
    let graph_at = map_at
        + image[map_at..]
            .windows(graph.len())
            .position(|w| w == graph.as_slice())
            .unwrap();
    let out = dir.join("out.rprof");
    for (k, (flip, says)) in [
        (at + 3, "no RIVETIDX header"),
        (at + 17, "indexes another map"),
        (at + 24, "its size"),
        (at + size / 2, "does not match its hash"),
        (graph_at + graph.len(), "does not match it"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut bad = image.clone();
        bad[flip] ^= 0x10;
        let bad_inst = dir.join(format!("bad{k}.inst"));
        std::fs::write(&bad_inst, &bad).unwrap();
        let _ = std::fs::remove_file(&out);
        let r = rivet(&[
            "merge",
            s(&a),
            "--instrumented",
            s(&bad_inst),
            "-o",
            s(&out),
        ]);
        assert_one_error_line(&r, says);
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert!(
            stderr.contains(".rivet.mapidx") && stderr.contains("instrument the program again"),
            "{stderr}"
        );
        assert!(!out.exists());
        let r = rivet(&[
            "optimize",
            s(&binary),
            "--profile",
            s(&a),
            "--instrumented",
            s(&bad_inst),
            "-o",
            s(&fast),
        ]);
        assert_one_error_line(&r, says);
    }
}

#[test]
fn reset_counts_finds_a_moved_binary_through_instrumented() {
    let binary = corpus_dir().join("switch_dense.gcc.O2.pie");
    let dir = scratch("merge-counters", "reset-moved");
    let inst = instrument(&binary, &dir, "prog", &[]);
    let counts = train(&inst, &dir.join("a.counts"), &[], None);
    let before = CounterFile::parse(&std::fs::read(&counts).unwrap()).unwrap();
    assert!(before.counters.iter().any(|&c| c != 0));
    let moved = dir.join("moved.inst");
    std::fs::rename(&inst, &moved).unwrap();
    // Without the binary: one line naming where it was, and nothing touched.
    let phase = dir.join("phase.counts");
    let _ = std::fs::remove_file(&phase);
    let r = rivet(&["reset-counts", s(&counts), "-o", s(&phase)]);
    assert_one_error_line(&r, "which is missing");
    assert!(String::from_utf8_lossy(&r.stderr).contains("--instrumented"));
    assert!(!phase.exists());
    let untouched = CounterFile::parse_with(&std::fs::read(&counts).unwrap(), Some(&moved));
    assert_eq!(untouched.unwrap().counters, before.counters);
    // With it: the counts move to the phase file, the counter file is zeroed in place.
    let r = rivet(&[
        "reset-counts",
        s(&counts),
        "--instrumented",
        s(&moved),
        "-o",
        s(&phase),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let after = CounterFile::parse_with(&std::fs::read(&counts).unwrap(), Some(&moved)).unwrap();
    let taken = CounterFile::parse_with(&std::fs::read(&phase).unwrap(), Some(&moved)).unwrap();
    assert_eq!(taken.counters, before.counters);
    let site_words: std::collections::BTreeSet<usize> = before
        .map
        .functions
        .iter()
        .flat_map(|f| f.indirect.iter())
        .flat_map(|&(_, first)| (0..7).map(move |p| (first + 2 * p) as usize))
        .collect();
    for (i, &c) in after.counters.iter().enumerate() {
        if !site_words.contains(&i) {
            assert_eq!(c, 0, "counter {i}");
        }
    }
    // The phase merges, through --instrumented, to the profile of the counts before.
    let out = dir.join("phase.rprof");
    let r = rivet(&[
        "merge",
        s(&phase),
        "--instrumented",
        s(&moved),
        "-o",
        s(&out),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let mut expected = Vec::new();
    let mut merger = Merger::new();
    merger.add(before.to_profile(), Weight::ONE).unwrap();
    merger.write_native(&mut expected).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), expected);
}

/// The profile of the element-wise sum of the runs `files` (each `times` over), in Rivet's
/// format: every counter but the site tables' added slot by slot, every site's targets added by
/// target and given to the reader as spilled targets (it takes any number of them), built
/// here without `counter_sum`.
fn element_wise_sum(files: &[(&Path, u64)]) -> Vec<u8> {
    use rivet_profile::counters::{SITE_TARGETS, SITE_WORDS, SpilledTarget};
    let runs: Vec<CounterFile> = files
        .iter()
        .map(|(p, _)| CounterFile::parse(&std::fs::read(p).unwrap()).unwrap())
        .collect();
    let mut tables: Vec<u32> = runs[0]
        .map
        .functions
        .iter()
        .flat_map(|f| f.indirect.iter().map(|&(_, t)| t))
        .collect();
    tables.sort_unstable();
    let mut in_table = vec![false; runs[0].counters.len()];
    for &t in &tables {
        in_table[t as usize..(t + SITE_WORDS) as usize].fill(true);
    }
    let mut counters = vec![0u64; runs[0].counters.len()];
    let mut targets: std::collections::BTreeMap<(u32, u64), u64> = Default::default();
    for (run, &(_, times)) in runs.iter().zip(files) {
        for (k, c) in run.counters.iter().enumerate() {
            if !in_table[k] {
                counters[k] += c * times;
            }
        }
        for &t in &tables {
            let words = &run.counters[t as usize..(t + SITE_WORDS) as usize];
            for p in words[..2 * SITE_TARGETS as usize].chunks_exact(2) {
                if p[0] != 0 && p[1] != 0 {
                    *targets.entry((t, p[0])).or_default() += p[1] * times;
                }
            }
            // The overflow pair: what no profile reads, added for a whole counter array.
            counters[(t + SITE_WORDS - 1) as usize] += words[SITE_WORDS as usize - 1] * times;
        }
    }
    let spilled = targets
        .into_iter()
        .map(|((table, target), count)| SpilledTarget {
            table,
            target,
            count,
        })
        .collect();
    let sum = CounterFile {
        map: runs[0].map.clone(),
        map_hash: runs[0].map_hash,
        counters,
        spilled,
    };
    let mut merger = Merger::new();
    merger.add(sum.to_profile(), Weight::ONE).unwrap();
    let mut out = Vec::new();
    merger.write_native(&mut out).unwrap();
    out
}

/// `rivet merge` of `inputs` (PATH[:WEIGHT]) into the summed counter file `out`; its bytes.
fn summed(inputs: &[&str], out: &Path) -> Vec<u8> {
    let mut argv = vec!["merge"];
    argv.extend_from_slice(inputs);
    argv.extend(["-o", s(out)]);
    let r = rivet(&argv);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::read(out).unwrap()
}

/// Number of spilled site targets a summed file records.
fn spill_count(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[48..56].try_into().unwrap())
}

/// Checks summed counter files of three runs `a`, `b`, `c` of one instrumentation in `dir`:
/// version 3, the same bytes for any grouping and order, weights as repeats, and read back
/// (merge to a profile, and as an input among runs) as the element-wise sum of the runs.
/// Returns the spill count of a + b.
fn check_sums(dir: &Path, a: &Path, b: &Path, c: &Path) -> u64 {
    let ab = dir.join("ab.counts");
    let sum_ab = summed(&[s(a), s(b)], &ab);
    assert_eq!(
        sum_ab[8..12],
        3u32.to_le_bytes(),
        "a summed file is version 3"
    );
    assert_eq!(summed(&[s(b), s(a)], &dir.join("ba.counts")), sum_ab);
    // Associative and commutative: the same bytes for any grouping and order.
    let left = summed(&[s(&ab), s(c)], &dir.join("ab_c.counts"));
    let bc = dir.join("bc.counts");
    summed(&[s(b), s(c)], &bc);
    let right = summed(&[s(a), s(&bc)], &dir.join("a_bc.counts"));
    let flat = summed(&[s(c), s(b), s(a)], &dir.join("cba.counts"));
    assert_eq!(left, right, "{}", dir.display());
    assert_eq!(left, flat, "{}", dir.display());
    // A whole weight is a repeat.
    let a2 = format!("{}:2", s(a));
    assert_eq!(
        summed(&[&a2, s(b)], &dir.join("a2b.counts")),
        summed(&[s(a), s(b), s(a)], &dir.join("aba.counts"))
    );
    // Read back: the profile of the element-wise sum, alone and as an input among runs
    // (which `merge` to a profile then sums as profiles).
    let prof = dir.join("ab.rprof");
    assert_eq!(
        new_way(&[(ab.clone(), "1")], &prof),
        element_wise_sum(&[(a, 1), (b, 1)]),
        "{}",
        dir.display()
    );
    assert_eq!(
        new_way(&[(dir.join("a2b.counts"), "1")], &prof),
        element_wise_sum(&[(a, 2), (b, 1)])
    );
    let (mixed, _) = old_way(&[(ab.clone(), "1"), (c.to_path_buf(), "1")]);
    assert_eq!(
        new_way(&[(ab.clone(), "1"), (c.to_path_buf(), "1")], &prof),
        mixed
    );
    spill_count(&sum_ab)
}

#[test]
fn summed_counter_files_are_exact_and_read_as_one_run() {
    let corpus = corpus_dir();
    for name in [
        "computed_goto.clang.O2.pie",
        "virtual_calls.gcc.O3.nopie",
        "function_pointers.gcc.O2.nopie",
    ] {
        let binary = corpus.join(name);
        let dir = scratch("merge-counters", &format!("sum-{name}"));
        let inst = instrument(&binary, &dir, "prog", &[]);
        let a = train(&inst, &dir.join("a.counts"), &[], None);
        let b = train(&inst, &dir.join("b.counts"), &["x"], None);
        let c = train(&inst, &dir.join("c.counts"), &["x", "y"], None);
        check_sums(&dir, &a, &b, &c);
        // optimize takes the summed file as it takes one run's, and as its profile.
        let ab = dir.join("ab.counts");
        let prof = dir.join("ab.rprof");
        let profile_ab = new_way(&[(ab.clone(), "1")], &prof);
        let optimized = |profile: &Path, out: &Path| {
            let r = rivet(&[
                "optimize",
                s(&binary),
                "--profile",
                s(profile),
                "-o",
                s(out),
            ]);
            assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
            std::fs::read(out).unwrap()
        };
        assert_eq!(
            optimized(&ab, &dir.join("from-counts")),
            optimized(&prof, &dir.join("from-prof")),
            "{name}"
        );
        // inspect and report read it as they read a run's file, and as its profile.
        let inspect = |profile: &Path| {
            let r = rivet(&["inspect", s(&binary), "--profile", s(profile)]);
            assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
            r.stdout
        };
        assert_eq!(inspect(&ab), inspect(&prof), "{name}");
        let report = |profile: &Path, out: &Path| {
            let r = rivet(&[
                "report",
                s(&binary),
                "--profile",
                s(profile),
                "--output",
                s(out),
            ]);
            assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
            // The page names its profile file: the rest must be the same.
            String::from_utf8(std::fs::read(out).unwrap())
                .unwrap()
                .replace(s(profile), "PROFILE")
        };
        let (from_counts, from_prof) = (
            report(&ab, &dir.join("report-counts.html")),
            report(&prof, &dir.join("report-prof.html")),
        );
        assert!(from_counts == from_prof, "{name}: the reports differ");
        // The binary moved: --instrumented finds it, and the sum records where it is now.
        let moved = dir.join("moved.inst");
        std::fs::rename(&inst, &moved).unwrap();
        let out = dir.join("moved-sum.counts");
        let _ = std::fs::remove_file(&out);
        let r = rivet(&["merge", s(&a), s(&b), "-o", s(&out)]);
        assert_one_error_line(&r, "which is missing");
        assert!(!out.exists());
        let moved_sum = summed(&[s(&a), s(&b), "--instrumented", s(&moved)], &out);
        let canonical = std::fs::canonicalize(&moved).unwrap();
        let len = u32::from_le_bytes(moved_sum[64..68].try_into().unwrap()) as usize;
        assert_eq!(
            &moved_sum[68..68 + len],
            canonical.as_os_str().as_encoded_bytes()
        );
        assert_eq!(new_way(&[(out.clone(), "1")], &prof), profile_ab, "{name}");
        // Binaries of older instrumentations: without .rivet.sites the plan comes from the
        // map index, without the index too from the whole map; the same counters either way
        // (only the binary's path in the header differs).
        let no_sites = renamed_section(&moved, b".rivet.sites\0", &dir.join("no-sites.inst"));
        let old = without_index(&no_sites, &dir.join("old.inst"));
        for (k, binary) in [no_sites, old].iter().enumerate() {
            let out_old = dir.join(format!("old-sum{k}.counts"));
            let old_sum = summed(&[s(&a), s(&b), "--instrumented", s(binary)], &out_old);
            assert_eq!(old_sum[..64], moved_sum[..64]);
            assert_eq!(old_sum[4096..], moved_sum[4096..], "{name} {k}");
        }
    }
}

#[test]
fn sqlite_sums_keep_every_target_of_every_site() {
    // SQLite's two workloads together call more than seven targets from one site: the sum
    // spills them, and reads back as the element-wise sum with all of them.
    let sqlite = real_program("sqlite3-gcc");
    let dir = scratch("merge-counters", "sum-sqlite3-gcc");
    let inst = instrument(sqlite, &dir, "sqlite3", &[]);
    let run = |sql: &str, tag: &str| {
        let script = repo_root().join(format!("bench/sqlite/{sql}.sql"));
        train(
            &inst,
            &dir.join(format!("{tag}.counts")),
            &["-bail", ":memory:"],
            Some(&script),
        )
    };
    let a = run("workload", "a");
    let b = run("unseen", "b");
    let c = run("workload", "c");
    assert!(check_sums(&dir, &a, &b, &c) > 0, "no site spilled");
}

#[test]
fn bad_inputs_of_a_summed_file_give_one_line_and_no_output() {
    let binary = corpus_dir().join("virtual_calls.gcc.O3.nopie");
    let dir = scratch("merge-counters", "sum-bad");
    let inst = instrument(&binary, &dir, "prog", &[]);
    let good = train(&inst, &dir.join("good.counts"), &[], None);
    let bytes = std::fs::read(&good).unwrap();
    let out = dir.join("out.counts");
    let fails = |inputs: &[&str], expect: &str| {
        let _ = std::fs::remove_file(&out);
        let mut argv = vec!["merge"];
        argv.extend_from_slice(inputs);
        argv.extend(["-o", s(&out)]);
        assert_one_error_line(&rivet(&argv), expect);
        assert!(!out.exists(), "{inputs:?}");
    };
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let counters_end = word(16) + 8 * word(24);
    for (k, len) in [40, 100, counters_end - 8].into_iter().enumerate() {
        let cut = dir.join(format!("cut{k}.counts"));
        std::fs::write(&cut, &bytes[..len]).unwrap();
        fails(&[s(&good), s(&cut)], s(&cut));
    }
    // Another instrumentation of the binary: another map hash.
    let other = instrument(&binary, &dir, "other", &["--skip-funcs", "main"]);
    let other_counts = train(&other, &dir.join("other.counts"), &[], None);
    fails(&[s(&good), s(&other_counts)], "another instrumentation");
    // A profile among counter files, a version 1 file, a fractional weight.
    let prof = dir.join("good.rprof");
    new_way(&[(good.clone(), "1")], &prof);
    fails(&[s(&good), s(&prof)], "is not a counter file");
    let v1 = dir.join("v1.counts");
    std::fs::write(&v1, self_contained(&good)).unwrap();
    fails(&[s(&good), s(&v1)], "version 1");
    let half = format!("{}:0.5", s(&good));
    fails(&[s(&good), &half], "whole numbers");
    fails(&[s(&good), s(&good), "--binary", s(&binary)], "--binary");
    // A sum that does not fit 64 bits: refused, never clamped.
    let first = (word(16)..counters_end)
        .step_by(8)
        .find(|&at| word(at) != 0)
        .unwrap();
    let mut huge = bytes.clone();
    huge[first..first + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let huge_path = dir.join("huge.counts");
    std::fs::write(&huge_path, &huge).unwrap();
    fails(&[s(&good), s(&huge_path)], "passes 2^64 - 1");
    let times3 = format!("{}:3", s(&huge_path));
    fails(&[&times3], "passes 2^64 - 1");
    // A summed file cut in its spilled targets, or with bytes after them, or out of order.
    let spilled_sum = dir.join("sum.counts");
    let mut sum = summed(&[s(&good), s(&good)], &spilled_sum);
    sum[48..56].copy_from_slice(&1u64.to_le_bytes());
    let damaged = dir.join("damaged.counts");
    std::fs::write(&damaged, &sum).unwrap();
    fails(&[s(&damaged)], "spilled site targets end early");
    sum[48..56].fill(0);
    sum.push(0);
    std::fs::write(&damaged, &sum).unwrap();
    fails(&[s(&damaged)], "bytes after the spilled site targets");
    // A damaged map index: one line naming it.
    let no_sites = renamed_section(&inst, b".rivet.sites\0", &dir.join("no-sites.inst"));
    let (offset, size) = section(&no_sites, rivet_profile::counters::INDEX_SECTION);
    let mut damaged_inst = std::fs::read(&no_sites).unwrap();
    damaged_inst[offset + size - 1] ^= 1;
    let damaged_inst_path = dir.join("damaged.inst");
    std::fs::write(&damaged_inst_path, &damaged_inst).unwrap();
    let argv = [s(&good), "--instrumented", s(&damaged_inst_path)];
    fails(&argv, ".rivet.mapidx");
    // A damaged site table section: one line naming it, for each of its bytes' kinds.
    let (offset, size) = section(&inst, rivet_profile::counters::SITES_SECTION);
    assert_eq!(size, rivet_profile::counters::SITES_SIZE);
    for at in [0, 8, 16, 24, 32] {
        let mut bad = std::fs::read(&inst).unwrap();
        bad[offset + at] ^= 1;
        let bad_path = dir.join("bad-sites.inst");
        std::fs::write(&bad_path, &bad).unwrap();
        fails(&[s(&good), "--instrumented", s(&bad_path)], ".rivet.sites");
    }
    // No run counts into a summed file.
    let r = rivet(&["reset-counts", s(&spilled_sum)]);
    assert_one_error_line(&r, "summed counter file");
    // No input changed.
    assert_eq!(std::fs::read(&good).unwrap(), bytes);
    assert_eq!(std::fs::read(&huge_path).unwrap(), huge);
}

#[test]
fn targets_outside_the_binary_are_summed_as_unplaced() {
    use rivet_profile::counters::SITE_WORDS;
    // A site table whose first target is moved into a shared library's addresses, as address
    // randomisation makes each run record its own: the sum keeps its count as unplaced, and
    // the profile is the same (no profile names it).
    let binary = corpus_dir().join("virtual_calls.gcc.O3.nopie");
    let dir = scratch("merge-counters", "sum-outside");
    let inst = instrument(&binary, &dir, "prog", &[]);
    let run = train(&inst, &dir.join("run.counts"), &[], None);
    let mut bytes = std::fs::read(&run).unwrap();
    let parsed = CounterFile::parse(&bytes).unwrap();
    let table = parsed
        .map
        .functions
        .iter()
        .flat_map(|f| f.indirect.iter().map(|&(_, t)| t as usize))
        .find(|&t| parsed.counters[t] != 0 && parsed.counters[t + 1] != 0)
        .expect("a site recorded a target");
    let offset = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    let word = |k: usize| offset + 8 * k;
    let count = parsed.counters[table + 1];
    bytes[word(table)..word(table) + 8].copy_from_slice(&0x7f12_3456_0000u64.to_le_bytes());
    let outside = dir.join("outside.counts");
    std::fs::write(&outside, &bytes).unwrap();
    let sum = summed(&[s(&outside)], &dir.join("sum.counts"));
    let sum_word =
        |k: usize| u64::from_le_bytes(sum[4096 + 8 * k..4096 + 8 * k + 8].try_into().unwrap());
    let last = table + SITE_WORDS as usize - 1;
    assert_eq!(sum_word(last), parsed.counters[last] + count);
    assert!((0..7).all(|p| sum_word(table + 2 * p) != 0x7f12_3456_0000));
    let prof = dir.join("p.rprof");
    assert_eq!(
        new_way(&[(dir.join("sum.counts"), "1")], &prof),
        new_way(&[(outside.clone(), "1")], &prof)
    );
}
