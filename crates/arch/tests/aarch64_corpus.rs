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
            exclusives += u64::from(inst.exclusive.is_some());
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
    assert!(
        exclusives > 0,
        "{exclusives} exclusive-monitor instructions"
    );
    eprintln!(
        "{} files, {instructions} instructions, {targets} targets as objdump prints them, {guards} BTI/PAC, {exclusives} exclusive",
        files.len()
    );
}
