//! Times the function orders on a large synthetic call graph: `cargo run --release -p
//! rivet-layout --example function_order_timing [functions]` (default 100,000 functions,
//! three calls each, skewed counts).

use rivet_layout::function_order::{c3_order, cdsort_order, exec_count_order};
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |m: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % m
    };
    let sizes: Vec<u64> = (0..n).map(|_| 16 + next(2000)).collect();
    let mut calls = Vec::new();
    for caller in 0..n as u32 {
        for _ in 0..3 {
            // Callees cluster near the caller, with a few hub functions called from everywhere.
            let callee = if next(10) == 0 {
                next(100) as u32
            } else {
                (caller as u64 + next(1000)).min(n as u64 - 1) as u32
            };
            let scale = 1 << next(20);
            let count = if next(3) == 0 { 0 } else { next(scale) };
            calls.push((caller, callee, count));
        }
    }
    let mut counts = vec![0; n];
    for &(_, callee, c) in &calls {
        counts[callee as usize] += c;
    }
    let time = |name: &str, f: &dyn Fn() -> Vec<u32>| {
        let start = Instant::now();
        let order = f();
        println!(
            "{name}: {n} functions, {} calls: {:.3} s ({} placed)",
            calls.len(),
            start.elapsed().as_secs_f64(),
            order.len()
        );
    };
    time("exec-count", &|| exec_count_order(&counts));
    time("c3", &|| c3_order(&sizes, &counts, &calls));
    time("cdsort", &|| cdsort_order(&sizes, &counts, &calls));
}
