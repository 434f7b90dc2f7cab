//! LSDAs (`.gcc_except_table`): the C++ exception tables of functions.
//!
//! An LSDA tells the personality routine, for each call site of a function, where to land when
//! an exception passes through it and which action (catch clauses, cleanups) applies. Rivet must
//! know landing pads to build a correct CFG (they are block entries reached by no branch) and
//! must rewrite these tables when code moves. gimli stops at the LSDA pointer, and the one crate
//! that parses LSDAs is a single-author first release, so the (small) format is read here.
//!
//! Layout: LPStart encoding [+ LPStart], TType encoding [+ uleb offset to the type table end],
//! call-site encoding, uleb call-site table length, the call-site records, then the action
//! table; the type table grows backwards from its end (`ttype_base`), and exception
//! specifications (negative filters) are uleb lists of type indices after it.
//!
//! Besides what the personality routine would compute, the result records the extent of each
//! table that is in use (`action_table`, `type_table`, `exception_specs`) so a writer can copy
//! them verbatim into a new LSDA for moved code. Pointers follow libgcc's rule: an encoded
//! value of 0 is a null pointer whatever its application (a type entry of 0 is `catch (...)`).

use crate::addr::{Vaddr, VaddrRange};
use crate::error::{ElfError, Result};
use crate::file::ElfFile;

const DW_EH_PE_OMIT: u8 = 0xff;

/// One call-site record: calls in `start..start+len` land at `landing_pad` when unwound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    pub start: Vaddr,
    pub len: u64,
    /// `None` when the call site has no landing pad (exceptions keep propagating).
    pub landing_pad: Option<Vaddr>,
    /// 0 for cleanup-only; otherwise 1 + offset into the action table.
    pub action: u64,
    /// Type filters of the action chain (positive: catch, negative: exception spec, 0: cleanup).
    pub filters: Vec<i64>,
}

/// A parsed LSDA.
#[derive(Clone, Debug)]
pub struct Lsda {
    pub addr: Vaddr,
    /// Base address of landing pads: explicit LPStart, or the start of the function's FDE.
    pub lpstart: Vaddr,
    pub lpstart_explicit: bool,
    pub ttype_encoding: u8,
    /// End of the type table (entries are indexed backwards from here), if there is one.
    pub ttype_base: Option<Vaddr>,
    pub call_site_encoding: u8,
    pub call_sites: Vec<CallSite>,
    /// Type-table entries used by catch clauses (positive filters) or listed in exception
    /// specifications, by type index (1-based), sorted, each with the address it resolves to
    /// (0 for `catch (...)`; the slot address for indirect encodings).
    pub type_entries: Vec<(i64, Vaddr)>,
    /// First byte after the action table (end of what the LSDA's header and tables span,
    /// excluding the type table which may extend further).
    pub end: Vaddr,
    /// The call-site records, without the header that gives their length.
    pub call_site_table: VaddrRange,
    /// The action records reachable from the call sites: from the end of the call-site table
    /// (where action offsets count from) to the end of the last record reached. Every record
    /// reached lies inside, so the range can be copied as is.
    pub action_table: VaddrRange,
    /// Size in bytes of one type-table entry; `None` without a type table.
    pub ttype_entry_size: Option<u64>,
    /// The type-table entries in use: the `count` entries just below `ttype_base`, `count`
    /// being the highest type index used. Empty when no index is used.
    pub type_table: VaddrRange,
    /// The exception-specification lists in use, starting at `ttype_base` (a negative filter
    /// `f` names the list at `ttype_base + (-f - 1)`). Empty when there are none.
    pub exception_specs: VaddrRange,
    /// The type indices of each exception specification used, by (negative) filter, sorted.
    /// An empty list is `throw()`.
    pub spec_lists: Vec<(i64, Vec<u64>)>,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    base: Vaddr,
    pos: usize,
}

fn err(detail: impl ToString) -> ElfError {
    ElfError::malformed(".gcc_except_table", detail)
}

impl Cursor<'_> {
    fn addr(&self) -> Vaddr {
        self.base + self.pos as u64
    }
    fn u8(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| err("truncated LSDA"))?;
        self.pos += 1;
        Ok(b)
    }
    fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        let b = self
            .bytes
            .get(self.pos..self.pos + N)
            .ok_or_else(|| err("truncated LSDA"))?;
        self.pos += N;
        Ok(b.try_into().unwrap())
    }
    fn uleb(&mut self) -> Result<u64> {
        let mut result = 0u64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift < 64 {
                result |= u64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                return Ok(result);
            }
            if shift > 70 {
                return Err(err("LEB128 value too long"));
            }
        }
    }
    fn sleb(&mut self) -> Result<i64> {
        let mut result = 0i64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift < 64 {
                result |= i64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    result |= -1i64 << shift;
                }
                return Ok(result);
            }
            if shift > 70 {
                return Err(err("LEB128 value too long"));
            }
        }
    }

    /// Reads a DW_EH_PE-encoded value. Returns the value after applying pcrel (the only
    /// application GCC and Clang use in LSDAs); indirect values are returned as the address of
    /// the pointer slot. A raw 0 stays 0, as in libgcc's `read_encoded_value`: it is the null
    /// pointer (`catch (...)` in a type table), not "this field's address".
    fn encoded(&mut self, encoding: u8) -> Result<u64> {
        let field_addr = self.addr();
        let raw: u64 = match encoding & 0x0f {
            0x00 => u64::from_le_bytes(self.fixed::<8>()?),
            0x01 => self.uleb()?,
            0x02 => u64::from(u16::from_le_bytes(self.fixed::<2>()?)),
            0x03 => u64::from(u32::from_le_bytes(self.fixed::<4>()?)),
            0x04 => u64::from_le_bytes(self.fixed::<8>()?),
            0x09 => self.sleb()? as u64,
            0x0a => i64::from(i16::from_le_bytes(self.fixed::<2>()?)) as u64,
            0x0b => i64::from(i32::from_le_bytes(self.fixed::<4>()?)) as u64,
            0x0c => u64::from_le_bytes(self.fixed::<8>()?),
            other => return Err(err(format!("unsupported pointer format {other:#x}"))),
        };
        if raw == 0 {
            return Ok(0);
        }
        match encoding & 0x70 {
            0x00 => Ok(raw),
            0x10 => Ok(field_addr.get().wrapping_add(raw)),
            other => Err(err(format!("unsupported pointer application {other:#x}"))),
        }
    }
}

/// Size in bytes of one type-table entry with this encoding.
pub fn encoded_size(encoding: u8) -> Option<u64> {
    match encoding & 0x0f {
        0x00 | 0x04 | 0x0c => Some(8),
        0x02 | 0x0a => Some(2),
        0x03 | 0x0b => Some(4),
        _ => None,
    }
}

/// Action chains are short (one record per catch clause); the bound stops a malicious cycle.
const MAX_ACTION_CHAIN: usize = 256;

impl ElfFile<'_> {
    /// Parses the LSDA at `addr` for the function (or fragment) whose FDE starts at
    /// `function_start`.
    pub fn lsda(&self, addr: Vaddr, function_start: Vaddr) -> Result<Lsda> {
        let section = self
            .section_containing(addr)
            .ok_or_else(|| err(format!("LSDA at {addr} is outside every section")))?;
        parse_lsda(section.data, section.addr, addr, function_start)
    }
}

/// Parses the LSDA at `addr`, inside `bytes` which are mapped at `base`.
pub fn parse_lsda(bytes: &[u8], base: Vaddr, addr: Vaddr, function_start: Vaddr) -> Result<Lsda> {
    let start = addr
        .checked_since(base)
        .filter(|&o| o < bytes.len() as u64)
        .ok_or_else(|| err(format!("LSDA at {addr} is outside its section")))?;
    let mut c = Cursor {
        bytes,
        base,
        pos: start as usize,
    };
    // Converts a position in `bytes` to its address.
    let at = |pos: usize| base + pos as u64;

    let lpstart_encoding = c.u8()?;
    let (lpstart, lpstart_explicit) = if lpstart_encoding == DW_EH_PE_OMIT {
        (function_start, false)
    } else {
        (Vaddr(c.encoded(lpstart_encoding)?), true)
    };
    let ttype_encoding = c.u8()?;
    let ttype_base = if ttype_encoding == DW_EH_PE_OMIT {
        None
    } else {
        let off = c.uleb()?;
        let base_pos = (c.pos as u64)
            .checked_add(off)
            .ok_or_else(|| err(format!("type table offset of LSDA at {addr} overflows")))?;
        Some(base_pos)
    };
    let call_site_encoding = c.u8()?;
    let table_len = c.uleb()?;
    let table_start = c.pos;
    let table_end = usize::try_from(table_len)
        .ok()
        .and_then(|len| c.pos.checked_add(len))
        .filter(|&end| end <= c.bytes.len())
        .ok_or_else(|| {
            err(format!(
                "call-site table of LSDA at {addr} runs past the section"
            ))
        })?;
    let mut call_sites = Vec::new();
    while c.pos < table_end {
        let start = c.encoded(call_site_encoding)?;
        let len = c.encoded(call_site_encoding)?;
        let lp = c.encoded(call_site_encoding)?;
        let action = c.uleb()?;
        call_sites.push(CallSite {
            start: function_start + start,
            len,
            landing_pad: (lp != 0).then(|| lpstart + lp),
            action,
            filters: Vec::new(),
        });
    }
    if c.pos != table_end {
        return Err(err(format!(
            "call-site table of LSDA at {addr} has a partial record"
        )));
    }

    // Action chains: record the filters of each call site and how far the records reach.
    let action_table = table_end;
    let mut actions_end = action_table;
    let mut max_type_index = 0u64;
    let mut spec_filters: Vec<i64> = Vec::new();
    for site in &mut call_sites {
        if site.action == 0 {
            continue;
        }
        let mut pos = usize::try_from(site.action - 1)
            .ok()
            .and_then(|o| action_table.checked_add(o));
        for _ in 0..MAX_ACTION_CHAIN {
            // Records before the table would overlap the call sites: no compiler writes
            // that, and a copy of the table could not reproduce it.
            let record = pos.filter(|&p| p >= action_table).ok_or_else(|| {
                err(format!(
                    "action record of LSDA at {addr} lies outside its action table"
                ))
            })?;
            let mut a = Cursor {
                bytes: c.bytes,
                base: c.base,
                pos: record,
            };
            let filter = a.sleb()?;
            let next_field = a.pos;
            let next = a.sleb()?;
            actions_end = actions_end.max(a.pos);
            site.filters.push(filter);
            if filter > 0 {
                max_type_index = max_type_index.max(filter as u64);
            } else if filter < 0 && !spec_filters.contains(&filter) {
                spec_filters.push(filter);
            }
            if next == 0 {
                break;
            }
            pos = i64::try_from(next_field)
                .ok()
                .and_then(|f| f.checked_add(next))
                .and_then(|p| usize::try_from(p).ok());
        }
    }

    // Exception specifications: uleb lists of type indices after the type table's base.
    spec_filters.sort_unstable_by(|a, b| b.cmp(a));
    let mut spec_lists = Vec::new();
    let mut specs_end = None;
    if !spec_filters.is_empty() {
        let base_pos = ttype_base.ok_or_else(|| {
            err(format!(
                "LSDA at {addr} uses an exception specification but has no type table"
            ))
        })?;
        for &filter in &spec_filters {
            let list_pos = base_pos
                .checked_add(filter.unsigned_abs() - 1)
                .and_then(|p| usize::try_from(p).ok())
                .ok_or_else(|| err(format!("exception specification of LSDA at {addr}")))?;
            let mut l = Cursor {
                bytes: c.bytes,
                base: c.base,
                pos: list_pos,
            };
            let mut indices = Vec::new();
            loop {
                let index = l.uleb()?;
                if index == 0 {
                    break;
                }
                max_type_index = max_type_index.max(index);
                indices.push(index);
            }
            specs_end = Some(specs_end.unwrap_or(0).max(l.pos));
            spec_lists.push((filter, indices));
        }
    }

    // Type table entries, indexed backwards from its base.
    let ttype_entry_size = ttype_base.and_then(|_| encoded_size(ttype_encoding));
    let mut type_entries: Vec<(i64, Vaddr)> = Vec::new();
    let mut type_table_start = ttype_base;
    if max_type_index > 0 {
        let (Some(base_pos), Some(size)) = (ttype_base, ttype_entry_size) else {
            return Err(err(format!(
                "LSDA at {addr} uses type index {max_type_index} but has no type table with \
                 fixed-size entries (encoding {ttype_encoding:#x})"
            )));
        };
        let first = max_type_index
            .checked_mul(size)
            .and_then(|span| base_pos.checked_sub(span))
            .ok_or_else(|| {
                err(format!(
                    "type table of LSDA at {addr} starts before its section"
                ))
            })?;
        type_table_start = Some(first);
        let mut used: Vec<u64> = call_sites
            .iter()
            .flat_map(|s| s.filters.iter())
            .filter(|&&f| f > 0)
            .map(|&f| f as u64)
            .chain(spec_lists.iter().flat_map(|(_, l)| l.iter().copied()))
            .collect();
        used.sort_unstable();
        used.dedup();
        for index in used {
            let mut t = Cursor {
                bytes: c.bytes,
                base: c.base,
                pos: (base_pos - index * size) as usize,
            };
            type_entries.push((index as i64, Vaddr(t.encoded(ttype_encoding)?)));
        }
    }
    let range = |from: Option<u64>, to: Option<u64>| match (from, to) {
        (Some(from), Some(to)) => VaddrRange {
            start: base + from,
            end: base + to,
        },
        _ => VaddrRange::default(),
    };
    Ok(Lsda {
        addr,
        lpstart,
        lpstart_explicit,
        ttype_encoding,
        ttype_base: ttype_base.map(|p| base + p),
        call_site_encoding,
        call_sites,
        type_entries,
        end: at(actions_end),
        call_site_table: VaddrRange {
            start: at(table_start),
            end: at(table_end),
        },
        action_table: VaddrRange {
            start: at(action_table),
            end: at(actions_end),
        },
        ttype_entry_size,
        type_table: range(type_table_start, ttype_base),
        exception_specs: range(ttype_base, specs_end.map(|e| e as u64).or(ttype_base)),
        spec_lists,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An LSDA as GCC writes it: no LPStart, a type table (pcrel|sdata4), uleb128 call sites.
    fn sample() -> Vec<u8> {
        let mut v = vec![
            0xff, // LPStart omitted: landing pads are relative to the function start
            0x9b, // TType: indirect | pcrel | sdata4
            0x00, // TType offset, patched below
            0x01, // call sites: uleb128
            0x0c, // call-site table length: 3 records of 4 bytes
            // start, len, landing pad, action
            0x04, 0x05, 0x20, 0x01, // [f+4, f+9) -> f+0x20, action 1
            0x10, 0x05, 0x00, 0x00, // [f+0x10, f+0x15): no landing pad
            0x18, 0x05, 0x28, 0x00, // [f+0x18, f+0x1d) -> f+0x28, cleanup
            0x01, 0x00, // action table: filter 1 (catch type 1), no next
        ];
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v.extend_from_slice(&0x100i32.to_le_bytes()); // type 1: pcrel, its address + 0x100
        let ttype_end = v.len();
        v[2] = (ttype_end - 3) as u8; // measured from the byte after the offset itself
        v
    }

    #[test]
    fn parses_call_sites_actions_and_types() {
        let bytes = sample();
        let base = Vaddr(0x2000);
        let f = Vaddr(0x1000);
        let l = parse_lsda(&bytes, base, base, f).unwrap();
        assert_eq!(l.lpstart, f);
        assert!(!l.lpstart_explicit);
        assert_eq!(l.call_sites.len(), 3);
        assert_eq!(l.call_sites[0].start, Vaddr(0x1004));
        assert_eq!(l.call_sites[0].len, 5);
        assert_eq!(l.call_sites[0].landing_pad, Some(Vaddr(0x1020)));
        assert_eq!(l.call_sites[0].filters, vec![1]);
        assert_eq!(l.call_sites[1].landing_pad, None);
        assert_eq!(l.call_sites[2].landing_pad, Some(Vaddr(0x1028)));
        assert!(l.call_sites[2].filters.is_empty());
        let entry_addr = base + (bytes.len() - 4) as u64;
        assert_eq!(l.type_entries, vec![(1, entry_addr + 0x100)]);
    }

    /// A chained action (catch type 1, then the exception specification `throw(type 2)`)
    /// whose type 2 is `catch (...)`'s null entry.
    fn sample_with_spec() -> Vec<u8> {
        let mut v = vec![
            0xff, // no LPStart
            0x9b, // TType: indirect | pcrel | sdata4
            0x00, // TType offset, patched below
            0x01, // call sites: uleb128
            0x04, // one record
            0x00, 0x05, 0x10, 0x03, // [f, f+5) -> f+0x10, action record at offset 2
            0x7f, 0x00, // record 0: filter -1 (exception spec at ttype_base + 0), end
            0x01, 0x7d, // record 1: filter 1, next -3 (back to record 0)
        ];
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v.extend_from_slice(&0i32.to_le_bytes()); // type 2: null
        v.extend_from_slice(&0x100i32.to_le_bytes()); // type 1
        let ttype_end = v.len();
        v.extend_from_slice(&[0x02, 0x00]); // spec list of filter -1: type 2
        v[2] = (ttype_end - 3) as u8;
        v
    }

    #[test]
    fn records_table_extents_and_exception_specs() {
        let bytes = sample_with_spec();
        let base = Vaddr(0x2000);
        let l = parse_lsda(&bytes, base, base, Vaddr(0x1000)).unwrap();
        assert_eq!(l.call_sites[0].filters, vec![1, -1]);
        assert_eq!(l.call_site_table, VaddrRange::new(base + 5, 4));
        assert_eq!(l.action_table, VaddrRange::new(base + 9, 4));
        assert_eq!(l.end, base + 13);
        assert_eq!(l.ttype_base, Some(base + 24));
        assert_eq!(l.ttype_entry_size, Some(4));
        assert_eq!(l.type_table, VaddrRange::new(base + 16, 8));
        assert_eq!(l.exception_specs, VaddrRange::new(base + 24, 2));
        assert_eq!(l.spec_lists, vec![(-1, vec![2])]);
        // Type 2 is null: a raw 0 is not made pc-relative.
        assert_eq!(l.type_entries, vec![(1, base + 20 + 0x100), (2, Vaddr(0))]);
    }

    #[test]
    fn action_record_before_the_table_is_an_error() {
        let mut bytes = sample_with_spec();
        bytes[12] = 0x76; // next -10: into the call-site table
        assert!(parse_lsda(&bytes, Vaddr(0x2000), Vaddr(0x2000), Vaddr(0x1000)).is_err());
    }

    #[test]
    fn truncated_lsda_is_an_error() {
        let bytes = sample();
        for cut in 1..17 {
            assert!(
                parse_lsda(&bytes[..cut], Vaddr(0), Vaddr(0), Vaddr(0)).is_err(),
                "cut {cut}"
            );
        }
        assert!(parse_lsda(&bytes, Vaddr(0x2000), Vaddr(0x1000), Vaddr(0)).is_err());
    }
}
