//! Training data: annotated records of a run, as token sequences in
//! searchless_chess's layout ([`crate::chess::records`]), streamed from the
//! Parquet tables in sampler order, with prefetching worker threads.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Condvar, Mutex},
    thread,
};

use arrow_array::{
    Array, Float64Array, RecordBatch, StringArray, UInt16Array, UInt64Array, cast::AsArray,
};
use crossbeam_channel::{Receiver, bounded};
use parquet::{
    arrow::arrow_reader::{RowSelection, RowSelector},
    file::statistics::Statistics,
};
use thiserror::Error;

use super::sampler::{self, Position, Sampling};
use crate::{
    chess::{
        actions::NUM_ACTIONS,
        records::{RecordSet, push_sequence},
        tokens::{SEQUENCE_LENGTH, tokenize},
        value::ValueBuckets,
    },
    options::Shard,
    store::{
        LabelSource, Source, StoreError, Table, chunks, commit::partition_dir, open_columns,
        open_parquet, parquet_files,
    },
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
    #[error(
        "split {split:?} of run {} has no {table} records from label source {label_source} (label it first: {})",
        run.display(), label_source.how_to_label()
    )]
    Empty {
        run: PathBuf,
        split: String,
        table: &'static str,
        label_source: LabelSource,
    },
    #[error("invalid K = {0} value buckets: expected 2..={NUM_ACTIONS}")]
    Buckets(usize),
    #[error("invalid shard {}/{}: expected rank 0 <= I < N = world size", .0.index, .0.count)]
    Shard(Shard),
    #[error("a prefetch worker stopped: {0}")]
    Worker(String),
    #[error(
        "a window of {records} records needs about {} MiB to build, more than the memory limit of {} MiB: lower `window` (row groups shuffled together) or raise `memory_limit`",
        need >> 20,
        limit >> 20
    )]
    Budget { records: u64, need: u64, limit: u64 },
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
    /// Bytes the loader may hold: windows being built, prefetched and served.
    /// Windows are reserved in serving order, so the budget bounds the
    /// prefetch depth and never changes what is served.
    pub memory_limit: u64,
    /// Which values to learn from when a board has more than one source.
    pub label_source: LabelSource,
    /// The slice of the stream this loader serves, for data-parallel
    /// training: of each window's records in serving order, shard `I/N`
    /// serves those at positions `I, I + N, I + 2N, ...`, so the shards of
    /// an epoch partition its records exactly (whatever the number of
    /// windows) and stay within one record of each other per window. Each
    /// shard reads every window. [`Shard::ALL`]: every record.
    pub shard: Shard,
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
    rows: u64,
    /// Distinct boards the row group can refer to at most (its board id
    /// span, from the footer's statistics; else its rows).
    boards: u64,
    /// The label source of its file: under [`LabelSource::Both`] its rows
    /// of boards a later source labels are skipped ([`Shared::labelled`]).
    source: Source,
}

/// Bytes per record while a window is built (its records as read, their
/// board indices, weights and serving order, the compact window) and once
/// built; bytes per board of a window (tokens, id, weight).
const BUILD_BYTES_PER_RECORD: u64 = 48;
const WINDOW_BYTES_PER_RECORD: u64 = 12;
const BYTES_PER_BOARD: u64 = (SEQUENCE_LENGTH + 8 + 4) as u64;

/// The loader's memory budget: windows reserve bytes before they are built,
/// strictly in serving order (so a window the consumer waits for is never
/// starved by a later one), and release them when the consumer is done.
struct Budget {
    limit: u64,
    state: Mutex<BudgetState>,
    freed: Condvar,
}

#[derive(Default)]
struct BudgetState {
    used: u64,
    peak: u64,
    /// The window index whose reservation is granted next.
    next: u64,
    /// The loader is gone: waiting workers stop.
    closed: bool,
}

/// Bytes of a [`Budget`] held until dropped.
struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Budget {
    /// Reserves `bytes` for the `index`-th window this loader serves (from
    /// 0), waiting for earlier windows' reservations and for room;
    /// `None` once the loader is gone.
    fn reserve(self: &Arc<Budget>, index: u64, bytes: u64) -> Option<Reservation> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !s.closed && (s.next != index || s.used + bytes > self.limit && s.used > 0) {
            s = self.freed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.closed {
            return None;
        }
        s.next += 1;
        s.used += bytes;
        s.peak = s.peak.max(s.used);
        self.freed.notify_all();
        Some(Reservation {
            budget: Arc::clone(self),
            bytes,
        })
    }

    /// Wakes and stops every waiting worker.
    fn close(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.closed = true;
        self.freed.notify_all();
    }
}

impl Reservation {
    /// Keeps `bytes` of the reservation (a built window needs less than its
    /// build did).
    fn shrink_to(&mut self, bytes: u64) {
        let mut s = self.budget.state.lock().unwrap_or_else(|e| e.into_inner());
        let freed = self.bytes.saturating_sub(bytes);
        s.used -= freed;
        self.bytes -= freed;
        self.budget.freed.notify_all();
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

/// Where the split's boards are: the row groups of the boards table, each
/// with the first board id it holds (ids are dense, in file order). The
/// loader reads the boards a window needs from here, so it never holds the
/// split's boards in memory.
struct BoardIndex {
    groups: Vec<BoardGroup>,
}

struct BoardGroup {
    path: PathBuf,
    row_group: usize,
    first: u64,
    rows: u64,
}

/// The boards one window's records refer to: their tokens and sampling
/// weights, in board id order.
struct WindowBoards {
    ids: Vec<u64>,
    tokens: Vec<[u8; SEQUENCE_LENGTH]>,
    weights: Vec<u32>,
}

impl WindowBoards {
    /// The index of board `id`, which must be here.
    fn index(&self, id: u64) -> usize {
        self.ids.binary_search(&id).unwrap_or(0)
    }
}

fn read_columns(
    path: &Path,
    row_group: Option<usize>,
    selection: Option<RowSelection>,
    columns: &[&str],
) -> Result<Vec<RecordBatch>, DataError> {
    let mut b = open_columns(path, columns)?.with_batch_size(64 * 1024);
    if let Some(rg) = row_group {
        b = b.with_row_groups(vec![rg]);
    }
    if let Some(s) = selection {
        b = b.with_row_selection(s);
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

impl BoardIndex {
    /// The row groups of the split's boards table, from the files' footers.
    fn open(run: &Path, split: &str) -> Result<BoardIndex, DataError> {
        let dir = run.join(partition_dir(Table::Boards, split));
        let mut groups = Vec::new();
        let mut first = 0u64;
        for path in parquet_files(&dir)? {
            let b = open_parquet(&path)?;
            for row_group in 0..b.metadata().num_row_groups() {
                let rows = b.metadata().row_group(row_group).num_rows().max(0) as u64;
                groups.push(BoardGroup {
                    path: path.clone(),
                    row_group,
                    first,
                    rows,
                });
                first += rows;
            }
        }
        Ok(BoardIndex { groups })
    }

    /// Tokens and weights of the boards `ids` (sorted, distinct), reading
    /// only their rows of the boards table.
    fn read(&self, ids: &[u64], any_unit: &Path) -> Result<WindowBoards, DataError> {
        let mut out = WindowBoards {
            ids: Vec::with_capacity(ids.len()),
            tokens: Vec::with_capacity(ids.len()),
            weights: Vec::with_capacity(ids.len()),
        };
        let missing = |id: u64| DataError::Table {
            path: any_unit.to_owned(),
            message: format!("board id {id} is not in the boards table"),
        };
        let mut rest = ids;
        for g in &self.groups {
            let end = g.first + g.rows;
            let here = rest.partition_point(|&id| id < end);
            let (mine, later) = rest.split_at(here);
            rest = later;
            if mine.is_empty() {
                continue;
            }
            // Select the rows of `mine`, skip the others.
            let mut selectors = Vec::new();
            let mut at = g.first;
            for run in mine.chunk_by(|a, b| b == &(a + 1)) {
                if run[0] > at {
                    selectors.push(RowSelector::skip((run[0] - at) as usize));
                }
                selectors.push(RowSelector::select(run.len()));
                at = run[0] + run.len() as u64;
            }
            let selection = RowSelection::from(selectors);
            let columns = ["board_id", "fen", "occurrences"];
            let mut want = mine.iter();
            for batch in read_columns(&g.path, Some(g.row_group), Some(selection), &columns)? {
                let path = &g.path;
                let got = column::<UInt64Array>(&batch, "board_id", path)?;
                let fens = column::<StringArray>(&batch, "fen", path)?;
                let occ = column::<UInt64Array>(&batch, "occurrences", path)?;
                for i in 0..batch.num_rows() {
                    let id = got.value(i);
                    if want.next() != Some(&id) {
                        return Err(DataError::Table {
                            path: path.clone(),
                            message: format!(
                                "board ids are not dense: found {id} where the file order puts another"
                            ),
                        });
                    }
                    let t = tokenize(fens.value(i)).map_err(|e| DataError::Table {
                        path: path.clone(),
                        message: format!("board {id}: {e}"),
                    })?;
                    out.ids.push(id);
                    out.tokens.push(t);
                    out.weights.push(if occ.is_null(i) {
                        1
                    } else {
                        occ.value(i).min(u64::from(u32::MAX)) as u32
                    });
                }
            }
            if let Some(&id) = want.next() {
                return Err(missing(id));
            }
        }
        match rest.first() {
            Some(&id) => Err(missing(id)),
            None => Ok(out),
        }
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
    labelled: &BTreeMap<Source, Vec<u64>>,
    out: &mut UnitRecords,
) -> Result<(), DataError> {
    let path = &unit.path;
    let overridden = labelled.get(&unit.source);
    let skip = |id: u64| overridden.is_some_and(|l| l.binary_search(&id).is_ok());
    let columns: &[&str] = match policy {
        RecordSet::ActionValue => &["board_id", "action", "win_prob"],
        RecordSet::StateValue => &["board_id", "win_prob"],
        RecordSet::BehavioralCloning => &["board_id", "best_action"],
    };
    for batch in read_columns(path, Some(unit.row_group), None, columns)? {
        let ids = column::<UInt64Array>(&batch, "board_id", path)?;
        match policy {
            RecordSet::BehavioralCloning => {
                let best = column::<UInt16Array>(&batch, "best_action", path)?;
                for i in 0..batch.num_rows() {
                    if best.is_null(i) || skip(ids.value(i)) {
                        continue; // terminal board (no move to imitate), or another source's
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
                    if skip(ids.value(i)) {
                        continue;
                    }
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
    /// cloning this counts terminal boards, and under [`LabelSource::Both`]
    /// the rows of boards a later source labels, which are skipped).
    rows: u64,
    /// Under [`LabelSource::Both`], for each source that a later one
    /// overrides, the boards the later ones label, sorted: that source's
    /// rows of them are skipped (Stockfish's of the boards the evaluation
    /// database labels).
    labelled: BTreeMap<Source, Vec<u64>>,
    boards: BoardIndex,
    buckets: ValueBuckets,
    budget: Arc<Budget>,
}

/// A window's records in serving order, compact: each refers to one of the
/// window's boards, whose tokens are expanded into sequences only when a
/// batch takes the record.
struct Window {
    position: Position,
    /// Records of the window before sharding.
    rows: usize,
    boards: WindowBoards,
    /// Index into `boards` of each record.
    board: Vec<u32>,
    action: Vec<u16>,
    target: Vec<u16>,
    win_prob: Vec<f32>,
    /// The window's bytes in the loader's budget, released when it is dropped.
    _memory: Reservation,
}

impl Loader {
    /// Opens the split's tables and starts the workers at `start`.
    pub fn new(config: DataConfig, start: Position) -> Result<Loader, DataError> {
        if config.shard.count == 0 || config.shard.index >= config.shard.count {
            return Err(DataError::Shard(config.shard));
        }
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
        let mut labelled = BTreeMap::new();
        if config.label_source == LabelSource::Both {
            for source in Source::ALL {
                let ids =
                    chunks::labelled_boards(&config.run, &config.split, source.overridden_by())?;
                if !ids.is_empty() {
                    labelled.insert(source, ids);
                }
            }
        }
        for path in parquet_files(&config.run.join(partition_dir(table, &config.split)))? {
            let source = Source::of_file(path.file_name().and_then(|n| n.to_str()).unwrap_or(""));
            if !config.label_source.reads(source) {
                continue;
            }
            let b = open_parquet(&path)?;
            let board_id = b
                .parquet_schema()
                .columns()
                .iter()
                .position(|c| c.name() == "board_id");
            for rg in 0..b.metadata().num_row_groups() {
                let meta = b.metadata().row_group(rg);
                let n = meta.num_rows().max(0) as u64;
                rows += n;
                if n == 0 {
                    continue;
                }
                let span = board_id
                    .and_then(|c| meta.column(c).statistics())
                    .and_then(|s| match s {
                        Statistics::Int64(s) => Some((*s.min_opt()?, *s.max_opt()?)),
                        _ => None,
                    })
                    .map(|(lo, hi)| (hi - lo) as u64 + 1);
                units.push(Unit {
                    path: path.clone(),
                    row_group: rg,
                    rows: n,
                    boards: span.map_or(n, |s| s.min(n)),
                    source,
                });
            }
        }
        if units.is_empty() {
            if !config.run.join(crate::store::commit::MANIFEST).is_file() {
                return Err(StoreError::NotARun(config.run.clone()).into());
            }
            return Err(DataError::Empty {
                run: config.run.clone(),
                split: config.split.clone(),
                table: table.name(),
                label_source: config.label_source,
            });
        }
        let boards = BoardIndex::open(&config.run, &config.split)?;
        let budget = Arc::new(Budget {
            limit: config.memory_limit,
            // Reservations count the windows this loader serves, from 0.
            state: Mutex::new(BudgetState::default()),
            freed: Condvar::new(),
        });
        let shared = Arc::new(Shared {
            units,
            rows,
            labelled,
            boards,
            buckets,
            budget,
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
                    // Worker w builds windows w, w + N, w + 2N, ... from
                    // `start` (N workers).
                    let per_epoch = sampler::windows_per_epoch(shared.units.len(), config.window);
                    let first = window_index(&config, shared.units.len(), start);
                    let mut served = w as u64;
                    loop {
                        let index = first + served;
                        let position = Position {
                            epoch: index / per_epoch,
                            window: index % per_epoch,
                            offset: 0,
                        };
                        let window = build_window(&shared, &config, position, served);
                        let failed = window.is_err();
                        if tx.send(window).is_err() || failed {
                            return;
                        }
                        served += workers as u64;
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

    /// The most bytes the loader's windows held at once so far (what its
    /// memory budget bounds).
    pub fn peak_bytes(&self) -> u64 {
        let s = self
            .shared
            .budget
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        s.peak
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
        // Windows in a row without a record: a whole epoch of them means
        // no unit has one (every row skipped), and waiting would never end.
        let mut empty = 0u64;
        let per_epoch = sampler::windows_per_epoch(self.shared.units.len(), self.config.window);
        while batch.len() < n {
            if self
                .current
                .as_ref()
                .is_none_or(|w| self.offset >= w.target.len())
            {
                if self.current.is_some() {
                    self.offset = 0;
                }
                let rx = &self.receivers[self.next_worker];
                let window = rx
                    .recv()
                    .map_err(|_| DataError::Worker("loader thread ended".into()))??;
                self.next_worker = (self.next_worker + 1) % self.receivers.len();
                empty = if window.rows == 0 { empty + 1 } else { 0 };
                if empty > per_epoch {
                    return Err(DataError::Empty {
                        run: self.config.run.clone(),
                        split: self.config.split.clone(),
                        table: value_table(self.config.policy).name(),
                        label_source: self.config.label_source,
                    });
                }
                self.current = Some(window);
                continue;
            }
            let Some(w) = self.current.as_ref() else {
                continue;
            };
            let take = (n - batch.len()).min(w.target.len() - self.offset);
            for i in self.offset..self.offset + take {
                push_sequence(
                    self.config.policy,
                    &w.boards.tokens[w.board[i] as usize],
                    w.action[i],
                    w.target[i],
                    &mut batch.tokens,
                );
                batch.targets.push(i32::from(w.target[i]));
            }
            batch
                .win_prob
                .extend_from_slice(&w.win_prob[self.offset..self.offset + take]);
            self.offset += take;
            batch.position = Position {
                offset: self.offset as u64,
                ..w.position
            };
        }
        Ok(batch)
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.shared.budget.close();
    }
}

/// The index of the window `position` is in, counting from the first window.
fn window_index(config: &DataConfig, units: usize, position: Position) -> u64 {
    position.epoch * sampler::windows_per_epoch(units, config.window) + position.window
}

/// Builds the window at `position`, the `served`-th this loader serves
/// (its turn in the memory budget).
fn build_window(
    shared: &Shared,
    config: &DataConfig,
    position: Position,
    served: u64,
) -> Result<Window, DataError> {
    let order = sampler::unit_order(config.seed, position.epoch, shared.units.len());
    let units = sampler::window_units(&order, config.window, position.window);
    let rows: u64 = units.iter().map(|&u| shared.units[u].rows).sum();
    let boards: u64 = units.iter().map(|&u| shared.units[u].boards).sum();
    let need = rows * BUILD_BYTES_PER_RECORD + boards * BYTES_PER_BOARD;
    if need > config.memory_limit {
        return Err(DataError::Budget {
            records: rows,
            need,
            limit: config.memory_limit,
        });
    }
    let Some(mut memory) = shared.budget.reserve(served, need) else {
        return Err(DataError::Worker("the loader was dropped".into()));
    };
    let mut records = UnitRecords::default();
    for &u in units {
        read_unit(
            &shared.units[u],
            config.policy,
            &shared.buckets,
            &shared.labelled,
            &mut records,
        )?;
    }
    let mut ids = records.board.clone();
    ids.sort_unstable();
    ids.dedup();
    let boards = shared.boards.read(&ids, &shared.units[0].path)?;
    let board: Vec<u32> = records
        .board
        .iter()
        .map(|&b| boards.index(b) as u32)
        .collect();
    let weights: Vec<u32> = match config.sampling {
        Sampling::Uniform => vec![1; records.board.len()],
        Sampling::Weighted => board.iter().map(|&i| boards.weights[i as usize]).collect(),
    };
    let mut serve = sampler::window_order(config.seed, position, &weights);
    let rows = serve.len();
    if config.shard.count > 1 {
        let (i, n) = (config.shard.index as usize, config.shard.count as usize);
        serve = serve.into_iter().skip(i).step_by(n).collect();
    }
    let pick = |i: &u32| *i as usize;
    memory.shrink_to(
        serve.len() as u64 * WINDOW_BYTES_PER_RECORD + boards.ids.len() as u64 * BYTES_PER_BOARD,
    );
    Ok(Window {
        position,
        rows,
        board: serve.iter().map(|i| board[pick(i)]).collect(),
        action: serve.iter().map(|i| records.action[pick(i)]).collect(),
        target: serve.iter().map(|i| records.target[pick(i)]).collect(),
        win_prob: serve.iter().map(|i| records.win_prob[pick(i)]).collect(),
        boards,
        _memory: memory,
    })
}
