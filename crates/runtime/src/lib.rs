//! The instrumentation runtime: the code an instrumented binary runs once at start-up so that
//! its counters count straight into the profile file.
//!
//! Counters live in a zero-filled, page-aligned segment of the instrumented binary. At start-up
//! (the entry point of an executable, `DT_INIT` of a shared library) the runtime opens the
//! profile file (`RIVET_PROFILE` from the environment, else the path given at instrumentation
//! time; a `RIVET_PROFILE` ending in `/` names a directory, where the file takes the default
//! path's file name, so that several instrumented objects of one process keep their own
//! files; with per-process files, `.PID` appended), creates it with mode 0600 and without
//! following symlinks, writes the file's prepared first bytes (header, and the path of the
//! binary that holds the map) when the file is new, and maps the file's counter area
//! `MAP_SHARED | MAP_FIXED` over the counter segment. From then on every increment lands in the page cache of the file: a program killed with SIGKILL, crashing, or
//! forking (children inherit the shared mapping and add to the same counts) leaves a complete
//! profile, with no dump at exit, no thread and no watcher process. An existing file of the
//! same instrumentation accumulates; one of another is left alone with a message on stderr,
//! and the program then runs with private counters. Counts made before the mapping (IFUNC
//! resolvers run before any entry point) are kept in anonymous memory while the file is
//! mapped, then added into it.
//!
//! A privileged process (the kernel's `AT_SECURE` is nonzero: set-user-ID, set-group-ID,
//! file capabilities, an LSM transition; or real and effective ids differ; or no `AT_SECURE`
//! entry is found) ignores its environment: whoever started it chose `RIVET_PROFILE`. It counts
//! only into the path fixed at instrumentation time, and only when that path is absolute, its
//! directory is reached without any symbolic link (`openat2` with `RESOLVE_NO_SYMLINKS`), is
//! owned by root or the effective user, writable by no other user (group-writable only for a
//! group the set-group-ID bit granted), and the file there is a regular file owned by the effective user, with
//! one link, writable by nobody else. Otherwise it says why on stderr and keeps its counts
//! private. `AT_SECURE` is read from the auxiliary vector after the environment array the
//! kernel wrote on the stack: the entry point sees that stack; a library's `DT_INIT` gets it
//! through glibc's `argv` (`_dl_argv`, on that stack even when `environ` has moved to the heap).
//!
//! The file's counter area gets its disk blocks when the file is set up (`fallocate`), so a
//! full disk later cannot fault an increment. A fault in the counter segment all the same (the
//! file truncated under the program, a hole punched) reaches the runtime's SIGBUS handler,
//! installed before the file is first mapped and only ever mapped over the counter segment (so
//! no moment of the start-up is exposed), which maps anonymous zero pages over the segment, says once on stderr that counts are no
//! longer saved, and returns: the program goes on. A SIGBUS the runtime did not cause goes to
//! the disposition it replaced (the default: the program ends as it would have without the
//! runtime; a handler: called with the mask, alternate stack, restart and one-shot behaviour
//! it was set with, which the runtime's own handler copies when it takes its place). The replaced disposition lives in a private page after the counters
//! (`DATA_SIZE`), the only memory besides its stack the runtime writes.
//!
//! The runtime is generated as machine code (x86-64 with iced's assembler, AArch64 with
//! `rivet_arch`'s, module `aarch64`) rather than compiled from a freestanding source: it is a
//! few hundred bytes of straight-line system calls, and generating it means there is no
//! runtime library to build, ship, or find at run time. It uses raw Linux system calls only
//! and touches nothing of the program but its own stack and the SIGBUS disposition.
//!
//! The crate also generates the start-up code of `rivet optimize --hugify` (`hugify`), on the
//! same principle: machine code written into the output, no library.

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use rivet_elf::Vaddr;

mod aarch64;
pub mod hugify;

/// What the runtime needs to know, all fixed at instrumentation time.
#[derive(Clone, Debug)]
pub struct RuntimeParams<'a> {
    /// The instruction set of the program.
    pub isa: rivet_arch::Isa,
    /// How AArch64 code counts atomically (the probes' choice; x86-64 ignores it).
    pub atomics: rivet_arch::Atomics,
    /// Address the runtime is placed at.
    pub at: Vaddr,
    /// The counter segment: page-aligned address and size (a page multiple). `DATA_SIZE`
    /// bytes of writable memory follow it.
    pub counters: Vaddr,
    pub counters_size: u64,
    /// The file's first bytes (header and identity; version 1 files: header and map), padded to
    /// the counters' offset in the file (a page multiple).
    pub file_prefix: &'a [u8],
    /// The profile path used when `RIVET_PROFILE` is not set.
    pub default_path: &'a str,
    /// Append `.PID` to the path: one file per process.
    pub per_process: bool,
    /// The executable's entry point, for an executable (the runtime's entry stub jumps there).
    pub entry: Option<Vaddr>,
    /// The shared library's `DT_INIT` function, for a shared library.
    pub init: Option<Vaddr>,
}

/// The generated runtime.
#[derive(Clone, Debug)]
pub struct RuntimeCode {
    pub bytes: Vec<u8>,
    /// The new entry point (executables).
    pub entry_stub: Option<Vaddr>,
    /// The new `DT_INIT` (shared libraries).
    pub init_stub: Option<Vaddr>,
    /// The recorder of indirect call targets: called with the target in rax and the site's
    /// table in r11 (AArch64: x16 and x17, with `bl`), it keeps every register and flag.
    pub recorder: Vaddr,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("assembling the instrumentation runtime: {0}")]
    Assemble(#[from] IcedError),
    #[error("assembling the AArch64 instrumentation runtime: {0}")]
    AssembleAarch64(#[from] rivet_arch::aarch64::asm::AsmError),
    #[error("the default profile path is empty or too long (at most {MAX_PATH} bytes)")]
    Path,
}

/// Target pairs of an indirect call site's table (`rivet_profile::counters::SITE_TARGETS`; the
/// runtime cannot depend on the profile crate, a test keeps the two equal).
pub const SITE_TARGETS: u32 = 7;

/// Longest profile path accepted, pid suffix included.
pub const MAX_PATH: usize = 4000;
/// Name of the environment variable that overrides the profile path.
pub const ENV_PROFILE: &str = "RIVET_PROFILE";

// Linux x86-64 system call numbers and flags.
const SYS_WRITE: i32 = 1;
const SYS_CLOSE: i32 = 3;
const SYS_FSTAT: i32 = 5;
const SYS_MMAP: i32 = 9;
const SYS_MUNMAP: i32 = 11;
const SYS_PREAD64: i32 = 17;
const SYS_PWRITE64: i32 = 18;
const SYS_GETPID: i32 = 39;
const SYS_FLOCK: i32 = 73;
const SYS_FTRUNCATE: i32 = 77;
const SYS_OPENAT: i32 = 257;
const SYS_RT_SIGACTION: i32 = 13;
const SYS_RT_SIGRETURN: i32 = 15;
const SYS_KILL: i32 = 62;
const SYS_GETUID: i32 = 102;
const SYS_GETGID: i32 = 104;
const SYS_GETEUID: i32 = 107;
const SYS_GETEGID: i32 = 108;
const SYS_FALLOCATE: i32 = 285;
const SYS_OPENAT2: i32 = 437;
const EOPNOTSUPP: i32 = 95;
const SIGBUS: i32 = 7;
const SA_SIGINFO: i32 = 4;
const SA_RESTORER: i32 = 0x0400_0000;
const SA_ONSTACK: u32 = 0x0800_0000;
const SA_RESTART: u32 = 0x1000_0000;
const SA_NODEFER: u32 = 0x4000_0000;
const SA_RESETHAND: u32 = 0x8000_0000;
const AT_SECURE: i32 = 23;
/// Auxiliary vector entries looked at before giving up (the kernel writes about 20).
const AUXV_MAX: i32 = 64;
const O_DIRECTORY_CLOEXEC: i32 = 0o200000 | 0o2000000;
const RESOLVE_NO_MAGICLINKS_SYMLINKS: i32 = 0x02 | 0x04;
const S_IFMT: i32 = 0o170000;
const S_IFREG: i32 = 0o100000;
const MAP_PRIVATE_ANONYMOUS: i32 = 0x02 | 0x20;
/// Offsets in x86-64 `struct stat`.
const STAT_NLINK_OFFSET: i32 = 16;
const STAT_MODE_OFFSET: i32 = 24;
const STAT_UID_OFFSET: i32 = 28;
const STAT_GID_OFFSET: i32 = 32;
const AT_FDCWD: i32 = -100;
const O_RDWR_CREAT_NOFOLLOW_CLOEXEC: i32 = 0o2 | 0o100 | 0o400000 | 0o2000000;
const MODE_0600: i32 = 0o600;
const LOCK_EX: i32 = 2;
const LOCK_UN: i32 = 8;
const PROT_READ_WRITE: i32 = 3;
const MAP_SHARED: i32 = 1;
const MAP_FIXED: i32 = 0x10;
/// Offset of `st_size` in x86-64 `struct stat`.
const STAT_SIZE_OFFSET: i32 = 48;

// Stack frame of `start`: path buffer, stat buffer, header buffer, pid digits, whether the
// process is privileged (AT_SECURE), its effective uid, a `struct sigaction` / `open_how`.
const PATH_BUF: i32 = 0;
const STAT_BUF: i32 = 4096;
const HEADER_BUF: i32 = STAT_BUF + 144;
const HEADER_CMP: usize = 64;
const DIGITS_BUF: i32 = HEADER_BUF + 64;
const SECURE_SLOT: i32 = DIGITS_BUF + 32;
const EUID_SLOT: i32 = SECURE_SLOT + 8;
const EGID_SLOT: i32 = EUID_SLOT + 8;
const GID_SLOT: i32 = EGID_SLOT + 8;
const ACTION_BUF: i32 = GID_SLOT + 8;
/// Frame size: with the six saved registers it keeps the stack 16-byte aligned.
const FRAME: i32 = ACTION_BUF + 40;

/// Bytes of private, zero-initialised memory the runtime needs after the counter segment
/// (`RuntimeParams::counters_size` past `counters`), never mapped from the file: the SIGBUS
/// disposition the runtime replaced, which it restores or chains to for faults not its own.
pub const DATA_SIZE: u64 = 4096;

/// Emits a loop over the `size` bytes of counters at `from`: for each nonzero one, with its
/// value in rax and its offset in rcx, the code `body` emits.
fn for_each_nonzero_counter(
    a: &mut CodeAssembler,
    size: u64,
    from: AsmRegister64,
    body: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>,
) -> Result<(), IcedError> {
    let mut next = a.create_label();
    let mut skip = a.create_label();
    let mut done = a.create_label();
    a.xor(ecx, ecx)?;
    a.set_label(&mut next)?;
    a.mov(rax, size)?;
    a.cmp(rcx, rax)?;
    a.jae(done)?;
    a.mov(rax, qword_ptr(from + rcx))?;
    a.test(rax, rax)?;
    a.jz(skip)?;
    body(a)?;
    a.set_label(&mut skip)?;
    a.add(rcx, 8)?;
    a.jmp(next)?;
    a.set_label(&mut done)
}

/// Generates the runtime for `params`.
pub fn generate(params: &RuntimeParams<'_>) -> Result<RuntimeCode, RuntimeError> {
    if params.default_path.is_empty() || params.default_path.len() > MAX_PATH - 24 {
        return Err(RuntimeError::Path);
    }
    match params.isa {
        rivet_arch::Isa::X86_64 => generate_x86_64(params),
        rivet_arch::Isa::Aarch64 => aarch64::generate(params, params.atomics),
    }
}

/// The messages the runtime prints, in the order its data holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Message {
    Prefix,
    Open,
    Write,
    Map,
    Other,
    Long,
    Errno,
    Lost,
    Close,
    RootDir,
    Relative,
    Dir,
    UnsafeDir,
    UnsafeFile,
    NotRegular,
    Space,
    Bus,
}

/// Every message's text (one copy for both runtimes).
fn messages() -> [(Message, &'static str); 17] {
    [
        (Message::Prefix, MSG_PREFIX),
        (Message::Open, "cannot open the profile "),
        (Message::Write, "cannot write the profile "),
        (Message::Map, "cannot map the profile "),
        (
            Message::Other,
            "the profile holds counts of another binary or instrumentation (remove it, or set RIVET_PROFILE): ",
        ),
        (
            Message::Long,
            "the profile path is too long; this run's counts are not saved\n",
        ),
        (Message::Errno, MSG_ERRNO),
        (Message::Lost, MSG_LOST),
        (Message::Close, ")"),
        (Message::RootDir, "/"),
        (
            Message::Relative,
            "a privileged (AT_SECURE) process refuses a relative profile path: ",
        ),
        (
            Message::Dir,
            "a privileged (AT_SECURE) process cannot open, without following symbolic links, the directory of the profile ",
        ),
        (
            Message::UnsafeDir,
            "a privileged (AT_SECURE) process refuses a profile in a directory another user owns or may write: ",
        ),
        (
            Message::UnsafeFile,
            "a privileged (AT_SECURE) process refuses a profile file another user owns or may write, or with other links: ",
        ),
        (Message::NotRegular, "the profile is not a regular file: "),
        (Message::Space, "cannot reserve disk space for the profile "),
        (Message::Bus, MSG_BUS),
    ]
}

/// The x86-64 runtime.
fn generate_x86_64(params: &RuntimeParams<'_>) -> Result<RuntimeCode, RuntimeError> {
    let mut a = CodeAssembler::new(64)?;
    let mut base = a.create_label();
    let mut start = a.create_label();
    let mut print = a.create_label();
    let mut print_cstr = a.create_label();
    let mut print_dec = a.create_label();
    let mut default_path = a.create_label();
    let mut env_name = a.create_label();
    let mut default_name = a.create_label();
    let mut prefix = a.create_label();
    let mut msg_prefix = a.create_label();
    let mut msg_open = a.create_label();
    let mut msg_write = a.create_label();
    let mut msg_map = a.create_label();
    let mut msg_other = a.create_label();
    let mut msg_long = a.create_label();
    let mut msg_errno = a.create_label();
    let mut msg_lost = a.create_label();
    let mut msg_close = a.create_label();
    let mut msg_relative = a.create_label();
    let mut msg_dir = a.create_label();
    let mut msg_unsafe_dir = a.create_label();
    let mut msg_unsafe_file = a.create_label();
    let mut msg_not_regular = a.create_label();
    let mut msg_space = a.create_label();
    let mut msg_bus = a.create_label();
    let mut root_dir = a.create_label();
    let mut bus_handler = a.create_label();
    let mut bus_restorer = a.create_label();

    // The runtime's first byte, where `params.at` is: a trap never executed, holding the label
    // the counter segment's address is computed from.
    a.set_label(&mut base)?;
    a.int3()?;
    // Entry stub of an executable: the stack holds argc, argv..., 0, envp...; rdx holds the
    // dynamic linker's finalizer, which _start passes on.
    let mut entry_label = None;
    if let Some(entry) = params.entry {
        let mut l = a.create_label();
        a.set_label(&mut l)?;
        a.mov(rax, qword_ptr(rsp))?;
        a.lea(rdi, qword_ptr(rsp + rax * 8 + 16))?;
        a.mov(rsi, rdi)?;
        a.push(rdx)?;
        a.push(rdx)?;
        a.call(start)?;
        a.pop(rdx)?;
        a.pop(rdx)?;
        a.jmp(entry.get())?;
        entry_label = Some(l);
    }
    // DT_INIT stub of a shared library: glibc calls it with (argc, argv, envp). envp is the
    // program's `environ` of the moment, which setenv may have moved to the heap; argv is
    // ld.so's `_dl_argv`, on the stack the kernel built, where the environment array the
    // kernel wrote follows argv's null and the auxiliary vector follows that.
    let mut init_label = None;
    if let Some(init) = params.init {
        let mut l = a.create_label();
        a.set_label(&mut l)?;
        a.push(rdi)?;
        a.push(rsi)?;
        a.push(rdx)?;
        let mut no_argv = a.create_label();
        let mut have_argv = a.create_label();
        a.test(rsi, rsi)?;
        a.jz(no_argv)?;
        a.mov(ecx, edi)?;
        a.lea(rsi, qword_ptr(rsi + rcx * 8 + 8))?;
        a.jmp(have_argv)?;
        a.set_label(&mut no_argv)?;
        a.xor(esi, esi)?;
        a.set_label(&mut have_argv)?;
        a.mov(rdi, rdx)?;
        a.call(start)?;
        a.pop(rdx)?;
        a.pop(rsi)?;
        a.pop(rdi)?;
        a.jmp(init.get())?;
        init_label = Some(l);
    }

    // start(envp, stack_envp): envp is where RIVET_PROFILE is looked up, stack_envp the
    // environment array the kernel wrote (0 if unknown), which the auxiliary vector follows.
    // Callee-saved registers: r12 path, r13 fd, r14/r15 scratch, rbx errno-message.
    a.set_label(&mut start)?;
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    a.push(rbx)?;
    a.push(r12)?;
    a.push(r13)?;
    a.push(r14)?;
    a.push(r15)?;
    a.sub(rsp, FRAME)?;
    let mut done = a.create_label();
    let mut fail_errno = a.create_label();
    let mut fail_close = a.create_label();
    let mut fail_plain = a.create_label();
    let mut fail_other = a.create_label();
    let mut fail_truncate = a.create_label();

    // 0. Privileged (set-user-ID, set-group-ID, file capabilities, an LSM transition): the
    //    kernel's AT_SECURE says so. Without an AT_SECURE entry, or with real and effective
    //    ids that differ now, the runtime takes the process for privileged too.
    a.mov(qword_ptr(rsp + SECURE_SLOT), 1)?;
    let mut env_skip = a.create_label();
    let mut aux_loop = a.create_label();
    let mut aux_next = a.create_label();
    let mut aux_done = a.create_label();
    a.test(rsi, rsi)?;
    a.jz(aux_done)?;
    a.set_label(&mut env_skip)?;
    a.mov(rax, qword_ptr(rsi))?;
    a.add(rsi, 8)?;
    a.test(rax, rax)?;
    a.jnz(env_skip)?;
    a.mov(ecx, AUXV_MAX)?;
    a.set_label(&mut aux_loop)?;
    a.mov(rax, qword_ptr(rsi))?;
    a.test(rax, rax)?;
    a.jz(aux_done)?;
    a.cmp(rax, AT_SECURE)?;
    a.jne(aux_next)?;
    a.cmp(qword_ptr(rsi + 8), 0)?;
    a.jne(aux_done)?;
    a.mov(qword_ptr(rsp + SECURE_SLOT), 0)?;
    a.jmp(aux_done)?;
    a.set_label(&mut aux_next)?;
    a.add(rsi, 16)?;
    a.dec(ecx)?;
    a.jnz(aux_loop)?;
    a.set_label(&mut aux_done)?;
    // The effective ids and the real group are needed later (who may own or write the
    // directory and file), whatever the comparison says.
    let mut ids_differ = a.create_label();
    let mut ids_done = a.create_label();
    a.mov(eax, SYS_GETEUID)?;
    a.syscall()?;
    a.mov(qword_ptr(rsp + EUID_SLOT), rax)?;
    a.mov(eax, SYS_GETEGID)?;
    a.syscall()?;
    a.mov(qword_ptr(rsp + EGID_SLOT), rax)?;
    a.mov(eax, SYS_GETGID)?;
    a.syscall()?;
    a.mov(qword_ptr(rsp + GID_SLOT), rax)?;
    a.mov(eax, SYS_GETUID)?;
    a.syscall()?;
    a.cmp(rax, qword_ptr(rsp + EUID_SLOT))?;
    a.jne(ids_differ)?;
    a.mov(rax, qword_ptr(rsp + GID_SLOT))?;
    a.cmp(rax, qword_ptr(rsp + EGID_SLOT))?;
    a.je(ids_done)?;
    a.set_label(&mut ids_differ)?;
    a.mov(qword_ptr(rsp + SECURE_SLOT), 1)?;
    a.set_label(&mut ids_done)?;

    // 1. The path: RIVET_PROFILE=... (first one, non-empty), else the default. r15 says
    //    which.
    a.lea(r12, ptr(default_path))?;
    a.xor(r15d, r15d)?;
    let mut scan = a.create_label();
    let mut scan_next = a.create_label();
    let mut scan_done = a.create_label();
    let mut compare = a.create_label();
    a.test(rdi, rdi)?;
    a.jz(scan_done)?;
    // A privileged process ignores its environment: whoever started it chose it.
    a.cmp(qword_ptr(rsp + SECURE_SLOT), 0)?;
    a.jne(scan_done)?;
    a.set_label(&mut scan)?;
    a.mov(rsi, qword_ptr(rdi))?;
    a.test(rsi, rsi)?;
    a.jz(scan_done)?;
    a.lea(rdx, ptr(env_name))?;
    a.xor(ecx, ecx)?;
    a.set_label(&mut compare)?;
    a.mov(al, byte_ptr(rsi + rcx))?;
    a.cmp(al, byte_ptr(rdx + rcx))?;
    a.jne(scan_next)?;
    a.inc(ecx)?;
    a.cmp(ecx, ENV_PROFILE.len() as i32 + 1)?;
    a.jb(compare)?;
    a.cmp(byte_ptr(rsi + rcx), 0)?;
    a.je(scan_next)?;
    a.lea(r12, qword_ptr(rsi + rcx))?;
    a.mov(r15d, 1)?;
    a.jmp(scan_done)?;
    a.set_label(&mut scan_next)?;
    a.add(rdi, 8)?;
    a.jmp(scan)?;
    a.set_label(&mut scan_done)?;

    // 2. Copy it to the stack (bounded), with `.PID` for per-process files.
    let mut copy = a.create_label();
    let mut copied = a.create_label();
    a.xor(ecx, ecx)?;
    a.set_label(&mut copy)?;
    a.mov(al, byte_ptr(r12 + rcx))?;
    a.mov(byte_ptr(rsp + rcx + PATH_BUF), al)?;
    a.test(al, al)?;
    a.jz(copied)?;
    a.inc(ecx)?;
    a.cmp(ecx, (MAX_PATH - 24) as i32)?;
    a.jb(copy)?;
    a.lea(rbx, ptr(msg_long))?;
    a.jmp(fail_plain)?;
    a.set_label(&mut copied)?;
    a.mov(r12, rsp)?;
    // RIVET_PROFILE naming a directory (a trailing '/'): the file is the default's name in it,
    // so that every instrumented object of a process keeps its own file.
    let mut not_dir = a.create_label();
    a.test(r15, r15)?;
    a.jz(not_dir)?;
    a.test(rcx, rcx)?;
    a.jz(not_dir)?;
    a.cmp(byte_ptr(rsp + rcx + (PATH_BUF - 1)), b'/' as i32)?;
    a.jne(not_dir)?;
    a.lea(rsi, ptr(default_name))?;
    let mut name_copy = a.create_label();
    a.set_label(&mut name_copy)?;
    a.mov(al, byte_ptr(rsi))?;
    a.mov(byte_ptr(rsp + rcx + PATH_BUF), al)?;
    a.test(al, al)?;
    a.jz(not_dir)?;
    a.inc(rsi)?;
    a.inc(ecx)?;
    a.cmp(ecx, (MAX_PATH - 24) as i32)?;
    a.jb(name_copy)?;
    a.lea(rbx, ptr(msg_long))?;
    a.jmp(fail_plain)?;
    a.set_label(&mut not_dir)?;
    if params.per_process {
        // rcx = length; append '.', then the pid's digits (written backwards, then copied).
        a.mov(byte_ptr(rsp + rcx + PATH_BUF), b'.' as i32)?;
        a.inc(ecx)?;
        a.mov(r14, rcx)?;
        a.mov(eax, SYS_GETPID)?;
        a.syscall()?;
        a.lea(rsi, qword_ptr(rsp + DIGITS_BUF + 31))?;
        a.mov(byte_ptr(rsi), 0)?;
        a.mov(ecx, 10)?;
        let mut digit = a.create_label();
        a.set_label(&mut digit)?;
        a.xor(edx, edx)?;
        a.div(rcx)?;
        a.add(dl, b'0' as i32)?;
        a.dec(rsi)?;
        a.mov(byte_ptr(rsi), dl)?;
        a.test(rax, rax)?;
        a.jnz(digit)?;
        let mut append = a.create_label();
        a.set_label(&mut append)?;
        a.mov(al, byte_ptr(rsi))?;
        a.mov(byte_ptr(rsp + r14 + PATH_BUF), al)?;
        a.inc(rsi)?;
        a.inc(r14)?;
        a.test(al, al)?;
        a.jnz(append)?;
    }

    // 3. Open: create 0600, never through a symlink. A privileged process opens only an
    //    absolute path, in a directory reached without any symbolic link, owned by root or
    //    the effective user and writable by no other user (its group may write it when that
    //    is the effective group), so that no other user can choose or swap the file it
    //    writes as its owner.
    let mut opened = a.create_label();
    let mut plain_open = a.create_label();
    a.cmp(qword_ptr(rsp + SECURE_SLOT), 0)?;
    a.je(plain_open)?;
    a.lea(rbx, ptr(msg_relative))?;
    a.xor(eax, eax)?;
    a.cmp(byte_ptr(rsp + PATH_BUF), b'/' as i32)?;
    a.jne(fail_errno)?;
    // rdx = the last '/'.
    let mut slash_scan = a.create_label();
    let mut slash_next = a.create_label();
    let mut slash_done = a.create_label();
    a.xor(ecx, ecx)?;
    a.xor(edx, edx)?;
    a.set_label(&mut slash_scan)?;
    a.mov(al, byte_ptr(rsp + rcx + PATH_BUF))?;
    a.test(al, al)?;
    a.jz(slash_done)?;
    a.cmp(al, b'/' as i32)?;
    a.jne(slash_next)?;
    a.mov(edx, ecx)?;
    a.set_label(&mut slash_next)?;
    a.inc(ecx)?;
    a.jmp(slash_scan)?;
    a.set_label(&mut slash_done)?;
    a.mov(r14, rdx)?;
    a.lea(rsi, ptr(root_dir))?;
    let mut dir_named = a.create_label();
    a.test(rdx, rdx)?;
    a.jz(dir_named)?;
    a.mov(byte_ptr(rsp + rdx + PATH_BUF), 0)?;
    a.lea(rsi, qword_ptr(rsp + PATH_BUF))?;
    a.set_label(&mut dir_named)?;
    // struct open_how { flags, mode, resolve }.
    a.mov(qword_ptr(rsp + ACTION_BUF), O_DIRECTORY_CLOEXEC)?;
    a.mov(qword_ptr(rsp + ACTION_BUF + 8), 0)?;
    a.mov(
        qword_ptr(rsp + ACTION_BUF + 16),
        RESOLVE_NO_MAGICLINKS_SYMLINKS,
    )?;
    a.mov(eax, SYS_OPENAT2)?;
    a.mov(edi, AT_FDCWD)?;
    a.lea(rdx, qword_ptr(rsp + ACTION_BUF))?;
    a.mov(r10d, 24)?;
    a.syscall()?;
    a.mov(byte_ptr(rsp + r14 + PATH_BUF), b'/' as i32)?;
    a.lea(rbx, ptr(msg_dir))?;
    a.test(rax, rax)?;
    a.js(fail_errno)?;
    a.mov(r13, rax)?;
    a.mov(eax, SYS_FSTAT)?;
    a.mov(rdi, r13)?;
    a.lea(rsi, qword_ptr(rsp + STAT_BUF))?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.js(fail_close)?;
    a.lea(rbx, ptr(msg_unsafe_dir))?;
    let mut dir_owner_ok = a.create_label();
    a.mov(eax, dword_ptr(rsp + STAT_BUF + STAT_UID_OFFSET))?;
    a.test(eax, eax)?;
    a.jz(dir_owner_ok)?;
    a.cmp(eax, dword_ptr(rsp + EUID_SLOT))?;
    a.jne(fail_other)?;
    a.set_label(&mut dir_owner_ok)?;
    a.test(dword_ptr(rsp + STAT_BUF + STAT_MODE_OFFSET), 0o002)?;
    a.jnz(fail_other)?;
    // Group-writable only by the group the set-group-ID bit granted (a program's own
    // directory, like /var/games for group games): not by the caller's own group.
    let mut dir_ok = a.create_label();
    a.test(dword_ptr(rsp + STAT_BUF + STAT_MODE_OFFSET), 0o020)?;
    a.jz(dir_ok)?;
    a.mov(eax, dword_ptr(rsp + STAT_BUF + STAT_GID_OFFSET))?;
    a.cmp(eax, dword_ptr(rsp + EGID_SLOT))?;
    a.jne(fail_other)?;
    a.cmp(eax, dword_ptr(rsp + GID_SLOT))?;
    a.je(fail_other)?;
    a.set_label(&mut dir_ok)?;
    a.mov(eax, SYS_OPENAT)?;
    a.mov(rdi, r13)?;
    a.lea(rsi, qword_ptr(rsp + r14 + (PATH_BUF + 1)))?;
    a.mov(edx, O_RDWR_CREAT_NOFOLLOW_CLOEXEC)?;
    a.mov(r10d, MODE_0600)?;
    a.syscall()?;
    a.mov(r15, rax)?;
    a.mov(eax, SYS_CLOSE)?;
    a.mov(rdi, r13)?;
    a.syscall()?;
    a.mov(rax, r15)?;
    a.jmp(opened)?;
    a.set_label(&mut plain_open)?;
    a.mov(eax, SYS_OPENAT)?;
    a.mov(edi, AT_FDCWD)?;
    a.mov(rsi, r12)?;
    a.mov(edx, O_RDWR_CREAT_NOFOLLOW_CLOEXEC)?;
    a.mov(r10d, MODE_0600)?;
    a.syscall()?;
    a.set_label(&mut opened)?;
    a.lea(rbx, ptr(msg_open))?;
    a.test(rax, rax)?;
    a.js(fail_errno)?;
    a.mov(r13, rax)?;
    // 4. One process at a time sets the file up.
    a.mov(eax, SYS_FLOCK)?;
    a.mov(rdi, r13)?;
    a.mov(esi, LOCK_EX)?;
    a.syscall()?;
    a.mov(eax, SYS_FSTAT)?;
    a.mov(rdi, r13)?;
    a.lea(rsi, qword_ptr(rsp + STAT_BUF))?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.js(fail_close)?;
    // Only a regular file: mapping a device or a FIFO means nothing. A privileged process
    // also wants the file its own, with no other name, and writable by nobody else.
    a.lea(rbx, ptr(msg_not_regular))?;
    a.mov(eax, dword_ptr(rsp + STAT_BUF + STAT_MODE_OFFSET))?;
    a.and(eax, S_IFMT)?;
    a.cmp(eax, S_IFREG)?;
    a.jne(fail_other)?;
    let mut file_ok = a.create_label();
    a.cmp(qword_ptr(rsp + SECURE_SLOT), 0)?;
    a.je(file_ok)?;
    a.lea(rbx, ptr(msg_unsafe_file))?;
    a.mov(eax, dword_ptr(rsp + STAT_BUF + STAT_UID_OFFSET))?;
    a.cmp(eax, dword_ptr(rsp + EUID_SLOT))?;
    a.jne(fail_other)?;
    a.cmp(qword_ptr(rsp + STAT_BUF + STAT_NLINK_OFFSET), 1)?;
    a.jne(fail_other)?;
    a.test(dword_ptr(rsp + STAT_BUF + STAT_MODE_OFFSET), 0o022)?;
    a.jnz(fail_other)?;
    a.set_label(&mut file_ok)?;
    let prefix_len = params.file_prefix.len() as u64;
    let total = prefix_len + params.counters_size;
    let mut existing = a.create_label();
    let mut ready = a.create_label();
    a.mov(rax, qword_ptr(rsp + STAT_BUF + STAT_SIZE_OFFSET))?;
    a.test(rax, rax)?;
    a.jnz(existing)?;
    // 5a. A new file: write its first bytes (header and identity), then size it.
    a.lea(rbx, ptr(msg_write))?;
    a.xor(r14d, r14d)?;
    let mut write_more = a.create_label();
    a.set_label(&mut write_more)?;
    a.mov(eax, SYS_PWRITE64)?;
    a.mov(rdi, r13)?;
    a.lea(rsi, ptr(prefix))?;
    a.add(rsi, r14)?;
    a.mov(rdx, prefix_len)?;
    a.sub(rdx, r14)?;
    a.mov(r10, r14)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.jle(fail_truncate)?;
    a.add(r14, rax)?;
    a.mov(rax, prefix_len)?;
    a.cmp(r14, rax)?;
    a.jb(write_more)?;
    // Allocate every counter page now: a page left a hole would need disk space the first
    // time the program touches it, and a full disk then is a SIGBUS. A file system without
    // fallocate gets a sparse file (the SIGBUS handler covers it); no space leaves the file
    // empty, for a later run to set up.
    let mut sparse = a.create_label();
    a.mov(eax, SYS_FALLOCATE)?;
    a.mov(rdi, r13)?;
    a.xor(esi, esi)?;
    a.xor(edx, edx)?;
    a.mov(r10, total)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.jz(ready)?;
    a.cmp(rax, -EOPNOTSUPP)?;
    a.je(sparse)?;
    a.lea(rbx, ptr(msg_space))?;
    // A new file left half set up would pass for another binary's: empty it.
    a.set_label(&mut fail_truncate)?;
    a.mov(r14, rax)?;
    a.mov(eax, SYS_FTRUNCATE)?;
    a.mov(rdi, r13)?;
    a.xor(esi, esi)?;
    a.syscall()?;
    a.mov(rax, r14)?;
    a.jmp(fail_close)?;
    a.set_label(&mut sparse)?;
    a.mov(eax, SYS_FTRUNCATE)?;
    a.mov(rdi, r13)?;
    a.mov(rsi, total)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.js(fail_close)?;
    a.jmp(ready)?;
    // 5b. An existing file: the same size and header, or it is someone else's.
    a.set_label(&mut existing)?;
    a.lea(rbx, ptr(msg_other))?;
    a.mov(rdx, total)?;
    a.cmp(rax, rdx)?;
    a.jne(fail_other)?;
    a.mov(eax, SYS_PREAD64)?;
    a.mov(rdi, r13)?;
    a.lea(rsi, qword_ptr(rsp + HEADER_BUF))?;
    a.mov(edx, HEADER_CMP as i32)?;
    a.xor(r10d, r10d)?;
    a.syscall()?;
    a.cmp(rax, HEADER_CMP as i32)?;
    a.jne(fail_other)?;
    a.lea(rsi, qword_ptr(rsp + HEADER_BUF))?;
    a.lea(rdi, ptr(prefix))?;
    a.xor(ecx, ecx)?;
    let mut cmp_loop = a.create_label();
    a.set_label(&mut cmp_loop)?;
    a.mov(rax, qword_ptr(rsi + rcx))?;
    a.cmp(rax, qword_ptr(rdi + rcx))?;
    a.jne(fail_other)?;
    a.add(ecx, 8)?;
    a.cmp(ecx, HEADER_CMP as i32)?;
    a.jb(cmp_loop)?;
    // Holes in an existing file (copied sparse, or made where fallocate failed) get their
    // blocks now, for the same reason as a new file's.
    a.mov(eax, SYS_FALLOCATE)?;
    a.mov(rdi, r13)?;
    a.xor(esi, esi)?;
    a.xor(edx, edx)?;
    a.mov(r10, total)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.jz(ready)?;
    a.cmp(rax, -EOPNOTSUPP)?;
    a.je(ready)?;
    a.lea(rbx, ptr(msg_space))?;
    a.jmp(fail_close)?;

    // 6. Catch the SIGBUS of a counter page the file no longer backs (truncated, or no disk
    //    space for it), before the file is mapped anywhere: from its first mapping on, a
    //    truncation can only fault where the handler zero-pages. The replaced disposition is
    //    kept for faults not the runtime's.
    a.set_label(&mut ready)?;
    // r14 = the counter segment's run-time address.
    a.lea(r14, ptr(base))?;
    a.mov(rax, params.counters.get().wrapping_sub(params.at.get()))?;
    a.add(r14, rax)?;
    // The handler runs as the one it replaces would have, for the faults it passes on: on
    // the alternate stack, with the same signals blocked, SIGBUS itself unblocked and
    // system calls restarted when that one asked for it (the program's own handler, set
    // before an instrumented library's initializer ran). So the replaced disposition is
    // read first, and its mask and those flags are the new one's; its one-shot flag is
    // honoured when a fault is passed on (see bus_handler).
    a.mov(eax, SYS_RT_SIGACTION)?;
    a.mov(edi, SIGBUS)?;
    a.xor(esi, esi)?;
    a.mov(rdx, r14)?;
    a.mov(r10, params.counters_size)?;
    a.add(rdx, r10)?;
    a.mov(r10d, 8)?;
    a.syscall()?;
    a.mov(rdx, r14)?;
    a.mov(r10, params.counters_size)?;
    a.add(rdx, r10)?;
    a.mov(rax, qword_ptr(rdx + 8))?;
    a.and(eax, (SA_ONSTACK | SA_RESTART | SA_NODEFER) as i32)?;
    a.or(eax, SA_SIGINFO | SA_RESTORER)?;
    a.mov(qword_ptr(rsp + ACTION_BUF + 8), rax)?;
    a.mov(rax, qword_ptr(rdx + 24))?;
    a.mov(qword_ptr(rsp + ACTION_BUF + 24), rax)?;
    a.lea(rax, ptr(bus_handler))?;
    a.mov(qword_ptr(rsp + ACTION_BUF), rax)?;
    a.lea(rax, ptr(bus_restorer))?;
    a.mov(qword_ptr(rsp + ACTION_BUF + 16), rax)?;
    a.mov(eax, SYS_RT_SIGACTION)?;
    a.mov(edi, SIGBUS)?;
    a.lea(rsi, qword_ptr(rsp + ACTION_BUF))?;
    a.mov(rdx, r14)?;
    a.mov(r10, params.counters_size)?;
    a.add(rdx, r10)?;
    a.mov(r10d, 8)?;
    a.syscall()?;
    // 7. Keep what was counted before this point (a library's code run before its own
    //    initializer): copy it to anonymous memory, map the file's counters over the counter
    //    segment, and add the copy into them. Only the counter segment ever maps the file, so
    //    a truncation at any moment faults where the handler above recovers.
    a.lea(rbx, ptr(msg_map))?;
    a.mov(eax, SYS_MMAP)?;
    a.xor(edi, edi)?;
    a.mov(rsi, params.counters_size)?;
    a.mov(edx, PROT_READ_WRITE)?;
    a.mov(r10d, MAP_PRIVATE_ANONYMOUS)?;
    a.mov(r8, -1i64)?;
    a.xor(r9d, r9d)?;
    a.syscall()?;
    a.cmp(rax, -4095)?;
    a.jae(fail_close)?;
    a.mov(r15, rax)?;
    for_each_nonzero_counter(&mut a, params.counters_size, r14, |a| {
        a.mov(qword_ptr(r15 + rcx), rax)
    })?;
    a.mov(eax, SYS_MMAP)?;
    a.mov(rdi, r14)?;
    a.mov(rsi, params.counters_size)?;
    a.mov(edx, PROT_READ_WRITE)?;
    a.mov(r10d, MAP_SHARED | MAP_FIXED)?;
    a.mov(r8, r13)?;
    a.mov(r9, prefix_len)?;
    a.syscall()?;
    a.cmp(rax, r14)?;
    a.jne(fail_close)?;
    for_each_nonzero_counter(&mut a, params.counters_size, r15, |a| {
        a.lock().add(qword_ptr(r14 + rcx), rax)
    })?;
    a.mov(eax, SYS_MUNMAP)?;
    a.mov(rdi, r15)?;
    a.mov(rsi, params.counters_size)?;
    a.syscall()?;
    // 8. Unlock and close: the mapping stays.
    a.mov(eax, SYS_FLOCK)?;
    a.mov(rdi, r13)?;
    a.mov(esi, LOCK_UN)?;
    a.syscall()?;
    a.mov(eax, SYS_CLOSE)?;
    a.mov(rdi, r13)?;
    a.syscall()?;
    a.jmp(done)?;

    // Failures: "rivet: <what> <path>[ (errno N)]; <consequence>" on stderr.
    a.set_label(&mut fail_other)?;
    a.xor(eax, eax)?;
    a.set_label(&mut fail_close)?;
    a.mov(r14, rax)?;
    a.mov(eax, SYS_CLOSE)?;
    a.mov(rdi, r13)?;
    a.syscall()?;
    a.mov(rax, r14)?;
    a.set_label(&mut fail_errno)?;
    a.mov(r14, rax)?;
    a.lea(rsi, ptr(msg_prefix))?;
    a.mov(edx, MSG_PREFIX.len() as i32)?;
    a.call(print)?;
    a.mov(rsi, rbx)?;
    a.call(print_cstr)?;
    a.mov(rsi, r12)?;
    a.call(print_cstr)?;
    let mut no_errno = a.create_label();
    a.test(r14, r14)?;
    a.jns(no_errno)?;
    a.lea(rsi, ptr(msg_errno))?;
    a.mov(edx, MSG_ERRNO.len() as i32)?;
    a.call(print)?;
    a.mov(rax, r14)?;
    a.neg(rax)?;
    a.call(print_dec)?;
    a.lea(rsi, ptr(msg_close))?;
    a.mov(edx, 1)?;
    a.call(print)?;
    a.set_label(&mut no_errno)?;
    a.lea(rsi, ptr(msg_lost))?;
    a.mov(edx, MSG_LOST.len() as i32)?;
    a.call(print)?;
    a.jmp(done)?;
    a.set_label(&mut fail_plain)?;
    a.lea(rsi, ptr(msg_prefix))?;
    a.mov(edx, MSG_PREFIX.len() as i32)?;
    a.call(print)?;
    a.mov(rsi, rbx)?;
    a.call(print_cstr)?;

    a.set_label(&mut done)?;
    a.add(rsp, FRAME)?;
    a.pop(r15)?;
    a.pop(r14)?;
    a.pop(r13)?;
    a.pop(r12)?;
    a.pop(rbx)?;
    a.pop(rbp)?;
    a.ret()?;

    // print(rsi, rdx): write to fd 2.
    a.set_label(&mut print)?;
    a.mov(eax, SYS_WRITE)?;
    a.mov(edi, 2)?;
    a.syscall()?;
    a.ret()?;
    // print_cstr(rsi).
    a.set_label(&mut print_cstr)?;
    a.xor(edx, edx)?;
    let mut strlen = a.create_label();
    let mut strlen_done = a.create_label();
    a.set_label(&mut strlen)?;
    a.cmp(byte_ptr(rsi + rdx), 0)?;
    a.je(strlen_done)?;
    a.inc(rdx)?;
    a.jmp(strlen)?;
    a.set_label(&mut strlen_done)?;
    a.jmp(print)?;
    // print_dec(rax): the decimal digits of rax (uses 24 bytes of its own stack).
    a.set_label(&mut print_dec)?;
    a.sub(rsp, 40)?;
    a.lea(rsi, qword_ptr(rsp + 32))?;
    a.mov(ecx, 10)?;
    let mut dec = a.create_label();
    a.set_label(&mut dec)?;
    a.xor(edx, edx)?;
    a.div(rcx)?;
    a.add(dl, b'0' as i32)?;
    a.dec(rsi)?;
    a.mov(byte_ptr(rsi), dl)?;
    a.test(rax, rax)?;
    a.jnz(dec)?;
    a.lea(rdx, qword_ptr(rsp + 32))?;
    a.sub(rdx, rsi)?;
    a.call(print)?;
    a.add(rsp, 40)?;
    a.ret()?;

    // record(rax = target, r11 = site table): count the target in the first pair holding it
    // or claimed for it, else in the overflow pair. Targets are stored as link-time addresses
    // (run-time minus the load bias), so the profile names them in the binary.
    let mut recorder = a.create_label();
    a.set_label(&mut recorder)?;
    a.pushfq()?;
    a.push(rcx)?;
    a.push(rdx)?;
    a.push(rax)?;
    a.lea(rcx, ptr(base))?;
    a.mov(rdx, params.at.get())?;
    a.sub(rcx, rdx)?;
    a.sub(rax, rcx)?;
    a.xor(ecx, ecx)?;
    let mut slot = a.create_label();
    let mut next_slot = a.create_label();
    let mut hit = a.create_label();
    let mut overflow = a.create_label();
    let mut recorded = a.create_label();
    a.set_label(&mut slot)?;
    a.cmp(ecx, (SITE_TARGETS * 16) as i32)?;
    a.jae(overflow)?;
    a.mov(rdx, qword_ptr(r11 + rcx))?;
    a.cmp(rdx, rax)?;
    a.je(hit)?;
    a.test(rdx, rdx)?;
    a.jnz(next_slot)?;
    // A free pair: claim it (another thread may be claiming it too).
    a.mov(rdx, rax)?;
    a.push(rax)?;
    a.xor(eax, eax)?;
    a.lock().cmpxchg(qword_ptr(r11 + rcx), rdx)?;
    a.pop(rax)?;
    a.je(hit)?;
    a.cmp(qword_ptr(r11 + rcx), rax)?;
    a.je(hit)?;
    a.set_label(&mut next_slot)?;
    a.add(ecx, 16)?;
    a.jmp(slot)?;
    a.set_label(&mut hit)?;
    a.lock().inc(qword_ptr(r11 + rcx + 8))?;
    a.jmp(recorded)?;
    a.set_label(&mut overflow)?;
    a.lock()
        .inc(qword_ptr(r11 + (SITE_TARGETS * 16 + 8) as i32))?;
    a.set_label(&mut recorded)?;
    a.pop(rax)?;
    a.pop(rdx)?;
    a.pop(rcx)?;
    a.popfq()?;
    a.ret()?;

    // bus_handler(sig, info, context): a fault in the counter segment (si_code > 0: the
    // kernel's, not a kill) is the file gone short under the mapping. Anonymous zero pages
    // replace the mapping, so the faulting increment and the rest of the run go on, without
    // saving counts, and one line says so. Anything else goes to the disposition the runtime
    // replaced: a handler is called as the kernel would; the default or ignore is put back,
    // and returning re-runs the faulting instruction under it (a kill is sent again), so the
    // process ends exactly as it would have without the runtime.
    a.set_label(&mut bus_handler)?;
    let mut foreign = a.create_label();
    let mut restore = a.create_label();
    let mut handled = a.create_label();
    a.lea(rcx, ptr(base))?;
    a.mov(rax, params.counters.get().wrapping_sub(params.at.get()))?;
    a.add(rcx, rax)?;
    a.cmp(dword_ptr(rsi + 8), 0)?;
    a.jle(foreign)?;
    a.mov(rax, qword_ptr(rsi + 16))?;
    a.sub(rax, rcx)?;
    a.mov(r8, params.counters_size)?;
    a.cmp(rax, r8)?;
    a.jae(foreign)?;
    a.push(rsi)?;
    a.push(rdx)?;
    a.push(rcx)?;
    a.mov(eax, SYS_MMAP)?;
    a.mov(rdi, rcx)?;
    a.mov(rsi, params.counters_size)?;
    a.mov(edx, PROT_READ_WRITE)?;
    a.mov(r10d, MAP_PRIVATE_ANONYMOUS | MAP_FIXED)?;
    a.mov(r8, -1i64)?;
    a.xor(r9d, r9d)?;
    a.syscall()?;
    a.pop(rcx)?;
    a.pop(rdx)?;
    a.pop(rsi)?;
    a.cmp(rax, -4095)?;
    a.jae(foreign)?;
    a.lea(rsi, ptr(msg_bus))?;
    a.mov(edx, MSG_BUS.len() as i32)?;
    a.call(print)?;
    a.set_label(&mut handled)?;
    a.ret()?;
    a.set_label(&mut foreign)?;
    // rcx + counters_size: the saved `struct sigaction`.
    a.mov(rax, params.counters_size)?;
    a.add(rcx, rax)?;
    a.mov(rax, qword_ptr(rcx))?;
    a.cmp(rax, 1)?;
    a.jbe(restore)?;
    // A one-shot handler (SA_RESETHAND) leaves SIGBUS at its default as it runs, as the
    // kernel would have done delivering to it.
    let mut chain = a.create_label();
    a.test(qword_ptr(rcx + 8), SA_RESETHAND as i32)?;
    a.jz(chain)?;
    a.push(rax)?;
    a.push(rsi)?;
    a.push(rdx)?;
    a.mov(qword_ptr(rcx), 0)?;
    a.mov(eax, SYS_RT_SIGACTION)?;
    a.mov(edi, SIGBUS)?;
    a.mov(rsi, rcx)?;
    a.xor(edx, edx)?;
    a.mov(r10d, 8)?;
    a.syscall()?;
    a.pop(rdx)?;
    a.pop(rsi)?;
    a.pop(rax)?;
    a.set_label(&mut chain)?;
    a.mov(edi, SIGBUS)?;
    a.jmp(rax)?;
    a.set_label(&mut restore)?;
    a.push(rsi)?;
    a.mov(eax, SYS_RT_SIGACTION)?;
    a.mov(edi, SIGBUS)?;
    a.mov(rsi, rcx)?;
    a.xor(edx, edx)?;
    a.mov(r10d, 8)?;
    a.syscall()?;
    a.pop(rsi)?;
    a.cmp(dword_ptr(rsi + 8), 0)?;
    a.jg(handled)?;
    a.mov(eax, SYS_GETPID)?;
    a.syscall()?;
    a.mov(rdi, rax)?;
    a.mov(eax, SYS_KILL)?;
    a.mov(esi, SIGBUS)?;
    a.syscall()?;
    a.ret()?;
    // The return from a handler: the kernel's x86-64 signal frame needs one of its own.
    a.set_label(&mut bus_restorer)?;
    a.mov(eax, SYS_RT_SIGRETURN)?;
    a.syscall()?;

    // Data.
    let cstr = |a: &mut CodeAssembler, label: &mut CodeLabel, s: &str| -> Result<(), IcedError> {
        a.set_label(label)?;
        let mut bytes = s.as_bytes().to_vec();
        bytes.push(0);
        a.db(&bytes)
    };
    cstr(&mut a, &mut default_path, params.default_path)?;
    let file_name = params
        .default_path
        .rsplit('/')
        .next()
        .unwrap_or(params.default_path);
    cstr(&mut a, &mut default_name, file_name)?;
    cstr(&mut a, &mut env_name, &format!("{ENV_PROFILE}="))?;
    for (message, text) in messages() {
        let label = match message {
            Message::Prefix => &mut msg_prefix,
            Message::Open => &mut msg_open,
            Message::Write => &mut msg_write,
            Message::Map => &mut msg_map,
            Message::Other => &mut msg_other,
            Message::Long => &mut msg_long,
            Message::Errno => &mut msg_errno,
            Message::Lost => &mut msg_lost,
            Message::Close => &mut msg_close,
            Message::RootDir => &mut root_dir,
            Message::Relative => &mut msg_relative,
            Message::Dir => &mut msg_dir,
            Message::UnsafeDir => &mut msg_unsafe_dir,
            Message::UnsafeFile => &mut msg_unsafe_file,
            Message::NotRegular => &mut msg_not_regular,
            Message::Space => &mut msg_space,
            Message::Bus => &mut msg_bus,
        };
        cstr(&mut a, label, text)?;
    }
    a.set_label(&mut prefix)?;
    a.db(params.file_prefix)?;

    let result = a.assemble_options(
        params.at.get(),
        iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
    )?;
    let entry_stub = entry_label
        .map(|l| result.label_ip(&l).map(Vaddr))
        .transpose()?;
    let init_stub = init_label
        .map(|l| result.label_ip(&l).map(Vaddr))
        .transpose()?;
    let recorder = Vaddr(result.label_ip(&recorder)?);
    Ok(RuntimeCode {
        bytes: result.inner.code_buffer,
        entry_stub,
        init_stub,
        recorder,
    })
}

const MSG_PREFIX: &str = "rivet: ";
const MSG_ERRNO: &str = " (errno ";
const MSG_LOST: &str = "; this run's counts are not saved\n";
const MSG_BUS: &str = "rivet: the profile file lost pages under the running program (truncated, or no disk space); this process's counts from now on are not saved\n";
