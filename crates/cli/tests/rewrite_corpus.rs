//! Differential tests of the rewriter over the corpus: every program, rewritten with the
//! identity, reversed and 20 shuffled layouts (`--verify` on), must print the same and exit
//! the same as the original. Shared libraries are checked through their user: the rewritten
//! library is loaded (LD_LIBRARY_PATH) by the original executable.
//!
//! The corpus is built (and cached) by `scripts/build-corpus.sh`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

struct Entry {
    name: String,
    kind: String,
    path: PathBuf,
    expected_exit: Option<i32>,
    expected_stdout: Option<PathBuf>,
    needs: Option<String>,
}

fn corpus() -> (PathBuf, Vec<Entry>) {
    let dir = common::corpus_dir();
    let manifest = std::fs::read_to_string(dir.join("manifest.tsv")).unwrap();
    let mut lines = manifest.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let dash = |s: &str| (s != "-").then(|| s.to_string());
    let entries = lines
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Entry {
                name: f[col("name")].to_string(),
                kind: f[col("kind")].to_string(),
                path: dir.join(f[col("path")]),
                expected_exit: dash(f[col("expected_exit")]).map(|s| s.parse().unwrap()),
                expected_stdout: dash(f[col("expected_stdout")]).map(|s| dir.join(s)),
                needs: dash(f[col("needs")]),
            }
        })
        .collect();
    (dir, entries)
}

fn rivet() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rivet"))
}

/// Runs `binary` (with `lib_dir` first on the library path) and returns (exit code, stdout).
fn run(binary: &Path, lib_dir: &Path) -> (Option<i32>, Vec<u8>) {
    let out = Command::new("timeout")
        .arg("20")
        .arg(binary)
        .env("LD_LIBRARY_PATH", lib_dir)
        .output()
        .unwrap();
    (out.status.code(), out.stdout)
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

fn differential(layouts: &[Vec<String>], strip_relocations: bool) {
    let (dir, entries) = corpus();
    let work = std::env::temp_dir().join(format!(
        "rivet-rewrite-corpus-{}-{strip_relocations}",
        std::process::id()
    ));
    std::fs::create_dir_all(&work).unwrap();
    let failures = Mutex::new(Vec::<String>::new());
    let checked = Mutex::new(0usize);
    let jobs: Vec<(&Entry, Vec<String>)> = entries
        .iter()
        .flat_map(|e| layouts.iter().cloned().map(move |l| (e, l)))
        .collect();
    let next = Mutex::new(0usize);
    std::thread::scope(|s| {
        for worker in 0..std::thread::available_parallelism().map_or(2, |n| n.get()) {
            let (jobs, next, failures, checked, work, dir, entries) =
                (&jobs, &next, &failures, &checked, &work, &dir, &entries);
            s.spawn(move || {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some((e, layout)) = jobs.get(i) else {
                        break;
                    };
                    let slot = work.join(format!("w{worker}"));
                    std::fs::create_dir_all(&slot).unwrap();
                    let out_path = slot.join(e.path.file_name().unwrap());
                    let _ = std::fs::remove_file(&out_path);
                    let input = if strip_relocations {
                        let stripped = slot.join("input");
                        let st = Command::new("objcopy")
                            .arg("--remove-relocations=*")
                            .arg(&e.path)
                            .arg(&stripped)
                            .status()
                            .expect("objcopy is required (apt-get install binutils)");
                        assert!(st.success(), "objcopy failed on {}", e.name);
                        stripped
                    } else {
                        e.path.clone()
                    };
                    let rw = Command::new(rivet())
                        .arg("rewrite")
                        .arg(&input)
                        .arg("-o")
                        .arg(&out_path)
                        .arg("--verify")
                        .args(layout)
                        .output()
                        .unwrap();
                    let what = format!("{} {}", e.name, layout.join(" "));
                    if !rw.status.success() {
                        failures.lock().unwrap().push(format!(
                            "{what}: rewrite failed: {}",
                            String::from_utf8_lossy(&rw.stderr)
                        ));
                        continue;
                    }
                    // The executable to run and the library directory it loads from.
                    let (exe, lib_dir, expected_exit, expected_stdout) = if e.kind == "shared-lib" {
                        let Some(user) = entries
                            .iter()
                            .find(|u| u.needs.as_deref() == Some(e.name.as_str()))
                        else {
                            continue;
                        };
                        (
                            user.path.clone(),
                            slot.clone(),
                            user.expected_exit,
                            user.expected_stdout.clone(),
                        )
                    } else {
                        (
                            out_path.clone(),
                            dir.clone(),
                            e.expected_exit,
                            e.expected_stdout.clone(),
                        )
                    };
                    let (code, stdout) = run(&exe, &lib_dir);
                    let want_stdout = expected_stdout.map(|p| std::fs::read(p).unwrap());
                    if code != expected_exit || want_stdout.as_ref().is_some_and(|w| *w != stdout) {
                        failures.lock().unwrap().push(format!(
                            "{what}: exit {code:?} (expected {expected_exit:?}), stdout {}",
                            if want_stdout.is_some_and(|w| w == stdout) {
                                "same"
                            } else {
                                "DIFFERENT"
                            }
                        ));
                        continue;
                    }
                    *checked.lock().unwrap() += 1;
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&work);
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} rewrites misbehave:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n")
    );
    let checked = *checked.lock().unwrap();
    assert!(
        checked >= 180 * layouts.len(),
        "only {checked} of {} rewrites were run and compared",
        jobs.len()
    );
}
