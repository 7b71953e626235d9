//! What a storage operation reports when it fails: the file and the cause.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Storage failures, each naming the file involved.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Parquet {
        path: PathBuf,
        source: parquet::errors::ParquetError,
    },
    #[error("{}: is locked by another chessbench process working on this run", .0.display())]
    Locked(PathBuf),
    #[error("{}: not a chessbench run directory (no manifest.json); run `chessbench ingest` first", .0.display())]
    NotARun(PathBuf),
    #[error("{path}: corrupt: {1}", path = .0.display())]
    Corrupt(PathBuf, String),
    #[error("{}: expected a staged partition that is not there", .0.display())]
    Missing(PathBuf),
}

impl StoreError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn parquet(path: &Path, source: parquet::errors::ParquetError) -> StoreError {
        StoreError::Parquet {
            path: path.to_owned(),
            source,
        }
    }
}
