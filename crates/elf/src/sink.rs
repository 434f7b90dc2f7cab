//! Where the output writer puts an image: a buffer in memory, or a file it streams into.
//!
//! `writer::write_output` produces the image in file order, front to back, and then
//! overwrites one short range it could only know at the end (the build-id, a hash of
//! everything before). A file sink therefore never holds the image: a large program's output
//! (hundreds of MB, mostly the input's debug info moved behind the new segment) goes to the
//! file through a small buffer instead of being assembled in memory first.
//!
//! Writing to a file can fail at any point (a full disk); the file sink keeps the first error
//! and ignores what comes after, and its owner asks for it once the image is written
//! (`FileSink::finish`). The writer itself deals only in layout, never in I/O errors.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;

/// Receives an image in file order (`append`), and at the end overwrites bytes already
/// appended (`overwrite`).
pub trait ImageSink {
    /// The image will be `len` bytes long (a hint, sent before the first byte).
    fn expect_len(&mut self, _len: u64) {}
    /// Appends `bytes` at the end of what was written so far.
    fn append(&mut self, bytes: &[u8]);
    /// Replaces bytes written earlier, at file offset `offset`.
    fn overwrite(&mut self, offset: u64, bytes: &[u8]);
}

/// The image in memory.
impl ImageSink for Vec<u8> {
    fn expect_len(&mut self, len: u64) {
        // A hint only: a garbage length from a corrupt input must not reserve terabytes
        // first (the writer reports such inputs itself).
        if let Ok(len) = usize::try_from(len)
            && len <= (1 << 34)
        {
            self.reserve_exact(len.saturating_sub(self.len()));
        }
    }

    fn append(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn overwrite(&mut self, offset: u64, bytes: &[u8]) {
        let start = offset as usize;
        self[start..start + bytes.len()].copy_from_slice(bytes);
    }
}

/// The image streamed into a file, from its start, through a 1 MiB buffer.
#[derive(Debug)]
pub struct FileSink<'f> {
    out: BufWriter<&'f File>,
    error: Option<std::io::Error>,
}

impl<'f> FileSink<'f> {
    /// A sink writing `file` from offset 0 (which the caller has truncated or just created).
    pub fn new(file: &'f File) -> FileSink<'f> {
        FileSink {
            out: BufWriter::with_capacity(1 << 20, file),
            error: None,
        }
    }

    /// Flushes what is buffered and reports the first error met, if any.
    pub fn finish(mut self) -> std::io::Result<()> {
        if self.error.is_none()
            && let Err(e) = self.out.flush()
        {
            self.error = Some(e);
        }
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn keep(&mut self, result: std::io::Result<()>) {
        if let Err(e) = result {
            self.error.get_or_insert(e);
        }
    }
}

impl ImageSink for FileSink<'_> {
    fn append(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            let result = self.out.write_all(bytes);
            self.keep(result);
        }
    }

    fn overwrite(&mut self, offset: u64, bytes: &[u8]) {
        if self.error.is_none() {
            let result = self
                .out
                .flush()
                .and_then(|()| self.out.get_ref().write_all_at(bytes, offset));
            self.keep(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_sink_writes_what_a_buffer_holds() {
        let path = std::env::temp_dir().join(format!("rivet-sink-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        let mut sink = FileSink::new(&file);
        let mut buffer: Vec<u8> = Vec::new();
        let big = vec![5u8; 3 << 20];
        for s in [&mut sink as &mut dyn ImageSink, &mut buffer] {
            s.expect_len(4 + big.len() as u64);
            s.append(b"abcd");
            s.append(&big);
            s.overwrite(1, b"XY");
        }
        sink.finish().unwrap();
        let written = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&written[..4], b"aXYd");
        assert_eq!(written, buffer);
    }

    #[test]
    fn a_file_sink_reports_its_first_error() {
        // A file opened read-only refuses every write.
        let path = std::env::temp_dir().join(format!("rivet-sink-ro-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let file = File::open(&path).unwrap();
        let mut sink = FileSink::new(&file);
        sink.append(&vec![1u8; 2 << 20]);
        sink.overwrite(0, b"x");
        let error = sink.finish().unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(error.raw_os_error(), Some(9), "{error}"); // EBADF
    }
}
