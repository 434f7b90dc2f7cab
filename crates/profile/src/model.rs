//! The in-memory profile shared by every format: branch (edge) counts between locations, or
//! IP samples at locations, plus what identifies the binary they were taken on.
//!
//! Maps are `BTreeMap`s so that iteration, and hence every writer, is deterministic.

use std::collections::BTreeMap;

/// How a location names its place (fdata's leading flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LocKind {
    /// `0`: not a symbol of the binary (a shared object by path, or `[unknown]`).
    External,
    /// `1`: a symbol of the binary; local symbols carry a `/N` or `/file/N` suffix in the name.
    Symbol,
    /// `2`: a local symbol (accepted on input; written as `Symbol` by BOLT's tools).
    Local,
}

/// A place in the profiled binary: a symbol (or shared object) and an offset from it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    pub kind: LocKind,
    /// Symbol name (unescaped); `[unknown]` for an unknown external place.
    pub name: String,
    pub offset: u64,
}

impl Location {
    pub fn symbol(name: impl Into<String>, offset: u64) -> Location {
        Location {
            kind: LocKind::Symbol,
            name: name.into(),
            offset,
        }
    }

    /// The `[unknown]` external location (fdata's `0 [unknown] 0`).
    pub fn unknown() -> Location {
        Location {
            kind: LocKind::External,
            name: "[unknown]".into(),
            offset: 0,
        }
    }
}

/// Counts of one branch or edge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BranchCount {
    pub count: u64,
    pub mispreds: u64,
}

/// What kind of data a profile holds. Profiles of different modes cannot be merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Branch and edge counts: LBR branch stacks or instrumentation.
    Branches,
    /// IP samples without branch stacks (fdata's `no_lbr`), with the event names if known.
    Samples { events: Vec<String> },
}

/// Where a profile's counts came from (informational; not part of the merge key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    #[default]
    Unknown,
    /// Rivet's or BOLT's instrumentation: exact edge counts.
    Instrumentation,
    /// perf branch stacks.
    Lbr,
    /// perf IP samples.
    Samples,
    /// A hardware instruction trace decoded by perf (CoreSight ETM, Intel PT: `--itrace=b`):
    /// every taken branch of the traced stretches, so the counts are exact, not sampled.
    Trace,
    /// Arm SPE: operations sampled at a fixed interval, branches with their targets.
    Spe,
}

/// The instruction set a profile's code addresses belong to, when the profile records it.
///
/// Every profile written before Rivet handled AArch64 was of x86-64 code and carries no
/// architecture; such a profile stays valid as it is, so only the other architectures are
/// recorded (native format version 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Architecture {
    X86_64,
    Aarch64,
}

impl Architecture {
    /// The word the native format writes.
    pub fn keyword(self) -> &'static str {
        match self {
            Architecture::X86_64 => "x86-64",
            Architecture::Aarch64 => "aarch64",
        }
    }

    /// The architecture a native-format word names.
    pub fn from_keyword(word: &str) -> Option<Architecture> {
        [Architecture::X86_64, Architecture::Aarch64]
            .into_iter()
            .find(|a| a.keyword() == word)
    }
}

/// What a profile remembers of one function's code in the build it was taken on, so that it
/// can be matched to another build of the same program (stale matching: `rivet_passes::stale`
/// computes and uses these; this crate only carries them). Hashes mask addresses and
/// immediates, so code that only moved hashes the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FunctionHash {
    /// Hash of the whole function: every block's `exact` hash, offset and successors. Equal
    /// hashes mean the profile's offsets fit the function as they are.
    pub hash: u64,
    /// Per basic block, sorted by offset, offsets unique.
    pub blocks: Vec<BlockHash>,
}

/// The hashes of one basic block (see [`FunctionHash`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockHash {
    /// Offset of the block's first instruction from the function's start.
    pub offset: u64,
    /// Offset of the block's last instruction (where its branch records leave from).
    pub last: u64,
    /// The block's instructions (operands, addresses and immediates masked) and the names of
    /// the functions it calls.
    pub exact: u64,
    /// The block's mnemonics and the names of the functions it calls: survives register
    /// allocation and operand changes.
    pub loose: u64,
    /// The `loose` hashes of the block's predecessors and successors.
    pub neighbours: u64,
    /// Where switch tables send to the block: for each table with an entry for it, the
    /// table's length and the first index that leads here; 0 when no table does (native
    /// format version 4). A case keeps its index across builds as long as the switch keeps
    /// its case values, however much the handler's code changed.
    pub case: u64,
}

/// A profile of one binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// GNU build-id (hex, lower case) of the binary the locations refer to, when known.
    pub build_id: Option<String>,
    /// File name of that binary, when known.
    pub binary_name: Option<String>,
    pub mode: Mode,
    pub origin: Origin,
    /// The instruction set of the profiled code; `None` when the format does not say (fdata,
    /// YAML, and native profiles of x86-64 code, which predate the field).
    pub architecture: Option<Architecture>,
    /// fdata `boltedcollection`: locations refer to the pre-BOLT binary through BAT.
    pub bolted_collection: bool,
    /// Branch and edge counts (mode `Branches`): (from, to) -> counts. A fall-through edge is
    /// recorded from the last instruction of its block to the start of the next one; an entry
    /// into a function from outside has from = `[unknown]` and to = offset 0.
    pub branches: BTreeMap<(Location, Location), BranchCount>,
    /// IP samples (mode `Samples`): location -> count.
    pub samples: BTreeMap<Location, u64>,
    /// Memory accesses (fdata lines with flags 3, 4, 5; either mode): (instruction, data
    /// address) -> count. Nothing in Rivet uses them yet; they are kept so that reading and
    /// writing a profile loses nothing.
    pub memory: BTreeMap<(Location, Location), u64>,
    /// Hashes of the code of the functions the records name, by profile name (native format
    /// version 2; empty when the writer did not have the binary, and in every other format).
    pub hashes: BTreeMap<String, FunctionHash>,
}

impl Profile {
    pub fn new(mode: Mode) -> Profile {
        Profile {
            build_id: None,
            binary_name: None,
            mode,
            origin: Origin::Unknown,
            architecture: None,
            bolted_collection: false,
            branches: BTreeMap::new(),
            samples: BTreeMap::new(),
            memory: BTreeMap::new(),
            hashes: BTreeMap::new(),
        }
    }

    /// Adds a branch count (summing with what is there).
    pub fn add_branch(&mut self, from: Location, to: Location, count: u64, mispreds: u64) {
        let c = self.branches.entry((from, to)).or_default();
        c.count = c.count.saturating_add(count);
        c.mispreds = c.mispreds.saturating_add(mispreds);
    }

    /// Adds samples at a location.
    pub fn add_sample(&mut self, at: Location, count: u64) {
        let c = self.samples.entry(at).or_default();
        *c = c.saturating_add(count);
    }

    /// Adds memory accesses of the instruction at `pc` to the data at `data`.
    pub fn add_memory(&mut self, pc: Location, data: Location, count: u64) {
        let c = self.memory.entry((pc, data)).or_default();
        *c = c.saturating_add(count);
    }

    /// True when the profile holds no counts at all.
    pub fn is_empty(&self) -> bool {
        self.branches.is_empty() && self.samples.is_empty() && self.memory.is_empty()
    }
}

impl LocKind {
    /// The fdata flag of a code location (`0`, `1`, `2`); memory locations add 3.
    pub fn flag(self) -> u8 {
        match self {
            LocKind::External => 0,
            LocKind::Symbol => 1,
            LocKind::Local => 2,
        }
    }

    /// The kind of a code-location flag `0`..=`2`.
    pub fn from_flag(flag: u8) -> Option<LocKind> {
        match flag {
            0 => Some(LocKind::External),
            1 => Some(LocKind::Symbol),
            2 => Some(LocKind::Local),
            _ => None,
        }
    }
}

impl Mode {
    /// A short name for messages: `branches` or `samples`.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Branches => "branches",
            Mode::Samples { .. } => "samples",
        }
    }
}

impl Origin {
    /// The keyword Rivet's native format writes for this origin.
    pub fn keyword(self) -> &'static str {
        match self {
            Origin::Unknown => "unknown",
            Origin::Instrumentation => "instrumentation",
            Origin::Lbr => "lbr",
            Origin::Samples => "samples",
            Origin::Trace => "trace",
            Origin::Spe => "spe",
        }
    }

    /// The origin a native-format keyword names.
    pub fn from_keyword(word: &str) -> Option<Origin> {
        [
            Origin::Unknown,
            Origin::Instrumentation,
            Origin::Lbr,
            Origin::Samples,
            Origin::Trace,
            Origin::Spe,
        ]
        .into_iter()
        .find(|o| o.keyword() == word)
    }
}
