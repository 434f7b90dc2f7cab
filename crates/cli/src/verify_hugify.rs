//! Verification of what `--hugify` adds: the start-up hook and the hot range it maps, read
//! back from the output's bytes rather than trusted from the generator.
//!
//! The output's entry point (an executable) or `DT_INIT` (a shared library) must be a hook in
//! `.rivet.hugify` that saves the flags and rax..r11, calls into the same section, restores
//! them in reverse order and jumps to where the program would have started without it (the
//! input's entry or `DT_INIT`, translated). The range in the section's descriptor must be
//! aligned to huge pages at both ends, hold the whole hot text (`__hot_start`..`__hot_end` and
//! the new `.text`) and nothing but it and fill, lie inside one readable and executable PT_LOAD
//! whose `p_align` keeps it aligned when the loader picks the base, and not contain the
//! start-up code itself (which would move the code it runs from).

use rivet_arch::Flow;
use rivet_elf::{ElfFile, ElfKind, Vaddr};
use rivet_emit::hugify::{DESCRIPTOR_SIZE, HUGE_PAGE, SECTION, dt_init};
use rivet_runtime::hugify::{DESCRIPTOR_MAGIC, SAVED_REGISTERS};

/// Checks the hugify hook of `out` when it has one, given where the program must go after it
/// (`translate`: the input's address to the output's). Returns whether the output has the
/// hook (then the caller must not expect the entry point to be the translated one).
pub fn check(
    input: &ElfFile<'_>,
    out: &ElfFile<'_>,
    kind: ElfKind,
    isa: rivet_arch::Isa,
    translate: &dyn Fn(Vaddr) -> Vaddr,
) -> Result<bool, String> {
    let Some(section) = out.section_by_name(SECTION) else {
        return Ok(false);
    };
    let at = section.addr;
    let word = |i: u64| {
        out.read_u64(at + i * 8)
            .ok_or_else(|| format!("{SECTION} is too short for its descriptor"))
    };
    if word(0)? != DESCRIPTOR_MAGIC {
        return Err(format!("{SECTION} does not start with its descriptor"));
    }
    let start = Vaddr(at.get().wrapping_add(word(1)?));
    let end = Vaddr(at.get().wrapping_add(word(2)?));
    if !start.get().is_multiple_of(HUGE_PAGE)
        || !end.get().is_multiple_of(HUGE_PAGE)
        || start >= end
    {
        return Err(format!(
            "the huge-page range {start}..{end} is not a nonempty range of whole 2 MiB pages"
        ));
    }
    let section_end = at + section.size;
    if at < end && section_end > start {
        return Err(format!(
            "the start-up code at {at} lies inside the range {start}..{end} it remaps"
        ));
    }
    // One readable, executable PT_LOAD holds the range, file-backed and aligned.
    let holder = out.segments().iter().find(|s| {
        s.is_load() && s.vaddr <= start && s.vaddr.get().saturating_add(s.filesz) >= end.get()
    });
    match holder {
        None => {
            return Err(format!(
                "no PT_LOAD holds the huge-page range {start}..{end} in the file"
            ));
        }
        Some(s) if s.flags & 5 != 5 => {
            return Err(format!(
                "the PT_LOAD holding the huge-page range at {} is not readable and executable",
                s.vaddr
            ));
        }
        Some(s) if s.align < HUGE_PAGE => {
            return Err(format!(
                "the PT_LOAD holding the huge-page range has p_align {:#x}: a loader may place it off 2 MiB",
                s.align
            ));
        }
        Some(_) => {}
    }
    if !out.segments().iter().any(|s| {
        s.is_load() && s.vaddr <= at && s.vaddr.get().saturating_add(s.memsz) >= section_end.get()
    }) {
        return Err(format!("{SECTION} is not loaded"));
    }
    // Only hot text in the range, and all of it.
    for s in out.sections().iter().filter(|s| s.is_alloc()) {
        let overlaps = s.addr < end && s.addr + s.size > start && s.size > 0;
        if overlaps && !(s.name == ".text" && s.is_exec()) {
            return Err(format!(
                "{} ({}..{}) lies in the huge-page range {start}..{end}",
                s.name,
                s.addr,
                s.addr + s.size
            ));
        }
        if overlaps && (s.addr < start || s.addr + s.size > end) {
            return Err(format!(
                "the hot text {}..{} is not all inside the huge-page range {start}..{end}",
                s.addr,
                s.addr + s.size
            ));
        }
    }
    let symbols = out.symbols().map_err(|e| e.to_string())?;
    for name in [rivet_emit::rewrite::HOT_START, rivet_emit::rewrite::HOT_END] {
        let Some(sym) = symbols.iter().find(|s| s.name == name) else {
            return Err(format!("the output has no {name} symbol"));
        };
        if sym.value < start || sym.value > end {
            return Err(format!(
                "{name} ({}) is outside the huge-page range {start}..{end}",
                sym.value
            ));
        }
    }
    // The hook, where the program starts.
    let (hook, want) = if kind == ElfKind::SharedLibrary {
        let input_init = dt_init(input).ok_or("the output hooks DT_INIT but the input has none")?;
        let hook = dt_init(out).ok_or("the output has no DT_INIT")?;
        (hook, translate(input_init))
    } else {
        (out.entry, translate(input.entry))
    };
    if hook < at + DESCRIPTOR_SIZE || hook >= section_end {
        return Err(format!(
            "the program starts at {hook}, not in the hook code of {SECTION} ({at}..{section_end})"
        ));
    }
    let bytes = out
        .bytes_at(hook, section_end - hook)
        .ok_or("cannot read the hook")?;
    let insts = isa.decode_all(bytes, hook);
    // AT&T text with its column padding collapsed: `pushf`, `push %rax`, ...
    let asm: Vec<String> = insts
        .iter()
        .take(22)
        .map(|i| i.to_asm().split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let mut want_asm = vec!["pushf".to_string()];
    want_asm.extend(SAVED_REGISTERS.iter().map(|r| format!("push %{r}")));
    let saved = want_asm.len();
    if asm.len() < 22 || asm[..saved] != want_asm[..] {
        return Err(format!(
            "the hook at {hook} does not save the flags and {} first: {}",
            SAVED_REGISTERS.join(", "),
            asm.join("; ")
        ));
    }
    match insts[saved].flow() {
        Flow::Call { target } if target >= at + DESCRIPTOR_SIZE && target < section_end => {}
        _ => {
            return Err(format!(
                "the hook at {hook} does not call into {SECTION}: {}",
                asm[saved]
            ));
        }
    }
    let mut restore: Vec<String> = SAVED_REGISTERS
        .iter()
        .rev()
        .map(|r| format!("pop %{r}"))
        .collect();
    restore.push("popf".into());
    if asm[saved + 1..saved + 1 + restore.len()] != restore[..] {
        return Err(format!(
            "the hook at {hook} does not restore what it saved, in reverse order: {}",
            asm.join("; ")
        ));
    }
    match insts[21].flow() {
        Flow::Jump { target } if target == want => Ok(true),
        _ => Err(format!(
            "the hook at {hook} ends with `{}`, not a jump to {want} where the program starts",
            asm[21]
        )),
    }
}
