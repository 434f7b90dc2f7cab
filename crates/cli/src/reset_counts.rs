//! `rivet reset-counts`: zeroes the counters of a counter file in place, while instrumented
//! programs may be counting into it, optionally saving what they held as a phase profile.
//!
//! The file stays the same inode, the same size and the same header, so running programs keep
//! their mapping and go on counting into it: nobody needs to truncate or delete a live counter
//! file (the runtime survives both, but then stops saving counts). Each counter is taken with
//! one atomic swap against zero over a shared mapping of the file. The instrumented code
//! increments with `lock`-prefixed instructions, so every increment lands either before the
//! swap (in the saved phase) or after it (in the next phase), never in both and never lost.
//! The targets recorded in indirect call site tables are not counts: they stay, and the saved
//! phase gets a copy, so both phases name what their counts are of.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rivet_profile::counters::{CounterFile, SITE_TARGETS};

use crate::error::UserError;
use crate::files::PendingOutput;

#[derive(clap::Args, Debug)]
pub struct ResetCountsArgs {
    /// The counter file instrumented programs count into (they may be running).
    pub counts: PathBuf,
    /// Save the counts taken to this file (a counter file, for `merge`, `optimize`...): the
    /// phase that ends now. Without it they are discarded.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// The instrumented binary that writes the file (it holds the file's map), when it is no
    /// longer where `rivet instrument -o` wrote it.
    #[arg(long, value_name = "PATH")]
    pub instrumented: Option<PathBuf>,
}

fn bad_file(path: &Path, why: impl std::fmt::Display) -> UserError {
    UserError::new(format!("{} is not a counter file: {why}", path.display()))
        .hint("give the file an instrumented program counts into (`rivet instrument --profile`)")
}

/// Swaps every counter of `area` (little-endian u64s, 8-byte aligned) with zero, except the
/// words `is_target` marks (the targets of indirect call site tables, which say what their
/// counts count): those are read after the counts, so that a target claimed meanwhile comes
/// with a count of zero rather than a count without its target. Returns the values taken.
fn take_counters(area: &mut [u8], is_target: &[bool]) -> Vec<u64> {
    let (head, words, tail) = {
        #[allow(unsafe_code)]
        // SAFETY: AtomicU64 has u64's size and every bit pattern is valid for it; align_to
        // hands over only the 8-byte-aligned middle, and the mapping is page-aligned, so head
        // and tail are empty for a counter area (checked below). Other processes write the
        // same memory only through atomic read-modify-write instructions.
        unsafe {
            area.align_to_mut::<AtomicU64>()
        }
    };
    assert!(
        head.is_empty() && tail.is_empty(),
        "counters are 8-byte aligned"
    );
    let mut taken: Vec<u64> = words
        .iter()
        .zip(is_target)
        .map(|(w, &target)| {
            // Zero stays zero unless a program counts, and that count belongs to the next
            // phase: leave such pages clean.
            if target || w.load(Ordering::Relaxed) == 0 {
                0
            } else {
                u64::from_le(w.swap(0, Ordering::SeqCst))
            }
        })
        .collect();
    for ((w, &target), v) in words.iter().zip(is_target).zip(&mut taken) {
        if target {
            *v = u64::from_le(w.load(Ordering::SeqCst));
        }
    }
    taken
}

pub fn run(args: &ResetCountsArgs) -> Result<(), UserError> {
    let path = &args.counts;
    let cannot = |e: std::io::Error| {
        UserError::new(format!("cannot open {}: {e}", path.display()))
            .hint("check the path and that you may write the file")
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(cannot)?;
    // The header and map (in the file, or in the instrumented binary it names) are checked on
    // a copy: the same checks every reader makes.
    let bytes = std::fs::read(path).map_err(cannot)?;
    let parsed = CounterFile::parse_with(&bytes, args.instrumented.as_deref())
        .map_err(|e| crate::profile_use::bad_counters(path, e))?;
    if bytes.get(8..12) == Some(&rivet_profile::counters::VERSION_SUMMED.to_le_bytes()[..]) {
        return Err(UserError::new(format!(
            "{} is a summed counter file (from `rivet merge`), which no run counts into",
            path.display()
        ))
        .hint("reset the counter file an instrumented program counts into; a summed file is already apart from every run"));
    }
    let offset = u64::from_le_bytes(bytes[16..24].try_into().unwrap_or_default());
    let end = offset + 8 * parsed.counters.len() as u64;
    if offset % 4096 != 0 {
        return Err(bad_file(path, "its counters are not page-aligned"));
    }
    #[allow(unsafe_code)]
    // SAFETY: the mapping is shared with running programs on purpose; this process reads and
    // writes its counters only with atomic operations (take_counters), never through the
    // `&mut [u8]` otherwise. A program truncating the file meanwhile would fault this process
    // with SIGBUS, as it would any reader of a mapped file.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(cannot)?;
    if (map.len() as u64) < end {
        return Err(bad_file(path, "it shrank while being read"));
    }
    let mut is_target = vec![false; parsed.counters.len()];
    for f in &parsed.map.functions {
        for &(_, first) in &f.indirect {
            for pair in 0..SITE_TARGETS {
                if let Some(t) = is_target.get_mut((first + 2 * pair) as usize) {
                    *t = true;
                }
            }
        }
    }
    let taken = take_counters(&mut map[offset as usize..end as usize], &is_target);
    drop(map);
    let total: u64 = taken.iter().fold(0u64, |a, &b| a.saturating_add(b));
    if let Some(out) = &args.output {
        let mut phase = bytes[..offset as usize].to_vec();
        for v in &taken {
            phase.extend_from_slice(&v.to_le_bytes());
        }
        phase.resize(bytes.len(), 0);
        let (pending, f) = PendingOutput::create(out)?;
        pending.finish(f, &phase, 0o600)?;
        println!(
            "{}: {} counters reset; the {} counts taken are in {}",
            path.display(),
            taken.len(),
            total,
            out.display()
        );
    } else {
        println!(
            "{}: {} counters reset ({} counts discarded)",
            path.display(),
            taken.len(),
            total
        );
    }
    Ok(())
}
