//! Address kinds as distinct types.
//!
//! A binary rewriter juggles several address spaces at once: virtual addresses as the ELF file
//! states them, offsets into the file, and (later) runtime addresses of a loaded PIE. Mixing
//! them up is the classic bug of the field, so each gets its own type and conversions are
//! explicit. `Vaddr` is the only one with arithmetic, because CFG and jump-table analysis do
//! nothing but add offsets to it.

use std::fmt;
use std::ops::{Add, Sub};

/// A virtual address as written in the ELF file (what samply calls an SVMA).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Vaddr(pub u64);

/// A byte offset into the input file.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FileOffset(pub u64);

impl Vaddr {
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Adds a signed displacement, wrapping like the CPU does.
    pub const fn offset(self, delta: i64) -> Vaddr {
        Vaddr(self.0.wrapping_add(delta as u64))
    }

    /// Distance from `base` to `self`, if `self` is not below `base`.
    pub fn checked_since(self, base: Vaddr) -> Option<u64> {
        self.0.checked_sub(base.0)
    }
}

impl Add<u64> for Vaddr {
    type Output = Vaddr;
    fn add(self, rhs: u64) -> Vaddr {
        Vaddr(self.0.wrapping_add(rhs))
    }
}

impl Sub<Vaddr> for Vaddr {
    type Output = u64;
    /// Panics in debug builds when `rhs > self`; use `checked_since` when that can happen.
    fn sub(self, rhs: Vaddr) -> u64 {
        self.0 - rhs.0
    }
}

impl fmt::Debug for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::LowerHex for Vaddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::Debug for FileOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "file+{:#x}", self.0)
    }
}

impl fmt::Display for FileOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A half-open range of virtual addresses.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct VaddrRange {
    pub start: Vaddr,
    pub end: Vaddr,
}

impl VaddrRange {
    pub fn new(start: Vaddr, len: u64) -> Self {
        VaddrRange {
            start,
            end: start + len,
        }
    }
    pub fn len(&self) -> u64 {
        self.end.0.saturating_sub(self.start.0)
    }
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
    pub fn contains(&self, addr: Vaddr) -> bool {
        self.start <= addr && addr < self.end
    }
}
