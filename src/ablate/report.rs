//! `ablate --report`: `RUN/ablate/NAME/report.md`, the results in the
//! paper's table shape (a section per axis, the base first) with the
//! published values beside them ([`super::paper`]), each variant's spread
//! over seeds, and `plots/*.svg`: the training curves of every variant
//! (train loss, eval-split log-loss and accuracy against steps, the shape
//! of the paper's Figure A4), from the training runs' `metrics.csv` and
//! `eval.csv`.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

use super::{
    grid::{Grid, Level},
    paper,
    results::{self, Row},
};
use crate::{
    store::{StoreError, commit::write_atomic},
    train::logs::{self, EvalRow, MetricsRow},
    ui::Report,
};

/// What `--report` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ReportSummary {
    pub report: PathBuf,
    pub plots: Vec<PathBuf>,
    pub variants: usize,
    pub finished: usize,
    pub failed: usize,
}

impl Report for ReportSummary {
    fn render(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{} of {} variant runs finished, {} failed; wrote {} and {} plots",
            self.finished,
            self.variants,
            self.failed,
            self.report.display(),
            self.plots.len()
        )
    }
}

/// The paper's metrics, as the report prints them: name in the results,
/// column title, scale (accuracies as percentages), decimals.
const COLUMNS: [(&str, &str, f64, usize); 4] = [
    ("puzzle_accuracy", "Puzzles %", 100.0, 1),
    ("action_accuracy", "Actions %", 100.0, 1),
    ("kendall_tau", "Kendall τ", 1.0, 3),
    ("log_loss", "log-loss", 1.0, 3),
];

/// One metric of one variant over its seeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub n: usize,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub(crate) fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let n = values.len();
        Some(Spread {
            n,
            mean: values.iter().sum::<f64>() / n as f64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }

    /// Whether this and `base` differ by more than their seeds spread: two
    /// or more seeds each, and the ranges [min, max] do not overlap.
    pub(crate) fn exceeds(&self, base: &Spread) -> bool {
        self.n >= 2 && base.n >= 2 && (self.min > base.max || self.max < base.min)
    }
}

/// What stops `--report`: reading the results, or writing a file of the
/// report (each names its file).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}: {source}", path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writes the report of `grid` from its results.
pub fn write(grid: &Grid) -> Result<ReportSummary, ReportError> {
    let rows = results::read_all(&grid.dir())?;
    let dir = grid.dir();
    let plots_dir = dir.join("plots");
    std::fs::create_dir_all(&plots_dir).map_err(|source| ReportError::Io {
        path: plots_dir.clone(),
        source,
    })?;
    let mut plots = Vec::new();
    type Curve = fn(&Path) -> Vec<(f64, f64)>;
    let curves: [(&str, &str, Curve); 3] = [
        ("train_loss.svg", "train loss", train_loss),
        ("eval_log_loss.svg", "eval-split log-loss (EMA)", |out| {
            eval_curve(out, |r| r.log_loss)
        }),
        ("eval_accuracy.svg", "eval-split accuracy (EMA)", |out| {
            eval_curve(out, |r| r.accuracy)
        }),
    ];
    for (file, title, curve) in curves {
        let mut series = Vec::new();
        for v in &grid.variants {
            let points = curve(&v.train.out_dir());
            if !points.is_empty() {
                series.push((v.id.clone(), points));
            }
        }
        let path = plots_dir.join(file);
        write_atomic(
            &path,
            line_chart(title, "training step", &series).as_bytes(),
        )?;
        plots.push(path);
    }
    let text = markdown(grid, &rows, &plots);
    let report = dir.join("report.md");
    write_atomic(&report, text.as_bytes())?;
    let failed = rows
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| &r.train_name)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let finished = rows
        .iter()
        .filter(|r| r.error.is_none())
        .map(|r| &r.train_name)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    Ok(ReportSummary {
        report,
        plots,
        variants: grid.variants.len(),
        finished,
        failed,
    })
}

/// `(step, mean training loss)` of the training run in `out`, from its
/// `metrics.csv` (none when the file is missing).
pub(crate) fn train_loss(out: &Path) -> Vec<(f64, f64)> {
    logs::read::<MetricsRow>(&out.join("metrics.csv"))
        .into_iter()
        .map(|r| (r.step as f64, r.loss))
        .collect()
}

/// `(step, value)` of one of `eval.csv`'s figures for the training run in
/// `out` (none when the file is missing).
fn eval_curve(out: &Path, value: fn(&EvalRow) -> f64) -> Vec<(f64, f64)> {
    logs::read::<EvalRow>(&out.join("eval.csv"))
        .iter()
        .map(|r| (r.step as f64, value(r)))
        .collect()
}

/// The report's Markdown.
pub(crate) fn markdown(grid: &Grid, rows: &[Row], plots: &[PathBuf]) -> String {
    let mut md = String::new();
    let base = &grid.variants[0];
    let t = &base.train;
    let samples = t.steps * t.batch_size as u64;
    let _ = writeln!(md, "# Ablation `{}`\n", grid.name);
    let _ = writeln!(
        md,
        "Grid `{}` on `{}`: {} settings × seeds {:?}. Base recipe: {} predictor, model {} ({} layers), \
K = {}, {} loss, {} sampler, batch {}, {} steps ({} samples per variant){}.\n",
        grid.file.display(),
        grid.run.display(),
        grid.variants.len() / grid.seeds.len().max(1),
        grid.seeds,
        spelled(t.policy),
        spelled(t.model),
        t.shape().layers,
        t.buckets,
        spelled(t.loss),
        spelled(t.sampling),
        t.batch_size,
        t.steps,
        crate::ui::group(samples),
        grid.base_annotate
            .as_ref()
            .map(|a| format!(", data annotated at {}", a.limit))
            .unwrap_or_default()
    );
    // The paper: 5M steps of batch 1024.
    let paper_samples = 5_000_000u64 * 1024;
    let _ = writeln!(
        md,
        "**Scale.** Each variant saw {} training samples, {:.1e} of the paper's {} (5M steps of batch 1024). \
Differences between variants smaller than their spread over seeds are noise: each cell is the mean over \
seeds with its range [min, max], and † marks a variant whose range does not overlap the base's (two or \
more seeds each). Log-loss is over each predictor's own targets (K value buckets, or 1,968 actions for \
behavioural cloning): compare it only between settings with the same targets.{}\n",
        crate::ui::group(samples),
        samples as f64 / paper_samples as f64,
        crate::ui::group(paper_samples),
        if samples < paper_samples / 100 {
            " At this scale the grid checks the machinery (every variant trains, is scored and \
lands in the table), not the paper's conclusions."
        } else {
            ""
        }
    );

    // Values per (variant, metric) over seeds.
    let mut values: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.error.is_none()) {
        if let Some(v) = r.value {
            values
                .entry((r.variant.as_str(), r.metric.as_str()))
                .or_default()
                .push(v);
        }
    }
    let spread =
        |variant: &str, metric: &str| values.get(&(variant, metric)).and_then(|v| Spread::of(v));
    for axis in &grid.axes {
        let level = if axis.level == Level::Data {
            " (data: the train split annotated again)"
        } else {
            ""
        };
        let _ = writeln!(md, "## `{}`{level}\n", axis.key);
        let mut header = "| setting | seeds |".to_owned();
        let mut rule = "|---|---|".to_owned();
        for (_, title, _, _) in COLUMNS {
            header.push_str(&format!(" {title} |"));
            rule.push_str("---|");
        }
        header.push_str(" paper puzzles % | paper actions % | paper τ |");
        rule.push_str("---|---|---|");
        let _ = writeln!(md, "{header}\n{rule}");
        let base_setting = grid.base_setting(&axis.key);
        let mut lines: Vec<(String, String)> = vec![(
            "base".to_owned(),
            format!(
                "{} (base)",
                base_setting.clone().unwrap_or_else(|| "base".into())
            ),
        )];
        for v in &axis.values {
            let s = super::grid::setting_text(v);
            lines.push((format!("{}={s}", axis.key), s));
        }
        for (id, label) in lines {
            let setting = if id == "base" {
                base_setting.clone()
            } else {
                id.split_once('=').map(|(_, s)| s.to_owned())
            };
            let seeds = rows
                .iter()
                .filter(|r| r.variant == id && r.error.is_none())
                .map(|r| r.seed)
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            let mut line = format!("| {label} | {seeds} |");
            for (metric, _, scale, decimals) in COLUMNS {
                let cell = match spread(&id, metric) {
                    None => "–".to_owned(),
                    Some(s) => {
                        let mark = match (id != "base", spread("base", metric)) {
                            (true, Some(b)) if s.exceeds(&b) => " †",
                            _ => "",
                        };
                        if s.n >= 2 {
                            format!(
                                "{:.d$} [{:.d$}, {:.d$}]{mark}",
                                s.mean * scale,
                                s.min * scale,
                                s.max * scale,
                                d = decimals
                            )
                        } else {
                            format!("{:.d$}", s.mean * scale, d = decimals)
                        }
                    }
                };
                line.push_str(&format!(" {cell} |"));
            }
            match setting.and_then(|s| paper::published(&axis.key, &s)) {
                Some(p) => line.push_str(&format!(
                    " {:.1} | {:.1} | {:.3} |",
                    p.puzzles, p.actions, p.kendall_tau
                )),
                None => line.push_str(" – | – | – |"),
            }
            let _ = writeln!(md, "{line}");
        }
        md.push('\n');
    }

    let failures: Vec<&Row> = rows.iter().filter(|r| r.error.is_some()).collect();
    let finished: std::collections::BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.error.is_none())
        .map(|r| r.train_name.as_str())
        .collect();
    let missing: Vec<&str> = grid
        .variants
        .iter()
        .map(|v| v.train_name.as_str())
        .filter(|n| !finished.contains(n) && !failures.iter().any(|f| f.train_name == *n))
        .collect();
    if !failures.is_empty() || !missing.is_empty() {
        let _ = writeln!(md, "## Not in the table\n");
        for f in failures {
            let _ = writeln!(
                md,
                "- `{}` seed {} failed: {}",
                f.variant,
                f.seed,
                f.error.as_deref().unwrap_or_default()
            );
        }
        for m in missing {
            let _ = writeln!(md, "- `{m}` has not finished");
        }
        md.push('\n');
    }

    let _ = writeln!(
        md,
        "## Training curves\n\nOne line per variant and seed (Figure A4's shape), from each run's `metrics.csv` and `eval.csv`.\n"
    );
    for p in plots {
        if let Some(name) = p.file_name() {
            let name = name.to_string_lossy();
            let _ = writeln!(md, "![{name}](plots/{name})\n");
        }
    }
    let _ = writeln!(
        md,
        "## Sources\n\nPublished values: {}\n\nOurs: `{}` (`chessbench sql {} ablations`).",
        paper::CITATION,
        grid.dir().join("results").display(),
        grid.run.display()
    );
    md
}

/// An enum value as pipeline files spell it (`action_value`).
fn spelled(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// A line chart as SVG: one polyline per series, a colour per distinct
/// series name, the axes' ranges labelled.
pub(crate) fn line_chart(
    title: &str,
    x_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    const COLOURS: [&str; 10] = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf",
    ];
    let (w, h, left, right, top, bottom) = (720.0, 400.0, 60.0, 200.0, 30.0, 40.0);
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in points {
        if x.is_finite() && y.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
<text x=\"{left}\" y=\"18\" font-size=\"14\">{}</text>\n",
        escape(title)
    );
    if !x0.is_finite() {
        svg.push_str("<text x=\"60\" y=\"200\">no training logs yet</text>\n</svg>\n");
        return svg;
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1e-9;
    }
    let (pw, ph) = (w - left - right, h - top - bottom);
    let px = |x: f64| left + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| top + (1.0 - (y - y0) / (y1 - y0)) * ph;
    let _ = writeln!(
        svg,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#999\"/>\n\
<text x=\"{left}\" y=\"{}\">{x0}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{x1}</text>\n\
<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n\
<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{y1:.4}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{y0:.4}</text>",
        top + ph + 15.0,
        left + pw,
        top + ph + 15.0,
        left + pw / 2.0,
        top + ph + 32.0,
        escape(x_label),
        left - 4.0,
        top + 10.0,
        left - 4.0,
        top + ph
    );
    let mut names: Vec<&str> = Vec::new();
    for (name, points) in series {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
        let i = names.iter().position(|n| n == name).unwrap_or(0);
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            path.join(" ")
        );
    }
    for (i, name) in names.iter().enumerate() {
        let y = top + 14.0 * i as f64 + 10.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            left + pw + 10.0,
            y - 4.0,
            COLOURS[i % COLOURS.len()],
            left + pw + 25.0,
            y,
            escape(name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_exceeds_the_spread_only_when_the_ranges_do_not_overlap() {
        let s = |v: &[f64]| Spread::of(v).unwrap();
        let base = s(&[0.30, 0.34]);
        assert!(s(&[0.40, 0.42]).exceeds(&base));
        assert!(!s(&[0.33, 0.42]).exceeds(&base));
        // One seed has no spread: nothing is marked.
        assert!(!s(&[0.9]).exceeds(&base));
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn charts_draw_every_series() {
        let svg = line_chart(
            "t",
            "step",
            &[
                ("a".into(), vec![(1.0, 2.0), (2.0, 1.0)]),
                ("a".into(), vec![(1.0, 2.5), (2.0, 1.5)]),
                ("b<".into(), vec![(1.0, 3.0)]),
            ],
        );
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("b&lt;"));
        assert!(line_chart("t", "s", &[]).contains("no training logs"));
    }
}
