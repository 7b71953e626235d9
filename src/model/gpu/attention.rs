//! The fused attention on burn's GPU backends (CUDA, wgpu): three CubeCL
//! kernels that follow [`crate::model::attention`]'s tiled algorithm (the forward
//! with the saved log-sum-exp, then `dQ` and `dK | dV`), registered as
//! custom operations of burn's fusion stream and, through
//! [`crate::model::attention::fused_attention`], as one autodiff operation.
//!
//! CubeCL rather than CUDA C through NVRTC: the kernels are Rust in this
//! crate, launched on CubeCL's own stream with its buffers (no raw
//! pointers, no second compiler path), and the same code runs on every
//! runtime CubeCL has: CUDA C on NVIDIA GPUs, WGSL through wgpu on Vulkan,
//! Metal and DirectX 12 (and on Mesa's lavapipe, a software Vulkan, in CI).
//! At 79 tokens the work per head is small enough that the kernel's
//! structure (one cube per sequence and head, a unit per row, tiles in
//! shared memory) matters more than instruction selection.
//!
//! Each kernel runs one cube per `(sequence, head)` with one unit per row
//! (query rows for the forward and `dQ`, key rows for `dK | dV`): the row's
//! own vectors stay in registers (f32 whatever the tensors' format), the
//! other side's rows are loaded a key tile at a time into shared memory by
//! the whole cube ([`key_tile`]: at most [`KEY_TILE`] rows, fewer where the
//! device's shared memory is smaller), and the `seq x seq` scores never
//! reach global memory. Every tensor is read and written through the
//! strides the runtime passes with it (CUDA pads rows; the model's q, k, v
//! are views of its packed projection), so the launch copies nothing, but
//! where a third of the projection starts at an offset the runtime cannot
//! bind ([`heads_view`]). The launch reads the device's
//! limits ([`Limits`]); shapes the kernels do not take there
//! ([`supported`]) run burn's attention.
//!
//! Which variants run is decided one variant at a time
//! ([`use_fused`]): the first time a `(sequence, head dimension, format,
//! layout)` is about to run on a device, it runs through the fused backend
//! training uses (`Autodiff<Fusion<CubeBackend>>`, inputs laid out as the
//! model lays them out) against the plain-Rust reference, and a variant
//! that fails falls back to burn's attention alone.
//!
//! Without a GPU, `make test-kernels` runs the kernels' CUDA C on the CPU
//! under a model of CUDA's layouts and launch (`emulated` below), and
//! `make test-wgpu` runs them through wgpu on lavapipe (docs/gpu.md).

use burn::{
    backend::Autodiff,
    tensor::{DType, Shape, Tensor, TensorData, TensorPrimitive, ops::FloatTensor},
};
use burn_cubecl::{
    BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement,
    cubecl::prelude::*,
    cubecl::server::MemoryLayoutStrategy,
    cubecl::zspace::metadata::Metadata,
    kernel::into_contiguous,
    ops::numeric::{empty_device_contiguous_dtype, empty_device_dtype},
    tensor::CubeTensor,
};
use burn_fusion::Fusion;
use burn_ir::{OperationOutput, TensorIr};

use crate::model::{
    attention::{self, FusedAttention, Heads, KEY_TILE},
    backend::AttentionKernel,
    gpu::pass::{
        Family, FamilyUse, KernelPass, Layout, Limits, Variant, bound_for, errors_within,
        family_use, fused_wanted, operands, register_pass, relative_error, shape_fallback,
        variant_enabled,
    },
};

/// The largest head dimension the kernels keep in registers.
pub(crate) const MAX_DIM: usize = 128;
/// The longest sequence (one unit per row, a cube of at most 1,024 units).
pub(crate) const MAX_SEQ: usize = 1024;

/// The most elements a tensor of the kernels may have. The kernels index
/// in u32, so each buffer they are handed must stay below 2^32 elements:
/// the allocator pads a row at most 4x (two bf16 take 16 bytes; a row of
/// one element is not padded), so the outputs stay below 2^30, and an
/// input view whose buffer runs further than u32 reaches is copied dense at
/// launch ([`within_u32`]). Evaluation's largest passes hold about 4.5e7.
const MAX_ELEMENTS: usize = 1 << 28;

/// Buffers the widest kernel binds: `dQ`'s and `dK | dV`'s eight tensors,
/// and the metadata CubeCL passes with them (shapes and strides).
const BINDINGS: u32 = 9;

/// Bytes of shared memory a kernel declares for key tiles of `tile` rows
/// of `dim` f32: two tiles (keys and values, or queries and the output's
/// gradient) and, in `dK | dV`, two floats a row (log-sum-exp and `D`).
pub(crate) fn shared_bytes(tile: usize, dim: usize) -> usize {
    4 * tile * (2 * dim + 2)
}

/// Rows of a key tile for head dimension `dim` on a device with `limits`:
/// [`KEY_TILE`], or the most that fit its shared memory; 0 if not one row
/// fits.
pub(crate) fn key_tile(dim: usize, limits: &Limits) -> usize {
    (1..=KEY_TILE)
        .rev()
        .find(|&tile| shared_bytes(tile, dim) <= limits.shared_bytes)
        .unwrap_or(0)
}

/// Whether the kernels take `[batch, heads, seq, dim]` in `dtype` on a
/// device with `limits` ([`refusal`] says why not).
pub(crate) fn supported(shape: [usize; 4], dtype: DType, limits: &Limits) -> bool {
    shape[0] * shape[1] > 0 && refusal(shape, dtype, limits).is_none()
}

/// Why the kernels do not take `[batch, heads, seq, dim]` in `dtype` on a
/// device with `limits`, or `None` when they do: f32, f16 or bf16, at most
/// [`MAX_SEQ`] rows of at most [`MAX_DIM`], at most [`MAX_ELEMENTS`]
/// elements, a cube of a unit per row, a key tile in shared memory, and the
/// bindings the kernels use.
pub(crate) fn refusal(shape: [usize; 4], dtype: DType, limits: &Limits) -> Option<String> {
    let [b, h, t, d] = shape;
    let elements = b.saturating_mul(h).saturating_mul(t).saturating_mul(d);
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        Some(format!(
            "{dtype:?}: the kernels compute in f32, f16 or bf16"
        ))
    } else if elements > MAX_ELEMENTS {
        Some(format!(
            "{elements} elements, more than the {MAX_ELEMENTS} the kernels index"
        ))
    } else if !(1..=MAX_SEQ).contains(&t) {
        Some(format!(
            "a sequence of {t}: the kernels take 1 to {MAX_SEQ}"
        ))
    } else if !(1..=MAX_DIM).contains(&d) {
        Some(format!(
            "a head dimension of {d}: the kernels take 1 to {MAX_DIM}"
        ))
    } else if units(t) > limits.units {
        Some(format!(
            "a cube of {} units, more than the device's {}",
            units(t),
            limits.units
        ))
    } else if key_tile(d, limits) == 0 {
        Some(format!(
            "not one key row fits the device's {} bytes of shared memory",
            limits.shared_bytes
        ))
    } else if BINDINGS > limits.bindings {
        Some(format!(
            "{BINDINGS} bindings, more than the device's {}",
            limits.bindings
        ))
    } else {
        None
    }
}

pub use crate::model::backend::ATTENTION_VAR;

/// The variant of an attention over `[batch, heads, seq, dim]` in `dtype`
/// with its inputs laid out as `layout` says: the model's blocks hand the
/// kernels their packed q|k|v projection (`Block::forward`, through
/// `ModelBackend::attend_packed`), separate q, k and v as views of a
/// projection otherwise.
pub(crate) fn model_variant(shape: [usize; 4], dtype: DType, layout: Layout) -> Variant {
    Variant {
        family: Family::Attention,
        sizes: [shape[2], shape[3]],
        dtype,
        layout,
    }
}

/// Whether the model's attention of `shape` in `dtype` on `device` runs
/// the fused kernels: they take the shape there, and its variant
/// ([`model_variant`]) passed its self-test through the fused backend
/// `Autodiff<Fusion<CubeBackend<R, F, I, BT>>>` (run now if it is the
/// first time; a failure warns once and falls back for that variant only).
pub(crate) fn use_fused<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    device: &R::Device,
    shape: [usize; 4],
    dtype: DType,
    layout: Layout,
) -> bool {
    if !fused_wanted(ATTENTION_VAR) || shape[0] * shape[1] == 0 {
        return false;
    }
    if let Some(why) = refusal(shape, dtype, &Limits::of_device::<R>(device)) {
        let what = format!("the attention of {shape:?} in {dtype:?}");
        shape_fallback::<R>(device, Family::Attention, what, why, "burn's attention");
        return false;
    }
    let variant = model_variant(shape, dtype, layout);
    variant_enabled::<R>(ATTENTION_VAR, device, variant, "burn's attention", || {
        errors_within(
            variant_errors::<R, F, I, BT>(device, variant, shape[1])?,
            bound_for(dtype),
        )
    })
}

/// Which attention a GPU backend runs: burn's when `CHESSBENCH_ATTENTION`
/// says so, or when a variant of the fused kernels failed its self-test in
/// this process; the fused kernels otherwise.
pub(crate) fn attention_kernel<R: CubeRuntime>() -> AttentionKernel {
    match family_use::<R>(ATTENTION_VAR, &[Family::Attention]) {
        FamilyUse::Fused => AttentionKernel::Fused,
        FamilyUse::Mixed => AttentionKernel::Mixed,
        FamilyUse::Burn => AttentionKernel::Burn,
    }
}

/// The shapes the kernels are checked on by [`kernel_errors`] (in
/// `tests/cuda.rs`, `tests/wgpu.rs` and the CPU model): the 9M head, the
/// 136M/270M head, and an odd one (rows of 7, shorter than a tile).
const CHECKED_SHAPES: [Heads; 3] = [
    Heads {
        batch: 2,
        heads: 8,
        seq: 79,
        dim: 32,
    },
    Heads {
        batch: 1,
        heads: 2,
        seq: 79,
        dim: 128,
    },
    Heads {
        batch: 3,
        heads: 1,
        seq: 5,
        dim: 7,
    },
];

/// The inputs of the kernels' checks (`tests/cuda.rs`, `tests/wgpu.rs` and
/// the CPU model, so that they see the same numbers): `s.len()` values in
/// [-2, 2) from `salt`, different for q, k, v and the output's gradient
/// (salts 1 to 4) and per shape (its place in [`CHECKED_SHAPES`]).
fn test_values(s: Heads, salt: usize) -> Vec<f32> {
    let n = CHECKED_SHAPES
        .iter()
        .position(|c| *c == s)
        .unwrap_or(CHECKED_SHAPES.len());
    values_from(s.len(), salt + n)
}

/// `n` values in [-2, 2), a pattern shifted by `salt`.
fn values_from(n: usize, salt: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 37 + salt * 11) % 61) as f32 - 30.0) / 15.0)
        .collect()
}

/// A kernel output's shape, name and largest relative error.
pub type KernelError = ([usize; 4], &'static str, f32);

/// A `[batch, heads, seq, dim]` tensor's values through `f32` (the
/// tensor's format rounding them), as the CPU reference reads them.
fn read<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.cast(DType::F32)
        .into_data()
        .to_vec::<f32>()
        .unwrap_or_default()
}

/// The kernels' largest relative errors against [`attention`]'s reference
/// (which `make test` checks against burn's attention) on
/// [`CHECKED_SHAPES`], launched directly on the CubeCL backend of runtime
/// `R` with tensors in `dtype` (the reference computes in f32 on the same
/// inputs rounded to `dtype`, its backward from its output rounded to
/// `dtype` as the kernels store it): `(shape, what, error)` for the output,
/// the log-sum-exp and the three gradients. The CPU model of the CUDA
/// launch (`make test-kernels`) runs the same inputs.
pub fn kernel_errors<R: CubeRuntime>(
    device: &R::Device,
    dtype: DType,
) -> Result<Vec<KernelError>, String> {
    type B<R> = CubeBackend<R, f32, i32, u32>;
    let mut errors = Vec::new();
    for s in CHECKED_SHAPES {
        let dims = [s.batch, s.heads, s.seq, s.dim];
        let up = |x: &[f32]| -> FloatTensor<B<R>> {
            Tensor::<B<R>, 4>::from_data(TensorData::new(x.to_vec(), dims), device)
                .cast(dtype)
                .into_primitive()
                .tensor()
        };
        let down = |t: FloatTensor<B<R>>| -> Vec<f32> {
            read(Tensor::<B<R>, 4>::from_primitive(TensorPrimitive::Float(t)))
        };
        let down3 = |t: FloatTensor<B<R>>| -> Vec<f32> {
            read(Tensor::<B<R>, 3>::from_primitive(TensorPrimitive::Float(t)))
        };
        // Inputs as the kernels see them (rounded to `dtype`).
        let values = |salt: usize| -> Vec<f32> { down(up(&test_values(s, salt))) };
        let (q, k, v, g) = (values(1), values(2), values(3), values(4));
        let (out, lse) = B::<R>::attention_forward(up(&q), up(&k), up(&v));
        let [dq, dk, dv] =
            B::<R>::attention_backward(up(&q), up(&k), up(&v), out.clone(), lse.clone(), up(&g));
        let reference = attention::forward(&q, &k, &v, s);
        // The backward from the output as the kernels store it (in `dtype`).
        let stored = attention::Forward {
            out: down(up(&reference.out)),
            lse: reference.lse.clone(),
        };
        let grads = attention::backward(&q, &k, &v, &stored, &g, s);
        for (what, ours, theirs) in [
            ("output", down(out), &reference.out),
            ("log-sum-exp", down3(lse), &reference.lse),
            ("dq", down(dq), &grads.dq),
            ("dk", down(dk), &grads.dk),
            ("dv", down(dv), &grads.dv),
        ] {
            if ours.len() != theirs.len() {
                return Err(format!(
                    "{dims:?} {what}: {} values, expected {}",
                    ours.len(),
                    theirs.len()
                ));
            }
            errors.push((dims, what, relative_error(&ours, theirs)));
        }
    }
    Ok(errors)
}

/// `part` (0 q, 1 k, 2 v) of a `[batch, seq, 3, heads, dim]` projection,
/// as the dense `[batch, heads, seq, dim]` the reference reads.
fn split_heads(proj: &[f32], s: Heads, parts: usize, part: usize) -> Vec<f32> {
    let (b, h, t, d) = (s.batch, s.heads, s.seq, s.dim);
    let mut out = Vec::with_capacity(s.len());
    for bi in 0..b {
        for hi in 0..h {
            for ti in 0..t {
                let row = ((bi * t + ti) * parts + part) * h * d + hi * d;
                out.extend_from_slice(&proj[row..row + d]);
            }
        }
    }
    out
}

/// One variant of the fused attention against [`attention`]'s reference,
/// as training runs it: on the fused backend `Autodiff<Fusion<CubeBackend<R,
/// F, I, BT>>>`, through [`attention::fused_attention`] (dense, views) or
/// [`attention::fused_attention_packed`] (packed), two sequences of `heads`
/// heads of the variant's sequence length and head dimension in its
/// format, the inputs laid out as the variant says (views: q, k and v
/// sliced out of one projection and transposed, the output's gradient
/// arriving through the transposition back to `[batch, seq, width]`;
/// packed: the projection itself, as `Block::forward` hands it over). `(shape, what, error)` for the output and the three
/// gradients; the reference computes in f32 on the inputs rounded to the
/// format, its backward from its output rounded as the kernels store it.
pub(crate) fn variant_errors<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    device: &R::Device,
    variant: Variant,
    heads: usize,
) -> Result<Vec<KernelError>, String> {
    type A<R, F, I, BT> = Autodiff<Fusion<CubeBackend<R, F, I, BT>>>;
    let [seq, dim] = variant.sizes;
    let s = Heads {
        batch: 2,
        heads,
        seq,
        dim,
    };
    let (b, h, t, d, w) = (s.batch, s.heads, s.seq, s.dim, s.heads * s.dim);
    let dtype = variant.dtype;
    let rounded = |x: &[f32]| -> Vec<f32> {
        read(
            Tensor::<A<R, F, I, BT>, 1>::from_data(TensorData::new(x.to_vec(), [x.len()]), device)
                .cast(dtype),
        )
    };
    let tensor4 = |x: &[f32], dims: [usize; 4]| -> Tensor<A<R, F, I, BT>, 4> {
        Tensor::<A<R, F, I, BT>, 4>::from_data(TensorData::new(x.to_vec(), dims), device)
            .cast(dtype)
    };
    let tensor3 = |x: &[f32], dims: [usize; 3]| -> Tensor<A<R, F, I, BT>, 3> {
        Tensor::<A<R, F, I, BT>, 3>::from_data(TensorData::new(x.to_vec(), dims), device)
            .cast(dtype)
    };
    // The output's gradient, `[batch, seq, width]` as the next product
    // hands it back, and as the reference's `[batch, heads, seq, dim]`.
    let g_rows = rounded(&values_from(b * t * w, 7));
    let g = split_heads(&g_rows, s, 1, 0);
    let ([q, k, v], out, [dq, dk, dv]) = match variant.layout {
        Layout::Views => {
            let proj_values = rounded(&values_from(b * t * 3 * w, 5));
            let proj = tensor3(&proj_values, [b, t, 3 * w]).require_grad();
            let split = |part: usize| {
                proj.clone()
                    .narrow(2, part * w, w)
                    .reshape([b, t, h, d])
                    .swap_dims(1, 2)
            };
            let out = attention::fused_attention(split(0), split(1), split(2));
            let context = out.clone().swap_dims(1, 2).reshape([b, t, w]);
            let grads = (context * tensor3(&g_rows, [b, t, w])).sum().backward();
            let d_proj = read(proj.grad(&grads).ok_or("no gradient of the projection")?);
            let parts = |x: &[f32]| [0, 1, 2].map(|p| split_heads(x, s, 3, p));
            (parts(&proj_values), read(out), parts(&d_proj))
        }
        Layout::Packed => {
            let proj_values = rounded(&values_from(b * t * 3 * w, 5));
            let proj = tensor3(&proj_values, [b, t, 3 * w]).require_grad();
            let context = attention::fused_attention_packed(proj.clone(), h);
            let grads = (context.clone() * tensor3(&g_rows, [b, t, w]))
                .sum()
                .backward();
            let d_proj = read(proj.grad(&grads).ok_or("no gradient of the projection")?);
            let parts = |x: &[f32]| [0, 1, 2].map(|p| split_heads(x, s, 3, p));
            let out = split_heads(&read(context), s, 1, 0);
            (parts(&proj_values), out, parts(&d_proj))
        }
        Layout::Dense => {
            let dims = [b, h, t, d];
            let inputs = [1, 2, 3].map(|salt| rounded(&values_from(s.len(), salt)));
            let [q, k, v] = inputs.clone().map(|x| tensor4(&x, dims).require_grad());
            let out = attention::fused_attention(q.clone(), k.clone(), v.clone());
            let grads = (out.clone() * tensor4(&g, dims)).sum().backward();
            let grad = |x: &Tensor<A<R, F, I, BT>, 4>| -> Result<Vec<f32>, String> {
                Ok(read(x.grad(&grads).ok_or("no gradient of an input")?))
            };
            (inputs, read(out), [grad(&q)?, grad(&k)?, grad(&v)?])
        }
    };
    let reference = attention::forward(&q, &k, &v, s);
    let stored = attention::Forward {
        out: rounded(&reference.out),
        lse: reference.lse.clone(),
    };
    let grads = attention::backward(&q, &k, &v, &stored, &g, s);
    let dims = [b, h, t, d];
    Ok(vec![
        (dims, "output", relative_error(&out, &reference.out)),
        (dims, "dq", relative_error(&dq, &grads.dq)),
        (dims, "dk", relative_error(&dk, &grads.dk)),
        (dims, "dv", relative_error(&dv, &grads.dv)),
    ])
}

/// Units per cube: the rows, rounded up to whole warps of 32 (a multiple
/// of every subgroup size CubeCL's runtimes report).
fn units(seq: usize) -> u32 {
    seq.div_ceil(32) as u32 * 32
}

/// The kernels (CubeCL's `Tensor` is not burn's).
///
/// Every tensor is indexed through its own shape and strides, which the
/// runtime passes with it: CUDA's allocator pads rows to an aligned pitch
/// (a `[.., 79]` f32 row takes 128 floats, a `[.., 7]` row 8), and the
/// model hands the kernels views (heads split out of a projection, then
/// transposed). Nothing assumes a dense layout.
mod kernels {
    use burn_cubecl::cubecl::prelude::*;

    /// Where row `r` of the `(sequence, head)` pair `head` (`sequence *
    /// heads + head`) starts in `t`, a `[batch, heads, seq, dim]` tensor or
    /// the `[batch, heads, seq]` log-sum-exp, through `t`'s strides.
    #[cube]
    pub(super) fn row_at<E: CubePrimitive>(t: &Tensor<E>, head: usize, r: usize) -> usize {
        let heads = t.shape(1);
        (head / heads) * t.stride(0) + (head % heads) * t.stride(1) + r * t.stride(2)
    }

    /// Loads rows `start..start + KEY_TILE` (those below `seq`) of `src`'s
    /// `(sequence, head)` pair `head` into `tile` as f32, densely (`dim`
    /// floats a row), the whole cube sharing the work.
    #[cube]
    fn load_tile<F: Float>(
        src: &Tensor<F>,
        tile: &mut SharedMemory<f32>,
        head: usize,
        start: usize,
        #[comptime] seq: usize,
        #[comptime] dim: usize,
        #[comptime] rows: usize,
    ) {
        // The head's first row and the strides, once: the loop is per element.
        let (first, row, column) = (row_at::<F>(src, head, 0), src.stride(2), src.stride(3));
        let mut idx = UNIT_POS_X as usize;
        while idx < rows * dim {
            let r = start + idx / dim;
            if r < seq {
                tile[idx] = f32::cast_from(src[first + r * row + (idx % dim) * column]);
            }
            idx += CUBE_DIM_X as usize;
        }
    }

    /// The forward: `out = softmax(q k^T * scale) v` and each row's
    /// log-sum-exp, by the online softmax over key tiles.
    #[cube(launch)]
    pub(super) fn attention_forward_kernel<F: Float>(
        q: &Tensor<F>,
        k: &Tensor<F>,
        v: &Tensor<F>,
        out: &mut Tensor<F>,
        lse: &mut Tensor<f32>,
        scale: f32,
        #[comptime] seq: usize,
        #[comptime] dim: usize,
        #[comptime] tile: usize,
        #[define(F)] _dtype: StorageType,
    ) {
        // One cube per (sequence, head), numbered across the launch's x and y
        // (wgpu allows 65,535 cubes along x); the last row of cubes may
        // run past the heads.
        let head = CUBE_POS;
        if head >= q.shape(0) * q.shape(1) {
            terminate!();
        }
        let i = UNIT_POS_X as usize;
        let active = i < seq;
        let mut qi = Array::<f32>::new(dim);
        let mut acc = Array::<f32>::new(dim);
        let mut s = Array::<f32>::new(tile);
        for c in 0..dim {
            qi[c] = 0.0;
            acc[c] = 0.0;
        }
        if active {
            let at = row_at::<F>(q, head, i);
            let column = q.stride(3);
            for c in 0..dim {
                qi[c] = f32::cast_from(q[at + c * column]) * scale;
            }
        }
        let mut ks = SharedMemory::<f32>::new(tile * dim);
        let mut vs = SharedMemory::<f32>::new(tile * dim);
        let mut m = f32::new(-1.0e30);
        let mut l = 0.0f32;
        let tiles = seq.div_ceil(tile);
        for t in 0..tiles {
            let start = t * tile;
            load_tile::<F>(k, &mut ks, head, start, seq, dim, tile);
            load_tile::<F>(v, &mut vs, head, start, seq, dim, tile);
            sync_cube();
            if active {
                let mut m_new = m;
                for jj in 0..tile {
                    s[jj] = f32::new(-1.0e30);
                    if start + jj < seq {
                        let mut dot = 0.0f32;
                        for c in 0..dim {
                            dot += qi[c] * ks[jj * dim + c];
                        }
                        s[jj] = dot;
                        if dot > m_new {
                            m_new = dot;
                        }
                    }
                }
                // The earlier tiles' terms, rescaled to the new maximum.
                let correction = (m - m_new).exp();
                l *= correction;
                for c in 0..dim {
                    acc[c] *= correction;
                }
                for jj in 0..tile {
                    if start + jj < seq {
                        let p = (s[jj] - m_new).exp();
                        l += p;
                        for c in 0..dim {
                            acc[c] += p * vs[jj * dim + c];
                        }
                    }
                }
                m = m_new;
            }
            sync_cube();
        }
        if active {
            let at = row_at::<F>(out, head, i);
            let column = out.stride(3);
            for c in 0..dim {
                out[at + c * column] = F::cast_from(acc[c] / l);
            }
            let at = row_at::<f32>(lse, head, i);
            lse[at] = m + l.ln();
        }
    }

    /// The query side of the backward: `D_i = dO_i . O_i` (written for the
    /// key side) and `dQ_i = scale sum_j p_ij (dO_i . v_j - D_i) k_j`, the
    /// probabilities recomputed from the saved log-sum-exp.
    #[cube(launch)]
    pub(super) fn attention_dq_kernel<F: Float>(
        q: &Tensor<F>,
        k: &Tensor<F>,
        v: &Tensor<F>,
        out: &Tensor<F>,
        lse: &Tensor<f32>,
        d_out: &Tensor<F>,
        dq: &mut Tensor<F>,
        delta: &mut Tensor<f32>,
        scale: f32,
        #[comptime] seq: usize,
        #[comptime] dim: usize,
        #[comptime] tile: usize,
        #[define(F)] _dtype: StorageType,
    ) {
        // One cube per (sequence, head), numbered across the launch's x and y
        // (wgpu allows 65,535 cubes along x); the last row of cubes may
        // run past the heads.
        let head = CUBE_POS;
        if head >= q.shape(0) * q.shape(1) {
            terminate!();
        }
        let i = UNIT_POS_X as usize;
        let active = i < seq;
        let mut qi = Array::<f32>::new(dim);
        let mut doi = Array::<f32>::new(dim);
        let mut acc = Array::<f32>::new(dim);
        let mut d_i = 0.0f32;
        let mut lse_i = 0.0f32;
        for c in 0..dim {
            qi[c] = 0.0;
            doi[c] = 0.0;
            acc[c] = 0.0;
        }
        if active {
            let (at_q, at_o, at_do) = (
                row_at::<F>(q, head, i),
                row_at::<F>(out, head, i),
                row_at::<F>(d_out, head, i),
            );
            let (col_q, col_o, col_do) = (q.stride(3), out.stride(3), d_out.stride(3));
            for c in 0..dim {
                qi[c] = f32::cast_from(q[at_q + c * col_q]) * scale;
                doi[c] = f32::cast_from(d_out[at_do + c * col_do]);
                d_i += doi[c] * f32::cast_from(out[at_o + c * col_o]);
            }
            lse_i = lse[row_at::<f32>(lse, head, i)];
            let at = row_at::<f32>(delta, head, i);
            delta[at] = d_i;
        }
        let mut ks = SharedMemory::<f32>::new(tile * dim);
        let mut vs = SharedMemory::<f32>::new(tile * dim);
        let tiles = seq.div_ceil(tile);
        for t in 0..tiles {
            let start = t * tile;
            load_tile::<F>(k, &mut ks, head, start, seq, dim, tile);
            load_tile::<F>(v, &mut vs, head, start, seq, dim, tile);
            sync_cube();
            if active {
                for jj in 0..tile {
                    if start + jj < seq {
                        let mut score = 0.0f32;
                        let mut dp = 0.0f32;
                        for c in 0..dim {
                            score += qi[c] * ks[jj * dim + c];
                            dp += doi[c] * vs[jj * dim + c];
                        }
                        let ds = (score - lse_i).exp() * (dp - d_i);
                        for c in 0..dim {
                            acc[c] += ds * ks[jj * dim + c];
                        }
                    }
                }
            }
            sync_cube();
        }
        if active {
            let at = row_at::<F>(dq, head, i);
            let column = dq.stride(3);
            for c in 0..dim {
                dq[at + c * column] = F::cast_from(acc[c] * scale);
            }
        }
    }

    /// The key side of the backward, a unit per key row `j`:
    /// `dV_j = sum_i p_ij dO_i`, `dK_j = scale sum_i p_ij (dO_i . v_j - D_i) q_i`.
    #[cube(launch)]
    pub(super) fn attention_dkdv_kernel<F: Float>(
        q: &Tensor<F>,
        k: &Tensor<F>,
        v: &Tensor<F>,
        lse: &Tensor<f32>,
        delta: &Tensor<f32>,
        d_out: &Tensor<F>,
        dk: &mut Tensor<F>,
        dv: &mut Tensor<F>,
        scale: f32,
        #[comptime] seq: usize,
        #[comptime] dim: usize,
        #[comptime] tile: usize,
        #[define(F)] _dtype: StorageType,
    ) {
        // One cube per (sequence, head), numbered across the launch's x and y
        // (wgpu allows 65,535 cubes along x); the last row of cubes may
        // run past the heads.
        let head = CUBE_POS;
        if head >= q.shape(0) * q.shape(1) {
            terminate!();
        }
        let j = UNIT_POS_X as usize;
        let active = j < seq;
        let mut kj = Array::<f32>::new(dim);
        let mut vj = Array::<f32>::new(dim);
        let mut dkj = Array::<f32>::new(dim);
        let mut dvj = Array::<f32>::new(dim);
        for c in 0..dim {
            kj[c] = 0.0;
            vj[c] = 0.0;
            dkj[c] = 0.0;
            dvj[c] = 0.0;
        }
        if active {
            let (at_k, at_v) = (row_at::<F>(k, head, j), row_at::<F>(v, head, j));
            let (col_k, col_v) = (k.stride(3), v.stride(3));
            for c in 0..dim {
                kj[c] = f32::cast_from(k[at_k + c * col_k]) * scale;
                vj[c] = f32::cast_from(v[at_v + c * col_v]);
            }
        }
        let mut qs = SharedMemory::<f32>::new(tile * dim);
        let mut dos = SharedMemory::<f32>::new(tile * dim);
        let mut row_lse = SharedMemory::<f32>::new(tile);
        let mut row_delta = SharedMemory::<f32>::new(tile);
        let tiles = seq.div_ceil(tile);
        for t in 0..tiles {
            let start = t * tile;
            load_tile::<F>(q, &mut qs, head, start, seq, dim, tile);
            load_tile::<F>(d_out, &mut dos, head, start, seq, dim, tile);
            let mut u = UNIT_POS_X as usize;
            while u < tile {
                if start + u < seq {
                    row_lse[u] = lse[row_at::<f32>(lse, head, start + u)];
                    row_delta[u] = delta[row_at::<f32>(delta, head, start + u)];
                }
                u += CUBE_DIM_X as usize;
            }
            sync_cube();
            if active {
                for ii in 0..tile {
                    if start + ii < seq {
                        let mut score = 0.0f32;
                        let mut dp = 0.0f32;
                        for c in 0..dim {
                            score += qs[ii * dim + c] * kj[c];
                            dp += dos[ii * dim + c] * vj[c];
                        }
                        let p = (score - row_lse[ii]).exp();
                        let ds = p * (dp - row_delta[ii]);
                        for c in 0..dim {
                            dvj[c] += p * dos[ii * dim + c];
                            dkj[c] += ds * qs[ii * dim + c];
                        }
                    }
                }
            }
            sync_cube();
        }
        if active {
            let (at_k, at_v) = (row_at::<F>(dk, head, j), row_at::<F>(dv, head, j));
            let (col_k, col_v) = (dk.stride(3), dv.stride(3));
            for c in 0..dim {
                dk[at_k + c * col_k] = F::cast_from(dkj[c] * scale);
                dv[at_v + c * col_v] = F::cast_from(dvj[c]);
            }
        }
    }
}

/// The layout the kernels' outputs are allocated in: the runtime's own
/// choice, which on CUDA pads each row to an aligned pitch (CubeCL's
/// `PitchedMemoryLayoutPolicy`). The kernels index every tensor through
/// its strides, so any layout serves; the CPU model of the launch
/// (`emulated` below) allocates with this same strategy through CubeCL's
/// own policy.
pub(crate) const OUTPUT_LAYOUT: MemoryLayoutStrategy = MemoryLayoutStrategy::Optimized;

/// An uninitialised tensor on `like`'s device, in [`OUTPUT_LAYOUT`].
pub(crate) fn empty_like<R: CubeRuntime>(
    like: &CubeTensor<R>,
    shape: Shape,
    dtype: DType,
) -> CubeTensor<R> {
    let (client, device) = (like.client.clone(), like.device.clone());
    match OUTPUT_LAYOUT {
        MemoryLayoutStrategy::Optimized => empty_device_dtype::<R>(client, device, shape, dtype),
        MemoryLayoutStrategy::Contiguous => {
            empty_device_contiguous_dtype::<R>(client, device, shape, dtype)
        }
    }
}

/// `t`, or a dense copy where its buffer (a view's runs to the end of
/// the allocation it views) is longer than u32 indices reach.
pub(crate) fn within_u32<R: CubeRuntime>(t: CubeTensor<R>) -> CubeTensor<R> {
    if t.handle.size_in_used() / t.dtype.size() as u64 > u32::MAX as u64 {
        into_contiguous(t)
    } else {
        t
    }
}

/// Cubes for `n` units of work on a device allowing `cubes_x` cubes along
/// x: along x alone where they fit, else rows of `cubes_x` (the kernels
/// number cubes by `CUBE_POS` and skip those past the work).
pub(crate) fn cube_grid(n: usize, cubes_x: u32) -> CubeCount {
    let n = n.max(1) as u64;
    let x = n.min(u64::from(cubes_x.max(1)));
    CubeCount::Static(x as u32, n.div_ceil(x) as u32, 1)
}

/// The launch of `[batch, heads, seq, dim]` on a device with `limits`: one
/// cube per head ([`cube_grid`]), a unit per row, the key tile, the scale.
pub(crate) fn geometry(
    shape: [usize; 4],
    limits: &Limits,
) -> (CubeCount, CubeDim, usize, usize, usize, f32) {
    let [b, h, t, d] = shape;
    (
        cube_grid(b * h, limits.cubes_x),
        CubeDim::new_1d(units(t)),
        t,
        d,
        key_tile(d, limits),
        1.0 / (d as f32).sqrt(),
    )
}

fn dims4<R: CubeRuntime>(t: &CubeTensor<R>) -> [usize; 4] {
    t.meta.shape().dims::<4>()
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> FusedAttention
    for CubeBackend<R, F, I, BT>
{
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        // Inputs as they come (views included): the kernels follow strides.
        let (q, k, v) = (within_u32(q), within_u32(k), within_u32(v));
        let shape = dims4(&q);
        let out = empty_like(&q, Shape::new(shape), q.dtype);
        let lse = launch_forward(q, k, v, out.clone());
        (out, lse)
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_out: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        let (q, k, v) = (within_u32(q), within_u32(k), within_u32(v));
        let (out, lse, d_out) = (within_u32(out), within_u32(lse), within_u32(d_out));
        let shape = Shape::new(dims4(&q));
        let grads = [0, 1, 2].map(|_| empty_like(&q, shape.clone(), q.dtype));
        launch_backward([q, k, v], out, lse, d_out, grads.clone());
        grads
    }

    /// q, k and v read in place from the projection and the output written
    /// in place into the context, through views ([`heads_view`]); burn's
    /// copies around [`Self::attention_forward`] where a third does not
    /// start at an offset the runtime binds.
    fn attention_forward_packed(
        qkv: FloatTensor<Self>,
        heads: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let qkv = within_u32(qkv);
        let Some([q, k, v]) = thirds(&qkv, heads) else {
            return attention::packed::forward::<Self>(qkv, heads);
        };
        let [b, t, w] = dims3(&q.meta.shape().dims::<4>());
        let context = empty_like(&qkv, Shape::new([b, t, w]), qkv.dtype);
        let out = heads_view(&context, heads, 1, 0).expect("a whole tensor binds at offset 0");
        let lse = launch_forward(q, k, v, out);
        (context, lse)
    }

    /// The projection's gradient written as one buffer, each third through
    /// a view; burn's copies around [`Self::attention_backward`] where a
    /// third does not start at an offset the runtime binds.
    fn attention_backward_packed(
        qkv: FloatTensor<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        heads: usize,
    ) -> FloatTensor<Self> {
        let (qkv, context) = (within_u32(qkv), within_u32(context));
        let (lse, d_context) = (within_u32(lse), within_u32(d_context));
        let d_qkv = empty_like(&qkv, qkv.meta.shape().clone(), qkv.dtype);
        let views = (
            thirds(&qkv, heads),
            heads_view(&context, heads, 1, 0),
            heads_view(&d_context, heads, 1, 0),
            thirds(&d_qkv, heads),
        );
        let (Some(inputs), Some(out), Some(d_out), Some(grads)) = views else {
            return attention::packed::backward::<Self>(qkv, context, lse, d_context, heads);
        };
        launch_backward(inputs, out, lse, d_out, grads);
        d_qkv
    }
}

/// The `[batch, seq, heads x dim]` a `[batch, heads, seq, dim]` shape
/// merges into.
fn dims3(shape: &[usize; 4]) -> [usize; 3] {
    let [b, h, t, d] = *shape;
    [b, t, h * d]
}

/// Part `part` of `parts` equal parts of `t`'s last dimension (`[batch,
/// seq, parts x width]`), split into `heads` heads as the view `[batch,
/// heads, seq, width / heads]` through `t`'s own strides (CUDA pads rows):
/// element `(b, h, s, c)` is `t[b, s, part x width + h x dim + c]`. `None`
/// where the part's first element is not at an offset the runtime can bind
/// (CUDA binds at 512-byte multiples: the 9M model's thirds start at 1,024
/// bytes in f32, 512 in bf16; the tiny one's, 256 in f32 and 128 in bf16,
/// do not, and take burn's copies).
pub(crate) fn heads_view<R: CubeRuntime>(
    t: &CubeTensor<R>,
    heads: usize,
    parts: usize,
    part: usize,
) -> Option<CubeTensor<R>> {
    let [b, s, columns] = t.meta.shape().dims::<3>();
    let strides = t.meta.strides();
    let (width, column) = (columns / parts, strides[2]);
    let dim = width / heads;
    let offset = (part * width * column * t.dtype.size()) as u64;
    if !offset.is_multiple_of(t.client.properties().memory.alignment) {
        return None;
    }
    let handle = match offset {
        0 => t.handle.clone(),
        _ => t.handle.clone().offset_start(offset),
    };
    Some(CubeTensor::new(
        t.client.clone(),
        handle,
        Metadata::new(
            [b, heads, s, dim],
            [strides[0], dim * column, strides[1], column],
        ),
        t.device.clone(),
        t.dtype,
    ))
}

/// q, k and v of a packed `[batch, seq, 3 width]` projection (or of its
/// gradient), as [`heads_view`]s.
fn thirds<R: CubeRuntime>(t: &CubeTensor<R>, heads: usize) -> Option<[CubeTensor<R>; 3]> {
    let [q, k, v] = [0, 1, 2].map(|part| heads_view(t, heads, 3, part));
    Some([q?, k?, v?])
}

/// The forward kernel on `q`, `k`, `v` (`[batch, heads, seq, dim]`, any
/// strides) into `out` (the same shape, any strides): returns the rows'
/// log-sum-exp.
fn launch_forward<R: CubeRuntime>(
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
    out: CubeTensor<R>,
) -> CubeTensor<R> {
    let shape = dims4(&q);
    let (count, dim, t, d, tile, scale) = geometry(shape, &Limits::of(&q.client));
    let lse = empty_like(&q, Shape::new([shape[0], shape[1], t]), DType::F32);
    let dtype = q.dtype;
    kernels::attention_forward_kernel::launch::<R>(
        &q.client.clone(),
        count,
        dim,
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        out.into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        scale,
        t,
        d,
        tile,
        dtype.into(),
    );
    lse
}

/// The backward kernels (dQ, then dK | dV) on the forward's inputs, output
/// and log-sum-exp and the output's gradient, into `grads` (`[dq, dk,
/// dv]`, any strides).
fn launch_backward<R: CubeRuntime>(
    [q, k, v]: [CubeTensor<R>; 3],
    out: CubeTensor<R>,
    lse: CubeTensor<R>,
    d_out: CubeTensor<R>,
    [dq, dk, dv]: [CubeTensor<R>; 3],
) {
    let shape = dims4(&q);
    let (count, dim, t, d, tile, scale) = geometry(shape, &Limits::of(&q.client));
    let dtype = q.dtype;
    let client = q.client.clone();
    let delta = empty_like(&q, Shape::new([shape[0], shape[1], t]), DType::F32);
    kernels::attention_dq_kernel::launch::<R>(
        &client,
        count.clone(),
        dim,
        q.clone().into_tensor_arg(),
        k.clone().into_tensor_arg(),
        v.clone().into_tensor_arg(),
        out.into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        d_out.clone().into_tensor_arg(),
        dq.into_tensor_arg(),
        delta.clone().into_tensor_arg(),
        scale,
        t,
        d,
        tile,
        dtype.into(),
    );
    kernels::attention_dkdv_kernel::launch::<R>(
        &client,
        count,
        dim,
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        lse.into_tensor_arg(),
        delta.into_tensor_arg(),
        d_out.into_tensor_arg(),
        dk.into_tensor_arg(),
        dv.into_tensor_arg(),
        scale,
        t,
        d,
        tile,
        dtype.into(),
    );
}

/// Which of the kernels' passes a fusion operation runs.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// q, k, v -> out, lse.
    Forward,
    /// q, k, v, out, lse, d_out -> dq, dk, dv.
    Backward,
    /// qkv -> context, lse (`FusedAttention::attention_forward_packed`).
    PackedForward { heads: usize },
    /// qkv, context, lse, d_context -> d_qkv.
    PackedBackward { heads: usize },
}

impl<R: CubeRuntime> KernelPass<R> for Pass {
    fn name(&self) -> &'static str {
        match self {
            Pass::Forward => "chessbench_attention_forward",
            Pass::Backward => "chessbench_attention_backward",
            Pass::PackedForward { .. } => "chessbench_attention_packed_forward",
            Pass::PackedBackward { .. } => "chessbench_attention_packed_backward",
        }
    }

    fn run<F: FloatElement, I: IntElement, BT: BoolElement>(
        self,
        inputs: Vec<FloatTensor<CubeBackend<R, F, I, BT>>>,
    ) -> Vec<FloatTensor<CubeBackend<R, F, I, BT>>> {
        type B<R, F, I, BT> = CubeBackend<R, F, I, BT>;
        match self {
            Pass::Forward => {
                let [q, k, v] = operands(inputs);
                let (out, lse) = B::<R, F, I, BT>::attention_forward(q, k, v);
                vec![out, lse]
            }
            Pass::Backward => {
                let [q, k, v, out, lse, d_out] = operands(inputs);
                B::<R, F, I, BT>::attention_backward(q, k, v, out, lse, d_out).into()
            }
            Pass::PackedForward { heads } => {
                let [qkv] = operands(inputs);
                let (context, lse) = B::<R, F, I, BT>::attention_forward_packed(qkv, heads);
                vec![context, lse]
            }
            Pass::PackedBackward { heads } => {
                let [qkv, context, lse, d_context] = operands(inputs);
                vec![B::<R, F, I, BT>::attention_backward_packed(
                    qkv, context, lse, d_context, heads,
                )]
            }
        }
    }
}

/// The fused backend's attention: custom operations of the fusion stream
/// ([`KernelPass`]).
impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> FusedAttention
    for Fusion<CubeBackend<R, F, I, BT>>
{
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let shape = q.shape.clone();
        let dims: [usize; 4] = shape.dims::<4>();
        // Checked here, on the caller's thread: inside the fusion stream a
        // panic would only be logged.
        assert!(
            k.shape == shape && v.shape == shape && k.dtype == q.dtype && v.dtype == q.dtype,
            "fused attention of unequal shapes: {:?} {:?} {:?}",
            q.shape,
            k.shape,
            v.shape
        );
        let limits = Limits::of(&R::client(&q.client.device().clone()));
        assert!(
            supported(dims, q.dtype, &limits),
            "fused attention of {dims:?} in {:?} on a device with {limits:?}",
            q.dtype
        );
        let out = TensorIr::uninit(q.client.create_empty_handle(), shape, q.dtype);
        let lse = TensorIr::uninit(
            q.client.create_empty_handle(),
            Shape::new([dims[0], dims[1], dims[2]]),
            DType::F32,
        );
        let [out, lse] =
            register_pass::<R, _, F, I, BT>(Pass::Forward, vec![q, k, v], &[out, lse]).outputs();
        (out, lse)
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_out: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        let shape = q.shape.clone();
        let dtype = q.dtype;
        let rows = Shape::new([shape[0], shape[1], shape[2]]);
        assert!(
            [&k, &v, &out, &d_out]
                .iter()
                .all(|t| t.dtype == dtype && t.shape == shape)
                && lse.dtype == DType::F32
                && lse.shape == rows,
            "fused attention backward of mixed formats or shapes"
        );
        let grads = [0, 1, 2]
            .map(|_| TensorIr::uninit(q.client.create_empty_handle(), shape.clone(), dtype));
        register_pass::<R, _, F, I, BT>(Pass::Backward, vec![q, k, v, out, lse, d_out], &grads)
            .outputs()
    }

    fn attention_forward_packed(
        qkv: FloatTensor<Self>,
        heads: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [b, t, w3] = qkv.shape.dims::<3>();
        let dims = [b, heads, t, w3 / 3 / heads];
        let limits = Limits::of(&R::client(&qkv.client.device().clone()));
        assert!(
            heads > 0 && w3 % (3 * heads) == 0 && supported(dims, qkv.dtype, &limits),
            "fused packed attention of {:?} in {} heads, {:?}, on a device with {limits:?}",
            qkv.shape,
            heads,
            qkv.dtype
        );
        let context = TensorIr::uninit(
            qkv.client.create_empty_handle(),
            Shape::new([b, t, w3 / 3]),
            qkv.dtype,
        );
        let lse = TensorIr::uninit(
            qkv.client.create_empty_handle(),
            Shape::new([b, heads, t]),
            DType::F32,
        );
        let [context, lse] = register_pass::<R, _, F, I, BT>(
            Pass::PackedForward { heads },
            vec![qkv],
            &[context, lse],
        )
        .outputs();
        (context, lse)
    }

    fn attention_backward_packed(
        qkv: FloatTensor<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        heads: usize,
    ) -> FloatTensor<Self> {
        let [b, t, w3] = qkv.shape.dims::<3>();
        let (shape, dtype) = (Shape::new([b, t, w3 / 3]), qkv.dtype);
        assert!(
            [&context, &d_context]
                .iter()
                .all(|c| c.dtype == dtype && c.shape == shape)
                && lse.dtype == DType::F32
                && lse.shape == Shape::new([b, heads, t]),
            "fused packed attention backward of mixed formats or shapes"
        );
        let grad = TensorIr::uninit(qkv.client.create_empty_handle(), qkv.shape.clone(), dtype);
        let [d_qkv] = register_pass::<R, _, F, I, BT>(
            Pass::PackedBackward { heads },
            vec![qkv, context, lse, d_context],
            &[grad],
        )
        .outputs();
        d_qkv
    }
}

/// The kernels on the CPU, launched as the CUDA runtime launches them
/// ([`crate::model::gpu::cuda_emulator`]): inputs as the model hands them over (dense,
/// freshly allocated, or views into a projection with an offset), outputs
/// allocated in [`OUTPUT_LAYOUT`], the geometry of [`geometry`].
#[cfg(all(test, feature = "cuda"))]
mod emulated {
    use burn_cubecl::cubecl::{ir::StorageType, prelude::*, server::MemoryLayoutStrategy};

    use super::{
        KEY_TILE, OUTPUT_LAYOUT, geometry, kernels::*, relative_error, test_values, units,
    };
    use crate::model::{
        attention::{self, Heads},
        gpu::cuda_emulator::{
            Device, DeviceTensor, Elem, Kernel, Launch, Outcome, POISON, as_cpp, builder, cuda_c,
            h100, have_gpp, properties, settings,
        },
    };

    /// How the model hands a `[batch, heads, seq, dim]` input to the kernels.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Inputs {
        /// Dense, row-major (what `into_contiguous` makes).
        Contiguous,
        /// As CUDA's allocator lays out a new tensor (`from_data`, an
        /// element-wise result): [`MemoryLayoutStrategy::Optimized`].
        Allocated,
        /// As the transformer's blocks hand them over: `q`, `k`, `v` split
        /// out of one `[batch, seq, 3 * heads * dim]` projection (an offset,
        /// a row stride of three heads' widths) and transposed to
        /// `[batch, heads, seq, dim]`; the output's gradient a transposed
        /// `[batch, seq, heads * dim]`.
        Views,
        /// As the packed passes hand them over (`heads_view` in the launch
        /// code): q, k and v views of one `[batch, seq, 3 * heads * dim]`
        /// buffer from their third's offset to the buffer's end, the
        /// output's gradient a view of `[batch, seq, heads * dim]`; and the
        /// outputs written the same way, the output into a `[batch, seq,
        /// heads * dim]` buffer and dq, dk, dv into the thirds of one
        /// projection-shaped buffer each.
        Packed,
    }

    /// `[b, h, t, d]` viewed out of a dense `[b, t, parts * h * d]`
    /// allocation at part `part`: sliced as burn slices the last dimension
    /// (a view from the part's first column, its handle cut at both ends),
    /// split into heads and transposed.
    fn heads_view(s: Heads, elem: Elem, parts: usize, part: usize) -> DeviceTensor {
        let width = parts * s.heads * s.dim;
        let mut t = DeviceTensor::narrowed(
            [s.batch, s.seq, s.heads * s.dim],
            elem,
            width,
            part * s.heads * s.dim,
        );
        t.shape = vec![s.batch, s.heads, s.seq, s.dim];
        t.strides = vec![s.seq * width, s.dim, width, 1];
        t
    }

    /// [`heads_view`] as the packed passes bind it: the handle cut at the
    /// part's start only, running to the buffer's end.
    fn packed_view(s: Heads, elem: Elem, parts: usize, part: usize) -> DeviceTensor {
        let mut t = heads_view(s, elem, parts, part);
        t.offset_end = 0;
        t
    }

    /// An input of shape `s` laid out as `inputs` says (`part`: 0, 1, 2
    /// for q, k, v of one projection; 3 for the output's gradient).
    fn input(s: Heads, elem: Elem, inputs: Inputs, part: usize) -> DeviceTensor {
        let shape = [s.batch, s.heads, s.seq, s.dim];
        match inputs {
            Inputs::Contiguous => {
                DeviceTensor::allocate(&shape, elem, MemoryLayoutStrategy::Contiguous)
            }
            Inputs::Allocated => {
                DeviceTensor::allocate(&shape, elem, MemoryLayoutStrategy::Optimized)
            }
            Inputs::Views if part < 3 => heads_view(s, elem, 3, part),
            Inputs::Views => heads_view(s, elem, 1, 0),
            Inputs::Packed if part < 3 => packed_view(s, elem, 3, part),
            Inputs::Packed => packed_view(s, elem, 1, 0),
        }
    }

    /// The CUDA C of kernel `which` (`fwd`, `dq`, `dkdv`).
    fn cuda_source(which: &str, seq: usize, dim: usize, dtype: StorageType) -> String {
        let arg = TensorCompilationArg { inplace: None };
        let mut b = builder();
        let settings = |name: &str| settings(name, units(seq));
        macro_rules! tensors {
            ($b:ident, $t:ty, $f:ident) => {
                <Tensor<$t> as LaunchArg>::$f(&arg, &mut $b)
            };
        }
        let definition = match which {
            "fwd" => {
                use attention_forward_kernel::*;
                type E = DynamicScalar<_F>;
                b.scope.register_type::<E>(dtype);
                AddressType::U32.register(&mut b.scope);
                let (q, k, v) = (
                    tensors!(b, E, expand),
                    tensors!(b, E, expand),
                    tensors!(b, E, expand),
                );
                let out = tensors!(b, E, expand_output);
                let lse = tensors!(b, f32, expand_output);
                let scale = <f32 as LaunchArg>::expand(&Default::default(), &mut b);
                expand::<E>(
                    &mut b.scope,
                    q,
                    k,
                    v,
                    out,
                    lse,
                    scale,
                    seq,
                    dim,
                    KEY_TILE,
                    dtype,
                );
                b.build(settings("attention_forward_kernel"))
            }
            "dq" => {
                use attention_dq_kernel::*;
                type E = DynamicScalar<_F>;
                b.scope.register_type::<E>(dtype);
                AddressType::U32.register(&mut b.scope);
                let (q, k, v) = (
                    tensors!(b, E, expand),
                    tensors!(b, E, expand),
                    tensors!(b, E, expand),
                );
                let out = tensors!(b, E, expand);
                let lse = tensors!(b, f32, expand);
                let d_out = tensors!(b, E, expand);
                let dq = tensors!(b, E, expand_output);
                let delta = tensors!(b, f32, expand_output);
                let scale = <f32 as LaunchArg>::expand(&Default::default(), &mut b);
                expand::<E>(
                    &mut b.scope,
                    q,
                    k,
                    v,
                    out,
                    lse,
                    d_out,
                    dq,
                    delta,
                    scale,
                    seq,
                    dim,
                    KEY_TILE,
                    dtype,
                );
                b.build(settings("attention_dq_kernel"))
            }
            _ => {
                use attention_dkdv_kernel::*;
                type E = DynamicScalar<_F>;
                b.scope.register_type::<E>(dtype);
                AddressType::U32.register(&mut b.scope);
                let (q, k, v) = (
                    tensors!(b, E, expand),
                    tensors!(b, E, expand),
                    tensors!(b, E, expand),
                );
                let lse = tensors!(b, f32, expand);
                let delta = tensors!(b, f32, expand);
                let d_out = tensors!(b, E, expand);
                let dk = tensors!(b, E, expand_output);
                let dv = tensors!(b, E, expand_output);
                let scale = <f32 as LaunchArg>::expand(&Default::default(), &mut b);
                expand::<E>(
                    &mut b.scope,
                    q,
                    k,
                    v,
                    lse,
                    delta,
                    d_out,
                    dk,
                    dv,
                    scale,
                    seq,
                    dim,
                    KEY_TILE,
                    dtype,
                );
                b.build(settings("attention_dkdv_kernel"))
            }
        };
        cuda_c(definition)
    }

    /// The three kernels (forward, dQ, dK | dV) by their names in
    /// [`cuda_source`].
    const KERNELS: [(&str, &str); 3] = [
        ("fwd", "attention_forward_kernel"),
        ("dq", "attention_dq_kernel"),
        ("dkdv", "attention_dkdv_kernel"),
    ];

    /// The attention variants the 9M step runs on CUDA (sequence 79, head
    /// dimension 32, f32 and bf16), as CUDA C; `CHESSBENCH_NVRTC_DUMP`
    /// keeps them for `make bench-nvrtc`.
    #[test]
    fn the_nine_million_steps_variants_are_cuda_c() {
        for elem in [Elem::F32, Elem::Bf16] {
            for (which, function) in KERNELS {
                let name = format!(
                    "attention-{which}-79x32-{}",
                    elem.cpp().trim_start_matches("__")
                );
                let source = cuda_source(which, 79, 32, elem.storage());
                crate::model::gpu::cuda_emulator::check_and_dump(&name, function, &source);
            }
        }
    }

    fn build(seq: usize, dim: usize, elem: Elem) -> Device {
        build_with(seq, dim, elem, &[])
    }

    /// The three kernels for `seq x dim` heads in `elem`, compiled for the
    /// CPU with extra compiler flags (a sanitizer).
    fn build_with(seq: usize, dim: usize, elem: Elem, flags: &[&str]) -> Device {
        let kernels: Vec<Kernel> = KERNELS
            .iter()
            .map(|&(which, function)| Kernel {
                name: which.to_owned(),
                dump: format!(
                    "{which}-{seq}x{dim}-{}",
                    elem.cpp().trim_start_matches("__")
                ),
                function: function.to_owned(),
                source: cuda_source(which, seq, dim, elem.storage()),
            })
            .collect();
        Device::build(&kernels, flags)
    }

    /// Launches kernel `n` of [`KERNELS`] on heads `s` as the backend's
    /// launch does (its geometry and scale).
    #[allow(clippy::too_many_arguments)]
    fn launch_kernel(
        device: &Device,
        n: usize,
        s: Heads,
        inputs: &[&DeviceTensor],
        outputs: &mut [&mut DeviceTensor],
        launch: Launch,
        seed: u64,
    ) {
        let (count, cube_dim, ..) = geometry([s.batch, s.heads, s.seq, s.dim], &h100());
        let CubeCount::Static(cubes, 1, 1) = count else {
            panic!("a launch of {count:?} cubes");
        };
        device.launch(
            KERNELS[n].0,
            cubes,
            cube_dim.x,
            &[s.scale()],
            inputs,
            outputs,
            launch,
            seed,
        );
    }

    /// The forward and backward on `s` in `elem`, inputs laid out as
    /// `inputs`, launched as `launch` says, every allocation filled with
    /// `fill` first: the outputs against [`attention`]'s reference on the
    /// same (rounded) inputs, its backward given the output as the kernels
    /// stored it.
    fn run(
        device: &Device,
        s: Heads,
        elem: Elem,
        inputs: Inputs,
        launch: Launch,
        fill: u8,
    ) -> Outcome {
        let shape = [s.batch, s.heads, s.seq, s.dim];
        let lse_shape = [s.batch, s.heads, s.seq];
        let values = |salt| -> Vec<f32> {
            test_values(s, salt)
                .into_iter()
                .map(|x| elem.round(x))
                .collect()
        };
        let (q, k, v, g) = (values(1), values(2), values(3), values(4));
        let input = |part, x: &[f32]| {
            let mut t = input(s, elem, inputs, part);
            t.refill(fill);
            t.write(x);
            t
        };
        let (tq, tk, tv, tg) = (input(0, &q), input(1, &k), input(2, &v), input(3, &g));
        // Outputs as the launch allocates them (the packed passes write
        // the output and the gradients through views).
        let new =
            |shape: &[usize], elem| DeviceTensor::allocate_filled(shape, elem, OUTPUT_LAYOUT, fill);
        let output = |parts: usize, part: usize| {
            if inputs == Inputs::Packed {
                let mut t = packed_view(s, elem, parts, part);
                t.refill(fill);
                t
            } else {
                new(&shape, elem)
            }
        };
        let (mut out, mut lse) = (output(1, 0), new(&lse_shape, Elem::F32));
        launch_kernel(
            device,
            0,
            s,
            &[&tq, &tk, &tv],
            &mut [&mut out, &mut lse],
            launch,
            1,
        );
        let (mut dq, mut delta) = (output(3, 0), new(&lse_shape, Elem::F32));
        launch_kernel(
            device,
            1,
            s,
            &[&tq, &tk, &tv, &out, &lse, &tg],
            &mut [&mut dq, &mut delta],
            launch,
            2,
        );
        let (mut dk, mut dv) = (output(3, 1), output(3, 2));
        launch_kernel(
            device,
            2,
            s,
            &[&tq, &tk, &tv, &lse, &delta, &tg],
            &mut [&mut dk, &mut dv],
            launch,
            3,
        );

        let reference = attention::forward(&q, &k, &v, s);
        let stored = attention::Forward {
            out: reference.out.iter().map(|&x| elem.round(x)).collect(),
            lse: reference.lse.clone(),
        };
        let grads = attention::backward(&q, &k, &v, &stored, &g, s);
        let errors = vec![
            ("output", relative_error(&out.read(), &reference.out)),
            ("log-sum-exp", relative_error(&lse.read(), &reference.lse)),
            ("dq", relative_error(&dq.read(), &grads.dq)),
            ("dk", relative_error(&dk.read(), &grads.dk)),
            ("dv", relative_error(&dv.read(), &grads.dv)),
        ];
        let stray = [&out, &lse, &dq, &delta, &dk, &dv]
            .iter()
            .map(|t| t.stray_writes())
            .sum::<usize>();
        Outcome { errors, stray }
    }

    fn heads(batch: usize, heads: usize, seq: usize, dim: usize) -> Heads {
        Heads {
            batch,
            heads,
            seq,
            dim,
        }
    }

    /// The three kernels on the 9M head (79 x 32), the 136M/270M head
    /// (79 x 128), the CUDA test's odd shape (5 x 7: rows of 7 padded to
    /// 8) and a sequence ending one row into a tile (33 x 16), in f32
    /// (within 1e-4 of the reference, as `tests/cuda.rs` asks on a GPU) and
    /// with bf16 tensors (2e-2: bf16's rounding of what they store), with
    /// inputs dense, freshly allocated and as the model's views; outputs
    /// in the launch's layout, read back through their strides; nothing
    /// written outside an output's elements.
    #[test]
    fn the_kernels_compute_attention_on_the_layouts_cuda_gives_them() {
        if !have_gpp() {
            return;
        }
        for s in [
            heads(2, 8, 79, 32),
            heads(1, 2, 79, 128),
            heads(3, 1, 5, 7),
            heads(2, 2, 33, 16),
        ] {
            for (elem, bound) in [(Elem::F32, 1e-4), (Elem::Bf16, 2e-2)] {
                let device = build(s.seq, s.dim, elem);
                for inputs in [
                    Inputs::Contiguous,
                    Inputs::Allocated,
                    Inputs::Views,
                    Inputs::Packed,
                ] {
                    run(&device, s, elem, inputs, Launch::Strided, POISON)
                        .assert_within(&format!("{s:?} {elem:?} {inputs:?}"), bound);
                }
            }
        }
    }

    /// No data race between a cube's units: ThreadSanitizer watches the
    /// kernels' shared memory and buffers between barriers (a tile read
    /// before the whole cube loaded it, a write racing a read), on a
    /// sequence ending one row into its second tile and on the 9M head.
    #[test]
    fn the_kernels_have_no_data_race_within_a_cube() {
        if !have_gpp() {
            return;
        }
        for s in [heads(1, 2, 33, 16), heads(1, 2, 79, 32)] {
            let device = build_with(s.seq, s.dim, Elem::F32, &["-fsanitize=thread", "-g"]);
            let o = run(
                &device,
                s,
                Elem::F32,
                Inputs::Views,
                Launch::Strided,
                POISON,
            );
            for (what, e) in o.errors {
                assert!(e <= 1e-4, "{s:?} {what}: {e:e}");
            }
        }
    }

    /// Every shape [`supported`] takes launches within an H100's limits:
    /// units per cube, cubes, and the kernels' shared memory as CubeCL
    /// compiles them (at the extremes of sequence and head dimension).
    #[test]
    fn every_supported_shape_fits_the_device_limits() {
        use super::{MAX_DIM, MAX_SEQ, supported};
        use burn::tensor::DType;
        let hw = properties().hardware;
        for seq in [1, 5, 31, 32, 33, 79, MAX_SEQ] {
            for dim in [1, 7, 32, MAX_DIM] {
                assert!(supported([1, 1, seq, dim], DType::BF16, &h100()));
                let (count, cube_dim, ..) = geometry([4096, 8, seq, dim], &h100());
                let CubeCount::Static(cubes, 1, 1) = count else {
                    panic!("{count:?}");
                };
                assert!(cubes <= hw.max_cube_count.0);
                assert!(
                    cube_dim.num_elems() <= hw.max_units_per_cube,
                    "{seq}: {cube_dim:?}"
                );
                for (which, _) in KERNELS {
                    let (_, shared) =
                        as_cpp(&cuda_source(which, seq, dim, Elem::F32.storage()), "k");
                    assert!(
                        shared <= hw.max_shared_memory_size,
                        "{which} {seq}x{dim}: {shared} bytes"
                    );
                }
            }
        }
        assert!(!supported([1, 1, MAX_SEQ + 1, 32], DType::F32, &h100()));
        assert!(!supported([1, 1, 79, MAX_DIM + 1], DType::F32, &h100()));
        assert!(
            !supported([1 << 16, 8, 79, 128], DType::F32, &h100()),
            "u32 indices overflow"
        );
        assert!(!supported([2, 8, 79, 32], DType::F64, &h100()));
    }

    /// The model catches the bug class it exists for: the same kernels
    /// launched as before they followed strides (inputs made dense, every
    /// tensor indexed as if dense, outputs in CUDA's padded layout) fail
    /// where rows are padded (the log-sum-exp's 79 floats, everything of
    /// the odd shape's rows of 7), as they failed on an H100, and pass
    /// where padding changes nothing (rows of 32 and 128 f32). With memory
    /// zeroed instead of poisoned, the errors are those the H100 printed
    /// (`bench/results/h100-2026-11-27`): the cause, reproduced.
    #[test]
    fn kernels_that_ignore_strides_fail_the_model() {
        if !have_gpp() {
            return;
        }
        let all = ["output", "log-sum-exp", "dq", "dk", "dv"].as_slice();
        let after_lse = ["log-sum-exp", "dq", "dk", "dv"].as_slice();
        for (s, padded) in [
            (heads(2, 8, 79, 32), after_lse),
            (heads(1, 2, 79, 128), after_lse),
            (heads(3, 1, 5, 7), all),
        ] {
            let device = build(s.seq, s.dim, Elem::F32);
            let o = run(
                &device,
                s,
                Elem::F32,
                Inputs::Contiguous,
                Launch::Dense,
                POISON,
            );
            println!(
                "{s:?} dense kernels: {:?}, {} stray bytes",
                o.errors, o.stray
            );
            for &(what, e) in &o.errors {
                if padded.contains(&what) {
                    assert!(
                        e.is_nan() || e >= 1e-1,
                        "{s:?} {what}: {e:e}, yet its rows are padded"
                    );
                } else {
                    assert!(e <= 1e-4, "{s:?} {what}: {e:e}");
                }
            }
            assert!(
                o.stray > 0,
                "{s:?}: dense writes into padded rows land outside the elements"
            );
            let zeroed = run(&device, s, Elem::F32, Inputs::Contiguous, Launch::Dense, 0);
            println!("{s:?} dense kernels, zeroed memory: {:?}", zeroed.errors);
        }
    }
}
