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
#[cfg(all(test, feature = "cuda"))]
mod cuda_emulator;
pub(crate) mod device;
pub(crate) mod gemm;
#[cfg(gpu)]
pub mod gpu_attention;
#[cfg(gpu)]
pub mod gpu_backend;
#[cfg(gpu)]
pub mod gpu_cache;
#[cfg(gpu)]
pub mod gpu_layers;
#[cfg(gpu)]
pub mod gpu_pass;
pub mod haiku;
pub mod kernel_log;
pub(crate) mod layers;
pub(crate) mod net;
pub mod op_count;
pub(crate) mod shape;
#[cfg(feature = "wgpu")]
pub mod wgpu;

pub use backend::{AttentionKernel, LayerKernels, ModelBackend, Products, TrainBackend};
pub use checkpoint::{CheckpointError, InitOptions, InitSummary, init_checkpoint};
pub(crate) use checkpoint::{CheckpointInfo, Weights};
pub use device::{
    ComputeError, DeviceKind, F16_LOSS_SCALE, Precision, Use, check_compute, tune_allocator,
};
pub(crate) use net::{Predictor, tokens_tensor};
pub use shape::{Architecture, ModelShape, Preset};
