//! `rivet verify INPUT OUTPUT`: checks a file Rivet wrote against its input, through the
//! address map its `.rivet.bat` section records (the checks themselves are in
//! `rivet::verify_check`, shared with `--verify` and the writer fuzz target).

use rivet::verify_check::check;
use rivet_discover::{DiscoverError, DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_emit::code::AddressMap;

use crate::error::{UserError, elf_error};
use crate::files::map_input;

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The original binary.
    pub input: std::path::PathBuf,
    /// Rivet's output for it.
    pub output: std::path::PathBuf,
}

/// `rivet verify INPUT OUTPUT`.
pub fn run(args: &VerifyArgs) -> Result<(), UserError> {
    let (in_map, out_map) = (map_input(&args.input)?, map_input(&args.output)?);
    let input = ElfFile::parse(in_map.bytes()).map_err(|e| elf_error(&args.input, &e))?;
    let out = ElfFile::parse(out_map.bytes()).map_err(|e| elf_error(&args.output, &e))?;
    let bat = out
        .section_by_name(rivet_emit::bat::SECTION)
        .ok_or_else(|| {
            UserError::new(format!(
                "{} has no {} section",
                args.output.display(),
                rivet_emit::bat::SECTION
            ))
            .hint("verify needs an output written by `rivet rewrite` or `rivet optimize`")
        })?;
    let pairs = rivet_emit::bat::decode(bat.data)
        .map_err(|e| UserError::new(format!("{}: {e}", args.output.display())))?;
    let program = discover(&input, &DiscoverOptions::default()).map_err(|e| match e {
        DiscoverError::Elf(e) => elf_error(&args.input, &e),
    })?;
    let mut map = AddressMap::from_blocks(&program, &pairs, &out).ok_or_else(|| {
        UserError::new(format!(
            "{} does not describe {}",
            args.output.display(),
            args.input.display()
        ))
        .hint("give the binary the output was made from")
    })?;
    let folds = read_folds(&out, &program).map_err(|e| {
        UserError::new(format!("{}: {e}", args.output.display()))
            .hint("give the binary the output was made from")
    })?;
    map.fold(&program, &folds);
    let report = check(&input, &program, &out, &map, &folds).map_err(|e| {
        UserError::new(format!(
            "{} failed verification: {e}",
            args.output.display()
        ))
        .hint("the file is not what Rivet wrote for this input (modified, corrupted, or made from another binary)")
    })?;
    // Only outputs of `--peepholes` / `--simplify-conditional-tail-calls` have such ends.
    let changed = if report.peepholes > 0 {
        format!(
            ", {} branches changed by peepholes checked against the input's",
            report.peepholes
        )
    } else {
        String::new()
    };
    let changed = if report.promoted_calls > 0 {
        format!(
            "{changed}, {} promoted indirect calls checked against the input's",
            report.promoted_calls
        )
    } else {
        changed
    };
    let changed = if report.tail_copies > 0 {
        format!(
            "{changed}, {} duplicated tails checked against their originals",
            report.tail_copies
        )
    } else {
        changed
    };
    println!(
        "{}: ok ({} functions, {} blocks, {} instructions, {} references, {} source lines checked{changed})",
        args.output.display(),
        report.functions,
        report.blocks,
        report.instructions,
        report.references,
        report.lines
    );
    Ok(())
}

/// The functions `--icf` folded, from the output's `.rivet.icf` (none without that section).
fn read_folds(
    out: &ElfFile<'_>,
    program: &rivet_ir::Program,
) -> Result<Vec<(rivet_ir::FuncId, rivet_ir::FuncId)>, String> {
    let Some(section) = out.section_by_name(rivet_emit::bat::FOLDS_SECTION) else {
        return Ok(Vec::new());
    };
    let pairs = rivet_emit::bat::decode(section.data).map_err(|e| e.to_string())?;
    let entry = |a: rivet_elf::Vaddr| {
        program
            .function_containing(a)
            .filter(|f| f.range.start == a)
            .map(|f| f.id)
            .ok_or_else(|| {
                format!(
                    "{} names no function entry at {a}",
                    rivet_emit::bat::FOLDS_SECTION
                )
            })
    };
    pairs
        .into_iter()
        .map(|(f, k)| Ok((entry(f)?, entry(k)?)))
        .collect()
}
