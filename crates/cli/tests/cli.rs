//! The `rivet` command as a user meets it: output on a real binary, and one clear error line
//! (with a hint) for every kind of bad input, never a panic.

mod common;

use common::assert_one_error_line;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn rivet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(args)
        .output()
        .unwrap()
}

fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The bundled sample, built like the README says (gcc, --emit-relocs).
fn sample() -> &'static Path {
    static SAMPLE: OnceLock<PathBuf> = OnceLock::new();
    SAMPLE.get_or_init(|| {
        let out = scratch().join("sample");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.c");
        let status = Command::new("gcc")
            .args([
                "-O2",
                "-g",
                "-fno-reorder-blocks-and-partition",
                "-Wl,--emit-relocs",
                "-o",
            ])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("gcc is required (apt-get install gcc)");
        assert!(status.success());
        out
    })
}

#[test]
fn summary_of_the_sample() {
    let out = rivet(&["inspect", sample().to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("relocation mode    available"), "{text}");
    assert!(text.contains("simple = 100.00%, 0 skipped)"), "{text}");
    assert!(
        text.contains("code bytes") && text.contains("simple = 100.00% ("),
        "{text}"
    );
}

#[test]
fn json_summary_is_complete() {
    let out = rivet(&["inspect", "--json", sample().to_str().unwrap()]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["relocation_mode"], true);
    assert_eq!(v["kind"], "executable (PIE)");
    assert!(v["functions"].as_u64().unwrap() >= 5);
    assert_eq!(v["functions"], v["simple_functions"]);
    // The switch is a jump table; each of the 10 threaded dispatch sites loads from the label
    // table, which is either modelled as a table (sized by its relocations) or as a computed
    // goto over the labels.
    let tables = v["jump_tables"].as_u64().unwrap();
    let gotos = v["computed_gotos"].as_u64().unwrap();
    assert!(tables >= 1 && tables + gotos >= 11, "{v}");
    assert!(v["skipped"].as_array().unwrap().is_empty());
}

#[test]
fn one_function_cfg() {
    let out = rivet(&[
        "inspect",
        sample().to_str().unwrap(),
        "--function",
        "run_switch",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("function run_switch/sample.c"), "{text}");
    assert!(text.contains("jump table JT0"), "{text}");
    assert!(text.contains("10 distinct targets"), "{text}");
    assert!(text.contains("(entry) [cfa=rsp+8"), "{text}");
    assert!(text.contains("=> jump-table JT0 ->"), "{text}");

    let out = rivet(&[
        "inspect",
        sample().to_str().unwrap(),
        "--function",
        "no_such_function",
    ]);
    assert_one_error_line(&out, "no function named no_such_function");
}

#[test]
fn missing_file_and_directory() {
    assert_one_error_line(
        &rivet(&["inspect", "/nonexistent/app"]),
        "cannot read /nonexistent/app",
    );
    assert_one_error_line(&rivet(&["inspect", "/tmp"]), "cannot read /tmp");
}

#[test]
fn not_an_elf_file() {
    let path = scratch().join("notes.txt");
    std::fs::write(&path, "just text\n").unwrap();
    assert_one_error_line(
        &rivet(&["inspect", path.to_str().unwrap()]),
        "not an ELF file",
    );
    let empty = scratch().join("empty");
    std::fs::write(&empty, "").unwrap();
    assert_one_error_line(
        &rivet(&["inspect", empty.to_str().unwrap()]),
        "not an ELF file",
    );
}

#[test]
fn wrong_architecture_and_class() {
    let bytes = std::fs::read(sample()).unwrap();
    let mut riscv = bytes.clone();
    riscv[18..20].copy_from_slice(&243u16.to_le_bytes()); // e_machine = EM_RISCV
    let path = scratch().join("riscv");
    std::fs::write(&path, &riscv).unwrap();
    assert_one_error_line(&rivet(&["inspect", path.to_str().unwrap()]), "RISC-V");

    let mut elf32 = bytes.clone();
    elf32[4] = 1; // ELFCLASS32
    let path = scratch().join("elf32");
    std::fs::write(&path, &elf32).unwrap();
    assert_one_error_line(&rivet(&["inspect", path.to_str().unwrap()]), "32-bit");
}

/// `--atomics` chooses between AArch64's two atomic increments; on x86-64 it is refused with
/// one line, before any work, and leaves no output behind.
#[test]
fn atomics_is_refused_for_x86_64() {
    let out = scratch().join("atomics.out");
    let args = [
        "instrument",
        sample().to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--atomics",
        "llsc",
    ];
    assert_one_error_line(&rivet(&args), "--atomics applies to AArch64 binaries only");
    assert!(!out.exists(), "{args:?} left an output");
}

#[test]
fn object_files_are_refused() {
    let obj = scratch().join("sample.o");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sample.c");
    assert!(
        Command::new("gcc")
            .args(["-c", "-O2", "-o"])
            .arg(&obj)
            .arg(&src)
            .status()
            .unwrap()
            .success()
    );
    assert_one_error_line(
        &rivet(&["inspect", obj.to_str().unwrap()]),
        "relocatable object",
    );
}

#[test]
fn truncated_files_fail_cleanly() {
    let bytes = std::fs::read(sample()).unwrap();
    let path = scratch().join("truncated");
    let mut cuts: Vec<usize> = (0..40).map(|i| bytes.len() * i / 40).collect();
    cuts.extend([1, 5, 16, 63, 64, 65, 200]);
    for cut in cuts {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let out = rivet(&["inspect", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "cut at {cut}: {stderr}");
        match out.status.code() {
            Some(0) => {}
            Some(1) => assert_one_error_line(&out, ""),
            other => panic!("cut at {cut}: exit {other:?}: {stderr}"),
        }
    }
}

#[test]
fn input_is_never_modified() {
    let before = std::fs::read(sample()).unwrap();
    let meta = std::fs::metadata(sample()).unwrap().modified().unwrap();
    assert!(
        rivet(&["inspect", "--dump", sample().to_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(std::fs::read(sample()).unwrap(), before);
    assert_eq!(
        std::fs::metadata(sample()).unwrap().modified().unwrap(),
        meta
    );
}

/// Inputs the fuzzer once broke Rivet with (an arithmetic overflow on a symbol size, section
/// names with control characters that split the error line): each must end in a summary or
/// one clean error line.
#[test]
fn fuzz_regressions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        count += 1;
        for extra in [&[][..], &["--dump"][..], &["--json"][..]] {
            let mut args = vec!["inspect", path.to_str().unwrap()];
            args.extend_from_slice(extra);
            let out = rivet(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("panicked"), "{}: {stderr}", path.display());
            match out.status.code() {
                Some(0) => {}
                Some(1) => assert_one_error_line(&out, ""),
                other => panic!("{}: exit {other:?}: {stderr}", path.display()),
            }
        }
    }
    assert!(count >= 3);
}

/// Inputs the writer fuzz target (`fuzz/fuzz_targets/writers.rs`) found (a relocation that
/// claims to sit in the ELF header, which the writer patched and then overwrote; a symbol
/// table not named `.symtab`, left live beside the new one with a stale link; a relocation into
/// a section whose type says it has no contents, patched where readers do not look): `rewrite
/// --verify` must write a verified output or refuse with one clean error line, never write
/// an output that fails verification.
#[test]
fn writer_fuzz_regressions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    let out_dir = scratch();
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("writers-")
        {
            continue;
        }
        count += 1;
        let output = out_dir.join("writer-fuzz-regression.out");
        let _ = std::fs::remove_file(&output);
        let out = rivet(&[
            "rewrite",
            path.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--verify",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{}: {stderr}", path.display());
        assert!(
            !stderr.contains("verification"),
            "{}: {stderr}",
            path.display()
        );
        match out.status.code() {
            Some(0) => assert!(output.exists()),
            Some(1) => {
                assert_one_error_line(&out, "");
                assert!(!output.exists());
            }
            other => panic!("{}: exit {other:?}: {stderr}", path.display()),
        }
    }
    assert!(count >= 1);
}
