//! `perf` reads the rewritten line tables: samples taken in moved code are attributed to the
//! source lines of the code that was there in the input.
//!
//! Lua (a real program, built by `scripts/build-real-programs.sh`) is rewritten with a
//! shuffled layout and profiled with `perf record -e cpu-clock:u` on a benchmark script. For
//! every sample in moved code, `perf script`'s source line must be the input's line for the
//! instruction the sample maps back to (through the output's `.rivet.bat` and the input's
//! line table). The same comparison on the input itself, sample address against its own line
//! table, is the control: it shows the comparison is sound before it judges the output.

mod common;

use common::scratch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rivet_discover::{DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_elf::lines::LineTable;
use rivet_ir::Program;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn lua() -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("scripts/build-real-programs.sh"))
        .output()
        .expect("running scripts/build-real-programs.sh");
    assert!(
        out.status.success(),
        "scripts/build-real-programs.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let path = stdout
        .lines()
        .find_map(|l| l.strip_prefix("lua-gcc "))
        .expect("build-real-programs.sh did not build lua-gcc");
    PathBuf::from(path)
}

/// One sample in `binary`: its address in the binary and the source line perf gave it.
struct Sample {
    vaddr: u64,
    srcline: String,
}

/// Runs `binary` on a Lua benchmark under `perf record`, returns its samples in `binary`.
fn profile(binary: &Path, dir: &Path) -> Vec<Sample> {
    let data = dir.join(format!(
        "{}.perf.data",
        binary.file_name().unwrap().to_string_lossy()
    ));
    let script = root().join("bench/lua/fannkuch.lua");
    let r = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock:u", "-F", "2000", "-o"])
        .arg(&data)
        .arg("--")
        .arg(binary)
        .arg(&script)
        .output()
        .expect("perf is required (apt-get install linux-perf)");
    assert!(
        r.status.success(),
        "perf record {}: {}",
        binary.display(),
        String::from_utf8_lossy(&r.stderr)
    );
    let r = Command::new("perf")
        .args(["script", "-F", "ip,dso,srcline", "--show-mmap-events", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        r.status.success(),
        "perf script: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    let text = String::from_utf8_lossy(&r.stdout);
    let elf_data = std::fs::read(binary).unwrap();
    let elf = ElfFile::parse(&elf_data).unwrap();
    let name = binary.canonicalize().unwrap();
    let name = name.to_str().unwrap();
    // Executable mappings of the binary: (start, length, file offset).
    let mut maps = Vec::new();
    let mut samples = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.contains("PERF_RECORD_MMAP") {
            if line.ends_with(&format!("r-xp {name}"))
                && let Some(m) = parse_mmap(line)
            {
                maps.push(m);
            }
            continue;
        }
        let Some((ip, dso)) = line.trim().split_once(' ') else {
            continue;
        };
        if dso.trim_matches(|c| c == '(' || c == ')') != name {
            continue;
        }
        let Some(srcline) = lines.next_if(|l| l.starts_with("  ") && !l.trim().is_empty()) else {
            continue;
        };
        let ip = u64::from_str_radix(ip, 16).unwrap();
        let Some(&(start, _, pgoff)) = maps.iter().find(|m| m.0 <= ip && ip < m.0 + m.1) else {
            continue;
        };
        let offset = ip - start + pgoff;
        let Some(segment) = elf
            .segments()
            .iter()
            .find(|s| s.is_load() && s.offset.0 <= offset && offset < s.offset.0 + s.filesz)
        else {
            continue;
        };
        samples.push(Sample {
            vaddr: segment.vaddr.get() + (offset - segment.offset.0),
            srcline: srcline.trim().to_string(),
        });
    }
    assert!(
        !maps.is_empty(),
        "no executable mapping of {name} in perf's events"
    );
    samples
}

/// `[0xSTART(0xLEN) @ 0xPGOFF ...]` of a PERF_RECORD_MMAP2 line.
fn parse_mmap(line: &str) -> Option<(u64, u64, u64)> {
    let inner = line.split_once('[')?.1;
    let (start, rest) = inner.split_once('(')?;
    let (len, rest) = rest.split_once(')')?;
    let pgoff = rest
        .trim_start()
        .strip_prefix('@')?
        .split_whitespace()
        .next()?;
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    Some((hex(start)?, hex(len)?, hex(pgoff)?))
}

/// "file.c:LINE" as perf prints it (the file's base name) for the input's row at `addr`.
fn expected_srcline(table: &LineTable, addr: u64) -> Option<String> {
    let pos = table.at(addr)?;
    let file = table.file_name(pos.file);
    let base = file.rsplit('/').next().unwrap_or(file);
    Some(format!("{base}:{}", pos.line))
}

/// The input address of the instruction the output address `new` holds, when it is a copy
/// of one (not a re-encoded or added branch): blocks are copied whole, so an instruction
/// keeps its offset from its block's start.
fn original_address(program: &Program, blocks_by_new: &[(u64, u64)], new: u64) -> Option<u64> {
    let k = blocks_by_new.partition_point(|b| b.0 <= new);
    let (block_new, block_old) = blocks_by_new[k.checked_sub(1)?];
    let old = block_old + (new - block_new);
    let f = program.function_containing(rivet_elf::Vaddr(block_old))?;
    let block = &f.blocks[f.block_at(rivet_elf::Vaddr(block_old))?.0 as usize];
    let insts = &f.insts[block.insts.start as usize..block.insts.end as usize];
    let inst = insts.iter().find(|i| i.addr().get() == old)?;
    let copied = matches!(
        inst.flow(),
        rivet_arch::Flow::Next | rivet_arch::Flow::Call { .. } | rivet_arch::Flow::IndirectCall
    );
    copied.then_some(old)
}

#[test]
fn perf_attributes_samples_in_moved_code_to_the_original_source_lines() {
    let input = lua();
    let dir = scratch("perf-srcline", "lua");
    let output = dir.join("lua.shuffled");
    let r = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(["rewrite", "--layout", "shuffle", "--seed", "3", "-o"])
        .arg(&output)
        .arg(&input)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

    let input_data = std::fs::read(&input).unwrap();
    let input_elf = ElfFile::parse(&input_data).unwrap();
    let table = LineTable::read(&input_elf)
        .unwrap()
        .expect("lua is built with -g");

    // Control: perf on the input agrees with the input's line table.
    let samples = profile(&input, &dir);
    assert!(
        samples.len() > 200,
        "too few samples in the input ({})",
        samples.len()
    );
    let disagree: Vec<String> = samples
        .iter()
        .filter_map(|s| {
            let want = expected_srcline(&table, s.vaddr)?;
            (want != s.srcline).then(|| format!("{:#x}: perf {} table {want}", s.vaddr, s.srcline))
        })
        .collect();
    assert!(
        disagree.is_empty(),
        "perf and the line table disagree on the input itself:\n{}",
        disagree.join("\n")
    );

    // The output: each sample in a copied instruction maps back to the input's line.
    let program = discover(&input_elf, &DiscoverOptions::default()).unwrap();
    let output_data = std::fs::read(&output).unwrap();
    let output_elf = ElfFile::parse(&output_data).unwrap();
    let bat = output_elf
        .section_by_name(rivet_emit::bat::SECTION)
        .expect("the output has an address translation table");
    let mut blocks_by_new: Vec<(u64, u64)> = rivet_emit::bat::decode(bat.data)
        .unwrap()
        .into_iter()
        .map(|(old, new)| (new.get(), old.get()))
        .collect();
    blocks_by_new.sort_unstable();

    let samples = profile(&output, &dir);
    let mut checked = 0;
    let mut lines_seen: HashMap<String, usize> = HashMap::new();
    let mut wrong = Vec::new();
    for s in &samples {
        let Some(old) = original_address(&program, &blocks_by_new, s.vaddr) else {
            continue;
        };
        let Some(want) = expected_srcline(&table, old) else {
            continue;
        };
        checked += 1;
        *lines_seen.entry(want.clone()).or_default() += 1;
        if s.srcline != want {
            wrong.push(format!(
                "{:#x} (input {old:#x}): perf says {}, the input's line is {want}",
                s.vaddr, s.srcline
            ));
        }
    }
    assert!(
        checked > 200 && lines_seen.len() > 20,
        "too few samples in moved code to judge ({checked} samples on {} lines of {})",
        lines_seen.len(),
        samples.len()
    );
    eprintln!(
        "{checked} of {} samples in moved code checked, on {} source lines",
        samples.len(),
        lines_seen.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {checked} samples in moved code attributed to the wrong line:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
