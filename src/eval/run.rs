//! The `[eval]` recipe and `chessbench eval`: static metrics, puzzles and
//! games of one checkpoint, written to a report directory:
//!
//! - `eval.json`: everything below, and what was skipped and why;
//! - `metrics.json` rows in `eval.json`, `calibration.csv`;
//! - `puzzles.csv` (per puzzle), `puzzles_by_rating.csv` (Figure 2);
//! - `games.pgn`, `games.csv`, `elo.csv`;
//! - `eval.md`: the headline numbers as Markdown (the plots are drawn by
//!   `notebooks/eval.ipynb`, which `make eval` executes next).
//!
//! Every file is written to a temporary name and renamed.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use super::{
    EvalError,
    elo::{self, Rating},
    metrics::{self, StaticMetrics},
    model::{Model, Weights},
    policy::{Decisive, EnginePlayer, NeuralPlayer, Player, PolicyOptions},
    puzzles::{self, PuzzleResult, PuzzleSummary},
    tournament::{self, Opponent, PlayedGame},
};
use crate::{
    annotate::{board::SearchSettings, config::Mode},
    pipeline::{self, PipelineFileError},
    sql::Session,
    store::commit::write_atomic,
    train::config::DeviceKind,
    uci::{EngineConfig, engine::default_engine_path},
};

/// The `[eval]` table of a pipeline file; every field optional (CLI flags
/// override it). Relative paths are relative to the file's directory.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalOptions {
    /// The annotated run whose split is scored.
    pub run: Option<PathBuf>,
    /// A checkpoint directory or a training run (its newest checkpoint).
    pub checkpoint: Option<PathBuf>,
    pub weights: Option<String>,
    pub split: Option<String>,
    /// Boards of the split scored by the static metrics (0: none).
    pub boards: Option<usize>,
    /// Stockfish as a predictor on the same boards (`stockfish:nodes=N`).
    pub oracle: Option<String>,
    pub puzzles: Option<PathBuf>,
    pub max_puzzles: Option<usize>,
    /// Stockfish on the same puzzles, for comparison.
    pub puzzle_engine: Option<String>,
    pub openings: Option<PathBuf>,
    /// Openings per opponent (each played with both colours).
    pub openings_count: Option<usize>,
    pub opponents: Option<Vec<String>>,
    /// Game length cap in plies (0: none, the default).
    pub max_plies: Option<usize>,
    /// Stockfish adjudicating games after every move
    /// (`stockfish:movetime=10`, searchless_chess's, by default; `none`).
    pub adjudicate: Option<String>,
    /// The adjudication threshold in centipawns (default 1300).
    pub adjudicate_cp: Option<i32>,
    /// The player whose rating is fixed (default: the first opponent).
    pub anchor: Option<String>,
    pub anchor_elo: Option<f64>,
    pub repetition_draw: Option<bool>,
    /// Stockfish picks among the top five when all exceed 99%
    /// (`stockfish:nodes=N`).
    pub decisive: Option<String>,
    pub engine: Option<PathBuf>,
    pub device: Option<DeviceKind>,
    /// The report directory (default RUN/report).
    pub out: Option<PathBuf>,
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct PipelineFile {
    eval: Option<EvalOptions>,
}

/// Parts of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    Metrics,
    Puzzles,
    Games,
}

/// A validated evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct EvalConfig {
    pub run: PathBuf,
    pub checkpoint: PathBuf,
    pub weights: Weights,
    pub split: String,
    pub boards: usize,
    pub oracle: Option<Opponent>,
    pub puzzles: Option<PathBuf>,
    /// The puzzles path came from the command line: a missing file is an
    /// error (from a config: skipped with the reason).
    pub puzzles_required: bool,
    pub max_puzzles: usize,
    pub puzzle_engine: Option<Opponent>,
    pub openings: Option<PathBuf>,
    pub openings_count: usize,
    pub opponents: Vec<Opponent>,
    pub max_plies: Option<usize>,
    pub adjudicate: Option<Opponent>,
    pub adjudicate_cp: i32,
    pub anchor: Option<String>,
    pub anchor_elo: f64,
    pub repetition_draw: bool,
    pub decisive: Option<Opponent>,
    pub engine: PathBuf,
    pub device: DeviceKind,
    pub out: PathBuf,
    pub parts: Vec<Part>,
}

impl EvalOptions {
    /// The `[eval]` table of a pipeline file (empty if it has none).
    pub fn from_pipeline_file(path: &Path) -> Result<EvalOptions, EvalError> {
        let (file, base): (PipelineFile, _) = pipeline::read(path).map_err(|e| match e {
            PipelineFileError::Read(source) => EvalError::Io {
                path: path.to_owned(),
                source,
            },
            PipelineFileError::Toml(m) => EvalError::Config(format!("{}: {m}", path.display())),
        })?;
        let mut o = file.eval.unwrap_or_default();
        o.base_dir = Some(base);
        Ok(o)
    }

    /// `self` overridden by what `cli` sets (CLI paths are relative to the
    /// working directory).
    pub fn merge(self, cli: EvalOptions) -> EvalOptions {
        let base = self.base_dir.clone();
        let rebase = |p: Option<PathBuf>| match (&base, p) {
            (Some(b), Some(p)) if p.is_relative() => Some(b.join(p)),
            (_, p) => p,
        };
        EvalOptions {
            run: cli.run.or(rebase(self.run)),
            checkpoint: cli.checkpoint.or(rebase(self.checkpoint)),
            weights: cli.weights.or(self.weights),
            split: cli.split.or(self.split),
            boards: cli.boards.or(self.boards),
            oracle: cli.oracle.or(self.oracle),
            puzzles: cli.puzzles.or(rebase(self.puzzles)),
            max_puzzles: cli.max_puzzles.or(self.max_puzzles),
            puzzle_engine: cli.puzzle_engine.or(self.puzzle_engine),
            openings: cli.openings.or(rebase(self.openings)),
            openings_count: cli.openings_count.or(self.openings_count),
            opponents: cli.opponents.or(self.opponents),
            max_plies: cli.max_plies.or(self.max_plies),
            adjudicate: cli.adjudicate.or(self.adjudicate),
            adjudicate_cp: cli.adjudicate_cp.or(self.adjudicate_cp),
            anchor: cli.anchor.or(self.anchor),
            anchor_elo: cli.anchor_elo.or(self.anchor_elo),
            repetition_draw: cli.repetition_draw.or(self.repetition_draw),
            decisive: cli.decisive.or(self.decisive),
            engine: cli.engine.or(rebase(self.engine)),
            device: cli.device.or(self.device),
            out: cli.out.or(rebase(self.out)),
            base_dir: None,
        }
    }

    /// Validates and fills defaults; `puzzles_from_cli` makes a missing
    /// puzzle file an error.
    pub fn resolve(
        self,
        parts: Vec<Part>,
        puzzles_from_cli: bool,
    ) -> Result<EvalConfig, EvalError> {
        let spec = |s: Option<String>| -> Result<Option<Opponent>, EvalError> {
            s.map(|s| Opponent::parse(&s).map_err(EvalError::Config))
                .transpose()
        };
        let run = self.run.ok_or_else(|| {
            EvalError::Config("no run: pass RUN or set [eval] run in the pipeline file".into())
        })?;
        let checkpoint = self.checkpoint.ok_or_else(|| {
            EvalError::Config(
                "no checkpoint: pass --checkpoint RUN/train/NAME or set [eval] checkpoint".into(),
            )
        })?;
        let weights = match self.weights.as_deref() {
            None | Some("ema") => Weights::Ema,
            Some("raw") => Weights::Raw,
            Some(w) => {
                return Err(EvalError::Config(format!(
                    "weights {w:?}: expected ema or raw"
                )));
            }
        };
        let opponents = self
            .opponents
            .unwrap_or_default()
            .iter()
            .map(|s| Opponent::parse(s).map_err(EvalError::Config))
            .collect::<Result<Vec<_>, _>>()?;
        let decisive = spec(self.decisive)?;
        if matches!(decisive, Some(Opponent::Checkpoint(_))) {
            return Err(EvalError::Config(
                "decisive: expected a stockfish:... spec".into(),
            ));
        }
        let adjudicate = match self.adjudicate.as_deref() {
            Some("none") => None,
            Some(s) => match Opponent::parse(s).map_err(EvalError::Config)? {
                Opponent::Checkpoint(_) => {
                    return Err(EvalError::Config(
                        "adjudicate: expected a stockfish:... spec or none".into(),
                    ));
                }
                o => Some(o),
            },
            None => Some(Opponent::Stockfish {
                limit: crate::uci::Limit::MoveTimeMs(10),
                skill: None,
            }),
        };
        let adjudicate_cp = self.adjudicate_cp.unwrap_or(tournament::ADJUDICATION_CP);
        if adjudicate_cp <= 0 {
            return Err(EvalError::Config(format!(
                "adjudicate_cp {adjudicate_cp}: expected a positive number of centipawns"
            )));
        }
        Ok(EvalConfig {
            out: self.out.unwrap_or_else(|| run.join("report")),
            run,
            checkpoint,
            weights,
            split: self.split.unwrap_or_else(|| "test".into()),
            boards: self.boards.unwrap_or(1000),
            oracle: spec(self.oracle)?,
            puzzles: self.puzzles,
            puzzles_required: puzzles_from_cli,
            max_puzzles: self.max_puzzles.unwrap_or(200),
            puzzle_engine: spec(self.puzzle_engine)?,
            openings: self.openings,
            openings_count: self.openings_count.unwrap_or(4),
            opponents,
            max_plies: self.max_plies.filter(|&n| n > 0),
            adjudicate,
            adjudicate_cp,
            anchor: self.anchor,
            anchor_elo: self.anchor_elo.unwrap_or(0.0),
            repetition_draw: self.repetition_draw.unwrap_or(true),
            decisive,
            engine: self.engine.unwrap_or_else(default_engine_path),
            device: self.device.unwrap_or(DeviceKind::Cpu),
            parts: if parts.is_empty() {
                vec![Part::Metrics, Part::Puzzles, Part::Games]
            } else {
                parts
            },
        })
    }
}

/// Everything an evaluation found (`eval.json`).
#[derive(Debug, Clone, Serialize)]
pub struct EvalSummary {
    pub checkpoint: PathBuf,
    pub name: String,
    pub step: u64,
    pub policy: crate::train::data::Policy,
    pub params: u64,
    pub weights: Weights,
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

fn bar(enabled: bool, len: u64, what: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(4));
    b.set_style(
        ProgressStyle::with_template(&format!(
            "{what:<8} {{bar:30}} {{pos}}/{{len}} {{msg}} [{{elapsed_precise}}, eta {{eta}}]"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}

fn engine_config(config: &EvalConfig, skill: Option<i32>) -> EngineConfig {
    let mut e = EngineConfig {
        path: config.engine.clone(),
        ..EngineConfig::default()
    };
    if let Some(s) = skill {
        e.options.push(("Skill Level".into(), s.to_string()));
    }
    e
}

fn policy_options(config: &EvalConfig) -> PolicyOptions {
    PolicyOptions {
        repetition_draw: config.repetition_draw,
        decisive: match &config.decisive {
            Some(Opponent::Stockfish { limit, skill }) => Some(Decisive {
                engine: engine_config(config, *skill),
                limit: *limit,
            }),
            _ => None,
        },
    }
}

/// A player for an opponent spec.
fn opponent_player(config: &EvalConfig, o: &Opponent) -> Result<Box<dyn Player>, EvalError> {
    Ok(match o {
        Opponent::Stockfish { limit, skill } => Box::new(EnginePlayer::start(
            &engine_config(config, *skill),
            *limit,
            o.name(),
        )?),
        Opponent::Checkpoint(p) => {
            let model = Model::load(p, config.weights, config.device)?;
            let name = model.label();
            Box::new(NeuralPlayer::new(model, policy_options(config), Some(name)))
        }
    })
}

fn write(path: &Path, text: &str) -> Result<(), EvalError> {
    write_atomic(path, text.as_bytes()).map_err(|e| EvalError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// Runs the evaluation `config` describes and writes the report.
pub fn evaluate(config: &EvalConfig, progress: bool) -> Result<EvalSummary, EvalError> {
    let started = Instant::now();
    crate::train::run::tune_allocator();
    std::fs::create_dir_all(&config.out).map_err(|source| EvalError::Io {
        path: config.out.clone(),
        source,
    })?;
    let model = Model::load(&config.checkpoint, config.weights, config.device)?;
    let mut player = NeuralPlayer::new(model, policy_options(config), None);
    let name = player.name().to_owned();
    let mut skipped = Vec::new();
    let mut summary = EvalSummary {
        checkpoint: std::fs::canonicalize(&player.model.checkpoint)
            .unwrap_or_else(|_| player.model.checkpoint.clone()),
        name: player.model.state.config.name.clone(),
        step: player.model.state.step,
        policy: player.model.policy(),
        params: player.model.state.shape.num_params(),
        weights: config.weights,
        metrics: None,
        oracle: None,
        puzzles: Vec::new(),
        games: Vec::new(),
        ratings: Vec::new(),
        anchor: None,
        skipped: Vec::new(),
        report: config.out.clone(),
        seconds: 0.0,
    };

    // --- Static metrics -----------------------------------------------------
    if config.parts.contains(&Part::Metrics) && config.boards > 0 {
        let boards = {
            let session = Session::open(&config.run, &[])?;
            metrics::read_labelled_boards(&session, &config.split, config.boards)?
        };
        if boards.is_empty() {
            skipped.push(format!(
                "metrics: split {:?} of {} has no annotated boards",
                config.split,
                config.run.display()
            ));
        } else {
            let b = bar(progress, boards.len() as u64, "metrics");
            let m =
                metrics::score_model(&mut player, &boards, &config.split, |i| b.set_position(i))?;
            b.finish_and_clear();
            summary.metrics = Some(m);
            if let Some(Opponent::Stockfish { limit, skill }) = &config.oracle {
                let mut engine = crate::uci::Engine::start(&engine_config(config, *skill))
                    .map_err(|e| EvalError::engine("starting the oracle", e))?;
                let settings = SearchSettings {
                    mode: Mode::PerMove,
                    limit: *limit,
                    timeout: Duration::from_secs(60),
                    new_game: true,
                };
                let b = bar(progress, boards.len() as u64, "oracle");
                let name = config
                    .oracle
                    .as_ref()
                    .map(Opponent::name)
                    .unwrap_or_default();
                let m = metrics::score_stockfish(
                    &mut engine,
                    &settings,
                    name,
                    &boards,
                    &config.split,
                    |i| b.set_position(i),
                )?;
                b.finish_and_clear();
                engine.quit();
                summary.oracle = Some(m);
            }
        }
    }

    // --- Puzzles --------------------------------------------------------------
    let mut puzzle_rows: Vec<(String, PuzzleResult)> = Vec::new();
    if config.parts.contains(&Part::Puzzles) {
        match &config.puzzles {
            None => skipped.push("puzzles: no puzzle file configured (--puzzles)".into()),
            Some(p) if !p.is_file() && !config.puzzles_required => skipped.push(format!(
                "puzzles: {} not found (the Lichess puzzle CSV; see README)",
                p.display()
            )),
            Some(p) => {
                let list = puzzles::read_puzzles(p, Some(config.max_puzzles))?;
                let mut players: Vec<Box<dyn Player>> = Vec::new();
                if let Some(o) = &config.puzzle_engine {
                    players.push(opponent_player(config, o)?);
                }
                let mut run_one = |pl: &mut dyn Player| -> Result<PuzzleSummary, EvalError> {
                    let t = Instant::now();
                    let b = bar(progress, list.len() as u64, "puzzles");
                    b.set_message(pl.name().to_owned());
                    let mut results = Vec::with_capacity(list.len());
                    for (i, pz) in list.iter().enumerate() {
                        results.push(puzzles::solve(pz, pl)?);
                        b.set_position(i as u64 + 1);
                    }
                    b.finish_and_clear();
                    puzzle_rows.extend(results.iter().map(|r| (pl.name().to_owned(), r.clone())));
                    Ok(puzzles::summarise(
                        pl.name(),
                        &results,
                        t.elapsed().as_secs_f64(),
                    ))
                };
                summary.puzzles.push(run_one(&mut player)?);
                for pl in &mut players {
                    summary.puzzles.push(run_one(pl.as_mut())?);
                }
            }
        }
    }

    // --- Games and Elo -------------------------------------------------------------
    let mut games: Vec<PlayedGame> = Vec::new();
    if config.parts.contains(&Part::Games) && !config.opponents.is_empty() {
        let openings = match &config.openings {
            Some(p) if !p.is_file() => {
                skipped.push(format!(
                    "openings: {} not found; used the built-in openings",
                    p.display()
                ));
                tournament::read_openings(None, config.openings_count)?
            }
            p => tournament::read_openings(p.as_deref(), config.openings_count)?,
        };
        let total = (openings.len() * 2 * config.opponents.len()) as u64;
        let b = bar(progress, total, "games");
        let mut adjudicator = match &config.adjudicate {
            Some(Opponent::Stockfish { limit, skill }) => Some(tournament::Adjudicator::start(
                &engine_config(config, *skill),
                *limit,
                config.adjudicate_cp,
            )?),
            _ => None,
        };
        for o in &config.opponents {
            let mut opp = opponent_player(config, o)?;
            let (mut w, mut d, mut l) = (0u64, 0u64, 0u64);
            for (i, opening) in openings.iter().enumerate() {
                for model_white in [true, false] {
                    let round = format!("{}.{}", i + 1, if model_white { 1 } else { 2 });
                    let g = if model_white {
                        tournament::play_game(
                            &mut player,
                            opp.as_mut(),
                            opening,
                            config.max_plies,
                            adjudicator.as_mut(),
                            &round,
                        )?
                    } else {
                        tournament::play_game(
                            opp.as_mut(),
                            &mut player,
                            opening,
                            config.max_plies,
                            adjudicator.as_mut(),
                            &round,
                        )?
                    };
                    let s = g.record().white_score;
                    let model_score = if model_white { s } else { 1.0 - s };
                    match model_score {
                        x if x > 0.75 => w += 1,
                        x if x < 0.25 => l += 1,
                        _ => d += 1,
                    }
                    b.inc(1);
                    b.set_message(format!("{name} vs {}: +{w} ={d} -{l}", opp.name()));
                    games.push(g);
                }
            }
            let n = w + d + l;
            summary.games.push(MatchSummary {
                opponent: opp.name().to_owned(),
                games: n,
                wins: w,
                draws: d,
                losses: l,
                score: (w as f64 + 0.5 * d as f64) / n.max(1) as f64,
            });
        }
        b.finish_and_clear();
        let records: Vec<elo::GameRecord> = games.iter().map(PlayedGame::record).collect();
        let anchor = config
            .anchor
            .clone()
            .unwrap_or_else(|| config.opponents[0].name());
        summary.ratings = elo::fit(&records, &anchor, config.anchor_elo, 2.0)?;
        summary.anchor = Some(anchor);
    }
    summary.skipped = skipped;
    summary.seconds = started.elapsed().as_secs_f64();
    write_report(config, &summary, &puzzle_rows, &games)?;
    Ok(summary)
}

fn write_report(
    config: &EvalConfig,
    s: &EvalSummary,
    puzzle_rows: &[(String, PuzzleResult)],
    games: &[PlayedGame],
) -> Result<(), EvalError> {
    let out = &config.out;
    let json = serde_json::to_string_pretty(s).map_err(|e| EvalError::Config(e.to_string()))?;
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
    write(&out.join("eval.json"), &json)
}

/// The report's Markdown.
pub fn markdown(s: &EvalSummary) -> String {
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
