//! Encoding the AArch64 forms Rivet changes: branches and PC-relative operands pointed at
//! new addresses, conditions inverted (a short conditional branch over a `b` reaches
//! anywhere a `b` does), far jumps through veneers, and the fill and landing-pad words.
//!
//! Only these forms are encoded: every other instruction is copied as it is, because an
//! AArch64 instruction's bytes do not depend on its address unless one of these fields
//! does. The bit layouts are the ones `super::decode` reads; each function refuses a
//! target its field cannot reach rather than truncating it.

use super::decode::{Control, PcRelative};
use super::decode::{IMM14, IMM19, IMM26, immediate_branch, pc_relative};

/// `nop`.
pub const NOP: u32 = 0xd503_201f;
/// `udf #0`: fills gaps, so a stray jump into them stops at once (the x86-64 `int3`).
pub const FILL: u32 = 0x0000_0000;
/// `bti c`, `bti j`, `bti jc`: landing pads for indirect calls, jumps, or both.
pub const BTI_C: u32 = 0xd503_245f;
pub const BTI_J: u32 = 0xd503_249f;
pub const BTI_JC: u32 = 0xd503_24df;
/// `paciasp`, `pacibsp`: sign the return address; also `bti c` landing pads.
pub const PACIASP: u32 = 0xd503_233f;
pub const PACIBSP: u32 = 0xd503_237f;
/// The intra-procedure-call scratch register veneers may clobber (AAPCS64: x16, IP0).
pub const VENEER_REGISTER: u8 = 16;

/// How far a field reaches, in bytes from the instruction (or, for ADRP, from its page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// `b`, `bl`: +-128 MiB.
    Imm26,
    /// `b.cond`, `cbz`/`cbnz`, literal loads: +-1 MiB.
    Imm19,
    /// `tbz`/`tbnz`: +-32 KiB.
    Imm14,
    /// `adr`: +-1 MiB, any byte.
    Adr,
    /// `adrp`: +-4 GiB, in pages.
    Adrp,
}

impl Reach {
    /// The smallest and largest offsets the field holds, in bytes.
    pub const fn bounds(self) -> (i64, i64) {
        match self {
            Reach::Imm26 => (-(1 << 27), (1 << 27) - 4),
            Reach::Imm19 => (-(1 << 20), (1 << 20) - 4),
            Reach::Imm14 => (-(1 << 15), (1 << 15) - 4),
            Reach::Adr => (-(1 << 20), (1 << 20) - 1),
            Reach::Adrp => (-(1i64 << 32), (1i64 << 32) - 4096),
        }
    }

    fn holds(self, offset: i64) -> bool {
        let (lo, hi) = self.bounds();
        let aligned = match self {
            Reach::Adr => true,
            Reach::Adrp => offset & 0xfff == 0,
            _ => offset & 3 == 0,
        };
        aligned && offset >= lo && offset <= hi
    }
}

/// Why an encoding is impossible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{target:#x} is out of reach of the instruction at {at:#x} ({reach:?})")]
    OutOfReach { at: u64, target: u64, reach: Reach },
    #[error("{word:#010x} has no PC-relative field to point elsewhere")]
    NotPcRelative { word: u32 },
    #[error("{word:#010x} is not a conditional branch that can be inverted")]
    NotInvertible { word: u32 },
}

fn offset(at: u64, target: u64) -> i64 {
    target.wrapping_sub(at) as i64
}

fn put(word: u32, (lsb, width): (u32, u32), value: i64) -> u32 {
    let mask = ((1u32 << width) - 1) << lsb;
    (word & !mask) | (((value as u32) << lsb) & mask)
}

fn checked(at: u64, target: u64, reach: Reach, off: i64) -> Result<i64, EncodeError> {
    if reach.holds(off) {
        Ok(off)
    } else {
        Err(EncodeError::OutOfReach { at, target, reach })
    }
}

/// The reach of `word`'s PC-relative field, if it has one.
pub fn reach_of(word: u32) -> Option<Reach> {
    match immediate_branch(word, 0) {
        Some(Control::Jump { .. } | Control::Call { .. }) => return Some(Reach::Imm26),
        Some(Control::Conditional { .. }) if word & 0x7e00_0000 == 0x3600_0000 => {
            return Some(Reach::Imm14);
        }
        Some(Control::Conditional { .. }) => return Some(Reach::Imm19),
        _ => {}
    }
    match pc_relative(word, 0)? {
        PcRelative::Adr { .. } => Some(Reach::Adr),
        PcRelative::Adrp { .. } => Some(Reach::Adrp),
        PcRelative::Literal { .. } => Some(Reach::Imm19),
    }
}

/// `word`, moved to `at`, with its PC-relative field pointing at `target` (for ADRP: at
/// `target`'s page). Everything else in the word stays.
pub fn retarget(word: u32, at: u64, target: u64) -> Result<u32, EncodeError> {
    let reach = reach_of(word).ok_or(EncodeError::NotPcRelative { word })?;
    Ok(match reach {
        Reach::Imm26 => put(
            word,
            IMM26,
            checked(at, target, reach, offset(at, target))? >> 2,
        ),
        Reach::Imm19 => put(
            word,
            IMM19,
            checked(at, target, reach, offset(at, target))? >> 2,
        ),
        Reach::Imm14 => put(
            word,
            IMM14,
            checked(at, target, reach, offset(at, target))? >> 2,
        ),
        Reach::Adr => put_adr(word, checked(at, target, reach, offset(at, target))?),
        Reach::Adrp => {
            let pages = offset(at & !0xfff, target & !0xfff);
            put_adr(word, checked(at, target, reach, pages)? >> 12)
        }
    })
}

fn put_adr(word: u32, imm: i64) -> u32 {
    let imm = imm as u32;
    let word = (word & !(3 << 29)) | ((imm & 3) << 29);
    (word & !(0x7_ffff << 5)) | (((imm >> 2) & 0x7_ffff) << 5)
}

/// The conditional branch `word` with the opposite condition (same target field):
/// `b.eq` <-> `b.ne`, `cbz` <-> `cbnz`, `tbz` <-> `tbnz`. `b.al`/`b.nv` (always taken)
/// have no opposite.
pub fn invert(word: u32) -> Result<u32, EncodeError> {
    match immediate_branch(word, 0) {
        Some(Control::Conditional { .. }) if word & 0xff00_0000 == 0x5400_0000 => {
            if word & 0xe == 0xe {
                Err(EncodeError::NotInvertible { word })
            } else {
                Ok(word ^ 1)
            }
        }
        Some(Control::Conditional { .. }) => Ok(word ^ (1 << 24)),
        _ => Err(EncodeError::NotInvertible { word }),
    }
}

/// `b target` at `at`.
pub fn b(at: u64, target: u64) -> Result<u32, EncodeError> {
    retarget(0x1400_0000, at, target)
}

/// `bl target` at `at`.
pub fn bl(at: u64, target: u64) -> Result<u32, EncodeError> {
    retarget(0x9400_0000, at, target)
}

/// A veneer at `at` that jumps to `target` anywhere within +-4 GiB, clobbering only x16
/// (which AAPCS64 lets a call's path clobber): `adrp x16, target; add x16, x16,
/// :lo12:target; br x16`. Where BTI is enforced, `target` must start with a `bti j` or
/// `bti jc` (or be a `paciasp`-style pad for x16/x17 jumps).
pub fn veneer(at: u64, target: u64) -> Result<[u32; 3], EncodeError> {
    let r = u32::from(VENEER_REGISTER);
    let adrp = retarget(0x9000_0000 | r, at, target)?;
    let add = 0x9100_0000 | (((target & 0xfff) as u32) << 10) | (r << 5) | r;
    let br = 0xd61f_0000 | (r << 5);
    Ok([adrp, add, br])
}

/// Where the [`veneer`] `words` (placed at `at`) jumps; `None` for words that are not one.
pub fn veneer_target(words: [u32; 3], at: u64) -> Option<u64> {
    let r = u32::from(VENEER_REGISTER);
    let [adrp, add, br] = words;
    let page = match super::decode(adrp, at).ok()?.pc_relative? {
        super::PcRelative::Adrp { reg, page } if u32::from(reg) == r => page,
        _ => return None,
    };
    let add_ok = add & 0xffc0_03ff == 0x9100_0000 | (r << 5) | r;
    (add_ok && br == 0xd61f_0000 | (r << 5)).then(|| page + u64::from((add >> 10) & 0xfff))
}

/// True when `word` accepts the `br x16` of a [`veneer`] where BTI is enforced: that jump
/// sets BTYPE to 0b01, which every `bti` with a `c` or a `j` accepts, and `paciasp` and
/// `pacibsp` too.
pub fn lands_veneer(word: u32) -> bool {
    matches!(word, BTI_C | BTI_J | BTI_JC | PACIASP | PACIBSP)
}

/// A landing pad at `at` for a veneer whose destination `target` has none (a block that was
/// only ever reached by direct branches, or a function only called directly, compiled
/// without a pad): `bti j; b target`. It sits within a `b`'s reach of `target`.
pub fn landing_pad(at: u64, target: u64) -> Result<[u32; 2], EncodeError> {
    Ok([BTI_J, b(at + 4, target)?])
}

/// Where the landing pad `words` (placed at `at`, as [`landing_pad`] writes it) jumps.
pub fn landing_pad_target(words: [u32; 2], at: u64) -> Option<u64> {
    let [pad, jump] = words;
    (pad == BTI_J && jump & 0xfc00_0000 == 0x1400_0000)
        .then(|| (at + 4).wrapping_add(branch_displacement(jump)))
}

/// The byte displacement of a `b`/`bl` word (imm26, times 4, sign-extended).
fn branch_displacement(word: u32) -> u64 {
    (((word & 0x03ff_ffff) << 6) as i32 >> 4) as i64 as u64
}

/// The GNU property of AArch64 features (`GNU_PROPERTY_AARCH64_FEATURE_1_AND`) and its BTI
/// bit: a file that has it runs with BTI enforced on its pages where the CPU implements it.
pub const PROPERTY_FEATURE_1_AND: u32 = 0xc000_0000;
pub const FEATURE_1_BTI: u32 = 1;

/// `word`, an instruction that holds the low 12 bits of an address (the second half of an
/// ADRP pair: `add xd, xn, #lo12`, or a load or store with an unsigned offset, scaled by its
/// access size), changed to hold those of `address`. A scaled offset must stay aligned.
pub fn set_low12(word: u32, address: u64) -> Result<u32, EncodeError> {
    let lo12 = (address & 0xfff) as u32;
    // ADD (immediate), 64- or 32-bit, unshifted.
    if word & 0x7fc0_0000 == 0x1100_0000 {
        return Ok((word & !(0xfff << 10)) | (lo12 << 10));
    }
    // Load/store register (unsigned immediate): size in bits 31-30, V in 26, opc in 23-22.
    if word & 0x3b00_0000 == 0x3900_0000 {
        let size = word >> 30;
        let vector = word & (1 << 26) != 0;
        let opc = (word >> 22) & 3;
        // 128-bit vector accesses scale by 16.
        let scale = if vector && size == 0 && opc >= 2 {
            4
        } else {
            size
        };
        if lo12 & ((1 << scale) - 1) != 0 {
            return Err(EncodeError::OutOfReach {
                at: 0,
                target: address,
                reach: Reach::Adr,
            });
        }
        return Ok((word & !(0xfff << 10)) | ((lo12 >> scale) << 10));
    }
    Err(EncodeError::NotPcRelative { word })
}
