//! Fused attention for short sequences, as a GPU kernel computes it, in
//! plain Rust: the specification a fused CUDA kernel follows, proven here
//! against burn's own attention on the CPU (`make test`).
//!
//! The predictor attends over 79 tokens without a mask (the paper's
//! transformer, searchless_chess's `transformer.py`): one query row's
//! scores against every key fit in a GPU block's shared memory, so a block
//! per (sequence, head) computes forward and backward without writing the
//! `seq x seq` score matrix to global memory, as FlashAttention-2 (Dao,
//! 2023) does for long ones:
//!
//! - **forward**: each query row walks the keys tile by tile
//!   ([`KEY_TILE`] keys) keeping a running maximum `m`, a running sum `l`
//!   of `exp(s - m)` and the running weighted sum of values (the online
//!   softmax: earlier tiles are rescaled by `exp(m_old - m_new)` when the
//!   maximum grows); it writes the output row and the row's log-sum-exp
//!   `m + ln l`, which is all the backward needs of the softmax.
//! - **backward**: the probabilities are recomputed from the saved
//!   log-sum-exp (`p = exp(s - lse)`), never stored; with
//!   `D_i = dO_i . O_i`, `dV_j = sum_i p_ij dO_i`,
//!   `dS_ij = p_ij (dO_i . V_j - D_i)`, `dQ_i = scale sum_j dS_ij K_j`,
//!   `dK_j = scale sum_i dS_ij Q_i`.
//!
//! Tensors are `[batch, heads, seq, dim]`, contiguous, as burn's
//! `module::attention` takes them; `scale = 1 / sqrt(dim)`.
//!
//! The backend side: [`FusedAttention`] is what a backend with such a
//! kernel implements (CUDA and wgpu: `super::gpu::attention`), and
//! [`fused_attention`] the autodiff operation over it, which saves the
//! inputs, the output and the log-sum-exp and calls the kernel's backward.
//! On the CPU both are tested through an implementation of
//! [`FusedAttention`] by the functions above.

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

/// A backend with a fused attention kernel (module docs).
pub trait FusedAttention: Backend {
    /// `softmax(q k^T / sqrt(dim)) v` and the rows' log-sum-exp (f32,
    /// `[batch, heads, seq]`).
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `[dq, dk, dv]` from the inputs, the forward's output and
    /// log-sum-exp, and the output's gradient.
    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_out: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3];

    /// The attention of one packed projection: `qkv` is `[batch, seq, 3
    /// width]` (q | k | v, each head's `dim = width / heads` columns
    /// consecutive), the output the context `[batch, seq, width]` (the
    /// heads side by side, as the output projection takes it) and the
    /// rows' log-sum-exp `[batch, heads, seq]`. By default, burn's views
    /// and copies around [`Self::attention_forward`] ([`packed::forward`]);
    /// a kernel that follows strides reads and writes the packed buffers
    /// in place.
    fn attention_forward_packed(
        qkv: FloatTensor<Self>,
        heads: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        packed::forward::<Self>(qkv, heads)
    }

    /// The gradient of the packed projection, `[batch, seq, 3 width]`, from
    /// the projection, the forward's context and log-sum-exp, and the
    /// context's gradient ([`packed::backward`] by default).
    fn attention_backward_packed(
        qkv: FloatTensor<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        heads: usize,
    ) -> FloatTensor<Self> {
        packed::backward::<Self>(qkv, context, lse, d_context, heads)
    }
}

/// The packed attention as burn's views and copies around the per-tensor
/// passes: what [`FusedAttention`]'s packed passes do on a backend whose
/// kernels cannot take the packed buffers in place (and the operation
/// counter's stand-in for them).
pub(crate) mod packed {
    use super::*;

    fn float<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
        Tensor::from_primitive(TensorPrimitive::Float(t))
    }

    fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
        t.into_primitive().tensor()
    }

    /// `[batch, seq, 3 width]` as its q, k and v, `[batch, heads, seq,
    /// dim]` each (views).
    pub(crate) fn split<B: Backend>(qkv: FloatTensor<B>, heads: usize) -> [Tensor<B, 4>; 3] {
        let qkv = float::<B, 3>(qkv);
        let [b, t, w3] = qkv.dims();
        let w = w3 / 3;
        [0, 1, 2].map(|part| {
            qkv.clone()
                .narrow(2, part * w, w)
                .reshape([b, t, heads, w / heads])
                .swap_dims(1, 2)
        })
    }

    /// `[batch, heads, seq, dim]` as `[batch, seq, width]`.
    pub(crate) fn merge<B: Backend>(t: Tensor<B, 4>) -> Tensor<B, 3> {
        let [b, h, s, d] = t.dims();
        t.swap_dims(1, 2).reshape([b, s, h * d])
    }

    /// `[batch, seq, width]` as `[batch, heads, seq, dim]`.
    pub(crate) fn heads_of<B: Backend>(t: Tensor<B, 3>, heads: usize) -> Tensor<B, 4> {
        let [b, s, w] = t.dims();
        t.reshape([b, s, heads, w / heads]).swap_dims(1, 2)
    }

    /// [`FusedAttention::attention_forward_packed`] by views and copies.
    pub(crate) fn forward<B: FusedAttention>(
        qkv: FloatTensor<B>,
        heads: usize,
    ) -> (FloatTensor<B>, FloatTensor<B>) {
        let [q, k, v] = split::<B>(qkv, heads).map(prim);
        let (out, lse) = B::attention_forward(q, k, v);
        (prim(merge(float::<B, 4>(out))), lse)
    }

    /// [`FusedAttention::attention_backward_packed`] by views and copies.
    pub(crate) fn backward<B: FusedAttention>(
        qkv: FloatTensor<B>,
        context: FloatTensor<B>,
        lse: FloatTensor<B>,
        d_context: FloatTensor<B>,
        heads: usize,
    ) -> FloatTensor<B> {
        let [q, k, v] = split::<B>(qkv, heads).map(prim);
        let out = prim(heads_of(float::<B, 3>(context), heads));
        let d_out = prim(heads_of(float::<B, 3>(d_context), heads));
        let grads = B::attention_backward(q, k, v, out, lse, d_out);
        prim(Tensor::cat(
            grads.map(|g| merge(float::<B, 4>(g))).to_vec(),
            2,
        ))
    }
}

/// The fused attention without autodiff (inference).
pub(crate) fn fused_attention_inference<B: FusedAttention>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
) -> Tensor<B, 4> {
    let (out, _) = B::attention_forward(
        q.into_primitive().tensor(),
        k.into_primitive().tensor(),
        v.into_primitive().tensor(),
    );
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

/// The fused attention under autodiff: one operation whose backward is the
/// kernel's, from the saved inputs, output and log-sum-exp.
pub(crate) fn fused_attention<B: FusedAttention, C: CheckpointStrategy>(
    q: Tensor<Autodiff<B, C>, 4>,
    k: Tensor<Autodiff<B, C>, 4>,
    v: Tensor<Autodiff<B, C>, 4>,
) -> Tensor<Autodiff<B, C>, 4> {
    #[derive(Debug)]
    struct AttentionBackward;

    /// What the backward needs: q, k, v, the output and its log-sum-exp.
    type Saved<B> = [FloatTensor<B>; 5];

    impl<B: FusedAttention> Backward<B, 3> for AttentionBackward {
        type State = Saved<B>;

        fn backward(
            self,
            ops: Ops<Self::State, 3>,
            grads: &mut AutodiffGradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let [q, k, v, out, lse] = ops.state;
            // The kernel reads every tensor in the inputs' format.
            let d_out = Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(
                grads.consume::<B>(&ops.node),
            ))
            .cast(q.dtype())
            .into_primitive()
            .tensor();
            let all = B::attention_backward(q, k, v, out, lse, d_out);
            for (parent, g) in ops.parents.into_iter().zip(all) {
                if let Some(node) = parent {
                    grads.register::<B>(node.id, g);
                }
            }
        }
    }

    let (q, k, v) = (
        q.into_primitive().tensor(),
        k.into_primitive().tensor(),
        v.into_primitive().tensor(),
    );
    let out = match AttentionBackward
        .prepare::<C>([q.node.clone(), k.node.clone(), v.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (out, lse) = B::attention_forward(
                q.primitive.clone(),
                k.primitive.clone(),
                v.primitive.clone(),
            );
            prep.finish(
                [q.primitive, k.primitive, v.primitive, out.clone(), lse],
                out,
            )
        }
        OpsKind::UnTracked(prep) => {
            prep.finish(B::attention_forward(q.primitive, k.primitive, v.primitive).0)
        }
    };
    Tensor::from_primitive(TensorPrimitive::Float(out))
}

/// The packed attention without autodiff (inference): `qkv` `[batch, seq,
/// 3 width]` to the context `[batch, seq, width]`.
pub(crate) fn fused_attention_packed_inference<B: FusedAttention>(
    qkv: Tensor<B, 3>,
    heads: usize,
) -> Tensor<B, 3> {
    let (context, _) = B::attention_forward_packed(qkv.into_primitive().tensor(), heads);
    Tensor::from_primitive(TensorPrimitive::Float(context))
}

/// The packed attention under autodiff: one operation from the projection
/// `qkv` (`[batch, seq, 3 width]`, q | k | v) to the context `[batch, seq,
/// width]`, whose backward writes the projection's whole gradient, so that
/// no split, transposition, zero-fill or slice assignment of q, k and v
/// enters the graph.
pub(crate) fn fused_attention_packed<B: FusedAttention, C: CheckpointStrategy>(
    qkv: Tensor<Autodiff<B, C>, 3>,
    heads: usize,
) -> Tensor<Autodiff<B, C>, 3> {
    #[derive(Debug)]
    struct PackedBackward {
        heads: usize,
    }

    /// What the backward needs: the projection, the context and its
    /// log-sum-exp.
    type Saved<B> = [FloatTensor<B>; 3];

    impl<B: FusedAttention> Backward<B, 1> for PackedBackward {
        type State = Saved<B>;

        fn backward(
            self,
            ops: Ops<Self::State, 1>,
            grads: &mut AutodiffGradients,
            _checkpointer: &mut Checkpointer,
        ) {
            let [qkv, context, lse] = ops.state;
            // The kernel reads every tensor in the projection's format.
            let d_context = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(
                grads.consume::<B>(&ops.node),
            ))
            .cast(qkv.dtype())
            .into_primitive()
            .tensor();
            let [parent] = ops.parents;
            if let Some(node) = parent {
                let g = B::attention_backward_packed(qkv, context, lse, d_context, self.heads);
                grads.register::<B>(node.id, g);
            }
        }
    }

    let qkv = qkv.into_primitive().tensor();
    let context = match (PackedBackward { heads })
        .prepare::<C>([qkv.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (context, lse) = B::attention_forward_packed(qkv.primitive.clone(), heads);
            prep.finish([qkv.primitive, context.clone(), lse], context)
        }
        OpsKind::UnTracked(prep) => {
            prep.finish(B::attention_forward_packed(qkv.primitive, heads).0)
        }
    };
    Tensor::from_primitive(TensorPrimitive::Float(context))
}

/// Keys per tile of the online softmax (a kernel's inner loop step).
pub(crate) const KEY_TILE: usize = 16;

/// The shape of attention inputs `[batch, heads, seq, dim]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Heads {
    pub batch: usize,
    pub heads: usize,
    pub seq: usize,
    pub dim: usize,
}

impl Heads {
    /// Values in one tensor of this shape.
    pub(crate) fn len(self) -> usize {
        self.batch * self.heads * self.seq * self.dim
    }

    /// The softmax's temperature, `1 / sqrt(dim)`.
    pub(crate) fn scale(self) -> f32 {
        1.0 / (self.dim as f32).sqrt()
    }

    /// The `(sequence, head)` slices of a tensor, `seq x dim` each.
    fn slices(self) -> impl Iterator<Item = std::ops::Range<usize>> {
        let per = self.seq * self.dim;
        (0..self.batch * self.heads).map(move |i| i * per..(i + 1) * per)
    }
}

/// The forward pass's outputs: the attention output (`[batch, heads, seq,
/// dim]`) and each query row's log-sum-exp of its scaled scores
/// (`[batch, heads, seq]`), saved for the backward.
pub(crate) struct Forward {
    pub out: Vec<f32>,
    pub lse: Vec<f32>,
}

/// The gradients of the three inputs.
pub(crate) struct Gradients {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `softmax(q k^T * scale) v` by the online softmax over key tiles (module
/// docs), with the rows' log-sum-exp.
pub(crate) fn forward(q: &[f32], k: &[f32], v: &[f32], shape: Heads) -> Forward {
    assert!(q.len() == shape.len() && k.len() == shape.len() && v.len() == shape.len());
    let (t, d, scale) = (shape.seq, shape.dim, shape.scale());
    let mut out = vec![0.0; shape.len()];
    let mut lse = vec![0.0; shape.batch * shape.heads * t];
    let mut scores = [0.0f32; KEY_TILE];
    let mut acc = vec![0.0f32; d];
    for (head, range) in shape.slices().enumerate() {
        let (q, k, v) = (&q[range.clone()], &k[range.clone()], &v[range.clone()]);
        let out = &mut out[range];
        for i in 0..t {
            let qi = &q[i * d..(i + 1) * d];
            let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
            acc.fill(0.0);
            for start in (0..t).step_by(KEY_TILE) {
                let keys = start..(start + KEY_TILE).min(t);
                let tile = &mut scores[..keys.len()];
                for (s, j) in tile.iter_mut().zip(keys.clone()) {
                    *s = scale * dot(qi, &k[j * d..(j + 1) * d]);
                }
                let m_new = tile.iter().copied().fold(m, f32::max);
                // The earlier tiles' terms, rescaled to the new maximum.
                let correction = (m - m_new).exp();
                l *= correction;
                acc.iter_mut().for_each(|a| *a *= correction);
                for (&s, j) in tile.iter().zip(keys) {
                    let p = (s - m_new).exp();
                    l += p;
                    for (a, &vj) in acc.iter_mut().zip(&v[j * d..(j + 1) * d]) {
                        *a += p * vj;
                    }
                }
                m = m_new;
            }
            for (o, a) in out[i * d..(i + 1) * d].iter_mut().zip(&acc) {
                *o = a / l;
            }
            lse[head * t + i] = m + l.ln();
        }
    }
    Forward { out, lse }
}

/// The gradients of `forward`'s inputs given the output's gradient
/// `d_out`, from the saved output and log-sum-exp (module docs): the
/// probabilities are recomputed tile by tile, never stored.
pub(crate) fn backward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    saved: &Forward,
    d_out: &[f32],
    shape: Heads,
) -> Gradients {
    assert!(d_out.len() == shape.len() && saved.out.len() == shape.len());
    let (t, d, scale) = (shape.seq, shape.dim, shape.scale());
    let mut dq = vec![0.0; shape.len()];
    let mut dk = vec![0.0; shape.len()];
    let mut dv = vec![0.0; shape.len()];
    let mut delta = vec![0.0f32; t];
    for (head, range) in shape.slices().enumerate() {
        let (q, k, v) = (&q[range.clone()], &k[range.clone()], &v[range.clone()]);
        let (o, d_o) = (&saved.out[range.clone()], &d_out[range.clone()]);
        let lse = &saved.lse[head * t..(head + 1) * t];
        let (dq, dk, dv) = (
            &mut dq[range.clone()],
            &mut dk[range.clone()],
            &mut dv[range],
        );
        for (i, di) in delta.iter_mut().enumerate() {
            *di = dot(&d_o[i * d..(i + 1) * d], &o[i * d..(i + 1) * d]);
        }
        // A key tile at a time (a kernel keeps its dK, dV in registers).
        for start in (0..t).step_by(KEY_TILE) {
            for j in start..(start + KEY_TILE).min(t) {
                let (kj, vj) = (&k[j * d..(j + 1) * d], &v[j * d..(j + 1) * d]);
                for i in 0..t {
                    let (qi, doi) = (&q[i * d..(i + 1) * d], &d_o[i * d..(i + 1) * d]);
                    let p = (scale * dot(qi, kj) - lse[i]).exp();
                    let ds = p * (dot(doi, vj) - delta[i]);
                    for c in 0..d {
                        dv[j * d + c] += p * doi[c];
                        dk[j * d + c] += scale * ds * qi[c];
                        dq[i * d + c] += scale * ds * kj[c];
                    }
                }
            }
        }
    }
    Gradients { dq, dk, dv }
}

/// [`FusedAttention`]'s passes computed by [`forward`] and [`backward`] on
/// host copies of the tensors, for any backend: the CPU's stand-in for the
/// kernels in tests and in the operation counter ([`super::op_count`]).
pub(crate) mod on_host {
    use super::*;
    use crate::model::layers::on_host::{read, write};

    fn heads(dims: &[usize]) -> Heads {
        Heads {
            batch: dims[0],
            heads: dims[1],
            seq: dims[2],
            dim: dims[3],
        }
    }

    pub(crate) fn forward<B: Backend>(
        q: FloatTensor<B>,
        k: FloatTensor<B>,
        v: FloatTensor<B>,
    ) -> (FloatTensor<B>, FloatTensor<B>) {
        let at = Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(q.clone())).device();
        let ((dims, q), (_, k), (_, v)) = (read::<B, 4>(q), read::<B, 4>(k), read::<B, 4>(v));
        let f = super::forward(&q, &k, &v, heads(&dims));
        (
            write::<B>(f.out, &dims, &at),
            write::<B>(f.lse, &dims[..3], &at),
        )
    }

    pub(crate) fn backward<B: Backend>(
        q: FloatTensor<B>,
        k: FloatTensor<B>,
        v: FloatTensor<B>,
        out: FloatTensor<B>,
        lse: FloatTensor<B>,
        d_out: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3] {
        let at = Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(q.clone())).device();
        let ((dims, q), (_, k), (_, v)) = (read::<B, 4>(q), read::<B, 4>(k), read::<B, 4>(v));
        let ((_, out), (_, lse), (_, d_out)) =
            (read::<B, 4>(out), read::<B, 3>(lse), read::<B, 4>(d_out));
        let g = super::backward(&q, &k, &v, &Forward { out, lse }, &d_out, heads(&dims));
        [g.dq, g.dk, g.dv].map(|t| write::<B>(t, &dims, &at))
    }
}

#[cfg(test)]
mod tests {
    use burn::{
        backend::{Autodiff, Flex},
        tensor::{Tensor, TensorData, module::attention, ops::AttentionModuleOptions},
    };

    use super::*;

    type A = Autodiff<Flex>;

    /// The CPU's fused attention: the functions above on host copies.
    impl FusedAttention for Flex {
        fn attention_forward(
            q: FloatTensor<Self>,
            k: FloatTensor<Self>,
            v: FloatTensor<Self>,
        ) -> (FloatTensor<Self>, FloatTensor<Self>) {
            on_host::forward::<Self>(q, k, v)
        }

        fn attention_backward(
            q: FloatTensor<Self>,
            k: FloatTensor<Self>,
            v: FloatTensor<Self>,
            out: FloatTensor<Self>,
            lse: FloatTensor<Self>,
            d_out: FloatTensor<Self>,
        ) -> [FloatTensor<Self>; 3] {
            on_host::backward::<Self>(q, k, v, out, lse, d_out)
        }
    }

    /// The autodiff operation over a [`FusedAttention`] backend gives
    /// burn's attention: the output and all three gradients (the CPU's
    /// implementation above standing in for the kernel), and an untracked
    /// input gets no gradient.
    #[test]
    fn the_autodiff_operation_routes_the_kernels_gradients() {
        let s = Heads {
            batch: 3,
            heads: 2,
            seq: 21,
            dim: 8,
        };
        let (q, k, v, g) = (
            values(s.len(), 31),
            values(s.len(), 32),
            values(s.len(), 33),
            values(s.len(), 34),
        );
        let (tq, tk, tv) = (
            tensor(&q, s).require_grad(),
            tensor(&k, s).require_grad(),
            tensor(&v, s).require_grad(),
        );
        let ours = fused_attention::<Flex, _>(tq.clone(), tk.clone(), tv.clone());
        let theirs = attention(
            tq.clone(),
            tk.clone(),
            tv.clone(),
            None,
            None,
            AttentionModuleOptions::default(),
        );
        let data = |t: Tensor<A, 4>| t.into_data().to_vec::<f32>().unwrap();
        assert!(worst(&data(ours.clone()), &data(theirs.clone())) < 1e-5);
        let mut g_ours = (ours * tensor(&g, s)).sum().backward();
        let mut g_theirs = (theirs * tensor(&g, s)).sum().backward();
        for (what, t) in [("dq", &tq), ("dk", &tk), ("dv", &tv)] {
            let a = data(Tensor::from_inner(
                t.grad_remove(&mut g_ours).expect("our gradient"),
            ));
            let b = data(Tensor::from_inner(
                t.grad_remove(&mut g_theirs).expect("burn's gradient"),
            ));
            let e = worst(&a, &b);
            assert!(e < 1e-4, "{what}: {e:e}");
        }
        // Only the tracked inputs get gradients.
        let fixed = tensor(&k, s);
        let tq = tensor(&q, s).require_grad();
        let mut g = fused_attention::<Flex, _>(tq.clone(), fixed.clone(), tensor(&v, s))
            .sum()
            .backward();
        assert!(tq.grad_remove(&mut g).is_some());
        assert!(fixed.grad_remove(&mut g).is_none());
        // Inference: the same forward without a graph.
        let plain = fused_attention_inference::<Flex>(
            tensor(&q, s).inner(),
            tensor(&k, s).inner(),
            tensor(&v, s).inner(),
        );
        let burn = attention(
            tensor(&q, s).inner(),
            tensor(&k, s).inner(),
            tensor(&v, s).inner(),
            None,
            None,
            AttentionModuleOptions::default(),
        );
        let e = worst(
            &plain.into_data().to_vec::<f32>().unwrap(),
            &burn.into_data().to_vec::<f32>().unwrap(),
        );
        assert!(e < 1e-5, "{e:e}");
    }

    /// The packed operation, from a `[batch, seq, 3 width]` projection to
    /// the `[batch, seq, width]` context, gives burn's attention over the
    /// projection's thirds split into heads, and the projection's whole
    /// gradient; inference gives the same context.
    #[test]
    fn the_packed_operation_is_attention_over_the_projections_thirds() {
        let (b, t, heads, dim) = (3, 21, 2, 8);
        let w = heads * dim;
        let dims = [b, t, 3 * w];
        let proj = values(b * t * 3 * w, 41);
        let g = values(b * t * w, 42);
        let tensor3 = |v: &[f32], dims: [usize; 3]| -> Tensor<A, 3> {
            Tensor::from_data(TensorData::new(v.to_vec(), dims), &Default::default())
        };
        let ours_in = tensor3(&proj, dims).require_grad();
        let theirs_in = tensor3(&proj, dims).require_grad();
        let ours = fused_attention_packed::<Flex, _>(ours_in.clone(), heads);
        let split = |part: usize| {
            theirs_in
                .clone()
                .narrow(2, part * w, w)
                .reshape([b, t, heads, dim])
                .swap_dims(1, 2)
        };
        let theirs = attention(
            split(0),
            split(1),
            split(2),
            None,
            None,
            AttentionModuleOptions::default(),
        )
        .swap_dims(1, 2)
        .reshape([b, t, w]);
        assert_eq!(ours.dims(), [b, t, w]);
        let data = |t: Tensor<A, 3>| t.into_data().to_vec::<f32>().unwrap();
        assert!(worst(&data(ours.clone()), &data(theirs.clone())) < 1e-5);
        let mut g_ours = (ours * tensor3(&g, [b, t, w])).sum().backward();
        let mut g_theirs = (theirs * tensor3(&g, [b, t, w])).sum().backward();
        let grad = |x: &Tensor<A, 3>, gs: &mut _| -> Vec<f32> {
            data(Tensor::from_inner(x.grad_remove(gs).expect("a gradient")))
        };
        let (a, c) = (grad(&ours_in, &mut g_ours), grad(&theirs_in, &mut g_theirs));
        assert_eq!(a.len(), b * t * 3 * w);
        let e = worst(&a, &c);
        assert!(e < 1e-4, "d_qkv: {e:e}");
        let plain = fused_attention_packed_inference::<Flex>(tensor3(&proj, dims).inner(), heads);
        let e = worst(
            &plain.into_data().to_vec::<f32>().unwrap(),
            &data(fused_attention_packed::<Flex, _>(
                tensor3(&proj, dims),
                heads,
            )),
        );
        assert!(e < 1e-6, "{e:e}");
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

    fn tensor(v: &[f32], s: Heads) -> Tensor<A, 4> {
        Tensor::from_data(
            TensorData::new(v.to_vec(), [s.batch, s.heads, s.seq, s.dim]),
            &Default::default(),
        )
    }

    /// The largest difference relative to the reference's largest value.
    fn worst(ours: &[f32], theirs: &[f32]) -> f32 {
        let top = theirs.iter().fold(0.0f32, |a, x| a.max(x.abs())).max(1e-30);
        ours.iter()
            .zip(theirs)
            .fold(0.0f32, |a, (x, y)| a.max((x - y).abs()))
            / top
    }

    /// The output, the log-sum-exp and all three gradients equal burn's
    /// attention (its CPU fallback: scores materialised, softmax and its
    /// backward op by op) to 1e-4 relative, on the 9M head (dim 32), the
    /// 136M/270M head (dim 128), odd batches and a sequence shorter than a
    /// tile.
    #[test]
    fn the_tiled_attention_and_its_backward_equal_burns() {
        let shapes = [
            Heads {
                batch: 3,
                heads: 8,
                seq: 79,
                dim: 32,
            },
            Heads {
                batch: 1,
                heads: 8,
                seq: 79,
                dim: 128,
            },
            Heads {
                batch: 5,
                heads: 3,
                seq: 7,
                dim: 9,
            },
            Heads {
                batch: 2,
                heads: 2,
                seq: 33,
                dim: 16,
            },
        ];
        for (n, s) in shapes.into_iter().enumerate() {
            let seed = 10 * n as u64;
            let (q, k, v, g) = (
                values(s.len(), seed + 1),
                values(s.len(), seed + 2),
                values(s.len(), seed + 3),
                values(s.len(), seed + 4),
            );
            let saved = forward(&q, &k, &v, s);
            let grads = backward(&q, &k, &v, &saved, &g, s);
            let (tq, tk, tv) = (
                tensor(&q, s).require_grad(),
                tensor(&k, s).require_grad(),
                tensor(&v, s).require_grad(),
            );
            let out = attention(
                tq.clone(),
                tk.clone(),
                tv.clone(),
                None,
                None,
                AttentionModuleOptions::default(),
            );
            let data = |t: Tensor<A, 4>| t.into_data().to_vec::<f32>().unwrap();
            let theirs = data(out.clone());
            let mut grads_theirs = (out * tensor(&g, s)).sum().backward();
            let mut grad = |t: &Tensor<A, 4>| {
                let g = t.grad_remove(&mut grads_theirs).expect("a gradient");
                g.into_data().to_vec::<f32>().unwrap()
            };
            let (gq, gk, gv) = (grad(&tq), grad(&tk), grad(&tv));
            // The log-sum-exp, from the scores computed directly.
            let scores = tensor(&q, s)
                .matmul(tensor(&k, s).swap_dims(2, 3))
                .mul_scalar(s.scale());
            let max = scores.clone().max_dim(3);
            let lse = (scores - max.clone()).exp().sum_dim(3).log() + max;
            let lse: Vec<f32> = data(lse);
            for (what, ours, theirs) in [
                ("output", &saved.out, &theirs),
                ("log-sum-exp", &saved.lse, &lse),
                ("dq", &grads.dq, &gq),
                ("dk", &grads.dk, &gk),
                ("dv", &grads.dv, &gv),
            ] {
                assert_eq!(ours.len(), theirs.len(), "{s:?} {what}");
                let e = worst(ours, theirs);
                assert!(e < 1e-4, "{s:?} {what}: {e:e} relative");
            }
        }
    }

    /// A wrong rescaling of earlier tiles (the online softmax's one subtle
    /// step) is caught: dropping it changes the output of any row whose
    /// maximum grows after the first tile.
    #[test]
    fn the_online_softmax_rescales_earlier_tiles() {
        let s = Heads {
            batch: 1,
            heads: 1,
            seq: 3 * KEY_TILE,
            dim: 4,
        };
        // Scores growing along the keys: every tile raises the maximum.
        let q = vec![1.0; s.len()];
        let k: Vec<f32> = (0..s.len()).map(|i| (i / s.dim) as f32 * 0.25).collect();
        let v = values(s.len(), 7);
        let saved = forward(&q, &k, &v, s);
        // Direct softmax of one row.
        let scores: Vec<f32> = (0..s.seq)
            .map(|j| s.scale() * 4.0 * j as f32 * 0.25)
            .collect();
        let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f32> = scores.iter().map(|x| (x - m).exp()).collect();
        let total: f32 = w.iter().sum();
        for c in 0..s.dim {
            let direct: f32 = (0..s.seq).map(|j| w[j] * v[j * s.dim + c]).sum::<f32>() / total;
            assert!(
                (saved.out[c] - direct).abs() < 1e-5,
                "{} vs {direct}",
                saved.out[c]
            );
        }
        assert!((saved.lse[0] - (m + total.ln())).abs() < 1e-5);
    }
}
