//! Round trip of real LSDAs: every LSDA of libstdc++ and of a C++ program compiled here
//! (several catch types, `catch (...)`, rethrow, cleanups, dynamic exception specifications;
//! PIE and non-PIE, so pc-relative and absolute type tables) is rewritten for code moved by a
//! constant, read back with rivet-elf's parser, and compared with the original: call sites,
//! landing pads, actions, filters, type entries and exception specifications. A second
//! rewrite moves the call sites further than their landing pads, which then lie below the
//! fragment (a cold part whose landing pads stayed in the hot part).

use std::path::{Path, PathBuf};
use std::process::Command;

use rivet_elf::lsda::{Lsda, parse_lsda};
use rivet_elf::{ElfFile, Vaddr};
use rivet_emit::lsda::{NewCallSite, write_lsda};

/// How far the code and the LSDAs move.
const SHIFT: u64 = 0x1000_0000;
/// How much further call sites move than landing pads in the split case.
const COLD: u64 = 0x10_0000;

const PROGRAM: &str = r#"
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
struct A { int v; };
struct B : A {};
struct Guard { const char *n; ~Guard() { std::printf("~%s\n", n); } };
__attribute__((noinline)) void thrower(int k) {
    switch (k) {
    case 0: throw A{1};
    case 1: throw B{};
    case 2: throw std::runtime_error("rt");
    case 3: throw 42;
    case 4: throw std::string("s");
    default: break;
    }
}
__attribute__((noinline)) void spec(int k) throw(int, std::bad_alloc) {
    Guard g{"spec"};
    thrower(k);
}
__attribute__((noinline)) void other_spec(int k) throw(std::string) {
    Guard g{"other"};
    thrower(k);
}
__attribute__((noinline)) int many(int k) {
    Guard g{"many"};
    try {
        try { thrower(k); }
        catch (B &) { std::puts("B"); throw; }
        catch (const std::exception &e) { std::puts(e.what()); }
    } catch (A &a) { return a.v; }
      catch (int i) { return i; }
      catch (...) { std::puts("..."); throw; }
    try { spec(3); } catch (int i) { return i + 1; }
    try { other_spec(4); } catch (std::string &) { return 7; }
    return 0;
}
int main(int argc, char **) {
    int s = 0;
    for (int k = 0; k < 6; k++) {
        try { s += many(k + argc - 1); } catch (...) { s += 100; }
    }
    std::printf("%d\n", s);
}
"#;

/// Builds the program with g++ (`-std=c++14`: dynamic exception specifications are gone in
/// C++17) into a fresh directory.
fn build_program(name: &str, extra: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rivet-lsda-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("prog.cpp");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = dir.join("prog");
    let status = Command::new("g++")
        .args(["-O2", "-std=c++14", "-Wno-deprecated"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running g++");
    assert!(status.success(), "g++ failed for {name}");
    out
}

/// What the LSDAs of a file exercised, to check the test covers what it claims.
#[derive(Debug, Default)]
struct Coverage {
    lsdas: usize,
    call_sites: usize,
    without_landing_pad: usize,
    action_chains: usize,
    catch_all: usize,
    spec_lists: usize,
    split: usize,
}

fn shifted_sites(lsda: &Lsda, site_shift: u64) -> Vec<NewCallSite> {
    lsda.call_sites
        .iter()
        .map(|cs| NewCallSite {
            start: cs.start + site_shift,
            len: cs.len,
            landing_pad: cs.landing_pad.map(|lp| lp + SHIFT),
            action: cs.action,
        })
        .collect()
}

fn check_same(what: &str, old: &Lsda, new: &Lsda, site_shift: u64) {
    assert_eq!(new.call_sites.len(), old.call_sites.len(), "{what}");
    for (o, n) in old.call_sites.iter().zip(&new.call_sites) {
        assert_eq!(n.start, o.start + site_shift, "{what}");
        assert_eq!(n.len, o.len, "{what}");
        assert_eq!(n.landing_pad, o.landing_pad.map(|lp| lp + SHIFT), "{what}");
        assert_eq!(n.action, o.action, "{what}");
        assert_eq!(n.filters, o.filters, "{what}");
    }
    assert_eq!(new.type_entries, old.type_entries, "{what}");
    assert_eq!(new.spec_lists, old.spec_lists, "{what}");
    assert_eq!(new.ttype_encoding, old.ttype_encoding, "{what}");
    if let (Some(base), Some(size)) = (new.ttype_base, new.ttype_entry_size) {
        assert_eq!(base.get() % size, 0, "{what}: type table alignment");
    }
}

fn round_trip(path: &Path) -> Coverage {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path:?}: {e}"));
    let elf = ElfFile::parse(&bytes).unwrap();
    let eh = elf.eh_frame().unwrap().expect("no .eh_frame");
    let mut coverage = Coverage::default();
    // Every new LSDA goes into one buffer, back to back at odd addresses, so each exercises
    // the type table's alignment on its own.
    let mut new_base = None;
    let mut buffer = Vec::new();
    let mut written = Vec::new();
    for fde in &eh.fdes {
        let Some(lsda_addr) = fde.lsda else { continue };
        let section = elf.section_containing(lsda_addr).unwrap();
        let old = elf.lsda(lsda_addr, fde.range.start).unwrap();
        let base = *new_base.get_or_insert(section.addr + SHIFT + 1);
        let has_landing_pads = old.call_sites.iter().any(|c| c.landing_pad.is_some());
        let mut variants = vec![SHIFT];
        if has_landing_pads {
            variants.push(SHIFT + COLD);
        }
        for site_shift in variants {
            let fragment = fde.range.start + site_shift;
            let new_addr = base + buffer.len() as u64;
            let sites = shifted_sites(&old, site_shift);
            let new = write_lsda(&old, section.data, section.addr, fragment, &sites, new_addr)
                .unwrap_or_else(|e| panic!("{path:?}: {e}"));
            buffer.extend_from_slice(&new);
            written.push((old.clone(), new_addr, fragment, site_shift));
        }
        coverage.lsdas += 1;
        coverage.call_sites += old.call_sites.len();
        coverage.without_landing_pad += old
            .call_sites
            .iter()
            .filter(|c| c.landing_pad.is_none())
            .count();
        coverage.action_chains += old
            .call_sites
            .iter()
            .filter(|c| c.filters.len() > 1)
            .count();
        coverage.catch_all += old.type_entries.iter().filter(|t| t.1 == Vaddr(0)).count();
        coverage.spec_lists += old.spec_lists.len();
    }
    let base = new_base.unwrap_or_default();
    for (old, new_addr, fragment, site_shift) in &written {
        let what = format!("{path:?}: LSDA at {} moved to {new_addr}", old.addr);
        let new = parse_lsda(&buffer, base, *new_addr, *fragment)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        check_same(&what, old, &new, *site_shift);
        if *site_shift != SHIFT {
            // Landing pads below the fragment need the explicit LPStart.
            assert!(new.lpstart_explicit, "{what}");
            assert!(new.lpstart < *fragment, "{what}");
            coverage.split += 1;
        }
    }
    coverage
}

#[test]
fn libstdcxx_lsdas_round_trip() {
    let c = round_trip(Path::new("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"));
    assert!(c.lsdas > 500, "{c:?}");
    assert!(
        c.catch_all > 0 && c.action_chains > 0 && c.split > 0,
        "{c:?}"
    );
}

#[test]
fn cxx_program_lsdas_round_trip() {
    for (name, flags) in [
        ("pie", &["-fPIE", "-pie"][..]),
        ("nopie", &["-fno-PIE", "-no-pie"]),
    ] {
        let path = build_program(name, flags);
        let c = round_trip(&path);
        assert!(c.lsdas >= 4, "{name}: {c:?}");
        assert!(c.spec_lists >= 2, "{name}: exception specifications: {c:?}");
        assert!(c.catch_all > 0, "{name}: catch (...): {c:?}");
        assert!(c.action_chains > 0, "{name}: {c:?}");
        assert!(c.without_landing_pad > 0, "{name}: {c:?}");
        assert!(c.split > 0, "{name}: {c:?}");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
