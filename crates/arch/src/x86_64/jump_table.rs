//! Recognizing what an indirect jump jumps through.
//!
//! Compilers lower a `switch` to a table dispatch in a handful of shapes:
//!
//! * absolute (non-PIC): `jmp *T(,%idx,8)`, or `mov T(,%idx,8),%rax; jmp *%rax`;
//! * relative (PIC): `lea T(%rip),%rdx; movslq (%rdx,%idx,4),%rax; add %rdx,%rax; jmp *%rax`;
//! * the same at -O0, with the index spilled to the stack and scaled by a separate `lea`.
//!
//! Rather than matching instruction sequences, the analysis runs a tiny symbolic evaluator
//! forward over the straight-line window that ends at the jump. Each register (and each
//! frame-pointer or stack-pointer slot, for -O0 code) holds an abstract value: a constant, an
//! affine function `var * scale + offset` of an unknown variable, a table entry loaded from
//! such an address, a constant plus a sign-extended entry, or a pointer loaded from a fixed
//! address. The jump's operand then evaluates to one of the table shapes or to nothing known.
//! Anything the evaluator does not model produces a fresh unknown variable, so a pattern is
//! only reported when every step of it was seen. The bound comes from an unsigned range check
//! (`cmp $N,idx; ja default`) of the same variable on the path to the jump.

use iced_x86::{InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
use rivet_elf::Vaddr;

use super::inst::X86Inst;
use crate::Inst;
use crate::indirect::{IndexBound, IndirectJump};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Const(u64),
    /// `var * scale + offset`.
    Affine {
        var: u32,
        scale: u64,
        offset: u64,
    },
    /// An entry of `size` bytes read from `table + var * scale`.
    Entry {
        table: u64,
        var: u32,
        scale: u64,
        size: u8,
        signed: bool,
    },
    /// `add` + sign-extended `Entry`.
    Relative {
        add: u64,
        table: u64,
        var: u32,
        scale: u64,
        size: u8,
    },
    /// 8 bytes read from a fixed address.
    Loaded {
        addr: u64,
    },
}

/// A memory operand, as written, with the values of its registers at the time: two operands
/// with equal keys read the same memory (if nothing was stored in between).
type MemKey = (Register, Register, u32, u64, Option<Val>, Option<Val>);

struct State {
    regs: Vec<Option<Val>>,
    /// -O0 spills: (base register, displacement) -> value.
    slots: Vec<((Register, i64), Val)>,
    /// Other memory compared against a bound (`cmpl $9,(%rdi,%rdx,4)`) and loaded later.
    memory: Vec<(MemKey, Val)>,
    next_var: u32,
    /// Bits of each variable that may be non-zero (8, 16, 32 or 64), by variable id.
    widths: Vec<u8>,
    /// The low `width` bits of a wider variable, as a variable of its own.
    narrowed: Vec<((u32, u8), u32)>,
}

impl State {
    fn fresh(&mut self) -> Val {
        self.fresh_width(64)
    }

    fn fresh_width(&mut self, width: u8) -> Val {
        self.next_var += 1;
        self.widths.push(width);
        debug_assert_eq!(self.widths.len(), self.next_var as usize + 1);
        Val::Affine {
            var: self.next_var,
            scale: 1,
            offset: 0,
        }
    }

    /// The value of the low `width` bits of `v`, zero-extended. A range check on `%al` bounds
    /// the index only if the index is `%al` zero-extended, not the whole `%rax`; giving the
    /// narrowed value its own variable keeps the two apart.
    fn narrow(&mut self, v: Val, width: u8) -> Val {
        match v {
            Val::Const(c) if width < 64 => Val::Const(c & ((1u64 << width) - 1)),
            Val::Affine {
                var,
                scale: 1,
                offset: 0,
            } => {
                if self.widths[var as usize] <= width {
                    return v;
                }
                if let Some(&(_, id)) = self.narrowed.iter().find(|(k, _)| *k == (var, width)) {
                    return Val::Affine {
                        var: id,
                        scale: 1,
                        offset: 0,
                    };
                }
                let n = self.fresh_width(width);
                if let Val::Affine { var: id, .. } = n {
                    self.narrowed.push(((var, width), id));
                }
                n
            }
            Val::Affine { .. } if width < 64 => self.fresh_width(width),
            // Table entries of 4 bytes survive a 32-bit write (`mov (%rdx,%rax),%eax`).
            other if width >= 32 => other,
            _ => self.fresh_width(width),
        }
    }

    /// A variable plus a constant, as a new index variable: the range check that follows (if
    /// any) constrains the sum, and the table starts where the sum is 0. `lea -4(%r14),%r15;
    /// cmp $6,%r15; ja` (LLVM's `match` on 4..=10) checks and indexes with %r15, and
    /// `movabs $K,%rcx; add %rax,%rcx` indexes with a niche-encoded tag minus a constant.
    fn sum_index(&mut self, v: Val) -> Val {
        match v {
            Val::Affine {
                scale: 1, offset, ..
            } if offset != 0 => self.fresh(),
            v => v,
        }
    }

    fn reg(&mut self, r: Register) -> Val {
        let key = r.full_register() as usize;
        match self.regs[key] {
            Some(v) => v,
            None => {
                let v = self.fresh();
                self.regs[key] = Some(v);
                v
            }
        }
    }

    fn set(&mut self, r: Register, v: Val) {
        let v = match r.size() {
            // 32-bit writes zero-extend into the full register.
            4 => self.narrow(v, 32),
            // 8- and 16-bit writes keep the old upper bits: nothing is known.
            1 | 2 => self.fresh(),
            _ => v,
        };
        self.regs[r.full_register() as usize] = Some(v);
    }

    fn slot_key(inst: &iced_x86::Instruction) -> Option<(Register, i64)> {
        let base = inst.memory_base();
        (matches!(base, Register::RBP | Register::RSP) && inst.memory_index() == Register::None)
            .then(|| (base, inst.memory_displacement64() as i64))
    }

    fn mem_key(&self, inst: &iced_x86::Instruction) -> MemKey {
        let val = |r: Register| {
            if r == Register::None {
                None
            } else {
                self.regs[r.full_register() as usize]
            }
        };
        (
            inst.memory_base(),
            inst.memory_index(),
            inst.memory_index_scale(),
            inst.memory_displacement64(),
            val(inst.memory_base()),
            val(inst.memory_index()),
        )
    }

    fn memory_value(&mut self, key: MemKey) -> Val {
        if let Some((_, v)) = self.memory.iter().find(|(k, _)| *k == key) {
            return *v;
        }
        let v = self.fresh();
        self.memory.push((key, v));
        v
    }

    fn slot(&mut self, key: (Register, i64)) -> Val {
        if let Some((_, v)) = self.slots.iter().find(|(k, _)| *k == key) {
            return *v;
        }
        let v = self.fresh();
        self.slots.push((key, v));
        v
    }

    fn set_slot(&mut self, key: (Register, i64), v: Val) {
        self.slots.retain(|(k, _)| *k != key);
        self.slots.push((key, v));
    }

    /// The address a memory operand computes, as an abstract value.
    fn address(&mut self, inst: &iced_x86::Instruction) -> Option<Val> {
        if inst.is_ip_rel_memory_operand() {
            return Some(Val::Const(inst.ip_rel_memory_address()));
        }
        if inst.memory_segment() == Register::FS || inst.memory_segment() == Register::GS {
            return None;
        }
        let mut acc = Val::Const(inst.memory_displacement64());
        if inst.memory_base() != Register::None {
            let b = self.reg(inst.memory_base());
            acc = add(acc, b)?;
        }
        if inst.memory_index() != Register::None {
            let i = self.reg(inst.memory_index());
            acc = add(acc, scale(i, u64::from(inst.memory_index_scale()))?)?;
        }
        Some(acc)
    }

    fn load(&mut self, inst: &iced_x86::Instruction, size: u8, signed: bool) -> Val {
        if let Some(key) = Self::slot_key(inst) {
            return self.slot(key);
        }
        let key = self.mem_key(inst);
        if let Some((_, v)) = self.memory.iter().find(|(k, _)| *k == key) {
            return *v;
        }
        match self.address(inst) {
            Some(Val::Affine { var, scale, offset }) if scale == u64::from(size) => Val::Entry {
                table: offset,
                var,
                scale,
                size,
                signed,
            },
            Some(Val::Const(addr)) if size == 8 => Val::Loaded { addr },
            // An index the code computed as a constant (LLVM, after inlining a `match` on a
            // value it knows: `movabs $0x8000000000000000,%rax; add $4,%rax`, then the usual
            // `add %rax,%rcx` of the niche offset): one entry, read at a fixed place, as a
            // table of one entry indexed by a variable of width 0. Only a read through an
            // index register is a table's: `mov X(%rip),%eax` reads a variable.
            Some(Val::Const(addr)) if size == 4 && inst.memory_index() != Register::None => {
                let Val::Affine { var, .. } = self.fresh_width(0) else {
                    unreachable!("fresh values are variables")
                };
                Val::Entry {
                    table: addr,
                    var,
                    scale: 4,
                    size,
                    signed,
                }
            }
            _ => self.fresh(),
        }
    }
}

fn add(a: Val, b: Val) -> Option<Val> {
    use Val::*;
    Some(match (a, b) {
        (Const(x), Const(y)) => Const(x.wrapping_add(y)),
        (Const(c), Affine { var, scale, offset }) | (Affine { var, scale, offset }, Const(c)) => {
            Affine {
                var,
                scale,
                offset: offset.wrapping_add(c),
            }
        }
        (
            Const(c),
            Entry {
                table,
                var,
                scale,
                size,
                signed: true,
            },
        )
        | (
            Entry {
                table,
                var,
                scale,
                size,
                signed: true,
            },
            Const(c),
        ) => Relative {
            add: c,
            table,
            var,
            scale,
            size,
        },
        _ => return None,
    })
}

fn scale(v: Val, k: u64) -> Option<Val> {
    match v {
        Val::Const(c) => Some(Val::Const(c.wrapping_mul(k))),
        Val::Affine { var, scale, offset } => Some(Val::Affine {
            var,
            scale: scale * k,
            offset: offset.wrapping_mul(k),
        }),
        _ => None,
    }
}

/// `movslq %eax,%rax` / `cltq` of a 4-byte table entry: the same entry, sign-extended.
fn sign_extend_entry(v: Val) -> Option<Val> {
    match v {
        Val::Entry {
            table,
            var,
            scale,
            size: 4,
            ..
        } => Some(Val::Entry {
            table,
            var,
            scale,
            size: 4,
            signed: true,
        }),
        _ => None,
    }
}

fn var_of(v: Val) -> Option<u32> {
    match v {
        Val::Affine {
            var,
            scale: 1,
            offset: 0,
        } => Some(var),
        _ => None,
    }
}

fn immediate_operand(raw: &iced_x86::Instruction) -> Option<u64> {
    match raw.op1_kind() {
        OpKind::Immediate8
        | OpKind::Immediate16
        | OpKind::Immediate8to16
        | OpKind::Immediate32
        | OpKind::Immediate8to32
        | OpKind::Immediate8to64
        | OpKind::Immediate32to64 => Some(raw.immediate(1)),
        _ => None,
    }
}

fn writes_memory_only(raw: &iced_x86::Instruction) -> bool {
    raw.op_count() >= 1 && raw.op0_kind() == OpKind::Memory
}

/// Analyzes the indirect jump that ends `window` (a straight-line, fall-through sequence of
/// instructions; the caller chooses how far back it starts). For tests: Rivet goes through
/// `Isa::analyze_indirect_jump`.
#[cfg(test)]
pub fn analyze_indirect_jump(window: &[Inst]) -> IndirectJump {
    analyze_indirect_jump_path(window, &[])
}

/// Like `analyze_indirect_jump`, over a path that may cross taken branches: the conditional
/// jumps at the addresses in `taken` are followed to their target (so `cmp $N,idx; jbe table`
/// bounds the index on that path), all others fall through.
#[cfg(test)]
pub fn analyze_indirect_jump_path(window: &[Inst], taken: &[Vaddr]) -> IndirectJump {
    analyze_indirect_jump_with(window, taken, &[])
}

/// Registers whose every definition in `insts` (a whole function) loads the same constant
/// address (`lea X(%rip),%reg` or `mov $X,%reg`), with that address. When such a register is
/// read before any definition in a window, it can only hold that constant: compilers hoist a
/// jump table's base out of the dispatch loop this way.
pub fn register_constants(insts: &[Inst]) -> Vec<(RegisterId, u64)> {
    let mut state: Vec<Option<Option<u64>>> = vec![None; 256];
    let mut factory = InstructionInfoFactory::new();
    for inst in insts {
        let raw = &inst.x86().raw;
        // Epilogues restore callee-saved registers; no code after that reads the register
        // as a table base (it could not work), so a pop is not a competing definition.
        if raw.mnemonic() == Mnemonic::Pop {
            continue;
        }
        let constant = constant_definition(raw);
        if let Some((r, value)) = constant {
            let slot = &mut state[r.full_register() as usize];
            *slot = match *slot {
                None => Some(Some(value)),
                Some(Some(v)) if v == value => Some(Some(v)),
                _ => Some(None),
            };
            continue;
        }
        for u in factory.info(raw).used_registers() {
            if matches!(
                u.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            ) && u.register().is_gpr()
            {
                state[u.register().full_register() as usize] = Some(None);
            }
        }
    }
    state
        .iter()
        .enumerate()
        .filter_map(|(r, s)| match s {
            Some(Some(v)) => Some((RegisterId(r as u16), *v)),
            _ => None,
        })
        .collect()
}

/// An opaque register number, as returned by `register_constants`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegisterId(u16);

impl RegisterId {
    /// The number another instruction set's analysis gives one of its locations.
    pub(crate) fn from_raw(raw: u16) -> RegisterId {
        RegisterId(raw)
    }

    pub(crate) fn raw(self) -> u16 {
        self.0
    }
}

fn constant_definition(raw: &iced_x86::Instruction) -> Option<(Register, u64)> {
    match raw.mnemonic() {
        Mnemonic::Lea if raw.is_ip_rel_memory_operand() && raw.op0_register().size() == 8 => {
            Some((raw.op0_register(), raw.ip_rel_memory_address()))
        }
        Mnemonic::Mov
            if raw.op0_kind() == OpKind::Register
                && matches!(
                    raw.op1_kind(),
                    OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64
                )
                && raw.op0_register().size() >= 4 =>
        {
            Some((raw.op0_register(), raw.immediate(1)))
        }
        _ => None,
    }
}

fn is_write(access: OpAccess) -> bool {
    matches!(
        access,
        OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
    )
}

/// General-purpose registers whose value at the start of `window` the window reads.
pub fn window_live_in(window: &[Inst]) -> Vec<RegisterId> {
    let mut factory = InstructionInfoFactory::new();
    let mut written = [false; 256];
    let mut live = Vec::new();
    for inst in window {
        let info = factory.info(&inst.x86().raw);
        for u in info.used_registers() {
            let r = u.register();
            if !r.is_gpr() {
                continue;
            }
            let id = r.full_register() as usize;
            if matches!(
                u.access(),
                OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite
            ) && !written[id]
            {
                let reg = RegisterId(id as u16);
                if !live.contains(&reg) {
                    live.push(reg);
                }
            }
        }
        for u in info.used_registers() {
            if is_write(u.access()) && u.register().is_gpr() {
                written[u.register().full_register() as usize] = true;
            }
        }
    }
    live
}

impl X86Inst {
    /// How this instruction defines register `r`: `None` if it does not write it,
    /// `Some(Some(c))` if it loads the constant address `c`, `Some(None)` otherwise.
    pub fn register_definition(&self, r: RegisterId) -> Option<Option<u64>> {
        if let Some((reg, value)) = constant_definition(&self.raw)
            && reg.full_register() as u16 == r.0
        {
            return Some(Some(value));
        }
        let mut factory = InstructionInfoFactory::new();
        factory
            .info(&self.raw)
            .used_registers()
            .iter()
            .any(|u| {
                is_write(u.access())
                    && u.register().is_gpr()
                    && u.register().full_register() as u16 == r.0
            })
            .then_some(None)
    }
}

/// `analyze_indirect_jump_path` with registers known to hold constants at the window start.
pub fn analyze_indirect_jump_with(
    window: &[Inst],
    taken: &[Vaddr],
    constants: &[(RegisterId, u64)],
) -> IndirectJump {
    let Some((jump, body)) = window.split_last() else {
        return IndirectJump::Unknown;
    };
    let raw_jump = &jump.x86().raw;
    if raw_jump.mnemonic() != Mnemonic::Jmp {
        return IndirectJump::Unknown;
    }
    let mut st = State {
        regs: vec![None; 256],
        slots: Vec::new(),
        memory: Vec::new(),
        next_var: 0,
        widths: vec![0],
        narrowed: Vec::new(),
    };
    for &(RegisterId(r), value) in constants {
        st.regs[r as usize] = Some(Val::Const(value));
    }
    let mut factory = InstructionInfoFactory::new();
    // Range checks seen: (variable, entries, jcc address, default target).
    let mut bounds: Vec<(u32, u64, Vaddr, Vaddr)> = Vec::new();
    // A pending `cmp`: the compared variable, its full-register variable, the immediate.
    let mut pending_cmp: Option<(Option<u32>, Option<u32>, u64)> = None;

    for inst in body {
        let raw = &inst.x86().raw;
        let mnemonic = raw.mnemonic();
        let op0_reg =
            (raw.op_count() >= 1 && raw.op0_kind() == OpKind::Register).then(|| raw.op0_register());
        let mut handled = true;
        match mnemonic {
            Mnemonic::Cmp if raw.op_count() == 2 => {
                let (lhs, wide) = match raw.op0_kind() {
                    OpKind::Register => {
                        let v = st.reg(raw.op0_register());
                        (
                            var_of(st.narrow(v, raw.op0_register().size() as u8 * 8)),
                            var_of(v),
                        )
                    }
                    OpKind::Memory => {
                        let v = match State::slot_key(raw) {
                            Some(k) => st.slot(k),
                            None => {
                                let key = st.mem_key(raw);
                                st.memory_value(key)
                            }
                        };
                        (
                            var_of(st.narrow(v, raw.memory_size().size() as u8 * 8)),
                            var_of(v),
                        )
                    }
                    _ => (None, None),
                };
                pending_cmp = immediate_operand(raw).map(|imm| (lhs, wide, imm));
                continue;
            }
            // `sub $N,idx; ja default` checks the old value like `cmp $N,idx` (clang -O0).
            Mnemonic::Sub
                if raw.op_count() == 2
                    && raw.op0_kind() == OpKind::Register
                    && immediate_operand(raw).is_some() =>
            {
                let r = raw.op0_register();
                let v = st.reg(r);
                let lhs = var_of(st.narrow(v, r.size() as u8 * 8));
                let wide = var_of(v);
                let new = if r.size() == 4 {
                    st.fresh_width(32)
                } else {
                    st.fresh()
                };
                st.regs[r.full_register() as usize] = Some(new);
                pending_cmp = immediate_operand(raw).map(|imm| (lhs, wide, imm));
                continue;
            }
            Mnemonic::Ja | Mnemonic::Jae | Mnemonic::Jbe | Mnemonic::Jb => {
                if let Some((Some(var), wide, imm)) = pending_cmp {
                    // Unsigned checks. Falling through `ja`/`jae` or taking `jbe`/`jb` leaves
                    // the index <= imm (ja, jbe) or < imm (jae, jb).
                    let target = Vaddr(raw.near_branch_target());
                    let bound = match (mnemonic, taken.contains(&inst.addr())) {
                        (Mnemonic::Ja, false) => Some((imm.wrapping_add(1), target)),
                        (Mnemonic::Jae, false) => Some((imm, target)),
                        (Mnemonic::Jbe, true) => Some((imm.wrapping_add(1), inst.end())),
                        (Mnemonic::Jb, true) => Some((imm, inst.end())),
                        _ => None,
                    };
                    if let Some((entries, default)) = bound {
                        bounds.push((var, entries, inst.addr(), default));
                        // A check of the low bits also bounds the full register when the
                        // compiler indexes with it: the compiler knows the upper bits are
                        // zero (gcc: `cmp $0x20,%edi; ja; jmp *T(,%rdi,8)`), and the original
                        // program relies on that just as much as our CFG does.
                        if let Some(wide) = wide.filter(|w| *w != var) {
                            bounds.push((wide, entries, inst.addr(), default));
                        }
                    }
                }
                pending_cmp = None;
                continue;
            }
            Mnemonic::Mov
            | Mnemonic::Movzx
            | Mnemonic::Movsxd
            | Mnemonic::Lea
            | Mnemonic::Add
            | Mnemonic::Shl
            | Mnemonic::And
            | Mnemonic::Cdqe => {}
            _ => handled = false,
        }
        if matches!(mnemonic, Mnemonic::Add | Mnemonic::Shl | Mnemonic::And) {
            // They set the flags: a `cmp` before them no longer decides a `ja` after them.
            pending_cmp = None;
        }
        if !raw.flow_control().eq(&iced_x86::FlowControl::Next) {
            // Jumps other than the range check, calls: anything may change.
            pending_cmp = None;
        }
        let value: Option<(Register, Val)> = if !handled {
            None
        } else {
            match mnemonic {
                Mnemonic::Mov if raw.op_count() == 2 => match (raw.op0_kind(), raw.op1_kind()) {
                    (OpKind::Register, OpKind::Register) => {
                        let v = st.reg(raw.op1_register());
                        Some((raw.op0_register(), v))
                    }
                    (OpKind::Register, OpKind::Memory) => {
                        let size = raw.op0_register().size() as u8;
                        let v = st.load(raw, size, false);
                        Some((raw.op0_register(), v))
                    }
                    (OpKind::Register, _) => {
                        Some((raw.op0_register(), Val::Const(raw.immediate(1))))
                    }
                    (OpKind::Memory, OpKind::Register) => {
                        st.memory.clear();
                        if let Some(key) = State::slot_key(raw) {
                            let v = st.reg(raw.op1_register());
                            st.set_slot(key, v);
                        }
                        continue;
                    }
                    (OpKind::Memory, _) => {
                        st.memory.clear();
                        if let Some(key) = State::slot_key(raw) {
                            let v = st.fresh();
                            st.set_slot(key, v);
                        }
                        continue;
                    }
                    _ => None,
                },
                Mnemonic::Movzx if raw.op_count() == 2 => match raw.op1_kind() {
                    OpKind::Register => {
                        let v = st.reg(raw.op1_register());
                        let v = st.narrow(v, raw.op1_register().size() as u8 * 8);
                        Some((raw.op0_register(), v))
                    }
                    OpKind::Memory => {
                        let width = raw.memory_size().size() as u8 * 8;
                        let v = match State::slot_key(raw) {
                            Some(k) => st.slot(k),
                            None => st.fresh(),
                        };
                        Some((raw.op0_register(), st.narrow(v, width)))
                    }
                    _ => None,
                },
                Mnemonic::Movsxd if raw.op_count() == 2 => match raw.op1_kind() {
                    OpKind::Memory => Some((raw.op0_register(), st.load(raw, 4, true))),
                    OpKind::Register => {
                        let src = st.reg(raw.op1_register());
                        let v = match src {
                            // Bit 31 of a value narrower than 32 bits is 0: sign-extending it
                            // changes nothing (gcc: `movzbl ...,%edx` then `movslq %edx,%rdx`).
                            Val::Affine {
                                var,
                                scale: 1,
                                offset: 0,
                            } if st.widths[var as usize] < 32 => src,
                            _ => sign_extend_entry(src).unwrap_or_else(|| st.fresh()),
                        };
                        Some((raw.op0_register(), v))
                    }
                    _ => None,
                },
                Mnemonic::Cdqe => {
                    let v = sign_extend_entry(st.reg(Register::RAX)).unwrap_or_else(|| st.fresh());
                    Some((Register::RAX, v))
                }
                Mnemonic::Lea => st
                    .address(raw)
                    .map(|v| (raw.op0_register(), st.sum_index(v))),
                Mnemonic::Add if op0_reg.is_some() => {
                    let dst = raw.op0_register();
                    let lhs = st.reg(dst);
                    let rhs = match raw.op1_kind() {
                        OpKind::Register => Some(st.reg(raw.op1_register())),
                        OpKind::Memory => None,
                        _ => Some(Val::Const(raw.immediate(1))),
                    };
                    let sum = rhs.and_then(|r| add(lhs, r));
                    sum.map(|v| (dst, st.sum_index(v)))
                }
                // A mask of the low bits (`and $3,%ecx`: Rust's tagged-pointer `io::Error`)
                // keeps an index below a power of two as surely as a range check: the table
                // has that many entries (`TableBound::IndexWidth`).
                Mnemonic::And if op0_reg.is_some() => match immediate_operand(raw) {
                    Some(mask) if mask != 0 && mask < 1 << 16 && mask & (mask + 1) == 0 => {
                        let bits = (u64::BITS - mask.leading_zeros()) as u8;
                        Some((raw.op0_register(), st.fresh_width(bits)))
                    }
                    _ => None,
                },
                Mnemonic::Shl if op0_reg.is_some() => {
                    let dst = raw.op0_register();
                    match raw.op1_kind() {
                        OpKind::Immediate8 if raw.immediate(1) < 8 => {
                            let v = st.reg(dst);
                            scale(v, 1 << raw.immediate(1)).map(|v| (dst, v))
                        }
                        _ => None,
                    }
                }
                _ => None,
            }
        };
        match value {
            Some((reg, v)) => st.set(reg, v),
            None => {
                // Unmodelled: every register it writes becomes a fresh unknown.
                if writes_memory_only(raw) || raw.flow_control() != iced_x86::FlowControl::Next {
                    st.memory.clear();
                }
                if writes_memory_only(raw)
                    && raw.flow_control() == iced_x86::FlowControl::Next
                    && let Some(key) = State::slot_key(raw)
                {
                    let v = st.fresh();
                    st.set_slot(key, v);
                }
                let written: Vec<Register> = factory
                    .info(raw)
                    .used_registers()
                    .iter()
                    .filter(|u| {
                        matches!(
                            u.access(),
                            OpAccess::Write
                                | OpAccess::CondWrite
                                | OpAccess::ReadWrite
                                | OpAccess::ReadCondWrite
                        )
                    })
                    .map(|u| u.register())
                    .collect();
                for r in written {
                    if r.is_gpr() {
                        // A 32-bit result is zero-extended; narrower ones keep unknown bits.
                        let v = if r.size() == 4 {
                            st.fresh_width(32)
                        } else {
                            st.fresh()
                        };
                        st.regs[r.full_register() as usize] = Some(v);
                    }
                }
                if matches!(
                    raw.flow_control(),
                    iced_x86::FlowControl::Call | iced_x86::FlowControl::IndirectCall
                ) {
                    // Only the return registers are known to change. A caller-saved register
                    // read after the call without being redefined is one the compiler knows
                    // the callee preserves (gcc's -fipa-ra keeps table bases in %r10 across
                    // calls to local functions).
                    for r in [Register::RAX, Register::RDX] {
                        let v = st.fresh();
                        st.regs[r as usize] = Some(v);
                    }
                }
            }
        }
        // Any instruction between a cmp and its jcc that is not a modelled move clobbers
        // the pairing (flags may have changed).
        if !handled {
            pending_cmp = None;
        }
    }

    let target = match raw_jump.op0_kind() {
        OpKind::Register => st.reg(raw_jump.op0_register()),
        OpKind::Memory => st.load(raw_jump, 8, false),
        _ => return IndirectJump::Unknown,
    };
    let bound_for = |var: u32| {
        bounds
            .iter()
            .rev()
            .find(|b| b.0 == var)
            .map(|&(_, entries, check, default_target)| IndexBound {
                entries,
                check,
                default_target,
            })
    };
    match target {
        Val::Entry {
            table,
            var,
            scale: 8,
            size: 8,
            ..
        } => IndirectJump::AbsoluteTable {
            table: Vaddr(table),
            entry_size: 8,
            bound: bound_for(var),
            index_bits: st.widths[var as usize],
        },
        Val::Relative {
            add,
            table,
            var,
            scale,
            size,
        } if scale == u64::from(size) => IndirectJump::RelativeTable {
            table: Vaddr(table),
            base: Vaddr(add),
            entry_size: size,
            bound: bound_for(var),
            index_bits: st.widths[var as usize],
        },
        Val::Loaded { addr } => IndirectJump::MemorySlot { slot: Vaddr(addr) },
        _ => IndirectJump::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86_64::inst::decode_all;

    fn analyze(bytes: &[u8], addr: u64) -> IndirectJump {
        analyze_indirect_jump(&decode_all(bytes, Vaddr(addr)))
    }

    #[test]
    fn gcc_pic_table_with_range_check() {
        // cmp $0x7,%edi; ja +0x20; lea 0x100(%rip),%rdx; mov %edi,%edi;
        // movslq (%rdx,%rdi,4),%rax; add %rdx,%rax; jmp *%rax
        let code = [
            0x83, 0xff, 0x07, // cmp $7,%edi
            0x77, 0x20, // ja
            0x48, 0x8d, 0x15, 0x00, 0x01, 0x00, 0x00, // lea 0x100(%rip),%rdx
            0x89, 0xff, // mov %edi,%edi
            0x48, 0x63, 0x04, 0xba, // movslq (%rdx,%rdi,4),%rax
            0x48, 0x01, 0xd0, // add %rdx,%rax
            0xff, 0xe0, // jmp *%rax
        ];
        let table = 0x1000 + 12 + 0x100;
        assert_eq!(
            analyze(&code, 0x1000),
            IndirectJump::RelativeTable {
                table: Vaddr(table),
                base: Vaddr(table),
                entry_size: 4,
                bound: Some(IndexBound {
                    entries: 8,
                    check: Vaddr(0x1003),
                    default_target: Vaddr(0x1005 + 0x20)
                }),
                index_bits: 32,
            }
        );
    }

    #[test]
    fn byte_index_without_range_check() {
        // python3.11's opcode dispatch: movzbl %sil,%eax; mov 0x737e40(,%rax,8),%rax;
        // jmp *%rax. No check: the byte itself keeps the index below 256.
        let code = [
            0x40, 0x0f, 0xb6, 0xc6, // movzbl %sil,%eax
            0x48, 0x8b, 0x04, 0xc5, 0x40, 0x7e, 0x73, 0x00, // mov 0x737e40(,%rax,8),%rax
            0xff, 0xe0, // jmp *%rax
        ];
        assert_eq!(
            analyze(&code, 0x502029),
            IndirectJump::AbsoluteTable {
                table: Vaddr(0x737e40),
                entry_size: 8,
                bound: None,
                index_bits: 8,
            }
        );
        // Without the movzbl nothing is known of %rax.
        match analyze(&code[4..], 0x50202d) {
            IndirectJump::AbsoluteTable {
                bound: None,
                index_bits: 64,
                ..
            } => {}
            other => panic!("{other:?}"),
        }
        // A byte loaded from memory (movzbl (%rdi),%ecx; jmp *T(,%rcx,8)) bounds it too.
        let code = [
            0x0f, 0xb6, 0x0f, // movzbl (%rdi),%ecx
            0xff, 0x24, 0xcd, 0x00, 0x20, 0x40, 0x00, // jmp *0x402000(,%rcx,8)
        ];
        match analyze(&code, 0x401000) {
            IndirectJump::AbsoluteTable { index_bits: 8, .. } => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn check_of_low_bits_bounds_the_index() {
        // cmp $0x9,%eax; ja; jmp *0x402000(,%rax,8): the compiler knows the upper half is 0.
        let code = [
            0x83, 0xf8, 0x09, 0x77, 0x10, 0xff, 0x24, 0xc5, 0x00, 0x20, 0x40, 0x00,
        ];
        match analyze(&code, 0x401000) {
            IndirectJump::AbsoluteTable { bound: Some(b), .. } => assert_eq!(b.entries, 10),
            other => panic!("{other:?}"),
        }
        // cmp $0xc,%al; ja; movzbl %al,%eax; jmp *T(,%rax,8): bounded by the byte check.
        let code = [
            0x3c, 0x0c, 0x77, 0x10, 0x0f, 0xb6, 0xc0, 0xff, 0x24, 0xc5, 0x00, 0x20, 0x40, 0x00,
        ];
        match analyze(&code, 0x401000) {
            IndirectJump::AbsoluteTable { bound: Some(b), .. } => assert_eq!(b.entries, 13),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn absolute_table_non_pic() {
        // cmp $0x9,%edi; ja; mov %edi,%eax; jmp *0x402000(,%rax,8)
        let code = [
            0x83, 0xff, 0x09, 0x77, 0x10, 0x89, 0xf8, 0xff, 0x24, 0xc5, 0x00, 0x20, 0x40, 0x00,
        ];
        match analyze(&code, 0x401000) {
            IndirectJump::AbsoluteTable {
                table,
                entry_size: 8,
                bound: Some(b),
                ..
            } => {
                assert_eq!(table, Vaddr(0x402000));
                assert_eq!(b.entries, 10);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gcc_o0_spilled_index() {
        // cmpl $0x5,-0x14(%rbp); ja; mov -0x14(%rbp),%eax; lea 0x0(,%rax,4),%rdx;
        // lea 0x40(%rip),%rax; mov (%rdx,%rax,1),%eax; cltq; lea 0x34(%rip),%rdx;
        // add %rdx,%rax; jmp *%rax
        let code = [
            0x83, 0x7d, 0xec, 0x05, // cmpl $5,-0x14(%rbp)
            0x77, 0x30, // ja
            0x8b, 0x45, 0xec, // mov -0x14(%rbp),%eax
            0x48, 0x8d, 0x14, 0x85, 0x00, 0x00, 0x00, 0x00, // lea 0(,%rax,4),%rdx
            0x48, 0x8d, 0x05, 0x40, 0x00, 0x00, 0x00, // lea 0x40(%rip),%rax
            0x8b, 0x04, 0x02, // mov (%rdx,%rax,1),%eax
            0x48, 0x98, // cltq
            0x48, 0x8d, 0x15, 0x34, 0x00, 0x00, 0x00, // lea 0x34(%rip),%rdx
            0x48, 0x01, 0xd0, // add %rdx,%rax
            0xff, 0xe0, // jmp *%rax
        ];
        let first_lea_end = 0x1000 + 24;
        let table = first_lea_end + 0x40;
        match analyze(&code, 0x1000) {
            IndirectJump::RelativeTable {
                table: t,
                base,
                entry_size: 4,
                bound: Some(b),
                ..
            } => {
                assert_eq!(t, Vaddr(table));
                assert_eq!(base, Vaddr(table));
                assert_eq!(b.entries, 6);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bound_checked_in_memory() {
        // cmpl $9,(%rdi,%rdx,4); ja; mov (%rdi,%rdx,4),%edx; lea 0x100(%rip),%r8;
        // movslq (%r8,%rdx,4),%rdx; add %r8,%rdx; jmp *%rdx
        let code = [
            0x83, 0x3c, 0x97, 0x09, 0x0f, 0x87, 0x00, 0x01, 0x00, 0x00, 0x8b, 0x14, 0x97, 0x4c,
            0x8d, 0x05, 0x00, 0x01, 0x00, 0x00, 0x49, 0x63, 0x14, 0x90, 0x4c, 0x01, 0xc2, 0xff,
            0xe2,
        ];
        match analyze(&code, 0x1000) {
            IndirectJump::RelativeTable { bound: Some(b), .. } => assert_eq!(b.entries, 10),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn store_between_check_and_load_loses_the_bound() {
        // cmpl $9,(%rdi,%rdx,4); ja; movl $0,(%rsi); mov (%rdi,%rdx,4),%edx; ...
        let code = [
            0x83, 0x3c, 0x97, 0x09, 0x0f, 0x87, 0x00, 0x01, 0x00, 0x00, 0xc7, 0x06, 0x00, 0x00,
            0x00, 0x00, 0x8b, 0x14, 0x97, 0x4c, 0x8d, 0x05, 0x00, 0x01, 0x00, 0x00, 0x49, 0x63,
            0x14, 0x90, 0x4c, 0x01, 0xc2, 0xff, 0xe2,
        ];
        match analyze(&code, 0x1000) {
            IndirectJump::RelativeTable { bound, .. } => assert_eq!(bound, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn check_on_a_taken_branch() {
        // cmp $4,%edi; jbe +2 (taken); ud2; mov %edi,%eax; jmp *T(,%rax,8)
        let code = [
            0x83, 0xff, 0x04, 0x76, 0x02, 0x0f, 0x0b, 0x89, 0xf8, 0xff, 0x24, 0xc5, 0x00, 0x20,
            0x40, 0x00,
        ];
        let insts = decode_all(&code, Vaddr(0x1000));
        let path: Vec<Inst> = insts
            .iter()
            .copied()
            .filter(|i| i.addr() != Vaddr(0x1005))
            .collect();
        match analyze_indirect_jump_path(&path, &[Vaddr(0x1003)]) {
            IndirectJump::AbsoluteTable { bound: Some(b), .. } => {
                assert_eq!(b.entries, 5);
                assert_eq!(b.default_target, Vaddr(0x1005));
            }
            other => panic!("{other:?}"),
        }
        // Falling through the same jbe proves nothing.
        match analyze_indirect_jump_path(&path, &[]) {
            IndirectJump::AbsoluteTable { bound, .. } => assert_eq!(bound, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hoisted_table_base_from_register_constants() {
        // Function: lea 0x100(%rip),%r10 ... later: cmp $9,%eax; ja; movslq (%r10,%rax,4),%rax;
        // add %r10,%rax; jmp *%rax
        let head = [0x4c, 0x8d, 0x15, 0x00, 0x01, 0x00, 0x00];
        let window = [
            0x83, 0xf8, 0x09, 0x77, 0x10, 0x49, 0x63, 0x04, 0x82, 0x4c, 0x01, 0xd0, 0xff, 0xe0,
        ];
        let f = decode_all(&head, Vaddr(0x1000));
        let constants = register_constants(&f);
        let w = decode_all(&window, Vaddr(0x2000));
        assert_eq!(analyze_indirect_jump_path(&w, &[]), IndirectJump::Unknown);
        match analyze_indirect_jump_with(&w, &[], &constants) {
            IndirectJump::RelativeTable {
                table,
                base,
                bound: Some(b),
                ..
            } => {
                assert_eq!(table, Vaddr(0x1107));
                assert_eq!(base, Vaddr(0x1107));
                assert_eq!(b.entries, 10);
            }
            other => panic!("{other:?}"),
        }
        // A second, different definition makes the register unknown.
        let two = [
            0x4c, 0x8d, 0x15, 0x00, 0x01, 0x00, 0x00, 0x4c, 0x8d, 0x15, 0x00, 0x02, 0x00, 0x00,
        ];
        assert!(register_constants(&decode_all(&two, Vaddr(0x1000))).is_empty());
    }

    #[test]
    fn index_offset_by_lea_is_checked_and_read_from_the_table_start() {
        // LLVM's `match` on 4..=10 (Rivet's own main): lea -0x4(%r14),%r15; cmp $6,%r15; ja;
        // lea T(%rip),%rax; movslq (%rax,%r15,4),%rcx; add %rax,%rcx; jmp *%rcx. The table
        // starts at T, where %r15 = 0 reads: not 16 bytes before it, where %r14 = 0 would.
        let code = [
            0x4d, 0x8d, 0x7e, 0xfc, // lea -0x4(%r14),%r15
            0x49, 0x83, 0xff, 0x06, // cmp $6,%r15
            0x0f, 0x87, 0x00, 0x01, 0x00, 0x00, // ja +0x100
            0x48, 0x8d, 0x05, 0x00, 0x02, 0x00, 0x00, // lea 0x200(%rip),%rax
            0x4a, 0x63, 0x0c, 0xb8, // movslq (%rax,%r15,4),%rcx
            0x48, 0x01, 0xc1, // add %rax,%rcx
            0xff, 0xe1, // jmp *%rcx
        ];
        let table = 0x1000 + 21 + 0x200;
        assert_eq!(
            analyze(&code, 0x1000),
            IndirectJump::RelativeTable {
                table: Vaddr(table),
                base: Vaddr(table),
                entry_size: 4,
                bound: Some(IndexBound {
                    entries: 7,
                    check: Vaddr(0x1008),
                    default_target: Vaddr(0x100e + 0x100)
                }),
                index_bits: 64,
            }
        );
        // A constant added to the index from the other side (`movabs $K,%rcx; add %rax,%rcx`,
        // a niche-encoded enum's tag) also indexes from the table's start; with no range check
        // in sight, relocations or the caller size it.
        let code = [
            0x48, 0xb9, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0x7f, // movabs $0x7ff..fe,%rcx
            0x48, 0x01, 0xc1, // add %rax,%rcx
            0x48, 0x8d, 0x15, 0x00, 0x02, 0x00, 0x00, // lea 0x200(%rip),%rdx
            0x48, 0x63, 0x0c, 0x8a, // movslq (%rdx,%rcx,4),%rcx
            0x48, 0x01, 0xd1, // add %rdx,%rcx
            0xff, 0xe1, // jmp *%rcx
        ];
        let table = 0x1000 + 20 + 0x200;
        assert_eq!(
            analyze(&code, 0x1000),
            IndirectJump::RelativeTable {
                table: Vaddr(table),
                base: Vaddr(table),
                entry_size: 4,
                bound: None,
                index_bits: 64,
            }
        );
    }

    #[test]
    fn constant_index_reads_one_entry() {
        // regex_syntax's parser in Rivet's build: movabs $0x8000000000000000,%rax;
        // add $4,%rax; movabs $0x7ffffffffffffffe,%rcx; add %rax,%rcx; lea T(%rip),%rdx;
        // movslq (%rdx,%rcx,4),%rcx; add %rdx,%rcx; jmp *%rcx. The index is 2: one entry, at
        // T + 8, relative to T.
        let code = [
            0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0x80, // movabs $0x8000000000000000,%rax
            0x48, 0x83, 0xc0, 0x04, // add $4,%rax
            0x48, 0xb9, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0x7f, // movabs $0x7ff..fe,%rcx
            0x48, 0x01, 0xc1, // add %rax,%rcx
            0x48, 0x8d, 0x15, 0x00, 0x02, 0x00, 0x00, // lea 0x200(%rip),%rdx
            0x48, 0x63, 0x0c, 0x8a, // movslq (%rdx,%rcx,4),%rcx
            0x48, 0x01, 0xd1, // add %rdx,%rcx
            0xff, 0xe1, // jmp *%rcx
        ];
        let base = 0x1000 + 34 + 0x200;
        assert_eq!(
            analyze(&code, 0x1000),
            IndirectJump::RelativeTable {
                table: Vaddr(base + 8),
                base: Vaddr(base),
                entry_size: 4,
                bound: None,
                index_bits: 0,
            }
        );
        // A 4-byte read at a fixed place without an index register is a variable, not a
        // table's entry: cc1's init_sched_attrs, mov X(%rip),%eax; cmp $0x15,%eax; ja;
        // jmp *T(,%rax,8), bounded by its check.
        let code = [
            0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, // mov 0x100(%rip),%eax
            0x83, 0xf8, 0x15, // cmp $0x15,%eax
            0x0f, 0x87, 0x00, 0x02, 0x00, 0x00, // ja +0x200
            0xff, 0x24, 0xc5, 0xd8, 0x48, 0xbb, 0x01, // jmp *0x1bb48d8(,%rax,8)
        ];
        match analyze(&code, 0x1000) {
            IndirectJump::AbsoluteTable {
                table,
                bound: Some(b),
                ..
            } => assert_eq!((table, b.entries), (Vaddr(0x1bb48d8), 22)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn low_bit_mask_bounds_the_index() {
        // serde_json's writers (Rust's tagged io::Error): the base in %r13 since before the
        // loop; and $3,%ecx; movslq 0x0(%r13,%rcx,4),%rcx; add %r13,%rcx; jmp *%rcx.
        let code = [
            0x83, 0xe1, 0x03, // and $3,%ecx
            0x49, 0x63, 0x4c, 0x8d, 0x00, // movslq 0x0(%r13,%rcx,4),%rcx
            0x4c, 0x01, 0xe9, // add %r13,%rcx
            0xff, 0xe1, // jmp *%rcx
        ];
        let insts = decode_all(&code, Vaddr(0x1000));
        let r13 = RegisterId(Register::R13 as u16);
        assert_eq!(
            analyze_indirect_jump_with(&insts, &[], &[(r13, 0x5000)]),
            IndirectJump::RelativeTable {
                table: Vaddr(0x5000),
                base: Vaddr(0x5000),
                entry_size: 4,
                bound: None,
                index_bits: 2,
            }
        );
        // A mask that is no run of low bits bounds nothing; nor does a `cmp` whose flags an
        // `add` overwrote before the `ja`.
        let mut other = code;
        other[2] = 0x05; // and $5,%ecx
        match analyze_indirect_jump_with(&decode_all(&other, Vaddr(0x1000)), &[], &[(r13, 0x5000)])
        {
            IndirectJump::RelativeTable { index_bits, .. } => {
                assert!(index_bits >= 32, "{index_bits}")
            }
            other => panic!("{other:?}"),
        }
        let flags = [
            0x83, 0xe1, 0x07, // and $7,%ecx
            0x83, 0xf9, 0x02, // cmp $2,%ecx
            0x48, 0x83, 0xc4, 0x08, // add $8,%rsp
            0x77, 0x10, // ja
            0x49, 0x63, 0x4c, 0x8d, 0x00, 0x4c, 0x01, 0xe9, 0xff, 0xe1,
        ];
        match analyze_indirect_jump_with(&decode_all(&flags, Vaddr(0x1000)), &[], &[(r13, 0x5000)])
        {
            IndirectJump::RelativeTable {
                bound, index_bits, ..
            } => assert_eq!((bound, index_bits), (None, 3)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sub_is_a_range_check() {
        // mov %eax,%ecx; sub $9,%eax; ja; mov %ecx,%eax; lea 0x100(%rip),%rdx;
        // movslq (%rdx,%rax,4),%rax; add %rdx,%rax; jmp *%rax
        let code = [
            0x89, 0xc1, 0x83, 0xe8, 0x09, 0x77, 0x10, 0x89, 0xc8, 0x48, 0x8d, 0x15, 0x00, 0x01,
            0x00, 0x00, 0x48, 0x63, 0x04, 0x82, 0x48, 0x01, 0xd0, 0xff, 0xe0,
        ];
        match analyze(&code, 0x1000) {
            IndirectJump::RelativeTable { bound: Some(b), .. } => assert_eq!(b.entries, 10),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn got_tail_call_is_a_slot() {
        let code = [0xff, 0x25, 0x10, 0x00, 0x00, 0x00]; // jmp *0x10(%rip)
        assert_eq!(
            analyze(&code, 0x1000),
            IndirectJump::MemorySlot {
                slot: Vaddr(0x1016)
            }
        );
    }

    #[test]
    fn register_from_unknown_is_unknown() {
        // mov (%rdi),%rax; jmp *%rax  -- a function pointer read through an argument
        let code = [0x48, 0x8b, 0x07, 0xff, 0xe0];
        assert_eq!(analyze(&code, 0x1000), IndirectJump::Unknown);
    }

    #[test]
    fn clobbered_index_loses_the_bound() {
        // cmp $7,%edi; ja; add $1,%edi (changes the index after the check);
        // lea 0x100(%rip),%rdx; movslq (%rdx,%rdi,4),%rax; add %rdx,%rax; jmp *%rax
        let code = [
            0x83, 0xff, 0x07, 0x77, 0x20, 0x83, 0xc7, 0x01, 0x48, 0x8d, 0x15, 0x00, 0x01, 0x00,
            0x00, 0x48, 0x63, 0x04, 0xba, 0x48, 0x01, 0xd0, 0xff, 0xe0,
        ];
        match analyze(&code, 0x1000) {
            IndirectJump::RelativeTable { bound, .. } => assert_eq!(bound, None),
            other => panic!("{other:?}"),
        }
    }
}
