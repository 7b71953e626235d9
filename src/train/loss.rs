//! Training losses of the paper's loss ablation (Ruoss et al. 2024, §3.4 and
//! Table 3 of the 2024 revision): HL-Gauss (the default for value
//! predictors), plain cross-entropy on the value bucket (searchless_chess's
//! "log" loss) and L2 regression of the expected win probability; plus the
//! evaluation metrics computed from the same log-probabilities.

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use serde::{Deserialize, Serialize};

use crate::chess::value::{ValueBuckets, default_hl_gauss_sigma};

/// A training loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Loss {
    /// Cross-entropy against the HL-Gauss distribution of the win
    /// probability over the K buckets (Imani & White 2018; Farebrother et
    /// al. 2024), sigma = 0.75 / K.
    HlGauss,
    /// Cross-entropy against the one-hot target token (value bucket or
    /// action).
    CrossEntropy,
    /// Squared error between the expected bucket value (sum_i p_i c_i, c the
    /// bucket centres) and the win probability.
    L2,
}

/// Device-side constants of the value losses for K buckets.
#[derive(Debug, Clone)]
pub(crate) struct ValueSupport<B: Backend> {
    /// `linspace(0, 1, K + 1)` as `[1, K + 1]`.
    edges: Tensor<B, 2>,
    /// Bucket centres as `[K, 1]`.
    centres: Tensor<B, 2>,
    sigma: f64,
}

impl<B: Backend> ValueSupport<B> {
    /// The support of K uniform buckets with the paper's HL-Gauss width.
    pub(crate) fn new(buckets: &ValueBuckets, device: &B::Device) -> ValueSupport<B> {
        let k = buckets.len();
        let mut edges: Vec<f32> = Vec::with_capacity(k + 1);
        edges.push(0.0);
        edges.extend(buckets.edges().iter().map(|&e| e as f32));
        edges.push(1.0);
        let centres: Vec<f32> = buckets.values().iter().map(|&c| c as f32).collect();
        ValueSupport {
            edges: Tensor::from_data(TensorData::new(edges, [1, k + 1]), device),
            centres: Tensor::from_data(TensorData::new(centres, [k, 1]), device),
            sigma: default_hl_gauss_sigma(k),
        }
    }

    /// HL-Gauss target distributions `[batch, K]` for win probabilities
    /// `[batch]`: the tensor form of [`crate::chess::value::hl_gauss_target`].
    pub(crate) fn hl_gauss(&self, win_prob: Tensor<B, 1>) -> Tensor<B, 2> {
        let k = self.centres.dims()[0];
        let scale = (std::f64::consts::SQRT_2 * self.sigma).recip();
        let cdf = (self.edges.clone() - win_prob.unsqueeze_dim::<2>(1))
            .mul_scalar(scale)
            .erf();
        let mass = cdf.clone().narrow(1, 1, k) - cdf.clone().narrow(1, 0, k);
        let total = cdf.clone().narrow(1, k, 1) - cdf.narrow(1, 0, 1);
        mass / total
    }

    /// Expected win probability `[batch]` under predicted log-probabilities.
    pub(crate) fn expected_value(&self, log_probs: Tensor<B, 2>) -> Tensor<B, 1> {
        let b = log_probs.dims()[0];
        log_probs.exp().matmul(self.centres.clone()).reshape([b])
    }
}

/// Mean loss of a batch. `targets` are the target tokens (bucket or action),
/// `win_prob` the scalar targets (value policies).
pub(crate) fn batch_loss<B: Backend>(
    loss: Loss,
    log_probs: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    win_prob: Tensor<B, 1>,
    support: &ValueSupport<B>,
) -> Tensor<B, 1> {
    match loss {
        Loss::CrossEntropy => cross_entropy(log_probs, targets),
        Loss::HlGauss => {
            let target = support.hl_gauss(win_prob);
            (target * log_probs).sum_dim(1).mean().neg()
        }
        Loss::L2 => {
            let diff = support.expected_value(log_probs) - win_prob;
            (diff.clone() * diff).mean()
        }
    }
}

/// Mean negative log-likelihood of the target tokens: the log-loss the
/// evaluation reports whatever the training loss.
pub(crate) fn cross_entropy<B: Backend>(
    log_probs: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    log_probs
        .gather(1, targets.unsqueeze_dim::<2>(1))
        .mean()
        .neg()
}

/// Log-loss of the "predict the marginal" baseline: every record gets the
/// bucket frequencies of the training records (add-one smoothed, so a bucket
/// unseen in training costs log(N + K) rather than infinity), scored on the
/// test targets.
pub(crate) fn marginal_log_loss(train_counts: &[u64], test_targets: &[usize]) -> f64 {
    let k = train_counts.len() as f64;
    let n: u64 = train_counts.iter().sum();
    let denominator = n as f64 + k;
    if test_targets.is_empty() {
        return f64::NAN;
    }
    let total: f64 = test_targets
        .iter()
        .map(|&t| {
            let c = train_counts.get(t).copied().unwrap_or(0) as f64 + 1.0;
            -(c / denominator).ln()
        })
        .sum();
    total / test_targets.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chess::value::hl_gauss_target;
    use burn::backend::Flex;

    type B = Flex;

    fn to_vec<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
        t.into_data().to_vec().unwrap()
    }

    #[test]
    fn hl_gauss_tensor_matches_the_scalar_formula() {
        let device = Default::default();
        for k in [32, 128] {
            let support = ValueSupport::<B>::new(&ValueBuckets::new(k).unwrap(), &device);
            let ys = [0.0f32, 0.03, 0.5, 0.731, 0.999, 1.0];
            let got = to_vec(support.hl_gauss(Tensor::from_floats(ys, &device)));
            for (row, &y) in ys.iter().enumerate() {
                let want = hl_gauss_target(k, default_hl_gauss_sigma(k), f64::from(y)).unwrap();
                for (i, w) in want.iter().enumerate() {
                    let g = f64::from(got[row * k + i]);
                    assert!((g - w).abs() < 2e-5, "K={k} y={y} bucket {i}: {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn losses_by_hand() {
        let device = Default::default();
        let support = ValueSupport::<B>::new(&ValueBuckets::new(4).unwrap(), &device);
        // p = (0.1, 0.2, 0.3, 0.4), centres 0.125 .. 0.875.
        let p = [0.1f32, 0.2, 0.3, 0.4];
        let log_probs = Tensor::<B, 1>::from_floats(p.map(f32::ln), &device).reshape([1, 4]);
        let targets = Tensor::<B, 1, Int>::from_ints([2], &device);
        let y = Tensor::<B, 1>::from_floats([0.5], &device);
        let ce = to_vec(cross_entropy(log_probs.clone(), targets.clone()))[0];
        assert!((ce - -(0.3f32.ln())).abs() < 1e-6, "{ce}");
        let l2 = to_vec(batch_loss(
            Loss::L2,
            log_probs.clone(),
            targets.clone(),
            y.clone(),
            &support,
        ))[0];
        let expected = 0.1 * 0.125 + 0.2 * 0.375 + 0.3 * 0.625 + 0.4 * 0.875 - 0.5;
        assert!((l2 - expected * expected).abs() < 1e-6, "{l2}");
        let hl = to_vec(batch_loss(Loss::HlGauss, log_probs, targets, y, &support))[0];
        let t = hl_gauss_target(4, 0.75 / 4.0, 0.5).unwrap();
        let want: f64 = -t
            .iter()
            .zip(p)
            .map(|(t, p)| t * f64::from(p).ln())
            .sum::<f64>();
        assert!((f64::from(hl) - want).abs() < 1e-5, "{hl} vs {want}");
    }

    #[test]
    fn marginal_baseline() {
        // Train counts 3:1 over two buckets, smoothed to 4/6 and 2/6.
        let ll = marginal_log_loss(&[3, 1], &[0, 1]);
        let want = -((4.0f64 / 6.0).ln() + (2.0f64 / 6.0).ln()) / 2.0;
        assert!((ll - want).abs() < 1e-12);
        assert!(marginal_log_loss(&[3, 1], &[]).is_nan());
    }

    /// A tiny model memorises a small batch: 16 random sequences with random
    /// targets over 32 buckets reach near-zero loss under Adam.
    #[test]
    fn a_tiny_model_overfits_a_small_batch() {
        use crate::{
            chess::RecordSet,
            model::{ModelShape, Predictor, Preset, tokens_tensor},
            train::{
                optim::{AdamSettings, Optimiser},
                sampler::SplitMix64,
            },
        };
        use burn::{
            backend::{Autodiff, Flex},
            optim::GradientsParams,
            tensor::{Int, Tensor, TensorData, backend::Backend},
        };
        type A = Autodiff<Flex>;
        let device = Default::default();
        A::seed(&device, 1);
        let shape = ModelShape::preset(Preset::Tiny, RecordSet::StateValue, 32);
        let mut model = Predictor::<A>::new(&shape, &device);
        let mut optim = Optimiser::new(&model, AdamSettings::new(0.9, 0.999, 1e-5), None);
        let mut rng = SplitMix64::new(3);
        let n = 16;
        let mut tokens = Vec::new();
        let mut targets = Vec::new();
        for _ in 0..n {
            tokens.extend((0..77).map(|_| rng.below(31) as i32));
            let t = rng.below(32) as i32;
            tokens.push(t);
            targets.push(t);
        }
        let x = tokens_tensor::<A>(&tokens, 78, &device);
        let y = Tensor::<A, 1, Int>::from_data(TensorData::new(targets, [n]), &device);
        let mut first = None;
        let mut last = f32::NAN;
        for _ in 0..150 {
            let loss = cross_entropy(model.forward(x.clone()), y.clone());
            last = loss.clone().into_scalar();
            first.get_or_insert(last);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(model, grads, 3e-3, 1.0).0;
        }
        let first = first.unwrap();
        assert!(first > 2.5, "initial loss {first} (ln 32 = 3.47)");
        assert!(last < 0.05, "loss after 150 steps: {last} (from {first})");
    }
}
