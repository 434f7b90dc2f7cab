//! Errors of reading an ELF input.
//!
//! Every variant says what was wrong in words a user can act on; the CLI adds the file name
//! and a hint. Malformed-input errors carry the structure being read when it failed, so a
//! truncated section table and a truncated symbol table read differently.

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file (no ELF magic at the start)")]
    NotElf,
    #[error("32-bit ELF is not supported, only ELF64")]
    Not64Bit,
    #[error("big-endian ELF is not supported")]
    BigEndian,
    #[error("unsupported architecture {0}: Rivet handles x86-64 and AArch64")]
    WrongMachine(String),
    #[error("unsupported ELF type {0}: Rivet reads linked executables and shared libraries")]
    WrongType(&'static str),
    #[error("truncated or malformed ELF: {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
}

impl ElfError {
    pub(crate) fn malformed(what: &'static str, detail: impl ToString) -> Self {
        ElfError::Malformed {
            what,
            detail: detail.to_string(),
        }
    }
}

pub type Result<T, E = ElfError> = std::result::Result<T, E>;
