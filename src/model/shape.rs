//! The predictor architecture's shape: presets of Ruoss et al. (2024, §2.3,
//! Table A2) and the arithmetic that depends only on the shape (parameter
//! count, training FLOPs per sample for model-FLOPs utilisation). The burn
//! model ([`super::net`]) matches these counts.
//!
//! Architecture (searchless_chess `transformer.py`): token embedding (scaled
//! by sqrt(d)) + learned positional embedding; N pre-LayerNorm blocks of
//! bias-free multi-head self-attention (no causal mask) and a bias-free
//! SwiGLU MLP of width 4d; final LayerNorm; a linear head (with bias) to the
//! K value buckets or the 1968 actions.

use serde::{Deserialize, Serialize};

use crate::chess::{RecordSet, actions::NUM_ACTIONS};

/// A model size, spelled `tiny`, `9m`, `136m`, `270m` in pipeline files,
/// on the command line and in checkpoints (checkpoints written before this
/// spelling say `m9`, `m136`, `m270`, which still read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Preset {
    /// 2 layers, d = 64, 4 heads: tests and the 2-core demo.
    #[serde(rename = "tiny")]
    #[value(name = "tiny")]
    Tiny,
    /// The paper's 9M model (8 layers, d = 256, 8 heads): the ablations.
    #[serde(rename = "9m", alias = "m9")]
    #[value(name = "9m")]
    M9,
    /// 136M (8 layers, d = 1024, 8 heads).
    #[serde(rename = "136m", alias = "m136")]
    #[value(name = "136m")]
    M136,
    /// 270M (16 layers, d = 1024, 8 heads): the headline model.
    #[serde(rename = "270m", alias = "m270")]
    #[value(name = "270m")]
    M270,
}

impl Preset {
    /// The spelling (`9m`), as in run names (`av_9m`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::M9 => "9m",
            Preset::M136 => "136m",
            Preset::M270 => "270m",
        }
    }
}

/// The network family of a predictor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Architecture {
    /// The paper's decoder-only transformer (see the module doc).
    #[default]
    Transformer,
    /// The residual ConvNet of the paper's architecture ablation (Ruoss
    /// et al. 2024, Appendix B.1 and Table A2: "an AlphaZero-like
    /// convolutional network ... a residual tower with 8 layers and 256
    /// channels (no pooling, broadcasting, or bottleneck layers), followed
    /// by a linear layer and a log softmax"): `layers` residual blocks of
    /// two 3x3 convolutions with `d_model` channels over the 8x8 board (the
    /// 9M preset is the paper's 8 x 256). Each square's token is embedded
    /// in `d_model` channels; the other tokens (side to move, castling, en
    /// passant, clocks, the action) are embedded with their position and
    /// added to every square as constant planes.
    Cnn,
}

impl Architecture {
    pub(crate) fn is_transformer(&self) -> bool {
        *self == Architecture::Transformer
    }
}

/// The board's squares: tokens 1..=64 of a FEN's 77 (a8 to h1).
pub(crate) const SQUARES: usize = 64;

/// The shape of a predictor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelShape {
    /// The network family (checkpoints written before it existed are
    /// transformers).
    #[serde(default, skip_serializing_if = "Architecture::is_transformer")]
    pub architecture: Architecture,
    /// Transformer blocks, or the ConvNet's residual blocks.
    pub layers: usize,
    /// The transformer's width, or the ConvNet's channels.
    pub d_model: usize,
    pub heads: usize,
    /// MLP width = widening * d_model (the paper: 4).
    pub widening: usize,
    pub vocab: usize,
    pub seq_len: usize,
    /// K buckets (value policies) or 1968 actions (behavioural cloning).
    pub outputs: usize,
}

impl ModelShape {
    /// Bytes of the widest single activation a forward and backward pass
    /// of `batch` sequences allocates, in f32: a block's gate|up product
    /// or q|k|v product, or burn's attention scores (`heads x seq x seq`
    /// a sequence), whichever is widest. A GPU buffer must hold it (wgpu
    /// caps storage buffers, at 128 MiB on lavapipe).
    pub fn widest_activation_bytes(&self, batch: usize) -> u64 {
        let t = self.seq_len as u64;
        let d = self.d_model as u64;
        let widest = (2 * self.widening as u64 * d)
            .max(3 * d)
            .max(self.heads as u64 * t)
            .max(self.outputs as u64);
        batch as u64 * t * widest * 4
    }

    /// A preset for a policy with K value buckets.
    pub fn preset(preset: Preset, policy: RecordSet, buckets: usize) -> ModelShape {
        let (layers, d_model, heads) = match preset {
            Preset::Tiny => (2, 64, 4),
            Preset::M9 => (8, 256, 8),
            Preset::M136 => (8, 1024, 8),
            Preset::M270 => (16, 1024, 8),
        };
        ModelShape {
            architecture: Architecture::Transformer,
            layers,
            d_model,
            heads,
            widening: 4,
            vocab: NUM_ACTIONS,
            seq_len: policy.sequence_length(),
            outputs: match policy {
                RecordSet::BehavioralCloning => NUM_ACTIONS,
                _ => buckets,
            },
        }
    }

    /// Trainable parameters: embeddings, per block 2 LayerNorms (scale and
    /// offset), q/k/v/o projections (4 d^2) and the SwiGLU MLP (3 x d x 4d),
    /// the final LayerNorm and the head.
    pub(crate) fn num_params(&self) -> u64 {
        let d = self.d_model as u64;
        if self.architecture == Architecture::Cnn {
            // Embeddings, per block two 3x3 convolutions with biases, the
            // final LayerNorm (per square, over channels), the head from
            // every square's channels.
            let block = 2 * (9 * d * d + d);
            let features = SQUARES as u64 * d;
            return self.vocab as u64 * d
                + self.seq_len as u64 * d
                + self.layers as u64 * block
                + 2 * d
                + features * self.outputs as u64
                + self.outputs as u64;
        }
        let ffn = self.widening as u64 * d;
        let block = 2 * (2 * d) + 4 * d * d + 3 * d * ffn;
        self.vocab as u64 * d
            + self.seq_len as u64 * d
            + self.layers as u64 * block
            + 2 * d
            + d * self.outputs as u64
            + self.outputs as u64
    }

    /// Training FLOPs per sequence (forward + backward = 3 x forward, 2 FLOPs
    /// per multiply-add): the matrix multiplications of every position,
    /// attention scores and values included, the head at the last position
    /// only. The denominator-free part of model-FLOPs utilisation.
    pub(crate) fn train_flops_per_sample(&self) -> f64 {
        let (d, t) = (self.d_model as f64, self.seq_len as f64);
        if self.architecture == Architecture::Cnn {
            let squares = SQUARES as f64;
            let forward = self.layers as f64 * 2.0 * squares * 2.0 * 9.0 * d * d
                + 2.0 * squares * d * self.outputs as f64;
            return 3.0 * forward;
        }
        let ffn = self.widening as f64 * d;
        let per_token_block = 2.0 * (4.0 * d * d + 3.0 * d * ffn) + 2.0 * 2.0 * t * d;
        let forward = self.layers as f64 * t * per_token_block + 2.0 * d * self.outputs as f64;
        3.0 * forward
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One spelling everywhere; checkpoints written before it still read.
    #[test]
    fn preset_spelling() {
        assert_eq!(serde_json::to_value(Preset::M9).unwrap(), "9m");
        let old: Preset = serde_json::from_str("\"m270\"").unwrap();
        assert_eq!(old, Preset::M270);
    }

    /// The paper's sizes: "9M", "136M", "270M" (Table A2), with K = 128.
    #[test]
    fn presets_have_the_papers_sizes() {
        let n = |p| ModelShape::preset(p, RecordSet::ActionValue, 128).num_params() as f64 / 1e6;
        assert!((8.5..9.5).contains(&n(Preset::M9)), "{}", n(Preset::M9));
        assert!(
            (135.0..137.5).contains(&n(Preset::M136)),
            "{}",
            n(Preset::M136)
        );
        assert!(
            (269.0..272.0).contains(&n(Preset::M270)),
            "{}",
            n(Preset::M270)
        );
        // Exact for the 9M model: hand-computed from the architecture.
        let m9 = ModelShape::preset(Preset::M9, RecordSet::ActionValue, 128);
        let d = 256u64;
        let expected = 1968 * d + 79 * d + 8 * (4 * d + 16 * d * d) + 2 * d + d * 128 + 128;
        assert_eq!(m9.num_params(), expected);
        assert_eq!(expected, 8_954_240);
    }

    /// The paper's ConvNet: 8 residual blocks of 256 channels.
    #[test]
    fn the_convnet_counts_its_convolutions() {
        let mut s = ModelShape::preset(Preset::M9, RecordSet::ActionValue, 32);
        s.architecture = Architecture::Cnn;
        let d = 256u64;
        let expected = 1968 * d + 79 * d + 8 * 2 * (9 * d * d + d) + 2 * d + 64 * d * 32 + 32;
        assert_eq!(s.num_params(), expected);
        // A transformer's shape reads and writes as before.
        let json = serde_json::to_value(ModelShape::preset(Preset::Tiny, RecordSet::StateValue, 8))
            .unwrap();
        assert!(json.get("architecture").is_none());
        let back: ModelShape = serde_json::from_value(serde_json::to_value(s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn shapes_follow_the_policy() {
        let bc = ModelShape::preset(Preset::Tiny, RecordSet::BehavioralCloning, 128);
        assert_eq!((bc.seq_len, bc.outputs), (78, 1968));
        let sv = ModelShape::preset(Preset::Tiny, RecordSet::StateValue, 32);
        assert_eq!((sv.seq_len, sv.outputs), (78, 32));
        assert_eq!(sv.d_model % sv.heads, 0);
    }

    #[test]
    fn flops_scale_with_parameters() {
        // ~6 x non-embedding parameters x tokens, plus attention.
        let m = ModelShape::preset(Preset::M270, RecordSet::ActionValue, 128);
        let dense = 6.0 * (m.layers * 16 * m.d_model * m.d_model) as f64 * m.seq_len as f64;
        let f = m.train_flops_per_sample();
        assert!(f > dense && f < 1.05 * dense, "{f} vs {dense}");
    }
}
