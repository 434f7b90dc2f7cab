//! Start-up code that puts the hot text on transparent huge pages (`rivet optimize --hugify`).
//!
//! Hooked on the entry point of an executable or on `DT_INIT` of a shared library, it runs
//! once, before `main` and before the object's constructors, then jumps to the original entry
//! (or `DT_INIT`). It copies the 2 MiB-aligned hot text to a fresh anonymous mapping that
//! `madvise(MADV_HUGEPAGE)` asked to be backed by huge pages, makes the copy read-only and
//! executable, and moves it over the original addresses with one `mremap(MREMAP_FIXED)`. The
//! move is atomic: at every instant the hot addresses hold the same bytes, either file-backed
//! or copied, so a thread or a return address already in the hot text is never exposed to a
//! hole (BOLT's runtime maps zero pages over the text and copies back, a window this does not
//! have). The code itself lies outside the range it moves.
//!
//! Nothing is done, silently, when the range is empty once rounded inward to 2 MiB at run
//! time (a loader that ignored the segment's 2 MiB alignment), when the process has THP
//! disabled (`prctl(PR_GET_THP_DISABLE)` nonzero, unless only outside `madvise`d regions), when
//! the kernel's setting for 2 MiB pages (`hugepages-2048kB/enabled`, else the global
//! `enabled`) is not `always` or `madvise` or cannot be read, or when any system call fails;
//! a failure after the anonymous mapping exists unmaps it. The program then runs exactly as
//! without the hook: the text stays file-backed.
//!
//! The hook keeps every register but rax..r11's values, which it saves and restores too, and
//! the flags (pushfq/popfq): `_start` receives the dynamic linker's finalizer in rdx, `DT_INIT`
//! its arguments in rdi, rsi, rdx. Ten 8-byte pushes keep the stack's 16-byte alignment as it
//! was; the routine realigns its own frame anyway. It uses raw system calls only, reads two
//! sysfs files and writes nothing but its own stack and the new mapping.
//!
//! Layout of the generated code, fixed so that the verifier can read it without trusting the
//! generator: a descriptor (`DESCRIPTOR_SIZE` bytes at `at`: `DESCRIPTOR_MAGIC`, then the hot
//! range's start and end as offsets from `at`), then the hooks and the routine.

use iced_x86::IcedError;
use iced_x86::code_asm::*;
use rivet_elf::Vaddr;

use crate::RuntimeError;

/// The huge page size the hot text is aligned to (x86-64's PMD size).
pub const HUGE_PAGE: u64 = 2 << 20;
/// First word of the descriptor at the start of the generated code.
pub const DESCRIPTOR_MAGIC: u64 = u64::from_le_bytes(*b"RIVETHUG");
/// Bytes of the descriptor: magic, start offset, end offset, one word of padding.
pub const DESCRIPTOR_SIZE: u64 = 32;
/// The registers the hook saves, in push order (flags first). The verifier checks the hook
/// against this list.
pub const SAVED_REGISTERS: [&str; 9] =
    ["rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"];

const SYS_READ: i32 = 0;
const SYS_CLOSE: i32 = 3;
const SYS_MMAP: i32 = 9;
const SYS_MPROTECT: i32 = 10;
const SYS_MUNMAP: i32 = 11;
const SYS_MREMAP: i32 = 25;
const SYS_MADVISE: i32 = 28;
const SYS_PRCTL: i32 = 157;
const SYS_OPENAT: i32 = 257;
const PR_GET_THP_DISABLE: i32 = 42;
/// What `PR_GET_THP_DISABLE` returns when THP is disabled except where `madvise`d (Linux
/// 6.18's `PR_THP_DISABLE_EXCEPT_ADVISED`): the routine's mapping is advised, so it proceeds.
const THP_DISABLED_EXCEPT_ADVISED: i32 = 3;
const AT_FDCWD: i32 = -100;
const O_RDONLY_CLOEXEC: i32 = 0o2000000;
const PROT_READ_WRITE: i32 = 3;
const PROT_READ_EXEC: i32 = 5;
const MAP_PRIVATE_ANONYMOUS: i32 = 0x02 | 0x20;
const MADV_HUGEPAGE: i32 = 14;
const MREMAP_MAYMOVE_FIXED: i32 = 1 | 2;
/// System calls return -4095..-1 for errors.
const MAX_ERRNO: i32 = 4095;
/// Bytes of a sysfs setting read: "always [madvise] never\n" and the per-size file's
/// "always inherit [madvise] never\n" fit.
const SETTING_BUF: i32 = 80;

/// The kernel's THP setting for 2 MiB pages, and the global one it may defer to.
pub const THP_SETTING_PMD: &str = "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled";
pub const THP_SETTING: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// What the hook needs, fixed at optimization time.
#[derive(Clone, Debug)]
pub struct HugifyParams {
    /// Address the code is placed at (outside the hot range).
    pub at: Vaddr,
    /// The hot range, both ends multiples of `HUGE_PAGE` in the output's addresses.
    pub hot_start: Vaddr,
    pub hot_end: Vaddr,
    /// The executable's entry point (the hook replaces it), for an executable.
    pub entry: Option<Vaddr>,
    /// The shared library's `DT_INIT` function (the hook replaces it), for a shared library.
    pub init: Option<Vaddr>,
}

/// The generated code.
#[derive(Clone, Debug)]
pub struct HugifyCode {
    pub bytes: Vec<u8>,
    /// The new entry point (executables).
    pub entry_stub: Option<Vaddr>,
    /// The new `DT_INIT` (shared libraries).
    pub init_stub: Option<Vaddr>,
}

/// Generates the hook and routine for `params`.
pub fn generate(params: &HugifyParams) -> Result<HugifyCode, RuntimeError> {
    let mut a = CodeAssembler::new(64)?;
    let mut descriptor = a.create_label();
    let mut routine = a.create_label();
    let mut thp_mode = a.create_label();
    let mut pmd_setting = a.create_label();
    let mut global_setting = a.create_label();

    a.set_label(&mut descriptor)?;
    a.dq(&[
        DESCRIPTOR_MAGIC,
        params.hot_start.get().wrapping_sub(params.at.get()),
        params.hot_end.get().wrapping_sub(params.at.get()),
        0,
    ])?;

    let hook = |a: &mut CodeAssembler, target: Vaddr| -> Result<CodeLabel, IcedError> {
        let mut l = a.create_label();
        a.set_label(&mut l)?;
        a.pushfq()?;
        for r in [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11] {
            a.push(r)?;
        }
        a.call(routine)?;
        for r in [r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax] {
            a.pop(r)?;
        }
        a.popfq()?;
        a.jmp(target.get())?;
        Ok(l)
    };
    let entry_label = params.entry.map(|e| hook(&mut a, e)).transpose()?;
    let init_label = params.init.map(|i| hook(&mut a, i)).transpose()?;

    // The routine: callee-saved rbx (scratch), r12/r13 the hot range at run time, r14 its
    // length, r15 the anonymous copy.
    a.set_label(&mut routine)?;
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    for r in [rbx, r12, r13, r14, r15] {
        a.push(r)?;
    }
    a.and(rsp, -16)?;
    a.cld()?;
    let mut done = a.create_label();
    let mut unmap = a.create_label();
    // 1. The range at run time, rounded inward to huge pages (a PIE or library loaded at an
    //    address aligned less than asked may lose its partial pages; nothing is lost when the
    //    loader honoured the segment's alignment).
    a.lea(rbx, ptr(descriptor))?;
    a.mov(rax, -(HUGE_PAGE as i64))?;
    a.mov(r12, qword_ptr(rbx + 8))?;
    a.add(r12, rbx)?;
    a.add(r12, (HUGE_PAGE - 1) as i32)?;
    a.and(r12, rax)?;
    a.mov(r13, qword_ptr(rbx + 16))?;
    a.add(r13, rbx)?;
    a.and(r13, rax)?;
    a.cmp(r12, r13)?;
    a.jae(done)?;
    a.mov(r14, r13)?;
    a.sub(r14, r12)?;
    // 2. THP allowed for this process and in this kernel's setting.
    let mut process_ok = a.create_label();
    a.mov(eax, SYS_PRCTL)?;
    a.mov(edi, PR_GET_THP_DISABLE)?;
    a.xor(esi, esi)?;
    a.xor(edx, edx)?;
    a.xor(r10d, r10d)?;
    a.xor(r8d, r8d)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.jz(process_ok)?;
    a.cmp(rax, THP_DISABLED_EXCEPT_ADVISED)?;
    a.jne(done)?;
    a.set_label(&mut process_ok)?;
    let mut thp_on = a.create_label();
    let mut ask_global = a.create_label();
    a.lea(rdi, ptr(pmd_setting))?;
    a.call(thp_mode)?;
    a.cmp(al, b'a' as i32)?;
    a.je(thp_on)?;
    a.cmp(al, b'm' as i32)?;
    a.je(thp_on)?;
    a.cmp(al, b'i' as i32)?; // inherit: the global setting decides
    a.je(ask_global)?;
    a.test(al, al)?; // no per-size file (older kernels): the global setting decides
    a.jnz(done)?;
    a.set_label(&mut ask_global)?;
    a.lea(rdi, ptr(global_setting))?;
    a.call(thp_mode)?;
    a.cmp(al, b'a' as i32)?;
    a.je(thp_on)?;
    a.cmp(al, b'm' as i32)?;
    a.jne(done)?;
    a.set_label(&mut thp_on)?;
    // 3. An anonymous mapping one huge page longer than the range, trimmed to an aligned
    //    range (rbx: the raw mapping).
    a.mov(eax, SYS_MMAP)?;
    a.xor(edi, edi)?;
    a.lea(rsi, qword_ptr(r14 + HUGE_PAGE as i32))?;
    a.mov(edx, PROT_READ_WRITE)?;
    a.mov(r10d, MAP_PRIVATE_ANONYMOUS)?;
    a.mov(r8, -1i64)?;
    a.xor(r9d, r9d)?;
    a.syscall()?;
    a.cmp(rax, -MAX_ERRNO)?;
    a.jae(done)?;
    a.mov(rbx, rax)?;
    a.mov(r15, rax)?;
    a.add(r15, (HUGE_PAGE - 1) as i32)?;
    a.mov(rax, -(HUGE_PAGE as i64))?;
    a.and(r15, rax)?;
    let mut no_head = a.create_label();
    a.mov(rsi, r15)?;
    a.sub(rsi, rbx)?;
    a.jz(no_head)?;
    a.mov(eax, SYS_MUNMAP)?;
    a.mov(rdi, rbx)?;
    a.syscall()?;
    a.set_label(&mut no_head)?;
    // Tail: from r15 + len to rbx + len + HUGE_PAGE, i.e. HUGE_PAGE - (r15 - rbx) bytes.
    let mut no_tail = a.create_label();
    a.mov(esi, HUGE_PAGE as i32)?;
    a.add(rsi, rbx)?;
    a.sub(rsi, r15)?;
    a.jz(no_tail)?;
    a.mov(eax, SYS_MUNMAP)?;
    a.lea(rdi, qword_ptr(r15 + r14))?;
    a.syscall()?;
    a.set_label(&mut no_tail)?;
    // 4. Huge pages asked for before the first touch, so that the copy faults them in.
    a.mov(eax, SYS_MADVISE)?;
    a.mov(rdi, r15)?;
    a.mov(rsi, r14)?;
    a.mov(edx, MADV_HUGEPAGE)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.jnz(unmap)?;
    // 5. The copy (the range and its length are multiples of 8).
    a.mov(rdi, r15)?;
    a.mov(rsi, r12)?;
    a.mov(rcx, r14)?;
    a.shr(rcx, 3)?;
    a.rep().movsq()?;
    // 6. Read and execute, like the text it replaces, then moved over it in one step.
    a.mov(eax, SYS_MPROTECT)?;
    a.mov(rdi, r15)?;
    a.mov(rsi, r14)?;
    a.mov(edx, PROT_READ_EXEC)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.jnz(unmap)?;
    a.mov(eax, SYS_MREMAP)?;
    a.mov(rdi, r15)?;
    a.mov(rsi, r14)?;
    a.mov(rdx, r14)?;
    a.mov(r10d, MREMAP_MAYMOVE_FIXED)?;
    a.mov(r8, r12)?;
    a.syscall()?;
    a.cmp(rax, r12)?;
    a.je(done)?;
    a.set_label(&mut unmap)?;
    a.mov(eax, SYS_MUNMAP)?;
    a.mov(rdi, r15)?;
    a.mov(rsi, r14)?;
    a.syscall()?;
    a.set_label(&mut done)?;
    a.lea(rsp, qword_ptr(rbp - 40))?;
    for r in [r15, r14, r13, r12, rbx] {
        a.pop(r)?;
    }
    a.pop(rbp)?;
    a.ret()?;

    // thp_mode(rdi: a sysfs path) -> al: the letter after '[' in the file (the selected
    // mode), 0 when the file cannot be read or has none. Clobbers caller-saved registers.
    a.set_label(&mut thp_mode)?;
    a.push(rbx)?;
    a.sub(rsp, SETTING_BUF)?;
    let mut unreadable = a.create_label();
    let mut scan = a.create_label();
    let mut found = a.create_label();
    a.mov(rsi, rdi)?;
    a.mov(eax, SYS_OPENAT)?;
    a.mov(edi, AT_FDCWD)?;
    a.mov(edx, O_RDONLY_CLOEXEC)?;
    a.xor(r10d, r10d)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.js(unreadable)?;
    a.mov(rbx, rax)?;
    a.mov(eax, SYS_READ)?;
    a.mov(rdi, rbx)?;
    a.mov(rsi, rsp)?;
    a.mov(edx, SETTING_BUF - 1)?;
    a.syscall()?;
    a.mov(r9, rax)?;
    a.mov(eax, SYS_CLOSE)?;
    a.mov(rdi, rbx)?;
    a.syscall()?;
    // Scan bytes 0..count-1 for '[' with a byte after it.
    a.xor(ecx, ecx)?;
    a.dec(r9)?;
    a.set_label(&mut scan)?;
    a.cmp(rcx, r9)?;
    a.jge(unreadable)?;
    a.cmp(byte_ptr(rsp + rcx), b'[' as i32)?;
    a.je(found)?;
    a.inc(rcx)?;
    a.jmp(scan)?;
    a.set_label(&mut found)?;
    a.movzx(eax, byte_ptr(rsp + rcx + 1))?;
    let mut out = a.create_label();
    a.jmp(out)?;
    a.set_label(&mut unreadable)?;
    a.xor(eax, eax)?;
    a.set_label(&mut out)?;
    a.add(rsp, SETTING_BUF)?;
    a.pop(rbx)?;
    a.ret()?;

    let cstr = |a: &mut CodeAssembler, label: &mut CodeLabel, s: &str| -> Result<(), IcedError> {
        a.set_label(label)?;
        a.db(s.as_bytes())?;
        a.db(&[0])
    };
    cstr(&mut a, &mut pmd_setting, THP_SETTING_PMD)?;
    cstr(&mut a, &mut global_setting, THP_SETTING)?;

    let result = a.assemble_options(
        params.at.get(),
        iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
    )?;
    let ip = |l: Option<CodeLabel>| -> Result<Option<Vaddr>, IcedError> {
        l.map(|l| result.label_ip(&l).map(Vaddr)).transpose()
    };
    let entry_stub = ip(entry_label)?;
    let init_stub = ip(init_label)?;
    Ok(HugifyCode {
        entry_stub,
        init_stub,
        bytes: result.inner.code_buffer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};

    fn params() -> HugifyParams {
        HugifyParams {
            at: Vaddr(0x60_1000),
            hot_start: Vaddr(0x40_0000),
            hot_end: Vaddr(0x60_0000),
            entry: Some(Vaddr(0x40_1000)),
            init: None,
        }
    }

    #[test]
    fn the_descriptor_leads_and_holds_the_range_relative_to_the_code() {
        let code = generate(&params()).unwrap();
        let word = |i: usize| u64::from_le_bytes(code.bytes[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(word(0), DESCRIPTOR_MAGIC);
        assert_eq!(0x60_1000u64.wrapping_add(word(1)), 0x40_0000);
        assert_eq!(0x60_1000u64.wrapping_add(word(2)), 0x60_0000);
        assert_eq!(code.entry_stub, Some(Vaddr(0x60_1000 + DESCRIPTOR_SIZE)));
        assert_eq!(code.init_stub, None);
    }

    #[test]
    fn the_hook_saves_flags_and_caller_saved_registers_and_jumps_to_the_entry() {
        let p = params();
        let code = generate(&p).unwrap();
        let stub = code.entry_stub.unwrap();
        let off = (stub.get() - p.at.get()) as usize;
        let mut d = Decoder::with_ip(64, &code.bytes[off..], stub.get(), DecoderOptions::NONE);
        let insts: Vec<_> = d.iter().take(22).collect();
        let m: Vec<Mnemonic> = insts.iter().map(|i| i.mnemonic()).collect();
        assert_eq!(m[0], Mnemonic::Pushfq);
        assert!(m[1..10].iter().all(|x| *x == Mnemonic::Push));
        assert_eq!(m[10], Mnemonic::Call);
        assert!(m[11..20].iter().all(|x| *x == Mnemonic::Pop));
        assert_eq!(m[20], Mnemonic::Popfq);
        assert_eq!(m[21], Mnemonic::Jmp);
        assert_eq!(insts[21].near_branch_target(), 0x40_1000);
        for k in 0..9 {
            assert_eq!(insts[1 + k].op0_register(), insts[19 - k].op0_register());
        }
        let pushed: Vec<String> = insts[1..10]
            .iter()
            .map(|i| format!("{:?}", i.op0_register()).to_lowercase())
            .collect();
        assert_eq!(pushed, SAVED_REGISTERS);
    }

    #[test]
    fn a_library_gets_an_init_hook_and_no_entry_hook() {
        let p = HugifyParams {
            entry: None,
            init: Some(Vaddr(0x1000)),
            ..params()
        };
        let code = generate(&p).unwrap();
        assert_eq!(code.entry_stub, None);
        assert_eq!(code.init_stub, Some(Vaddr(0x60_1000 + DESCRIPTOR_SIZE)));
    }
}
