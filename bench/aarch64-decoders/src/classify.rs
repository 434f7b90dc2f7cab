//! What Rivet's AArch64 backend needs from a decoder, written against each crate's
//! structured API (no text): the control-flow kind of an instruction and its
//! PC-relative target (an offset from the instruction, from its page for ADRP).
//! `classify` compares each classifier with the one read from binutils' text.

use crate::facts::Facts;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flow {
    Jump(i64),
    Call(i64),
    Cond(i64),
    IndirectJump,
    IndirectCall,
    Return,
    PcRel(i64),
    Other,
}

impl Flow {
    pub fn kind(&self) -> &'static str {
        match self {
            Flow::Jump(_) => "jump",
            Flow::Call(_) => "call",
            Flow::Cond(_) => "conditional",
            Flow::IndirectJump => "indirect jump",
            Flow::IndirectCall => "indirect call",
            Flow::Return => "return",
            Flow::PcRel(_) => "pc-relative",
            Flow::Other => "other",
        }
    }
}

fn by_mnemonic(m: &str, target: Option<i64>) -> Flow {
    let t = target.unwrap_or(i64::MIN);
    match m {
        "b" => Flow::Jump(t),
        "bl" => Flow::Call(t),
        "cbz" | "cbnz" | "tbz" | "tbnz" => Flow::Cond(t),
        _ if m.starts_with("b.") || m.starts_with("bc.") => Flow::Cond(t),
        "br" | "braa" | "brab" | "braaz" | "brabz" => Flow::IndirectJump,
        "blr" | "blraa" | "blrab" | "blraaz" | "blrabz" => Flow::IndirectCall,
        "ret" | "retaa" | "retab" | "eret" | "eretaa" | "eretab" => Flow::Return,
        _ if target.is_some() => Flow::PcRel(t),
        _ => Flow::Other,
    }
}

/// The reference: binutils' text, read by `Facts`.
pub fn reference(text: &str, pc: u64) -> Flow {
    let f = Facts::parse(text, pc);
    by_mnemonic(&f.mnem, f.target)
}

pub fn yaxpeax(word: u32) -> Option<Flow> {
    use yaxpeax_arch::Decoder;
    use yaxpeax_arm::armv8::a64::{Opcode as O, Operand};
    let b = word.to_le_bytes();
    let i = yaxpeax_arm::armv8::a64::InstDecoder::default()
        .decode(&mut yaxpeax_arch::U8Reader::new(&b))
        .ok()?;
    let off = i.operands.iter().find_map(|o| {
        if let Operand::PCOffset(x) = o {
            Some(*x)
        } else {
            None
        }
    });
    let t = off.unwrap_or(i64::MIN);
    Some(match i.opcode {
        O::B => Flow::Jump(t),
        O::BL => Flow::Call(t),
        O::Bcc(_) | O::BCcc(_) | O::CBZ | O::CBNZ | O::TBZ | O::TBNZ => Flow::Cond(t),
        O::BR | O::BRAA | O::BRAAZ | O::BRAB | O::BRABZ => Flow::IndirectJump,
        O::BLR | O::BLRAA | O::BLRAAZ | O::BLRAB | O::BLRABZ => Flow::IndirectCall,
        O::RET | O::RETAA | O::RETAB | O::ERET | O::ERETAA | O::ERETAB => Flow::Return,
        _ if off.is_some() => Flow::PcRel(t),
        _ => Flow::Other,
    })
}

pub fn bad64(word: u32, pc: u64) -> Option<Flow> {
    use bad64::{Imm, Operand};
    let i = bad64::decode(word, pc).ok()?;
    let base = if i.op() == bad64::Op::ADRP {
        pc & !0xfff
    } else {
        pc
    };
    let target = i.operands().iter().find_map(|o| match o {
        Operand::Label(Imm::Unsigned(a)) => Some(a.wrapping_sub(base) as i64),
        Operand::Label(Imm::Signed(a)) => Some((*a as u64).wrapping_sub(base) as i64),
        _ => None,
    });
    Some(by_mnemonic(&i.op().mnem().to_ascii_lowercase(), target))
}

pub fn disarm64(word: u32) -> Option<Flow> {
    use disarm64::InsnOpcode;
    use disarm64_defn::{InsnBitField as F, InsnClass as C, InsnOperandKind as K};
    let i = disarm64::decoder::decode(word)?;
    let def = i.definition();
    // The PC-relative operand: its offset fields concatenated (high first), sign-extended,
    // scaled. An operand's field list is not only its value: B.cond's ADDR_PCREL19 also
    // lists `cond`, so the offset fields are picked by name.
    let target = def.operands.iter().find_map(|op| {
        let scale = match op.kind {
            K::ADDR_PCREL14 | K::ADDR_PCREL19 | K::ADDR_PCREL26 => 4,
            K::ADDR_PCREL21 => 1,
            K::ADDR_ADRP => 4096,
            _ => return None,
        };
        let (mut v, mut width) = (0i64, 0u32);
        for f in op.bit_fields.iter().filter(|f| {
            matches!(
                f.bitfield,
                F::imm14 | F::imm19 | F::imm26 | F::immhi | F::immlo
            )
        }) {
            v = (v << f.width) | ((word >> f.lsb) & ((1u32 << f.width) - 1)) as i64;
            width += f.width as u32;
        }
        Some(((v << (64 - width)) >> (64 - width)) * scale)
    });
    let t = target.unwrap_or(i64::MIN);
    let m = def.mnemonic;
    Some(match def.class {
        C::BRANCH_IMM if m == "bl" => Flow::Call(t),
        C::BRANCH_IMM => Flow::Jump(t),
        C::CONDBRANCH | C::COMPBRANCH | C::TESTBRANCH => Flow::Cond(t),
        C::BRANCH_REG if m.starts_with("bl") => Flow::IndirectCall,
        C::BRANCH_REG if m.starts_with("br") => Flow::IndirectJump,
        C::BRANCH_REG if m.starts_with("ret") || m.starts_with("eret") => Flow::Return,
        _ if target.is_some() => Flow::PcRel(t),
        _ => Flow::Other,
    })
}
