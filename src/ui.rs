//! What every stage shows a person: progress bars on standard error (hidden
//! when turned off or when standard error is not a terminal), numbers with
//! thousands separators, and each stage's summary, which renders itself as
//! text or JSON on standard output ([`Report`]). Warnings and notes go to
//! standard error, so standard output stays parseable.

use std::io::{self, Write};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// A stage's summary: its JSON form (`--json`) is its serde form; its human
/// form is [`Report::render`].
pub trait Report: Serialize {
    /// The summary as text for a person.
    fn render(&self, out: &mut dyn Write) -> io::Result<()>;

    /// Things a person should notice (printed to standard error as
    /// `warning: ...`, in both forms).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Prints `report` on standard output (JSON when `json`), its warnings on
/// standard error.
pub fn emit(report: &impl Report, json: bool) -> io::Result<()> {
    for w in report.warnings() {
        eprintln!("warning: {w}");
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        report.render(&mut out)?;
    }
    out.flush()
}

/// A progress bar of `len` steps (a spinner when unknown) drawn with
/// `template` (indicatif's syntax) at most 4 times a second; hidden when
/// `enabled` is false.
pub(crate) fn bar(enabled: bool, len: Option<u64>, template: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr_with_hz(4));
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// `1234567` -> `1,234,567`.
pub(crate) fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// An error and its causes, each said once: a cause whose text is already
/// in the message (Parquet's and Arrow's errors repeat their source's) is
/// left out.
pub fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1_234_567), "1,234,567");
    }

    #[test]
    fn a_disabled_bar_is_hidden() {
        assert!(bar(false, Some(10), "{bar}").is_hidden());
    }
}
