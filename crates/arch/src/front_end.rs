//! The instruction-fetch side of a typical core of each ISA, as `rivet simulate` models it:
//! the L1 instruction cache's geometry and the first-level instruction TLB, plus the qemu-user
//! command that runs a program of the ISA on this host. These are facts about cores and
//! emulators rather than about encodings, but they are chosen by the ISA, so they live with
//! the other per-ISA facts.
//!
//! AArch64's default is the Neoverse N1 (its Technical Reference Manual: 64 KiB 4-way L1
//! instruction cache with 64-byte lines; a 48-entry fully associative L1 instruction TLB; the
//! N2 has the same L1 cache); 4 KiB pages, Debian's arm64 kernel page size. x86-64's default
//! is the I1 geometry the rest of Rivet's benchmarks give cachegrind (32 KiB 8-way, 64-byte
//! lines, as on Intel cores since Sandy Bridge) and a 128-entry instruction TLB of 4 KiB
//! pages (Skylake's, which is 8-way there: modelled fully associative, like AArch64's).

use crate::isa::Isa;

/// A set-associative cache: total bytes, ways per set, bytes per line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheGeometry {
    pub size: u64,
    pub ways: u64,
    pub line: u64,
}

/// A fully associative TLB: how many pages it holds and how big a page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlbGeometry {
    pub entries: u64,
    pub page: u64,
}

/// The fetch front end `rivet simulate` models by default for an ISA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchModel {
    /// The core it describes, for reports.
    pub core: &'static str,
    pub icache: CacheGeometry,
    pub itlb: TlbGeometry,
}

impl Isa {
    /// The front end a simulated run of this ISA's code is measured on unless told otherwise.
    pub fn default_fetch_model(self) -> FetchModel {
        match self {
            Isa::X86_64 => FetchModel {
                core: "cachegrind's I1 (32 KiB 8-way) and a Skylake-sized iTLB",
                icache: CacheGeometry {
                    size: 32 * 1024,
                    ways: 8,
                    line: 64,
                },
                itlb: TlbGeometry {
                    entries: 128,
                    page: 4096,
                },
            },
            Isa::Aarch64 => FetchModel {
                core: "Neoverse N1",
                icache: CacheGeometry {
                    size: 64 * 1024,
                    ways: 4,
                    line: 64,
                },
                itlb: TlbGeometry {
                    entries: 48,
                    page: 4096,
                },
            },
        }
    }

    /// The qemu-user command (program and its options) that runs a Linux program of this ISA
    /// on this x86-64 host: Debian's `qemu-user` package, with the cross C library of Debian's
    /// `libc6-<arch>-cross` as the guest's root for its dynamic loader and libraries.
    pub fn qemu_user_command(self) -> &'static [&'static str] {
        match self {
            Isa::X86_64 => &["qemu-x86_64"],
            Isa::Aarch64 => &["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_geometries_have_whole_sets() {
        for isa in [Isa::X86_64, Isa::Aarch64] {
            let m = isa.default_fetch_model();
            let lines = m.icache.size / m.icache.line;
            assert!(lines.is_multiple_of(m.icache.ways), "{}", isa.name());
            assert!((lines / m.icache.ways).is_power_of_two(), "{}", isa.name());
            assert!(m.itlb.page.is_power_of_two() && m.itlb.entries > 0);
        }
    }
}
