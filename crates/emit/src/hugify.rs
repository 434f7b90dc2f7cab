//! `--hugify`: the start-up code that maps the hot text on transparent huge pages, placed
//! after the new text and hooked where the instrumentation runtime would be (the entry point
//! of an executable, `DT_INIT` of a shared library).
//!
//! The hot range is the new hot text widened to huge-page boundaries: `place_fragments` starts
//! the hot text on one (`TextAlignment::hot_text` is `HUGE_PAGE`) and starts the cold text on
//! the next one after it, so the range holds hot code and fill only, and the code generated
//! here, after the cold text, lies outside it and within the same segment, which therefore
//! covers the whole range. The segment gets a 2 MiB `p_align` so that the loader of a PIE or
//! a shared library picks a base that keeps the range aligned at run time.
//!
//! What cannot be hugified (no hot text, a shared library without `DT_INIT`) is reported as a
//! warning and the output is written without the hook.

use rivet_elf::{ElfFile, ElfKind, Vaddr};
pub use rivet_runtime::hugify::{DESCRIPTOR_SIZE, HUGE_PAGE};

use crate::rewrite::RewriteError;

/// Name of the output section holding the generated code.
pub const SECTION: &str = ".rivet.hugify";

/// The generated start-up code, where it goes, and the hot range it maps.
#[derive(Debug)]
pub struct Hugify {
    pub at: Vaddr,
    pub code: rivet_runtime::hugify::HugifyCode,
    pub range: (Vaddr, Vaddr),
}

/// The value of `DT_INIT` in the input, if it has one.
pub fn dt_init(elf: &ElfFile<'_>) -> Option<Vaddr> {
    let dynamic = elf.section_by_name(".dynamic")?;
    dynamic.data.chunks_exact(16).find_map(|e| {
        let tag = i64::from_le_bytes(e[..8].try_into().ok()?);
        let value = u64::from_le_bytes(e[8..].try_into().ok()?);
        // DT_INIT = 12; the array ends at DT_NULL.
        (tag == 12).then_some(Vaddr(value))
    })
}

/// Builds the code at `at` for the hot text `[hot_start, hot_end)`; `translate` gives the
/// output address of the input's entry point or `DT_INIT`. `Ok(None)` with a warning pushed
/// when there is nothing to do or no way to hook.
pub fn build(
    elf: &ElfFile<'_>,
    isa: rivet_arch::Isa,
    kind: ElfKind,
    hot: (Vaddr, Vaddr),
    at: Vaddr,
    translate: &dyn Fn(Vaddr) -> Vaddr,
    warnings: &mut Vec<String>,
) -> Result<Option<Hugify>, RewriteError> {
    let (hot_start, hot_end) = hot;
    // The generator writes x86-64 code; another ISA gets no hook rather than a wrong one.
    if isa != rivet_arch::Isa::X86_64 {
        warnings.push(format!(
            "--hugify: no start-up code for {isa:?} yet; the hot text is aligned but stays on ordinary pages"
        ));
        return Ok(None);
    }
    if hot_end <= hot_start {
        warnings.push(
            "--hugify: no hot text was moved, so there is nothing to map on huge pages (relocation mode and a profile that reaches some function are needed)".into(),
        );
        return Ok(None);
    }
    let range = (
        Vaddr(hot_start.get() / HUGE_PAGE * HUGE_PAGE),
        Vaddr(hot_end.get().div_ceil(HUGE_PAGE) * HUGE_PAGE),
    );
    if at < range.1 {
        return Err(RewriteError::Hugify(format!(
            "the start-up code at {at} would lie inside the hot range {}..{}",
            range.0, range.1
        )));
    }
    let (entry, init) = if kind == ElfKind::SharedLibrary {
        match dt_init(elf) {
            Some(init) => (None, Some(translate(init))),
            None => {
                warnings.push(
                    "--hugify: the shared library has no DT_INIT to run the start-up code from; the hot text stays on ordinary pages".into(),
                );
                return Ok(None);
            }
        }
    } else {
        (Some(translate(elf.entry)), None)
    };
    let code = rivet_runtime::hugify::generate(&rivet_runtime::hugify::HugifyParams {
        at,
        hot_start: range.0,
        hot_end: range.1,
        entry,
        init,
    })
    .map_err(|e| RewriteError::Hugify(e.to_string()))?;
    Ok(Some(Hugify { at, code, range }))
}
