//! A trained predictor loaded from a checkpoint, for inference only: the
//! shape and policy come from the checkpoint's `state.json`, the weights
//! from its EMA (what the paper evaluates) or its raw parameters.

use std::path::{Path, PathBuf};

use super::error::PlayerError;
use crate::{
    chess::{RecordSet, value::ValueBuckets},
    model::{
        Architecture, CheckpointInfo, DeviceKind, ModelBackend, ModelShape, Precision, Predictor,
        Preset, Weights,
        checkpoint::{self, InferenceRecipe},
        cpu::CpuPredictor,
        tokens_tensor,
    },
};

/// Sequences (legal moves) the boards of one
/// [`predict_many`](super::predict::predict_many) batch add up to at most,
/// fewer where the memory limit says so ([`Model::with_batch_memory`]): the
/// model splits them into passes its device memory allows
/// ([`Model::log_probs`]); a board is never split between batches.
pub const BATCH_SEQUENCES: usize = 32 * 1024;

/// Runs whole sequences through a model on some backend.
trait Forward {
    /// Log-probabilities, `rows x outputs` row-major, of `tokens` (`rows`
    /// sequences of `seq_len` tokens, the target slot included).
    fn log_probs(&self, tokens: &[i32], seq_len: usize) -> Result<Vec<f32>, PlayerError>;

    /// Computes in `precision` from now on.
    fn set_precision(&mut self, precision: Precision) -> Result<(), PlayerError>;

    /// One forward pass over the first sequences of `tokens` (as many as
    /// one pass takes), the device synchronised between its phases.
    fn pass_phases(&self, tokens: &[i32], seq_len: usize) -> Result<PassPhases, PlayerError>;
}

/// Where one forward pass's time goes ([`Model::pass_phases`]), in seconds,
/// with the device synchronised after each phase (so the three add up to
/// a little more than an unsynchronised pass).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PassPhases {
    /// Sequences in the pass.
    pub sequences: usize,
    /// Copying the tokens to the device (nothing on the CPU).
    pub upload_s: f64,
    /// The network, log-softmax included.
    pub forward_s: f64,
    /// Copying the log-probabilities back as f32 (nothing on the CPU).
    pub download_s: f64,
    /// Bytes of tokens copied in and log-probabilities copied back.
    pub bytes: u64,
}

struct BurnForward<B: ModelBackend> {
    model: Predictor<B>,
    device: B::Device,
    /// Sequences per forward pass ([`sequences_per_pass`]).
    pass_sequences: usize,
}

/// Bytes of activations one forward pass of the burn network may hold
/// (a GPU's memory is far larger; this keeps room for the weights and
/// CubeCL's pools while the products stay large).
const PASS_BYTES: usize = 4 << 30;

/// Sequences per forward pass of the burn network under [`PASS_BYTES`]:
/// about `seq_len x d x (2 x widening + 8)` f32 values of activations live
/// in a block per sequence (the residual, the norm, q|k|v, the attention's
/// scores and context, gate|up): 1.9 MB a sequence for 9M (about 2,200 a
/// pass by memory), 7.8 MB for d = 1024 (about 550).
///
/// At most [`KERNEL_ELEMENTS`] elements in the widest activation, so that
/// the GPUs' fused kernels take every tensor of the pass: a gate|up
/// product of 161,792 elements a sequence of 79 tokens for 9M (at most
/// 1,659 a pass), 647,168 for d = 1024 (at most 414).
pub fn sequences_per_pass(shape: &ModelShape) -> usize {
    let per = shape.seq_len * shape.d_model * (2 * shape.widening + 8) * 4
        + shape.heads * shape.seq_len * shape.seq_len * 4;
    let widest = (shape.widest_activation_bytes(1) / 4).max(1) as usize;
    (PASS_BYTES / per.max(1))
        .min(KERNEL_ELEMENTS / widest)
        .max(1)
}

/// The most elements a tensor of the GPUs' fused kernels may have (their
/// u32 indices on buffers CUDA pads up to 4x: `gpu::layers`' and
/// `gpu::attention`'s `MAX_ELEMENTS`); a wider one runs burn's operations.
const KERNEL_ELEMENTS: usize = 1 << 28;

/// [`sequences_per_pass`] on a device whose buffers hold at most
/// `max_buffer` bytes (wgpu's storage buffers: 128 MiB on lavapipe, often
/// 2-4 GiB on a GPU): the widest activation of a pass must fit one
/// ([`ModelShape::widest_activation_bytes`]).
pub fn sequences_per_pass_within(shape: &ModelShape, max_buffer: Option<u64>) -> usize {
    let pass = sequences_per_pass(shape);
    match max_buffer {
        Some(max) => pass.min((max / shape.widest_activation_bytes(1).max(1)).max(1) as usize),
        None => pass,
    }
}

impl<B: ModelBackend> Forward for BurnForward<B> {
    fn log_probs(&self, tokens: &[i32], seq_len: usize) -> Result<Vec<f32>, PlayerError> {
        let mut out = Vec::new();
        for chunk in tokens.chunks(self.pass_sequences * seq_len) {
            let input = tokens_tensor::<B>(chunk, seq_len, &self.device);
            let rows = self
                .model
                .forward(input)
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .map_err(|e| PlayerError::Tensor(format!("{e:?}")))?;
            if out.is_empty() {
                out = rows;
            } else {
                out.extend_from_slice(&rows);
            }
        }
        Ok(out)
    }

    fn set_precision(&mut self, precision: Precision) -> Result<(), PlayerError> {
        self.model = self.model.clone().with_precision(precision);
        Ok(())
    }

    fn pass_phases(&self, tokens: &[i32], seq_len: usize) -> Result<PassPhases, PlayerError> {
        use std::time::Instant;
        let sync = || B::sync(&self.device).map_err(|e| PlayerError::Tensor(format!("{e:?}")));
        let chunk = &tokens[..tokens.len().min(self.pass_sequences * seq_len)];
        sync()?;
        let t = Instant::now();
        let input = tokens_tensor::<B>(chunk, seq_len, &self.device);
        sync()?;
        let upload_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let output = self.model.forward(input);
        sync()?;
        let forward_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let rows = output
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .map_err(|e| PlayerError::Tensor(format!("{e:?}")))?;
        Ok(PassPhases {
            sequences: chunk.len() / seq_len,
            upload_s,
            forward_s,
            download_s: t.elapsed().as_secs_f64(),
            bytes: (4 * (chunk.len() + rows.len())) as u64,
        })
    }
}

/// `--device cpu`: the fused inference path (same network, same numbers
/// within float rounding, several times faster than the burn graph).
impl Forward for CpuPredictor {
    fn log_probs(&self, tokens: &[i32], seq_len: usize) -> Result<Vec<f32>, PlayerError> {
        CpuPredictor::log_probs(self, tokens, seq_len)
            .map_err(|e| PlayerError::Tensor(e.to_string()))
    }

    fn set_precision(&mut self, precision: Precision) -> Result<(), PlayerError> {
        crate::model::check_compute(DeviceKind::Cpu, precision, crate::model::Use::Evaluate)?;
        Ok(())
    }

    /// The whole batch is one pass on the CPU, in host memory.
    fn pass_phases(&self, tokens: &[i32], seq_len: usize) -> Result<PassPhases, PlayerError> {
        let t = std::time::Instant::now();
        Forward::log_probs(self, tokens, seq_len)?;
        Ok(PassPhases {
            sequences: tokens.len() / seq_len,
            forward_s: t.elapsed().as_secs_f64(),
            ..PassPhases::default()
        })
    }
}

/// A checkpoint's model on the CPU: read with burn, run fused.
fn load_cpu(
    dir: &Path,
    weights: Weights,
    state: &CheckpointInfo,
) -> Result<Box<dyn Forward>, PlayerError> {
    let device = Default::default();
    if state.shape.architecture == Architecture::Cnn {
        // No fused path for the ConvNet: burn's graph on the CPU.
        return load_on::<burn::backend::Flex>(dir, weights, state, device);
    }
    let model = checkpoint::load_module(
        dir,
        weights.file(),
        Predictor::<burn::backend::Flex>::new(&state.shape, &device),
        &device,
    )?;
    Ok(Box::new(model.to_cpu(&state.shape)))
}

fn load_on<B: ModelBackend>(
    dir: &Path,
    weights: Weights,
    state: &CheckpointInfo,
    device: B::Device,
) -> Result<Box<dyn Forward>, PlayerError> {
    let model = checkpoint::load_module(
        dir,
        weights.file(),
        Predictor::<B>::new(&state.shape, &device),
        &device,
    )?;
    Ok(Box::new(BurnForward {
        pass_sequences: sequences_per_pass_within(&state.shape, B::max_buffer_bytes(&device)),
        model,
        device,
    }))
}

#[cfg_attr(not(gpu), allow(dead_code))]
fn random_on<B: ModelBackend>(shape: &ModelShape, device: B::Device) -> Box<dyn Forward> {
    Box::new(BurnForward {
        model: Predictor::<B>::new(shape, &device),
        pass_sequences: sequences_per_pass_within(shape, B::max_buffer_bytes(&device)),
        device,
    })
}

/// The wgpu device, set up once per process.
#[cfg(feature = "wgpu")]
fn wgpu_device() -> Result<cubecl::wgpu::WgpuDevice, PlayerError> {
    crate::model::gpu::wgpu::device()
        .map_err(|e| crate::model::ComputeError::NoAdapter(e.to_string()).into())
}

/// A checkpoint ready to score sequences.
pub struct Model {
    /// The checkpoint directory (`.../checkpoints/step-N`).
    pub checkpoint: PathBuf,
    pub state: CheckpointInfo,
    pub weights: Weights,
    /// Bucket centres (value policies).
    pub buckets: Option<ValueBuckets>,
    forward: Box<dyn Forward>,
    /// Where it runs.
    device: DeviceKind,
    precision: Precision,
    /// Sequences [`crate::eval::predict::predict_many`] gathers in one batch
    /// ([`Model::with_batch_memory`]).
    batch_sequences: usize,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("checkpoint", &self.checkpoint)
            .field("step", &self.state.step)
            .field("policy", &self.state.config.policy)
            .finish()
    }
}

impl Model {
    /// Loads `path`: a checkpoint directory, or a training run's directory
    /// (its newest checkpoint).
    pub(crate) fn load(
        path: &Path,
        weights: Weights,
        device: DeviceKind,
    ) -> Result<Model, PlayerError> {
        if !path.exists() {
            return Err(PlayerError::NoCheckpoint(path.to_owned()));
        }
        let (dir, state): (PathBuf, CheckpointInfo) = checkpoint::read_state(path)?;
        let forward = match device {
            DeviceKind::Cpu => load_cpu(&dir, weights, &state)?,
            #[cfg(feature = "cuda")]
            DeviceKind::Cuda => {
                crate::model::gpu::cache::configure_kernel_cache();
                load_on::<burn::backend::Cuda<f32, i32>>(&dir, weights, &state, Default::default())?
            }
            #[cfg(feature = "wgpu")]
            DeviceKind::Wgpu => {
                crate::model::gpu::cache::configure_kernel_cache();
                load_on::<burn::backend::Wgpu<f32, i32>>(&dir, weights, &state, wgpu_device()?)?
            }
            #[allow(unreachable_patterns)]
            other => return Err(crate::model::ComputeError::NotBuilt(other).into()),
        };
        let buckets = match state.config.policy {
            RecordSet::BehavioralCloning => None,
            _ => Some(ValueBuckets::new(state.shape.outputs)?),
        };
        Ok(Model {
            checkpoint: dir,
            state,
            weights,
            buckets,
            forward,
            device,
            precision: Precision::F32,
            batch_sequences: BATCH_SEQUENCES,
        })
    }

    /// A freshly initialised model of a preset on `device` (benchmarks:
    /// throughput does not depend on the weights).
    pub fn random(
        preset: Preset,
        policy: RecordSet,
        buckets: usize,
        device: DeviceKind,
    ) -> Result<Model, PlayerError> {
        let shape = ModelShape::preset(preset, policy, buckets);
        let forward: Box<dyn Forward> = match device {
            DeviceKind::Cpu => Box::new(
                Predictor::<burn::backend::Flex>::new(&shape, &Default::default()).to_cpu(&shape),
            ),
            #[cfg(feature = "cuda")]
            DeviceKind::Cuda => {
                crate::model::gpu::cache::configure_kernel_cache();
                random_on::<burn::backend::Cuda<f32, i32>>(&shape, Default::default())
            }
            #[cfg(feature = "wgpu")]
            DeviceKind::Wgpu => {
                crate::model::gpu::cache::configure_kernel_cache();
                random_on::<burn::backend::Wgpu<f32, i32>>(&shape, wgpu_device()?)
            }
            #[allow(unreachable_patterns)]
            other => return Err(crate::model::ComputeError::NotBuilt(other).into()),
        };
        let buckets = match policy {
            RecordSet::BehavioralCloning => None,
            _ => Some(ValueBuckets::new(buckets)?),
        };
        Ok(Model {
            checkpoint: PathBuf::from("(random)"),
            state: CheckpointInfo {
                step: 0,
                config: InferenceRecipe {
                    name: "random".into(),
                    policy,
                },
                shape,
            },
            weights: Weights::Raw,
            buckets,
            forward,
            device,
            precision: Precision::F32,
            batch_sequences: BATCH_SEQUENCES,
        })
    }

    /// The same model computing in `precision`: f32, or (CUDA) bf16 or
    /// (wgpu) f16 products and activations with the layer norms and the
    /// log-softmax in f32, as training's mixed precision.
    pub fn with_precision(mut self, precision: Precision) -> Result<Model, PlayerError> {
        crate::model::check_compute(self.device, precision, crate::model::Use::Evaluate)?;
        self.forward.set_precision(precision)?;
        self.precision = precision;
        Ok(self)
    }

    /// The same model gathering its batches within `bytes` of host memory:
    /// the batches in flight (the one being tokenised and the one being
    /// scored, their tokens and log-probabilities). The weights and the
    /// fused CPU path's activations, which it computes a few hundred rows at
    /// a time, are beside them (`eval`'s share of the limit for each:
    /// [`crate::eval::MEMORY`]).
    pub fn with_batch_memory(mut self, bytes: u64) -> Model {
        let shape = &self.state.shape;
        let per_sequence = 2 * (shape.seq_len + shape.outputs) * std::mem::size_of::<f32>();
        let fit = bytes / per_sequence.max(1) as u64;
        self.batch_sequences = (fit as usize).clamp(1, BATCH_SEQUENCES);
        self
    }

    /// Sequences one batch of [`crate::eval::predict::predict_many`] holds at
    /// most (a board with more legal moves still goes whole).
    pub(crate) fn batch_sequences(&self) -> usize {
        self.batch_sequences
    }

    /// The precision the model computes in.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The policy the model was trained for.
    pub(crate) fn policy(&self) -> RecordSet {
        self.state.config.policy
    }

    /// Tokens per sequence (the target slot included).
    pub(crate) fn seq_len(&self) -> usize {
        self.state.shape.seq_len
    }

    /// Outputs per sequence (K buckets or 1968 actions).
    pub(crate) fn outputs(&self) -> usize {
        self.state.shape.outputs
    }

    /// A short name: `NAME@STEP`.
    pub(crate) fn label(&self) -> String {
        format!("{}@{}", self.state.config.name, self.state.step)
    }

    /// Log-probabilities `rows x outputs` of whole sequences.
    pub fn log_probs(&self, tokens: &[i32]) -> Result<Vec<f32>, PlayerError> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let out = self.forward.log_probs(tokens, self.seq_len())?;
        // --require-fused: stop at the first batch that met a fallback.
        crate::model::check_fused()?;
        Ok(out)
    }

    /// Where one forward pass over the first sequences of `tokens` (as
    /// many as one pass takes) spends its time: copies in, the network,
    /// copies back, the device synchronised after each.
    pub(crate) fn pass_phases(&self, tokens: &[i32]) -> Result<PassPhases, PlayerError> {
        self.forward.pass_phases(tokens, self.seq_len())
    }
}

/// `sum_k exp(log_probs_k) * values_k`.
pub(crate) fn expected_value(log_probs: &[f32], values: &[f64]) -> f64 {
    log_probs
        .iter()
        .zip(values)
        .map(|(&lp, &v)| f64::from(lp).exp() * v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_value_of_a_point_mass_is_its_centre() {
        let b = ValueBuckets::new(4).unwrap();
        let lp = [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY];
        assert!((expected_value(&lp, b.values()) - 0.375).abs() < 1e-12);
        let uniform = [(0.25f32).ln(); 4];
        assert!((expected_value(&uniform, b.values()) - 0.5).abs() < 1e-6);
    }

    /// A synchronised pass over burn's network computes one pass's worth
    /// of sequences and counts the bytes copied: the tokens in, `outputs`
    /// f32 log-probabilities per sequence back.
    #[test]
    fn a_synchronised_pass_times_one_pass_and_counts_its_copies() {
        let shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
        let mut forward = BurnForward {
            model: Predictor::<burn::backend::Flex>::new(&shape, &Default::default()),
            device: Default::default(),
            pass_sequences: 3,
        };
        let tokens = vec![1; 5 * shape.seq_len];
        let p = forward.pass_phases(&tokens, shape.seq_len).unwrap();
        assert_eq!(p.sequences, 3);
        assert_eq!(p.bytes, 4 * 3 * (shape.seq_len + 32) as u64);
        assert!(p.forward_s > 0.0 && p.upload_s >= 0.0 && p.download_s >= 0.0);
        forward.pass_sequences = 100;
        assert_eq!(
            forward
                .pass_phases(&tokens, shape.seq_len)
                .unwrap()
                .sequences,
            5
        );
    }

    #[test]
    fn a_missing_checkpoint_is_a_clear_error() {
        let err = Model::load(
            Path::new("/nonexistent/run/train/x"),
            Weights::Ema,
            DeviceKind::Cpu,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/run/train/x"),
            "{err}"
        );
    }
}
