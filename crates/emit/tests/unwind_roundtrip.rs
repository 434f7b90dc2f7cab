//! Round trip of real unwind tables: every FDE of some system binaries (C programs, gdb, and
//! libstdc++ with its personality and LSDAs) is moved by a constant, written
//! with `write_eh_frame`, read back with rivet-elf (gimli), and compared with the original;
//! then `.eh_frame_hdr` is read back with gimli and its binary search must find the right FDE.

use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, Pointer, UnwindSection};
use rivet_arch::Isa;
use rivet_elf::eh_frame::{CfiRow, EhFrameTable};
use rivet_elf::{ElfFile, Vaddr, VaddrRange};
use rivet_emit::unwind::{
    CieSpec, EhFrameOutput, FrameSpec, coalesce_rows, write_eh_frame, write_eh_frame_hdr,
};

/// Far enough that no new address equals an old one, near enough for 32-bit pointers to
/// the (unmoved) personality routines.
const SHIFT: u64 = 0x1000_0000;

fn shifted(v: Vaddr) -> Vaddr {
    v + SHIFT
}

fn shift_rows(rows: &[CfiRow]) -> Vec<CfiRow> {
    rows.iter()
        .map(|r| CfiRow {
            range: VaddrRange {
                start: shifted(r.range.start),
                end: shifted(r.range.end),
            },
            ..r.clone()
        })
        .collect()
}

struct Moved {
    output: EhFrameOutput,
    section_addr: Vaddr,
}

fn round_trip(path: &str) -> Moved {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let elf = ElfFile::parse(&bytes).unwrap();
    let eh = elf.eh_frame().unwrap().expect("no .eh_frame");
    assert!(eh.fdes.len() > 50, "{path}: only {} FDEs", eh.fdes.len());
    let mut frames = Vec::new();
    let mut originals = Vec::new();
    for fde in &eh.fdes {
        let rows = eh.rows(fde).unwrap();
        frames.push(FrameSpec {
            range: VaddrRange {
                start: shifted(fde.range.start),
                end: shifted(fde.range.end),
            },
            rows: shift_rows(&rows),
            cie: CieSpec::of_fde(fde),
            lsda: fde.lsda.map(shifted),
        });
        originals.push((fde.clone(), rows));
    }
    let section_addr = shifted(elf.section_by_name(".eh_frame").unwrap().addr);
    let output = write_eh_frame(Isa::of(&elf), &frames, section_addr).unwrap();

    let back = EhFrameTable::parse(&output.bytes, section_addr, None, None).unwrap();
    assert_eq!(back.fdes.len(), originals.len(), "{path}: FDE count");
    for ((orig, orig_rows), new) in originals.iter().zip(&back.fdes) {
        let what = format!("{path}: FDE of {}", orig.range.start);
        assert_eq!(new.range.start, shifted(orig.range.start), "{what}");
        assert_eq!(new.range.end, shifted(orig.range.end), "{what}");
        assert_eq!(new.lsda, orig.lsda.map(shifted), "{what}");
        assert_eq!(new.personality, orig.personality, "{what}");
        assert_eq!(
            new.personality_indirect, orig.personality_indirect,
            "{what}"
        );
        assert_eq!(new.signal_frame, orig.signal_frame, "{what}");
        assert_eq!(
            new.return_address_register, orig.return_address_register,
            "{what}"
        );
        let new_rows = back.rows(new).unwrap();
        assert_eq!(
            coalesce_rows(&new_rows),
            coalesce_rows(&shift_rows(orig_rows)),
            "{what}"
        );
    }
    // FDE addresses in the output are where the FDEs really are.
    let mut located: Vec<(Vaddr, Vaddr)> = back
        .fdes
        .iter()
        .map(|f| (f.range.start, section_addr + f.offset as u64))
        .collect();
    located.sort();
    let mut reported = output.fdes.clone();
    reported.sort();
    assert_eq!(reported, located, "{path}: FDE addresses");
    assert_eq!(output.bytes[output.bytes.len() - 4..], [0; 4], "terminator");
    Moved {
        output,
        section_addr,
    }
}

/// Writes the header below the section and checks gimli's lookups through it.
fn check_hdr(path: &str, moved: &Moved) {
    let fdes = &moved.output.fdes;
    let hdr_addr = Vaddr((moved.section_addr.get() - 16 - 8 * fdes.len() as u64) & !7);
    let hdr = write_eh_frame_hdr(hdr_addr, moved.section_addr, fdes).unwrap();
    assert_eq!(hdr.len(), 12 + 8 * fdes.len());
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_addr.get())
        .set_eh_frame(moved.section_addr.get());
    let parsed = EhFrameHdr::new(&hdr, LittleEndian)
        .parse(&bases, 8)
        .unwrap();
    assert_eq!(
        parsed.eh_frame_ptr(),
        Pointer::Direct(moved.section_addr.get())
    );
    let table = parsed.table().expect("no search table");
    let eh = EhFrame::new(&moved.output.bytes, LittleEndian);
    for (i, &(start, fde_addr)) in fdes.iter().enumerate().step_by(7) {
        let next_start = fdes.get(i + 1).map_or(u64::MAX, |f| f.0.get());
        for addr in [start.get(), start.get() + 1, next_start - 1] {
            let found = table.lookup(addr, &bases).unwrap();
            assert_eq!(found, Pointer::Direct(fde_addr.get()), "{path}: {addr:#x}");
        }
        let fde = table
            .fde_for_address(&eh, &bases, start.get(), EhFrame::cie_from_offset)
            .unwrap_or_else(|e| panic!("{path}: FDE for {start}: {e}"));
        assert_eq!(fde.initial_address(), start.get(), "{path}");
    }
}

fn check(path: &str) {
    let moved = round_trip(path);
    check_hdr(path, &moved);
}

#[test]
fn ls_round_trips() {
    check("/usr/bin/ls");
}

#[test]
fn bash_round_trips() {
    check("/usr/bin/bash");
}

#[test]
fn libstdcxx_round_trips() {
    check("/usr/lib/x86_64-linux-gnu/libstdc++.so.6");
}

/// gdb is big and C++: the most FDEs of these inputs. It is a test dependency
/// (`scripts/test.sh` installs it), so a machine without it fails here rather than passing
/// with one input fewer checked.
#[test]
fn gdb_round_trips() {
    let gdb = "/usr/bin/gdb";
    assert!(
        std::path::Path::new(gdb).is_file(),
        "{gdb} is missing: install gdb (apt-get install gdb), or run scripts/test.sh, which \
         installs every package the tests need"
    );
    check(gdb);
}
