//! `--runner PREFIX`: running the binaries of the input under another program, an emulator
//! above all (`qemu-aarch64 -L /usr/aarch64-linux-gnu` for an AArch64 program on an x86-64
//! host), for the commands that run them (`auto`, `bench`; `simulate` takes its qemu command
//! the same way).
//!
//! **Words.** PREFIX is split into words as a POSIX shell splits a command line: blanks
//! separate words, single quotes keep everything literal, double quotes keep blanks and take
//! backslash escapes of `"`, `\`, `$` and `` ` ``, a backslash outside quotes keeps the next
//! character. Nothing is expanded (no `$VAR`, `~` or globs): PREFIX is words, not a script,
//! so what runs is exactly what was written. Its first word must name a program, found on
//! `PATH` (or a path), before anything runs.
//!
//! **Where the prefix goes.** A binary run directly (a command without `{}`) becomes
//! `PREFIX... BINARY ARGS...`. Where `{}` stands for the binary inside a command, it stands
//! for a small script instead (`exec PREFIX... BINARY "$@"`, written into the command's private
//! directory under the binary's own file name): then the binary runs under the prefix however
//! the command starts it, through `sh -c`, `xargs`, `timeout` or a script of its own, and in
//! every process that starts it again. `{}` is then a program to run, not the binary's bytes.
//!
//! **Foreign binaries.** A program of another instruction set than the host's runs here only
//! through an emulator. The kernel may do that by itself (`binfmt_misc`, Debian's
//! `qemu-user-binfmt`): then nothing is needed. Without a handler and without `--runner`, a
//! run would fail with "Exec format error"; [`cannot_run_here`] finds that case first, and
//! [`needs_runner`] is the error that says which `--runner` to give. Rivet does not pick an
//! emulator by itself when one is installed: the guest's library root (`-L`) depends on where
//! the program's libraries are, and a benchmark that silently measured an emulator would read
//! as a measurement of the program.

use std::ffi::OsString;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use rivet_arch::Isa;

use crate::error::UserError;

/// The words that go before a binary to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunPrefix {
    words: Vec<String>,
}

impl RunPrefix {
    /// Reads `--runner` (`option` names it in errors): its words, whose program must exist.
    pub(crate) fn parse(spec: &str, option: &str) -> Result<RunPrefix, UserError> {
        let words = split_words(spec).map_err(|why| {
            UserError::new(format!("{option} {spec:?}: {why}"))
                .hint("quote a word with spaces as in a shell, e.g. --runner \"qemu-aarch64 -L '/opt/my sysroot'\"")
        })?;
        let Some(program) = words.first() else {
            return Err(UserError::new(format!("{option} is empty"))
                .hint("give the emulator and its options, e.g. --runner 'qemu-aarch64 -L /usr/aarch64-linux-gnu'"));
        };
        if find_program(program).is_none() {
            let hint = if program.starts_with("qemu-") {
                "install it with apt-get install qemu-user".to_string()
            } else {
                "give its full path, or add its directory to PATH".to_string()
            };
            return Err(UserError::new(format!(
                "{option}: {program} is not a program {}",
                if program.contains('/') {
                    "(no such executable file)"
                } else {
                    "on PATH"
                }
            ))
            .hint(hint));
        }
        Ok(RunPrefix { words })
    }

    pub(crate) fn words(&self) -> &[String] {
        &self.words
    }

    /// The prefix as a shell would read it back.
    pub(crate) fn command_line(&self) -> String {
        let words: Vec<OsString> = self.words.iter().map(OsString::from).collect();
        shell_words(&words)
    }

    /// The argv running `binary` with `args` under the prefix.
    pub(crate) fn argv(&self, binary: &Path, args: &[OsString]) -> Vec<OsString> {
        self.words
            .iter()
            .map(OsString::from)
            .chain(std::iter::once(binary.as_os_str().to_owned()))
            .chain(args.iter().cloned())
            .collect()
    }

    /// Writes an executable script at `dir/NAME` (NAME: `binary`'s file name) that runs
    /// `binary` under the prefix with the script's arguments; returns its path. `dir` must be
    /// private to this run (the script is executed).
    pub(crate) fn write_script(&self, binary: &Path, dir: &Path) -> Result<PathBuf, UserError> {
        let name = binary
            .file_name()
            .map_or_else(|| OsString::from("binary"), |n| n.to_owned());
        let script = dir.join(name);
        let mut words: Vec<OsString> = self.words.iter().map(OsString::from).collect();
        words.push(binary.as_os_str().to_owned());
        let text = format!("#!/bin/sh\nexec {} \"$@\"\n", shell_words(&words));
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            std::fs::write(&script, &text)?;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700))
        };
        write().map_err(|e| {
            UserError::new(format!("cannot write {}: {e}", script.display()))
                .hint("set TMPDIR to a writable directory")
        })?;
        Ok(script)
    }
}

/// Reads `--runner` when given.
pub(crate) fn parse_option(
    spec: Option<&str>,
    option: &str,
) -> Result<Option<RunPrefix>, UserError> {
    spec.map(|s| RunPrefix::parse(s, option)).transpose()
}

/// `text` split into words as a POSIX shell splits a command line, without expansions.
pub(crate) fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err("a single quote is not closed".to_string()),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => w.push(c),
                            // A backslash and a newline are nothing, as in a shell.
                            Some('\n') => {}
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err("a double quote is not closed".to_string()),
                        },
                        Some(c) => w.push(c),
                        None => return Err("a double quote is not closed".to_string()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err("it ends with a backslash".to_string()),
            },
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// `argv` as one line a shell reads back as the same words.
pub(crate) fn shell_words(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                s.into_owned()
            } else {
                format!("'{}'", s.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The file `name` names as a program: a path (with a `/`), or the first executable file of
/// that name in `PATH`'s directories.
fn find_program(name: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| executable(p))
}

/// The instruction set of the machine Rivet runs on, when Rivet knows it.
fn host_isa() -> Option<Isa> {
    match std::env::consts::ARCH {
        "x86_64" => Some(Isa::X86_64),
        "aarch64" => Some(Isa::Aarch64),
        _ => None,
    }
}

/// The ISA of the ELF file at `path` (None: not an ELF file of an ISA Rivet knows) and its
/// first bytes (what binfmt_misc matches).
fn elf_isa(path: &Path) -> Option<(Isa, Vec<u8>)> {
    let mut header = Vec::with_capacity(128);
    std::fs::File::open(path)
        .ok()?
        .take(128)
        .read_to_end(&mut header)
        .ok()?;
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB; e_machine at 18.
    if header.len() < 20 || &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let machine = u16::from_le_bytes([header[18], header[19]]);
    Some((Isa::from_elf_machine(machine)?, header))
}

/// Where the kernel lists the interpreters it runs programs with (binfmt_misc).
const BINFMT_DIR: &str = "/proc/sys/fs/binfmt_misc";

/// Whether an enabled binfmt_misc entry (its file's text) takes a file starting with
/// `header`. Only magic entries (`offset`, `magic`, `mask`) can take an ELF file.
fn binfmt_entry_takes(entry: &str, header: &[u8]) -> bool {
    let mut lines = entry.lines();
    if lines.next().map(str::trim) != Some("enabled") {
        return false;
    }
    let hex = |s: &str| -> Option<Vec<u8>> {
        let s = s.trim();
        if !s.len().is_multiple_of(2) {
            return None;
        }
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
            .collect()
    };
    let (mut offset, mut magic, mut mask) = (0usize, None, None);
    for line in lines {
        if let Some(v) = line.strip_prefix("offset ") {
            offset = v.trim().parse().unwrap_or(usize::MAX);
        } else if let Some(v) = line.strip_prefix("magic ") {
            magic = hex(v);
        } else if let Some(v) = line.strip_prefix("mask ") {
            mask = hex(v);
        }
    }
    let Some(magic) = magic else { return false };
    let mask = mask.unwrap_or_else(|| vec![0xff; magic.len()]);
    magic.iter().enumerate().all(|(i, &m)| {
        let k = mask.get(i).copied().unwrap_or(0xff);
        offset
            .checked_add(i)
            .and_then(|at| header.get(at))
            .is_some_and(|&b| b & k == m & k)
    })
}

/// Whether the kernel has an interpreter for a file starting with `header`.
fn binfmt_takes(header: &[u8]) -> bool {
    let dir = Path::new(BINFMT_DIR);
    let enabled = std::fs::read_to_string(dir.join("status")).is_ok_and(|s| s.trim() == "enabled");
    if !enabled {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        name != "status"
            && name != "register"
            && std::fs::read_to_string(e.path()).is_ok_and(|text| binfmt_entry_takes(&text, header))
    })
}

/// The ISA of `path` when it is an ELF program of another ISA than the host's that the kernel
/// cannot run by itself (no binfmt_misc interpreter takes it): it needs `--runner`.
pub(crate) fn cannot_run_here(path: &Path) -> Option<Isa> {
    let host = host_isa()?;
    let (isa, header) = elf_isa(path)?;
    (isa != host && !binfmt_takes(&header)).then_some(isa)
}

/// The error for `path`, an `isa` binary this host cannot run, when no `--runner` was given.
pub(crate) fn needs_runner(path: &Path, isa: Isa) -> UserError {
    let host = host_isa().map_or("this", Isa::name);
    let suggested: Vec<OsString> = isa.qemu_user_command().iter().map(OsString::from).collect();
    let installed = find_program(isa.qemu_user_command()[0]).is_some();
    UserError::new(format!(
        "{} is an {} program, which this {host} machine cannot run by itself",
        path.display(),
        isa.name()
    ))
    .hint(format!(
        "run it under an emulator with --runner '{}'{}",
        shell_words(&suggested),
        if installed {
            ""
        } else {
            " (apt-get install qemu-user)"
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<String> {
        split_words(text).unwrap()
    }

    #[test]
    fn words_split_as_a_shell_splits_them() {
        assert_eq!(
            split("qemu-aarch64 -L /usr/aarch64-linux-gnu"),
            ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
        );
        assert_eq!(split("  a \t b\n"), ["a", "b"]);
        assert_eq!(split("a 'b c' \"d e\" f\\ g"), ["a", "b c", "d e", "f g"]);
        assert_eq!(split("-E 'A=x y'z"), ["-E", "A=x yz"]);
        assert_eq!(split(r#""a\"b" "\$x" "\n""#), ["a\"b", "$x", "\\n"]);
        assert_eq!(split("'' x"), ["", "x"]);
        // No expansions: the words are what was written.
        assert_eq!(split("$HOME ~ *"), ["$HOME", "~", "*"]);
        assert!(split("").is_empty());
        assert!(split("   ").is_empty());
        for bad in ["a 'b", "a \"b", "a\\", "\"\\"] {
            assert!(split_words(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn quoted_words_split_back_to_themselves() {
        for words in [
            vec!["qemu-aarch64", "-L", "/opt/my sysroot"],
            vec!["a'b", "", "$x", "c\"d", "e\\f"],
        ] {
            let argv: Vec<OsString> = words.iter().map(OsString::from).collect();
            assert_eq!(split(&shell_words(&argv)), words);
        }
    }

    #[test]
    fn the_prefix_goes_before_the_binary() {
        let prefix = RunPrefix {
            words: vec!["qemu-aarch64".into(), "-L".into(), "/x y".into()],
        };
        assert_eq!(
            prefix.argv(Path::new("/b/lua"), &["s.lua".into()]),
            ["qemu-aarch64", "-L", "/x y", "/b/lua", "s.lua"].map(OsString::from)
        );
        assert_eq!(prefix.command_line(), "qemu-aarch64 -L '/x y'");
    }

    #[test]
    fn the_script_runs_the_binary_under_the_prefix() {
        let dir = std::env::temp_dir().join(format!("rivet-run-prefix-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // `echo` as the prefix: the script prints the words it would run.
        let prefix = RunPrefix {
            words: vec!["echo".into(), "it's".into()],
        };
        let script = prefix
            .write_script(Path::new("/some dir/lua"), &dir)
            .unwrap();
        assert_eq!(script, dir.join("lua"));
        let out = std::process::Command::new(&script)
            .args(["a b", "c"])
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "it's /some dir/lua a b c\n"
        );
    }

    #[test]
    fn missing_or_empty_runners_are_errors() {
        let e = RunPrefix::parse("", "--runner").unwrap_err();
        assert!(e.message.contains("is empty"), "{e:?}");
        let e = RunPrefix::parse("qemu-nonexistent-isa -L /x", "--runner").unwrap_err();
        assert!(e.message.contains("not a program on PATH"), "{e:?}");
        assert!(e.hint.unwrap().contains("apt-get install qemu-user"));
        let e = RunPrefix::parse("/nonexistent/emulator", "--runner").unwrap_err();
        assert!(e.message.contains("no such executable file"), "{e:?}");
        let e = RunPrefix::parse("sh 'x", "--runner").unwrap_err();
        assert!(e.message.contains("not closed"), "{e:?}");
        assert_eq!(
            RunPrefix::parse("sh -c", "--runner").unwrap().words(),
            ["sh", "-c"]
        );
    }

    /// Debian's qemu-user-binfmt entry for AArch64, as /proc/sys/fs/binfmt_misc shows it.
    const QEMU_AARCH64_ENTRY: &str = "enabled\n\
        interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n\
        flags: PF\n\
        offset 0\n\
        magic 7f454c460201010000000000000000000200b700\n\
        mask ffffffffffffff00fffffffffffffffffeffffff\n";

    fn elf_header(machine: u16, e_type: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        h[16..18].copy_from_slice(&e_type.to_le_bytes());
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h
    }

    #[test]
    fn binfmt_entries_take_the_binaries_their_magic_matches() {
        // Executables (ET_EXEC) and PIEs (ET_DYN: the mask drops the type's low bit).
        assert!(binfmt_entry_takes(QEMU_AARCH64_ENTRY, &elf_header(183, 2)));
        assert!(binfmt_entry_takes(QEMU_AARCH64_ENTRY, &elf_header(183, 3)));
        assert!(!binfmt_entry_takes(QEMU_AARCH64_ENTRY, &elf_header(62, 2)));
        assert!(!binfmt_entry_takes(
            QEMU_AARCH64_ENTRY,
            &elf_header(183, 2)[..10]
        ));
        let disabled = QEMU_AARCH64_ENTRY.replacen("enabled", "disabled", 1);
        assert!(!binfmt_entry_takes(&disabled, &elf_header(183, 2)));
        let by_extension = "enabled\ninterpreter /usr/bin/wine\nflags: \nextension .exe\n";
        assert!(!binfmt_entry_takes(by_extension, &elf_header(183, 2)));
    }

    #[test]
    fn only_foreign_elf_files_need_a_runner() {
        let dir = std::env::temp_dir().join(format!("rivet-foreign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (native, foreign, script) = (dir.join("n"), dir.join("f"), dir.join("s"));
        let host = host_isa().expect("Rivet's tests run on x86-64 or AArch64");
        let machine = |isa| if isa == Isa::X86_64 { 62 } else { 183 };
        let other = if host == Isa::X86_64 {
            Isa::Aarch64
        } else {
            Isa::X86_64
        };
        std::fs::write(&native, elf_header(machine(host), 2)).unwrap();
        std::fs::write(&foreign, elf_header(machine(other), 2)).unwrap();
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let results = [
            cannot_run_here(&native),
            cannot_run_here(&foreign),
            cannot_run_here(&script),
        ];
        let foreign_header = elf_header(machine(other), 2);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(results[0], None);
        assert_eq!(results[2], None);
        // Unless this machine's kernel has an emulator registered for it.
        let expected = (!binfmt_takes(&foreign_header)).then_some(other);
        assert_eq!(results[1], expected);
        let e = needs_runner(Path::new("/b/lua"), Isa::Aarch64);
        assert!(e.message.contains("is an AArch64 program"), "{e:?}");
        assert!(
            e.hint
                .unwrap()
                .contains("--runner 'qemu-aarch64 -L /usr/aarch64-linux-gnu'")
        );
    }
}
