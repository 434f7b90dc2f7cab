//! Spreading the hottest cache lines of the hot text over the instruction cache's sets.
//!
//! The cache is the target's (`Isa::default_fetch_model`, the geometry `rivet simulate`
//! measures with): on x86-64 an L1 instruction cache of 32 KiB with 8 ways and 64-byte lines
//! (this machine's, and that of most x86-64 cores of the last decade), which picks a line's
//! set from address bits 6-11; on AArch64 the Neoverse N1's 64 KiB, 4 ways, 256 sets. Hot
//! text larger than the cache puts many lines in each set, and when more lines that run
//! together land in one set than it has ways, they evict each other on every pass: an LRU set
//! cycled through by nine lines misses every time. Which set a line lands in is an accident of
//! the sizes of everything placed before it, so a layout can pile its hottest lines into a few
//! sets while others hold few. Cachegrind on SQLite showed exactly that: most of the simulated
//! misses were in the handful of sets holding nine or ten lines run 100,000 times or more.
//!
//! The balancer counts, set by set, the very hot lines placed so far (the
//! `very_hot_per_set(ways) * sets` hottest lines of the hot text, by profile count), and starts each
//! hot fragment that holds very hot lines after the padding (16-byte steps, up to a limit)
//! that adds them to the least occupied sets; a fragment aligned to more than 16 bytes moves in
//! steps of its alignment. Padding between fragments is never executed: it
//! costs address space, not cache lines. Fragments without very hot lines are placed as they
//! come. The profile cannot see the lines of shared libraries, which is why a set is not
//! filled to its ways.
//!
//! Lines below the very hot threshold do not count. Counting the next ones too (up to the
//! 1,024 hottest, at a third of a very hot line's weight) was tried: it helped one Lua input
//! at one placement, and over 16 placements SQLite missed 34% to 53% more (18% when the
//! warm lines only broke ties, over 8; docs/icache-offsets.md, "Warm lines in the balancer").

use rivet_arch::CacheGeometry;

/// Very hot lines per set, on average, for a cache of `ways` ways: three quarters of them,
/// leaving the rest for the lines the profile does not see (shared libraries, the PLT, code
/// left in place). For x86-64's 8 ways that is the 6 tuned on Lua and SQLite
/// (docs/icache-offsets.md), 384 lines; for the N1's 4 ways it is 3, the same quarter of
/// each set left free and the same share of the cache (768 of its 1,024 lines) counted very
/// hot. Two (half the ways) would leave a set's lines that run together room to spare but
/// count only half the cache as very hot, and ignore every line past the 512th; four
/// would fill the ways and leave nothing for the code the profile cannot see.
pub fn very_hot_per_set(ways: u64) -> usize {
    (ways as usize * 3 / 4).max(1)
}
/// The smallest padding step: offsets inside a fragment assume its start is a multiple of 16
/// (aligned blocks).
const MIN_STEP: u64 = 16;

/// One block of a fragment: its byte range in the fragment and its profile count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockExtent {
    pub start: u64,
    pub end: u64,
    pub count: u64,
}

/// The lines of `line` bytes a fragment placed at address `start` touches (as line numbers,
/// address / line), in address order, each with the largest count of a block on it.
fn line_heat(blocks: &[BlockExtent], start: u64, line: u64) -> Vec<(u64, u64)> {
    let mut lines: Vec<(u64, u64)> = Vec::new();
    for b in blocks.iter().filter(|b| b.end > b.start) {
        for line in (start + b.start) / line..=(start + b.end - 1) / line {
            match lines.last_mut() {
                Some((l, heat)) if *l == line => *heat = (*heat).max(b.count),
                _ => lines.push((line, b.count)),
            }
        }
    }
    lines
}

/// Chooses where hot fragments start, in their order, so that their very hot lines spread
/// over the cache's sets.
#[derive(Debug)]
pub struct SetBalancer {
    /// Lines with at least this count are very hot.
    threshold: u64,
    max_padding: u64,
    /// Bytes per line.
    line: u64,
    /// Very hot lines placed so far, per set (as many as the cache has sets).
    occupancy: Vec<u32>,
}

impl SetBalancer {
    /// A balancer for these hot fragments (each a list of its blocks) in a cache of
    /// `geometry`, with up to `max_padding` bytes before a fragment. `None` when there is
    /// nothing to balance: no counted block, less padding than one step, or a geometry without
    /// whole sets.
    pub fn new(
        fragments: &[Vec<BlockExtent>],
        max_padding: u64,
        geometry: CacheGeometry,
    ) -> Option<SetBalancer> {
        let line = geometry.line;
        let sets = geometry
            .size
            .checked_div(line.saturating_mul(geometry.ways))
            .unwrap_or(0);
        if max_padding < MIN_STEP || line == 0 || sets == 0 {
            return None;
        }
        let mut heats: Vec<u64> = fragments
            .iter()
            .flat_map(|blocks| line_heat(blocks, 0, line))
            .map(|(_, heat)| heat)
            .filter(|&heat| heat > 0)
            .collect();
        if heats.is_empty() {
            return None;
        }
        let rank = (very_hot_per_set(geometry.ways) * sets as usize).min(heats.len() - 1);
        let (_, &mut threshold, _) = heats.select_nth_unstable_by(rank, |a, b| b.cmp(a));
        Some(SetBalancer {
            threshold: threshold.max(1),
            max_padding,
            line,
            occupancy: vec![0; sets as usize],
        })
    }

    /// Where the fragment made of `blocks` starts when the next free address is `cursor`, a
    /// multiple of `step` (the fragment's alignment, at least 16, which padding keeps);
    /// records its very hot lines.
    pub fn place(&mut self, blocks: &[BlockExtent], cursor: u64, step: u64) -> u64 {
        let sets = self.occupancy.len() as u64;
        let very_hot_sets = |start: u64| -> Vec<usize> {
            line_heat(blocks, start, self.line)
                .into_iter()
                .filter(|&(_, heat)| heat >= self.threshold)
                .map(|(line, _)| (line % sets) as usize)
                .collect()
        };
        // Padding moves lines, it does not change which blocks are very hot.
        if very_hot_sets(cursor).is_empty() {
            return cursor;
        }
        let mut best: Option<(u64, u64, Vec<usize>)> = None;
        for padding in (0..=self.max_padding).step_by(step.max(MIN_STEP) as usize) {
            let sets = very_hot_sets(cursor + padding);
            // Each line costs the occupancy it meets, counting the fragment's own lines
            // before it: the increase of the sum of squared occupancies, which a balanced
            // cache keeps lowest.
            let mut occupancy = self.occupancy.clone();
            let cost: u64 = sets
                .iter()
                .map(|&s| {
                    occupancy[s] += 1;
                    u64::from(occupancy[s] - 1)
                })
                .sum();
            if best.as_ref().is_none_or(|&(c, _, _)| cost < c) {
                best = Some((cost, padding, sets));
            }
        }
        let (_, padding, sets) = best.expect("padding 0 is always tried");
        for s in sets {
            self.occupancy[s] += 1;
        }
        cursor + padding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The x86-64 geometry the tests below were written for: 64 sets of 8 ways.
    const X86: CacheGeometry = CacheGeometry {
        size: 32 * 1024,
        ways: 8,
        line: 64,
    };

    fn block(start: u64, end: u64, count: u64) -> BlockExtent {
        BlockExtent { start, end, count }
    }

    #[test]
    fn a_line_takes_the_largest_count_of_its_blocks() {
        let blocks = [block(0, 40, 5), block(40, 100, 9), block(100, 130, 2)];
        assert_eq!(line_heat(&blocks, 0, 64), vec![(0, 9), (1, 9), (2, 2)]);
        // Placed 32 bytes further, the last block shares its line with the end of the second.
        assert_eq!(line_heat(&blocks, 32, 64), vec![(0, 5), (1, 9), (2, 9)]);
        assert_eq!(line_heat(&[block(8, 8, 7)], 0, 64), vec![]);
    }

    /// Fragments of one very hot line each: every one lands in a set no other one holds
    /// until all 64 sets have one, whatever their sizes would have made of the addresses.
    #[test]
    fn very_hot_lines_go_to_the_emptiest_sets() {
        // 64 fragments of 16 hot bytes followed by 112 cold ones: placed back to back, every
        // hot line would fall in an even set.
        // Lukewarm code elsewhere keeps the cold halves below the very hot threshold.
        let fragment = vec![block(0, 16, 1000), block(16, 128, 1)];
        let mut fragments = vec![fragment.clone(); 64];
        fragments.extend(vec![vec![block(0, 64, 10)]; 400]);
        let mut balancer = SetBalancer::new(&fragments, 1024, X86).expect("counted blocks");
        let mut cursor = 0x10000;
        let mut sets = Vec::new();
        for blocks in &fragments[..64] {
            let start = balancer.place(blocks, cursor, 16);
            assert!(start >= cursor && start - cursor <= 1024 && start.is_multiple_of(16));
            sets.push((start / 64) % 64);
            cursor = start + 128;
        }
        sets.sort_unstable();
        sets.dedup();
        assert_eq!(sets.len(), 64, "one very hot line per set");
    }

    /// The N1's geometry (64 KiB, 4 ways): 256 sets to spread over, 3 very hot lines per set
    /// counted (x86-64's 8 ways keep their 6).
    #[test]
    fn the_target_geometry_decides_the_sets() {
        assert_eq!((very_hot_per_set(8), very_hot_per_set(4)), (6, 3));
        let n1 = CacheGeometry {
            size: 64 * 1024,
            ways: 4,
            line: 64,
        };
        let fragment = vec![block(0, 16, 1000), block(16, 128, 1)];
        let mut fragments = vec![fragment.clone(); 256];
        fragments.extend(vec![vec![block(0, 64, 10)]; 1000]);
        let mut balancer = SetBalancer::new(&fragments, 4096, n1).expect("counted blocks");
        let mut cursor = 0x10000;
        let mut sets = Vec::new();
        for blocks in &fragments[..256] {
            let start = balancer.place(blocks, cursor, 16);
            sets.push((start / 64) % 256);
            cursor = start + 128;
        }
        sets.sort_unstable();
        sets.dedup();
        assert_eq!(sets.len(), 256, "one very hot line in each of the 256 sets");
        // With x86-64's 64 sets the same fragments fill each set four times over.
        let mut balancer = SetBalancer::new(&fragments, 4096, X86).expect("counted blocks");
        let mut cursor = 0x10000;
        let mut sets = Vec::new();
        for blocks in &fragments[..256] {
            let start = balancer.place(blocks, cursor, 16);
            sets.push((start / 64) % 256);
            cursor = start + 128;
        }
        sets.sort_unstable();
        sets.dedup();
        assert!(sets.len() < 256, "{} sets of 256", sets.len());
        assert!(
            SetBalancer::new(
                &fragments,
                4096,
                CacheGeometry {
                    size: 0,
                    ways: 4,
                    line: 64
                }
            )
            .is_none()
        );
    }

    /// Lines below the threshold do not move a fragment, and no profile means no balancing.
    #[test]
    fn cold_fragments_and_unprofiled_code_are_not_padded() {
        // 400 very hot lines (over 6 per set) make the threshold 1000; the lukewarm fragment
        // stays where it comes.
        let mut fragments = vec![vec![block(0, 64, 1000)]; 400];
        fragments.push(vec![block(0, 64, 10)]);
        let mut balancer = SetBalancer::new(&fragments, 256, X86).expect("counted blocks");
        assert_eq!(balancer.place(&[block(0, 64, 10)], 0x1230, 16), 0x1230);
        assert!(SetBalancer::new(&[vec![block(0, 64, 0)]], 256, X86).is_none());
        assert!(SetBalancer::new(&fragments, 8, X86).is_none());
    }
}
