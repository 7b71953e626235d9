//! A block's layer norm and SwiGLU on burn's GPU backends (CUDA, wgpu):
//! CubeCL kernels that follow [`crate::model::layers`] (forward and backward of
//! each), registered as custom operations of burn's fusion stream and,
//! through [`crate::model::layers::fused_layer_norm`] and
//! [`crate::model::layers::fused_swiglu`], as one autodiff operation each.
//!
//! - **Layer norm**: a cube of [`norm_units`] units per row at a time, at
//!   most [`NORM_CUBES`] cubes each walking its share of the rows; a unit
//!   keeps its columns of the row in registers, the row's sums go through
//!   shared memory (a tree over the cube's units). The backward also
//!   accumulates each cube's share of `dgamma` and `dbeta` in registers,
//!   writes them as one row of partial sums, and a second kernel adds the
//!   partial rows column by column (no atomics: the sums are the same at
//!   every launch).
//! - **SwiGLU**: a unit per output element at a time (as many cubes as the
//!   device allows, each walking its share), reading `gate` and `up` from
//!   the two halves of the block's one product, writing `d_gate | d_up`
//!   side by side in the backward (burn's slices would add two zero-padded
//!   gradients).
//!
//! Every tensor is read and written through the shape and strides the
//! runtime passes with it (CUDA pads rows; the final norm's input is a
//! view of every sequence's last position), and outputs are allocated in
//! the runtime's own layout, as the attention's kernels do. Values are
//! computed in f32 whatever the tensors' format. Each variant (width,
//! positions, format, layout) is self-tested through the fused backend the
//! first time it is about to run on a device ([`use_fused_norm`],
//! [`use_fused_swiglu`]), and one that fails falls back to burn's
//! operations alone.
//!
//! Without a GPU, `make test-kernels` runs the kernels' CUDA C on the CPU
//! under a model of CUDA's layouts and launch (`emulated` below,
//! `crate::model::gpu::cuda_emulator`), and `make test-wgpu` runs them through wgpu on
//! lavapipe.

use burn::{
    backend::Autodiff,
    tensor::{DType, Shape, Tensor, TensorData, TensorPrimitive, ops::FloatTensor},
};
use burn_cubecl::{
    BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement, cubecl::prelude::*,
    tensor::CubeTensor,
};
use burn_fusion::Fusion;
use burn_ir::{OperationOutput, TensorIr};

use crate::model::{
    backend::LayerKernels,
    gpu::attention::{empty_like, within_u32},
    gpu::pass::{
        Family, FamilyUse, KernelPass, Layout, Limits, Variant, bound_for, errors_within,
        family_use, fused_wanted, operands, register_pass, relative_error, shape_fallback,
        variant_enabled,
    },
    layers::{self, FusedLayers, LAYER_NORM_EPS},
};

/// The most cubes a layer norm launches: about eight per streaming
/// multiprocessor of an H100, each walking `rows / NORM_CUBES` rows; also
/// the rows of the backward's partial sums.
pub(crate) const NORM_CUBES: usize = 1024;

/// The widest row the layer norm keeps in registers (32 columns a unit).
pub(crate) const MAX_WIDTH: usize = 32 * MAX_NORM_UNITS;

/// Units of a layer norm's cube at most.
const MAX_NORM_UNITS: usize = 256;

/// Units per cube of the SwiGLU kernels (one per element).
const SWIGLU_UNITS: usize = 256;

/// The most cubes a SwiGLU launches (each walks its share of the elements).
const SWIGLU_CUBES: usize = 1 << 16;

/// Buffers the widest kernel binds: the layer norm backward's eight
/// tensors and CubeCL's metadata.
const BINDINGS: u32 = 9;

/// The most elements a tensor of the kernels may have (u32 indices on
/// buffers CUDA pads at most 4x; see the attention's `MAX_ELEMENTS`).
const MAX_ELEMENTS: usize = 1 << 28;

/// Units of a layer norm's cube for rows of `width`: a power of two (the
/// tree of the row sums), a warp at least, [`MAX_NORM_UNITS`] at most.
pub(crate) fn norm_units(width: usize) -> usize {
    width.next_power_of_two().clamp(32, MAX_NORM_UNITS)
}

fn formats(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// Whether a device with `limits` takes the kernels' cubes, their shared
/// memory (the layer norm's row sums) and their bindings.
fn fits(limits: &Limits) -> bool {
    MAX_NORM_UNITS as u32 <= limits.units
        && SWIGLU_UNITS as u32 <= limits.units
        && 4 * MAX_NORM_UNITS <= limits.shared_bytes
        && BINDINGS <= limits.bindings
}

/// Whether the layer norm kernels take `[batch, seq, width]` in `dtype` on
/// a device with `limits` ([`norm_refusal`] says why not).
pub(crate) fn norm_supported(shape: [usize; 3], dtype: DType, limits: &Limits) -> bool {
    shape[0] * shape[1] > 0 && norm_refusal(shape, dtype, limits).is_none()
}

/// Why the layer norm kernels do not take `[batch, seq, width]` in `dtype`
/// on a device with `limits`, or `None` when they do: rows of at most
/// [`MAX_WIDTH`], at most [`MAX_ELEMENTS`] elements.
pub(crate) fn norm_refusal(shape: [usize; 3], dtype: DType, limits: &Limits) -> Option<String> {
    let w = shape[2];
    if !(1..=MAX_WIDTH).contains(&w) {
        Some(format!("rows of {w}: the kernels take 1 to {MAX_WIDTH}"))
    } else {
        common_refusal(shape, dtype, limits)
    }
}

/// Whether the SwiGLU kernels take `both` of `[batch, seq, 2 f]` in
/// `dtype` on a device with `limits` ([`swiglu_refusal`] says why not).
pub(crate) fn swiglu_supported(shape: [usize; 3], dtype: DType, limits: &Limits) -> bool {
    shape[0] * shape[1] > 0 && swiglu_refusal(shape, dtype, limits).is_none()
}

/// Why the SwiGLU kernels do not take `both` of `[batch, seq, 2 f]` in
/// `dtype` on a device with `limits`, or `None` when they do: an even
/// width, at most [`MAX_ELEMENTS`] elements.
pub(crate) fn swiglu_refusal(shape: [usize; 3], dtype: DType, limits: &Limits) -> Option<String> {
    let w = shape[2];
    if w == 0 || w % 2 == 1 {
        Some(format!("rows of {w}: gate|up needs an even width"))
    } else {
        common_refusal(shape, dtype, limits)
    }
}

/// What both families need: f32, f16 or bf16, at most [`MAX_ELEMENTS`]
/// elements, and a device that takes their cubes, shared memory and
/// bindings.
fn common_refusal(shape: [usize; 3], dtype: DType, limits: &Limits) -> Option<String> {
    let [b, t, w] = shape;
    let elements = b.saturating_mul(t).saturating_mul(w);
    if !formats(dtype) {
        Some(format!(
            "{dtype:?}: the kernels compute in f32, f16 or bf16"
        ))
    } else if elements > MAX_ELEMENTS {
        Some(format!(
            "{elements} elements, more than the {MAX_ELEMENTS} the kernels index"
        ))
    } else if !fits(limits) {
        Some(format!(
            "the device's cubes, shared memory or bindings ({limits:?}) are smaller than the kernels'"
        ))
    } else {
        None
    }
}

pub use crate::model::backend::LAYERS_VAR;

/// Which layer norm and SwiGLU a GPU backend runs: burn's when
/// `CHESSBENCH_LAYERS` says so, or when no variant of the fused kernels
/// ran; mixed when some shape or variant fell back to burn's in this
/// process ([`crate::model::gpu::pass::fallbacks`] names them); the fused
/// kernels otherwise.
pub(crate) fn layer_kernels<R: CubeRuntime>() -> LayerKernels {
    match family_use::<R>(
        LAYERS_VAR,
        &[Family::LayerNorm, Family::Swiglu, Family::Gather],
    ) {
        FamilyUse::Fused => LayerKernels::Fused,
        FamilyUse::Mixed => LayerKernels::Mixed,
        FamilyUse::Burn => LayerKernels::Burn,
    }
}

/// The variant of the model's layer norm of `[batch, seq, width]` in
/// `dtype`: the blocks' norms take the residual stream (dense), the final
/// norm each sequence's last position (a view, `seq` 1).
pub(crate) fn norm_variant(shape: [usize; 3], dtype: DType) -> Variant {
    Variant {
        family: Family::LayerNorm,
        sizes: [shape[2], shape[1]],
        dtype,
        layout: if shape[1] == 1 {
            Layout::Views
        } else {
            Layout::Dense
        },
    }
}

/// The variant of the model's SwiGLU of `both` (`[batch, seq, 2 f]`, a
/// product's dense output) in `dtype`.
pub(crate) fn swiglu_variant(shape: [usize; 3], dtype: DType) -> Variant {
    Variant {
        family: Family::Swiglu,
        sizes: [shape[2], 0],
        dtype,
        layout: Layout::Dense,
    }
}

/// Whether the model's layer norm of `shape` in `dtype` on `device` runs
/// the fused kernels: they take it there and its variant
/// ([`norm_variant`]) passed its self-test through the fused backend.
pub(crate) fn use_fused_norm<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    device: &R::Device,
    shape: [usize; 3],
    dtype: DType,
) -> bool {
    if !fused_wanted(LAYERS_VAR) || shape[0] * shape[1] == 0 {
        return false;
    }
    if let Some(why) = norm_refusal(shape, dtype, &Limits::of_device::<R>(device)) {
        let what = format!("the layer norm of {shape:?} in {dtype:?}");
        shape_fallback::<R>(device, Family::LayerNorm, what, why, "burn's layer norm");
        return false;
    }
    let variant = norm_variant(shape, dtype);
    variant_enabled::<R>(LAYERS_VAR, device, variant, "burn's layer norm", || {
        errors_within(
            variant_errors::<R, F, I, BT>(device, variant)?,
            bound_for(dtype),
        )
    })
}

/// Whether the model's SwiGLU of `shape` in `dtype` on `device` runs the
/// fused kernels: they take it there and its variant ([`swiglu_variant`])
/// passed its self-test through the fused backend.
pub(crate) fn use_fused_swiglu<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    device: &R::Device,
    shape: [usize; 3],
    dtype: DType,
) -> bool {
    if !fused_wanted(LAYERS_VAR) || shape[0] * shape[1] == 0 {
        return false;
    }
    if let Some(why) = swiglu_refusal(shape, dtype, &Limits::of_device::<R>(device)) {
        let what = format!("the SwiGLU of {shape:?} in {dtype:?}");
        shape_fallback::<R>(device, Family::Swiglu, what, why, "burn's SwiGLU");
        return false;
    }
    let variant = swiglu_variant(shape, dtype);
    variant_enabled::<R>(LAYERS_VAR, device, variant, "burn's SwiGLU", || {
        errors_within(
            variant_errors::<R, F, I, BT>(device, variant)?,
            bound_for(dtype),
        )
    })
}

/// The shapes `[batch, seq, width]` [`kernel_errors`] checks (in
/// `tests/cuda.rs`, `tests/wgpu.rs` and on the CPU): the 9M block's layer
/// norm (width 256) and SwiGLU (2 x 1,024), the 136M/270M layer norm
/// (1,024), and odd ones (rows of 7 and of 2 x 7, padded by CUDA's
/// allocator).
pub(crate) const CHECKED_NORMS: [[usize; 3]; 3] = [[2, 79, 256], [1, 5, 1024], [3, 5, 7]];
pub(crate) const CHECKED_SWIGLUS: [[usize; 3]; 2] = [[2, 79, 2048], [3, 5, 14]];

/// The checks' inputs (`tests/cuda.rs`, `tests/wgpu.rs` and the CPU model
/// see the same numbers): `n` values in about [-2, 2) from `salt`, shifted
/// by `row_shift` per row of `width` (rows far from zero mean test the
/// layer norm's centring).
pub(crate) fn test_values(n: usize, width: usize, salt: usize, row_shift: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            (((i * 37 + salt * 11) % 61) as f32 - 30.0) / 15.0 + (i / width) as f32 * row_shift
        })
        .collect()
}

/// The layer norm's inputs for `shape` as the checks use them: x (rows
/// shifted away from zero mean), gamma (around one), beta, dy.
pub(crate) fn norm_inputs(shape: [usize; 3]) -> [Vec<f32>; 4] {
    let [b, t, w] = shape;
    let n = b * t * w;
    [
        test_values(n, w, 1, 0.25),
        test_values(w, w, 2, 0.0)
            .into_iter()
            .map(|v| 1.0 + v / 4.0)
            .collect(),
        test_values(w, w, 3, 0.0),
        test_values(n, w, 4, 0.0),
    ]
}

/// A kernel output's shape, name and largest relative error.
pub type KernelError = ([usize; 3], &'static str, f32);

/// A tensor's values through f32.
fn read<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.cast(DType::F32)
        .into_data()
        .to_vec::<f32>()
        .unwrap_or_default()
}

/// The kernels' largest relative errors against [`layers`]' reference
/// (which `make test` checks against burn's autodiff) on
/// [`CHECKED_NORMS`] and [`CHECKED_SWIGLUS`], launched directly on the
/// CubeCL backend of runtime `R`, tensors in `dtype` (the reference
/// computes in f32 on the inputs rounded to `dtype`).
pub fn kernel_errors<R: CubeRuntime>(
    device: &R::Device,
    dtype: DType,
) -> Result<Vec<KernelError>, String> {
    type B<R> = CubeBackend<R, f32, i32, u32>;
    let up = |x: &[f32], dims: &[usize]| -> FloatTensor<B<R>> {
        let data = TensorData::new(x.to_vec(), dims.to_vec());
        match dims.len() {
            1 => Tensor::<B<R>, 1>::from_data(data, device)
                .cast(dtype)
                .into_primitive()
                .tensor(),
            _ => Tensor::<B<R>, 3>::from_data(data, device)
                .cast(dtype)
                .into_primitive()
                .tensor(),
        }
    };
    fn down<R: CubeRuntime, const D: usize>(t: FloatTensor<B<R>>) -> Vec<f32> {
        read(Tensor::<B<R>, D>::from_primitive(TensorPrimitive::Float(t)))
    }
    let round = |x: &[f32], dims: &[usize]| -> Vec<f32> {
        match dims.len() {
            1 => down::<R, 1>(up(x, dims)),
            _ => down::<R, 3>(up(x, dims)),
        }
    };
    let mut errors = Vec::new();
    for dims in CHECKED_NORMS {
        let w = dims[2];
        let [x, gamma, beta, dy] = norm_inputs(dims);
        let (x, gamma, beta, dy) = (
            round(&x, &dims),
            round(&gamma, &[w]),
            round(&beta, &[w]),
            round(&dy, &dims),
        );
        let [y, mean, rstd] = B::<R>::layer_norm_forward(
            up(&x, &dims),
            up(&gamma, &[w]),
            up(&beta, &[w]),
            LAYER_NORM_EPS,
        );
        let reference = layers::layer_norm_forward(&x, &gamma, &beta, LAYER_NORM_EPS);
        let [dx, dgamma, dbeta] = B::<R>::layer_norm_backward(
            up(&x, &dims),
            up(&gamma, &[w]),
            mean.clone(),
            rstd.clone(),
            up(&dy, &dims),
        );
        let grads = layers::layer_norm_backward(&x, &gamma, &reference.mean, &reference.rstd, &dy);
        for (what, ours, theirs) in [
            ("norm output", down::<R, 3>(y), &reference.y),
            ("norm mean", down::<R, 2>(mean), &reference.mean),
            ("norm rstd", down::<R, 2>(rstd), &reference.rstd),
            ("norm dx", down::<R, 3>(dx), &grads.dx),
            ("norm dgamma", down::<R, 1>(dgamma), &grads.dgamma),
            ("norm dbeta", down::<R, 1>(dbeta), &grads.dbeta),
        ] {
            errors.push((dims, what, relative_error(&ours, theirs)));
        }
    }
    for dims in CHECKED_SWIGLUS {
        let [b, t, w] = dims;
        let out_dims = [b, t, w / 2];
        let both = round(&test_values(b * t * w, w, 5, 0.0), &dims);
        let d_out = round(&test_values(b * t * w / 2, w / 2, 6, 0.0), &out_dims);
        let out = down::<R, 3>(B::<R>::swiglu_forward(up(&both, &dims)));
        let d_both = down::<R, 3>(B::<R>::swiglu_backward(
            up(&both, &dims),
            up(&d_out, &out_dims),
        ));
        let reference = layers::swiglu_forward(&both, w / 2);
        let grads = layers::swiglu_backward(&both, &d_out, w / 2);
        errors.push((dims, "swiglu output", relative_error(&out, &reference)));
        errors.push((dims, "swiglu d_both", relative_error(&d_both, &grads)));
    }
    Ok(errors)
}

/// One variant of the fused layer norm or SwiGLU against [`layers`]'
/// reference, as training runs it: on the fused backend
/// `Autodiff<Fusion<CubeBackend<R, F, I, BT>>>`, through
/// [`layers::fused_layer_norm`] or [`layers::fused_swiglu`], two sequences
/// in the variant's format and layout (the final norm's input as the last
/// position of `[2, 79, width]`, as `Predictor` slices it). `(shape, what,
/// error)` for the output and every gradient; the reference computes in
/// f32 on the inputs rounded to the format.
pub(crate) fn variant_errors<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    device: &R::Device,
    variant: Variant,
) -> Result<Vec<KernelError>, String> {
    type A<R, F, I, BT> = Autodiff<Fusion<CubeBackend<R, F, I, BT>>>;
    let dtype = variant.dtype;
    let tensor = |x: &[f32], dims: [usize; 3]| -> Tensor<A<R, F, I, BT>, 3> {
        Tensor::<A<R, F, I, BT>, 3>::from_data(TensorData::new(x.to_vec(), dims), device)
            .cast(dtype)
    };
    let vector = |x: &[f32]| -> Tensor<A<R, F, I, BT>, 1> {
        Tensor::<A<R, F, I, BT>, 1>::from_data(TensorData::new(x.to_vec(), [x.len()]), device)
            .cast(dtype)
    };
    let rounded = |x: &[f32]| -> Vec<f32> { read(vector(x)) };
    let grad = |t: &Tensor<A<R, F, I, BT>, 3>, grads: &_| -> Result<Vec<f32>, String> {
        Ok(read(t.grad(grads).ok_or("no gradient of an input")?))
    };
    match variant.family {
        Family::LayerNorm => {
            let [w, t] = variant.sizes;
            let dims = [2, t, w];
            let [x, gamma, beta, dy] = norm_inputs(dims).map(|v| rounded(&v));
            let (gamma_t, beta_t) = (vector(&gamma).require_grad(), vector(&beta).require_grad());
            let (y, xs, x_leaf) = match variant.layout {
                Layout::Views => {
                    // The last position of each of two sequences of 79.
                    let seq = 79;
                    let mut wide = rounded(&test_values(2 * seq * w, w, 9, 0.0));
                    for (b, row) in x.chunks(w).enumerate() {
                        let at = (b * seq + seq - 1) * w;
                        wide[at..at + w].copy_from_slice(row);
                    }
                    let leaf = tensor(&wide, [2, seq, w]).require_grad();
                    let y = layers::fused_layer_norm(
                        leaf.clone().narrow(1, seq - 1, 1),
                        gamma_t.clone(),
                        beta_t.clone(),
                    );
                    (y, x.clone(), leaf)
                }
                Layout::Dense => {
                    let leaf = tensor(&x, dims).require_grad();
                    let y = layers::fused_layer_norm(leaf.clone(), gamma_t.clone(), beta_t.clone());
                    (y, x.clone(), leaf)
                }
                Layout::Packed => return Err("the layer norm has no packed layout".into()),
            };
            let grads = (y.clone() * tensor(&dy, dims)).sum().backward();
            let mut dx = grad(&x_leaf, &grads)?;
            if variant.layout == Layout::Views {
                let seq = 79;
                dx = (0..2)
                    .flat_map(|b| {
                        let at = (b * seq + seq - 1) * w;
                        dx[at..at + w].to_vec()
                    })
                    .collect();
            }
            let dgamma = read(gamma_t.grad(&grads).ok_or("no gradient of gamma")?);
            let dbeta = read(beta_t.grad(&grads).ok_or("no gradient of beta")?);
            let reference = layers::layer_norm_forward(&xs, &gamma, &beta, LAYER_NORM_EPS);
            let g = layers::layer_norm_backward(&xs, &gamma, &reference.mean, &reference.rstd, &dy);
            Ok(vec![
                (dims, "norm output", relative_error(&read(y), &reference.y)),
                (dims, "norm dx", relative_error(&dx, &g.dx)),
                (dims, "norm dgamma", relative_error(&dgamma, &g.dgamma)),
                (dims, "norm dbeta", relative_error(&dbeta, &g.dbeta)),
            ])
        }
        Family::Swiglu => {
            let [w, _] = variant.sizes;
            let (b, t) = (2, 79);
            let dims = [b, t, w];
            let both = rounded(&test_values(b * t * w, w, 5, 0.0));
            let d_out = rounded(&test_values(b * t * w / 2, w / 2, 6, 0.0));
            let leaf = tensor(&both, dims).require_grad();
            let out = layers::fused_swiglu(leaf.clone());
            let grads = (out.clone() * tensor(&d_out, [b, t, w / 2]))
                .sum()
                .backward();
            let d_both = grad(&leaf, &grads)?;
            let reference = layers::swiglu_forward(&both, w / 2);
            let g = layers::swiglu_backward(&both, &d_out, w / 2);
            Ok(vec![
                (
                    dims,
                    "swiglu output",
                    relative_error(&read(out), &reference),
                ),
                (dims, "swiglu d_both", relative_error(&d_both, &g)),
            ])
        }
        Family::Attention | Family::Gather => Err("not a layer kernel".into()),
    }
}

/// The kernels (CubeCL's `Tensor` is not burn's). Every tensor is indexed
/// through its own shape and strides; nothing assumes a dense layout.
mod kernels {
    use burn_cubecl::cubecl::prelude::*;

    /// Where row `r` (`batch * seq + position`) of a `[batch, seq, width]`
    /// tensor starts, or element `r` of a `[batch, seq]` one.
    #[cube]
    pub(super) fn row_at<E: CubePrimitive>(t: &Tensor<E>, r: usize) -> usize {
        let seq = t.shape(1);
        (r / seq) * t.stride(0) + (r % seq) * t.stride(1)
    }

    /// `value` summed over the cube's `units` units (a power of two)
    /// through `scratch`; every unit gets the sum, and `scratch` is free
    /// again when it returns.
    #[cube]
    fn cube_sum(
        value: f32,
        scratch: &mut SharedMemory<f32>,
        #[comptime] units: usize,
        #[comptime] levels: usize,
    ) -> f32 {
        let u = UNIT_POS_X as usize;
        scratch[u] = value;
        sync_cube();
        for level in 0..levels {
            let stride = (units / 2) >> level;
            if u < stride {
                scratch[u] += scratch[u + stride];
            }
            sync_cube();
        }
        let total = scratch[0];
        sync_cube();
        total
    }

    /// The layer norm's forward: each row's mean and `rstd`, and `y`.
    #[cube(launch)]
    pub(super) fn layer_norm_forward_kernel<F: Float>(
        x: &Tensor<F>,
        gamma: &Tensor<F>,
        beta: &Tensor<F>,
        y: &mut Tensor<F>,
        mean: &mut Tensor<f32>,
        rstd: &mut Tensor<f32>,
        epsilon: f32,
        inv_width: f32,
        #[comptime] width: usize,
        #[comptime] units: usize,
        #[comptime] levels: usize,
        #[define(F)] _dtype: StorageType,
    ) {
        let u = UNIT_POS_X as usize;
        let per = width.div_ceil(units);
        let rows = x.shape(0) * x.shape(1);
        let mut scratch = SharedMemory::<f32>::new(units);
        let mut v = Array::<f32>::new(per);
        let mut g = Array::<f32>::new(per);
        let mut b = Array::<f32>::new(per);
        for k in 0..per {
            let c = u + k * units;
            g[k] = 0.0;
            b[k] = 0.0;
            if c < width {
                g[k] = f32::cast_from(gamma[c * gamma.stride(0)]);
                b[k] = f32::cast_from(beta[c * beta.stride(0)]);
            }
        }
        let (column, column_y) = (x.stride(2), y.stride(2));
        let mut row = CUBE_POS_X as usize;
        while row < rows {
            let at = row_at::<F>(x, row);
            let mut sum = 0.0f32;
            for k in 0..per {
                let c = u + k * units;
                v[k] = 0.0;
                if c < width {
                    v[k] = f32::cast_from(x[at + c * column]);
                    sum += v[k];
                }
            }
            let m = cube_sum(sum, &mut scratch, units, levels) * inv_width;
            let mut squares = 0.0f32;
            for k in 0..per {
                let c = u + k * units;
                if c < width {
                    let centred = v[k] - m;
                    squares += centred * centred;
                }
            }
            let var = cube_sum(squares, &mut scratch, units, levels) * inv_width;
            let r = f32::new(1.0) / (var + epsilon).sqrt();
            let at_y = row_at::<F>(y, row);
            for k in 0..per {
                let c = u + k * units;
                if c < width {
                    y[at_y + c * column_y] = F::cast_from((v[k] - m) * r * g[k] + b[k]);
                }
            }
            if u == 0 {
                mean[row_at::<f32>(mean, row)] = m;
                rstd[row_at::<f32>(rstd, row)] = r;
            }
            row += CUBE_COUNT_X as usize;
        }
    }

    /// The layer norm's backward: `dx` per row, and this cube's share of
    /// `dgamma` and `dbeta` as row `CUBE_POS_X` of the partial sums.
    #[cube(launch)]
    pub(super) fn layer_norm_backward_kernel<F: Float>(
        x: &Tensor<F>,
        gamma: &Tensor<F>,
        mean: &Tensor<f32>,
        rstd: &Tensor<f32>,
        dy: &Tensor<F>,
        dx: &mut Tensor<F>,
        partial_gamma: &mut Tensor<f32>,
        partial_beta: &mut Tensor<f32>,
        inv_width: f32,
        #[comptime] width: usize,
        #[comptime] units: usize,
        #[comptime] levels: usize,
        #[define(F)] _dtype: StorageType,
    ) {
        let u = UNIT_POS_X as usize;
        let per = width.div_ceil(units);
        let rows = x.shape(0) * x.shape(1);
        let mut scratch = SharedMemory::<f32>::new(units);
        let mut xhat = Array::<f32>::new(per);
        let mut gy = Array::<f32>::new(per);
        let mut g = Array::<f32>::new(per);
        let mut pg = Array::<f32>::new(per);
        let mut pb = Array::<f32>::new(per);
        for k in 0..per {
            let c = u + k * units;
            g[k] = 0.0;
            pg[k] = 0.0;
            pb[k] = 0.0;
            if c < width {
                g[k] = f32::cast_from(gamma[c * gamma.stride(0)]);
            }
        }
        let (column, column_dy, column_dx) = (x.stride(2), dy.stride(2), dx.stride(2));
        let mut row = CUBE_POS_X as usize;
        while row < rows {
            let m = mean[row_at::<f32>(mean, row)];
            let r = rstd[row_at::<f32>(rstd, row)];
            let (at, at_dy) = (row_at::<F>(x, row), row_at::<F>(dy, row));
            let mut sum_g = 0.0f32;
            let mut sum_gx = 0.0f32;
            for k in 0..per {
                let c = u + k * units;
                xhat[k] = 0.0;
                gy[k] = 0.0;
                if c < width {
                    let d = f32::cast_from(dy[at_dy + c * column_dy]);
                    xhat[k] = (f32::cast_from(x[at + c * column]) - m) * r;
                    gy[k] = d * g[k];
                    sum_g += gy[k];
                    sum_gx += gy[k] * xhat[k];
                    pg[k] += d * xhat[k];
                    pb[k] += d;
                }
            }
            let mean_g = cube_sum(sum_g, &mut scratch, units, levels) * inv_width;
            let mean_gx = cube_sum(sum_gx, &mut scratch, units, levels) * inv_width;
            let at_dx = row_at::<F>(dx, row);
            for k in 0..per {
                let c = u + k * units;
                if c < width {
                    dx[at_dx + c * column_dx] =
                        F::cast_from(r * (gy[k] - mean_g - xhat[k] * mean_gx));
                }
            }
            row += CUBE_COUNT_X as usize;
        }
        let cube = CUBE_POS_X as usize;
        for k in 0..per {
            let c = u + k * units;
            if c < width {
                partial_gamma[cube * partial_gamma.stride(0) + c * partial_gamma.stride(1)] = pg[k];
                partial_beta[cube * partial_beta.stride(0) + c * partial_beta.stride(1)] = pb[k];
            }
        }
    }

    /// `out[c] = sum over rows of partial[row, c]`, a unit per column.
    #[cube(launch)]
    pub(super) fn column_sums_kernel<F: Float>(
        partial: &Tensor<f32>,
        out: &mut Tensor<F>,
        #[define(F)] _dtype: StorageType,
    ) {
        let c = (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X) as usize;
        if c < partial.shape(1) {
            let mut sum = 0.0f32;
            let (row, column) = (partial.stride(0), partial.stride(1));
            for p in 0..partial.shape(0) {
                sum += partial[p * row + c * column];
            }
            out[c * out.stride(0)] = F::cast_from(sum);
        }
    }

    /// `out = silu(gate) * up`, a unit per element of `out` at a time.
    #[cube(launch)]
    pub(super) fn swiglu_forward_kernel<F: Float>(
        both: &Tensor<F>,
        out: &mut Tensor<F>,
        #[define(F)] _dtype: StorageType,
    ) {
        let f = out.shape(2);
        let n = out.shape(0) * out.shape(1) * f;
        let mut i = (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X) as usize;
        while i < n {
            let (r, c) = (i / f, i % f);
            let (at, column) = (row_at::<F>(both, r), both.stride(2));
            let a = f32::cast_from(both[at + c * column]);
            let up = f32::cast_from(both[at + (f + c) * column]);
            let s = f32::new(1.0) / (f32::new(1.0) + (f32::new(0.0) - a).exp());
            out[row_at::<F>(out, r) + c * out.stride(2)] = F::cast_from(a * s * up);
            i += (CUBE_COUNT_X * CUBE_DIM_X) as usize;
        }
    }

    /// `d_both = d_gate | d_up`, a unit per element of `d_out` at a time.
    #[cube(launch)]
    pub(super) fn swiglu_backward_kernel<F: Float>(
        both: &Tensor<F>,
        d_out: &Tensor<F>,
        d_both: &mut Tensor<F>,
        #[define(F)] _dtype: StorageType,
    ) {
        let f = d_out.shape(2);
        let n = d_out.shape(0) * d_out.shape(1) * f;
        let mut i = (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X) as usize;
        while i < n {
            let (r, c) = (i / f, i % f);
            let (at, column) = (row_at::<F>(both, r), both.stride(2));
            let a = f32::cast_from(both[at + c * column]);
            let up = f32::cast_from(both[at + (f + c) * column]);
            let g = f32::cast_from(d_out[row_at::<F>(d_out, r) + c * d_out.stride(2)]);
            let s = f32::new(1.0) / (f32::new(1.0) + (f32::new(0.0) - a).exp());
            let (at_d, column_d) = (row_at::<F>(d_both, r), d_both.stride(2));
            d_both[at_d + c * column_d] =
                F::cast_from(g * up * s * (f32::new(1.0) + a * (f32::new(1.0) - s)));
            d_both[at_d + (f + c) * column_d] = F::cast_from(g * a * s);
            i += (CUBE_COUNT_X * CUBE_DIM_X) as usize;
        }
    }
}

/// The launch geometry of a layer norm over `rows` rows of `width`:
/// cubes, units per cube, and the tree's levels (`log2 units`).
pub(crate) fn norm_geometry(rows: usize, width: usize) -> (u32, u32, usize) {
    let units = norm_units(width);
    (
        rows.clamp(1, NORM_CUBES) as u32,
        units as u32,
        units.trailing_zeros() as usize,
    )
}

/// The launch geometry of the SwiGLU over `elements` outputs on a device
/// allowing `cubes_x` cubes along x: cubes (a unit per element, at most
/// [`SWIGLU_CUBES`] and `cubes_x`, each cube then walking several) and
/// units per cube.
pub(crate) fn swiglu_geometry(elements: usize, cubes_x: u32) -> (u32, u32) {
    let cubes = elements
        .div_ceil(SWIGLU_UNITS)
        .clamp(1, SWIGLU_CUBES.min(cubes_x.max(1) as usize));
    (cubes as u32, SWIGLU_UNITS as u32)
}

/// Units per cube of the column sums, and its cubes for `width` columns.
pub(crate) fn column_geometry(width: usize) -> (u32, u32) {
    (
        width.div_ceil(MAX_NORM_UNITS).max(1) as u32,
        MAX_NORM_UNITS as u32,
    )
}

fn dims3<R: CubeRuntime>(t: &CubeTensor<R>) -> [usize; 3] {
    t.meta.shape().dims::<3>()
}

fn cube_count(cubes: u32) -> CubeCount {
    CubeCount::Static(cubes, 1, 1)
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> FusedLayers
    for CubeBackend<R, F, I, BT>
{
    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f32,
    ) -> [FloatTensor<Self>; 3] {
        debug_assert!(gamma.dtype == x.dtype && beta.dtype == x.dtype);
        let (x, gamma, beta) = (within_u32(x), within_u32(gamma), within_u32(beta));
        let shape = dims3(&x);
        let [b, t, w] = shape;
        let (cubes, units, levels) = norm_geometry(b * t, w);
        let y = empty_like(&x, Shape::new(shape), x.dtype);
        let mean = empty_like(&x, Shape::new([b, t]), DType::F32);
        let rstd = empty_like(&x, Shape::new([b, t]), DType::F32);
        let dtype = x.dtype;
        kernels::layer_norm_forward_kernel::launch::<R>(
            &x.client.clone(),
            cube_count(cubes),
            CubeDim::new_1d(units),
            x.into_tensor_arg(),
            gamma.into_tensor_arg(),
            beta.into_tensor_arg(),
            y.clone().into_tensor_arg(),
            mean.clone().into_tensor_arg(),
            rstd.clone().into_tensor_arg(),
            epsilon,
            1.0 / w as f32,
            w,
            units as usize,
            levels,
            dtype.into(),
        );
        [y, mean, rstd]
    }

    fn layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        debug_assert!(gamma.dtype == x.dtype && dy.dtype == x.dtype);
        let (x, gamma, dy) = (within_u32(x), within_u32(gamma), within_u32(dy));
        let (mean, rstd) = (within_u32(mean), within_u32(rstd));
        let shape = dims3(&x);
        let [b, t, w] = shape;
        let (cubes, units, levels) = norm_geometry(b * t, w);
        let dtype = x.dtype;
        let client = x.client.clone();
        let dx = empty_like(&x, Shape::new(shape), dtype);
        let partial = || empty_like(&x, Shape::new([cubes as usize, w]), DType::F32);
        let (partial_gamma, partial_beta) = (partial(), partial());
        let dgamma = empty_like(&gamma, Shape::new([w]), gamma.dtype);
        let dbeta = empty_like(&gamma, Shape::new([w]), gamma.dtype);
        let gamma_dtype = gamma.dtype;
        kernels::layer_norm_backward_kernel::launch::<R>(
            &client,
            cube_count(cubes),
            CubeDim::new_1d(units),
            x.into_tensor_arg(),
            gamma.into_tensor_arg(),
            mean.into_tensor_arg(),
            rstd.into_tensor_arg(),
            dy.into_tensor_arg(),
            dx.clone().into_tensor_arg(),
            partial_gamma.clone().into_tensor_arg(),
            partial_beta.clone().into_tensor_arg(),
            1.0 / w as f32,
            w,
            units as usize,
            levels,
            dtype.into(),
        );
        let (column_cubes, column_units) = column_geometry(w);
        for (partial, out) in [(partial_gamma, &dgamma), (partial_beta, &dbeta)] {
            kernels::column_sums_kernel::launch::<R>(
                &client,
                cube_count(column_cubes),
                CubeDim::new_1d(column_units),
                partial.into_tensor_arg(),
                out.clone().into_tensor_arg(),
                gamma_dtype.into(),
            );
        }
        [dx, dgamma, dbeta]
    }

    fn swiglu_forward(both: FloatTensor<Self>) -> FloatTensor<Self> {
        let both = within_u32(both);
        let [b, t, w] = dims3(&both);
        let out = empty_like(&both, Shape::new([b, t, w / 2]), both.dtype);
        let (cubes, units) = swiglu_geometry(b * t * w / 2, Limits::of(&both.client).cubes_x);
        let dtype = both.dtype;
        kernels::swiglu_forward_kernel::launch::<R>(
            &both.client.clone(),
            cube_count(cubes),
            CubeDim::new_1d(units),
            both.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            dtype.into(),
        );
        out
    }

    fn swiglu_backward(both: FloatTensor<Self>, d_out: FloatTensor<Self>) -> FloatTensor<Self> {
        debug_assert!(d_out.dtype == both.dtype);
        let (both, d_out) = (within_u32(both), within_u32(d_out));
        let shape = dims3(&both);
        let [b, t, w] = shape;
        let d_both = empty_like(&both, Shape::new(shape), both.dtype);
        let (cubes, units) = swiglu_geometry(b * t * w / 2, Limits::of(&both.client).cubes_x);
        let dtype = both.dtype;
        kernels::swiglu_backward_kernel::launch::<R>(
            &both.client.clone(),
            cube_count(cubes),
            CubeDim::new_1d(units),
            both.into_tensor_arg(),
            d_out.into_tensor_arg(),
            d_both.clone().into_tensor_arg(),
            dtype.into(),
        );
        d_both
    }
}

/// Which of the kernels' passes a fusion operation runs.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// x, gamma, beta -> y, mean, rstd.
    NormForward { epsilon: f32 },
    /// x, gamma, mean, rstd, dy -> dx, dgamma, dbeta.
    NormBackward,
    /// both -> out.
    SwigluForward,
    /// both, d_out -> d_both.
    SwigluBackward,
}

impl<R: CubeRuntime> KernelPass<R> for Pass {
    fn name(&self) -> &'static str {
        match self {
            Pass::NormForward { .. } => "chessbench_layer_norm_forward",
            Pass::NormBackward => "chessbench_layer_norm_backward",
            Pass::SwigluForward => "chessbench_swiglu_forward",
            Pass::SwigluBackward => "chessbench_swiglu_backward",
        }
    }

    fn run<F: FloatElement, I: IntElement, BT: BoolElement>(
        self,
        inputs: Vec<FloatTensor<CubeBackend<R, F, I, BT>>>,
    ) -> Vec<FloatTensor<CubeBackend<R, F, I, BT>>> {
        type B<R, F, I, BT> = CubeBackend<R, F, I, BT>;
        match self {
            Pass::NormForward { epsilon } => {
                let [x, gamma, beta] = operands(inputs);
                B::<R, F, I, BT>::layer_norm_forward(x, gamma, beta, epsilon).into()
            }
            Pass::NormBackward => {
                let [x, gamma, mean, rstd, dy] = operands(inputs);
                B::<R, F, I, BT>::layer_norm_backward(x, gamma, mean, rstd, dy).into()
            }
            Pass::SwigluForward => {
                let [both] = operands(inputs);
                vec![B::<R, F, I, BT>::swiglu_forward(both)]
            }
            Pass::SwigluBackward => {
                let [both, d_out] = operands(inputs);
                vec![B::<R, F, I, BT>::swiglu_backward(both, d_out)]
            }
        }
    }
}

/// The fused backend's layers: custom operations of the fusion stream
/// ([`KernelPass`]). Shapes are checked here, on the caller's thread: inside
/// the fusion stream a panic would only be logged.
impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> FusedLayers
    for Fusion<CubeBackend<R, F, I, BT>>
{
    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f32,
    ) -> [FloatTensor<Self>; 3] {
        let dims: [usize; 3] = x.shape.dims::<3>();
        let w = Shape::new([dims[2]]);
        assert!(
            norm_supported(dims, x.dtype, &Limits::of(&R::client(x.client.device())))
                && gamma.shape == w
                && beta.shape == w
                && gamma.dtype == x.dtype
                && beta.dtype == x.dtype,
            "fused layer norm of {dims:?} in {:?} with gamma {:?}, beta {:?}",
            x.dtype,
            gamma.shape,
            beta.shape
        );
        let rows = Shape::new([dims[0], dims[1]]);
        let client = x.client.clone();
        let outputs = [
            TensorIr::uninit(client.create_empty_handle(), x.shape.clone(), x.dtype),
            TensorIr::uninit(client.create_empty_handle(), rows.clone(), DType::F32),
            TensorIr::uninit(client.create_empty_handle(), rows, DType::F32),
        ];
        register_pass::<R, _, F, I, BT>(
            Pass::NormForward { epsilon },
            vec![x, gamma, beta],
            &outputs,
        )
        .outputs()
    }

    fn layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        let dims: [usize; 3] = x.shape.dims::<3>();
        let rows = Shape::new([dims[0], dims[1]]);
        assert!(
            dy.shape == x.shape
                && dy.dtype == x.dtype
                && gamma.dtype == x.dtype
                && gamma.shape == Shape::new([dims[2]])
                && [&mean, &rstd]
                    .iter()
                    .all(|t| t.shape == rows && t.dtype == DType::F32),
            "fused layer norm backward of mixed formats or shapes"
        );
        let client = x.client.clone();
        let outputs = [
            TensorIr::uninit(client.create_empty_handle(), x.shape.clone(), x.dtype),
            TensorIr::uninit(
                client.create_empty_handle(),
                gamma.shape.clone(),
                gamma.dtype,
            ),
            TensorIr::uninit(
                client.create_empty_handle(),
                gamma.shape.clone(),
                gamma.dtype,
            ),
        ];
        register_pass::<R, _, F, I, BT>(
            Pass::NormBackward,
            vec![x, gamma, mean, rstd, dy],
            &outputs,
        )
        .outputs()
    }

    fn swiglu_forward(both: FloatTensor<Self>) -> FloatTensor<Self> {
        let dims: [usize; 3] = both.shape.dims::<3>();
        assert!(
            swiglu_supported(
                dims,
                both.dtype,
                &Limits::of(&R::client(both.client.device()))
            ),
            "fused SwiGLU of {dims:?} in {:?}",
            both.dtype
        );
        let out = TensorIr::uninit(
            both.client.create_empty_handle(),
            Shape::new([dims[0], dims[1], dims[2] / 2]),
            both.dtype,
        );
        let [out] =
            register_pass::<R, _, F, I, BT>(Pass::SwigluForward, vec![both], &[out]).outputs();
        out
    }

    fn swiglu_backward(both: FloatTensor<Self>, d_out: FloatTensor<Self>) -> FloatTensor<Self> {
        let dims: [usize; 3] = both.shape.dims::<3>();
        assert!(
            d_out.shape == Shape::new([dims[0], dims[1], dims[2] / 2]) && d_out.dtype == both.dtype,
            "fused SwiGLU backward of mixed formats or shapes"
        );
        let d_both = TensorIr::uninit(
            both.client.create_empty_handle(),
            both.shape.clone(),
            both.dtype,
        );
        let [d_both] =
            register_pass::<R, _, F, I, BT>(Pass::SwigluBackward, vec![both, d_out], &[d_both])
                .outputs();
        d_both
    }
}

/// The kernels on the CPU, launched as the CUDA runtime launches them
/// ([`crate::model::gpu::cuda_emulator`]): inputs dense, freshly allocated (rows
/// padded to CUDA's pitch) and as views (the final norm's last positions,
/// a product's half), outputs allocated as the launch allocates them, the
/// geometry of [`norm_geometry`], [`column_geometry`] and
/// [`swiglu_geometry`].
#[cfg(all(test, feature = "cuda"))]
mod emulated {
    use burn_cubecl::cubecl::{ir::StorageType, prelude::*, server::MemoryLayoutStrategy};

    use super::{
        CHECKED_NORMS, CHECKED_SWIGLUS, MAX_WIDTH, column_geometry, kernels::*, norm_geometry,
        norm_inputs, norm_supported, swiglu_geometry, swiglu_supported, test_values,
    };
    use crate::model::{
        gpu::attention::OUTPUT_LAYOUT,
        gpu::cuda_emulator::{
            Device, DeviceTensor, Elem, Kernel, Launch, Outcome, POISON, as_cpp, builder, cuda_c,
            h100, have_gpp, properties, settings,
        },
        gpu::pass::relative_error,
        layers::{self, LAYER_NORM_EPS},
    };

    /// How the model hands a `[batch, seq, width]` input to the kernels.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Inputs {
        /// Dense, row-major.
        Contiguous,
        /// As CUDA's allocator lays out a new tensor (rows padded).
        Allocated,
        /// Views: the layer norm's x as the final norm's input (each
        /// sequence's last position out of `[batch, seq + 2, width]`), the
        /// SwiGLU's halves out of a wider product (an offset and a row
        /// stride wider than the row).
        Views,
    }

    /// An input of `shape` laid out as `inputs` says.
    fn input(shape: [usize; 3], elem: Elem, inputs: Inputs) -> DeviceTensor {
        let [b, t, w] = shape;
        match inputs {
            Inputs::Contiguous => {
                DeviceTensor::allocate(&shape, elem, MemoryLayoutStrategy::Contiguous)
            }
            Inputs::Allocated => {
                DeviceTensor::allocate(&shape, elem, MemoryLayoutStrategy::Optimized)
            }
            Inputs::Views => {
                // Rows of a wider allocation, starting three columns in, with
                // two positions more per sequence than the view shows.
                let mut v = DeviceTensor::narrowed([b, t + 2, w], elem, w + 5, 3);
                v.shape = vec![b, t, w];
                v
            }
        }
    }

    /// The CUDA C of kernel `which` for rows of `width` (the layer norm's
    /// comptime width; the SwiGLU kernels ignore it).
    fn cuda_source(which: &str, width: usize, dtype: StorageType) -> String {
        let arg = TensorCompilationArg { inplace: None };
        let mut b = builder();
        let (_, units, levels) = norm_geometry(1, width);
        macro_rules! tensors {
            ($b:ident, $t:ty, $f:ident) => {
                <Tensor<$t> as LaunchArg>::$f(&arg, &mut $b)
            };
        }
        macro_rules! scalar {
            ($b:ident) => {
                <f32 as LaunchArg>::expand(&Default::default(), &mut $b)
            };
        }
        let definition = match which {
            "norm_fwd" => {
                use layer_norm_forward_kernel::*;
                type E = DynamicScalar<_F>;
                b.scope.register_type::<E>(dtype);
                AddressType::U32.register(&mut b.scope);
                let (x, gamma, beta) = (
                    tensors!(b, E, expand),
                    tensors!(b, E, expand),
                    tensors!(b, E, expand),
                );
                let y = tensors!(b, E, expand_output);
                let mean = tensors!(b, f32, expand_output);
                let rstd = tensors!(b, f32, expand_output);
                let (epsilon, inv_width) = (scalar!(b), scalar!(b));
                expand::<E>(
                    &mut b.scope,
                    x,
                    gamma,
                    beta,
                    y,
                    mean,
                    rstd,
                    epsilon,
                    inv_width,
                    width,
                    units as usize,
                    levels,
                    dtype,
                );
                b.build(settings("layer_norm_forward_kernel", units))
            }
            "norm_bwd" => {
                use layer_norm_backward_kernel::*;
                type E = DynamicScalar<_F>;
                b.scope.register_type::<E>(dtype);
                AddressType::U32.register(&mut b.scope);
                let (x, gamma) = (tensors!(b, E, expand), tensors!(b, E, expand));
                let (mean, rstd) = (tensors!(b, f32, expand), tensors!(b, f32, expand));
                let dy = tensors!(b, E, expand);
                let dx = tensors!(b, E, expand_output);
                let pg = tensors!(b, f32, expand_output);
                let pb = tensors!(b, f32, expand_output);
                let inv_width = scalar!(b);
                expand::<E>(
                    &mut b.scope,
                    x,
                    gamma,
                    mean,
                    rstd,
                    dy,
                    dx,
                    pg,
                    pb,
                    inv_width,
                    width,
                    units as usize,
                    levels,
                    dtype,
                );
                b.build(settings("layer_norm_backward_kernel", units))
            }
            "columns" => {
                use column_sums_kernel::*;
                type E = DynamicScalar<_F>;
                b.scope.register_type::<E>(dtype);
                AddressType::U32.register(&mut b.scope);
                let partial = tensors!(b, f32, expand);
                let out = tensors!(b, E, expand_output);
                expand::<E>(&mut b.scope, partial, out, dtype);
                b.build(settings("column_sums_kernel", column_geometry(width).1))
            }
            "swiglu_fwd" => {
                use swiglu_forward_kernel::*;
                type E = DynamicScalar<_F>;
                b.scope.register_type::<E>(dtype);
                AddressType::U32.register(&mut b.scope);
                let both = tensors!(b, E, expand);
                let out = tensors!(b, E, expand_output);
                expand::<E>(&mut b.scope, both, out, dtype);
                b.build(settings(
                    "swiglu_forward_kernel",
                    swiglu_geometry(1, h100().cubes_x).1,
                ))
            }
            _ => {
                use swiglu_backward_kernel::*;
                type E = DynamicScalar<_F>;
                b.scope.register_type::<E>(dtype);
                AddressType::U32.register(&mut b.scope);
                let both = tensors!(b, E, expand);
                let d_out = tensors!(b, E, expand);
                let d_both = tensors!(b, E, expand_output);
                expand::<E>(&mut b.scope, both, d_out, d_both, dtype);
                b.build(settings(
                    "swiglu_backward_kernel",
                    swiglu_geometry(1, h100().cubes_x).1,
                ))
            }
        };
        cuda_c(definition)
    }

    /// The kernels and their functions' names.
    const KERNELS: [(&str, &str); 5] = [
        ("norm_fwd", "layer_norm_forward_kernel"),
        ("norm_bwd", "layer_norm_backward_kernel"),
        ("columns", "column_sums_kernel"),
        ("swiglu_fwd", "swiglu_forward_kernel"),
        ("swiglu_bwd", "swiglu_backward_kernel"),
    ];

    /// The layer norm (width 256, f32: mixed precision keeps layer norms
    /// in f32) and SwiGLU (f32 and bf16) variants the 9M step runs on
    /// CUDA, as CUDA C; `CHESSBENCH_NVRTC_DUMP` keeps them for `make
    /// bench-nvrtc`.
    #[test]
    fn the_nine_million_steps_variants_are_cuda_c() {
        for (which, function) in KERNELS {
            let elems: &[Elem] = if which.starts_with("swiglu") {
                &[Elem::F32, Elem::Bf16]
            } else {
                &[Elem::F32]
            };
            for &elem in elems {
                let elem_name = elem.cpp().trim_start_matches("__");
                let name = if which.starts_with("swiglu") {
                    format!("{which}-{elem_name}")
                } else {
                    format!("{which}-256-{elem_name}")
                };
                let source = cuda_source(which, 256, elem.storage());
                crate::model::gpu::cuda_emulator::check_and_dump(&name, function, &source);
            }
        }
    }

    /// The kernels for rows of `width` in `elem`, compiled for the CPU.
    fn build(width: usize, elem: Elem, flags: &[&str]) -> Device {
        let kernels: Vec<Kernel> = KERNELS
            .iter()
            .map(|&(which, function)| Kernel {
                name: which.to_owned(),
                dump: format!("{which}-{width}-{}", elem.cpp().trim_start_matches("__")),
                function: function.to_owned(),
                source: cuda_source(which, width, elem.storage()),
            })
            .collect();
        Device::build(&kernels, flags)
    }

    /// An output of `shape` as the launch allocates it, every byte `fill`.
    fn output(shape: &[usize], elem: Elem, fill: u8) -> DeviceTensor {
        DeviceTensor::allocate_filled(shape, elem, OUTPUT_LAYOUT, fill)
    }

    /// An input of `shape` laid out as `inputs` says holding `values`.
    fn filled(
        shape: [usize; 3],
        elem: Elem,
        inputs: Inputs,
        values: &[f32],
        fill: u8,
    ) -> DeviceTensor {
        let mut t = input(shape, elem, inputs);
        t.refill(fill);
        t.write(values);
        t
    }

    /// The layer norm's forward and backward on `shape` in `elem`, inputs
    /// as `inputs` says, against [`layers`]' reference on the same
    /// (rounded) inputs.
    fn run_norm(
        device: &Device,
        shape: [usize; 3],
        elem: Elem,
        inputs: Inputs,
        launch: Launch,
    ) -> Outcome {
        let [b, t, w] = shape;
        let round = |v: Vec<f32>| -> Vec<f32> { v.into_iter().map(|x| elem.round(x)).collect() };
        let [x, gamma, beta, dy] = norm_inputs(shape).map(round);
        let tx = filled(shape, elem, inputs, &x, POISON);
        let tdy = filled(shape, elem, inputs, &dy, POISON);
        let vector = |v: &[f32]| {
            let mut t = DeviceTensor::allocate(&[w], elem, MemoryLayoutStrategy::Optimized);
            t.write(v);
            t
        };
        let (tgamma, tbeta) = (vector(&gamma), vector(&beta));
        let (cubes, units, _) = norm_geometry(b * t, w);
        let mut y = output(&shape, elem, POISON);
        let (mut mean, mut rstd) = (
            output(&[b, t], Elem::F32, POISON),
            output(&[b, t], Elem::F32, POISON),
        );
        device.launch(
            "norm_fwd",
            cubes,
            units,
            &[LAYER_NORM_EPS, 1.0 / w as f32],
            &[&tx, &tgamma, &tbeta],
            &mut [&mut y, &mut mean, &mut rstd],
            launch,
            1,
        );
        let mut dx = output(&shape, elem, POISON);
        let (mut pg, mut pb) = (
            output(&[cubes as usize, w], Elem::F32, POISON),
            output(&[cubes as usize, w], Elem::F32, POISON),
        );
        device.launch(
            "norm_bwd",
            cubes,
            units,
            &[1.0 / w as f32],
            &[&tx, &tgamma, &mean, &rstd, &tdy],
            &mut [&mut dx, &mut pg, &mut pb],
            launch,
            2,
        );
        let (mut dgamma, mut dbeta) = (output(&[w], elem, POISON), output(&[w], elem, POISON));
        let (column_cubes, column_units) = column_geometry(w);
        for (partial, out) in [(&pg, &mut dgamma), (&pb, &mut dbeta)] {
            device.launch(
                "columns",
                column_cubes,
                column_units,
                &[],
                &[partial],
                &mut [out],
                launch,
                3,
            );
        }
        let reference = layers::layer_norm_forward(&x, &gamma, &beta, LAYER_NORM_EPS);
        let grads = layers::layer_norm_backward(&x, &gamma, &reference.mean, &reference.rstd, &dy);
        Outcome {
            errors: vec![
                ("output", relative_error(&y.read(), &reference.y)),
                ("mean", relative_error(&mean.read(), &reference.mean)),
                ("rstd", relative_error(&rstd.read(), &reference.rstd)),
                ("dx", relative_error(&dx.read(), &grads.dx)),
                ("dgamma", relative_error(&dgamma.read(), &grads.dgamma)),
                ("dbeta", relative_error(&dbeta.read(), &grads.dbeta)),
            ],
            stray: [&y, &mean, &rstd, &dx, &pg, &pb, &dgamma, &dbeta]
                .iter()
                .map(|t| t.stray_writes())
                .sum(),
        }
    }

    /// The SwiGLU's forward and backward on `both` of `shape` in `elem`.
    fn run_swiglu(
        device: &Device,
        shape: [usize; 3],
        elem: Elem,
        inputs: Inputs,
        launch: Launch,
    ) -> Outcome {
        let [b, t, w] = shape;
        let f = w / 2;
        let round = |v: Vec<f32>| -> Vec<f32> { v.into_iter().map(|x| elem.round(x)).collect() };
        let both = round(test_values(b * t * w, w, 5, 0.0));
        let d_out = round(test_values(b * t * f, f, 6, 0.0));
        let tboth = filled(shape, elem, inputs, &both, POISON);
        let td = filled([b, t, f], elem, inputs, &d_out, POISON);
        let (cubes, units) = swiglu_geometry(b * t * f, h100().cubes_x);
        let mut out = output(&[b, t, f], elem, POISON);
        device.launch(
            "swiglu_fwd",
            cubes,
            units,
            &[],
            &[&tboth],
            &mut [&mut out],
            launch,
            4,
        );
        let mut d_both = output(&shape, elem, POISON);
        device.launch(
            "swiglu_bwd",
            cubes,
            units,
            &[],
            &[&tboth, &td],
            &mut [&mut d_both],
            launch,
            5,
        );
        Outcome {
            errors: vec![
                (
                    "output",
                    relative_error(&out.read(), &layers::swiglu_forward(&both, f)),
                ),
                (
                    "d_both",
                    relative_error(&d_both.read(), &layers::swiglu_backward(&both, &d_out, f)),
                ),
            ],
            stray: out.stray_writes() + d_both.stray_writes(),
        }
    }

    /// The layer norm kernels (forward, backward, the partial sums'
    /// columns) and the SwiGLU's on the checked shapes, plus a layer norm
    /// whose rows outnumber the cubes (each cube walks several), in f32
    /// (1e-4, as the start-up test asks on a GPU) and bf16 (2e-2), inputs
    /// dense, freshly allocated and as views; nothing written outside an
    /// output's elements.
    #[test]
    fn the_layer_kernels_compute_their_reference_on_cuda_layouts() {
        if !have_gpp() {
            return;
        }
        let norms = CHECKED_NORMS.iter().copied().chain([[2, 530, 24]]);
        for (elem, bound) in [(Elem::F32, 1e-4), (Elem::Bf16, 2e-2)] {
            for shape in norms.clone() {
                let device = build(shape[2], elem, &[]);
                for inputs in [Inputs::Contiguous, Inputs::Allocated, Inputs::Views] {
                    run_norm(&device, shape, elem, inputs, Launch::Strided)
                        .assert_within(&format!("norm {shape:?} {elem:?} {inputs:?}"), bound);
                }
            }
            for shape in CHECKED_SWIGLUS {
                let device = build(1, elem, &[]);
                for inputs in [Inputs::Contiguous, Inputs::Allocated, Inputs::Views] {
                    run_swiglu(&device, shape, elem, inputs, Launch::Strided)
                        .assert_within(&format!("swiglu {shape:?} {elem:?} {inputs:?}"), bound);
                }
            }
        }
    }

    /// No data race between a cube's units (the row sums' tree in shared
    /// memory reused for the next sum and the next row), under
    /// ThreadSanitizer, with more rows than cubes.
    #[test]
    fn the_layer_norm_has_no_data_race_within_a_cube() {
        if !have_gpp() {
            return;
        }
        let shape = [1, 1100, 24];
        let device = build(shape[2], Elem::F32, &["-fsanitize=thread", "-g"]);
        let o = run_norm(
            &device,
            shape,
            Elem::F32,
            Inputs::Allocated,
            Launch::Strided,
        );
        for (what, e) in o.errors {
            assert!(e <= 1e-4, "{what}: {e:e}");
        }
    }

    /// The model catches kernels that ignore strides: launched on dense
    /// copies but told every tensor is dense, rows of 7 (padded to 8 by
    /// CUDA's allocator) come out wrong.
    #[test]
    fn layer_kernels_that_ignore_strides_fail_the_model() {
        if !have_gpp() {
            return;
        }
        let device = build(7, Elem::F32, &[]);
        let o = run_norm(
            &device,
            [3, 5, 7],
            Elem::F32,
            Inputs::Contiguous,
            Launch::Dense,
        );
        println!("dense norm: {:?}, {} stray bytes", o.errors, o.stray);
        assert!(o.errors.iter().any(|&(_, e)| e.is_nan() || e >= 1e-1));
        let o = run_swiglu(
            &device,
            [3, 5, 14],
            Elem::F32,
            Inputs::Contiguous,
            Launch::Dense,
        );
        println!("dense swiglu: {:?}, {} stray bytes", o.errors, o.stray);
        assert!(o.errors.iter().any(|&(_, e)| e.is_nan() || e >= 1e-1));
    }

    /// Every shape the kernels take launches within an H100's limits:
    /// units, cubes and shared memory as CubeCL compiles the kernels, at
    /// the extremes of width and rows.
    #[test]
    fn every_supported_layer_shape_fits_the_device_limits() {
        use burn::tensor::DType;
        let hw = properties().hardware;
        for width in [1, 7, 32, 256, 1024, MAX_WIDTH] {
            assert!(norm_supported([1, 1, width], DType::BF16, &h100()));
            let (cubes, units, levels) = norm_geometry(1 << 20, width);
            assert!(cubes <= hw.max_cube_count.0 && units <= hw.max_units_per_cube);
            assert_eq!(1usize << levels, units as usize);
            for which in ["norm_fwd", "norm_bwd"] {
                let (_, shared) = as_cpp(&cuda_source(which, width, Elem::F32.storage()), "k");
                assert!(
                    shared <= hw.max_shared_memory_size,
                    "{which} {width}: {shared}"
                );
            }
            let (cubes, units) = column_geometry(width);
            assert!(cubes <= hw.max_cube_count.0 && units <= hw.max_units_per_cube);
        }
        assert!(!norm_supported([1, 1, MAX_WIDTH + 1], DType::F32, &h100()));
        assert!(
            !norm_supported([1 << 16, 79, 1024], DType::F32, &h100()),
            "u32 indices"
        );
        let (cubes, _) = swiglu_geometry(1 << 28, h100().cubes_x);
        assert!(cubes <= hw.max_cube_count.0);
        assert!(swiglu_supported([1024, 79, 2048], DType::BF16, &h100()));
        assert!(
            !swiglu_supported([1, 1, 7], DType::F32, &h100()),
            "an odd width"
        );
        assert!(!swiglu_supported([1, 1, 8], DType::F64, &h100()));
    }
}
