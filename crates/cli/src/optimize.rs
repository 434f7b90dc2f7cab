//! `rivet optimize`: the product. Reads a binary and its profile, lays the profiled code out
//! anew (block order, hot/cold split, function order; `rivet_passes::optimize`) and writes the
//! faster binary, like `rivet rewrite` writes its outputs: to a temporary file renamed into
//! place, never over the input.
//!
//! llvm-bolt's spellings are accepted as well (`-data=P -reorder-blocks=ext-tsp ...`), so an
//! existing recipe works by changing the program's name: [`translate_bolt_args`] turns BOLT's
//! single-dash options into ours before parsing, and drops the BOLT options Rivet does not
//! implement with a warning instead of failing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rivet_discover::{
    CfiRows, DiscoverError, DiscoverOptions, Instructions, Models, discover_models,
};
use rivet_elf::ElfFile;
use rivet_emit::rewrite::{LayoutSource, RewriteOptions, TextAlignment, rewrite_into};
use rivet_ir::layout::{Layout, PltCalls};
use rivet_ir::{FuncId, Program};
use rivet_layout::LandingPads;
use rivet_passes::attach::AttachedProfile;
use rivet_passes::dyno::{
    DynoStats, count_promoted_calls, dyno_stats, format_comparison, move_plt_calls_via_got,
};
use rivet_passes::optimize::{
    BlockAlignment, BlockOrder, FunctionOrder, OptimizeOptions, Splitting, optimized_layout,
};

use crate::error::{UserError, elf_error, rewrite_error};
use crate::files::{PendingOutput, map_input, mode_of, same_file};
use crate::profile_use::{
    attach_loaded, describe_stale, load_profile, partial_match_warning, stale_json, stale_notice,
};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOrderArg {
    /// Extended TSP (Newell & Pupyrev): hot paths fall through, taken jumps stay short.
    #[value(name = "ext-tsp", alias = "cache+")]
    ExtTsp,
    /// Keep the input's block order (functions can still be split and reordered).
    None,
    /// Entry block first, the others reversed (for testing).
    Reverse,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionOrderArg {
    /// Cache-directed sort (lld's and BOLT's cdsort).
    Cdsort,
    /// Call-chain clustering (C3, BOLT's hfsort).
    #[value(alias = "c3")]
    Hfsort,
    /// Most often entered functions first.
    ExecCount,
    /// Keep the input's order.
    None,
    /// The order of the file given with --function-order (one function name per line).
    User,
}

/// Which calls into PLT stubs go straight through the GOT (BOLT's `-plt`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PltArg {
    /// Leave every call to a PLT stub as it is.
    None,
    /// Calls in hot code: `call *slot(%rip)` instead of `call stub` (the stub's GOT slot).
    Hot,
    /// Calls in all rewritten code, cold fragments included.
    All,
}

/// How AArch64 conditional branches reach blocks of another fragment (`--aarch64-islands`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IslandsArg {
    /// Straight to the block when the whole new text is within the branch's reach (1 MiB
    /// for `b.cond`/`cbz`/`cbnz`, 32 KiB for `tbz`/`tbnz`), through an island otherwise.
    Auto,
    /// Always through an island, a `b` after the branch's own fragment.
    Always,
}

/// Which of BOLT's peepholes `--peepholes` runs (BOLT's `-peepholes`, a comma-separated list).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeepholeArg {
    /// None of them.
    None,
    /// A branch to a block that only jumps on goes straight to the end of the chain.
    DoubleJumps,
    /// BOLT's traps after indirect tail calls: not implemented by Rivet (ignored, warned).
    TailcallTraps,
    /// A conditional jump whose two sides lead to the same block becomes a jump (dropped when
    /// that block comes next).
    UselessBranches,
    /// Rivet's own: a jump to a block that only returns becomes that `ret`.
    JumpsToReturns,
    /// double-jumps, useless-branches and jumps-to-returns.
    All,
}

/// Which blocks `--tail-duplication` copies into the blocks that jump to them (BOLT's
/// `-tail-duplication`; docs/passes.md).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailDupArg {
    /// Nothing.
    None,
    /// Tails that return or tail-call, more than 64 bytes away from the jump.
    Moderate,
    /// Also tails that jump on, at any distance.
    Aggressive,
    /// Only where the hot path loses a taken branch (tails that leave the function, or jump
    /// on to the block placed after the copy).
    Cache,
}

/// What `--indirect-call-promotion` promotes (BOLT's `-indirect-call-promotion`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcpArg {
    /// Nothing.
    None,
    /// Indirect calls: the hottest callees compared and called directly.
    Calls,
    /// Jump tables, hottest cases first: not implemented by Rivet (ignored, warned).
    JumpTables,
    /// Calls (jump tables are not implemented: warned).
    All,
}

/// A `bool` option that also takes `=true`/`=false` (`=1`/`=0`), as BOLT's do.
fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(format!("expected true or false, got {s:?}")),
    }
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "llvm-bolt's spellings work too: rivet optimize app -o app.bolt \
    -data=app.fdata -reorder-blocks=ext-tsp -reorder-functions=cdsort -split-functions \
    -split-all-cold -split-eh -dyno-stats"
)]
pub struct OptimizeArgs {
    /// The ELF executable or shared library to optimize (never modified).
    pub binary: PathBuf,
    /// Where to write the optimized binary.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// The profile: a counter file of `rivet instrument`, a Rivet profile, or BOLT fdata.
    #[arg(long, visible_alias = "data")]
    pub profile: PathBuf,
    /// The instrumented binary whose runs wrote the counter file (it holds the file's map),
    /// when it is no longer where `rivet instrument -o` wrote it.
    #[arg(long, value_name = "PATH")]
    pub instrumented: Option<std::path::PathBuf>,
    /// Block order inside each function.
    #[arg(long, value_enum, default_value_t = BlockOrderArg::ExtTsp)]
    pub reorder_blocks: BlockOrderArg,
    /// Function order in the hot text.
    #[arg(long, value_enum, default_value_t = FunctionOrderArg::Cdsort)]
    pub reorder_functions: FunctionOrderArg,
    /// With --reorder-functions=user: the file listing functions in order (BOLT's format: one
    /// name per line, `name/N` profile names accepted).
    #[arg(long)]
    pub function_order: Option<PathBuf>,
    /// Move cold blocks out of functions, to after all hot code. Default: on with a branch
    /// profile (instrumentation, branch stacks), off with plain timer samples, where a block
    /// without samples may well have run: splitting on such a profile moved running code out
    /// of the hot text (SQLite sampled at 20 kHz: 3 times the fully associative I1 misses, and
    /// 3.4% slower on its unseen input, `rivet bench`, 30 rounds).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool)]
    pub split_functions: Option<bool>,
    /// Move every cold block out, not only the cold blocks at the end of the order.
    #[arg(long, default_value = "true", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool)]
    pub split_all_cold: bool,
    /// Landing pads (C++ exception handlers) that never ran go cold too.
    #[arg(long, default_value = "true", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool)]
    pub split_eh: bool,
    /// Every landing pad goes cold, whatever its count.
    #[arg(long)]
    pub cold_landing_pads: bool,
    /// Blocks executed fewer times than this are cold; functions none of whose blocks ran
    /// this often are left where they are.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub min_hot_count: u64,
    /// Alignment of each hot function in the new text (a power of two).
    #[arg(long, default_value_t = 16)]
    pub align_functions: u64,
    /// Most padding bytes spent aligning one function; beyond, it is aligned to 16 at most
    /// (default: --align-functions minus one, i.e. always aligned).
    #[arg(long)]
    pub align_functions_max_bytes: Option<u64>,
    /// Align hot loop heads: blocks run more than --align-blocks-threshold percent as often
    /// as their function is entered, and mostly reached by jumps. The padding goes after an
    /// earlier jump, where it never runs, when there is one since the last aligned block;
    /// otherwise right before the block. On by default, unlike BOLT: on SQLite it made the
    /// optimized binary about 1% faster here (docs/from-bolt.md), for under 1% more hot code.
    #[arg(long, default_value = "true", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool)]
    pub align_blocks: bool,
    /// With --align-blocks: the boundary (a power of two, at most --align-functions; default
    /// 16 bytes, or --align-functions if that is smaller).
    #[arg(long)]
    pub block_alignment: Option<u16>,
    /// With --align-blocks: how often, in percent of its function's entries, a block must run.
    #[arg(long, default_value_t = 800)]
    pub align_blocks_threshold: u64,
    /// Align the hot text to 2 MiB at both ends, for huge pages (`__hot_start`/`__hot_end`
    /// mark it in any case).
    #[arg(long)]
    pub hot_text: bool,
    /// Map the hot text on transparent huge pages at start-up (implies --hot-text): generated
    /// code, run before `main` (from the entry point, or `DT_INIT` of a library), copies the
    /// hot text to a 2 MiB page asked for with madvise(MADV_HUGEPAGE) and moves it over the
    /// original addresses. When THP is off (`never`, or disabled for the process) or anything
    /// fails, the program runs as without it. Off by default (docs/passes.md).
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool)]
    pub hugify: bool,
    /// Start the first hot function this many bytes (a multiple of 64) past the hot text's
    /// aligned start. It moves all hot code to other instruction-cache sets relative to shared
    /// libraries and code left in place: a way to measure how much cache misses depend on
    /// where the layout lands (bench/icache-offsets.sh), not a tuning knob.
    #[arg(long, default_value_t = 0)]
    pub hot_text_offset: u64,
    /// Spend up to this many bytes (a multiple of 16, at most 4096; 0: off) of padding before
    /// a hot function to spread the hottest cache lines evenly over the sets of the target's
    /// L1 instruction cache (x86-64: 32 KiB 8-way; AArch64: the Neoverse N1's 64 KiB 4-way),
    /// so that no set holds more of them than it has ways. The
    /// default, 64, lowered simulated I1 misses over 16 placements on Lua and SQLite, and did
    /// better than 256 (docs/icache-offsets.md).
    #[arg(long, default_value_t = 64)]
    pub cache_set_padding: u64,
    /// Calls (and tail calls) into PLT stubs made through the stub's GOT slot instead: the
    /// same function is reached without the stub's jump. Works with lazy binding and with
    /// `-z now` alike. Off by default, as in BOLT: here it saved Lua 0.25% of its
    /// instructions, but its allocation-heavy benchmark (binarytrees) ran 8% slower in one
    /// measurement and no differently in two others, one of 200 rounds (docs/from-bolt.md).
    #[arg(long, value_enum, default_value_t = PltArg::None)]
    pub plt: PltArg,
    /// AArch64: how a conditional branch goes to a block of another fragment of its function
    /// (the hot part's exits to the cold part). `auto`: straight there when the whole new
    /// text (hot and cold, with every padding, bounded before placement) spans less than the
    /// branch's reach, through an island (a `b` after the hot fragment) otherwise; `always`:
    /// through an island (docs/aarch64-benchmark.md). No effect on x86-64.
    #[arg(long, value_enum, default_value_t = IslandsArg::Auto, require_equals = true)]
    pub aarch64_islands: IslandsArg,
    /// Keep the model of functions that stay (their instructions, blocks and calls) instead
    /// of releasing it after the profile is attached. Changes nothing in the output, only
    /// memory: for the tests that prove that.
    #[arg(long, hide = true)]
    pub keep_whole_model: bool,
    /// Fold functions with identical code into one copy (safe mode: a function whose address
    /// is taken is never folded away). Folded functions are not emitted in the new text; their
    /// calls go to the kept copy and their old entries forward to it. x86-64, relocation mode.
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool)]
    pub icf: bool,
    /// Peepholes over the finished layout (BOLT's `-peepholes`): a comma-separated list of
    /// double-jumps, useless-branches, jumps-to-returns (Rivet's own), all, none;
    /// `--peepholes` alone is `all`. x86-64. Off by default (docs/passes.md).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0..=1, require_equals = true, default_missing_value = "all")]
    pub peepholes: Vec<PeepholeArg>,
    /// A conditional jump to a block that only tail-calls a function becomes a conditional
    /// jump to that function, where the profile saw it taken (BOLT's SCTC). x86-64. Off by
    /// default (docs/passes.md).
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_bool)]
    pub simplify_conditional_tail_calls: bool,
    /// Indirect call promotion (BOLT's `-indirect-call-promotion`, `-icp`): at a hot indirect
    /// call site whose profiled callees are concentrated, compare the target with the hottest
    /// ones and call them directly; the original call stays as the fallback. `calls` or
    /// `all` (jump tables are not implemented). x86-64. Off by default (docs/passes.md).
    #[arg(long, value_enum, default_value_t = IcpArg::None, require_equals = true)]
    pub indirect_call_promotion: IcpArg,
    /// Callees compared at most per promoted call site (BOLT's `-icp-calls-topn`).
    #[arg(long, default_value_t = 3)]
    pub icp_calls_topn: usize,
    /// A promoted callee makes at least this percentage of its site's calls.
    #[arg(long, default_value_t = 30.0)]
    pub icp_calls_total_percent_threshold: f64,
    /// A promoted callee makes at least this percentage of the calls the hotter promoted
    /// callees leave.
    #[arg(long, default_value_t = 50.0)]
    pub icp_calls_remaining_percent_threshold: f64,
    /// A call site is promoted only when the profile saw it make at least this many calls
    /// (Rivet's; BOLT has none).
    #[arg(long, default_value_t = 100)]
    pub icp_min_calls: u64,
    /// Tail duplication (BOLT's `-tail-duplication`): a hot jump to a small block that
    /// returns, tail-calls or jumps on becomes a copy of that block. x86-64, relocation mode.
    /// Off by default (docs/passes.md).
    #[arg(long, value_enum, default_value_t = TailDupArg::None, require_equals = true)]
    pub tail_duplication: TailDupArg,
    /// Largest block `--tail-duplication` copies, in bytes (BOLT's
    /// `-tail-duplication-maximum-duplication`).
    #[arg(long, default_value_t = 24)]
    pub tail_duplication_maximum_duplication: u64,
    /// A jump is replaced by a copy only when the profile saw it taken at least this often.
    #[arg(long, default_value_t = 1)]
    pub tail_duplication_min_count: u64,
    /// Only optimize these functions (comma-separated names or regular expressions, matched
    /// against whole names; `name/N` profile names work too).
    #[arg(long, value_delimiter = ',')]
    pub funcs: Vec<String>,
    /// Leave these functions alone (names or regular expressions, like --funcs).
    #[arg(long, value_delimiter = ',')]
    pub skip_funcs: Vec<String>,
    /// Print execution statistics (instructions, branches, calls...) before and after.
    #[arg(long)]
    pub dyno_stats: bool,
    /// Use a profile of another build as it is, by name and offset (without --force such a
    /// profile is matched to this build by its code hashes).
    #[arg(long)]
    pub force: bool,
    /// Re-read the output and check every rewritten function against the input.
    #[arg(long)]
    pub verify: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the wall time of each phase on stderr.
    #[arg(long)]
    pub timings: bool,
}

/// BOLT options Rivet understands, with whether they take a value.
const BOLT_OPTIONS: &[(&str, bool)] = &[
    ("data", true),
    ("reorder-blocks", true),
    ("reorder-functions", true),
    ("function-order", true),
    ("split-functions", false),
    ("split-all-cold", false),
    ("split-eh", false),
    ("dyno-stats", false),
    ("funcs", true),
    ("skip-funcs", true),
    ("align-functions", true),
    ("align-functions-max-bytes", true),
    ("hot-text", false),
    ("hugify", false),
    ("align-blocks", false),
    ("block-alignment", true),
    ("align-blocks-threshold", true),
    ("plt", true),
    ("icf", false),
    ("peepholes", true),
    ("simplify-conditional-tail-calls", false),
    ("indirect-call-promotion", true),
    ("icp-calls-topn", true),
    ("icp-calls-total-percent-threshold", true),
    ("icp-calls-remaining-percent-threshold", true),
    ("tail-duplication", true),
    ("tail-duplication-maximum-duplication", true),
];

/// BOLT options that are other spellings of one above.
const BOLT_ALIASES: &[(&str, &str)] = &[
    ("icp", "indirect-call-promotion"),
    ("indirect-call-promotion-calls-topn", "icp-calls-topn"),
    ("indirect-call-promotion-topn", "icp-calls-topn"),
];

/// BOLT options that Rivet honours by design, silently: DWARF is always updated.
const BOLT_IMPLIED: &[&str] = &["update-debug-sections"];

/// Turns llvm-bolt's single-dash options (`-data=P`, `-split-functions`) into Rivet's
/// (`--data=P`, `--split-functions`). BOLT options Rivet does not implement are dropped, each
/// with a warning (returned); values BOLT names differently are mapped (also with a warning).
/// Arguments after `--` and Rivet's own options pass unchanged.
pub fn translate_bolt_args(args: Vec<OsString>) -> (Vec<OsString>, Vec<String>) {
    let mut out = Vec::with_capacity(args.len());
    let mut warnings = Vec::new();
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            out.push(arg);
            out.extend(iter.by_ref());
            break;
        }
        // Single dash, then a name of two or more characters: BOLT's (LLVM's) style.
        let Some(rest) = text.strip_prefix('-').filter(|r| {
            !r.starts_with('-') && r.len() >= 2 && r.as_bytes()[0].is_ascii_alphabetic()
        }) else {
            out.push(arg);
            continue;
        };
        let (name, value) = match rest.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (rest, None),
        };
        if BOLT_IMPLIED.contains(&name) {
            continue;
        }
        let name = BOLT_ALIASES
            .iter()
            .find(|(alias, _)| *alias == name)
            .map_or(name, |(_, n)| n);
        match BOLT_OPTIONS.iter().find(|(n, _)| *n == name) {
            Some(&(_, takes_value)) => {
                let value = match value {
                    Some(v) => Some(v.to_string()),
                    None if takes_value => iter.next().and_then(|v| v.into_string().ok()),
                    None => None,
                };
                let value = value.map(|v| map_bolt_value(name, &v, &mut warnings));
                out.push(OsString::from(match value {
                    Some(v) => format!("--{name}={v}"),
                    None => format!("--{name}"),
                }));
            }
            None => warnings.push(format!(
                "ignoring llvm-bolt option -{rest}: Rivet does not implement it"
            )),
        }
    }
    (out, warnings)
}

/// BOLT values Rivet names differently or does not have.
fn map_bolt_value(name: &str, value: &str, warnings: &mut Vec<String>) -> String {
    let mapped = match (name, value) {
        ("reorder-blocks", "normal" | "branch-predictor" | "cache" | "cluster-size") => {
            Some("ext-tsp")
        }
        ("reorder-blocks", "reverse") => Some("reverse"),
        ("reorder-functions", "hfsort+" | "pettis-hansen") => Some("hfsort"),
        ("reorder-functions", "random") => Some("none"),
        _ => None,
    };
    match mapped {
        Some(m) => {
            warnings.push(format!(
                "-{name}={value} is not implemented by Rivet; using {m}"
            ));
            m.to_string()
        }
        None => value.to_string(),
    }
}

/// Resolves --funcs / --skip-funcs patterns: an exact name (symbol, qualified `name/file`, or
/// profile name `name/N`), else a regular expression matched against the whole name.
struct FunctionFilter {
    exact: Vec<String>,
    regexes: Vec<regex::Regex>,
}

impl FunctionFilter {
    fn new(patterns: &[String], option: &str) -> Result<Self, UserError> {
        let mut regexes = Vec::new();
        for p in patterns {
            // Anchored: BOLT matches -funcs/-skip-funcs against the whole name.
            match regex::Regex::new(&format!("^(?:{p})$")) {
                Ok(r) => regexes.push(r),
                Err(e) => {
                    return Err(UserError::new(format!(
                        "--{option}: {p:?} is neither a function name nor a valid regular expression: {}",
                        e.to_string().lines().last().unwrap_or_default()
                    ))
                    .hint("escape special characters with a backslash"));
                }
            }
        }
        Ok(FunctionFilter {
            exact: patterns.to_vec(),
            regexes,
        })
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty()
    }

    fn matches(&self, program: &Program, names: &[String], f: FuncId) -> bool {
        let func = program.function(f);
        let qualified = func.qualified_name();
        let candidates = func
            .names
            .iter()
            .map(String::as_str)
            .chain([qualified.as_str(), names[f.0 as usize].as_str()]);
        candidates
            .clone()
            .any(|n| self.exact.iter().any(|e| e == n))
            || candidates
                .into_iter()
                .any(|n| self.regexes.iter().any(|r| r.is_match(n)))
    }
}

/// Reads BOLT's function order file: one name per line; blank lines and `#` comments ignored.
fn read_function_order(
    path: &Path,
    program: &Program,
    names: &[String],
) -> Result<(Vec<FuncId>, usize), UserError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UserError::new(format!("cannot read {}: {e}", path.display()))
            .hint("--function-order takes a text file with one function name per line")
    })?;
    let mut by_name = std::collections::HashMap::new();
    for f in &program.functions {
        for n in &f.names {
            by_name.entry(n.clone()).or_insert(f.id);
        }
        by_name.entry(f.qualified_name()).or_insert(f.id);
        by_name.insert(names[f.id.0 as usize].clone(), f.id);
    }
    let mut order = Vec::new();
    let mut unknown = 0;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match by_name.get(line) {
            Some(f) => order.push(*f),
            None => unknown += 1,
        }
    }
    Ok((order, unknown))
}

fn options_from(
    args: &OptimizeArgs,
    program: &Program,
    names: &[String],
    attached: &AttachedProfile,
    warnings: &mut Vec<String>,
) -> Result<OptimizeOptions, UserError> {
    let function_order = match (args.reorder_functions, &args.function_order) {
        (FunctionOrderArg::User, None) => {
            return Err(
                UserError::new("--reorder-functions=user needs a function list")
                    .hint("give it with --function-order FILE (one function name per line)"),
            );
        }
        (FunctionOrderArg::User, Some(path)) => {
            let (order, unknown) = read_function_order(path, program, names)?;
            if unknown > 0 {
                warnings.push(format!(
                    "{}: {unknown} names are not functions of {}",
                    path.display(),
                    args.binary.display()
                ));
            }
            FunctionOrder::User(order)
        }
        (other, Some(path)) => {
            warnings.push(format!(
                "--function-order {} is ignored: the function order is {other:?}, not user",
                path.display()
            ));
            function_order_of(other)
        }
        (other, None) => function_order_of(other),
    };
    if !args.align_functions.is_power_of_two() || args.align_functions > 4096 {
        return Err(UserError::new(format!(
            "--align-functions {} is not a power of two up to 4096",
            args.align_functions
        ))
        .hint("use 1, 16, 32 or 64"));
    }
    // Whole cache lines, under 1 MiB: offsets within 4096 bytes already reach every set.
    if !args.hot_text_offset.is_multiple_of(64) || args.hot_text_offset >= 1 << 20 {
        return Err(UserError::new(format!(
            "--hot-text-offset {} is not a multiple of 64 below 1048576",
            args.hot_text_offset
        ))
        .hint("offsets from 0 to 4032 in steps of 64 reach every instruction-cache set"));
    }
    if !args.cache_set_padding.is_multiple_of(16) || args.cache_set_padding > 4096 {
        return Err(UserError::new(format!(
            "--cache-set-padding {} is not a multiple of 16 up to 4096",
            args.cache_set_padding
        ))
        .hint("0 turns the balancing off; 256 lets each function move by up to 4 sets"));
    }
    if let Some(alignment) = args.block_alignment
        && args.align_blocks
        && (!alignment.is_power_of_two() || u64::from(alignment) > args.align_functions)
    {
        return Err(UserError::new(format!(
            "--block-alignment {} is not a power of two up to --align-functions {}",
            alignment, args.align_functions
        ))
        .hint("blocks are aligned inside functions: raise --align-functions too"));
    }
    // Unasked, block alignment follows a smaller function alignment down (both are powers of
    // two, checked above).
    let block_alignment = args.block_alignment.unwrap_or_else(|| {
        let default = BlockAlignment::default().alignment;
        default.min(u16::try_from(args.align_functions).unwrap_or(default))
    });
    Ok(OptimizeOptions {
        block_order: match args.reorder_blocks {
            BlockOrderArg::ExtTsp => BlockOrder::ExtTsp,
            BlockOrderArg::None => BlockOrder::None,
            BlockOrderArg::Reverse => BlockOrder::Reverse,
        },
        function_order,
        splitting: match (split_functions(args, attached), args.split_all_cold) {
            (false, _) => Splitting::Off,
            (true, false) => Splitting::HotCold,
            (true, true) => Splitting::AllCold,
        },
        landing_pads: if args.cold_landing_pads {
            LandingPads::AllCold
        } else if args.split_eh {
            LandingPads::ByCount
        } else {
            LandingPads::StayHot
        },
        min_hot_count: args.min_hot_count,
        align_blocks: args.align_blocks.then_some(BlockAlignment {
            alignment: block_alignment,
            threshold_percent: args.align_blocks_threshold,
        }),
    })
}

/// Pay for what moves: only a function whose family (it and its compiler-split parts) has a
/// profile can be rewritten, so the instructions and blocks of every other function are
/// released (`Program::release`): most of a large program's model, held to the end
/// otherwise. The emitter and `--verify` decode what they still read of their instructions
/// again from the input.
/// Identical code folding compares every function, so `--icf` keeps them all (`keep`).
/// Returns how many functions were released.
fn release_model_of_code_that_stays(
    program: &mut rivet_ir::Program,
    attached: &AttachedProfile,
    keep: bool,
) -> usize {
    if keep {
        return 0;
    }
    let profiled =
        program.families_holding((0..program.functions.len() as u32).map(FuncId).filter(|f| {
            attached
                .functions
                .get(f.0 as usize)
                .is_some_and(Option::is_some)
        }));
    program.release(|f| !profiled[f.id.0 as usize]);
    crate::allocator::return_freed_memory();
    // Discovery may have released most of them already (`Models::NamedFamilies`).
    program.functions.iter().filter(|f| f.is_released()).count()
}

/// Whether functions are split: as asked, else unless the counts were inferred from plain
/// samples. Zero samples is not zero executions: a block the timer missed may run thousands of
/// times, and the cold fragment would take it out of the hot text.
fn split_functions(args: &OptimizeArgs, attached: &AttachedProfile) -> bool {
    args.split_functions.unwrap_or(!attached.inferred)
}

/// Whether `--icf` folds anything here: it is asked for, and the code is x86-64 (the rule
/// compares instruction bytes with their x86-64 PC-relative fields masked, `rivet_passes::icf`).
fn icf_mode(args: &OptimizeArgs, program: &Program, warnings: &mut Vec<String>) -> bool {
    if !args.icf {
        return false;
    }
    if program.info.isa != rivet_arch::Isa::X86_64 {
        warnings.push(
            "--icf: identical code folding is implemented for x86-64 only; nothing is folded"
                .to_string(),
        );
        return false;
    }
    if program.info.relocation_mode != rivet_ir::RelocationMode::Available {
        warnings.push(
            "--icf needs relocations (calls to a folded function must be redirected); nothing is folded"
                .to_string(),
        );
        return false;
    }
    true
}

/// The rewrites `--peepholes` and `--simplify-conditional-tail-calls` ask for, on code they
/// are implemented for (x86-64); a warning for what is asked and not done.
fn peephole_options(
    args: &OptimizeArgs,
    program: &Program,
    warnings: &mut Vec<String>,
) -> rivet_passes::peephole::PeepholeOptions {
    let mut o = rivet_passes::peephole::PeepholeOptions {
        conditional_tail_calls: args.simplify_conditional_tail_calls,
        ..Default::default()
    };
    for p in &args.peepholes {
        match p {
            PeepholeArg::None => {}
            PeepholeArg::DoubleJumps => o.double_jumps = true,
            PeepholeArg::UselessBranches => o.useless_branches = true,
            PeepholeArg::JumpsToReturns => o.jumps_to_returns = true,
            PeepholeArg::TailcallTraps => warnings.push(
                "--peepholes=tailcall-traps is not implemented by Rivet; ignored".to_string(),
            ),
            PeepholeArg::All => {
                o.double_jumps = true;
                o.useless_branches = true;
                o.jumps_to_returns = true;
            }
        }
    }
    if o.any() && program.info.isa != rivet_arch::Isa::X86_64 {
        warnings.push(
            "--peepholes and --simplify-conditional-tail-calls are implemented for x86-64 only; nothing is changed"
                .to_string(),
        );
        return Default::default();
    }
    o
}

/// What `--tail-duplication` asks for, where it is implemented (x86-64, relocation mode; the
/// pass itself does nothing in place); a warning otherwise.
fn tail_dup_options(
    args: &OptimizeArgs,
    program: &Program,
    warnings: &mut Vec<String>,
) -> rivet_passes::taildup::TailDupOptions {
    use rivet_passes::taildup::{TailDupMode, TailDupOptions};
    let mode = match args.tail_duplication {
        TailDupArg::None => TailDupMode::None,
        TailDupArg::Moderate => TailDupMode::Moderate,
        TailDupArg::Aggressive => TailDupMode::Aggressive,
        TailDupArg::Cache => TailDupMode::Cache,
    };
    let options = TailDupOptions {
        mode,
        max_bytes: args.tail_duplication_maximum_duplication,
        min_count: args.tail_duplication_min_count,
    };
    if mode != TailDupMode::None && program.info.isa != rivet_arch::Isa::X86_64 {
        warnings.push(
            "--tail-duplication is implemented for x86-64 only; nothing is duplicated".to_string(),
        );
        return TailDupOptions::default();
    }
    options
}

/// What `--indirect-call-promotion` asks for, where it is implemented (x86-64 calls); a
/// warning for what is asked and not done.
fn icp_options(
    args: &OptimizeArgs,
    program: &Program,
    warnings: &mut Vec<String>,
) -> rivet_passes::icp::IcpOptions {
    let calls = matches!(args.indirect_call_promotion, IcpArg::Calls | IcpArg::All);
    if matches!(
        args.indirect_call_promotion,
        IcpArg::JumpTables | IcpArg::All
    ) {
        warnings.push(
            "--indirect-call-promotion: jump tables are not promoted by Rivet; ignored".to_string(),
        );
    }
    if calls && program.info.isa != rivet_arch::Isa::X86_64 {
        warnings.push(
            "--indirect-call-promotion is implemented for x86-64 only; nothing is changed"
                .to_string(),
        );
        return Default::default();
    }
    rivet_passes::icp::IcpOptions {
        calls,
        topn: args.icp_calls_topn,
        total_percent: args.icp_calls_total_percent_threshold,
        remaining_percent: args.icp_calls_remaining_percent_threshold,
        min_calls: args.icp_min_calls,
    }
}

/// What `--icf` did, for the summary.
struct FoldReport {
    folding: rivet_passes::icf::Folding,
    /// Folded functions the profile saw run (without folding, each would be in the hot text).
    hot_folded: Vec<FuncId>,
}

/// The optimized layout with identical functions folded: the classes among the functions the
/// rewriter may move (and the user selected), the folded ones' counts added to their kept
/// copies before layout, the folded ones left out. A fold stands only when its kept copy is
/// rewritten. What was folded goes to `report`.
fn folded_layout(
    program: &Program,
    attached: &AttachedProfile,
    options: &OptimizeOptions,
    movable: &[bool],
    selected: &(dyn Fn(FuncId) -> bool + Sync),
    code: &rivet_passes::icf::CodeBytes<'_>,
    report: &std::sync::Mutex<Option<FoldReport>>,
) -> Layout {
    use rivet_passes::icf::{find_identical, merge_profiles};
    let eligible = |f: FuncId| movable.get(f.0 as usize).copied().unwrap_or(false) && selected(f);
    let folding = find_identical(program, code, &eligible);
    let mut merged = attached.clone();
    merge_profiles(&mut merged, &folding.pairs);
    let mut movable = movable.to_vec();
    for &(f, _) in &folding.pairs {
        movable[f.0 as usize] = false;
    }
    let mut layout = optimized_layout(program, &merged, options, &movable, selected, false);
    layout.folded = folding
        .pairs
        .iter()
        .copied()
        .filter(|&(f, kept)| layout.is_rewritten(kept) && !layout.is_rewritten(f))
        .collect();
    let min_hot = options.min_hot_count.max(1);
    let hot_folded = layout
        .folded
        .iter()
        .map(|p| p.0)
        .filter(|f| {
            attached.functions[f.0 as usize]
                .as_ref()
                .is_some_and(|c| c.entries >= min_hot || c.blocks.iter().any(|&n| n >= min_hot))
        })
        .collect();
    if let Ok(mut slot) = report.lock() {
        *slot = Some(FoldReport {
            folding,
            hot_folded,
        });
    }
    layout
}

fn function_order_of(arg: FunctionOrderArg) -> FunctionOrder {
    match arg {
        FunctionOrderArg::Cdsort => FunctionOrder::CdSort,
        FunctionOrderArg::Hfsort => FunctionOrder::C3,
        FunctionOrderArg::ExecCount => FunctionOrder::ExecCount,
        FunctionOrderArg::None | FunctionOrderArg::User => FunctionOrder::None,
    }
}

/// Which PLT calls go through the GOT: as asked, on x86-64. An AArch64 call through a GOT
/// slot is several instructions (the address of the slot in x16, as lazy binding's resolver
/// expects, its value in x17, `blr x17`), which the emitter does not write yet: there `--plt`
/// is dropped with a warning, as BOLT options Rivet does not implement are, so that a recipe
/// written for x86-64 still runs.
fn plt_calls(arg: PltArg, isa: rivet_arch::Isa, warnings: &mut Vec<String>) -> PltCalls {
    match arg {
        PltArg::None => PltCalls::Keep,
        _ if isa == rivet_arch::Isa::Aarch64 => {
            warnings.push(
                "--plt: calls through the GOT are not implemented for AArch64 yet; calls keep going through the PLT stubs".to_string(),
            );
            PltCalls::Keep
        }
        PltArg::Hot => PltCalls::Hot,
        PltArg::All => PltCalls::All,
    }
}

/// Wall time per phase, for `--timings`.
struct PhaseClock {
    last: Instant,
    laps: Vec<(&'static str, Duration)>,
}

impl PhaseClock {
    fn new() -> Self {
        PhaseClock {
            last: Instant::now(),
            laps: Vec::new(),
        }
    }

    /// Ends `phase` now.
    fn lap(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.laps.push((phase, now - self.last));
        self.last = now;
    }

    /// Adds phases timed elsewhere, which ended now.
    fn extend(&mut self, laps: &[(&'static str, Duration)]) {
        self.laps.extend_from_slice(laps);
        self.last = Instant::now();
    }
}

pub fn run(args: &OptimizeArgs, warnings: Vec<String>) -> Result<(), UserError> {
    run_with(args, warnings, true).map(|_| ())
}

/// Optimizes as `args` say; prints the summary (text or JSON, per `args.json`) only when
/// `print`, and returns it as JSON either way (`rivet auto` reports it its own way). Warnings
/// and `--timings` go to stderr in both cases.
pub fn run_with(
    args: &OptimizeArgs,
    mut warnings: Vec<String>,
    print: bool,
) -> Result<serde_json::Value, UserError> {
    if same_file(&args.binary, &args.output) {
        return Err(
            UserError::new(format!("the output {} is the input", args.output.display()))
                .hint("Rivet never modifies its input; give another -o path"),
        );
    }
    let start = Instant::now();
    let mut clock = PhaseClock::new();
    let mapped = map_input(&args.binary)?;
    let elf = ElfFile::parse_mapped(&mapped).map_err(|e| elf_error(&args.binary, &e))?;
    crate::files::refuse_rivet_output(&elf, &args.binary)?;
    let profile = load_profile(
        &args.profile,
        &args.binary,
        &elf,
        args.force,
        args.instrumented.as_deref(),
    )?;
    clock.lap("read binary and profile");
    let (pending, file) = PendingOutput::create(&args.output)?;
    // Identical code folding compares the unwind rows of every function; otherwise only the
    // functions that move need theirs, and the emitter reads those again from the input
    // (every function's rows held to the end were 0.11 GiB of the 2.76 GiB peak of the 50 MB
    // program of bench/scale, docs/scale.md).
    // A copied `ret` and a conditional tail call must run in the unwind state of the
    // instruction they stand for: the peepholes compare rows too.
    // So must a duplicated tail.
    let cfi = if args.icf
        || !args.peepholes.is_empty()
        || args.simplify_conditional_tail_calls
        || args.tail_duplication != TailDupArg::None
    {
        CfiRows::Keep
    } else {
        CfiRows::Check
    };
    // Pay for what moves, in discovery: a profile of this very build gives counts only to the
    // functions it names, so only their families (the functions that can move) need their
    // instructions past discovery. A stale profile is matched by hashing every function's
    // code, a BOLT YAML one placed by its blocks' instructions, and identical code folding
    // compares every function: those keep them all.
    let lean =
        !(args.icf || args.keep_whole_model) && profile.yaml.is_none() && profile.stale.is_none();
    let instructions = if lean {
        Instructions::SetAside
    } else {
        Instructions::Keep
    };
    // And only those families keep their blocks past discovery. The functions named are kept
    // for the restore below (the skeleton's `FuncId`s are the program's).
    let named_in_skeleton: std::sync::OnceLock<Vec<FuncId>> = std::sync::OnceLock::new();
    let named = |skeleton: &rivet_ir::Program| {
        named_in_skeleton
            .get_or_init(|| {
                let names = rivet_passes::names::profile_names(skeleton);
                rivet_passes::attach::functions_named(skeleton, &names, &profile.profile)
            })
            .clone()
    };
    let models = if lean {
        Models::NamedFamilies(&named)
    } else {
        Models::All
    };
    let mut program = discover_models(&elf, &DiscoverOptions { cfi, instructions }, models)
        .map_err(|e| match e {
            DiscoverError::Elf(e) => elf_error(&args.binary, &e),
        })?;
    clock.lap("discover");
    let names = rivet_passes::names::profile_names(&program);
    // Decoded again: the instructions of the families that can move, which attaching the
    // profile reads too.
    if let Some(named) = named_in_skeleton.get() {
        let kept = program.families_holding(named.iter().copied());
        program.restore_instructions(&elf, |f| kept[f.id.0 as usize]);
    }
    let (attached, stale) = attach_loaded(&program, &profile)?;
    if let Some(report) = &stale {
        eprintln!(
            "rivet: note: {}",
            stale_notice(&profile, report, &args.profile, &args.binary)
        );
    }
    // The callees of each indirect call site, for promotion (the attached counts keep only
    // caller-callee totals).
    let icp = icp_options(args, &program, &mut warnings);
    // A profile of another build names sites at offsets that may have moved: none are used
    // (a wrong callee would still be correct code, only slower).
    let call_sites = if icp.calls && profile.stale.is_none() {
        rivet_passes::icp::CallSites::of_profile(&program, &names, &profile.profile)
    } else {
        Default::default()
    };
    // Its counts now live in `attached`; a large profile's records would stay at the peak.
    drop(profile);
    let released = release_model_of_code_that_stays(
        &mut program,
        &attached,
        args.icf || args.keep_whole_model,
    );
    clock.lap("attach profile");
    if attached.report.records_count > 0 && attached.report.matched_count == 0 {
        return Err(UserError::new(format!(
            "{} matches nothing in {}",
            args.profile.display(),
            args.binary.display()
        ))
        .hint("the profile describes another program; `rivet inspect BINARY --profile P` shows what it names"));
    }
    warnings.extend(partial_match_warning(
        &elf,
        &attached,
        &args.profile,
        &args.binary,
    ));
    let options = options_from(args, &program, &names, &attached, &mut warnings)?;
    let only = FunctionFilter::new(&args.funcs, "funcs")?;
    let skip = FunctionFilter::new(&args.skip_funcs, "skip-funcs")?;
    let selected = |f: FuncId| {
        (only.is_empty() || only.matches(&program, &names, f)) && !skip.matches(&program, &names, f)
    };
    let icf = icf_mode(args, &program, &mut warnings);
    let peepholes = peephole_options(args, &program, &mut warnings);
    let tail_dup = tail_dup_options(args, &program, &mut warnings);
    let tail_dup_report = std::sync::Mutex::new(rivet_passes::taildup::TailDupCounts::default());
    let folding = std::sync::Mutex::new(None);
    let icp_report = std::sync::Mutex::new(rivet_passes::icp::IcpReport::default());
    let code = |addr: rivet_elf::Vaddr, len: u64| elf.bytes_at(addr, len);
    let build = |movable: &[bool], in_place: bool| {
        let mut layout = if !icf || in_place {
            optimized_layout(&program, &attached, &options, movable, &selected, in_place)
        } else {
            folded_layout(
                &program, &attached, &options, movable, &selected, &code, &folding,
            )
        };
        // Over the final block order: whether a branch pays depends on what comes next.
        rivet_passes::peephole::apply(&program, &attached.functions, &mut layout, peepholes);
        // After the peepholes, which it leaves their blocks to (`taildup`'s module comment).
        let duplicated =
            rivet_passes::taildup::apply(&program, &attached.functions, &mut layout, tail_dup);
        *tail_dup_report.lock().unwrap_or_else(|e| e.into_inner()) = duplicated;
        let promoted = rivet_passes::icp::apply(&program, &call_sites, &mut layout, icp);
        *icp_report.lock().unwrap_or_else(|e| e.into_inner()) = promoted;
        layout
    };
    let rewrite_options = RewriteOptions {
        layout: LayoutSource::Custom {
            build: &build,
            reorders_functions: options.function_order != FunctionOrder::None,
            name: "optimize",
        },
        alignment: TextAlignment {
            functions: args.align_functions,
            functions_max_padding: args
                .align_functions_max_bytes
                .unwrap_or(args.align_functions.saturating_sub(1)),
            hot_text: if args.hot_text || args.hugify {
                rivet_emit::hugify::HUGE_PAGE
            } else {
                64
            },
            hot_text_offset: args.hot_text_offset,
            blocks: options.align_blocks.unwrap_or_default().alignment,
            set_balance_padding: args.cache_set_padding,
        },
        debug_writer: rivet_emit::debug::DebugWriter::default(),
        plt_calls: plt_calls(args.plt, program.info.isa, &mut warnings),
        hugify: args.hugify,
        always_islands: args.aarch64_islands == IslandsArg::Always,
    };
    let relocation_mode = program.info.relocation_mode == rivet_ir::RelocationMode::Available;
    let rewrite_options = if relocation_mode {
        rewrite_options
    } else {
        // Without relocations functions keep their places: only blocks move (and cold ones
        // out). Say what that costs.
        warnings.push(format!(
            "{} has no relocations: functions stay in place, only their blocks are reordered and split (relink with -Wl,--emit-relocs to reorder functions too)",
            args.binary.display()
        ));
        RewriteOptions {
            layout: LayoutSource::Custom {
                build: &build,
                reorders_functions: false,
                name: "optimize",
            },
            ..rewrite_options
        }
    };
    let output = pending.stream(&file, |sink| {
        rewrite_into(&elf, &program, &rewrite_options, None, sink)
            .map_err(|e| rewrite_error(&args.binary, e))
    })?;
    clock.extend(&output.summary.timings);
    if args.verify {
        pending.verify_written(|image| {
            rivet::verify_check::verify_output(&elf, &program, &output, image).map(|_| ())
        })?;
    }
    pending.finish_written(file, mode_of(&args.binary))?;
    clock.lap(if args.verify {
        "verify and write file"
    } else {
        "write file"
    });

    let s = &output.summary;
    let profiled_rewritten = attached
        .functions
        .iter()
        .enumerate()
        .filter(|(i, c)| c.is_some() && output.layout.is_rewritten(FuncId(*i as u32)))
        .count();
    let split = output
        .layout
        .functions
        .iter()
        .flatten()
        .filter(|fl| fl.fragments.len() > 1)
        .count();
    warnings.extend(s.warnings.iter().cloned());
    let r = &attached.report;
    let before = dyno_stats(&program, &attached, None);
    let mut after = dyno_stats(&program, &attached, Some(&output.layout));
    move_plt_calls_via_got(
        &mut after,
        &program,
        &attached,
        &output.layout,
        rewrite_options.plt_calls,
    );
    count_promoted_calls(&mut after, &program, &attached, &output.layout, |f| {
        output.map.is_rewritten(f)
    });
    let change = |b: u64, a: u64| {
        if b == 0 {
            0.0
        } else {
            100.0 * (a as f64 - b as f64) / b as f64
        }
    };
    let rows = |d: &DynoStats| {
        d.rows()
            .iter()
            .map(|(name, v)| ((*name).to_string(), serde_json::json!(v)))
            .collect::<serde_json::Map<_, _>>()
    };
    let unoptimized =
        unoptimized_functions(&program, &attached, &output.layout, &s.reasons, &names);
    let fold_summary = folding
        .into_inner()
        .ok()
        .flatten()
        .map(|r| FoldSummary::new(&program, &output.layout, s.hot_bytes, r));
    let mut json = serde_json::json!({
        "output": args.output.display().to_string(),
        "relocation_mode": s.relocation_mode,
        "functions": s.functions,
        "rewritten": s.moved + s.in_place,
        "rewritten_with_profile": profiled_rewritten,
        "split": split,
        "aligned_blocks": {
            "all": s.aligned_blocks,
            "padding_never_runs": s.aligned_blocks_padding_never_runs,
        },
        "cache_set_padding": { "functions": s.set_balanced, "bytes": s.set_balance_bytes },
        "calls_via_got": s.calls_via_got,
        "hugify": s.hugify.map(|(start, end)| serde_json::json!({
            "start": start.get(),
            "end": end.get(),
        })),
        "old_entries_not_forwarded": s.old_entries_not_forwarded,
        "veneers": s.veneers,
        "veneers_bypassed": s.veneers_bypassed,
        "fragment_exits": match s.fragment_exits {
            rivet_arch::FragmentExits::Islands => serde_json::json!({ "form": "islands" }),
            rivet_arch::FragmentExits::Direct { reach } => {
                serde_json::json!({ "form": "direct", "reach": reach })
            }
        },
        "new_text_bound": s.new_text_bound,
        "functions_released": released,
        "landing_pads": s.landing_pads,
        "hot_bytes": s.hot_bytes,
        "cold_bytes": s.cold_bytes,
        "profile": {
            "records": r.records,
            "matched": r.matched,
            "matched_share": r.matched_share(),
            "profiled_functions": r.profiled_functions,
            "inferred": attached.inferred,
            "stale": stale.as_ref().map(|r| stale_json(r, SHOWN_STALE)),
        },
        "dyno_stats": { "before": rows(&before), "after": rows(&after) },
        "not_rewritten": s.not_rewritten,
        "profiled_not_rewritten": {
            "share": unoptimized.share,
            "unit": unoptimized.unit,
            "functions": unoptimized.functions.iter().map(|u| serde_json::json!({
                "name": u.name,
                "share": u.share,
                "entries": u.entries,
                "reason": u.reason,
            })).collect::<Vec<_>>(),
        },
        "warnings": warnings,
    });
    let peephole_counts = rivet_passes::peephole::PeepholeCounts::of_layout(&output.layout);
    if peepholes.any() {
        json["peepholes"] = serde_json::json!({
            "double_jumps": peephole_counts.double_jumps,
            "useless_branches": peephole_counts.useless_branches,
            "jumps_to_returns": peephole_counts.jumps_to_returns,
            "conditional_tail_calls": peephole_counts.conditional_tail_calls,
        });
    }
    let tail_dup_counts = tail_dup_summary(
        tail_dup,
        *tail_dup_report.lock().unwrap_or_else(|e| e.into_inner()),
        &mut json,
    );
    let icp_summary = icp.calls.then(|| {
        let r = *icp_report.lock().unwrap_or_else(|e| e.into_inner());
        let written = promoted_in_output(&output);
        (r, written)
    });
    if let Some((r, (sites, targets, calls))) = icp_summary {
        json["indirect_call_promotion"] = serde_json::json!({
            "profiled_sites": r.profiled_sites,
            "profiled_calls": r.profiled_calls,
            "promoted_sites": sites,
            "promoted_targets": targets,
            "promoted_calls": calls,
            "refused_sites": r.refused_sites,
        });
    }
    if let Some(f) = &fold_summary {
        json["icf"] = serde_json::json!({
            "folded": f.folded,
            "kept": f.kept,
            "classes": f.classes,
            "address_taken_not_folded": f.address_taken,
            "hot_folded": f.hot_folded,
            "hot_bytes_before": f.hot_bytes_before,
            "hot_bytes_after": s.hot_bytes,
        });
    }
    if print && args.json {
        println!("{json}");
    } else if print {
        if args.dyno_stats {
            println!("dyno stats (profiled run, original code vs optimized layout):");
            print!("{}", format_comparison(&before, &after));
        }
        println!(
            "optimized {}: {} of {} functions {} ({} split), {} hot + {} cold bytes",
            args.output.display(),
            s.moved + s.in_place,
            s.functions,
            if s.relocation_mode {
                "moved to the hot text"
            } else {
                "rewritten in place"
            },
            split,
            s.hot_bytes,
            s.cold_bytes
        );
        println!(
            "  profile: {:.1}% of the counts matched, {} functions with counts{}",
            100.0 * r.matched_share(),
            r.profiled_functions,
            if attached.inferred {
                " (edge counts inferred from samples)"
            } else {
                ""
            }
        );
        if let Some(report) = &stale {
            for line in describe_stale(report, SHOWN_STALE).lines() {
                println!("  {line}");
            }
        }
        crate::summary::print_branch_reach(s);
        if options.splitting == Splitting::Off && args.split_functions.is_none() {
            println!(
                "  functions not split: a block without samples may still run (--split-functions splits anyway)"
            );
        }
        if s.aligned_blocks > 0 {
            println!(
                "  {} hot blocks aligned ({} with their padding after a jump, where it never runs)",
                s.aligned_blocks, s.aligned_blocks_padding_never_runs
            );
        }
        if s.set_balanced > 0 {
            println!(
                "  {} hot functions padded to spread the hottest cache lines over the sets ({} bytes)",
                s.set_balanced, s.set_balance_bytes
            );
        }
        if let Some((start, end)) = s.hugify {
            println!(
                "  hot text {start}..{end} mapped on huge pages at start-up ({} MiB) when THP allows",
                (end - start) >> 20
            );
        }
        if let Some(f) = &fold_summary {
            println!(
                "  identical code folding: {} functions folded into {} kept copies ({} of them ran); hot text {} bytes, about {} without folding",
                f.folded, f.kept, f.hot_folded, s.hot_bytes, f.hot_bytes_before
            );
            if f.address_taken > 0 {
                println!(
                    "    {} identical functions kept apart: their addresses are taken",
                    f.address_taken
                );
            }
        }
        if let Some((r, (sites, targets, calls))) = icp_summary {
            println!(
                "  indirect call promotion: {sites} of {} profiled indirect call sites promoted ({targets} callees compared); {calls} of {} calls ({:.1}%) now direct",
                r.profiled_sites,
                r.profiled_calls,
                100.0 * calls as f64 / r.profiled_calls.max(1) as f64
            );
        }
        if peepholes.any() {
            let c = &peephole_counts;
            println!(
                "  peepholes: {} double jumps, {} useless branches, {} jumps to returns; {} conditional tail calls",
                c.double_jumps, c.useless_branches, c.jumps_to_returns, c.conditional_tail_calls
            );
        }
        if let Some(c) = tail_dup_counts {
            println!(
                "  tail duplication: {} jumps replaced by a copy of their target ({} bytes copied); {} taken jumps of the profiled run removed",
                c.duplicated, c.bytes, c.jumps_removed
            );
        }
        if s.calls_via_got > 0 {
            println!(
                "  {} calls into PLT stubs now go straight through the GOT",
                s.calls_via_got
            );
        }
        println!(
            "  taken branches {:+.1}%, unconditional jumps {:+.1}%, executed instructions {:+.2}% (profiled run)",
            change(before.taken_branches(), after.taken_branches()),
            change(before.unconditional, after.unconditional),
            change(before.instructions, after.instructions),
        );
        print_unoptimized(&unoptimized);
    }
    for w in &warnings {
        eprintln!("rivet: warning: {w}");
    }
    if args.timings {
        for (phase, t) in &clock.laps {
            eprintln!("rivet: time: {:>8.1} ms  {phase}", t.as_secs_f64() * 1e3);
        }
        eprintln!(
            "rivet: time: {:>8.1} ms  total",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(json)
}

/// The summary of `--icf`.
struct FoldSummary {
    /// Functions folded (in the output: folds whose kept copy was rewritten).
    folded: usize,
    /// Distinct kept copies they were folded into.
    kept: usize,
    /// Classes of identical functions found, and identical functions left apart in them
    /// because their addresses are taken.
    classes: usize,
    address_taken: usize,
    /// Folded functions that ran in the profile.
    hot_folded: usize,
    /// The hot text's size had the folded functions that ran been emitted too: the output's,
    /// plus the kept copy's hot fragment for each of them (an estimate: without folding, a
    /// copy's own profile would give it its own block order and split).
    hot_bytes_before: u64,
}

impl FoldSummary {
    fn new(program: &Program, layout: &Layout, hot_bytes: u64, report: FoldReport) -> Self {
        let mut kept: Vec<FuncId> = layout.folded.iter().map(|p| p.1).collect();
        kept.sort();
        kept.dedup();
        let mut hot_folded = 0;
        let mut extra = 0;
        for f in report.hot_folded {
            let Some(k) = layout.folded_into(f) else {
                continue;
            };
            let Some(fl) = layout.function(k) else {
                continue;
            };
            hot_folded += 1;
            extra += rivet_passes::fragment_size::estimated_fragment_size(
                program.info.isa,
                program.function(k),
                &fl.fragments[0],
                layout.exits,
            );
        }
        FoldSummary {
            folded: layout.folded.len(),
            kept: kept.len(),
            classes: report.folding.classes,
            address_taken: report.folding.address_taken,
            hot_folded,
            hot_bytes_before: hot_bytes + extra,
        }
    }
}

/// How many of the functions with the largest counts the stale-matching report names.
const SHOWN_STALE: usize = 5;

/// How many of the hottest functions left as they were the summary names.
const SHOWN_UNOPTIMIZED: usize = 5;

/// A profiled function the output leaves as it was.
struct Unoptimized {
    name: String,
    /// Its share of the profile's weight (see `UnoptimizedFunctions::unit`), or `None` for a
    /// function without a model under a branch profile, whose weight is unknown.
    share: Option<f64>,
    /// Times it was entered, for a function without a model under a branch profile.
    entries: u64,
    reason: String,
}

/// The profiled functions that were not rewritten, hottest first, and their total share.
struct UnoptimizedFunctions {
    /// What the shares are shares of.
    unit: &'static str,
    share: f64,
    functions: Vec<Unoptimized>,
}

/// Lists the profiled functions the output leaves as they were, weighted by the time they
/// took in the profiled run. A count alone hides what matters: one interpreter loop left as
/// it was can hold most of the run, while dozens of skipped helpers hold nothing. A sampled
/// profile weighs every function in samples. A branch profile weighs the functions Rivet
/// models in executed instructions; of those it does not model, it knows only how often they
/// were entered (`share: None`), and they come last.
fn unoptimized_functions(
    program: &Program,
    attached: &AttachedProfile,
    layout: &Layout,
    reasons: &[Option<String>],
    names: &[String],
) -> UnoptimizedFunctions {
    let sampled = !attached.samples.is_empty();
    let weight = |i: usize| -> Option<u64> {
        if sampled {
            return Some(attached.samples[i]);
        }
        let c = attached.functions[i].as_ref()?;
        // A function entered but without block counts still ran: weigh it by its entries so
        // that it is listed rather than hidden at 0%.
        Some(
            c.executed_instructions(&program.functions[i])
                .max(c.entries),
        )
    };
    let total: u64 = (0..program.functions.len()).filter_map(weight).sum();
    let share = |w: u64| {
        if total == 0 {
            0.0
        } else {
            w as f64 / total as f64
        }
    };
    let mut functions: Vec<(u64, Unoptimized)> = Vec::new();
    for (i, reason) in reasons.iter().enumerate() {
        let Some(reason) = reason else { continue };
        if layout.is_rewritten(FuncId(i as u32)) {
            continue;
        }
        let unmodelled = attached
            .unmodelled
            .get(&FuncId(i as u32))
            .copied()
            .unwrap_or(0);
        let (w, share, entries) = match weight(i) {
            Some(w) if w > 0 => (w, Some(share(w)), 0),
            _ if unmodelled > 0 => (0, None, unmodelled),
            _ => continue,
        };
        functions.push((
            w,
            Unoptimized {
                name: names[i].clone(),
                share,
                entries,
                reason: reason.clone(),
            },
        ));
    }
    functions.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| b.1.entries.cmp(&a.1.entries))
            .then_with(|| a.1.name.cmp(&b.1.name))
    });
    UnoptimizedFunctions {
        unit: if sampled {
            "of the samples"
        } else {
            "of the profiled run's instructions"
        },
        share: share(functions.iter().map(|(w, _)| w).sum()),
        functions: functions.into_iter().map(|(_, u)| u).collect(),
    }
}

/// The summary's lines on profiled functions left as they were: the hottest by share, then
/// those without a model that a branch profile saw entered.
fn print_unoptimized(u: &UnoptimizedFunctions) {
    let (weighed, entered): (Vec<&Unoptimized>, Vec<&Unoptimized>) =
        u.functions.iter().partition(|f| f.share.is_some());
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let list_end = |n: usize, hottest: &str| {
        if n > SHOWN_UNOPTIMIZED {
            format!("; the {hottest}:")
        } else {
            ":".to_string()
        }
    };
    if !weighed.is_empty() {
        println!(
            "  {} profiled function{} could not be rewritten: {:.1}% {}{}",
            weighed.len(),
            plural(weighed.len()),
            100.0 * u.share,
            u.unit,
            list_end(weighed.len(), "hottest")
        );
        for f in weighed.iter().take(SHOWN_UNOPTIMIZED) {
            println!(
                "    {:>5.1}%  {}: {}",
                100.0 * f.share.unwrap_or(0.0),
                f.name,
                f.reason
            );
        }
    }
    if !entered.is_empty() {
        let n = entered.len();
        println!(
            "  {n} function{} that could not be rewritten {} entered (the profile counts nothing inside {}){}",
            plural(n),
            if n == 1 { "was" } else { "were" },
            if n == 1 { "it" } else { "them" },
            list_end(n, "most entered")
        );
        for f in entered.iter().take(SHOWN_UNOPTIMIZED) {
            println!("    {:>9} entries  {}: {}", f.entries, f.name, f.reason);
        }
    }
}

/// Promoted call sites of the functions the output rewrote, callees compared, and the calls
/// of the profiled run that they now make directly.
fn promoted_in_output(output: &rivet_emit::rewrite::RewriteOutput) -> (usize, usize, u64) {
    let mut out = (0, 0, 0);
    for (i, fl) in output.layout.functions.iter().enumerate() {
        let Some(fl) = fl else { continue };
        if !output.map.is_rewritten(FuncId(i as u32)) {
            continue;
        }
        for p in &fl.promoted_calls {
            out.0 += 1;
            out.1 += p.targets.len();
            out.2 += p.targets.iter().map(|t| t.count).sum::<u64>();
        }
    }
    out
}

/// What the tail duplication of the output's layout did, recorded in `json`
/// (`tail_duplication`), when the pass ran.
fn tail_dup_summary(
    options: rivet_passes::taildup::TailDupOptions,
    c: rivet_passes::taildup::TailDupCounts,
    json: &mut serde_json::Value,
) -> Option<rivet_passes::taildup::TailDupCounts> {
    if options.mode == rivet_passes::taildup::TailDupMode::None {
        return None;
    }
    json["tail_duplication"] = serde_json::json!({
        "duplicated": c.duplicated,
        "bytes": c.bytes,
        "jumps_removed": c.jumps_removed,
    });
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translate(args: &[&str]) -> (Vec<String>, Vec<String>) {
        let (out, warnings) = translate_bolt_args(args.iter().map(OsString::from).collect());
        (
            out.into_iter().map(|a| a.into_string().unwrap()).collect(),
            warnings,
        )
    }

    #[test]
    fn bolt_spellings_become_rivet_options() {
        let (out, warnings) = translate(&[
            "app",
            "-o",
            "app.bolt",
            "-data=app.fdata",
            "-reorder-blocks=ext-tsp",
            "-reorder-functions=cdsort",
            "-split-functions",
            "-split-all-cold",
            "-split-eh=0",
            "-dyno-stats",
            "-update-debug-sections",
        ]);
        assert_eq!(
            out,
            [
                "app",
                "-o",
                "app.bolt",
                "--data=app.fdata",
                "--reorder-blocks=ext-tsp",
                "--reorder-functions=cdsort",
                "--split-functions",
                "--split-all-cold",
                "--split-eh=0",
                "--dyno-stats",
            ]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn bolt_peepholes_and_sctc_are_rivets() {
        let (out, warnings) = translate(&[
            "-peepholes=double-jumps,useless-branches",
            "-simplify-conditional-tail-calls=0",
        ]);
        assert_eq!(
            out,
            [
                "--peepholes=double-jumps,useless-branches",
                "--simplify-conditional-tail-calls=0"
            ]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn bolt_icf_is_rivets_icf() {
        let (out, warnings) = translate(&["-icf", "-icf=0"]);
        assert_eq!(out, ["--icf", "--icf=0"]);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn bolt_hugify_is_rivets_hugify() {
        let (out, warnings) = translate(&["-hugify", "-hugify=1", "-hugify=false"]);
        assert_eq!(out, ["--hugify", "--hugify=1", "--hugify=false"]);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn bolt_tail_duplication_is_rivets() {
        let (out, warnings) = translate(&[
            "-tail-duplication=cache",
            "-tail-duplication",
            "aggressive",
            "-tail-duplication-maximum-duplication=32",
        ]);
        assert_eq!(
            out,
            [
                "--tail-duplication=cache",
                "--tail-duplication=aggressive",
                "--tail-duplication-maximum-duplication=32"
            ]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        // What it becomes parses, and the default is off.
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: OptimizeArgs,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec!["optimize", "app", "-o", "out", "--profile", "p.fdata"];
            argv.extend_from_slice(extra);
            <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.args.tail_duplication)
        };
        assert_eq!(parse(&[]).unwrap(), TailDupArg::None);
        assert_eq!(
            parse(&["--tail-duplication=cache"]).unwrap(),
            TailDupArg::Cache
        );
        assert!(parse(&["--tail-duplication=sometimes"]).is_err());
    }

    #[test]
    fn separate_values_and_rivet_options_pass() {
        let (out, _) = translate(&["-data", "p.fdata", "--json", "-f", "--", "-icf"]);
        assert_eq!(out, ["--data=p.fdata", "--json", "-f", "--", "-icf"]);
    }

    #[test]
    fn unimplemented_options_and_values_warn() {
        let (out, warnings) = translate(&[
            "-frame-opt=hot",
            "-reorder-blocks=cache",
            "-reorder-functions=hfsort+",
            "-use-gnu-stack",
        ]);
        assert_eq!(
            out,
            ["--reorder-blocks=ext-tsp", "--reorder-functions=hfsort"]
        );
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[0].contains("-frame-opt=hot"));
        assert!(warnings[3].contains("-use-gnu-stack"));
    }
}
