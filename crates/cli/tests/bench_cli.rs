//! `rivet bench`: A/B comparison on Lua 5.4 (`lua-gcc`), CPU time, interleaved rounds.
//!
//! Timing is noisy by nature, so these tests assert only what a sound comparison must get right
//! with a wide margin: the same binary against itself is "no significant difference", its
//! interval holding 1.00; a build doing 60% of another's work is detected as faster (and,
//! swapped, as slower: exit 3); shuffled layouts of the same binary are not a difference; Lua
//! optimized by Rivet from its own profile takes fewer I1 misses under cachegrind (its wall-time
//! gain, a few percent, is for the benchmarks to measure, not a test to bet on).
//! Tests where the truth is "no difference" ask for 99.9% / 99% intervals: at 95%, an honest
//! interval misses the truth one time in twenty, which would make them flaky by design.
//! Workloads are ~20-50 ms of CPU; no threshold on any absolute time.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{
    assert_one_error_line, instrument_and_train, real_program, repo_root, rivet, s, scratch,
};

fn lua() -> &'static Path {
    real_program("lua-gcc")
}

fn script(name: &str) -> String {
    repo_root()
        .join("bench/lua")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// Timed comparisons run one at a time: tests run in parallel, and two benchmarks sharing the
/// machine's 2 cores would only add noise to each other.
static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timing_lock() -> std::sync::MutexGuard<'static, ()> {
    TIMING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `rivet bench ... --json`, checks the exit code, returns the summary.
fn bench_json(args: &[&str], expect_code: i32) -> serde_json::Value {
    bench_json_exit(args, &[expect_code])
}

/// Runs `rivet bench ... --json`, checks the exit code is one of `codes`, returns the summary.
fn bench_json_exit(args: &[&str], codes: &[i32]) -> serde_json::Value {
    let mut all = vec!["bench", "--json"];
    all.extend_from_slice(args);
    let out = {
        let _one_at_a_time = timing_lock();
        rivet(&all)
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some_and(|c| codes.contains(&c)),
        "rivet {all:?} exited {:?}, expected one of {codes:?}\nstdout: {}\nstderr: {stderr}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    // Progress goes to stderr only on a terminal; warnings would be worth a look.
    assert!(stderr.is_empty(), "rivet {all:?}: {stderr}");
    serde_json::from_slice(&out.stdout).expect("JSON summary")
}

fn ratio(summary: &serde_json::Value) -> (f64, f64, f64) {
    (
        summary["ratio"].as_f64().unwrap(),
        summary["ci_low"].as_f64().unwrap(),
        summary["ci_high"].as_f64().unwrap(),
    )
}

#[test]
fn same_binary_is_no_difference() {
    let fannkuch = script("fannkuch.lua");
    let summary = bench_json(
        &[
            s(lua()),
            s(lua()),
            "--runs",
            "30",
            "--confidence",
            "0.999",
            "--",
            &fannkuch,
            "8",
        ],
        0,
    );
    let (r, lo, hi) = ratio(&summary);
    eprintln!("same binary: B/A {r:.4} (99.9% CI {lo:.4}..{hi:.4})");
    // No bound on how far the median ratio may stray from 1.00: that would be a timing
    // threshold, and on a shared VM whose speed swings within seconds a same-binary median
    // landed at 0.986. The verdict and the interval are what `bench` promises.
    assert_eq!(summary["verdict"], "no-difference", "{summary:#}");
    assert_eq!(summary["rounds"], 30);
    assert_eq!(summary["samples"].as_array().unwrap().len(), 30);
    assert!(lo <= 1.0 && 1.0 <= hi);
}

/// Lua instrumented, trained on the benchmark, optimized: `lua.opt`.
fn optimized_lua(dir: &Path) -> PathBuf {
    let (fannkuch, strings) = (script("fannkuch.lua"), script("strings.lua"));
    let counts = instrument_and_train(
        lua(),
        dir,
        &[&[fannkuch.as_str(), "8"], &[strings.as_str(), "20000"]],
    );
    let opt = dir.join("lua.opt");
    let out = rivet(&["optimize", s(lua()), "--profile", s(&counts), "-o", s(&opt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    opt
}

/// Two builds of one C loop, the second doing `fraction_percent`% of the first's work: a
/// speedup whose size is known before anything is timed.
fn spin_pair(dir: &Path, fraction_percent: u64) -> (PathBuf, PathBuf) {
    let source = dir.join("spin.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n\
         int main(void) {\n\
           volatile unsigned long x = 0;\n\
           for (unsigned long i = 0; i < ITERATIONS; i++) x += i;\n\
           printf(\"%lu\\n\", (unsigned long)x);\n\
           return 0;\n\
         }\n",
    )
    .unwrap();
    // About 15 ms for the full loop on this machine.
    let full = 40_000_000u64;
    let build = |name: &str, iterations: u64| {
        let out = dir.join(name);
        let status = Command::new("gcc")
            .args(["-O2", &format!("-DITERATIONS={iterations}UL"), "-o"])
            .arg(&out)
            .arg(&source)
            .status()
            .expect("gcc is required");
        assert!(status.success());
        out
    };
    (
        build("spin.full", full),
        build("spin.part", full * fraction_percent / 100),
    )
}

#[test]
fn detects_a_speedup_and_a_slowdown() {
    // B does 60% of A's work. Per-round ratios on this VM spread about ±30% around the truth,
    // so 24 rounds put the interval far from 1.00 without leaning on luck.
    let dir = scratch("bench", "spin");
    let (full, part) = spin_pair(&dir, 60);

    let guard = timing_lock();
    // The command line is the binary alone: `{}` stands for it.
    let out = rivet(&["bench", s(&full), s(&part), "--runs", "24", "--", "{}"]);
    drop(guard);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap();
    assert!(
        last.starts_with("B is ") && last.contains("% faster than A (95% CI "),
        "{stdout}"
    );

    // Swapped: B is significantly slower, exit 3.
    let summary = bench_json(&[s(&part), s(&full), "--runs", "24", "--", "{}"], 3);
    let (r, lo, hi) = ratio(&summary);
    eprintln!("full / 60% loop: {r:.4} (95% CI {lo:.4}..{hi:.4})");
    assert_eq!(summary["verdict"], "slower", "{summary:#}");
    assert!(lo > 1.0, "{summary:#}");
}

#[test]
fn cachegrind_counts_show_the_optimized_lua_takes_fewer_i1_misses() {
    // Whether Rivet's Lua is faster in wall time is a benchmark question (bench/optimize.sh);
    // here the wall-time verdict may go either way in 6 rounds, and what is checked is the
    // deterministic part: cachegrind's counts, which the layout must improve.
    let dir = scratch("bench", "speedup");
    let opt = optimized_lua(&dir);
    let fannkuch = script("fannkuch.lua");

    let guard = timing_lock();
    let out = rivet(&[
        "bench",
        s(lua()),
        s(&opt),
        "--runs",
        "6",
        "--cachegrind",
        "--",
        &fannkuch,
        "8",
    ]);
    drop(guard);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for event in [
        "I refs",
        "I1 misses",
        "LLi misses",
        "Branches",
        "Mispredicts",
    ] {
        assert!(stdout.contains(event), "no {event} in {stdout}");
    }

    // Not necessarily fewer mispredicts: cachegrind simulates a simple predictor.
    let summary = bench_json_exit(
        &[
            s(&opt),
            s(lua()),
            "--runs",
            "6",
            "--cachegrind",
            "--",
            &fannkuch,
            "8",
        ],
        &[0, 3],
    );
    let cg = &summary["cachegrind"];
    let (optimized, original) = (
        cg["a"]["i1_misses"].as_u64().unwrap(),
        cg["b"]["i1_misses"].as_u64().unwrap(),
    );
    assert!(
        optimized < original,
        "i1_misses: optimized {optimized}, original {original}"
    );
}

#[test]
fn shuffled_layouts_of_the_same_binary_are_no_difference() {
    // A and B are the same Lua; each side runs over 5 shuffles of it (seeds 1..5 and 6..10),
    // whose speeds differ by accident of layout by up to ~25% here: the interval over layouts
    // must be wide enough not to call that a difference. With 3 shuffles a side (9 runs) the
    // 99% interval over so few, heavy-tailed ratios called it a difference in 2 of 14 runs
    // here (and failed CI once); with 5 (15 runs), in none of 20.
    let fannkuch = script("fannkuch.lua");
    let summary = bench_json(
        &[
            s(lua()),
            s(lua()),
            "--randomize-layout",
            "5",
            "--runs",
            "15",
            "--confidence",
            "0.99",
            "--",
            &fannkuch,
            "8",
        ],
        0,
    );
    let (r, lo, hi) = ratio(&summary);
    eprintln!("shuffles of the same binary: B/A {r:.4} (99% CI {lo:.4}..{hi:.4})");
    assert_eq!(summary["verdict"], "no-difference", "{summary:#}");
    let seeds = |side: &str| -> Vec<u64> {
        summary[side]["variants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["seed"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(seeds("a"), [1, 2, 3, 4, 5]);
    assert_eq!(seeds("b"), [6, 7, 8, 9, 10]);
    let pairs: Vec<u64> = summary["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["pair"].as_u64().unwrap())
        .collect();
    assert_eq!(pairs, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
}

#[test]
fn without_relocations_layouts_shuffle_blocks_only() {
    let norelocs = real_program("lua-gcc-norelocs");
    let fannkuch = script("fannkuch.lua");
    let summary = bench_json(
        &[
            s(norelocs),
            s(norelocs),
            "--randomize-layout",
            "2",
            "--runs",
            "2",
            "--",
            &fannkuch,
            "7",
        ],
        0,
    );
    let layouts = summary["a"]["layouts"].as_str().unwrap();
    assert!(layouts.contains("shuffle-blocks"), "{layouts}");
}

#[test]
fn the_command_can_name_the_binary() {
    // `{}` stands for the binary: here inside a shell command line.
    let fannkuch = script("fannkuch.lua");
    let line = format!("{{}} {fannkuch} 7 > /dev/null");
    // Six rounds of a 6 ms run: the verdict is chance (all six ratios on one side happens one
    // time in 32), so only the mechanics are checked: every round ran both sides.
    let summary = bench_json_exit(
        &[s(lua()), s(lua()), "--runs", "6", "--", "sh", "-c", &line],
        &[0, 3],
    );
    assert_eq!(summary["rounds"], 6);
    let samples = summary["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 6);
    for sample in samples {
        for side in ["a_cpu_s", "b_cpu_s"] {
            assert!(sample[side].as_f64().unwrap() > 0.0, "{sample}");
        }
    }
}

fn bench(args: &[&str]) -> Output {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    rivet(&all)
}

#[test]
fn errors_are_one_line_with_a_hint() {
    let fannkuch = script("fannkuch.lua");
    let lua = s(lua());
    assert_one_error_line(
        &bench(&["/nonexistent/lua", lua, "--", &fannkuch, "7"]),
        "cannot read A (/nonexistent/lua)",
    );
    assert_one_error_line(
        &bench(&[lua, "/nonexistent/lua", "--", &fannkuch, "7"]),
        "cannot read B (/nonexistent/lua)",
    );
    // The workload fails: Lua cannot open the script.
    let out = bench(&[lua, lua, "--", "/nonexistent/script.lua"]);
    assert_one_error_line(&out, "exited with status 1");
    assert_one_error_line(&out, "/nonexistent/script.lua");
    // The command without `--`.
    assert_one_error_line(&bench(&[lua, lua, &fannkuch, "7"]), "unexpected argument");
    assert_one_error_line(&bench(&[lua, lua]), "no command to run");
    // Too few rounds for the interval; too few layouts.
    assert_one_error_line(
        &bench(&[lua, lua, "--runs", "3", "--", &fannkuch, "7"]),
        "cannot give a 95% interval",
    );
    assert_one_error_line(
        &bench(&[lua, lua, "--randomize-layout", "1", "--", &fannkuch, "7"]),
        "at least 2",
    );
    // Not an ELF file, with --randomize-layout (which rewrites it).
    let dir = scratch("bench", "errors");
    let text = dir.join("text");
    std::fs::write(&text, "not a binary").unwrap();
    assert_one_error_line(
        &bench(&[
            s(&text),
            lua,
            "--randomize-layout",
            "2",
            "--",
            &fannkuch,
            "7",
        ]),
        "not an ELF file",
    );
    // valgrind missing (PATH without it; the binaries are run by absolute path).
    let out = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(["bench", lua, lua, "--cachegrind", "--", &fannkuch, "7"])
        .env("PATH", s(&dir))
        .output()
        .unwrap();
    assert_one_error_line(&out, "apt-get install valgrind");
}

#[test]
fn help_has_an_example_and_the_exit_codes() {
    let out = rivet(&["bench", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(help.contains("Example: rivet bench"), "{help}");
    assert!(help.contains("3 = B significantly slower"), "{help}");
}
