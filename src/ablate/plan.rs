//! `ablate --plan`: every variant, its state in the results directory and
//! the projected cost.

use std::{
    io::{self, Write},
    path::PathBuf,
};

use serde::Serialize;

use super::{
    config::AblateConfig,
    error::AblateError,
    grid::{Grid, Level},
    results::{self, Row},
};
use crate::{train, ui::Report};

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
pub(super) fn states(grid: &Grid, rows: &[Row]) -> Vec<State> {
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
