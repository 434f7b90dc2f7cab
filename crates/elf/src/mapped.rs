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

    /// Lets the pages holding `bytes` (a part of `bytes()`) go from this process's memory: they
    /// stay in the page cache, and a later read maps them again. Pages only partly inside
    /// `bytes` stay. For a large input read once front to back (the output writer, the debug
    /// info): otherwise every page ever read counts in the resident set to the end, the
    /// whole file (7.9 GiB for bench/scale's 1 GB program) on top of what the run holds.
    pub fn release_pages(&self, bytes: &[u8]) {
        let Some(map) = &self.map else { return };
        let base = map.as_ptr() as usize;
        let start = bytes.as_ptr() as usize;
        if start < base || start + bytes.len() > base + map.len() {
            return;
        }
        let page = 4096;
        let first = (start - base).div_ceil(page) * page;
        let end = (start - base + bytes.len()) / page * page;
        if end > first {
            // SAFETY: the mapping is private and read-only, so it holds no change of ours that
            // MADV_DONTNEED could discard: the next access reads the file's bytes again, the
            // same bytes (see the module comment on concurrent modification).
            #[allow(unsafe_code)]
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident kB of the mapping that starts at `addr`, from /proc/self/smaps.
    fn resident_kb(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines();
        while let Some(line) = lines.next() {
            let start = line.split('-').next().unwrap_or("");
            if usize::from_str_radix(start, 16).ok() != Some(addr) {
                continue;
            }
            for l in lines.by_ref() {
                if let Some(kb) = l.strip_prefix("Rss:") {
                    return kb.trim().trim_end_matches(" kB").trim().parse().unwrap();
                }
            }
        }
        panic!("no mapping at {addr:#x}");
    }

    #[test]
    fn released_pages_leave_the_resident_set_and_read_the_same() {
        let path = std::env::temp_dir().join(format!("rivet-mapped-{}", std::process::id()));
        let contents: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &contents).unwrap();
        let mapped = MappedFile::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let bytes = mapped.bytes();
        let sum: u64 = bytes.iter().map(|&b| u64::from(b)).sum();
        let addr = bytes.as_ptr() as usize;
        let before = resident_kb(addr);
        assert!(
            before >= 4096 - 64,
            "only {before} kB resident after reading 4 MiB"
        );
        // The middle half: whole pages only, the partial ones at its edges stay.
        mapped.release_pages(&bytes[(1 << 20) + 100..(3 << 20) + 100]);
        let after = resident_kb(addr);
        assert!(
            after <= before - 2040,
            "{before} kB resident before, {after} kB after releasing 2 MiB"
        );
        assert_eq!(bytes.iter().map(|&b| u64::from(b)).sum::<u64>(), sum);
        assert_eq!(bytes, &contents[..]);
        // Bytes from elsewhere are ignored.
        mapped.release_pages(&contents);
    }
}
