//! Replays executed blocks through the front-end model: instruction and taken-branch counts,
//! the set-associative L1 instruction cache and the iTLB at each placement, and the fully
//! associative cache of the same capacity.
//!
//! **What one execution of a block does.** A block is a contiguous run of instructions, so
//! it fetches the lines from its first byte's to its last byte's, in order, and the same for
//! pages; the replay accesses each of them once. A line fetched again by the next
//! instruction is already the most recently used of its set, so LRU would not change on that
//! access: leaving it out changes no count. The one case where counting per line and
//! counting per instruction differ is an instruction that spans two lines (x86-64 only;
//! AArch64 instructions are aligned words): cachegrind counts it as one miss when either
//! line misses. Only a block's first instruction can make both of its lines miss (any later
//! one starts in a line the block already fetched, and no instruction is as long as a line),
//! so the replay subtracts one miss when that instruction spans its two lines and both
//! missed, and its counts are cachegrind's.
//!
//! **Taken branches.** A block that does not start where the previously executed block
//! ended was reached by a taken branch (a jump, call or return, or the kernel's entry into a
//! signal handler); qemu also ends blocks at page ends, after 512 instructions and after a
//! system call, and those continue in sequence. A branch to the very next instruction is
//! counted as not taken. On x86-64 qemu runs each iteration of a `rep` string instruction as
//! a block of its own, which counts one taken branch per iteration.
//!
//! **Placements.** A placement shifts the code of the program under test (the address
//! ranges given, after the program's load bias) by a number of bytes, a multiple of the line
//! size, and leaves every other module (the dynamic loader, the C library) where it was:
//! shifting all code by the same amount would renumber every set alike and change nothing.
//! The same shift moves the code across page boundaries for the iTLB. The fully associative
//! cache and the instruction and branch counts do not depend on the placement.

use std::collections::HashSet;
use std::num::NonZeroUsize;

use super::cache::{FullyAssociative, SetAssociative};
use super::qemu_log::Block;

/// The model's geometry, in powers of two where they must be.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub line_bits: u32,
    pub sets: u64,
    pub ways: u64,
    pub page_bits: u32,
    pub tlb_entries: u64,
}

/// One placement's caches and counts.
#[derive(Debug)]
struct Placement {
    shift: u64,
    icache: SetAssociative,
    itlb: SetAssociative,
    icache_misses: u64,
    itlb_misses: u64,
}

/// The counts of one placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlacementCounts {
    pub shift: u64,
    pub icache_misses: u64,
    pub itlb_misses: u64,
}

/// Everything a replay counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Counts {
    pub instructions: u64,
    pub blocks: u64,
    pub taken_branches: u64,
    pub fully_associative_misses: u64,
    /// Distinct lines and pages of code that ran (at the first placement).
    pub lines_touched: u64,
    pub pages_touched: u64,
    pub placements: Vec<PlacementCounts>,
}

/// The replay's state.
#[derive(Debug)]
pub(crate) struct Replay {
    geometry: Geometry,
    /// Run-time address ranges `[start, end)` that placements shift.
    shifted: Vec<(u64, u64)>,
    placements: Vec<Placement>,
    full: FullyAssociative,
    full_misses: u64,
    instructions: u64,
    blocks: u64,
    taken_branches: u64,
    previous_end: Option<u64>,
    lines_touched: HashSet<u64>,
    pages_touched: HashSet<u64>,
}

impl Replay {
    /// A replay with one placement per shift (bytes, multiples of the line size).
    pub(crate) fn new(geometry: Geometry, shifts: &[u64], shifted: Vec<(u64, u64)>) -> Replay {
        let lines = geometry.sets * geometry.ways;
        Replay {
            geometry,
            shifted,
            placements: shifts
                .iter()
                .map(|&shift| Placement {
                    shift,
                    icache: SetAssociative::new(geometry.sets, geometry.ways),
                    itlb: SetAssociative::new(1, geometry.tlb_entries),
                    icache_misses: 0,
                    itlb_misses: 0,
                })
                .collect(),
            full: FullyAssociative::new(
                NonZeroUsize::new(lines as usize).expect("a cache holds at least one line"),
            ),
            full_misses: 0,
            instructions: 0,
            blocks: 0,
            taken_branches: 0,
            previous_end: None,
            lines_touched: HashSet::new(),
            pages_touched: HashSet::new(),
        }
    }

    /// Accounts one execution of `block`; `first_time` when it has not run before since it
    /// was translated (its lines and pages join the footprint).
    pub(crate) fn execute(&mut self, block: &Block, first_time: bool) {
        let g = self.geometry;
        self.instructions += u64::from(block.instructions);
        self.blocks += 1;
        if self.previous_end.is_some_and(|end| end != block.start) {
            self.taken_branches += 1;
        }
        self.previous_end = Some(block.end);
        // The reader hands over only blocks with start < end.
        let last = block.end - 1;
        let first_last = block.first_end.clamp(block.start + 1, block.end) - 1;
        let straddles = (block.start >> g.line_bits) != (first_last >> g.line_bits);
        let first_line = block.start >> g.line_bits;
        let last_line = last >> g.line_bits;
        if first_time {
            self.lines_touched.extend(first_line..=last_line);
            self.pages_touched
                .extend((block.start >> g.page_bits)..=(last >> g.page_bits));
        }
        self.full_misses += fetch(first_line, last_line, straddles, |l| self.full.access(l));
        let moves = self
            .shifted
            .iter()
            .any(|&(start, end)| (start..end).contains(&block.start));
        for p in &mut self.placements {
            let shift = if moves { p.shift } else { 0 };
            let (start, last) = (block.start.wrapping_add(shift), last.wrapping_add(shift));
            // A block shifted past the top of the address space: no such placement exists.
            if last < start {
                continue;
            }
            p.icache_misses += fetch(start >> g.line_bits, last >> g.line_bits, straddles, |l| {
                p.icache.access(l)
            });
            for page in (start >> g.page_bits)..=(last >> g.page_bits) {
                if !p.itlb.access(page) {
                    p.itlb_misses += 1;
                }
            }
        }
    }

    pub(crate) fn counts(&self) -> Counts {
        Counts {
            instructions: self.instructions,
            blocks: self.blocks,
            taken_branches: self.taken_branches,
            fully_associative_misses: self.full_misses,
            lines_touched: self.lines_touched.len() as u64,
            pages_touched: self.pages_touched.len() as u64,
            placements: self
                .placements
                .iter()
                .map(|p| PlacementCounts {
                    shift: p.shift,
                    icache_misses: p.icache_misses,
                    itlb_misses: p.itlb_misses,
                })
                .collect(),
        }
    }
}

/// Fetches lines `first..=last` through `access` (true on a hit); the misses, with an
/// instruction that spans the first two lines counted once when both miss.
fn fetch(first: u64, last: u64, straddles: bool, mut access: impl FnMut(u64) -> bool) -> u64 {
    let mut misses = 0;
    let mut first_missed = false;
    for line in first..=last {
        if !access(line) {
            misses += 1;
            if line == first {
                first_missed = true;
            } else if line == first + 1 && straddles && first_missed {
                misses -= 1;
            }
        }
    }
    misses
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 sets of 2 ways of 64-byte lines (a 512-byte cache), a 2-entry TLB of 256-byte pages.
    const SMALL: Geometry = Geometry {
        line_bits: 6,
        sets: 4,
        ways: 2,
        page_bits: 8,
        tlb_entries: 2,
    };

    fn block(start: u64, len: u64) -> Block {
        Block {
            start,
            end: start + len,
            instructions: (len / 4) as u32,
            first_end: start + 4,
        }
    }

    #[test]
    fn counts_instructions_taken_branches_and_cold_misses() {
        let mut r = Replay::new(SMALL, &[0], vec![]);
        // A loop of two blocks: 0..0x40 falls through to 0x40..0x80, which jumps back.
        let a = block(0, 0x40);
        let b = block(0x40, 0x40);
        for i in 0..10 {
            r.execute(&a, i == 0);
            r.execute(&b, i == 0);
        }
        let c = r.counts();
        assert_eq!(c.instructions, 10 * 32);
        assert_eq!(c.blocks, 20);
        // Every jump back from b to a; a to b falls through.
        assert_eq!(c.taken_branches, 9);
        // Two lines, one page: cold misses only.
        assert_eq!(c.fully_associative_misses, 2);
        assert_eq!(c.placements[0].icache_misses, 2);
        assert_eq!(c.placements[0].itlb_misses, 1);
        assert_eq!((c.lines_touched, c.pages_touched), (2, 1));
    }

    #[test]
    fn a_placement_that_moves_code_into_a_crowded_set_makes_it_thrash() {
        // The program's code is one line at 0x1000 (set 0); a library's two lines sit at
        // 0x2040 and 0x2140 (both set 1). Unshifted, set 1 holds both library lines and
        // set 0 the program's: cold misses only. Shifted by one line, the program's line
        // joins set 1 too: three lines cycle through two ways and every access misses.
        let program = block(0x1000, 0x40);
        let lib1 = block(0x2040, 0x40);
        let lib2 = block(0x2140, 0x40);
        let mut r = Replay::new(SMALL, &[0, 64], vec![(0x1000, 0x1040)]);
        for i in 0..100 {
            r.execute(&program, i == 0);
            r.execute(&lib1, i == 0);
            r.execute(&lib2, i == 0);
        }
        let c = r.counts();
        assert_eq!(c.placements[0].icache_misses, 3);
        assert_eq!(c.placements[1].icache_misses, 300);
        // Fully associative: 3 lines fit in 8.
        assert_eq!(c.fully_associative_misses, 3);
        // The TLB: pages 0x10, 0x20, 0x21 cycle through 2 entries: every page change misses.
        assert_eq!(c.placements[0].itlb_misses, 300);
    }

    #[test]
    fn the_itlb_sees_every_page_a_block_spans() {
        // 256-byte pages: a block from 0x1f0 to 0x210 fetches from pages 1 and 2.
        let mut r = Replay::new(SMALL, &[0, 0x20], vec![(0, 0x1000)]);
        let across = block(0x1f0, 0x20);
        r.execute(&across, true);
        r.execute(&across, false);
        let c = r.counts();
        assert_eq!(c.placements[0].itlb_misses, 2);
        // Shifted by 0x20 it lies in page 2 alone.
        assert_eq!(c.placements[1].itlb_misses, 1);
        assert_eq!(c.pages_touched, 2);
        // Two entries: a third page evicts the least recently used (page 1), which then
        // misses again, while page 2 (used after page 1) still hits.
        let far = block(0x300, 4);
        r.execute(&far, true);
        r.execute(&block(0x200, 4), true);
        r.execute(&block(0x100, 4), true);
        assert_eq!(r.counts().placements[0].itlb_misses, 4);
    }

    #[test]
    fn an_instruction_across_two_lines_misses_once() {
        // Cachegrind counts an instruction's access once, however many lines it spans.
        let spanning = Block {
            start: 0x3e,
            end: 0x48,
            instructions: 2,
            first_end: 0x44,
        };
        let mut r = Replay::new(SMALL, &[0], vec![]);
        r.execute(&spanning, true);
        assert_eq!(r.counts().placements[0].icache_misses, 1);
        assert_eq!(r.counts().fully_associative_misses, 1);
        // A block whose first instruction ends at the line's end fetches two lines with two
        // instructions: two misses.
        let aligned = Block {
            start: 0x13c,
            end: 0x148,
            instructions: 2,
            first_end: 0x140,
        };
        r.execute(&aligned, true);
        assert_eq!(r.counts().placements[0].icache_misses, 3);
    }
}
