//! Ingest configuration: raw options (from a pipeline TOML file and the
//! command line, merged) validated into an [`IngestConfig`].
//!
//! Paths in a pipeline file are relative to that file, never to the working
//! directory. `crate:NAME/PATH` names a file inside a dependency's source, found
//! with `cargo metadata` (the demo's embedded Lichess games ship in
//! `pgn-reader`).

use std::{
    collections::BTreeSet,
    fmt,
    path::{Path, PathBuf},
    process::Command,
    str::FromStr,
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Configuration problems, naming the option or file at fault.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Toml { path: PathBuf, message: String },
    #[error(
        "no input: give PGN files (.pgn, .pgn.zst) or '-' for standard input, or a pipeline config with [[ingest.inputs]]"
    )]
    NoInputs,
    #[error("no output directory: give --out DIR or `out` in the pipeline config")]
    NoOutput,
    #[error("standard input ('-') can be read only once, but it is listed {0} times")]
    StdinTwice(usize),
    #[error("input {}: {source}", path.display())]
    Input {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("input {}: is a directory, expected a PGN file", .0.display())]
    InputIsDir(PathBuf),
    #[error("invalid split name {0:?}: use 1-64 characters from a-z, 0-9, '_' and '-'")]
    SplitName(String),
    #[error("--test-fraction must be in [0, 1], got {0}")]
    TestFraction(f64),
    #[error("--test-split {0:?} is also the split of an input; pick another name")]
    TestSplitClash(String),
    #[error("--min-elo {min} is above --max-elo {max}")]
    EloRange { min: u16, max: u16 },
    #[error("invalid {option}: {message}")]
    Invalid {
        option: &'static str,
        message: String,
    },
    #[error("cannot resolve {spec:?}: {message}")]
    Crate { spec: String, message: String },
}

/// Lichess speed classes, from the estimated duration base + 40 * increment
/// (lichess `chess.Speed`): ultrabullet < 30 s, bullet < 180 s, blitz < 480 s,
/// rapid < 1500 s, classical otherwise; correspondence when there is no clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speed {
    UltraBullet,
    Bullet,
    Blitz,
    Rapid,
    Classical,
    Correspondence,
}

impl Speed {
    /// Every speed class.
    pub const ALL: [Speed; 6] = [
        Speed::UltraBullet,
        Speed::Bullet,
        Speed::Blitz,
        Speed::Rapid,
        Speed::Classical,
        Speed::Correspondence,
    ];

    /// The class of a clock with `base` seconds and `increment` seconds per move.
    pub fn from_clock(base: u32, increment: u32) -> Speed {
        let estimate = u64::from(base) + 40 * u64::from(increment);
        match estimate {
            0..30 => Speed::UltraBullet,
            30..180 => Speed::Bullet,
            180..480 => Speed::Blitz,
            480..1500 => Speed::Rapid,
            _ => Speed::Classical,
        }
    }

    /// Lower-case name, as stored in `games.speed`.
    pub fn name(self) -> &'static str {
        match self {
            Speed::UltraBullet => "ultrabullet",
            Speed::Bullet => "bullet",
            Speed::Blitz => "blitz",
            Speed::Rapid => "rapid",
            Speed::Classical => "classical",
            Speed::Correspondence => "correspondence",
        }
    }
}

impl fmt::Display for Speed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Speed {
    type Err = String;
    fn from_str(s: &str) -> Result<Speed, String> {
        Speed::ALL
            .into_iter()
            .find(|sp| sp.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown speed {s:?}; expected one of {}",
                    Speed::ALL.map(Speed::name).join(", ")
                )
            })
    }
}

/// Where a PGN stream comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file, plain or zstd-compressed (detected from its first bytes).
    Path(PathBuf),
    /// Standard input, plain or zstd-compressed.
    Stdin,
}

/// One input and the split its games go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    pub source: Source,
    /// How the input was named (stored in the `source` columns).
    pub display: String,
    pub split: String,
}

/// Which games are kept (header filters).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GameFilter {
    /// Keep only rated games (Event does not start with "Casual" and both
    /// players have a numeric Elo).
    pub rated_only: bool,
    /// Keep only these speed classes (None = all, games without a clock too).
    pub speeds: Option<BTreeSet<Speed>>,
    /// Both players' Elo must be >= this.
    pub min_elo: Option<u16>,
    /// Both players' Elo must be <= this.
    pub max_elo: Option<u16>,
}

impl GameFilter {
    /// True when no filter is active.
    pub fn is_empty(&self) -> bool {
        !self.rated_only
            && self.speeds.is_none()
            && self.min_elo.is_none()
            && self.max_elo.is_none()
    }
}

/// A deterministic uniform sample of accepted games.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sample {
    pub games: u64,
    pub seed: u64,
}

/// Which accepted games are used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// Stop after this many accepted games (in input order).
    pub max_games: Option<u64>,
    /// Draw this many of the accepted games uniformly (bottom-k of a seeded
    /// hash, equivalent to reservoir sampling over the stream).
    pub sample: Option<Sample>,
}

/// Guards against hostile input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// A game with a single comment longer than this is rejected.
    pub max_comment_bytes: usize,
    /// A game longer than this is rejected without being parsed.
    pub max_game_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_comment_bytes: 1 << 20,
            max_game_bytes: 32 << 20,
        }
    }
}

/// Validated ingest configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestConfig {
    pub inputs: Vec<InputSpec>,
    pub out: PathBuf,
    pub filter: GameFilter,
    pub selection: Selection,
    /// Fraction of games moved to `test_split` by a stable hash of the game.
    pub test_fraction: Option<f64>,
    pub test_split: String,
    pub limits: Limits,
    /// Worker threads parsing and playing games.
    pub threads: usize,
    /// Memory for board deduplication before it spills to disk.
    pub memory_limit: u64,
    /// Show a progress bar (when stderr is a terminal).
    pub progress: bool,
}

impl IngestConfig {
    /// All split names this ingest writes, in a stable order.
    pub fn splits(&self) -> Vec<String> {
        let mut splits: Vec<String> = Vec::new();
        for input in &self.inputs {
            if !splits.contains(&input.split) {
                splits.push(input.split.clone());
            }
        }
        if self.test_fraction.is_some() && !splits.contains(&self.test_split) {
            splits.push(self.test_split.clone());
        }
        splits
    }

    /// The options as recorded in the manifest.
    pub fn options_json(&self) -> serde_json::Value {
        serde_json::json!({
            "filter": self.filter,
            "selection": self.selection,
            "test_fraction": self.test_fraction,
            "test_split": self.test_split,
            "limits": self.limits,
            "threads": self.threads,
            "memory_limit": self.memory_limit,
        })
    }
}

/// Raw options, every field optional: a pipeline file's `[ingest]` table and
/// the command line both produce one; [`IngestOptions::merge`] lets the command
/// line win.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestOptions {
    #[serde(default)]
    pub inputs: Vec<RawInput>,
    pub out: Option<PathBuf>,
    pub split: Option<String>,
    pub rated_only: Option<bool>,
    pub speeds: Option<Vec<String>>,
    pub min_elo: Option<u16>,
    pub max_elo: Option<u16>,
    pub max_games: Option<u64>,
    pub sample_games: Option<u64>,
    pub seed: Option<u64>,
    pub test_fraction: Option<f64>,
    pub test_split: Option<String>,
    pub max_comment_bytes: Option<String>,
    pub max_game_bytes: Option<String>,
    pub threads: Option<usize>,
    pub memory_limit: Option<String>,
    #[serde(skip)]
    pub progress: Option<bool>,
    /// Directory relative paths are resolved against (the pipeline file's).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

/// An input as written: a path (or `-`, or `crate:NAME/PATH`) and its split.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInput {
    pub path: String,
    pub split: Option<String>,
}

#[derive(Debug, Deserialize)]
struct PipelineFile {
    ingest: Option<IngestOptions>,
}

impl IngestOptions {
    /// Reads the `[ingest]` table of a pipeline file.
    pub fn from_pipeline_file(path: &Path) -> Result<IngestOptions, ConfigError> {
        use crate::pipeline::{self, PipelineFileError};
        let (file, base): (PipelineFile, _) = pipeline::read(path).map_err(|e| match e {
            PipelineFileError::Read(source) => ConfigError::Read {
                path: path.to_owned(),
                source,
            },
            PipelineFileError::Toml(message) => ConfigError::Toml {
                path: path.to_owned(),
                message,
            },
        })?;
        let mut options = file.ingest.unwrap_or_default();
        options.base_dir = Some(base);
        Ok(options)
    }

    /// `self` overridden by every option `cli` sets. Inputs given on the
    /// command line replace the file's inputs.
    pub fn merge(self, cli: IngestOptions) -> IngestOptions {
        let inputs_from_cli = !cli.inputs.is_empty();
        IngestOptions {
            inputs: if inputs_from_cli {
                cli.inputs
            } else {
                self.inputs
            },
            out: cli.out.or(self.out),
            split: cli.split.or(self.split),
            rated_only: cli.rated_only.or(self.rated_only),
            speeds: cli.speeds.or(self.speeds),
            min_elo: cli.min_elo.or(self.min_elo),
            max_elo: cli.max_elo.or(self.max_elo),
            max_games: cli.max_games.or(self.max_games),
            sample_games: cli.sample_games.or(self.sample_games),
            seed: cli.seed.or(self.seed),
            test_fraction: cli.test_fraction.or(self.test_fraction),
            test_split: cli.test_split.or(self.test_split),
            max_comment_bytes: cli.max_comment_bytes.or(self.max_comment_bytes),
            max_game_bytes: cli.max_game_bytes.or(self.max_game_bytes),
            threads: cli.threads.or(self.threads),
            memory_limit: cli.memory_limit.or(self.memory_limit),
            progress: cli.progress.or(self.progress),
            // Paths from the file stay relative to the file; the command
            // line's (inputs, out) are relative to the working directory.
            base_dir: if inputs_from_cli { None } else { self.base_dir },
        }
    }

    /// Validates into a config; checks that every input file can be opened.
    pub fn validate(self, cli_out: bool) -> Result<IngestConfig, ConfigError> {
        let base = self.base_dir.clone();
        let resolve = |p: &Path| -> PathBuf {
            match &base {
                Some(dir) if p.is_relative() => normalize(&dir.join(p)),
                _ => p.to_owned(),
            }
        };
        let default_split = self.split.clone().unwrap_or_else(|| "train".to_owned());
        check_split(&default_split)?;
        if self.inputs.is_empty() {
            return Err(ConfigError::NoInputs);
        }
        let mut inputs = Vec::with_capacity(self.inputs.len());
        for raw in &self.inputs {
            let split = raw.split.clone().unwrap_or_else(|| default_split.clone());
            check_split(&split)?;
            let source = if raw.path == "-" {
                Source::Stdin
            } else if let Some(spec) = raw.path.strip_prefix("crate:") {
                Source::Path(resolve_crate_path(spec, base.as_deref())?)
            } else {
                Source::Path(resolve(Path::new(&raw.path)))
            };
            if let Source::Path(path) = &source {
                check_readable(path)?;
            }
            inputs.push(InputSpec {
                source,
                display: raw.path.clone(),
                split,
            });
        }
        let stdin_count = inputs.iter().filter(|i| i.source == Source::Stdin).count();
        if stdin_count > 1 {
            return Err(ConfigError::StdinTwice(stdin_count));
        }
        let out = match &self.out {
            Some(out) if cli_out => out.clone(),
            Some(out) => resolve(out),
            None => return Err(ConfigError::NoOutput),
        };
        let speeds = match &self.speeds {
            None => None,
            Some(list) => Some(
                list.iter()
                    .map(|s| s.parse::<Speed>())
                    .collect::<Result<BTreeSet<_>, _>>()
                    .map_err(|message| ConfigError::Invalid {
                        option: "--speed",
                        message,
                    })?,
            ),
        };
        if let (Some(min), Some(max)) = (self.min_elo, self.max_elo)
            && min > max
        {
            return Err(ConfigError::EloRange { min, max });
        }
        let test_split = self.test_split.clone().unwrap_or_else(|| "test".to_owned());
        check_split(&test_split)?;
        if let Some(f) = self.test_fraction {
            if !(0.0..=1.0).contains(&f) {
                return Err(ConfigError::TestFraction(f));
            }
            if inputs.iter().any(|i| i.split == test_split) {
                return Err(ConfigError::TestSplitClash(test_split));
            }
        }
        if self.max_games == Some(0) {
            return Err(ConfigError::Invalid {
                option: "--max-games",
                message: "must be at least 1".into(),
            });
        }
        if self.sample_games == Some(0) {
            return Err(ConfigError::Invalid {
                option: "--sample-games",
                message: "must be at least 1".into(),
            });
        }
        let mut limits = Limits::default();
        if let Some(s) = &self.max_comment_bytes {
            limits.max_comment_bytes = parse_size(s, "--max-comment-bytes")? as usize;
        }
        if let Some(s) = &self.max_game_bytes {
            limits.max_game_bytes = parse_size(s, "--max-game-bytes")? as usize;
        }
        if limits.max_game_bytes < 4096 {
            return Err(ConfigError::Invalid {
                option: "--max-game-bytes",
                message: "must be at least 4 KiB".into(),
            });
        }
        let memory_limit = match &self.memory_limit {
            Some(s) => parse_size(s, "--memory-limit")?,
            None => DEFAULT_MEMORY_LIMIT,
        };
        if memory_limit < (1 << 20) {
            return Err(ConfigError::Invalid {
                option: "--memory-limit",
                message: "must be at least 1 MiB".into(),
            });
        }
        let threads = match self.threads {
            Some(0) | None => std::thread::available_parallelism().map_or(2, |n| n.get()),
            Some(n) => n,
        };
        Ok(IngestConfig {
            inputs,
            out,
            filter: GameFilter {
                rated_only: self.rated_only.unwrap_or(false),
                speeds,
                min_elo: self.min_elo,
                max_elo: self.max_elo,
            },
            selection: Selection {
                max_games: self.max_games,
                sample: self.sample_games.map(|games| Sample {
                    games,
                    seed: self.seed.unwrap_or(0),
                }),
            },
            test_fraction: self.test_fraction,
            test_split,
            limits,
            threads,
            memory_limit,
            progress: self.progress.unwrap_or(true),
        })
    }
}

/// Removes `.` and `name/..` components without touching the filesystem.
fn normalize(path: &Path) -> PathBuf {
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

/// Default memory for board deduplication.
pub const DEFAULT_MEMORY_LIMIT: u64 = 4 << 30;

fn check_split(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::SplitName(name.to_owned()))
    }
}

fn check_readable(path: &Path) -> Result<(), ConfigError> {
    let meta = std::fs::metadata(path).map_err(|source| ConfigError::Input {
        path: path.to_owned(),
        source,
    })?;
    if meta.is_dir() {
        return Err(ConfigError::InputIsDir(path.to_owned()));
    }
    std::fs::File::open(path).map_err(|source| ConfigError::Input {
        path: path.to_owned(),
        source,
    })?;
    Ok(())
}

/// Parses `4GiB`, `512MiB`, `64KiB`, `2G`, `1000000` (bytes).
pub fn parse_size(text: &str, option: &'static str) -> Result<u64, ConfigError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let invalid = |message: String| ConfigError::Invalid { option, message };
    let value: f64 = number.parse().map_err(|_| {
        invalid(format!(
            "{text:?} is not a size like 4GiB, 512MiB or 1000000"
        ))
    })?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(invalid(format!("unknown unit {other:?} in {text:?}"))),
    };
    Ok((value * scale as f64) as u64)
}

/// Resolves `NAME/PATH` to a file in the source of dependency NAME, using
/// `cargo metadata` on the project that contains `near` (or the working
/// directory).
pub fn resolve_crate_path(spec: &str, near: Option<&Path>) -> Result<PathBuf, ConfigError> {
    let err = |message: String| ConfigError::Crate {
        spec: format!("crate:{spec}"),
        message,
    };
    let (name, rel) = spec
        .split_once('/')
        .ok_or_else(|| err("expected crate:NAME/PATH".into()))?;
    let start = near.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let manifest = start
        .canonicalize()
        .ok()
        .and_then(|dir| {
            dir.ancestors()
                .map(|d| d.join("Cargo.toml"))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| err(format!("no Cargo.toml above {}", start.display())))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(&manifest)
        .output()
        .map_err(|e| err(format!("running cargo metadata: {e}")))?;
    if !output.status.success() {
        return Err(err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| err(format!("cargo metadata output: {e}")))?;
    let package = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .ok_or_else(|| {
            err(format!(
                "{name} is not a dependency of {}",
                manifest.display()
            ))
        })?;
    let dir = package["manifest_path"]
        .as_str()
        .and_then(|m| Path::new(m).parent())
        .ok_or_else(|| err("cargo metadata gave no manifest_path".into()))?;
    let path = dir.join(rel);
    if path.is_file() {
        Ok(path)
    } else {
        Err(err(format!("{} does not exist", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_follow_lichess() {
        assert_eq!(Speed::from_clock(15, 0), Speed::UltraBullet);
        assert_eq!(Speed::from_clock(60, 0), Speed::Bullet);
        assert_eq!(Speed::from_clock(120, 1), Speed::Bullet); // 160 s
        assert_eq!(Speed::from_clock(180, 0), Speed::Blitz);
        assert_eq!(Speed::from_clock(300, 3), Speed::Blitz); // 420 s
        assert_eq!(Speed::from_clock(600, 0), Speed::Rapid);
        assert_eq!(Speed::from_clock(900, 10), Speed::Rapid); // 1300 s
        assert_eq!(Speed::from_clock(1800, 0), Speed::Classical);
        assert_eq!("Blitz".parse::<Speed>(), Ok(Speed::Blitz));
        assert!("hyper".parse::<Speed>().is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4GiB", "x").unwrap(), 4 << 30);
        assert_eq!(parse_size("512MiB", "x").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5k", "x").unwrap(), 1536);
        assert_eq!(parse_size("1000", "x").unwrap(), 1000);
        assert!(parse_size("lots", "x").is_err());
        assert!(parse_size("5 parsecs", "x").is_err());
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
    fn split_names_are_checked() {
        assert!(check_split("train").is_ok());
        assert!(check_split("test-2023_01").is_ok());
        assert!(check_split("Train").is_err());
        assert!(check_split("../x").is_err());
        assert!(check_split("").is_err());
    }

    #[test]
    fn cli_overrides_file() {
        let file = IngestOptions {
            inputs: vec![RawInput {
                path: "a.pgn".into(),
                split: None,
            }],
            max_games: Some(10),
            min_elo: Some(1000),
            base_dir: Some("/cfg".into()),
            ..Default::default()
        };
        let cli = IngestOptions {
            max_games: Some(5),
            ..Default::default()
        };
        let merged = file.merge(cli);
        assert_eq!(merged.max_games, Some(5));
        assert_eq!(merged.min_elo, Some(1000));
        assert_eq!(merged.inputs.len(), 1);
        assert_eq!(merged.base_dir, Some(PathBuf::from("/cfg")));
    }

    #[test]
    fn validation_errors_name_the_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let pgn = tmp.path().join("a.pgn");
        std::fs::write(&pgn, "").unwrap();
        let base = || IngestOptions {
            inputs: vec![RawInput {
                path: pgn.display().to_string(),
                split: None,
            }],
            out: Some(tmp.path().join("run")),
            ..Default::default()
        };
        assert!(base().validate(true).is_ok());
        let missing = IngestOptions {
            inputs: vec![RawInput {
                path: "/no/such.pgn".into(),
                split: None,
            }],
            ..base()
        };
        let e = missing.validate(true).unwrap_err().to_string();
        assert!(e.contains("/no/such.pgn"), "{e}");
        let e = IngestOptions {
            test_fraction: Some(1.5),
            ..base()
        }
        .validate(true)
        .unwrap_err();
        assert!(matches!(e, ConfigError::TestFraction(_)));
        let e = IngestOptions {
            min_elo: Some(2000),
            max_elo: Some(1000),
            ..base()
        }
        .validate(true)
        .unwrap_err();
        assert!(matches!(e, ConfigError::EloRange { .. }));
        let e = IngestOptions {
            speeds: Some(vec!["hyperbullet".into()]),
            ..base()
        }
        .validate(true)
        .unwrap_err()
        .to_string();
        assert!(e.contains("hyperbullet") && e.contains("blitz"), "{e}");
    }
}
