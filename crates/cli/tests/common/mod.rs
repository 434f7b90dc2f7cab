//! Helpers shared by the CLI's integration tests.

use std::process::Output;

/// Asserts the run failed with exactly one `rivet: error: ... (hint: ...)` line containing
/// `expect`, and printed nothing on stdout.
pub fn assert_one_error_line(out: &Output, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(lines[0].starts_with("rivet: error: "), "{stderr}");
    assert!(lines[0].contains("(hint: "), "no hint: {stderr}");
    assert!(
        lines[0].contains(expect),
        "expected {expect:?} in: {stderr}"
    );
    assert!(out.stdout.is_empty());
}
