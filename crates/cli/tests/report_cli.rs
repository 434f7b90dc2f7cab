//! `rivet report`: the HTML page holds what it promises (coverage, hot functions, dyno stats,
//! heatmaps before and after), and renders in headless Chromium with the heatmaps visible:
//! the DOM Chromium builds has the hot cells, and a screenshot has their colours.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    assert_one_error_line, build_instrument_program, instrument_and_train, rivet, s, scratch,
};

/// counts.c built, profiled on `switch 5000` and `recurse 30`, and optimized: (binary, counts, optimized).
fn optimized_program(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let bin = build_instrument_program(dir, "counts.c", "gcc", &["-O2"], "counts");
    let counts = instrument_and_train(&bin, dir, &[&["switch", "5000"], &["recurse", "30"]]);
    let opt = dir.join("counts.opt");
    let out = rivet(&["optimize", s(&bin), "--profile", s(&counts), "-o", s(&opt)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (bin, counts, opt)
}

fn chromium() -> &'static str {
    let found = Command::new("chromium").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "chromium is required for the report tests (apt-get install chromium; scripts/test.sh installs it)"
    );
    "chromium"
}

fn headless(args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .arg("120")
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--hide-scrollbars",
        ])
        .args(args)
        .output()
        .unwrap()
}

/// `data-hot-cells` of the heatmap section with this id.
fn hot_cells(html: &str, id: &str) -> Option<u64> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let rest = &html[at..];
    let key = "data-hot-cells=\"";
    let from = rest.find(key)? + key.len();
    rest[from..].split('"').next()?.parse().ok()
}

#[test]
fn the_report_shows_coverage_hot_functions_dyno_stats_and_heatmaps() {
    let dir = scratch("report_cli", "page");
    let (bin, counts, opt) = optimized_program(&dir);
    let page = dir.join("report.html");
    let out = rivet(&[
        "report",
        s(&bin),
        "--profile",
        s(&counts),
        "--optimized",
        s(&opt),
        "-o",
        s(&page),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Self-contained: nothing fetched from anywhere.
    for external in ["http://", "https://", "<script", "<link"] {
        let outside_svg_namespace = html.replace("http://www.w3.org/2000/svg", "");
        assert!(
            !outside_svg_namespace.contains(external),
            "{external} in the page"
        );
    }
    assert!(
        html.contains("profile matched<b>100.0%</b>"),
        "coverage card"
    );
    assert!(
        html.contains("<code>main</code>"),
        "main among the hot functions"
    );
    assert!(html.contains("<td>taken conditional branches</td>"));
    assert!(html.contains("<th>optimized</th>"));
    // The hot functions' fate: main, the hottest, was rewritten.
    assert!(html.contains("<th>in the optimized binary</th>"));
    let main_row = html
        .lines()
        .find(|l| l.contains("<td><code>main</code></td>"))
        .expect("main's row");
    assert!(main_row.ends_with("<td>rewritten</td></tr>"), "{main_row}");
    let before = hot_cells(&html, "heatmap-before").expect("heatmap before");
    let after = hot_cells(&html, "heatmap-after").expect("heatmap after");
    assert!(before > 0 && after > 0, "{before} {after}");

    // Without --optimized: one heatmap, no "after" column.
    let alone = dir.join("alone.html");
    let out = rivet(&["report", s(&bin), "--data", s(&counts), "-o", s(&alone)]);
    assert!(out.status.success());
    let html = std::fs::read_to_string(&alone).unwrap();
    assert!(hot_cells(&html, "heatmap-before").is_some_and(|n| n > 0));
    assert!(hot_cells(&html, "heatmap-after").is_none());
    assert!(!html.contains("<th>optimized</th>"));
    assert!(!html.contains("<th>in the optimized binary</th>"));
}

#[test]
fn the_report_renders_in_headless_chromium_with_the_heatmaps_visible() {
    let dir = scratch("report_cli", "chromium");
    let (bin, counts, opt) = optimized_program(&dir);
    let page = dir.join("report.html");
    let out = rivet(&[
        "report",
        s(&bin),
        "--profile",
        s(&counts),
        "--optimized",
        s(&opt),
        "-o",
        s(&page),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = format!("file://{}", page.canonicalize().unwrap().display());

    // The DOM Chromium built: both heatmaps with hot cells drawn as SVG rectangles.
    let dom = headless(&["--dump-dom", &url]);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    for id in ["heatmap-before", "heatmap-after"] {
        let at = dom.find(&format!("id=\"{id}\"")).expect(id);
        let section = &dom[at..];
        let section = &section[..section.find("</section>").unwrap()];
        assert!(section.contains("<svg"), "{id} has no SVG");
        assert!(section.contains("class=\"hot\""), "{id} has no hot cell");
    }

    // A screenshot: the heatmaps' warm colours are on screen (the page's only saturated
    // red/orange pixels; the rest is black text on white and grey cells).
    let shot = dir.join("shot.png");
    let out = headless(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1200,3000",
        &url,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.line_size / info.width as usize;
    assert!(channels >= 3, "{channels} channels");
    let warm = buf[..info.buffer_size()]
        .chunks(channels)
        .filter(|p| p[0] > 140 && p[2] < 100 && i32::from(p[0]) - i32::from(p[2]) > 100)
        .count();
    // Each hot cell is 6x6 pixels: at least a few cells' worth must show.
    assert!(warm >= 4 * 36, "only {warm} warm pixels in the screenshot");
}

#[test]
fn bad_requests_get_one_error_line() {
    let dir = scratch("report_cli", "errors");
    let (bin, counts, _opt) = optimized_program(&dir);
    let page = dir.join("never.html");
    let other = build_instrument_program(&dir, "counts.c", "gcc", &["-O1"], "other");
    // An "optimized" binary that is no Rivet output, and one made from another binary.
    let out = rivet(&[
        "report",
        s(&bin),
        "--profile",
        s(&counts),
        "--optimized",
        s(&other),
        "-o",
        s(&page),
    ]);
    assert_one_error_line(&out, "not written by Rivet");
    let other_counts = dir.join("other.counts");
    let inst = dir.join("other.inst");
    assert!(
        rivet(&[
            "instrument",
            s(&other),
            "-o",
            s(&inst),
            "--profile",
            s(&other_counts)
        ])
        .status
        .success()
    );
    assert!(
        Command::new(&inst)
            .args(["loop", "10"])
            .output()
            .unwrap()
            .status
            .success()
    );
    let other_opt = dir.join("other.opt");
    assert!(
        rivet(&[
            "optimize",
            s(&other),
            "--profile",
            s(&other_counts),
            "-o",
            s(&other_opt)
        ])
        .status
        .success()
    );
    let out = rivet(&[
        "report",
        s(&bin),
        "--profile",
        s(&counts),
        "--optimized",
        s(&other_opt),
        "-o",
        s(&page),
    ]);
    assert_one_error_line(&out, "made from another binary");
    let out = rivet(&[
        "report",
        s(&bin),
        "--profile",
        s(&dir.join("nope")),
        "-o",
        s(&page),
    ]);
    assert_one_error_line(&out, "cannot read");
    assert!(!page.exists());
}
