//! The `.dynamic` table, read through PT_DYNAMIC as the loader does.

use object::elf;

use crate::addr::Vaddr;
use crate::error::{ElfError, Result};
use crate::file::ElfFile;

/// The dynamic-table entries Rivet uses. Addresses are link-time virtual addresses.
#[derive(Clone, Debug, Default)]
pub struct DynamicInfo {
    /// All (tag, value) pairs in table order, up to DT_NULL.
    pub entries: Vec<(i64, u64)>,
    pub init: Option<Vaddr>,
    pub fini: Option<Vaddr>,
    pub init_array: Option<(Vaddr, u64)>,
    pub fini_array: Option<(Vaddr, u64)>,
    pub preinit_array: Option<(Vaddr, u64)>,
    pub rela: Option<u64>,
    pub rela_size: Option<u64>,
    pub jmprel: Option<u64>,
    pub plt_rel_size: Option<u64>,
    pub plt_rel_kind: Option<u64>,
    pub relr: Option<u64>,
    pub relr_size: Option<u64>,
    pub pltgot: Option<Vaddr>,
    pub flags: Option<u64>,
    pub flags_1: Option<u64>,
    pub soname_offset: Option<u64>,
    pub needed_count: usize,
    /// DT_TEXTREL or DF_TEXTREL: the loader patches code, which Rivet cannot model.
    pub has_textrel: bool,
}

impl ElfFile<'_> {
    pub fn dynamic(&self) -> Result<DynamicInfo> {
        let seg = self
            .segments()
            .iter()
            .find(|s| s.p_type == elf::PT_DYNAMIC.0)
            .ok_or_else(|| ElfError::malformed("dynamic table", "no PT_DYNAMIC segment"))?;
        let start = seg.offset.0 as usize;
        let bytes = start
            .checked_add(seg.filesz as usize)
            .and_then(|end| self.data().get(start..end))
            .ok_or_else(|| ElfError::malformed("dynamic table", "PT_DYNAMIC outside the file"))?;
        let mut info = DynamicInfo::default();
        let (mut init_array, mut init_array_size) = (None, None);
        let (mut fini_array, mut fini_array_size) = (None, None);
        let (mut preinit_array, mut preinit_array_size) = (None, None);
        for pair in bytes.chunks_exact(16) {
            let tag = i64::from_le_bytes(pair[..8].try_into().unwrap());
            let val = u64::from_le_bytes(pair[8..].try_into().unwrap());
            if tag == elf::DT_NULL.0 {
                break;
            }
            info.entries.push((tag, val));
            match elf::DynamicTag(tag) {
                elf::DT_INIT => info.init = Some(Vaddr(val)),
                elf::DT_FINI => info.fini = Some(Vaddr(val)),
                elf::DT_INIT_ARRAY => init_array = Some(Vaddr(val)),
                elf::DT_INIT_ARRAYSZ => init_array_size = Some(val),
                elf::DT_FINI_ARRAY => fini_array = Some(Vaddr(val)),
                elf::DT_FINI_ARRAYSZ => fini_array_size = Some(val),
                elf::DT_PREINIT_ARRAY => preinit_array = Some(Vaddr(val)),
                elf::DT_PREINIT_ARRAYSZ => preinit_array_size = Some(val),
                elf::DT_RELA => info.rela = Some(val),
                elf::DT_RELASZ => info.rela_size = Some(val),
                elf::DT_JMPREL => info.jmprel = Some(val),
                elf::DT_PLTRELSZ => info.plt_rel_size = Some(val),
                elf::DT_PLTREL => info.plt_rel_kind = Some(val),
                elf::DT_RELR => info.relr = Some(val),
                elf::DT_RELRSZ => info.relr_size = Some(val),
                elf::DT_PLTGOT => info.pltgot = Some(Vaddr(val)),
                elf::DT_FLAGS => info.flags = Some(val),
                elf::DT_FLAGS_1 => info.flags_1 = Some(val),
                elf::DT_SONAME => info.soname_offset = Some(val),
                elf::DT_NEEDED => info.needed_count += 1,
                elf::DT_TEXTREL => info.has_textrel = true,
                _ => {}
            }
        }
        if info.flags.is_some_and(|f| f & elf::DF_TEXTREL.0 != 0) {
            info.has_textrel = true;
        }
        info.init_array = init_array.zip(init_array_size);
        info.fini_array = fini_array.zip(fini_array_size);
        info.preinit_array = preinit_array.zip(preinit_array_size);
        Ok(info)
    }
}
