//! Fuzz target `perf_sources`: the readers of Arm's profiling sources in `perf script` text
//! (BRBE branch stacks, CoreSight ETM trace branches, SPE samples) and the choice between
//! sources. The first byte picks how the text is read (told from the text, or one source
//! named as `--perf-source` names it); the rest is read line by line by the aggregator of
//! `rivet aggregate`, for a binary with a text segment at 0x1000 and a second at 0x400000.
//!
//! Anything may be refused or ignored; a panic, a hang or an overflow is a bug. What the
//! aggregator keeps must be consistent: every address it maps lies in a segment of the
//! binary, every run starts before it ends, no count exceeds the samples read, and a named
//! source is the source the result says it is.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_profile::perf::{Aggregator, PerfSource, Segment};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let segments = vec![
        Segment { vaddr: 0x1000, offset: 0x1000, filesz: 0x4000 },
        Segment { vaddr: 0x400000, offset: 0x6000, filesz: 0x2000 },
    ];
    let forced = match mode % 5 {
        0 => None,
        1 => Some(PerfSource::BranchStacks),
        2 => Some(PerfSource::Trace),
        3 => Some(PerfSource::Spe),
        _ => Some(PerfSource::Samples),
    };
    let mut aggregator = Aggregator::new(segments.clone(), vec!["/bin/prog".into()]);
    if let Some(source) = forced {
        aggregator = aggregator.with_source(source);
    }
    for line in text.lines() {
        aggregator.feed(line);
    }
    let inside = |a: u64| segments.iter().any(|s| a >= s.vaddr && a - s.vaddr < s.filesz);
    let r = &aggregator.result;
    assert!(r.samples.keys().all(|&a| inside(a)));
    assert!(r.branches.keys().all(|&(f, t)| inside(f) && inside(t)));
    assert!(r.entries.keys().all(|&t| inside(t)));
    assert!(r.not_taken.keys().all(|&a| inside(a)));
    assert!(r.traces.keys().all(|&(s, e)| inside(s) && inside(e) && s <= e));
    assert_eq!(r.samples.values().sum::<u64>() + r.samples_elsewhere, r.total_samples);
    assert_eq!(r.sources.values().sum::<u64>(), r.total_samples);
    assert!(r.spe_branches + r.spe_branches_without_target <= r.total_samples);
    assert!(r.spe_branches_without_outcome <= r.spe_branches);
    assert!(r.not_taken.values().sum::<u64>() <= r.spe_branches);
    assert!(r.samples_of_other_sources <= r.total_samples);
    match (forced, r.source()) {
        (Some(named), got) => assert_eq!(got, Ok(named)),
        (None, Ok(source)) => {
            assert!(source == PerfSource::Samples || r.sources.contains_key(&source))
        }
        (None, Err(mixed)) => assert!(mixed.0.len() >= 2),
    }
    if forced == Some(PerfSource::Samples) {
        assert!(r.branches.is_empty() && r.traces.is_empty() && r.not_taken.is_empty());
    }
});
