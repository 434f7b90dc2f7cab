//! Where functions start and end.
//!
//! Symbols with sizes are the primary source; several symbols at one address are aliases of
//! one function. An FDE gives the extent of a symbol without size and reveals code that has no
//! symbol at all. A symbol lying inside another function's extent is a secondary entry point
//! of it; two extents that overlap without nesting cannot both be right, so both functions are
//! skipped. Gaps between functions are padding when they hold only nops, int3 or zeros.

use rivet_arch::{Inst, Isa};
use rivet_elf::eh_frame::Fde;
use rivet_elf::symbols::{Symbol, SymbolKind};
use rivet_elf::{ElfFile, Vaddr, VaddrRange};
use rivet_ir::{Origin, PartKind, SkipReason};

/// A function found before disassembly.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub range: VaddrRange,
    /// Names of every symbol at the start: globals first, then by name.
    pub names: Vec<String>,
    pub file: Option<String>,
    pub is_local: bool,
    pub origin: Origin,
    pub secondary_entries: Vec<Vaddr>,
    pub padding_after: u64,
    pub skip: Option<SkipReason>,
    /// Index (into the candidate list) of the parent of a compiler-split part.
    pub parent: Option<(usize, PartKind)>,
}

/// Names of sections that hold stubs rather than functions.
fn is_stub_section(name: &str) -> bool {
    matches!(name, ".plt" | ".plt.sec" | ".plt.got" | ".iplt")
}

struct Sym<'a> {
    start: Vaddr,
    size: u64,
    name: &'a str,
    global: bool,
    file: Option<&'a str>,
}

pub fn find_candidates(elf: &ElfFile, symbols: &[Symbol], fdes: &[Fde]) -> Vec<Candidate> {
    let isa = Isa::of(elf);
    let code_section = |addr: Vaddr| {
        elf.section_containing(addr)
            .filter(|s| s.is_exec() && !is_stub_section(&s.name))
    };
    let mut syms: Vec<Sym> = symbols
        .iter()
        .filter(|s| {
            !s.is_undefined
                && !s.is_absolute
                && (s.is_function()
                    || (s.kind == SymbolKind::NoType && !s.is_local() && s.size > 0))
                && !s.name.is_empty()
                && code_section(s.value).is_some()
        })
        .map(|s| Sym {
            start: s.value,
            size: s.size,
            name: s.name.as_ref(),
            global: !s.is_local(),
            file: s.file.as_deref(),
        })
        .collect();
    // Deterministic grouping: by address, then globals first, then by name.
    syms.sort_by(|a, b| (a.start, !a.global, a.name).cmp(&(b.start, !b.global, b.name)));

    let mut cands: Vec<Candidate> = Vec::new();
    for s in &syms {
        if let Some(last) = cands.last_mut()
            && last.range.start == s.start
        {
            if !last.names.iter().any(|n| n == s.name) {
                last.names.push(s.name.to_string());
            }
            if s.size > last.range.len() {
                last.range = VaddrRange::new(s.start, s.size);
                last.origin = Origin::Symbol;
            }
            continue;
        }
        cands.push(Candidate {
            range: VaddrRange::new(s.start, s.size),
            names: vec![s.name.to_string()],
            file: if s.global {
                None
            } else {
                s.file.map(str::to_string)
            },
            is_local: !s.global,
            origin: Origin::Symbol,
            secondary_entries: Vec::new(),
            padding_after: 0,
            skip: None,
            parent: None,
        });
    }

    // Sizes from FDEs for symbols without one; functions for FDEs without symbols.
    let fde_at = |addr: Vaddr| {
        let pos = fdes.partition_point(|f| f.range.start < addr);
        fdes.get(pos).filter(|f| f.range.start == addr)
    };
    for c in cands.iter_mut().filter(|c| c.range.is_empty()) {
        if let Some(fde) = fde_at(c.range.start) {
            c.range = fde.range;
            c.origin = Origin::SymbolSizedByFde;
        }
    }
    let mut from_fdes = Vec::new();
    {
        let starts: Vec<Vaddr> = cands.iter().map(|c| c.range.start).collect();
        for fde in fdes {
            if code_section(fde.range.start).is_none() {
                continue;
            }
            let pos = starts.partition_point(|&s| s <= fde.range.start);
            let covered = pos > 0 && {
                let c = &cands[pos - 1];
                c.range.start == fde.range.start || c.range.contains(fde.range.start)
            };
            if !covered {
                from_fdes.push(Candidate {
                    range: fde.range,
                    names: vec![rivet_ir::unnamed_function_name(fde.range.start)],
                    file: None,
                    is_local: true,
                    origin: Origin::Fde,
                    secondary_entries: Vec::new(),
                    padding_after: 0,
                    skip: None,
                    parent: None,
                });
            }
        }
    }
    cands.extend(from_fdes);
    cands.sort_by_key(|c| c.range.start);
    cands.dedup_by_key(|c| c.range.start);

    // Symbols without size and without FDE (crtstuff's helpers, `_init`, hand-written asm):
    // the code runs up to the next function, minus trailing padding. CFG construction then
    // proves the extent: a function that would run into its neighbour is skipped.
    for i in 0..cands.len() {
        if cands[i].range.is_empty() {
            let start = cands[i].range.start;
            let section_end = code_section(start).map_or(start, |s| s.range().end);
            let next = cands
                .get(i + 1)
                .map_or(section_end, |n| n.range.start.min(section_end));
            let end = elf
                .bytes_at(start, next.checked_since(start).unwrap_or(0))
                .map_or(start, |bytes| start + code_length(isa, bytes, start));
            cands[i].range = VaddrRange { start, end };
            if end > start {
                cands[i].origin = Origin::SymbolSizedByNext;
            } else {
                cands[i].range = VaddrRange {
                    start,
                    end: next.max(start),
                };
                cands[i].skip = Some(SkipReason::UnknownSize { at: start });
            }
        }
    }

    // A symbol claiming bytes past its section (corrupt or hostile input) is cut at the
    // section's end and skipped.
    for c in cands.iter_mut() {
        let Some(section) = code_section(c.range.start) else {
            continue;
        };
        let end = section.range().end;
        if c.range.end > end || c.range.end < c.range.start {
            c.range.end = end;
            c.skip.get_or_insert(SkipReason::SizeBeyondSection {
                at: c.range.start,
                section_end: end,
            });
        }
    }

    // Nesting: symbols inside another function become its secondary entries.
    let mut merged: Vec<Candidate> = Vec::with_capacity(cands.len());
    for c in cands {
        if let Some(outer) = merged.last_mut()
            && outer.range.contains(c.range.start)
        {
            if c.range.end <= outer.range.end {
                outer.secondary_entries.push(c.range.start);
                continue;
            }
            let outer_start = outer.range.start;
            outer.skip.get_or_insert(SkipReason::OverlappingSymbols {
                at: c.range.start,
                other: outer_start,
            });
            let mut c = c;
            c.skip.get_or_insert(SkipReason::OverlappingSymbols {
                at: c.range.start,
                other: outer_start,
            });
            merged.push(c);
            continue;
        }
        merged.push(c);
    }
    let mut cands = merged;

    // Padding between functions.
    for i in 0..cands.len() {
        let end = cands[i].range.end;
        let Some(section) = code_section(cands[i].range.start) else {
            continue;
        };
        let limit = cands.get(i + 1).map_or(section.range().end, |n| {
            n.range.start.min(section.range().end)
        });
        if limit <= end {
            continue;
        }
        if let Some(bytes) = elf.bytes_at(end, limit - end)
            && isa.is_filler(bytes, end)
        {
            cands[i].padding_after = limit - end;
        }
    }

    link_parts(&mut cands);
    cands
}

/// The ranges of executable sections that mapping symbols mark as data (sorted, disjoint):
/// from each `$d` to the next mapping symbol of its section (`$x` or another `$d`), or to the
/// section's end. AArch64 toolchains emit them (ELF for the Arm 64-bit Architecture, "Mapping
/// symbols"; `$d.N` and `$x.N` are the same with a suffix); x86-64 ones do not, and get none.
pub(crate) fn data_in_code(elf: &ElfFile, symbols: &[Symbol]) -> Vec<VaddrRange> {
    let mapping = |name: &str, kind: &str| {
        name == kind || name.strip_prefix(kind).is_some_and(|r| r.starts_with('.'))
    };
    let mut marks: Vec<(usize, Vaddr, bool)> = symbols
        .iter()
        .filter(|s| s.kind == SymbolKind::NoType && s.is_local())
        .filter_map(|s| {
            let section = s.section?;
            let is_data = mapping(&s.name, "$d");
            (is_data || mapping(&s.name, "$x")).then_some((section, s.value, is_data))
        })
        .filter(|(section, _, _)| elf.section(*section).is_some_and(|s| s.is_exec()))
        .collect();
    marks.sort_by_key(|m| (m.0, m.1, !m.2));
    let mut out = Vec::new();
    for (k, &(section, start, is_data)) in marks.iter().enumerate() {
        if !is_data {
            continue;
        }
        let section_end = elf.section(section).map_or(start, |s| s.addr + s.size);
        let end = marks[k + 1..]
            .iter()
            .find(|m| m.0 == section && m.1 > start)
            .map_or(section_end, |m| m.1.min(section_end));
        if end > start {
            out.push(VaddrRange { start, end });
        }
    }
    out.sort_by_key(|r| r.start);
    // Merge overlaps (a `$d` right after another).
    out.dedup_by(|later, earlier| {
        if later.start <= earlier.end {
            earlier.end = earlier.end.max(later.end);
            true
        } else {
            false
        }
    });
    out
}

/// Length of `bytes` without trailing filler (zeros, fill traps, nops).
fn code_length(isa: Isa, bytes: &[u8], addr: Vaddr) -> u64 {
    let insts = isa.decode_all(bytes, addr);
    let is_filler = |i: &Inst| {
        let offset = (i.addr() - addr) as usize;
        let raw = &bytes[offset..offset + i.len() as usize];
        i.is_nop() || i.is_fill_trap() || i.is_invalid() || raw.iter().all(|&b| b == 0)
    };
    insts
        .iter()
        .rposition(|i| !is_filler(i))
        .map_or(0, |p| insts[p].end() - addr)
}

/// Links `foo.cold[.N]` and `foo.part.N` to `foo`, preferring a parent from the same file.
fn link_parts(cands: &mut [Candidate]) {
    let mut by_name: std::collections::HashMap<&str, Vec<usize>> = Default::default();
    for (i, c) in cands.iter().enumerate() {
        for n in &c.names {
            by_name.entry(n.as_str()).or_default().push(i);
        }
    }
    let mut links = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        let name = &c.names[0];
        let Some((base, kind)) = split_part_name(name) else {
            continue;
        };
        let Some(options) = by_name.get(base) else {
            continue;
        };
        let parent = options
            .iter()
            .copied()
            .find(|&p| cands[p].file == c.file)
            .or_else(|| (options.len() == 1).then(|| options[0]));
        if let Some(p) = parent.filter(|&p| p != i) {
            links.push((i, p, kind));
        }
    }
    for (i, p, kind) in links {
        cands[i].parent = Some((p, kind));
    }
}

/// `foo.cold` / `foo.cold.3` -> (foo, cold); `foo.part.0` -> (foo, part). Suffixes of the
/// parent itself (`foo.constprop.0.cold`) stay in the base name.
pub fn split_part_name(name: &str) -> Option<(&str, PartKind)> {
    let strip_number = |s: &str| -> Option<usize> {
        let (head, tail) = s.rsplit_once('.')?;
        (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit())).then_some(head.len())
    };
    if let Some(len) = strip_number(name) {
        let head = &name[..len];
        return if let Some(base) = head.strip_suffix(".part") {
            Some((base, PartKind::PartialInline))
        } else {
            head.strip_suffix(".cold")
                .map(|base| (base, PartKind::ColdFragment))
        };
    }
    name.strip_suffix(".cold")
        .map(|base| (base, PartKind::ColdFragment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names() {
        assert_eq!(
            split_part_name("main.cold"),
            Some(("main", PartKind::ColdFragment))
        );
        assert_eq!(
            split_part_name("f.cold.2"),
            Some(("f", PartKind::ColdFragment))
        );
        assert_eq!(
            split_part_name("f.part.0"),
            Some(("f", PartKind::PartialInline))
        );
        assert_eq!(
            split_part_name("g.constprop.0.cold"),
            Some(("g.constprop.0", PartKind::ColdFragment))
        );
        assert_eq!(split_part_name("f.constprop.0"), None);
        assert_eq!(split_part_name("coldness"), None);
    }
}
