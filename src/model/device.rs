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
    /// burn-wgpu on the best GPU wgpu finds: Vulkan, Metal or DirectX 12,
    /// on AMD, Intel, Apple or NVIDIA cards, or Mesa's software Vulkan
    /// (lavapipe) without one (needs a binary built with `--features
    /// wgpu`).
    Wgpu,
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
    /// Mixed precision in f16 (wgpu on devices with f16: Vulkan, Metal):
    /// as bf16, with f16 products and activations; training scales the
    /// loss by [`F16_LOSS_SCALE`] so that small gradients survive f16's
    /// range, and unscales them in f32 before clipping.
    F16,
}

/// The static loss scale of mixed f16 training (2^10): gradients flowing
/// back through f16 activations are multiplied by it, then divided by it
/// in f32 before the global norm is taken, so values down to about 6e-8 /
/// 2^10 survive f16's subnormal range; the 9M and tiny models' largest
/// activation gradients stay far below f16's maximum (65,504) even scaled.
pub const F16_LOSS_SCALE: f32 = 1024.0;

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

impl DeviceKind {
    /// The name on the command line (`--device`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Wgpu => "wgpu",
        }
    }

    /// Whether this binary was built with the device's backend.
    pub fn built(self) -> bool {
        match self {
            DeviceKind::Cpu => true,
            DeviceKind::Cuda => cfg!(feature = "cuda"),
            DeviceKind::Wgpu => cfg!(feature = "wgpu"),
        }
    }
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Precision {
    /// The name on the command line (`--precision`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }

    /// The factor training multiplies the loss by before the backward pass
    /// (and divides the gradients by after it): [`F16_LOSS_SCALE`] in
    /// mixed f16, 1 otherwise.
    pub fn loss_scale(self) -> f32 {
        match self {
            Precision::F16 => F16_LOSS_SCALE,
            Precision::F32 | Precision::Bf16 => 1.0,
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a model cannot run where and how it was asked to.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ComputeError {
    #[error(
        "--device {0} needs a binary built with `cargo build --release --features {0}` (this one has {built})",
        built = built_devices()
    )]
    NotBuilt(DeviceKind),
    #[error("--device wgpu: {0}")]
    NoAdapter(String),
    #[error(
        "a batch of {batch} needs a buffer of {needed} bytes (its widest activation), and this wgpu adapter allows {allowed}: use --batch-size {largest} or less"
    )]
    Buffer {
        batch: usize,
        needed: u64,
        allowed: u64,
        largest: usize,
    },
    #[error("--precision {precision} does not run on --device {device}: {why}")]
    Precision {
        device: DeviceKind,
        precision: Precision,
        why: &'static str,
    },
    #[error("--require-fused: {0}")]
    FusedUnavailable(String),
    #[error(
        "--require-fused: burn's operations ran where the fused kernels could not:\n  {}",
        .0.join("\n  ")
    )]
    NotFused(Vec<String>),
}

/// The devices this binary was built with, for messages.
fn built_devices() -> String {
    let built: Vec<&str> = [DeviceKind::Cpu, DeviceKind::Cuda, DeviceKind::Wgpu]
        .into_iter()
        .filter(|d| d.built())
        .map(DeviceKind::name)
        .collect();
    format!("--device {}", built.join(", "))
}
