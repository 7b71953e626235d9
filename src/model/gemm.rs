//! The linear layers' products through a vendor GEMM, with their backward:
//! the backend extension ([`Gemm`]) a GPU backend implements to run the
//! products in a vendor library (cuBLASLt on CUDA, [`super::gpu::cuda`]), the
//! autodiff operation over it ([`project`]), and the mapping of burn's
//! row-major, possibly strided or transposed operands onto a column-major
//! BLAS call ([`lt_plan`]).
//!
//! The backward of `y = x · w` is `dx = dy · wᵀ` and `dw = xᵀ · dy`, each one
//! product over all `batch × sequence` rows (burn's own `linear` backward
//! takes `dw` as a batch of per-sequence products summed afterwards).
//! Everything here but the vendor call is plain Rust and tested on the CPU:
//! the autodiff operation through a test implementation of [`Gemm`] by
//! burn's matmul, the layout mapping against a model of the BLAS call.

// Used by the CUDA backend only; built and tested everywhere.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use burn::{
    backend::autodiff::{
        Autodiff, NodeId,
        checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
        grads::Gradients,
        ops::{Backward, Ops, OpsKind},
    },
    tensor::{Tensor, TensorPrimitive, backend::Backend, ops::FloatTensor},
};

/// A backend whose 2-D products can run in a vendor GEMM.
pub trait Gemm: Backend {
    /// `op(a) · op(b)` for 2-D `a`, `b`, where `op` transposes its operand
    /// when `transpose_a` / `transpose_b` say so. The result is contiguous.
    fn gemm(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transpose_a: bool,
        transpose_b: bool,
    ) -> FloatTensor<Self>;
}

/// A linear layer's product `x [.., k] · w [k, n]` on `B`'s vendor GEMM,
/// for inference (no autodiff): the rows of `x` flattened into one product.
pub(crate) fn project_inference<B: Gemm, const D: usize>(
    x: Tensor<B, D>,
    w: Tensor<B, 2>,
) -> Tensor<B, D> {
    let dims = x.dims();
    let k = dims[D - 1];
    let rows = x.shape().num_elements() / k.max(1);
    let n = w.dims()[1];
    let x = x.reshape([rows, k]).into_primitive().tensor();
    let y = B::gemm(x, w.into_primitive().tensor(), false, false);
    let mut out = dims;
    out[D - 1] = n;
    Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(y)).reshape(out)
}

/// [`project_inference`] under autodiff: the product and its backward both
/// run on `B`'s vendor GEMM.
pub(crate) fn project<B: Gemm, C: CheckpointStrategy, const D: usize>(
    x: Tensor<Autodiff<B, C>, D>,
    w: Tensor<Autodiff<B, C>, 2>,
) -> Tensor<Autodiff<B, C>, D> {
    let dims = x.dims();
    let k = dims[D - 1];
    let rows = x.shape().num_elements() / k.max(1);
    let n = w.dims()[1];
    let x = x.reshape([rows, k]).into_primitive().tensor();
    let w = w.into_primitive().tensor();

    #[derive(Debug)]
    struct GemmBackward;

    impl<B: Gemm> Backward<B, 2> for GemmBackward {
        /// The checkpointed `x` (needed for `dw`) and `w` (for `dx`).
        type State = (Option<NodeId>, Option<NodeId>);

        fn backward(
            self,
            ops: Ops<Self::State, 2>,
            grads: &mut Gradients,
            checkpointer: &mut Checkpointer,
        ) {
            let [node_x, node_w] = ops.parents;
            let grad = grads.consume::<B>(&ops.node);
            let (x_state, w_state) = ops.state;
            let x = x_state.map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
            let w = w_state.map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
            if let (Some(node), Some(w)) = (node_x, w) {
                grads.register::<B>(node.id, B::gemm(grad.clone(), w, false, true));
            }
            if let (Some(node), Some(x)) = (node_w, x) {
                grads.register::<B>(node.id, B::gemm(x, grad, true, false));
            }
        }
    }

    let (x_tracked, w_tracked) = (x.is_tracked(), w.is_tracked());
    let y = match GemmBackward
        .prepare::<C>([x.node.clone(), w.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            // x is only needed for w's gradient, and w for x's.
            let x_state = w_tracked.then(|| prep.checkpoint(&x));
            let w_state = x_tracked.then(|| prep.checkpoint(&w));
            prep.finish(
                (x_state, w_state),
                B::gemm(x.primitive, w.primitive, false, false),
            )
        }
        OpsKind::UnTracked(prep) => prep.finish(B::gemm(x.primitive, w.primitive, false, false)),
    };
    let mut out = dims;
    out[D - 1] = n;
    Tensor::<Autodiff<B, C>, 2>::from_primitive(TensorPrimitive::Float(y)).reshape(out)
}

/// burn's own product `op(a) · op(b)` of (transposed views of) 2-D `a` and
/// `b`: what a backend without a vendor GEMM, or a vendor call that failed,
/// computes instead.
pub(crate) fn burn_gemm<B: Backend>(
    a: FloatTensor<B>,
    b: FloatTensor<B>,
    transpose_a: bool,
    transpose_b: bool,
) -> FloatTensor<B> {
    let t = |x: FloatTensor<B>, yes: bool| {
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        if yes { x.transpose() } else { x }
    };
    t(a, transpose_a)
        .matmul(t(b, transpose_b))
        .into_primitive()
        .tensor()
}

/// A 2-D operand as burn holds it: `rows x cols`, element `(i, j)` at
/// `i * row_stride + j * col_stride` elements from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Operand {
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

#[cfg(test)]
impl Operand {
    /// A contiguous row-major `rows x cols` operand.
    pub(crate) fn row_major(rows: usize, cols: usize) -> Operand {
        Operand {
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }
}

/// One operand of a column-major BLAS call: the stored matrix
/// (`rows x cols`, leading dimension `ld`) and whether the call transposes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LtMatrix {
    pub transpose: bool,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

/// A row-major product `c [m, n] = op(a) · op(b)` as the column-major call
/// `D = op(A') · op(B')` computes it: `D` is `cᵀ` (`n x m`, leading
/// dimension `n`), `A'` is `b`'s memory and `B'` is `a`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LtPlan {
    /// The row-major product's sizes.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// `A'`, from `b`.
    pub first: LtMatrix,
    /// `B'`, from `a`.
    pub second: LtMatrix,
}

/// The column-major view of `v`'s memory that gives `op(v)ᵀ`, where `op`
/// transposes when `transpose`; `None` when `v`'s memory is not a matrix
/// with unit stride on one axis and non-overlapping lines on the other (a
/// broadcast, say: copy it to contiguous first).
fn lt_matrix(v: Operand, transpose: bool) -> Option<LtMatrix> {
    // A stride that does not matter (its size is 1) is taken as the
    // tightest valid one.
    let row_stride = if v.rows == 1 { v.cols } else { v.row_stride };
    let col_stride = if v.cols == 1 { v.rows } else { v.col_stride };
    if (v.cols == 1 || col_stride == 1) && row_stride >= v.cols && row_stride > 0 {
        // Column-major storage of vᵀ (cols x rows), leading dimension the
        // row stride: op(v)ᵀ is that matrix itself when op is the
        // identity, its transpose otherwise.
        Some(LtMatrix {
            transpose,
            rows: v.cols,
            cols: v.rows,
            ld: row_stride,
        })
    } else if (v.rows == 1 || row_stride == 1) && col_stride >= v.rows && col_stride > 0 {
        // Column-major storage of v itself (rows x cols).
        Some(LtMatrix {
            transpose: !transpose,
            rows: v.rows,
            cols: v.cols,
            ld: col_stride,
        })
    } else {
        None
    }
}

/// How to run `op(a) · op(b)` (row-major, `op` transposing on request) as a
/// column-major GEMM; `None` when an operand must be made contiguous first.
/// Panics when the inner sizes differ.
pub(crate) fn lt_plan(
    a: Operand,
    transpose_a: bool,
    b: Operand,
    transpose_b: bool,
) -> Option<LtPlan> {
    let (m, ka) = if transpose_a {
        (a.cols, a.rows)
    } else {
        (a.rows, a.cols)
    };
    let (kb, n) = if transpose_b {
        (b.cols, b.rows)
    } else {
        (b.rows, b.cols)
    };
    assert_eq!(ka, kb, "inner sizes of a product differ: {a:?} · {b:?}");
    Some(LtPlan {
        m,
        n,
        k: ka,
        first: lt_matrix(b, transpose_b)?,
        second: lt_matrix(a, transpose_a)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::{
        backend::Flex,
        tensor::{TensorData, Tolerance},
    };
    use proptest::prelude::*;

    /// The test implementation of the extension: burn's matmul.
    impl Gemm for Flex {
        fn gemm(
            a: FloatTensor<Self>,
            b: FloatTensor<Self>,
            transpose_a: bool,
            transpose_b: bool,
        ) -> FloatTensor<Self> {
            burn_gemm::<Self>(a, b, transpose_a, transpose_b)
        }
    }

    type A = Autodiff<Flex>;

    fn tensor<const D: usize>(dims: [usize; D], salt: usize) -> Tensor<A, D> {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| (((i * 37 + salt * 11) % 29) as f32 - 14.0) / 9.0)
            .collect();
        Tensor::from_data(TensorData::new(v, dims), &Default::default())
    }

    /// Forward and both gradients through the extension equal burn's own
    /// linear layer's (up to the order of the sums).
    #[test]
    fn the_vendor_product_and_its_backward_match_burns_linear() {
        let x = tensor([3, 5, 4], 1).require_grad();
        let w = tensor([4, 6], 2).require_grad();
        let dy = tensor([3, 5, 6], 3);
        let ours = project::<Flex, _, 3>(x.clone(), w.clone());
        let theirs = burn::tensor::module::linear(x.clone(), w.clone(), None);
        let tol = Tolerance::<f32>::absolute(1e-5);
        ours.clone()
            .into_data()
            .assert_approx_eq::<f32>(&theirs.clone().into_data(), tol);
        let mut g_ours = (ours * dy.clone()).sum().backward();
        let mut g_theirs = (theirs * dy).sum().backward();
        let (ours_x, theirs_x) = (
            x.grad_remove(&mut g_ours).expect("x's gradient"),
            x.grad_remove(&mut g_theirs).expect("x's gradient"),
        );
        ours_x
            .into_data()
            .assert_approx_eq::<f32>(&theirs_x.into_data(), tol);
        let (ours_w, theirs_w) = (
            w.grad_remove(&mut g_ours).expect("w's gradient"),
            w.grad_remove(&mut g_theirs).expect("w's gradient"),
        );
        ours_w
            .into_data()
            .assert_approx_eq::<f32>(&theirs_w.into_data(), tol);
        // Inference: the same product without a graph.
        let plain = project_inference::<Flex, 3>(x.clone().inner(), w.clone().inner());
        plain.into_data().assert_approx_eq::<f32>(
            &burn::tensor::module::linear(x.inner(), w.inner(), None).into_data(),
            tol,
        );
    }

    /// Only the tracked side's gradient is computed (and its partner kept).
    #[test]
    fn an_untracked_input_gets_no_gradient() {
        let x = tensor([2, 3], 4);
        let w = tensor([3, 2], 5).require_grad();
        let mut g = project::<Flex, _, 2>(x.clone(), w.clone()).sum().backward();
        assert!(w.grad_remove(&mut g).is_some());
        assert!(x.grad_remove(&mut g).is_none());
    }

    /// What a column-major GEMM computes from a plan: `D = op(A') · op(B')`
    /// read straight from the two buffers, returned as the row-major `c`.
    fn run_plan(plan: &LtPlan, a: &[f32], b: &[f32]) -> Vec<f32> {
        let at = |mat: &LtMatrix, buf: &[f32], i: usize, p: usize| {
            // op(M)(i, p) of the stored column-major M.
            if mat.transpose {
                buf[p + i * mat.ld]
            } else {
                buf[i + p * mat.ld]
            }
        };
        let (rows_d, cols_d) = (plan.n, plan.m);
        let mut d = vec![0.0f32; rows_d * cols_d];
        for j in 0..cols_d {
            for i in 0..rows_d {
                let mut s = 0.0;
                for p in 0..plan.k {
                    s += at(&plan.first, b, i, p) * at(&plan.second, a, p, j);
                }
                d[i + j * rows_d] = s;
            }
        }
        d
    }

    /// An operand of `rows x cols` stored row-major or column-major with
    /// `pad` unused elements per line.
    fn operand(rows: usize, cols: usize, column_major: bool, pad: usize) -> Operand {
        if column_major {
            Operand {
                rows,
                cols,
                row_stride: 1,
                col_stride: rows + pad,
            }
        } else {
            Operand {
                rows,
                cols,
                row_stride: cols + pad,
                col_stride: 1,
            }
        }
    }

    fn fill(v: Operand, salt: usize) -> Vec<f32> {
        let len = (v.rows.max(1) - 1) * v.row_stride + (v.cols.max(1) - 1) * v.col_stride + 1;
        (0..len)
            .map(|i| (((i * 13 + salt) % 19) as f32 - 9.0) / 4.0)
            .collect()
    }

    proptest! {
        /// Every layout and transposition gives the row-major product.
        #[test]
        fn plans_compute_the_row_major_product(
            m in 1usize..6, n in 1usize..6, k in 1usize..6,
            ta: bool, tb: bool, a_cm: bool, b_cm: bool,
            a_pad in 0usize..3, b_pad in 0usize..3,
        ) {
            let a = if ta { operand(k, m, a_cm, a_pad) } else { operand(m, k, a_cm, a_pad) };
            let b = if tb { operand(n, k, b_cm, b_pad) } else { operand(k, n, b_cm, b_pad) };
            let (da, db) = (fill(a, 1), fill(b, 2));
            let get = |v: Operand, buf: &[f32], i: usize, j: usize, t: bool| {
                let (i, j) = if t { (j, i) } else { (i, j) };
                buf[i * v.row_stride + j * v.col_stride]
            };
            let plan = lt_plan(a, ta, b, tb).expect("a unit stride");
            prop_assert_eq!((plan.m, plan.n, plan.k), (m, n, k));
            for mat in [plan.first, plan.second] {
                prop_assert!(mat.ld >= mat.rows);
            }
            let got = run_plan(&plan, &da, &db);
            for r in 0..m {
                for c in 0..n {
                    let want: f32 = (0..k).map(|p| get(a, &da, r, p, ta) * get(b, &db, p, c, tb)).sum();
                    let have = got[c + r * n];
                    prop_assert!((want - have).abs() < 1e-4, "({}, {}): {} vs {}", r, c, have, want);
                }
            }
        }
    }

    proptest! {
        /// Arbitrary strides (broadcasts, overlaps, gaps): an operand either
        /// has no plan (it is copied first) or its plan computes the
        /// product of the values its strides address.
        #[test]
        fn any_plan_for_any_strides_is_right(
            m in 1usize..5, n in 1usize..5, k in 1usize..5,
            ta: bool, tb: bool,
            a_strides in (0usize..7, 0usize..7), b_strides in (0usize..7, 0usize..7),
        ) {
            let mk = |rows, cols, (rs, cs)| Operand { rows, cols, row_stride: rs, col_stride: cs };
            let a = if ta { mk(k, m, a_strides) } else { mk(m, k, a_strides) };
            let b = if tb { mk(n, k, b_strides) } else { mk(k, n, b_strides) };
            let (da, db) = (fill(a, 3), fill(b, 4));
            if let Some(plan) = lt_plan(a, ta, b, tb) {
                let get = |v: Operand, buf: &[f32], i: usize, j: usize, t: bool| {
                    let (i, j) = if t { (j, i) } else { (i, j) };
                    buf[i * v.row_stride + j * v.col_stride]
                };
                let got = run_plan(&plan, &da, &db);
                for r in 0..m {
                    for c in 0..n {
                        let want: f32 = (0..k).map(|p| get(a, &da, r, p, ta) * get(b, &db, p, c, tb)).sum();
                        prop_assert!((want - got[c + r * n]).abs() < 1e-4);
                    }
                }
            }
        }
    }

    /// Strides without a unit one, and broadcasts, ask for a contiguous
    /// copy.
    #[test]
    fn operands_without_a_unit_stride_have_no_plan() {
        let broadcast = Operand {
            rows: 3,
            cols: 4,
            row_stride: 0,
            col_stride: 1,
        };
        assert!(lt_plan(broadcast, false, Operand::row_major(4, 2), false).is_none());
        let odd = Operand {
            rows: 3,
            cols: 4,
            row_stride: 8,
            col_stride: 2,
        };
        assert!(lt_plan(odd, false, Operand::row_major(4, 2), false).is_none());
        assert!(
            lt_plan(
                Operand::row_major(3, 4),
                false,
                Operand::row_major(4, 2),
                false
            )
            .is_some()
        );
    }
}
