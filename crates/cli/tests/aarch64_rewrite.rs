//! AArch64 rewrites that must change an instruction's form, not just its offsets, run under
//! qemu-aarch64.

mod common;

use std::path::Path;
use std::process::Command;

use common::scratch;

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
    let run = |b: &Path| {
        Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(b)
            .output()
            .expect("qemu-aarch64 is required (apt-get install qemu-user)")
    };
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
    let run = |b: &Path| {
        Command::new("qemu-aarch64")
            .args(["-L", "/usr/aarch64-linux-gnu"])
            .arg(b)
            .output()
            .expect("qemu-aarch64 is required (apt-get install qemu-user)")
    };
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
        let rw = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .args(["rewrite", "--verify", "-o"])
            .arg(&out)
            .arg(&bin)
            .args(layout)
            .output()
            .unwrap();
        assert!(
            rw.status.success(),
            "{layout:?}: {}",
            String::from_utf8_lossy(&rw.stderr)
        );
        let summary = String::from_utf8_lossy(&rw.stdout);
        let veneers: usize = summary
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_suffix(" veneers for calls and jumps beyond a branch's reach")
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(veneers > 0, "{layout:?}: no veneers: {summary}");
        let after = run(&out);
        assert_eq!(after.status.code(), Some(0), "{layout:?}");
        assert_eq!(after.stdout, before.stdout, "{layout:?}");
        std::fs::remove_file(&out).unwrap();
    }
    std::fs::remove_file(&bin).unwrap();
}
