//! `rivet optimize --hugify`: the output maps its hot text on a transparent huge page at
//! start-up, with generated code and no library, and otherwise runs exactly as without it.
//!
//! - Differential: programs (PIE and not, gcc and clang) and a shared library optimized with
//!   `--hugify --verify` print the same and exit the same as the originals; so do they with
//!   THP disabled for the process (`nothp`: prctl PR_SET_THP_DISABLE, kept across execve) and
//!   with the kernel's setting read as `never` (sysfs files bind-mounted over in a private
//!   mount namespace), where the start-up code must leave the text as it was.
//! - Evidence: `/proc/self/smaps` of the running program shows the hot function in anonymous
//!   memory backed by AnonHugePages when THP is `always` or `madvise` (the test fails, rather
//!   than passing vacuously, on a machine set to `never`), and file-backed when it falls back.
//! - System calls: strace shows the start-up code's calls, in order, with their arguments.
//! - `rivet verify` rejects a hook that does not save a register and a range that is not
//!   aligned to huge pages.
//! - The entry hook keeps rdx, the dynamic linker's finalizer: the shared library's destructor
//!   still runs at exit of a hugified executable.
//!
//! Tests run as root (CI does): the `never` case needs a mount namespace.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{rivet, s, scratch};

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/hugify")
        .join(name)
}

fn cc(compiler: &str, args: &[&str], out: &Path) {
    let st = Command::new(compiler)
        .args(["-g", "-O2", "-Wl,--emit-relocs", "-I"])
        .arg(source(""))
        .args(args)
        .arg("-o")
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("{compiler} is required (scripts/test.sh installs it): {e}"));
    assert!(st.success(), "{compiler} {args:?}");
}

/// tests/hugify/nothp.c, built in `dir`.
fn nothp(dir: &Path) -> PathBuf {
    let out = dir.join("nothp");
    let st = Command::new("gcc")
        .arg(source("nothp.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("gcc is required (scripts/test.sh installs it)");
    assert!(st.success(), "gcc nothp.c");
    out
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("the program runs")
}

/// `rivet optimize BIN --profile PROFILE -o OUT --hugify --verify`, which must succeed and say
/// it added the start-up code.
fn hugify(bin: &Path, profile: &Path, out: &Path) {
    let r = rivet(&[
        "optimize",
        s(bin),
        "--profile",
        s(profile),
        "-o",
        s(out),
        "--hugify",
        "--verify",
    ]);
    ok(&r, "rivet optimize --hugify --verify");
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.contains("mapped on huge pages at start-up"),
        "no huge-page start-up code added: {text}{}",
        String::from_utf8_lossy(&r.stderr)
    );
}

/// hot.c built with `compiler flags` in `dir`, instrumented, trained and optimized with
/// `--hugify`: (original, hugified).
fn hugified_program(dir: &Path, compiler: &str, flags: &[&str]) -> (PathBuf, PathBuf) {
    let bin = dir.join("hot");
    let src = source("hot.c");
    let mut args = vec![s(&src)];
    args.extend_from_slice(flags);
    cc(compiler, &args, &bin);
    let inst = dir.join("hot.inst");
    let profile = dir.join("hot.counts");
    ok(
        &rivet(&[
            "instrument",
            s(&bin),
            "-o",
            s(&inst),
            "--profile",
            s(&profile),
        ]),
        "rivet instrument",
    );
    let train = run(Command::new(&inst).arg("200000"));
    assert!(
        train.status.code().is_some(),
        "the instrumented program ran"
    );
    let out = dir.join("hot.huge");
    hugify(&bin, &profile, &out);
    (bin, out)
}

/// libhot.so and user (linked against it) in `dir`; the library instrumented, trained through
/// the user, and optimized with `--hugify` into `dir/huge/libhot.so`: (original library
/// directory, hugified library directory, user).
fn hugified_library(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let lib = dir.join("libhot.so");
    let (lib_src, user_src) = (source("libhot.c"), source("user.c"));
    cc("gcc", &["-shared", "-fPIC", s(&lib_src)], &lib);
    let user = dir.join("user");
    cc("gcc", &[s(&user_src), "-L", s(dir), "-lhot"], &user);
    let inst_dir = dir.join("inst");
    let huge_dir = dir.join("huge");
    std::fs::create_dir_all(&inst_dir).unwrap();
    std::fs::create_dir_all(&huge_dir).unwrap();
    let profile = dir.join("libhot.counts");
    ok(
        &rivet(&[
            "instrument",
            s(&lib),
            "-o",
            s(&inst_dir.join("libhot.so")),
            "--profile",
            s(&profile),
        ]),
        "rivet instrument libhot.so",
    );
    let train = run(Command::new(&user)
        .arg("200000")
        .env("LD_LIBRARY_PATH", &inst_dir));
    assert!(
        train.status.code().is_some(),
        "the user of the instrumented library ran"
    );
    hugify(&lib, &profile, &huge_dir.join("libhot.so"));
    (dir.to_path_buf(), huge_dir, user)
}

/// (exit code, stdout) of `cmd`.
fn behaviour(cmd: &mut Command) -> (Option<i32>, Vec<u8>) {
    let out = run(cmd);
    (out.status.code(), out.stdout)
}

/// What smaps.h's report() printed: (AnonHugePages in kB, inode of the mapping).
fn hot_mapping(out: &Output) -> (u64, u64) {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("hot-mapping anon_huge_kb="))
        .unwrap_or_else(|| panic!("no smaps report in: {err}"));
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    (field("anon_huge_kb="), field("inode="))
}

/// The kernel's THP mode (the bracketed word of the global setting).
fn thp_mode() -> String {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .expect("/sys/kernel/mm/transparent_hugepage/enabled is readable (a kernel with THP)");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .unwrap_or_default()
        .to_string()
}

fn require_thp() {
    let mode = thp_mode();
    assert!(
        mode == "always" || mode == "madvise",
        "transparent huge pages are `{mode}` on this machine: the huge-page evidence needs \
         `madvise` or `always` (as root: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled)"
    );
}

#[test]
fn hugified_programs_and_libraries_print_and_exit_as_the_originals_with_thp_on_or_off() {
    let dir = scratch("hugify", "differential");
    let wrapper = nothp(&dir);
    let variants: [(&str, &[&str]); 3] = [
        ("gcc", &["-pie", "-fPIE"]),
        ("gcc", &["-no-pie", "-fno-PIE"]),
        ("clang-19", &["-pie", "-fPIE"]),
    ];
    for (i, (compiler, flags)) in variants.iter().enumerate() {
        let vdir = dir.join(format!("v{i}"));
        std::fs::create_dir_all(&vdir).unwrap();
        let (bin, huge) = hugified_program(&vdir, compiler, flags);
        for n in ["0", "1", "1000", "123456"] {
            let want = behaviour(Command::new(&bin).arg(n));
            assert_eq!(
                behaviour(Command::new(&huge).arg(n)),
                want,
                "{compiler} {flags:?}: hugified output differs for {n}"
            );
            assert_eq!(
                behaviour(Command::new(&wrapper).arg(&huge).arg(n)),
                want,
                "{compiler} {flags:?}: hugified output with THP disabled differs for {n}"
            );
        }
    }
    let (orig_dir, huge_dir, user) = hugified_library(&dir);
    for n in ["0", "1000", "123456"] {
        let want = behaviour(Command::new(&user).arg(n).env("LD_LIBRARY_PATH", &orig_dir));
        assert!(
            String::from_utf8_lossy(&want.1).contains("libhot fini"),
            "the library's destructor printed"
        );
        assert_eq!(
            behaviour(Command::new(&user).arg(n).env("LD_LIBRARY_PATH", &huge_dir)),
            want,
            "user of the hugified library differs for {n}"
        );
        assert_eq!(
            behaviour(
                Command::new(&wrapper)
                    .arg(&user)
                    .arg(n)
                    .env("LD_LIBRARY_PATH", &huge_dir)
            ),
            want,
            "user of the hugified library with THP disabled differs for {n}"
        );
    }
}

#[test]
fn the_entry_hook_keeps_the_dynamic_linkers_finalizer_so_library_destructors_run() {
    // user is the executable hugified here; libhot.so's destructor runs from the finalizer
    // _start received in rdx, which the hook must pass on.
    let dir = scratch("hugify", "finalizer");
    let lib = dir.join("libhot.so");
    let (lib_src, user_src) = (source("libhot.c"), source("user.c"));
    cc("gcc", &["-shared", "-fPIC", s(&lib_src)], &lib);
    let user = dir.join("user");
    cc("gcc", &[s(&user_src), "-L", s(&dir), "-lhot"], &user);
    let inst = dir.join("user.inst");
    let profile = dir.join("user.counts");
    ok(
        &rivet(&[
            "instrument",
            s(&user),
            "-o",
            s(&inst),
            "--profile",
            s(&profile),
        ]),
        "rivet instrument user",
    );
    let train = run(Command::new(&inst).arg("1000").env("LD_LIBRARY_PATH", &dir));
    assert!(train.status.code().is_some(), "the instrumented user ran");
    let huge = dir.join("user.huge");
    hugify(&user, &profile, &huge);
    let want = behaviour(Command::new(&user).arg("5000").env("LD_LIBRARY_PATH", &dir));
    let got = behaviour(Command::new(&huge).arg("5000").env("LD_LIBRARY_PATH", &dir));
    assert!(
        String::from_utf8_lossy(&got.1).contains("libhot fini"),
        "destructor ran"
    );
    assert_eq!(got, want);
}

#[test]
fn the_hot_text_runs_from_a_transparent_huge_page_when_thp_allows_and_from_the_file_otherwise() {
    require_thp();
    let dir = scratch("hugify", "smaps");
    let wrapper = nothp(&dir);
    let (bin, huge) = hugified_program(&dir, "gcc", &[]);
    let (orig_huge_kb, orig_inode) = hot_mapping(&run(Command::new(&bin).args(["10", "smaps"])));
    assert_eq!(orig_huge_kb, 0, "the original's text is not on huge pages");
    assert_ne!(orig_inode, 0, "the original's text is file-backed");
    let (huge_kb, inode) = hot_mapping(&run(Command::new(&huge).args(["10", "smaps"])));
    assert_eq!(inode, 0, "the hot text is the anonymous copy");
    assert!(
        huge_kb >= 2048,
        "the hot text is backed by a transparent huge page (AnonHugePages {huge_kb} kB)"
    );
    let (off_kb, off_inode) = hot_mapping(&run(Command::new(&wrapper)
        .arg(&huge)
        .args(["10", "smaps"])));
    assert_eq!(off_kb, 0, "THP disabled for the process: no huge page");
    assert_ne!(
        off_inode, 0,
        "THP disabled for the process: the text stays file-backed"
    );

    let (orig_dir, huge_dir, user) = hugified_library(&dir.join("lib"));
    let (kb, inode) = hot_mapping(&run(Command::new(&user)
        .args(["10", "smaps"])
        .env("LD_LIBRARY_PATH", &huge_dir)));
    assert_eq!(inode, 0, "the library's hot text is the anonymous copy");
    assert!(
        kb >= 2048,
        "the library's hot text is on a huge page ({kb} kB)"
    );
    let (kb, inode) = hot_mapping(&run(Command::new(&user)
        .args(["10", "smaps"])
        .env("LD_LIBRARY_PATH", &orig_dir)));
    assert_eq!(
        (kb, inode != 0),
        (0, true),
        "the original library is file-backed"
    );
}

/// The system calls strace shows `huge` make, from the start-up code's prctl on, one per line
/// (only those it may issue).
fn startup_syscalls(prefix: &[&Path], huge: &Path, dir: &Path) -> Vec<String> {
    let trace = dir.join("strace.out");
    let mut cmd = Command::new("strace");
    cmd.args(["-o", s(&trace), "-e"])
        .arg("trace=prctl,openat,read,close,mmap,munmap,madvise,mprotect,mremap")
        .args(prefix)
        .arg(huge)
        .arg("10");
    let out = cmd
        .output()
        .expect("strace is required (apt-get install strace)");
    assert!(out.status.code().is_some(), "strace ran the program");
    let text = std::fs::read_to_string(&trace).unwrap();
    // The hook runs after the dynamic linker, whose last act here is not a prctl.
    let start = text
        .lines()
        .position(|l| l.starts_with("prctl(PR_GET_THP_DISABLE"))
        .unwrap_or_else(|| panic!("the start-up code's prctl is not in the trace:\n{text}"));
    text.lines()
        .skip(start)
        .take_while(|l| !l.contains("/proc/self/smaps") && !l.starts_with("+++"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_startup_code_issues_prctl_reads_the_setting_then_maps_advises_copies_protects_and_moves() {
    require_thp();
    let dir = scratch("hugify", "strace");
    let (_, huge) = hugified_program(&dir, "gcc", &[]);
    let calls = startup_syscalls(&[], &huge, &dir);
    // A kernel without per-size THP settings (before 6.8) has no hugepages-2048kB file: its
    // failed open is left out, the global setting is read instead.
    let calls: Vec<String> = calls
        .into_iter()
        .filter(|l| !(l.starts_with("openat") && l.contains("= -1 ENOENT")))
        .collect();
    let names: Vec<&str> = calls
        .iter()
        .map(|l| l.split('(').next().unwrap_or(""))
        .collect();
    // prctl; two settings read (the per-size one says `inherit` here, or decides by itself);
    // the mapping, its trimming, the advice, the protection and the move.
    let expect_prefix = ["prctl", "openat", "read", "close"];
    assert_eq!(&names[..4], &expect_prefix, "{calls:#?}");
    let mmap = names.iter().position(|n| *n == "mmap").expect("an mmap");
    let rest: Vec<&str> = names[mmap..]
        .iter()
        .copied()
        .filter(|n| *n != "munmap")
        .take(4)
        .collect();
    assert_eq!(
        rest,
        ["mmap", "madvise", "mprotect", "mremap"],
        "{calls:#?}"
    );
    let line = |name: &str| calls.iter().find(|l| l.starts_with(name)).unwrap();
    assert!(line("prctl").ends_with("= 0"), "{}", line("prctl"));
    assert!(
        calls[1].contains("/sys/kernel/mm/transparent_hugepage/"),
        "{}",
        calls[1]
    );
    assert!(
        line("mmap(NULL").contains("PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0"),
        "{}",
        line("mmap(NULL")
    );
    assert!(
        line("madvise").contains("MADV_HUGEPAGE) = 0"),
        "{}",
        line("madvise")
    );
    assert!(
        line("mprotect").contains("PROT_READ|PROT_EXEC) = 0"),
        "{}",
        line("mprotect")
    );
    // mremap(old, len, len, MREMAP_MAYMOVE|MREMAP_FIXED, dest) = dest, dest 2 MiB-aligned.
    let mremap = line("mremap");
    assert!(mremap.contains("MREMAP_MAYMOVE|MREMAP_FIXED"), "{mremap}");
    let dest = mremap
        .rsplit_once(", ")
        .and_then(|(_, d)| d.split(')').next())
        .unwrap();
    let result = mremap.rsplit_once("= ").unwrap().1.trim();
    assert_eq!(dest, result, "the copy landed where asked: {mremap}");
    let dest = u64::from_str_radix(dest.trim_start_matches("0x"), 16).unwrap();
    assert_eq!(dest % (2 << 20), 0, "{mremap}");
    assert!(
        !calls
            .iter()
            .any(|l| l.starts_with("munmap") && l.contains(&format!("{dest:#x}"))),
        "the moved text is not unmapped: {calls:#?}"
    );
}

#[test]
fn with_thp_disabled_for_the_process_or_set_to_never_the_startup_code_maps_nothing() {
    let dir = scratch("hugify", "fallback");
    let wrapper = nothp(&dir);
    let (bin, huge) = hugified_program(&dir, "gcc", &[]);
    let want = behaviour(Command::new(&bin).arg("10"));

    // PR_SET_THP_DISABLE: the prctl answers 1 and nothing else follows.
    let calls = startup_syscalls(&[&wrapper], &huge, &dir);
    assert!(calls[0].ends_with("= 1"), "{calls:#?}");
    assert!(
        !calls.iter().any(|l| l.starts_with("madvise")
            || l.starts_with("mremap")
            || l.contains("transparent_hugepage")),
        "{calls:#?}"
    );

    // `never`, as the kernel's setting reads in a private mount namespace.
    let id = Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&id.stdout).trim(),
        "0",
        "the `never` case bind-mounts over sysfs in a private mount namespace: run as root (CI does)"
    );
    let never = dir.join("never");
    let inherit = dir.join("inherit");
    std::fs::write(&never, "always madvise [never]\n").unwrap();
    std::fs::write(&inherit, "always [inherit] madvise never\n").unwrap();
    let script = format!(
        "mount --bind {never} /sys/kernel/mm/transparent_hugepage/enabled && \
         mount --bind {inherit} /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled && \
         exec \"$@\"",
        never = s(&never),
        inherit = s(&inherit),
    );
    let unshare: [&Path; 6] = [
        Path::new("unshare"),
        Path::new("-m"),
        Path::new("sh"),
        Path::new("-c"),
        Path::new(&script),
        Path::new("sh"),
    ];
    let out = run(Command::new(unshare[0])
        .args(&unshare[1..])
        .arg(&huge)
        .args(["10", "smaps"]));
    assert_eq!((out.status.code(), out.stdout.clone()), want, "{out:?}");
    let (kb, inode) = hot_mapping(&out);
    assert_eq!(kb, 0, "THP `never`: no huge page");
    assert_ne!(inode, 0, "THP `never`: the text stays file-backed");
    let trace = dir.join("never.strace");
    let traced = run(Command::new(unshare[0])
        .args(&unshare[1..])
        .args(["strace", "-o", s(&trace), "-e"])
        .arg("trace=prctl,openat,read,madvise,mremap")
        .arg(&huge)
        .arg("10"));
    assert_eq!((traced.status.code(), traced.stdout), want);
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(
        text.contains("read(3, \"always madvise [never]\\n\""),
        "the start-up code read the setting:\n{text}"
    );
    assert!(
        !text.contains("madvise(") && !text.contains("mremap("),
        "nothing mapped under `never`:\n{text}"
    );
}

/// The output file's bytes at `addr`, for corrupting a copy.
fn file_offset(image: &[u8], addr: u64) -> usize {
    let elf = rivet_elf::ElfFile::parse(image).unwrap();
    elf.file_offset_of(rivet_elf::Vaddr(addr)).unwrap().0 as usize
}

#[test]
fn verify_rejects_a_hook_that_skips_a_register_or_jumps_elsewhere_and_a_misaligned_range() {
    let dir = scratch("hugify", "verify");
    let (bin, huge) = hugified_program(&dir, "gcc", &[]);
    let r = rivet(&["verify", s(&bin), s(&huge)]);
    ok(&r, "rivet verify of a good output");
    let image = std::fs::read(&huge).unwrap();
    let (section, entry) = {
        let elf = rivet_elf::ElfFile::parse(&image).unwrap();
        let sec = elf.section_by_name(".rivet.hugify").expect("the section");
        (sec.addr.get(), elf.entry.get())
    };
    let corrupt = |name: &str, change: &dyn Fn(&mut Vec<u8>), expect: &str| {
        let mut bytes = image.clone();
        change(&mut bytes);
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        let r = rivet(&["verify", s(&bin), s(&path)]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{name} passed verification");
        assert!(err.contains(expect), "{name}: {err}");
    };
    // `push %rcx` (0x51), the hook's third instruction after pushf and push %rax, becomes
    // `push %rbx` (0x53).
    let push_rcx = file_offset(&image, entry) + 2;
    assert_eq!(image[push_rcx], 0x51);
    corrupt(
        "skips-rcx",
        &|b| b[push_rcx] = 0x53,
        "does not save the flags",
    );
    // The jump's displacement off by one.
    // pushfq (1 byte), push rax..rdi (5), push r8..r11 (8), call (5), the pops (8 + 5), popfq.
    let jmp = file_offset(&image, entry) + 1 + 5 + 8 + 5 + 8 + 5 + 1;
    assert_eq!(image[jmp], 0xe9, "the hook's jmp rel32");
    corrupt(
        "jumps-elsewhere",
        &|b| b[jmp + 1] = b[jmp + 1].wrapping_add(1),
        "not a jump to",
    );
    // The range's end moved by a page.
    let end_word = file_offset(&image, section) + 16;
    corrupt(
        "misaligned",
        &|b| {
            let v = u64::from_le_bytes(b[end_word..end_word + 8].try_into().unwrap());
            b[end_word..end_word + 8].copy_from_slice(&v.wrapping_add(4096).to_le_bytes());
        },
        "not a nonempty range of whole 2 MiB pages",
    );
}
