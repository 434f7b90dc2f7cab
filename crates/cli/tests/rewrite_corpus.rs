//! Differential tests of the rewriter over the corpus: every program, rewritten with the
//! identity, reversed and 20 shuffled layouts (`--verify` on), must print the same and exit
//! the same as the original. Shared libraries are checked through their user: the rewritten
//! library is loaded (LD_LIBRARY_PATH) by the original executable.
//!
//! The corpus is built (and cached) by `scripts/build-corpus.sh`.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn rivet() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rivet"))
}

fn layouts() -> Vec<Vec<String>> {
    let mut v = vec![
        vec!["--layout".into(), "identity".into()],
        vec!["--layout".into(), "reverse".into()],
    ];
    for seed in 1..=20 {
        v.push(vec![
            "--layout".into(),
            "shuffle".into(),
            "--seed".into(),
            seed.to_string(),
        ]);
    }
    v
}

#[test]
fn rewritten_corpus_programs_behave_the_same() {
    differential(&layouts(), false);
}

/// The same programs with their relocations removed (`objcopy --remove-relocations='*'`), as
/// distribution binaries come: Rivet rewrites functions in place and keeps their order.
#[test]
fn corpus_programs_without_relocations_rewritten_in_place_behave_the_same() {
    let layouts: Vec<Vec<String>> = [
        &["--layout", "identity"][..],
        &["--layout", "shuffle-blocks", "--seed", "1"],
        &["--layout", "shuffle-blocks", "--seed", "2"],
    ]
    .iter()
    .map(|l| l.iter().map(|s| s.to_string()).collect())
    .collect();
    differential(&layouts, true);
}

/// The AArch64 corpus (gcc and clang, -O0 to -O3, PIE and not, `.cold` splitting, PAC/BTI
/// builds), rewritten and run under qemu-aarch64: identity, reversed, shuffled function
/// order and shuffled blocks. `RIVET_AARCH64_SEEDS=N` (or `A..B`) runs those shuffle seeds of
/// each kind (default 1 to 3; the closing figures of the AArch64 work used 20).
#[test]
fn aarch64_rewritten_corpus_programs_behave_the_same() {
    let layouts = common::seed_layouts(common::aarch64_seeds().unwrap_or(1..=3));
    differential_on(common::corpus::Target::Aarch64, &layouts, false);
}

/// The AArch64 corpus without relocations, rewritten in place.
#[test]
fn aarch64_corpus_programs_without_relocations_rewritten_in_place_behave_the_same() {
    let layouts: Vec<Vec<String>> = [
        &["--layout", "identity"][..],
        &["--layout", "shuffle-blocks", "--seed", "1"],
    ]
    .iter()
    .map(|l| l.iter().map(|s| s.to_string()).collect())
    .collect();
    differential_on(common::corpus::Target::Aarch64, &layouts, true);
}

fn differential(layouts: &[Vec<String>], strip_relocations: bool) {
    differential_on(common::corpus::Target::X86_64, layouts, strip_relocations)
}

fn differential_on(
    target: common::corpus::Target,
    layouts: &[Vec<String>],
    strip_relocations: bool,
) {
    let work = std::env::temp_dir().join(format!(
        "rivet-rewrite-corpus-{}-{strip_relocations}-{target:?}",
        std::process::id()
    ));
    common::corpus::differential_on(
        target,
        &work,
        layouts,
        |layout| layout.join(" "),
        |e, layout, slot, out| {
            let input = if strip_relocations {
                let stripped = slot.join("input");
                // binutils for the target: Debian's x86-64 objcopy does not write AArch64.
                let objcopy = match target {
                    common::corpus::Target::X86_64 => "objcopy",
                    common::corpus::Target::Aarch64 => "aarch64-linux-gnu-objcopy",
                };
                let st = Command::new(objcopy)
                    .arg("--remove-relocations=*")
                    .arg(&e.path)
                    .arg(&stripped)
                    .status()
                    .unwrap_or_else(|e| panic!("{objcopy} is required (binutils): {e}"));
                assert!(st.success(), "objcopy failed on {}", e.name);
                stripped
            } else {
                e.path.clone()
            };
            let rw = Command::new(rivet())
                .arg("rewrite")
                .arg(&input)
                .arg("-o")
                .arg(out)
                .arg("--verify")
                .args(layout)
                .output()
                .unwrap();
            if !rw.status.success() {
                return Err(format!(
                    "rewrite failed: {}",
                    String::from_utf8_lossy(&rw.stderr)
                ));
            }
            Ok(())
        },
        180,
    );
}
