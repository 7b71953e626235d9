//! Pipeline files (`pipeline/*.toml`): one table per stage (`[ingest]`,
//! `[annotate]`, ...); relative paths inside are relative to the file.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Why a pipeline file could not be read.
#[derive(Debug)]
pub enum PipelineFileError {
    Read(std::io::Error),
    Toml(String),
}

/// Reads a pipeline file into `T` (a struct with one optional field per
/// stage table) and returns it with the directory its relative paths are
/// resolved against.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<(T, PathBuf), PipelineFileError> {
    let text = std::fs::read_to_string(path).map_err(PipelineFileError::Read)?;
    let file: T = toml::from_str(&text).map_err(|e| PipelineFileError::Toml(e.to_string()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let base = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir.to_owned()
    };
    Ok((file, base))
}
