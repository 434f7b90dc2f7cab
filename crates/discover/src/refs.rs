//! References to code addresses held in data and in instructions.
//!
//! A label whose address is stored somewhere can be jumped to indirectly, so it must start a
//! block, and a computed goto may reach it. With `--emit-relocs` every stored address has a
//! relocation and the set is exact. Without, PIE binaries still reveal stored absolute
//! addresses through RELATIVE dynamic relocations, and non-PIE binaries only through scanning
//! data for values that look like code addresses, which can only suggest, never prove.

use rivet_elf::relocs::{DynRelocKind, DynamicReloc, StaticReloc};
use rivet_elf::{ElfFile, ElfKind, Vaddr};

/// One stored reference to a code address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CodeRef {
    pub target: Vaddr,
    /// Where the reference is stored (data address, or the referring instruction).
    pub site: Vaddr,
    /// True when a relocation or a RIP-relative operand proves it; false for values that merely
    /// look like code addresses.
    pub exact: bool,
}

/// Sections whose relocations describe metadata about code rather than references to it.
fn is_metadata_section(name: &str) -> bool {
    matches!(name, ".eh_frame" | ".eh_frame_hdr" | ".gcc_except_table")
        || name.starts_with(".debug")
        || name.starts_with(".rela")
}

#[derive(Debug)]
pub struct DataRefs {
    pub refs: Vec<CodeRef>,
    /// `S + A` of PC-relative relocations in data that refer to code: members of relative
    /// tables. Their exact targets depend on a table base, so they only flag the function
    /// they point into as having relative references.
    /// Each with the site it is stored at, to tell which a recognized table explains.
    pub relative: Vec<(Vaddr, Vaddr)>,
}

pub fn data_refs(
    elf: &ElfFile,
    static_relocs: &[StaticReloc],
    dynamic_relocs: &[DynamicReloc],
    reloc_mode: bool,
) -> DataRefs {
    let mut refs = Vec::new();
    let mut relative = Vec::new();
    if reloc_mode {
        for r in static_relocs {
            let Some(section) = elf.section(r.target_section) else {
                continue;
            };
            if is_metadata_section(&section.name) {
                continue;
            }
            let target = r.symbol_plus_addend();
            if r.is_absolute() {
                if elf.is_code_address(target) {
                    refs.push(CodeRef {
                        target,
                        site: r.site,
                        exact: true,
                    });
                }
            } else if r.is_pc_relative()
                && !section.is_exec()
                && !r.symbol_is_undefined
                && elf.is_code_address(r.symbol_value)
            {
                relative.push((target, r.site));
            }
        }
    } else {
        for r in dynamic_relocs {
            if r.kind == DynRelocKind::Relative {
                let target = Vaddr(r.addend as u64);
                if elf.is_code_address(target)
                    && !elf
                        .section_containing(r.site)
                        .is_some_and(|s| is_metadata_section(&s.name))
                {
                    refs.push(CodeRef {
                        target,
                        site: r.site,
                        exact: true,
                    });
                }
            }
        }
        if elf.kind == ElfKind::Executable {
            for s in elf.sections() {
                if !s.is_alloc() || s.is_exec() || s.is_nobits() || is_metadata_section(&s.name) {
                    continue;
                }
                if matches!(s.sh_type, 2 | 3 | 11) {
                    continue; // symbol and string tables
                }
                let skip = (8 - (s.addr.get() % 8) as usize) % 8;
                let Some(words) = s.data.get(skip..) else {
                    continue;
                };
                for (i, w) in words.chunks_exact(8).enumerate() {
                    let value = Vaddr(u64::from_le_bytes(w.try_into().unwrap()));
                    if value.get() != 0 && elf.is_code_address(value) {
                        let site = s.addr + (skip + i * 8) as u64;
                        refs.push(CodeRef {
                            target: value,
                            site,
                            exact: false,
                        });
                    }
                }
            }
        }
    }
    refs.sort();
    relative.sort();
    DataRefs { refs, relative }
}
