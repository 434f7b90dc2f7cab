//! The two debug-info writers agree.
//!
//! `--debug-writer stream` (the default) copies DIEs as bytes and re-encodes only what names
//! code; `--debug-writer convert` decodes every unit into gimli's object model and encodes
//! it again. They share the address translation and the line-row planning, and differ in
//! everything else: abbreviations, DIE offsets and references, forms, list encodings, line
//! program encodings, file tables. Each output is read back with gimli and rendered in a
//! form that is independent of those encodings (references as DIE numbers, addresses
//! resolved, lists expanded, file indices as paths, line rows as registers); the renderings
//! must be equal, and the streaming writer must have done the work (no fallback).
//! The inputs cover gcc and clang, DWARF 5 and 4, C and C++ (exceptions, templates), PIE
//! and not, shuffled layouts that split and reorder functions, and Lua and SQLite.

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{real_program, repo_root, rewrite_shuffled, scratch};
use gimli::{AttributeValue, EndianSlice, LittleEndian, constants};
use rivet_elf::ElfFile;

type R<'a> = EndianSlice<'a, LittleEndian>;

/// Rewrites `input` with both writers (same layout) and compares their debug info.
fn check(input: &Path, dir: &Path, seed: u64) {
    let name = input.file_name().unwrap().to_string_lossy().to_string();
    let mut dumps = Vec::new();
    for writer in ["stream", "convert"] {
        let out = dir.join(format!("{name}.{seed}.{writer}"));
        let run = rewrite_shuffled(input, &out, seed, &["--debug-writer", writer, "--json"]);
        assert!(
            run.status.success(),
            "{name} seed {seed} {writer}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let summary: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        assert_eq!(summary["debug_writer"], writer, "{name}: {summary}");
        assert!(
            summary["debug_fallback"].is_null(),
            "{name}: the streaming writer gave way: {}",
            summary["debug_fallback"]
        );
        assert!(summary["debug_units"].as_u64().unwrap() > 0, "{name}");
        let bytes = std::fs::read(&out).unwrap();
        dumps.push(render(&bytes));
    }
    let (stream, convert) = (&dumps[0], &dumps[1]);
    if stream != convert {
        let (a, b): (Vec<&str>, Vec<&str>) = (stream.lines().collect(), convert.lines().collect());
        let k = a
            .iter()
            .zip(&b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len()));
        let context = |v: &[&str]| v[k.saturating_sub(8)..(k + 4).min(v.len())].join("\n");
        panic!(
            "{name} seed {seed}: the writers disagree at line {k} of {}/{}\n--- stream:\n{}\n--- convert:\n{}",
            a.len(),
            b.len(),
            context(&a),
            context(&b)
        );
    }
    // Not vacuous: the rendering has DIEs, line rows and moved code.
    assert!(stream.contains("DW_TAG_subprogram"), "{name}");
    assert!(stream.contains("row "), "{name}");
}

/// The debug info of an ELF file, rendered independently of its encoding.
fn render(bytes: &[u8]) -> String {
    let elf = ElfFile::parse(bytes).unwrap();
    let dwarf = elf.dwarf().unwrap();
    let mut out = String::new();

    // Every DIE's number, by section offset, in `die_order`.
    let mut numbers: HashMap<u64, usize> = HashMap::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next().unwrap() {
        let unit_start = header.offset().0 as u64;
        let unit = dwarf.unit(header).unwrap();
        for (offset, _) in die_order(&unit) {
            numbers.insert(unit_start + offset.0 as u64, numbers.len());
        }
    }

    let mut units = dwarf.units();
    while let Some(header) = units.next().unwrap() {
        let unit_start = header.offset().0 as u64;
        writeln!(out, "unit v{} {:?}", header.version(), header.type_()).unwrap();
        let unit = dwarf.unit(header).unwrap();
        let order = die_order(&unit);
        let unit = unit.unit_ref(&dwarf);
        let files = file_names(unit);
        for (offset, depth) in order {
            let entry = unit.entry(offset).unwrap();
            let entry = &entry;
            writeln!(out, "{:indent$}{}", "", entry.tag(), indent = depth).unwrap();
            let has = |n| entry.attr_value(n).is_some();
            let ranged = has(constants::DW_AT_ranges) || has(constants::DW_AT_high_pc);
            if ranged {
                let mut ranges = unit.die_ranges(entry).unwrap();
                let mut list = Vec::new();
                while let Some(r) = ranges.next().unwrap() {
                    list.push(format!("{:x}-{:x}", r.begin, r.end));
                }
                writeln!(out, "  ranges [{}]", list.join(" ")).unwrap();
            }
            for attr in entry.attrs() {
                let name = attr.name();
                let skip = matches!(
                    name,
                    constants::DW_AT_sibling
                        | constants::DW_AT_stmt_list
                        | constants::DW_AT_addr_base
                        | constants::DW_AT_str_offsets_base
                        | constants::DW_AT_loclists_base
                        | constants::DW_AT_rnglists_base
                        | constants::DW_AT_ranges
                        | constants::DW_AT_high_pc
                ) || (ranged && name == constants::DW_AT_low_pc);
                if skip {
                    continue;
                }
                let value = value(unit, unit_start, &numbers, &files, name, attr.value());
                writeln!(out, "  {name} {value}").unwrap();
            }
        }
        render_lines(unit, &files, &mut out);
    }
    out
}

/// A unit's DIEs (offset, depth) in tree order, except that base types directly under the
/// root come first: the order of the root's children means nothing, and gimli's writer
/// moves base types to the front (typed stack operations then name them with short
/// offsets).
fn die_order(unit: &gimli::Unit<R<'_>>) -> Vec<(gimli::UnitOffset, usize)> {
    let mut all = Vec::new();
    let mut entries = unit.entries();
    while let Some(entry) = entries.next_dfs().unwrap() {
        all.push((entry.offset(), entry.depth() as usize));
    }
    // Subtrees of the root's children, base types first, each in tree order.
    let mut subtrees: Vec<Vec<(gimli::UnitOffset, usize)>> = Vec::new();
    let mut order = Vec::new();
    for (offset, depth) in all {
        match depth {
            0 => order.push((offset, 0)),
            1 => subtrees.push(vec![(offset, 1)]),
            _ => subtrees.last_mut().unwrap().push((offset, depth)),
        }
    }
    let is_base = |t: &Vec<(gimli::UnitOffset, usize)>| {
        unit.entry(t[0].0).unwrap().tag() == constants::DW_TAG_base_type
    };
    let (base, other): (Vec<_>, Vec<_>) = subtrees.into_iter().partition(is_base);
    order.extend(base.into_iter().chain(other).flatten());
    order
}

/// A unit's file names by index, as "directory/name".
fn file_names<'a>(unit: gimli::UnitRef<'_, R<'a>>) -> Vec<String> {
    let Some(program) = &unit.line_program else {
        return Vec::new();
    };
    let header = program.header();
    let string = |v: AttributeValue<R<'a>>| {
        unit.attr_string(v)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".into())
    };
    let mut names = Vec::new();
    // DWARF 5 numbers files from 0, earlier versions from 1; index 0 of those is no file.
    let first = if header.version() >= 5 { 0 } else { 1 };
    if first == 1 {
        names.push(String::new());
    }
    for file in header.file_names() {
        let dir = header
            .directory(file.directory_index())
            .map(&string)
            .unwrap_or_default();
        names.push(format!("{dir}/{}", string(file.path_name())));
    }
    names
}

fn value<'a>(
    unit: gimli::UnitRef<'_, R<'a>>,
    unit_start: u64,
    numbers: &HashMap<u64, usize>,
    files: &[String],
    name: constants::DwAt,
    v: AttributeValue<R<'a>>,
) -> String {
    let die = |offset: u64| match numbers.get(&offset) {
        Some(n) => format!("die#{n}"),
        None => format!("not-a-die@{offset:x}"),
    };
    match v {
        AttributeValue::Addr(_) | AttributeValue::DebugAddrIndex(_) => {
            format!("addr {:x}", unit.attr_address(v).unwrap().unwrap())
        }
        AttributeValue::UnitRef(o) => die(unit_start + o.0 as u64),
        AttributeValue::DebugInfoRef(o) => die(o.0 as u64),
        AttributeValue::FileIndex(i) => file(files, i),
        AttributeValue::Udata(i)
            if matches!(
                name,
                constants::DW_AT_decl_file | constants::DW_AT_call_file
            ) =>
        {
            file(files, i)
        }
        AttributeValue::Sdata(i)
            if matches!(
                name,
                constants::DW_AT_decl_file | constants::DW_AT_call_file
            ) =>
        {
            file(files, i as u64)
        }
        AttributeValue::Exprloc(e) => expression(unit, unit_start, numbers, e),
        v @ (AttributeValue::LocationListsRef(_) | AttributeValue::DebugLocListsIndex(_)) => {
            let mut iter = unit.attr_locations(v).unwrap().unwrap();
            let mut list = Vec::new();
            while let Some(l) = iter.next().unwrap() {
                list.push(format!(
                    "{:x}-{:x}: {}",
                    l.range.begin,
                    l.range.end,
                    expression(unit, unit_start, numbers, l.data)
                ));
            }
            format!("loclist [{}]", list.join("; "))
        }
        v => match unit.attr_string(v) {
            Ok(s) => format!("{:?}", s.to_string_lossy()),
            Err(_) => match v.udata_value() {
                // Constants: the form (data1, udata, implicit...) is an encoding choice.
                Some(n) if !matches!(v, AttributeValue::Sdata(_)) => format!("{n}"),
                _ => format!("{v:?}"),
            },
        },
    }
}

fn file(files: &[String], i: u64) -> String {
    files
        .get(i as usize)
        .cloned()
        .unwrap_or_else(|| format!("file#{i}?"))
}

/// An expression's operations, with DIE offsets as DIE numbers and addresses resolved.
fn expression<'a>(
    unit: gimli::UnitRef<'_, R<'a>>,
    unit_start: u64,
    numbers: &HashMap<u64, usize>,
    e: gimli::Expression<R<'a>>,
) -> String {
    use gimli::Operation as Op;
    let die = |offset: u64| numbers.get(&offset).map_or(usize::MAX, |n| *n);
    // Branch targets are byte offsets, which depend on operand encodings: name them by the
    // index of the operation they land on.
    let bytes = e.0.slice();
    let mut input = e.0;
    let mut parsed = Vec::new();
    while !input.is_empty() {
        let start = bytes.len() - input.len();
        let op = Op::parse(&mut input, unit.encoding()).unwrap();
        parsed.push((start, bytes.len() - input.len(), op));
    }
    let index_at = |end: usize, target: i16| {
        let to = end as i64 + i64::from(target);
        parsed
            .iter()
            .position(|p| p.0 as i64 == to)
            .map_or_else(|| format!("byte {to}"), |k| format!("op {k}"))
    };
    let mut out = Vec::new();
    for &(_, end, op) in &parsed {
        out.push(match op {
            Op::Bra { target } => format!("bra {}", index_at(end, target)),
            Op::Skip { target } => format!("skip {}", index_at(end, target)),
            Op::Call { offset } => match offset {
                gimli::DieReference::UnitRef(o) => {
                    format!("call die#{}", die(unit_start + o.0 as u64))
                }
                gimli::DieReference::DebugInfoRef(o) => format!("call die#{}", die(o.0 as u64)),
            },
            Op::ImplicitPointer { value, byte_offset } => {
                format!("implicit_pointer die#{} {byte_offset}", die(value.0 as u64))
            }
            Op::VariableValue { offset } => format!("variable_value die#{}", die(offset.0 as u64)),
            Op::ParameterRef { offset } => {
                format!("parameter_ref die#{}", die(unit_start + offset.0 as u64))
            }
            Op::Convert { base_type } => {
                format!("convert die#{}", die(unit_start + base_type.0 as u64))
            }
            Op::Reinterpret { base_type } => {
                format!("reinterpret die#{}", die(unit_start + base_type.0 as u64))
            }
            Op::Deref {
                base_type,
                size,
                space,
            } => format!(
                "deref die#{} {size} {space}",
                die(unit_start + base_type.0 as u64)
            ),
            Op::RegisterOffset {
                register,
                offset,
                base_type,
            } => format!(
                "breg {} {offset} die#{}",
                register.0,
                die(unit_start + base_type.0 as u64)
            ),
            Op::TypedLiteral { base_type, value } => format!(
                "const_type die#{} {:?}",
                die(unit_start + base_type.0 as u64),
                value.slice()
            ),
            Op::EntryValue { expression: inner } => format!(
                "entry_value [{}]",
                expression(unit, unit_start, numbers, gimli::Expression(inner))
            ),
            Op::AddressIndex { index } => format!("addr {:x}", unit.address(index).unwrap()),
            Op::ConstantIndex { index } => format!("const {:x}", unit.address(index).unwrap()),
            Op::Address { address } => format!("addr {address:x}"),
            op => format!("{op:?}"),
        });
    }
    out.join(", ")
}

/// Every row of a unit's line program, as the state machine's registers.
fn render_lines(unit: gimli::UnitRef<'_, R<'_>>, files: &[String], out: &mut String) {
    let Some(program) = unit.line_program.clone() else {
        return;
    };
    let mut rows = program.rows();
    while let Some((_, row)) = rows.next_row().unwrap() {
        let column = match row.column() {
            gimli::ColumnType::LeftEdge => 0,
            gimli::ColumnType::Column(c) => c.get(),
        };
        writeln!(
            out,
            "row {:x} {} {}:{} stmt={} bb={} end={} pe={} eb={} d={} isa={}",
            row.address(),
            file(files, row.file_index()),
            row.line().map_or(0, |l| l.get()),
            column,
            row.is_stmt(),
            row.basic_block(),
            row.end_sequence(),
            row.prologue_end(),
            row.epilogue_begin(),
            row.discriminator(),
            row.isa()
        )
        .unwrap();
    }
}

/// Builds a corpus source with `compiler` and `flags` into `dir`.
fn build(dir: &Path, compiler: &str, source: &str, flags: &[&str], name: &str) -> PathBuf {
    let out = dir.join(name);
    let src = repo_root().join("tests/corpus/src").join(source);
    let status = Command::new(compiler)
        .args(["-O2", "-Wl,--emit-relocs", "-pthread"])
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("{compiler} is required (scripts/test.sh installs it): {e}"));
    assert!(status.success(), "{compiler} {flags:?} {source}");
    out
}

#[test]
fn writers_agree_on_small_programs() {
    let dir = scratch("debug_writers", "small");
    let cases: &[(&str, &str, &[&str])] = &[
        ("gcc", "cold_split.c", &["-g"]),
        ("gcc", "switch_dense.c", &["-g", "-O3"]),
        (
            "gcc",
            "tailcalls_noreturn.c",
            &["-g", "-no-pie", "-fno-pie"],
        ),
        ("g++", "exceptions.cpp", &["-g"]),
        ("g++", "virtual_calls.cpp", &["-g", "-gdwarf-4"]),
        ("gcc", "computed_goto.c", &["-gdwarf-4"]),
        ("clang-19", "cold_split.c", &["-g"]),
        ("clang-19", "switch_sparse_nested.c", &["-g", "-O3"]),
        ("clang++-19", "exceptions.cpp", &["-g"]),
        ("clang++-19", "ctors_dtors.cpp", &["-gdwarf-4"]),
        (
            "clang-19",
            "varargs.c",
            &["-g", "-gdwarf-4", "-no-pie", "-fno-pie"],
        ),
    ];
    for (k, (compiler, source, flags)) in cases.iter().enumerate() {
        let name = format!("{k}-{compiler}-{}", source.replace('.', "_"));
        let binary = build(&dir, compiler, source, flags, &name);
        for seed in [1, 2] {
            check(&binary, &dir, seed);
        }
    }
}

/// DWARF 5 type units (gcc -fdebug-types-section) stay type units, unchanged: they name no
/// code. (The converter turns them into compilation units, so they are checked against the
/// input instead.)
#[test]
fn stream_writer_keeps_type_units() {
    let dir = scratch("debug_writers", "type_units");
    let binary = build(
        &dir,
        "gcc",
        "recursion.c",
        &["-g", "-fdebug-types-section"],
        "tu",
    );
    let out = dir.join("tu.stream");
    let run = rewrite_shuffled(&binary, &out, 1, &["--json"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["debug_writer"], "stream", "{summary}");
    assert!(summary["debug_fallback"].is_null(), "{summary}");
    let type_units = |bytes: &[u8]| -> Vec<String> {
        render(bytes)
            .split("unit v")
            .filter(|u| u.contains("Type {"))
            // Rows belong to the line program the type unit shares with the compilation
            // unit, which does name moved code.
            .map(|u| {
                u.lines()
                    .filter(|l| !l.starts_with("row "))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect()
    };
    let before = type_units(&std::fs::read(&binary).unwrap());
    let after = type_units(&std::fs::read(&out).unwrap());
    assert!(!before.is_empty(), "gcc wrote no type units");
    assert_eq!(before, after);
}

#[test]
fn writers_agree_on_lua_and_sqlite() {
    let dir = scratch("debug_writers", "real");
    for name in ["lua-gcc", "lua-clang", "sqlite3-gcc", "sqlite3-clang"] {
        check(real_program(name), &dir, 7);
    }
}

/// Damaged debug info never makes a rewrite panic or fail: the streaming writer gives way
/// to the converter, and DWARF neither can read is removed with a warning. Bytes of the
/// debug sections are overwritten at deterministic pseudo-random places (xorshift), a few at
/// a time, in gcc's and clang's DWARF 5 and DWARF 4.
#[test]
fn damaged_debug_info_is_handled_without_panics() {
    let dir = scratch("debug_writers", "damaged");
    let inputs = [
        build(&dir, "g++", "exceptions.cpp", &["-g"], "gcc5"),
        build(&dir, "clang-19", "cold_split.c", &["-g"], "clang5"),
        build(&dir, "clang-19", "recursion.c", &["-gdwarf-4"], "clang4"),
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut outcomes = HashMap::new();
    for input in &inputs {
        let bytes = std::fs::read(input).unwrap();
        let elf = ElfFile::parse(&bytes).unwrap();
        let sections: Vec<(usize, usize)> = elf
            .sections()
            .iter()
            .filter(|s| s.name.starts_with(".debug_") && !s.data.is_empty())
            .map(|s| {
                (
                    s.data.as_ptr() as usize - bytes.as_ptr() as usize,
                    s.data.len(),
                )
            })
            .collect();
        assert!(sections.len() >= 4, "{}: no debug info", input.display());
        for k in 0..100 {
            let mut damaged = bytes.clone();
            for _ in 0..1 + k % 4 {
                let (start, len) = sections[next() as usize % sections.len()];
                damaged[start + next() as usize % len] = next() as u8;
            }
            let path = dir.join(format!("damaged-{k}"));
            std::fs::write(&path, &damaged).unwrap();
            let out = dir.join(format!("damaged-{k}.out"));
            let run = rewrite_shuffled(&path, &out, k, &["--json"]);
            let stderr = String::from_utf8_lossy(&run.stderr);
            assert!(
                !stderr.contains("panicked"),
                "{} damaged ({k}): {stderr}",
                input.display()
            );
            assert_eq!(run.status.code(), Some(0), "{}: {stderr}", input.display());
            let summary: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
            let outcome = if summary["debug_units"].as_u64() == Some(0) {
                "removed"
            } else if summary["debug_fallback"].is_null() {
                "stream"
            } else {
                "converted"
            };
            *outcomes.entry(outcome).or_insert(0) += 1;
        }
    }
    eprintln!("damaged inputs: {outcomes:?}");
    // Most single-byte damage is in names, types or line numbers, which both writers carry.
    assert!(
        outcomes.get("stream").copied().unwrap_or(0) > 0,
        "{outcomes:?}"
    );
}
