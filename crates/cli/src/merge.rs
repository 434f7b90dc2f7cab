//! `rivet merge`: sum profiles of one binary (several runs, several workloads, a fleet of
//! hosts) into one, each input weighted.
//!
//! Inputs may be the counter files instrumented binaries write, Rivet profiles, or BOLT fdata;
//! BOLT YAML profiles merge only with each other (they are keyed by block index, not address).
//! An input is `PATH` or `PATH:WEIGHT`: only a trailing `:NUMBER` is a weight, so paths with
//! colons elsewhere need nothing, and a path that itself ends in `:NUMBER` is given as
//! `PATH:1`. Inputs are read one at a time and folded into the sum before the next is read,
//! and the sum is written out record by record in Rivet's format (fdata and YAML outputs are
//! built whole first), so thousands of inputs merge in the memory of about one profile.
//! Counter files build no profile at all: their records go straight into the sum
//! (`Merger::add_counters`), and their map (in the instrumented binary the file names, or
//! `--instrumented`; in the file itself for version 1 files) is decoded once for all the runs
//! of one instrumentation, as it streams in; when the binary indexes its map per function
//! (`.rivet.mapidx`), only the graphs of functions that ran in some input are decoded. The
//! bytes written are those the profiles would give. The merged profile needs no binary: it is
//! how counts outlive the instrumented binary.
//!
//! **Summed counter files** (`--format counters`, the default for a `.counts` output): counter
//! files of one instrumented binary (same map hash) added counter by counter into one counter
//! file (`rivet_profile::counter_sum`), which every reader of counter files takes as one run's.
//! It is the profile of one process that ran all the runs: no map is decoded, no profile is
//! built, each input is read a chunk at a time and the sum written a chunk at a time; counts
//! add exactly (an overflow is an error) and weights must be whole numbers.
//!
//! With `--binary`, the functions' code hashes of the build the profiles were taken on go into
//! the output (Rivet's format only), which lets `optimize` carry the profile over to a later
//! build (stale matching, `rivet_passes::stale`). BOLT YAML inputs merged with `--binary` are
//! put on that binary (`rivet_passes::bolt_yaml`) and written in Rivet's format.
//!
//! The output is sorted and independent of the order and grouping of the inputs, so the same
//! inputs always give the same bytes, however a fleet splits the work. Mixing branch and
//! sample profiles, or profiles of different builds, is an error naming the inputs; nothing is
//! written then.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rivet_profile::counter_sum::{SumError, SumInput, SumPlan, check_spilled, summed_prefix};
use rivet_profile::counters::{
    CounterLayout, CounterMap, HEADER_SIZE, IndexedMap, PREFIX_READ, SpilledTarget,
    VERSION_SELF_CONTAINED, is_counter_file, parse_spill,
};
use rivet_profile::merge::{MergeError, Merger, Weight, WriteError, YamlMerger};
use rivet_profile::{fdata, native, yaml};

use crate::error::UserError;
use crate::files::PendingOutput;
use crate::profile_use::{
    FormatArg, Input, bad_counters, hashes_from_binary, read_profile_bytes, yaml_with_hashes,
};

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Profiles to sum: counter files, Rivet profiles, fdata, or BOLT YAML. PATH:WEIGHT
    /// multiplies an input's counts by WEIGHT (3, 0.5, ...; rounded to the nearest integer,
    /// halves to even; records that round to 0 are dropped). Only a trailing :NUMBER is a
    /// weight: give a path ending in :NUMBER as PATH:1.
    #[arg(required_unless_present = "inputs_from", value_name = "PATH[:WEIGHT]")]
    pub inputs: Vec<OsString>,
    /// Also read inputs from this file, one PATH[:WEIGHT] a line (for more inputs than a
    /// command line holds); `-` reads standard input.
    #[arg(long, value_name = "FILE")]
    pub inputs_from: Option<PathBuf>,
    /// Where to write the merged profile.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Output format (default: fdata for a .fdata output, YAML for .yaml, a summed counter
    /// file for .counts, else Rivet's).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// The binary the profiles were taken on: the hashes of its functions' code go into the
    /// merged profile (Rivet's format), so that the next build of the program can use it.
    #[arg(long, value_name = "BINARY")]
    pub binary: Option<PathBuf>,
    /// The instrumented binary whose runs wrote the counter files (it holds their map), when
    /// it is no longer where `rivet instrument -o` wrote it.
    #[arg(long, value_name = "PATH")]
    pub instrumented: Option<PathBuf>,
}

/// Splits `PATH:WEIGHT` into the path and its weight; anything else is a path of weight 1.
fn input_spec(arg: &OsStr) -> Result<(PathBuf, Weight), UserError> {
    let bytes = arg.as_bytes();
    if let Some(colon) = bytes.iter().rposition(|&b| b == b':') {
        let (path, suffix) = (&bytes[..colon], &bytes[colon + 1..]);
        // A number-like suffix is meant as a weight: a bad one is an error, not a path.
        let numeric = !suffix.is_empty() && suffix.iter().all(|b| b.is_ascii_digit() || *b == b'.');
        if numeric && !path.is_empty() {
            let text = std::str::from_utf8(suffix).unwrap_or_default();
            let weight: Weight = text.parse().map_err(|e| {
                UserError::new(format!("{}: {e}", arg.to_string_lossy())).hint(
                    "a weight is a positive decimal number (3, 0.5); a path that ends in :NUMBER is given as PATH:1",
                )
            })?;
            return Ok((PathBuf::from(OsStr::from_bytes(path)), weight));
        }
    }
    Ok((PathBuf::from(arg), Weight::ONE))
}

/// The inputs of the command line, then those of `--inputs-from`.
fn input_specs(args: &MergeArgs) -> Result<Vec<(PathBuf, Weight)>, UserError> {
    let mut specs = Vec::new();
    for arg in &args.inputs {
        specs.push(input_spec(arg)?);
    }
    if let Some(list) = &args.inputs_from {
        let text = if list == Path::new("-") {
            let mut text = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut text).map(|_| text)
        } else {
            std::fs::read(list)
        }
        .map_err(|e| {
            UserError::new(format!("cannot read {}: {e}", list.display()))
                .hint("check the path and its permissions")
        })?;
        for line in text.split(|&b| b == b'\n') {
            if !line.is_empty() {
                specs.push(input_spec(OsStr::from_bytes(line))?);
            }
        }
    }
    if specs.is_empty() {
        return Err(UserError::new(format!(
            "{} lists no inputs",
            args.inputs_from
                .as_deref()
                .unwrap_or(Path::new("-"))
                .display()
        ))
        .hint("list one PATH[:WEIGHT] a line"));
    }
    Ok(specs)
}

/// The sum so far: address-based or YAML, decided by the first input.
enum Sum {
    Located(Merger),
    Yaml(YamlMerger),
}

pub fn run(args: &MergeArgs) -> Result<(), UserError> {
    let format =
        args.format
            .unwrap_or_else(|| match args.output.extension().and_then(|e| e.to_str()) {
                Some("fdata") => FormatArg::Fdata,
                Some("yaml" | "yml") => FormatArg::Yaml,
                Some("counts") => FormatArg::Counters,
                _ => FormatArg::Rivet,
            });
    if args.binary.is_some() && format != FormatArg::Rivet {
        return Err(UserError::new(
            "--binary adds code hashes, which only Rivet's profile format holds",
        )
        .hint("write the merged profile with --format rivet"));
    }
    let specs = input_specs(args)?;
    if format == FormatArg::Counters {
        return sum_counter_files(args, &specs);
    }
    let describe = |e: &MergeError| {
        UserError::new(e.render(&|i| specs[i - 1].0.display().to_string()))
            .hint("merge profiles of one build and of one kind")
    };
    // One input at a time: read, fold in, drop.
    let mut sum: Option<Sum> = None;
    let mut maps = MapCache::default();
    for (path, weight) in &specs {
        let input = match read_input(path, args.instrumented.as_deref(), &mut maps)? {
            Some(input) => input,
            None => {
                // A counter file: its records go straight into the sum, no profile is built.
                let merger = match &mut sum {
                    None if format == FormatArg::Yaml => return Err(located_as_yaml()),
                    None => match sum.insert(Sum::Located(Merger::new())) {
                        Sum::Located(merger) => merger,
                        Sum::Yaml(_) => unreachable!("just made a located sum"),
                    },
                    Some(Sum::Located(merger)) => merger,
                    Some(Sum::Yaml(_)) => return Err(yaml_with_located(path)),
                };
                let (map, counters) = maps.current();
                merger
                    .add_counters(map, counters, &maps.spilled, *weight)
                    .map_err(|e| describe(&e))?;
                continue;
            }
        };
        match (input, &mut sum) {
            (Input::Located(p), None) => {
                if format == FormatArg::Yaml {
                    return Err(located_as_yaml());
                }
                let mut merger = Merger::new();
                merger.add(p, *weight).map_err(|e| describe(&e))?;
                sum = Some(Sum::Located(merger));
            }
            (Input::Yaml(y), None) => {
                if format != FormatArg::Yaml && args.binary.is_none() {
                    return Err(UserError::new("YAML profiles merge into YAML only")
                        .hint("use --format yaml"));
                }
                let mut merger = YamlMerger::new();
                merger.add(y, *weight).map_err(|e| describe(&e))?;
                sum = Some(Sum::Yaml(merger));
            }
            (Input::Located(p), Some(Sum::Located(merger))) => {
                merger.add(p, *weight).map_err(|e| describe(&e))?
            }
            (Input::Yaml(y), Some(Sum::Yaml(merger))) => {
                merger.add(y, *weight).map_err(|e| describe(&e))?
            }
            _ => return Err(yaml_with_located(path)),
        }
    }
    let text = match sum {
        None => return Err(UserError::new("no profiles to merge")),
        Some(Sum::Yaml(merger)) if args.binary.is_some() => {
            // Put on the binary they were taken on, with its code hashes: Rivet's format.
            let binary = args.binary.as_deref().unwrap_or(Path::new(""));
            let merged = merger.finish().map_err(|e| describe(&e))?;
            let profile = yaml_with_hashes(binary, &merged)?;
            native::write(&profile).map_err(|e| UserError::new(e.to_string()))?
        }
        Some(Sum::Yaml(merger)) => yaml::write(&merger.finish().map_err(|e| describe(&e))?),
        Some(Sum::Located(merger)) => match format {
            // Streamed from the sum to the file: the whole profile is never held at once.
            FormatArg::Rivet => {
                let mut merger = merger;
                if let Some(binary) = &args.binary {
                    let hashes = hashes_from_binary(binary, merger.build_id(), merger.names())?;
                    merger.set_hashes(hashes);
                }
                return write_streamed(merger, &args.output, &describe);
            }
            FormatArg::Fdata => {
                let merged = merger.finish().map_err(|e| describe(&e))?;
                fdata::write(&merged).map_err(|e| UserError::new(e.to_string()))?
            }
            FormatArg::Yaml => return Err(located_as_yaml()),
            FormatArg::Counters => unreachable!("summed before any profile is read"),
        },
    };
    let (pending, file) = PendingOutput::create(&args.output)?;
    pending.finish(file, text.as_bytes(), 0o644)?;
    Ok(())
}

/// Writes the sum in Rivet's format to `output`, record by record, atomically.
fn write_streamed(
    merger: Merger,
    output: &Path,
    describe: &dyn Fn(&MergeError) -> UserError,
) -> Result<(), UserError> {
    let io_error = |e: std::io::Error| {
        UserError::new(format!("cannot write {}: {e}", output.display()))
            .hint("check the free space of its file system")
    };
    let (pending, file) = PendingOutput::create(output)?;
    let mut out = BufWriter::new(file);
    merger.write_native(&mut out).map_err(|e| match e {
        WriteError::Merge(e) => describe(&e),
        WriteError::Native(e) => UserError::new(e.to_string()),
        WriteError::Io(e) => io_error(e),
    })?;
    let file = out.into_inner().map_err(|e| io_error(e.into_error()))?;
    pending.finish(file, b"", 0o644)
}

fn yaml_with_located(path: &Path) -> UserError {
    UserError::new(format!(
        "{}: BOLT YAML profiles cannot be merged with address-based ones (counter files, Rivet profiles, fdata)",
        path.display()
    ))
    .hint("merge the YAML profiles on their own, or give Rivet the fdata ones")
}

/// The last counter map decoded (with where it came from and the header of the file that
/// named it), and the counters of the last counter file read. Runs of one instrumentation
/// need the same map; so a merge of many decodes it once, and holds no file whole. A version 1
/// file carries its map: a later file's is compared byte for byte (a chunk at a time) with the
/// file the map was decoded from, not only by its hash. A version 2 file names the binary that
/// holds it: the same header (so the same map hash) and the same binary need nothing read.
///
/// A binary that indexes its map ([`IndexedMap`]) gives the map piecewise: each run's counters
/// say which functions ran, and only the graphs of those not decoded for an earlier run are
/// read, so the union over the runs is decoded, once each.
#[derive(Default)]
struct MapCache {
    source: Option<(MapSource, [u8; HEADER_SIZE])>,
    map: CounterMap,
    /// The map of the current source when its binary has an index (`map` is unused then).
    indexed: Option<IndexedMap>,
    counters: Vec<u64>,
    /// The spilled site targets of the last counter file read (a summed file's).
    spilled: Vec<SpilledTarget>,
}

#[derive(PartialEq, Eq)]
enum MapSource {
    /// A version 1 counter file.
    CounterFile(PathBuf),
    /// An instrumented binary.
    Binary(PathBuf),
}

impl MapCache {
    fn current(&self) -> (&CounterMap, &[u64]) {
        match &self.indexed {
            Some(indexed) => (indexed.map(), &self.counters),
            None => (&self.map, &self.counters),
        }
    }
}

/// Opens `path` and reads its first `PREFIX_READ` bytes (fewer for a shorter file): enough to
/// tell a counter file and read its header. Also the file's length.
fn open_with_prefix(path: &Path) -> std::io::Result<(File, u64, Vec<u8>)> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut prefix = vec![0u8; PREFIX_READ];
    let got = read_up_to(&mut file, &mut prefix)?;
    prefix.truncate(got);
    Ok((file, len, prefix))
}

/// Reads one input: a counter file goes into `maps` (`None`), anything else is a profile.
/// `instrumented` holds the map of version 2 counter files, when given.
fn read_input(
    path: &Path,
    instrumented: Option<&Path>,
    maps: &mut MapCache,
) -> Result<Option<Input>, UserError> {
    let cannot_read = |e: std::io::Error| {
        UserError::new(format!("cannot read {}: {e}", path.display()))
            .hint("check the path and its permissions")
    };
    let (mut file, len, mut prefix) = open_with_prefix(path).map_err(cannot_read)?;
    if !is_counter_file(&prefix) {
        file.read_to_end(&mut prefix).map_err(cannot_read)?;
        return read_profile_bytes(path, &prefix, instrumented).map(Some);
    }
    let layout = CounterLayout::from_header(&prefix, len).map_err(|e| bad_counters(path, e))?;
    let mut header = [0u8; HEADER_SIZE];
    header.copy_from_slice(&prefix[..HEADER_SIZE]);
    if layout.version != VERSION_SELF_CONTAINED {
        // The map is the binary's: runs and summed files of it (their version and spill count
        // differ) need it decoded once.
        header[8..12].fill(0);
        header[48..].fill(0);
    }
    let source = match layout.map_binary(instrumented) {
        Some(binary) => MapSource::Binary(binary.to_path_buf()),
        None => MapSource::CounterFile(path.to_path_buf()),
    };
    let same = match (&maps.source, &source) {
        (Some((old, old_header)), MapSource::Binary(_)) => *old_header == header && *old == source,
        (Some((MapSource::CounterFile(old), old_header)), MapSource::CounterFile(_))
            if *old_header == header =>
        {
            let mut old = File::open(old).map_err(cannot_read)?;
            same_bytes(&mut old, &mut file, &layout).map_err(cannot_read)?
        }
        _ => false,
    };
    if !same {
        maps.source = None;
        maps.indexed = None;
        // The old map goes before the next is decoded.
        maps.map = CounterMap::default();
        // Decoded as it streams in: the map's bytes are never all held beside the map.
        maps.map = match &source {
            MapSource::Binary(_) => {
                match IndexedMap::open(&layout, instrumented).map_err(|e| bad_counters(path, e))? {
                    Some(indexed) => {
                        maps.indexed = Some(indexed);
                        Ok(CounterMap::default())
                    }
                    None => {
                        let (_, stream) = layout
                            .open_map(instrumented)
                            .map_err(|e| bad_counters(path, e))?;
                        layout.decode_map_from(stream)
                    }
                }
            }
            MapSource::CounterFile(_) => {
                file.seek(SeekFrom::Start(layout.map.start as u64))
                    .map_err(cannot_read)?;
                let stream =
                    BufReader::with_capacity(1 << 16, (&mut file).take(layout.map.len() as u64));
                layout.decode_map_from(stream)
            }
        }
        .map_err(|e| bad_counters(path, e))?;
        maps.source = Some((source, header));
    }
    // The counters, a chunk at a time: their bytes are never all held beside them.
    file.seek(SeekFrom::Start(layout.counters.start as u64))
        .map_err(cannot_read)?;
    let mut chunk = vec![0u8; 1 << 16];
    let mut left = layout.counters.len();
    maps.counters.clear();
    maps.counters.reserve(left / 8);
    while left > 0 {
        let n = left.min(chunk.len());
        file.read_exact(&mut chunk[..n]).map_err(cannot_read)?;
        maps.counters.extend(
            chunk[..n]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
        );
        left -= n;
    }
    maps.spilled = read_spill(&mut file, &layout)
        .map_err(cannot_read)?
        .map_err(|e| bad_counters(path, e))?;
    if let Some(indexed) = &mut maps.indexed
        && let Err(e) = indexed.decode_ran(&maps.counters)
    {
        // A half-decoded map is not to be reused by a later input.
        maps.source = None;
        maps.indexed = None;
        return Err(bad_counters(path, e));
    }
    Ok(None)
}

/// The spilled site targets of a summed counter file (none for other versions), checked.
fn read_spill(
    file: &mut File,
    layout: &CounterLayout,
) -> std::io::Result<Result<Vec<SpilledTarget>, rivet_profile::counters::CountersError>> {
    if layout.spill.is_empty() {
        return Ok(Ok(Vec::new()));
    }
    let mut bytes = vec![0u8; layout.spill.len()];
    file.seek(SeekFrom::Start(layout.spill.start as u64))?;
    file.read_exact(&mut bytes)?;
    Ok(parse_spill(&bytes, layout.counters.len() / 8))
}

/// A counter file opened for a sum.
struct Summand {
    path: PathBuf,
    file: File,
    layout: CounterLayout,
    weight: u64,
    spilled: Vec<SpilledTarget>,
}

/// Linux's "too many open files" (`EMFILE`).
const EMFILE: i32 = 24;

/// The hint of every input a summed counter file cannot take.
const AS_PROFILE: &str = "merge into a profile instead (-o merged.prof, or --format rivet), which takes any mix of counter files and profiles";

/// `--format counters`: the inputs, counter files of one instrumentation, summed counter by
/// counter into a summed counter file, written atomically.
fn sum_counter_files(args: &MergeArgs, specs: &[(PathBuf, Weight)]) -> Result<(), UserError> {
    let mut summands: Vec<Summand> = Vec::with_capacity(specs.len());
    for (path, weight) in specs {
        let cannot_read = |e: std::io::Error| {
            // Every input stays open while the sum streams through them all.
            let hint = if e.raw_os_error() == Some(EMFILE) {
                "more inputs than this process may open at once (ulimit -n): sum them in groups, then sum the partial sums (the same bytes)"
            } else {
                "check the path and its permissions"
            };
            UserError::new(format!("cannot read {}: {e}", path.display())).hint(hint)
        };
        let (mut file, len, prefix) = open_with_prefix(path).map_err(cannot_read)?;
        if !is_counter_file(&prefix) {
            return Err(UserError::new(format!(
                "{} is not a counter file: a summed counter file adds counter files only",
                path.display()
            ))
            .hint(AS_PROFILE));
        }
        let layout = CounterLayout::from_header(&prefix, len).map_err(|e| bad_counters(path, e))?;
        if layout.version == VERSION_SELF_CONTAINED {
            return Err(UserError::new(format!(
                "{} is a version 1 counter file (it carries its map): a summed counter file adds files whose map is in the instrumented binary",
                path.display()
            ))
            .hint(AS_PROFILE));
        }
        let Some(weight) = weight.whole() else {
            return Err(UserError::new(format!(
                "{}:{weight}: a summed counter file holds whole counts, so its weights are whole numbers",
                path.display()
            ))
            .hint("use a whole weight (2, 3); or merge into a profile instead (-o merged.prof), which rounds each record"));
        };
        if let Some(first) = summands.first() {
            let (a, b) = (&first.layout, &layout);
            if (a.arch, a.map_hash, a.map_size, a.counters.len())
                != (b.arch, b.map_hash, b.map_size, b.counters.len())
            {
                return Err(UserError::new(format!(
                    "{} comes from another instrumentation than {} (map hash {:016x}, not {:016x})",
                    path.display(),
                    first.path.display(),
                    b.map_hash,
                    a.map_hash
                ))
                .hint("sum the counter files of one instrumented binary; runs of different instrumentations merge into a profile (-o merged.prof)"));
            }
        }
        let spilled = read_spill(&mut file, &layout)
            .map_err(cannot_read)?
            .map_err(|e| bad_counters(path, e))?;
        summands.push(Summand {
            path: path.clone(),
            file,
            layout,
            weight,
            spilled,
        });
    }
    let first = &summands[0];
    let plan = SumPlan::for_layout(&first.layout, args.instrumented.as_deref())
        .map_err(|e| bad_counters(&first.path, e))?;
    for s in &summands {
        check_spilled(&plan, &s.spilled).map_err(|e| bad_counters(&s.path, e))?;
    }
    // The binary the sum names: the one given, else the least of those the inputs name (a
    // rule that, like the sums, does not depend on the order or grouping of the inputs).
    let binary = match &args.instrumented {
        Some(given) => given.canonicalize().map_err(|e| {
            UserError::new(format!("cannot read {}: {e}", given.display()))
                .hint("--instrumented names the instrumented binary that holds the map")
        })?,
        None => summands
            .iter()
            .filter_map(|s| s.layout.instrumented.clone())
            .min()
            .unwrap_or_default(),
    };
    let prefix = summed_prefix(
        first.layout.arch,
        plan.counter_count,
        first.layout.map_size,
        first.layout.map_hash,
        &binary,
    )
    .ok_or_else(|| {
        UserError::new(format!(
            "the path of the instrumented binary {} is too long for a counter file",
            binary.display()
        ))
        .hint("move the instrumented binary to a shorter path and pass --instrumented PATH")
    })?;
    let mut inputs = Vec::with_capacity(summands.len());
    let mut paths = Vec::with_capacity(summands.len());
    for s in summands {
        let mut file = s.file;
        file.seek(SeekFrom::Start(s.layout.counters.start as u64))
            .map_err(|e| {
                UserError::new(format!("cannot read {}: {e}", s.path.display()))
                    .hint("check the path and its permissions")
            })?;
        inputs.push(SumInput {
            counters: file.take(s.layout.counters.len() as u64),
            weight: s.weight,
            spilled: s.spilled,
        });
        paths.push(s.path);
    }
    let io_error = |e: std::io::Error| {
        UserError::new(format!("cannot write {}: {e}", args.output.display()))
            .hint("check the free space of its file system")
    };
    let (pending, file) = PendingOutput::create(&args.output)?;
    let mut out = BufWriter::with_capacity(1 << 17, file);
    rivet_profile::counter_sum::write_summed(&plan, &prefix, &mut inputs, &mut out).map_err(
        |e| match e {
            SumError::Overflow { input, counter } => UserError::new(format!(
                "{}: with it, counter {counter} of the sum passes 2^64 - 1",
                paths[input].display()
            ))
            .hint("a summed counter file holds exact counts; merge into a profile instead (-o merged.prof), whose counts saturate"),
            SumError::Read { input, error } => {
                UserError::new(format!("cannot read {}: {error}", paths[input].display()))
                    .hint("was the file cut short while being read? check it and try again")
            }
            SumError::Write(e) => io_error(e),
        },
    )?;
    let file = out.into_inner().map_err(|e| io_error(e.into_error()))?;
    pending.finish(file, b"", 0o644)
}

/// Reads as much of `buf` as the file holds.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// Whether the bytes between the header and the counters of `a` and `b` (same header, so
/// same layout) are the same.
fn same_bytes(a: &mut File, b: &mut File, layout: &CounterLayout) -> std::io::Result<bool> {
    const CHUNK: usize = 1 << 16;
    let (mut x, mut y) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut at = layout.map.start as u64;
    let end = layout.counters.start as u64;
    a.seek(SeekFrom::Start(at))?;
    b.seek(SeekFrom::Start(at))?;
    while at < end {
        let n = CHUNK.min((end - at) as usize);
        a.read_exact(&mut x[..n])?;
        b.read_exact(&mut y[..n])?;
        if x[..n] != y[..n] {
            return Ok(false);
        }
        at += n as u64;
    }
    Ok(true)
}

fn located_as_yaml() -> UserError {
    UserError::new("address-based profiles cannot be written as YAML without the binary's CFG")
        .hint("write --format rivet or fdata")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(arg: &str) -> (PathBuf, String) {
        let (path, weight) = input_spec(OsStr::new(arg)).unwrap();
        (path, weight.to_string())
    }

    #[test]
    fn only_a_trailing_number_is_a_weight() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(spec("a.prof"), (p("a.prof"), "1".into()));
        assert_eq!(spec("a.prof:3"), (p("a.prof"), "3".into()));
        assert_eq!(spec("old.prof:0.5"), (p("old.prof"), "0.5".into()));
        assert_eq!(spec("host:a.prof"), (p("host:a.prof"), "1".into()));
        assert_eq!(spec("/d/x:y/a.prof:2"), (p("/d/x:y/a.prof"), "2".into()));
        assert_eq!(spec("run:2:1"), (p("run:2"), "1".into()));
        assert_eq!(spec("a.prof:"), (p("a.prof:"), "1".into()));
        assert_eq!(spec(":3"), (p(":3"), "1".into()));
        assert_eq!(spec("a:b.c:x1"), (p("a:b.c:x1"), "1".into()));
        for bad in [
            "a.prof:0",
            "a.prof:1.2.3",
            "a.prof:.5",
            "a.prof:1.0000000001",
        ] {
            let e = input_spec(OsStr::new(bad)).unwrap_err();
            assert!(e.message.starts_with(bad), "{}", e.message);
        }
    }
}
