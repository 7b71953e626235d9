//! The predictor on burn's fused CubeCL backends (`Fusion<CubeBackend<R>>`
//! and its autodiff), whatever the runtime `R`: few large operations
//! rather than many small ones ([`ModelBackend::FEW_KERNELS`]), the
//! project's fused attention, layer norm and SwiGLU where each variant
//! passed its self-test on the device (`gpu::attention`, `gpu::layers`),
//! and the linear layers' products as the runtime prefers them
//! ([`GpuRuntime`]: cuBLASLt on CUDA where it loads, burn's own
//! elsewhere).

use burn::{
    backend::{Autodiff, autodiff::checkpoint::strategy::CheckpointStrategy},
    nn::LayerNorm,
    tensor::{Shape, Tensor, backend::Backend, ops::FloatTensor},
};
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::Fusion;

use crate::model::{
    attention,
    backend::{
        AttentionKernel, LayerKernels, ModelBackend, Products, attend_by_parts, burn_swiglu,
    },
    device::Precision,
    gpu::{
        attention as gpu_attention, flat as gpu_flat, layers as gpu_layers,
        pass::{FusedCube, Layout},
    },
    layers,
    shape::ModelShape,
};

/// `x [.., k] · w [k, n]` as one 2-D product over every leading position
/// (`[rows, k] · [k, n]`), burn's products' path on the GPU.
///
/// burn's `linear` multiplies a batch of matrices by the broadcast weight,
/// and its backward then writes one weight gradient per batch element,
/// `[batch, k, n]`, before summing them over the batch: at batch 1,024 the
/// 9M step wrote and read about 34 GB of such partial gradients (the step's
/// account, docs/benchmarks.md). As one 2-D product the weight's gradient is
/// a single `x^T · dy`. The reshapes are views of the contiguous
/// activations the layers produce. The CPU keeps burn's `linear` (its
/// results stay bit-identical to the per-tensor code's).
pub(crate) fn flat_linear<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    w: Tensor<B, 2>,
) -> Tensor<B, D> {
    if D <= 2 {
        return burn::tensor::module::linear(x, w, None);
    }
    let mut dims = x.dims();
    let k = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    let y = burn::tensor::module::linear(x.reshape([rows, k]), w, None);
    dims[D - 1] = y.dims()[1];
    y.reshape(dims)
}

/// What differs between the GPU runtimes the predictor runs on: how the
/// linear layers multiply, and the hooks of the runtime's profiler.
pub trait GpuRuntime: CubeRuntime {
    /// The products of the linear layers (reported with timings).
    fn products() -> Products {
        Products::Burn
    }

    /// A linear layer's product without autodiff (inference).
    fn project<F: FloatElement, I: IntElement, BT: BoolElement, const D: usize>(
        x: Tensor<Fusion<CubeBackend<Self, F, I, BT>>, D>,
        w: Tensor<Fusion<CubeBackend<Self, F, I, BT>>, 2>,
    ) -> Tensor<Fusion<CubeBackend<Self, F, I, BT>>, D> {
        flat_linear(x, w)
    }

    /// A linear layer's product under autodiff (training).
    fn project_autodiff<
        F: FloatElement,
        I: IntElement,
        BT: BoolElement,
        C: CheckpointStrategy,
        const D: usize,
    >(
        x: Tensor<Autodiff<FusedCube<Self, F, I, BT>, C>, D>,
        w: Tensor<Autodiff<FusedCube<Self, F, I, BT>, C>, 2>,
    ) -> Tensor<Autodiff<FusedCube<Self, F, I, BT>, C>, D> {
        flat_linear(x, w)
    }

    /// Products that fell back from the vendor library to burn's.
    fn product_fallbacks() -> u64 {
        0
    }

    /// Starts or stops an external profiler's capture range.
    fn profiler_range(_start: bool) {}

    /// The most bytes one buffer may hold on `device`
    /// ([`ModelBackend::max_buffer_bytes`]): unbounded unless the runtime
    /// says so.
    fn max_buffer_bytes(_device: &Self::Device) -> Option<u64> {
        None
    }

    /// The sum of every element of `t` ([`ModelBackend::sum_all`]).
    fn sum_all<B: Backend>(t: Tensor<B, 1>) -> Tensor<B, 1> {
        t.sum()
    }
}

/// Columns of a row in [`sum_in_rows`].
const SUM_COLUMNS: usize = 4096;

/// The sum of every element of `t` by rows: padded with zeros to whole
/// rows of [`SUM_COLUMNS`], each row summed (`sum_dim`), then the row sums
/// the same way, until one row is left. Every reduction runs along at most
/// 4,096 elements, which burn's kernels get right on every runtime.
pub(crate) fn sum_in_rows<B: Backend>(t: Tensor<B, 1>) -> Tensor<B, 1> {
    let n = t.dims()[0];
    if n <= SUM_COLUMNS {
        return t.sum();
    }
    let rows = n.div_ceil(SUM_COLUMNS);
    let pad = rows * SUM_COLUMNS - n;
    let t = if pad > 0 {
        let zeros = Tensor::<B, 1>::zeros([pad], &t.device()).cast(t.dtype());
        Tensor::cat(vec![t, zeros], 0)
    } else {
        t
    };
    sum_in_rows(t.reshape([rows, SUM_COLUMNS]).sum_dim(1).reshape([rows]))
}

impl<R: GpuRuntime, F: FloatElement, I: IntElement, BT: BoolElement> ModelBackend
    for Fusion<CubeBackend<R, F, I, BT>>
{
    const FEW_KERNELS: bool = true;

    fn project<const D: usize>(x: Tensor<Self, D>, w: Tensor<Self, 2>) -> Tensor<Self, D> {
        R::project(x, w)
    }

    fn products() -> Products {
        R::products()
    }

    fn attend(q: Tensor<Self, 4>, k: Tensor<Self, 4>, v: Tensor<Self, 4>) -> Tensor<Self, 4> {
        if gpu_attention::use_fused::<R, F, I, BT>(&q.device(), q.dims(), q.dtype(), Layout::Views)
        {
            attention::fused_attention_inference(q, k, v)
        } else {
            burn::tensor::module::attention(q, k, v, None, None, Default::default())
        }
    }

    fn attend_packed(qkv: Tensor<Self, 3>, heads: usize) -> Tensor<Self, 3> {
        if packed_fused::<R, F, I, BT>(&qkv.device(), qkv.dims(), qkv.dtype(), heads) {
            attention::fused_attention_packed_inference(qkv, heads)
        } else {
            attend_by_parts(qkv, heads)
        }
    }

    fn attention() -> AttentionKernel {
        gpu_attention::attention_kernel::<R>()
    }

    fn norm(norm: &LayerNorm<Self>, x: Tensor<Self, 3>) -> Tensor<Self, 3> {
        match fused_norm_parameters::<R, F, I, BT, Self>(norm, &x) {
            Some((gamma, beta)) => layers::fused_layer_norm_inference(x, gamma, beta),
            None => norm.forward(x),
        }
    }

    fn swiglu(both: Tensor<Self, 3>) -> Tensor<Self, 3> {
        if gpu_layers::use_fused_swiglu::<R, F, I, BT>(&both.device(), both.dims(), both.dtype()) {
            layers::fused_swiglu_inference(both)
        } else {
            burn_swiglu(both)
        }
    }

    fn layers() -> LayerKernels {
        gpu_layers::layer_kernels::<R>()
    }

    fn profiler_range(start: bool) {
        R::profiler_range(start);
    }

    fn product_fallbacks() -> u64 {
        R::product_fallbacks()
    }

    fn sum_all(t: Tensor<Self, 1>) -> Tensor<Self, 1> {
        R::sum_all(t)
    }

    fn max_buffer_bytes(device: &Self::Device) -> Option<u64> {
        R::max_buffer_bytes(device)
    }

    fn flatten(parts: Vec<FloatTensor<Self>>) -> FloatTensor<Self> {
        gpu_flat::flatten::<R, F, I, BT>(parts)
    }

    fn unflatten(flat: FloatTensor<Self>, shapes: &[Shape]) -> Vec<FloatTensor<Self>> {
        gpu_flat::unflatten::<R, F, I, BT>(flat, shapes)
    }
}

impl<R, F, I, BT, C> ModelBackend for Autodiff<Fusion<CubeBackend<R, F, I, BT>>, C>
where
    R: GpuRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
    C: CheckpointStrategy,
{
    const FEW_KERNELS: bool = true;

    fn project<const D: usize>(x: Tensor<Self, D>, w: Tensor<Self, 2>) -> Tensor<Self, D> {
        R::project_autodiff(x, w)
    }

    fn products() -> Products {
        R::products()
    }

    fn attend(q: Tensor<Self, 4>, k: Tensor<Self, 4>, v: Tensor<Self, 4>) -> Tensor<Self, 4> {
        if gpu_attention::use_fused::<R, F, I, BT>(&q.device(), q.dims(), q.dtype(), Layout::Views)
        {
            attention::fused_attention(q, k, v)
        } else {
            burn::tensor::module::attention(q, k, v, None, None, Default::default())
        }
    }

    fn attend_packed(qkv: Tensor<Self, 3>, heads: usize) -> Tensor<Self, 3> {
        if packed_fused::<R, F, I, BT>(&qkv.device(), qkv.dims(), qkv.dtype(), heads) {
            attention::fused_attention_packed(qkv, heads)
        } else {
            attend_by_parts(qkv, heads)
        }
    }

    fn attention() -> AttentionKernel {
        gpu_attention::attention_kernel::<R>()
    }

    fn norm(norm: &LayerNorm<Self>, x: Tensor<Self, 3>) -> Tensor<Self, 3> {
        match fused_norm_parameters::<R, F, I, BT, Self>(norm, &x) {
            Some((gamma, beta)) => layers::fused_layer_norm(x, gamma, beta),
            None => norm.forward(x),
        }
    }

    fn swiglu(both: Tensor<Self, 3>) -> Tensor<Self, 3> {
        if gpu_layers::use_fused_swiglu::<R, F, I, BT>(&both.device(), both.dims(), both.dtype()) {
            layers::fused_swiglu(both)
        } else {
            burn_swiglu(both)
        }
    }

    fn layers() -> LayerKernels {
        gpu_layers::layer_kernels::<R>()
    }

    fn profiler_range(start: bool) {
        R::profiler_range(start);
    }

    fn product_fallbacks() -> u64 {
        R::product_fallbacks()
    }

    fn sum_all(t: Tensor<Self, 1>) -> Tensor<Self, 1> {
        R::sum_all(t)
    }

    fn max_buffer_bytes(device: &Self::Device) -> Option<u64> {
        R::max_buffer_bytes(device)
    }
}

/// Whether a block's packed attention of `qkv` (`[batch, seq, 3 width]`)
/// in `heads` heads runs the fused kernels: the width splits into heads,
/// and the packed variant of its shape and format passed its self-test.
fn packed_fused<R, F, I, BT>(
    device: &R::Device,
    [b, t, w3]: [usize; 3],
    dtype: burn::tensor::DType,
    heads: usize,
) -> bool
where
    R: GpuRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    w3 % (3 * heads) == 0
        && gpu_attention::use_fused::<R, F, I, BT>(
            device,
            [b, heads, t, w3 / 3 / heads],
            dtype,
            Layout::Packed,
        )
}

/// A layer norm's `gamma` and `beta` when the fused kernels take it: the
/// norm has an offset, the parameters are in `x`'s format, and the
/// variant of `x`'s shape and format passed its self-test on `x`'s device.
/// The model's norms all use [`layers::LAYER_NORM_EPS`], as burn's and
/// haiku's default.
fn fused_norm_parameters<R, F, I, BT, B>(
    norm: &LayerNorm<B>,
    x: &Tensor<B, 3>,
) -> Option<(Tensor<B, 1>, Tensor<B, 1>)>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
    B: Backend<Device = R::Device>,
{
    let gamma = norm.gamma.val();
    let beta = norm.beta.as_ref().map(|b| b.val());
    let refusal = match &beta {
        None => Some("a norm without an offset (beta)".to_owned()),
        Some(beta) if gamma.dtype() != x.dtype() || beta.dtype() != x.dtype() => Some(format!(
            "its parameters in {:?} and {:?}, its input in {:?}",
            gamma.dtype(),
            beta.dtype(),
            x.dtype()
        )),
        Some(_) => None,
    };
    if let Some(why) = refusal {
        if crate::model::gpu::pass::fused_wanted(crate::model::backend::LAYERS_VAR) {
            crate::model::gpu::pass::shape_fallback::<R>(
                &x.device(),
                crate::model::gpu::pass::Family::LayerNorm,
                format!("the layer norm of {:?} in {:?}", x.dims(), x.dtype()),
                why,
                "burn's layer norm",
            );
        }
        return None;
    }
    let fits = gpu_layers::use_fused_norm::<R, F, I, BT>(&x.device(), x.dims(), x.dtype());
    fits.then(|| (gamma, beta.expect("checked above")))
}

/// Self-tests, as a model's first forward pass would, every variant of the
/// project's kernels a predictor of `shape` runs on `device` in
/// `precision` (its attention, its blocks' and final layer norms, its
/// SwiGLU; the norms stay f32 in mixed precision), and returns every
/// verdict of the process so far (`gpu::pass::verdicts`). The CUDA and
/// wgpu tests assert them; `bench-step` reports them.
pub fn self_test_model<R: GpuRuntime>(
    device: &R::Device,
    shape: &ModelShape,
    precision: Precision,
) -> Vec<crate::model::gpu::pass::Verdict> {
    use burn::tensor::DType;
    let products = match precision {
        Precision::F32 => DType::F32,
        Precision::Bf16 => DType::BF16,
        Precision::F16 => DType::F16,
    };
    let (t, d) = (shape.seq_len, shape.d_model);
    if shape.layers > 0 && shape.heads > 0 {
        gpu_attention::use_fused::<R, f32, i32, u32>(
            device,
            [2, shape.heads, t, d / shape.heads],
            products,
            Layout::Packed,
        );
        gpu_layers::use_fused_norm::<R, f32, i32, u32>(device, [2, t, d], DType::F32);
        gpu_layers::use_fused_swiglu::<R, f32, i32, u32>(
            device,
            [2, t, 2 * shape.widening * d],
            products,
        );
    }
    gpu_layers::use_fused_norm::<R, f32, i32, u32>(device, [2, 1, d], DType::F32);
    crate::model::gpu::pass::verdicts()
}
