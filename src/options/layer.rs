//! A stage's options layered: defaults, then the pipeline file's table,
//! then the command line, with relative paths rebased (the rule in
//! [`crate::options`]'s documentation).

use std::{
    collections::BTreeSet,
    fmt,
    path::{Path, PathBuf},
};

use clap::{ArgAction, ArgMatches, Args, FromArgMatches, ValueHint, parser::ValueSource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;

/// The tables a pipeline file may have (`[ablate]`: a grid file's list of
/// variants, see [`crate::ablate`]).
pub(crate) const STAGES: [&str; 5] = ["ingest", "annotate", "train", "eval", "ablate"];

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

#[cfg(test)]
mod tests {
    use super::super::values::ByteSize;
    use super::*;
    use serde::Deserialize;

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
