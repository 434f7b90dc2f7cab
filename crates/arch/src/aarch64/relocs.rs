//! AArch64 relocation types (`R_AARCH64_*`, numbers from the Arm "ELF for the Arm 64-bit
//! Architecture" ABI) and what each means to Rivet.
//!
//! Most static relocations of AArch64 code sit on an instruction and hold part of an
//! address in that instruction's own bits (a branch offset, an ADRP page, the low 12 bits of
//! an ADD, a load or a store): Rivet reads them as `RelocKind::Branch` and
//! `RelocKind::AddressPart`, for which `S + A` is the address referred to, and decodes the
//! instruction under the relocation for the rest (lld relaxes ADRP+ADD into NOP+ADR and
//! keeps the original types: docs/aarch64-notes.md, section 1). GOT and TLS parts hold
//! offsets Rivet does not follow (`Opaque`, the instruction's 4 bytes).

use rivet_elf::relocs::{DynRelocKind, RelocKind};

pub(crate) const R_AARCH64_ABS64: u32 = 257;
pub(crate) const R_AARCH64_ABS32: u32 = 258;
pub(crate) const R_AARCH64_ABS16: u32 = 259;
pub(crate) const R_AARCH64_PREL64: u32 = 260;
pub(crate) const R_AARCH64_PREL32: u32 = 261;
pub(crate) const R_AARCH64_PREL16: u32 = 262;
pub(crate) const R_AARCH64_LD_PREL_LO19: u32 = 273;
pub(crate) const R_AARCH64_ADR_PREL_LO21: u32 = 274;
pub(crate) const R_AARCH64_ADR_PREL_PG_HI21: u32 = 275;
pub(crate) const R_AARCH64_ADR_PREL_PG_HI21_NC: u32 = 276;
pub(crate) const R_AARCH64_ADD_ABS_LO12_NC: u32 = 277;
pub(crate) const R_AARCH64_LDST8_ABS_LO12_NC: u32 = 278;
pub(crate) const R_AARCH64_TSTBR14: u32 = 279;
pub(crate) const R_AARCH64_CONDBR19: u32 = 280;
pub(crate) const R_AARCH64_JUMP26: u32 = 282;
pub(crate) const R_AARCH64_CALL26: u32 = 283;
pub(crate) const R_AARCH64_LDST16_ABS_LO12_NC: u32 = 284;
pub(crate) const R_AARCH64_LDST32_ABS_LO12_NC: u32 = 285;
pub(crate) const R_AARCH64_LDST64_ABS_LO12_NC: u32 = 286;
pub(crate) const R_AARCH64_LDST128_ABS_LO12_NC: u32 = 299;
/// First and last of the GOT-relative forms (MOVW_GOTOFF_G0 .. GOTPCREL32), and the TLS
/// forms (TLSGD_ADR_PREL21 .. TLSLD_LDST128_DTPREL_LO12_NC).
const GOT_FORMS: std::ops::RangeInclusive<u32> = 300..=315;
const TLS_FORMS: std::ops::RangeInclusive<u32> = 512..=573;
pub(crate) const R_AARCH64_GOTREL64: u32 = 307;
pub(crate) const R_AARCH64_GOTREL32: u32 = 308;
pub(crate) const R_AARCH64_PLT32: u32 = 314;
pub(crate) const R_AARCH64_GOTPCREL32: u32 = 315;
pub(crate) const R_AARCH64_COPY: u32 = 1024;
pub(crate) const R_AARCH64_GLOB_DAT: u32 = 1025;
pub(crate) const R_AARCH64_JUMP_SLOT: u32 = 1026;
pub(crate) const R_AARCH64_RELATIVE: u32 = 1027;
pub(crate) const R_AARCH64_TLS_DTPMOD: u32 = 1028;
pub(crate) const R_AARCH64_TLS_DTPREL: u32 = 1029;
pub(crate) const R_AARCH64_TLS_TPREL: u32 = 1030;
pub(crate) const R_AARCH64_TLSDESC: u32 = 1031;
pub(crate) const R_AARCH64_IRELATIVE: u32 = 1032;

/// What a static relocation type's field holds.
pub(crate) fn static_kind(r_type: u32) -> RelocKind {
    match r_type {
        R_AARCH64_ABS64 => RelocKind::Absolute {
            size: 8,
            signed: false,
        },
        R_AARCH64_ABS32 => RelocKind::Absolute {
            size: 4,
            signed: false,
        },
        R_AARCH64_ABS16 => RelocKind::Absolute {
            size: 2,
            signed: false,
        },
        R_AARCH64_PREL64 => RelocKind::PcRelative { size: 8 },
        R_AARCH64_PREL32 | R_AARCH64_PLT32 => RelocKind::PcRelative { size: 4 },
        R_AARCH64_PREL16 => RelocKind::PcRelative { size: 2 },
        R_AARCH64_CALL26 | R_AARCH64_JUMP26 | R_AARCH64_CONDBR19 | R_AARCH64_TSTBR14 => {
            RelocKind::Branch
        }
        R_AARCH64_LD_PREL_LO19
        | R_AARCH64_ADR_PREL_LO21
        | R_AARCH64_ADR_PREL_PG_HI21
        | R_AARCH64_ADR_PREL_PG_HI21_NC
        | R_AARCH64_ADD_ABS_LO12_NC
        | R_AARCH64_LDST8_ABS_LO12_NC
        | R_AARCH64_LDST16_ABS_LO12_NC
        | R_AARCH64_LDST32_ABS_LO12_NC
        | R_AARCH64_LDST64_ABS_LO12_NC
        | R_AARCH64_LDST128_ABS_LO12_NC => RelocKind::AddressPart,
        R_AARCH64_GOTREL64 => RelocKind::Opaque { size: 8 },
        R_AARCH64_GOTREL32 | R_AARCH64_GOTPCREL32 => RelocKind::Opaque { size: 4 },
        // MOVW forms of absolute and PC-relative addresses (263..293): sequences of movz/movk
        // that build an address 16 bits at a time. Compilers emit them only for the large
        // code model; Rivet does not follow them.
        263..=293 => RelocKind::Opaque { size: 4 },
        t if GOT_FORMS.contains(&t) || TLS_FORMS.contains(&t) => RelocKind::Opaque { size: 4 },
        _ => RelocKind::Unknown,
    }
}

/// What a dynamic relocation type asks of the loader.
pub(crate) fn dynamic_kind(r_type: u32) -> DynRelocKind {
    match r_type {
        R_AARCH64_RELATIVE => DynRelocKind::Relative,
        R_AARCH64_IRELATIVE => DynRelocKind::Irelative,
        R_AARCH64_JUMP_SLOT => DynRelocKind::JumpSlot,
        R_AARCH64_GLOB_DAT => DynRelocKind::GlobDat,
        R_AARCH64_ABS64 => DynRelocKind::Abs64,
        R_AARCH64_COPY => DynRelocKind::Copy,
        R_AARCH64_TLS_TPREL => DynRelocKind::Tpoff64,
        R_AARCH64_TLS_DTPMOD => DynRelocKind::Dtpmod64,
        R_AARCH64_TLS_DTPREL => DynRelocKind::Dtpoff64,
        R_AARCH64_TLSDESC => DynRelocKind::TlsDesc,
        other => DynRelocKind::Other(other),
    }
}
