//! Switch tables on AArch64: what an indirect `br` jumps through, read backwards along the
//! path that reaches it.
//!
//! Both compilers emit the same shape (docs/aarch64-notes.md section 1): the table's address
//! from `adrp`+`add` (or `adr`, after lld's relaxation), an entry loaded by a register-offset
//! load (`ldrb`/`ldrh`/`ldr`/`ldrsw [table, index]`), an anchor from `adr`, and the target
//! computed as anchor + entry, shifted left by 2 (entries count instructions), by an `add`
//! with an extended (`sxtb #2`: gcc, signed) or shifted (`lsl #2`: clang, unsigned) register.
//! At -O0 gcc adds to the table's own address (anchor = table, word entries). The entries
//! carry no relocation: they are differences the assembler resolved, so the table is only
//! found by this analysis. A bound comes from the `cmp index, #N` and the conditional branch
//! that guards it. Anything else is `Unknown`: the caller skips the function, never guesses.
//!
//! A dispatch loop often computes the table's address once, before the loop: gcc and clang
//! keep it in a callee-saved register (Lua's `llex`, SQLite's `sqlite3_str_vappendf`), gcc
//! sometimes in a stack slot (SQLite's `sqlite3VdbeExec`: `str x0, [sp, #128]` in the
//! prologue, `ldr x0, [sp, #128]` at every dispatch). The window the caller gives ends at
//! the loop head, so [`hoisted_constants`] reads the whole function once for the registers
//! and slots that only ever hold one address, and the analysis takes a value from there when
//! the window itself does not define it.

use super::decode::{CondForm, Control, Inst, PcRelative, sign_extend};

/// The register written by an instruction of the dispatch sequence, with what it computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Def {
    /// `adr`/`adrp`: an address (`adrp`: a page, refined by a later `add #imm`).
    Address { addr: u64, page: bool },
    /// `add rd, rn, #imm`.
    AddImm { rn: u8, imm: u64 },
    /// `add rd, rn, rm, <extend|shift> #amount`.
    AddReg {
        rn: u8,
        rm: u8,
        extend: Extend,
        amount: u8,
    },
    /// A register-offset load `[rn, rm{, extend #scale}]` of `bytes`, sign-extending when
    /// `signed`.
    Load {
        rn: u8,
        rm: u8,
        bytes: u8,
        signed: bool,
        scaled: bool,
    },
    /// `mov rd, rm` (`orr rd, zr, rm`).
    Copy { rm: u8 },
    /// `ldr rd, [rn, #offset]`: from the stack pointer (rn = 31), a value spilled there
    /// (clang -O0 keeps the switch index on the stack between its check and the
    /// dispatch); from an address, a pointer slot (a GOT entry a tail call jumps through).
    LoadImm { rn: u8, offset: u64, bytes: u8 },
    /// Anything else that writes the register.
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extend {
    /// `lsl` (shifted register) or `uxtx`: no extension.
    None,
    Unsigned(u8),
    Signed(u8),
}

/// Which general register `word` writes, if it is one of the forms the dispatch uses or
/// any other instruction with a destination register in bits 0-4 that matters here.
fn definition(inst: &Inst) -> Option<(u8, Def)> {
    let w = inst.word;
    let rd = (w & 0x1f) as u8;
    let rn = ((w >> 5) & 0x1f) as u8;
    let rm = ((w >> 16) & 0x1f) as u8;
    if let Some(pc) = inst.pc_relative {
        return match pc {
            PcRelative::Adr { reg, target } => Some((
                reg,
                Def::Address {
                    addr: target,
                    page: false,
                },
            )),
            PcRelative::Adrp { reg, page } => Some((
                reg,
                Def::Address {
                    addr: page,
                    page: true,
                },
            )),
            PcRelative::Literal { .. } => Some((rd, Def::Other)),
        };
    }
    // ADD (immediate), 32 or 64 bit, not setting flags.
    if w & 0x7f80_0000 == 0x1100_0000 {
        let imm = u64::from((w >> 10) & 0xfff) << if w & (1 << 22) != 0 { 12 } else { 0 };
        return Some((rd, Def::AddImm { rn, imm }));
    }
    // ADD (shifted register), LSL only.
    if w & 0x7f20_0000 == 0x0b00_0000 {
        let shift = (w >> 22) & 3;
        let amount = ((w >> 10) & 0x3f) as u8;
        return Some((
            rd,
            if shift == 0 {
                Def::AddReg {
                    rn,
                    rm,
                    extend: Extend::None,
                    amount,
                }
            } else {
                Def::Other
            },
        ));
    }
    // ADD (extended register).
    if w & 0x7fe0_0000 == 0x0b20_0000 {
        let option = (w >> 13) & 7;
        let amount = ((w >> 10) & 7) as u8;
        let bits = [8u8, 16, 32, 64][(option & 3) as usize];
        let extend = match (option >> 2, bits) {
            (0, 64) => Extend::None,
            (0, b) => Extend::Unsigned(b),
            (_, 64) => Extend::None,
            (_, b) => Extend::Signed(b),
        };
        return Some((
            rd,
            Def::AddReg {
                rn,
                rm,
                extend,
                amount,
            },
        ));
    }
    // LDR/LDRB/LDRH/LDRSB/LDRSH/LDRSW (register offset), general registers.
    if w & 0x3b20_0c00 == 0x3820_0800 {
        let size = w >> 30;
        let opc = (w >> 22) & 3;
        let bytes = 1u8 << size;
        return Some((
            rd,
            match opc {
                1 => Def::Load {
                    rn,
                    rm,
                    bytes,
                    signed: false,
                    scaled: w & (1 << 12) != 0,
                },
                2 | 3 if size < 3 => Def::Load {
                    rn,
                    rm,
                    bytes,
                    signed: true,
                    scaled: w & (1 << 12) != 0,
                },
                _ => return None, // a store, or prefetch: writes no register
            },
        ));
    }
    // LDR (immediate, unsigned offset), general registers.
    if w & 0x3bc0_0000 == 0x3940_0000 {
        let size = w >> 30;
        let offset = u64::from((w >> 10) & 0xfff) << size;
        return Some((
            rd,
            Def::LoadImm {
                rn,
                offset,
                bytes: 1 << size,
            },
        ));
    }
    // MOV (register): ORR rd, zr, rm with no shift.
    if w & 0x7fe0_ffe0 == 0x2a00_03e0 {
        return Some((rd, Def::Copy { rm }));
    }
    if writes_rd(inst) {
        return Some((rd, Def::Other));
    }
    None
}

/// Whether an instruction outside the modelled forms may write register `rd` (bits 0-4):
/// conservatively yes for everything but branches, compares, stores and hints, so an
/// unknown write always breaks a chain instead of being looked through.
pub(crate) fn writes_rd(inst: &Inst) -> bool {
    let w = inst.word;
    if !matches!(inst.control, Control::Next) {
        return false;
    }
    // Loads and stores: bit 27 set, bit 25 clear.
    if w & 0x0a00_0000 == 0x0800_0000 {
        return load_store_writes_rt(w);
    }
    let is_compare = (w & 0x1f) == 0x1f && (w >> 29) & 1 == 1; // flags set, rd = zr
    let is_hint = w & 0xffff_f01f == 0xd503_201f;
    // svc and the others: bits 0-4 are part of the immediate (x0 is `also_writes`').
    let is_exception = w & 0xff00_0000 == 0xd400_0000;
    !(is_compare || is_hint || is_exception)
}

/// Whether a load or store (bit 27 set, bit 25 clear) writes its `Rt` (bits 0-4). A store
/// does not; a load does, whatever its `opc` says about sign extension (`ldrsw` has the
/// same bit 22 as a store); so do the atomic read-modify-writes (`ldadd`, `swp`, ... with
/// or without their release bit) and the authenticating loads (`ldraa`). Forms not known
/// to be stores count as writes.
fn load_store_writes_rt(w: u32) -> bool {
    let opc = (w >> 22) & 3;
    let simd = (w >> 26) & 1 == 1;
    match (w >> 28) & 3 {
        // Single registers: immediate, register offset, unscaled, atomics, `ldraa`.
        3 => {
            let size = w >> 30;
            let atomic = !simd && w & 0x0320_0c00 == 0x0020_0000;
            let authenticating = w & 0xff20_0400 == 0xf820_0400;
            if atomic || authenticating {
                true
            } else if simd {
                opc & 1 == 1 // `str q` has opc 10
            } else {
                opc != 0 && !(size == 3 && opc == 2) // `prfm` has size 11, opc 10
            }
        }
        // Pairs: L is bit 22.
        2 => (w >> 22) & 1 == 1,
        // Literal loads (`prfm` literal: opc 11 in bits 31-30); the rest of this space
        // (memory copy and set, `ldapur`/`stlur`, tags) counts as writing.
        1 if w & 0x3b00_0000 == 0x1800_0000 => w >> 30 != 3,
        1 => true,
        // Exclusive and ordered accesses, SIMD structures: L is bit 22.
        _ => (w >> 22) & 1 == 1,
    }
}

/// Registers an instruction writes besides its `rd`: a call's caller-saved registers
/// (x0-x18 and the link register x30), the base of a pre- or post-indexed load or store
/// (single register, pair, SIMD structure, `ldraa!`), the second register of a load pair,
/// the status or old value an exclusive store or a compare-and-swap returns (`Rs`, and
/// `Rs+1`, `Rt+1`, `Rt2` for the pair forms), what a memory copy or set advances (its three
/// registers), x0 after a system call, and the registers a PAC hint signs or authenticates
/// in place (x17 for the `1716` forms, x30 for the others).
pub(crate) fn also_writes(inst: &Inst, reg: u8) -> bool {
    let w = inst.word;
    if matches!(
        inst.control,
        Control::Call { .. } | Control::IndirectCall { .. }
    ) {
        return reg <= 18 || reg == 30;
    }
    let rt = (w & 0x1f) as u8;
    let rn = ((w >> 5) & 0x1f) as u8;
    let rt2 = ((w >> 10) & 0x1f) as u8;
    let rs = ((w >> 16) & 0x1f) as u8;
    // Load/store register, immediate pre- or post-indexed (bits 11-10: 01 post, 11 pre).
    let single_writeback = w & 0x3b20_0000 == 0x3800_0000 && (w >> 10) & 1 == 1;
    // Load/store pair, pre- or post-indexed (bits 24-23: 01 post, 11 pre).
    let is_pair = w & 0x3a00_0000 == 0x2800_0000;
    let pair_writeback = is_pair && (w >> 23) & 1 == 1;
    let pair_load = is_pair && (w >> 22) & 1 == 1;
    // `ldraa`/`ldrab` with writeback (bit 11).
    let authenticating_writeback = w & 0xff20_0c00 == 0xf820_0c00;
    // SIMD load/store of multiple or single structures, post-indexed.
    let structure_writeback = w & 0xbf80_0000 == 0x0c80_0000 || w & 0xbf80_0000 == 0x0d80_0000;
    if (single_writeback || pair_writeback || authenticating_writeback || structure_writeback)
        && rn == reg
    {
        return true;
    }
    if pair_load && rt2 == reg {
        return true;
    }
    if reg == 31 {
        return false; // below, 31 names the zero register, which nothing writes
    }
    // Load/store exclusive, ordered, compare-and-swap (bits 29-24 = 001000); bit 21 marks
    // the pair forms.
    if w & 0x3f00_0000 == 0x0800_0000 {
        let pair = (w >> 21) & 1 == 1;
        return reg == rs
            || (pair && (reg == rs.wrapping_add(1) || reg == rt.wrapping_add(1) || reg == rt2));
    }
    // Memory copy and set (FEAT_MOPS): destination, source or value, and size registers.
    if w & 0x3b20_0c00 == 0x1900_0400 {
        return reg == rt || reg == rn || reg == rs;
    }
    // svc, hvc, smc: the result comes back in x0.
    if w & 0xff00_0000 == 0xd400_0000 {
        return reg == 0;
    }
    // Hints 7 (xpaclri), 8-15 (the `1716` forms) and 24-31 (the `z` and `sp` forms).
    if w & 0xffff_f01f == 0xd503_201f {
        let hint = (w >> 5) & 0x7f;
        return match hint {
            7..=15 => reg == 17 || reg == 30,
            24..=31 => reg == 30,
            _ => false,
        };
    }
    false
}

/// How one instruction changes a general register: what a reaching-definitions walk over a
/// function's paths needs to see an `adrp` and the `add` that completes it as one
/// definition (the `add` adds to whatever reaches it in its source register, so a path
/// that enters between the two is seen for what it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterWrite {
    /// The register keeps its value.
    Untouched,
    /// Set to this address: `adr`, or `adrp` (the page is exactly what it writes).
    Constant(u64),
    /// Set to register `from` (as it was before the instruction) plus `add`: a 64-bit
    /// `add xd, xn, #imm` (`adrp`'s low 12 bits) or `mov xd, xn`.
    Offset { from: u8, add: u64 },
    /// Set to anything else, or possibly written (every form not modelled above).
    Other,
}

/// What `inst` does to general register `reg` (0-30).
pub fn register_write(inst: &Inst, reg: u8) -> RegisterWrite {
    if reg > 30 || also_writes(inst, reg) {
        return RegisterWrite::Other;
    }
    let Some((rd, def)) = definition(inst) else {
        return RegisterWrite::Untouched;
    };
    if rd != reg {
        return RegisterWrite::Untouched;
    }
    let wide = inst.word >> 31 == 1; // sf: a 32-bit result would not be the address
    match def {
        Def::Address { addr, .. } => RegisterWrite::Constant(addr),
        Def::AddImm { rn, imm } if wide && rn != 31 => RegisterWrite::Offset { from: rn, add: imm },
        Def::Copy { rm } if wide && rm != 31 => RegisterWrite::Offset { from: rm, add: 0 },
        _ => RegisterWrite::Other,
    }
}

/// The general registers (0-30) whose value on entry to `window` its instructions may read,
/// before the window writes them. More than it reads, never fewer: the operand fields an
/// instruction's class may read a register from count ([`read_fields`]).
pub fn window_live_in(window: &[Inst]) -> Vec<u8> {
    let mut written = 0u32;
    let mut live = Vec::new();
    for inst in window {
        let w = inst.word;
        for &field in read_fields(w) {
            let r = ((w >> field) & 0x1f) as u8;
            if r <= 30 && written & (1 << r) == 0 && !live.contains(&r) {
                live.push(r);
            }
        }
        for r in 0..=30u8 {
            if register_write(inst, r) != RegisterWrite::Untouched {
                written |= 1 << r;
            }
        }
    }
    live
}

/// The lowest bits of the register fields an instruction of `word`'s class may read (Arm
/// ARM, "Top-level encodings"). Precise for the classes compiled code dispatches with, all
/// four fields (bits 0-4, 5-9, 10-14, 16-20) for the others.
fn read_fields(word: u32) -> &'static [u32] {
    const ALL: &[u32] = &[0, 5, 10, 16];
    match (word >> 25) & 0xf {
        // Data processing, immediate.
        0b1000 | 0b1001 => match (word >> 23) & 7 {
            0b000 | 0b001 => &[],                      // adr, adrp
            0b101 if (word >> 29) & 3 == 3 => &[0],    // movk keeps the rest of rd
            0b101 => &[],                              // movz, movn
            0b110 if (word >> 29) & 3 == 1 => &[0, 5], // bfm keeps bits of rd
            0b111 => &[5, 16],                         // extr
            _ => &[5],                                 // add/sub, logical, sbfm, ubfm
        },
        // Branches, exception generation, system instructions.
        0b1010 | 0b1011 => {
            if word & 0x7c00_0000 == 0x1400_0000 || word & 0xfe00_0000 == 0x5400_0000 {
                &[] // b, bl, b.cond, bc.cond
            } else if word & 0xfe00_0000 == 0xd600_0000 {
                &[0, 5] // br, blr, ret and their authenticating forms (modifier in bits 0-4)
            } else if word & 0x7c00_0000 == 0x3400_0000 {
                &[0] // cbz, cbnz, tbz, tbnz
            } else {
                ALL
            }
        }
        // Data processing, register: three-source forms read bits 10-14 too.
        0b0101 | 0b1101 if (word >> 24) & 0x1f == 0b11011 => &[5, 10, 16],
        0b0101 | 0b1101 => &[5, 16],
        _ => ALL,
    }
}

/// What an indirect `br` was found to jump through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndirectBranch {
    /// Target = `anchor` + (entry << `shift`), the entry `entry_size` bytes at `table` +
    /// index * `entry_size`, sign- or zero-extended.
    Table {
        table: u64,
        anchor: u64,
        entry_size: u8,
        signed: bool,
        shift: u8,
        bound: Option<Bound>,
    },
    /// The target is the pointer stored at `slot` (a GOT entry, `adrp`+`ldr`): a tail
    /// call through it.
    MemorySlot { slot: u64 },
    /// The target was computed outside what the analysis models.
    Unknown,
}

/// The index check that bounds a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub entries: u64,
    /// The conditional branch that enforces it.
    pub check: u64,
    /// Where out-of-range indices go.
    pub default_target: u64,
}

impl IndirectBranch {
    /// The target of the entry `bytes` (little-endian, `entry_size` long).
    pub fn target_of(&self, bytes: &[u8]) -> Option<u64> {
        let IndirectBranch::Table {
            anchor,
            entry_size,
            signed,
            shift,
            ..
        } = *self
        else {
            return None;
        };
        let raw = match entry_size {
            1 => u64::from(*bytes.first()?),
            2 => u64::from(u16::from_le_bytes(bytes.get(..2)?.try_into().ok()?)),
            4 => u64::from(u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?)),
            _ => return None,
        };
        let value = if signed {
            sign_extend(raw as u32, u32::from(entry_size) * 8)
        } else {
            raw as i64
        };
        Some(anchor.wrapping_add_signed(value << shift))
    }
}

/// Where a function keeps a value across its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hoisted {
    /// General register `x0`-`x30`.
    Register(u8),
    /// The 8 bytes at `sp + offset`, `sp` as the function's body has it.
    StackSlot(u64),
}

/// The registers and stack slots of a function (`insts`, in address order) that hold one
/// address wherever they are defined: a register whose every definition is `adr` or
/// `adrp`+`add #lo12` of that address, a slot whose every store stores such a register.
///
/// Registers: calls clobber x0-x18 and x30, so what survives them is callee-saved; an
/// epilogue's reload of a callee-saved register from the stack is not a competing
/// definition (no code after it reads the register as a table base: it could not work).
///
/// Slots are stricter, since memory has other ways in: every store through `sp` (or `x29`,
/// when the prologue sets it to `sp + k`) is decoded and its bytes accounted for, an
/// undecodable one gives up on every slot; `sp` may not go down again after the first
/// store to a slot (it would move the slots); and a slot qualifies only if no stack address
/// at or below it is taken (`add xN, sp, #k`): a C object whose address escapes starts at
/// that address, so one that starts above the slot cannot reach it.
pub fn hoisted_constants(insts: &[Inst]) -> Vec<(Hoisted, u64)> {
    // None: never defined; Some(Some(v)): always v; Some(None): anything else.
    let mut regs = [None::<Option<u64>>; 31];
    let merge = |state: &mut Option<Option<u64>>, value: Option<u64>| {
        *state = match (*state, value) {
            (None, v) => Some(v),
            (Some(Some(a)), Some(b)) if a == b => Some(Some(a)),
            _ => Some(None),
        }
    };
    for (k, inst) in insts.iter().enumerate() {
        let w = inst.word;
        let rn = ((w >> 5) & 0x1f) as u8;
        let is_load = (w >> 22) & 1 == 1;
        let sp_based_load = rn == 31
            && is_load
            && (w & 0x3a00_0000 == 0x2800_0000
                || w & 0x3b00_0000 == 0x3900_0000
                || w & 0x3b20_0000 == 0x3800_0000);
        for r in 0..31u8 {
            if also_writes(inst, r) && !(sp_based_load && (19..=30).contains(&r)) {
                merge(&mut regs[usize::from(r)], None);
            }
        }
        let Some((rd, def)) = definition(inst) else {
            continue;
        };
        if rd == 31 || (sp_based_load && (19..=30).contains(&rd)) {
            continue;
        }
        let value = match def {
            Def::Address { addr, page: false } => Some(addr),
            // The first half of a pair: the register takes its value at the `add`.
            Def::Address { page: true, .. }
                if next_def(insts, k, rd)
                    .is_some_and(|(_, d)| matches!(d, Def::AddImm { rn, .. } if rn == rd)) =>
            {
                continue;
            }
            Def::AddImm { rn, imm } if rn == rd => page_before(insts, k, rd).map(|p| p + imm),
            _ => None,
        };
        merge(&mut regs[usize::from(rd)], value);
    }
    let mut out: Vec<(Hoisted, u64)> = regs
        .iter()
        .enumerate()
        .filter_map(|(r, s)| match s {
            Some(Some(v)) => Some((Hoisted::Register(r as u8), *v)),
            _ => None,
        })
        .collect();
    out.extend(stack_slot_constants(insts));
    out
}

/// The page an `adrp` put in `reg` before `insts[at]`, in the straight line that leads there.
fn page_before(insts: &[Inst], at: usize, reg: u8) -> Option<u64> {
    let (i, def) = last_def(insts, at, reg)?;
    let straight = insts[i..at]
        .iter()
        .all(|x| matches!(x.control, Control::Next));
    match def {
        Def::Address { addr, page: true } if straight => Some(addr),
        _ => None,
    }
}

/// The next definition of `reg` after `insts[at]`, in the straight line that follows it.
fn next_def(insts: &[Inst], at: usize, reg: u8) -> Option<(usize, Def)> {
    for (i, inst) in insts.iter().enumerate().skip(at + 1) {
        if also_writes(inst, reg) {
            return Some((i, Def::Other));
        }
        if let Some((rd, def)) = definition(inst)
            && rd == reg
        {
            return Some((i, def));
        }
        if !matches!(inst.control, Control::Next) {
            return None;
        }
    }
    None
}

/// A store's effect on the stack: the `sp`-relative bytes it writes (`None`: not through
/// `sp` or `x29`), and whether it moves `sp` down.
enum StackStore {
    NotStack,
    Writes {
        offset: i64,
        bytes: u64,
        lowers_sp: bool,
        stored: Option<u8>,
    },
    Unknown,
}

/// Decodes a store whose base is `sp`, or `x29` = `sp + fp` (`fp`: `None` when unknown).
fn stack_store_of(inst: &Inst, fp: Option<i64>) -> StackStore {
    let w = inst.word;
    let is_store = w & 0x0a00_0000 == 0x0800_0000 && (w >> 22) & 1 == 0;
    let rn = ((w >> 5) & 0x1f) as u8;
    if !is_store || (rn != 31 && rn != 29) {
        return StackStore::NotStack;
    }
    let base = match rn {
        31 => 0,
        _ => match fp {
            Some(k) => k,
            None => return StackStore::Unknown,
        },
    };
    let simd = (w >> 26) & 1 == 1;
    let rt = (w & 0x1f) as u8;
    if w & 0x3a00_0000 == 0x2800_0000 {
        // STP: signed offset (010), pre-index (011), post-index (001).
        let opc = w >> 30;
        let each: u64 = match (simd, opc) {
            (false, 0) => 4,
            (false, 2) => 8,
            (true, 0) => 4,
            (true, 1) => 8,
            (true, 2) => 16,
            _ => return StackStore::Unknown,
        };
        let imm = sign_extend((w >> 15) & 0x7f, 7) * each as i64;
        let mode = (w >> 23) & 3;
        // Offsets are relative to `sp` after the instruction: pre-index writes there.
        let (offset, lowers_sp) = match mode {
            2 => (base + imm, false),
            3 => (0, imm < 0),
            1 => (-imm, imm < 0),
            _ => return StackStore::Unknown,
        };
        if rn == 29 && mode != 2 {
            return StackStore::Unknown;
        }
        return StackStore::Writes {
            offset,
            bytes: 2 * each,
            lowers_sp,
            stored: None,
        };
    }
    let size = w >> 30;
    let bytes: u64 = if simd && (w >> 23) & 1 == 1 {
        16
    } else {
        1 << size
    };
    if w & 0x3b00_0000 == 0x3900_0000 {
        // STR/STRB/STRH (immediate, unsigned offset), general or SIMD&FP.
        let offset = base + (i64::from((w >> 10) & 0xfff) * bytes as i64);
        let stored = (!simd).then_some(rt);
        return StackStore::Writes {
            offset,
            bytes,
            lowers_sp: false,
            stored,
        };
    }
    if w & 0x3b20_0000 == 0x3800_0000 {
        // STUR (unscaled), pre- and post-indexed, unprivileged: a 9-bit signed offset.
        let imm = sign_extend((w >> 12) & 0x1ff, 9);
        let mode = (w >> 10) & 3;
        let (offset, lowers_sp) = match mode {
            0 | 2 => (base + imm, false),
            3 => (0, imm < 0),
            _ => (-imm, imm < 0),
        };
        if rn == 29 && (mode == 1 || mode == 3) {
            return StackStore::Unknown;
        }
        return StackStore::Writes {
            offset,
            bytes,
            lowers_sp,
            stored: None,
        };
    }
    StackStore::Unknown
}

/// The stack slots of [`hoisted_constants`].
fn stack_slot_constants(insts: &[Inst]) -> Vec<(Hoisted, u64)> {
    // x29 as the prologue sets it: `add x29, sp, #k` (`mov x29, sp` is k = 0).
    let fp = insts.iter().find_map(|i| {
        let w = i.word;
        (w & 0xff80_03ff == 0x9100_03fd)
            .then(|| i64::from((w >> 10) & 0xfff) << if w & (1 << 22) != 0 { 12 } else { 0 })
    });
    let mut slots: Vec<(i64, Option<u64>)> = Vec::new(); // (offset, value), one per slot
    let mut others: Vec<(i64, u64)> = Vec::new(); // every other stack write (offset, bytes)
    let mut first_slot_store: Option<usize> = None;
    let mut lowered_after = false;
    let mut escapes: Vec<i64> = Vec::new();
    for (k, inst) in insts.iter().enumerate() {
        let w = inst.word;
        // `add xN, sp|x29, #imm` with N other than sp and x29: a stack address escapes.
        if w & 0xff80_0000 == 0x9100_0000 {
            let (rd, rn) = ((w & 0x1f) as u8, ((w >> 5) & 0x1f) as u8);
            let imm = i64::from((w >> 10) & 0xfff) << if w & (1 << 22) != 0 { 12 } else { 0 };
            if rd != 31 && rd != 29 && (rn == 31 || rn == 29) {
                match (rn, fp) {
                    (31, _) => escapes.push(imm),
                    (_, Some(f)) => escapes.push(f + imm),
                    (_, None) => return Vec::new(),
                }
            }
        }
        // Anything else that lowers sp after a slot is written (`sub sp, sp, ...`).
        let sub_sp = (w & 0xff80_001f == 0xd100_001f) || (w & 0xffe0_001f == 0xcb20_001f);
        if sub_sp && first_slot_store.is_some() {
            lowered_after = true;
        }
        match stack_store_of(inst, fp) {
            StackStore::NotStack => {}
            StackStore::Unknown => return Vec::new(),
            StackStore::Writes {
                offset,
                bytes,
                lowers_sp,
                stored,
            } => {
                if lowers_sp && first_slot_store.is_some() {
                    lowered_after = true;
                }
                match stored {
                    Some(rt) if bytes == 8 && offset >= 0 => {
                        let value = if rt == 31 {
                            None
                        } else {
                            address_in(insts, k, rt, &[])
                        };
                        first_slot_store.get_or_insert(k);
                        match slots.iter_mut().find(|(o, _)| *o == offset) {
                            Some((_, v)) if *v == value => {}
                            Some((_, v)) => *v = None,
                            None => slots.push((offset, value)),
                        }
                    }
                    _ => others.push((offset, bytes)),
                }
            }
        }
    }
    if lowered_after {
        return Vec::new();
    }
    slots
        .into_iter()
        .filter_map(|(offset, value)| {
            let value = value?;
            let overlapped = others
                .iter()
                .any(|&(o, b)| o < offset + 8 && offset < o + b as i64);
            let reachable = escapes.iter().any(|&e| e <= offset + 7);
            (!overlapped && !reachable).then_some((Hoisted::StackSlot(offset as u64), value))
        })
        .collect()
}

/// The last definition of `reg` in `path[..end]`, with its position (an instruction that
/// writes it as a side effect counts as `Other`).
fn last_def(path: &[Inst], end: usize, reg: u8) -> Option<(usize, Def)> {
    path[..end].iter().enumerate().rev().find_map(|(i, inst)| {
        if also_writes(inst, reg) {
            return Some((i, Def::Other));
        }
        definition(inst).and_then(|(rd, def)| (rd == reg).then_some((i, def)))
    })
}

/// The address `reg` holds at `path[end]`: `adr`, or `adrp` + `add #lo12` (any copies in
/// between followed), or, when the path does not define it, one of the function's `hoisted`
/// constants (a register, or the stack slot it was reloaded from).
fn address_in(path: &[Inst], end: usize, reg: u8, hoisted: &[(Hoisted, u64)]) -> Option<u64> {
    let hoisted_value = |h: Hoisted| hoisted.iter().find(|(k, _)| *k == h).map(|(_, v)| *v);
    let Some((i, def)) = last_def(path, end, reg) else {
        return hoisted_value(Hoisted::Register(reg));
    };
    match def {
        Def::Address { addr, page: false } => Some(addr),
        Def::AddImm { rn, imm } => match last_def(path, i, rn)? {
            (_, Def::Address { addr, page: true }) => Some(addr + imm),
            _ => None,
        },
        Def::Copy { rm } => address_in(path, i, rm, hoisted),
        Def::LoadImm {
            rn: 31,
            offset,
            bytes: 8,
        } => match stack_store(path, i, offset, 8) {
            Some((store, stored)) => address_in(path, store, stored, hoisted),
            // A slot that holds one address throughout the function holds it here too,
            // whichever of its stores the path came through.
            None => hoisted_value(Hoisted::StackSlot(offset)),
        },
        _ => None,
    }
}

/// The registers that hold the value `reg` holds at `path[end]`, going back through copies
/// and stack spills: each with the position of the instruction that gave it the value
/// (`None`: it held it from before the path).
fn origin(path: &[Inst], end: usize, reg: u8) -> Vec<(u8, Option<usize>)> {
    let mut chain = Vec::new();
    let (mut at, mut r) = (end, reg);
    loop {
        let def = last_def(path, at, r);
        chain.push((r, def.map(|d| d.0)));
        match def {
            Some((i, Def::Copy { rm })) => (at, r) = (i, rm),
            Some((
                i,
                Def::LoadImm {
                    rn: 31,
                    offset,
                    bytes,
                },
            )) => {
                let Some((store, stored)) = stack_store(path, i, offset, bytes) else {
                    break;
                };
                (at, r) = (store, stored);
            }
            _ => break,
        }
    }
    chain
}

/// The last `str reg, [sp, #offset]` of `bytes` before `end`, with the stack pointer
/// unchanged since and no other store into those bytes in between: (its position, the
/// register stored).
fn stack_store(path: &[Inst], end: usize, offset: u64, bytes: u8) -> Option<(usize, u8)> {
    let offset = i64::try_from(offset).ok()?;
    let bytes = u64::from(bytes);
    for (k, inst) in path[..end].iter().enumerate().rev() {
        // sp moved (what `last_def` would find for register 31, without its scan: this runs
        // over whole functions for `hoisted_constants`)
        if also_writes(inst, 31) || definition(inst).is_some_and(|(rd, _)| rd == 31) {
            return None;
        }
        // Stores through x29 are not looked at (as before hoisted slots existed): code that
        // spills through sp does not address the same slots through the frame pointer.
        let through_fp = (inst.word >> 5) & 0x1f == 29;
        match stack_store_of(inst, None) {
            StackStore::NotStack => {}
            StackStore::Unknown if through_fp => {}
            StackStore::Unknown => return None,
            StackStore::Writes {
                offset: o,
                bytes: b,
                lowers_sp,
                stored,
            } => {
                if lowers_sp {
                    return None;
                }
                if o == offset && b == bytes {
                    return stored.filter(|&r| r != 31).map(|r| (k, r));
                }
                if o < offset + bytes as i64 && offset < o + b as i64 {
                    return None;
                }
            }
        }
    }
    None
}

/// The bound on the index whose holders are `regs` (from `origin`): a compare of one of
/// them with an immediate (`cmp` or `subs`) followed on the path by a conditional branch
/// that the path takes (`b.ls`, `b.lo`: in range) or falls through (`b.hi`, `b.hs`: out of
/// range goes to the default). `taken` lists the conditional branches whose target the
/// path follows.
fn bound(path: &[Inst], end: usize, regs: &[(u8, Option<usize>)], taken: &[u64]) -> Option<Bound> {
    let (k, inst) = path[..end].iter().enumerate().rev().find(|(_, i)| {
        matches!(
            i.control,
            Control::Conditional {
                form: CondForm::Flags { .. },
                ..
            }
        )
    })?;
    let Control::Conditional {
        target,
        form: CondForm::Flags { cond, .. },
    } = inst.control
    else {
        return None;
    };
    // SUBS (immediate), unshifted: the flags of rn - imm.
    let (c, cmp) = path[..k]
        .iter()
        .enumerate()
        .rev()
        .find(|(_, i)| sets_flags(i))?;
    if cmp.word & 0x7fc0_0000 != 0x7100_0000 {
        return None; // the last flag-setter is not an unshifted compare with an immediate
    }
    let rn = ((cmp.word >> 5) & 0x1f) as u8;
    let holds_index = regs
        .iter()
        .any(|&(r, given)| r == rn && last_def(path, c, rn).map(|d| d.0) == given);
    if !holds_index {
        return None;
    }
    let n = u64::from((cmp.word >> 10) & 0xfff);
    let is_taken = taken.contains(&inst.addr);
    let next = inst.addr + 4;
    // cond: 2 = hs, 3 = lo, 8 = hi, 9 = ls.
    let (entries, default_target) = match (cond, is_taken) {
        (9, true) => (n + 1, next),
        (8, false) => (n + 1, target),
        (3, true) => (n, next),
        (2, false) => (n, target),
        _ => return None,
    };
    Some(Bound {
        entries,
        check: inst.addr,
        default_target,
    })
}

/// Whether an instruction sets the condition flags: add/sub (immediate, shifted or
/// extended register, with carry) with the S bit, `ands`/`bics`, `ccmp`/`ccmn`, `fcmp`, and
/// writes of NZCV.
fn sets_flags(inst: &Inst) -> bool {
    let w = inst.word;
    let s_bit = (w >> 29) & 1 == 1;
    let both_opc = (w >> 29) & 3 == 3;
    let add_sub_imm = w & 0x1f00_0000 == 0x1100_0000 && s_bit;
    let add_sub_reg = w & 0x1f00_0000 == 0x0b00_0000 && s_bit;
    let with_carry = w & 0x1fe0_0000 == 0x1a00_0000 && s_bit;
    let cond_compare = w & 0x1fe0_0000 == 0x1a40_0000 && s_bit;
    let ands_imm = w & 0x1f80_0000 == 0x1200_0000 && both_opc;
    let ands_reg = w & 0x1f00_0000 == 0x0a00_0000 && both_opc;
    let fcmp = w & 0x5f20_3c00 == 0x1e20_2000;
    let msr_nzcv = w & 0xffff_ffe0 == 0xd51b_4200;
    add_sub_imm
        || add_sub_reg
        || with_carry
        || cond_compare
        || ands_imm
        || ands_reg
        || fcmp
        || msr_nzcv
}

/// Analyses the `br` that ends `path` (the instructions in the order the path executes
/// them; conditional branches at the addresses in `taken` are followed to their target,
/// the others fall through).
pub fn analyze_indirect_branch(path: &[Inst], taken: &[u64]) -> IndirectBranch {
    analyze_indirect_branch_with(path, taken, &[])
}

/// [`analyze_indirect_branch`], with the function's [`hoisted_constants`] for the values the
/// path reads without defining them.
pub fn analyze_indirect_branch_with(
    path: &[Inst],
    taken: &[u64],
    hoisted: &[(Hoisted, u64)],
) -> IndirectBranch {
    let Some((last, rest)) = path.split_last() else {
        return IndirectBranch::Unknown;
    };
    let Control::IndirectJump { reg } = last.control else {
        return IndirectBranch::Unknown;
    };
    let end = rest.len();
    // Through copies to what computed the target.
    let mut source = last_def(path, end, reg);
    while let Some((i, Def::Copy { rm })) = source {
        source = last_def(path, i, rm);
    }
    if let Some((
        i,
        Def::LoadImm {
            rn,
            offset,
            bytes: 8,
        },
    )) = source
        && rn != 31
    {
        // `adrp x, page; ldr y, [x, #lo12]`: the page is the base.
        let base = match last_def(path, i, rn) {
            Some((_, Def::Address { addr, page: true })) => Some(addr),
            _ => address_in(path, i, rn, hoisted),
        };
        return match base {
            Some(base) => IndirectBranch::MemorySlot {
                slot: base + offset,
            },
            None => IndirectBranch::Unknown,
        };
    }
    let Some((
        add_at,
        Def::AddReg {
            rn,
            rm,
            extend,
            amount,
        },
    )) = source
    else {
        return IndirectBranch::Unknown;
    };
    // One operand is the anchor (an address), the other the loaded entry.
    let (anchor_reg, entry_reg) = if address_in(path, add_at, rn, hoisted).is_some() {
        (rn, rm)
    } else {
        (rm, rn)
    };
    let Some(anchor) = address_in(path, add_at, anchor_reg, hoisted) else {
        return IndirectBranch::Unknown;
    };
    let Some((
        load_at,
        Def::Load {
            rn: table_reg,
            rm: index_reg,
            bytes,
            signed: load_signed,
            scaled,
        },
    )) = last_def(path, add_at, entry_reg)
    else {
        return IndirectBranch::Unknown;
    };
    if bytes > 4 || (bytes > 1 && !scaled) {
        return IndirectBranch::Unknown;
    }
    // The table register must still hold the table at the load, and the anchor register
    // must not be redefined between the load and the add (last_def above saw the add's view).
    let Some(table) = address_in(path, load_at, table_reg, hoisted) else {
        return IndirectBranch::Unknown;
    };
    let signed = match extend {
        Extend::Signed(b) if b == bytes * 8 => true,
        Extend::Signed(_) => return IndirectBranch::Unknown,
        Extend::Unsigned(b) if b < bytes * 8 => return IndirectBranch::Unknown,
        Extend::Unsigned(_) => load_signed,
        Extend::None => load_signed,
    };
    let bound = bound(path, load_at, &origin(path, load_at, index_reg), taken);
    IndirectBranch::Table {
        table,
        anchor,
        entry_size: bytes,
        signed,
        shift: amount,
        bound,
    }
}
