//! `rivet report`: one self-contained HTML page about a binary and its profile, and, given the
//! optimized binary, what the optimization changed: profile coverage, the hottest functions,
//! dyno stats before and after, and heatmaps of where the executed code sits in the address
//! space before and after (the picture of why it got faster).
//!
//! The page needs no network and no script: tables are plain HTML and the heatmaps inline SVG,
//! one cell per [`CELL_BYTES`] bytes of code, coloured by the instructions the profiled run
//! executed there (log scale), with a tooltip naming the hottest function of the cell. The
//! optimized layout is read back from the output's `.rivet.bat` (original and new start of
//! every rewritten block), so the report works on any output Rivet wrote for this input.
//!
//! "Hot footprint" summarises the heatmaps: the bytes of code, counted in 64-byte cache lines,
//! that hold 99% of the executed instructions. Packing hot code together shrinks it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rivet_discover::{DiscoverError, DiscoverOptions, discover};
use rivet_elf::{ElfFile, Vaddr};
use rivet_ir::layout::{FunctionLayout, Layout};
use rivet_ir::{BlockId, FuncId, Program};
use rivet_passes::attach::AttachedProfile;
use rivet_passes::dyno::{DynoStats, dyno_stats};

use crate::error::{UserError, elf_error};
use crate::files::{PendingOutput, map_input};
use crate::profile_use::{attach_loaded, hex, hot_functions, load_profile, stale_notice};

/// Bytes of code per heatmap cell.
pub const CELL_BYTES: u64 = 256;
/// Cells per heatmap row.
const ROW_CELLS: u64 = 128;
/// Pixels per cell side.
const CELL_PX: u64 = 6;
/// Cache line size for the hot footprint.
const LINE: u64 = 64;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The binary the profile describes (the original, not the optimized one).
    pub binary: PathBuf,
    /// Its profile (counter file, Rivet profile, or BOLT fdata).
    #[arg(long, visible_alias = "data")]
    pub profile: PathBuf,
    /// The instrumented binary whose runs wrote the counter file (it holds the file's map),
    /// when it is no longer where `rivet instrument -o` wrote it.
    #[arg(long, value_name = "PATH")]
    pub instrumented: Option<std::path::PathBuf>,
    /// The binary `rivet optimize` made from it: adds dyno stats and a heatmap after.
    #[arg(long)]
    pub optimized: Option<PathBuf>,
    /// Where to write the HTML page.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// How many hot functions to list.
    #[arg(long, default_value_t = 30)]
    pub top: usize,
    /// Use a profile of another build of the binary.
    #[arg(long)]
    pub force: bool,
}

/// Executed instructions per address range: (start, end, weight, function).
type Spans = Vec<(u64, u64, f64, FuncId)>;

/// One executable section of a heatmap: a run of cells.
struct HeatSection {
    name: String,
    start: u64,
    /// Executed instructions per cell.
    weights: Vec<f64>,
    /// The function with the largest share of each cell.
    hottest: Vec<Option<FuncId>>,
}

/// One heatmap: executable sections as labelled runs of cells.
struct Heatmap {
    sections: Vec<HeatSection>,
    /// Bytes (in whole cache lines) holding 99% of the executed instructions.
    footprint: u64,
}

/// Where each profiled block ran, as spans of bytes weighted by executed instructions,
/// placed by `place` (old block start -> new start; `None`: not in this binary).
fn spans(
    program: &Program,
    attached: &AttachedProfile,
    place: &dyn Fn(FuncId, Vaddr) -> Option<u64>,
    rewritten: &dyn Fn(FuncId) -> bool,
) -> Spans {
    let mut out = Vec::new();
    for (i, counts) in attached.functions.iter().enumerate() {
        let Some(counts) = counts else { continue };
        let f = &program.functions[i];
        for (b, block) in f.blocks.iter().enumerate() {
            let c = counts.blocks.get(b).copied().unwrap_or(0);
            let insts = f.block_insts(block);
            let (Some(last), true) = (insts.last(), c > 0) else {
                continue;
            };
            // Rewritten code holds the block without the input's alignment padding.
            let (size, n) = if rewritten(f.id) {
                (f.kept_size(block), f.kept_insts(block).count())
            } else {
                (last.end() - block.start, insts.len())
            };
            if let Some(start) = place(f.id, block.start) {
                out.push((start, start + size, c as f64 * n as f64, f.id));
            }
        }
    }
    out
}

fn heatmap(elf: &ElfFile<'_>, spans: &Spans) -> Heatmap {
    let mut sections: Vec<HeatSection> = Vec::new();
    let mut lines: HashMap<u64, f64> = HashMap::new();
    for s in elf
        .sections()
        .iter()
        .filter(|s| s.is_exec() && s.is_alloc())
    {
        let range = s.range();
        let (start, end) = (range.start.get(), range.end.get());
        let cells = (end - start).div_ceil(CELL_BYTES) as usize;
        let mut weight = vec![0f64; cells];
        let mut best: Vec<Option<(FuncId, f64)>> = vec![None; cells];
        for &(a, b, w, f) in spans.iter().filter(|x| x.0 >= start && x.0 < end) {
            let b = b.min(end);
            let per_byte = w / (b - a).max(1) as f64;
            let mut at = a;
            while at < b {
                let cell = ((at - start) / CELL_BYTES) as usize;
                let cell_end = (start + (cell as u64 + 1) * CELL_BYTES).min(b);
                let share = per_byte * (cell_end - at) as f64;
                weight[cell] += share;
                if best[cell].is_none_or(|(_, bw)| share > bw) {
                    best[cell] = Some((f, share));
                }
                at = cell_end;
            }
            let mut line = a / LINE;
            while line * LINE < b {
                let from = (line * LINE).max(a);
                let to = ((line + 1) * LINE).min(b);
                *lines.entry(line).or_default() += per_byte * (to - from) as f64;
                line += 1;
            }
        }
        // Code that ran, and any big section (where cold code went, or stayed).
        if weight.iter().any(|&w| w > 0.0) || end - start >= 4096 {
            sections.push(HeatSection {
                name: s.name.to_string(),
                start,
                weights: weight,
                hottest: best.into_iter().map(|b| b.map(|x| x.0)).collect(),
            });
        }
    }
    let mut line_weights: Vec<f64> = lines.into_values().collect();
    line_weights.sort_by(|a, b| b.total_cmp(a));
    let total: f64 = line_weights.iter().sum();
    let mut acc = 0.0;
    let mut needed = 0u64;
    for w in line_weights {
        if acc >= 0.99 * total {
            break;
        }
        acc += w;
        needed += 1;
    }
    Heatmap {
        sections,
        footprint: needed * LINE,
    }
}

/// The optimized binary's block placement and layout, from its `.rivet.bat`.
struct Optimized {
    new_start: HashMap<u64, u64>,
    layout: Layout,
}

fn read_optimized(
    program: &Program,
    input: &ElfFile<'_>,
    out: &ElfFile<'_>,
    path: &Path,
) -> Result<Optimized, UserError> {
    let not_ours = |what: &str| {
        UserError::new(format!("{}: {what}", path.display()))
            .hint("give the file `rivet optimize` wrote from this binary")
    };
    let note = out
        .section_by_name(rivet_emit::rewrite::RIVET_NOTE)
        .ok_or_else(|| not_ours("not written by Rivet (no .note.rivet)"))?;
    // namesz, descsz, type, "Rivet\0" padded to 8, then the input's build-id.
    let descsz = note
        .data
        .get(4..8)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    let recorded = descsz.and_then(|n| note.data.get(20..20 + n));
    if let (Some(recorded), Some(id)) = (recorded, input.build_id())
        && recorded != id
    {
        return Err(not_ours(&format!(
            "made from another binary (build-id {}, this one is {})",
            hex(recorded),
            hex(id)
        )));
    }
    let bat = out
        .section_by_name(rivet_emit::bat::SECTION)
        .ok_or_else(|| not_ours("has no block address table"))?;
    let pairs = rivet_emit::bat::decode(bat.data).map_err(|e| not_ours(&e.to_string()))?;
    let new_start: HashMap<u64, u64> = pairs.iter().map(|(o, n)| (o.get(), n.get())).collect();
    // Fragments: a function's blocks grouped by the output section they landed in, the
    // entry's section first, each in address order.
    let mut layout = Layout {
        functions: vec![None; program.functions.len()],
        ..Layout::default()
    };
    for f in &program.functions {
        let mut placed: Vec<(u64, BlockId)> = f
            .blocks
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                new_start
                    .get(&b.start.get())
                    .map(|&n| (n, BlockId(i as u32)))
            })
            .collect();
        if placed.len() != f.blocks.len() || placed.is_empty() {
            continue;
        }
        placed.sort_unstable();
        let section_of = |addr: u64| out.section_containing(Vaddr(addr)).map(|s| s.index);
        let entry_section = new_start
            .get(&f.range.start.get())
            .and_then(|&n| section_of(n));
        let mut groups: Vec<(Option<usize>, Vec<BlockId>)> = Vec::new();
        for (addr, b) in placed {
            let s = section_of(addr);
            match groups.iter_mut().find(|g| g.0 == s) {
                Some(g) => g.1.push(b),
                None => groups.push((s, vec![b])),
            }
        }
        groups.sort_by_key(|g| g.0 != entry_section);
        layout.functions[f.id.0 as usize] = Some(FunctionLayout {
            fragments: groups.into_iter().map(|g| g.1).collect(),
            aligned: Vec::new(),
            changed_exits: Vec::new(),
            promoted_calls: Vec::new(),
        });
    }
    Ok(Optimized { new_start, layout })
}

/// A function's name for people: qualified by its file when local (an empty file name, which
/// linkers use to close the last file's local scope, qualifies nothing).
fn display_name(program: &Program, f: FuncId) -> String {
    let q = program.function(f).qualified_name();
    q.strip_suffix('/')
        .map_or_else(|| q.clone(), str::to_string)
}

fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// Colour of a cell: white for nothing, then yellow to dark red on a log scale.
fn colour(weight: f64, max: f64) -> String {
    if weight <= 0.0 || max <= 0.0 {
        return "#f4f4f4".into();
    }
    let t = ((1.0 + weight).ln() / (1.0 + max).ln()).clamp(0.0, 1.0);
    let (r, g, b) = (
        255.0 - 100.0 * t,
        230.0 * (1.0 - t) + 10.0,
        120.0 * (1.0 - t),
    );
    format!("#{:02x}{:02x}{:02x}", r as u8, g as u8, b as u8)
}

fn render_heatmap(out: &mut String, id: &str, title: &str, map: &Heatmap, program: &Program) {
    let max = map
        .sections
        .iter()
        .flat_map(|s| s.weights.iter().copied())
        .fold(0.0, f64::max);
    let hot_cells = map
        .sections
        .iter()
        .flat_map(|s| s.weights.iter())
        .filter(|&&w| w > 0.0)
        .count();
    let _ = writeln!(
        out,
        "<section class=\"heatmap\" id=\"{id}\" data-hot-cells=\"{hot_cells}\"><h3>{}</h3>",
        escape(title)
    );
    for HeatSection {
        name,
        start,
        weights,
        hottest: best,
    } in &map.sections
    {
        let rows = (weights.len() as u64).div_ceil(ROW_CELLS).max(1);
        let _ = writeln!(
            out,
            "<div class=\"sec\">{} at {start:#x}, {} KiB</div>",
            escape(name),
            (weights.len() as u64 * CELL_BYTES).div_ceil(1024)
        );
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\">",
            ROW_CELLS * CELL_PX,
            rows * CELL_PX
        );
        for (k, &w) in weights.iter().enumerate() {
            let (x, y) = (
                (k as u64 % ROW_CELLS) * CELL_PX,
                (k as u64 / ROW_CELLS) * CELL_PX,
            );
            let _ = write!(
                out,
                "<rect x=\"{x}\" y=\"{y}\" width=\"{CELL_PX}\" height=\"{CELL_PX}\" fill=\"{}\"",
                colour(w, max)
            );
            match best[k] {
                Some(f) if w > 0.0 => {
                    let _ = writeln!(
                        out,
                        " class=\"hot\"><title>{:#x}: {} ({:.3}% of the peak cell)</title></rect>",
                        start + k as u64 * CELL_BYTES,
                        escape(&display_name(program, f)),
                        100.0 * w / max
                    );
                }
                _ => out.push_str("/>\n"),
            }
        }
        out.push_str("</svg>\n");
    }
    out.push_str("</section>\n");
}

fn dyno_table(out: &mut String, before: &DynoStats, after: Option<&DynoStats>) {
    out.push_str("<table id=\"dyno\"><tr><th>profiled run</th><th>original</th>");
    if after.is_some() {
        out.push_str("<th>optimized</th><th>change</th>");
    }
    out.push_str("</tr>\n");
    let after_rows = after.map(DynoStats::rows);
    for (k, (name, b)) in before.rows().iter().enumerate() {
        let _ = write!(out, "<tr><td>{name}</td><td class=\"n\">{b}</td>");
        if let Some(rows) = &after_rows {
            let a = rows[k].1;
            let change = if *b == 0 {
                "n/a".to_string()
            } else {
                format!("{:+.2}%", 100.0 * (a as f64 - *b as f64) / *b as f64)
            };
            let _ = write!(out, "<td class=\"n\">{a}</td><td class=\"n\">{change}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}table{border-collapse:collapse}\
td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}td.n{text-align:right;\
font-variant-numeric:tabular-nums}.cards{display:flex;gap:1em;flex-wrap:wrap}.card{border:1px \
solid #ccc;border-radius:6px;padding:.6em 1em}.card b{display:block;font-size:1.4em}\
.heatmap{margin:1em 0}.sec{color:#555;margin:.4em 0 .2em}svg{display:block}code{font-size:.95em}";

pub fn run(args: &ReportArgs) -> Result<(), UserError> {
    let mapped = map_input(&args.binary)?;
    let elf = ElfFile::parse(mapped.bytes()).map_err(|e| elf_error(&args.binary, &e))?;
    let profile = load_profile(
        &args.profile,
        &args.binary,
        &elf,
        args.force,
        args.instrumented.as_deref(),
    )?;
    let optimized_map = args.optimized.as_deref().map(map_input).transpose()?;
    let optimized_elf = match (&optimized_map, &args.optimized) {
        (Some(m), Some(p)) => Some(ElfFile::parse(m.bytes()).map_err(|e| elf_error(p, &e))?),
        _ => None,
    };
    let (pending, file) = PendingOutput::create(&args.output)?;
    let program = discover(&elf, &DiscoverOptions::default()).map_err(|e| match e {
        DiscoverError::Elf(e) => elf_error(&args.binary, &e),
    })?;
    let (attached, stale) = attach_loaded(&program, &profile)?;
    if let Some(report) = &stale {
        eprintln!(
            "rivet: note: {}",
            stale_notice(&profile, report, &args.profile, &args.binary)
        );
    }
    let optimized = match (&optimized_elf, &args.optimized) {
        (Some(out), Some(path)) => Some(read_optimized(&program, &elf, out, path)?),
        _ => None,
    };

    let before = dyno_stats(&program, &attached, None);
    let after = optimized
        .as_ref()
        .map(|o| dyno_stats(&program, &attached, Some(&o.layout)));
    let before_map = heatmap(
        &elf,
        &spans(&program, &attached, &|_, a| Some(a.get()), &|_| false),
    );
    let after_map = match (&optimized, &optimized_elf) {
        (Some(o), Some(out)) => Some(heatmap(
            out,
            &spans(
                &program,
                &attached,
                &|f, a| {
                    // Blocks of functions left in place keep their addresses.
                    match o.layout.function(f) {
                        Some(_) => o.new_start.get(&a.get()).copied(),
                        None => Some(a.get()),
                    }
                },
                &|f| o.layout.function(f).is_some(),
            ),
        )),
        _ => None,
    };

    let name = args
        .binary
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut html = String::new();
    let _ = writeln!(
        html,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Rivet report: {}</title><style>{STYLE}</style></head><body>",
        escape(&name)
    );
    let _ = writeln!(
        html,
        "<h1>Rivet report: <code>{}</code></h1>",
        escape(&name)
    );
    let r = &attached.report;
    let kib = |b: u64| format!("{:.1} KiB", b as f64 / 1024.0);
    let _ = writeln!(
        html,
        "<div class=\"cards\"><div class=\"card\">profile matched<b>{:.1}%</b>{} of {} records</div>\
         <div class=\"card\">functions with counts<b>{}</b>of {}</div>\
         <div class=\"card\">hot footprint (99% of executed instructions)<b>{}{}</b>{}</div></div>",
        100.0 * r.matched_share(),
        r.matched,
        r.records,
        r.profiled_functions,
        program.functions.len(),
        kib(before_map.footprint),
        after_map
            .as_ref()
            .map_or(String::new(), |a| format!(" &rarr; {}", kib(a.footprint))),
        if after_map.is_some() {
            "original &rarr; optimized"
        } else {
            "original"
        }
    );
    let _ = writeln!(
        html,
        "<p>Profile <code>{}</code>{}{}.</p>",
        escape(&args.profile.display().to_string()),
        if attached.inferred {
            ", sampled (edge counts inferred)"
        } else {
            ""
        },
        args.optimized.as_ref().map_or(String::new(), |p| format!(
            "; optimized binary <code>{}</code>",
            escape(&p.display().to_string())
        ))
    );
    for (what, list) in [
        ("not in the binary", &r.unknown_functions),
        (
            "stale (records fit no instruction or edge)",
            &r.stale_functions,
        ),
    ] {
        if !list.is_empty() {
            let names: Vec<String> = list.iter().take(10).map(|x| escape(&x.0)).collect();
            let _ = writeln!(
                html,
                "<p>{} functions {what}: {}{}</p>",
                list.len(),
                names.join(", "),
                if list.len() > 10 { ", ..." } else { "" }
            );
        }
    }

    let hot = hot_functions(&program, &attached);
    let total: u64 = hot.iter().map(|h| h.1).sum();
    let _ = writeln!(
        html,
        "<h2>Hottest functions</h2><table id=\"hot\"><tr><th>#</th><th>function</th><th>executed instructions</th><th>share</th><th>entries</th><th>size</th>{}</tr>",
        if optimized.is_some() {
            "<th>in the optimized binary</th>"
        } else {
            ""
        }
    );
    for (k, (f, insts)) in hot.iter().take(args.top).enumerate() {
        let func = program.function(*f);
        let entries = attached.functions[f.0 as usize]
            .as_ref()
            .map_or(0, |c| c.entries);
        // A hot function the optimizer left as it was is where the rest of the speed is.
        let fate = optimized.as_ref().map_or(String::new(), |o| {
            let what = if o.layout.function(*f).is_some() {
                "rewritten".to_string()
            } else if let Some(reason) = func.skip_reason() {
                format!("left as it was: {}", reason.kind())
            } else {
                "left as it was".to_string()
            };
            format!("<td>{what}</td>")
        });
        let _ = writeln!(
            html,
            "<tr><td class=\"n\">{}</td><td><code>{}</code></td><td class=\"n\">{insts}</td><td class=\"n\">{:.2}%</td><td class=\"n\">{entries}</td><td class=\"n\">{}</td>{fate}</tr>",
            k + 1,
            escape(&display_name(&program, *f)),
            100.0 * *insts as f64 / total.max(1) as f64,
            func.range.len()
        );
    }
    html.push_str("</table>\n<h2>Dyno stats</h2>\n");
    dyno_table(&mut html, &before, after.as_ref());
    let _ = writeln!(
        html,
        "<h2>Where the executed code is</h2><p>Each cell is {CELL_BYTES} bytes of code, coloured by the instructions the profiled run executed there (log scale); hover for the hottest function of a cell.</p>"
    );
    render_heatmap(
        &mut html,
        "heatmap-before",
        "original",
        &before_map,
        &program,
    );
    if let Some(a) = &after_map {
        render_heatmap(&mut html, "heatmap-after", "optimized", a, &program);
    }
    html.push_str("</body></html>\n");

    pending.finish(file, html.as_bytes(), 0o644)?;
    println!(
        "report written to {}: {} hot functions, hot footprint {}{}",
        args.output.display(),
        hot.len(),
        kib(before_map.footprint),
        after_map.as_ref().map_or(String::new(), |a| format!(
            " -> {} optimized",
            kib(a.footprint)
        ))
    );
    Ok(())
}
