//! Symbol tables: `.symtab` (static, may be stripped) and `.dynsym`.
//!
//! Symbols are decoded into plain structs. Local symbols also remember the `STT_FILE` symbol
//! that precedes them, because two files may each have a local `helper` and the only thing
//! telling them apart is that file name (profiles name such functions `helper/file.c/1`).

use std::borrow::Cow;

use object::LittleEndian as LE;
use object::elf;
use object::read::elf::Sym;

use crate::addr::Vaddr;
use crate::error::{ElfError, Result};
use crate::file::ElfFile;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    NoType,
    Object,
    Func,
    Section,
    File,
    Common,
    Tls,
    /// STT_GNU_IFUNC: the symbol's value is a resolver function.
    Ifunc,
    Other(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolBind {
    Local,
    Global,
    Weak,
    Unique,
    Other(u8),
}

#[derive(Clone, Debug)]
pub struct Symbol<'data> {
    /// Index in its table (what relocations refer to).
    pub index: u32,
    pub name: Cow<'data, str>,
    pub value: Vaddr,
    pub size: u64,
    pub kind: SymbolKind,
    pub bind: SymbolBind,
    /// Section index the symbol is defined in; `None` for undefined, absolute and common.
    pub section: Option<usize>,
    pub is_undefined: bool,
    pub is_absolute: bool,
    /// STV_* visibility.
    pub visibility: u8,
    /// For local symbols: the name of the preceding `STT_FILE` symbol, if any.
    pub file: Option<Cow<'data, str>>,
}

impl Symbol<'_> {
    pub fn is_function(&self) -> bool {
        matches!(self.kind, SymbolKind::Func | SymbolKind::Ifunc)
    }
    pub fn is_local(&self) -> bool {
        self.bind == SymbolBind::Local
    }
}

fn kind_of(t: u8) -> SymbolKind {
    match t {
        0 => SymbolKind::NoType,
        1 => SymbolKind::Object,
        2 => SymbolKind::Func,
        3 => SymbolKind::Section,
        4 => SymbolKind::File,
        5 => SymbolKind::Common,
        6 => SymbolKind::Tls,
        10 => SymbolKind::Ifunc,
        o => SymbolKind::Other(o),
    }
}

fn bind_of(b: u8) -> SymbolBind {
    match b {
        0 => SymbolBind::Local,
        1 => SymbolBind::Global,
        2 => SymbolBind::Weak,
        10 => SymbolBind::Unique,
        o => SymbolBind::Other(o),
    }
}

impl<'data> ElfFile<'data> {
    /// Symbols of `.symtab` (empty when the binary is stripped).
    pub fn symbols(&self) -> Result<Vec<Symbol<'data>>> {
        self.read_symbol_table(elf::SHT_SYMTAB.0)
    }

    /// Whether the binary has a `.symtab` (`strip` removes it, leaving only `.dynsym`).
    pub fn has_static_symbols(&self) -> bool {
        self.sections()
            .iter()
            .any(|s| s.sh_type == elf::SHT_SYMTAB.0)
    }

    /// Symbols of `.dynsym` (empty for a static executable).
    pub fn dynamic_symbols(&self) -> Result<Vec<Symbol<'data>>> {
        self.read_symbol_table(elf::SHT_DYNSYM.0)
    }

    fn read_symbol_table(&self, sh_type: u32) -> Result<Vec<Symbol<'data>>> {
        let Some(table) = self.sections().iter().find(|s| s.sh_type == sh_type) else {
            return Ok(Vec::new());
        };
        let what = if sh_type == elf::SHT_SYMTAB.0 {
            ".symtab"
        } else {
            ".dynsym"
        };
        let strings = self
            .section(table.link as usize)
            .ok_or_else(|| ElfError::malformed(what, "string table index out of range"))?
            .data;
        let raw: &[elf::Sym64<LE>] = object::pod::slice_from_all_bytes(
            &table.data[..table.data.len() - table.data.len() % 24],
        )
        .map_err(|_| ElfError::malformed(what, "misaligned symbol table"))?;
        let mut out = Vec::with_capacity(raw.len());
        let mut current_file: Option<Cow<'data, str>> = None;
        for (index, sym) in raw.iter().enumerate() {
            let name_off = sym.st_name(LE) as usize;
            let name = strings
                .get(name_off..)
                .and_then(|s| s.iter().position(|&b| b == 0).map(|end| &s[..end]))
                .map(String::from_utf8_lossy)
                .ok_or_else(|| {
                    ElfError::malformed(what, format!("symbol {index} has a bad name offset"))
                })?;
            let kind = kind_of(sym.st_type().0);
            let bind = bind_of(sym.st_bind().0);
            if kind == SymbolKind::File {
                current_file = Some(name.clone());
            }
            let shndx = sym.st_shndx(LE).0;
            let is_undefined = shndx == elf::SHN_UNDEF.0;
            let is_absolute = shndx == elf::SHN_ABS.0;
            let section = if is_undefined || shndx >= elf::SHN_LORESERVE {
                None
            } else {
                Some(shndx as usize)
            };
            out.push(Symbol {
                index: index as u32,
                file: if bind == SymbolBind::Local {
                    current_file.clone()
                } else {
                    None
                },
                name,
                value: Vaddr(sym.st_value(LE)),
                size: sym.st_size(LE),
                kind,
                bind,
                section,
                is_undefined,
                is_absolute,
                visibility: sym.st_visibility().0,
            });
        }
        Ok(out)
    }
}
