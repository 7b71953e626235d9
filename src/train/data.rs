//! Training data: annotated records of a run, as token sequences in
//! searchless_chess's layout ([`crate::chess::records`]), streamed from the
//! Parquet tables in sampler order, with prefetching worker threads.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    thread,
};

use arrow_array::{
    Array, Float64Array, RecordBatch, StringArray, UInt16Array, UInt64Array, cast::AsArray,
};
use crossbeam_channel::{Receiver, bounded};
use parquet::arrow::ProjectionMask;
use thiserror::Error;

use super::sampler::{self, Position, Sampling};
use crate::{
    chess::{
        actions::NUM_ACTIONS,
        records::{RecordSet, push_sequence},
        tokens::{SEQUENCE_LENGTH, tokenize},
        value::ValueBuckets,
    },
    store::{StoreError, Table, commit::partition_dir, open_parquet, parquet_files},
};

fn value_table(set: RecordSet) -> Table {
    match set {
        RecordSet::ActionValue => Table::ActionValues,
        _ => Table::StateValues,
    }
}

/// Failures reading training data, naming the file.
#[derive(Debug, Error)]
pub enum DataError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}: {message}", path.display())]
    Table { path: PathBuf, message: String },
    #[error("split {split:?} of run {} has no {table} records (annotate it first)", run.display())]
    Empty {
        run: PathBuf,
        split: String,
        table: &'static str,
    },
    #[error("invalid K = {0} value buckets: expected 2..={NUM_ACTIONS}")]
    Buckets(usize),
    #[error("a prefetch worker stopped: {0}")]
    Worker(String),
}

/// What the loader reads.
#[derive(Debug, Clone)]
pub struct DataConfig {
    pub run: PathBuf,
    pub split: String,
    pub policy: RecordSet,
    /// K value buckets (ignored for behavioural cloning).
    pub buckets: usize,
    pub batch_size: usize,
    pub sampling: Sampling,
    pub seed: u64,
    /// Units (row groups) shuffled together.
    pub window: usize,
    /// Prefetch threads.
    pub workers: usize,
}

/// A batch of sequences, row-major `[len, seq_len]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub tokens: Vec<i32>,
    pub seq_len: usize,
    /// The last token of each sequence (bucket or action).
    pub targets: Vec<i32>,
    /// The record's win probability (value policies; NaN for BC), for
    /// HL-Gauss and L2 targets.
    pub win_prob: Vec<f32>,
    /// Where the sampler stands after this batch.
    pub position: Position,
}

impl Batch {
    pub(crate) fn len(&self) -> usize {
        self.targets.len()
    }
}

/// One row group of a value-table file.
#[derive(Debug, Clone)]
struct Unit {
    path: PathBuf,
    row_group: usize,
}

/// Board tokens and sampling weights of a split, indexed by board id.
struct Boards {
    tokens: Vec<[u8; SEQUENCE_LENGTH]>,
    weights: Vec<u32>,
}

fn read_columns(
    path: &Path,
    row_group: Option<usize>,
    columns: &[&str],
) -> Result<Vec<RecordBatch>, DataError> {
    let b = open_parquet(path)?;
    let schema = b.parquet_schema();
    let indices: Vec<usize> = columns
        .iter()
        .map(|c| {
            (0..schema.num_columns())
                .find(|&i| schema.column(i).name() == *c)
                .ok_or_else(|| DataError::Table {
                    path: path.to_owned(),
                    message: format!("no column {c}"),
                })
        })
        .collect::<Result<_, _>>()?;
    let mask = ProjectionMask::leaves(schema, indices);
    let mut b = b.with_projection(mask).with_batch_size(64 * 1024);
    if let Some(rg) = row_group {
        b = b.with_row_groups(vec![rg]);
    }
    let r = b.build().map_err(|e| StoreError::parquet(path, e))?;
    r.collect::<Result<Vec<_>, _>>()
        .map_err(|e| DataError::Table {
            path: path.to_owned(),
            message: e.to_string(),
        })
}

fn column<'a, T: 'static>(
    batch: &'a RecordBatch,
    name: &str,
    path: &Path,
) -> Result<&'a T, DataError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| DataError::Table {
            path: path.to_owned(),
            message: format!("column {name} missing or of the wrong type"),
        })
}

impl Boards {
    /// Tokenizes every board of the split (77 bytes per board: 8 GB per 100M
    /// boards).
    fn load(run: &Path, split: &str) -> Result<Boards, DataError> {
        let dir = run.join(partition_dir(Table::Boards, split));
        let mut tokens = Vec::new();
        let mut weights = Vec::new();
        for path in parquet_files(&dir)? {
            for batch in read_columns(&path, None, &["board_id", "fen", "occurrences"])? {
                let ids = column::<UInt64Array>(&batch, "board_id", &path)?;
                let fens = column::<StringArray>(&batch, "fen", &path)?;
                let occ = column::<UInt64Array>(&batch, "occurrences", &path)?;
                for i in 0..batch.num_rows() {
                    let id = ids.value(i) as usize;
                    if id != tokens.len() {
                        return Err(DataError::Table {
                            path: path.clone(),
                            message: format!(
                                "board ids are not dense: {id} after {}",
                                tokens.len()
                            ),
                        });
                    }
                    let t = tokenize(fens.value(i)).map_err(|e| DataError::Table {
                        path: path.clone(),
                        message: format!("board {id}: {e}"),
                    })?;
                    tokens.push(t);
                    weights.push(if occ.is_null(i) {
                        1
                    } else {
                        occ.value(i).min(u64::from(u32::MAX)) as u32
                    });
                }
            }
        }
        Ok(Boards { tokens, weights })
    }
}

/// Records of one unit, before ordering.
#[derive(Default)]
struct UnitRecords {
    board: Vec<u64>,
    action: Vec<u16>,
    target: Vec<u16>,
    win_prob: Vec<f32>,
}

fn read_unit(
    unit: &Unit,
    policy: RecordSet,
    buckets: &ValueBuckets,
    out: &mut UnitRecords,
) -> Result<(), DataError> {
    let path = &unit.path;
    let columns: &[&str] = match policy {
        RecordSet::ActionValue => &["board_id", "action", "win_prob"],
        RecordSet::StateValue => &["board_id", "win_prob"],
        RecordSet::BehavioralCloning => &["board_id", "best_action"],
    };
    for batch in read_columns(path, Some(unit.row_group), columns)? {
        let ids = column::<UInt64Array>(&batch, "board_id", path)?;
        match policy {
            RecordSet::BehavioralCloning => {
                let best = column::<UInt16Array>(&batch, "best_action", path)?;
                for i in 0..batch.num_rows() {
                    if best.is_null(i) {
                        continue; // terminal board: no move to imitate
                    }
                    out.board.push(ids.value(i));
                    out.action.push(0);
                    out.target.push(best.value(i));
                    out.win_prob.push(f32::NAN);
                }
            }
            _ => {
                let wp = column::<Float64Array>(&batch, "win_prob", path)?;
                let actions = batch
                    .column_by_name("action")
                    .map(|c| c.as_primitive::<arrow_array::types::UInt16Type>());
                for i in 0..batch.num_rows() {
                    out.board.push(ids.value(i));
                    out.action.push(actions.map_or(0, |a| a.value(i)));
                    out.target.push(buckets.bucket(wp.value(i)) as u16);
                    out.win_prob.push(wp.value(i) as f32);
                }
            }
        }
    }
    Ok(())
}

/// Streams batches in sampler order, prefetched by worker threads.
pub struct Loader {
    config: DataConfig,
    shared: Arc<Shared>,
    receivers: Vec<Receiver<Result<Window, DataError>>>,
    next_worker: usize,
    current: Option<Window>,
    /// Records of the current window already served.
    offset: usize,
}

struct Shared {
    units: Vec<Unit>,
    /// Rows of all units (records of one uniform epoch; for behavioural
    /// cloning this counts terminal boards, which are skipped).
    rows: u64,
    boards: Boards,
    buckets: ValueBuckets,
}

/// A window's records, in serving order.
struct Window {
    position: Position,
    tokens: Vec<i32>,
    targets: Vec<i32>,
    win_prob: Vec<f32>,
}

impl Loader {
    /// Opens the split's tables and starts the workers at `start`.
    pub fn new(config: DataConfig, start: Position) -> Result<Loader, DataError> {
        let k = if config.policy == RecordSet::BehavioralCloning {
            2
        } else {
            config.buckets
        };
        let buckets = ValueBuckets::new(k)
            .ok()
            .filter(|b| b.len() <= NUM_ACTIONS)
            .ok_or(DataError::Buckets(config.buckets))?;
        let table = value_table(config.policy);
        let mut units = Vec::new();
        let mut rows = 0u64;
        for path in parquet_files(&config.run.join(partition_dir(table, &config.split)))? {
            let b = open_parquet(&path)?;
            for rg in 0..b.metadata().num_row_groups() {
                let n = b.metadata().row_group(rg).num_rows();
                rows += n.max(0) as u64;
                if n > 0 {
                    units.push(Unit {
                        path: path.clone(),
                        row_group: rg,
                    });
                }
            }
        }
        if units.is_empty() {
            return Err(DataError::Empty {
                run: config.run.clone(),
                split: config.split.clone(),
                table: table.name(),
            });
        }
        let boards = Boards::load(&config.run, &config.split)?;
        let shared = Arc::new(Shared {
            units,
            rows,
            boards,
            buckets,
        });
        let workers = config.workers.max(1);
        let mut receivers = Vec::with_capacity(workers);
        for w in 0..workers {
            let (tx, rx) = bounded(2);
            let shared = Arc::clone(&shared);
            let config = config.clone();
            thread::Builder::new()
                .name(format!("chessbench-loader-{w}"))
                .spawn(move || {
                    // Worker w builds windows w, w + N, w + 2N, ... from `start`.
                    let per_epoch = sampler::windows_per_epoch(shared.units.len(), config.window);
                    let first = start.epoch * per_epoch + start.window;
                    let mut index = first + w as u64;
                    loop {
                        let position = Position {
                            epoch: index / per_epoch,
                            window: index % per_epoch,
                            offset: 0,
                        };
                        let window = build_window(&shared, &config, position);
                        let failed = window.is_err();
                        if tx.send(window).is_err() || failed {
                            return;
                        }
                        index += workers as u64;
                    }
                })
                .map_err(|e| DataError::Worker(e.to_string()))?;
            receivers.push(rx);
        }
        Ok(Loader {
            config,
            shared,
            receivers,
            next_worker: 0,
            current: None,
            offset: start.offset as usize,
        })
    }

    /// Records per uniform epoch (row count of the split's value table).
    pub fn records(&self) -> u64 {
        self.shared.rows
    }

    /// The next batch (windows are crossed, epochs too).
    pub fn next_batch(&mut self) -> Result<Batch, DataError> {
        let seq_len = self.config.policy.sequence_length();
        let n = self.config.batch_size;
        let mut batch = Batch {
            tokens: Vec::with_capacity(n * seq_len),
            seq_len,
            targets: Vec::with_capacity(n),
            win_prob: Vec::with_capacity(n),
            position: Position::default(),
        };
        while batch.len() < n {
            if self
                .current
                .as_ref()
                .is_none_or(|w| self.offset >= w.targets.len())
            {
                if self.current.is_some() {
                    self.offset = 0;
                }
                let rx = &self.receivers[self.next_worker];
                let window = rx
                    .recv()
                    .map_err(|_| DataError::Worker("loader thread ended".into()))??;
                self.next_worker = (self.next_worker + 1) % self.receivers.len();
                self.current = Some(window);
                continue;
            }
            let Some(w) = self.current.as_ref() else {
                continue;
            };
            let take = (n - batch.len()).min(w.targets.len() - self.offset);
            let range = self.offset..self.offset + take;
            batch
                .tokens
                .extend_from_slice(&w.tokens[range.start * seq_len..range.end * seq_len]);
            batch.targets.extend_from_slice(&w.targets[range.clone()]);
            batch.win_prob.extend_from_slice(&w.win_prob[range]);
            self.offset += take;
            batch.position = Position {
                offset: self.offset as u64,
                ..w.position
            };
        }
        Ok(batch)
    }
}

fn build_window(
    shared: &Shared,
    config: &DataConfig,
    position: Position,
) -> Result<Window, DataError> {
    let order = sampler::unit_order(config.seed, position.epoch, shared.units.len());
    let mut records = UnitRecords::default();
    for &u in sampler::window_units(&order, config.window, position.window) {
        read_unit(
            &shared.units[u],
            config.policy,
            &shared.buckets,
            &mut records,
        )?;
    }
    let weights: Vec<u32> = match config.sampling {
        Sampling::Uniform => vec![1; records.board.len()],
        Sampling::Weighted => records
            .board
            .iter()
            .map(|&b| shared.boards.weights.get(b as usize).copied().unwrap_or(1))
            .collect(),
    };
    let serve = sampler::window_order(config.seed, position, &weights);
    let seq_len = config.policy.sequence_length();
    let mut window = Window {
        position,
        tokens: Vec::with_capacity(serve.len() * seq_len),
        targets: Vec::with_capacity(serve.len()),
        win_prob: Vec::with_capacity(serve.len()),
    };
    for &i in &serve {
        let i = i as usize;
        let board = records.board[i] as usize;
        let tokens = shared
            .boards
            .tokens
            .get(board)
            .ok_or_else(|| DataError::Table {
                path: shared.units[0].path.clone(),
                message: format!("board id {board} is not in the boards table"),
            })?;
        push_sequence(
            config.policy,
            tokens,
            records.action[i],
            records.target[i],
            &mut window.tokens,
        );
        window.targets.push(i32::from(records.target[i]));
        window.win_prob.push(records.win_prob[i]);
    }
    Ok(window)
}
