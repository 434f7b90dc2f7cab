//! `rivet auto` end to end on real programs: Lua and SQLite trained by commands (the same
//! binary as the manual instrument / merge / optimize steps), redis-server trained as a server
//! (started, probed, loaded, stopped: no process left behind, and the optimized server works),
//! and the one-line errors (no relocations, failing or misdirected training commands).

mod common;

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_one_error_line, real_program, repo_root, rivet, s, scratch};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// `rivet ARGS` with TMPDIR set to `tmp` (to see that `auto` leaves nothing there).
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
    assert!(left.is_empty(), "rivet auto left {left:?}");
}

/// The functions named in an fdata profile (branch sources and targets).
fn fdata_functions(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t.len() == 8).then(|| [t[1].to_string(), t[4].to_string()])
        })
        .flatten()
        .collect()
}

fn lua_script(name: &str) -> String {
    s(&repo_root().join("bench/lua").join(name)).to_string()
}

/// The manual steps: instrument, run each workload with its own counter file, merge.
fn manual_profile(original: &Path, dir: &Path, workloads: &[&[&str]], merged: &Path) {
    let inst = dir.join("manual.inst");
    assert_ok(
        &rivet(&["instrument", s(original), "-o", s(&inst)]),
        "rivet instrument",
    );
    let mut counts = Vec::new();
    for (i, args) in workloads.iter().enumerate() {
        let profile = dir.join(format!("manual-{i}.counts"));
        assert_eq!(args[0], "{}");
        let status = Command::new(&inst)
            .args(&args[1..])
            .env("RIVET_PROFILE", &profile)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{args:?}");
        counts.push(profile);
    }
    let mut merge = vec!["merge".to_string()];
    merge.extend(counts.iter().map(|p| s(p).to_string()));
    merge.extend(["-o".to_string(), s(merged).to_string()]);
    let merge: Vec<&str> = merge.iter().map(String::as_str).collect();
    assert_ok(&rivet(&merge), "rivet merge");
}

#[test]
fn lua_auto_matches_the_manual_steps() {
    let dir = scratch("auto", "lua");
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let lua = real_program("lua-gcc");
    let fannkuch = format!("{{}} {} 8", lua_script("fannkuch.lua"));
    let strings = format!("{{}} {} 20000", lua_script("strings.lua"));

    // Two training commands: the output behaves like Lua, and optimizes what the same
    // manual runs profile: the same functions (the SQLite test below compares bytes).
    let out = dir.join("lua.auto");
    let auto_profile = dir.join("auto.fdata");
    let stdout = assert_ok(
        &rivet_in(
            &tmp,
            &[
                "auto",
                s(lua),
                "-o",
                s(&out),
                "--train",
                &fannkuch,
                "--train",
                &strings,
                "--profile-out",
                s(&auto_profile),
            ],
        ),
        "rivet auto",
    );
    assert!(
        stdout.contains("training 1/2") && stdout.contains("training 2/2"),
        "{stdout}"
    );
    assert!(stdout.contains("taken branches"), "{stdout}");
    let moved: usize = stdout
        .split("optimized ")
        .nth(1)
        .and_then(|l| l.split(": ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no optimized-functions count in {stdout}"));
    assert!(moved > 100, "{stdout}");
    assert_empty_dir(&tmp);
    let check = Command::new("bash")
        .arg(repo_root().join("scripts/check-lua.sh"))
        .args([&out, lua])
        .output()
        .unwrap();
    assert_ok(&check, "scripts/check-lua.sh on the auto output");

    let manual = dir.join("manual.fdata");
    let f = lua_script("fannkuch.lua");
    let st = lua_script("strings.lua");
    manual_profile(
        lua,
        &dir,
        &[&["{}", &f, "8"], &["{}", &st, "20000"]],
        &manual,
    );
    assert_eq!(fdata_functions(&auto_profile), fdata_functions(&manual));
}

#[test]
fn sqlite_auto_with_a_redirection_equals_the_manual_steps() {
    let dir = scratch("auto", "sqlite3");
    let sqlite = real_program("sqlite3-gcc");
    let workload = repo_root().join("bench/sqlite/workload.sql");
    let out = dir.join("sqlite3.auto");
    let stdout = assert_ok(
        &rivet(&[
            "auto",
            s(sqlite),
            "-o",
            s(&out),
            "--train",
            &format!("{{}} -bail :memory: < {} | wc -c", s(&workload)),
            "--json",
        ]),
        "rivet auto",
    );
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(
        json["optimize"]["rewritten_with_profile"].as_u64().unwrap() > 100,
        "{json}"
    );
    assert_eq!(json["training"].as_array().unwrap().len(), 1);

    let run = |bin: &Path| {
        Command::new(bin)
            .args(["-bail", ":memory:"])
            .stdin(std::fs::File::open(&workload).unwrap())
            .output()
            .unwrap()
    };
    let (a, b) = (run(sqlite), run(&out));
    assert!(a.status.success() && b.status.success());
    assert!(
        a.stdout == b.stdout,
        "the optimized shell prints something else"
    );

    // The manual steps (the shell's work is deterministic): same bytes.
    let inst = dir.join("sqlite3.inst");
    assert_ok(
        &rivet(&["instrument", s(sqlite), "-o", s(&inst)]),
        "instrument",
    );
    let counts = dir.join("sqlite3.counts");
    let status = Command::new(&inst)
        .args(["-bail", ":memory:"])
        .stdin(std::fs::File::open(&workload).unwrap())
        .stdout(Stdio::null())
        .env("RIVET_PROFILE", &counts)
        .status()
        .unwrap();
    assert!(status.success());
    let prof = dir.join("sqlite3.prof");
    assert_ok(&rivet(&["merge", s(&counts), "-o", s(&prof)]), "merge");
    let manual = dir.join("sqlite3.manual");
    assert_ok(
        &rivet(&[
            "optimize",
            s(sqlite),
            "--profile",
            s(&prof),
            "-o",
            s(&manual),
        ]),
        "optimize",
    );
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&manual).unwrap());
}

/// A process group killed when dropped (the test's own server, even when an assert fails).
struct GroupGuard(std::process::Child);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

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
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            (cmdline.contains(needle) || exe.contains(needle)).then_some((pid, cmdline))
        })
        .collect()
}

fn redis_cli(cli: &Path, port: u16, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("10")
        .arg(cli)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn redis_server_auto_leaves_no_process_and_a_working_server() {
    let dir = scratch("auto", "redis");
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let server = real_program("redis-gcc");
    let cli = real_program("redis-cli");
    let bench = real_program("redis-benchmark");
    let port = free_port();
    let out = dir.join("redis-server.auto");
    let port_arg = format!("--port {port}");
    let result = rivet_in(
        &tmp,
        &[
            "auto",
            s(server),
            "-o",
            s(&out),
            "--server",
            &format!("{{}} {port_arg} --save '' --appendonly no --bind 127.0.0.1"),
            "--ready",
            &format!("{} -h 127.0.0.1 -p {port} ping", s(cli)),
            "--ready-timeout",
            "30",
            "--load",
            &format!("{} -h 127.0.0.1 -p {port} -n 20000 -q -t set,get", s(bench)),
            "--timeout",
            "120",
            "--stop-timeout",
            "10",
        ],
    );
    // Whatever happened, nothing of the training may be left running.
    let stray = processes_mentioning(&port_arg);
    // This run's work directory only (TMPDIR is `tmp`): the other tests of this file run
    // `rivet auto` at the same time, in work directories of their own.
    let stray_instrumented = processes_mentioning(&format!("{}/rivet-auto-", tmp.display()));
    let stdout = assert_ok(&result, "rivet auto --server");
    assert!(stray.is_empty(), "left running: {stray:?}");
    assert!(
        stray_instrumented.is_empty(),
        "left running: {stray_instrumented:?}"
    );
    assert!(stdout.contains("server: "), "{stdout}");
    assert!(stdout.contains("taken branches"), "{stdout}");
    assert!(
        !String::from_utf8_lossy(&result.stderr).contains("was killed"),
        "the server did not stop on SIGTERM: {}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_empty_dir(&tmp);

    // The optimized server starts, answers, and stops.
    let port = free_port();
    let child = Command::new(&out)
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--bind", "127.0.0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut guard = GroupGuard(child);
    let start = Instant::now();
    while redis_cli(cli, port, &["ping"]) != "PONG" {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the optimized redis-server does not answer PING"
        );
        assert!(
            guard.0.try_wait().unwrap().is_none(),
            "the optimized server exited"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(redis_cli(cli, port, &["set", "rivet", "auto"]), "OK");
    assert_eq!(redis_cli(cli, port, &["get", "rivet"]), "auto");
    assert_eq!(redis_cli(cli, port, &["incrby", "n", "41"]), "41");
    assert_eq!(redis_cli(cli, port, &["rpush", "l", "a", "b", "c"]), "3");
    assert_eq!(redis_cli(cli, port, &["lrange", "l", "0", "-1"]), "a\nb\nc");
    let _ = killpg(Pid::from_raw(guard.0.id() as i32), Signal::SIGTERM);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = guard.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "the optimized server exited with {status}"
    );
}

#[test]
fn errors_are_one_line_with_a_hint() {
    let dir = scratch("auto", "errors");
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let lua = real_program("lua-gcc");
    let out = dir.join("out");
    let auto = |extra: &[&str]| {
        let mut args = vec!["auto", s(lua), "-o", s(&out)];
        args.extend_from_slice(extra);
        rivet_in(&tmp, &args)
    };

    // No relocations: the relink hint, before anything runs.
    let norelocs = real_program("lua-gcc-norelocs");
    let result = rivet_in(
        &tmp,
        &["auto", s(norelocs), "-o", s(&out), "--train", "{} -v"],
    );
    assert_one_error_line(&result, "cannot be instrumented");
    assert!(String::from_utf8_lossy(&result.stderr).contains("-Wl,--emit-relocs"));

    // A failing training command: its status and its last stderr line.
    let result = auto(&["--train", "{} -e 'error(\"boom\")'"]);
    assert_one_error_line(&result, "exited with status 1");
    assert!(String::from_utf8_lossy(&result.stderr).contains("boom"));

    // Without {}, the command is the binary's arguments: `lua echo hi` fails, and says so.
    let result = auto(&["--train", "echo hi"]);
    assert_one_error_line(&result, "training command 1 `echo hi`");
    assert!(String::from_utf8_lossy(&result.stderr).contains("put {} where the binary goes"));

    // A command that never runs the binary.
    let result = auto(&["--train", "true {}"]);
    assert_one_error_line(&result, "never ran");

    // Bounded: a command that does not end is killed.
    let result = auto(&["--train", "{} -e 'while true do end'", "--timeout", "1"]);
    assert_one_error_line(&result, "did not finish within");
    assert!(processes_mentioning("while true do end").is_empty());

    // Usage errors.
    assert_one_error_line(&auto(&[]), "no training command");
    assert_one_error_line(&auto(&["--load", "true"]), "need --server");
    assert_one_error_line(&auto(&["--server", "{}"]), "needs a --load");
    assert_one_error_line(
        &auto(&["--server", "{}", "--load", "true", "--bench"]),
        "--bench needs a training command",
    );
    // A server that dies at once.
    assert_one_error_line(
        &auto(&["--server", "{} -e 'os.exit(3)'", "--load", "true"]),
        "exited with status 3",
    );
    assert!(!out.exists());
    assert_empty_dir(&tmp);
}
