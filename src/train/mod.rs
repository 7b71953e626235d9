//! The trainer: searchless_chess's predictors in burn, trained from the
//! annotated tables.
//!
//! - [`data`], [`sampler`]: token sequences streamed from Parquet in a
//!   seeded, resumable order (uniform or weighted by board occurrences);
//! - the architecture, its presets and the checkpoint layout are the
//!   [`crate::model`] foundation, shared with evaluation;
//! - [`loss`]: HL-Gauss, cross-entropy, L2 and the marginal baseline;
//! - [`optim`]: global-norm clipping, Adam and the parameters' average in
//!   one pass over flat buffers;
//! - [`save`], [`run`]: writing checkpoints, exact resume, logs, the
//!   loop; beneath it `step` (one optimiser step, also `bench-step`'s),
//!   `stream` (the records a run reads, and the loader's memory share),
//!   `held_out` (the eval split scored during training) and `error`;
//! - [`logs`]: the typed rows of `metrics.csv` and `eval.csv`;
//! - [`config`]: the `[train]` table, validated;
//! - [`throughput`]: the step alone, timed (benchmarks), with
//!   [`threads`]: its CPU time on the host thread and on the others;
//! - [`agreement`]: one step on two backends from the same weights (the
//!   CUDA test).

pub mod agreement;
pub mod config;
pub mod data;
mod error;
mod held_out;
pub(crate) mod logs;
pub mod loss;
pub(crate) mod optim;
pub mod parity;
pub mod run;
pub mod sampler;
pub(crate) mod save;
pub(crate) mod step;
mod stream;
pub mod threads;
pub mod throughput;

pub use config::TrainOptions;
pub use error::TrainError;
pub use run::run;
pub use stream::{MEMORY, training_data};
pub use throughput::{BenchStepOptions, bench_steps};
