//! Fuzz target `native`: the input is read as a profile in Rivet's native format, and also
//! through `read_any`, which tells formats apart first.
//!
//! Refusing the input is fine; a panic, a hang or a blow-up is a bug. A profile the parser
//! accepts must be written back byte for byte (the format has one spelling for each
//! profile), and must read back the same through the fdata writer as far as fdata can hold it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_profile::{fdata, native};

fuzz_target!(|data: &[u8]| {
    let _ = native::read_any(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(profile) = native::parse(text) else {
        return;
    };
    let written =
        native::write(&profile).expect("a profile read from the native format has a native form");
    let again = native::parse(&written).expect("a native profile we wrote reads back");
    assert_eq!(again, profile);
    // Records may come in any order and no record twice: sorting is the only change allowed.
    let mut lines: Vec<&str> = text.lines().collect();
    let mut written_lines: Vec<&str> = written.lines().collect();
    lines.sort_unstable();
    written_lines.sort_unstable();
    assert_eq!(lines, written_lines);
    if let Ok(as_fdata) = fdata::write(&profile) {
        let back = fdata::parse(&as_fdata).expect("fdata we wrote reads back");
        assert_eq!(back.branches, profile.branches);
        assert_eq!(back.samples, profile.samples);
        assert_eq!(back.memory, profile.memory);
    }
});
