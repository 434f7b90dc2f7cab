//! Stale profiles end to end: a profile of one build of a program used on the next build,
//! built here with gcc from `tests/stale/interp.c` (version 2 changes the hot interpreter
//! loop, adds a function before the others and leaves the rest alone). The profile of the
//! first build is matched to the second by its code hashes: more of it matches than when
//! forced onto the new offsets, and the optimized second build prints what the second build
//! prints.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{assert_one_error_line, rivet, s, scratch};

/// The two builds, the counter file and the hashed profile of the first (built once).
struct Builds {
    dir: PathBuf,
    v1: PathBuf,
    v2: PathBuf,
    counts: PathBuf,
    profile: PathBuf,
}

fn gcc(dir: &Path, flags: &[&str], name: &str) -> PathBuf {
    let out = dir.join(name);
    let source = common::repo_root().join("tests/stale/interp.c");
    let status = Command::new("gcc")
        .args([
            "-O2",
            "-g",
            "-fno-reorder-blocks-and-partition",
            "-Wl,--emit-relocs",
        ])
        .args(flags)
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("gcc is required (scripts/test.sh installs it): {e}"));
    assert!(status.success(), "gcc {flags:?} {}", source.display());
    out
}

fn builds() -> &'static Builds {
    static BUILDS: OnceLock<Builds> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let dir = scratch("stale_cli", "builds");
        let v1 = gcc(&dir, &[], "interp1");
        let v2 = gcc(&dir, &["-DV2"], "interp2");
        let counts = common::instrument_and_train(&v1, &dir, &[&["200001"], &["3000", "x"]]);
        let profile = dir.join("interp1.prof");
        let out = rivet(&["merge", "--binary", s(&v1), s(&counts), "-o", s(&profile)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Builds {
            dir,
            v1,
            v2,
            counts,
            profile,
        }
    })
}

fn optimize_json(
    binary: &Path,
    profile: &Path,
    output: &Path,
    extra: &[&str],
) -> (serde_json::Value, String) {
    let mut args = vec![
        "optimize",
        s(binary),
        "--profile",
        s(profile),
        "-o",
        s(output),
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = rivet(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

fn run(binary: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(binary).args(args).output().unwrap();
    assert!(out.status.success(), "{} {args:?}", binary.display());
    out.stdout
}

#[test]
fn a_profile_of_the_previous_build_is_matched_and_the_output_runs_the_same() {
    let b = builds();
    let text = std::fs::read_to_string(&b.profile).unwrap();
    // Version 4: the interpreter's switch gives its case blocks a `case` field (a seventh word).
    assert!(text.starts_with("rivet-profile 4\n"), "{text}");
    assert!(text.contains("\nfunction run.constprop.0/1 "), "{text}");
    let run_blocks = text
        .split("\nfunction ")
        .find(|f| f.starts_with("run.constprop.0/1 "))
        .unwrap();
    let cases = run_blocks
        .lines()
        .filter(|l| l.starts_with("block ") && l.split(' ').count() == 7)
        .count();
    assert!(cases >= 8, "{run_blocks}");

    let stale_out = b.dir.join("interp2.stale");
    let (stale, stderr) = optimize_json(&b.v2, &b.profile, &stale_out, &[]);
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("rivet: note: "))
        .collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(
        notes[0].contains("is a profile of another build of"),
        "{stderr}"
    );
    assert!(notes[0].contains("matched by code hashes"), "{stderr}");

    let forced_out = b.dir.join("interp2.forced");
    let (forced, _) = optimize_json(&b.v2, &b.profile, &forced_out, &["--force"]);
    assert!(forced["profile"]["stale"].is_null());

    let share = |j: &serde_json::Value| j["profile"]["matched_share"].as_f64().unwrap();
    // Forced, the hot loop's records fit the new offsets by chance only; matched, nearly all
    // of the profile reaches the new build (0.29 and 0.92 when written).
    assert!(
        share(&stale) >= 0.85,
        "stale matching kept {}",
        share(&stale)
    );
    assert!(
        share(&stale) > share(&forced) + 0.3,
        "stale {} vs forced {}",
        share(&stale),
        share(&forced)
    );
    let report = &stale["profile"]["stale"];
    let shares = ["exact_share", "approximate_share", "unmatched_share"]
        .map(|k| report[k].as_f64().unwrap());
    assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{report}");
    let hottest = &report["functions"][0];
    assert_eq!(hottest["name"], "run.constprop.0/1", "{report}");
    assert_eq!(hottest["match"], "approximate", "{report}");
    let unchanged = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "sort.constprop.0/1")
        .unwrap_or_else(|| panic!("sort is in the profile: {report}"));
    assert_eq!(unchanged["match"], "exact", "{report}");
    // The changed hot function was laid out from the carried-over counts.
    assert!(
        stale["rewritten_with_profile"].as_u64().unwrap() >= 4,
        "{stale}"
    );

    for args in [&["100001"][..], &["7", "abc"], &[]] {
        let expected = run(&b.v2, args);
        assert_eq!(run(&stale_out, args), expected, "{args:?}");
        assert_eq!(run(&forced_out, args), expected, "{args:?}");
    }
}

#[test]
fn a_profile_of_the_same_build_is_used_as_it_is() {
    let b = builds();
    let out = b.dir.join("interp1.opt");
    let (json, stderr) = optimize_json(&b.v1, &b.profile, &out, &[]);
    assert!(!stderr.contains("rivet: note:"), "{stderr}");
    assert!(json["profile"]["stale"].is_null(), "{json}");
    assert_eq!(
        json["profile"]["matched_share"].as_f64(),
        Some(1.0),
        "{json}"
    );
    assert_eq!(run(&out, &["100001"]), run(&b.v1, &["100001"]));
}

#[test]
fn a_profile_of_another_build_without_hashes_is_refused_with_a_hint() {
    let b = builds();
    let out = rivet(&[
        "optimize",
        s(&b.v2),
        "--profile",
        s(&b.counts),
        "-o",
        s(&b.dir.join("never")),
    ]);
    assert_one_error_line(&out, "has no code hashes to match it by");
    assert!(String::from_utf8_lossy(&out.stderr).contains("rivet merge --binary"));
    // Hashes go into Rivet's format only.
    let out = rivet(&[
        "merge",
        "--binary",
        s(&b.v1),
        s(&b.counts),
        "-o",
        s(&b.dir.join("x.fdata")),
    ]);
    assert_one_error_line(&out, "only Rivet's profile format holds");
    // And from the build the profiles were taken on.
    let out = rivet(&[
        "merge",
        "--binary",
        s(&b.v2),
        s(&b.profile),
        "-o",
        s(&b.dir.join("x.prof")),
    ]);
    assert_one_error_line(&out, "the profiles are of build-id");
}

#[test]
fn inspect_reports_how_the_profile_matched() {
    let b = builds();
    let out = rivet(&[
        "inspect",
        s(&b.v2),
        "--profile",
        s(&b.profile),
        "--top",
        "3",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("stale profile: "), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("run.constprop.0/1") && l.contains("matched"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("(approximate, "), "{line}");
}

/// `llvm-bolt-19 BINARY -data=FDATA -w YAML`: BOLT's YAML profile of the first build, from the
/// fdata Rivet writes of the same counts.
fn bolt_yaml(b: &Builds) -> PathBuf {
    let fdata = b.dir.join("interp1.fdata");
    let out = rivet(&["merge", s(&b.counts), "-o", s(&fdata)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = b.dir.join("interp1.yaml");
    let out = Command::new("llvm-bolt-19")
        .arg(&b.v1)
        .arg(format!("-data={}", fdata.display()))
        .arg("-w")
        .arg(&yaml)
        .arg("-o")
        .arg(b.dir.join("interp1.bolt"))
        .output()
        .expect("llvm-bolt-19 is required (apt-get install bolt-19)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    yaml
}

#[test]
fn a_bolt_yaml_profile_drives_optimize_and_carries_over_to_the_next_build() {
    let b = builds();
    let yaml = bolt_yaml(b);
    // On its own build, the YAML profile gives the layout the counts it came from give.
    let (from_yaml, stderr) = optimize_json(&b.v1, &yaml, &b.dir.join("interp1.y"), &[]);
    assert!(!stderr.contains("warning"), "{stderr}");
    let (from_counts, _) = optimize_json(&b.v1, &b.counts, &b.dir.join("interp1.c"), &[]);
    assert_eq!(
        from_yaml["profile"]["matched_share"].as_f64(),
        Some(1.0),
        "{from_yaml}"
    );
    assert_eq!(from_yaml["dyno_stats"], from_counts["dyno_stats"]);
    assert_eq!(
        run(&b.dir.join("interp1.y"), &["100001"]),
        run(&b.v1, &["100001"])
    );

    // On the next build it is refused, with the way to carry it over in the hint...
    let out = rivet(&[
        "optimize",
        s(&b.v2),
        "--profile",
        s(&yaml),
        "-o",
        s(&b.dir.join("never")),
    ]);
    assert_one_error_line(&out, "is a BOLT YAML profile of another build");
    assert!(String::from_utf8_lossy(&out.stderr).contains("rivet merge --binary"));
    // ...which is to put it on its own build, with code hashes, in Rivet's format.
    let converted = b.dir.join("interp1-yaml.prof");
    let out = rivet(&["merge", "--binary", s(&b.v1), s(&yaml), "-o", s(&converted)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stale_out = b.dir.join("interp2.from-yaml");
    let (stale, _) = optimize_json(&b.v2, &converted, &stale_out, &[]);
    let share = stale["profile"]["matched_share"].as_f64().unwrap();
    assert!(share >= 0.85, "stale matching of the YAML kept {share}");
    assert_eq!(
        stale["profile"]["stale"]["functions"][0]["match"],
        "approximate"
    );
    assert_eq!(run(&stale_out, &["100001"]), run(&b.v2, &["100001"]));
}

#[test]
fn auto_keeps_the_code_hashes_in_the_profile_it_writes() {
    let b = builds();
    let kept = b.dir.join("auto.prof");
    let out = rivet(&[
        "auto",
        s(&b.v1),
        "-o",
        s(&b.dir.join("interp1.auto")),
        "--train",
        "{} 30001",
        "--profile-out",
        s(&kept),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&kept).unwrap();
    assert!(text.contains("\nfunction run.constprop.0/1 "), "{text}");
    // So the next build can use it.
    let (json, _) = optimize_json(&b.v2, &kept, &b.dir.join("interp2.from-auto"), &[]);
    assert!(
        json["profile"]["matched_share"].as_f64().unwrap() >= 0.85,
        "{json}"
    );
}
