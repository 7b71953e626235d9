//! burn-cuda against the CPU: one training step of the same predictor from
//! the same weights on the same batch, on CUDA and on the CPU (f32, burn's
//! `flex`): forward log-probabilities and loss within 1e-3 (relative),
//! every parameter's gradient within 1e-2; and the same step in mixed bf16
//! on CUDA against f32 on the CPU, within bf16's own bounds.
//!
//! Why the f32 gradients get a wider bound than the forward pass: CUDA's
//! "f32" matrix products run on TF32 tensor cores (cuBLASLt's
//! `CUBLAS_COMPUTE_32F_FAST_TF32`, and CubeCL's matmul stages f32 operands
//! as tf32 whenever a kernel uses the tensor cores), i.e. with a 10-bit
//! mantissa. Measured on an H100 with CubeCL's products (9M, K=128, batch
//! 32): log-probs 1.1e-4, loss 1.5e-5, gradients at most 1.4e-3 (layer 0's
//! key projection, the end of the backward pass). A wrong kernel gives
//! errors of order 1, far above either bound.
//!
//! The bf16 bounds: bf16 keeps 8 bits of mantissa. The same comparison on
//! the CPU, with the bf16 products emulated (`train::agreement`'s
//! `mixed_bf16_stays_close_to_f32`; 9M, K=128, batch 32), measured
//! log-probs 1.2e-3, loss 1.8e-4 and gradients at most 1.7e-2; the bounds
//! below leave about 6x to TF32 accumulation and other summation orders.
//!
//! Each case prints which products ran (cuBLASLt, or burn's where it does
//! not load: `CHESSBENCH_PRODUCTS=burn` forces those), which attention
//! (the fused kernels, or burn's where a variant fails its self-test:
//! `CHESSBENCH_ATTENTION=burn` forces it) and how long it took. The file is
//! meant to run whole in under 4 minutes on an H100, kernel compiling
//! included (hence 400 boards in the batched-scoring case), so that one
//! GPU session of `bench/gpu.sh` can run it and still time the step.
//!
//! Built only with `--features cuda` and run on a machine with an NVIDIA GPU
//! (`cargo test --release --features cuda --test cuda`; `bench/gpu.sh` runs
//! the prebuilt test binary on a GPU machine without Rust). Without a GPU it fails:
//! nothing here is skipped.
#![cfg(feature = "cuda")]

use chessbench::{
    chess::RecordSet,
    model::{ModelShape, Precision, Preset},
    train::{agreement::cuda_against_cpu, loss::Loss},
};
use cubecl::cuda::CudaRuntime;

/// Forward pass and loss, f32 (TF32 products).
const FORWARD_TOLERANCE: f64 = 1e-3;
/// Gradients, after the whole backward pass through TF32 products.
const GRADIENT_TOLERANCE: f64 = 1e-2;
/// Forward pass and loss, mixed bf16 against f32.
const BF16_FORWARD_TOLERANCE: f64 = 1e-2;
/// Gradients, mixed bf16 against f32.
const BF16_GRADIENT_TOLERANCE: f64 = 1e-1;

fn check(
    preset: Preset,
    policy: RecordSet,
    buckets: usize,
    loss: Loss,
    batch: usize,
    precision: Precision,
) {
    let (forward, gradient) = match precision {
        Precision::F32 => (FORWARD_TOLERANCE, GRADIENT_TOLERANCE),
        Precision::Bf16 => (BF16_FORWARD_TOLERANCE, BF16_GRADIENT_TOLERANCE),
        Precision::F16 => panic!("mixed f16 is wgpu's"),
    };
    chessbench::model::gpu::cache::configure_kernel_cache();
    let shape = ModelShape::preset(preset, policy, buckets);
    let started = std::time::Instant::now();
    let a = cuda_against_cpu(&shape, loss, batch, 7, precision).expect("one step on CPU and CUDA");
    type Gpu = burn::backend::Cuda<f32, i32>;
    let attention = <Gpu as chessbench::model::ModelBackend>::attention();
    let layers = <Gpu as chessbench::model::ModelBackend>::layers();
    println!(
        "{preset:?} {policy:?} K={buckets} {loss:?} batch {batch}, {attention:?} attention, {layers:?} layers, {:.1} s: {a:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        a.log_probs < forward && a.loss < forward,
        "{preset:?} {policy:?} {precision:?}: CUDA's forward pass differs from the CPU's by more than {forward}: {a:?}"
    );
    assert!(
        a.grads_max < gradient,
        "{preset:?} {policy:?} {precision:?}: CUDA's gradient of {} differs from the CPU's by more than {gradient}: {a:?}",
        a.worst_grad
    );
}

#[test]
fn tiny_action_value_hl_gauss_agrees_with_the_cpu() {
    check(
        Preset::Tiny,
        RecordSet::ActionValue,
        32,
        Loss::HlGauss,
        64,
        Precision::F32,
    );
}

#[test]
fn nine_million_action_value_agrees_with_the_cpu() {
    check(
        Preset::M9,
        RecordSet::ActionValue,
        128,
        Loss::HlGauss,
        32,
        Precision::F32,
    );
}

#[test]
fn nine_million_behavioural_cloning_agrees_with_the_cpu() {
    check(
        Preset::M9,
        RecordSet::BehavioralCloning,
        128,
        Loss::CrossEntropy,
        32,
        Precision::F32,
    );
}

#[test]
fn nine_million_mixed_bf16_stays_within_bf16_of_the_cpu() {
    check(
        Preset::M9,
        RecordSet::ActionValue,
        128,
        Loss::HlGauss,
        32,
        Precision::Bf16,
    );
}

/// Evaluation at GPU scale: 400 boards scored together (many boards'
/// legal moves in each forward pass) give what each board scored alone
/// gives (one pass a board, as the UCI engine), f32 and bf16: the same best
/// move except where the two best scores are within 1e-6 (a float tie,
/// counted and printed), and expected values within 1e-6 (f32; bf16 within
/// 1e-3: a row's products may be tiled differently in a bigger pass). 400
/// boards (about 12,000 legal moves, 1 to 50 a board) keep the 800 single
/// passes within the test's time on a device; the walk covers openings to
/// middlegames.
#[test]
fn nine_million_boards_scored_together_equal_boards_scored_alone() {
    use chessbench::{
        eval::{
            predict::{predict, predict_many},
            trained::Model,
        },
        model::DeviceKind,
    };
    let boards = chessbench::testing::walk(400);
    let refs: Vec<&shakmaty::Chess> = boards.iter().collect();
    for (precision, tolerance) in [(Precision::F32, 1e-6), (Precision::Bf16, 1e-3)] {
        let model = Model::random(Preset::M9, RecordSet::ActionValue, 128, DeviceKind::Cuda)
            .and_then(|m| m.with_precision(precision))
            .expect("the 9M model on CUDA");
        let together = predict_many(&model, &refs).expect("boards scored together");
        let mut tokens = Vec::new();
        let (mut ties, mut worst) = (0, 0.0f64);
        for (pos, t) in boards.iter().zip(&together) {
            let alone = predict(&model, pos, &mut tokens).expect("a board alone");
            assert_eq!(t.moves, alone.moves);
            for (a, b) in t.scores.iter().zip(&alone.scores) {
                worst = worst.max((a - b).abs());
            }
            if t.best() != alone.best() {
                let mut s = alone.scores.clone();
                s.sort_by(|a, b| b.total_cmp(a));
                assert!(
                    s.len() > 1 && s[0] - s[1] <= 1e-6,
                    "{precision:?}: a different best move without a tie: {:?}",
                    t.moves
                );
                ties += 1;
            }
        }
        println!(
            "{precision:?}: {} boards, scores within {worst:.1e}, {ties} float ties",
            boards.len()
        );
        assert!(
            worst <= tolerance,
            "{precision:?}: scores differ by {worst}"
        );
    }
}

/// The fused attention kernels against the tiled reference on the CPU
/// (`make test` checks that reference against burn's attention within
/// 1e-4): forward, log-sum-exp and all three gradients, the 9M head (32),
/// the 136M/270M head (128) and an odd shape; f32 within 1e-4 relative
/// (no tensor cores on either side), bf16 tensors within 2e-2 (bf16's
/// rounding of the outputs and gradients: 8 bits of mantissa, 4e-3, with
/// room for the tiles' sums over bf16 inputs). Both formats are measured
/// and printed before either is judged. The same inputs run on the CPU
/// through a model of CUDA's layouts and launch (`make test-kernels`).
#[test]
fn fused_attention_kernels_equal_the_reference() {
    kernels_within_bounds(chessbench::model::gpu::attention::kernel_errors::<CudaRuntime>);
    model_variants_pass();
}

/// Every kernel variant the tiny and 9M models run in f32 and mixed bf16
/// passes its self-test through the fused backend, as at their first use
/// in training (the variant's exact sequence, head dimension, format and
/// layout), and the backend then reports the fused kernels.
fn model_variants_pass() {
    use chessbench::model::{ModelBackend, gpu::backend::self_test_model};
    chessbench::model::gpu::cache::configure_kernel_cache();
    let device = cubecl::cuda::CudaDevice::default();
    let mut verdicts = Vec::new();
    for preset in [Preset::Tiny, Preset::M9] {
        for precision in [Precision::F32, Precision::Bf16] {
            let shape = ModelShape::preset(preset, RecordSet::ActionValue, 128);
            verdicts = self_test_model::<CudaRuntime>(&device, &shape, precision);
        }
    }
    for v in &verdicts {
        println!("{v:?}");
    }
    assert!(verdicts.iter().all(|v| v.passed), "{verdicts:#?}");
    type Gpu = burn::backend::Cuda<f32, i32>;
    assert_eq!(
        <Gpu as ModelBackend>::attention(),
        chessbench::model::AttentionKernel::Fused
    );
    assert_eq!(
        <Gpu as ModelBackend>::layers(),
        chessbench::model::LayerKernels::Fused
    );
}

/// A family's kernel check: each output's shape, name and relative error.
type KernelCheck<S> = fn(
    &cubecl::cuda::CudaDevice,
    burn::tensor::DType,
) -> Result<Vec<(S, &'static str, f32)>, String>;

/// Runs `errors` (each output's shape, name and relative error against its
/// reference) for f32 (bound 1e-4) and bf16 (2e-2), prints every figure of
/// both formats, then fails on any above its bound (or NaN).
fn kernels_within_bounds<S: std::fmt::Debug>(errors: KernelCheck<S>) {
    use burn::tensor::DType;
    chessbench::model::gpu::cache::configure_kernel_cache();
    let device = cubecl::cuda::CudaDevice::default();
    let mut failures = Vec::new();
    for (dtype, bound) in [(DType::F32, 1e-4f32), (DType::BF16, 2e-2)] {
        for (shape, what, e) in errors(&device, dtype).expect("the kernels ran") {
            println!("{dtype:?} {shape:?} {what}: {e:.1e}");
            if e.is_nan() || e > bound {
                failures.push(format!("{dtype:?} {shape:?} {what}: {e:e} relative"));
            }
        }
    }
    assert!(failures.is_empty(), "above their bounds: {failures:?}");
}

/// The fused layer norm and SwiGLU kernels against their plain-Rust
/// reference (`src/model/layers.rs`, which `make test` checks against
/// burn's autodiff): forward, the norm's mean and `rstd`, and every
/// gradient, on the 9M and 136M widths and odd ones, f32 within 1e-4 and
/// bf16 within 2e-2, both formats printed before either is judged; then
/// the self-tests' verdicts. The CPU model of the launch runs the same
/// inputs (`make test-kernels`).
#[test]
fn fused_layer_kernels_equal_the_reference() {
    kernels_within_bounds(chessbench::model::gpu::layers::kernel_errors::<CudaRuntime>);
    model_variants_pass();
}
