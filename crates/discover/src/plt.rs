//! PLT stubs: which imported function each stub jumps to.
//!
//! A stub is an indirect jump through a slot (on x86-64 `jmp *slot(%rip)`, possibly after
//! `endbr64`, possibly with a `bnd` prefix; on AArch64 `adrp x16`, `ldr x17, [x16, #off]`,
//! `br x17`: `Isa::indirect_jump_slots`); the slot is a GOT entry with a JUMP_SLOT,
//! GLOB_DAT or IRELATIVE dynamic relocation naming the symbol. Stubs are found by decoding
//! the sections the ISA names as PLTs (`Isa::plt_entry_size`), entry by entry; where each
//! entry starts is the ISA's call (`Isa::plt_entries`: AArch64's BTI-marked entries are
//! 24 bytes after a 32-byte header).

use std::collections::HashMap;

use rivet_arch::Isa;
use rivet_elf::relocs::{DynRelocKind, DynamicReloc};
use rivet_elf::{ElfFile, Vaddr};
use rivet_ir::PltEntry;

pub fn find_plt_entries(elf: &ElfFile, dynamic_relocs: &[DynamicReloc]) -> Vec<PltEntry> {
    let slots: HashMap<Vaddr, String> = dynamic_relocs
        .iter()
        .filter_map(|r| match r.kind {
            DynRelocKind::JumpSlot | DynRelocKind::GlobDat | DynRelocKind::Abs64 => {
                r.symbol_name.as_ref().map(|n| (r.site, n.to_string()))
            }
            DynRelocKind::Irelative => Some((r.site, format!("*ifunc@{:#x}", r.addend))),
            _ => None,
        })
        .collect();
    let isa = Isa::of(elf);
    let mut out = Vec::new();
    for section in elf.sections() {
        let Some(default_entry) = isa.plt_entry_size(&section.name) else {
            continue;
        };
        if !section.is_exec() || section.data.is_empty() {
            continue;
        }
        let entry_size = if section.entsize > 0 {
            section.entsize
        } else {
            default_entry
        };
        let insts = isa.decode_all(section.data, section.addr);
        for (addr, size, slot) in isa.plt_entries(section.addr, &insts, entry_size) {
            let Some(name) = slots.get(&slot) else {
                continue;
            };
            out.push(PltEntry {
                addr,
                size,
                name: name.clone(),
                slot,
            });
        }
    }
    out.sort_by_key(|e| e.addr);
    out.dedup_by_key(|e| e.addr);
    out
}
