//! What stops a grid before or around its variants.

use std::path::PathBuf;

use thiserror::Error;

use super::{grid::GridError, report};
use crate::{annotate, options::ShardError, store::StoreError};

/// What went wrong before or around the variants (a variant's own failure
/// is a row of the results, not an error).
#[derive(Debug, Error)]
pub enum AblateError {
    #[error(transparent)]
    Grid(#[from] GridError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("annotating {}: {source}", dir.display())]
    Annotate {
        dir: PathBuf,
        source: annotate::AnnotateError,
    },
    #[error(
        "the data of {id} is not fully annotated ({missing} chunks missing in {}): run `chessbench ablate GRID --phase data` first",
        dir.display()
    )]
    DataMissing {
        id: String,
        dir: PathBuf,
        missing: u64,
    },
    #[error(
        "a sharded grid that annotates (an [annotate] table or search-limit axes) runs in two phases: `--phase data` on every shard, then `--phase train`"
    )]
    ShardedData,
    #[error(
        "the base run {} is not fully annotated ({missing} chunks missing): run `chessbench ablate GRID --phase data` first",
        run.display()
    )]
    BaseNotAnnotated { run: PathBuf, missing: u64 },
    #[error("writing the report")]
    Report(#[from] report::ReportError),
}
