//! The records a run reads: the training stream (which the Python
//! package's loader is built from too) and the eval split's, and the
//! loader's share of `--memory-limit`.

use super::{config::TrainConfig, data::DataConfig, sampler::Sampling};
use crate::options::{Consumer, Memory, Shard, Share};

/// The stream `chessbench train` learns from under `config`: its split,
/// batch size, seed, sampler and loader threads, the whole of `shard`'s
/// slice. The Python package's loader is built from this too, so its
/// batches are the trainer's.
pub fn training_data(config: &TrainConfig, shard: Shard) -> DataConfig {
    DataConfig {
        workers: config.workers,
        sampling: config.sampling,
        shard,
        ..data_config(config, &config.split, config.batch_size, config.seed)
    }
}

/// What `train` holds within `--memory-limit`.
pub const MEMORY: Memory<2> = Memory([
    Consumer::new(
        "the loader's windows of records (being built, prefetched, served): it bounds \
         prefetching, never what is served",
        Share::Part(1, 2),
    ),
    Consumer::new(
        "the model, its activations and the optimiser",
        Share::Rest { at_least: (0, 1) },
    ),
]);

pub(super) fn data_config(
    config: &TrainConfig,
    split: &str,
    batch_size: usize,
    seed: u64,
) -> DataConfig {
    let [loader, _] = MEMORY.share(config.memory_limit, 1);
    DataConfig {
        run: config.run.clone(),
        split: split.to_owned(),
        policy: config.policy,
        buckets: config.buckets,
        batch_size,
        sampling: Sampling::Uniform,
        seed,
        window: config.window,
        workers: 1,
        memory_limit: loader,
        label_source: config.label_source,
        shard: Shard::ALL,
    }
}
