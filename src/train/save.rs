//! Writing checkpoints (the layout is [`crate::model::checkpoint`]'s): a
//! checkpoint is written into a temporary directory and renamed into place,
//! so a crash leaves either the whole checkpoint or none; the newest complete
//! one is where a run resumes.

use std::{
    fs,
    path::{Path, PathBuf},
};

use burn::{module::Module, record::Recorder, tensor::backend::AutodiffBackend};
use serde::{Deserialize, Serialize};

use super::{config::TrainConfig, optim::AdamRecord, sampler::Position};
use crate::model::{
    ModelShape, Predictor,
    checkpoint::{CheckpointError, STATE, checkpoints_dir, io, list, recorder, step_dir},
};

/// What besides the tensors a checkpoint records.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct TrainState {
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

/// Writes a checkpoint atomically and keeps the newest `keep`: the model,
/// its average (`ema`) and Adam's state in burn's record form.
pub(crate) fn save<B: AutodiffBackend>(
    out_dir: &Path,
    state: &TrainState,
    model: &Predictor<B>,
    ema: &Predictor<B::InnerBackend>,
    adam: AdamRecord<B>,
    keep: usize,
) -> Result<PathBuf, CheckpointError> {
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
    if let Err(e) = write_files(&tmp, state, model, ema, adam) {
        // A full disk: give the room back, leave no half checkpoint.
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
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

/// Writes a checkpoint's files into `dir` and syncs them.
fn write_files<B: AutodiffBackend>(
    dir: &Path,
    state: &TrainState,
    model: &Predictor<B>,
    ema: &Predictor<B::InnerBackend>,
    adam: AdamRecord<B>,
) -> Result<(), CheckpointError> {
    let rec = recorder();
    model
        .clone()
        .save_file(dir.join("model"), &rec)
        .map_err(|e| record_error(dir.join("model.mpk"), e))?;
    ema.clone()
        .save_file(dir.join("ema"), &rec)
        .map_err(|e| record_error(dir.join("ema.mpk"), e))?;
    rec.record(adam, dir.join("optim"))
        .map_err(|e| record_error(dir.join("optim.mpk"), e))?;
    let json = serde_json::to_vec_pretty(state).map_err(|e| CheckpointError::State {
        path: dir.join(STATE),
        message: e.to_string(),
    })?;
    fs::write(dir.join(STATE), json).map_err(io(&dir.join(STATE)))?;
    for name in ["model.mpk", "ema.mpk", "optim.mpk", STATE] {
        let p = dir.join(name);
        fs::File::open(&p)
            .and_then(|f| f.sync_all())
            .map_err(io(&p))?;
    }
    Ok(())
}

/// burn's recorder reports a failed write as a MessagePack error, without
/// the I/O error under it; a full file system is the usual cause, so say so
/// when it is one.
fn record_error(path: PathBuf, e: burn::record::RecorderError) -> CheckpointError {
    let mut message = e.to_string();
    if let Some(free) = crate::store::free_bytes(&path)
        && free < FULL_BELOW
    {
        message.push_str(&format!(" (its file system is full: {free} bytes free)"));
    }
    CheckpointError::Record { path, message }
}

/// Free space under which a failed write is put down to a full disk.
const FULL_BELOW: u64 = 64 << 20;

/// Reads Adam's state (`optim.mpk`).
pub(crate) fn load_adam<B: AutodiffBackend>(
    dir: &Path,
    device: &B::Device,
) -> Result<AdamRecord<B>, CheckpointError> {
    let path = dir.join("optim.mpk");
    recorder()
        .load(dir.join("optim"), device)
        .map_err(|e| CheckpointError::Record {
            path,
            message: e.to_string(),
        })
}
