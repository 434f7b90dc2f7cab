//! Golden dumps of discovery on hand-written assembly.
//!
//! Each `tests/golden/NAME.s` is assembled and linked (with `--emit-relocs`) at test time, run
//! (its exit code is part of the expectation), and its program dump compared with
//! `tests/golden/NAME.dump`. Assembly keeps these inputs independent of compiler versions and
//! lets each construct be written exactly. After an intended change of the dump format, run
//! `RIVET_BLESS=1 cargo test -p rivet-discover --test golden` and review the diff.

use std::path::{Path, PathBuf};
use std::process::Command;

use rivet_discover::{CfiRows, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_ir::dump::dump_program;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn build_with(name: &str, pie: bool, relocs: bool) -> PathBuf {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("golden");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(format!(
        "{name}{}{}",
        if pie { ".pie" } else { "" },
        if relocs { "" } else { ".norelocs" }
    ));
    let src = golden_dir().join(format!("{name}.s"));
    let pie_flags: &[&str] = if pie {
        &["-pie", "-fPIE"]
    } else {
        &["-no-pie"]
    };
    let status = Command::new("gcc")
        .args(["-nostdlib", "-Wl,--build-id=none"])
        .args(relocs.then_some("-Wl,--emit-relocs"))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .args(pie_flags)
        .status()
        .expect("gcc is required for the golden tests (apt-get install gcc)");
    assert!(status.success(), "assembling {} failed", src.display());
    out
}

fn check(name: &str, pie: bool, expected_exit: i32) {
    check_with(name, pie, true, expected_exit)
}

fn check_with(name: &str, pie: bool, relocs: bool, expected_exit: i32) {
    let bin = build_with(name, pie, relocs);
    let status = Command::new(&bin).status().unwrap();
    assert_eq!(status.code(), Some(expected_exit), "{name} exit code");
    compare_dump(name, &bin, pie, relocs);
}

/// An AArch64 source (`tests/aarch64/NAME.S` at the repository root, shared with the
/// rewrite tests): cross-assembled into a static executable (no C library) and run under
/// qemu-aarch64, both installed by `scripts/build-corpus-aarch64.sh` (which the test command
/// runs first).
fn check_aarch64(name: &str, expected_exit: i32) -> PathBuf {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("golden");
    std::fs::create_dir_all(&out_dir).unwrap();
    let bin = out_dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/aarch64")
        .join(format!("{name}.S"));
    let status = Command::new("aarch64-linux-gnu-gcc")
        .args([
            "-march=armv8.5-a",
            "-nostdlib",
            "-static",
            "-Wl,--build-id=none",
            "-Wl,--emit-relocs",
        ])
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("aarch64-linux-gnu-gcc is required (apt-get install gcc-aarch64-linux-gnu)");
    assert!(status.success(), "assembling {} failed", src.display());
    let status = Command::new("qemu-aarch64")
        .arg(&bin)
        .status()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)");
    assert_eq!(status.code(), Some(expected_exit), "{name} exit code");
    compare_dump(name, &bin, false, true);
    bin
}

/// A released function (`Function::release`, what `optimize` does to functions that stay)
/// answers what the emitter and `--verify` ask of code that stays exactly as the full model
/// does: its instructions decoded again, its reachable instructions, its entry block and
/// address-taken labels.
fn check_release(elf: &ElfFile, program: &rivet_ir::Program, name: &str) {
    let mut released = 0;
    for f in program.functions.iter().filter(|f| !f.insts.is_empty()) {
        let mut r = f.clone();
        r.release();
        assert!(r.is_released() && r.insts.is_empty() && r.blocks.is_empty());
        let what = format!("{name}: {}", f.name());
        assert_eq!(
            r.instructions(elf).as_ref(),
            f.insts.as_slice(),
            "{what}: instructions decoded again"
        );
        let reachable = |g: &rivet_ir::Function| -> Vec<u32> {
            g.reachable_inst_ranges().into_iter().flatten().collect()
        };
        let expected: Vec<u32> = f
            .blocks
            .iter()
            .filter(|b| b.is_reachable)
            .flat_map(|b| b.insts.clone())
            .collect();
        assert_eq!(reachable(f), expected, "{what}: reachable, full model");
        assert_eq!(reachable(&r), expected, "{what}: reachable, released");
        assert_eq!(
            r.has_entry_block(),
            f.has_entry_block(),
            "{what}: entry block"
        );
        assert_eq!(
            r.has_address_taken_label(),
            f.has_address_taken_label(),
            "{what}: address-taken labels"
        );
        assert_eq!(
            r.jump_tables.len(),
            f.jump_tables.len(),
            "{what}: tables stay"
        );
        released += 1;
    }
    assert!(released > 0, "{name}: no function to release");
}

fn compare_dump(name: &str, bin: &Path, pie: bool, relocs: bool) {
    let bytes = std::fs::read(bin).unwrap();
    let elf = ElfFile::parse(&bytes).unwrap();
    let program = discover(&elf, &DiscoverOptions::with_cfi(CfiRows::Keep)).unwrap();
    check_release(&elf, &program, name);
    let dump = dump_program(&program);
    let golden = golden_dir().join(format!(
        "{name}{}{}.dump",
        if pie { ".pie" } else { "" },
        if relocs { "" } else { ".norelocs" }
    ));
    if std::env::var_os("RIVET_BLESS").is_some() {
        std::fs::write(&golden, &dump).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_else(|_| {
        panic!(
            "{} missing: run with RIVET_BLESS=1 to create it",
            golden.display()
        )
    });
    if dump != expected {
        let actual = golden.with_extension("dump.actual");
        std::fs::write(&actual, &dump).unwrap();
        panic!(
            "dump of {name} differs from {}; actual written to {} (diff them; RIVET_BLESS=1 accepts)",
            golden.display(),
            actual.display()
        );
    }
}

#[test]
fn tables() {
    check("tables", false, 12 + 22 + 31);
}

/// Without relocations the table sized only by them is read until its entries stop being
/// instructions of the function (marked "inferred" in the dump).
#[test]
fn tables_without_relocations() {
    check_with("tables", false, false, 12 + 22 + 31);
}

#[test]
fn flow() {
    check("flow", false, 0);
}

#[test]
fn flow_pie() {
    check("flow", true, 0);
}

/// Every conditional branch form, a gcc-shaped byte table, a literal pool inside a function
/// (skipped: data in code), an exclusive-monitor loop, PAC with its unwind rule, BTI pads, a
/// tail call and a function that never returns (`tests/aarch64/rewrite_guarded.S`, which runs
/// with BTI and PAC enforced).
#[test]
fn aarch64() {
    check_aarch64("rewrite_guarded", 52);
}

/// Switch tables whose base register is defined away from the dispatch
/// (`tests/aarch64/switch_bases.S`): found by reaching definitions where every path into
/// the dispatch brings the same table (an `adrp`+`add` pair counting as one definition), and
/// the function skipped where the paths disagree, where a path enters between the `adrp`
/// and its `add`, and where a loop's back edge brings another table than the straight line
/// before the loop shows.
#[test]
fn aarch64_switch_bases() {
    let bin = check_aarch64("switch_bases", 228);
    let bytes = std::fs::read(&bin).unwrap();
    let elf = ElfFile::parse(&bytes).unwrap();
    let program = discover(&elf, &DiscoverOptions::with_cfi(CfiRows::Keep)).unwrap();
    let function = |name: &str| {
        program
            .functions
            .iter()
            .find(|f| f.name() == name)
            .unwrap_or_else(|| panic!("{name} not found"))
    };
    // (function, the cases its table reaches)
    for (name, cases) in [("kept_base", 4), ("rematerialised", 4), ("check_before", 3)] {
        let f = function(name);
        assert!(f.is_simple(), "{name}: {:?}", f.skip_reason());
        assert_eq!(f.jump_tables.len(), 1, "{name}");
        let table = &f.jump_tables[0];
        assert_eq!(table.entries.len(), cases, "{name}");
        let distinct: std::collections::BTreeSet<_> = table.entries.iter().collect();
        assert_eq!(distinct.len(), cases, "{name}: every case its own block");
    }
    for name in ["disagree", "split_pair", "changed_on_back_edge"] {
        let f = function(name);
        assert_eq!(
            f.skip_reason().map(|r| r.kind()),
            Some("unresolved-indirect-jump"),
            "{name}"
        );
    }
}

#[test]
fn broken() {
    check("broken", false, 0);
}
