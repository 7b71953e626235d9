//! The predictor on a GPU: burn's CubeCL backends (CUDA, wgpu) with the
//! project's fused kernels. `backend` is the predictor on any CubeCL
//! runtime; `pass` what every fused kernel shares (burn's fusion stream,
//! the device's limits, a self-test per kernel variant); `attention` and
//! `layers` the fused attention, layer norm and SwiGLU, each the GPU twin
//! of the CPU's [`super::attention`] and [`super::layers`]; `flat` the
//! optimiser's flat buffers in one operation each; `cuda` the
//! products in cuBLASLt and `wgpu` the runtime that runs everywhere
//! (Mesa's lavapipe in CI); `cache` where compiled kernels are kept, and
//! [`kernel_log`] what CubeCL compiled and launched. `cuda_emulator` (tests
//! only) runs the kernels' CUDA C on the CPU under the layouts CUDA gives
//! them. Built only with a GPU feature (`cuda`, `wgpu`), except
//! `kernel_log`, which reads logs on any machine.

#[cfg(gpu)]
pub mod attention;
#[cfg(gpu)]
pub mod backend;
#[cfg(gpu)]
pub mod cache;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(all(test, feature = "cuda"))]
mod cuda_emulator;
#[cfg(gpu)]
pub(crate) mod flat;
pub mod kernel_log;
#[cfg(gpu)]
pub mod layers;
#[cfg(gpu)]
pub mod pass;
#[cfg(feature = "wgpu")]
pub mod wgpu;
