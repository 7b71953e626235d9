//! The predictor, shared by the trainer and the evaluator: its shape and the
//! paper's presets ([`shape`]), the burn network ([`net`]) and its fused
//! CPU inference path ([`cpu`]), what it asks of a backend ([`backend`]:
//! the products of its linear layers), where it runs ([`device`]) and the
//! checkpoint layout a trained model is read from ([`checkpoint`]). Training
//! writes checkpoints, evaluation reads them; the two stages share this
//! foundation and the files, nothing else.

pub mod attention;
pub(crate) mod backend;
pub(crate) mod checkpoint;
pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod cuda_attention;
#[cfg(feature = "cuda")]
pub mod cuda_cache;
#[cfg(all(test, feature = "cuda"))]
mod cuda_emulator;
#[cfg(feature = "cuda")]
pub mod cuda_layers;
#[cfg(feature = "cuda")]
mod cuda_pass;
pub(crate) mod device;
pub(crate) mod gemm;
pub mod haiku;
pub(crate) mod layers;
pub(crate) mod net;
pub mod op_count;
pub(crate) mod shape;

pub use backend::{AttentionKernel, LayerKernels, ModelBackend, Products, TrainBackend};
pub use checkpoint::{CheckpointError, InitOptions, InitSummary, init_checkpoint};
pub(crate) use checkpoint::{CheckpointInfo, Weights};
pub use device::{DeviceKind, Precision, tune_allocator};
pub(crate) use net::{Predictor, tokens_tensor};
pub use shape::{Architecture, ModelShape, Preset};
