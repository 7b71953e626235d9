//! `make bench-loader`: training-data loader throughput (samples/s, and per
//! worker thread) on an annotated run (CHESSBENCH_BENCH_RUN, default
//! runs/demo-long): action-value sequences of the train split, batch 1024, K=128,
//! uniform sampler, 2,000 batches (about 8 epochs of runs/demo-long). The target: at least 3x what
//! the training step consumes (`make bench-train` compares them).
//!
//! With `CHESSBENCH_PYTHON` (a Python with the package installed, as `make
//! bench-loader` sets it) the same loader through the Python package into
//! NumPy (bench/python_loader.py) runs beside it, in the same run, and the
//! ratio is printed; the target is 0.8x or more.

use std::{path::PathBuf, time::Instant};

use chessbench::chess::RecordSet;
use chessbench::train::{
    data::{DataConfig, Loader},
    sampler::{Position, Sampling},
};

fn main() {
    let run = PathBuf::from(
        std::env::var("CHESSBENCH_BENCH_RUN").unwrap_or_else(|_| "runs/demo-long".into()),
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "loader on {} (train split, action values, batch 1024, K = 128)",
        run.display()
    );
    println!(
        "{:>8} {:>12} {:>16} {:>18}",
        "workers", "batches", "samples/s", "samples/s/worker"
    );
    for workers in [1, cores] {
        let config = DataConfig {
            run: run.clone(),
            split: "train".into(),
            policy: RecordSet::ActionValue,
            buckets: 128,
            batch_size: 1024,
            sampling: Sampling::Uniform,
            seed: 1,
            window: 4,
            workers,
            memory_limit: chessbench::options::MEMORY_LIMIT_BYTES,
            label_source: Default::default(),
            shard: chessbench::options::Shard::ALL,
        };
        // 2,000 batches: 0.1-0.2 s at 10-20M samples/s (400 took 20-40 ms,
        // too short to time a fresh process against a warm one).
        let batches = 2000;
        // Each timing is tens of milliseconds, and a 2-core VM's vary by
        // 2x: the medians of REPEATS, the Rust and the Python timings
        // alternating so both see the same machine.
        let mut rust = Vec::new();
        let mut python = Vec::new();
        let mut python_row = None;
        for _ in 0..REPEATS {
            let mut loader =
                Loader::new(config.clone(), Position::default()).expect("open the run");
            loader.next_batch().expect("first batch"); // board tokens loaded, workers started
            let t = Instant::now();
            for _ in 0..batches {
                loader.next_batch().expect("batch");
            }
            rust.push((batches * 1024) as f64 / t.elapsed().as_secs_f64());
            drop(loader);
            if let Some(row) = python_rate(&run, workers, batches) {
                python.push(row["samples_per_s"].as_f64().unwrap_or(f64::NAN));
                python_row = Some(row);
            }
        }
        let rate = median(&mut rust);
        println!(
            "{workers:>8} {batches:>12} {rate:>16.0} {:>18.0}",
            rate / workers as f64
        );
        if let Some(row) = python_row {
            let py = median(&mut python);
            println!(
                "{:>8} {batches:>12} {py:>16.0} {:>18.0}   Python into NumPy: {:.2}x the Rust loader (target >= 0.8x); loader peak {:.1} MiB, process peak RSS {:.0} MiB",
                format!("py {workers}"),
                py / workers as f64,
                py / rate,
                row["loader_peak_bytes"].as_f64().unwrap_or(f64::NAN) / (1u64 << 20) as f64,
                row["max_rss_bytes"].as_f64().unwrap_or(f64::NAN) / (1u64 << 20) as f64,
            );
        }
    }
}

/// Timings per row (medians printed).
const REPEATS: usize = 5;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One timing of the Python package's loader (bench/python_loader.py), when
/// `CHESSBENCH_PYTHON` names a Python that has it.
fn python_rate(run: &std::path::Path, workers: usize, batches: usize) -> Option<serde_json::Value> {
    let python = std::env::var_os("CHESSBENCH_PYTHON")?;
    let out = std::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/bench/python_loader.py"
        ))
        .arg(run)
        .args([
            "--jobs",
            &workers.to_string(),
            "--batches",
            &batches.to_string(),
        ])
        .output()
        .expect("run bench/python_loader.py");
    assert!(
        out.status.success(),
        "bench/python_loader.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("its JSON line"))
}
