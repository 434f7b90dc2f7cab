//! Passes over the program model. Each pass reads a `Program` (and a profile, for the
//! optimizing ones) and produces what the emitter needs; none touches ELF bytes.
//!
//! - `instrument`: which edges get counters, where the increments go, and the counting graph
//!   that turns raw counters back into edge counts.
//! - `names`: the names profiles give functions (BOLT's conventions, so fdata interoperates).
//! - `aggregate`: perf samples of the binary (branch stacks or plain IPs) into a profile.
//! - `bolt_yaml`: BOLT's YAML profile put on the binary it was taken on, by block offsets.
//! - `attach`: a profile onto the program: block, edge and entry counts, a call graph, and
//!   what matched (flow inference for sample profiles).
//! - `dyno`: execution statistics (instructions, calls, taken and non-taken branches) of the
//!   profiled run on the original code and on a new layout, as the emitter would write it.
//! - `fragment_size`: the bytes a fragment takes once emitted, estimated for layout decisions.
//! - `stale`: a profile of another build of the program carried over by function and block
//!   hashes, the counts of changed functions repaired by flow inference.
//! - `output_map`: a recording of Rivet's output mapped back to its input through the
//!   output's block address translation (`.rivet.bat`).
//! - `icf`: identical code folding in safe mode: which functions are the same code (bytes
//!   read through a closure the caller gives) and fold into one kept copy.
//! - `icp`: indirect call promotion: the hottest profiled callees of an indirect call site
//!   compared and called directly, recorded on the layout for the emitter.
//! - `peephole`: BOLT's peepholes (double jumps, useless branches; jumps to returns) and
//!   simplified conditional tail calls, as changed block exits over a finished layout.
//! - `taildup`: tail duplication: a hot jump to a small block that ends the path replaced
//!   by a copy of that block, as changed block exits over a finished layout.
//! - `optimize`: the optimizing layout (block order, hot/cold split, function order) from an
//!   attached profile.

pub mod aggregate;
pub mod attach;
pub mod bolt_yaml;
pub mod dyno;
pub mod fragment_size;
pub mod icf;
pub mod icp;
pub mod instrument;
pub mod names;
pub mod optimize;
pub mod output_map;
pub mod peephole;
pub mod stale;
pub mod taildup;

use std::collections::HashSet;

use rivet_ir::{FuncId, Program};
use rivet_profile::counters::{CounterMap, FunctionMap};

pub use instrument::{FunctionInstrumentation, default_atomics, instrument_function};

/// The instrumentation of a whole program.
#[derive(Clone, Debug)]
pub struct ProgramInstrumentation {
    /// Per `FuncId`: the plan of instrumented functions.
    pub functions: Vec<Option<FunctionInstrumentation>>,
    pub counters: u32,
}

impl ProgramInstrumentation {
    /// Moves the counter maps out of the plans: the rewrite needs the probes alone, and a
    /// large program's maps are hundreds of MB, which the counter map would otherwise copy.
    pub fn take_maps(&mut self) -> FunctionMaps {
        FunctionMaps {
            maps: self
                .functions
                .iter_mut()
                .map(|f| f.as_mut().map(|f| std::mem::take(&mut f.map)))
                .collect(),
            counters: self.counters,
        }
    }
}

/// The counting graphs of a program's instrumented functions, by `FuncId`
/// (`ProgramInstrumentation::take_maps`).
#[derive(Debug)]
pub struct FunctionMaps {
    maps: Vec<Option<FunctionMap>>,
    counters: u32,
}

impl FunctionMaps {
    /// The counter map of the functions for which `kept` holds (the ones actually rewritten),
    /// for a binary with `build_id` named `binary_name`.
    pub fn counter_map(
        self,
        program: &Program,
        kept: &dyn Fn(FuncId) -> bool,
        build_id: &[u8],
        binary_name: &str,
        moved_entries: &[(u64, u64)],
    ) -> CounterMap {
        let functions = self
            .maps
            .into_iter()
            .enumerate()
            .filter(|(i, _)| kept(FuncId(*i as u32)))
            .filter_map(|(_, map)| map)
            .collect();
        CounterMap {
            // Named without a machine constant: the ISA's own enum is the source.
            arch: match program.info.isa {
                rivet_arch::Isa::X86_64 => rivet_profile::counters::CounterArch::X86_64,
                rivet_arch::Isa::Aarch64 => rivet_profile::counters::CounterArch::Aarch64,
            },
            input_build_id: build_id.to_vec(),
            binary_name: binary_name.to_string(),
            counter_count: self.counters,
            functions,
            symbols: names::symbol_table(program),
            moved_entries: moved_entries.to_vec(),
        }
    }
}

/// Plans instrumentation for every function `eligible` accepts (they must be simple), with
/// probes counting with `atomics`.
pub fn instrument_program(
    program: &Program,
    atomics: rivet_arch::Atomics,
    eligible: &dyn Fn(FuncId) -> bool,
) -> ProgramInstrumentation {
    let fragment_targets: HashSet<rivet_elf::Vaddr> = program
        .functions
        .iter()
        .flat_map(|f| f.blocks.iter().flat_map(|b| b.fragment_succs.iter()))
        .map(|s| s.addr)
        .collect();
    let names = names::profile_names(program);
    let mut counters = 0u32;
    let functions: Vec<Option<FunctionInstrumentation>> = program
        .functions
        .iter()
        .map(|f| {
            if !f.is_simple() || f.blocks.is_empty() || !eligible(f.id) {
                return None;
            }
            let plan = instrument_function(
                program.info.isa,
                atomics,
                f,
                names[f.id.0 as usize].clone(),
                counters,
                &fragment_targets,
            );
            counters += plan.probes.probes.len() as u32;
            Some(plan)
        })
        .collect();
    // Target tables of indirect calls, after all edge counters.
    let mut functions: Vec<Option<FunctionInstrumentation>> = functions;
    for (f, plan) in program.functions.iter().zip(functions.iter_mut()) {
        let Some(plan) = plan else { continue };
        for (inst, table) in &mut plan.probes.indirect {
            *table = counters;
            counters += rivet_profile::counters::SITE_WORDS;
            plan.map
                .indirect
                .push((f.insts[*inst as usize].addr().get(), *table));
        }
    }
    ProgramInstrumentation {
        functions,
        counters,
    }
}
