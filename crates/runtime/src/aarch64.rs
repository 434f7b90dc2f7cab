//! The instrumentation runtime as AArch64 machine code: the same start-up steps, promises
//! and messages as the x86-64 one (`super::generate_x86_64`, whose comments explain each
//! step), written with `rivet_arch`'s AArch64 assembler and Linux's AArch64 system call
//! numbers, `struct stat` layout and `open` flags (`O_DIRECTORY` and `O_NOFOLLOW` differ from
//! x86-64's).
//!
//! What differs from x86-64 besides the encoding:
//! - The entry stub keeps x0 (the dynamic loader's finalizer, which `_start` passes to
//!   `__libc_start_main`); the stack at entry holds argc, argv..., 0, envp... as on x86-64.
//! - Every place reached by an indirect branch starts with a BTI landing pad (`bti jc` for
//!   the two stubs, whichever branch the loader uses; `bti c` for the SIGBUS handler, which
//!   the kernel enters as a call), so the runtime runs where BTI is enforced. The stubs go
//!   on to the program's entry with a direct `b` (the kernel enters an executable with no
//!   branch, so its entry needs no pad and may have none); chaining to another SIGBUS
//!   handler goes through x16, which a `bti c` pad accepts from `br`.
//! - The counter increments and the recorder's slot claim are LSE (`stadd`, `cas`) or LL/SC
//!   loops, as chosen for the probes ([`rivet_arch::Atomics`]).
//! - The recorder saves NZCV (`mrs`/`msr`) around its compares; the probes themselves write
//!   no flags.
//! - Counters and file offsets are 4 KiB-aligned, as on x86-64: a kernel with 16 or 64 KiB
//!   pages refuses the `MAP_FIXED` mapping, which the runtime reports like any other mapping
//!   failure (the program runs, its counts are not saved).

use rivet_arch::Atomics;
use rivet_arch::aarch64::asm::{Asm, Cond, Label, SP, ZR};
use rivet_arch::aarch64::probe::{emit_add, emit_increment};
use rivet_arch::aarch64::{BTI_C, BTI_JC, FILL};
use rivet_elf::Vaddr;

use super::{
    ENV_PROFILE, MAX_PATH, MSG_BUS, MSG_ERRNO, MSG_LOST, MSG_PREFIX, RuntimeCode, RuntimeError,
    RuntimeParams, SITE_TARGETS,
};

// Linux AArch64 (asm-generic) system call numbers.
const SYS_FLOCK: u64 = 32;
const SYS_FTRUNCATE: u64 = 46;
const SYS_FALLOCATE: u64 = 47;
const SYS_OPENAT: u64 = 56;
const SYS_CLOSE: u64 = 57;
const SYS_PREAD64: u64 = 67;
const SYS_PWRITE64: u64 = 68;
const SYS_WRITE: u64 = 64;
const SYS_FSTAT: u64 = 80;
const SYS_KILL: u64 = 129;
const SYS_RT_SIGACTION: u64 = 134;
const SYS_RT_SIGRETURN: u64 = 139;
const SYS_GETPID: u64 = 172;
const SYS_GETUID: u64 = 174;
const SYS_GETEUID: u64 = 175;
const SYS_GETGID: u64 = 176;
const SYS_GETEGID: u64 = 177;
const SYS_MUNMAP: u64 = 215;
const SYS_MMAP: u64 = 222;
const SYS_OPENAT2: u64 = 437;
const EOPNOTSUPP: u32 = 95;
const SIGBUS: u64 = 7;
const SA_SIGINFO: u64 = 4;
const SA_RESTORER: u64 = 0x0400_0000;
const SA_ONSTACK: u64 = 0x0800_0000;
const SA_RESTART: u64 = 0x1000_0000;
const SA_NODEFER: u64 = 0x4000_0000;
/// SA_RESETHAND is bit 31 of sa_flags.
const SA_RESETHAND_BIT: u32 = 31;
const AT_SECURE: u32 = 23;
const AUXV_MAX: u64 = 64;
/// AArch64's `O_DIRECTORY` (0o40000) and `O_CLOEXEC`.
const O_DIRECTORY_CLOEXEC: u64 = 0o40000 | 0o2000000;
/// `O_RDWR | O_CREAT | O_NOFOLLOW` (AArch64's 0o100000) `| O_CLOEXEC`.
const O_RDWR_CREAT_NOFOLLOW_CLOEXEC: u64 = 0o2 | 0o100 | 0o100000 | 0o2000000;
const RESOLVE_NO_MAGICLINKS_SYMLINKS: u64 = 0x02 | 0x04;
const MODE_0600: u64 = 0o600;
const AT_FDCWD: i64 = -100;
const LOCK_EX: u64 = 2;
const LOCK_UN: u64 = 8;
const PROT_READ_WRITE: u64 = 3;
const MAP_SHARED: u64 = 1;
const MAP_FIXED: u64 = 0x10;
const MAP_PRIVATE_ANONYMOUS: u64 = 0x02 | 0x20;
/// `S_IFREG >> 12`: the file type in the top four bits of a 16-bit mode.
const S_IFREG_TYPE: u32 = 0o10;
/// Offsets in AArch64's (asm-generic) `struct stat`: nlink is 32 bits here.
const STAT_MODE_OFFSET: u32 = 16;
const STAT_NLINK_OFFSET: u32 = 20;
const STAT_UID_OFFSET: u32 = 24;
const STAT_GID_OFFSET: u32 = 28;
const STAT_SIZE_OFFSET: u32 = 48;
/// Mode bits tested: other-writable (0o002) and group-writable (0o020).
const OTHER_WRITE_BIT: u32 = 1;
const GROUP_WRITE_BIT: u32 = 4;

// Stack frame of `start` (from sp after the frame is made): the small buffers first, where
// `add` and the scaled loads reach them with an immediate, then the path buffer, indexed
// from a register of its own (`PATH_BASE`).
const STAT_BUF: u32 = 0;
const HEADER_BUF: u32 = STAT_BUF + 144;
const HEADER_CMP: u32 = 64;
const DIGITS_BUF: u32 = HEADER_BUF + 64;
const SECURE_SLOT: u32 = DIGITS_BUF + 32;
const EUID_SLOT: u32 = SECURE_SLOT + 8;
const EGID_SLOT: u32 = EUID_SLOT + 8;
const GID_SLOT: u32 = EGID_SLOT + 8;
const ACTION_BUF: u32 = GID_SLOT + 8;
const PATH_BUF: u32 = 512;
/// The frame, a multiple of 16 as AArch64's stack pointer must stay.
const FRAME: u32 = PATH_BUF + MAX_PATH as u32 + 96;
/// The frame is made in two steps: `sub` takes 12 bits, or 12 bits shifted by 12.
const FRAME_HIGH: u32 = FRAME & !0xfff;
const FRAME_LOW: u32 = FRAME & 0xfff;
// Every small slot is reached with an `add` immediate or a scaled offset, and the stack
// pointer stays 16-byte aligned.
const _: () = assert!(ACTION_BUF + 40 <= PATH_BUF && PATH_BUF < 4096 && FRAME.is_multiple_of(16));

// Registers of `start`, kept across its system calls and helper calls (callee-saved).
const PATH: u8 = 19;
const FD: u8 = 20;
const SCRATCH_A: u8 = 21;
const SCRATCH_B: u8 = 22;
const MESSAGE: u8 = 23;
const ENVP: u8 = 24;
const STACK_ENVP: u8 = 25;
/// sp + PATH_BUF: the path buffer.
const PATH_BASE: u8 = 26;
/// The scratch register onward jumps go through (`bti c` accepts `br x16`).
const IP0: u8 = 16;
const IP1: u8 = 17;
const LR: u8 = 30;

/// Goes on to `target`, the program's own entry or initializer, with a direct `b`: an
/// indirect branch would need a landing pad there, and an entry point the kernel jumps to
/// has none. Beyond a `b`'s +-128 MiB, through x16, which the `bti c` of an initializer
/// (called indirectly by the loader, so padded where BTI is on) accepts.
fn jump(a: &mut Asm, target: Vaddr) {
    match rivet_arch::aarch64::b(a.here(), target.get()) {
        Ok(word) => a.word(word),
        Err(_) => {
            a.adr_address(IP0, target.get());
            a.br(IP0);
        }
    }
}

fn sys(a: &mut Asm, number: u64) {
    a.mov_imm(8, number);
    a.svc();
}

/// Emits a loop over the `size` bytes of counters at register `from`: for each nonzero one,
/// with its value in x11 and its offset in x9, the code `body` emits. Uses x9..x11.
fn for_each_nonzero_counter(a: &mut Asm, size: u64, from: u8, body: impl FnOnce(&mut Asm)) {
    let (next, skip, done) = (a.label(), a.label(), a.label());
    a.mov_imm(9, 0);
    a.bind(next);
    a.mov_imm(10, size);
    a.cmp(9, 10);
    a.b_cond(Cond::Hs, done);
    a.ldr_reg(11, from, 9);
    a.cbz(11, skip);
    body(a);
    a.bind(skip);
    a.add_imm(9, 9, 8);
    a.b(next);
    a.bind(done);
}

/// Generates the AArch64 runtime for `params`, counting with `atomics`.
pub(crate) fn generate(
    params: &RuntimeParams<'_>,
    atomics: Atomics,
) -> Result<RuntimeCode, RuntimeError> {
    let mut a = Asm::new(params.at.get());
    let labels: Vec<Label> = (0..24).map(|_| a.label()).collect();
    let [
        base,
        start,
        print,
        print_cstr,
        print_dec,
        default_path,
        env_name,
        default_name,
        prefix,
        msg_prefix,
        msg_open,
        msg_write,
        msg_map,
        msg_other,
        msg_long,
        msg_errno,
        msg_lost,
        msg_close,
        msg_relative,
        msg_dir,
        msg_unsafe_dir,
        msg_unsafe_file,
        msg_not_regular,
        msg_space,
    ] = labels[..]
    else {
        unreachable!("24 labels")
    };
    let (msg_bus, root_dir, bus_handler, bus_restorer, recorder) =
        (a.label(), a.label(), a.label(), a.label(), a.label());

    // The first word, where `params.at` is: a trap never executed.
    a.bind(base);
    a.word(FILL);

    // Entry stub of an executable: sp points at argc, argv..., 0, envp...; x0 holds the
    // dynamic loader's finalizer.
    let entry_label = params.entry.map(|entry| {
        let l = a.label();
        a.bind(l);
        a.word(BTI_JC);
        a.ldr(9, SP, 0);
        a.add_imm(10, SP, 0);
        a.add(1, 10, 9, 3);
        a.add_imm(1, 1, 16);
        a.stp_pre(0, LR, SP, -16);
        a.mov(0, 1);
        a.bl(start);
        a.ldp_post(0, LR, SP, 16);
        jump(&mut a, entry);
        l
    });
    // DT_INIT stub of a shared library: called with (argc, argv, envp); argv is ld.so's
    // `_dl_argv`, on the stack the kernel built (see the x86-64 runtime).
    let init_label = params.init.map(|init| {
        let l = a.label();
        let (no_argv, have_argv) = (a.label(), a.label());
        a.bind(l);
        a.word(BTI_JC);
        a.stp_pre(0, 1, SP, -32);
        a.stp(2, LR, SP, 16);
        a.cbz(1, no_argv);
        a.mov_w(9, 0);
        a.add(1, 1, 9, 3);
        a.add_imm(1, 1, 8);
        a.b(have_argv);
        a.bind(no_argv);
        a.mov_imm(1, 0);
        a.bind(have_argv);
        a.mov(0, 2);
        a.bl(start);
        a.ldp(2, LR, SP, 16);
        a.ldp_post(0, 1, SP, 32);
        jump(&mut a, init);
        l
    });

    // start(envp, stack_envp).
    a.bind(start);
    a.stp_pre(29, LR, SP, -96);
    a.add_imm(29, SP, 0);
    a.stp(19, 20, SP, 16);
    a.stp(21, 22, SP, 32);
    a.stp(23, 24, SP, 48);
    a.stp(25, 26, SP, 64);
    a.stp(27, 28, SP, 80);
    a.sub_imm(SP, SP, FRAME_HIGH);
    a.sub_imm(SP, SP, FRAME_LOW);
    a.mov(ENVP, 0);
    a.mov(STACK_ENVP, 1);
    a.add_imm(PATH_BASE, SP, PATH_BUF);
    let (done, fail_errno, fail_close, fail_plain, fail_other, fail_truncate) = (
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
        a.label(),
    );

    // 0. Privileged? AT_SECURE from the auxiliary vector after the kernel's environment
    //    array; none found, or real and effective ids that differ, count as privileged.
    a.mov_imm(9, 1);
    a.str(9, SP, SECURE_SLOT);
    let (env_skip, aux_loop, aux_next, aux_done) = (a.label(), a.label(), a.label(), a.label());
    a.cbz(STACK_ENVP, aux_done);
    a.bind(env_skip);
    a.ldr(9, STACK_ENVP, 0);
    a.add_imm(STACK_ENVP, STACK_ENVP, 8);
    a.cbnz(9, env_skip);
    a.mov_imm(10, AUXV_MAX);
    a.bind(aux_loop);
    a.ldr(9, STACK_ENVP, 0);
    a.cbz(9, aux_done);
    a.cmp_imm(9, AT_SECURE);
    a.b_cond(Cond::Ne, aux_next);
    a.ldr(9, STACK_ENVP, 8);
    a.cbnz(9, aux_done);
    a.str(ZR, SP, SECURE_SLOT);
    a.b(aux_done);
    a.bind(aux_next);
    a.add_imm(STACK_ENVP, STACK_ENVP, 16);
    a.sub_imm(10, 10, 1);
    a.cbnz(10, aux_loop);
    a.bind(aux_done);
    let (ids_differ, ids_done) = (a.label(), a.label());
    sys(&mut a, SYS_GETEUID);
    a.str(0, SP, EUID_SLOT);
    sys(&mut a, SYS_GETEGID);
    a.str(0, SP, EGID_SLOT);
    sys(&mut a, SYS_GETGID);
    a.str(0, SP, GID_SLOT);
    sys(&mut a, SYS_GETUID);
    a.ldr(9, SP, EUID_SLOT);
    a.cmp(0, 9);
    a.b_cond(Cond::Ne, ids_differ);
    a.ldr(9, SP, GID_SLOT);
    a.ldr(10, SP, EGID_SLOT);
    a.cmp(9, 10);
    a.b_cond(Cond::Eq, ids_done);
    a.bind(ids_differ);
    a.mov_imm(9, 1);
    a.str(9, SP, SECURE_SLOT);
    a.bind(ids_done);

    // 1. The path: the first non-empty RIVET_PROFILE=..., else the default; SCRATCH_B says
    //    which.
    a.adr_label(PATH, default_path);
    a.mov_imm(SCRATCH_B, 0);
    let (scan, scan_next, scan_done, compare) = (a.label(), a.label(), a.label(), a.label());
    a.cbz(ENVP, scan_done);
    a.ldr(9, SP, SECURE_SLOT);
    a.cbnz(9, scan_done);
    a.bind(scan);
    a.ldr(10, ENVP, 0);
    a.cbz(10, scan_done);
    a.adr_label(11, env_name);
    a.mov_imm(9, 0);
    a.bind(compare);
    a.ldrb_reg(12, 10, 9);
    a.ldrb_reg(13, 11, 9);
    a.cmp_w(12, 13);
    a.b_cond(Cond::Ne, scan_next);
    a.add_imm(9, 9, 1);
    a.cmp_imm(9, ENV_PROFILE.len() as u32 + 1);
    a.b_cond(Cond::Lo, compare);
    a.ldrb_reg(12, 10, 9);
    a.cbz_w(12, scan_next);
    a.add(PATH, 10, 9, 0);
    a.mov_imm(SCRATCH_B, 1);
    a.b(scan_done);
    a.bind(scan_next);
    a.add_imm(ENVP, ENVP, 8);
    a.b(scan);
    a.bind(scan_done);

    // 2. Copy it to the stack (bounded), with `.PID` for per-process files.
    let limit = (MAX_PATH - 24) as u32;
    let (copy, copied) = (a.label(), a.label());
    a.mov_imm(9, 0);
    a.bind(copy);
    a.ldrb_reg(12, PATH, 9);
    a.strb_reg(12, PATH_BASE, 9);
    a.cbz_w(12, copied);
    a.add_imm(9, 9, 1);
    a.cmp_imm(9, limit);
    a.b_cond(Cond::Lo, copy);
    a.adr_label(MESSAGE, msg_long);
    a.b(fail_plain);
    a.bind(copied);
    a.add_imm(PATH, SP, PATH_BUF);
    // RIVET_PROFILE naming a directory (a trailing '/'): the default's file name in it.
    let (not_dir, name_copy) = (a.label(), a.label());
    a.cbz(SCRATCH_B, not_dir);
    a.cbz(9, not_dir);
    a.sub_imm(10, 9, 1);
    a.ldrb_reg(12, PATH_BASE, 10);
    a.cmp_imm_w(12, u32::from(b'/'));
    a.b_cond(Cond::Ne, not_dir);
    a.adr_label(11, default_name);
    a.bind(name_copy);
    a.ldrb(12, 11, 0);
    a.strb_reg(12, PATH_BASE, 9);
    a.cbz_w(12, not_dir);
    a.add_imm(11, 11, 1);
    a.add_imm(9, 9, 1);
    a.cmp_imm(9, limit);
    a.b_cond(Cond::Lo, name_copy);
    a.adr_label(MESSAGE, msg_long);
    a.b(fail_plain);
    a.bind(not_dir);
    if params.per_process {
        // x9 = length; append '.', then the pid's digits (written backwards, then copied).
        a.mov_imm(12, u64::from(b'.'));
        a.strb_reg(12, PATH_BASE, 9);
        a.add_imm(SCRATCH_A, 9, 1);
        sys(&mut a, SYS_GETPID);
        a.add_imm(10, SP, DIGITS_BUF + 31);
        a.strb(ZR, 10, 0);
        a.mov_imm(11, 10);
        let (digit, append) = (a.label(), a.label());
        a.bind(digit);
        a.udiv(12, 0, 11);
        a.msub(13, 12, 11, 0);
        a.add_imm(13, 13, u32::from(b'0'));
        a.sub_imm(10, 10, 1);
        a.strb(13, 10, 0);
        a.mov(0, 12);
        a.cbnz(0, digit);
        a.bind(append);
        a.ldrb(12, 10, 0);
        a.strb_reg(12, PATH_BASE, SCRATCH_A);
        a.add_imm(10, 10, 1);
        a.add_imm(SCRATCH_A, SCRATCH_A, 1);
        a.cbnz_w(12, append);
    }

    // 3. Open: 0600, never through a symlink; a privileged process only an absolute path in
    //    a directory reached without symlinks, owned by root or itself, writable by no other
    //    user (its group only when the set-group-ID bit granted that group).
    let (opened, plain_open) = (a.label(), a.label());
    a.ldr(9, SP, SECURE_SLOT);
    a.cbz(9, plain_open);
    a.adr_label(MESSAGE, msg_relative);
    a.mov_imm(0, 0);
    a.ldrb(12, SP, PATH_BUF);
    a.cmp_imm_w(12, u32::from(b'/'));
    a.b_cond(Cond::Ne, fail_errno);
    let (slash_scan, slash_next, slash_done) = (a.label(), a.label(), a.label());
    a.mov_imm(9, 0);
    a.mov_imm(10, 0);
    a.bind(slash_scan);
    a.ldrb_reg(12, PATH_BASE, 9);
    a.cbz_w(12, slash_done);
    a.cmp_imm_w(12, u32::from(b'/'));
    a.b_cond(Cond::Ne, slash_next);
    a.mov(10, 9);
    a.bind(slash_next);
    a.add_imm(9, 9, 1);
    a.b(slash_scan);
    a.bind(slash_done);
    a.mov(SCRATCH_A, 10);
    a.adr_label(1, root_dir);
    let dir_named = a.label();
    a.cbz(10, dir_named);
    a.strb_reg(ZR, PATH_BASE, 10);
    a.add_imm(1, SP, PATH_BUF);
    a.bind(dir_named);
    // struct open_how { flags, mode, resolve }.
    a.mov_imm(9, O_DIRECTORY_CLOEXEC);
    a.str(9, SP, ACTION_BUF);
    a.str(ZR, SP, ACTION_BUF + 8);
    a.mov_imm(9, RESOLVE_NO_MAGICLINKS_SYMLINKS);
    a.str(9, SP, ACTION_BUF + 16);
    a.mov_imm(0, AT_FDCWD as u64);
    a.add_imm(2, SP, ACTION_BUF);
    a.mov_imm(3, 24);
    sys(&mut a, SYS_OPENAT2);
    a.mov_imm(12, u64::from(b'/'));
    a.strb_reg(12, PATH_BASE, SCRATCH_A);
    a.adr_label(MESSAGE, msg_dir);
    a.tbnz(0, 63, fail_errno);
    a.mov(FD, 0);
    a.add_imm(1, SP, STAT_BUF);
    sys(&mut a, SYS_FSTAT);
    a.tbnz(0, 63, fail_close);
    a.adr_label(MESSAGE, msg_unsafe_dir);
    let (dir_owner_ok, dir_ok) = (a.label(), a.label());
    a.ldr_w(9, SP, STAT_BUF + STAT_UID_OFFSET);
    a.cbz_w(9, dir_owner_ok);
    a.ldr_w(10, SP, EUID_SLOT);
    a.cmp_w(9, 10);
    a.b_cond(Cond::Ne, fail_other);
    a.bind(dir_owner_ok);
    a.ldr_w(9, SP, STAT_BUF + STAT_MODE_OFFSET);
    a.tbnz(9, OTHER_WRITE_BIT, fail_other);
    a.tbz(9, GROUP_WRITE_BIT, dir_ok);
    a.ldr_w(10, SP, STAT_BUF + STAT_GID_OFFSET);
    a.ldr_w(11, SP, EGID_SLOT);
    a.cmp_w(10, 11);
    a.b_cond(Cond::Ne, fail_other);
    a.ldr_w(11, SP, GID_SLOT);
    a.cmp_w(10, 11);
    a.b_cond(Cond::Eq, fail_other);
    a.bind(dir_ok);
    a.mov(0, FD);
    a.add_imm(1, SP, PATH_BUF + 1);
    a.add(1, 1, SCRATCH_A, 0);
    a.mov_imm(2, O_RDWR_CREAT_NOFOLLOW_CLOEXEC);
    a.mov_imm(3, MODE_0600);
    sys(&mut a, SYS_OPENAT);
    a.mov(SCRATCH_B, 0);
    a.mov(0, FD);
    sys(&mut a, SYS_CLOSE);
    a.mov(0, SCRATCH_B);
    a.b(opened);
    a.bind(plain_open);
    a.mov_imm(0, AT_FDCWD as u64);
    a.mov(1, PATH);
    a.mov_imm(2, O_RDWR_CREAT_NOFOLLOW_CLOEXEC);
    a.mov_imm(3, MODE_0600);
    sys(&mut a, SYS_OPENAT);
    a.bind(opened);
    a.adr_label(MESSAGE, msg_open);
    a.tbnz(0, 63, fail_errno);
    a.mov(FD, 0);
    // 4. One process at a time sets the file up.
    a.mov_imm(1, LOCK_EX);
    sys(&mut a, SYS_FLOCK);
    a.mov(0, FD);
    a.add_imm(1, SP, STAT_BUF);
    sys(&mut a, SYS_FSTAT);
    a.tbnz(0, 63, fail_close);
    // Only a regular file; a privileged process also wants it its own, with one link and
    // writable by nobody else.
    a.adr_label(MESSAGE, msg_not_regular);
    a.ldr_w(9, SP, STAT_BUF + STAT_MODE_OFFSET);
    a.lsr_w(9, 9, 12);
    a.cmp_imm_w(9, S_IFREG_TYPE);
    a.b_cond(Cond::Ne, fail_other);
    let file_ok = a.label();
    a.ldr(9, SP, SECURE_SLOT);
    a.cbz(9, file_ok);
    a.adr_label(MESSAGE, msg_unsafe_file);
    a.ldr_w(9, SP, STAT_BUF + STAT_UID_OFFSET);
    a.ldr_w(10, SP, EUID_SLOT);
    a.cmp_w(9, 10);
    a.b_cond(Cond::Ne, fail_other);
    a.ldr_w(9, SP, STAT_BUF + STAT_NLINK_OFFSET);
    a.cmp_imm_w(9, 1);
    a.b_cond(Cond::Ne, fail_other);
    a.ldr_w(9, SP, STAT_BUF + STAT_MODE_OFFSET);
    a.tbnz(9, OTHER_WRITE_BIT, fail_other);
    a.tbnz(9, GROUP_WRITE_BIT, fail_other);
    a.bind(file_ok);
    let prefix_len = params.file_prefix.len() as u64;
    let total = prefix_len + params.counters_size;
    let (existing, ready, sparse, write_more) = (a.label(), a.label(), a.label(), a.label());
    a.ldr(9, SP, STAT_BUF + STAT_SIZE_OFFSET);
    a.cbnz(9, existing);
    // 5a. A new file: its first bytes (header and identity), then every counter page allocated.
    a.adr_label(MESSAGE, msg_write);
    a.mov_imm(SCRATCH_A, 0);
    a.bind(write_more);
    a.mov(0, FD);
    a.adr_label(1, prefix);
    a.add(1, 1, SCRATCH_A, 0);
    a.mov_imm(2, prefix_len);
    a.sub(2, 2, SCRATCH_A);
    a.mov(3, SCRATCH_A);
    sys(&mut a, SYS_PWRITE64);
    a.cmp_imm(0, 0);
    a.b_cond(Cond::Le, fail_truncate);
    a.add(SCRATCH_A, SCRATCH_A, 0, 0);
    a.mov_imm(9, prefix_len);
    a.cmp(SCRATCH_A, 9);
    a.b_cond(Cond::Lo, write_more);
    a.mov(0, FD);
    a.mov_imm(1, 0);
    a.mov_imm(2, 0);
    a.mov_imm(3, total);
    sys(&mut a, SYS_FALLOCATE);
    a.cbz(0, ready);
    a.cmn_imm(0, EOPNOTSUPP);
    a.b_cond(Cond::Eq, sparse);
    a.adr_label(MESSAGE, msg_space);
    // A new file left half set up would pass for another binary's: empty it.
    a.bind(fail_truncate);
    a.mov(SCRATCH_A, 0);
    a.mov(0, FD);
    a.mov_imm(1, 0);
    sys(&mut a, SYS_FTRUNCATE);
    a.mov(0, SCRATCH_A);
    a.b(fail_close);
    a.bind(sparse);
    a.mov(0, FD);
    a.mov_imm(1, total);
    sys(&mut a, SYS_FTRUNCATE);
    a.tbnz(0, 63, fail_close);
    a.b(ready);
    // 5b. An existing file: the same size and header, or it is someone else's.
    a.bind(existing);
    a.adr_label(MESSAGE, msg_other);
    a.mov_imm(10, total);
    a.cmp(9, 10);
    a.b_cond(Cond::Ne, fail_other);
    a.mov(0, FD);
    a.add_imm(1, SP, HEADER_BUF);
    a.mov_imm(2, u64::from(HEADER_CMP));
    a.mov_imm(3, 0);
    sys(&mut a, SYS_PREAD64);
    a.cmp_imm(0, HEADER_CMP);
    a.b_cond(Cond::Ne, fail_other);
    a.add_imm(10, SP, HEADER_BUF);
    a.adr_label(11, prefix);
    a.mov_imm(9, 0);
    let cmp_loop = a.label();
    a.bind(cmp_loop);
    a.ldr_reg(12, 10, 9);
    a.ldr_reg(13, 11, 9);
    a.cmp(12, 13);
    a.b_cond(Cond::Ne, fail_other);
    a.add_imm(9, 9, 8);
    a.cmp_imm(9, HEADER_CMP);
    a.b_cond(Cond::Lo, cmp_loop);
    // Holes in an existing file get their blocks now.
    a.mov(0, FD);
    a.mov_imm(1, 0);
    a.mov_imm(2, 0);
    a.mov_imm(3, total);
    sys(&mut a, SYS_FALLOCATE);
    a.cbz(0, ready);
    a.cmn_imm(0, EOPNOTSUPP);
    a.b_cond(Cond::Eq, ready);
    a.adr_label(MESSAGE, msg_space);
    a.b(fail_close);

    // 6. The SIGBUS handler, before the file is mapped anywhere; it takes the mask and the
    //    flags of the disposition it replaces, kept in the private page after the counters.
    a.bind(ready);
    a.adr_address(SCRATCH_A, params.counters.get());
    a.mov_imm(0, SIGBUS);
    a.mov_imm(1, 0);
    a.mov_imm(2, params.counters_size);
    a.add(2, SCRATCH_A, 2, 0);
    a.mov_imm(3, 8);
    sys(&mut a, SYS_RT_SIGACTION);
    a.mov_imm(9, params.counters_size);
    a.add(10, SCRATCH_A, 9, 0);
    a.ldr(11, 10, 8);
    a.mov_imm(12, SA_ONSTACK | SA_RESTART | SA_NODEFER);
    a.and(11, 11, 12);
    a.mov_imm(12, SA_SIGINFO | SA_RESTORER);
    a.orr(11, 11, 12);
    a.str(11, SP, ACTION_BUF + 8);
    a.ldr(11, 10, 24);
    a.str(11, SP, ACTION_BUF + 24);
    a.adr_label(11, bus_handler);
    a.str(11, SP, ACTION_BUF);
    a.adr_label(11, bus_restorer);
    a.str(11, SP, ACTION_BUF + 16);
    a.mov_imm(0, SIGBUS);
    a.add_imm(1, SP, ACTION_BUF);
    a.mov(2, 10);
    a.mov_imm(3, 8);
    sys(&mut a, SYS_RT_SIGACTION);
    // 7. Keep what was counted before this point, map the file's counters over the
    //    segment, add the copy back in.
    a.adr_label(MESSAGE, msg_map);
    a.mov_imm(0, 0);
    a.mov_imm(1, params.counters_size);
    a.mov_imm(2, PROT_READ_WRITE);
    a.mov_imm(3, MAP_PRIVATE_ANONYMOUS);
    a.mov_imm(4, u64::MAX);
    a.mov_imm(5, 0);
    sys(&mut a, SYS_MMAP);
    a.cmn_imm(0, 4095);
    a.b_cond(Cond::Hs, fail_close);
    a.mov(SCRATCH_B, 0);
    for_each_nonzero_counter(&mut a, params.counters_size, SCRATCH_A, |a| {
        a.str_reg(11, SCRATCH_B, 9)
    });
    a.mov(0, SCRATCH_A);
    a.mov_imm(1, params.counters_size);
    a.mov_imm(2, PROT_READ_WRITE);
    a.mov_imm(3, MAP_SHARED | MAP_FIXED);
    a.mov(4, FD);
    a.mov_imm(5, prefix_len);
    sys(&mut a, SYS_MMAP);
    a.cmp(0, SCRATCH_A);
    a.b_cond(Cond::Ne, fail_close);
    for_each_nonzero_counter(&mut a, params.counters_size, SCRATCH_B, |a| {
        a.add(12, SCRATCH_A, 9, 0);
        emit_add(a, atomics, 12, 11, 13, 14);
    });
    a.mov(0, SCRATCH_B);
    a.mov_imm(1, params.counters_size);
    sys(&mut a, SYS_MUNMAP);
    // 8. Unlock and close: the mapping stays.
    a.mov(0, FD);
    a.mov_imm(1, LOCK_UN);
    sys(&mut a, SYS_FLOCK);
    a.mov(0, FD);
    sys(&mut a, SYS_CLOSE);
    a.b(done);

    // Failures: "rivet: <what> <path>[ (errno N)]; <consequence>" on stderr.
    a.bind(fail_other);
    a.mov_imm(0, 0);
    a.bind(fail_close);
    a.mov(SCRATCH_A, 0);
    a.mov(0, FD);
    sys(&mut a, SYS_CLOSE);
    a.mov(0, SCRATCH_A);
    a.bind(fail_errno);
    a.mov(SCRATCH_A, 0);
    a.adr_label(1, msg_prefix);
    a.mov_imm(2, MSG_PREFIX.len() as u64);
    a.bl(print);
    a.mov(1, MESSAGE);
    a.bl(print_cstr);
    a.mov(1, PATH);
    a.bl(print_cstr);
    let no_errno = a.label();
    a.tbz(SCRATCH_A, 63, no_errno);
    a.adr_label(1, msg_errno);
    a.mov_imm(2, MSG_ERRNO.len() as u64);
    a.bl(print);
    a.neg(0, SCRATCH_A);
    a.bl(print_dec);
    a.adr_label(1, msg_close);
    a.mov_imm(2, 1);
    a.bl(print);
    a.bind(no_errno);
    a.adr_label(1, msg_lost);
    a.mov_imm(2, MSG_LOST.len() as u64);
    a.bl(print);
    a.b(done);
    a.bind(fail_plain);
    a.adr_label(1, msg_prefix);
    a.mov_imm(2, MSG_PREFIX.len() as u64);
    a.bl(print);
    a.mov(1, MESSAGE);
    a.bl(print_cstr);

    a.bind(done);
    a.add_imm(SP, SP, FRAME_HIGH);
    a.add_imm(SP, SP, FRAME_LOW);
    a.ldp(19, 20, SP, 16);
    a.ldp(21, 22, SP, 32);
    a.ldp(23, 24, SP, 48);
    a.ldp(25, 26, SP, 64);
    a.ldp(27, 28, SP, 80);
    a.ldp_post(29, LR, SP, 96);
    a.ret();

    // print(x1, x2): write to fd 2 (uses x0, x8).
    a.bind(print);
    a.mov_imm(0, 2);
    sys(&mut a, SYS_WRITE);
    a.ret();
    // print_cstr(x1) (uses x9 too).
    a.bind(print_cstr);
    let (strlen, strlen_done) = (a.label(), a.label());
    a.mov_imm(2, 0);
    a.bind(strlen);
    a.ldrb_reg(9, 1, 2);
    a.cbz_w(9, strlen_done);
    a.add_imm(2, 2, 1);
    a.b(strlen);
    a.bind(strlen_done);
    a.b(print);
    // print_dec(x0): its decimal digits, built in 32 bytes of its own stack.
    a.bind(print_dec);
    a.sub_imm(SP, SP, 32);
    a.add_imm(1, SP, 32);
    a.mov_imm(10, 10);
    let dec = a.label();
    a.bind(dec);
    a.udiv(11, 0, 10);
    a.msub(12, 11, 10, 0);
    a.add_imm(12, 12, u32::from(b'0'));
    a.sub_imm(1, 1, 1);
    a.strb(12, 1, 0);
    a.mov(0, 11);
    a.cbnz(0, dec);
    a.add_imm(2, SP, 32);
    a.sub(2, 2, 1);
    a.mov(13, LR);
    a.bl(print);
    a.mov(LR, 13);
    a.add_imm(SP, SP, 32);
    a.ret();

    // record(x16 = target, x17 = site table), called by the probes with `bl`: count the
    // target in the first pair holding it or claimed for it, else in the overflow pair.
    // Targets are stored as link-time addresses (run-time minus the load bias). Every
    // register but x16, x17 and x30 (which the probe saved) and NZCV are kept.
    a.bind(recorder);
    a.stp_pre(0, 1, SP, -48);
    a.stp(2, 3, SP, 16);
    a.mrs_nzcv(3);
    a.str(3, SP, 32);
    a.adr_label(1, base);
    a.mov_imm(2, params.at.get());
    a.sub(1, 1, 2);
    a.sub(0, IP0, 1);
    a.mov_imm(1, 0);
    let (slot, next_slot, hit, overflow, recorded) =
        (a.label(), a.label(), a.label(), a.label(), a.label());
    let table_bytes = SITE_TARGETS * 16;
    a.bind(slot);
    a.cmp_imm(1, table_bytes);
    a.b_cond(Cond::Hs, overflow);
    a.ldr_reg(2, IP1, 1);
    a.cmp(2, 0);
    a.b_cond(Cond::Eq, hit);
    a.cbnz(2, next_slot);
    // A free pair: claim it (another thread may be claiming it too).
    a.add(3, IP1, 1, 0);
    match atomics {
        Atomics::Lse => {
            a.mov_imm(2, 0);
            a.cas(2, 0, 3);
            a.cbz(2, hit);
            a.cmp(2, 0);
            a.b_cond(Cond::Eq, hit);
        }
        Atomics::LlSc => {
            let (claim, taken) = (a.label(), a.label());
            a.bind(claim);
            a.ldxr(2, 3);
            a.cbnz(2, taken);
            a.stxr(2, 0, 3);
            a.cbnz_w(2, claim);
            a.b(hit);
            a.bind(taken);
            a.clrex();
            a.cmp(2, 0);
            a.b_cond(Cond::Eq, hit);
        }
    }
    a.bind(next_slot);
    a.add_imm(1, 1, 16);
    a.b(slot);
    a.bind(hit);
    a.add(3, IP1, 1, 0);
    a.add_imm(3, 3, 8);
    emit_increment(&mut a, atomics, 3, 2, 1);
    a.b(recorded);
    a.bind(overflow);
    a.add_imm(3, IP1, table_bytes + 8);
    emit_increment(&mut a, atomics, 3, 2, 1);
    a.bind(recorded);
    a.ldr(3, SP, 32);
    a.msr_nzcv(3);
    a.ldp(2, 3, SP, 16);
    a.ldp_post(0, 1, SP, 48);
    a.ret();

    // bus_handler(sig, info, context): a fault the kernel raised (si_code > 0) in the counter
    // segment is the file gone short under the mapping: anonymous zero pages replace it,
    // one line says so, and the faulting increment runs again. Anything else goes to the
    // disposition the runtime replaced, as on x86-64. The kernel restores every register
    // on return, so the handler uses any; x30 holds the return to `bus_restorer`.
    a.bind(bus_handler);
    a.word(BTI_C);
    let (foreign, restore, handled, chain) = (a.label(), a.label(), a.label(), a.label());
    a.adr_address(9, params.counters.get());
    a.ldr_w(10, 1, 8);
    a.cmp_imm_w(10, 0);
    a.b_cond(Cond::Le, foreign);
    a.ldr(10, 1, 16);
    a.sub(10, 10, 9);
    a.mov_imm(11, params.counters_size);
    a.cmp(10, 11);
    a.b_cond(Cond::Hs, foreign);
    a.stp_pre(0, 1, SP, -32);
    a.stp(2, 9, SP, 16);
    a.mov(0, 9);
    a.mov_imm(1, params.counters_size);
    a.mov_imm(2, PROT_READ_WRITE);
    a.mov_imm(3, MAP_PRIVATE_ANONYMOUS | MAP_FIXED);
    a.mov_imm(4, u64::MAX);
    a.mov_imm(5, 0);
    sys(&mut a, SYS_MMAP);
    a.mov(10, 0);
    a.ldp(2, 9, SP, 16);
    a.ldp_post(0, 1, SP, 32);
    a.cmn_imm(10, 4095);
    a.b_cond(Cond::Hs, foreign);
    a.stp_pre(29, LR, SP, -16);
    a.adr_label(1, msg_bus);
    a.mov_imm(2, MSG_BUS.len() as u64);
    a.bl(print);
    a.ldp_post(29, LR, SP, 16);
    a.bind(handled);
    a.ret();
    a.bind(foreign);
    // x9 + counters_size: the saved `struct sigaction`.
    a.mov_imm(11, params.counters_size);
    a.add(9, 9, 11, 0);
    a.ldr(11, 9, 0);
    a.cmp_imm(11, 1);
    a.b_cond(Cond::Ls, restore);
    // A one-shot handler (SA_RESETHAND) leaves SIGBUS at its default as it runs.
    a.ldr(12, 9, 8);
    a.tbz(12, SA_RESETHAND_BIT, chain);
    a.str(ZR, 9, 0);
    a.stp_pre(0, 1, SP, -32);
    a.str(2, SP, 16);
    a.mov_imm(0, SIGBUS);
    a.mov(1, 9);
    a.mov_imm(2, 0);
    a.mov_imm(3, 8);
    sys(&mut a, SYS_RT_SIGACTION);
    a.ldr(2, SP, 16);
    a.ldp_post(0, 1, SP, 32);
    a.bind(chain);
    a.mov_imm(0, SIGBUS);
    a.mov(IP0, 11);
    a.br(IP0);
    a.bind(restore);
    a.mov(13, 1);
    a.mov_imm(0, SIGBUS);
    a.mov(1, 9);
    a.mov_imm(2, 0);
    a.mov_imm(3, 8);
    sys(&mut a, SYS_RT_SIGACTION);
    a.ldr_w(10, 13, 8);
    a.cmp_imm_w(10, 0);
    a.b_cond(Cond::Gt, handled);
    sys(&mut a, SYS_GETPID);
    a.mov_imm(1, SIGBUS);
    sys(&mut a, SYS_KILL);
    a.ret();
    // The return from a handler (sa_restorer; the kernel's vDSO trampoline is not used so
    // that the runtime depends on nothing of the process).
    a.bind(bus_restorer);
    a.mov_imm(8, SYS_RT_SIGRETURN);
    a.svc();

    // Data.
    let cstr = |a: &mut Asm, label: Label, s: &str| {
        a.bind(label);
        let mut bytes = s.as_bytes().to_vec();
        bytes.push(0);
        a.data(&bytes);
    };
    cstr(&mut a, default_path, params.default_path);
    let file_name = params
        .default_path
        .rsplit('/')
        .next()
        .unwrap_or(params.default_path);
    cstr(&mut a, default_name, file_name);
    cstr(&mut a, env_name, &format!("{ENV_PROFILE}="));
    for (label, text) in super::messages() {
        let l = match label {
            super::Message::Prefix => msg_prefix,
            super::Message::Open => msg_open,
            super::Message::Write => msg_write,
            super::Message::Map => msg_map,
            super::Message::Other => msg_other,
            super::Message::Long => msg_long,
            super::Message::Errno => msg_errno,
            super::Message::Lost => msg_lost,
            super::Message::Close => msg_close,
            super::Message::RootDir => root_dir,
            super::Message::Relative => msg_relative,
            super::Message::Dir => msg_dir,
            super::Message::UnsafeDir => msg_unsafe_dir,
            super::Message::UnsafeFile => msg_unsafe_file,
            super::Message::NotRegular => msg_not_regular,
            super::Message::Space => msg_space,
            super::Message::Bus => msg_bus,
        };
        cstr(&mut a, l, text);
    }
    // The header is compared eight bytes at a time.
    let misalignment = (a.here() % 8) as usize;
    a.data(&[0; 8][..misalignment]);
    a.bind(prefix);
    a.data(params.file_prefix);

    let address = |a: &Asm, l: Label| a.address_of(l).map(Vaddr);
    let entry_stub = entry_label.and_then(|l| address(&a, l));
    let init_stub = init_label.and_then(|l| address(&a, l));
    let recorder = address(&a, recorder).expect("the recorder is bound");
    let bytes = a.finish()?;
    Ok(RuntimeCode {
        bytes,
        entry_stub,
        init_stub,
        recorder,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rivet_arch::aarch64::{decode, text};

    fn runtime(
        atomics: Atomics,
        per_process: bool,
        library: bool,
    ) -> (RuntimeParams<'static>, RuntimeCode) {
        let params = RuntimeParams {
            isa: rivet_arch::Isa::Aarch64,
            atomics,
            at: Vaddr(0x48_0000),
            counters: Vaddr(0x46_0000),
            counters_size: 0x2000,
            file_prefix: &[0x52; 4096],
            default_path: "/tmp/rivet-runtime-test.counts",
            per_process,
            entry: (!library).then_some(Vaddr(0x40_1000)),
            init: library.then_some(Vaddr(0x40_2000)),
        };
        let code = generate(&params, atomics).unwrap();
        (params, code)
    }

    /// The words of the code, up to the data (the default path's bytes).
    fn code_words(params: &RuntimeParams<'_>, code: &RuntimeCode) -> Vec<(u64, u32)> {
        let path = params.default_path.as_bytes();
        let data = code
            .bytes
            .windows(path.len())
            .position(|w| w == path)
            .expect("the default path is in the data");
        code.bytes[..data]
            .chunks_exact(4)
            .enumerate()
            .map(|(k, w)| {
                (
                    params.at.get() + 4 * k as u64,
                    u32::from_le_bytes(w.try_into().unwrap()),
                )
            })
            .collect()
    }

    #[test]
    fn every_word_before_the_data_is_an_instruction() {
        for atomics in [Atomics::Lse, Atomics::LlSc] {
            for (per_process, library) in [(false, false), (true, false), (false, true)] {
                let (params, code) = runtime(atomics, per_process, library);
                let words = code_words(&params, &code);
                assert_eq!(words[0].1, FILL, "the first word is a trap");
                let texts: Vec<String> = words[1..]
                    .iter()
                    .map(|&(at, w)| text(&decode(w, at).unwrap_or_else(|e| panic!("{e}"))))
                    .collect();
                assert!(!texts.iter().any(|t| t.starts_with("udf")), "{texts:?}");
                // System calls: AArch64's `svc #0`, never x86-64's bytes.
                assert!(texts.iter().filter(|t| *t == "svc #0x0").count() >= 20);
                let lse = texts
                    .iter()
                    .any(|t| t.starts_with("ldadd") || t.starts_with("cas"));
                let exclusive = texts.iter().any(|t| t.starts_with("ldxr"));
                assert_eq!(lse, atomics == Atomics::Lse, "{atomics:?}");
                assert_eq!(exclusive, atomics == Atomics::LlSc, "{atomics:?}");
            }
        }
    }

    #[test]
    fn entries_reached_indirectly_start_with_a_landing_pad() {
        let (_, exe) = runtime(Atomics::Lse, false, false);
        let (_, lib) = runtime(Atomics::Lse, false, true);
        let word_at = |code: &RuntimeCode, at: Vaddr| {
            let o = (at.get() - 0x48_0000) as usize;
            u32::from_le_bytes(code.bytes[o..o + 4].try_into().unwrap())
        };
        assert_eq!(word_at(&exe, exe.entry_stub.unwrap()), BTI_JC);
        assert_eq!(word_at(&lib, lib.init_stub.unwrap()), BTI_JC);
        assert!(exe.init_stub.is_none() && lib.entry_stub.is_none());
        // The recorder is called with `bl`: no pad, and it saves NZCV before comparing.
        let (params, code) = runtime(Atomics::LlSc, false, false);
        let first = (code.recorder.get() - params.at.get()) as usize;
        let words: Vec<String> = code.bytes[first..first + 20]
            .chunks_exact(4)
            .enumerate()
            .map(|(k, w)| {
                let at = code.recorder.get() + 4 * k as u64;
                text(&decode(u32::from_le_bytes(w.try_into().unwrap()), at).unwrap())
            })
            .collect();
        assert_eq!(words[0], "stp x0, x1, [sp, #-48]!");
        assert_eq!(words[2], "mrs x3, nzcv");
    }
}
