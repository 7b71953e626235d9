//! The optimiser's flat buffers on burn's GPU backends (CUDA, wgpu): the
//! gradients laid end to end in one buffer ([`ModelBackend::flatten`]) and
//! the parameters cut back out of it ([`ModelBackend::unflatten`]), each as
//! one custom operation of burn's fusion stream.
//!
//! burn's own way takes, for the 9M model's 94 parameter tensors, a reshape
//! per gradient and one concatenation (95 operations handed to fusion; the
//! concatenation launches a slice assignment per gradient, and a reshape
//! of a gradient that is a view, such as q, k and v's column slices of one
//! product's, a copy), then a slice and a reshape per parameter (188 more
//! operations). burn's fusion plans every operation it is handed on the
//! host (`burn_fusion`'s `register`), whatever the operation does. Here:
//!
//! - **Gather**: one operation, whose gradients are copied into the flat
//!   buffer by one kernel launch for as many gradients as a kernel may bind
//!   on the device (all of them on CUDA, which binds 1,024; 27 on
//!   lavapipe, four launches for the 9M model). Each gradient gets its own run of cubes, in proportion to
//!   its size ([`GATHER_CUBE_ELEMENTS`]), and is read as it lies: at its
//!   index where it is dense, else through its shape and strides (a view,
//!   or rows padded by CUDA's allocator). The kernel is self-tested once
//!   per device and format against the plain copy ([`gather_errors`]: ten
//!   parts, a transposed view and a column slice among them, in one launch
//!   and in launches of three); where it fails, the same operation runs
//!   burn's reshapes and concatenation inside it, with a warning, and
//!   `--require-fused` refuses the run.
//! - **Split**: one operation whose outputs are views of the flat buffer
//!   (burn's slices inside it, which copy only a part whose start or end is
//!   not on the device's alignment), with no kernel of its own.
//!
//! `CHESSBENCH_LAYERS=burn` turns them off with the layer kernels (burn's
//! operations, one by one, as on the CPU).

use burn::tensor::{DType, Shape, TensorMetadata, ops::FloatTensor};
use burn_cubecl::{
    BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement, cubecl::prelude::*,
    ops::numeric::empty_device_dtype, tensor::CubeTensor,
};
use burn_ir::{OperationOutput, TensorIr};

use crate::model::{
    backend::{LAYERS_VAR, burn_flatten, burn_unflatten},
    gpu::attention::cube_grid,
    gpu::layers::KernelError,
    gpu::pass::{
        Family, KernelPass, Layout, Limits, Variant, errors_within, fused_wanted, register_pass,
        relative_error, shape_fallback, variant_enabled,
    },
};

use super::pass::FusedCube;

/// Units of a cube of the gather.
const GATHER_UNITS: u32 = 256;
/// Elements a cube of the gather copies (16 a unit): each part gets
/// `ceil(elements / GATHER_CUBE_ELEMENTS)` cubes, so the launch has no
/// idle cubes (lavapipe pays for every cube it starts) and a large part
/// is spread over many (an H100's bandwidth needs thousands of units).
const GATHER_CUBE_ELEMENTS: usize = 16 * GATHER_UNITS as usize;

/// Bindings of a gather launch besides its gradients: the flat buffer and
/// CubeCL's metadata and scalars, with one to spare.
const GATHER_OTHER_BINDINGS: u32 = 4;

/// The gather's variant on a device: one per format (the kernel takes any
/// number of gradients, shapes and strides).
pub(crate) fn gather_variant(dtype: DType) -> Variant {
    Variant {
        family: Family::Gather,
        sizes: [0, 0],
        dtype,
        layout: Layout::Views,
    }
}

/// Gradients one gather kernel takes on a device with `limits`.
pub(crate) fn gather_group(limits: &Limits) -> usize {
    limits.bindings.saturating_sub(GATHER_OTHER_BINDINGS).max(1) as usize
}

/// Why the gather kernel does not take `parts` (their shapes, in
/// `dtype`), or `None` when it does: f32, f16 or bf16, every part and
/// the flat buffer within u32 indices.
pub(crate) fn gather_refusal(shapes: &[Shape], dtype: DType) -> Option<String> {
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Some(format!("{dtype:?}: the kernel copies f32, f16 or bf16"));
    }
    let total: u64 = shapes.iter().map(|s| s.num_elements() as u64).sum();
    (total > u64::from(u32::MAX))
        .then(|| format!("{total} elements: past u32 indices ({})", u32::MAX))
}

/// The operations of this module in the fusion stream.
#[derive(Debug, Clone)]
enum FlatPass {
    /// parts -> flat, by the gather kernel, at most `group` parts a
    /// launch.
    Gather { group: usize },
    /// parts -> flat, by burn's reshapes and concatenation (the kernel
    /// failed its self-test on the device).
    Cat,
    /// flat -> views of the shapes.
    Split(std::sync::Arc<[Shape]>),
}

impl<R: CubeRuntime> KernelPass<R> for FlatPass {
    fn name(&self) -> &'static str {
        match self {
            FlatPass::Gather { .. } => "chessbench_gather",
            FlatPass::Cat => "chessbench_gather_burn",
            FlatPass::Split(_) => "chessbench_split",
        }
    }

    fn run<F: FloatElement, I: IntElement, BT: BoolElement>(
        self,
        inputs: Vec<FloatTensor<CubeBackend<R, F, I, BT>>>,
    ) -> Vec<FloatTensor<CubeBackend<R, F, I, BT>>> {
        match self {
            FlatPass::Gather { group } => vec![gather(inputs, group)],
            FlatPass::Cat => vec![burn_flatten::<CubeBackend<R, F, I, BT>>(inputs)],
            FlatPass::Split(shapes) => {
                let flat = inputs.into_iter().next().expect("the split's flat buffer");
                burn_unflatten::<CubeBackend<R, F, I, BT>>(flat, &shapes)
            }
        }
    }
}

/// `parts` copied end to end into a new flat buffer on the CubeCL backend:
/// one launch per `group` parts, each part its own run of cubes
/// ([`GATHER_CUBE_ELEMENTS`]).
fn gather<R: CubeRuntime>(parts: Vec<CubeTensor<R>>, group: usize) -> CubeTensor<R> {
    let first = parts.first().expect("a gather of no parts");
    let (client, device, dtype) = (first.client.clone(), first.device.clone(), first.dtype);
    let total: usize = parts.iter().map(|p| p.shape().num_elements()).sum();
    let out = empty_device_dtype::<R>(client.clone(), device, Shape::new([total]), dtype);
    let limits = Limits::of(&client);
    let mut offset = 0usize;
    for group in parts.chunks(group.max(1)) {
        let (mut offsets, mut firsts, mut dense, mut sources) = (
            SequenceArg::new(),
            SequenceArg::new(),
            SequenceArg::new(),
            SequenceArg::new(),
        );
        let mut cubes = 0usize;
        for part in group {
            let n = part.shape().num_elements();
            offsets.push(offset);
            firsts.push(cubes);
            dense.push(u32::from(part.is_contiguous()));
            offset += n;
            cubes += n.div_ceil(GATHER_CUBE_ELEMENTS).max(1);
            sources.push(part.clone().into_tensor_arg());
        }
        firsts.push(cubes);
        kernels::gather_kernel::launch::<R>(
            &client,
            cube_grid(cubes, limits.cubes_x),
            CubeDim::new_1d(GATHER_UNITS),
            sources,
            offsets,
            firsts,
            dense,
            out.clone().into_tensor_arg(),
            dtype.into(),
        );
    }
    out
}

/// Whether the gather of `shapes` in `dtype` on `device` runs the kernel:
/// the layer kernels are wanted, the kernel takes the shapes, and its
/// variant passed its self-test through the fused backend.
pub(crate) fn use_gather<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    device: &R::Device,
    shapes: &[Shape],
    dtype: DType,
) -> bool {
    if let Some(why) = gather_refusal(shapes, dtype) {
        let what = format!("the gradient gather of {} parts in {dtype:?}", shapes.len());
        shape_fallback::<R>(device, Family::Gather, what, why, "burn's concatenation");
        return false;
    }
    variant_enabled::<R>(
        LAYERS_VAR,
        device,
        gather_variant(dtype),
        "burn's concatenation",
        || {
            let group = gather_group(&Limits::of_device::<R>(device));
            let mut errors = gather_errors::<R, F, I, BT>(device, dtype, group)?;
            errors.extend(gather_errors::<R, F, I, BT>(device, dtype, 3)?);
            errors_within(errors, 0.0)
        },
    )
}

/// [`ModelBackend::flatten`](crate::model::backend::ModelBackend::flatten)
/// on the fused backend (module docs): one operation in the fusion stream,
/// or burn's operations when the layer kernels are off or the parts mix
/// formats.
pub(crate) fn flatten<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    parts: Vec<FloatTensor<FusedCube<R, F, I, BT>>>,
) -> FloatTensor<FusedCube<R, F, I, BT>> {
    let dtype = parts.first().expect("a flatten of no parts").dtype;
    if !fused_wanted(LAYERS_VAR) || parts.iter().any(|p| p.dtype != dtype) {
        return burn_flatten::<FusedCube<R, F, I, BT>>(parts);
    }
    let client = parts[0].client.clone();
    let shapes: Vec<Shape> = parts.iter().map(|p| p.shape()).collect();
    let pass = if use_gather::<R, F, I, BT>(client.device(), &shapes, dtype) {
        FlatPass::Gather {
            group: gather_group(&Limits::of(&R::client(client.device()))),
        }
    } else {
        FlatPass::Cat
    };
    let total = shapes.iter().map(Shape::num_elements).sum::<usize>();
    let out = TensorIr::uninit(client.create_empty_handle(), Shape::new([total]), dtype);
    let [flat] = register_pass::<R, _, F, I, BT>(pass, parts, &[out]).outputs();
    flat
}

/// [`ModelBackend::unflatten`](crate::model::backend::ModelBackend::unflatten)
/// on the fused backend (module docs): one operation whose outputs are
/// views of `flat`, or burn's operations when the layer kernels are off.
pub(crate) fn unflatten<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    flat: FloatTensor<FusedCube<R, F, I, BT>>,
    shapes: &[Shape],
) -> Vec<FloatTensor<FusedCube<R, F, I, BT>>> {
    let total: usize = shapes.iter().map(Shape::num_elements).sum();
    assert_eq!(
        flat.shape().num_elements(),
        total,
        "a flat buffer of {:?} split into parts of {total} elements",
        flat.shape()
    );
    if !fused_wanted(LAYERS_VAR) || shapes.is_empty() {
        return burn_unflatten::<FusedCube<R, F, I, BT>>(flat, shapes);
    }
    let client = flat.client.clone();
    let dtype = flat.dtype;
    let outputs: Vec<TensorIr> = shapes
        .iter()
        .map(|s| TensorIr::uninit(client.create_empty_handle(), s.clone(), dtype))
        .collect();
    register_pass::<R, _, F, I, BT>(FlatPass::Split(shapes.into()), vec![flat], &outputs)
}

/// The gather through the fused backend against the plain copy of its
/// parts' values, in `dtype`, at most `group` parts a launch: ten parts
/// of several ranks and sizes, a transposed view and a column slice among
/// them. `(shape, what, error)` per part; a copy is exact, so any error
/// fails.
pub(crate) fn gather_errors<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    device: &R::Device,
    dtype: DType,
    group: usize,
) -> Result<Vec<KernelError>, String> {
    use burn::tensor::{Tensor, TensorData, TensorPrimitive};
    type B<R, F, I, BT> = FusedCube<R, F, I, BT>;
    let values = |n: usize, salt: usize| -> Vec<f32> {
        // Exact in bf16: small integers and halves.
        (0..n)
            .map(|i| ((i * 7 + salt * 13) % 61) as f32 * 0.5 - 15.0)
            .collect()
    };
    // `x` in `dtype` as a dense tensor of `dims`.
    let dense = |x: &[f32], dims: &[usize]| -> FloatTensor<B<R, F, I, BT>> {
        let flat =
            Tensor::<B<R, F, I, BT>, 1>::from_data(TensorData::new(x.to_vec(), [x.len()]), device)
                .cast(dtype)
                .into_primitive()
                .tensor();
        <B<R, F, I, BT> as burn::tensor::ops::FloatTensorOps<B<R, F, I, BT>>>::float_reshape(
            flat,
            Shape::from(dims.to_vec()),
        )
    };
    let mut parts: Vec<FloatTensor<B<R, F, I, BT>>> = Vec::new();
    let mut expected: Vec<(Vec<usize>, Vec<f32>)> = Vec::new();
    for (k, dims) in [
        vec![3usize, 5],
        vec![7],
        vec![2, 3, 4],
        vec![1],
        vec![300],
        vec![4, 4],
        vec![5, 3],
        vec![9],
        vec![2, 2],
        vec![6],
    ]
    .into_iter()
    .enumerate()
    {
        let n: usize = dims.iter().product();
        let x = values(n, k);
        let part = match k {
            5 => {
                // A transposed view: its values in the view's order.
                let t = Tensor::<B<R, F, I, BT>, 2>::from_primitive(TensorPrimitive::Float(dense(
                    &x, &dims,
                )))
                .transpose();
                let seen = (0..4)
                    .flat_map(|r| (0..4).map(move |c| c * 4 + r))
                    .map(|i| x[i])
                    .collect::<Vec<f32>>();
                expected.push((vec![4, 4], seen));
                parts.push(t.into_primitive().tensor());
                continue;
            }
            6 => {
                // A column slice of a wider product ([5, 6] -> its last 3).
                let wide = values(30, k);
                let t = Tensor::<B<R, F, I, BT>, 2>::from_primitive(TensorPrimitive::Float(dense(
                    &wide,
                    &[5, 6],
                )))
                .narrow(1, 3, 3);
                let seen = (0..5)
                    .flat_map(|r| (3..6).map(move |c| r * 6 + c))
                    .map(|i| wide[i])
                    .collect::<Vec<f32>>();
                expected.push((vec![5, 3], seen));
                parts.push(t.into_primitive().tensor());
                continue;
            }
            _ => dense(&x, &dims),
        };
        expected.push((dims, x));
        parts.push(part);
    }
    let shapes: Vec<Shape> = parts.iter().map(|p| p.shape()).collect();
    let client = parts[0].client.clone();
    let total: usize = shapes.iter().map(Shape::num_elements).sum();
    let out = TensorIr::uninit(client.create_empty_handle(), Shape::new([total]), dtype);
    let [flat] =
        register_pass::<R, _, F, I, BT>(FlatPass::Gather { group }, parts, &[out]).outputs();
    let flat = Tensor::<B<R, F, I, BT>, 1>::from_primitive(TensorPrimitive::Float(flat))
        .cast(DType::F32)
        .into_data()
        .to_vec::<f32>()
        .map_err(|e| format!("reading the gathered buffer: {e:?}"))?;
    let mut errors = Vec::new();
    let mut offset = 0;
    for (dims, want) in expected {
        let got = flat.get(offset..offset + want.len()).unwrap_or_default();
        offset += want.len();
        let mut shape = [1usize; 3];
        for (i, d) in dims.iter().rev().enumerate() {
            shape[2 - i] = *d;
        }
        errors.push((shape, "gathered part", relative_error(got, &want)));
    }
    Ok(errors)
}

/// The kernel (CubeCL's `Tensor` is not burn's).
mod kernels {
    use burn_cubecl::cubecl::prelude::*;

    /// `out[offsets[k] + i] = parts[k][i]` for every part `k` and element
    /// `i` in the part's row-major order, read at `i` where the part is
    /// dense (`dense[k]` 1), else through its own shape and strides (a
    /// view, or rows padded by CUDA's allocator). Part `k` is copied by cubes `firsts[k]` up to
    /// `firsts[k + 1]` (cubes numbered along x, then y), each unit walking
    /// its share.
    #[cube(launch)]
    pub(super) fn gather_kernel<F: Float>(
        parts: &Sequence<Tensor<F>>,
        offsets: &Sequence<usize>,
        firsts: &Sequence<usize>,
        dense: &Sequence<u32>,
        out: &mut Tensor<F>,
        #[define(F)] _dtype: StorageType,
    ) {
        let count = parts.len().comptime();
        let cube = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize;
        #[unroll]
        for k in 0..count {
            if cube >= firsts[k] && cube < firsts[k + 1] {
                let part = parts.index(k);
                let base = offsets[k];
                let rank = part.rank();
                let mut n = 1usize;
                for d in 0..rank {
                    n *= part.shape(d);
                }
                let units = CUBE_DIM_X as usize;
                let step = (firsts[k + 1] - firsts[k]) * units;
                let mut i = (cube - firsts[k]) * units + UNIT_POS_X as usize;
                if dense[k] == 1 {
                    while i < n {
                        out[base + i] = part[i];
                        i += step;
                    }
                } else {
                    while i < n {
                        let mut rest = i;
                        let mut at = 0usize;
                        for d in 0..rank {
                            let dim = rank - 1 - d;
                            let size = part.shape(dim);
                            at += (rest % size) * part.stride(dim);
                            rest /= size;
                        }
                        out[base + i] = part[at];
                        i += step;
                    }
                }
            }
        }
    }
}

/// The gather as cubecl-cuda compiles it for an H100 (`make test-kernels`):
/// the 9M model's 94 gradients in one kernel, f32.
#[cfg(all(test, feature = "cuda"))]
mod emulated {
    use burn_cubecl::cubecl::prelude::*;

    use super::{GATHER_UNITS, kernels::gather_kernel};
    use crate::model::gpu::cuda_emulator::{Elem, builder, check_and_dump, cuda_c, settings};

    /// Parameter tensors of the 9M model.
    const PARTS: usize = 94;

    #[test]
    fn the_nine_million_models_gather_is_cuda_c() {
        use gather_kernel::*;
        type E = DynamicScalar<_F>;
        let dtype = Elem::F32.storage();
        let mut b = builder();
        b.scope.register_type::<E>(dtype);
        AddressType::U32.register(&mut b.scope);
        let tensor = TensorCompilationArg { inplace: None };
        let tensors = SequenceCompilationArg::<Tensor<E>> {
            values: (0..PARTS).map(|_| tensor.clone()).collect(),
        };
        let parts = <Sequence<Tensor<E>> as LaunchArg>::expand(&tensors, &mut b);
        let offsets = <Sequence<usize> as LaunchArg>::expand(
            &SequenceCompilationArg {
                values: (0..PARTS).map(|_| Default::default()).collect(),
            },
            &mut b,
        );
        let firsts = <Sequence<usize> as LaunchArg>::expand(
            &SequenceCompilationArg {
                values: (0..=PARTS).map(|_| Default::default()).collect(),
            },
            &mut b,
        );
        let dense = <Sequence<u32> as LaunchArg>::expand(
            &SequenceCompilationArg {
                values: (0..PARTS).map(|_| Default::default()).collect(),
            },
            &mut b,
        );
        let out = <Tensor<E> as LaunchArg>::expand_output(&tensor, &mut b);
        expand::<E>(&mut b.scope, parts, offsets, firsts, dense, out, dtype);
        let source = cuda_c(b.build(settings("gather_kernel", GATHER_UNITS)));
        check_and_dump("gather-94-f32", "gather_kernel", &source);
        // Every gradient is a buffer of its own.
        assert!(
            source.contains(&format!("buffer_{}", PARTS))
                || source.matches("float*").count() > PARTS,
            "{source}"
        );
    }
}
