//! Profiles of optimized binaries: samples of Rivet's output mapped back to its input
//! (`rivet aggregate --original`), and Rivet's output refused as an input to rewrite again.
//!
//! - Same samples, two addresses: every instruction of the input gets a sample count; the
//!   same counts are printed as `perf script` text once at the input's addresses and once at
//!   the output's (through the output's own address map), and the two aggregations must give
//!   the same profile, with every sample mapped.
//! - Same walk, two layouts: a pseudo-random walk through the CFG of every function of six
//!   blocks or more, the output's blocks shuffled,
//!   sampled into 16-deep branch stacks twice: with the branches the input takes, and with the
//!   ones the output takes (a block placed right after the one before it falls through there,
//!   wherever it was in the input). Both aggregate to the same branches and fall-throughs.
//! - A real run: `perf record -e cpu-clock:u` of the optimized binary maps back at least 99%
//!   and the profile optimizes the input without `--force`.
//! - Refusals and mismatches: one error line each.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use common::{assert_one_error_line, build_instrument_program, perf_record, rivet, s, scratch};
use rivet_discover::{DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_emit::code::AddressMap;

/// The input built, profiled and optimized: (input, output, profile of the input).
fn optimized(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let binary = build_instrument_program(dir, "counts.c", "gcc", &["-O2"], "prog");
    let perf_data = dir.join("input.data");
    perf_record(&perf_data, 5000, |perf| {
        perf.arg(&binary).args(["switch", "30000000"]);
    });
    let profile = dir.join("input.prof");
    let r = rivet(&["aggregate", s(&perf_data), s(&binary), "-o", s(&profile)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let fast = dir.join("prog.fast");
    let r = rivet(&[
        "optimize",
        s(&binary),
        "--profile",
        s(&profile),
        "-o",
        s(&fast),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    (binary, fast)
}

/// `perf script` mmap lines mapping `elf`'s PT_LOADs (as the file `path`) at `base`.
fn mmap_lines(elf: &ElfFile<'_>, path: &Path, base: u64) -> String {
    let mut text = String::new();
    for seg in elf.segments().iter().filter(|s| s.is_load()) {
        let start = seg.vaddr.get() & !0xfff;
        let pgoff = seg.offset.0 & !0xfff;
        let len = (seg.vaddr.get() + seg.filesz - start + 0xfff) & !0xfff;
        writeln!(
            text,
            "  4242 PERF_RECORD_MMAP2 4242/4242: [{:#x}({len:#x}) @ {pgoff:#x} fe:01 12 0]: r-xp {}",
            base + start,
            path.display()
        )
        .unwrap();
    }
    text
}

fn aggregate_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["aggregate", "--json"];
    all.extend_from_slice(args);
    let r = rivet(&all);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

/// Aggregates `perf script` text of the input (`script_in`) and of the output mapped back
/// (`script_out`, `--original binary`) into `dir/NAME-input.prof` and `dir/NAME-output.prof`:
/// the two profiles and the second aggregation's summary.
fn aggregate_both_sides(
    dir: &Path,
    name: &str,
    (binary, script_in): (&Path, &Path),
    (fast, script_out): (&Path, &Path),
) -> (
    rivet_profile::Profile,
    rivet_profile::Profile,
    serde_json::Value,
) {
    let (prof_in, prof_out) = (
        dir.join(format!("{name}-input.prof")),
        dir.join(format!("{name}-output.prof")),
    );
    aggregate_json(&["--perf-script", s(script_in), s(binary), "-o", s(&prof_in)]);
    let summary = aggregate_json(&[
        "--perf-script",
        "--original",
        s(binary),
        s(script_out),
        s(fast),
        "-o",
        s(&prof_out),
    ]);
    let read =
        |p: &Path| rivet_profile::native::parse(&std::fs::read_to_string(p).unwrap()).unwrap();
    (read(&prof_in), read(&prof_out), summary)
}

#[test]
fn the_same_samples_at_output_addresses_give_the_input_profile() {
    let dir = scratch("optimized_profiles", "same_samples");
    let (binary, fast) = optimized(&dir);
    let input_bytes = std::fs::read(&binary).unwrap();
    let output_bytes = std::fs::read(&fast).unwrap();
    let input = ElfFile::parse(&input_bytes).unwrap();
    let output = ElfFile::parse(&output_bytes).unwrap();
    let program = discover(&input, &DiscoverOptions::default()).unwrap();
    let bat = output
        .section_by_name(rivet_emit::bat::SECTION)
        .expect("the output has a block address table");
    let pairs = rivet_emit::bat::decode(bat.data).unwrap();
    let map = AddressMap::from_blocks(&program, &pairs, &output).unwrap();
    let (input_path, output_path) = (
        std::fs::canonicalize(&binary).unwrap(),
        std::fs::canonicalize(&fast).unwrap(),
    );
    let base = 0x5555_5555_4000u64;
    let mut at_input = mmap_lines(&input, &input_path, base);
    let mut at_output = mmap_lines(&output, &output_path, base);
    let mut moved = 0u64;
    let mut total = 0u64;
    for f in &program.functions {
        for (i, inst) in f.insts.iter().enumerate() {
            // Padding the rewrite leaves out has no bytes of its own in the output.
            if f.is_dropped_padding(i as u32) {
                continue;
            }
            let old = inst.addr();
            let new = map
                .translate(&program, old)
                .expect("every kept instruction maps");
            let samples = 1 + (old.get() % 3);
            for _ in 0..samples {
                writeln!(at_input, "  4242 cpu-clock:u: {:x}", base + old.get()).unwrap();
                writeln!(at_output, "  4242 cpu-clock:u: {:x}", base + new.get()).unwrap();
            }
            total += samples;
            moved += u64::from(new != old) * samples;
        }
    }
    assert!(
        moved * 2 > total,
        "too little moved code to judge: {moved} of {total} samples"
    );
    let (script_in, script_out) = (dir.join("input.txt"), dir.join("output.txt"));
    std::fs::write(&script_in, at_input).unwrap();
    std::fs::write(&script_out, at_output).unwrap();
    let (a, b, summary) =
        aggregate_both_sides(&dir, "samples", (&binary, &script_in), (&fast, &script_out));
    let mapped = &summary["mapped_back"];
    assert_eq!(mapped["samples"], total);
    assert_eq!(mapped["samples_mapped"], total, "{summary}");
    assert_eq!(a.build_id, b.build_id, "the profile is of the input");
    assert_eq!(
        a.samples, b.samples,
        "the same samples, by function and offset"
    );
}

/// A walk through `f`'s CFG: `steps` blocks from the entry, successors picked by a fixed
/// pseudo-random sequence, back to the entry at a block without successors.
fn walk(f: &rivet_ir::Function, steps: usize, seed: u64) -> Vec<usize> {
    let mut state = seed;
    let mut at = 0usize;
    let mut path = vec![at];
    for _ in 0..steps {
        let succs = &f.blocks[at].succs;
        at = if succs.is_empty() {
            0
        } else {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            succs[(state >> 33) as usize % succs.len()].to.0 as usize
        };
        path.push(at);
    }
    path
}

/// Branches (from, to) of one trip through a function, oldest first.
type Run = Vec<(u64, u64)>;

/// One branch stack per run of `runs` (branches oldest first) as `perf script` sample lines,
/// at run-time base `base`.
fn stack_lines(runs: &[Run], base: u64) -> String {
    let mut text = String::new();
    for run in runs {
        write!(text, "  4242 cycles:u: {:x}", base + run.last().unwrap().1).unwrap();
        for (from, to) in run.iter().rev() {
            write!(text, " {:#x}/{:#x}/P/-/-/1", base + from, base + to).unwrap();
        }
        writeln!(text).unwrap();
    }
    text
}

/// Where each block of `program` starts in the output `output`, by its input start.
fn new_block_starts(program: &rivet_ir::Program, output: &ElfFile<'_>) -> (AddressMap, Vec<u64>) {
    let bat = output.section_by_name(rivet_emit::bat::SECTION).unwrap();
    let pairs = rivet_emit::bat::decode(bat.data).unwrap();
    let map = AddressMap::from_blocks(program, &pairs, output).unwrap();
    let mut new_starts: Vec<u64> = pairs.iter().map(|p| p.1.get()).collect();
    new_starts.sort_unstable();
    (map, new_starts)
}

/// Whether block `y` directly follows block `x` in the output (no other block start between).
fn placed_next(x: u64, y: u64, new_starts: &[u64]) -> bool {
    y >= x && !new_starts.iter().any(|&s| s > x && s < y)
}

/// The walked functions of `program`: simple, of six blocks or more, every block moved.
fn walked_functions<'p>(
    program: &'p rivet_ir::Program,
    new_of: &dyn Fn(rivet_elf::Vaddr) -> u64,
) -> Vec<&'p rivet_ir::Function> {
    program
        .functions
        .iter()
        .filter(|f| f.is_simple() && f.blocks.len() >= 6)
        .filter(|f| f.blocks.iter().all(|b| new_of(b.start) != b.start.get()))
        .collect()
}

/// Direct edges of the walked functions that the input takes and the output falls through:
/// a straight run of the output over one of them is cut in two runs of the input.
fn taken_edges_made_straight(program: &rivet_ir::Program, output: &ElfFile<'_>) -> usize {
    let (map, new_starts) = new_block_starts(program, output);
    let new_of = |a: rivet_elf::Vaddr| map.translate(program, a).unwrap().get();
    let mut count = 0;
    for f in walked_functions(program, &new_of) {
        for (i, x) in f.blocks.iter().enumerate() {
            let Some(tail) = f.block_insts(x).last() else {
                continue;
            };
            let next_in_input = f
                .blocks
                .iter()
                .find(|b| b.start >= tail.end())
                .map(|b| b.start);
            count += x
                .succs
                .iter()
                .filter(|e| e.to.0 as usize != i && matches!(e.kind, rivet_ir::EdgeKind::Taken))
                .filter(|e| {
                    let y = f.block(e.to);
                    let (nx, ny) = (new_of(x.start), new_of(y.start));
                    // A block the output holds in no byte (a jump dropped before its target)
                    // shares its target's address: that is no straight run over the edge.
                    next_in_input != Some(y.start) && ny > nx && placed_next(nx, ny, &new_starts)
                })
                .count();
        }
    }
    count
}

#[test]
fn the_same_walk_through_both_layouts_gives_the_same_branches() {
    let dir = scratch("optimized_profiles", "same_walk");
    let (binary, _) = optimized(&dir);
    let input_bytes = std::fs::read(&binary).unwrap();
    let input = ElfFile::parse(&input_bytes).unwrap();
    let program = discover(&input, &DiscoverOptions::default()).unwrap();
    // Blocks shuffled, so that runs of the output cross blocks in a new order: the first seed
    // whose layout makes a taken edge of a walked function fall through (on this small
    // program most seeds make none), so that the cutting of straight runs is exercised.
    let fast = dir.join("prog.shuffled");
    let mut chosen = None;
    for seed in 1..=64 {
        let r = common::rewrite_shuffled(&binary, &fast, seed, &[]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let bytes = std::fs::read(&fast).unwrap();
        let straightened = taken_edges_made_straight(&program, &ElfFile::parse(&bytes).unwrap());
        if straightened > 0 {
            chosen = Some((seed, straightened));
            break;
        }
    }
    let (seed, straightened) = chosen.expect("no shuffle seed in 1..=64 straightens a taken edge");
    eprintln!("shuffle seed {seed}: {straightened} taken edges made straight");
    let output_bytes = std::fs::read(&fast).unwrap();
    let output = ElfFile::parse(&output_bytes).unwrap();
    let (map, new_starts) = new_block_starts(&program, &output);
    let new_of = |a: rivet_elf::Vaddr| map.translate(&program, a).unwrap().get();
    // One stack per trip from the entry to the jump back to it, on both sides, so that both
    // stacks cover the same stretch of the walk whatever else they hold.
    let (mut in_runs, mut out_runs): (Vec<Run>, Vec<Run>) = (Vec::new(), Vec::new());
    let mut branches = 0;
    let mut walked = 0;
    for f in walked_functions(&program, &new_of) {
        walked += 1;
        let path = walk(f, 4000, f.range.start.get());
        let (mut in_run, mut out_run): (Run, Run) = (vec![], vec![]);
        let mut started = false;
        for w in path.windows(2) {
            let (x, y) = (&f.blocks[w[0]], &f.blocks[w[1]]);
            let Some(tail) = f.block_insts(x).last() else {
                continue;
            };
            let (from, to) = (tail.addr().get(), y.start.get());
            // An indirect jump is taken wherever its target lands; so is the jump back to the
            // entry where the walk starts over.
            let always_taken = x.succs.iter().any(|e| {
                matches!(
                    e.kind,
                    rivet_ir::EdgeKind::JumpTable | rivet_ir::EdgeKind::ComputedGoto
                )
            }) || w[1] == 0 && !x.succs.iter().any(|e| e.to.0 == 0);
            // The input falls through when the next block starts where this one ends
            // (padding between them left out).
            let next_in_input = f
                .blocks
                .iter()
                .find(|b| b.start >= tail.end())
                .map(|b| b.start);
            if next_in_input != Some(y.start) || always_taken {
                in_run.push((from, to));
            }
            let (nx, ny) = (new_of(x.start), new_of(y.start));
            if w[0] == w[1] || !placed_next(nx, ny, &new_starts) || always_taken {
                out_run.push((new_of(tail.addr()), ny));
            }
            let restart = w[1] == 0 && !x.succs.iter().any(|e| e.to.0 == 0);
            if restart {
                if started && in_run.len() <= 32 && out_run.len() <= 32 {
                    branches += in_run.len();
                    in_runs.push(std::mem::take(&mut in_run));
                    out_runs.push(std::mem::take(&mut out_run));
                }
                started = true;
                in_run = vec![(from, to)];
                out_run = vec![(new_of(tail.addr()), ny)];
            }
        }
    }
    assert!(
        walked > 0 && branches > 200,
        "{walked} functions walked, {branches} branches"
    );
    // The layout changed which transitions branch (and where): otherwise nothing is tested.
    let changed = in_runs
        .iter()
        .zip(&out_runs)
        .filter(|(a, b)| a.len() != b.len())
        .count();
    assert!(
        changed > 0,
        "the output branches exactly where the input does"
    );
    let (input_path, output_path) = (
        std::fs::canonicalize(&binary).unwrap(),
        std::fs::canonicalize(&fast).unwrap(),
    );
    let base = 0x5555_5555_4000u64;
    let script_in = dir.join("input.txt");
    let script_out = dir.join("output.txt");
    std::fs::write(
        &script_in,
        mmap_lines(&input, &input_path, base) + &stack_lines(&in_runs, base),
    )
    .unwrap();
    std::fs::write(
        &script_out,
        mmap_lines(&output, &output_path, base) + &stack_lines(&out_runs, base),
    )
    .unwrap();
    let (a, b, summary) =
        aggregate_both_sides(&dir, "walk", (&binary, &script_in), (&fast, &script_out));
    let (n, m) = (
        summary["mapped_back"]["branches"].as_u64().unwrap(),
        summary["mapped_back"]["branches_mapped"].as_u64().unwrap(),
    );
    assert_eq!(n, m, "{} branches unmapped", n - m);
    // Every straight run between two branches of the output maps back, and the runs over the
    // edges the layout made straight were cut into runs of the input and those edges (which
    // the branch profiles compared below include).
    let mapped = &summary["mapped_back"];
    assert_eq!(mapped["traces"], mapped["traces_mapped"], "{mapped}");
    assert!(mapped["trace_cuts"].as_u64().unwrap() > 0, "{mapped}");
    let counts = |p: &rivet_profile::Profile| -> Vec<String> {
        p.branches
            .iter()
            .map(|((from, to), c)| format!("{from:?} -> {to:?}: {}", c.count))
            .collect()
    };
    let (ca, cb) = (counts(&a), counts(&b));
    let only_in: Vec<&String> = ca.iter().filter(|x| !cb.contains(x)).collect();
    let only_out: Vec<&String> = cb.iter().filter(|x| !ca.contains(x)).collect();
    assert!(
        only_in.is_empty() && only_out.is_empty(),
        "{} edges differ; from the input only: {:?}; from the output only: {:?}",
        only_in.len() + only_out.len(),
        &only_in[..only_in.len().min(8)],
        &only_out[..only_out.len().min(8)]
    );
}

#[test]
fn samples_of_a_real_run_of_the_output_map_back_and_optimize_the_input() {
    let dir = scratch("optimized_profiles", "real_run");
    let (binary, fast) = optimized(&dir);
    let perf_data = dir.join("output.data");
    perf_record(&perf_data, 5000, |perf| {
        perf.arg(&fast).args(["switch", "30000000"]);
    });
    let profile = dir.join("output.prof");
    let summary = aggregate_json(&[
        "--original",
        s(&binary),
        s(&perf_data),
        s(&fast),
        "-o",
        s(&profile),
    ]);
    let mapped = &summary["mapped_back"];
    let (n, m) = (
        mapped["samples"].as_u64().unwrap(),
        mapped["samples_mapped"].as_u64().unwrap(),
    );
    assert!(n > 100, "{n} samples of the output");
    assert!(m * 100 >= n * 99, "{m} of {n} samples mapped back");
    // The profile is the input's: optimize takes it without --force.
    let again = dir.join("prog.fast2");
    let r = rivet(&[
        "optimize",
        s(&binary),
        "--profile",
        s(&profile),
        "-o",
        s(&again),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let run = |b: &Path| {
        Command::new(b)
            .args(["switch", "30000"])
            .output()
            .unwrap()
            .stdout
    };
    assert_eq!(run(&binary), run(&again), "same output before and after");
}

#[test]
fn rivet_output_is_refused_as_input_and_mismatches_get_one_line() {
    let dir = scratch("optimized_profiles", "refusals");
    let (binary, fast) = optimized(&dir);
    let profile = dir.join("input.prof");
    let out = dir.join("twice");
    for args in [
        vec![
            "optimize",
            s(&fast),
            "--profile",
            s(&profile),
            "-o",
            s(&out),
        ],
        vec!["rewrite", s(&fast), "-o", s(&out)],
        vec!["instrument", s(&fast), "-o", s(&out)],
    ] {
        let r = rivet(&args);
        assert_one_error_line(&r, "is Rivet's output");
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("rivet aggregate --original"),
            "{}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(!out.exists());
    }
    let perf_data = dir.join("input.data");
    // Samples of the output aggregated for the output itself: of no use, refused.
    let r = rivet(&["aggregate", s(&perf_data), s(&fast), "-o", s(&out)]);
    assert_one_error_line(&r, "is Rivet's output");
    // --original with a binary that is not Rivet's output.
    let r = rivet(&[
        "aggregate",
        "--original",
        s(&binary),
        s(&perf_data),
        s(&binary),
        "-o",
        s(&out),
    ]);
    assert_one_error_line(&r, "is not Rivet's output");
    // --original naming another binary than the one the output was made from.
    let other = build_instrument_program(&dir, "counts.c", "gcc", &["-O1"], "other");
    let script = dir.join("empty.txt");
    let fast_path = std::fs::canonicalize(&fast).unwrap();
    std::fs::write(
        &script,
        format!(
            "  4242 PERF_RECORD_MMAP2 4242/4242: [0x1000(0x100000) @ 0 fe:01 12 0]: r-xp {}\n  4242 cpu-clock:u: 1100\n",
            fast_path.display()
        ),
    )
    .unwrap();
    let r = rivet(&[
        "aggregate",
        "--perf-script",
        "--original",
        s(&other),
        s(&script),
        s(&fast),
        "-o",
        s(&out),
    ]);
    assert_one_error_line(&r, "was not made from");
    assert!(!out.exists());
}
