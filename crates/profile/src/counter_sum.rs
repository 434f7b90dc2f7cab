//! Summed counter files: runs of one instrumented binary added counter by counter into one
//! counter file (`rivet merge --format counters`), with no map decoded and no profile built.
//!
//! **What a summed file means.** It holds the counters of one process that ran all the runs
//! (each `weight` times): every edge counter is the sum of the runs', and every indirect call
//! site's table holds each target once with the sum of its counts over the runs, whatever pair
//! each run gave it, and the sum of the counts the runs could not place (the overflow pair).
//! Targets outside the instrumented binary's segments (a shared library's functions, whose
//! recorded addresses differ from run to run with address randomisation, and which no profile
//! can name) are counted with the unplaced ones, so that a site does not collect one target
//! per run.
//!
//! Read back ([`crate::counters::CounterFile`], `rivet merge`, `optimize`, `report`, ...), it
//! gives the profile of those summed counters. That is not always the sum of the runs'
//! profiles, by definition and not by accident: where a target of indirect jumps (a computed
//! goto) can be reached from several jumps, its count is split among them in proportion to
//! the jumps' counts, with rounding, and proportions of a sum are not sums of proportions.
//! Everything else (edges, calls, entries, site targets) is linear in the counters, so it adds.
//!
//! **Exact, associative, commutative.** Counts are added exactly or not at all: a sum that
//! does not fit 64 bits is an error ([`SumError::Overflow`]), never clamped, since a clamped
//! counter breaks the flow every other count is solved from; weights are whole numbers for the
//! same reason (the caller refuses fractions). A site table is written in one canonical form,
//! a function of its targets' summed counts alone: targets in increasing order, the first
//! [`SITE_TARGETS`] in the table, the rest spilled after the counters (so no target in the
//! binary is ever dropped), the unplaced count in the overflow pair. So the bytes of a sum do not depend on
//! the order or the grouping of its inputs.
//!
//! **Which words are site tables** is a property of the instrumentation, never of the counts
//! (deciding it per run would make the result depend on the grouping): `rivet instrument`
//! numbers every function's edge counters first and puts the site tables after them, up to the
//! last counter ([`SumPlan`]). The plan is read from the binary's
//! [`crate::counters::SITES_SECTION`] (40 bytes that record it, checked against their hash and
//! tied to the map by its hash); for binaries instrumented before that section, from the map
//! index (the end of the edge counters is the greatest `counters_end` of its entries; the
//! section is streamed and checked against its hash: 12 MB at 50 MB of code, a quarter of the
//! sum's time), or, before the index, from the whole map. All three give the same plan. The
//! words between the last edge counter of a function in the map and the first table (edge
//! counters of functions the instrumentation dropped, always zero) are grouped into tables
//! from the end too, which keeps every real table aligned.
//!
//! **Streaming.** The sum is built a chunk ([`CHUNK_WORDS`] counters) at a time, reading that
//! chunk of each input in turn into one buffer, and written as it is done: memory is a few
//! chunks and the spilled targets, whatever the number of inputs or counters. Every input
//! stays open meanwhile.

use std::io::{Read, Seek, SeekFrom, Write};

use crate::counters::{
    CounterArch, CounterLayout, CounterMap, CountersError, HEADER_SIZE, INDEX_HEADER, INDEX_MAGIC,
    INFERRED, MAGIC, SITE_TARGETS, SITE_WORDS, SPILL_ENTRY, SpilledTarget, VERSION_SUMMED,
};

/// Counters read from each input at a time (a multiple of [`SITE_WORDS`], so that a chunk of
/// the site tables holds whole tables): 128 KiB.
pub const CHUNK_WORDS: usize = 16 * 1024;

/// Where the site tables of an instrumentation lie: words `tables..counter_count`, in tables of
/// [`SITE_WORDS`]; every word before `tables` is a plain counter. `code` spans the
/// instrumented binary's loadable segments (link-time addresses): a recorded target outside it
/// is in another module (a shared library), which no profile can name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SumPlan {
    pub counter_count: usize,
    pub tables: usize,
    pub code: std::ops::Range<u64>,
}

/// Why runs cannot be summed.
#[derive(Debug, thiserror::Error)]
pub enum SumError {
    /// Input `input` (from 0) made counter `counter` pass 2^64 - 1.
    #[error("the sum of counter {counter} does not fit 64 bits")]
    Overflow { input: usize, counter: usize },
    #[error("{error}")]
    Read { input: usize, error: std::io::Error },
    #[error("{0}")]
    Write(std::io::Error),
}

impl SumPlan {
    /// The plan of `counter_count` counters whose edge counters end at `edge_end`: the tables
    /// are the whole [`SITE_WORDS`]-word groups between it and the end, counted from the end.
    pub fn from_edge_end(edge_end: usize, counter_count: usize) -> SumPlan {
        let words = counter_count.saturating_sub(edge_end);
        SumPlan {
            counter_count,
            tables: counter_count - words / SITE_WORDS as usize * SITE_WORDS as usize,
            code: 0..u64::MAX,
        }
    }

    /// The plan of a decoded map (a binary without an index). Every site table the map names
    /// must be one of the plan's: otherwise the map does not come from `rivet instrument`.
    pub fn from_map(map: &CounterMap) -> Result<SumPlan, CountersError> {
        let edge_end = map
            .functions
            .iter()
            .flat_map(|f| f.edges.iter())
            .filter(|e| e.counter != INFERRED)
            .map(|e| e.counter as usize + 1)
            .max()
            .unwrap_or(0);
        let plan = SumPlan::from_edge_end(edge_end, map.counter_count as usize);
        let tables = map
            .functions
            .iter()
            .flat_map(|f| f.indirect.iter().map(|&(_, t)| t as usize));
        for t in tables {
            if !plan.is_table(t) {
                return Err(CountersError::Malformed(format!(
                    "the indirect call table at counter {t} lies among the edge counters"
                )));
            }
        }
        Ok(plan)
    }

    /// The plan from the map index (`section`, [`crate::counters::INDEX_SECTION`]'s contents,
    /// streamed), checked against its header, its hash and the counter count; `Err` holds why
    /// the index cannot be trusted.
    pub fn from_index(
        mut section: impl Read,
        section_len: u64,
        map_hash: u64,
        counter_count: usize,
    ) -> Result<SumPlan, String> {
        let short = |_| "it ends early".to_string();
        let mut head = [0u8; INDEX_HEADER];
        section.read_exact(&mut head).map_err(short)?;
        let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        if &head[..8] != INDEX_MAGIC {
            return Err("no RIVETIDX header".into());
        }
        if u64_at(&head, 16) != map_hash {
            return Err(format!(
                "it indexes another map (map hash {:016x}, the map's is {map_hash:016x})",
                u64_at(&head, 16)
            ));
        }
        let body_len = u64_at(&head, 24);
        if body_len != section_len.saturating_sub(INDEX_HEADER as u64) || body_len < 20 {
            return Err("its size is not the one it records".into());
        }
        let mut hash = crate::counters::FNV_OFFSET;
        let mut buf = vec![0u8; 20];
        section.read_exact(&mut buf).map_err(short)?;
        hash = crate::counters::fnv1a_from(hash, &buf);
        let count = u32_at(&buf, 16) as u64;
        let mut left = body_len - 20;
        if count.saturating_mul(crate::counters::INDEX_ENTRY as u64) > left {
            return Err("its table is longer than the section".into());
        }
        // The entries, whole ones a chunk at a time, then the names (only hashed here).
        let entry = crate::counters::INDEX_ENTRY;
        let per_chunk = (1 << 16) / entry;
        let mut entries_left = count as usize;
        let mut edge_end = 0usize;
        while entries_left > 0 {
            let n = entries_left.min(per_chunk);
            buf.resize(n * entry, 0);
            section.read_exact(&mut buf).map_err(short)?;
            hash = crate::counters::fnv1a_from(hash, &buf);
            for e in buf.chunks_exact(entry) {
                let (start, end) = (u32_at(e, 28) as usize, u32_at(e, 32) as usize);
                if start > end || end > counter_count {
                    return Err("a function's counters lie outside the counters".into());
                }
                edge_end = edge_end.max(end);
            }
            entries_left -= n;
            left -= (n * entry) as u64;
        }
        while left > 0 {
            let n = left.min(1 << 16) as usize;
            buf.resize(n, 0);
            section.read_exact(&mut buf).map_err(short)?;
            hash = crate::counters::fnv1a_from(hash, &buf);
            left -= n as u64;
        }
        if hash != u64_at(&head, 8) {
            return Err("it does not match its hash".into());
        }
        Ok(SumPlan::from_edge_end(edge_end, counter_count))
    }

    /// The plan [`crate::counters::SITES_SECTION`] records (`section`, its contents), checked
    /// against its hash, the map's hash and the counter count; `Err` holds why it cannot be
    /// trusted.
    pub fn from_sites(
        section: &[u8],
        map_hash: u64,
        counter_count: usize,
    ) -> Result<SumPlan, String> {
        use crate::counters::{SITES_MAGIC, SITES_SIZE};
        if section.len() != SITES_SIZE || &section[..8] != SITES_MAGIC {
            return Err("no RIVETSIT header".into());
        }
        let u64_at = |o: usize| u64::from_le_bytes(section[o..o + 8].try_into().unwrap());
        if crate::counters::fnv1a_from(crate::counters::FNV_OFFSET, &section[..32]) != u64_at(32) {
            return Err("it does not match its hash".into());
        }
        if u64_at(8) != map_hash {
            return Err(format!(
                "it describes another map (map hash {:016x}, the map's is {map_hash:016x})",
                u64_at(8)
            ));
        }
        let (tables, count) = (u64_at(16), u64_at(24));
        if count != counter_count as u64
            || tables > count
            || !(count - tables).is_multiple_of(u64::from(SITE_WORDS))
        {
            return Err("its site tables do not fit the counters".into());
        }
        Ok(SumPlan {
            counter_count,
            tables: tables as usize,
            code: 0..u64::MAX,
        })
    }

    /// The plan of `layout`'s instrumentation, from its binary (`instrumented` when given, else
    /// the one it records): its [`crate::counters::SITES_SECTION`], else its map index, else
    /// its whole map; `code` from its program headers.
    pub fn for_layout(
        layout: &CounterLayout,
        instrumented: Option<&std::path::Path>,
    ) -> Result<SumPlan, CountersError> {
        let (binary, mut file, _) = layout.locate_map(instrumented)?;
        let code = load_span(&mut file).map_err(|e| CountersError::MapElsewhere {
            binary: binary.display().to_string(),
            hash: layout.map_hash,
            why: format!("cannot be read ({e})"),
        })?;
        let mut plan = SumPlan::tables_for(layout, &binary, &mut file)?;
        plan.code = code;
        Ok(plan)
    }

    /// [`SumPlan::for_layout`] without `code`, from `file`, the binary at `binary`.
    fn tables_for(
        layout: &CounterLayout,
        binary: &std::path::Path,
        mut file: &mut std::fs::File,
    ) -> Result<SumPlan, CountersError> {
        let instrumented = Some(binary);
        let damaged = |why: String| CountersError::BadIndex {
            binary: binary.display().to_string(),
            why,
        };
        let counter_count = layout.counters.len() / 8;
        let bad_sites = |why: String| CountersError::BadSites {
            binary: binary.display().to_string(),
            why,
        };
        if let Some((offset, size)) =
            crate::counters::find_section(&mut file, crate::counters::SITES_SECTION)
                .map_err(|e| bad_sites(e.to_string()))?
        {
            let mut section = vec![0u8; (size as usize).min(crate::counters::SITES_SIZE + 1)];
            file.seek(SeekFrom::Start(offset))
                .and_then(|_| file.read_exact(&mut section))
                .map_err(|e| bad_sites(e.to_string()))?;
            return SumPlan::from_sites(&section, layout.map_hash, counter_count)
                .map_err(bad_sites);
        }
        match crate::counters::find_section(&mut file, crate::counters::INDEX_SECTION)
            .map_err(|e| damaged(e.to_string()))?
        {
            Some((offset, size)) => {
                file.seek(SeekFrom::Start(offset))
                    .map_err(|e| damaged(e.to_string()))?;
                let stream = std::io::BufReader::with_capacity(1 << 16, (&mut file).take(size));
                SumPlan::from_index(stream, size, layout.map_hash, counter_count).map_err(damaged)
            }
            None => {
                let (_, stream) = layout.open_map(instrumented)?;
                SumPlan::from_map(&layout.decode_map_from(stream)?)
            }
        }
    }

    /// Whether word `word` starts a site table of this plan.
    pub fn is_table(&self, word: usize) -> bool {
        word >= self.tables
            && word < self.counter_count
            && (word - self.tables).is_multiple_of(SITE_WORDS as usize)
    }
}

/// The span of the loadable segments of the ELF file `file` (from the lowest segment's start to
/// the highest's end); everything when it has none or is no 64-bit little-endian ELF file (the
/// map was found in it, so it is one).
fn load_span(file: &mut std::fs::File) -> std::io::Result<std::ops::Range<u64>> {
    const PT_LOAD: u32 = 1;
    let mut ehdr = [0u8; 64];
    file.seek(SeekFrom::Start(0))?;
    file.read_exact(&mut ehdr)?;
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap());
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (
        u64_at(&ehdr, 0x20),
        u16_at(&ehdr, 0x36),
        u16_at(&ehdr, 0x38),
    );
    if &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 || ehdr[5] != 1 || phentsize < 56 {
        return Ok(0..u64::MAX);
    }
    let mut table = vec![0u8; usize::from(phentsize) * usize::from(phnum)];
    file.seek(SeekFrom::Start(phoff))?;
    file.read_exact(&mut table)?;
    let (lo, hi) = table
        .chunks_exact(usize::from(phentsize))
        .filter(|p| u32_at(p, 0) == PT_LOAD)
        .map(|p| (u64_at(p, 16), u64_at(p, 16).saturating_add(u64_at(p, 40))))
        .fold((u64::MAX, 0), |(lo, hi), (start, end)| {
            (lo.min(start), hi.max(end))
        });
    Ok(if lo < hi { lo..hi } else { 0..u64::MAX })
}

/// One run (or summed file) to add: its counters as a stream (exactly the plan's count of
/// little-endian u64, from the first), how many times it counts, and its spilled targets
/// (sorted, each of a table of the plan: [`check_spilled`]).
#[derive(Debug)]
pub struct SumInput<R> {
    pub counters: R,
    pub weight: u64,
    pub spilled: Vec<SpilledTarget>,
}

/// Checks that every spilled target of an input lies in a table of `plan`.
pub fn check_spilled(plan: &SumPlan, spilled: &[SpilledTarget]) -> Result<(), CountersError> {
    match spilled.iter().find(|s| !plan.is_table(s.table as usize)) {
        Some(s) => Err(CountersError::Malformed(format!(
            "a spilled site target names counter {}, which starts no site table",
            s.table
        ))),
        None => Ok(()),
    }
}

/// The first bytes of a summed file up to its counters (a page multiple, as the runtime's
/// files): the header of version [`VERSION_SUMMED`] with a spill count of 0 (the writer sets
/// it at the end) and `instrumented`, the binary that holds the map. `None` when the path is
/// longer than [`crate::counters::MAX_IDENTITY_PATH`].
pub fn summed_prefix(
    arch: CounterArch,
    counter_count: usize,
    map_size: usize,
    map_hash: u64,
    instrumented: &std::path::Path,
) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let path = instrumented.as_os_str().as_bytes();
    if path.is_empty() || path.len() > crate::counters::MAX_IDENTITY_PATH {
        return None;
    }
    let counters_offset = (HEADER_SIZE + 4 + path.len()).div_ceil(4096) * 4096;
    let mut out = Vec::with_capacity(counters_offset);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION_SUMMED.to_le_bytes());
    out.extend_from_slice(&arch.code().to_le_bytes());
    out.extend_from_slice(&(counters_offset as u64).to_le_bytes());
    out.extend_from_slice(&(counter_count as u64).to_le_bytes());
    out.extend_from_slice(&(map_size as u64).to_le_bytes());
    out.extend_from_slice(&map_hash.to_le_bytes());
    out.resize(HEADER_SIZE, 0);
    out.extend_from_slice(&(path.len() as u32).to_le_bytes());
    out.extend_from_slice(path);
    out.resize(counters_offset, 0);
    Some(out)
}

/// Writes the summed file of `inputs` to `out`: `prefix` ([`summed_prefix`]), the summed
/// counters a chunk at a time, the spilled targets, then the spill count into the header.
/// Returns how many targets were spilled.
pub fn write_summed<R: Read, W: Write + Seek>(
    plan: &SumPlan,
    prefix: &[u8],
    inputs: &mut [SumInput<R>],
    mut out: W,
) -> Result<u64, SumError> {
    out.write_all(prefix).map_err(SumError::Write)?;
    let mut spilled: Vec<SpilledTarget> = Vec::new();
    let mut cursors = vec![0usize; inputs.len()];
    // One chunk of the sum, and one of an input at a time: memory does not grow with the
    // number of inputs (beyond a cursor each), so a fleet's files sum in the same space.
    let mut sum: Vec<u64> = Vec::with_capacity(CHUNK_WORDS);
    let mut chunk: Vec<u8> = Vec::with_capacity(CHUNK_WORDS * 8);
    let mut tables: Vec<TableSum> = Vec::new();
    // Plain counters, then whole tables: no chunk straddles the boundary.
    for (from, to, in_tables) in [
        (0, plan.tables, false),
        (plan.tables, plan.counter_count, true),
    ] {
        let mut at = from;
        while at < to {
            let n = (to - at).min(CHUNK_WORDS);
            sum.clear();
            sum.resize(n, 0);
            tables.clear();
            if in_tables {
                tables.resize_with(n / SITE_WORDS as usize, TableSum::default);
            }
            for (i, input) in inputs.iter_mut().enumerate() {
                chunk.resize(n * 8, 0);
                input
                    .counters
                    .read_exact(&mut chunk)
                    .map_err(|error| SumError::Read { input: i, error })?;
                let words = chunk
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()));
                if in_tables {
                    let words: Vec<u64> = words.collect();
                    for (k, table) in tables.iter_mut().enumerate() {
                        let first = k * SITE_WORDS as usize;
                        let word = (at + first) as u32;
                        let mine = &words[first..first + SITE_WORDS as usize];
                        table.add(mine, input, i, &mut cursors[i], word, &plan.code)?;
                    }
                    continue;
                }
                for (k, (s, c)) in sum.iter_mut().zip(words).enumerate() {
                    *s = c
                        .checked_mul(input.weight)
                        .and_then(|c| s.checked_add(c))
                        .ok_or(SumError::Overflow {
                            input: i,
                            counter: at + k,
                        })?;
                }
            }
            for (k, table) in tables.drain(..).enumerate() {
                let first = k * SITE_WORDS as usize;
                let words = table.finish((at + first) as u32, &mut spilled)?;
                sum[first..first + SITE_WORDS as usize].copy_from_slice(&words);
            }
            chunk.clear();
            for s in &sum {
                chunk.extend_from_slice(&s.to_le_bytes());
            }
            out.write_all(&chunk).map_err(SumError::Write)?;
            at += n;
        }
    }
    for s in &spilled {
        let mut e = [0u8; SPILL_ENTRY];
        e[..8].copy_from_slice(&u64::from(s.table).to_le_bytes());
        e[8..16].copy_from_slice(&s.target.to_le_bytes());
        e[16..].copy_from_slice(&s.count.to_le_bytes());
        out.write_all(&e).map_err(SumError::Write)?;
    }
    let count = spilled.len() as u64;
    out.seek(SeekFrom::Start(48))
        .and_then(|_| out.write_all(&count.to_le_bytes()))
        .and_then(|_| out.flush())
        .map_err(SumError::Write)?;
    Ok(count)
}

/// One site table of the sum as the inputs come: every target each gave it (table pairs and
/// spilled ones, with the input, which an overflow names), and the counts none could place.
#[derive(Default)]
struct TableSum {
    targets: Vec<(u64, u64, usize)>,
    unplaced: u64,
}

impl TableSum {
    /// Adds input `i`'s table at word `table` (`words`, its [`SITE_WORDS`] words) and the
    /// targets it spilled for it (from `cursor` on, which moves past them). Targets outside
    /// `code` count as unplaced: no profile can name them, and with address randomisation
    /// every run records its own, which would otherwise pile up.
    fn add<R>(
        &mut self,
        words: &[u64],
        input: &SumInput<R>,
        i: usize,
        cursor: &mut usize,
        table: u32,
        code: &std::ops::Range<u64>,
    ) -> Result<(), SumError> {
        let times = |c: u64| {
            c.checked_mul(input.weight).ok_or(SumError::Overflow {
                input: i,
                counter: table as usize,
            })
        };
        let pairs = SITE_TARGETS as usize;
        for p in words[..2 * pairs].chunks_exact(2) {
            // A pair with no target holds counts nobody can place: like the overflow pair.
            match (p[0], p[1]) {
                (_, 0) => {}
                (target, c) if target == 0 || !code.contains(&target) => {
                    self.unplace(times(c)?, i, table)?
                }
                (target, c) => self.targets.push((target, times(c)?, i)),
            }
        }
        self.unplace(times(words[2 * pairs + 1])?, i, table)?;
        let spilled = &input.spilled;
        while *cursor < spilled.len() && spilled[*cursor].table <= table {
            let s = spilled[*cursor];
            if s.table == table && code.contains(&s.target) {
                self.targets.push((s.target, times(s.count)?, i));
            } else if s.table == table {
                self.unplace(times(s.count)?, i, table)?;
            }
            *cursor += 1;
        }
        Ok(())
    }

    fn unplace(&mut self, count: u64, input: usize, table: u32) -> Result<(), SumError> {
        self.unplaced = self.unplaced.checked_add(count).ok_or(SumError::Overflow {
            input,
            counter: table as usize,
        })?;
        Ok(())
    }

    /// The table's canonical form (targets summed and in increasing order, the first
    /// [`SITE_TARGETS`] in the table, the others appended to `spilled`, the unplaced count in
    /// the overflow pair).
    fn finish(
        mut self,
        table: u32,
        spilled: &mut Vec<SpilledTarget>,
    ) -> Result<[u64; SITE_WORDS as usize], SumError> {
        self.targets.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.targets.len());
        for (target, count, input) in self.targets {
            match merged.last_mut() {
                Some(last) if last.0 == target => {
                    last.1 = last.1.checked_add(count).ok_or(SumError::Overflow {
                        input,
                        counter: table as usize,
                    })?
                }
                _ => merged.push((target, count)),
            }
        }
        let pairs = SITE_TARGETS as usize;
        let mut words = [0u64; SITE_WORDS as usize];
        for (k, &(target, count)) in merged.iter().enumerate() {
            if k < pairs {
                words[2 * k] = target;
                words[2 * k + 1] = count;
            } else {
                spilled.push(SpilledTarget {
                    table,
                    target,
                    count,
                });
            }
        }
        words[2 * pairs + 1] = self.unplaced;
        Ok(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{CounterFile, EdgeKind, FunctionMap, MapCall, MapEdge};
    use proptest::prelude::*;

    /// Two functions: `f` (counters 0-2) with an indirect call whose table is at word 4, `g`
    /// (counter 3) with none: edge counters first, then the tables, as `rivet instrument`
    /// lays them out.
    fn map() -> CounterMap {
        let e = |from, to, kind, from_addr, to_addr, counter| MapEdge {
            from,
            to,
            kind,
            from_addr,
            to_addr,
            counter,
        };
        let f = FunctionMap {
            name: "f".into(),
            start: 0x10,
            // 0 outside, 1 = entry up to the call, 2 = after it, 3 = the loop block.
            vertices: vec![0, 0x10, 0x1a, 0x20],
            edges: vec![
                e(0, 1, EdgeKind::Entry, 0, 0x10, 0),
                e(1, 2, EdgeKind::CallReturn, 0x15, 0x1a, INFERRED),
                e(1, 0, EdgeKind::CallUnwound, 0x15, 0, INFERRED),
                e(2, 3, EdgeKind::Flow, 0x1c, 0x20, INFERRED),
                e(3, 3, EdgeKind::Flow, 0x2e, 0x20, 1),
                e(3, 0, EdgeKind::Return, 0x2e, 0, 2),
            ],
            calls: vec![MapCall {
                vertex: 1,
                at: 0x15,
                target: 0,
            }],
            jumps: Vec::new(),
            indirect: vec![(0x15, 4)],
        };
        let g = FunctionMap {
            name: "g".into(),
            start: 0x100,
            vertices: vec![0, 0x100],
            edges: vec![
                e(0, 1, EdgeKind::Entry, 0, 0x100, 3),
                e(1, 0, EdgeKind::Return, 0x104, 0, INFERRED),
            ],
            calls: Vec::new(),
            jumps: Vec::new(),
            indirect: Vec::new(),
        };
        let symbols = (0..12u64)
            .map(|k| (0x1000 + 0x10 * k, format!("t{k}")))
            .chain([(0x10, "f".to_string()), (0x100, "g".to_string())])
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .collect();
        CounterMap {
            input_build_id: vec![7],
            binary_name: "prog".into(),
            counter_count: 4 + SITE_WORDS,
            functions: vec![f, g],
            symbols,
            ..CounterMap::default()
        }
    }

    /// A run's counters: entries `n` of f (and `n` returns, no loop) with the call going to
    /// the targets `calls` (indices of `t0..t11`, first come first served into the table as
    /// the runtime does), `m` entries of g.
    fn run(n: u64, calls: &[usize], m: u64) -> Vec<u64> {
        let mut c = vec![n, 0, n, m];
        let mut table = [0u64; SITE_WORDS as usize];
        for &k in calls {
            let target = 0x1000 + 0x10 * k as u64;
            let pairs = SITE_TARGETS as usize;
            match (0..pairs).find(|&p| table[2 * p] == target || table[2 * p] == 0) {
                Some(p) => {
                    table[2 * p] = target;
                    table[2 * p + 1] += 1;
                }
                None => table[2 * pairs + 1] += 1,
            }
        }
        c.extend(table);
        c
    }

    fn file_bytes(counters: &[u64]) -> Vec<u8> {
        let mut bytes = map()
            .file_prefix(std::path::Path::new("/x/prog.inst"))
            .unwrap()
            .bytes;
        for c in counters {
            bytes.extend_from_slice(&c.to_le_bytes());
        }
        bytes
    }

    fn plan() -> SumPlan {
        SumPlan::from_map(&map()).unwrap()
    }

    /// The summed file of `files` (each with its weight).
    fn sum(files: &[(&[u8], u64)]) -> Result<Vec<u8>, SumError> {
        sum_with(&plan(), files)
    }

    /// [`sum`] with another plan.
    fn sum_with(plan: &SumPlan, files: &[(&[u8], u64)]) -> Result<Vec<u8>, SumError> {
        let plan = plan.clone();
        let mut inputs: Vec<SumInput<&[u8]>> = files
            .iter()
            .map(|&(bytes, weight)| {
                let layout = CounterLayout::read(bytes).unwrap();
                let spilled = layout.spilled(bytes).unwrap();
                check_spilled(&plan, &spilled).unwrap();
                SumInput {
                    counters: &bytes[layout.counters.clone()],
                    weight,
                    spilled,
                }
            })
            .collect();
        let m = map();
        let prefix = summed_prefix(
            m.arch,
            m.counter_count as usize,
            m.encode_map().len(),
            CounterLayout::read(files[0].0).unwrap().map_hash,
            std::path::Path::new("/x/prog.inst"),
        )
        .unwrap();
        let mut out = std::io::Cursor::new(Vec::new());
        write_summed(&plan, &prefix, &mut inputs, &mut out)?;
        Ok(out.into_inner())
    }

    /// The counter file read with the map decoded from `map()` (a version 2 or 3 file's map is
    /// in a binary the tests do not write).
    fn parse(bytes: &[u8]) -> CounterFile {
        let layout = CounterLayout::read(bytes).unwrap();
        CounterFile {
            map: map(),
            map_hash: layout.map_hash,
            counters: layout.counters(bytes),
            spilled: layout.spilled(bytes).unwrap(),
        }
    }

    #[test]
    fn the_plan_puts_tables_after_the_edge_counters() {
        assert_eq!(
            plan(),
            SumPlan {
                counter_count: 20,
                tables: 4,
                code: 0..u64::MAX,
            }
        );
        assert!(plan().is_table(4) && !plan().is_table(3) && !plan().is_table(5));
        // Words of dropped functions between the last edge counter and the tables: the tables
        // are still counted from the end.
        assert_eq!(SumPlan::from_edge_end(1, 36).tables, 4);
        let mut bad = map();
        bad.functions[0].indirect[0].1 = 2;
        assert!(SumPlan::from_map(&bad).is_err());
    }

    #[test]
    fn the_sites_section_gives_the_plan_of_the_map() {
        let m = map();
        let section = m
            .file_prefix(std::path::Path::new("/x/p"))
            .unwrap()
            .sites_section;
        let hash = CounterLayout::read(&file_bytes(&run(1, &[], 0)))
            .unwrap()
            .map_hash;
        assert_eq!(SumPlan::from_sites(&section, hash, 20).unwrap(), plan());
        for at in 0..section.len() {
            let mut bad = section.clone();
            bad[at] ^= 1;
            assert!(SumPlan::from_sites(&bad, hash, 20).is_err(), "byte {at}");
        }
        assert!(SumPlan::from_sites(&section[..39], hash, 20).is_err());
        assert!(SumPlan::from_sites(&section, hash ^ 1, 20).is_err());
        assert!(SumPlan::from_sites(&section, hash, 36).is_err());
        // A map whose tables are not after its edge counters gets no section.
        let mut bad = map();
        bad.functions[0].indirect[0].1 = 2;
        assert!(
            bad.file_prefix(std::path::Path::new("/x/p"))
                .unwrap()
                .sites_section
                .is_empty()
        );
    }

    #[test]
    fn the_index_gives_the_plan_of_the_map() {
        let m = map();
        let prefix = m.file_prefix(std::path::Path::new("/x/p")).unwrap();
        let index = &prefix.index_section;
        let hash = CounterLayout::read(&file_bytes(&run(1, &[], 0)))
            .unwrap()
            .map_hash;
        let from_index = SumPlan::from_index(&index[..], index.len() as u64, hash, 20).unwrap();
        assert_eq!(from_index, plan());
        for at in [0, 8, 16, 24, 40, INDEX_HEADER + 20 + 30] {
            let mut bad = index.clone();
            bad[at] ^= 1;
            assert!(
                SumPlan::from_index(&bad[..], bad.len() as u64, hash, 20).is_err(),
                "byte {at}"
            );
        }
        let cut = &index[..index.len() - 1];
        assert!(SumPlan::from_index(cut, cut.len() as u64, hash, 20).is_err());
    }

    #[test]
    fn a_site_keeps_every_target_of_every_run() {
        // Run 1 fills the table with t0..t6 and loses two calls (t7, t8) to the overflow
        // pair; run 2 calls t9..t11 and t0. The sum holds all ten targets it can name.
        let a = file_bytes(&run(9, &[0, 1, 2, 3, 4, 5, 6, 7, 8], 0));
        let b = file_bytes(&run(4, &[9, 10, 11, 0], 2));
        let summed = sum(&[(&a, 1), (&b, 1)]).unwrap();
        let file = parse(&summed);
        assert_eq!(
            CounterLayout::read(&summed).unwrap().version,
            VERSION_SUMMED
        );
        assert_eq!(&file.counters[..4], &[13, 0, 13, 2]);
        assert_eq!(file.counters[4], 0x1000, "targets in increasing order");
        assert_eq!(file.counters[5], 2, "t0 from both runs");
        assert_eq!(file.counters[19], 2, "the calls run 1 could not place");
        let spilled: Vec<(u64, u64)> = file.spilled.iter().map(|s| (s.target, s.count)).collect();
        assert_eq!(spilled, vec![(0x1090, 1), (0x10a0, 1), (0x10b0, 1)]);
        let profile = file.to_profile();
        let calls: u64 = profile
            .branches
            .iter()
            .filter(|((from, to), _)| from.offset == 5 && to.name.starts_with('t'))
            .map(|(_, b)| b.count)
            .sum();
        assert_eq!(calls, 11, "every call the runs placed");
    }

    #[test]
    fn targets_outside_the_binary_count_as_unplaced() {
        // t0..t3 lie in the binary, t4.. in a shared library (as far as this plan says).
        let inside = SumPlan {
            code: 0..0x1040,
            ..plan()
        };
        let a = file_bytes(&run(9, &[0, 1, 2, 3, 4, 5, 6, 7, 8], 0));
        let b = file_bytes(&run(3, &[9, 10, 0], 0));
        let summed = sum_with(&inside, &[(&a, 1), (&b, 1)]).unwrap();
        let file = parse(&summed);
        let table = &file.counters[4..20];
        assert_eq!(
            &table[..10],
            &[0x1000, 2, 0x1010, 1, 0x1020, 1, 0x1030, 1, 0, 0]
        );
        assert_eq!(table[15], 3 + 2 + 2, "t4-t6, t9-t10, and run 1's overflow");
        assert!(file.spilled.is_empty());
        // The profile is the one of all targets kept, for a binary that has nothing outside
        // `code` (no symbol can name those targets): `[unknown]` in both.
        let all = parse(&sum(&[(&a, 1), (&b, 1)]).unwrap());
        let only_inside = |mut f: CounterFile| {
            f.map.symbols.retain(|s| inside.code.contains(&s.0));
            f.to_profile().branches
        };
        let kept = only_inside(file);
        assert!(kept.keys().any(|(_, to)| to.name == "t3"));
        assert_eq!(kept, only_inside(all));
    }

    #[test]
    fn overflow_and_damage_are_refused() {
        let big = file_bytes(&run(u64::MAX / 2 + 1, &[], 0));
        assert!(matches!(
            sum(&[(&big, 1), (&big, 1)]),
            Err(SumError::Overflow {
                input: 1,
                counter: 0
            })
        ));
        assert!(matches!(
            sum(&[(&big, 2)]),
            Err(SumError::Overflow { input: 0, .. })
        ));
        let a = file_bytes(&run(3, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 0));
        let summed = sum(&[(&a, 1), (&file_bytes(&run(1, &[10, 11], 0)), 1)]).unwrap();
        let layout = CounterLayout::read(&summed).unwrap();
        assert_eq!(layout.spill.len(), 2 * SPILL_ENTRY);
        // Cut short, one byte too many, spilled entries out of order or naming no table.
        assert!(CounterLayout::read(&summed[..summed.len() - 1]).is_err());
        let mut long = summed.clone();
        long.push(0);
        assert!(CounterLayout::read(&long).is_err());
        let mut swapped = summed.clone();
        let s = layout.spill.start;
        swapped[s + 8] = 0xff;
        assert!(layout.spilled(&swapped).is_err());
        let mut zero = summed.clone();
        zero[s + 16..s + 24].fill(0);
        assert!(layout.spilled(&zero).is_err());
        // A table inside the counters that is not a site table of the plan.
        let mut one = summed[..s + SPILL_ENTRY].to_vec();
        one[48..56].copy_from_slice(&1u64.to_le_bytes());
        one[s] = 0;
        let l = CounterLayout::read(&one).unwrap();
        assert!(check_spilled(&plan(), &l.spilled(&one).unwrap()).is_err());
        one[s] = 5;
        assert!(l.spilled(&one).is_err(), "a table past the counters");
    }

    /// A run as the runtime writes it, from a seed: a few entries, calls to a few targets.
    fn arb_run() -> impl Strategy<Value = Vec<u64>> {
        (
            0u64..50,
            proptest::collection::vec(0usize..12, 0..12),
            0u64..5,
        )
            .prop_map(|(n, calls, m)| {
                let calls: Vec<usize> = calls.into_iter().take(n as usize).collect();
                run(n, &calls, m)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Same bytes for any order and grouping: ((a + b) + c) = (a + (b + c)) = (c + a + b),
        /// with weights (w·x = x + ... + x).
        #[test]
        fn sums_are_associative_and_commutative(
            a in arb_run(), b in arb_run(), c in arb_run(), w in 1u64..4,
        ) {
            let (a, b, c) = (file_bytes(&a), file_bytes(&b), file_bytes(&c));
            let ab = sum(&[(&a, 1), (&b, w)]).unwrap();
            let left = sum(&[(&ab, 1), (&c, 1)]).unwrap();
            let bc = sum(&[(&b, w), (&c, 1)]).unwrap();
            let right = sum(&[(&a, 1), (&bc, 1)]).unwrap();
            let flat = sum(&[(&c, 1), (&a, 1), (&b, w)]).unwrap();
            let mut repeated = vec![(&c[..], 1), (&a[..], 1)];
            repeated.extend(std::iter::repeat_n((&b[..], 1), w as usize));
            let repeated = sum(&repeated).unwrap();
            prop_assert_eq!(&left, &right);
            prop_assert_eq!(&left, &flat);
            prop_assert_eq!(&left, &repeated);
        }

        /// The profile of the summed file is the profile of the element-wise sum: edge
        /// counters added slot by slot, every run's site targets added by target.
        #[test]
        fn the_sum_reads_as_the_element_wise_sum(a in arb_run(), b in arb_run()) {
            let summed = parse(&sum(&[(&file_bytes(&a), 1), (&file_bytes(&b), 1)]).unwrap());
            // The reference, built naively: slot sums of the edge counters, and the targets
            // of both tables as a list (the reader takes any number from the spill).
            let mut counters: Vec<u64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
            counters[4..].fill(0);
            let mut spilled: Vec<SpilledTarget> = Vec::new();
            let mut targets = std::collections::BTreeMap::new();
            for r in [&a, &b] {
                for p in r[4..18].chunks_exact(2).filter(|p| p[0] != 0 && p[1] != 0) {
                    *targets.entry(p[0]).or_insert(0) += p[1];
                }
            }
            for (target, count) in targets {
                spilled.push(SpilledTarget { table: 4, target, count });
            }
            let reference = CounterFile { map: map(), map_hash: 0, counters, spilled };
            prop_assert_eq!(summed.to_profile().branches, reference.to_profile().branches);
        }
    }
}
