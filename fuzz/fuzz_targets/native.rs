//! Fuzz target `native`: the input is read as a profile in Rivet's native format, and also
//! through `read_any`, which tells formats apart first.
//!
//! Refusing the input is fine; a panic, a hang or a blow-up is a bug. A profile the parser
//! accepts must be written back byte for byte (the format has one spelling for each
//! profile; version 1, which has no code hashes, comes back as version 2), code hashes
//! included, and must read back the same through the fdata writer as far as fdata can hold it.
//! It is also merged as `rivet merge` would: with itself (the sum must equal the profile
//! weighted 2, saturation and all) and with a weight picked from the input's length, and the
//! result must write and read back. The input is read as a weight too, as `PATH:WEIGHT` is.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_profile::merge::{Weight, merge, merge_weighted};
use rivet_profile::{fdata, native};

/// Weights of every kind: 1 (the identity), integers, fractions that round and fade records.
const WEIGHTS: [&str; 6] = ["1", "2", "0.5", "0.25", "3.75", "0.000000001"];

fuzz_target!(|data: &[u8]| {
    let _ = native::read_any(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = text.parse::<Weight>();
    let Ok(profile) = native::parse(text) else {
        return;
    };
    let written =
        native::write(&profile).expect("a profile read from the native format has a native form");
    let again = native::parse(&written).expect("a native profile we wrote reads back");
    assert_eq!(again, profile);
    // Records may come in any order and no record twice: sorting is the only change allowed,
    // besides the version: a profile is written in the lowest version that can say it (2 for
    // version 1, which has no hashes; 2 or 3 for a version 4 profile without block cases),
    // never in a higher one than it was read in, but for version 1.
    let version = |t: &str| -> u32 {
        t.lines().next().and_then(|l| l.strip_prefix("rivet-profile ")).unwrap().parse().unwrap()
    };
    assert!(version(&written) <= version(text).max(2), "{written}");
    let mut lines: Vec<&str> = text.lines().skip(1).collect();
    let mut written_lines: Vec<&str> = written.lines().skip(1).collect();
    lines.sort_unstable();
    written_lines.sort_unstable();
    assert_eq!(lines, written_lines);
    if let Ok(as_fdata) = fdata::write(&profile) {
        let back = fdata::parse(&as_fdata).expect("fdata we wrote reads back");
        assert_eq!(back.branches, profile.branches);
        assert_eq!(back.samples, profile.samples);
        assert_eq!(back.memory, profile.memory);
    }
    let twice = merge([profile.clone(), profile.clone()]).expect("a profile merges with itself");
    let two: Weight = "2".parse().unwrap();
    let doubled = merge_weighted([(profile.clone(), two)]).unwrap();
    assert_eq!(twice, doubled);
    let weight: Weight = WEIGHTS[data.len() % WEIGHTS.len()].parse().unwrap();
    let weighted = merge_weighted([(profile, weight)]).unwrap();
    let written = native::write(&weighted).expect("a weighted profile has a native form");
    assert_eq!(native::parse(&written).expect("and reads back"), weighted);
});
