//! `rivet optimize --indirect-call-promotion=calls` end to end on tests/instrument/icp.cpp
//! (g++ -O2, non-PIE and PIE): instrumented, trained, optimized with `--verify`; the summary
//! counts the sites the thresholds pick, the output prints and exits as the input does on the
//! training input and on another one (which also takes the program's other exit path), an
//! exception thrown through a promoted call is still caught, `rivet verify` accepts the output
//! (also with the blocks reversed, so that a promoted call's block ends in a conditional jump
//! and a jump) and rejects it, in one line, once a compare is corrupted. BOLT's spellings are accepted,
//! jump tables are refused with a warning, and a stale profile promotes nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    assert_one_error_line, build_instrument_program, instrument_and_train, nm_symbol as symbol,
    rivet, s, scratch,
};

/// The mangled names of the functions the test looks into.
const APPLY: &str = "_Z5applyPFlllEll";
const ADD: &str = "_Z3addll";
const GUARDED: &str = "_Z7guardedPFllEl";
const CHECKED: &str = "_Z7checkedl";

/// tests/instrument/icp.cpp built with g++ -O2 (`-no-pie` or `-pie`) into scratch directory
/// `name` (one per test: they run in parallel), and its counters from one run with argument
/// 3001.
fn build_and_train(name: &str, pie: bool) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch("icp", name);
    let flag = if pie { "-pie" } else { "-no-pie" };
    let bin = build_instrument_program(&dir, "icp.cpp", "g++", &["-O2", flag], "icp");
    let counts = instrument_and_train(&bin, &dir, &[&["3001"]]);
    (dir, bin, counts)
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

/// Stdout and exit code of `bin ARG`.
fn run(bin: &Path, arg: &str) -> (Vec<u8>, Option<i32>) {
    let out = Command::new(bin).arg(arg).output().unwrap();
    (out.stdout, out.status.code())
}

/// Disassembly of function `name` in `bin` (objdump), one instruction a line.
fn disassemble(bin: &Path, name: &str) -> Vec<String> {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--disassemble={name}"))
        .arg(bin)
        .output()
        .expect("objdump (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(str::to_string)
        .collect()
}

fn promotes_verifies_and_behaves_the_same(pie: bool) {
    let (dir, bin, counts) = build_and_train(if pie { "pie" } else { "nopie" }, pie);
    let opt = dir.join("icp.opt");
    let summary = optimize_json(
        &bin,
        &counts,
        &opt,
        &["--indirect-call-promotion=calls", "--verify"],
    );
    let icp = &summary["indirect_call_promotion"];
    // Eight sites ran; the thresholds pick five without PIC (the libc callee is never
    // compared, and the skew of the others is below them). With PIC the two sites whose
    // operand is or uses r11 cannot be promoted (r11 holds the compared address).
    let (sites, calls) = if pie { (3, 46515) } else { (5, 51017) };
    assert_eq!(icp["profiled_sites"], 8, "{summary}");
    assert_eq!(icp["profiled_calls"], 63023, "{summary}");
    assert_eq!(icp["promoted_sites"], sites, "{summary}");
    assert_eq!(icp["promoted_targets"], sites, "one callee each: {summary}");
    assert_eq!(icp["promoted_calls"], calls, "{summary}");
    // The dyno stats count the calls the compares take as direct.
    let dyno = &summary["dyno_stats"];
    assert_eq!(dyno["before"]["indirect calls"], 63023, "{summary}");
    assert_eq!(dyno["after"]["indirect calls"], 63023 - calls, "{summary}");
    assert_eq!(
        dyno["after"]["function calls"], dyno["before"]["function calls"],
        "{summary}"
    );
    let share = calls as f64 / 63023.0;
    assert!(
        share > if pie { 0.73 } else { 0.80 },
        "share {share}: {summary}"
    );

    // The same output and exit status on the training input and on an even one, which ends
    // through the other callee of the noreturn call (it prints "loud").
    for arg in ["3001", "3000"] {
        let want = run(&bin, arg);
        assert_eq!(want.1, Some(0));
        assert_eq!(run(&opt, arg), want, "icp.opt {arg}");
    }
    assert!(String::from_utf8_lossy(&run(&opt, "3000").0).contains("loud"));

    // `guarded` calls `checked` directly now, and every 97th call of it throws through that
    // direct call to guarded's handler: the run above would have aborted otherwise.
    let checked = symbol(&opt, CHECKED);
    let guarded = disassemble(&opt, GUARDED);
    assert!(
        guarded
            .iter()
            .any(|l| l.contains(&format!("call   {checked:x} <{CHECKED}>"))),
        "no direct call of checked in guarded: {guarded:#?}"
    );

    let verified = rivet(&["verify", s(&bin), s(&opt)]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(
        said.contains(&format!("{sites} promoted indirect calls checked")),
        "{said}"
    );

    // Blocks reversed: sum_areas' loop block, which holds a promoted call, ends in a conditional
    // jump followed by a jump (neither successor comes next), which the checks must find past
    // the promoted call's added instructions (cppcheck's ForwardTraversal::updateRange was
    // refused before).
    let reversed = dir.join("icp.reversed");
    let summary = optimize_json(
        &bin,
        &counts,
        &reversed,
        &[
            "--indirect-call-promotion=calls",
            "--reorder-blocks=reverse",
            "--verify",
        ],
    );
    assert_eq!(
        summary["indirect_call_promotion"]["promoted_sites"], sites,
        "{summary}"
    );
    for arg in ["3001", "3000"] {
        assert_eq!(run(&reversed, arg), run(&bin, arg), "icp.reversed {arg}");
    }
    let verified = rivet(&["verify", s(&bin), s(&reversed)]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );

    // Corrupt apply's compare so it compares another address than the one its je calls:
    // without PIC the imm32 of `cmp $add,%rax`, with PIC the displacement of
    // `lea add(%rip),%r11`.
    let apply = symbol(&opt, APPLY);
    let add = symbol(&opt, ADD);
    let elf = std::fs::read(&opt).unwrap();
    let at = file_offset(&opt, apply);
    let code = &elf[at..at + 64];
    let field = if pie {
        let lea = code
            .windows(3)
            .position(|w| w == [0x4c, 0x8d, 0x1d])
            .expect("lea T(%rip),%r11 in apply");
        let disp = i32::from_le_bytes(code[lea + 3..lea + 7].try_into().unwrap());
        assert_eq!(apply as i64 + lea as i64 + 7 + disp as i64, add as i64);
        lea + 3
    } else {
        code.windows(4)
            .position(|w| w == (add as u32).to_le_bytes())
            .expect("cmp $add in apply")
    };
    let mut bad = elf.clone();
    bad[at + field] ^= 0x10;
    let corrupt = dir.join("icp.bad");
    std::fs::write(&corrupt, &bad).unwrap();
    let refused = rivet(&["verify", s(&bin), s(&corrupt)]);
    assert_one_error_line(&refused, "a je that does not go to a direct call");
}

#[test]
fn non_pie_calls_are_promoted_verified_and_behave_the_same() {
    promotes_verifies_and_behaves_the_same(false);
}

#[test]
fn pie_calls_are_promoted_verified_and_behave_the_same() {
    promotes_verifies_and_behaves_the_same(true);
}

#[test]
fn bolt_spellings_are_accepted_and_jump_tables_warn() {
    let (dir, bin, counts) = build_and_train("bolt", false);
    let out = dir.join("icp.bolt");
    let ours = optimize_json(&bin, &counts, &out, &["--indirect-call-promotion=calls"]);
    for spelling in [
        &["-icp=calls"][..],
        &["-indirect-call-promotion=calls"],
        &["-icp=calls", "-icp-calls-topn=1"],
    ] {
        let bolt = optimize_json(&bin, &counts, &out, spelling);
        assert_eq!(
            bolt["indirect_call_promotion"], ours["indirect_call_promotion"],
            "{spelling:?}"
        );
        assert_eq!(run(&out, "3000"), run(&bin, "3000"), "{spelling:?}");
    }

    // Jump tables are BOLT's other half of the option; Rivet says it ignores them.
    let tables = optimize_json(
        &bin,
        &counts,
        &out,
        &["-indirect-call-promotion=jump-tables"],
    );
    assert!(tables.get("indirect_call_promotion").is_none(), "{tables}");
    let warned = tables["warnings"].as_array().unwrap();
    assert!(
        warned
            .iter()
            .any(|w| w.as_str().unwrap().contains("jump tables are not promoted")),
        "{tables}"
    );
    // `all` promotes the calls and still warns about the tables.
    let all = optimize_json(&bin, &counts, &out, &["-indirect-call-promotion=all"]);
    assert_eq!(
        all["indirect_call_promotion"],
        ours["indirect_call_promotion"]
    );
    assert!(!all["warnings"].as_array().unwrap().is_empty(), "{all}");
}

#[test]
fn a_stale_profile_promotes_nothing() {
    let (dir, bin, counts) = build_and_train("stale", false);
    // The profile, with code hashes, carried to another build of the same source.
    let profile = dir.join("icp.prof");
    let merged = rivet(&["merge", "--binary", s(&bin), s(&counts), "-o", s(&profile)]);
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let other = build_instrument_program(
        &dir,
        "icp.cpp",
        "g++",
        &["-O2", "-no-pie", "-fno-omit-frame-pointer"],
        "icp.fp",
    );
    let out = dir.join("icp.fp.opt");
    let summary = optimize_json(
        &other,
        &profile,
        &out,
        &["--indirect-call-promotion=calls", "--verify"],
    );
    assert!(summary["profile"]["stale"].is_object(), "{summary}");
    let icp = &summary["indirect_call_promotion"];
    assert_eq!(icp["promoted_sites"], 0, "{summary}");
    assert_eq!(icp["profiled_sites"], 0, "{summary}");
    assert_eq!(run(&out, "3000"), run(&other, "3000"));
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
