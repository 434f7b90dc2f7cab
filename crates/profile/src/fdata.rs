//! BOLT's `fdata` text profile, read and written.
//!
//! fdata is what `perf2bolt` and BOLT's instrumentation runtime write and what `llvm-bolt
//! -data=` and `merge-fdata` read, so reading it lets users bring BOLT profiles to Rivet and
//! writing it lets our tests hand Rivet's profiles to BOLT. The grammar, as llvm-bolt-19
//! reads and writes it (`tests/bolt_interop.rs` checks both directions against the tool):
//!
//! ```text
//! file     := [ "no_lbr" { " " event } NL ] [ "boltedcollection" NL ] { record NL }
//! record   := branch | sample | memory
//! branch   := loc " " loc " " mispreds " " count        (branch profiles: no `no_lbr` header)
//! sample   := loc " " count                             (`no_lbr` profiles)
//! memory   := memloc " " memloc " " count               (instruction, then data address)
//! loc      := ("0" | "1" | "2") " " name " " hexoff     (external, symbol, local symbol)
//! memloc   := ("3" | "4" | "5") " " name " " hexoff     (the same kinds, plus 3)
//! name     := non-empty; a ' ' or '\' in it is written as "\ " or "\\"
//! hexoff   := hex digits without "0x";  mispreds, count := decimal digits
//! ```
//!
//! The mispredict count comes *before* the count. Reading is lenient where that costs nothing
//! and loses nothing: runs of spaces separate fields, blank lines and a `\r` before the newline
//! are ignored, the two headers may come in either order, memory lines may be mixed with the
//! others, and a record that appears twice is summed. Anything else is an error naming the
//! line and what was expected there; no input makes the parser panic (it is fuzzed).
//!
//! Writing is deterministic (records in `BTreeMap` order) and produces exactly what
//! llvm-bolt-19 reads: `no_lbr` before `boltedcollection` (its reader accepts only that
//! order), branch or sample lines first and memory lines after them, one space between
//! fields. `merge-fdata-19` reads the branch profiles we write; it does not understand
//! `no_lbr` or memory lines at all, whoever wrote them. What fdata cannot say (an empty name,
//! a newline in a name, an event name with a space) is refused rather than written wrongly.

use std::borrow::Cow;
use std::fmt::Write as _;

use thiserror::Error;

use crate::model::{LocKind, Location, Mode, Origin, Profile};

/// A profile that is not valid fdata, or one that fdata cannot represent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FdataError {
    /// The text does not follow the grammar; `line` counts from 1.
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    /// The profile holds something fdata has no way to write.
    #[error("cannot write this profile as fdata: {0}")]
    Unrepresentable(String),
}

/// Reads an fdata profile. Branch profiles come back with `Origin::Unknown` (fdata does not
/// say whether LBR or instrumentation produced them), `no_lbr` ones with `Origin::Samples`.
pub fn parse(text: &str) -> Result<Profile, FdataError> {
    let mut profile = Profile::new(Mode::Branches);
    let mut seen_no_lbr = false;
    let mut seen_record = false;
    for (index, raw) in text.split('\n').enumerate() {
        let line = index + 1;
        let syntax = |message: String| FdataError::Syntax { line, message };
        let content = raw.strip_suffix('\r').unwrap_or(raw);
        let mut words = content.split(' ').filter(|w| !w.is_empty());
        let Some(first) = words.next() else {
            continue; // blank line
        };
        match first {
            "no_lbr" | "boltedcollection" if seen_record => {
                return Err(syntax(format!(
                    "the `{first}` header must come before the first record"
                )));
            }
            "no_lbr" => {
                if seen_no_lbr {
                    return Err(syntax("a second `no_lbr` header".into()));
                }
                seen_no_lbr = true;
                let events: Vec<String> = words.map(str::to_owned).collect();
                for event in &events {
                    check_event(event).map_err(syntax)?;
                }
                profile.mode = Mode::Samples { events };
                profile.origin = Origin::Samples;
            }
            "boltedcollection" => {
                if profile.bolted_collection {
                    return Err(syntax("a second `boltedcollection` header".into()));
                }
                if let Some(extra) = words.next() {
                    return Err(syntax(format!(
                        "expected the end of the line after `boltedcollection`, found {}",
                        shown(extra)
                    )));
                }
                profile.bolted_collection = true;
            }
            _ => {
                seen_record = true;
                let samples = matches!(profile.mode, Mode::Samples { .. });
                match parse_record(content, Dialect::Fdata, samples).map_err(syntax)? {
                    Record::Branch {
                        from,
                        to,
                        mispreds,
                        count,
                    } => profile.add_branch(from, to, count, mispreds),
                    Record::Sample { at, count } => profile.add_sample(at, count),
                    Record::Memory { pc, data, count } => profile.add_memory(pc, data, count),
                }
            }
        }
    }
    Ok(profile)
}

/// Writes a profile as fdata (see the module doc for the exact layout).
pub fn write(profile: &Profile) -> Result<String, FdataError> {
    let mut out = String::new();
    if let Mode::Samples { events } = &profile.mode {
        out.push_str("no_lbr");
        for event in events {
            check_event(event).map_err(FdataError::Unrepresentable)?;
            out.push(' ');
            out.push_str(event);
        }
        out.push('\n');
    }
    if profile.bolted_collection {
        out.push_str("boltedcollection\n");
    }
    write_records(profile, &mut out).map_err(FdataError::Unrepresentable)?;
    Ok(out)
}

// ---- Shared with the native format, whose records are fdata records. ----

/// How strictly record lines are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// fdata as BOLT reads it: any run of spaces around fields, any escaped character,
    /// hex digits in either case, leading zeros.
    Fdata,
    /// Rivet's native format: one spelling per record. Exactly one space between fields and
    /// none around them, only ' ' and '\' escaped, lower-case hex and no leading zeros.
    Native,
}

/// One record line, parsed.
#[derive(Debug)]
pub(crate) enum Record {
    Branch {
        from: Location,
        to: Location,
        mispreds: u64,
        count: u64,
    },
    Sample {
        at: Location,
        count: u64,
    },
    Memory {
        pc: Location,
        data: Location,
        count: u64,
    },
}

/// Parses one record line (without its newline). `samples` selects the `no_lbr` shape for
/// code locations. The error is the message only; the caller adds the line number.
pub(crate) fn parse_record(line: &str, dialect: Dialect, samples: bool) -> Result<Record, String> {
    let mut fields = Fields::new(line, dialect);
    let flag_word = fields.next_field()?.ok_or("empty record")?;
    let flag = parse_flag(flag_word)?;
    if flag >= 3 {
        let pc = parse_location(&mut fields, flag - 3)?;
        let data_flag = match fields.next_field()? {
            Some(w) => match parse_flag(w)? {
                f @ 3..=5 => f - 3,
                _ => {
                    return Err(format!(
                        "the data address of a memory line needs flag 3, 4 or 5, found {}",
                        shown(w)
                    ));
                }
            },
            None => return Err(after(&pc, "the data address's flag (3, 4 or 5)", None)),
        };
        let data = parse_location(&mut fields, data_flag)?;
        let count = parse_decimal(&mut fields, &data, "decimal count")?;
        fields.expect_end("the count")?;
        return Ok(Record::Memory { pc, data, count });
    }
    let from = parse_location(&mut fields, flag)?;
    if samples {
        let count = parse_decimal(&mut fields, &from, "decimal sample count")?;
        fields.expect_end_with_hint(
            "the sample count",
            "a `no_lbr` profile has sample lines `flag name offset count`, not branches",
        )?;
        return Ok(Record::Sample { at: from, count });
    }
    const SAMPLE_HINT: &str =
        "a line `flag name offset count` is a sample: those need the `no_lbr` header";
    let to_flag = match fields.next_field()? {
        Some(w)
            if decimal(w, Dialect::Fdata).is_some() && fields.clone().next_field() == Ok(None) =>
        {
            return Err(format!(
                "expected the branch target's flag after {} {:x}, found {} ({SAMPLE_HINT})",
                shown(&from.name),
                from.offset,
                shown(w)
            ));
        }
        Some(w) => match parse_flag(w)? {
            f @ 0..=2 => f,
            _ => {
                return Err(format!(
                    "a branch target needs flag 0, 1 or 2, found {} (3, 4 and 5 start memory lines)",
                    shown(w)
                ));
            }
        },
        None => {
            return Err(after(&from, "the branch target's flag", Some(SAMPLE_HINT)));
        }
    };
    let to = parse_location(&mut fields, to_flag)?;
    let mispreds = parse_decimal(&mut fields, &to, "decimal mispredict count")?;
    let count = match fields.next_field()? {
        Some(w) => decimal(w, fields.dialect).ok_or_else(|| {
            format!(
                "expected a {}decimal count after the mispredict count, found {}",
                fields.dialect.number_style(),
                shown(w)
            )
        })?,
        None => {
            return Err(
                "expected a decimal count after the mispredict count, found the end of the line"
                    .into(),
            );
        }
    };
    fields.expect_end("the count")?;
    Ok(Record::Branch {
        from,
        to,
        mispreds,
        count,
    })
}

/// Appends every record of `profile` in fdata form: branch or sample lines (whichever the
/// mode allows), then memory lines. The error says what cannot be written.
pub(crate) fn write_records(profile: &Profile, out: &mut String) -> Result<(), String> {
    match profile.mode {
        Mode::Branches if !profile.samples.is_empty() => {
            return Err("a branch profile holds IP samples".into());
        }
        Mode::Samples { .. } if !profile.branches.is_empty() => {
            return Err("a sample (no_lbr) profile holds branch counts".into());
        }
        _ => {}
    }
    for ((from, to), c) in &profile.branches {
        write_location(out, from, 0)?;
        out.push(' ');
        write_location(out, to, 0)?;
        let _ = writeln!(out, " {} {}", c.mispreds, c.count);
    }
    for (at, count) in &profile.samples {
        write_location(out, at, 0)?;
        let _ = writeln!(out, " {count}");
    }
    for ((pc, data), count) in &profile.memory {
        write_location(out, pc, 3)?;
        out.push(' ');
        write_location(out, data, 3)?;
        let _ = writeln!(out, " {count}");
    }
    Ok(())
}

/// `flag name hexoff`, the flag raised by `flag_base` (3 for memory lines).
pub(crate) fn write_location(
    out: &mut String,
    loc: &Location,
    flag_base: u8,
) -> Result<(), String> {
    let name = escape_name(&loc.name)?;
    let _ = write!(
        out,
        "{} {} {:x}",
        loc.kind.flag() + flag_base,
        name,
        loc.offset
    );
    Ok(())
}

/// A name as fdata writes it: ' ' and '\' preceded by '\'. Empty names and names with a
/// newline have no fdata form.
pub(crate) fn escape_name(name: &str) -> Result<Cow<'_, str>, String> {
    if name.is_empty() {
        return Err("a location has an empty name".into());
    }
    if name.contains('\n') {
        return Err(format!("the name {} contains a newline", shown(name)));
    }
    if !name.contains([' ', '\\']) {
        return Ok(Cow::Borrowed(name));
    }
    let mut escaped = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c == ' ' || c == '\\' {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    Ok(Cow::Owned(escaped))
}

/// The name a field stands for: a '\' makes the character after it literal. The field never
/// ends in a lone '\' (`Fields` refuses that). The native dialect escapes nothing but ' ' and
/// '\'.
pub(crate) fn unescape_name(field: &str, dialect: Dialect) -> Result<String, String> {
    let mut name = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                if dialect == Dialect::Native && next != ' ' && next != '\\' {
                    return Err(format!(
                        "only ' ' and '\\' are escaped in a Rivet profile, found {} in {}",
                        shown(&format!("\\{next}")),
                        shown(field)
                    ));
                }
                name.push(next);
            }
        } else {
            name.push(c);
        }
    }
    Ok(name)
}

/// Event names go on the `no_lbr` line unescaped, separated by spaces (BOLT reads them so);
/// perf's event names (`cycles:u`, `mem-loads:ppp`) never hold spaces or control characters,
/// and refusing those on input keeps every event we read writable.
pub(crate) fn check_event(event: &str) -> Result<(), String> {
    if event.is_empty() || event.chars().any(|c| c == ' ' || c.is_control()) {
        return Err(format!(
            "the event name {} is empty or holds a space or a control character",
            shown(event)
        ));
    }
    Ok(())
}

/// A word of the input for an error message: quoted, control characters escaped, and cut
/// short so that a megabyte of garbage does not become a megabyte of message.
pub(crate) fn shown(word: &str) -> String {
    const MAX: usize = 40;
    match word.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}...", &word[..cut]),
        None => format!("{word:?}"),
    }
}

/// The fields of one line, split on unescaped spaces.
#[derive(Clone)]
pub(crate) struct Fields<'a> {
    line: &'a str,
    pos: usize,
    dialect: Dialect,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(line: &'a str, dialect: Dialect) -> Fields<'a> {
        Fields {
            line,
            pos: 0,
            dialect,
        }
    }

    /// The next field, raw (escapes kept), or `None` at the end of the line.
    pub(crate) fn next_field(&mut self) -> Result<Option<&'a str>, String> {
        let bytes = self.line.as_bytes();
        match self.dialect {
            Dialect::Fdata => {
                while bytes.get(self.pos) == Some(&b' ') {
                    self.pos += 1;
                }
            }
            Dialect::Native => {
                let at_separator = self.pos > 0 && self.pos < bytes.len();
                if at_separator {
                    self.pos += 1; // the one space after the previous field
                }
                let bad = match bytes.get(self.pos) {
                    Some(b' ') => true,
                    None => at_separator, // a space ended the line
                    _ => false,
                };
                if bad {
                    return Err(
                        "fields are separated by exactly one space, with none at the ends of the line"
                            .into(),
                    );
                }
            }
        }
        if self.pos >= bytes.len() {
            return Ok(None);
        }
        let start = self.pos;
        while let Some(&b) = bytes.get(self.pos) {
            match b {
                b' ' => break,
                b'\\' => {
                    if self.pos + 1 >= bytes.len() {
                        return Err("a '\\' at the end of the line escapes nothing".into());
                    }
                    // Skip the escaped byte; a multi-byte character's other bytes are never
                    // ' ' or '\', so the scan stays on character boundaries.
                    self.pos += 2;
                }
                _ => self.pos += 1,
            }
        }
        Ok(Some(&self.line[start..self.pos]))
    }

    fn expect_end(&mut self, what: &str) -> Result<(), String> {
        match self.next_field()? {
            None => Ok(()),
            Some(w) => Err(format!(
                "expected the end of the line after {what}, found {}",
                shown(w)
            )),
        }
    }

    fn expect_end_with_hint(&mut self, what: &str, hint: &str) -> Result<(), String> {
        self.expect_end(what).map_err(|e| format!("{e} ({hint})"))
    }
}

fn parse_flag(word: &str) -> Result<u8, String> {
    match word.as_bytes() {
        [d @ b'0'..=b'5'] => Ok(d - b'0'),
        _ => Err(format!(
            "expected a location flag (0, 1 or 2 for code, 3, 4 or 5 for memory), found {}",
            shown(word)
        )),
    }
}

/// `name hexoff` after a flag already read (reduced to 0..=2).
fn parse_location(fields: &mut Fields, flag: u8) -> Result<Location, String> {
    let kind = LocKind::from_flag(flag).ok_or("location flag out of range")?;
    let raw_name = fields.next_field()?.ok_or_else(|| {
        format!("expected a name after the flag {flag}, found the end of the line")
    })?;
    let name = unescape_name(raw_name, fields.dialect)?;
    let offset = match fields.next_field()? {
        Some(w) => hex(w, fields.dialect).ok_or_else(|| {
            format!(
                "expected a {}hex offset after {}, found {}",
                fields.dialect.number_style(),
                shown(&name),
                shown(w)
            )
        })?,
        None => {
            return Err(format!(
                "expected a hex offset after {}, found the end of the line",
                shown(&name)
            ));
        }
    };
    Ok(Location { kind, name, offset })
}

/// A decimal field following the location `loc`.
fn parse_decimal(fields: &mut Fields, loc: &Location, what: &str) -> Result<u64, String> {
    match fields.next_field()? {
        Some(w) => decimal(w, fields.dialect).ok_or_else(|| {
            format!(
                "expected a {}{what} after {} {:x}, found {}",
                fields.dialect.number_style(),
                shown(&loc.name),
                loc.offset,
                shown(w)
            )
        }),
        None => Err(after(loc, &format!("a {what}"), None)),
    }
}

fn after(loc: &Location, what: &str, hint: Option<&str>) -> String {
    let mut message = format!(
        "expected {what} after {} {:x}, found the end of the line",
        shown(&loc.name),
        loc.offset
    );
    if let Some(hint) = hint {
        let _ = write!(message, " ({hint})");
    }
    message
}

/// Hex digits only (no sign, no `0x`: `from_str_radix` alone would take a leading `+`).
pub(crate) fn hex(word: &str, dialect: Dialect) -> Option<u64> {
    let digits_ok = match dialect {
        Dialect::Fdata => word.bytes().all(|b| b.is_ascii_hexdigit()),
        Dialect::Native => {
            word.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && no_leading_zero(word)
        }
    };
    if digits_ok {
        u64::from_str_radix(word, 16).ok()
    } else {
        None
    }
}

/// Decimal digits only, within `u64`.
pub(crate) fn decimal(word: &str, dialect: Dialect) -> Option<u64> {
    let digits_ok = !word.is_empty()
        && word.bytes().all(|b| b.is_ascii_digit())
        && (dialect == Dialect::Fdata || no_leading_zero(word));
    if digits_ok { word.parse().ok() } else { None }
}

fn no_leading_zero(word: &str) -> bool {
    word == "0" || !word.starts_with('0')
}

impl Dialect {
    /// How numbers must look, for messages: the native dialect has one spelling.
    fn number_style(self) -> &'static str {
        match self {
            Dialect::Fdata => "",
            Dialect::Native => "canonical (lower-case, no leading zeros) ",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BranchCount;

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn branch_lines_put_mispredicts_before_the_count() {
        let p = parse("1 main 3fb 0 /lib/ld-2.21.so 12 4 221\n").unwrap();
        assert_eq!(p.mode, Mode::Branches);
        let from = Location::symbol("main", 0x3fb);
        let to = Location {
            kind: LocKind::External,
            name: "/lib/ld-2.21.so".into(),
            offset: 0x12,
        };
        assert_eq!(
            p.branches[&(from, to)],
            BranchCount {
                count: 221,
                mispreds: 4
            }
        );
    }

    #[test]
    fn no_lbr_header_with_events_gives_samples() {
        let p = parse("no_lbr cycles:u instructions:u\n1 main 1a 37\n2 helper/1 0 5\n").unwrap();
        assert_eq!(
            p.mode,
            Mode::Samples {
                events: vec!["cycles:u".into(), "instructions:u".into()]
            }
        );
        assert_eq!(p.origin, Origin::Samples);
        assert_eq!(p.samples[&Location::symbol("main", 0x1a)], 37);
        let local = Location {
            kind: LocKind::Local,
            name: "helper/1".into(),
            offset: 0,
        };
        assert_eq!(p.samples[&local], 5);
    }

    #[test]
    fn headers_in_either_order() {
        for text in [
            "no_lbr\nboltedcollection\n1 f 0 1\n",
            "boltedcollection\nno_lbr\n1 f 0 1\n",
        ] {
            let p = parse(text).unwrap();
            assert!(p.bolted_collection, "{text}");
            assert_eq!(p.mode, Mode::Samples { events: vec![] }, "{text}");
        }
    }

    #[test]
    fn memory_lines_are_kept_and_written_after_branches() {
        let text = "4 main 1a 4 global_var 10 3\n1 main 0 1 f 0 0 9\n";
        let p = parse(text).unwrap();
        let pc = Location::symbol("main", 0x1a);
        let data = Location::symbol("global_var", 0x10);
        assert_eq!(p.memory[&(pc, data)], 3);
        assert_eq!(
            write(&p).unwrap(),
            "1 main 0 1 f 0 0 9\n4 main 1a 4 global_var 10 3\n"
        );
    }

    #[test]
    fn escaped_names_round_trip() {
        let text = "1 a\\ b\\\\c 10 0 [unknown] 0 0 2\n";
        let p = parse(text).unwrap();
        let ((from, to), _) = p.branches.iter().next().unwrap();
        assert_eq!(from.name, "a b\\c");
        assert_eq!(to.name, "[unknown]");
        assert_eq!(write(&p).unwrap(), text);
    }

    #[test]
    fn lenient_spacing_blank_lines_crlf_and_duplicates() {
        let p = parse("  1  main  a  1 f 0   0 3 \r\n\n1 main a 1 f 0 1 4\n").unwrap();
        let key = (Location::symbol("main", 0xa), Location::symbol("f", 0));
        assert_eq!(
            p.branches[&key],
            BranchCount {
                count: 7,
                mispreds: 1
            }
        );
    }

    #[test]
    fn counts_saturate() {
        let max = u64::MAX;
        let p = parse(&format!("1 f 0 1 g 0 0 {max}\n1 f 0 1 g 0 0 5\n")).unwrap();
        assert_eq!(p.branches.values().next().unwrap().count, max);
    }

    #[test]
    fn errors_name_the_line_and_what_was_expected() {
        assert_eq!(
            err("1 main 0 1 f 0 0 1\n1 main zz 1 f 0 0 1\n"),
            "line 2: expected a hex offset after \"main\", found \"zz\""
        );
        assert_eq!(
            err("1 main 1a 37\n"),
            "line 1: expected the branch target's flag after \"main\" 1a, found \"37\" (a line \
             `flag name offset count` is a sample: those need the `no_lbr` header)"
        );
        assert_eq!(
            err("1 main 1a\n"),
            "line 1: expected the branch target's flag after \"main\" 1a, found the end of the \
             line (a line `flag name offset count` is a sample: those need the `no_lbr` header)"
        );
        assert_eq!(
            err("no_lbr\n1 main 1a 0 37\n"),
            "line 2: expected the end of the line after the sample count, found \"37\" (a \
             `no_lbr` profile has sample lines `flag name offset count`, not branches)"
        );
        assert_eq!(
            err("1 f 0 1 g 0 x 1\n"),
            "line 1: expected a decimal mispredict count after \"g\" 0, found \"x\""
        );
        assert_eq!(
            err("1 f 0 1 g 0 0 -1\n"),
            "line 1: expected a decimal count after the mispredict count, found \"-1\""
        );
        assert_eq!(
            err("1 f 0 1 g 0 0 1 extra\n"),
            "line 1: expected the end of the line after the count, found \"extra\""
        );
        assert_eq!(
            err("7 f 0 1 g 0 0 1\n"),
            "line 1: expected a location flag (0, 1 or 2 for code, 3, 4 or 5 for memory), \
             found \"7\""
        );
        assert_eq!(
            err("1 f 0 4 g 0 0 1\n"),
            "line 1: a branch target needs flag 0, 1 or 2, found \"4\" (3, 4 and 5 start \
             memory lines)"
        );
        assert_eq!(
            err("1 f +a 1 g 0 0 1\n"),
            "line 1: expected a hex offset after \"f\", found \"+a\""
        );
        assert_eq!(
            err("1 f 10000000000000000 1 g 0 0 1\n"),
            "line 1: expected a hex offset after \"f\", found \"10000000000000000\""
        );
        assert_eq!(
            err("1 f\\"),
            "line 1: a '\\' at the end of the line escapes nothing"
        );
        assert_eq!(
            err("1 f 0 1 g 0 0 1\nno_lbr\n"),
            "line 2: the `no_lbr` header must come before the first record"
        );
        assert_eq!(
            err("no_lbr cycles:u \x01\n"),
            "line 1: the event name \"\\u{1}\" is empty or holds a space or a control character"
        );
        assert_eq!(
            err("boltedcollection\nboltedcollection\n"),
            "line 2: a second `boltedcollection` header"
        );
        assert_eq!(
            err("3 f 0 1 g 0 5\n"),
            "line 1: the data address of a memory line needs flag 3, 4 or 5, found \"1\""
        );
        let long = "x".repeat(100);
        assert_eq!(
            err(&format!("1 f {long} 1 g 0 0 1\n")),
            format!(
                "line 1: expected a hex offset after \"f\", found \"{}\"...",
                &long[..40]
            )
        );
    }

    #[test]
    fn writer_is_exact_and_refuses_what_fdata_cannot_say() {
        let mut p = Profile::new(Mode::Samples {
            events: vec!["cpu-clock:u".into()],
        });
        p.bolted_collection = true;
        p.origin = Origin::Samples;
        p.add_sample(Location::symbol("b", 0x10), 2);
        p.add_sample(Location::symbol("a", 0xff), 1);
        assert_eq!(
            write(&p).unwrap(),
            "no_lbr cpu-clock:u\nboltedcollection\n1 a ff 1\n1 b 10 2\n"
        );
        assert_eq!(parse(&write(&p).unwrap()).unwrap(), p);

        let mut bad = Profile::new(Mode::Branches);
        bad.add_branch(Location::symbol("a\nb", 0), Location::unknown(), 1, 0);
        assert!(
            matches!(write(&bad), Err(FdataError::Unrepresentable(m)) if m.contains("newline"))
        );
        let mut bad = Profile::new(Mode::Branches);
        bad.add_branch(Location::symbol("", 0), Location::unknown(), 1, 0);
        assert!(write(&bad).is_err());
        let mut bad = Profile::new(Mode::Branches);
        bad.add_sample(Location::symbol("f", 0), 1);
        assert!(write(&bad).is_err());
        let bad = Profile::new(Mode::Samples {
            events: vec!["two words".into()],
        });
        assert!(write(&bad).is_err());
    }

    #[test]
    fn strict_fields_refuse_extra_spaces() {
        let fields = |line| {
            let mut f = Fields::new(line, Dialect::Native);
            let mut out = vec![];
            loop {
                match f.next_field() {
                    Ok(Some(w)) => out.push(w),
                    Ok(None) => return Ok(out),
                    Err(e) => return Err(e),
                }
            }
        };
        assert_eq!(fields("a b\\ c d"), Ok(vec!["a", "b\\ c", "d"]));
        assert_eq!(fields(""), Ok(vec![]));
        assert!(fields("a  b").is_err());
        assert!(fields(" a").is_err());
        assert!(fields("a ").is_err());
    }
}
