//! Annotate configuration: raw options (the `[annotate]` table of a pipeline
//! file, overridden by the command line and the cluster's environment)
//! validated into an [`AnnotateConfig`].

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::uci::{EngineConfig, Limit, engine::default_engine_path};

/// Configuration problems, naming the option at fault.
#[derive(Debug, Error)]
pub enum AnnotateConfigError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Toml { path: PathBuf, message: String },
    #[error("no run directory: give RUN_DIR or `run` in the pipeline's [annotate] table")]
    NoRun,
    #[error("invalid {option}: {message}")]
    Invalid {
        option: &'static str,
        message: String,
    },
}

fn invalid(option: &'static str, message: impl Into<String>) -> AnnotateConfigError {
    AnnotateConfigError::Invalid {
        option,
        message: message.into(),
    }
}

/// How action values are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The paper's oracle: one search per legal move, restricted to it with
    /// `searchmoves`, plus one search for the state value.
    PerMove,
    /// One MultiPV search per board covering every legal move (far cheaper,
    /// shallower per move).
    Multipv,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::PerMove => "per-move",
            Mode::Multipv => "multipv",
        }
    }
}

/// Which slice of the boards this process annotates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based.
    pub index: u32,
    pub count: u32,
}

impl Shard {
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N` (0 <= I < N).
    pub fn parse(text: &str) -> Result<Shard, AnnotateConfigError> {
        let bad = || {
            invalid(
                "--shard",
                format!("expected I/N with 0 <= I < N, got {text:?}"),
            )
        };
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// The shard from a cluster scheduler's environment: a Slurm job array
    /// (`SLURM_ARRAY_TASK_ID` - `SLURM_ARRAY_TASK_MIN` of
    /// `SLURM_ARRAY_TASK_COUNT`) or a Kubernetes Indexed Job
    /// (`JOB_COMPLETION_INDEX` of `CHESSBENCH_SHARD_COUNT`, which the Job
    /// sets to its `completions`).
    pub fn from_env(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<(Shard, &'static str)>, AnnotateConfigError> {
        let num = |name: &'static str| -> Result<Option<u32>, AnnotateConfigError> {
            match get(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| invalid(name, format!("expected a number, got {v:?}"))),
            }
        };
        if let (Some(id), Some(count)) =
            (num("SLURM_ARRAY_TASK_ID")?, num("SLURM_ARRAY_TASK_COUNT")?)
        {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let index = id
                .checked_sub(min)
                .ok_or_else(|| invalid("SLURM_ARRAY_TASK_ID", "below SLURM_ARRAY_TASK_MIN"))?;
            if count == 0 || index >= count {
                return Err(invalid(
                    "SLURM_ARRAY_TASK_ID",
                    format!(
                        "task {id} (min {min}) is outside an array of {count}; use a contiguous --array=0-{}",
                        count.saturating_sub(1)
                    ),
                ));
            }
            return Ok(Some((Shard { index, count }, "Slurm job array")));
        }
        if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let count = num("CHESSBENCH_SHARD_COUNT")?.ok_or_else(|| {
                invalid(
                    "CHESSBENCH_SHARD_COUNT",
                    "JOB_COMPLETION_INDEX is set (Kubernetes Indexed Job) but the shard count is not; set it to the Job's completions",
                )
            })?;
            if count == 0 || index >= count {
                return Err(invalid(
                    "JOB_COMPLETION_INDEX",
                    format!("{index} is outside {count} shards"),
                ));
            }
            return Ok(Some((Shard { index, count }, "Kubernetes Indexed Job")));
        }
        Ok(None)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Options as written in `[annotate]` or on the command line.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnotateOptions {
    /// Run directory (relative to the pipeline file).
    pub run: Option<PathBuf>,
    pub splits: Option<Vec<String>>,
    pub engine: Option<PathBuf>,
    pub engine_args: Option<Vec<String>>,
    pub hash_mb: Option<u32>,
    pub engine_options: Option<std::collections::BTreeMap<String, String>>,
    pub movetime_ms: Option<u64>,
    pub nodes: Option<u64>,
    pub depth: Option<u32>,
    pub mode: Option<Mode>,
    pub workers: Option<usize>,
    pub chunk_boards: Option<u64>,
    pub max_boards: Option<u64>,
    pub max_attempts: Option<u32>,
    pub search_timeout_ms: Option<u64>,
    pub new_game_per_board: Option<bool>,
    #[serde(skip)]
    pub shard: Option<String>,
    #[serde(skip)]
    pub progress: Option<bool>,
    #[serde(skip)]
    pub overwrite: Option<bool>,
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct PipelineFile {
    annotate: Option<AnnotateOptions>,
}

impl AnnotateOptions {
    /// Reads the `[annotate]` table of a pipeline file.
    pub fn from_pipeline_file(path: &Path) -> Result<AnnotateOptions, AnnotateConfigError> {
        use crate::pipeline::{self, PipelineFileError};
        let (file, base): (PipelineFile, _) = pipeline::read(path).map_err(|e| match e {
            PipelineFileError::Read(source) => AnnotateConfigError::Read {
                path: path.to_owned(),
                source,
            },
            PipelineFileError::Toml(message) => AnnotateConfigError::Toml {
                path: path.to_owned(),
                message,
            },
        })?;
        let mut options = file.annotate.unwrap_or_default();
        options.base_dir = Some(base);
        Ok(options)
    }

    /// `self` overridden by every option `cli` sets. A limit given on the
    /// command line replaces the file's limit.
    pub fn merge(self, cli: AnnotateOptions) -> AnnotateOptions {
        let cli_limit = cli.movetime_ms.is_some() || cli.nodes.is_some() || cli.depth.is_some();
        let (movetime_ms, nodes, depth) = if cli_limit {
            (cli.movetime_ms, cli.nodes, cli.depth)
        } else {
            (self.movetime_ms, self.nodes, self.depth)
        };
        let run_from_cli = cli.run.is_some();
        AnnotateOptions {
            run: cli.run.or(self.run),
            splits: cli.splits.or(self.splits),
            engine: cli.engine.or(self.engine),
            engine_args: cli.engine_args.or(self.engine_args),
            hash_mb: cli.hash_mb.or(self.hash_mb),
            engine_options: cli.engine_options.or(self.engine_options),
            movetime_ms,
            nodes,
            depth,
            mode: cli.mode.or(self.mode),
            workers: cli.workers.or(self.workers),
            chunk_boards: cli.chunk_boards.or(self.chunk_boards),
            max_boards: cli.max_boards.or(self.max_boards),
            max_attempts: cli.max_attempts.or(self.max_attempts),
            search_timeout_ms: cli.search_timeout_ms.or(self.search_timeout_ms),
            new_game_per_board: cli.new_game_per_board.or(self.new_game_per_board),
            shard: cli.shard.or(self.shard),
            progress: cli.progress.or(self.progress),
            overwrite: cli.overwrite.or(self.overwrite),
            base_dir: if run_from_cli { None } else { self.base_dir },
        }
    }

    /// Validates. `env` reads the process environment (a parameter so tests
    /// can give their own).
    pub fn validate(
        self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<AnnotateConfig, AnnotateConfigError> {
        let run = self.run.ok_or(AnnotateConfigError::NoRun)?;
        let run = match &self.base_dir {
            Some(dir) if run.is_relative() => dir.join(run),
            _ => run,
        };
        let limit = match (self.movetime_ms, self.nodes, self.depth) {
            (None, None, None) => Limit::MoveTimeMs(50),
            (Some(ms), None, None) if ms > 0 => Limit::MoveTimeMs(ms),
            (None, Some(n), None) if n > 0 => Limit::Nodes(n),
            (None, None, Some(d)) if d > 0 => Limit::Depth(d),
            _ => {
                return Err(invalid(
                    "limit",
                    "give exactly one positive limit: --movetime-ms, --nodes or --depth",
                ));
            }
        };
        let workers = match self.workers {
            Some(0) => return Err(invalid("--workers", "must be at least 1")),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let chunk_boards = self.chunk_boards.unwrap_or(1024);
        if !chunk_boards.is_power_of_two() || chunk_boards > crate::store::writer::BOARDS_PER_PART {
            return Err(invalid(
                "--chunk-boards",
                format!(
                    "must be a power of two up to {} (so chunks never straddle a boards part file), got {chunk_boards}",
                    crate::store::writer::BOARDS_PER_PART
                ),
            ));
        }
        let max_attempts = self.max_attempts.unwrap_or(3);
        if max_attempts == 0 {
            return Err(invalid("--max-attempts", "must be at least 1"));
        }
        let shard = match (&self.shard, Shard::from_env(env)?) {
            (Some(text), _) => (Shard::parse(text)?, "--shard"),
            (None, Some(found)) => found,
            (None, None) => (Shard::ALL, "unsharded"),
        };
        let search_timeout = match self.search_timeout_ms {
            Some(0) => return Err(invalid("--search-timeout-ms", "must be positive")),
            Some(ms) => Duration::from_millis(ms),
            None => default_timeout(limit),
        };
        if let Some(splits) = &self.splits
            && splits.is_empty()
        {
            return Err(invalid("--split", "give at least one split"));
        }
        let hash_mb = self.hash_mb.unwrap_or(16);
        if hash_mb == 0 {
            return Err(invalid("--hash-mb", "must be at least 1"));
        }
        Ok(AnnotateConfig {
            run,
            splits: self.splits,
            engine: EngineConfig {
                path: self.engine.unwrap_or_else(default_engine_path),
                args: self.engine_args.unwrap_or_default(),
                threads: 1,
                hash_mb,
                options: self
                    .engine_options
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
                handshake_timeout: Duration::from_secs(20),
            },
            limit,
            mode: self.mode.unwrap_or(Mode::PerMove),
            workers,
            chunk_boards,
            max_boards: self.max_boards,
            max_attempts,
            search_timeout,
            new_game_per_board: self.new_game_per_board.unwrap_or(true),
            shard: shard.0,
            shard_source: shard.1,
            progress: self.progress.unwrap_or(true),
            overwrite: self.overwrite.unwrap_or(false),
        })
    }
}

/// The deadline of one search: the limit times a margin, plus slack for
/// process scheduling. Nodes and depth limits have no time, so they get a
/// generous fixed deadline (at least 100k nodes/s assumed).
pub fn default_timeout(limit: Limit) -> Duration {
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
    /// Delete the splits' existing annotations first.
    pub overwrite: bool,
}

impl AnnotateConfig {
    /// The settings that must not change while a split is being annotated
    /// (resumes and shards must agree on them).
    pub fn fingerprint(&self) -> serde_json::Value {
        serde_json::json!({
            "limit": self.limit,
            "mode": self.mode,
            "chunk_boards": self.chunk_boards,
            "max_boards": self.max_boards,
            "new_game_per_board": self.new_game_per_board,
            "hash_mb": self.engine.hash_mb,
            "engine_options": self.engine.options,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn shard_parsing() {
        assert_eq!(Shard::parse("2/4").unwrap(), Shard { index: 2, count: 4 });
        for bad in ["4/4", "1", "a/b", "0/0", "-1/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shard_from_cluster_environment() {
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(
            Shard::from_env(env(&slurm)).unwrap(),
            Some((Shard { index: 1, count: 4 }, "Slurm job array"))
        );
        let k8s = [
            ("JOB_COMPLETION_INDEX", "3"),
            ("CHESSBENCH_SHARD_COUNT", "8"),
        ];
        assert_eq!(
            Shard::from_env(env(&k8s)).unwrap(),
            Some((Shard { index: 3, count: 8 }, "Kubernetes Indexed Job"))
        );
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "3")])).is_err());
        assert!(
            Shard::from_env(env(&[
                ("SLURM_ARRAY_TASK_ID", "9"),
                ("SLURM_ARRAY_TASK_COUNT", "4")
            ]))
            .is_err()
        );
        assert_eq!(Shard::from_env(env(&[])).unwrap(), None);
        // --shard wins over the environment.
        let o = AnnotateOptions {
            run: Some("r".into()),
            shard: Some("0/2".into()),
            ..Default::default()
        };
        assert_eq!(
            o.validate(env(&k8s)).unwrap().shard,
            Shard { index: 0, count: 2 }
        );
    }

    #[test]
    fn limits() {
        let base = || AnnotateOptions {
            run: Some("r".into()),
            ..Default::default()
        };
        assert_eq!(
            base().validate(env(&[])).unwrap().limit,
            Limit::MoveTimeMs(50)
        );
        let o = AnnotateOptions {
            nodes: Some(500),
            ..base()
        };
        assert_eq!(o.validate(env(&[])).unwrap().limit, Limit::Nodes(500));
        let o = AnnotateOptions {
            nodes: Some(500),
            depth: Some(3),
            ..base()
        };
        assert!(o.validate(env(&[])).is_err());
        let o = AnnotateOptions {
            chunk_boards: Some(1000),
            ..base()
        };
        assert!(o.validate(env(&[])).is_err());
        // A command-line limit replaces the file's.
        let file = AnnotateOptions {
            movetime_ms: Some(50),
            ..base()
        };
        let cli = AnnotateOptions {
            nodes: Some(100),
            ..Default::default()
        };
        assert_eq!(
            file.merge(cli).validate(env(&[])).unwrap().limit,
            Limit::Nodes(100)
        );
    }
}
