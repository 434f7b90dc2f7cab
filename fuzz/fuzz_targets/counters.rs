//! Fuzz target `counters`: the input is read as a counter file written by an instrumented
//! binary (header, map, counters) and turned into a profile, as `rivet merge` does; it is also
//! read as a bare map (no header, so no hash shields the map decoder from the mutations) and
//! that map, with every counter set to the input's length, turned into a profile.
//!
//! Corrupt files must be refused with an error; a panic, a hang or a blow-up is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_profile::counters::{CounterFile, CounterMap};

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = CounterFile::parse(data) {
        let profile = file.to_profile();
        let again = CounterMap::decode_map(&file.map.encode_map()).expect("an encoded map decodes");
        assert_eq!(again, file.map);
        let _ = rivet_profile::native::write(&profile);
    }
    if let Ok(map) = CounterMap::decode_map(data) {
        let counters = vec![data.len() as u64; map.counter_count.min(1 << 16) as usize];
        if counters.len() == map.counter_count as usize {
            let file = CounterFile {
                map,
                map_hash: 0,
                counters,
                spilled: Vec::new(),
            };
            let _ = file.to_profile();
        }
    }
});
