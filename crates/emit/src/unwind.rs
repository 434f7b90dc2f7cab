//! `.eh_frame` and `.eh_frame_hdr` for rewritten code.
//!
//! Unwind info is regenerated from unwind rows, never patched: each code fragment (a function,
//! or its hot or cold part) becomes one FDE whose instructions reproduce, at the new
//! addresses, the rows the input had. gimli's write side lays out CIEs and FDEs; this module
//! turns rows into the minimal instruction stream, chooses the CIEs, adds the zero terminator
//! gimli leaves out, finds where each FDE landed, and writes `.eh_frame_hdr`, which gimli does
//! not write at all.
//!
//! Invariants of the output:
//! - Every pointer is `pcrel|sdata4` (FDE ranges, LSDAs, personalities, the header's table is
//!   `datarel|sdata4`), so the bytes need no dynamic relocation in a PIE or shared library and
//!   are correct at exactly the address they are written for. Anything more than 2 GiB away
//!   is an error, not a truncated pointer.
//! - Reading an FDE back yields the rows it was given, with two normalisations: a row whose
//!   state equals its predecessor's is merged into it (no advance is written for nothing),
//!   and register rules come back in no particular order.
//! - One CIE per distinct (personality, LSDA present, signal frame, return-address column,
//!   data alignment, initial state); FDEs keep the order of the input.
//! - `.eh_frame` must be placed 8-byte aligned (libgcc reads entries as pointer-aligned
//!   structs; gimli pads each entry to 8 bytes), `.eh_frame_hdr` 4-byte aligned.

use std::collections::BTreeMap;

use gimli::constants::{
    DW_EH_PE_datarel, DW_EH_PE_indirect, DW_EH_PE_pcrel, DW_EH_PE_sdata4, DW_EH_PE_udata4, DwEhPe,
};
use gimli::write::{
    Address, CallFrameInstruction, CommonInformationEntry, EhFrame, EndianVec, Expression,
    FrameDescriptionEntry, FrameTable,
};
use gimli::{Encoding, Format, LittleEndian, Register};
use rivet_arch::Isa;
use rivet_elf::eh_frame::{Cfa, CfiRow, Fde, SavedRegister};
use rivet_elf::{Vaddr, VaddrRange};

/// Pointer encoding of every pointer this module writes in `.eh_frame`.
const PCREL_SDATA4: DwEhPe = DwEhPe(DW_EH_PE_pcrel.0 | DW_EH_PE_sdata4.0);

/// `.eh_frame` uses the CFI version 1 with 8-byte addresses, in the 32-bit DWARF format.
const ENCODING: Encoding = Encoding {
    address_size: 8,
    format: Format::Dwarf32,
    version: 1,
};

/// A personality routine as a CIE refers to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Personality {
    /// The routine's address, or the address of the slot holding it when `indirect`.
    pub addr: Vaddr,
    /// Written with `DW_EH_PE_indirect`: the unwinder loads the routine's address from `addr`.
    pub indirect: bool,
}

/// What a frame needs from its CIE, beyond what this module decides itself (encodings,
/// alignment factors, initial instructions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CieSpec {
    pub personality: Option<Personality>,
    /// Augmentation 'S': a signal trampoline, whose return address is not decremented before
    /// the FDE lookup.
    pub signal_frame: bool,
    /// The DWARF column holding the return address.
    pub return_address_register: u16,
}

impl CieSpec {
    /// The CIE facts of an input FDE, to reproduce them for its moved code.
    pub fn of_fde(fde: &Fde) -> CieSpec {
        CieSpec {
            personality: fde.personality.map(|addr| Personality {
                addr,
                indirect: fde.personality_indirect,
            }),
            signal_frame: fde.signal_frame,
            return_address_register: fde.return_address_register,
        }
    }
}

/// One FDE to write.
#[derive(Clone, Debug)]
pub struct FrameSpec {
    /// The code the FDE covers, at its new address; at most `i32::MAX` bytes.
    pub range: VaddrRange,
    /// Unwind rows in new addresses: contiguous, non-empty, covering `range` exactly.
    pub rows: Vec<CfiRow>,
    pub cie: CieSpec,
    /// The new address of the frame's LSDA, if it has one.
    pub lsda: Option<Vaddr>,
}

/// A written `.eh_frame`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EhFrameOutput {
    /// The section contents, zero terminator included.
    pub bytes: Vec<u8>,
    /// (initial location, FDE address), sorted by location: the input of
    /// [`write_eh_frame_hdr`].
    pub fdes: Vec<(Vaddr, Vaddr)>,
}

/// Why unwind tables could not be written. Frames are named by the start of their code.
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    #[error("frame at {start} covers no code")]
    EmptyFrame { start: Vaddr },
    #[error("frame {start}..{end} is too long for an FDE (at most {max:#x} bytes)", max = i32::MAX)]
    FrameTooLong { start: Vaddr, end: Vaddr },
    #[error(
        "unwind rows of the frame at {frame} do not cover its code contiguously: \
         expected a row starting at {expected}, found {found}"
    )]
    RowsDoNotCover {
        frame: Vaddr,
        expected: Vaddr,
        found: String,
    },
    #[error("frame at {frame}, row at {row}: {detail}")]
    Unrepresentable {
        frame: Vaddr,
        row: Vaddr,
        detail: String,
    },
    #[error(
        "{what} {target} of the frame at {frame} is more than 2 GiB away from .eh_frame at \
         {section}: a 32-bit pc-relative pointer cannot reach it"
    )]
    OutOfReach {
        what: &'static str,
        target: Vaddr,
        frame: Vaddr,
        section: Vaddr,
    },
    #[error(
        "a code, LSDA or personality address is out of 32-bit reach of its pointer field in \
         .eh_frame at {section}"
    )]
    FieldOutOfReach { section: Vaddr },
    #[error("{what} at {addr} must be {align}-byte aligned")]
    Misaligned {
        what: &'static str,
        addr: Vaddr,
        align: u64,
    },
    #[error("gimli could not write .eh_frame at {section}: {source}")]
    Gimli {
        section: Vaddr,
        source: gimli::write::Error,
    },
    #[error("internal error: the .eh_frame gimli wrote is not as expected: {0}")]
    Layout(String),
    #[error(".eh_frame_hdr at {hdr}: {what} {target} is more than 2 GiB away")]
    HdrOutOfReach {
        hdr: Vaddr,
        what: &'static str,
        target: Vaddr,
    },
    #[error(".eh_frame_hdr: two FDEs start at {start}; the binary search table needs one")]
    DuplicateFdeStart { start: Vaddr },
    #[error(".eh_frame_hdr: {count} FDEs do not fit its 32-bit count")]
    TooManyFdes { count: usize },
}

/// The unwind state a CIE's initial instructions set up, which each FDE starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum InitialState {
    /// The state at any function entry (`Isa::entry_frame`; on x86-64 `cfa = rsp+8`, return
    /// address at `cfa-8`), so most FDEs only describe their prologue and epilogue.
    CallEntry,
    /// No instructions: for frames with a row that has no rule for the return-address
    /// column, since no FDE instruction can take a rule away that the CIE gives
    /// (`DW_CFA_restore` would bring it back).
    Empty,
}

/// Data alignment factors this module uses: -8 for the usual 8-byte slots, -1 when some
/// offset is not a multiple of 8 (gimli refuses offsets its factor does not divide).
const DATA_ALIGN_SLOTS: i8 = -8;
const DATA_ALIGN_BYTES: i8 = -1;

/// Writes a complete `.eh_frame` section placed at `section_addr` (8-byte aligned): one CIE
/// per distinct CIE, FDEs in the order of `frames`, a zero terminator at the end.
pub fn write_eh_frame(
    isa: Isa,
    frames: &[FrameSpec],
    section_addr: Vaddr,
) -> Result<EhFrameOutput, UnwindError> {
    if !section_addr.get().is_multiple_of(8) {
        return Err(UnwindError::Misaligned {
            what: ".eh_frame",
            addr: section_addr,
            align: 8,
        });
    }
    // gimli computes a pc-relative pointer as `value - offset in the section`, for a section
    // it believes starts at 0. Giving it `target - section_addr` as the value makes the
    // written field exactly `target - field address`.
    let relative = |target: Vaddr| Address::Constant(target.get().wrapping_sub(section_addr.get()));
    let mut table = FrameTable::default();
    for frame in frames {
        check_frame(frame)?;
        check_reach(frame, section_addr)?;
        let data_align = data_alignment(frame);
        let initial = initial_state(frame);
        let cie = table.add_cie(make_cie(isa, frame, data_align, initial, &relative));
        // `check_frame` bounded the length by `i32::MAX`.
        let mut fde =
            FrameDescriptionEntry::new(relative(frame.range.start), frame.range.len() as u32);
        fde.lsda = frame.lsda.map(relative);
        add_instructions(isa, &mut fde, frame, initial)?;
        table.add_fde(cie, fde);
    }
    let mut out = EhFrame(EndianVec::new(LittleEndian));
    table
        .write_eh_frame(&mut out)
        .map_err(|source| match source {
            // The pre-check measured from the section start; a target within reach of it
            // can still be out of reach of a field far into a huge section.
            gimli::write::Error::ValueTooLarge => UnwindError::FieldOutOfReach {
                section: section_addr,
            },
            source => UnwindError::Gimli {
                section: section_addr,
                source,
            },
        })?;
    let mut bytes = out.0.into_vec();
    // gimli does not report where it put each FDE; walk the length fields it wrote.
    let offsets = fde_offsets(&bytes)?;
    if offsets.len() != frames.len() {
        return Err(UnwindError::Layout(format!(
            "{} FDEs written for {} frames",
            offsets.len(),
            frames.len()
        )));
    }
    // The terminator: unwinders that walk the section (rather than `.eh_frame_hdr`) stop at
    // a zero length.
    bytes.extend_from_slice(&[0; 4]);
    let mut fdes: Vec<(Vaddr, Vaddr)> = frames
        .iter()
        .zip(offsets)
        .map(|(frame, offset)| (frame.range.start, section_addr + offset as u64))
        .collect();
    fdes.sort_by_key(|&(location, _)| location);
    Ok(EhFrameOutput { bytes, fdes })
}

/// `.eh_frame_hdr` at `hdr_addr` (4-byte aligned) for an `.eh_frame` at `eh_frame_addr`:
/// version 1, `eh_frame_ptr` pcrel|sdata4, `fde_count` udata4, and the binary-search table
/// (datarel|sdata4, relative to the header) sorted by initial location.
pub fn write_eh_frame_hdr(
    hdr_addr: Vaddr,
    eh_frame_addr: Vaddr,
    fdes: &[(Vaddr, Vaddr)],
) -> Result<Vec<u8>, UnwindError> {
    if !hdr_addr.get().is_multiple_of(4) {
        // libgcc reads the table as an array of aligned 32-bit pairs.
        return Err(UnwindError::Misaligned {
            what: ".eh_frame_hdr",
            addr: hdr_addr,
            align: 4,
        });
    }
    let count =
        u32::try_from(fdes.len()).map_err(|_| UnwindError::TooManyFdes { count: fdes.len() })?;
    let mut sorted = fdes.to_vec();
    sorted.sort_by_key(|&(location, _)| location);
    if let Some(pair) = sorted.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(UnwindError::DuplicateFdeStart { start: pair[0].0 });
    }
    let rel = |what: &'static str, target: Vaddr, from: Vaddr| {
        i32::try_from(target.get().wrapping_sub(from.get()) as i64).map_err(|_| {
            UnwindError::HdrOutOfReach {
                hdr: hdr_addr,
                what,
                target,
            }
        })
    };
    let mut bytes = Vec::with_capacity(12 + 8 * sorted.len());
    bytes.extend_from_slice(&[
        1,
        PCREL_SDATA4.0,
        DW_EH_PE_udata4.0,
        DW_EH_PE_datarel.0 | DW_EH_PE_sdata4.0,
    ]);
    bytes.extend_from_slice(&rel(".eh_frame", eh_frame_addr, hdr_addr + 4)?.to_le_bytes());
    bytes.extend_from_slice(&count.to_le_bytes());
    for (location, fde) in sorted {
        bytes.extend_from_slice(&rel("code", location, hdr_addr)?.to_le_bytes());
        bytes.extend_from_slice(&rel("FDE", fde, hdr_addr)?.to_le_bytes());
    }
    Ok(bytes)
}

/// `rows` as an FDE written by [`write_eh_frame`] reads back: empty rows dropped, each row
/// merged into its predecessor when their states are equal, register rules sorted by
/// register. Use it to compare rows, or to shrink rows before building a [`FrameSpec`].
pub fn coalesce_rows(rows: &[CfiRow]) -> Vec<CfiRow> {
    let mut out: Vec<CfiRow> = Vec::with_capacity(rows.len());
    for row in rows.iter().filter(|r| !r.range.is_empty()) {
        let mut row = row.clone();
        if !row.saved.is_sorted_by_key(|(reg, _)| *reg) {
            let mut saved = row.saved.to_vec();
            saved.sort_by_key(|(reg, _)| *reg);
            row.saved = saved.into();
        }
        match out.last_mut() {
            Some(last)
                if last.range.end == row.range.start
                    && last.cfa == row.cfa
                    && last.saved == row.saved
                    && last.args_size == row.args_size =>
            {
                last.range.end = row.range.end;
            }
            _ => out.push(row),
        }
    }
    out
}

/// Rows must tile the frame's range exactly, or the FDE would describe other code.
fn check_frame(frame: &FrameSpec) -> Result<(), UnwindError> {
    let range = frame.range;
    if range.is_empty() {
        return Err(UnwindError::EmptyFrame { start: range.start });
    }
    if range.len() > i32::MAX as u64 {
        return Err(UnwindError::FrameTooLong {
            start: range.start,
            end: range.end,
        });
    }
    let mut expected = range.start;
    for row in &frame.rows {
        if row.range.start != expected || row.range.is_empty() || row.range.end > range.end {
            return Err(UnwindError::RowsDoNotCover {
                frame: range.start,
                expected,
                found: format!("a row {}..{}", row.range.start, row.range.end),
            });
        }
        expected = row.range.end;
    }
    if expected != range.end {
        return Err(UnwindError::RowsDoNotCover {
            frame: range.start,
            expected,
            found: "no row".to_string(),
        });
    }
    Ok(())
}

/// Every pointer target must be within 32-bit reach of the section; measured from its start,
/// which catches any realistic mistake with a clear message (gimli checks each field exactly).
fn check_reach(frame: &FrameSpec, section: Vaddr) -> Result<(), UnwindError> {
    let targets = [
        ("code", Some(frame.range.start)),
        ("LSDA", frame.lsda),
        ("personality", frame.cie.personality.map(|p| p.addr)),
    ];
    for (what, target) in targets {
        if let Some(target) = target
            && i32::try_from(target.get().wrapping_sub(section.get()) as i64).is_err()
        {
            return Err(UnwindError::OutOfReach {
                what,
                target,
                frame: frame.range.start,
                section,
            });
        }
    }
    Ok(())
}

/// -8 when every factored offset of the frame is a multiple of 8, else -1. The CFA offset is
/// factored only when negative (gimli writes non-negative ones unfactored).
fn data_alignment(frame: &FrameSpec) -> i8 {
    let aligned = frame.rows.iter().all(|row| {
        let cfa_ok = match row.cfa {
            Cfa::RegisterOffset { offset, .. } => offset >= 0 || offset % 8 == 0,
            Cfa::Expression(_) => true,
        };
        cfa_ok
            && row.saved.iter().all(|(_, rule)| match rule {
                SavedRegister::AtCfaOffset(o) | SavedRegister::ValOffset(o) => o % 8 == 0,
                _ => true,
            })
    });
    if aligned {
        DATA_ALIGN_SLOTS
    } else {
        DATA_ALIGN_BYTES
    }
}

fn initial_state(frame: &FrameSpec) -> InitialState {
    let ra = frame.cie.return_address_register;
    if frame
        .rows
        .iter()
        .all(|row| row.saved.iter().any(|(reg, _)| *reg == ra))
    {
        InitialState::CallEntry
    } else {
        InitialState::Empty
    }
}

/// The CFA rule in the `CallEntry` initial state.
fn call_entry_cfa(isa: Isa) -> Cfa {
    Cfa::RegisterOffset {
        register: isa.dwarf_stack_pointer(),
        offset: isa.entry_frame().cfa_offset,
    }
}

/// The return address's rule in the `CallEntry` initial state: where the call saved it (just
/// below the CFA on x86-64, pushed by the call), or none when it stays in a register.
fn call_entry_return_address(isa: Isa) -> Option<SavedRegister> {
    isa.entry_frame()
        .return_address_at
        .map(SavedRegister::AtCfaOffset)
}

fn make_cie(
    isa: Isa,
    frame: &FrameSpec,
    data_align: i8,
    initial: InitialState,
    relative: &impl Fn(Vaddr) -> Address,
) -> CommonInformationEntry {
    let ra = Register(frame.cie.return_address_register);
    let mut cie = CommonInformationEntry::new(ENCODING, 1, data_align, ra);
    cie.fde_address_encoding = PCREL_SDATA4;
    cie.lsda_encoding = frame.lsda.map(|_| PCREL_SDATA4);
    cie.personality = frame.cie.personality.map(|p| {
        let encoding = if p.indirect {
            DwEhPe(PCREL_SDATA4.0 | DW_EH_PE_indirect.0)
        } else {
            PCREL_SDATA4
        };
        (encoding, relative(p.addr))
    });
    cie.signal_trampoline = frame.cie.signal_frame;
    if initial == InitialState::CallEntry {
        let entry = isa.entry_frame();
        let sp = Register(isa.dwarf_stack_pointer());
        cie.add_instruction(CallFrameInstruction::Cfa(sp, entry.cfa_offset as i32));
        if let Some(at) = entry.return_address_at {
            cie.add_instruction(CallFrameInstruction::Offset(ra, at as i32));
        }
    }
    cie
}

/// The unwind state between rows, as the reader of the FDE will have it.
struct State<'a> {
    /// `None` before the first row of an FDE whose CIE defines no CFA.
    cfa: Option<&'a Cfa>,
    rules: BTreeMap<u16, &'a SavedRegister>,
    args_size: u64,
}

/// Emits, at each row, only what differs from the state before it.
fn add_instructions(
    isa: Isa,
    fde: &mut FrameDescriptionEntry,
    frame: &FrameSpec,
    initial: InitialState,
) -> Result<(), UnwindError> {
    let ra = frame.cie.return_address_register;
    let entry_cfa = call_entry_cfa(isa);
    let entry_ra = call_entry_return_address(isa);
    let initial_rules: BTreeMap<u16, &SavedRegister> = match (initial, &entry_ra) {
        (InitialState::CallEntry, Some(rule)) => BTreeMap::from([(ra, rule)]),
        _ => BTreeMap::new(),
    };
    let mut state = State {
        cfa: (initial == InitialState::CallEntry).then_some(&entry_cfa),
        rules: initial_rules.clone(),
        args_size: 0,
    };
    // AArch64's return-address signing state is written as toggles, not as a rule: it starts
    // unsigned in every FDE (and so in every fragment), and each change of the row's value
    // is one `DW_CFA_AARCH64_negate_ra_state`.
    let sign_register = isa.ra_sign_state_register();
    let signed = |rules: &BTreeMap<u16, &SavedRegister>| {
        sign_register.is_some_and(
            |r| matches!(rules.get(&r), Some(SavedRegister::Constant(v)) if v & 1 == 1),
        )
    };
    let mut state_signed = false;
    for row in &frame.rows {
        let fail = |detail: String| UnwindError::Unrepresentable {
            frame: frame.range.start,
            row: row.range.start,
            detail,
        };
        // `check_frame` bounded every row offset by the frame's length.
        let offset = (row.range.start - frame.range.start) as u32;
        if state.cfa != Some(&row.cfa) {
            fde.add_instruction(offset, cfa_instruction(state.cfa, &row.cfa).map_err(fail)?);
            state.cfa = Some(&row.cfa);
        }
        let mut rules: BTreeMap<u16, &SavedRegister> =
            row.saved.iter().map(|(reg, rule)| (*reg, rule)).collect();
        if rules.len() != row.saved.len() {
            return Err(fail("a register has two rules".to_string()));
        }
        let row_signed = signed(&rules);
        if row_signed != state_signed {
            fde.add_instruction(offset, CallFrameInstruction::NegateRaState);
            state_signed = row_signed;
        }
        if let Some(r) = sign_register {
            rules.remove(&r);
        }
        for (&reg, &rule) in &rules {
            if state.rules.get(&reg) == Some(&rule) {
                continue;
            }
            // Back to the CIE's rule: `DW_CFA_restore` is one byte.
            let instruction = if initial_rules.get(&reg) == Some(&rule) {
                CallFrameInstruction::Restore(Register(reg))
            } else {
                rule_instruction(reg, rule).map_err(fail)?
            };
            fde.add_instruction(offset, instruction);
        }
        for &reg in state.rules.keys() {
            if rules.contains_key(&reg) {
                continue;
            }
            // Restoring a register the CIE gives no rule clears its rule; `initial_state`
            // picked a CIE that gives no rule to any register a row lacks.
            if initial_rules.contains_key(&reg) {
                return Err(fail(format!(
                    "the rule of register {reg} cannot be removed under this CIE"
                )));
            }
            fde.add_instruction(offset, CallFrameInstruction::Restore(Register(reg)));
        }
        state.rules = rules;
        if row.args_size != state.args_size {
            let size = u32::try_from(row.args_size)
                .map_err(|_| fail(format!("args size {} exceeds 32 bits", row.args_size)))?;
            fde.add_instruction(offset, CallFrameInstruction::ArgsSize(size));
            state.args_size = row.args_size;
        }
    }
    Ok(())
}

fn offset32(offset: i64) -> Result<i32, String> {
    i32::try_from(offset).map_err(|_| format!("offset {offset} exceeds 32 bits"))
}

/// The shortest instruction turning CFA rule `from` into `to`.
fn cfa_instruction(from: Option<&Cfa>, to: &Cfa) -> Result<CallFrameInstruction, String> {
    Ok(match (from, to) {
        (_, Cfa::Expression(bytes)) => {
            CallFrameInstruction::CfaExpression(Expression::raw(bytes.clone()))
        }
        (
            Some(Cfa::RegisterOffset {
                register: old_register,
                ..
            }),
            Cfa::RegisterOffset { register, offset },
        ) if old_register == register => CallFrameInstruction::CfaOffset(offset32(*offset)?),
        (
            Some(Cfa::RegisterOffset {
                offset: old_offset, ..
            }),
            Cfa::RegisterOffset { register, offset },
        ) if old_offset == offset => CallFrameInstruction::CfaRegister(Register(*register)),
        // From an expression only `DW_CFA_def_cfa` is valid: the others modify the
        // register-and-offset rule in place.
        (_, Cfa::RegisterOffset { register, offset }) => {
            CallFrameInstruction::Cfa(Register(*register), offset32(*offset)?)
        }
    })
}

fn rule_instruction(reg: u16, rule: &SavedRegister) -> Result<CallFrameInstruction, String> {
    let r = Register(reg);
    Ok(match rule {
        SavedRegister::AtCfaOffset(o) => CallFrameInstruction::Offset(r, offset32(*o)?),
        SavedRegister::InRegister(other) => CallFrameInstruction::Register(r, Register(*other)),
        SavedRegister::ValOffset(o) => CallFrameInstruction::ValOffset(r, offset32(*o)?),
        SavedRegister::Expression(bytes) => {
            CallFrameInstruction::Expression(r, Expression::raw(bytes.clone()))
        }
        SavedRegister::ValExpression(bytes) => {
            CallFrameInstruction::ValExpression(r, Expression::raw(bytes.clone()))
        }
        SavedRegister::SameValue => CallFrameInstruction::SameValue(r),
        SavedRegister::Undefined => CallFrameInstruction::Undefined(r),
        SavedRegister::Architectural | SavedRegister::Constant(_) => {
            return Err(format!(
                "register {reg} has a rule ({rule:?}) that no x86-64 CFA instruction expresses"
            ));
        }
    })
}

/// Offsets of the FDEs in `.eh_frame` bytes, in order. Each entry is a 32-bit length, then a
/// 32-bit CIE pointer that is 0 for a CIE.
fn fde_offsets(bytes: &[u8]) -> Result<Vec<usize>, UnwindError> {
    let word = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| UnwindError::Layout(format!("entry at offset {at:#x} is truncated")))
    };
    let mut offsets = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let length = word(pos)?;
        if length == 0 || length == u32::MAX {
            return Err(UnwindError::Layout(format!(
                "unexpected length {length:#x} at offset {pos:#x}"
            )));
        }
        if word(pos + 4)? != 0 {
            offsets.push(pos);
        }
        pos += 4 + length as usize;
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivet_elf::eh_frame::EhFrameTable;

    /// x86-64's DWARF numbering: rsp.
    const RSP: u16 = 7;

    const SECTION: Vaddr = Vaddr(0x40_0000);
    const CODE: Vaddr = Vaddr(0x40_1000);
    const RBX: u16 = 3;
    const RBP: u16 = 6;
    const RIP: u16 = 16;

    fn rsp(offset: i64) -> Cfa {
        Cfa::RegisterOffset {
            register: RSP,
            offset,
        }
    }

    fn row(start: u64, end: u64, cfa: Cfa, saved: &[(u16, SavedRegister)]) -> CfiRow {
        CfiRow {
            range: VaddrRange {
                start: CODE + start,
                end: CODE + end,
            },
            cfa,
            saved: saved.into(),
            args_size: 0,
        }
    }

    fn plain_cie() -> CieSpec {
        CieSpec {
            personality: None,
            signal_frame: false,
            return_address_register: RIP,
        }
    }

    fn frame(rows: Vec<CfiRow>) -> FrameSpec {
        FrameSpec {
            range: VaddrRange {
                start: rows[0].range.start,
                end: rows[rows.len() - 1].range.end,
            },
            rows,
            cie: plain_cie(),
            lsda: None,
        }
    }

    /// Writes `frames`, reads them back and checks each against its input.
    fn round_trip(frames: &[FrameSpec]) -> EhFrameOutput {
        let out = write_eh_frame(Isa::X86_64, frames, SECTION).unwrap();
        let back = EhFrameTable::parse(&out.bytes, SECTION, None, None).unwrap();
        assert_eq!(back.fdes.len(), frames.len());
        for spec in frames {
            // The reader sorts FDEs by address.
            let fde = back.fde_for(spec.range.start).unwrap();
            assert_eq!(fde.range, spec.range);
            assert_eq!(fde.lsda, spec.lsda);
            assert_eq!(CieSpec::of_fde(fde), spec.cie);
            assert_eq!(
                coalesce_rows(&back.rows(fde).unwrap()),
                coalesce_rows(&spec.rows)
            );
        }
        out
    }

    fn cie_count(bytes: &[u8]) -> usize {
        let mut count = 0;
        let mut pos = 0;
        while pos + 8 <= bytes.len() {
            let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            if len == 0 {
                break;
            }
            if bytes[pos + 4..pos + 8] == [0; 4] {
                count += 1;
            }
            pos += 4 + len;
        }
        count
    }

    fn ra() -> (u16, SavedRegister) {
        (RIP, SavedRegister::AtCfaOffset(-8))
    }

    #[test]
    fn typical_prologue_and_epilogue() {
        let rows = vec![
            row(0, 1, rsp(8), &[ra()]),
            row(
                1,
                4,
                rsp(16),
                &[ra(), (RBP, SavedRegister::AtCfaOffset(-16))],
            ),
            row(
                4,
                20,
                Cfa::RegisterOffset {
                    register: RBP,
                    offset: 16,
                },
                &[ra(), (RBP, SavedRegister::AtCfaOffset(-16))],
            ),
            // After `leave`: rbp restored, so it has no rule again.
            row(20, 21, rsp(8), &[ra()]),
            // Code after the `ret` runs with the frame set up.
            row(
                21,
                30,
                Cfa::RegisterOffset {
                    register: RBP,
                    offset: 16,
                },
                &[(RBP, SavedRegister::AtCfaOffset(-16)), ra()],
            ),
        ];
        let out = round_trip(&[frame(rows)]);
        assert_eq!(cie_count(&out.bytes), 1);
        assert_eq!(out.fdes, vec![(CODE, SECTION + 0x18)]);
    }

    #[test]
    fn expressions_and_every_register_rule() {
        let rows = vec![
            row(0, 4, rsp(8), &[ra()]),
            row(
                4,
                8,
                // The PLT's CFA: rsp + 8 + ((rip & 15) >= 11 ? 8 : 0).
                Cfa::Expression(vec![
                    0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22,
                ]),
                &[
                    ra(),
                    (RBX, SavedRegister::Expression(vec![0x77, 0x10])),
                    (RBP, SavedRegister::ValExpression(vec![0x77, 0x18])),
                    (12, SavedRegister::ValOffset(-24)),
                    (13, SavedRegister::InRegister(2)),
                    (14, SavedRegister::SameValue),
                    (15, SavedRegister::Undefined),
                ],
            ),
            // Back from an expression to register+offset, with other rules changed.
            row(
                8,
                12,
                rsp(32),
                &[
                    ra(),
                    (RBX, SavedRegister::AtCfaOffset(-16)),
                    (13, SavedRegister::InRegister(4)),
                ],
            ),
            // A different expression for the CFA, and one for the return address.
            row(
                12,
                16,
                Cfa::Expression(vec![0x76, 0x10]),
                &[(RIP, SavedRegister::Expression(vec![0x77, 0x00]))],
            ),
        ];
        round_trip(&[frame(rows)]);
    }

    #[test]
    fn args_size_changes_are_kept() {
        let mut rows = vec![
            row(0, 2, rsp(8), &[ra()]),
            row(2, 6, rsp(24), &[ra()]),
            row(6, 9, rsp(24), &[ra()]),
            row(9, 12, rsp(8), &[ra()]),
        ];
        rows[1].args_size = 16;
        // Same CFA, different args size: only DW_CFA_GNU_args_size separates the rows.
        rows[2].args_size = 0;
        rows[3].args_size = 0;
        round_trip(&[frame(rows)]);
    }

    #[test]
    fn signal_frame_without_return_address_rule() {
        // A signal trampoline: the caller's state comes from the signal frame through
        // expressions, and the first row has no rule for rip at all.
        let mut spec = frame(vec![
            row(0, 1, Cfa::Expression(vec![0x77, 0xa0, 0x01, 0x06]), &[]),
            row(
                1,
                8,
                Cfa::Expression(vec![0x77, 0xa0, 0x01, 0x06]),
                &[(RIP, SavedRegister::Expression(vec![0x77, 0xa8, 0x01]))],
            ),
            // The rule disappears again: needs a CIE without initial rules.
            row(8, 9, rsp(8), &[]),
        ]);
        spec.cie.signal_frame = true;
        round_trip(&[spec]);
    }

    #[test]
    fn offsets_that_are_not_multiples_of_8() {
        let odd = frame(vec![
            row(0, 1, rsp(8), &[ra()]),
            row(
                1,
                5,
                rsp(12),
                &[ra(), (RBX, SavedRegister::AtCfaOffset(-12))],
            ),
            row(5, 7, rsp(-4), &[ra(), (RBX, SavedRegister::ValOffset(-20))]),
        ]);
        let even = frame(vec![
            row(0x100, 0x101, rsp(8), &[ra()]),
            row(
                0x101,
                0x110,
                rsp(16),
                &[ra(), (RBX, SavedRegister::AtCfaOffset(-16))],
            ),
        ]);
        let out = round_trip(&[odd, even.clone(), even]);
        // One CIE with data alignment -1, one with -8 shared by the two even frames.
        assert_eq!(cie_count(&out.bytes), 2);
    }

    #[test]
    fn personality_and_lsda_pointers() {
        let mut with_lsda = frame(vec![row(0, 0x40, rsp(8), &[ra()])]);
        with_lsda.cie.personality = Some(Personality {
            addr: Vaddr(0x60_0000),
            indirect: true,
        });
        with_lsda.lsda = Some(Vaddr(0x50_0010));
        let mut direct = frame(vec![row(0x40, 0x80, rsp(8), &[ra()])]);
        direct.cie.personality = Some(Personality {
            addr: Vaddr(0x3f_0000),
            indirect: false,
        });
        // Same personality, no LSDA: a CIE without 'L'.
        let mut no_lsda = with_lsda.clone();
        no_lsda.range = VaddrRange::new(CODE + 0x80, 0x10);
        no_lsda.rows = vec![row(0x80, 0x90, rsp(8), &[ra()])];
        no_lsda.lsda = None;
        let out = round_trip(&[with_lsda, direct, no_lsda]);
        assert_eq!(cie_count(&out.bytes), 3);
    }

    #[test]
    fn empty_frame_list() {
        let out = write_eh_frame(Isa::X86_64, &[], SECTION).unwrap();
        assert_eq!(out.bytes, vec![0; 4]);
        assert!(out.fdes.is_empty());
        let hdr = write_eh_frame_hdr(Vaddr(0x3f_fff0), SECTION, &out.fdes).unwrap();
        assert_eq!(hdr, [1, 0x1b, 0x03, 0x3b, 0x0c, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn fdes_are_reported_sorted_with_their_addresses() {
        let late = frame(vec![row(0x100, 0x110, rsp(8), &[ra()])]);
        let early = frame(vec![row(0, 0x10, rsp(8), &[ra()])]);
        let out = round_trip(&[late, early]);
        // CIE (24 bytes), then the FDE of `late` (24), then the FDE of `early`.
        assert_eq!(
            out.fdes,
            vec![(CODE, SECTION + 0x30), (CODE + 0x100, SECTION + 0x18)]
        );
        let hdr = write_eh_frame_hdr(Vaddr(0x3f_ff00), SECTION, &out.fdes).unwrap();
        let entry = |i: usize| i32::from_le_bytes(hdr[i..i + 4].try_into().unwrap());
        assert_eq!(entry(4), 0x100 - 4);
        assert_eq!(entry(8), 2);
        assert_eq!(entry(12), 0x1100);
        assert_eq!(entry(16), 0x130);
        assert_eq!(entry(20), 0x1200);
        assert_eq!(entry(24), 0x118);
    }

    #[test]
    fn bad_frames_are_errors() {
        let good = frame(vec![
            row(0, 4, rsp(8), &[ra()]),
            row(4, 8, rsp(16), &[ra()]),
        ]);
        let mut gap = good.clone();
        gap.rows[1].range.start = CODE + 5;
        assert!(matches!(
            write_eh_frame(Isa::X86_64, &[gap], SECTION),
            Err(UnwindError::RowsDoNotCover { .. })
        ));
        let mut short = good.clone();
        short.range.end = CODE + 12;
        assert!(matches!(
            write_eh_frame(Isa::X86_64, &[short], SECTION),
            Err(UnwindError::RowsDoNotCover { .. })
        ));
        let mut empty = good.clone();
        empty.range.end = empty.range.start;
        empty.rows.clear();
        assert!(matches!(
            write_eh_frame(Isa::X86_64, &[empty], SECTION),
            Err(UnwindError::EmptyFrame { .. })
        ));
        let mut far = good.clone();
        far.lsda = Some(Vaddr(0x1_0000_0000));
        assert!(matches!(
            write_eh_frame(Isa::X86_64, &[far], SECTION),
            Err(UnwindError::OutOfReach { what: "LSDA", .. })
        ));
        let mut arch = good.clone();
        let mut saved = arch.rows[1].saved.to_vec();
        saved.push((RBX, SavedRegister::Architectural));
        arch.rows[1].saved = saved.into();
        assert!(matches!(
            write_eh_frame(Isa::X86_64, &[arch], SECTION),
            Err(UnwindError::Unrepresentable { .. })
        ));
        let mut huge = good.clone();
        huge.rows[1].cfa = rsp(1 << 40);
        assert!(matches!(
            write_eh_frame(Isa::X86_64, &[huge], SECTION),
            Err(UnwindError::Unrepresentable { .. })
        ));
        assert!(matches!(
            write_eh_frame(Isa::X86_64, &[good], SECTION + 4),
            Err(UnwindError::Misaligned { .. })
        ));
    }

    #[test]
    fn bad_header_inputs_are_errors() {
        let fdes = [(CODE, SECTION + 0x18), (CODE, SECTION + 0x30)];
        assert!(matches!(
            write_eh_frame_hdr(Vaddr(0x3f_ff00), SECTION, &fdes),
            Err(UnwindError::DuplicateFdeStart { .. })
        ));
        assert!(matches!(
            write_eh_frame_hdr(Vaddr(0x3f_ff02), SECTION, &fdes[..1]),
            Err(UnwindError::Misaligned { .. })
        ));
        assert!(matches!(
            write_eh_frame_hdr(Vaddr(0x1_0000_0000), SECTION, &fdes[..1]),
            Err(UnwindError::HdrOutOfReach { .. })
        ));
    }
}
