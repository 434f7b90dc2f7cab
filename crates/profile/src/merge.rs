//! Summing profiles of one binary: several training runs, several workloads, a fleet of hosts.
//!
//! [`Merger`] folds profiles in one at a time, each with a [`Weight`], so that a caller can
//! read an input, add it and drop it before reading the next: memory holds the sum so far and
//! one input, never all of them, however many there are. The sum is kept in a compact form
//! (symbol names stored once and referred to by number), 0.4 of the size of a [`Profile`] with
//! the same records on SQLite's profile, and [`Merger::write_native`] streams it out record by
//! record, so that the sum plus one input read as a `Profile` stays below twice the size of
//! one profile (docs/merge-benchmark.md). Counts are summed saturating, so a huge count sticks at
//! `u64::MAX` instead of wrapping to a small one.
//!
//! The result does not depend on the order of the inputs nor on how they are grouped: summing
//! is commutative and associative (saturating addition of unsigned counts is), and so is every
//! rule for the header (the least binary name, the common origin or `Unknown`, the one build-id
//! and event list the inputs agree on). So a fleet can merge in a tree, in any order, on any
//! number of machines, and get the bytes one merge of every input gives. A weight scales an
//! input's counts before it is added (see [`Weight`] for the rounding); give weights to the
//! leaves of such a tree, never to partial sums, since rounding a sum differs from summing
//! rounded counts (integer weights alone distribute exactly).
//!
//! [`merge`] refuses to mix what cannot be summed meaningfully: branch counts with IP samples,
//! samples of different events, profiles of different builds (when both build-ids are known),
//! and BAT-mapped (`boltedcollection`) profiles with plain ones. [`YamlMerger`] sums BOLT YAML
//! profiles with the rules of `merge-fdata`, plus two checks it lacks: build-ids and the block
//! order (`dfs-order`) must agree, since block indices of a DFS-ordered profile name other
//! blocks than those of a layout-ordered one.
//!
//! Errors name inputs by position, counting from 1, so the caller can name the files
//! ([`MergeError::render`]). The result depends only on the inputs, never on hashing or threads.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt::{self, Write as _};
use std::io::Write;
use std::str::FromStr;

use crate::counters::{self, CounterMap, LocRef};
use crate::fdata;
use crate::model::{
    Architecture, BranchCount, FunctionHash, LocKind, Location, Mode, Origin, Profile,
};
use crate::native::{self, NativeError};
use crate::yaml::{YamlBlock, YamlFunction, YamlHeader, YamlProfile};

/// Profiles that cannot be merged. `input`s count from 1 in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeError {
    NoInputs,
    Mode {
        first: usize,
        expected: &'static str,
        input: usize,
        found: &'static str,
    },
    Events {
        first: usize,
        expected: String,
        input: usize,
        found: String,
    },
    BuildId {
        first: usize,
        expected: String,
        input: usize,
        found: String,
    },
    BoltedCollection {
        first: usize,
        expected: &'static str,
        input: usize,
        found: &'static str,
    },
    /// Two inputs record different instruction sets.
    Architecture {
        first: usize,
        expected: &'static str,
        input: usize,
        found: &'static str,
    },
    YamlLbr {
        first: usize,
        input: usize,
    },
    YamlHashFunc {
        first: usize,
        expected: crate::yaml::HashFunc,
        input: usize,
        found: crate::yaml::HashFunc,
    },
    YamlBlockOrder {
        first: usize,
        expected: &'static str,
        input: usize,
        found: &'static str,
    },
    YamlFunction {
        input: usize,
        function: String,
        message: String,
    },
}

impl MergeError {
    /// The message, with each input named by `name(position)` (positions count from 1). The
    /// `Display` form names them "input N"; a command passes the file names instead.
    pub fn render(&self, name: &dyn Fn(usize) -> String) -> String {
        match self {
            MergeError::NoInputs => "no profiles to merge".into(),
            MergeError::Mode {
                first,
                expected,
                input,
                found,
            } => format!(
                "{} has {found} but {} has {expected}: branch counts and IP samples cannot be summed",
                name(*input),
                name(*first)
            ),
            MergeError::Events {
                first,
                expected,
                input,
                found,
            } => format!(
                "{} sampled events [{found}] but {} sampled [{expected}]: their counts cannot be summed",
                name(*input),
                name(*first)
            ),
            MergeError::BuildId {
                first,
                expected,
                input,
                found,
            } => format!(
                "{} is for build-id {found} but {} is for build-id {expected}: they profile different binaries",
                name(*input),
                name(*first)
            ),
            MergeError::BoltedCollection {
                first,
                expected,
                input,
                found,
            } => format!(
                "{} {found} collected on a BOLTed binary (boltedcollection) but {} {expected}: they cannot be mixed",
                name(*input),
                name(*first)
            ),
            MergeError::Architecture {
                first,
                expected,
                input,
                found,
            } => format!(
                "{} profiles {found} code but {} profiles {expected} code: they profile different binaries",
                name(*input),
                name(*first)
            ),
            MergeError::YamlLbr { first, input } => format!(
                "{} is an LBR profile and {} is not (or the other way round): they cannot be merged",
                name(*input),
                name(*first)
            ),
            MergeError::YamlHashFunc {
                first,
                expected,
                input,
                found,
            } => format!(
                "{} hashes with {found:?} but {} with {expected:?}: they cannot be merged",
                name(*input),
                name(*first)
            ),
            MergeError::YamlBlockOrder {
                first,
                expected,
                input,
                found,
            } => format!(
                "{} numbers blocks in {found} order but {} in {expected} order: block ids would name different blocks",
                name(*input),
                name(*first)
            ),
            MergeError::YamlFunction {
                input,
                function,
                message,
            } => format!("{}, function {function}: {message}", name(*input)),
        }
    }
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&|i| format!("input {i}")))
    }
}

impl std::error::Error for MergeError {}

/// Why [`Merger::write_native`] could not write the sum.
#[derive(Debug)]
pub enum WriteError {
    Merge(MergeError),
    /// The sum holds what the format cannot write (an empty name, a newline in a name).
    Native(NativeError),
    Io(std::io::Error),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Merge(e) => e.fmt(f),
            WriteError::Native(e) => e.fmt(f),
            WriteError::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for WriteError {}

impl From<std::io::Error> for WriteError {
    fn from(e: std::io::Error) -> WriteError {
        WriteError::Io(e)
    }
}

fn unrepresentable(message: impl Into<String>) -> WriteError {
    WriteError::Native(NativeError::Unrepresentable(message.into()))
}

/// How much an input counts in a merge: a decimal number like `3`, `0.5` or `1.25`, positive,
/// with at most 9 digits after the point and 18 in all.
///
/// A count `c` becomes `c × weight` rounded to the nearest integer, halves to the even one
/// (so that rounding errors do not all lean one way across many records), and saturates at
/// `u64::MAX`. The arithmetic is exact (decimal, in 128-bit integers), never floating point,
/// so the result is the same on every machine. A record whose counts were not all zero but
/// round to zero is left out: an old profile merged with a small weight fades away rather
/// than leaving records of count 0. Weight 1 changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weight {
    /// The value is `units / 10^scale`.
    units: u64,
    scale: u32,
}

/// Why a weight could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightError(String);

impl fmt::Display for WeightError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WeightError {}

impl Weight {
    pub const ONE: Weight = Weight { units: 1, scale: 0 };
    const MAX_DECIMALS: u32 = 9;
    const MAX_DIGITS: usize = 18;

    /// Whether scaling by this weight is the identity.
    pub fn is_one(self) -> bool {
        u128::from(self.units) == 10u128.pow(self.scale)
    }

    /// The weight as a whole number, when it is one (`3`, `2.0`); `None` for `0.5`.
    pub fn whole(self) -> Option<u64> {
        let divisor = 10u64.pow(self.scale);
        self.units
            .is_multiple_of(divisor)
            .then_some(self.units / divisor)
    }

    /// `count × weight`, rounded to the nearest integer (halves to even), saturating.
    pub fn apply(self, count: u64) -> u64 {
        if self.is_one() {
            return count;
        }
        let product = u128::from(count) * u128::from(self.units);
        let divisor = 10u128.pow(self.scale);
        let (quotient, remainder) = (product / divisor, product % divisor);
        let rounded = match (2 * remainder).cmp(&divisor) {
            std::cmp::Ordering::Less => quotient,
            std::cmp::Ordering::Greater => quotient + 1,
            std::cmp::Ordering::Equal => quotient + (quotient & 1),
        };
        u64::try_from(rounded).unwrap_or(u64::MAX)
    }

    /// Scales every count of `profile`, leaving out records that round away (see [`Weight`]).
    pub fn scale_profile(self, profile: &mut Profile) {
        if self.is_one() {
            return;
        }
        profile.branches.retain(|_, c| {
            let was_zero = c.count == 0 && c.mispreds == 0;
            c.count = self.apply(c.count);
            c.mispreds = self.apply(c.mispreds);
            was_zero || c.count != 0 || c.mispreds != 0
        });
        scale_counts(&mut profile.samples, self);
        scale_counts(&mut profile.memory, self);
    }

    /// Scales every count of a BOLT YAML profile. Nothing is left out: a YAML block or
    /// function is part of the function's shape (its `nblocks`, its ids), not just a count.
    pub fn scale_yaml(self, profile: &mut YamlProfile) {
        if self.is_one() {
            return;
        }
        for f in &mut profile.functions {
            f.exec = self.apply(f.exec);
            f.extern_entries = self.apply(f.extern_entries);
            for b in &mut f.blocks {
                b.exec = self.apply(b.exec);
                b.events = self.apply(b.events);
                for c in &mut b.calls {
                    c.cnt = self.apply(c.cnt);
                    c.mis = self.apply(c.mis);
                }
                for s in &mut b.succ {
                    s.cnt = self.apply(s.cnt);
                    s.mis = self.apply(s.mis);
                }
            }
        }
    }
}

/// Scales a map of single counts (samples, memory accesses) as [`Weight`] says.
fn scale_counts<K: Ord>(counts: &mut BTreeMap<K, u64>, weight: Weight) {
    counts.retain(|_, c| {
        let was_zero = *c == 0;
        *c = weight.apply(*c);
        was_zero || *c != 0
    });
}

impl FromStr for Weight {
    type Err = WeightError;

    /// Reads `DIGITS` or `DIGITS.DIGITS`; nothing else (no sign, exponent or spaces).
    fn from_str(text: &str) -> Result<Weight, WeightError> {
        let bad = |why: &str| WeightError(format!("weight {text:?}: {why}"));
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || text.ends_with('.') {
            return Err(bad("expected a decimal number such as 3 or 0.5"));
        }
        if fraction.len() > Weight::MAX_DECIMALS as usize {
            return Err(bad("at most 9 digits after the point"));
        }
        let all = format!("{whole}{fraction}");
        let all = all.trim_start_matches('0');
        if all.len() > Weight::MAX_DIGITS {
            return Err(bad("at most 18 significant digits"));
        }
        let units: u64 = if all.is_empty() {
            0
        } else {
            all.parse().map_err(|_| bad("not a number"))?
        };
        if units == 0 {
            return Err(bad(
                "a weight must be above 0 (leave the input out instead)",
            ));
        }
        Ok(Weight {
            units,
            scale: fraction.len() as u32,
        })
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let divisor = 10u64.pow(self.scale);
        let (whole, fraction) = (self.units / divisor, self.units % divisor);
        if fraction == 0 {
            write!(f, "{whole}")
        } else {
            let digits = format!("{fraction:0width$}", width = self.scale as usize);
            write!(f, "{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

/// A location with its name replaced by its number in [`Merger`]'s name table: 16 bytes and
/// no allocation, where a [`Location`] takes 40 bytes plus its name's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Loc {
    kind: LocKind,
    name: u32,
    offset: u64,
}

/// What the header of the sum says so far, and which input said it (for errors).
#[derive(Debug)]
struct Header {
    mode: Mode,
    events_from: usize,
    build_id: Option<String>,
    build_id_from: usize,
    binary_name: Option<String>,
    origin: Origin,
    architecture: Option<Architecture>,
    architecture_from: usize,
    bolted_collection: bool,
}

/// Sums profiles of one binary fed one at a time (see the module's documentation).
#[derive(Debug, Default)]
pub struct Merger {
    inputs: usize,
    header: Option<Header>,
    /// Each name once, with its number. A `BTreeMap` rather than a hash table: no hashing,
    /// and no table that doubles (and briefly exists twice) as it grows.
    names: BTreeMap<Box<str>, u32>,
    branches: BTreeMap<(Loc, Loc), BranchCount>,
    samples: BTreeMap<Loc, u64>,
    memory: BTreeMap<(Loc, Loc), u64>,
    /// The code hashes the inputs carry (native format version 2), by function name.
    hashes: BTreeMap<String, FunctionHash>,
}

impl Merger {
    pub fn new() -> Merger {
        Merger::default()
    }

    /// How many inputs were added.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Every name the records of the sum use (functions and shared objects alike).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(|n| &**n)
    }

    /// Sets the code hashes of the sum (from the binary the inputs were taken on), replacing
    /// those of the inputs.
    pub fn set_hashes(&mut self, hashes: BTreeMap<String, FunctionHash>) {
        self.hashes = hashes;
    }

    /// The build-id the inputs agree on, if any says one.
    pub fn build_id(&self) -> Option<&str> {
        self.header.as_ref().and_then(|h| h.build_id.as_deref())
    }

    /// Adds `profile`, its counts scaled by `weight`. On an error the sum is left as it was
    /// before this input, and the error names it as input number [`Merger::inputs`] + 1.
    pub fn add(&mut self, mut profile: Profile, weight: Weight) -> Result<(), MergeError> {
        let input = self.inputs + 1;
        self.check_header(&mut profile, input)?;
        self.inputs = input;
        weight.scale_profile(&mut profile);
        for ((from, to), c) in profile.branches {
            let key = (self.loc(from), self.loc(to));
            let sum = self.branches.entry(key).or_default();
            sum.count = sum.count.saturating_add(c.count);
            sum.mispreds = sum.mispreds.saturating_add(c.mispreds);
        }
        for (at, count) in profile.samples {
            let key = self.loc(at);
            let sum = self.samples.entry(key).or_default();
            *sum = sum.saturating_add(count);
        }
        for ((pc, data), count) in profile.memory {
            let key = (self.loc(pc), self.loc(data));
            let sum = self.memory.entry(key).or_default();
            *sum = sum.saturating_add(count);
        }
        // Inputs of one build hash its functions alike. Should two disagree (a profile
        // without a build-id), the least wins: a rule that, like the sums, does not depend
        // on the order or grouping of the inputs.
        for (name, code) in profile.hashes {
            match self.hashes.entry(name) {
                Entry::Vacant(v) => {
                    v.insert(code);
                }
                Entry::Occupied(mut o) => {
                    if code < *o.get() {
                        o.insert(code);
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds the profile an instrumented run's `counters` give (see
    /// [`counters::emit_counted`]), as [`Merger::add`] of `CounterFile::to_profile` would,
    /// byte for byte, but without building that profile: records go straight into the sum
    /// (weight 1) or through a table of borrowed keys (another weight, which rounds each
    /// record of the input before the sum). `map` may be shared by every run of one
    /// instrumentation, decoded once; `spilled` holds a summed file's site targets beyond
    /// their tables (empty for a run's own file).
    pub fn add_counters(
        &mut self,
        map: &CounterMap,
        counters_of_run: &[u64],
        spilled: &[counters::SpilledTarget],
        weight: Weight,
    ) -> Result<(), MergeError> {
        let input = self.inputs + 1;
        let mut head = counters::profile_header(map);
        self.check_header(&mut head, input)?;
        self.inputs = input;
        if weight.is_one() {
            counters::emit_counted(map, counters_of_run, spilled, |from, to, count| {
                let key = (self.loc_ref(from), self.loc_ref(to));
                let sum = self.branches.entry(key).or_default();
                sum.count = sum.count.saturating_add(count);
            });
            return Ok(());
        }
        let mut run: BTreeMap<(LocRef<'_>, LocRef<'_>), u64> = BTreeMap::new();
        counters::emit_counted(map, counters_of_run, spilled, |from, to, count| {
            let c = run.entry((from, to)).or_default();
            *c = c.saturating_add(count);
        });
        for ((from, to), count) in run {
            // Records of a run are never 0; one that rounds to 0 is left out.
            let count = weight.apply(count);
            if count != 0 {
                let key = (self.loc_ref(from), self.loc_ref(to));
                let sum = self.branches.entry(key).or_default();
                sum.count = sum.count.saturating_add(count);
            }
        }
        Ok(())
    }

    /// The sum, as a profile. Its records are sorted like every profile's, so the numbering
    /// of names (the order they were first seen) leaves no trace.
    pub fn finish(self) -> Result<Profile, MergeError> {
        let header = self.header.ok_or(MergeError::NoInputs)?;
        let mut names: Vec<Box<str>> = vec![Box::from(""); self.names.len()];
        for (name, id) in self.names {
            names[id as usize] = name;
        }
        let location = |l: Loc| Location {
            kind: l.kind,
            name: names[l.name as usize].to_string(),
            offset: l.offset,
        };
        let mut profile = Profile::new(header.mode);
        profile.build_id = header.build_id;
        profile.binary_name = header.binary_name;
        profile.origin = header.origin;
        profile.architecture = header.architecture;
        profile.bolted_collection = header.bolted_collection;
        profile.hashes = self.hashes;
        // `into_iter` frees the compact sum as the profile grows.
        for ((from, to), c) in self.branches {
            profile.branches.insert((location(from), location(to)), c);
        }
        for (at, count) in self.samples {
            profile.samples.insert(location(at), count);
        }
        for ((pc, data), count) in self.memory {
            profile.memory.insert((location(pc), location(data)), count);
        }
        Ok(profile)
    }

    /// Writes the sum in Rivet's format, the bytes `native::write(&self.finish()?)` gives,
    /// without ever holding the whole profile or its text: records go out one by one from
    /// the compact sum (renumbered so that names number in sorted order, which makes the
    /// compact keys sort as the profile's do), through `out`, which should be buffered.
    pub fn write_native(self, out: &mut impl Write) -> Result<(), WriteError> {
        let header = self.header.ok_or(WriteError::Merge(MergeError::NoInputs))?;
        let mut head = Profile::new(header.mode);
        head.build_id = header.build_id;
        head.binary_name = header.binary_name;
        head.origin = header.origin;
        head.architecture = header.architecture;
        head.bolted_collection = header.bolted_collection;
        head.hashes = self.hashes;
        match head.mode {
            Mode::Branches if !self.samples.is_empty() => {
                return Err(unrepresentable("a branch profile holds IP samples"));
            }
            Mode::Samples { .. } if !self.branches.is_empty() => {
                return Err(unrepresentable(
                    "a sample (no_lbr) profile holds branch counts",
                ));
            }
            _ => {}
        }
        let text = native::write(&head).map_err(WriteError::Native)?;
        let (records_line, end) = text.split_at(text.len() - "end\n".len());
        out.write_all(records_line.as_bytes())?;
        // A name's rank in sorted order, by its number; then the names by rank.
        let mut rank = vec![0u32; self.names.len()];
        let mut names = Vec::with_capacity(self.names.len());
        for (r, (name, id)) in self.names.into_iter().enumerate() {
            rank[id as usize] = r as u32;
            names.push(Location {
                kind: LocKind::Symbol,
                name: name.into_string(),
                offset: 0,
            });
        }
        let ranked = |l: Loc| Loc {
            name: rank[l.name as usize],
            ..l
        };
        let mut line = String::new();
        let mut put = |line: &mut String, l: Loc, flag_base: u8| -> Result<(), WriteError> {
            let loc = &mut names[l.name as usize];
            loc.kind = l.kind;
            loc.offset = l.offset;
            fdata::write_location(line, loc, flag_base).map_err(unrepresentable)
        };
        // Each map is renumbered into a vector as it is drained (the map's nodes are freed
        // as it goes) and sorted: no second map, and no vector that doubles as it grows.
        let branches = renumbered(self.branches, |(from, to)| (ranked(from), ranked(to)));
        for ((from, to), c) in branches {
            line.clear();
            put(&mut line, from, 0)?;
            line.push(' ');
            put(&mut line, to, 0)?;
            let _ = writeln!(line, " {} {}", c.mispreds, c.count);
            out.write_all(line.as_bytes())?;
        }
        let samples = renumbered(self.samples, ranked);
        for (at, count) in samples {
            line.clear();
            put(&mut line, at, 0)?;
            let _ = writeln!(line, " {count}");
            out.write_all(line.as_bytes())?;
        }
        let memory = renumbered(self.memory, |(pc, data)| (ranked(pc), ranked(data)));
        for ((pc, data), count) in memory {
            line.clear();
            put(&mut line, pc, 3)?;
            line.push(' ');
            put(&mut line, data, 3)?;
            let _ = writeln!(line, " {count}");
            out.write_all(line.as_bytes())?;
        }
        out.write_all(end.as_bytes())?;
        Ok(())
    }

    /// [`Merger::loc`] of a borrowed location: the name is copied only the first time.
    fn loc_ref(&mut self, l: LocRef<'_>) -> Loc {
        let name = match self.names.get(l.name) {
            Some(&id) => id,
            None => {
                let next = self.names.len() as u32;
                self.names.insert(Box::from(l.name), next);
                next
            }
        };
        Loc {
            kind: l.kind,
            name,
            offset: l.offset,
        }
    }

    fn loc(&mut self, l: Location) -> Loc {
        let next = self.names.len() as u32;
        let name = match self.names.get(l.name.as_str()) {
            Some(&id) => id,
            None => {
                self.names.insert(l.name.into_boxed_str(), next);
                next
            }
        };
        Loc {
            kind: l.kind,
            name,
            offset: l.offset,
        }
    }

    /// Checks `p`'s header against the sum's and merges it in; takes what the sum needs
    /// (events, build-id, name) out of `p`. Nothing changes on an error.
    fn check_header(&mut self, p: &mut Profile, input: usize) -> Result<(), MergeError> {
        let Some(merged) = &mut self.header else {
            self.header = Some(Header {
                mode: std::mem::replace(&mut p.mode, Mode::Branches),
                events_from: input,
                build_id: p.build_id.take(),
                build_id_from: input,
                binary_name: p.binary_name.take(),
                origin: p.origin,
                architecture: p.architecture,
                architecture_from: input,
                bolted_collection: p.bolted_collection,
            });
            return Ok(());
        };
        let mut take_events = false;
        match (&merged.mode, &p.mode) {
            (Mode::Branches, Mode::Branches) => {}
            (Mode::Samples { events: mine }, Mode::Samples { events: theirs }) => {
                if mine.is_empty() {
                    take_events = !theirs.is_empty();
                } else if !theirs.is_empty() && mine != theirs {
                    return Err(MergeError::Events {
                        first: merged.events_from,
                        expected: mine.join(" "),
                        input,
                        found: theirs.join(" "),
                    });
                }
            }
            (mine, theirs) => {
                return Err(MergeError::Mode {
                    first: 1,
                    expected: mode_words(mine),
                    input,
                    found: mode_words(theirs),
                });
            }
        }
        if merged.bolted_collection != p.bolted_collection {
            let words = |bolted| if bolted { "was" } else { "was not" };
            return Err(MergeError::BoltedCollection {
                first: 1,
                expected: words(merged.bolted_collection),
                input,
                found: words(p.bolted_collection),
            });
        }
        // A profile that records no architecture (fdata, YAML, x86-64) goes with any.
        if let (Some(mine), Some(theirs)) = (merged.architecture, p.architecture)
            && mine != theirs
        {
            return Err(MergeError::Architecture {
                first: merged.architecture_from,
                expected: mine.keyword(),
                input,
                found: theirs.keyword(),
            });
        }
        match (&merged.build_id, &p.build_id) {
            (Some(mine), Some(theirs)) if mine != theirs => {
                return Err(MergeError::BuildId {
                    first: merged.build_id_from,
                    expected: mine.clone(),
                    input,
                    found: theirs.clone(),
                });
            }
            (None, Some(_)) => {
                merged.build_id = p.build_id.take();
                merged.build_id_from = input;
            }
            _ => {}
        }
        if merged.architecture.is_none() && p.architecture.is_some() {
            merged.architecture = p.architecture;
            merged.architecture_from = input;
        }
        if take_events {
            merged.mode = std::mem::replace(&mut p.mode, Mode::Branches);
            merged.events_from = input;
        }
        // The least name, not the first: the first depends on the order of the inputs.
        if let Some(theirs) = p.binary_name.take()
            && merged
                .binary_name
                .as_ref()
                .is_none_or(|mine| theirs < *mine)
        {
            merged.binary_name = Some(theirs);
        }
        if merged.origin != p.origin {
            merged.origin = Origin::Unknown;
        }
        Ok(())
    }
}

/// The entries of `map` with their keys renumbered by `key`, sorted by the new keys.
fn renumbered<K: Ord, V>(map: BTreeMap<K, V>, key: impl Fn(K) -> K) -> Vec<(K, V)> {
    let mut entries = Vec::with_capacity(map.len());
    entries.extend(map.into_iter().map(|(k, v)| (key(k), v)));
    // Keys are unique: an unstable sort gives the one order.
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    entries
}

/// Sums profiles of one binary, each with weight 1 (see [`Merger`]).
pub fn merge(profiles: impl IntoIterator<Item = Profile>) -> Result<Profile, MergeError> {
    merge_weighted(profiles.into_iter().map(|p| (p, Weight::ONE)))
}

/// Sums profiles of one binary, each scaled by its weight (see [`Merger`], [`Weight`]).
pub fn merge_weighted(
    profiles: impl IntoIterator<Item = (Profile, Weight)>,
) -> Result<Profile, MergeError> {
    let mut merger = Merger::new();
    for (profile, weight) in profiles {
        merger.add(profile, weight)?;
    }
    merger.finish()
}

fn mode_words(mode: &Mode) -> &'static str {
    match mode {
        Mode::Branches => "branch counts",
        Mode::Samples { .. } => "IP samples (no_lbr)",
    }
}

/// Sums BOLT YAML profiles of one binary fed one at a time, as `merge-fdata` does: functions
/// are matched by name and must agree on `fid`, `hash` and `nblocks`; blocks by `bid` and must
/// agree on `insns` and `hash`; call sites by (`off`, `fid`, `disc`); successors by `bid`.
/// Counts are summed; what only some inputs have is appended in input order (so, unlike
/// [`Merger`]'s, the bytes of the result can depend on the order of the inputs, though
/// not what they mean). Functions come out sorted by `fid`. Header: the first binary name and
/// known build-id are kept, origins and events that differ are joined (`; ` and `,`), flags
/// are united.
#[derive(Debug, Default)]
pub struct YamlMerger {
    inputs: usize,
    header: Option<YamlHeader>,
    build_id_from: usize,
    functions: BTreeMap<String, YamlFunction>,
}

impl YamlMerger {
    pub fn new() -> YamlMerger {
        YamlMerger::default()
    }

    /// Adds `profile`, its counts scaled by `weight`. After an error the merger must not be
    /// used further (a function may be half added).
    pub fn add(&mut self, mut profile: YamlProfile, weight: Weight) -> Result<(), MergeError> {
        let input = self.inputs + 1;
        self.inputs = input;
        weight.scale_yaml(&mut profile);
        match &mut self.header {
            None => {
                self.header = Some(profile.header);
                self.build_id_from = input;
            }
            Some(header) => merge_header(header, profile.header, input, &mut self.build_id_from)?,
        }
        add_functions(&mut self.functions, profile.functions, input)
    }

    pub fn finish(self) -> Result<YamlProfile, MergeError> {
        let header = self.header.ok_or(MergeError::NoInputs)?;
        let mut functions: Vec<YamlFunction> = self.functions.into_values().collect();
        // Stable: functions with equal ids stay in name order.
        functions.sort_by_key(|f| f.fid);
        Ok(YamlProfile { header, functions })
    }
}

/// Sums BOLT YAML profiles of one binary, each with weight 1 (see [`YamlMerger`]).
pub fn merge_yaml(
    profiles: impl IntoIterator<Item = YamlProfile>,
) -> Result<YamlProfile, MergeError> {
    let mut merger = YamlMerger::new();
    for p in profiles {
        merger.add(p, Weight::ONE)?;
    }
    merger.finish()
}

fn merge_header(
    merged: &mut YamlHeader,
    h: YamlHeader,
    input: usize,
    build_id_from: &mut usize,
) -> Result<(), MergeError> {
    if merged.binary_name.is_empty() {
        merged.binary_name = h.binary_name;
    }
    if merged.build_id.is_empty() {
        merged.build_id = h.build_id;
        *build_id_from = input;
    } else if !h.build_id.is_empty() && merged.build_id != h.build_id {
        return Err(MergeError::BuildId {
            first: *build_id_from,
            expected: merged.build_id.clone(),
            input,
            found: h.build_id,
        });
    }
    let no_flags = crate::yaml::ProfileFlags::default();
    if merged.flags == no_flags {
        merged.flags = h.flags;
    }
    if (merged.flags.lbr, merged.flags.sample) != (h.flags.lbr, h.flags.sample) {
        return Err(MergeError::YamlLbr { first: 1, input });
    }
    merged.flags.memevent |= h.flags.memevent;
    if merged.hash_func != h.hash_func {
        return Err(MergeError::YamlHashFunc {
            first: 1,
            expected: merged.hash_func,
            input,
            found: h.hash_func,
        });
    }
    if merged.dfs_order != h.dfs_order {
        let order = |dfs| if dfs { "DFS" } else { "layout" };
        return Err(MergeError::YamlBlockOrder {
            first: 1,
            expected: order(merged.dfs_order),
            input,
            found: order(h.dfs_order),
        });
    }
    if !h.origin.is_empty() {
        if merged.origin.is_empty() {
            merged.origin = h.origin;
        } else if merged.origin != h.origin {
            merged.origin = format!("{}; {}", merged.origin, h.origin);
        }
    }
    if merged.events.is_empty() {
        merged.events = h.events;
    } else if !h.events.is_empty() && merged.events != h.events {
        merged.events = format!("{},{}", merged.events, h.events);
    }
    Ok(())
}

fn add_functions(
    merged: &mut BTreeMap<String, YamlFunction>,
    functions: Vec<YamlFunction>,
    input: usize,
) -> Result<(), MergeError> {
    for f in functions {
        let error = |function: &str, message: String| MergeError::YamlFunction {
            input,
            function: function.to_owned(),
            message,
        };
        for b in &f.blocks {
            check_block(&f, b).map_err(|m| error(&f.name, m))?;
        }
        match merged.entry(f.name.clone()) {
            Entry::Vacant(slot) => {
                let mut f = f;
                // A function listed twice in one input is summed like one from two inputs.
                let blocks = std::mem::take(&mut f.blocks);
                let f = slot.insert(f);
                for b in blocks {
                    add_block(f, b).map_err(|m| error(&f.name, m))?;
                }
            }
            Entry::Occupied(mut slot) => {
                let m = slot.get_mut();
                for (what, mine, theirs) in [
                    ("nblocks", u64::from(m.nblocks), u64::from(f.nblocks)),
                    ("fid", u64::from(m.fid), u64::from(f.fid)),
                    ("hash", m.hash, f.hash),
                ] {
                    if mine != theirs {
                        return Err(error(
                            &f.name,
                            format!("{what} is {theirs:#x} here but {mine:#x} in an earlier input"),
                        ));
                    }
                }
                m.exec = m.exec.saturating_add(f.exec);
                m.extern_entries = m.extern_entries.saturating_add(f.extern_entries);
                for b in f.blocks {
                    add_block(m, b).map_err(|msg| error(&f.name, msg))?;
                }
            }
        }
    }
    Ok(())
}

fn check_block(f: &YamlFunction, b: &YamlBlock) -> Result<(), String> {
    if b.bid >= f.nblocks {
        return Err(format!(
            "block {} is out of range (nblocks is {})",
            b.bid, f.nblocks
        ));
    }
    if let Some(s) = b.succ.iter().find(|s| s.bid >= f.nblocks) {
        return Err(format!(
            "block {} has a successor {} out of range (nblocks is {})",
            b.bid, s.bid, f.nblocks
        ));
    }
    Ok(())
}

/// Adds block `b` to the merged function `m`, summing with the block of the same `bid`.
fn add_block(m: &mut YamlFunction, b: YamlBlock) -> Result<(), String> {
    let Some(mb) = m.blocks.iter_mut().find(|mb| mb.bid == b.bid) else {
        m.blocks.push(b);
        return Ok(());
    };
    if mb.insns != b.insns {
        return Err(format!(
            "block {} has {} instructions here but {} in an earlier input",
            b.bid, b.insns, mb.insns
        ));
    }
    if mb.hash != b.hash {
        return Err(format!(
            "block {} has hash {:#x} here but {:#x} in an earlier input",
            b.bid, b.hash, mb.hash
        ));
    }
    mb.exec = mb.exec.saturating_add(b.exec);
    mb.events = mb.events.saturating_add(b.events);
    for c in b.calls {
        match mb
            .calls
            .iter_mut()
            .find(|mc| (mc.off, mc.fid, mc.disc) == (c.off, c.fid, c.disc))
        {
            Some(mc) => {
                mc.cnt = mc.cnt.saturating_add(c.cnt);
                mc.mis = mc.mis.saturating_add(c.mis);
            }
            None => mb.calls.push(c),
        }
    }
    for s in b.succ {
        match mb.succ.iter_mut().find(|ms| ms.bid == s.bid) {
            Some(ms) => {
                ms.cnt = ms.cnt.saturating_add(s.cnt);
                ms.mis = ms.mis.saturating_add(s.mis);
            }
            None => mb.succ.push(s),
        }
    }
    if mb.pseudo_probes.is_empty() {
        mb.pseudo_probes = b.pseudo_probes;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BranchCount, Location};
    use crate::yaml::{HashFunc, ProfileFlags, YamlCall, YamlSucc};

    #[test]
    fn code_hashes_are_kept_and_the_least_wins_whatever_the_order() {
        let hashed = |hash: u64| {
            let mut p = branches(None, 1);
            p.hashes.insert(
                "f".into(),
                FunctionHash {
                    hash,
                    blocks: Vec::new(),
                },
            );
            p
        };
        let one = merge([hashed(7), branches(None, 2)]).unwrap();
        assert_eq!(one.hashes["f"].hash, 7);
        let a = merge([hashed(7), hashed(3)]).unwrap();
        let b = merge([hashed(3), hashed(7)]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.hashes["f"].hash, 3);
        // The streamed writer writes them too.
        let mut merger = Merger::new();
        merger.add(hashed(9), Weight::ONE).unwrap();
        let mut out = Vec::new();
        merger.write_native(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\nfunction f 9\nrecords\n"), "{text}");
        assert_eq!(crate::native::parse(&text).unwrap().hashes["f"].hash, 9);
    }

    fn branches(build_id: Option<&str>, count: u64) -> Profile {
        let mut p = Profile::new(Mode::Branches);
        p.build_id = build_id.map(str::to_owned);
        p.add_branch(Location::symbol("f", 1), Location::symbol("g", 0), count, 1);
        p
    }

    #[test]
    fn sums_saturating_and_keeps_known_metadata() {
        let mut a = branches(None, u64::MAX - 1);
        a.origin = Origin::Instrumentation;
        let mut b = branches(Some("ab12"), 5);
        b.binary_name = Some("app".into());
        b.origin = Origin::Instrumentation;
        b.add_memory(Location::symbol("f", 1), Location::symbol("v", 8), 3);
        let m = merge([a, b.clone(), b]).unwrap();
        assert_eq!(m.build_id.as_deref(), Some("ab12"));
        assert_eq!(m.binary_name.as_deref(), Some("app"));
        assert_eq!(m.origin, Origin::Instrumentation);
        let c = m.branches.values().next().unwrap();
        assert_eq!(
            *c,
            BranchCount {
                count: u64::MAX,
                mispreds: 3
            }
        );
        assert_eq!(m.memory.values().copied().collect::<Vec<_>>(), [6]);
    }

    #[test]
    fn errors_name_the_inputs() {
        let samples = Profile::new(Mode::Samples { events: vec![] });
        let e = merge([branches(None, 1), branches(None, 1), samples]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 3 has IP samples (no_lbr) but input 1 has branch counts: branch counts and \
             IP samples cannot be summed"
        );
        let e = merge([
            branches(None, 1),
            branches(Some("aa"), 1),
            branches(Some("bb"), 1),
        ])
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 3 is for build-id bb but input 2 is for build-id aa: they profile different \
             binaries"
        );
        let mut bolted = branches(None, 1);
        bolted.bolted_collection = true;
        let e = merge([branches(None, 1), bolted]).unwrap_err();
        assert!(
            matches!(e, MergeError::BoltedCollection { input: 2, .. }),
            "{e}"
        );
        let events = |e: &[&str]| {
            Profile::new(Mode::Samples {
                events: e.iter().map(|s| s.to_string()).collect(),
            })
        };
        let m = merge([events(&[]), events(&["cycles:u"]), events(&[])]).unwrap();
        assert_eq!(
            m.mode,
            Mode::Samples {
                events: vec!["cycles:u".into()]
            }
        );
        let e = merge([events(&["cycles:u"]), events(&["cpu-clock:u"])]).unwrap_err();
        assert!(
            matches!(
                e,
                MergeError::Events {
                    first: 1,
                    input: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(merge([]), Err(MergeError::NoInputs));
    }

    #[test]
    fn whole_weights_are_told_apart() {
        let whole = |t: &str| t.parse::<Weight>().unwrap().whole();
        assert_eq!(whole("3"), Some(3));
        assert_eq!(whole("2.000"), Some(2));
        assert_eq!(whole("1"), Some(1));
        assert_eq!(whole("0.5"), None);
        assert_eq!(whole("1.25"), None);
    }

    #[test]
    fn weights_read_round_and_print() {
        let w = |t: &str| t.parse::<Weight>().unwrap();
        assert_eq!(w("3").apply(7), 21);
        assert_eq!(w("1").apply(u64::MAX), u64::MAX);
        assert!(w("1.000").is_one());
        // Halves go to the even neighbour: 1.5 -> 2, 2.5 -> 2, 3.5 -> 4.
        assert_eq!([3, 5, 7, 1, 0].map(|c| w("0.5").apply(c)), [2, 2, 4, 0, 0]);
        assert_eq!(w("0.25").apply(10), 2);
        assert_eq!(w("0.3").apply(10), 3);
        assert_eq!(w("1.25").apply(3), 4);
        assert_eq!(w("0.000000001").apply(1_500_000_000), 2);
        assert_eq!(w("2").apply(u64::MAX / 2 + 1), u64::MAX);
        assert_eq!(w("999999999999999999").apply(u64::MAX), u64::MAX);
        for (text, shown) in [
            ("3", "3"),
            ("0.50", "0.5"),
            ("007.250", "7.25"),
            ("1.0", "1"),
        ] {
            assert_eq!(w(text).to_string(), shown);
        }
        for bad in [
            "",
            "0",
            "0.000",
            "-1",
            "+1",
            "1e3",
            ".5",
            "5.",
            "1.2.3",
            " 1",
            "x",
            "1.0000000001",
        ] {
            assert!(bad.parse::<Weight>().is_err(), "{bad:?} read as a weight");
        }
        assert_eq!(
            "0".parse::<Weight>().unwrap_err().to_string(),
            "weight \"0\": a weight must be above 0 (leave the input out instead)"
        );
        assert!("1234567890123456789".parse::<Weight>().is_err());
        assert!("123456789.123456789".parse::<Weight>().is_ok());
    }

    #[test]
    fn weights_scale_counts_and_fade_records_out() {
        let mut p = branches(None, 3);
        p.add_branch(Location::symbol("f", 2), Location::symbol("g", 0), 1, 0);
        p.add_branch(Location::symbol("f", 3), Location::symbol("g", 0), 0, 0);
        p.add_memory(Location::symbol("f", 1), Location::symbol("v", 0), 1);
        let mut q = branches(None, 10);
        q.add_memory(Location::symbol("f", 1), Location::symbol("v", 0), 4);
        let half: Weight = "0.5".parse().unwrap();
        let m = merge_weighted([(p, half), (q, "2".parse().unwrap())]).unwrap();
        let counts: Vec<(u64, u64, u64)> = m
            .branches
            .iter()
            .map(|((from, _), c)| (from.offset, c.count, c.mispreds))
            .collect();
        // f+1: 3*0.5 -> 2 plus 10*2; mispreds 1*0.5 -> 0 plus 2. f+2 (count 1) rounds to 0
        // and fades out; f+3 had count 0 and stays as it was.
        assert_eq!(counts, [(1, 22, 2), (3, 0, 0)]);
        // The memory record: 1*0.5 rounds to 0 (halves go to even), plus 4*2.
        assert_eq!(m.memory.values().copied().collect::<Vec<_>>(), [8]);
    }

    #[test]
    fn the_sum_does_not_depend_on_input_order_for_names() {
        let named = |name: &str| {
            let mut p = branches(Some("ab"), 1);
            p.binary_name = Some(name.into());
            p
        };
        let ab = merge([named("b"), named("a")]).unwrap();
        let ba = merge([named("a"), named("b")]).unwrap();
        assert_eq!(ab, ba);
        assert_eq!(ab.binary_name.as_deref(), Some("a"));
    }

    #[test]
    fn a_refused_input_leaves_the_sum_as_it_was() {
        let mut merger = Merger::new();
        merger.add(branches(Some("aa"), 4), Weight::ONE).unwrap();
        let e = merger
            .add(branches(Some("bb"), 1), Weight::ONE)
            .unwrap_err();
        assert_eq!(
            e.render(&|i| format!("run{i}.counts")),
            "run2.counts is for build-id bb but run1.counts is for build-id aa: they profile \
             different binaries"
        );
        merger.add(branches(None, 1), Weight::ONE).unwrap();
        assert_eq!(merger.inputs(), 2);
        let m = merger.finish().unwrap();
        assert_eq!(m.branches.values().next().unwrap().count, 5);
        assert_eq!(m.build_id.as_deref(), Some("aa"));
    }

    #[test]
    fn streaming_out_refuses_what_the_format_cannot_write() {
        let mut p = branches(None, 1);
        p.add_branch(Location::symbol("", 0), Location::symbol("g", 0), 1, 0);
        let mut merger = Merger::new();
        merger.add(p, Weight::ONE).unwrap();
        let e = merger.write_native(&mut Vec::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot write this profile: a location has an empty name"
        );
        let e = Merger::new().write_native(&mut Vec::new()).unwrap_err();
        assert_eq!(e.to_string(), "no profiles to merge");
    }

    fn yaml(exec: u64) -> YamlProfile {
        YamlProfile {
            header: YamlHeader {
                version: 1,
                binary_name: "prog".into(),
                build_id: String::new(),
                flags: ProfileFlags {
                    lbr: true,
                    ..Default::default()
                },
                origin: "branch profile reader".into(),
                events: String::new(),
                dfs_order: false,
                hash_func: HashFunc::Xxh3,
            },
            functions: vec![YamlFunction {
                name: "f".into(),
                fid: 2,
                hash: 7,
                exec,
                nblocks: 3,
                blocks: vec![YamlBlock {
                    bid: 0,
                    insns: 4,
                    exec,
                    calls: vec![YamlCall {
                        off: 3,
                        fid: 2,
                        cnt: exec,
                        ..Default::default()
                    }],
                    succ: vec![YamlSucc {
                        bid: 2,
                        cnt: exec,
                        mis: 0,
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn yaml_sums_matching_functions_blocks_calls_and_edges() {
        let mut b = yaml(5);
        b.header.origin = "perf".into();
        b.header.build_id = "abcd".into();
        b.functions[0].blocks[0].succ.push(YamlSucc {
            bid: 1,
            cnt: 9,
            mis: 1,
        });
        b.functions[0].blocks.push(YamlBlock {
            bid: 2,
            insns: 1,
            exec: 5,
            ..Default::default()
        });
        b.functions.push(YamlFunction {
            name: "e".into(),
            fid: 1,
            nblocks: 1,
            ..Default::default()
        });
        let m = merge_yaml([yaml(1), b]).unwrap();
        assert_eq!(m.header.origin, "branch profile reader; perf");
        assert_eq!(m.header.build_id, "abcd");
        assert_eq!(
            m.functions.iter().map(|f| f.fid).collect::<Vec<_>>(),
            [1, 2]
        );
        let f = &m.functions[1];
        assert_eq!(f.exec, 6);
        assert_eq!(f.blocks[0].exec, 6);
        assert_eq!(f.blocks[0].calls[0].cnt, 6);
        assert_eq!(
            f.blocks[0].succ,
            [
                YamlSucc {
                    bid: 2,
                    cnt: 6,
                    mis: 0
                },
                YamlSucc {
                    bid: 1,
                    cnt: 9,
                    mis: 1
                }
            ]
        );
        assert_eq!(f.blocks[1].bid, 2);
    }

    #[test]
    fn yaml_refuses_what_merge_fdata_refuses() {
        let mut nolbr = yaml(1);
        nolbr.header.flags = ProfileFlags {
            sample: true,
            ..Default::default()
        };
        assert_eq!(
            merge_yaml([yaml(1), nolbr]),
            Err(MergeError::YamlLbr { first: 1, input: 2 })
        );
        let mut hash = yaml(1);
        hash.header.hash_func = HashFunc::StdHash;
        assert!(matches!(
            merge_yaml([yaml(1), hash]),
            Err(MergeError::YamlHashFunc { input: 2, .. })
        ));
        let mut dfs = yaml(1);
        dfs.header.dfs_order = true;
        assert!(matches!(
            merge_yaml([yaml(1), dfs]),
            Err(MergeError::YamlBlockOrder { input: 2, .. })
        ));
        let mut other = yaml(1);
        other.functions[0].hash = 8;
        let e = merge_yaml([yaml(1), yaml(1), other]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 3, function f: hash is 0x8 here but 0x7 in an earlier input"
        );
        let mut insns = yaml(1);
        insns.functions[0].blocks[0].insns = 5;
        let e = merge_yaml([yaml(1), insns]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 2, function f: block 0 has 5 instructions here but 4 in an earlier input"
        );
        let mut range = yaml(1);
        range.functions[0].blocks[0].bid = 3;
        let e = merge_yaml([range]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input 1, function f: block 3 is out of range (nblocks is 3)"
        );
    }
}
