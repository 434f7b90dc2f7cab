//! Unwind and exception tables of the output: which frames exist, with which rows and LSDAs.
//!
//! Every fragment of rewritten code gets its own FDE, whose rows are the input's rows looked
//! up at the original address each piece of the fragment stands for, and, when the function
//! had an LSDA, its own LSDA listing the new ranges of the original call sites (landing pads
//! translated, possibly into another fragment). Code that stays keeps its rows; its LSDA is
//! rewritten only when a landing pad moved. In relocation mode the original bodies of moved
//! functions stay mapped (a reference Rivet missed still reaches working code), so their
//! original FDEs and LSDAs are kept as well; in place mode the rewritten range is covered by
//! the new FDE instead.
//!
//! The output is laid out as `.gcc_except_table`, `.eh_frame`, `.eh_frame_hdr`, in that order
//! from a given address, because FDEs point to LSDAs and the header points to FDEs.

use rivet_elf::eh_frame::CfiRow;
use rivet_elf::lsda::Lsda;
use rivet_elf::{ElfFile, Vaddr, VaddrRange};
use rivet_ir::Program;
use rivet_ir::layout::Layout;

use crate::code::{AddressMap, FragmentPlan};
use crate::lsda::{NewCallSite, write_lsda};
use crate::unwind::{CieSpec, FrameSpec, write_eh_frame, write_eh_frame_hdr};

/// Why unwind tables could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error(transparent)]
    Elf(#[from] rivet_elf::ElfError),
    #[error("LSDA of the code at {at}: {source}")]
    Lsda {
        at: Vaddr,
        source: crate::lsda::LsdaError,
    },
    #[error(transparent)]
    Unwind(#[from] crate::unwind::UnwindError),
    #[error("the LSDA at {at} is outside every section")]
    LsdaOutsideSections { at: Vaddr },
    #[error("landing pad {pad} of the code at {at} is not an instruction of the rewritten code")]
    LandingPad { at: Vaddr, pad: Vaddr },
}

/// The three tables, each with its address.
#[derive(Clone, Debug, Default)]
pub struct UnwindTables {
    pub gcc_except_table: (Vaddr, Vec<u8>),
    pub eh_frame: (Vaddr, Vec<u8>),
    pub eh_frame_hdr: (Vaddr, Vec<u8>),
    pub frames: usize,
    pub lsdas: usize,
}

struct LsdaJob {
    original: Lsda,
    fragment_start: Vaddr,
    call_sites: Vec<NewCallSite>,
}

enum LsdaChoice {
    None,
    Keep(Vaddr),
    New(Box<LsdaJob>),
}

struct FrameJob {
    range: VaddrRange,
    rows: Vec<CfiRow>,
    cie: CieSpec,
    lsda: LsdaChoice,
}

/// Rows of `rows` restricted to `piece`.
fn clip_rows(rows: &[CfiRow], piece: VaddrRange) -> Vec<CfiRow> {
    rows.iter()
        .filter(|r| r.range.start < piece.end && r.range.end > piece.start)
        .map(|r| {
            let mut r = r.clone();
            r.range.start = r.range.start.max(piece.start);
            r.range.end = r.range.end.min(piece.end);
            r
        })
        .collect()
}

fn same_state(a: &CfiRow, b: &CfiRow) -> bool {
    a.cfa == b.cfa && a.saved == b.saved && a.args_size == b.args_size
}

/// `range` minus `holes` (sorted, disjoint).
fn subtract(range: VaddrRange, holes: &[VaddrRange]) -> Vec<VaddrRange> {
    let mut out = Vec::new();
    let mut cursor = range.start;
    let first = holes.partition_point(|h| h.end <= range.start);
    for h in holes[first..].iter().take_while(|h| h.start < range.end) {
        if h.start > cursor {
            out.push(VaddrRange {
                start: cursor,
                end: h.start,
            });
        }
        cursor = cursor.max(h.end);
    }
    if cursor < range.end {
        out.push(VaddrRange {
            start: cursor,
            end: range.end,
        });
    }
    out
}

/// Builds the tables for the output, placed from `start`.
pub fn build(
    elf: &ElfFile<'_>,
    program: &Program,
    layout: &Layout,
    placed: &[(FragmentPlan, Vaddr)],
    map: &AddressMap,
    start: Vaddr,
) -> Result<Option<UnwindTables>, FrameError> {
    let Some(eh) = elf.eh_frame()? else {
        return Ok(None);
    };
    let translate_pad = |at: Vaddr, pad: Vaddr| {
        map.translate(program, pad)
            .ok_or(FrameError::LandingPad { at, pad })
    };
    let mut jobs: Vec<FrameJob> = Vec::new();

    // Code that stays (and, in relocation mode, the original bodies of moved code).
    let mut rewritten: Vec<VaddrRange> = program
        .functions
        .iter()
        .filter(|f| layout.is_rewritten(f.id))
        .map(|f| f.range)
        .collect();
    rewritten.sort_by_key(|r| r.start);
    for fde in &eh.fdes {
        let pieces = if layout.in_place {
            subtract(fde.range, &rewritten)
        } else {
            vec![fde.range]
        };
        if pieces.is_empty() {
            continue;
        }
        let rows = eh.rows(fde)?;
        let old_body = !layout.in_place
            && subtract(fde.range, &rewritten).as_slice() != [fde.range].as_slice();
        for piece in pieces {
            let lsda = match fde.lsda {
                None => LsdaChoice::None,
                Some(addr) if old_body => LsdaChoice::Keep(addr),
                Some(addr) => {
                    let original = elf.lsda(addr, fde.range.start)?;
                    let mut moved = piece != fde.range;
                    let mut call_sites = Vec::new();
                    for cs in &original.call_sites {
                        let cs_range = VaddrRange::new(cs.start, cs.len);
                        let start = cs_range.start.max(piece.start);
                        let end = cs_range.end.min(piece.end);
                        if start >= end {
                            continue;
                        }
                        let landing_pad = match cs.landing_pad {
                            Some(pad) => {
                                let new = translate_pad(cs.start, pad)?;
                                moved |= new != pad;
                                Some(new)
                            }
                            None => None,
                        };
                        call_sites.push(NewCallSite {
                            start,
                            len: end - start,
                            landing_pad,
                            action: cs.action,
                        });
                    }
                    if moved {
                        LsdaChoice::New(Box::new(LsdaJob {
                            original,
                            fragment_start: piece.start,
                            call_sites,
                        }))
                    } else {
                        LsdaChoice::Keep(addr)
                    }
                }
            };
            jobs.push(FrameJob {
                range: piece,
                rows: clip_rows(&rows, piece),
                cie: CieSpec::of_fde(fde),
                lsda,
            });
        }
    }

    // Rewritten fragments.
    for (plan, addr) in placed {
        let f = program.function(plan.fragment.function);
        let Some(fde) = eh.fde_for(f.range.start) else {
            continue;
        };
        // Discovery keeps every function's rows only when asked (`CfiRows::Keep`); otherwise
        // it checked them (a function whose rows cannot be read is not moved) and they are
        // read again here, for the moved functions alone.
        let read;
        let cfi: &[CfiRow] = if f.cfi.is_empty() {
            read = eh.rows(fde)?;
            &read
        } else {
            &f.cfi
        };
        if cfi.is_empty() {
            continue;
        }
        let pieces = plan.pieces(f);
        let mut rows: Vec<CfiRow> = Vec::new();
        for p in &pieces {
            let Some(row) = rivet_ir::cfi_at(cfi, p.state_at).or(cfi.last()) else {
                continue;
            };
            let range = VaddrRange::new(*addr + p.offset, p.size);
            match rows.last_mut() {
                Some(last) if last.range.end == range.start && same_state(last, row) => {
                    last.range.end = range.end;
                }
                _ => {
                    let mut row = row.clone();
                    row.range = range;
                    rows.push(row);
                }
            }
        }
        let Some(first) = rows.first() else { continue };
        let range = VaddrRange {
            start: first.range.start,
            end: rows.last().map_or(first.range.end, |r| r.range.end),
        };
        let lsda = match f.lsda {
            None => LsdaChoice::None,
            Some(lsda_addr) => {
                let original = elf.lsda(lsda_addr, fde.range.start)?;
                // Call-site records do not overlap: sorted by start, the one covering an
                // address is the last that starts at or before it.
                let mut sites: Vec<&rivet_elf::lsda::CallSite> =
                    original.call_sites.iter().collect();
                sites.sort_by_key(|cs| cs.start);
                let mut call_sites: Vec<NewCallSite> = Vec::new();
                for p in &pieces {
                    let Some(inst) = p.inst else { continue };
                    let old = f.insts[inst as usize].addr();
                    let k = sites.partition_point(|cs| cs.start <= old);
                    let Some(cs) = k
                        .checked_sub(1)
                        .map(|k| sites[k])
                        .filter(|cs| old < cs.start + cs.len)
                    else {
                        continue;
                    };
                    let landing_pad = match cs.landing_pad {
                        Some(pad) => Some(translate_pad(old, pad)?),
                        None => None,
                    };
                    let start = *addr + p.offset;
                    match call_sites.last_mut() {
                        Some(last)
                            if last.start + last.len == start
                                && last.landing_pad == landing_pad
                                && last.action == cs.action =>
                        {
                            last.len += p.size;
                        }
                        _ => call_sites.push(NewCallSite {
                            start,
                            len: p.size,
                            landing_pad,
                            action: cs.action,
                        }),
                    }
                }
                LsdaChoice::New(Box::new(LsdaJob {
                    original,
                    fragment_start: range.start,
                    call_sites,
                }))
            }
        };
        jobs.push(FrameJob {
            range,
            rows,
            cie: CieSpec::of_fde(fde),
            lsda,
        });
    }
    jobs.sort_by_key(|j| j.range.start);

    // LSDAs first: FDEs need their addresses.
    let lsda_start = align(start, 4);
    let mut lsda_bytes: Vec<u8> = Vec::new();
    let mut specs = Vec::with_capacity(jobs.len());
    let mut lsdas = 0;
    for job in jobs {
        let lsda = match job.lsda {
            LsdaChoice::None => None,
            LsdaChoice::Keep(addr) => Some(addr),
            LsdaChoice::New(j) => {
                let pad = (align(lsda_start + lsda_bytes.len() as u64, 4)
                    - (lsda_start + lsda_bytes.len() as u64)) as usize;
                lsda_bytes.extend(std::iter::repeat_n(0, pad));
                let at = lsda_start + lsda_bytes.len() as u64;
                let section = elf.section_containing(j.original.addr).ok_or(
                    FrameError::LsdaOutsideSections {
                        at: j.original.addr,
                    },
                )?;
                let bytes = write_lsda(
                    &j.original,
                    section.data,
                    section.addr,
                    j.fragment_start,
                    &j.call_sites,
                    at,
                )
                .map_err(|source| FrameError::Lsda {
                    at: j.fragment_start,
                    source,
                })?;
                lsda_bytes.extend_from_slice(&bytes);
                lsdas += 1;
                Some(at)
            }
        };
        specs.push(FrameSpec {
            range: job.range,
            rows: job.rows,
            cie: job.cie,
            lsda,
        });
    }
    let eh_start = align(lsda_start + lsda_bytes.len() as u64, 8);
    let eh_frame = write_eh_frame(program.info.isa, &specs, eh_start)?;
    let hdr_start = align(eh_start + eh_frame.bytes.len() as u64, 4);
    let hdr = write_eh_frame_hdr(hdr_start, eh_start, &eh_frame.fdes)?;
    Ok(Some(UnwindTables {
        gcc_except_table: (lsda_start, lsda_bytes),
        eh_frame: (eh_start, eh_frame.bytes),
        eh_frame_hdr: (hdr_start, hdr),
        frames: specs.len(),
        lsdas,
    }))
}

fn align(v: Vaddr, a: u64) -> Vaddr {
    Vaddr(v.get().div_ceil(a) * a)
}
