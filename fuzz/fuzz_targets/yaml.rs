//! Fuzz target `yaml`: the input is read as a BOLT YAML profile.
//!
//! Refusing the input is fine; a panic, a hang or a blow-up (alias bombs included) is a bug.
//! A profile the parser accepts must be written and read back as the same profile, and
//! merging it with itself must either fail with an error or keep every function.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_profile::{merge, yaml};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(profile) = yaml::parse(text) else {
        return;
    };
    let written = yaml::write(&profile);
    let again = yaml::parse(&written)
        .unwrap_or_else(|e| panic!("YAML we wrote does not read back: {e}\n{written}"));
    assert_eq!(again, profile);
    if let Ok(merged) = merge::merge_yaml([profile.clone(), profile.clone()]) {
        let mut names: Vec<&str> = profile.functions.iter().map(|f| f.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(merged.functions.len(), names.len());
    }
});
