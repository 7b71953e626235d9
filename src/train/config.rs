//! Training's options ([`TrainOptions`]: the command line and the `[train]`
//! table of a pipeline file) validated into a [`TrainConfig`], the recipe
//! saved next to every checkpoint (a resumed run must have the same one).

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{loss::Loss, sampler::Sampling};
use crate::store::LabelSource;
use crate::{
    chess::RecordSet,
    model::{Architecture, DeviceKind, ModelShape, Precision, Preset},
    options::{Compute, Env, MEMORY_LIMIT_BYTES, Resources, RunArg},
};

/// Configuration problems, naming the option at fault.
#[derive(Debug, Error)]
pub enum TrainConfigError {
    #[error("no run directory: give RUN_DIR or `run` in the pipeline's [train] table")]
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

/// The model recipe: the predictor, its size and loss, and the optimiser's
/// settings. `train` and `bench-step` take the same options with the same
/// defaults (`bench-step` times the step of this recipe).
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct Recipe {
    /// The record set learned, which makes the predictor (its policy).
    #[arg(long, value_enum, default_value_t = RecordSet::ActionValue, help_heading = "Recipe")]
    pub policy: RecordSet,
    /// Model size.
    #[arg(long, value_enum, default_value_t = Preset::Tiny, help_heading = "Recipe")]
    pub model: Preset,
    /// Network family: the paper's transformer, or the residual ConvNet of
    /// its architecture ablation (the preset's layers as residual blocks,
    /// its width as channels: 9m is the paper's 8 x 256).
    #[arg(long, value_enum, default_value_t = Architecture::Transformer, help_heading = "Recipe")]
    pub architecture: Architecture,
    /// Blocks (transformer or residual), replacing the preset's (the
    /// paper's depth ablation varies it at the 9M model's width) [default:
    /// the preset's].
    #[arg(long, value_name = "N", help_heading = "Recipe")]
    pub layers: Option<usize>,
    /// K value buckets.
    #[arg(long, default_value_t = 128, help_heading = "Recipe")]
    pub buckets: usize,
    /// Loss [default: hl_gauss for value predictors, cross_entropy for
    /// behavioural cloning].
    #[arg(long, value_enum, help_heading = "Recipe")]
    pub loss: Option<Loss>,
    /// Records per step.
    #[arg(long, default_value_t = 1024, help_heading = "Recipe")]
    pub batch_size: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-4, help_heading = "Recipe")]
    pub learning_rate: f64,
    /// Adam beta1.
    #[arg(long, default_value_t = 0.9, help_heading = "Recipe")]
    pub adam_beta1: f64,
    /// Adam beta2.
    #[arg(long, default_value_t = 0.999, help_heading = "Recipe")]
    pub adam_beta2: f64,
    /// Adam epsilon.
    #[arg(long, default_value_t = 1e-8, help_heading = "Recipe")]
    pub adam_epsilon: f64,
    /// Global gradient-norm clip.
    #[arg(long, default_value_t = 1.0, help_heading = "Recipe")]
    pub grad_clip: f64,
    /// Decay of the parameters' exponential moving average (evaluated).
    #[arg(long, default_value_t = 0.99, help_heading = "Recipe")]
    pub ema_decay: f64,
}

/// `chessbench train`'s options: the command line and the `[train]` table of
/// a pipeline file (see [`crate::options`]). [`TrainOptions::resolve`]
/// validates them into the recipe saved with every checkpoint.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct TrainOptions {
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArg,
    /// Name of the training run: outputs go to RUN/train/NAME [default:
    /// POLICY_MODEL, e.g. av_tiny].
    #[arg(long)]
    pub name: Option<String>,
    /// Split to train on.
    #[arg(long, default_value = "train")]
    pub split: String,
    /// Split to evaluate on; "" for none.
    #[arg(long, default_value = "test")]
    pub eval_split: String,
    #[command(flatten)]
    #[serde(flatten)]
    pub recipe: Recipe,
    /// Total optimiser steps; raise it to continue a finished run.
    #[arg(long, default_value_t = 1000, help_heading = "Recipe")]
    pub steps: u64,
    /// Record sampler.
    #[arg(long, value_enum, default_value_t = Sampling::Uniform, help_heading = "Recipe")]
    pub sampling: Sampling,
    /// Values to learn from where a board has more than one source.
    #[arg(long, value_enum, default_value_t = LabelSource::default(), help_heading = "Recipe")]
    #[serde(default)]
    pub label_source: LabelSource,
    /// Seed of the initialisation and the sampler.
    #[arg(long, default_value_t = 0, help_heading = "Recipe")]
    pub seed: u64,
    /// Row groups shuffled together by the sampler.
    #[arg(long, default_value_t = 16, help_heading = "Recipe")]
    pub window: usize,
    #[command(flatten)]
    #[serde(flatten)]
    pub resources: Resources,
    /// Log a metrics row every N steps.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 10,
        help_heading = "Logs and checkpoints"
    )]
    pub log_every: u64,
    /// Checkpoint every N steps (and at the end).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1000,
        help_heading = "Logs and checkpoints"
    )]
    pub checkpoint_every: u64,
    /// Checkpoints kept (the newest).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2,
        help_heading = "Logs and checkpoints"
    )]
    pub keep_checkpoints: usize,
    /// Evaluate the EMA every N steps; 0: at the end only.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help_heading = "Logs and checkpoints"
    )]
    pub eval_every: u64,
    /// Records of the eval split per evaluation.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16_384,
        help_heading = "Logs and checkpoints"
    )]
    pub eval_records: usize,
    /// Train records the predict-the-marginal baseline is estimated from.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1_000_000,
        help_heading = "Logs and checkpoints"
    )]
    pub marginal_records: usize,
    #[command(flatten)]
    #[serde(flatten)]
    pub compute: Compute,
}

crate::options::stage!(TrainOptions, "train");

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
    pub policy: RecordSet,
    pub model: Preset,
    /// The network family (recipes saved before it existed: transformer).
    #[serde(default, skip_serializing_if = "Architecture::is_transformer")]
    pub architecture: Architecture,
    /// Blocks when not the preset's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
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
    pub label_source: LabelSource,
    pub seed: u64,
    /// Row groups shuffled together by the sampler.
    pub window: usize,
    /// Loader threads.
    pub workers: usize,
    /// The loader's memory budget, bytes.
    #[serde(default = "default_memory_limit")]
    pub memory_limit: u64,
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
    /// Draw a progress bar. From the invocation: not part of the recipe
    /// saved with the checkpoints.
    #[serde(skip)]
    pub progress: bool,
    /// Discard the run's checkpoints and logs and start from step 0
    /// (`--restart`). From the invocation, like `progress`.
    #[serde(skip)]
    pub restart: bool,
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
    "memory_limit",
    "log_every",
    "checkpoint_every",
    "keep_checkpoints",
    "eval_every",
];

/// The loader's budget of a recipe saved before it had one.
fn default_memory_limit() -> u64 {
    MEMORY_LIMIT_BYTES
}

impl TrainConfig {
    /// The shape of the model this recipe trains.
    pub fn shape(&self) -> ModelShape {
        let mut shape = ModelShape::preset(self.model, self.policy, self.buckets);
        shape.architecture = self.architecture;
        if let Some(layers) = self.layers {
            shape.layers = layers;
        }
        shape
    }

    /// The run's output directory `RUN/train/NAME`.
    pub fn out_dir(&self) -> PathBuf {
        self.run.join("train").join(&self.name)
    }

    /// The options that differ from `saved` and may not change on resume.
    pub(crate) fn incompatible_with(&self, saved: &TrainConfig) -> Vec<String> {
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
    /// Validates and fills the defaults that depend on other options;
    /// `env` gives the progress bar and `--restart` (as its overwrite).
    pub fn resolve(&self, env: &Env) -> Result<TrainConfig, TrainConfigError> {
        let run = self.run.run.clone().ok_or(TrainConfigError::NoRun)?;
        let recipe = &self.recipe;
        let policy = recipe.policy;
        let loss = recipe.loss.unwrap_or(match policy {
            RecordSet::BehavioralCloning => Loss::CrossEntropy,
            _ => Loss::HlGauss,
        });
        if policy == RecordSet::BehavioralCloning && loss != Loss::CrossEntropy {
            return Err(invalid(
                "loss",
                format!(
                    "{loss:?} needs value buckets; behavioural cloning predicts actions, use cross_entropy"
                ),
            ));
        }
        let model = recipe.model;
        let name = self.name.clone().unwrap_or_else(|| {
            let p = match policy {
                RecordSet::ActionValue => "av",
                RecordSet::StateValue => "sv",
                RecordSet::BehavioralCloning => "bc",
            };
            format!("{p}_{}", model.name())
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
        let buckets = recipe.buckets;
        if !(2..=crate::chess::actions::NUM_ACTIONS).contains(&buckets) {
            return Err(invalid(
                "buckets",
                format!("expected 2..=1968 value buckets, got {buckets}"),
            ));
        }
        let positive = |option: &'static str, v: u64| {
            if v == 0 {
                Err(invalid(option, "must be at least 1"))
            } else {
                Ok(v)
            }
        };
        let unit = |option: &'static str, v: f64| {
            if (0.0..1.0).contains(&v) {
                Ok(v)
            } else {
                Err(invalid(
                    option,
                    format!("expected a value in [0, 1), got {v}"),
                ))
            }
        };
        let learning_rate = recipe.learning_rate;
        if !(learning_rate > 0.0 && learning_rate.is_finite()) {
            return Err(invalid(
                "learning_rate",
                format!("must be > 0, got {learning_rate}"),
            ));
        }
        let grad_clip = recipe.grad_clip;
        if grad_clip.is_nan() || grad_clip <= 0.0 {
            return Err(invalid(
                "grad_clip",
                format!("must be > 0, got {grad_clip}"),
            ));
        }
        let adam_epsilon = recipe.adam_epsilon;
        if adam_epsilon.is_nan() || adam_epsilon <= 0.0 {
            return Err(invalid("adam_epsilon", "must be > 0"));
        }
        let Compute {
            device, precision, ..
        } = self.compute;
        if recipe.architecture == Architecture::Cnn && precision != Precision::F32 {
            return Err(invalid(
                "precision",
                "the ConvNet (architecture cnn) computes in f32 only",
            ));
        }
        Ok(TrainConfig {
            run,
            name,
            split: self.split.clone(),
            eval_split: (!self.eval_split.is_empty()).then(|| self.eval_split.clone()),
            policy,
            model,
            architecture: recipe.architecture,
            layers: match recipe.layers {
                Some(0) => return Err(invalid("layers", "must be at least 1")),
                layers => layers,
            },
            buckets,
            loss,
            batch_size: positive("batch_size", recipe.batch_size as u64)? as usize,
            learning_rate,
            adam_beta1: unit("adam_beta1", recipe.adam_beta1)?,
            adam_beta2: unit("adam_beta2", recipe.adam_beta2)?,
            adam_epsilon,
            grad_clip,
            ema_decay: unit("ema_decay", recipe.ema_decay)?,
            steps: positive("steps", self.steps)?,
            sampling: self.sampling,
            label_source: self.label_source,
            seed: self.seed,
            window: positive("window", self.window as u64)? as usize,
            workers: positive("jobs", self.resources.jobs.jobs.unwrap_or(1) as u64)? as usize,
            memory_limit: self.resources.budget.bytes(),
            log_every: positive("log_every", self.log_every)?,
            checkpoint_every: positive("checkpoint_every", self.checkpoint_every)?,
            keep_checkpoints: positive("keep_checkpoints", self.keep_checkpoints as u64)? as usize,
            eval_every: self.eval_every,
            eval_records: positive("eval_records", self.eval_records as u64)? as usize,
            marginal_records: positive("marginal_records", self.marginal_records as u64)? as usize,
            device,
            precision,
            progress: env.progress,
            restart: env.overwrite,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(table: &str) -> TrainOptions {
        crate::options::from_table(table).unwrap()
    }

    #[test]
    fn defaults_follow_the_policy() {
        let c = options("run = \"r\"\npolicy = \"behavioral_cloning\"")
            .resolve(&Env::default())
            .unwrap();
        assert_eq!(c.loss, Loss::CrossEntropy);
        assert_eq!(c.name, "bc_tiny");
        let c = options("run = \"r\"").resolve(&Env::default()).unwrap();
        assert_eq!((c.policy, c.loss), (RecordSet::ActionValue, Loss::HlGauss));
        assert_eq!(c.eval_split.as_deref(), Some("test"));
    }

    #[test]
    fn bad_options_are_named() {
        let err = |t: &str| options(t).resolve(&Env::default()).unwrap_err().to_string();
        assert!(err("run=\"r\"\npolicy=\"behavioral_cloning\"\nloss=\"l2\"").contains("loss"));
        assert!(err("run=\"r\"\nbuckets=1").contains("buckets"));
        // Mixed bf16 runs on every device (emulated products on the CPU).
        assert!(
            options("run=\"r\"\nprecision=\"bf16\"")
                .resolve(&Env::default())
                .is_ok()
        );
        assert!(crate::options::from_table::<TrainOptions>("precision=\"f8\"").is_err());
        assert!(err("run=\"r\"\nname=\"../x\"").contains("name"));
        assert!(err("run=\"r\"\nema_decay=1.5").contains("ema_decay"));
        assert!(crate::options::from_table::<TrainOptions>("batch=3").is_err());
        assert!(crate::options::from_table::<TrainOptions>("batch_size=\"x\"").is_err());
    }

    #[test]
    fn resume_compatibility() {
        let a = options("run=\"r\"\nsteps=10")
            .resolve(&Env::default())
            .unwrap();
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
