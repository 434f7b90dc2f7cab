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

#[cfg(test)]
mod tests {
    use super::*;
    use rivet_arch::Isa;

    /// Debian's /bin/true: an executable with an entry point (the writer's tests use it too).
    fn input() -> Vec<u8> {
        std::fs::read("/bin/true").expect("/bin/true exists")
    }

    #[test]
    fn no_hot_text_means_no_hook_and_a_warning() {
        let data = input();
        let elf = ElfFile::parse(&data).unwrap();
        let mut warnings = Vec::new();
        let hot = (Vaddr(0x40_0000), Vaddr(0x40_0000));
        let built = build(
            &elf,
            Isa::X86_64,
            ElfKind::Executable,
            hot,
            Vaddr(0x60_0000),
            &|v| v,
            &mut warnings,
        )
        .unwrap();
        assert!(built.is_none());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("no hot text"), "{warnings:?}");
    }

    #[test]
    fn start_up_code_inside_the_range_it_moves_is_refused() {
        let data = input();
        let elf = ElfFile::parse(&data).unwrap();
        let hot = (Vaddr(0x40_0000), Vaddr(0x40_1000));
        let err = build(
            &elf,
            Isa::X86_64,
            ElfKind::Executable,
            hot,
            Vaddr(0x50_0000),
            &|v| v,
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("inside the hot range"), "{err}");
    }

    #[test]
    fn the_range_widens_to_whole_huge_pages_and_the_hook_leads_to_the_translated_entry() {
        let data = input();
        let elf = ElfFile::parse(&data).unwrap();
        let hot = (Vaddr(0x40_0040), Vaddr(0x41_0000));
        let moved = Vaddr(0x40_0100);
        let h = build(
            &elf,
            Isa::X86_64,
            ElfKind::Executable,
            hot,
            Vaddr(0x60_0000),
            &|_| moved,
            &mut Vec::new(),
        )
        .unwrap()
        .expect("a hook");
        assert_eq!(h.range, (Vaddr(0x40_0000), Vaddr(0x60_0000)));
        assert_eq!(h.code.entry_stub, Some(Vaddr(0x60_0000 + DESCRIPTOR_SIZE)));
        assert_eq!(h.code.init_stub, None);
        // The hook's last instruction, a jmp rel32, lands on the translated entry.
        let jmp_end = (DESCRIPTOR_SIZE + 33 + 5) as usize;
        assert_eq!(h.code.bytes[jmp_end - 5], 0xe9);
        let rel = i32::from_le_bytes(h.code.bytes[jmp_end - 4..jmp_end].try_into().unwrap());
        assert_eq!(
            0x60_0000 + jmp_end as i64 + i64::from(rel),
            moved.get() as i64
        );
    }

    #[test]
    fn a_shared_library_is_hooked_on_dt_init_not_on_its_entry() {
        // Taken as a library, /bin/true (which has a DT_INIT) gets an init hook only.
        let data = input();
        let elf = ElfFile::parse(&data).unwrap();
        let init = dt_init(&elf).expect("Debian's /bin/true has a DT_INIT");
        let hot = (Vaddr(0x40_0000), Vaddr(0x40_1000));
        let h = build(
            &elf,
            Isa::X86_64,
            ElfKind::SharedLibrary,
            hot,
            Vaddr(0x60_0000),
            &|v| v,
            &mut Vec::new(),
        )
        .unwrap()
        .expect("a hook");
        assert_eq!(h.code.entry_stub, None);
        assert_eq!(h.code.init_stub, Some(Vaddr(0x60_0000 + DESCRIPTOR_SIZE)));
        let jmp_end = (DESCRIPTOR_SIZE + 33 + 5) as usize;
        let rel = i32::from_le_bytes(h.code.bytes[jmp_end - 4..jmp_end].try_into().unwrap());
        assert_eq!(
            0x60_0000 + jmp_end as i64 + i64::from(rel),
            init.get() as i64
        );
    }

    #[test]
    fn another_isa_gets_no_hook_and_a_warning() {
        // The generator writes x86-64 code only; an AArch64 output must not receive it.
        let data = input();
        let elf = ElfFile::parse(&data).unwrap();
        let mut warnings = Vec::new();
        let hot = (Vaddr(0x40_0000), Vaddr(0x40_1000));
        let built = build(
            &elf,
            Isa::Aarch64,
            ElfKind::Executable,
            hot,
            Vaddr(0x60_0000),
            &|v| v,
            &mut warnings,
        )
        .unwrap();
        assert!(built.is_none());
        assert!(warnings[0].contains("no start-up code for"), "{warnings:?}");
    }
}
