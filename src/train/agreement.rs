//! Does the GPU compute what the CPU computes? One training step's forward
//! pass, loss and gradients of the same predictor (the same weights, copied
//! from one backend to the other through a burn record) on the same batch,
//! on two backends, compared tensor by tensor as relative errors
//! `||a - b|| / ||b||` (the CPU's `flex` backend in f32 is the reference;
//! the other side may compute in mixed bf16). The CUDA test
//! (`tests/cuda.rs`, run on a GPU machine) bounds them.

use burn::{
    module::{Module, ModuleVisitor, Param},
    optim::GradientsParams,
    record::{BinBytesRecorder, FullPrecisionSettings, Recorder},
    tensor::{
        Int, Tensor, TensorData,
        backend::{AutodiffBackend, Backend},
    },
};
use serde::Serialize;

use super::{
    error::TrainError,
    loss::{self, Loss, ValueSupport},
    sampler::SplitMix64,
};
use crate::{
    chess::value::ValueBuckets,
    model::{ModelShape, Precision, Predictor, Products, TrainBackend, tokens_tensor},
};

/// One batch of random records of `shape`'s size (token ids below the
/// vocabulary, targets below the outputs, win probabilities in [0, 1)):
/// what the step benchmark ([`super::throughput`]) and this comparison feed
/// the model.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub(crate) tokens: Vec<i32>,
    pub(crate) targets: Vec<i32>,
    pub(crate) win: Vec<f32>,
}

impl Batch {
    /// `n` records drawn from `rng`.
    pub(crate) fn random(shape: &ModelShape, n: usize, rng: &mut SplitMix64) -> Batch {
        let tokens = (0..n * shape.seq_len)
            .map(|_| rng.below(shape.vocab as u64) as i32)
            .collect();
        let targets = (0..n)
            .map(|_| rng.below(shape.outputs as u64) as i32)
            .collect();
        let win = (0..n)
            .map(|_| rng.below(1 << 20) as f32 / (1 << 20) as f32)
            .collect();
        Batch {
            tokens,
            targets,
            win,
        }
    }
}

/// What one backend computed for the batch.
struct Pass {
    log_probs: Vec<f32>,
    loss: Vec<f32>,
    /// (parameter path, gradient) in the module's visiting order.
    grads: Vec<(String, Vec<f32>)>,
}

/// Relative errors of one backend against the reference.
#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    /// The log-probabilities of the batch (batch x outputs).
    pub log_probs: f64,
    /// The scalar loss.
    pub loss: f64,
    /// The largest relative error over the parameters' gradients, and the
    /// parameter it belongs to.
    pub grads_max: f64,
    pub worst_grad: String,
    /// Parameters compared (each must have a gradient on both sides).
    pub params: usize,
    /// The compared backend's products and precision.
    pub products: Products,
    pub precision: Precision,
}

impl Agreement {
    /// The largest of the three errors.
    pub fn max(&self) -> f64 {
        self.log_probs.max(self.loss).max(self.grads_max)
    }
}

/// `||a - b|| / ||b||` (0 when both are zero).
fn relative_error(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "tensors of different sizes");
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        diff += (f64::from(x) - f64::from(y)).powi(2);
        norm += f64::from(y).powi(2);
    }
    if diff == 0.0 {
        0.0
    } else {
        (diff / norm).sqrt()
    }
}

fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("f32 values")
}

/// Collects every float parameter's gradient with its path.
struct Collect<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    path: Vec<String>,
    out: Vec<(String, Vec<f32>)>,
    _backend: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_owned());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let name = self.path.join(".");
        let grad = self
            .grads
            .get::<B::InnerBackend, D>(param.id)
            .map(values)
            .unwrap_or_default();
        self.out.push((name, grad));
    }
}

fn pass<B: TrainBackend>(
    model: &Predictor<B>,
    shape: &ModelShape,
    loss_kind: Loss,
    batch: &Batch,
    device: &B::Device,
) -> Result<Pass, TrainError> {
    let n = batch.targets.len();
    let buckets = ValueBuckets::new(shape.outputs.max(2))
        .map_err(|_| super::data::DataError::Buckets(shape.outputs))?;
    let support = ValueSupport::<B>::new(&buckets, device);
    let x = tokens_tensor::<B>(&batch.tokens, shape.seq_len, device);
    let y = Tensor::<B, 1, Int>::from_data(TensorData::new(batch.targets.clone(), [n]), device);
    let w = Tensor::<B, 1>::from_data(TensorData::new(batch.win.clone(), [n]), device);
    let log_probs = model.forward(x);
    let loss = loss::batch_loss(loss_kind, log_probs.clone(), y, w, &support);
    let grads = GradientsParams::from_grads(loss.clone().backward(), model);
    let mut collect = Collect::<B> {
        grads: &grads,
        path: Vec::new(),
        out: Vec::new(),
        _backend: std::marker::PhantomData,
    };
    model.visit(&mut collect);
    Ok(Pass {
        log_probs: values(log_probs.inner()),
        loss: values(loss.inner()),
        grads: collect.out,
    })
}

/// One step of a freshly initialised predictor of `shape` on a random batch
/// of `batch` records, on the reference backend `R` (f32) and on `B` (in
/// `precision`) from the same weights: the relative errors of `B` against
/// `R`.
pub fn compare_backends<R: TrainBackend, B: TrainBackend>(
    shape: &ModelShape,
    loss: Loss,
    batch: usize,
    seed: u64,
    precision: Precision,
    reference_device: &R::Device,
    device: &B::Device,
) -> Result<Agreement, TrainError> {
    R::seed(reference_device, seed);
    let reference = Predictor::<R>::new(shape, reference_device);
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let record_error = |e: burn::record::RecorderError| TrainError::Backend(e.to_string());
    let bytes = recorder
        .record(reference.clone().into_record(), ())
        .map_err(record_error)?;
    let record = recorder.load(bytes, device).map_err(record_error)?;
    let model = Predictor::<B>::new(shape, device)
        .load_record(record)
        .with_precision(precision);
    let batch = Batch::random(
        shape,
        batch.max(1),
        &mut SplitMix64::new(seed ^ 0x9e37_79b9),
    );
    let want = pass::<R>(&reference, shape, loss, &batch, reference_device)?;
    let got = pass::<B>(&model, shape, loss, &batch, device)?;
    if want.grads.len() != got.grads.len() {
        return Err(TrainError::Backend(format!(
            "{} parameters on the reference backend, {} on the other",
            want.grads.len(),
            got.grads.len()
        )));
    }
    let mut grads_max = 0.0f64;
    let mut worst_grad = String::new();
    for ((name, a), (_, b)) in got.grads.iter().zip(&want.grads) {
        if a.is_empty() || b.is_empty() || a.len() != b.len() {
            return Err(TrainError::Backend(format!(
                "parameter {name}: gradient of {} values on the reference backend, {} on the other",
                b.len(),
                a.len()
            )));
        }
        let e = relative_error(a, b);
        // A NaN is the worst of all.
        if !grads_max.is_nan() && (e.is_nan() || e > grads_max) {
            grads_max = e;
            worst_grad.clone_from(name);
        }
    }
    Ok(Agreement {
        log_probs: relative_error(&got.log_probs, &want.log_probs),
        loss: relative_error(&got.loss, &want.loss),
        grads_max,
        worst_grad,
        params: want.grads.len(),
        products: B::products(),
        precision,
    })
}

/// One step's loss on the reference backend and on the other.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StepLoss {
    pub step: usize,
    pub reference: f32,
    pub other: f32,
}

impl StepLoss {
    /// `|other - reference| / |reference|` (infinite for a NaN).
    pub fn relative(&self) -> f64 {
        let d = (f64::from(self.other) - f64::from(self.reference)).abs();
        if d.is_nan() {
            f64::INFINITY
        } else {
            d / f64::from(self.reference).abs().max(1e-30)
        }
    }
}

/// `steps` training steps of a predictor of `shape` on the reference
/// backend `R` and on `B` (in `precision`), from the same initial
/// parameters (drawn on `R` with `seed`, copied to `B` through a burn
/// record) on the same random batches of `batch` records, each side with
/// its own optimiser ([`super::step::step`]: Adam, global-norm clipping,
/// the average): each step's loss on both. The trainer's own step, so the
/// fused kernels, burn's operations and the flat optimiser on `B` all run
/// as `chessbench train` runs them.
#[allow(clippy::too_many_arguments)]
pub fn train_both<R: TrainBackend, B: TrainBackend>(
    shape: &ModelShape,
    loss: Loss,
    batch: usize,
    steps: usize,
    learning_rate: f64,
    seed: u64,
    precision: Precision,
    reference_device: &R::Device,
    device: &B::Device,
) -> Result<Vec<StepLoss>, TrainError> {
    use super::{
        optim::{AdamSettings, Optimiser},
        step,
    };
    R::seed(reference_device, seed);
    let mut reference = Predictor::<R>::new(shape, reference_device);
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let record_error = |e: burn::record::RecorderError| TrainError::Backend(e.to_string());
    let bytes = recorder
        .record(reference.clone().into_record(), ())
        .map_err(record_error)?;
    let record = recorder.load(bytes, device).map_err(record_error)?;
    let mut model = Predictor::<B>::new(shape, device)
        .load_record(record)
        .with_precision(precision);
    let buckets = ValueBuckets::new(shape.outputs.max(2))
        .map_err(|_| super::data::DataError::Buckets(shape.outputs))?;
    let adam = AdamSettings::new(0.9, 0.999, 1e-8);
    let mut reference_optimiser = Optimiser::new(&reference, adam, Some(0.99));
    let mut optimiser = Optimiser::new(&model, adam, Some(0.99));
    let reference_support = ValueSupport::<R>::new(&buckets, reference_device);
    let support = ValueSupport::<B>::new(&buckets, device);
    let mut rng = SplitMix64::new(seed ^ 0x5bd1_e995);
    let mut losses = Vec::with_capacity(steps);
    for step in 0..steps {
        let records = Batch::random(shape, batch.max(1), &mut rng);
        let n = records.targets.len();
        let reference_batch = step::Batch::<R> {
            tokens: tokens_tensor::<R>(&records.tokens, shape.seq_len, reference_device),
            targets: Tensor::from_data(
                TensorData::new(records.targets.clone(), [n]),
                reference_device,
            ),
            win_prob: Tensor::from_data(
                TensorData::new(records.win.clone(), [n]),
                reference_device,
            ),
        };
        let other_batch = step::Batch::<B> {
            tokens: tokens_tensor::<B>(&records.tokens, shape.seq_len, device),
            targets: Tensor::from_data(TensorData::new(records.targets.clone(), [n]), device),
            win_prob: Tensor::from_data(TensorData::new(records.win.clone(), [n]), device),
        };
        let (updated, want, _) = step::step(
            reference,
            &mut reference_optimiser,
            reference_batch,
            loss,
            &reference_support,
            learning_rate,
            1.0,
        );
        reference = updated;
        let (updated, got, _) = step::step(
            model,
            &mut optimiser,
            other_batch,
            loss,
            &support,
            learning_rate,
            1.0,
        );
        model = updated;
        losses.push(StepLoss {
            step: step + 1,
            reference: values(want)[0],
            other: values(got)[0],
        });
    }
    Ok(losses)
}

/// [`compare_backends`] of burn-cuda (GPU 0, in `precision`) against the
/// CPU in f32.
#[cfg(feature = "cuda")]
pub fn cuda_against_cpu(
    shape: &ModelShape,
    loss: Loss,
    batch: usize,
    seed: u64,
    precision: Precision,
) -> Result<Agreement, TrainError> {
    use burn::backend::{Autodiff, Cuda, Flex};
    crate::model::gpu::cache::configure_kernel_cache();
    compare_backends::<Autodiff<Flex>, Autodiff<Cuda<f32, i32>>>(
        shape,
        loss,
        batch,
        seed,
        precision,
        &Default::default(),
        &Default::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{chess::RecordSet, model::Preset};
    use burn::backend::{Autodiff, Flex};

    #[test]
    fn relative_error_is_zero_for_equal_and_scales_with_the_reference() {
        assert_eq!(relative_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((relative_error(&[1.1, 0.0], &[1.0, 0.0]) - 0.1).abs() < 1e-6);
        assert!(relative_error(&[f32::NAN], &[1.0]).is_nan());
    }

    /// The comparison itself, on two CPU backends that must agree exactly:
    /// every parameter has a gradient and the errors are 0.
    #[test]
    fn the_same_backend_agrees_exactly_on_every_parameter() {
        type B = Autodiff<Flex>;
        let shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
        let a = compare_backends::<B, B>(
            &shape,
            Loss::HlGauss,
            8,
            3,
            Precision::F32,
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(a.max(), 0.0, "{a:?}");
        // 2 layers x 9 tensors (2 norms x 2, q k v out gate up down) + token
        // and position embeddings + final norm (2) + head (2).
        assert_eq!(a.params, 2 * 11 + 2 + 2 + 2, "{a:?}");
    }

    /// Mixed bf16 against f32 on the CPU (bf16 products emulated): the
    /// errors that rounding the products' operands to 8 bits of mantissa
    /// gives, the yardstick for the CUDA test's bf16 bounds (`BF16_*` in
    /// `tests/cuda.rs`).
    #[test]
    fn mixed_bf16_stays_close_to_f32() {
        type B = Autodiff<Flex>;
        let shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
        let a = compare_backends::<B, B>(
            &shape,
            Loss::HlGauss,
            16,
            5,
            Precision::Bf16,
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
        println!("{a:?}");
        // Not exact (the products are rounded) ...
        assert!(a.log_probs > 0.0 && a.grads_max > 0.0, "{a:?}");
        // ... but within bf16's rounding, as tests/cuda.rs asserts on CUDA.
        assert!(a.log_probs < 1e-2 && a.loss < 1e-2, "{a:?}");
        assert!(a.grads_max < 1e-1, "{a:?}");
        assert_eq!(a.params, 2 * 11 + 2 + 2 + 2);
    }
}
