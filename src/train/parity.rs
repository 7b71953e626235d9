//! searchless_chess's training step, reproduced from its parameters: the
//! evidence that `chessbench train` updates a model as their `training.py`
//! does. `tests/it/published.rs` has their code draw the initial
//! parameters and take the same steps on the same batches, and compares
//! the losses and the trained parameters with these ([`haiku_steps`]);
//! `make parity-paired` runs their whole recipe against ours from the same
//! start on the same batches and compares the test log-losses
//! ([`paired_run`]).

use std::path::Path;

use burn::{
    backend::{Autodiff, Flex},
    tensor::{Int, Tensor, TensorData},
};

use super::{
    loss::{Loss, ValueSupport},
    optim::{AdamSettings, Optimiser},
    step::{Batch, step},
};
use crate::{
    chess::value::ValueBuckets,
    model::{
        ModelShape, Predictor,
        haiku::{self, HaikuError, HaikuParams, Network},
        tokens_tensor,
    },
};

/// From the haiku parameters of `params`, `steps` steps of `chessbench
/// train`'s update (one-hot cross-entropy of the last token, global-norm
/// clip 1.0, Adam with b1 0.9, b2 0.999, eps 1e-8: the defaults, which are
/// optax's) on consecutive batches of `sequences` (row `(step * batch_size
/// + i) mod n`), on the CPU. Returns each step's loss and the trained
/// model's log-probabilities `[n, outputs]` of every sequence's last token.
pub fn haiku_steps(
    params: &Path,
    shape: &ModelShape,
    sequences: &[i32],
    batch_size: usize,
    learning_rate: f64,
    steps: usize,
) -> Result<(Vec<f32>, Vec<f32>), HaikuError> {
    let recipe = ParityRecipe {
        batch_size,
        learning_rate,
        steps,
        ema_decay: None,
    };
    let (losses, model) = train_from_haiku(params, shape, sequences, &recipe)?;
    let log_probs = haiku::model_log_probs(&model, shape, sequences, Network::Burn)?;
    Ok((losses, log_probs))
}

/// A training recipe for [`haiku_steps`] and [`paired_run`].
#[derive(Debug, Clone, Copy)]
pub struct ParityRecipe {
    pub batch_size: usize,
    pub learning_rate: f64,
    pub steps: usize,
    /// The EMA of the parameters (searchless_chess: 0.99), or none (the
    /// trained parameters themselves).
    pub ema_decay: Option<f64>,
}

/// The paired learning-parity run (`make parity-paired`): from
/// searchless_chess's initial parameters `params`, `chessbench train`'s
/// update on their batches in their order (`sequences`: batch `s` is rows
/// `s * batch_size..`), the parameters averaged as `chessbench train`
/// averages them; returns each step's loss and the averaged model's mean
/// log-loss (`-log p(target)`, the last token) on `test`, computed by the
/// fused inference path, as their `make_loss_fn` does for their EMA.
pub fn paired_run(
    params: &Path,
    shape: &ModelShape,
    sequences: &[i32],
    recipe: &ParityRecipe,
    test: &[i32],
) -> Result<(Vec<f32>, f64), HaikuError> {
    let t = shape.seq_len;
    if test.is_empty() || !test.len().is_multiple_of(t) {
        return Err(HaikuError::Sequences(test.len(), t));
    }
    let (losses, model) = train_from_haiku(params, shape, sequences, recipe)?;
    let fused = model.to_cpu(shape);
    let mut total = 0.0f64;
    for chunk in test.chunks(1024 * t) {
        let lp = fused
            .log_probs(chunk, t)
            .map_err(|e| HaikuError::Inference(e.to_string()))?;
        for (row, seq) in lp.chunks(shape.outputs).zip(chunk.chunks(t)) {
            total -= f64::from(row[seq[t - 1] as usize]);
        }
    }
    Ok((losses, total / (test.len() / t) as f64))
}

/// The training both functions above share; returns the losses and the
/// trained (or averaged) model.
fn train_from_haiku(
    params: &Path,
    shape: &ModelShape,
    sequences: &[i32],
    recipe: &ParityRecipe,
) -> Result<(Vec<f32>, Predictor<Flex>), HaikuError> {
    type A = Autodiff<Flex>;
    let ParityRecipe {
        batch_size,
        learning_rate,
        steps,
        ema_decay,
    } = *recipe;
    let t = shape.seq_len;
    if sequences.is_empty() || !sequences.len().is_multiple_of(t) {
        return Err(HaikuError::Sequences(sequences.len(), t));
    }
    let n = sequences.len() / t;
    let device = Default::default();
    let mut model = HaikuParams::read(params)?.predictor::<A>(shape, &device)?;
    let mut optimiser = Optimiser::new(&model, AdamSettings::new(0.9, 0.999, 1e-8), ema_decay);
    // The cross-entropy does not use the value support.
    let buckets = ValueBuckets::new(32).expect("32 buckets");
    let support = ValueSupport::<A>::new(&buckets, &device);
    let mut losses = Vec::with_capacity(steps);
    let mut tokens = Vec::with_capacity(batch_size * t);
    let mut targets = Vec::with_capacity(batch_size);
    for s in 0..steps {
        tokens.clear();
        targets.clear();
        for i in 0..batch_size {
            let row = (s * batch_size + i) % n;
            let seq = &sequences[row * t..(row + 1) * t];
            tokens.extend_from_slice(seq);
            targets.push(seq[t - 1]);
        }
        let batch = Batch {
            tokens: tokens_tensor::<A>(&tokens, t, &device),
            targets: Tensor::<A, 1, Int>::from_data(
                TensorData::new(targets.clone(), [batch_size]),
                &device,
            ),
            win_prob: Tensor::zeros([batch_size], &device),
        };
        let (updated, loss, _) = step(
            model,
            &mut optimiser,
            batch,
            Loss::CrossEntropy,
            &support,
            learning_rate,
            1.0,
        );
        model = updated;
        losses.push(loss.into_scalar());
    }
    Ok((losses, optimiser.average(&model)))
}
