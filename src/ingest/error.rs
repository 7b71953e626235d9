//! What stops an ingest. Bad games never do (they go to `rejects`).

use std::path::PathBuf;

use thiserror::Error;

use super::config::ConfigError;
use crate::store::StoreError;

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
