//! `rivet merge`: sum profiles of one binary (several runs, several workloads) into one.
//!
//! Inputs may be the counter files instrumented binaries write, Rivet profiles, or BOLT fdata;
//! BOLT YAML profiles merge only with each other (they are keyed by block index, not address).
//! The output is sorted, so the same inputs always give the same bytes. Mixing branch and
//! sample profiles, or profiles of different builds, is an error naming the inputs.

use std::path::PathBuf;

use rivet_profile::{fdata, merge, native, yaml};

use crate::error::UserError;
use crate::files::PendingOutput;
use crate::profile_use::{FormatArg, Input, read_profile};

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
