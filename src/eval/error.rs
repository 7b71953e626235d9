//! What stops an evaluation, naming the file, line or board, and the
//! options it refuses.

use std::path::PathBuf;

use thiserror::Error;

use super::{elo, game};
use crate::{duckdb_session::SqlError, model::CheckpointError, uci_client::EngineError};

/// Options an evaluation cannot run with (`EvalOptions::resolve`), naming
/// the option.
#[derive(Debug, Error)]
pub enum EvalConfigError {
    #[error("no run: pass RUN or set `run` in the pipeline file's [eval] table")]
    NoRun,
    #[error(
        "no checkpoint: pass --checkpoint RUN/train/NAME or set `checkpoint` in the pipeline file's [eval] table"
    )]
    NoCheckpoint,
    #[error("{option}: expected a stockfish:... spec, got {spec}")]
    NotAnEngine { option: &'static str, spec: String },
    #[error("adjudicate_cp {0}: expected a positive number of centipawns")]
    AdjudicateCp(i32),
}

/// What stops a player (the trained model or a UCI engine) from being
/// built or from choosing a move, naming the checkpoint, board or engine
/// command. The UCI server's errors wrap it; an evaluation's
/// [`EvalError::Player`] does too.
#[derive(Debug, Error)]
pub enum PlayerError {
    #[error("{}: no such checkpoint or training run (train one with `chessbench train`, or pass --checkpoint RUN/train/NAME)", .0.display())]
    NoCheckpoint(PathBuf),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Compute(#[from] crate::model::ComputeError),
    #[error("reading the model's output: {0}")]
    Tensor(String),
    #[error("{0}")]
    Buckets(#[from] crate::chess::value::BucketError),
    #[error("board {fen:?}: {message}")]
    Position { fen: String, message: String },
    #[error("engine ({what}): {source}")]
    Engine {
        what: String,
        #[source]
        source: EngineError,
    },
}

impl PlayerError {
    pub(crate) fn engine(what: &str, source: EngineError) -> PlayerError {
        PlayerError::Engine {
            what: what.to_owned(),
            source,
        }
    }
}

/// Evaluation failures, naming the file, line or board.
#[derive(Debug, Error)]
pub enum EvalError {
    /// A player could not be built, or could not choose a move.
    #[error(transparent)]
    Player(#[from] PlayerError),
    #[error("{}:{line}: {message}", path.display())]
    Puzzle {
        path: PathBuf,
        line: u64,
        message: String,
    },
    #[error("openings {}: {message}", path.display())]
    Openings { path: PathBuf, message: String },
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
    #[error("writing the report: {0}")]
    Json(#[from] serde_json::Error),
}
