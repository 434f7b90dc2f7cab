//! Profiles move between Rivet and llvm-bolt-19: the fdata BOLT's instrumentation writes for a
//! deterministic run reads back with the same edge and call counts as Rivet's instrumentation
//! of the same run, and the fdata Rivet writes is accepted by `llvm-bolt-19 -data=` and by
//! `merge-fdata-19`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::{build_instrument_program, rivet, s, scratch};
use rivet_profile::{BranchCount, LocKind, Location, Profile, fdata};

/// BOLT's instrumenting driver: `/usr/bin/llvm-bolt-19` does not find its runtime library.
const BOLT_INSTRUMENT: &str = "/usr/lib/llvm-19/bin/llvm-bolt";

fn check(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs BOLT's and Rivet's instrumented builds of `original` on `args`; both profiles.
fn both_profiles(dir: &Path, original: &Path, args: &[&str]) -> (Profile, Profile) {
    let tag = format!(
        "{}-{}",
        original.file_name().unwrap().to_string_lossy(),
        args.join("-")
    );
    let bolt_inst = dir.join(format!("{tag}.bolt"));
    let bolt_fdata = dir.join(format!("{tag}.bolt.fdata"));
    check(
        Command::new(BOLT_INSTRUMENT)
            .arg(original)
            .arg("-instrument")
            .arg("-o")
            .arg(&bolt_inst)
            .arg(format!("-instrumentation-file={}", s(&bolt_fdata)))
            .output()
            .expect("llvm-bolt-19 is required (apt-get install bolt-19)"),
        "llvm-bolt -instrument",
    );
    let expected = check(
        Command::new(original).args(args).output().unwrap(),
        "original",
    );
    assert_eq!(
        check(
            Command::new(&bolt_inst).args(args).output().unwrap(),
            "BOLT's"
        ),
        expected
    );
    let ours_inst = dir.join(format!("{tag}.rivet"));
    let counts = dir.join(format!("{tag}.counts"));
    let r = rivet(&[
        "instrument",
        s(original),
        "-o",
        s(&ours_inst),
        "--profile",
        s(&counts),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        check(
            Command::new(&ours_inst).args(args).output().unwrap(),
            "Rivet's"
        ),
        expected
    );
    let ours_fdata = dir.join(format!("{tag}.rivet.fdata"));
    let r = rivet(&["merge", s(&counts), "-o", s(&ours_fdata)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let read = |p: &Path| fdata::parse(&std::fs::read_to_string(p).unwrap()).unwrap();
    (read(&bolt_fdata), read(&ours_fdata))
}

/// True for a fall-through edge of `elf`: from a branch to the instruction right after it.
fn is_fall_through(elf: &rivet_elf::ElfFile<'_>, (from, to): &(Location, Location)) -> bool {
    if from.name != to.name || from.kind == LocKind::External {
        return false;
    }
    let name = to.name.split('/').next().unwrap();
    let Some(sym) = elf.symbols().unwrap().into_iter().find(|s| s.name == name) else {
        return false;
    };
    let at = sym.value + from.offset;
    let branch = rivet_arch::Isa::of(elf).decode_all(elf.bytes_at(at, 15).unwrap(), at)[0];
    branch.end() == sym.value + to.offset
}

type Branches = BTreeMap<(Location, Location), BranchCount>;

/// Branches from functions both tools counted (`from` names seen in both), and entries from
/// `[unknown]` into them.
fn common_part(a: &Profile, b: &Profile) -> (Branches, Branches) {
    let counted = |p: &Profile| -> BTreeSet<String> {
        p.branches
            .keys()
            .filter(|(from, _)| from.kind != LocKind::External)
            .map(|(from, _)| from.name.clone())
            .collect()
    };
    let common: BTreeSet<String> = counted(a).intersection(&counted(b)).cloned().collect();
    let keep = |p: &Profile| {
        p.branches
            .iter()
            .filter(|((from, to), _)| {
                common.contains(&from.name)
                    || (from.kind == LocKind::External && common.contains(&to.name))
            })
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    (keep(a), keep(b))
}

#[test]
fn bolt_instrumentation_and_ours_count_the_same_edges() {
    let dir = scratch("instrument", "interop");
    let builds = [
        (
            "counts.c",
            build_instrument_program(
                &dir,
                "counts.c",
                "gcc",
                &["-O2", "-fno-reorder-blocks-and-partition"],
                "counts-gcc",
            ),
        ),
        (
            "counts.c",
            build_instrument_program(&dir, "counts.c", "clang-19", &["-O2"], "counts-clang"),
        ),
        (
            "throws.cpp",
            build_instrument_program(
                &dir,
                "throws.cpp",
                "g++",
                &["-O2", "-fno-reorder-blocks-and-partition"],
                "throws-gcc",
            ),
        ),
    ];
    for (src, original) in &builds {
        let runs: &[&[&str]] = if *src == "counts.c" {
            &[&["switch", "1100"], &["recurse", "40"], &["loop", "77"]]
        } else {
            &[&["10"]]
        };
        for args in runs {
            let (bolt, ours) = both_profiles(&dir, original, args);
            let (bolt, mut ours) = common_part(&bolt, &ours);
            assert!(bolt.len() >= 8, "too little in common: {bolt:?}");
            // BOLT's dump leaves out some fall-through edges (into a block that is a lone jump,
            // out of a block ending in a conditional tail call): its spanning-tree inference
            // gives them 0. Rivet counts them (exactly: instrument_counts.rs checks the
            // counts they lead to). Such fall-throughs are the only edges allowed to differ.
            let data = std::fs::read(original).unwrap();
            let elf = rivet_elf::ElfFile::parse(&data).unwrap();
            ours.retain(|k, _| bolt.contains_key(k) || !is_fall_through(&elf, k));
            assert_eq!(ours, bolt, "{} {args:?}", original.display());
        }
    }
}

#[test]
fn bolt_and_merge_fdata_accept_our_fdata() {
    let dir = scratch("instrument", "accepted");
    let original = build_instrument_program(
        &dir,
        "counts.c",
        "gcc",
        &["-O2", "-fno-reorder-blocks-and-partition"],
        "prog",
    );
    let inst = dir.join("prog.inst");
    let counts = dir.join("prog.counts");
    let r = rivet(&[
        "instrument",
        s(&original),
        "-o",
        s(&inst),
        "--profile",
        s(&counts),
    ]);
    assert!(r.status.success());
    check(
        Command::new(&inst)
            .args(["switch", "5000"])
            .output()
            .unwrap(),
        "run",
    );
    let ours = dir.join("prog.fdata");
    let r = rivet(&["merge", s(&counts), "-o", s(&ours)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

    // merge-fdata sums it with itself: every count doubles.
    let doubled = check(
        Command::new("merge-fdata-19")
            .arg(&ours)
            .arg(&ours)
            .output()
            .expect("merge-fdata-19 is required (apt-get install bolt-19)"),
        "merge-fdata-19",
    );
    let once = fdata::parse(&std::fs::read_to_string(&ours).unwrap()).unwrap();
    let twice = fdata::parse(&doubled).unwrap();
    assert_eq!(once.branches.len(), twice.branches.len());
    for (k, c) in &once.branches {
        assert_eq!(twice.branches[k].count, 2 * c.count, "{k:?}");
    }

    // llvm-bolt-19 optimizes with it and says it used it.
    let out = Command::new("llvm-bolt-19")
        .arg(&original)
        .arg("-o")
        .arg(dir.join("prog.bolt"))
        .arg(format!("-data={}", s(&ours)))
        .args([
            "-reorder-blocks=ext-tsp",
            "-reorder-functions=hfsort",
            "-dyno-stats",
        ])
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    assert!(!log.contains("BOLT-ERROR"), "{log}");
    let profiled = log
        .lines()
        .find(|l| l.contains("have non-empty execution profile"))
        .unwrap_or_else(|| panic!("no profile summary in: {log}"));
    let n: u64 = profiled
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap();
    assert!(n >= 10, "{profiled}");
    assert!(!log.contains("invalid (possibly stale)"), "{log}");
    let optimized = check(
        Command::new(dir.join("prog.bolt"))
            .args(["switch", "5000"])
            .output()
            .unwrap(),
        "BOLT-optimized",
    );
    assert_eq!(
        optimized,
        check(
            Command::new(&original)
                .args(["switch", "5000"])
                .output()
                .unwrap(),
            "original"
        )
    );
}
