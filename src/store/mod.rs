//! Storage: table schemas, Parquet writers with explicit properties, run
//! directories with atomic commits, and the run manifest.

pub(crate) mod boards;
pub(crate) mod cache;
pub(crate) mod chunks;
pub(crate) mod commit;
pub(crate) mod direct;
mod error;
pub(crate) mod failpoint;
pub(crate) mod files;
pub(crate) mod input;
pub(crate) mod legal_moves;
pub(crate) mod manifest;
pub(crate) mod memory;
pub(crate) mod parallel;
pub(crate) mod schema;
pub(crate) mod source;
pub mod sql_files;
pub(crate) mod writer;

use std::path::Path;

pub(crate) use commit::RunDir;
pub use error::StoreError;
pub(crate) use files::{free_bytes, open_columns, open_parquet, parquet_files, unix_now};
pub(crate) use manifest::Manifest;
pub use schema::Table;
pub use source::{LabelSource, Source, ValueSource};

/// Checks that `run` is a run directory whose tables can be read: it has a
/// manifest, and a commit a crashed process left half done is finished
/// first (as every reading stage does). For readers outside this crate (the
/// Python package's `chessbench.open`).
pub fn check_run(run: &Path) -> Result<(), StoreError> {
    let _reader = RunDir::read(run)?;
    Manifest::read(&run.join(commit::MANIFEST))?;
    Ok(())
}
