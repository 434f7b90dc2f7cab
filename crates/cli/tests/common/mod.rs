//! Helpers shared by the CLI's integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[allow(dead_code)] // only the differential tests use it
pub mod corpus;

#[allow(dead_code)] // not every test binary checks errors
/// Asserts the run failed with exactly one `rivet: error: ... (hint: ...)` line containing
/// `expect`, and printed nothing on stdout.
pub fn assert_one_error_line(out: &Output, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(lines[0].starts_with("rivet: error: "), "{stderr}");
    assert!(lines[0].contains("(hint: "), "no hint: {stderr}");
    assert!(
        lines[0].contains(expect),
        "expected {expect:?} in: {stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// Builds (or finds cached) the corpus with `scripts/build-corpus.sh`; returns its directory.
#[allow(dead_code)] // not every test binary uses the corpus
pub fn corpus_dir() -> std::path::PathBuf {
    corpus_dir_built_by("scripts/build-corpus.sh")
}

/// The same for the AArch64 corpus (`scripts/build-corpus-aarch64.sh`, which installs the
/// cross compilers and qemu-user it needs).
#[allow(dead_code)]
pub fn corpus_dir_aarch64() -> std::path::PathBuf {
    corpus_dir_built_by("scripts/build-corpus-aarch64.sh")
}

fn corpus_dir_built_by(script: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new("bash")
        .arg(root.join(script))
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    std::path::PathBuf::from(stdout.lines().last().expect("corpus directory").trim())
}

/// Runs the `rivet` binary under test.
#[allow(dead_code)]
pub fn rivet(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(args)
        .output()
        .unwrap()
}

/// A fresh, empty scratch directory `group/name` under the target's test directory.
#[allow(dead_code)]
pub fn scratch(group: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(group)
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A path as a command-line argument.
#[allow(dead_code)]
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `rivet rewrite INPUT -o OUT --layout shuffle --seed SEED` plus `extra` arguments.
#[allow(dead_code)]
pub fn rewrite_shuffled(input: &Path, out: &Path, seed: u64, extra: &[&str]) -> Output {
    let seed = seed.to_string();
    let mut args = vec![
        "rewrite",
        s(input),
        "-o",
        s(out),
        "--layout",
        "shuffle",
        "--seed",
        &seed,
    ];
    args.extend_from_slice(extra);
    rivet(&args)
}

/// A program of `tests/instrument` (known dynamic behaviour, for the profiling tests).
#[allow(dead_code)]
pub fn instrument_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/instrument")
        .join(name)
}

/// Builds `tests/instrument/SRC` into `dir/name` with `compiler` and `flags` (always
/// `-g -Wl,--emit-relocs`, linked with -lpthread).
#[allow(dead_code)]
pub fn build_instrument_program(
    dir: &Path,
    src: &str,
    compiler: &str,
    flags: &[&str],
    name: &str,
) -> PathBuf {
    let out = dir.join(name);
    let status = std::process::Command::new(compiler)
        .args(["-g", "-Wl,--emit-relocs"])
        .args(flags)
        .arg(instrument_source(src))
        .arg("-o")
        .arg(&out)
        .arg("-lpthread")
        .status()
        .unwrap_or_else(|e| panic!("{compiler} is required (scripts/test.sh installs it): {e}"));
    assert!(status.success(), "{compiler} {flags:?} {src}");
    out
}

/// The real programs `scripts/build-real-programs.sh` builds (cached), by name.
#[allow(dead_code)]
pub fn real_program(name: &str) -> &'static Path {
    use std::collections::HashMap;
    use std::sync::OnceLock;
    static BUILDS: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    BUILDS
        .get_or_init(|| real_programs(&[]))
        .get(name)
        .unwrap_or_else(|| panic!("build-real-programs.sh did not build {name}"))
}

/// Runs `scripts/build-real-programs.sh PROGRAMS...` (none: all of them), which builds what is
/// not cached; returns its result lines as name -> path.
#[allow(dead_code)]
pub fn real_programs(programs: &[&str]) -> std::collections::HashMap<String, PathBuf> {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("scripts/build-real-programs.sh"))
        .args(programs)
        .output()
        .expect("running scripts/build-real-programs.sh");
    assert!(
        out.status.success(),
        "scripts/build-real-programs.sh {programs:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
        .collect()
}

/// The repository's root.
#[allow(dead_code)]
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Instruments `bin` into `dir`, runs the instrumented build once per argument list in `runs`
/// (output discarded, each run must succeed), and returns the counter file.
#[allow(dead_code)]
pub fn instrument_and_train(bin: &Path, dir: &Path, runs: &[&[&str]]) -> PathBuf {
    let name = bin.file_name().unwrap().to_string_lossy();
    let inst = dir.join(format!("{name}.inst"));
    let counts = dir.join(format!("{name}.counts"));
    let out = rivet(&[
        "instrument",
        s(bin),
        "-o",
        s(&inst),
        "--profile",
        s(&counts),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for args in runs {
        let run = std::process::Command::new(&inst)
            .args(*args)
            .output()
            .unwrap();
        assert!(run.status.success(), "{} {args:?}", inst.display());
    }
    counts
}

/// Runs `scripts/SCRIPT ARGS EXTRA` (check-lua.sh, check-sqlite.sh) and fails with its output
/// when it finds differences.
#[allow(dead_code)]
pub fn check_script(script: &str, args: &[&Path], extra: &[&str]) {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("scripts").join(script))
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

/// `perf record -e cpu-clock:u -F FREQUENCY -o PERF_DATA -- ...`: samples of user code, which
/// need no hardware counters. `command` adds the sampled command, its arguments and its
/// environment after the `--`. Panics when perf is missing or fails.
#[allow(dead_code)]
pub fn perf_record(perf_data: &Path, frequency: u32, command: impl FnOnce(&mut Command)) {
    let mut perf = Command::new("perf");
    perf.args(["record", "-q", "-e", "cpu-clock:u", "-F"])
        .arg(frequency.to_string())
        .arg("-o")
        .arg(perf_data)
        .arg("--");
    command(&mut perf);
    let out = perf
        .output()
        .expect("perf is required (apt-get install linux-perf)");
    assert!(
        out.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The AArch64 builds of `scripts/build-real-aarch64.sh` as (name, path): the default eight,
/// or the named ones (`lua-clang-bti`).
#[allow(dead_code)]
pub fn aarch64_real_builds(names: &[&str]) -> Vec<(String, PathBuf)> {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/build-real-aarch64.sh"))
        .args(names)
        .output()
        .expect("running scripts/build-real-aarch64.sh");
    assert!(
        out.status.success(),
        "scripts/build-real-aarch64.sh {names:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, path) = l.split_once(' ')?;
            Some((name.to_string(), PathBuf::from(path)))
        })
        .collect()
}

/// A copy, in `dir`, of the `.qemu` wrapper the AArch64 build script writes next to `input`
/// (qemu with the build's CPU options, argv[0] as the checks expect), running `binary`
/// instead; named after `binary`.
#[allow(dead_code)]
pub fn qemu_wrapper(input: &Path, binary: &Path, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let wrapper = std::fs::read_to_string(format!("{}.qemu", input.display()))
        .expect("the build script writes a .qemu wrapper next to each binary");
    let file = input.file_name().unwrap().to_string_lossy().into_owned();
    let wrapper = wrapper.replace(
        &format!("\"$(dirname \"$0\")/{file}\""),
        &format!("\"{}\"", binary.display()),
    );
    assert!(wrapper.contains(&binary.display().to_string()), "{wrapper}");
    let path = dir.join(format!(
        "{}.qemu",
        binary.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&path, wrapper).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Builds the corpus source `tests/corpus/src/SRC` for AArch64 into `dir/NAME` with `cc`
/// (`gcc`: aarch64-linux-gnu-gcc/g++ 12; `clang`: clang-19 for aarch64-linux-gnu with lld)
/// and the corpus flags (`-g -Wl,--emit-relocs`; gcc: `-fno-reorder-blocks-and-partition`)
/// plus `flags`. For tests that need a few AArch64 programs, not the whole cross-built corpus
/// (`corpus_dir_aarch64`).
#[allow(dead_code)]
pub fn cross_build_aarch64(dir: &Path, src: &str, cc: &str, flags: &[&str], name: &str) -> PathBuf {
    let cpp = src.ends_with(".cpp");
    let mut command = match (cc, cpp) {
        ("gcc", false) => Command::new("aarch64-linux-gnu-gcc"),
        ("gcc", true) => Command::new("aarch64-linux-gnu-g++"),
        ("clang", _) => {
            let mut c = Command::new(if cpp { "clang++-19" } else { "clang-19" });
            c.args(["--target=aarch64-linux-gnu", "-fuse-ld=lld"]);
            c
        }
        _ => panic!("cross_build_aarch64: no compiler {cc}"),
    };
    command.args(["-g", "-pthread", "-Wl,--emit-relocs"]);
    command.arg(if cpp { "-std=gnu++17" } else { "-std=gnu11" });
    if cc == "gcc" {
        command.arg("-fno-reorder-blocks-and-partition");
    }
    let out = dir.join(name);
    let status = command
        .args(flags)
        .arg(repo_root().join("tests/corpus/src").join(src))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("{cc} for AArch64 is required (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu clang-19 lld-19): {e}")
        });
    assert!(status.success(), "{cc} {flags:?} {src}");
    out
}

/// The shuffle seeds the AArch64 rewrite tests run, from `RIVET_AARCH64_SEEDS`, if set:
/// `N` is seeds 1 to N; `A..B` is seeds A to B, so that an acceptance run of hours under qemu
/// can be split over several sittings (identity and reverse go with the range that starts at
/// 1).
#[allow(dead_code)] // only the AArch64 rewrite tests use it
pub fn aarch64_seeds() -> Option<std::ops::RangeInclusive<u32>> {
    let text = std::env::var("RIVET_AARCH64_SEEDS").ok()?;
    let number = |s: &str| -> u32 {
        s.trim().parse().unwrap_or_else(|_| {
            panic!("RIVET_AARCH64_SEEDS is N or A..B (seed numbers), not {text:?}")
        })
    };
    Some(match text.split_once("..") {
        Some((first, last)) => number(first)..=number(last),
        None => 1..=number(&text),
    })
}

/// Whether the AArch64 real-program build `name` is among those `RIVET_AARCH64_BUILDS`
/// (comma-separated names of `scripts/build-real-aarch64.sh`: `lua-gcc-pie`, ...,
/// `lua-clang-bti`) selects; all are when it is not set. A name that is no build's is an
/// error, so that a typo cannot turn a run of hours into nothing.
#[allow(dead_code)] // only the AArch64 real-program tests use it
pub fn aarch64_build_selected(name: &str) -> bool {
    let Ok(list) = std::env::var("RIVET_AARCH64_BUILDS") else {
        return true;
    };
    let is_build = |w: &str| {
        let Some((program, variant)) = w.split_once('-') else {
            return false;
        };
        ["lua", "sqlite3"].contains(&program)
            && ["gcc-pie", "gcc-nopie", "clang", "clang-pac", "clang-bti"].contains(&variant)
    };
    let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
    for w in &wanted {
        assert!(
            is_build(w),
            "RIVET_AARCH64_BUILDS names {w:?}, which is not a build of scripts/build-real-aarch64.sh"
        );
    }
    wanted.contains(&name)
}

/// `rivet rewrite` layout arguments: identity and reverse when `seeds` starts at 1, then each
/// seed of `seeds` for `shuffle` and for `shuffle-blocks`.
#[allow(dead_code)] // only the AArch64 rewrite tests use it
pub fn seed_layouts(seeds: std::ops::RangeInclusive<u32>) -> Vec<Vec<String>> {
    let mut layouts = Vec::new();
    if *seeds.start() <= 1 {
        layouts.push(vec!["--layout".to_string(), "identity".to_string()]);
        layouts.push(vec!["--layout".to_string(), "reverse".to_string()]);
    }
    for seed in seeds {
        for kind in ["shuffle", "shuffle-blocks"] {
            layouts.push(vec![
                "--layout".into(),
                kind.into(),
                "--seed".into(),
                seed.to_string(),
            ]);
        }
    }
    layouts
}

/// The address of symbol `name` in `bin`, as `nm` lists it; panics when there is none.
#[allow(dead_code)] // only the tests that look up symbols use it
pub fn nm_symbol(bin: &Path, name: &str) -> u64 {
    let out = Command::new("nm").arg(bin).output().expect("nm (binutils)");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            f.next()?;
            (f.next()? == name).then_some(addr)
        })
        .unwrap_or_else(|| panic!("no symbol {name} in {}", bin.display()))
}
