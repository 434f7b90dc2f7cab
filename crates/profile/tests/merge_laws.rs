//! The laws a fleet's merge relies on, over random profiles: the merged bytes do not depend on
//! the order of the inputs nor on how they are grouped (a tree of partial merges on many
//! machines gives what one merge of everything gives), with weights on the inputs; integer
//! weights distribute over a merge; weight 1 changes nothing; the sum streamed out of a
//! `Merger` is byte for byte what the profile writer writes of it.
//!
//! The random profiles draw from few names and offsets so that inputs share records (sums),
//! and from counts near `u64::MAX` as well as small ones (saturation, rounding to 0). Seeds are
//! fixed, so a run is reproducible and the suite never flakes.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use rivet_profile::merge::{Merger, Weight, merge, merge_weighted};
use rivet_profile::{LocKind, Location, Mode, Profile, model::Origin, native};

fn config(seed: u64, cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

fn location() -> impl Strategy<Value = Location> {
    (0usize..5, 0u64..4).prop_map(|(n, offset)| match n {
        0 => Location::unknown(),
        1 => Location {
            kind: LocKind::External,
            name: "libc.so.6".into(),
            offset,
        },
        2 => Location {
            kind: LocKind::Local,
            // Escaped when written; sorts between the others.
            name: "helper a\\b/1".into(),
            offset,
        },
        n => Location::symbol(["main", "f"][n - 3], offset),
    })
}

fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..20,
        1 => Just(0),
        1 => (u64::MAX - 10)..=u64::MAX,
    ]
}

/// A profile of one binary: branch counts, or IP samples (`samples`), with memory records,
/// and a header that varies where merging allows it to.
fn profile(samples: bool) -> impl Strategy<Value = Profile> {
    let branches = prop::collection::vec((location(), location(), count(), count()), 0..8);
    let points = prop::collection::vec((location(), count()), 0..8);
    let memory = prop::collection::vec((location(), location(), count()), 0..3);
    let header = (
        prop::option::of(Just("00ff".to_string())),
        prop::option::of(prop::sample::select(vec!["app", "app.inst", "b"])),
        0usize..3,
        any::<bool>(),
    );
    (branches, points, memory, header).prop_map(
        move |(branches, points, memory, (build_id, name, origin, events))| {
            let mode = if samples {
                // Inputs either name the event or do not: both merge.
                let events = if events {
                    vec!["cpu-clock:u".into()]
                } else {
                    vec![]
                };
                Mode::Samples { events }
            } else {
                Mode::Branches
            };
            let mut p = Profile::new(mode);
            p.build_id = build_id;
            p.binary_name = name.map(str::to_owned);
            p.origin = [Origin::Instrumentation, Origin::Lbr, Origin::Unknown][origin];
            if samples {
                for (at, c) in points {
                    p.add_sample(at, c);
                }
            } else {
                for (from, to, c, m) in branches {
                    p.add_branch(from, to, c, m.min(c));
                }
            }
            for (pc, data, c) in memory {
                p.add_memory(pc, data, c);
            }
            p
        },
    )
}

fn weight() -> impl Strategy<Value = Weight> {
    prop::sample::select(vec![
        "1", "1", "2", "3", "0.5", "0.25", "1.5", "0.1", "2.75",
    ])
    .prop_map(|w| w.parse().unwrap())
}

fn bytes(p: &Profile) -> String {
    native::write(p).unwrap()
}

/// Merges `inputs` as a tree: `splits` picks where each group is cut in two, each leaf keeps
/// its weight and every partial sum is merged with weight 1 (as the fleet example's reduce
/// tasks do). Partial sums go through the native format, as they would between machines.
fn tree_merge(inputs: &[(Profile, Weight)], splits: &mut impl Iterator<Item = usize>) -> Profile {
    if inputs.len() == 1 {
        let (p, w) = inputs[0].clone();
        return merge_weighted([(p, w)]).unwrap();
    }
    let cut = 1 + splits.next().unwrap_or(0) % (inputs.len() - 1);
    let left = tree_merge(&inputs[..cut], splits);
    let right = tree_merge(&inputs[cut..], splits);
    let through_file = |p: Profile| native::parse(&bytes(&p)).unwrap();
    merge([through_file(left), through_file(right)]).unwrap()
}

fn inputs(samples: bool) -> impl Strategy<Value = Vec<(Profile, Weight)>> {
    prop::collection::vec((profile(samples), weight()), 1..7)
}

proptest! {
    #![proptest_config(config(0x5eed_0037, 400))]

    #[test]
    fn any_order_and_any_grouping_give_the_same_bytes(
        (inputs, order, splits) in any::<bool>().prop_flat_map(|s| (
            inputs(s),
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<usize>(), 0..8),
        )),
    ) {
        let flat = bytes(&merge_weighted(inputs.clone()).unwrap());
        // Another order: a rotation picked by `order`, then reversed.
        let mut shuffled = inputs.clone();
        shuffled.rotate_left(order.index(inputs.len()));
        shuffled.reverse();
        prop_assert_eq!(&bytes(&merge_weighted(shuffled.clone()).unwrap()), &flat);
        let tree = tree_merge(&shuffled, &mut splits.into_iter());
        prop_assert_eq!(&bytes(&tree), &flat);
    }

    #[test]
    fn streaming_the_sum_out_writes_what_the_profile_writer_writes(
        inputs in any::<bool>().prop_flat_map(inputs),
    ) {
        let mut merger = Merger::new();
        for (p, w) in inputs.clone() {
            merger.add(p, w).unwrap();
        }
        let mut streamed = Vec::new();
        merger.write_native(&mut streamed).unwrap();
        let whole = bytes(&merge_weighted(inputs).unwrap());
        prop_assert_eq!(String::from_utf8(streamed).unwrap(), whole);
    }

    #[test]
    fn integer_weights_distribute_over_a_merge(
        inputs in prop::collection::vec(profile(false), 1..5),
        k in 1u64..5,
    ) {
        let k: Weight = k.to_string().parse().unwrap();
        let scaled_sum = merge_weighted([(merge(inputs.clone()).unwrap(), k)]).unwrap();
        let sum_of_scaled = merge_weighted(inputs.into_iter().map(|p| (p, k))).unwrap();
        prop_assert_eq!(bytes(&scaled_sum), bytes(&sum_of_scaled));
    }

    #[test]
    fn weight_one_changes_nothing(p in profile(false), q in profile(true)) {
        for p in [p, q] {
            let mut merger = Merger::new();
            merger.add(p.clone(), Weight::ONE).unwrap();
            prop_assert_eq!(merger.finish().unwrap(), p);
        }
    }
}
