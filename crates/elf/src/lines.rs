//! The source position of a code address, from `.debug_line`.
//!
//! A compact read of every line program of a binary: its sequences with (address, file,
//! line, column) rows, so that "which source line is this instruction?" is a binary search.
//! `rivet verify` compares the input's answer at each old instruction address with the
//! output's at the new one; reports and profile tools use it to name source lines.
//! Sequences at address zero are code the linker discarded and are ignored.
//!
//! The line program is run here rather than with gimli's row iterator because gcc's
//! partitioned functions (`-freorder-blocks-and-partition`, on at -O2) continue a sequence
//! with a `DW_LNE_set_address` *back* to their cold part, which gimli treats as a
//! tombstone, dropping those rows; debuggers keep them. [`line_segments`] keeps them too, as
//! segments of ascending addresses.

use std::collections::HashMap;

use gimli::{LineInstruction, Reader};

use crate::ElfFile;

/// Why a line program could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("reading DWARF: {0}")]
    Dwarf(#[from] gimli::Error),
    #[error("line programs with {0} are not supported")]
    Unsupported(&'static str),
}

/// One row of a line program, with the registers DWARF defines (file is the program's index).
/// Registers are 32 bits wide here (a program whose registers do not fit is refused): a
/// large program has hundreds of thousands of rows, and half the width is half the memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineRow {
    pub address: u64,
    pub file: u32,
    pub line: u32,
    pub column: u32,
    pub discriminator: u32,
    pub isa: u32,
    pub is_stmt: bool,
    pub basic_block: bool,
    pub prologue_end: bool,
    pub epilogue_begin: bool,
}

/// The state machine's registers while a program runs (64 bits, as DWARF defines them).
#[derive(Clone, Copy)]
struct Registers {
    address: u64,
    file: u64,
    line: u64,
    column: u64,
    discriminator: u64,
    isa: u64,
    is_stmt: bool,
    basic_block: bool,
    prologue_end: bool,
    epilogue_begin: bool,
}

impl Registers {
    fn row(&self) -> Result<LineRow, LineError> {
        let narrow = |v: u64| {
            u32::try_from(v).map_err(|_| LineError::Unsupported("register values above 2^32"))
        };
        Ok(LineRow {
            address: self.address,
            file: narrow(self.file)?,
            line: narrow(self.line)?,
            column: narrow(self.column)?,
            discriminator: narrow(self.discriminator)?,
            isa: narrow(self.isa)?,
            is_stmt: self.is_stmt,
            basic_block: self.basic_block,
            prologue_end: self.prologue_end,
            epilogue_begin: self.epilogue_begin,
        })
    }
}

/// Rows of ascending addresses covering `[start, end)`; each row holds until the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineSegment {
    pub start: u64,
    pub end: u64,
    pub rows: Vec<LineRow>,
}

/// Runs a line program and returns its rows as segments, sorted by start. A sequence is one
/// segment, or several when it jumps back with `DW_LNE_set_address`; the segment left by
/// such a jump ends where the next segment of the program starts (as a debugger that sorts
/// rows by address reads it). Rows of discarded code (address 0 or a tombstone) are dropped.
pub fn line_segments<R: Reader>(
    program: &gimli::IncompleteLineProgram<R>,
) -> Result<Vec<LineSegment>, LineError> {
    let header = program.header();
    if header.maximum_operations_per_instruction() > 1 || header.line_range() == 0 {
        return Err(LineError::Unsupported(
            "VLIW operations or a zero line range",
        ));
    }
    let min_len = u64::from(header.minimum_instruction_length());
    let line_range = u64::from(header.line_range());
    let opcode_base = header.opcode_base();
    let tombstone = |a: u64| a == 0 || a >= u64::MAX - 1;
    let initial = Registers {
        address: 0,
        file: 1,
        line: 1,
        column: 0,
        discriminator: 0,
        isa: 0,
        is_stmt: header.default_is_stmt(),
        basic_block: false,
        prologue_end: false,
        epilogue_begin: false,
    };
    let mut reg = initial;
    let mut discarded = false;
    let mut current: Option<LineSegment> = None;
    // Segments left by a backward jump; their ends are resolved at the end.
    let mut open: Vec<usize> = Vec::new();
    let mut segments: Vec<LineSegment> = Vec::new();
    let mut instructions = header.instructions();
    while let Some(instruction) = instructions.next_instruction(header)? {
        let mut emit = false;
        match instruction {
            LineInstruction::Special(opcode) => {
                let adjusted = u64::from(opcode.wrapping_sub(opcode_base));
                reg.address = reg.address.wrapping_add(min_len * (adjusted / line_range));
                let delta = i64::from(header.line_base()) + (adjusted % line_range) as i64;
                reg.line = reg.line.wrapping_add_signed(delta);
                emit = true;
            }
            LineInstruction::Copy => emit = true,
            LineInstruction::AdvancePc(n) => {
                reg.address = reg.address.wrapping_add(min_len.wrapping_mul(n));
            }
            LineInstruction::AdvanceLine(n) => reg.line = reg.line.wrapping_add_signed(n),
            LineInstruction::SetFile(f) => reg.file = f,
            LineInstruction::SetColumn(c) => reg.column = c,
            LineInstruction::NegateStatement => reg.is_stmt = !reg.is_stmt,
            LineInstruction::SetBasicBlock => reg.basic_block = true,
            LineInstruction::ConstAddPc => {
                let adjusted = u64::from(255u8.wrapping_sub(opcode_base));
                reg.address = reg.address.wrapping_add(min_len * (adjusted / line_range));
            }
            LineInstruction::FixedAddPc(n) => reg.address = reg.address.wrapping_add(u64::from(n)),
            LineInstruction::SetPrologueEnd => reg.prologue_end = true,
            LineInstruction::SetEpilogueBegin => reg.epilogue_begin = true,
            LineInstruction::SetIsa(i) => reg.isa = i,
            LineInstruction::SetDiscriminator(d) => reg.discriminator = d,
            LineInstruction::SetAddress(a) => {
                discarded = tombstone(a);
                if discarded {
                    if let Some(seg) = current.take() {
                        open.push(segments.len());
                        segments.push(seg);
                    }
                } else if a < reg.address
                    && let Some(seg) = current.take()
                {
                    open.push(segments.len());
                    segments.push(seg);
                }
                reg.address = a;
            }
            LineInstruction::EndSequence => {
                if let Some(mut seg) = current.take() {
                    seg.end = reg.address.max(seg.rows.last().map_or(0, |r| r.address));
                    segments.push(seg);
                }
                reg = initial;
                discarded = false;
            }
            // A file defined inside the program would shift the file indices this reader
            // hands out; no compiler in use emits it (DWARF 5 removed it).
            LineInstruction::DefineFile(_) => {
                return Err(LineError::Unsupported("DW_LNE_define_file"));
            }
            LineInstruction::UnknownStandard0(_)
            | LineInstruction::UnknownStandard1(..)
            | LineInstruction::UnknownStandardN(..)
            | LineInstruction::UnknownExtended(..) => {}
        }
        if emit {
            if !discarded {
                current
                    .get_or_insert_with(|| LineSegment {
                        start: reg.address,
                        end: reg.address,
                        rows: Vec::new(),
                    })
                    .rows
                    .push(reg.row()?);
            }
            reg.discriminator = 0;
            reg.basic_block = false;
            reg.prologue_end = false;
            reg.epilogue_begin = false;
        }
    }
    // A program that stops without ending its sequence: keep what it described.
    if let Some(seg) = current.take() {
        open.push(segments.len());
        segments.push(seg);
    }
    let mut starts: Vec<u64> = segments.iter().map(|s| s.start).collect();
    starts.sort_unstable();
    for &i in &open {
        let last = segments[i]
            .rows
            .last()
            .map_or(segments[i].start, |r| r.address);
        let k = starts.partition_point(|&s| s <= last);
        segments[i].end = starts.get(k).copied().unwrap_or(last + 1);
    }
    segments.sort_by_key(|s| s.start);
    Ok(segments)
}

/// A position in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourcePosition {
    /// Index into [`LineTable::file_name`].
    pub file: u32,
    pub line: u32,
    pub column: u32,
}

#[derive(Debug)]
struct Sequence {
    start: u64,
    end: u64,
    rows: Vec<(u64, SourcePosition)>,
}

/// All line rows of a binary.
#[derive(Debug, Default)]
pub struct LineTable {
    sequences: Vec<Sequence>,
    files: Vec<String>,
}

impl LineTable {
    /// Reads the line programs of `elf`; `Ok(None)` when it has no `.debug_line`.
    pub fn read(elf: &ElfFile<'_>) -> Result<Option<LineTable>, LineError> {
        if elf.section_by_name(".debug_line").is_none() {
            return Ok(None);
        }
        let dwarf = elf.dwarf()?;
        let mut table = LineTable::default();
        let mut file_ids: HashMap<String, u32> = HashMap::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next()? {
            let unit = dwarf.unit(header)?;
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            let header = program.header();
            let mut names: HashMap<u32, u32> = HashMap::new();
            for seg in line_segments(&program)? {
                let mut rows = Vec::with_capacity(seg.rows.len());
                for row in &seg.rows {
                    let file = match names.get(&row.file) {
                        Some(&id) => id,
                        None => {
                            let id = match header.file(u64::from(row.file)) {
                                Some(entry) => {
                                    let mut path = String::new();
                                    if let Some(dir) = entry.directory(header) {
                                        path.push_str(
                                            &dwarf.attr_string(&unit, dir)?.to_string_lossy(),
                                        );
                                        path.push('/');
                                    }
                                    path.push_str(
                                        &dwarf
                                            .attr_string(&unit, entry.path_name())?
                                            .to_string_lossy(),
                                    );
                                    let next = file_ids.len() as u32;
                                    *file_ids.entry(path).or_insert(next)
                                }
                                None => u32::MAX,
                            };
                            names.insert(row.file, id);
                            id
                        }
                    };
                    rows.push((
                        row.address,
                        SourcePosition {
                            file,
                            line: row.line,
                            column: row.column,
                        },
                    ));
                }
                table.sequences.push(Sequence {
                    start: seg.start,
                    end: seg.end,
                    rows,
                });
            }
        }
        table.sequences.sort_by_key(|s| s.start);
        table.files = vec![String::new(); file_ids.len()];
        for (path, id) in file_ids {
            table.files[id as usize] = path;
        }
        Ok(Some(table))
    }

    /// The position of the instruction at `addr`, if a line row covers it.
    pub fn at(&self, addr: u64) -> Option<SourcePosition> {
        let k = self.sequences.partition_point(|s| s.start <= addr);
        let seq = &self.sequences[k.checked_sub(1)?];
        if addr >= seq.end {
            return None;
        }
        let r = seq.rows.partition_point(|r| r.0 <= addr);
        Some(seq.rows[r.checked_sub(1)?].1)
    }

    /// The path of file `index` (directory and name as the line program gives them).
    pub fn file_name(&self, index: u32) -> &str {
        self.files.get(index as usize).map_or("?", String::as_str)
    }

    /// Number of address ranges (sequences) described.
    pub fn sequence_count(&self) -> usize {
        self.sequences.len()
    }
}
