//! `rivet auto` and `rivet bench` on AArch64 programs (corpus sources cross-built here), run
//! through `--runner 'qemu-aarch64 -L /usr/aarch64-linux-gnu'` on this x86-64 host: auto trains,
//! optimizes, verifies and benches (and its output equals the manual steps' to the byte), a
//! server is trained and stopped through the emulator with nothing left running, bench's
//! report has the structure and counts it must have whatever the timing (no verdict is
//! asserted: the times are qemu's, on a shared machine), and the errors are one line.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{assert_one_error_line, cross_build_aarch64, s, scratch};
use serde_json::Value;

const RUNNER: &str = "qemu-aarch64 -L /usr/aarch64-linux-gnu";
const SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// `rivet ARGS` with TMPDIR set to `tmp` (to see that nothing is left there).
fn rivet_in(tmp: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(args)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn assert_ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_empty_dir(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "rivet left {left:?}");
}

fn fresh_tmp(dir: &Path) -> PathBuf {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

fn runner_words() -> Value {
    serde_json::json!(["qemu-aarch64", "-L", SYSROOT])
}

/// Runs `binary ARGS` under qemu (with `RIVET_PROFILE=counts` when given): exit code and
/// standard output.
fn run_qemu(binary: &Path, args: &[&str], counts: Option<&Path>) -> (Option<i32>, Vec<u8>) {
    let mut command = Command::new("timeout");
    command
        .args(["120", "qemu-aarch64", "-L", SYSROOT])
        .arg(binary)
        .args(args)
        .stdin(Stdio::null());
    if let Some(counts) = counts {
        command.env("RIVET_PROFILE", counts);
    }
    let out = command
        .output()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)");
    (out.status.code(), out.stdout)
}

/// What a bench report must satisfy whatever the timing: the verdict is the interval's side
/// of 1.00, the exit code the verdict's, the ratio the median of the rounds' CPU ratios (or,
/// over layouts, the geometric mean of the layout pairs' medians), every round listed.
fn assert_consistent(summary: &Value, code: i32) {
    let f = |k: &str| summary[k].as_f64().unwrap();
    let (ratio, low, high) = (f("ratio"), f("ci_low"), f("ci_high"));
    let expected = if high < 1.0 {
        "faster"
    } else if low > 1.0 {
        "slower"
    } else {
        "no-difference"
    };
    assert_eq!(summary["verdict"], expected, "{summary:#}");
    assert_eq!(code, if expected == "slower" { 3 } else { 0 });
    assert!(low <= ratio && ratio <= high, "{summary:#}");
    let samples = summary["samples"].as_array().unwrap();
    assert_eq!(summary["rounds"].as_u64().unwrap(), samples.len() as u64);
    let ratios: Vec<(u64, f64)> = samples
        .iter()
        .map(|x| {
            let (a, b) = (
                x["a_cpu_s"].as_f64().unwrap(),
                x["b_cpu_s"].as_f64().unwrap(),
            );
            assert!(a > 0.0 && b > 0.0, "{x}");
            (x["pair"].as_u64().unwrap(), b / a)
        })
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    match summary["randomize_layout"].as_u64() {
        None => assert!(close(median(ratios.iter().map(|r| r.1).collect()), ratio)),
        Some(k) => {
            let logs: f64 = (0..k)
                .map(|p| median(ratios.iter().filter(|r| r.0 == p).map(|r| r.1).collect()).ln())
                .sum();
            assert!(close((logs / k as f64).exp(), ratio), "{summary:#}");
        }
    }
}

#[test]
fn auto_trains_optimizes_verifies_and_benches_aarch64_programs_under_the_runner() {
    for (src, cc, flags) in [
        ("switch_dense.c", "gcc", &["-O2", "-no-pie"][..]),
        ("virtual_calls.cpp", "clang", &["-O2", "-fPIE", "-pie"][..]),
    ] {
        let dir = scratch("aarch64-runner", &format!("auto-{src}-{cc}"));
        let tmp = fresh_tmp(&dir);
        let program = cross_build_aarch64(&dir, src, cc, flags, "prog");
        let out = dir.join("prog.fast");
        let stdout = assert_ok(
            &rivet_in(
                &tmp,
                &[
                    "auto",
                    s(&program),
                    "-o",
                    s(&out),
                    "--runner",
                    RUNNER,
                    // Through a shell with a redirection, and run directly (no {}).
                    "--train",
                    "{} > /dev/null",
                    "--bench",
                    "--bench-runs",
                    "6",
                    "--json",
                    "--",
                    "x",
                ],
            ),
            &format!("rivet auto {src} {cc}"),
        );
        let json: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(json["runner"], runner_words(), "{json:#}");
        assert_eq!(json["training"].as_array().unwrap().len(), 2, "{json:#}");
        assert!(
            json["instrumented"]["counters"].as_u64().unwrap() > 0,
            "{json:#}"
        );
        assert!(
            json["optimize"]["rewritten_with_profile"].as_u64().unwrap() > 0,
            "{json:#}"
        );
        // The bench ran the first training command, A and B under the runner.
        let bench = &json["bench"];
        assert_eq!(bench["runner"], runner_words());
        assert_eq!(bench["rounds"], 6);
        assert_eq!(
            bench["command"],
            serde_json::json!(["sh", "-c", "\"$1\" > /dev/null", "sh", "{}"])
        );
        assert_consistent(bench, if bench["verdict"] == "slower" { 3 } else { 0 });
        assert_empty_dir(&tmp);
        // The optimized program behaves as the original.
        let expected = run_qemu(&program, &[], None);
        assert_eq!(expected.0, Some(0), "{src} {cc}");
        assert_eq!(run_qemu(&out, &[], None), expected, "{src} {cc}");

        // The manual steps, with qemu written out: the same bytes (the programs are
        // deterministic, so the counts are the same).
        let inst = dir.join("manual.inst");
        assert_ok(
            &rivet_in(&tmp, &["instrument", s(&program), "-o", s(&inst)]),
            "instrument",
        );
        let (first, second) = (dir.join("1.counts"), dir.join("2.counts"));
        assert_eq!(run_qemu(&inst, &[], Some(&first)), expected);
        assert_eq!(run_qemu(&inst, &["x"], Some(&second)), expected);
        let counts = dir.join("manual.prof");
        assert_ok(
            &rivet_in(&tmp, &["merge", s(&first), s(&second), "-o", s(&counts)]),
            "merge",
        );
        let manual = dir.join("manual.opt");
        assert_ok(
            &rivet_in(
                &tmp,
                &[
                    "optimize",
                    s(&program),
                    "--profile",
                    s(&counts),
                    "-o",
                    s(&manual),
                ],
            ),
            "optimize",
        );
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&manual).unwrap(),
            "{src} {cc}: rivet auto --runner and the manual steps differ"
        );
    }
}

/// A small AArch64 server: `PROG READY_FILE` creates READY_FILE and serves until SIGTERM
/// (exit 0); `PROG client N` does N requests' worth of work and exits; `PROG linger` sleeps a
/// minute (a process a training leaves behind).
const SERVER_C: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static unsigned long work(unsigned long n) {
    unsigned long h = 1469598103934665603UL;
    for (unsigned long i = 0; i < n; i++) h = (h ^ i) * 1099511628211UL;
    return h;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "client") == 0) {
        printf("%lx\n", work(strtoul(argv[2], 0, 10)));
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "linger") == 0) {
        for (int i = 0; i < 600 && !stop; i++) usleep(100000);
        return 0;
    }
    if (argc != 2) return 2;
    signal(SIGTERM, on_term);
    int fd = open(argv[1], O_CREAT | O_WRONLY, 0600);
    if (fd < 0) return 1;
    close(fd);
    unsigned long served = 0;
    for (int i = 0; i < 600000 && !stop; i++) { served += work(100) & 1; usleep(1000); }
    return stop ? 0 : 3;
}
"#;

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(needle).then_some((pid, cmdline))
        })
        .collect()
}

#[test]
fn auto_trains_an_aarch64_server_under_the_runner_and_leaves_nothing_running() {
    let dir = scratch("aarch64-runner", "server");
    let tmp = fresh_tmp(&dir);
    let source = dir.join("server.c");
    std::fs::write(&source, SERVER_C).unwrap();
    let server = dir.join("server");
    let status = Command::new("aarch64-linux-gnu-gcc")
        .args([
            "-O2",
            "-g",
            "-Wl,--emit-relocs",
            "-fno-reorder-blocks-and-partition",
        ])
        .arg(&source)
        .arg("-o")
        .arg(&server)
        .status()
        .expect("aarch64-linux-gnu-gcc is required (apt-get install gcc-aarch64-linux-gnu)");
    assert!(status.success());
    let ready = dir.join("ready");
    let out = dir.join("server.fast");
    let result = rivet_in(
        &tmp,
        &[
            "auto",
            s(&server),
            "-o",
            s(&out),
            "--runner",
            RUNNER,
            // A training command that leaves the binary running in a session of its own,
            // outside its process group: found by its command line (its executable is qemu).
            "--train",
            "setsid {} linger > /dev/null 2>&1 & {} client 2000",
            "--server",
            &format!("{{}} {}", s(&ready)),
            "--ready",
            &format!("test -e {}", s(&ready)),
            "--ready-timeout",
            "60",
            "--load",
            "{} client 100000",
            "--timeout",
            "120",
            "--stop-timeout",
            "20",
        ],
    );
    let stray = processes_mentioning(&format!("{}/rivet-auto-", tmp.display()));
    let stdout = assert_ok(&result, "rivet auto --server --runner");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(stray.is_empty(), "left running: {stray:?}");
    assert!(stdout.contains("server: "), "{stdout}");
    assert!(
        stdout.contains(&format!("run under `{RUNNER}`")),
        "{stdout}"
    );
    // SIGTERM reached the emulated server, which exited by itself.
    assert!(!stderr.contains("was killed"), "{stderr}");
    assert!(
        stderr.contains("processes of the instrumented binary were still running"),
        "the lingering process was not found: {stderr}"
    );
    assert!(ready.exists());
    assert_empty_dir(&tmp);
    // The optimized program works.
    let run = Command::new("qemu-aarch64")
        .args(["-L", SYSROOT])
        .arg(&out)
        .args(["client", "10"])
        .output()
        .unwrap();
    let original = Command::new("qemu-aarch64")
        .args(["-L", SYSROOT])
        .arg(&server)
        .args(["client", "10"])
        .output()
        .unwrap();
    assert!(run.status.success() && run.stdout == original.stdout);
}

/// `rivet bench --json ARGS`: the report (checked by `assert_consistent`) and the exit code.
fn bench_json(tmp: &Path, args: &[&str]) -> Value {
    let mut all = vec!["bench", "--json"];
    all.extend_from_slice(args);
    let out = rivet_in(tmp, &all);
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 3)),
        "rivet {all:?} exited {code:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_consistent(&summary, code.unwrap());
    summary
}

#[test]
fn bench_compares_aarch64_binaries_under_the_runner() {
    let dir = scratch("aarch64-runner", "bench");
    let tmp = fresh_tmp(&dir);
    let program = cross_build_aarch64(&dir, "switch_dense.c", "clang", &["-O2"], "prog");
    let reversed = dir.join("reversed");
    assert_ok(
        &rivet_in(
            &tmp,
            &[
                "rewrite",
                s(&program),
                "-o",
                s(&reversed),
                "--layout",
                "reverse",
            ],
        ),
        "rivet rewrite",
    );

    // The binaries run directly under the runner (no {}).
    let summary = bench_json(
        &tmp,
        &[
            s(&program),
            s(&reversed),
            "--runner",
            RUNNER,
            "--runs",
            "6",
            "--",
            "x",
        ],
    );
    assert_eq!(summary["runner"], runner_words());
    assert_eq!(summary["rounds"], 6);
    let a_first: Vec<bool> = summary["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["a_first"].as_bool().unwrap())
        .collect();
    assert_eq!(a_first, [true, false, true, false, true, false]);

    // {} inside a shell command, over shuffled layouts of A: every layout is an AArch64
    // binary that the script {} stands for runs under the runner.
    let summary = bench_json(
        &tmp,
        &[
            s(&program),
            s(&reversed),
            "--runner",
            RUNNER,
            "--randomize-layout",
            "2",
            "--runs",
            "4",
            "--",
            "sh",
            "-c",
            "{} | wc -c",
        ],
    );
    let seeds = |side: &str| -> Vec<Option<u64>> {
        summary[side]["variants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["seed"].as_u64())
            .collect()
    };
    assert_eq!(seeds("a"), [Some(1), Some(2)]);
    // B is Rivet's output: two stack offsets of it, each run through a script of its own.
    assert_eq!(seeds("b"), [None, None]);
    let layouts = summary["b"]["layouts"].as_str().unwrap();
    assert!(layouts.contains("stack offsets"), "{layouts}");
    let pairs: Vec<u64> = summary["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["pair"].as_u64().unwrap())
        .collect();
    assert_eq!(pairs, [0, 1, 0, 1]);

    // The text report names the runner.
    let out = rivet_in(
        &tmp,
        &[
            "bench",
            s(&program),
            s(&program),
            "--runner",
            RUNNER,
            "--runs",
            "6",
            "--",
            "x",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(matches!(out.status.code(), Some(0 | 3)), "{text}");
    assert!(text.contains(&format!("\n  runner: {RUNNER}\n")), "{text}");
    assert_empty_dir(&tmp);
}

/// Whether this machine's kernel runs AArch64 programs by itself (a binfmt_misc emulator):
/// then nothing needs --runner.
fn kernel_runs(binary: &Path) -> bool {
    match Command::new(binary).stdout(Stdio::null()).status() {
        Ok(_) => true,
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(8), "{e}"); // ENOEXEC
            false
        }
    }
}

#[test]
fn errors_are_one_line_with_a_hint() {
    let dir = scratch("aarch64-runner", "errors");
    let program = &cross_build_aarch64(&dir, "switch_dense.c", "gcc", &["-O2"], "prog");
    let library = &cross_build_aarch64(
        &dir,
        "libcorpus_shared.cpp",
        "gcc",
        &["-O2", "-fPIC", "-shared"],
        "libcorpus_shared.so",
    );
    let tmp = fresh_tmp(&dir);
    let out = dir.join("out");
    let hint = "--runner 'qemu-aarch64 -L /usr/aarch64-linux-gnu'";

    // Without --runner: refused before anything runs, with the --runner to give; a command
    // with {} (which could name an emulator itself) fails with the same hint.
    let direct_auto = rivet_in(&tmp, &["auto", s(program), "-o", s(&out), "--", "x"]);
    let placeholder_auto = rivet_in(
        &tmp,
        &[
            "auto",
            s(program),
            "-o",
            s(&out),
            "--train",
            "{} > /dev/null",
        ],
    );
    let direct_bench = rivet_in(&tmp, &["bench", s(program), s(program), "--", "x"]);
    if kernel_runs(program) {
        // binfmt_misc has an emulator here: the programs just run.
        assert_ok(&placeholder_auto, "rivet auto without --runner, binfmt");
    } else {
        for result in [&direct_auto, &direct_bench] {
            assert_one_error_line(result, "is an AArch64 program, which this x86-64 machine");
            assert_one_error_line(result, hint);
        }
        assert_one_error_line(&placeholder_auto, "exited with status");
        assert_one_error_line(&placeholder_auto, hint);
    }

    // The runner's own errors, before anything runs.
    let auto = |runner: &str| {
        rivet_in(
            &tmp,
            &[
                "auto",
                s(program),
                "-o",
                s(&out),
                "--runner",
                runner,
                "--train",
                "{}",
            ],
        )
    };
    assert_one_error_line(&auto(""), "--runner is empty");
    assert_one_error_line(&auto("  "), "--runner is empty");
    assert_one_error_line(
        &auto("qemu-aarch64 -L '/usr"),
        "a single quote is not closed",
    );
    assert_one_error_line(
        &auto("qemu-nonexistent -L /x"),
        "qemu-nonexistent is not a program on PATH",
    );
    assert_one_error_line(&auto("qemu-nonexistent"), "apt-get install qemu-user");
    assert_one_error_line(&auto("/nonexistent/qemu"), "no such executable file");
    // qemu missing from PATH (the programs are named by absolute path).
    let no_qemu = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args([
            "bench",
            s(program),
            s(program),
            "--runner",
            RUNNER,
            "--",
            "x",
        ])
        .env("PATH", s(&dir))
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_one_error_line(&no_qemu, "qemu-aarch64 is not a program on PATH");
    assert_one_error_line(&no_qemu, "apt-get install qemu-user");
    // Cachegrind would count qemu.
    assert_one_error_line(
        &rivet_in(
            &tmp,
            &[
                "bench",
                s(program),
                s(program),
                "--runner",
                RUNNER,
                "--cachegrind",
                "--",
                "x",
            ],
        ),
        "rivet simulate",
    );
    // A shared library is loaded by the commands' programs, not run.
    assert_one_error_line(
        &rivet_in(
            &tmp,
            &[
                "auto",
                s(library),
                "-o",
                s(&out),
                "--runner",
                RUNNER,
                "--train",
                "LD_LIBRARY_PATH=$(dirname {}) true",
            ],
        ),
        "is a shared library",
    );
    assert!(!out.exists());
    assert_empty_dir(&tmp);

    // The help says how.
    for command in ["auto", "bench"] {
        let help = rivet_in(&tmp, &[command, "--help"]);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(help.status.success());
        assert!(text.contains("--runner <PREFIX>"), "{command}: {text}");
        assert!(text.contains(RUNNER), "{command}: {text}");
    }
}
