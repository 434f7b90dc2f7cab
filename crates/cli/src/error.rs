//! Errors as the user sees them: one `rivet: error: ...` line with a hint on what to do.
//!
//! Library crates return typed errors and never print; every command turns them into a
//! [`UserError`] here, so that the same cause (an unreadable ELF file, a rewrite Rivet refuses)
//! reads the same whichever command met it, and `main` alone prints it and sets the exit code.

use std::path::Path;

use rivet_elf::ElfError;
use rivet_emit::rewrite::RewriteError;

/// An error that reaches the user: the message, and a hint on what to do about it.
#[derive(Debug)]
pub struct UserError {
    pub message: String,
    pub hint: Option<String>,
}

impl UserError {
    pub fn new(message: impl Into<String>) -> Self {
        UserError {
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The line printed for this error on standard error.
    pub fn line(&self) -> String {
        // Messages can quote bytes of a hostile input (section names...): keep the error
        // on one line, whatever they contain.
        let message = one_line(&self.message);
        match &self.hint {
            Some(hint) => format!("rivet: error: {message} (hint: {hint})"),
            None => format!("rivet: error: {message}"),
        }
    }
}

/// Escapes control characters so a message prints as one line.
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Maps reading errors to a message and a hint a user can act on.
pub fn elf_error(path: &Path, e: &ElfError) -> UserError {
    let p = path.display();
    let err = UserError::new(format!("{p}: {e}"));
    match e {
        ElfError::NotElf => err.hint("give the path of a linked executable or shared library"),
        ElfError::Not64Bit | ElfError::BigEndian | ElfError::WrongMachine(_) => {
            err.hint("Rivet reads x86-64 and AArch64 ELF64 little-endian binaries only")
        }
        ElfError::WrongType(_) => err.hint("link the program first; Rivet works on final binaries"),
        ElfError::Malformed { .. } => {
            err.hint("the file looks truncated or corrupt; rebuild it or check the copy")
        }
    }
}

/// Maps a refused or failed rewrite of `path` (by `rewrite`, `instrument`, `optimize`,
/// `bench`'s shuffled layouts) to a message and a hint.
pub fn rewrite_error(path: &Path, e: RewriteError) -> UserError {
    let p = path.display();
    match e {
        RewriteError::AlreadyRewritten => UserError::new(format!("{p}: {e}"))
            .hint("rewrite the original binary instead of Rivet's output"),
        RewriteError::NeedsRelocations { .. } => UserError::new(format!("{p}: {e}")).hint(
            "relink with -Wl,--emit-relocs, or use --layout identity or shuffle-blocks, which keep function order",
        ),
        RewriteError::Elf(e) => elf_error(path, &e),
        other => UserError::new(format!("{p}: {other}"))
            .hint("please report this with the binary; `rivet inspect` shows what Rivet understood"),
    }
}
