//! Annotate's options ([`AnnotateOptions`]: the command line and the
//! `[annotate]` table of a pipeline file), with the cluster's environment,
//! validated into an [`AnnotateConfig`].

use std::{path::PathBuf, str::FromStr, time::Duration};

use clap::{ArgAction, Args, ValueHint};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::options::{Budget, Env, Jobs, RunArg, Shard, ShardError};
use crate::uci_client::{EngineConfig, Limit, oracle::Mode};

/// Configuration problems, naming the option at fault.
#[derive(Debug, Error)]
pub enum AnnotateConfigError {
    #[error("no run directory: give RUN_DIR or `run` in the pipeline's [annotate] table")]
    NoRun,
    #[error("invalid {option}: {message}")]
    Invalid {
        option: &'static str,
        message: String,
    },
}

impl From<ShardError> for AnnotateConfigError {
    fn from(e: ShardError) -> AnnotateConfigError {
        invalid(e.option, e.message)
    }
}

fn invalid(option: &'static str, message: impl Into<String>) -> AnnotateConfigError {
    AnnotateConfigError::Invalid {
        option,
        message: message.into(),
    }
}

/// `chessbench annotate`'s options: the command line and the `[annotate]`
/// table of a pipeline file (see [`crate::options`]).
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct AnnotateOptions {
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArg,
    /// Splits to annotate [default: all but imported ones].
    #[arg(long = "split", value_name = "NAME", value_delimiter = ',')]
    pub splits: Vec<String>,
    /// Milliseconds per search (the paper: 50) [default when no limit is
    /// given: 50].
    #[arg(long, value_name = "MS", group = "limit", help_heading = "Search")]
    pub movetime_ms: Option<u64>,
    /// Nodes per search (deterministic with --new-game-per-board).
    #[arg(long, value_name = "N", group = "limit", help_heading = "Search")]
    pub nodes: Option<u64>,
    /// Depth per search.
    #[arg(long, value_name = "D", group = "limit", help_heading = "Search")]
    pub depth: Option<u32>,
    /// per_move (the paper: one searchmoves search per legal move) or
    /// multipv (one MultiPV search per board, far cheaper, shallower).
    #[arg(long, value_enum, default_value_t = Mode::PerMove, help_heading = "Search")]
    pub mode: Mode,
    /// Send ucinewgame (clear hash and history) before every board, so a
    /// board's values do not depend on which boards a worker saw before.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = ArgAction::Set, help_heading = "Search")]
    pub new_game_per_board: bool,
    /// Engine executable (a name without '/' is looked up on PATH; a
    /// `stockfish` missing there is /usr/games/stockfish, Debian's).
    #[arg(long, value_name = "PATH", default_value = crate::uci_client::engine::DEFAULT_ENGINE, value_hint = ValueHint::ExecutablePath, help_heading = "Engine")]
    pub engine: PathBuf,
    /// An argument for the engine executable (repeatable).
    #[arg(
        long = "engine-arg",
        value_name = "ARG",
        allow_hyphen_values = true,
        help_heading = "Engine"
    )]
    pub engine_args: Vec<String>,
    /// A UCI option for the engine, NAME=VALUE (repeatable; in a pipeline
    /// file, a table `engine_options = { Name = "value" }`).
    #[arg(long = "engine-option", value_name = "NAME=VALUE", help_heading = "Engine")]
    #[serde(deserialize_with = "engine_options")]
    pub engine_options: Vec<EngineOption>,
    /// Engine hash table size in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 16, help_heading = "Engine")]
    pub hash_mb: u32,
    #[command(flatten)]
    #[serde(flatten)]
    pub jobs: Jobs,
    /// Annotate slice I of N (0-based); also read from SLURM_ARRAY_TASK_ID /
    /// SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX / CHESSBENCH_SHARD_COUNT.
    #[arg(long, value_name = "I/N", help_heading = "Resources")]
    #[serde(with = "crate::options::as_text_opt")]
    pub shard: Option<Shard>,
    /// Boards per committed chunk, a power of two. Memory holds the chunks
    /// in flight (one per worker), whatever the split's size.
    #[arg(long, value_name = "N", default_value_t = 1024, help_heading = "Resources")]
    pub chunk_boards: u64,
    /// Annotate only the first N boards of each split (ids 0..N).
    #[arg(long, value_name = "N", help_heading = "Resources")]
    pub max_boards: Option<u64>,
    /// Tries per board before it goes to `failures` (a resume tries it
    /// again).
    #[arg(long, value_name = "N", default_value_t = 3, help_heading = "Faults")]
    pub max_attempts: u32,
    /// Deadline per search in ms [default: 3 x movetime + 2 s; 10 s + 1 ms
    /// per 100 nodes for a nodes limit; 120 s for a depth limit].
    #[arg(long, value_name = "MS", help_heading = "Faults")]
    pub search_timeout_ms: Option<u64>,
    /// Label the boards from the Lichess evaluation database FILE instead
    /// of searching: `lichess_db_eval.jsonl` (plain or .zst; - for standard
    /// input) or its flattened rows (.csv, .parquet). Rows get source
    /// `lichess_evals`; with --plan, prints the file's coverage of the run.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = "Evaluation database")]
    pub evals: Option<PathBuf>,
    /// Search only the boards the evaluation database did not label (run
    /// `annotate --evals` first), so Stockfish fills what it misses.
    #[arg(long, value_name = "BOOL", default_value_t = false, action = ArgAction::Set, help_heading = "Evaluation database")]
    pub only_missing: bool,
    #[command(flatten)]
    #[serde(flatten)]
    pub budget: Budget,
}

crate::options::stage!(AnnotateOptions, "annotate");

/// A UCI option given to the engine (`setoption name NAME value VALUE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOption {
    pub name: String,
    pub value: String,
}

impl FromStr for EngineOption {
    type Err = String;
    fn from_str(text: &str) -> Result<EngineOption, String> {
        let (name, value) = text
            .split_once('=')
            .ok_or_else(|| format!("expected NAME=VALUE, got {text:?}"))?;
        Ok(EngineOption {
            name: name.trim().to_owned(),
            value: value.trim().to_owned(),
        })
    }
}

impl Serialize for EngineOption {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}={}", self.name, self.value))
    }
}

/// Engine options from a pipeline file's table `{ Name = value }` (values
/// of any scalar type) or from a list of `NAME=VALUE`.
fn engine_options<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<EngineOption>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Table(std::collections::BTreeMap<String, serde_json::Value>),
        List(Vec<String>),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::Table(t) => t
            .into_iter()
            .map(|(name, value)| EngineOption {
                name,
                value: match value {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                },
            })
            .collect(),
        Raw::List(l) => l
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_, _>>()
            .map_err(serde::de::Error::custom)?,
    })
}

impl AnnotateOptions {
    /// Validates. `env` gives the progress bar, whether to delete the
    /// splits' annotations first (`--overwrite`), and the cluster
    /// scheduler's shard when `--shard` is not given.
    pub fn resolve(&self, env: &Env) -> Result<AnnotateConfig, AnnotateConfigError> {
        let run = self.run.run.clone().ok_or(AnnotateConfigError::NoRun)?;
        let limit = match (self.movetime_ms, self.nodes, self.depth) {
            (None, None, None) => Limit::MoveTimeMs(DEFAULT_MOVETIME_MS),
            (Some(ms), None, None) if ms > 0 => Limit::MoveTimeMs(ms),
            (None, Some(n), None) if n > 0 => Limit::Nodes(n),
            (None, None, Some(d)) if d > 0 => Limit::Depth(d),
            _ => {
                return Err(invalid(
                    "limit",
                    "give exactly one positive limit: movetime_ms, nodes or depth",
                ));
            }
        };
        let workers = match self.jobs.jobs {
            Some(0) => return Err(invalid("jobs", "must be at least 1")),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let chunk_boards = self.chunk_boards;
        if !chunk_boards.is_power_of_two() || chunk_boards > crate::store::writer::BOARDS_PER_PART {
            return Err(invalid(
                "chunk_boards",
                format!(
                    "must be a power of two up to {} (so chunks never straddle a boards part file), got {chunk_boards}",
                    crate::store::writer::BOARDS_PER_PART
                ),
            ));
        }
        if self.max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1"));
        }
        let shard = match (self.shard, env.shard()?) {
            (Some(shard), _) => (shard, "--shard"),
            (None, Some(found)) => found,
            (None, None) => (Shard::ALL, "unsharded"),
        };
        let search_timeout = match self.search_timeout_ms {
            Some(0) => return Err(invalid("search_timeout_ms", "must be positive")),
            Some(ms) => Duration::from_millis(ms),
            None => default_timeout(limit),
        };
        if self.hash_mb == 0 {
            return Err(invalid("hash_mb", "must be at least 1"));
        }
        Ok(AnnotateConfig {
            run,
            splits: (!self.splits.is_empty()).then(|| self.splits.clone()),
            engine: EngineConfig {
                path: self.engine.clone(),
                args: self.engine_args.clone(),
                threads: 1,
                hash_mb: self.hash_mb,
                options: self
                    .engine_options
                    .iter()
                    .map(|o| (o.name.clone(), o.value.clone()))
                    .collect(),
                handshake_timeout: Duration::from_secs(20),
            },
            limit,
            mode: self.mode,
            workers,
            chunk_boards,
            max_boards: self.max_boards,
            max_attempts: self.max_attempts,
            search_timeout,
            new_game_per_board: self.new_game_per_board,
            shard: shard.0,
            shard_source: shard.1,
            progress: env.progress,
            overwrite: env.overwrite,
            evals: self.evals.clone(),
            only_missing: self.only_missing,
            memory_limit: self.budget.bytes(),
        })
    }
}

/// The search limit when none is given: the paper's 50 ms per move.
pub(crate) const DEFAULT_MOVETIME_MS: u64 = 50;

/// The deadline of one search: the limit times a margin, plus slack for
/// process scheduling. Nodes and depth limits have no time, so they get a
/// generous fixed deadline (at least 100k nodes/s assumed).
pub(crate) fn default_timeout(limit: Limit) -> Duration {
    match limit {
        Limit::MoveTimeMs(ms) => Duration::from_millis(ms.saturating_mul(3) + 2000),
        Limit::Nodes(n) => Duration::from_millis(10_000 + n / 100),
        Limit::Depth(_) => Duration::from_secs(120),
    }
}

/// A validated annotate configuration.
#[derive(Debug, Clone, Serialize)]
pub struct AnnotateConfig {
    pub run: PathBuf,
    /// `None`: every split of the run.
    pub splits: Option<Vec<String>>,
    pub engine: EngineConfig,
    pub limit: Limit,
    pub mode: Mode,
    /// Engine processes (one search thread each).
    pub workers: usize,
    /// Boards per committed chunk (a power of two).
    pub chunk_boards: u64,
    /// Annotate only boards with id below this, per split.
    pub max_boards: Option<u64>,
    /// Tries per board before it goes to `failures`.
    pub max_attempts: u32,
    /// Deadline per search.
    pub search_timeout: Duration,
    /// `ucinewgame` before every board: values then depend only on the board
    /// (with a nodes or depth limit: reproducible whatever the sharding).
    pub new_game_per_board: bool,
    pub shard: Shard,
    /// Where the shard came from (`--shard`, Slurm, Kubernetes, unsharded).
    pub shard_source: &'static str,
    pub progress: bool,
    /// Delete the splits' existing annotations from this source first
    /// (Stockfish's, or with `evals` the evaluation database's).
    pub overwrite: bool,
    /// Label from this evaluation database file instead of searching.
    pub evals: Option<PathBuf>,
    /// Search only boards the evaluation database did not label.
    pub only_missing: bool,
    /// Bytes the stage may hold (the evaluation database's board index and
    /// labels; engines hold their own hash).
    pub memory_limit: u64,
}

impl AnnotateConfig {
    /// What [`super::execute`] does with this config, for an error's
    /// context: `annotating runs/demo`.
    pub fn doing(&self, task: Task) -> String {
        let run = self.run.display();
        match (&self.evals, task) {
            (Some(_), Task::Plan) => format!("measuring the coverage of {run}"),
            (Some(_), Task::Write) => {
                format!("labelling {run} from the evaluation database")
            }
            (None, Task::Plan) => format!("planning the annotation of {run}"),
            (None, Task::Write) => format!("annotating {run}"),
        }
    }

    /// The settings that must not change while a split is being annotated
    /// (resumes and shards must agree on them).
    pub(crate) fn fingerprint(&self) -> serde_json::Value {
        serde_json::json!({
            "limit": self.limit,
            "mode": self.mode,
            "chunk_boards": self.chunk_boards,
            "max_boards": self.max_boards,
            "new_game_per_board": self.new_game_per_board,
            "hash_mb": self.engine.hash_mb,
            "engine_options": self.engine.options,
            "only_missing": self.only_missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        pairs
            .iter()
            .fold(Env::default(), |env, (k, v)| env.with_var(k, v))
    }

    #[test]
    fn the_shard_option_wins_over_the_cluster_environment() {
        let k8s = [
            ("JOB_COMPLETION_INDEX", "3"),
            ("CHESSBENCH_SHARD_COUNT", "8"),
        ];
        // --shard wins over the environment.
        let o = AnnotateOptions {
            run: RunArg {
                run: Some("r".into()),
            },
            shard: Some(Shard { index: 0, count: 2 }),
            ..Default::default()
        };
        assert_eq!(
            o.resolve(&env(&k8s)).unwrap().shard,
            Shard { index: 0, count: 2 }
        );
        let o = AnnotateOptions { shard: None, ..o };
        let config = o.resolve(&env(&k8s)).unwrap();
        assert_eq!(config.shard, Shard { index: 3, count: 8 });
        assert!(!config.progress && !config.overwrite);
        let mut noisy = env(&k8s).overwriting(true);
        noisy.progress = true;
        let config = o.resolve(&noisy).unwrap();
        assert!(config.progress && config.overwrite);
    }

    #[test]
    fn limits() {
        let base = || AnnotateOptions {
            run: RunArg {
                run: Some("r".into()),
            },
            ..Default::default()
        };
        assert_eq!(
            base().resolve(&env(&[])).unwrap().limit,
            Limit::MoveTimeMs(50)
        );
        let o = AnnotateOptions {
            nodes: Some(500),
            ..base()
        };
        assert_eq!(o.resolve(&env(&[])).unwrap().limit, Limit::Nodes(500));
        let o = AnnotateOptions {
            nodes: Some(500),
            depth: Some(3),
            ..base()
        };
        assert!(o.resolve(&env(&[])).is_err());
        let o = AnnotateOptions {
            chunk_boards: 1000,
            ..base()
        };
        assert!(o.resolve(&env(&[])).is_err());
        assert_eq!(base().resolve(&env(&[])).unwrap().mode, Mode::PerMove);
    }
}

/// What one `chessbench annotate` does with its config: write the labels,
/// or only measure what writing them would do (`--plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    Write,
    Plan,
}
