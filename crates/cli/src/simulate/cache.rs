//! The two cache models a simulated run is replayed through, both true LRU.
//!
//! [`SetAssociative`] is an L1 instruction cache (or, with one set, a small fully associative
//! TLB): a line's set is its line number modulo the number of sets, each set keeps its lines
//! from most to least recently used, and a miss evicts the least recently used one. That is
//! what cachegrind simulates (`cg_sim.c`), so the two can be compared count for count; real
//! cores often use a pseudo-LRU instead, which the docs list among the model's limits.
//!
//! [`FullyAssociative`] holds as many lines as the cache but lets any line go anywhere: no
//! line competes for a set, so its count is free of the placement luck that decides a
//! set-associative count (docs/icache-offsets.md) and tells two layouts' footprints apart.
//! It keeps recency in the `lru` crate's hash map and linked list (constant time per access;
//! a linear search over a thousand ways would dominate the replay).

use std::num::NonZeroUsize;

use lru::LruCache;

/// A tag no line has: line numbers are addresses shifted right by at least one bit.
const EMPTY: u64 = u64::MAX;

/// A set-associative LRU cache of line numbers.
#[derive(Debug)]
pub(crate) struct SetAssociative {
    /// `sets - 1`; the number of sets is a power of two.
    set_mask: u64,
    ways: usize,
    /// `ways` tags per set, most recently used first.
    tags: Vec<u64>,
}

impl SetAssociative {
    /// An empty cache of `sets` sets (a power of two) of `ways` lines each.
    pub(crate) fn new(sets: u64, ways: u64) -> SetAssociative {
        assert!(
            sets.is_power_of_two() && ways > 0,
            "bad geometry {sets}x{ways}"
        );
        SetAssociative {
            set_mask: sets - 1,
            ways: ways as usize,
            tags: vec![EMPTY; (sets * ways) as usize],
        }
    }

    /// Looks `line` up, making it the most recently used of its set; true on a hit. On a
    /// miss the set's least recently used line leaves.
    pub(crate) fn access(&mut self, line: u64) -> bool {
        let set = (line & self.set_mask) as usize;
        let tags = &mut self.tags[set * self.ways..(set + 1) * self.ways];
        // Most accesses repeat the line just used: check it before searching.
        if tags[0] == line {
            return true;
        }
        match tags.iter().position(|&t| t == line) {
            Some(way) => {
                tags[..=way].rotate_right(1);
                true
            }
            None => {
                tags.rotate_right(1);
                tags[0] = line;
                false
            }
        }
    }
}

/// A fully associative LRU cache of `capacity` line numbers.
#[derive(Debug)]
pub(crate) struct FullyAssociative {
    lines: LruCache<u64, ()>,
}

impl FullyAssociative {
    pub(crate) fn new(capacity: NonZeroUsize) -> FullyAssociative {
        FullyAssociative {
            lines: LruCache::new(capacity),
        }
    }

    /// Looks `line` up, making it the most recently used; true on a hit. On a miss the least
    /// recently used line leaves when the cache is full.
    pub(crate) fn access(&mut self, line: u64) -> bool {
        if self.lines.get(&line).is_some() {
            return true;
        }
        self.lines.put(line, ());
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hits of a sequence of accesses, as a string of `h` and `m`.
    fn pattern(access: &mut dyn FnMut(u64) -> bool, lines: &[u64]) -> String {
        lines
            .iter()
            .map(|&l| if access(l) { 'h' } else { 'm' })
            .collect()
    }

    #[test]
    fn a_set_keeps_its_most_recently_used_lines() {
        // 2 sets of 2 ways: even lines go to set 0, odd ones to set 1.
        let mut c = SetAssociative::new(2, 2);
        let mut f = |l| c.access(l);
        // 0 and 2 fill set 0; 4 evicts 0 (least recent); 2 still hits; 0 misses and evicts 4.
        assert_eq!(pattern(&mut f, &[0, 2, 0, 2, 4, 2, 0, 4]), "mmhhmhmm");
        // The odd set was untouched by all of that.
        assert_eq!(pattern(&mut f, &[1, 3, 1, 3]), "mmhh");
    }

    #[test]
    fn a_hit_refreshes_recency() {
        let mut c = SetAssociative::new(1, 3);
        let mut f = |l| c.access(l);
        // 10 11 12 fill; hitting 10 makes 11 the oldest, so 13 evicts 11, not 10.
        assert_eq!(pattern(&mut f, &[10, 11, 12, 10, 13, 10, 11]), "mmmhmhm");
    }

    #[test]
    fn a_loop_one_line_too_big_for_its_set_always_misses() {
        // LRU's known worst case: cycling over ways + 1 lines of one set.
        let mut c = SetAssociative::new(4, 2);
        let lines: Vec<u64> = (0..30).map(|i| (i % 3) * 4).collect();
        let p = pattern(&mut |l| c.access(l), &lines);
        assert_eq!(p, "m".repeat(30));
        // Spread over three sets, the same loop misses only its first three accesses.
        let mut c = SetAssociative::new(4, 2);
        let lines: Vec<u64> = (0..30).map(|i| i % 3).collect();
        let p = pattern(&mut |l| c.access(l), &lines);
        assert_eq!(p, format!("mmm{}", "h".repeat(27)));
    }

    #[test]
    fn fully_associative_is_blind_to_sets() {
        // Lines 0, 4, 8 share a set of a 4-set 2-way cache but fit a 3-line fully
        // associative one; a fourth line then evicts the least recently used.
        let mut c = FullyAssociative::new(NonZeroUsize::new(3).unwrap());
        let mut f = |l| c.access(l);
        assert_eq!(
            pattern(&mut f, &[0, 4, 8, 0, 4, 8, 12, 0, 8, 4]),
            "mmmhhhmmhm"
        );
    }

    #[test]
    fn fully_associative_matches_a_single_set() {
        // With one set, the set-associative model is fully associative: same answers on a
        // pseudo-random sequence.
        let mut one_set = SetAssociative::new(1, 8);
        let mut full = FullyAssociative::new(NonZeroUsize::new(8).unwrap());
        let mut x = 12345u64;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let line = (x >> 33) % 13;
            assert_eq!(one_set.access(line), full.access(line), "line {line}");
        }
    }
}
