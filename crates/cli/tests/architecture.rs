//! Architecture rules of DESIGN.md, checked on the source tree: dependencies point one way,
//! the ISA stays inside `arch`, only the CLI exits the process, every module says what it is.

use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources(krate: &str) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&crates_dir().join(krate).join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

const CRATES: &[&str] = &[
    "elf", "arch", "ir", "discover", "profile", "layout", "passes", "runtime", "emit", "cli",
];

#[test]
fn dependencies_point_one_way() {
    let allowed: &[(&str, &[&str])] = &[
        ("elf", &[]),
        ("arch", &["rivet-elf"]),
        ("ir", &["rivet-elf", "rivet-arch"]),
        ("discover", &["rivet-elf", "rivet-arch", "rivet-ir"]),
        ("profile", &[]),
        ("layout", &[]),
        (
            "passes",
            &[
                "rivet-elf",
                "rivet-arch",
                "rivet-ir",
                "rivet-profile",
                "rivet-layout",
            ],
        ),
        ("runtime", &["rivet-elf"]),
        (
            "emit",
            &["rivet-elf", "rivet-arch", "rivet-ir", "rivet-runtime"],
        ),
    ];
    for (krate, ok) in allowed {
        let manifest =
            std::fs::read_to_string(crates_dir().join(krate).join("Cargo.toml")).unwrap();
        for line in manifest.lines() {
            let name = line.split(['.', ' ', '=']).next().unwrap_or("");
            if name.starts_with("rivet-") {
                assert!(
                    ok.contains(&name),
                    "crate {krate} must not depend on {name}"
                );
            }
        }
    }
}

/// The runtime is machine code by nature (one generator per ISA, as DESIGN.md's `runtime/`
/// says); everything else reaches the ISA through `arch`.
#[test]
fn only_arch_knows_the_instruction_set() {
    for krate in CRATES.iter().filter(|k| !matches!(**k, "arch" | "runtime")) {
        for (path, text) in sources(krate) {
            assert!(
                !text.contains("iced_x86"),
                "{} uses iced_x86 outside arch",
                path.display()
            );
        }
    }
}

#[test]
fn only_the_cli_exits_or_prints() {
    for krate in CRATES.iter().filter(|k| **k != "cli") {
        for (path, text) in sources(krate) {
            // Unit tests may print what they measure.
            let text = text.split("#[cfg(test)]").next().unwrap_or("");
            for forbidden in ["process::exit", "println!", "eprintln!"] {
                assert!(
                    !text.contains(forbidden),
                    "{} uses {forbidden}",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn every_module_opens_with_a_doc_paragraph() {
    for krate in CRATES {
        for (path, text) in sources(krate) {
            assert!(
                text.trim_start().starts_with("//!"),
                "{} has no //! paragraph",
                path.display()
            );
        }
    }
}
