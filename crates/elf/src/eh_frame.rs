//! `.eh_frame`: the FDE of every function that has one, and its unwind rows on demand.
//!
//! FDEs matter twice: they give function boundaries for code without symbols, and their rows
//! (CFA rule and saved registers at every address) are what a rewriter must re-emit for moved
//! code. gimli does the parsing; this module fixes the reader type at the boundary so no gimli
//! generics leak into the rest of Rivet.
//!
//! The row model is lossless: every rule gimli can produce for `.eh_frame` is representable
//! (expressions keep their raw bytes, `DW_CFA_GNU_args_size` is kept), and an `Fde` carries the
//! CIE facts a writer needs to reproduce it (personality and its indirection, signal frame,
//! return-address column, alignment factors). Register rules in a row are listed in gimli's
//! order, which depends on the instruction history: compare rows as sets, not as sequences.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EndianSlice, LittleEndian, Pointer, RegisterRule,
    UnwindContext, UnwindSection,
};

use std::sync::Arc;

use crate::addr::{Vaddr, VaddrRange};
use crate::error::{ElfError, Result};
use crate::file::ElfFile;

type Reader<'data> = EndianSlice<'data, LittleEndian>;

/// One FDE: its code range, exception-handling pointers and the facts of its CIE.
#[derive(Clone, Debug)]
pub struct Fde {
    /// Offset of the FDE within `.eh_frame` (to re-read it for rows).
    pub offset: usize,
    pub range: VaddrRange,
    /// The LSDA (`.gcc_except_table` entry) address, if the FDE has one.
    pub lsda: Option<Vaddr>,
    /// The personality routine (or the address of its GOT slot when indirect).
    pub personality: Option<Vaddr>,
    /// The personality pointer has `DW_EH_PE_indirect`: `personality` is the address of a
    /// slot holding the routine's address (`DW.ref.__gxx_personality_v0` in PIC code).
    pub personality_indirect: bool,
    /// The CIE's augmentation has 'S': the frame is a signal trampoline, whose return address
    /// must not be decremented before the lookup.
    pub signal_frame: bool,
    /// The DWARF column of the return address.
    pub return_address_register: u16,
    /// The CIE's code alignment factor (1 on x86-64).
    pub code_alignment_factor: u64,
    /// The CIE's data alignment factor (-8 on x86-64, as gcc and clang write it).
    pub data_alignment_factor: i64,
}

/// How the canonical frame address is computed at some instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Cfa {
    /// DWARF register number plus offset (the stack pointer plus 8 at an x86-64 function
    /// entry).
    RegisterOffset { register: u16, offset: i64 },
    /// A DWARF expression, as raw bytes (PLT stubs, signal trampolines, realigned stacks).
    Expression(Vec<u8>),
}

/// The rule that recovers a register's value in the caller's frame.
///
/// A register absent from a row's `saved` list has no rule at all, which unwinders treat as
/// "unchanged"; that differs from `Undefined` (libgcc stops unwinding at an undefined return
/// address) even though both mean "not saved" to a reader of the code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SavedRegister {
    /// Saved in memory at CFA + offset (`DW_CFA_offset`).
    AtCfaOffset(i64),
    /// Held in another register (`DW_CFA_register`).
    InRegister(u16),
    /// The value is CFA + offset itself, not stored anywhere (`DW_CFA_val_offset`).
    ValOffset(i64),
    /// Saved in memory at the address computed by this DWARF expression (`DW_CFA_expression`).
    Expression(Vec<u8>),
    /// The value is computed by this DWARF expression (`DW_CFA_val_expression`).
    ValExpression(Vec<u8>),
    /// Explicitly not modified by this frame (`DW_CFA_same_value`).
    SameValue,
    /// Not recoverable (`DW_CFA_undefined`).
    Undefined,
    /// Defined by the augmenter, outside DWARF; gimli never produces it for x86-64.
    Architectural,
    /// A pseudo-register with a constant value; gimli produces it only for AArch64's
    /// return-address signing state.
    Constant(u64),
}

/// The unwind state over one address range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CfiRow {
    pub range: VaddrRange,
    pub cfa: Cfa,
    /// Register rules, in no particular order (see the module comment). Shared: the rows of
    /// one FDE that have the same rules hold one list, and a cloned row holds its original's
    /// (a large binary has hundreds of thousands of rows, and a rewrite copies many of them).
    pub saved: Arc<[(u16, SavedRegister)]>,
    /// Bytes of outgoing arguments pushed at this point (`DW_CFA_GNU_args_size`); the
    /// personality routine adjusts the stack pointer by it when landing. Usually 0.
    pub args_size: u64,
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
        let text = self.section_by_name(".text").map(|s| s.addr);
        let got = self.section_by_name(".got").map(|s| s.addr);
        let mut table = EhFrameTable::parse(section.data, section.addr, text, got)?;
        if self.is_aarch64() {
            // Opcode 0x2d is DW_CFA_AARCH64_negate_ra_state there (DW_CFA_GNU_window_save
            // elsewhere): gimli then keeps the return-address signing state as a constant
            // rule of pseudo-register 34 (RA_SIGN_STATE), which `SavedRegister::Constant`
            // carries through rows.
            table.section.set_vendor(gimli::Vendor::AArch64);
        }
        Ok(Some(table))
    }
}

impl<'data> EhFrameTable<'data> {
    /// Parses the `.eh_frame` bytes `data` mapped at `section_addr`. `text` and `got` are the
    /// bases of the rarely used textrel and datarel pointer encodings, when known. This is
    /// what [`ElfFile::eh_frame`] does for an input; a rewriter uses it to check its output.
    pub fn parse(
        data: &'data [u8],
        section_addr: Vaddr,
        text: Option<Vaddr>,
        got: Option<Vaddr>,
    ) -> Result<EhFrameTable<'data>> {
        let mut bases = BaseAddresses::default().set_eh_frame(section_addr.get());
        if let Some(text) = text {
            bases = bases.set_text(text.get());
        }
        if let Some(got) = got {
            bases = bases.set_got(got.get());
        }
        let eh = EhFrame::new(data, LittleEndian);
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
                let cie = fde.cie();
                fdes.push(Fde {
                    offset,
                    range: VaddrRange::new(Vaddr(fde.initial_address()), fde.len()),
                    lsda: fde.lsda().map(pointer_address),
                    personality: fde.personality().map(pointer_address),
                    personality_indirect: matches!(fde.personality(), Some(Pointer::Indirect(_))),
                    signal_frame: cie.is_signal_trampoline(),
                    return_address_register: cie.return_address_register().0,
                    code_alignment_factor: cie.code_alignment_factor(),
                    data_alignment_factor: cie.data_alignment_factor(),
                });
            }
        }
        fdes.sort_by_key(|f| (f.range.start, f.offset));
        Ok(EhFrameTable {
            section: eh,
            bases,
            fdes,
        })
    }

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
        // The distinct rule lists of this FDE so far: a function's rows repeat a few lists
        // (the prologue's steps, then the body's state again after each epilogue).
        let mut lists: Vec<Arc<[(u16, SavedRegister)]>> = Vec::new();
        // Expressions are stored as (offset, length) into the section; copy their bytes out
        // so rows stand alone.
        let expression_bytes = |e: &gimli::UnwindExpression<usize>| -> Result<Vec<u8>> {
            Ok(e.get(&self.section).map_err(bad)?.0.slice().to_vec())
        };
        while let Some(row) = table.next_row().map_err(bad)? {
            let cfa = match row.cfa() {
                CfaRule::RegisterAndOffset { register, offset } => Cfa::RegisterOffset {
                    register: register.0,
                    offset: *offset,
                },
                CfaRule::Expression(e) => Cfa::Expression(expression_bytes(e)?),
            };
            let saved = row
                .registers()
                .map(|(reg, rule)| {
                    let rule = match rule {
                        RegisterRule::Offset(o) => SavedRegister::AtCfaOffset(*o),
                        RegisterRule::Register(r) => SavedRegister::InRegister(r.0),
                        RegisterRule::ValOffset(o) => SavedRegister::ValOffset(*o),
                        RegisterRule::Expression(e) => {
                            SavedRegister::Expression(expression_bytes(e)?)
                        }
                        RegisterRule::ValExpression(e) => {
                            SavedRegister::ValExpression(expression_bytes(e)?)
                        }
                        RegisterRule::SameValue => SavedRegister::SameValue,
                        RegisterRule::Undefined => SavedRegister::Undefined,
                        RegisterRule::Architectural => SavedRegister::Architectural,
                        RegisterRule::Constant(c) => SavedRegister::Constant(*c),
                    };
                    Ok((reg.0, rule))
                })
                .collect::<Result<Vec<_>>>()?;
            let saved = match lists.iter().find(|l| ***l == *saved) {
                Some(list) => Arc::clone(list),
                None => {
                    let list: Arc<[(u16, SavedRegister)]> = saved.into();
                    lists.push(Arc::clone(&list));
                    list
                }
            };
            rows.push(CfiRow {
                range: VaddrRange {
                    start: Vaddr(row.start_address()),
                    end: Vaddr(row.end_address()),
                },
                cfa,
                saved,
                args_size: row.saved_args_size(),
            });
        }
        Ok(rows)
    }
}

impl CfiRow {
    /// The row as dumps print it, with register numbers named by `register_name` (the ISA's
    /// names: this crate does not know them).
    pub fn display<'a>(
        &'a self,
        register_name: impl Fn(u16) -> &'static str + 'a,
    ) -> impl std::fmt::Display + 'a {
        DisplayRow {
            row: self,
            register_name,
        }
    }
}

struct DisplayRow<'a, F> {
    row: &'a CfiRow,
    register_name: F,
}

impl<F: Fn(u16) -> &'static str> std::fmt::Display for DisplayRow<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dwarf_register_name = |r: u16| (self.register_name)(r);
        match &self.row.cfa {
            Cfa::RegisterOffset { register, offset } => {
                write!(f, "cfa={}{:+}", dwarf_register_name(*register), offset)?
            }
            Cfa::Expression(_) => write!(f, "cfa=<expr>")?,
        }
        for (reg, rule) in self.row.saved.iter() {
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
                // The golden dumps print every other rule the same way; keep it so.
                _ => write!(f, " {}=<rule>", dwarf_register_name(*reg))?,
            }
        }
        Ok(())
    }
}
