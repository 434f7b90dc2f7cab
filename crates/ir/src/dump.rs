//! The stable text form of functions, for humans (`rivet inspect --function`) and for golden
//! tests. Stable means: the same program always dumps to the same bytes, and the format only
//! changes on purpose (tests then need re-blessing).

use std::fmt::Write;

use crate::program::*;

fn target_text(program: &Program, target: &CallTarget) -> String {
    match target {
        CallTarget::Function { function, addr } => {
            let f = program.function(*function);
            if *addr == f.range.start {
                format!("{addr} <{}>", f.qualified_name())
            } else {
                format!(
                    "{addr} <{}+{:#x}>",
                    f.qualified_name(),
                    *addr - f.range.start
                )
            }
        }
        CallTarget::Plt { name, addr } => format!("{addr} <{name}@plt>"),
        CallTarget::Unknown { addr } => format!("{addr} <unknown>"),
        CallTarget::Indirect => "indirect".to_string(),
    }
}

fn edge_kind(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::FallThrough => "fallthrough",
        EdgeKind::Taken => "taken",
        EdgeKind::JumpTable => "table",
        EdgeKind::ComputedGoto => "goto",
    }
}

fn origin_text(origin: Origin) -> &'static str {
    match origin {
        Origin::Symbol => "symbol",
        Origin::SymbolSizedByFde => "symbol+fde",
        Origin::SymbolSizedByNext => "symbol-to-next",
        Origin::Fde => "fde",
    }
}

/// Dumps one function with its blocks, instructions, successors, tables and unwind state.
pub fn dump_function(program: &Program, f: &Function) -> String {
    let mut out = String::new();
    let status = match &f.status {
        Status::Simple => "simple".to_string(),
        Status::Skipped(r) => format!("skipped: {} ({r})", r.kind()),
    };
    let _ = writeln!(
        out,
        "function {} {}..{} size={:#x} origin={} {}",
        f.qualified_name(),
        f.range.start,
        f.range.end,
        f.range.len(),
        origin_text(f.origin),
        status
    );
    if f.names.len() > 1 {
        let _ = writeln!(out, "  aliases: {}", f.names[1..].join(", "));
    }
    if let Some(parent) = f.parent {
        let kind = match parent.kind {
            PartKind::ColdFragment => "cold fragment",
            PartKind::PartialInline => "partial-inlining part",
        };
        let _ = writeln!(
            out,
            "  parent: {} ({kind})",
            program.function(parent.function).qualified_name()
        );
    }
    if !f.secondary_entries.is_empty() {
        let list: Vec<String> = f.secondary_entries.iter().map(|a| a.to_string()).collect();
        let _ = writeln!(out, "  secondary entries: {}", list.join(" "));
    }
    if let Some(lsda) = f.lsda {
        let _ = writeln!(out, "  lsda: {lsda}");
    }
    if f.padding_after > 0 {
        let _ = writeln!(out, "  padding after: {} bytes", f.padding_after);
    }
    for (i, jt) in f.jump_tables.iter().enumerate() {
        let kind = match jt.kind {
            JumpTableKind::Absolute => "absolute".to_string(),
            JumpTableKind::Relative { base } => format!("relative to {base}"),
            JumpTableKind::Scaled {
                anchor,
                signed,
                shift,
            } => format!(
                "{} << {shift} from {anchor}",
                if signed { "signed" } else { "unsigned" }
            ),
        };
        let bound = match jt.bound {
            TableBound::RangeCheck { check } => format!("range check at {check}"),
            TableBound::Relocations => "relocations".to_string(),
            TableBound::Scanned => "scanning entries (inferred)".to_string(),
            TableBound::IndexWidth { bits } => format!("the width of its index ({bits} bits)"),
            TableBound::RangeCheckAndRelocations { check } => {
                format!("range check at {check} and relocations")
            }
        };
        let mut distinct = jt.entries.clone();
        distinct.sort();
        distinct.dedup();
        let _ = writeln!(
            out,
            "  jump table JT{i} at {} ({kind}, {} x {} bytes, {} distinct targets, bound by {bound}) used at {}",
            jt.addr,
            jt.entries.len(),
            jt.entry_size,
            distinct.len(),
            jt.jump_at
        );
        if let Some(default) = jt.default_target {
            let _ = writeln!(out, "    default: {default}");
        }
        for chunk in jt.entries.chunks(8) {
            let line: Vec<String> = chunk.iter().map(|a| a.to_string()).collect();
            let _ = writeln!(out, "    {}", line.join(" "));
        }
    }
    let mut calls = f.calls.iter().peekable();
    for (bi, block) in f.blocks.iter().enumerate() {
        let mut flags = Vec::new();
        if block.is_entry {
            flags.push("entry");
        }
        if block.is_landing_pad {
            flags.push("landing-pad");
        }
        if block.is_address_taken {
            flags.push("address-taken");
        }
        if block.in_exclusive_sequence {
            flags.push("exclusive");
        }
        let cfi = f
            .cfi_at(block.start)
            .map(|r| {
                let names = |reg| program.info.isa.dwarf_register_name(reg);
                format!(" [{}]", r.display(names))
            })
            .unwrap_or_default();
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!(" ({})", flags.join(", "))
        };
        let _ = writeln!(out, "  B{bi} {}{flags}{cfi}", block.start);
        for inst in f.block_insts(block) {
            let mut line = format!("    {}  {}", inst.addr(), inst.to_asm());
            while calls.peek().is_some_and(|c| c.at < inst.addr()) {
                calls.next();
            }
            if let Some(call) = calls.peek().filter(|c| c.at == inst.addr()) {
                let _ = write!(line, "  # call {}", target_text(program, &call.target));
                if call.noreturn {
                    line.push_str(" noreturn");
                }
                if let Some(lp) = call.landing_pad {
                    let _ = write!(line, " unwind-to {lp}");
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let term = match &block.terminator {
            Terminator::FallThrough => "fallthrough".to_string(),
            Terminator::Jump => "jump".to_string(),
            Terminator::CondJump => "cond-jump".to_string(),
            Terminator::CondTailCall { target } => {
                format!("cond-tail-call {}", target_text(program, target))
            }
            Terminator::TailCall { target } => {
                format!("tail-call {}", target_text(program, target))
            }
            Terminator::JumpTable { table } => format!("jump-table JT{}", table.0),
            Terminator::ComputedGoto => "computed-goto".to_string(),
            Terminator::Return => "return".to_string(),
            Terminator::NoReturnCall => "noreturn-call".to_string(),
            Terminator::Trap => "trap".to_string(),
        };
        let mut succs: Vec<String> = block
            .succs
            .iter()
            .map(|e| format!("B{} ({})", e.to.0, edge_kind(e.kind)))
            .collect();
        for fe in &block.fragment_succs {
            succs.push(format!(
                "{} in {} ({})",
                fe.addr,
                program.function(fe.function).qualified_name(),
                edge_kind(fe.kind)
            ));
        }
        if succs.is_empty() {
            let _ = writeln!(out, "    => {term}");
        } else {
            let _ = writeln!(out, "    => {term} -> {}", succs.join(", "));
        }
    }
    out
}

/// Dumps every function of the program, in address order.
pub fn dump_program(program: &Program) -> String {
    let mut out = String::new();
    for f in &program.functions {
        out.push_str(&dump_function(program, f));
        out.push('\n');
    }
    out
}
