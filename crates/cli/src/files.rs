//! The files a command reads and writes. Rivet never opens its input for writing: the binary
//! is mapped read-only. Every output goes to a temporary file beside its destination and is
//! renamed into place only once complete, so a failed or interrupted run leaves nothing
//! behind and a reader of the destination never sees half a file.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rivet_elf::MappedFile;
use rivet_elf::sink::{FileSink, ImageSink};

use crate::error::UserError;

/// Maps the file at `path` read-only, with the error every command gives for an unreadable
/// input.
pub(crate) fn map_input(path: &Path) -> Result<MappedFile, UserError> {
    MappedFile::open(path).map_err(|e| {
        UserError::new(format!("cannot read {}: {e}", path.display()))
            .hint("check the path and its permissions")
    })
}

/// A temporary output file that disappears unless committed.
pub(crate) struct PendingOutput {
    temp: PathBuf,
    dest: PathBuf,
    committed: bool,
}

impl PendingOutput {
    pub(crate) fn create(dest: &Path) -> Result<(PendingOutput, File), UserError> {
        // Found now rather than at the final rename, after all the work.
        if dest.is_dir() {
            return Err(
                UserError::new(format!("the output {} is a directory", dest.display()))
                    .hint("give a file path for the output, e.g. DIR/NAME"),
            );
        }
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest
            .file_name()
            .ok_or_else(|| UserError::new(format!("{} is not a file path", dest.display())))?;
        let temp = dir.join(format!(
            ".{}.rivet-{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| {
                UserError::new(format!("cannot write to {}: {e}", dir.display()))
                    .hint("choose an output path in a directory you can write to")
            })?;
        Ok((
            PendingOutput {
                temp,
                dest: dest.to_path_buf(),
                committed: false,
            },
            file,
        ))
    }

    /// Writes `bytes` to the temporary file (`file`, from `create`), syncs it, gives it `mode`
    /// and renames it into place.
    pub(crate) fn finish(self, mut file: File, bytes: &[u8], mode: u32) -> Result<(), UserError> {
        file.write_all(bytes).map_err(|e| self.write_error(e))?;
        self.finish_written(file, mode)
    }

    /// `finish` for a temporary file already written (streamed into through a
    /// `rivet_elf::sink::FileSink`): syncs it, gives it `mode` and renames it into place.
    pub(crate) fn finish_written(self, file: File, mode: u32) -> Result<(), UserError> {
        file.sync_all().map_err(|e| self.write_error(e))?;
        drop(file);
        self.commit(mode)
    }

    /// The error of a failed write into the temporary file.
    pub(crate) fn write_error(&self, e: std::io::Error) -> UserError {
        UserError::new(format!("cannot write {}: {e}", self.dest.display()))
            .hint("check the free space of its file system")
    }

    /// Streams an image into the temporary file (`file`, from `create`): `write` writes it
    /// into the sink it is given, and a write that failed on the way is reported once it
    /// returns. The image is never held in memory.
    pub(crate) fn stream<T>(
        &self,
        file: &File,
        write: impl FnOnce(&mut dyn ImageSink) -> Result<T, UserError>,
    ) -> Result<T, UserError> {
        let mut sink = FileSink::new(file);
        let written = write(&mut sink)?;
        sink.finish().map_err(|e| self.write_error(e))?;
        Ok(written)
    }

    /// `--verify`: checks the temporary file as written (mapped) with `check` before it is
    /// committed; a failure is one error line saying that the output was not written.
    pub(crate) fn verify_written(
        &self,
        check: impl FnOnce(&[u8]) -> Result<(), String>,
    ) -> Result<(), UserError> {
        let written = MappedFile::open(&self.temp).map_err(|e| self.write_error(e))?;
        check(written.bytes()).map_err(|e| {
            UserError::new(format!(
                "verification of {} failed: {e}",
                self.dest.display()
            ))
            .hint("the output was not written; please report this with the binary")
        })
    }

    fn commit(mut self, mode: u32) -> Result<(), UserError> {
        let fail = |e: std::io::Error| {
            UserError::new(format!("cannot write {}: {e}", self.dest.display()))
                .hint("check that the output path can be replaced (not a directory, not busy)")
        };
        std::fs::set_permissions(&self.temp, std::fs::Permissions::from_mode(mode))
            .map_err(fail)?;
        std::fs::rename(&self.temp, &self.dest).map_err(fail)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for PendingOutput {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The permission bits an output made from `input` gets: the input's (an executable stays
/// executable), 0755 when they cannot be read.
pub(crate) fn mode_of(input: &Path) -> u32 {
    std::fs::metadata(input)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o755)
}

/// Whether `a` and `b` name one file, so that a command can refuse to write over its input.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Whether `elf` is a file Rivet wrote (`rivet optimize`, `rewrite`, `instrument`): it carries
/// the input's build-id note or the block address translation.
pub(crate) fn is_rivet_output(elf: &rivet_elf::ElfFile<'_>) -> bool {
    elf.section_by_name(rivet_emit::rewrite::RIVET_NOTE)
        .is_some()
        || elf.section_by_name(rivet_emit::bat::SECTION).is_some()
}

/// The build-id of the input a Rivet output was made from, as its `.note.rivet` records it.
pub(crate) fn recorded_input_build_id<'a>(elf: &rivet_elf::ElfFile<'a>) -> Option<&'a [u8]> {
    let note = elf.section_by_name(rivet_emit::rewrite::RIVET_NOTE)?;
    // namesz, descsz, type, "Rivet\0" padded to 8, then the input's build-id.
    let descsz = u32::from_le_bytes(note.data.get(4..8)?.try_into().ok()?) as usize;
    note.data.get(20..20 + descsz)
}

/// Refuses Rivet's output as the input of a command that rewrites it: a second rewrite would
/// stack layouts and lose the way back to the input, which is where the next profile belongs.
pub(crate) fn refuse_rivet_output(
    elf: &rivet_elf::ElfFile<'_>,
    path: &Path,
) -> Result<(), UserError> {
    if !is_rivet_output(elf) {
        return Ok(());
    }
    Err(UserError::new(format!(
        "{} is Rivet's output (already rewritten by Rivet); optimize the original",
        path.display()
    ))
    .hint(format!(
        "profile this binary, then rivet aggregate --original ORIGINAL perf.data {} -o p.prof and rivet optimize ORIGINAL --profile p.prof",
        path.display()
    )))
}
