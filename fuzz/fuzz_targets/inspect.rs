//! Fuzz target `inspect`: the input is an ELF file, handled as `rivet inspect` handles one.
//!
//! Parsing may refuse the input (that is the expected outcome for most mutations); anything
//! it accepts goes through discovery with unwind rows (symbols, relocations, `.eh_frame`,
//! LSDAs, PLT, decoding, CFGs, jump tables) and the text dump of every function, which walks
//! every block, instruction and table discovery produced. A panic, a hang or an allocation
//! blow-up anywhere on that path is a bug: bad input must end in an error, never a crash.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet_discover::{CfiRows, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_ir::dump::dump_program;

fuzz_target!(|data: &[u8]| {
    let Ok(elf) = ElfFile::parse(data) else {
        return;
    };
    let _ = elf.build_id();
    let options = DiscoverOptions { cfi: CfiRows::Keep };
    let Ok(program) = discover(&elf, &options) else {
        return;
    };
    std::hint::black_box(dump_program(&program));
});
