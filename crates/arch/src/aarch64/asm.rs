//! A small AArch64 assembler for the code Rivet writes itself: instrumentation probes and the
//! instrumentation runtime (`rivet-runtime`), which on x86-64 come from iced's assembler.
//! No assembler crate of the field's quality covers AArch64 in a way that fits (dynasm's
//! needs a procedural macro per code site and a runtime buffer type; Cranelift's emitter sits
//! behind its whole backend), and the code needed is a few dozen fixed forms, so each form is
//! one function here, written from the Arm ARM's encoding tables. The unit tests decode every
//! form with disarm64 and compare its text, so an encoding that disagrees with the decoder
//! the rest of Rivet trusts fails at once (disarm64 prints the architecture's canonical
//! forms, not the aliases: `orr x3, xzr, x17` for `mov x3, x17`, `subs xzr, ...` for `cmp`,
//! `ldadd xs, xzr, ...` for `stadd`).
//!
//! Registers are numbers 0..=30; 31 is `sp` or `xzr`/`wzr` as the form says ([`SP`],
//! [`ZR`]). Forms with a `w` suffix are the 32-bit ones. Branches and address computations
//! may name a [`Label`] bound later; [`Asm::finish`] resolves them and refuses one whose
//! field cannot reach.

/// Register 31 as the stack pointer (in the forms that read it so).
pub const SP: u8 = 31;
/// Register 31 as the zero register (in the forms that read it so).
pub const ZR: u8 = 31;

/// Condition codes of `b.cond`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Cond {
    Eq = 0,
    Ne = 1,
    /// Unsigned higher or same (carry set).
    Hs = 2,
    /// Unsigned lower (carry clear).
    Lo = 3,
    Hi = 8,
    Ls = 9,
    Ge = 10,
    Lt = 11,
    Gt = 12,
    Le = 13,
}

/// A position in the code, bound once with [`Asm::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

#[derive(Clone, Copy, Debug)]
enum Fixup {
    /// `b`/`bl`: imm26.
    Imm26,
    /// `b.cond`, `cbz`/`cbnz`: imm19 at bit 5.
    Imm19,
    /// `tbz`/`tbnz`: imm14 at bit 5.
    Imm14,
    /// `adrp` here and the `add` of the low 12 bits in the next word.
    AdrpAdd,
}

/// Why [`Asm::finish`] failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AsmError {
    #[error("a label is used but never bound")]
    Unbound,
    #[error("a branch or address at {at:#x} does not reach {target:#x}")]
    OutOfReach { at: u64, target: u64 },
    #[error("an immediate does not fit its field: {0}")]
    Immediate(&'static str),
}

/// Code under construction at a fixed address.
#[derive(Clone, Debug)]
pub struct Asm {
    base: u64,
    bytes: Vec<u8>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label, Fixup)>,
    /// The first immediate that did not fit (reported by `finish`).
    bad_immediate: Option<&'static str>,
}

impl Asm {
    /// Code that will be placed at `base` (a multiple of 4).
    pub fn new(base: u64) -> Asm {
        Asm {
            base,
            bytes: Vec::new(),
            labels: Vec::new(),
            fixups: Vec::new(),
            bad_immediate: None,
        }
    }

    /// The address the next word goes to.
    pub fn here(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `l` to the current position.
    pub fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.bytes.len());
    }

    /// The address of a bound label.
    pub fn address_of(&self, l: Label) -> Option<u64> {
        self.labels[l.0].map(|o| self.base + o as u64)
    }

    /// Appends one instruction word.
    pub fn word(&mut self, w: u32) {
        self.bytes.extend_from_slice(&w.to_le_bytes());
    }

    /// Appends data bytes, then zeros up to the next multiple of 4 so that code may follow.
    pub fn data(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        self.bytes.resize(self.bytes.len().div_ceil(4) * 4, 0);
    }

    fn imm_ok(&mut self, ok: bool, what: &'static str) {
        if !ok && self.bad_immediate.is_none() {
            self.bad_immediate = Some(what);
        }
    }

    fn fixup(&mut self, l: Label, kind: Fixup, w: u32) {
        self.fixups.push((self.bytes.len(), l, kind));
        self.word(w);
    }

    /// Resolves every label and returns the code.
    pub fn finish(mut self) -> Result<Vec<u8>, AsmError> {
        if let Some(what) = self.bad_immediate {
            return Err(AsmError::Immediate(what));
        }
        for &(offset, label, kind) in &self.fixups {
            let target = self.labels[label.0].ok_or(AsmError::Unbound)?;
            let at = self.base + offset as u64;
            let target_addr = self.base + target as u64;
            let delta = target as i64 - offset as i64;
            let out_of_reach = AsmError::OutOfReach {
                at,
                target: target_addr,
            };
            let read = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
            let w = read(&self.bytes, offset);
            let patched = match kind {
                Fixup::Imm26 => field(w, 0, 26, delta / 4).ok_or(out_of_reach)?,
                Fixup::Imm19 => field(w, 5, 19, delta / 4).ok_or(out_of_reach)?,
                Fixup::Imm14 => field(w, 5, 14, delta / 4).ok_or(out_of_reach)?,
                Fixup::AdrpAdd => {
                    let pages = ((target_addr >> 12) as i64) - ((at >> 12) as i64);
                    let adrp = adr_immediate(w, pages).ok_or(out_of_reach)?;
                    let add =
                        read(&self.bytes, offset + 4) | (((target_addr & 0xfff) as u32) << 10);
                    self.bytes[offset + 4..offset + 8].copy_from_slice(&add.to_le_bytes());
                    adrp
                }
            };
            self.bytes[offset..offset + 4].copy_from_slice(&patched.to_le_bytes());
        }
        Ok(self.bytes)
    }

    // --- Moves and arithmetic ---------------------------------------------------------------

    /// `mov xd, #value`, in as few `movz`/`movn`/`movk` as the value needs.
    pub fn mov_imm(&mut self, rd: u8, value: u64) {
        let halves: Vec<u32> = (0..4)
            .map(|k| ((value >> (16 * k)) & 0xffff) as u32)
            .collect();
        let ones = halves.iter().filter(|&&h| h == 0xffff).count();
        let zeros = halves.iter().filter(|&&h| h == 0).count();
        if ones > zeros {
            // movn writes the inverse: start from all ones.
            let first = halves.iter().position(|&h| h != 0xffff).unwrap_or(0);
            self.word(
                0x9280_0000 | (first as u32) << 21 | (!halves[first] & 0xffff) << 5 | u32::from(rd),
            );
            for (k, &h) in halves.iter().enumerate() {
                if k != first && h != 0xffff {
                    self.movk(rd, h, k as u32);
                }
            }
        } else {
            let first = halves.iter().position(|&h| h != 0).unwrap_or(0);
            self.word(0xd280_0000 | (first as u32) << 21 | halves[first] << 5 | u32::from(rd));
            for (k, &h) in halves.iter().enumerate() {
                if k != first && h != 0 {
                    self.movk(rd, h, k as u32);
                }
            }
        }
    }

    fn movk(&mut self, rd: u8, half: u32, shift16: u32) {
        self.word(0xf280_0000 | shift16 << 21 | half << 5 | u32::from(rd));
    }

    /// `mov xd, xm` (`orr xd, xzr, xm`; neither may be sp).
    pub fn mov(&mut self, rd: u8, rm: u8) {
        self.word(0xaa00_03e0 | u32::from(rm) << 16 | u32::from(rd));
    }

    /// `mov wd, wm`: the low 32 bits, zero-extended.
    pub fn mov_w(&mut self, rd: u8, rm: u8) {
        self.word(0x2a00_03e0 | u32::from(rm) << 16 | u32::from(rd));
    }

    fn add_sub_imm(&mut self, op: u32, rd: u8, rn: u8, imm: u32) {
        let (imm12, shift) = if imm < 4096 { (imm, 0) } else { (imm >> 12, 1) };
        self.imm_ok(
            imm < 4096 || (imm & 0xfff == 0 && imm >> 12 < 4096),
            "add/sub immediate",
        );
        self.word(op | shift << 22 | (imm12 & 0xfff) << 10 | u32::from(rn) << 5 | u32::from(rd));
    }

    /// `add xd|sp, xn|sp, #imm` (imm < 4096, or a multiple of 4096 below 2^24).
    pub fn add_imm(&mut self, rd: u8, rn: u8, imm: u32) {
        self.add_sub_imm(0x9100_0000, rd, rn, imm);
    }

    /// `sub xd|sp, xn|sp, #imm`.
    pub fn sub_imm(&mut self, rd: u8, rn: u8, imm: u32) {
        self.add_sub_imm(0xd100_0000, rd, rn, imm);
    }

    /// `cmp xn|sp, #imm` (`subs xzr, xn, #imm`).
    pub fn cmp_imm(&mut self, rn: u8, imm: u32) {
        self.add_sub_imm(0xf100_0000, ZR, rn, imm);
    }

    /// `cmp wn, #imm`.
    pub fn cmp_imm_w(&mut self, rn: u8, imm: u32) {
        self.add_sub_imm(0x7100_0000, ZR, rn, imm);
    }

    /// `cmn xn, #imm` (`adds xzr, xn, #imm`): compares with `-imm`.
    pub fn cmn_imm(&mut self, rn: u8, imm: u32) {
        self.add_sub_imm(0xb100_0000, ZR, rn, imm);
    }

    /// `add xd, xn, xm, lsl #shift`.
    pub fn add(&mut self, rd: u8, rn: u8, rm: u8, shift: u32) {
        self.imm_ok(shift < 64, "shift");
        self.word(
            0x8b00_0000
                | u32::from(rm) << 16
                | (shift & 63) << 10
                | u32::from(rn) << 5
                | u32::from(rd),
        );
    }

    /// `sub xd, xn, xm`.
    pub fn sub(&mut self, rd: u8, rn: u8, rm: u8) {
        self.word(0xcb00_0000 | u32::from(rm) << 16 | u32::from(rn) << 5 | u32::from(rd));
    }

    /// `neg xd, xm`.
    pub fn neg(&mut self, rd: u8, rm: u8) {
        self.sub(rd, ZR, rm);
    }

    /// `cmp xn, xm`.
    pub fn cmp(&mut self, rn: u8, rm: u8) {
        self.word(0xeb00_001f | u32::from(rm) << 16 | u32::from(rn) << 5);
    }

    /// `cmp wn, wm`.
    pub fn cmp_w(&mut self, rn: u8, rm: u8) {
        self.word(0x6b00_001f | u32::from(rm) << 16 | u32::from(rn) << 5);
    }

    /// `and xd, xn, xm`.
    pub fn and(&mut self, rd: u8, rn: u8, rm: u8) {
        self.word(0x8a00_0000 | u32::from(rm) << 16 | u32::from(rn) << 5 | u32::from(rd));
    }

    /// `orr xd, xn, xm`.
    pub fn orr(&mut self, rd: u8, rn: u8, rm: u8) {
        self.word(0xaa00_0000 | u32::from(rm) << 16 | u32::from(rn) << 5 | u32::from(rd));
    }

    /// `lsr wd, wn, #shift` (`ubfm`).
    pub fn lsr_w(&mut self, rd: u8, rn: u8, shift: u32) {
        self.imm_ok(shift < 32, "shift");
        self.word(0x5300_7c00 | (shift & 31) << 16 | u32::from(rn) << 5 | u32::from(rd));
    }

    /// `udiv xd, xn, xm`.
    pub fn udiv(&mut self, rd: u8, rn: u8, rm: u8) {
        self.word(0x9ac0_0800 | u32::from(rm) << 16 | u32::from(rn) << 5 | u32::from(rd));
    }

    /// `msub xd, xn, xm, xa`: xa - xn * xm.
    pub fn msub(&mut self, rd: u8, rn: u8, rm: u8, ra: u8) {
        self.word(
            0x9b00_8000
                | u32::from(rm) << 16
                | u32::from(ra) << 10
                | u32::from(rn) << 5
                | u32::from(rd),
        );
    }

    // --- Loads and stores -------------------------------------------------------------------

    fn unsigned_offset(&mut self, op: u32, rt: u8, rn: u8, offset: u32, scale: u32) {
        self.imm_ok(
            offset.is_multiple_of(scale) && offset / scale < 4096,
            "load/store offset",
        );
        self.word(op | ((offset / scale) & 0xfff) << 10 | u32::from(rn) << 5 | u32::from(rt));
    }

    /// `ldr xt, [xn|sp, #offset]`.
    pub fn ldr(&mut self, rt: u8, rn: u8, offset: u32) {
        self.unsigned_offset(0xf940_0000, rt, rn, offset, 8);
    }
    /// `str xt, [xn|sp, #offset]`.
    pub fn str(&mut self, rt: u8, rn: u8, offset: u32) {
        self.unsigned_offset(0xf900_0000, rt, rn, offset, 8);
    }
    /// `ldr wt, [xn|sp, #offset]`.
    pub fn ldr_w(&mut self, rt: u8, rn: u8, offset: u32) {
        self.unsigned_offset(0xb940_0000, rt, rn, offset, 4);
    }
    /// `ldrb wt, [xn|sp, #offset]`.
    pub fn ldrb(&mut self, rt: u8, rn: u8, offset: u32) {
        self.unsigned_offset(0x3940_0000, rt, rn, offset, 1);
    }
    /// `strb wt, [xn|sp, #offset]`.
    pub fn strb(&mut self, rt: u8, rn: u8, offset: u32) {
        self.unsigned_offset(0x3900_0000, rt, rn, offset, 1);
    }
    /// `ldr xt, [xn|sp, xm]`.
    pub fn ldr_reg(&mut self, rt: u8, rn: u8, rm: u8) {
        self.word(0xf860_6800 | u32::from(rm) << 16 | u32::from(rn) << 5 | u32::from(rt));
    }
    /// `str xt, [xn|sp, xm]`.
    pub fn str_reg(&mut self, rt: u8, rn: u8, rm: u8) {
        self.word(0xf820_6800 | u32::from(rm) << 16 | u32::from(rn) << 5 | u32::from(rt));
    }
    /// `ldrb wt, [xn|sp, xm]`.
    pub fn ldrb_reg(&mut self, rt: u8, rn: u8, rm: u8) {
        self.word(0x3860_6800 | u32::from(rm) << 16 | u32::from(rn) << 5 | u32::from(rt));
    }
    /// `strb wt, [xn|sp, xm]`.
    pub fn strb_reg(&mut self, rt: u8, rn: u8, rm: u8) {
        self.word(0x3820_6800 | u32::from(rm) << 16 | u32::from(rn) << 5 | u32::from(rt));
    }

    fn pair(&mut self, op: u32, rt: u8, rt2: u8, rn: u8, offset: i32) {
        self.imm_ok(
            offset % 8 == 0 && (-512..=504).contains(&offset),
            "pair offset",
        );
        let imm7 = ((offset / 8) as u32) & 0x7f;
        self.word(op | imm7 << 15 | u32::from(rt2) << 10 | u32::from(rn) << 5 | u32::from(rt));
    }

    /// `stp xt, xt2, [xn|sp, #offset]!`: the base moves first, then the pair is stored there.
    pub fn stp_pre(&mut self, rt: u8, rt2: u8, rn: u8, offset: i32) {
        self.pair(0xa980_0000, rt, rt2, rn, offset);
    }
    /// `ldp xt, xt2, [xn|sp], #offset`: loaded, then the base moves.
    pub fn ldp_post(&mut self, rt: u8, rt2: u8, rn: u8, offset: i32) {
        self.pair(0xa8c0_0000, rt, rt2, rn, offset);
    }
    /// `stp xt, xt2, [xn|sp, #offset]`.
    pub fn stp(&mut self, rt: u8, rt2: u8, rn: u8, offset: i32) {
        self.pair(0xa900_0000, rt, rt2, rn, offset);
    }
    /// `ldp xt, xt2, [xn|sp, #offset]`.
    pub fn ldp(&mut self, rt: u8, rt2: u8, rn: u8, offset: i32) {
        self.pair(0xa940_0000, rt, rt2, rn, offset);
    }

    // --- Atomics ----------------------------------------------------------------------------

    /// `ldxr xt, [xn|sp]`.
    pub fn ldxr(&mut self, rt: u8, rn: u8) {
        self.word(0xc85f_7c00 | u32::from(rn) << 5 | u32::from(rt));
    }
    /// `stxr ws, xt, [xn|sp]`: ws is 0 when the store happened.
    pub fn stxr(&mut self, rs: u8, rt: u8, rn: u8) {
        self.word(0xc800_7c00 | u32::from(rs) << 16 | u32::from(rn) << 5 | u32::from(rt));
    }
    /// `clrex`.
    pub fn clrex(&mut self) {
        self.word(0xd503_3f5f);
    }
    /// `stadd xs, [xn|sp]` (LSE, Armv8.1: `ldadd xs, xzr, [xn]`).
    pub fn stadd(&mut self, rs: u8, rn: u8) {
        self.word(0xf820_0000 | u32::from(rs) << 16 | u32::from(rn) << 5 | u32::from(ZR));
    }
    /// `cas xs, xt, [xn|sp]` (LSE): stores xt where memory equals xs; xs gets the old value.
    pub fn cas(&mut self, rs: u8, rt: u8, rn: u8) {
        self.word(0xc8a0_7c00 | u32::from(rs) << 16 | u32::from(rn) << 5 | u32::from(rt));
    }

    // --- Control ----------------------------------------------------------------------------

    /// `b label`.
    pub fn b(&mut self, l: Label) {
        self.fixup(l, Fixup::Imm26, 0x1400_0000);
    }
    /// `bl label`.
    pub fn bl(&mut self, l: Label) {
        self.fixup(l, Fixup::Imm26, 0x9400_0000);
    }
    /// `b.cond label`.
    pub fn b_cond(&mut self, cond: Cond, l: Label) {
        self.fixup(l, Fixup::Imm19, 0x5400_0000 | cond as u32);
    }
    /// `cbz xt, label`.
    pub fn cbz(&mut self, rt: u8, l: Label) {
        self.fixup(l, Fixup::Imm19, 0xb400_0000 | u32::from(rt));
    }
    /// `cbnz xt, label`.
    pub fn cbnz(&mut self, rt: u8, l: Label) {
        self.fixup(l, Fixup::Imm19, 0xb500_0000 | u32::from(rt));
    }
    /// `cbz wt, label`.
    pub fn cbz_w(&mut self, rt: u8, l: Label) {
        self.fixup(l, Fixup::Imm19, 0x3400_0000 | u32::from(rt));
    }
    /// `cbnz wt, label`.
    pub fn cbnz_w(&mut self, rt: u8, l: Label) {
        self.fixup(l, Fixup::Imm19, 0x3500_0000 | u32::from(rt));
    }
    fn test_bit(&mut self, op: u32, rt: u8, bit: u32, l: Label) {
        self.imm_ok(bit < 64, "bit number");
        let bit = bit & 63;
        self.fixup(
            l,
            Fixup::Imm14,
            op | (bit >> 5) << 31 | (bit & 31) << 19 | u32::from(rt),
        );
    }
    /// `tbz xt, #bit, label`.
    pub fn tbz(&mut self, rt: u8, bit: u32, l: Label) {
        self.test_bit(0x3600_0000, rt, bit, l);
    }
    /// `tbnz xt, #bit, label`.
    pub fn tbnz(&mut self, rt: u8, bit: u32, l: Label) {
        self.test_bit(0x3700_0000, rt, bit, l);
    }
    /// `br xn`.
    pub fn br(&mut self, rn: u8) {
        self.word(0xd61f_0000 | u32::from(rn) << 5);
    }
    /// `ret` (to x30).
    pub fn ret(&mut self) {
        self.word(0xd65f_03c0);
    }
    /// `svc #0`: a Linux system call (number in x8, arguments in x0..x5, result in x0).
    pub fn svc(&mut self) {
        self.word(0xd400_0001);
    }
    /// `mrs xt, nzcv`.
    pub fn mrs_nzcv(&mut self, rt: u8) {
        self.word(0xd53b_4200 | u32::from(rt));
    }
    /// `msr nzcv, xt`.
    pub fn msr_nzcv(&mut self, rt: u8) {
        self.word(0xd51b_4200 | u32::from(rt));
    }

    // --- Addresses --------------------------------------------------------------------------

    /// `adrp xd, label; add xd, xd, :lo12:label`: the label's address, within +-4 GiB.
    pub fn adr_label(&mut self, rd: u8, l: Label) {
        self.fixup(l, Fixup::AdrpAdd, 0x9000_0000 | u32::from(rd));
        self.word(0x9100_0000 | u32::from(rd) << 5 | u32::from(rd));
    }

    /// `adrp xd, target; add xd, xd, :lo12:target`, for an address outside this code.
    pub fn adr_address(&mut self, rd: u8, target: u64) {
        let at = self.here();
        let [adrp, add] = address_words(at, rd, target).unwrap_or_else(|| {
            self.imm_ok(false, "address out of adrp reach");
            [0, 0]
        });
        self.word(adrp);
        self.word(add);
    }
}

/// Puts `value` (signed) into the `width`-bit field at `lsb` of `w`, or `None` when it does
/// not fit.
fn field(w: u32, lsb: u32, width: u32, value: i64) -> Option<u32> {
    let lo = -(1i64 << (width - 1));
    let hi = (1i64 << (width - 1)) - 1;
    (lo..=hi)
        .contains(&value)
        .then(|| w | (((value as u32) & ((1u32 << width) - 1)) << lsb))
}

/// `w` (an `adr`/`adrp`) with its 21-bit immediate set to `imm`.
fn adr_immediate(w: u32, imm: i64) -> Option<u32> {
    let lo = -(1i64 << 20);
    let hi = (1i64 << 20) - 1;
    (lo..=hi).contains(&imm).then(|| {
        let imm = (imm as u32) & 0x1f_ffff;
        w | (imm & 3) << 29 | (imm >> 2) << 5
    })
}

/// `adrp rd, target` and `add rd, rd, :lo12:target` placed at `at`, or `None` when the page
/// is out of reach (+-4 GiB).
pub fn address_words(at: u64, rd: u8, target: u64) -> Option<[u32; 2]> {
    let pages = ((target >> 12) as i64) - ((at >> 12) as i64);
    let adrp = adr_immediate(0x9000_0000 | u32::from(rd), pages)?;
    let add = 0x9100_0000 | ((target & 0xfff) as u32) << 10 | u32::from(rd) << 5 | u32::from(rd);
    Some([adrp, add])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// disarm64's text of each word of `code` placed at `base`.
    pub(crate) fn texts(code: &[u8], base: u64) -> Vec<String> {
        code.chunks_exact(4)
            .enumerate()
            .map(|(k, w)| {
                let word = u32::from_le_bytes(w.try_into().unwrap());
                let inst = crate::aarch64::decode(word, base + 4 * k as u64)
                    .unwrap_or_else(|e| panic!("{e}"));
                crate::aarch64::text(&inst)
            })
            .collect()
    }

    fn one(f: impl FnOnce(&mut Asm)) -> String {
        let mut a = Asm::new(0x1000);
        f(&mut a);
        let code = a.finish().unwrap();
        let t = texts(&code, 0x1000);
        assert_eq!(t.len(), 1, "{t:?}");
        t[0].clone()
    }

    /// Writes one instruction.
    type Emit = fn(&mut Asm);

    #[test]
    fn every_form_decodes_as_written() {
        let cases: Vec<(Emit, &str)> = vec![
            (|a| a.mov(3, 17), "orr x3, xzr, x17"),
            (|a| a.mov_w(9, 0), "orr w9, wzr, w0"),
            (|a| a.add_imm(SP, SP, 16), "add sp, sp, #0x10"),
            (|a| a.add_imm(1, SP, 4096), "add x1, sp, #0x1, lsl #12"),
            (|a| a.sub_imm(SP, SP, 48), "sub sp, sp, #0x30"),
            (|a| a.cmp_imm(0, 23), "subs xzr, x0, #0x17"),
            (|a| a.cmp_imm_w(2, 47), "subs wzr, w2, #0x2f"),
            (|a| a.cmn_imm(0, 4095), "adds xzr, x0, #0xfff"),
            (|a| a.add(1, 2, 3, 3), "add x1, x2, x3, lsl #3"),
            (|a| a.add(1, 2, 3, 0), "add x1, x2, x3"),
            (|a| a.sub(1, 2, 3), "sub x1, x2, x3"),
            (|a| a.neg(4, 5), "sub x4, xzr, x5"),
            (|a| a.cmp(0, 22), "subs xzr, x0, x22"),
            (|a| a.cmp_w(0, 9), "subs wzr, w0, w9"),
            (|a| a.and(0, 1, 2), "and x0, x1, x2"),
            (|a| a.orr(0, 1, 2), "orr x0, x1, x2"),
            (|a| a.lsr_w(0, 1, 12), "ubfm w0, w1, #12, #31"),
            (|a| a.udiv(2, 0, 9), "udiv x2, x0, x9"),
            (|a| a.msub(3, 2, 9, 0), "msub x3, x2, x9, x0"),
            (|a| a.ldr(0, SP, 4136), "ldr x0, [sp, #0x1028]"),
            (|a| a.str(30, SP, 16), "str x30, [sp, #0x10]"),
            (|a| a.ldr_w(0, 1, 24), "ldr w0, [x1, #0x18]"),
            (|a| a.ldrb(0, 1, 5), "ldrb w0, [x1, #0x5]"),
            (|a| a.strb(0, SP, 4000), "strb w0, [sp, #0xfa0]"),
            (|a| a.ldr_reg(0, 21, 9), "ldr x0, [x21, x9]"),
            (|a| a.str_reg(0, 22, 9), "str x0, [x22, x9]"),
            (|a| a.ldrb_reg(0, 19, 9), "ldrb w0, [x19, x9]"),
            (|a| a.strb_reg(0, SP, 9), "strb w0, [sp, x9]"),
            (|a| a.stp_pre(16, 17, SP, -16), "stp x16, x17, [sp, #-16]!"),
            (|a| a.ldp_post(16, 17, SP, 32), "ldp x16, x17, [sp], #32"),
            (|a| a.stp(19, 20, SP, 16), "stp x19, x20, [sp, #16]"),
            (|a| a.ldp(27, 28, SP, 80), "ldp x27, x28, [sp, #80]"),
            (|a| a.ldxr(17, 16), "ldxr x17, [x16]"),
            (|a| a.stxr(15, 17, 16), "stxr w15, x17, [x16]"),
            (|a| a.clrex(), "clrex #0xf"),
            (|a| a.stadd(17, 16), "ldadd x17, xzr, [x16]"),
            (|a| a.cas(2, 0, 3), "cas x2, x0, [x3]"),
            (|a| a.br(16), "br x16"),
            (|a| a.ret(), "ret x30"),
            (|a| a.svc(), "svc #0x0"),
            (|a| a.mrs_nzcv(3), "mrs x3, nzcv"),
            (|a| a.msr_nzcv(3), "msr nzcv, x3"),
        ];
        let wrong: Vec<String> = cases
            .into_iter()
            .map(|(emit, want)| (one(emit), want))
            .filter(|(got, want)| got != want)
            .map(|(got, want)| format!("{got:?} (written as {want:?})"))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn branches_and_addresses_reach_their_labels() {
        let mut a = Asm::new(0x40_0000);
        let (back, fwd) = (a.label(), a.label());
        a.bind(back);
        a.b(fwd);
        a.bl(back);
        a.b_cond(Cond::Hs, fwd);
        a.cbz(3, back);
        a.cbnz_w(15, back);
        a.tbnz(0, 63, fwd);
        a.tbz(1, 4, fwd);
        a.adr_label(5, fwd);
        a.bind(fwd);
        a.adr_address(16, 0x1234_5678);
        let code = a.finish().unwrap();
        let t = texts(&code, 0x40_0000);
        let fwd = 0x40_0000 + 9 * 4;
        assert_eq!(t[0], format!("b 0x{fwd:x}"));
        assert_eq!(t[1], "bl 0x400000");
        assert_eq!(t[2], format!("b.cs 0x{fwd:x}"));
        assert_eq!(t[3], "cbz x3, 0x400000");
        assert_eq!(t[4], "cbnz w15, 0x400000");
        assert_eq!(t[5], format!("tbnz x0, #63, 0x{fwd:x}"));
        assert_eq!(t[6], format!("tbz w1, #4, 0x{fwd:x}"));
        assert_eq!(t[7], "adrp x5, 0x400000");
        assert_eq!(t[8], format!("add x5, x5, #0x{:x}", fwd & 0xfff));
        assert_eq!(t[9], "adrp x16, 0x12345000");
        assert_eq!(t[10], "add x16, x16, #0x678");
    }

    #[test]
    fn constants_take_the_fewest_moves() {
        for value in [
            0u64,
            1,
            0xffff,
            0x1_0000,
            0xdead_beef,
            u64::MAX,
            -100i64 as u64,
            0x0123_4567_89ab_cdef,
        ] {
            let mut a = Asm::new(0);
            a.mov_imm(7, value);
            let code = a.finish().unwrap();
            let words: Vec<u32> = code
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
                .collect();
            // Simulate the moves: movz/movn then movk.
            let mut x = 0u64;
            for w in &words {
                let hw = (w >> 21) & 3;
                let imm = u64::from((w >> 5) & 0xffff) << (16 * hw);
                match w >> 23 {
                    0x1a5 => x = imm,
                    0x125 => x = !imm,
                    0x1e5 => x = (x & !(0xffffu64 << (16 * hw))) | imm,
                    other => panic!("not a move: {other:#x}"),
                }
            }
            assert_eq!(x, value, "{value:#x}");
            let halves = |h: u64| (0..4).filter(|k| (value >> (16 * k)) & 0xffff == h).count();
            assert_eq!(
                words.len(),
                4 - halves(0).max(halves(0xffff)).min(3),
                "{value:#x}"
            );
            for t in texts(&code, 0) {
                assert!(t.starts_with("mov"), "{t}");
            }
        }
    }

    #[test]
    fn what_does_not_fit_is_refused() {
        let mut a = Asm::new(0);
        a.add_imm(0, 0, 4097);
        assert!(matches!(a.finish(), Err(AsmError::Immediate(_))));
        let mut a = Asm::new(0);
        let l = a.label();
        a.b(l);
        assert_eq!(a.finish(), Err(AsmError::Unbound));
        let mut a = Asm::new(0);
        let l = a.label();
        a.tbz(0, 1, l);
        a.data(&vec![0u8; 40_000]);
        a.bind(l);
        assert!(matches!(a.finish(), Err(AsmError::OutOfReach { .. })));
    }
}
