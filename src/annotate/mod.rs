//! The annotate stage: value labels for every board of a run, from one
//! label source at a time ([`crate::store::Source`]): Stockfish's searches
//! ([`search`]; Ruoss et al. 2024, §2.1) or the Lichess evaluation database
//! ([`lichess_evals`]). Each source writes its own chunk files through the
//! store's chunk protocol, checked against its own settings file
//! ([`splits`]), so a killed run resumes where it stopped, any number of
//! shards (Slurm array tasks, Kubernetes pods) can work on one run at once,
//! and one source never overwrites another's labels.
//!
//! [`execute`] runs what the config names: the source and the task
//! ([`Task`]: write the labels, or `--plan`).

pub mod config;
pub mod error;
pub mod lichess_evals;
pub mod plan;
mod pool;
pub(crate) mod rows;
pub mod search;
pub(crate) mod splits;

pub use config::{AnnotateOptions, Task};
pub use error::{AnnotateError, Refusal, RunBusy};
pub use plan::plan;
pub use search::{SplitSummary, Summary, engine_name, missing_chunks, run};

use std::io::{self, Write};

use serde::Serialize;

use self::config::AnnotateConfig;
use crate::ui::Report;

/// What [`execute`] did: the report of the source and task the config
/// chose.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Done {
    /// Stockfish's searches ([`run`]).
    Annotated(Summary),
    /// Stockfish's plan ([`plan`]).
    Planned(plan::Plan),
    /// The evaluation database's labels ([`lichess_evals::run`]).
    LichessEvals(lichess_evals::EvalsSummary),
    /// The evaluation database's coverage of the run ([`lichess_evals::plan`]).
    LichessEvalsCoverage(lichess_evals::reader::Coverage),
}

impl Report for Done {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Done::Annotated(r) => r.render(out),
            Done::Planned(r) => r.render(out),
            Done::LichessEvals(r) => r.render(out),
            Done::LichessEvalsCoverage(r) => r.render(out),
        }
    }

    fn warnings(&self) -> Vec<String> {
        match self {
            Done::Annotated(r) => r.warnings(),
            Done::Planned(r) => r.warnings(),
            Done::LichessEvals(r) => r.warnings(),
            Done::LichessEvalsCoverage(r) => r.warnings(),
        }
    }
}

/// Runs the annotate stage: the source the config names (an evaluation
/// database file, else Stockfish's searches), for `task`.
pub fn execute(config: &AnnotateConfig, task: Task) -> Result<Done, AnnotateError> {
    Ok(match (&config.evals, task) {
        (Some(_), Task::Plan) => Done::LichessEvalsCoverage(lichess_evals::plan(config)?),
        (Some(_), Task::Write) => Done::LichessEvals(lichess_evals::run(config)?),
        (None, Task::Plan) => Done::Planned(plan(config)?),
        (None, Task::Write) => Done::Annotated(run(config)?),
    })
}

/// How annotate shares out `--memory-limit`, for its `--help`: only the
/// evaluation database's labelling divides it ([`lichess_evals::reader::MEMORY`]);
/// Stockfish's searches hold one chunk of boards per engine process
/// whatever the split's size.
pub fn memory_help() -> String {
    format!(
        "  with --evals:\n{}\n  with an engine: one chunk of --chunk-boards boards per engine process, \
whatever the split's size; each engine adds its hash (--hash-mb) and network outside the limit",
        lichess_evals::reader::MEMORY
            .to_string()
            .lines()
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}
