//! `rivet optimize`'s dyno stats against what the programs really do. Every corpus executable
//! is profiled with Rivet's instrumentation on its one run, optimized from that profile with
//! the default options and with the reversed block order, and run under callgrind
//! (`--collect-jumps=yes --dump-instr=yes`), which counts per instruction how often each
//! conditional branch was taken. The profile is exact for that run, so the change the dyno
//! stats predict for taken conditional branches must be the change callgrind measures, to the
//! branch: a block order the emitter did not follow, a branch sense inverted on one side only,
//! or counts attached to the wrong branch all show up here.
//!
//! Only conditional branches are compared. Callgrind does not see an unconditional `jmp` to
//! the next instruction (unoptimized clang code is full of them, and the dyno stats count
//! them as executed), and it books some jumps into another function as calls depending on
//! where the two functions lie, so its unconditional-jump counts cannot be matched exactly.
//! Libraries are left to optimize_corpus.rs: callgrind would have to tell their runs apart
//! from their loaders'.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::corpus::{Entry, corpus, instrument_and_run, parallel};
use common::{rivet, s};

/// The option sets compared: Rivet's defaults (ext-TSP, cdsort, every cold block split) and a
/// layout that inverts most branches (reversed blocks, no splitting).
const CONFIGS: &[(&str, &[&str])] = &[
    ("default", &[]),
    (
        "reverse",
        &["--reorder-blocks", "reverse", "--split-functions=false"],
    ),
];

/// Taken conditional branches whose instruction lies in `binary`, summed over every process
/// of one callgrind run (its output files in `dir`). Callgrind names the binary's first
/// executable segment after the file and, for a rewritten binary, the segment it cannot map
/// to a symbol table `???`; both are counted (`???` also holds a few branches of the vDSO,
/// the same in every run).
fn taken_conditional_branches(dir: &Path, binary: &Path) -> Result<u64, String> {
    let name = binary.file_name().unwrap().to_string_lossy().into_owned();
    let mut taken = 0u64;
    let mut files = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.unwrap().path();
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        // `ob=(N) NAME` defines object N, `ob=(N)` refers to it; `cob=` lines define names
        // too but do not change the current object.
        let mut names: std::collections::HashMap<String, String> = Default::default();
        let mut counted = false;
        for line in text.lines() {
            let (key, rest) = match line.split_once('=') {
                Some(kv) => kv,
                None => continue,
            };
            match key {
                "ob" | "cob" => {
                    let object = match rest.split_once(' ') {
                        Some((id, object)) => {
                            names.insert(id.to_string(), object.to_string());
                            object.to_string()
                        }
                        None => names.get(rest).cloned().unwrap_or_default(),
                    };
                    if key == "ob" {
                        counted = object == "???"
                            || Path::new(&object).file_name() == Some(name.as_ref());
                    }
                }
                // `jcnd=TAKEN/EXECUTED TARGET`
                "jcnd" if counted => {
                    let count = rest.split(['/', ' ']).next().unwrap_or("");
                    taken += count
                        .parse::<u64>()
                        .map_err(|_| format!("{}: bad line {line:?}", path.display()))?;
                }
                _ => {}
            }
        }
    }
    if files == 0 {
        return Err(format!("callgrind wrote nothing in {}", dir.display()));
    }
    Ok(taken)
}

/// Runs `binary` once under callgrind (libraries from `lib_dir`), output files in `dir`.
fn callgrind(binary: &Path, lib_dir: &Path, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).unwrap();
    let status = Command::new("timeout")
        .arg("120")
        .arg("valgrind")
        .args([
            "--tool=callgrind",
            "--collect-jumps=yes",
            "--dump-instr=yes",
            &format!("--callgrind-out-file={}/cg.%p", dir.display()),
        ])
        .arg(binary)
        .env("LD_LIBRARY_PATH", lib_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    // Exit status 124 is the timeout's; the program's own exit codes vary by design.
    if status.code() == Some(124) {
        return Err(format!("{} timed out under callgrind", binary.display()));
    }
    Ok(())
}

/// The dyno stats row `row` of `rivet optimize --json`, before and after.
fn dyno(summary: &serde_json::Value, row: &str) -> Result<(u64, u64), String> {
    let get = |when: &str| {
        summary["dyno_stats"][when][row]
            .as_u64()
            .ok_or_else(|| format!("no dyno_stats.{when}.{row:?} in {summary}"))
    };
    Ok((get("before")?, get("after")?))
}

/// Profiles `e`, optimizes it with every configuration and compares predicted and measured
/// taken conditional branches; returns how many configurations were compared.
fn compare(entries: &[Entry], corpus_dir: &Path, e: &Entry, dir: &Path) -> Result<usize, String> {
    let counts = instrument_and_run(entries, corpus_dir, e, dir)?;
    if !counts.exists() {
        return Err(format!("{}: the instrumented run left no counts", e.name));
    }
    callgrind(&e.path, corpus_dir, &dir.join("cg.original"))?;
    let original = taken_conditional_branches(&dir.join("cg.original"), &e.path)?;
    for (label, options) in CONFIGS {
        let optimized = dir.join(format!("opt.{label}"));
        let mut args = vec![
            "optimize",
            s(&e.path),
            "--profile",
            s(&counts),
            "-o",
            s(&optimized),
            "--json",
        ];
        args.extend_from_slice(options);
        let out = rivet(&args);
        if !out.status.success() {
            return Err(format!(
                "{} {label}: optimize failed: {}",
                e.name,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|err| format!("{} {label}: --json output: {err}", e.name))?;
        let (before, after) = dyno(&summary, "taken conditional branches")?;
        let cg_dir = dir.join(format!("cg.{label}"));
        callgrind(&optimized, corpus_dir, &cg_dir)?;
        let measured = taken_conditional_branches(&cg_dir, &optimized)?;
        let predicted_change = after as i128 - before as i128;
        let measured_change = measured as i128 - original as i128;
        if predicted_change != measured_change {
            return Err(format!(
                "{} {label}: dyno stats predict taken conditional branches {before} -> {after} \
                 ({predicted_change:+}), callgrind measured {original} -> {measured} \
                 ({measured_change:+})",
                e.name
            ));
        }
    }
    Ok(CONFIGS.len())
}

#[test]
fn dyno_stats_predict_the_taken_conditional_branches_callgrind_counts() {
    let probe = Command::new("valgrind").arg("--version").output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "valgrind is required (apt-get install valgrind; scripts/test.sh installs it)"
    );
    let (corpus_dir, entries) = corpus();
    let base: PathBuf =
        std::env::temp_dir().join(format!("rivet-dyno-measured-{}", std::process::id()));
    let executables: Vec<&Entry> = entries.iter().filter(|e| !e.is_shared_lib()).collect();
    let compared = AtomicUsize::new(0);
    let failures = parallel(&executables, |_, e| {
        let n = compare(&entries, &corpus_dir, e, &base.join(&e.name))?;
        compared.fetch_add(n, Ordering::Relaxed);
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&base);
    assert!(
        failures.is_empty(),
        "{} of {} (program, configuration) pairs disagree:\n{}",
        failures.len(),
        executables.len() * CONFIGS.len(),
        failures.join("\n")
    );
    // Every executable, in every configuration: none may drop out unnoticed.
    assert_eq!(
        compared.into_inner(),
        executables.len() * CONFIGS.len(),
        "some programs were not compared"
    );
    assert!(
        executables.len() >= 180,
        "only {} executables",
        executables.len()
    );
}
