//! `chessbench bag import`: published ChessBench `.bag` files into a split of
//! a run directory, in chessbench's Parquet layout, so they are SQL-queryable
//! and trainable here.
//!
//! Boards get dense ids in order of first appearance (state-value records
//! first, then behavioural cloning, then action values); each FEN is parsed
//! and its legal moves written to `legal_moves`, and every imported move is
//! checked to be legal in its board. What the bags do not carry (games,
//! occurrence counts, centipawns, depths) is null or empty. The split is
//! committed atomically with the run's other tables, replacing a split of
//! the same name.
//!
//! Memory (`--memory-limit`, default 2 GiB): when the boards fit, about 31
//! bytes a board in memory (a 16-byte slot of the FEN-to-id table, at most
//! 80% full and sized from the state-value bag's record count, and 11 bytes
//! of values), 1.6 GB for 53M boards (10^6 games); the bags are read once.
//! Past that (the paper's 530M-board train set needs 16 GB), the ids are
//! worked out on disk in hash partitions that fit the budget (module
//! [`ids`](super::ids)) and the values gathered in buckets of ids that fit
//! it: the bags are read twice and the run's scratch directory holds about
//! 26 bytes per record (less when a board's records are consecutive) and
//! 14 bytes per value, freed as the import goes. The tables are the same
//! either way.

use std::{
    collections::BTreeMap,
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, RecordBatch, StringArray, UInt8Array, UInt16Array,
    UInt32Array, UInt64Array, new_empty_array,
};
use serde::Serialize;

use super::{
    BagSetError,
    bagz::{BagReader, is_compressed, shard_paths},
    decode::{Board, Decode, Input, SerialBusy, each_batch},
    ids::{BoardIds, In, Out, Partitioner, Resolved, ensure_open_files, partitions_for, remove},
};
use crate::{
    chess::{RecordSet, legal::ValueKind},
    store::{
        RunDir, StoreError, Table, ValueSource, chunks,
        commit::Transaction,
        manifest::{ImportRecord, IngestRecord, InputRecord, SplitCounts, SplitManifest},
        parallel::{Encoders, ParallelMovesWriter, ParallelPartWriter},
        writer::{BOARDS_PER_PART, part_file_name},
    },
    ui::{Report, group},
};

/// Rows per action_values part file.
const AV_ROWS_PER_PART: u64 = 1 << 24;
/// Rows per buffered batch.
const BATCH_ROWS: usize = 64 * 1024;
/// Records ahead whose board-id slots are prefetched.
const PREFETCH: usize = 16;

/// `chessbench bag import`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct BagImportOptions {
    /// Run directory to write (created if needed).
    #[arg(value_name = "RUN_DIR", value_hint = clap::ValueHint::DirPath)]
    pub run: PathBuf,
    /// Split to write (replaced if it exists).
    #[arg(long, value_name = "NAME")]
    pub split: String,
    /// Directory with ChessBench's file names (state_value_data.bag, ...).
    #[arg(
        value_name = "DIR",
        value_hint = clap::ValueHint::DirPath,
        required_unless_present_any = ["state_value", "behavioral_cloning", "action_value"]
    )]
    pub dir: Option<PathBuf>,
    /// state_value .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub state_value: Option<PathBuf>,
    /// behavioral_cloning .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub behavioral_cloning: Option<PathBuf>,
    /// action_value .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub action_value: Option<PathBuf>,
    #[command(flatten)]
    pub jobs: crate::options::Jobs,
    #[command(flatten)]
    pub budget: crate::options::Budget,
}

impl BagImportOptions {
    /// What to import: the sets found in `dir`, replaced by the files given
    /// per set.
    pub fn resolve(&self, progress: bool) -> Result<ImportConfig, BagSetError> {
        let mut inputs = match &self.dir {
            Some(dir) => discover(dir)?,
            None => Vec::new(),
        };
        for (set, file) in [
            (RecordSet::StateValue, &self.state_value),
            (RecordSet::BehavioralCloning, &self.behavioral_cloning),
            (RecordSet::ActionValue, &self.action_value),
        ] {
            if let Some(f) = file {
                inputs.retain(|(s, _)| *s != set);
                inputs.push((set, f.clone()));
            }
        }
        Ok(ImportConfig {
            run: self.run.clone(),
            split: self.split.clone(),
            inputs,
            memory_limit: self.budget.bytes(),
            threads: self.jobs.or_cores(),
            progress,
        })
    }
}

impl Report for ImportSummary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "imported split {}: {} boards, {} legal moves; records: {} state_value, {} behavioral_cloning, {} action_value",
            self.split,
            group(self.boards),
            group(self.legal_moves),
            group(self.state_value_records),
            group(self.behavioral_cloning_records),
            group(self.action_value_records)
        )?;
        let phases: Vec<String> = ["ids", "records", "state_values", "commit"]
            .iter()
            .filter_map(|name| {
                let secs = self.phases.get(name)?;
                Some(if *name == "records" {
                    format!(
                        "{name} {secs:.2} s (reading {:.2} s, applying {:.2} s)",
                        self.serial.read_s, self.serial.apply_s
                    )
                } else {
                    format!("{name} {secs:.2} s")
                })
            })
            .collect();
        writeln!(out, "  phases: {}", phases.join(", "))
    }
}

/// What to import.
#[derive(Debug, Clone)]
pub struct ImportConfig {
    pub run: PathBuf,
    pub split: String,
    /// Bag files (or `@N` patterns) per set; sets not given are not imported.
    pub inputs: Vec<(RecordSet, PathBuf)>,
    /// The memory budget, bytes.
    pub memory_limit: u64,
    /// Threads decoding records (`-j`); the tables are the same at any.
    pub threads: usize,
    pub progress: bool,
}

/// Bytes an import holds per distinct board: its id-table slot (16 B at
/// most 80% full), the state value (8), the best action (2), the terminal
/// kind (1).
const BYTES_PER_BOARD: u64 = 31;
/// Buffers besides: a row group of legal moves (1M rows), batches of boards
/// and action values, the Parquet writers' encoded row groups, the bag
/// readers' buffers (records and index stream, never a whole index).
const IMPORT_BUFFERS: u64 = 48 << 20;
/// Buffers each thread beyond the first adds (`-j`): the batches of
/// records being decoded and waiting to be applied, and the row groups
/// being encoded (up to `-j` + 2 of each file in flight); sized from the
/// peak memory measured from 2 to 16 threads (docs/benchmarks.md#constants).
const THREAD_BUFFERS: u64 = 24 << 20;

/// Memory besides the boards' at `threads` threads.
fn buffers(threads: usize) -> u64 {
    IMPORT_BUFFERS + threads.saturating_sub(1) as u64 * THREAD_BUFFERS
}

/// Finds the ChessBench files of a directory: `SET_data.bag` or
/// `SET-00000-of-0000N_data.bag` (`.bagz` too), for each set present.
pub(crate) fn discover(dir: &Path) -> Result<Vec<(RecordSet, PathBuf)>, BagSetError> {
    let entries = fs::read_dir(dir).map_err(|source| BagSetError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    let mut found = Vec::new();
    for set in RecordSet::ALL {
        for ext in ["bag", "bagz"] {
            let single = format!("{}_data.{ext}", set.name());
            if names.contains(&single) {
                found.push((set, dir.join(single)));
                continue;
            }
            let prefix = format!("{}-00000-of-", set.name());
            let suffix = format!("_data.{ext}");
            if let Some(n) = names.iter().find_map(|n| {
                n.strip_prefix(&prefix)?
                    .strip_suffix(&suffix)?
                    .parse::<u32>()
                    .ok()
            }) {
                found.push((set, dir.join(format!("{}@{n}_data.{ext}", set.name()))));
            }
        }
    }
    if found.is_empty() {
        return Err(BagSetError::NothingToImport(dir.to_owned()));
    }
    Ok(found)
}

/// What an import wrote.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportSummary {
    pub split: String,
    pub boards: u64,
    pub legal_moves: u64,
    pub state_value_records: u64,
    pub behavioral_cloning_records: u64,
    pub action_value_records: u64,
    pub files: Vec<PathBuf>,
    /// Wall-clock seconds per phase: `ids` (the board-id passes on disk,
    /// when the boards do not fit), `records` (every record read, decoded
    /// and applied), `state_values` (written in id order), `commit`.
    pub phases: BTreeMap<&'static str, f64>,
    /// The records pass's serial parts: the reading thread's and the
    /// applying thread's busy seconds.
    pub serial: SerialBusy,
}

/// Boards seen so far, and the writers of boards / legal_moves.
struct Boards {
    /// Boards written so far (the next board's id).
    count: u64,
    dir: PathBuf,
    writer: Option<ParallelPartWriter>,
    moves: Option<ParallelMovesWriter>,
    moves_dir: PathBuf,
    buf: BoardColumns,
    legal_moves: u64,
    with_moves: u64,
    /// Where the part files' row groups are encoded.
    encoders: Encoders,
}

#[derive(Default)]
struct BoardColumns {
    board_id: Vec<u64>,
    fen: arrow_array::builder::StringBuilder,
    side: Vec<&'static str>,
    num_moves: Vec<u8>,
    terminal: Vec<&'static str>,
}

impl Boards {
    /// Writes a new board (parsed, with its legal moves) as board `id`,
    /// which must be the next; returns what kind of value it has.
    fn add(
        &mut self,
        board: &Board<'_>,
        id: u64,
        at: &dyn Fn(String) -> BagSetError,
    ) -> Result<ValueKind, BagSetError> {
        if id != self.count {
            return Err(at(format!(
                "board ids out of step: new board {id}, expected {} (the scratch files changed under the import?)",
                self.count
            )));
        }
        if id.is_multiple_of(BOARDS_PER_PART) {
            self.flush_part()?;
            let part = id / BOARDS_PER_PART;
            let path = self.dir.join(part_file_name(part));
            self.writer = Some(ParallelPartWriter::create(
                &path,
                Table::Boards,
                self.encoders.clone(),
            )?);
            let path = self.moves_dir.join(part_file_name(part));
            self.moves = Some(ParallelMovesWriter::create(&path, self.encoders.clone())?);
        }
        let actions = board.actions;
        if let Some(w) = self.moves.as_mut() {
            w.push(id, actions)?;
        }
        self.legal_moves += actions.len() as u64;
        self.with_moves += u64::from(!actions.is_empty());
        self.count += 1;
        let b = &mut self.buf;
        b.board_id.push(id);
        b.side.push(if board.black_to_move { "b" } else { "w" });
        b.num_moves.push(actions.len().min(255) as u8);
        b.terminal.push(match board.terminal {
            Some(ValueKind::Checkmate) => "checkmate",
            Some(ValueKind::Stalemate) => "stalemate",
            _ => "none",
        });
        b.fen.append_value(board.fen);
        if b.board_id.len() == BATCH_ROWS {
            self.flush_batch()?;
        }
        Ok(board.kind())
    }

    fn flush_batch(&mut self) -> Result<(), BagSetError> {
        let b = std::mem::take(&mut self.buf);
        let n = b.board_id.len();
        if n == 0 {
            return Ok(());
        }
        let nulls64: ArrayRef = Arc::new(UInt64Array::new_null(n));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from(b.board_id)),
            Arc::new({ b.fen }.finish()),
            Arc::new(StringArray::from(b.side)),
            nulls64.clone(),
            Arc::new(UInt8Array::from(b.num_moves)),
            Arc::new(StringArray::from(b.terminal)),
            nulls64,
            Arc::new(UInt32Array::new_null(n)),
        ];
        write_batch(self.writer.as_mut(), Table::Boards, columns, &self.dir)
    }

    fn flush_part(&mut self) -> Result<(), BagSetError> {
        self.flush_batch()?;
        if let Some(w) = self.writer.take() {
            w.finish()?;
        }
        if let Some(w) = self.moves.take() {
            w.finish()?;
        }
        Ok(())
    }
}

fn write_batch(
    writer: Option<&mut ParallelPartWriter>,
    table: Table,
    columns: Vec<ArrayRef>,
    dir: &Path,
) -> Result<(), BagSetError> {
    let batch = RecordBatch::try_new(table.schema(), columns)
        .map_err(|e| StoreError::Corrupt(dir.to_owned(), e.to_string()))?;
    match writer {
        Some(w) => Ok(w.write(&batch)?),
        None => Err(StoreError::Missing(dir.to_owned()).into()),
    }
}

/// Writes a table file with no rows (games and rejects of an imported split).
fn write_empty(dir: &Path, table: Table) -> Result<(), BagSetError> {
    let schema = table.schema();
    let columns = schema
        .fields()
        .iter()
        .map(|f| new_empty_array(f.data_type()))
        .collect();
    let mut w = ParallelPartWriter::create(&dir.join(part_file_name(0)), table, Encoders::Inline)?;
    let batch = RecordBatch::try_new(schema, columns)
        .map_err(|e| StoreError::Corrupt(dir.to_owned(), e.to_string()))?;
    w.write(&batch)?;
    w.finish()?;
    Ok(())
}

/// Boards the import will meet, to size the in-memory id table once: the
/// state-value records (one per board), else the behavioural-cloning
/// records, else the action values / 30 (legal moves per board).
fn expected_boards(inputs: &[Input]) -> u64 {
    let count = |set: RecordSet| inputs.iter().find(|i| i.set == set).map(|i| i.records);
    count(RecordSet::StateValue)
        .or_else(|| count(RecordSet::BehavioralCloning))
        .unwrap_or_else(|| count(RecordSet::ActionValue).unwrap_or(0) / 30)
}

/// Records in every shard of an input (each opened, checked and closed).
fn records_in(pattern: &Path) -> Result<u64, BagSetError> {
    let mut n = 0;
    for p in shard_paths(pattern)? {
        n += BagReader::open(&p)?.len();
    }
    Ok(n)
}

/// Where board ids come from: the in-memory table, or the streams the
/// on-disk passes resolved (module [`ids`](super::ids)).
enum Ids {
    Memory(BoardIds),
    Disk(Resolved),
}

/// The id of a record's board; a new board is written, and its value kind
/// returned.
fn board_id(
    ids: &mut Ids,
    boards: &mut Boards,
    key: u128,
    board: &Board<'_>,
    at: &dyn Fn(String) -> BagSetError,
) -> Result<(u64, Option<ValueKind>), BagSetError> {
    let (id, first) = match ids {
        Ids::Memory(table) => table.get_or_insert(key)?,
        Ids::Disk(resolved) => resolved.id(key)?,
    };
    let kind = if first {
        Some(boards.add(board, id, at)?)
    } else {
        None
    };
    Ok((id, kind))
}

/// No best action.
const NONE: u16 = u16::MAX;

/// The state_values columns of a range of board ids.
#[derive(Default)]
struct Arrays {
    /// Win probability; NaN: no state-value record.
    sv: Vec<f64>,
    /// [`kind_code`] of the board's value.
    kind: Vec<u8>,
    /// Best action, [`NONE`] if none.
    best: Vec<u16>,
}

fn kind_code(kind: ValueKind) -> u8 {
    match kind {
        ValueKind::Search => 1,
        ValueKind::Checkmate => 2,
        ValueKind::Stalemate => 3,
    }
}

fn code_kind(code: u8) -> ValueKind {
    match code {
        2 => ValueKind::Checkmate,
        3 => ValueKind::Stalemate,
        _ => ValueKind::Search,
    }
}

impl Arrays {
    fn with_capacity(n: u64) -> Arrays {
        let n = n as usize;
        Arrays {
            sv: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            best: Vec::with_capacity(n),
        }
    }

    /// A state value (the last record of a board wins); `kind` comes with
    /// the board's first record, later ones keep it.
    fn set_state_value(&mut self, i: usize, p: f64, kind: Option<ValueKind>) {
        if self.sv.len() <= i {
            self.sv.resize(i + 1, f64::NAN);
            self.kind.resize(i + 1, 0);
        }
        self.sv[i] = p;
        if let Some(k) = kind {
            self.kind[i] = kind_code(k);
        }
    }

    fn set_best(&mut self, i: usize, action: u16) {
        if self.best.len() <= i {
            self.best.resize(i + 1, NONE);
        }
        self.best[i] = action;
    }

    /// Calls `row` for each board with a state value, ids from `start`.
    fn rows(
        &self,
        start: u64,
        row: &mut dyn FnMut(u64, f64, ValueKind, Option<u16>) -> Result<(), BagSetError>,
    ) -> Result<(), BagSetError> {
        for (i, &p) in self.sv.iter().enumerate() {
            if p.is_nan() {
                continue;
            }
            let best = self.best.get(i).copied().filter(|&a| a != NONE);
            row(start + i as u64, p, code_kind(self.kind[i]), best)?;
        }
        Ok(())
    }
}

/// Bytes of a spilled value: board id (4), what (1: 0 state value, 1 best
/// action), kind code (1), value (8: the f64's bits or the action).
const VALUE_ENTRY: usize = 14;
/// Bytes a board of a bucket takes in [`Arrays`].
const VALUE_BYTES_PER_BOARD: u64 = 11;

/// Per-board values of the state_values table, by board id: in memory, or
/// appended to buckets of `width` ids on disk and gathered a bucket at a
/// time at the end.
enum Values {
    Memory(Arrays),
    Disk {
        width: u64,
        boards: u64,
        buckets: Vec<Out>,
    },
}

impl Values {
    /// Buckets in `dir` for `boards` boards, each gathered in half of
    /// `memory`.
    fn on_disk(dir: &Path, boards: u64, memory: u64) -> Result<Values, BagSetError> {
        let width = (memory / 2 / VALUE_BYTES_PER_BOARD).max(1);
        let n = boards.div_ceil(width).max(1);
        let buffer = (memory / 8 / n).clamp(4 << 10, 1 << 20) as usize;
        let buckets = (0..n)
            .map(|b| Out::create(dir.join(format!("values-{b:05}")), buffer))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Values::Disk {
            width,
            boards,
            buckets,
        })
    }

    fn put(&mut self, id: u64, what: u8, kind: u8, value: u64) -> Result<(), BagSetError> {
        let Values::Disk { width, buckets, .. } = self else {
            return Ok(());
        };
        let mut entry = [0u8; VALUE_ENTRY];
        entry[..4].copy_from_slice(&(id as u32).to_le_bytes());
        entry[4] = what;
        entry[5] = kind;
        entry[6..].copy_from_slice(&value.to_le_bytes());
        buckets[(id / *width) as usize].put(&entry)
    }

    fn state_value(&mut self, id: u64, p: f64, kind: Option<ValueKind>) -> Result<(), BagSetError> {
        match self {
            Values::Memory(a) => {
                a.set_state_value(id as usize, p, kind);
                Ok(())
            }
            Values::Disk { .. } => self.put(id, 0, kind.map_or(0, kind_code), p.to_bits()),
        }
    }

    fn best(&mut self, id: u64, action: u16) -> Result<(), BagSetError> {
        match self {
            Values::Memory(a) => {
                a.set_best(id as usize, action);
                Ok(())
            }
            Values::Disk { .. } => self.put(id, 1, 0, u64::from(action)),
        }
    }

    /// Calls `row` for each board with a state value, in id order.
    fn finish(
        self,
        mut row: impl FnMut(u64, f64, ValueKind, Option<u16>) -> Result<(), BagSetError>,
    ) -> Result<(), BagSetError> {
        match self {
            Values::Memory(a) => a.rows(0, &mut row),
            Values::Disk {
                width,
                boards,
                buckets,
            } => {
                for (b, out) in buckets.into_iter().enumerate() {
                    let path = out.finish()?;
                    let start = b as u64 * width;
                    let mut a = Arrays::with_capacity(width.min(boards.saturating_sub(start)));
                    let mut input = In::open(path.clone(), 1 << 16)?;
                    while let Some(e) = input.next::<VALUE_ENTRY>()? {
                        let id = u64::from(u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
                        let i = id
                            .checked_sub(start)
                            .filter(|&i| i < width)
                            .ok_or_else(|| {
                                StoreError::Corrupt(
                                    path.clone(),
                                    format!("board {id} in bucket {b}"),
                                )
                            })? as usize;
                        let mut value = [0u8; 8];
                        value.copy_from_slice(&e[6..]);
                        let value = u64::from_le_bytes(value);
                        if e[4] == 0 {
                            let kind = (e[5] != 0).then(|| code_kind(e[5]));
                            a.set_state_value(i, f64::from_bits(value), kind);
                        } else {
                            a.set_best(i, value as u16);
                        }
                    }
                    drop(input);
                    remove(&path)?;
                    a.rows(start, &mut row)?;
                }
                Ok(())
            }
        }
    }
}

/// Imports bag files into `config.split` of `config.run`, in the phases
/// the summary times: [`assign_ids`] (only when the boards do not fit in
/// memory: their ids worked out on disk first), [`import_records`]
/// (`boards`, `legal_moves` and `action_values` as the records stream
/// past), [`write_state_values`], and [`commit`].
pub fn run(config: &ImportConfig) -> Result<ImportSummary, BagSetError> {
    let started_at = crate::store::unix_now();
    let plan = ImportPlan::new(config)?;
    let run = RunDir::open(&config.run)?;
    let txn = run.begin()?;
    let split = &config.split;
    for table in [Table::Games, Table::Rejects] {
        write_empty(&txn.partition(table, split)?, table)?;
    }
    let encoders = Encoders::new(config.threads, "cb-encode")?;
    let mut phases = BTreeMap::new();
    let mut lap = Instant::now();
    let mut mark = |name: &'static str| {
        phases.insert(name, lap.elapsed().as_secs_f64());
        lap = Instant::now();
    };

    let (ids, values) = assign_ids(config, &plan, &txn)?;
    if plan.partitions.is_some() {
        mark("ids");
    }
    let mut boards = Boards {
        count: 0,
        dir: txn.partition(Table::Boards, split)?,
        writer: None,
        moves: None,
        moves_dir: txn.partition(Table::LegalMoves, split)?,
        buf: BoardColumns::default(),
        legal_moves: 0,
        with_moves: 0,
        encoders: encoders.clone(),
    };
    let action_values = ActionValueSink {
        dir: txn.partition(Table::ActionValues, split)?,
        encoders: encoders.clone(),
        writer: None,
        part: 0,
        rows_in_part: 0,
        columns: Default::default(),
    };
    let mut summary = ImportSummary {
        split: split.clone(),
        ..ImportSummary::default()
    };
    let (values, files) = import_records(
        config,
        &plan,
        ids,
        values,
        &mut boards,
        action_values,
        &mut summary,
    )?;
    mark("records");

    write_state_values(
        values,
        &txn.partition(Table::StateValues, split)?,
        &encoders,
    )?;
    mark("state_values");

    summary.boards = boards.count;
    summary.legal_moves = boards.legal_moves;
    summary.files = files.iter().map(|i| PathBuf::from(&i.source)).collect();
    commit(
        config, &plan, &run, txn, &boards, &summary, files, started_at,
    )?;
    mark("commit");
    summary.phases = phases;
    Ok(summary)
}

/// The inputs in record-set order, and whether their boards' ids fit in
/// memory.
struct ImportPlan {
    inputs: Vec<Input>,
    /// Distinct boards at most: what the in-memory tables are sized for.
    expected: u64,
    /// Partitions of the on-disk id passes; `None` when the boards fit.
    partitions: Option<usize>,
    /// What the boards may use: the limit less the threads' buffers.
    room: u64,
}

impl ImportPlan {
    fn new(config: &ImportConfig) -> Result<Self, BagSetError> {
        let mut inputs = config
            .inputs
            .iter()
            .map(|(set, pattern)| {
                Ok(Input {
                    set: *set,
                    pattern: pattern.clone(),
                    records: records_in(pattern)?,
                })
            })
            .collect::<Result<Vec<_>, BagSetError>>()?;
        inputs.sort_by_key(|i| i.set);
        let expected = expected_boards(&inputs);
        let records: u64 = inputs.iter().map(|i| i.records).sum();
        // The in-memory table when the boards fit, else the on-disk passes
        // with partitions that fit.
        let buffers = buffers(config.threads);
        let room = config
            .memory_limit
            .saturating_sub(buffers)
            .max(config.memory_limit / 4);
        let partitions = if expected * BYTES_PER_BOARD + buffers <= config.memory_limit {
            None
        } else {
            let p = partitions_for(records, room * 3 / 4);
            ensure_open_files(p)?;
            Some(p)
        };
        Ok(Self {
            inputs,
            expected,
            partitions,
            room,
        })
    }
}

/// The board-id table and the per-board values: in memory when the boards
/// fit; else a first pass over the records' keys gives every board its id
/// on disk, partition by partition, and the values go to disk buckets.
fn assign_ids(
    config: &ImportConfig,
    plan: &ImportPlan,
    txn: &Transaction<'_>,
) -> Result<(Ids, Values), BagSetError> {
    let Some(partitions) = plan.partitions else {
        return Ok((
            Ids::Memory(BoardIds::with_capacity(plan.expected)),
            Values::Memory(Arrays::with_capacity(plan.expected)),
        ));
    };
    let scratch = txn.scratch("import")?;
    let mut partitioner = Partitioner::create(&scratch, partitions, plan.room)?;
    each_batch(
        &plan.inputs,
        config.threads,
        Decode::Keys,
        config.progress,
        " (ids)",
        |batch| {
            for r in &batch.records {
                partitioner.push(r.key)?;
            }
            Ok(())
        },
    )?;
    let resolved = partitioner.resolve(config.progress)?;
    let values = Values::on_disk(&scratch, resolved.boards, plan.room)?;
    Ok((Ids::Disk(resolved), values))
}

/// The records pass: every record's board gets its id (a new board is
/// written to `boards` and `legal_moves`), action values go to
/// `action_values` as they come, state values and best moves to `values`.
/// Returns the values and what each input file was.
fn import_records(
    config: &ImportConfig,
    plan: &ImportPlan,
    mut ids: Ids,
    mut values: Values,
    boards: &mut Boards,
    mut action_values: ActionValueSink,
    summary: &mut ImportSummary,
) -> Result<(Values, Vec<InputRecord>), BagSetError> {
    let mut files = Vec::new();
    // The last record's board (key, id).
    let mut last: Option<(u128, u64)> = None;
    summary.serial = each_batch(
        &plan.inputs,
        config.threads,
        Decode::Full,
        config.progress,
        "",
        |batch| {
            if batch.shard_start {
                let path = batch.path.as_path();
                files.push(InputRecord {
                    source: path.display().to_string(),
                    split: config.split.clone(),
                    zstd: is_compressed(path),
                    bytes_read: fs::metadata(path).map_or(0, |m| m.len()),
                    pgn_bytes: 0,
                    games_read: 0,
                    error: None,
                });
            }
            for (i, r) in batch.records.iter().enumerate() {
                // Only a record whose board differs from its predecessor's is
                // looked up: the action values of one board are consecutive.
                if let (Ids::Memory(table), Some(ahead)) = (&ids, batch.records.get(i + PREFETCH))
                    && batch.records[i + PREFETCH - 1].key != ahead.key
                {
                    table.prefetch(ahead.key);
                }
                let at = |reason: String| batch.error(i, reason);
                let (id, kind) = match last {
                    // Records of one board are usually consecutive.
                    Some((key, id)) if key == r.key => (id, None),
                    _ => {
                        let board = batch.board(r.board);
                        board_id(&mut ids, boards, r.key, &board, &at)?
                    }
                };
                last = Some((r.key, id));
                match batch.set {
                    RecordSet::StateValue => {
                        values.state_value(id, r.win_prob, kind)?;
                        summary.state_value_records += 1;
                    }
                    RecordSet::BehavioralCloning => {
                        values.best(id, r.action)?;
                        summary.behavioral_cloning_records += 1;
                    }
                    RecordSet::ActionValue => {
                        action_values.push(id, r.action, r.win_prob)?;
                        summary.action_value_records += 1;
                    }
                }
            }
            Ok(())
        },
    )?;
    action_values.finish()?;
    boards.flush_part()?;
    if boards.count == 0 {
        return Err(BagSetError::NothingToImport(config.run.clone()));
    }
    if let Ids::Disk(resolved) = &ids
        && resolved.boards != boards.count
    {
        return Err(StoreError::Corrupt(
            config.run.clone(),
            format!(
                "the board-id passes found {} boards, the import {}",
                resolved.boards, boards.count
            ),
        )
        .into());
    }
    Ok((values, files))
}

/// The action_values table as the records arrive: parts of
/// [`AV_ROWS_PER_PART`] rows, each written in batches of [`BATCH_ROWS`].
struct ActionValueSink {
    dir: PathBuf,
    encoders: Encoders,
    writer: Option<ParallelPartWriter>,
    part: u64,
    rows_in_part: u64,
    /// Board ids, actions and win probabilities not yet written.
    columns: (Vec<u64>, Vec<u16>, Vec<f64>),
}

impl ActionValueSink {
    fn push(&mut self, id: u64, action: u16, win_prob: f64) -> Result<(), BagSetError> {
        if self.writer.is_none() || self.rows_in_part == AV_ROWS_PER_PART {
            flush_av(&mut self.columns, self.writer.as_mut(), &self.dir)?;
            if let Some(w) = self.writer.take() {
                w.finish()?;
                self.part += 1;
            }
            self.writer = Some(ParallelPartWriter::create(
                &self.dir.join(part_file_name(self.part)),
                Table::ActionValues,
                self.encoders.clone(),
            )?);
            self.rows_in_part = 0;
        }
        self.columns.0.push(id);
        self.columns.1.push(action);
        self.columns.2.push(win_prob);
        self.rows_in_part += 1;
        if self.columns.0.len() == BATCH_ROWS {
            flush_av(&mut self.columns, self.writer.as_mut(), &self.dir)?;
        }
        Ok(())
    }

    /// Writes what is left; an import without action values writes an
    /// empty table.
    fn finish(mut self) -> Result<(), BagSetError> {
        flush_av(&mut self.columns, self.writer.as_mut(), &self.dir)?;
        match self.writer {
            Some(w) => {
                w.finish()?;
            }
            None => write_empty(&self.dir, Table::ActionValues)?,
        }
        Ok(())
    }
}

/// `state_values`: one row per board with a state-value record, in id
/// order.
fn write_state_values(values: Values, dir: &Path, encoders: &Encoders) -> Result<(), BagSetError> {
    let mut w = ParallelPartWriter::create(
        &dir.join(part_file_name(0)),
        Table::StateValues,
        encoders.clone(),
    )?;
    let mut cols = SvColumns::default();
    values.finish(|id, p, kind, best| {
        cols.board_id.push(id);
        cols.kind.push(kind.name());
        cols.win_prob.push(p);
        cols.best.push(best);
        if cols.board_id.len() == BATCH_ROWS {
            write_batch(
                Some(&mut w),
                Table::StateValues,
                std::mem::take(&mut cols).finish(),
                dir,
            )?;
        }
        Ok(())
    })?;
    write_batch(Some(&mut w), Table::StateValues, cols.finish(), dir)?;
    w.finish()?;
    Ok(())
}

/// The commit: the manifest records the import as the split's source, the
/// split's tables are replaced in one step, and an earlier annotation's
/// chunk entries, which describe other boards, go.
#[allow(clippy::too_many_arguments)]
fn commit(
    config: &ImportConfig,
    plan: &ImportPlan,
    run: &RunDir,
    txn: Transaction<'_>,
    boards: &Boards,
    summary: &ImportSummary,
    files: Vec<InputRecord>,
    started_at: u64,
) -> Result<(), BagSetError> {
    let split = &config.split;
    let mut manifest = run.manifest()?;
    manifest.splits.insert(
        split.clone(),
        SplitManifest {
            ingest: IngestRecord {
                chessbench_version: env!("CARGO_PKG_VERSION").to_owned(),
                started_at,
                finished_at: crate::store::unix_now(),
                options: serde_json::json!({
                    "imported_from": "chessbench .bag files",
                    "memory_limit": config.memory_limit,
                    "board_id_partitions_on_disk": plan.partitions.unwrap_or(0),
                }),
                inputs: files,
                splits_written: vec![split.clone()],
            },
            counts: SplitCounts {
                games: 0,
                rejected: Default::default(),
                not_sampled: 0,
                positions: 0,
                state_value: boards.count,
                behavioral_cloning: boards.with_moves,
                action_value: boards.legal_moves,
            },
            import: Some(ImportRecord {
                format: "chessbench-bag".into(),
                state_value_records: summary.state_value_records,
                behavioral_cloning_records: summary.behavioral_cloning_records,
                action_value_records: summary.action_value_records,
            }),
        },
    );
    chunks::remove_split(run.root(), split)?;
    txn.commit(
        &[
            Table::Games,
            Table::Rejects,
            Table::Boards,
            Table::LegalMoves,
            Table::StateValues,
            Table::ActionValues,
        ],
        std::slice::from_ref(split),
        manifest,
    )?;
    Ok(())
}

fn flush_av(
    av: &mut (Vec<u64>, Vec<u16>, Vec<f64>),
    writer: Option<&mut ParallelPartWriter>,
    dir: &Path,
) -> Result<(), BagSetError> {
    if av.0.is_empty() {
        return Ok(());
    }
    let n = av.0.len();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from(std::mem::take(&mut av.0))),
        Arc::new(UInt16Array::from(std::mem::take(&mut av.1))),
        Arc::new(Float64Array::from(std::mem::take(&mut av.2))),
        Arc::new(Int32Array::new_null(n)),
        Arc::new(Int32Array::new_null(n)),
        Arc::new(UInt16Array::new_null(n)),
        Arc::new(UInt64Array::new_null(n)),
        Arc::new(UInt32Array::new_null(n)),
        ValueSource::Bag.column(n),
    ];
    write_batch(writer, Table::ActionValues, columns, dir)
}

#[derive(Default)]
struct SvColumns {
    board_id: Vec<u64>,
    kind: Vec<&'static str>,
    win_prob: Vec<f64>,
    best: Vec<Option<u16>>,
}

impl SvColumns {
    fn finish(self) -> Vec<ArrayRef> {
        let n = self.board_id.len();
        vec![
            Arc::new(UInt64Array::from(self.board_id)),
            Arc::new(StringArray::from(self.kind)),
            Arc::new(Float64Array::from(self.win_prob)),
            Arc::new(Int32Array::new_null(n)),
            Arc::new(Int32Array::new_null(n)),
            Arc::new(UInt16Array::new_null(n)),
            Arc::new(UInt64Array::new_null(n)),
            Arc::new(UInt32Array::new_null(n)),
            Arc::new(UInt16Array::from(self.best)),
            ValueSource::Bag.column(n),
        ]
    }
}
