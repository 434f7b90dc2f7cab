//! The ELF file view: header, segments, sections, and reading bytes by address.
//!
//! `ElfFile::parse` validates what the rest of Rivet relies on (ELF64, little-endian, x86-64,
//! an executable or shared library) and copies the small tables (section and program headers)
//! into plain structs, so later code never touches raw endian-typed fields. Section contents
//! stay borrowed from the input.

use std::borrow::Cow;

use object::LittleEndian as LE;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};

use crate::addr::{FileOffset, Vaddr, VaddrRange};
use crate::error::{ElfError, Result};
use crate::mapped::MappedFile;

pub(crate) type Header = elf::FileHeader64<LE>;

/// What kind of linked object the input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElfKind {
    /// ET_EXEC: a position-dependent executable.
    Executable,
    /// ET_DYN marked as PIE (DF_1_PIE) or with an interpreter.
    PieExecutable,
    /// ET_DYN without those marks: a shared library.
    SharedLibrary,
}

impl ElfKind {
    pub fn describe(self) -> &'static str {
        match self {
            ElfKind::Executable => "executable (non-PIE)",
            ElfKind::PieExecutable => "executable (PIE)",
            ElfKind::SharedLibrary => "shared library",
        }
    }
}

/// One section header, decoded.
#[derive(Clone, Debug)]
pub struct Section<'data> {
    pub index: usize,
    pub name: Cow<'data, str>,
    pub sh_type: u32,
    pub flags: u64,
    pub addr: Vaddr,
    pub offset: FileOffset,
    pub size: u64,
    pub link: u32,
    pub info: u32,
    pub entsize: u64,
    pub align: u64,
    /// The file bytes of the section; empty for SHT_NOBITS.
    pub data: &'data [u8],
}

impl Section<'_> {
    pub fn is_alloc(&self) -> bool {
        self.flags & elf::SHF_ALLOC.0 != 0
    }
    pub fn is_exec(&self) -> bool {
        self.flags & elf::SHF_EXECINSTR.0 != 0
    }
    pub fn is_writable(&self) -> bool {
        self.flags & elf::SHF_WRITE.0 != 0
    }
    pub fn is_nobits(&self) -> bool {
        self.sh_type == elf::SHT_NOBITS.0
    }
    pub fn is_tls(&self) -> bool {
        self.flags & elf::SHF_TLS.0 != 0
    }
    pub fn range(&self) -> VaddrRange {
        VaddrRange::new(self.addr, self.size)
    }
}

/// One program header, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub p_type: u32,
    pub flags: u32,
    pub offset: FileOffset,
    pub vaddr: Vaddr,
    pub filesz: u64,
    pub memsz: u64,
    pub align: u64,
}

impl Segment {
    pub fn is_load(&self) -> bool {
        self.p_type == elf::PT_LOAD.0
    }
    pub fn is_exec(&self) -> bool {
        self.flags & elf::PF_X.0 != 0
    }
}

/// A parsed view of an ELF input. Cheap to pass around by reference; all tables borrow `data`.
#[derive(Debug)]
pub struct ElfFile<'data> {
    data: &'data [u8],
    /// The mapping `data` is, when parsed from one (`parse_mapped`): pages read for the last
    /// time can leave the resident set (`release_pages`).
    mapping: Option<&'data MappedFile>,
    pub kind: ElfKind,
    pub entry: Vaddr,
    /// `e_machine`: which instruction set the code is (`rivet_arch::Isa` says what it means).
    pub machine: u16,
    sections: Vec<Section<'data>>,
    segments: Vec<Segment>,
    /// Indices of alloc, non-NOBITS sections sorted by address, for address lookups.
    by_addr: Vec<usize>,
}

fn machine_name(machine: u16) -> String {
    match machine {
        3 => "i386".into(),
        40 => "ARM (32-bit)".into(),
        183 => "AArch64".into(),
        243 => "RISC-V".into(),
        8 => "MIPS".into(),
        20 | 21 => "PowerPC".into(),
        22 => "s390".into(),
        other => format!("machine {other}"),
    }
}

impl<'data> ElfFile<'data> {
    /// True for AArch64 code (`e_machine` EM_AARCH64): the few format details that depend
    /// on the machine (the meaning of a DWARF call-frame opcode) ask this; everything else
    /// goes through `rivet_arch::Isa`.
    pub fn is_aarch64(&self) -> bool {
        self.machine == elf::EM_AARCH64.0
    }

    /// `parse` of a mapped file, which lets the reader give back pages it is done with
    /// (`release_pages`).
    pub fn parse_mapped(mapped: &'data MappedFile) -> Result<ElfFile<'data>> {
        let mut file = Self::parse(mapped.bytes())?;
        file.mapping = Some(mapped);
        Ok(file)
    }

    /// Tells the input's mapping that `bytes` (borrowed from `data()`) will not be read again
    /// soon ([`MappedFile::release_pages`]); nothing for an input parsed from memory. Only a
    /// matter of resident memory: reading them again works and costs a page fault.
    pub fn release_pages(&self, bytes: &[u8]) {
        if let Some(m) = self.mapping {
            m.release_pages(bytes);
        }
    }

    pub fn parse(data: &'data [u8]) -> Result<ElfFile<'data>> {
        if data.len() < 4 || &data[..4] != b"\x7fELF" {
            return Err(ElfError::NotElf);
        }
        if data.len() < 6 {
            return Err(ElfError::malformed(
                "ELF header",
                "file ends inside the identification",
            ));
        }
        if data[4] == elf::ELFCLASS32.0 {
            return Err(ElfError::Not64Bit);
        }
        if data[5] == elf::ELFDATA2MSB.0 {
            return Err(ElfError::BigEndian);
        }
        let header =
            Header::parse(data).map_err(|e| ElfError::malformed("ELF header", e.to_string()))?;
        let endian = LE;
        let machine = header.e_machine(endian).0;
        if machine != elf::EM_X86_64.0 && machine != elf::EM_AARCH64.0 {
            return Err(ElfError::WrongMachine(machine_name(machine)));
        }
        let e_type = header.e_type(endian);
        let is_dyn = match e_type {
            elf::ET_EXEC => false,
            elf::ET_DYN => true,
            elf::ET_REL => return Err(ElfError::WrongType("relocatable object (.o)")),
            elf::ET_CORE => return Err(ElfError::WrongType("core dump")),
            _ => return Err(ElfError::WrongType("unknown")),
        };

        let program_headers = header
            .program_headers(endian, data)
            .map_err(|e| ElfError::malformed("program header table", e))?;
        let segments: Vec<Segment> = program_headers
            .iter()
            .map(|ph| Segment {
                p_type: ph.p_type(endian).0,
                flags: ph.p_flags(endian).0,
                offset: FileOffset(ph.p_offset(endian)),
                vaddr: Vaddr(ph.p_vaddr(endian)),
                filesz: ph.p_filesz(endian),
                memsz: ph.p_memsz(endian),
                align: ph.p_align(endian),
            })
            .collect();

        let table = header
            .sections(endian, data)
            .map_err(|e| ElfError::malformed("section header table", e))?;
        let mut sections = Vec::with_capacity(table.len());
        for (index, sh) in table.enumerate() {
            let name_bytes = table
                .section_name(endian, sh)
                .map_err(|e| ElfError::malformed("section name table", e))?;
            let sh_type = sh.sh_type(endian).0;
            let section_data: &[u8] = if sh_type == elf::SHT_NOBITS.0 || sh_type == elf::SHT_NULL.0
            {
                &[]
            } else {
                sh.data(endian, data).map_err(|_| ElfError::Malformed {
                    what: "section contents",
                    detail: format!(
                        "section {} extends past the end of the file",
                        String::from_utf8_lossy(name_bytes).escape_debug()
                    ),
                })?
            };
            sections.push(Section {
                index: index.0,
                name: String::from_utf8_lossy(name_bytes),
                sh_type,
                flags: sh.sh_flags(endian).0,
                addr: Vaddr(sh.sh_addr(endian)),
                offset: FileOffset(sh.sh_offset(endian)),
                size: sh.sh_size(endian),
                link: sh.sh_link(endian),
                info: sh.sh_info(endian),
                entsize: sh.sh_entsize(endian),
                align: sh.sh_addralign(endian),
                data: section_data,
            });
        }
        // The ELF specification allows one section of each symbol-table type. Readers take
        // the first; a second one (a corrupt or crafted file) would be what other tools read,
        // and what a rewrite leaves live next to the table it regenerates.
        for sh_type in [elf::SHT_SYMTAB.0, elf::SHT_DYNSYM.0] {
            let mut tables = sections.iter().filter(|s| s.sh_type == sh_type);
            if let (Some(first), Some(second)) = (tables.next(), tables.next()) {
                return Err(ElfError::malformed(
                    "section header table",
                    format!(
                        "two {} sections ({} and {}); a file has at most one",
                        if sh_type == elf::SHT_SYMTAB.0 {
                            "SHT_SYMTAB"
                        } else {
                            "SHT_DYNSYM"
                        },
                        first.index,
                        second.index
                    ),
                ));
            }
        }
        let mut by_addr: Vec<usize> = sections
            .iter()
            .filter(|s| s.is_alloc() && !s.is_nobits() && !s.is_tls() && s.size > 0)
            .map(|s| s.index)
            .collect();
        by_addr.sort_by_key(|&i| (sections[i].addr, i));
        // Loaded sections with contents never share an address in a linked file; where two
        // do (a corrupt header), readers by section and by segment would see different bytes
        // at one address, and code decoded from one would be rewritten from the other.
        for pair in by_addr.windows(2) {
            let (a, b) = (&sections[pair[0]], &sections[pair[1]]);
            if a.addr.get().saturating_add(a.size) > b.addr.get() {
                return Err(ElfError::malformed(
                    "section header table",
                    format!(
                        "sections {} and {} overlap at {}",
                        a.name.escape_debug(),
                        b.name.escape_debug(),
                        b.addr
                    ),
                ));
            }
        }

        let mut file = ElfFile {
            data,
            mapping: None,
            kind: ElfKind::Executable,
            entry: Vaddr(header.e_entry(endian)),
            machine,
            sections,
            segments,
            by_addr,
        };
        if is_dyn {
            let has_interp = file.segments.iter().any(|s| s.p_type == elf::PT_INTERP.0);
            let pie_flag = file
                .dynamic()
                .ok()
                .and_then(|d| d.flags_1)
                .is_some_and(|f| f & elf::DF_1_PIE.0 != 0);
            file.kind = if pie_flag || has_interp {
                ElfKind::PieExecutable
            } else {
                ElfKind::SharedLibrary
            };
        }
        Ok(file)
    }

    pub fn data(&self) -> &'data [u8] {
        self.data
    }

    pub fn sections(&self) -> &[Section<'data>] {
        &self.sections
    }

    pub fn section(&self, index: usize) -> Option<&Section<'data>> {
        self.sections.get(index)
    }

    pub fn section_by_name(&self, name: &str) -> Option<&Section<'data>> {
        self.sections.iter().find(|s| s.name == name)
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The alloc section with file data holding `addr`, if any.
    pub fn section_containing(&self, addr: Vaddr) -> Option<&Section<'data>> {
        let pos = self
            .by_addr
            .partition_point(|&i| self.sections[i].addr <= addr);
        // Sections may overlap only when empty; walk back over at most a few candidates.
        self.by_addr[..pos]
            .iter()
            .rev()
            .take(4)
            .map(|&i| &self.sections[i])
            .find(|s| s.range().contains(addr))
    }

    /// Bytes at `addr..addr+len`, read through sections, or through PT_LOAD segments when the
    /// section table does not cover the address (stripped section headers).
    pub fn bytes_at(&self, addr: Vaddr, len: u64) -> Option<&'data [u8]> {
        if let Some(s) = self.section_containing(addr) {
            let start = (addr - s.addr) as usize;
            let end = start.checked_add(usize::try_from(len).ok()?)?;
            return s.data.get(start..end);
        }
        let seg = self.segments.iter().find(|s| {
            s.is_load() && addr >= s.vaddr && addr.get() < s.vaddr.get().saturating_add(s.filesz)
        })?;
        let start = seg.offset.0.checked_add(addr - seg.vaddr)?;
        let end = start.checked_add(len)?;
        if end > seg.offset.0.saturating_add(seg.filesz) {
            return None;
        }
        self.data
            .get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
    }

    pub fn read_u64(&self, addr: Vaddr) -> Option<u64> {
        self.bytes_at(addr, 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    }

    pub fn read_u32(&self, addr: Vaddr) -> Option<u32> {
        self.bytes_at(addr, 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    }

    pub fn read_i32(&self, addr: Vaddr) -> Option<i32> {
        self.read_u32(addr).map(|v| v as i32)
    }

    /// True when `addr` lies in an executable section (or executable segment, if there are no
    /// section headers).
    pub fn is_code_address(&self, addr: Vaddr) -> bool {
        match self.section_containing(addr) {
            Some(s) => s.is_exec(),
            None => self.segments.iter().any(|s| {
                s.is_load()
                    && s.is_exec()
                    && addr >= s.vaddr
                    && addr.get() < s.vaddr.get().saturating_add(s.memsz)
            }),
        }
    }

    /// File offset of `addr`, through the PT_LOAD that maps it.
    pub fn file_offset_of(&self, addr: Vaddr) -> Option<FileOffset> {
        let seg = self.segments.iter().find(|s| {
            s.is_load() && addr >= s.vaddr && addr.get() < s.vaddr.get().saturating_add(s.filesz)
        })?;
        seg.offset.0.checked_add(addr - seg.vaddr).map(FileOffset)
    }

    /// The DWARF sections, borrowed from the file (missing sections read as empty).
    pub fn dwarf(
        &self,
    ) -> gimli::Result<gimli::Dwarf<gimli::EndianSlice<'data, gimli::LittleEndian>>> {
        gimli::Dwarf::load(|id| -> gimli::Result<_> {
            let data = self.section_by_name(id.name()).map_or(&[][..], |s| s.data);
            Ok(gimli::EndianSlice::new(data, gimli::LittleEndian))
        })
    }

    /// The GNU build-id note, if present.
    pub fn build_id(&self) -> Option<&'data [u8]> {
        for s in self
            .sections
            .iter()
            .filter(|s| s.sh_type == elf::SHT_NOTE.0)
        {
            if let Some(id) = find_build_id(s.data) {
                return Some(id);
            }
        }
        for seg in self.segments.iter().filter(|s| s.p_type == elf::PT_NOTE.0) {
            let start = seg.offset.0 as usize;
            let Some(bytes) = start
                .checked_add(seg.filesz as usize)
                .and_then(|end| self.data.get(start..end))
            else {
                continue;
            };
            if let Some(id) = find_build_id(bytes) {
                return Some(id);
            }
        }
        None
    }

    /// The program properties of the GNU property note (`NT_GNU_PROPERTY_TYPE_0`, found
    /// through `PT_GNU_PROPERTY` or a `.note.gnu.property` section) as (type, data) pairs;
    /// empty without one. What a property means is the ISA's business (`rivet-arch`).
    pub fn gnu_properties(&self) -> Vec<(u32, &'data [u8])> {
        let from_segment = self
            .segments
            .iter()
            .find(|s| s.p_type == elf::PT_GNU_PROPERTY.0)
            .and_then(|seg| {
                let start = usize::try_from(seg.offset.0).ok()?;
                self.data
                    .get(start..start.checked_add(usize::try_from(seg.filesz).ok()?)?)
            });
        let note = from_segment.or_else(|| {
            self.sections
                .iter()
                .find(|s| s.sh_type == elf::SHT_NOTE.0 && s.name == ".note.gnu.property")
                .map(|s| s.data)
        });
        note.map(gnu_properties).unwrap_or_default()
    }

    /// True when the linker kept static relocations against code (`-Wl,--emit-relocs`): a
    /// SHT_RELA section that applies to an executable section.
    pub fn has_code_relocations(&self) -> bool {
        self.sections.iter().any(|s| {
            s.sh_type == elf::SHT_RELA.0
                && !s.is_alloc()
                && self
                    .sections
                    .get(s.info as usize)
                    .is_some_and(|t| t.is_exec())
        })
    }
}

/// Walks ELF notes (4-byte aligned namesz/descsz/type headers) looking for NT_GNU_BUILD_ID.
fn find_build_id(mut bytes: &[u8]) -> Option<&[u8]> {
    let align4 = |n: usize| n.checked_add(3).map(|v| v & !3);
    while bytes.len() >= 12 {
        let namesz = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
        let descsz = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        let n_type = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        let name_end = 12usize.checked_add(align4(namesz)?)?;
        let desc_end = name_end.checked_add(align4(descsz)?)?;
        let name = bytes.get(12..12 + namesz)?;
        let desc = bytes.get(name_end..name_end + descsz)?;
        if n_type == elf::NT_GNU_BUILD_ID.0 && name == b"GNU\0" {
            return Some(desc);
        }
        bytes = bytes.get(desc_end..)?;
    }
    None
}

/// The properties of the `NT_GNU_PROPERTY_TYPE_0` notes in `bytes`: in ELF64 both the note's
/// descriptor and each property's data are padded to 8 bytes. A malformed note ends the list
/// where it stops making sense (the properties only ever add restrictions Rivet keeps).
fn gnu_properties(mut bytes: &[u8]) -> Vec<(u32, &[u8])> {
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let align8 = |n: usize| n.checked_add(7).map(|v| v & !7);
    let mut out = Vec::new();
    while let (Some(namesz), Some(descsz), Some(n_type)) =
        (word(bytes, 0), word(bytes, 4), word(bytes, 8))
    {
        let (namesz, descsz) = (namesz as usize, descsz as usize);
        let Some(name_end) = align8(12 + namesz).map(|n| n.max(16)) else {
            break;
        };
        let name = bytes.get(12..12 + namesz);
        let Some(desc) = name_end
            .checked_add(descsz)
            .and_then(|end| bytes.get(name_end..end))
        else {
            break;
        };
        if n_type == elf::NT_GNU_PROPERTY_TYPE_0.0 && name == Some(b"GNU\0") {
            let mut props = desc;
            while let (Some(pr_type), Some(size)) = (word(props, 0), word(props, 4)) {
                let Some(data) = props.get(8..8 + size as usize) else {
                    break;
                };
                out.push((pr_type, data));
                match align8(8 + size as usize).and_then(|n| props.get(n..)) {
                    Some(rest) => props = rest,
                    None => break,
                }
            }
        }
        match align8(name_end + descsz).and_then(|n| bytes.get(n..)) {
            Some(rest) => bytes = rest,
            None => break,
        }
    }
    out
}
