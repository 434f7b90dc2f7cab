//! Machine code that breaks an assumption a binary analysis could make, from `tests/unusual`:
//! each program is built, modelled and rewritten, and the rewritten program must print what
//! the original prints. The first two were found in libLLVM (Debian's libLLVM.so.19.1, optimized
//! in place from perf samples of clang), whose rewritten copy crashed clang before the fixes;
//! the short tail calls and the byte-indexed dispatch in Debian's python3.11, where 50
//! functions did not fit in place and the interpreter loop could not be rewritten; the late
//! line rows in PostgreSQL, whose `--verify` failed on a `.cold` part that had lost its rows;
//! PostgreSQL's cold parts that jump to their function's unreachable end, and its tree walkers,
//! whose tail calls a neighbour's jump table made look unresolvable (all left alone before).

mod common;

use common::{instrument_and_train, rivet, s, scratch};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/unusual")
        .join(name)
}

/// Builds `sources` with `compiler -O2 -g` and `flags` into `dir/name`.
fn build(dir: &Path, compiler: &str, sources: &[&str], flags: &[&str], name: &str) -> PathBuf {
    let out = dir.join(name);
    let status = Command::new(compiler)
        .args(["-O2", "-g"])
        .args(flags)
        .args(sources.iter().map(|f| source(f)))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("{compiler} is required (scripts/test.sh installs it): {e}"));
    assert!(status.success(), "{compiler} {sources:?} failed");
    out
}

/// Runs `bin` with `args` for at most 20 seconds and returns its exit status (None when a
/// signal ended it) and the first 64 KiB of its stdout: a miscompiled program may loop
/// printing forever.
fn run_bounded(bin: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new("timeout")
        .arg("20")
        .arg(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("timeout (coreutils)");
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .take(64 << 10)
        .read_to_end(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    (status.code(), String::from_utf8_lossy(&out).into_owned())
}

/// Whether `rivet inspect --function` output says the function was modelled exactly.
fn is_simple(inspected: &str) -> bool {
    inspected
        .lines()
        .next()
        .unwrap_or_default()
        .ends_with(" simple")
}

/// The jump-table lines of `rivet inspect --function` output, in table order.
fn jump_table_lines(inspected: &str) -> Vec<&str> {
    inspected
        .lines()
        .filter(|l| l.contains("jump table"))
        .collect()
}

fn inspect_function(bin: &Path, name: &str) -> String {
    let out = rivet(&["inspect", s(bin), "--function", name]);
    assert!(out.status.success(), "inspect {name}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_call_that_ends_a_function_does_not_make_a_returning_callee_noreturn() {
    let dir = scratch("unusual_code", "trailing_call");
    for compiler in ["gcc", "clang-19"] {
        let bin = build(
            &dir,
            compiler,
            &["trailing_call.c"],
            &["-Wl,--emit-relocs"],
            compiler,
        );
        // The premise: the compiler ended `checked` with the call to `twice`.
        let checked = inspect_function(&bin, "checked");
        let last_instruction = checked
            .lines()
            .rfind(|l| l.trim_start().starts_with("0x"))
            .unwrap_or_default();
        assert!(
            last_instruction.contains("call") && last_instruction.contains("<twice>"),
            "{compiler} did not end `checked` with the call to `twice`, the test proves \
             nothing:\n{checked}"
        );
        // That call does not come back at this site (the compiler emitted nothing after
        // it), so `checked` is modelled and rewritten, not left alone as falling off its end.
        let header = checked.lines().next().unwrap_or_default();
        assert!(
            header.ends_with(" simple"),
            "{compiler}: `checked` should be rewritable:\n{checked}"
        );
        assert!(
            last_instruction.contains("noreturn"),
            "{compiler}: the call ending `checked` should end its path:\n{checked}"
        );
        // `twice` returns: main's call to it goes on to the loop.
        let main = inspect_function(&bin, "main");
        let calls: Vec<&str> = main.lines().filter(|l| l.contains("<twice>")).collect();
        assert!(
            !calls.is_empty(),
            "{compiler}: no call to twice in main:\n{main}"
        );
        for call in calls {
            assert!(
                !call.contains("noreturn"),
                "{compiler}: `twice` taken for a function that never returns: {call}"
            );
        }
        let expected = run_bounded(&bin, &[]);
        assert_eq!(expected.0, Some(0), "{compiler}: the original failed");
        for layout in ["reverse", "shuffle"] {
            let out = dir.join(format!("{compiler}.{layout}"));
            rewrite_moving(&bin, &out, &["--layout", layout], "checked");
            assert_eq!(
                run_bounded(&out, &[]),
                expected,
                "{compiler}: the {layout} rewrite behaves differently"
            );
        }
    }
}

#[test]
fn an_unresolved_jump_with_the_frame_on_the_stack_is_not_a_tail_call() {
    let dir = scratch("unusual_code", "register_table");
    // Without relocations the table's offsets are invisible: only the jump itself can tell
    // Rivet that the function must stay as it is.
    let bin = build(
        &dir,
        "gcc",
        &["register_table_main.c", "register_table.S"],
        &[],
        "register_table",
    );
    let dispatch = inspect_function(&bin, "dispatch");
    assert!(
        dispatch
            .lines()
            .next()
            .unwrap_or_default()
            .contains("skipped: unresolved-indirect-jump"),
        "dispatch should be left alone:\n{dispatch}"
    );
    let expected = run_bounded(&bin, &["10"]);
    assert_eq!(expected.0, Some(0), "the original failed");
    assert!(expected.1.contains("dispatch(10) = 2233"), "{}", expected.1);
    let seeds = (1..=4).map(Some);
    assert_rewrites_behave(&bin, &dir, seeds, &[&["10"]], &[expected], |_, _| {});
}

#[test]
fn the_optimize_summary_names_the_profiled_functions_it_left_as_they_were() {
    // The same unresolvable dispatch: a profile that finds most of the run in it must say so,
    // by name and share, rather than count it among "profiled functions not rewritten".
    let dir = scratch("unusual_code", "unoptimized_summary");
    let bin = build(
        &dir,
        "gcc",
        &["register_table_main.c", "register_table.S"],
        &[],
        "register_table",
    );
    let optimize = |profile: &str, json: bool| {
        let path = dir.join("profile");
        std::fs::write(&path, profile).unwrap();
        let out_path = dir.join("optimized");
        let mut args = vec![
            "optimize",
            s(&bin),
            "--profile",
            s(&path),
            "-o",
            s(&out_path),
        ];
        if json {
            args.push("--json");
        }
        let out = rivet(&args);
        assert!(out.status.success(), "optimize: {out:?}");
        assert_eq!(
            run_bounded(&out_path, &["10"]),
            run_bounded(&bin, &["10"]),
            "the optimized program behaves differently"
        );
        String::from_utf8(out.stdout).unwrap()
    };

    // Timer samples: 900 in dispatch, 100 in main. Samples weigh every function alike.
    let samples = "rivet-profile 1\nmode samples cpu-clock:u\norigin samples\nrecords\n\
                   1 dispatch 0 900\n1 main 0 100\nend\n";
    let text = optimize(samples, false);
    assert!(
        text.contains("1 profiled function could not be rewritten: 90.0% of the samples:\n")
            && text.contains("\n     90.0%  dispatch: skipped: unresolved-indirect-jump\n"),
        "{text}"
    );
    let summary: serde_json::Value = serde_json::from_str(&optimize(samples, true)).unwrap();
    let listed = &summary["profiled_not_rewritten"];
    assert_eq!(listed["unit"], "of the samples", "{listed}");
    assert_eq!(listed["share"], 0.9, "{listed}");
    assert_eq!(
        listed["functions"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert_eq!(listed["functions"][0]["name"], "dispatch", "{listed}");
    assert_eq!(listed["functions"][0]["share"], 0.9, "{listed}");

    // A branch profile has no counts inside a function Rivet does not model, only the calls
    // into it: it is listed by its entries, after the weighed ones (none here).
    let branches = "rivet-profile 1\nmode branches\norigin lbr\nrecords\n\
                    1 main 0 1 dispatch 0 0 3\nend\n";
    let text = optimize(branches, false);
    assert!(
        !text.contains("could not be rewritten:")
            && text.contains("1 function that could not be rewritten was entered (the profile counts nothing inside it):\n")
            && text.contains("        3 entries  dispatch: skipped: unresolved-indirect-jump\n"),
        "{text}"
    );
    let summary: serde_json::Value = serde_json::from_str(&optimize(branches, true)).unwrap();
    let dispatch = &summary["profiled_not_rewritten"]["functions"][0];
    assert_eq!(dispatch["name"], "dispatch", "{summary}");
    assert_eq!(dispatch["entries"], 3, "{summary}");
    assert!(dispatch["share"].is_null(), "{summary}");
}

#[test]
fn a_cold_part_may_jump_to_the_unreachable_end_of_its_function() {
    let dir = scratch("unusual_code", "unreachable_end");
    let sources = ["unreachable_end_main.c", "unreachable_end.S"];
    // In range, then the cold part's path, then the main part's last call (both exit).
    let runs: [&[&str]; 3] = [&["5", "7"], &["5", "-3"], &["5", "5000"]];
    for (flags, how) in [
        (&[][..], "rewritten in place"),
        (&["-Wl,--emit-relocs"][..], "moved"),
    ] {
        let bin = build(&dir, "gcc", &sources, flags, "unreachable_end");
        let cold = inspect_function(&bin, "checked.cold");
        assert!(
            is_simple(&cold) && cold.contains("=> tail-call "),
            "{how}: the jump to checked's end should end the cold part:\n{cold}"
        );
        let expected: Vec<_> = runs.iter().map(|args| run_bounded(&bin, args)).collect();
        assert_eq!(
            expected.iter().map(|r| r.0).collect::<Vec<_>>(),
            [Some(0), Some(3), Some(2)],
            "the original misbehaves: {expected:?}"
        );
        let seeds = [None, Some(1), Some(2), Some(3)];
        assert_rewrites_behave(&bin, &dir, seeds, &runs, &expected, |seed, list| {
            for name in ["checked", "checked.cold/"] {
                let line = list
                    .lines()
                    .find(|l| {
                        l.split_whitespace().nth(1).is_some_and(|n| {
                            n == name || name.ends_with('/') && n.starts_with(name)
                        })
                    })
                    .unwrap_or_else(|| panic!("{name} is not in the list:\n{list}"));
                assert!(
                    line.ends_with(&format!(" {how}")),
                    "{how}, seed {seed:?}: {name} was not rewritten:\n{list}"
                );
            }
        });
    }
}

#[test]
fn a_neighbours_table_entries_do_not_make_a_tail_call_unresolvable() {
    let dir = scratch("unusual_code", "foreign_table");
    let bin = build(
        &dir,
        "gcc",
        &["foreign_table_main.c", "foreign_table.S"],
        &["-Wl,--emit-relocs"],
        "foreign_table",
    );
    let apply = inspect_function(&bin, "apply");
    assert!(
        is_simple(&apply) && apply.contains("=> tail-call "),
        "apply's jump is a tail call:\n{apply}"
    );
    let pick = inspect_function(&bin, "pick");
    assert!(
        pick.contains("16 x 4 bytes") && pick.contains("bound by range check"),
        "pick's table should be read with its bound:\n{pick}"
    );
    let expected = run_bounded(&bin, &["20"]);
    assert_eq!(expected, (Some(0), "sum over 20 = 3053\n".to_string()));
    let seeds = (1..=4).map(Some);
    assert_rewrites_behave(&bin, &dir, seeds, &[&["20"]], &[expected], |seed, list| {
        for name in ["pick", "apply"] {
            assert!(
                listed(list, name).ends_with(" moved"),
                "seed {seed:?}:\n{list}"
            );
        }
    });
}

/// `hoisted_tables.S`: two `switch` loops whose table bases stay in callee-saved registers,
/// each a register the other loop uses for something else (one held a pointer argument
/// before), and a case of the second placed right after the first's `call abort`. Both
/// tables must be found, and the function rewritten in shuffled orders must compute what it
/// did.
#[test]
fn table_bases_kept_in_reused_registers_are_followed_past_noreturn_calls() {
    let dir = scratch("unusual_code", "hoisted_tables");
    let bin = build(
        &dir,
        "gcc",
        &["hoisted_tables_main.c", "hoisted_tables.S"],
        &["-Wl,--emit-relocs"],
        "hoisted_tables",
    );
    let run = inspect_function(&bin, "run");
    assert!(
        is_simple(&run)
            && run
                .matches("4 x 4 bytes, 4 distinct targets, bound by range check")
                .count()
                == 2,
        "run's two tables should be found:\n{run}"
    );
    let expected = run_bounded(&bin, &[]);
    assert_eq!(expected.0, Some(0));
    assert!(
        expected.1.ends_with("999: 672327\n"),
        "unexpected output:\n{}",
        expected.1
    );
    let seeds = (1..=4).map(Some);
    assert_rewrites_behave(&bin, &dir, seeds, &[&[]], &[expected], |seed, list| {
        assert!(
            listed(list, "run").ends_with(" moved"),
            "seed {seed:?}:\n{list}"
        );
    });
}

/// Builds that move functions (relocations kept) and builds rewritten in place (none): the
/// flags, a name for the build, and how `rivet rewrite --list` then names a rewritten function.
const BOTH_MODES: [(&[&str], &str, &str); 2] = [
    (&["-Wl,--emit-relocs"], "relocs", " moved"),
    (&["-no-pie"], "in_place", " rewritten in place"),
];

/// Runs `bin` (which must exit 0 and end its output with `ending`), then rewrites it in its
/// own order and in 4 shuffled block orders: each time `function` must be rewritten (`how`,
/// from `BOTH_MODES`) and the program must behave as before.
fn assert_rewrites_alike(
    bin: &Path,
    dir: &Path,
    name: &str,
    function: &str,
    how: &str,
    ending: &str,
) {
    let expected = run_bounded(bin, &[]);
    assert_eq!(expected.0, Some(0), "{name}: the original failed");
    assert!(
        expected.1.ends_with(ending),
        "{name}: unexpected output:\n{}",
        expected.1
    );
    let seeds = std::iter::once(None).chain((1..=4).map(Some));
    assert_rewrites_behave(bin, dir, seeds, &[&[]], &[expected], |seed, list| {
        let line = listed(list, function);
        assert!(line.ends_with(how), "{name}, seed {seed:?}: {line}");
    });
}

/// `hoisted_tables.S` built with `-DMASKED`: the same loops index their tables with
/// `ops[i] & 3` and no range check (serde_json's writers in Rivet's own build). The mask
/// bounds each table to 4 entries, with relocations (which run on from one table into the
/// next) and without them (rewritten in place); rewritten, the function must compute what it
/// did.
#[test]
fn masked_table_indexes_are_bounded_by_their_mask() {
    let dir = scratch("unusual_code", "hoisted_tables_masked");
    for (flags, name, how) in BOTH_MODES {
        let flags = [&["-DMASKED"][..], flags].concat();
        let bin = build(
            &dir,
            "gcc",
            &["hoisted_tables_main.c", "hoisted_tables.S"],
            &flags,
            name,
        );
        let run = inspect_function(&bin, "run");
        assert!(
            is_simple(&run)
                && run
                    .matches(
                        "4 x 4 bytes, 4 distinct targets, bound by the width of its index (2 bits)"
                    )
                    .count()
                    == 2,
            "{name}: run's two tables should be found:\n{run}"
        );
        assert_rewrites_alike(&bin, &dir, name, "run", how, "999: 672327\n");
    }
}

/// `masked_short_table.S`: a table indexed by `x & 7` with only 4 entries, the function's
/// next table (read from another base) right after it, and instructions where that table's
/// entries, read from the first one's base, lead. The mask bounds the first table at 8
/// entries; the second table's start ends it at 4, so no entry is written from two bases.
#[test]
fn a_table_sized_by_its_index_ends_where_a_table_read_differently_starts() {
    let dir = scratch("unusual_code", "masked_short_table");
    for (flags, name, how) in BOTH_MODES {
        let bin = build(
            &dir,
            "gcc",
            &["masked_short_table_main.c", "masked_short_table.S"],
            flags,
            name,
        );
        let dispatch = inspect_function(&bin, "dispatch");
        let tables = jump_table_lines(&dispatch);
        assert!(
            tables.len() == 2
                && tables[0].contains(
                    "4 x 4 bytes, 4 distinct targets, bound by the width of its index (3 bits)"
                )
                && tables[1].contains("4 x 4 bytes, 4 distinct targets, bound by range check"),
            "{name}: the first table should end where the second starts:\n{dispatch}"
        );
        assert_rewrites_alike(&bin, &dir, name, "dispatch", how, "sum 1662\n");
    }
}

/// `conflicting_tables.S`: two range-checked tables sharing two entries, read from different
/// bases (valid code both ways). Neither can be cut, and no rewrite can write the shared
/// entries for both: the function is left as it is, and the program still runs the same
/// (rewritten without the guard, it crashed or hung).
#[test]
fn tables_sharing_entries_read_differently_are_left_alone() {
    let dir = scratch("unusual_code", "conflicting_tables");
    for (flags, name, _) in BOTH_MODES {
        let bin = build(
            &dir,
            "gcc",
            &["conflicting_tables_main.c", "conflicting_tables.S"],
            flags,
            name,
        );
        let dispatch = inspect_function(&bin, "dispatch");
        assert!(
            dispatch
                .lines()
                .next()
                .unwrap_or_default()
                .contains("skipped: overlapping-jump-tables"),
            "{name}: dispatch should be left alone:\n{dispatch}"
        );
        assert_rewrites_alike(
            &bin,
            &dir,
            name,
            "dispatch",
            "not rewritten: skipped: overlapping-jump-tables",
            "5: -1 -1\n",
        );
    }
}

/// `offset_index.S`: dispatches indexed by the value minus a constant (LLVM's `match` on a
/// range not starting at 0), each table right after another function's. `classify` checks
/// and indexes with the difference; `pick` indexes with it unchecked, sized by relocations.
/// Both tables start where the difference is 0: read from where the value is 0 they would
/// take the table before for their own. `niche` reads its table at a niche-encoded tag minus
/// a constant, and once at a constant index: one entry inside the table, which stays whole.
/// Rewritten in shuffled orders, all three must compute what they did.
#[test]
fn tables_indexed_by_value_minus_constant_start_at_the_difference() {
    let dir = scratch("unusual_code", "offset_index");
    let bin = build(
        &dir,
        "gcc",
        &["offset_index_main.c", "offset_index.S"],
        &["-Wl,--emit-relocs"],
        "offset_index",
    );
    let classify = inspect_function(&bin, "classify");
    assert!(
        is_simple(&classify)
            && classify.contains("7 x 4 bytes, 5 distinct targets, bound by range check"),
        "classify's table should be found:\n{classify}"
    );
    let pick = inspect_function(&bin, "pick");
    assert!(
        is_simple(&pick) && pick.contains("4 x 4 bytes, 4 distinct targets, bound by relocations"),
        "pick's table should be found:\n{pick}"
    );
    let niche = inspect_function(&bin, "niche");
    let tables = jump_table_lines(&niche);
    assert!(
        is_simple(&niche)
            && tables.len() == 2
            && tables[0].contains("5 x 4 bytes, 5 distinct targets, bound by relocations")
            && tables[1].contains(
                "1 x 4 bytes, 1 distinct targets, bound by the width of its index (0 bits)"
            ),
        "niche's table and its one-entry view should be found, the table whole:\n{niche}"
    );
    let expected = run_bounded(&bin, &[]);
    assert_eq!(expected.0, Some(0));
    assert!(
        expected.1.contains("\n9: 11 900 91\n")
            && expected.1.contains("\nniche 4: 704\n")
            && expected.1.ends_with("fixed: 702\n"),
        "unexpected output:\n{}",
        expected.1
    );
    let seeds = (1..=4).map(Some);
    assert_rewrites_behave(&bin, &dir, seeds, &[&[]], &[expected], |seed, list| {
        for name in ["classify", "pick", "niche"] {
            assert!(
                listed(list, name).ends_with(" moved"),
                "seed {seed:?}: {name}\n{list}"
            );
        }
    });
}

/// Builds `rust_unwind.rs` with `rustc -O -g` (edition 2021), with static relocations when
/// `relocs`, into `dir/name`.
fn build_rust(dir: &Path, relocs: bool, name: &str) -> PathBuf {
    let out = dir.join(name);
    let mut rustc = Command::new("rustc");
    rustc.args(["--edition", "2021", "-O", "-g"]);
    if relocs {
        rustc.arg("-Clink-arg=-Wl,--emit-relocs");
    }
    let status = rustc
        .arg(source("rust_unwind.rs"))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("rustc is required (it builds Rivet): {e}"));
    assert!(status.success(), "rustc rust_unwind.rs failed");
    out
}

/// The arguments `rust_unwind` is run with.
const RUST_RUNS: [&[&str]; 2] = [&["20"], &["57"]];

#[test]
fn a_rust_program_that_unwinds_behaves_the_same_rewritten_instrumented_and_optimized() {
    let dir = scratch("unusual_code", "rust_unwind");
    for relocs in [false, true] {
        let bin = build_rust(&dir, relocs, if relocs { "relocs" } else { "plain" });
        let expected: Vec<_> = RUST_RUNS
            .iter()
            .map(|args| run_bounded(&bin, args))
            .collect();
        assert_eq!(expected[0].0, Some(0), "the original failed: {expected:?}");
        assert!(
            expected[0].1.contains("total 480 caught 3 "),
            "{}",
            expected[0].1
        );
        let model = rivet(&["inspect", s(&bin), "--json"]);
        assert!(model.status.success(), "inspect: {model:?}");
        let model: serde_json::Value = serde_json::from_slice(&model.stdout).unwrap();
        // `cold_path_handler`, `warm_up` and std's `write_all_cold` are functions of their own.
        assert_eq!(model["cold_fragments"], 0, "relocs {relocs}");
        let (all, simple) = (
            model["functions"].as_u64().unwrap(),
            model["simple_functions"].as_u64().unwrap(),
        );
        assert!(
            simple * 100 >= all * 99 && model["landing_pads"].as_u64() > Some(100),
            "relocs {relocs}: {simple} of {all} functions modelled, {} landing pads",
            model["landing_pads"]
        );
        let seeds = (1..=3).map(Some);
        assert_rewrites_behave(&bin, &dir, seeds, &RUST_RUNS, &expected, |_, _| {});
        if !relocs {
            continue;
        }
        let counts = instrument_and_train(&bin, &dir, &[&["20"]]);
        let optimized = dir.join("optimized");
        let out = rivet(&[
            "optimize",
            s(&bin),
            "--profile",
            s(&counts),
            "-o",
            s(&optimized),
            "--verify",
        ]);
        assert!(out.status.success(), "optimize: {out:?}");
        let got: Vec<_> = RUST_RUNS
            .iter()
            .map(|a| run_bounded(&optimized, a))
            .collect();
        assert_eq!(got, expected, "the optimized program differs");
    }
}

/// `rivet rewrite BIN -o OUT OPTIONS --list`, which must succeed and move `function`.
fn rewrite_moving(bin: &Path, out: &Path, options: &[&str], function: &str) {
    let list = rewrite_list(bin, out, options);
    assert!(
        listed(&list, function).ends_with(" moved"),
        "{options:?}: {function} was not rewritten:\n{list}"
    );
}

/// The line `rivet rewrite --list` prints for `name`.
fn listed(list: &str, name: &str) -> String {
    list.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("{name} is not in the list:\n{list}"))
        .to_string()
}

/// `rivet rewrite BIN -o OUT OPTIONS --list`, which must succeed; the list of what was
/// rewritten and why not.
fn rewrite_list(bin: &Path, out: &Path, options: &[&str]) -> String {
    let mut args = vec!["rewrite", s(bin), "-o", s(out), "--list"];
    args.extend_from_slice(options);
    let rewrite = rivet(&args);
    assert!(rewrite.status.success(), "{options:?}: {rewrite:?}");
    String::from_utf8(rewrite.stdout).unwrap()
}

/// `rivet rewrite BIN -o OUT --list`, in the input's block order (`seed` None) or shuffled
/// with `seed`; returns the list of what was rewritten and why not.
fn rewrite_listed(bin: &Path, out: &Path, seed: Option<u32>) -> String {
    match seed.map(|n| n.to_string()) {
        Some(seed) => rewrite_list(bin, out, &["--layout", "shuffle-blocks", "--seed", &seed]),
        None => rewrite_list(bin, out, &[]),
    }
}

/// Rewrites `bin` with each of `seeds` (see `rewrite_listed`), hands each list to `check`,
/// and asserts that the rewritten program, run with each of `runs`, behaves as the original
/// did (`expected`, in the same order).
fn assert_rewrites_behave(
    bin: &Path,
    dir: &Path,
    seeds: impl IntoIterator<Item = Option<u32>>,
    runs: &[&[&str]],
    expected: &[(Option<i32>, String)],
    mut check: impl FnMut(Option<u32>, &str),
) {
    for seed in seeds {
        let out = dir.join(seed.map_or("rewritten".into(), |n| format!("shuffled.{n}")));
        let list = rewrite_listed(bin, &out, seed);
        check(seed, &list);
        let got: Vec<_> = runs.iter().map(|args| run_bounded(&out, args)).collect();
        assert_eq!(
            got, expected,
            "seed {seed:?}: the rewritten program behaves differently"
        );
    }
}

#[test]
fn short_tail_calls_keep_their_short_form_in_place() {
    let dir = scratch("unusual_code", "short_tail_jumps");
    // No relocations: functions are rewritten in place, each within its old bytes.
    let bin = build(
        &dir,
        "gcc",
        &["short_tail_jumps_main.c", "short_tail_jumps.S"],
        &[],
        "short_tail_jumps",
    );
    let expected = run_bounded(&bin, &["4"]);
    assert_eq!(expected.0, Some(0), "the original failed");
    assert!(
        expected
            .1
            .contains("-3: plus_one -4, magnitude 3, back -10"),
        "{}",
        expected.1
    );
    // In the original order every function fits again: its tail calls stay short.
    let out = dir.join("rewritten");
    let list = rewrite_listed(&bin, &out, None);
    for name in ["plus_one", "magnitude", "back"] {
        let line = listed(&list, name);
        assert!(line.ends_with("rewritten in place"), "{line}");
    }
    assert_eq!(run_bounded(&out, &["4"]), expected);
    let verify = rivet(&["verify", s(&bin), s(&out)]);
    assert!(verify.status.success(), "{verify:?}");
    // Shuffled, `magnitude` needs more jumps and fits only in some orders; where it does, its
    // short conditional tail call to `negate` is re-created from a new place.
    let mut magnitude_reordered = 0;
    let seeds = (1..=8).map(Some);
    assert_rewrites_behave(&bin, &dir, seeds, &[&["4"]], &[expected], |_, list| {
        if listed(list, "magnitude").ends_with("rewritten in place") {
            magnitude_reordered += 1;
        }
    });
    assert!(magnitude_reordered > 0, "no order of magnitude fitted");
}

#[test]
fn a_table_indexed_by_a_byte_is_bounded_by_it_in_place() {
    let dir = scratch("unusual_code", "byte_dispatch");
    // No relocations: nothing but the code shows where the table ends.
    let bin = build(
        &dir,
        "gcc",
        &["byte_dispatch_main.c", "byte_dispatch.S"],
        &["-no-pie"],
        "byte_dispatch",
    );
    let expected = run_bounded(&bin, &[]);
    assert_eq!(expected.0, Some(0), "the original failed");
    assert!(expected.1.contains("program 1: 30"), "{}", expected.1);
    // Both dispatches, the one in the entry block and the shared `jmp *%rax` (whose table
    // load is in each handler), read the 256 entries the byte can index.
    let run = inspect_function(&bin, "run");
    let tables = jump_table_lines(&run);
    assert_eq!(tables.len(), 2, "{run}");
    for t in tables {
        assert!(
            t.contains("256 x 8 bytes") && t.contains("width of its index (8 bits)"),
            "{t}"
        );
    }
    let mut reordered = 0;
    for seed in 0..=8 {
        let out = dir.join(format!("rewritten.{seed}"));
        // Seed 0: the input's own order, which must fit.
        let list = rewrite_listed(&bin, &out, (seed > 0).then_some(seed));
        let line = listed(&list, "run");
        if seed == 0 {
            assert!(line.ends_with("rewritten in place"), "{line}");
        } else if line.ends_with("rewritten in place") {
            reordered += 1;
        }
        assert_eq!(
            run_bounded(&out, &[]),
            expected,
            "seed {seed}: the rewritten program behaves differently"
        );
    }
    assert!(reordered > 0, "no shuffled order of run fitted");
}

#[test]
fn a_dispatch_also_entered_from_its_table_is_not_resolved_from_its_branches() {
    let dir = scratch("unusual_code", "byte_dispatch_in_table");
    let bin = build(
        &dir,
        "gcc",
        &["byte_dispatch_main.c", "byte_dispatch.S"],
        &["-no-pie", "-DDISPATCH_IN_TABLE"],
        "byte_dispatch",
    );
    let expected = run_bounded(&bin, &[]);
    assert_eq!(expected.0, Some(0), "the original failed");
    // The branches into the shared `jmp *%rax` all load a handler, but the table leads there
    // too (its address is stored in data): the jump's targets are not known, and `run` stays
    // as it is.
    let run = inspect_function(&bin, "run");
    let header = run.lines().next().unwrap_or_default();
    assert!(
        header.contains("skipped:"),
        "run should be left alone:\n{run}"
    );
    let out = dir.join("rewritten");
    let list = rewrite_listed(&bin, &out, None);
    assert!(
        listed(&list, "run").contains("not rewritten: skipped:"),
        "{list}"
    );
    assert_eq!(run_bounded(&out, &[]), expected);
}

/// Addresses of the rows of `bin`'s line table, from binutils' decoder (not Rivet's), but for
/// the rows that end a sequence (line "-"), which give no line to their address.
fn line_row_addresses(bin: &Path) -> Vec<u64> {
    let out = Command::new("objdump")
        .arg("--dwarf=decodedline")
        .arg(bin)
        .output()
        .expect("objdump (binutils) is required");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.split_whitespace().nth(1) != Some("-"))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("0x")))
        .filter_map(|w| u64::from_str_radix(&w[2..], 16).ok())
        .collect()
}

#[test]
fn a_function_whose_rows_start_after_its_first_instruction_keeps_them() {
    let dir = scratch("unusual_code", "late_line");
    let bin = build(
        &dir,
        "gcc",
        &["late_line.c"],
        &["-fno-toplevel-reorder", "-Wl,--emit-relocs"],
        "late_line",
    );
    // The premise: no row at late_start itself, one at its second instruction.
    let data = std::fs::read(&bin).unwrap();
    let elf = rivet_elf::ElfFile::parse(&data).unwrap();
    let start = elf
        .symbols()
        .unwrap()
        .iter()
        .find(|s| s.name == "late_start")
        .expect("late_start")
        .value
        .get();
    let rows = line_row_addresses(&bin);
    assert!(
        !rows.contains(&start) && rows.contains(&(start + 2)),
        "the compiler laid out the line table otherwise, the test proves nothing: {rows:x?}"
    );
    let expected = run_bounded(&bin, &[]);
    assert_eq!(expected, (Some(0), "2 4\n".to_string()));
    let out = dir.join("reversed");
    // --verify compares the source line of every copied instruction with the original's.
    rewrite_moving(
        &bin,
        &out,
        &["--layout", "reverse", "--verify"],
        "late_start",
    );
    assert_eq!(run_bounded(&out, &[]), expected);
}

/// The address of symbol `name` in the ELF image `data`.
fn symbol_address(data: &[u8], name: &str) -> u64 {
    let elf = rivet_elf::ElfFile::parse(data).expect("an ELF file");
    elf.symbols()
        .unwrap()
        .iter()
        .find(|sym| sym.name == name)
        .unwrap_or_else(|| panic!("no symbol {name}"))
        .value
        .get()
}

/// Overwrites `bytes` at virtual address `addr` of the ELF image `data`.
fn write_at(data: &mut [u8], addr: u64, bytes: &[u8]) {
    let offset = rivet_elf::ElfFile::parse(data)
        .unwrap()
        .file_offset_of(rivet_elf::Vaddr(addr))
        .expect("a mapped address")
        .0 as usize;
    data[offset..offset + bytes.len()].copy_from_slice(bytes);
}

/// The target of the 6-byte `jcc rel32` at `addr` in the ELF image `data`.
fn near_jcc_target(data: &[u8], addr: u64) -> u64 {
    let elf = rivet_elf::ElfFile::parse(data).unwrap();
    let bytes = elf.bytes_at(rivet_elf::Vaddr(addr), 6).unwrap();
    assert_eq!(bytes[0], 0x0f, "not a near jcc at {addr:#x}: {bytes:02x?}");
    let rel = i32::from_le_bytes(bytes[2..6].try_into().unwrap());
    (addr + 6).wrapping_add_signed(i64::from(rel))
}

#[test]
fn branches_into_a_moved_functions_second_instruction_still_land_on_it() {
    let dir = scratch("unusual_code", "secondary_entry");
    for compiler in ["gcc", "clang-19"] {
        let bin = build(
            &dir,
            compiler,
            &["secondary_entry_main.c", "secondary_entry.S"],
            &["-Wl,--emit-relocs"],
            compiler,
        );
        let expected = run_bounded(&bin, &["3"]);
        assert_eq!(expected.0, Some(0), "{compiler}: the original failed");
        assert!(
            expected
                .1
                .contains("3: via_near 256, via_short 256, scaled 100"),
            "{}",
            expected.1
        );
        let input = std::fs::read(&bin).unwrap();
        let scaled = symbol_address(&input, "scaled");
        let via_near = symbol_address(&input, "via_near");
        let via_short = symbol_address(&input, "via_short");
        // The premise: `scaled` is entered at +2, within a 5-byte jump at its entry, from
        // both callers, by branches no relocation covers.
        let inspected = inspect_function(&bin, "scaled");
        assert!(
            inspected.contains(&format!("secondary entries: {:#x}", scaled + 2)),
            "{compiler}: {inspected}"
        );
        assert_eq!(near_jcc_target(&input, via_near + 7), scaled + 2);

        // Only `scaled` moves; both callers stay where they are.
        let counts = instrument_and_train(&bin, &dir, &[&["3"]]);
        let out = dir.join(format!("{compiler}.optimized"));
        let optimize = rivet(&[
            "optimize",
            s(&bin),
            "--profile",
            s(&counts),
            "-o",
            s(&out),
            "--funcs",
            "scaled",
            "--verify",
            "--json",
        ]);
        assert!(optimize.status.success(), "{compiler}: {optimize:?}");
        let summary: serde_json::Value = serde_json::from_slice(&optimize.stdout).unwrap();
        assert_eq!(summary["rewritten"], 1, "{summary}");
        // via_short's 2-byte `jne` cannot reach the new code: the old body keeps its bytes.
        assert_eq!(summary["old_entries_not_forwarded"], 1, "{summary}");
        assert_eq!(run_bounded(&out, &["3"]), expected, "{compiler}: optimized");
        let verify = rivet(&["verify", s(&bin), s(&out)]);
        assert!(verify.status.success(), "{compiler}: {verify:?}");
        // via_near's 6-byte `jne` was sent to the new copy of `scaled`, at its second
        // instruction.
        let mut output = std::fs::read(&out).unwrap();
        let new_scaled = symbol_address(&output, "scaled");
        assert_ne!(new_scaled, scaled, "{compiler}: scaled did not move");
        assert_eq!(near_jcc_target(&output, via_near + 7), new_scaled + 2);

        // Broken on purpose as Rivet once wrote it: a forwarding jump over the old entry,
        // which via_short's branch lands inside of. Verification must see it.
        let rel = (new_scaled as i64 - (scaled as i64 + 5)) as i32;
        let mut jump = vec![0xe9];
        jump.extend_from_slice(&rel.to_le_bytes());
        write_at(&mut output, scaled, &jump);
        let broken = dir.join(format!("{compiler}.broken"));
        std::fs::write(&broken, &output).unwrap();
        assert_ne!(
            run_bounded(&broken, &["3"]),
            expected,
            "{compiler}: broken runs"
        );
        let verify = rivet(&["verify", s(&bin), s(&broken)]);
        assert!(!verify.status.success(), "{compiler}: {verify:?}");
        let message = String::from_utf8_lossy(&verify.stderr);
        assert!(
            message.contains(&format!("{:#x} in via_short", via_short + 7))
                && message.contains("still goes to"),
            "{compiler}: {message}"
        );

        // Every function moved, in shuffled orders: the branches with and without relocations
        // all follow.
        for seed in 1..=4 {
            let out = dir.join(format!("{compiler}.shuffled.{seed}"));
            let seed = seed.to_string();
            let rewrite = rivet(&[
                "rewrite",
                s(&bin),
                "-o",
                s(&out),
                "--layout",
                "shuffle",
                "--seed",
                &seed,
                "--verify",
            ]);
            assert!(rewrite.status.success(), "{compiler}: {rewrite:?}");
            assert_eq!(
                run_bounded(&out, &["3"]),
                expected,
                "{compiler} seed {seed}"
            );
        }
    }
}
