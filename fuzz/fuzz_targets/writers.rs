//! Fuzz target `writers`: the input is an ELF file, handled as `rivet rewrite --verify` handles
//! one, so that Rivet's writers see the malformed and unusual binaries its readers already do.
//!
//! Parsing and discovery may refuse the input. Anything they accept is rewritten with a layout
//! chosen from the input's length (identity, reverse, shuffle, shuffle-blocks, each with a seed),
//! and the rewrite may refuse too, with an error. An output it does produce is one Rivet would
//! write, so it must pass the verifier `--verify` runs (it re-parses and re-discovers the
//! output and checks every rewritten block and stored reference): a verification failure is a
//! finding, like a panic, a hang or an allocation blow-up anywhere on the way.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rivet::verify_check::verify_output;
use rivet_discover::{CfiRows, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_emit::rewrite::{RewriteOptions, rewrite};
use rivet_ir::layout::LayoutStrategy;

fuzz_target!(|data: &[u8]| {
    let Ok(elf) = ElfFile::parse(data) else {
        return;
    };
    let Ok(program) = discover(&elf, &DiscoverOptions { cfi: CfiRows::Keep }) else {
        return;
    };
    // The length picks the layout: mutations that change it explore every strategy without
    // spending input bytes that would shift the ELF's own offsets.
    let seed = data.len() as u64 / 4;
    let strategy = match data.len() % 4 {
        0 => LayoutStrategy::Identity,
        1 => LayoutStrategy::Reverse,
        2 => LayoutStrategy::Shuffle { seed },
        _ => LayoutStrategy::ShuffleBlocks { seed },
    };
    let Ok(output) = rewrite(&elf, &program, &RewriteOptions::strategy(strategy), None) else {
        return;
    };
    if let Err(e) = verify_output(&elf, &program, &output) {
        panic!("the rewrite ({strategy:?}) wrote an output that fails verification: {e}");
    }
});
