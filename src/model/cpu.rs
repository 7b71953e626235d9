//! The predictor's forward pass for inference on the CPU, fused by hand:
//! the same network as [`super::net`] (searchless_chess's `transformer.py`,
//! Ruoss et al. 2024 §2.3), in f32, computed layer by layer over plain
//! row-major buffers with one matrix product per projection (q, k and v
//! in one; the SwiGLU gate and up in one) on the `gemm` crate's kernels,
//! and the element-wise steps (LayerNorm, softmax, SiLU) in single loops.
//!
//! Two things make it faster than running the burn graph on the CPU
//! (`make bench-eval`):
//! - no tensor bookkeeping between operations: no intermediate tensors,
//!   layout copies or per-operation thread hand-offs; each thread runs
//!   the whole network on its share of the sequences with its own buffers,
//!   reused from call to call;
//! - the last block computes only what the output reads: the prediction is
//!   read at the last position, so the last block's keys and values are
//!   computed for every position but its query, attention output, MLP and
//!   the final LayerNorm only for the last one (the same numbers, 13/16 of
//!   a block's work saved).
//!
//! Evaluation and the UCI engine use it for `--device cpu`; training and
//! the GPU use the burn network. A unit test holds the two within 1e-4 on
//! the log-probabilities, and the published-model tests hold this path to
//! searchless_chess's own JAX predictor and engines.

use std::sync::Mutex;

use gemm::Parallelism;

use super::shape::ModelShape;

/// haiku's and burn's LayerNorm epsilon.
const LAYER_NORM_EPS: f32 = 1e-5;

/// Sequences per pass of one thread: bounds its buffers (18 d floats per
/// position, 79 positions: 23 MB a thread for the 9M model, 93 MB for
/// d = 1024, whatever the number of legal moves) while keeping the
/// products large (`PASS_ROWS * 79` rows).
const PASS_ROWS: usize = 16;

/// A forward pass was asked for something it cannot compute.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InferenceError {
    #[error("{len} tokens are not whole sequences of {seq_len} tokens")]
    Ragged { len: usize, seq_len: usize },
    #[error("expected sequences of {expected} tokens (the model's), got {got}")]
    SequenceLength { expected: usize, got: usize },
    #[error("token {token} at position {index} is outside the model's vocabulary of {vocab}")]
    Token {
        token: i32,
        index: usize,
        vocab: usize,
    },
}

/// LayerNorm parameters.
pub(crate) struct Norm {
    pub(crate) scale: Vec<f32>,
    pub(crate) offset: Vec<f32>,
}

/// One transformer block's parameters, with the projections that read the
/// same input side by side.
pub(crate) struct CpuBlock {
    attn_norm: Norm,
    /// `[d, 3d]`: q | k | v.
    qkv: Vec<f32>,
    /// `[d, d]`.
    out: Vec<f32>,
    mlp_norm: Norm,
    /// `[d, 2f]`: gate | up.
    gate_up: Vec<f32>,
    /// `[f, d]`.
    down: Vec<f32>,
}

/// The weights of one block as the burn network holds them: linear
/// weights `[in, out]` row-major.
pub(crate) struct BlockWeights {
    pub(crate) attn_norm: Norm,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) out: Vec<f32>,
    pub(crate) mlp_norm: Norm,
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
    pub(crate) down: Vec<f32>,
}

/// Row-major matrices `[rows, cols_i]` side by side: `[rows, sum cols_i]`.
fn side_by_side(rows: usize, parts: &[(&[f32], usize)]) -> Vec<f32> {
    let width: usize = parts.iter().map(|p| p.1).sum();
    let mut out = Vec::with_capacity(rows * width);
    for r in 0..rows {
        for (m, cols) in parts {
            out.extend_from_slice(&m[r * cols..(r + 1) * cols]);
        }
    }
    out
}

impl CpuBlock {
    pub(crate) fn new(w: BlockWeights, d: usize, ffn: usize) -> CpuBlock {
        CpuBlock {
            attn_norm: w.attn_norm,
            qkv: side_by_side(d, &[(&w.q, d), (&w.k, d), (&w.v, d)]),
            out: w.out,
            mlp_norm: w.mlp_norm,
            gate_up: side_by_side(d, &[(&w.gate, ffn), (&w.up, ffn)]),
            down: w.down,
        }
    }
}

/// A predictor ready for inference on the CPU.
pub(crate) struct CpuPredictor {
    shape: ModelShape,
    /// `[vocab, d]`.
    token_embedding: Vec<f32>,
    /// `[seq_len, d]`.
    positions: Vec<f32>,
    blocks: Vec<CpuBlock>,
    final_norm: Norm,
    /// `[d, outputs]` and `[outputs]`.
    head_w: Vec<f32>,
    head_b: Vec<f32>,
    /// One set of buffers per thread, kept between calls.
    workspaces: Vec<Mutex<Workspace>>,
}

/// The activations of one thread's share of the sequences.
#[derive(Default)]
struct Workspace {
    /// Residual stream `[n, d]`.
    x: Vec<f32>,
    /// Normalised input of a sub-layer `[n, d]`.
    h: Vec<f32>,
    /// `[n, 3d]`.
    qkv: Vec<f32>,
    /// One sequence's and head's attention weights `[seq_len, seq_len]`.
    scores: Vec<f32>,
    /// Attention output `[n, d]`.
    ctx: Vec<f32>,
    /// `[n, 2f]`.
    gate_up: Vec<f32>,
    /// `[n, f]`.
    act: Vec<f32>,
}

fn sized(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

impl CpuPredictor {
    pub(crate) fn new(
        shape: ModelShape,
        token_embedding: Vec<f32>,
        positions: Vec<f32>,
        blocks: Vec<CpuBlock>,
        final_norm: Norm,
        head_w: Vec<f32>,
        head_b: Vec<f32>,
    ) -> CpuPredictor {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        CpuPredictor {
            shape,
            token_embedding,
            positions,
            blocks,
            final_norm,
            head_w,
            head_b,
            workspaces: (0..threads).map(|_| Mutex::default()).collect(),
        }
    }

    /// Log-probabilities `rows x outputs` (row-major) of the last position
    /// of `tokens`, `rows` whole records of `seq_len` tokens each (the
    /// target slot included: the shift right happens here, as in
    /// [`super::net::Predictor::forward`]).
    pub(crate) fn log_probs(
        &self,
        tokens: &[i32],
        seq_len: usize,
    ) -> Result<Vec<f32>, InferenceError> {
        let t = self.shape.seq_len;
        if seq_len != t {
            return Err(InferenceError::SequenceLength {
                expected: t,
                got: seq_len,
            });
        }
        if !tokens.len().is_multiple_of(t) {
            return Err(InferenceError::Ragged {
                len: tokens.len(),
                seq_len: t,
            });
        }
        if let Some((index, &token)) = tokens
            .iter()
            .enumerate()
            .find(|(_, tok)| !(0..self.shape.vocab as i32).contains(tok))
        {
            return Err(InferenceError::Token {
                token,
                index,
                vocab: self.shape.vocab,
            });
        }
        let rows = tokens.len() / t;
        let outputs = self.shape.outputs;
        let mut out = vec![0.0f32; rows * outputs];
        if rows == 0 {
            return Ok(out);
        }
        let threads = self.workspaces.len().min(rows);
        if threads == 1 {
            // One sequence (or one core): the products themselves go wide.
            let parallelism = match self.workspaces.len() {
                1 => Parallelism::None,
                n => Parallelism::Rayon(n),
            };
            let mut ws = self.workspaces[0].lock().unwrap_or_else(|e| e.into_inner());
            self.forward_in_passes(tokens, &mut out, &mut ws, parallelism);
            return Ok(out);
        }
        let per = rows.div_ceil(threads);
        std::thread::scope(|scope| {
            for (i, (toks, dst)) in tokens
                .chunks(per * t)
                .zip(out.chunks_mut(per * outputs))
                .enumerate()
            {
                let ws = &self.workspaces[i];
                scope.spawn(move || {
                    let mut ws = ws.lock().unwrap_or_else(|e| e.into_inner());
                    self.forward_in_passes(toks, dst, &mut ws, Parallelism::None);
                });
            }
        });
        Ok(out)
    }

    /// [`Self::forward`] over at most [`PASS_ROWS`] sequences at a time.
    fn forward_in_passes(
        &self,
        tokens: &[i32],
        out: &mut [f32],
        ws: &mut Workspace,
        par: Parallelism,
    ) {
        let (t, k) = (self.shape.seq_len, self.shape.outputs);
        for (toks, dst) in tokens
            .chunks(PASS_ROWS * t)
            .zip(out.chunks_mut(PASS_ROWS * k))
        {
            self.forward(toks, dst, ws, par);
        }
    }

    /// The network on `tokens` (whole, checked sequences) into `out`, its
    /// element-wise loops compiled for AVX2 + FMA where the CPU has them
    /// (the products choose their kernels themselves).
    fn forward(&self, tokens: &[i32], out: &mut [f32], ws: &mut Workspace, par: Parallelism) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has the features the function is compiled for.
            unsafe { self.forward_avx2(tokens, out, ws, par) };
            return;
        }
        self.forward_any(tokens, out, ws, par);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn forward_avx2(
        &self,
        tokens: &[i32],
        out: &mut [f32],
        ws: &mut Workspace,
        par: Parallelism,
    ) {
        self.forward_any(tokens, out, ws, par);
    }

    #[inline(always)]
    fn forward_any(&self, tokens: &[i32], out: &mut [f32], ws: &mut Workspace, par: Parallelism) {
        let ModelShape {
            d_model: d,
            heads,
            seq_len: t,
            outputs,
            ..
        } = self.shape;
        let ffn = self.shape.widening * d;
        let rows = tokens.len() / t;
        let n = rows * t;
        let x = sized(&mut ws.x, n * d);
        let h = sized(&mut ws.h, n * d);
        let qkv = sized(&mut ws.qkv, n * 3 * d);
        let scores = sized(&mut ws.scores, t * t);
        let ctx = sized(&mut ws.ctx, n * d);
        let gate_up = sized(&mut ws.gate_up, n * 2 * ffn);
        let act = sized(&mut ws.act, n * ffn);

        // Embedding: the input is the record shifted right by one.
        let scale = (d as f32).sqrt();
        for (row, xr) in x.chunks_exact_mut(d).enumerate() {
            let pos = row % t;
            let token = if pos == 0 {
                0
            } else {
                tokens[row - 1] as usize
            };
            let e = &self.token_embedding[token * d..(token + 1) * d];
            let p = &self.positions[pos * d..(pos + 1) * d];
            for ((xv, &ev), &pv) in xr.iter_mut().zip(e).zip(p) {
                *xv = ev * scale + pv;
            }
        }

        let dh = d / heads;
        let attn_scale = (dh as f32).sqrt().recip();
        let last = self.blocks.len() - 1;
        for (l, block) in self.blocks.iter().enumerate() {
            // The rows whose outputs are needed after this block: every
            // position, or (last block) each sequence's last one, which
            // are `m` rows `stride` rows apart from row `first`.
            let (m, stride, first) = if l == last {
                (rows, t, t - 1)
            } else {
                (n, 1, 0)
            };
            // Attention sub-layer.
            layer_norm(x, h, d, &block.attn_norm);
            if l == last {
                // k, v for every position; q for the rows that are read.
                matmul(
                    Mat::rows(&mut qkv[d..], n, 2 * d, 3 * d),
                    false,
                    Src::rows(h, n, d, d),
                    Src::rows(&block.qkv[d..], d, 2 * d, 3 * d),
                    1.0,
                    par,
                );
                matmul(
                    Mat::rows(&mut qkv[first * 3 * d..], m, d, stride * 3 * d),
                    false,
                    Src::rows(&h[first * d..], m, d, stride * d),
                    Src::rows(&block.qkv, d, d, 3 * d),
                    1.0,
                    par,
                );
            } else {
                matmul(
                    Mat::rows(qkv, n, 3 * d, 3 * d),
                    false,
                    Src::rows(h, n, d, d),
                    Src::rows(&block.qkv, d, 3 * d, 3 * d),
                    1.0,
                    par,
                );
            }
            let queries = if l == last { 1 } else { t };
            for s in 0..rows {
                let base = s * t;
                let q0 = base + t - queries;
                for hd in 0..heads {
                    let col = hd * dh;
                    let sc = &mut scores[..queries * t];
                    // scores = q k^T / sqrt(dh)
                    matmul(
                        Mat::rows(sc, queries, t, t),
                        false,
                        Src::rows(&qkv[q0 * 3 * d + col..], queries, dh, 3 * d),
                        Src::transposed(&qkv[base * 3 * d + d + col..], dh, t, 3 * d),
                        attn_scale,
                        Parallelism::None,
                    );
                    for r in sc.chunks_exact_mut(t) {
                        softmax(r);
                    }
                    // ctx = softmax(scores) v
                    matmul(
                        Mat::rows(&mut ctx[q0 * d + col..], queries, dh, d),
                        false,
                        Src::rows(sc, queries, t, t),
                        Src::rows(&qkv[base * 3 * d + 2 * d + col..], t, dh, 3 * d),
                        1.0,
                        Parallelism::None,
                    );
                }
            }
            // x += ctx W_out (the rows that are read)
            matmul(
                Mat::rows(&mut x[first * d..], m, d, stride * d),
                true,
                Src::rows(&ctx[first * d..], m, d, stride * d),
                Src::rows(&block.out, d, d, d),
                1.0,
                par,
            );
            // MLP sub-layer on those rows, normalised into `h` compactly.
            for (i, hr) in h[..m * d].chunks_exact_mut(d).enumerate() {
                let row = first + i * stride;
                layer_norm_row(&x[row * d..(row + 1) * d], hr, &block.mlp_norm);
            }
            let gu = &mut gate_up[..m * 2 * ffn];
            matmul(
                Mat::rows(gu, m, 2 * ffn, 2 * ffn),
                false,
                Src::rows(&h[..m * d], m, d, d),
                Src::rows(&block.gate_up, d, 2 * ffn, 2 * ffn),
                1.0,
                par,
            );
            let a = &mut act[..m * ffn];
            for (ar, gr) in a.chunks_exact_mut(ffn).zip(gu.chunks_exact(2 * ffn)) {
                swiglu(&gr[..ffn], &gr[ffn..], ar);
            }
            matmul(
                Mat::rows(&mut x[first * d..], m, d, stride * d),
                true,
                Src::rows(a, m, ffn, ffn),
                Src::rows(&block.down, ffn, d, d),
                1.0,
                par,
            );
        }

        // Final LayerNorm and head at each sequence's last position.
        for (s, hr) in h[..rows * d].chunks_exact_mut(d).enumerate() {
            let row = s * t + t - 1;
            layer_norm_row(&x[row * d..(row + 1) * d], hr, &self.final_norm);
        }
        for o in out.chunks_exact_mut(outputs) {
            o.copy_from_slice(&self.head_b);
        }
        matmul(
            Mat::rows(out, rows, outputs, outputs),
            true,
            Src::rows(&h[..rows * d], rows, d, d),
            Src::rows(&self.head_w, d, outputs, outputs),
            1.0,
            par,
        );
        for o in out.chunks_exact_mut(outputs) {
            log_softmax(o);
        }
    }
}

/// A destination matrix: `m x n`, rows `rs` apart, inside `data`.
struct Mat<'a> {
    data: &'a mut [f32],
    m: usize,
    n: usize,
    rs: usize,
}

impl<'a> Mat<'a> {
    fn rows(data: &'a mut [f32], m: usize, n: usize, rs: usize) -> Mat<'a> {
        assert!(
            m == 0 || (m - 1) * rs + n <= data.len(),
            "matrix out of bounds"
        );
        Mat { data, m, n, rs }
    }
}

/// A source matrix `m x n` inside `data`: element (i, j) at `i rs + j cs`.
struct Src<'a> {
    data: &'a [f32],
    m: usize,
    n: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Src<'a> {
    /// Row-major, rows `rs` apart.
    fn rows(data: &'a [f32], m: usize, n: usize, rs: usize) -> Src<'a> {
        assert!(
            m == 0 || (m - 1) * rs + n <= data.len(),
            "matrix out of bounds"
        );
        Src {
            data,
            m,
            n,
            rs,
            cs: 1,
        }
    }

    /// The transpose of a row-major `n x m` matrix whose rows are `rs`
    /// apart.
    fn transposed(data: &'a [f32], m: usize, n: usize, rs: usize) -> Src<'a> {
        assert!(
            n == 0 || (n - 1) * rs + m <= data.len(),
            "matrix out of bounds"
        );
        Src {
            data,
            m,
            n,
            rs: 1,
            cs: rs,
        }
    }
}

/// `dst = (accumulate ? dst : 0) + alpha * a b`.
fn matmul(dst: Mat<'_>, accumulate: bool, a: Src<'_>, b: Src<'_>, alpha: f32, par: Parallelism) {
    assert_eq!((dst.m, dst.n), (a.m, b.n), "product shape");
    assert_eq!(a.n, b.m, "inner dimensions");
    if dst.m == 0 || dst.n == 0 {
        return;
    }
    // SAFETY: the constructors checked that every element the strides
    // reach lies inside its slice; `dst` is borrowed mutably, so it does
    // not overlap `a` or `b`.
    unsafe {
        gemm::gemm(
            dst.m,
            dst.n,
            a.n,
            dst.data.as_mut_ptr(),
            1,
            dst.rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            par,
        );
    }
}

/// LayerNorm of every row of `x` into `h` (rows of `d`).
#[inline(always)]
fn layer_norm(x: &[f32], h: &mut [f32], d: usize, norm: &Norm) {
    for (xr, hr) in x.chunks_exact(d).zip(h.chunks_exact_mut(d)) {
        layer_norm_row(xr, hr, norm);
    }
}

/// `(x - mean) / sqrt(var + eps) * scale + offset` (biased variance).
#[inline(always)]
fn layer_norm_row(x: &[f32], h: &mut [f32], norm: &Norm) {
    let n = x.len() as f32;
    let mean = lane_sum(x, |v| v) / n;
    let var = lane_sum(x, |v| (v - mean) * (v - mean)) / n;
    let inv = (var + LAYER_NORM_EPS).sqrt().recip();
    for (((hv, &xv), &s), &o) in h.iter_mut().zip(x).zip(&norm.scale).zip(&norm.offset) {
        *hv = (xv - mean) * inv * s + o;
    }
}

/// `e^x` for f32 without a libm call, so loops over it vectorise:
/// Cephes' `expf` (range reduction by ln 2, degree-6 polynomial; error
/// within 2 ulp) with the argument clamped to [-87, 88].
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Rounds to nearest by the float format (1.5 * 2^23).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = x - k * LN2_HI - k * LN2_LO;
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((k as i32 + 127) as u32) << 23)
}

/// `sum f(x_i)` over 8 interleaved partial sums, so that it vectorises
/// (float addition is not reassociated by the compiler).
#[inline(always)]
fn lane_sum(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    let mut sum = rest.iter().map(|&v| f(v)).sum::<f32>();
    for a in acc {
        sum += a;
    }
    sum
}

/// The largest element (rows hold no NaN: the inputs are finite).
#[inline(always)]
fn lane_max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    rest.iter()
        .chain(&acc)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// Softmax of a row in place.
#[inline(always)]
fn softmax(row: &mut [f32]) {
    let max = lane_max(row);
    for v in row.iter_mut() {
        *v = exp_f32(*v - max);
    }
    let inv = lane_sum(row, |v| v).recip();
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// SwiGLU: `silu(gate) * up`.
#[inline(always)]
fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp_f32(-g)) * u;
    }
}

/// Log-softmax of a row in place.
#[inline(always)]
fn log_softmax(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let sum: f32 = row.iter().map(|&v| (v - max).exp()).sum();
    let log_z = max + sum.ln();
    for v in row.iter_mut() {
        *v -= log_z;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        let mut worst = 0.0f32;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (exp_f32(x), x.exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.0137;
        }
        assert!(worst < 4.0 * f32::EPSILON, "relative error {worst}");
        // Out-of-range arguments are clamped, never inf or NaN.
        assert_eq!(exp_f32(-1000.0), exp_f32(-87.0));
        assert!(exp_f32(1000.0).is_finite());
        assert!(exp_f32(-87.0) > 0.0);
    }

    /// The fused path computes the burn network's numbers: every policy's
    /// head, the 9M shape, one sequence and several (split over threads and,
    /// beyond `PASS_ROWS` a thread, over passes),
    /// buffers reused between calls of different sizes.
    #[test]
    fn fused_log_probs_match_the_burn_network() {
        use crate::{
            chess::RecordSet,
            model::{Predictor, shape::Preset, tokens_tensor},
        };
        use burn::{backend::Flex, tensor::backend::Backend};
        let device = Default::default();
        Flex::seed(&device, 11);
        for (preset, policy, k, batches) in [
            (
                Preset::Tiny,
                RecordSet::ActionValue,
                32,
                &[1usize, 5, 37, 2][..],
            ),
            (Preset::Tiny, RecordSet::StateValue, 128, &[3]),
            (Preset::Tiny, RecordSet::BehavioralCloning, 128, &[4, 1]),
            (Preset::M9, RecordSet::ActionValue, 128, &[3]),
        ] {
            let shape = ModelShape::preset(preset, policy, k);
            let burn = Predictor::<Flex>::new(&shape, &device);
            let fused = burn.to_cpu(&shape);
            let t = shape.seq_len;
            for &rows in batches {
                let tokens: Vec<i32> = (0..rows * t)
                    .map(|i| ((i * 7919 + rows * 31) % shape.vocab) as i32)
                    .collect();
                let want: Vec<f32> = burn
                    .forward(tokens_tensor::<Flex>(&tokens, t, &device))
                    .into_data()
                    .to_vec()
                    .unwrap();
                let got = fused.log_probs(&tokens, t).unwrap();
                assert_eq!(got.len(), want.len());
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    worst < 1e-4,
                    "{preset:?} {policy:?} {rows} rows: max |diff| {worst}"
                );
            }
        }
    }

    #[test]
    fn malformed_input_is_refused() {
        let shape = ModelShape::preset(
            crate::model::shape::Preset::Tiny,
            crate::chess::RecordSet::StateValue,
            8,
        );
        let burn =
            crate::model::net::Predictor::<burn::backend::Flex>::new(&shape, &Default::default());
        let fused = burn.to_cpu(&shape);
        let t = shape.seq_len;
        assert!(matches!(
            fused.log_probs(&vec![0; t + 1], t),
            Err(InferenceError::Ragged { .. })
        ));
        assert!(matches!(
            fused.log_probs(&vec![0; 2 * t], t + 1),
            Err(InferenceError::SequenceLength { .. })
        ));
        let mut bad = vec![0; t];
        bad[5] = 5000;
        let err = fused.log_probs(&bad, t).unwrap_err();
        assert!(
            err.to_string().contains("token 5000 at position 5"),
            "{err}"
        );
        assert!(fused.log_probs(&[], t).unwrap().is_empty());
    }

    #[test]
    fn strided_products_match_a_naive_product() {
        // a: 3x4 with rows 6 apart; b^T stored as 5x4 rows 7 apart.
        let a: Vec<f32> = (0..20).map(|i| i as f32 * 0.5 - 3.0).collect();
        let bt: Vec<f32> = (0..40).map(|i| (i % 9) as f32 - 4.0).collect();
        let mut dst = vec![1.0f32; 3 * 5];
        matmul(
            Mat::rows(&mut dst, 3, 5, 5),
            true,
            Src::rows(&a, 3, 4, 6),
            Src::transposed(&bt, 4, 5, 7),
            2.0,
            Parallelism::None,
        );
        for i in 0..3 {
            for j in 0..5 {
                let want: f32 =
                    1.0 + 2.0 * (0..4).map(|k| a[i * 6 + k] * bt[j * 7 + k]).sum::<f32>();
                assert_eq!(dst[i * 5 + j], want, "({i}, {j})");
            }
        }
    }
}
