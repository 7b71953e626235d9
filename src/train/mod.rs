//! The trainer of issue 5, in progress: the data side (sequences, samplers,
//! the prefetching Parquet loader) is here; the burn model, losses and run
//! management are not yet.

pub mod data;
pub mod sampler;
