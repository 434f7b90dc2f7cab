//! `rivet optimize --peepholes --simplify-conditional-tail-calls` end to end: a program with
//! one instance of each shape in assembly (tests/instrument/peepholes.c), profiled, optimized
//! in its own block order (so the layout has not already made the branches fall through) with
//! `--verify`; each rewrite happens once, the output prints what the input prints on another
//! input, executes fewer instructions by the dyno stats, passes `rivet verify` after the fact,
//! and fails it once the copied `ret` is corrupted. Without the options nothing changes.

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

#[test]
fn each_shape_is_rewritten_once_verified_and_behaves_the_same() {
    let dir = scratch("peephole", "shapes");
    let bin = build_instrument_program(&dir, "peepholes.c", "gcc", &["-O2"], "peepholes");
    let counts = instrument_and_train(&bin, &dir, &[&["1000"]]);

    let plain = dir.join("peepholes.plain");
    let summary = optimize_json(&bin, &counts, &plain, &[]);
    assert!(summary.get("peepholes").is_none(), "{summary}");

    let opt = dir.join("peepholes.opt");
    let summary = optimize_json(
        &bin,
        &counts,
        &opt,
        &["--peepholes", "--simplify-conditional-tail-calls"],
    );
    let p = &summary["peepholes"];
    for kind in [
        "double_jumps",
        "useless_branches",
        "jumps_to_returns",
        "conditional_tail_calls",
    ] {
        assert_eq!(p[kind], 1, "{kind}: {summary}");
    }
    let want = run(&bin, "777");
    assert_eq!(run(&opt, "777"), want);
    assert_eq!(run(&plain, "777"), want);

    // BOLT's spellings do the same.
    let bolt = dir.join("peepholes.bolt");
    let same = optimize_json(
        &bin,
        &counts,
        &bolt,
        &["-peepholes=all", "-simplify-conditional-tail-calls"],
    );
    assert_eq!(same["peepholes"], summary["peepholes"]);

    // Fewer executed instructions than the same layout without the rewrites.
    let executed = |j: &serde_json::Value| {
        j["dyno_stats"]["after"]["executed instructions"]
            .as_u64()
            .unwrap()
    };
    let base = optimize_json(&bin, &counts, &plain, &[]);
    assert!(executed(&summary) < executed(&base), "{summary} {base}");

    let verified = rivet(&["verify", s(&bin), s(&opt)]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    // Each of the four changed ends was judged by the rules for changed ends.
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(
        said.contains(", 4 branches changed by peepholes checked"),
        "{said}"
    );

    // The copied `ret` of double_jump (its second block: `lea 2(%rdi),%eax`, then the copy)
    // turned into `int3`: the verifier must notice rather than trust the rewrite.
    let start = symbol(&opt, "double_jump");
    let elf = std::fs::read(&opt).unwrap();
    let offset = file_offset(&opt, start);
    let code = &elf[offset..offset + 32];
    let lea = code
        .windows(3)
        .position(|w| w == [0x8d, 0x47, 0x02])
        .expect("lea 2(%rdi),%eax in double_jump");
    assert_eq!(code[lea + 3], 0xc3, "the jump became a copy of the ret");
    let mut bad = elf.clone();
    bad[offset + lea + 3] = 0xcc;
    let corrupt = dir.join("peepholes.bad");
    std::fs::write(&corrupt, &bad).unwrap();
    let refused = rivet(&["verify", s(&bin), s(&corrupt)]);
    assert!(!refused.status.success(), "a corrupted copied ret passed");
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
