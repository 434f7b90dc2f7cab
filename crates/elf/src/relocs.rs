//! Relocations: the static ones `--emit-relocs` keeps, and the dynamic ones the loader applies.
//!
//! Static relocations are the linker's record of every place that referred to a symbol: in a
//! linked executable `r_offset` is the virtual address of the referring field, and the symbol's
//! value is final, so `S + A` is the referenced address for absolute kinds. They are what lets
//! Rivet move code: every reference to a moved address can be found and rewritten.
//!
//! Dynamic relocations come from `DT_RELA`/`DT_JMPREL`/`DT_RELR` (read through the dynamic
//! table, not section names, because that is what the loader uses). RELR is the compact
//! encoding of RELATIVE relocations: an address word, then bitmaps of the following words.

use std::borrow::Cow;

use object::LittleEndian as LE;
use object::elf;
use object::read::elf::Rela;

use crate::addr::Vaddr;
use crate::error::{ElfError, Result};
use crate::file::ElfFile;
use crate::symbols::{Symbol, SymbolKind};

/// x86-64 relocation types Rivet interprets (`R_X86_64_*`).
pub mod types {
    pub const R_X86_64_NONE: u32 = 0;
    pub const R_X86_64_64: u32 = 1;
    pub const R_X86_64_PC32: u32 = 2;
    pub const R_X86_64_GOT32: u32 = 3;
    pub const R_X86_64_PLT32: u32 = 4;
    pub const R_X86_64_COPY: u32 = 5;
    pub const R_X86_64_GLOB_DAT: u32 = 6;
    pub const R_X86_64_JUMP_SLOT: u32 = 7;
    pub const R_X86_64_RELATIVE: u32 = 8;
    pub const R_X86_64_GOTPCREL: u32 = 9;
    pub const R_X86_64_32: u32 = 10;
    pub const R_X86_64_32S: u32 = 11;
    pub const R_X86_64_DTPMOD64: u32 = 16;
    pub const R_X86_64_DTPOFF64: u32 = 17;
    pub const R_X86_64_TPOFF64: u32 = 18;
    pub const R_X86_64_TLSGD: u32 = 19;
    pub const R_X86_64_TLSLD: u32 = 20;
    pub const R_X86_64_DTPOFF32: u32 = 21;
    pub const R_X86_64_GOTTPOFF: u32 = 22;
    pub const R_X86_64_TPOFF32: u32 = 23;
    pub const R_X86_64_PC64: u32 = 24;
    pub const R_X86_64_GOTOFF64: u32 = 25;
    pub const R_X86_64_GOTPC32: u32 = 26;
    pub const R_X86_64_SIZE32: u32 = 32;
    pub const R_X86_64_SIZE64: u32 = 33;
    pub const R_X86_64_GOTPC32_TLSDESC: u32 = 34;
    pub const R_X86_64_TLSDESC_CALL: u32 = 35;
    pub const R_X86_64_TLSDESC: u32 = 36;
    pub const R_X86_64_IRELATIVE: u32 = 37;
    pub const R_X86_64_GOTPCRELX: u32 = 41;
    pub const R_X86_64_REX_GOTPCRELX: u32 = 42;
}
use types::*;

/// A static relocation kept by `--emit-relocs`.
#[derive(Clone, Debug)]
pub struct StaticReloc {
    /// Address of the field being relocated.
    pub site: Vaddr,
    pub r_type: u32,
    /// Index into `.symtab`.
    pub symbol: u32,
    /// The symbol's final value (`S`); zero for undefined symbols.
    pub symbol_value: Vaddr,
    pub symbol_kind: SymbolKind,
    pub symbol_is_undefined: bool,
    pub addend: i64,
    /// Index of the section the relocation applies to (`sh_info` of its RELA section).
    pub target_section: usize,
}

impl StaticReloc {
    /// `S + A`: for absolute kinds this is the referenced address; for PC-relative kinds in
    /// instructions it is the referenced address minus the distance from the field to the end
    /// of the instruction (usually 4 bytes).
    pub fn symbol_plus_addend(&self) -> Vaddr {
        self.symbol_value.offset(self.addend)
    }

    /// Width in bytes of the relocated field, for kinds Rivet interprets.
    pub fn field_size(&self) -> Option<u8> {
        Some(match self.r_type {
            R_X86_64_64 | R_X86_64_PC64 | R_X86_64_GOTOFF64 | R_X86_64_SIZE64 => 8,
            R_X86_64_PC32
            | R_X86_64_PLT32
            | R_X86_64_32
            | R_X86_64_32S
            | R_X86_64_GOTPCREL
            | R_X86_64_GOTPCRELX
            | R_X86_64_REX_GOTPCRELX
            | R_X86_64_GOTPC32
            | R_X86_64_GOT32
            | R_X86_64_TPOFF32
            | R_X86_64_DTPOFF32
            | R_X86_64_GOTTPOFF
            | R_X86_64_TLSGD
            | R_X86_64_TLSLD
            | R_X86_64_GOTPC32_TLSDESC
            | R_X86_64_SIZE32 => 4,
            _ => return None,
        })
    }

    /// True for kinds whose field holds `S + A - P`.
    pub fn is_pc_relative(&self) -> bool {
        matches!(self.r_type, R_X86_64_PC32 | R_X86_64_PLT32 | R_X86_64_PC64)
    }

    /// True for kinds whose field holds `S + A` (an absolute address).
    pub fn is_absolute(&self) -> bool {
        matches!(self.r_type, R_X86_64_64 | R_X86_64_32 | R_X86_64_32S)
    }
}

/// Kind of a dynamic relocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DynRelocKind {
    /// `B + A`, from RELA or RELR.
    Relative,
    /// `resolver(B + A)`.
    Irelative,
    JumpSlot,
    GlobDat,
    /// `S + A` (R_X86_64_64 against a symbol).
    Abs64,
    Copy,
    Tpoff64,
    Dtpmod64,
    Dtpoff64,
    TlsDesc,
    Other(u32),
}

#[derive(Clone, Debug)]
pub struct DynamicReloc<'data> {
    pub site: Vaddr,
    pub kind: DynRelocKind,
    /// Index into `.dynsym` (0 = none).
    pub symbol: u32,
    pub symbol_name: Option<Cow<'data, str>>,
    pub addend: i64,
    /// True when the relocation came from DT_JMPREL (the PLT's relocations).
    pub from_plt: bool,
    /// True when decoded from the compact DT_RELR table.
    pub from_relr: bool,
    /// Address of the `Elf64_Rela` entry (None for RELR), so its addend can be rewritten.
    pub entry: Option<Vaddr>,
}

fn dyn_kind(t: u32) -> DynRelocKind {
    match t {
        R_X86_64_RELATIVE => DynRelocKind::Relative,
        R_X86_64_IRELATIVE => DynRelocKind::Irelative,
        R_X86_64_JUMP_SLOT => DynRelocKind::JumpSlot,
        R_X86_64_GLOB_DAT => DynRelocKind::GlobDat,
        R_X86_64_64 => DynRelocKind::Abs64,
        R_X86_64_COPY => DynRelocKind::Copy,
        R_X86_64_TPOFF64 => DynRelocKind::Tpoff64,
        R_X86_64_DTPMOD64 => DynRelocKind::Dtpmod64,
        R_X86_64_DTPOFF64 => DynRelocKind::Dtpoff64,
        R_X86_64_TLSDESC => DynRelocKind::TlsDesc,
        other => DynRelocKind::Other(other),
    }
}

fn rela_entries<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a [elf::Rela64<LE>]> {
    let whole = bytes.len() - bytes.len() % 24;
    object::pod::slice_from_all_bytes(&bytes[..whole])
        .map_err(|_| ElfError::malformed(what, "misaligned relocation table"))
}

impl<'data> ElfFile<'data> {
    /// All static relocations against alloc sections (code and data), from every non-alloc
    /// SHT_RELA section. Relocations of debug sections are not returned: they refer to
    /// non-loaded data and matter only to the debug-info update.
    pub fn static_relocations(&self, symbols: &[Symbol<'data>]) -> Result<Vec<StaticReloc>> {
        let mut out = Vec::new();
        for rela_section in self.sections() {
            if rela_section.sh_type != elf::SHT_RELA.0 || rela_section.is_alloc() {
                continue;
            }
            let target = rela_section.info as usize;
            if !self.section(target).is_some_and(|t| t.is_alloc()) {
                continue;
            }
            for rela in rela_entries(rela_section.data, "static relocation section")? {
                let sym_index = rela.r_sym(LE, false);
                let sym = symbols.get(sym_index as usize);
                out.push(StaticReloc {
                    site: Vaddr(rela.r_offset(LE)),
                    r_type: rela.r_type(LE, false).0,
                    symbol: sym_index,
                    symbol_value: sym.map_or(Vaddr(0), |s| s.value),
                    symbol_kind: sym.map_or(SymbolKind::NoType, |s| s.kind),
                    symbol_is_undefined: sym.is_none_or(|s| s.is_undefined),
                    addend: rela.r_addend(LE),
                    target_section: target,
                });
            }
        }
        out.sort_by_key(|r| r.site);
        Ok(out)
    }

    /// Dynamic relocations from DT_RELA, DT_JMPREL and DT_RELR, sorted by site.
    pub fn dynamic_relocations(&self) -> Result<Vec<DynamicReloc<'data>>> {
        let Ok(dynamic) = self.dynamic() else {
            return Ok(Vec::new());
        };
        let dynsyms = self.dynamic_symbols()?;
        let mut out = Vec::new();
        let mut push_rela = |addr: Option<u64>, size: Option<u64>, from_plt: bool| -> Result<()> {
            let (Some(addr), Some(size)) = (addr, size) else {
                return Ok(());
            };
            let bytes = self.bytes_at(Vaddr(addr), size).ok_or_else(|| {
                ElfError::malformed("dynamic relocation table", "not inside the file")
            })?;
            for (i, rela) in rela_entries(bytes, "dynamic relocation table")?
                .iter()
                .enumerate()
            {
                let sym = rela.r_sym(LE, false);
                out.push(DynamicReloc {
                    site: Vaddr(rela.r_offset(LE)),
                    kind: dyn_kind(rela.r_type(LE, false).0),
                    symbol: sym,
                    symbol_name: dynsyms
                        .get(sym as usize)
                        .filter(|_| sym != 0)
                        .map(|s| s.name.clone()),
                    addend: rela.r_addend(LE),
                    from_plt,
                    from_relr: false,
                    entry: Some(Vaddr(addr) + (i * std::mem::size_of::<elf::Rela64<LE>>()) as u64),
                });
            }
            Ok(())
        };
        push_rela(dynamic.rela, dynamic.rela_size, false)?;
        if dynamic
            .plt_rel_kind
            .is_none_or(|k| k == elf::DT_RELA.0 as u64)
        {
            push_rela(dynamic.jmprel, dynamic.plt_rel_size, true)?;
        }
        if let (Some(addr), Some(size)) = (dynamic.relr, dynamic.relr_size) {
            let bytes = self
                .bytes_at(Vaddr(addr), size)
                .ok_or_else(|| ElfError::malformed("DT_RELR table", "not inside the file"))?;
            for site in decode_relr(bytes) {
                out.push(DynamicReloc {
                    site,
                    kind: DynRelocKind::Relative,
                    symbol: 0,
                    symbol_name: None,
                    // RELR's addend is the word already stored at the site.
                    addend: self.read_u64(site).unwrap_or(0) as i64,
                    from_plt: false,
                    from_relr: true,
                    entry: None,
                });
            }
        }
        out.sort_by_key(|r| r.site);
        Ok(out)
    }
}

/// Decodes a RELR table into the addresses it relocates.
pub fn decode_relr(bytes: &[u8]) -> Vec<Vaddr> {
    let mut out = Vec::new();
    let mut next = 0u64;
    for word in bytes.chunks_exact(8) {
        let entry = u64::from_le_bytes(word.try_into().unwrap());
        if entry & 1 == 0 {
            out.push(Vaddr(entry));
            next = entry.wrapping_add(8);
        } else {
            let mut bits = entry >> 1;
            let mut addr = next;
            while bits != 0 {
                if bits & 1 != 0 {
                    out.push(Vaddr(addr));
                }
                bits >>= 1;
                addr = addr.wrapping_add(8);
            }
            next = next.wrapping_add(63 * 8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relr_decodes_address_and_bitmap() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0x1000u64.to_le_bytes());
        // Bitmap: bit 0 marks the flag; bits 1 and 3 set => words 0x1008 and 0x1018.
        bytes.extend_from_slice(&((0b101u64 << 1) | 1).to_le_bytes());
        let sites = decode_relr(&bytes);
        assert_eq!(sites, vec![Vaddr(0x1000), Vaddr(0x1008), Vaddr(0x1018)]);
    }

    #[test]
    fn relr_consecutive_bitmaps_advance_by_63_words() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0x2000u64.to_le_bytes());
        bytes.extend_from_slice(&3u64.to_le_bytes()); // word 0 after 0x2000
        bytes.extend_from_slice(&3u64.to_le_bytes()); // word 0 after the next 63
        let sites = decode_relr(&bytes);
        assert_eq!(
            sites,
            vec![Vaddr(0x2000), Vaddr(0x2008), Vaddr(0x2008 + 63 * 8)]
        );
    }
}
