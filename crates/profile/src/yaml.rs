//! BOLT's YAML profile (`llvm-bolt -w`, `perf2bolt -w`), read and written.
//!
//! The YAML profile counts blocks and edges by block index (`bid`) within each function, and
//! identifies functions and blocks by hashes so that a profile can be matched to a changed
//! binary. Turning it into the address-keyed [`crate::Profile`] needs the binary's CFG, so it
//! stays its own typed structure here ([`YamlProfile`]); `merge::merge_yaml` sums several.
//!
//! The schema is the one llvm-bolt-19 reads, checked against the real tool
//! (`tests/bolt_interop.rs`): required keys must be there, optional keys default as in BOLT, and
//! an unknown key is an error, as it is for BOLT. Two keys that only newer BOLT versions know
//! are read too: a function's `extern` (entries from outside the binary) and the pseudo-probe
//! descriptors of llvm-bolt-19 (`guid`, `pseudo_probe_desc_hash`, a block's `pseudo_probes`).
//! Integers may be written in decimal or hex (`0x...`), as LLVM's YAML reader allows.
//!
//! Reading uses serde-saphyr (pure Rust, panic-free, with a budget against alias bombs).
//! Writing is done here by hand, because the layout matters to the people and tools that read
//! these files and a serde emitter cannot write hashes as unquoted hex: the output looks like
//! BOLT's (flow sequences for `calls` and `succ`, hex hashes), starts with `---` (that is how
//! BOLT and `rivet` tell YAML from fdata) and ends with `...`. Keys at their default value are
//! left out, except in the header, which is always written in full. `parse(write(p)) == p`
//! holds for every profile (a property test and a fuzz target check it).

use std::fmt::{self, Write as _};

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use thiserror::Error;

/// A whole YAML profile.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlProfile {
    pub header: YamlHeader,
    pub functions: Vec<YamlFunction>,
}

/// The header: what binary the profile is for and how it was taken.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlHeader {
    /// `profile-version`: always 1 (`parse` refuses others, as BOLT does).
    #[serde(rename = "profile-version", deserialize_with = "int_u32")]
    pub version: u32,
    #[serde(rename = "binary-name")]
    pub binary_name: String,
    /// `binary-build-id`; empty when unknown.
    #[serde(rename = "binary-build-id", default)]
    pub build_id: String,
    #[serde(rename = "profile-flags")]
    pub flags: ProfileFlags,
    /// `profile-origin`: free text (BOLT writes e.g. "branch profile reader").
    #[serde(rename = "profile-origin", default)]
    pub origin: String,
    /// `profile-events`: the perf events of a sampled profile, free text.
    #[serde(rename = "profile-events", default)]
    pub events: String,
    /// `dfs-order`: block ids number blocks in DFS order (true) or layout order.
    #[serde(rename = "dfs-order", default = "yes")]
    pub dfs_order: bool,
    #[serde(rename = "hash-func", default, deserialize_with = "hash_func")]
    pub hash_func: HashFunc,
}

/// `profile-flags`: a set written as a flow sequence such as `[ lbr ]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileFlags {
    /// `lbr`: branch (edge) counts.
    pub lbr: bool,
    /// `sample`: IP samples without branch stacks.
    pub sample: bool,
    /// `memevent`: memory events.
    pub memevent: bool,
}

/// `hash-func`: the hash BOLT used for function and block hashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HashFunc {
    /// `std-hash`, BOLT's default when the key is missing.
    #[default]
    StdHash,
    Xxh3,
}

impl HashFunc {
    const ALL: [HashFunc; 2] = [HashFunc::StdHash, HashFunc::Xxh3];

    /// The name BOLT's YAML gives it.
    pub fn name(self) -> &'static str {
        match self {
            HashFunc::StdHash => "std-hash",
            HashFunc::Xxh3 => "xxh3",
        }
    }
}

/// One function's profile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlFunction {
    pub name: String,
    /// `fid`: the function's id within this profile (call sites name callees by it).
    #[serde(deserialize_with = "int_u32")]
    pub fid: u32,
    /// `hash`: hash of the function's code, written in hex.
    #[serde(deserialize_with = "int_u64")]
    pub hash: u64,
    /// `exec`: how often the function was entered.
    #[serde(deserialize_with = "int_u64")]
    pub exec: u64,
    /// `extern` (newer BOLT): entries from outside the profiled binary.
    #[serde(rename = "extern", default, deserialize_with = "int_u64")]
    pub extern_entries: u64,
    /// `nblocks`: the number of basic blocks; every `bid` is below it.
    #[serde(deserialize_with = "int_u32")]
    pub nblocks: u32,
    #[serde(default)]
    pub blocks: Vec<YamlBlock>,
    /// `guid` (llvm-bolt-19 pseudo probes).
    #[serde(default, deserialize_with = "int_u64")]
    pub guid: u64,
    /// `pseudo_probe_desc_hash` (llvm-bolt-19 pseudo probes).
    #[serde(default, deserialize_with = "int_u64")]
    pub pseudo_probe_desc_hash: u64,
}

/// One basic block's profile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlBlock {
    /// `bid`: the block's index in the function.
    #[serde(deserialize_with = "int_u32")]
    pub bid: u32,
    /// `insns`: the number of instructions in the block.
    #[serde(deserialize_with = "int_u32")]
    pub insns: u32,
    /// `hash`: hash of the block's code, written in hex.
    #[serde(default, deserialize_with = "int_u64")]
    pub hash: u64,
    /// `exec`: how often the block ran.
    #[serde(default, deserialize_with = "int_u64")]
    pub exec: u64,
    /// `events`: memory events in the block.
    #[serde(default, deserialize_with = "int_u64")]
    pub events: u64,
    #[serde(default)]
    pub calls: Vec<YamlCall>,
    #[serde(default)]
    pub succ: Vec<YamlSucc>,
    #[serde(default)]
    pub pseudo_probes: Vec<YamlProbe>,
}

/// A call site in a block: `{ off, fid, disc, cnt, mis }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlCall {
    /// `off`: the call's offset in the block, written in hex.
    #[serde(deserialize_with = "int_u32")]
    pub off: u32,
    /// `fid`: the callee's function id (0 for an unknown callee).
    #[serde(deserialize_with = "int_u32")]
    pub fid: u32,
    /// `disc`: which entry point of a multi-entry callee.
    #[serde(default, deserialize_with = "int_u32")]
    pub disc: u32,
    #[serde(deserialize_with = "int_u64")]
    pub cnt: u64,
    #[serde(default, deserialize_with = "int_u64")]
    pub mis: u64,
}

/// An edge to a successor block: `{ bid, cnt, mis }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlSucc {
    #[serde(deserialize_with = "int_u32")]
    pub bid: u32,
    #[serde(deserialize_with = "int_u64")]
    pub cnt: u64,
    #[serde(default, deserialize_with = "int_u64")]
    pub mis: u64,
}

/// A pseudo probe of a block (llvm-bolt-19): `{ guid, id, type }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlProbe {
    #[serde(deserialize_with = "int_u64")]
    pub guid: u64,
    #[serde(deserialize_with = "int_u64")]
    pub id: u64,
    #[serde(rename = "type", default, deserialize_with = "int_u32")]
    pub kind: u32,
}

/// Why a YAML profile could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum YamlError {
    /// Not YAML, or not the profile schema; the message carries the line and column.
    #[error("{0}")]
    Syntax(String),
    #[error("profile-version {0} is not supported (BOLT and Rivet read version 1)")]
    Version(u32),
}

/// Reads a YAML profile.
pub fn parse(text: &str) -> Result<YamlProfile, YamlError> {
    let options = serde_saphyr::options! {
        // One line per error: the CLI prints its own context.
        with_snippet: false,
        // LLVM's YAML reader knows only `true` and `false` (not `yes`, `on`, ...).
        strict_booleans: true,
        // LLVM's YAML reader has no merge keys: `<<` would be an unknown key there too.
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
    };
    let profile: YamlProfile = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| YamlError::Syntax(e.to_string().trim_end().replace('\n', "; ")))?;
    if profile.header.version != 1 {
        return Err(YamlError::Version(profile.header.version));
    }
    Ok(profile)
}

/// Writes a YAML profile in the layout BOLT writes (see the module doc).
pub fn write(profile: &YamlProfile) -> String {
    let mut out = String::from("---\n");
    let h = &profile.header;
    out.push_str("header:\n");
    key(&mut out, 2, "profile-version", h.version);
    key(&mut out, 2, "binary-name", Str(&h.binary_name));
    if !h.build_id.is_empty() {
        key(&mut out, 2, "binary-build-id", Str(&h.build_id));
    }
    key(&mut out, 2, "profile-flags", h.flags);
    key(&mut out, 2, "profile-origin", Str(&h.origin));
    key(&mut out, 2, "profile-events", Str(&h.events));
    key(&mut out, 2, "dfs-order", h.dfs_order);
    key(&mut out, 2, "hash-func", h.hash_func.name());
    if profile.functions.is_empty() {
        out.push_str("functions:       []\n");
    } else {
        out.push_str("functions:\n");
    }
    for f in &profile.functions {
        out.push_str("  - ");
        key(&mut out, 0, "name", Str(&f.name));
        key(&mut out, 4, "fid", f.fid);
        key(&mut out, 4, "hash", Hex(f.hash));
        key(&mut out, 4, "exec", f.exec);
        if f.extern_entries != 0 {
            key(&mut out, 4, "extern", f.extern_entries);
        }
        key(&mut out, 4, "nblocks", f.nblocks);
        if f.guid != 0 {
            key(&mut out, 4, "guid", Hex(f.guid));
        }
        if f.pseudo_probe_desc_hash != 0 {
            key(
                &mut out,
                4,
                "pseudo_probe_desc_hash",
                Hex(f.pseudo_probe_desc_hash),
            );
        }
        if !f.blocks.is_empty() {
            out.push_str("    blocks:\n");
        }
        for b in &f.blocks {
            out.push_str("      - ");
            key(&mut out, 0, "bid", b.bid);
            key(&mut out, 8, "insns", b.insns);
            if b.hash != 0 {
                key(&mut out, 8, "hash", Hex(b.hash));
            }
            if b.exec != 0 {
                key(&mut out, 8, "exec", b.exec);
            }
            if b.events != 0 {
                key(&mut out, 8, "events", b.events);
            }
            if !b.calls.is_empty() {
                key(&mut out, 8, "calls", FlowSeq(&b.calls));
            }
            if !b.succ.is_empty() {
                key(&mut out, 8, "succ", FlowSeq(&b.succ));
            }
            if !b.pseudo_probes.is_empty() {
                key(&mut out, 8, "pseudo_probes", FlowSeq(&b.pseudo_probes));
            }
        }
    }
    out.push_str("...\n");
    out
}

// ---- Writing ----

/// `key: value` on its own line, the value aligned in a column as BOLT aligns it.
fn key(out: &mut String, indent: usize, name: &str, value: impl fmt::Display) {
    let _ = writeln!(out, "{:indent$}{:<16} {value}", "", format!("{name}:"));
}

/// A 64-bit hash, in hex as BOLT writes them.
struct Hex(u64);

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:X}", self.0)
    }
}

impl fmt::Display for ProfileFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (self.lbr, "lbr"),
            (self.sample, "sample"),
            (self.memevent, "memevent"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
        if set.is_empty() {
            f.write_str("[ ]")
        } else {
            write!(f, "[ {} ]", set.join(", "))
        }
    }
}

/// A flow sequence of flow maps: `[ { a: 1 }, { a: 2 } ]`.
struct FlowSeq<'a, T>(&'a [T]);

impl<T: fmt::Display> fmt::Display for FlowSeq<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[ ")?;
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{{ {item} }}")?;
        }
        f.write_str(" ]")
    }
}

impl fmt::Display for YamlCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "off: 0x{:X}, fid: {}", self.off, self.fid)?;
        if self.disc != 0 {
            write!(f, ", disc: {}", self.disc)?;
        }
        write!(f, ", cnt: {}", self.cnt)?;
        if self.mis != 0 {
            write!(f, ", mis: {}", self.mis)?;
        }
        Ok(())
    }
}

impl fmt::Display for YamlSucc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bid: {}, cnt: {}", self.bid, self.cnt)?;
        if self.mis != 0 {
            write!(f, ", mis: {}", self.mis)?;
        }
        Ok(())
    }
}

impl fmt::Display for YamlProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "guid: 0x{:X}, id: {}", self.guid, self.id)?;
        if self.kind != 0 {
            write!(f, ", type: {}", self.kind)?;
        }
        Ok(())
    }
}

/// A string scalar: plain when that cannot be misread, else single-quoted, else (for control
/// and other unprintable characters, which only double quotes can escape) double-quoted.
struct Str<'a>(&'a str);

impl fmt::Display for Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if plain_is_safe(s) {
            f.write_str(s)
        } else if s.chars().all(printable) {
            write!(f, "'{}'", s.replace('\'', "''"))
        } else {
            f.write_char('"')?;
            for c in s.chars() {
                match c {
                    '"' => f.write_str("\\\"")?,
                    '\\' => f.write_str("\\\\")?,
                    c if c.is_ascii() && printable(c) => f.write_char(c)?,
                    c if (c as u32) <= 0xFFFF => write!(f, "\\u{:04X}", c as u32)?,
                    c => write!(f, "\\U{:08X}", c as u32)?,
                }
            }
            f.write_char('"')
        }
    }
}

/// True when `s` reads back as the same string without quotes: it starts with a letter, `_`
/// or `/`, uses only characters with no meaning to YAML, and is not a word YAML (1.1 or 1.2)
/// gives another type.
fn plain_is_safe(s: &str) -> bool {
    const RESERVED: [&str; 12] = [
        "null", "true", "false", "yes", "no", "on", "off", "y", "n", "nan", "inf", "~",
    ];
    let Some(first) = s.chars().next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '_' || first == '/')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./@$+()<>=*-".contains(c))
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s))
}

/// Characters YAML lets stand as they are inside single quotes.
fn printable(c: char) -> bool {
    match c {
        ' '..='~' => true,
        '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' => !matches!(c, '\u{FEFF}'),
        '\u{10000}'..='\u{10FFFF}' => true,
        _ => false,
    }
}

// ---- Reading ----

fn yes() -> bool {
    true
}

const FIX_HASH_FUNC: &str = "merge-fdata-19 writes a broken `hash-func` now and then: write the \
     merged profiles' own value there (std-hash if they have no hash-func key), or merge them \
     with `rivet merge`";

/// `hash-func`, refusing an empty or unknown value with the reason it happens. `merge-fdata-19`
/// copies an uninitialized field into its merged header, so now and then it writes `hash-func:`
/// with no value, or with the next key run onto its line; llvm-bolt refuses that file too.
/// Which hash the profiles used cannot be told from the file, so guessing would misread every
/// hash in it.
fn hash_func<'de, D: Deserializer<'de>>(d: D) -> Result<HashFunc, D::Error> {
    let value = Option::<String>::deserialize(d)?;
    let value = value.as_deref().unwrap_or("");
    if let Some(known) = HashFunc::ALL.into_iter().find(|h| h.name() == value) {
        return Ok(known);
    }
    Err(de::Error::custom(match value {
        "" | "~" | "null" => {
            format!("`hash-func` has no value; {FIX_HASH_FUNC}")
        }
        other => {
            format!(
                "`hash-func: {other}` names no hash BOLT knows (std-hash, xxh3); {FIX_HASH_FUNC}"
            )
        }
    }))
}

fn int_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(IntVisitor)
}

fn int_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = d.deserialize_any(IntVisitor)?;
    u32::try_from(v).map_err(|_| {
        de::Error::invalid_value(Unexpected::Unsigned(v), &"a 32-bit unsigned integer")
    })
}

/// An unsigned integer, given as a YAML integer or as a string of decimal or `0x` hex digits
/// (LLVM reads both kinds for every integer key, quoted or not).
struct IntVisitor;

impl Visitor<'_> for IntVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an unsigned integer (decimal or 0x hex)")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<u64, E> {
        u64::try_from(v)
            .map_err(|_| E::invalid_value(Unexpected::Other("an integer over 64 bits"), &self))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<u64, E> {
        u64::try_from(v)
            .map_err(|_| E::invalid_value(Unexpected::Other("an integer out of range"), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                u64::from_str_radix(hex, 16).ok()
            }
            Some(_) => None,
            None if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v.parse().ok(),
            None => None,
        };
        parsed.ok_or_else(|| E::invalid_value(Unexpected::Str(v), &self))
    }
}

impl<'de> Deserialize<'de> for ProfileFlags {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ProfileFlags, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        let mut flags = ProfileFlags::default();
        for name in names {
            match name.as_str() {
                "lbr" => flags.lbr = true,
                "sample" => flags.sample = true,
                "memevent" => flags.memevent = true,
                other => {
                    return Err(de::Error::unknown_variant(
                        other,
                        &["lbr", "sample", "memevent"],
                    ));
                }
            }
        }
        Ok(flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "---
header:
  profile-version: 1
  binary-name:     prog
  binary-build-id: f157cb091eaa50626a37c9700f4a0ab0fca70111
  profile-flags:   [ lbr ]
  profile-origin:  branch profile reader
  profile-events:  ''
  dfs-order:       false
  hash-func:       xxh3
functions:
  - name:            'collatz/1'
    fid:             8
    hash:            0xEBD42A5998CAE38A
    exec:            19999
    nblocks:         8
    blocks:
      - bid:             0
        insns:           4
        hash:            0x14005A44536D0000
        exec:            19999
        calls:           [ { off: 0x3, fid: 8, cnt: 19999 } ]
        succ:            [ { bid: 3, cnt: 19998 }, { bid: 7, cnt: 1, mis: 2 } ]
      - bid:             5
        insns:           1
...
";

    #[test]
    fn reads_bolts_layout() {
        let p = parse(SMALL).unwrap();
        assert_eq!(p.header.binary_name, "prog");
        assert_eq!(
            p.header.build_id,
            "f157cb091eaa50626a37c9700f4a0ab0fca70111"
        );
        assert_eq!(
            p.header.flags,
            ProfileFlags {
                lbr: true,
                ..Default::default()
            }
        );
        assert_eq!(p.header.origin, "branch profile reader");
        assert!(!p.header.dfs_order);
        assert_eq!(p.header.hash_func, HashFunc::Xxh3);
        let f = &p.functions[0];
        assert_eq!(f.name, "collatz/1");
        assert_eq!(f.hash, 0xEBD42A5998CAE38A);
        assert_eq!(
            f.blocks[0].calls,
            [YamlCall {
                off: 3,
                fid: 8,
                disc: 0,
                cnt: 19999,
                mis: 0
            }]
        );
        assert_eq!(
            f.blocks[0].succ[1],
            YamlSucc {
                bid: 7,
                cnt: 1,
                mis: 2
            }
        );
        assert_eq!(
            f.blocks[1],
            YamlBlock {
                bid: 5,
                insns: 1,
                ..Default::default()
            }
        );
        assert_eq!(parse(&write(&p)).unwrap(), p);
    }

    #[test]
    fn defaults_match_bolts() {
        let p = parse("---\nheader:\n  profile-version: 1\n  binary-name: a\n  profile-flags: [ sample ]\nfunctions: []\n").unwrap();
        assert!(p.header.dfs_order);
        assert_eq!(p.header.hash_func, HashFunc::StdHash);
        assert_eq!(p.header.build_id, "");
        assert!(p.functions.is_empty());
        assert_eq!(parse(&write(&p)).unwrap(), p);
    }

    #[test]
    fn refuses_what_bolt_refuses() {
        let unknown = SMALL.replace("    nblocks:         8\n", "    nblocks: 8\n    bogus: 1\n");
        let e = parse(&unknown).unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
        let missing = SMALL.replace("    fid:             8\n", "");
        let e = parse(&missing).unwrap_err().to_string();
        assert!(e.contains("fid"), "{e}");
        let version = SMALL.replace("profile-version: 1", "profile-version: 2");
        assert_eq!(parse(&version), Err(YamlError::Version(2)));
        let empty_hash = SMALL.replace("hash-func:       xxh3", "hash-func:       ");
        let e = parse(&empty_hash).unwrap_err().to_string();
        assert!(e.contains("`hash-func` has no value"), "{e}");
        let hash = SMALL.replace("hash-func:       xxh3", "hash-func: md5");
        assert!(parse(&hash).unwrap_err().to_string().contains("md5"));
        // What merge-fdata-19 wrote in one CI run: the next key ran onto the hash-func line.
        let run_on = SMALL.replace(
            "hash-func:       xxh3\nfunctions:",
            "hash-func:       functions:",
        );
        assert_ne!(run_on, SMALL);
        let e = parse(&run_on).unwrap_err().to_string();
        assert!(e.contains("rivet merge"), "{e}");
        let flag = SMALL.replace("[ lbr ]", "[ lbr, bogus ]");
        assert!(parse(&flag).unwrap_err().to_string().contains("bogus"));
        let negative = SMALL.replace(
            "exec:            19999\n    nblocks",
            "exec: -1\n    nblocks",
        );
        assert!(parse(&negative).is_err());
        let wide = SMALL.replace("fid:             8", "fid: 0x100000000");
        assert!(parse(&wide).is_err());
        assert!(parse("").is_err());
        assert!(parse("---\n...\n").is_err());
    }

    #[test]
    fn integers_in_hex_or_decimal_quoted_or_not() {
        let p = parse(&SMALL.replace(
            "hash:            0xEBD42A5998CAE38A",
            "hash: '17000000000000000000'",
        ))
        .unwrap();
        assert_eq!(p.functions[0].hash, 17_000_000_000_000_000_000);
        let p = parse(&SMALL.replace(
            "exec:            19999\n    nblocks",
            "exec: 0x10\n    nblocks",
        ))
        .unwrap();
        assert_eq!(p.functions[0].exec, 16);
    }

    #[test]
    fn strings_are_quoted_only_when_needed() {
        for (s, written) in [
            ("main", "main"),
            ("collatz/1", "collatz/1"),
            ("", "''"),
            ("true", "'true'"),
            ("1abc", "'1abc'"),
            ("a: b", "'a: b'"),
            ("it's", "'it''s'"),
            ("tab\there", "\"tab\\u0009here\""),
            ("back\\slash\u{1}", "\"back\\\\slash\\u0001\""),
            ("\u{1F600}\u{7F}", "\"\\U0001F600\\u007F\""),
        ] {
            assert_eq!(Str(s).to_string(), written);
            let mut p = parse(SMALL).unwrap();
            p.functions[0].name = s.to_owned();
            p.header.origin = s.to_owned();
            assert_eq!(parse(&write(&p)).unwrap(), p, "{s:?}");
        }
    }
}
