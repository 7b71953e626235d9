//! The trainer of issue 5, in progress: the data side (sequences, samplers,
//! the prefetching Parquet loader) and the model's shape arithmetic (presets,
//! parameter counts, FLOPs) are here; the burn model, losses and run
//! management are not yet.

pub mod data;
pub mod model_config;
pub mod sampler;
