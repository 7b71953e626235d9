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

use std::{
    collections::BTreeSet,
    fmt,
    path::{Path, PathBuf},
    str::FromStr,
};

use clap::{ArgAction, ArgMatches, Args, FromArgMatches, ValueHint, parser::ValueSource};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de::DeserializeOwned};
use thiserror::Error;

use crate::model::{DeviceKind, Precision};

mod budget;

pub use budget::{Consumer, Memory, Share};

/// The memory budget every stage takes by default (`--memory-limit`,
/// `memory_limit`): what it may hold in memory before it spills to the run
/// directory or waits.
pub const MEMORY_LIMIT: &str = "2GiB";

/// [`MEMORY_LIMIT`] in bytes.
pub const MEMORY_LIMIT_BYTES: u64 = 2 << 30;

/// The tables a pipeline file may have (`[ablate]`: a grid file's list of
/// variants, see [`crate::ablate`]).
pub(crate) const STAGES: [&str; 5] = ["ingest", "annotate", "train", "eval", "ablate"];

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

/// A `--shard` or a cluster environment that does not name a shard.
#[derive(Debug, Error)]
#[error("invalid {option}: {message}")]
pub struct ShardError {
    pub option: &'static str,
    pub message: String,
}

fn invalid(option: &'static str, message: impl Into<String>) -> ShardError {
    ShardError {
        option,
        message: message.into(),
    }
}

/// Which slice of a job this process does (`--shard I/N`): annotate's
/// chunks of boards, ablate's variants. A cluster scheduler's array gives
/// it through the environment ([`Shard::from_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based.
    pub index: u32,
    pub count: u32,
}

impl Shard {
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N` (0 <= I < N).
    pub(crate) fn parse(text: &str) -> Result<Shard, ShardError> {
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
    pub(crate) fn from_env(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<(Shard, &'static str)>, ShardError> {
        let num = |name: &'static str| -> Result<Option<u32>, ShardError> {
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

impl Shard {
    /// Whether item `i` of a job belongs to this shard: items are dealt
    /// round-robin, `i mod N == I`.
    pub fn owns(self, i: usize) -> bool {
        i % self.count as usize == self.index as usize
    }
}

impl FromStr for Shard {
    type Err = ShardError;
    fn from_str(text: &str) -> Result<Shard, ShardError> {
        Shard::parse(text)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
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
}

impl Default for Compute {
    fn default() -> Compute {
        Compute {
            device: DeviceKind::Cpu,
            precision: Precision::F32,
        }
    }
}

/// A stage's options: parsed by clap, read by serde from [`Stage::TABLE`].
pub trait Stage: Args + FromArgMatches + Serialize + DeserializeOwned {
    /// The pipeline file's table of this stage.
    const TABLE: &'static str;
}

/// Declares a stage's options type `$t`: read from the pipeline table
/// `$table`, and defaulting (`Default`) to what an empty command line gives.
macro_rules! stage {
    ($t:ty, $table:literal) => {
        impl $crate::options::Stage for $t {
            const TABLE: &'static str = $table;
        }

        impl Default for $t {
            fn default() -> Self {
                $crate::options::defaults()
            }
        }
    };
}
pub(crate) use stage;

/// Why options could not be read, naming the file, table and key.
#[derive(Debug, Error)]
pub enum OptionsError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Toml { path: PathBuf, message: String },
    #[error("{}: unknown table [{table}]; a pipeline file has {}", path.display(), STAGES.map(|s| format!("[{s}]")).join(", "))]
    UnknownTable { path: PathBuf, table: String },
    #[error("{}{}: [{table}] has no option `{key}`; it has: {}", path.display(), at(*line), known.join(", "))]
    UnknownKey {
        path: PathBuf,
        line: Option<usize>,
        table: &'static str,
        key: String,
        known: Vec<String>,
    },
    #[error("{}{}: [{table}] {message}", path.display(), at(*line))]
    Value {
        path: PathBuf,
        line: Option<usize>,
        table: &'static str,
        message: String,
    },
    #[error("{0}")]
    CommandLine(#[from] clap::Error),
}

/// `:N` for a line number, nothing without one.
fn at(line: Option<usize>) -> String {
    line.map(|n| format!(":{n}")).unwrap_or_default()
}

/// The 1-based line of `key = ...` inside `[table]` (or its sub-tables) of a
/// pipeline file's text, for error messages.
pub(crate) fn line_of(text: &str, table: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.starts_with('[') {
            current = l.trim_matches(['[', ']']).trim().to_owned();
            if current == format!("{table}.{key}") {
                return Some(i + 1);
            }
            continue;
        }
        let in_table = current == table || current.starts_with(&format!("{table}."));
        if in_table && l.split('=').next().is_some_and(|k| k.trim() == key) {
            return Some(i + 1);
        }
    }
    None
}

/// The options of stage `T`: its defaults, overridden by the `[T::TABLE]`
/// table of `file` (if given), overridden by what `matches` (the stage's
/// command line) sets.
pub fn load<T: Stage>(matches: &ArgMatches, file: Option<&Path>) -> Result<T, OptionsError> {
    match file {
        None => Ok(T::from_arg_matches(matches)?),
        Some(file) => {
            let (table, text) = read_table(file, T::TABLE)?;
            layer(matches, table, file, &text)
        }
    }
}

/// Stage `T`'s options from `table`, a table of pipeline file `file` whose
/// text is `text` (for its line numbers), with no command line: how a stage
/// composing others (`ablate`) builds their options from its own file.
pub fn from_file_table<T: Stage>(
    file: &Path,
    table: toml::Table,
    text: &str,
) -> Result<T, OptionsError> {
    let matches = T::augment_args(clap::Command::new("options").no_binary_name(true))
        .try_get_matches_from(std::iter::empty::<String>())?;
    layer(&matches, table, file, text)
}

/// The keys of stage `T`'s table: its options' ids.
pub(crate) fn keys<T: Stage>() -> Vec<String> {
    describe::<T>().into_iter().map(|(key, _, _)| key).collect()
}

/// Stage `T`'s options as its table's keys, each with its default (as the
/// command line writes it; none for an option without one) and its help
/// text: what a front end other than the command line (the Python
/// package's docstrings) shows.
pub fn describe<T: Stage>() -> Vec<(String, Option<String>, String)> {
    let command = T::augment_args(clap::Command::new("options"));
    command
        .get_arguments()
        .filter(|a| !matches!(a.get_action(), ArgAction::Help | ArgAction::Version))
        .map(|a| {
            let default = a
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>();
            let help = a
                .get_long_help()
                .or_else(|| a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let default = (!default.is_empty()).then(|| default.join(","));
            (a.get_id().to_string(), default, help)
        })
        .collect()
}

/// Stage `T`'s options from the text of its pipeline table alone (no
/// command line; relative paths stay as written): for tests and benchmarks.
#[cfg(test)]
pub(crate) fn from_table<T: Stage>(text: &str) -> Result<T, OptionsError> {
    let origin = Path::new("");
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| OptionsError::Toml {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
    let matches = T::augment_args(clap::Command::new("options").no_binary_name(true))
        .try_get_matches_from(std::iter::empty::<String>())?;
    layer(&matches, table, origin, text)
}

/// `matches` over `table` (read from `file`, whose text is `text`) over the
/// defaults.
fn layer<T: Stage>(
    matches: &ArgMatches,
    table: toml::Table,
    file: &Path,
    text: &str,
) -> Result<T, OptionsError> {
    let cli = T::from_arg_matches(matches)?;
    let mut command = T::augment_args(clap::Command::new("options"));
    // Groups declared by `#[arg(group = ...)]` exist once the command is built.
    command.build();
    let given = |id: &str| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    // Members of a group with a member on the command line.
    let mut overridden: BTreeSet<String> = BTreeSet::new();
    for group in command.get_groups() {
        if T::group_id().as_ref() == Some(group.get_id()) {
            continue; // the derive's own group of every field
        }
        let members: Vec<String> = group.get_args().map(|a| a.to_string()).collect();
        if members.iter().any(|m| given(m)) {
            overridden.extend(members);
        }
    }
    let mut merged = serde_json::to_value(&cli).map_err(|e| value_error(file, T::TABLE, e))?;
    let object = merged
        .as_object_mut()
        .expect("stage options serialize as a map");
    let base = file.parent().unwrap_or(Path::new(""));
    for (key, value) in table {
        let options = || {
            command.get_arguments().filter(|a| {
                !matches!(
                    a.get_action(),
                    ArgAction::Help
                        | ArgAction::HelpShort
                        | ArgAction::HelpLong
                        | ArgAction::Version
                )
            })
        };
        let Some(arg) = options().find(|a| a.get_id().as_str() == key) else {
            return Err(OptionsError::UnknownKey {
                path: file.to_owned(),
                line: line_of(text, T::TABLE, &key),
                table: T::TABLE,
                key,
                known: options()
                    .filter(|a| !a.is_hide_set())
                    .map(|a| a.get_id().to_string())
                    .collect(),
            });
        };
        if given(&key) || overridden.contains(&key) {
            continue;
        }
        let value = rebase(value, arg.get_value_hint(), base);
        let value = serde_json::to_value(value).map_err(|e| value_error(file, T::TABLE, e))?;
        object.insert(key, value);
    }
    serde_path_to_error::deserialize(merged).map_err(|e| {
        let path = e.path().to_string();
        let key = path.split(['.', '[']).next().unwrap_or_default();
        OptionsError::Value {
            path: file.to_owned(),
            line: line_of(text, T::TABLE, key),
            table: T::TABLE,
            message: format!("{path}: {}", e.inner()),
        }
    })
}

fn value_error(file: &Path, table: &'static str, e: impl fmt::Display) -> OptionsError {
    OptionsError::Value {
        path: file.to_owned(),
        line: None,
        table,
        message: e.to_string(),
    }
}

/// The `[table]` of a pipeline file (empty if it has none) and the file's
/// text. Tables other than the known stages' are an error (a typo would
/// otherwise go unnoticed).
fn read_table(file: &Path, table: &str) -> Result<(toml::Table, String), OptionsError> {
    let text = std::fs::read_to_string(file).map_err(|source| OptionsError::Read {
        path: file.to_owned(),
        source,
    })?;
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| OptionsError::Toml {
            path: file.to_owned(),
            message: e.to_string(),
        })?;
    if let Some(unknown) = doc.keys().find(|k| !STAGES.contains(&k.as_str())) {
        return Err(OptionsError::UnknownTable {
            path: file.to_owned(),
            table: unknown.clone(),
        });
    }
    match doc.remove(table) {
        None => Ok((toml::Table::new(), text)),
        Some(toml::Value::Table(t)) => Ok((t, text)),
        Some(other) => Err(OptionsError::Toml {
            path: file.to_owned(),
            message: format!("`{table}` must be a table, not a {}", other.type_str()),
        }),
    }
}

/// Resolves the relative paths of one value from a pipeline file in `base`
/// (the file's directory), by the option's value hint. Arrays are resolved
/// element by element, tables by their `path` key (`[[ingest.inputs]]`).
fn rebase(value: toml::Value, hint: ValueHint, base: &Path) -> toml::Value {
    let program = match hint {
        ValueHint::FilePath | ValueHint::DirPath | ValueHint::AnyPath => false,
        ValueHint::ExecutablePath => true,
        _ => return value,
    };
    match value {
        toml::Value::String(s) => toml::Value::String(rebase_path(&s, program, base)),
        toml::Value::Array(items) => {
            toml::Value::Array(items.into_iter().map(|v| rebase(v, hint, base)).collect())
        }
        toml::Value::Table(mut t) => {
            if let Some(toml::Value::String(p)) = t.get("path") {
                let p = rebase_path(p, program, base);
                t.insert("path".into(), toml::Value::String(p));
            }
            toml::Value::Table(t)
        }
        other => other,
    }
}

/// `path` relative to `base`, unless it is absolute, `-`, `crate:...`, or a
/// program looked up on `PATH` (no `/` in it). A `checkpoint:PATH` spec (an
/// opponent) is rebased as its path; a `stockfish:...` spec is not a path.
pub(crate) fn rebase_path(path: &str, program: bool, base: &Path) -> String {
    if let Some(rest) = path.strip_prefix("checkpoint:") {
        return format!("checkpoint:{}", rebase_path(rest, false, base));
    }
    if path.starts_with("stockfish:") {
        return path.to_owned();
    }
    let p = Path::new(path);
    if path == "-"
        || path.starts_with("crate:")
        || p.is_absolute()
        || (program && !path.contains('/'))
    {
        return path.to_owned();
    }
    normalize(&base.join(p)).to_string_lossy().into_owned()
}

/// Removes `.` and `name/..` components without touching the filesystem.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// The options a command line without arguments gives: every default. For
/// tests and benchmarks that build options in code.
pub(crate) fn defaults<T: Args + FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let matches = command
        .try_get_matches_from(std::iter::empty::<String>())
        .expect("every stage option has a default or is optional");
    T::from_arg_matches(&matches).expect("defaults parse")
}

/// A size in bytes, written `4GiB`, `512MiB`, `64KiB`, `2G` or `1000000`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(text: &str) -> Result<ByteSize, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a size like 4GiB, 512MiB or 1000000"))?;
        let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            other => return Err(format!("unknown unit {other:?} in {text:?}")),
        };
        Ok(ByteSize((value * scale as f64) as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if n >= 1 << shift && n.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", n >> shift);
            }
        }
        write!(f, "{n}")
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(n) => Ok(ByteSize(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Serde for values that are written as text on the command line and in
/// pipeline files (`stockfish:nodes=200`, `2/4`): `FromStr` and `Display`.
pub(crate) mod as_text {
    use std::{fmt::Display, str::FromStr};

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub(crate) fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// [`as_text`] for optional values (`None` is null).
pub(crate) mod as_text_opt {
    use std::{fmt::Display, str::FromStr};

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<T: Display, S: Serializer>(
        value: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        Option::<String>::deserialize(d)?
            .map(|s| s.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// [`as_text`] for lists.
pub(crate) mod as_text_vec {
    use std::{fmt::Display, str::FromStr};

    use serde::{Deserialize, Deserializer, Serializer, ser::SerializeSeq};

    pub(crate) fn serialize<T: Display, S: Serializer>(
        values: &[T],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(values.len()))?;
        for v in values {
            seq.serialize_element(&v.to_string())?;
        }
        seq.end()
    }

    pub(crate) fn deserialize<'de, T, D>(d: D) -> Result<Vec<T>, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|s| s.parse().map_err(serde::de::Error::custom))
            .collect()
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
        let s = Shard { index: 1, count: 3 };
        let owned: Vec<usize> = (0..7).filter(|&i| s.owns(i)).collect();
        assert_eq!(owned, [1, 4]);
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
    }

    #[test]
    fn sizes() {
        let p = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(p("4GiB").unwrap(), 4 << 30);
        assert_eq!(p("512MiB").unwrap(), 512 << 20);
        assert_eq!(p("1.5k").unwrap(), 1536);
        assert_eq!(p("1000").unwrap(), 1000);
        assert!(p("lots").is_err());
        assert!(p("5 parsecs").is_err());
        assert_eq!(ByteSize(4 << 30).to_string(), "4GiB");
        assert_eq!(ByteSize(1536).to_string(), "1536");
        let b: ByteSize = serde_json::from_str("\"1MiB\"").unwrap();
        assert_eq!(b, ByteSize(1 << 20));
        let b: ByteSize = serde_json::from_str("4096").unwrap();
        assert_eq!(b, ByteSize(4096));
    }

    #[test]
    fn paths_are_normalized() {
        assert_eq!(
            normalize(Path::new("pipeline/../runs/demo")),
            PathBuf::from("runs/demo")
        );
        assert_eq!(normalize(Path::new("./a/./b")), PathBuf::from("a/b"));
        assert_eq!(normalize(Path::new("../x")), PathBuf::from("../x"));
        assert_eq!(normalize(Path::new("a/..")), PathBuf::from("."));
    }

    #[test]
    fn the_path_rule() {
        let base = Path::new("pipeline");
        // A file's relative paths are relative to the file.
        assert_eq!(rebase_path("../runs/demo", false, base), "runs/demo");
        assert_eq!(rebase_path("data.pgn", false, base), "pipeline/data.pgn");
        // Absolute paths, standard input and dependency files stay.
        assert_eq!(rebase_path("/data/x.pgn", false, base), "/data/x.pgn");
        assert_eq!(rebase_path("-", false, base), "-");
        assert_eq!(
            rebase_path("crate:pgn-reader/benches/x.pgn", false, base),
            "crate:pgn-reader/benches/x.pgn"
        );
        // A program named without a slash is looked up on PATH.
        assert_eq!(rebase_path("stockfish", true, base), "stockfish");
        assert_eq!(rebase_path("bin/sf", true, base), "pipeline/bin/sf");
        // Engine specs: a checkpoint's path follows the rule, Stockfish's
        // settings are not a path.
        assert_eq!(
            rebase_path("checkpoint:../runs/x", false, base),
            "checkpoint:runs/x"
        );
        assert_eq!(
            rebase_path("stockfish:nodes=1", false, base),
            "stockfish:nodes=1"
        );
        // Tables with a `path` key and arrays.
        let v: toml::Value = toml::from_str::<toml::Table>(
            "x = [{ path = \"a.pgn\", split = \"train\" }, { path = \"-\" }]",
        )
        .unwrap()
        .remove("x")
        .unwrap();
        let v = rebase(v, ValueHint::FilePath, base);
        assert_eq!(v[0]["path"].as_str(), Some("pipeline/a.pgn"));
        assert_eq!(v[0]["split"].as_str(), Some("train"));
        assert_eq!(v[1]["path"].as_str(), Some("-"));
        // Values of options that are not paths are untouched.
        let v = rebase(toml::Value::String("a".into()), ValueHint::Other, base);
        assert_eq!(v.as_str(), Some("a"));
    }

    /// A stage of two of each kind of option, to test the layering alone.
    #[derive(Debug, Args, Serialize, Deserialize, PartialEq)]
    struct Demo {
        #[arg(long, value_hint = ValueHint::DirPath)]
        run: Option<PathBuf>,
        #[arg(long, value_hint = ValueHint::FilePath)]
        inputs: Vec<String>,
        #[arg(long, default_value_t = 3)]
        n: u32,
        #[arg(long)]
        flag: bool,
        #[arg(long, group = "limit")]
        nodes: Option<u64>,
        #[arg(long, group = "limit")]
        depth: Option<u32>,
        #[arg(long, default_value = "stockfish", value_hint = ValueHint::ExecutablePath)]
        engine: PathBuf,
        #[arg(long, default_value = "1MiB")]
        memory: ByteSize,
    }

    impl Stage for Demo {
        const TABLE: &'static str = "train";
    }

    fn demo(file_text: Option<&str>, args: &[&str]) -> Result<Demo, OptionsError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pipeline").join("p.toml");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        if let Some(text) = file_text {
            std::fs::write(&file, text).unwrap();
        }
        let matches = Demo::augment_args(clap::Command::new("demo").no_binary_name(true))
            .try_get_matches_from(args)?;
        let d = load::<Demo>(&matches, file_text.map(|_| file.as_path()))?;
        // Report paths relative to the temporary directory.
        let strip = |p: PathBuf| {
            p.strip_prefix(dir.path())
                .map(|p| PathBuf::from("TMP").join(p))
                .unwrap_or(p)
        };
        Ok(Demo {
            run: d.run.map(strip),
            inputs: d
                .inputs
                .into_iter()
                .map(|i| strip(PathBuf::from(i)).display().to_string())
                .collect(),
            engine: strip(d.engine),
            ..d
        })
    }

    #[test]
    fn defaults_then_file_then_command_line() {
        let d = demo(None, &[]).unwrap();
        assert_eq!((d.n, d.flag, d.memory), (3, false, ByteSize(1 << 20)));
        assert_eq!(defaults::<Demo>(), demo(None, &[]).unwrap());
        let file = "[train]\nn = 5\nflag = true\nmemory = \"2MiB\"\n[eval]\nx = 1\n";
        let d = demo(Some(file), &[]).unwrap();
        assert_eq!((d.n, d.flag, d.memory), (5, true, ByteSize(2 << 20)));
        let d = demo(Some(file), &["--n", "7"]).unwrap();
        assert_eq!((d.n, d.flag), (7, true));
        // A value the command line sets to its default still wins.
        let d = demo(Some(file), &["--n", "3"]).unwrap();
        assert_eq!(d.n, 3);
    }

    #[test]
    fn a_group_on_the_command_line_replaces_the_files() {
        let file = "[train]\nnodes = 200\n";
        assert_eq!(demo(Some(file), &[]).unwrap().nodes, Some(200));
        let d = demo(Some(file), &["--depth", "4"]).unwrap();
        assert_eq!((d.nodes, d.depth), (None, Some(4)));
        assert!(demo(None, &["--depth", "4", "--nodes", "3"]).is_err());
    }

    /// One rule: a relative path is relative to the file that names it.
    #[test]
    fn paths_in_a_file_are_relative_to_the_file() {
        let file = "[train]\nrun = \"../runs/demo\"\ninputs = [\"a.pgn\", \"-\", \"/abs.pgn\"]\n";
        let d = demo(Some(file), &[]).unwrap();
        assert_eq!(d.run, Some(PathBuf::from("TMP/runs/demo")));
        assert_eq!(d.inputs, ["TMP/pipeline/a.pgn", "-", "/abs.pgn"]);
    }

    #[test]
    fn paths_on_the_command_line_are_relative_to_the_working_directory() {
        let file = "[train]\nrun = \"../runs/demo\"\ninputs = [\"a.pgn\"]\n";
        let d = demo(Some(file), &["--run", "r", "--inputs", "b.pgn"]).unwrap();
        assert_eq!(d.run, Some(PathBuf::from("r")));
        assert_eq!(d.inputs, ["b.pgn"]);
        // Options the command line does not give keep the file's rule.
        let d = demo(Some(file), &["--inputs", "b.pgn"]).unwrap();
        assert_eq!(d.run, Some(PathBuf::from("TMP/runs/demo")));
    }

    #[test]
    fn programs_without_a_slash_are_looked_up_on_path() {
        let d = demo(Some("[train]\nengine = \"stockfish\"\n"), &[]).unwrap();
        assert_eq!(d.engine, PathBuf::from("stockfish"));
        let d = demo(Some("[train]\nengine = \"bin/sf\"\n"), &[]).unwrap();
        assert_eq!(d.engine, PathBuf::from("TMP/pipeline/bin/sf"));
        let d = demo(
            Some("[train]\nengine = \"bin/sf\"\n"),
            &["--engine", "x/sf"],
        )
        .unwrap();
        assert_eq!(d.engine, PathBuf::from("x/sf"));
    }

    #[test]
    fn errors_name_the_file_table_and_key() {
        let e = demo(Some("[train]\nnn = 5\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.toml") && e.contains("`nn`") && e.contains("n, flag"),
            "{e}"
        );
        let e = demo(Some("[train]\nhelp = true\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`help`"), "{e}");
        let e = demo(Some("[trian]\nn = 5\n"), &[]).unwrap_err().to_string();
        assert!(e.contains("unknown table [trian]"), "{e}");
        let e = demo(Some("[train]\nflag = true\n\nn = \"five\"\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml:4: [train] n:"), "{e}");
        let e = demo(Some("[train]\nflag = true\nnn = 5\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml:3: [train] has no option `nn`"), "{e}");
        let e = demo(Some("[train]\nmemory = \"lots\"\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("memory") && e.contains("lots"), "{e}");
        let e = demo(Some("[train\n"), &[]).unwrap_err().to_string();
        assert!(e.contains("p.toml"), "{e}");
    }
}
