//! Facts read from one disassembly text (a reference's or a crate's), so texts in
//! different syntaxes can be compared on what Rivet needs: the mnemonic (with the
//! condition of B.cond, aliases of LSE stores folded into their load forms), the
//! PC-relative target as an offset from the instruction (from the page for ADRP),
//! the general registers in order with their width, and the bit number of TBZ/TBNZ.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub mnem: String,
    pub target: Option<i64>,
    pub gprs: Vec<(char, u8)>,
    pub imms: Vec<i64>,
    pub has_memory: bool,
}

const LSE_OPS: [&str; 8] = ["add", "clr", "eor", "set", "smax", "smin", "umax", "umin"];

fn targets(m: &str) -> bool {
    matches!(
        m,
        "b" | "bl" | "cbz" | "cbnz" | "tbz" | "tbnz" | "adr" | "adrp"
    ) || m.starts_with("b.")
        || m.starts_with("bc.")
}

/// Forms whose every fact Rivet must get right: control flow, PC-relative addressing,
/// PAC/BTI hints, exclusive and atomic memory operations, traps.
pub fn is_rivet_form(m: &str, text: &str) -> bool {
    let literal = (m.starts_with("ldr") || m == "prfm" || m == "ldrsw") && !text.contains('[');
    // SVE's `adr z0.d, [z1.d, z2.d]` is vector arithmetic, not PC-relative
    (targets(m) && !text.contains('['))
        || literal
        || matches!(
            m,
            "br" | "blr"
                | "ret"
                | "braa"
                | "brab"
                | "braaz"
                | "brabz"
                | "blraa"
                | "blrab"
                | "blraaz"
                | "blrabz"
                | "retaa"
                | "retab"
                | "eret"
                | "bti"
                | "paciasp"
                | "pacibsp"
                | "autiasp"
                | "autibsp"
                | "paciaz"
                | "pacibz"
                | "autiaz"
                | "autibz"
                | "pacia1716"
                | "pacib1716"
                | "autia1716"
                | "autib1716"
                | "xpaclri"
                | "clrex"
                | "svc"
                | "brk"
                | "udf"
                | "hlt"
        )
        || is_exclusive(m)
        || m.starts_with("cas")
        || m.starts_with("swp")
        || LSE_OPS.iter().any(|op| m.starts_with(&format!("ld{op}")))
}

fn is_exclusive(m: &str) -> bool {
    let base = m.trim_end_matches(['b', 'h']);
    matches!(
        base,
        "ldxr" | "ldaxr" | "stxr" | "stlxr" | "ldxp" | "ldaxp" | "stxp" | "stlxp"
    )
}

fn parse_num(t: &str) -> Option<i64> {
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()?
    } else {
        t.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

impl Facts {
    pub fn parse(text: &str, pc: u64) -> Facts {
        let mut s = text.to_ascii_lowercase();
        for cut in ["//", ";"] {
            if let Some(i) = s.find(cut) {
                s.truncate(i);
            }
        }
        // drop "<symbol+off>" annotations
        while let (Some(a), Some(b)) = (s.find('<'), s.find('>')) {
            if b < a {
                break;
            }
            s.replace_range(a..=b, "");
        }
        let s = s.trim();
        let (m, ops) = match s.split_once(char::is_whitespace) {
            Some((m, o)) => (m.to_string(), o.trim().to_string()),
            None => (s.to_string(), String::new()),
        };
        let mut mnem = m;
        for (from, to) in [
            ("b.hs", "b.cs"),
            ("b.lo", "b.cc"),
            ("bc.hs", "bc.cs"),
            ("bc.lo", "bc.cc"),
        ] {
            if mnem == from {
                mnem = to.to_string();
            }
        }
        let has_memory = ops.contains('[');
        let tokens: Vec<&str> = ops
            .split(|c: char| c == ',' || c.is_whitespace() || "[]{}!".contains(c))
            .filter(|t| !t.is_empty())
            .collect();
        let mut gprs = Vec::new();
        for t in &tokens {
            let g = match *t {
                "sp" | "xzr" => Some(('x', 31)),
                "lr" => Some(('x', 30)), // bad64 names x30 and x29
                "fp" => Some(('x', 29)),
                "wsp" | "wzr" => Some(('w', 31)),
                _ => {
                    let c = t.chars().next().unwrap_or(' ');
                    if (c == 'x' || c == 'w')
                        && t.len() > 1
                        && t[1..].bytes().all(|b| b.is_ascii_digit())
                    {
                        t[1..].parse::<u8>().ok().map(|n| (c, n))
                    } else {
                        None
                    }
                }
            };
            if let Some(g) = g {
                gprs.push(g);
            }
        }
        if mnem == "ret" && gprs.is_empty() {
            gprs.push(('x', 30));
        }
        // LSE store aliases: st<op>[l][b|h] Rs, [Rn] == ld<op>[l][b|h] Rs, zr, [Rn]
        if let Some(rest) = mnem.strip_prefix("st") {
            if LSE_OPS.iter().any(|op| rest.starts_with(op)) && gprs.len() == 2 {
                mnem = format!("ld{rest}");
                let w = gprs[0].0;
                gprs.insert(1, (w, 31));
            }
        }
        let literal = (mnem.starts_with("ldr") || mnem == "prfm" || mnem == "ldrsw") && !has_memory;
        let mut target = None;
        if (targets(&mnem) && !has_memory) || literal {
            if let Some(last) = tokens.last() {
                let t = last.trim_start_matches('#');
                target = if let Some(r) = t.strip_prefix("$+") {
                    parse_num(r)
                } else if let Some(r) = t.strip_prefix("$-") {
                    parse_num(r).map(|v| -v)
                } else if let Some(h) = t.strip_prefix("0x") {
                    u64::from_str_radix(h, 16)
                        .ok()
                        .map(|abs| abs.wrapping_sub(base(&mnem, pc)) as i64)
                } else if t.bytes().all(|b| b.is_ascii_hexdigit()) && !t.is_empty() {
                    // binutils prints absolute targets as bare hex (wrapped below address 0)
                    u64::from_str_radix(t, 16)
                        .ok()
                        .map(|abs| abs.wrapping_sub(base(&mnem, pc)) as i64)
                } else {
                    None
                };
            }
        }
        let mut imms = Vec::new();
        if mnem == "tbz" || mnem == "tbnz" {
            if let Some(b) = tokens
                .get(1)
                .and_then(|t| parse_num(t.trim_start_matches('#')))
            {
                imms.push(b);
            }
        }
        Facts {
            mnem,
            target,
            gprs,
            imms,
            has_memory,
        }
    }

    pub fn same_rivet_facts(&self, other: &Facts) -> bool {
        self.mnem == other.mnem
            && self.target == other.target
            && self.gprs == other.gprs
            && self.imms == other.imms
    }
}

/// Whether `base` is the instruction the architecture defines the alias `alias` on
/// (the references print preferred aliases; some crates print the base form).
pub fn is_base_of_alias(alias: &str, base: &str) -> bool {
    let bases: &[&str] = match alias {
        "mov" => &[
            "orr", "movz", "movn", "add", "dup", "umov", "ins", "orr", "sel", "cpy", "dupm", "mov",
        ],
        "cmp" => &["subs"],
        "cmn" => &["adds"],
        "tst" => &["ands"],
        "neg" => &["sub"],
        "negs" => &["subs"],
        "ngc" => &["sbc"],
        "ngcs" => &["sbcs"],
        "mvn" => &["orn", "not"],
        "not" => &["mvn", "eor"],
        "lsl" => &["ubfm", "lslv"],
        "lsr" => &["ubfm", "lsrv"],
        "asr" => &["sbfm", "asrv"],
        "ror" => &["extr", "rorv"],
        "sxtb" | "sxth" | "sxtw" | "sbfiz" | "sbfx" => &["sbfm"],
        "uxtb" | "uxth" | "ubfiz" | "ubfx" => &["ubfm"],
        "bfi" | "bfxil" | "bfc" => &["bfm"],
        "mul" => &["madd"],
        "mneg" => &["msub"],
        "smull" => &["smaddl"],
        "umull" => &["umaddl"],
        "smnegl" => &["smsubl"],
        "umnegl" => &["umsubl"],
        "cset" | "cinc" => &["csinc"],
        "csetm" | "cinv" => &["csinv"],
        "cneg" => &["csneg"],
        "nop" | "yield" | "wfe" | "wfi" | "sev" | "sevl" | "esb" | "csdb" | "bti" | "paciasp"
        | "autiasp" | "pacibsp" | "autibsp" | "xpaclri" | "dgh" | "psb" => &["hint"],
        "sxtl" | "sxtl2" => &["sshll", "sshll2"],
        "uxtl" | "uxtl2" => &["ushll", "ushll2"],
        "fmov" => &["dup", "fdup", "fcpy", "cpy"],
        "movs" => &["orrs", "ands"],
        "dc" | "ic" | "at" | "tlbi" => &["sys"],
        _ => &[],
    };
    bases.contains(&base)
        || (alias.starts_with("st") && base.starts_with("ld") && alias[2..] == base[2..])
}

fn base(m: &str, pc: u64) -> u64 {
    if m == "adrp" {
        pc & !0xfff
    } else {
        pc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_all_syntaxes() {
        let a = Facts::parse("b.hs\t400600 <main+0x10>", 0x4005f0);
        let b = Facts::parse("b.cs $+0x10", 0x4005f0);
        let c = Facts::parse("b.cs #0x400600", 0x4005f0);
        assert_eq!(a, b);
        assert_eq!(b, c);
        let l = Facts::parse("stadd w1, [x0]", 0);
        assert_eq!(l.mnem, "ldadd");
        assert_eq!(l.gprs, vec![('w', 1), ('w', 31), ('x', 0)]);
        let p = Facts::parse("adrp x1, 0x12000", 0x10ffc);
        assert_eq!(p.target, Some(0x2000));
        assert_eq!(Facts::parse("tbnz w5, #7, 0xfff8", 0x10000).imms, vec![7]);
        // targets below address 0 wrap around
        assert_eq!(Facts::parse("b fffffffffffffff0", 0x10).target, Some(-0x20));
        assert_eq!(Facts::parse("b $-0x20", 0x10).target, Some(-0x20));
    }
}
