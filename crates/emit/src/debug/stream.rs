//! DWARF rewritten as a stream: each unit's DIEs are copied byte for byte, and only what
//! names code is re-encoded.
//!
//! Almost everything in `.debug_info` (types, names, declarations, plain location
//! expressions) is independent of where code sits, so decoding all of it into an object
//! model and encoding it again, as a general converter does, costs memory and time for
//! nothing: SQLite's amalgamation is one unit of two megabytes, and its decoded form took
//! over a hundred megabytes. Here each DIE is read with gimli's raw entry reader and written
//! straight to the new section:
//!
//! - attributes that do not depend on code addresses are copied as bytes, with their form;
//! - addresses are translated (`DW_FORM_addr`), ranges and location lists are written anew
//!   with absolute addresses, line programs keep their header bytes (so file indices,
//!   `.debug_str`, `.debug_line_str` and `.debug_str_offsets` stay valid as copies) and get
//!   new row programs;
//! - a DIE whose attributes change gets a new abbreviation (each unit gets its own table);
//!   DIEs change size, so every DIE reference (reference forms, `DW_AT_sibling`, type unit
//!   offsets, and DIE offsets inside expressions) is written as a fixup and resolved once
//!   every DIE's new offset is known. Expressions keep their length: an operand is patched
//!   in place, a ULEB128 DIE offset padded to its old width (when the new offset does not
//!   fit, the rewrite fails and the caller falls back to the general converter).
//!
//! What this writer does not model (DWARF 64, `.debug_types`, split DWARF, line tables
//! with a minimum instruction length other than one) is reported as unsupported, and the
//! caller converts the unit with gimli's converter instead.

use std::collections::HashMap;

use gimli::{AttributeValue, EndianSlice, LittleEndian, Operation, UnitType, constants};
use rivet_elf::ElfFile;
use rivet_elf::lines;

use super::{
    CodeMoves, DebugError, DebugSections, LineSink, UnitScopes, address_ranges,
    convert_line_program, copyable, dropped,
};
use crate::leb;

type Reader<'a> = EndianSlice<'a, LittleEndian>;

fn unsupported(what: impl Into<String>) -> DebugError {
    DebugError::Unsupported(what.into())
}

/// The output buffer a fixup patches.
#[derive(Clone, Copy, Debug)]
enum Buffer {
    Info,
    LocLists,
    Loc,
}

/// How a DIE offset is encoded where it is referred to.
#[derive(Clone, Copy, Debug)]
enum Width {
    Fixed(usize),
    /// A ULEB128 padded to exactly this many bytes.
    Uleb(usize),
}

/// A DIE reference written before the DIE's new offset is known.
#[derive(Debug)]
struct Fixup {
    buffer: Buffer,
    at: usize,
    width: Width,
    /// The new offset of the unit, for unit-relative references.
    unit_base: Option<u64>,
    /// The input's `.debug_info` offset of the DIE referred to.
    target: u64,
}

/// Everything written so far.
#[derive(Default)]
struct Output {
    info: Vec<u8>,
    abbrev: Vec<u8>,
    line: Vec<u8>,
    loclists: Vec<u8>,
    loc: Vec<u8>,
    rnglists: Vec<u8>,
    ranges: Vec<u8>,
    fixups: Vec<Fixup>,
    /// (input offset, output offset) in `.debug_info` of every DIE, in input order (which is
    /// also output order, so both columns ascend). 32-bit DWARF (the only format read)
    /// bounds both; one entry per DIE, two million of them for PostgreSQL's server.
    dies: Vec<(u32, u32)>,
    /// Input `.debug_line` offset -> output offset of each line program written.
    line_programs: HashMap<u64, u64>,
    /// (output unit offset, the unit's ranges) for `.debug_aranges`.
    unit_ranges: Vec<(u64, Vec<(u64, u64)>)>,
    moved_rows: usize,
}

impl Output {
    fn buffer(&mut self, b: Buffer) -> &mut Vec<u8> {
        match b {
            Buffer::Info => &mut self.info,
            Buffer::LocLists => &mut self.loclists,
            Buffer::Loc => &mut self.loc,
        }
    }

    /// Writes the recorded DIE references to DIEs of the input's `.debug_info` below `limit`,
    /// whose new offsets are all known once the units up to there are written; the others
    /// (references to later units) stay recorded. Resolving after each unit keeps the list as
    /// short as one unit's references: with PostgreSQL's 89 MB server the list of all of them
    /// had grown to 117 MB (room for 2 million), the largest allocation of its rewrite.
    fn resolve_fixups_below(&mut self, limit: u64) -> Result<(), DebugError> {
        let (ready, pending): (Vec<Fixup>, Vec<Fixup>) = std::mem::take(&mut self.fixups)
            .into_iter()
            .partition(|f| f.target < limit);
        self.fixups = pending;
        for f in &ready {
            let k = self
                .dies
                .binary_search_by_key(&f.target, |d| u64::from(d.0))
                .map_err(|_| unsupported(format!("a reference to 0x{:x}, not a DIE", f.target)))?;
            let new = u64::from(self.dies[k].1);
            let value = match f.unit_base {
                Some(base) => new
                    .checked_sub(base)
                    .ok_or_else(|| unsupported("a unit-relative reference into another unit"))?,
                None => new,
            };
            let out = &mut self.buffer(f.buffer)[f.at..];
            match f.width {
                Width::Fixed(n) if n > 8 => {
                    return Err(unsupported(format!("a {n}-byte DIE reference")));
                }
                Width::Fixed(n) => {
                    if n < 8 && value >> (8 * n) != 0 {
                        return Err(unsupported(format!("a DIE offset too large for {n} bytes")));
                    }
                    out[..n].copy_from_slice(&value.to_le_bytes()[..n]);
                }
                Width::Uleb(n) => {
                    let mut bytes = Vec::with_capacity(n);
                    leb::uleb128_padded(&mut bytes, value, n);
                    if bytes.len() != n {
                        return Err(unsupported(format!(
                            "a DIE offset in an expression that no longer fits its {n}-byte operand"
                        )));
                    }
                    out[..n].copy_from_slice(&bytes);
                }
            }
        }
        Ok(())
    }
}

/// The bytes of an unsigned little-endian value of `n` bytes, or `None` when it does not fit.
fn fixed(value: u64, n: usize) -> Option<Vec<u8>> {
    (n >= 8 || value >> (8 * n) == 0).then(|| value.to_le_bytes()[..n.min(8)].to_vec())
}

/// One unit's table of location or range lists (DWARF 5: a contribution with a header and
/// an offset table; earlier versions: lists appended to `.debug_loc` / `.debug_ranges`).
#[derive(Default)]
struct ListTable {
    /// Offset of this unit's contribution header in its section, once started (DWARF 5).
    start: Option<usize>,
    /// Number of offset-table slots (the input's `offset_entry_count`).
    slots: usize,
    /// Per slot: the list written for it, relative to the table's base.
    filled: Vec<Option<u32>>,
}

const LIST_HEADER: usize = 12;

impl ListTable {
    /// Starts the contribution (DWARF 5) with `slots` offset-table entries.
    fn begin(&mut self, buf: &mut Vec<u8>, slots: usize) {
        if self.start.is_some() {
            return;
        }
        self.start = Some(buf.len());
        self.slots = slots;
        self.filled = vec![None; slots];
        // Length (patched in `finish`), version 5, address size 8, no segment selector,
        // offset_entry_count, then the offsets.
        buf.extend_from_slice(&[0, 0, 0, 0, 5, 0, 8, 0]);
        buf.extend_from_slice(&(slots as u32).to_le_bytes());
        buf.resize(buf.len() + 4 * slots, 0);
    }

    fn base(&self) -> Option<u64> {
        self.start.map(|s| (s + LIST_HEADER) as u64)
    }

    /// Patches the length, and points slots no DIE used at an empty list.
    fn finish(&mut self, buf: &mut Vec<u8>, end_of_list: u8) {
        let Some(start) = self.start else { return };
        if self.filled.iter().any(Option::is_none) {
            let empty = (buf.len() - start - LIST_HEADER) as u32;
            buf.push(end_of_list);
            for (i, slot) in self.filled.iter().enumerate() {
                if slot.is_none() {
                    let at = start + LIST_HEADER + 4 * i;
                    buf[at..at + 4].copy_from_slice(&empty.to_le_bytes());
                }
            }
        }
        let length = (buf.len() - start - 4) as u32;
        buf[start..start + 4].copy_from_slice(&length.to_le_bytes());
    }
}

/// Reads the `offset_entry_count` of the input's list contribution whose offsets start at
/// `base`.
fn slot_count(section: &[u8], base: u64) -> Result<usize, DebugError> {
    let at = usize::try_from(base)
        .ok()
        .and_then(|b| b.checked_sub(4))
        .filter(|&a| a + 4 <= section.len() && a >= LIST_HEADER - 4)
        .ok_or_else(|| unsupported(format!("a list table base 0x{base:x} out of its section")))?;
    Ok(u32::from_le_bytes(section[at..at + 4].try_into().unwrap()) as usize)
}

/// Per-unit state.
struct UnitState<'a, 'd> {
    unit: gimli::UnitRef<'a, Reader<'d>>,
    version: u16,
    /// The input's `.debug_loclists` and `.debug_rnglists`, for their offset tables' sizes.
    loclists_input: &'d [u8],
    rnglists_input: &'d [u8],
    /// The unit's offset in the input's `.debug_info` and in the output's.
    old_start: u64,
    new_start: u64,
    abbrevs: HashMap<Vec<u8>, u64>,
    abbrev_table: Vec<u8>,
    loc: ListTable,
    rng: ListTable,
}

impl UnitState<'_, '_> {
    fn abbreviation(&mut self, body: &[u8]) -> u64 {
        if let Some(&code) = self.abbrevs.get(body) {
            return code;
        }
        let code = self.abbrevs.len() as u64 + 1;
        leb::uleb128(&mut self.abbrev_table, code);
        self.abbrev_table.extend_from_slice(body);
        // The end of the attribute list.
        self.abbrev_table.extend_from_slice(&[0, 0]);
        self.abbrevs.insert(body.to_vec(), code);
        code
    }
}

/// A DIE being written: its attributes' bytes and the specification of each.
#[derive(Default)]
struct DieOut {
    /// The abbreviation body: tag, children flag, (name, form[, implicit const]) pairs.
    abbrev: Vec<u8>,
    bytes: Vec<u8>,
    /// Fixups with positions relative to `bytes`.
    fixups: Vec<Fixup>,
}

impl DieOut {
    fn begin(&mut self, tag: constants::DwTag, children: bool) {
        self.abbrev.clear();
        self.bytes.clear();
        self.fixups.clear();
        leb::uleb128(&mut self.abbrev, u64::from(tag.0));
        self.abbrev.push(u8::from(children));
    }

    fn spec(&mut self, name: constants::DwAt, form: constants::DwForm, implicit: Option<i64>) {
        leb::uleb128(&mut self.abbrev, u64::from(name.0));
        leb::uleb128(&mut self.abbrev, u64::from(form.0));
        if let Some(v) = implicit {
            leb::sleb128(&mut self.abbrev, v);
        }
    }

    fn attr(&mut self, name: constants::DwAt, form: constants::DwForm, bytes: &[u8]) {
        self.spec(name, form, None);
        self.bytes.extend_from_slice(bytes);
    }
}

/// One attribute as read: its specification, value, and bytes in the input.
struct RawAttribute<'d> {
    spec: gimli::AttributeSpecification,
    attr: gimli::Attribute<Reader<'d>>,
    bytes: &'d [u8],
}

/// Rewrites the input's DWARF for the moved code.
pub(super) fn rewrite(
    elf: &ElfFile<'_>,
    dwarf: &gimli::Dwarf<Reader<'_>>,
    moves: &CodeMoves<'_>,
) -> Result<DebugSections, DebugError> {
    if elf
        .section_by_name(".debug_types")
        .is_some_and(|s| !s.data.is_empty())
    {
        return Err(unsupported("DWARF 4 type units (.debug_types)"));
    }
    let section = |name: &str| elf.section_by_name(name).map_or(&[][..], |s| s.data);
    let info = section(".debug_info");
    let mut out = Output::default();
    let mut units = 0;

    // Line programs first: a type unit may come before the compilation unit whose line
    // program it shares, and only a compilation unit knows the scopes the rows need.
    // Every unit, parsed once (header checks first: nothing is written for DWARF this
    // writer refuses).
    let mut units_read = Vec::new();
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        check_header(&header)?;
        units_read.push(dwarf.unit(header)?);
    }
    for unit in &units_read {
        if matches!(unit.header.type_(), UnitType::Type { .. }) {
            continue;
        }
        if let Some(program) = &unit.line_program {
            let old = program.header().offset().0 as u64;
            if !out.line_programs.contains_key(&old) {
                let new = out.line.len() as u64;
                let mut scopes = UnitScopes {
                    unit: unit.unit_ref(dwarf),
                    scopes: None,
                };
                out.moved_rows += write_line_program(
                    section(".debug_line"),
                    program,
                    moves,
                    &mut scopes,
                    &mut out.line,
                )?;
                out.line_programs.insert(old, new);
            }
        }
    }
    // The input is read front to back, once: what is done with need not stay resident
    // (`ElfFile::release_pages`; a large program's debug info is most of its file).
    // Type units' line programs are copied below, from pages read again.
    elf.release_pages(section(".debug_line"));

    let mut die = DieOut::default();
    let mut attrs: Vec<RawAttribute<'_>> = Vec::new();
    for unit in &units_read {
        units += 1;
        let header = &unit.header;
        let old_start = header.offset().0 as u64;
        let version = header.version();
        let unit_type = header.type_();
        let header_size = header.header_size();
        if unit.dwo_id.is_some() {
            return Err(unsupported("split DWARF (a .dwo unit)"));
        }
        // A line program only type units use: copied as it is (no rows of code).
        if let Some(program) = &unit.line_program {
            let old = program.header().offset().0 as u64;
            if !out.line_programs.contains_key(&old) {
                let new = out.line.len() as u64;
                copy_line_program(section(".debug_line"), old, &mut out.line)?;
                out.line_programs.insert(old, new);
            }
        }
        let new_start = out.info.len() as u64;
        let mut state = UnitState {
            unit: unit.unit_ref(dwarf),
            version,
            loclists_input: section(".debug_loclists"),
            rnglists_input: section(".debug_rnglists"),
            old_start,
            new_start,
            abbrevs: HashMap::new(),
            abbrev_table: Vec::new(),
            loc: ListTable::default(),
            rng: ListTable::default(),
        };

        // The header; the length and abbreviation offset are patched at the end.
        out.info.extend_from_slice(&[0; 4]);
        out.info.extend_from_slice(&version.to_le_bytes());
        let abbrev_at = match version {
            5.. => {
                let raw = info[old_start as usize + 6];
                out.info.extend_from_slice(&[raw, 8]);
                let at = out.info.len();
                out.info.extend_from_slice(&[0; 4]);
                if let UnitType::Type {
                    type_signature,
                    type_offset,
                } = unit_type
                {
                    out.info.extend_from_slice(&type_signature.0.to_le_bytes());
                    out.fixups.push(Fixup {
                        buffer: Buffer::Info,
                        at: out.info.len(),
                        width: Width::Fixed(4),
                        unit_base: Some(new_start),
                        target: old_start + type_offset.0 as u64,
                    });
                    out.info.extend_from_slice(&[0; 4]);
                } else if !matches!(unit_type, UnitType::Compilation | UnitType::Partial) {
                    return Err(unsupported(format!("unit type {unit_type:?}")));
                }
                at
            }
            _ => {
                let at = out.info.len();
                out.info.extend_from_slice(&[0, 0, 0, 0, 8]);
                at
            }
        };
        if out.info.len() - new_start as usize != header_size {
            return Err(unsupported(format!("a unit header of {header_size} bytes")));
        }

        let mut entries = unit.entries_raw(None)?;
        while !entries.is_empty() {
            let old_offset = old_start + entries.next_offset().0 as u64;
            let depth = entries.next_depth();
            let Some(abbrev) = entries.read_abbreviation()? else {
                out.info.push(0);
                continue;
            };
            attrs.clear();
            for spec in abbrev.attributes() {
                if spec.form() == constants::DW_FORM_indirect {
                    return Err(unsupported("DW_FORM_indirect"));
                }
                let from = old_start as usize + entries.next_offset().0;
                let attr = entries.read_attribute(*spec)?;
                let to = old_start as usize + entries.next_offset().0;
                attrs.push(RawAttribute {
                    spec: *spec,
                    attr,
                    bytes: &info[from..to],
                });
            }
            die.begin(abbrev.tag(), abbrev.has_children());
            let root_ranges =
                write_die(&mut state, &attrs, abbrev.tag(), moves, &mut out, &mut die)?;
            if depth == 0
                && let Some(ranges) = root_ranges
                && !ranges.is_empty()
            {
                out.unit_ranges.push((new_start, ranges));
            }
            let code = state.abbreviation(&die.abbrev);
            let offsets = u32::try_from(old_offset)
                .ok()
                .zip(u32::try_from(out.info.len()).ok());
            out.dies
                .push(offsets.ok_or_else(|| unsupported(".debug_info over 4 GiB"))?);
            leb::uleb128(&mut out.info, code);
            let base = out.info.len();
            out.info.extend_from_slice(&die.bytes);
            out.fixups.extend(die.fixups.drain(..).map(|f| Fixup {
                at: base + f.at,
                ..f
            }));
        }

        // The unit's abbreviation table, length and list tables.
        let abbrev_offset = out.abbrev.len() as u32;
        out.abbrev.extend_from_slice(&state.abbrev_table);
        out.abbrev.push(0);
        out.info[abbrev_at..abbrev_at + 4].copy_from_slice(&abbrev_offset.to_le_bytes());
        let length = (out.info.len() - new_start as usize - 4) as u32;
        let at = new_start as usize;
        out.info[at..at + 4].copy_from_slice(&length.to_le_bytes());
        state
            .loc
            .finish(&mut out.loclists, constants::DW_LLE_end_of_list.0);
        state
            .rng
            .finish(&mut out.rnglists, constants::DW_RLE_end_of_list.0);
        let old_end = old_start + header.length_including_self() as u64;
        out.resolve_fixups_below(old_end)?;
        if let Some(done) = info.get(old_start as usize..old_end as usize) {
            elf.release_pages(done);
        }
    }
    out.resolve_fixups_below(u64::MAX)?;

    let mut result = DebugSections {
        units,
        moved_rows: out.moved_rows,
        ..DebugSections::default()
    };
    let mut push = |name: &'static str, bytes: Vec<u8>| {
        if !bytes.is_empty() {
            result.sections.push((name, bytes));
        }
    };
    push(".debug_info", out.info);
    push(".debug_abbrev", out.abbrev);
    push(".debug_line", out.line);
    push(".debug_loclists", out.loclists);
    push(".debug_loc", out.loc);
    push(".debug_rnglists", out.rnglists);
    push(".debug_ranges", out.ranges);
    // Referred to by offset from what was copied: copied as they are.
    for name in [".debug_str", ".debug_line_str", ".debug_str_offsets"] {
        push(name, section(name).to_vec());
    }
    push(".debug_addr", address_table(section(".debug_addr"), moves)?);
    if elf.section_by_name(".debug_aranges").is_some() {
        push(".debug_aranges", address_ranges(&out.unit_ranges));
    }
    Ok(result)
}

fn check_header(header: &gimli::UnitHeader<Reader<'_>>) -> Result<(), DebugError> {
    if header.format() != gimli::Format::Dwarf32 {
        return Err(unsupported("64-bit DWARF"));
    }
    if header.address_size() != 8 {
        return Err(unsupported(format!(
            "{}-byte addresses in DWARF",
            header.address_size()
        )));
    }
    if !(2..=5).contains(&header.version()) {
        return Err(unsupported(format!("DWARF version {}", header.version())));
    }
    Ok(())
}

/// `.debug_addr` with its entries translated as points. Attributes of moved code that use
/// an entry are re-encoded with `DW_FORM_addr` and lists are rewritten, so what still reads
/// these entries is expressions (`DW_OP_addrx`: the address of a function as a value) and
/// code that did not move.
fn address_table(section: &[u8], moves: &CodeMoves<'_>) -> Result<Vec<u8>, DebugError> {
    let mut out = section.to_vec();
    let mut at = 0;
    while at + 8 <= out.len() {
        let length = u32::from_le_bytes(out[at..at + 4].try_into().unwrap()) as usize;
        if length == 0xffff_ffff {
            return Err(unsupported("64-bit DWARF in .debug_addr"));
        }
        let end = at + 4 + length;
        if length < 4 || end > out.len() || out[at + 6] != 8 || out[at + 7] != 0 {
            return Err(unsupported(format!(".debug_addr contribution at 0x{at:x}")));
        }
        for entry in out[at + 8..end].chunks_exact_mut(8) {
            let old = u64::from_le_bytes(entry[..].try_into().unwrap());
            if let Some(new) = moves.translate_point(old) {
                entry.copy_from_slice(&new.to_le_bytes());
            }
        }
        at = end;
    }
    Ok(out)
}

/// The input line program at `offset`: its header bytes and where its opcodes start.
fn line_program_header(section: &[u8], offset: u64) -> Result<(&[u8], usize), DebugError> {
    let bad = || unsupported(format!("line program at 0x{offset:x}"));
    let at = usize::try_from(offset).map_err(|_| bad())?;
    let read32 = |p: usize| -> Result<usize, DebugError> {
        let b = section.get(p..p + 4).ok_or_else(bad)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    let length = read32(at)?;
    if length >= 0xffff_fff0 {
        return Err(unsupported("64-bit DWARF line program"));
    }
    let end = at + 4 + length;
    let version = u16::from_le_bytes(
        section
            .get(at + 4..at + 6)
            .ok_or_else(bad)?
            .try_into()
            .unwrap(),
    );
    let header_length_at = at + 6 + if version >= 5 { 2 } else { 0 };
    let program_start = header_length_at + 4 + read32(header_length_at)?;
    if program_start > end || end > section.len() {
        return Err(bad());
    }
    Ok((&section[at..end], program_start - at))
}

fn copy_line_program(section: &[u8], offset: u64, out: &mut Vec<u8>) -> Result<(), DebugError> {
    let (bytes, _) = line_program_header(section, offset)?;
    out.extend_from_slice(bytes);
    Ok(())
}

/// Writes the line program of a unit: the input's header bytes, then rows for the new
/// layout. Returns the rows written for moved code.
fn write_line_program(
    section: &[u8],
    program: &gimli::IncompleteLineProgram<Reader<'_>>,
    moves: &CodeMoves<'_>,
    scopes: &mut UnitScopes<'_, '_>,
    out: &mut Vec<u8>,
) -> Result<usize, DebugError> {
    let header = program.header();
    if header.minimum_instruction_length() != 1 || header.maximum_operations_per_instruction() != 1
    {
        return Err(unsupported("a line program with VLIW or scaled addresses"));
    }
    let (bytes, program_start) = line_program_header(section, header.offset().0 as u64)?;
    let segments =
        lines::line_segments(program).map_err(|e| DebugError::Unsupported(e.to_string()))?;
    let start = out.len();
    out.extend_from_slice(&bytes[..program_start]);
    let mut sink = RawLineProgram {
        out,
        line_base: header.line_base(),
        line_range: header.line_range(),
        opcode_base: header.opcode_base(),
        default_is_stmt: header.default_is_stmt(),
        state: LineState::new(header.default_is_stmt()),
    };
    if sink.line_range == 0 {
        return Err(unsupported("a line program with line_range 0"));
    }
    let rows = convert_line_program(&segments, &mut sink, moves, scopes)?;
    let length = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&length.to_le_bytes());
    Ok(rows)
}

/// The line-number state machine's registers, as the encoder last left them.
struct LineState {
    address: u64,
    file: u32,
    line: u32,
    column: u32,
    isa: u32,
    is_stmt: bool,
}

impl LineState {
    fn new(default_is_stmt: bool) -> LineState {
        LineState {
            address: 0,
            file: 1,
            line: 1,
            column: 0,
            isa: 0,
            is_stmt: default_is_stmt,
        }
    }
}

/// A line program's opcodes, encoded straight into bytes with the input header's
/// parameters (special opcodes where a row fits one).
struct RawLineProgram<'o> {
    out: &'o mut Vec<u8>,
    line_base: i8,
    line_range: u8,
    opcode_base: u8,
    default_is_stmt: bool,
    state: LineState,
}

impl RawLineProgram<'_> {
    fn standard(&mut self, opcode: constants::DwLns) -> bool {
        // A program whose header predates an opcode cannot use it.
        if opcode.0 >= self.opcode_base {
            return false;
        }
        self.out.push(opcode.0);
        true
    }

    fn extended(&mut self, opcode: constants::DwLne, operands: &[u8]) {
        self.out.push(0);
        leb::uleb128(self.out, 1 + operands.len() as u64);
        self.out.push(opcode.0);
        self.out.extend_from_slice(operands);
    }

    fn advance_pc(&mut self, to: u64) {
        let delta = to.saturating_sub(self.state.address);
        if delta != 0 {
            self.out.push(constants::DW_LNS_advance_pc.0);
            leb::uleb128(self.out, delta);
            self.state.address = to;
        }
    }
}

impl LineSink for RawLineProgram<'_> {
    fn begin(&mut self, start: u64) {
        self.state = LineState::new(self.default_is_stmt);
        self.extended(constants::DW_LNE_set_address, &start.to_le_bytes());
        self.state.address = start;
    }

    fn row(&mut self, addr: u64, row: &lines::LineRow, continued: bool) -> Result<(), DebugError> {
        if addr < self.state.address {
            return Err(unsupported("line rows out of address order"));
        }
        if row.file != self.state.file {
            self.out.push(constants::DW_LNS_set_file.0);
            leb::uleb128(self.out, row.file.into());
            self.state.file = row.file;
        }
        if row.column != self.state.column {
            self.out.push(constants::DW_LNS_set_column.0);
            leb::uleb128(self.out, row.column.into());
            self.state.column = row.column;
        }
        let is_stmt = row.is_stmt && !continued;
        if is_stmt != self.state.is_stmt {
            self.out.push(constants::DW_LNS_negate_stmt.0);
            self.state.is_stmt = is_stmt;
        }
        if row.isa != self.state.isa && self.standard(constants::DW_LNS_set_isa) {
            leb::uleb128(self.out, row.isa.into());
            self.state.isa = row.isa;
        }
        if row.discriminator != 0 {
            let mut operand = Vec::new();
            leb::uleb128(&mut operand, row.discriminator.into());
            self.extended(constants::DW_LNE_set_discriminator, &operand);
        }
        if row.basic_block && !continued {
            self.standard(constants::DW_LNS_set_basic_block);
        }
        if row.prologue_end && !continued {
            self.standard(constants::DW_LNS_set_prologue_end);
        }
        if row.epilogue_begin && !continued {
            self.standard(constants::DW_LNS_set_epilogue_begin);
        }
        let line_delta = i64::from(row.line) - i64::from(self.state.line);
        let (base, range) = (i64::from(self.line_base), i64::from(self.line_range));
        let opcode_base = i64::from(self.opcode_base);
        let special = |line: i64, addr: u64| -> Option<u8> {
            let op = (line - base) + range * i64::try_from(addr).ok()? + opcode_base;
            ((base..base + range).contains(&line) && op <= 255).then_some(op as u8)
        };
        let addr_delta = addr - self.state.address;
        if let Some(op) = special(line_delta, addr_delta) {
            self.out.push(op);
        } else {
            if line_delta != 0 {
                self.out.push(constants::DW_LNS_advance_line.0);
                leb::sleb128(self.out, line_delta);
            }
            match special(0, addr_delta) {
                Some(op) => self.out.push(op),
                None => {
                    self.advance_pc(addr);
                    self.out.push(constants::DW_LNS_copy.0);
                }
            }
        }
        self.state.address = addr;
        self.state.line = row.line;
        Ok(())
    }

    fn end(&mut self, end: u64) {
        self.advance_pc(end);
        self.extended(constants::DW_LNE_end_sequence, &[]);
    }
}

/// Writes one DIE's attributes into `die`. Returns its new ranges when it has ranges.
fn write_die<'d>(
    state: &mut UnitState<'_, 'd>,
    attrs: &[RawAttribute<'d>],
    tag: constants::DwTag,
    moves: &CodeMoves<'_>,
    out: &mut Output,
    die: &mut DieOut,
) -> Result<Option<Vec<(u64, u64)>>, DebugError> {
    let unit = state.unit;
    let find = |name| attrs.iter().find(|a| a.attr.name() == name);
    let low = find(constants::DW_AT_low_pc);
    let high = find(constants::DW_AT_high_pc);
    let listed = find(constants::DW_AT_ranges);
    let ranged = listed.is_some() || (low.is_some() && high.is_some());

    // A list table must exist before any list of the unit is written.
    for a in attrs {
        match a.attr.value() {
            AttributeValue::DebugLocListsBase(base) => {
                let slots = slot_count(state.loclists_input, base.0 as u64)?;
                state.loc.begin(&mut out.loclists, slots);
            }
            AttributeValue::DebugRngListsBase(base) => {
                let slots = slot_count(state.rnglists_input, base.0 as u64)?;
                state.rng.begin(&mut out.rnglists, slots);
            }
            _ => {}
        }
    }

    let mut new_ranges = None;
    if ranged {
        let mut old = Vec::new();
        let old_entry;
        if let Some(list) = listed {
            if let Some(mut iter) = unit.attr_ranges(list.attr.value())? {
                while let Some(r) = iter.next()? {
                    old.push((r.begin, r.end));
                }
            }
            old_entry = match low {
                Some(l) => unit.attr_address(l.attr.value())?,
                None => old.first().map(|r| r.0),
            };
        } else {
            let (l, h) = (low.unwrap(), high.unwrap());
            let begin = unit
                .attr_address(l.attr.value())?
                .ok_or_else(|| unsupported("DW_AT_low_pc without an address"))?;
            let end = match h.attr.value() {
                AttributeValue::Udata(len) => begin.wrapping_add(len),
                v => unit
                    .attr_address(v)?
                    .ok_or_else(|| unsupported("DW_AT_high_pc of an unknown class"))?,
            };
            old.push((begin, end));
            old_entry = Some(begin);
        }
        new_ranges = Some(super::translated_ranges(moves, &old, old_entry));
    }
    let ranges = new_ranges.as_deref().unwrap_or_default();
    // A DIE that had one range and now has several gets a range list.
    let becomes_list = listed.is_none() && ranged && ranges.len() > 1;

    for a in attrs {
        let name = a.attr.name();
        let form = a.spec.form();
        if dropped(name) {
            continue;
        }
        let range_attribute = matches!(
            name,
            constants::DW_AT_low_pc | constants::DW_AT_high_pc | constants::DW_AT_ranges
        );
        if ranged && range_attribute && ranges.is_empty() {
            // Code that no longer exists anywhere (a range of padding, say): no ranges.
            continue;
        }
        if ranged && name == constants::DW_AT_low_pc {
            if listed.is_some() || becomes_list {
                // The unit's (or DIE's) base address; every list written here is absolute.
                die.attr(name, constants::DW_FORM_addr, &0u64.to_le_bytes());
            } else if let Some(&(a, _)) = ranges.first() {
                die.attr(name, constants::DW_FORM_addr, &a.to_le_bytes());
            }
            if becomes_list {
                let offset = write_range_list(state, out, ranges, None)?;
                let form = if state.version >= 4 {
                    constants::DW_FORM_sec_offset
                } else {
                    constants::DW_FORM_data4
                };
                let bytes = fixed(offset, 4).ok_or_else(|| unsupported("range list offset"))?;
                die.attr(constants::DW_AT_ranges, form, &bytes);
            }
            continue;
        }
        if ranged && name == constants::DW_AT_high_pc {
            if listed.is_none()
                && let [(a, b)] = ranges
            {
                match form {
                    constants::DW_FORM_addr => die.attr(name, form, &b.to_le_bytes()),
                    _ => {
                        let size = match form {
                            constants::DW_FORM_data1 => 1,
                            constants::DW_FORM_data2 => 2,
                            constants::DW_FORM_data4 => 4,
                            _ => 8,
                        };
                        match fixed(b - a, size) {
                            Some(bytes) if form != constants::DW_FORM_udata => {
                                die.attr(name, form, &bytes)
                            }
                            _ => die.attr(name, constants::DW_FORM_data8, &(b - a).to_le_bytes()),
                        }
                    }
                }
            }
            continue;
        }
        if ranged && name == constants::DW_AT_ranges {
            match a.attr.value() {
                AttributeValue::DebugRngListsIndex(index) => {
                    write_range_list(state, out, ranges, Some(index.0))?;
                    die.attr(name, form, a.bytes);
                }
                _ => {
                    let offset = write_range_list(state, out, ranges, None)?;
                    let bytes = fixed(offset, a.bytes.len())
                        .ok_or_else(|| unsupported("range list offset"))?;
                    die.attr(name, form, &bytes);
                }
            }
            continue;
        }
        match a.attr.value() {
            v @ (AttributeValue::Addr(_) | AttributeValue::DebugAddrIndex(_)) => {
                let Some(old) = unit.attr_address(v)? else {
                    die.attr(name, form, a.bytes);
                    continue;
                };
                // A call site's DW_AT_call_return_pc (DWARF 5) or DW_AT_low_pc (the GNU
                // extension) is the address after the call.
                let return_address = name == constants::DW_AT_call_return_pc
                    || (name == constants::DW_AT_low_pc
                        && matches!(
                            tag,
                            constants::DW_TAG_call_site | constants::DW_TAG_GNU_call_site
                        ));
                let new = match return_address {
                    true => moves.translate_return_address(old),
                    false => moves.translate_point(old),
                };
                match new {
                    Some(new) if new == old => die.attr(name, form, a.bytes),
                    Some(new) => die.attr(name, constants::DW_FORM_addr, &new.to_le_bytes()),
                    // Not an instruction boundary any more: say nothing rather than lie.
                    None => {}
                }
            }
            AttributeValue::UnitRef(offset) => {
                die.fixups.push(Fixup {
                    buffer: Buffer::Info,
                    at: die.bytes.len(),
                    width: Width::Fixed(4),
                    unit_base: Some(state.new_start),
                    target: state.old_start + offset.0 as u64,
                });
                die.attr(name, constants::DW_FORM_ref4, &[0; 4]);
            }
            AttributeValue::DebugInfoRef(offset) => {
                die.fixups.push(Fixup {
                    buffer: Buffer::Info,
                    at: die.bytes.len(),
                    width: Width::Fixed(a.bytes.len()),
                    unit_base: None,
                    target: offset.0 as u64,
                });
                die.attr(name, form, &vec![0; a.bytes.len()]);
            }
            AttributeValue::DebugLineRef(offset) => {
                let new = *out
                    .line_programs
                    .get(&(offset.0 as u64))
                    .ok_or_else(|| unsupported("DW_AT_stmt_list of no unit"))?;
                let bytes = fixed(new, a.bytes.len()).ok_or_else(|| unsupported("line offset"))?;
                die.attr(name, form, &bytes);
            }
            v @ AttributeValue::LocationListsRef(_) => {
                let offset = write_location_list(state, out, v, None, moves)?;
                let bytes = fixed(offset, a.bytes.len())
                    .ok_or_else(|| unsupported("location list offset"))?;
                die.attr(name, form, &bytes);
            }
            v @ AttributeValue::DebugLocListsIndex(index) => {
                write_location_list(state, out, v, Some(index.0), moves)?;
                die.attr(name, form, a.bytes);
            }
            AttributeValue::DebugLocListsBase(_) => {
                let base = state.loc.base().unwrap_or_default();
                let bytes = fixed(base, a.bytes.len()).ok_or_else(|| unsupported("list base"))?;
                die.attr(name, form, &bytes);
            }
            AttributeValue::DebugRngListsBase(_) => {
                let base = state.rng.base().unwrap_or_default();
                let bytes = fixed(base, a.bytes.len()).ok_or_else(|| unsupported("list base"))?;
                die.attr(name, form, &bytes);
            }
            v @ (AttributeValue::RangeListsRef(_) | AttributeValue::DebugRngListsIndex(_)) => {
                // Another attribute of the range list class (DW_AT_start_scope, say).
                let mut old = Vec::new();
                if let Some(mut iter) = unit.attr_ranges(v)? {
                    while let Some(r) = iter.next()? {
                        old.push((r.begin, r.end));
                    }
                }
                let translated = moves.translate_ranges(&old);
                if let AttributeValue::DebugRngListsIndex(index) = v {
                    write_range_list(state, out, &translated, Some(index.0))?;
                    die.attr(name, form, a.bytes);
                } else {
                    let offset = write_range_list(state, out, &translated, None)?;
                    let bytes = fixed(offset, a.bytes.len())
                        .ok_or_else(|| unsupported("range list offset"))?;
                    die.attr(name, form, &bytes);
                }
            }
            AttributeValue::Exprloc(expression) => {
                let data = expression.0.slice();
                let at = die.bytes.len() + a.bytes.len() - data.len();
                die.attr(name, form, a.bytes);
                if !copyable(&expression, unit.encoding()) {
                    let mut fixups = Vec::new();
                    patch_expression(
                        data,
                        &mut die.bytes[at..at + data.len()],
                        at,
                        Buffer::Info,
                        state,
                        moves,
                        &mut fixups,
                    )?;
                    die.fixups.extend(fixups);
                }
            }
            _ => {
                die.spec(name, form, a.spec.implicit_const_value());
                die.bytes.extend_from_slice(a.bytes);
            }
        }
    }
    Ok(new_ranges)
}

/// Writes a range list of `ranges` for the unit; `slot` is its index in the unit's offset
/// table (`DW_FORM_rnglistx`). Returns the list's section offset.
fn write_range_list(
    state: &mut UnitState<'_, '_>,
    out: &mut Output,
    ranges: &[(u64, u64)],
    slot: Option<usize>,
) -> Result<u64, DebugError> {
    if state.version >= 5 {
        let buf = &mut out.rnglists;
        state.rng.begin(buf, 0);
        let offset = buf.len() as u64;
        if let Some(i) = slot {
            fill_slot(&mut state.rng, buf, i, offset)?;
        }
        for &(a, b) in ranges {
            buf.push(constants::DW_RLE_start_length.0);
            buf.extend_from_slice(&a.to_le_bytes());
            leb::uleb128(buf, b - a);
        }
        buf.push(constants::DW_RLE_end_of_list.0);
        Ok(offset)
    } else {
        let buf = &mut out.ranges;
        let offset = buf.len() as u64;
        // A base address selection entry, so the pairs are absolute whatever the unit's base.
        buf.extend_from_slice(&u64::MAX.to_le_bytes());
        buf.extend_from_slice(&0u64.to_le_bytes());
        for &(a, b) in ranges {
            buf.extend_from_slice(&a.to_le_bytes());
            buf.extend_from_slice(&b.to_le_bytes());
        }
        buf.extend_from_slice(&[0; 16]);
        Ok(offset)
    }
}

/// Records that slot `i` of a DWARF 5 list table holds the list at section offset `offset`.
fn fill_slot(
    table: &mut ListTable,
    buf: &mut [u8],
    i: usize,
    offset: u64,
) -> Result<(), DebugError> {
    let (Some(start), Some(base)) = (table.start, table.base()) else {
        return Err(unsupported("a list index without a list table"));
    };
    if i >= table.slots {
        return Err(unsupported(format!("list index {i} out of its table")));
    }
    let relative = (offset - base) as u32;
    table.filled[i] = Some(relative);
    let at = start + LIST_HEADER + 4 * i;
    buf[at..at + 4].copy_from_slice(&relative.to_le_bytes());
    Ok(())
}

/// Writes the location list an attribute refers to, with translated ranges and patched
/// expressions. For an indexed list (`slot`), a list already written is reused. Returns the
/// list's section offset.
fn write_location_list<'d>(
    state: &mut UnitState<'_, 'd>,
    out: &mut Output,
    value: AttributeValue<Reader<'d>>,
    slot: Option<usize>,
    moves: &CodeMoves<'_>,
) -> Result<u64, DebugError> {
    if let Some(i) = slot
        && let Some(Some(relative)) = state.loc.filled.get(i)
    {
        return Ok(state.loc.base().unwrap_or_default() + u64::from(*relative));
    }
    let unit = state.unit;
    let encoding = unit.encoding();
    let Some(mut iter) = unit.attr_locations(value)? else {
        return Err(unsupported("a location list attribute without a list"));
    };
    let v5 = state.version >= 5;
    let buffer = if v5 { Buffer::LocLists } else { Buffer::Loc };
    if v5 {
        state.loc.begin(&mut out.loclists, 0);
    }
    let offset = out.buffer(buffer).len() as u64;
    if let Some(i) = slot {
        fill_slot(&mut state.loc, &mut out.loclists, i, offset)?;
    }
    let mut entries = Vec::new();
    while let Some(l) = iter.next()? {
        entries.push(l);
    }
    let mut fixups = Vec::new();
    let buf = out.buffer(buffer);
    super::encode_location_list(buf, v5, &entries, moves, |buf, at, expression| {
        if copyable(expression, encoding) {
            return Ok(());
        }
        let data = expression.0.slice();
        let target = &mut buf[at..at + data.len()];
        patch_expression(data, target, at, buffer, state, moves, &mut fixups)
    })?;
    out.fixups.append(&mut fixups);
    Ok(offset)
}

/// Patches, in `target` (a copy of `expression` at position `at` of `buffer`), the operands
/// that name code addresses or DIEs: addresses are translated now, DIE offsets recorded as
/// fixups. Every operand keeps its size, so branch offsets inside the expression hold.
fn patch_expression(
    expression: &[u8],
    target: &mut [u8],
    at: usize,
    buffer: Buffer,
    state: &UnitState<'_, '_>,
    moves: &CodeMoves<'_>,
    fixups: &mut Vec<Fixup>,
) -> Result<(), DebugError> {
    let encoding = state.unit.encoding();
    let offset_size = match encoding.version {
        2 => usize::from(encoding.address_size),
        _ => 4,
    };
    let mut input = Reader::new(expression, LittleEndian);
    let unit_base = state.new_start;
    let unit_start = state.old_start;
    let die_ref =
        |fixups: &mut Vec<Fixup>, pos: usize, width: Width, unit_relative: bool, offset: u64| {
            fixups.push(Fixup {
                buffer,
                at: at + pos,
                width,
                unit_base: unit_relative.then_some(unit_base),
                target: if unit_relative {
                    unit_start + offset
                } else {
                    offset
                },
            });
        };
    // Length of the ULEB128 at `pos`.
    let uleb_len = |pos: usize| {
        expression[pos..]
            .iter()
            .position(|b| b & 0x80 == 0)
            .map_or(expression.len() - pos, |p| p + 1)
    };
    while !input.is_empty() {
        let pos = expression.len() - input.len();
        let op = Operation::parse(&mut input, encoding)?;
        let end = expression.len() - input.len();
        match op {
            Operation::Address { address } => {
                let new = moves.translate_point(address).ok_or_else(|| {
                    unsupported(format!("DW_OP_addr 0x{address:x} inside moved code"))
                })?;
                target[pos + 1..pos + 9].copy_from_slice(&new.to_le_bytes());
            }
            Operation::Call { offset } => match offset {
                gimli::DieReference::UnitRef(o) => die_ref(
                    fixups,
                    pos + 1,
                    Width::Fixed(end - pos - 1),
                    true,
                    o.0 as u64,
                ),
                gimli::DieReference::DebugInfoRef(o) => die_ref(
                    fixups,
                    pos + 1,
                    Width::Fixed(end - pos - 1),
                    false,
                    o.0 as u64,
                ),
            },
            Operation::ImplicitPointer { value, .. } => die_ref(
                fixups,
                pos + 1,
                Width::Fixed(offset_size),
                false,
                value.0 as u64,
            ),
            Operation::VariableValue { offset } => die_ref(
                fixups,
                pos + 1,
                Width::Fixed(offset_size),
                false,
                offset.0 as u64,
            ),
            Operation::ParameterRef { offset } => {
                die_ref(fixups, pos + 1, Width::Fixed(4), true, offset.0 as u64)
            }
            // Offset 0 is the generic type, not a DIE.
            Operation::Convert { base_type } | Operation::Reinterpret { base_type }
                if base_type.0 != 0 =>
            {
                die_ref(
                    fixups,
                    pos + 1,
                    Width::Uleb(end - pos - 1),
                    true,
                    base_type.0 as u64,
                )
            }
            Operation::Deref { base_type, .. } if base_type.0 != 0 => {
                // DW_OP_deref_type: the size byte, then the type.
                die_ref(
                    fixups,
                    pos + 2,
                    Width::Uleb(end - pos - 2),
                    true,
                    base_type.0 as u64,
                )
            }
            Operation::RegisterOffset { base_type, .. } if base_type.0 != 0 => {
                // DW_OP_regval_type: the register, then the type.
                let from = pos + 1 + uleb_len(pos + 1);
                die_ref(
                    fixups,
                    from,
                    Width::Uleb(end - from),
                    true,
                    base_type.0 as u64,
                )
            }
            Operation::TypedLiteral { base_type, .. } => {
                // DW_OP_const_type: the type, then the size byte and the value.
                let len = uleb_len(pos + 1);
                die_ref(fixups, pos + 1, Width::Uleb(len), true, base_type.0 as u64)
            }
            Operation::EntryValue { expression: inner } => {
                let inner = inner.slice();
                let from = end - inner.len();
                patch_expression(
                    inner,
                    &mut target[from..end],
                    at + from,
                    buffer,
                    state,
                    moves,
                    fixups,
                )?;
            }
            _ => {}
        }
    }
    Ok(())
}
