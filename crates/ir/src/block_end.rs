//! How a block ends once its function is rewritten.
//!
//! Rewriting moves blocks, so the branch that ends a block may have to change: a jump to the
//! block now placed after it is dropped, a conditional jump whose taken side now comes next is
//! inverted, a block whose successor went elsewhere needs a new `jmp`. The emitter writes
//! those branches, the size estimate that decides splitting counts their bytes, and the dyno
//! stats count their executions. All three take the decision from here, so that what is
//! estimated and counted is what is written.
//!
//! [`Function::block_exit`] says how a block leaves before any layout; [`BlockExit::written`]
//! says which branches end it when a given block is placed after it.

use rivet_arch::Flow;
use rivet_elf::Vaddr;

use crate::{Block, Function, Terminator};

/// How a block leaves, independent of where it is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockExit {
    /// No control-flow instruction ends the block: it runs into `to`, the address after it,
    /// and is copied whole.
    FallThrough { to: Vaddr },
    /// A direct `jmp` to `to` (a block of the function, or another function for a tail call).
    /// The emitter re-creates it, or drops it when `to` is placed next.
    Jump { to: Vaddr, tail_call: bool },
    /// A conditional jump to `taken` that otherwise falls to `fall`; for a conditional tail
    /// call, `taken` is another function. Only an `invertible` one can be re-created: the
    /// emitter refuses `loop`, `jrcxz` and `xbegin`, and a function holding one keeps its
    /// original code.
    Cond {
        taken: Vaddr,
        fall: Vaddr,
        tail_call: bool,
        invertible: bool,
    },
    /// The last instruction is copied as it is: a return, an indirect jump or tail call, a
    /// jump table, a trap, a call that does not return.
    Copied,
    /// The terminator says conditional jump but the instruction is not one; the emitter
    /// refuses the function.
    Malformed { at: Vaddr },
    /// Never the input's: a jump replaced by a copy of the return instruction `ret` (an
    /// index into `Function::insts`) of the block it went to, which does nothing else
    /// (`ExitChange::JumpToReturn`).
    Return { ret: u32 },
}

/// The branches the emitter writes at the end of a block, given the block placed after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrittenEnd {
    /// No new branch: the block falls into the block placed next, or its jump there is
    /// dropped, or its last instruction is copied.
    Nothing,
    /// A `jmp` to `to`: the re-created jump, or the one added after a fall-through block
    /// whose successor is elsewhere.
    Jump { to: Vaddr },
    /// A conditional jump to `to`, falling into the block placed next; `inverted` when the
    /// old taken side is the one placed next.
    Cond { to: Vaddr, inverted: bool },
    /// A conditional jump to `taken`, then a `jmp` to `fall`: neither side is placed next.
    CondThenJump { taken: Vaddr, fall: Vaddr },
}

impl WrittenEnd {
    /// Whether the block runs on into the block placed after it (code after it that is not
    /// that block is never fallen into).
    pub fn falls_into_next(self) -> bool {
        matches!(self, WrittenEnd::Nothing | WrittenEnd::Cond { .. })
    }
}

impl BlockExit {
    /// True when the emitter writes its own instruction in place of the block's last one
    /// (re-created, inverted or dropped) rather than copying it.
    pub fn recreates_last(&self) -> bool {
        match self {
            BlockExit::Jump { .. } | BlockExit::Return { .. } => true,
            BlockExit::Cond { invertible, .. } => *invertible,
            _ => false,
        }
    }

    /// The branches that end the block when `is_next(addr)` says whether the code at `addr`
    /// is the block placed after it. `None` for a block the emitter copies as it is or
    /// refuses (`Copied`, `Malformed`, a conditional jump that cannot be inverted), and for a
    /// copied `Return`.
    pub fn written(&self, is_next: impl Fn(Vaddr) -> bool) -> Option<WrittenEnd> {
        Some(match *self {
            BlockExit::FallThrough { to } if is_next(to) => WrittenEnd::Nothing,
            BlockExit::FallThrough { to } => WrittenEnd::Jump { to },
            BlockExit::Jump { to, .. } if is_next(to) => WrittenEnd::Nothing,
            BlockExit::Jump { to, .. } => WrittenEnd::Jump { to },
            BlockExit::Cond {
                taken,
                fall,
                tail_call,
                invertible: true,
            } => {
                if is_next(fall) {
                    WrittenEnd::Cond {
                        to: taken,
                        inverted: false,
                    }
                } else if is_next(taken) && !tail_call {
                    // A conditional tail call keeps its taken side: the other function is
                    // never placed next.
                    WrittenEnd::Cond {
                        to: fall,
                        inverted: true,
                    }
                } else {
                    WrittenEnd::CondThenJump { taken, fall }
                }
            }
            BlockExit::Cond { .. }
            | BlockExit::Copied
            | BlockExit::Malformed { .. }
            | BlockExit::Return { .. } => {
                return None;
            }
        })
    }
}

impl Function {
    /// How `block` leaves; `None` for a block without instructions.
    pub fn block_exit(&self, block: &Block) -> Option<BlockExit> {
        let last = self.block_insts(block).last()?;
        Some(match (&block.terminator, last.flow()) {
            (Terminator::FallThrough, _) => BlockExit::FallThrough { to: last.end() },
            (Terminator::Jump, Flow::Jump { target }) => BlockExit::Jump {
                to: target,
                tail_call: false,
            },
            (Terminator::TailCall { .. }, Flow::Jump { target }) => BlockExit::Jump {
                to: target,
                tail_call: true,
            },
            (Terminator::CondJump | Terminator::CondTailCall { .. }, Flow::CondJump { target }) => {
                BlockExit::Cond {
                    taken: target,
                    fall: last.end(),
                    tail_call: matches!(block.terminator, Terminator::CondTailCall { .. }),
                    invertible: last.is_invertible_cond_jump(),
                }
            }
            (Terminator::CondJump | Terminator::CondTailCall { .. }, _) => {
                BlockExit::Malformed { at: last.addr() }
            }
            // Indirect tail calls (`jmp *%rax`) among them.
            _ => BlockExit::Copied,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(tail_call: bool, invertible: bool) -> BlockExit {
        BlockExit::Cond {
            taken: Vaddr(0x100),
            fall: Vaddr(0x20),
            tail_call,
            invertible,
        }
    }

    #[test]
    fn fall_through_and_jumps_need_a_jmp_only_when_their_target_is_elsewhere() {
        let fall = BlockExit::FallThrough { to: Vaddr(0x20) };
        assert_eq!(
            fall.written(|a| a == Vaddr(0x20)),
            Some(WrittenEnd::Nothing)
        );
        assert_eq!(
            fall.written(|_| false),
            Some(WrittenEnd::Jump { to: Vaddr(0x20) })
        );
        assert!(!fall.recreates_last());
        let jump = BlockExit::Jump {
            to: Vaddr(0x80),
            tail_call: false,
        };
        assert_eq!(
            jump.written(|a| a == Vaddr(0x80)),
            Some(WrittenEnd::Nothing)
        );
        assert_eq!(
            jump.written(|a| a == Vaddr(0x20)),
            Some(WrittenEnd::Jump { to: Vaddr(0x80) })
        );
        assert!(jump.recreates_last());
    }

    #[test]
    fn a_conditional_jump_is_inverted_when_its_taken_side_comes_next() {
        let c = cond(false, true);
        assert_eq!(
            c.written(|a| a == Vaddr(0x20)),
            Some(WrittenEnd::Cond {
                to: Vaddr(0x100),
                inverted: false
            })
        );
        assert_eq!(
            c.written(|a| a == Vaddr(0x100)),
            Some(WrittenEnd::Cond {
                to: Vaddr(0x20),
                inverted: true
            })
        );
        assert_eq!(
            c.written(|_| false),
            Some(WrittenEnd::CondThenJump {
                taken: Vaddr(0x100),
                fall: Vaddr(0x20)
            })
        );
        // A conditional tail call is never inverted, even if told its target comes next.
        assert_eq!(
            cond(true, true).written(|a| a == Vaddr(0x100)),
            Some(WrittenEnd::CondThenJump {
                taken: Vaddr(0x100),
                fall: Vaddr(0x20)
            })
        );
    }

    #[test]
    fn copied_refused_and_uninvertible_ends_write_nothing_new() {
        assert_eq!(BlockExit::Copied.written(|_| true), None);
        assert_eq!(
            BlockExit::Malformed { at: Vaddr(0) }.written(|_| true),
            None
        );
        assert_eq!(cond(false, false).written(|_| false), None);
        assert!(!cond(false, false).recreates_last());
        assert!(cond(false, true).recreates_last());
    }
}
