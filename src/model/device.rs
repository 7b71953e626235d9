//! Where a model runs and in which floating-point format.

use serde::{Deserialize, Serialize};

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum DeviceKind {
    /// The CPU, all cores: training runs burn's `flex` backend, evaluation
    /// and the UCI engine the fused inference path.
    Cpu,
    /// burn-cuda on GPU 0 (needs a binary built with `--features cuda`).
    Cuda,
}

/// Floating-point format of parameters and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Precision {
    /// f32 throughout (on NVIDIA GPUs the products run on TF32 tensor
    /// cores, as PyTorch's `tf32` and JAX's default precision do).
    F32,
    /// Mixed precision, as PyTorch's autocast: bf16 products and
    /// activations, f32 master weights, layer norms, loss and optimiser
    /// state. On the CPU the bf16 products are emulated (f32 arithmetic on
    /// bf16-rounded operands): slower than f32, for checking the numerics.
    Bf16,
}

/// Keeps freed memory in the process (glibc): a training step allocates and
/// frees the same large activation buffers every time, and glibc's default
/// returns them to the kernel, so each step pays page faults to get them
/// back (docs/benchmarks.md#constants).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation thresholds; it is
    // called before the training threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
    }
}
