//! searchless_chess's parameters as a chessbench predictor: a haiku
//! parameter tree (`params` or `params_ema` of their checkpoints, or the
//! initial parameters their code draws) written as a safetensors file whose
//! tensor names are haiku's `module/param` paths (`embed/embeddings`,
//! `linear_6/w`, ...), float32. [`Predictor::from_haiku`] documents the
//! mapping. Every tensor of the file must be used and have the shape the
//! model shape asks for, so a tree of another shape or policy is refused,
//! naming the tensor.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use burn::backend::Flex;
use safetensors::{Dtype, SafeTensors};
use thiserror::Error;

use super::{
    backend::ModelBackend,
    net::{Predictor, tokens_tensor},
    shape::ModelShape,
};

/// Failures reading haiku parameters, naming the file.
#[derive(Debug, Error)]
pub enum HaikuError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a safetensors file: {reason}", path.display())]
    Format { path: PathBuf, reason: String },
    #[error("{}: no parameter {name} (expected shape {expected:?}); the file has: {have}", path.display())]
    Missing {
        path: PathBuf,
        name: String,
        expected: Vec<usize>,
        have: String,
    },
    #[error("{}: parameter {name} has shape {found:?}, the model shape needs {expected:?} (another preset, policy or number of buckets?)", path.display())]
    Shape {
        path: PathBuf,
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("{}: parameter {name} is {dtype}, expected F32", path.display())]
    Dtype {
        path: PathBuf,
        name: String,
        dtype: String,
    },
    #[error("{}: parameters the model shape has no place for: {names} (a deeper or other model?)", path.display())]
    Unused { path: PathBuf, names: String },
    #[error(transparent)]
    Checkpoint(#[from] super::checkpoint::CheckpointError),
    #[error("sequences: {0} tokens is not a whole number of {1}-token sequences")]
    Sequences(usize, usize),
    #[error("fused inference: {0}")]
    Inference(String),
}

/// A haiku parameter tree read from a safetensors file.
pub struct HaikuParams {
    path: PathBuf,
    tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

impl HaikuParams {
    /// Reads every tensor of `path` (float32 only).
    pub fn read(path: &Path) -> Result<HaikuParams, HaikuError> {
        let bytes = fs::read(path).map_err(|source| HaikuError::Io {
            path: path.to_owned(),
            source,
        })?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| HaikuError::Format {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            if view.dtype() != Dtype::F32 {
                return Err(HaikuError::Dtype {
                    path: path.to_owned(),
                    name,
                    dtype: format!("{:?}", view.dtype()),
                });
            }
            let data = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            tensors.insert(name, (view.shape().to_vec(), data));
        }
        Ok(HaikuParams {
            path: path.to_owned(),
            tensors,
        })
    }

    /// The predictor of `shape` with these parameters; every tensor must be
    /// used.
    pub(crate) fn predictor<B: ModelBackend>(
        mut self,
        shape: &ModelShape,
        device: &B::Device,
    ) -> Result<Predictor<B>, HaikuError> {
        let path = self.path.clone();
        let predictor = {
            let tensors = &mut self.tensors;
            Predictor::from_haiku(shape, device, &mut |name: &str, dims: &[usize]| {
                let Some((found, data)) = tensors.remove(name) else {
                    return Err(HaikuError::Missing {
                        path: path.clone(),
                        name: name.to_owned(),
                        expected: dims.to_vec(),
                        have: tensors.keys().cloned().collect::<Vec<_>>().join(", "),
                    });
                };
                if found != dims {
                    return Err(HaikuError::Shape {
                        path: path.clone(),
                        name: name.to_owned(),
                        expected: dims.to_vec(),
                        found,
                    });
                }
                Ok(data)
            })?
        };
        if !self.tensors.is_empty() {
            return Err(HaikuError::Unused {
                path,
                names: self.tensors.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
        Ok(predictor)
    }
}

/// Which implementation of the network computes [`log_probs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// The burn network on the CPU backend (what training runs).
    Burn,
    /// The fused CPU inference path (what `eval` and `uci` run on the CPU).
    Fused,
}

/// Log-probabilities `[n, outputs]` (row-major) of the last token of each
/// of the `n` sequences (`shape.seq_len` tokens each, the target included,
/// as searchless_chess's `predict` takes them) under the model of `shape`
/// with the parameters of `path`, on the CPU, by `network`.
pub fn log_probs(
    path: &Path,
    shape: &ModelShape,
    sequences: &[i32],
    network: Network,
) -> Result<Vec<f32>, HaikuError> {
    if !sequences.len().is_multiple_of(shape.seq_len) {
        return Err(HaikuError::Sequences(sequences.len(), shape.seq_len));
    }
    let model = HaikuParams::read(path)?.predictor::<Flex>(shape, &Default::default())?;
    model_log_probs(&model, shape, sequences, network)
}

/// [`log_probs`] of a model already built (the sequences are whole), in
/// batches of 256 sequences.
pub(crate) fn model_log_probs(
    model: &Predictor<Flex>,
    shape: &ModelShape,
    sequences: &[i32],
    network: Network,
) -> Result<Vec<f32>, HaikuError> {
    let t = shape.seq_len;
    let mut out = Vec::with_capacity(sequences.len() / t * shape.outputs);
    let fused = (network == Network::Fused).then(|| model.to_cpu(shape));
    let device = Default::default();
    for batch in sequences.chunks(256 * t) {
        match &fused {
            Some(fused) => out.extend(
                fused
                    .log_probs(batch, t)
                    .map_err(|e| HaikuError::Inference(e.to_string()))?,
            ),
            None => out.extend(
                model
                    .forward(tokens_tensor::<Flex>(batch, t, &device))
                    .into_data()
                    .to_vec::<f32>()
                    .expect("f32 log-probabilities"),
            ),
        }
    }
    Ok(out)
}
