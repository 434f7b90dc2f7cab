//! `rivet simulate` against cachegrind, on x86-64 runs both can trace, and against itself.
//!
//! The model replays qemu's trace of executed blocks through an LRU cache; cachegrind
//! replays valgrind's instrumentation of every instruction through its own LRU cache
//! (`cg_sim.c`). Given the same instruction stream the two must count the same, and on a
//! program without libraries (no dynamic loader, no C library) the streams are the same:
//! instructions and I1 misses must be equal, exactly. A dynamically linked program's
//! start-up differs between the two emulators (valgrind preloads its own library, builds a
//! different environment and auxiliary vector, and reports another CPU, which changes the
//! dynamic loader's and the C library's work: about 22,000 instructions and 130 I1 misses on
//! this host); its steady state does not, so the test compares runs of two lengths, whose
//! differences cancel the start-up.
//!
//! AArch64 has no cachegrind here; its block listings are checked against qemu translating
//! one instruction per block, which needs no listing to count.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::corpus::{Target, corpus_of};
use common::{assert_one_error_line, rivet, s, scratch};

/// `rivet simulate ARGS --json`, parsed.
fn simulate(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["simulate", "--json"];
    all.extend_from_slice(args);
    let out = rivet(&all);
    assert!(
        out.status.success(),
        "rivet {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn count(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Cachegrind's (instructions, I1 misses) for one run of `program ARGS` with an I1 of
/// `i1` ("SIZE,WAYS,LINE").
fn cachegrind(program: &Path, args: &[&str], i1: &str) -> (u64, u64) {
    let out = Command::new("valgrind")
        .args([
            "--tool=cachegrind",
            "--cache-sim=yes",
            &format!("--I1={i1}"),
            "--D1=32768,8,64",
            "--LL=8388608,16,64",
            "--cachegrind-out-file=/dev/null",
        ])
        .arg(program)
        .args(args)
        .output()
        .expect("valgrind is required (apt-get install valgrind)");
    assert!(out.status.success(), "valgrind: {out:?}");
    let text = String::from_utf8_lossy(&out.stderr);
    let field = |label: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| {
                l.split_once(' ')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with(label))
            })
            .unwrap_or_else(|| panic!("no {label} in cachegrind's output:\n{text}"));
        line.rsplit(':')
            .next()
            .unwrap()
            .trim()
            .replace(',', "")
            .parse()
            .unwrap()
    };
    (field("I   refs:"), field("I1  misses:"))
}

/// Assembles `source` (GNU as syntax) into a static program with no library.
fn freestanding(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.S"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(["-nostdlib", "-static", "-no-pie"])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("gcc is required");
    assert!(status.success());
    out
}

/// A loop calling `functions` functions 4 KiB apart, so that all of them share one set of a
/// 32 KiB 8-way cache (64 sets of 64-byte lines): with 9 or more the set thrashes. Each
/// function starts 60 to 62 bytes into its line, so its first instruction spans two lines
/// (cachegrind counts such an instruction once). `iterations` rounds, then exit(0).
fn set_thrasher(functions: usize, iterations: u32) -> String {
    let mut s =
        format!(".globl _start\n.text\n_start:\n  mov ${iterations}, %ecx\n  xor %eax, %eax\n1:\n");
    for i in 0..functions {
        s += &format!("  call f{i}\n");
    }
    s += "  dec %ecx\n  jnz 1b\n  mov $60, %eax\n  xor %edi, %edi\n  syscall\n";
    for i in 0..functions {
        s += &format!(
            ".p2align 12\n.skip {}\nf{i}:\n  add $1, %rax\n  movabs $0x1122334455667788, %rdx\n  ret\n",
            60 + i % 3
        );
    }
    s
}

#[test]
fn counts_what_cachegrind_counts_on_a_program_without_libraries() {
    let dir = scratch("simulate_cli", "freestanding");
    let program = freestanding(&dir, "thrash", &set_thrasher(9, 20_000));
    let ours = simulate(&[s(&program), "--icache", "32768,8,64", "--placements", "1"]);
    let (refs, misses) = cachegrind(&program, &[], "32768,8,64");
    assert_eq!(count(&ours, "instructions"), refs);
    assert_eq!(
        ours["placements"][0]["icache_misses"].as_u64(),
        Some(misses)
    );
    // Nine functions, each on the first two lines of its page, and the loop there too: ten
    // lines cycling through each of two sets of 8 ways.
    assert!(misses > 200_000, "the set did not thrash: {misses}");
    // The same capacity fully associative: cachegrind with one set of 512 ways.
    let (_, full) = cachegrind(&program, &[], "32768,512,64");
    assert_eq!(count(&ours, "icache_misses_fully_associative"), full);
    assert!(full < 100, "{full}");
    // Taken branches by construction: 9 calls, 9 returns and the loop's jump per round,
    // but the last round's jump falls through.
    assert_eq!(count(&ours, "taken_branches"), 20_000 * 19 - 1);
}

#[test]
fn placements_move_only_the_given_code() {
    let dir = scratch("simulate_cli", "placements");
    let program = freestanding(&dir, "thrash", &set_thrasher(10, 5_000));
    // Each function spans the first two lines of its page (sets 0 and 1), as does the loop:
    // 11 lines in each set of 8 ways. f0..f4 are the first five pages after _start's; moving
    // them by two lines puts their ten lines in sets 2 and 3, and no set thrashes any more.
    let nm = Command::new("nm").arg(&program).output().unwrap();
    let symbols = String::from_utf8_lossy(&nm.stdout);
    let address = |name: &str| -> u64 {
        let line = symbols
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("no {name} in {symbols}"));
        u64::from_str_radix(line.split(' ').next().unwrap(), 16).unwrap()
    };
    let range = format!(
        "{:#x}..{:#x}",
        address("f0") & !0xfff,
        address("f5") & !0xfff
    );
    let ours = simulate(&[
        s(&program),
        "--icache",
        "32768,8,64",
        "--placements",
        "2",
        "--placement-step",
        "128",
        "--shift-range",
        &range,
    ]);
    let at = |k: usize| ours["placements"][k]["icache_misses"].as_u64().unwrap();
    assert!(at(0) > 5_000 * 10, "unshifted, the set thrashes: {}", at(0));
    assert!(at(1) < 100, "shifted, it does not: {}", at(1));
    assert_eq!(ours["placements"][1]["shift"].as_u64(), Some(128));
    // Moving all of the program's code instead renumbers every set alike: no change.
    let all = simulate(&[
        s(&program),
        "--icache",
        "32768,8,64",
        "--placements",
        "2",
        "--placement-step",
        "64",
    ]);
    let all_at = |k: usize| all["placements"][k]["icache_misses"].as_u64().unwrap();
    assert_eq!(all_at(0), at(0));
    assert_eq!(all_at(1), at(0));
}

/// A C program whose steady state misses in a 32 KiB I1: 64 functions of about 600 bytes
/// each called in turn, plus snprintf and strlen of the C library, 100 x ARGV[1] rounds.
fn working_set_program(dir: &Path) -> PathBuf {
    let mut c = String::from("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n");
    for i in 0..64 {
        c += &format!("__attribute__((noinline)) static unsigned f{i}(unsigned x) {{");
        for j in 0..60 {
            c += &format!(" x = x * {} + (x >> {});", 2 * j + 3 + i, 1 + j % 7);
        }
        c += " return x; }\n";
    }
    c += "int main(int argc, char **argv) {\n  int n = argc > 1 ? atoi(argv[1]) : 1;\n  unsigned x = 1;\n  char buf[64];\n  for (int r = 0; r < n * 100; r++) {\n";
    for i in 0..64 {
        c += &format!("    x = f{i}(x);\n");
    }
    c += "    snprintf(buf, sizeof buf, \"%u\", x);\n    x += (unsigned)strlen(buf);\n  }\n  printf(\"%u\\n\", x);\n  return 0;\n}\n";
    let src = dir.join("working_set.c");
    std::fs::write(&src, c).unwrap();
    let out = dir.join("working_set");
    let status = Command::new("gcc")
        .args(["-O1", "-no-pie"])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("gcc is required");
    assert!(status.success());
    out
}

#[test]
fn agrees_with_cachegrind_on_a_dynamically_linked_program() {
    let dir = scratch("simulate_cli", "dynamic");
    let program = working_set_program(&dir);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for rounds in ["1", "5"] {
        let v = simulate(&[
            s(&program),
            "--icache",
            "32768,8,64",
            "--placements",
            "1",
            "--",
            rounds,
        ]);
        ours.push((
            count(&v, "instructions"),
            v["placements"][0]["icache_misses"].as_u64().unwrap(),
        ));
        theirs.push(cachegrind(&program, &[rounds], "32768,8,64"));
    }
    // Whole runs: within the start-up's difference (measured: 1.5% of the short run's
    // instructions, 0.3% of its I1 misses).
    for (o, t) in ours.iter().zip(&theirs) {
        let close = |a: u64, b: u64, share: f64| (a as f64 - b as f64).abs() <= share * b as f64;
        assert!(
            close(o.0, t.0, 0.03),
            "instructions: ours {} cachegrind {}",
            o.0,
            t.0
        );
        assert!(
            close(o.1, t.1, 0.01),
            "I1 misses: ours {} cachegrind {}",
            o.1,
            t.1
        );
    }
    // The steady state: 400 more rounds. I1 misses agree exactly (measured: 202,000 and
    // 202,000); cachegrind counts two more instructions per round of 13,230 (in the C
    // library: not traced down), which the test allows as 0.05%: 2,600 of 5.29 M.
    let ours_delta = (ours[1].0 - ours[0].0, ours[1].1 - ours[0].1);
    let theirs_delta = (theirs[1].0 - theirs[0].0, theirs[1].1 - theirs[0].1);
    assert!(
        theirs_delta.1 > 100_000,
        "no steady-state misses: {theirs_delta:?}"
    );
    assert_eq!(ours_delta.1, theirs_delta.1, "I1 misses of 400 rounds");
    assert!(
        ours_delta.0.abs_diff(theirs_delta.0) * 2000 <= theirs_delta.0,
        "instructions of 400 rounds: ours {} cachegrind {}",
        ours_delta.0,
        theirs_delta.0
    );
}

/// The AArch64 counterpart of [`set_thrasher`] for the Neoverse N1's 64 KiB 4-way cache
/// (256 sets): `functions` one-line functions 16 KiB apart, all in one set, called in a loop.
/// The first `in_section` functions go to a section of their own, `moved`.
fn aarch64_set_thrasher(functions: usize, iterations: u32, in_section: usize) -> String {
    let mut s = format!(".globl _start\n.text\n_start:\n  mov w19, #{iterations}\n1:\n");
    for i in 0..functions {
        s += &format!("  bl f{i}\n");
    }
    s += "  subs w19, w19, #1\n  b.ne 1b\n  mov x8, #93\n  mov x0, #0\n  svc #0\n";
    for i in 0..functions {
        if i == 0 && in_section > 0 {
            s += ".section moved, \"ax\"\n";
        } else if i == in_section {
            s += ".text\n";
        }
        s += &format!(".p2align 14\nf{i}:\n  add x0, x0, #1\n  ret\n");
    }
    s
}

/// Assembles `source` into a static AArch64 PIE with no library.
fn aarch64_freestanding_pie(dir: &Path, source: &str) -> PathBuf {
    let src = dir.join("thrash.S");
    std::fs::write(&src, source).unwrap();
    let program = dir.join("thrash");
    let status = Command::new("aarch64-linux-gnu-gcc")
        .args(["-nostdlib", "-static-pie"])
        .arg(&src)
        .arg("-o")
        .arg(&program)
        .status()
        .expect("aarch64-linux-gnu-gcc is required (gcc-aarch64-linux-gnu)");
    assert!(status.success());
    program
}

#[test]
fn placements_can_move_named_sections() {
    let dir = scratch("simulate_cli", "aarch64_section");
    // f0..f2 in their own section, still 16 KiB-aligned: the same seven lines in one set.
    let program = aarch64_freestanding_pie(&dir, &aarch64_set_thrasher(6, 5_000, 3));
    let v = simulate(&[
        s(&program),
        "--placements",
        "2",
        "--placement-step",
        "64",
        "--shift-section",
        "moved",
    ]);
    let at = |k: usize| v["placements"][k]["icache_misses"].as_u64().unwrap();
    assert_eq!(at(0), 5_000 * 6 + 1, "{v}");
    assert!(at(1) < 20, "{v}");
    assert_one_error_line(
        &rivet(&["simulate", s(&program), "--shift-section", ".text.hot"]),
        "has no section .text.hot",
    );
}

#[test]
fn placements_of_an_aarch64_pie_move_its_code_where_qemu_loaded_it() {
    let dir = scratch("simulate_cli", "aarch64_pie");
    let program = aarch64_freestanding_pie(&dir, &aarch64_set_thrasher(6, 5_000, 0));
    // _start's loop is at 0x4000 and f0..f5 at 0x8000, 0xc000, ... (link-time), all in one
    // set; qemu loads the PIE at 0x5500000000. The loop's line, used between every two
    // calls, stays in the set, and the six functions cycle through its three other ways,
    // missing every time. Moving f0, f1 and f2 one line on leaves four lines, which fit:
    // only the load bias puts the range on the code that runs.
    let v = simulate(&[
        s(&program),
        "--placements",
        "2",
        "--placement-step",
        "64",
        "--shift-range",
        "0x8000..0x14000",
    ]);
    let at = |k: usize| v["placements"][k]["icache_misses"].as_u64().unwrap();
    assert_eq!(at(0), 5_000 * 6 + 1, "{v}");
    assert!(at(1) < 20, "{v}");
    assert_eq!(count(&v, "instructions"), 5_000 * (6 * 3 + 2) + 4);
    // Per round: 6 calls, 6 returns and the loop's branch, but the last falls through.
    assert_eq!(count(&v, "taken_branches"), 5_000 * 13 - 1);
    assert_eq!(v["model"]["core"], "Neoverse N1");
}

#[test]
fn aarch64_block_listings_count_what_single_instructions_count() {
    let (dir, entries) = corpus_of(Target::Aarch64);
    // A PIE, a non-PIE, and a program taking signals (handlers entered between blocks).
    for name in [
        "virtual_calls.clang.O2.pie",
        "virtual_calls.gcc.O2.nopie",
        "setjmp_signals.gcc.O2.nopie",
    ] {
        let e = entries
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("{name} is not in the AArch64 corpus"));
        let runner = format!(
            "qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH={}",
            dir.display()
        );
        let by_block = simulate(&[s(&e.path), "--runner", &runner, "--placements", "4"]);
        let by_insn = simulate(&[
            s(&e.path),
            "--runner",
            &runner,
            "--placements",
            "4",
            "--one-insn-per-tb",
        ]);
        for key in [
            "instructions",
            "taken_branches",
            "icache_misses_fully_associative",
            "lines_touched",
            "pages_touched",
        ] {
            assert_eq!(by_block[key], by_insn[key], "{name}: {key}");
        }
        assert_eq!(by_block["placements"], by_insn["placements"], "{name}");
        assert_eq!(count(&by_insn, "blocks"), count(&by_insn, "instructions"));
        assert!(count(&by_block, "blocks") < count(&by_block, "instructions") / 2);
        assert!(
            count(&by_block, "instructions") > 100_000,
            "{name}: {by_block}"
        );
        assert_eq!(by_block["model"]["core"], "Neoverse N1");
    }
}

#[test]
fn bad_options_give_one_error_line() {
    let dir = scratch("simulate_cli", "errors");
    let program = freestanding(&dir, "small", &set_thrasher(1, 10));
    let p = s(&program);
    assert_one_error_line(
        &rivet(&["simulate", p, "--icache", "65536,4"]),
        "bad --icache",
    );
    assert_one_error_line(
        &rivet(&["simulate", p, "--icache", "49152,4,64"]),
        "number of sets must be a power of two",
    );
    assert_one_error_line(
        &rivet(&["simulate", p, "--placement-step", "100"]),
        "not a multiple of the 64-byte line",
    );
    assert_one_error_line(
        &rivet(&["simulate", p, "--shift-range", "0x2000..0x1000"]),
        "bad --shift-range",
    );
    assert_one_error_line(
        &rivet(&["simulate", p, "--runner", "no-such-qemu"]),
        "cannot run no-such-qemu",
    );
    // A runner that is not qemu writes no log.
    assert_one_error_line(&rivet(&["simulate", p, "--runner", "true"]), "no trace");
    let missing = dir.join("missing");
    assert_one_error_line(&rivet(&["simulate", s(&missing)]), "cannot read");
}
