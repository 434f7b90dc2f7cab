//! Fuzz target `fdata`: the input is read as a BOLT fdata profile.
//!
//! Most inputs are refused with an error, which is fine. A panic, a hang or a blow-up is a
//! bug. Whatever the parser accepts must survive the writer: written back as fdata (when it
//! has an fdata form: a name may hold something only the native format can say) and read
//! again, it must give the same profile.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_profile::fdata;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(profile) = fdata::parse(text) else {
        return;
    };
    let written = fdata::write(&profile).expect("a profile read from fdata has an fdata form");
    let again = fdata::parse(&written).expect("fdata we wrote reads back");
    assert_eq!(again, profile);
});
