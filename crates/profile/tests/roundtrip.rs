//! Property tests: every writer's output reads back as what was written, for random profiles
//! with awkward names (spaces, backslashes, non-ASCII, YAML's special characters), and
//! merging behaves like adding up.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use rivet_profile::merge::{merge, merge_yaml};
use rivet_profile::model::Origin;
use rivet_profile::yaml::{
    HashFunc, ProfileFlags, YamlBlock, YamlCall, YamlFunction, YamlHeader, YamlProbe, YamlProfile,
    YamlSucc,
};
use rivet_profile::{
    Architecture, BranchCount, LocKind, Location, Mode, Profile, fdata, native, yaml,
};

/// Names fdata and the native format can hold: anything without a newline, biased towards
/// the characters the escaping is about.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_]{1,8}(/[0-9])?",
        "[ \\\\a-z\t\r]{1,10}",
        "[^\n]{1,12}",
        Just("[unknown]".to_owned()),
    ]
}

fn location() -> impl Strategy<Value = Location> {
    let kind = prop_oneof![
        Just(LocKind::External),
        Just(LocKind::Symbol),
        Just(LocKind::Local)
    ];
    (kind, name(), any::<u64>()).prop_map(|(kind, name, offset)| Location { kind, name, offset })
}

fn origin() -> impl Strategy<Value = Origin> {
    prop_oneof![
        Just(Origin::Unknown),
        Just(Origin::Instrumentation),
        Just(Origin::Lbr),
        Just(Origin::Samples),
        Just(Origin::Trace),
        Just(Origin::Spe),
    ]
}

fn architecture() -> impl Strategy<Value = Option<Architecture>> {
    proptest::option::of(prop_oneof![
        Just(Architecture::X86_64),
        Just(Architecture::Aarch64)
    ])
}

fn profile() -> impl Strategy<Value = Profile> {
    let events = vec("[a-z:_\\\\-]{1,10}", 0..3);
    let mode = prop_oneof![
        Just(Mode::Branches),
        events.prop_map(|events| Mode::Samples { events })
    ];
    let build_id = proptest::option::of("([0-9a-f]{2}){1,20}");
    let binary_name = proptest::option::of(name());
    let count = prop_oneof![0..10u64, any::<u64>()];
    let branch = (count.clone(), count.clone())
        .prop_map(|(count, mispreds)| BranchCount { count, mispreds });
    (
        mode,
        build_id,
        binary_name,
        (origin(), architecture()),
        any::<bool>(),
        btree_map((location(), location()), branch, 0..12),
        btree_map(location(), count.clone(), 0..12),
        btree_map((location(), location()), count, 0..4),
    )
        .prop_map(
            |(mode, build_id, binary_name, (origin, arch), bolted, branches, samples, memory)| {
                let mut p = Profile::new(mode);
                p.build_id = build_id;
                p.binary_name = binary_name;
                p.origin = origin;
                p.architecture = arch;
                p.bolted_collection = bolted;
                p.memory = memory;
                match p.mode {
                    Mode::Branches => p.branches = branches,
                    Mode::Samples { .. } => p.samples = samples,
                }
                p
            },
        )
}

fn yaml_profile() -> impl Strategy<Value = YamlProfile> {
    let small = 0..5u32;
    let count = prop_oneof![0..100u64, any::<u64>()];
    let call = (
        any::<u32>(),
        small.clone(),
        0..3u32,
        count.clone(),
        count.clone(),
    )
        .prop_map(|(off, fid, disc, cnt, mis)| YamlCall {
            off,
            fid,
            disc,
            cnt,
            mis,
        });
    let succ = (small.clone(), count.clone(), count.clone()).prop_map(|(bid, cnt, mis)| YamlSucc {
        bid,
        cnt,
        mis,
    });
    let probe = (any::<u64>(), any::<u64>(), 0..3u32).prop_map(|(guid, id, kind)| YamlProbe {
        guid,
        id,
        kind,
    });
    let block = (
        small.clone(),
        any::<u32>(),
        any::<u64>(),
        count.clone(),
        count.clone(),
        vec(call, 0..3),
        vec(succ, 0..3),
        vec(probe, 0..2),
    )
        .prop_map(
            |(bid, insns, hash, exec, events, calls, succ, pseudo_probes)| YamlBlock {
                bid,
                insns,
                hash,
                exec,
                events,
                calls,
                succ,
                pseudo_probes,
            },
        );
    let function = (
        any::<String>(),
        any::<u32>(),
        any::<u64>(),
        count.clone(),
        count,
        any::<u32>(),
        vec(block, 0..4),
        prop_oneof![Just(0u64), any::<u64>()],
        prop_oneof![Just(0u64), any::<u64>()],
    )
        .prop_map(
            |(name, fid, hash, exec, extern_entries, nblocks, blocks, guid, desc)| YamlFunction {
                name,
                fid,
                hash,
                exec,
                extern_entries,
                nblocks,
                blocks,
                guid,
                pseudo_probe_desc_hash: desc,
            },
        );
    let flags =
        (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(lbr, sample, memevent)| {
            ProfileFlags {
                lbr,
                sample,
                memevent,
            }
        });
    let hash_func = prop_oneof![Just(HashFunc::StdHash), Just(HashFunc::Xxh3)];
    let header = (
        any::<String>(),
        any::<String>(),
        flags,
        any::<String>(),
        any::<String>(),
        any::<bool>(),
        hash_func,
    )
        .prop_map(
            |(binary_name, build_id, flags, origin, events, dfs_order, hash_func)| YamlHeader {
                version: 1,
                binary_name,
                build_id,
                flags,
                origin,
                events,
                dfs_order,
                hash_func,
            },
        );
    (header, vec(function, 0..4)).prop_map(|(header, functions)| YamlProfile { header, functions })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn native_round_trips(p in profile()) {
        let text = native::write(&p).unwrap();
        prop_assert_eq!(native::parse(&text).unwrap(), p.clone());
        prop_assert_eq!(
            native::read_any(text.as_bytes()).unwrap(),
            native::AnyProfile::Located { profile: p, format: native::Format::Native }
        );
    }

    /// fdata keeps the records, the mode with its events and `boltedcollection`; it has no
    /// place for the build-id, the binary name or the origin.
    #[test]
    fn fdata_round_trips_what_it_can_hold(p in profile()) {
        let text = fdata::write(&p).unwrap();
        let mut expected = p.clone();
        expected.build_id = None;
        expected.binary_name = None;
        expected.architecture = None;
        expected.origin = match p.mode {
            Mode::Branches => Origin::Unknown,
            Mode::Samples { .. } => Origin::Samples,
        };
        prop_assert_eq!(fdata::parse(&text).unwrap(), expected);
        prop_assert_eq!(native::detect(text.as_bytes()), native::Format::Fdata);
    }

    #[test]
    fn yaml_round_trips(p in yaml_profile()) {
        let text = yaml::write(&p);
        prop_assert_eq!(native::detect(text.as_bytes()), native::Format::Yaml);
        let back = yaml::parse(&text);
        prop_assert!(back.is_ok(), "{:?}\n{}", back, text);
        prop_assert_eq!(back.unwrap(), p);
    }

    /// Splitting a profile's records between two inputs and merging them gives the profile.
    #[test]
    fn merge_of_a_split_is_the_whole(p in profile(), cut in any::<u64>()) {
        let mut a = p.clone();
        let mut b = p.clone();
        a.branches.retain(|k, _| hash(k) < cut);
        b.branches.retain(|k, _| hash(k) >= cut);
        a.samples.retain(|k, _| hash(k) < cut);
        b.samples.retain(|k, _| hash(k) >= cut);
        a.memory.retain(|k, _| hash(k) < cut);
        b.memory.retain(|k, _| hash(k) >= cut);
        prop_assert_eq!(merge([a.clone(), b.clone()]).unwrap(), p.clone());
        prop_assert_eq!(merge([b, a]).unwrap(), p);
    }

    /// Merging a profile with itself doubles every count (saturating).
    #[test]
    fn merge_with_itself_doubles(p in profile()) {
        let m = merge([p.clone(), p.clone()]).unwrap();
        for (k, c) in &p.branches {
            prop_assert_eq!(m.branches[k].count, c.count.saturating_mul(2));
            prop_assert_eq!(m.branches[k].mispreds, c.mispreds.saturating_mul(2));
        }
        for (k, c) in &p.samples {
            prop_assert_eq!(m.samples[k], c.saturating_mul(2));
        }
        prop_assert_eq!(m.branches.len(), p.branches.len());
        prop_assert_eq!(m.samples.len(), p.samples.len());
    }

    /// Merging YAML profiles with themselves doubles counts and keeps the structure, once
    /// block and successor ids are in range and unique (as in any profile BOLT writes).
    #[test]
    fn yaml_merge_with_itself_doubles(p in yaml_profile()) {
        let mut p = p;
        let mut names = std::collections::BTreeSet::new();
        p.functions.retain(|f| names.insert(f.name.clone()));
        for (i, f) in p.functions.iter_mut().enumerate() {
            f.fid = i as u32;
            f.nblocks = 5;
            let mut bids = std::collections::BTreeSet::new();
            f.blocks.retain(|b| bids.insert(b.bid));
            for b in &mut f.blocks {
                let mut succ = std::collections::BTreeSet::new();
                b.succ.retain(|s| succ.insert(s.bid));
                let mut calls = std::collections::BTreeSet::new();
                b.calls.retain(|c| calls.insert((c.off, c.fid, c.disc)));
            }
        }
        let m = merge_yaml([p.clone(), p.clone()]).unwrap();
        let mut doubled = p.clone();
        for f in &mut doubled.functions {
            f.exec = f.exec.saturating_mul(2);
            f.extern_entries = f.extern_entries.saturating_mul(2);
            for b in &mut f.blocks {
                b.exec = b.exec.saturating_mul(2);
                b.events = b.events.saturating_mul(2);
                for c in &mut b.calls {
                    c.cnt = c.cnt.saturating_mul(2);
                    c.mis = c.mis.saturating_mul(2);
                }
                for s in &mut b.succ {
                    s.cnt = s.cnt.saturating_mul(2);
                    s.mis = s.mis.saturating_mul(2);
                }
            }
        }
        prop_assert_eq!(m, doubled);
    }
}

fn hash<T: std::hash::Hash>(value: &T) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(value)
}
