//! `chessbench ablate GRID [RUN_DIR]`: the paper's ablations as one command.
//!
//! A grid file ([`grid`]) names a base recipe and the axes varied one at a
//! time around it; `ablate` trains every variant (once per seed) with the
//! `train` stage, scores it with the `eval` stage on the same test boards
//! and puzzles, and writes one row per variant and metric to
//! `RUN/ablate/NAME/results/` ([`results`]). Data-level axes (Stockfish's
//! search limit) annotate the train split again into the variant's own run
//! directory, which shares the ingest tables and the base's test labels
//! with RUN. `--report` ([`report`]) puts the results beside the paper's
//! ([`paper`]) with plots of the training curves.
//!
//! It composes the stages through their options and entry points, as the
//! command line does, and reads their outputs from their files. It holds
//! only the grid and the results; each variant's training and evaluation
//! keep their own memory budgets. A variant that fails is recorded with its
//! error and the others go on; a killed grid resumes (finished variants are
//! kept, unfinished ones resume from their checkpoints).
//!
//! Here: [`execute`] and the run over the variants. Beneath it, `config`
//! (the options and what they resolve to), `plan` (`--plan` and each
//! variant's state), `data` (the data phase's annotations), `variant` (one
//! variant trained, scored and recorded) and `error`.

mod config;
mod data;
mod error;
pub mod grid;
pub mod paper;
mod plan;
pub mod report;
pub mod results;
mod variant;

use std::{
    io::{self, Write},
    path::PathBuf,
    sync::Mutex,
    time::Instant,
};

use serde::Serialize;

pub use self::{
    config::{AblateConfig, AblateOptions, Phase, Task},
    error::AblateError,
    grid::{Grid, GridError, Level, Variant},
    plan::{Plan, State, VariantLine, plan},
};
use self::{
    data::prepare_data,
    plan::states,
    variant::{error_row, run_variant},
};
use crate::{annotate, store::StoreError, ui::Report};

/// What [`execute`] did: the report of the task the config chose.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Done {
    Ran(Summary),
    Planned(Plan),
    Reported(report::ReportSummary),
}

impl Done {
    /// The variants that failed, said as the process's error (their errors
    /// are in the results); `None` when none did.
    pub fn failures(&self) -> Option<String> {
        match self {
            Done::Ran(s) if !s.failed.is_empty() => Some(format!(
                "{} of {} variants failed (their errors are in {})",
                s.failed.len(),
                s.variants,
                s.results.display()
            )),
            _ => None,
        }
    }
}

impl Report for Done {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Done::Ran(r) => r.render(out),
            Done::Planned(r) => r.render(out),
            Done::Reported(r) => r.render(out),
        }
    }

    fn warnings(&self) -> Vec<String> {
        match self {
            Done::Ran(r) => r.warnings(),
            Done::Planned(r) => r.warnings(),
            Done::Reported(r) => r.warnings(),
        }
    }
}

/// Runs the task the config names ([`AblateConfig::task`]).
pub fn execute(config: &AblateConfig) -> Result<Done, AblateError> {
    Ok(match config.task {
        Task::Run => Done::Ran(run(config)?),
        Task::Plan => Done::Planned(plan(config)?),
        Task::Report => Done::Reported(report::write(&config.grid)?),
    })
}

/// What `ablate` did.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub name: String,
    pub results: PathBuf,
    pub phase: Phase,
    pub shard: Option<String>,
    /// Variants of this shard.
    pub variants: usize,
    pub finished_before: usize,
    pub finished_now: usize,
    /// `(variant, seed, error)` of the variants that failed.
    pub failed: Vec<(String, u64, String)>,
    /// `(variant, seed, step)` of the variants whose training resumed from
    /// a checkpoint an interrupted run left (a requeued task, a rerun).
    pub resumed: Vec<(String, u64, u64)>,
    pub annotated: Vec<String>,
    pub seconds: f64,
}

impl Report for Summary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let shard = self
            .shard
            .as_ref()
            .map(|s| format!(" (shard {s})"))
            .unwrap_or_default();
        if !self.annotated.is_empty() {
            writeln!(out, "annotated: {}", self.annotated.join(", "))?;
        }
        if self.phase != Phase::Data {
            writeln!(
                out,
                "ablation {}{shard}: {} variants, {} finished before, {} finished now, {} failed ({:.0} s)",
                self.name,
                self.variants,
                self.finished_before,
                self.finished_now,
                self.failed.len(),
                self.seconds
            )?;
        }
        for (id, seed, step) in &self.resumed {
            writeln!(
                out,
                "  resumed: {id} seed {seed} from its checkpoint at step {step}"
            )?;
        }
        for (id, seed, error) in &self.failed {
            writeln!(out, "  failed: {id} seed {seed}: {error}")?;
        }
        writeln!(out, "results: {}", self.results.display())
    }
}

/// A variant's id, seed and whether it finished, with the checkpoint step
/// its training resumed from (else its error).
type Outcome = (String, u64, Result<Option<u64>, String>);

/// Runs the grid (or the phase and shard `config` names).
pub fn run(config: &AblateConfig) -> Result<Summary, AblateError> {
    let start = Instant::now();
    let progress = config.progress;
    let grid = &config.grid;
    // Every variant reads the grid's run: refuse one that is not a run
    // before anything is written under it.
    if !grid.run.join(crate::store::commit::MANIFEST).is_file() {
        return Err(StoreError::NotARun(grid.run.clone()).into());
    }
    let shard = config.shard;
    let annotates = grid.base_annotate.is_some() || !grid.data.is_empty();
    if config.phase == Phase::All && shard.is_some() && annotates {
        return Err(AblateError::ShardedData);
    }
    let mut annotated = Vec::new();
    let mut data_failures: Vec<(String, String)> = Vec::new();
    if config.phase != Phase::Train {
        (annotated, data_failures) = prepare_data(grid, shard, progress)?;
    }
    let mut summary = Summary {
        name: grid.name.clone(),
        results: grid.dir().join("results"),
        phase: config.phase,
        shard: shard.map(|s| s.to_string()),
        variants: 0,
        finished_before: 0,
        finished_now: 0,
        failed: Vec::new(),
        resumed: Vec::new(),
        annotated,
        seconds: 0.0,
    };
    if config.phase == Phase::Data {
        summary.seconds = start.elapsed().as_secs_f64();
        return Ok(summary);
    }
    check_annotated(grid, &data_failures)?;
    let rows = results::read_all(&grid.dir())?;
    let states = states(grid, &rows);
    let mine: Vec<(usize, &Variant)> = grid
        .variants
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|s| s.owns(*i)))
        .collect();
    summary.variants = mine.len();
    let todo: Vec<&Variant> = mine
        .iter()
        .filter(|(i, _)| states[*i] != State::Finished)
        .map(|(_, v)| *v)
        .collect();
    summary.finished_before = mine.len() - todo.len();
    // Variants whose data could not be annotated: their error rows.
    let todo: Vec<&Variant> = todo
        .into_iter()
        .filter(|v| {
            let Some((_, error)) = data_failures.iter().find(|(id, _)| *id == v.id) else {
                return true;
            };
            let error = format!("annotating its data: {error}");
            let rows = [error_row(grid, v, &error, 0.0)];
            let file = results::path(&grid.dir(), &v.train_name);
            let error = match results::write(&file, &rows) {
                Ok(()) => error,
                Err(w) => format!("{error} (and recording the failure: {w})"),
            };
            summary.failed.push((v.id.clone(), v.seed, error));
            false
        })
        .collect();
    for (id, seed, outcome) in train_variants(grid, todo, config.parallel, progress) {
        match outcome {
            Ok(resumed) => {
                summary.finished_now += 1;
                if let Some(step) = resumed {
                    summary.resumed.push((id, seed, step));
                }
            }
            Err(e) => summary.failed.push((id, seed, e)),
        }
    }
    summary.failed.sort();
    summary.resumed.sort();
    summary.seconds = start.elapsed().as_secs_f64();
    Ok(summary)
}

/// Refuses to train before the annotations are complete (after `--phase
/// data` on every shard, or the data phase just run): the base run's, and
/// each data-level variant's but those whose data failed (`data_failures`,
/// recorded as their variants' errors).
fn check_annotated(grid: &Grid, data_failures: &[(String, String)]) -> Result<(), AblateError> {
    let missing = |config: &annotate::config::AnnotateConfig| {
        annotate::missing_chunks(config).map_err(|source| AblateError::Annotate {
            dir: config.run.clone(),
            source,
        })
    };
    if let Some(base) = &grid.base_annotate {
        let n = missing(base)?;
        if n > 0 {
            return Err(AblateError::BaseNotAnnotated {
                run: base.run.clone(),
                missing: n,
            });
        }
    }
    for d in &grid.data {
        if data_failures.iter().any(|(id, _)| *id == d.id) {
            continue;
        }
        let n = if d.dir.join(crate::store::commit::MANIFEST).is_file() {
            missing(&d.annotate)?
        } else {
            1
        };
        if n > 0 {
            return Err(AblateError::DataMissing {
                id: d.id.clone(),
                dir: d.dir.clone(),
                missing: n,
            });
        }
    }
    Ok(())
}

/// Trains and scores `todo`, `parallel` variants at once (a variant's own
/// progress bars only when one trains at a time), and returns each one's
/// outcome in the order they finished.
fn train_variants(
    grid: &Grid,
    todo: Vec<&Variant>,
    parallel: usize,
    progress: bool,
) -> Vec<Outcome> {
    let total = todo.len();
    let queue = Mutex::new(todo.into_iter().enumerate());
    let outcomes: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let one_at_a_time = parallel == 1;
    std::thread::scope(|scope| {
        for _ in 0..parallel.min(total) {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().map(|mut q| q.next()).ok().flatten();
                    let Some((n, variant)) = next else { break };
                    if progress {
                        eprintln!(
                            "[{}/{total}] {} seed {}: training {}",
                            n + 1,
                            variant.id,
                            variant.seed,
                            variant.train.out_dir().display()
                        );
                    }
                    let outcome = run_variant(grid, variant, progress && one_at_a_time);
                    if progress {
                        match &outcome {
                            Ok((line, _)) => eprintln!("[{}/{total}] {}", n + 1, line),
                            Err(e) => eprintln!(
                                "[{}/{total}] {} seed {} failed: {e}",
                                n + 1,
                                variant.id,
                                variant.seed
                            ),
                        }
                    }
                    if let Ok(mut o) = outcomes.lock() {
                        o.push((
                            variant.id.clone(),
                            variant.seed,
                            outcome.map(|(_, resumed)| resumed),
                        ));
                    }
                }
            });
        }
    });
    outcomes.into_inner().unwrap_or_default()
}
