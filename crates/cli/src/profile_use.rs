//! Using a profile on a binary: reading it whatever its format, refusing one of another build,
//! attaching it to the program, and showing what matched and what is hot.

use std::path::Path;

use rivet_elf::ElfFile;
use rivet_ir::Program;
use rivet_passes::attach::{AttachedProfile, attach};
use rivet_profile::Profile;

use crate::UserError;
use crate::merge::{Input, read_profile};

/// Lower-case hex, as profiles write build-ids.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads the profile at `path` for `binary`; a profile of another build is an error unless
/// `force`.
pub fn load_profile(
    path: &Path,
    binary: &Path,
    elf: &ElfFile<'_>,
    force: bool,
) -> Result<Profile, UserError> {
    let profile = match read_profile(path)? {
        Input::Located(p) => p,
        Input::Yaml(_) => {
            return Err(UserError::new(format!(
                "{}: BOLT YAML profiles are keyed by BOLT's block numbering, which Rivet does not reproduce",
                path.display()
            ))
            .hint("give Rivet the fdata (llvm-bolt -w writes YAML; perf2bolt writes fdata by default)"));
        }
    };
    if let (Some(theirs), Some(ours)) = (&profile.build_id, elf.build_id())
        && *theirs != hex(ours)
        && !force
    {
        return Err(UserError::new(format!(
            "{} describes another build of {} (build-id {theirs}, the binary's is {})",
            path.display(),
            binary.display(),
            hex(ours)
        ))
        .hint("profile this build, or pass --force to use the profile anyway (stale parts are reported)"));
    }
    Ok(profile)
}

/// Attaches `profile` to `program`.
pub fn attach_profile(program: &Program, profile: &Profile) -> AttachedProfile {
    let names = rivet_passes::names::profile_names(program);
    attach(program, &names, profile)
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
