//! Evaluation harness for the AArch64 decoder crates Rivet could use (issue 34).
//!
//! `correctness ELF...`: every instruction word that binutils objdump and llvm-objdump-19
//! print for the executable sections of the given files is decoded by each crate at its
//! address; the crate's text is reduced to a few facts (mnemonic, PC-relative target,
//! general-register numbers and widths, the TBZ bit) and compared with the same facts
//! read from both references. A crate agrees when it matches either reference, since
//! the two references already choose different aliases in places.
//! Words are deduplicated: a word decodes the same everywhere once PC-relative targets
//! are expressed as offsets, so each unique word is decoded once and weighted by its
//! number of occurrences.
//!
//! `speed ELF [REPS]`: linear sweep over `.text` (every 4-byte word), best of REPS.
//!
//! `api`: prints what each crate's structured API returns for a few Rivet-relevant
//! instructions (branch target, registers), to show what Rivet can use without text.

mod classify;
mod facts;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::process::Command;
use std::time::Instant;

use facts::{is_rivet_form, Facts};

/// One decoder under test: decodes a word at an address into text, or fails.
trait Dec {
    fn name(&self) -> &'static str;
    fn text(&self, word: u32, pc: u64) -> Option<String>;
}

struct Yaxpeax(yaxpeax_arm::armv8::a64::InstDecoder);
impl Dec for Yaxpeax {
    fn name(&self) -> &'static str {
        "yaxpeax-arm 0.5.0"
    }
    fn text(&self, word: u32, _pc: u64) -> Option<String> {
        use yaxpeax_arch::Decoder;
        let bytes = word.to_le_bytes();
        let mut reader = yaxpeax_arch::U8Reader::new(&bytes);
        self.0.decode(&mut reader).ok().map(|i| i.to_string())
    }
}

struct Bad64;
impl Dec for Bad64 {
    fn name(&self) -> &'static str {
        "bad64 0.13.0"
    }
    fn text(&self, word: u32, pc: u64) -> Option<String> {
        bad64::decode(word, pc).ok().map(|i| i.to_string())
    }
}

struct Disarm64;
impl Dec for Disarm64 {
    fn name(&self) -> &'static str {
        "disarm64 0.2.0"
    }
    fn text(&self, word: u32, pc: u64) -> Option<String> {
        use disarm64::InsnDisplay;
        disarm64::decoder::decode(word).map(|i| i.display_at(pc).to_string())
    }
}

struct Capstone(capstone::Capstone);
impl Capstone {
    fn new(detail: bool) -> Capstone {
        use capstone::prelude::*;
        let cs = capstone::Capstone::new()
            .arm64()
            .mode(arch::arm64::ArchMode::Arm)
            .detail(detail)
            .build()
            .expect("capstone arm64 handle");
        Capstone(cs)
    }
}
impl Dec for Capstone {
    fn name(&self) -> &'static str {
        "capstone 0.14.0 (C 5.0.6)"
    }
    fn text(&self, word: u32, pc: u64) -> Option<String> {
        let insns = self.0.disasm_count(&word.to_le_bytes(), pc, 1).ok()?;
        let i = insns.iter().next()?;
        Some(format!(
            "{} {}",
            i.mnemonic().unwrap_or(""),
            i.op_str().unwrap_or("")
        ))
    }
}

fn decoders() -> Vec<Box<dyn Dec>> {
    vec![
        Box::new(Yaxpeax(Default::default())),
        Box::new(Bad64),
        Box::new(Disarm64),
        Box::new(Capstone::new(false)),
    ]
}

/// What the references say about one unique word.
struct RefWord {
    pc: u64,
    gnu: Option<String>,  // None: binutils called it undefined
    llvm: Option<String>, // None: llvm-objdump called it <unknown>
    count: u64,
    file: String,
}

/// Parses `objdump -d` output: address -> (word, text or None when undefined).
/// Data (`.word`, `.byte`, ...) is skipped.
fn parse_objdump(out: &str) -> HashMap<u64, (u32, Option<String>)> {
    let mut map = HashMap::new();
    for line in out.lines() {
        let Some((addr, rest)) = line.split_once(':') else {
            continue;
        };
        let addr = addr.trim();
        if addr.is_empty() || !line.starts_with(' ') || !addr.bytes().all(|b| b.is_ascii_hexdigit())
        {
            continue;
        }
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let rest = rest.trim_start();
        // "d503201f \tnop": both print the instruction as one 32-bit hex word
        let Some((w, text)) = rest.split_once(|c: char| c.is_whitespace()) else {
            continue;
        };
        if w.len() != 8 {
            continue; // .byte / .short data
        }
        let Ok(word) = u32::from_str_radix(w, 16) else {
            continue;
        };
        let text = text.replace('\t', " ");
        let t = text.trim();
        if t.starts_with(".word")
            || t.starts_with(".byte")
            || t.starts_with(".short")
            || t.starts_with(".hword")
        {
            continue;
        }
        let undefined =
            t.starts_with(".inst") || t.contains("<unknown>") || t.contains("undefined");
        map.insert(
            addr,
            (word, if undefined { None } else { Some(t.to_string()) }),
        );
    }
    map
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 objdump output")
}

fn collect_references(files: &[String]) -> (BTreeMap<u32, RefWord>, u64) {
    let mut words: BTreeMap<u32, RefWord> = BTreeMap::new();
    let mut total = 0u64;
    for f in files {
        let gnu = parse_objdump(&run("aarch64-linux-gnu-objdump", &["-d", "-w", f]));
        let llvm = parse_objdump(&run("llvm-objdump-19", &["-d", "--no-print-imm-hex", f]));
        for (addr, (word, gtext)) in &gnu {
            let Some((lword, ltext)) = llvm.get(addr) else {
                continue;
            };
            if lword != word {
                continue; // one of them treats this as data
            }
            total += 1;
            words
                .entry(*word)
                .and_modify(|r| r.count += 1)
                .or_insert_with(|| RefWord {
                    pc: *addr,
                    gnu: gtext.clone(),
                    llvm: ltext.clone(),
                    count: 1,
                    file: f.rsplit('/').next().unwrap_or(f).to_string(),
                });
        }
    }
    (words, total)
}

#[derive(Default)]
struct Tally {
    fail: (u64, u64), // (unique, instances): references decode it, the crate does not
    accepts_invalid: (u64, u64), // both references reject it, the crate decodes it
    mnemonic: (u64, u64), // mnemonic agrees with neither reference, nor is the base form of its alias
    base_form: (u64, u64), // the crate prints the base instruction where the references print an alias
    unformatted: (u64, u64), // decoded, but the text has placeholders instead of operands
    operands: (u64, u64),  // same mnemonic as a reference, different registers/target/bit
    operand_examples: Vec<String>,
    rivet_checked: (u64, u64), // Rivet forms compared on all facts
    rivet_bad: (u64, u64),     // Rivet forms where a fact differs (or decode failed)
    fail_by_group: BTreeMap<String, (u64, u64, Vec<String>)>,
    mnemonic_pairs: BTreeMap<(String, String), (u64, u64, u32, u64)>, // -> (unique, instances, example word, pc)
    rivet_examples: Vec<String>,
    rivet_by_kind: BTreeMap<String, (u64, u64)>, // "<ref mnemonic>: not decoded | differs"
}

fn add(t: &mut (u64, u64), n: u64) {
    t.0 += 1;
    t.1 += n;
}

/// A coarse group of a reference mnemonic for the failure histogram.
fn group(m: &str, text: &str) -> String {
    let z = text.contains(" z") || text.contains("{z") || text.contains(" p") && text.contains("/");
    let sve_scalar = [
        "addvl", "addpl", "rdvl", "whilelo", "whilelt", "whilele", "whilels", "ptrue", "pfalse",
        "ptest",
    ];
    let sve_count = ["inc", "dec", "cnt", "sqinc", "sqdec", "uqinc", "uqdec"]
        .iter()
        .any(|p| {
            m.strip_prefix(p)
                .is_some_and(|r| matches!(r, "b" | "h" | "w" | "d" | "p"))
        });
    if z || sve_scalar.contains(&m) || sve_count {
        return "SVE".into();
    }
    if text.contains(" v") || text.contains("{v") {
        return "SIMD".into();
    }
    if m.starts_with("aes")
        || m.starts_with("sha")
        || m.starts_with("sm3")
        || m.starts_with("sm4")
        || m == "eor3"
        || m == "rax1"
        || m == "xar"
        || m == "bcax"
    {
        return "crypto".into();
    }
    if is_rivet_form(m, text) {
        return format!("rivet:{m}");
    }
    "other".into()
}

fn correctness(files: &[String]) {
    let t0 = Instant::now();
    let (words, total) = collect_references(files);
    let undefined = words
        .values()
        .filter(|r| r.gnu.is_none() && r.llvm.is_none())
        .count();
    let disagree_refs = words
        .values()
        .filter(|r| r.gnu.is_none() != r.llvm.is_none())
        .count();
    println!(
        "# {} files, {} instructions, {} unique words ({} undefined to both references, {} to one of them); references read in {:.1}s",
        files.len(),
        total,
        words.len(),
        undefined,
        disagree_refs,
        t0.elapsed().as_secs_f64()
    );
    let rivet_total: u64 = words
        .values()
        .filter(|r| {
            r.gnu
                .as_deref()
                .map(|g| Facts::parse(g, r.pc))
                .is_some_and(|f| is_rivet_form(&f.mnem, r.gnu.as_deref().unwrap()))
        })
        .map(|r| r.count)
        .sum();
    println!("# Rivet forms (branches, PC-relative, PAC/BTI, exclusives, atomics, traps): {rivet_total} instances");

    let mut report = String::new();
    let mut summary = Vec::new();
    for dec in decoders() {
        let mut t = Tally::default();
        for (word, r) in &words {
            let out = dec.text(*word, r.pc);
            let refs: Vec<Facts> = [&r.gnu, &r.llvm]
                .iter()
                .filter_map(|x| x.as_deref())
                .map(|x| Facts::parse(x, r.pc))
                .collect();
            let ref_text = r.gnu.as_deref().or(r.llvm.as_deref()).unwrap_or("");
            let rivet = refs
                .first()
                .is_some_and(|f| is_rivet_form(&f.mnem, ref_text));
            if rivet {
                add(&mut t.rivet_checked, r.count);
            }
            match (out, refs.is_empty()) {
                (None, true) => {}
                (Some(_), true) => add(&mut t.accepts_invalid, r.count),
                (None, false) => {
                    add(&mut t.fail, r.count);
                    let g = group(&refs[0].mnem, ref_text);
                    let e = t.fail_by_group.entry(g).or_default();
                    e.0 += 1;
                    e.1 += r.count;
                    if e.2.len() < 6 {
                        e.2.push(format!("{word:08x} `{ref_text}` ({})", r.file));
                    }
                    if rivet {
                        add(&mut t.rivet_bad, r.count);
                        add(
                            t.rivet_by_kind
                                .entry(format!("{}: not decoded", refs[0].mnem))
                                .or_default(),
                            r.count,
                        );
                        if t.rivet_examples.len() < 40 {
                            t.rivet_examples.push(format!(
                                "{word:08x} @{:#x} ref `{ref_text}`: not decoded",
                                r.pc
                            ));
                        }
                    }
                }
                (Some(text), false) => {
                    let mine = Facts::parse(&text, r.pc);
                    if text.contains(":SVE_") || text.contains(":SME_") {
                        add(&mut t.unformatted, r.count);
                    }
                    if refs.iter().any(|f| f.mnem == mine.mnem) {
                        if !rivet
                            && !text.contains(":SVE_")
                            && !refs.iter().any(|f| f.same_rivet_facts(&mine))
                        {
                            add(&mut t.operands, r.count);
                            if t.operand_examples.len() < 20 {
                                t.operand_examples.push(format!(
                                    "{word:08x} ref `{}` / `{}`: got `{text}`",
                                    r.gnu.as_deref().unwrap_or("-"),
                                    r.llvm.as_deref().unwrap_or("-")
                                ));
                            }
                        }
                    } else if refs
                        .iter()
                        .any(|f| facts::is_base_of_alias(&f.mnem, &mine.mnem))
                    {
                        add(&mut t.base_form, r.count);
                    } else {
                        add(&mut t.mnemonic, r.count);
                        let e = t
                            .mnemonic_pairs
                            .entry((refs[0].mnem.clone(), mine.mnem.clone()))
                            .or_insert((0, 0, *word, r.pc));
                        e.0 += 1;
                        e.1 += r.count;
                    }
                    if rivet && !refs.iter().any(|f| f.same_rivet_facts(&mine)) {
                        add(&mut t.rivet_bad, r.count);
                        add(
                            t.rivet_by_kind
                                .entry(format!("{} -> {}", refs[0].mnem, mine.mnem))
                                .or_default(),
                            r.count,
                        );
                        if t.rivet_examples.len() < 40 {
                            t.rivet_examples.push(format!(
                                "{word:08x} @{:#x} ref `{}` / `{}`: got `{text}` -> {:?} vs {:?}",
                                r.pc,
                                r.gnu.as_deref().unwrap_or("-"),
                                r.llvm.as_deref().unwrap_or("-"),
                                mine,
                                refs[0]
                            ));
                        }
                    }
                }
            }
        }
        summary.push(format!(
            "| {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} of {} |",
            dec.name(),
            t.fail.0,
            t.fail.1,
            t.mnemonic.0,
            t.mnemonic.1,
            t.operands.0,
            t.operands.1,
            t.base_form.0,
            t.base_form.1,
            t.unformatted.0,
            t.unformatted.1,
            t.accepts_invalid.0,
            t.accepts_invalid.1,
            t.rivet_bad.0,
            t.rivet_bad.1,
            t.rivet_checked.1
        ));
        let _ = writeln!(report, "\n## {}\n", dec.name());
        let _ = writeln!(report, "not decoded, by group (unique / instances):");
        for (g, (u, n, ex)) in &t.fail_by_group {
            let _ = writeln!(report, "  {g}: {u} / {n}  e.g. {}", ex.join(", "));
        }
        let _ = writeln!(report, "wrong mnemonic: differs from both references and is not the base form of their alias (top 40 by instances; ref -> crate, unique / instances, example):");
        let mut pairs: Vec<_> = t.mnemonic_pairs.iter().collect();
        pairs.sort_by_key(|p| std::cmp::Reverse(p.1 .1));
        for ((a, b), (u, n, w, pc)) in pairs.iter().take(40) {
            let r = &words[w];
            let _ = writeln!(
                report,
                "  {a} -> {b}: {u} / {n}  e.g. {w:08x} `{}` / `{}` vs `{}`",
                r.gnu.as_deref().unwrap_or("-"),
                r.llvm.as_deref().unwrap_or("-"),
                dec.text(*w, *pc).unwrap_or_default()
            );
        }
        let _ = writeln!(report, "same mnemonic, other general registers (first 20):");
        for e in &t.operand_examples {
            let _ = writeln!(report, "  {e}");
        }
        let _ = writeln!(
            report,
            "Rivet-form mismatches by reference mnemonic (unique / instances):"
        );
        let mut kinds: Vec<_> = t.rivet_by_kind.iter().collect();
        kinds.sort_by_key(|k| std::cmp::Reverse(k.1 .1));
        for (k, (u, n)) in kinds.iter().take(30) {
            let _ = writeln!(report, "  {k}: {u} / {n}");
        }
        let _ = writeln!(report, "Rivet-form mismatches (first 40):");
        for e in &t.rivet_examples {
            let _ = writeln!(report, "  {e}");
        }
    }
    println!("\n(unique words / instances)\n");
    println!("| crate | not decoded | wrong mnemonic | same mnemonic, other registers (non-Rivet forms) | base form printed for an alias | operands left unformatted | accepts words both refs reject | Rivet forms wrong or not decoded |");
    println!("|---|---|---|---|---|---|---|---|");
    for s in summary {
        println!("{s}");
    }
    println!("{report}");
}

/// Control-flow classification through each crate's structured API, against binutils.
fn classify_cmd(files: &[String]) {
    let (words, total) = collect_references(files);
    println!(
        "# {} files, {total} instructions, {} unique words",
        files.len(),
        words.len()
    );
    type Classifier = (&'static str, fn(u32, u64) -> Option<classify::Flow>);
    let classifiers: [Classifier; 3] = [
        ("yaxpeax-arm (Opcode + Operand::PCOffset)", |w, _| {
            classify::yaxpeax(w)
        }),
        ("bad64 (Op + Operand::Label)", classify::bad64),
        ("disarm64 (InsnClass + operand bit fields)", |w, _| {
            classify::disarm64(w)
        }),
    ];
    let mut ref_kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for r in words.values() {
        if let Some(t) = r.gnu.as_deref().or(r.llvm.as_deref()) {
            *ref_kinds
                .entry(classify::reference(t, r.pc).kind())
                .or_default() += r.count;
        }
    }
    println!("reference kinds (instances): {ref_kinds:?}");
    println!("\n| classifier | agree | differ (unique / instances) | not decoded |");
    println!("|---|---|---|---|");
    let mut details = String::new();
    for (name, f) in classifiers {
        let (mut agree, mut differ, mut undecoded) = (0u64, (0u64, 0u64), (0u64, 0u64));
        let mut by: BTreeMap<String, (u64, u64, String)> = BTreeMap::new();
        for (w, r) in &words {
            let Some(t) = r.gnu.as_deref().or(r.llvm.as_deref()) else {
                continue;
            };
            let want = classify::reference(t, r.pc);
            // either reference will do: binutils applies relocations in objects, llvm does not
            let want2 = r
                .llvm
                .as_deref()
                .map(|l| classify::reference(l, r.pc))
                .unwrap_or(want);
            match f(*w, r.pc) {
                None => add(&mut undecoded, r.count),
                Some(got) if got == want || got == want2 => agree += r.count,
                Some(got) => {
                    add(&mut differ, r.count);
                    let e = by
                        .entry(format!("{} -> {}", want.kind(), got.kind()))
                        .or_insert((0, 0, String::new()));
                    e.0 += 1;
                    e.1 += r.count;
                    if e.2.is_empty() {
                        e.2 = format!("{w:08x} `{t}`: {want:?} vs {got:?}");
                    }
                }
            }
        }
        println!(
            "| {name} | {agree} | {} / {} | {} / {} |",
            differ.0, differ.1, undecoded.0, undecoded.1
        );
        let _ = writeln!(details, "\n{name}:");
        for (k, (u, n, ex)) in by {
            let _ = writeln!(details, "  {k}: {u} / {n}, e.g. {ex}");
        }
    }
    println!("{details}");
}

/// Linear sweep of `.text`: every decoder, best of `reps` runs.
fn speed(path: &str, reps: usize) {
    use object::{Object, ObjectSection};
    let data = std::fs::read(path).expect("read ELF");
    let file = object::File::parse(&*data).expect("parse ELF");
    let text = file.section_by_name(".text").expect(".text");
    let bytes = text.data().expect(".text data");
    let base = text.address();
    let n = bytes.len() / 4;
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    println!("# {path}: .text {} bytes, {n} words", bytes.len());
    println!("| crate / call | M insn/s (best of {reps}) | invalid words |");
    println!("|---|---|---|");
    let bench = |name: &str, f: &mut dyn FnMut() -> (u64, u64)| {
        let mut best = f64::MAX;
        let mut bad = 0;
        for _ in 0..reps {
            let t = Instant::now();
            let (invalid, sink) = f();
            let s = t.elapsed().as_secs_f64();
            std::hint::black_box(sink);
            bad = invalid;
            best = best.min(s);
        }
        println!("| {name} | {:.1} | {bad} |", n as f64 / best / 1e6);
    };
    bench(
        "yaxpeax-arm `decode_into` (reused Instruction)",
        &mut || {
            use yaxpeax_arch::Decoder;
            let d = yaxpeax_arm::armv8::a64::InstDecoder::default();
            let mut inst = yaxpeax_arm::armv8::a64::Instruction::default();
            let (mut bad, mut sink) = (0u64, 0u64);
            for w in &words {
                let b = w.to_le_bytes();
                let mut r = yaxpeax_arch::U8Reader::new(&b);
                if d.decode_into(&mut inst, &mut r).is_ok() {
                    std::hint::black_box(&inst);
                    sink += 1;
                } else {
                    bad += 1;
                }
            }
            (bad, sink)
        },
    );
    bench(
        "yaxpeax-arm `decode_into` + PC-relative target and registers from `operands`",
        &mut || {
            use yaxpeax_arch::Decoder;
            use yaxpeax_arm::armv8::a64::Operand;
            let d = yaxpeax_arm::armv8::a64::InstDecoder::default();
            let mut inst = yaxpeax_arm::armv8::a64::Instruction::default();
            let (mut bad, mut sink) = (0u64, 0u64);
            for (i, w) in words.iter().enumerate() {
                let b = w.to_le_bytes();
                let mut r = yaxpeax_arch::U8Reader::new(&b);
                if d.decode_into(&mut inst, &mut r).is_ok() {
                    for op in &inst.operands {
                        match op {
                            Operand::PCOffset(off) => {
                                sink = sink
                                    .wrapping_add((base + 4 * i as u64).wrapping_add(*off as u64))
                            }
                            Operand::Register(_, n) | Operand::RegisterOrSP(_, n) => {
                                sink = sink.wrapping_add(*n as u64)
                            }
                            _ => {}
                        }
                    }
                } else {
                    bad += 1;
                }
            }
            (bad, sink)
        },
    );
    bench("bad64 `decode`", &mut || {
        let (mut bad, mut sink) = (0u64, 0u64);
        for (i, w) in words.iter().enumerate() {
            match bad64::decode(*w, base + 4 * i as u64) {
                Ok(ins) => sink = sink.wrapping_add(ins.op() as u64),
                Err(_) => bad += 1,
            }
        }
        (bad, sink)
    });
    bench("disarm64 `decoder::decode`", &mut || {
        use disarm64::InsnOpcode;
        let (mut bad, mut sink) = (0u64, 0u64);
        for w in &words {
            match disarm64::decoder::decode(*w) {
                Some(ins) => {
                    sink = sink
                        .wrapping_add(ins.bits() as u64 ^ ins.definition().mnemonic.len() as u64)
                }
                None => bad += 1,
            }
        }
        (bad, sink)
    });
    bench(
        "disarm64 `decoder::decode` + every operand bit field extracted",
        &mut || {
            use disarm64::InsnOpcode;
            let (mut bad, mut sink) = (0u64, 0u64);
            for w in &words {
                match disarm64::decoder::decode(*w) {
                    Some(ins) => {
                        for op in ins.definition().operands {
                            for f in op.bit_fields {
                                sink = sink
                                    .wrapping_add(((*w >> f.lsb) & ((1u32 << f.width) - 1)) as u64);
                            }
                        }
                    }
                    None => bad += 1,
                }
            }
            (bad, sink)
        },
    );
    bench("bad64 `decode` + operands()", &mut || {
        let (mut bad, mut sink) = (0u64, 0u64);
        for (i, w) in words.iter().enumerate() {
            match bad64::decode(*w, base + 4 * i as u64) {
                Ok(ins) => sink = sink.wrapping_add(ins.operands().len() as u64),
                Err(_) => bad += 1,
            }
        }
        (bad, sink)
    });
    for detail in [false, true] {
        let cs = Capstone::new(detail);
        let name = if detail {
            "capstone `disasm_iter`, detail on"
        } else {
            "capstone `disasm_iter`, detail off"
        };
        bench(name, &mut || {
            let (mut bad, mut sink) = (0u64, 0u64);
            let mut off = 0usize;
            while off < bytes.len() {
                let mut it =
                    cs.0.disasm_iter(&bytes[off..], base + off as u64)
                        .expect("iter");
                while let Some(ins) = it.next() {
                    sink = sink.wrapping_add(ins.id().0 as u64);
                    off += 4;
                }
                if off < bytes.len() {
                    bad += 1; // the iterator stops at an invalid word: skip it
                    off += 4;
                }
            }
            (bad, sink)
        });
    }
}

fn api() {
    // b +0x40; cbz x3, +0x20; tbnz w5, #7, -0x8; adrp x1, +2 pages; ldr x2, lit +0x10; blraa x8, sp; bti c
    let samples: [(u32, &str); 11] = [
        (0x14000010, "b #+0x40"),
        (0xb4000103, "cbz x3, #+0x20"),
        (0x373fffc5, "tbnz w5, #7, #-0x8"),
        (0x90000021, "adrp x1, #+0x2000 page"),
        (0x58000082, "ldr x2, literal #+0x10"),
        (0xd73f091f, "blraa x8, sp"),
        (0xd503245f, "bti c"),
        (0x54000002, "b.cs +0"),
        (0x54ffffe1, "b.ne -4"),
        (0x04203822, "eor3 z2.d, z2.d, z0.d, z1.d (SVE2)"),
        (0x0420e3e6, "cntb x6 (SVE)"),
    ];
    let pc = 0x10000u64;
    for (w, what) in samples {
        println!("{w:08x} ({what}) at {pc:#x}");
        {
            use yaxpeax_arch::Decoder;
            let b = w.to_le_bytes();
            let mut r = yaxpeax_arch::U8Reader::new(&b);
            match yaxpeax_arm::armv8::a64::InstDecoder::default().decode(&mut r) {
                Ok(i) => println!("  yaxpeax  {:?} {:?}", i.opcode, &i.operands),
                Err(e) => println!("  yaxpeax  error {e:?}"),
            }
        }
        match bad64::decode(w, pc) {
            Ok(i) => println!("  bad64    {:?} {:?}", i.op(), i.operands()),
            Err(e) => println!("  bad64    error {e:?}"),
        }
        match disarm64::decoder::decode(w) {
            Some(i) => {
                use disarm64::InsnOpcode;
                println!("  disarm64 {:?} operands {:?}", i, i.definition().operands);
            }
            None => println!("  disarm64 error"),
        }
        let cs = Capstone::new(true);
        let insns = cs.0.disasm_count(&w.to_le_bytes(), pc, 1).unwrap();
        if let Some(i) = insns.iter().next() {
            let detail = cs.0.insn_detail(i).unwrap();
            println!(
                "  capstone {} {} groups {:?} {:?}",
                i.mnemonic().unwrap_or(""),
                i.op_str().unwrap_or(""),
                detail.groups(),
                detail.arch_detail().operands()
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("correctness") => correctness(&args[1..]),
        Some("classify") => classify_cmd(&args[1..]),
        Some("speed") => speed(
            &args[1],
            args.get(2).map_or(5, |s| s.parse().expect("REPS")),
        ),
        Some("api") => api(),
        Some("random-words") => {
            // random-words N SEED OUT: N pseudo-random 32-bit words (xorshift64*), raw
            let n: usize = args[1].parse().expect("N");
            let mut x: u64 = args[2].parse::<u64>().expect("SEED") | 1;
            let mut out = Vec::with_capacity(4 * n);
            for _ in 0..n {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                out.extend_from_slice(
                    &((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32).to_le_bytes(),
                );
            }
            std::fs::write(&args[3], out).expect("write");
        }
        Some("text") => {
            // text WORD [PC]: what every crate prints for one word
            let w = u32::from_str_radix(args[1].trim_start_matches("0x"), 16).expect("hex word");
            let pc = args.get(2).map_or(0x10000, |s| {
                u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex pc")
            });
            for d in decoders() {
                println!("{:28} {:?}", d.name(), d.text(w, pc));
            }
        }
        _ => {
            eprintln!("usage: aarch64-decoders correctness ELF... | classify ELF... | speed ELF [REPS] | api | text WORD [PC] | random-words N SEED OUT");
            std::process::exit(2);
        }
    }
}
