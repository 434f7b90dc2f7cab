//! Rivet optimizes itself: a large Rust program (8,000 functions, the standard library, rayon's
//! worker threads, gimli and iced-x86, panics that unwind through thousands of landing pads).
//! Rivet is built again with static relocations, instrumented, trained on the corpus, and
//! optimized; the optimized Rivet must then write byte for byte what the original writes, on
//! corpus programs it did not train on.
//!
//! The build with relocations lives in `$RIVET_CACHE/self-relocs` (default
//! `~/.cache/rivet`), outside the repository, so that cargo only rebuilds what changed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{corpus_dir, s, scratch};

/// Builds this workspace's `rivet` with `-Wl,--emit-relocs` into the cache; returns the binary.
fn rivet_with_relocations() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cache = std::env::var_os("RIVET_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/rivet")))
        .expect("RIVET_CACHE or HOME must be set");
    let target = cache.join("self-relocs");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "rivet",
            "--target-dir",
        ])
        .arg(&target)
        .env("RUSTFLAGS", "-C link-arg=-Wl,--emit-relocs")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("running cargo");
    assert!(
        out.status.success(),
        "building rivet with relocations failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("release/rivet")
}

fn run(bin: &Path, args: &[&str]) -> Output {
    let out = Command::new(bin).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What `rivet` does with corpus program `program`, in a directory of its own: the files it
/// writes (a shuffled rewrite, an instrumented copy) and the model it prints.
fn outputs(rivet: &Path, dir: &Path, program: &Path) -> Vec<(String, Vec<u8>)> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let shuffled = dir.join("shuffled");
    let instrumented = dir.join("instrumented");
    let model = run(rivet, &["inspect", s(program), "--json"]).stdout;
    run(
        rivet,
        &[
            "rewrite",
            s(program),
            "-o",
            s(&shuffled),
            "--layout",
            "shuffle",
            "--seed",
            "7",
        ],
    );
    run(rivet, &["instrument", s(program), "-o", s(&instrumented)]);
    vec![
        ("inspect --json".into(), model),
        ("rewrite".into(), std::fs::read(&shuffled).unwrap()),
        ("instrument".into(), std::fs::read(&instrumented).unwrap()),
    ]
}

#[test]
fn rivet_optimized_with_its_own_profile_writes_what_it_wrote_before() {
    let original = rivet_with_relocations();
    let dir = scratch("self_optimize", "rivet");
    let corpus = corpus_dir();
    let program = |name: &str| corpus.join(name);

    // Training: the instrumented Rivet at work on two corpus programs.
    let instrumented = dir.join("rivet.inst");
    let counts = dir.join("rivet.counts");
    run(
        &original,
        &[
            "instrument",
            s(&original),
            "-o",
            s(&instrumented),
            "--profile",
            s(&counts),
        ],
    );
    for name in ["virtual_calls.gcc.O2.pie", "switch_dense.clang.O2.nopie"] {
        let work = dir.join("train").join(name);
        let written = outputs(&instrumented, &work, &program(name));
        assert_eq!(
            written,
            outputs(&original, &work, &program(name)),
            "{name}: the instrumented Rivet writes something else"
        );
    }

    let optimized = dir.join("rivet.optimized");
    let summary = run(
        &original,
        &[
            "optimize",
            s(&original),
            "--profile",
            s(&counts),
            "-o",
            s(&optimized),
            "--verify",
            "--json",
        ],
    );
    let summary: serde_json::Value = serde_json::from_slice(&summary.stdout).unwrap();
    assert!(
        summary["rewritten"].as_u64() > Some(1000) && summary["split"].as_u64() > Some(500),
        "too little optimized: {summary}"
    );
    assert_eq!(summary["relocation_mode"], true, "{summary}");

    // Programs, compilers and options the training did not see.
    for name in [
        "exceptions.clang.O3.pie",
        "computed_goto.gcc.O2.nopie",
        "cold_split.gcc.O2split.pie",
        "tls_threads.gcc.O0.pie",
    ] {
        let work = dir.join("check").join(name);
        let expected = outputs(&original, &work, &program(name));
        let got = outputs(&optimized, &work, &program(name));
        for ((what, want), (_, have)) in expected.iter().zip(&got) {
            assert!(
                want == have,
                "{name}: the optimized Rivet's {what} differs from the original's"
            );
        }
    }
}
