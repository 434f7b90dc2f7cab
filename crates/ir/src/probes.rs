//! Instrumentation probes: counter increments to insert into a function's code.
//!
//! The instrumentation pass decides which edges get a counter and where its increment goes;
//! the emitter inserts the increments while it lays out the function. A probe sits at a block
//! start, at a block end (before a terminator it copies or re-creates, after the last
//! instruction of a block that falls through), right after a call, or on an edge of a
//! conditional branch, where the emitter makes a small block of its own (the increment and a
//! jump to the edge's target) and points that side of the branch at it.

use rivet_arch::ProbeShape;
use rivet_elf::Vaddr;

use crate::program::BlockId;

/// Where an edge probe's jump goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeTarget {
    Block(BlockId),
    /// Another function (a conditional tail call, a jump into a compiler-split part).
    Address(Vaddr),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProbeAt {
    BlockStart(BlockId),
    BlockEnd(BlockId),
    /// After the call instruction with this index in `Function::insts`.
    AfterCall(u32),
    /// On the edge from a block ending in a conditional branch.
    Edge {
        from: BlockId,
        to: EdgeTarget,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub at: ProbeAt,
    /// Index of the 64-bit counter it increments.
    pub counter: u32,
    pub shape: ProbeShape,
}

/// The probes of one function, sorted by `at`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionProbes {
    pub probes: Vec<Probe>,
    /// Indirect calls and jumps whose targets are recorded: (instruction index, index of the
    /// first 64-bit word of the site's table in the counter segment), sorted.
    pub indirect: Vec<(u32, u32)>,
}

impl FunctionProbes {
    /// The probes at `at`.
    pub fn at(&self, at: ProbeAt) -> impl Iterator<Item = &Probe> {
        let first = self.probes.partition_point(|p| p.at < at);
        self.probes[first..].iter().take_while(move |p| p.at == at)
    }

    /// The edge probe, if any, on the edge from `from` to `to`.
    pub fn on_edge(&self, from: BlockId, to: EdgeTarget) -> Option<&Probe> {
        self.at(ProbeAt::Edge { from, to }).next()
    }

    pub fn is_empty(&self) -> bool {
        self.probes.is_empty() && self.indirect.is_empty()
    }

    /// The target table of the indirect branch with instruction index `inst`, if recorded.
    pub fn indirect_table(&self, inst: u32) -> Option<u32> {
        self.indirect
            .binary_search_by_key(&inst, |x| x.0)
            .ok()
            .map(|k| self.indirect[k].1)
    }
}
