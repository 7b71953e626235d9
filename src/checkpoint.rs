//! `chessbench checkpoint import` and `chessbench checkpoint init`: a model
//! written as a checkpoint that `eval`, `uci` and `--opponent checkpoint:`
//! load, from searchless_chess's parameters ([`import`], read through
//! [`crate::model::haiku`]) or from training's seeded initialisation
//! ([`init`]), in the layout of [`crate::model::checkpoint`].

use std::path::PathBuf;

use burn::{backend::Flex, module::Module, tensor::backend::Backend};

use crate::{
    chess::RecordSet,
    model::{
        CheckpointError, ModelShape, Predictor, Preset,
        checkpoint::{describe, write_inference},
        haiku::{HaikuError, HaikuParams},
    },
    ui::Report,
};

/// `chessbench checkpoint import`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct CheckpointImportOptions {
    /// searchless_chess parameters as safetensors, named by haiku's paths
    /// (`embed/embeddings`, `linear_6/w`, ...): their `params` tree.
    #[arg(value_name = "PARAMS", value_hint = clap::ValueHint::FilePath)]
    pub params: PathBuf,
    /// Their EMA parameters (`params_ema`), the ones they evaluate; without
    /// it PARAMS serve as both.
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub ema: Option<PathBuf>,
    /// What the model predicts.
    #[arg(long, value_enum)]
    pub policy: RecordSet,
    /// The preset the parameters must fit.
    #[arg(long, value_enum)]
    pub model: Preset,
    /// Value buckets (value policies; the published models use 128).
    #[arg(long, value_name = "K", default_value_t = 128)]
    pub buckets: usize,
    /// Training steps the parameters had, recorded in the checkpoint (the
    /// published models: 6400000).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub step: u64,
    /// Directory to write, as a chessbench training run
    /// (DIR/checkpoints/step-N/); it must not exist.
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: PathBuf,
}

/// What `chessbench checkpoint import` wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckpointImportSummary {
    pub checkpoint: PathBuf,
    pub policy: RecordSet,
    pub shape: ModelShape,
    pub parameters: u64,
}

impl Report for CheckpointImportSummary {
    fn render(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "imported a {} into {}",
            describe(&self.shape, self.policy, self.parameters),
            self.checkpoint.display()
        )
    }
}

/// Writes searchless_chess parameters as a chessbench checkpoint that
/// `eval`, `uci` and `--opponent checkpoint:` load (it has no optimiser
/// state: training does not resume from it). Nothing is left behind on
/// failure: the checkpoint is written beside `out` and renamed into place.
pub fn import(options: &CheckpointImportOptions) -> Result<CheckpointImportSummary, HaikuError> {
    let shape = ModelShape::preset(options.model, options.policy, options.buckets);
    let device = Default::default();
    let model = HaikuParams::read(&options.params)?.predictor::<Flex>(&shape, &device)?;
    let ema = match &options.ema {
        Some(path) => HaikuParams::read(path)?.predictor::<Flex>(&shape, &device)?,
        None => model.clone(),
    };
    let parameters = model.num_params() as u64;
    let checkpoint = write_inference(
        &options.out,
        options.step,
        options.policy,
        &shape,
        &model,
        &ema,
        "imported_from",
        serde_json::json!({
            "code": "google-deepmind/searchless_chess (haiku parameters)",
            "params": options.params,
            "ema": options.ema,
        }),
    )?;
    Ok(CheckpointImportSummary {
        checkpoint,
        policy: options.policy,
        shape,
        parameters,
    })
}

/// `chessbench checkpoint init`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct InitOptions {
    /// What the model predicts.
    #[arg(long, value_enum)]
    pub policy: RecordSet,
    /// The model's size.
    #[arg(long, value_enum)]
    pub model: Preset,
    /// Value buckets (value policies; the paper's models use 128).
    #[arg(long, value_name = "K", default_value_t = 128)]
    pub buckets: usize,
    /// Seed of the initialisation (the same seed, the same weights).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Directory to write, as a chessbench training run
    /// (DIR/checkpoints/step-000000000/); it must not exist.
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: PathBuf,
}

/// What `chessbench checkpoint init` wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitSummary {
    pub checkpoint: PathBuf,
    pub policy: RecordSet,
    pub shape: ModelShape,
    pub parameters: u64,
    pub seconds: f64,
}

impl Report for InitSummary {
    fn render(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "wrote a randomly initialised {} to {} in {:.1} s",
            describe(&self.shape, self.policy, self.parameters),
            self.checkpoint.display(),
            self.seconds
        )
    }
}

/// Writes a randomly initialised model of a preset as a step-0
/// checkpoint (training's initialisation, seeded; the EMA equals the
/// parameters), which `eval`, `uci` and `--opponent checkpoint:` load:
/// for timing evaluation at a model size before any training.
pub fn init(options: &InitOptions) -> Result<InitSummary, CheckpointError> {
    let start = std::time::Instant::now();
    let shape = ModelShape::preset(options.model, options.policy, options.buckets);
    let device = Default::default();
    Flex::seed(&device, options.seed);
    let model = Predictor::<Flex>::new(&shape, &device);
    let parameters = model.num_params() as u64;
    let checkpoint = write_inference(
        &options.out,
        0,
        options.policy,
        &shape,
        &model,
        &model,
        "initialised",
        serde_json::json!({ "seed": options.seed, "preset": options.model }),
    )?;
    Ok(InitSummary {
        checkpoint,
        policy: options.policy,
        shape,
        parameters,
        seconds: start.elapsed().as_secs_f64(),
    })
}
