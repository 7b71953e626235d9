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

pub mod grid;
pub mod paper;
pub mod report;
pub mod results;

use std::{
    io::{self, Write},
    path::{Path, PathBuf},
    sync::Mutex,
    time::Instant,
};

use clap::{Args, ValueEnum, ValueHint};
use serde::Serialize;
use thiserror::Error;

pub use grid::{Grid, GridError, Level, Variant};
use results::Row;

use crate::{
    annotate,
    eval::{
        self,
        run::{EvalConfig, EvalSummary},
    },
    options::{Env, Shard, ShardError},
    store::{StoreError, chunks::ENTRIES, schema::Table},
    train::{self, config::TrainConfig},
    ui::{Report, describe},
};

/// What went wrong before or around the variants (a variant's own failure
/// is a row of the results, not an error).
#[derive(Debug, Error)]
pub enum AblateError {
    #[error(transparent)]
    Grid(#[from] GridError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("annotating {}: {source}", dir.display())]
    Annotate {
        dir: PathBuf,
        source: annotate::AnnotateError,
    },
    #[error(
        "the data of {id} is not fully annotated ({missing} chunks missing in {}): run `chessbench ablate GRID --phase data` first",
        dir.display()
    )]
    DataMissing {
        id: String,
        dir: PathBuf,
        missing: u64,
    },
    #[error(
        "a sharded grid that annotates (an [annotate] table or search-limit axes) runs in two phases: `--phase data` on every shard, then `--phase train`"
    )]
    ShardedData,
    #[error(
        "the base run {} is not fully annotated ({missing} chunks missing): run `chessbench ablate GRID --phase data` first",
        run.display()
    )]
    BaseNotAnnotated { run: PathBuf, missing: u64 },
    #[error("writing the report")]
    Report(#[from] report::ReportError),
}

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
    /// What [`execute`] does: run the grid, print its plan, or write its
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
    /// What [`execute`] does with this config, for an error's context.
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

/// A variant's state in the results directory.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum State {
    /// Its rows are in the results table.
    Finished,
    /// Its `error` row is in the results table (a rerun tries again).
    Failed {
        error: String,
    },
    /// Its rows are of another recipe than the grid's now (a rerun trains
    /// it again: a changed `steps` continues the run, another change is
    /// refused by training, naming the option).
    Stale,
    /// Trained up to `step` (a rerun resumes there).
    Partial {
        step: u64,
    },
    Pending,
}

/// One variant in `--plan` or the summary.
#[derive(Debug, Clone, Serialize)]
pub struct VariantLine {
    pub index: usize,
    pub id: String,
    pub seed: u64,
    pub level: Level,
    pub train_name: String,
    pub steps: u64,
    pub samples: u64,
    #[serde(flatten)]
    pub state: State,
}

/// `ablate --plan`: the variants and the projected cost.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub grid: PathBuf,
    pub name: String,
    pub run: PathBuf,
    pub results: PathBuf,
    pub seeds: Vec<u64>,
    pub variants: Vec<VariantLine>,
    /// Whether the data phase annotates anything (the base's `[annotate]`
    /// table or search-limit axes): a sharded grid then runs `--phase data`
    /// first.
    pub annotates: bool,
    /// Data-level variants: their run directory and search limit.
    pub data: Vec<(String, PathBuf, String)>,
    pub samples: u64,
    pub samples_per_s: Option<f64>,
    pub measured_on: Option<String>,
    /// Hours of training on one device (variants one after another).
    pub device_hours: Option<f64>,
    /// Hours on a cluster with a device per variant (the longest variant).
    pub cluster_hours: Option<f64>,
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

impl Report for Plan {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "ablation {} ({}): {} variants on {}, seeds {:?}",
            self.name,
            self.grid.display(),
            self.variants.len(),
            self.run.display(),
            self.seeds
        )?;
        for (id, dir, limit) in &self.data {
            writeln!(
                out,
                "  data {id}: the train split annotated at {limit} into {}",
                dir.display()
            )?;
        }
        writeln!(
            out,
            "  {:>3}  {:<28} {:>5}  {:<6} {:>12}  state",
            "#", "variant", "seed", "level", "samples"
        )?;
        for v in &self.variants {
            let state = match &v.state {
                State::Finished => "finished".to_owned(),
                State::Stale => "finished with another recipe: runs again".to_owned(),
                State::Failed { error } => format!("failed: {error}"),
                State::Partial { step } => format!("step {step} of {}", v.steps),
                State::Pending => "pending".to_owned(),
            };
            writeln!(
                out,
                "  {:>3}  {:<28} {:>5}  {:<6} {:>12}  {state}",
                v.index,
                v.id,
                v.seed,
                v.level.name(),
                crate::ui::group(v.samples)
            )?;
        }
        writeln!(
            out,
            "training samples in all: {}",
            crate::ui::group(self.samples)
        )?;
        match (self.samples_per_s, self.device_hours, self.cluster_hours) {
            (Some(rate), Some(one), Some(cluster)) => writeln!(
                out,
                "projected at {rate:.0} samples/s{}: {one:.1} h on one device, variants one after another; {cluster:.1} h on a cluster with one device per variant ({} tasks)",
                self.measured_on
                    .as_ref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default(),
                self.variants.len()
            )?,
            _ => writeln!(
                out,
                "no projected time: give the base recipe's measured samples_per_s in [ablate]"
            )?,
        }
        writeln!(out, "results: {}", self.results.display())
    }
}

/// The state of every variant from the results files and checkpoints.
fn states(grid: &Grid, rows: &[Row]) -> Vec<State> {
    grid.variants
        .iter()
        .map(|v| {
            let mine: Vec<&Row> = rows
                .iter()
                .filter(|r| r.train_name == v.train_name)
                .collect();
            if let Some(r) = mine.iter().find(|r| r.error.is_some()) {
                return State::Failed {
                    error: r.error.clone().unwrap_or_default(),
                };
            }
            if !mine.is_empty() {
                // Rows of another recipe under the same name (the grid's
                // base changed since) are run again.
                let current = mine.iter().all(|r| {
                    serde_json::from_str::<train::config::TrainConfig>(&r.recipe).is_ok_and(
                        |saved| {
                            saved.steps == v.train.steps
                                && v.train.incompatible_with(&saved).is_empty()
                        },
                    )
                });
                if current {
                    return State::Finished;
                }
                return State::Stale;
            }
            let newest = crate::model::checkpoint::list(&v.train.out_dir())
                .ok()
                .and_then(|list| list.iter().map(|(step, _)| *step).max());
            match newest {
                Some(step) => State::Partial { step },
                None => State::Pending,
            }
        })
        .collect()
}

/// `--plan`.
pub fn plan(config: &AblateConfig) -> Result<Plan, AblateError> {
    let grid = &config.grid;
    let rows = results::read_all(&grid.dir())?;
    let states = states(grid, &rows);
    let variants: Vec<VariantLine> = grid
        .variants
        .iter()
        .zip(states)
        .enumerate()
        .map(|(index, (v, state))| VariantLine {
            index,
            id: v.id.clone(),
            seed: v.seed,
            level: v.level,
            train_name: v.train_name.clone(),
            steps: v.train.steps,
            samples: v.train.steps * v.train.batch_size as u64,
            state,
        })
        .collect();
    let samples: u64 = variants.iter().map(|v| v.samples).sum();
    let longest = variants.iter().map(|v| v.samples).max().unwrap_or(0);
    let hours = |n: u64| grid.samples_per_s.map(|r| n as f64 / r / 3600.0);
    Ok(Plan {
        grid: grid.file.clone(),
        name: grid.name.clone(),
        run: grid.run.clone(),
        results: grid.dir().join("results"),
        seeds: grid.seeds.clone(),
        annotates: grid.base_annotate.is_some() || !grid.data.is_empty(),
        data: grid
            .data
            .iter()
            .map(|d| (d.id.clone(), d.dir.clone(), d.annotate.limit.to_string()))
            .collect(),
        variants,
        samples,
        samples_per_s: grid.samples_per_s,
        measured_on: grid.measured_on.clone(),
        device_hours: hours(samples),
        cluster_hours: hours(longest),
    })
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
    // Training needs complete annotations (after `--phase data` on every
    // shard, or the data phase just run).
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
    let parallel = config.parallel;
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
    for (id, seed, outcome) in outcomes.into_inner().unwrap_or_default() {
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

/// What the data phase annotated, and the data-level variants it could not
/// annotate with the error.
type Annotated = (Vec<String>, Vec<(String, String)>);

/// Annotates the base run (its `[annotate]` table: a no-op when done) and
/// every data-level variant's train split into its own run directory. A
/// data-level variant that cannot be annotated is returned with its error
/// (its variants are recorded as failed, the others go on); a base that
/// cannot be annotated is an error.
fn prepare_data(
    grid: &Grid,
    shard: Option<Shard>,
    progress: bool,
) -> Result<Annotated, AblateError> {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let annotate = |mut config: annotate::config::AnnotateConfig| -> Result<(), AblateError> {
        if let Some(s) = shard {
            config.shard = s;
            config.shard_source = "--shard";
        }
        config.progress = progress;
        let dir = config.run.clone();
        annotate::run(&config).map_err(|source| AblateError::Annotate { dir, source })?;
        Ok(())
    };
    if let Some(base) = &grid.base_annotate {
        annotate(base.clone())?;
        done.push("base".to_owned());
    }
    // The splits a variant's training scores itself on, other than the one
    // it is annotated again for (evaluation reads RUN itself).
    let base = grid.variants.first().map(|v| &v.train);
    let eval_splits: Vec<String> = base
        .iter()
        .flat_map(|t| t.eval_split.clone().filter(|s| *s != t.split))
        .collect();
    for d in &grid.data {
        let outcome = link_run(&grid.run, &d.dir, &eval_splits)
            .map_err(AblateError::from)
            .and_then(|()| annotate(d.annotate.clone()));
        match outcome {
            Ok(()) => done.push(d.id.clone()),
            Err(e) => {
                if progress {
                    eprintln!("{}: {}", d.id, describe(&e));
                }
                failed.push((d.id.clone(), describe(&e)));
            }
        }
    }
    Ok((done, failed))
}

/// Makes `dir` (inside `base`) a run directory with `base`'s ingest tables
/// (linked), its manifest (copied: annotate records itself there) and its
/// annotations of `eval_splits` (linked), so a variant learns from its own
/// annotation of the train split and is scored on the base's test labels.
/// Links are relative (the run directory may move), and shards preparing
/// the same directory at once all succeed.
fn link_run(base: &Path, dir: &Path, eval_splits: &[String]) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
    let up = dir
        .strip_prefix(base)
        .map(|rel| rel.components().count())
        .unwrap_or(0);
    let manifest = dir.join(crate::store::commit::MANIFEST);
    if !manifest.exists() {
        let from = base.join(crate::store::commit::MANIFEST);
        let bytes = std::fs::read(&from).map_err(|e| StoreError::io(&from, e))?;
        // Written beside, then linked into place only if absent: a shard
        // that got there first (and may have recorded its annotation in it)
        // keeps its copy.
        let tmp = dir.join(format!(".manifest.json.{}.tmp", std::process::id()));
        std::fs::write(&tmp, &bytes).map_err(|e| StoreError::io(&tmp, e))?;
        let linked = std::fs::hard_link(&tmp, &manifest);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::io(&manifest, e)),
        }
    }
    // `to` -> `target` (relative to `to`'s directory), unless `to` already
    // resolves; a dangling link is replaced.
    let link = |target: PathBuf, to: PathBuf| -> Result<(), StoreError> {
        if to.exists() {
            return Ok(());
        }
        if std::fs::symlink_metadata(&to).is_ok() {
            let _ = std::fs::remove_file(&to);
        }
        match std::os::unix::fs::symlink(&target, &to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(StoreError::io(&to, e)),
        }
    };
    let parents = |n: usize| -> PathBuf { (0..n).map(|_| "..").collect() };
    for table in Table::INGEST {
        if base.join(table.name()).exists() {
            link(parents(up).join(table.name()), dir.join(table.name()))?;
        }
    }
    for table in [
        Table::StateValues.name(),
        Table::ActionValues.name(),
        Table::Failures.name(),
        ENTRIES,
    ] {
        for split in eval_splits {
            let name = format!("split={split}");
            if base.join(table).join(&name).exists() {
                let parent = dir.join(table);
                std::fs::create_dir_all(&parent).map_err(|e| StoreError::io(&parent, e))?;
                link(parents(up + 1).join(table).join(&name), parent.join(&name))?;
            }
        }
    }
    Ok(())
}

/// A results row of `variant`: one metric at `step`, or (`error`) why it
/// failed.
fn variant_row(
    grid: &Grid,
    variant: &Variant,
    (metric, value, step): (&str, Option<f64>, u64),
    error: Option<&str>,
    seconds: f64,
) -> Row {
    Row {
        grid: grid.name.clone(),
        variant: variant.id.clone(),
        axis: variant.axis.clone(),
        setting: variant.setting.clone(),
        level: variant.level.name().to_owned(),
        seed: variant.seed,
        train_name: variant.train_name.clone(),
        metric: metric.to_owned(),
        value,
        step,
        checkpoint: variant.eval.checkpoint.display().to_string(),
        recipe: serde_json::to_string(&variant.train).unwrap_or_default(),
        error: error.map(str::to_owned),
        seconds,
    }
}

/// The `error` row of a variant that failed.
fn error_row(grid: &Grid, variant: &Variant, error: &str, seconds: f64) -> Row {
    variant_row(grid, variant, ("error", None, 0), Some(error), seconds)
}

/// Trains and evaluates one variant and writes its results file (its rows,
/// or its `error` row). Returns the line to print, or the error.
fn run_variant(
    grid: &Grid,
    variant: &Variant,
    progress: bool,
) -> Result<(String, Option<u64>), String> {
    let start = Instant::now();
    let file = results::path(&grid.dir(), &variant.train_name);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        train_and_evaluate(variant, progress)
    }))
    .unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        Err(format!("crashed: {message}"))
    });
    let (rows, line) = match outcome {
        Ok((summary, evaluation)) => {
            let metrics = metrics(&summary, &evaluation);
            let line = format!(
                "{} seed {}: {} ({:.0} s)",
                variant.id,
                variant.seed,
                metrics
                    .iter()
                    .map(|(k, v)| format!("{k} {}", v.map_or("-".into(), |v| format!("{v:.4}"))))
                    .collect::<Vec<_>>()
                    .join(", "),
                start.elapsed().as_secs_f64()
            );
            let rows: Vec<Row> = metrics
                .into_iter()
                .map(|(k, v)| {
                    let seconds = start.elapsed().as_secs_f64();
                    variant_row(grid, variant, (&k, v, evaluation.step), None, seconds)
                })
                .collect();
            (rows, Ok((line, summary.resumed_from)))
        }
        Err(e) => (
            vec![error_row(grid, variant, &e, start.elapsed().as_secs_f64())],
            Err(e),
        ),
    };
    match results::write(&file, &rows) {
        Ok(()) => line,
        Err(w) => Err(match line {
            Ok(_) => format!("writing {}: {w}", file.display()),
            Err(e) => format!("{e} (and recording the failure: {w})"),
        }),
    }
}

fn train_and_evaluate(
    variant: &Variant,
    progress: bool,
) -> Result<(train::run::Summary, EvalSummary), String> {
    let train = TrainConfig {
        progress,
        ..variant.train.clone()
    };
    let summary = train::run(&train).map_err(|e| format!("training: {}", describe(&e)))?;
    let eval = EvalConfig {
        progress,
        ..variant.eval.clone()
    };
    let evaluation = eval::run(&eval).map_err(|e| format!("evaluating: {}", describe(&e)))?;
    Ok((summary, evaluation))
}

/// The metrics of one variant, in the results' order: the paper's three
/// (puzzle accuracy, action accuracy, Kendall's tau), then log-loss and the
/// rest. Puzzle and action accuracies are fractions.
fn metrics(summary: &train::run::Summary, e: &EvalSummary) -> Vec<(String, Option<f64>)> {
    let mut m: Vec<(String, Option<f64>)> = Vec::new();
    if let Some(p) = e.puzzles.first() {
        m.push(("puzzle_accuracy".into(), Some(p.accuracy)));
    }
    if let Some(s) = &e.metrics {
        m.push(("action_accuracy".into(), Some(s.action_accuracy)));
        m.push(("kendall_tau".into(), s.kendall_tau));
        m.push(("log_loss".into(), s.log_loss));
        m.push(("l2_win_prob".into(), s.l2_win_prob));
        m.push(("entropy".into(), s.entropy));
    }
    let player = format!("{}@{}", e.name, e.step);
    if let Some(r) = e.ratings.iter().find(|r| r.player == player) {
        m.push(("elo".into(), Some(r.elo)));
    }
    for g in &e.games {
        m.push((format!("score_vs_{}", g.opponent), Some(g.score)));
    }
    if let Some(t) = &summary.eval {
        m.push(("train_eval_log_loss".into(), Some(t.log_loss)));
        m.push(("marginal_log_loss".into(), Some(t.marginal_log_loss)));
    }
    // A run finished by an earlier invocation logs no step now: its last
    // logged loss.
    let last_logged = || {
        report::train_loss(&summary.out_dir)
            .last()
            .map(|&(_, loss)| loss)
    };
    m.push(("train_loss".into(), summary.last_loss.or_else(last_logged)));
    m
}
