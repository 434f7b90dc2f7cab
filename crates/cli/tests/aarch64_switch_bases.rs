//! Switch tables whose base discovery finds by reaching definitions
//! (`tests/aarch64/switch_bases.S`: the shapes of gcc's llex and str_format and clang's
//! sqlite3VdbeExec), rewritten and run under qemu-aarch64. The three functions whose base is
//! found move (their tables rewritten from the moved anchors); the three where the paths do
//! not prove one table stay where they are. Every layout must run to the same exit status and
//! pass `--verify`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::scratch;

const SOURCE: &str = "tests/aarch64/switch_bases.S";
const EXPECTED_EXIT: i32 = 228;

fn build(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = dir.join("switch_bases");
    let status = Command::new("aarch64-linux-gnu-gcc")
        .args(["-nostdlib", "-static", "-Wl,--emit-relocs"])
        .arg(root.join(SOURCE))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("aarch64-linux-gnu-gcc is required (apt-get install gcc-aarch64-linux-gnu)");
    assert!(status.success(), "building {SOURCE} failed");
    out
}

fn run(binary: &Path) -> Option<i32> {
    let status = Command::new("qemu-aarch64")
        .arg(binary)
        .status()
        .expect("qemu-aarch64 is required (apt-get install qemu-user)");
    use std::os::unix::process::ExitStatusExt;
    status.code().or(status.signal().map(|s| 128 + s))
}

#[test]
fn switches_found_by_reaching_definitions_survive_a_rewrite() {
    let dir = scratch("aarch64_switch_bases", "rewrite");
    let input = build(&dir);
    assert_eq!(run(&input), Some(EXPECTED_EXIT), "the input itself");
    let mut layouts: Vec<Vec<String>> = vec![vec!["identity".into()], vec!["reverse".into()]];
    for seed in 1..=4 {
        for kind in ["shuffle", "shuffle-blocks"] {
            layouts.push(vec![kind.into(), "--seed".into(), seed.to_string()]);
        }
    }
    for layout in &layouts {
        let out = dir.join(format!("out-{}", layout.join("-")));
        let rw = Command::new(env!("CARGO_BIN_EXE_rivet"))
            .arg("rewrite")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .arg("--verify")
            .arg("--layout")
            .args(layout)
            .output()
            .unwrap();
        assert!(
            rw.status.success(),
            "{layout:?}: {}",
            String::from_utf8_lossy(&rw.stderr)
        );
        let summary = String::from_utf8_lossy(&rw.stdout);
        // _start, seven, kept_base, rematerialised, check_before move; disagree,
        // split_pair and changed_on_back_edge are skipped.
        assert!(
            summary.contains("5 of 8 functions moved")
                && summary.contains("3  skipped: unresolved-indirect-jump"),
            "{layout:?}: {summary}"
        );
        assert_eq!(run(&out), Some(EXPECTED_EXIT), "{layout:?}");
    }
}
