//! Function orders: permutation properties and hand cases for exec-count, C3 and cdsort.

use proptest::prelude::*;
use rivet_layout::function_order::{C3_MAX_CLUSTER_SIZE, c3_order, cdsort_order, exec_count_order};

fn is_permutation(order: &[u32], n: usize) -> bool {
    let mut seen = vec![false; n];
    order.len() == n
        && order
            .iter()
            .all(|&f| (f as usize) < n && !std::mem::replace(&mut seen[f as usize], true))
}

fn position(order: &[u32], f: u32) -> usize {
    order.iter().position(|&g| g == f).unwrap()
}

type CallGraph = (Vec<u64>, Vec<u64>, Vec<(u32, u32, u64)>);

/// Ten functions: 7 calls 3 very often, 1 calls 8 a little, the rest is cold.
fn hot_pair() -> CallGraph {
    let sizes = vec![100, 300, 50, 80, 500, 60, 70, 120, 90, 40];
    let counts = vec![0, 10, 0, 5000, 0, 0, 0, 4000, 10, 0];
    let calls = vec![(7, 3, 5000), (1, 8, 10), (4, 5, 0)];
    (sizes, counts, calls)
}

#[test]
fn exec_count_puts_the_hottest_first_and_keeps_ties_in_order() {
    assert_eq!(exec_count_order(&[5, 0, 9, 5, 0]), vec![2, 0, 3, 1, 4]);
}

#[test]
fn c3_puts_a_hot_caller_right_before_its_callee() {
    let (sizes, counts, calls) = hot_pair();
    let order = c3_order(&sizes, &counts, &calls);
    assert!(is_permutation(&order, sizes.len()));
    assert_eq!(&order[..2], &[7, 3], "{order:?}");
}

#[test]
fn cdsort_puts_a_hot_caller_next_to_its_callee() {
    let (sizes, counts, calls) = hot_pair();
    let order = cdsort_order(&sizes, &counts, &calls);
    assert!(is_permutation(&order, sizes.len()));
    assert_eq!(
        position(&order, 7).abs_diff(position(&order, 3)),
        1,
        "{order:?}"
    );
    assert!(
        position(&order, 3) < 2 && position(&order, 7) < 2,
        "{order:?}"
    );
}

#[test]
fn c3_clusters_stay_within_a_page() {
    // A chain of callers 0 -> 1 -> 2 -> 3, each 1500 bytes: at most two fit in a page.
    let sizes = vec![1500; 4];
    let counts = vec![100, 100, 100, 100];
    let calls = vec![(0, 1, 100), (1, 2, 100), (2, 3, 100)];
    let order = c3_order(&sizes, &counts, &calls);
    assert!(is_permutation(&order, 4));
    const { assert!(3 * 1500 > C3_MAX_CLUSTER_SIZE) };
    // Equal densities: visited in id order, 1 joins 0, 2 does not fit after {0, 1}, 3 joins 2.
    // With 3 made hotter, {2, 3} is the denser cluster and comes first.
    assert_eq!(order, vec![0, 1, 2, 3]);
    let order = c3_order(&sizes, &[100, 100, 100, 400], &calls);
    assert_eq!(order, vec![2, 3, 0, 1]);
}

#[test]
fn c3_follows_the_heaviest_caller() {
    // 2 is called by 0 (10 times) and by 1 (1000 times): it joins 1.
    let sizes = vec![100, 100, 100];
    let counts = vec![10, 1000, 1010];
    let calls = vec![(0, 2, 10), (1, 2, 1000)];
    let order = c3_order(&sizes, &counts, &calls);
    assert_eq!(position(&order, 2), position(&order, 1) + 1, "{order:?}");
}

#[test]
fn cdsort_without_calls_sorts_by_density_keeping_ties_in_order() {
    let order = cdsort_order(&[10, 10, 20, 10], &[0, 5, 10, 5], &[]);
    assert_eq!(order, vec![1, 2, 3, 0]);
}

#[test]
fn empty_inputs() {
    assert!(c3_order(&[], &[], &[]).is_empty());
    assert!(cdsort_order(&[], &[], &[]).is_empty());
    assert!(exec_count_order(&[]).is_empty());
}

fn arbitrary_call_graph() -> impl Strategy<Value = CallGraph> {
    (1usize..80).prop_flat_map(|n| {
        (
            prop::collection::vec(0u64..5000, n),
            prop::collection::vec(0u64..10_000, n),
            prop::collection::vec((0..n as u32, 0..n as u32, 0u64..10_000), 0..n * 3),
        )
    })
}

proptest! {
    #[test]
    fn every_order_is_a_permutation(graph in arbitrary_call_graph()) {
        let (sizes, counts, calls) = graph;
        let n = sizes.len();
        prop_assert!(is_permutation(&exec_count_order(&counts), n));
        prop_assert!(is_permutation(&c3_order(&sizes, &counts, &calls), n));
        prop_assert!(is_permutation(&cdsort_order(&sizes, &counts, &calls), n));
    }

    #[test]
    fn orders_are_deterministic(graph in arbitrary_call_graph()) {
        let (sizes, counts, calls) = graph;
        prop_assert_eq!(
            cdsort_order(&sizes, &counts, &calls),
            cdsort_order(&sizes, &counts, &calls)
        );
        prop_assert_eq!(c3_order(&sizes, &counts, &calls), c3_order(&sizes, &counts, &calls));
    }
}
