//! DWARF debug information carried over to the rewritten code.
//!
//! DWARF names code by address: the line table maps addresses to source lines, DIEs give the
//! address ranges of functions, inlined calls and lexical blocks, location lists say where a
//! variable lives over a range of addresses, call sites record return addresses. Every one
//! of those is stale for a rewritten function. This module re-derives every address from how
//! code moved ([`CodeMoves`]), with one of two writers: [`stream`] (the default) copies DIEs
//! as bytes and re-encodes only what names code; the converter here decodes every unit into
//! gimli's object model and encodes it again (general, slower, several times the memory),
//! used for DWARF the streaming writer does not model and as its cross-check. Both share the
//! translation and the line-row planning:
//!
//! - a range becomes the new ranges of the instructions it covered (a block-reordered,
//!   split function turns into several ranges; the range holding the entry comes first,
//!   because debuggers take the first range's start as a function's entry);
//! - a point (low_pc of a label, a call's return address) follows its instruction;
//! - the line table keeps the input's sequences for code that did not move and gets one new
//!   sequence per fragment of each rewritten function, whose rows are the input's rows at
//!   each copied instruction's old address (rows that start there keep their flags; a block
//!   that now starts in the middle of an old row repeats that row as a non-statement).
//!
//! Sections whose contents are not regenerated (`.debug_frame`, `.debug_macro`, name
//! indexes, ...) are dropped by the caller; the streaming writer copies the string sections
//! as they are. When the input's DWARF uses something this
//! module cannot carry over, the caller removes debug info with a warning: stale debug info
//! is worse than none.

use std::collections::{BTreeMap, HashSet};

use gimli::write::{
    self as gw, Address, AttributeValue, ConvertUnit, ConvertUnitEntry, EndianVec, Expression,
    LineRow, Location, LocationList, Range, RangeList, Sections, UnitEntryId,
};
use gimli::{EndianSlice, LittleEndian, constants};
use rivet_arch::Flow;
use rivet_elf::lines::{self, LineSegment};
use rivet_elf::{ElfFile, Vaddr};
use rivet_ir::{FuncId, Program};

use crate::code::{AddressMap, FragmentPlan};
use crate::leb;

mod stream;

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// Why the input's debug information could not be carried over.
#[derive(Debug, thiserror::Error)]
pub enum DebugError {
    #[error("{0} is not supported")]
    Unsupported(String),
    #[error("reading DWARF: {0}")]
    Read(#[from] gimli::Error),
    #[error("converting DWARF: {0}")]
    Convert(#[from] gw::ConvertError),
    #[error("writing DWARF: {0}")]
    Write(#[from] gw::Error),
}

/// The regenerated debug sections, by name, and what went into them.
#[derive(Debug, Default)]
pub struct DebugSections {
    pub sections: Vec<(&'static str, Vec<u8>)>,
    pub units: usize,
    /// Line-table rows written for rewritten code.
    pub moved_rows: usize,
    /// The writer that produced the sections.
    pub writer: DebugWriter,
    /// Why the streaming writer gave way to the converter, when it did.
    pub fallback: Option<String>,
}

/// How debug information is rewritten.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DebugWriter {
    /// DIEs copied as bytes; only what names code is re-encoded (`stream`). Falls back to
    /// [`DebugWriter::Convert`] for DWARF it does not model.
    #[default]
    Stream,
    /// Every unit decoded into gimli's object model and encoded again: slower and heavier,
    /// general; the cross-check for the streaming writer.
    Convert,
}

/// One fragment of a rewritten function: its new extent and what each piece stands for.
#[derive(Debug)]
struct MovedFragment {
    start: u64,
    end: u64,
    /// (new address, old address, vanished), in new-address order, of the pieces that carry
    /// the source position of their old address: copies and re-created branches (a jump
    /// added after a block carries its successor's address, not its own), and branches that
    /// vanished (a jump to what now follows), at the address where they would have been:
    /// their rows (a loop's line, say) start the code that follows instead.
    pieces: Vec<(u64, u64, bool)>,
}

/// A piece of a rewritten function as seen from the input: where it came from and went.
#[derive(Debug, Clone, Copy)]
struct OldPiece {
    old: u64,
    new: u64,
    /// Bytes at `new` (a piece is one instruction, padding or added branch; a u32 keeps the
    /// struct at 24 bytes, and there is one per instruction of every rewritten function).
    size: u32,
    /// A copy of an input instruction: its bytes keep their offsets.
    copied: bool,
    /// A copy or the re-encoding of the input's instruction at `old` (not a jump added to
    /// reach a block that no longer follows, which carries that block's address).
    original: bool,
}

impl OldPiece {
    fn new_end(&self) -> u64 {
        self.new + u64::from(self.size)
    }
}

/// Where the code of every rewritten function went, piece by piece.
#[derive(Debug)]
pub struct CodeMoves<'p> {
    program: &'p Program,
    map: &'p AddressMap,
    /// Old extents of rewritten functions, sorted by start.
    extents: Vec<(u64, u64, FuncId)>,
    /// Per extent: every piece, sorted by old address.
    by_old: Vec<Vec<OldPiece>>,
    /// Per extent: its fragments in fragment order.
    fragments: Vec<Vec<MovedFragment>>,
    /// Per extent: the function whose compiler-split part it is (itself otherwise).
    family: Vec<FuncId>,
}

impl<'p> CodeMoves<'p> {
    /// Takes the plans, and frees each function's as soon as its pieces are recorded: the
    /// plans and these lists together were the run's peak (PostgreSQL's server).
    pub fn new(
        program: &'p Program,
        map: &'p AddressMap,
        placed: Vec<(FragmentPlan, Vaddr)>,
    ) -> CodeMoves<'p> {
        // Fragments of each function, keyed by the function's old address.
        type Parts = Vec<(u32, FragmentPlan, Vaddr)>;
        let mut per_function: BTreeMap<(u64, FuncId), Parts> = BTreeMap::new();
        for (plan, addr) in placed {
            let f = program.function(plan.fragment.function);
            per_function
                .entry((f.range.start.get(), f.id))
                .or_default()
                .push((plan.fragment.fragment, plan, addr));
        }
        let mut moves = CodeMoves {
            program,
            map,
            extents: Vec::with_capacity(per_function.len()),
            by_old: Vec::with_capacity(per_function.len()),
            fragments: Vec::with_capacity(per_function.len()),
            family: Vec::with_capacity(per_function.len()),
        };
        for ((_, fid), mut parts) in per_function {
            let f = program.function(fid);
            parts.sort_unstable_by_key(|p| p.0);
            let mut by_old = Vec::new();
            let mut fragments = Vec::with_capacity(parts.len());
            for (_, plan, addr) in &parts {
                let base = addr.get();
                let plan_pieces = plan.pieces(f);
                // Sized ahead: grown by doubling, these lists held twice their size.
                by_old.reserve_exact(plan_pieces.len());
                let mut pieces = Vec::with_capacity(plan_pieces.len());
                for p in plan_pieces {
                    let new = base + p.offset;
                    by_old.push(OldPiece {
                        old: p.state_at.get(),
                        new,
                        size: u32::try_from(p.size).expect("a piece is one instruction or padding"),
                        copied: p.inst.is_some(),
                        original: p.inst.is_some() || p.replaces.is_some(),
                    });
                    if p.inst.is_some() || p.replaces.is_some() {
                        pieces.push((new, p.state_at.get(), false));
                    }
                }
                let present: HashSet<u64> = pieces.iter().map(|p| p.1).collect();
                for &(inst, offset) in &plan.inst_offsets {
                    let old = f.insts[inst as usize].addr().get();
                    if !present.contains(&old) {
                        pieces.push((base + u64::from(offset), old, true));
                    }
                }
                // Stable: at one address, a vanished branch's rows come before the code's.
                pieces.sort_by_key(|p| (p.0, !p.2));
                pieces.shrink_to_fit();
                fragments.push(MovedFragment {
                    start: base,
                    end: base + plan.size,
                    pieces,
                });
            }
            by_old.sort_unstable_by_key(|p| (p.old, p.new));
            // In place, a fragment may run into the padding after the function: that space
            // is the function's now, and the input's rows there (padding) no longer apply.
            let end = fragments
                .iter()
                .filter(|fr| fr.start == f.range.start.get())
                .map(|fr| fr.end)
                .fold(f.range.end.get(), u64::max);
            moves.extents.push((f.range.start.get(), end, fid));
            moves.by_old.push(by_old);
            moves.fragments.push(fragments);
            moves.family.push(match f.parent {
                Some(rivet_ir::Parent {
                    function,
                    kind: rivet_ir::PartKind::ColdFragment,
                }) => function,
                _ => fid,
            });
        }
        moves
    }

    /// The rewritten function whose old extent contains `addr`.
    fn extent_containing(&self, addr: u64) -> Option<usize> {
        let k = self.extents.partition_point(|e| e.0 <= addr);
        (k > 0 && addr < self.extents[k - 1].1).then(|| k - 1)
    }

    /// New address of the old address `p` used as a point: an instruction start follows
    /// its instruction, the end of a call (a return address) follows the call; an address
    /// outside rewritten code stays. `None` when `p` is inside rewritten code but neither.
    pub fn translate_point(&self, p: u64) -> Option<u64> {
        if let Some(i) = self.extent_containing(p) {
            let fid = self.extents[i].2;
            return self
                .map
                .in_function(fid, Vaddr(p))
                .map(Vaddr::get)
                .or_else(|| self.after_instruction(fid, p));
        }
        // The end of a rewritten function: a return address after a final call, or else the
        // start of the code that follows, which stays (it is not rewritten, or the lookup
        // above would have found it).
        let k = self.extents.partition_point(|e| e.1 < p);
        match self.extents.get(k) {
            Some(&(_, end, fid)) if end == p => self.after_instruction(fid, p).or(Some(p)),
            _ => Some(p),
        }
    }

    /// New address of the old return address `p` of a call: the new end of the call that
    /// ended at `p`. A return address is also the start of the instruction after the call,
    /// but once blocks move that instruction may be anywhere; the call is what matters.
    pub fn translate_return_address(&self, p: u64) -> Option<u64> {
        let Some(i) = self.extent_containing(p.wrapping_sub(1)) else {
            return self.translate_point(p);
        };
        let fid = self.extents[i].2;
        self.after_instruction(fid, p).or_else(|| {
            // A tail call's "return address" is the end of its jump, which is re-encoded:
            // the end of the piece that stands for it (not a jump added before it).
            let f = self.program.function(fid);
            let k = f.insts.partition_point(|i| i.addr().get() < p);
            let inst = f.insts.get(k.checked_sub(1)?)?;
            if inst.end().get() != p {
                return None;
            }
            let old = inst.addr().get();
            let pieces = &self.by_old[i];
            let from = pieces.partition_point(|q| q.old < old);
            pieces[from..]
                .iter()
                .take_while(|q| q.old == old)
                .find(|q| q.original)
                .map(|q| q.new_end())
        })
    }

    /// The new end of the instruction of `fid` that ended at old address `p`, for
    /// instructions copied unchanged (not branches, whose encoding may change).
    fn after_instruction(&self, fid: FuncId, p: u64) -> Option<u64> {
        let f = self.program.function(fid);
        let k = f.insts.partition_point(|i| i.addr().get() < p);
        let inst = f.insts.get(k.checked_sub(1)?)?;
        let copied = matches!(
            inst.flow(),
            Flow::Next | Flow::Call { .. } | Flow::IndirectCall
        );
        (copied && inst.end().get() == p)
            .then(|| self.map.in_function(fid, inst.addr()))
            .flatten()
            .map(|n| n.get() + u64::from(inst.len()))
    }

    /// Appends the new ranges covering the old range `[a, b)`: code outside rewritten
    /// functions keeps its addresses, rewritten code maps piece by piece.
    pub fn translate_range(&self, a: u64, b: u64, out: &mut Vec<(u64, u64)>) {
        let mut cursor = a;
        let first = self.extents.partition_point(|e| e.1 <= a);
        for (i, &(start, end, _)) in self.extents.iter().enumerate().skip(first) {
            if start >= b {
                break;
            }
            if cursor < start {
                out.push((cursor, start));
            }
            let (lo, hi) = (a.max(start), b.min(end));
            let pieces = &self.by_old[i];
            // A copy that starts before `lo` may still contain it: start at the pieces of
            // the last old address before `lo`.
            let mut from = pieces.partition_point(|p| p.old < lo);
            if let Some(before) = from.checked_sub(1).map(|k| pieces[k].old) {
                while from > 0 && pieces[from - 1].old == before {
                    from -= 1;
                }
            }
            for p in pieces[from..].iter().take_while(|p| p.old < hi) {
                if p.copied {
                    // Bytes of a copy keep their offsets: a range may start or end inside
                    // an instruction (gcc ends a location at a call's last byte, where a
                    // debugger looks up a caller's variables).
                    let len = u64::from(p.size);
                    let (from, to) = (lo.max(p.old), hi.min(p.old + len));
                    if from < to {
                        push_span(out, p.new + (from - p.old), p.new + (to - p.old));
                    }
                } else if p.old >= lo {
                    // A re-encoded or added branch goes wherever its old address goes.
                    push_span(out, p.new, p.new_end());
                }
            }
            cursor = cursor.max(end);
        }
        if cursor < b {
            out.push((cursor, b));
        }
    }

    /// Sorted, merged new ranges of a set of old ranges.
    fn translate_ranges(&self, old: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for &(a, b) in old {
            if a < b {
                self.translate_range(a, b, &mut out);
            }
        }
        normalize(&mut out);
        out
    }
}

/// Appends `[a, b)`, extending the last range instead when it ends at `a`: the pieces of a
/// block stay together, so most ranges collapse to one span per block here, before sorting.
fn push_span(out: &mut Vec<(u64, u64)>, a: u64, b: u64) {
    match out.last_mut() {
        Some(last) if last.1 == a => last.1 = b,
        _ => out.push((a, b)),
    }
}

/// Sorts ranges and merges the ones that touch or overlap; drops empty ones.
fn normalize(ranges: &mut Vec<(u64, u64)>) {
    ranges.retain(|r| r.0 < r.1);
    if !ranges.is_sorted() {
        ranges.sort_unstable();
    }
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(a, b) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    *ranges = merged;
}

/// Loads the input's DWARF, or `None` when it has none.
fn load<'d>(elf: &ElfFile<'d>) -> Result<Option<gimli::Dwarf<Reader<'d>>>, DebugError> {
    let Some(info) = elf.section_by_name(".debug_info") else {
        return Ok(None);
    };
    if info.data.is_empty() {
        return Ok(None);
    }
    for s in elf.sections() {
        if s.name.starts_with(".debug") && s.flags & object::elf::SHF_COMPRESSED.0 != 0 {
            return Err(DebugError::Unsupported(format!(
                "compressed debug section {}",
                s.name
            )));
        }
    }
    Ok(Some(elf.dwarf()?))
}

/// Rewrites the input's DWARF for the rewritten code. `Ok(None)` when the input has none.
pub fn rewrite(
    elf: &ElfFile<'_>,
    moves: &CodeMoves<'_>,
    writer: DebugWriter,
) -> Result<Option<DebugSections>, DebugError> {
    let Some(read_dwarf) = load(elf)? else {
        return Ok(None);
    };
    if writer == DebugWriter::Stream {
        match stream::rewrite(elf, &read_dwarf, moves) {
            Ok(sections) => return Ok(Some(sections)),
            Err(e) => {
                let mut sections = convert(elf, &read_dwarf, moves)?;
                sections.fallback = Some(e.to_string());
                return Ok(Some(sections));
            }
        }
    }
    convert(elf, &read_dwarf, moves).map(Some)
}

/// Converts the input's DWARF through gimli's object model.
fn convert(
    elf: &ElfFile<'_>,
    read_dwarf: &gimli::Dwarf<Reader<'_>>,
    moves: &CodeMoves<'_>,
) -> Result<DebugSections, DebugError> {
    let mut out = DebugSections {
        writer: DebugWriter::Convert,
        ..DebugSections::default()
    };
    let mut sections = Sections::new(EndianVec::new(LittleEndian));
    // (offset of the unit in the new .debug_info, its new ranges) for .debug_aranges.
    let mut unit_ranges: Vec<(u64, Vec<(u64, u64)>)> = Vec::new();
    let mut write_dwarf = gw::Dwarf::new();
    let mut convert = write_dwarf.convert(read_dwarf)?;
    while let Some((mut unit, root)) = convert.read_unit()? {
        if unit.read_unit.dwo_id.is_some() || unit.read_skeleton_unit.is_some() {
            return Err(DebugError::Unsupported("split DWARF (a .dwo unit)".into()));
        }
        out.units += 1;
        if let Some(read_program) = unit.read_unit.line_program.clone() {
            let segments = lines::line_segments(&read_program)
                .map_err(|e| DebugError::Unsupported(e.to_string()))?;
            // The converter carries the header (directories, files) over; rows are ours.
            let converter = unit
                .read_line_program(None, None)?
                .expect("the unit has a line program");
            let (program, files) = converter.program();
            let mut writer = LineWriter {
                program,
                files: &files,
                start: 0,
            };
            let mut unit_scopes = UnitScopes {
                unit: unit.read_unit,
                scopes: None,
            };
            out.moved_rows +=
                convert_line_program(&segments, &mut writer, moves, &mut unit_scopes)?;
            let program = writer.program;
            unit.set_line_program(program, files);
        }
        let root_id = unit.unit.root();
        let mut raw_lists = RawLocationLists::new(unit.read_unit.encoding().version, &sections);
        let root_ranges = convert_entry(&mut unit, root_id, &root, moves, &mut raw_lists)?;
        let mut entry = root;
        while let Some(id) = unit.read_entry(&mut entry)? {
            let id = unit.add_entry(id, &entry);
            convert_entry(&mut unit, id, &entry, moves, &mut raw_lists)?;
        }
        raw_lists.finish(&mut sections)?;
        let offset = gw::Writer::len(&sections.debug_info.0) as u64;
        unit.write(&mut sections)?;
        if let Some(ranges) = root_ranges
            && !ranges.is_empty()
        {
            unit_ranges.push((offset, ranges));
        }
    }
    write_dwarf.write(&mut sections)?;
    sections.for_each_mut(|id, data| -> Result<(), gw::Error> {
        let bytes = data.take();
        if !bytes.is_empty() {
            out.sections.push((id.name(), bytes));
        }
        Ok(())
    })?;
    if elf.section_by_name(".debug_aranges").is_some() {
        out.sections
            .push((".debug_aranges", address_ranges(&unit_ranges)));
    }
    Ok(out)
}

/// A `.debug_aranges` section (version 2, 64-bit addresses) listing each unit's ranges.
/// gimli writes no aranges; the format is a header and (address, length) pairs per unit.
fn address_ranges(units: &[(u64, Vec<(u64, u64)>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (offset, ranges) in units {
        // Header: length (4), version (2), .debug_info offset (4), address size (1),
        // segment selector size (1), then padding to a multiple of twice the address size.
        let length = 2 + 4 + 1 + 1 + 4 + (ranges.len() + 1) * 16;
        out.extend_from_slice(&(length as u32).to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&(*offset as u32).to_le_bytes());
        out.extend_from_slice(&[8, 0, 0, 0, 0, 0]);
        for &(a, b) in ranges.iter().chain(std::iter::once(&(0, 0))) {
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&(b - a).to_le_bytes());
        }
    }
    out
}

/// What makes two rows describe the same source position.
fn position(row: &lines::LineRow) -> (u32, u32, u32, u32) {
    (row.file, row.line, row.column, row.discriminator)
}

/// Index range of the rows of `seg` at exactly `addr`, and the index of the row in effect.
fn rows_at(seg: &LineSegment, addr: u64) -> (std::ops::Range<usize>, Option<usize>) {
    let upto = seg.rows.partition_point(|r| r.address <= addr);
    let from = seg.rows[..upto].partition_point(|r| r.address < addr);
    (from..upto, upto.checked_sub(1))
}

/// Where a rebuilt line program's rows go: sequences of rows, each row at a new address.
trait LineSink {
    fn begin(&mut self, start: u64);
    /// Writes `row` at `addr`; `continued` marks a row repeated where its statement does not
    /// start (no statement or prologue flags).
    fn row(&mut self, addr: u64, row: &lines::LineRow, continued: bool) -> Result<(), DebugError>;
    fn end(&mut self, end: u64);
}

/// Appends rows to a gimli line program being rebuilt, converting file indices.
struct LineWriter<'a> {
    program: gw::LineProgram,
    files: &'a [gw::FileId],
    start: u64,
}

impl LineSink for LineWriter<'_> {
    fn begin(&mut self, start: u64) {
        self.start = start;
        self.program.begin_sequence(Some(Address::Constant(start)));
    }

    fn row(&mut self, addr: u64, row: &lines::LineRow, continued: bool) -> Result<(), DebugError> {
        let file = *self
            .files
            .get(row.file as usize)
            .ok_or_else(|| DebugError::Unsupported(format!("line row file index {}", row.file)))?;
        *self.program.row() = LineRow {
            address_offset: addr - self.start,
            op_index: 0,
            file,
            line: row.line.into(),
            column: row.column.into(),
            discriminator: row.discriminator.into(),
            is_statement: row.is_stmt && !continued,
            basic_block: row.basic_block && !continued,
            prologue_end: row.prologue_end && !continued,
            epilogue_begin: row.epilogue_begin && !continued,
            isa: row.isa.into(),
        };
        self.program.generate_row();
        Ok(())
    }

    fn end(&mut self, end: u64) {
        self.program.end_sequence(end - self.start);
    }
}

/// Rebuilds one unit's line program from its input rows: code that stays keeps its rows,
/// each fragment of a rewritten function that starts in this unit gets a sequence. Returns
/// the number of rows written for rewritten code.
fn convert_line_program(
    segments: &[LineSegment],
    out: &mut impl LineSink,
    moves: &CodeMoves<'_>,
    scopes: &mut UnitScopes<'_, '_>,
) -> Result<usize, DebugError> {
    // Code that stays: each segment minus the extents of rewritten functions. A rewritten
    // function belongs to the unit whose rows it overlaps, not only to one whose rows cover
    // its first byte: gcc may start a `.cold` part with an instruction it gave no line (a
    // register copy at the partition boundary), so the part's rows begin a few bytes in, and
    // PostgreSQL's DiscardCommand.cold got no rows at all. Well-formed line tables give an
    // address to one unit only, so one unit owns each function.
    let mut owned: Vec<usize> = Vec::new();
    for seg in segments {
        let mut kept = Vec::new();
        let mut cursor = seg.start;
        let first = moves.extents.partition_point(|e| e.1 <= seg.start);
        for (i, &(start, end, _)) in moves.extents.iter().enumerate().skip(first) {
            if start >= seg.end {
                break;
            }
            owned.push(i);
            if cursor < start {
                kept.push((cursor, start));
            }
            cursor = cursor.max(end);
        }
        if cursor < seg.end {
            kept.push((cursor, seg.end));
        }
        // A kept stretch starts at the end of a rewritten function (or of its segment): what
        // lies before its first row is padding, and gets no line.
        for (a, b) in kept {
            let from = seg.rows.partition_point(|r| r.address < a);
            let rows = &seg.rows[from..];
            let n = rows.partition_point(|r| r.address < b);
            let Some(first) = rows.first().filter(|_| n > 0) else {
                continue;
            };
            out.begin(first.address);
            for row in &rows[..n] {
                out.row(row.address, row, false)?;
            }
            out.end(b);
        }
    }

    // Rewritten functions that start in this unit's rows: a sequence per fragment.
    owned.sort_unstable();
    owned.dedup();
    let find = |addr: u64| -> Option<&LineSegment> {
        let k = segments.partition_point(|s| s.start <= addr);
        let seg = &segments[k.checked_sub(1)?];
        (addr < seg.end).then_some(seg)
    };
    let mut moved_rows = 0;
    // A function and its compiler-split parts are one subprogram to a debugger: plan their
    // rows together.
    let mut families: BTreeMap<FuncId, Vec<usize>> = BTreeMap::new();
    for i in owned {
        families.entry(moves.family[i]).or_default().push(i);
    }
    for members in families.values() {
        // (fragment, new address, row, continued) for the whole family.
        let mut planned: Vec<(usize, u64, lines::LineRow, bool)> = Vec::new();
        let mut fragments: Vec<&MovedFragment> = Vec::new();
        let mut placed_exact: HashSet<u64> = HashSet::new();
        // Indices in `planned` of the rows of vanished branches, ascending.
        // With the old addresses of the branch and of the code now following it.
        let mut from_vanished: Vec<(usize, u64, Option<u64>)> = Vec::new();
        for &i in members {
            for fragment in &moves.fragments[i] {
                let k = fragments.len();
                fragments.push(fragment);
                let mut last = None;
                for (j, &(new, old, vanished)) in fragment.pieces.iter().enumerate() {
                    let Some(seg) = find(old) else { continue };
                    let (exact, in_effect) = rows_at(seg, old);
                    let in_effect = in_effect.filter(|_| !vanished);
                    if !exact.is_empty() && placed_exact.insert(old) {
                        if let Some(real) = real_line_before(seg, exact.start, last) {
                            planned.push((k, new, real, true));
                        }
                        for idx in exact {
                            let mut row = seg.rows[idx];
                            if !statement_visible(seg, idx) {
                                row.is_stmt = false;
                            }
                            row.discriminator = 0;
                            if vanished {
                                let following = fragment.pieces[j + 1..]
                                    .iter()
                                    .find(|p| !p.2)
                                    .filter(|p| p.0 == new)
                                    .map(|p| p.1);
                                from_vanished.push((planned.len(), old, following));
                            }
                            planned.push((k, new, row, false));
                            last = Some(position(&row));
                        }
                    } else if let Some(r) = in_effect {
                        let row = lines::LineRow {
                            discriminator: 0,
                            ..seg.rows[r]
                        };
                        if last != Some(position(&row)) {
                            // gdb ignores line-0 rows: where the input showed it the last
                            // real line before one, repeat that line first (tools that take
                            // the last row at an address still see the 0).
                            if let Some(real) = real_line_before(seg, r, last) {
                                planned.push((k, new, real, true));
                            }
                            planned.push((k, new, row, true));
                            last = Some(position(&row));
                        }
                    }
                }
            }
        }
        // A vanished branch's statement now sits on the code that follows it. When that code
        // is of another scope (an inlined call, a lexical block), a debugger would add a
        // breakpoint location for the line there: keep it a statement only when its line
        // has no other.
        if !from_vanished.is_empty() {
            let statement_lines: HashSet<(u32, u32)> = planned
                .iter()
                .enumerate()
                .filter(|(i, p)| {
                    p.2.is_stmt && !p.3 && from_vanished.binary_search_by_key(i, |v| v.0).is_err()
                })
                .map(|(_, p)| (p.2.file, p.2.line))
                .collect();
            let all_scopes = scopes.get()?;
            for &(i, old, following) in &from_vanished {
                let row = &mut planned[i].2;
                let same_scope = following
                    .is_some_and(|f| innermost(all_scopes, old) == innermost(all_scopes, f));
                if !same_scope && statement_lines.contains(&(row.file, row.line)) {
                    row.is_stmt = false;
                }
            }
        }
        demote_earlier_statements(&mut planned, scopes)?;
        drop_misleading_prologue_ends(&mut planned);
        moved_rows += planned.len();
        let mut rows = planned.iter().peekable();
        for (k, fragment) in fragments.iter().enumerate() {
            // A fragment without rows (only a jump the layout added after padding it left
            // out) gets no sequence rather than one that ends where it begins.
            if fragment.end == fragment.start || rows.peek().is_none_or(|r| r.0 != k) {
                continue;
            }
            out.begin(fragment.start);
            while let Some((_, new, row, continued)) = rows.next_if(|r| r.0 == k) {
                out.row(*new, row, *continued)?;
            }
            out.end(fragment.end);
        }
    }
    Ok(moved_rows)
}

/// The row a debugger showed at row `idx` of `seg` if that row is a line-0 row: gdb ignores
/// line-0 rows, so the last real line before it went on. `None` when row `idx` has a real
/// line, has no real line before it, or that line is already `last` (the position written
/// just before in the new layout).
fn real_line_before(
    seg: &LineSegment,
    idx: usize,
    last: Option<(u32, u32, u32, u32)>,
) -> Option<lines::LineRow> {
    if seg.rows[idx].line != 0 {
        return None;
    }
    let real = seg.rows[..idx].iter().rev().find(|p| p.line != 0)?;
    let real = lines::LineRow {
        discriminator: 0,
        ..*real
    };
    (last != Some(position(&real))).then_some(real)
}

/// Whether a debugger reading the input's rows saw row `idx` of `seg` as a line change
/// (and so its statement flag as a breakpoint location). gdb records a row whose line equals
/// the previous row's only while that line has had no discriminator; otherwise the row
/// merges into the one before. Rewritten code drops discriminators (their blocks no longer
/// sit together, and gdb would merge rows that reordering made adjacent), so rows the input
/// hid are demoted instead: the statements a debugger sees stay the input's.
fn statement_visible(seg: &LineSegment, idx: usize) -> bool {
    let line = |r: &lines::LineRow| (r.file, r.line);
    let row = &seg.rows[idx];
    // The run of rows with this line that ends at `idx`.
    let run_start = seg.rows[..idx]
        .iter()
        .rposition(|r| line(r) != line(row))
        .map_or(0, |p| p + 1);
    run_start == idx
        || seg.rows[run_start..=idx]
            .iter()
            .all(|r| r.discriminator == 0)
}

/// A scope a debugger tells apart when it places a line breakpoint: a function, an inlined
/// call or a lexical block, as (begin, end, depth, scope id) per address range.
type Scope = (u64, u64, isize, usize);

/// A unit's scopes, read the first time a line needs them.
struct UnitScopes<'u, 'd> {
    unit: gimli::UnitRef<'u, Reader<'d>>,
    scopes: Option<Vec<Scope>>,
}

impl UnitScopes<'_, '_> {
    fn get(&mut self) -> Result<&[Scope], DebugError> {
        if self.scopes.is_none() {
            self.scopes = Some(scopes(self.unit)?);
        }
        Ok(self.scopes.as_deref().unwrap_or_default())
    }
}

fn scopes(unit: gimli::UnitRef<'_, Reader<'_>>) -> Result<Vec<Scope>, DebugError> {
    let mut out = Vec::new();
    let mut entries = unit.entries();
    let mut id = 0;
    while let Some(entry) = entries.next_dfs()? {
        if matches!(
            entry.tag(),
            constants::DW_TAG_subprogram
                | constants::DW_TAG_inlined_subroutine
                | constants::DW_TAG_lexical_block
        ) {
            let mut ranges = unit.die_ranges(entry)?;
            while let Some(r) = ranges.next()? {
                if r.begin < r.end {
                    out.push((r.begin, r.end, entry.depth(), id));
                }
            }
            id += 1;
        }
    }
    out.sort_unstable_by_key(|s| (s.0, s.2));
    Ok(out)
}

/// The innermost scope holding `addr`, among `scopes` sorted by (begin, depth). Scopes
/// nest, so the holding scope that begins last (the deepest, among equal begins) is the
/// innermost: scanning back from `addr` stops at the first that holds it.
fn innermost(scopes: &[Scope], addr: u64) -> Option<usize> {
    let upto = scopes.partition_point(|s| s.0 <= addr);
    scopes[..upto]
        .iter()
        .rev()
        .find(|s| addr < s.1)
        .map(|s| s.3)
}

/// A debugger breaks on a source line at the lowest-addressed statement row of that line in
/// each scope (function, inlined call, lexical block). Reordering can put another statement
/// row of the line (a `break`'s jump, a loop's latch) below the one that came first in the
/// input, and the breakpoint would land there; such rows are demoted to non-statements so
/// the input's choice still wins.
fn demote_earlier_statements(
    planned: &mut [(usize, u64, lines::LineRow, bool)],
    scopes: &mut UnitScopes<'_, '_>,
) -> Result<(), DebugError> {
    let statement = |row: &lines::LineRow, continued: bool| row.is_stmt && !continued;
    // Only lines with several statement rows can be affected.
    let mut count: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (_, _, row, continued) in planned.iter() {
        if statement(row, *continued) {
            *count.entry((row.file, row.line)).or_default() += 1;
        }
    }
    count.retain(|_, n| *n > 1);
    if count.is_empty() {
        return Ok(());
    }
    let scopes = scopes.get()?;
    // The (file, line, scope) of each statement row that may compete, computed once.
    let keys: Vec<Option<(u32, u32, Option<usize>)>> = planned
        .iter()
        .map(|(_, _, row, continued)| {
            (statement(row, *continued) && count.contains_key(&(row.file, row.line)))
                .then(|| (row.file, row.line, innermost(scopes, row.address)))
        })
        .collect();
    // Per (file, line, scope): (old address, new address) of the input's first statement.
    let mut first: BTreeMap<(u32, u32, Option<usize>), (u64, u64)> = BTreeMap::new();
    for ((_, new, row, _), key) in planned.iter().zip(&keys) {
        if let Some(k) = key {
            let e = first.entry(*k).or_insert((row.address, *new));
            if row.address < e.0 {
                *e = (row.address, *new);
            }
        }
    }
    for ((_, new, row, _), key) in planned.iter_mut().zip(&keys) {
        if key
            .and_then(|k| first.get(&k))
            .is_some_and(|&(_, chosen)| *new < chosen)
        {
            row.is_stmt = false;
        }
    }
    Ok(())
}

/// A debugger takes everything from a function's entry up to its `prologue_end` row as
/// prologue, and moves breakpoints out of it. When reordering puts body code (rows that came
/// after the prologue end in the input) between the entry and that row, the marker would
/// misplace those breakpoints, so it is dropped; debuggers then find the prologue by other
/// means.
fn drop_misleading_prologue_ends(planned: &mut [(usize, u64, lines::LineRow, bool)]) {
    let ends: Vec<(usize, u64, u64)> = planned
        .iter()
        .filter(|r| r.2.prologue_end && !r.3)
        .map(|r| (r.0, r.1, r.2.address))
        .collect();
    for (fragment, new_end, old_end) in ends {
        let body_before = planned
            .iter()
            .any(|r| r.0 == fragment && r.1 < new_end && r.2.address > old_end);
        if body_before {
            for r in planned.iter_mut() {
                if r.0 == fragment && r.1 == new_end && r.2.address == old_end {
                    r.2.prologue_end = false;
                }
            }
        }
    }
}

/// Attributes both writers leave out: views index the input's line table, and macro offsets
/// point into sections that are not kept.
fn dropped(name: constants::DwAt) -> bool {
    matches!(
        name,
        constants::DW_AT_GNU_locviews
            | constants::DW_AT_GNU_entry_view
            | constants::DW_AT_macros
            | constants::DW_AT_GNU_macros
            | constants::DW_AT_macro_info
    )
}

/// The new ranges of a DIE whose old ranges are `old` and whose entry was `old_entry`:
/// sorted, except that the range holding the entry comes first, because debuggers take the
/// start of the first range as the entry.
fn translated_ranges(
    moves: &CodeMoves<'_>,
    old: &[(u64, u64)],
    old_entry: Option<u64>,
) -> Vec<(u64, u64)> {
    let mut ranges = moves.translate_ranges(old);
    if let Some(e) = old_entry.and_then(|e| moves.translate_point(e))
        && let Some(k) = ranges.iter().position(|r| r.0 <= e && e < r.1)
    {
        ranges[..=k].rotate_right(1);
    }
    ranges
}

/// Converts the attributes of one DIE. Returns the DIE's new ranges when it has any.
fn convert_entry<'d>(
    unit: &mut ConvertUnit<'_, Reader<'d>>,
    id: UnitEntryId,
    entry: &ConvertUnitEntry<'_, Reader<'d>>,
    moves: &CodeMoves<'_>,
    raw_lists: &mut RawLocationLists,
) -> Result<Option<Vec<(u64, u64)>>, DebugError> {
    let read_unit = entry.read_unit;
    let version = read_unit.encoding().version;
    let point = |a: u64| moves.translate_point(a).map(Address::Constant);
    let has = |name| entry.attrs.iter().any(|a| a.name() == name);
    let ranged = has(constants::DW_AT_ranges)
        || (has(constants::DW_AT_low_pc) && has(constants::DW_AT_high_pc));
    let mut new_ranges = None;
    if ranged {
        let mut old = Vec::new();
        let mut iter = read_unit.die_ranges(&entry.read_entry)?;
        while let Some(r) = iter.next()? {
            old.push((r.begin, r.end));
        }
        let old_entry = match entry.attr_value(constants::DW_AT_low_pc) {
            Some(v) => read_unit.attr_address(v)?,
            None => old.first().map(|r| r.0),
        };
        let ranges = translated_ranges(moves, &old, old_entry);
        let die = unit.unit.get_mut(id);
        match ranges.as_slice() {
            [] => {}
            [(a, b)] => {
                die.set(
                    constants::DW_AT_low_pc,
                    AttributeValue::Address(Address::Constant(*a)),
                );
                die.set(constants::DW_AT_high_pc, AttributeValue::Udata(b - a));
            }
            many => {
                let list = range_list(many);
                let list = unit.unit.ranges.add(list);
                let die = unit.unit.get_mut(id);
                if has(constants::DW_AT_low_pc) {
                    // The unit's base address; every list written here sets its own base.
                    die.set(
                        constants::DW_AT_low_pc,
                        AttributeValue::Address(Address::Constant(0)),
                    );
                }
                die.set(constants::DW_AT_ranges, AttributeValue::RangeListRef(list));
            }
        }
        new_ranges = Some(ranges);
    }
    for attr in &entry.attrs {
        let name = attr.name();
        let handled = ranged
            && matches!(
                name,
                constants::DW_AT_low_pc | constants::DW_AT_high_pc | constants::DW_AT_ranges
            );
        if handled || dropped(name) {
            continue;
        }
        // gimli passes implicit constants through raw; file indices must be converted.
        if attr.form() == constants::DW_FORM_implicit_const
            && matches!(
                name,
                constants::DW_AT_decl_file | constants::DW_AT_call_file
            )
            && let gimli::AttributeValue::Sdata(index) = attr.raw_value()
        {
            let file = unit.convert_file_index(read_unit, index as u64)?;
            unit.unit
                .get_mut(id)
                .set(name, AttributeValue::FileIndex(file));
            continue;
        }
        let value = match attr.value() {
            gimli::AttributeValue::Addr(_) | gimli::AttributeValue::DebugAddrIndex(_) => {
                let old = read_unit.attr_address(attr.value())?;
                // A call site's DW_AT_call_return_pc (DWARF 5) or DW_AT_low_pc (the GNU
                // extension) is the address after the call; debuggers match it against
                // return addresses on the stack to find entry values of the caller.
                let return_address = name == constants::DW_AT_call_return_pc
                    || (name == constants::DW_AT_low_pc
                        && matches!(
                            entry.tag(),
                            constants::DW_TAG_call_site | constants::DW_TAG_GNU_call_site
                        ));
                let translated = old.and_then(|a| match return_address {
                    true => moves.translate_return_address(a),
                    false => moves.translate_point(a),
                });
                match translated {
                    Some(new) => AttributeValue::Address(Address::Constant(new)),
                    // Not an instruction boundary any more: say nothing rather than lie.
                    None => continue,
                }
            }
            v @ (gimli::AttributeValue::LocationListsRef(_)
            | gimli::AttributeValue::DebugLocListsIndex(_)) => {
                let Some(mut iter) = read_unit.attr_locations(v)? else {
                    continue;
                };
                let mut entries = Vec::new();
                while let Some(l) = iter.next()? {
                    entries.push(l);
                }
                let encoding = read_unit.encoding();
                if encoding.address_size == 8 && entries.iter().all(|l| copyable(&l.data, encoding))
                {
                    raw_lists.write(&entries, moves)?
                } else {
                    let mut locations = Vec::new();
                    let mut spans = Vec::new();
                    for l in entries {
                        let data = unit.convert_expression(read_unit, l.data, &point)?;
                        if l.range.begin == 0 && l.range.end == u64::MAX && version >= 5 {
                            locations.push(Location::DefaultLocation { data });
                            continue;
                        }
                        spans.clear();
                        if l.range.begin < l.range.end {
                            moves.translate_range(l.range.begin, l.range.end, &mut spans);
                        }
                        normalize(&mut spans);
                        locations.extend(spans.iter().map(|&(a, b)| Location::OffsetPair {
                            begin: a,
                            end: b,
                            data: data.clone(),
                        }));
                    }
                    if locations
                        .iter()
                        .any(|l| matches!(l, Location::OffsetPair { .. }))
                    {
                        locations.insert(
                            0,
                            Location::BaseAddress {
                                address: Address::Constant(0),
                            },
                        );
                    }
                    let list = unit.unit.locations.add(LocationList(locations));
                    AttributeValue::LocationListRef(list)
                }
            }
            gimli::AttributeValue::Exprloc(e) if copyable(&e, read_unit.encoding()) => {
                AttributeValue::Exprloc(Expression::raw(e.0.slice().to_vec()))
            }
            _ => unit.convert_attribute_value(read_unit, attr, &point)?,
        };
        unit.unit.get_mut(id).set(name, value);
    }
    Ok(new_ranges)
}

/// Appends a location list of `entries` to `out`, ranges translated and absolute (DWARF 5:
/// start-length entries; earlier versions: a base address selection entry, then pairs), each
/// expression copied as it is; `copied(out, at, expression)` is told of every copy, to patch it.
fn encode_location_list<'d>(
    out: &mut Vec<u8>,
    v5: bool,
    entries: &[gimli::LocationListEntry<Reader<'d>>],
    moves: &CodeMoves<'_>,
    mut copied: impl FnMut(
        &mut Vec<u8>,
        usize,
        &gimli::Expression<Reader<'d>>,
    ) -> Result<(), DebugError>,
) -> Result<(), DebugError> {
    if !v5 {
        // A base address selection entry: every range below is absolute.
        out.extend_from_slice(&u64::MAX.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
    }
    let mut spans = Vec::new();
    for l in entries {
        let data = l.data.0.slice();
        let default = v5 && l.range.begin == 0 && l.range.end == u64::MAX;
        spans.clear();
        if default {
            spans.push((0, 0));
        } else if l.range.begin < l.range.end {
            moves.translate_range(l.range.begin, l.range.end, &mut spans);
            normalize(&mut spans);
        }
        for &(a, b) in &spans {
            if default {
                out.push(constants::DW_LLE_default_location.0);
                leb::uleb128(out, data.len() as u64);
            } else if v5 {
                out.push(constants::DW_LLE_start_length.0);
                out.extend_from_slice(&a.to_le_bytes());
                leb::uleb128(out, b - a);
                leb::uleb128(out, data.len() as u64);
            } else {
                let len = u16::try_from(data.len()).map_err(|_| {
                    DebugError::Unsupported("a location expression over 64 KiB".into())
                })?;
                out.extend_from_slice(&a.to_le_bytes());
                out.extend_from_slice(&b.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
            let at = out.len();
            out.extend_from_slice(data);
            copied(out, at, &l.data)?;
        }
    }
    match v5 {
        true => out.push(constants::DW_LLE_end_of_list.0),
        false => out.extend_from_slice(&[0; 16]),
    }
    Ok(())
}

/// Location lists of one unit encoded straight into bytes, for lists whose expressions are
/// all `copyable`. gimli's writer holds every list of a unit as decoded objects until the
/// unit is written; for one very large unit that is most of the memory of a rewrite, while
/// the encoded lists are a few bytes each. The bytes go into the location list section just
/// before gimli writes the unit's own lists (those with expressions it must convert), so
/// each list's section offset is known when its attribute is set.
struct RawLocationLists {
    version: u16,
    /// Length of the location list section when this unit's lists started.
    base: u64,
    bytes: Vec<u8>,
}

impl RawLocationLists {
    fn new(version: u16, sections: &Sections<EndianVec<LittleEndian>>) -> RawLocationLists {
        let base = match version {
            5.. => gw::Writer::len(&sections.debug_loclists.0),
            _ => gw::Writer::len(&sections.debug_loc.0),
        };
        RawLocationLists {
            version,
            base: base as u64,
            bytes: Vec::new(),
        }
    }

    /// Encodes one list with its ranges translated; returns the attribute that refers to it.
    fn write(
        &mut self,
        entries: &[gimli::LocationListEntry<Reader<'_>>],
        moves: &CodeMoves<'_>,
    ) -> Result<AttributeValue, DebugError> {
        let v5 = self.version >= 5;
        if v5 && self.bytes.is_empty() {
            // A DWARF 5 contribution header: length (patched in `finish`), version, address
            // size, segment selector size, no offset table (lists are referred to by offset).
            self.bytes
                .extend_from_slice(&[0, 0, 0, 0, 5, 0, 8, 0, 0, 0, 0, 0]);
        }
        let offset = self.base + self.bytes.len() as u64;
        encode_location_list(&mut self.bytes, v5, entries, moves, |_, _, _| Ok(()))?;
        // gimli has no attribute value for "this offset in the location list section"; a
        // macinfo reference is written the same way (DW_FORM_sec_offset from DWARF 4 on,
        // data4 before, which is what a location list pointer is in those versions).
        Ok(AttributeValue::DebugMacinfoRef(gimli::DebugMacinfoOffset(
            offset as usize,
        )))
    }

    /// Appends the unit's lists to their section; call just before the unit is written.
    fn finish(mut self, sections: &mut Sections<EndianVec<LittleEndian>>) -> Result<(), gw::Error> {
        if self.bytes.is_empty() {
            return Ok(());
        }
        let section = match self.version {
            5.. => {
                let length = (self.bytes.len() - 4) as u32;
                self.bytes[..4].copy_from_slice(&length.to_le_bytes());
                &mut sections.debug_loclists.0
            }
            _ => &mut sections.debug_loc.0,
        };
        debug_assert_eq!(gw::Writer::len(section) as u64, self.base);
        gw::Writer::write(section, &self.bytes)
    }
}

/// Whether an expression can be copied byte for byte: it names no address (which may need
/// translating) and no DIE (whose offset changes in the new `.debug_info`). Most location
/// expressions are like this, and a raw copy takes a fraction of the memory of gimli's
/// decoded form, which matters for a large unit (SQLite's amalgamation is one unit with
/// about a million location list entries).
fn copyable(expression: &gimli::Expression<Reader<'_>>, encoding: gimli::Encoding) -> bool {
    use gimli::Operation as Op;
    let mut ops = expression.operations(encoding);
    loop {
        let op = match ops.next() {
            Ok(Some(op)) => op,
            Ok(None) => return true,
            Err(_) => return false,
        };
        let plain = match op {
            Op::Deref { base_type, .. } | Op::RegisterOffset { base_type, .. } => base_type.0 == 0,
            Op::EntryValue { expression } => copyable(&gimli::Expression(expression), encoding),
            Op::Call { .. }
            | Op::VariableValue { .. }
            | Op::ImplicitPointer { .. }
            | Op::ParameterRef { .. }
            | Op::Address { .. }
            | Op::AddressIndex { .. }
            | Op::ConstantIndex { .. }
            | Op::TypedLiteral { .. }
            | Op::Convert { .. }
            | Op::Reinterpret { .. }
            | Op::WasmLocal { .. }
            | Op::WasmGlobal { .. }
            | Op::WasmStack { .. } => false,
            _ => true,
        };
        if !plain {
            return false;
        }
    }
}

/// A range list with an explicit base of zero, valid in every DWARF version whatever the
/// unit's own base address.
fn range_list(ranges: &[(u64, u64)]) -> RangeList {
    let mut list = Vec::with_capacity(ranges.len() + 1);
    list.push(Range::BaseAddress {
        address: Address::Constant(0),
    });
    list.extend(
        ranges
            .iter()
            .map(|&(a, b)| Range::OffsetPair { begin: a, end: b }),
    );
    RangeList(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_merges_touching_and_overlapping_ranges() {
        let mut r = vec![(30, 40), (10, 20), (20, 25), (5, 5), (35, 50)];
        normalize(&mut r);
        assert_eq!(r, vec![(10, 25), (30, 50)]);
    }

    #[test]
    fn address_ranges_layout() {
        let bytes = address_ranges(&[(0x40, vec![(0x1000, 0x1010)])]);
        // 12-byte header, 4 bytes of padding, one pair and the terminating pair.
        assert_eq!(bytes.len(), 16 + 2 * 16);
        assert_eq!(u32::from_le_bytes(bytes[0..4].try_into().unwrap()), 44);
        assert_eq!(u32::from_le_bytes(bytes[6..10].try_into().unwrap()), 0x40);
        assert_eq!(
            u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
            0x1000
        );
        assert_eq!(u64::from_le_bytes(bytes[24..32].try_into().unwrap()), 0x10);
        assert!(bytes[32..].iter().all(|&b| b == 0));
    }
}
