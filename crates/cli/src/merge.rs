//! `rivet merge`: sum profiles of one binary (several runs, several workloads) into one.
//!
//! Inputs may be the counter files instrumented binaries write, Rivet profiles, or BOLT fdata;
//! BOLT YAML profiles merge only with each other (they are keyed by block index, not address).
//! The output is sorted, so the same inputs always give the same bytes. Mixing branch and
//! sample profiles, or profiles of different builds, is an error naming the inputs.

use std::path::PathBuf;

use rivet_profile::counters::{CounterFile, is_counter_file};
use rivet_profile::native::{AnyProfile, read_any};
use rivet_profile::{Profile, fdata, merge, native, yaml};

use crate::UserError;
use crate::rewrite::PendingOutput;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatArg {
    /// Rivet's profile format (keeps the build-id and how the profile was taken).
    Rivet,
    /// BOLT's fdata (for llvm-bolt -data= and merge-fdata).
    Fdata,
    /// BOLT's YAML profile (YAML inputs only).
    Yaml,
}

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Profiles to sum: counter files, Rivet profiles, fdata, or BOLT YAML.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the merged profile.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Output format (default: fdata for a .fdata output, YAML for .yaml, else Rivet's).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
}

/// A profile read for merging.
pub enum Input {
    Located(Profile),
    Yaml(yaml::YamlProfile),
}

/// Reads any profile Rivet knows; counter files become profiles of the input binary.
pub fn read_profile(path: &std::path::Path) -> Result<Input, UserError> {
    let bytes = std::fs::read(path).map_err(|e| {
        UserError::new(format!("cannot read {}: {e}", path.display()))
            .hint("check the path and its permissions")
    })?;
    if is_counter_file(&bytes) {
        let counts = CounterFile::parse(&bytes).map_err(|e| {
            UserError::new(format!("{}: {e}", path.display()))
                .hint("a counter file is written by a binary from `rivet instrument`")
        })?;
        return Ok(Input::Located(counts.to_profile()));
    }
    match read_any(&bytes) {
        Ok(AnyProfile::Located { profile, .. }) => Ok(Input::Located(profile)),
        Ok(AnyProfile::Yaml(y)) => Ok(Input::Yaml(y)),
        Err(e) => Err(UserError::new(format!("{}: {e}", path.display())).hint(
            "Rivet reads its counter files and profiles, BOLT fdata and YAML; perf.data goes through `rivet aggregate`",
        )),
    }
}

pub fn run(args: &MergeArgs) -> Result<(), UserError> {
    let format =
        args.format
            .unwrap_or_else(|| match args.output.extension().and_then(|e| e.to_str()) {
                Some("fdata") => FormatArg::Fdata,
                Some("yaml" | "yml") => FormatArg::Yaml,
                _ => FormatArg::Rivet,
            });
    let mut located = Vec::new();
    let mut yamls = Vec::new();
    for path in &args.inputs {
        match read_profile(path)? {
            Input::Located(p) => located.push(p),
            Input::Yaml(y) => yamls.push(y),
        }
    }
    let describe = |e: &dyn std::fmt::Display| {
        let mut message = e.to_string();
        for (i, path) in args.inputs.iter().enumerate() {
            message = message.replace(&format!("input {}", i + 1), &path.display().to_string());
        }
        UserError::new(message)
    };
    let text = if !yamls.is_empty() {
        if !located.is_empty() {
            return Err(UserError::new(
                "BOLT YAML profiles cannot be merged with address-based ones (counter files, Rivet profiles, fdata)",
            )
            .hint("merge the YAML profiles on their own, or give Rivet the fdata ones"));
        }
        if format != FormatArg::Yaml {
            return Err(
                UserError::new("YAML profiles merge into YAML only").hint("use --format yaml")
            );
        }
        yaml::write(&merge::merge_yaml(yamls).map_err(|e| describe(&e))?)
    } else {
        let merged = merge::merge(located)
            .map_err(|e| describe(&e).hint("merge profiles of one build and of one kind"))?;
        match format {
            FormatArg::Rivet => {
                native::write(&merged).map_err(|e| UserError::new(e.to_string()))?
            }
            FormatArg::Fdata => fdata::write(&merged).map_err(|e| UserError::new(e.to_string()))?,
            FormatArg::Yaml => {
                return Err(UserError::new(
                    "address-based profiles cannot be written as YAML without the binary's CFG",
                )
                .hint("write --format rivet or fdata"));
            }
        }
    };
    let (pending, file) = PendingOutput::create(&args.output)?;
    pending.finish(file, text.as_bytes(), 0o644)?;
    Ok(())
}
