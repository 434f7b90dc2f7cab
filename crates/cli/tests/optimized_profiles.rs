//! Profiles of optimized binaries: samples of Rivet's output mapped back to its input
//! (`rivet aggregate --original`), and Rivet's output refused as an input to rewrite again.
//!
//! - Same samples, two addresses: every instruction of the input gets a sample count; the
//!   same counts are printed as `perf script` text once at the input's addresses and once at
//!   the output's (through the output's own address map), and the two aggregations must give
//!   the same profile, with every sample mapped.
//! - A real run: `perf record -e cpu-clock:u` of the optimized binary maps back at least 99%
//!   and the profile optimizes the input without `--force`.
//! - Refusals and mismatches: one error line each.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use common::{assert_one_error_line, instrument_source, perf_record, rivet, s, scratch};
use rivet_discover::{DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_emit::code::AddressMap;

fn build_counts(binary: &Path, opt: &str) {
    let status = Command::new("gcc")
        .args([opt, "-g", "-Wl,--emit-relocs"])
        .arg(instrument_source("counts.c"))
        .arg("-o")
        .arg(binary)
        .arg("-lpthread")
        .status()
        .expect("gcc is required");
    assert!(status.success());
}

/// The input built, profiled and optimized: (input, output, profile of the input).
fn optimized(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let binary = dir.join("prog");
    build_counts(&binary, "-O2");
    let perf_data = dir.join("input.data");
    perf_record(&perf_data, 5000, |perf| {
        perf.arg(&binary).args(["switch", "30000000"]);
    });
    let profile = dir.join("input.prof");
    let r = rivet(&["aggregate", s(&perf_data), s(&binary), "-o", s(&profile)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let fast = dir.join("prog.fast");
    let r = rivet(&[
        "optimize",
        s(&binary),
        "--profile",
        s(&profile),
        "-o",
        s(&fast),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    (binary, fast)
}

/// `perf script` mmap lines mapping `elf`'s PT_LOADs (as the file `path`) at `base`.
fn mmap_lines(elf: &ElfFile<'_>, path: &Path, base: u64) -> String {
    let mut text = String::new();
    for seg in elf.segments().iter().filter(|s| s.is_load()) {
        let start = seg.vaddr.get() & !0xfff;
        let pgoff = seg.offset.0 & !0xfff;
        let len = (seg.vaddr.get() + seg.filesz - start + 0xfff) & !0xfff;
        writeln!(
            text,
            "  4242 PERF_RECORD_MMAP2 4242/4242: [{:#x}({len:#x}) @ {pgoff:#x} fe:01 12 0]: r-xp {}",
            base + start,
            path.display()
        )
        .unwrap();
    }
    text
}

fn aggregate_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["aggregate", "--json"];
    all.extend_from_slice(args);
    let r = rivet(&all);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

#[test]
fn the_same_samples_at_output_addresses_give_the_input_profile() {
    let dir = scratch("optimized_profiles", "same_samples");
    let (binary, fast) = optimized(&dir);
    let input_bytes = std::fs::read(&binary).unwrap();
    let output_bytes = std::fs::read(&fast).unwrap();
    let input = ElfFile::parse(&input_bytes).unwrap();
    let output = ElfFile::parse(&output_bytes).unwrap();
    let program = discover(&input, &DiscoverOptions::default()).unwrap();
    let bat = output
        .section_by_name(rivet_emit::bat::SECTION)
        .expect("the output has a block address table");
    let pairs = rivet_emit::bat::decode(bat.data).unwrap();
    let map = AddressMap::from_blocks(&program, &pairs, &output).unwrap();
    let (input_path, output_path) = (
        std::fs::canonicalize(&binary).unwrap(),
        std::fs::canonicalize(&fast).unwrap(),
    );
    let base = 0x5555_5555_4000u64;
    let mut at_input = mmap_lines(&input, &input_path, base);
    let mut at_output = mmap_lines(&output, &output_path, base);
    let mut moved = 0u64;
    let mut total = 0u64;
    for f in &program.functions {
        for (i, inst) in f.insts.iter().enumerate() {
            // Padding the rewrite leaves out has no bytes of its own in the output.
            if f.is_dropped_padding(i as u32) {
                continue;
            }
            let old = inst.addr();
            let new = map.translate(&program, old).expect("every kept instruction maps");
            let samples = 1 + (old.get() % 3);
            for _ in 0..samples {
                writeln!(at_input, "  4242 cpu-clock:u: {:x}", base + old.get()).unwrap();
                writeln!(at_output, "  4242 cpu-clock:u: {:x}", base + new.get()).unwrap();
            }
            total += samples;
            moved += u64::from(new != old) * samples;
        }
    }
    assert!(
        moved * 2 > total,
        "too little moved code to judge: {moved} of {total} samples"
    );
    let (script_in, script_out) = (dir.join("input.txt"), dir.join("output.txt"));
    std::fs::write(&script_in, at_input).unwrap();
    std::fs::write(&script_out, at_output).unwrap();
    let (prof_in, prof_out) = (dir.join("from-input.prof"), dir.join("from-output.prof"));
    aggregate_json(&[
        "--perf-script",
        s(&script_in),
        s(&binary),
        "-o",
        s(&prof_in),
    ]);
    let summary = aggregate_json(&[
        "--perf-script",
        "--original",
        s(&binary),
        s(&script_out),
        s(&fast),
        "-o",
        s(&prof_out),
    ]);
    let mapped = &summary["mapped_back"];
    assert_eq!(mapped["samples"], total);
    assert_eq!(mapped["samples_mapped"], total, "{summary}");
    let read = |p: &Path| rivet_profile::native::parse(&std::fs::read_to_string(p).unwrap()).unwrap();
    let (a, b) = (read(&prof_in), read(&prof_out));
    assert_eq!(a.build_id, b.build_id, "the profile is of the input");
    assert_eq!(a.samples, b.samples, "the same samples, by function and offset");
}

#[test]
fn samples_of_a_real_run_of_the_output_map_back_and_optimize_the_input() {
    let dir = scratch("optimized_profiles", "real_run");
    let (binary, fast) = optimized(&dir);
    let perf_data = dir.join("output.data");
    perf_record(&perf_data, 5000, |perf| {
        perf.arg(&fast).args(["switch", "30000000"]);
    });
    let profile = dir.join("output.prof");
    let summary = aggregate_json(&[
        "--original",
        s(&binary),
        s(&perf_data),
        s(&fast),
        "-o",
        s(&profile),
    ]);
    let mapped = &summary["mapped_back"];
    let (n, m) = (
        mapped["samples"].as_u64().unwrap(),
        mapped["samples_mapped"].as_u64().unwrap(),
    );
    assert!(n > 100, "{n} samples of the output");
    assert!(m * 100 >= n * 99, "{m} of {n} samples mapped back");
    // The profile is the input's: optimize takes it without --force.
    let again = dir.join("prog.fast2");
    let r = rivet(&["optimize", s(&binary), "--profile", s(&profile), "-o", s(&again)]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let run = |b: &Path| {
        Command::new(b)
            .args(["switch", "30000"])
            .output()
            .unwrap()
            .stdout
    };
    assert_eq!(run(&binary), run(&again), "same output before and after");
}

#[test]
fn rivet_output_is_refused_as_input_and_mismatches_get_one_line() {
    let dir = scratch("optimized_profiles", "refusals");
    let (binary, fast) = optimized(&dir);
    let profile = dir.join("input.prof");
    let out = dir.join("twice");
    for args in [
        vec!["optimize", s(&fast), "--profile", s(&profile), "-o", s(&out)],
        vec!["rewrite", s(&fast), "-o", s(&out)],
        vec!["instrument", s(&fast), "-o", s(&out)],
    ] {
        let r = rivet(&args);
        assert_one_error_line(&r, "is Rivet's output");
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("rivet aggregate --original"),
            "{}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(!out.exists());
    }
    let perf_data = dir.join("input.data");
    // Samples of the output aggregated for the output itself: of no use, refused.
    let r = rivet(&["aggregate", s(&perf_data), s(&fast), "-o", s(&out)]);
    assert_one_error_line(&r, "is Rivet's output");
    // --original with a binary that is not Rivet's output.
    let r = rivet(&[
        "aggregate",
        "--original",
        s(&binary),
        s(&perf_data),
        s(&binary),
        "-o",
        s(&out),
    ]);
    assert_one_error_line(&r, "is not Rivet's output");
    // --original naming another binary than the one the output was made from.
    let other = dir.join("other");
    build_counts(&other, "-O1");
    let script = dir.join("empty.txt");
    let fast_path = std::fs::canonicalize(&fast).unwrap();
    std::fs::write(
        &script,
        format!(
            "  4242 PERF_RECORD_MMAP2 4242/4242: [0x1000(0x100000) @ 0 fe:01 12 0]: r-xp {}\n  4242 cpu-clock:u: 1100\n",
            fast_path.display()
        ),
    )
    .unwrap();
    let r = rivet(&[
        "aggregate",
        "--perf-script",
        "--original",
        s(&other),
        s(&script),
        s(&fast),
        "-o",
        s(&out),
    ]);
    assert_one_error_line(&r, "was not made from");
    assert!(!out.exists());
}
