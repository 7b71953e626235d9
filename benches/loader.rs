//! `make bench-loader`: training-data loader throughput (samples/s, and per
//! worker thread) on an annotated run (CHESSBENCH_BENCH_RUN, default
//! runs/demo-long): action-value sequences of the train split, batch 1024, K=128,
//! uniform sampler, two epochs' worth of windows. The target: at least 3x what
//! the training step consumes (`make bench-train` compares them).

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
        };
        let mut loader = Loader::new(config, Position::default()).expect("open the run");
        loader.next_batch().expect("first batch"); // board tokens loaded, workers started
        let t = Instant::now();
        let batches = 400;
        for _ in 0..batches {
            loader.next_batch().expect("batch");
        }
        let rate = (batches * 1024) as f64 / t.elapsed().as_secs_f64();
        println!(
            "{workers:>8} {batches:>12} {rate:>16.0} {:>18.0}",
            rate / workers as f64
        );
    }
}
