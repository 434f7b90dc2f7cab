//! AArch64 rewrites that must change an instruction's form, not just its offsets, run under
//! qemu-aarch64.

mod common;

use std::path::Path;
use std::process::Command;

use common::scratch;

/// `qemu-aarch64` with the cross sysroot on `bin` with `args`.
fn run_emulated(bin: &Path, args: &[&str]) -> std::process::Output {
    Command::new("qemu-aarch64")
        .args(["-L", "/usr/aarch64-linux-gnu"])
        .arg(bin)
        .args(args)
        .output()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)")
}

/// `rivet rewrite --verify ARGS -o out input`, which must succeed; its stdout.
fn rewrite_verified(input: &Path, out: &Path, args: &[&str]) -> String {
    let rw = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(["rewrite", "--verify", "-o"])
        .arg(out)
        .arg(input)
        .args(args)
        .output()
        .unwrap();
    assert!(
        rw.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&rw.stderr)
    );
    String::from_utf8_lossy(&rw.stdout).into_owned()
}

/// lld turns an `adrp`+`add` pair into `nop`+`adr` when the address is within 1 MiB; moved
/// code 3 MiB further away turns it back, in the same two words (`rivet verify` checks the
/// pair builds the same address).
#[test]
fn an_address_moved_code_cannot_reach_with_adr_is_built_by_adrp_again() {
    let dir = scratch("aarch64_rewrite", "far_data");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = dir.join("far");
    let st = Command::new("clang-19")
        .args([
            "--target=aarch64-linux-gnu",
            "-fuse-ld=lld",
            "-O2",
            "-Wl,--emit-relocs",
        ])
        .arg(root.join("tests/aarch64/far_data.c"))
        .arg("-o")
        .arg(&bin)
        .status()
        .expect("clang-19 and lld-19 are required (apt-get install clang-19 lld-19)");
    assert!(st.success());
    let dump = |b: &Path| {
        let out = Command::new("aarch64-linux-gnu-objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(b)
            .output()
            .expect("aarch64-linux-gnu-objdump (binutils-aarch64-linux-gnu)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let show = |text: &str| -> String {
        text.split("<show>:")
            .nth(1)
            .and_then(|s| s.split("\n\n").next())
            .unwrap_or_default()
            .to_string()
    };
    // The premise: the linker relaxed the pair.
    assert!(
        show(&dump(&bin)).contains("adr\tx0"),
        "{}",
        show(&dump(&bin))
    );
    let run = |b: &Path| run_emulated(b, &[]);
    let before = run(&bin);
    assert_eq!(before.status.code(), Some(0));
    for layout in ["identity", "reverse"] {
        let out = dir.join(format!("far.{layout}"));
        let rw = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .args(["rewrite", "--verify", "--layout", layout, "-o"])
            .arg(&out)
            .arg(&bin)
            .output()
            .unwrap();
        assert!(
            rw.status.success(),
            "{}",
            String::from_utf8_lossy(&rw.stderr)
        );
        let text = show(&dump(&out));
        assert!(
            text.contains("adrp\tx0") && !text.contains("adr\tx0"),
            "{layout}: {text}"
        );
        let after = run(&out);
        assert_eq!(after.status.code(), Some(0), "{layout}");
        assert_eq!(after.stdout, before.stdout, "{layout}");
    }
}

/// A text larger than a `b`/`bl` reaches (+-128 MiB): 136 MiB of filler between two groups
/// of functions (`tests/aarch64/far_text`). The linker's veneers are discovered, and every
/// rewrite reaches across with veneers of its own (at the end of the fragments that need
/// them), with functions reordered, blocks shuffled and split.
#[test]
fn text_beyond_a_branchs_reach_is_crossed_through_veneers() {
    let dir = scratch("aarch64_rewrite", "far_text");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/aarch64/far_text");
    let bin = dir.join("big");
    let st = Command::new("aarch64-linux-gnu-gcc")
        .args(["-O2", "-fno-pie", "-no-pie", "-Wl,--emit-relocs", "-o"])
        .arg(&bin)
        .arg(src.join("near.c"))
        .arg(src.join("gap.s"))
        .arg(src.join("far.c"))
        .status()
        .expect("aarch64-linux-gnu-gcc is required (apt-get install gcc-aarch64-linux-gnu)");
    assert!(st.success());
    let run = |b: &Path| run_emulated(b, &[]);
    let before = run(&bin);
    assert_eq!(before.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&before.stdout), "total 4310\n");
    let inspect = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(["inspect", "--list"])
        .arg(&bin)
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        list.lines()
            .filter(|l| l.contains("_veneer"))
            .all(|l| l.contains("simple"))
            && list.contains("__far_square_veneer"),
        "{list}"
    );
    for layout in [
        &["--layout", "identity"][..],
        &["--layout", "reverse"],
        &["--layout", "shuffle", "--seed", "3"],
        &["--layout", "shuffle-blocks", "--seed", "2"],
    ] {
        let out = dir.join("big.out");
        let summary = rewrite_verified(&bin, &out, layout);
        let veneers: usize = summary
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_suffix(" veneers for calls and jumps beyond a branch's reach")
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(veneers > 0, "{layout:?}: no veneers: {summary}");
        // near_twice's call of `__far_square_veneer` reaches far_square, moved next to it,
        // and goes there directly.
        assert!(
            summary_count(
                &summary,
                "calls and jumps sent past the linker's veneers to their destinations"
            ) > 0,
            "{layout:?}: {summary}"
        );
        let after = run(&out);
        assert_eq!(after.status.code(), Some(0), "{layout:?}");
        assert_eq!(after.stdout, before.stdout, "{layout:?}");
        std::fs::remove_file(&out).unwrap();
    }
    std::fs::remove_file(&bin).unwrap();
}

/// Builds `tests/aarch64/far_text` with BTI landing pads and the BTI bit in its property note
/// (`tests/aarch64/bti_start.S` instead of Debian's start files, which have no pads, and
/// `-z force-bti` for the filler), with or without `--emit-relocs`.
fn build_far_text_bti(dir: &Path, name: &str, relocs: bool) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/aarch64");
    let bin = dir.join(name);
    let mut cc = Command::new("aarch64-linux-gnu-gcc");
    cc.args(["-O2", "-fno-pie", "-no-pie", "-mbranch-protection=standard"])
        .arg("-nostartfiles")
        .arg(root.join("bti_start.S"))
        .arg("-Wl,-z,force-bti");
    if relocs {
        cc.arg("-Wl,--emit-relocs");
    }
    let st = cc
        .arg("-o")
        .arg(&bin)
        .arg(root.join("far_text/near.c"))
        .arg(root.join("far_text/gap.s"))
        .arg(root.join("far_text/far.c"))
        .output()
        .expect("aarch64-linux-gnu-gcc is required (apt-get install gcc-aarch64-linux-gnu)");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    bin
}

/// Runs under qemu-aarch64's `max` CPU, which enforces BTI on a file marked for it.
fn run_guarded(bin: &Path) -> std::process::Output {
    Command::new("qemu-aarch64")
        .args(["-L", "/usr/aarch64-linux-gnu", "-cpu", "max"])
        .arg(bin)
        .output()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)")
}

/// The count a summary line `  N <what>` reports, 0 without the line.
fn summary_count(summary: &str, what: &str) -> usize {
    summary
        .lines()
        .find_map(|l| l.trim().strip_suffix(what))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Sets or clears the BTI bit of the GNU property note of the file at `path` (the
/// `GNU_PROPERTY_AARCH64_FEATURE_1_AND` property, found by its bytes).
fn set_bti_bit(path: &Path, on: bool) {
    let mut bytes = std::fs::read(path).unwrap();
    let property: [u8; 8] = [0, 0, 0, 0xc0, 4, 0, 0, 0];
    let at = bytes
        .windows(8)
        .position(|w| w == property)
        .expect("the file has an AArch64 feature property");
    let word = &mut bytes[at + 8];
    *word = if on { *word | 1 } else { *word & !1 };
    std::fs::write(path, bytes).unwrap();
}

/// Where BTI is enforced, every indirect branch the rewrite adds must land on a pad. Across
/// a text beyond a branch's reach that is the veneers' `br x16`: into code with a pad of its
/// own (PLT entries, functions' `bti c`/`paciasp`), straight; into code without one (a cold
/// block, split from its function and placed 136 MiB away), through a landing pad `bti j; b`
/// that Rivet places next to it. And a moved function's old entry, which the linker's own
/// veneers still jump to, keeps its pad in front of the forwarding jump. The outputs run with
/// BTI enforced; the same rewrite made as if the file had no BTI bit (no landing pads, no
/// kept pads) dies once the bit is set again: the pads are what makes it run.
#[test]
fn veneers_land_on_pads_where_bti_is_enforced() {
    let dir = scratch("aarch64_rewrite", "far_text_bti");
    let expected = "total 4310\n";
    // Relocation mode: functions move, PLT calls and the linker's veneers go far.
    let bin = build_far_text_bti(&dir, "big", true);
    let before = run_guarded(&bin);
    assert_eq!(before.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&before.stdout), expected);
    let rewrite = rewrite_verified;
    let out = dir.join("big.out");
    for layout in [
        &["--layout", "identity"][..],
        &["--layout", "reverse"],
        &["--layout", "shuffle-blocks", "--seed", "2"],
    ] {
        let summary = rewrite(&bin, &out, layout);
        assert!(
            summary_count(
                &summary,
                "veneers for calls and jumps beyond a branch's reach"
            ) > 0,
            "{layout:?}: {summary}"
        );
        let after = run_guarded(&out);
        assert_eq!(after.status.code(), Some(0), "{layout:?}");
        assert_eq!(
            String::from_utf8_lossy(&after.stdout),
            expected,
            "{layout:?}"
        );
    }
    // In place mode: hot parts stay where they were, cold parts go to the new text 136 MiB
    // away, so hot code reaches its own cold blocks through veneers; those blocks have no
    // pads. Seeds 3 and 6 split blocks that way (the summary says so).
    let bin = build_far_text_bti(&dir, "big_in_place", false);
    let mut landing_pads = 0;
    for seed in ["3", "6"] {
        let summary = rewrite(&bin, &out, &["--layout", "shuffle-blocks", "--seed", seed]);
        let pads = summary_count(
            &summary,
            "landing pads for veneers into code without one (BTI)",
        );
        assert!(pads > 0, "seed {seed}: {summary}");
        landing_pads += pads;
        let after = run_guarded(&out);
        assert_eq!(after.status.code(), Some(0), "seed {seed}");
        assert_eq!(
            String::from_utf8_lossy(&after.stdout),
            expected,
            "seed {seed}"
        );
    }
    // The counter-check: the same rewrite of the file without its BTI bit has no pads.
    let unmarked = dir.join("big_in_place.unmarked");
    std::fs::copy(&bin, &unmarked).unwrap();
    set_bti_bit(&unmarked, false);
    let summary = rewrite(
        &unmarked,
        &out,
        &["--layout", "shuffle-blocks", "--seed", "3"],
    );
    assert_eq!(
        summary_count(
            &summary,
            "landing pads for veneers into code without one (BTI)"
        ),
        0,
        "{summary}"
    );
    set_bti_bit(&out, true);
    // qemu dies of the guest's SIGILL itself.
    let status = run_guarded(&out).status;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(4),
        "without its {landing_pads} landing pads the output should die of SIGILL under BTI: {status:?}"
    );
    for f in [&out, &unmarked, &bin, &dir.join("big")] {
        std::fs::remove_file(f).unwrap();
    }
}

/// In place mode across a text beyond a branch's reach: a function whose cold part lands in
/// the new text 136 MiB away needs veneers at the end of its in-place part; where they do
/// not fit in the original's room, the function stays as it was (before, the veneers were
/// written over the next function and verification failed, or without `--verify`, the
/// output broke).
#[test]
fn in_place_functions_without_room_for_their_veneers_stay() {
    let dir = scratch("aarch64_rewrite", "far_text_in_place");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/aarch64/far_text");
    let bin = dir.join("big");
    let st = Command::new("aarch64-linux-gnu-gcc")
        .args(["-O2", "-fno-pie", "-no-pie", "-o"])
        .arg(&bin)
        .arg(src.join("near.c"))
        .arg(src.join("gap.s"))
        .arg(src.join("far.c"))
        .status()
        .expect("aarch64-linux-gnu-gcc is required (apt-get install gcc-aarch64-linux-gnu)");
    assert!(st.success());
    let out = dir.join("big.out");
    let mut stayed = 0;
    for seed in 1..=4 {
        let rw = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .args([
                "rewrite",
                "--verify",
                "--layout",
                "shuffle-blocks",
                "--seed",
            ])
            .arg(seed.to_string())
            .arg("-o")
            .arg(&out)
            .arg(&bin)
            .output()
            .unwrap();
        let summary = String::from_utf8_lossy(&rw.stdout);
        assert!(
            rw.status.success(),
            "seed {seed}: {}",
            String::from_utf8_lossy(&rw.stderr)
        );
        stayed += summary_count(
            &summary,
            "in place: no room for the veneers its cold part needs",
        );
        let after = run_guarded(&out);
        assert_eq!(after.status.code(), Some(0), "seed {seed}");
        assert_eq!(String::from_utf8_lossy(&after.stdout), "total 4310\n");
    }
    assert!(
        stayed > 0,
        "no seed left a function in place for its veneers"
    );
    std::fs::remove_file(&out).unwrap();
    std::fs::remove_file(&bin).unwrap();
}

/// Assembly of `n` functions `gen_f0` .. `gen_f{n-1}`, each calling or tail-calling the next,
/// with every conditional branch form in their entry blocks (`tbz`, `cbz`, `b.cond`, `tbnz`),
/// CFI with a remembered state around the tail call's epilogue, and every 512th function
/// carrying a 24 KiB block. Their blocks are small and many, so that with every block split
/// cold the entries (hot) sit far from the rest: most of the entries' branches then exceed a
/// `tbz`'s 32 KiB, and the first functions' a `b.cond`'s 1 MiB.
fn chain_of_functions_asm(n: usize) -> String {
    use std::fmt::Write;
    let mut s = String::from("\t.text\n");
    let filler = |s: &mut String, count: usize, salt: usize| {
        for k in 0..count {
            let _ = match (k + salt) % 3 {
                0 => writeln!(s, "\teor w19, w19, w19, lsr #{}", 1 + (k + salt) % 13),
                1 => writeln!(s, "\tadd w19, w19, #{}", 1 + (k * 7 + salt) % 251),
                _ => writeln!(s, "\tror w19, w19, #{}", 1 + (k + 3 * salt) % 31),
            };
        }
    };
    for i in 0..n {
        let f = format!("gen_f{i}");
        let l = |x: &str| format!(".L{i}_{x}");
        let _ = write!(
            s,
            "\t.p2align 2\n\t.globl {f}\n\t.type {f}, %function\n{f}:\n\t.cfi_startproc\n\
             \tstp x29, x30, [sp, #-32]!\n\t.cfi_def_cfa_offset 32\n\t.cfi_offset 29, -32\n\
             \t.cfi_offset 30, -24\n\tmov x29, sp\n\tstr x19, [sp, #16]\n\t.cfi_offset 19, -16\n\
             \tmov w19, w0\n"
        );
        let _ = match i % 4 {
            0 => writeln!(s, "\ttbz w19, #{}, {}", i % 7, l("a")),
            1 => writeln!(s, "\tcbz w19, {}", l("a")),
            2 => writeln!(s, "\tcmp w19, #{}\n\tb.lo {}", 1 + i % 50, l("a")),
            _ => writeln!(s, "\ttbnz w19, #{}, {}", i % 5, l("a")),
        };
        let _ = writeln!(s, "\tadd w19, w19, #{}", 1 + i % 89);
        let _ = writeln!(s, "{}:", l("a"));
        filler(&mut s, 24, i);
        let _ = writeln!(s, "\tcbnz w19, {}\n\tmov w19, #{}\n{}:", l("b"), i, l("b"));
        let _ = writeln!(s, "\tand w1, w19, #0xff\n\tcmp w1, #128\n\tb.hs {}", l("c"));
        filler(&mut s, if i % 512 == 511 { 6000 } else { 24 }, i + 1);
        let _ = writeln!(s, "{}:", l("c"));
        if i + 1 == n {
            let _ = writeln!(s, "\tb {}", l("ret"));
        } else {
            let next = format!("gen_f{}", i + 1);
            let _ = write!(
                s,
                "\ttst w19, #2\n\tb.eq {tail}\n\tlsr w0, w19, #1\n\tbl {next}\n\
                 \tadd w19, w19, w0\n\tb {ret}\n{tail}:\n\t.cfi_remember_state\n\
                 \tlsr w0, w19, #1\n\tldr x19, [sp, #16]\n\t.cfi_restore 19\n\
                 \tldp x29, x30, [sp], #32\n\t.cfi_restore 29\n\t.cfi_restore 30\n\
                 \t.cfi_def_cfa_offset 0\n\tb {next}\n\t.cfi_restore_state\n",
                tail = l("tail"),
                ret = l("ret"),
            );
        }
        let _ = write!(
            s,
            "{}:\n\tmov w0, w19\n\tldr x19, [sp, #16]\n\tldp x29, x30, [sp], #32\n\
             \t.cfi_restore 29\n\t.cfi_restore 30\n\t.cfi_restore 19\n\t.cfi_def_cfa_offset 0\n\
             \tret\n\t.cfi_endproc\n\t.size {f}, .-{f}\n",
            l("ret")
        );
    }
    s
}

/// The stress case: a program whose text exceeds 128 MiB (4,096 generated functions,
/// then `gap.s`'s 136 MiB, then far.c), rewritten with functions reversed and every block
/// but the entries split cold (`--split-every-block`), and with functions and blocks
/// shuffled and every block split. Calls from the new text back to the PLT and across the gap
/// need veneers; branches from the entries to their cold parts need inverted branches over a
/// `b`. Every rewrite is verified and runs as the original does.
#[test]
fn a_big_program_with_every_block_split_cold_runs() {
    let dir = scratch("aarch64_rewrite", "split_every_block");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/aarch64/far_text");
    let chain = dir.join("chain.s");
    std::fs::write(&chain, chain_of_functions_asm(4096)).unwrap();
    let bin = dir.join("big");
    let st = Command::new("aarch64-linux-gnu-gcc")
        .args(["-O2", "-fno-pie", "-no-pie", "-Wl,--emit-relocs", "-o"])
        .arg(&bin)
        .arg(src.join("chain_main.c"))
        .arg(&chain)
        .arg(src.join("gap.s"))
        .arg(src.join("far.c"))
        .output()
        .expect("aarch64-linux-gnu-gcc is required (apt-get install gcc-aarch64-linux-gnu)");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let run = |b: &Path| run_emulated(b, &["40"]);
    let before = run(&bin);
    assert_eq!(before.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&before.stdout).starts_with("chain "),
        "{before:?}"
    );
    for layout in [
        &["--layout", "reverse"][..],
        &["--layout", "shuffle", "--seed", "5"],
    ] {
        let out = dir.join("big.out");
        let args: Vec<&str> = ["--split-every-block", "--json"]
            .into_iter()
            .chain(layout.iter().copied())
            .collect();
        let summary: serde_json::Value =
            serde_json::from_str(&rewrite_verified(&bin, &out, &args)).unwrap();
        let count = |key: &str| {
            summary[key]
                .as_u64()
                .unwrap_or_else(|| panic!("{key}: {summary}"))
        };
        // Every generated function moved, each in two fragments.
        assert!(
            count("moved") >= 4096 && count("fragments") >= 8192,
            "{layout:?}: {summary}"
        );
        assert!(count("veneers") > 0, "{layout:?}: {summary}");
        eprintln!("{layout:?}:\n{summary}");
        let after = run(&out);
        assert_eq!(after.status.code(), Some(0), "{layout:?}");
        assert_eq!(after.stdout, before.stdout, "{layout:?}");
        std::fs::remove_file(&out).unwrap();
    }
    std::fs::remove_file(&bin).unwrap();
}
