//! The new `.symtab`: symbols of rewritten code at their new addresses, plus one local
//! `foo.cold` symbol per extra fragment, so debuggers, profilers and `nm` see the new layout.
//!
//! The input's string table is kept whole and new names are appended, so every original
//! `st_name` stays valid. Local symbols must precede global ones (`sh_info` is the index of
//! the first global); new locals go after the original locals, which renumbers globals. The
//! input's static relocation sections refer to symbols by index, so the rewriter marks them
//! stale rather than leaving them to describe the new file wrongly.
//!
//! Marker symbols (`__hot_start`/`__hot_end` around the hot text) are global: a symbol of that
//! name the input already defines (a program linked with a huge-page runtime) is moved to the
//! new address, otherwise one is appended.

use object::LittleEndian as LE;
use object::elf;
use object::endian::{U16, U32, U64};

use rivet_elf::{ElfFile, Vaddr};
use rivet_ir::Program;
use rivet_ir::layout::Layout;

use crate::code::AddressMap;

/// A fragment's final place, for naming and sizing symbols.
#[derive(Clone, Copy, Debug)]
pub struct PlacedFragment {
    pub function: rivet_ir::FuncId,
    pub fragment: u32,
    pub addr: Vaddr,
    pub size: u64,
}

/// The new symbol table.
#[derive(Clone, Debug)]
pub struct SymbolTable {
    pub symtab: Vec<u8>,
    pub strtab: Vec<u8>,
    /// Index of the first global symbol (`sh_info`).
    pub first_global: u32,
}

fn is_special(shndx: u16) -> bool {
    shndx == elf::SHN_UNDEF.0 || shndx >= elf::SHN_LORESERVE
}

/// Builds the new `.symtab` and `.strtab`, or `None` when the input has no `.symtab`.
/// `section_of` gives the section index for a new code address.
pub fn build(
    elf: &ElfFile<'_>,
    program: &Program,
    layout: &Layout,
    map: &AddressMap,
    fragments: &[PlacedFragment],
    section_of: &dyn Fn(Vaddr) -> Option<u16>,
    markers: &[(&str, Vaddr, u16)],
) -> Option<SymbolTable> {
    let symtab = elf
        .sections()
        .iter()
        .find(|s| s.sh_type == elf::SHT_SYMTAB.0)?;
    let strtab = elf.section(symtab.link as usize)?;
    let syms: &[elf::Sym64<LE>] = object::pod::slice_from_all_bytes(symtab.data).ok()?;
    let mut strings = strtab.data.to_vec();
    let first_global = (symtab.info as usize).min(syms.len());

    let fragment_of = |f: rivet_ir::FuncId, k: u32| {
        fragments
            .iter()
            .find(|p| p.function == f && p.fragment == k)
            .copied()
    };
    let set_section = |sym: &mut elf::Sym64<LE>, addr: Vaddr| {
        if let Some(idx) = section_of(addr) {
            sym.st_shndx = U16::new(LE, elf::SymbolSection(idx));
        }
    };
    let update = |sym: &elf::Sym64<LE>| -> elf::Sym64<LE> {
        let mut sym = *sym;
        let kind = sym.st_info.0 & 0xf;
        if kind == elf::STT_SECTION.0 || is_special(sym.st_shndx.get(LE).0) {
            return sym;
        }
        let value = Vaddr(sym.st_value.get(LE));
        let Some(f) = program
            .function_containing(value)
            .filter(|f| layout.is_rewritten(f.id))
        else {
            return sym;
        };
        if value == f.range.start {
            // In place, the entry does not move and the symbol's extent still holds the code.
            if !layout.in_place
                && let Some(p) = fragment_of(f.id, 0)
            {
                sym.st_value = U64::new(LE, p.addr.get());
                if kind == elf::STT_FUNC.0 {
                    sym.st_size = U64::new(LE, p.size);
                }
                set_section(&mut sym, p.addr);
            }
            return sym;
        }
        if let Some(new) = map.translate(program, value) {
            sym.st_value = U64::new(LE, new.get());
            set_section(&mut sym, new);
        }
        sym
    };

    let mut out: Vec<elf::Sym64<LE>> = Vec::with_capacity(syms.len() + fragments.len());
    out.extend(syms[..first_global].iter().map(update));
    for p in fragments.iter().filter(|p| p.fragment > 0) {
        let f = program.function(p.function);
        let name = if p.fragment == 1 {
            format!("{}.cold", f.name())
        } else {
            format!("{}.cold.{}", f.name(), p.fragment)
        };
        let st_name = strings.len() as u32;
        strings.extend_from_slice(name.as_bytes());
        strings.push(0);
        out.push(elf::Sym64::<LE> {
            st_name: U32::new(LE, st_name),
            st_info: elf::SymbolInfo((elf::STB_LOCAL.0 << 4) | elf::STT_FUNC.0),
            st_other: elf::SymbolOther(0),
            st_shndx: U16::new(
                LE,
                elf::SymbolSection(section_of(p.addr).unwrap_or(elf::SHN_ABS.0)),
            ),
            st_value: U64::new(LE, p.addr.get()),
            st_size: U64::new(LE, p.size),
        });
    }
    let new_first_global = out.len() as u32;
    out.extend(syms[first_global..].iter().map(update));
    let name_of = |sym: &elf::Sym64<LE>| {
        let start = sym.st_name.get(LE) as usize;
        strtab
            .data
            .get(start..)
            .and_then(|rest| rest.split(|&b| b == 0).next())
    };
    for &(name, addr, section) in markers {
        let existing = out[new_first_global as usize..]
            .iter_mut()
            .find(|sym| name_of(sym) == Some(name.as_bytes()));
        let sym = match existing {
            Some(sym) => sym,
            None => {
                let st_name = strings.len() as u32;
                strings.extend_from_slice(name.as_bytes());
                strings.push(0);
                out.push(elf::Sym64::<LE> {
                    st_name: U32::new(LE, st_name),
                    st_info: elf::SymbolInfo((elf::STB_GLOBAL.0 << 4) | elf::STT_NOTYPE.0),
                    st_other: elf::SymbolOther(0),
                    st_shndx: U16::new(LE, elf::SymbolSection(0)),
                    st_value: U64::new(LE, 0),
                    st_size: U64::new(LE, 0),
                });
                out.last_mut().expect("just pushed")
            }
        };
        sym.st_value = U64::new(LE, addr.get());
        sym.st_shndx = U16::new(LE, elf::SymbolSection(section));
    }
    Some(SymbolTable {
        symtab: out
            .iter()
            .flat_map(|s| object::bytes_of(s).iter().copied())
            .collect(),
        strtab: strings,
        first_global: new_first_global,
    })
}

/// Patches to `.dynsym` for exported symbols whose code moved: (address, bytes).
pub fn dynamic_symbol_patches(
    elf: &ElfFile<'_>,
    program: &Program,
    map: &AddressMap,
    section_of: &dyn Fn(Vaddr) -> Option<u16>,
) -> Vec<(Vaddr, Vec<u8>)> {
    let Some(dynsym) = elf
        .sections()
        .iter()
        .find(|s| s.sh_type == elf::SHT_DYNSYM.0)
    else {
        return Vec::new();
    };
    let Ok(syms) = object::pod::slice_from_all_bytes::<elf::Sym64<LE>>(dynsym.data) else {
        return Vec::new();
    };
    let size = std::mem::size_of::<elf::Sym64<LE>>() as u64;
    let mut out = Vec::new();
    for (i, sym) in syms.iter().enumerate() {
        if is_special(sym.st_shndx.get(LE).0) || sym.st_info.0 & 0xf == elf::STT_SECTION.0 {
            continue;
        }
        let value = Vaddr(sym.st_value.get(LE));
        let Some(new) = map.translate(program, value) else {
            continue;
        };
        if new == value {
            continue;
        }
        let at = dynsym.addr + i as u64 * size;
        // st_name (4), st_info (1), st_other (1), st_shndx (2), st_value (8).
        if let Some(idx) = section_of(new) {
            out.push((at + 6, idx.to_le_bytes().to_vec()));
        }
        out.push((at + 8, new.get().to_le_bytes().to_vec()));
    }
    out
}
