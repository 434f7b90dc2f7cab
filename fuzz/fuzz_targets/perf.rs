//! Fuzz target `perf`: the input is read as `perf script` text, line by line, by the
//! aggregator of `rivet aggregate` (mmap events, samples, branch stacks), for a binary with a
//! text segment at 0x1000 and a second at 0x400000.
//!
//! Anything may be refused or ignored; a panic, a hang or an overflow is a bug. What the
//! aggregator keeps must be consistent: every sample it maps lies in a segment of the binary.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_profile::perf::{Aggregator, Segment};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let segments = vec![
        Segment { vaddr: 0x1000, offset: 0x1000, filesz: 0x4000 },
        Segment { vaddr: 0x400000, offset: 0x6000, filesz: 0x2000 },
    ];
    let mut aggregator = Aggregator::new(segments.clone(), vec!["/bin/prog".into()]);
    for line in text.lines() {
        aggregator.feed(line);
    }
    let inside = |a: u64| segments.iter().any(|s| a >= s.vaddr && a - s.vaddr < s.filesz);
    let r = &aggregator.result;
    assert!(r.samples.keys().all(|&a| inside(a)));
    assert!(r.branches.keys().all(|&(f, t)| inside(f) && inside(t)));
    assert!(r.traces.keys().all(|&(s, e)| inside(s) && inside(e) && s <= e));
    assert!(r.samples.values().sum::<u64>() + r.samples_elsewhere == r.total_samples);
});
