//! AArch64 code guarded by BTI and PAC, rewritten and run where qemu-aarch64 enforces both
//! (its default CPU, `max`, implements them for binaries whose GNU property note asks).
//!
//! `tests/aarch64/rewrite_guarded.S` has a switch whose cases are `bti j` pads, an indirect
//! call to a `bti c` pad, a function that signs and authenticates its return address with
//! the matching unwind rules, an exclusive-monitor loop and a literal pool, and is marked
//! BTI+PAC. First the enforcement is shown to be real: the same program with one landing pad
//! left out dies with SIGILL. Then every rewritten layout must run to the same exit status,
//! pass `--verify`, and keep the property note.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::scratch;

const SOURCE: &str = "tests/aarch64/rewrite_guarded.S";
const EXPECTED_EXIT: i32 = 52;

fn build(dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = dir.join(name);
    let status = Command::new("aarch64-linux-gnu-gcc")
        .args([
            "-march=armv8.5-a",
            "-nostdlib",
            "-static",
            "-Wl,--emit-relocs",
        ])
        .args(defines)
        .arg(root.join(SOURCE))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("aarch64-linux-gnu-gcc is required (apt-get install gcc-aarch64-linux-gnu)");
    assert!(status.success(), "building {SOURCE} {defines:?} failed");
    out
}

/// Exit status under qemu-aarch64 with its `max` CPU (BTI and PAC enforced).
fn run_enforced(binary: &Path) -> Option<i32> {
    let status = Command::new("qemu-aarch64")
        .args(["-cpu", "max"])
        .arg(binary)
        .status()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)");
    use std::os::unix::process::ExitStatusExt;
    status.code().or(status.signal().map(|s| 128 + s))
}

fn feature_note(binary: &Path) -> String {
    let out = Command::new("aarch64-linux-gnu-readelf")
        .arg("-n")
        .arg(binary)
        .output()
        .expect("aarch64-linux-gnu-readelf (binutils-aarch64-linux-gnu)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("AArch64 feature"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn bti_catches_a_missing_landing_pad() {
    let dir = scratch("aarch64_guarded", "control");
    let broken = build(&dir, "missing_pad", &["-DMISSING_PAD"]);
    // qemu reports the SIGILL as the shell would: 128 + 4.
    assert_eq!(run_enforced(&broken), Some(132), "BTI was not enforced");
    let good = build(&dir, "guarded", &[]);
    assert_eq!(run_enforced(&good), Some(EXPECTED_EXIT));
}

#[test]
fn rewritten_guarded_code_runs_with_bti_and_pac_enforced() {
    let dir = scratch("aarch64_guarded", "rewrite");
    let input = build(&dir, "guarded", &[]);
    let note = feature_note(&input);
    assert_eq!(note, "Properties: AArch64 feature: BTI, PAC");
    let mut layouts: Vec<Vec<String>> = vec![vec!["identity".into()], vec!["reverse".into()]];
    for seed in 1..=8 {
        for kind in ["shuffle", "shuffle-blocks"] {
            layouts.push(vec![kind.into(), "--seed".into(), seed.to_string()]);
        }
    }
    for layout in &layouts {
        let out = dir.join(format!("out-{}", layout.join("-")));
        let rw = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .arg("rewrite")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .arg("--verify")
            .arg("--layout")
            .args(layout)
            .output()
            .unwrap();
        assert!(
            rw.status.success(),
            "{layout:?}: {}",
            String::from_utf8_lossy(&rw.stderr)
        );
        let summary = String::from_utf8_lossy(&rw.stdout);
        assert!(
            summary.contains("8 of 9 functions moved"),
            "{layout:?}: {summary}"
        );
        assert_eq!(run_enforced(&out), Some(EXPECTED_EXIT), "{layout:?}");
        assert_eq!(feature_note(&out), note, "{layout:?}");
    }
}

/// Instrumented, with either kind of atomic increment, the guarded program still runs where
/// BTI and PAC are enforced: the probes at the switch cases' and the called function's
/// starts go after their `bti` pads (a probe before a pad would be the SIGILL above), the
/// runtime's entry starts with one, and the exclusive loop is left without probes inside.
#[test]
fn instrumented_guarded_code_runs_with_bti_and_pac_enforced() {
    let dir = scratch("aarch64_guarded", "instrument");
    let input = build(&dir, "guarded", &[]);
    for atomics in ["lse", "llsc"] {
        let out = dir.join(format!("inst-{atomics}"));
        let counts = dir.join(format!("inst-{atomics}.counts"));
        let _ = std::fs::remove_file(&counts);
        let r = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .arg("instrument")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .args(["--atomics", atomics, "--profile"])
            .arg(&counts)
            .output()
            .unwrap();
        assert!(
            r.status.success(),
            "{atomics}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(run_enforced(&out), Some(EXPECTED_EXIT), "{atomics}");
        assert_eq!(feature_note(&out), feature_note(&input), "{atomics}");
        let file =
            rivet_profile::counters::CounterFile::parse(&std::fs::read(&counts).unwrap()).unwrap();
        assert_eq!(file.map.arch, rivet_profile::counters::CounterArch::Aarch64);
        assert!(
            file.counters.iter().any(|&c| c > 0),
            "{atomics}: nothing counted"
        );
    }
}
