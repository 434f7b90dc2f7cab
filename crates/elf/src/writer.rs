//! The append-only output writer.
//!
//! A rewritten binary keeps every byte of its input at the same file offset and address: code
//! that was not rewritten, data, dynamic tables, everything the loader already knows how to
//! map. What changes is (1) a list of small in-place patches at virtual addresses (relocated
//! pointers, jump-table entries, forwarding jumps, symbol values), and (2) one new PT_LOAD after
//! the last one, holding all new allocated content. Non-allocated additions (symbol tables,
//! notes) and a fresh section header table go after it in the file. Original sections may be
//! renamed or re-typed (so tools stop reading stale tables) but never removed, so section
//! indices stay valid.
//!
//! The kernel computes the span of an executable's mapping from the first and last PT_LOAD in
//! table order, and `ld.so` wants PT_LOADs sorted by address: the new PT_LOAD is inserted
//! right after the last existing one and sits above all of them.
//!
//! The program header table stays where the linker put it, right after the ELF header, when
//! the new PT_LOAD can take the slot of a redundant header: the PT_NOTE that covers exactly
//! what PT_GNU_PROPERTY covers (GNU ld and lld emit both; the kernel and `ld.so` read
//! properties through PT_GNU_PROPERTY). That matters beyond tidiness: binutils' `strip` and
//! `objcopy` always write the table right after the ELF header, and a table found anywhere
//! else comes out of them as a binary that crashes at startup (llvm-bolt's outputs have that
//! problem). Without such a slot, or when two headers are added (instrumentation counters),
//! the table moves to the start of the new segment, which `llvm-strip` handles and binutils
//! does not.

use object::LittleEndian as LE;
use object::elf;
use object::endian::{U16, U32, U64};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};

use crate::addr::{FileOffset, Vaddr};
use crate::error::{ElfError, Result};
use crate::file::ElfFile;
use crate::sink::ImageSink;

const PAGE: u64 = 0x1000;
const PHDR_SIZE: u64 = std::mem::size_of::<elf::ProgramHeader64<LE>>() as u64;

/// Where the new segment goes: the first page above every PT_LOAD, at a file offset
/// congruent to it modulo the page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewSegment {
    pub vaddr: Vaddr,
    pub offset: FileOffset,
    /// Bytes reserved at its start for the program header table: 0 when the table stays in
    /// place (`reused_slot`).
    pub phdr_size: u64,
    /// The input's program header (by index) the new PT_LOAD replaces, so that the table keeps
    /// its size and place: a PT_NOTE duplicating PT_GNU_PROPERTY.
    pub reused_slot: Option<usize>,
    /// Program headers of the input.
    input_headers: u64,
    /// Where the first PT_LOAD maps file offset 0 (its address minus its offset), when the
    /// table must stay where loaders that compute its address as load bias + `e_phoff` find
    /// it (AArch64 outputs, see `findable_place`).
    findable_delta: Option<u64>,
}

impl NewSegment {
    /// First address after the program header table, if the segment holds it.
    pub fn content_start(&self) -> Vaddr {
        self.vaddr + self.phdr_size
    }

    /// Whether the program header table stays where the input has it.
    pub fn keeps_header_table(&self) -> bool {
        self.reused_slot.is_some()
    }

    /// Makes room, right below the new segment, for a zero-filled segment of `size` bytes
    /// (`Rewrite::counters`), and returns its address. Its PT_LOAD is a second header to add,
    /// more than a reused slot makes room for: the table moves into the new segment.
    pub fn reserve_counters(&mut self, size: u64) -> Vaddr {
        let size = size.div_ceil(PAGE) * PAGE;
        let at = self.vaddr;
        self.vaddr = self.vaddr + size;
        self.reused_slot = None;
        self.phdr_size = (self.input_headers + 2) * PHDR_SIZE;
        // The table now starts the segment above the counters: move its file offset along,
        // for the loaders that look for it by offset.
        if let Some(delta) = self.findable_delta
            && let Some((vaddr, offset)) = findable_place(self.vaddr.get(), self.offset.0, delta)
        {
            self.vaddr = Vaddr(vaddr);
            self.offset = FileOffset(offset);
        }
        at
    }
}

/// The index of a PT_NOTE that covers exactly the bytes PT_GNU_PROPERTY covers: the loaders
/// find the properties through PT_GNU_PROPERTY, so that header slot can hold another.
fn redundant_note(elf: &ElfFile<'_>) -> Option<usize> {
    let segments = elf.segments();
    let property = segments
        .iter()
        .find(|s| s.p_type == elf::PT_GNU_PROPERTY.0)?;
    segments.iter().position(|s| {
        s.p_type == elf::PT_NOTE.0
            && s.offset == property.offset
            && s.vaddr == property.vaddr
            && s.filesz == property.filesz
            && s.memsz == property.memsz
    })
}

/// How a new section names the section its `sh_link` points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionLink {
    None,
    /// An input section, by index.
    Original(u32),
    /// A section of `Rewrite::sections`, by position.
    New(u32),
}

/// A section to add. Allocated sections must lie inside the new segment.
#[derive(Clone, Debug)]
pub struct NewSection {
    pub name: String,
    pub sh_type: u32,
    pub flags: u64,
    /// Address for allocated sections (ignored otherwise).
    pub addr: Vaddr,
    pub data: Vec<u8>,
    pub align: u64,
    pub entsize: u64,
    pub link: SectionLink,
    pub info: u32,
}

impl NewSection {
    /// A section of `data` with no links and no entry size; allocated at `addr` when `flags`
    /// has SHF_ALLOC.
    pub fn new(
        name: &str,
        sh_type: u32,
        flags: u64,
        addr: Vaddr,
        data: Vec<u8>,
        align: u64,
    ) -> NewSection {
        NewSection {
            name: name.into(),
            sh_type,
            flags,
            addr,
            data,
            align,
            entsize: 0,
            link: SectionLink::None,
            info: 0,
        }
    }

    pub fn is_alloc(&self) -> bool {
        self.flags & elf::SHF_ALLOC.0 != 0
    }
}

/// Everything that differs between the input and the output.
#[derive(Clone, Debug, Default)]
pub struct Rewrite {
    /// Bytes to overwrite, by virtual address (must lie in file-backed loaded bytes).
    pub patches: Vec<(Vaddr, Vec<u8>)>,
    /// New sections, in section-index order after the input's.
    pub sections: Vec<NewSection>,
    /// Input sections to rename (index, new name).
    pub renames: Vec<(u32, String)>,
    /// Input sections whose type becomes SHT_PROGBITS (stale tables tools must not read).
    pub retype_as_data: Vec<u32>,
    /// Non-allocated input sections whose contents are left out (the output replaces them):
    /// their headers stay, so section indices do not change, with size 0.
    pub drop_contents: Vec<u32>,
    /// New entry point.
    pub entry: Option<Vaddr>,
    /// New `.eh_frame_hdr` (address, size) for PT_GNU_EH_FRAME.
    pub eh_frame_hdr: Option<(Vaddr, u64)>,
    /// Replace the GNU build-id with a hash of the output and this salt.
    pub rebuild_id_salt: Option<Vec<u8>>,
    /// A zero-filled, writable segment (address, size; both page multiples) placed between
    /// the input's segments and the new one: instrumentation counters. It gets its own PT_LOAD
    /// and a `.rivet.counters` SHT_NOBITS section.
    pub counters: Option<(Vaddr, u64)>,
    /// `p_align` of the new PT_LOAD when more than a page (0: a page). The kernel and glibc's
    /// loader align the base of a PIE or shared library to the largest `p_align`, which keeps
    /// 2 MiB-aligned addresses of the new segment aligned at run time (`--hugify`). Only page
    /// congruence of address and file offset is required by either loader, and kept.
    pub load_align: u64,
}

fn header<'data>(elf: &ElfFile<'data>) -> Result<&'data elf::FileHeader64<LE>> {
    elf::FileHeader64::<LE>::parse(elf.data())
        .map_err(|e| ElfError::malformed("ELF header", e.to_string()))
}

/// Where the new segment of `elf`'s output will be.
pub fn new_segment(elf: &ElfFile<'_>) -> Result<NewSegment> {
    let phnum = elf.segments().len() as u64;
    if phnum + 1 >= u64::from(elf::PN_XNUM) {
        return Err(ElfError::malformed(
            "program header table",
            "too many program headers to add one",
        ));
    }
    if !elf.segments().iter().any(|s| s.is_load()) {
        return Err(ElfError::malformed(
            "program header table",
            "no PT_LOAD segment",
        ));
    }
    // Above everything the input places at an address: every loaded segment (its file size
    // too, should a corrupt one claim less memory than file) and every allocated section (a
    // corrupt one may lie outside its segment), so the new segment overlaps none of them.
    let segments = elf
        .segments()
        .iter()
        .filter(|s| s.is_load())
        .map(|s| s.vaddr.get().saturating_add(s.memsz.max(s.filesz)));
    let sections = elf
        .sections()
        .iter()
        .filter(|s| s.is_alloc() && !s.is_tls())
        .map(|s| s.addr.get().saturating_add(s.size));
    let top = segments.chain(sections).max().unwrap_or(0);
    let vaddr = top
        .checked_add(PAGE - 1)
        .map(|v| v & !(PAGE - 1))
        .ok_or_else(|| ElfError::malformed("program header table", "segments reach the top"))?;
    // The new segment follows the loaded part of the file; non-allocated sections after it
    // (debug info, symbols) move behind the new segment, which lets the writer leave out the
    // ones the output replaces.
    let offset = (loaded_end(elf) + PAGE - 1) & !(PAGE - 1);
    let reused_slot = redundant_note(elf);
    let findable_delta = if elf.is_aarch64() {
        first_load_delta(elf)
    } else {
        None
    };
    let (vaddr, offset) = match (reused_slot, findable_delta) {
        (None, Some(delta)) => findable_place(vaddr, offset, delta).unwrap_or((vaddr, offset)),
        _ => (vaddr, offset),
    };
    Ok(NewSegment {
        vaddr: Vaddr(vaddr),
        offset: FileOffset(offset),
        phdr_size: if reused_slot.is_some() {
            0
        } else {
            (phnum + 1) * PHDR_SIZE
        },
        reused_slot,
        input_headers: phnum,
        findable_delta,
    })
}

/// The largest hole the rule below may leave in the file.
const MAX_PHDR_HOLE: u64 = 16 << 20;

/// The address minus the file offset of the first PT_LOAD, when page-aligned: where a loader
/// that computes the program header table's address as load bias + `e_phoff` looks.
fn first_load_delta(elf: &ElfFile<'_>) -> Option<u64> {
    let first = elf
        .segments()
        .iter()
        .filter(|s| s.is_load())
        .min_by_key(|s| s.vaddr)?;
    let delta = first.vaddr.get().wrapping_sub(first.offset.0);
    (delta % PAGE == 0).then_some(delta)
}

/// Moves the new segment (`vaddr`, `offset`: the lowest place for each) so that the program
/// header table at its start lies where the first PT_LOAD's mapping (address minus offset
/// `delta`) puts file offset `e_phoff`: loaders that compute the table's address as load
/// bias + `e_phoff` then find it. Linux did so before 5.18, and qemu-user 7.2 (which runs
/// every AArch64 output on an x86-64 host) still does. It costs a hole in the file of the
/// size of the gap between the loaded bytes and the addresses (mostly `.bss`, and an
/// instrumented binary's counters); past `MAX_PHDR_HOLE`, `None`: the lowest place is kept,
/// which only such loaders cannot run. x86-64 outputs, which run natively here on newer
/// kernels, keep the lowest place and their exact bytes so far.
fn findable_place(vaddr: u64, offset: u64, delta: u64) -> Option<(u64, u64)> {
    let wanted_offset = vaddr.wrapping_sub(delta).max(offset);
    let aligned = (wanted_offset + PAGE - 1) & !(PAGE - 1);
    (aligned - offset <= MAX_PHDR_HOLE).then(|| (aligned.wrapping_add(delta), aligned))
}

/// End of the file bytes that must stay where they are: every segment's contents and every
/// allocated section's (whatever lies beyond is non-allocated and may move).
fn loaded_end(elf: &ElfFile<'_>) -> u64 {
    let segments = elf
        .segments()
        .iter()
        .map(|s| s.offset.0.saturating_add(s.filesz));
    let sections = elf
        .sections()
        .iter()
        .filter(|s| s.is_alloc() && !s.is_nobits())
        .map(|s| s.offset.0.saturating_add(s.size));
    segments
        .chain(sections)
        .max()
        .unwrap_or(0)
        .min(elf.data().len() as u64)
}

/// Section 0, all zero (`SHN_UNDEF`, no extended numbering).
fn null_section_header() -> elf::SectionHeader64<LE> {
    elf::SectionHeader64::<LE> {
        sh_name: U32::new(LE, 0),
        sh_type: U32::new(LE, elf::SHT_NULL),
        sh_flags: U64::new(LE, elf::SectionFlags(0)),
        sh_addr: U64::new(LE, 0),
        sh_offset: U64::new(LE, 0),
        sh_size: U64::new(LE, 0),
        sh_link: U32::new(LE, 0),
        sh_info: U32::new(LE, 0),
        sh_addralign: U64::new(LE, 0),
        sh_entsize: U64::new(LE, 0),
    }
}

fn align(v: u64, a: u64) -> u64 {
    let a = a.max(1);
    v.div_ceil(a) * a
}

/// File offset and length of the build-id's descriptor bytes.
fn build_id_location(elf: &ElfFile<'_>) -> Option<(usize, usize)> {
    let id = elf.build_id()?;
    let start = (id.as_ptr() as usize).checked_sub(elf.data().as_ptr() as usize)?;
    Some((start, id.len()))
}

/// End address of the new segment: its program headers, then the new allocated sections.
fn new_segment_end(segment: &NewSegment, rewrite: &Rewrite) -> Vaddr {
    rewrite
        .sections
        .iter()
        .filter(|s| s.is_alloc())
        .map(|s| s.addr + s.data.len() as u64)
        .fold(segment.vaddr + segment.phdr_size, Vaddr::max)
}

/// Bytes of the image that differ from what is streamed there (the input, zeros or a new
/// section), applied to each chunk on its way out, in the order they were added: a later one
/// wins where two meet, as when the image was assembled in one buffer and written over.
struct Overlays<'b> {
    /// (file offset, bytes or `None` for zeros, length), in the order added.
    list: Vec<(u64, Option<&'b [u8]>, u64)>,
    /// Indices into `list`, by offset.
    by_offset: Vec<usize>,
    longest: u64,
}

impl<'b> Overlays<'b> {
    fn new() -> Self {
        Overlays {
            list: Vec::new(),
            by_offset: Vec::new(),
            longest: 0,
        }
    }

    fn bytes(&mut self, offset: u64, bytes: &'b [u8]) {
        self.list.push((offset, Some(bytes), bytes.len() as u64));
    }

    fn zeros(&mut self, offset: u64, len: u64) {
        self.list.push((offset, None, len));
    }

    fn seal(&mut self) {
        self.by_offset = (0..self.list.len()).collect();
        self.by_offset.sort_by_key(|&i| self.list[i].0);
        self.longest = self.list.iter().map(|o| o.2).max().unwrap_or(0);
    }

    /// The overlays meeting `start..start + len`, in the order added.
    fn meeting(&self, start: u64, len: u64) -> Vec<usize> {
        let end = start + len;
        let from = self
            .by_offset
            .partition_point(|&i| self.list[i].0 < start.saturating_sub(self.longest));
        let mut hits: Vec<usize> = self.by_offset[from..]
            .iter()
            .copied()
            .take_while(|&i| self.list[i].0 < end)
            .filter(|&i| {
                let (at, _, n) = self.list[i];
                at + n > start && n > 0
            })
            .collect();
        hits.sort_unstable();
        hits
    }
}

/// The image on its way to the sink: front to back, each chunk with its overlays applied and
/// hashed for the build-id.
struct Stream<'s, 'b> {
    sink: &'s mut dyn ImageSink,
    /// The input, whose pages are let go once streamed (`ElfFile::release_pages`).
    input: &'s ElfFile<'s>,
    overlays: Overlays<'b>,
    hasher: Option<sha1_smol::Sha1>,
    pos: u64,
    scratch: Vec<u8>,
}

/// The largest piece streamed at once: the most a chunk with overlays is copied for.
const CHUNK: usize = 1 << 20;

impl Stream<'_, '_> {
    fn bytes(&mut self, bytes: &[u8]) {
        for piece in bytes.chunks(CHUNK) {
            let hits = self.overlays.meeting(self.pos, piece.len() as u64);
            if hits.is_empty() {
                self.emit(piece);
                continue;
            }
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(piece);
            self.apply(&hits, &mut scratch);
            self.emit(&scratch);
            self.scratch = scratch;
        }
    }

    /// `bytes` of the input, which is not read again.
    fn input_bytes(&mut self, bytes: &[u8]) {
        for piece in bytes.chunks(CHUNK) {
            self.bytes(piece);
            self.input.release_pages(piece);
        }
    }

    fn zeros(&mut self, mut len: u64) {
        const ZEROS: [u8; 4096] = [0; 4096];
        while len > 0 {
            let n = len.min(ZEROS.len() as u64);
            self.bytes(&ZEROS[..n as usize]);
            len -= n;
        }
    }

    /// Zeros up to file offset `to` (nothing when already there).
    fn zeros_to(&mut self, to: u64) {
        self.zeros(to.saturating_sub(self.pos));
    }

    fn apply(&self, hits: &[usize], chunk: &mut [u8]) {
        let start = self.pos;
        let end = start + chunk.len() as u64;
        for &i in hits {
            let (at, bytes, n) = self.overlays.list[i];
            let (from, to) = (at.max(start), (at + n).min(end));
            let dest = &mut chunk[(from - start) as usize..(to - start) as usize];
            match bytes {
                Some(b) => dest.copy_from_slice(&b[(from - at) as usize..(to - at) as usize]),
                None => dest.fill(0),
            }
        }
    }

    fn emit(&mut self, bytes: &[u8]) {
        if let Some(h) = &mut self.hasher {
            h.update(bytes);
        }
        self.sink.append(bytes);
        self.pos += bytes.len() as u64;
    }
}

/// Writes the output image of `elf` with `rewrite` applied into `sink`, front to back, and
/// returns its length. Takes the new sections' contents and frees each one once it is
/// streamed: neither the image nor, past their turn, the new sections (the rewritten debug
/// info above all) are held at the end of the run. Everything is laid out and checked before
/// the first byte goes out, so an error leaves nothing half-written behind it.
pub fn write_output(
    elf: &ElfFile<'_>,
    segment: &NewSegment,
    mut rewrite: Rewrite,
    sink: &mut dyn ImageSink,
) -> Result<u64> {
    let bad = |what: &'static str, detail: String| ElfError::malformed(what, detail);
    let section_sizes: Vec<u64> = rewrite
        .sections
        .iter()
        .map(|s| s.data.len() as u64)
        .collect();
    let rewrite = &mut rewrite;
    let hdr = header(elf)?;
    let input = elf.data();
    // The input up to the new segment stays where it is; what lies beyond (non-allocated
    // sections, the section headers) is laid out again behind the segment. Only the part that
    // stays is copied, so the input's debug info is not carried twice (PostgreSQL's server:
    // 89 MB copied to keep 10).
    let kept = (segment.offset.0 as usize).min(input.len());

    // 1. In-place patches. None may touch the ELF header or the program header table, which
    // are written from what is computed below: a patch there (a relocation of a corrupt
    // input that claims to sit in them) would be silently lost, and the output would
    // disagree with what was planned.
    let phdrs_start = hdr.e_phoff(LE);
    let phdrs_end = phdrs_start.saturating_add(elf.segments().len() as u64 * PHDR_SIZE);
    let headers = [
        (0, u64::from(hdr.e_ehsize(LE)).max(64)),
        (phdrs_start, phdrs_end),
    ];
    let mut patch_offsets: Vec<u64> = Vec::with_capacity(rewrite.patches.len());
    for (addr, bytes) in &rewrite.patches {
        let off = elf
            .file_offset_of(*addr)
            .ok_or_else(|| bad("patch", format!("{addr} is not file-backed")))?
            .0 as usize;
        let end = off + bytes.len();
        if let Some((start, stop)) = headers
            .iter()
            .find(|&&(start, stop)| (off as u64) < stop && start < end as u64)
        {
            return Err(bad(
                "patch",
                format!(
                    "{addr} lies in the ELF or program headers (file offsets {start:#x}..{stop:#x})"
                ),
            ));
        }
        // Where a section covers the patch, readers take the bytes from the section: one
        // without contents there (a corrupt type, NOBITS) would hide the patch from them, and
        // one whose file offset disagrees with the segment mapping its address would make
        // the patch land on other bytes than the ones discovery decoded.
        if let Some(sec) = elf.section_containing(*addr) {
            let in_section = *addr - sec.addr;
            if (sec.data.len() as u64) < in_section + bytes.len() as u64 {
                return Err(bad(
                    "patch",
                    format!("{addr} lies in a section without file contents there"),
                ));
            }
            let by_section = sec.offset.0.saturating_add(in_section);
            if by_section != off as u64 {
                return Err(bad(
                    "patch",
                    format!(
                        "{addr} is at file offset {by_section:#x} by section {} but at {off:#x} by \
                         its segment (section and program headers disagree)",
                        sec.name.escape_debug()
                    ),
                ));
            }
        }
        if end > kept
            || elf
                .file_offset_of(*addr + (bytes.len() as u64 - 1))
                .is_none()
        {
            return Err(bad(
                "patch",
                format!("{addr}+{} leaves its segment", bytes.len()),
            ));
        }
        patch_offsets.push(off as u64);
    }

    // 2. The new segment: program headers, then allocated sections at their addresses.
    let seg_start = segment.offset.0;
    if let Some(s) = rewrite
        .sections
        .iter()
        .find(|s| s.is_alloc() && s.addr < segment.content_start())
    {
        return Err(bad(
            "new section",
            format!("{} below the new segment", s.name),
        ));
    }
    let seg_len = new_segment_end(segment, rewrite) - segment.vaddr;
    let alloc_offsets: Vec<u64> = rewrite
        .sections
        .iter()
        .filter(|s| s.is_alloc())
        .map(|s| seg_start + (s.addr - segment.vaddr))
        .collect();
    // Streamed in address order, so no two may share bytes.
    let mut alloc_order: Vec<usize> = (0..rewrite.sections.len())
        .filter(|&i| rewrite.sections[i].is_alloc() && !rewrite.sections[i].data.is_empty())
        .collect();
    alloc_order.sort_by_key(|&i| rewrite.sections[i].addr);
    for pair in alloc_order.windows(2) {
        let (a, b) = (&rewrite.sections[pair[0]], &rewrite.sections[pair[1]]);
        if a.addr + a.data.len() as u64 > b.addr {
            return Err(bad(
                "new section",
                format!("{} overlaps {}", a.name, b.name),
            ));
        }
    }

    // Program header table: the input's (less the slot the new PT_LOAD reuses), the new
    // PT_LOAD after the last PT_LOAD, PT_PHDR (if the table moves) and PT_GNU_EH_FRAME
    // repointed.
    let mut phdrs: Vec<elf::ProgramHeader64<LE>> = hdr
        .program_headers(LE, input)
        .map_err(|e| bad("program header table", e.to_string()))?
        .to_vec();
    let input_phnum = phdrs.len();
    if let Some(slot) = segment.reused_slot {
        if rewrite.counters.is_some() || slot >= phdrs.len() {
            return Err(bad(
                "program header table",
                "no slot for the headers to add".into(),
            ));
        }
        phdrs.remove(slot);
    }
    let last_load = phdrs
        .iter()
        .rposition(|p| p.p_type(LE) == elf::PT_LOAD)
        .ok_or_else(|| bad("program header table", "no PT_LOAD".into()))?;
    let load = elf::ProgramHeader64::<LE> {
        p_type: U32::new(LE, elf::PT_LOAD),
        p_flags: U32::new(LE, elf::PF_R | elf::PF_X),
        p_offset: U64::new(LE, segment.offset.0),
        p_vaddr: U64::new(LE, segment.vaddr.get()),
        p_paddr: U64::new(LE, segment.vaddr.get()),
        p_filesz: U64::new(LE, seg_len),
        p_memsz: U64::new(LE, seg_len),
        p_align: U64::new(LE, rewrite.load_align.max(PAGE)),
    };
    phdrs.insert(last_load + 1, load);
    if let Some((addr, size)) = rewrite.counters {
        if addr.get() % PAGE != 0 || size % PAGE != 0 || addr + size > segment.vaddr {
            return Err(bad(
                "counter segment",
                format!("{addr}+{size:#x} is not page-aligned below the new segment"),
            ));
        }
        // File offset congruent to the address; nothing is read from the file.
        let counters = elf::ProgramHeader64::<LE> {
            p_type: U32::new(LE, elf::PT_LOAD),
            p_flags: U32::new(LE, elf::PF_R | elf::PF_W),
            p_offset: U64::new(LE, segment.offset.0),
            p_vaddr: U64::new(LE, addr.get()),
            p_paddr: U64::new(LE, addr.get()),
            p_filesz: U64::new(LE, 0),
            p_memsz: U64::new(LE, size),
            p_align: U64::new(LE, PAGE),
        };
        phdrs.insert(last_load + 1, counters);
    }
    for p in &mut phdrs {
        match p.p_type(LE) {
            elf::PT_PHDR if !segment.keeps_header_table() => {
                p.p_offset = U64::new(LE, segment.offset.0);
                p.p_vaddr = U64::new(LE, segment.vaddr.get());
                p.p_paddr = U64::new(LE, segment.vaddr.get());
                p.p_filesz = U64::new(LE, segment.phdr_size);
                p.p_memsz = U64::new(LE, segment.phdr_size);
            }
            elf::PT_GNU_EH_FRAME => {
                if let Some((addr, size)) = rewrite.eh_frame_hdr {
                    let off = segment.offset.0 + (addr - segment.vaddr);
                    p.p_offset = U64::new(LE, off);
                    p.p_vaddr = U64::new(LE, addr.get());
                    p.p_paddr = U64::new(LE, addr.get());
                    p.p_filesz = U64::new(LE, size);
                    p.p_memsz = U64::new(LE, size);
                }
            }
            _ => {}
        }
    }
    let phdr_bytes: Vec<u8> = phdrs
        .iter()
        .flat_map(|p| object::bytes_of(p).iter().copied())
        .collect();
    let phoff = if segment.keeps_header_table() {
        debug_assert_eq!(phdrs.len(), input_phnum);
        hdr.e_phoff(LE)
    } else {
        debug_assert_eq!(phdr_bytes.len() as u64, segment.phdr_size);
        seg_start
    };
    if phoff.saturating_add(phdr_bytes.len() as u64) > seg_start + seg_len {
        return Err(bad(
            "program header table",
            format!("at {phoff:#x}, past the new segment's end"),
        ));
    }

    // 3. The input's non-allocated sections that lay beyond the new segment's offset, moved
    //    behind it (contents the output replaces left out), then the new ones.
    let mut pos = seg_start + seg_len;
    let mut moved_sections: Vec<(usize, u64, u64)> = Vec::new();
    // Input bytes to stream behind the segment: (file offset in the output, bytes).
    let mut moved_bytes: Vec<(u64, &[u8])> = Vec::new();
    // Dropped sections before the new segment, blanked where they are.
    let mut blanked: Vec<(u64, u64)> = Vec::new();
    for sec in elf.sections().iter().skip(1) {
        let (start, size) = (sec.offset.0, sec.size);
        if sec.is_alloc() || sec.is_nobits() {
            continue;
        }
        let dropped = rewrite.drop_contents.contains(&(sec.index as u32));
        if start.saturating_add(size) <= segment.offset.0 {
            // Before the new segment (in the page-alignment gap): stays, or is blanked.
            if dropped {
                blanked.push((start, size));
                moved_sections.push((sec.index, 0, 0));
            }
            continue;
        }
        if dropped || size == 0 {
            moved_sections.push((sec.index, 0, 0));
            continue;
        }
        let bytes = input
            .get(start as usize..start.saturating_add(size) as usize)
            .ok_or_else(|| bad("section", format!("{} lies outside the file", sec.name)))?;
        // A corrupt alignment would pad the output by exabytes (found by the writers fuzz
        // target): a power of two up to 1 MiB, or none.
        if !(sec.align == 0 || (sec.align.is_power_of_two() && sec.align <= 1 << 20)) {
            return Err(bad(
                "section",
                format!("{} has an alignment of {:#x}", sec.name, sec.align),
            ));
        }
        let off = align(pos, sec.align);
        moved_bytes.push((off, bytes));
        pos = off + size;
        moved_sections.push((sec.index, off, size));
    }
    let mut non_alloc_offsets = Vec::new();
    for s in rewrite.sections.iter().filter(|s| !s.is_alloc()) {
        let off = align(pos, s.align);
        pos = off + s.data.len() as u64;
        non_alloc_offsets.push(off);
    }

    // 4. Section headers, with a new .shstrtab last.
    let input_shdrs = hdr
        .section_headers(LE, input)
        .map_err(|e| bad("section header table", e.to_string()))?;
    let old_count = input_shdrs.len() as u32;
    let new_count = old_count + rewrite.sections.len() as u32 + 1;
    if new_count >= u32::from(elf::SHN_LORESERVE) {
        return Err(bad("section header table", "too many sections".into()));
    }
    let mut shstrtab = vec![0u8];
    let mut add_name = |name: &[u8]| {
        let at = shstrtab.len() as u32;
        shstrtab.extend_from_slice(name);
        shstrtab.push(0);
        at
    };
    let mut shdrs: Vec<elf::SectionHeader64<LE>> = Vec::with_capacity(new_count as usize);
    for (i, sh) in input_shdrs.iter().enumerate() {
        let mut sh = *sh;
        if i == 0 {
            // Section 0 carries only the extended-numbering fields, which this writer never
            // uses (it refuses SHN_LORESERVE sections and PN_XNUM headers): zero, whatever a
            // corrupt input held there (a name offset past the new .shstrtab, a type).
            shdrs.push(null_section_header());
            continue;
        }
        let name = match rewrite.renames.iter().find(|(k, _)| *k as usize == i) {
            Some((_, new)) => new.as_bytes().to_vec(),
            None => elf
                .section(i)
                .map(|s| s.name.as_bytes().to_vec())
                .unwrap_or_default(),
        };
        sh.sh_name = U32::new(LE, add_name(&name));
        if let Some(&(_, offset, size)) = moved_sections.iter().find(|m| m.0 == i) {
            sh.sh_offset = U64::new(LE, offset);
            sh.sh_size = U64::new(LE, size);
        }
        if rewrite.retype_as_data.contains(&(i as u32)) || i == hdr.e_shstrndx(LE).0 as usize {
            sh.sh_type = U32::new(LE, elf::SHT_PROGBITS);
            sh.sh_link = U32::new(LE, 0);
            sh.sh_info = U32::new(LE, 0);
            sh.sh_entsize = U64::new(LE, 0);
            sh.sh_flags = U64::new(
                LE,
                elf::SectionFlags(sh.sh_flags(LE).0 & !elf::SHF_INFO_LINK.0),
            );
        }
        shdrs.push(sh);
    }
    let (mut alloc_i, mut non_alloc_i) = (0, 0);
    for (s, &size) in rewrite.sections.iter().zip(&section_sizes) {
        let offset = if s.is_alloc() {
            alloc_i += 1;
            alloc_offsets[alloc_i - 1]
        } else {
            non_alloc_i += 1;
            non_alloc_offsets[non_alloc_i - 1]
        };
        let link = match s.link {
            SectionLink::None => 0,
            SectionLink::Original(k) => k,
            SectionLink::New(k) => old_count + k,
        };
        shdrs.push(elf::SectionHeader64::<LE> {
            sh_name: U32::new(LE, add_name(s.name.as_bytes())),
            sh_type: U32::new(LE, elf::SectionType(s.sh_type)),
            sh_flags: U64::new(LE, elf::SectionFlags(s.flags)),
            sh_addr: U64::new(LE, if s.is_alloc() { s.addr.get() } else { 0 }),
            sh_offset: U64::new(LE, offset),
            sh_size: U64::new(LE, size),
            sh_link: U32::new(LE, link),
            sh_info: U32::new(LE, s.info),
            sh_addralign: U64::new(LE, s.align.max(1)),
            sh_entsize: U64::new(LE, s.entsize),
        });
    }
    if let Some((addr, size)) = rewrite.counters {
        shdrs.push(elf::SectionHeader64::<LE> {
            sh_name: U32::new(LE, add_name(b".rivet.counters")),
            sh_type: U32::new(LE, elf::SHT_NOBITS),
            sh_flags: U64::new(LE, elf::SectionFlags(elf::SHF_ALLOC.0 | elf::SHF_WRITE.0)),
            sh_addr: U64::new(LE, addr.get()),
            sh_offset: U64::new(LE, segment.offset.0),
            sh_size: U64::new(LE, size),
            sh_link: U32::new(LE, 0),
            sh_info: U32::new(LE, 0),
            sh_addralign: U64::new(LE, PAGE),
            sh_entsize: U64::new(LE, 0),
        });
    }
    let shstrtab_name = add_name(b".shstrtab");
    let shstrtab_offset = pos;
    pos += shstrtab.len() as u64;
    shdrs.push(elf::SectionHeader64::<LE> {
        sh_name: U32::new(LE, shstrtab_name),
        sh_type: U32::new(LE, elf::SHT_STRTAB),
        sh_flags: U64::new(LE, elf::SectionFlags(0)),
        sh_addr: U64::new(LE, 0),
        sh_offset: U64::new(LE, shstrtab_offset),
        sh_size: U64::new(LE, shstrtab.len() as u64),
        sh_link: U32::new(LE, 0),
        sh_info: U32::new(LE, 0),
        sh_addralign: U64::new(LE, 1),
        sh_entsize: U64::new(LE, 0),
    });
    let shoff = align(pos, 8);
    let shdr_bytes: Vec<u8> = shdrs
        .iter()
        .flat_map(|sh| object::bytes_of(sh).iter().copied())
        .collect();
    let total = shoff + shdr_bytes.len() as u64;

    // 5. ELF header.
    let mut new_hdr = *hdr;
    if let Some(entry) = rewrite.entry {
        new_hdr.e_entry = U64::new(LE, entry.get());
    }
    new_hdr.e_phoff = U64::new(LE, phoff);
    new_hdr.e_phnum = U16::new(LE, phdrs.len() as u16);
    new_hdr.e_shoff = U64::new(LE, shoff);
    new_hdr.e_shnum = U16::new(LE, shdrs.len() as u16);
    new_hdr.e_shstrndx = U16::new(LE, elf::SymbolSection((shdrs.len() - 1) as u16));
    let hdr_bytes = object::bytes_of(&new_hdr);

    // 6. Build-id: a hash of the whole output (with the id zeroed) and the salt.
    let build_id = rewrite
        .rebuild_id_salt
        .as_ref()
        .zip(build_id_location(elf))
        .filter(|(_, (at, len))| (at + len) as u64 <= total);

    // Out it goes, in file order, with what changed laid over what is streamed, in the order
    // the changes were decided above.
    let mut overlays = Overlays::new();
    for ((_, bytes), &off) in rewrite.patches.iter().zip(&patch_offsets) {
        overlays.bytes(off, bytes);
    }
    overlays.bytes(phoff, &phdr_bytes);
    for &(start, size) in &blanked {
        overlays.zeros(start, size);
    }
    overlays.bytes(0, hdr_bytes);
    if let Some((_, (at, len))) = build_id {
        overlays.zeros(at as u64, len as u64);
    }
    overlays.seal();
    sink.expect_len(total);
    let mut out = Stream {
        sink,
        input: elf,
        overlays,
        hasher: build_id.map(|_| sha1_smol::Sha1::new()),
        pos: 0,
        scratch: Vec::new(),
    };
    out.input_bytes(&input[..kept]);
    out.zeros_to(seg_start);
    out.zeros(segment.phdr_size);
    for &i in &alloc_order {
        let s = &mut rewrite.sections[i];
        out.zeros_to(seg_start + (s.addr - segment.vaddr));
        let data = std::mem::take(&mut s.data);
        out.bytes(&data);
    }
    out.zeros_to(seg_start + seg_len);
    for &(off, bytes) in &moved_bytes {
        out.zeros_to(off);
        out.input_bytes(bytes);
    }
    for (s, &off) in rewrite
        .sections
        .iter_mut()
        .filter(|s| !s.is_alloc())
        .zip(&non_alloc_offsets)
    {
        out.zeros_to(off);
        let data = std::mem::take(&mut s.data);
        out.bytes(&data);
    }
    out.bytes(&shstrtab);
    out.zeros_to(shoff);
    out.bytes(&shdr_bytes);
    debug_assert_eq!(out.pos, total);
    if let (Some((salt, (at, len))), Some(mut hasher)) = (build_id, out.hasher.take()) {
        hasher.update(salt);
        let digest = hasher.digest().bytes();
        let id: Vec<u8> = (0..len).map(|i| digest[i % digest.len()]).collect();
        out.sink.overwrite(at as u64, &id);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_rewrite_keeps_the_program_valid() {
        let data = std::fs::read("/bin/true").unwrap();
        let elf = ElfFile::parse(&data).unwrap();
        let seg = new_segment(&elf).unwrap();
        let out = image(&elf, &seg, Rewrite::default());
        let again = ElfFile::parse(&out).unwrap();
        // Debian's /bin/true has a PT_NOTE duplicating PT_GNU_PROPERTY: its slot holds the new
        // PT_LOAD, and the table stays right after the ELF header.
        assert!(seg.keeps_header_table());
        assert_eq!(again.segments().len(), elf.segments().len());
        assert_eq!(&out[32..40], &data[32..40], "e_phoff moved");
        let loads = |e: &ElfFile<'_>| e.segments().iter().filter(|s| s.is_load()).count();
        assert_eq!(loads(&again), loads(&elf) + 1);
        let notes = |e: &ElfFile<'_>| {
            e.segments()
                .iter()
                .filter(|s| s.p_type == elf::PT_NOTE.0)
                .count()
        };
        assert_eq!(notes(&again), notes(&elf) - 1);
        assert_eq!(again.sections().len(), elf.sections().len() + 1);
        // Loaded bytes are untouched (except the ELF header and the program header table);
        // the rest moved with its section.
        let end = loaded_end(&elf) as usize;
        let table_end = 64 + elf.segments().len() * PHDR_SIZE as usize;
        assert_eq!(&out[table_end..end], &data[table_end..end]);
        for (a, b) in elf.sections().iter().zip(again.sections()) {
            assert_eq!(a.data, b.data, "{}", a.name);
        }
        for (a, b) in elf.sections().iter().zip(again.sections()) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.addr, b.addr);
        }
        // And the kernel and ld.so still load it.
        assert!(runs(&out, "in-place"));
    }

    /// Writes `image` to a temporary file and runs it. One at a time: a test thread forking
    /// while another still holds its file open for writing would make that file's exec fail
    /// with ETXTBSY (the child inherits the descriptor until its own exec).
    fn runs(image: &[u8], tag: &str) -> bool {
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let path = std::env::temp_dir().join(format!("rivet-writer-{tag}-{}", std::process::id()));
        std::fs::write(&path, image).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let status = std::process::Command::new(&path).status().unwrap();
        std::fs::remove_file(&path).unwrap();
        status.success()
    }

    /// The image in memory and the image streamed into a file are the same bytes.
    fn image(elf: &ElfFile<'_>, seg: &NewSegment, rewrite: Rewrite) -> Vec<u8> {
        let mut in_memory = Vec::new();
        let len = write_output(elf, seg, rewrite.clone(), &mut in_memory).unwrap();
        assert_eq!(len, in_memory.len() as u64);
        let path = std::env::temp_dir().join(format!(
            "rivet-writer-stream-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::File::create(&path).unwrap();
        let mut sink = crate::sink::FileSink::new(&file);
        assert_eq!(write_output(elf, seg, rewrite, &mut sink).unwrap(), len);
        sink.finish().unwrap();
        drop(file);
        let streamed = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(streamed == in_memory, "the streamed image differs");
        in_memory
    }

    /// New code, new non-allocated sections, a dropped input section and a new build-id
    /// (hashed while streaming, written last) come out in one image.
    #[test]
    fn new_sections_a_dropped_one_and_a_new_build_id() {
        let data = std::fs::read("/bin/true").unwrap();
        let elf = ElfFile::parse(&data).unwrap();
        let seg = new_segment(&elf).unwrap();
        let dropped = elf
            .sections()
            .iter()
            .find(|s| s.name == ".gnu_debuglink")
            .expect("Debian's /bin/true has a .gnu_debuglink");
        let rewrite = Rewrite {
            sections: vec![
                NewSection::new(
                    ".text.new",
                    elf::SHT_PROGBITS.0,
                    elf::SHF_ALLOC.0 | elf::SHF_EXECINSTR.0,
                    seg.content_start(),
                    vec![0xcc; 5000],
                    64,
                ),
                NewSection::new(
                    ".note.new",
                    elf::SHT_PROGBITS.0,
                    0,
                    Vaddr(0),
                    vec![7; 3000],
                    8,
                ),
            ],
            drop_contents: vec![dropped.index as u32],
            rebuild_id_salt: Some(b"salt".to_vec()),
            ..Rewrite::default()
        };
        let out = image(&elf, &seg, rewrite);
        let again = ElfFile::parse(&out).unwrap();
        let section = |name: &str| {
            again
                .sections()
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.data.len())
        };
        assert_eq!(section(".gnu_debuglink"), Some(0));
        assert_eq!(section(".text.new"), Some(5000));
        assert_eq!(section(".note.new"), Some(3000));
        let id = again.build_id().expect("the input's build-id note");
        assert_ne!(Some(id), elf.build_id(), "build-id not replaced");
        // The id is the hash of the output with the id zeroed, and the salt.
        let at = id.as_ptr() as usize - out.as_ptr() as usize;
        let mut zeroed = out.clone();
        zeroed[at..at + id.len()].fill(0);
        let mut hasher = sha1_smol::Sha1::new();
        hasher.update(&zeroed);
        hasher.update(b"salt");
        assert_eq!(id, &hasher.digest().bytes()[..id.len()]);
        assert!(runs(&out, "bound"));
    }

    #[test]
    fn a_second_new_header_moves_the_table_into_the_new_segment() {
        let data = std::fs::read("/bin/true").unwrap();
        let elf = ElfFile::parse(&data).unwrap();
        let mut seg = new_segment(&elf).unwrap();
        let counters = seg.reserve_counters(4096);
        assert!(!seg.keeps_header_table());
        let rewrite = Rewrite {
            counters: Some((counters, 4096)),
            ..Rewrite::default()
        };
        let out = image(&elf, &seg, rewrite);
        let again = ElfFile::parse(&out).unwrap();
        assert_eq!(again.segments().len(), elf.segments().len() + 2);
        let phdr = again
            .segments()
            .iter()
            .find(|s| s.p_type == elf::PT_PHDR.0)
            .unwrap();
        assert_eq!(phdr.vaddr, seg.vaddr);
        assert_eq!(phdr.offset, seg.offset);
        assert!(runs(&out, "moved"));
    }
}
