//! Discovery on real programs nobody here wrote: Lua 5.4 and SQLite 3 built from Debian's
//! source packages with gcc and clang and `--emit-relocs` (scripts/build-real-programs.sh,
//! cached under ~/.cache/rivet/real). At least 99% of their functions and 99.5% of their code
//! bytes must be modelled exactly, and every skipped function must name its construct.

use std::path::{Path, PathBuf};
use std::process::Command;

use rivet_discover::{DiscoverOptions, discover};
use rivet_elf::ElfFile;
use rivet_ir::RelocationMode;

fn real_programs() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("scripts/build-real-programs.sh"))
        .output()
        .expect("running scripts/build-real-programs.sh");
    assert!(
        out.status.success(),
        "scripts/build-real-programs.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let programs: Vec<(String, PathBuf)> = stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        // The programs built with relocations (the script also builds test harnesses and
        // builds without relocations, for other tests).
        .filter(|(name, _)| ["lua-gcc", "lua-clang", "sqlite3-gcc", "sqlite3-clang"].contains(name))
        .map(|(name, path)| (name.to_string(), PathBuf::from(path.trim())))
        .collect();
    let names: Vec<&str> = programs.iter().map(|(n, _)| n.as_str()).collect();
    for expected in ["lua-gcc", "lua-clang", "sqlite3-gcc", "sqlite3-clang"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    programs
}

#[test]
fn lua_and_sqlite_are_modelled() {
    for (name, path) in real_programs() {
        let bytes = std::fs::read(&path).unwrap();
        let elf = ElfFile::parse(&bytes).unwrap();
        let p = discover(&elf, &DiscoverOptions::default()).unwrap();
        assert_eq!(p.info.relocation_mode, RelocationMode::Available, "{name}");
        let total = p.functions.len();
        let simple = p.functions.iter().filter(|f| f.is_simple()).count();
        let bytes_all: u64 = p.functions.iter().map(|f| f.range.len()).sum();
        let bytes_simple: u64 = p
            .functions
            .iter()
            .filter(|f| f.is_simple())
            .map(|f| f.range.len())
            .sum();
        let fn_pct = simple as f64 * 100.0 / total as f64;
        let byte_pct = bytes_simple as f64 * 100.0 / bytes_all as f64;
        eprintln!(
            "{name}: {simple}/{total} functions ({fn_pct:.2}%), {bytes_simple}/{bytes_all} bytes ({byte_pct:.2}%)"
        );
        for f in p.functions.iter().filter(|f| !f.is_simple()) {
            eprintln!(
                "  skipped {}: {}",
                f.qualified_name(),
                f.skip_reason().unwrap()
            );
        }
        assert!(fn_pct >= 99.0, "{name}: {fn_pct:.2}% of functions simple");
        assert!(
            byte_pct >= 99.5,
            "{name}: {byte_pct:.2}% of code bytes simple"
        );
        // The interpreters' central dispatch is modelled: Lua's VM loop and SQLite's opcode
        // switch each have a jump table.
        let main_loop = if name.starts_with("lua") {
            "luaV_execute"
        } else {
            "sqlite3VdbeExec"
        };
        let f = p
            .functions_named(main_loop)
            .next()
            .unwrap_or_else(|| panic!("{name}: {main_loop}"));
        assert!(f.is_simple(), "{name}: {main_loop}: {:?}", f.status);
        assert!(
            !f.jump_tables.is_empty()
                || f.blocks
                    .iter()
                    .any(|b| b.terminator == rivet_ir::Terminator::ComputedGoto),
            "{name}: {main_loop} has no dispatch table"
        );
    }
}
