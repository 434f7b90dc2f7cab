//! A large stripped shared library optimized in place: Debian's libLLVM.so.19.1 (about
//! 118,000 functions, no `.symtab`, no relocations), profiled with perf samples of clang
//! compiling the test corpus, optimized by `rivet optimize`, and loaded by clang in place of
//! the original. Every object file clang then writes must be byte-identical to the one the
//! original library gives.
//!
//! Two discovery errors made this library crash clang before they were fixed (a returning
//! function taken for noreturn, and a table dispatch taken for a tail call): see
//! `unusual_code.rs` for the small programs that pin each down.

mod common;

use common::{perf_record, rivet, s, scratch};
use std::path::{Path, PathBuf};
use std::process::Command;

const LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1";
/// clang-19's driver; it finds libLLVM through its RUNPATH, which LD_LIBRARY_PATH overrides.
const CLANG: &str = "/usr/lib/llvm-19/bin/clang";

/// The corpus sources (C and C++), sorted.
fn corpus_sources() -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("c" | "cpp")))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "corpus sources missing in {}",
        src.display()
    );
    files
}

/// Compiles `source` into `object` with clang, loading libLLVM from `library_dir` when given.
fn compile(source: &Path, object: &Path, flags: &[&str], library_dir: Option<&Path>) {
    let mut cmd = Command::new(CLANG);
    cmd.args(flags)
        .arg("-w")
        .arg("-c")
        .arg(source)
        .arg("-o")
        .arg(object);
    if let Some(dir) = library_dir {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{CLANG} is required (apt-get install clang-19): {e}"));
    assert!(
        out.status.success(),
        "clang {} with {}: {:?}\n{}",
        source.display(),
        library_dir.map_or("the original libLLVM".into(), |d| d.display().to_string()),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn libllvm_optimized_in_place_from_perf_samples_compiles_identically() {
    assert!(
        Path::new(LIBRARY).is_file() && Path::new(CLANG).is_file(),
        "{LIBRARY} and {CLANG} are required (apt-get install clang-19)"
    );
    let dir = scratch("library_in_place", "libllvm");
    let sources = corpus_sources();

    // Training: clang on every corpus source at -O0, -O1 and -O2, sampled. (Before the fixes,
    // the library optimized from these samples failed every compile below.)
    let mut script = String::new();
    for level in ["-O0", "-O1", "-O2"] {
        for source in &sources {
            script.push_str(&format!(
                "{CLANG} {level} -w -c {} -o {}/train.o || exit 1\n",
                source.display(),
                dir.display()
            ));
        }
    }
    let perf_data = dir.join("perf.data");
    perf_record(&perf_data, 4000, |perf| {
        perf.args(["sh", "-c", &script]);
    });
    let profile = dir.join("libLLVM.prof");
    let r = rivet(&["aggregate", s(&perf_data), LIBRARY, "-o", s(&profile)]);
    assert!(r.status.success(), "aggregate: {r:?}");

    // Optimize, under the library's own file name in a directory of its own.
    let library_dir = dir.join("lib");
    std::fs::create_dir_all(&library_dir).unwrap();
    let optimized = library_dir.join("libLLVM.so.19.1");
    let r = rivet(&[
        "optimize",
        LIBRARY,
        "--profile",
        s(&profile),
        "-o",
        s(&optimized),
        "--json",
    ]);
    assert!(r.status.success(), "optimize: {r:?}");
    let summary: serde_json::Value = serde_json::from_slice(&r.stdout).expect("JSON summary");
    assert_eq!(
        summary["relocation_mode"], false,
        "a library without relocations is optimized in place"
    );
    let rewritten = summary["rewritten_with_profile"].as_u64().unwrap_or(0);
    assert!(
        rewritten >= 300,
        "the samples should reach many functions: {rewritten} rewritten with counts"
    );
    let r = rivet(&["verify", LIBRARY, s(&optimized)]);
    assert!(r.status.success(), "verify: {r:?}");

    // Every corpus source at -O2 -g (debug info: more of LLVM than the training ran), both
    // ways.
    for (i, source) in sources.iter().enumerate() {
        let expected = dir.join(format!("original{i}.o"));
        let got = dir.join(format!("optimized{i}.o"));
        compile(source, &expected, &["-O2", "-g"], None);
        compile(source, &got, &["-O2", "-g"], Some(&library_dir));
        assert!(
            std::fs::read(&expected).unwrap() == std::fs::read(&got).unwrap(),
            "{}: the optimized libLLVM made a different object file",
            source.display()
        );
    }
}
