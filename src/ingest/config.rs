//! Ingest's options ([`IngestOptions`]: the command line and the `[ingest]`
//! table of a pipeline file) validated into an [`IngestConfig`].
//!
//! `crate:NAME/PATH` names a file inside a dependency's source, found with
//! `cargo metadata` (the demo's embedded Lichess games ship in
//! `pgn-reader`).

use std::{
    collections::BTreeSet,
    fmt,
    path::{Path, PathBuf},
    process::Command,
    str::FromStr,
};

use clap::{Args, ValueEnum, ValueHint};
use serde::{Deserialize, Serialize};

use super::dedup::SpillFormat;
use crate::options::{ByteSize, Env, Resources, RunArg};

pub use super::error::ConfigError;

/// Lichess speed classes, from the estimated duration base + 40 * increment
/// (lichess `chess.Speed`): ultrabullet < 30 s, bullet < 180 s, blitz < 480 s,
/// rapid < 1500 s, classical otherwise; correspondence when there is no clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
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
    pub(crate) const ALL: [Speed; 6] = [
        Speed::UltraBullet,
        Speed::Bullet,
        Speed::Blitz,
        Speed::Rapid,
        Speed::Classical,
        Speed::Correspondence,
    ];

    /// The class of a clock with `base` seconds and `increment` seconds per move.
    pub(crate) fn from_clock(base: u32, increment: u32) -> Speed {
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
    pub(crate) fn name(self) -> &'static str {
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
    pub(crate) fn is_empty(&self) -> bool {
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
    /// Worker threads parsing and playing games; as many threads, up to 4,
    /// deduplicate boards (each with a second thread while it spills), and
    /// once they have spilled, as many or twice as many deduplicate the
    /// spilled partitions (twice when the partitions are small enough:
    /// those threads wait on the disk half the time).
    pub threads: usize,
    /// Memory of the ingest; board deduplication spills to disk when its
    /// tables are full (at most 16 MiB a shard while games stream in).
    pub memory_limit: u64,
    /// Show a progress bar (when stderr is a terminal).
    pub progress: bool,
    /// How deduplication lays out what it spills: this CPU's choice, or
    /// the one `CHESSBENCH_SPILL_FORMAT` names.
    pub(crate) spill_format: SpillFormat,
}

impl IngestConfig {
    /// All split names this ingest writes, in a stable order.
    pub(crate) fn splits(&self) -> Vec<String> {
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
    pub(crate) fn options_json(&self) -> serde_json::Value {
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

/// `chessbench ingest`'s options: the command line and the `[ingest]` table
/// of a pipeline file (see [`crate::options`]).
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct IngestOptions {
    #[command(flatten)]
    #[serde(flatten)]
    pub run: RunArg,
    /// PGN inputs: .pgn or .pgn.zst files (zstd is detected from the data), or
    /// '-' for standard input. In a pipeline file, `[[ingest.inputs]]` tables
    /// with a `path` and the `split` its games go to.
    #[arg(value_name = "INPUT", value_hint = ValueHint::FilePath)]
    pub inputs: Vec<InputArg>,
    /// Split the inputs' games go to (an input's own `split` wins).
    #[arg(long, value_name = "NAME", default_value = "train", help_heading = "Splits")]
    pub split: String,
    /// Move this fraction of games to the test split, by a stable hash of the
    /// Lichess game id (or of Event/Site/Date/Round/White/Black elsewhere).
    #[arg(long, value_name = "F", help_heading = "Splits")]
    pub test_fraction: Option<f64>,
    /// Name of the split --test-fraction fills.
    #[arg(long, value_name = "NAME", default_value = "test", help_heading = "Splits")]
    pub test_split: String,
    /// Keep only rated games (Event not "Casual ...", both Elos known).
    #[arg(long, help_heading = "Filters")]
    pub rated_only: bool,
    /// Keep only these speed classes (Lichess: base + 40 x increment).
    #[arg(
        long = "speed",
        value_name = "SPEED",
        value_delimiter = ',',
        help_heading = "Filters"
    )]
    pub speeds: Vec<Speed>,
    /// Both players' Elo must be at least this.
    #[arg(long, value_name = "ELO", help_heading = "Filters")]
    pub min_elo: Option<u16>,
    /// Both players' Elo must be at most this.
    #[arg(long, value_name = "ELO", help_heading = "Filters")]
    pub max_elo: Option<u16>,
    /// Stop after N accepted games (in input order).
    #[arg(long, value_name = "N", help_heading = "Selection")]
    pub max_games: Option<u64>,
    /// Keep a uniform random sample of N accepted games (one pass,
    /// deterministic for a given --seed), like the paper's 10^4..10^7 draws.
    #[arg(long, value_name = "N", help_heading = "Selection")]
    pub sample_games: Option<u64>,
    /// Seed for --sample-games.
    #[arg(long, value_name = "S", default_value_t = 0, help_heading = "Selection")]
    pub seed: u64,
    /// Reject games with a comment longer than this.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", help_heading = "Limits")]
    pub max_comment_bytes: ByteSize,
    /// Reject, without parsing, games longer than this (at least 4KiB).
    #[arg(long, value_name = "SIZE", default_value = "32MiB", help_heading = "Limits")]
    pub max_game_bytes: ByteSize,
    #[command(flatten)]
    #[serde(flatten)]
    pub resources: Resources,
}

crate::options::stage!(IngestOptions, "ingest");

/// An input as written: a path (or `-`, or `crate:NAME/PATH`) and the split
/// its games go to. On the command line just the path; in a pipeline file a
/// table `{ path = "...", split = "..." }` (or just the path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputArg {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

impl FromStr for InputArg {
    type Err = std::convert::Infallible;
    fn from_str(path: &str) -> Result<InputArg, Self::Err> {
        Ok(InputArg {
            path: path.to_owned(),
            split: None,
        })
    }
}

impl<'de> Deserialize<'de> for InputArg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<InputArg, D::Error> {
        use serde::de::Error;
        let text = |v: &serde_json::Value, key: &str| -> Result<String, D::Error> {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| D::Error::custom(format!("an input's `{key}` must be a string")))
        };
        match serde_json::Value::deserialize(d)? {
            v @ serde_json::Value::String(_) => Ok(InputArg {
                path: text(&v, "path")?,
                split: None,
            }),
            serde_json::Value::Object(table) => {
                if let Some(key) = table
                    .keys()
                    .find(|k| !["path", "split"].contains(&k.as_str()))
                {
                    return Err(D::Error::custom(format!(
                        "unknown key `{key}` in an input (it has `path` and `split`)"
                    )));
                }
                Ok(InputArg {
                    path: text(
                        table
                            .get("path")
                            .ok_or_else(|| D::Error::custom("an input needs a `path`"))?,
                        "path",
                    )?,
                    split: table.get("split").map(|s| text(s, "split")).transpose()?,
                })
            }
            _ => Err(D::Error::custom(
                "an input is a path or a table { path = \"...\", split = \"...\" }",
            )),
        }
    }
}

impl IngestOptions {
    /// Validates into a config; checks that every input file can be opened.
    /// `env` gives the progress bar and the spill format's override.
    pub fn resolve(&self, env: &Env) -> Result<IngestConfig, ConfigError> {
        check_split(&self.split)?;
        if self.inputs.is_empty() {
            return Err(ConfigError::NoInputs);
        }
        let mut inputs = Vec::with_capacity(self.inputs.len());
        for raw in &self.inputs {
            let split = raw.split.clone().unwrap_or_else(|| self.split.clone());
            check_split(&split)?;
            let source = if raw.path == "-" {
                Source::Stdin
            } else if let Some(spec) = raw.path.strip_prefix("crate:") {
                Source::Path(resolve_crate_path(spec)?)
            } else {
                Source::Path(PathBuf::from(&raw.path))
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
        let out = self.run.run.clone().ok_or(ConfigError::NoRun)?;
        let speeds = (!self.speeds.is_empty()).then(|| self.speeds.iter().copied().collect());
        if let (Some(min), Some(max)) = (self.min_elo, self.max_elo)
            && min > max
        {
            return Err(ConfigError::EloRange { min, max });
        }
        let test_split = self.test_split.clone();
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
                option: "max_games",
                message: "must be at least 1".into(),
            });
        }
        if self.sample_games == Some(0) {
            return Err(ConfigError::Invalid {
                option: "sample_games",
                message: "must be at least 1".into(),
            });
        }
        let limits = Limits {
            max_comment_bytes: self.max_comment_bytes.0 as usize,
            max_game_bytes: self.max_game_bytes.0 as usize,
        };
        if limits.max_game_bytes < 4096 {
            return Err(ConfigError::Invalid {
                option: "max_game_bytes",
                message: "must be at least 4 KiB".into(),
            });
        }
        let memory_limit = self.resources.budget.bytes();
        if memory_limit < (1 << 20) {
            return Err(ConfigError::Invalid {
                option: "memory_limit",
                message: "must be at least 1 MiB".into(),
            });
        }
        let threads = self.resources.jobs.or_cores();
        Ok(IngestConfig {
            inputs,
            out,
            filter: GameFilter {
                rated_only: self.rated_only,
                speeds,
                min_elo: self.min_elo,
                max_elo: self.max_elo,
            },
            selection: Selection {
                max_games: self.max_games,
                sample: self.sample_games.map(|games| Sample {
                    games,
                    seed: self.seed,
                }),
            },
            test_fraction: self.test_fraction,
            test_split,
            limits,
            threads,
            memory_limit,
            progress: env.progress,
            spill_format: SpillFormat::from_env(env.var_os(SpillFormat::ENV)).map_err(
                |message| ConfigError::Invalid {
                    option: SpillFormat::ENV,
                    message,
                },
            )?,
        })
    }
}

/// What ingest's `--memory-limit` covers, from the constants the budget is
/// computed with (shown by `chessbench ingest --help`).
pub fn memory_note() -> String {
    use super::dedup::{
        MIN_TABLES, PIPELINE_FLOOR, PIPELINE_RESERVE, STREAM_TABLE_BYTES, least_limit,
    };
    let mib = |b: u64| format!("{}MiB", b >> 20);
    format!(
        "Memory (--memory-limit, at least 1MiB): full tables of boards spill to the run \
directory. The board deduplication tables get what the rest leaves: the limit less {} or, if \
more, the limit less {} (the blocks being parsed, the boards in flight, the writers) less the \
spill buffers (an eighth of the tables); while games stream in, at most {} of tables a \
deduplicating thread, the whole share to merge spilled partitions. Ingest stays within the \
limit from {} ({} with one split); under that the tables get a quarter of it (at most {}).",
        mib(PIPELINE_RESERVE),
        mib(PIPELINE_FLOOR),
        mib(STREAM_TABLE_BYTES),
        mib(least_limit(2)),
        mib(least_limit(1)),
        mib(MIN_TABLES),
    )
}

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

/// Resolves `NAME/PATH` to a file in the source of dependency NAME of the
/// chessbench project this binary was built from (`cargo metadata` on its
/// Cargo.toml), wherever the spec was written: the demo's Lichess games ship
/// inside `pgn-reader`.
pub fn resolve_crate_path(spec: &str) -> Result<PathBuf, ConfigError> {
    let err = |message: String| ConfigError::Crate {
        spec: format!("crate:{spec}"),
        message,
    };
    let (name, rel) = spec
        .split_once('/')
        .ok_or_else(|| err("expected crate:NAME/PATH".into()))?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    if !manifest.is_file() {
        return Err(err(format!(
            "{} is gone: crate: paths name files of the chessbench source tree's dependencies",
            manifest.display()
        )));
    }
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
        use clap::ValueEnum;
        assert_eq!(Speed::from_str("blitz", false), Ok(Speed::Blitz));
        assert!(Speed::from_str("hyper", false).is_err());
        assert_eq!(
            serde_json::to_value(Speed::UltraBullet).unwrap(),
            "ultrabullet"
        );
    }

    #[test]
    fn inputs_read_as_a_path_or_a_table_without_typos() {
        let read = |v: serde_json::Value| serde_json::from_value::<InputArg>(v);
        let a = read(serde_json::json!({"path": "a.pgn", "split": "test"})).unwrap();
        assert_eq!(
            (a.path.as_str(), a.split.as_deref()),
            ("a.pgn", Some("test"))
        );
        assert_eq!(read(serde_json::json!("b.pgn")).unwrap().split, None);
        let e = read(serde_json::json!({"path": "a.pgn", "spilt": "test"})).unwrap_err();
        assert!(e.to_string().contains("`spilt`"), "{e}");
        assert!(read(serde_json::json!({"split": "test"})).is_err());
        assert!(read(serde_json::json!(3)).is_err());
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
    fn validation_errors_name_the_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let pgn = tmp.path().join("a.pgn");
        std::fs::write(&pgn, "").unwrap();
        let base = || IngestOptions {
            inputs: vec![pgn.display().to_string().parse().unwrap()],
            run: RunArg {
                run: Some(tmp.path().join("run")),
            },
            ..Default::default()
        };
        assert!(base().resolve(&Env::default()).is_ok());
        let spill = Env::default().with_var("CHESSBENCH_SPILL_FORMAT", "Packed");
        let e = base().resolve(&spill).unwrap_err().to_string();
        assert!(
            e.contains("CHESSBENCH_SPILL_FORMAT") && e.contains("\"plain\" or \"packed\""),
            "{e}"
        );
        let missing = IngestOptions {
            inputs: vec!["/no/such.pgn".parse().unwrap()],
            ..base()
        };
        let e = missing.resolve(&Env::default()).unwrap_err().to_string();
        assert!(e.contains("/no/such.pgn"), "{e}");
        let e = IngestOptions {
            test_fraction: Some(1.5),
            ..base()
        }
        .resolve(&Env::default())
        .unwrap_err();
        assert!(matches!(e, ConfigError::TestFraction(_)));
        let e = IngestOptions {
            min_elo: Some(2000),
            max_elo: Some(1000),
            ..base()
        }
        .resolve(&Env::default())
        .unwrap_err();
        assert!(matches!(e, ConfigError::EloRange { .. }));
        let e = IngestOptions {
            max_game_bytes: ByteSize(100),
            ..base()
        }
        .resolve(&Env::default())
        .unwrap_err()
        .to_string();
        assert!(e.contains("max_game_bytes"), "{e}");
        assert!(matches!(
            IngestOptions {
                run: RunArg::default(),
                ..base()
            }
            .resolve(&Env::default()),
            Err(ConfigError::NoRun)
        ));
    }
}
