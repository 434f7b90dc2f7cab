//! examples/fleet: hosts' perf recordings aggregated (map) and merged in a tree (reduce) as
//! tasks of a Dask cluster of several worker processes give the bytes one `rivet merge` of the
//! same inputs, with the same weights, gives; and a profile of another build fails the whole
//! run with one line and no output.
//!
//! The fleet: four real recordings (`perf record -e cpu-clock:u`) of a small program running
//! four workloads, and 300 generated host profiles of that program (the recordings' samples
//! with counts of their own, some records missing), a tenth of the inputs decayed (`:0.5`) and
//! a tenth weighted up (`:3`). Dask comes from examples/fleet/setup.sh (a venv under
//! ~/.cache/rivet, which scripts/test.sh also makes); if it cannot be installed this test
//! fails, it never skips.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{build_instrument_program, perf_record, repo_root, rivet, s, scratch};
use rivet_profile::{Profile, native};

fn fleet_python() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("examples/fleet/setup.sh"))
        .output()
        .expect("bash runs examples/fleet/setup.sh");
    assert!(
        out.status.success(),
        "examples/fleet/setup.sh could not provide Dask (scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn fleet(python: &Path, binary: &Path, recordings: &[String], list: &Path, out: &Path) -> Output {
    let mut cmd = Command::new(python);
    cmd.arg(repo_root().join("examples/fleet/fleet.py"))
        .args([
            "--rivet",
            env!("CARGO_BIN_EXE_rivet"),
            "--binary",
            s(binary),
        ])
        .args(["--profiles-from", s(list), "-o", s(out)])
        .args(["--workers", "4", "--fan-in", "8"]);
    for r in recordings {
        cmd.args(["--recording", r]);
    }
    cmd.output().expect("the venv's python runs")
}

/// The weight of input `i` in this fleet: a tenth decayed, a tenth weighted up.
fn weight(i: usize) -> &'static str {
    match i % 10 {
        3 => ":0.5",
        7 => ":3",
        _ => "",
    }
}

/// Deterministic noise for the generated hosts (splitmix64).
fn noise(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn dask_tree_merge_equals_one_merge() {
    let dir = scratch("fleet", "example");
    let python = fleet_python();
    let binary = build_instrument_program(&dir, "counts.c", "gcc", &["-O2"], "prog");

    // The hosts that recorded: four workloads.
    let workloads: [&[&str]; 4] = [
        &["loop", "4000000"],
        &["switch", "3000000"],
        &["fptr", "3000000"],
        &["threads", "2", "1500000"],
    ];
    let mut recordings = Vec::new();
    let mut host_profiles = Vec::new();
    let mut host_paths = Vec::new();
    for (i, args) in workloads.iter().enumerate() {
        let data = dir.join(format!("host{i}.perf.data"));
        perf_record(&data, 5000, |perf| {
            perf.arg(&binary).args(*args);
        });
        // What the map step makes of it, made here for the single merge.
        let prof = dir.join(format!("host{i}.prof"));
        let r = rivet(&["aggregate", s(&data), s(&binary), "-o", s(&prof)]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        recordings.push(format!("{}{}", s(&data), weight(i)));
        host_profiles.push(format!("{}{}", s(&prof), weight(i)));
        host_paths.push(prof);
    }

    // 300 generated hosts: the recordings' sample places with counts of their own.
    let template: Profile = rivet_profile::merge::merge(
        host_paths
            .iter()
            .map(|path| native::parse(&std::fs::read_to_string(path).unwrap()).unwrap()),
    )
    .unwrap();
    assert!(template.samples.len() >= 4, "too few sampled places");
    let generated = dir.join("generated");
    std::fs::create_dir_all(&generated).unwrap();
    let mut list = String::new();
    let mut state = 37;
    for i in 0..300 {
        let mut p = template.clone();
        p.samples.retain(|_, c| {
            *c = 1 + noise(&mut state) % (2 * *c + 1);
            !noise(&mut state).is_multiple_of(5)
        });
        let path = generated.join(format!("gen{i:03}.prof"));
        std::fs::write(&path, native::write(&p).unwrap()).unwrap();
        let _ = writeln!(list, "{}{}", s(&path), weight(i + 4));
    }
    let list_file = dir.join("generated.txt");
    std::fs::write(&list_file, &list).unwrap();

    // The fleet: map and tree reduce on a local cluster.
    let fleet_out = dir.join("fleet.prof");
    let r = fleet(&python, &binary, &recordings, &list_file, &fleet_out);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "fleet.py failed: {stderr}");
    let workers: usize = stderr
        .split(" worker processes")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no worker count in: {stderr}"));
    assert!(
        workers >= 2,
        "the tasks ran in {workers} process(es): {stderr}"
    );
    assert!(stderr.contains("merged 304 inputs"), "{stderr}");

    // One merge of the same inputs with the same weights.
    let single = dir.join("single.prof");
    let mut args = vec!["merge".to_string()];
    args.extend(host_profiles.iter().cloned());
    args.extend(["--inputs-from".into(), s(&list_file).into()]);
    args.extend(["-o".into(), s(&single).into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = rivet(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let fleet_bytes = std::fs::read(&fleet_out).unwrap();
    assert!(
        fleet_bytes == std::fs::read(&single).unwrap(),
        "the tree merge differs from one merge"
    );
    let merged = native::parse(std::str::from_utf8(&fleet_bytes).unwrap()).unwrap();
    assert_eq!(merged.samples.len(), template.samples.len());
    assert!(merged.samples.values().sum::<u64>() > template.samples.values().sum::<u64>());

    // A host profile of another build spoils the fleet: one line, no output.
    let other = build_instrument_program(&dir, "counts.c", "gcc", &["-O1"], "other");
    let data = dir.join("other.perf.data");
    perf_record(&data, 5000, |perf| {
        perf.arg(&other).args(["loop", "2000000"]);
    });
    let stray = generated.join("stray.prof");
    let r = rivet(&["aggregate", s(&data), s(&other), "-o", s(&stray)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::write(&list_file, format!("{list}{}\n", s(&stray))).unwrap();
    let refused = dir.join("refused.prof");
    let r = fleet(&python, &binary, &recordings, &list_file, &refused);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("fleet.py: error: rivet: error: ")
            && stderr.contains(s(&stray))
            && stderr.contains("build-id"),
        "{stderr}"
    );
    assert!(!refused.exists());
}
