//! Builders shared by the integration tests of `rivet-passes`: functions cut into blocks from
//! real x86-64 (or AArch64) bytes, CFG edges, a program around them and a profile of
//! per-function counts.

use rivet_arch::Isa;
use rivet_elf::{ElfKind, Vaddr, VaddrRange};
use rivet_ir::{
    BinaryInfo, Block, BlockId, Call, Edge, EdgeKind, FuncId, Function, Origin, Program,
    RelocationMode, Status, Terminator,
};
use rivet_passes::attach::{AttachedProfile, FunctionCounts};

#[allow(dead_code)]
pub fn taken(to: u32) -> Edge {
    Edge {
        to: BlockId(to),
        kind: EdgeKind::Taken,
    }
}

#[allow(dead_code)]
pub fn fall(to: u32) -> Edge {
    Edge {
        to: BlockId(to),
        kind: EdgeKind::FallThrough,
    }
}

/// A simple function of `code` at `start`, cut into blocks at the given start addresses. Its
/// first block is the entry; blocks no edge path reaches from it are unreachable.
pub fn function(
    id: u32,
    start: u64,
    code: &[u8],
    blocks: Vec<(u64, Terminator, Vec<Edge>)>,
    calls: Vec<Call>,
) -> Function {
    function_of(Isa::X86_64, id, start, code, blocks, calls)
}

/// [`function`] of `isa`'s code.
pub fn function_of(
    isa: Isa,
    id: u32,
    start: u64,
    code: &[u8],
    blocks: Vec<(u64, Terminator, Vec<Edge>)>,
    calls: Vec<Call>,
) -> Function {
    let insts = isa.decode_all(code, Vaddr(start));
    assert!(insts.iter().all(|i| !i.is_invalid()));
    let index_of = |addr: u64| insts.iter().position(|i| i.addr().get() >= addr).unwrap() as u32;
    let starts: Vec<u64> = blocks.iter().map(|b| b.0).collect();
    let blocks = blocks
        .into_iter()
        .enumerate()
        .map(|(i, (at, terminator, succs))| {
            let end = starts
                .get(i + 1)
                .map_or(insts.len() as u32, |&s| index_of(s));
            Block {
                start: Vaddr(at),
                insts: index_of(at)..end,
                terminator,
                succs,
                fragment_succs: Vec::new(),
                is_entry: i == 0,
                is_landing_pad: false,
                is_address_taken: false,
                in_exclusive_sequence: false,
                is_reachable: true,
            }
        })
        .collect();
    let blocks = with_reachability(blocks);
    Function {
        id: FuncId(id),
        names: vec![format!("f{id}")],
        file: None,
        is_local: false,
        range: VaddrRange::new(Vaddr(start), code.len() as u64),
        origin: Origin::Symbol,
        parent: None,
        secondary_entries: Vec::new(),
        address_taken: false,
        padding_after: 0,
        insts,
        blocks,
        calls,
        jump_tables: Vec::new(),
        lsda: None,
        cfi: Vec::new(),
        status: Status::Simple,
        released: None,
        insts_set_aside: false,
    }
}

fn with_reachability(mut blocks: Vec<Block>) -> Vec<Block> {
    let mut reached = vec![false; blocks.len()];
    let mut todo = vec![0usize];
    while let Some(b) = todo.pop() {
        if !std::mem::replace(&mut reached[b], true) {
            todo.extend(blocks[b].succs.iter().map(|e| e.to.0 as usize));
        }
    }
    for (block, reached) in blocks.iter_mut().zip(reached) {
        block.is_reachable = reached;
    }
    blocks
}

/// An executable with relocations holding `functions` (ids must be their indices).
#[allow(dead_code)]
pub fn program(functions: Vec<Function>) -> Program {
    Program {
        info: BinaryInfo {
            isa: Isa::X86_64,
            kind: ElfKind::Executable,
            entry: Vaddr(0x1000),
            build_id: None,
            relocation_mode: RelocationMode::Available,
            code_bytes: 0,
            static_relocations: 0,
            dynamic_relocations: 0,
            has_eh_frame: false,
        },
        functions,
        plt: Vec::new(),
        warnings: Vec::new(),
    }
}

/// A profile of these per-function counts and no call graph.
#[allow(dead_code)]
pub fn profile(counts: Vec<Option<FunctionCounts>>) -> AttachedProfile {
    AttachedProfile {
        functions: counts,
        ..AttachedProfile::default()
    }
}
