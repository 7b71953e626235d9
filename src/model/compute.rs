//! Whether a device and a precision can compute here, for training or
//! evaluation ([`check_compute`]): the device must be built into this
//! binary, and a wgpu adapter asked for f16 must have it.

use super::device::{ComputeError, DeviceKind, Precision};

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

/// Whether this process requires the project's fused kernels
/// (`--require-fused`, set by [`require_fused`]).
static REQUIRE_FUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes this process require the project's fused attention, layer norm
/// and SwiGLU (`--require-fused`): refused at once where they cannot run at
/// all (the CPU; `CHESSBENCH_ATTENTION` or `CHESSBENCH_LAYERS` set to
/// `burn`), and from then on [`check_fused`] fails once any use of them
/// has fallen back to burn's operations.
pub fn require_fused(device: DeviceKind) -> Result<(), ComputeError> {
    if device == DeviceKind::Cpu {
        return Err(ComputeError::FusedUnavailable(
            "the fused kernels are GPU kernels: use --device cuda or wgpu".into(),
        ));
    }
    for var in [super::backend::ATTENTION_VAR, super::backend::LAYERS_VAR] {
        if std::env::var(var).as_deref() == Ok("burn") {
            return Err(ComputeError::FusedUnavailable(format!(
                "{var}=burn turns them off"
            )));
        }
    }
    REQUIRE_FUSED.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// `Ok` unless this process requires the fused kernels
/// ([`require_fused`]) and some use of them has fallen back to burn's
/// operations ([`fallbacks`]); training and bench-step call it after each
/// step, evaluation after each batch.
pub fn check_fused() -> Result<(), ComputeError> {
    #[cfg(gpu)]
    let fell_back = super::gpu::pass::any_fallback();
    #[cfg(not(gpu))]
    let fell_back = false;
    fused_verdict(
        REQUIRE_FUSED.load(std::sync::atomic::Ordering::Relaxed) && fell_back,
        fallbacks,
    )
}

/// [`check_fused`]'s rule: an error naming every fallback when the fused
/// kernels are `required` and `fallbacks` lists any (asked only then).
fn fused_verdict(
    required: bool,
    fallbacks: impl FnOnce() -> Vec<String>,
) -> Result<(), ComputeError> {
    if !required {
        return Ok(());
    }
    match fallbacks() {
        f if f.is_empty() => Ok(()),
        f => Err(ComputeError::NotFused(f)),
    }
}

/// Every use of the project's fused kernels that ran burn's operations
/// instead in this process (a shape they do not take, a variant that failed
/// its self-test), one line each; none without a GPU backend.
pub fn fallbacks() -> Vec<String> {
    #[cfg(gpu)]
    return super::gpu::pass::fallbacks();
    #[cfg(not(gpu))]
    Vec::new()
}

/// Whether burn-fusion's and CubeCL's device services run on their own
/// runner threads in this process (`CUBECL_DEVICE_THREADS` unset or not
/// `0`, the published behaviour) or inline on the calling thread (`0`):
/// the vendored cubecl-common's choice (vendor/README.md). `None` in a
/// build without a GPU backend.
pub fn device_threads() -> Option<bool> {
    #[cfg(gpu)]
    return Some(burn_cubecl::cubecl::device_handle::device_threads());
    #[cfg(not(gpu))]
    None
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
    use crate::model::device::F16_LOSS_SCALE;

    #[test]
    fn the_fused_kernels_are_required_on_a_gpu_only() {
        let e = require_fused(DeviceKind::Cpu).unwrap_err().to_string();
        assert!(e.contains("--device cuda or wgpu"), "{e}");
        // Refused, nothing is required of this process.
        assert!(check_fused().is_ok());
    }

    #[test]
    fn a_required_fallback_is_an_error_naming_each() {
        let two = || vec!["the SwiGLU of [512, 79, 8192]".to_owned(), "b".to_owned()];
        assert!(fused_verdict(false, two).is_ok());
        assert!(fused_verdict(true, Vec::new).is_ok());
        let e = fused_verdict(true, two).unwrap_err().to_string();
        assert!(
            e.starts_with("--require-fused: burn's operations ran where")
                && e.contains("\n  the SwiGLU of [512, 79, 8192]\n  b"),
            "{e}"
        );
    }

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
