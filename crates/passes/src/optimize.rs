//! The optimizing layout: from a program and its attached profile to a `Layout` (block order
//! inside each function, hot/cold split, function order), using the pure algorithms of
//! `rivet_layout`.
//!
//! Only functions the profile saw are rewritten (the others keep their code where it is, as
//! BOLT's default "lite" mode does): moving code that never runs costs time and file size and
//! gains nothing. A function and its compiler-split parts (`foo`, `foo.cold`) jump into each
//! other's interiors, so when one of them is rewritten all of them are. Each rewritten
//! function's blocks are ordered (ext-TSP by default), the order is split into a hot fragment
//! and a cold one, and the hot fragments are ordered by the call graph (cdsort by default);
//! cold fragments follow in the same function order, after all hot code.

use std::collections::HashMap;

use rayon::prelude::*;
use rivet_arch::Isa;
use rivet_ir::layout::{AlignedBlock, FragmentRef, FunctionLayout, Layout};
use rivet_ir::{BlockId, FuncId, Function, Program};
use rivet_layout::{LandingPads, SplitOptions, split_blocks};

use crate::attach::{AttachedProfile, FunctionCounts};
use crate::fragment_size::estimated_fragment_size;

/// Order of the blocks inside a function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlockOrder {
    /// Newell & Pupyrev's extended TSP (BOLT's `ext-tsp`, formerly `cache+`).
    #[default]
    ExtTsp,
    /// The input order.
    None,
    /// The entry block, then the others in reverse input order (a test of the machinery).
    Reverse,
}

/// Order of the functions in the hot text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FunctionOrder {
    /// Cache-directed sort (BOLT's and lld's `cdsort`).
    #[default]
    CdSort,
    /// Call-chain clustering (C3, BOLT's `hfsort`).
    C3,
    /// Most often entered first.
    ExecCount,
    /// The input order.
    None,
    /// The listed functions first, in the list's order; the others after, in input order.
    User(Vec<FuncId>),
}

/// Which blocks leave the hot fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Splitting {
    /// Every function stays in one piece.
    Off,
    /// Only the trailing run of cold blocks of the order moves out.
    HotCold,
    /// Every cold block moves out (BOLT's `-split-all-cold`).
    AllCold,
}

/// Everything the optimizing layout can be asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptimizeOptions {
    pub block_order: BlockOrder,
    pub function_order: FunctionOrder,
    pub splitting: Splitting,
    pub landing_pads: LandingPads,
    /// Blocks that ran fewer times than this are cold; functions none of whose blocks ran this
    /// often are not rewritten. At least 1.
    pub min_hot_count: u64,
    /// Which hot blocks start at an alignment boundary (`None`: none).
    pub align_blocks: Option<BlockAlignment>,
}

/// Aligning hot blocks (BOLT's `-align-blocks`): a block is aligned when it runs more than
/// `threshold_percent` / 100 times per entry of its function (a loop head, in practice), and
/// at least twice as often as the block before it falls into it. Padding is limited to
/// `alignment - 1` bytes and to the block's own size. The emitter puts the padding where no
/// code falls through (after an earlier jump) when it can, and right before the block, where
/// the falling path runs it, otherwise. On SQLite's training run the padding that still runs
/// (14.8 M `nop`s of 15.1 M) follows another aligned block closely, with no jump between.
/// Aligning those blocks only when fallen into at most a fifth of their runs (LLVM's rule)
/// left 0.16 M, but Lua's unseen input ran 1.7% slower without the alignments it dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockAlignment {
    pub alignment: u16,
    pub threshold_percent: u64,
}

impl Default for BlockAlignment {
    fn default() -> Self {
        BlockAlignment {
            alignment: 16,
            threshold_percent: 800,
        }
    }
}

impl Default for OptimizeOptions {
    /// BOLT's recommended recipe: ext-TSP, cdsort, all cold blocks split, landing pads split by
    /// their counts; and hot loop heads aligned, which BOLT leaves off (it measured about 1%
    /// faster on SQLite here).
    fn default() -> Self {
        OptimizeOptions {
            block_order: BlockOrder::ExtTsp,
            function_order: FunctionOrder::CdSort,
            splitting: Splitting::AllCold,
            landing_pads: LandingPads::ByCount,
            min_hot_count: 1,
            align_blocks: Some(BlockAlignment::default()),
        }
    }
}

/// The block order of one function: a permutation of its blocks, entry block first.
pub fn order_blocks(f: &Function, counts: &FunctionCounts, order: BlockOrder) -> Vec<BlockId> {
    order_blocks_for(f, counts, order, false)
}

/// `order_blocks`, for a function rewritten `in_place` or not. In place the function must fit
/// in its old bytes, so ext-TSP weighs every fall-through of the input one execution more:
/// where the profile gives no reason to break one (blocks it never saw, or a tie), the
/// compiler's stays, and no `jmp` is added for it. On Debian's python3.11 optimized from perf
/// samples, the functions that no longer fitted went from 143 to 113, among them the
/// interpreter loop (which needed 67 bytes more than its 61,744).
pub fn order_blocks_for(
    f: &Function,
    counts: &FunctionCounts,
    order: BlockOrder,
    in_place: bool,
) -> Vec<BlockId> {
    let n = f.blocks.len();
    let entry = f
        .block_at(f.range.start)
        .map_or(0, |b| b.0 as usize)
        .min(n.saturating_sub(1));
    match order {
        BlockOrder::None => (0..n as u32).map(BlockId).collect(),
        BlockOrder::Reverse => std::iter::once(entry)
            .chain((0..n).rev().filter(|&b| b != entry))
            .map(|b| BlockId(b as u32))
            .collect(),
        BlockOrder::ExtTsp => {
            // ext-TSP puts dense id 0 first: swap the entry block into that place.
            let dense = |b: usize| -> u32 {
                if b == entry {
                    0
                } else if b == 0 {
                    entry as u32
                } else {
                    b as u32
                }
            };
            let mut sizes = vec![0u64; n];
            let mut block_counts = vec![0u64; n];
            let mut edges = Vec::new();
            // Blocks that end in an indirect jump: none of their successors is fallen into.
            let mut indirect = vec![false; n];
            for (i, b) in f.blocks.iter().enumerate() {
                sizes[dense(i) as usize] = f.kept_size(b);
                indirect[dense(i) as usize] = matches!(
                    b.terminator,
                    rivet_ir::Terminator::JumpTable { .. } | rivet_ir::Terminator::ComputedGoto
                );
                block_counts[dense(i) as usize] = counts.blocks.get(i).copied().unwrap_or(0);
                // Every CFG edge, zero counts included: ext-TSP tells conditional branches
                // (several successors) from blocks that fall through unconditionally.
                let out = counts.edges.get(i).map_or(&[][..], Vec::as_slice);
                for (k, succ) in b.succs.iter().enumerate() {
                    let mut c = out.get(k).copied().unwrap_or(0);
                    if in_place && succ.kind == rivet_ir::EdgeKind::FallThrough {
                        c = c.saturating_add(1);
                    }
                    edges.push((dense(i), dense(succ.to.0 as usize), c));
                }
                // A branch out of the function (conditional tail call, jump into a split part)
                // makes the block conditional too: say so with a zero-count self-edge, which
                // ext-TSP counts as another successor and never scores.
                if matches!(b.terminator, rivet_ir::Terminator::CondTailCall { .. })
                    || (!b.fragment_succs.is_empty() && !b.succs.is_empty())
                {
                    edges.push((dense(i), dense(i), 0));
                }
            }
            rivet_layout::ext_tsp_order_with_indirect(&sizes, &block_counts, &edges, &indirect)
                .into_iter()
                .map(|d| BlockId(dense(d as usize)))
                .collect()
        }
    }
}

/// Whether a function's profile makes it worth rewriting.
fn is_hot(counts: Option<&FunctionCounts>, min_hot_count: u64) -> bool {
    counts
        .is_some_and(|c| c.entries >= min_hot_count || c.blocks.iter().any(|&n| n >= min_hot_count))
}

/// The layout of one function (block order, then the split) and the size of its hot part.
fn layout_function(
    isa: Isa,
    f: &Function,
    counts: Option<&FunctionCounts>,
    options: &OptimizeOptions,
    split_options: &SplitOptions,
    in_place: bool,
) -> (FunctionLayout, u64) {
    let empty;
    let counts = match counts {
        Some(c) => c,
        None => {
            empty = FunctionCounts {
                blocks: vec![0; f.blocks.len()],
                edges: f.blocks.iter().map(|b| vec![0; b.succs.len()]).collect(),
                entries: 0,
            };
            &empty
        }
    };
    let order = order_blocks_for(f, counts, options.block_order, in_place);
    let fragments = if options.splitting == Splitting::Off {
        place_dead_padding(f, vec![order])
    } else {
        let landing_pads: Vec<bool> = f.blocks.iter().map(|b| b.is_landing_pad).collect();
        let mut block_counts = counts.blocks.clone();
        block_counts.resize(f.blocks.len(), 0);
        // `split_blocks` never makes dense block 0 cold; the entry is what must stay.
        let entry = order[0].0 as usize;
        block_counts.swap(0, entry);
        let mut pads = landing_pads;
        pads.swap(0, entry);
        let swap = |b: u32| -> u32 {
            if b as usize == entry {
                0
            } else if b == 0 {
                entry as u32
            } else {
                b
            }
        };
        let swapped: Vec<u32> = order.iter().map(|b| swap(b.0)).collect();
        let split = split_blocks(&swapped, &block_counts, &pads, split_options);
        let back =
            |v: Vec<u32>| -> Vec<BlockId> { v.into_iter().map(|b| BlockId(swap(b))).collect() };
        let split = place_dead_padding(f, vec![back(split.hot), back(split.cold)]);
        let whole = place_dead_padding(f, vec![order]);
        // Splitting pays only when the hot part shrinks (BOLT reverts it otherwise): a cold
        // block reached by a short branch can cost more in near branches and added jumps than
        // its own bytes, and code that a new input does run is then a far jump away.
        // Sized with islands (AArch64): whether the emitter may write exits straight to the
        // cold fragment is decided on the whole new text, which this decision helps make;
        // islands only make a split hot part look bigger, so a split that pays with them
        // pays without.
        let exits = rivet_arch::FragmentExits::Islands;
        if split.len() < 2
            || estimated_fragment_size(isa, f, &split[0], exits)
                >= estimated_fragment_size(isa, f, &whole[0], exits)
        {
            whole
        } else {
            split
        }
    };
    let hot_size = fragments[0].iter().map(|b| f.kept_size(f.block(*b))).sum();
    let aligned = match options.align_blocks {
        Some(a) if !in_place => blocks_to_align(f, counts, &fragments[0], a),
        _ => Vec::new(),
    };
    (
        FunctionLayout {
            fragments,
            aligned,
            changed_exits: Vec::new(),
            promoted_calls: Vec::new(),
        },
        hot_size,
    )
}

/// Moves every dead padding block (`Function::is_dead_padding`) right before its fall-through
/// successor, in whichever fragment holds that; a fragment left empty goes.
///
/// Wherever the block order put them, these blocks would need a `jmp` to their successor,
/// and the never-run ones would make a cold fragment of their own out of it. Before the
/// successor they take no bytes and the block before them still falls into it. A dead block
/// whose successor is not in the function (none in practice) goes right after the entry.
fn place_dead_padding(f: &Function, mut fragments: Vec<Vec<BlockId>>) -> Vec<Vec<BlockId>> {
    let dead: Vec<BlockId> = (0..f.blocks.len() as u32)
        .rev()
        .map(BlockId)
        .filter(|&b| f.is_dead_padding(f.block(b)))
        .collect();
    if dead.is_empty() {
        return fragments;
    }
    let mut is_dead = vec![false; f.blocks.len()];
    for b in &dead {
        is_dead[b.0 as usize] = true;
    }
    for fragment in &mut fragments {
        fragment.retain(|b| !is_dead[b.0 as usize]);
    }
    // By address, last first: a chain of dead blocks finds each successor already placed.
    for b in dead {
        let successor = f
            .block_insts(f.block(b))
            .last()
            .and_then(|last| f.block_at(last.end()));
        let at = fragments.iter().enumerate().find_map(|(k, fragment)| {
            let pos = fragment.iter().position(|&x| Some(x) == successor)?;
            Some((k, pos))
        });
        let (k, pos) = at.unwrap_or((0, 1));
        fragments[k].insert(pos, b);
    }
    fragments.retain(|fragment| !fragment.is_empty());
    fragments
}

/// The blocks of `hot` (a first fragment, in order) that `alignment` selects.
fn blocks_to_align(
    f: &Function,
    counts: &FunctionCounts,
    hot: &[BlockId],
    alignment: BlockAlignment,
) -> Vec<AlignedBlock> {
    if alignment.alignment <= 1 {
        return Vec::new();
    }
    let count = |b: BlockId| counts.blocks.get(b.0 as usize).copied().unwrap_or(0);
    let function_count = counts.entries.max(count(hot[0])).max(1);
    let mut aligned = Vec::new();
    // Padding before its successor takes no bytes: the block before it falls into the one
    // after it.
    let placed_next = f.placed_next(hot, true);
    let placed: Vec<BlockId> = hot
        .iter()
        .enumerate()
        .filter(|&(pos, &b)| pos == 0 || placed_next.at(pos - 1) == Some(b))
        .map(|(_, &b)| b)
        .collect();
    for pair in placed.windows(2) {
        let (prev, b) = (pair[0], pair[1]);
        let c = count(b);
        if u128::from(c) * 100
            <= u128::from(function_count) * u128::from(alignment.threshold_percent)
        {
            continue;
        }
        // In u128: two edges into the same block (`jcc` to the next block) with huge counts
        // must not overflow.
        let fall_in: u128 = f
            .block(prev)
            .succs
            .iter()
            .zip(
                counts
                    .edges
                    .get(prev.0 as usize)
                    .map_or(&[][..], Vec::as_slice),
            )
            .filter(|(e, _)| e.to == b)
            .map(|(_, &n)| u128::from(n))
            .sum();
        if u128::from(c) < fall_in * 2 {
            continue;
        }
        let max_padding = (u64::from(alignment.alignment) - 1).min(f.kept_size(f.block(b)));
        aligned.push(AlignedBlock {
            block: b,
            max_padding: max_padding.min(255) as u8,
        });
    }
    aligned
}

/// Builds the optimized layout. `movable[f]` says whether the rewriter can rewrite `f`;
/// `selected(f)` applies the user's function filters; `in_place` keeps function order (no
/// relocations: first fragments are rewritten over their original code).
pub fn optimized_layout(
    program: &Program,
    profile: &AttachedProfile,
    options: &OptimizeOptions,
    movable: &[bool],
    selected: &dyn Fn(FuncId) -> bool,
    in_place: bool,
) -> Layout {
    let nfuncs = program.functions.len();
    let counts_of = |f: FuncId| profile.functions.get(f.0 as usize).and_then(Option::as_ref);
    let min_hot = options.min_hot_count.max(1);
    let eligible = |f: FuncId| movable.get(f.0 as usize).copied().unwrap_or(false) && selected(f);

    // Families with a hot member are rewritten whole (when every member can be).
    let mut family_hot: HashMap<FuncId, bool> = HashMap::new();
    let mut family_ok: HashMap<FuncId, bool> = HashMap::new();
    for f in &program.functions {
        let root = program.family_root(f.id);
        *family_hot.entry(root).or_default() |= is_hot(counts_of(f.id), min_hot);
        *family_ok.entry(root).or_insert(true) &= eligible(f.id);
    }
    let rewritten: Vec<bool> = program
        .functions
        .iter()
        .map(|f| {
            let root = program.family_root(f.id);
            family_hot[&root] && family_ok[&root]
        })
        .collect();

    let split_options = SplitOptions {
        cold_threshold: min_hot - 1,
        all_cold: options.splitting == Splitting::AllCold,
        landing_pads: options.landing_pads,
    };
    // Functions are laid out independently: in parallel, the largest first so that one big
    // function (an interpreter loop) does not finish last on its own.
    let mut todo: Vec<&Function> = program
        .functions
        .iter()
        .filter(|f| rewritten[f.id.0 as usize] && !f.blocks.is_empty())
        .collect();
    todo.sort_by_key(|f| std::cmp::Reverse(f.blocks.len()));
    let laid_out: Vec<(FuncId, FunctionLayout, u64)> = todo
        .par_iter()
        .map(|f| {
            let (layout, hot_size) = layout_function(
                program.info.isa,
                f,
                counts_of(f.id),
                options,
                &split_options,
                in_place,
            );
            (f.id, layout, hot_size)
        })
        .collect();
    let mut functions: Vec<Option<FunctionLayout>> = vec![None; nfuncs];
    let mut hot_sizes = vec![0u64; nfuncs];
    for (id, layout, hot_size) in laid_out {
        functions[id.0 as usize] = Some(layout);
        hot_sizes[id.0 as usize] = hot_size;
    }

    // Function order over the rewritten functions (dense ids in input order).
    let ids: Vec<FuncId> = (0..nfuncs as u32)
        .map(FuncId)
        .filter(|f| functions[f.0 as usize].is_some())
        .collect();
    let dense_of: HashMap<FuncId, u32> = ids
        .iter()
        .enumerate()
        .map(|(i, f)| (*f, i as u32))
        .collect();
    let sizes: Vec<u64> = ids.iter().map(|f| hot_sizes[f.0 as usize]).collect();
    let entry_counts: Vec<u64> = ids
        .iter()
        .map(|f| counts_of(*f).map_or(0, |c| c.entries.max(c.blocks.first().copied().unwrap_or(0))))
        .collect();
    // A call of a linker's veneer is a call of the function it jumps to: the two belong
    // together, not the caller and the three-instruction veneer.
    let callee_of = |f: FuncId| -> FuncId {
        program
            .forwarded_destination(program.function(f).range.start)
            .and_then(|to| {
                program
                    .function_containing(to)
                    .filter(|g| g.range.start == to)
            })
            .map_or(f, |g| g.id)
    };
    let mut calls: Vec<(u32, u32, u64)> = profile
        .calls
        .iter()
        .filter_map(|((caller, callee), &c)| {
            Some((
                *dense_of.get(caller)?,
                *dense_of.get(&callee_of(*callee))?,
                c,
            ))
        })
        .collect();
    // The call graph comes from a hash map: sort it so the order is deterministic, and add
    // up the edges that went through veneers.
    calls.sort_unstable();
    calls.dedup_by(|next, kept| {
        let same = (next.0, next.1) == (kept.0, kept.1);
        if same {
            kept.2 += next.2;
        }
        same
    });
    let order: Vec<u32> = match &options.function_order {
        FunctionOrder::CdSort => rivet_layout::cdsort_order(&sizes, &entry_counts, &calls),
        FunctionOrder::C3 => rivet_layout::c3_order(&sizes, &entry_counts, &calls),
        FunctionOrder::ExecCount => rivet_layout::exec_count_order(&entry_counts),
        FunctionOrder::None => (0..ids.len() as u32).collect(),
        FunctionOrder::User(list) => {
            let mut seen = vec![false; ids.len()];
            let mut order = Vec::with_capacity(ids.len());
            for f in list {
                if let Some(&d) = dense_of.get(f)
                    && !std::mem::replace(&mut seen[d as usize], true)
                {
                    order.push(d);
                }
            }
            order.extend((0..ids.len() as u32).filter(|d| !seen[*d as usize]));
            order
        }
    };

    // Functions rewritten only because a relative is hot (a `foo.cold` part that never ran)
    // go after every function that ran, whatever the order: the hot text is for hot code.
    let ran = |d: u32| {
        counts_of(ids[d as usize]).is_some_and(|c| c.entries > 0 || c.blocks.iter().any(|&n| n > 0))
    };
    let (mut order, idle): (Vec<u32>, Vec<u32>) = order.into_iter().partition(|&d| ran(d));
    order.extend(idle);
    let mut hot_order = Vec::new();
    let mut cold_order = Vec::new();
    for d in order {
        let f = ids[d as usize];
        let fragments = functions[f.0 as usize]
            .as_ref()
            .map_or(0, |fl| fl.fragments.len());
        for k in 0..fragments as u32 {
            let r = FragmentRef {
                function: f,
                fragment: k,
            };
            if k > 0 {
                cold_order.push(r);
            } else if !in_place {
                hot_order.push(r);
            }
        }
    }
    // The emitter balances cache sets with the counts of the functions it rewrites; the
    // others' would be dead weight.
    let block_counts = functions
        .iter()
        .enumerate()
        .map(|(i, fl)| match (fl, counts_of(FuncId(i as u32))) {
            (Some(_), Some(c)) => c.blocks.clone(),
            _ => Vec::new(),
        })
        .collect();
    Layout {
        functions,
        hot_order,
        cold_order,
        in_place,
        block_counts,
        folded: Vec::new(),
        // Decided by the emitter once the layout is final.
        exits: rivet_arch::FragmentExits::Islands,
    }
}
