//! The predictor on any GPU wgpu drives: burn's `wgpu` backend
//! (`Fusion<CubeBackend<WgpuRuntime>>`), its kernels compiled by CubeCL to
//! WGSL and by wgpu to the platform's shaders (SPIR-V on Vulkan, MSL on
//! Metal, HLSL on DirectX 12). AMD, Intel and Apple GPUs run it; so does
//! Mesa's lavapipe, a conformant software Vulkan driver, which is how CI
//! runs every GPU code path without a GPU (`make test-wgpu`).
//!
//! The project's fused attention, layer norm and SwiGLU run here as on
//! CUDA ([`crate::model::gpu::backend`]), each variant self-tested on the device
//! first, with key tiles sized to the device's shared memory. The linear
//! layers' products are burn's (CubeCL's matmul; there is no vendor
//! library to call). f32 everywhere; mixed f16 where the device has f16
//! ([`supports_f16`]); bf16 is CUDA's.
//!
//! The adapter is chosen as CubeCL chooses it (a discrete GPU first, then
//! integrated, virtual, CPU; `CUBECL_WGPU_DEFAULT_DEVICE=Cpu` and the like
//! override it) and set up once per process by [`device`], which reports
//! which adapter it found, or says how to get one.

use std::sync::OnceLock;

use burn::tensor::{DType, backend::Backend};
use cubecl::{
    Runtime,
    wgpu::{AutoGraphicsApi, RuntimeOptions, WgpuDevice, WgpuRuntime, init_setup},
};

use crate::model::{gpu::backend::GpuRuntime, gpu::pass::panic_message};

/// wgpu's side of the predictor on the fused backend: burn's products, no
/// profiler hooks, and whole-tensor sums in two levels
/// ([`crate::model::gpu::backend::sum_in_rows`]): burn 0.21's `sum` of a tensor
/// past 2^18 elements is wrong on wgpu (measured on lavapipe: 56% off at
/// 600,000 elements, 97% at 9 million; its chained reduction runs past
/// the 65,535 workgroups a wgpu dispatch allows), which would corrupt the
/// global gradient norm of every model but the tiny one.
impl GpuRuntime for WgpuRuntime {
    fn sum_all<B: Backend>(t: burn::tensor::Tensor<B, 1>) -> burn::tensor::Tensor<B, 1> {
        crate::model::gpu::backend::sum_in_rows(t)
    }

    /// wgpu's largest storage buffer (`max_storage_buffer_binding_size`):
    /// evaluation sizes its passes to it.
    fn max_buffer_bytes(device: &WgpuDevice) -> Option<u64> {
        Some(
            WgpuRuntime::client(device)
                .properties()
                .memory
                .max_page_size,
        )
    }
}

/// Checks that a training batch of `batch` sequences of `shape` fits the
/// device's buffers (their widest activation,
/// [`crate::model::ModelShape::widest_activation_bytes`]), naming the largest
/// batch that does when it does not: wgpu refuses larger buffers with a
/// panic deep in the first step.
pub fn check_batch(
    device: &WgpuDevice,
    shape: &crate::model::shape::ModelShape,
    batch: usize,
) -> Result<(), crate::model::device::ComputeError> {
    let allowed = <WgpuRuntime as GpuRuntime>::max_buffer_bytes(device).unwrap_or(u64::MAX);
    let needed = shape.widest_activation_bytes(batch);
    if needed <= allowed {
        return Ok(());
    }
    Err(crate::model::device::ComputeError::Buffer {
        batch,
        needed,
        allowed,
        largest: (allowed / shape.widest_activation_bytes(1).max(1)) as usize,
    })
}

/// The adapter a process runs on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Adapter {
    /// The adapter's name (`llvmpipe (LLVM 15.0.6, 256 bits)` for lavapipe).
    pub name: String,
    /// The graphics API: Vulkan, Metal, Dx12, Gl.
    pub backend: String,
    /// DiscreteGpu, IntegratedGpu, VirtualGpu, Cpu (lavapipe), Other.
    pub device_type: String,
    /// The driver and its version.
    pub driver: String,
}

impl std::fmt::Display for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, {}, {})",
            self.name, self.backend, self.device_type, self.driver
        )
    }
}

/// Why no wgpu device could be set up.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "wgpu found no adapter it can use ({0}): install a Vulkan, Metal or DirectX 12 driver (without a GPU on Linux, Mesa's software Vulkan: `apt-get install mesa-vulkan-drivers`, or your distribution's package of lavapipe)"
)]
pub struct NoAdapter(pub String);

/// The wgpu device the process runs on (CubeCL's default device), set up
/// on first use with the adapter it reports ([`adapter`]).
pub fn device() -> Result<WgpuDevice, NoAdapter> {
    setup().map(|_| WgpuDevice::DefaultDevice)
}

/// The adapter [`device`] set up.
pub fn adapter() -> Result<Adapter, NoAdapter> {
    setup().cloned()
}

fn setup() -> Result<&'static Adapter, NoAdapter> {
    static SETUP: OnceLock<Result<Adapter, NoAdapter>> = OnceLock::new();
    SETUP
        .get_or_init(|| {
            let made = std::panic::catch_unwind(|| {
                init_setup::<AutoGraphicsApi>(&WgpuDevice::DefaultDevice, RuntimeOptions::default())
            });
            match made {
                Ok(setup) => {
                    let info = setup.adapter.get_info();
                    Ok(Adapter {
                        name: info.name,
                        backend: format!("{:?}", info.backend),
                        device_type: format!("{:?}", info.device_type),
                        driver: format!("{} {}", info.driver, info.driver_info)
                            .trim()
                            .to_owned(),
                    })
                }
                Err(panic) => Err(NoAdapter(panic_message(&*panic))),
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether the device computes in f16 (shader-f16): mixed f16 needs it.
pub fn supports_f16(device: &WgpuDevice) -> bool {
    <burn::backend::Wgpu<f32, i32> as Backend>::supports_dtype(device, DType::F16)
}

/// The project's kernels and the trainer on wgpu against their CPU twins
/// (`make test-wgpu`; in CI on Mesa's lavapipe): the real launch
/// functions, burn-fusion's custom operations, autodiff, the kernels
/// burn's fusion generates, CubeCL's WGSL compiler, naga and the driver.
/// Without an adapter they fail: nothing here is skipped.
#[cfg(test)]
mod tests {
    use burn::tensor::{Shape, Tensor, TensorData, TensorPrimitive};
    use burn_cubecl::{CubeBackend, tensor::CubeTensor};

    use super::*;
    use crate::{
        chess::RecordSet,
        model::{
            ModelShape, Precision, Preset,
            attention::{FusedAttention, Heads},
            gpu,
            gpu::pass::{Family, Layout, Limits, Variant, bound_for, relative_error, with_kernels},
        },
        train::{agreement::train_both, loss::Loss},
    };

    type Fused = burn::backend::Wgpu<f32, i32>;
    type Plain = CubeBackend<WgpuRuntime, f32, i32, u32>;

    fn wgpu() -> WgpuDevice {
        crate::model::gpu::cache::configure_kernel_cache();
        let device =
            device().expect("a wgpu adapter (lavapipe: apt-get install mesa-vulkan-drivers)");
        println!("adapter: {}", adapter().unwrap());
        device
    }

    /// The formats the device computes in: f32, and f16 where it has it.
    fn formats(device: &WgpuDevice) -> Vec<DType> {
        if supports_f16(device) {
            vec![DType::F32, DType::F16]
        } else {
            println!("this adapter has no f16: f32 only");
            vec![DType::F32]
        }
    }

    /// Prints every `(variant, output, error)` and fails on any above its
    /// format's bound (or NaN), after all are printed.
    fn judge(results: Vec<(Variant, &'static str, f32)>) {
        let mut failures = Vec::new();
        for (variant, what, e) in &results {
            let bound = bound_for(variant.dtype);
            println!("{variant}: {what} {e:.1e} (bound {bound:.0e})");
            if e.is_nan() || *e > bound {
                failures.push(format!("{variant}: {what} {e:e}"));
            }
        }
        assert!(!results.is_empty());
        assert!(failures.is_empty(), "above their bounds: {failures:#?}");
    }

    #[test]
    fn the_adapter_reports_limits_the_kernels_fit() {
        let device = wgpu();
        let limits = Limits::of_device::<WgpuRuntime>(&device);
        println!("{limits:?}, f16: {}", supports_f16(&device));
        // WebGPU's minimum limits, which every adapter meets.
        assert!(
            limits.shared_bytes >= 16 << 10 && limits.units >= 256,
            "{limits:?}"
        );
        // The attention's key tile fits whatever the shared memory.
        for dim in [16, 32, 64, 128] {
            let tile = gpu::attention::key_tile(dim, &limits);
            assert!(tile >= 1 && gpu::attention::shared_bytes(tile, dim) <= limits.shared_bytes);
        }
        // The 9M model's attention at batch 1,024 takes more cubes than
        // wgpu allows along x: the launch spreads them over y.
        assert!(gpu::attention::supported(
            [1024, 8, 79, 32],
            DType::F32,
            &limits
        ));
    }

    /// Every attention variant training and evaluation use on wgpu (the
    /// blocks' sequence lengths 78 and 79, head dimensions 16 (tiny), 32
    /// (9M) and 64, f32 and f16, inputs dense, as views of a projection,
    /// and packed as the blocks hand them over), forward and the three
    /// gradients through the fused backend's autodiff, against the
    /// plain-Rust reference.
    #[test]
    fn attention_variants_equal_their_cpu_twin() {
        let device = wgpu();
        let mut results = Vec::new();
        for dtype in formats(&device) {
            for seq in [78, 79] {
                for dim in [16, 32, 64] {
                    for layout in [Layout::Dense, Layout::Views, Layout::Packed] {
                        let variant = Variant {
                            family: Family::Attention,
                            sizes: [seq, dim],
                            dtype,
                            layout,
                        };
                        let errors = gpu::attention::variant_errors::<WgpuRuntime, f32, i32, u32>(
                            &device, variant, 2,
                        )
                        .expect("the kernels ran");
                        results.extend(errors.into_iter().map(|(_, what, e)| (variant, what, e)));
                    }
                }
            }
        }
        judge(results);
    }

    /// The packed passes read and write the 9M model's projection in place
    /// (its thirds start at offsets any device binds: 1,024 bytes in f32,
    /// 512 in f16) and give what burn's copies around the per-tensor
    /// passes give.
    #[test]
    fn packed_attention_reads_and_writes_the_projection_in_place() {
        let device = wgpu();
        let (b, t, heads, dim) = (2, 79, 8, 32);
        let w = heads * dim;
        for dtype in formats(&device) {
            let tensor = |salt: u64, cols: usize| -> CubeTensor<WgpuRuntime> {
                let values: Vec<f32> = (0..b * t * cols)
                    .map(|i| (((i as u64 * 2_654_435_761 + salt) % 1000) as f32 / 500.0) - 1.0)
                    .collect();
                Tensor::<Plain, 3>::from_data(TensorData::new(values, [b, t, cols]), &device)
                    .cast(dtype)
                    .into_primitive()
                    .tensor()
            };
            let (qkv, d_context) = (tensor(1, 3 * w), tensor(2, w));
            for part in 0..3 {
                assert!(
                    gpu::attention::heads_view(&qkv, heads, 3, part).is_some(),
                    "third {part} of {dtype:?} not bound in place"
                );
            }
            let read = |t: CubeTensor<WgpuRuntime>| -> Vec<f32> {
                Tensor::<Plain, 3>::from_primitive(TensorPrimitive::Float(t))
                    .cast(DType::F32)
                    .into_data()
                    .to_vec()
                    .unwrap()
            };
            let (context, lse) = Plain::attention_forward_packed(qkv.clone(), heads);
            let (copied, lse_copied) =
                crate::model::attention::packed::forward::<Plain>(qkv.clone(), heads);
            let d_qkv = Plain::attention_backward_packed(
                qkv.clone(),
                context.clone(),
                lse.clone(),
                d_context.clone(),
                heads,
            );
            let d_copied = crate::model::attention::packed::backward::<Plain>(
                qkv,
                copied.clone(),
                lse_copied,
                d_context,
                heads,
            );
            for (what, ours, theirs) in [
                ("context", read(context), read(copied)),
                ("d_qkv", read(d_qkv), read(d_copied)),
            ] {
                assert_eq!(ours.len(), theirs.len(), "{what}");
                let e = relative_error(&ours, &theirs);
                assert!(e <= bound_for(dtype), "{what} {dtype:?}: {e:e}");
            }
        }
    }

    /// The layer norm's variants (the tiny and 9M widths, 79 and 78
    /// positions dense, the final norm's last-position view) and the
    /// SwiGLU's (the tiny and 9M widths), f32 and f16, through the fused
    /// backend's autodiff, against the plain-Rust reference.
    #[test]
    fn layer_variants_equal_their_cpu_twins() {
        let device = wgpu();
        let mut results = Vec::new();
        for dtype in formats(&device) {
            let mut variants = Vec::new();
            for width in [64, 256] {
                for (positions, layout) in
                    [(79, Layout::Dense), (78, Layout::Dense), (1, Layout::Views)]
                {
                    variants.push(Variant {
                        family: Family::LayerNorm,
                        sizes: [width, positions],
                        dtype,
                        layout,
                    });
                }
            }
            for width in [512, 2048] {
                variants.push(Variant {
                    family: Family::Swiglu,
                    sizes: [width, 0],
                    dtype,
                    layout: Layout::Dense,
                });
            }
            for variant in variants {
                let errors =
                    gpu::layers::variant_errors::<WgpuRuntime, f32, i32, u32>(&device, variant)
                        .expect("the kernels ran");
                results.extend(errors.into_iter().map(|(_, what, e)| (variant, what, e)));
            }
        }
        judge(results);
    }

    /// The kernels launched directly on the CubeCL backend on the shapes
    /// `tests/cuda.rs` checks on an H100 (the 9M and 136M heads, rows of 7,
    /// the layer widths 256, 1,024 and 7), f32: the log-sum-exp, the
    /// norm's mean and `rstd` included.
    #[test]
    fn the_checked_shapes_equal_the_reference() {
        let device = wgpu();
        let mut failures = Vec::new();
        let attention = gpu::attention::kernel_errors::<WgpuRuntime>(&device, DType::F32).unwrap();
        let layers = gpu::layers::kernel_errors::<WgpuRuntime>(&device, DType::F32).unwrap();
        let all = attention
            .iter()
            .map(|(s, w, e)| (format!("{s:?}"), *w, *e))
            .chain(layers.iter().map(|(s, w, e)| (format!("{s:?}"), *w, *e)));
        for (shape, what, e) in all {
            println!("{shape} {what}: {e:.1e}");
            if e.is_nan() || e > 1e-4 {
                failures.push(format!("{shape} {what}: {e:e}"));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// The check catches a kernel that indexes wrongly: the forward
    /// launched on q, k and v views (heads of one projection, transposed)
    /// but told they are dense, which is what a kernel ignoring strides
    /// reads (the bug that broke the attention on an H100), is far from
    /// the reference; told the truth, it agrees.
    #[test]
    fn a_kernel_that_ignores_strides_fails_the_check() {
        let device = wgpu();
        let s = Heads {
            batch: 2,
            heads: 4,
            seq: 79,
            dim: 16,
        };
        let w = s.heads * s.dim;
        let proj: Vec<f32> = (0..s.batch * s.seq * 3 * w)
            .map(|i| (((i * 37 + 5) % 61) as f32 - 30.0) / 15.0)
            .collect();
        let whole = Tensor::<Plain, 3>::from_data(
            TensorData::new(proj.clone(), [s.batch, s.seq, 3 * w]),
            &device,
        );
        let view = |part: usize| -> CubeTensor<WgpuRuntime> {
            whole
                .clone()
                .narrow(2, part * w, w)
                .reshape([s.batch, s.seq, s.heads, s.dim])
                .swap_dims(1, 2)
                .into_primitive()
                .tensor()
        };
        let dense = |t: &[f32]| -> Vec<f32> {
            // The reference's dense [batch, heads, seq, dim] of a part.
            let mut out = Vec::with_capacity(s.len());
            for b in 0..s.batch {
                for h in 0..s.heads {
                    for r in 0..s.seq {
                        let at = (b * s.seq + r) * 3 * w + h * s.dim;
                        out.extend_from_slice(&t[at..at + s.dim]);
                    }
                }
            }
            out
        };
        let parts = |part: usize| dense(&proj[part * w..]);
        let reference = crate::model::attention::forward(&parts(0), &parts(1), &parts(2), s);
        let run = |lie: bool| -> f32 {
            let [q, k, v] = [0, 1, 2].map(|p| {
                let t = view(p);
                if lie {
                    // The view's buffer and offset, dense strides.
                    CubeTensor::new_contiguous(
                        t.client.clone(),
                        t.device.clone(),
                        Shape::new([s.batch, s.heads, s.seq, s.dim]),
                        t.handle.clone(),
                        t.dtype,
                    )
                } else {
                    t
                }
            });
            let (out, _) = Plain::attention_forward(q, k, v);
            let out = Tensor::<Plain, 4>::from_primitive(TensorPrimitive::Float(out));
            relative_error(&out.into_data().to_vec::<f32>().unwrap(), &reference.out)
        };
        let (honest, lying) = (run(false), run(true));
        println!("views with their strides: {honest:.1e}; told they are dense: {lying:.1e}");
        assert!(honest <= 1e-4, "{honest}");
        assert!(
            lying.is_nan() || lying > 1e-1,
            "a wrong indexing went unnoticed: {lying}"
        );
    }

    /// The tiny action-value model trained 20 steps on wgpu and on the CPU
    /// from the same initial parameters on the same batches: every step's
    /// loss within 1e-4 relative, with the project's fused kernels and with
    /// burn's operations.
    #[test]
    fn the_tiny_model_trains_as_on_the_cpu() {
        let device = wgpu();
        let shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
        for fused in [true, false] {
            let started = std::time::Instant::now();
            let losses = with_kernels(fused, || {
                train_both::<
                    burn::backend::Autodiff<burn::backend::Flex>,
                    burn::backend::Autodiff<Fused>,
                >(
                    &shape,
                    Loss::HlGauss,
                    16,
                    20,
                    1e-3,
                    3,
                    Precision::F32,
                    &Default::default(),
                    &device,
                )
            })
            .expect("20 steps on both");
            let worst = losses.iter().map(|l| l.relative()).fold(0.0, f64::max);
            println!(
                "fused kernels {fused}: {:.1} s, worst step {worst:.1e}, first {:?}, last {:?}",
                started.elapsed().as_secs_f64(),
                losses.first(),
                losses.last()
            );
            assert_eq!(losses.len(), 20);
            for l in &losses {
                assert!(l.relative() <= 1e-4, "fused kernels {fused}: step {l:?}");
            }
            assert!(
                losses.last().unwrap().reference < losses[0].reference,
                "the loss falls: {losses:?}"
            );
        }
    }

    /// The optimiser's gradient gather (`gpu::flat`) copies every part
    /// exactly, views included, in one launch and in groups of three, in
    /// every format the device has; and the variant passes the self-test
    /// training runs.
    #[test]
    fn the_gradient_gather_copies_every_part_exactly() {
        let device = wgpu();
        let group = gpu::flat::gather_group(&Limits::of_device::<WgpuRuntime>(&device));
        println!("{group} parts a launch");
        for dtype in formats(&device) {
            for group in [group, 3] {
                let errors =
                    gpu::flat::gather_errors::<WgpuRuntime, f32, i32, u32>(&device, dtype, group)
                        .expect("the gather ran");
                assert_eq!(errors.len(), 10);
                for (shape, what, e) in errors {
                    assert_eq!(e, 0.0, "{dtype:?}, {group} a launch, {shape:?}: {what} {e}");
                }
            }
            assert!(gpu::flat::use_gather::<WgpuRuntime, f32, i32, u32>(
                &device,
                &[burn::tensor::Shape::new([3, 5])],
                dtype
            ));
        }
    }

    /// Whole-tensor sums past 2^18 elements (a model's flat gradient, whose
    /// norm clips every step) are right on wgpu through
    /// [`crate::model::ModelBackend::sum_all`]; burn's own `sum` is
    /// printed beside it (wrong on lavapipe with burn 0.21).
    #[test]
    fn whole_tensor_sums_are_right_past_two_to_the_eighteen() {
        use crate::model::backend::ModelBackend;
        let device = wgpu();
        for n in [1000usize, 264_800, 600_000, 9_000_000] {
            let v: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32) / 100.0).collect();
            let exact: f64 = v.iter().map(|&x| f64::from(x)).sum();
            let t = || Tensor::<Fused, 1>::from_data(TensorData::new(v.clone(), [n]), &device);
            let error = |x: Tensor<Fused, 1>| {
                let x = f64::from(x.into_data().to_vec::<f32>().unwrap()[0]);
                (x - exact).abs() / exact
            };
            let ours = error(<Fused as ModelBackend>::sum_all(t()));
            println!(
                "{n} elements: sum_all {ours:.1e}, burn's sum {:.1e}",
                error(t().sum())
            );
            assert!(ours < 1e-5, "{n} elements: {ours}");
        }
    }

    /// A shape the fused kernels do not take runs burn's operations, named:
    /// one record per shape and format (one warning), in `fallbacks()`,
    /// and the family not reported as fused; with the kernels turned
    /// off nothing is recorded.
    #[test]
    fn a_shape_the_kernels_do_not_take_is_a_named_fallback() {
        let device = wgpu();
        // More elements than the kernels index (u32): 2^16 sequences of 8
        // heads of 79 x 128.
        let big = [1 << 16, 8, 79, 128];
        let fused = |shape| {
            with_kernels(true, || {
                gpu::attention::use_fused::<WgpuRuntime, f32, i32, u32>(
                    &device,
                    shape,
                    DType::F32,
                    Layout::Views,
                )
            })
        };
        assert!(!fused(big) && !fused(big));
        let named: Vec<String> = crate::model::fallbacks()
            .into_iter()
            .filter(|f| f.contains("[65536, 8, 79, 128]"))
            .collect();
        assert_eq!(named.len(), 1, "{named:#?}");
        assert!(
            named[0].contains("more than the 268435456 the kernels index")
                && named[0].contains("burn's attention ran"),
            "{}",
            named[0]
        );
        assert_ne!(
            gpu::attention::attention_kernel::<WgpuRuntime>(),
            crate::model::AttentionKernel::Fused
        );
        // Turned off: burn's attention by choice, not a fallback.
        let off = [1 << 16, 8, 79, 127];
        assert!(!with_kernels(false, || {
            gpu::attention::use_fused::<WgpuRuntime, f32, i32, u32>(
                &device,
                off,
                DType::F32,
                Layout::Views,
            )
        }));
        assert!(
            !crate::model::fallbacks()
                .iter()
                .any(|f| f.contains("[65536, 8, 79, 127]"))
        );
    }

    /// A variant whose self-test fails falls back alone: it is refused,
    /// others of its family still run, and the verdicts say which failed
    /// and why.
    #[test]
    fn a_failing_variant_falls_back_alone() {
        use crate::model::gpu::pass::{variant_enabled, verdicts};
        let device = wgpu();
        let variant = |dim| Variant {
            family: Family::Attention,
            sizes: [3, dim],
            dtype: DType::F32,
            layout: Layout::Dense,
        };
        let var = "CHESSBENCH_TEST_UNSET_KERNELS";
        let bad = with_kernels(true, || {
            variant_enabled::<WgpuRuntime>(var, &device, variant(5), "burn's", || {
                Err("a deliberate failure".into())
            })
        });
        let good = with_kernels(true, || {
            variant_enabled::<WgpuRuntime>(var, &device, variant(6), "burn's", || Ok(()))
        });
        // Asked again: the verdict is remembered, the test not rerun.
        let again = with_kernels(true, || {
            variant_enabled::<WgpuRuntime>(var, &device, variant(5), "burn's", || Ok(()))
        });
        assert!(!bad && good && !again);
        let all = verdicts();
        let failed = all
            .iter()
            .find(|v| v.variant == variant(5).to_string())
            .unwrap();
        assert!(!failed.passed && failed.reason.as_deref() == Some("a deliberate failure"));
        assert!(
            all.iter()
                .any(|v| v.variant == variant(6).to_string() && v.passed)
        );
        // Turned off, nothing is tested.
        assert!(!with_kernels(false, || variant_enabled::<WgpuRuntime>(
            var,
            &device,
            variant(7),
            "burn's",
            || panic!("not tested when off")
        )));
    }
}
