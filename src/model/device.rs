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

/// What a stage does with a model: training (mixed precision keeps f32
/// master weights; the CPU emulates bf16 to check numerics), or
/// evaluation (inference, where an emulated format is only slower).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Train,
    Evaluate,
}

/// Checks that `device` is built into this binary and computes in
/// `precision` for `purpose`: f32 everywhere; bf16 on CUDA (and emulated on
/// the CPU for training); f16 on wgpu devices with f16.
pub fn check_compute(
    device: DeviceKind,
    precision: Precision,
    purpose: Use,
) -> Result<(), ComputeError> {
    if !device.built() {
        return Err(ComputeError::NotBuilt(device));
    }
    let refuse = |why| {
        Err(ComputeError::Precision {
            device,
            precision,
            why,
        })
    };
    match (device, precision) {
        (_, Precision::F32) | (DeviceKind::Cuda, Precision::Bf16) => Ok(()),
        (DeviceKind::Cpu, Precision::Bf16) if purpose == Use::Train => Ok(()),
        (DeviceKind::Cpu, Precision::Bf16) => refuse(
            "the CPU evaluator computes in f32 (bf16 there is emulated, slower than f32); bf16 runs on --device cuda",
        ),
        (DeviceKind::Wgpu, Precision::Bf16) => {
            refuse("wgpu has no bf16 (WGSL lacks it); use --precision f16 where the device has f16")
        }
        (DeviceKind::Cpu | DeviceKind::Cuda, Precision::F16) => {
            refuse("mixed f16 is wgpu's (Vulkan, Metal); bf16 is the reduced precision on cuda")
        }
        (DeviceKind::Wgpu, Precision::F16) => wgpu_f16(),
    }
}

#[cfg(feature = "wgpu")]
fn wgpu_f16() -> Result<(), ComputeError> {
    let device = super::gpu::wgpu::device().map_err(|e| ComputeError::NoAdapter(e.to_string()))?;
    if super::gpu::wgpu::supports_f16(&device) {
        Ok(())
    } else {
        Err(ComputeError::Precision {
            device: DeviceKind::Wgpu,
            precision: Precision::F16,
            why: "this adapter has no f16 in shaders (wgpu's shader-f16 feature)",
        })
    }
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_f16() -> Result<(), ComputeError> {
    Err(ComputeError::NotBuilt(DeviceKind::Wgpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_device_takes_its_formats() {
        use DeviceKind::*;
        use Precision::*;
        assert!(check_compute(Cpu, F32, Use::Train).is_ok());
        assert!(check_compute(Cpu, Bf16, Use::Train).is_ok());
        assert!(matches!(
            check_compute(Cpu, Bf16, Use::Evaluate),
            Err(ComputeError::Precision { .. })
        ));
        assert!(matches!(
            check_compute(Cpu, F16, Use::Train),
            Err(ComputeError::Precision { .. })
        ));
        if !cfg!(feature = "cuda") {
            let e = check_compute(Cuda, F32, Use::Train).unwrap_err();
            assert!(e.to_string().contains("--features cuda"), "{e}");
        }
        if !cfg!(feature = "wgpu") {
            let e = check_compute(Wgpu, F32, Use::Evaluate).unwrap_err();
            assert!(e.to_string().contains("--features wgpu"), "{e}");
        } else {
            assert!(matches!(
                check_compute(Wgpu, Bf16, Use::Train),
                Err(ComputeError::Precision { .. })
            ));
        }
        assert_eq!(F16.loss_scale(), F16_LOSS_SCALE);
        assert_eq!(Bf16.loss_scale(), 1.0);
    }
}
