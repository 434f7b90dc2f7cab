//! Helpers of `bench/merge-scale.sh`, which measures `rivet merge` over thousands of inputs.
//!
//! `merge_bench generate BASE DIR N SEED KEEP` writes N profiles `DIR/host-NNNNN.prof` made
//! from the Rivet profile BASE as if N hosts had run other mixes of the same work: each keeps
//! a record with probability KEEP (a host does not run everything), scales all its counts by
//! a factor of its own between 0.5 and 2 (how long it ran) and each count by a further 0.8 to
//! 1.2 (its mix). Records are edited as text, so the files keep BASE's exact spelling and a
//! million records a second go out. The same SEED gives the same files.
//!
//! `merge_bench heap PROFILE` prints how many heap bytes PROFILE takes once read (a
//! `Profile`), and how many the same records take in `Merger`'s compact sum, counted by a
//! wrapper around the system allocator: the figures the benchmark compares peak memory with.

use std::alloc::System;
use std::fmt::Write as _;
use std::path::Path;

use cap::Cap;
use rivet_profile::merge::{Merger, Weight};
use rivet_profile::native;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// splitmix64: a small, well-mixed generator; the benchmark needs reproducible noise, not
/// cryptographic quality.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn generate(base: &Path, dir: &Path, n: usize, seed: u64, keep: f64) -> Result<(), String> {
    let text = std::fs::read_to_string(base).map_err(|e| format!("{}: {e}", base.display()))?;
    let (header, rest) = text
        .split_once("records\n")
        .ok_or("BASE is not a Rivet profile (no `records` line)")?;
    let records: Vec<&str> = rest.lines().take_while(|l| *l != "end").collect();
    let branches = header.contains("\nmode branches\n");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out = String::new();
    for host in 0..n {
        let mut noise = Noise(seed ^ (host as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let scale = 0.5 + 1.5 * noise.unit();
        out.clear();
        out.push_str(header);
        out.push_str("records\n");
        for record in &records {
            if noise.unit() >= keep {
                continue;
            }
            // Counts are the last fields, after names that may hold escaped spaces: split
            // from the end. Memory lines (flags 3 to 5) end in one count; branch lines in
            // mispredicts and count; sample lines in one count.
            let memory = matches!(record.as_bytes()[0], b'3'..=b'5');
            let (front, count) = record.rsplit_once(' ').ok_or("a record without fields")?;
            let count: u64 = count.parse().map_err(|_| "a count that is not a number")?;
            let factor = scale * (0.8 + 0.4 * noise.unit());
            let new = ((count as f64 * factor).round() as u64).max(1);
            if branches && !memory {
                let (front, mispreds) = front.rsplit_once(' ').ok_or("a short branch record")?;
                let mispreds: u64 = mispreds.parse().map_err(|_| "bad mispredicts")?;
                let _ = writeln!(out, "{front} {} {new}", mispreds.min(new));
            } else {
                let _ = writeln!(out, "{front} {new}");
            }
        }
        out.push_str("end\n");
        let path = dir.join(format!("host-{host:05}.prof"));
        std::fs::write(&path, &out).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn heap(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let before = ALLOCATOR.allocated();
    let profile = native::parse(&text).map_err(|e| e.to_string())?;
    let profile_bytes = ALLOCATOR.allocated() - before;
    let records = profile.branches.len() + profile.samples.len() + profile.memory.len();
    // The compact form: what is left once the profile is folded into a Merger (which
    // consumes it).
    let mut merger = Merger::new();
    merger
        .add(profile, Weight::ONE)
        .map_err(|e| e.to_string())?;
    let compact_bytes = ALLOCATOR.allocated() - before;
    println!(
        "records {records} text_bytes {} profile_heap_bytes {profile_bytes} compact_sum_heap_bytes {compact_bytes}",
        text.len()
    );
    drop(merger);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: merge_bench generate BASE DIR N SEED KEEP | merge_bench heap PROFILE";
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["generate", base, dir, n, seed, keep] => match (n.parse(), seed.parse(), keep.parse()) {
            (Ok(n), Ok(seed), Ok(keep)) => generate(Path::new(base), Path::new(dir), n, seed, keep),
            _ => Err(usage.to_string()),
        },
        ["heap", path] => heap(Path::new(path)),
        _ => Err(usage.to_string()),
    };
    if let Err(e) = result {
        eprintln!("merge_bench: {e}");
        std::process::exit(2);
    }
}
