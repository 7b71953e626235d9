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
