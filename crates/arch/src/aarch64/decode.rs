//! Decoding AArch64 instructions into what Rivet's model needs: where control goes, which
//! operand is PC-relative and where it points, and the marks that constrain a rewrite
//! (exclusive-monitor sequences, BTI landing pads, return-address signing).
//!
//! disarm64 (docs/aarch64-decoders.md: it decodes every instruction gcc-12, clang-19 and
//! glibc's hand-written code emit here, SVE included, at 39.5 M instructions/s) decides
//! whether a word is an instruction, its class and its text. The fields of the forms Rivet
//! rewrites (branch offsets, ADR/ADRP, literal loads) are read here from the architecture's
//! bit layout instead, by the same code the encoder (`super::encode`) inverts, so a decode
//! and a re-encode can never disagree about where a field lives; the tests check these
//! readings against disarm64's operand descriptions.

use disarm64::{InsnDisplay, InsnOpcode};
use disarm64_defn::InsnClass;

/// Every AArch64 instruction is four bytes, aligned to four.
pub const INSN_SIZE: u64 = 4;

/// Where execution goes after an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// On to the next instruction.
    Next,
    /// `b`: always to `target`.
    Jump { target: u64 },
    /// `bl`: to `target`, returning to the next instruction.
    Call { target: u64 },
    /// `b.cond`, `bc.cond`, `cbz`/`cbnz`, `tbz`/`tbnz`: to `target` or on.
    Conditional { target: u64, form: CondForm },
    /// `br` and its authenticating forms: to the address in register `reg`.
    IndirectJump { reg: u8 },
    /// `blr` and its authenticating forms.
    IndirectCall { reg: u8 },
    /// `ret`, `retaa`, `retab`.
    Return,
    /// `eret` and its authenticating forms (exception return: kernel code, never compiled
    /// into user programs, but a decoder must not call it a fall-through).
    ExceptionReturn,
    /// `udf`, `brk`, `hlt`: nothing follows in the same flow.
    Trap,
    /// A branch of an extension Rivet does not model yet (FEAT_CMPBR's `cb<cc>`, Armv9.6):
    /// decoded, so not data, but a function holding one cannot be rewritten.
    Unmodelled,
}

/// The condition of a conditional branch, with what re-encoding it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondForm {
    /// `b.cond` (`bc.cond` when `consistent`, the hinted FEAT_HBC form).
    Flags { cond: u8, consistent: bool },
    /// `cbz`/`cbnz` (`nonzero`) on `w`/`x` register `reg` (`wide`).
    Compare { nonzero: bool, wide: bool, reg: u8 },
    /// `tbz`/`tbnz` (`nonzero`) on bit `bit` of register `reg`.
    TestBit { nonzero: bool, bit: u8, reg: u8 },
}

/// A PC-relative operand that is not a branch target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcRelative {
    /// `adr reg, target`.
    Adr { reg: u8, target: u64 },
    /// `adrp reg, page`: the 4 KiB page of a later `add`/`ldr`/`str`'s full address.
    Adrp { reg: u8, page: u64 },
    /// `ldr`/`ldrsw`/`prfm` (literal): reads `bytes` at `target` (0 for `prfm`).
    Literal { target: u64, bytes: u8 },
}

/// Part of an exclusive-monitor sequence (`ldxr` .. `stxr`): nothing may be inserted or
/// split between a load and its store, or the store may fail forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exclusive {
    Load,
    Store,
    Clear,
}

/// Pointer authentication of the return address (PAC-RET) and BTI landing pads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// `bti` with the kinds of indirect branch it accepts: calls (`c`), jumps (`j`).
    Bti { calls: bool, jumps: bool },
    /// `paciasp`/`pacibsp` (and the `z`/`1716` forms): signs; `paciasp` and `pacibsp` also
    /// act as a `bti c` landing pad.
    Sign,
    /// `autiasp`/`autibsp` (and the `z`/`1716` forms): authenticates.
    Authenticate,
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inst {
    pub addr: u64,
    pub word: u32,
    pub control: Control,
    pub pc_relative: Option<PcRelative>,
    pub exclusive: Option<Exclusive>,
    pub guard: Option<Guard>,
}

/// A word that is not an instruction (data, or an encoding the architecture leaves
/// unallocated).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{word:#010x} at {addr:#x} is not an AArch64 instruction")]
pub struct Invalid {
    pub addr: u64,
    pub word: u32,
}

/// Sign-extends the low `bits` bits of `v`.
pub(crate) fn sign_extend(v: u32, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((i64::from(v)) << shift) >> shift
}

/// The branch forms' offset fields: (lowest bit, width in bits).
pub(crate) const IMM26: (u32, u32) = (0, 26);
pub(crate) const IMM19: (u32, u32) = (5, 19);
pub(crate) const IMM14: (u32, u32) = (5, 14);

fn field(word: u32, (lsb, width): (u32, u32)) -> u32 {
    (word >> lsb) & ((1u32 << width) - 1)
}

/// `word`'s branch offset field, as a byte offset.
fn branch_offset(word: u32, f: (u32, u32)) -> i64 {
    sign_extend(field(word, f), f.1) * 4
}

/// ADR/ADRP's 21-bit immediate (immhi:immlo).
pub(crate) fn adr_imm(word: u32) -> i64 {
    let lo = (word >> 29) & 3;
    let hi = (word >> 5) & 0x7_ffff;
    sign_extend((hi << 2) | lo, 21)
}

fn at(addr: u64, offset: i64) -> u64 {
    addr.wrapping_add_signed(offset)
}

/// The control flow of the branch forms, read from their bits (`None`: not a branch with
/// an immediate offset).
pub(crate) fn immediate_branch(word: u32, addr: u64) -> Option<Control> {
    if word & 0x7c00_0000 == 0x1400_0000 {
        let target = at(addr, branch_offset(word, IMM26));
        return Some(if word >> 31 == 1 {
            Control::Call { target }
        } else {
            Control::Jump { target }
        });
    }
    if word & 0xff00_0000 == 0x5400_0000 {
        return Some(Control::Conditional {
            target: at(addr, branch_offset(word, IMM19)),
            form: CondForm::Flags {
                cond: (word & 0xf) as u8,
                consistent: word & 0x10 != 0,
            },
        });
    }
    if word & 0x7e00_0000 == 0x3400_0000 {
        return Some(Control::Conditional {
            target: at(addr, branch_offset(word, IMM19)),
            form: CondForm::Compare {
                nonzero: word & (1 << 24) != 0,
                wide: word >> 31 == 1,
                reg: (word & 0x1f) as u8,
            },
        });
    }
    if word & 0x7e00_0000 == 0x3600_0000 {
        return Some(Control::Conditional {
            target: at(addr, branch_offset(word, IMM14)),
            form: CondForm::TestBit {
                nonzero: word & (1 << 24) != 0,
                bit: (((word >> 31) << 5) | ((word >> 19) & 0x1f)) as u8,
                reg: (word & 0x1f) as u8,
            },
        });
    }
    None
}

/// ADR, ADRP and literal loads, read from their bits.
pub(crate) fn pc_relative(word: u32, addr: u64) -> Option<PcRelative> {
    if word & 0x1f00_0000 == 0x1000_0000 {
        let reg = (word & 0x1f) as u8;
        let imm = adr_imm(word);
        return Some(if word >> 31 == 1 {
            PcRelative::Adrp {
                reg,
                page: (addr & !0xfff).wrapping_add_signed(imm << 12),
            }
        } else {
            PcRelative::Adr {
                reg,
                target: at(addr, imm),
            }
        });
    }
    if word & 0x3b00_0000 == 0x1800_0000 {
        let opc = word >> 30;
        let simd = word & (1 << 26) != 0;
        let bytes = match (opc, simd) {
            (0, false) | (2, false) | (0, true) => 4,
            (1, false) | (1, true) => 8,
            (2, true) => 16,
            _ => 0, // prfm
        };
        return Some(PcRelative::Literal {
            target: at(addr, branch_offset(word, IMM19)),
            bytes,
        });
    }
    None
}

fn guard(word: u32) -> Option<Guard> {
    // HINT #imm: bti (32..38 even), pac*/aut* (8..14 for 1716, 24..31 for z/sp).
    if word & 0xffff_f01f != 0xd503_201f {
        return None;
    }
    match (word >> 5) & 0x7f {
        32 => Some(Guard::Bti {
            calls: false,
            jumps: false,
        }),
        34 => Some(Guard::Bti {
            calls: true,
            jumps: false,
        }),
        36 => Some(Guard::Bti {
            calls: false,
            jumps: true,
        }),
        38 => Some(Guard::Bti {
            calls: true,
            jumps: true,
        }),
        8 | 10 | 24 | 25 | 26 | 27 => Some(Guard::Sign),
        12 | 14 | 28 | 29 | 30 | 31 => Some(Guard::Authenticate),
        _ => None,
    }
}

/// What the decoder's tables say about a word, in a few bytes: the rest of an [`Inst`] is
/// read again from the word's bits when asked for (`assemble`), so the program model can keep
/// millions of instructions at 16 bytes each (`super::inst::A64Inst`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Class {
    pub(crate) control: ControlKind,
    /// ADR, ADRP or a literal load.
    pub(crate) pc_relative: bool,
    pub(crate) exclusive: Option<Exclusive>,
    /// What one execution costs, in cycles of a simple instruction (a latency class).
    pub(crate) cost: u8,
}

/// [`Control`] without the fields the bits hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ControlKind {
    Next,
    /// A branch with an immediate offset (or an unmodelled form of one).
    Immediate,
    IndirectJump,
    IndirectCall,
    Return,
    ExceptionReturn,
    Trap,
}

/// Latency classes for spreading timer samples over a block (in cycles of a simple ALU
/// instruction on a Neoverse-class core: loads about 4, multiplies 3, divisions 12 or
/// more, floating point and vector arithmetic 3 to 4). Rough on purpose: the samples
/// land on the instruction after a slow one, and the class only has to say which is slow.
fn cost_of(class: InsnClass, mnemonic: &str) -> u8 {
    use InsnClass::*;
    match class {
        LDST_IMM9 | LDST_POS | LDST_REGOFF | LDST_UNSCALED | LDST_UNPRIV | LDST_IMM10
        | LDSTPAIR_INDEXED | LDSTPAIR_OFF | LDSTNAPAIR_OFFS | LOADLIT | LDSTEXCL | LSE_ATOMIC => {
            if mnemonic.starts_with("st") {
                1
            } else {
                4
            }
        }
        DP_2SRC if mnemonic.ends_with("div") => 12,
        DP_3SRC => 3,
        FLOATDP1 | FLOATDP2 | FLOATDP3 | ASIMDSAME | ASIMDMISC | ASIMDELEM => {
            if mnemonic.contains("div") || mnemonic.contains("sqrt") {
                12
            } else {
                3
            }
        }
        _ => 1,
    }
}

/// Classifies `word`, or `None` when it is not an instruction.
pub(crate) fn classify(word: u32) -> Option<Class> {
    let insn = disarm64::decoder::decode(word)?;
    let def = insn.definition();
    let m = def.mnemonic;
    let control = match def.class {
        InsnClass::BRANCH_IMM
        | InsnClass::CONDBRANCH
        | InsnClass::COMPBRANCH
        | InsnClass::TESTBRANCH => ControlKind::Immediate,
        InsnClass::BRANCH_REG => {
            if m.starts_with("blr") {
                ControlKind::IndirectCall
            } else if m.starts_with("br") {
                ControlKind::IndirectJump
            } else if m.starts_with("ret") {
                ControlKind::Return
            } else if m.starts_with("eret") {
                ControlKind::ExceptionReturn
            } else {
                // drps: debug state only.
                ControlKind::Trap
            }
        }
        InsnClass::EXCEPTION if matches!(m, "udf" | "brk" | "hlt") => ControlKind::Trap,
        _ => ControlKind::Next,
    };
    // The class also holds the ordered accesses (`ldar`, `stlr`, `ldlar`, `stllr`) and
    // compare-and-swap (`cas*`), which are single instructions and open no monitor: only the
    // `x` forms do (`ldxr`, `ldaxr`, `ldxp`, `ldaxp`, their byte and halfword forms; `stxr`,
    // `stlxr`, `stxp`, `stlxp`, ...).
    let exclusive = match def.class {
        InsnClass::LDSTEXCL if m.starts_with("ldx") || m.starts_with("ldax") => {
            Some(Exclusive::Load)
        }
        InsnClass::LDSTEXCL if m.starts_with("stx") || m.starts_with("stlx") => {
            Some(Exclusive::Store)
        }
        _ if m == "clrex" => Some(Exclusive::Clear),
        _ => None,
    };
    Some(Class {
        control,
        pc_relative: matches!(def.class, InsnClass::PCRELADDR | InsnClass::LOADLIT),
        exclusive,
        cost: cost_of(def.class, m),
    })
}

/// The instruction `word` at `addr`, from its class and its bits.
pub(crate) fn assemble(word: u32, addr: u64, class: Class) -> Inst {
    let reg = ((word >> 5) & 0x1f) as u8;
    let control = match class.control {
        ControlKind::Next => Control::Next,
        ControlKind::Immediate => immediate_branch(word, addr).unwrap_or(Control::Unmodelled),
        ControlKind::IndirectJump => Control::IndirectJump { reg },
        ControlKind::IndirectCall => Control::IndirectCall { reg },
        ControlKind::Return => Control::Return,
        ControlKind::ExceptionReturn => Control::ExceptionReturn,
        ControlKind::Trap => Control::Trap,
    };
    Inst {
        addr,
        word,
        control,
        pc_relative: if class.pc_relative {
            pc_relative(word, addr)
        } else {
            None
        },
        exclusive: class.exclusive,
        guard: guard(word),
    }
}

/// Decodes the instruction `word` at `addr`.
pub fn decode(word: u32, addr: u64) -> Result<Inst, Invalid> {
    classify(word)
        .map(|class| assemble(word, addr, class))
        .ok_or(Invalid { addr, word })
}

/// Decodes `bytes` (little-endian words) from `addr`: one result per word, in order; a
/// trailing partial word is reported as invalid.
pub fn decode_all(bytes: &[u8], addr: u64) -> Vec<Result<Inst, Invalid>> {
    words(bytes, addr)
        .map(|(at, word, len)| {
            if len == 4 {
                decode(word, at)
            } else {
                Err(Invalid { addr: at, word })
            }
        })
        .collect()
}

/// The little-endian words of `bytes` from `addr`, as (address, word, bytes): every word is 4
/// bytes but a trailing partial one, zero-padded.
pub(crate) fn words(bytes: &[u8], addr: u64) -> impl Iterator<Item = (u64, u32, u8)> + '_ {
    bytes.chunks(4).enumerate().map(move |(i, w)| {
        let mut word = [0u8; 4];
        word[..w.len()].copy_from_slice(w);
        (
            addr + i as u64 * INSN_SIZE,
            u32::from_le_bytes(word),
            w.len() as u8,
        )
    })
}

/// The instruction's text as `objdump` would show it at its address (disarm64's syntax:
/// base forms where binutils prints some aliases).
pub fn text(inst: &Inst) -> String {
    match disarm64::decoder::decode(inst.word) {
        Some(i) => i
            .display_at(inst.addr)
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        None => format!(".inst {:#010x}", inst.word),
    }
}
