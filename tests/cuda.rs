//! burn-cuda against the CPU (issue 16): one training step of the same
//! predictor from the same weights on the same batch: forward log-probs and
//! loss within 1e-3 (relative), every parameter's gradient within 1e-2.
//!
//! Why the gradients get a wider bound than issue 16's 1e-3: burn-cuda's
//! "f32" matrix products run on TF32 tensor cores (cubek-matmul 0.2 stages
//! f32 operands as tf32 whenever a kernel uses the tensor cores; burn 0.21
//! has no switch for it), i.e. with a 10-bit mantissa. Measured on an H100
//! (9M, K=128, batch 32): log-probs 1.1e-4, loss 1.5e-5, gradients at most
//! 1.4e-3 (layer 0's key projection, the end of the backward pass). A wrong
//! kernel gives errors of order 1, far above either bound.
//!
//! Built only with `--features cuda` and run on a machine with an NVIDIA GPU
//! (`cargo test --release --features cuda --test cuda`; `bench/gpu.sh` runs
//! the prebuilt test binary on the device machine). Without a GPU it fails:
//! nothing here is skipped.
#![cfg(feature = "cuda")]

use chessbench::{
    chess::RecordSet,
    model::{ModelShape, Preset},
    train::{agreement::cuda_against_cpu, loss::Loss},
};

/// Forward pass and loss (issue 16's bound).
const FORWARD_TOLERANCE: f64 = 1e-3;
/// Gradients, after the whole backward pass through TF32 products.
const GRADIENT_TOLERANCE: f64 = 1e-2;

fn check(preset: Preset, policy: RecordSet, buckets: usize, loss: Loss, batch: usize) {
    let shape = ModelShape::preset(preset, policy, buckets);
    let a = cuda_against_cpu(&shape, loss, batch, 7).expect("one step on CPU and CUDA");
    println!("{preset:?} {policy:?} K={buckets} {loss:?} batch {batch}: {a:?}");
    assert!(
        a.log_probs < FORWARD_TOLERANCE && a.loss < FORWARD_TOLERANCE,
        "{preset:?} {policy:?}: CUDA's forward pass differs from the CPU's by more than {FORWARD_TOLERANCE}: {a:?}"
    );
    assert!(
        a.grads_max < GRADIENT_TOLERANCE,
        "{preset:?} {policy:?}: CUDA's gradient of {} differs from the CPU's by more than {GRADIENT_TOLERANCE}: {a:?}",
        a.worst_grad
    );
}

#[test]
fn tiny_action_value_hl_gauss_agrees_with_the_cpu() {
    check(Preset::Tiny, RecordSet::ActionValue, 32, Loss::HlGauss, 64);
}

#[test]
fn nine_million_action_value_agrees_with_the_cpu() {
    check(Preset::M9, RecordSet::ActionValue, 128, Loss::HlGauss, 32);
}

#[test]
fn nine_million_behavioural_cloning_agrees_with_the_cpu() {
    check(
        Preset::M9,
        RecordSet::BehavioralCloning,
        128,
        Loss::CrossEntropy,
        32,
    );
}
