//! Architecture rules of docs/architecture.md, checked on the source tree: dependencies point
//! one way, the ISA stays inside `arch`, only the CLI exits the process, every module says what
//! it is, the CLI's commands do not import each other, and the repository stands alone.

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
        ("runtime", &["rivet-elf", "rivet-arch"]),
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

/// The runtime is machine code by nature (one generator per ISA, docs/architecture.md's
/// `runtime` row); everything else reaches the ISA through `arch` (`rivet_arch::Isa`, `Inst`, `Flow`).
/// Looks for ISA facts in the code (comments and unit tests cut away) of every other crate:
/// decoder types, relocation and machine constants, register names and numbers, fill and
/// opcode bytes, mnemonics matched as strings, the x86 instruction length limit.
#[test]
fn only_arch_knows_the_instruction_set() {
    let mut leaks = Vec::new();
    for krate in CRATES.iter().filter(|k| !matches!(**k, "arch" | "runtime")) {
        for (path, text) in sources(krate) {
            let name = path.display().to_string();
            // Not even unit tests may name the decoder: they test through `rivet_arch`.
            if text.contains("iced_x86") {
                leaks.push(format!("{name}: uses iced_x86"));
            }
            for (line, what) in isa_facts(&text) {
                // The ELF header check rejects machines Rivet has no `Isa` for before anything
                // reads code; it names the machines `rivet_arch::Isa` knows.
                if name.ends_with("elf/src/file.rs")
                    && (what == "machine constant EM_X86_64"
                        || what == "machine constant EM_AARCH64")
                {
                    continue;
                }
                leaks.push(format!("{name}:{line}: {what}"));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "ISA facts outside rivet-arch (move them behind rivet_arch::Isa):\n{}",
        leaks.join("\n")
    );
}

/// The ISA facts in `text` (Rust source): (line number, what was found). Comments and
/// everything from the first `#[cfg(test)]` on are left out: unit tests may spell out
/// encodings as data.
fn isa_facts(text: &str) -> Vec<(usize, String)> {
    const WORDS: &[(&str, &str)] = &[
        ("iced_x86", "decoder types (iced_x86)"),
        ("R_X86_64_", "relocation type R_X86_64_*"),
        ("R_AARCH64_", "relocation type R_AARCH64_*"),
        ("EM_X86_64", "machine constant EM_X86_64"),
        ("EM_AARCH64", "machine constant EM_AARCH64"),
        ("Mnemonic::", "decoder mnemonics"),
        ("1..=15", "the x86 instruction length limit"),
    ];
    // Whole tokens only: `0x90` is a nop, `0x9000` an address.
    const TOKENS: &[(&str, &str)] = &[
        ("0xcc", "int3 fill byte"),
        ("0x90", "nop byte"),
        ("0xe8", "call opcode"),
        ("0xe9", "jmp opcode"),
        ("0xeb", "short jmp opcode"),
        ("0xd503201f", "AArch64 nop"),
        ("RSP", "register constant"),
        ("RIP", "register constant"),
        ("RBP", "register constant"),
        ("RBX", "register constant"),
        ("RAX", "register constant"),
        ("DWARF_RSP", "register constant"),
        ("DWARF_SP", "register constant"),
    ];
    // Register names and mnemonics as string literals.
    const STRINGS: &[&str] = &[
        "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "rip", "r8", "r11", "eax", "x29",
        "x30", "jmp", "call", "ret", "nop", "int3", "ud2", "lea", "div", "idiv", "imul", "endbr64",
        "adrp", "blr", "udf", "brk", "bti",
    ];
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let line = line.split("//").next().unwrap_or("");
        let lower = line.to_ascii_lowercase();
        for (word, what) in WORDS {
            if line.contains(word) {
                found.push((n + 1, what.to_string()));
            }
        }
        for (token, what) in TOKENS {
            let haystack = if token.starts_with("0x") {
                &lower
            } else {
                line
            };
            let mut from = 0;
            while let Some(at) = haystack[from..].find(token) {
                let start = from + at;
                let end = start + token.len();
                let is_part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                // A literal's type suffix (`0xccu8`, `0xcc_u8`) is still the same number.
                let rest = haystack[end..].trim_start_matches('_');
                let rest = [
                    "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64",
                ]
                .iter()
                .find_map(|suffix| rest.strip_prefix(suffix))
                .filter(|_| token.starts_with("0x"))
                .unwrap_or(&haystack[end..]);
                if !is_part(haystack[..start].chars().next_back()) && !is_part(rest.chars().next())
                {
                    found.push((n + 1, format!("{what} {token}")));
                }
                from = end;
            }
        }
        for name in STRINGS {
            if line.contains(&format!("\"{name}\"")) {
                found.push((n + 1, format!("ISA name \"{name}\" as a string")));
            }
        }
    }
    found
}

/// The check above finds what it looks for: each kind of leak, planted in a line of code, is
/// reported; the same words in comments, in unit tests, or as parts of longer tokens are not.
#[test]
fn isa_fact_check_finds_planted_leaks() {
    let planted = [
        "use iced_x86::Instruction;",
        "types::R_X86_64_PC32 => 4,",
        "let fill = vec![0xccu8; 4];",
        "image.resize(n, 0xCC);",
        "const RSP: u16 = 7;",
        "register: DWARF_RSP,",
        "let nop = [0x90];",
        "out.push(0xe9);",
        "let names = [\"rax\", \"rdx\"];",
        "if m == \"idiv\" { 25 } else { 1 }",
        "(1..=15).rev()",
        "if machine != elf::EM_X86_64.0 {",
    ];
    for line in planted {
        assert!(!isa_facts(line).is_empty(), "not found: {line}");
    }
    let innocent = [
        "// image.resize(n, 0xcc); rsp is register 7",
        "let addr = Vaddr(0x9000) + 0xe80;",
        "let RSPX = 1; let offset = 0x90a;",
        "let s = \"call {target}\";",
        "fn f() {}\n#[cfg(test)]\nmod tests { const RSP: u16 = 7; }",
    ];
    for text in innocent {
        assert!(isa_facts(text).is_empty(), "false alarm: {text}");
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

/// The modules named by `crate::` paths in `text` (`use` lines, grouped `use crate::{...}`,
/// and paths written inline), comments left out: the first segment of each path.
fn crate_paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let first_segment = |path: &str| -> String {
        path.trim()
            .chars()
            .take_while(|c| is_ident(*c))
            .collect::<String>()
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        // `rivet_crate::`, say, is another path.
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The top-level items of the group, up to its closing brace.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            found.push(first_segment(&item));
        } else {
            found.push(first_segment(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

/// The `rivet` binary's modules in two layers (its `main.rs` says why): command modules, the
/// ones `main` dispatches to with `NAME::run(`, import shared modules only; shared modules
/// import no command module; nothing imports from `main` itself, which imports them all.
/// The one exception is a command that runs others as its steps.
#[test]
fn cli_commands_import_only_shared_modules() {
    const STEPS: &[(&str, &str)] = &[
        ("auto", "instrument"),
        ("auto", "optimize"),
        ("auto", "bench"),
    ];
    let src = crates_dir().join("cli").join("src");
    let main = std::fs::read_to_string(src.join("main.rs")).unwrap();
    let modules: Vec<&str> = main
        .lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let commands: Vec<&str> = modules
        .iter()
        .copied()
        .filter(|m| main.contains(&format!("{m}::run(")))
        .collect();
    assert!(
        commands.contains(&"rewrite") && commands.contains(&"auto"),
        "the command modules were not found in main.rs: {commands:?}"
    );
    let mut broken = Vec::new();
    for module in &modules {
        let file = src.join(format!("{module}.rs"));
        let file = if file.exists() {
            file
        } else {
            src.join(module).join("mod.rs")
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let is_command = commands.contains(module);
        for imported in crate_paths(&text) {
            let imported = imported.as_str();
            if imported == *module {
                continue;
            }
            if !modules.contains(&imported) {
                broken.push(format!(
                    "{module} imports {imported} from main.rs: move it to a shared module"
                ));
            } else if commands.contains(&imported) {
                if !is_command {
                    broken.push(format!(
                        "shared module {module} imports command module {imported}"
                    ));
                } else if !STEPS.contains(&(*module, imported)) {
                    broken.push(format!(
                        "command module {module} imports command module {imported}: move what they share to a shared module"
                    ));
                }
            }
        }
    }
    broken.sort();
    broken.dedup();
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The files of the repository: the ones git tracks, or every file outside build and fuzzing
/// output when the tree is not a git checkout (a source archive).
fn repository_files(root: &Path) -> Vec<PathBuf> {
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output();
    if let Ok(out) = listed
        && out.status.success()
    {
        return out
            .stdout
            .split(|b| *b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| root.join(String::from_utf8_lossy(name).as_ref()))
            .collect();
    }
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                if !name.starts_with('.') && !matches!(&*name, "target" | "corpus" | "artifacts") {
                    walk(&path, out);
                }
            } else {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    files
}

/// A user of the repository has only the repository: no file may send them to the team's
/// working notes beside it (its design page, its copy of BOLT facts, the articles it started
/// from). docs/architecture.md is the design page of the repository itself.
#[test]
fn the_repository_stands_alone() {
    // Spelt in pieces so that this file does not match itself.
    let outside = [
        ["..", "/shared"].concat(),
        ["shared", "/DESIGN.md"].concat(),
        ["shared", "/seeds"].concat(),
        ["shared", "/reference"].concat(),
        ["bolt-facts", ".md"].concat(),
    ];
    let root = crates_dir().join("..").canonicalize().unwrap();
    let files = repository_files(&root);
    assert!(
        files.iter().any(|f| f.ends_with("docs/architecture.md")),
        "docs/architecture.md is missing from the files checked"
    );
    let mut found = Vec::new();
    for file in &files {
        // A file git lists may be deleted in the working tree.
        let Ok(bytes) = std::fs::read(file) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            if outside
                .iter()
                .any(|pattern| line.contains(pattern.as_str()))
            {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "references to files outside the repository (point to docs/architecture.md or say it \
         in words):\n{}",
        found.join("\n")
    );
}
