//! Evaluation and play: trained predictors scored as the paper
//! scores them, and played.
//!
//! - [`trained`]: a checkpoint loaded for inference (EMA weights by default);
//! - [`predict`]: the model's predictions for one board or many in shared
//!   forward passes, and the timing of those passes for `make bench-eval`;
//! - [`policy`]: the action-value, state-value and behavioural-cloning
//!   policies (and Stockfish) behind one [`policy::Player`] trait, with the
//!   paper's repetition and decisiveness workarounds;
//! - [`metrics`]: action accuracy, Kendall's tau, log-loss, L2, entropy
//!   and calibration on a split's annotated boards;
//! - [`puzzles`]: Lichess / ChessBench puzzle CSVs, solved and bucketed by
//!   rating (Figure 2);
//! - [`game`], [`tournament`], [`elo`]: games from ECO openings against
//!   Stockfish and other checkpoints, PGN, and a Bradley-Terry Elo fit;
//! - [`uci_server`]: `chessbench uci`, a model as a UCI engine;
//! - [`run`]: the `[eval]` recipe and the report.

use std::path::PathBuf;

use thiserror::Error;

use crate::{duckdb_session::SqlError, model::CheckpointError, uci_client::EngineError};

pub(crate) mod elo;
pub(crate) mod game;
pub(crate) mod metrics;
pub mod policy;
pub mod predict;
pub(crate) mod puzzles;
pub mod run;
pub mod tournament;
pub mod trained;
pub mod uci_server;

pub use run::{EvalOptions, run};
pub use uci_server::UciOptions;

/// Evaluation failures, naming the file, line or board.
#[derive(Debug, Error)]
pub enum EvalError {
    #[error("{}: no such checkpoint or training run (train one with `chessbench train`, or pass --checkpoint RUN/train/NAME)", .0.display())]
    NoCheckpoint(PathBuf),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Compute(#[from] crate::model::ComputeError),
    #[error("reading the model's output: {0}")]
    Tensor(String),
    #[error("board {fen:?}: {message}")]
    Position { fen: String, message: String },
    #[error("{}:{line}: {message}", path.display())]
    Puzzle {
        path: PathBuf,
        line: u64,
        message: String,
    },
    #[error("openings {}: {message}", path.display())]
    Openings { path: PathBuf, message: String },
    #[error("engine ({what}): {source}")]
    Engine {
        what: String,
        #[source]
        source: EngineError,
    },
    #[error(transparent)]
    Sql(#[from] SqlError),
    /// Writing a report file (the store's error names the file).
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Elo(#[from] elo::EloError),
    #[error(transparent)]
    Play(#[from] game::PlayError),
    #[error("no run: pass RUN or set `run` in the pipeline file's [eval] table")]
    NoRun,
    #[error(
        "no checkpoint: pass --checkpoint RUN/train/NAME or set `checkpoint` in the pipeline file's [eval] table"
    )]
    NoCheckpointGiven,
    #[error("{option}: expected a stockfish:... spec, got {spec}")]
    NotAnEngine { option: &'static str, spec: String },
    #[error("adjudicate_cp {0}: expected a positive number of centipawns")]
    AdjudicateCp(i32),
    #[error("{0}")]
    Buckets(#[from] crate::chess::value::BucketError),
    #[error("writing the report: {0}")]
    Json(#[from] serde_json::Error),
}

impl EvalError {
    pub(crate) fn engine(what: &str, source: EngineError) -> EvalError {
        EvalError::Engine {
            what: what.to_owned(),
            source,
        }
    }
}
