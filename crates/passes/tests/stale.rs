//! Stale matching on hand-made profiles: a function that only moved matches exactly, one
//! whose block changed is matched block by block (the changed block along the profile's
//! edges) and its counts come out as measured, and a function the new build lacks is
//! reported unmatched.

#[allow(dead_code)] // this file uses some of the shared builders
mod common;

use common::{fall, function, program, taken};
use rivet_ir::{Function, Terminator};
use rivet_passes::attach::attach;
use rivet_passes::names::profile_names;
use rivet_passes::stale::{FunctionMatchKind, add_hashes, attach_stale, function_hash};
use rivet_profile::{Location, Mode, Profile};

/// A diamond:
///
/// ```text
///   A +0x0: test %edi,%edi; jne C
///   B +0x4: mov $1,%eax; jmp D
///   C +0xb: mov $2,%eax
///   D +0x10: ret
/// ```
fn version1(start: u64) -> Function {
    let code = [
        0x85, 0xff, 0x75, 0x07, // test; jne +7
        0xb8, 0x01, 0x00, 0x00, 0x00, 0xeb, 0x05, // mov $1; jmp +5
        0xb8, 0x02, 0x00, 0x00, 0x00, // mov $2
        0xc3, // ret
    ];
    function(
        0,
        start,
        &code,
        vec![
            (start, Terminator::CondJump, vec![taken(2), fall(1)]),
            (start + 4, Terminator::Jump, vec![taken(3)]),
            (start + 0xb, Terminator::FallThrough, vec![fall(3)]),
            (start + 0x10, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

/// The next version: B gained an instruction (`add $3,%eax`), so C and D moved by 3.
fn version2(start: u64) -> Function {
    let code = [
        0x85, 0xff, 0x75, 0x0a, // test; jne +10
        0xb8, 0x01, 0x00, 0x00, 0x00, 0x83, 0xc0, 0x03, 0xeb, 0x05, // mov $1; add $3; jmp +5
        0xb8, 0x02, 0x00, 0x00, 0x00, // mov $2
        0xc3, // ret
    ];
    function(
        0,
        start,
        &code,
        vec![
            (start, Terminator::CondJump, vec![taken(2), fall(1)]),
            (start + 4, Terminator::Jump, vec![taken(3)]),
            (start + 0xe, Terminator::FallThrough, vec![fall(3)]),
            (start + 0x13, Terminator::Return, vec![]),
        ],
        vec![],
    )
}

/// An instrumentation profile of version 1, named `f0`: 100 entries, 90 through C, 10
/// through B, and 7 entries of a function `gone`. With version 1's hashes.
fn profile_of_version1() -> Profile {
    let mut p = Profile::new(Mode::Branches);
    let f = |offset| Location::symbol("f0", offset);
    p.add_branch(Location::unknown(), f(0), 100, 0);
    p.add_branch(f(2), f(0xb), 90, 0);
    p.add_branch(f(2), f(4), 10, 0);
    p.add_branch(f(9), f(0x10), 10, 0);
    p.add_branch(f(0xb), f(0x10), 90, 0);
    p.add_branch(Location::unknown(), Location::symbol("gone", 0), 7, 0);
    let old = program(vec![version1(0x1000)]);
    add_hashes(&old, &profile_names(&old), &mut p);
    p
}

#[test]
fn hashes_ignore_where_the_code_is() {
    let a = program(vec![version1(0x1000)]);
    let b = program(vec![version1(0x5400)]);
    let c = program(vec![version2(0x1000)]);
    let (ha, hb, hc) = (
        function_hash(&a, &a.functions[0]),
        function_hash(&b, &b.functions[0]),
        function_hash(&c, &c.functions[0]),
    );
    assert_eq!(ha, hb);
    assert_ne!(ha.hash, hc.hash);
    // A, C and D read the same in both versions; B does not.
    let exact =
        |h: &rivet_profile::FunctionHash| h.blocks.iter().map(|b| b.exact).collect::<Vec<_>>();
    let (ea, ec) = (exact(&ha), exact(&hc));
    assert_eq!((ea[0], ea[2], ea[3]), (ec[0], ec[2], ec[3]));
    assert_ne!(ea[1], ec[1]);
    assert_eq!(
        ha.blocks
            .iter()
            .map(|b| (b.offset, b.last))
            .collect::<Vec<_>>(),
        [(0, 2), (4, 9), (0xb, 0xb), (0x10, 0x10)]
    );
}

#[test]
fn a_function_that_only_moved_matches_exactly() {
    let profile = profile_of_version1();
    // A new build where the function moved (another function before it, say).
    let moved = program(vec![version1(0x7000)]);
    let names = profile_names(&moved);
    let (attached, report) = attach_stale(&moved, &names, &profile);
    assert_eq!(report.exact_count, 300);
    assert_eq!(report.approximate_count, 0);
    assert_eq!(report.unmatched_count, 7);
    assert_eq!(report.functions[0].name, "f0");
    assert_eq!(report.functions[0].kind, FunctionMatchKind::Exact);
    let gone = report.functions.iter().find(|f| f.name == "gone").unwrap();
    assert_eq!(gone.kind, FunctionMatchKind::Missing);
    assert_eq!((gone.count, gone.matched_count), (7, 0));
    // The counts are those of the profile attached to its own build.
    let own = program(vec![version1(0x1000)]);
    let direct = attach(&own, &profile_names(&own), &profile);
    assert_eq!(attached.functions[0], direct.functions[0]);
    assert_eq!(attached.report.records_count, 307);
    assert_eq!(attached.report.matched_count, 300);
}

#[test]
fn a_changed_function_is_matched_by_blocks_and_its_counts_repaired() {
    let profile = profile_of_version1();
    let next = program(vec![version2(0x2000)]);
    let names = profile_names(&next);
    let (attached, report) = attach_stale(&next, &names, &profile);
    // B changed: no hash finds it, the edge A -> B does (A's one unclaimed successor).
    assert_eq!(
        report.functions[0].kind,
        FunctionMatchKind::Approximate {
            matched: 4,
            blocks: 4
        }
    );
    assert_eq!((report.exact_count, report.approximate_count), (0, 300));
    let counts = attached.functions[0].as_ref().unwrap();
    assert_eq!(counts.blocks, [100, 10, 90, 100]);
    // A's successors are [C, B]: 90 taken, 10 falling through.
    assert_eq!(counts.edges[0], [90, 10]);
    assert_eq!(counts.entries, 100);

    // Forced onto the new offsets, the edges into the moved blocks fit nothing.
    let forced = attach(&next, &names, &profile);
    assert!(forced.report.matched_share() < attached.report.matched_share());
}

/// A switch over two cases whose handlers read alike once numbers are masked:
///
/// ```text
///   A   +0x0: jmp *0x9000(,%rdi,8)      table [case 0, case 1]
///   +0x7:     mov $N,%eax; ret           the handler placed first
///   +0xd:     mov $M,%eax; ret           the handler placed second
/// ```
///
/// `swapped` is the next build of the same switch: a `nop` before the dispatch (so the
/// function changed), the handlers laid out the other way round, case 1's first.
fn switch(start: u64, swapped: bool) -> Function {
    let mut code = vec![
        0xff, 0x24, 0xfd, 0x00, 0x90, 0x00, 0x00, // jmp *0x9000(,%rdi,8)
        0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3, // mov $1,%eax; ret
        0xb8, 0x02, 0x00, 0x00, 0x00, 0xc3, // mov $2,%eax; ret
    ];
    let at = if swapped {
        code.insert(0, 0x90);
        start + 1
    } else {
        start
    };
    let case = |to| rivet_ir::Edge {
        to: rivet_ir::BlockId(to),
        kind: rivet_ir::EdgeKind::JumpTable,
    };
    let mut f = function(
        0,
        start,
        &code,
        vec![
            (
                start,
                Terminator::JumpTable {
                    table: rivet_ir::JumpTableId(0),
                },
                vec![case(1), case(2)],
            ),
            (at + 7, Terminator::Return, vec![]),
            (at + 0xd, Terminator::Return, vec![]),
        ],
        vec![],
    );
    let (first, second) = (rivet_elf::Vaddr(at + 7), rivet_elf::Vaddr(at + 0xd));
    f.jump_tables.push(rivet_ir::JumpTable {
        addr: rivet_elf::Vaddr(0x9000),
        entry_size: 8,
        kind: rivet_ir::JumpTableKind::Absolute,
        jump_at: rivet_elf::Vaddr(at),
        entries: if swapped {
            vec![second, first]
        } else {
            vec![first, second]
        },
        bound: rivet_ir::TableBound::Relocations,
        default_target: None,
    });
    f
}

#[test]
fn switch_cases_anchor_handlers_that_hash_alike() {
    // The old build: case 0 (the handler at +0x7) ran 90 times, case 1 (at +0xd) 10 times.
    let mut profile = Profile::new(Mode::Branches);
    let f = |offset| Location::symbol("f0", offset);
    profile.add_branch(Location::unknown(), f(0), 100, 0);
    profile.add_branch(f(0), f(7), 90, 0);
    profile.add_branch(f(0), f(0xd), 10, 0);
    let old = program(vec![switch(0x1000, false)]);
    add_hashes(&old, &profile_names(&old), &mut profile);
    let hashes = &profile.hashes["f0"].blocks;
    // The handlers hash alike; only their cases tell them apart. The dispatch is no case.
    assert_eq!(hashes[1].exact, hashes[2].exact);
    assert_eq!(hashes[1].neighbours, hashes[2].neighbours);
    assert_ne!(hashes[1].case, hashes[2].case);
    assert_eq!(hashes[0].case, 0);
    assert!(hashes[1].case != 0 && hashes[2].case != 0);

    // The next build places case 1's handler first.
    let next = program(vec![switch(0x4000, true)]);
    let names = profile_names(&next);
    let (attached, report) = attach_stale(&next, &names, &profile);
    assert_eq!(
        report.functions[0].kind,
        FunctionMatchKind::Approximate {
            matched: 3,
            blocks: 3
        }
    );
    // Case 0's handler, now at +0xe, ran 90 times.
    let counts = attached.functions[0].as_ref().unwrap();
    assert_eq!(counts.blocks, [100, 10, 90]);
    assert_eq!(counts.edges[0], [10, 90]);

    // A profile from before cases were recorded (format version 2 or 3) matches by position
    // among the alike handlers, and gets them the wrong way round: what cases fix.
    let mut older = profile.clone();
    for b in &mut older.hashes.get_mut("f0").unwrap().blocks {
        b.case = 0;
    }
    let (attached, _) = attach_stale(&next, &names, &older);
    assert_eq!(
        attached.functions[0].as_ref().unwrap().blocks,
        [100, 90, 10]
    );

    // A table of another length is another switch: its cases anchor nothing, and the match
    // falls back to the hashes and positions as for the older profile.
    let mut longer = switch(0x4000, true);
    let extra = longer.jump_tables[0].entries[0];
    longer.jump_tables[0].entries.push(extra);
    let longer = program(vec![longer]);
    let (attached, _) = attach_stale(&longer, &profile_names(&longer), &profile);
    assert_eq!(
        attached.functions[0].as_ref().unwrap().blocks,
        [100, 90, 10]
    );
}

/// A join block `J` that two paths reach, and the next build, where the compiler copied `J`
/// into one of them (`B`):
///
/// ```text
///   version 1                          version 2
///   A +0x0:  test %edi,%edi; jne C     A +0x0:  test %edi,%edi; jne C
///   B +0x4:  mov $1,%eax; jmp J        B +0x4:  mov $1,%eax; add $5,%eax; jmp K
///   C +0xb:  mov $2,%eax               C +0xe:  mov $2,%eax
///   J +0x10: add $5,%eax               J +0x13: add $5,%eax
///   K +0x13: ret                       K +0x16: ret
/// ```
fn join(copied: bool) -> Function {
    let (code, blocks) = if copied {
        (
            vec![
                0x85, 0xff, 0x75, 0x0a, // test; jne C
                0xb8, 0x01, 0x00, 0x00, 0x00, 0x83, 0xc0, 0x05, 0xeb, 0x08, // mov; add; jmp K
                0xb8, 0x02, 0x00, 0x00, 0x00, // mov $2
                0x83, 0xc0, 0x05, // add $5
                0xc3, // ret
            ],
            vec![
                (0x1000, Terminator::CondJump, vec![taken(2), fall(1)]),
                (0x1004, Terminator::Jump, vec![taken(4)]),
                (0x100e, Terminator::FallThrough, vec![fall(3)]),
                (0x1013, Terminator::FallThrough, vec![fall(4)]),
                (0x1016, Terminator::Return, vec![]),
            ],
        )
    } else {
        (
            vec![
                0x85, 0xff, 0x75, 0x07, // test; jne C
                0xb8, 0x01, 0x00, 0x00, 0x00, 0xeb, 0x05, // mov; jmp J
                0xb8, 0x02, 0x00, 0x00, 0x00, // mov $2
                0x83, 0xc0, 0x05, // add $5
                0xc3, // ret
            ],
            vec![
                (0x1000, Terminator::CondJump, vec![taken(2), fall(1)]),
                (0x1004, Terminator::Jump, vec![taken(3)]),
                (0x100b, Terminator::FallThrough, vec![fall(3)]),
                (0x1010, Terminator::FallThrough, vec![fall(4)]),
                (0x1013, Terminator::Return, vec![]),
            ],
        )
    };
    function(0, 0x1000, &code, blocks, vec![])
}

#[test]
fn flow_of_a_copied_join_goes_past_it() {
    // Version 1: 100 entries, 90 through C, 10 through B, all 100 through J.
    let mut profile = Profile::new(Mode::Branches);
    let f = |offset| Location::symbol("f0", offset);
    profile.add_branch(Location::unknown(), f(0), 100, 0);
    profile.add_branch(f(2), f(0xb), 90, 0);
    profile.add_branch(f(2), f(4), 10, 0);
    profile.add_branch(f(9), f(0x10), 10, 0);
    profile.add_branch(f(0xb), f(0x10), 90, 0);
    profile.add_branch(f(0x10), f(0x13), 100, 0);
    let old = program(vec![join(false)]);
    add_hashes(&old, &profile_names(&old), &mut profile);

    let next = program(vec![join(true)]);
    let (attached, report) = attach_stale(&next, &profile_names(&next), &profile);
    assert_eq!(
        report.functions[0].kind,
        FunctionMatchKind::Approximate {
            matched: 5,
            blocks: 5
        }
    );
    // B's 10 now go from B straight to K; J runs only C's 90. (Here inference alone would
    // find the same; on Lua's interpreter loop, with unknown blocks around, it did not:
    // docs/stale-benchmark.md.)
    let counts = attached.functions[0].as_ref().unwrap();
    assert_eq!(counts.blocks, [100, 10, 90, 90, 100]);
    assert_eq!(counts.edges[1], [10]);
    assert_eq!(counts.edges[3], [90]);
}
