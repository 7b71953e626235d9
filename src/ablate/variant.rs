//! One variant: trained with the `train` stage, scored with the `eval`
//! stage, and its rows (or its error) written to the results.

use std::time::Instant;

use super::{
    grid::{Grid, Variant},
    report,
    results::{self, Row},
};
use crate::{
    eval::{self, EvalConfig, EvalSummary},
    train::{self, config::TrainConfig},
    ui::describe,
};

/// A results row of `variant`: one metric at `step`, or (`error`) why it
/// failed.
fn variant_row(
    grid: &Grid,
    variant: &Variant,
    (metric, value, step): (&str, Option<f64>, u64),
    error: Option<&str>,
    seconds: f64,
) -> Row {
    Row {
        grid: grid.name.clone(),
        variant: variant.id.clone(),
        axis: variant.axis.clone(),
        setting: variant.setting.clone(),
        level: variant.level.name().to_owned(),
        seed: variant.seed,
        train_name: variant.train_name.clone(),
        metric: metric.to_owned(),
        value,
        step,
        checkpoint: variant.eval.checkpoint.display().to_string(),
        recipe: serde_json::to_string(&variant.train).unwrap_or_default(),
        error: error.map(str::to_owned),
        seconds,
    }
}

/// The `error` row of a variant that failed.
pub(super) fn error_row(grid: &Grid, variant: &Variant, error: &str, seconds: f64) -> Row {
    variant_row(grid, variant, ("error", None, 0), Some(error), seconds)
}

/// Trains and evaluates one variant and writes its results file (its rows,
/// or its `error` row). Returns the line to print, or the error.
pub(super) fn run_variant(
    grid: &Grid,
    variant: &Variant,
    progress: bool,
) -> Result<(String, Option<u64>), String> {
    let start = Instant::now();
    let file = results::path(&grid.dir(), &variant.train_name);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        train_and_evaluate(variant, progress)
    }))
    .unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        Err(format!("crashed: {message}"))
    });
    let (rows, line) = match outcome {
        Ok((summary, evaluation)) => {
            let metrics = metrics(&summary, &evaluation);
            let line = format!(
                "{} seed {}: {} ({:.0} s)",
                variant.id,
                variant.seed,
                metrics
                    .iter()
                    .map(|(k, v)| format!("{k} {}", v.map_or("-".into(), |v| format!("{v:.4}"))))
                    .collect::<Vec<_>>()
                    .join(", "),
                start.elapsed().as_secs_f64()
            );
            let rows: Vec<Row> = metrics
                .into_iter()
                .map(|(k, v)| {
                    let seconds = start.elapsed().as_secs_f64();
                    variant_row(grid, variant, (&k, v, evaluation.step), None, seconds)
                })
                .collect();
            (rows, Ok((line, summary.resumed_from)))
        }
        Err(e) => (
            vec![error_row(grid, variant, &e, start.elapsed().as_secs_f64())],
            Err(e),
        ),
    };
    match results::write(&file, &rows) {
        Ok(()) => line,
        Err(w) => Err(match line {
            Ok(_) => format!("writing {}: {w}", file.display()),
            Err(e) => format!("{e} (and recording the failure: {w})"),
        }),
    }
}

fn train_and_evaluate(
    variant: &Variant,
    progress: bool,
) -> Result<(train::run::Summary, EvalSummary), String> {
    let train = TrainConfig {
        progress,
        ..variant.train.clone()
    };
    let summary = train::run(&train).map_err(|e| format!("training: {}", describe(&e)))?;
    let eval = EvalConfig {
        progress,
        ..variant.eval.clone()
    };
    let evaluation = eval::run(&eval).map_err(|e| format!("evaluating: {}", describe(&e)))?;
    Ok((summary, evaluation))
}

/// The metrics of one variant, in the results' order: the paper's three
/// (puzzle accuracy, action accuracy, Kendall's tau), then log-loss and the
/// rest. Puzzle and action accuracies are fractions.
fn metrics(summary: &train::run::Summary, e: &EvalSummary) -> Vec<(String, Option<f64>)> {
    let mut m: Vec<(String, Option<f64>)> = Vec::new();
    if let Some(p) = e.puzzles.first() {
        m.push(("puzzle_accuracy".into(), Some(p.accuracy)));
    }
    if let Some(s) = &e.metrics {
        m.push(("action_accuracy".into(), Some(s.action_accuracy)));
        m.push(("kendall_tau".into(), s.kendall_tau));
        m.push(("log_loss".into(), s.log_loss));
        m.push(("l2_win_prob".into(), s.l2_win_prob));
        m.push(("entropy".into(), s.entropy));
    }
    let player = format!("{}@{}", e.name, e.step);
    if let Some(r) = e.ratings.iter().find(|r| r.player == player) {
        m.push(("elo".into(), Some(r.elo)));
    }
    for g in &e.games {
        m.push((format!("score_vs_{}", g.opponent), Some(g.score)));
    }
    if let Some(t) = &summary.eval {
        m.push(("train_eval_log_loss".into(), Some(t.log_loss)));
        m.push(("marginal_log_loss".into(), Some(t.marginal_log_loss)));
    }
    // A run finished by an earlier invocation logs no step now: its last
    // logged loss.
    let last_logged = || {
        report::train_loss(&summary.out_dir)
            .last()
            .map(|&(_, loss)| loss)
    };
    m.push(("train_loss".into(), summary.last_loss.or_else(last_logged)));
    m
}
