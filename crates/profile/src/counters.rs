//! The file an instrumented binary counts into, and how its raw counters become edge counts.
//!
//! `rivet instrument` describes, per instrumented function, a *counting graph*: its vertices
//! are the pieces of the function's blocks between calls, plus one vertex standing for
//! "outside the function" (vertex 0); its edges are the CFG edges, the returns of calls, and
//! edges to and from the outside for entries, landing pads, returns, tail calls, indirect
//! jumps, jumps between a function and its compiler-split part, and calls that never came
//! back (an exception, `exit`, `longjmp`, or the process killed while inside). Every edge
//! conserves flow at every vertex, so counting the edges off a spanning tree is enough: the
//! others follow (Knuth's counter placement). Edges no probe can count (a call that did not
//! return) are always tree edges; they all touch vertex 0, so they never close a cycle.
//!
//! The file (`RIVETCNT`, little-endian) names the map it needs; the map itself lives once, in
//! the instrumented binary, so a counter file is little more than its counters:
//!
//! ```text
//! 0   magic "RIVETCNT"      8   version u32      12  architecture u32 (`CounterArch`)
//! 16  counters_offset u64 (page multiple)       24  counter_count u64
//! 32  map_size u64                              40  map_hash u64 (FNV-1a of the map)
//! 48  reserved [16]         64  identity: path_len u32, then the path (bytes), zero padding,
//!                               then the counters (u64) at counters_offset
//! ```
//!
//! The path is where `rivet instrument -o` wrote the instrumented binary (made absolute and
//! canonical when it was written): readers look for the map there, in the non-allocated
//! section [`MAP_SECTION`] (so the instrumented process never maps it), and take it only when
//! the section's hash is the header's; `--instrumented PATH` names the binary instead (a
//! binary moved, or counters fetched from a fleet). Version 1 files, written before, hold the
//! map themselves at offset 64 (`map_size` bytes, then the padding) and read as they always did
//! ([`CounterMap::file_prefix_self_contained`] still writes them, for tests and tools).
//!
//! Beside the map, the binary holds [`INDEX_SECTION`] ([`MapIndex`]): per function its start,
//! name, where its graph lies in the map and which counters its edges read, tied to the map by
//! its hash. A reader that only needs the profile ([`IndexedMap`], [`CounterFile::parse_ran`])
//! decodes the map's head and the graphs of the functions whose counters are not all zero;
//! the others are known by start and name, which is all [`emit_branches`] asks of a function
//! that never ran, so the records are those of a full decode. Binaries without the index
//! (older instrumentations) have their map decoded whole.
//!
//! A third section, [`SITES_SECTION`], records where the site tables start (all after the edge
//! counters), so that counter files can be summed without the map or its index.
//!
//! Version 3 is a *summed counter file* (`rivet merge --format counters`, [`crate::counter_sum`]):
//! the header and identity of version 2, with `spill_count` u64 at offset 48, the summed
//! counters, then `spill_count` spilled site targets (table u64, target u64, count u64, sorted
//! by table then target, no target or count zero): an indirect call site of a summed file can
//! hold any number of targets; the first [`SITE_TARGETS`] (in increasing target order) stay in
//! its table, the rest follow the counters. Its readers treat it as one run's file.
//!
//! The architecture is that of the instrumented binary: 0 x86-64 (what the field, reserved and
//! zero before AArch64 was instrumented, always held), 1 AArch64.
//!
//! The runtime writes the first `counters_offset` bytes when it creates the file and maps
//! the counters over the binary's counter segment; a file whose header differs belongs to
//! another instrumentation and is left alone. The map's encoding is `encode_map`'s.

use std::collections::BTreeMap;

use crate::model::{Architecture, LocKind, Location, Mode, Origin, Profile};

pub const MAGIC: &[u8; 8] = b"RIVETCNT";
/// The version `rivet instrument` writes: the map is in the instrumented binary.
pub const VERSION: u32 = 2;
/// The version whose files carry their map (still read).
pub const VERSION_SELF_CONTAINED: u32 = 1;
/// The version of summed counter files (`rivet merge --format counters`): version 2 plus the
/// site targets that did not fit a table, after the counters.
pub const VERSION_SUMMED: u32 = 3;
/// Bytes of one spilled site target of a summed file: table, target, count (u64 each).
pub const SPILL_ENTRY: usize = 24;
pub const HEADER_SIZE: usize = 64;
/// The section of an instrumented binary that holds its counter map (not allocated: the
/// process never maps it): [`MAP_MAGIC`], the map's hash (u64), its size (u64), the map.
pub const MAP_SECTION: &str = ".rivet.map";
pub const MAP_MAGIC: &[u8; 8] = b"RIVETMAP";
/// Bytes of [`MAP_SECTION`] before the map.
pub const MAP_SECTION_HEADER: usize = 24;
/// The section of an instrumented binary that indexes its map per function (not allocated):
/// see [`MapIndex`].
pub const INDEX_SECTION: &str = ".rivet.mapidx";
pub const INDEX_MAGIC: &[u8; 8] = b"RIVETIDX";
/// Bytes of [`INDEX_SECTION`] before its body: magic, the body's hash, the map's hash, the
/// body's size.
pub const INDEX_HEADER: usize = 32;
/// Bytes of one function's entry in the index.
pub(crate) const INDEX_ENTRY: usize = 44;
/// The section of an instrumented binary that says where its counters' site tables start
/// (not allocated), for summing counter files without reading the map or its index:
/// [`SITES_MAGIC`], the map's hash, the first table's word, the counter count (u64 each), then
/// the FNV-1a hash of those 32 bytes.
pub const SITES_SECTION: &str = ".rivet.sites";
pub const SITES_MAGIC: &[u8; 8] = b"RIVETSIT";
/// Bytes of [`SITES_SECTION`].
pub const SITES_SIZE: usize = 40;
/// Longest instrumented-binary path a counter file records (a Linux path).
pub const MAX_IDENTITY_PATH: usize = 4096;
/// Counter index of an edge without a counter (a spanning-tree edge, inferred).
pub const INFERRED: u32 = u32::MAX;
/// Vertex 0 of every counting graph: outside the function.
pub const OUTSIDE: u32 = 0;
/// The table of an indirect call site: `SITE_TARGETS` (target, count) pairs filled in first
/// come first served, then one (0, count) pair for the targets that found no free pair. A
/// target is its address in the binary's link-time addresses (outside the binary: whatever
/// the run-time address minus the load bias gives, which lies outside it).
pub const SITE_TARGETS: u32 = 7;
/// 64-bit words of a site table.
pub const SITE_WORDS: u32 = 2 * (SITE_TARGETS + 1);
const PAGE: u64 = 4096;

/// What an edge of a counting graph stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum EdgeKind {
    /// A CFG edge: `from_addr` is the last instruction of the source block, `to_addr` the
    /// successor's start.
    Flow = 0,
    /// A call returned: `from_addr` is the call, `to_addr` the return address.
    CallReturn = 1,
    /// A call did not return (to the outside): `from_addr` is the call.
    CallUnwound = 2,
    /// From the outside to an entry point (`to_addr`).
    Entry = 3,
    /// From the outside to a landing pad (`to_addr`).
    LandingPad = 4,
    /// A return (`from_addr`) to the outside.
    Return = 5,
    /// A tail call at `from_addr` to `to_addr` (0 when indirect).
    TailCall = 6,
    /// An indirect jump (jump table, computed goto) at `from_addr`, leaving to the outside
    /// vertex; its targets come back through `IndirectTarget` edges.
    IndirectJump = 7,
    /// From the outside to `to_addr`, a target of indirect jumps (all of them: which jump
    /// went there is not counted; `FunctionMap::jumps` lists the possible pairs).
    IndirectTarget = 8,
    /// A jump at `from_addr` to `to_addr` in a compiler-split sibling (`foo` <-> `foo.cold`).
    ToFragment = 9,
    /// Entry at `to_addr` from a compiler-split sibling's jump at `from_addr`.
    FromFragment = 10,
    /// A noreturn call or trap at `from_addr` (to the outside).
    NoReturn = 11,
    /// Every arrival at the block at `to_addr`: a block entered both from the outside and from
    /// inside the function is split in two vertices joined by this edge, so that its entries
    /// from the outside can be inferred.
    Enter = 12,
}

impl EdgeKind {
    fn from_u8(v: u8) -> Option<EdgeKind> {
        use EdgeKind::*;
        Some(match v {
            0 => Flow,
            1 => CallReturn,
            2 => CallUnwound,
            3 => Entry,
            4 => LandingPad,
            5 => Return,
            6 => TailCall,
            7 => IndirectJump,
            8 => IndirectTarget,
            9 => ToFragment,
            10 => FromFragment,
            11 => NoReturn,
            12 => Enter,
            _ => return None,
        })
    }
}

/// One edge of a counting graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapEdge {
    pub from: u32,
    pub to: u32,
    pub kind: EdgeKind,
    pub from_addr: u64,
    pub to_addr: u64,
    /// Index of its counter, or `INFERRED`.
    pub counter: u32,
}

/// A call site: executed as often as `vertex` (the piece of block that ends with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapCall {
    pub vertex: u32,
    pub at: u64,
    /// The callee's address in the input; 0 for an indirect call.
    pub target: u64,
}

/// The counting graph of one instrumented function, in input addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionMap {
    /// The name profiles use for it (fdata conventions: locals as `name/file/1`).
    pub name: String,
    pub start: u64,
    /// Start address of each vertex's code; index 0 (outside) holds 0.
    pub vertices: Vec<u64>,
    pub edges: Vec<MapEdge>,
    pub calls: Vec<MapCall>,
    /// (indirect jump, target) pairs of jump tables and computed gotos.
    pub jumps: Vec<(u64, u64)>,
    /// Indirect calls and tail calls whose targets were recorded: (site, first word of its
    /// table in the counters).
    pub indirect: Vec<(u64, u32)>,
}

impl FunctionMap {
    /// Whether every address the map places in this function is at or after its start (a
    /// map from a corrupt file may say otherwise).
    fn addresses_inside(&self) -> bool {
        use EdgeKind::*;
        let inside = |a: u64| a >= self.start;
        self.vertices.iter().skip(1).all(|&v| inside(v))
            && self.calls.iter().all(|c| inside(c.at))
            && self.jumps.iter().all(|&(j, t)| inside(j) && inside(t))
            && self.indirect.iter().all(|&(site, _)| inside(site))
            && self.edges.iter().all(|e| {
                let from_inside =
                    !matches!(e.kind, Entry | LandingPad | IndirectTarget | FromFragment);
                let to_inside = matches!(
                    e.kind,
                    Flow | CallReturn | Entry | LandingPad | IndirectTarget | FromFragment | Enter
                );
                (!from_inside || inside(e.from_addr)) && (!to_inside || inside(e.to_addr))
            })
    }
}

/// The instruction set of an instrumented binary, as its counter file records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CounterArch {
    #[default]
    X86_64,
    Aarch64,
}

impl CounterArch {
    pub(crate) fn code(self) -> u32 {
        match self {
            CounterArch::X86_64 => 0,
            CounterArch::Aarch64 => 1,
        }
    }

    fn from_code(code: u32) -> Option<CounterArch> {
        match code {
            0 => Some(CounterArch::X86_64),
            1 => Some(CounterArch::Aarch64),
            _ => None,
        }
    }

    /// The name users know it by.
    pub fn name(self) -> &'static str {
        match self {
            CounterArch::X86_64 => "x86-64",
            CounterArch::Aarch64 => "AArch64",
        }
    }
}

/// Everything needed to turn an instrumented run's counters into a profile of the input.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CounterMap {
    /// The instrumented binary's instruction set (kept in the file's header, not the map).
    pub arch: CounterArch,
    /// GNU build-id of the input binary (the one the profile describes).
    pub input_build_id: Vec<u8>,
    pub binary_name: String,
    pub counter_count: u32,
    pub functions: Vec<FunctionMap>,
    /// Names of the input's functions by start address, sorted (call targets, tail calls).
    pub symbols: Vec<(u64, String)>,
    /// (new entry, input entry) of every function the instrumented binary moved, sorted: the
    /// targets recorded at indirect calls are where the moved code runs.
    pub moved_entries: Vec<(u64, u64)>,
}

/// Why a counter file or map cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CountersError {
    #[error("not a Rivet counter file (no RIVETCNT magic)")]
    NotCounters,
    #[error(
        "counter file version {0} is not supported (this Rivet reads versions {VERSION_SELF_CONTAINED} to {VERSION_SUMMED})"
    )]
    Version(u32),
    /// A version 2 file whose instrumented binary cannot give the map.
    #[error("its map is in the instrumented binary {binary} (map hash {hash:016x}), which {why}")]
    MapElsewhere {
        binary: String,
        hash: u64,
        why: String,
    },
    #[error("counter file is truncated: {0}")]
    Truncated(&'static str),
    #[error("counter file is malformed: {0}")]
    Malformed(String),
    #[error("counter files come from different instrumentations (map hashes differ)")]
    DifferentInstrumentation,
    /// The instrumented binary's [`INDEX_SECTION`] cannot be trusted.
    #[error("the map index ({INDEX_SECTION}) of {binary} is damaged: {why}")]
    BadIndex { binary: String, why: String },
    /// The instrumented binary's [`SITES_SECTION`] cannot be trusted.
    #[error("the site table section ({SITES_SECTION}) of {binary} is damaged: {why}")]
    BadSites { binary: String, why: String },
}

struct Writer(Vec<u8>);
impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
}

/// Reads a map from a stream (a slice, or a file read as it goes), hashing every byte it takes
/// with FNV-1a, so that the map is checked against its hash without being held whole.
struct Reader<R> {
    inner: R,
    /// Bytes of the map not read yet.
    left: usize,
    hash: u64,
    /// False for bytes already checked against their hash (a graph read whole).
    hashing: bool,
    buf: Vec<u8>,
}
impl<R: std::io::Read> Reader<R> {
    fn new(inner: R, len: usize) -> Reader<R> {
        Reader {
            inner,
            left: len,
            hash: FNV_OFFSET,
            hashing: true,
            buf: Vec::new(),
        }
    }

    /// A reader of bytes whose hash is already checked.
    fn unhashed(inner: R, len: usize) -> Reader<R> {
        Reader {
            hashing: false,
            ..Reader::new(inner, len)
        }
    }
    fn take(&mut self, n: usize) -> Result<&[u8], CountersError> {
        if n > self.left {
            return Err(CountersError::Truncated("the map ends early"));
        }
        self.buf.resize(n, 0);
        self.inner
            .read_exact(&mut self.buf)
            .map_err(|_| CountersError::Truncated("the map ends early"))?;
        if self.hashing {
            self.hash = fnv1a_from(self.hash, &self.buf);
        }
        self.left -= n;
        Ok(&self.buf)
    }
    fn u8(&mut self) -> Result<u8, CountersError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, CountersError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, CountersError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, CountersError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String, CountersError> {
        String::from_utf8(self.bytes()?)
            .map_err(|_| CountersError::Malformed("a name is not UTF-8".into()))
    }
    /// A count of items each at least `min_size` bytes long, checked against what is left.
    fn count(&mut self, min_size: usize) -> Result<usize, CountersError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size) > self.left {
            return Err(CountersError::Truncated("a table is longer than the map"));
        }
        Ok(n)
    }
    /// The hash of the whole map: what is left is read (a chunk at a time) and hashed too.
    fn finish_hash(mut self) -> u64 {
        while self.left > 0 {
            if self.take(self.left.min(1 << 16)).is_err() {
                break;
            }
        }
        self.hash
    }
}

pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

pub(crate) fn fnv1a_from(hash: u64, data: &[u8]) -> u64 {
    data.iter().fold(hash, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn fnv1a(data: &[u8]) -> u64 {
    fnv1a_from(FNV_OFFSET, data)
}

impl CounterMap {
    /// The map's bytes (the part of the file after the header).
    pub fn encode_map(&self) -> Vec<u8> {
        self.encode_map_spans().0
    }

    /// [`CounterMap::encode_map`], and where its parts lie: the length of its head (everything
    /// before the first function's graph) and each function's graph, in map order.
    fn encode_map_spans(&self) -> (Vec<u8>, usize, Vec<std::ops::Range<usize>>) {
        let mut w = Writer(Vec::new());
        w.bytes(&self.input_build_id);
        w.bytes(self.binary_name.as_bytes());
        w.u32(self.counter_count);
        w.u32(self.symbols.len() as u32);
        for (addr, name) in &self.symbols {
            w.u64(*addr);
            w.bytes(name.as_bytes());
        }
        w.u32(self.moved_entries.len() as u32);
        for (new, old) in &self.moved_entries {
            w.u64(*new);
            w.u64(*old);
        }
        w.u32(self.functions.len() as u32);
        let head = w.0.len();
        let mut spans = Vec::with_capacity(self.functions.len());
        for f in &self.functions {
            let graph_start = w.0.len();
            w.bytes(f.name.as_bytes());
            w.u64(f.start);
            w.u32(f.vertices.len() as u32);
            for v in &f.vertices {
                w.u64(*v);
            }
            w.u32(f.edges.len() as u32);
            for e in &f.edges {
                w.u32(e.from);
                w.u32(e.to);
                w.u8(e.kind as u8);
                w.u64(e.from_addr);
                w.u64(e.to_addr);
                w.u32(e.counter);
            }
            w.u32(f.calls.len() as u32);
            for c in &f.calls {
                w.u32(c.vertex);
                w.u64(c.at);
                w.u64(c.target);
            }
            w.u32(f.jumps.len() as u32);
            for (jump, target) in &f.jumps {
                w.u64(*jump);
                w.u64(*target);
            }
            w.u32(f.indirect.len() as u32);
            for (site, table) in &f.indirect {
                w.u64(*site);
                w.u32(*table);
            }
            spans.push(graph_start..w.0.len());
        }
        (w.0, head, spans)
    }

    /// Decodes `encode_map`'s bytes, checking every index.
    pub fn decode_map(data: &[u8]) -> Result<CounterMap, CountersError> {
        CounterMap::decode_from(&mut Reader::new(data, data.len()))
    }

    /// Decodes the `len` bytes of a map that `map` streams, checked against `hash` (a map
    /// that does not match its hash is reported as such, whatever else is wrong with it).
    pub fn decode_checked(
        map: impl std::io::Read,
        len: usize,
        hash: u64,
    ) -> Result<CounterMap, CountersError> {
        let mut r = Reader::new(map, len);
        let decoded = CounterMap::decode_from(&mut r);
        if r.finish_hash() != hash {
            return Err(CountersError::Malformed(
                "the map does not match its hash".into(),
            ));
        }
        decoded
    }

    fn decode_from<R: std::io::Read>(r: &mut Reader<R>) -> Result<CounterMap, CountersError> {
        let (mut map, nfunc) = CounterMap::decode_head(r)?;
        map.functions.reserve(nfunc);
        for _ in 0..nfunc {
            let f = CounterMap::decode_function(r, map.counter_count)?;
            map.functions.push(f);
        }
        if r.left != 0 {
            return Err(CountersError::Malformed("bytes after the map".into()));
        }
        Ok(map)
    }

    /// The map's head: everything but the functions' graphs (`functions` is left empty), and
    /// how many graphs follow.
    fn decode_head<R: std::io::Read>(
        r: &mut Reader<R>,
    ) -> Result<(CounterMap, usize), CountersError> {
        let input_build_id = r.bytes()?;
        let binary_name = r.string()?;
        let counter_count = r.u32()?;
        let nsym = r.count(12)?;
        let mut symbols = Vec::with_capacity(nsym);
        for _ in 0..nsym {
            symbols.push((r.u64()?, r.string()?));
        }
        let nmoved = r.count(16)?;
        let moved_entries = (0..nmoved)
            .map(|_| Ok((r.u64()?, r.u64()?)))
            .collect::<Result<Vec<_>, CountersError>>()?;
        let nfunc = r.count(24)?;
        let map = CounterMap {
            arch: CounterArch::default(),
            input_build_id,
            binary_name,
            counter_count,
            functions: Vec::new(),
            symbols,
            moved_entries,
        };
        Ok((map, nfunc))
    }

    /// One function's counting graph, every index checked.
    fn decode_function<R: std::io::Read>(
        r: &mut Reader<R>,
        counter_count: u32,
    ) -> Result<FunctionMap, CountersError> {
        let name = r.string()?;
        let start = r.u64()?;
        let nv = r.count(8)?;
        let vertices = (0..nv).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        let ne = r.count(29)?;
        let mut edges = Vec::with_capacity(ne);
        for _ in 0..ne {
            let from = r.u32()?;
            let to = r.u32()?;
            let kind = EdgeKind::from_u8(r.u8()?)
                .ok_or_else(|| CountersError::Malformed("unknown edge kind".into()))?;
            let from_addr = r.u64()?;
            let to_addr = r.u64()?;
            let counter = r.u32()?;
            if from as usize >= nv || to as usize >= nv {
                return Err(CountersError::Malformed(format!(
                    "an edge of {name} names a vertex it does not have"
                )));
            }
            if counter != INFERRED && counter >= counter_count {
                return Err(CountersError::Malformed(format!(
                    "an edge of {name} names counter {counter} of {counter_count}"
                )));
            }
            edges.push(MapEdge {
                from,
                to,
                kind,
                from_addr,
                to_addr,
                counter,
            });
        }
        let nc = r.count(20)?;
        let mut calls = Vec::with_capacity(nc);
        for _ in 0..nc {
            let vertex = r.u32()?;
            if vertex as usize >= nv {
                return Err(CountersError::Malformed(format!(
                    "a call of {name} names a vertex it does not have"
                )));
            }
            calls.push(MapCall {
                vertex,
                at: r.u64()?,
                target: r.u64()?,
            });
        }
        let nj = r.count(16)?;
        let jumps = (0..nj)
            .map(|_| Ok((r.u64()?, r.u64()?)))
            .collect::<Result<Vec<_>, CountersError>>()?;
        let ni = r.count(12)?;
        let mut indirect = Vec::with_capacity(ni);
        for _ in 0..ni {
            let site = r.u64()?;
            let table = r.u32()?;
            if table
                .checked_add(SITE_WORDS)
                .is_none_or(|end| end > counter_count)
            {
                return Err(CountersError::Malformed(format!(
                    "an indirect call table of {name} lies outside the counters"
                )));
            }
            indirect.push((site, table));
        }
        let f = FunctionMap {
            name,
            start,
            vertices,
            edges,
            calls,
            jumps,
            indirect,
        };
        if !f.addresses_inside() {
            return Err(CountersError::Malformed(format!(
                "{} names code before its start",
                f.name
            )));
        }
        Ok(f)
    }

    /// The first 64 bytes of a counter file, version `version`, of `map_size`, `map_hash`.
    fn header(&self, version: u32, counters_offset: u64, map: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(counters_offset as usize);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&self.arch.code().to_le_bytes());
        out.extend_from_slice(&counters_offset.to_le_bytes());
        out.extend_from_slice(&u64::from(self.counter_count).to_le_bytes());
        out.extend_from_slice(&(map.len() as u64).to_le_bytes());
        out.extend_from_slice(&fnv1a(map).to_le_bytes());
        out.resize(HEADER_SIZE, 0);
        out
    }

    /// What the runtime of the binary instrumented to `instrumented` writes when it creates
    /// the file (the header and the path, padded to the counters' offset, a page multiple),
    /// and the contents of the binary's [`MAP_SECTION`]. `None` when the path is longer than
    /// [`MAX_IDENTITY_PATH`].
    pub fn file_prefix(&self, instrumented: &std::path::Path) -> Option<CounterPrefix> {
        use std::os::unix::ffi::OsStrExt;
        let path = instrumented.as_os_str().as_bytes();
        if path.len() > MAX_IDENTITY_PATH {
            return None;
        }
        let (map, head, spans) = self.encode_map_spans();
        let map_index = self.encode_index(&map, head, &spans);
        let counters_offset = (HEADER_SIZE as u64 + 4 + path.len() as u64).div_ceil(PAGE) * PAGE;
        let mut bytes = self.header(VERSION, counters_offset, &map);
        bytes.extend_from_slice(&(path.len() as u32).to_le_bytes());
        bytes.extend_from_slice(path);
        bytes.resize(counters_offset as usize, 0);
        let mut section = Vec::with_capacity(MAP_SECTION_HEADER + map.len());
        section.extend_from_slice(MAP_MAGIC);
        section.extend_from_slice(&fnv1a(&map).to_le_bytes());
        section.extend_from_slice(&(map.len() as u64).to_le_bytes());
        section.extend_from_slice(&map);
        Some(CounterPrefix {
            bytes,
            counters_offset,
            map_section: section,
            index_section: map_index,
            sites_section: self.sites_section(&map),
        })
    }

    /// The contents of [`SITES_SECTION`] for `map`, this map's encoding.
    fn sites_section(&self, map: &[u8]) -> Vec<u8> {
        let Ok(plan) = crate::counter_sum::SumPlan::from_map(self) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(SITES_SIZE);
        out.extend_from_slice(SITES_MAGIC);
        out.extend_from_slice(&fnv1a(map).to_le_bytes());
        out.extend_from_slice(&(plan.tables as u64).to_le_bytes());
        out.extend_from_slice(&(plan.counter_count as u64).to_le_bytes());
        out.extend_from_slice(&fnv1a(&out).to_le_bytes());
        out
    }

    /// The contents of [`INDEX_SECTION`] for `map` (this map's encoding, whose head is `head`
    /// bytes long and whose graphs lie at `spans`).
    fn encode_index(&self, map: &[u8], head: usize, spans: &[std::ops::Range<usize>]) -> Vec<u8> {
        let mut body = Writer(Vec::new());
        body.u64(head as u64);
        body.u64(fnv1a(&map[..head]));
        body.u32(self.functions.len() as u32);
        let mut names_len = 0u32;
        for (f, span) in self.functions.iter().zip(spans) {
            // The counters the edges read; an edge-less or all-inferred function has none.
            let counted = f.edges.iter().map(|e| e.counter).filter(|&c| c != INFERRED);
            let (lo, hi) = counted.fold((u32::MAX, 0u32), |(lo, hi), c| {
                (lo.min(c), hi.max(c.saturating_add(1)))
            });
            let (lo, hi) = if lo > hi { (0, 0) } else { (lo, hi) };
            body.u64(f.start);
            body.u64(span.start as u64);
            body.u32((span.end - span.start) as u32);
            body.u64(fnv1a(&map[span.clone()]));
            body.u32(lo);
            body.u32(hi);
            body.u32(names_len);
            body.u32(f.name.len() as u32);
            names_len += f.name.len() as u32;
        }
        for f in &self.functions {
            body.0.extend_from_slice(f.name.as_bytes());
        }
        let mut out = Vec::with_capacity(INDEX_HEADER + body.0.len());
        out.extend_from_slice(INDEX_MAGIC);
        out.extend_from_slice(&fnv1a(&body.0).to_le_bytes());
        out.extend_from_slice(&fnv1a(map).to_le_bytes());
        out.extend_from_slice(&(body.0.len() as u64).to_le_bytes());
        out.extend_from_slice(&body.0);
        out
    }

    /// The prefix of a version 1 file, which carries the map (header, map, padding to the
    /// returned counters' offset), as Rivet wrote them before the map moved to the binary.
    pub fn file_prefix_self_contained(&self) -> (Vec<u8>, u64) {
        let map = self.encode_map();
        let counters_offset = (HEADER_SIZE as u64 + map.len() as u64).div_ceil(PAGE) * PAGE;
        let mut out = self.header(VERSION_SELF_CONTAINED, counters_offset, &map);
        out.extend_from_slice(&map);
        out.resize(counters_offset as usize, 0);
        (out, counters_offset)
    }
}

/// What `rivet instrument` puts in an instrumented binary for its counter file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterPrefix {
    /// The file's first `counters_offset` bytes, which the runtime writes.
    pub bytes: Vec<u8>,
    pub counters_offset: u64,
    /// The contents of [`MAP_SECTION`].
    pub map_section: Vec<u8>,
    /// The contents of [`INDEX_SECTION`].
    pub index_section: Vec<u8>,
    /// The contents of [`SITES_SECTION`] (empty, and the section left out, for a map whose
    /// site tables are not all after its edge counters, which `rivet instrument` never makes).
    pub sites_section: Vec<u8>,
}

/// A counter file read back: its map and counter values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterFile {
    pub map: CounterMap,
    pub map_hash: u64,
    pub counters: Vec<u64>,
    /// Site targets beyond their table's (a summed file's; empty for a run's own file).
    pub spilled: Vec<SpilledTarget>,
}

/// A target of an indirect call site that its table, which holds [`SITE_TARGETS`], had no
/// room for: a summed counter file lists them after its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SpilledTarget {
    /// First word of the site's table in the counters.
    pub table: u32,
    /// The target, as a table records it (an address of the instrumented binary).
    pub target: u64,
    pub count: u64,
}

/// True when `data` starts like a counter file.
pub fn is_counter_file(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

/// Where the parts of a counter file lie, as its header says, checked against the file's
/// size; nothing is decoded yet. A merge of many runs of one instrumentation reads every
/// header, decodes one map, and only reads the counters of the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterLayout {
    pub version: u32,
    pub arch: CounterArch,
    /// The map's bytes in the file (version 1; empty in version 2, whose map is elsewhere).
    pub map: std::ops::Range<usize>,
    /// The map's size, wherever it is.
    pub map_size: usize,
    /// The hash the header records for the map.
    pub map_hash: u64,
    /// The counters' bytes in the file (8 per counter).
    pub counters: std::ops::Range<usize>,
    /// The spilled site targets' bytes (a summed file's, [`SPILL_ENTRY`] each; else empty).
    pub spill: std::ops::Range<usize>,
    /// Version 2: the instrumented binary that holds the map, as the file records it.
    pub instrumented: Option<std::path::PathBuf>,
}

/// How many of a counter file's first bytes [`CounterLayout::from_header`] may need: the
/// header and the longest identity.
pub const PREFIX_READ: usize = HEADER_SIZE + 4 + MAX_IDENTITY_PATH;

impl CounterLayout {
    pub fn read(data: &[u8]) -> Result<CounterLayout, CountersError> {
        CounterLayout::from_header(data, data.len() as u64)
    }

    /// The layout of a file of `file_len` bytes that starts with `data` (its first
    /// [`PREFIX_READ`] bytes or more, or the whole file when it is shorter).
    pub fn from_header(data: &[u8], file_len: u64) -> Result<CounterLayout, CountersError> {
        if !data.starts_with(MAGIC) {
            return Err(CountersError::NotCounters);
        }
        if data.len() < HEADER_SIZE || file_len < HEADER_SIZE as u64 {
            return Err(CountersError::Truncated("the header ends early"));
        }
        let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap());
        let version = u32_at(8);
        if !(VERSION_SELF_CONTAINED..=VERSION_SUMMED).contains(&version) {
            return Err(CountersError::Version(version));
        }
        let arch = CounterArch::from_code(u32_at(12)).ok_or_else(|| {
            CountersError::Malformed(format!("unknown architecture {}", u32_at(12)))
        })?;
        let counters_offset = u64_at(16);
        let counter_count = u64_at(24);
        let map_size = u64_at(32);
        let map_hash = u64_at(40);
        // What lies between the header and the counters: the map, or the binary's path.
        let (map, instrumented, prefix_end) = if version == VERSION_SELF_CONTAINED {
            let end = (HEADER_SIZE as u64).checked_add(map_size);
            (HEADER_SIZE..end.unwrap_or(u64::MAX) as usize, None, end)
        } else {
            use std::os::unix::ffi::OsStrExt;
            let short = CountersError::Truncated("the instrumented binary's path ends early");
            let len = data
                .get(HEADER_SIZE..HEADER_SIZE + 4)
                .ok_or(short.clone())
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)?;
            if len == 0 || len > MAX_IDENTITY_PATH {
                return Err(CountersError::Malformed(
                    "the instrumented binary's path is empty or too long".into(),
                ));
            }
            let start = HEADER_SIZE + 4;
            let path = data.get(start..start + len).ok_or(short)?;
            let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(path));
            (
                HEADER_SIZE..HEADER_SIZE,
                Some(path),
                Some((start + len) as u64),
            )
        };
        prefix_end
            .filter(|&e| e <= counters_offset)
            .ok_or_else(|| CountersError::Malformed("the map overlaps the counters".into()))?;
        if map_size > usize::MAX as u64 / 2 {
            return Err(CountersError::Malformed("map size out of range".into()));
        }
        let counters_end = counter_count
            .checked_mul(8)
            .and_then(|n| n.checked_add(counters_offset))
            .ok_or_else(|| CountersError::Malformed("counter count out of range".into()))?;
        if file_len < counters_end {
            return Err(CountersError::Truncated("the counters end early"));
        }
        // A summed file ends with its spilled targets, and nothing after them.
        let spill_end = match version {
            VERSION_SUMMED => u64_at(48)
                .checked_mul(SPILL_ENTRY as u64)
                .and_then(|n| n.checked_add(counters_end))
                .ok_or_else(|| {
                    CountersError::Malformed("spilled target count out of range".into())
                })?,
            _ => counters_end,
        };
        if file_len < spill_end {
            return Err(CountersError::Truncated(
                "the spilled site targets end early",
            ));
        }
        if version == VERSION_SUMMED && file_len > spill_end {
            return Err(CountersError::Malformed(
                "bytes after the spilled site targets".into(),
            ));
        }
        Ok(CounterLayout {
            version,
            arch,
            map,
            map_size: map_size as usize,
            map_hash,
            counters: counters_offset as usize..counters_end as usize,
            spill: counters_end as usize..spill_end as usize,
            instrumented,
        })
    }

    /// Decodes the map (checking it against its hash and the header): from the file's own
    /// bytes (version 1), else from the instrumented binary (`instrumented` when given, else
    /// the one the file records).
    pub fn decode_map(
        &self,
        data: &[u8],
        instrumented: Option<&std::path::Path>,
    ) -> Result<CounterMap, CountersError> {
        match self.version {
            VERSION_SELF_CONTAINED => self.decode_map_from(&data[self.map.clone()]),
            _ => {
                let (_, stream) = self.open_map(instrumented)?;
                self.decode_map_from(stream)
            }
        }
    }

    /// The binary a version 2 file's map is to be read from: `instrumented` when given, else
    /// the recorded one (`None` for a version 1 file).
    pub fn map_binary<'a>(
        &'a self,
        instrumented: Option<&'a std::path::Path>,
    ) -> Option<&'a std::path::Path> {
        (self.version != VERSION_SELF_CONTAINED)
            .then(|| instrumented.or(self.instrumented.as_deref()))
            .flatten()
    }

    /// Opens the map of a version 2 file in its binary (see [`CounterLayout::map_binary`]):
    /// the binary's path and a stream of the map's bytes, once the binary's map section is
    /// found to have the header's hash and size.
    pub fn open_map(
        &self,
        instrumented: Option<&std::path::Path>,
    ) -> Result<(std::path::PathBuf, impl std::io::Read + use<>), CountersError> {
        use std::io::{Read, Seek, SeekFrom};
        let (path, mut file, at) = self.locate_map(instrumented)?;
        file.seek(SeekFrom::Start(at))
            .map_err(|e| CountersError::MapElsewhere {
                binary: path.display().to_string(),
                hash: self.map_hash,
                why: format!("cannot be read ({e})"),
            })?;
        Ok((
            path,
            std::io::BufReader::with_capacity(1 << 16, file.take(self.map_size as u64)),
        ))
    }

    /// The binary of [`CounterLayout::open_map`], open, and the file offset of its map's first
    /// byte, once its map section is found to have the header's hash and size.
    pub(crate) fn locate_map(
        &self,
        instrumented: Option<&std::path::Path>,
    ) -> Result<(std::path::PathBuf, std::fs::File, u64), CountersError> {
        use std::io::{Read, Seek, SeekFrom};
        let path = self
            .map_binary(instrumented)
            .ok_or_else(|| CountersError::Malformed("the file records no binary".into()))?
            .to_path_buf();
        let elsewhere = |why: String| CountersError::MapElsewhere {
            binary: path.display().to_string(),
            hash: self.map_hash,
            why,
        };
        let mut file = std::fs::File::open(&path).map_err(|e| {
            elsewhere(if e.kind() == std::io::ErrorKind::NotFound {
                "is missing".into()
            } else {
                format!("cannot be read ({e})")
            })
        })?;
        let (offset, size) = find_section(&mut file, MAP_SECTION)
            .map_err(|e| elsewhere(format!("cannot be read ({e})")))?
            .ok_or_else(|| elsewhere(format!("has no {MAP_SECTION} section")))?;
        let mut head = [0u8; MAP_SECTION_HEADER];
        let read_head = file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut head));
        if size < MAP_SECTION_HEADER as u64 || read_head.is_err() || &head[..8] != MAP_MAGIC {
            return Err(elsewhere(format!("has a malformed {MAP_SECTION} section")));
        }
        let hash = u64::from_le_bytes(head[8..16].try_into().unwrap());
        let len = u64::from_le_bytes(head[16..24].try_into().unwrap());
        if hash != self.map_hash {
            return Err(elsewhere(format!("differs (its map hash is {hash:016x})")));
        }
        if len != self.map_size as u64 || len > size - MAP_SECTION_HEADER as u64 {
            return Err(elsewhere(format!(
                "has a {MAP_SECTION} section of another size"
            )));
        }
        Ok((path, file, offset + MAP_SECTION_HEADER as u64))
    }

    /// Decodes the map from `map`, which streams the map's bytes (the map is never held
    /// whole).
    pub fn decode_map_from(&self, map: impl std::io::Read) -> Result<CounterMap, CountersError> {
        let mut map = CounterMap::decode_checked(map, self.map_size, self.map_hash)?;
        map.arch = self.arch;
        if map.counter_count as usize != self.counters.len() / 8 {
            return Err(CountersError::Malformed(
                "header and map disagree on the number of counters".into(),
            ));
        }
        Ok(map)
    }

    /// The counter values.
    pub fn counters(&self, data: &[u8]) -> Vec<u64> {
        data[self.counters.clone()]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// The spilled site targets of a summed file (`data` holds at least [`CounterLayout::spill`]),
    /// checked: sorted by table then target without repeats, no target or count zero, every
    /// table inside the counters.
    pub fn spilled(&self, data: &[u8]) -> Result<Vec<SpilledTarget>, CountersError> {
        parse_spill(&data[self.spill.clone()], self.counters.len() / 8)
    }
}

/// Spilled site targets from their bytes ([`SPILL_ENTRY`] each), checked as
/// [`CounterLayout::spilled`] says.
pub fn parse_spill(
    bytes: &[u8],
    counter_count: usize,
) -> Result<Vec<SpilledTarget>, CountersError> {
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let mut out: Vec<SpilledTarget> = Vec::with_capacity(bytes.len() / SPILL_ENTRY);
    for e in bytes.chunks_exact(SPILL_ENTRY) {
        let table = u64_at(e, 0);
        let s = SpilledTarget {
            table: u32::try_from(table).unwrap_or(u32::MAX),
            target: u64_at(e, 8),
            count: u64_at(e, 16),
        };
        if table.saturating_add(u64::from(SITE_WORDS)) > counter_count as u64 {
            return Err(CountersError::Malformed(
                "a spilled site target's table lies outside the counters".into(),
            ));
        }
        if s.target == 0
            || s.count == 0
            || out
                .last()
                .is_some_and(|l| (l.table, l.target) >= (s.table, s.target))
        {
            return Err(CountersError::Malformed(
                "the spilled site targets are not sorted, repeat, or hold a zero".into(),
            ));
        }
        out.push(s);
    }
    Ok(out)
}

impl CounterLayout {}

/// The (file offset, size) of the contents of the section called `name` of a 64-bit
/// little-endian ELF file (x86-64, AArch64), read from its section headers alone; `None` when
/// the file is not such an ELF file or has no such section.
pub fn find_section(
    file: &mut (impl std::io::Read + std::io::Seek),
    name: &str,
) -> std::io::Result<Option<(u64, u64)>> {
    use std::io::SeekFrom;
    let mut ehdr = [0u8; 64];
    file.seek(SeekFrom::Start(0))?;
    if file.read_exact(&mut ehdr).is_err()
        || &ehdr[..4] != b"\x7fELF"
        || ehdr[4] != 2
        || ehdr[5] != 1
    {
        return Ok(None);
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap());
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let shoff = u64_at(&ehdr, 0x28);
    let shentsize = u16_at(&ehdr, 0x3a) as u64;
    if shoff == 0 || shentsize < 64 {
        return Ok(None);
    }
    let section = |file: &mut _, i: u64| -> std::io::Result<Option<[u8; 64]>> {
        let mut shdr = [0u8; 64];
        let Some(at) = i.checked_mul(shentsize).and_then(|o| o.checked_add(shoff)) else {
            return Ok(None);
        };
        std::io::Seek::seek(file, SeekFrom::Start(at))?;
        Ok(std::io::Read::read_exact(file, &mut shdr)
            .ok()
            .map(|_| shdr))
    };
    let Some(first) = section(file, 0)? else {
        return Ok(None);
    };
    // Counts too large for the ELF header's fields are in section 0 (SHN_XINDEX).
    let count = match u16_at(&ehdr, 0x3c) {
        0 => u64_at(&first, 32),
        n => u64::from(n),
    };
    let strndx = match u16_at(&ehdr, 0x3e) {
        0xffff => u64::from(u32_at(&first, 40)),
        n => u64::from(n),
    };
    let Some(strtab) = section(file, strndx)? else {
        return Ok(None);
    };
    let (str_off, str_size) = (u64_at(&strtab, 24), u64_at(&strtab, 32));
    let mut wanted = name.as_bytes().to_vec();
    wanted.push(0);
    let mut got = vec![0u8; wanted.len()];
    for i in 1..count.min(1 << 20) {
        let Some(shdr) = section(file, i)? else {
            return Ok(None);
        };
        let name_at = u64::from(u32_at(&shdr, 0));
        if name_at + wanted.len() as u64 > str_size {
            continue;
        }
        file.seek(SeekFrom::Start(str_off + name_at))?;
        if file.read_exact(&mut got).is_ok() && got == wanted {
            // SHT_NOBITS has no contents in the file.
            return Ok((u32_at(&shdr, 4) != 8).then(|| (u64_at(&shdr, 24), u64_at(&shdr, 32))));
        }
    }
    Ok(None)
}

/// One function's entry in a [`MapIndex`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct IndexEntry {
    start: u64,
    /// Its graph's bytes in the map.
    graph: std::ops::Range<u64>,
    graph_hash: u64,
    /// The counters its edges read (empty for none): all zero means it never ran.
    counters: std::ops::Range<usize>,
    /// Its name in [`MapIndex::names`].
    name: std::ops::Range<usize>,
}

/// The contents of [`INDEX_SECTION`], which `rivet instrument` writes beside the map so that
/// a reader decodes only the graphs of functions that ran. Little-endian:
///
/// ```text
/// 0   magic "RIVETIDX"   8   body_hash u64 (FNV-1a of the body)
/// 16  map_hash u64 (the map it indexes)   24  body_len u64
/// 32  body: head_len u64, head_hash u64 (the map's bytes before the first graph),
///     function_count u32, then per function (map order) start u64, graph_offset u64 (in the
///     map), graph_len u32, graph_hash u64, counters_start u32, counters_end u32,
///     name_offset u32, name_len u32; then the names (UTF-8, one after another)
/// ```
///
/// The map hash ties the index to the map (and so to the counter files' headers); the head and
/// each graph carry their own hashes, checked when they are read, so a reader that never reads
/// the whole map still reads nothing unchecked. An older instrumented binary has no index: its
/// map is decoded whole, to the same records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapIndex {
    head_len: u64,
    head_hash: u64,
    entries: Vec<IndexEntry>,
    names: String,
}

impl MapIndex {
    /// Reads an index section, checked against the map it must index (`map_hash`,
    /// `map_size` bytes) and the number of counters; `Err` holds why it cannot be trusted.
    pub fn parse(
        section: &[u8],
        map_hash: u64,
        map_size: usize,
        counter_count: usize,
    ) -> Result<MapIndex, String> {
        let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        if section.len() < INDEX_HEADER || &section[..8] != INDEX_MAGIC {
            return Err("no RIVETIDX header".into());
        }
        if u64_at(section, 16) != map_hash {
            return Err(format!(
                "it indexes another map (map hash {:016x}, the map's is {map_hash:016x})",
                u64_at(section, 16)
            ));
        }
        let body = &section[INDEX_HEADER..];
        if u64_at(section, 24) != body.len() as u64 {
            return Err("its size is not the one it records".into());
        }
        if fnv1a(body) != u64_at(section, 8) {
            return Err("it does not match its hash".into());
        }
        if body.len() < 20 {
            return Err("it ends early".into());
        }
        let head_len = u64_at(body, 0);
        let head_hash = u64_at(body, 8);
        let count = u32_at(body, 16) as usize;
        let table_end = count
            .checked_mul(INDEX_ENTRY)
            .and_then(|n| n.checked_add(20))
            .filter(|&end| end <= body.len())
            .ok_or("its table is longer than the section")?;
        let names = std::str::from_utf8(&body[table_end..]).map_err(|_| "a name is not UTF-8")?;
        if head_len > map_size as u64 {
            return Err("the map's head is longer than the map".into());
        }
        let mut entries = Vec::with_capacity(count);
        for e in body[20..table_end].chunks_exact(INDEX_ENTRY) {
            let graph_start = u64_at(e, 8);
            let graph_end = graph_start.saturating_add(u64::from(u32_at(e, 16)));
            let counters = u32_at(e, 28) as usize..u32_at(e, 32) as usize;
            let name_start = u32_at(e, 36) as usize;
            let name = name_start..name_start + u32_at(e, 40) as usize;
            if graph_start < head_len || graph_end > map_size as u64 {
                return Err("a function's graph lies outside the map".into());
            }
            if counters.start > counters.end || counters.end > counter_count {
                return Err("a function's counters lie outside the counters".into());
            }
            if names.get(name.clone()).is_none() {
                return Err("a function's name lies outside the names".into());
            }
            entries.push(IndexEntry {
                start: u64_at(e, 0),
                graph: graph_start..graph_end,
                graph_hash: u64_at(e, 20),
                counters,
                name,
            });
        }
        Ok(MapIndex {
            head_len,
            head_hash,
            entries,
            names: names.to_string(),
        })
    }
}

/// A version 2 file's map read through its binary's [`MapIndex`]: every function is known by
/// its start and name from the start, its graph decoded only once some run's counters show it
/// ran ([`IndexedMap::decode_ran`]). Functions not decoded yet have no vertices and no edges,
/// which is how [`emit_branches`] sees a function that never ran: so the records are those of
/// the whole map, for every run whose functions that ran were decoded.
#[derive(Debug)]
pub struct IndexedMap {
    index: MapIndex,
    binary: std::path::PathBuf,
    file: std::fs::File,
    /// File offset of the map's first byte in the binary.
    map_offset: u64,
    map: CounterMap,
    decoded: Vec<bool>,
}

impl IndexedMap {
    /// The indexed map of `layout`'s file (a version 2 file), from `instrumented` when given,
    /// else the binary it records; `None` when that binary has no index (written by an older
    /// Rivet): the map is then decoded whole.
    pub fn open(
        layout: &CounterLayout,
        instrumented: Option<&std::path::Path>,
    ) -> Result<Option<IndexedMap>, CountersError> {
        use std::io::{Read, Seek, SeekFrom};
        let (binary, mut file, map_offset) = layout.locate_map(instrumented)?;
        let damaged = |why: String| CountersError::BadIndex {
            binary: binary.display().to_string(),
            why,
        };
        let Some((offset, size)) =
            find_section(&mut file, INDEX_SECTION).map_err(|e| damaged(e.to_string()))?
        else {
            return Ok(None);
        };
        let file_len = file.metadata().map_err(|e| damaged(e.to_string()))?.len();
        if offset.checked_add(size).is_none_or(|end| end > file_len) {
            return Err(damaged("the section lies outside the file".into()));
        }
        let mut section = vec![0u8; size as usize];
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut section))
            .map_err(|e| damaged(e.to_string()))?;
        let index = MapIndex::parse(
            &section,
            layout.map_hash,
            layout.map_size,
            layout.counters.len() / 8,
        )
        .map_err(damaged)?;
        drop(section);
        // The head: build-id, names, symbols, moved entries, the number of graphs.
        file.seek(SeekFrom::Start(map_offset))
            .map_err(|e| damaged(e.to_string()))?;
        let stream = std::io::BufReader::with_capacity(1 << 16, (&mut file).take(index.head_len));
        // Sized as the whole map, so that the head's table counts are checked as a full decode
        // checks them; only the head is streamed (reading past it fails as a short map).
        let mut r = Reader::new(stream, layout.map_size);
        let head = CounterMap::decode_head(&mut r);
        let whole = layout.map_size - r.left == index.head_len as usize;
        if !whole || r.hash != index.head_hash {
            return Err(damaged("the map's head does not match it".into()));
        }
        let (mut map, nfunc) = head?;
        if nfunc != index.entries.len() {
            return Err(damaged("the map's head is not the one it describes".into()));
        }
        if map.counter_count as usize != layout.counters.len() / 8 {
            return Err(CountersError::Malformed(
                "header and map disagree on the number of counters".into(),
            ));
        }
        map.arch = layout.arch;
        map.functions = index
            .entries
            .iter()
            .map(|e| FunctionMap {
                name: index.names[e.name.clone()].to_string(),
                start: e.start,
                vertices: Vec::new(),
                edges: Vec::new(),
                calls: Vec::new(),
                jumps: Vec::new(),
                indirect: Vec::new(),
            })
            .collect();
        let decoded = vec![false; index.entries.len()];
        Ok(Some(IndexedMap {
            index,
            binary,
            file,
            map_offset,
            map,
            decoded,
        }))
    }

    /// The map: every function's start and name, and the graphs decoded so far.
    pub fn map(&self) -> &CounterMap {
        &self.map
    }

    /// How many functions' graphs are decoded.
    pub fn decoded(&self) -> usize {
        self.decoded.iter().filter(|&&d| d).count()
    }

    /// Decodes the graph of every function that ran in `counters` (a counter its edges read is
    /// not zero) and is not decoded yet, each checked against its hash in the index.
    pub fn decode_ran(&mut self, counters: &[u64]) -> Result<(), CountersError> {
        use std::os::unix::fs::FileExt;
        let damaged = |why: String| CountersError::BadIndex {
            binary: self.binary.display().to_string(),
            why,
        };
        let mut buf = Vec::new();
        for (i, e) in self.index.entries.iter().enumerate() {
            if self.decoded[i]
                || counters
                    .get(e.counters.clone())
                    .is_none_or(|c| c.iter().all(|&c| c == 0))
            {
                continue;
            }
            buf.resize((e.graph.end - e.graph.start) as usize, 0);
            self.file
                .read_exact_at(&mut buf, self.map_offset + e.graph.start)
                .map_err(|err| damaged(err.to_string()))?;
            let name = &self.index.names[e.name.clone()];
            if fnv1a(&buf) != e.graph_hash {
                return Err(damaged(format!("the graph of {name} does not match it")));
            }
            let mut r = Reader::unhashed(&buf[..], buf.len());
            let f = CounterMap::decode_function(&mut r, self.map.counter_count)?;
            if r.left != 0 || f.name != name || f.start != e.start {
                return Err(damaged(format!(
                    "the graph of {name} is not the one it names"
                )));
            }
            self.map.functions[i] = f;
            self.decoded[i] = true;
        }
        Ok(())
    }
}

impl CounterFile {
    /// Reads a counter file for its profile: as [`CounterFile::parse_with`], but a version 2
    /// file whose binary has a [`MapIndex`] decodes only the graphs of functions that ran
    /// (the others keep their start and name, all a profile needs of them). Not for callers
    /// that need every function's graph (`reset-counts` needs every call site's table).
    pub fn parse_ran(
        data: &[u8],
        instrumented: Option<&std::path::Path>,
    ) -> Result<CounterFile, CountersError> {
        let layout = CounterLayout::read(data)?;
        if layout.version != VERSION_SELF_CONTAINED
            && let Some(mut indexed) = IndexedMap::open(&layout, instrumented)?
        {
            let counters = layout.counters(data);
            let spilled = layout.spilled(data)?;
            indexed.decode_ran(&counters)?;
            return Ok(CounterFile {
                map: indexed.map,
                map_hash: layout.map_hash,
                counters,
                spilled,
            });
        }
        CounterFile::parse_with(data, instrumented)
    }

    /// Reads a counter file; a version 2 file's map comes from the instrumented binary it
    /// records.
    pub fn parse(data: &[u8]) -> Result<CounterFile, CountersError> {
        CounterFile::parse_with(data, None)
    }

    /// [`CounterFile::parse`], a version 2 file's map taken from `instrumented` when given.
    pub fn parse_with(
        data: &[u8],
        instrumented: Option<&std::path::Path>,
    ) -> Result<CounterFile, CountersError> {
        let layout = CounterLayout::read(data)?;
        let spilled = layout.spilled(data)?;
        Ok(CounterFile {
            map: layout.decode_map(data, instrumented)?,
            map_hash: layout.map_hash,
            counters: layout.counters(data),
            spilled,
        })
    }

    /// Adds another run's counters (same instrumentation), slot by slot: for tests and tools
    /// on runs whose site tables do not matter (a site table is not a sum of counters; a summed
    /// counter file, [`crate::counter_sum`], merges them by target).
    pub fn add(&mut self, other: &CounterFile) -> Result<(), CountersError> {
        if other.map_hash != self.map_hash
            || other.counters.len() != self.counters.len()
            || !self.spilled.is_empty()
            || !other.spilled.is_empty()
        {
            return Err(CountersError::DifferentInstrumentation);
        }
        for (a, b) in self.counters.iter_mut().zip(&other.counters) {
            *a = a.saturating_add(*b);
        }
        Ok(())
    }

    /// Every edge's count, per function (same order as the map's edges).
    pub fn edge_counts(&self) -> Vec<Vec<u64>> {
        self.map
            .functions
            .iter()
            .map(|f| solve_edges(f, &self.counters))
            .collect()
    }

    /// The profile of the input binary these counters describe.
    pub fn to_profile(&self) -> Profile {
        let mut profile = profile_header(&self.map);
        self.emit_branches(|from, to, count| {
            profile.add_branch(from.to_location(), to.to_location(), count, 0)
        });
        profile
    }

    /// The records of [`CounterFile::to_profile`], one by one (see [`emit_branches`]).
    pub fn emit_branches<'m>(&'m self, add: impl FnMut(LocRef<'m>, LocRef<'m>, u64)) {
        emit_counted(&self.map, &self.counters, &self.spilled, add);
    }
}

/// Counts of every edge of `f`: measured ones read from `counters`, the others solved by flow
/// conservation, peeling vertices with a single unknown edge. Inconsistent counts (a thread
/// stopped in the middle of a block) are clamped at zero.
pub fn solve_edges(f: &FunctionMap, counters: &[u64]) -> Vec<u64> {
    let n = f.vertices.len();
    let mut value: Vec<Option<i128>> = f
        .edges
        .iter()
        .map(|e| {
            (e.counter != INFERRED)
                .then(|| i128::from(counters.get(e.counter as usize).copied().unwrap_or(0)))
        })
        .collect();
    // Edges incident to each vertex (a self loop once), packed: vertex v's are
    // `incident[first[v]..first[v + 1]]`.
    let ends = |e: &MapEdge| {
        [
            Some(e.from as usize),
            (e.to != e.from).then_some(e.to as usize),
        ]
    };
    let mut first = vec![0usize; n + 1];
    for e in &f.edges {
        for v in ends(e).into_iter().flatten() {
            first[v + 1] += 1;
        }
    }
    for v in 0..n {
        first[v + 1] += first[v];
    }
    let mut fill = first.clone();
    let mut incident = vec![0usize; first[n]];
    // Per vertex: how many of its edges are unknown, and the xor of their indices (the edge
    // itself when one is left), so that a hub (the outside vertex) is not rescanned per edge.
    let mut unknown = vec![0u32; n];
    let mut unknown_xor = vec![0usize; n];
    for (i, e) in f.edges.iter().enumerate() {
        for v in ends(e).into_iter().flatten() {
            incident[fill[v]] = i;
            fill[v] += 1;
            if value[i].is_none() {
                unknown[v] += 1;
                unknown_xor[v] ^= i;
            }
        }
    }
    let mut queue: Vec<usize> = (0..n).filter(|&v| unknown[v] == 1).collect();
    while let Some(v) = queue.pop() {
        if unknown[v] != 1 {
            continue;
        }
        let edge = unknown_xor[v];
        // in - out = 0 at v; a self loop contributes to both sides and cancels.
        let mut balance: i128 = 0;
        for &i in &incident[first[v]..first[v + 1]] {
            let e = &f.edges[i];
            if i == edge || e.from == e.to {
                continue;
            }
            let c = value[i].unwrap_or(0);
            if e.to as usize == v {
                balance += c;
            } else {
                balance -= c;
            }
        }
        let e = &f.edges[edge];
        if e.from == e.to {
            continue;
        }
        value[edge] = Some(if e.to as usize == v {
            -balance
        } else {
            balance
        });
        for w in [e.from as usize, e.to as usize] {
            unknown[w] -= 1;
            unknown_xor[w] ^= edge;
            if unknown[w] == 1 {
                queue.push(w);
            }
        }
    }
    value
        .into_iter()
        .map(|v| v.map_or(0, |c| c.clamp(0, i128::from(u64::MAX)) as u64))
        .collect()
}

/// Count of each vertex: the sum of its incoming edges.
pub fn vertex_counts(f: &FunctionMap, edge_counts: &[u64]) -> Vec<u64> {
    let mut counts = vec![0u64; f.vertices.len()];
    for (e, c) in f.edges.iter().zip(edge_counts) {
        counts[e.to as usize] = counts[e.to as usize].saturating_add(*c);
    }
    counts
}

/// A location as [`emit_branches`] hands it out: borrowed from the map, so that a caller that
/// sums records (a merge) allocates nothing per record. Orders like [`Location`] (kind, name,
/// offset), so records sorted either way come out alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocRef<'a> {
    pub kind: LocKind,
    pub name: &'a str,
    pub offset: u64,
}

impl<'a> LocRef<'a> {
    pub fn symbol(name: &'a str, offset: u64) -> LocRef<'a> {
        LocRef {
            kind: LocKind::Symbol,
            name,
            offset,
        }
    }

    /// `[unknown]`, as [`Location::unknown`].
    pub fn unknown() -> LocRef<'static> {
        LocRef {
            kind: LocKind::External,
            name: "[unknown]",
            offset: 0,
        }
    }

    pub fn to_location(self) -> Location {
        Location {
            kind: self.kind,
            name: self.name.to_string(),
            offset: self.offset,
        }
    }
}

/// The header of the profile `map`'s counters give (no records).
pub fn profile_header(map: &CounterMap) -> Profile {
    let mut profile = Profile::new(Mode::Branches);
    profile.origin = Origin::Instrumentation;
    profile.build_id = (!map.input_build_id.is_empty()).then(|| hex(&map.input_build_id));
    profile.binary_name = (!map.binary_name.is_empty()).then(|| map.binary_name.clone());
    // Profiles mark AArch64 code and leave x86-64's unmarked (as `rivet aggregate` does), so
    // that an x86-64 profile reads as it always did.
    profile.architecture = match map.arch {
        CounterArch::X86_64 => None,
        CounterArch::Aarch64 => Some(Architecture::Aarch64),
    };
    profile
}

/// The branch-mode profile of the instrumented functions: CFG edges (taken and fall-through,
/// from the last instruction of a block), calls and tail calls to their targets, jumps between
/// split parts, and entries from code the profile does not see (`[unknown]` callers).
pub fn to_profile(map: &CounterMap, counters: &[u64], edge_counts: &[Vec<u64>]) -> Profile {
    let mut profile = profile_header(map);
    emit_branches(
        map,
        counters,
        &[],
        |i, _| Some(edge_counts[i].clone()),
        |from, to, count| profile.add_branch(from.to_location(), to.to_location(), count, 0),
    );
    profile
}

/// [`emit_branches`] of `counters` (and the site targets `spilled` beyond their tables: a
/// summed file's), solving each function's edges as it comes to it and skipping those that
/// never ran.
pub fn emit_counted<'m>(
    map: &'m CounterMap,
    counters: &[u64],
    spilled: &[SpilledTarget],
    add: impl FnMut(LocRef<'m>, LocRef<'m>, u64),
) {
    emit_branches(
        map,
        counters,
        spilled,
        |_, f| (!never_ran(f, counters)).then(|| solve_edges(f, counters)),
        add,
    );
}

/// Whether every counter `f`'s edges read is zero: then so is every edge count (flow solved
/// from zeros is zero), and the function adds nothing to a profile.
fn never_ran(f: &FunctionMap, counters: &[u64]) -> bool {
    f.edges
        .iter()
        .all(|e| e.counter == INFERRED || counters.get(e.counter as usize).is_none_or(|&c| c == 0))
}

/// The records of [`to_profile`], handed to `add` one by one (a record may come more than
/// once: its counts add up). `edge_counts(i, f)` gives the edge counts of function `i` of the
/// map (`solve_edges`), or `None` for a function that never ran; [`CounterFile::emit_branches`]
/// solves them as it goes, skipping functions whose counters are all zero.
pub fn emit_branches<'m>(
    map: &'m CounterMap,
    counters: &[u64],
    spilled: &[SpilledTarget],
    edge_counts: impl Fn(usize, &FunctionMap) -> Option<Vec<u64>>,
    mut add: impl FnMut(LocRef<'m>, LocRef<'m>, u64),
) {
    // Location of an address: inside an instrumented function, or at a known symbol.
    let mut starts: Vec<(u64, &str)> = map
        .symbols
        .iter()
        .map(|(a, n)| (*a, n.as_str()))
        .chain(map.functions.iter().map(|f| (f.start, f.name.as_str())))
        .collect();
    starts.sort_unstable();
    starts.dedup_by_key(|s| s.0);
    let locate = |addr: u64| -> LocRef<'m> {
        let pos = starts.partition_point(|s| s.0 <= addr);
        match pos.checked_sub(1).map(|i| starts[i]) {
            Some((start, name)) => LocRef::symbol(name, addr - start),
            None => LocRef::unknown(),
        }
    };
    // A function starting exactly at an address (recorded indirect call targets), an address
    // of the instrumented binary: moved functions are translated back.
    let function_at = |addr: u64| -> Option<(u64, LocRef<'m>)> {
        let addr = match map.moved_entries.binary_search_by_key(&addr, |m| m.0) {
            Ok(k) => map.moved_entries[k].1,
            Err(_) => addr,
        };
        let pos = starts.partition_point(|s| s.0 < addr);
        starts
            .get(pos)
            .filter(|s| s.0 == addr)
            .map(|s| (addr, LocRef::symbol(s.1, 0)))
    };
    // Entries into each function from its known callers (calls and tail calls), and the
    // entries each function counted.
    let mut known_entries: BTreeMap<u64, u64> = BTreeMap::new();
    let mut entered: Vec<(&'m FunctionMap, u64)> = Vec::new();
    for (i, f) in map.functions.iter().enumerate() {
        let Some(counts) = edge_counts(i, f) else {
            continue;
        };
        let vcounts = vertex_counts(f, &counts);
        let here = |addr: u64| LocRef::symbol(&f.name, addr.wrapping_sub(f.start));
        // An indirect call or tail call at `site`, run `count` times: its recorded targets,
        // the rest to `[unknown]`.
        let indirect_site = |add: &mut dyn FnMut(LocRef<'m>, LocRef<'m>, u64),
                             known_entries: &mut BTreeMap<u64, u64>,
                             from: LocRef<'m>,
                             site: u64,
                             count: u64| {
            let mut known = 0u64;
            if let Ok(k) = f.indirect.binary_search_by_key(&site, |x| x.0) {
                for (target, n) in site_targets(counters, spilled, f.indirect[k].1) {
                    if let Some((target, to)) = function_at(target) {
                        *known_entries.entry(target).or_default() += n;
                        add(from, to, n);
                        known += n;
                    }
                }
            }
            if count > known {
                add(from, LocRef::unknown(), count - known);
            }
        };
        let mut entries = 0u64;
        for (e, &c) in f.edges.iter().zip(&counts) {
            if c == 0 {
                continue;
            }
            match e.kind {
                EdgeKind::Flow => add(here(e.from_addr), here(e.to_addr), c),
                EdgeKind::TailCall if e.to_addr == 0 => indirect_site(
                    &mut add,
                    &mut known_entries,
                    here(e.from_addr),
                    e.from_addr,
                    c,
                ),
                EdgeKind::TailCall | EdgeKind::ToFragment if e.to_addr != 0 => {
                    if e.kind == EdgeKind::TailCall {
                        *known_entries.entry(e.to_addr).or_default() += c;
                    }
                    add(here(e.from_addr), locate(e.to_addr), c);
                }
                EdgeKind::Entry if e.to_addr == f.start => entries = entries.saturating_add(c),
                _ => {}
            }
        }
        for call in &f.calls {
            let c = vcounts[call.vertex as usize];
            if c == 0 {
                continue;
            }
            if call.target == 0 {
                indirect_site(&mut add, &mut known_entries, here(call.at), call.at, c);
                continue;
            }
            *known_entries.entry(call.target).or_default() += c;
            add(here(call.at), locate(call.target), c);
        }
        indirect_jumps(f, &counts, &mut add);
        if entries > 0 {
            entered.push((f, entries));
        }
    }
    // Entries not explained by known callers come from `[unknown]`.
    for (f, entries) in entered {
        let known = known_entries.get(&f.start).copied().unwrap_or(0);
        if entries > known {
            add(
                LocRef::unknown(),
                LocRef::symbol(&f.name, 0),
                entries - known,
            );
        }
    }
}

/// The (target, count) pairs recorded in the site table at word `table`, and those `spilled`
/// lists for it (a summed file's); targets that found no free pair are left out (they stay
/// with `[unknown]`).
fn site_targets(counters: &[u64], spilled: &[SpilledTarget], table: u32) -> Vec<(u64, u64)> {
    let start = table as usize;
    let Some(words) = counters.get(start..start + SITE_WORDS as usize) else {
        return Vec::new();
    };
    let first = spilled.partition_point(|s| s.table < table);
    let more = spilled[first..].iter().take_while(|s| s.table == table);
    words[..2 * SITE_TARGETS as usize]
        .chunks_exact(2)
        .filter(|p| p[0] != 0 && p[1] != 0)
        .map(|p| (p[0], p[1]))
        .chain(more.map(|s| (s.target, s.count)))
        .collect()
}

/// Edges of indirect jumps: each target's count split among the jumps that can reach it, in
/// proportion to how often each jump ran (exact when a target has one jump, the usual switch).
fn indirect_jumps<'m>(
    f: &'m FunctionMap,
    counts: &[u64],
    add: &mut impl FnMut(LocRef<'m>, LocRef<'m>, u64),
) {
    if f.jumps.is_empty() {
        return;
    }
    let jumps: BTreeMap<u64, u64> = f
        .edges
        .iter()
        .zip(counts)
        .filter(|(e, _)| e.kind == EdgeKind::IndirectJump)
        .map(|(e, c)| (e.from_addr, *c))
        .collect();
    let mut sources: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for &(jump, target) in &f.jumps {
        sources.entry(target).or_default().push(jump);
    }
    let here = |addr: u64| LocRef::symbol(&f.name, addr.wrapping_sub(f.start));
    for (e, &count) in f.edges.iter().zip(counts) {
        if e.kind != EdgeKind::IndirectTarget || count == 0 {
            continue;
        }
        let Some(from) = sources.get(&e.to_addr) else {
            continue;
        };
        let weight = |s: &u64| u128::from(jumps.get(s).copied().unwrap_or(0));
        let total: u128 = from.iter().map(weight).sum();
        let mut left = count;
        for (k, s) in from.iter().enumerate() {
            let share = if k + 1 == from.len() {
                left
            } else {
                (u128::from(count) * weight(s))
                    .checked_div(total)
                    .unwrap_or(0) as u64
            };
            left -= share.min(left);
            if share > 0 {
                add(here(*s), here(e.to_addr), share);
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f: entry A (0x10) -> loop B (0x20) <-> back; B -> C (0x30) ret. A calls g at 0x15.
    fn looping() -> FunctionMap {
        let e = |from, to, kind, from_addr, to_addr, counter| MapEdge {
            from,
            to,
            kind,
            from_addr,
            to_addr,
            counter,
        };
        FunctionMap {
            name: "f".into(),
            start: 0x10,
            // 0 outside, 1 = A before call, 2 = A after call, 3 = B, 4 = C
            vertices: vec![0, 0x10, 0x1a, 0x20, 0x30],
            edges: vec![
                e(0, 1, EdgeKind::Entry, 0, 0x10, 2),
                e(1, 2, EdgeKind::CallReturn, 0x15, 0x1a, INFERRED),
                e(1, 0, EdgeKind::CallUnwound, 0x15, 0, INFERRED),
                e(2, 3, EdgeKind::Flow, 0x1c, 0x20, INFERRED),
                e(3, 3, EdgeKind::Flow, 0x2e, 0x20, 0),
                e(3, 4, EdgeKind::Flow, 0x2e, 0x30, INFERRED),
                e(4, 0, EdgeKind::Return, 0x30, 0, 1),
            ],
            calls: vec![MapCall {
                vertex: 1,
                at: 0x15,
                target: 0x100,
            }],
            jumps: Vec::new(),
            indirect: Vec::new(),
        }
    }

    #[test]
    fn tree_edges_follow_from_measured_ones() {
        let f = looping();
        // 3 calls, loop taken 7 times in all.
        let counts = solve_edges(&f, &[7, 3, 3]);
        assert_eq!(counts, vec![3, 3, 0, 3, 7, 3, 3]);
        assert_eq!(vertex_counts(&f, &counts), vec![3, 3, 3, 10, 3]);
    }

    #[test]
    fn a_call_that_never_returned_is_attributed_to_its_call() {
        let f = looping();
        // Two complete runs, then one killed inside the call to g: the call that never
        // returned takes the difference, every other edge is exact.
        let counts = solve_edges(&f, &[5, 2, 3]);
        assert_eq!(counts, vec![3, 2, 1, 2, 5, 2, 2]);
    }

    #[test]
    fn merging_counters_directly_matches_merging_their_profiles() {
        use crate::merge::{Merger, Weight};
        let mut never = looping();
        never.name = "h".into();
        never.start = 0x200;
        never.vertices = vec![0, 0x200, 0x20a, 0x210, 0x220];
        for e in &mut never.edges {
            if e.counter != INFERRED {
                e.counter += 3;
            }
            e.from_addr = e.from_addr.wrapping_add(0x1f0);
            e.to_addr = e.to_addr.wrapping_add(0x1f0);
        }
        never.calls[0].at = 0x205;
        let map = CounterMap {
            input_build_id: vec![1, 2],
            binary_name: "prog".into(),
            counter_count: 6,
            functions: vec![looping(), never],
            symbols: vec![(0x10, "f".into()), (0x100, "g".into())],
            ..CounterMap::default()
        };
        let runs: [&[u64]; 3] = [
            &[7, 3, 3, 0, 0, 0],
            &[5, 2, 3, 1, 1, 1],
            &[1, 1, 1, 0, 0, 0],
        ];
        for weights in [["1", "1", "1"], ["3", "0.5", "0.25"]] {
            let mut old = Merger::new();
            let mut new = Merger::new();
            for (run, w) in runs.iter().zip(weights) {
                let w: Weight = w.parse().unwrap();
                let file = CounterFile {
                    map: map.clone(),
                    map_hash: 0,
                    counters: run.to_vec(),
                    spilled: Vec::new(),
                };
                old.add(file.to_profile(), w).unwrap();
                new.add_counters(&map, run, &[], w).unwrap();
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            old.write_native(&mut a).unwrap();
            new.write_native(&mut b).unwrap();
            assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
        }
    }

    #[test]
    fn version_2_files_name_the_binary_that_holds_their_map() {
        let map = CounterMap {
            input_build_id: vec![0xab],
            binary_name: "prog".into(),
            counter_count: 3,
            functions: vec![looping()],
            symbols: vec![(0x10, "f".into())],
            ..CounterMap::default()
        };
        let binary = std::path::Path::new("/nonexistent/dir/prog.inst");
        let prefix = map.file_prefix(binary).unwrap();
        assert_eq!(prefix.counters_offset, 4096);
        assert_eq!(prefix.bytes.len(), 4096);
        let mut file = prefix.bytes.clone();
        for c in [7u64, 3, 3] {
            file.extend_from_slice(&c.to_le_bytes());
        }
        let layout = CounterLayout::read(&file).unwrap();
        assert_eq!(layout.version, VERSION);
        assert_eq!(layout.instrumented.as_deref(), Some(binary));
        assert_eq!(layout.counters(&file), vec![7, 3, 3]);
        // The section holds the map the header describes.
        let section = &prefix.map_section;
        assert_eq!(&section[..8], MAP_MAGIC);
        assert_eq!(section[8..16], layout.map_hash.to_le_bytes());
        assert_eq!(section.len() - MAP_SECTION_HEADER, layout.map_size);
        let decoded = layout
            .decode_map_from(&section[MAP_SECTION_HEADER..])
            .unwrap();
        assert_eq!(decoded, map);
        // A binary that is not there is named, with the map's hash.
        match CounterFile::parse(&file) {
            Err(CountersError::MapElsewhere {
                binary: b,
                hash,
                why,
            }) => {
                assert_eq!(b, binary.display().to_string());
                assert_eq!(hash, layout.map_hash);
                assert_eq!(why, "is missing");
            }
            other => panic!("{other:?}"),
        }
        // Every truncation is an error, never a panic; so is a path too long to record.
        for len in 0..file.len() {
            assert!(CounterLayout::read(&file[..len]).is_err(), "len {len}");
        }
        let long = std::path::PathBuf::from("/".repeat(MAX_IDENTITY_PATH + 1));
        assert!(map.file_prefix(&long).is_none());
    }

    #[test]
    fn the_index_describes_the_map_and_rejects_damage() {
        let mut never = looping();
        never.name = "h".into();
        never.start = 0x200;
        never.vertices = vec![0, 0x200, 0x20a, 0x210, 0x220];
        for e in &mut never.edges {
            if e.counter != INFERRED {
                e.counter += 3;
            }
            e.from_addr = e.from_addr.wrapping_add(0x1f0);
            e.to_addr = e.to_addr.wrapping_add(0x1f0);
        }
        never.calls[0].at = 0x205;
        let map = CounterMap {
            input_build_id: vec![0xab],
            binary_name: "prog".into(),
            counter_count: 6,
            functions: vec![looping(), never],
            symbols: vec![(0x10, "f".into())],
            ..CounterMap::default()
        };
        let prefix = map
            .file_prefix(std::path::Path::new("/x/prog.inst"))
            .unwrap();
        let section = &prefix.index_section;
        let map_bytes = &prefix.map_section[MAP_SECTION_HEADER..];
        let hash = fnv1a(map_bytes);
        let index = MapIndex::parse(section, hash, map_bytes.len(), 6).unwrap();
        // Each entry finds its function's graph, hash and counters (f reads 0..3, h 3..6).
        assert_eq!(index.entries.len(), 2);
        for (e, f) in index.entries.iter().zip(&map.functions) {
            assert_eq!(e.start, f.start);
            assert_eq!(&index.names[e.name.clone()], f.name);
            let graph = &map_bytes[e.graph.start as usize..e.graph.end as usize];
            assert_eq!(fnv1a(graph), e.graph_hash);
            let mut r = Reader::new(graph, graph.len());
            assert_eq!(&CounterMap::decode_function(&mut r, 6).unwrap(), f);
        }
        assert_eq!(index.entries[0].counters, 0..3);
        assert_eq!(index.entries[1].counters, 3..6);
        assert_eq!(
            fnv1a(&map_bytes[..index.head_len as usize]),
            index.head_hash
        );
        // Another map, fewer counters, every truncation and every flipped byte: an error.
        assert!(MapIndex::parse(section, hash ^ 1, map_bytes.len(), 6).is_err());
        assert!(MapIndex::parse(section, hash, map_bytes.len(), 5).is_err());
        for len in 0..section.len() {
            assert!(MapIndex::parse(&section[..len], hash, map_bytes.len(), 6).is_err());
        }
        for at in 0..section.len() {
            let mut bad = section.clone();
            bad[at] ^= 0x01;
            assert!(
                MapIndex::parse(&bad, hash, map_bytes.len(), 6).is_err(),
                "byte {at}"
            );
        }
    }

    #[test]
    fn map_and_file_round_trip() {
        let map = CounterMap {
            arch: CounterArch::X86_64,
            input_build_id: vec![0xab, 0xcd],
            binary_name: "prog".into(),
            counter_count: 3,
            functions: vec![looping()],
            symbols: vec![(0x10, "f".into()), (0x100, "g".into())],
            moved_entries: vec![(0x9010, 0x10)],
        };
        let (mut file, offset) = map.file_prefix_self_contained();
        assert_eq!(offset % 4096, 0);
        file.extend_from_slice(&7u64.to_le_bytes());
        file.extend_from_slice(&3u64.to_le_bytes());
        file.extend_from_slice(&3u64.to_le_bytes());
        let parsed = CounterFile::parse(&file).unwrap();
        assert_eq!(parsed.map, map);
        assert_eq!(parsed.counters, vec![7, 3, 3]);
        // x86-64's header is the one written before architectures were recorded.
        assert_eq!(file[12..16], [0; 4]);
        // AArch64 is marked, round-trips, and an unknown architecture is refused.
        let arm = CounterMap {
            arch: CounterArch::Aarch64,
            ..map.clone()
        };
        let (mut arm_file, _) = arm.file_prefix_self_contained();
        arm_file.extend_from_slice(&file[offset as usize..]);
        assert_eq!(arm_file[12..16], 1u32.to_le_bytes());
        let arm_parsed = CounterFile::parse(&arm_file).unwrap();
        assert_eq!(arm_parsed.map.arch, CounterArch::Aarch64);
        // The profile says so too; an x86-64 one stays unmarked.
        assert_eq!(
            arm_parsed.to_profile().architecture,
            Some(crate::model::Architecture::Aarch64)
        );
        assert_eq!(parsed.to_profile().architecture, None);
        arm_file[12] = 9;
        assert!(matches!(
            CounterFile::parse(&arm_file),
            Err(CountersError::Malformed(_))
        ));
        let profile = parsed.to_profile();
        assert_eq!(profile.build_id.as_deref(), Some("abcd"));
        let count =
            |from: Location, to: Location| profile.branches.get(&(from, to)).map(|c| c.count);
        assert_eq!(
            count(Location::symbol("f", 0x1e), Location::symbol("f", 0x10)),
            Some(7)
        );
        assert_eq!(
            count(Location::symbol("f", 0x1e), Location::symbol("f", 0x20)),
            Some(3)
        );
        assert_eq!(
            count(Location::symbol("f", 0x5), Location::symbol("g", 0)),
            Some(3)
        );
        // Entries of f: 3 from unknown callers.
        assert_eq!(
            count(Location::unknown(), Location::symbol("f", 0)),
            Some(3)
        );
        // Every truncation is an error, never a panic.
        for len in 0..file.len() {
            assert!(CounterFile::parse(&file[..len]).is_err(), "len {len}");
        }
    }
}
