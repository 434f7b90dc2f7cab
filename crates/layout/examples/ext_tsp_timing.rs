//! Times ext-TSP on a large synthetic function: `cargo run --release -p rivet-layout --example
//! ext_tsp_timing [blocks] [switch]` (default 10,000 blocks of a CFG-like graph; `switch` makes
//! one dispatch block jump to every other block and back, the quadratic worst case). Prints the
//! time and the score against the input order.

use rivet_layout::ext_tsp::{ext_tsp_order, ext_tsp_score};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |m: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % m
    };
    // CFG-like: a fall-through to the next block plus a branch mostly to nearby blocks, with
    // skewed counts.
    let sizes: Vec<u64> = (0..n).map(|_| 2 + next(60)).collect();
    let mut edges = Vec::new();
    for s in 0..n as u32 - 1 {
        let hot = if next(4) == 0 { 0 } else { next(10_000) };
        edges.push((s, s + 1, hot * next(2)));
        let t = if next(8) == 0 {
            next(n as u64) as u32
        } else {
            (s as i64 + next(40) as i64 - 20).clamp(0, n as i64 - 1) as u32
        };
        edges.push((s, t, hot * next(3)));
    }
    if std::env::args().nth(2).as_deref() == Some("switch") {
        // An interpreter loop: block 1 dispatches to every other block, each jumps back.
        edges.clear();
        edges.push((0, 1, 1));
        for t in 2..n as u32 {
            let count = 1 + next(1000);
            edges.push((1, t, count));
            edges.push((t, 1, count));
        }
    }
    let mut counts = vec![0; n];
    for &(_, t, c) in &edges {
        counts[t as usize] += c;
    }
    let start = Instant::now();
    let order = ext_tsp_order(&sizes, &counts, &edges);
    let elapsed = start.elapsed();
    let identity: Vec<u32> = (0..n as u32).collect();
    println!(
        "{n} blocks, {} jumps: {:.3} s; score {:.0} (input order {:.0})",
        edges.len(),
        elapsed.as_secs_f64(),
        ext_tsp_score(&order, &sizes, &edges),
        ext_tsp_score(&identity, &sizes, &edges)
    );
}
