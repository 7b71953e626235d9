//! The predictor: searchless_chess's decoder-only transformer (Ruoss et al.
//! 2024, §2.3 and Appendix A.2; `transformer.py`), in burn.
//!
//! - input: the record's token sequence shifted right by one (a 0 in front,
//!   the last token dropped), so the target token is never seen;
//! - token embedding (init N(0, 0.02)) scaled by sqrt(d), plus a learned
//!   positional embedding;
//! - N pre-LayerNorm blocks: multi-head self-attention without causal mask and
//!   without biases, residual; SwiGLU MLP (silu(x W1) * x W2) W3 of width 4d
//!   without biases, residual;
//! - final LayerNorm, a linear head (with bias) to K value buckets or the
//!   1968 actions, log-softmax, read at the last position.
//!
//! Linear weights start from N(0, 1/fan_in) like haiku's default. The
//! parameter count equals
//! [`ModelShape::num_params`], which the tests check.

use burn::{
    module::{Module, Param},
    nn::{
        Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
    },
    tensor::{
        Int, Tensor, TensorData,
        activation::{log_softmax, silu},
        backend::Backend,
        module::attention,
        ops::AttentionModuleOptions,
    },
};

use super::shape::ModelShape;

/// One pre-LayerNorm transformer block.
#[derive(Module, Debug)]
pub(crate) struct Block<B: Backend> {
    attn_norm: LayerNorm<B>,
    /// q, k, v projections, d -> d each.
    q: Linear<B>,
    k: Linear<B>,
    v: Linear<B>,
    /// Output projection: d -> d.
    out: Linear<B>,
    mlp_norm: LayerNorm<B>,
    /// The SwiGLU gate and value projections: d -> 4d each.
    gate: Linear<B>,
    up: Linear<B>,
    /// 4d -> d.
    down: Linear<B>,
    heads: usize,
}

/// The whole predictor.
#[derive(Module, Debug)]
pub(crate) struct Predictor<B: Backend> {
    token_embedding: Embedding<B>,
    position_embedding: Param<Tensor<B, 2>>,
    blocks: Vec<Block<B>>,
    final_norm: LayerNorm<B>,
    head: Linear<B>,
    d_model: usize,
}

fn linear<B: Backend>(d_in: usize, d_out: usize, bias: bool, device: &B::Device) -> Linear<B> {
    LinearConfig::new(d_in, d_out)
        .with_bias(bias)
        .with_initializer(Initializer::Normal {
            mean: 0.0,
            std: (d_in as f64).sqrt().recip(),
        })
        .init(device)
}

impl<B: Backend> Block<B> {
    fn new(shape: &ModelShape, device: &B::Device) -> Block<B> {
        let d = shape.d_model;
        let ffn = shape.widening * d;
        Block {
            attn_norm: LayerNormConfig::new(d).init(device),
            q: linear(d, d, false, device),
            k: linear(d, d, false, device),
            v: linear(d, d, false, device),
            out: linear(d, d, false, device),
            mlp_norm: LayerNormConfig::new(d).init(device),
            gate: linear(d, ffn, false, device),
            up: linear(d, ffn, false, device),
            down: linear(ffn, d, false, device),
            heads: shape.heads,
        }
    }

    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, t, d] = x.dims();
        let dh = d / self.heads;
        let h = self.attn_norm.forward(x.clone());
        // [b, t, d] -> [b, heads, t, dh]
        let split = |p: &Linear<B>| {
            p.forward(h.clone())
                .reshape([b, t, self.heads, dh])
                .swap_dims(1, 2)
        };
        let context = attention(
            split(&self.q),
            split(&self.k),
            split(&self.v),
            None,
            None,
            AttentionModuleOptions::default(),
        );
        let x = x + self.out.forward(context.swap_dims(1, 2).reshape([b, t, d]));
        let h = self.mlp_norm.forward(x.clone());
        let gated = silu(self.gate.forward(h.clone())) * self.up.forward(h);
        x + self.down.forward(gated)
    }
}

impl<B: Backend> Predictor<B> {
    /// A freshly initialised predictor (draws from the backend's RNG: seed
    /// it with `B::seed` for a reproducible start).
    pub(crate) fn new(shape: &ModelShape, device: &B::Device) -> Predictor<B> {
        Predictor {
            token_embedding: EmbeddingConfig::new(shape.vocab, shape.d_model)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: 0.02,
                })
                .init(device),
            position_embedding: Initializer::Normal {
                mean: 0.0,
                std: 1.0,
            }
            .init([shape.seq_len, shape.d_model], device),
            blocks: (0..shape.layers)
                .map(|_| Block::new(shape, device))
                .collect(),
            final_norm: LayerNormConfig::new(shape.d_model).init(device),
            head: linear(shape.d_model, shape.outputs, true, device),
            d_model: shape.d_model,
        }
    }

    /// Log-probabilities `[batch, outputs]` of each sequence's last token.
    /// `sequences` are whole records `[batch, seq_len]` (the target
    /// included); the shift right happens here.
    pub(crate) fn forward(&self, sequences: Tensor<B, 2, Int>) -> Tensor<B, 2> {
        let [b, t] = sequences.dims();
        let device = sequences.device();
        let inputs = Tensor::cat(
            vec![
                Tensor::<B, 2, Int>::zeros([b, 1], &device),
                sequences.narrow(1, 0, t - 1),
            ],
            1,
        );
        let mut x = self
            .token_embedding
            .forward(inputs)
            .mul_scalar((self.d_model as f64).sqrt())
            + self.position_embedding.val().unsqueeze_dim::<3>(0);
        for block in &self.blocks {
            x = block.forward(x);
        }
        let last = self
            .final_norm
            .forward(x.narrow(1, t - 1, 1))
            .reshape([b, self.d_model]);
        log_softmax(self.head.forward(last), 1)
    }
}

/// A batch of token sequences `[len, seq_len]` (row-major) as a tensor.
pub(crate) fn tokens_tensor<B: Backend>(
    tokens: &[i32],
    seq_len: usize,
    device: &B::Device,
) -> Tensor<B, 2, Int> {
    let rows = tokens.len() / seq_len;
    Tensor::from_data(TensorData::new(tokens.to_vec(), [rows, seq_len]), device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{chess::RecordSet, model::shape::Preset};
    use burn::backend::Flex;

    type B = Flex;

    #[test]
    fn parameter_counts_match_the_shape_arithmetic() {
        let device = Default::default();
        for (preset, policy, k) in [
            (Preset::Tiny, RecordSet::ActionValue, 128),
            (Preset::Tiny, RecordSet::StateValue, 32),
            (Preset::Tiny, RecordSet::BehavioralCloning, 128),
            (Preset::M9, RecordSet::ActionValue, 128),
        ] {
            let shape = ModelShape::preset(preset, policy, k);
            let model = Predictor::<B>::new(&shape, &device);
            assert_eq!(
                model.num_params() as u64,
                shape.num_params(),
                "{preset:?} {policy:?} K={k}"
            );
        }
    }

    #[test]
    fn outputs_are_distributions_over_the_head() {
        let device = Default::default();
        let shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
        let model = Predictor::<B>::new(&shape, &device);
        let tokens: Vec<i32> = (0..3 * 79).map(|i| i * 7 % 1968).collect();
        let out = model.forward(tokens_tensor::<B>(&tokens, 79, &device));
        assert_eq!(out.dims(), [3, 32]);
        let sums: Vec<f32> = out.exp().sum_dim(1).into_data().to_vec().unwrap();
        for s in sums {
            assert!((s - 1.0).abs() < 1e-4, "{s}");
        }
    }

    /// The target token (the last) must not influence the prediction.
    #[test]
    fn the_target_is_not_an_input() {
        let device = Default::default();
        let shape = ModelShape::preset(Preset::Tiny, RecordSet::StateValue, 32);
        let model = Predictor::<B>::new(&shape, &device);
        let mut a: Vec<i32> = (0..78).map(|i| i * 13 % 31).collect();
        let pa: Vec<f32> = model
            .forward(tokens_tensor::<B>(&a, 78, &device))
            .into_data()
            .to_vec()
            .unwrap();
        a[77] = 5;
        let pb: Vec<f32> = model
            .forward(tokens_tensor::<B>(&a, 78, &device))
            .into_data()
            .to_vec()
            .unwrap();
        assert_eq!(pa, pb);
        // ...while the one before it does.
        a[76] = 29;
        let pc: Vec<f32> = model
            .forward(tokens_tensor::<B>(&a, 78, &device))
            .into_data()
            .to_vec()
            .unwrap();
        assert_ne!(pa, pc);
    }
}
