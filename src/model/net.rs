//! The predictor: searchless_chess's decoder-only transformer (Ruoss et al.
//! 2024, §2.3 and Appendix A.2; `transformer.py`), in burn.
//!
//! - input: the record's token sequence shifted right by one (a 0 in front,
//!   the last token dropped), so the target token is never seen;
//! - token embedding scaled by sqrt(d), plus a learned positional
//!   embedding;
//! - N pre-LayerNorm blocks: multi-head self-attention without causal mask and
//!   without biases, residual; SwiGLU MLP (silu(x W1) * x W2) W3 of width 4d
//!   without biases, residual;
//! - final LayerNorm, a linear head (with bias) to K value buckets or the
//!   1968 actions, log-softmax, read at the last position.
//!
//! Parameters start as haiku starts them (see [`truncated_normal`]): linear
//! weights TruncatedNormal(1/sqrt(fan_in)) and biases zero, the token
//! embedding TruncatedNormal(0.02), the positions TruncatedNormal(1.0),
//! LayerNorm scale one and offset zero. The parameter count equals
//! [`ModelShape::num_params`], which the tests check.

use burn::{
    module::{Module, Param},
    nn::{
        Embedding, LayerNorm, LayerNormConfig, Linear, PaddingConfig2d,
        conv::{Conv2d, Conv2dConfig},
    },
    tensor::{
        Distribution, FloatDType, Int, Tensor, TensorData,
        activation::{log_softmax, relu, silu},
        backend::Backend,
    },
};

use super::{
    backend::ModelBackend,
    cpu::{BlockWeights, CpuBlock, CpuPredictor, Norm},
    device::Precision,
    shape::{Architecture, ModelShape, SQUARES},
};

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

/// One residual block of the ConvNet ([`Architecture::Cnn`]): two 3x3
/// convolutions, relu(x + conv2(relu(conv1(x)))).
#[derive(Module, Debug)]
pub(crate) struct ResidualBlock<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
}

impl<B: Backend> ResidualBlock<B> {
    fn new(channels: usize, device: &B::Device) -> ResidualBlock<B> {
        let conv = || {
            Conv2dConfig::new([channels, channels], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        let mut conv2 = conv();
        // The block starts as the identity (the second convolution's
        // weights at zero), so a deep tower without normalisation trains
        // from the first step.
        conv2.weight = Param::from_tensor(conv2.weight.val().zeros_like());
        ResidualBlock {
            conv1: conv(),
            conv2,
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let y = self.conv2.forward(relu(self.conv1.forward(x.clone())));
        relu(x + y)
    }
}

/// The whole predictor. Its parameters are f32 whatever the precision the
/// forward pass computes in (see [`Compute`]).
#[derive(Module, Debug)]
pub(crate) struct Predictor<B: Backend> {
    token_embedding: Embedding<B>,
    position_embedding: Param<Tensor<B, 2>>,
    /// The transformer's blocks (none in a ConvNet).
    blocks: Vec<Block<B>>,
    /// The ConvNet's residual tower (`None` in a transformer, and in
    /// checkpoints written before the ConvNet existed).
    tower: Option<Vec<ResidualBlock<B>>>,
    final_norm: LayerNorm<B>,
    head: Linear<B>,
    d_model: usize,
    /// How the forward pass computes (not saved: a checkpoint holds the
    /// f32 parameters whatever computed with them).
    compute: Compute,
}

/// haiku's `TruncatedNormal(std)`, the initialiser searchless_chess's
/// transformer uses for every weight: a standard normal truncated to
/// [-2, 2] (out-of-range draws are drawn again), times `std`, without
/// correcting the variance (so the weights' standard deviation is 0.88 std).
fn truncated_normal<B: Backend, const D: usize>(
    shape: [usize; D],
    std: f64,
    device: &B::Device,
) -> Tensor<B, D> {
    let normal = || Tensor::<B, D>::random(shape, Distribution::Normal(0.0, 1.0), device);
    let mut x = normal();
    // Each round leaves 4.6% of the remaining draws out of range: after 8,
    // about 2e-11 of them, which the clamp puts on the bound.
    for _ in 0..8 {
        let outside = x.clone().abs().greater_elem(2.0);
        x = x.mask_where(outside, normal());
    }
    x.clamp(-2.0, 2.0).mul_scalar(std)
}

/// A linear layer as `hk.Linear` starts it: weights from
/// TruncatedNormal(1/sqrt(fan_in)), bias zero.
fn linear<B: Backend>(d_in: usize, d_out: usize, bias: bool, device: &B::Device) -> Linear<B> {
    Linear {
        weight: Param::from_tensor(truncated_normal(
            [d_in, d_out],
            (d_in as f64).sqrt().recip(),
            device,
        )),
        bias: bias.then(|| Param::from_tensor(Tensor::zeros([d_out], device))),
    }
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
}

/// How a forward pass computes.
///
/// - `precision`: f32, or bf16 (or f16) products and activations
///   (PyTorch's autocast): every linear layer's input and weights are cast
///   to that format and its output stays in it (attention and SwiGLU run
///   on it), while the
///   residual stream, the layer norms, the head's bias and the log-softmax
///   stay f32. The parameters, their gradients and the optimiser are f32
///   either way (master weights).
/// - `fused_projections`: one product for a block's q|k|v and one for its
///   gate|up, their weights concatenated (the backend's
///   [`ModelBackend::FEW_KERNELS`]), or a product per projection.
#[derive(Debug, Clone, Copy)]
struct Compute {
    precision: Precision,
    fused_projections: bool,
}

impl Compute {
    /// f32, and the projections as the backend prefers them.
    fn new<B: ModelBackend>() -> Compute {
        Compute {
            precision: Precision::F32,
            fused_projections: B::FEW_KERNELS,
        }
    }

    /// `t` in the products' format.
    fn narrow<B: Backend, const D: usize>(self, t: Tensor<B, D>) -> Tensor<B, D> {
        match self.precision {
            Precision::F32 => t,
            Precision::Bf16 => t.cast(FloatDType::BF16),
            Precision::F16 => t.cast(FloatDType::F16),
        }
    }

    /// `t` back in f32.
    fn widen<B: Backend, const D: usize>(self, t: Tensor<B, D>) -> Tensor<B, D> {
        match self.precision {
            Precision::F32 => t,
            Precision::Bf16 | Precision::F16 => t.cast(FloatDType::F32),
        }
    }

    /// A linear layer's product in the products' format.
    fn product<B: ModelBackend, const D: usize>(
        self,
        x: Tensor<B, D>,
        w: Tensor<B, 2>,
    ) -> Tensor<B, D> {
        B::project(self.narrow(x), self.narrow(w))
    }
}

impl<B: ModelBackend> Block<B> {
    fn forward(&self, x: Tensor<B, 3>, compute: Compute) -> Tensor<B, 3> {
        let [b, t, d] = x.dims();
        let dh = d / self.heads;
        let h = B::norm(&self.attn_norm, x.clone());
        // [batch, seq, d], the heads side by side.
        let context = if compute.fused_projections {
            let w = Tensor::cat(
                vec![
                    self.q.weight.val(),
                    self.k.weight.val(),
                    self.v.weight.val(),
                ],
                1,
            );
            B::attend_packed(compute.product(h, w), self.heads)
        } else {
            // [b, t, d] -> [b, heads, t, dh]
            let split = |p: Tensor<B, 3>| p.reshape([b, t, self.heads, dh]).swap_dims(1, 2);
            let project = |p: &Linear<B>| split(compute.product(h.clone(), p.weight.val()));
            B::attend(project(&self.q), project(&self.k), project(&self.v))
                .swap_dims(1, 2)
                .reshape([b, t, d])
        };
        let out = compute.product(context, self.out.weight.val());
        let x = x + compute.widen(out);
        let h = B::norm(&self.mlp_norm, x.clone());
        let gated = if compute.fused_projections {
            let w = Tensor::cat(vec![self.gate.weight.val(), self.up.weight.val()], 1);
            B::swiglu(compute.product(h, w))
        } else {
            silu(compute.product(h.clone(), self.gate.weight.val()))
                * compute.product(h, self.up.weight.val())
        };
        x + compute.widen(compute.product(gated, self.down.weight.val()))
    }
}

impl<B: ModelBackend> Predictor<B> {
    /// A freshly initialised predictor (draws from the backend's RNG: seed
    /// it with `B::seed` for a reproducible start).
    pub(crate) fn new(shape: &ModelShape, device: &B::Device) -> Predictor<B> {
        Predictor {
            // hk.Embed(w_init=TruncatedNormal(emb_init_scale = 0.02)).
            token_embedding: Embedding {
                weight: Param::from_tensor(truncated_normal(
                    [shape.vocab, shape.d_model],
                    0.02,
                    device,
                )),
            },
            // hk.Embed's default initialiser, TruncatedNormal(1.0).
            position_embedding: Param::from_tensor(truncated_normal(
                [shape.seq_len, shape.d_model],
                1.0,
                device,
            )),
            blocks: match shape.architecture {
                Architecture::Transformer => (0..shape.layers)
                    .map(|_| Block::new(shape, device))
                    .collect(),
                Architecture::Cnn => Vec::new(),
            },
            tower: (shape.architecture == Architecture::Cnn).then(|| {
                (0..shape.layers)
                    .map(|_| ResidualBlock::new(shape.d_model, device))
                    .collect()
            }),
            final_norm: LayerNormConfig::new(shape.d_model).init(device),
            head: match shape.architecture {
                Architecture::Transformer => linear(shape.d_model, shape.outputs, true, device),
                // Every square's channels.
                Architecture::Cnn => linear(SQUARES * shape.d_model, shape.outputs, true, device),
            },
            d_model: shape.d_model,
            compute: Compute::new::<B>(),
        }
    }

    /// A predictor with searchless_chess's trained (or initial) parameters:
    /// `param(name, dims)` returns the haiku parameter `name`, row-major,
    /// which must have shape `dims`. Names follow haiku's module numbering
    /// in `transformer_decoder` (layer i of L):
    ///
    /// | chessbench | haiku |
    /// |---|---|
    /// | token embedding | `embed/embeddings` [vocab, d] |
    /// | positions | `embed_1/embeddings` [79, d] (first seq_len rows used) |
    /// | block i attention norm | `layer_norm{_2i}/scale`, `/offset` |
    /// | block i q, k, v, out | `multi_head_dot_product_attention{_i}/linear{,_1,_2,_3}/w` [d, d] |
    /// | block i MLP norm | `layer_norm_{2i+1}/scale`, `/offset` |
    /// | block i gate, up, down | `linear{_3i}/w` [d, 4d], `linear_{3i+1}/w` [d, 4d], `linear_{3i+2}/w` [4d, d] |
    /// | final norm | `layer_norm_{2L}/scale`, `/offset` |
    /// | head | `linear_{3L}/w` [d, outputs], `/b` [outputs] |
    ///
    /// (`{_k}` is empty for k = 0.) haiku's `w` is [in, out], burn's
    /// row-layout linear weight too.
    pub(crate) fn from_haiku<E>(
        shape: &ModelShape,
        device: &B::Device,
        param: &mut HaikuParam<'_, E>,
    ) -> Result<Predictor<B>, E> {
        let d = shape.d_model;
        let ffn = shape.widening * d;
        let numbered = |name: &str, k: usize| {
            if k == 0 {
                name.to_owned()
            } else {
                format!("{name}_{k}")
            }
        };
        let mut t1 = |name: String, n: usize| -> Result<Tensor<B, 1>, E> {
            Ok(Tensor::from_data(
                TensorData::new(param(&name, &[n])?, [n]),
                device,
            ))
        };
        let mut norm = |k: usize| -> Result<LayerNorm<B>, E> {
            let mut ln = LayerNormConfig::new(d).init(device);
            ln.gamma = Param::from_tensor(t1(format!("{}/scale", numbered("layer_norm", k)), d)?);
            ln.beta = Some(Param::from_tensor(t1(
                format!("{}/offset", numbered("layer_norm", k)),
                d,
            )?));
            Ok(ln)
        };
        let mut norms = Vec::with_capacity(2 * shape.layers + 1);
        for k in 0..=2 * shape.layers {
            norms.push(norm(k)?);
        }
        let mut t2 = |name: String, dims: [usize; 2]| -> Result<Tensor<B, 2>, E> {
            Ok(Tensor::from_data(
                TensorData::new(param(&name, &dims)?, dims),
                device,
            ))
        };
        let mut w = |name: String, d_in: usize, d_out: usize| -> Result<Linear<B>, E> {
            Ok(Linear {
                weight: Param::from_tensor(t2(format!("{name}/w"), [d_in, d_out])?),
                bias: None,
            })
        };
        let mut norms = norms.into_iter();
        let mut blocks = Vec::with_capacity(shape.layers);
        for i in 0..shape.layers {
            let attn = numbered("multi_head_dot_product_attention", i);
            blocks.push(Block {
                attn_norm: norms.next().expect("2L + 1 norms"),
                q: w(format!("{attn}/linear"), d, d)?,
                k: w(format!("{attn}/linear_1"), d, d)?,
                v: w(format!("{attn}/linear_2"), d, d)?,
                out: w(format!("{attn}/linear_3"), d, d)?,
                mlp_norm: norms.next().expect("2L + 1 norms"),
                gate: w(numbered("linear", 3 * i), d, ffn)?,
                up: w(numbered("linear", 3 * i + 1), d, ffn)?,
                down: w(numbered("linear", 3 * i + 2), ffn, d)?,
                heads: shape.heads,
            });
        }
        let final_norm = norms.next().expect("2L + 1 norms");
        let head_name = numbered("linear", 3 * shape.layers);
        let mut head = w(head_name.clone(), d, shape.outputs)?;
        let bias = param(&format!("{head_name}/b"), &[shape.outputs])?;
        head.bias = Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(bias, [shape.outputs]),
            device,
        )));
        let vocab = param("embed/embeddings", &[shape.vocab, d])?;
        let positions = param("embed_1/embeddings", &[HAIKU_POSITIONS, d])?;
        Ok(Predictor {
            token_embedding: Embedding {
                weight: Param::from_tensor(Tensor::from_data(
                    TensorData::new(vocab, [shape.vocab, d]),
                    device,
                )),
            },
            position_embedding: Param::from_tensor(Tensor::from_data(
                TensorData::new(positions[..shape.seq_len * d].to_vec(), [shape.seq_len, d]),
                device,
            )),
            blocks,
            tower: None,
            final_norm,
            head,
            d_model: d,
            compute: Compute::new::<B>(),
        })
    }

    /// The format the forward pass computes in ([`Compute`]).
    pub(crate) fn precision(&self) -> Precision {
        self.compute.precision
    }

    /// The same predictor computing in `precision` (f32 parameters either
    /// way; see [`Compute`]).
    pub(crate) fn with_precision(mut self, precision: Precision) -> Predictor<B> {
        self.compute.precision = precision;
        self
    }

    /// The same predictor with its projections fused or not, whatever the
    /// backend prefers (tests run the GPU's form on the CPU).
    #[cfg(test)]
    fn with_fused_projections(mut self, fused: bool) -> Predictor<B> {
        self.compute.fused_projections = fused;
        self
    }
}

impl<B: ModelBackend> Predictor<B> {
    /// Log-probabilities `[batch, outputs]` (f32) of each sequence's last
    /// token. `sequences` are whole records `[batch, seq_len]` (the target
    /// included); the shift right happens here.
    pub(crate) fn forward(&self, sequences: Tensor<B, 2, Int>) -> Tensor<B, 2> {
        if let Some(tower) = &self.tower {
            return self.forward_cnn(tower, sequences);
        }
        let compute = self.compute;
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
            x = block.forward(x, compute);
        }
        let last = B::norm(&self.final_norm, x.narrow(1, t - 1, 1)).reshape([b, self.d_model]);
        let logits = compute.widen(compute.product(last, self.head.weight.val()));
        let logits = match &self.head.bias {
            Some(bias) => logits + bias.val().unsqueeze_dim(0),
            None => logits,
        };
        log_softmax(logits, 1)
    }
}

impl<B: ModelBackend> Predictor<B> {
    /// The ConvNet's forward pass ([`Architecture::Cnn`]), in f32: the
    /// record's tokens but the target, embedded with their positions; the
    /// 64 squares (tokens 1..=64, a8 to h1) as the 8x8 board's channels,
    /// every other token added to each square; the residual tower; a
    /// LayerNorm per square; the linear head from all squares' channels.
    fn forward_cnn(
        &self,
        tower: &[ResidualBlock<B>],
        sequences: Tensor<B, 2, Int>,
    ) -> Tensor<B, 2> {
        let [b, t] = sequences.dims();
        let n = t - 1;
        let c = self.d_model;
        let x = self.token_embedding.forward(sequences.narrow(1, 0, n))
            + self
                .position_embedding
                .val()
                .narrow(0, 0, n)
                .unsqueeze_dim::<3>(0);
        let squares = x.clone().narrow(1, 1, SQUARES);
        let scalars =
            x.clone().narrow(1, 0, 1) + x.narrow(1, 1 + SQUARES, n - 1 - SQUARES).sum_dim(1);
        let mut h = (squares + scalars).swap_dims(1, 2).reshape([b, c, 8, 8]);
        for block in tower {
            h = block.forward(h);
        }
        let h = self
            .final_norm
            .forward(h.reshape([b, c, SQUARES]).swap_dims(1, 2))
            .reshape([b, SQUARES * c]);
        let logits = h.matmul(self.head.weight.val());
        let logits = match &self.head.bias {
            Some(bias) => logits + bias.val().unsqueeze_dim(0),
            None => logits,
        };
        log_softmax(logits, 1)
    }
}

impl<B: Backend> Predictor<B> {
    /// The same network for inference on the CPU ([`super::cpu`]), its
    /// weights copied out of the backend (transformers only: a ConvNet runs
    /// through burn's graph).
    pub(crate) fn to_cpu(&self, shape: &ModelShape) -> CpuPredictor {
        fn values<B: Backend, const D: usize>(t: &Param<Tensor<B, D>>) -> Vec<f32> {
            t.val()
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .expect("f32 parameters")
        }
        let norm = |ln: &LayerNorm<B>| Norm {
            scale: values(&ln.gamma),
            offset: ln
                .beta
                .as_ref()
                .map_or_else(|| vec![0.0; self.d_model], values),
        };
        let d = shape.d_model;
        let ffn = shape.widening * d;
        let blocks = self
            .blocks
            .iter()
            .map(|b| {
                CpuBlock::new(
                    BlockWeights {
                        attn_norm: norm(&b.attn_norm),
                        q: values(&b.q.weight),
                        k: values(&b.k.weight),
                        v: values(&b.v.weight),
                        out: values(&b.out.weight),
                        mlp_norm: norm(&b.mlp_norm),
                        gate: values(&b.gate.weight),
                        up: values(&b.up.weight),
                        down: values(&b.down.weight),
                    },
                    d,
                    ffn,
                )
            })
            .collect();
        CpuPredictor::new(
            *shape,
            values(&self.token_embedding.weight),
            values(&self.position_embedding),
            blocks,
            norm(&self.final_norm),
            values(&self.head.weight),
            self.head
                .bias
                .as_ref()
                .map_or_else(|| vec![0.0; shape.outputs], values),
        )
    }
}

/// Gives a haiku parameter's values by name, checking its shape.
pub(crate) type HaikuParam<'a, E> = dyn FnMut(&str, &[usize]) -> Result<Vec<f32>, E> + 'a;

/// Rows of searchless_chess's learned positional embedding: its
/// `max_sequence_length`, `tokenizer.SEQUENCE_LENGTH + 2`, for every policy.
pub(crate) const HAIKU_POSITIONS: usize = 79;

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

    /// The ConvNet: its parameters are the shape's count, its outputs
    /// distributions, and every token of the record but the target counts.
    #[test]
    fn the_convnet_reads_the_board_and_the_other_tokens() {
        let device = Default::default();
        for policy in [RecordSet::ActionValue, RecordSet::BehavioralCloning] {
            let mut shape = ModelShape::preset(Preset::Tiny, policy, 32);
            shape.architecture = Architecture::Cnn;
            let model = Predictor::<B>::new(&shape, &device);
            assert_eq!(model.num_params() as u64, shape.num_params(), "{policy:?}");
        }
        let mut shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
        shape.architecture = Architecture::Cnn;
        // Non-zero second convolutions, so the tower is not the identity.
        let mut model = Predictor::<B>::new(&shape, &device);
        for block in model.tower.as_mut().unwrap() {
            block.conv2.weight = Param::from_tensor(Tensor::random(
                block.conv2.weight.dims(),
                Distribution::Normal(0.0, 0.05),
                &device,
            ));
        }
        let t = shape.seq_len;
        let base: Vec<i32> = (0..t as i32).map(|i| i * 7 % 31).collect();
        let probs = |tokens: &[i32]| {
            model
                .forward(tokens_tensor::<B>(tokens, t, &device))
                .into_data()
                .to_vec::<f32>()
                .unwrap()
        };
        let p = probs(&base);
        assert_eq!(p.len(), 32);
        let total: f32 = p.iter().map(|l| l.exp()).sum();
        assert!((total - 1.0).abs() < 1e-4, "{total}");
        let changed = |i: usize| {
            let mut tokens = base.clone();
            tokens[i] = (tokens[i] + 1) % 31;
            probs(&tokens) != p
        };
        // A square, the side to move, the fullmove number, the action.
        for i in [5, 0, 76, 77] {
            assert!(changed(i), "token {i} is ignored");
        }
        // The target is not read.
        assert!(!changed(t - 1));
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

    /// Every parameter gets its own draws (q, k and v of a block, and the
    /// blocks, differ), truncated at two standard deviations with the
    /// standard deviation haiku's TruncatedNormal gives (0.88 of `std`).
    #[test]
    fn initial_parameters_are_independent_truncated_normals() {
        let device = Default::default();
        B::seed(&device, 7);
        let shape = ModelShape::preset(Preset::M9, RecordSet::ActionValue, 32);
        let model = Predictor::<B>::new(&shape, &device);
        let values = |l: &Linear<B>| -> Vec<f32> { l.weight.val().into_data().to_vec().unwrap() };
        let (q, k) = (values(&model.blocks[0].q), values(&model.blocks[0].k));
        let q1 = values(&model.blocks[1].q);
        assert_ne!(q, k);
        assert_ne!(q, q1);
        let std = (shape.d_model as f64).sqrt().recip();
        let n = q.len() as f64;
        let mean = q.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let sd = (q
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        assert!(mean.abs() < 0.01 * std, "mean {mean}");
        assert!(
            (sd / std - 0.8796).abs() < 0.01,
            "sd {sd} = {} std",
            sd / std
        );
        assert!(q.iter().all(|&x| f64::from(x).abs() <= 2.0 * std + 1e-6));
        assert!(
            model
                .head
                .bias
                .as_ref()
                .unwrap()
                .val()
                .into_data()
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|&b| b == 0.0),
            "head bias starts at zero"
        );
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

    /// The GPU's form of a block (one product for q|k|v, one for gate|up,
    /// their outputs split by narrowing) computes what the separate
    /// products compute, forward and backward: run here on the CPU.
    #[test]
    fn fused_projections_compute_the_separate_products() {
        type A = burn::backend::Autodiff<B>;
        let device = Default::default();
        A::seed(&device, 3);
        let shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
        let separate = Predictor::<A>::new(&shape, &device);
        assert!(!separate.compute.fused_projections, "the CPU's own form");
        let fused = separate.clone().with_fused_projections(true);
        let tokens: Vec<i32> = (0..5 * 79).map(|i| (i * 11 + 3) % 1968).collect();
        let run = |model: &Predictor<A>| {
            let out = model.forward(tokens_tensor::<A>(&tokens, 79, &device));
            let weights: Vec<f32> = (0..5 * 32).map(|i| (i % 7) as f32 - 3.0).collect();
            let w = Tensor::<A, 2>::from_data(TensorData::new(weights, [5, 32]), &device);
            let mut grads = (out.clone() * w).sum().backward();
            let block = &model.blocks[1];
            let grad = |p: &Linear<A>, g: &mut _| -> Vec<f32> {
                p.weight
                    .grad_remove(g)
                    .unwrap()
                    .into_data()
                    .to_vec()
                    .unwrap()
            };
            let g: Vec<Vec<f32>> = [
                &block.q,
                &block.k,
                &block.v,
                &block.gate,
                &block.up,
                &block.down,
            ]
            .into_iter()
            .map(|p| grad(p, &mut grads))
            .collect();
            (out.into_data().to_vec::<f32>().unwrap(), g)
        };
        let (out_s, grads_s) = run(&separate);
        let (out_f, grads_f) = run(&fused);
        let close = |a: &[f32], b: &[f32], what: &str| {
            let (mut diff, mut norm) = (0.0f64, 0.0f64);
            for (x, y) in a.iter().zip(b) {
                diff += f64::from(x - y).powi(2);
                norm += f64::from(*y).powi(2);
            }
            let rel = (diff / norm).sqrt();
            assert!(
                a.len() == b.len() && rel < 1e-5,
                "{what}: relative error {rel}"
            );
        };
        close(&out_f, &out_s, "log-probabilities");
        for (i, (f, s)) in grads_f.iter().zip(&grads_s).enumerate() {
            close(f, s, &format!("gradient {i} of q, k, v, gate, up, down"));
        }
        // Mixed bf16 takes the same path.
        let mixed = fused.with_precision(Precision::Bf16);
        let (out_m, _) = run(&mixed);
        let rel = {
            let (mut d, mut n) = (0.0f64, 0.0f64);
            for (x, y) in out_m.iter().zip(&out_s) {
                d += f64::from(x - y).powi(2);
                n += f64::from(*y).powi(2);
            }
            (d / n).sqrt()
        };
        assert!(rel > 0.0 && rel < 1e-2, "mixed bf16: relative error {rel}");
    }
}
