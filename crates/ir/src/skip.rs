//! Why a function could not be modelled exactly.

use std::fmt;

use rivet_elf::Vaddr;

/// The construct that made discovery give up on a function, with its address. `kind()` gives a
/// stable short name for histograms; `Display` a sentence for humans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Bytes that do not decode as an instruction (data in code, or not code at all).
    InvalidInstruction { at: Vaddr },
    /// Data the toolchain marked as data inside the function (an AArch64 `$d` mapping
    /// symbol: a literal pool or constant island), which may decode as instructions.
    DataInCode { at: Vaddr },
    /// A direct branch lands inside an instruction of this function.
    BranchIntoInstruction { at: Vaddr, target: Vaddr },
    /// A direct jump leaves the function for an address that is no function entry.
    BranchToUnknownCode { at: Vaddr, target: Vaddr },
    /// The last instruction can continue past the end of the function.
    FallsOffEnd { at: Vaddr },
    /// An indirect jump whose targets could not be determined.
    UnresolvedIndirectJump { at: Vaddr },
    /// A jump table whose size is proven neither by a range check nor by relocations.
    UnboundedJumpTable { at: Vaddr, table: Vaddr },
    /// A jump table with an entry outside the function or inside an instruction.
    BadJumpTableEntry {
        at: Vaddr,
        table: Vaddr,
        target: Vaddr,
    },
    /// Computed goto in a binary without relocations: label tables cannot be found exactly.
    ComputedGotoWithoutRelocations { at: Vaddr },
    /// A landing pad outside the function (and its fragments) or inside an instruction.
    BadLandingPad { lsda: Vaddr, landing_pad: Vaddr },
    /// The LSDA could not be parsed.
    MalformedLsda { lsda: Vaddr },
    /// The FDE's unwind rows could not be read.
    MalformedCfi { at: Vaddr },
    /// A reference from code or data points inside an instruction of this function.
    ReferenceIntoInstruction { target: Vaddr },
    /// Symbols overlap without one containing the other.
    OverlappingSymbols { at: Vaddr, other: Vaddr },
    /// Two jump tables claim the same entry but read it differently (another base, kind or
    /// entry size): at least one is sized wrongly, and rewriting would write it twice.
    OverlappingJumpTables { table: Vaddr, other: Vaddr },
    /// Symbol without a size and no FDE: the end of the function is unknown.
    UnknownSize { at: Vaddr },
    /// The function's bytes are not in the file (NOBITS or outside any segment).
    NoCode { at: Vaddr },
    /// The symbol's size runs past the end of its section.
    SizeBeyondSection { at: Vaddr, section_end: Vaddr },
}

impl SkipReason {
    /// A stable identifier of the construct, used in histograms and JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            SkipReason::InvalidInstruction { .. } => "invalid-instruction",
            SkipReason::DataInCode { .. } => "data-in-code",
            SkipReason::BranchIntoInstruction { .. } => "branch-into-instruction",
            SkipReason::BranchToUnknownCode { .. } => "branch-to-unknown-code",
            SkipReason::FallsOffEnd { .. } => "falls-off-end",
            SkipReason::UnresolvedIndirectJump { .. } => "unresolved-indirect-jump",
            SkipReason::UnboundedJumpTable { .. } => "unbounded-jump-table",
            SkipReason::BadJumpTableEntry { .. } => "bad-jump-table-entry",
            SkipReason::ComputedGotoWithoutRelocations { .. } => {
                "computed-goto-without-relocations"
            }
            SkipReason::BadLandingPad { .. } => "bad-landing-pad",
            SkipReason::MalformedLsda { .. } => "malformed-lsda",
            SkipReason::MalformedCfi { .. } => "malformed-cfi",
            SkipReason::ReferenceIntoInstruction { .. } => "reference-into-instruction",
            SkipReason::OverlappingSymbols { .. } => "overlapping-symbols",
            SkipReason::OverlappingJumpTables { .. } => "overlapping-jump-tables",
            SkipReason::UnknownSize { .. } => "unknown-size",
            SkipReason::NoCode { .. } => "no-code",
            SkipReason::SizeBeyondSection { .. } => "size-beyond-section",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::InvalidInstruction { at } => {
                write!(
                    f,
                    "bytes at {at} do not decode as an instruction (data in code?)"
                )
            }
            SkipReason::DataInCode { at } => {
                write!(
                    f,
                    "data at {at} inside the code (a $d mapping symbol: literal pool or constant island)"
                )
            }
            SkipReason::BranchIntoInstruction { at, target } => {
                write!(f, "branch at {at} targets {target}, inside an instruction")
            }
            SkipReason::BranchToUnknownCode { at, target } => {
                write!(
                    f,
                    "jump at {at} leaves the function for {target}, which is no function entry"
                )
            }
            SkipReason::FallsOffEnd { at } => {
                write!(
                    f,
                    "execution can continue past the end of the function after {at}"
                )
            }
            SkipReason::UnresolvedIndirectJump { at } => {
                write!(
                    f,
                    "indirect jump at {at} has targets that could not be determined"
                )
            }
            SkipReason::UnboundedJumpTable { at, table } => write!(
                f,
                "jump table at {table} used at {at} has no range check and no relocations to size it"
            ),
            SkipReason::BadJumpTableEntry { at, table, target } => write!(
                f,
                "jump table at {table} used at {at} has entry {target} outside the function's instructions"
            ),
            SkipReason::ComputedGotoWithoutRelocations { at } => write!(
                f,
                "computed goto at {at}: label tables cannot be found without relocations"
            ),
            SkipReason::BadLandingPad { lsda, landing_pad } => write!(
                f,
                "LSDA at {lsda} has landing pad {landing_pad} outside the function's instructions"
            ),
            SkipReason::MalformedLsda { lsda } => write!(f, "LSDA at {lsda} is malformed"),
            SkipReason::MalformedCfi { at } => write!(f, "unwind info of {at} is malformed"),
            SkipReason::ReferenceIntoInstruction { target } => {
                write!(f, "a relocation refers to {target}, inside an instruction")
            }
            SkipReason::OverlappingSymbols { at, other } => {
                write!(f, "symbol at {at} overlaps the function at {other}")
            }
            SkipReason::OverlappingJumpTables { table, other } => write!(
                f,
                "jump table at {table} shares entries with the jump table at {other}, which reads them differently"
            ),
            SkipReason::UnknownSize { at } => {
                write!(f, "symbol at {at} has no size and no FDE gives one")
            }
            SkipReason::NoCode { at } => write!(f, "no file bytes back the code at {at}"),
            SkipReason::SizeBeyondSection { at, section_end } => write!(
                f,
                "symbol at {at} claims bytes past the end of its section at {section_end}"
            ),
        }
    }
}
