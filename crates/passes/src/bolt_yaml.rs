//! BOLT's YAML profile (`llvm-bolt -w`, `perf2bolt --profile-format=yaml`) put on the binary
//! it was taken on, as an address-keyed [`Profile`] that `attach` (and stale matching) use like
//! any other.
//!
//! YAML counts blocks by BOLT's block index (`bid`), whose numbering (DFS or layout order over
//! BOLT's own CFG) Rivet does not reproduce. It does not need to: the low 16 bits of a block's
//! `hash` are the block's offset in its function. BOLT's blended block hash packs the offset in
//! its lowest field (seen in every YAML llvm-bolt-19 writes: the first block's hash ends in
//! `0000`, the others in their offsets). So each block is placed by that offset, and checked:
//! a block of the binary must start there. In a function of 64 KiB or more the offset is
//! known modulo 65536 only, and a block is placed when exactly one block start fits.
//!
//! From a placed block, its successor edges become branch records from the block's last
//! instruction (BOLT's `insns` says how many instructions the block has: where Rivet's CFG
//! splits one of BOLT's blocks, the records leave from the last piece) to the successor's
//! start; its call sites become call records from `offset + off`; a function's entries from
//! outside (its `exec` less the calls the profile saw) come from `[unknown]`. Blocks that
//! cannot be placed lose their counts, which the result says.

use std::collections::HashMap;

use rivet_ir::{Function, Program, Terminator};
use rivet_profile::model::Origin;
use rivet_profile::yaml::YamlProfile;
use rivet_profile::{Location, Mode, Profile};

use crate::attach::NameIndex;

/// A YAML profile put on the binary.
#[derive(Clone, Debug)]
pub struct Converted {
    pub profile: Profile,
    /// Blocks with counts in the YAML, and how many of them were placed.
    pub blocks: u64,
    pub placed: u64,
    /// Edges and calls left out because a block could not be placed, and their count.
    pub lost_records: u64,
    pub lost_count: u64,
}

/// Why a YAML profile cannot be put on a binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum YamlError {
    /// Only branch (LBR or instrumentation) YAML profiles carry edges.
    NotBranches,
}

impl std::fmt::Display for YamlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            YamlError::NotBranches => f.write_str(
                "the YAML profile holds no branch counts (its profile-flags lack `lbr`)",
            ),
        }
    }
}

/// The offset of the block whose BOLT hash is `hash` in `f`, if a block of `f` starts there.
fn place(f: &Function, hash: u64) -> Option<u64> {
    let low = hash & 0xffff;
    let size = f.range.end.get() - f.range.start.get();
    let mut fits = f
        .blocks
        .iter()
        .map(|b| b.start.get() - f.range.start.get())
        .filter(|&o| {
            if size <= 0x10000 {
                o == low
            } else {
                o & 0xffff == low
            }
        });
    let first = fits.next()?;
    fits.next().is_none().then_some(first)
}

/// The offset of the last instruction of BOLT's block of `insns` instructions starting at
/// `offset`: Rivet's blocks from there, following fall-throughs until they hold as many.
fn last_instruction(f: &Function, offset: u64, insns: u32) -> u64 {
    let start = f.range.start;
    let Some(mut b) = f.block_at(start + offset) else {
        return offset;
    };
    let mut seen = 0u32;
    loop {
        let block = f.block(b);
        seen += block.insts.end - block.insts.start;
        let last = f
            .block_insts(block)
            .last()
            .map_or(block.start, |i| i.addr());
        let next = f.block_insts(block).last().map(|i| i.end());
        let falls = block.terminator == Terminator::FallThrough;
        match next.and_then(|n| f.block_at(n)) {
            Some(n) if falls && seen < insns => b = n,
            _ => return last.get() - start.get(),
        }
    }
}

/// Puts `yaml` on `program` (see the module doc). Functions the binary lacks keep their
/// entries, under their names, so that `attach` reports them.
pub fn from_bolt_yaml(
    program: &Program,
    names: &[String],
    yaml: &YamlProfile,
) -> Result<Converted, YamlError> {
    if !yaml.header.flags.lbr {
        return Err(YamlError::NotBranches);
    }
    let index = NameIndex::new(program, names);
    let mut profile = Profile::new(Mode::Branches);
    profile.build_id = (!yaml.header.build_id.is_empty()).then(|| yaml.header.build_id.clone());
    profile.binary_name = Some(yaml.header.binary_name.clone());
    profile.origin = Origin::Lbr;
    let by_fid: HashMap<u32, &str> = yaml
        .functions
        .iter()
        .map(|f| (f.fid, f.name.as_str()))
        .collect();
    let mut called: HashMap<&str, u64> = HashMap::new();
    let (mut blocks, mut placed) = (0u64, 0u64);
    let (mut lost_records, mut lost_count) = (0u64, 0u64);
    for yf in &yaml.functions {
        let func = index.get(&yf.name).map(|f| program.function(f));
        // bid -> (start offset, offset of the last instruction)
        let mut where_: HashMap<u32, (u64, u64)> = HashMap::new();
        for b in &yf.blocks {
            let at = func.and_then(|f| place(f, b.hash).map(|o| (f, o)));
            if let Some((f, o)) = at {
                where_.insert(b.bid, (o, last_instruction(f, o, b.insns)));
            }
        }
        for b in &yf.blocks {
            let counted = b.exec > 0 || b.succ.iter().any(|s| s.cnt > 0);
            blocks += u64::from(counted);
            let Some(&(start, last)) = where_.get(&b.bid) else {
                for count in b
                    .succ
                    .iter()
                    .map(|s| s.cnt)
                    .chain(b.calls.iter().map(|c| c.cnt))
                {
                    lost_records += u64::from(count > 0);
                    lost_count += count;
                }
                continue;
            };
            placed += u64::from(counted);
            for s in &b.succ {
                if s.cnt == 0 && s.mis == 0 {
                    continue;
                }
                if let Some(&(to, _)) = where_.get(&s.bid) {
                    profile.add_branch(
                        Location::symbol(&yf.name, last),
                        Location::symbol(&yf.name, to),
                        s.cnt,
                        s.mis,
                    );
                } else {
                    lost_records += 1;
                    lost_count += s.cnt;
                }
            }
            for c in &b.calls {
                let Some(&callee) = by_fid.get(&c.fid) else {
                    continue;
                };
                *called.entry(callee).or_default() += c.cnt;
                profile.add_branch(
                    Location::symbol(&yf.name, start + u64::from(c.off)),
                    Location::symbol(callee, 0),
                    c.cnt,
                    c.mis,
                );
            }
        }
    }
    for yf in &yaml.functions {
        let outside = yf
            .exec
            .saturating_sub(called.get(yf.name.as_str()).copied().unwrap_or(0));
        if outside > 0 {
            profile.add_branch(
                Location::unknown(),
                Location::symbol(&yf.name, 0),
                outside,
                0,
            );
        }
    }
    Ok(Converted {
        profile,
        blocks,
        placed,
        lost_records,
        lost_count,
    })
}
