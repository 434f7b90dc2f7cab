//! Identical code folding (`rivet_passes::icf`) on hand-written x86-64 functions: what is
//! folded, what is not, the fixed point of mutual recursion, safe mode, and the profile merge.

mod common;

use std::collections::HashMap;

use common::{profile, program};
use rivet_elf::Vaddr;
use rivet_ir::{FuncId, Function, Program, Terminator};
use rivet_passes::attach::FunctionCounts;
use rivet_passes::icf::{Folding, find_identical, merge_profiles};

/// A one-block function of `code` at `start` that ends in `ret`.
fn leaf(id: u32, start: u64, code: &[u8]) -> Function {
    common::function(
        id,
        start,
        code,
        vec![(start, Terminator::Return, vec![])],
        vec![],
    )
}

/// `call target; ret` at `start`.
fn caller(id: u32, start: u64, target: u64) -> Function {
    let rel = (target as i64 - (start as i64 + 5)) as i32;
    let mut code = vec![0xe8];
    code.extend(rel.to_le_bytes());
    code.push(0xc3);
    leaf(id, start, &code)
}

/// Folds the functions of `p`, every one eligible, reading code from `code` (start -> bytes).
fn fold(p: &Program, code: &HashMap<u64, Vec<u8>>) -> Folding {
    let read = |addr: Vaddr, len: u64| {
        code.get(&addr.get())
            .filter(|b| b.len() as u64 == len)
            .map(Vec::as_slice)
    };
    find_identical(p, &read, &|_| true)
}

fn bytes_of(functions: &[(u64, Vec<u8>)]) -> HashMap<u64, Vec<u8>> {
    functions.iter().cloned().collect()
}

fn call_bytes(start: u64, target: u64) -> Vec<u8> {
    let rel = (target as i64 - (start as i64 + 5)) as i32;
    let mut code = vec![0xe8];
    code.extend(rel.to_le_bytes());
    code.push(0xc3);
    code
}

const LEA_RET: [u8; 5] = [0x48, 0x8d, 0x47, 0x01, 0xc3]; // lea 0x1(%rdi),%rax; ret

#[test]
fn an_identical_leaf_pair_folds_into_the_first() {
    let p = program(vec![leaf(0, 0x1000, &LEA_RET), leaf(1, 0x1010, &LEA_RET)]);
    let code = bytes_of(&[(0x1000, LEA_RET.to_vec()), (0x1010, LEA_RET.to_vec())]);
    let folding = fold(&p, &code);
    assert_eq!(folding.pairs, vec![(FuncId(1), FuncId(0))]);
    assert_eq!(folding.classes, 1);
}

#[test]
fn different_bytes_do_not_fold() {
    let other = [0x48, 0x8d, 0x47, 0x02, 0xc3]; // lea 0x2(%rdi),%rax; ret
    let p = program(vec![leaf(0, 0x1000, &LEA_RET), leaf(1, 0x1010, &other)]);
    let code = bytes_of(&[(0x1000, LEA_RET.to_vec()), (0x1010, other.to_vec())]);
    assert!(fold(&p, &code).pairs.is_empty());
}

#[test]
fn a_pair_differing_in_one_call_target_does_not_fold() {
    // The two callers' bytes are the same (the same displacement), but they call different
    // leaves, which are not identical.
    let one = [0xb8, 1, 0, 0, 0, 0xc3]; // mov $1,%eax; ret
    let two = [0xb8, 2, 0, 0, 0, 0xc3]; // mov $2,%eax; ret
    let p = program(vec![
        leaf(0, 0x1000, &one),
        leaf(1, 0x1010, &two),
        caller(2, 0x1020, 0x1000),
        caller(3, 0x1030, 0x1010),
    ]);
    let code = bytes_of(&[
        (0x1000, one.to_vec()),
        (0x1010, two.to_vec()),
        (0x1020, call_bytes(0x1020, 0x1000)),
        (0x1030, call_bytes(0x1030, 0x1010)),
    ]);
    assert_eq!(call_bytes(0x1020, 0x1000), call_bytes(0x1030, 0x1010));
    let folding = fold(&p, &code);
    assert!(folding.pairs.is_empty(), "{:?}", folding.pairs);
}

#[test]
fn callers_of_identical_leaves_fold_too() {
    // Different displacements, identical callees: the callers are the same code.
    let p = program(vec![
        leaf(0, 0x1000, &LEA_RET),
        leaf(1, 0x1010, &LEA_RET),
        caller(2, 0x1020, 0x1000),
        caller(3, 0x1040, 0x1010),
    ]);
    let code = bytes_of(&[
        (0x1000, LEA_RET.to_vec()),
        (0x1010, LEA_RET.to_vec()),
        (0x1020, call_bytes(0x1020, 0x1000)),
        (0x1040, call_bytes(0x1040, 0x1010)),
    ]);
    assert_ne!(call_bytes(0x1020, 0x1000), call_bytes(0x1040, 0x1010));
    let folding = fold(&p, &code);
    assert_eq!(
        folding.pairs,
        vec![(FuncId(1), FuncId(0)), (FuncId(3), FuncId(2))]
    );
}

/// `prefix; call target; ret` at `start`.
fn prefixed_call(prefix: &[u8], start: u64, target: u64) -> Vec<u8> {
    let mut code = prefix.to_vec();
    code.extend(call_bytes(start + prefix.len() as u64, target));
    code
}

const XOR: [u8; 2] = [0x31, 0xc0]; // xor %eax,%eax

/// a0 <-> b0 and a1 <-> b1, each `a` is `call b; ret` and each `b` `xor; call a; ret`, with
/// `b1`'s prefix given (so that it can differ).
fn recursive_pairs(b1_prefix: &[u8]) -> (Program, HashMap<u64, Vec<u8>>) {
    let parts = [
        (0x1000, call_bytes(0x1000, 0x1010)),
        (0x1010, prefixed_call(&XOR, 0x1010, 0x1000)),
        (0x1020, call_bytes(0x1020, 0x1030)),
        (0x1030, prefixed_call(b1_prefix, 0x1030, 0x1020)),
    ];
    let functions = parts
        .iter()
        .enumerate()
        .map(|(i, (start, code))| leaf(i as u32, *start, code))
        .collect();
    (program(functions), bytes_of(&parts))
}

#[test]
fn mutually_recursive_pairs_fold_at_the_fixed_point() {
    // a0 and a1 are identical only if b0 and b1 are, and the other way round.
    let (p, code) = recursive_pairs(&XOR);
    let folding = fold(&p, &code);
    assert_eq!(
        folding.pairs,
        vec![(FuncId(2), FuncId(0)), (FuncId(3), FuncId(1))]
    );
    assert_eq!(folding.classes, 2);
}

#[test]
fn a_recursive_pair_with_one_odd_member_does_not_fold() {
    // b1 differs from b0 in its bytes: then a0 and a1 call different functions, and nothing
    // folds.
    let (p, code) = recursive_pairs(&[0x31, 0xc9]); // xor %ecx,%ecx
    let folding = fold(&p, &code);
    assert!(folding.pairs.is_empty(), "{:?}", folding.pairs);
}

#[test]
fn address_taken_functions_are_not_folded_away() {
    let mut a = leaf(0, 0x1000, &LEA_RET);
    let mut b = leaf(1, 0x1010, &LEA_RET);
    a.address_taken = true;
    b.address_taken = true;
    let code = bytes_of(&[(0x1000, LEA_RET.to_vec()), (0x1010, LEA_RET.to_vec())]);
    let folding = fold(&program(vec![a.clone(), b.clone()]), &code);
    assert!(folding.pairs.is_empty());
    assert_eq!(folding.address_taken, 1);
    // One taken: it is the copy kept, the other folds into it.
    a.address_taken = false;
    let folding = fold(&program(vec![a, b]), &code);
    assert_eq!(folding.pairs, vec![(FuncId(0), FuncId(1))]);
}

#[test]
fn functions_with_an_lsda_are_not_folded() {
    let mut a = leaf(0, 0x1000, &LEA_RET);
    let b = leaf(1, 0x1010, &LEA_RET);
    a.lsda = Some(Vaddr(0x9000));
    let code = bytes_of(&[(0x1000, LEA_RET.to_vec()), (0x1010, LEA_RET.to_vec())]);
    assert!(fold(&program(vec![a, b]), &code).pairs.is_empty());
}

#[test]
fn the_kept_copy_gets_the_folded_ones_counts() {
    let p = program(vec![
        leaf(0, 0x1000, &LEA_RET),
        leaf(1, 0x1010, &LEA_RET),
        caller(2, 0x1020, 0x1010),
    ]);
    let counts = |n: u64| FunctionCounts {
        blocks: vec![n],
        edges: vec![vec![]],
        entries: n,
    };
    let mut prof = profile(vec![Some(counts(3)), Some(counts(5)), Some(counts(5))]);
    prof.calls.insert((FuncId(2), FuncId(1)), 5);
    merge_profiles(&mut prof, &[(FuncId(1), FuncId(0))]);
    assert_eq!(prof.functions[0], Some(counts(8)));
    assert_eq!(prof.functions[1], None);
    assert_eq!(prof.calls.get(&(FuncId(2), FuncId(0))), Some(&5));
    assert!(!prof.calls.contains_key(&(FuncId(2), FuncId(1))));
    assert_eq!(p.functions.len(), 3);
}
