//! Attaching a profile of plain timer samples: block counts estimated from samples, made
//! consistent by flow inference, and a sampled function never erased.

#[allow(dead_code)] // this file uses some of the shared builders
mod common;

use common::{fall, function, program, taken};
use rivet_ir::{Function, Terminator};
use rivet_passes::attach::attach;
use rivet_passes::names::profile_names;
use rivet_profile::{Location, Mode, Profile};

/// Three checks in a row before the work, each leaving early to a shared return:
///
/// ```text
///   B0 +0x0:  test %edi,%edi; je B4
///   B1 +0x4:  add $1,%eax; test %esi,%esi; je B4
///   B2 +0xb:  add $2,%eax; test %edx,%edx; je B4
///   B3 +0x12: imul %eax,%eax; ret
///   B4 +0x16: xor %eax,%eax; ret
/// ```
fn three_checks(base: u64) -> Function {
    let code = [
        0x85, 0xff, // test %edi,%edi
        0x74, 0x12, // je +0x16
        0x83, 0xc0, 0x01, // add $1,%eax
        0x85, 0xf6, // test %esi,%esi
        0x74, 0x0b, // je +0x16
        0x83, 0xc0, 0x02, // add $2,%eax
        0x85, 0xd2, // test %edx,%edx
        0x74, 0x04, // je +0x16
        0x0f, 0xaf, 0xc0, // imul %eax,%eax
        0xc3, // ret
        0x31, 0xc0, // xor %eax,%eax
        0xc3, // ret
    ];
    function(
        0,
        base,
        &code,
        vec![
            (base, Terminator::CondJump, vec![taken(4), fall(1)]),
            (base + 0x4, Terminator::CondJump, vec![taken(4), fall(2)]),
            (base + 0xb, Terminator::CondJump, vec![taken(4), fall(3)]),
            (base + 0x12, Terminator::Return, vec![]),
            (base + 0x16, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

/// A sample profile of function `f0` with `samples` (offset, count).
fn samples(samples: &[(u64, u64)]) -> Profile {
    let mut p = Profile::new(Mode::Samples { events: vec![] });
    for &(offset, count) in samples {
        p.add_sample(Location::symbol("f0", offset), count);
    }
    p
}

/// One sample deep in a function, none on the way to it: inference alone finds it cheaper to
/// drop the sampled block than to raise the three blocks before it, and would leave the
/// function without counts, as if it never ran. The sample is proof it ran: the path to it
/// gets the flow.
#[test]
fn a_function_sampled_once_deep_inside_keeps_counts() {
    let p = program(vec![three_checks(0x1000)]);
    let names = profile_names(&p);
    assert_eq!(names, vec!["f0".to_string()]);
    let attached = attach(&p, &names, &samples(&[(0x12, 1)]));
    assert!(attached.inferred);
    let counts = attached.functions[0]
        .as_ref()
        .expect("a sampled function has counts");
    let b = &counts.blocks;
    assert!(b[3] > 0, "the sampled block ran: {b:?}");
    assert!(
        b[0] >= b[3] && b[1] >= b[3] && b[2] >= b[3],
        "the way to it ran as often: {b:?}"
    );
    assert_eq!(
        b[4], 0,
        "the early return has no sample and no need to run: {b:?}"
    );
    assert!(counts.entries > 0, "the function was entered: {counts:?}");
    // Consistent along the CFG: each block's count leaves by its edges (B3 and B4 return).
    for (i, succs) in counts.edges.iter().enumerate().take(3) {
        assert_eq!(succs.iter().sum::<u64>(), b[i], "block {i}: {counts:?}");
    }
}

/// Where the samples already make a path, the blocks without samples keep weighing zero:
/// flow does not wander into them.
#[test]
fn samples_on_the_way_keep_unsampled_blocks_cold() {
    let p = program(vec![three_checks(0x1000)]);
    let names = profile_names(&p);
    let attached = attach(
        &p,
        &names,
        &samples(&[(0x0, 20), (0x4, 30), (0xb, 30), (0x12, 20)]),
    );
    let counts = attached.functions[0].as_ref().expect("counts");
    assert!(counts.blocks[..4].iter().all(|&c| c > 0), "{counts:?}");
    assert_eq!(counts.blocks[4], 0, "{counts:?}");
}

/// A function without samples stays without counts.
#[test]
fn an_unsampled_function_has_no_counts() {
    let p = program(vec![three_checks(0x1000)]);
    let names = profile_names(&p);
    let attached = attach(&p, &names, &samples(&[]));
    assert!(attached.functions[0].is_none());
}
