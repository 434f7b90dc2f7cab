//! Rivet's own profile format, and telling the profile formats apart.
//!
//! BOLT's fdata cannot say which binary a profile belongs to (no build-id) nor how it was
//! taken (instrumentation and LBR look alike), and Rivet must refuse a profile of another
//! build. So Rivet writes its own text format: a versioned header that says all of that,
//! followed by the same records as fdata, so that a person can read it and `grep` it like
//! one. It is strict, unlike the fdata reader: a file either is exactly what some Rivet wrote
//! (or a careful person edited) or it is refused, and a file cut short is noticed.
//!
//! ```text
//! file     := "rivet-profile" SP version NL           2 to 4 (1: version 2 without hashes)
//!             [ "binary" SP name NL ]               the profiled file's name, escaped as in fdata
//!             [ "build-id" SP hex NL ]              GNU build-id: lower-case hex, even length
//!             [ "arch" SP ( "x86-64" | "aarch64" ) NL ]      version 3: the instruction set
//!             "mode" SP ( "branches" | "samples" { SP event } ) NL
//!             "origin" SP ( "unknown" | "instrumentation" | "lbr" | "samples"
//!                         | "trace" | "spe" ) NL      trace and spe: version 3
//!             [ "bolted-collection" NL ]            locations refer to the pre-BOLT binary
//!             { hashes }                            by name, each name once
//!             "records" NL
//!             { record NL }                         fdata records (see `fdata`): branch lines
//!                                                   in mode branches, sample lines in mode
//!                                                   samples, memory lines in either
//!             "end" NL                              nothing may follow
//! hashes   := "function" SP name SP hash NL       the code of a function the records name
//!             { "block" SP offset SP last SP exact SP loose SP neighbours [ SP case ] NL }
//!                                                   its blocks, by offset, each offset once
//!                                                   (all numbers hex; see `model::BlockHash`;
//!                                                   case: version 4, never 0)
//! SP       := exactly one space; no spaces at the ends of a line; lines end in "\n" only
//! ```
//!
//! Every profile has exactly one spelling: besides the spacing, hex offsets are lower-case
//! without leading zeros, counts have no leading zeros, and names escape ' ' and '\' and
//! nothing else.
//!
//! Header lines come in the order shown, each at most once. Records are written sorted
//! (branches or samples, then memory, each in `BTreeMap` order) and may be read in any order,
//! but a record may not appear twice: summing is what `merge` is for. A later, incompatible
//! format gets a new version number on the first line; this reader reads versions 1 to 4
//! and refuses others. Version 2 added the hashes: what stale matching
//! (`rivet_passes::stale`) needs to carry a profile over to the next build of the program.
//! Version 3 added the `arch` line and the origins `trace` and `spe` (Arm's profiling
//! sources). Version 4 added a block's `case` field (where switch tables lead to it), written
//! only for blocks that some table leads to. A profile is written in the lowest version that
//! can say it: version 2 unless it names an architecture or one of the new origins (3) or a
//! block's case (4), so that profiles of x86-64 programs (which Rivet leaves without an `arch`
//! line, as every profile was before AArch64) and profiles without hashes stay the bytes they
//! were and readable by the Rivets that read them before.

use std::collections::btree_map::Entry;
use std::fmt::Write as _;

use thiserror::Error;

use crate::fdata::{self, Dialect, FdataError, Record, shown};
use crate::model::{Architecture, BlockHash, FunctionHash, Mode, Origin, Profile};
use crate::yaml::{self, YamlError, YamlProfile};

/// The first line's words and the version this module reads and writes.
const MAGIC: &str = "rivet-profile";
const VERSION: u32 = 4;
/// The version written for a profile that needs version 3's fields but no block's case.
const VERSION_WITH_ARCH: u32 = 3;
/// The version written for a profile that needs nothing version 3 added.
const VERSION_WITHOUT_ARCH: u32 = 2;
/// The oldest version this module still reads (the same without hashes).
const OLDEST_VERSION: u32 = 1;

/// A native profile that cannot be read, or a profile that cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NativeError {
    /// The text does not follow the grammar; `line` counts from 1.
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    /// The profile holds something the format cannot write.
    #[error("cannot write this profile: {0}")]
    Unrepresentable(String),
}

/// Reads a profile in Rivet's native format.
pub fn parse(text: &str) -> Result<Profile, NativeError> {
    let mut lines = Lines::new(text);

    let (line, first) = lines.next_line()?;
    let version = first
        .strip_prefix(MAGIC)
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or_else(|| {
            syntax(
                line,
                format!("expected `{MAGIC} {VERSION}`, found {}", shown(first)),
            )
        })?;
    let version = match fdata::decimal(version, Dialect::Native) {
        Some(v) if (u64::from(OLDEST_VERSION)..=u64::from(VERSION)).contains(&v) => v,
        Some(v) => {
            return Err(syntax(
                line,
                format!(
                    "this is version {v} of Rivet's profile format; this Rivet reads versions {OLDEST_VERSION} to {VERSION}"
                ),
            ));
        }
        None => {
            return Err(syntax(
                line,
                format!("expected a version number, found {}", shown(version)),
            ));
        }
    };

    let mut profile = Profile::new(Mode::Branches);
    let (mut line, mut text_line) = lines.next_line()?;
    if let Some(name) = text_line.strip_prefix("binary ") {
        profile.binary_name = Some(one_name(name).map_err(|m| syntax(line, m))?);
        (line, text_line) = lines.next_line()?;
    }
    if let Some(id) = text_line.strip_prefix("build-id ") {
        check_build_id(id).map_err(|m| syntax(line, m))?;
        profile.build_id = Some(id.to_owned());
        (line, text_line) = lines.next_line()?;
    }
    if version >= 3
        && let Some(word) = text_line.strip_prefix("arch ")
    {
        profile.architecture = Some(Architecture::from_keyword(word).ok_or_else(|| {
            syntax(
                line,
                format!(
                    "expected an architecture (x86-64 or aarch64), found {}",
                    shown(word)
                ),
            )
        })?);
        (line, text_line) = lines.next_line()?;
    }
    profile.mode = match text_line.strip_prefix("mode ") {
        Some("branches") => Mode::Branches,
        Some(rest) if rest == "samples" || rest.starts_with("samples ") => {
            let events: Vec<String> = rest.split(' ').skip(1).map(str::to_owned).collect();
            for event in &events {
                fdata::check_event(event).map_err(|m| syntax(line, m))?;
            }
            Mode::Samples { events }
        }
        Some(other) => {
            return Err(syntax(
                line,
                format!(
                    "expected `mode branches` or `mode samples [events]`, found mode {}",
                    shown(other)
                ),
            ));
        }
        None => return Err(expected_header(line, text_line, "mode")),
    };
    (line, text_line) = lines.next_line()?;
    profile.origin = match text_line.strip_prefix("origin ") {
        Some(word) => match Origin::from_keyword(word) {
            Some(origin) if version >= 3 || !origin_needs_version_3(origin) => origin,
            Some(_) => {
                return Err(syntax(
                    line,
                    format!(
                        "origin {word} needs version 3 of the format, this is version {version}"
                    ),
                ));
            }
            None => {
                return Err(syntax(
                    line,
                    format!(
                        "expected an origin (unknown, instrumentation, lbr, samples, trace or spe), found {}",
                        shown(word)
                    ),
                ));
            }
        },
        None => return Err(expected_header(line, text_line, "origin")),
    };
    (line, text_line) = lines.next_line()?;
    if text_line == "bolted-collection" {
        profile.bolted_collection = true;
        (line, text_line) = lines.next_line()?;
    }
    while version >= 2
        && let Some(rest) = text_line.strip_prefix("function ")
    {
        let (name, hash) = function_line(rest).map_err(|m| syntax(line, m))?;
        if profile
            .hashes
            .last_key_value()
            .is_some_and(|(last, _)| *last >= name)
        {
            return Err(syntax(
                line,
                "functions' hashes come sorted by name, each name once".into(),
            ));
        }
        let mut code = FunctionHash {
            hash,
            blocks: Vec::new(),
        };
        (line, text_line) = lines.next_line()?;
        while let Some(rest) = text_line.strip_prefix("block ") {
            let block = block_line(rest, version).map_err(|m| syntax(line, m))?;
            if code.blocks.last().is_some_and(|b| b.offset >= block.offset) {
                return Err(syntax(
                    line,
                    "a function's blocks come sorted by offset, each offset once".into(),
                ));
            }
            code.blocks.push(block);
            (line, text_line) = lines.next_line()?;
        }
        profile.hashes.insert(name, code);
    }
    if text_line != "records" {
        return Err(expected_header(line, text_line, "records"));
    }

    let samples = matches!(profile.mode, Mode::Samples { .. });
    loop {
        let (line, text_line) = lines.next_line()?;
        if text_line == "end" {
            if lines.at_end() {
                return Ok(profile);
            }
            return Err(syntax(line + 1, "nothing may follow the `end` line".into()));
        }
        let record = fdata::parse_record(text_line, Dialect::Native, samples)
            .map_err(|m| syntax(line, m))?;
        let duplicate = match record {
            Record::Branch {
                from,
                to,
                mispreds,
                count,
            } => match profile.branches.entry((from, to)) {
                Entry::Occupied(_) => true,
                Entry::Vacant(v) => {
                    v.insert(crate::model::BranchCount { count, mispreds });
                    false
                }
            },
            Record::Sample { at, count } => profile.samples.insert(at, count).is_some(),
            Record::Memory { pc, data, count } => {
                profile.memory.insert((pc, data), count).is_some()
            }
        };
        if duplicate {
            return Err(syntax(
                line,
                "this record appeared before (records are unique)".into(),
            ));
        }
    }
}

/// Writes a profile in Rivet's native format.
pub fn write(profile: &Profile) -> Result<String, NativeError> {
    let unrepresentable = NativeError::Unrepresentable;
    let has_cases = profile
        .hashes
        .values()
        .any(|code| code.blocks.iter().any(|b| b.case != 0));
    let version = if has_cases {
        VERSION
    } else if profile.architecture.is_some() || origin_needs_version_3(profile.origin) {
        VERSION_WITH_ARCH
    } else {
        VERSION_WITHOUT_ARCH
    };
    let mut out = format!("{MAGIC} {version}\n");
    if let Some(name) = &profile.binary_name {
        let name =
            fdata::escape_name(name).map_err(|m| unrepresentable(format!("binary name: {m}")))?;
        let _ = writeln!(out, "binary {name}");
    }
    if let Some(id) = &profile.build_id {
        check_build_id(id).map_err(unrepresentable)?;
        let _ = writeln!(out, "build-id {id}");
    }
    if let Some(architecture) = profile.architecture {
        let _ = writeln!(out, "arch {}", architecture.keyword());
    }
    match &profile.mode {
        Mode::Branches => out.push_str("mode branches\n"),
        Mode::Samples { events } => {
            out.push_str("mode samples");
            for event in events {
                fdata::check_event(event).map_err(unrepresentable)?;
                out.push(' ');
                out.push_str(event);
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out, "origin {}", profile.origin.keyword());
    if profile.bolted_collection {
        out.push_str("bolted-collection\n");
    }
    write_hashes(profile, &mut out).map_err(unrepresentable)?;
    out.push_str("records\n");
    fdata::write_records(profile, &mut out).map_err(unrepresentable)?;
    out.push_str("end\n");
    Ok(out)
}

/// Origins that version 3 of the format added.
fn origin_needs_version_3(origin: Origin) -> bool {
    matches!(origin, Origin::Trace | Origin::Spe)
}

/// The kinds of profile file Rivet knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Rivet's own format (this module).
    Native,
    /// BOLT's fdata.
    Fdata,
    /// BOLT's YAML profile.
    Yaml,
    /// A `perf.data` file: raw samples that must be aggregated against the binary first.
    PerfData,
}

/// Tells the format of a profile from its first bytes. As in BOLT, a file that starts with
/// `---` is YAML and anything not recognised is taken for fdata (whose parser then says what
/// is wrong with it).
pub fn detect(bytes: &[u8]) -> Format {
    if bytes.starts_with(format!("{MAGIC} ").as_bytes()) {
        Format::Native
    } else if bytes.starts_with(b"---") {
        Format::Yaml
    } else if bytes.starts_with(b"PERFILE") {
        Format::PerfData
    } else {
        Format::Fdata
    }
}

/// A profile read by `read_any`. YAML profiles are keyed by block index, not address, and
/// need the binary's CFG to become a `Profile`, so they stay in their own type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnyProfile {
    /// Read from the native format or fdata (which one is `format`).
    Located {
        profile: Profile,
        format: Format,
    },
    Yaml(YamlProfile),
}

/// Why `read_any` could not read a profile.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReadError {
    #[error("line {line}: the profile is not UTF-8 text")]
    NotUtf8 { line: usize },
    #[error("perf.data holds raw samples: aggregate it against the binary first")]
    PerfData,
    #[error("Rivet profile: {0}")]
    Native(#[from] NativeError),
    #[error("fdata profile: {0}")]
    Fdata(#[from] FdataError),
    #[error("YAML profile: {0}")]
    Yaml(#[from] YamlError),
}

/// Reads a profile in any format Rivet knows (see `detect`).
pub fn read_any(bytes: &[u8]) -> Result<AnyProfile, ReadError> {
    let format = detect(bytes);
    if format == Format::PerfData {
        return Err(ReadError::PerfData);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| ReadError::NotUtf8 {
        line: 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
    })?;
    match format {
        Format::Native => Ok(AnyProfile::Located {
            profile: parse(text)?,
            format,
        }),
        Format::Yaml => Ok(AnyProfile::Yaml(yaml::parse(text)?)),
        _ => Ok(AnyProfile::Located {
            profile: fdata::parse(text)?,
            format,
        }),
    }
}

/// The hash lines of `profile`, sorted as the reader wants them.
pub(crate) fn write_hashes(profile: &Profile, out: &mut String) -> Result<(), String> {
    for (name, code) in &profile.hashes {
        let name = fdata::escape_name(name).map_err(|m| format!("function name: {m}"))?;
        let _ = writeln!(out, "function {name} {:x}", code.hash);
        let mut previous = None;
        for b in &code.blocks {
            if previous.is_some_and(|p| p >= b.offset) {
                return Err(format!(
                    "the blocks of {name} are not sorted by offset, each offset once"
                ));
            }
            previous = Some(b.offset);
            let _ = write!(
                out,
                "block {:x} {:x} {:x} {:x} {:x}",
                b.offset, b.last, b.exact, b.loose, b.neighbours
            );
            if b.case != 0 {
                let _ = write!(out, " {:x}", b.case);
            }
            out.push('\n');
        }
    }
    Ok(())
}

/// `name hash` of a `function` line.
fn function_line(rest: &str) -> Result<(String, u64), String> {
    let mut fields = fdata::Fields::new(rest, Dialect::Native);
    let name = fields.next_field()?.ok_or("expected a function name")?;
    let name = fdata::unescape_name(name, Dialect::Native)?;
    let hash = hex_field(&mut fields, "the function's hash")?;
    no_more(&mut fields)?;
    Ok((name, hash))
}

/// `offset last exact loose neighbours [case]` of a `block` line (`case` from version 4 on).
fn block_line(rest: &str, version: u64) -> Result<BlockHash, String> {
    let mut fields = fdata::Fields::new(rest, Dialect::Native);
    let mut block = BlockHash {
        offset: hex_field(&mut fields, "the block's offset")?,
        last: hex_field(&mut fields, "the offset of the block's last instruction")?,
        exact: hex_field(&mut fields, "the block's exact hash")?,
        loose: hex_field(&mut fields, "the block's loose hash")?,
        neighbours: hex_field(&mut fields, "the block's neighbours hash")?,
        case: 0,
    };
    if version >= 4
        && let Some(word) = fields.next_field()?
    {
        block.case = fdata::hex(word, Dialect::Native).ok_or_else(|| {
            format!(
                "expected the block's case in canonical hex (lower case, no leading zeros), found {}",
                shown(word)
            )
        })?;
        if block.case == 0 {
            // Absent means 0: one spelling per profile.
            return Err("a block's case is written only when it is not 0".into());
        }
    }
    no_more(&mut fields)?;
    if block.last < block.offset {
        return Err("a block's last instruction cannot come before its start".into());
    }
    Ok(block)
}

fn hex_field(fields: &mut fdata::Fields<'_>, what: &str) -> Result<u64, String> {
    let word = fields
        .next_field()?
        .ok_or_else(|| format!("expected {what}"))?;
    fdata::hex(word, Dialect::Native).ok_or_else(|| {
        format!(
            "expected {what} in canonical hex (lower case, no leading zeros), found {}",
            shown(word)
        )
    })
}

fn no_more(fields: &mut fdata::Fields<'_>) -> Result<(), String> {
    match fields.next_field()? {
        None => Ok(()),
        Some(extra) => Err(format!(
            "expected the end of the line, found {}",
            shown(extra)
        )),
    }
}

fn syntax(line: usize, message: String) -> NativeError {
    NativeError::Syntax { line, message }
}

fn expected_header(line: usize, found: &str, key: &str) -> NativeError {
    syntax(
        line,
        format!("expected the `{key}` line, found {}", shown(found)),
    )
}

/// A header value that must be one escaped name and nothing else.
fn one_name(field: &str) -> Result<String, String> {
    let mut fields = fdata::Fields::new(field, Dialect::Native);
    let name = fields.next_field()?.ok_or("expected a name")?;
    if let Some(extra) = fields.next_field()? {
        return Err(format!(
            "expected the end of the line after the name, found {} (escape spaces as '\\ ')",
            shown(extra)
        ));
    }
    fdata::unescape_name(name, Dialect::Native)
}

fn check_build_id(id: &str) -> Result<(), String> {
    let hex = id
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if id.is_empty() || !id.len().is_multiple_of(2) || !hex {
        return Err(format!(
            "a build-id is an even number of lower-case hex digits, found {}",
            shown(id)
        ));
    }
    Ok(())
}

/// The lines of the text, numbered from 1. Every line must end in a newline: a missing one
/// means the file was cut short.
struct Lines<'a> {
    rest: &'a str,
    number: usize,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Lines<'a> {
        Lines {
            rest: text,
            number: 0,
        }
    }

    fn next_line(&mut self) -> Result<(usize, &'a str), NativeError> {
        self.number += 1;
        match self.rest.split_once('\n') {
            Some((line, rest)) => {
                self.rest = rest;
                Ok((self.number, line))
            }
            None if self.rest.is_empty() => Err(syntax(
                self.number,
                "the file ends before the `end` line (was it cut short?)".into(),
            )),
            None => Err(syntax(
                self.number,
                "the last line has no newline (was the file cut short?)".into(),
            )),
        }
    }

    fn at_end(&self) -> bool {
        self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Location;

    fn example() -> Profile {
        let mut p = Profile::new(Mode::Branches);
        p.binary_name = Some("my app".into());
        p.build_id = Some("f157cb091eaa5062".into());
        p.origin = Origin::Instrumentation;
        p.add_branch(
            Location::symbol("main", 0x40),
            Location::symbol("main", 0x20),
            19998,
            0,
        );
        p.add_branch(Location::unknown(), Location::symbol("a\\b", 0), 1, 0);
        p.add_memory(
            Location::symbol("main", 0x1a),
            Location::symbol("var", 8),
            3,
        );
        p.hashes.insert(
            "main".into(),
            FunctionHash {
                hash: 0xfeed,
                blocks: vec![
                    BlockHash {
                        offset: 0,
                        last: 0x1a,
                        exact: 1,
                        loose: 2,
                        neighbours: 3,
                        case: 0,
                    },
                    BlockHash {
                        offset: 0x20,
                        last: 0x40,
                        exact: 0xabc,
                        loose: 0,
                        neighbours: u64::MAX,
                        case: 0,
                    },
                ],
            },
        );
        p
    }

    const EXAMPLE: &str = "rivet-profile 2
binary my\\ app
build-id f157cb091eaa5062
mode branches
origin instrumentation
function main feed
block 0 1a 1 2 3
block 20 40 abc 0 ffffffffffffffff
records
0 [unknown] 0 1 a\\\\b 0 0 1
1 main 40 1 main 20 0 19998
4 main 1a 4 var 8 3
end
";

    #[test]
    fn writes_the_documented_layout_and_reads_it_back() {
        assert_eq!(write(&example()).unwrap(), EXAMPLE);
        assert_eq!(parse(EXAMPLE).unwrap(), example());
        let mut samples = Profile::new(Mode::Samples {
            events: vec!["cpu-clock:u".into(), "x".into()],
        });
        samples.bolted_collection = true;
        samples.add_sample(Location::symbol("f", 0x1f), 7);
        let text = write(&samples).unwrap();
        assert_eq!(
            text,
            "rivet-profile 2\nmode samples cpu-clock:u x\norigin unknown\nbolted-collection\n\
             records\n1 f 1f 7\nend\n"
        );
        assert_eq!(parse(&text).unwrap(), samples);
    }

    #[test]
    fn is_strict() {
        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            err(&EXAMPLE.replace("rivet-profile 2", "rivet-profile 5")),
            "line 1: this is version 5 of Rivet's profile format; this Rivet reads versions 1 to 4"
        );
        assert_eq!(
            err(&EXAMPLE.replace("end\n", "")),
            "line 13: the file ends before the `end` line (was it cut short?)"
        );
        assert_eq!(
            err(&EXAMPLE.replace("end\n", "end")),
            "line 13: the last line has no newline (was the file cut short?)"
        );
        assert_eq!(
            err(&EXAMPLE[..EXAMPLE.len() - 20]),
            "line 12: the last line has no newline (was the file cut short?)"
        );
        assert_eq!(
            err(&format!("{EXAMPLE}\n")),
            "line 14: nothing may follow the `end` line"
        );
        assert_eq!(
            err(&EXAMPLE.replace("records\n", "records\n4 main 1a 4 var 8 1\n")),
            "line 13: this record appeared before (records are unique)"
        );
        assert_eq!(
            err(&EXAMPLE.replace("0 19998", "0  19998")),
            "line 11: fields are separated by exactly one space, with none at the ends of the line"
        );
        // Header lines in another order.
        assert_eq!(
            err(&EXAMPLE.replace(
                "binary my\\ app\nbuild-id f157cb091eaa5062\n",
                "build-id f157cb091eaa5062\nbinary my\\ app\n"
            )),
            "line 3: expected the `mode` line, found \"binary my\\\\ app\""
        );
        assert_eq!(
            err(&EXAMPLE.replace("build-id f157cb091eaa5062", "build-id F157")),
            "line 3: a build-id is an even number of lower-case hex digits, found \"F157\""
        );
        assert_eq!(
            err(&EXAMPLE.replace("origin instrumentation", "origin magic")),
            "line 5: expected an origin (unknown, instrumentation, lbr, samples, trace or spe), found \"magic\""
        );
        assert_eq!(
            err(&EXAMPLE.replace("binary my\\ app", "binary my app")),
            "line 2: expected the end of the line after the name, found \"app\" (escape spaces as '\\ ')"
        );
        let e = err(&EXAMPLE.replace("mode branches", "mode samples"));
        assert!(
            e.starts_with("line 10: expected the end of the line after the sample count, found"),
            "{e}"
        );
        assert!(
            e.ends_with(
                "(a `no_lbr` profile has sample lines `flag name offset count`, not branches)"
            ),
            "{e}"
        );
        assert_eq!(
            err("rivet-profile 2\r\n"),
            "line 1: expected a version number, found \"2\\r\""
        );
    }

    #[test]
    fn the_architecture_and_the_trace_origins_need_version_3() {
        // An x86-64 profile (no architecture) keeps version 2, byte for byte.
        assert!(write(&example()).unwrap().starts_with("rivet-profile 2\n"));
        let mut arm = example();
        arm.architecture = Some(Architecture::Aarch64);
        arm.origin = Origin::Trace;
        let text = write(&arm).unwrap();
        assert!(
            text.starts_with(
                "rivet-profile 3\nbinary my\\ app\nbuild-id f157cb091eaa5062\narch aarch64\n"
            ),
            "{text}"
        );
        assert!(text.contains("\norigin trace\n"), "{text}");
        assert_eq!(parse(&text).unwrap(), arm);
        let mut spe = example();
        spe.origin = Origin::Spe;
        let text = write(&spe).unwrap();
        assert!(text.starts_with("rivet-profile 3\n"), "{text}");
        assert_eq!(parse(&text).unwrap(), spe);
        let err = |text: &str| parse(text).unwrap_err().to_string();
        // Version 2 has no arch line and no new origins.
        assert_eq!(
            err(&text.replace("rivet-profile 3", "rivet-profile 2")),
            "line 5: origin spe needs version 3 of the format, this is version 2"
        );
        let v2_arch = write(&arm)
            .unwrap()
            .replace("rivet-profile 3", "rivet-profile 2");
        assert_eq!(
            err(&v2_arch),
            "line 4: expected the `mode` line, found \"arch aarch64\""
        );
        assert_eq!(
            err(&write(&arm).unwrap().replace("arch aarch64", "arch mips")),
            "line 4: expected an architecture (x86-64 or aarch64), found \"mips\""
        );
    }

    #[test]
    fn a_block_case_needs_version_4_and_is_never_written_as_0() {
        let mut cased = example();
        cased.hashes.get_mut("main").unwrap().blocks[1].case = 0x5a;
        let text = write(&cased).unwrap();
        assert!(text.starts_with("rivet-profile 4\n"), "{text}");
        assert!(
            text.contains("\nblock 0 1a 1 2 3\nblock 20 40 abc 0 ffffffffffffffff 5a\n"),
            "{text}"
        );
        assert_eq!(parse(&text).unwrap(), cased);
        // An AArch64 profile with cases is version 4 too, and keeps its arch line.
        let mut arm = cased.clone();
        arm.architecture = Some(Architecture::Aarch64);
        let arm_text = write(&arm).unwrap();
        assert!(arm_text.starts_with("rivet-profile 4\n"), "{arm_text}");
        assert_eq!(parse(&arm_text).unwrap(), arm);
        // Version 4 reads blocks without a case (case 0), so an older profile's lines stay valid.
        let plain = EXAMPLE.replace("rivet-profile 2", "rivet-profile 4");
        assert_eq!(parse(&plain).unwrap(), example());
        let err = |text: &str| parse(text).unwrap_err().to_string();
        // Earlier versions have no case field.
        assert_eq!(
            err(&text.replace("rivet-profile 4", "rivet-profile 3")),
            "line 8: expected the end of the line, found \"5a\""
        );
        assert_eq!(
            err(&text.replace("ffffffffffffffff 5a", "ffffffffffffffff 0")),
            "line 8: a block's case is written only when it is not 0"
        );
        assert_eq!(
            err(&text.replace("ffffffffffffffff 5a", "ffffffffffffffff 05a")),
            "line 8: expected the block's case in canonical hex (lower case, no leading zeros), found \"05a\""
        );
        assert_eq!(
            err(&text.replace("ffffffffffffffff 5a", "ffffffffffffffff 5a 1")),
            "line 8: expected the end of the line, found \"1\""
        );
    }

    #[test]
    fn reads_version_1_and_checks_the_hashes() {
        // Version 1 is version 2 without hashes, and may not hold any.
        let v1 = EXAMPLE
            .replace("rivet-profile 2", "rivet-profile 1")
            .replace(
                "function main feed\nblock 0 1a 1 2 3\nblock 20 40 abc 0 ffffffffffffffff\n",
                "",
            );
        let mut expected = example();
        expected.hashes.clear();
        assert_eq!(parse(&v1).unwrap(), expected);
        assert_eq!(
            parse(&EXAMPLE.replace("rivet-profile 2", "rivet-profile 1"))
                .unwrap_err()
                .to_string(),
            "line 6: expected the `records` line, found \"function main feed\""
        );
        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            err(&EXAMPLE.replace("block 20 40", "block 0 40")),
            "line 8: a function's blocks come sorted by offset, each offset once"
        );
        assert_eq!(
            err(&EXAMPLE.replace("block 20 40", "block 20 1f")),
            "line 8: a block's last instruction cannot come before its start"
        );
        assert_eq!(
            err(&EXAMPLE.replace("block 0 1a 1 2 3", "block 0 1a 1 2")),
            "line 7: expected the block's neighbours hash"
        );
        assert_eq!(
            err(&EXAMPLE.replace("block 0 1a 1 2 3", "block 0 1a 1 2 3 4")),
            "line 7: expected the end of the line, found \"4\""
        );
        assert_eq!(
            err(&EXAMPLE.replace("main feed", "main 0feed")),
            "line 6: expected the function's hash in canonical hex (lower case, no leading zeros), found \"0feed\""
        );
        let twice = EXAMPLE.replace("records\n", "function main 1\nrecords\n");
        assert_eq!(
            err(&twice),
            "line 9: functions' hashes come sorted by name, each name once"
        );
    }

    #[test]
    fn refuses_to_write_what_it_could_not_read() {
        let mut p = example();
        p.build_id = Some("xyz".into());
        assert!(matches!(write(&p), Err(NativeError::Unrepresentable(_))));
        let mut p = example();
        p.binary_name = Some("two\nlines".into());
        assert!(write(&p).is_err());
        let mut p = example();
        p.hashes.get_mut("main").unwrap().blocks.reverse();
        assert!(matches!(write(&p), Err(NativeError::Unrepresentable(_))));
    }

    #[test]
    fn detects_and_reads_any_format() {
        assert_eq!(detect(EXAMPLE.as_bytes()), Format::Native);
        assert_eq!(detect(b"---\nheader:\n"), Format::Yaml);
        assert_eq!(detect(b"PERFILE2\0\0"), Format::PerfData);
        assert_eq!(detect(b"1 main 0 1 f 0 0 1\n"), Format::Fdata);
        assert_eq!(detect(b""), Format::Fdata);

        let native = read_any(EXAMPLE.as_bytes()).unwrap();
        assert_eq!(
            native,
            AnyProfile::Located {
                profile: example(),
                format: Format::Native
            }
        );
        let fdata_text = fdata::write(&example()).unwrap();
        let AnyProfile::Located {
            profile,
            format: Format::Fdata,
        } = read_any(fdata_text.as_bytes()).unwrap()
        else {
            panic!("fdata not read as fdata");
        };
        assert_eq!(profile.branches, example().branches);
        assert!(matches!(
            read_any(b"---\nheader: {}\n"),
            Err(ReadError::Yaml(_))
        ));
        assert_eq!(read_any(b"PERFILE2"), Err(ReadError::PerfData));
        assert_eq!(
            read_any(b"1 a 0 1 b 0 0 1\n1 \xff 0"),
            Err(ReadError::NotUtf8 { line: 2 })
        );
        assert_eq!(
            read_any(b"1 a 0 1 b 0 0 x\n").unwrap_err().to_string(),
            "fdata profile: line 1: expected a decimal count after the mispredict count, found \"x\""
        );
    }
}
