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
//! Every file is written to a temporary name and renamed, and `eval.json`
//! marks the report whole: an earlier one is removed before the first file
//! is replaced and the new one written after the last, so a report with an
//! `eval.json` never mixes two evaluations, even after a crash.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    str::FromStr,
    time::{Duration, Instant},
};

use clap::{ArgAction, Args, ValueHint};
use indicatif::ProgressBar;
use serde::{Deserialize, Serialize};

use super::{
    elo::{self, Rating},
    error::EvalError,
    metrics::{self, StaticMetrics},
    policy::{Decisive, EnginePlayer, NeuralPlayer, Player, PolicyOptions},
    puzzles::{self, PuzzleResult, PuzzleSummary},
    tournament::{self, Opponent, PlayedGame, SpecError},
    trained::Model,
};
use crate::{
    chess::RecordSet,
    duckdb_session::Session,
    model::{DeviceKind, Precision, Weights, tune_allocator},
    options::{Budget, Compute, Env, RunArg},
    store::commit::{remove_file_if_exists, write_atomic},
    uci_client::{
        EngineConfig,
        oracle::{Mode, SearchSettings},
    },
    ui::Report,
};

/// `chessbench eval`'s options: the command line and the `[eval]` table of a
/// pipeline file (see [`crate::options`]).
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct EvalOptions {
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArg,
    /// A checkpoint directory, or a training run (its newest checkpoint).
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
    pub checkpoint: Option<PathBuf>,
    /// Which parameters to evaluate: their EMA (what training evaluates) or
    /// the raw ones.
    #[arg(long, value_enum, default_value_t = Weights::Ema)]
    pub weights: Weights,
    #[command(flatten)]
    #[serde(flatten)]
    pub compute: Compute,
    #[command(flatten)]
    #[serde(flatten)]
    pub budget: Budget,
    /// Run only these parts (repeatable) [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Part>,
    /// The report directory [default: RUN/report].
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
    pub out: Option<PathBuf>,
    /// Split scored by the static metrics.
    #[arg(long, default_value = "test", help_heading = "Static metrics")]
    pub split: String,
    /// Boards scored by the static metrics (0: skip).
    #[arg(long, value_name = "N", default_value_t = 1000, help_heading = "Static metrics")]
    pub boards: usize,
    /// Also score Stockfish as a predictor, e.g. stockfish:nodes=200.
    #[arg(long, value_name = "SPEC", help_heading = "Static metrics")]
    #[serde(with = "crate::options::as_text_opt")]
    pub oracle: Option<Opponent>,
    /// Puzzle CSV (Lichess or ChessBench format).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "Puzzles")]
    pub puzzles: Option<PathBuf>,
    /// Puzzles solved (the first N).
    #[arg(long, value_name = "N", default_value_t = 200, help_heading = "Puzzles")]
    pub max_puzzles: usize,
    /// Another player on the same puzzles, e.g. stockfish:nodes=1000 or
    /// checkpoint:PATH.
    #[arg(long, value_name = "SPEC", value_hint = ValueHint::AnyPath, help_heading = "Puzzles")]
    #[serde(with = "crate::options::as_text_opt")]
    pub puzzle_engine: Option<Opponent>,
    /// An opponent (repeatable): stockfish:nodes=N, stockfish:skill=S[,depth=D],
    /// checkpoint:PATH (relative to the file that names it, like any path).
    #[arg(long = "opponent", value_name = "SPEC", value_hint = ValueHint::AnyPath, help_heading = "Games")]
    #[serde(with = "crate::options::as_text_vec")]
    pub opponents: Vec<Opponent>,
    /// Openings: a PGN file (main lines) or the Lichess openings TSV
    /// [default: a built-in list].
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "Games")]
    pub openings: Option<PathBuf>,
    /// Openings per opponent, each played with both colours.
    #[arg(long, value_name = "N", default_value_t = 4, help_heading = "Games")]
    pub openings_count: usize,
    /// Game length cap in plies; longer games are adjudicated draws (0: no
    /// cap, as searchless_chess).
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = "Games")]
    pub max_plies: usize,
    /// Stockfish adjudicating games after every move: a mate score or more
    /// than --adjudicate-cp ends the game as a win (searchless_chess's
    /// tournament: 10 ms); `none` to play to the end.
    #[arg(
        long,
        value_name = "SPEC",
        default_value = "stockfish:movetime_ms=10",
        help_heading = "Games"
    )]
    #[serde(with = "crate::options::as_text")]
    pub adjudicate: Adjudication,
    /// The adjudication threshold in centipawns.
    #[arg(long, value_name = "CP", default_value_t = tournament::ADJUDICATION_CP, help_heading = "Games")]
    pub adjudicate_cp: i32,
    /// Games played at once against each opponent: the model scores their
    /// boards together, one batch a move. Each game has its own Stockfish
    /// (opponent, adjudicator), so this many of each run at a time, each
    /// with its own copy of Stockfish's network (about 130 MB a process:
    /// 16 games with adjudication hold about 4 GB of engines).
    #[arg(long, value_name = "N", default_value_t = 16, help_heading = "Games")]
    pub games_at_once: usize,
    /// The player whose Elo is fixed [default: the first opponent].
    #[arg(long, help_heading = "Games")]
    pub anchor: Option<String>,
    /// The anchor's Elo.
    #[arg(long, default_value_t = 0.0, help_heading = "Games")]
    pub anchor_elo: f64,
    /// Score moves that allow a threefold repetition as draws (the paper's
    /// workaround); --no-repetition-draw turns it off.
    #[arg(long = "no-repetition-draw", action = ArgAction::SetFalse, help_heading = "Policy")]
    pub repetition_draw: bool,
    /// Let Stockfish pick among the top five moves when all exceed 99%, e.g.
    /// stockfish:nodes=1000.
    #[arg(long, value_name = "SPEC", help_heading = "Policy")]
    #[serde(with = "crate::options::as_text_opt")]
    pub decisive: Option<Opponent>,
    /// The UCI engine (Stockfish; a name without '/' is looked up on PATH;
    /// a `stockfish` missing there is /usr/games/stockfish, Debian's).
    #[arg(
        long,
        value_name = "PATH",
        default_value = crate::uci_client::engine::DEFAULT_ENGINE,
        value_hint = ValueHint::ExecutablePath
    , help_heading = "Policy")]
    pub engine: PathBuf,
}

crate::options::stage!(EvalOptions, "eval");

/// Who adjudicates games: a Stockfish spec, or `none`.
#[derive(Debug, Clone, PartialEq)]
pub struct Adjudication(pub Option<Opponent>);

impl FromStr for Adjudication {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Adjudication, SpecError> {
        Ok(Adjudication(match s {
            "none" => None,
            spec => Some(spec.parse()?),
        }))
    }
}

impl std::fmt::Display for Adjudication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("none"),
            Some(o) => o.fmt(f),
        }
    }
}

/// Parts of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
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
    pub max_puzzles: usize,
    pub puzzle_engine: Option<Opponent>,
    pub openings: Option<PathBuf>,
    pub openings_count: usize,
    pub opponents: Vec<Opponent>,
    pub max_plies: Option<usize>,
    pub adjudicate: Option<Opponent>,
    pub adjudicate_cp: i32,
    pub games_at_once: usize,
    pub anchor: Option<String>,
    pub anchor_elo: f64,
    pub repetition_draw: bool,
    pub decisive: Option<Opponent>,
    pub engine: PathBuf,
    pub device: DeviceKind,
    pub precision: Precision,
    /// The host memory budget, bytes: the model's batches
    /// ([`Model::with_memory_limit`]) and the DuckDB session that reads
    /// the split's labelled boards before any is scored.
    pub memory_limit: u64,
    pub out: PathBuf,
    pub parts: Vec<Part>,
    /// Draw progress bars (from the invocation, not part of the report).
    #[serde(skip)]
    pub progress: bool,
}

impl EvalOptions {
    /// Validates and fills the defaults that depend on other options;
    /// `env` gives the progress bars.
    pub fn resolve(&self, env: &Env) -> Result<EvalConfig, EvalError> {
        let run = self.run.run.clone().ok_or(EvalError::NoRun)?;
        let checkpoint = self
            .checkpoint
            .clone()
            .ok_or(EvalError::NoCheckpointGiven)?;
        let engine_only = |o: &Option<Opponent>, option| -> Result<Option<Opponent>, EvalError> {
            match o {
                Some(o) => {
                    o.clone().engine(option)?;
                    Ok(Some(o.clone()))
                }
                None => Ok(None),
            }
        };
        if self.adjudicate_cp <= 0 {
            return Err(EvalError::AdjudicateCp(self.adjudicate_cp));
        }
        Ok(EvalConfig {
            out: self.out.clone().unwrap_or_else(|| run.join("report")),
            run,
            checkpoint,
            weights: self.weights,
            split: self.split.clone(),
            boards: self.boards,
            oracle: engine_only(&self.oracle, "oracle")?,
            puzzles: self.puzzles.clone(),
            max_puzzles: self.max_puzzles,
            puzzle_engine: self.puzzle_engine.clone(),
            openings: self.openings.clone(),
            openings_count: self.openings_count,
            opponents: self.opponents.clone(),
            max_plies: (self.max_plies > 0).then_some(self.max_plies),
            adjudicate: engine_only(&self.adjudicate.0, "adjudicate")?,
            adjudicate_cp: self.adjudicate_cp,
            games_at_once: self.games_at_once.max(1),
            anchor: self.anchor.clone(),
            anchor_elo: self.anchor_elo,
            repetition_draw: self.repetition_draw,
            decisive: engine_only(&self.decisive, "decisive")?,
            engine: self.engine.clone(),
            device: self.compute.device,
            precision: self.compute.precision,
            memory_limit: self.budget.bytes(),
            parts: if self.only.is_empty() {
                vec![Part::Metrics, Part::Puzzles, Part::Games]
            } else {
                self.only.clone()
            },
            progress: env.progress,
        })
    }
}

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

fn bar(enabled: bool, len: u64, what: &str) -> ProgressBar {
    crate::ui::bar(
        enabled,
        Some(len),
        &format!("{what:<8} {{bar:30}} {{pos}}/{{len}} {{msg}} [{{elapsed_precise}}, eta {{eta}}]"),
    )
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
            let model = Model::load(p, config.weights, config.device)?
                .with_precision(config.precision)?
                .with_memory_limit(config.memory_limit);
            let name = model.label();
            Box::new(NeuralPlayer::new(model, policy_options(config), Some(name)))
        }
    })
}

fn write(path: &Path, text: &str) -> Result<(), EvalError> {
    Ok(write_atomic(path, text.as_bytes())?)
}

/// Runs the evaluation `config` describes and writes the report.
pub fn run(config: &EvalConfig) -> Result<EvalSummary, EvalError> {
    let started = Instant::now();
    let progress = config.progress;
    tune_allocator();
    let model = Model::load(&config.checkpoint, config.weights, config.device)?
        .with_precision(config.precision)?
        .with_memory_limit(config.memory_limit);
    // Only once the checkpoint loads: a wrong one leaves no report behind.
    std::fs::create_dir_all(&config.out).map_err(|source| EvalError::Io {
        path: config.out.clone(),
        source,
    })?;
    let mut player = NeuralPlayer::new(model, policy_options(config), None);
    let mut summary = EvalSummary {
        checkpoint: std::fs::canonicalize(&player.model.checkpoint)
            .unwrap_or_else(|_| player.model.checkpoint.clone()),
        name: player.model.state.config.name.clone(),
        step: player.model.state.step,
        policy: player.model.policy(),
        params: player.model.state.shape.num_params(),
        weights: config.weights,
        device: config.device,
        precision: config.precision,
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

    if config.parts.contains(&Part::Metrics) && config.boards > 0 {
        static_metrics(config, &mut player, progress, &mut summary)?;
    }
    let puzzle_rows = if config.parts.contains(&Part::Puzzles) {
        solve_puzzles(config, &mut player, progress, &mut summary)?
    } else {
        Vec::new()
    };
    let games = if config.parts.contains(&Part::Games) && !config.opponents.is_empty() {
        play_matches(config, &mut player, progress, &mut summary)?
    } else {
        Vec::new()
    };
    summary.seconds = started.elapsed().as_secs_f64();
    write_report(config, &summary, &puzzle_rows, &games)?;
    Ok(summary)
}

/// The static metrics on `config.boards` annotated boards of the split
/// (action accuracy, Kendall tau, log-loss, ...), and the oracle's on the
/// same boards when one is configured.
fn static_metrics(
    config: &EvalConfig,
    player: &mut NeuralPlayer,
    progress: bool,
    summary: &mut EvalSummary,
) -> Result<(), EvalError> {
    let boards = {
        let session = Session::open(&config.run, &[], config.memory_limit)?;
        metrics::read_labelled_boards(&session, &config.split, config.boards)?
    };
    if boards.is_empty() {
        summary.skipped.push(format!(
            "metrics: split {:?} of {} has no annotated boards",
            config.split,
            config.run.display()
        ));
    } else {
        let b = bar(progress, boards.len() as u64, "metrics");
        let m = metrics::score_model(player, &boards, &config.split, |i| b.set_position(i))?;
        b.finish_and_clear();
        summary.metrics = Some(m);
        if let Some(Opponent::Stockfish { limit, skill }) = &config.oracle {
            let mut engine = crate::uci_client::Engine::start(&engine_config(config, *skill))
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
    Ok(())
}

/// The puzzles solved by the model and by the puzzle engine, if any;
/// returns each puzzle's result per player, for the report's CSV.
fn solve_puzzles(
    config: &EvalConfig,
    player: &mut NeuralPlayer,
    progress: bool,
    summary: &mut EvalSummary,
) -> Result<Vec<(String, PuzzleResult)>, EvalError> {
    let mut puzzle_rows: Vec<(String, PuzzleResult)> = Vec::new();
    match &config.puzzles {
        None => summary
            .skipped
            .push("puzzles: no puzzle file configured (--puzzles)".into()),
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
                let results = puzzles::solve_many(&list, pl, |done| b.set_position(done))?;
                b.finish_and_clear();
                puzzle_rows.extend(results.iter().map(|r| (pl.name().to_owned(), r.clone())));
                Ok(puzzles::summarise(
                    pl.name(),
                    &results,
                    t.elapsed().as_secs_f64(),
                ))
            };
            summary.puzzles.push(run_one(player)?);
            for pl in &mut players {
                summary.puzzles.push(run_one(pl.as_mut())?);
            }
        }
    }
    Ok(puzzle_rows)
}

/// The games against each opponent from every opening, with both colours,
/// `--games-at-once` at a time, and the Elo fit of their results; returns
/// the games, for the report's PGN.
fn play_matches(
    config: &EvalConfig,
    player: &mut NeuralPlayer,
    progress: bool,
    summary: &mut EvalSummary,
) -> Result<Vec<PlayedGame>, EvalError> {
    let name = player.name().to_owned();
    let mut games: Vec<PlayedGame> = Vec::new();
    let openings = tournament::read_openings(config.openings.as_deref(), config.openings_count)?;
    let total = (openings.len() * 2 * config.opponents.len()) as u64;
    let b = bar(progress, total, "games");
    let pairings: Vec<tournament::Pairing> = openings
        .iter()
        .enumerate()
        .flat_map(|(i, opening)| {
            [true, false].map(|model_white| tournament::Pairing {
                opening,
                model_white,
                round: format!("{}.{}", i + 1, if model_white { 1 } else { 2 }),
            })
        })
        .collect();
    let slots = config.games_at_once.min(pairings.len()).max(1);
    let mut adjudicators = match &config.adjudicate {
        Some(Opponent::Stockfish { limit, skill }) => (0..slots)
            .map(|_| {
                tournament::Adjudicator::start(
                    &engine_config(config, *skill),
                    *limit,
                    config.adjudicate_cp,
                )
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    for o in &config.opponents {
        // A checkpoint keeps every game at once; an engine's games
        // share its process, so each slot gets its own.
        let mut opps: Vec<Box<dyn Player>> = vec![opponent_player(config, o)?];
        if opps[0].slots() == 1 {
            for _ in 1..slots {
                opps.push(opponent_player(config, o)?);
            }
        }
        let opponent = opps[0].name().to_owned();
        let mut seats: Vec<&mut dyn Player> = opps
            .iter_mut()
            .map(|p| &mut **p as &mut dyn Player)
            .collect();
        let (mut w, mut d, mut l) = (0u64, 0u64, 0u64);
        let played = tournament::play_games(
            &mut *player,
            &mut seats,
            adjudicators.iter_mut().collect(),
            &pairings,
            config.max_plies,
            |g, model_white| {
                let s = g.record().white_score;
                let model_score = if model_white { s } else { 1.0 - s };
                match model_score {
                    x if x > 0.75 => w += 1,
                    x if x < 0.25 => l += 1,
                    _ => d += 1,
                }
                b.inc(1);
                b.set_message(format!("{name} vs {opponent}: +{w} ={d} -{l}"));
            },
        )?;
        games.extend(played);
        let n = w + d + l;
        summary.games.push(MatchSummary {
            opponent,
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
    Ok(games)
}

fn write_report(
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
