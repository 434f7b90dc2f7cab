//! `rivet optimize --tail-duplication` end to end: a program whose hot loop calls a function
//! with two hot latches jumping to one small shared tail, more than 64 bytes away
//! (tests/instrument/taildup.c), built PIE and non-PIE, profiled, optimized in its own block
//! order without splitting (so the cold block stays between the jumps and the tail) with
//! `--verify`. Both jumps become copies of the tail, the output prints what the input prints on
//! another input, takes fewer branches by the dyno stats, passes `rivet verify` after the fact,
//! and fails it once a copy is corrupted. Without the option nothing is duplicated.

mod common;

use std::path::Path;
use std::process::Command;

use common::{
    build_instrument_program, instrument_and_train, nm_symbol as symbol, rivet, s, scratch,
};

fn optimize_json(bin: &Path, counts: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "optimize",
        s(bin),
        "--profile",
        s(counts),
        "-o",
        s(out),
        "--reorder-blocks",
        "none",
        "--split-functions=false",
        "--verify",
        "--json",
    ];
    args.extend_from_slice(extra);
    let r = rivet(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

fn run(bin: &Path, arg: &str) -> Vec<u8> {
    let out = Command::new(bin).arg(arg).output().unwrap();
    assert!(out.status.success(), "{} {arg}", bin.display());
    out.stdout
}

fn taken(j: &serde_json::Value) -> u64 {
    j["dyno_stats"]["after"]["taken branches"]
        .as_u64()
        .unwrap_or_else(|| panic!("taken branches in {j}"))
}

fn shared_tail_copied(pie: bool) {
    let name = if pie { "pie" } else { "nopie" };
    let dir = scratch("tail_duplication", name);
    let flag = if pie { "-pie" } else { "-no-pie" };
    let bin = build_instrument_program(&dir, "taildup.c", "gcc", &["-O2", flag], "taildup");
    let counts = instrument_and_train(&bin, &dir, &[&["1000"]]);

    let plain = dir.join("taildup.plain");
    let base = optimize_json(&bin, &counts, &plain, &[]);
    assert!(base.get("tail_duplication").is_none(), "{base}");

    let opt = dir.join("taildup.opt");
    let summary = optimize_json(&bin, &counts, &opt, &["--tail-duplication=moderate"]);
    let t = &summary["tail_duplication"];
    assert_eq!(t["duplicated"], 2, "{summary}");
    // add $5 (3 bytes), addl $1 to a RIP-relative counter (7), xor (3), ret (1), per copy.
    assert_eq!(t["bytes"], 28, "{summary}");
    assert_eq!(t["jumps_removed"], 1000, "{summary}");
    assert!(taken(&summary) < taken(&base), "{summary} {base}");
    let want = run(&bin, "777");
    assert_eq!(run(&opt, "777"), want);
    assert_eq!(run(&plain, "777"), want);

    // BOLT's spelling; `cache` copies the same two (both tails return).
    let bolt = dir.join("taildup.bolt");
    let same = optimize_json(&bin, &counts, &bolt, &["-tail-duplication=cache"]);
    assert_eq!(same["tail_duplication"]["duplicated"], 2, "{same}");
    assert_eq!(run(&bolt, "777"), want);

    let verified = rivet(&["verify", s(&bin), s(&opt)]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(
        said.contains(", 2 duplicated tails checked against their originals"),
        "{said}"
    );

    // The first copy follows `lea 3(%rdi),%eax`: its `add $5,%eax` turned into `add $6`.
    let start = symbol(&opt, "kernel");
    let elf = std::fs::read(&opt).unwrap();
    let offset = file_offset(&opt, start);
    let code = &elf[offset..offset + 64];
    let lea = code
        .windows(3)
        .position(|w| w == [0x8d, 0x47, 0x03])
        .expect("lea 3(%rdi),%eax in kernel");
    assert_eq!(
        code[lea + 3..lea + 6],
        [0x83, 0xc0, 0x05],
        "the jump became a copy of the tail"
    );
    let mut bad = elf.clone();
    bad[offset + lea + 5] = 0x06;
    let corrupt = dir.join("taildup.bad");
    std::fs::write(&corrupt, &bad).unwrap();
    let refused = rivet(&["verify", s(&bin), s(&corrupt)]);
    assert!(!refused.status.success(), "a corrupted tail copy passed");
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("copy of block"), "{why}");
}

#[test]
fn shared_tail_is_copied_into_both_latches_non_pie() {
    shared_tail_copied(false);
}

#[test]
fn shared_tail_is_copied_into_both_latches_pie() {
    shared_tail_copied(true);
}

/// The file offset of virtual address `addr` in `bin`, from its program headers.
fn file_offset(bin: &Path, addr: u64) -> usize {
    let out = Command::new("readelf")
        .args(["-lW"])
        .arg(bin)
        .output()
        .expect("readelf (binutils)");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() != Some(&"LOAD") {
            continue;
        }
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let (off, vaddr, filesz) = (hex(f[1]), hex(f[2]), hex(f[4]));
        if (vaddr..vaddr + filesz).contains(&addr) {
            return (addr - vaddr + off) as usize;
        }
    }
    panic!("{addr:#x} is in no PT_LOAD of {}", bin.display())
}
