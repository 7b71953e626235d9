//! What stops an ingest, and what its options refuse. Bad games never do
//! (they go to `rejects`).

use std::path::PathBuf;

use thiserror::Error;

use crate::store::StoreError;

/// Configuration problems, naming the option or file at fault.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error(
        "no input: give PGN files (.pgn, .pgn.zst) or '-' for standard input, or a pipeline config with [[ingest.inputs]]"
    )]
    NoInputs,
    #[error("no run directory: give RUN_DIR or `run` in the pipeline's [ingest] table")]
    NoRun,
    #[error("standard input ('-') can be read only once, but it is listed {0} times")]
    StdinTwice(usize),
    #[error("input {}: {source}", path.display())]
    Input {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("input {}: is a directory, expected a PGN file", .0.display())]
    InputIsDir(PathBuf),
    #[error("invalid split name {0:?}: use 1-64 characters from a-z, 0-9, '_' and '-'")]
    SplitName(String),
    #[error("--test-fraction must be in [0, 1], got {0}")]
    TestFraction(f64),
    #[error("--test-split {0:?} is also the split of an input; pick another name")]
    TestSplitClash(String),
    #[error("--min-elo {min} is above --max-elo {max}")]
    EloRange { min: u16, max: u16 },
    #[error("invalid {option}: {message}")]
    Invalid {
        option: &'static str,
        message: String,
    },
    #[error("cannot resolve {spec:?}: {message}")]
    Crate { spec: String, message: String },
}

/// Ingest failures. Bad *games* are never errors (they go to `rejects`);
/// these are problems with inputs as a whole, the output or the machine.
#[derive(Debug, Error)]
pub enum IngestError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot read input {input}: {source}")]
    Input {
        input: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("spill file {}: {source}", path.display())]
    Spill {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("internal error: {0}")]
    Internal(String),
}
