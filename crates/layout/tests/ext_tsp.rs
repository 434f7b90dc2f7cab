//! Ext-TSP against brute force on small graphs, permutation properties, and hand cases.

use proptest::prelude::*;
use rivet_layout::ext_tsp::{
    ext_tsp_order, ext_tsp_order_with_indirect, ext_tsp_score, ext_tsp_score_with_indirect,
};

/// A small deterministic generator, so the brute-force average is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

type Graph = (Vec<u64>, Vec<u64>, Vec<(u32, u32, u64)>);

/// A CFG-like graph: each block jumps to one or two others with random counts; block counts
/// are the incoming counts (the entry gets its outgoing ones).
fn random_graph(rng: &mut Rng, n: usize) -> Graph {
    let sizes: Vec<u64> = (0..n)
        .map(|_| {
            if rng.below(4) == 0 {
                1 + rng.below(600)
            } else {
                1 + rng.below(64)
            }
        })
        .collect();
    let mut edges = Vec::new();
    for s in 0..n as u32 {
        for _ in 0..1 + rng.below(2) {
            let t = rng.below(n as u64) as u32;
            let count = if rng.below(5) == 0 {
                0
            } else {
                rng.below(1000)
            };
            edges.push((s, t, count));
        }
    }
    let mut counts = vec![0; n];
    for &(s, t, c) in &edges {
        counts[t as usize] += c;
        if s == 0 {
            counts[0] += c;
        }
    }
    (sizes, counts, edges)
}

fn is_permutation_with_entry_first(order: &[u32], n: usize) -> bool {
    let mut seen = vec![false; n];
    order.len() == n
        && order.first().is_none_or(|&b| b == 0)
        && order
            .iter()
            .all(|&b| (b as usize) < n && !std::mem::replace(&mut seen[b as usize], true))
}

/// Best score over every order with block 0 first (Heap's algorithm on the other blocks).
fn brute_force_best(sizes: &[u64], edges: &[(u32, u32, u64)]) -> f64 {
    let n = sizes.len();
    let mut rest: Vec<u32> = (1..n as u32).collect();
    let mut best = f64::MIN;
    let mut order = vec![0u32; n];
    let mut eval = |rest: &[u32], order: &mut Vec<u32>| {
        order[1..].copy_from_slice(rest);
        best = best.max(ext_tsp_score(order, sizes, edges));
    };
    let k = rest.len();
    let mut c = vec![0usize; k];
    eval(&rest, &mut order);
    let mut i = 0;
    while i < k {
        if c[i] < i {
            if i % 2 == 0 {
                rest.swap(0, i);
            } else {
                rest.swap(c[i], i);
            }
            eval(&rest, &mut order);
            c[i] += 1;
            i = 0;
        } else {
            c[i] = 0;
            i += 1;
        }
    }
    best
}

#[test]
fn close_to_the_optimum_on_small_graphs() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut sum, mut graphs, mut worst) = (0.0, 0, f64::MAX);
    for round in 0..400 {
        let n = 2 + round % 7;
        let (sizes, counts, edges) = random_graph(&mut rng, n);
        let order = ext_tsp_order(&sizes, &counts, &edges);
        assert!(is_permutation_with_entry_first(&order, n), "{order:?}");
        let ours = ext_tsp_score(&order, &sizes, &edges);
        let best = brute_force_best(&sizes, &edges);
        assert!(
            ours <= best + 1e-6 * best.abs().max(1.0),
            "ours {ours} above the optimum {best}: {sizes:?} {edges:?}"
        );
        if best > 0.0 {
            let ratio = ours / best;
            sum += ratio;
            graphs += 1;
            worst = worst.min(ratio);
        }
    }
    let average = sum / graphs as f64;
    println!("ext-TSP / optimum over {graphs} graphs: average {average:.4}, worst {worst:.4}");
    assert!(average >= 0.95, "average ratio {average}");
}

#[test]
fn a_loop_is_rotated_so_each_iteration_takes_one_branch() {
    // 0 -> 1 (header) -> 2 (body) -> 1 back edge, 1 -> 3 exit; 4 is cold, placed in between
    // originally. Header first would need a conditional (not taken) and a jump back per
    // iteration; the body falling into the header needs only the header's taken branch, and
    // the body's fall-through (it has one successor) weighs 1.05.
    let sizes = [16, 8, 32, 8, 200];
    let counts = [1, 1001, 1000, 1, 0];
    let edges = [(0, 4, 0), (0, 1, 1), (1, 2, 1000), (2, 1, 1000), (1, 3, 1)];
    let order = ext_tsp_order(&sizes, &counts, &edges);
    assert_eq!(order[0], 0);
    let at = |b: u32| order.iter().position(|&x| x == b).unwrap();
    assert_eq!(
        at(1),
        at(2) + 1,
        "the body falls into the header: {order:?}"
    );
    assert_eq!(
        at(3),
        at(1) + 1,
        "the header falls into the exit: {order:?}"
    );
    assert_eq!(
        *order.last().unwrap(),
        4,
        "the cold block goes last: {order:?}"
    );
}

#[test]
fn a_diamond_falls_through_its_hot_side() {
    // 0 -> {1 cold, 2 hot} -> 3.
    let sizes = [10, 10, 10, 10];
    let counts = [100, 1, 99, 100];
    let edges = [(0, 1, 1), (0, 2, 99), (1, 3, 1), (2, 3, 99)];
    let order = ext_tsp_order(&sizes, &counts, &edges);
    assert_eq!(order, vec![0, 2, 3, 1]);
}

#[test]
fn a_hot_path_through_a_cold_block_stays_together() {
    // 0 -> 1 -> 2 -> 3 is hot except that 2 is rarely counted on its own (its count is stale);
    // the jump counts still make 0 1 2 3 the best order, with the cold 4 last.
    let sizes = [20, 20, 20, 20, 20];
    let counts = [500, 500, 0, 500, 0];
    let edges = [(0, 1, 500), (1, 2, 500), (2, 3, 500), (0, 4, 0), (4, 3, 0)];
    let order = ext_tsp_order(&sizes, &counts, &edges);
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
}

#[test]
fn no_profile_keeps_the_original_order() {
    let sizes = [4; 6];
    let counts = [0; 6];
    let edges = [(0, 1, 0), (1, 2, 0), (2, 5, 0), (3, 4, 0)];
    assert_eq!(
        ext_tsp_order(&sizes, &counts, &edges),
        vec![0, 1, 2, 3, 4, 5]
    );
}

#[test]
fn empty_and_single_block() {
    assert!(ext_tsp_order(&[], &[], &[]).is_empty());
    assert_eq!(ext_tsp_order(&[5], &[3], &[(0, 0, 3)]), vec![0]);
}

#[test]
fn scores_follow_the_published_constants() {
    // Fall-through from a block with one successor (1.05) and from a conditional one (1.0),
    // forward 512 bytes away, backward 320 bytes away, out of range.
    assert!((ext_tsp_score(&[0, 1], &[10, 10], &[(0, 1, 7)]) - 7.35).abs() < 1e-12);
    assert_eq!(
        ext_tsp_score(&[0, 1, 2], &[10, 10, 10], &[(0, 1, 7), (0, 2, 0)]),
        7.0
    );
    let forward = ext_tsp_score(&[0, 2, 1], &[10, 10, 512], &[(0, 1, 10)]);
    assert!((forward - 10.0 * 0.1 * 0.5).abs() < 1e-12);
    let backward = ext_tsp_score(&[1, 0], &[310, 10], &[(1, 1, 0), (0, 1, 10)]);
    assert!((backward - 10.0 * 0.1 * 0.5).abs() < 1e-12, "{backward}");
    assert_eq!(
        ext_tsp_score(&[0, 2, 1], &[10, 10, 1025], &[(0, 1, 10)]),
        0.0
    );
}

#[test]
fn nothing_falls_out_of_an_indirect_jump() {
    // A table jump to the block right after it is still a taken jump: distance 0, 0.1 per run.
    let edges = [(0, 1, 10), (0, 2, 0)];
    assert!((ext_tsp_score(&[0, 1, 2], &[10, 10, 10], &edges) - 10.0).abs() < 1e-12);
    let indirect = [true, false, false];
    let score = ext_tsp_score_with_indirect(&[0, 1, 2], &[10, 10, 10], &edges, &indirect);
    assert!((score - 10.0 * 0.1).abs() < 1e-12, "{score}");
    // Blocks missing from `indirect` are not indirect.
    assert_eq!(
        ext_tsp_score_with_indirect(&[0, 1, 2], &[10, 10, 10], &edges, &[]),
        ext_tsp_score(&[0, 1, 2], &[10, 10, 10], &edges)
    );
}

#[test]
fn a_block_after_an_indirect_jump_goes_to_a_predecessor_that_falls_into_it() {
    // E (0) branches to D (2) 100 times and to P (1) 60 times; D (a jump table, its other
    // entry Z, 4) goes on to X (3) 100 times, P (one successor) 60 times. Only P can fall
    // into X: D's table jump is taken wherever X is. Treated as a fall-through, D's edge
    // outweighs P's and takes the place right before X.
    let sizes = [8, 4, 16, 16, 8];
    let counts = [160, 60, 100, 160, 0];
    let edges = [(0, 1, 60), (0, 2, 100), (1, 3, 60), (2, 3, 100), (2, 4, 0)];
    let follows = |order: &[u32], a: u32, b: u32| order.windows(2).any(|w| w == [a, b]);
    let old = ext_tsp_order(&sizes, &counts, &edges);
    assert!(follows(&old, 2, 3), "{old:?}");
    let indirect = [false, false, true, false, false];
    let order = ext_tsp_order_with_indirect(&sizes, &counts, &edges, &indirect);
    assert!(follows(&order, 1, 3), "{order:?}");
    assert_eq!(order[0], 0);
    // And it is the best order under the indirect model, of those with the entry first.
    let best = permutations(5)
        .into_iter()
        .filter(|o| o[0] == 0)
        .map(|o| ext_tsp_score_with_indirect(&o, &sizes, &edges, &indirect))
        .fold(f64::MIN, f64::max);
    let ours = ext_tsp_score_with_indirect(&order, &sizes, &edges, &indirect);
    assert!((ours - best).abs() < 1e-9, "{ours} vs best {best}");
}

fn permutations(n: u32) -> Vec<Vec<u32>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

fn arbitrary_graph() -> impl Strategy<Value = Graph> {
    (1usize..60).prop_flat_map(|n| {
        (
            prop::collection::vec(0u64..300, n),
            prop::collection::vec(0u64..1000, n),
            prop::collection::vec((0..n as u32, 0..n as u32, 0u64..1000), 0..n * 3),
        )
    })
}

proptest! {
    #[test]
    fn every_order_is_a_permutation_with_the_entry_first(graph in arbitrary_graph()) {
        let (sizes, counts, edges) = graph;
        let order = ext_tsp_order(&sizes, &counts, &edges);
        prop_assert!(is_permutation_with_entry_first(&order, sizes.len()), "{:?}", order);
    }

    #[test]
    fn never_worse_than_the_identity_by_much(graph in arbitrary_graph()) {
        let (sizes, counts, edges) = graph;
        let order = ext_tsp_order(&sizes, &counts, &edges);
        let identity: Vec<u32> = (0..sizes.len() as u32).collect();
        // Greedy merging is no local optimum, but it should not lose most of an input's score.
        let ours = ext_tsp_score(&order, &sizes, &edges);
        let original = ext_tsp_score(&identity, &sizes, &edges);
        prop_assert!(ours >= 0.5 * original, "ours {} original {}", ours, original);
    }
}
