//! The trainer (issue 5): searchless_chess's predictors in burn, trained
//! from the annotated tables.
//!
//! - [`data`], [`sampler`]: token sequences streamed from Parquet in a
//!   seeded, resumable order (uniform or weighted by board occurrences);
//! - [`model_config`], [`model`]: the architecture, its presets and sizes;
//! - [`loss`]: HL-Gauss, cross-entropy, L2 and the marginal baseline;
//! - [`optim`], [`ema`]: global-norm clipping and the parameter average;
//! - [`checkpoint`], [`run`]: checkpoints, exact resume, logs, the loop;
//! - [`config`]: the `[train]` table, validated;
//! - [`throughput`]: the step alone, timed (benchmarks).

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod ema;
pub mod loss;
pub mod model;
pub mod model_config;
pub mod optim;
pub mod run;
pub mod sampler;
pub mod throughput;
