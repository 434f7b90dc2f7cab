//! Summing profiles of one binary: several training runs, several machines, several
//! instrumented processes.
//!
//! [`merge`] sums [`Profile`]s (saturating, so a huge count sticks at `u64::MAX` instead of
//! wrapping to a small one). It refuses to mix what cannot be summed meaningfully: branch
//! counts with IP samples, samples of different events, profiles of different builds (when
//! both build-ids are known), and BAT-mapped (`boltedcollection`) profiles with plain ones.
//! [`merge_yaml`] sums BOLT YAML profiles with the rules of `merge-fdata`, plus two checks it
//! lacks: build-ids and the block order (`dfs-order`) must agree, since block indices of a
//! DFS-ordered profile name other blocks than those of a layout-ordered one.
//!
//! Errors name inputs by position, counting from 1, so the caller can name the files. The
//! result depends only on the inputs and their order, never on hashing or threads.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use thiserror::Error;

use crate::model::{Mode, Origin, Profile};
use crate::yaml::{YamlBlock, YamlFunction, YamlHeader, YamlProfile};

/// Profiles that cannot be merged. `input`s count from 1 in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MergeError {
    #[error("no profiles to merge")]
    NoInputs,
    #[error(
        "input {input} has {found} but input {first} has {expected}: branch counts and IP samples cannot be summed"
    )]
    Mode {
        first: usize,
        expected: &'static str,
        input: usize,
        found: &'static str,
    },
    #[error(
        "input {input} sampled events [{found}] but input {first} sampled [{expected}]: their counts cannot be summed"
    )]
    Events {
        first: usize,
        expected: String,
        input: usize,
        found: String,
    },
    #[error(
        "input {input} is for build-id {found} but input {first} is for build-id {expected}: they profile different binaries"
    )]
    BuildId {
        first: usize,
        expected: String,
        input: usize,
        found: String,
    },
    #[error(
        "input {input} {found} collected on a BOLTed binary (boltedcollection) but input {first} {expected}: they cannot be mixed"
    )]
    BoltedCollection {
        first: usize,
        expected: &'static str,
        input: usize,
        found: &'static str,
    },
    #[error(
        "input {input} is an LBR profile and input {first} is not (or the other way round): they cannot be merged"
    )]
    YamlLbr { first: usize, input: usize },
    #[error(
        "input {input} hashes with {found:?} but input {first} with {expected:?}: they cannot be merged"
    )]
    YamlHashFunc {
        first: usize,
        expected: crate::yaml::HashFunc,
        input: usize,
        found: crate::yaml::HashFunc,
    },
    #[error(
        "input {input} numbers blocks in {found} order but input {first} in {expected} order: block ids would name different blocks"
    )]
    YamlBlockOrder {
        first: usize,
        expected: &'static str,
        input: usize,
        found: &'static str,
    },
    #[error("input {input}, function {function}: {message}")]
    YamlFunction {
        input: usize,
        function: String,
        message: String,
    },
}

/// Sums profiles of one binary. The result keeps the first known build-id and binary name,
/// the common origin (or `Unknown` when the inputs disagree), and the events of the inputs
/// that name them.
pub fn merge(profiles: impl IntoIterator<Item = Profile>) -> Result<Profile, MergeError> {
    let mut inputs = profiles.into_iter();
    let mut merged = inputs.next().ok_or(MergeError::NoInputs)?;
    // For each property, the input that set it, so that an error can name both sides.
    let mut events_from = 1;
    let mut build_id_from = 1;
    for (index, p) in inputs.enumerate() {
        let input = index + 2;
        match (&mut merged.mode, p.mode) {
            (Mode::Branches, Mode::Branches) => {}
            (Mode::Samples { events: mine }, Mode::Samples { events: theirs }) => {
                if mine.is_empty() {
                    *mine = theirs;
                    events_from = input;
                } else if !theirs.is_empty() && *mine != theirs {
                    return Err(MergeError::Events {
                        first: events_from,
                        expected: mine.join(" "),
                        input,
                        found: theirs.join(" "),
                    });
                }
            }
            (mine, theirs) => {
                return Err(MergeError::Mode {
                    first: 1,
                    expected: mode_words(mine),
                    input,
                    found: mode_words(&theirs),
                });
            }
        }
        if merged.bolted_collection != p.bolted_collection {
            let words = |bolted| if bolted { "was" } else { "was not" };
            return Err(MergeError::BoltedCollection {
                first: 1,
                expected: words(merged.bolted_collection),
                input,
                found: words(p.bolted_collection),
            });
        }
        match (&merged.build_id, p.build_id) {
            (Some(mine), Some(theirs)) if *mine != theirs => {
                return Err(MergeError::BuildId {
                    first: build_id_from,
                    expected: mine.clone(),
                    input,
                    found: theirs,
                });
            }
            (None, Some(theirs)) => {
                merged.build_id = Some(theirs);
                build_id_from = input;
            }
            _ => {}
        }
        if merged.binary_name.is_none() {
            merged.binary_name = p.binary_name;
        }
        if merged.origin != p.origin {
            merged.origin = Origin::Unknown;
        }
        for ((from, to), c) in p.branches {
            merged.add_branch(from, to, c.count, c.mispreds);
        }
        for (at, count) in p.samples {
            merged.add_sample(at, count);
        }
        for ((pc, data), count) in p.memory {
            merged.add_memory(pc, data, count);
        }
    }
    Ok(merged)
}

fn mode_words(mode: &Mode) -> &'static str {
    match mode {
        Mode::Branches => "branch counts",
        Mode::Samples { .. } => "IP samples (no_lbr)",
    }
}

/// Sums BOLT YAML profiles of one binary, as `merge-fdata` does: functions are matched by
/// name and must agree on `fid`, `hash` and `nblocks`; blocks by `bid` and must agree on
/// `insns` and `hash`; call sites by (`off`, `fid`, `disc`); successors by `bid`. Counts are
/// summed; what only some inputs have is appended in input order. Functions come out sorted
/// by `fid`. Header: the first binary name and known build-id are kept, origins and events
/// that differ are joined (`; ` and `,`), flags are united.
pub fn merge_yaml(
    profiles: impl IntoIterator<Item = YamlProfile>,
) -> Result<YamlProfile, MergeError> {
    let mut inputs = profiles.into_iter();
    let first = inputs.next().ok_or(MergeError::NoInputs)?;
    let mut header = first.header;
    let mut build_id_from = 1;
    let mut functions: BTreeMap<String, YamlFunction> = BTreeMap::new();
    add_functions(&mut functions, first.functions, 1)?;
    for (index, p) in inputs.enumerate() {
        let input = index + 2;
        merge_header(&mut header, p.header, input, &mut build_id_from)?;
        add_functions(&mut functions, p.functions, input)?;
    }
    let mut functions: Vec<YamlFunction> = functions.into_values().collect();
    // Stable: functions with equal ids stay in name order.
    functions.sort_by_key(|f| f.fid);
    Ok(YamlProfile { header, functions })
}

fn merge_header(
    merged: &mut YamlHeader,
    h: YamlHeader,
    input: usize,
    build_id_from: &mut usize,
) -> Result<(), MergeError> {
    if merged.binary_name.is_empty() {
        merged.binary_name = h.binary_name;
    }
    if merged.build_id.is_empty() {
        merged.build_id = h.build_id;
        *build_id_from = input;
    } else if !h.build_id.is_empty() && merged.build_id != h.build_id {
        return Err(MergeError::BuildId {
            first: *build_id_from,
            expected: merged.build_id.clone(),
            input,
            found: h.build_id,
        });
    }
    let no_flags = crate::yaml::ProfileFlags::default();
    if merged.flags == no_flags {
        merged.flags = h.flags;
    }
    if (merged.flags.lbr, merged.flags.sample) != (h.flags.lbr, h.flags.sample) {
        return Err(MergeError::YamlLbr { first: 1, input });
    }
    merged.flags.memevent |= h.flags.memevent;
    if merged.hash_func != h.hash_func {
        return Err(MergeError::YamlHashFunc {
            first: 1,
            expected: merged.hash_func,
            input,
            found: h.hash_func,
        });
    }
    if merged.dfs_order != h.dfs_order {
        let order = |dfs| if dfs { "DFS" } else { "layout" };
        return Err(MergeError::YamlBlockOrder {
            first: 1,
            expected: order(merged.dfs_order),
            input,
            found: order(h.dfs_order),
        });
    }
    if !h.origin.is_empty() {
        if merged.origin.is_empty() {
            merged.origin = h.origin;
        } else if merged.origin != h.origin {
            merged.origin = format!("{}; {}", merged.origin, h.origin);
        }
    }
    if merged.events.is_empty() {
        merged.events = h.events;
    } else if !h.events.is_empty() && merged.events != h.events {
        merged.events = format!("{},{}", merged.events, h.events);
    }
    Ok(())
}

fn add_functions(
    merged: &mut BTreeMap<String, YamlFunction>,
    functions: Vec<YamlFunction>,
    input: usize,
) -> Result<(), MergeError> {
    for f in functions {
        let error = |function: &str, message: String| MergeError::YamlFunction {
            input,
            function: function.to_owned(),
            message,
        };
        for b in &f.blocks {
            check_block(&f, b).map_err(|m| error(&f.name, m))?;
        }
        match merged.entry(f.name.clone()) {
            Entry::Vacant(slot) => {
                let mut f = f;
                // A function listed twice in one input is summed like one from two inputs.
                let blocks = std::mem::take(&mut f.blocks);
                let f = slot.insert(f);
                for b in blocks {
                    add_block(f, b).map_err(|m| error(&f.name, m))?;
                }
            }
            Entry::Occupied(mut slot) => {
                let m = slot.get_mut();
                for (what, mine, theirs) in [
                    ("nblocks", u64::from(m.nblocks), u64::from(f.nblocks)),
                    ("fid", u64::from(m.fid), u64::from(f.fid)),
                    ("hash", m.hash, f.hash),
                ] {
                    if mine != theirs {
                        return Err(error(
                            &f.name,
                            format!("{what} is {theirs:#x} here but {mine:#x} in an earlier input"),
                        ));
                    }
                }
                m.exec = m.exec.saturating_add(f.exec);
                m.extern_entries = m.extern_entries.saturating_add(f.extern_entries);
                for b in f.blocks {
                    add_block(m, b).map_err(|msg| error(&f.name, msg))?;
                }
            }
        }
    }
    Ok(())
}

fn check_block(f: &YamlFunction, b: &YamlBlock) -> Result<(), String> {
    if b.bid >= f.nblocks {
        return Err(format!(
            "block {} is out of range (nblocks is {})",
            b.bid, f.nblocks
        ));
    }
    if let Some(s) = b.succ.iter().find(|s| s.bid >= f.nblocks) {
        return Err(format!(
            "block {} has a successor {} out of range (nblocks is {})",
            b.bid, s.bid, f.nblocks
        ));
    }
    Ok(())
}

/// Adds block `b` to the merged function `m`, summing with the block of the same `bid`.
fn add_block(m: &mut YamlFunction, b: YamlBlock) -> Result<(), String> {
    let Some(mb) = m.blocks.iter_mut().find(|mb| mb.bid == b.bid) else {
        m.blocks.push(b);
        return Ok(());
    };
    if mb.insns != b.insns {
        return Err(format!(
            "block {} has {} instructions here but {} in an earlier input",
            b.bid, b.insns, mb.insns
        ));
    }
    if mb.hash != b.hash {
        return Err(format!(
            "block {} has hash {:#x} here but {:#x} in an earlier input",
            b.bid, b.hash, mb.hash
        ));
    }
    mb.exec = mb.exec.saturating_add(b.exec);
    mb.events = mb.events.saturating_add(b.events);
    for c in b.calls {
        match mb
            .calls
            .iter_mut()
            .find(|mc| (mc.off, mc.fid, mc.disc) == (c.off, c.fid, c.disc))
        {
            Some(mc) => {
                mc.cnt = mc.cnt.saturating_add(c.cnt);
                mc.mis = mc.mis.saturating_add(c.mis);
            }
            None => mb.calls.push(c),
        }
    }
    for s in b.succ {
        match mb.succ.iter_mut().find(|ms| ms.bid == s.bid) {
            Some(ms) => {
                ms.cnt = ms.cnt.saturating_add(s.cnt);
                ms.mis = ms.mis.saturating_add(s.mis);
            }
            None => mb.succ.push(s),
        }
    }
    if mb.pseudo_probes.is_empty() {
        mb.pseudo_probes = b.pseudo_probes;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BranchCount, Location};
    use crate::yaml::{HashFunc, ProfileFlags, YamlCall, YamlSucc};

    fn branches(build_id: Option<&str>, count: u64) -> Profile {
        let mut p = Profile::new(Mode::Branches);
        p.build_id = build_id.map(str::to_owned);
        p.add_branch(Location::symbol("f", 1), Location::symbol("g", 0), count, 1);
        p
    }

    #[test]
    fn sums_saturating_and_keeps_known_metadata() {
        let mut a = branches(None, u64::MAX - 1);
        a.origin = Origin::Instrumentation;
        let mut b = branches(Some("ab12"), 5);
        b.binary_name = Some("app".into());
        b.origin = Origin::Instrumentation;
        b.add_memory(Location::symbol("f", 1), Location::symbol("v", 8), 3);
        let m = merge([a, b.clone(), b]).unwrap();
        assert_eq!(m.build_id.as_deref(), Some("ab12"));
        assert_eq!(m.binary_name.as_deref(), Some("app"));
        assert_eq!(m.origin, Origin::Instrumentation);
        let c = m.branches.values().next().unwrap();
        assert_eq!(
            *c,
            BranchCount {
                count: u64::MAX,
                mispreds: 3
            }
        );
        assert_eq!(m.memory.values().copied().collect::<Vec<_>>(), [6]);
    }

    #[test]
    fn errors_name_the_inputs() {
        let samples = Profile::new(Mode::Samples { events: vec![] });
        let e = merge([branches(None, 1), branches(None, 1), samples]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 3 has IP samples (no_lbr) but input 1 has branch counts: branch counts and \
             IP samples cannot be summed"
        );
        let e = merge([
            branches(None, 1),
            branches(Some("aa"), 1),
            branches(Some("bb"), 1),
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 3 is for build-id bb but input 2 is for build-id aa: they profile different \
             binaries"
        );
        let mut bolted = branches(None, 1);
        bolted.bolted_collection = true;
        let e = merge([branches(None, 1), bolted]).unwrap_err();
        assert!(
            matches!(e, MergeError::BoltedCollection { input: 2, .. }),
            "{e}"
        );
        let events = |e: &[&str]| {
            Profile::new(Mode::Samples {
                events: e.iter().map(|s| s.to_string()).collect(),
            })
        };
        let m = merge([events(&[]), events(&["cycles:u"]), events(&[])]).unwrap();
        assert_eq!(
            m.mode,
            Mode::Samples {
                events: vec!["cycles:u".into()]
            }
        );
        let e = merge([events(&["cycles:u"]), events(&["cpu-clock:u"])]).unwrap_err();
        assert!(
            matches!(
                e,
                MergeError::Events {
                    first: 1,
                    input: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(merge([]), Err(MergeError::NoInputs));
    }

    fn yaml(exec: u64) -> YamlProfile {
        YamlProfile {
            header: YamlHeader {
                version: 1,
                binary_name: "prog".into(),
                build_id: String::new(),
                flags: ProfileFlags {
                    lbr: true,
                    ..Default::default()
                },
                origin: "branch profile reader".into(),
                events: String::new(),
                dfs_order: false,
                hash_func: HashFunc::Xxh3,
            },
            functions: vec![YamlFunction {
                name: "f".into(),
                fid: 2,
                hash: 7,
                exec,
                nblocks: 3,
                blocks: vec![YamlBlock {
                    bid: 0,
                    insns: 4,
                    exec,
                    calls: vec![YamlCall {
                        off: 3,
                        fid: 2,
                        cnt: exec,
                        ..Default::default()
                    }],
                    succ: vec![YamlSucc {
                        bid: 2,
                        cnt: exec,
                        mis: 0,
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn yaml_sums_matching_functions_blocks_calls_and_edges() {
        let mut b = yaml(5);
        b.header.origin = "perf".into();
        b.header.build_id = "abcd".into();
        b.functions[0].blocks[0].succ.push(YamlSucc {
            bid: 1,
            cnt: 9,
            mis: 1,
        });
        b.functions[0].blocks.push(YamlBlock {
            bid: 2,
            insns: 1,
            exec: 5,
            ..Default::default()
        });
        b.functions.push(YamlFunction {
            name: "e".into(),
            fid: 1,
            nblocks: 1,
            ..Default::default()
        });
        let m = merge_yaml([yaml(1), b]).unwrap();
        assert_eq!(m.header.origin, "branch profile reader; perf");
        assert_eq!(m.header.build_id, "abcd");
        assert_eq!(
            m.functions.iter().map(|f| f.fid).collect::<Vec<_>>(),
            [1, 2]
        );
        let f = &m.functions[1];
        assert_eq!(f.exec, 6);
        assert_eq!(f.blocks[0].exec, 6);
        assert_eq!(f.blocks[0].calls[0].cnt, 6);
        assert_eq!(
            f.blocks[0].succ,
            [
                YamlSucc {
                    bid: 2,
                    cnt: 6,
                    mis: 0
                },
                YamlSucc {
                    bid: 1,
                    cnt: 9,
                    mis: 1
                }
            ]
        );
        assert_eq!(f.blocks[1].bid, 2);
    }

    #[test]
    fn yaml_refuses_what_merge_fdata_refuses() {
        let mut nolbr = yaml(1);
        nolbr.header.flags = ProfileFlags {
            sample: true,
            ..Default::default()
        };
        assert_eq!(
            merge_yaml([yaml(1), nolbr]),
            Err(MergeError::YamlLbr { first: 1, input: 2 })
        );
        let mut hash = yaml(1);
        hash.header.hash_func = HashFunc::StdHash;
        assert!(matches!(
            merge_yaml([yaml(1), hash]),
            Err(MergeError::YamlHashFunc { input: 2, .. })
        ));
        let mut dfs = yaml(1);
        dfs.header.dfs_order = true;
        assert!(matches!(
            merge_yaml([yaml(1), dfs]),
            Err(MergeError::YamlBlockOrder { input: 2, .. })
        ));
        let mut other = yaml(1);
        other.functions[0].hash = 8;
        let e = merge_yaml([yaml(1), yaml(1), other]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 3, function f: hash is 0x8 here but 0x7 in an earlier input"
        );
        let mut insns = yaml(1);
        insns.functions[0].blocks[0].insns = 5;
        let e = merge_yaml([yaml(1), insns]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 2, function f: block 0 has 5 instructions here but 4 in an earlier input"
        );
        let mut range = yaml(1);
        range.functions[0].blocks[0].bid = 3;
        let e = merge_yaml([range]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 1, function f: block 3 is out of range (nblocks is 3)"
        );
    }
}
