//! `chessbench ablate`'s options and what they resolve to: the grid read
//! and checked, the task, the phase and the shard.

use std::path::PathBuf;

use clap::{Args, ValueEnum, ValueHint};
use serde::Serialize;

use super::{error::AblateError, grid::Grid};
use crate::options::{Env, Shard};

/// Which part of the grid to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The data, then the variants.
    All,
    /// Annotate the base run and the data-level variants' train splits
    /// (sharded as `annotate --shard`).
    Data,
    /// Train and evaluate the variants (sharded by variant).
    Train,
}

/// `chessbench ablate`'s options.
#[derive(Debug, Clone, Args)]
pub struct AblateOptions {
    /// The grid file: a base recipe (its [annotate], [train] and [eval]
    /// tables, as in a pipeline file) and the axes varied one at a time
    /// ([ablate.axes]).
    #[arg(value_name = "GRID", value_hint = ValueHint::FilePath)]
    pub grid: PathBuf,
    /// The run directory trained on; results go to RUN_DIR/ablate/NAME
    /// [default: the grid's `run`].
    #[arg(value_name = "RUN_DIR", value_hint = ValueHint::DirPath)]
    pub run: Option<PathBuf>,
    /// Print the variants, what is finished and the projected cost; run
    /// nothing.
    #[arg(long, conflicts_with = "report")]
    pub plan: bool,
    /// Write RUN_DIR/ablate/NAME/report.md and its plots from the results
    /// so far; run nothing.
    #[arg(long)]
    pub report: bool,
    /// The part to run: data (annotations), train (variants), or all.
    #[arg(long, value_enum, default_value_t = Phase::All)]
    pub phase: Phase,
    /// Variants trained at once [default: the grid's `parallel`, else 1].
    #[arg(long, value_name = "N", help_heading = "Resources")]
    pub parallel: Option<usize>,
    /// Run only variants I, I+N, I+2N, ... (0-based, in --plan's order);
    /// with --phase data, annotate's slice I of N of every annotation. Also
    /// read from SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT or
    /// JOB_COMPLETION_INDEX / CHESSBENCH_SHARD_COUNT.
    #[arg(long, value_name = "I/N", help_heading = "Resources")]
    pub shard: Option<Shard>,
}

/// `chessbench ablate`'s options resolved: the grid read and checked (every
/// variant's recipe resolved as its stage resolves it), the shard settled.
#[derive(Debug, Clone)]
pub struct AblateConfig {
    pub grid: Grid,
    /// What [`super::execute`] does: run the grid, print its plan, or write its
    /// report (`--plan`, `--report`).
    pub task: Task,
    pub phase: Phase,
    /// Variants trained at once: `--parallel`, else the grid's.
    pub parallel: usize,
    /// This process's slice of the variants, when there is more than one.
    pub shard: Option<Shard>,
    /// Draw progress bars (the annotations', and a variant's when one
    /// trains at a time).
    pub progress: bool,
}

impl AblateConfig {
    /// What [`super::execute`] does with this config, for an error's context.
    pub fn doing(&self) -> String {
        let grid = self.grid.file.display();
        match self.task {
            Task::Run => format!("running the grid {grid}"),
            Task::Plan => format!("planning the grid {grid}"),
            Task::Report => format!("reporting on the grid {grid}"),
        }
    }
}

impl AblateOptions {
    /// Reads the grid and settles the shard (the flag, else the batch
    /// system's environment); a bad grid fails here, naming its file and
    /// line, before anything is written. `env` gives the progress bars and
    /// the batch system's shard.
    pub fn resolve(&self, env: &Env) -> Result<AblateConfig, AblateError> {
        let grid = Grid::load(&self.grid, self.run.as_deref())?;
        let shard = match self.shard {
            Some(s) => Some(s),
            None => env.shard()?.map(|(s, _)| s),
        }
        .filter(|s| s.count > 1);
        let task = if self.plan {
            Task::Plan
        } else if self.report {
            Task::Report
        } else {
            Task::Run
        };
        Ok(AblateConfig {
            parallel: self.parallel.unwrap_or(grid.parallel).max(1),
            grid,
            task,
            phase: self.phase,
            shard,
            progress: env.progress,
        })
    }
}

/// What one `chessbench ablate` does with its grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Train and score the variants not finished yet.
    Run,
    /// Print every variant and what it would run (`--plan`).
    Plan,
    /// Write the report and plots from the results (`--report`).
    Report,
}
