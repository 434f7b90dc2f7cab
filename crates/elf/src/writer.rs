//! The append-only output writer.
//!
//! A rewritten binary keeps every byte of its input at the same file offset and address: code
//! that was not rewritten, data, dynamic tables, everything the loader already knows how to
//! map. What changes is (1) a list of small in-place patches at virtual addresses (relocated
//! pointers, jump-table entries, forwarding jumps, symbol values), and (2) one new PT_LOAD after
//! the last one, holding the moved program header table followed by all new allocated
//! content. Non-allocated additions (symbol tables, notes) and a fresh section header table
//! go after it in the file. Original sections may be renamed or re-typed (so tools stop
//! reading stale tables) but never removed, so section indices stay valid.
//!
//! The kernel computes the span of an executable's mapping from the first and last PT_LOAD in
//! table order, and `ld.so` wants PT_LOADs sorted by address: the new PT_LOAD is inserted
//! right after the last existing one and sits above all of them.

use object::LittleEndian as LE;
use object::elf;
use object::endian::{U16, U32, U64};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};

use crate::addr::{FileOffset, Vaddr};
use crate::error::{ElfError, Result};
use crate::file::ElfFile;

const PAGE: u64 = 0x1000;
const PHDR_SIZE: u64 = std::mem::size_of::<elf::ProgramHeader64<LE>>() as u64;

/// Where the new segment goes: the first page above every PT_LOAD, at a file offset
/// congruent to it modulo the page size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewSegment {
    pub vaddr: Vaddr,
    pub offset: FileOffset,
    /// Bytes reserved at its start for the program header table.
    pub phdr_size: u64,
}

impl NewSegment {
    /// First address after the program header table.
    pub fn content_start(&self) -> Vaddr {
        self.vaddr + self.phdr_size
    }

    /// Makes room, right below the new segment, for a zero-filled segment of `size` bytes
    /// (`Rewrite::counters`), and returns its address.
    pub fn reserve_counters(&mut self, size: u64) -> Vaddr {
        let size = size.div_ceil(PAGE) * PAGE;
        let at = self.vaddr;
        self.vaddr = self.vaddr + size;
        self.phdr_size += PHDR_SIZE;
        at
    }
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
    let top = elf
        .segments()
        .iter()
        .filter(|s| s.is_load())
        .map(|s| s.vaddr.get().saturating_add(s.memsz))
        .max()
        .ok_or_else(|| ElfError::malformed("program header table", "no PT_LOAD segment"))?;
    let vaddr = top
        .checked_add(PAGE - 1)
        .map(|v| v & !(PAGE - 1))
        .ok_or_else(|| ElfError::malformed("program header table", "segments reach the top"))?;
    // The new segment follows the loaded part of the file; non-allocated sections after it
    // (debug info, symbols) move behind the new segment, which lets the writer leave out the
    // ones the output replaces.
    let offset = (loaded_end(elf) + PAGE - 1) & !(PAGE - 1);
    Ok(NewSegment {
        vaddr: Vaddr(vaddr),
        offset: FileOffset(offset),
        phdr_size: (phnum + 1) * PHDR_SIZE,
    })
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

/// Writes the output image of `elf` with `rewrite` applied.
pub fn write_output(elf: &ElfFile<'_>, segment: &NewSegment, rewrite: &Rewrite) -> Result<Vec<u8>> {
    let bad = |what: &'static str, detail: String| ElfError::malformed(what, detail);
    let hdr = header(elf)?;
    let input = elf.data();
    let mut out = input.to_vec();

    // 1. In-place patches.
    for (addr, bytes) in &rewrite.patches {
        let off = elf
            .file_offset_of(*addr)
            .ok_or_else(|| bad("patch", format!("{addr} is not file-backed")))?
            .0 as usize;
        let end = off + bytes.len();
        if end > input.len()
            || elf
                .file_offset_of(*addr + (bytes.len() as u64 - 1))
                .is_none()
        {
            return Err(bad(
                "patch",
                format!("{addr}+{} leaves its segment", bytes.len()),
            ));
        }
        out[off..end].copy_from_slice(bytes);
    }

    // 2. The new segment: program headers, then allocated sections at their addresses.
    out.resize(segment.offset.0 as usize, 0);
    let seg_start = out.len();
    let mut seg_end = segment.vaddr + segment.phdr_size;
    for s in rewrite.sections.iter().filter(|s| s.is_alloc()) {
        if s.addr < segment.content_start() {
            return Err(bad(
                "new section",
                format!("{} below the new segment", s.name),
            ));
        }
        seg_end = seg_end.max(s.addr + s.data.len() as u64);
    }
    let seg_len = (seg_end - segment.vaddr) as usize;
    out.resize(seg_start + seg_len, 0);
    let mut alloc_offsets = Vec::new();
    for s in rewrite.sections.iter().filter(|s| s.is_alloc()) {
        let off = seg_start + (s.addr - segment.vaddr) as usize;
        out[off..off + s.data.len()].copy_from_slice(&s.data);
        alloc_offsets.push(off as u64);
    }

    // Program header table: the input's, the new PT_LOAD after the last PT_LOAD, PT_PHDR and
    // PT_GNU_EH_FRAME repointed.
    let mut phdrs: Vec<elf::ProgramHeader64<LE>> = hdr
        .program_headers(LE, input)
        .map_err(|e| bad("program header table", e.to_string()))?
        .to_vec();
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
        p_filesz: U64::new(LE, seg_len as u64),
        p_memsz: U64::new(LE, seg_len as u64),
        p_align: U64::new(LE, PAGE),
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
            elf::PT_PHDR => {
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
    debug_assert_eq!(phdr_bytes.len() as u64, segment.phdr_size);
    out[seg_start..seg_start + phdr_bytes.len()].copy_from_slice(&phdr_bytes);

    // 3. The input's non-allocated sections that lay beyond the new segment's offset, moved
    //    behind it (contents the output replaces left out), then the new ones.
    let mut moved_sections: Vec<(usize, u64, u64)> = Vec::new();
    for sec in elf.sections().iter().skip(1) {
        let (start, size) = (sec.offset.0, sec.size);
        if sec.is_alloc() || sec.is_nobits() {
            continue;
        }
        let dropped = rewrite.drop_contents.contains(&(sec.index as u32));
        if start.saturating_add(size) <= segment.offset.0 {
            // Before the new segment (in the page-alignment gap): stays, or is blanked.
            if dropped {
                if let Some(bytes) = out.get_mut(start as usize..(start + size) as usize) {
                    bytes.fill(0);
                }
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
        let off = align(out.len() as u64, sec.align);
        out.resize(off as usize, 0);
        out.extend_from_slice(bytes);
        moved_sections.push((sec.index, off, size));
    }
    let mut non_alloc_offsets = Vec::new();
    for s in rewrite.sections.iter().filter(|s| !s.is_alloc()) {
        let off = align(out.len() as u64, s.align);
        out.resize(off as usize, 0);
        out.extend_from_slice(&s.data);
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
            shdrs.push(sh);
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
    for s in &rewrite.sections {
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
            sh_size: U64::new(LE, s.data.len() as u64),
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
    let shstrtab_offset = out.len() as u64;
    out.extend_from_slice(&shstrtab);
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
    let shoff = align(out.len() as u64, 8);
    out.resize(shoff as usize, 0);
    for sh in &shdrs {
        out.extend_from_slice(object::bytes_of(sh));
    }

    // 5. ELF header.
    let mut new_hdr = *hdr;
    if let Some(entry) = rewrite.entry {
        new_hdr.e_entry = U64::new(LE, entry.get());
    }
    new_hdr.e_phoff = U64::new(LE, segment.offset.0);
    new_hdr.e_phnum = U16::new(LE, phdrs.len() as u16);
    new_hdr.e_shoff = U64::new(LE, shoff);
    new_hdr.e_shnum = U16::new(LE, shdrs.len() as u16);
    new_hdr.e_shstrndx = U16::new(LE, elf::SymbolSection((shdrs.len() - 1) as u16));
    let hdr_bytes = object::bytes_of(&new_hdr);
    out[..hdr_bytes.len()].copy_from_slice(hdr_bytes);

    // 6. Build-id: a hash of the whole output (with the id zeroed) and the salt.
    if let (Some(salt), Some((at, len))) = (&rewrite.rebuild_id_salt, build_id_location(elf)) {
        out[at..at + len].fill(0);
        let mut hasher = sha1_smol::Sha1::new();
        hasher.update(&out);
        hasher.update(salt);
        let digest = hasher.digest().bytes();
        for (i, b) in out[at..at + len].iter_mut().enumerate() {
            *b = digest[i % digest.len()];
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_rewrite_keeps_the_program_valid() {
        let data = std::fs::read("/bin/true").unwrap();
        let elf = ElfFile::parse(&data).unwrap();
        let seg = new_segment(&elf).unwrap();
        let out = write_output(&elf, &seg, &Rewrite::default()).unwrap();
        let again = ElfFile::parse(&out).unwrap();
        assert_eq!(again.segments().len(), elf.segments().len() + 1);
        assert_eq!(again.sections().len(), elf.sections().len() + 1);
        // Loaded bytes are untouched (except the ELF header); the rest moved with its section.
        let end = loaded_end(&elf) as usize;
        assert_eq!(&out[64..end], &data[64..end]);
        for (a, b) in elf.sections().iter().zip(again.sections()) {
            assert_eq!(a.data, b.data, "{}", a.name);
        }
        for (a, b) in elf.sections().iter().zip(again.sections()) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.addr, b.addr);
        }
        // And the kernel and ld.so still load it, with the program headers in the new segment.
        let path = std::env::temp_dir().join(format!("rivet-writer-{}", std::process::id()));
        std::fs::write(&path, &out).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let status = std::process::Command::new(&path).status().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(status.success());
    }
}
