//! Hot/cold splitting: hand cases for each option and properties of the two fragments.

use proptest::prelude::*;
use rivet_layout::split::{LandingPads, Split, SplitOptions, cold_blocks, split_blocks};

fn split(order: &[u32], counts: &[u64], pads: &[bool], options: SplitOptions) -> Split {
    split_blocks(order, counts, pads, &options)
}

#[test]
fn zero_count_blocks_go_cold_and_the_entry_never_does() {
    let all_cold = SplitOptions {
        all_cold: true,
        ..SplitOptions::default()
    };
    // The entry has a zero count (stale profile) but stays hot.
    let s = split(&[0, 2, 1, 3], &[0, 0, 7, 0], &[], all_cold);
    assert_eq!(s.hot, vec![0, 2]);
    assert_eq!(s.cold, vec![1, 3]);
}

#[test]
fn without_all_cold_only_the_trailing_cold_run_moves() {
    let order = [0, 1, 2, 3, 4];
    let counts = [10, 0, 10, 0, 0];
    let s = split(&order, &counts, &[], SplitOptions::default());
    assert_eq!(s.hot, vec![0, 1, 2]);
    assert_eq!(s.cold, vec![3, 4]);
}

#[test]
fn a_threshold_makes_rare_blocks_cold() {
    let options = SplitOptions {
        cold_threshold: 5,
        all_cold: true,
        ..SplitOptions::default()
    };
    let s = split(&[0, 1, 2, 3], &[100, 5, 6, 0], &[], options);
    assert_eq!(s.hot, vec![0, 2]);
    assert_eq!(s.cold, vec![1, 3]);
}

#[test]
fn landing_pads_follow_the_option() {
    let order = [0, 1, 2, 3];
    let counts = [100, 100, 0, 0];
    let pads = [false, true, true, false];
    let with = |landing_pads| {
        let options = SplitOptions {
            all_cold: true,
            landing_pads,
            ..SplitOptions::default()
        };
        split(&order, &counts, &pads, options)
    };
    assert_eq!(with(LandingPads::StayHot).cold, vec![3]);
    assert_eq!(with(LandingPads::ByCount).cold, vec![2, 3]);
    assert_eq!(with(LandingPads::AllCold).cold, vec![1, 2, 3]);
}

#[test]
fn a_function_without_a_profile_stays_whole() {
    let s = split(&[0, 1, 2], &[0, 0, 0], &[], SplitOptions::default());
    assert_eq!(s.hot, vec![0, 1, 2]);
    assert!(s.cold.is_empty());
    assert!(split(&[], &[], &[], SplitOptions::default()).hot.is_empty());
}

fn arbitrary_function() -> impl Strategy<Value = (Vec<u32>, Vec<u64>, Vec<bool>, SplitOptions)> {
    (1usize..40).prop_flat_map(|n| {
        let order = Just((1..n as u32).collect::<Vec<u32>>())
            .prop_shuffle()
            .prop_map(|rest| [vec![0], rest].concat());
        let options = (0u64..3, any::<bool>(), 0usize..3).prop_map(|(t, all, pads)| SplitOptions {
            cold_threshold: t,
            all_cold: all,
            landing_pads: [
                LandingPads::StayHot,
                LandingPads::ByCount,
                LandingPads::AllCold,
            ][pads],
        });
        (
            order,
            prop::collection::vec(prop_oneof![Just(0u64), 0u64..5, 0u64..1000], n),
            prop::collection::vec(any::<bool>(), 0..=n),
            options,
        )
    })
}

proptest! {
    #[test]
    fn fragments_partition_the_order(input in arbitrary_function()) {
        let (order, counts, pads, options) = input;
        let s = split_blocks(&order, &counts, &pads, &options);
        prop_assert_eq!(s.hot.first(), Some(&0));
        let cold = cold_blocks(&counts, &pads, &options);
        prop_assert!(s.cold.iter().all(|&b| cold[b as usize]));
        // Each fragment keeps the relative order of `order`.
        let at = |b: u32| order.iter().position(|&x| x == b).unwrap();
        prop_assert!(s.hot.windows(2).all(|w| at(w[0]) < at(w[1])));
        prop_assert!(s.cold.windows(2).all(|w| at(w[0]) < at(w[1])));
        prop_assert_eq!(s.hot.len() + s.cold.len(), order.len());
        if options.all_cold {
            prop_assert!(s.hot.iter().all(|&b| !cold[b as usize]));
        }
    }
}
