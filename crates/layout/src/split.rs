//! Hot/cold splitting: which blocks of a function, in its chosen order, move to the cold
//! fragment.
//!
//! A block is cold when its count is at most [`SplitOptions::cold_threshold`] (0 by default:
//! only blocks the profile never saw). The entry block (block 0) is never cold: the function
//! must still start where its callers jump. A function whose counts are all zero has no profile
//! to go by and is left whole. Landing pads follow [`LandingPads`]: by default they stay hot
//! (BOLT without `-split-eh`), or they go by their count, or they all go cold (`-split-eh`),
//! since exceptions are rare and the unwinder reaches a pad in either fragment.
//!
//! With [`SplitOptions::all_cold`] (BOLT's `-split-all-cold`) every cold block moves; without
//! it only the trailing run of cold blocks of the order does, so the hot fragment is exactly the
//! original order up to its last hot block. Both fragments keep the relative order of `order`.
//! `O(n)`.

/// What happens to landing pads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LandingPads {
    /// Landing pads stay in the hot fragment whatever their count.
    #[default]
    StayHot,
    /// Landing pads are cold when their count says so, like any block.
    ByCount,
    /// Every landing pad is cold.
    AllCold,
}

/// How blocks are chosen for the cold fragment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitOptions {
    /// Blocks executed at most this many times are cold.
    pub cold_threshold: u64,
    /// Move every cold block, not only the trailing run of the order.
    pub all_cold: bool,
    pub landing_pads: LandingPads,
}

/// The two fragments of a function, each in layout order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Starts with the entry block whenever `order` does.
    pub hot: Vec<u32>,
    pub cold: Vec<u32>,
}

/// Whether each block (by id) may go to the cold fragment, ignoring where it sits in the order.
///
/// `landing_pads[b]` says whether block `b` is a landing pad; a shorter slice (or an empty one)
/// means the missing blocks are not.
pub fn cold_blocks(counts: &[u64], landing_pads: &[bool], options: &SplitOptions) -> Vec<bool> {
    if counts.iter().all(|&c| c == 0) {
        return vec![false; counts.len()];
    }
    (0..counts.len())
        .map(|b| {
            let by_count = counts[b] <= options.cold_threshold;
            let cold = if landing_pads.get(b).copied().unwrap_or(false) {
                match options.landing_pads {
                    LandingPads::StayHot => false,
                    LandingPads::ByCount => by_count,
                    LandingPads::AllCold => true,
                }
            } else {
                by_count
            };
            cold && b != 0
        })
        .collect()
}

/// Splits `order` (a permutation of the blocks, normally from `ext_tsp_order`) into hot and
/// cold fragments.
///
/// # Panics
/// When a block id in `order` is out of range of `counts`.
pub fn split_blocks(
    order: &[u32],
    counts: &[u64],
    landing_pads: &[bool],
    options: &SplitOptions,
) -> Split {
    let cold = cold_blocks(counts, landing_pads, options);
    let is_cold = |b: &u32| cold[*b as usize];
    if options.all_cold {
        let (cold, hot) = order.iter().partition(|b| is_cold(b));
        return Split { hot, cold };
    }
    let tail = order.iter().rev().take_while(|b| is_cold(b)).count();
    let (hot, cold) = order.split_at(order.len() - tail);
    Split {
        hot: hot.to_vec(),
        cold: cold.to_vec(),
    }
}
