//! `chessbench._chessbench`: the native half of the Python package.
//!
//! It wraps chessbench's training loader ([`chessbench::train::data`]) and
//! the ChessBench encodings ([`chessbench::chess`]) and nothing else: the
//! options, their defaults and checks are `chessbench train`'s
//! ([`TrainOptions`], given as a `[train]` table), and the batches are the
//! ones the trainer draws ([`training_data`]). Batches cross into Python as
//! NumPy arrays that own the loader's buffers (no copy). Every Rust error
//! becomes a `chessbench.ChessbenchError` carrying its message, and the GIL
//! is released while a batch is built.

use std::path::Path;

use chessbench::{
    chess::{
        actions::{NUM_ACTIONS, vocabulary},
        tokens::tokenize as tokenize_fen,
        value::{
            ValueBuckets, centipawns_to_win_probability, default_hl_gauss_sigma, hl_gauss_target,
        },
    },
    options::{self, Shard},
    store::{check_run as check_run_dir, sql_files::BUILTIN},
    train::{
        TrainOptions,
        data::{Batch, Loader as RustLoader},
        sampler::Position,
        training_data,
    },
    ui::describe,
};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::{
    create_exception,
    exceptions::PyException,
    prelude::*,
    types::{PyBool, PyDict, PyFloat, PyInt, PyString},
};

create_exception!(
    chessbench,
    ChessbenchError,
    PyException,
    "A chessbench error: a missing or partial run, an unknown split, a bad option, an unreadable table. The message is the Rust error's."
);

/// The error with its causes, as `chessbench` prints them.
fn error(e: impl std::error::Error + 'static) -> PyErr {
    ChessbenchError::new_err(describe(&e))
}

fn invalid(message: String) -> PyErr {
    ChessbenchError::new_err(message)
}

/// A Python value as a TOML value of a `[train]` table.
fn toml_value(key: &str, value: &Bound<'_, PyAny>) -> PyResult<toml::Value> {
    if value.is_instance_of::<PyBool>() {
        return Ok(toml::Value::Boolean(value.extract()?));
    }
    if value.is_instance_of::<PyInt>() {
        return value
            .extract::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| {
                invalid(format!(
                    "option {key}: {value} does not fit a 64-bit integer"
                ))
            });
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(toml::Value::Float(value.extract()?));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(toml::Value::String(value.extract()?));
    }
    // Paths (os.PathLike) as their text.
    if let Ok(fspath) = value.call_method0("__fspath__") {
        return Ok(toml::Value::String(fspath.extract()?));
    }
    Err(invalid(format!(
        "option {key}: expected a bool, int, float, str or path, got {}",
        value.get_type().name()?
    )))
}

/// A batch as Python receives it: tokens, targets, win probabilities and
/// the position after it.
type PyBatch<'py> = (
    Bound<'py, PyArray2<i32>>,
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray1<f32>>,
    (u64, u64, u64),
);

/// Streams `chessbench train`'s batches of a run's split.
///
/// `options` holds `chessbench train`'s options as a pipeline file's
/// `[train]` table does (`run`, `split`, `policy`, `batch_size`, `buckets`,
/// `sampling`, `label_source`, `seed`, `window`, `jobs`, `memory_limit`, ...;
/// `None` values are left out): unset ones take the command line's
/// defaults. `rank` of `world_size` selects a data-parallel shard; `start`
/// resumes at a batch's `position`.
#[pyclass(module = "chessbench._chessbench", name = "Loader")]
struct Loader {
    inner: RustLoader,
    config_json: String,
    seq_len: usize,
    batch_size: usize,
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (options, rank = 0, world_size = 1, start = None))]
    fn new(
        py: Python<'_>,
        options: &Bound<'_, PyDict>,
        rank: u32,
        world_size: u32,
        start: Option<(u64, u64, u64)>,
    ) -> PyResult<Loader> {
        let mut table = toml::Table::new();
        for (key, value) in options.iter() {
            let key: String = key.extract()?;
            if value.is_none() {
                continue;
            }
            let value = toml_value(&key, &value)?;
            table.insert(key, value);
        }
        let origin = Path::new("chessbench.Loader");
        let options: TrainOptions = options::from_file_table(origin, table, "").map_err(error)?;
        let config = options.resolve(&options::Env::default()).map_err(error)?;
        if world_size == 0 || rank >= world_size {
            return Err(invalid(format!(
                "rank {rank} of world size {world_size}: expected 0 <= rank < world_size"
            )));
        }
        let data = training_data(
            &config,
            Shard {
                index: rank,
                count: world_size,
            },
        );
        let start = start.map_or(Position::default(), |(epoch, window, offset)| Position {
            epoch,
            window,
            offset,
        });
        let seq_len = data.policy.sequence_length();
        let batch_size = data.batch_size;
        let config_json = serde_json::to_string(&config).map_err(error)?;
        // Opening reads every file's footer: no GIL needed.
        let inner = py.detach(|| RustLoader::new(data, start)).map_err(error)?;
        Ok(Loader {
            inner,
            config_json,
            seq_len,
            batch_size,
        })
    }

    /// The next batch: `(tokens, targets, win_prob, (epoch, window,
    /// offset))`, `tokens` an int32 array `[batch_size, seq_len]` of
    /// searchless_chess's sequences (77 board tokens, then the action for
    /// action values and behavioural cloning, then the value bucket for
    /// value policies), `targets` int32 `[batch_size]` (the last token: the
    /// bucket or the action), `win_prob` float32 `[batch_size]` (NaN for
    /// behavioural cloning), and the position after the batch.
    fn next_batch<'py>(&mut self, py: Python<'py>) -> PyResult<PyBatch<'py>> {
        let inner = &mut self.inner;
        let Batch {
            tokens,
            seq_len,
            targets,
            win_prob,
            position,
        } = py.detach(|| inner.next_batch()).map_err(error)?;
        let rows = targets.len();
        // The arrays own the vectors' buffers; reshaping makes a view.
        let tokens = tokens.into_pyarray(py).reshape([rows, seq_len])?;
        Ok((
            tokens,
            targets.into_pyarray(py),
            win_prob.into_pyarray(py),
            (position.epoch, position.window, position.offset),
        ))
    }

    /// Records per uniform epoch of the split (all shards together).
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records()
    }

    /// The most bytes the loader's windows have held at once (what
    /// `memory_limit` bounds: half of it, as in `chessbench train`).
    #[getter]
    fn peak_bytes(&self) -> u64 {
        self.inner.peak_bytes()
    }

    #[getter]
    fn seq_len(&self) -> usize {
        self.seq_len
    }

    #[getter]
    fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The validated recipe, as JSON (the `config.json` `chessbench train`
    /// saves beside its checkpoints).
    #[getter]
    fn config_json(&self) -> &str {
        &self.config_json
    }
}

/// `chessbench train`'s options: `(key, default, help)` for each, the
/// default as the command line writes it (None: no default).
#[pyfunction]
fn train_options() -> Vec<(String, Option<String>, String)> {
    options::describe::<TrainOptions>()
}

/// The 77 tokens of a FEN (uint8), as searchless_chess's tokenizer.
#[pyfunction]
fn tokenize<'py>(py: Python<'py>, fen: &str) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let tokens = tokenize_fen(fen).map_err(error)?;
    Ok(tokens.to_vec().into_pyarray(py))
}

/// The 1,968 UCI moves in ChessBench's action order.
#[pyfunction]
fn actions() -> Vec<String> {
    let v = vocabulary();
    (0..NUM_ACTIONS as u16)
        .map(|a| v.uci(a).unwrap_or_default().to_owned())
        .collect()
}

/// The action index of a UCI move.
#[pyfunction]
fn action_index(uci: &str) -> PyResult<u16> {
    vocabulary().parse(uci).ok_or_else(|| {
        invalid(format!(
            "{uci:?} is not one of ChessBench's 1968 UCI actions"
        ))
    })
}

/// Win probability in [0, 1] of a centipawn score (Ruoss et al. 2024,
/// Appendix: 50 + 50 (2 / (1 + exp(-0.00368208 cp)) - 1), as a fraction).
#[pyfunction]
fn win_probability(cp: f64) -> f64 {
    centipawns_to_win_probability(cp)
}

/// A NumPy float64 vector.
type Float64s<'py> = Bound<'py, PyArray1<f64>>;

fn buckets(k: usize) -> PyResult<ValueBuckets> {
    ValueBuckets::new(k).map_err(error)
}

/// The K - 1 interior edges of K uniform value buckets
/// (`linspace(0, 1, K + 1)[1:-1]`) and their K centres.
#[pyfunction]
fn bucket_edges_values(py: Python<'_>, k: usize) -> PyResult<(Float64s<'_>, Float64s<'_>)> {
    let b = buckets(k)?;
    Ok((
        b.edges().to_vec().into_pyarray(py),
        b.values().to_vec().into_pyarray(py),
    ))
}

/// HL-Gauss targets `[len(win_prob), K]` (float32): the mass of
/// N(y, sigma^2) in each of K uniform bins of [0, 1], renormalised;
/// sigma = 0.75 / K unless given (Farebrother et al. 2024, the paper's
/// value loss).
#[pyfunction]
#[pyo3(signature = (win_prob, k, sigma = None))]
fn hl_gauss<'py>(
    py: Python<'py>,
    win_prob: PyReadonlyArray1<'py, f32>,
    k: usize,
    sigma: Option<f64>,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let sigma = sigma.unwrap_or_else(|| default_hl_gauss_sigma(k));
    let y = win_prob.as_slice()?;
    let mut out = Vec::with_capacity(y.len() * k);
    for &p in y {
        let target = hl_gauss_target(k, sigma, f64::from(p)).map_err(error)?;
        out.extend(target.iter().map(|&t| t as f32));
    }
    out.into_pyarray(py).reshape([y.len(), k])
}

/// Raises unless `run` is a chessbench run directory whose tables can be
/// read (finishing a commit a crashed process left half done).
#[pyfunction]
fn check_run(py: Python<'_>, run: std::path::PathBuf) -> PyResult<()> {
    py.detach(|| check_run_dir(&run)).map_err(error)
}

/// The SQL files `chessbench sql` ships (`views` and the built-in queries),
/// by name.
#[pyfunction]
fn sql_files() -> Vec<(&'static str, &'static str)> {
    BUILTIN.iter().map(|b| (b.name, b.text)).collect()
}

#[pymodule]
fn _chessbench(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ChessbenchError", m.py().get_type::<ChessbenchError>())?;
    m.add_class::<Loader>()?;
    m.add_function(wrap_pyfunction!(train_options, m)?)?;
    m.add_function(wrap_pyfunction!(tokenize, m)?)?;
    m.add_function(wrap_pyfunction!(actions, m)?)?;
    m.add_function(wrap_pyfunction!(action_index, m)?)?;
    m.add_function(wrap_pyfunction!(win_probability, m)?)?;
    m.add_function(wrap_pyfunction!(bucket_edges_values, m)?)?;
    m.add_function(wrap_pyfunction!(hl_gauss, m)?)?;
    m.add_function(wrap_pyfunction!(sql_files, m)?)?;
    m.add_function(wrap_pyfunction!(check_run, m)?)?;
    m.add("NUM_ACTIONS", NUM_ACTIONS)?;
    Ok(())
}
