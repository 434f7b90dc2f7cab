//! `rivet aggregate` of Arm's profiling sources, on AArch64 corpus programs.
//!
//! No Arm hardware is here, so no perf.data of BRBE, ETM or SPE: each test writes the text
//! `perf script` prints for that source, in the format perf's source gives it, from a real
//! execution. `qemu-aarch64 -singlestep -d exec,nochain` logs every instruction the program
//! runs, in order; the binary's own decoded instructions say which steps were taken branches
//! and which fell through. From that one run come:
//!
//! - a CoreSight ETM trace decoded with `perf script -F pid,tid,event,flags,ip,addr
//!   --itrace=b`: every taken branch, `FROM => TO` (Linux `tools/perf/builtin-script.c`,
//!   `perf_sample__fprintf_bts`), flags named as in `tools/perf/util/trace-event-scripting.c`
//!   (`jcc`, `call`, `tr strt`...), the trace opened by `tr strt` from 0 and closed by `tr end`
//!   to 0 (`tools/perf/util/cs-etm.c`). The profile must hold every branch exactly as often as
//!   it ran, and every fall-through exactly as often as it ran: a trace is not a sample.
//! - BRBE branch stacks (`perf record -j any,u`, `-F pid,event,ip,brstack`): the 16 most recent
//!   branches every 37 branches, newest first, each `FROM/TO/P/-/-/CYCLES/TYPE/SPEC`
//!   (`print_bstack_flags`, types of `tools/perf/util/branch.c`). Exact against the stacks.
//! - SPE samples (`--itrace=bi`, `-F pid,tid,event,flags,addr,ip`): every 23rd operation, a
//!   branch as event `branch` with its target in the address field and `/not_taken/` in the
//!   flags when it fell through (`tools/perf/util/arm-spe.c`), the others as `instructions`
//!   with address 0. Exact against the sampled operations.
//! - timer samples (`cpu-clock:u`, `-F pid,event,ip`): every 13th instruction, exact per
//!   address.
//!
//! The ETM profile then optimizes the program (`--verify`), which must behave as before. What
//! is not modelled: the kernel's part of a system call (the trace runs straight over `svc`,
//! where ETM would show an exception and a return), and branches inside the libraries, which
//! no source would attribute to the binary anyway.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use common::corpus::{Entry, Target, check_on, corpus_of};
use common::{assert_one_error_line, rivet, s, scratch};
use rivet_arch::{Flow, Isa};
use rivet_elf::ElfFile;
use rivet_profile::{LocKind, Mode, Profile, native};

/// SHF_EXECINSTR: the sections holding code.
const EXECUTABLE: u64 = 0x4;

/// Every instruction of the binary's code sections: address -> (end, control flow).
struct Code {
    insts: BTreeMap<u64, (u64, Flow)>,
}

impl Code {
    fn of(binary: &Path) -> Code {
        let data = std::fs::read(binary).unwrap();
        let elf = ElfFile::parse(&data).unwrap();
        let isa = Isa::of(&elf);
        let mut insts = BTreeMap::new();
        for section in elf.sections().iter().filter(|s| s.flags & EXECUTABLE != 0) {
            for i in isa.decode_all(section.data, section.addr) {
                insts.insert(i.addr().get(), (i.end().get(), i.flow()));
            }
        }
        Code { insts }
    }

    fn contains(&self, addr: u64) -> bool {
        self.insts.contains_key(&addr)
    }

    fn end(&self, addr: u64) -> u64 {
        self.insts[&addr].0
    }

    fn flow(&self, addr: u64) -> Flow {
        self.insts[&addr].1
    }
}

/// The address of every instruction `binary` executed, in order (qemu, one instruction per
/// translated block, every block logged each time it runs).
fn executed(binary: &Path, lib_dir: &Path, dir: &Path) -> Vec<u64> {
    let log = dir.join("exec.log");
    let status = Command::new("qemu-aarch64")
        .args([
            "-L",
            "/usr/aarch64-linux-gnu",
            "-singlestep",
            "-d",
            "exec,nochain",
            "-D",
        ])
        .arg(&log)
        .arg("-E")
        .arg(format!("LD_LIBRARY_PATH={}", lib_dir.display()))
        .arg(binary)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)");
    assert!(status.code().is_some(), "{}: killed", binary.display());
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::remove_file(&log).unwrap();
    // Trace N: HOST [cs_base/PC/flags/cflags] symbol
    text.lines()
        .filter(|l| l.starts_with("Trace "))
        .filter_map(|l| {
            let pc = l.split('[').nth(1)?.split('/').nth(1)?;
            u64::from_str_radix(pc, 16).ok()
        })
        .collect()
}

/// The taken branches of a run that start or end in the binary, in order: a step that does
/// not go to the next instruction. (Steps from library code into the binary are branches: a
/// call or a return.)
fn taken_branches(code: &Code, pcs: &[u64]) -> Vec<(u64, u64)> {
    pcs.windows(2)
        .filter_map(|w| {
            let (p, q) = (w[0], w[1]);
            let taken = if code.contains(p) {
                q != code.end(p)
            } else {
                code.contains(q)
            };
            taken.then_some((p, q))
        })
        .collect()
}

/// perf's branch type of the branch at `from` (Linux `tools/perf/util/branch.c`).
fn brbe_type(code: &Code, from: u64) -> &'static str {
    if !code.contains(from) {
        return "RET";
    }
    match code.flow(from) {
        Flow::CondJump { .. } => "COND",
        Flow::Jump { .. } => "UNCOND",
        Flow::IndirectJump => "IND",
        Flow::Call { .. } => "CALL",
        Flow::IndirectCall => "IND_CALL",
        Flow::Return => "RET",
        _ => "N/A",
    }
}

/// perf's `flags` word of the branch at `from` (Linux `tools/perf/util/trace-event-scripting.c`).
fn flag_word(code: &Code, from: u64) -> &'static str {
    if !code.contains(from) {
        return "return";
    }
    match code.flow(from) {
        Flow::CondJump { .. } => "jcc",
        Flow::Call { .. } | Flow::IndirectCall => "call",
        Flow::Return => "return",
        _ => "jmp",
    }
}

const PID: u32 = 4242;

/// The mmap record of the binary's code segment, where a non-PIE binary is loaded.
fn mmap_line(binary: &Path) -> String {
    let data = std::fs::read(binary).unwrap();
    let elf = ElfFile::parse(&data).unwrap();
    let text = elf
        .segments()
        .iter()
        .find(|s| s.is_load() && s.flags & 1 != 0)
        .expect("an executable PT_LOAD");
    let start = text.vaddr.get() & !0xfff;
    let pgoff = text.offset.0 & !0xfff;
    let len = (text.vaddr.get() + text.filesz - start).next_multiple_of(0x1000);
    format!(
        "  {PID} PERF_RECORD_MMAP2 {PID}/{PID}: [{start:#x}({len:#x}) @ {pgoff:#x} fe:01 1234 0]: r-xp {}\n",
        std::fs::canonicalize(binary).unwrap().display()
    )
}

/// Writes `text` as perf script output and aggregates it against `binary`: the profile and
/// the JSON summary.
fn aggregate(binary: &Path, dir: &Path, name: &str, text: &str) -> (Profile, serde_json::Value) {
    let script = dir.join(format!("{name}.txt"));
    std::fs::write(&script, text).unwrap();
    let prof = dir.join(format!("{name}.prof"));
    let out = rivet(&[
        "aggregate",
        s(&script),
        s(binary),
        "-o",
        s(&prof),
        "--perf-script",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = serde_json::from_slice(&out.stdout).unwrap();
    let text = std::fs::read_to_string(&prof).unwrap();
    assert!(
        (text.starts_with("rivet-profile 3\n") || text.starts_with("rivet-profile 4\n"))
            && text.contains("\narch aarch64\n"),
        "{name}: the profile does not say it is of AArch64 code:\n{}",
        &text[..text.len().min(300)]
    );
    (native::parse(&text).unwrap(), summary)
}

/// Where the functions of `binary` (by profile name) and its PLT entries (`name@PLT`) start,
/// and the address ranges they cover: the places a profile can name.
struct Places {
    starts: BTreeMap<String, u64>,
    ranges: Vec<(u64, u64)>,
}

impl Places {
    fn contains(&self, addr: u64) -> bool {
        self.ranges.iter().any(|&(s, e)| s <= addr && addr < e)
    }

    /// The range holding `addr`.
    fn range_of(&self, addr: u64) -> Option<(u64, u64)> {
        self.ranges
            .iter()
            .copied()
            .find(|&(s, e)| s <= addr && addr < e)
    }
}

fn places(binary: &Path) -> Places {
    let data = std::fs::read(binary).unwrap();
    let elf = ElfFile::parse(&data).unwrap();
    let program = rivet_discover::discover(
        &elf,
        &rivet_discover::DiscoverOptions::with_cfi(rivet_discover::CfiRows::Ignore),
    )
    .unwrap();
    let names = rivet_passes::names::profile_names(&program);
    let mut starts = BTreeMap::new();
    let mut ranges = Vec::new();
    for f in &program.functions {
        starts.insert(names[f.id.0 as usize].clone(), f.range.start.get());
        ranges.push((f.range.start.get(), f.range.end.get()));
    }
    for p in &program.plt {
        starts.insert(format!("{}@PLT", p.name), p.addr.get());
        ranges.push((p.addr.get(), p.addr.get() + p.size));
    }
    Places { starts, ranges }
}

/// The profile's branch records between places of the binary, by address.
fn records(profile: &Profile, places: &Places) -> BTreeMap<(u64, u64), u64> {
    let mut out = BTreeMap::new();
    for ((from, to), c) in &profile.branches {
        if from.kind == LocKind::External || to.kind == LocKind::External {
            continue;
        }
        let at = |l: &rivet_profile::Location| places.starts[&l.name] + l.offset;
        *out.entry((at(from), at(to))).or_default() += c.count;
    }
    out
}

/// Adds the expected count of a fall-through from `from` (an instruction that did not branch
/// `times` times) to its next instruction.
fn add(map: &mut BTreeMap<(u64, u64), u64>, key: (u64, u64), times: u64) {
    *map.entry(key).or_default() += times;
}

struct Program {
    entry_name: &'static str,
    binary: PathBuf,
    lib_dir: PathBuf,
    code: Code,
    pcs: Run,
    places: Places,
    dir: PathBuf,
}

/// The address of every instruction one run executed, in order.
type Run = Arc<Vec<u64>>;

/// Counts by (from, to): branches, or fall-throughs from an instruction to the next.
type EdgeCounts = BTreeMap<(u64, u64), u64>;

/// A corpus program and its run, with a scratch directory of `test`'s own.
fn program(name: &'static str, test: &str) -> (Program, Vec<Entry>) {
    let (lib_dir, entries) = corpus_of(Target::Aarch64);
    let binary = entries
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} is not in the AArch64 corpus"))
        .path
        .clone();
    let dir = scratch("aggregate_arm", &format!("{test}-{name}"));
    let code = Code::of(&binary);
    // One emulated run per program, shared by the tests that read it (each takes a minute).
    static RUNS: Mutex<BTreeMap<&str, Arc<OnceLock<Run>>>> = Mutex::new(BTreeMap::new());
    let run = RUNS.lock().unwrap().entry(name).or_default().clone();
    let pcs = run
        .get_or_init(|| Arc::new(executed(&binary, &lib_dir, &dir)))
        .clone();
    assert!(
        pcs.iter().filter(|p| code.contains(**p)).count() > 1000,
        "{name}: qemu logged too little of the binary's own code"
    );
    let places = places(&binary);
    (
        Program {
            entry_name: name,
            binary,
            lib_dir,
            code,
            pcs,
            places,
            dir,
        },
        entries,
    )
}

/// Whether `a` and `b` lie in one function of the binary (what a fall-through run needs).
fn same_function(places: &Places, a: u64, b: u64) -> bool {
    places.range_of(a).is_some() && places.range_of(a) == places.range_of(b)
}

/// The ETM trace of the run and what the profile must hold: every taken branch between
/// places of the binary (returns are left out: they say nothing about layout), and every
/// fall-through at a block's end as often as the run fell through there.
fn etm_text(p: &Program) -> (String, EdgeCounts, BTreeMap<u64, u64>) {
    let branches = taken_branches(&p.code, &p.pcs);
    let mut text = mmap_line(&p.binary);
    writeln!(
        text,
        "{PID:>7}/{PID:<7} branches:u:   tr strt                          0 => {:>16x}",
        p.pcs[0]
    )
    .unwrap();
    let mut taken = BTreeMap::new();
    for &(from, to) in &branches {
        writeln!(
            text,
            "{PID:>7}/{PID:<7} branches:u:   {:<21} {from:>16x} => {to:>16x}",
            flag_word(&p.code, from)
        )
        .unwrap();
        if p.code.contains(from) && p.code.contains(to) && p.code.flow(from) != Flow::Return {
            add(&mut taken, (from, to), 1);
        }
    }
    writeln!(
        text,
        "{PID:>7}/{PID:<7} branches:u:   tr end   {:>16x} =>                0",
        p.pcs[p.pcs.len() - 1]
    )
    .unwrap();
    let mut fell_through: BTreeMap<u64, u64> = BTreeMap::new();
    for w in p.pcs.windows(2) {
        if p.code.contains(w[0]) && w[1] == p.code.end(w[0]) {
            *fell_through.entry(w[0]).or_default() += 1;
        }
    }
    (text, taken, fell_through)
}

#[test]
fn etm_trace_branches_give_exact_counts_and_optimize() {
    for name in ["switch_dense.gcc.O2.nopie", "virtual_calls.clang.O2.nopie"] {
        let (p, entries) = program(name, "etm");
        let (text, taken, fell_through) = etm_text(&p);
        let (profile, summary) = aggregate(&p.binary, &p.dir, "etm", &text);
        assert_eq!(profile.mode, Mode::Branches, "{name}");
        assert_eq!(profile.origin.keyword(), "trace", "{name}");
        assert_eq!(summary["source"], "trace", "{name}: {summary}");
        let got = records(&profile, &p.places);
        let mut fall_through_records = 0;
        for (&(from, to), &count) in &got {
            let mut expected = taken.get(&(from, to)).copied().unwrap_or(0);
            if to == p.code.end(from) {
                // A block's end that ran into the next block, as often as it did.
                expected += fell_through.get(&from).copied().unwrap_or(0);
                fall_through_records += 1;
            }
            assert_eq!(
                count, expected,
                "{name}: {from:#x} -> {to:#x} counted {count} times, ran {expected} times"
            );
        }
        // Every branch of the run is there (both ends in functions or PLT entries).
        for (&(from, to), &count) in &taken {
            if p.places.contains(from) && p.places.contains(to) {
                assert_eq!(
                    got.get(&(from, to)),
                    Some(&count),
                    "{name}: {from:#x} -> {to:#x}"
                );
            }
        }
        assert!(
            fall_through_records > 5,
            "{name}: {fall_through_records} fall-throughs"
        );
        assert_eq!(summary["samples_of_other_sources"], 0);

        // The exact profile drives the optimizer, and the result behaves as the original.
        let profile_path = p.dir.join("etm.prof");
        let out = p.dir.join("optimized");
        let run = rivet(&[
            "optimize",
            s(&p.binary),
            "--profile",
            s(&profile_path),
            "-o",
            s(&out),
            "--verify",
        ]);
        assert!(
            run.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let summary = String::from_utf8_lossy(&run.stdout);
        assert!(
            summary.contains("100.0% of the counts matched"),
            "{name}: {summary}"
        );
        let e = entries.iter().find(|e| e.name == p.entry_name).unwrap();
        assert_eq!(
            check_on(Target::Aarch64, &entries, e, &out, &p.lib_dir),
            Ok(true),
            "{name}"
        );
    }
}

#[test]
fn brbe_branch_stacks_give_the_stacks_branches_and_runs() {
    let (p, _) = program("virtual_calls.clang.O2.nopie", "brbe");
    let branches = taken_branches(&p.code, &p.pcs);
    let mut text = mmap_line(&p.binary);
    let mut expected_branches = BTreeMap::new();
    // (start, end) of every run between two consecutive branches of a stack.
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for end in (16..=branches.len()).step_by(37) {
        let stack: Vec<(u64, u64)> = branches[end - 16..end].iter().rev().copied().collect();
        write!(text, "{PID:>7} cycles:u: {:>16x}", stack[0].1).unwrap();
        for (i, &(from, to)) in stack.iter().enumerate() {
            // Every seventh mispredicted; cycles since the last branch as BRBE counts them.
            let event = if i % 7 == 3 { "M" } else { "P" };
            write!(
                text,
                " {from:#x}/{to:#x}/{event}/-/-/{}/{}/-",
                i + 1,
                brbe_type(&p.code, from)
            )
            .unwrap();
            if p.code.contains(from) && p.code.contains(to) && p.code.flow(from) != Flow::Return {
                add(&mut expected_branches, (from, to), 1);
            }
        }
        writeln!(text).unwrap();
        for w in stack.windows(2) {
            let (start, end) = (w[1].1, w[0].0);
            if start <= end && same_function(&p.places, start, end) {
                runs.push((start, end));
            }
        }
    }
    let (profile, summary) = aggregate(&p.binary, &p.dir, "brbe", &text);
    assert_eq!(profile.origin.keyword(), "lbr");
    assert_eq!(summary["source"], "branch-stacks");
    let got = records(&profile, &p.places);
    let mut fall_throughs = 0;
    for (&(from, to), &count) in &got {
        let mut expected = expected_branches.get(&(from, to)).copied().unwrap_or(0);
        if to == p.code.end(from) {
            let crossing = runs.iter().filter(|(s, e)| *s <= from && from < *e).count();
            expected += crossing as u64;
            fall_throughs += 1;
        }
        assert_eq!(count, expected, "{from:#x} -> {to:#x}");
    }
    assert!(fall_throughs > 5, "{fall_throughs} fall-throughs");
    for (&(from, to), count) in &expected_branches {
        if p.places.contains(from) && p.places.contains(to) {
            assert_eq!(got.get(&(from, to)), Some(count), "{from:#x} -> {to:#x}");
        }
    }
}

#[test]
fn spe_samples_give_sampled_branches_and_fall_throughs() {
    let (p, _) = program("switch_dense.gcc.O2.nopie", "spe");
    let mut text = mmap_line(&p.binary);
    let mut expected = BTreeMap::new();
    let mut branch_samples = 0;
    for (i, w) in p.pcs.windows(2).enumerate().filter(|(i, _)| i % 23 == 0) {
        let (pc, next) = (w[0], w[1]);
        let flow = p.code.contains(pc).then(|| p.code.flow(pc));
        let target = match flow {
            Some(Flow::CondJump { target } | Flow::Jump { target } | Flow::Call { target }) => {
                Some(target.get())
            }
            Some(Flow::IndirectJump | Flow::IndirectCall | Flow::Return) => Some(next),
            _ => None,
        };
        let Some(target) = target else {
            // Not a branch (or not the binary's): what `--itrace=i` makes of it.
            writeln!(
                text,
                "{PID:>7}/{PID:<7} instructions:   {:>16x} {pc:>16x}",
                0
            )
            .unwrap();
            continue;
        };
        branch_samples += 1;
        // Only a conditional branch can fall through; any other branch to the next
        // instruction (a switch's first case right after its `br`) was taken.
        let taken = !matches!(flow, Some(Flow::CondJump { .. })) || next != p.code.end(pc);
        let flags = format!(
            "{}{}",
            flag_word(&p.code, pc),
            if taken { "" } else { "/not_taken/" }
        );
        // Every ninth branch sample as older perf named mispredicted ones.
        let event = if i % 9 == 0 { "branch-miss" } else { "branch" };
        writeln!(
            text,
            "{PID:>7}/{PID:<7} {event}:   {flags:<21} {target:>16x} {pc:>16x}"
        )
        .unwrap();
        if !taken {
            add(&mut expected, (pc, next), 1);
        } else if p.places.contains(pc) && p.places.contains(target) && flow != Some(Flow::Return) {
            add(&mut expected, (pc, target), 1);
        }
    }
    assert!(branch_samples > 50, "{branch_samples} branch samples");
    let (profile, summary) = aggregate(&p.binary, &p.dir, "spe", &text);
    assert_eq!(profile.origin.keyword(), "spe");
    assert_eq!(profile.mode, Mode::Branches);
    assert_eq!(summary["source"], "spe");
    assert_eq!(summary["spe_branches_without_outcome"], 0);
    assert_eq!(summary["not_taken_dropped"], 0, "{summary}");
    assert!(summary["not_taken"].as_u64().unwrap() > 10, "{summary}");
    assert_eq!(records(&profile, &p.places), expected);
}

#[test]
fn timer_samples_land_on_their_instructions() {
    let (p, _) = program("switch_dense.gcc.O2.nopie", "timer");
    let mut text = mmap_line(&p.binary);
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
    for &pc in p.pcs.iter().step_by(13) {
        writeln!(text, "{PID:>7} cpu-clock:u: {pc:>16x}").unwrap();
        if p.places.contains(pc) {
            *expected.entry(pc).or_default() += 1;
        }
    }
    let (profile, summary) = aggregate(&p.binary, &p.dir, "timer", &text);
    assert_eq!(summary["source"], "samples");
    assert!(matches!(profile.mode, Mode::Samples { .. }));
    let got: BTreeMap<u64, u64> = profile
        .samples
        .iter()
        .map(|(l, c)| (p.places.starts[&l.name] + l.offset, *c))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn text_of_no_source_and_mixed_sources_get_one_error_line() {
    let (_, entries) = corpus_of(Target::Aarch64);
    let binary = &entries
        .iter()
        .find(|e| e.name == "switch_dense.gcc.O2.nopie")
        .unwrap()
        .path;
    let dir = scratch("aggregate_arm", "errors");
    let garbage = dir.join("notes.txt");
    std::fs::write(&garbage, "these are\nnot perf samples\n").unwrap();
    let prof = dir.join("x.prof");
    let out = rivet(&[
        "aggregate",
        s(&garbage),
        s(binary),
        "-o",
        s(&prof),
        "--perf-script",
    ]);
    assert_one_error_line(&out, "is not `perf script` output");
    let mut mixed = mmap_line(binary);
    mixed.push_str("   4242 cycles:u: 400600 0x400610/0x400600/P/-/-/1/COND/-\n");
    mixed.push_str("   4242/4242 branches:u:   jcc   400610 =>   400600\n");
    let mixed_path = dir.join("mixed.txt");
    std::fs::write(&mixed_path, &mixed).unwrap();
    let out = rivet(&[
        "aggregate",
        s(&mixed_path),
        s(binary),
        "-o",
        s(&prof),
        "--perf-script",
    ]);
    assert_one_error_line(&out, "mixes samples of branch-stacks and trace");
    // Naming the source reads it alone.
    let out = rivet(&[
        "aggregate",
        s(&mixed_path),
        s(binary),
        "-o",
        s(&prof),
        "--perf-script",
        "--perf-source",
        "trace",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["samples_of_other_sources"], 1, "{summary}");

    // An AArch64 profile is refused for an x86-64 binary, --force or not.
    let (_, x86) = corpus_of(Target::X86_64);
    let x86_binary = &x86
        .iter()
        .find(|e| e.name == "switch_dense.gcc.O2.nopie")
        .unwrap()
        .path;
    let out = rivet(&[
        "optimize",
        s(x86_binary),
        "--profile",
        s(&prof),
        "-o",
        s(&dir.join("wrong")),
        "--force",
    ]);
    assert_one_error_line(&out, "profiles aarch64 code");
}
