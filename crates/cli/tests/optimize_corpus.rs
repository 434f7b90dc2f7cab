//! Differential tests of `rivet optimize` over the corpus: every program is profiled by
//! running its instrumented build once, then optimized from that profile with every block
//! order, function order and splitting option (`--verify` on), with llvm-bolt's spellings
//! (PLT calls through the GOT among them), and without relocations (in place); each output
//! must print the same and exit the same as the original. Shared libraries are profiled and
//! checked through the executable that loads them.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::corpus::{
    NO_RELOCATIONS, ORDER_FILE, corpus, instrument_and_run, optimize_option_sets, parallel,
};

fn rivet() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rivet"))
}

#[test]
fn optimized_corpus_programs_behave_the_same() {
    let (corpus_dir, entries) = corpus();
    let base = std::env::temp_dir().join(format!("rivet-optimize-corpus-{}", std::process::id()));
    let profiles = base.join("profiles");
    let failures = parallel(&entries, |_, e| {
        instrument_and_run(&entries, &corpus_dir, e, &profiles.join(&e.name)).map(|_| ())
    });
    assert!(
        failures.is_empty(),
        "profiling failed:\n{}",
        failures.join("\n")
    );
    let order_file = base.join("order.txt");
    // Functions every C program has, one the binaries lack (reported, not fatal), a comment.
    std::fs::write(&order_file, "# hot first\nmain\nno_such_function\n\n").unwrap();
    let profiled = entries
        .iter()
        .filter(|e| profiles.join(&e.name).join("counts").exists())
        .count();
    assert!(
        profiled >= 180,
        "only {profiled} corpus programs left a profile"
    );

    common::corpus::differential(
        &base.join("work"),
        &optimize_option_sets(),
        |config| config.join(" "),
        |e, config, slot, out| {
            let counts = profiles.join(&e.name).join("counts");
            let mut input = e.path.clone();
            let mut args: Vec<String> = Vec::new();
            for a in config {
                match *a {
                    NO_RELOCATIONS => {
                        input = slot.join("input");
                        let st = Command::new("objcopy")
                            .arg("--remove-relocations=*")
                            .arg(&e.path)
                            .arg(&input)
                            .status()
                            .expect("objcopy is required (apt-get install binutils)");
                        assert!(st.success(), "objcopy failed on {}", e.name);
                    }
                    ORDER_FILE => args.push(order_file.display().to_string()),
                    other => args.push(other.to_string()),
                }
            }
            let opt = Command::new(rivet())
                .arg("optimize")
                .arg(&input)
                .arg("-o")
                .arg(out)
                .arg("--profile")
                .arg(&counts)
                .arg("--verify")
                .args(&args)
                .output()
                .unwrap();
            if !opt.status.success() {
                return Err(format!(
                    "optimize failed: {}",
                    String::from_utf8_lossy(&opt.stderr)
                ));
            }
            let stderr = String::from_utf8_lossy(&opt.stderr);
            if stderr.contains("debug info removed") {
                return Err(format!("debug info lost: {stderr}"));
            }
            let stdout = String::from_utf8_lossy(&opt.stdout);
            if !stdout.lines().any(|l| l.starts_with("optimized ")) {
                return Err(format!("unexpected summary: {stdout}"));
            }
            Ok(())
        },
        180,
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// `optimize` releases the model of the functions that stay (their instructions, blocks and
/// calls) once the profile is attached, and the emitter and `--verify` decode what they
/// still read of that code again: that must change no byte of any output. Every eighth
/// corpus executable, profiled by its instrumented run, optimized with and without
/// `--keep-whole-model`.
#[test]
fn releasing_the_model_of_code_that_stays_changes_no_byte() {
    let (corpus_dir, entries) = corpus();
    let base = std::env::temp_dir().join(format!("rivet-release-corpus-{}", std::process::id()));
    let sample: Vec<_> = entries
        .iter()
        .filter(|e| !e.is_shared_lib())
        .step_by(8)
        .collect();
    let compared = std::sync::Mutex::new(0usize);
    let released_total = std::sync::Mutex::new(0u64);
    let failures = parallel(&sample, |_, e| {
        let dir = base.join(&e.name);
        let counts = instrument_and_run(&entries, &corpus_dir, e, &dir)?;
        let optimize = |out: &std::path::Path, extra: &[&str]| {
            let o = Command::new(rivet())
                .arg("optimize")
                .arg(&e.path)
                .arg("-o")
                .arg(out)
                .arg("--profile")
                .arg(&counts)
                .arg("--json")
                .args(extra)
                .output()
                .unwrap();
            if !o.status.success() {
                return Err(format!(
                    "{}: optimize {extra:?} failed: {}",
                    e.name,
                    String::from_utf8_lossy(&o.stderr)
                ));
            }
            let summary: serde_json::Value = serde_json::from_slice(&o.stdout)
                .map_err(|err| format!("{}: summary is not JSON: {err}", e.name))?;
            summary["functions_released"]
                .as_u64()
                .ok_or_else(|| format!("{}: no functions_released in {summary}", e.name))
        };
        let (lean, whole) = (dir.join("lean"), dir.join("whole"));
        let released = optimize(&lean, &["--verify"])?;
        let kept = optimize(&whole, &["--keep-whole-model"])?;
        if kept != 0 {
            return Err(format!(
                "{}: {kept} functions released with --keep-whole-model",
                e.name
            ));
        }
        if std::fs::read(&lean).unwrap() != std::fs::read(&whole).unwrap() {
            return Err(format!("{}: the outputs differ", e.name));
        }
        *compared.lock().unwrap() += 1;
        *released_total.lock().unwrap() += released;
        Ok(())
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let compared = *compared.lock().unwrap();
    assert!(compared >= 20, "only {compared} programs compared");
    // Corpus programs are small, but each has start-up and library-wrapper code that no run
    // of it reaches.
    let released = *released_total.lock().unwrap();
    assert!(
        released >= compared as u64,
        "{released} functions released over {compared} programs"
    );
    let _ = std::fs::remove_dir_all(&base);
}
