//! The sections a rewrite adds to the output and the input sections it supersedes: the new
//! unwind and exception tables, symbol table, debug info and `.note.rivet` (phases 5 and 6
//! of `rewrite`), the input's stale copies renamed out of the way, and the salt of the new
//! build-id.
//!
//! New sections are numbered after the input's, in the order they are added; that order is
//! part of the output, so callers add them in a fixed order.

use rivet_elf::writer::{NewSection, SectionLink};
use rivet_elf::{ElfFile, Vaddr};
use rivet_ir::layout::Layout;

use crate::debug;
use crate::frames;
use crate::rewrite::{
    Instrumentation, LayoutSource, NT_RIVET_INPUT_BUILD_ID, ORIGINAL_PREFIX, RIVET_NOTE,
    RewriteOptions, Summary,
};
use crate::symbols;

/// The sections the output adds, in order, with the section index each gets.
pub(crate) struct NewSections {
    /// Sections of the input: the new ones are numbered after them.
    old_count: u32,
    pub(crate) list: Vec<NewSection>,
}

impl NewSections {
    pub(crate) fn after(elf: &ElfFile<'_>) -> NewSections {
        NewSections {
            old_count: elf.sections().len() as u32,
            list: Vec::new(),
        }
    }

    /// Adds `section`; returns its index in the output.
    pub(crate) fn add(&mut self, section: NewSection) -> u16 {
        self.list.push(section);
        (self.old_count + self.list.len() as u32 - 1) as u16
    }
}

/// Phase 5: the new `.gcc_except_table`, `.eh_frame` and `.eh_frame_hdr`; returns where the
/// header lies and its size (for PT_GNU_EH_FRAME).
pub(crate) fn add_unwind_sections(
    t: frames::UnwindTables,
    sections: &mut NewSections,
    summary: &mut Summary,
) -> (Vaddr, u64) {
    summary.frames = t.frames;
    summary.lsdas = t.lsdas;
    let alloc = object::elf::SHF_ALLOC.0;
    let progbits = object::elf::SHT_PROGBITS.0;
    let (lsda_addr, lsda_bytes) = t.gcc_except_table;
    if !lsda_bytes.is_empty() {
        sections.add(NewSection::new(
            ".gcc_except_table",
            progbits,
            alloc,
            lsda_addr,
            lsda_bytes,
            4,
        ));
    }
    let (eh_addr, eh_bytes) = t.eh_frame;
    sections.add(NewSection::new(
        ".eh_frame",
        progbits,
        alloc,
        eh_addr,
        eh_bytes,
        8,
    ));
    let (hdr_addr, hdr_bytes) = t.eh_frame_hdr;
    let eh_frame_hdr = (hdr_addr, hdr_bytes.len() as u64);
    sections.add(NewSection::new(
        ".eh_frame_hdr",
        progbits,
        alloc,
        hdr_addr,
        hdr_bytes,
        4,
    ));
    eh_frame_hdr
}

/// Phase 6a: the new `.symtab` and its `.strtab`.
pub(crate) fn add_symbol_table(table: symbols::SymbolTable, sections: &mut NewSections) {
    let strtab_position = sections.list.len() as u32 + 1;
    sections.add(NewSection {
        entsize: 24,
        link: SectionLink::New(strtab_position),
        info: table.first_global,
        ..NewSection::new(
            ".symtab",
            object::elf::SHT_SYMTAB.0,
            0,
            Vaddr(0),
            table.symtab,
            8,
        )
    });
    sections.add(NewSection::new(
        ".strtab",
        object::elf::SHT_STRTAB.0,
        0,
        Vaddr(0),
        table.strtab,
        1,
    ));
}

/// Phase 6b: debug info for the new addresses, or none (with a warning).
pub(crate) fn add_debug_sections(
    debug_sections: Result<Option<debug::DebugSections>, debug::DebugError>,
    sections: &mut NewSections,
    summary: &mut Summary,
) {
    match debug_sections {
        Ok(Some(d)) => {
            summary.debug_units = d.units;
            summary.debug_moved_rows = d.moved_rows;
            summary.debug_writer = Some(d.writer);
            summary.debug_fallback = d.fallback;
            for (name, bytes) in d.sections {
                sections.add(NewSection::new(
                    name,
                    object::elf::SHT_PROGBITS.0,
                    0,
                    Vaddr(0),
                    bytes,
                    1,
                ));
            }
        }
        Ok(None) => {}
        Err(e) => summary.warnings.push(format!(
            "debug info removed (renamed to {ORIGINAL_PREFIX}.debug_*): {e}"
        )),
    }
}

/// Phase 6c: the note recording the input's build-id.
pub(crate) fn rivet_note(input_id: &[u8]) -> NewSection {
    let mut note = Vec::new();
    note.extend_from_slice(&6u32.to_le_bytes()); // "Rivet\0"
    note.extend_from_slice(&(input_id.len() as u32).to_le_bytes());
    note.extend_from_slice(&NT_RIVET_INPUT_BUILD_ID.to_le_bytes());
    note.extend_from_slice(b"Rivet\0\0\0");
    note.extend_from_slice(input_id);
    note.resize(note.len().div_ceil(4) * 4, 0);
    NewSection::new(RIVET_NOTE, object::elf::SHT_NOTE.0, 0, Vaddr(0), note, 4)
}

/// Phase 6d: input sections the output supersedes: renamed, and tables re-typed so no tool
/// reads them as live.
pub(crate) struct Superseded {
    pub(crate) renames: Vec<(u32, String)>,
    pub(crate) drop_contents: Vec<u32>,
    pub(crate) retype: Vec<u32>,
}

impl Superseded {
    pub(crate) fn find(
        elf: &ElfFile<'_>,
        new_sections: &[NewSection],
        has_tables: bool,
        in_place: bool,
        hot_index: Option<u16>,
    ) -> Superseded {
        let mut out = Superseded {
            renames: Vec::new(),
            drop_contents: Vec::new(),
            retype: Vec::new(),
        };
        // The symbol table superseded is the one `symbols::build` read (the first SHT_SYMTAB
        // and the string table it links), whatever their names: a renamed one left live would
        // keep its link index, which points elsewhere once sections are added.
        let has_new_symtab = new_sections.iter().any(|s| s.name == ".symtab");
        let old_symbol_tables: Vec<u32> = elf
            .sections()
            .iter()
            .find(|s| s.sh_type == object::elf::SHT_SYMTAB.0)
            .map(|s| {
                let mut v = vec![s.index as u32];
                // Its strings, unless a corrupt link names a loaded section (`.dynstr`).
                if elf.section(s.link as usize).is_some_and(|l| !l.is_alloc()) {
                    v.push(s.link);
                }
                v
            })
            .unwrap_or_default();
        for s in elf.sections() {
            let i = s.index as u32;
            let name = s.name.as_ref();
            let is_old_symbol_table = has_new_symtab && old_symbol_tables.contains(&i);
            let replaced = match name {
                _ if is_old_symbol_table => true,
                ".eh_frame" | ".eh_frame_hdr" | ".gcc_except_table" => has_tables,
                ".text" => !in_place && hot_index.is_some(),
                // Regenerated, or dropped because nothing regenerates them (.debug_frame,
                // .debug_macro, name indexes): either way the input's copy is stale.
                ".gdb_index" => true,
                _ => name.starts_with(".debug"),
            };
            let stale_relocations = s.sh_type == object::elf::SHT_RELA.0 && !s.is_alloc();
            if replaced || stale_relocations {
                out.renames.push((i, format!("{ORIGINAL_PREFIX}{name}")));
                // Non-allocated contents the output replaces or makes stale are left out (the
                // header stays, renamed, so section indices hold); allocated ones hold code.
                if !s.is_alloc() {
                    out.drop_contents.push(i);
                }
            }
            if stale_relocations || is_old_symbol_table {
                out.retype.push(i);
            }
        }
        out
    }
}

/// What the output's new build-id is derived from besides its bytes: the input's build-id
/// and everything that chose the layout, so that two different outputs of one input never
/// share a build-id.
pub(crate) fn build_id_salt(
    input_id: &[u8],
    options: &RewriteOptions<'_>,
    layout: &Layout,
    instrumentation: Option<&Instrumentation<'_>>,
) -> Vec<u8> {
    let mut salt = input_id.to_vec();
    salt.extend_from_slice(format!("{:?}", options.layout).as_bytes());
    if let LayoutSource::Custom { .. } = options.layout {
        // Two profiles give two layouts: the build-id must tell their outputs apart.
        salt.extend_from_slice(format!("{:?}{:?}", layout.hot_order, layout.cold_order).as_bytes());
        for fl in layout.functions.iter().flatten() {
            salt.extend_from_slice(format!("{:?}", fl.fragments).as_bytes());
        }
        // Folding changes the output (forwarding jumps, redirected calls) even where it
        // leaves every fragment as it was. Nothing is added without it.
        if !layout.folded.is_empty() {
            salt.extend_from_slice(format!("folded{:?}", layout.folded).as_bytes());
        }
    }
    salt.extend_from_slice(format!("{:?}", options.alignment).as_bytes());
    if instrumentation.is_some() {
        salt.extend_from_slice(b"instrumented");
    }
    salt
}
