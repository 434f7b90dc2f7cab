//! Indirect call promotion (`--indirect-call-promotion=calls`, BOLT's ICP for calls): an
//! indirect call site whose profiled callees are concentrated on a few functions of the
//! binary is written as compares of the call's target against those functions, a direct call
//! to each, and the original indirect call as the fallback (the code is
//! `rivet_arch::PromotionShape`'s; the emitter writes it in place of the call).
//!
//! The callees of a site come from the profile's branch records from the call instruction to
//! offset 0 of a function: instrumentation records them in its per-site tables (up to
//! `SITE_TARGETS` callees; the rest arrive as `[unknown]`), perf branch stacks and fdata as
//! ordinary call records. Callees outside the binary (PLT stubs, shared libraries, unknown)
//! count toward the site's total but are never promoted: their address is not known when the
//! binary is written.
//!
//! The choice follows BOLT's thresholds for calls: the `topn` hottest callees at most, each
//! holding at least `total_percent` of the site's calls and `remaining_percent` of the calls
//! the callees before it leave, at sites that made at least `min_calls` calls. The promotion is
//! recorded on the function's layout (`FunctionLayout::promoted_calls`), in compare order, the
//! hottest first: that one's direct call falls into the join, the others take a jump back.
//! Nothing else of the layout changes: the new code stays inside the call's block.

use std::collections::HashMap;

use rivet_elf::{ElfKind, Vaddr};
use rivet_ir::layout::{Layout, PromotedCall, PromotedTarget};
use rivet_ir::{FuncId, Program, Terminator};
use rivet_profile::{LocKind, Profile};

use crate::attach::NameIndex;

/// Which sites are promoted, to how many callees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IcpOptions {
    /// Promote indirect calls at all.
    pub calls: bool,
    /// Callees compared at most per site.
    pub topn: usize,
    /// A promoted callee's share of the site's calls, in percent, at least.
    pub total_percent: f64,
    /// A promoted callee's share of the calls left by the callees before it, at least.
    pub remaining_percent: f64,
    /// Calls a site made, at least, to be promoted.
    pub min_calls: u64,
}

impl Default for IcpOptions {
    fn default() -> Self {
        IcpOptions {
            calls: false,
            topn: 3,
            total_percent: 30.0,
            remaining_percent: 50.0,
            min_calls: 100,
        }
    }
}

/// A callee of a call site as the profile names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Callee {
    /// The entry of a function of the binary.
    Function(FuncId),
    /// A PLT stub, a shared object, or a place the profile did not see.
    Outside,
}

/// The profiled callees of every call site, by the call instruction's address.
#[derive(Clone, Debug, Default)]
pub struct CallSites {
    pub sites: HashMap<Vaddr, Vec<(Callee, u64)>>,
}

impl CallSites {
    /// The call records of a branch profile, by site (sample profiles have none).
    pub fn of_profile(program: &Program, names: &[String], profile: &Profile) -> CallSites {
        let index = NameIndex::new(program, names);
        let mut sites: HashMap<Vaddr, HashMap<Callee, u64>> = HashMap::new();
        for ((from, to), c) in &profile.branches {
            if from.kind == LocKind::External || c.count == 0 {
                continue;
            }
            let Some(caller) = index.get(&from.name) else {
                continue;
            };
            let site = program.function(caller).range.start + from.offset;
            let callee = match (to.kind, index.get(&to.name)) {
                (LocKind::External, _) | (_, None) => Callee::Outside,
                (_, Some(g)) if to.offset == 0 && program.function(g).range.start != site => {
                    Callee::Function(g)
                }
                // A jump inside a function (or to its own start) is no call.
                (_, Some(g)) if g == caller => continue,
                (_, Some(_)) => Callee::Outside,
            };
            *sites.entry(site).or_default().entry(callee).or_default() += c.count;
        }
        CallSites {
            sites: sites
                .into_iter()
                .map(|(site, callees)| {
                    let mut v: Vec<(Callee, u64)> = callees.into_iter().collect();
                    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                    (site, v)
                })
                .collect(),
        }
    }
}

/// What the pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IcpReport {
    /// Indirect call sites of rewritten functions that the profile saw run.
    pub profiled_sites: usize,
    /// Calls those sites made.
    pub profiled_calls: u64,
    /// Sites promoted.
    pub promoted_sites: usize,
    /// Callees compared, over all promoted sites.
    pub promoted_targets: usize,
    /// Calls of the profiled run that now go through a direct call.
    pub promoted_calls: u64,
    /// Sites that qualified but whose code cannot be rewritten (an operand that uses r11 in
    /// position-independent code, say).
    pub refused_sites: usize,
}

/// The callees `site` (made `callees`, sorted hottest first) is promoted to, in compare order.
fn chosen(callees: &[(Callee, u64)], options: &IcpOptions) -> Vec<(FuncId, u64)> {
    let total: u64 = callees.iter().map(|c| c.1).sum();
    if total < options.min_calls.max(1) {
        return Vec::new();
    }
    let mut left = total;
    let mut out = Vec::new();
    for &(callee, count) in callees {
        if out.len() >= options.topn {
            break;
        }
        let share = 100.0 * count as f64 / total as f64;
        let of_left = 100.0 * count as f64 / left.max(1) as f64;
        if share < options.total_percent || of_left < options.remaining_percent {
            break;
        }
        // A callee outside the binary cannot be compared; the colder ones may still be.
        if let Callee::Function(g) = callee {
            out.push((g, count));
        }
        left -= count;
    }
    out
}

/// Records on `layout` the promotions `options` asks for at the profiled indirect call sites
/// of every rewritten function.
pub fn apply(
    program: &Program,
    sites: &CallSites,
    layout: &mut Layout,
    options: IcpOptions,
) -> IcpReport {
    let mut report = IcpReport::default();
    if !options.calls || options.topn == 0 || program.info.isa != rivet_arch::Isa::X86_64 {
        return report;
    }
    let pic = program.info.kind != ElfKind::Executable;
    for f in &program.functions {
        let Some(Some(fl)) = layout.functions.get_mut(f.id.0 as usize) else {
            continue;
        };
        let mut promoted = Vec::new();
        for block in &f.blocks {
            for i in block.insts.clone() {
                let inst = &f.insts[i as usize];
                if inst.flow() != rivet_arch::Flow::IndirectCall {
                    continue;
                }
                let Some(callees) = sites.sites.get(&inst.addr()) else {
                    continue;
                };
                report.profiled_sites += 1;
                report.profiled_calls += callees.iter().map(|c| c.1).sum::<u64>();
                let targets = chosen(callees, &options);
                if targets.is_empty() || block.in_exclusive_sequence {
                    continue;
                }
                let noreturn =
                    block.terminator == Terminator::NoReturnCall && i + 1 == block.insts.end;
                if inst
                    .isa()
                    .promotion_shape(inst, targets.len(), pic, noreturn)
                    .is_err()
                {
                    report.refused_sites += 1;
                    continue;
                }
                report.promoted_sites += 1;
                report.promoted_targets += targets.len();
                report.promoted_calls += targets.iter().map(|t| t.1).sum::<u64>();
                promoted.push(PromotedCall {
                    inst: i,
                    targets: targets
                        .iter()
                        .map(|&(g, count)| PromotedTarget {
                            function: g,
                            entry: program.function(g).range.start,
                            count,
                        })
                        .collect(),
                    site_count: callees.iter().map(|c| c.1).sum(),
                    noreturn,
                });
            }
        }
        promoted.sort_by_key(|p| p.inst);
        fl.promoted_calls = promoted;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> IcpOptions {
        IcpOptions {
            calls: true,
            ..IcpOptions::default()
        }
    }

    #[test]
    fn concentrated_sites_promote_their_hottest_callees() {
        let f = |n| Callee::Function(FuncId(n));
        // 70% / 25% / 5%: the first two pass 30% of the total? 25% does not.
        let got = chosen(&[(f(1), 700), (f(2), 250), (f(3), 50)], &opts());
        assert_eq!(got, vec![(FuncId(1), 700)]);
        // 60% / 40%: both (40% of the total, 100% of what is left).
        let got = chosen(&[(f(1), 600), (f(2), 400)], &opts());
        assert_eq!(got, vec![(FuncId(1), 600), (FuncId(2), 400)]);
        // Spread over many callees: nothing.
        let spread: Vec<_> = (0..10).map(|k| (f(k), 100)).collect();
        assert!(chosen(&spread, &opts()).is_empty());
    }

    #[test]
    fn cold_sites_and_outside_callees_are_not_promoted() {
        let f = |n| Callee::Function(FuncId(n));
        assert!(chosen(&[(f(1), 99)], &opts()).is_empty());
        assert_eq!(chosen(&[(f(1), 100)], &opts()), vec![(FuncId(1), 100)]);
        // A shared library's function is skipped, the next callee still considered.
        let got = chosen(&[(Callee::Outside, 500), (f(2), 450), (f(3), 50)], &opts());
        assert_eq!(got, vec![(FuncId(2), 450)]);
        let one = IcpOptions { topn: 1, ..opts() };
        assert_eq!(
            chosen(&[(f(1), 600), (f(2), 400)], &one),
            vec![(FuncId(1), 600)]
        );
    }
}
