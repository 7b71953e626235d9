//! Training configuration: the `[train]` table of a pipeline file, overridden
//! by the command line, validated into a [`TrainConfig`] that is saved next
//! to every checkpoint (a resumed run must have the same recipe).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{data::Policy, loss::Loss, model_config::Preset, sampler::Sampling};

/// Configuration problems, naming the option at fault.
#[derive(Debug, Error)]
pub enum TrainConfigError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Toml { path: PathBuf, message: String },
    #[error("no run directory: give --run or `run` in the pipeline's [train] table")]
    NoRun,
    #[error("invalid {option}: {message}")]
    Invalid {
        option: &'static str,
        message: String,
    },
}

fn invalid(option: &'static str, message: impl Into<String>) -> TrainConfigError {
    TrainConfigError::Invalid {
        option,
        message: message.into(),
    }
}

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// burn's `flex` CPU backend (all cores).
    Cpu,
    /// burn-cuda on GPU 0 (needs a binary built with `--features cuda`).
    Cuda,
}

/// Floating-point format of parameters and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    F32,
    /// bfloat16 everywhere (burn 0.21 has no autocast, so parameters and
    /// Adam moments are bf16 too); CUDA only.
    Bf16,
}

/// Options as written in `[train]` or on the command line; every field is
/// optional and has a default (see [`TrainOptions::resolve`]).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainOptions {
    pub run: Option<PathBuf>,
    pub name: Option<String>,
    pub split: Option<String>,
    pub eval_split: Option<String>,
    pub policy: Option<Policy>,
    pub model: Option<Preset>,
    pub buckets: Option<usize>,
    pub loss: Option<Loss>,
    pub batch_size: Option<usize>,
    pub learning_rate: Option<f64>,
    pub adam_beta1: Option<f64>,
    pub adam_beta2: Option<f64>,
    pub adam_epsilon: Option<f64>,
    pub grad_clip: Option<f64>,
    pub ema_decay: Option<f64>,
    pub steps: Option<u64>,
    pub sampling: Option<Sampling>,
    pub seed: Option<u64>,
    pub window: Option<usize>,
    pub workers: Option<usize>,
    pub log_every: Option<u64>,
    pub checkpoint_every: Option<u64>,
    pub keep_checkpoints: Option<usize>,
    pub eval_every: Option<u64>,
    pub eval_records: Option<usize>,
    pub marginal_records: Option<usize>,
    pub device: Option<DeviceKind>,
    pub precision: Option<Precision>,
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct PipelineFile {
    train: Option<TrainOptions>,
}

/// A validated training recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// The run directory whose tables are read; checkpoints and logs go to
    /// `RUN/train/NAME/`.
    pub run: PathBuf,
    pub name: String,
    /// Split trained on.
    pub split: String,
    /// Split evaluated on (log-loss against the marginal baseline), if any.
    pub eval_split: Option<String>,
    pub policy: Policy,
    pub model: Preset,
    /// K value buckets (value policies).
    pub buckets: usize,
    pub loss: Loss,
    pub batch_size: usize,
    pub learning_rate: f64,
    pub adam_beta1: f64,
    pub adam_beta2: f64,
    pub adam_epsilon: f64,
    /// Global gradient-norm clip.
    pub grad_clip: f64,
    pub ema_decay: f64,
    /// Optimiser steps in total (a resumed run continues to this step).
    pub steps: u64,
    pub sampling: Sampling,
    pub seed: u64,
    /// Row groups shuffled together by the sampler.
    pub window: usize,
    /// Loader threads.
    pub workers: usize,
    pub log_every: u64,
    pub checkpoint_every: u64,
    pub keep_checkpoints: usize,
    /// Evaluate every N steps (0: only at the end).
    pub eval_every: u64,
    /// Records of the eval split scored per evaluation.
    pub eval_records: usize,
    /// Train records the marginal baseline is estimated from.
    pub marginal_records: usize,
    pub device: DeviceKind,
    pub precision: Precision,
}

/// Fields that may change when a run is resumed (they do not change what is
/// computed, only how long, how often it is logged or how fast it is read).
const RESUMABLE_CHANGES: &[&str] = &[
    // Where the run lives may be spelled differently (relative, absolute).
    "run",
    "name",
    // Same arithmetic on another backend (precision is checked).
    "device",
    "steps",
    "workers",
    "log_every",
    "checkpoint_every",
    "keep_checkpoints",
    "eval_every",
];

impl TrainConfig {
    /// The run's output directory `RUN/train/NAME`.
    pub fn out_dir(&self) -> PathBuf {
        self.run.join("train").join(&self.name)
    }

    /// The options that differ from `saved` and may not change on resume.
    pub fn incompatible_with(&self, saved: &TrainConfig) -> Vec<String> {
        let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
            (serde_json::to_value(self), serde_json::to_value(saved))
        else {
            return vec!["(config)".into()];
        };
        a.iter()
            .filter(|(k, v)| !RESUMABLE_CHANGES.contains(&k.as_str()) && b.get(*k) != Some(*v))
            .map(|(k, v)| {
                format!(
                    "{k}: checkpoint has {}, now {v}",
                    b.get(k).unwrap_or(&serde_json::Value::Null)
                )
            })
            .collect()
    }
}

impl TrainOptions {
    /// Reads the `[train]` table of a pipeline file.
    pub fn from_pipeline_file(path: &Path) -> Result<TrainOptions, TrainConfigError> {
        use crate::pipeline::{self, PipelineFileError};
        let (file, base): (PipelineFile, _) = pipeline::read(path).map_err(|e| match e {
            PipelineFileError::Read(source) => TrainConfigError::Read {
                path: path.to_owned(),
                source,
            },
            PipelineFileError::Toml(message) => TrainConfigError::Toml {
                path: path.to_owned(),
                message,
            },
        })?;
        let mut options = file.train.unwrap_or_default();
        options.base_dir = Some(base);
        Ok(options)
    }

    /// `self` overridden by every option `cli` sets.
    pub fn merge(self, cli: TrainOptions) -> TrainOptions {
        let run_from_cli = cli.run.is_some();
        macro_rules! pick {
            ($($f:ident),*) => { TrainOptions { $($f: cli.$f.or(self.$f),)*
                base_dir: if run_from_cli { None } else { self.base_dir } } };
        }
        pick!(
            run,
            name,
            split,
            eval_split,
            policy,
            model,
            buckets,
            loss,
            batch_size,
            learning_rate,
            adam_beta1,
            adam_beta2,
            adam_epsilon,
            grad_clip,
            ema_decay,
            steps,
            sampling,
            seed,
            window,
            workers,
            log_every,
            checkpoint_every,
            keep_checkpoints,
            eval_every,
            eval_records,
            marginal_records,
            device,
            precision
        )
    }

    /// Validates and fills defaults.
    pub fn resolve(self) -> Result<TrainConfig, TrainConfigError> {
        let run = self.run.ok_or(TrainConfigError::NoRun)?;
        let run = match &self.base_dir {
            Some(base) if run.is_relative() => base.join(run),
            _ => run,
        };
        let policy = self.policy.unwrap_or(Policy::ActionValue);
        let loss = self.loss.unwrap_or(match policy {
            Policy::BehavioralCloning => Loss::CrossEntropy,
            _ => Loss::HlGauss,
        });
        if policy == Policy::BehavioralCloning && loss != Loss::CrossEntropy {
            return Err(invalid(
                "loss",
                format!(
                    "{loss:?} needs value buckets; behavioural cloning predicts actions, use cross_entropy"
                ),
            ));
        }
        let model = self.model.unwrap_or(Preset::Tiny);
        let name = self.name.unwrap_or_else(|| {
            let p = match policy {
                Policy::ActionValue => "av",
                Policy::StateValue => "sv",
                Policy::BehavioralCloning => "bc",
            };
            let m = serde_json::to_value(model)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            format!("{p}_{m}")
        });
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            || name.starts_with('.')
        {
            return Err(invalid(
                "name",
                format!("expected letters, digits, '-', '_' or '.', got {name:?}"),
            ));
        }
        let buckets = self.buckets.unwrap_or(128);
        if !(2..=crate::chess::actions::NUM_ACTIONS).contains(&buckets) {
            return Err(invalid(
                "buckets",
                format!("expected 2..=1968 value buckets, got {buckets}"),
            ));
        }
        let positive = |option: &'static str, v: Option<u64>, default: u64| {
            let v = v.unwrap_or(default);
            if v == 0 {
                Err(invalid(option, "must be at least 1"))
            } else {
                Ok(v)
            }
        };
        let unit = |option: &'static str, v: Option<f64>, default: f64| {
            let v = v.unwrap_or(default);
            if (0.0..1.0).contains(&v) {
                Ok(v)
            } else {
                Err(invalid(
                    option,
                    format!("expected a value in [0, 1), got {v}"),
                ))
            }
        };
        let learning_rate = self.learning_rate.unwrap_or(1e-4);
        if !(learning_rate > 0.0 && learning_rate.is_finite()) {
            return Err(invalid(
                "learning_rate",
                format!("must be > 0, got {learning_rate}"),
            ));
        }
        let grad_clip = self.grad_clip.unwrap_or(1.0);
        if grad_clip.is_nan() || grad_clip <= 0.0 {
            return Err(invalid(
                "grad_clip",
                format!("must be > 0, got {grad_clip}"),
            ));
        }
        let adam_epsilon = self.adam_epsilon.unwrap_or(1e-8);
        if adam_epsilon.is_nan() || adam_epsilon <= 0.0 {
            return Err(invalid("adam_epsilon", "must be > 0"));
        }
        let device = self.device.unwrap_or(DeviceKind::Cpu);
        let precision = self.precision.unwrap_or(Precision::F32);
        if device == DeviceKind::Cpu && precision == Precision::Bf16 {
            return Err(invalid(
                "precision",
                "bf16 is only available on device = \"cuda\"",
            ));
        }
        Ok(TrainConfig {
            run,
            name,
            split: self.split.unwrap_or_else(|| "train".into()),
            eval_split: match self.eval_split.as_deref() {
                Some("") => None,
                Some(s) => Some(s.to_owned()),
                None => Some("test".into()),
            },
            policy,
            model,
            buckets,
            loss,
            batch_size: positive("batch_size", self.batch_size.map(|v| v as u64), 1024)? as usize,
            learning_rate,
            adam_beta1: unit("adam_beta1", self.adam_beta1, 0.9)?,
            adam_beta2: unit("adam_beta2", self.adam_beta2, 0.999)?,
            adam_epsilon,
            grad_clip,
            ema_decay: unit("ema_decay", self.ema_decay, 0.99)?,
            steps: positive("steps", self.steps, 1000)?,
            sampling: self.sampling.unwrap_or(Sampling::Uniform),
            seed: self.seed.unwrap_or(0),
            window: positive("window", self.window.map(|v| v as u64), 16)? as usize,
            workers: positive("workers", self.workers.map(|v| v as u64), 1)? as usize,
            log_every: positive("log_every", self.log_every, 10)?,
            checkpoint_every: positive("checkpoint_every", self.checkpoint_every, 1000)?,
            keep_checkpoints: positive(
                "keep_checkpoints",
                self.keep_checkpoints.map(|v| v as u64),
                2,
            )? as usize,
            eval_every: self.eval_every.unwrap_or(0),
            eval_records: positive("eval_records", self.eval_records.map(|v| v as u64), 16_384)?
                as usize,
            marginal_records: positive(
                "marginal_records",
                self.marginal_records.map(|v| v as u64),
                1_000_000,
            )? as usize,
            device,
            precision,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(toml_text: &str) -> TrainOptions {
        toml::from_str::<PipelineFile>(toml_text)
            .unwrap()
            .train
            .unwrap()
    }

    #[test]
    fn defaults_follow_the_policy() {
        let c = options("[train]\nrun = \"r\"\npolicy = \"behavioral_cloning\"")
            .resolve()
            .unwrap();
        assert_eq!(c.loss, Loss::CrossEntropy);
        assert_eq!(c.name, "bc_tiny");
        let c = options("[train]\nrun = \"r\"").resolve().unwrap();
        assert_eq!((c.policy, c.loss), (Policy::ActionValue, Loss::HlGauss));
        assert_eq!(c.eval_split.as_deref(), Some("test"));
    }

    #[test]
    fn bad_options_are_named() {
        let err = |t: &str| options(t).resolve().unwrap_err().to_string();
        assert!(
            err("[train]\nrun=\"r\"\npolicy=\"behavioral_cloning\"\nloss=\"l2\"").contains("loss")
        );
        assert!(err("[train]\nrun=\"r\"\nbuckets=1").contains("buckets"));
        assert!(err("[train]\nrun=\"r\"\nprecision=\"bf16\"").contains("precision"));
        assert!(err("[train]\nrun=\"r\"\nname=\"../x\"").contains("name"));
        assert!(err("[train]\nrun=\"r\"\nema_decay=1.5").contains("ema_decay"));
        assert!(toml::from_str::<PipelineFile>("[train]\nbatch=3").is_err());
    }

    #[test]
    fn resume_compatibility() {
        let a = options("[train]\nrun=\"r\"\nsteps=10").resolve().unwrap();
        let mut b = a.clone();
        b.steps = 20;
        b.workers = 2;
        assert!(b.incompatible_with(&a).is_empty());
        b.learning_rate = 1.0;
        let diff = b.incompatible_with(&a);
        assert_eq!(diff.len(), 1);
        assert!(diff[0].starts_with("learning_rate"), "{diff:?}");
    }
}
