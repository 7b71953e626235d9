//! Options, defined once per stage, and the one rule that layers them.
//!
//! Each stage has one options type (`IngestOptions`, `AnnotateOptions`,
//! `TrainOptions`, `EvalOptions`) that clap parses from the command line and
//! serde reads from the stage's table of a pipeline file (`[ingest]`,
//! `[annotate]`, `[train]`, `[eval]`). A field's name is its key in the file
//! and its flag on the command line (`batch_size`, `--batch-size`); its
//! default and help live in its clap attributes and doc comment, which
//! `--help` shows; enum values have one spelling (`action_value`) in both.
//!
//! What several stages share is one type here, flattened into each: the run
//! directory ([`RunArg`], the first argument), parallelism ([`Jobs`], `-j`),
//! the memory budget ([`Budget`], `--memory-limit`), both ([`Resources`]),
//! and where a model runs ([`Compute`], `--device`, `--precision`); each has
//! one flag, one key and one help text wherever it appears.
//!
//! [`load`] layers them: defaults, then the pipeline file, then the command
//! line. Options that form an exclusive group (`#[arg(group = "limit")]`,
//! annotate's search limit) are layered as one: any of them on the command
//! line replaces all of the file's.
//!
//! **Relative paths are relative to the file that named them**: paths in a
//! pipeline file are resolved against the file's directory, paths on the
//! command line against the working directory. Which options are paths is
//! declared once, by the option's clap value hint (`ValueHint::FilePath`,
//! `DirPath`, `AnyPath`); an executable (`ValueHint::ExecutablePath`) named
//! without a `/` (`stockfish`) is looked up on `PATH` instead. `-` (standard
//! input) and `crate:NAME/PATH` (a file in a Cargo dependency's source) are
//! not filesystem paths and stay as written.

use std::path::PathBuf;

use clap::{Args, ValueHint};
use serde::{Deserialize, Serialize};

use crate::model::{DeviceKind, Precision};

mod budget;
mod layer;
mod shard;
mod values;

pub use budget::{Consumer, Memory, Share};
#[cfg(test)]
pub(crate) use layer::from_table;
pub use layer::{OptionsError, Stage, describe, from_file_table, load};
pub(crate) use layer::{defaults, keys, line_of, rebase_path, stage};
pub use shard::{Shard, ShardError};
pub use values::ByteSize;
pub(crate) use values::{as_text, as_text_opt, as_text_vec};

/// The memory budget every stage takes by default (`--memory-limit`,
/// `memory_limit`): what it may hold in memory before it spills to the run
/// directory or waits.
pub const MEMORY_LIMIT: &str = "2GiB";

/// [`MEMORY_LIMIT`] in bytes.
pub const MEMORY_LIMIT_BYTES: u64 = 2 << 30;

/// The run directory: the first argument of every stage that has one, `run`
/// in a pipeline table. `ingest` writes its tables there, the later stages
/// read them and add their own.
#[derive(Debug, Clone, Default, PartialEq, Args, Serialize, Deserialize)]
pub struct RunArg {
    /// The run directory (`run` in a pipeline file): `ingest` writes the
    /// tables there, every later stage reads them and adds its own.
    #[arg(value_name = "RUN_DIR", value_hint = ValueHint::DirPath)]
    pub run: Option<PathBuf>,
}

/// How many things a stage does at once (`-j`, `--jobs`, `jobs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Args, Serialize, Deserialize)]
pub struct Jobs {
    /// Parallel jobs: ingest's parsing and writing threads, `bag import` and
    /// `bag export` threads, annotate's engine processes (one search thread
    /// each) or, with `--evals`, threads reading the evaluation database,
    /// the training data loader's threads [default: the number of cores;
    /// training: 1].
    #[arg(short = 'j', long, value_name = "N", help_heading = "Resources")]
    pub jobs: Option<usize>,
}

impl Jobs {
    /// The jobs asked for, or the number of cores when none (or 0) was.
    pub fn or_cores(self) -> usize {
        match self.jobs {
            Some(0) | None => std::thread::available_parallelism().map_or(2, |n| n.get()),
            Some(n) => n,
        }
    }
}

/// The memory budget (`--memory-limit`, `memory_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Args, Serialize, Deserialize)]
pub struct Budget {
    /// Memory the stage may hold (tables, buffers, batches, the model) before
    /// it spills to the run directory or waits; how the stage shares it out
    /// follows (docs/scale.md has what each part holds).
    #[arg(long, value_name = "SIZE", default_value = MEMORY_LIMIT, help_heading = "Resources")]
    pub memory_limit: ByteSize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            memory_limit: ByteSize(MEMORY_LIMIT_BYTES),
        }
    }
}

impl Budget {
    /// The budget in bytes.
    pub fn bytes(self) -> u64 {
        self.memory_limit.0
    }
}

/// How much of the machine a stage that both parallelises and budgets its
/// memory takes: [`Jobs`] and [`Budget`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Args, Serialize, Deserialize)]
pub struct Resources {
    #[command(flatten)]
    #[serde(flatten)]
    pub jobs: Jobs,
    #[command(flatten)]
    #[serde(flatten)]
    pub budget: Budget,
}

/// What a stage takes from how it was invoked rather than from its options:
/// whether it draws progress bars, whether it replaces what an earlier run
/// of it left, and the process environment it reads (a cluster scheduler's
/// shard variables, ingest's spill format).
///
/// The binary builds one from the process ([`Env::from_process`]) and each
/// stage's `resolve` folds what it needs into the stage's config, so a
/// stage's run reads no flag and no environment variable of its own. None of
/// it is part of a pipeline file: a file that said "overwrite" would delete
/// labels on every run. Tests and library callers start from
/// [`Env::default`] (no progress, nothing replaced, an empty environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Env {
    /// Draw progress bars on standard error (off with `--no-progress`).
    pub progress: bool,
    /// Replace what an earlier run of the stage left instead of resuming
    /// it: annotate's `--overwrite` (the source's labels), train's
    /// `--restart` (the run's checkpoints and logs). These two stages read
    /// their options from pipeline files too, so the flag lives here, on
    /// the command line only; `bag export --overwrite`, a command with no
    /// pipeline table, keeps it among its options.
    pub overwrite: bool,
    vars: std::collections::BTreeMap<std::ffi::OsString, std::ffi::OsString>,
}

impl Env {
    /// This process's environment, with progress bars as asked.
    pub fn from_process(progress: bool) -> Env {
        Env {
            progress,
            overwrite: false,
            vars: std::env::vars_os().collect(),
        }
    }

    /// The same, replacing what an earlier run left when `overwrite`.
    pub fn overwriting(mut self, overwrite: bool) -> Env {
        self.overwrite = overwrite;
        self
    }

    /// The same, with the environment variable `key` set to `value` (for
    /// tests: a stage's reading of its variables without the process's).
    #[cfg(test)]
    pub(crate) fn with_var(mut self, key: &str, value: &str) -> Env {
        self.vars.insert(key.into(), value.into());
        self
    }

    /// The value of the environment variable `key`, if set (and UTF-8).
    pub fn var(&self, key: &str) -> Option<&str> {
        self.var_os(key)?.to_str()
    }

    /// The value of the environment variable `key`, if set.
    pub fn var_os(&self, key: &str) -> Option<&std::ffi::OsStr> {
        self.vars
            .get(std::ffi::OsStr::new(key))
            .map(|v| v.as_os_str())
    }

    /// The shard a cluster scheduler's array names in this environment
    /// ([`Shard::from_env`]), with where it came from.
    pub(crate) fn shard(&self) -> Result<Option<(Shard, &'static str)>, ShardError> {
        Shard::from_env(|k| self.var(k).map(str::to_owned))
    }
}

/// Where a model runs and what it computes in (`--device`, `--precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Args, Serialize, Deserialize)]
pub struct Compute {
    /// Where the model runs: cpu; cuda (NVIDIA GPUs, a binary built with
    /// `--features cuda`; its linear layers' products run in cuBLASLt when
    /// it loads); or wgpu (AMD, Intel, Apple and NVIDIA GPUs through
    /// Vulkan, Metal or DirectX 12, or Mesa's software Vulkan without a GPU;
    /// a binary built with `--features wgpu`).
    #[arg(long, value_enum, default_value_t = DeviceKind::Cpu, help_heading = "Resources")]
    pub device: DeviceKind,
    /// Floating-point format of the products and activations: f32, bf16
    /// (cuda; training also on the CPU, emulated) or f16 (wgpu devices with
    /// f16), with layer norms and log-softmax in f32; training keeps f32
    /// master weights and optimiser state, and scales the loss in f16.
    #[arg(long, value_enum, default_value_t = Precision::F32, help_heading = "Resources")]
    pub precision: Precision,
    /// On a GPU, refuse to go on where the project's fused attention, layer
    /// norm or SwiGLU does not run: a shape or format they do not take, a
    /// variant that failed its self-test, or CHESSBENCH_ATTENTION /
    /// CHESSBENCH_LAYERS set to `burn`. The command stops with the
    /// fallbacks named, at the latest after the step or batch that met one
    /// (without it, each fallback prints one warning and runs burn's
    /// operations).
    #[arg(long, help_heading = "Resources")]
    #[serde(default)]
    pub require_fused: bool,
}

impl Default for Compute {
    fn default() -> Compute {
        Compute {
            device: DeviceKind::Cpu,
            precision: Precision::F32,
            require_fused: false,
        }
    }
}
