//! The fused attention on burn's CUDA backend: three CubeCL kernels that
//! follow [`super::attention`]'s tiled algorithm (the forward with the saved
//! log-sum-exp, then `dQ` and `dK | dV`), registered as custom operations
//! of burn's fusion stream and, through [`super::attention::fused_attention`],
//! as one autodiff operation.
//!
//! CubeCL rather than CUDA C through NVRTC: the kernels are Rust in this
//! crate, launched on CubeCL's own stream with its buffers (no raw
//! pointers, no second compiler path), and the same code would run on any
//! backend CubeCL runs (ROCm, wgpu). At 79 tokens the work per head is
//! small enough that the kernel's structure (one cube per sequence and
//! head, a unit per row, tiles in shared memory) matters more than
//! instruction selection, which is what NVRTC would add.
//!
//! Each kernel runs one cube per `(sequence, head)` with one unit per row
//! (query rows for the forward and `dQ`, key rows for `dK | dV`): the row's
//! own vectors stay in registers (f32 whatever the tensors' format), the
//! other side's rows are loaded [`KEY_TILE`] at a time into shared memory
//! by the whole cube, and the `seq x seq` scores never reach global memory.
//! Shapes the kernels do not take ([`supported`]) run burn's attention.

use std::sync::OnceLock;

use burn::tensor::{DType, Shape, Tensor, TensorData, TensorPrimitive, ops::FloatTensor};
use burn_cubecl::{
    BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement, cubecl::prelude::*,
    kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor,
};
use burn_fusion::{
    Fusion, FusionBackend, FusionRuntime,
    stream::{Operation, OperationStreams},
};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};
use cubecl::cuda::{CudaDevice, CudaRuntime};

use super::{
    attention::{self, FusedAttention, Heads, KEY_TILE},
    backend::AttentionKernel,
    cuda::panic_message,
};

type Cube<F, I, BT> = CubeBackend<CudaRuntime, F, I, BT>;

/// The largest head dimension the kernels keep in registers.
pub(crate) const MAX_DIM: usize = 128;
/// The longest sequence (one unit per row, a cube of at most 1,024 units).
pub(crate) const MAX_SEQ: usize = 1024;

/// Whether the kernels take `[batch, heads, seq, dim]` in `dtype`.
pub(crate) fn supported(shape: [usize; 4], dtype: DType) -> bool {
    let [b, h, t, d] = shape;
    b * h > 0
        && (1..=MAX_SEQ).contains(&t)
        && (1..=MAX_DIM).contains(&d)
        && matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
}

/// The environment variable that picks the attention: `burn` or `fused`.
pub const ATTENTION_VAR: &str = "CHESSBENCH_ATTENTION";

/// Whether the blocks' attention of `shape` in `dtype` runs the fused
/// kernels: they pass their start-up test and take the shape.
pub(crate) fn use_fused(shape: [usize; 4], dtype: DType) -> bool {
    supported(shape, dtype) && fused_enabled()
}

/// Which attention the CUDA backend runs (for the 79-token shapes).
pub(crate) fn attention_kernel() -> AttentionKernel {
    if fused_enabled() {
        AttentionKernel::Fused
    } else {
        AttentionKernel::Burn
    }
}

/// Whether the fused kernels are used (decided once, on GPU 0): unless
/// `CHESSBENCH_ATTENTION=burn`, when their forward and backward agree with
/// [`attention`]'s reference on a few shapes at start-up; otherwise burn's
/// attention runs, with one warning.
pub fn fused_enabled() -> bool {
    static CHOICE: OnceLock<bool> = OnceLock::new();
    *CHOICE.get_or_init(|| {
        let wanted = std::env::var(ATTENTION_VAR).unwrap_or_default();
        if wanted == "burn" {
            return false;
        }
        if !matches!(wanted.as_str(), "" | "fused") {
            eprintln!(
                "warning: {ATTENTION_VAR}={wanted:?} is neither \"burn\" nor \"fused\"; using the fused attention where it works"
            );
        }
        let tested = std::panic::catch_unwind(|| self_test(&CudaDevice::default()))
            .unwrap_or_else(|panic| Err(format!("it panicked: {}", panic_message(&*panic))));
        match tested {
            Ok(()) => true,
            Err(e) => {
                eprintln!("warning: the fused attention is not used ({e}); burn's attention runs");
                false
            }
        }
    })
}

/// Largest difference relative to the reference's largest magnitude.
fn relative_error(ours: &[f32], reference: &[f32]) -> f32 {
    let top = reference
        .iter()
        .fold(0.0f32, |a, x| a.max(x.abs()))
        .max(1e-30);
    ours.iter()
        .zip(reference)
        .fold(0.0f32, |a, (x, y)| a.max((x - y).abs()))
        / top
}

/// The kernels against [`attention`]'s reference on the CPU (f32, within
/// 1e-4 relative: both compute in f32 without tensor cores), forward,
/// log-sum-exp and the three gradients; the 9M head, the 136M/270M head,
/// and an odd shape.
pub fn self_test(device: &CudaDevice) -> Result<(), String> {
    for (dims, what, e) in kernel_errors(device, DType::F32)? {
        if e.is_nan() || e > 1e-4 {
            return Err(format!(
                "{dims:?} {what}: {e:e} from the reference (relative)"
            ));
        }
    }
    Ok(())
}

/// A kernel output's shape, name and largest relative error.
pub type KernelError = ([usize; 4], &'static str, f32);

/// The kernels' largest relative errors against [`attention`]'s reference
/// (which `make test` checks against burn's attention) on the shapes of
/// [`self_test`], with tensors in `dtype` (the reference computes in f32 on
/// the same inputs, rounded to `dtype`): `(shape, what, error)` for the
/// output, the log-sum-exp and the three gradients.
pub fn kernel_errors(device: &CudaDevice, dtype: DType) -> Result<Vec<KernelError>, String> {
    type B = Cube<f32, i32, u8>;
    let shapes = [
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
    let mut errors = Vec::new();
    for (n, s) in shapes.into_iter().enumerate() {
        let dims = [s.batch, s.heads, s.seq, s.dim];
        let up = |x: &[f32]| -> FloatTensor<B> {
            Tensor::<B, 4>::from_data(TensorData::new(x.to_vec(), dims), device)
                .cast(dtype)
                .into_primitive()
                .tensor()
        };
        let down = |t: FloatTensor<B>| -> Vec<f32> {
            let t = Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(t));
            t.cast(DType::F32)
                .into_data()
                .to_vec::<f32>()
                .unwrap_or_default()
        };
        let down3 = |t: FloatTensor<B>| -> Vec<f32> {
            Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(t))
                .into_data()
                .to_vec::<f32>()
                .unwrap_or_default()
        };
        // Inputs as the kernels see them (rounded to `dtype`).
        let values = |salt: usize| -> Vec<f32> {
            let x: Vec<f32> = (0..s.len())
                .map(|i| (((i * 37 + salt * 11 + n) % 61) as f32 - 30.0) / 15.0)
                .collect();
            down(up(&x))
        };
        let (q, k, v, g) = (values(1), values(2), values(3), values(4));
        let (out, lse) = B::attention_forward(up(&q), up(&k), up(&v));
        let [dq, dk, dv] =
            B::attention_backward(up(&q), up(&k), up(&v), out.clone(), lse.clone(), up(&g));
        let reference = attention::forward(&q, &k, &v, s);
        let grads = attention::backward(&q, &k, &v, &reference, &g, s);
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

/// Units per cube: the rows, rounded up to whole warps.
fn units(seq: usize) -> u32 {
    seq.div_ceil(32) as u32 * 32
}

/// The kernels (CubeCL's `Tensor` is not burn's).
mod kernels {
    use burn_cubecl::cubecl::prelude::*;

    /// Loads rows `start..start + KEY_TILE` (those below `seq`) of a
    /// `seq x dim` slice at `base` into `tile` as f32, the whole cube sharing
    /// the work.
    #[cube]
    fn load_tile<F: Float>(
        src: &Tensor<F>,
        tile: &mut SharedMemory<f32>,
        base: usize,
        start: usize,
        #[comptime] seq: usize,
        #[comptime] dim: usize,
        #[comptime] rows: usize,
    ) {
        let mut idx = UNIT_POS_X as usize;
        while idx < rows * dim {
            let r = start + idx / dim;
            if r < seq {
                tile[idx] = f32::cast_from(src[base + r * dim + idx % dim]);
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
        let head = CUBE_POS_X as usize;
        let i = UNIT_POS_X as usize;
        let base = head * seq * dim;
        let active = i < seq;
        let mut qi = Array::<f32>::new(dim);
        let mut acc = Array::<f32>::new(dim);
        let mut s = Array::<f32>::new(tile);
        for c in 0..dim {
            qi[c] = 0.0;
            acc[c] = 0.0;
            if active {
                qi[c] = f32::cast_from(q[base + i * dim + c]) * scale;
            }
        }
        let mut ks = SharedMemory::<f32>::new(tile * dim);
        let mut vs = SharedMemory::<f32>::new(tile * dim);
        let mut m = f32::new(-1.0e30);
        let mut l = 0.0f32;
        let tiles = seq.div_ceil(tile);
        for t in 0..tiles {
            let start = t * tile;
            load_tile::<F>(k, &mut ks, base, start, seq, dim, tile);
            load_tile::<F>(v, &mut vs, base, start, seq, dim, tile);
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
            for c in 0..dim {
                out[base + i * dim + c] = F::cast_from(acc[c] / l);
            }
            lse[head * seq + i] = m + l.ln();
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
        let head = CUBE_POS_X as usize;
        let i = UNIT_POS_X as usize;
        let base = head * seq * dim;
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
            if active {
                let at = base + i * dim + c;
                qi[c] = f32::cast_from(q[at]) * scale;
                doi[c] = f32::cast_from(d_out[at]);
                d_i += doi[c] * f32::cast_from(out[at]);
            }
        }
        if active {
            lse_i = lse[head * seq + i];
            delta[head * seq + i] = d_i;
        }
        let mut ks = SharedMemory::<f32>::new(tile * dim);
        let mut vs = SharedMemory::<f32>::new(tile * dim);
        let tiles = seq.div_ceil(tile);
        for t in 0..tiles {
            let start = t * tile;
            load_tile::<F>(k, &mut ks, base, start, seq, dim, tile);
            load_tile::<F>(v, &mut vs, base, start, seq, dim, tile);
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
            for c in 0..dim {
                dq[base + i * dim + c] = F::cast_from(acc[c] * scale);
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
        let head = CUBE_POS_X as usize;
        let j = UNIT_POS_X as usize;
        let base = head * seq * dim;
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
            if active {
                kj[c] = f32::cast_from(k[base + j * dim + c]) * scale;
                vj[c] = f32::cast_from(v[base + j * dim + c]);
            }
        }
        let mut qs = SharedMemory::<f32>::new(tile * dim);
        let mut dos = SharedMemory::<f32>::new(tile * dim);
        let mut row_lse = SharedMemory::<f32>::new(tile);
        let mut row_delta = SharedMemory::<f32>::new(tile);
        let tiles = seq.div_ceil(tile);
        for t in 0..tiles {
            let start = t * tile;
            load_tile::<F>(q, &mut qs, base, start, seq, dim, tile);
            load_tile::<F>(d_out, &mut dos, base, start, seq, dim, tile);
            let mut u = UNIT_POS_X as usize;
            while u < tile {
                if start + u < seq {
                    row_lse[u] = lse[head * seq + start + u];
                    row_delta[u] = delta[head * seq + start + u];
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
            for c in 0..dim {
                dk[base + j * dim + c] = F::cast_from(dkj[c] * scale);
                dv[base + j * dim + c] = F::cast_from(dvj[c]);
            }
        }
    }
}

/// An uninitialised tensor on `like`'s device.
fn empty_like<R: CubeRuntime>(like: &CubeTensor<R>, shape: Shape, dtype: DType) -> CubeTensor<R> {
    empty_device_dtype::<R>(like.client.clone(), like.device.clone(), shape, dtype)
}

/// The launch geometry of `[batch, heads, seq, dim]`: one cube per head.
fn geometry(shape: [usize; 4]) -> (CubeCount, CubeDim, usize, usize, f32) {
    let [b, h, t, d] = shape;
    (
        CubeCount::Static((b * h) as u32, 1, 1),
        CubeDim::new_1d(units(t)),
        t,
        d,
        1.0 / (d as f32).sqrt(),
    )
}

fn dims4<R: CubeRuntime>(t: &CubeTensor<R>) -> [usize; 4] {
    t.meta.shape().dims::<4>()
}

impl<F: FloatElement, I: IntElement, BT: BoolElement> FusedAttention for Cube<F, I, BT> {
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (q, k, v) = (into_contiguous(q), into_contiguous(k), into_contiguous(v));
        let shape = dims4(&q);
        let (count, dim, t, d, scale) = geometry(shape);
        let out = empty_like(&q, Shape::new(shape), q.dtype);
        let lse = empty_like(&q, Shape::new([shape[0], shape[1], t]), DType::F32);
        let dtype = q.dtype;
        kernels::attention_forward_kernel::launch::<CudaRuntime>(
            &q.client.clone(),
            count,
            dim,
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            scale,
            t,
            d,
            KEY_TILE,
            dtype.into(),
        );
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
        let (q, k, v) = (into_contiguous(q), into_contiguous(k), into_contiguous(v));
        let (out, lse, d_out) = (
            into_contiguous(out),
            into_contiguous(lse),
            into_contiguous(d_out),
        );
        let shape = dims4(&q);
        let (count, dim, t, d, scale) = geometry(shape);
        let dtype = q.dtype;
        let client = q.client.clone();
        let dq = empty_like(&q, Shape::new(shape), dtype);
        let dk = empty_like(&q, Shape::new(shape), dtype);
        let dv = empty_like(&q, Shape::new(shape), dtype);
        let delta = empty_like(&q, Shape::new([shape[0], shape[1], t]), DType::F32);
        kernels::attention_dq_kernel::launch::<CudaRuntime>(
            &client,
            count.clone(),
            dim,
            q.clone().into_tensor_arg(),
            k.clone().into_tensor_arg(),
            v.clone().into_tensor_arg(),
            out.into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            d_out.clone().into_tensor_arg(),
            dq.clone().into_tensor_arg(),
            delta.clone().into_tensor_arg(),
            scale,
            t,
            d,
            KEY_TILE,
            dtype.into(),
        );
        kernels::attention_dkdv_kernel::launch::<CudaRuntime>(
            &client,
            count,
            dim,
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            lse.into_tensor_arg(),
            delta.into_tensor_arg(),
            d_out.into_tensor_arg(),
            dk.clone().into_tensor_arg(),
            dv.clone().into_tensor_arg(),
            scale,
            t,
            d,
            KEY_TILE,
            dtype.into(),
        );
        [dq, dk, dv]
    }
}

/// Which of the kernels' passes a fusion operation runs.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// q, k, v -> out, lse.
    Forward,
    /// q, k, v, out, lse, d_out -> dq, dk, dv.
    Backward,
}

/// A pass of the fused attention in burn's fusion stream, run by the
/// CubeCL backend's kernels when the stream reaches it.
#[derive(Debug)]
struct AttentionOp<F, I, BT> {
    desc: CustomOpIr,
    pass: Pass,
    _backend: std::marker::PhantomData<(F, I, BT)>,
}

impl<F: FloatElement, I: IntElement, BT: BoolElement>
    Operation<<Cube<F, I, BT> as FusionBackend>::FusionRuntime> for AttentionOp<F, I, BT>
{
    fn execute(
        &self,
        handles: &mut HandleContainer<
            <<Cube<F, I, BT> as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle,
        >,
    ) {
        type B<F, I, BT> = Cube<F, I, BT>;
        let inputs: Vec<_> = self
            .desc
            .inputs
            .iter()
            .map(|t| handles.get_float_tensor::<B<F, I, BT>>(t))
            .collect();
        let mut inputs = inputs.into_iter();
        let mut next = || inputs.next().expect("an input per operand");
        let outputs: Vec<_> = match self.pass {
            Pass::Forward => {
                let (out, lse) = B::<F, I, BT>::attention_forward(next(), next(), next());
                vec![out, lse]
            }
            Pass::Backward => {
                B::<F, I, BT>::attention_backward(next(), next(), next(), next(), next(), next())
                    .into()
            }
        };
        for (ir, t) in self.desc.outputs.iter().zip(outputs) {
            handles.register_float_tensor::<B<F, I, BT>>(&ir.id, t);
        }
    }
}

/// A tensor of the fused CUDA backend.
type FusedTensor<F, I, BT> = FloatTensor<Fusion<Cube<F, I, BT>>>;

/// Registers `pass` on `inputs` in the fusion stream, its outputs described
/// by `outputs`.
fn register<F: FloatElement, I: IntElement, BT: BoolElement>(
    pass: Pass,
    inputs: Vec<FusedTensor<F, I, BT>>,
    outputs: &[TensorIr],
) -> Vec<FusedTensor<F, I, BT>> {
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(inputs.iter());
    let name = match pass {
        Pass::Forward => "chessbench_attention_forward",
        Pass::Backward => "chessbench_attention_backward",
    };
    let irs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(name, &irs, outputs);
    client.register(
        streams,
        OperationIr::Custom(desc.clone()),
        AttentionOp::<F, I, BT> {
            desc,
            pass,
            _backend: std::marker::PhantomData,
        },
    )
}

/// The fused backend's attention: custom operations of the fusion stream
/// ([`AttentionOp`]).
impl<F: FloatElement, I: IntElement, BT: BoolElement> FusedAttention for Fusion<Cube<F, I, BT>> {
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
        assert!(
            supported(dims, q.dtype),
            "fused attention of {dims:?} in {:?}",
            q.dtype
        );
        let out = TensorIr::uninit(q.client.create_empty_handle(), shape, q.dtype);
        let lse = TensorIr::uninit(
            q.client.create_empty_handle(),
            Shape::new([dims[0], dims[1], dims[2]]),
            DType::F32,
        );
        let [out, lse] = register::<F, I, BT>(Pass::Forward, vec![q, k, v], &[out, lse]).outputs();
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
        assert!(
            [&k, &v, &out, &d_out]
                .iter()
                .all(|t| t.dtype == dtype && t.shape == shape)
                && lse.dtype == DType::F32,
            "fused attention backward of mixed formats or shapes"
        );
        let grads = [0, 1, 2]
            .map(|_| TensorIr::uninit(q.client.create_empty_handle(), shape.clone(), dtype));
        register::<F, I, BT>(Pass::Backward, vec![q, k, v, out, lse, d_out], &grads).outputs()
    }
}

/// The kernels as CubeCL compiles them for CUDA, run on the CPU: their CUDA
/// C (CubeCL's own compiler, the source NVRTC gets on a GPU) is compiled as
/// C++ against `tests/kernels/shim.h` (a thread per unit, a barrier for
/// `__syncthreads`, shared memory filled with NaN) and run by
/// `tests/kernels/emulate.cpp` against a double-precision reference. What
/// this cannot show: warp scheduling, the GPU's memory model, speed.
#[cfg(test)]
mod emulated {
    use std::{path::Path, process::Command};

    use burn_cubecl::cubecl::{
        Compiler,
        ir::{
            AddressType, DeviceProperties, ElemType, FloatKind, HardwareProperties,
            MemoryDeviceProperties, StorageType, UIntKind, VectorSize,
        },
        prelude::*,
        profile::TimingMethod,
    };
    use cubecl_cpp::{
        cuda::{CudaDialect, mma::CudaWmmaCompiler},
        shared::{CompilationOptions, CppCompiler},
    };

    use super::{KEY_TILE, kernels::*, units};

    /// An H100's limits (what the compiler consults).
    fn properties() -> DeviceProperties {
        let hardware = HardwareProperties {
            load_width: 128,
            plane_size_min: 32,
            plane_size_max: 32,
            max_bindings: 1024,
            max_shared_memory_size: 227 * 1024,
            max_cube_count: (u32::MAX, 65535, 65535),
            max_units_per_cube: 1024,
            max_cube_dim: (1024, 1024, 64),
            num_streaming_multiprocessors: Some(132),
            num_cpu_cores: None,
            num_tensor_cores: Some(4),
            min_tensor_cores_dim: Some(8),
            max_vector_size: VectorSize::MAX,
        };
        let memory = MemoryDeviceProperties {
            max_page_size: 1 << 34,
            alignment: 32,
        };
        let mut p =
            DeviceProperties::new(Default::default(), memory, hardware, TimingMethod::System);
        cubecl_cpp::register_supported_types(&mut p);
        p
    }

    /// The CUDA C of kernel `which` (`fwd`, `dq`, `dkdv`).
    fn cuda_source(which: &str, seq: usize, dim: usize, dtype: StorageType) -> String {
        let arg = TensorCompilationArg { inplace: None };
        let mut b = KernelBuilder::default();
        b.runtime_properties(Default::default());
        b.device_properties(&properties());
        let settings = |name: &str| {
            KernelSettings::default()
                .cube_dim(CubeDim::new_1d(units(seq)))
                .address_type(AddressType::U32)
                .kernel_name(name)
        };
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
        let mut compiler = CppCompiler::<CudaDialect<CudaWmmaCompiler>>::default();
        let options = CompilationOptions {
            warp_size: 32,
            ..Default::default()
        };
        let address = StorageType::Scalar(ElemType::UInt(UIntKind::U32));
        let kernel = compiler
            .compile(definition, &options, ExecutionMode::Checked, address)
            .expect("CubeCL compiles the kernel");
        format!("{kernel}")
    }

    /// The kernel's CUDA C as a C++ namespace `ns` for emulate.cpp: its
    /// dynamic shared memory becomes the shim's buffer, whose size (the
    /// last shared array's end) it declares.
    fn as_cpp(source: &str, ns: &str) -> String {
        let mut shared = 0;
        let lines: Vec<&str> = source.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            // "// Shared array size: N, B bytes" then "T *x = reinterpret_cast<T*>(&dynamic_shared_mem[OFF]);"
            let Some(rest) = line.trim().strip_prefix("// Shared array size: ") else {
                continue;
            };
            let bytes: usize = rest
                .split(", ")
                .nth(1)
                .and_then(|b| b.trim_end_matches(" bytes").parse().ok())
                .expect("a shared array's size");
            let next = lines.get(i + 1).copied().unwrap_or("");
            let offset: usize = next
                .split("dynamic_shared_mem[")
                .nth(1)
                .and_then(|r| r.split(']').next())
                .and_then(|o| o.parse().ok())
                .expect("a shared array's offset");
            shared = shared.max(offset + bytes);
        }
        let body = source.replace("extern \"C\" ", "");
        let body = body
            .lines()
            .filter(|l| !l.trim_start().starts_with("#include <cuda"))
            .map(|l| {
                if l.contains("extern __shared__") && l.contains("dynamic_shared_mem[]") {
                    "uint8* dynamic_shared_mem = g_shared;".to_owned()
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        format!("namespace {ns} {{\nconstexpr unsigned SHARED_BYTES = {shared};\n{body}\n}}\n")
    }

    /// Largest relative errors of the kernels on `heads` heads of
    /// `seq x dim` in `elem` (`float` or `__nv_bfloat16`): out, lse, delta,
    /// dq, dk, dv.
    fn emulate(seq: usize, dim: usize, heads: usize, elem: &str) -> Vec<(String, f64)> {
        let dtype = match elem {
            "float" => StorageType::Scalar(ElemType::Float(FloatKind::F32)),
            _ => StorageType::Scalar(ElemType::Float(FloatKind::BF16)),
        };
        let dir = tempfile::tempdir().unwrap();
        for (which, ns, file) in [
            ("fwd", "fwd", "k_fwd.inc"),
            ("dq", "dqk", "k_dq.inc"),
            ("dkdv", "dkdvk", "k_dkdv.inc"),
        ] {
            let source = cuda_source(which, seq, dim, dtype);
            std::fs::write(dir.path().join(file), as_cpp(&source, ns)).unwrap();
        }
        let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels");
        let exe = dir.path().join("emulate");
        let built = Command::new("g++")
            .args(["-std=c++20", "-O1", "-w"])
            .arg(format!("-DSEQ={seq}"))
            .arg(format!("-DDIM={dim}"))
            .arg(format!("-DELEM={elem}"))
            .arg(format!("-I{}", kernels.display()))
            .arg(format!("-I{}", dir.path().display()))
            .arg(kernels.join("emulate.cpp"))
            .arg("-o")
            .arg(&exe)
            .arg("-lpthread")
            .output()
            .expect("g++ runs");
        assert!(
            built.status.success(),
            "the kernels' CUDA C does not compile as C++: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let ran = Command::new(&exe).arg(heads.to_string()).output().unwrap();
        assert!(
            ran.status.success(),
            "{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        let text = String::from_utf8_lossy(&ran.stdout).into_owned();
        let words: Vec<&str> = text.split_whitespace().collect();
        words
            .chunks(2)
            .map(|w| {
                (
                    w[0].to_owned(),
                    w[1].parse::<f64>().unwrap_or(f64::INFINITY),
                )
            })
            .collect()
    }

    /// The three kernels on the 9M head (79 x 32), the 136M/270M head
    /// (79 x 128), a sequence shorter than a tile and one ending one row
    /// into a tile, in f32 (within 1e-5 of the double reference) and with
    /// bf16 tensors (2e-2: bf16's rounding of what they store).
    #[test]
    fn the_kernels_compiled_for_cuda_compute_attention_and_its_backward() {
        if Command::new("g++").arg("--version").output().is_err() {
            crate::testing::missing("no g++ to compile the kernels' CUDA C for the CPU");
            return;
        }
        for (seq, dim, heads) in [(79, 32, 3), (79, 128, 1), (5, 7, 2), (33, 16, 2)] {
            for (elem, bound) in [("float", 1e-5), ("__nv_bfloat16", 2e-2)] {
                let errors = emulate(seq, dim, heads, elem);
                println!("{seq} x {dim} {elem}: {errors:?}");
                assert_eq!(errors.len(), 6, "{errors:?}");
                for (what, e) in errors {
                    assert!(e <= bound, "{seq} x {dim} {elem} {what}: {e:e} relative");
                }
            }
        }
    }
}
