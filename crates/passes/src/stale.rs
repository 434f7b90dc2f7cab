//! Stale profiles: a profile of one build of a program used on the next build, whose code has
//! changed a little (a source change, a new compiler flag).
//!
//! A profile names places by function and offset, and in a changed function the offsets no
//! longer fit. So a profile remembers hashes of the code it was taken on
//! ([`rivet_profile::FunctionHash`], written by [`add_hashes`] into Rivet's format version 2),
//! and [`attach_stale`] carries it over:
//!
//! 1. **Functions** are found by name, or, for a name the new build lacks, by the hash of their
//!    whole code (a renamed clone: `foo.constprop.0` becoming `foo.constprop.1`). A function
//!    whose hash is unchanged matches *exactly*: its records keep their offsets.
//! 2. **Blocks** of a changed function are matched by hashes of their instructions, with
//!    addresses and immediates masked and the names of called functions added (the `exact`
//!    hash), then by the switch cases that lead to them (the `case` hash: for each jump table
//!    with an entry for the block, the table's length and the entry's index; format version 4),
//!    then by their mnemonics and callees only (the `loose` hash), each new block taken
//!    once: first where a hash is unique on both sides, then along the profile's edges (a
//!    matched block's one unclaimed successor or predecessor), then among several candidates
//!    the one whose CFG neighbours are the images of the old block's, then whose neighbours'
//!    hashes agree, then at the nearest relative position (`match_blocks`). The entry block
//!    matches the entry block when nothing else claimed them. Records are moved to the matched
//!    blocks: a branch leaves from the new block's last instruction and lands on its start, a
//!    call leaves from the call to the same function in the new block.
//! 3. **Repair.** In a function matched *approximately* (by blocks), the matched blocks keep
//!    their old counts (what flowed in or out of them, whichever is more, even where the other
//!    end matched nothing), an edge between two matched blocks keeps what the profile carried
//!    over for it (nothing, if nothing), and the other blocks and edges are unknown; flow
//!    inference (`rivet_profile::inference`, as for sampled profiles) fills them in with
//!    counts consistent along the new CFG.
//!
//! Records that fit nothing (a function the new build lacks, a block nothing matched) are
//! *unmatched*. [`StaleReport`] says how much of the profile's count matched exactly,
//! approximately or not at all, per function for the hottest.
//!
//! The instruction hash uses only ISA-neutral questions to `rivet_arch::Inst`: its text
//! (`to_asm`) with every number masked (a token that starts with a digit: addresses,
//! displacements, immediates; register names never start with one) and its mnemonic. The hash
//! is FNV-1a, written here, because it goes into files and must not change with the Rust
//! release the way `std`'s hasher may.

use std::collections::{BTreeMap, HashMap};

use rivet_elf::Vaddr;
use rivet_ir::{BlockId, CallTarget, FuncId, Function, Program};
use rivet_profile::{BlockHash, FunctionHash, LocKind, Location, Profile};

use crate::attach::{AttachedProfile, NameIndex, attach, infer_counts_with_edges};

/// FNV-1a, 64 bits: stable across builds of Rivet, which profile files need.
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(mut self, bytes: &[u8]) -> Fnv {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }
    fn u64(self, v: u64) -> Fnv {
        self.bytes(&v.to_le_bytes())
    }
    /// A string and a terminator, so that ("ab", "c") and ("a", "bc") differ.
    fn str(self, s: &str) -> Fnv {
        self.bytes(s.as_bytes()).bytes(&[0xff])
    }
}

/// The instruction's text with every number masked: a token that starts with a digit (or a
/// minus and a digit) becomes `#`. Addresses, displacements and immediates change from one
/// build to the next; registers and the operation rarely do.
fn masked_text(inst: &rivet_arch::Inst) -> String {
    mask_numbers(&inst.to_asm())
}

/// `text` with every token that starts with a digit (or a minus and a digit) replaced by `#`.
fn mask_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let starts_number =
            c.is_ascii_digit() || (c == b'-' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit));
        if boundary && starts_number {
            i += 1;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push('#');
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// What a call names, for the block hash: the callee's plain name (not the profile name,
/// whose `/N` suffix counts local symbols and shifts when one is added).
fn callee_name<'a>(program: &'a Program, target: &'a CallTarget) -> &'a str {
    match target {
        CallTarget::Function { function, .. } => program.function(*function).name(),
        CallTarget::Plt { name, .. } => name,
        CallTarget::Unknown { .. } => "?",
        CallTarget::Indirect => "*",
    }
}

/// Where `f`'s switch tables lead to the block at `start`: for each table with an entry for
/// it, the table's length and the first index that leads there; 0 for a block no table leads
/// to. A switch compiled from the same cases keeps its table's length and each case's index
/// from one build to the next, whatever the handlers' code became, so this names a handler
/// where its instructions' hashes cannot (an interpreter's opcode handlers are alike, and the
/// changed ones hash like nothing old). Computed gotos' label arrays are not tables here.
fn case_hash(f: &Function, start: Vaddr) -> u64 {
    // Each (length, index) once: one table read by several jumps (a threaded interpreter's
    // dispatch copied into every handler) is one table, however many jumps the compiler made.
    let mut cases: Vec<(u64, u64)> = f
        .jump_tables
        .iter()
        .filter_map(|t| {
            let index = t.entries.iter().position(|&e| e == start)?;
            Some((t.entries.len() as u64, index as u64))
        })
        .collect();
    if cases.is_empty() {
        return 0;
    }
    cases.sort_unstable();
    cases.dedup();
    let h = cases
        .iter()
        .fold(Fnv::new(), |h, &(len, index)| h.u64(len).u64(index));
    match h.0 {
        // 0 means "no table": a hash that happens to be 0 becomes 1.
        0 => 1,
        hash => hash,
    }
}

/// The hashes of `f`'s code (see the module doc).
pub fn function_hash(program: &Program, f: &Function) -> FunctionHash {
    let start = f.range.start;
    let offset = |a: Vaddr| a.get().saturating_sub(start.get());
    let mut blocks: Vec<BlockHash> = f
        .blocks
        .iter()
        .map(|b| {
            let insts = f.block_insts(b);
            let mut exact = Fnv::new();
            let mut loose = Fnv::new();
            for inst in insts {
                exact = exact.str(&masked_text(inst));
                loose = loose.str(&inst.mnemonic_name());
            }
            let end = insts.last().map_or(b.start, |i| i.end());
            for call in f.calls.iter().filter(|c| c.at >= b.start && c.at < end) {
                // In both: a block calling another function is another block, however alike
                // its instructions (on Lua, loose hashes alone took a call of the debug hook
                // for a hot call with the same instructions around it).
                exact = exact.str(callee_name(program, &call.target));
                loose = loose.str(callee_name(program, &call.target));
            }
            BlockHash {
                offset: offset(b.start),
                last: insts.last().map_or(offset(b.start), |i| offset(i.addr())),
                exact: exact.0,
                loose: loose.0,
                neighbours: 0,
                case: case_hash(f, b.start),
            }
        })
        .collect();
    // Neighbours: the loose hashes of the predecessors, then of the successors, each sorted
    // so that the order of a block's edges does not matter.
    let mut preds: Vec<Vec<u64>> = vec![Vec::new(); f.blocks.len()];
    for (i, b) in f.blocks.iter().enumerate() {
        for s in &b.succs {
            preds[s.to.0 as usize].push(blocks[i].loose);
        }
    }
    for (i, b) in f.blocks.iter().enumerate() {
        let mut succs: Vec<u64> = b
            .succs
            .iter()
            .map(|s| blocks[s.to.0 as usize].loose)
            .collect();
        succs.sort_unstable();
        preds[i].sort_unstable();
        let mut h = Fnv::new();
        for p in &preds[i] {
            h = h.u64(*p);
        }
        h = h.str("");
        for s in &succs {
            h = h.u64(*s);
        }
        blocks[i].neighbours = h.0;
    }
    let mut whole = Fnv::new();
    for (b, bh) in f.blocks.iter().zip(&blocks) {
        whole = whole.u64(bh.offset).u64(bh.last).u64(bh.exact);
        whole = whole.u64(u64::from(b.insts.end - b.insts.start));
        for s in &b.succs {
            whole = whole.u64(blocks[s.to.0 as usize].offset);
        }
        whole = whole.str("");
    }
    if f.blocks.is_empty() {
        // A function without a CFG (not simple): its instructions alone.
        for inst in &f.insts {
            whole = whole.str(&masked_text(inst));
        }
    }
    // Blocks are in address order, but two may share an address (an empty block): keep the
    // first, as the format wants each offset once.
    blocks.dedup_by_key(|b| b.offset);
    FunctionHash {
        hash: whole.0,
        blocks,
    }
}

/// Adds to `profile` the hashes of every function of `program` its records name, so that a
/// later build can use it (Rivet's format writes them).
pub fn add_hashes(program: &Program, names: &[String], profile: &mut Profile) {
    let places = profile
        .branches
        .keys()
        .flat_map(|(from, to)| [from, to])
        .chain(profile.samples.keys())
        .filter(|l| l.kind != LocKind::External)
        .map(|l| l.name.as_str());
    let hashes = hashes_of_named(program, names, places);
    profile.hashes.extend(hashes);
}

/// The hashes of the functions of `program` that `named` names (profile names); names of no
/// function are passed over.
pub fn hashes_of_named<'a>(
    program: &Program,
    names: &[String],
    named: impl Iterator<Item = &'a str>,
) -> BTreeMap<String, FunctionHash> {
    let index = NameIndex::new(program, names);
    let mut found: BTreeMap<&str, FuncId> = BTreeMap::new();
    for name in named {
        if let Some(f) = index.get(name) {
            found.insert(name, f);
        }
    }
    found
        .into_iter()
        .map(|(name, f)| (name.to_owned(), function_hash(program, program.function(f))))
        .collect()
}

/// How one function of the profile matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FunctionMatchKind {
    /// Same code (same hash): the records fit as they are.
    Exact,
    /// Found by the hash of its code under another name.
    Renamed { now: String },
    /// Changed: `matched` of the profile's `blocks` blocks found in the new code.
    Approximate { matched: usize, blocks: usize },
    /// The profile has no hashes for it: its records are used as they are, and counted as
    /// approximately matched (nothing checked them).
    Unhashed,
    /// Not in the new build, by name or by hash.
    Missing,
}

/// One function's line in the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionMatch {
    /// The name in the profile.
    pub name: String,
    pub kind: FunctionMatchKind,
    /// The counts of the records that leave from it (or, for entries from outside, land in
    /// it), and how much of that was carried over.
    pub count: u64,
    pub matched_count: u64,
}

/// How much of a profile matched a build it was not taken on, by count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaleReport {
    pub exact_count: u64,
    pub approximate_count: u64,
    pub unmatched_count: u64,
    /// Every function the records name, by count (largest first, then by name).
    pub functions: Vec<FunctionMatch>,
}

impl StaleReport {
    fn total(&self) -> u64 {
        self.exact_count + self.approximate_count + self.unmatched_count
    }
    /// Shares of the profile's count matched exactly, approximately, and not at all.
    pub fn shares(&self) -> (f64, f64, f64) {
        let total = self.total().max(1) as f64;
        (
            self.exact_count as f64 / total,
            self.approximate_count as f64 / total,
            self.unmatched_count as f64 / total,
        )
    }
}

/// One profile function's fate in the new build.
struct Translation {
    new: Option<FuncId>,
    kind: FunctionMatchKind,
    /// For an approximate match: old block index -> new block.
    blocks: Vec<Option<BlockId>>,
    old: Option<FunctionHash>,
    /// For an approximate match: the profile's edges between old blocks (indices into
    /// `old.blocks`) with their counts, hottest first.
    old_edges: Vec<(usize, usize, u64)>,
}

impl Translation {
    fn approximate(&self) -> bool {
        matches!(self.kind, FunctionMatchKind::Approximate { .. })
    }
}

/// The new function's CFG over the indices of its blocks' hashes.
#[derive(Default)]
struct Cfg {
    succs: Vec<Vec<usize>>,
    preds: Vec<Vec<usize>>,
}

impl Cfg {
    fn of(f: &Function, hashes: &[BlockHash]) -> Cfg {
        let index: HashMap<u64, usize> = hashes
            .iter()
            .enumerate()
            .map(|(j, b)| (b.offset, j))
            .collect();
        let at = |b: BlockId| {
            index
                .get(&(f.block(b).start.get() - f.range.start.get()))
                .copied()
        };
        let mut cfg = Cfg {
            succs: vec![Vec::new(); hashes.len()],
            preds: vec![Vec::new(); hashes.len()],
        };
        for (i, b) in f.blocks.iter().enumerate() {
            let Some(j) = at(BlockId(i as u32)) else {
                continue;
            };
            for s in &b.succs {
                if let Some(k) = at(s.to) {
                    cfg.succs[j].push(k);
                    cfg.preds[k].push(j);
                }
            }
        }
        cfg
    }
}

/// Old blocks matched to new blocks (see the module doc): per old block, the index of its new
/// block in `new`. `edges` are the profile's edges between old blocks, hottest first; `cfg`
/// is the new function's.
///
/// Anchors first: a hash (exact, then loose) that exactly one unmatched old block and one
/// unmatched new block have. Then the profile's edges carry matches to neighbours (see
/// `follow_edges`). Then the blocks whose hash several blocks share, the hottest old blocks
/// first: the candidate whose CFG neighbours are the images of the old block's neighbours
/// along the profile's edges wins, then the one whose neighbours hash agrees, then the one at
/// the nearest relative position; after each hash, the edges again. Last, the entry block
/// matches the entry block when nothing else claimed them.
fn match_blocks(
    old: &[BlockHash],
    new: &[BlockHash],
    cfg: &Cfg,
    edges: &[(usize, usize)],
) -> Vec<Option<usize>> {
    let mut result: Vec<Option<usize>> = vec![None; old.len()];
    let mut taken = vec![false; new.len()];
    let position = |i: usize, n: usize| i as f64 / n.max(1) as f64;
    let keys = [|b: &BlockHash| b.exact, |b: &BlockHash| b.loose];
    // Anchors: the exact hash, then the switch case, then the loose hash. A case is 0 for
    // blocks no table leads to (and for every block of a profile older than the field).
    let anchors = [keys[0], |b: &BlockHash| b.case, keys[1]];
    for key in anchors {
        let mut olds: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, b) in old.iter().enumerate().filter(|(i, _)| result[*i].is_none()) {
            olds.entry(key(b)).or_default().push(i);
        }
        let mut news: HashMap<u64, Vec<usize>> = HashMap::new();
        for (j, b) in new.iter().enumerate().filter(|(j, _)| !taken[*j]) {
            news.entry(key(b)).or_default().push(j);
        }
        olds.remove(&0);
        for (k, is) in &olds {
            if let (&[i], Some(&[j])) = (is.as_slice(), news.get(k).map(Vec::as_slice)) {
                result[i] = Some(j);
                taken[j] = true;
            }
        }
    }
    follow_edges(cfg, edges, &mut result, &mut taken);
    // The hottest old blocks choose first.
    let mut order: Vec<usize> = Vec::with_capacity(old.len());
    let mut listed = vec![false; old.len()];
    for &(i, j) in edges {
        for b in [i, j] {
            if !std::mem::replace(&mut listed[b], true) {
                order.push(b);
            }
        }
    }
    order.extend((0..old.len()).filter(|&b| !listed[b]));
    for key in keys {
        let mut by_key: HashMap<u64, Vec<usize>> = HashMap::new();
        for (j, b) in new.iter().enumerate() {
            by_key.entry(key(b)).or_default().push(j);
        }
        for &i in &order {
            if result[i].is_some() {
                continue;
            }
            let ob = &old[i];
            let Some(candidates) = by_key.get(&key(ob)) else {
                continue;
            };
            // How many of the old block's edges the candidate's CFG edges would agree with.
            let agree = |j: usize| {
                edges
                    .iter()
                    .filter(|&&(a, b)| match (a == i, b == i) {
                        (true, _) => result[b].is_some_and(|m| cfg.succs[j].contains(&m)),
                        (_, true) => result[a].is_some_and(|m| cfg.preds[j].contains(&m)),
                        _ => false,
                    })
                    .count()
            };
            let best = candidates
                .iter()
                .copied()
                .filter(|&j| !taken[j])
                .min_by(|&a, &b| {
                    let score = |j: usize| {
                        (
                            std::cmp::Reverse(agree(j)),
                            new[j].neighbours != ob.neighbours,
                            (position(j, new.len()) - position(i, old.len())).abs(),
                        )
                    };
                    let (sa, sb) = (score(a), score(b));
                    sa.0.cmp(&sb.0)
                        .then(sa.1.cmp(&sb.1))
                        .then(sa.2.total_cmp(&sb.2))
                        .then(a.cmp(&b))
                });
            if let Some(j) = best {
                result[i] = Some(j);
                taken[j] = true;
            }
        }
        follow_edges(cfg, edges, &mut result, &mut taken);
    }
    if let (Some(first), Some(false)) = (result.first_mut(), taken.first())
        && first.is_none()
        && old[0].offset == 0
        && new[0].offset == 0
    {
        *first = Some(0);
    }
    result
}

/// Matches more old blocks along the profile's edges (old block indices, hottest first): an
/// edge from a matched block to an unmatched one, where the matched block's image has exactly
/// one successor no old block claims, matches the unmatched block to that successor; the same
/// backwards through predecessors. Repeated until nothing changes. Hashes fail where a change
/// touched every instruction of a block (a register renamed throughout); the edges the program
/// took are what matters for layout, and they still connect the code around it.
fn follow_edges(
    cfg: &Cfg,
    edges: &[(usize, usize)],
    result: &mut [Option<usize>],
    taken: &mut [bool],
) {
    loop {
        let mut changed = false;
        for &(i, j) in edges {
            let (unmatched, candidates) = match (result[i], result[j]) {
                (Some(a), None) => (j, &cfg.succs[a]),
                (None, Some(b)) => (i, &cfg.preds[b]),
                _ => continue,
            };
            let mut free = candidates.iter().copied().filter(|&c| !taken[c]);
            if let (Some(c), None) = (free.next(), free.next()) {
                result[unmatched] = Some(c);
                taken[c] = true;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// The profile carried over to `program` (see the module doc): the translated profile, the
/// per-function translations, and the report.
struct Carried {
    profile: Profile,
    translations: HashMap<String, Translation>,
    report: StaleReport,
    /// Branch profiles: per approximately matched function, the count of each old block.
    old_counts: HashMap<String, Vec<u64>>,
    /// Records that fit nothing in the new build (not in `profile`).
    unmatched_records: u64,
}

fn translate(program: &Program, names: &[String], profile: &Profile) -> Carried {
    let index = NameIndex::new(program, names);
    // Functions by the hash of their code, computed only if some name is missing.
    let mut by_hash: Option<HashMap<u64, Option<FuncId>>> = None;
    let mut new_hashes: HashMap<FuncId, FunctionHash> = HashMap::new();
    let mut translations: HashMap<String, Translation> = HashMap::new();
    let mut named: Vec<&str> = Vec::new();
    for (from, to) in profile.branches.keys() {
        named.extend(
            [from, to]
                .iter()
                .filter(|l| l.kind != LocKind::External)
                .map(|l| l.name.as_str()),
        );
    }
    named.extend(
        profile
            .samples
            .keys()
            .filter(|l| l.kind != LocKind::External)
            .map(|l| l.name.as_str()),
    );
    named.sort_unstable();
    named.dedup();
    // The profile's edges inside each function, (from, to) offsets, largest count first.
    let mut inner: Vec<(&str, u64, u64, u64)> = profile
        .branches
        .iter()
        .filter(|((from, to), _)| {
            from.kind != LocKind::External && from.name == to.name && to.offset != 0
        })
        .map(|((from, to), c)| (from.name.as_str(), from.offset, to.offset, c.count))
        .collect();
    inner.sort_by(|a, b| b.3.cmp(&a.3).then((a.0, a.1, a.2).cmp(&(b.0, b.1, b.2))));
    let mut inner_edges: HashMap<&str, Vec<(u64, u64, u64)>> = HashMap::new();
    for (name, from, to, count) in inner {
        inner_edges.entry(name).or_default().push((from, to, count));
    }
    for name in named {
        let old = profile.hashes.get(name).cloned();
        let found = index.get(name);
        let translation = match (&old, found) {
            (None, found) => Translation {
                new: found,
                kind: if found.is_some() {
                    FunctionMatchKind::Unhashed
                } else {
                    FunctionMatchKind::Missing
                },
                blocks: Vec::new(),
                old: None,
                old_edges: Vec::new(),
            },
            (Some(old), Some(f)) => {
                let new = new_hashes
                    .entry(f)
                    .or_insert_with(|| function_hash(program, program.function(f)));
                if new.hash == old.hash {
                    Translation {
                        new: Some(f),
                        kind: FunctionMatchKind::Exact,
                        blocks: Vec::new(),
                        old: None,
                        old_edges: Vec::new(),
                    }
                } else {
                    let func = program.function(f);
                    let old_edges = inner_edges
                        .get(name)
                        .map_or_else(Vec::new, |list| old_block_edges(old, list));
                    let edges: Vec<(usize, usize)> =
                        old_edges.iter().map(|&(i, j, _)| (i, j)).collect();
                    let cfg = Cfg::of(func, &new.blocks);
                    let blocks: Vec<Option<BlockId>> =
                        match_blocks(&old.blocks, &new.blocks, &cfg, &edges)
                            .iter()
                            .map(|m| {
                                m.and_then(|j| {
                                    func.block_at(func.range.start + new.blocks[j].offset)
                                })
                            })
                            .collect();
                    Translation {
                        new: Some(f),
                        kind: FunctionMatchKind::Approximate {
                            matched: blocks.iter().flatten().count(),
                            blocks: old.blocks.len(),
                        },
                        blocks,
                        old: Some(old.clone()),
                        old_edges,
                    }
                }
            }
            (Some(old), None) => {
                let table = by_hash.get_or_insert_with(|| {
                    let mut table: HashMap<u64, Option<FuncId>> = HashMap::new();
                    for f in &program.functions {
                        let h = function_hash(program, f).hash;
                        table
                            .entry(h)
                            .and_modify(|e| *e = None)
                            .or_insert(Some(f.id));
                    }
                    table
                });
                match table.get(&old.hash).copied().flatten() {
                    Some(f) => Translation {
                        new: Some(f),
                        kind: FunctionMatchKind::Renamed {
                            now: names[f.0 as usize].clone(),
                        },
                        blocks: Vec::new(),
                        old: None,
                        old_edges: Vec::new(),
                    },
                    None => Translation {
                        new: None,
                        kind: FunctionMatchKind::Missing,
                        blocks: Vec::new(),
                        old: None,
                        old_edges: Vec::new(),
                    },
                }
            }
        };
        translations.insert(name.to_owned(), translation);
    }

    let mut out = Profile::new(profile.mode.clone());
    out.build_id = profile.build_id.clone();
    out.binary_name = profile.binary_name.clone();
    out.origin = profile.origin;
    out.bolted_collection = profile.bolted_collection;
    out.memory = profile.memory.clone();
    let mut report = StaleReport::default();
    let mut unmatched_records = 0u64;
    let mut per_function: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    // Where a location goes: `Ok(Some(loc))` carried over (the bool: approximately),
    // `Ok(None)` left as it is (external), `Err(())` fits nothing.
    let carry =
        |l: &Location, role: Role, callee: Option<&str>| -> Result<Option<(Location, bool)>, ()> {
            // External places and PLT stubs (`name@PLT`) are named alike in every build.
            if l.kind == LocKind::External || l.name.ends_with("@PLT") {
                return Ok(None);
            }
            let t = translations.get(&l.name).ok_or(())?;
            let f = t.new.ok_or(())?;
            let func = program.function(f);
            let name = names[f.0 as usize].clone();
            if !t.approximate() {
                // Exact, or (no hashes to check it by) used as it is, which is no exact match.
                let unchecked = t.kind == FunctionMatchKind::Unhashed;
                return Ok(Some((
                    Location {
                        kind: LocKind::Symbol,
                        name,
                        offset: l.offset,
                    },
                    unchecked,
                )));
            }
            if l.offset == 0 && role == Role::Target {
                return Ok(Some((
                    Location {
                        kind: LocKind::Symbol,
                        name,
                        offset: 0,
                    },
                    true,
                )));
            }
            let old = t.old.as_ref().ok_or(())?;
            let i = old
                .blocks
                .partition_point(|b| b.offset <= l.offset)
                .checked_sub(1)
                .ok_or(())?;
            let ob = &old.blocks[i];
            let nb = func.block(t.blocks[i].ok_or(())?);
            let offset = |a: Vaddr| a.get() - func.range.start.get();
            let new_offset = match role {
                Role::Sample => offset(nb.start),
                Role::Target if l.offset == ob.offset => offset(nb.start),
                Role::Target => return Err(()),
                Role::Source if l.offset == ob.last => {
                    offset(func.block_insts(nb).last().map_or(nb.start, |i| i.addr()))
                }
                Role::Source => {
                    // A call inside the block: the call to the same function in the new block.
                    let end = func.block_insts(nb).last().map_or(nb.start, |i| i.end());
                    let call = func.calls.iter().find(|c| {
                        c.at >= nb.start
                            && c.at < end
                            && callee.is_some_and(|n| callee_name(program, &c.target) == n)
                    });
                    offset(call.map_or(nb.start, |c| c.at))
                }
            };
            Ok(Some((
                Location {
                    kind: LocKind::Symbol,
                    name,
                    offset: new_offset,
                },
                true,
            )))
        };
    let plain = |l: &Location| -> Option<String> {
        if l.kind == LocKind::External || l.offset != 0 {
            return None;
        }
        let t = translations.get(&l.name)?;
        t.new.map(|f| program.function(f).name().to_owned())
    };
    // The counts of the old blocks of approximately matched functions, measured as the larger
    // of what flowed in (to the block's start) and out (from its last instruction), as
    // `attach` counts blocks: they become the weights of the new blocks matched to them, even
    // where the other end of an edge matched nothing.
    let mut old_flow: HashMap<&str, (Vec<u64>, Vec<u64>)> = HashMap::new();
    // The old block a record's end is in, if in an approximately matched function, and
    // whether that block was matched.
    let old_block = |l: &Location, role: Role| -> Option<(usize, bool)> {
        if l.kind == LocKind::External {
            return None;
        }
        let t = translations.get(&l.name).filter(|t| t.approximate())?;
        let old = t.old.as_ref()?;
        let i = match role {
            Role::Source => old.blocks.iter().position(|b| b.last == l.offset)?,
            _ => old.blocks.iter().position(|b| b.offset == l.offset)?,
        };
        Some((i, t.blocks[i].is_some()))
    };
    for ((from, to), c) in &profile.branches {
        let owner = if from.kind == LocKind::External {
            &to.name
        } else {
            &from.name
        };
        let callee = plain(to);
        let carried = (
            carry(from, Role::Source, callee.as_deref()),
            carry(to, Role::Target, None),
        );
        let entry = per_function.entry(owner).or_default();
        entry.0 += c.count;
        let mut weighed = false;
        for (l, role) in [(from, Role::Source), (to, Role::Target)] {
            if let Some((i, matched)) = old_block(l, role) {
                let n = translations[&l.name].blocks.len();
                let flow = old_flow
                    .entry(l.name.as_str())
                    .or_insert_with(|| (vec![0; n], vec![0; n]));
                let side = if role == Role::Source {
                    &mut flow.1
                } else {
                    &mut flow.0
                };
                side[i] = side[i].saturating_add(c.count);
                weighed |= matched;
            }
        }
        match carried {
            (Ok(a), Ok(b)) => {
                let approximate =
                    a.as_ref().is_some_and(|x| x.1) || b.as_ref().is_some_and(|x| x.1);
                let from = a.map_or_else(|| from.clone(), |x| x.0);
                let to = b.map_or_else(|| to.clone(), |x| x.0);
                out.add_branch(from, to, c.count, c.mispreds);
                entry.1 += c.count;
                if approximate {
                    report.approximate_count += c.count;
                } else {
                    report.exact_count += c.count;
                }
            }
            // Not carried as an edge, but its count reaches a matched block's weight.
            _ if weighed => {
                entry.1 += c.count;
                report.approximate_count += c.count;
            }
            _ => {
                report.unmatched_count += c.count;
                unmatched_records += 1;
            }
        }
    }
    let old_counts: HashMap<String, Vec<u64>> = old_flow
        .into_iter()
        .map(|(name, (inflow, outflow))| {
            let counts = inflow
                .iter()
                .zip(&outflow)
                .map(|(a, b)| *a.max(b))
                .collect();
            (name.to_owned(), counts)
        })
        .collect();
    for (at, &count) in &profile.samples {
        let entry = per_function.entry(&at.name).or_default();
        entry.0 += count;
        match carry(at, Role::Sample, None) {
            Ok(a) => {
                let approximate = a.as_ref().is_some_and(|x| x.1);
                out.add_sample(a.map_or_else(|| at.clone(), |x| x.0), count);
                entry.1 += count;
                if approximate {
                    report.approximate_count += count;
                } else {
                    report.exact_count += count;
                }
            }
            Err(()) => {
                report.unmatched_count += count;
                unmatched_records += 1;
            }
        }
    }
    report.functions = per_function
        .into_iter()
        .map(|(name, (count, matched_count))| FunctionMatch {
            name: name.to_owned(),
            kind: translations
                .get(name)
                .map_or(FunctionMatchKind::Missing, |t| t.kind.clone()),
            count,
            matched_count,
        })
        .collect();
    report
        .functions
        .sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    Carried {
        profile: out,
        translations,
        report,
        old_counts,
        unmatched_records,
    }
}

/// The profile's branches inside a function (`from` offset of the branch, `to` offset of
/// its target, count) as edges between the old build's blocks (indices into `old.blocks`);
/// records that fit no block boundary are left out.
fn old_block_edges(old: &FunctionHash, edges: &[(u64, u64, u64)]) -> Vec<(usize, usize, u64)> {
    edges
        .iter()
        .filter_map(|&(from, to, count)| {
            let i = old.blocks.iter().position(|b| b.last == from)?;
            let j = old.blocks.iter().position(|b| b.offset == to)?;
            Some((i, j, count))
        })
        .collect()
}

/// Flow the new build sends past a block the old build went through. Where the old build
/// ran `i -> j -> k` and in the new one the images of `i` and `j` are matched but `i'` no
/// longer branches to `j'`, while it does go straight to `k'`, the compiler copied `j` into
/// `i` (tail duplication, or `j` merged into its predecessor): what ran `i -> j` now runs
/// `i' -> k'` and never reaches `j'`. Left as carried, `j'` would weigh what `j` weighed,
/// the edge `j' -> k'` would carry `i`'s share too and `i' -> k'`, seen by the profile as
/// nothing, would carry nothing: inference then pushes the extra flow into `j'` through its
/// other predecessors. (Lua 5.4.4 -> 5.4.6: a join block of `luaV_execute` that two opcode
/// handlers reached became part of one of them; its old count, 13.8 M, drew 7 M more through
/// the other handler than that handler ran.) So the count of each such edge moves: `j'`
/// weighs that much less, and it goes from `j' -> k'` to `i' -> k'`, split among `j`'s old
/// successors in proportion to their counts.
fn shift_duplicated_tails(
    func: &Function,
    t: &Translation,
    weights: &mut [Option<u64>],
    edge_weights: &mut [Vec<Option<u64>>],
) {
    let (blocks, old_edges) = (&t.blocks, &t.old_edges);
    // Each old block's successors in the profile, with their counts.
    let mut outs: Vec<Vec<(usize, u64)>> = vec![Vec::new(); blocks.len()];
    for &(i, j, count) in old_edges {
        outs[i].push((j, count));
    }
    let succ_index =
        |from: BlockId, to: BlockId| func.block(from).succs.iter().position(|s| s.to == to);
    for &(i, j, count) in old_edges {
        let (Some(a), Some(b)) = (blocks[i], blocks[j]) else {
            continue;
        };
        if a == b || succ_index(a, b).is_some() {
            continue;
        }
        let total: u64 = outs[j].iter().map(|o| o.1).sum();
        // j's successors the new i' reaches directly, with where they are among its edges.
        let direct: Vec<(usize, BlockId, u64)> = outs[j]
            .iter()
            .filter_map(|&(k, c)| {
                let kk = blocks[k]?;
                Some((succ_index(a, kk)?, kk, c))
            })
            .collect();
        if total == 0 || direct.is_empty() {
            continue;
        }
        if let Some(w) = weights[b.0 as usize].as_mut() {
            *w = w.saturating_sub(count);
        }
        for (index, kk, c) in direct {
            let moved = (u128::from(count) * u128::from(c) / u128::from(total)) as u64;
            if let Some(e) = edge_weights[a.0 as usize][index].as_mut() {
                *e = e.saturating_add(moved);
            }
            if let Some(e) = succ_index(b, kk).and_then(|k| edge_weights[b.0 as usize][k].as_mut())
            {
                *e = e.saturating_sub(moved);
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Source,
    Target,
    Sample,
}

/// Attaches a profile taken on another build of the program (see the module doc): functions
/// and blocks matched by hashes, counts of changed functions repaired by flow inference.
pub fn attach_stale(
    program: &Program,
    names: &[String],
    profile: &Profile,
) -> (AttachedProfile, StaleReport) {
    let carried = translate(program, names, profile);
    let mut attached = attach(program, names, &carried.profile);
    // The attach report speaks of the carried-over profile; the profile as read is what the
    // user gave. A record that reaches the new build only as a block's weight matched too.
    let r = &carried.report;
    attached.report.records = (profile.branches.len() + profile.samples.len()) as u64;
    attached.report.records_count = r.total();
    attached.report.matched = attached.report.records - carried.unmatched_records;
    attached.report.matched_count = r.exact_count + r.approximate_count;
    for (name, t) in &carried.translations {
        let Some(f) = t.new.filter(|_| t.approximate()) else {
            continue;
        };
        let func = program.function(f);
        if !func.is_simple() {
            continue;
        }
        // Matched blocks weigh what their old blocks were measured at; the others are
        // unknown, for inference to fill in.
        let mut weights: Vec<Option<u64>> = vec![None; func.blocks.len()];
        match (
            carried.old_counts.get(name),
            &attached.functions[f.0 as usize],
        ) {
            (Some(old), _) => {
                for (i, b) in t.blocks.iter().enumerate() {
                    if let Some(b) = b {
                        weights[b.0 as usize] = Some(old[i]);
                    }
                }
            }
            (None, Some(counts)) => {
                for b in t.blocks.iter().flatten() {
                    weights[b.0 as usize] = Some(counts.blocks[b.0 as usize]);
                }
            }
            (None, None) => continue,
        }
        if weights.iter().flatten().all(|&w| w == 0) {
            continue;
        }
        // An edge between two matched blocks carried what the profile says of it, nothing
        // included: the profile saw both ends.
        let carried = attached.functions[f.0 as usize].as_ref();
        let matched: Vec<bool> = weights.iter().map(Option::is_some).collect();
        let mut edge_weights: Vec<Vec<Option<u64>>> = func
            .blocks
            .iter()
            .enumerate()
            .map(|(b, block)| {
                block
                    .succs
                    .iter()
                    .enumerate()
                    .map(|(k, s)| {
                        (matched[b] && matched[s.to.0 as usize])
                            .then(|| carried.map_or(0, |c| c.edges[b][k]))
                    })
                    .collect()
            })
            .collect();
        shift_duplicated_tails(func, t, &mut weights, &mut edge_weights);
        let mut repaired = infer_counts_with_edges(func, &weights, &edge_weights);
        if let Some(counts) = &attached.functions[f.0 as usize] {
            repaired.entries = repaired.entries.max(counts.entries);
        }
        attached.functions[f.0 as usize] = Some(repaired);
    }
    attached.report.profiled_functions = attached.functions.iter().flatten().count();
    (attached, carried.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bh(offset: u64, exact: u64, loose: u64, neighbours: u64) -> BlockHash {
        BlockHash {
            offset,
            last: offset,
            exact,
            loose,
            neighbours,
            case: 0,
        }
    }

    #[test]
    fn masks_numbers_but_not_registers() {
        let mask = mask_numbers;
        assert_eq!(mask("mov 0x10(%r8),%eax"), "mov #(%r8),%eax");
        assert_eq!(mask("add $0x1,%xmm0"), "add $#,%xmm0");
        assert_eq!(mask("lea -0x8(%rbp),%rdi"), "lea #(%rbp),%rdi");
        assert_eq!(mask("call 401a2c <f>"), "call # <f>");
        assert_eq!(mask("ldr x0, [x1, #16]"), "ldr x0, [x1, ##]");
    }

    #[test]
    fn blocks_match_by_exact_then_loose_hash_neighbours_breaking_ties() {
        // Old: A B C D; new: A, a copy of B (wrong neighbours), B, X (C changed operands), D.
        let old = [
            bh(0, 1, 10, 100),
            bh(8, 2, 20, 200),
            bh(16, 3, 30, 300),
            bh(24, 4, 40, 400),
        ];
        let new = [
            bh(0, 1, 10, 100),
            bh(4, 2, 20, 999),
            bh(12, 2, 20, 200),
            bh(20, 33, 30, 300),
            bh(30, 4, 40, 400),
        ];
        assert_eq!(
            match_blocks(&old, &new, &Cfg::default(), &[]),
            vec![Some(0), Some(2), Some(3), Some(4)]
        );
        // Nothing in common but the entries: the entry still matches.
        assert_eq!(
            match_blocks(
                &old,
                &[bh(0, 7, 70, 0), bh(2, 8, 80, 0)],
                &Cfg::default(),
                &[]
            ),
            vec![Some(0), None, None, None]
        );
        // Two equal candidates with equal neighbours: the nearer in relative position.
        let old = [
            bh(0, 1, 1, 1),
            bh(8, 5, 5, 5),
            bh(16, 6, 6, 6),
            bh(24, 5, 5, 5),
        ];
        let new = [bh(0, 1, 1, 1), bh(8, 5, 5, 5), bh(16, 5, 5, 5)];
        assert_eq!(
            match_blocks(&old, &new, &Cfg::default(), &[]),
            vec![Some(0), Some(1), None, Some(2)]
        );
    }

    #[test]
    fn a_case_anchors_only_where_it_is_unique_on_both_sides() {
        let case = |mut b: BlockHash, c: u64| {
            b.case = c;
            b
        };
        // Three alike handlers (same hashes); the old build's two share case 7 (two tables of
        // one length, say), so case 7 anchors nothing, while case 9 does.
        let old = [
            bh(0, 1, 1, 1),
            case(bh(8, 5, 5, 5), 7),
            case(bh(16, 5, 5, 5), 7),
            case(bh(24, 5, 5, 5), 9),
        ];
        let new = [
            bh(0, 1, 1, 1),
            case(bh(8, 5, 5, 5), 9),
            case(bh(16, 5, 5, 5), 7),
            case(bh(24, 5, 5, 5), 8),
        ];
        let matched = match_blocks(&old, &new, &Cfg::default(), &[]);
        assert_eq!(matched[3], Some(1));
        // The others fall back to position among what is left.
        assert_eq!(matched, vec![Some(0), Some(2), Some(3), Some(1)]);
    }

    #[test]
    fn fnv_is_the_published_function() {
        // FNV-1a 64 of "a" (the published test vector), so the hashes in files stay stable.
        assert_eq!(Fnv::new().bytes(b"a").0, 0xaf63_dc4c_8601_ec8c);
        assert_ne!(
            Fnv::new().str("ab").str("c").0,
            Fnv::new().str("a").str("bc").0
        );
    }
}
