//! `make bench-train`: the training step on this machine's CPU (burn's flex
//! backend), against references measured in the same run:
//! - the data loader (one worker) on the bench run, which should be >= 3x
//!   faster than the step consumes;
//! - PyTorch (`bench/torch_reference.py`, same architecture, step, batch
//!   and precision) when `import torch` works; the target on a GPU is
//!   burn >= 0.8x PyTorch; on a GPU run `chessbench bench-step --device cuda`
//!   and the script with `--device cuda` (see README).
//!
//! Environment: CHESSBENCH_BENCH_RUN (default runs/demo-long), BENCH_PRESETS
//! (default "tiny:256,9m:64", PRESET:BATCH pairs), BENCH_STEPS (default 10).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use chessbench::{
    chess::RecordSet,
    model::{DeviceKind, ModelShape, Precision, Preset},
    train::{
        data::{DataConfig, Loader},
        loss::Loss,
        sampler::{Position, Sampling},
        throughput::{StepBench, bench_steps},
    },
};

fn loader_rate(run: &Path, batch: usize) -> Option<f64> {
    let config = DataConfig {
        run: run.to_owned(),
        split: "train".into(),
        policy: RecordSet::ActionValue,
        buckets: 128,
        batch_size: batch,
        sampling: Sampling::Uniform,
        seed: 1,
        window: 4,
        workers: 1,
        memory_limit: chessbench::options::MEMORY_LIMIT_BYTES,
        label_source: Default::default(),
        shard: chessbench::options::Shard::ALL,
    };
    let mut loader = match Loader::new(config, Position::default()) {
        Ok(l) => l,
        Err(e) => {
            println!("  (no loader reference: {e})");
            return None;
        }
    };
    loader.next_batch().ok()?;
    let n = 200_000usize.div_ceil(batch);
    let t = Instant::now();
    for _ in 0..n {
        loader.next_batch().ok()?;
    }
    Some((n * batch) as f64 / t.elapsed().as_secs_f64())
}

fn torch_rate(preset: &str, batch: usize, steps: usize, threads: usize) -> Option<f64> {
    let out = Command::new("python3")
        .args([
            "bench/torch_reference.py",
            "--preset",
            preset,
            "--buckets",
            "128",
        ])
        .args(["--batch", &batch.to_string(), "--steps", &steps.to_string()])
        .args(["--device", "cpu", "--threads", &threads.to_string()])
        .output()
        .ok()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        println!(
            "  (no PyTorch reference: {})",
            err.lines().last().unwrap_or("python3 failed")
        );
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["samples_per_s"].as_f64()
}

fn main() {
    let run = PathBuf::from(
        std::env::var("CHESSBENCH_BENCH_RUN").unwrap_or_else(|_| "runs/demo-long".into()),
    );
    let presets = std::env::var("BENCH_PRESETS").unwrap_or_else(|_| "tiny:256,9m:64".into());
    let steps: usize = std::env::var("BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("training step, action value, K = 128, HL-Gauss, f32, CPU ({cores} cores)");
    for spec in presets.split(',') {
        let (name, batch) = spec.split_once(':').unwrap_or((spec, "256"));
        let batch: usize = batch.parse().expect("BENCH_PRESETS: PRESET:BATCH");
        let preset = match name {
            "tiny" => Preset::Tiny,
            "9m" => Preset::M9,
            "136m" => Preset::M136,
            "270m" => Preset::M270,
            other => panic!("unknown preset {other}"),
        };
        let bench = StepBench {
            shape: ModelShape::preset(preset, RecordSet::ActionValue, 128),
            loss: Loss::HlGauss,
            batch_size: batch,
            steps,
            warmup: 2,
            device: DeviceKind::Cpu,
            precision: Precision::F32,
            profile: false,
            count_ops: false,
            count_kernels: false,
        };
        let t = bench_steps(&bench).expect("burn step");
        println!(
            "{name} ({:.2}M parameters), batch {batch}: burn {:.0} samples/s, {:.1} model GFLOP/s",
            t.params as f64 / 1e6,
            t.samples_per_s,
            t.model_flops_per_s / 1e9
        );
        let profiled = bench_steps(&StepBench {
            profile: true,
            steps: steps.min(5),
            ..bench.clone()
        })
        .expect("burn step, profiled");
        if let Some(phases) = profiled.phases {
            let total: f64 = phases.iter().map(|(_, s)| s).sum();
            let parts: Vec<String> = phases
                .iter()
                .map(|(n, s)| format!("{n} {:.0}%", 100.0 * s / total.max(1e-12)))
                .collect();
            println!("  where the time goes: {}", parts.join(", "));
        }
        if let Some(loader) = loader_rate(&run, batch) {
            println!(
                "  loader (1 worker, {}): {loader:.0} samples/s = {:.1}x what the step consumes (target >= 3x)",
                run.display(),
                loader / t.samples_per_s
            );
        }
        if let Some(torch) = torch_rate(name, batch, steps, cores) {
            println!(
                "  PyTorch (CPU, {cores} threads): {torch:.0} samples/s; burn / PyTorch = {:.2}x (GPU target >= 0.8x)",
                t.samples_per_s / torch
            );
        }
    }
}
