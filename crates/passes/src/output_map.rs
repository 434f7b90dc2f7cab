//! Samples of Rivet's output mapped back to the input it was made from.
//!
//! Rivet leaves a block address translation in every output (`.rivet.bat`, the new start of
//! every block it moved); rebuilt into a new address per instruction (the emitter's
//! `AddressMap::from_blocks`) and inverted here, it says which input instruction every byte of
//! moved code holds. A block's body is copied whole, so its instructions keep their order and
//! sizes; only its last one (the branch, re-encoded, maybe longer) and a jump the layout added
//! after it differ, and both belong to the block's last instruction: that is where the block
//! leaves in the input. Code Rivet did not move is where it was, old bodies of moved functions
//! included, so an address outside moved code maps to itself: the forwarding jump left at a
//! moved function's old entry is that function's entry.
//!
//! Samples map address by address. A branch maps both ends; a jump the layout added, or a
//! branch inverted so that the input's fall-through is now taken, becomes the edge it stands
//! for in the input (last instruction of the block to the block it reaches, the form `attach`
//! takes for taken and fall-through edges alike). A straight run through the output crosses
//! blocks in their new order: it is cut where the next output block is not the input's next
//! block, each cut becoming the edge between the two blocks, so that the pieces are straight
//! runs of the input that aggregation walks through the input's CFG as usual. The forwarding
//! jump itself is no branch of the input and is left out.

use rivet_elf::Vaddr;
use rivet_ir::{Function, Program};
use rivet_profile::perf::Aggregated;

/// Bytes past a block's last input instruction that still belong to the block in the output:
/// the re-encoded branch may be longer than the input's, and the layout may add a jump after
/// it. A block followed directly by another ends where that one starts; this bound only stops
/// a fragment's last block from claiming what the emitter placed after the fragment.
const BLOCK_TAIL_SLACK: u64 = 16;

/// Longest straight run walked (output instructions); a longer one is no sampled run.
const MAX_TRACE_INSTRUCTIONS: usize = 1 << 16;

/// One input instruction in the output: `[new, end)` holds it.
#[derive(Clone, Copy, Debug)]
struct Span {
    new: u64,
    end: u64,
    func: u32,
    inst: u32,
    block: u32,
}

/// Where an output address is in the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mapped {
    /// In moved code: instruction `inst` of function `func`, at input address `old`.
    Moved { func: u32, inst: u32, old: u64 },
    /// Outside moved code, where the input had the same bytes.
    Same(u64),
    /// In code Rivet added (veneers, padding between fragments) or outside the input's code.
    Unmapped,
}

impl Mapped {
    fn addr(self) -> Option<u64> {
        match self {
            Mapped::Moved { old, .. } => Some(old),
            Mapped::Same(a) => Some(a),
            Mapped::Unmapped => None,
        }
    }
}

/// How much of a recording of the output mapped back to the input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapReport {
    /// Sampled addresses in the output, and those that map to the input.
    pub samples: u64,
    pub samples_mapped: u64,
    /// Of the mapped samples, those in forwarding jumps at old entries of moved functions.
    pub samples_in_forwarding_jumps: u64,
    /// Branches with both ends in the output, and those with both ends mapped.
    pub branches: u64,
    pub branches_mapped: u64,
    /// Forwarding jumps taken (left out: the input has no such branch).
    pub forwarding_jumps: u64,
    /// Straight runs, those mapped, and the input edges their cuts became.
    pub traces: u64,
    pub traces_mapped: u64,
    pub trace_cuts: u64,
    /// Branches from elsewhere into the output, and those mapped.
    pub entries: u64,
    pub entries_mapped: u64,
}

impl MapReport {
    /// The share of sampled addresses that map back (1 when there are none).
    pub fn samples_share(&self) -> f64 {
        if self.samples == 0 {
            1.0
        } else {
            self.samples_mapped as f64 / self.samples as f64
        }
    }
}

/// The inverse of an output's address map, over the input `program`.
#[derive(Debug)]
pub struct OutputMap<'p> {
    program: &'p Program,
    /// Sorted by new address; instructions of blocks that take no bytes share it with the
    /// block they pass to.
    spans: Vec<Span>,
    /// Per `FuncId`: moved (its new code is not in its old range), rewritten in place, or
    /// neither.
    moved: Vec<bool>,
    in_place: Vec<bool>,
}

impl<'p> OutputMap<'p> {
    /// `pairs`, per `FuncId` of `program`: (input instruction address, output address) of
    /// every instruction of a rewritten function, sorted by input address.
    pub fn new(program: &'p Program, pairs: &[Option<Vec<(Vaddr, Vaddr)>>]) -> OutputMap<'p> {
        let mut spans = Vec::new();
        let mut moved = vec![false; program.functions.len()];
        let mut in_place = vec![false; program.functions.len()];
        for (fi, entries) in pairs.iter().enumerate() {
            let (Some(entries), Some(f)) = (entries, program.functions.get(fi)) else {
                continue;
            };
            if entries.is_empty() {
                continue;
            }
            if entries.iter().any(|(_, new)| f.range.contains(*new)) {
                in_place[fi] = true;
            } else {
                moved[fi] = true;
            }
            for (bi, block) in f.blocks.iter().enumerate() {
                for i in block.insts.clone() {
                    if f.is_dropped_padding(i) {
                        continue;
                    }
                    let inst = &f.insts[i as usize];
                    let Ok(k) = entries.binary_search_by_key(&inst.addr(), |e| e.0) else {
                        continue;
                    };
                    let new = entries[k].1.get();
                    // The last instruction the output keeps (padding after it is left out).
                    let slack = if (i + 1..block.insts.end).all(|j| f.is_dropped_padding(j)) {
                        BLOCK_TAIL_SLACK
                    } else {
                        0
                    };
                    spans.push(Span {
                        new,
                        end: new + u64::from(inst.len()) + slack,
                        func: fi as u32,
                        inst: i,
                        block: bi as u32,
                    });
                }
            }
        }
        spans.sort_unstable_by_key(|s| (s.new, s.func, s.inst));
        // An instruction ends where the next one in the output starts.
        let mut next_start = u64::MAX;
        for s in spans.iter_mut().rev() {
            if next_start > s.new {
                s.end = s.end.min(next_start);
                next_start = s.new;
            } else {
                // Same start as the one after it (a block taking no bytes): same end.
                s.end = s.end.min(next_start.max(s.new + 1));
            }
        }
        OutputMap {
            program,
            spans,
            moved,
            in_place,
        }
    }

    fn function(&self, func: u32) -> &'p Function {
        &self.program.functions[func as usize]
    }

    /// The spans starting at the same address as `spans[k]`, as an index range.
    fn group(&self, k: usize) -> std::ops::Range<usize> {
        let new = self.spans[k].new;
        let start = self.spans.partition_point(|s| s.new < new);
        let end = self.spans.partition_point(|s| s.new <= new);
        start..end
    }

    /// The instruction that really is at a shared address: not a jump the emitter dropped
    /// because its target comes next, nor that of a block that takes no bytes because it only
    /// passes on to the block placed after it (`Function::placed_next`). `from_block`, for a
    /// branch target: prefer a successor of the branching block.
    fn choose(&self, group: std::ops::Range<usize>, from: Option<(u32, u32)>) -> usize {
        if group.len() == 1 {
            return group.start;
        }
        if let Some((func, block)) = from {
            let f = self.function(func);
            let succs = &f.blocks[block as usize].succs;
            if let Some(k) = group.clone().find(|&k| {
                let s = self.spans[k];
                s.func == func && succs.iter().any(|e| e.to.0 == s.block)
            }) {
                return k;
            }
        }
        // A jump the emitter dropped because its target block comes next shares that block's
        // address without holding a byte: it is never the instruction there.
        let inst_addr = |j: usize| {
            let s = self.spans[j];
            self.function(s.func).insts[s.inst as usize].addr()
        };
        let dropped_jump = |k: usize| {
            let s = self.spans[k];
            let inst = &self.function(s.func).insts[s.inst as usize];
            matches!(inst.flow(), rivet_arch::Flow::Jump { target }
                if group.clone().any(|j| j != k && self.spans[j].func == s.func && inst_addr(j) == target))
        };
        let kept: Vec<usize> = group.clone().filter(|&k| !dropped_jump(k)).collect();
        if kept.len() == 1 {
            return kept[0];
        }
        group
            .clone()
            .find(|&k| {
                let s = self.spans[k];
                let f = self.function(s.func);
                let passes = f.passes_straight_to(&f.blocks[s.block as usize]);
                !group.clone().any(|j| {
                    j != k
                        && passes
                            == Some(
                                self.function(self.spans[j].func).insts
                                    [self.spans[j].inst as usize]
                                    .addr(),
                            )
                })
            })
            .unwrap_or(group.start)
    }

    /// The span holding output address `addr`, if moved code holds it.
    fn span_at(&self, addr: u64, from: Option<(u32, u32)>) -> Option<usize> {
        let pos = self.spans.partition_point(|s| s.new <= addr);
        let k = pos.checked_sub(1)?;
        let group = self.group(k);
        let k = self.choose(group, from);
        (addr < self.spans[k].end).then_some(k)
    }

    fn mapped_span(&self, k: usize, addr: u64) -> Mapped {
        let s = self.spans[k];
        let inst = &self.function(s.func).insts[s.inst as usize];
        let within = (addr - s.new).min(u64::from(inst.len()).saturating_sub(1));
        Mapped::Moved {
            func: s.func,
            inst: s.inst,
            old: inst.addr().get() + within,
        }
    }

    fn translate_from(&self, addr: u64, from: Option<(u32, u32)>) -> Mapped {
        if let Some(k) = self.span_at(addr, from) {
            return self.mapped_span(k, addr);
        }
        let a = Vaddr(addr);
        if let Some(f) = self.program.function_containing(a) {
            return if self.in_place[f.id.0 as usize] {
                Mapped::Unmapped
            } else {
                Mapped::Same(addr)
            };
        }
        if self
            .program
            .plt
            .iter()
            .any(|p| addr >= p.addr.get() && addr < p.addr.get() + p.size)
        {
            return Mapped::Same(addr);
        }
        Mapped::Unmapped
    }

    /// The input address of output address `addr`, if it has one.
    pub fn translate(&self, addr: u64) -> Option<u64> {
        self.translate_from(addr, None).addr()
    }

    /// Whether `addr` (outside moved code) is the forwarding jump at a moved function's entry.
    fn is_forwarding_jump(&self, m: Mapped) -> bool {
        match m {
            Mapped::Same(a) => self
                .program
                .function_containing(Vaddr(a))
                .is_some_and(|f| f.range.start.get() == a && self.moved[f.id.0 as usize]),
            _ => false,
        }
    }

    fn block_of(&self, m: Mapped) -> Option<(u32, u32)> {
        match m {
            Mapped::Moved { func, inst, .. } => {
                let f = self.function(func);
                let b = f.blocks.partition_point(|b| b.insts.start <= inst);
                Some((func, b.checked_sub(1)? as u32))
            }
            _ => None,
        }
    }

    /// The input edges that going from instruction `from` (the last of its block) straight to
    /// the block starting at `to` stands for: the edge itself, or through blocks that only
    /// pass on (a block of nothing but a jump takes no bytes in the output when placed before
    /// its target, and a branch to it lands on its target).
    fn edges_to(&self, func: u32, from_block: u32, from: u64, to: u64) -> Vec<(u64, u64)> {
        let f = self.function(func);
        let Some(target) = f.block_at(Vaddr(to)) else {
            return vec![(from, to)];
        };
        let mut path = vec![(from, to)];
        let mut block = from_block as usize;
        let mut last = from;
        for _ in 0..4 {
            let succs = &f.blocks[block].succs;
            if succs.iter().any(|e| e.to == target) {
                path.pop();
                path.push((last, to));
                return path;
            }
            // One successor passing straight on towards `to`.
            let Some(via) = succs.iter().map(|e| e.to).find(|&b| {
                f.passes_straight_to(f.block(b))
                    .is_some_and(|next| f.block_at(next).is_some())
            }) else {
                break;
            };
            let via_block = f.block(via);
            let Some(tail) = f.block_insts(via_block).last() else {
                break;
            };
            path.pop();
            path.push((last, via_block.start.get()));
            last = tail.addr().get();
            block = via.0 as usize;
            path.push((last, to));
        }
        vec![(from, to)]
    }

    /// Where a branch leaving from `m` leaves in the input: the last instruction of its block
    /// when `m` is the last one the output kept (padding after it is left out, and the
    /// input's edge leaves from the block's last instruction).
    fn branch_source(&self, m: Mapped) -> Mapped {
        let (Mapped::Moved { func, inst, .. }, Some((_, block))) = (m, self.block_of(m)) else {
            return m;
        };
        let f = self.function(func);
        let b = &f.blocks[block as usize];
        if (inst + 1..b.insts.end).all(|i| f.is_dropped_padding(i)) && b.insts.end > inst + 1 {
            let last = b.insts.end - 1;
            return Mapped::Moved {
                func,
                inst: last,
                old: f.insts[last as usize].addr().get(),
            };
        }
        m
    }

    /// Whether input instruction `next` follows `prev` in the input (padding between them is
    /// left out of the output).
    fn follows(&self, prev: Mapped, next: Mapped) -> bool {
        let (
            Mapped::Moved {
                func: fa, inst: ia, ..
            },
            Mapped::Moved {
                func: fb, inst: ib, ..
            },
        ) = (prev, next)
        else {
            return false;
        };
        if fa != fb || ib <= ia {
            return false;
        }
        let f = self.function(fa);
        (ia + 1..ib).all(|i| f.is_dropped_padding(i))
    }

    /// The recording of the output, `agg`, as a recording of the input.
    pub fn translate_aggregated(&self, agg: &Aggregated) -> (Aggregated, MapReport) {
        let mut report = MapReport::default();
        let mut out = Aggregated {
            has_branch_stacks: agg.has_branch_stacks,
            events: agg.events.clone(),
            total_samples: agg.total_samples,
            samples_elsewhere: agg.samples_elsewhere,
            sources: agg.sources.clone(),
            forced_source: agg.forced_source,
            samples_of_other_sources: agg.samples_of_other_sources,
            spe_branches: agg.spe_branches,
            spe_branches_without_target: agg.spe_branches_without_target,
            spe_branches_without_outcome: agg.spe_branches_without_outcome,
            ..Aggregated::default()
        };
        for (&addr, &count) in &agg.samples {
            report.samples += count;
            let m = self.translate_from(addr, None);
            if let Some(old) = m.addr() {
                report.samples_mapped += count;
                if self.is_forwarding_jump(m) {
                    report.samples_in_forwarding_jumps += count;
                }
                *out.samples.entry(old).or_default() += count;
            }
        }
        let add_branch = |out: &mut Aggregated, from: u64, to: u64, count: u64, mispreds: u64| {
            let c = out.branches.entry((from, to)).or_default();
            c.0 += count;
            c.1 += mispreds;
        };
        for (&(from, to), &(count, mispreds)) in &agg.branches {
            report.branches += count;
            let mf = self.branch_source(self.translate_from(from, None));
            let mt = self.translate_from(to, self.block_of(mf));
            let (Some(old_from), Some(old_to)) = (mf.addr(), mt.addr()) else {
                continue;
            };
            report.branches_mapped += count;
            if self.is_forwarding_jump(mf) && old_to == old_from {
                report.forwarding_jumps += count;
                continue;
            }
            match (self.block_of(mf), mt) {
                (Some((func, block)), Mapped::Moved { func: tf, .. }) if tf == func => {
                    let edges = self.edges_to(func, block, old_from, old_to);
                    for (i, (a, b)) in edges.into_iter().enumerate() {
                        add_branch(&mut out, a, b, count, if i == 0 { mispreds } else { 0 });
                    }
                }
                _ => add_branch(&mut out, old_from, old_to, count, mispreds),
            }
        }
        for (&to, &count) in &agg.entries {
            report.entries += count;
            if let Some(old) = self.translate(to) {
                report.entries_mapped += count;
                *out.entries.entry(old).or_default() += count;
            }
        }
        for (&(start, end), &count) in &agg.traces {
            report.traces += count;
            if self.trace(start, end, count, &mut out, &mut report) {
                report.traces_mapped += count;
            }
        }
        for (&addr, &count) in &agg.not_taken {
            self.not_taken(addr, count, &mut out);
        }
        (out, report)
    }

    /// Adds the straight run `start..=end` of the output, cut into runs of the input and the
    /// edges between them; false when it does not map.
    fn trace(
        &self,
        start: u64,
        end: u64,
        count: u64,
        out: &mut Aggregated,
        report: &mut MapReport,
    ) -> bool {
        let (ms, me) = (
            self.translate_from(start, None),
            self.translate_from(end, None),
        );
        match (ms, me) {
            (Mapped::Same(s), Mapped::Same(e)) => {
                *out.traces.entry((s, e)).or_default() += count;
                return true;
            }
            (Mapped::Moved { .. }, Mapped::Moved { .. }) => {}
            _ => return false,
        }
        let (Some(ks), Some(ke)) = (self.span_at(start, None), self.span_at(end, None)) else {
            return false;
        };
        if ks > ke {
            return false;
        }
        let (first, last) = (self.group(ks), self.group(ke));
        if first.start > last.start || last.start - first.start > MAX_TRACE_INSTRUCTIONS {
            return false;
        }
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        let mut edges: Vec<(u64, u64)> = Vec::new();
        let mut piece_start = ms.addr().unwrap_or(0);
        let mut prev = ms;
        let mut at = first.end;
        while at <= last.start {
            // The next instruction in the output.
            let group = self.group(at);
            let next = if group.start == last.start {
                me
            } else {
                let k = self.choose(group.clone(), self.block_of(prev));
                self.mapped_span(k, self.spans[k].new)
            };
            if !self.follows(prev, next) {
                let (
                    Some((func, block)),
                    Mapped::Moved {
                        func: next_func,
                        old: next_old,
                        ..
                    },
                ) = (self.block_of(prev), next)
                else {
                    return false;
                };
                let f = self.function(func);
                if next_func != func || f.block_at(Vaddr(next_old)).is_none() {
                    return false;
                }
                // The input's edge leaves from the block's last instruction, whatever the output
                // left out after `prev` (padding, a jump dropped because its target comes next).
                let Some(last) = f.block_insts(&f.blocks[block as usize]).last() else {
                    return false;
                };
                let prev_addr = last.addr().get();
                pieces.push((piece_start, prev_addr));
                edges.extend(self.edges_to(func, block, prev_addr, next_old));
                piece_start = next_old;
            }
            prev = next;
            at = group.end;
        }
        pieces.push((piece_start, me.addr().unwrap_or(0)));
        report.trace_cuts += count * edges.len() as u64;
        for piece in pieces {
            if piece.0 <= piece.1 {
                *out.traces.entry(piece).or_default() += count;
            }
        }
        for (a, b) in edges {
            let c = out.branches.entry((a, b)).or_default();
            c.0 += count;
        }
        true
    }

    /// A conditional branch of the output seen not taken: the input edge to the block placed
    /// after it, which is the input's fall-through unless the layout inverted the branch.
    fn not_taken(&self, addr: u64, count: u64, out: &mut Aggregated) {
        let m = self.translate_from(addr, None);
        let Some(old) = m.addr() else { return };
        let Some(k) = self.span_at(addr, None) else {
            // Not moved: the input's own branch.
            *out.not_taken.entry(old).or_default() += count;
            return;
        };
        let next_k = self.spans.partition_point(|s| s.new <= self.spans[k].new);
        if next_k >= self.spans.len() {
            return;
        }
        let next_k = self.choose(self.group(next_k), self.block_of(m));
        let next = self.mapped_span(next_k, self.spans[next_k].new);
        let (
            Some((func, block)),
            Mapped::Moved {
                func: nf,
                old: nold,
                ..
            },
        ) = (self.block_of(m), next)
        else {
            return;
        };
        let f = self.function(func);
        let b = &f.blocks[block as usize];
        let Some(tail) = f.block_insts(b).last() else {
            return;
        };
        if nf != func || tail.addr().get() != old {
            return;
        }
        let falls_to = f.block_at(tail.end());
        let next_block = f.block_at(Vaddr(nold));
        if next_block.is_some() && next_block == falls_to {
            *out.not_taken.entry(old).or_default() += count;
        } else if next_block.is_some_and(|nb| b.succs.iter().any(|e| e.to == nb)) {
            let c = out.branches.entry((old, nold)).or_default();
            c.0 += count;
        }
    }
}
