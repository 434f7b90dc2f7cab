//! The input file, mapped read-only.
//!
//! Memory-mapping is the one `unsafe` operation of the reader: the OS could change the bytes
//! under us if another process truncated or rewrote the file while we run. We accept that
//! (every tool of the field does) and map privately and read-only, so Rivet itself can never
//! modify its input.

use std::fs::File;
use std::path::Path;

#[derive(Debug)]
pub struct MappedFile {
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    pub fn open(path: &Path) -> std::io::Result<MappedFile> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "is a directory",
            ));
        }
        if meta.len() == 0 {
            // mmap of an empty file fails with EINVAL; an empty slice reads as "not ELF".
            return Ok(MappedFile { map: None });
        }
        // SAFETY: the mapping is read-only and private; see the module comment for why
        // concurrent modification by another process is an accepted risk.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(MappedFile { map: Some(map) })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}
