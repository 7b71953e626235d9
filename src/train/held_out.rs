//! The held-out evaluation during training: the eval split's first
//! records and the predict-the-marginal baseline, and the EMA parameters
//! scored on them (`eval.csv`).

use burn::tensor::{Int, Tensor, TensorData};

use super::{
    config::TrainConfig,
    data::{DataConfig, DataError, Loader},
    error::TrainError,
    logs::EvalResult,
    loss::{self, ValueSupport},
    optim::scalar,
    sampler::Position,
    stream::data_config,
};
use crate::{
    chess::{RecordSet, actions::NUM_ACTIONS},
    model::{ModelBackend, Predictor, tokens_tensor},
    store::LabelSource,
};

/// Records held in memory for evaluation.
pub(super) struct EvalSet {
    split: String,
    tokens: Vec<i32>,
    seq_len: usize,
    targets: Vec<i32>,
    win_prob: Vec<f32>,
    marginal_log_loss: f64,
}

/// The eval records (the first `eval_records` of a fixed uniform order) and
/// the marginal baseline estimated from `marginal_records` train records.
pub(super) fn eval_set(config: &TrainConfig, split: &str) -> Result<EvalSet, TrainError> {
    const EVAL_SEED: u64 = 0x0e7a_1000;
    let outputs = match config.policy {
        RecordSet::BehavioralCloning => NUM_ACTIONS,
        _ => config.buckets,
    };
    let mut counts = vec![0u64; outputs];
    let marginal = Loader::new(
        data_config(config, &config.split, 64 * 1024, EVAL_SEED),
        Position::default(),
    )?;
    let wanted = config
        .marginal_records
        .min(marginal.records() as usize)
        .max(1);
    let mut seen = 0;
    let mut marginal = marginal;
    while seen < wanted {
        let batch = marginal.next_batch()?;
        for &t in batch.targets.iter().take(wanted - seen) {
            counts[t as usize] += 1;
        }
        seen += batch.len();
    }
    drop(marginal);
    // Held-out records carry Stockfish's values whatever the training
    // labels are, so every label source is scored against the same
    // reference; a split only the evaluation database labels is scored on
    // its labels.
    let reference = DataConfig {
        label_source: LabelSource::default(),
        ..data_config(config, split, 1, EVAL_SEED)
    };
    let mut loader = match Loader::new(reference, Position::default()) {
        Err(DataError::Empty { .. }) => Loader::new(
            data_config(config, split, 1, EVAL_SEED),
            Position::default(),
        )?,
        other => other?,
    };
    let n = config.eval_records.min(loader.records() as usize).max(1);
    let mut set = EvalSet {
        split: split.to_owned(),
        tokens: Vec::new(),
        seq_len: config.policy.sequence_length(),
        targets: Vec::new(),
        win_prob: Vec::new(),
        marginal_log_loss: f64::NAN,
    };
    let mut loader_batch = loader.next_batch()?;
    while set.targets.len() < n {
        set.tokens.extend_from_slice(&loader_batch.tokens);
        set.targets.extend_from_slice(&loader_batch.targets);
        set.win_prob.extend_from_slice(&loader_batch.win_prob);
        if set.targets.len() < n {
            loader_batch = loader.next_batch()?;
        }
    }
    let targets: Vec<usize> = set.targets.iter().map(|&t| t as usize).collect();
    set.marginal_log_loss = loss::marginal_log_loss(&counts, &targets);
    Ok(set)
}

/// Scores `model` on the eval set, `batch_size` records at a time.
pub(super) fn evaluate<B: ModelBackend>(
    model: &Predictor<B>,
    set: &EvalSet,
    support: &ValueSupport<B>,
    policy: RecordSet,
    batch_size: usize,
    step: u64,
    device: &B::Device,
) -> EvalResult {
    let n = set.targets.len();
    let (mut nll, mut correct, mut sq) = (0.0f64, 0usize, 0.0f64);
    let mut start = 0;
    while start < n {
        let end = (start + batch_size).min(n);
        let m = end - start;
        let tokens = tokens_tensor::<B>(
            &set.tokens[start * set.seq_len..end * set.seq_len],
            set.seq_len,
            device,
        );
        let targets = Tensor::<B, 1, Int>::from_data(
            TensorData::new(set.targets[start..end].to_vec(), [m]),
            device,
        );
        let log_probs = model.forward(tokens);
        nll += scalar(loss::cross_entropy(log_probs.clone(), targets.clone())) * m as f64;
        let hits = log_probs
            .clone()
            .argmax(1)
            .reshape([m])
            .equal(targets)
            .int()
            .sum();
        correct += scalar(hits.float()) as usize;
        if policy != RecordSet::BehavioralCloning {
            let y = Tensor::<B, 1>::from_data(
                TensorData::new(set.win_prob[start..end].to_vec(), [m]),
                device,
            );
            let d = support.expected_value(log_probs) - y;
            sq += scalar((d.clone() * d).sum());
        }
        start = end;
    }
    EvalResult {
        step,
        split: set.split.clone(),
        records: n,
        log_loss: nll / n as f64,
        marginal_log_loss: set.marginal_log_loss,
        accuracy: correct as f64 / n as f64,
        value_mse: (policy != RecordSet::BehavioralCloning).then(|| sq / n as f64),
    }
}
