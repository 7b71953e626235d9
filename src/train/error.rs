//! What stops a training run, naming the file or the option.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{data::DataError, optim::OptimError};
use crate::model::CheckpointError;

/// Training failures.
#[derive(Debug, Error)]
pub enum TrainError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Writing a log or the summary (the store's error names the file).
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{}: {source}", path.display())]
    Optimiser { path: PathBuf, source: OptimError },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} was trained with another recipe; resume needs the same one (or pass --restart to start over):\n  {}",
        dir.display(),
        diffs.join("\n  ")
    )]
    Incompatible { dir: PathBuf, diffs: Vec<String> },
    #[error("comparing backends: {0}")]
    Backend(String),
    #[error("the loss became {value} at step {step}: lower the learning rate or check the data")]
    Diverged { step: u64, value: f64 },
    #[error(transparent)]
    Compute(#[from] crate::model::ComputeError),
    #[error(
        "--count-kernels counts a GPU step's kernels from CubeCL's logs: use --device wgpu or cuda, in a process that has not set up the GPU before"
    )]
    CountKernelsSettings,
    #[error(
        "--count-ops counts the f32 step's operations on the CPU (as built for CUDA): use --device cpu --precision f32"
    )]
    CountOpsSettings,
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io {
        path: path.to_owned(),
        source,
    }
}
