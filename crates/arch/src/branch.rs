//! The branches the emitter creates at the ends of blocks, in two forms (a short one that
//! reaches nearby code and a near one that reaches anywhere a rewrite places code), and the
//! encoder that writes them for the program's ISA.
//!
//! x86-64: `jmp`/`jcc` with a rel8 or a rel32 (iced's encoder, `x86_64::encode`). AArch64:
//! one word for a `b` (+-128 MiB) and for a conditional branch in its short form
//! (`b.cond`/`cbz` +-1 MiB, `tbz` +-32 KiB); the near form of a conditional branch is the
//! inverted branch over a `b` (`aarch64::encode`). Farther than a `b` reaches, calls and
//! jumps need veneers, which are placed by the rewrite, not here.

use rivet_elf::Vaddr;

use crate::{Inst, Isa, aarch64, x86_64};

/// A branch the emitter creates at the end of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    /// An unconditional `jmp`.
    Jump,
    /// The conditional jump `inst`, with its condition inverted when `inverted`.
    Cond { inst: Inst, inverted: bool },
}

/// Displacement width of a re-created branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BranchForm {
    /// rel8.
    Short,
    /// rel32.
    Near,
}

/// An instruction that cannot be placed where the emitter asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{what} at {at} cannot reach {target}")]
    OutOfRange {
        what: &'static str,
        at: Vaddr,
        target: Vaddr,
    },
    #[error("cannot re-encode the instruction at {at}: {reason}")]
    Unsupported { at: Vaddr, reason: String },
}

/// Writes the branches of one ISA; made by `Isa::branch_encoder`.
#[derive(Debug)]
pub struct BranchEncoder {
    repr: EncoderRepr,
}

#[derive(Debug)]
enum EncoderRepr {
    X86_64(Box<x86_64::encode::X86BranchEncoder>),
    Aarch64,
}

impl BranchEncoder {
    pub(crate) fn new(isa: Isa) -> BranchEncoder {
        BranchEncoder {
            repr: match isa {
                Isa::X86_64 => EncoderRepr::X86_64(Box::default()),
                Isa::Aarch64 => EncoderRepr::Aarch64,
            },
        }
    }

    /// The ISA whose branches this encoder writes.
    pub fn isa(&self) -> Isa {
        match self.repr {
            EncoderRepr::X86_64(_) => Isa::X86_64,
            EncoderRepr::Aarch64 => Isa::Aarch64,
        }
    }

    /// Size in bytes of `branch` in `form` (independent of addresses).
    pub fn size(&mut self, branch: Branch, form: BranchForm) -> Result<u8, EncodeError> {
        match &mut self.repr {
            EncoderRepr::X86_64(e) => e.size(branch, form),
            EncoderRepr::Aarch64 => Ok(aarch64_branch_size(branch, form)),
        }
    }

    /// Appends `branch` placed at `at` and going to `target`; a form that cannot reach it is
    /// `EncodeError::OutOfRange`.
    pub fn encode(
        &mut self,
        branch: Branch,
        form: BranchForm,
        at: Vaddr,
        target: Vaddr,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        match &mut self.repr {
            EncoderRepr::X86_64(e) => e.encode(branch, form, at, target, out),
            EncoderRepr::Aarch64 => encode_aarch64(branch, form, at, target, out),
        }
    }
}

fn aarch64_branch_size(branch: Branch, form: BranchForm) -> u8 {
    match (branch, form) {
        (Branch::Cond { .. }, BranchForm::Near) => 8,
        _ => 4,
    }
}

/// An AArch64 encoding error as the emitter's.
pub(crate) fn from_aarch64(e: aarch64::EncodeError, at: Vaddr) -> EncodeError {
    match e {
        aarch64::EncodeError::OutOfReach { at, target, .. } => EncodeError::OutOfRange {
            what: "branch",
            at: Vaddr(at),
            target: Vaddr(target),
        },
        other => EncodeError::Unsupported {
            at,
            reason: other.to_string(),
        },
    }
}

fn encode_aarch64(
    branch: Branch,
    form: BranchForm,
    at: Vaddr,
    target: Vaddr,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let err = |e| from_aarch64(e, at);
    let words: Vec<u32> = match branch {
        Branch::Jump => vec![aarch64::b(at.get(), target.get()).map_err(err)?],
        Branch::Cond { inst, inverted } => {
            let word = inst.aarch64().decoded().map(|i| i.word).ok_or_else(|| {
                EncodeError::Unsupported {
                    at: inst.addr(),
                    reason: "not an instruction".into(),
                }
            })?;
            let word = if inverted {
                aarch64::invert(word).map_err(err)?
            } else {
                word
            };
            match form {
                BranchForm::Short => {
                    vec![aarch64::retarget(word, at.get(), target.get()).map_err(err)?]
                }
                // The opposite test skips the `b` that goes to `target`.
                BranchForm::Near => vec![
                    aarch64::retarget(aarch64::invert(word).map_err(err)?, at.get(), at.get() + 8)
                        .map_err(err)?,
                    aarch64::b(at.get() + 4, target.get()).map_err(err)?,
                ],
            }
        }
    };
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    Ok(())
}
