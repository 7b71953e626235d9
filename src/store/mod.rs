//! Storage: table schemas, Parquet writers with explicit properties, run
//! directories with atomic commits, and the run manifest.

pub mod commit;
pub mod legal_moves;
pub mod manifest;
pub mod schema;
pub mod writer;

use std::path::{Path, PathBuf};

use thiserror::Error;

pub use commit::{RunDir, Transaction};
pub use manifest::Manifest;
pub use schema::Table;

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

/// The `*.parquet` files of a directory, sorted; none when it does not exist.
/// (Temporary `*.parquet.tmp` files of unfinished writes never count.)
pub fn parquet_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "parquet") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
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
