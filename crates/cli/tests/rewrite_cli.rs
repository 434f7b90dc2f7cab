//! `rivet rewrite` and `rivet verify` as a user meets them: bad input gets one error line and
//! leaves nothing behind; verification catches a corrupted output; outputs are deterministic;
//! gdb unwinds through moved and split code; rewritten code leaves the input's alignment padding
//! out but keeps patchable function entries.

mod common;

use common::{assert_one_error_line, rewrite_shuffled, rivet, s, scratch};
use std::path::{Path, PathBuf};
use std::process::Command;

use rivet_elf::ElfFile;

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int leaf(int n) {
    int s = 0;
    for (int i = 0; i < n; i++) {
        if (i % 7 == 3) s += i * 3; else if (i % 5 == 1) s -= i; else s ^= i;
    }
    if (n == 1234567) abort();
    return s;
}
__attribute__((noinline)) int middle(int n) { return leaf(n) + leaf(n / 2); }
__attribute__((noinline)) int outer(int n) { return middle(n) * 2; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    printf("%d\n", outer(n));
    return 0;
}
"#;

/// Builds the test program with `flags` (gcc, -O2).
fn build(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join("prog.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(["-O2", "-fno-reorder-blocks-and-partition"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc is required (apt-get install gcc)");
    assert!(status.success());
    out
}

fn only_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn bad_requests_get_one_error_and_write_nothing() {
    let dir = scratch("rewrite-cli", "bad");
    let with = build(&dir, "with-relocs", &["-Wl,--emit-relocs"]);
    let without = build(&dir, "without-relocs", &[]);
    let before = only_files(&dir);
    let input_bytes = std::fs::read(&with).unwrap();

    // Function reordering without relocations.
    let out = dir.join("out");
    let r = rivet(&["rewrite", s(&without), "-o", s(&out), "--layout", "reverse"]);
    assert_one_error_line(&r, "function reordering needs relocations");
    let r = rivet(&["rewrite", s(&without), "-o", s(&out), "--layout", "shuffle"]);
    assert_one_error_line(&r, "--emit-relocs");
    // The output is the input (also through another spelling of the path).
    let r = rivet(&["rewrite", s(&with), "-o", s(&with)]);
    assert_one_error_line(&r, "is the input");
    let other_spelling = dir.join(".").join("with-relocs");
    let r = rivet(&["rewrite", s(&with), "-o", s(&other_spelling)]);
    assert_one_error_line(&r, "is the input");
    // An output directory nobody can write to (root included).
    let r = rivet(&["rewrite", s(&with), "-o", "/proc/rivet-output"]);
    assert_one_error_line(&r, "cannot write to /proc");
    assert_eq!(only_files(&dir), before, "a failed run left files behind");
    assert_eq!(
        std::fs::read(&with).unwrap(),
        input_bytes,
        "the input changed"
    );

    // A binary Rivet already rewrote.
    let once = dir.join("once");
    let r = rivet(&["rewrite", s(&with), "-o", s(&once)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let before = only_files(&dir);
    let r = rivet(&["rewrite", s(&once), "-o", s(&dir.join("twice"))]);
    assert_one_error_line(&r, "already rewritten by Rivet");
    assert_eq!(only_files(&dir), before);
}

#[test]
fn in_place_mode_rewrites_binaries_without_relocations() {
    let dir = scratch("rewrite-cli", "in-place");
    let without = build(&dir, "prog", &[]);
    let expected = Command::new(&without).arg("5000").output().unwrap();
    for layout in [
        &["--layout", "identity"][..],
        &["--layout", "shuffle-blocks", "--seed", "4"],
    ] {
        let out = dir.join("prog.out");
        let r = rivet(
            &[
                &["rewrite", s(&without), "-o", s(&out), "--verify"][..],
                layout,
            ]
            .concat(),
        );
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let summary = String::from_utf8_lossy(&r.stdout);
        assert!(summary.contains("in place mode"), "{summary}");
        assert!(summary.contains("rewritten in place"), "{summary}");
        // --list names every function and what happened to it.
        let r = rivet(
            &[
                &["rewrite", s(&without), "-o", s(&out), "--list"][..],
                layout,
            ]
            .concat(),
        );
        let listing = String::from_utf8_lossy(&r.stdout);
        assert!(
            listing
                .lines()
                .any(|l| l.contains(" leaf ") && l.ends_with("rewritten in place")),
            "{listing}"
        );
        assert!(
            listing
                .lines()
                .any(|l| l.contains(" _init ") && l.contains("not rewritten: outside .text")),
            "{listing}"
        );
        let got = Command::new(&out).arg("5000").output().unwrap();
        assert_eq!(got.stdout, expected.stdout);
        assert_eq!(got.status.code(), Some(0));
    }
}

#[test]
fn verify_catches_a_corrupted_output() {
    let dir = scratch("rewrite-cli", "verify");
    let input = build(&dir, "prog", &["-Wl,--emit-relocs"]);
    let out = dir.join("prog.shuffled");
    let r = rewrite_shuffled(&input, &out, 11, &[]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let r = rivet(&["verify", s(&input), s(&out)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stdout).contains(": ok ("));

    // Overwrite the first instruction of the moved `leaf` with int3.
    let mut bytes = std::fs::read(&out).unwrap();
    let offset = {
        let elf = ElfFile::parse(&bytes).unwrap();
        let leaf = elf
            .symbols()
            .unwrap()
            .into_iter()
            .find(|sym| sym.name == "leaf")
            .expect("leaf symbol");
        assert!(
            elf.section_containing(leaf.value).unwrap().name == ".text",
            "leaf was not moved to the new .text"
        );
        elf.file_offset_of(leaf.value).unwrap().0 as usize
    };
    bytes[offset] = 0xcc;
    let corrupt = dir.join("prog.corrupt");
    std::fs::write(&corrupt, &bytes).unwrap();
    let r = rivet(&["verify", s(&input), s(&corrupt)]);
    assert_one_error_line(&r, "failed verification");
}

#[test]
fn output_does_not_depend_on_thread_count() {
    let dir = scratch("rewrite-cli", "determinism");
    let input = build(&dir, "prog", &["-Wl,--emit-relocs"]);
    let mut outputs = Vec::new();
    for threads in ["1", "2", "4"] {
        let out = dir.join(format!("prog.{threads}"));
        let r = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .args([
                "rewrite",
                s(&input),
                "-o",
                s(&out),
                "--layout",
                "shuffle",
                "--seed",
                "3",
            ])
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        assert!(r.status.success());
        outputs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
    assert_eq!(outputs[0], outputs[2]);
    // And seeds matter.
    let other = dir.join("prog.seed4");
    let r = rewrite_shuffled(&input, &other, 4, &[]);
    assert!(r.status.success());
    assert_ne!(std::fs::read(&other).unwrap(), outputs[0]);
}

/// Runs gdb on `binary`, stopping at each of `breakpoints`, printing a backtrace at each stop.
fn gdb_backtraces(binary: &Path, breakpoints: &[String]) -> String {
    let mut cmd = Command::new("gdb");
    cmd.args(["-nx", "-batch"]);
    for b in breakpoints {
        cmd.arg("-ex").arg(format!("break {b}"));
    }
    cmd.args([
        "-ex",
        "run",
        "-ex",
        "bt",
        "-ex",
        "info symbol $pc",
        "-ex",
        "continue",
        "-ex",
        "bt",
        "--args",
    ])
    .arg(binary)
    .arg("3000");
    let out = cmd.output().expect("gdb is required (apt-get install gdb)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True when a gdb frame line names `name` or its cold part (gdb shows `foo.cold` as
/// `foo[cold]`).
fn frame_is(line: &str, name: &str) -> bool {
    [
        format!(" {name} "),
        format!(" {name}[cold] "),
        format!(" {name}.cold "),
    ]
    .iter()
    .any(|n| line.contains(n.as_str()))
}

/// Asserts that the backtrace starting at the first `#0` in `text` is leaf < middle < outer <
/// main (each possibly in its cold part), and that the first frame is `first` exactly.
fn assert_full_backtrace(text: &str, first: &str) {
    let bt = text
        .split("#0")
        .nth(1)
        .unwrap_or_else(|| panic!("no backtrace:\n{text}"));
    let frames: Vec<&str> = bt.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        frames[0].contains(&format!(" {first} ")),
        "frame 0 is not {first}:\n{text}"
    );
    for (k, name) in ["leaf", "middle", "outer", "main"].iter().enumerate() {
        let line = frames
            .get(k)
            .unwrap_or_else(|| panic!("short backtrace:\n{text}"));
        assert!(frame_is(line, name), "frame {k} is not {name}:\n{text}");
    }
}

#[test]
fn gdb_backtraces_through_moved_and_split_code() {
    let dir = scratch("rewrite-cli", "gdb");
    let input = build(&dir, "prog", &["-Wl,--emit-relocs", "-g"]);
    let out = dir.join("prog.shuffled");
    // Layouts that split `leaf` put random blocks in `leaf.cold`; find one where the cold part
    // runs, stop there, and unwind: leaf.cold < middle < outer < main. Also stop at the hot
    // entry of `leaf`.
    let mut stopped_in_cold = false;
    for seed in 1..400 {
        let r = rewrite_shuffled(&input, &out, seed, &["--verify"]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let bytes = std::fs::read(&out).unwrap();
        let elf = ElfFile::parse(&bytes).unwrap();
        let symbols = elf.symbols().unwrap();
        let Some(cold) = symbols.iter().find(|sym| sym.name == "leaf.cold") else {
            continue;
        };
        // A breakpoint on every block of the cold part (block starts from `.rivet.bat`),
        // relative to the symbol so gdb relocates them in a PIE.
        let bat = elf.section_by_name(".rivet.bat").expect(".rivet.bat");
        let breakpoints: Vec<String> = rivet_emit::bat::decode(bat.data)
            .unwrap()
            .into_iter()
            .map(|(_, new)| new)
            .filter(|new| *new >= cold.value && new.get() < cold.value.get() + cold.size)
            .map(|new| format!("*('leaf.cold' + {})", new - cold.value))
            .collect();
        let text = gdb_backtraces(&out, &breakpoints);
        // `info symbol $pc` at the first stop: did this layout run the cold part?
        if !text.contains(" in section .text.cold ") {
            continue;
        }
        // The program has debug info, which names the cold part's frame by its function.
        assert_full_backtrace(&text, "leaf");
        let text = gdb_backtraces(&out, &["leaf".to_string()]);
        assert_full_backtrace(&text, "leaf");
        stopped_in_cold = true;
        break;
    }
    assert!(stopped_in_cold, "no seed ran code in leaf.cold");
}

/// The instructions of function `name` in `bin`, from its symbol's address and size.
fn function_code(bin: &Path, name: &str) -> Vec<rivet_arch::Inst> {
    let bytes = std::fs::read(bin).unwrap();
    let elf = ElfFile::parse(&bytes).unwrap();
    let sym = elf
        .symbols()
        .unwrap()
        .into_iter()
        .find(|sym| sym.name == name)
        .unwrap_or_else(|| panic!("no symbol {name} in {}", bin.display()));
    assert!(sym.size > 0, "{name} has no size in {}", bin.display());
    let code = elf.bytes_at(sym.value, sym.size).expect("function bytes");
    rivet_arch::Isa::of(&elf).decode_all(code, sym.value)
}

#[test]
fn rewritten_code_leaves_alignment_padding_out_but_keeps_patchable_entries() {
    // `walk`'s inner loop head is aligned by gcc with nops that the code before it falls into;
    // `patched` starts with a sled of four nops that a tracer may overwrite at run time.
    const SOURCE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long walk(const int *v, int n, int rounds) {
    long s = 0;
    for (int r = 0; r < rounds; r++) {
        s += r;
        for (int i = 0; i < n; i++) s += v[i] * (i & 3 ? 3 : 5);
    }
    return s;
}
__attribute__((noinline, patchable_function_entry(4, 0))) int patched(int x) {
    return x * 7 + 1;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int *v = malloc(n * sizeof *v);
    for (int i = 0; i < n; i++) v[i] = i ^ 5;
    printf("%ld %d\n", walk(v, n, 50), patched(n));
    free(v);
    return 0;
}
"#;
    let dir = scratch("rewrite-cli", "padding");
    let src = dir.join("padding.c");
    std::fs::write(&src, SOURCE).unwrap();
    let input = dir.join("padding");
    let status = Command::new("gcc")
        .args(["-O2", "-falign-loops=32", "-Wl,--emit-relocs", "-o"])
        .arg(&input)
        .arg(&src)
        .status()
        .expect("gcc is required (apt-get install gcc)");
    assert!(status.success());
    let nops = |code: &[rivet_arch::Inst]| code.iter().filter(|i| i.is_padding_nop()).count();
    let leading_nops =
        |code: &[rivet_arch::Inst]| code.iter().take_while(|i| i.is_padding_nop()).count();
    let walk_in = function_code(&input, "walk");
    assert!(
        nops(&walk_in[leading_nops(&walk_in)..]) > 0,
        "gcc put no padding inside walk: the test proves nothing"
    );
    let patched_in = function_code(&input, "patched");
    assert_eq!(
        leading_nops(&patched_in),
        4,
        "gcc ignored patchable_function_entry"
    );

    let expected = Command::new(&input).arg("1000").output().unwrap();
    assert!(expected.status.success());
    for layout in [&["--layout", "reverse"][..], &["--layout", "identity"]] {
        let out = dir.join("padding.out");
        let r = rivet(
            &[
                &["rewrite", s(&input), "-o", s(&out), "--verify"][..],
                layout,
            ]
            .concat(),
        );
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let walk_out = function_code(&out, "walk");
        assert!(
            walk_out[0].addr() != walk_in[0].addr(),
            "walk was not rewritten"
        );
        assert_eq!(nops(&walk_out), 0, "{layout:?}: padding copied into walk");
        let patched_out = function_code(&out, "patched");
        assert!(
            patched_out[0].addr() != patched_in[0].addr(),
            "patched was not rewritten"
        );
        assert_eq!(
            leading_nops(&patched_out),
            4,
            "{layout:?}: the entry sled was not kept"
        );
        let got = Command::new(&out).arg("1000").output().unwrap();
        assert_eq!(got.stdout, expected.stdout, "{layout:?}");
        assert_eq!(got.status.code(), Some(0));
    }
}
