//! The report of an evaluation: its summary (`eval.json`, the text
//! `chessbench eval` prints) and the files beside it in the report
//! directory:
//!
//! - `eval.json`: everything below, and what was skipped and why;
//! - `metrics.json` rows in `eval.json`, `calibration.csv`;
//! - `puzzles.csv` (per puzzle), `puzzles_by_rating.csv` (Figure 2);
//! - `games.pgn`, `games.csv`, `elo.csv`;
//! - `eval.md`: the headline numbers as Markdown (the plots are drawn by
//!   `notebooks/eval.ipynb`, which `make eval` executes next).
//!
//! Every file is written to a temporary name and renamed, and `eval.json`
//! marks the report whole: an earlier one is removed before the first file
//! is replaced and the new one written after the last, so a report with an
//! `eval.json` never mixes two evaluations, even after a crash.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

use super::{
    config::EvalConfig,
    elo::Rating,
    error::EvalError,
    metrics::StaticMetrics,
    puzzles::{PuzzleResult, PuzzleSummary},
    tournament::PlayedGame,
};
use crate::{
    chess::RecordSet,
    model::{DeviceKind, Precision, Weights},
    store::commit::{remove_file_if_exists, write_atomic},
    ui::Report,
};

/// Everything an evaluation found (`eval.json`).
#[derive(Debug, Clone, Serialize)]
pub struct EvalSummary {
    pub checkpoint: PathBuf,
    pub name: String,
    pub step: u64,
    pub policy: RecordSet,
    pub params: u64,
    pub weights: Weights,
    pub device: DeviceKind,
    pub precision: Precision,
    pub metrics: Option<StaticMetrics>,
    pub oracle: Option<StaticMetrics>,
    pub puzzles: Vec<PuzzleSummary>,
    pub games: Vec<MatchSummary>,
    pub ratings: Vec<Rating>,
    pub anchor: Option<String>,
    /// Parts not run, with the reason.
    pub skipped: Vec<String>,
    pub report: PathBuf,
    pub seconds: f64,
}

impl Report for EvalSummary {
    fn render(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let s = self;
        writeln!(
            out,
            "evaluated {} step {} ({:?}, {:.2}M parameters, {:?} {:?}) in {:.0} s",
            s.name,
            s.step,
            s.policy,
            s.params as f64 / 1e6,
            s.device,
            s.precision,
            s.seconds
        )?;
        let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"));
        for m in s.metrics.iter().chain(&s.oracle) {
            writeln!(
                out,
                "  {:<24} {} boards of {}: action accuracy {:.4}, Kendall tau {}, log-loss {}, L2 {}, entropy {} ({:.0} boards/s)",
                m.predictor,
                m.boards,
                m.split,
                m.action_accuracy,
                f(m.kendall_tau),
                f(m.log_loss),
                f(m.l2_win_prob),
                f(m.entropy),
                m.boards_per_s
            )?;
        }
        for p in &s.puzzles {
            writeln!(
                out,
                "  {:<24} puzzles: {}/{} solved ({:.1}%), {} boards in {:.0} s ({:.0} boards/s)",
                p.player,
                p.solved,
                p.puzzles,
                100.0 * p.accuracy,
                p.boards,
                p.seconds,
                p.boards as f64 / p.seconds.max(1e-9)
            )?;
        }
        for g in &s.games {
            writeln!(
                out,
                "  vs {:<21} +{} ={} -{} (score {:.3})",
                g.opponent, g.wins, g.draws, g.losses, g.score
            )?;
        }
        for r in &s.ratings {
            writeln!(out, "  Elo {:<20} {:>7.0} ± {:.0}", r.player, r.elo, r.ci95)?;
        }
        for x in &s.skipped {
            writeln!(out, "  skipped: {x}")?;
        }
        writeln!(out, "report: {}", s.report.join("eval.md").display())
    }
}

/// A model's results against one opponent.
#[derive(Debug, Clone, Serialize)]
pub struct MatchSummary {
    pub opponent: String,
    pub games: u64,
    pub wins: u64,
    pub draws: u64,
    pub losses: u64,
    pub score: f64,
}

fn write(path: &Path, text: &str) -> Result<(), EvalError> {
    Ok(write_atomic(path, text.as_bytes())?)
}

/// Writes the report files of `s` into `config.out`, `eval.json` last.
pub(super) fn write_report(
    config: &EvalConfig,
    s: &EvalSummary,
    puzzle_rows: &[(String, PuzzleResult)],
    games: &[PlayedGame],
) -> Result<(), EvalError> {
    let out = &config.out;
    let json = serde_json::to_string_pretty(s)?;
    // First: withdraw the marker of any earlier report, whose files the
    // ones below replace one at a time.
    let marker = out.join("eval.json");
    remove_file_if_exists(&marker)?;
    let mut cal = String::from("predictor,lo,hi,moves,mean_predicted,mean_stockfish\n");
    for m in s.metrics.iter().chain(&s.oracle) {
        for c in &m.calibration {
            let _ = writeln!(
                cal,
                "{},{},{},{},{},{}",
                m.predictor, c.lo, c.hi, c.moves, c.mean_predicted, c.mean_stockfish
            );
        }
    }
    write(&out.join("calibration.csv"), &cal)?;
    let mut pz = String::from("player,puzzle_id,rating,solved,moves_needed,moves_found\n");
    for (p, r) in puzzle_rows {
        let _ = writeln!(
            pz,
            "{p},{},{},{},{},{}",
            r.id,
            r.rating.map_or_else(String::new, |r| r.to_string()),
            r.solved,
            r.moves_needed,
            r.moves_found
        );
    }
    write(&out.join("puzzles.csv"), &pz)?;
    let mut by = String::from("player,lo,hi,puzzles,solved,accuracy\n");
    for p in &s.puzzles {
        for b in &p.by_rating {
            let _ = writeln!(
                by,
                "{},{},{},{},{},{}",
                p.player, b.lo, b.hi, b.puzzles, b.solved, b.accuracy
            );
        }
    }
    write(&out.join("puzzles_by_rating.csv"), &by)?;
    let pgn: String = games.iter().map(|g| g.pgn.as_str()).collect();
    write(&out.join("games.pgn"), &pgn)?;
    let mut gc = String::from("white,black,opening,result,termination,plies\n");
    for g in games {
        let _ = writeln!(
            gc,
            "{},{},\"{}\",{},{},{}",
            g.white,
            g.black,
            g.opening.replace('"', "'"),
            g.result,
            g.termination,
            g.plies
        );
    }
    write(&out.join("games.csv"), &gc)?;
    let mut ec = String::from("player,elo,ci95,games,score\n");
    for r in &s.ratings {
        let _ = writeln!(
            ec,
            "{},{:.1},{:.1},{},{}",
            r.player, r.elo, r.ci95, r.games, r.score
        );
    }
    write(&out.join("elo.csv"), &ec)?;
    write(&out.join("eval.md"), &markdown(s))?;
    // Last: eval.json marks the report complete (make's target).
    write(&marker, &json)
}

/// The report's Markdown.
pub(crate) fn markdown(s: &EvalSummary) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# Evaluation of {} (step {})\n", s.name, s.step);
    let _ = writeln!(
        m,
        "Checkpoint `{}` ({:?} weights), policy {:?}, {} parameters.\n",
        s.checkpoint.display(),
        s.weights,
        s.policy,
        s.params
    );
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"));
    if s.metrics.is_some() || s.oracle.is_some() {
        let _ = writeln!(m, "## Static metrics\n");
        let _ = writeln!(
            m,
            "| predictor | split | boards | action accuracy | Kendall tau | log-loss | L2 win% | entropy | boards/s |"
        );
        let _ = writeln!(m, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for x in s.metrics.iter().chain(&s.oracle) {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {:.4} | {} | {} | {} | {} | {:.1} |",
                x.predictor,
                x.split,
                x.boards,
                x.action_accuracy,
                f(x.kendall_tau),
                f(x.log_loss),
                f(x.l2_win_prob),
                f(x.entropy),
                x.boards_per_s
            );
        }
        let _ = writeln!(m, "\n![calibration](calibration.png)\n");
    }
    if !s.puzzles.is_empty() {
        let _ = writeln!(m, "## Puzzles\n");
        let _ = writeln!(m, "| player | puzzles | solved | accuracy | mean rating |");
        let _ = writeln!(m, "|---|---:|---:|---:|---:|");
        for p in &s.puzzles {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {:.3} | {} |",
                p.player,
                p.puzzles,
                p.solved,
                p.accuracy,
                p.mean_rating
                    .map_or_else(|| "-".into(), |r| format!("{r:.0}"))
            );
        }
        let _ = writeln!(m, "\n![puzzles by rating](puzzles_by_rating.png)\n");
    }
    if !s.games.is_empty() {
        let _ = writeln!(m, "## Games\n");
        let _ = writeln!(m, "| opponent | games | +  | = | - | score |");
        let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|");
        for g in &s.games {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {:.3} |",
                g.opponent, g.games, g.wins, g.draws, g.losses, g.score
            );
        }
        let _ = writeln!(
            m,
            "\nElo (Bradley-Terry maximum likelihood, 2 virtual draws per pairing, anchored to {} ):\n",
            s.anchor.as_deref().unwrap_or("-")
        );
        let _ = writeln!(m, "| player | Elo | 95% CI | games | score |");
        let _ = writeln!(m, "|---|---:|---:|---:|---:|");
        for r in &s.ratings {
            let _ = writeln!(
                m,
                "| {} | {:.0} | ±{:.0} | {} | {} |",
                r.player, r.elo, r.ci95, r.games, r.score
            );
        }
        m.push('\n');
    }
    let _ = writeln!(m, "## Training\n\n![training curve](training_curve.png)\n");
    if !s.skipped.is_empty() {
        let _ = writeln!(m, "## Skipped\n");
        for x in &s.skipped {
            let _ = writeln!(m, "- {x}");
        }
        m.push('\n');
    }
    let _ = writeln!(m, "Evaluation took {:.0} s.", s.seconds);
    m
}
