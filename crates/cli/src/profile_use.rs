//! Profiles as commands use them: reading one whatever its format, deciding how it fits the
//! binary (as it is when it is of this build or forced, by stale matching when it is of another
//! build and carries code hashes, refused when it carries none), attaching it to the program
//! (a BOLT YAML profile through `rivet_passes::bolt_yaml`), showing what matched and what is
//! hot, and the formats a profile can be written in. Shared by `merge`, `aggregate`, `inspect`, `optimize`,
//! `report` and `auto`, so that a profile reads and fails the same way in each.

use std::collections::BTreeMap;
use std::path::Path;

use rivet_arch::Isa;
use rivet_discover::{CfiRows, DiscoverError, DiscoverOptions, discover};
use rivet_profile::{Architecture, FunctionHash};

use rivet_elf::ElfFile;
use rivet_ir::Program;
use rivet_passes::attach::{AttachedProfile, attach};
use rivet_passes::bolt_yaml::from_bolt_yaml;
use rivet_passes::stale::{FunctionMatchKind, StaleReport, attach_stale};
use rivet_profile::Profile;
use rivet_profile::counters::{CounterFile, CountersError, is_counter_file};
use rivet_profile::native::{AnyProfile, read_any};
use rivet_profile::yaml;

use crate::error::{UserError, elf_error};
use crate::files::map_input;

/// The formats `merge` and `aggregate` write profiles in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatArg {
    /// Rivet's profile format (keeps the build-id and how the profile was taken).
    Rivet,
    /// BOLT's fdata (for llvm-bolt -data= and merge-fdata).
    Fdata,
    /// BOLT's YAML profile (YAML inputs only).
    Yaml,
    /// A summed counter file (`rivet merge` of counter files of one instrumented binary;
    /// the default for a .counts output): read like one run's counter file.
    Counters,
}

/// A profile as read: address-based (counter files, Rivet profiles, fdata) or BOLT YAML,
/// which is keyed by block index and so cannot mix with the others.
pub enum Input {
    Located(Profile),
    Yaml(yaml::YamlProfile),
}

/// Reads any profile Rivet knows; counter files become profiles of the input binary (the map
/// of a version 2 file is read from `instrumented` when given, else from the instrumented
/// binary the file names).
pub fn read_profile(path: &Path, instrumented: Option<&Path>) -> Result<Input, UserError> {
    let bytes = std::fs::read(path).map_err(|e| {
        UserError::new(format!("cannot read {}: {e}", path.display()))
            .hint("check the path and its permissions")
    })?;
    read_profile_bytes(path, &bytes, instrumented)
}

/// The error line of a counter file that cannot be read, with the hint that fits.
pub fn bad_counters(path: &Path, e: CountersError) -> UserError {
    let hint = match &e {
        CountersError::MapElsewhere { .. } => {
            "pass --instrumented PATH to the binary that wrote it (or merge the counters into a profile, `rivet merge`, while the binary is at hand: profiles need no binary)"
        }
        CountersError::BadSites { .. } => {
            "instrument the program again; or remove the section (objcopy --remove-section=.rivet.sites) and the map index is read instead"
        }
        CountersError::BadIndex { .. } => {
            "instrument the program again; or remove the index (objcopy --remove-section=.rivet.mapidx) and the whole map is read instead"
        }
        _ => "a counter file is written by a binary from `rivet instrument`",
    };
    UserError::new(format!("{}: {e}", path.display())).hint(hint)
}

/// [`read_profile`] of a file already read.
pub fn read_profile_bytes(
    path: &Path,
    bytes: &[u8],
    instrumented: Option<&Path>,
) -> Result<Input, UserError> {
    if is_counter_file(bytes) {
        let counts =
            CounterFile::parse_ran(bytes, instrumented).map_err(|e| bad_counters(path, e))?;
        return Ok(Input::Located(counts.to_profile()));
    }
    match read_any(bytes) {
        Ok(AnyProfile::Located { profile, .. }) => Ok(Input::Located(profile)),
        Ok(AnyProfile::Yaml(y)) => Ok(Input::Yaml(y)),
        Err(e) => Err(UserError::new(format!("{}: {e}", path.display())).hint(
            "Rivet reads its counter files and profiles, BOLT fdata and YAML; perf.data goes through `rivet aggregate`",
        )),
    }
}

/// The code hashes (`rivet_passes::stale`) of the functions of `binary` that `named` names,
/// for a profile taken on it whose build-id, when known, is `build_id`.
pub fn hashes_from_binary<'a>(
    binary: &Path,
    build_id: Option<&str>,
    named: impl Iterator<Item = &'a str>,
) -> Result<BTreeMap<String, FunctionHash>, UserError> {
    let mapped = map_input(binary)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(binary, &e))?;
    if let (Some(theirs), Some(ours)) = (build_id, elf.build_id().map(hex))
        && theirs != ours
    {
        return Err(UserError::new(format!(
            "the profiles are of build-id {theirs}, {} is build-id {ours}",
            binary.display()
        ))
        .hint("give --binary the build the profiles were taken on"));
    }
    let program =
        discover(&elf, &DiscoverOptions::with_cfi(CfiRows::Ignore)).map_err(|e| match e {
            DiscoverError::Elf(e) => elf_error(binary, &e),
        })?;
    let names = rivet_passes::names::profile_names(&program);
    Ok(rivet_passes::stale::hashes_of_named(
        &program, &names, named,
    ))
}

/// Lower-case hex, as profiles write build-ids.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A profile read for one binary, and how it is to be fitted to it.
pub struct Loaded {
    pub profile: Profile,
    /// A BOLT YAML profile, put on the binary once it is discovered (`profile` is empty then).
    pub yaml: Option<yaml::YamlProfile>,
    /// The profile is of another build of the program (or cannot be told to be of this one)
    /// and carries code hashes: it is carried over by stale matching. Holds the profile's
    /// build-id, when it has one.
    pub stale: Option<Option<String>>,
}

/// The instruction set of `elf`'s code, as profiles name it.
pub fn architecture(elf: &ElfFile<'_>) -> Architecture {
    match Isa::of(elf) {
        Isa::X86_64 => Architecture::X86_64,
        Isa::Aarch64 => Architecture::Aarch64,
    }
}

/// The architecture a profile of `elf` records: AArch64 code is marked, x86-64 code is left
/// unmarked, as every profile of it was before Rivet knew another instruction set, so that
/// its profiles stay the bytes they were (see `rivet_profile::Architecture`).
pub fn recorded_architecture(elf: &ElfFile<'_>) -> Option<Architecture> {
    Some(architecture(elf)).filter(|a| *a != Architecture::X86_64)
}

/// Reads the profile at `path` for `binary`. A profile of another build (by build-id) is
/// matched to this one by its code hashes (`rivet_passes::stale`); one without hashes is
/// refused. `force` uses any profile as it is, by name and offset.
pub fn load_profile(
    path: &Path,
    binary: &Path,
    elf: &ElfFile<'_>,
    force: bool,
    instrumented: Option<&Path>,
) -> Result<Loaded, UserError> {
    let ours = elf.build_id().map(hex);
    let profile = match read_profile(path, instrumented)? {
        Input::Located(p) => p,
        Input::Yaml(y) => {
            let theirs = &y.header.build_id;
            if let Some(ours) = &ours
                && !theirs.is_empty()
                && theirs != ours
                && !force
            {
                return Err(UserError::new(format!(
                    "{} is a BOLT YAML profile of another build of {} (build-id {theirs}, the binary's is {ours})",
                    path.display(),
                    binary.display()
                ))
                .hint("convert it with the build it was taken on, which gives it Rivet's code hashes (`rivet merge --binary OLD_BINARY PROFILE.yaml -o P.prof`), then optimize with P.prof; or pass --force to use its offsets as they are"));
            }
            return Ok(Loaded {
                profile: Profile::new(rivet_profile::Mode::Branches),
                yaml: Some(y),
                stale: None,
            });
        }
    };
    if let Some(theirs) = profile.architecture
        && theirs != architecture(elf)
    {
        // Offsets into code of another instruction set cannot fit, not even with --force.
        return Err(UserError::new(format!(
            "{} profiles {} code and {} is not",
            path.display(),
            theirs.keyword(),
            binary.display()
        ))
        .hint("profile the binary you optimize"));
    }
    let same_build =
        matches!((&profile.build_id, &ours), (Some(theirs), Some(ours)) if theirs == ours);
    let other_build =
        matches!((&profile.build_id, &ours), (Some(theirs), Some(ours)) if theirs != ours);
    if force || same_build {
        return Ok(Loaded {
            profile,
            yaml: None,
            stale: None,
        });
    }
    if !profile.hashes.is_empty() {
        // Unchanged functions match exactly, so a profile that cannot be told to be of this
        // build loses nothing by being matched.
        let theirs = profile.build_id.clone();
        return Ok(Loaded {
            profile,
            yaml: None,
            stale: Some(theirs),
        });
    }
    if other_build {
        let theirs = profile.build_id.as_deref().unwrap_or_default();
        return Err(UserError::new(format!(
            "{} describes another build of {} (build-id {theirs}, the binary's is {}) and has no code hashes to match it by",
            path.display(),
            binary.display(),
            ours.unwrap_or_default()
        ))
        .hint("write it with hashes from the build it was taken on (`rivet merge --binary OLD_BINARY PROFILE -o P.prof`), profile this build, or pass --force to use its offsets as they are"));
    }
    Ok(Loaded {
        profile,
        yaml: None,
        stale: None,
    })
}

/// Attaches a loaded profile to `program`: as it is, or carried over from another build (then
/// with the report of how it matched). A YAML profile is put on the program first.
pub fn attach_loaded(
    program: &Program,
    loaded: &Loaded,
) -> Result<(AttachedProfile, Option<StaleReport>), UserError> {
    let names = rivet_passes::names::profile_names(program);
    if let Some(y) = &loaded.yaml {
        let converted = from_bolt_yaml(program, &names, y).map_err(|e| {
            UserError::new(e.to_string())
                .hint("Rivet reads BOLT YAML profiles of branch stacks or instrumentation; give it the fdata of a sampled profile")
        })?;
        let mut attached = attach(program, &names, &converted.profile);
        // Counts of blocks that could not be placed did not match either.
        attached.report.records += converted.lost_records;
        attached.report.records_count += converted.lost_count;
        return Ok((attached, None));
    }
    Ok(match loaded.stale {
        None => (attach(program, &names, &loaded.profile), None),
        Some(_) => {
            let (attached, report) = attach_stale(program, &names, &loaded.profile);
            (attached, Some(report))
        }
    })
}

/// The BOLT YAML profile `y`, taken on `binary`, as a Rivet profile with its code hashes.
pub fn yaml_with_hashes(binary: &Path, y: &yaml::YamlProfile) -> Result<Profile, UserError> {
    let mapped = map_input(binary)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(binary, &e))?;
    let theirs = &y.header.build_id;
    if let Some(ours) = elf.build_id().map(hex)
        && !theirs.is_empty()
        && *theirs != ours
    {
        return Err(UserError::new(format!(
            "the profiles are of build-id {theirs}, {} is build-id {ours}",
            binary.display()
        ))
        .hint("give --binary the build the profiles were taken on"));
    }
    let program =
        discover(&elf, &DiscoverOptions::with_cfi(CfiRows::Ignore)).map_err(|e| match e {
            DiscoverError::Elf(e) => elf_error(binary, &e),
        })?;
    let names = rivet_passes::names::profile_names(&program);
    let mut profile = from_bolt_yaml(&program, &names, y)
        .map_err(|e| {
            UserError::new(e.to_string())
                .hint("Rivet reads BOLT YAML profiles of branch stacks or instrumentation")
        })?
        .profile;
    rivet_passes::stale::add_hashes(&program, &names, &mut profile);
    Ok(profile)
}

/// The one line said when a profile of another build is matched to this one.
pub fn stale_notice(loaded: &Loaded, report: &StaleReport, path: &Path, binary: &Path) -> String {
    let (exact, approximate, unmatched) = report.shares();
    let whose = match &loaded.stale {
        Some(Some(id)) => format!("another build of {} (build-id {id})", binary.display()),
        _ => format!("a build of {} it cannot tell by build-id", binary.display()),
    };
    format!(
        "{} is a profile of {whose}: matched by code hashes, {:.1}% of its counts exactly, {:.1}% approximately, {:.1}% not at all (--force uses its offsets as they are)",
        path.display(),
        100.0 * exact,
        100.0 * approximate,
        100.0 * unmatched
    )
}

/// The stale-matching report: the shares, then the `top` functions with the largest counts.
pub fn describe_stale(report: &StaleReport, top: usize) -> String {
    use std::fmt::Write as _;
    let (exact, approximate, unmatched) = report.shares();
    let mut out = format!(
        "stale profile: {:.1}% of the counts matched exactly, {:.1}% approximately, {:.1}% not at all\n",
        100.0 * exact,
        100.0 * approximate,
        100.0 * unmatched
    );
    for f in report.functions.iter().take(top) {
        let how = match &f.kind {
            FunctionMatchKind::Exact => "exact".to_string(),
            FunctionMatchKind::Renamed { now } => format!("exact, now named {now}"),
            FunctionMatchKind::Approximate { matched, blocks } => {
                format!("approximate, {matched} of {blocks} blocks")
            }
            FunctionMatchKind::Unhashed => "no hashes, used as it is".to_string(),
            FunctionMatchKind::Missing => "not in this build".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:>14}  {:5.1}% matched  {}  ({how})",
            f.count,
            100.0 * f.matched_count as f64 / f.count.max(1) as f64,
            f.name
        );
    }
    out
}

/// The stale-matching report as JSON.
pub fn stale_json(report: &StaleReport, top: usize) -> serde_json::Value {
    let (exact, approximate, unmatched) = report.shares();
    serde_json::json!({
        "exact_share": exact,
        "approximate_share": approximate,
        "unmatched_share": unmatched,
        "functions": report.functions.iter().take(top).map(|f| serde_json::json!({
            "name": f.name,
            "count": f.count,
            "matched_count": f.matched_count,
            "match": match &f.kind {
                FunctionMatchKind::Exact => "exact",
                FunctionMatchKind::Renamed { .. } => "renamed",
                FunctionMatchKind::Approximate { .. } => "approximate",
                FunctionMatchKind::Unhashed => "unhashed",
                FunctionMatchKind::Missing => "missing",
            },
        })).collect::<Vec<_>>(),
    })
}

/// Below this share of its counts matched, a profile is reported as only partly fitting.
/// Profiles of the same build match fully (100.0% on Lua and SQLite here); a few percent lost
/// is a small edit to the program, more is another build or a stripped binary.
const WELL_MATCHED: f64 = 0.9;

/// One warning line when less than [`WELL_MATCHED`] of the profile's counts matched: how much
/// went to functions the binary lacks and to stale records, the functions that lost most, and
/// the likeliest cause. `None` when the profile fits (or is empty).
pub fn partial_match_warning(
    elf: &ElfFile<'_>,
    attached: &AttachedProfile,
    profile: &Path,
    binary: &Path,
) -> Option<String> {
    let r = &attached.report;
    if r.records_count == 0 || r.matched_share() >= WELL_MATCHED {
        return None;
    }
    let share = |count: u64| 100.0 * count as f64 / r.records_count as f64;
    // (count lost, description) of one kind of loss, if any.
    let part = |list: &[(String, u64)], one: &str, many: &str| -> Option<(u64, String)> {
        if list.is_empty() {
            return None;
        }
        let lost: u64 = list.iter().map(|x| x.1).sum();
        let what = if list.len() == 1 { one } else { many };
        let names: Vec<&str> = list.iter().take(3).map(|x| x.0.as_str()).collect();
        let more = if list.len() > 3 { ", ..." } else { "" };
        let text = format!(
            "{} {what} ({:.1}% of the counts: {}{more})",
            list.len(),
            share(lost),
            names.join(", ")
        );
        Some((lost, text))
    };
    let unknown = part(
        &r.unknown_functions,
        "function it names is not in the binary",
        "functions it names are not in the binary",
    );
    let stale = part(
        &r.stale_functions,
        "function has records that fit no block or edge",
        "functions have records that fit no block or edge",
    );
    let lost = |p: &Option<(u64, String)>| p.as_ref().map_or(0, |x| x.0);
    let cause = if lost(&stale) > lost(&unknown) {
        "the code changed since the profile was taken: profile this build".to_string()
    } else if !elf.has_static_symbols() {
        format!(
            "{} has no symbol table (stripped) and profiles name functions by symbol: optimize the unstripped build and strip the result",
            binary.display()
        )
    } else {
        "the profile is of another build or program: `rivet inspect BINARY --profile P` lists what it names".to_string()
    };
    let lost: Vec<String> = [unknown, stale]
        .into_iter()
        .flatten()
        .map(|x| x.1)
        .collect();
    let lost = if lost.is_empty() {
        String::new()
    } else {
        format!(": {}", lost.join("; "))
    };
    Some(format!(
        "only {:.1}% of the counts in {} matched {}{lost}; {cause}",
        100.0 * r.matched_share(),
        profile.display(),
        binary.display(),
    ))
}

/// The match report and the `top` hottest functions (by executed instructions), as text.
pub fn describe(program: &Program, attached: &AttachedProfile, top: usize) -> String {
    use std::fmt::Write as _;
    let r = &attached.report;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "profile: {} of {} records matched ({:.1}% of the counts), {} functions with counts{}",
        r.matched,
        r.records,
        100.0 * r.matched_share(),
        r.profiled_functions,
        if attached.inferred {
            " (edge counts inferred from samples)"
        } else {
            ""
        }
    );
    for (what, list) in [
        ("not in the binary", &r.unknown_functions),
        (
            "stale (records fit no instruction or edge)",
            &r.stale_functions,
        ),
    ] {
        if !list.is_empty() {
            let lost: u64 = list.iter().map(|x| x.1).sum();
            let names: Vec<&str> = list.iter().take(5).map(|x| x.0.as_str()).collect();
            let _ = writeln!(
                out,
                "  {} functions {what}, count {lost}: {}{}",
                list.len(),
                names.join(", "),
                if list.len() > 5 { ", ..." } else { "" }
            );
        }
    }
    let hot = hot_functions(program, attached);
    let total: u64 = hot.iter().map(|h| h.1).sum();
    if top > 0 && total > 0 {
        let _ = writeln!(out, "hottest functions (executed instructions):");
        for (f, insts) in hot.iter().take(top) {
            let _ = writeln!(
                out,
                "  {:6.2}%  {:>14}  {}",
                100.0 * *insts as f64 / total as f64,
                insts,
                program.function(*f).qualified_name()
            );
        }
    }
    out
}

/// Functions by executed instructions, hottest first.
pub fn hot_functions(
    program: &Program,
    attached: &AttachedProfile,
) -> Vec<(rivet_ir::FuncId, u64)> {
    let mut hot: Vec<(rivet_ir::FuncId, u64)> = attached
        .functions
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let f = &program.functions[i];
            c.as_ref().map(|c| (f.id, c.executed_instructions(f)))
        })
        .filter(|h| h.1 > 0)
        .collect();
    hot.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    hot
}
