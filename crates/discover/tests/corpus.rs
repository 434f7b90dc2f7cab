//! Discovery on the test corpus: C and C++ programs built at test time with gcc-12 and
//! clang-19 at -O0/-O2/-O3, PIE and non-PIE, with `--emit-relocs` (see tests/corpus), for
//! x86-64 and, cross-compiled, for AArch64 (with `.cold` splitting and PAC/BTI variants).
//!
//! These tests assert concrete facts of the CFGs (the dense switch has 12 targets, the
//! threaded interpreter's 16 labels are resolved, landing pads are found...) and the share of
//! functions and bytes modelled exactly, the same facts for both instruction sets. The
//! corpora are built (and cached) by `scripts/build-corpus.sh` and
//! `scripts/build-corpus-aarch64.sh`; a missing compiler fails the test with the package to
//! install.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rivet_discover::{CfiRows, DiscoverOptions, discover};
use rivet_elf::{ElfFile, ElfKind, Vaddr};
use rivet_ir::*;

mod common;

/// Which corpus: the same sources built for each instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    X86_64,
    Aarch64,
}

const TARGETS: [Target; 2] = [Target::X86_64, Target::Aarch64];

struct Entry {
    /// The file name, prefixed with the target (`aarch64:switch_dense.gcc.O2.pie`).
    name: String,
    kind: String,
    program: String,
    compiler: String,
    opt: String,
    path: PathBuf,
}

fn corpus(target: Target) -> &'static [Entry] {
    static X86_64: OnceLock<Vec<Entry>> = OnceLock::new();
    static AARCH64: OnceLock<Vec<Entry>> = OnceLock::new();
    let (cell, script, prefix) = match target {
        Target::X86_64 => (&X86_64, "scripts/build-corpus.sh", "x86-64"),
        Target::Aarch64 => (&AARCH64, "scripts/build-corpus-aarch64.sh", "aarch64"),
    };
    cell.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = Command::new("bash")
            .arg(root.join(script))
            .output()
            .unwrap_or_else(|e| panic!("running {script}: {e}"));
        assert!(
            out.status.success(),
            "{script} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        let dir = PathBuf::from(stdout.lines().last().expect("corpus directory").trim());
        let manifest = std::fs::read_to_string(dir.join("manifest.tsv")).unwrap();
        let mut lines = manifest.lines();
        let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let (c_name, c_kind, c_prog, c_cc, c_opt, c_path) = (
            col("name"),
            col("kind"),
            col("program"),
            col("compiler"),
            col("opt"),
            col("path"),
        );
        let entries: Vec<Entry> = lines
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                Entry {
                    name: format!("{prefix}:{}", f[c_name]),
                    kind: f[c_kind].to_string(),
                    program: f[c_prog].to_string(),
                    compiler: f[c_cc].to_string(),
                    opt: f[c_opt].to_string(),
                    path: dir.join(f[c_path]),
                }
            })
            .collect();
        assert!(
            entries.len() > 100,
            "{script}: the corpus has only {} binaries",
            entries.len()
        );
        entries
    })
}

/// Both corpora, one after the other.
fn all_entries() -> impl Iterator<Item = &'static Entry> {
    TARGETS.into_iter().flat_map(corpus)
}

fn load(e: &Entry) -> Program {
    let bytes = std::fs::read(&e.path).unwrap();
    let elf = ElfFile::parse(&bytes).unwrap_or_else(|err| panic!("{}: {err}", e.name));
    discover(&elf, &DiscoverOptions::default()).unwrap_or_else(|err| panic!("{}: {err}", e.name))
}

fn variants(program: &str) -> impl Iterator<Item = &'static Entry> + '_ {
    all_entries().filter(move |e| e.program == program && e.kind == "exe")
}

fn function<'p>(p: &'p Program, name: &'p str, binary: &str) -> &'p Function {
    p.functions_named(name)
        .next()
        .unwrap_or_else(|| panic!("{binary}: no function {name}"))
}

/// True when the function jumps through a register or memory somewhere.
fn has_indirect_jump(f: &Function) -> bool {
    f.insts
        .iter()
        .any(|i| i.flow() == rivet_arch::Flow::IndirectJump)
}

/// Distinct blocks reached from `f`'s jump tables and computed gotos.
fn indirect_targets(f: &Function) -> BTreeSet<Vaddr> {
    f.blocks
        .iter()
        .flat_map(|b| &b.succs)
        .filter(|e| matches!(e.kind, EdgeKind::JumpTable | EdgeKind::ComputedGoto))
        .map(|e| f.block(e.to).start)
        .collect()
}

#[test]
fn whole_corpus_is_modelled() {
    for target in TARGETS {
        whole_corpus_of(target);
    }
}

fn whole_corpus_of(target: Target) {
    let (mut functions, mut simple, mut bytes, mut simple_bytes) = (0usize, 0usize, 0u64, 0u64);
    let mut skipped = Vec::new();
    for e in corpus(target) {
        let p = load(e);
        assert_eq!(
            p.info.relocation_mode,
            RelocationMode::Available,
            "{}",
            e.name
        );
        for f in &p.functions {
            functions += 1;
            bytes += f.range.len();
            match f.skip_reason() {
                None => {
                    simple += 1;
                    simple_bytes += f.range.len();
                    // Simple means every instruction is in exactly one block, in order.
                    let covered: u32 = f.blocks.iter().map(|b| b.insts.len() as u32).sum();
                    assert_eq!(covered as usize, f.insts.len(), "{}: {}", e.name, f.name());
                }
                Some(reason) => skipped.push(format!("{}: {} ({reason})", e.name, f.name())),
            }
        }
    }
    let fn_pct = simple as f64 * 100.0 / functions as f64;
    let byte_pct = simple_bytes as f64 * 100.0 / bytes as f64;
    eprintln!(
        "{target:?} corpus: {} binaries, {functions} functions, {simple} simple ({fn_pct:.2}%), \
         {simple_bytes}/{bytes} bytes ({byte_pct:.2}%)",
        corpus(target).len()
    );
    for s in &skipped {
        eprintln!("  skipped {s}");
    }
    // x86-64's corpus has hand-written oddities of glibc's start files the AArch64 one lacks;
    // both must reach the AArch64 issue's bar of 99.5% of bytes.
    let fn_bar = match target {
        Target::X86_64 => 99.0,
        Target::Aarch64 => 99.5,
    };
    assert!(
        fn_pct >= fn_bar,
        "{target:?}: only {fn_pct:.2}% of functions are simple"
    );
    assert!(
        byte_pct >= 99.5,
        "{target:?}: only {byte_pct:.2}% of code bytes are simple"
    );
}

#[test]
fn dense_switch_has_twelve_targets() {
    for e in variants("switch_dense") {
        let p = load(e);
        let f = function(&p, "op_dense", &e.name);
        assert!(f.is_simple(), "{}: {:?}", e.name, f.status);
        if !has_indirect_jump(f) {
            // clang for AArch64 lowers this switch to a chain of compares at every level
            // (`objdump -d` shows no `br` in op_dense): nothing to find.
            assert!(
                e.name.starts_with("aarch64:switch_dense.clang"),
                "{}",
                e.name
            );
            assert!(f.jump_tables.is_empty(), "{}", e.name);
            continue;
        }
        assert_eq!(f.jump_tables.len(), 1, "{}", e.name);
        let jt = &f.jump_tables[0];
        assert_eq!(jt.entries.len(), 12, "{}", e.name);
        let distinct: BTreeSet<_> = jt.entries.iter().collect();
        assert_eq!(distinct.len(), 12, "{}", e.name);
        assert!(
            jt.default_target.is_some(),
            "{}: range check not found",
            e.name
        );
        assert_eq!(indirect_targets(f).len(), 12, "{}", e.name);
        // Every entry is the start of a block of op_dense.
        for t in &jt.entries {
            assert!(
                f.block_at(*t).is_some(),
                "{}: entry {t} is no block",
                e.name
            );
        }
    }
}

#[test]
fn nested_and_holey_switches() {
    for e in variants("switch_sparse_nested") {
        let p = load(e);
        for name in ["holes", "nested"] {
            let f = function(&p, name, &e.name);
            assert!(f.is_simple(), "{}: {name}: {:?}", e.name, f.status);
            if !has_indirect_jump(f) {
                // Both compilers lower `nested` for AArch64 to compares (no `br` in it).
                assert!(
                    e.name.starts_with("aarch64:") && name == "nested",
                    "{}",
                    e.name
                );
                assert!(f.jump_tables.is_empty(), "{}", e.name);
                continue;
            }
            assert!(
                !f.jump_tables.is_empty(),
                "{}: {name} has no jump table",
                e.name
            );
        }
        // Unoptimized, every switch of `nested` keeps its own table: the outer one and the
        // inner ones.
        let nested = function(&p, "nested", &e.name);
        if e.opt == "O0" && has_indirect_jump(nested) {
            assert!(nested.jump_tables.len() >= 2, "{}", e.name);
        }
    }
}

#[test]
fn computed_goto_labels_are_resolved() {
    for e in variants("computed_goto") {
        let p = load(e);
        let run = function(&p, "run", &e.name);
        assert!(run.is_simple(), "{}: {:?}", e.name, run.status);
        assert_eq!(
            indirect_targets(run).len(),
            16,
            "{}: run's 16 labels",
            e.name
        );
        // regvm's table is a local array: its labels are stored by `lea` instructions. The
        // compiler may fold uses of a label into direct jumps (gcc -O2 keeps 3 of the 4) or
        // into a table in .rodata (clang), but every label whose address is stored must be a
        // target of the dispatch jumps.
        let regvm = function(&p, "regvm", &e.name);
        assert!(regvm.is_simple(), "{}: {:?}", e.name, regvm.status);
        let targets = indirect_targets(regvm);
        let taken: BTreeSet<Vaddr> = regvm
            .blocks
            .iter()
            .filter(|b| b.is_address_taken)
            .map(|b| b.start)
            .collect();
        assert!(
            targets.len() >= 3,
            "{}: regvm has {} labels",
            e.name,
            targets.len()
        );
        assert!(
            targets.is_superset(&taken),
            "{}: {targets:?} misses some of {taken:?}",
            e.name
        );
    }
}

#[test]
fn landing_pads_are_found() {
    for e in all_entries().filter(|e| e.program == "exceptions") {
        let p = load(e);
        let pads: usize = p
            .functions
            .iter()
            .map(|f| f.blocks.iter().filter(|b| b.is_landing_pad).count())
            .sum();
        assert!(pads >= 5, "{}: only {pads} landing pads", e.name);
        for f in &p.functions {
            for call in &f.calls {
                let Some(lp) = call.landing_pad else { continue };
                let here = f.range.contains(lp)
                    && f.block_at(lp).is_some_and(|b| f.block(b).is_landing_pad);
                let in_fragment = !f.range.contains(lp)
                    && p.function_containing(lp)
                        .is_some_and(|g| g.block_at(lp).is_some());
                assert!(
                    here || in_fragment,
                    "{}: {} lands at {lp}",
                    e.name,
                    f.name()
                );
            }
        }
    }
}

#[test]
fn tail_calls_and_noreturn() {
    for e in variants("tailcalls_noreturn") {
        let p = load(e);
        // gcc may specialize them (`fatal.constprop.0`).
        let named = |base: &str| {
            p.functions
                .iter()
                .find(|f| f.name() == base || f.name().starts_with(&format!("{base}.")))
                .unwrap_or_else(|| panic!("{}: no function {base}", e.name))
        };
        let (finish, fatal) = (named("finish"), named("fatal"));
        for f in &p.functions {
            for call in &f.calls {
                if let CallTarget::Function {
                    function: callee, ..
                } = call.target
                    && (callee == finish.id || callee == fatal.id)
                {
                    assert!(
                        call.noreturn,
                        "{}: call at {} not noreturn",
                        e.name, call.at
                    );
                }
                if let CallTarget::Plt { name, .. } = &call.target
                    && (name == "abort" || name == "exit")
                {
                    assert!(call.noreturn, "{}: call to {name} not noreturn", e.name);
                }
            }
        }
        if e.opt != "O0" {
            let tail_calls = p
                .functions
                .iter()
                .flat_map(|f| &f.blocks)
                .filter(|b| {
                    matches!(
                        b.terminator,
                        Terminator::TailCall { .. } | Terminator::CondTailCall { .. }
                    )
                })
                .count();
            assert!(tail_calls >= 3, "{}: only {tail_calls} tail calls", e.name);
        }
    }
}

#[test]
fn cold_fragments_are_linked_to_their_parent() {
    let mut seen = 0;
    for e in all_entries().filter(|e| e.opt == "O2split" && e.kind == "exe") {
        let p = load(e);
        for f in p.functions.iter().filter(|f| f.name().contains(".cold")) {
            seen += 1;
            let parent = f
                .parent
                .unwrap_or_else(|| panic!("{}: {} has no parent", e.name, f.name()));
            assert_eq!(parent.kind, PartKind::ColdFragment);
            let parent_fn = p.function(parent.function);
            assert_eq!(
                f.name().split(".cold").next().unwrap(),
                parent_fn.name(),
                "{}",
                e.name
            );
            assert!(f.is_simple(), "{}: {}: {:?}", e.name, f.name(), f.status);
            let jumps_to_cold = parent_fn
                .blocks
                .iter()
                .flat_map(|b| &b.fragment_succs)
                .any(|fe| fe.function == f.id);
            assert!(
                jumps_to_cold,
                "{}: {} never branches to {}",
                e.name,
                parent_fn.name(),
                f.name()
            );
        }
    }
    assert!(
        seen >= 3,
        "only {seen} .cold fragments in the O2split builds"
    );
}

#[test]
fn shared_library_and_its_user() {
    let libs: Vec<_> = all_entries().filter(|e| e.kind == "shared-lib").collect();
    assert!(!libs.is_empty());
    for e in libs {
        let p = load(e);
        assert_eq!(p.info.kind, ElfKind::SharedLibrary, "{}", e.name);
        assert!(p.functions.iter().all(|f| f.is_simple()), "{}", e.name);
    }
    for e in variants("shared_user") {
        let p = load(e);
        assert!(p.info.kind != ElfKind::SharedLibrary, "{}", e.name);
        assert!(!p.plt.is_empty(), "{}: no PLT stubs", e.name);
    }
}

/// `CfiRows::Check` (profile-guided optimize) judges every function as `Keep` does, so the
/// same functions are skipped and the same ones move; only the rows themselves are dropped.
#[test]
fn checked_unwind_rows_skip_what_kept_ones_do() {
    let mut with_rows = 0;
    for e in all_entries().filter(|e| e.opt == "O2") {
        let bytes = std::fs::read(&e.path).unwrap();
        let elf = ElfFile::parse(&bytes).unwrap();
        let discover_with = |cfi| {
            discover(
                &elf,
                &DiscoverOptions {
                    cfi,
                    ..Default::default()
                },
            )
            .unwrap()
        };
        let kept = discover_with(CfiRows::Keep);
        let checked = discover_with(CfiRows::Check);
        assert!(
            checked.functions.iter().all(|f| f.cfi.is_empty()),
            "{}",
            e.name
        );
        with_rows += kept.functions.iter().filter(|f| !f.cfi.is_empty()).count();
        let statuses =
            |p: &Program| -> Vec<_> { p.functions.iter().map(|f| f.status.clone()).collect() };
        assert_eq!(statuses(&kept), statuses(&checked), "{}", e.name);
        let strip = |mut p: Program| {
            p.functions.iter_mut().for_each(|f| f.cfi.clear());
            rivet_ir::dump::dump_program(&p)
        };
        assert_eq!(strip(kept), strip(checked), "{}", e.name);
    }
    assert!(
        with_rows > 1000,
        "only {with_rows} functions with unwind rows"
    );
}

/// Discovery that keeps the model of some families only (`Models::NamedFamilies`) gives the
/// model of discovering every function and releasing the others (`common::named_families`).
#[test]
fn modelling_named_families_is_releasing_the_rest() {
    let (mut kept, mut released) = (0, 0);
    for e in all_entries().filter(|e| e.opt == "O2") {
        let bytes = std::fs::read(&e.path).unwrap();
        let (k, r) = common::assert_named_families_match(&e.name, &ElfFile::parse(&bytes).unwrap());
        kept += k;
        released += r;
    }
    assert!(
        released > 1000 && kept > 500,
        "{released} functions released, {kept} kept"
    );
}

#[test]
fn discovery_is_deterministic_across_thread_counts() {
    let samples: Vec<_> = TARGETS
        .into_iter()
        .flat_map(|t| {
            corpus(t)
                .iter()
                .filter(|e| e.compiler == "gcc" && e.opt == "O2" && e.kind == "exe")
                .take(6)
        })
        .collect();
    for e in samples {
        let bytes = std::fs::read(&e.path).unwrap();
        let elf = ElfFile::parse(&bytes).unwrap();
        let dump = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let p = discover(&elf, &DiscoverOptions::default()).unwrap();
                rivet_ir::dump::dump_program(&p)
            })
        };
        assert_eq!(dump(1), dump(4), "{}", e.name);
    }
}

/// Two files each with a local `helper`: two functions, told apart by their file symbols,
/// and calls from each file resolve to their own.
#[test]
fn same_named_locals_in_different_files() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("locals");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("one.c"),
        "__attribute__((noinline)) static int helper(int x) { return x * 3 + 1; }\n\
         int one(int x) { return helper(x) + 5; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("two.c"),
        "__attribute__((noinline)) static int helper(int x) { return x ^ 0x55; }\n\
         int one(int);\n\
         int main(int argc, char **argv) { (void)argv; return one(argc) + helper(argc) - 9; }\n",
    )
    .unwrap();
    let bin = dir.join("locals");
    let status = Command::new("gcc")
        .args(["-O2", "-Wl,--emit-relocs", "-o"])
        .arg(&bin)
        .arg(dir.join("one.c"))
        .arg(dir.join("two.c"))
        .status()
        .expect("gcc");
    assert!(status.success());
    let bytes = std::fs::read(&bin).unwrap();
    let elf = ElfFile::parse(&bytes).unwrap();
    let p = discover(&elf, &DiscoverOptions::default()).unwrap();
    let helpers: Vec<_> = p.functions_named("helper").collect();
    assert_eq!(helpers.len(), 2);
    let mut names: Vec<String> = helpers.iter().map(|f| f.qualified_name()).collect();
    names.sort();
    assert_eq!(names, vec!["helper/one.c", "helper/two.c"]);
    for (caller, file) in [("one", "one.c"), ("main", "two.c")] {
        let f = p.functions_named(caller).next().unwrap();
        let callee = f
            .calls
            .iter()
            .find_map(|c| match c.target {
                CallTarget::Function { function, .. }
                    if p.function(function).name() == "helper" =>
                {
                    Some(p.function(function))
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("{caller} does not call helper"));
        assert_eq!(callee.file.as_deref(), Some(file), "{caller}");
    }
}

/// objdump's `name@plt` labels (its own reading of the PLT, from the relocations and the
/// entry size GNU ld writes), as `(address, name)`.
fn objdump_plt_labels(e: &Entry) -> BTreeSet<(u64, String)> {
    let tool = if e.name.starts_with("aarch64:") {
        "aarch64-linux-gnu-objdump"
    } else {
        "objdump"
    };
    let out = Command::new(tool)
        .args(["-d", "--no-show-raw-insn"])
        .arg(&e.path)
        .output()
        .unwrap_or_else(|err| panic!("running {tool}: {err}"));
    assert!(out.status.success(), "{tool} failed on {}", e.name);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // "0000000000400770 <_setjmp@plt>:"
            let (addr, rest) = l.split_once(" <")?;
            let name = rest.strip_suffix("@plt>:")?;
            Some((u64::from_str_radix(addr, 16).ok()?, name.to_string()))
        })
        .collect()
}

/// Every direct call into a PLT lands on the start of a stub Rivet found, and Rivet's
/// stubs are objdump's. objdump places AArch64 entries 16 bytes apart, which lld's
/// BTI-marked PLTs are not (24-byte entries, `adrp` first: lld leaves the `bti c` out
/// where no entry's address is taken); there the calls are the only witness.
#[test]
fn plt_stubs_are_where_calls_and_objdump_put_them() {
    let (mut checked, mut bti_marked) = (0, 0);
    for e in all_entries().filter(|e| e.kind == "exe") {
        let p = load(e);
        if p.plt.is_empty() {
            continue;
        }
        let starts: BTreeSet<u64> = p.plt.iter().map(|s| s.addr.get()).collect();
        let (low, high) = (
            p.plt.iter().map(|s| s.addr.get()).min().unwrap(),
            p.plt.iter().map(|s| s.addr.get() + s.size).max().unwrap(),
        );
        let mut calls = 0;
        for f in &p.functions {
            for inst in &f.insts {
                if let rivet_arch::Flow::Call { target } = inst.flow()
                    && (low..high).contains(&target.get())
                {
                    assert!(
                        starts.contains(&target.get()),
                        "{}: {} calls {target} inside a PLT stub",
                        e.name,
                        f.name()
                    );
                    calls += 1;
                }
            }
        }
        assert!(calls > 0, "{}: no calls into the PLT", e.name);
        let lld_bti = e.opt == "O2bti" && e.compiler == "clang";
        if !lld_bti {
            let found: BTreeSet<(u64, String)> = p
                .plt
                .iter()
                .map(|s| (s.addr.get(), s.name.split('@').next().unwrap().to_string()))
                .collect();
            assert_eq!(found, objdump_plt_labels(e), "{}: PLT stubs", e.name);
        }
        if e.opt == "O2bti" {
            assert!(p.plt.iter().all(|s| s.size == 24), "{}: BTI stubs", e.name);
            bti_marked += 1;
        }
        checked += 1;
    }
    assert!(checked > 100, "only {checked} binaries with PLT stubs");
    assert!(bti_marked >= 10, "only {bti_marked} BTI-marked binaries");
}
