//! `.eh_frame`: the FDE of every function that has one, and its unwind rows on demand.
//!
//! FDEs matter twice: they give function boundaries for code without symbols, and their rows
//! (CFA rule and saved registers at every address) are what a rewriter must re-emit for moved
//! code. gimli does the parsing; this module fixes the reader type at the boundary so no gimli
//! generics leak into the rest of Rivet.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EndianSlice, LittleEndian, Pointer, RegisterRule,
    UnwindContext, UnwindSection,
};

use crate::addr::{Vaddr, VaddrRange};
use crate::error::{ElfError, Result};
use crate::file::ElfFile;

type Reader<'data> = EndianSlice<'data, LittleEndian>;

/// One FDE, reduced to what discovery needs.
#[derive(Clone, Debug)]
pub struct Fde {
    /// Offset of the FDE within `.eh_frame` (to re-read it for rows).
    pub offset: usize,
    pub range: VaddrRange,
    /// The LSDA (`.gcc_except_table` entry) address, if the FDE has one.
    pub lsda: Option<Vaddr>,
    /// The personality routine (or the address of its GOT slot when indirect).
    pub personality: Option<Vaddr>,
}

/// How the canonical frame address is computed at some instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cfa {
    /// DWARF register number plus offset, e.g. rsp+8 at a function entry.
    RegisterOffset { register: u16, offset: i64 },
    /// A DWARF expression (PLT stubs, signal trampolines, realigned stacks).
    Expression,
}

/// Where a callee-saved register's caller value lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SavedRegister {
    /// At CFA + offset.
    AtCfaOffset(i64),
    /// Held in another register.
    InRegister(u16),
    /// Any other rule (expressions, same-value, undefined...).
    Other,
}

/// The unwind state over one address range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CfiRow {
    pub range: VaddrRange,
    pub cfa: Cfa,
    pub saved: Vec<(u16, SavedRegister)>,
}

/// Name of an x86-64 DWARF register number.
pub fn dwarf_register_name(register: u16) -> &'static str {
    const NAMES: [&str; 17] = [
        "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15", "rip",
    ];
    NAMES.get(register as usize).copied().unwrap_or("reg?")
}

/// The parsed `.eh_frame` of a file.
#[derive(Debug)]
pub struct EhFrameTable<'data> {
    section: EhFrame<Reader<'data>>,
    bases: BaseAddresses,
    /// FDEs sorted by start address.
    pub fdes: Vec<Fde>,
}

fn pointer_address(p: Pointer) -> Vaddr {
    match p {
        Pointer::Direct(a) | Pointer::Indirect(a) => Vaddr(a),
    }
}

impl<'data> ElfFile<'data> {
    /// Parses `.eh_frame`, if present. A malformed entry is an error naming its offset.
    pub fn eh_frame(&self) -> Result<Option<EhFrameTable<'data>>> {
        let Some(section) = self.section_by_name(".eh_frame") else {
            return Ok(None);
        };
        if section.is_nobits() {
            return Ok(None);
        }
        let mut bases = BaseAddresses::default().set_eh_frame(section.addr.get());
        if let Some(text) = self.section_by_name(".text") {
            bases = bases.set_text(text.addr.get());
        }
        if let Some(got) = self.section_by_name(".got") {
            bases = bases.set_got(got.addr.get());
        }
        let eh = EhFrame::new(section.data, LittleEndian);
        let mut fdes = Vec::new();
        let mut entries = eh.entries(&bases);
        loop {
            let entry = entries
                .next()
                .map_err(|e| ElfError::malformed(".eh_frame", format!("bad entry: {e}")))?;
            let Some(entry) = entry else { break };
            if let CieOrFde::Fde(partial) = entry {
                let offset = partial.offset();
                let fde = partial.parse(EhFrame::cie_from_offset).map_err(|e| {
                    ElfError::malformed(".eh_frame", format!("bad FDE at offset {offset:#x}: {e}"))
                })?;
                if fde.len() == 0 {
                    continue;
                }
                fdes.push(Fde {
                    offset,
                    range: VaddrRange::new(Vaddr(fde.initial_address()), fde.len()),
                    lsda: fde.lsda().map(pointer_address),
                    personality: fde.personality().map(pointer_address),
                });
            }
        }
        fdes.sort_by_key(|f| (f.range.start, f.offset));
        Ok(Some(EhFrameTable {
            section: eh,
            bases,
            fdes,
        }))
    }
}

impl EhFrameTable<'_> {
    /// The FDE covering `addr`, if any.
    pub fn fde_for(&self, addr: Vaddr) -> Option<&Fde> {
        let pos = self.fdes.partition_point(|f| f.range.start <= addr);
        self.fdes[..pos]
            .iter()
            .rev()
            .take(2)
            .find(|f| f.range.contains(addr))
    }

    /// All unwind rows of `fde`, in address order.
    pub fn rows(&self, fde: &Fde) -> Result<Vec<CfiRow>> {
        let bad = |e: gimli::Error| {
            ElfError::malformed(".eh_frame", format!("FDE at offset {:#x}: {e}", fde.offset))
        };
        let parsed = self
            .section
            .fde_from_offset(
                &self.bases,
                gimli::EhFrameOffset(fde.offset),
                EhFrame::cie_from_offset,
            )
            .map_err(bad)?;
        let mut ctx = Box::new(UnwindContext::new());
        let mut table = parsed
            .rows(&self.section, &self.bases, &mut ctx)
            .map_err(bad)?;
        let mut rows = Vec::new();
        while let Some(row) = table.next_row().map_err(bad)? {
            let cfa = match row.cfa() {
                CfaRule::RegisterAndOffset { register, offset } => Cfa::RegisterOffset {
                    register: register.0,
                    offset: *offset,
                },
                CfaRule::Expression(_) => Cfa::Expression,
            };
            let saved = row
                .registers()
                .map(|(reg, rule)| {
                    let rule = match rule {
                        RegisterRule::Offset(o) => SavedRegister::AtCfaOffset(*o),
                        RegisterRule::Register(r) => SavedRegister::InRegister(r.0),
                        _ => SavedRegister::Other,
                    };
                    (reg.0, rule)
                })
                .collect();
            rows.push(CfiRow {
                range: VaddrRange {
                    start: Vaddr(row.start_address()),
                    end: Vaddr(row.end_address()),
                },
                cfa,
                saved,
            });
        }
        Ok(rows)
    }
}

impl std::fmt::Display for CfiRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cfa {
            Cfa::RegisterOffset { register, offset } => {
                write!(f, "cfa={}{:+}", dwarf_register_name(*register), offset)?
            }
            Cfa::Expression => write!(f, "cfa=<expr>")?,
        }
        for (reg, rule) in &self.saved {
            match rule {
                SavedRegister::AtCfaOffset(o) => {
                    write!(f, " {}@cfa{:+}", dwarf_register_name(*reg), o)?
                }
                SavedRegister::InRegister(r) => write!(
                    f,
                    " {}={}",
                    dwarf_register_name(*reg),
                    dwarf_register_name(*r)
                )?,
                SavedRegister::Other => write!(f, " {}=<rule>", dwarf_register_name(*reg))?,
            }
        }
        Ok(())
    }
}
