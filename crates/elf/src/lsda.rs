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
//! table; the type table grows backwards from its end.

use crate::addr::Vaddr;
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
    /// Type-table entries referenced by positive filters, by filter index (1-based).
    pub type_entries: Vec<(i64, Vaddr)>,
    /// First byte after the action table (end of what the LSDA's header and tables span,
    /// excluding the type table which may extend further).
    pub end: Vaddr,
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
    /// the pointer slot.
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
        match encoding & 0x70 {
            0x00 => Ok(raw),
            0x10 => Ok(field_addr.get().wrapping_add(raw)),
            other => Err(err(format!("unsupported pointer application {other:#x}"))),
        }
    }
}

/// Size in bytes of one type-table entry with this encoding.
fn encoded_size(encoding: u8) -> Option<u64> {
    match encoding & 0x0f {
        0x00 | 0x04 | 0x0c => Some(8),
        0x02 | 0x0a => Some(2),
        0x03 | 0x0b => Some(4),
        _ => None,
    }
}

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
    {
        let start = addr
            .checked_since(base)
            .filter(|&o| o < bytes.len() as u64)
            .ok_or_else(|| err(format!("LSDA at {addr} is outside its section")))?;
        let mut c = Cursor {
            bytes,
            base,
            pos: start as usize,
        };

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
            Some(c.addr() + off)
        };
        let call_site_encoding = c.u8()?;
        let table_len = c.uleb()?;
        let table_end = c
            .pos
            .checked_add(table_len as usize)
            .ok_or_else(|| err("bad length"))?;
        if table_end > c.bytes.len() {
            return Err(err(format!(
                "call-site table of LSDA at {addr} runs past the section"
            )));
        }
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
        let action_table = table_end;
        let mut end = action_table;
        let mut type_entries: Vec<(i64, Vaddr)> = Vec::new();
        for site in &mut call_sites {
            if site.action == 0 {
                continue;
            }
            let mut pos = action_table.saturating_add(site.action as usize - 1);
            // Action chains are short; the bound stops a malicious cycle.
            for _ in 0..256 {
                let mut a = Cursor {
                    bytes: c.bytes,
                    base: c.base,
                    pos,
                };
                let filter = a.sleb()?;
                let next_field = a.pos;
                let next = a.sleb()?;
                end = end.max(a.pos);
                site.filters.push(filter);
                if filter > 0
                    && let (Some(base), Some(size)) = (ttype_base, encoded_size(ttype_encoding))
                    && !type_entries.iter().any(|(f, _)| *f == filter)
                {
                    let entry_addr =
                        Vaddr(base.get().wrapping_sub((filter as u64).wrapping_mul(size)));
                    let off = entry_addr
                        .checked_since(c.base)
                        .ok_or_else(|| err("type table entry before the section"))?;
                    let mut t = Cursor {
                        bytes: c.bytes,
                        base: c.base,
                        pos: off as usize,
                    };
                    type_entries.push((filter, Vaddr(t.encoded(ttype_encoding)?)));
                }
                if next == 0 {
                    break;
                }
                pos = (next_field as i64).wrapping_add(next) as usize;
            }
        }
        type_entries.sort_by_key(|(f, _)| *f);
        Ok(Lsda {
            addr,
            lpstart,
            lpstart_explicit,
            ttype_encoding,
            ttype_base,
            call_site_encoding,
            call_sites,
            type_entries,
            end: c.base + end as u64,
        })
    }
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
