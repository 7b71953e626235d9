//! One optimiser step on a batch: what the training loop, `bench-step` and
//! the backend comparisons all run.

use burn::{
    optim::GradientsParams,
    tensor::{
        Int, Tensor,
        backend::{AutodiffBackend, Backend},
    },
};

use super::{
    loss::{self, ValueSupport},
    optim::Optimiser,
};
use crate::model::{Predictor, TrainBackend};

/// A batch on the device: token sequences `[n, seq_len]` (the target
/// included), target tokens and win probabilities `[n]`.
pub(crate) struct Batch<B: Backend> {
    pub tokens: Tensor<B, 2, Int>,
    pub targets: Tensor<B, 1, Int>,
    pub win_prob: Tensor<B, 1>,
}

/// A step's updated model, loss and unclipped gradient norm.
pub(crate) type Stepped<B> = (
    Predictor<B>,
    Tensor<<B as AutodiffBackend>::InnerBackend, 1>,
    Tensor<<B as AutodiffBackend>::InnerBackend, 1>,
);

/// The loss's gradients, the loss multiplied by `scale` first unless it
/// is 1 (mixed f16's loss scaling; the optimiser divides them back).
pub(crate) fn scaled_backward<B: TrainBackend>(
    loss: Tensor<B, 1>,
    scale: f32,
) -> <B as burn::tensor::backend::AutodiffBackend>::Gradients {
    if scale == 1.0 {
        loss.backward()
    } else {
        loss.mul_scalar(scale).backward()
    }
}

/// One optimiser step of `chessbench train`, as searchless_chess's
/// `update_parameters` takes it: the batch's mean loss on the last token,
/// gradients clipped to a global norm (`optax.clip_by_global_norm`), one
/// Adam update, the average moved. Returns the updated model, the loss and
/// the unclipped gradient norm.
pub(crate) fn step<B: TrainBackend>(
    model: Predictor<B>,
    optimiser: &mut Optimiser<B>,
    batch: Batch<B>,
    loss: loss::Loss,
    support: &ValueSupport<B>,
    learning_rate: f64,
    grad_clip: f64,
) -> Stepped<B> {
    let log_probs = model.forward(batch.tokens);
    let loss = loss::batch_loss(loss, log_probs, batch.targets, batch.win_prob, support);
    let detached = loss.clone().inner();
    let scale = model.precision().loss_scale();
    optimiser.set_loss_scale(scale);
    let grads = GradientsParams::from_grads(scaled_backward(loss, scale), &model);
    let (model, norm) = optimiser.step(model, grads, learning_rate, grad_clip);
    (model, detached, norm)
}
