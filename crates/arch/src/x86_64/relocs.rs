//! x86-64 relocation types (`R_X86_64_*`, from the System V x86-64 psABI) and what each means
//! to Rivet: an absolute or PC-relative address it follows, a GOT-relative field in an
//! instruction, or a field it only needs the width of.

use rivet_elf::relocs::{DynRelocKind, RelocKind};

pub(crate) const R_X86_64_64: u32 = 1;
pub(crate) const R_X86_64_PC32: u32 = 2;
pub(crate) const R_X86_64_GOT32: u32 = 3;
pub(crate) const R_X86_64_PLT32: u32 = 4;
pub(crate) const R_X86_64_COPY: u32 = 5;
pub(crate) const R_X86_64_GLOB_DAT: u32 = 6;
pub(crate) const R_X86_64_JUMP_SLOT: u32 = 7;
pub(crate) const R_X86_64_RELATIVE: u32 = 8;
pub(crate) const R_X86_64_GOTPCREL: u32 = 9;
pub(crate) const R_X86_64_32: u32 = 10;
pub(crate) const R_X86_64_32S: u32 = 11;
pub(crate) const R_X86_64_DTPMOD64: u32 = 16;
pub(crate) const R_X86_64_DTPOFF64: u32 = 17;
pub(crate) const R_X86_64_TPOFF64: u32 = 18;
pub(crate) const R_X86_64_TLSGD: u32 = 19;
pub(crate) const R_X86_64_TLSLD: u32 = 20;
pub(crate) const R_X86_64_DTPOFF32: u32 = 21;
pub(crate) const R_X86_64_GOTTPOFF: u32 = 22;
pub(crate) const R_X86_64_TPOFF32: u32 = 23;
pub(crate) const R_X86_64_PC64: u32 = 24;
pub(crate) const R_X86_64_GOTOFF64: u32 = 25;
pub(crate) const R_X86_64_GOTPC32: u32 = 26;
pub(crate) const R_X86_64_SIZE32: u32 = 32;
pub(crate) const R_X86_64_SIZE64: u32 = 33;
pub(crate) const R_X86_64_GOTPC32_TLSDESC: u32 = 34;
pub(crate) const R_X86_64_TLSDESC: u32 = 36;
pub(crate) const R_X86_64_IRELATIVE: u32 = 37;
pub(crate) const R_X86_64_GOTPCRELX: u32 = 41;
pub(crate) const R_X86_64_REX_GOTPCRELX: u32 = 42;
/// What a static relocation type's field holds.
pub(crate) fn static_kind(r_type: u32) -> RelocKind {
    match r_type {
        R_X86_64_64 => RelocKind::Absolute {
            size: 8,
            signed: false,
        },
        R_X86_64_32 => RelocKind::Absolute {
            size: 4,
            signed: false,
        },
        R_X86_64_32S => RelocKind::Absolute {
            size: 4,
            signed: true,
        },
        R_X86_64_PC32 | R_X86_64_PLT32 => RelocKind::PcRelative { size: 4 },
        R_X86_64_PC64 => RelocKind::PcRelative { size: 8 },
        R_X86_64_GOTPCREL | R_X86_64_GOTPCRELX | R_X86_64_REX_GOTPCRELX => {
            RelocKind::GotPcRelative { size: 4 }
        }
        R_X86_64_GOTOFF64 | R_X86_64_SIZE64 => RelocKind::Opaque { size: 8 },
        R_X86_64_GOTPC32
        | R_X86_64_GOT32
        | R_X86_64_TPOFF32
        | R_X86_64_DTPOFF32
        | R_X86_64_GOTTPOFF
        | R_X86_64_TLSGD
        | R_X86_64_TLSLD
        | R_X86_64_GOTPC32_TLSDESC
        | R_X86_64_SIZE32 => RelocKind::Opaque { size: 4 },
        _ => RelocKind::Unknown,
    }
}

/// What a dynamic relocation type asks of the loader.
pub(crate) fn dynamic_kind(r_type: u32) -> DynRelocKind {
    match r_type {
        R_X86_64_RELATIVE => DynRelocKind::Relative,
        R_X86_64_IRELATIVE => DynRelocKind::Irelative,
        R_X86_64_JUMP_SLOT => DynRelocKind::JumpSlot,
        R_X86_64_GLOB_DAT => DynRelocKind::GlobDat,
        R_X86_64_64 => DynRelocKind::Abs64,
        R_X86_64_COPY => DynRelocKind::Copy,
        R_X86_64_TPOFF64 => DynRelocKind::Tpoff64,
        R_X86_64_DTPMOD64 => DynRelocKind::Dtpmod64,
        R_X86_64_DTPOFF64 => DynRelocKind::Dtpoff64,
        R_X86_64_TLSDESC => DynRelocKind::TlsDesc,
        other => DynRelocKind::Other(other),
    }
}
