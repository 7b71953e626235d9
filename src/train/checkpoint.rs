//! Checkpoints: `RUN/train/NAME/checkpoints/step-NNNNNNNNN/` holds the model,
//! its EMA, the optimiser state (full precision MessagePack, burn's
//! `NamedMpkFileRecorder`) and `state.json` (step, sampler position, the
//! config). A checkpoint is written into a temporary directory and renamed
//! into place, so a crash leaves either the whole checkpoint or none; the
//! newest complete one is where a run resumes.

use std::{
    fs,
    path::{Path, PathBuf},
};

use burn::{
    module::Module,
    optim::Optimizer,
    record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder},
    tensor::backend::{AutodiffBackend, Backend},
};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{config::TrainConfig, model::Predictor, model_config::ModelShape, sampler::Position};

/// Checkpoint failures, naming the path.
#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Record { path: PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    State { path: PathBuf, message: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What besides the tensors a checkpoint records.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainState {
    /// Optimiser steps done.
    pub step: u64,
    /// Where the sampler continues.
    pub position: Position,
    /// Samples seen.
    pub samples: u64,
    /// Training wall time so far, seconds.
    pub elapsed_s: f64,
    pub config: TrainConfig,
    /// The model's shape, so evaluation can rebuild it without the config's
    /// preset table.
    pub shape: ModelShape,
}

const STATE: &str = "state.json";

fn recorder() -> NamedMpkFileRecorder<FullPrecisionSettings> {
    NamedMpkFileRecorder::new()
}

/// The checkpoints directory of a training run.
pub fn checkpoints_dir(out_dir: &Path) -> PathBuf {
    out_dir.join("checkpoints")
}

fn step_dir(out_dir: &Path, step: u64) -> PathBuf {
    checkpoints_dir(out_dir).join(format!("step-{step:09}"))
}

/// Complete checkpoints, oldest first.
pub fn list(out_dir: &Path) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
    let dir = checkpoints_dir(out_dir);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&dir)(e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(&dir))?;
        let name = entry.file_name();
        let Some(step) = name
            .to_str()
            .and_then(|n| n.strip_prefix("step-"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if entry.path().join(STATE).is_file() {
            found.push((step, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// The newest complete checkpoint.
pub fn latest(out_dir: &Path) -> Result<Option<PathBuf>, CheckpointError> {
    Ok(list(out_dir)?.pop().map(|(_, p)| p))
}

/// Reads a checkpoint's `state.json`. `path` is a checkpoint directory or a
/// training run's directory (then its newest checkpoint).
pub fn read_state(path: &Path) -> Result<(PathBuf, TrainState), CheckpointError> {
    let dir = if path.join(STATE).is_file() {
        path.to_owned()
    } else {
        latest(path)?.ok_or_else(|| CheckpointError::State {
            path: path.to_owned(),
            message: "not a checkpoint (no state.json) and no checkpoints/step-* below it".into(),
        })?
    };
    let file = dir.join(STATE);
    let text = fs::read_to_string(&file).map_err(io(&file))?;
    let state = serde_json::from_str(&text).map_err(|e| CheckpointError::State {
        path: file.clone(),
        message: e.to_string(),
    })?;
    Ok((dir, state))
}

/// Writes a checkpoint atomically and keeps the newest `keep`.
pub fn save<B, O>(
    out_dir: &Path,
    state: &TrainState,
    model: &Predictor<B>,
    ema: &Predictor<B::InnerBackend>,
    optim: &O,
    keep: usize,
) -> Result<PathBuf, CheckpointError>
where
    B: AutodiffBackend,
    O: Optimizer<Predictor<B>, B>,
{
    let root = checkpoints_dir(out_dir);
    fs::create_dir_all(&root).map_err(io(&root))?;
    let target = step_dir(out_dir, state.step);
    let tmp = root.join(format!(
        ".step-{:09}.{}.tmp",
        state.step,
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    let rec = recorder();
    let record_err = |path: PathBuf| {
        move |e: burn::record::RecorderError| CheckpointError::Record {
            path,
            message: e.to_string(),
        }
    };
    model
        .clone()
        .save_file(tmp.join("model"), &rec)
        .map_err(record_err(tmp.join("model.mpk")))?;
    ema.clone()
        .save_file(tmp.join("ema"), &rec)
        .map_err(record_err(tmp.join("ema.mpk")))?;
    rec.record(optim.to_record(), tmp.join("optim"))
        .map_err(record_err(tmp.join("optim.mpk")))?;
    let json = serde_json::to_vec_pretty(state).map_err(|e| CheckpointError::State {
        path: tmp.join(STATE),
        message: e.to_string(),
    })?;
    fs::write(tmp.join(STATE), json).map_err(io(&tmp.join(STATE)))?;
    for name in ["model.mpk", "ema.mpk", "optim.mpk", STATE] {
        let p = tmp.join(name);
        fs::File::open(&p)
            .and_then(|f| f.sync_all())
            .map_err(io(&p))?;
    }
    if target.exists() {
        fs::remove_dir_all(&target).map_err(io(&target))?;
    }
    fs::rename(&tmp, &target).map_err(io(&target))?;
    if let Ok(d) = fs::File::open(&root) {
        let _ = d.sync_all();
    }
    let all = list(out_dir)?;
    for (_, old) in all.iter().take(all.len().saturating_sub(keep.max(1))) {
        fs::remove_dir_all(old).map_err(io(old))?;
    }
    Ok(target)
}

/// Loads a model's parameters (`model.mpk`, or the EMA's `ema.mpk`) into
/// `fresh`, a predictor of the checkpoint's shape.
pub fn load_module<B: Backend>(
    dir: &Path,
    file: &str,
    fresh: Predictor<B>,
    device: &B::Device,
) -> Result<Predictor<B>, CheckpointError> {
    let path = dir.join(file);
    fresh
        .load_file(&path, &recorder(), device)
        .map_err(|e| CheckpointError::Record {
            path,
            message: e.to_string(),
        })
}

/// Loads the optimiser state into `optim`.
pub fn load_optim<B, O>(dir: &Path, optim: O, device: &B::Device) -> Result<O, CheckpointError>
where
    B: AutodiffBackend,
    O: Optimizer<Predictor<B>, B>,
{
    let path = dir.join("optim.mpk");
    let record =
        recorder()
            .load(dir.join("optim"), device)
            .map_err(|e| CheckpointError::Record {
                path,
                message: e.to_string(),
            })?;
    Ok(optim.load_record(record))
}
