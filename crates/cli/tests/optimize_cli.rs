//! `rivet optimize` as a user meets it: what it writes (hot text symbols, only the profiled
//! functions moved, the function filters), its summaries, llvm-bolt's spellings, and one clear
//! error line for every bad request, with nothing written.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    assert_one_error_line, build_instrument_program, instrument_and_train, rivet, s, scratch,
};

/// Builds counts.c, profiles `switch 1000` with Rivet's instrumentation; returns (binary,
/// counter file).
fn profiled_program(dir: &Path) -> (PathBuf, PathBuf) {
    let bin = build_instrument_program(dir, "counts.c", "gcc", &["-O2"], "counts");
    let counts = instrument_and_train(&bin, dir, &[&["switch", "1000"]]);
    (bin, counts)
}

/// (address, size, name) of the defined symbols of `bin`, from `nm`.
fn symbols(bin: &Path) -> Vec<(u64, String)> {
    let out = Command::new("nm")
        .arg(bin)
        .output()
        .expect("nm is required (apt-get install binutils)");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let _kind = f.next()?;
            Some((addr, f.next()?.to_string()))
        })
        .collect()
}

fn symbol(bin: &Path, name: &str) -> Option<u64> {
    symbols(bin)
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(a, _)| a)
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn optimizes_only_profiled_functions_and_marks_the_hot_text() {
    let dir = scratch("optimize_cli", "profiled");
    let (bin, counts) = profiled_program(&dir);
    let opt = dir.join("counts.opt");
    let out = rivet(&[
        "optimize",
        s(&bin),
        "--profile",
        s(&counts),
        "-o",
        s(&opt),
        "--verify",
        "--json",
    ]);
    let summary = json(&out);
    let rewritten = summary["rewritten"].as_u64().unwrap();
    let profiled = summary["profile"]["profiled_functions"].as_u64().unwrap();
    // Every function that ran is moved (all of them can be); the others stay where they were.
    assert!(rewritten >= 2 && rewritten == profiled, "{summary}");
    assert!(
        rewritten < summary["functions"].as_u64().unwrap(),
        "{summary}"
    );
    assert_eq!(summary["profile"]["matched_share"].as_f64(), Some(1.0));
    let before = &summary["dyno_stats"]["before"];
    let after = &summary["dyno_stats"]["after"];
    assert_eq!(before["function calls"], after["function calls"]);
    assert!(after["taken branches"].as_u64() <= before["taken branches"].as_u64());

    // The input's debug info and symbol table were replaced: their old contents are not
    // carried along (the headers stay, renamed and empty, so section indices hold).
    let sections = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(&opt)
        .output()
        .expect("readelf is required (apt-get install binutils)");
    let sections = String::from_utf8_lossy(&sections.stdout).into_owned();
    for name in [".rivet.orig.debug_info", ".rivet.orig.symtab"] {
        let line = sections
            .lines()
            .find(|l| l.contains(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name}: {sections}"));
        let size = line.split_whitespace().nth(5).unwrap();
        assert_eq!(u64::from_str_radix(size, 16), Ok(0), "{line}");
    }
    assert!(sections.contains(" .debug_info "), "{sections}");

    // The hot text is marked, main is in it, and the program still works.
    let hot_start = symbol(&opt, "__hot_start").expect("__hot_start");
    let hot_end = symbol(&opt, "__hot_end").expect("__hot_end");
    let main = symbol(&opt, "main").unwrap();
    assert!(hot_start < hot_end && (hot_start..hot_end).contains(&main));
    assert_eq!(hot_start % 64, 0);
    let a = Command::new(&bin).args(["switch", "777"]).output().unwrap();
    let b = Command::new(&opt).args(["switch", "777"]).output().unwrap();
    assert_eq!((a.status.code(), &a.stdout), (b.status.code(), &b.stdout));

    // For huge pages: both ends on 2 MiB boundaries.
    let huge = dir.join("counts.huge");
    let out = rivet(&[
        "optimize",
        s(&bin),
        "--profile",
        s(&counts),
        "-o",
        s(&huge),
        "--hot-text",
        "--align-functions",
        "64",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hot_start = symbol(&huge, "__hot_start").unwrap();
    let hot_end = symbol(&huge, "__hot_end").unwrap();
    assert_eq!((hot_start % (2 << 20), hot_end % (2 << 20)), (0, 0));
    assert_eq!(symbol(&huge, "main").unwrap() % 64, 0);
    let c = Command::new(&huge)
        .args(["switch", "777"])
        .output()
        .unwrap();
    assert_eq!(c.stdout, a.stdout);

    // A hot text offset moves every hot function by exactly that much and nothing else.
    let hot_symbols = |bin: &Path| -> Vec<(u64, String)> {
        let (start, end) = (
            symbol(bin, "__hot_start").unwrap(),
            symbol(bin, "__hot_end").unwrap(),
        );
        let mut hot: Vec<_> = symbols(bin)
            .into_iter()
            .filter(|(a, n)| (start..end).contains(a) && !n.starts_with("__hot"))
            .collect();
        hot.sort();
        hot
    };
    let shifted = dir.join("counts.shifted");
    let out = rivet(&[
        "optimize",
        s(&bin),
        "--profile",
        s(&counts),
        "-o",
        s(&shifted),
        "--hot-text-offset",
        "1216",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (plain, moved) = (hot_symbols(&opt), hot_symbols(&shifted));
    assert!(!plain.is_empty());
    assert_eq!(plain.len(), moved.len());
    for ((a, n), (b, m)) in plain.iter().zip(&moved) {
        assert_eq!((n, *b), (m, a + 1216), "{plain:?} vs {moved:?}");
    }
    assert_eq!(
        symbol(&shifted, "__hot_start"),
        Some(symbol(&opt, "__hot_start").unwrap() + 1216)
    );
    let d = Command::new(&shifted)
        .args(["switch", "777"])
        .output()
        .unwrap();
    assert_eq!((d.status.code(), &d.stdout), (a.status.code(), &a.stdout));
}

#[test]
fn function_filters_select_what_moves() {
    let dir = scratch("optimize_cli", "filters");
    let (bin, counts) = profiled_program(&dir);
    let run = |extra: &[&str]| {
        let out_path = dir.join("filtered");
        let _ = std::fs::remove_file(&out_path);
        let mut args = vec![
            "optimize",
            s(&bin),
            "--profile",
            s(&counts),
            "-o",
            s(&out_path),
        ];
        args.extend_from_slice(extra);
        args.push("--json");
        let summary = json(&rivet(&args));
        let main_moved = symbol(&out_path, "main") != symbol(&bin, "main");
        (summary["rewritten"].as_u64().unwrap(), main_moved)
    };
    let (all, main_moved) = run(&[]);
    assert!(all >= 2 && main_moved);
    // A name, and a regular expression matched against the whole name.
    assert_eq!(run(&["--funcs", "main"]), (1, true));
    assert_eq!(run(&["-funcs=ma.n"]), (1, true));
    assert_eq!(run(&["--funcs", "mai"]), (0, false));
    let (skipped, main_moved) = run(&["--skip-funcs", "main"]);
    assert_eq!((skipped, main_moved), (all - 1, false));
}

#[test]
fn bolt_recipes_work_with_warnings_for_what_rivet_lacks() {
    let dir = scratch("optimize_cli", "bolt");
    let (bin, counts) = profiled_program(&dir);
    let fdata = dir.join("counts.fdata");
    let out = rivet(&["merge", s(&counts), "-o", s(&fdata), "--format", "fdata"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let opt = dir.join("counts.bolt");
    let data = format!("-data={}", s(&fdata));
    let out = rivet(&[
        "optimize",
        s(&bin),
        "-o",
        s(&opt),
        &data,
        "-reorder-blocks=ext-tsp",
        "-reorder-functions=hfsort",
        "-split-functions",
        "-split-all-cold",
        "-split-eh",
        "-dyno-stats",
        "-frame-opt=hot",
        "-peepholes=tailcall-traps",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("taken conditional branches"), "{stdout}");
    assert!(stdout.contains("optimized "), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(warnings[0].starts_with("rivet: warning: ignoring llvm-bolt option -frame-opt=hot"));
    assert!(warnings[1].contains("--peepholes=tailcall-traps is not implemented"));
    let a = Command::new(&bin).args(["switch", "99"]).output().unwrap();
    let b = Command::new(&opt).args(["switch", "99"]).output().unwrap();
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn bad_requests_get_one_error_line_and_write_nothing() {
    let dir = scratch("optimize_cli", "errors");
    let (bin, counts) = profiled_program(&dir);
    let out_path = dir.join("never");
    let other = build_instrument_program(&dir, "counts.c", "gcc", &["-O1"], "other");
    let order = dir.join("missing-order.txt");
    let nope = dir.join("nope");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--profile", s(&nope)], "cannot read"),
        (
            vec!["--profile", s(&counts), "--funcs", "("],
            "regular expression",
        ),
        (
            vec!["--profile", s(&counts), "--reorder-functions", "user"],
            "needs a function list",
        ),
        (
            vec![
                "--profile",
                s(&counts),
                "--reorder-functions",
                "user",
                "--function-order",
                s(&order),
            ],
            "cannot read",
        ),
        (
            vec!["--profile", s(&counts), "--align-functions", "24"],
            "power of two",
        ),
        (
            vec!["--profile", s(&counts), "--hot-text-offset", "100"],
            "not a multiple of 64",
        ),
        (
            vec!["--profile", s(&counts), "--cache-set-padding", "100"],
            "--cache-set-padding 100 is not a multiple of 16",
        ),
        (
            vec![
                "--profile",
                s(&counts),
                "--align-blocks",
                "--block-alignment",
                "32",
            ],
            "--block-alignment 32",
        ),
    ];
    for (extra, expect) in cases {
        let mut args = vec!["optimize", s(&bin), "-o", s(&out_path)];
        args.extend_from_slice(&extra);
        let out = rivet(&args);
        assert_one_error_line(&out, expect);
        assert!(!out_path.exists(), "{extra:?} wrote an output");
    }
    // A profile of another build.
    let out = rivet(&[
        "optimize",
        s(&other),
        "-o",
        s(&out_path),
        "--profile",
        s(&counts),
    ]);
    assert_one_error_line(&out, "another build");
    assert!(!out_path.exists());
    // The input as the output.
    let out = rivet(&["optimize", s(&bin), "-o", s(&bin), "--profile", s(&counts)]);
    assert_one_error_line(&out, "is the input");
    // A directory as the output: refused before any work, the directory left as it was.
    let out_dir = dir.join("a-directory");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = rivet(&[
        "optimize",
        s(&bin),
        "-o",
        s(&out_dir),
        "--profile",
        s(&counts),
    ]);
    assert_one_error_line(&out, "is a directory");
    assert_eq!(std::fs::read_dir(&out_dir).unwrap().count(), 0);
    // No leftover temporary files.
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".rivet-"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn function_alignment_padding_can_be_capped_like_bolts() {
    let dir = scratch("optimize_cli", "align");
    let (bin, counts) = profiled_program(&dir);
    let hot_functions = |out: &Path| -> Vec<u64> {
        let hot = (
            symbol(out, "__hot_start").unwrap(),
            symbol(out, "__hot_end").unwrap(),
        );
        symbols(out)
            .into_iter()
            .filter(|(a, n)| (hot.0..hot.1).contains(a) && !n.starts_with("__hot"))
            .map(|(a, _)| a)
            .collect()
    };
    let always = dir.join("always");
    let capped = dir.join("capped");
    for (out, extra) in [
        (&always, &["-align-functions=64"][..]),
        (
            &capped,
            &["-align-functions=64", "-align-functions-max-bytes=8"],
        ),
    ] {
        // Without the cache-set balancing, whose padding could land a capped function on a
        // multiple of 64 by itself.
        let mut args = vec![
            "optimize",
            s(&bin),
            "--profile",
            s(&counts),
            "-o",
            s(out),
            "--cache-set-padding=0",
        ];
        args.extend_from_slice(extra);
        let run = rivet(&args);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let always = hot_functions(&always);
    assert!(
        always.len() >= 2 && always.iter().all(|a| a % 64 == 0),
        "{always:x?}"
    );
    // Capped: still on 16-byte boundaries, and some function was not worth 9+ bytes of padding.
    let capped = hot_functions(&capped);
    assert!(capped.iter().all(|a| a % 16 == 0), "{capped:x?}");
    assert!(capped.iter().any(|a| a % 64 != 0), "{capped:x?}");
}

#[test]
fn hot_loop_heads_are_aligned_by_default_and_can_be_left_unaligned() {
    let dir = scratch("optimize_cli", "align_blocks");
    let (bin, counts) = profiled_program(&dir);
    let optimize = |name: &str, before_binary: &[&str], after: &[&str]| {
        let out = dir.join(name);
        let mut args = vec!["optimize"];
        args.extend_from_slice(before_binary);
        args.extend_from_slice(&[s(&bin), "--profile", s(&counts), "-o", s(&out), "--json"]);
        args.extend_from_slice(after);
        let summary = json(&rivet(&args));
        let a = Command::new(&bin).args(["switch", "99"]).output().unwrap();
        let b = Command::new(&out).args(["switch", "99"]).output().unwrap();
        assert_eq!(a.stdout, b.stdout, "{name}");
        (
            std::fs::read(&out).unwrap(),
            summary["aligned_blocks"]["all"].as_u64().unwrap(),
        )
    };
    let (default, aligned) = optimize("default", &[], &[]);
    assert!(aligned > 0, "the training loop's head is not aligned");
    // A switch written before the binary does not take the binary for its value.
    let (asked, asked_aligned) = optimize("asked", &["--align-blocks"], &[]);
    assert_eq!((asked == default, asked_aligned), (true, aligned));
    let (off, off_aligned) = optimize("off", &[], &["--align-blocks=false"]);
    assert_eq!(off_aligned, 0);
    assert_ne!(off, default);
    // BOLT's spelling turns it off too.
    let (bolt_off, _) = optimize("bolt_off", &[], &["-align-blocks=0"]);
    assert_eq!(bolt_off, off);
    // With functions aligned to 8, blocks follow them down instead of failing.
    let (_, small) = optimize("small", &[], &["--align-functions", "8"]);
    assert!(small > 0);
}

/// `--plt`: calls and tail calls into PLT stubs go through the stubs' GOT slots instead,
/// and the program prints the same with lazy binding and with `LD_BIND_NOW`.
#[test]
fn plt_calls_go_through_the_got_and_behave_the_same() {
    let dir = scratch("optimize_cli", "plt");
    let bin = build_instrument_program(&dir, "libcalls.c", "gcc", &["-O2"], "libcalls");
    let counts = instrument_and_train(&bin, &dir, &[&["2000"]]);
    let run = |b: &Path, bind_now: bool| {
        let mut c = Command::new(b);
        c.arg("3000").env_remove("LD_BIND_NOW");
        if bind_now {
            c.env("LD_BIND_NOW", "1");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{} failed", b.display());
        out.stdout
    };
    let expected = run(&bin, false);
    let mut via_got = Vec::new();
    for plt in ["none", "hot", "all"] {
        let out = dir.join(format!("libcalls.{plt}"));
        let summary = json(&rivet(&[
            "optimize",
            s(&bin),
            "--profile",
            s(&counts),
            "-o",
            s(&out),
            "--verify",
            "--json",
            &format!("--plt={plt}"),
        ]));
        via_got.push(summary["calls_via_got"].as_u64().unwrap());
        // The dyno stats count the PLT calls made through the GOT as indirect calls.
        let row = |when: &str, name: &str| summary["dyno_stats"][when][name].as_u64().unwrap();
        let plt_before = row("before", "PLT calls");
        assert!(plt_before > 2000, "{plt_before}");
        let moved = plt_before - row("after", "PLT calls");
        assert_eq!(
            row("after", "indirect calls") - row("before", "indirect calls"),
            moved
        );
        assert_eq!(moved == 0, plt == "none", "--plt={plt}: {moved}");
        for bind_now in [false, true] {
            assert_eq!(
                run(&out, bind_now),
                expected,
                "--plt={plt}, LD_BIND_NOW: {bind_now}"
            );
        }
        // Checked again after the fact, from the output's block table alone.
        let verify = rivet(&["verify", s(&bin), s(&out)]);
        assert!(
            verify.status.success(),
            "--plt={plt}: {}",
            String::from_utf8_lossy(&verify.stderr)
        );
        // The output's own code says the same: an indirect call or jump through a GOT slot
        // wherever --plt applies.
        let listing = Command::new("objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(&out)
            .output()
            .expect("objdump is required (apt-get install binutils)");
        let listing = String::from_utf8_lossy(&listing.stdout);
        let resize = listing
            .split("\n\n")
            .find(|f| f.contains("<resize>:"))
            .expect("resize in the output");
        let through_got = resize.contains("jmp    *") && resize.contains("call   *");
        assert_eq!(through_got, plt != "none", "--plt={plt}:\n{resize}");
    }
    // none < hot <= all: cold code keeps its PLT calls under `hot`.
    assert_eq!(via_got[0], 0);
    assert!(via_got[1] >= 4, "{via_got:?}");
    assert!(via_got[2] >= via_got[1], "{via_got:?}");
    // BOLT's spelling.
    let bolt = dir.join("libcalls.bolt");
    let summary = json(&rivet(&[
        "optimize",
        s(&bin),
        "-data",
        s(&counts),
        "-o",
        s(&bolt),
        "-plt=hot",
        "--json",
    ]));
    assert_eq!(summary["calls_via_got"].as_u64(), Some(via_got[1]));
}

#[test]
fn a_partly_matching_profile_gets_a_warning_with_its_likely_cause() {
    let dir = scratch("optimize_cli", "partial");
    let (bin, counts) = profiled_program(&dir);
    let optimize = |input: &Path, output: &str, extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .args(["optimize", s(input), "--profile", s(&counts), "-o"])
            .arg(dir.join(output))
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        stderr
            .lines()
            .filter(|l| l.contains("of the counts in"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    // The build the profile was taken on: no warning.
    assert_eq!(optimize(&bin, "same.opt", &[]), Vec::<String>::new());

    // The same build stripped: its functions have no names to match, and the warning says so.
    let stripped = dir.join("counts.stripped");
    let status = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&bin)
        .status()
        .expect("strip is required (apt-get install binutils)");
    assert!(status.success());
    let warned = optimize(&stripped, "stripped.opt", &[]);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with("rivet: warning: only ")
            && warned[0].contains("not in the binary")
            && warned[0].contains("no symbol table (stripped)")
            && warned[0].contains("optimize the unstripped build"),
        "{}",
        warned[0]
    );
    // What it writes still behaves as the original.
    let expected = Command::new(&bin).args(["switch", "777"]).output().unwrap();
    let got = Command::new(dir.join("stripped.opt"))
        .args(["switch", "777"])
        .output()
        .unwrap();
    assert_eq!(got.stdout, expected.stdout);

    // Another build of the same source (-O1 instead of -O2), forced: the functions are there
    // but the profile's branches no longer fit their code.
    let other = build_instrument_program(&dir, "counts.c", "gcc", &["-O1"], "counts-O1");
    let warned = optimize(&other, "other.opt", &["--force"]);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("fit no block or edge")
            && warned[0].contains("the code changed since the profile was taken"),
        "{}",
        warned[0]
    );
}

/// Release builds are stripped, often by binutils (`strip`, `objcopy --strip-debug`, as
/// Debian's packaging does), which writes the program header table right after the ELF header
/// whatever the input said. The output keeps its table there, so a stripped output runs as the
/// original does (llvm-bolt's outputs crash at startup once stripped that way).
#[test]
fn the_output_can_be_stripped_with_binutils() {
    let dir = scratch("optimize_cli", "strip");
    let (bin, counts) = profiled_program(&dir);
    let opt = dir.join("counts.opt");
    let out = rivet(&["optimize", s(&bin), "--profile", s(&counts), "-o", s(&opt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header = Command::new("readelf")
        .args(["-h", "-W"])
        .arg(&opt)
        .output()
        .expect("readelf is required (apt-get install binutils)");
    let header = String::from_utf8_lossy(&header.stdout).into_owned();
    assert!(
        header.contains("Start of program headers:          64 (bytes into file)"),
        "{header}"
    );
    let expected = Command::new(&bin).args(["switch", "777"]).output().unwrap();
    for (tool, args) in [
        ("strip", &["-o"][..]),
        ("strip", &["--strip-debug", "-o"][..]),
        ("objcopy", &["--strip-debug"][..]),
    ] {
        let stripped = dir.join(format!("counts.{tool}.{}", args.len()));
        let mut command = Command::new(tool);
        command.args(args);
        // `objcopy IN OUT`; `strip -o OUT IN`.
        if tool == "objcopy" {
            command.arg(&opt).arg(&stripped);
        } else {
            command.arg(&stripped).arg(&opt);
        }
        let run = command
            .output()
            .unwrap_or_else(|e| panic!("{tool} is required (apt-get install binutils): {e}"));
        assert!(
            run.status.success() && run.stderr.is_empty(),
            "{tool} {args:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let got = Command::new(&stripped)
            .args(["switch", "777"])
            .output()
            .unwrap();
        assert!(got.status.success(), "{tool} {args:?}: {got:?}");
        assert_eq!(got.stdout, expected.stdout, "{tool} {args:?}");
    }
}
