//! The checkpoint layout, as the trainer writes it and inference reads it:
//! `RUN/train/NAME/checkpoints/step-NNNNNNNNN/` holds the model (`model.mpk`),
//! its EMA (`ema.mpk`), the optimiser state (`optim.mpk`; full precision
//! MessagePack, burn's `NamedMpkFileRecorder`) and `state.json` (step,
//! sampler position, the recipe, the model's shape).
//!
//! A checkpoint is complete once its `state.json` exists in a `step-*`
//! directory (the trainer renames a finished temporary directory into place),
//! so readers never see half a checkpoint.

use std::{
    fs,
    path::{Path, PathBuf},
};

use burn::{
    module::Module,
    record::{FullPrecisionSettings, NamedMpkFileRecorder},
    tensor::backend::Backend,
};
use serde::{Deserialize, de::DeserializeOwned};
use thiserror::Error;

use super::{net::Predictor, shape::ModelShape};
use crate::chess::RecordSet;

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

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The file of a checkpoint that marks it complete.
pub(crate) const STATE: &str = "state.json";

/// Which parameters of a checkpoint to load.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Weights {
    /// The exponential moving average (`ema.mpk`): what training evaluates.
    #[default]
    Ema,
    /// The optimiser's parameters (`model.mpk`).
    Raw,
}

impl Weights {
    pub(crate) fn file(self) -> &'static str {
        match self {
            Weights::Ema => "ema.mpk",
            Weights::Raw => "model.mpk",
        }
    }
}

/// What inference needs from a checkpoint's `state.json` (the trainer
/// records more: the sampler position, the whole recipe).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CheckpointInfo {
    /// Optimiser steps done.
    pub step: u64,
    pub config: InferenceRecipe,
    /// The model's shape, so inference can rebuild it.
    pub shape: ModelShape,
}

/// The part of a training recipe inference needs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct InferenceRecipe {
    /// The training run's name.
    pub name: String,
    /// The record set the model learned, which sets its policy.
    pub policy: RecordSet,
}

pub(crate) fn recorder() -> NamedMpkFileRecorder<FullPrecisionSettings> {
    NamedMpkFileRecorder::new()
}

/// The checkpoints directory of a training run.
pub(crate) fn checkpoints_dir(out_dir: &Path) -> PathBuf {
    out_dir.join("checkpoints")
}

/// The directory of step `step`'s checkpoint.
pub(crate) fn step_dir(out_dir: &Path, step: u64) -> PathBuf {
    checkpoints_dir(out_dir).join(format!("step-{step:09}"))
}

/// Complete checkpoints, oldest first.
pub(crate) fn list(out_dir: &Path) -> Result<Vec<(u64, PathBuf)>, CheckpointError> {
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
pub(crate) fn latest(out_dir: &Path) -> Result<Option<PathBuf>, CheckpointError> {
    Ok(list(out_dir)?.pop().map(|(_, p)| p))
}

/// Reads a checkpoint's `state.json` as `T` (the trainer's full state, or
/// [`CheckpointInfo`]). `path` is a checkpoint directory or a training run's
/// directory (then its newest checkpoint).
pub(crate) fn read_state<T: DeserializeOwned>(
    path: &Path,
) -> Result<(PathBuf, T), CheckpointError> {
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

/// Loads a model's parameters (`model.mpk`, or the EMA's `ema.mpk`) into
/// `fresh`, a predictor of the checkpoint's shape.
pub(crate) fn load_module<B: Backend>(
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

/// Writes an inference checkpoint: `model.mpk`, `ema.mpk` and a
/// `state.json` recording `step`, the run name (`out`'s file name),
/// `policy`, `shape` and, under `origin_key`, where the parameters came
/// from; no optimiser state, so training does not resume from it. `out`
/// becomes a training run's directory (`out/checkpoints/step-N/`) and must
/// not exist. Nothing is left behind on failure: the run is written beside
/// `out` and renamed into place. Returns the checkpoint's directory.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_inference<B: Backend>(
    out: &Path,
    step: u64,
    policy: RecordSet,
    shape: &ModelShape,
    model: &Predictor<B>,
    ema: &Predictor<B>,
    origin_key: &str,
    origin: serde_json::Value,
) -> Result<PathBuf, CheckpointError> {
    if out.exists() {
        return Err(io(out)(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "exists; choose a new directory",
        )));
    }
    let name = out.file_name().map_or_else(
        || "checkpoint".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let staging = out.with_file_name(format!(".{name}.writing"));
    let _ = fs::remove_dir_all(&staging);
    let result = (|| {
        let dir = step_dir(&staging, step);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        for (file, m) in [(Weights::Raw.file(), model), (Weights::Ema.file(), ema)] {
            let path = dir.join(file);
            m.clone()
                .save_file(&path, &recorder())
                .map_err(|e| CheckpointError::Record {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
        }
        let mut state = serde_json::json!({
            "step": step,
            "config": { "name": name, "policy": policy },
            "shape": shape,
        });
        state[origin_key] = origin;
        let path = dir.join(STATE);
        fs::write(&path, serde_json::to_vec_pretty(&state).expect("json")).map_err(io(&path))?;
        fs::rename(&staging, out).map_err(io(out))
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    result?;
    Ok(step_dir(out, step))
}

/// A model in words, for the reports of the commands that write
/// checkpoints: `8-layer d=256 action_value model (8,954,240 parameters)`.
pub(crate) fn describe(shape: &ModelShape, policy: RecordSet, parameters: u64) -> String {
    format!(
        "{}-layer d={} {} model ({} parameters)",
        shape.layers,
        shape.d_model,
        policy.name(),
        crate::ui::group(parameters)
    )
}
