//! `make parity-paired`: learning parity with searchless_chess on paired
//! runs. `make parity` compares independent runs, whose
//! test log-losses differ by their random streams (initial parameters,
//! data order) as much as by any difference of recipe. Here each seed is
//! one pair: searchless_chess trains with its own code (`training.train`,
//! its grain loader; `bench/searchless_train.py --pair`) and hands over
//! its initial parameters and the batches it drew, in order; chessbench
//! then trains from those parameters on those batches with its own update
//! (`chessbench::train::parity::paired_run`: its loss, global-norm clip,
//! Adam and EMA) and the averaged model's log-loss on the same test
//! records is compared with theirs. Recipe: tiny action-value model, K = 32,
//! one-hot cross-entropy, batch 128, Adam lr 2e-3, clip 1.0, EMA 0.99,
//! STEPS (800) steps on the demo run's train split; every test record.
//!
//! Environment: CHESSBENCH_BENCH_RUN (an annotated run), SEARCHLESS_CHESS
//! (a checkout), CHESSBENCH_JAX_PYTHON (`make jax-deps`), SEEDS ("0 1"),
//! STEPS (800).

use std::{path::PathBuf, process::Command, time::Instant};

use chessbench::{
    chess::RecordSet,
    model::{ModelShape, Preset},
    train::parity::{ParityRecipe, paired_run},
};
use safetensors::SafeTensors;

const BIN: &str = env!("CARGO_BIN_EXE_chessbench");

/// Tensor `name` of a safetensors file as 4-byte little-endian values.
fn tensor<T>(path: &std::path::Path, name: &str, from: fn([u8; 4]) -> T) -> Vec<T> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensor(name)
        .unwrap_or_else(|e| panic!("{}: {name}: {e}", path.display()))
        .data()
        .chunks_exact(4)
        .map(|b| from([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn main() {
    let env = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            eprintln!("parity-paired: set {name} (see benches/parity_paired.rs)");
            std::process::exit(2)
        })
    };
    let run = PathBuf::from(env("CHESSBENCH_BENCH_RUN"));
    let code = env("SEARCHLESS_CHESS");
    let python = std::env::var("CHESSBENCH_JAX_PYTHON").unwrap_or_else(|_| "python3".into());
    let seeds = std::env::var("SEEDS").unwrap_or_else(|_| "0 1".into());
    let steps: usize = std::env::var("STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(800);
    let dir = tempfile::tempdir().unwrap();
    for split in ["train", "test"] {
        let o = Command::new(BIN)
            .args(["bag", "export"])
            .arg(&run)
            .args(["--split", split, "--no-progress", "--out"])
            .arg(dir.path().join(split))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
    let recipe = ParityRecipe {
        batch_size: 128,
        learning_rate: 2e-3,
        steps,
        ema_decay: Some(0.99),
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/searchless_train.py");
    println!(
        "paired learning parity: tiny action value, K=32, batch 128, lr 2e-3, clip 1.0, EMA 0.99, {steps} steps; run {}",
        run.display()
    );
    println!(
        "{:>5} {:>18} {:>12} {:>10} {:>14} {:>10}",
        "seed", "searchless_chess", "chessbench", "gap", "max loss gap", "seconds"
    );
    let mut gaps = Vec::new();
    for seed in seeds.split_whitespace() {
        let pair = dir.path().join(format!("pair-{seed}"));
        let t = Instant::now();
        let o = Command::new(&python)
            .arg(&script)
            .args(["--searchless", &code, "--seed", seed])
            .args(["--steps", &steps.to_string()])
            .arg("--train")
            .arg(dir.path().join("train/action_value_data.bag"))
            .arg("--test")
            .arg(dir.path().join("test/action_value_data.bag"))
            .arg("--pair")
            .arg(&pair)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let theirs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let their_loss = theirs["test_log_loss"].as_f64().unwrap();
        let batches = tensor(
            &pair.join("batches.safetensors"),
            "sequences",
            i32::from_le_bytes,
        );
        let their_losses = tensor(
            &pair.join("batches.safetensors"),
            "losses",
            f32::from_le_bytes,
        );
        let test = tensor(
            &pair.join("test.safetensors"),
            "sequences",
            i32::from_le_bytes,
        );
        assert_eq!(
            batches.len(),
            steps * recipe.batch_size * shape.seq_len,
            "their batches"
        );
        let (losses, ours) = paired_run(
            &pair.join("init.safetensors"),
            &shape,
            &batches,
            &recipe,
            &test,
        )
        .unwrap();
        assert_eq!(losses.len(), their_losses.len(), "steps");
        let loss_gap = losses
            .iter()
            .zip(&their_losses)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        let gap = ours - their_loss;
        gaps.push(gap);
        println!(
            "{seed:>5} {their_loss:>18.4} {ours:>12.4} {gap:>+10.4} {loss_gap:>14.2e} {:>10.0}   (train loss {:.3} -> {:.3}, theirs {:.3} -> {:.3})",
            t.elapsed().as_secs_f64(),
            losses[0],
            losses[losses.len() - 1],
            their_losses[0],
            their_losses[their_losses.len() - 1],
        );
    }
    let worst = gaps.iter().fold(0.0f64, |m, g| m.max(g.abs()));
    println!(
        "largest |gap| {worst:.4} nats over {} paired seeds (target: within 0.01)",
        gaps.len()
    );
}
