//! `chessbench bag export`: a split's record sets as ChessBench `.bag` files.
//!
//! The records are those of the SQL layer's views (`sv_records`,
//! `bc_records`, `av_records`), built without their joins so that memory
//! stays bounded at any size: the fixed-width value rows (board id, action,
//! win probability) are read as stored when they are in order, as import and
//! annotate write them, and sorted by DuckDB otherwise ([`RowOrder`]; it
//! spills into `RUN/.tmp/` past its budget), the FENs come from a merge with
//! the boards table, which is
//! stored in board-id order and streamed a batch at a time, and the moves
//! from the action vocabulary (`legal_moves.uci` holds the same strings).

use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
};

use arrow_array::{
    Array, ArrowPrimitiveType, PrimitiveArray, RecordBatch, StringArray, UInt64Array,
    cast::AsArray,
    types::{Float64Type, UInt16Type, UInt64Type},
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;
use serde::Serialize;

use super::{
    bagz::{BagError, BagWriter, RecordCompressor, StoredRecords, shard_file_name},
    coder,
    error::{BagSetError, progress},
};
use crate::{
    chess::{ActionVocabulary, RecordSet, vocabulary},
    duckdb_session::{Session, SqlError, literal},
    store::{
        LabelSource, StoreError, Table,
        commit::partition_dir,
        open_columns,
        parallel::{Encoders, InOrder},
        parquet_files,
    },
    ui::{Report, group},
};

/// `chessbench bag export`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct BagExportOptions {
    /// Run directory.
    #[arg(value_name = "RUN_DIR", value_hint = clap::ValueHint::DirPath)]
    pub run: PathBuf,
    /// Split to export.
    #[arg(long, value_name = "NAME")]
    pub split: String,
    /// Output directory [default: RUN_DIR/bag/SPLIT].
    #[arg(short, long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: Option<PathBuf>,
    /// Record sets to write [default: all three].
    #[arg(long = "set", value_enum, value_delimiter = ',')]
    pub sets: Vec<RecordSet>,
    /// Shard a set into files of at most this many records (ChessBench's
    /// train action values: ~7.1M per shard).
    #[arg(long, value_name = "N", default_value_t = 7_200_000)]
    pub records_per_shard: u64,
    /// Zstd-compress every record (.bagz files).
    #[arg(long)]
    pub compress: bool,
    /// Replace existing files.
    #[arg(long)]
    pub overwrite: bool,
    /// Values to export where a board has more than one source.
    #[arg(long, value_enum, default_value_t = LabelSource::default())]
    pub label_source: LabelSource,
    #[command(flatten)]
    pub budget: crate::options::Budget,
    #[command(flatten)]
    pub jobs: crate::options::Jobs,
}

impl BagExportOptions {
    /// What to export, with the defaults filled in; `env` gives the
    /// progress bar.
    pub fn resolve(&self, env: &crate::options::Env) -> ExportConfig {
        ExportConfig {
            run: self.run.clone(),
            split: self.split.clone(),
            out: self
                .out
                .clone()
                .unwrap_or_else(|| self.run.join("bag").join(&self.split)),
            sets: if self.sets.is_empty() {
                RecordSet::ALL.to_vec()
            } else {
                self.sets.clone()
            },
            records_per_shard: self.records_per_shard,
            compress: self.compress,
            overwrite: self.overwrite,
            label_source: self.label_source,
            memory_limit: self.budget.bytes(),
            threads: self.jobs.or_cores(),
            progress: env.progress,
        }
    }
}

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub run: PathBuf,
    pub split: String,
    pub out: PathBuf,
    pub sets: Vec<RecordSet>,
    /// Records per shard; a set with more is split into
    /// `-0000i-of-0000N` files (ChessBench's train action values: ~7.1M).
    pub records_per_shard: u64,
    /// Zstd-compress each record (`.bagz`).
    pub compress: bool,
    pub overwrite: bool,
    pub label_source: LabelSource,
    /// DuckDB's memory budget, bytes.
    pub memory_limit: u64,
    /// Threads writing the files (`-j`): compressing `.bagz` records and
    /// writing them while the next batch is encoded, decoding the boards'
    /// FENs ahead; the files are the same at any.
    pub threads: usize,
    pub progress: bool,
}

/// One exported set.
#[derive(Debug, Clone, Serialize)]
pub struct ExportedSet {
    pub set: &'static str,
    pub records: u64,
    pub bytes: u64,
    pub files: Vec<PathBuf>,
    /// Whether the value rows were read as stored or had to be sorted.
    pub order: RowOrder,
}

/// How a set's value rows come out of DuckDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowOrder {
    /// As stored, in file order (DuckDB keeps the order of a single-table
    /// scan): no sort. `bag import` and `annotate` write the value tables in
    /// board-id order, so this is the usual case; the export checks each row
    /// and falls back to [`RowOrder::Sorted`] at the first one out of order.
    Stored,
    /// Sorted by DuckDB (spilling into `RUN/.tmp/` past its budget).
    Sorted,
}

/// Records written (and compressed) as one batch.
const WRITE_BATCH: usize = 4096;

thread_local! {
    /// Each compressing thread's zstd context.
    static COMPRESSOR: std::cell::RefCell<Option<RecordCompressor>> =
        const { std::cell::RefCell::new(None) };
}

/// The value rows of a set, to be read in the records' order: board id, then
/// action (`ORDER BY` only for [`RowOrder::Sorted`]).
fn query(set: RecordSet, split: &str, order: RowOrder) -> String {
    let split = literal(split);
    let (select, key) = match set {
        RecordSet::StateValue => (
            format!("SELECT board_id, win_prob FROM sv_chosen WHERE split = {split}"),
            "board_id",
        ),
        RecordSet::BehavioralCloning => (
            format!(
                "SELECT board_id, best_action FROM sv_chosen \
                 WHERE split = {split} AND best_action IS NOT NULL"
            ),
            "board_id",
        ),
        RecordSet::ActionValue => (
            format!("SELECT board_id, action, win_prob FROM av_chosen WHERE split = {split}"),
            "board_id, action",
        ),
    };
    match order {
        RowOrder::Stored => select,
        RowOrder::Sorted => format!("{select} ORDER BY {key}"),
    }
}

fn count(session: &Session, set: RecordSet, split: &str) -> Result<u64, SqlError> {
    let split = literal(split);
    let sql = match set {
        RecordSet::StateValue => format!("SELECT count(*) FROM sv_chosen WHERE split = {split}"),
        RecordSet::BehavioralCloning => format!(
            "SELECT count(*) FROM sv_chosen WHERE split = {split} AND best_action IS NOT NULL"
        ),
        RecordSet::ActionValue => {
            format!("SELECT count(*) FROM av_chosen WHERE split = {split}")
        }
    };
    session
        .connection()
        .query_row(&sql, [], |r| r.get::<_, u64>(0))
        .map_err(|e| session_error(session, e))
}

/// One batch of the boards table: ids and their FENs.
type BoardBatch = Result<(UInt64Array, StringArray), BagSetError>;

/// The batches of a split's boards table, file after file, decoded as the
/// iterator is advanced.
struct BoardBatches {
    dir: PathBuf,
    files: std::vec::IntoIter<PathBuf>,
    reader: Option<ParquetRecordBatchReader>,
}

impl Iterator for BoardBatches {
    type Item = BoardBatch;

    fn next(&mut self) -> Option<BoardBatch> {
        loop {
            if let Some(reader) = self.reader.as_mut() {
                match reader.next() {
                    Some(batch) => return Some(self.columns(batch)),
                    None => self.reader = None,
                }
            }
            let path = self.files.next()?;
            let reader = open_columns(&path, &["board_id", "fen"]).and_then(|b| {
                b.with_batch_size(16 * 1024)
                    .build()
                    .map_err(|e| StoreError::parquet(&path, e))
            });
            match reader {
                Ok(reader) => self.reader = Some(reader),
                Err(e) => {
                    self.files = Vec::new().into_iter();
                    return Some(Err(e.into()));
                }
            }
        }
    }
}

impl BoardBatches {
    fn columns(&self, batch: Result<RecordBatch, arrow_schema::ArrowError>) -> BoardBatch {
        let batch = batch.map_err(|e| StoreError::Corrupt(self.dir.clone(), e.to_string()))?;
        let ids = batch.column(0).as_primitive_opt::<UInt64Type>();
        let fens = batch.column(1).as_string_opt::<i32>();
        let (Some(ids), Some(fens)) = (ids, fens) else {
            return Err(StoreError::Corrupt(
                self.dir.clone(),
                "boards without (board_id UInt64, fen Utf8)".into(),
            )
            .into());
        };
        Ok((ids.clone(), fens.clone()))
    }
}

/// Where [`BoardFens`] gets its batches: decoded when asked for, or by a
/// thread of its own that decodes up to two batches ahead (the Parquet
/// decoding then overlaps the export's encoding and writing).
enum BoardSource {
    Inline(BoardBatches),
    Ahead(std::sync::mpsc::Receiver<BoardBatch>),
}

/// The boards of a split in board-id order, streamed a batch at a time:
/// the FEN of each id asked for, ids asked for in ascending order.
struct BoardFens {
    dir: PathBuf,
    source: BoardSource,
    ids: UInt64Array,
    fens: StringArray,
    row: usize,
    /// The last id read, to check the table's order.
    last: Option<u64>,
}

impl BoardFens {
    /// The boards of `split`; `ahead` decodes them on a thread of their own.
    fn open(run: &Path, split: &str, ahead: bool) -> Result<BoardFens, BagSetError> {
        let dir = run.join(partition_dir(Table::Boards, split));
        let batches = BoardBatches {
            dir: dir.clone(),
            files: parquet_files(&dir)?.into_iter(),
            reader: None,
        };
        let source = if ahead {
            let (send, receive) = std::sync::mpsc::sync_channel(2);
            std::thread::Builder::new()
                .name("cb-boards".into())
                .spawn(move || {
                    for batch in batches {
                        // Ends when the export stops asking.
                        if send.send(batch).is_err() {
                            break;
                        }
                    }
                })
                .map_err(|source| BagSetError::Io {
                    path: dir.clone(),
                    source,
                })?;
            BoardSource::Ahead(receive)
        } else {
            BoardSource::Inline(batches)
        };
        Ok(BoardFens {
            dir,
            source,
            ids: UInt64Array::from(Vec::<u64>::new()),
            fens: StringArray::from(Vec::<&str>::new()),
            row: 0,
            last: None,
        })
    }

    /// The next batch of (board_id, fen); false when the table ends.
    fn next_batch(&mut self) -> Result<bool, BagSetError> {
        let next = match &mut self.source {
            BoardSource::Inline(batches) => batches.next(),
            BoardSource::Ahead(receive) => receive.recv().ok(),
        };
        match next {
            Some(batch) => {
                (self.ids, self.fens) = batch?;
                self.row = 0;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The FEN of board `id`; ids must be asked for in ascending order.
    fn fen(&mut self, id: u64) -> Result<&str, BagSetError> {
        loop {
            while self.row < self.ids.len() {
                let here = self.ids.value(self.row);
                if self.last.is_some_and(|last| here < last) {
                    return Err(StoreError::Corrupt(
                        self.dir.clone(),
                        format!(
                            "board {here} follows board {}: boards are not in board-id order",
                            self.last.unwrap_or(0)
                        ),
                    )
                    .into());
                }
                self.last = Some(here);
                if here == id {
                    return Ok(self.fens.value(self.row));
                }
                if here > id {
                    break;
                }
                self.row += 1;
            }
            if self.row < self.ids.len() || !self.next_batch()? {
                return Err(BagSetError::NoBoard {
                    id,
                    dir: self.dir.clone(),
                });
            }
        }
    }
}

fn session_error(session: &Session, e: duckdb::Error) -> SqlError {
    session.error(&format!("bag export of {}", session.run().display()), 1, e)
}

/// What an export wrote (as JSON: the list of sets).
#[derive(Debug, Clone)]
pub struct ExportSummary {
    pub out: PathBuf,
    pub sets: Vec<ExportedSet>,
}

impl Serialize for ExportSummary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.sets.serialize(s)
    }
}

impl Report for ExportSummary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        for set in &self.sets {
            writeln!(
                out,
                "{:<20} {:>14} records {:>14} bytes {:>6.1} B/record  {} file(s) in {}",
                set.set,
                group(set.records),
                group(set.bytes),
                set.bytes as f64 / set.records.max(1) as f64,
                set.files.len(),
                self.out.display()
            )?;
        }
        Ok(())
    }
}

/// Exports the sets of one split. Files are written under temporary names
/// and renamed when complete; if any set fails (a full disk, say), the files
/// this call completed are removed too, so an export is all or nothing.
pub fn run(config: &ExportConfig) -> Result<ExportSummary, BagSetError> {
    let session = Session::open(
        &config.run,
        &[(
            "label_source".to_owned(),
            config.label_source.name().to_owned(),
        )],
        config.memory_limit,
    )?;
    fs::create_dir_all(&config.out).map_err(|source| BagSetError::Io {
        path: config.out.clone(),
        source,
    })?;
    // Every set's size and file names first: an empty set or an existing
    // file is refused before anything is written.
    let mut plans = Vec::new();
    for &set in &config.sets {
        let n = count(&session, set, &config.split)?;
        if n == 0 {
            return Err(BagSetError::Empty {
                set: set.name(),
                split: config.split.clone(),
                run: config.run.clone(),
            });
        }
        let shards = n.div_ceil(config.records_per_shard.max(1)).max(1) as u32;
        let files: Vec<PathBuf> = (0..shards)
            .map(|i| {
                config
                    .out
                    .join(shard_file_name(set.name(), i, shards, config.compress))
            })
            .collect();
        if !config.overwrite
            && let Some(f) = files.iter().find(|f| f.exists())
        {
            return Err(BagSetError::Exists(f.clone()));
        }
        plans.push((set, n, files));
    }
    let mut done = Vec::new();
    for (set, n, files) in plans {
        let exported = match export_set(config, &session, set, n, &files, RowOrder::Stored) {
            Ok(None) => export_set(config, &session, set, n, &files, RowOrder::Sorted),
            other => other,
        };
        match exported {
            Ok(Some(exported)) => done.push(exported),
            Ok(None) => unreachable!("sorted rows are in order"),
            Err(e) => {
                for f in done
                    .iter()
                    .flat_map(|d: &ExportedSet| &d.files)
                    .chain(&files)
                {
                    let _ = fs::remove_file(f);
                }
                return Err(e);
            }
        }
    }
    Ok(ExportSummary {
        out: config.out.clone(),
        sets: done,
    })
}

/// Writes one set's `n` records into `files` (its shards), its value rows
/// read in `order`; `None` if they were read as stored and a row came out of
/// (board id, action) order (the caller then sorts them).
fn export_set(
    config: &ExportConfig,
    session: &Session,
    set: RecordSet,
    n: u64,
    files: &[PathBuf],
    order: RowOrder,
) -> Result<Option<ExportedSet>, BagSetError> {
    let bar = progress(config.progress, n, set.name());
    let mut stmt = session
        .connection()
        .prepare(&query(set, &config.split, order))
        .map_err(|e| session_error(session, e))?;
    drop(
        stmt.stream_arrow([])
            .map_err(|e| session_error(session, e))?,
    );
    // Records are encoded here and handed over in batches: with more than
    // one thread, a pool compresses (`.bagz`) and writes them, in order,
    // while this thread encodes the next, and the boards' FENs are decoded
    // on a thread of their own; with one, all of it happens here.
    let encoders = Encoders::new(config.threads, "cb-bag-write")?;
    let compress = config.compress;
    let open = |i: usize| -> Result<InOrder<BagWriter>, BagSetError> {
        Ok(InOrder::new(
            BagWriter::create(&files[i])?,
            &files[i],
            encoders.clone(),
        ))
    };
    let submit = |writer: &mut InOrder<BagWriter>, batch: StoredRecords| {
        writer.submit(move |_| {
            if !compress {
                return Ok(batch);
            }
            COMPRESSOR.with(|c| {
                let mut c = c.borrow_mut();
                if c.is_none() {
                    *c = Some(RecordCompressor::new().map_err(|e| BagError::Io {
                        path: PathBuf::from("-"),
                        source: e,
                    })?);
                }
                let zstd = c.as_mut().unwrap_or_else(|| unreachable!("set above"));
                batch.compressed(zstd).map_err(|e| BagError::Io {
                    path: PathBuf::from("-"),
                    source: e,
                })
            })
        })
    };
    let mut shard = 0usize;
    let mut writer = open(0)?;
    let mut in_shard = 0u64;
    let mut batch = StoredRecords::default();
    let per_shard = n.div_ceil(files.len() as u64);
    let mut record = Vec::with_capacity(128);
    let (mut written, mut bytes) = (0u64, 0u64);
    let mut boards = BoardFens::open(&config.run, &config.split, config.threads > 1)?;
    let vocab = vocabulary();
    // The last row's (board id, action): stored rows must increase.
    let mut last: Option<(u64, u16)> = None;
    while let Some(rows) = stmt.step().map_err(|e| session_error(session, e))? {
        let rows = RecordBatch::from(rows);
        let ids = column::<UInt64Type>(&rows, 0)?;
        let values = Values::of(set, &rows)?;
        for row in 0..rows.num_rows() {
            if order == RowOrder::Stored {
                let action = match values {
                    Values::ActionValue(actions, _) => actions.value(row),
                    _ => 0,
                };
                let key = (ids.value(row), action);
                if last.is_some_and(|last| key <= last) {
                    return Ok(None); // unfinished shards are removed on drop
                }
                last = Some(key);
            }
            let fen = boards.fen(ids.value(row))?;
            match values {
                Values::StateValue(win_probs) => {
                    coder::encode_state_value(&mut record, fen, win_probs.value(row))
                }
                Values::BehavioralCloning(best) => {
                    coder::encode_behavioral_cloning(&mut record, fen, uci(vocab, best.value(row))?)
                }
                Values::ActionValue(actions, win_probs) => coder::encode_action_value(
                    &mut record,
                    fen,
                    uci(vocab, actions.value(row))?,
                    win_probs.value(row),
                ),
            }
            if in_shard == per_shard && shard + 1 < files.len() {
                submit(&mut writer, std::mem::take(&mut batch))?;
                bytes += writer.finish()?.1;
                shard += 1;
                in_shard = 0;
                writer = open(shard)?;
            }
            batch.push(&record);
            in_shard += 1;
            written += 1;
            if batch.len() == WRITE_BATCH {
                // The next batch starts at this one's size: no regrowing.
                let next = StoredRecords::with_capacity(batch.bytes.len(), WRITE_BATCH);
                submit(&mut writer, std::mem::replace(&mut batch, next))?;
            }
        }
        bar.inc(rows.num_rows() as u64);
    }
    submit(&mut writer, batch)?;
    bytes += writer.finish()?.1;
    // Sets smaller than expected leave no stale shard names behind.
    for f in &files[shard + 1..] {
        BagWriter::create(f)?.finish()?;
    }
    bar.finish_and_clear();
    Ok(Some(ExportedSet {
        set: set.name(),
        records: written,
        bytes,
        files: files.to_vec(),
        order,
    }))
}

/// The value columns of a batch of one set's rows (after `board_id`), typed
/// once per batch.
#[derive(Clone, Copy)]
enum Values<'a> {
    StateValue(&'a PrimitiveArray<Float64Type>),
    BehavioralCloning(&'a PrimitiveArray<UInt16Type>),
    ActionValue(
        &'a PrimitiveArray<UInt16Type>,
        &'a PrimitiveArray<Float64Type>,
    ),
}

impl<'a> Values<'a> {
    fn of(set: RecordSet, batch: &'a RecordBatch) -> Result<Values<'a>, BagSetError> {
        Ok(match set {
            RecordSet::StateValue => Values::StateValue(column(batch, 1)?),
            RecordSet::BehavioralCloning => Values::BehavioralCloning(column(batch, 1)?),
            RecordSet::ActionValue => Values::ActionValue(column(batch, 1)?, column(batch, 2)?),
        })
    }
}

/// Column `i` of a value-row batch, of type `T` and without nulls.
fn column<T: ArrowPrimitiveType>(
    batch: &RecordBatch,
    i: usize,
) -> Result<&PrimitiveArray<T>, BagSetError> {
    batch
        .column(i)
        .as_primitive_opt::<T>()
        .filter(|c| c.null_count() == 0)
        .ok_or(BagSetError::Column(i))
}

/// The UCI move of an action index.
fn uci(vocab: &ActionVocabulary, action: u16) -> Result<&str, BagSetError> {
    vocab.uci(action).ok_or(BagSetError::Action(action))
}
