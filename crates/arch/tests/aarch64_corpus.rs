//! The AArch64 decoder on real compiler output: every instruction of the cross-built corpus
//! (scripts/build-corpus-aarch64.sh: gcc-12 and clang-19 at -O0/-O2/-O3, PIE and not,
//! `.cold` splitting, PAC/BTI builds; run and checked under qemu by that script) decodes,
//! and every branch and PC-relative target Rivet reads is the one binutils' objdump prints.
//! objdump disassembles only what the mapping symbols mark as code, so data never reaches
//! the decoder here.

use std::path::{Path, PathBuf};
use std::process::Command;

use rivet_arch::aarch64::{self, Control, PcRelative};

fn corpus() -> PathBuf {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-corpus-aarch64.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("running scripts/build-corpus-aarch64.sh");
    assert!(
        out.status.success(),
        "scripts/build-corpus-aarch64.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(stdout.lines().last().expect("corpus directory").trim())
}

fn is_elf(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF"))
}

/// The target objdump prints for a branch or PC-relative instruction: its last operand when
/// that is a bare hexadecimal address (`bl 11360 <f@plt>`, `adrp x0, 21000 <...>`, `ldr x0,
/// 10c54`), not a memory operand or an immediate.
fn objdump_target(mnemonic: &str, operands: &str) -> Option<u64> {
    let pc_relative = matches!(
        mnemonic,
        "b" | "bl" | "cbz" | "cbnz" | "tbz" | "tbnz" | "adr" | "adrp" | "ldr" | "ldrsw" | "prfm"
    ) || mnemonic.starts_with("b.")
        || mnemonic.starts_with("bc.");
    if !pc_relative {
        return None;
    }
    let operands = operands.split('<').next().unwrap().trim();
    let last = operands.rsplit(',').next().unwrap().trim();
    if last.starts_with('[') || last.starts_with('#') {
        return None;
    }
    u64::from_str_radix(last, 16).ok()
}

fn rivet_target(inst: &aarch64::Inst) -> Option<u64> {
    match inst.control {
        Control::Jump { target }
        | Control::Call { target }
        | Control::Conditional { target, .. } => Some(target),
        _ => match inst.pc_relative? {
            PcRelative::Adr { target, .. } | PcRelative::Literal { target, .. } => Some(target),
            PcRelative::Adrp { page, .. } => Some(page),
        },
    }
}

#[test]
fn every_instruction_of_the_aarch64_corpus_decodes_with_objdumps_targets() {
    let dir = corpus();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && is_elf(p))
        .collect();
    files.sort();
    assert!(
        files.len() >= 200,
        "only {} ELF files in {}",
        files.len(),
        dir.display()
    );
    let (mut instructions, mut targets, mut guards, mut exclusives) = (0u64, 0u64, 0u64, 0u64);
    let mut ordered = 0u64;
    for file in &files {
        let out = Command::new("aarch64-linux-gnu-objdump")
            .args(["-d", "-w"])
            .arg(file)
            .output()
            .expect("aarch64-linux-gnu-objdump (binutils-aarch64-linux-gnu) is required");
        assert!(out.status.success(), "objdump {}", file.display());
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "   10b60:\t100007a0 \tadr\tx0, 10c54 <main>"
            let mut cols = line.split('\t');
            let (Some(addr), Some(word), Some(mnemonic)) = (cols.next(), cols.next(), cols.next())
            else {
                continue;
            };
            let Some(addr) = addr.trim().strip_suffix(':') else {
                continue;
            };
            let (Ok(addr), Ok(word)) = (
                u64::from_str_radix(addr, 16),
                u32::from_str_radix(word.trim(), 16),
            ) else {
                continue;
            };
            let mnemonic = mnemonic.trim();
            if mnemonic.starts_with('.') {
                continue; // .word / .inst: objdump's own "not an instruction"
            }
            let operands = cols.next().unwrap_or("").split("//").next().unwrap().trim();
            let inst = aarch64::decode(word, addr).unwrap_or_else(|e| {
                panic!("{}: {e} (objdump: {mnemonic} {operands})", file.display())
            });
            instructions += 1;
            guards += u64::from(inst.guard.is_some());
            // Exclusive-monitor instructions are exactly the `x` forms objdump names; the
            // ordered accesses of the same encoding class (`ldar`, `stlr`) open no monitor.
            let exclusive_name = mnemonic.starts_with("ldx")
                || mnemonic.starts_with("ldax")
                || mnemonic.starts_with("stx")
                || mnemonic.starts_with("stlx")
                || mnemonic == "clrex";
            assert_eq!(
                inst.exclusive.is_some(),
                exclusive_name,
                "{} at {addr:#x}: {mnemonic} {operands}",
                file.display()
            );
            exclusives += u64::from(inst.exclusive.is_some());
            ordered += u64::from(matches!(mnemonic, "ldar" | "stlr" | "ldarb" | "stlrb"));
            if let Some(want) = objdump_target(mnemonic, operands) {
                assert_eq!(
                    rivet_target(&inst),
                    Some(want),
                    "{} at {addr:#x}: {mnemonic} {operands}",
                    file.display()
                );
                targets += 1;
            }
        }
    }
    // The corpus holds branches, PAC/BTI builds and atomics: each kind must have been met.
    assert!(instructions > 150_000, "{instructions} instructions");
    assert!(targets > 20_000, "{targets} targets");
    assert!(guards > 100, "{guards} BTI/PAC instructions");
    // The corpus's atomics are ordered accesses and LSE (its programs link libgcc's outline
    // atomics dynamically): they were met and none was taken for a monitor.
    assert!(ordered > 0, "{ordered} ordered accesses (ldar/stlr)");
    eprintln!(
        "{} files, {instructions} instructions, {targets} targets as objdump prints them, {guards} BTI/PAC, {exclusives} exclusive, {ordered} ordered",
        files.len()
    );
}

/// One function of objdump's listing: its name and its decoded instructions.
struct Function {
    name: String,
    insts: Vec<aarch64::Inst>,
}

fn functions(file: &Path) -> Vec<Function> {
    let out = Command::new("aarch64-linux-gnu-objdump")
        .args(["-d", "-w", "-j", ".text"])
        .arg(file)
        .output()
        .expect("aarch64-linux-gnu-objdump");
    let mut fs: Vec<Function> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")) {
            fs.push(Function {
                name: name.1.to_string(),
                insts: Vec::new(),
            });
            continue;
        }
        let mut cols = line.split('\t');
        let (Some(addr), Some(word)) = (cols.next(), cols.next()) else {
            continue;
        };
        let (Some(Ok(addr)), Ok(word)) = (
            addr.trim()
                .strip_suffix(':')
                .map(|a| u64::from_str_radix(a, 16)),
            u32::from_str_radix(word.trim(), 16),
        ) else {
            continue;
        };
        if let (Some(f), Ok(inst)) = (fs.last_mut(), aarch64::decode(word, addr)) {
            f.insts.push(inst);
        }
    }
    fs
}

/// The path to the `br` at `insts[at]` a dispatch takes: the instructions before it back
/// to a little before the nearest conditional branch on the flags (the bound check), with
/// that branch followed when its target lies between it and the `br` (gcc's `b.ls` over
/// the default case) and fallen through otherwise (clang's `b.hi` to the default).
fn dispatch_path(insts: &[aarch64::Inst], at: usize) -> (Vec<aarch64::Inst>, Vec<u64>) {
    let br = insts[at].addr;
    let check = (at.saturating_sub(24)..at).rev().find(|&k| {
        matches!(
            insts[k].control,
            Control::Conditional {
                form: aarch64::CondForm::Flags { .. },
                ..
            }
        )
    });
    let Some(c) = check else {
        return (insts[at.saturating_sub(24)..=at].to_vec(), Vec::new());
    };
    let start = c.saturating_sub(8);
    let Control::Conditional { target, .. } = insts[c].control else {
        unreachable!()
    };
    if target > insts[c].addr && target <= br {
        let resume = insts.iter().position(|i| i.addr == target).unwrap();
        let mut path = insts[start..=c].to_vec();
        path.extend_from_slice(&insts[resume..=at]);
        (path, vec![insts[c].addr])
    } else {
        (insts[start..=at].to_vec(), Vec::new())
    }
}

#[test]
fn switch_tables_of_both_compilers_at_every_level_are_found_and_bounded() {
    use object::{Object, ObjectSegment};
    let dir = corpus();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("switch_")
                && is_elf(p)
        })
        .collect();
    files.sort();
    assert!(files.len() >= 30, "{} switch programs", files.len());
    let (mut tables, mut targets, mut slots) = (0u64, 0u64, 0u64);
    let mut per_variant = std::collections::BTreeMap::<String, u64>::new();
    for file in &files {
        let data = std::fs::read(file).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let read = |addr: u64, len: u64| -> Option<Vec<u8>> {
            elf.segments().find_map(|s| {
                let (start, size) = (s.address(), s.size());
                (addr >= start && addr + len <= start + size)
                    .then(|| s.data_range(addr, len).ok().flatten().map(<[u8]>::to_vec))
                    .flatten()
            })
        };
        let name = file.file_name().unwrap().to_string_lossy();
        let variant = name.split_once('.').unwrap().1.to_string();
        for f in functions(file) {
            for (at, inst) in f.insts.iter().enumerate() {
                if !matches!(inst.control, Control::IndirectJump { .. }) {
                    continue;
                }
                let (path, taken) = dispatch_path(&f.insts, at);
                let result = aarch64::analyze_indirect_branch(&path, &taken);
                if let aarch64::IndirectBranch::MemorySlot { slot } = result {
                    // crt's tail calls through GOT entries (deregister_tm_clones...).
                    assert!(
                        read(slot, 8).is_some(),
                        "{}: slot {slot:#x}",
                        file.display()
                    );
                    slots += 1;
                    continue;
                }
                let aarch64::IndirectBranch::Table {
                    table,
                    entry_size,
                    bound,
                    ..
                } = result
                else {
                    panic!(
                        "{} {} at {:#x}: an indirect branch not understood",
                        file.display(),
                        f.name,
                        inst.addr
                    );
                };
                let bound = bound.unwrap_or_else(|| {
                    panic!(
                        "{} {}: table at {table:#x} without a bound",
                        file.display(),
                        f.name
                    )
                });
                let size = u64::from(entry_size);
                let bytes = read(table, bound.entries * size)
                    .unwrap_or_else(|| panic!("{}: table {table:#x} unreadable", file.display()));
                let starts: std::collections::HashSet<u64> =
                    f.insts.iter().map(|i| i.addr).collect();
                assert!(
                    starts.contains(&bound.default_target),
                    "{} {}",
                    file.display(),
                    f.name
                );
                for k in 0..bound.entries as usize {
                    let t = result.target_of(&bytes[k * size as usize..]).unwrap();
                    assert!(
                        starts.contains(&t),
                        "{} {}: entry {k} of the table at {table:#x} goes to {t:#x}, not an instruction of the function",
                        file.display(),
                        f.name
                    );
                    targets += 1;
                }
                tables += 1;
                *per_variant.entry(variant.clone()).or_default() += 1;
            }
        }
    }
    eprintln!(
        "{tables} tables, {targets} entries, {slots} jumps through pointer slots; per variant: {per_variant:?}"
    );
    // Every `br` was understood (the loop panics otherwise), and every variant of both
    // compilers has tables: the switch programs hold 28, two per crt file besides are
    // tail calls through the GOT.
    assert_eq!(per_variant.len(), 18, "{per_variant:?}");
    assert!(
        tables >= 28 && slots >= 64,
        "{tables} tables, {slots} slots"
    );
}
