//! Every stored reference to code that moves, and how to rewrite it.
//!
//! References inside rewritten functions are recomputed when their instructions are encoded;
//! this module finds the others: pointers in data (function-pointer tables, vtables,
//! `.init_array`), their dynamic relocations (RELATIVE / IRELATIVE addends, RELR words),
//! jump-table entries, PC-relative and absolute fields in code that stays, GOT slots of
//! non-PIE executables (which the linker filled without leaving a relocation), and absolute
//! code addresses in instructions that move (reported separately, for the encoder).
//!
//! Each reference is recorded with its original target; patches are computed later from the
//! address map, always from original values, so a site reached by two routes (a static
//! relocation and a dynamic one) gets the same new value twice rather than a double shift.

use std::collections::HashSet;

use rivet_arch::{Flow, Inst, Isa};
use rivet_elf::relocs::{DynRelocKind, DynamicReloc, RelocKind, StaticReloc};
use rivet_elf::{ElfFile, ElfKind, Vaddr};
use rivet_ir::{FuncId, Function, JumpTableKind, Program};

use crate::code::{AbsoluteField, AddressMap, write_absolute};

/// How a reference is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefField {
    /// The target's address, `size` bytes.
    Absolute { size: u8 },
    /// `target - base`, `size` bytes, signed.
    Relative { size: u8, base: Vaddr },
    /// `(target - anchor) >> shift`, `size` bytes, signed or not, where `anchor` is a code
    /// address that may itself have moved (AArch64 switch tables count from a label of
    /// their function).
    Scaled {
        size: u8,
        anchor: Vaddr,
        signed: bool,
        shift: u8,
    },
    /// The PC-relative field of the instruction at the site (`inst`, in code that stays),
    /// re-encoded: AArch64 branches, whose offsets are bits of the instruction word.
    Instruction { inst: Inst },
    /// The addend of the `Elf64_Rela` at `entry` (and, when the linker also stored the value
    /// at the relocated site, that word too).
    RelaAddend {
        entry: Vaddr,
        site_holds_value: bool,
    },
}

/// One stored reference to a code address outside rewritten instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reference {
    pub site: Vaddr,
    pub target: Vaddr,
    pub field: RefField,
}

/// All references the rewrite must follow.
#[derive(Clone, Debug, Default)]
pub struct References {
    pub stored: Vec<Reference>,
    /// Absolute code addresses inside instructions of rewritten functions, sorted by site.
    pub in_moved_code: Vec<AbsoluteField>,
    /// Instructions of rewritten functions that build a code address in parts (AArch64's
    /// ADRP and the ADD or load that completes it), with the address: each part is
    /// re-encoded for the address's new place. Sorted by site.
    pub parts_in_moved_code: Vec<(Vaddr, Vaddr)>,
}

/// Sections whose contents are regenerated, not patched.
fn is_regenerated(name: &str) -> bool {
    matches!(name, ".eh_frame" | ".eh_frame_hdr" | ".gcc_except_table")
        || name.starts_with(".debug")
}

/// The value of a relocated field: 8 bytes, 4 zero-extended, or 4 sign-extended.
fn read_field(elf: &ElfFile<'_>, site: Vaddr, kind: RelocKind) -> Option<u64> {
    Some(match kind {
        RelocKind::Absolute { size: 8, .. } | RelocKind::PcRelative { size: 8 } => {
            elf.read_u64(site)?
        }
        RelocKind::Absolute {
            size: 4,
            signed: false,
        } => u64::from(elf.read_u32(site)?),
        _ => elf.read_i32(site)? as i64 as u64,
    })
}

/// Collects the references of `program` given which functions are rewritten.
pub fn collect(
    elf: &ElfFile<'_>,
    program: &Program,
    is_rewritten: &(dyn Fn(FuncId) -> bool + Sync),
    statics: &[StaticReloc],
    dynamics: &[DynamicReloc<'_>],
) -> References {
    let mut out = References::default();
    let rewritten = |addr: Vaddr| {
        program
            .function_containing(addr)
            .filter(|f| is_rewritten(f.id))
    };

    // What the loader writes at each RELATIVE/IRELATIVE site: at run time that word is the
    // dynamic relocation's, whatever a static relocation of the same site says. The two agree
    // in a linked file; where a corrupt one makes them disagree, the static one is left out
    // (patching both would write two values to one word).
    let dynamic_targets: std::collections::HashMap<Vaddr, Vaddr> = dynamics
        .iter()
        .filter(|d| matches!(d.kind, DynRelocKind::Relative | DynRelocKind::Irelative))
        .map(|d| (d.site, Vaddr(d.addend as u64)))
        .collect();

    // Jump tables of rewritten functions: their entries are rewritten from the discovered
    // targets, and their sites must not be patched again from (possibly inexact) relocations.
    // A table that several jumps share (a threaded interpreter's, one per dispatch site) is
    // patched once.
    let mut table_sites: HashSet<Vaddr> = HashSet::new();
    let mut patched: HashSet<(Vaddr, Vaddr)> = HashSet::new();
    for f in &program.functions {
        for t in &f.jump_tables {
            for (i, target) in t.entries.iter().enumerate() {
                let site = t.addr + (i as u64) * u64::from(t.entry_size);
                table_sites.insert(site);
                if !is_rewritten(f.id) || !patched.insert((site, *target)) {
                    continue;
                }
                let field = match t.kind {
                    JumpTableKind::Absolute => RefField::Absolute { size: t.entry_size },
                    JumpTableKind::Relative { base } => RefField::Relative {
                        size: t.entry_size,
                        base,
                    },
                    JumpTableKind::Scaled {
                        anchor,
                        signed,
                        shift,
                    } => RefField::Scaled {
                        size: t.entry_size,
                        anchor,
                        signed,
                        shift,
                    },
                };
                out.stored.push(Reference {
                    site,
                    target: *target,
                    field,
                });
            }
        }
    }

    // Sites of relocated fields in code that stays: the decoded branches those cover are
    // patched from their relocations, not again from the decoded instruction.
    let mut code_reloc_sites: HashSet<Vaddr> = HashSet::new();
    // One pass over the code that stays (in parallel, decoding released functions again):
    // the instruction holding each relocated site, and the branches into rewritten code.
    let stay = StayingCode::read(elf, program, is_rewritten, statics);
    for r in statics {
        let Some(section) = elf.section(r.target_section) else {
            continue;
        };
        if is_regenerated(&section.name) || r.symbol_is_undefined && r.symbol == 0 {
            continue;
        }
        if r.kind == RelocKind::AddressPart
            && section.is_exec()
            && rewritten(r.site).is_some()
            && elf.is_code_address(r.symbol_plus_addend())
        {
            out.parts_in_moved_code
                .push((r.site, r.symbol_plus_addend()));
            continue;
        }
        let Some(size) = r.field_size() else { continue };
        if section.is_exec() {
            if rewritten(r.site).is_some() {
                // A field of an instruction that moves: PC-relative ones are recomputed by the
                // encoder from the decoded instruction; absolute code addresses are reported.
                if r.is_absolute()
                    && let Some(value) = read_field(elf, r.site, r.kind)
                    && elf.is_code_address(Vaddr(value))
                {
                    out.in_moved_code.push(AbsoluteField {
                        site: r.site,
                        size,
                        value: Vaddr(value),
                    });
                }
                continue;
            }
            code_reloc_sites.insert(r.site);
            // Code that stays. PC-relative fields in instructions: the target is relative to
            // the end of the instruction, which the decoded function (if any) tells exactly.
            let pc_relative = matches!(
                r.kind,
                RelocKind::PcRelative { .. } | RelocKind::GotPcRelative { .. }
            );
            if pc_relative && size == 4 {
                let Some(value) = elf.read_i32(r.site) else {
                    continue;
                };
                let inst = stay.instruction_at(r.site);
                // In a decoded instruction, the relocation must sit on its PC-relative field;
                // anywhere else the linker rewrote the code under it (a relaxed TLS sequence),
                // and patching it would corrupt the instruction now there.
                if inst.is_some_and(|i| !i.field_at_site) {
                    continue;
                }
                let end = inst.map_or(r.site + 4, |i| i.end);
                let target = end.offset(i64::from(value));
                out.stored.push(Reference {
                    site: r.site,
                    target,
                    field: RefField::Relative { size: 4, base: end },
                });
            } else if r.is_absolute()
                && let Some(value) = read_field(elf, r.site, r.kind)
            {
                out.stored.push(Reference {
                    site: r.site,
                    target: Vaddr(value),
                    field: RefField::Absolute { size },
                });
            }
            continue;
        }
        if table_sites.contains(&r.site) {
            continue;
        }
        // Data. A site no section or segment of the file holds (only a corrupt relocation
        // has one) has no bytes to patch, and nothing reads them at run time.
        if elf.bytes_at(r.site, u64::from(size)).is_none() {
            continue;
        }
        if dynamic_targets
            .get(&r.site)
            .is_some_and(|&t| t != r.symbol_plus_addend())
        {
            continue;
        }
        if r.is_absolute() {
            out.stored.push(Reference {
                site: r.site,
                target: r.symbol_plus_addend(),
                field: RefField::Absolute { size },
            });
        } else if r.is_pc_relative()
            // `S + A` is the referenced address only for `sym - .`; for `label - base` (the
            // entries of relative tables no analysis claimed) it is off by the distance to the
            // base. Patch only what is certainly a function's address; anything else keeps
            // pointing at the original code, which stays in place and still works.
            && program
                .function_containing(r.symbol_plus_addend())
                .is_some_and(|f| f.range.start == r.symbol_plus_addend())
        {
            out.stored.push(Reference {
                site: r.site,
                target: r.symbol_plus_addend(),
                field: RefField::Relative { size, base: r.site },
            });
        }
    }

    out.stored.extend(
        stay.branches
            .into_iter()
            .filter(|(field, _)| !code_reloc_sites.contains(field))
            .map(|(_, reference)| reference),
    );

    let mut dynamic_sites = HashSet::new();
    for d in dynamics {
        dynamic_sites.insert(d.site);
        if !matches!(d.kind, DynRelocKind::Relative | DynRelocKind::Irelative) {
            continue;
        }
        let target = Vaddr(d.addend as u64);
        match d.entry {
            Some(entry) => out.stored.push(Reference {
                site: d.site,
                target,
                field: RefField::RelaAddend {
                    entry,
                    site_holds_value: elf.read_u64(d.site) == Some(target.get()),
                },
            }),
            // RELR: the addend is the word at the site.
            None => out.stored.push(Reference {
                site: d.site,
                target,
                field: RefField::Absolute { size: 8 },
            }),
        }
    }

    // Non-PIE executables: the linker fills GOT slots of local functions with their address
    // and leaves no relocation for them.
    if elf.kind == ElfKind::Executable
        && let Some(got) = elf.section_by_name(".got")
    {
        for (i, word) in got.data.chunks_exact(8).enumerate() {
            let site = got.addr + (i * 8) as u64;
            let value = Vaddr(u64::from_le_bytes(word.try_into().unwrap()));
            if dynamic_sites.contains(&site) {
                continue;
            }
            if let Some(f) = rewritten(value)
                && f.range.start == value
            {
                out.stored.push(Reference {
                    site,
                    target: value,
                    field: RefField::Absolute { size: 8 },
                });
            }
        }
    }
    out.in_moved_code.sort_by_key(|a| a.site);
    out.in_moved_code.dedup();
    out.parts_in_moved_code.sort();
    out.parts_in_moved_code.dedup();
    out
}

/// What the code that stays (every function not rewritten) tells about references, read in
/// one parallel pass, each function's instructions decoded once (again, for the functions
/// whose model `optimize` released: `Function::instructions`).
#[derive(Default)]
struct StayingCode {
    /// The instruction of code that stays holding each static relocation's site there, by
    /// site. Sites no instruction covers are left out.
    site_insts: Vec<SiteInstruction>,
    /// Branches into rewritten code (`branches_into_rewritten_code`), in function order,
    /// each with its field: those whose field a relocation covers are left out by the caller.
    branches: Vec<(Vaddr, Reference)>,
}

impl StayingCode {
    fn read(
        elf: &ElfFile<'_>,
        program: &Program,
        is_rewritten: &(dyn Fn(FuncId) -> bool + Sync),
        statics: &[StaticReloc],
    ) -> StayingCode {
        use rayon::prelude::*;
        // `statics` is sorted by site.
        let per_function: Vec<StayingCode> = program
            .functions
            .par_iter()
            .filter(|f| !is_rewritten(f.id))
            .map(|f| {
                let from = statics.partition_point(|r| r.site < f.range.start);
                let to = statics.partition_point(|r| r.site < f.range.end);
                let sites = &statics[from..to];
                let wants_branches = f.is_simple();
                if sites.is_empty() && !wants_branches {
                    return StayingCode::default();
                }
                let insts = f.instructions(elf);
                let mut site_insts = Vec::new();
                for r in sites {
                    // The function the rest of the rewrite takes the site to be in.
                    if program.function_containing(r.site).map(|g| g.id) != Some(f.id) {
                        continue;
                    }
                    // The last instruction starting at or before the site, as in the model.
                    let i = insts.partition_point(|i| i.addr() <= r.site);
                    if let Some(inst) = i.checked_sub(1).map(|i| insts[i])
                        && inst.end() > r.site
                    {
                        site_insts.push(SiteInstruction {
                            site: r.site,
                            end: inst.end(),
                            field_at_site: inst.pc_relative_field() == Some(r.site),
                        });
                    }
                }
                let branches = if wants_branches {
                    branches_into_rewritten_code(program, f, &insts, is_rewritten)
                } else {
                    Vec::new()
                };
                StayingCode {
                    site_insts,
                    branches,
                }
            })
            .collect();
        let mut site_insts = Vec::new();
        let mut branches = Vec::new();
        for one in per_function {
            site_insts.extend(one.site_insts);
            branches.extend(one.branches);
        }
        site_insts.sort_by_key(|i| i.site);
        site_insts.dedup_by_key(|i| i.site);
        StayingCode {
            site_insts,
            branches,
        }
    }

    fn instruction_at(&self, site: Vaddr) -> Option<SiteInstruction> {
        self.site_insts
            .binary_search_by_key(&site, |i| i.site)
            .ok()
            .map(|k| self.site_insts[k])
    }
}

/// What the rewrite needs of the instruction covering a relocated site in code that stays
/// (24 bytes where the instruction takes 40: a large program has millions of such sites).
#[derive(Clone, Copy, Debug)]
struct SiteInstruction {
    site: Vaddr,
    /// Where the instruction ends: the base of a PC-relative field.
    end: Vaddr,
    /// The instruction's PC-relative field starts at the site.
    field_at_site: bool,
}

/// Direct branches and calls of `f` (code that stays, `insts` its instructions) whose target
/// lies in a rewritten function; the caller keeps those whose field no relocation covers:
/// the assembler resolved a branch to a local label of
/// another function, as perlasm's `je .Lsqr8x_enter` from OpenSSL's `bn_mul_mont` into the
/// second instruction of `bn_sqr8x_mont`. Sent to the new code, they run what the rewrite
/// made (optimized, and counted when instrumented) instead of the old body.
///
/// Only instructions of reachable blocks of modelled functions are patched: in a skipped
/// function, a linear sweep may have decoded data as a branch, and rewriting it would corrupt
/// the data. A short (rel8) branch cannot reach new text either. Those keep entering the old
/// body, which stays intact wherever another entry lies (`old_entry_is_free`), so they
/// still run the original code.
fn branches_into_rewritten_code(
    program: &Program,
    f: &Function,
    insts: &[Inst],
    is_rewritten: &(dyn Fn(FuncId) -> bool + Sync),
) -> Vec<(Vaddr, Reference)> {
    let mut found = Vec::new();
    for inst in f.reachable_insts(insts) {
        let (Flow::Jump { target } | Flow::CondJump { target } | Flow::Call { target }) =
            inst.flow()
        else {
            continue;
        };
        let Some(field) = inst.pc_relative_field() else {
            continue;
        };
        if !program
            .function_containing(target)
            .is_some_and(|g| is_rewritten(g.id))
        {
            continue;
        }
        // An x86-64 branch's field is its last 4 bytes; an AArch64 one is bits of the
        // instruction word, re-encoded whole.
        let field_kind = match inst.isa() {
            Isa::X86_64 => RefField::Relative {
                size: 4,
                base: inst.end(),
            },
            Isa::Aarch64 => RefField::Instruction { inst: *inst },
        };
        found.push((
            field,
            Reference {
                site: field,
                target,
                field: field_kind,
            },
        ));
    }
    found
}

/// Whether a forwarding jump of `len` bytes may be written over the old entry of `f`, a
/// rewritten function: no other way into the old body lands within those bytes. A
/// secondary entry there (a branch the rewrite could not send to the new code, or one it did
/// not see in code it did not model), a landing pad, a label whose address is taken or any
/// stored reference would land inside the jump's displacement. The old body is left intact
/// instead: it is the original code, so whatever enters it still runs correctly, only not
/// the rewritten copy. `reference_targets` is sorted.
pub fn old_entry_is_free(f: &Function, len: u64, reference_targets: &[Vaddr]) -> bool {
    let start = f.range.start;
    let first = reference_targets.partition_point(|&t| t <= start);
    let referenced = reference_targets
        .get(first)
        .is_some_and(|&t| t < start + len);
    !referenced && !is_entered_within(f, len)
}

/// Whether something of `f` itself enters it within its first `len` bytes, past its entry: a
/// secondary entry, a landing pad or a label whose address is taken.
pub fn is_entered_within(f: &Function, len: u64) -> bool {
    let start = f.range.start;
    let covered = |a: Vaddr| a > start && a < start + len;
    f.secondary_entries.iter().any(|&e| covered(e))
        || f.blocks
            .iter()
            .any(|b| (b.is_entry || b.is_landing_pad || b.is_address_taken) && covered(b.start))
}

/// Outcome of turning references into patches.
#[derive(Clone, Debug, Default)]
pub struct Patches {
    pub patches: Vec<(Vaddr, Vec<u8>)>,
    /// References left alone, and why: they point into rewritten code but not at an
    /// instruction, or their field cannot hold the new target. Either way the old body they
    /// point into is still there (a moved entry forwards to the new copy); reported.
    pub unmapped: Vec<(Reference, Unpatched)>,
    /// Table entries whose new target is out of their field's reach from the table's new
    /// anchor. Unlike an unmapped reference, such an entry cannot be left alone (the anchor
    /// moved): the rewrite fails, naming it.
    pub unencodable: Vec<Reference>,
}

/// Why a reference to moved code was left pointing at the old code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unpatched {
    /// The target is inside rewritten code but is no instruction of it.
    NotAnInstruction,
    /// The field (a relative offset, an absolute field or an instruction's immediate) cannot
    /// reach the target's new address from where it is.
    OutOfReach,
}

impl std::fmt::Display for Unpatched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unpatched::NotAnInstruction => "not an instruction of rewritten code",
            Unpatched::OutOfReach => "the new address is beyond the field's reach",
        })
    }
}

/// The entry of a scaled table that sends its dispatch to `target` from `anchor`, or `None`
/// when the distance is not a multiple of the scale or does not fit the field.
fn scaled_entry(
    target: Vaddr,
    anchor: Vaddr,
    size: u8,
    signed: bool,
    shift: u8,
) -> Option<Vec<u8>> {
    let distance = target.get().wrapping_sub(anchor.get()) as i64;
    if distance & ((1i64 << shift) - 1) != 0 {
        return None;
    }
    let value = distance >> shift;
    let bits = u32::from(size) * 8;
    let fits = if signed {
        value >= -(1i64 << (bits - 1)) && value < 1i64 << (bits - 1)
    } else {
        value >= 0 && (bits >= 64 || value < 1i64 << bits)
    };
    fits.then(|| value.to_le_bytes()[..usize::from(size)].to_vec())
}

/// Patches for every stored reference whose target moved.
pub fn patches(program: &Program, refs: &References, map: &AddressMap) -> Patches {
    let mut out = Patches::default();
    for r in &refs.stored {
        let Some(new) = map.translate(program, r.target) else {
            out.unmapped.push((*r, Unpatched::NotAnInstruction));
            continue;
        };
        if new == r.target {
            continue;
        }
        match r.field {
            RefField::Absolute { size } => {
                let mut bytes = vec![0u8; size as usize];
                if write_absolute(&mut bytes, size, new).is_some() {
                    out.patches.push((r.site, bytes));
                } else {
                    out.unmapped.push((*r, Unpatched::OutOfReach));
                }
            }
            RefField::Relative { size, base } => {
                let value = new.get().wrapping_sub(base.get()) as i64;
                match size {
                    4 => match i32::try_from(value) {
                        Ok(v) => out.patches.push((r.site, v.to_le_bytes().to_vec())),
                        Err(_) => out.unmapped.push((*r, Unpatched::OutOfReach)),
                    },
                    8 => out.patches.push((r.site, value.to_le_bytes().to_vec())),
                    _ => out.unmapped.push((*r, Unpatched::OutOfReach)),
                }
            }
            RefField::Scaled {
                size,
                anchor,
                signed,
                shift,
            } => {
                let Some(new_anchor) = map.translate(program, anchor) else {
                    out.unmapped.push((*r, Unpatched::NotAnInstruction));
                    continue;
                };
                match scaled_entry(new, new_anchor, size, signed, shift) {
                    Some(bytes) => out.patches.push((r.site, bytes)),
                    None => out.unencodable.push(*r),
                }
            }
            RefField::Instruction { inst } => {
                let mut bytes = Vec::new();
                match inst
                    .isa()
                    .relocate(&inst, &[], inst.addr(), Some(new), &mut bytes)
                {
                    Ok(()) => out.patches.push((r.site, bytes)),
                    // Out of reach: the old body it enters is still there and still runs.
                    Err(_) => out.unmapped.push((*r, Unpatched::OutOfReach)),
                }
            }
            RefField::RelaAddend {
                entry,
                site_holds_value,
            } => {
                // r_offset (8), r_info (8), r_addend (8).
                out.patches
                    .push((entry + 16, (new.get() as i64).to_le_bytes().to_vec()));
                if site_holds_value {
                    out.patches.push((r.site, new.get().to_le_bytes().to_vec()));
                }
            }
        }
    }
    out
}
