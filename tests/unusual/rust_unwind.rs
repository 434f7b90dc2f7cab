// A Rust program: panics unwinding through frames with destructors (landing pads, LSDAs from
// rustc), catch_unwind, trait objects, closures and iterator chains, the standard library
// linked in statically, and functions whose names contain "cold" and "warm", which are not
// compiler-split parts (BOLT once took them for such). Prints the same lines on every run.
use std::collections::HashMap;
use std::panic;

struct Noisy(u64, &'static str);
impl Drop for Noisy {
    fn drop(&mut self) {
        println!("drop {} {}", self.1, self.0);
    }
}

trait Shape {
    fn area(&self) -> f64;
}
struct Square(f64);
struct Circle(f64);
impl Shape for Square {
    fn area(&self) -> f64 {
        self.0 * self.0
    }
}
impl Shape for Circle {
    fn area(&self) -> f64 {
        3.0 * self.0 * self.0
    }
}

#[inline(never)]
fn cold_path_handler(n: u64) -> u64 {
    let _guard = Noisy(n, "cold");
    if n % 7 == 3 {
        panic!("unlucky {n}");
    }
    n * 3
}

#[inline(never)]
fn warm_up(v: &[u64]) -> u64 {
    v.iter().filter(|x| *x % 3 != 0).map(|x| x * x).sum()
}

fn main() {
    panic::set_hook(Box::new(|info| println!("panic hook: {info}")));
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let mut caught = 0;
    let mut total = 0u64;
    for i in 0..n {
        match panic::catch_unwind(|| cold_path_handler(i)) {
            Ok(v) => total += v,
            Err(_) => caught += 1,
        }
    }
    let shapes: Vec<Box<dyn Shape>> = (0..n)
        .map(|i| -> Box<dyn Shape> { if i % 2 == 0 { Box::new(Square(i as f64)) } else { Box::new(Circle(i as f64)) } })
        .collect();
    let area: f64 = shapes.iter().map(|s| s.area()).sum();
    let mut words: HashMap<String, usize> = HashMap::new();
    for w in "the quick brown fox jumps over the lazy dog the end".split(' ') {
        *words.entry(w.to_string()).or_default() += 1;
    }
    let mut counted: Vec<_> = words.into_iter().collect();
    counted.sort();
    let v: Vec<u64> = (0..n * 1000).collect();
    println!("total {total} caught {caught} area {area} warm {}", warm_up(&v));
    println!("{counted:?}");
}
