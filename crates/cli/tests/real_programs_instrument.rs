//! Real programs, instrumented: Lua 5.4 and SQLite 3 behave exactly as the originals on
//! their scripts, workloads and SQLite's own test suite while counting, and the counts they
//! leave convert to a profile of the original binary. Then the sampling check: `perf record
//! -e cpu-clock:u` on the Lua benchmarks, aggregated by Rivet, ranks the hottest functions the
//! way instrumentation does.

mod common;

use common::{perf_record, rivet, s, scratch};
use common::{real_program, repo_root};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rivet_profile::counters::CounterFile;

fn root() -> PathBuf {
    repo_root()
}

fn build(name: &str) -> &'static Path {
    real_program(name)
}

/// Instruments `input` into `dir`; the output and its counter file.
fn instrument(input: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let out = dir.join(format!(
        "{}.inst",
        input.file_name().unwrap().to_string_lossy()
    ));
    let counts = dir.join(format!(
        "{}.counts",
        input.file_name().unwrap().to_string_lossy()
    ));
    let _ = std::fs::remove_file(&counts);
    let r = rivet(&[
        "instrument",
        s(input),
        "-o",
        s(&out),
        "--profile",
        s(&counts),
    ]);
    assert!(
        r.status.success(),
        "instrument {}: {}",
        input.display(),
        String::from_utf8_lossy(&r.stderr)
    );
    (out, counts)
}

/// The profile in a counter file: some functions counted, the input's build-id.
fn check_counts(counts: &Path, input: &Path) {
    let data = std::fs::read(counts).unwrap_or_else(|e| panic!("{}: {e}", counts.display()));
    let file = CounterFile::parse(&data).unwrap();
    let profile = file.to_profile();
    let elf_data = std::fs::read(input).unwrap();
    let elf = rivet_elf::ElfFile::parse(&elf_data).unwrap();
    let id: String = elf
        .build_id()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(profile.build_id.as_deref(), Some(id.as_str()));
    let counted: std::collections::BTreeSet<&str> = profile
        .branches
        .keys()
        .map(|(f, _)| f.name.as_str())
        .collect();
    assert!(counted.len() > 100, "{} functions counted", counted.len());
}

use common::check_script as check;

#[test]
fn lua_instrumented_runs_every_script_identically() {
    for name in ["lua-gcc", "lua-clang"] {
        let dir = scratch("real-instrument", name);
        let original = build(name);
        let (inst, counts) = instrument(original, &dir);
        check("check-lua.sh", &[&inst, original], &[]);
        check_counts(&counts, original);
    }
}

#[test]
fn sqlite_instrumented_gives_identical_results() {
    let dir = scratch("real-instrument", "sqlite3-gcc");
    let original = build("sqlite3-gcc");
    let (inst, counts) = instrument(original, &dir);
    check(
        "check-sqlite.sh",
        &[&inst],
        &["--reference", original.to_str().unwrap()],
    );
    check_counts(&counts, original);
    // SQLite's own test suite, 60 files, two at a time counting into one file.
    let dir = scratch("real-instrument", "testfixture-gcc");
    let original = build("testfixture-gcc");
    let (inst, counts) = instrument(original, &dir);
    check(
        "check-sqlite.sh",
        &[&inst],
        &["smoke", "--reference", original.to_str().unwrap()],
    );
    check_counts(&counts, original);
}

/// The Lua benchmark workload used to compare sampling with instrumentation.
const LUA_WORKLOAD: [(&str, &str); 5] = [
    ("binarytrees.lua", "13"),
    ("fannkuch.lua", "9"),
    ("nbody.lua", "100000"),
    ("spectralnorm.lua", "250"),
    ("strings.lua", "200000"),
];

fn lua_workload_script(lua: &Path) -> String {
    LUA_WORKLOAD
        .iter()
        .map(|(script, size)| {
            format!(
                "{} {} {size} >/dev/null\n",
                lua.display(),
                root().join("bench/lua").join(script).display()
            )
        })
        .collect()
}

/// Per function: executed instructions; per (function, block, successor): edge count.
struct Shape {
    hot: Vec<(String, u64)>,
    edges: HashMap<(u32, u32, usize), u64>,
}

fn shape(binary: &Path, profile_path: &Path) -> Shape {
    let data = std::fs::read(binary).unwrap();
    let elf = rivet_elf::ElfFile::parse(&data).unwrap();
    let program =
        rivet_discover::discover(&elf, &rivet_discover::DiscoverOptions::default()).unwrap();
    let names = rivet_passes::names::profile_names(&program);
    let text = std::fs::read(profile_path).unwrap();
    let profile = if rivet_profile::counters::is_counter_file(&text) {
        CounterFile::parse(&text).unwrap().to_profile()
    } else {
        rivet_profile::native::parse(std::str::from_utf8(&text).unwrap()).unwrap()
    };
    let attached = rivet_passes::attach::attach(&program, &names, &profile);
    let mut hot = Vec::new();
    let mut edges = HashMap::new();
    for (f, counts) in program.functions.iter().zip(&attached.functions) {
        let Some(c) = counts else { continue };
        hot.push((f.qualified_name(), c.executed_instructions(f)));
        for (b, succs) in c.edges.iter().enumerate() {
            for (k, n) in succs.iter().enumerate() {
                if *n > 0 {
                    edges.insert((f.id.0, b as u32, k), *n);
                }
            }
        }
    }
    hot.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Shape { hot, edges }
}

/// Sum over edges of the smaller of the two normalized counts: 1 for identical shapes.
fn weighted_overlap(
    a: &HashMap<(u32, u32, usize), u64>,
    b: &HashMap<(u32, u32, usize), u64>,
) -> f64 {
    let ta: u64 = a.values().sum();
    let tb: u64 = b.values().sum();
    a.iter()
        .filter_map(|(k, &x)| {
            b.get(k)
                .map(|&y| (x as f64 / ta as f64).min(y as f64 / tb as f64))
        })
        .sum()
}

/// `perf record -e cpu-clock:u` on the Lua benchmarks, aggregated and attached (flow
/// inference), ranks the hottest functions as instrumentation of the same workload does. The
/// two measure different things: instrumentation counts executed instructions, samples count
/// time, and where instructions are slow (the garbage collector's sweeps wait on memory,
/// `sqrtsd`, the first instruction after a mispredicted indirect call) a function ranks higher
/// in samples. Attachment divides a block's samples by a static latency cost (so `sqrtsd` no
/// longer lifts `math_sqrt`); the garbage collector's cache misses remain. Measured here over
/// ten runs: 14 to 17 of the top 20 in common, usually 16-17 (14-16 with the plain mean
/// samples per instruction), weighted edge overlap 0.71-0.77. The test holds the line at 13 (a
/// broken mapping or inference gives far less) and prints both figures.
#[test]
fn lua_samples_rank_hot_functions_like_instrumentation() {
    let dir = scratch("real-instrument", "sampling");
    let original = build("lua-gcc");
    let (inst, counts) = instrument(original, &dir);
    let run = Command::new("bash")
        .arg("-c")
        .arg(lua_workload_script(&inst))
        .status()
        .unwrap();
    assert!(run.success());
    let perf_data = dir.join("perf.data");
    perf_record(&perf_data, 20000, |perf| {
        perf.args(["bash", "-c"]).arg(lua_workload_script(original));
    });
    let sampled = dir.join("lua.samples");
    let r = rivet(&["aggregate", s(&perf_data), s(original), "-o", s(&sampled)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

    let exact = shape(original, &counts);
    let estimated = shape(original, &sampled);
    let top = |s: &Shape| -> Vec<String> { s.hot.iter().take(20).map(|h| h.0.clone()).collect() };
    let (a, b) = (top(&exact), top(&estimated));
    let common = a.iter().filter(|n| b.contains(n)).count();
    let overlap = weighted_overlap(&exact.edges, &estimated.edges);
    println!("top-20 in common: {common}; weighted edge overlap: {overlap:.3}");
    println!("instrumentation: {a:?}");
    println!("samples:         {b:?}");
    assert!(
        common >= 13,
        "only {common} of the top 20 in common:\n{a:?}\n{b:?}"
    );
    assert!(overlap > 0.3, "weighted edge overlap {overlap:.3}");
}
