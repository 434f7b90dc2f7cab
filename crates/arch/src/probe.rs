//! What the ISA-neutral rest of Rivet knows about instrumentation probes: the shape of a
//! counter increment (which decides its size) and why an indirect branch's target cannot be
//! recorded. The encoders are each ISA's (`x86_64::probe`, `aarch64::probe`).

use rivet_elf::Vaddr;

/// The shape of a counter increment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeShape {
    /// x86-64 `lock incq disp(%rip)`: flags other than CF are dead here.
    Plain,
    /// x86-64: the increment wrapped in `lea -128(%rsp),%rsp; pushfq` ... `popfq;
    /// lea 128(%rsp),%rsp`.
    SavingFlags,
    /// AArch64 with LSE atomics (`stadd`). AArch64 probes never write NZCV: no flag save.
    Lse,
    /// AArch64 with an exclusive load/store loop (Armv8.0).
    LlSc,
}

impl ProbeShape {
    /// Bytes of the increment.
    pub fn size(self) -> u8 {
        match self {
            ProbeShape::Plain | ProbeShape::SavingFlags => crate::x86_64::probe::probe_size(self),
            ProbeShape::Lse => crate::aarch64::probe::probe_size(Atomics::Lse),
            ProbeShape::LlSc => crate::aarch64::probe::probe_size(Atomics::LlSc),
        }
    }

    /// True for the shapes that save and restore the arithmetic flags around the increment.
    pub fn saves_flags(self) -> bool {
        self == ProbeShape::SavingFlags
    }
}

/// How AArch64 code counts atomically: chosen at instrumentation time, for the probes and
/// the runtime alike (`rivet instrument --atomics`). x86-64 has one way (`lock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Atomics {
    /// Armv8.1 Large System Extensions (`stadd`, `cas`): every Neoverse core.
    Lse,
    /// Load-exclusive/store-exclusive loops: any Armv8.0 core.
    LlSc,
}

/// Why an indirect call's target cannot be captured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot profile the indirect branch at {at}: {reason}")]
pub struct IndirectProbeError {
    pub at: Vaddr,
    pub reason: &'static str,
}
