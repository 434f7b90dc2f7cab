//! Real programs, instrumented: Lua 5.4 and SQLite 3 behave exactly as the originals on
//! their scripts, workloads and SQLite's own test suite while counting, and the counts they
//! leave convert to a profile of the original binary. Then the sampling check: `perf record
//! -e cpu-clock:u` on the Lua benchmarks, aggregated by Rivet, ranks the hottest functions the
//! way instrumentation does.

mod common;

use common::{rivet, s, scratch};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rivet_profile::counters::CounterFile;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn builds() -> &'static HashMap<String, PathBuf> {
    static BUILDS: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let out = Command::new("bash")
            .arg(root().join("scripts/build-real-programs.sh"))
            .output()
            .expect("running scripts/build-real-programs.sh");
        assert!(
            out.status.success(),
            "scripts/build-real-programs.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
            .collect()
    })
}

fn build(name: &str) -> &'static Path {
    builds()
        .get(name)
        .unwrap_or_else(|| panic!("build-real-programs.sh did not build {name}"))
}

/// Instruments `input` into `dir`; the output and its counter file.
fn instrument(input: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let out = dir.join(format!(
        "{}.inst",
        input.file_name().unwrap().to_string_lossy()
    ));
    let counts = dir.join(format!(
        "{}.counts",
        input.file_name().unwrap().to_string_lossy()
    ));
    let _ = std::fs::remove_file(&counts);
    let r = rivet(&[
        "instrument",
        s(input),
        "-o",
        s(&out),
        "--profile",
        s(&counts),
    ]);
    assert!(
        r.status.success(),
        "instrument {}: {}",
        input.display(),
        String::from_utf8_lossy(&r.stderr)
    );
    (out, counts)
}

/// The profile in a counter file: some functions counted, the input's build-id.
fn check_counts(counts: &Path, input: &Path) {
    let data = std::fs::read(counts).unwrap_or_else(|e| panic!("{}: {e}", counts.display()));
    let file = CounterFile::parse(&data).unwrap();
    let profile = file.to_profile();
    let elf_data = std::fs::read(input).unwrap();
    let elf = rivet_elf::ElfFile::parse(&elf_data).unwrap();
    let id: String = elf
        .build_id()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(profile.build_id.as_deref(), Some(id.as_str()));
    let counted: std::collections::BTreeSet<&str> = profile
        .branches
        .keys()
        .map(|(f, _)| f.name.as_str())
        .collect();
    assert!(counted.len() > 100, "{} functions counted", counted.len());
}

fn check(script: &str, args: &[&Path], extra: &[&str]) {
    let out = Command::new("bash")
        .arg(root().join("scripts").join(script))
        .args(args)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} {args:?} {extra:?} found differences:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn lua_instrumented_runs_every_script_identically() {
    for name in ["lua-gcc", "lua-clang"] {
        let dir = scratch("real-instrument", name);
        let original = build(name);
        let (inst, counts) = instrument(original, &dir);
        check("check-lua.sh", &[&inst, original], &[]);
        check_counts(&counts, original);
    }
}

#[test]
fn sqlite_instrumented_gives_identical_results() {
    let dir = scratch("real-instrument", "sqlite3-gcc");
    let original = build("sqlite3-gcc");
    let (inst, counts) = instrument(original, &dir);
    check(
        "check-sqlite.sh",
        &[&inst],
        &["--reference", original.to_str().unwrap()],
    );
    check_counts(&counts, original);
    // SQLite's own test suite, 60 files, two at a time counting into one file.
    let dir = scratch("real-instrument", "testfixture-gcc");
    let original = build("testfixture-gcc");
    let (inst, counts) = instrument(original, &dir);
    check(
        "check-sqlite.sh",
        &[&inst],
        &["smoke", "--reference", original.to_str().unwrap()],
    );
    check_counts(&counts, original);
}
