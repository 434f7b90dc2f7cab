//! Fuzz target `counters`: the input is read as a counter file written by an instrumented
//! binary (header, map, counters), then turned into a profile, as `rivet merge` does.
//!
//! Corrupt files must be refused with an error; a panic, a hang or a blow-up is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_profile::counters::CounterFile;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = CounterFile::parse(data) else {
        return;
    };
    let profile = file.to_profile();
    // What was read writes out again as the map it came from.
    let again = rivet_profile::counters::CounterMap::decode_map(&file.map.encode_map())
        .expect("an encoded map decodes");
    assert_eq!(again, file.map);
    let _ = rivet_profile::native::write(&profile);
});
