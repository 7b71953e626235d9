//! The `[eval]` recipe: `chessbench eval`'s options, what they resolve to,
//! and how an evaluation shares out its memory limit.

use std::{path::PathBuf, str::FromStr};

use clap::{ArgAction, Args, ValueHint};
use serde::{Deserialize, Serialize};

use super::{
    error::EvalConfigError,
    tournament::{self, Opponent, SpecError},
};
use crate::{
    model::{DeviceKind, Precision, Weights},
    options::{Budget, Compute, Consumer, Env, Memory, RunArg, Share},
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
    /// The host memory budget, bytes, shared out as [`MEMORY`] says.
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
    pub fn resolve(&self, env: &Env) -> Result<EvalConfig, EvalConfigError> {
        let run = self.run.run.clone().ok_or(EvalConfigError::NoRun)?;
        let checkpoint = self
            .checkpoint
            .clone()
            .ok_or(EvalConfigError::NoCheckpoint)?;
        let engine_only =
            |o: &Option<Opponent>, option| -> Result<Option<Opponent>, EvalConfigError> {
                match o {
                    Some(o) => {
                        o.clone().engine(option)?;
                        Ok(Some(o.clone()))
                    }
                    None => Ok(None),
                }
            };
        if self.adjudicate_cp <= 0 {
            return Err(EvalConfigError::AdjudicateCp(self.adjudicate_cp));
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

/// What `eval` holds within `--memory-limit` (host memory; a GPU's
/// activations are on the device), for its model and for each checkpoint
/// it plays against.
pub const MEMORY: Memory<3> = Memory([
    Consumer::new(
        "before any board is scored, the DuckDB session reading the split's labelled boards \
         (shared out as in `sql`), then closed",
        Share::Alone,
    ),
    Consumer::new(
        "the batches in flight (the one being tokenised and the one being scored, their tokens \
         and log-probabilities; a board is never split)",
        Share::Part(1, 2),
    ),
    Consumer::new(
        "the weights and the CPU path's activations",
        Share::Rest { at_least: (0, 1) },
    ),
]);

impl EvalConfig {
    /// The model's batches' share of the limit ([`MEMORY`]).
    pub(crate) fn batch_memory(&self) -> u64 {
        let [_, batches, _] = MEMORY.share(self.memory_limit, 1);
        batches
    }
}
