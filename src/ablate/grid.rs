//! A grid file: a base recipe (the `[annotate]`, `[train]` and `[eval]`
//! tables of a pipeline file) and the axes varied one at a time around it
//! (`[ablate.axes]`), as the paper's ablations do (Ruoss et al. 2024,
//! Table 2 and Table A2: a variant per value, the other settings at the
//! base). [`Grid::load`] reads and checks the whole grid, every variant's
//! options included, before anything runs.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::{
    annotate::{AnnotateOptions, config::AnnotateConfig},
    eval::{EvalConfig, EvalOptions},
    options::{self, Env, OptionsError, line_of},
    train::{TrainOptions, config::TrainConfig},
    uci_client::Limit,
};

/// Annotate's search limits: the data-level axes (a variant per limit
/// re-annotates the train split's boards).
pub(crate) const DATA_AXES: [&str; 3] = ["nodes", "movetime_ms", "depth"];

/// Train options an axis may not vary: where the run lives and its name
/// (the grid names every variant's run) and the seed (`[ablate] seeds`).
const NOT_AXES: [&str; 3] = ["run", "name", "seed"];

/// Why a grid cannot run, naming the file, line and key.
#[derive(Debug, Error)]
pub enum GridError {
    #[error(transparent)]
    Options(#[from] OptionsError),
    #[error("{}{}: {message}", path.display(), at(*line))]
    Bad {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
}

fn at(line: Option<usize>) -> String {
    line.map(|n| format!(":{n}")).unwrap_or_default()
}

/// The `[ablate]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AblateTable {
    /// The grid's name: results go to RUN/ablate/NAME [default: the file's
    /// stem].
    name: Option<String>,
    /// The run directory, relative to the file.
    run: Option<String>,
    /// Every variant is trained once per seed [default: the base's seed].
    seeds: Option<Vec<u64>>,
    /// Variants trained at once on this machine.
    parallel: Option<usize>,
    /// Measured training throughput of the base recipe on the target
    /// device (samples/s), for `--plan`'s projected cost.
    samples_per_s: Option<f64>,
    /// Where `samples_per_s` was measured (printed with the projection).
    measured_on: Option<String>,
    /// Axis name to the values it takes.
    #[serde(default)]
    axes: toml::Table,
}

/// Whether an axis changes the model recipe or the data it learns from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The base recipe itself.
    Base,
    /// A `[train]` option.
    Model,
    /// A search limit of `[annotate]`: the train split is annotated again.
    Data,
}

impl Level {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::Base => "base",
            Level::Model => "model",
            Level::Data => "data",
        }
    }
}

/// One axis: an option and the values it takes.
#[derive(Debug, Clone)]
pub struct Axis {
    pub key: String,
    pub level: Level,
    pub values: Vec<toml::Value>,
}

/// One training run of the grid: a setting (or the base) and a seed, with
/// the validated options of the stages it runs.
#[derive(Debug, Clone)]
pub struct Variant {
    /// `base` or `KEY=VALUE`.
    pub id: String,
    pub axis: Option<String>,
    pub setting: Option<String>,
    pub level: Level,
    pub seed: u64,
    /// The training run's name (also the results file's stem).
    pub train_name: String,
    pub train: TrainConfig,
    pub eval: EvalConfig,
    /// The annotation of a data-level variant's own run directory.
    pub annotate: Option<AnnotateConfig>,
}

/// A data-level setting: its own run directory, annotated once for all
/// seeds.
#[derive(Debug, Clone)]
pub struct DataVariant {
    pub id: String,
    pub dir: PathBuf,
    pub annotate: AnnotateConfig,
}

/// A grid, read and checked.
#[derive(Debug, Clone)]
pub struct Grid {
    pub file: PathBuf,
    pub name: String,
    /// The run directory trained on; results under `RUN/ablate/NAME/`.
    pub run: PathBuf,
    pub seeds: Vec<u64>,
    pub parallel: usize,
    pub samples_per_s: Option<f64>,
    pub measured_on: Option<String>,
    pub axes: Vec<Axis>,
    /// The base's annotation of RUN (when the grid has `[annotate]`).
    pub base_annotate: Option<AnnotateConfig>,
    pub data: Vec<DataVariant>,
    /// Every variant, seeds innermost, the base first.
    pub variants: Vec<Variant>,
}

impl Grid {
    /// `RUN/ablate/NAME`.
    pub fn dir(&self) -> PathBuf {
        self.run.join("ablate").join(&self.name)
    }

    /// Reads the grid `file`; `run` (the command line's RUN_DIR) replaces
    /// the file's `run`. The steps: the file's tables ([`GridFile::parse`]),
    /// its run and name, its axes ([`GridFile::axes`]), the base recipe
    /// (train and annotate, resolved as those stages resolve them), and one
    /// variant per axis value and seed ([`GridFile::variants`]).
    pub fn load(file: &Path, run: Option<&Path>) -> Result<Grid, GridError> {
        let text = std::fs::read_to_string(file).map_err(|source| OptionsError::Read {
            path: file.to_owned(),
            source,
        })?;
        let f = GridFile::parse(file, &text)?;
        let ablate = &f.ablate;
        let base_dir = file.parent().unwrap_or(Path::new(""));
        let run = match (run, &ablate.run) {
            (Some(run), _) => run.to_owned(),
            (None, Some(r)) => PathBuf::from(options::rebase_path(r, false, base_dir)),
            (None, None) => {
                return Err(f.bad(
                    None,
                    "no run directory: give RUN_DIR or `run` in [ablate]".into(),
                ));
            }
        };
        let name = match &ablate.name {
            Some(n) => n.clone(),
            None => file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        if !valid_name(&name) {
            return Err(f.bad(
                line_of(&text, "ablate", "name"),
                format!("[ablate] name: expected letters, digits, '-' or '_', got {name:?}"),
            ));
        }
        let parallel = ablate.parallel.unwrap_or(1);
        if parallel == 0 {
            return Err(f.bad(
                line_of(&text, "ablate", "parallel"),
                "[ablate] parallel: must be at least 1".into(),
            ));
        }
        let axes = f.axes()?;

        // The base.
        let base_train: TrainOptions = options::from_file_table(file, f.train.clone(), &text)?;
        let base_config = resolve_train(&base_train, &run, "base")
            .map_err(|e| f.bad(line_of_table(&text, "train"), format!("[train] {e}")))?;
        // `require_fused` holds for every variant's training and evaluation
        // in this process, as for `chessbench train`.
        if base_train.compute.require_fused {
            crate::model::require_fused(base_train.compute.device)
                .map_err(|e| f.bad(line_of_table(&text, "train"), format!("[train] {e}")))?;
        }
        let seeds = ablate.seeds.clone().unwrap_or(vec![base_config.seed]);
        if seeds.is_empty() {
            return Err(f.bad(
                line_of(&text, "ablate", "seeds"),
                "[ablate] seeds: give at least one".into(),
            ));
        }
        let base_annotate = match &f.annotate {
            Some(table) => {
                let options: AnnotateOptions =
                    options::from_file_table(file, table.clone(), &text)?;
                Some(annotate_config(options, &run, None).map_err(|e| {
                    f.bad(line_of_table(&text, "annotate"), format!("[annotate] {e}"))
                })?)
            }
            None => None,
        };
        let (data, variants) = f.variants(
            &axes,
            &run,
            &name,
            &seeds,
            &base_config,
            base_annotate.as_ref(),
        )?;
        let GridFile { ablate, .. } = f;
        Ok(Grid {
            file: file.to_owned(),
            name,
            run,
            seeds,
            parallel,
            samples_per_s: ablate.samples_per_s,
            measured_on: ablate.measured_on,
            axes,
            base_annotate,
            data,
            variants,
        })
    }

    /// The base's setting of an axis, as the grid spells values.
    pub fn base_setting(&self, key: &str) -> Option<String> {
        let base = self.variants.first()?;
        if DATA_AXES.contains(&key) {
            return match (key, self.base_annotate.as_ref()?.limit) {
                ("nodes", Limit::Nodes(n)) | ("movetime_ms", Limit::MoveTimeMs(n)) => {
                    Some(n.to_string())
                }
                ("depth", Limit::Depth(d)) => Some(d.to_string()),
                _ => None,
            };
        }
        let json = serde_json::to_value(&base.train).ok()?;
        let shape = base.train.shape();
        match key {
            // Options the recipe leaves out at their defaults.
            "layers" => Some(shape.layers.to_string()),
            "architecture" => Some(json_text(&serde_json::to_value(shape.architecture).ok()?)),
            "jobs" => json.get("workers").map(json_text),
            _ => json.get(key).map(json_text),
        }
    }
}

/// A grid file's text and tables, as read: what the steps of
/// [`Grid::load`] work from.
struct GridFile<'a> {
    file: &'a Path,
    text: &'a str,
    ablate: AblateTable,
    train: toml::Table,
    eval: toml::Table,
    /// `[annotate]`, when the grid has one (the base annotation).
    annotate: Option<toml::Table>,
}

impl<'a> GridFile<'a> {
    /// The file's tables: `[ablate]` read into its fields, the stages'
    /// tables kept for each variant to change.
    fn parse(file: &'a Path, text: &'a str) -> Result<Self, GridError> {
        let bad = |line: Option<usize>, message: String| GridError::Bad {
            path: file.to_owned(),
            line,
            message,
        };
        let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
            bad(line, e.message().to_owned())
        })?;
        for key in doc.keys() {
            if !["ablate", "annotate", "train", "eval"].contains(&key.as_str()) {
                return Err(bad(
                    line_of_table(text, key),
                    format!(
                        "unknown table [{key}]; a grid has [ablate], [annotate], [train] and [eval]"
                    ),
                ));
            }
        }
        let table = |doc: &mut toml::Table, name: &str| -> Result<toml::Table, GridError> {
            match doc.remove(name) {
                None => Ok(toml::Table::new()),
                Some(toml::Value::Table(t)) => Ok(t),
                Some(other) => Err(bad(
                    line_of_table(text, name),
                    format!("`{name}` must be a table, not a {}", other.type_str()),
                )),
            }
        };
        let has_annotate = doc.contains_key("annotate");
        let ablate_table = table(&mut doc, "ablate")?;
        let ablate: AblateTable =
            toml::Value::Table(ablate_table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    let message = e.message().to_owned();
                    let key = message
                        .split('`')
                        .nth(1)
                        .map(str::to_owned)
                        .unwrap_or_default();
                    bad(line_of(text, "ablate", &key), format!("[ablate] {message}"))
                })?;
        let train_table = table(&mut doc, "train")?;
        let eval_table = table(&mut doc, "eval")?;
        let annotate_table = table(&mut doc, "annotate")?;
        Ok(Self {
            file,
            text,
            ablate,
            train: train_table,
            eval: eval_table,
            annotate: has_annotate.then_some(annotate_table),
        })
    }

    /// An error at `line` of the file.
    fn bad(&self, line: Option<usize>, message: String) -> GridError {
        GridError::Bad {
            path: self.file.to_owned(),
            line,
            message,
        }
    }

    /// An error in a variant: at its axis's line, prefixed with the axis.
    fn stage_err(&self, key: Option<&str>, e: String) -> GridError {
        let line = key.and_then(|k| line_of(self.text, "ablate.axes", k));
        let prefix = key
            .map(|k| format!("[ablate.axes] {k}: "))
            .unwrap_or_default();
        self.bad(line, format!("{prefix}{e}"))
    }

    /// The axes, in the file's order: known keys, non-empty lists.
    fn axes(&self) -> Result<Vec<Axis>, GridError> {
        let (text, bad) = (self.text, |line, message| self.bad(line, message));
        let (ablate, has_annotate) = (&self.ablate, self.annotate.is_some());
        let train_keys = options::keys::<TrainOptions>();
        let mut axes = Vec::new();
        for (key, values) in &ablate.axes {
            let line = line_of(text, "ablate.axes", key);
            let level = if DATA_AXES.contains(&key.as_str()) {
                if !has_annotate {
                    return Err(bad(
                        line,
                        format!(
                            "[ablate.axes] `{key}` is a search limit: the grid needs an [annotate] table (the base annotation) to vary it"
                        ),
                    ));
                }
                Level::Data
            } else if train_keys.contains(key) && !NOT_AXES.contains(&key.as_str()) {
                Level::Model
            } else {
                let known: Vec<&str> = train_keys
                    .iter()
                    .map(String::as_str)
                    .filter(|k| !NOT_AXES.contains(k))
                    .chain(DATA_AXES)
                    .collect();
                return Err(bad(
                    line,
                    format!(
                        "[ablate.axes] `{key}` is not an option the trainer knows; an axis is one of: {}",
                        known.join(", ")
                    ),
                ));
            };
            let values = match values {
                toml::Value::Array(v) if !v.is_empty() => v.clone(),
                _ => {
                    return Err(bad(
                        line,
                        format!("[ablate.axes] `{key}` must be a non-empty list of values"),
                    ));
                }
            };
            axes.push(Axis {
                key: key.clone(),
                level,
                values,
            });
        }
        Ok(axes)
    }

    /// The variants: the base, then each axis value, each once per seed;
    /// a search-limit value also gets the data it learns from (its own
    /// annotation of the train split, under RUN/ablate/NAME/data).
    #[allow(clippy::type_complexity)]
    fn variants(
        &self,
        axes: &[Axis],
        run: &Path,
        name: &str,
        seeds: &[u64],
        base_config: &TrainConfig,
        base_annotate: Option<&AnnotateConfig>,
    ) -> Result<(Vec<DataVariant>, Vec<Variant>), GridError> {
        let (file, text) = (self.file, self.text);
        let bad = |line, message| self.bad(line, message);
        let stage_err = |key, e| self.stage_err(key, e);
        let annotate_table = self.annotate.clone().unwrap_or_default();
        let (train_table, eval_table) = (&self.train, &self.eval);
        let grid_dir = run.join("ablate").join(name);
        let mut data = Vec::new();
        let mut variants = Vec::new();
        let mut settings: Vec<(Option<&Axis>, Option<&toml::Value>)> = vec![(None, None)];
        for axis in axes {
            for value in &axis.values {
                settings.push((Some(axis), Some(value)));
            }
        }
        for (axis, value) in settings {
            let (id, setting) = match (axis, value) {
                (Some(a), Some(v)) => {
                    let s = setting_text(v);
                    (format!("{}={s}", a.key), Some(s))
                }
                _ => ("base".to_owned(), None),
            };
            if variants.iter().any(|v: &Variant| v.id == id) {
                return Err(stage_err(
                    axis.map(|a| a.key.as_str()),
                    format!("{id} is listed twice"),
                ));
            }
            let level = axis.map_or(Level::Base, |a| a.level);
            // The data this variant learns from.
            let (train_run, annotate) = match (axis, value, level) {
                (Some(a), Some(v), Level::Data) => {
                    let dir = grid_dir.join("data").join(file_safe(&id));
                    let mut t = annotate_table.clone();
                    for k in DATA_AXES {
                        t.remove(k);
                    }
                    t.insert(a.key.clone(), v.clone());
                    let options: AnnotateOptions = options::from_file_table(file, t, text)
                        .map_err(|e| stage_err(Some(&a.key), e.to_string()))?;
                    let config = annotate_config(options, &dir, Some(&base_config.split))
                        .map_err(|e| stage_err(Some(&a.key), e))?;
                    if base_annotate
                        .as_ref()
                        .is_some_and(|b| b.limit == config.limit)
                    {
                        return Err(stage_err(
                            Some(&a.key),
                            format!("{id} is the base's own search limit"),
                        ));
                    }
                    data.push(DataVariant {
                        id: id.clone(),
                        dir: dir.clone(),
                        annotate: config.clone(),
                    });
                    (dir, Some(config))
                }
                _ => (run.to_owned(), None),
            };
            for &seed in seeds {
                let train_name = format!("{name}.{}.s{seed}", file_safe(&id));
                let mut t = train_table.clone();
                if let (Some(a), Some(v), Level::Model) = (axis, value, level) {
                    t.insert(a.key.clone(), v.clone());
                }
                t.insert("seed".into(), toml::Value::Integer(seed as i64));
                let options: TrainOptions = options::from_file_table(file, t, text)
                    .map_err(|e| stage_err(axis.map(|a| a.key.as_str()), e.to_string()))?;
                let train = resolve_train(&options, &train_run, &train_name)
                    .map_err(|e| stage_err(axis.map(|a| a.key.as_str()), e))?;
                if level == Level::Model && same_recipe(&train, base_config) {
                    return Err(stage_err(
                        axis.map(|a| a.key.as_str()),
                        format!("{id} is the base's own setting"),
                    ));
                }
                let mut eval: EvalOptions =
                    options::from_file_table(file, eval_table.clone(), text)?;
                eval.run.run = Some(run.to_owned());
                eval.checkpoint = Some(train.out_dir());
                eval.out = Some(grid_dir.join("eval").join(&train_name));
                let eval = eval
                    .resolve(&Env::default())
                    .map_err(|e| bad(line_of_table(text, "eval"), format!("[eval] {e}")))?;
                variants.push(Variant {
                    id: id.clone(),
                    axis: axis.map(|a| a.key.clone()),
                    setting: setting.clone(),
                    level,
                    seed,
                    train_name,
                    train,
                    eval,
                    annotate: annotate.clone(),
                });
            }
        }
        Ok((data, variants))
    }
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "default".into(),
        other => other.to_string(),
    }
}

/// Whether two recipes train the same model on the same data (names and
/// run directories aside).
fn same_recipe(a: &TrainConfig, b: &TrainConfig) -> bool {
    let normal = |c: &TrainConfig| {
        let mut c = c.clone();
        // The preset's own depth, spelled out or not.
        c.layers = Some(c.shape().layers);
        c.name = String::new();
        c.run = PathBuf::new();
        c.seed = 0;
        c
    };
    normal(a) == normal(b)
}

fn resolve_train(options: &TrainOptions, run: &Path, name: &str) -> Result<TrainConfig, String> {
    let mut options = options.clone();
    options.run.run = Some(run.to_owned());
    options.name = Some(name.to_owned());
    options.resolve(&Env::default()).map_err(|e| e.to_string())
}

fn annotate_config(
    mut options: AnnotateOptions,
    run: &Path,
    split: Option<&str>,
) -> Result<AnnotateConfig, String> {
    options.run.run = Some(run.to_owned());
    if let Some(split) = split {
        options.splits = vec![split.to_owned()];
    }
    // Shards come from `ablate --shard` (or the scheduler) when it runs.
    options.shard = None;
    options.resolve(&Env::default()).map_err(|e| e.to_string())
}

/// A value as the grid spells it: strings bare, numbers and booleans as
/// TOML writes them.
pub(crate) fn setting_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `id` with every character a run name may not hold replaced by `-`.
pub(crate) fn file_safe(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
}

/// The line of `[name]` in a grid's text.
fn line_of_table(text: &str, name: &str) -> Option<usize> {
    text.lines()
        .position(|l| l.trim() == format!("[{name}]"))
        .map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Grid, GridError> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("g.toml");
        std::fs::write(&file, text).unwrap();
        Grid::load(&file, Some(Path::new("/tmp/run")))
    }

    const BASE: &str = "[train]\nsteps = 10\nbuckets = 32\n";

    #[test]
    fn one_variant_per_value_and_seed_around_the_base() {
        let g = load(&format!(
            "{BASE}[ablate]\nseeds = [0, 1]\n[ablate.axes]\nloss = [\"l2\", \"cross_entropy\"]\nbuckets = [16]\n"
        ))
        .unwrap();
        let ids: Vec<(String, u64)> = g.variants.iter().map(|v| (v.id.clone(), v.seed)).collect();
        assert_eq!(
            ids,
            [
                ("base", 0),
                ("base", 1),
                ("loss=l2", 0),
                ("loss=l2", 1),
                ("loss=cross_entropy", 0),
                ("loss=cross_entropy", 1),
                ("buckets=16", 0),
                ("buckets=16", 1)
            ]
            .map(|(a, b)| (a.to_owned(), b))
        );
        // The axes and their values in the file's order.
        let v = &g.variants[6];
        assert_eq!((v.train.buckets, v.train.seed), (16, 0));
        assert_eq!(v.train.name, "g.buckets-16.s0");
        assert_eq!(v.train.loss, g.variants[0].train.loss);
        assert_eq!(g.base_setting("buckets").as_deref(), Some("32"));
        assert_eq!(g.base_setting("loss").as_deref(), Some("hl_gauss"));
        assert_eq!(g.base_setting("layers").as_deref(), Some("2"));
        assert_eq!(
            g.base_setting("architecture").as_deref(),
            Some("transformer")
        );
    }

    /// The label source is an axis like any train option: a variant per
    /// source, over the same run's tables.
    #[test]
    fn the_label_source_is_an_axis() {
        use crate::store::LabelSource;
        let g = load(&format!(
            "{BASE}[ablate.axes]\nlabel_source = [\"lichess_evals\", \"both\"]\n"
        ))
        .unwrap();
        let sources: Vec<(String, LabelSource)> = g
            .variants
            .iter()
            .map(|v| (v.id.clone(), v.train.label_source))
            .collect();
        assert_eq!(
            sources,
            [
                ("base".to_owned(), LabelSource::default()),
                (
                    "label_source=lichess_evals".to_owned(),
                    LabelSource::Only(crate::store::Source::LichessEvals)
                ),
                ("label_source=both".to_owned(), LabelSource::Both),
            ]
        );
        assert!(
            g.variants
                .iter()
                .all(|v| v.train.run == g.variants[0].train.run)
        );
    }

    #[test]
    fn bad_grids_name_the_file_line_and_key() {
        let err = |t: &str| load(t).unwrap_err().to_string();
        let e = err(&format!("{BASE}[ablate.axes]\nbatch = [1]\n"));
        assert!(e.contains("g.toml:5:") && e.contains("`batch`"), "{e}");
        let e = err(&format!("{BASE}[ablate.axes]\nloss = [\"hinge\"]\n"));
        assert!(e.contains("g.toml:5:") && e.contains("loss"), "{e}");
        let e = err(&format!("{BASE}[ablate.axes]\nbuckets = [1]\n"));
        assert!(e.contains(":5:") && e.contains("buckets"), "{e}");
        let e = err(&format!("{BASE}[ablate.axes]\nbuckets = []\n"));
        assert!(e.contains("non-empty"), "{e}");
        let e = err(&format!("{BASE}[ablate.axes]\nbuckets = [32]\n"));
        assert!(e.contains("base's own"), "{e}");
        // The preset's depth, spelled out.
        let e = err(&format!("{BASE}[ablate.axes]\nlayers = [2]\n"));
        assert!(e.contains("base's own"), "{e}");
        let e = err(&format!("{BASE}[ablate.axes]\nnodes = [50]\n"));
        assert!(e.contains("[annotate]"), "{e}");
        let e = err(&format!("{BASE}[ablate]\nseed = [1]\n"));
        assert!(e.contains("g.toml:5:") && e.contains("seed"), "{e}");
        let e = err(&format!("{BASE}[tarin]\nx = 1\n"));
        assert!(e.contains("g.toml:4:") && e.contains("[tarin]"), "{e}");
        let e = err("[train]\nsteps = = 1\n");
        assert!(e.contains("g.toml:2:"), "{e}");
        let e = err(&format!("{BASE}[ablate.axes]\nseed = [1]\n"));
        assert!(e.contains("not an option"), "{e}");
    }

    #[test]
    fn a_search_limit_axis_annotates_its_own_run() {
        let g = load(&format!(
            "[annotate]\nnodes = 200\nmax_boards = 64\n{BASE}[ablate.axes]\nnodes = [50]\nmovetime_ms = [20]\n"
        ))
        .unwrap();
        assert_eq!(g.data.len(), 2);
        let d = &g.data[0];
        assert_eq!(d.id, "nodes=50");
        assert!(d.dir.ends_with("ablate/g/data/nodes-50"), "{:?}", d.dir);
        assert_eq!(
            d.annotate.splits.as_deref(),
            Some(&["train".to_owned()][..])
        );
        assert_eq!(d.annotate.max_boards, Some(64));
        let v = g.variants.iter().find(|v| v.id == "nodes=50").unwrap();
        assert_eq!(v.train.run, d.dir);
        // Evaluated on the base run's test boards, as every other variant.
        assert_eq!(v.eval.run, Path::new("/tmp/run"));
        assert_eq!(g.base_setting("nodes").as_deref(), Some("200"));
    }
}
