//! A block's layer norm and SwiGLU as single operations with their own
//! backward, as a GPU kernel computes them, in plain Rust: the
//! specification the GPU kernels ([`super::gpu::layers`]) follow, proven
//! here against burn's autodiff on the CPU (`make test`).
//!
//! Under burn's autodiff both layers are chains of small operations, each
//! with its own backward: the layer norm is a mean, a subtraction, a
//! square, a second mean, a square root, a division, a scale and an offset
//! (burn's `layer_norm` decomposition), and the SwiGLU of a block's fused
//! gate|up product is two slices, a sigmoid, two products, and in the
//! backward two zero-padded slice gradients added together. On a GPU each
//! is a kernel launch and a trip through memory. Here each layer is one
//! forward and one backward:
//!
//! - **layer norm** over the last dimension (Ba et al., 2016; the paper's
//!   pre-LN transformer, haiku's and burn's epsilon 1e-5, biased variance):
//!   `y = (x - mean) * rstd * gamma + beta` with `rstd = 1 / sqrt(var +
//!   eps)`; the forward also returns each row's mean and `rstd`, which is
//!   all the backward needs of it. With `x^ = (x - mean) * rstd` and
//!   `g = dy * gamma`: `dx = rstd * (g - mean(g) - x^ * mean(g * x^))`,
//!   `dgamma = sum over rows of dy * x^`, `dbeta = sum over rows of dy`.
//! - **SwiGLU** (Shazeer, 2020) of `both = [gate | up]` (the block's one
//!   product for both projections, `[.., 2 f]`): `out = silu(gate) * up`
//!   with `silu(a) = a * sigmoid(a)`; backward, with `s = sigmoid(a)`:
//!   `d_gate = d_out * up * s * (1 + a * (1 - s))`, `d_up = d_out *
//!   silu(a)`, written side by side as `d_both`.
//!
//! The backend side: [`FusedLayers`] is what a backend with such kernels
//! implements, and [`fused_layer_norm`] / [`fused_swiglu`] the autodiff
//! operations over it. On the CPU they are tested through an
//! implementation of [`FusedLayers`] by the functions below; the CPU
//! trainer itself keeps burn's operations (its loss trajectory is
//! reproducible to the last bit).

// Used by the GPU backends only; built and tested everywhere.
#![cfg_attr(not(gpu), allow(dead_code))]

use burn::{
    backend::autodiff::{
        Autodiff,
        checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
        grads::Gradients as AutodiffGradients,
        ops::{Backward, Ops, OpsKind},
    },
    tensor::{Tensor, TensorMetadata, TensorPrimitive, backend::Backend, ops::FloatTensor},
};

/// haiku's and burn's layer norm epsilon (the model's every layer norm).
pub(crate) const LAYER_NORM_EPS: f32 = 1e-5;

/// A backend with fused layer norm and SwiGLU kernels (module docs).
pub trait FusedLayers: Backend {
    /// The layer norm of `x` (`[batch, seq, d]`) with `gamma`, `beta`
    /// (`[d]`), and each row's mean and `rstd` (f32, `[batch, seq]`).
    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f32,
    ) -> [FloatTensor<Self>; 3];

    /// `[dx, dgamma, dbeta]` from the input, `gamma`, the forward's mean
    /// and `rstd`, and the output's gradient.
    fn layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3];

    /// `silu(gate) * up` of `both = [gate | up]` (`[batch, seq, 2 f]`).
    fn swiglu_forward(both: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `d_both` (`[batch, seq, 2 f]`) from `both` and the output's gradient.
    fn swiglu_backward(both: FloatTensor<Self>, d_out: FloatTensor<Self>) -> FloatTensor<Self>;
}

fn primitive<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

fn tensor<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The fused layer norm without autodiff (inference).
pub(crate) fn fused_layer_norm_inference<B: FusedLayers>(
    x: Tensor<B, 3>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
) -> Tensor<B, 3> {
    let [y, _, _] = B::layer_norm_forward(
        primitive(x),
        primitive(gamma),
        primitive(beta),
        LAYER_NORM_EPS,
    );
    tensor(y)
}

/// The fused SwiGLU without autodiff (inference).
pub(crate) fn fused_swiglu_inference<B: FusedLayers>(both: Tensor<B, 3>) -> Tensor<B, 3> {
    tensor(B::swiglu_forward(primitive(both)))
}

/// A gradient in `like`'s format (a kernel reads its operands in one
/// format; the gradient of a cast may arrive in another).
fn cast_like<B: Backend>(gradient: FloatTensor<B>, like: &FloatTensor<B>) -> FloatTensor<B> {
    primitive(tensor::<B, 3>(gradient).cast(like.dtype()))
}

/// The fused layer norm under autodiff: one operation whose backward is
/// the kernels', from the saved input, `gamma`, mean and `rstd`.
pub(crate) fn fused_layer_norm<B: FusedLayers, C: CheckpointStrategy>(
    x: Tensor<Autodiff<B, C>, 3>,
    gamma: Tensor<Autodiff<B, C>, 1>,
    beta: Tensor<Autodiff<B, C>, 1>,
) -> Tensor<Autodiff<B, C>, 3> {
    #[derive(Debug)]
    struct LayerNormBackward;

    impl<B: FusedLayers> Backward<B, 3> for LayerNormBackward {
        /// x, gamma, mean, rstd.
        type State = [FloatTensor<B>; 4];

        fn backward(
            self,
            ops: Ops<Self::State, 3>,
            grads: &mut AutodiffGradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let [x, gamma, mean, rstd] = ops.state;
            let dy = cast_like::<B>(grads.consume::<B>(&ops.node), &x);
            let all = B::layer_norm_backward(x, gamma, mean, rstd, dy);
            for (parent, g) in ops.parents.into_iter().zip(all) {
                if let Some(node) = parent {
                    grads.register::<B>(node.id, g);
                }
            }
        }
    }

    let (x, gamma, beta) = (primitive(x), primitive(gamma), primitive(beta));
    let out = match LayerNormBackward
        .prepare::<C>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let [y, mean, rstd] = B::layer_norm_forward(
                x.primitive.clone(),
                gamma.primitive.clone(),
                beta.primitive,
                LAYER_NORM_EPS,
            );
            prep.finish([x.primitive, gamma.primitive, mean, rstd], y)
        }
        OpsKind::UnTracked(prep) => {
            let [y, _, _] =
                B::layer_norm_forward(x.primitive, gamma.primitive, beta.primitive, LAYER_NORM_EPS);
            prep.finish(y)
        }
    };
    tensor(out)
}

/// The fused SwiGLU under autodiff: one operation whose backward is the
/// kernel's, from the saved `both`.
pub(crate) fn fused_swiglu<B: FusedLayers, C: CheckpointStrategy>(
    both: Tensor<Autodiff<B, C>, 3>,
) -> Tensor<Autodiff<B, C>, 3> {
    #[derive(Debug)]
    struct SwigluBackward;

    impl<B: FusedLayers> Backward<B, 1> for SwigluBackward {
        type State = FloatTensor<B>;

        fn backward(
            self,
            ops: Ops<Self::State, 1>,
            grads: &mut AutodiffGradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let both = ops.state;
            let d_out = cast_like::<B>(grads.consume::<B>(&ops.node), &both);
            let [parent] = ops.parents;
            if let Some(node) = parent {
                grads.register::<B>(node.id, B::swiglu_backward(both, d_out));
            }
        }
    }

    let both = primitive(both);
    let out = match SwigluBackward
        .prepare::<C>([both.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let out = B::swiglu_forward(both.primitive.clone());
            prep.finish(both.primitive, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(B::swiglu_forward(both.primitive)),
    };
    tensor(out)
}

/// A layer norm's forward on the host: the output and each row's mean
/// and `rstd`.
#[derive(Debug, Clone)]
pub(crate) struct NormForward {
    pub(crate) y: Vec<f32>,
    pub(crate) mean: Vec<f32>,
    pub(crate) rstd: Vec<f32>,
}

/// A layer norm's gradients on the host.
#[derive(Debug, Clone)]
pub(crate) struct NormGradients {
    pub(crate) dx: Vec<f32>,
    pub(crate) dgamma: Vec<f32>,
    pub(crate) dbeta: Vec<f32>,
}

/// The layer norm of the rows of `x` (rows of `gamma.len()`), in f32 with
/// the mean and variance accumulated in f64 (the reference the kernels
/// are held to).
pub(crate) fn layer_norm_forward(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f32,
) -> NormForward {
    let d = gamma.len();
    let rows = x.len() / d;
    let mut f = NormForward {
        y: vec![0.0; x.len()],
        mean: Vec::with_capacity(rows),
        rstd: Vec::with_capacity(rows),
    };
    for (xr, yr) in x.chunks_exact(d).zip(f.y.chunks_exact_mut(d)) {
        let mean = xr.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
        let var = xr.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (var + epsilon as f64).sqrt();
        for (c, (y, &v)) in yr.iter_mut().zip(xr).enumerate() {
            *y = ((v as f64 - mean) * rstd) as f32 * gamma[c] + beta[c];
        }
        f.mean.push(mean as f32);
        f.rstd.push(rstd as f32);
    }
    f
}

/// The layer norm's gradients from the forward's mean and `rstd` (module
/// docs), accumulated in f64.
pub(crate) fn layer_norm_backward(
    x: &[f32],
    gamma: &[f32],
    mean: &[f32],
    rstd: &[f32],
    dy: &[f32],
) -> NormGradients {
    let d = gamma.len();
    let mut g = NormGradients {
        dx: vec![0.0; x.len()],
        dgamma: vec![0.0; d],
        dbeta: vec![0.0; d],
    };
    let (mut dgamma, mut dbeta) = (vec![0.0f64; d], vec![0.0f64; d]);
    let rows = x.chunks_exact(d).zip(dy.chunks_exact(d));
    for (r, ((xr, dyr), dxr)) in rows.zip(g.dx.chunks_exact_mut(d)).enumerate() {
        let (m, s) = (mean[r] as f64, rstd[r] as f64);
        let xhat = |c: usize| (xr[c] as f64 - m) * s;
        let (mut sum_g, mut sum_gx) = (0.0f64, 0.0f64);
        for c in 0..d {
            let gy = dyr[c] as f64 * gamma[c] as f64;
            sum_g += gy;
            sum_gx += gy * xhat(c);
            dgamma[c] += dyr[c] as f64 * xhat(c);
            dbeta[c] += dyr[c] as f64;
        }
        let (mean_g, mean_gx) = (sum_g / d as f64, sum_gx / d as f64);
        for c in 0..d {
            let gy = dyr[c] as f64 * gamma[c] as f64;
            dxr[c] = (s * (gy - mean_g - xhat(c) * mean_gx)) as f32;
        }
    }
    g.dgamma = dgamma.into_iter().map(|v| v as f32).collect();
    g.dbeta = dbeta.into_iter().map(|v| v as f32).collect();
    g
}

fn sigmoid(a: f32) -> f32 {
    1.0 / (1.0 + (-a).exp())
}

/// `silu(gate) * up` of each row `[gate | up]` of `both` (rows of `2 f`).
pub(crate) fn swiglu_forward(both: &[f32], f: usize) -> Vec<f32> {
    both.chunks_exact(2 * f)
        .flat_map(|row| {
            let (gate, up) = row.split_at(f);
            gate.iter().zip(up).map(|(&a, &u)| a * sigmoid(a) * u)
        })
        .collect()
}

/// `d_both` (rows of `2 f`: `d_gate | d_up`) from `both` and `d_out`
/// (rows of `f`).
pub(crate) fn swiglu_backward(both: &[f32], d_out: &[f32], f: usize) -> Vec<f32> {
    let mut d_both = vec![0.0; both.len()];
    let rows = both.chunks_exact(2 * f).zip(d_out.chunks_exact(f));
    for ((row, g), d) in rows.zip(d_both.chunks_exact_mut(2 * f)) {
        let (gate, up) = row.split_at(f);
        let (d_gate, d_up) = d.split_at_mut(f);
        for c in 0..f {
            let (a, s) = (gate[c], sigmoid(gate[c]));
            d_gate[c] = g[c] * up[c] * s * (1.0 + a * (1.0 - s));
            d_up[c] = g[c] * a * s;
        }
    }
    d_both
}

/// [`FusedLayers`]' passes computed by the functions above on host copies
/// of the tensors, for any backend: the CPU's stand-in for the kernels in
/// tests and in the operation counter ([`super::op_count`]).
pub(crate) mod on_host {
    use super::*;
    use burn::tensor::TensorData;

    /// A tensor's shape and values (f32).
    pub(crate) fn read<B: Backend, const D: usize>(t: FloatTensor<B>) -> (Vec<usize>, Vec<f32>) {
        let t = tensor::<B, D>(t);
        let dims = t.dims().to_vec();
        (
            dims,
            t.into_data().convert::<f32>().to_vec::<f32>().unwrap(),
        )
    }

    /// `values` of shape `dims` on `like`'s device.
    pub(crate) fn write<B: Backend>(
        values: Vec<f32>,
        dims: &[usize],
        like: &B::Device,
    ) -> FloatTensor<B> {
        let data = TensorData::new(values, dims.to_vec());
        match dims.len() {
            1 => primitive(Tensor::<B, 1>::from_data(data, like)),
            2 => primitive(Tensor::<B, 2>::from_data(data, like)),
            3 => primitive(Tensor::<B, 3>::from_data(data, like)),
            _ => primitive(Tensor::<B, 4>::from_data(data, like)),
        }
    }

    fn device_of<B: Backend, const D: usize>(t: &FloatTensor<B>) -> B::Device {
        tensor::<B, D>(t.clone()).device()
    }

    pub(crate) fn layer_norm_forward<B: Backend>(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f32,
    ) -> [FloatTensor<B>; 3] {
        let at = device_of::<B, 3>(&x);
        let ((dims, x), (_, gamma), (_, beta)) =
            (read::<B, 3>(x), read::<B, 1>(gamma), read::<B, 1>(beta));
        let f = super::layer_norm_forward(&x, &gamma, &beta, epsilon);
        [
            write::<B>(f.y, &dims, &at),
            write::<B>(f.mean, &dims[..2], &at),
            write::<B>(f.rstd, &dims[..2], &at),
        ]
    }

    pub(crate) fn layer_norm_backward<B: Backend>(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        mean: FloatTensor<B>,
        rstd: FloatTensor<B>,
        dy: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3] {
        let at = device_of::<B, 3>(&x);
        let ((dims, x), (_, gamma)) = (read::<B, 3>(x), read::<B, 1>(gamma));
        let ((_, mean), (_, rstd), (_, dy)) =
            (read::<B, 2>(mean), read::<B, 2>(rstd), read::<B, 3>(dy));
        let g = super::layer_norm_backward(&x, &gamma, &mean, &rstd, &dy);
        let w = [gamma.len()];
        [
            write::<B>(g.dx, &dims, &at),
            write::<B>(g.dgamma, &w, &at),
            write::<B>(g.dbeta, &w, &at),
        ]
    }

    pub(crate) fn swiglu_forward<B: Backend>(both: FloatTensor<B>) -> FloatTensor<B> {
        let at = device_of::<B, 3>(&both);
        let (mut dims, both) = read::<B, 3>(both);
        dims[2] /= 2;
        write::<B>(super::swiglu_forward(&both, dims[2]), &dims, &at)
    }

    pub(crate) fn swiglu_backward<B: Backend>(
        both: FloatTensor<B>,
        d_out: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let at = device_of::<B, 3>(&both);
        let ((dims, both), (_, d_out)) = (read::<B, 3>(both), read::<B, 3>(d_out));
        write::<B>(
            super::swiglu_backward(&both, &d_out, dims[2] / 2),
            &dims,
            &at,
        )
    }
}

#[cfg(test)]
mod tests {
    use burn::{
        backend::{Autodiff, Flex},
        nn::LayerNormConfig,
        tensor::{TensorData, activation::silu},
    };

    use super::*;

    type A = Autodiff<Flex>;

    /// The CPU's fused layers: the functions above on host copies.
    impl FusedLayers for Flex {
        fn layer_norm_forward(
            x: FloatTensor<Self>,
            gamma: FloatTensor<Self>,
            beta: FloatTensor<Self>,
            epsilon: f32,
        ) -> [FloatTensor<Self>; 3] {
            on_host::layer_norm_forward::<Self>(x, gamma, beta, epsilon)
        }

        fn layer_norm_backward(
            x: FloatTensor<Self>,
            gamma: FloatTensor<Self>,
            mean: FloatTensor<Self>,
            rstd: FloatTensor<Self>,
            dy: FloatTensor<Self>,
        ) -> [FloatTensor<Self>; 3] {
            on_host::layer_norm_backward::<Self>(x, gamma, mean, rstd, dy)
        }

        fn swiglu_forward(both: FloatTensor<Self>) -> FloatTensor<Self> {
            on_host::swiglu_forward::<Self>(both)
        }

        fn swiglu_backward(both: FloatTensor<Self>, d_out: FloatTensor<Self>) -> FloatTensor<Self> {
            on_host::swiglu_backward::<Self>(both, d_out)
        }
    }

    /// Reproducible values in about [-2, 2] (a 64-bit LCG).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    fn worst(ours: &[f32], theirs: &[f32]) -> f32 {
        assert_eq!(ours.len(), theirs.len());
        let top = theirs.iter().fold(0.0f32, |a, x| a.max(x.abs())).max(1e-30);
        ours.iter()
            .zip(theirs)
            .fold(0.0f32, |a, (x, y)| a.max((x - y).abs()))
            / top
    }

    fn data<const D: usize>(t: Tensor<A, D>) -> Vec<f32> {
        t.into_data().to_vec::<f32>().unwrap()
    }

    fn new<const D: usize>(v: &[f32], dims: [usize; D]) -> Tensor<A, D> {
        Tensor::from_data(TensorData::new(v.to_vec(), dims), &Default::default())
    }

    /// The fused layer norm's output and its three gradients equal burn's
    /// `LayerNorm` under autodiff (op by op) to 1e-5 relative, on the 9M
    /// width (256), the 136M/270M width (1,024) and an odd one (7), with
    /// non-trivial scale and offset and rows far from zero mean; an
    /// untracked input gets no gradient; inference gives the same output.
    #[test]
    fn the_fused_layer_norm_and_its_backward_equal_burns() {
        for (b, t, d) in [(2, 79, 256), (1, 5, 1024), (3, 4, 7)] {
            let x: Vec<f32> = values(b * t * d, 1)
                .iter()
                .enumerate()
                .map(|(i, v)| v * 3.0 + (i / d) as f32 * 0.5)
                .collect();
            let (gamma, beta, g) = (
                values(d, 2)
                    .iter()
                    .map(|v| 1.0 + v / 4.0)
                    .collect::<Vec<_>>(),
                values(d, 3),
                values(b * t * d, 4),
            );
            let mut module = LayerNormConfig::new(d).init::<A>(&Default::default());
            module.gamma = module.gamma.map(|_| new(&gamma, [d]).require_grad());
            module.beta = module
                .beta
                .map(|p| p.map(|_| new(&beta, [d]).require_grad()));
            let tx = new(&x, [b, t, d]).require_grad();
            let theirs = module.forward(tx.clone());
            let ours = fused_layer_norm::<Flex, _>(
                tx.clone(),
                module.gamma.val(),
                module.beta.as_ref().unwrap().val(),
            );
            let e = worst(&data(ours.clone()), &data(theirs.clone()));
            assert!(e < 1e-5, "{d}: output {e:e}");
            let mut g_ours = (ours * new(&g, [b, t, d])).sum().backward();
            let mut g_theirs = (theirs * new(&g, [b, t, d])).sum().backward();
            let grad =
                |t: &Tensor<A, 3>, g| data(Tensor::<A, 3>::from_inner(t.grad_remove(g).unwrap()));
            let e = worst(&grad(&tx, &mut g_ours), &grad(&tx, &mut g_theirs));
            assert!(e < 1e-4, "{d}: dx {e:e}");
            for (what, p) in [
                ("dgamma", module.gamma.val()),
                ("dbeta", module.beta.as_ref().unwrap().val()),
            ] {
                let a = data(Tensor::<A, 1>::from_inner(
                    p.grad_remove(&mut g_ours).unwrap(),
                ));
                let z = data(Tensor::<A, 1>::from_inner(
                    p.grad_remove(&mut g_theirs).unwrap(),
                ));
                let e = worst(&a, &z);
                assert!(e < 1e-4, "{d}: {what} {e:e}");
            }
            // Untracked parameters get no gradient; inference, the same output.
            let tx = new(&x, [b, t, d]).require_grad();
            let (fixed_g, fixed_b) = (new(&gamma, [d]), new(&beta, [d]));
            let mut grads = fused_layer_norm::<Flex, _>(tx.clone(), fixed_g.clone(), fixed_b)
                .sum()
                .backward();
            assert!(tx.grad_remove(&mut grads).is_some());
            assert!(fixed_g.grad_remove(&mut grads).is_none());
            let plain = fused_layer_norm_inference::<Flex>(
                new(&x, [b, t, d]).inner(),
                new(&gamma, [d]).inner(),
                new(&beta, [d]).inner(),
            );
            let reference = layer_norm_forward(&x, &gamma, &beta, LAYER_NORM_EPS);
            let e = worst(&plain.into_data().to_vec::<f32>().unwrap(), &reference.y);
            assert!(e < 1e-6, "{d}: inference {e:e}");
        }
    }

    /// The fused SwiGLU and its backward equal burn's slices, `silu` and
    /// product under autodiff, on the 9M width (f = 1,024) and an odd one.
    #[test]
    fn the_fused_swiglu_and_its_backward_equal_burns() {
        for (b, t, f) in [(2, 79, 1024), (3, 2, 7)] {
            let both = values(b * t * 2 * f, 5);
            let g = values(b * t * f, 6);
            let tb = new(&both, [b, t, 2 * f]).require_grad();
            let theirs = silu(tb.clone().narrow(2, 0, f)) * tb.clone().narrow(2, f, f);
            let ours = fused_swiglu::<Flex, _>(tb.clone());
            let e = worst(&data(ours.clone()), &data(theirs.clone()));
            assert!(e < 1e-6, "{f}: output {e:e}");
            let mut g_ours = (ours * new(&g, [b, t, f])).sum().backward();
            let mut g_theirs = (theirs * new(&g, [b, t, f])).sum().backward();
            let a = data(Tensor::<A, 3>::from_inner(
                tb.grad_remove(&mut g_ours).unwrap(),
            ));
            let z = data(Tensor::<A, 3>::from_inner(
                tb.grad_remove(&mut g_theirs).unwrap(),
            ));
            let e = worst(&a, &z);
            assert!(e < 1e-5, "{f}: d_both {e:e}");
            let plain = fused_swiglu_inference::<Flex>(new(&both, [b, t, 2 * f]).inner());
            let e = worst(
                &plain.into_data().to_vec::<f32>().unwrap(),
                &swiglu_forward(&both, f),
            );
            assert_eq!(e, 0.0, "{f}: inference");
        }
    }

    /// The backward's formulas against central differences of the forward
    /// (f64 accumulation keeps them exact enough for 1e-2 steps).
    #[test]
    fn the_gradients_are_the_forwards_derivatives() {
        let (rows, d) = (3, 5);
        let x = values(rows * d, 7);
        let (gamma, beta, dy) = (values(d, 8), values(d, 9), values(rows * d, 10));
        let loss = |x: &[f32], gamma: &[f32], beta: &[f32]| -> f64 {
            let f = layer_norm_forward(x, gamma, beta, LAYER_NORM_EPS);
            f.y.iter()
                .zip(&dy)
                .map(|(&y, &g)| y as f64 * g as f64)
                .sum()
        };
        let f = layer_norm_forward(&x, &gamma, &beta, LAYER_NORM_EPS);
        let g = layer_norm_backward(&x, &gamma, &f.mean, &f.rstd, &dy);
        let h = 1e-2f32;
        let numeric = |v: &[f32], i: usize, at: &dyn Fn(&[f32]) -> f64| {
            let (mut up, mut down) = (v.to_vec(), v.to_vec());
            up[i] += h;
            down[i] -= h;
            ((at(&up) - at(&down)) / (2.0 * h as f64)) as f32
        };
        for i in 0..x.len() {
            let n = numeric(&x, i, &|v| loss(v, &gamma, &beta));
            assert!((n - g.dx[i]).abs() < 2e-3, "dx[{i}] {n} {}", g.dx[i]);
        }
        for i in 0..d {
            let n = numeric(&gamma, i, &|v| loss(&x, v, &beta));
            assert!((n - g.dgamma[i]).abs() < 2e-3, "dgamma[{i}]");
            let n = numeric(&beta, i, &|v| loss(&x, &gamma, v));
            assert!((n - g.dbeta[i]).abs() < 2e-3, "dbeta[{i}]");
        }
        let (f, both, d_out) = (4, values(2 * 8, 11), values(2 * 4, 12));
        let d_both = swiglu_backward(&both, &d_out, f);
        let at = |v: &[f32]| -> f64 {
            swiglu_forward(v, f)
                .iter()
                .zip(&d_out)
                .map(|(&o, &g)| o as f64 * g as f64)
                .sum()
        };
        for (i, &analytic) in d_both.iter().enumerate() {
            let n = numeric(&both, i, &at);
            assert!((n - analytic).abs() < 2e-3, "d_both[{i}] {n} {analytic}");
        }
    }
}
