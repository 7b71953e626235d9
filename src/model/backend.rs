//! What the predictor asks of a backend beyond burn's `Backend`: how its
//! linear layers multiply, and whether few large operations beat many small
//! ones.
//!
//! On the CPU (burn's `flex`) the linear layers are burn's own `linear`
//! and every projection is its own product, exactly as the network has
//! always run there (the demo's loss trajectory is reproducible to the last
//! bit). On CUDA ([`super::gpu::cuda`]) every operation is a kernel launch and
//! CubeCL's matrix kernels run far below the tensor cores' peak, so the
//! products go to cuBLASLt when it is there (with their backward), a
//! block's q, k, v projections and its gate and up projections run as one
//! product each, and the optimiser works on flat buffers.

use burn::{
    backend::{Autodiff, Flex},
    nn::LayerNorm,
    tensor::{
        Shape, Slice, Tensor, TensorMetadata, activation::silu, backend::Backend, ops::FloatTensor,
    },
};
use serde::{Deserialize, Serialize};

/// The backend side of the predictor (module docs).
pub trait ModelBackend: Backend {
    /// Prefer few large operations to many small ones: one product for a
    /// block's q|k|v (and one for gate|up), their weights concatenated at
    /// each forward pass, and one reduction for the global gradient norm.
    /// True on GPUs, where each operation is a kernel launch; false on the
    /// CPU, where the separate products are as fast and the results stay
    /// bit-identical to the per-tensor code.
    const FEW_KERNELS: bool = false;

    /// A linear layer's product without bias: `x [.., k] · w [k, n]`.
    fn project<const D: usize>(x: Tensor<Self, D>, w: Tensor<Self, 2>) -> Tensor<Self, D> {
        burn::tensor::module::linear(x, w, None)
    }

    /// Which implementation [`Self::project`] runs (reported with timings).
    fn products() -> Products {
        Products::Burn
    }

    /// Products that could not run in the vendor library and ran burn's
    /// instead, so far in this process.
    fn product_fallbacks() -> u64 {
        0
    }

    /// A block's attention, `softmax(q k^T / sqrt(dim)) v` over
    /// `[batch, heads, seq, dim]` without a mask: burn's `module::attention`
    /// unless the backend has a fused kernel ([`super::attention`]).
    fn attend(q: Tensor<Self, 4>, k: Tensor<Self, 4>, v: Tensor<Self, 4>) -> Tensor<Self, 4> {
        burn::tensor::module::attention(q, k, v, None, None, Default::default())
    }

    /// The attention of a block's packed q|k|v projection `qkv` (`[batch,
    /// seq, 3 width]`, each head's `width / heads` columns consecutive in
    /// each third) to the context `[batch, seq, width]` that the output
    /// projection takes: by default the thirds split into heads (views),
    /// [`Self::attend`], and the heads merged back. A backend with a fused
    /// kernel reads q, k and v and writes the context in place, and its
    /// backward writes the projection's gradient as one buffer.
    fn attend_packed(qkv: Tensor<Self, 3>, heads: usize) -> Tensor<Self, 3> {
        attend_by_parts(qkv, heads)
    }

    /// Which implementation [`Self::attend`] runs (reported with timings).
    fn attention() -> AttentionKernel {
        AttentionKernel::Burn
    }

    /// A block's layer norm of `x` (`[batch, seq, d]`): burn's `LayerNorm`
    /// unless the backend has a fused kernel ([`super::layers`]).
    fn norm(norm: &LayerNorm<Self>, x: Tensor<Self, 3>) -> Tensor<Self, 3> {
        norm.forward(x)
    }

    /// The SwiGLU of a block's gate|up product `both` (`[batch, seq, 2 f]`):
    /// `silu(gate) * up`, by burn's operations unless the backend has a
    /// fused kernel ([`super::layers`]).
    fn swiglu(both: Tensor<Self, 3>) -> Tensor<Self, 3> {
        burn_swiglu(both)
    }

    /// Which implementation [`Self::norm`] and [`Self::swiglu`] run
    /// (reported with timings).
    fn layers() -> LayerKernels {
        LayerKernels::Burn
    }

    /// Starts (`true`) or stops the range an external profiler records
    /// (NVIDIA's `nsys profile --capture-range=cudaProfilerApi`), so a
    /// kernel account covers the timed steps only; the operation counter
    /// ([`super::op_count`]) starts counting. Nothing on the CPU.
    fn profiler_range(_start: bool) {}

    /// The most bytes one buffer may hold on `device`, where the backend
    /// caps it below what the model's passes need (wgpu); `None` otherwise.
    fn max_buffer_bytes(_device: &Self::Device) -> Option<u64> {
        None
    }

    /// The sum of every element of `t`, as one value: burn's `sum`, unless
    /// the backend needs another way (wgpu: `gpu::backend::sum_in_rows`).
    fn sum_all(t: Tensor<Self, 1>) -> Tensor<Self, 1> {
        t.sum()
    }

    /// Every tensor of `parts` (any rank, one format), flattened and laid
    /// end to end in order: the optimiser's flat gradient. burn's reshapes
    /// and concatenation unless the backend has a cheaper way (the fused
    /// GPU backends: one operation in the fusion stream, `gpu::flat`).
    fn flatten(parts: Vec<FloatTensor<Self>>) -> FloatTensor<Self> {
        burn_flatten::<Self>(parts)
    }

    /// `flat` cut into consecutive tensors of `shapes` (the inverse of
    /// [`Self::flatten`]): the model's parameters as views of the
    /// optimiser's flat buffer. burn's slices and reshapes unless the
    /// backend has a cheaper way (`gpu::flat`).
    fn unflatten(flat: FloatTensor<Self>, shapes: &[Shape]) -> Vec<FloatTensor<Self>> {
        burn_unflatten::<Self>(flat, shapes)
    }

    /// The operations issued since the profiler range started, by name,
    /// where the backend counts them ([`super::op_count`]).
    fn op_counts() -> Option<std::collections::BTreeMap<String, u64>> {
        None
    }
}

/// [`ModelBackend::attend_packed`] by parts: the projection's thirds split
/// into heads (views), [`ModelBackend::attend`], the heads merged back.
pub(crate) fn attend_by_parts<B: ModelBackend>(qkv: Tensor<B, 3>, heads: usize) -> Tensor<B, 3> {
    let [q, k, v] = super::attention::packed::split::<B>(qkv.into_primitive().tensor(), heads);
    super::attention::packed::merge(B::attend(q, k, v))
}

/// [`ModelBackend::flatten`] by burn's operations: a reshape per part
/// (a view of a dense tensor) and one concatenation.
pub(crate) fn burn_flatten<B: Backend>(parts: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let flat = parts
        .into_iter()
        .map(|p| {
            let n = p.shape().num_elements();
            B::float_reshape(p, Shape::new([n]))
        })
        .collect();
    B::float_cat(flat, 0)
}

/// [`ModelBackend::unflatten`] by burn's operations: a slice and a reshape
/// per part (views of `flat`).
pub(crate) fn burn_unflatten<B: Backend>(
    flat: FloatTensor<B>,
    shapes: &[Shape],
) -> Vec<FloatTensor<B>> {
    let mut offset = 0;
    shapes
        .iter()
        .map(|shape| {
            let n = shape.num_elements();
            let part = B::float_slice(flat.clone(), &[Slice::from(offset..offset + n)]);
            offset += n;
            B::float_reshape(part, shape.clone())
        })
        .collect()
}

/// burn's SwiGLU of a gate|up product `both` (`[.., 2 f]`): `silu(gate) *
/// up`, by its slices, sigmoid and products.
pub(crate) fn burn_swiglu<B: Backend>(both: Tensor<B, 3>) -> Tensor<B, 3> {
    let f = both.dims()[2] / 2;
    silu(both.clone().narrow(2, 0, f)) * both.narrow(2, f, f)
}

/// The environment variable that picks the attention on CUDA (and in the
/// operation counter): `burn` or `fused`.
pub const ATTENTION_VAR: &str = "CHESSBENCH_ATTENTION";

/// The environment variable that picks the layer norm and SwiGLU on CUDA
/// (and in the operation counter): `burn` or `fused`.
pub const LAYERS_VAR: &str = "CHESSBENCH_LAYERS";

/// The matrix products behind the linear layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Products {
    /// burn's `linear` (CubeCL's matmul kernels on CUDA).
    #[default]
    Burn,
    /// NVIDIA's cuBLASLt, loaded at run time (CUDA only).
    Cublaslt,
}

/// The attention behind each block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKernel {
    /// burn's `module::attention` (under autodiff: the scores materialised
    /// and differentiated op by op).
    #[default]
    Burn,
    /// The project's fused kernels, forward and backward (GPUs).
    Fused,
    /// The fused kernels for some shapes, burn's for the others: a shape
    /// the kernels do not take, or a variant that failed its self-test
    /// (each named by a warning and in bench-step's `fallbacks`).
    Mixed,
}

/// The layer norms and SwiGLUs of the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKernels {
    /// burn's operations (under autodiff: each differentiated on its own).
    #[default]
    Burn,
    /// The project's fused kernels, forward and backward (GPUs).
    Fused,
    /// The fused kernels for some shapes, burn's for the others (as for
    /// [`AttentionKernel::Mixed`]).
    Mixed,
}

impl ModelBackend for Flex {}
impl ModelBackend for Autodiff<Flex> {}

/// A training backend: autodiff over a backend the model runs on (the EMA,
/// evaluation and the optimiser's buffers live on the inner one).
pub trait TrainBackend:
    burn::tensor::backend::AutodiffBackend<InnerBackend: ModelBackend> + ModelBackend
{
}

impl<B> TrainBackend for B where
    B: burn::tensor::backend::AutodiffBackend<InnerBackend: ModelBackend> + ModelBackend
{
}

#[cfg(test)]
mod tests {
    use burn::tensor::{TensorData, TensorPrimitive, ops::FloatTensorOps};

    use super::*;

    /// burn's flatten lays parts of any rank end to end in order, views
    /// read in their own order, and unflatten gives back every part.
    #[test]
    fn flat_buffers_round_trip() {
        let device = Default::default();
        let a = Tensor::<Flex, 2>::from_data(
            TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]),
            &device,
        );
        let b = Tensor::<Flex, 1>::from_data(TensorData::new(vec![5.0f32, 6.0, 7.0], [3]), &device);
        let c = Tensor::<Flex, 3>::from_data(
            TensorData::new((8..14).map(|x| x as f32).collect::<Vec<_>>(), [1, 2, 3]),
            &device,
        );
        let parts = vec![
            a.clone().transpose().into_primitive().tensor(),
            b.into_primitive().tensor(),
            c.into_primitive().tensor(),
        ];
        let flat = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(
            <Flex as ModelBackend>::flatten(parts),
        ));
        let values = flat.clone().into_data().to_vec::<f32>().unwrap();
        assert_eq!(
            values,
            [
                1.0, 3.0, 2.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0
            ]
        );
        let shapes = [Shape::new([2, 2]), Shape::new([3]), Shape::new([1, 2, 3])];
        let parts = <Flex as ModelBackend>::unflatten(flat.into_primitive().tensor(), &shapes);
        assert_eq!(parts.len(), 3);
        let back: Vec<(Vec<usize>, Vec<f32>)> = parts
            .into_iter()
            .map(|p| {
                let dims = p.shape().to_vec();
                let n = p.shape().num_elements();
                let t = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(
                    Flex::float_reshape(p, Shape::new([n])),
                ));
                (dims, t.into_data().to_vec::<f32>().unwrap())
            })
            .collect();
        assert_eq!(back[0], (vec![2, 2], vec![1.0, 3.0, 2.0, 4.0]));
        assert_eq!(back[1], (vec![3], vec![5.0, 6.0, 7.0]));
        assert_eq!(back[2].0, vec![1, 2, 3]);
        assert_eq!(back[2].1, (8..14).map(|x| x as f32).collect::<Vec<_>>());
    }
}
