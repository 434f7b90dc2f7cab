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

/// What a static relocation's field holds, in the ISA's own terms turned neutral. The
/// numbers in `r_type` differ per machine; [`RelocTypes`] (implemented by `rivet_arch::Isa`)
/// says which kind each is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelocKind {
    /// `S + A` in a `size`-byte field; `signed` when a 32-bit field is read sign-extended.
    Absolute { size: u8, signed: bool },
    /// `S + A - P` in a `size`-byte field.
    PcRelative { size: u8 },
    /// The address of the symbol's GOT slot minus `P` (which the linker may have relaxed into
    /// the symbol's own address), in a `size`-byte field of an instruction.
    GotPcRelative { size: u8 },
    /// A field of `size` bytes whose value Rivet does not interpret (TLS and GOT offsets,
    /// symbol sizes).
    Opaque { size: u8 },
    /// The offset field of a branch instruction (AArch64 `b`, `bl`, `b.cond`, `cbz`,
    /// `tbz`): `S + A` is the branch's target.
    Branch,
    /// A field of an instruction that holds part of an address in the ISA's own encoding
    /// (AArch64: an ADRP's page, the low 12 bits in an ADD or a load or store, an ADR's or a
    /// literal load's offset): `S + A` is the whole address referred to.
    AddressPart,
    /// A type Rivet does not know, or none.
    Unknown,
}

impl RelocKind {
    /// Width in bytes of the relocated field, for kinds Rivet interprets.
    pub fn field_size(self) -> Option<u8> {
        match self {
            RelocKind::Absolute { size, .. }
            | RelocKind::PcRelative { size }
            | RelocKind::GotPcRelative { size }
            | RelocKind::Opaque { size } => Some(size),
            // Bits spread over an instruction, not a field of bytes.
            RelocKind::Branch | RelocKind::AddressPart | RelocKind::Unknown => None,
        }
    }
}

/// The meaning of relocation type numbers, which only the ISA knows.
pub trait RelocTypes {
    /// The kind of a static relocation type.
    fn static_kind(&self, r_type: u32) -> RelocKind;
    /// The kind of a dynamic relocation type.
    fn dynamic_kind(&self, r_type: u32) -> DynRelocKind;
}

/// A static relocation kept by `--emit-relocs`.
#[derive(Clone, Debug)]
pub struct StaticReloc {
    /// Address of the field being relocated.
    pub site: Vaddr,
    pub r_type: u32,
    /// What `r_type` means.
    pub kind: RelocKind,
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
        self.kind.field_size()
    }

    /// True for kinds whose field holds `S + A - P`.
    pub fn is_pc_relative(&self) -> bool {
        matches!(self.kind, RelocKind::PcRelative { .. })
    }

    /// True for kinds whose field holds `S + A` (an absolute address).
    pub fn is_absolute(&self) -> bool {
        matches!(self.kind, RelocKind::Absolute { .. })
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
    /// `S + A`: a 64-bit absolute address against a symbol.
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

fn rela_entries<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a [elf::Rela64<LE>]> {
    let whole = bytes.len() - bytes.len() % 24;
    object::pod::slice_from_all_bytes(&bytes[..whole])
        .map_err(|_| ElfError::malformed(what, "misaligned relocation table"))
}

impl<'data> ElfFile<'data> {
    /// All static relocations against alloc sections (code and data), from every non-alloc
    /// SHT_RELA section. Relocations of debug sections are not returned: they refer to
    /// non-loaded data and matter only to the debug-info update.
    pub fn static_relocations(
        &self,
        symbols: &[Symbol<'data>],
        types: &dyn RelocTypes,
    ) -> Result<Vec<StaticReloc>> {
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
                let r_type = rela.r_type(LE, false).0;
                out.push(StaticReloc {
                    site: Vaddr(rela.r_offset(LE)),
                    r_type,
                    kind: types.static_kind(r_type),
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
    pub fn dynamic_relocations(&self, types: &dyn RelocTypes) -> Result<Vec<DynamicReloc<'data>>> {
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
                    kind: types.dynamic_kind(rela.r_type(LE, false).0),
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
