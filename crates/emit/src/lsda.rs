//! New LSDAs (`.gcc_except_table` entries) for moved code.
//!
//! Each new code fragment (a function, or its hot or cold part) that has call sites needs an
//! LSDA of its own, because call-site starts are offsets from the start of the fragment's FDE.
//! The new LSDA gets a new call-site table and copies of the original's action table, type
//! table and exception-specification lists, which do not depend on code addresses.
//!
//! Invariants of the output:
//! - Call sites are `uleb128`, starts relative to `fragment_start` (the FDE's pc_begin).
//! - Landing pads may be anywhere (another fragment, below this one): when there is any, an
//!   explicit LPStart (`pcrel|sdata4`) one byte below the lowest landing pad makes every
//!   landing-pad offset at least 1, since an offset of 0 means "no landing pad".
//! - Action records are copied byte for byte, so their self-relative links and the action
//!   offsets of call sites keep their meaning; type-table entries that are pc-relative are
//!   re-encoded to point to the same object from their new place (null stays null);
//!   absolute ones are copied.
//! - The type table's base is aligned to its entry size at the absolute address `new_addr`
//!   places it at, as GCC does; the bytes are valid only at `new_addr`.

use rivet_elf::lsda::Lsda;

use crate::leb;
use rivet_elf::{Vaddr, VaddrRange};

const DW_EH_PE_OMIT: u8 = 0xff;
const DW_EH_PE_ULEB128: u8 = 0x01;
const DW_EH_PE_PCREL_SDATA4: u8 = 0x1b;
const DW_EH_PE_PCREL: u8 = 0x10;
const DW_EH_PE_APPLICATION: u8 = 0x70;

/// One call-site record of a new LSDA, in new addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewCallSite {
    pub start: Vaddr,
    pub len: u64,
    /// Where to land when unwinding through this call; `None` to keep unwinding.
    pub landing_pad: Option<Vaddr>,
    /// As `rivet_elf::lsda::CallSite::action`: 0 (no action) or 1 + an offset into the
    /// original's action table, which is copied unchanged.
    pub action: u64,
}

/// Why a new LSDA could not be written. Each names the original LSDA it was derived from.
#[derive(Debug, thiserror::Error)]
pub enum LsdaError {
    #[error(
        "LSDA at {original}: new call site {index} at {start} starts before its fragment at \
         {fragment}"
    )]
    CallSiteBeforeFragment {
        original: Vaddr,
        index: usize,
        start: Vaddr,
        fragment: Vaddr,
    },
    #[error(
        "LSDA at {original}: new call site {index} at {start} is not after the end of the one \
         before it ({previous_end}); call sites must be sorted and disjoint"
    )]
    CallSitesOutOfOrder {
        original: Vaddr,
        index: usize,
        start: Vaddr,
        previous_end: Vaddr,
    },
    #[error(
        "LSDA at {original}: new call site {index} at {start} uses action {action}, which no \
         call site of the original uses"
    )]
    UnknownAction {
        original: Vaddr,
        index: usize,
        start: Vaddr,
        action: u64,
    },
    #[error(
        "LSDA at {original}: its {what} ({start}..{end}) is not inside .gcc_except_table \
         data at {section}"
    )]
    OutsideSection {
        original: Vaddr,
        what: &'static str,
        start: Vaddr,
        end: Vaddr,
        section: Vaddr,
    },
    #[error("LSDA at {original}: type table encoding {encoding:#x} cannot be rewritten")]
    UnsupportedTypeEncoding { original: Vaddr, encoding: u8 },
    #[error(
        "new LSDA at {new_addr} (from {original}): {what} {target} is out of reach of its \
         32-bit pc-relative field at {field}"
    )]
    OutOfReach {
        original: Vaddr,
        new_addr: Vaddr,
        what: &'static str,
        target: Vaddr,
        field: Vaddr,
    },
}

/// Writes an LSDA placed at `new_addr` for a fragment starting at `fragment_start`, with
/// `call_sites` (sorted by start, disjoint, none before the fragment), reusing the action and
/// type tables of `original`, whose bytes are read from `section_bytes`, the original
/// `.gcc_except_table` data starting at `section_addr`.
pub fn write_lsda(
    original: &Lsda,
    section_bytes: &[u8],
    section_addr: Vaddr,
    fragment_start: Vaddr,
    call_sites: &[NewCallSite],
    new_addr: Vaddr,
) -> Result<Vec<u8>, LsdaError> {
    let orig = original.addr;
    check_call_sites(original, fragment_start, call_sites)?;
    let slice = |what: &'static str, range: VaddrRange| {
        let bytes = range
            .start
            .checked_since(section_addr)
            .and_then(|from| usize::try_from(from).ok())
            .and_then(|from| Some(from..from.checked_add(usize::try_from(range.len()).ok()?)?))
            .and_then(|r| section_bytes.get(r));
        bytes.ok_or(LsdaError::OutsideSection {
            original: orig,
            what,
            start: range.start,
            end: range.end,
            section: section_addr,
        })
    };
    let actions = slice("action table", original.action_table)?;
    let (types, specs) = match original.ttype_base {
        Some(_) => (
            slice("type table", original.type_table)?,
            slice("exception specifications", original.exception_specs)?,
        ),
        None => (&[][..], &[][..]),
    };
    let out_of_reach = |what, target, field| LsdaError::OutOfReach {
        original: orig,
        new_addr,
        what,
        target,
        field,
    };

    let lpstart = call_sites
        .iter()
        .filter_map(|cs| cs.landing_pad)
        .min()
        .map(|lowest| lowest.offset(-1));
    let mut call_site_table = Vec::new();
    for cs in call_sites {
        // `check_call_sites` put every start at or after the fragment.
        leb::uleb128(&mut call_site_table, cs.start - fragment_start);
        leb::uleb128(&mut call_site_table, cs.len);
        // `lpstart` is below every landing pad.
        let lp = match (cs.landing_pad, lpstart) {
            (Some(lp), Some(base)) => lp.get().wrapping_sub(base.get()),
            _ => 0,
        };
        leb::uleb128(&mut call_site_table, lp);
        leb::uleb128(&mut call_site_table, cs.action);
    }

    let mut out = Vec::new();
    match lpstart {
        Some(base) => {
            out.push(DW_EH_PE_PCREL_SDATA4);
            let field = new_addr + out.len() as u64;
            let rel = pcrel32(base, field)
                // libgcc reads a raw 0 as a null LPStart, not as "this field".
                .filter(|&rel| rel != 0)
                .ok_or_else(|| out_of_reach("landing pad base", base, field))?;
            out.extend_from_slice(&rel.to_le_bytes());
        }
        None => out.push(DW_EH_PE_OMIT),
    }

    let mut body = vec![DW_EH_PE_ULEB128];
    leb::uleb128(&mut body, call_site_table.len() as u64);
    body.extend_from_slice(&call_site_table);
    body.extend_from_slice(actions);

    if original.ttype_base.is_none() {
        out.push(DW_EH_PE_OMIT);
        out.extend_from_slice(&body);
        return Ok(out);
    }
    let encoding = original.ttype_encoding;
    out.push(encoding);
    let align = match original.ttype_entry_size {
        Some(size) => size,
        // No entry is used (the parser requires fixed-size entries otherwise): nothing to
        // align.
        None if types.is_empty() => 1,
        None => {
            return Err(LsdaError::UnsupportedTypeEncoding {
                original: orig,
                encoding,
            });
        }
    };
    // The TType offset counts from the byte after itself to the type table's base, and the
    // base is aligned: the offset's own uleb length moves everything after it. Try lengths
    // from 1 up; a value shorter than the length tried is padded (0x80 continuation bytes),
    // so the first length that holds the value is a fixpoint.
    let header_len = out.len() as u64;
    let types_len = types.len() as u64;
    let body_len = body.len() as u64;
    let (offset, offset_len, padding) = (1..=10)
        .find_map(|len| {
            let after_offset = new_addr.get().checked_add(header_len + len)?;
            let types_start = after_offset.checked_add(body_len)?;
            let base = types_start
                .checked_add(types_len)?
                .checked_next_multiple_of(align)?;
            let padding = base - types_len - types_start;
            let offset = base - after_offset;
            (leb::uleb128_len(offset) <= len).then_some((offset, len, padding))
        })
        // Only an LSDA placed at the very top of the address space gets here: any u64 fits
        // in 10 uleb bytes.
        .ok_or_else(|| out_of_reach("type table", new_addr, new_addr))?;
    leb::uleb128_padded(&mut out, offset, offset_len as usize);
    out.extend_from_slice(&body);
    out.resize(out.len() + padding as usize, 0);

    let pcrel = encoding & DW_EH_PE_APPLICATION == DW_EH_PE_PCREL;
    if encoding & DW_EH_PE_APPLICATION & !DW_EH_PE_PCREL != 0 {
        return Err(LsdaError::UnsupportedTypeEncoding {
            original: orig,
            encoding,
        });
    }
    let size = align as usize;
    for (i, entry) in types.chunks(size).enumerate() {
        if !pcrel {
            out.extend_from_slice(entry);
            continue;
        }
        let old_field = original.type_table.start + (i * size) as u64;
        let new_field = new_addr + out.len() as u64;
        let raw = read_signed(entry, encoding).ok_or(LsdaError::UnsupportedTypeEncoding {
            original: orig,
            encoding,
        })?;
        // A raw 0 is the null entry of `catch (...)`, whatever the application.
        if raw == 0 {
            out.extend_from_slice(entry);
            continue;
        }
        let target = old_field.offset(raw);
        let new_raw = target.get().wrapping_sub(new_field.get()) as i64;
        let bytes = write_signed(new_raw, encoding)
            .filter(|_| new_raw != 0)
            .ok_or_else(|| out_of_reach("type entry", target, new_field))?;
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(specs);
    Ok(out)
}

fn check_call_sites(
    original: &Lsda,
    fragment_start: Vaddr,
    call_sites: &[NewCallSite],
) -> Result<(), LsdaError> {
    let mut previous_end = fragment_start;
    for (index, cs) in call_sites.iter().enumerate() {
        if cs.start < fragment_start {
            return Err(LsdaError::CallSiteBeforeFragment {
                original: original.addr,
                index,
                start: cs.start,
                fragment: fragment_start,
            });
        }
        if cs.start < previous_end {
            return Err(LsdaError::CallSitesOutOfOrder {
                original: original.addr,
                index,
                start: cs.start,
                previous_end,
            });
        }
        previous_end = cs.start + cs.len;
        // Only actions of the original are known to start a record of the copied table.
        if cs.action != 0 && !original.call_sites.iter().any(|o| o.action == cs.action) {
            return Err(LsdaError::UnknownAction {
                original: original.addr,
                index,
                start: cs.start,
                action: cs.action,
            });
        }
    }
    Ok(())
}

fn pcrel32(target: Vaddr, field: Vaddr) -> Option<i32> {
    i32::try_from(target.get().wrapping_sub(field.get()) as i64).ok()
}

/// A type-table entry's raw value, sign-extended for the signed formats (pc-relative values
/// are differences, so 64-bit wrap-around is what we want for the unsigned ones too).
fn read_signed(bytes: &[u8], encoding: u8) -> Option<i64> {
    Some(match (encoding & 0x0f, bytes.len()) {
        (0x02, 2) => i64::from(u16::from_le_bytes(bytes.try_into().ok()?)),
        (0x0a, 2) => i64::from(i16::from_le_bytes(bytes.try_into().ok()?)),
        (0x03, 4) => i64::from(u32::from_le_bytes(bytes.try_into().ok()?)),
        (0x0b, 4) => i64::from(i32::from_le_bytes(bytes.try_into().ok()?)),
        (0x00 | 0x04 | 0x0c, 8) => i64::from_le_bytes(bytes.try_into().ok()?),
        _ => return None,
    })
}

/// `value` in the entry format of `encoding`, if it fits.
fn write_signed(value: i64, encoding: u8) -> Option<Vec<u8>> {
    Some(match encoding & 0x0f {
        0x02 => u16::try_from(value).ok()?.to_le_bytes().to_vec(),
        0x0a => i16::try_from(value).ok()?.to_le_bytes().to_vec(),
        0x03 => u32::try_from(value).ok()?.to_le_bytes().to_vec(),
        0x0b => i32::try_from(value).ok()?.to_le_bytes().to_vec(),
        0x00 | 0x04 | 0x0c => value.to_le_bytes().to_vec(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivet_elf::lsda::parse_lsda;

    const SECTION: Vaddr = Vaddr(0x2000);
    const FUNCTION: Vaddr = Vaddr(0x1000);

    /// An LSDA as GCC writes it: two call sites (a catch of type 1 chained to the exception
    /// specification `throw(type 2)`, and a cleanup), a pcrel|sdata4 type table whose type 2
    /// is null, and the specification list after it.
    fn original_bytes() -> Vec<u8> {
        let mut v = vec![
            0xff, // no LPStart
            0x9b, // TType: indirect | pcrel | sdata4
            0x00, // TType offset, patched below
            0x01, // call sites: uleb128
            0x08, // two records
            0x00, 0x05, 0x10, 0x03, // [f, f+5) -> f+0x10, action record at offset 2
            0x08, 0x05, 0x20, 0x00, // [f+8, f+13) -> f+0x20, cleanup
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

    fn original(bytes: &[u8]) -> Lsda {
        parse_lsda(bytes, SECTION, SECTION, FUNCTION).unwrap()
    }

    fn site(start: u64, len: u64, landing_pad: Option<u64>, action: u64) -> NewCallSite {
        NewCallSite {
            start: Vaddr(start),
            len,
            landing_pad: landing_pad.map(Vaddr),
            action,
        }
    }

    /// Writes at `new_addr`, parses back and checks call sites, filters and types.
    fn round_trip(fragment: Vaddr, sites: &[NewCallSite], new_addr: Vaddr) -> (Vec<u8>, Lsda) {
        let bytes = original_bytes();
        let old = original(&bytes);
        let new = write_lsda(&old, &bytes, SECTION, fragment, sites, new_addr).unwrap();
        let back = parse_lsda(&new, new_addr, new_addr, fragment).unwrap();
        assert_eq!(back.call_sites.len(), sites.len());
        for (got, want) in back.call_sites.iter().zip(sites) {
            assert_eq!(got.start, want.start);
            assert_eq!(got.len, want.len);
            assert_eq!(got.landing_pad, want.landing_pad);
            assert_eq!(got.action, want.action);
            let filters = &old.call_sites.iter().find(|o| o.action == want.action);
            assert_eq!(Some(&got.filters), filters.map(|o| &o.filters));
        }
        assert_eq!(back.type_entries, old.type_entries);
        assert_eq!(back.spec_lists, old.spec_lists);
        assert_eq!(back.ttype_encoding, old.ttype_encoding);
        assert_eq!(
            back.ttype_base.unwrap().get() % 4,
            0,
            "type table alignment"
        );
        (new, back)
    }

    #[test]
    fn moved_fragment_keeps_its_tables() {
        let fragment = Vaddr(0x9000);
        let sites = [
            site(0x9000, 5, Some(0x9010), 3),
            site(0x9008, 5, Some(0x9020), 0),
        ];
        for new_addr in 0x5000..0x5008 {
            let (bytes, back) = round_trip(fragment, &sites, Vaddr(new_addr));
            assert!(back.lpstart_explicit);
            assert_eq!(back.lpstart, Vaddr(0x900f));
            assert_eq!(bytes[0], DW_EH_PE_PCREL_SDATA4);
        }
    }

    #[test]
    fn landing_pads_below_the_fragment() {
        // A cold fragment whose landing pads stayed in the hot part, below it.
        let fragment = Vaddr(0x20_0000);
        let sites = [
            site(0x20_0000, 5, Some(0x9020), 3),
            site(0x20_0010, 2, None, 0),
            site(0x20_0012, 5, Some(0x9010), 0),
        ];
        let (_, back) = round_trip(fragment, &sites, Vaddr(0x5001));
        assert_eq!(back.lpstart, Vaddr(0x900f));
        assert_eq!(back.call_sites[1].landing_pad, None);
    }

    #[test]
    fn no_landing_pads_omit_lpstart() {
        let fragment = Vaddr(0x9000);
        let sites = [site(0x9004, 5, None, 0), site(0x9010, 5, None, 3)];
        let (bytes, back) = round_trip(fragment, &sites, Vaddr(0x5000));
        assert_eq!(bytes[0], DW_EH_PE_OMIT);
        assert!(!back.lpstart_explicit);
        // An empty call-site table (every throw terminates) is valid too.
        let bytes = original_bytes();
        let new = write_lsda(
            &original(&bytes),
            &bytes,
            SECTION,
            fragment,
            &[],
            Vaddr(0x5000),
        );
        let back = parse_lsda(&new.unwrap(), Vaddr(0x5000), Vaddr(0x5000), fragment).unwrap();
        assert!(back.call_sites.is_empty());
    }

    #[test]
    fn type_table_offset_fixpoint() {
        // Enough call sites to push the TType offset across the one-byte uleb limit, at
        // every alignment: the offset's length and the padding depend on each other.
        for count in 25..40u64 {
            let sites: Vec<NewCallSite> = (0..count)
                .map(|i| site(0x9000 + 8 * i, 4, Some(0x9400 + i), 3))
                .collect();
            for new_addr in 0x5000..0x5004 {
                round_trip(Vaddr(0x9000), &sites, Vaddr(new_addr));
            }
        }
    }

    #[test]
    fn absolute_type_entries_are_copied() {
        let mut bytes = original_bytes();
        bytes[1] = 0x03; // udata4, absolute
        let old = original(&bytes);
        let sites = [site(0x9000, 5, Some(0x9010), 3)];
        let new = write_lsda(&old, &bytes, SECTION, Vaddr(0x9000), &sites, Vaddr(0x7003)).unwrap();
        let back = parse_lsda(&new, Vaddr(0x7003), Vaddr(0x7003), Vaddr(0x9000)).unwrap();
        assert_eq!(back.type_entries, vec![(1, Vaddr(0x100)), (2, Vaddr(0))]);
    }

    #[test]
    fn bad_call_sites_are_errors() {
        let bytes = original_bytes();
        let old = original(&bytes);
        let write = |sites: &[NewCallSite]| {
            write_lsda(&old, &bytes, SECTION, Vaddr(0x9000), sites, Vaddr(0x5000))
        };
        assert!(matches!(
            write(&[site(0x8fff, 5, None, 0)]),
            Err(LsdaError::CallSiteBeforeFragment { .. })
        ));
        assert!(matches!(
            write(&[site(0x9000, 5, None, 0), site(0x9004, 5, None, 0)]),
            Err(LsdaError::CallSitesOutOfOrder { .. })
        ));
        assert!(matches!(
            write(&[site(0x9000, 5, None, 2)]),
            Err(LsdaError::UnknownAction { action: 2, .. })
        ));
        // Landing pads more than 2 GiB away from the LSDA.
        assert!(matches!(
            write(&[site(0x9000, 5, Some(0x1_0000_9000), 0)]),
            Err(LsdaError::OutOfReach { .. })
        ));
        // The original's tables must be in the bytes given.
        assert!(matches!(
            write_lsda(
                &old,
                &bytes[..20],
                SECTION,
                Vaddr(0x9000),
                &[],
                Vaddr(0x5000)
            ),
            Err(LsdaError::OutsideSection { .. })
        ));
    }

    #[test]
    fn pcrel_type_entries_out_of_reach_are_errors() {
        let bytes = original_bytes();
        let old = original(&bytes);
        let far = Vaddr(0x2_0000_0000);
        assert!(matches!(
            write_lsda(&old, &bytes, SECTION, far, &[], far),
            Err(LsdaError::OutOfReach {
                what: "type entry",
                ..
            })
        ));
    }
}
