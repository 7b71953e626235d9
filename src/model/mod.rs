//! The predictor, shared by the trainer and the evaluator: its shape and the
//! paper's presets ([`shape`]), the burn network ([`net`]) and its fused
//! CPU inference path ([`cpu`]), what it asks of a backend ([`backend`]:
//! the products of its linear layers), where it runs ([`device`]), whether
//! it can run there in the precision asked for ([`compute`]) and the
//! checkpoint layout a trained model is read from ([`checkpoint`]).
//! Training writes checkpoints, evaluation reads them; the two stages share
//! this foundation and the files, nothing else.

pub mod attention;
pub(crate) mod backend;
pub(crate) mod checkpoint;
pub(crate) mod compute;
pub(crate) mod cpu;
pub(crate) mod device;
pub(crate) mod gemm;
pub mod gpu;
pub mod haiku;
pub(crate) mod layers;
pub(crate) mod net;
pub mod op_count;
pub(crate) mod shape;

pub use backend::{AttentionKernel, LayerKernels, ModelBackend, Products, TrainBackend};
pub use checkpoint::CheckpointError;
pub(crate) use checkpoint::{CheckpointInfo, Weights};
pub use compute::{Use, check_compute, check_fused, device_threads, fallbacks, require_fused};
pub use device::{ComputeError, DeviceKind, F16_LOSS_SCALE, Precision, tune_allocator};
pub(crate) use net::{Predictor, tokens_tensor};
pub use shape::{Architecture, ModelShape, Preset};
