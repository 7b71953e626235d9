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
//! Memory: per board, a 12-byte slot of the FEN-to-id table (sized from the
//! state-value bag's record count, so it never grows in the common case; at
//! most 80% full) and 11 bytes of values: about 26 bytes per board, 1.4 GB for
//! 53M boards (10^6 games), 14 GB for the paper's 530M-board train set.

use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::Arc,
};

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, RecordBatch, StringArray, UInt8Array, UInt16Array,
    UInt32Array, UInt64Array, new_empty_array,
};
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_128;

use super::{
    BagSetError,
    bagz::{BagReader, is_compressed, shard_paths},
    coder,
};
use crate::{
    chess::{
        RecordSet,
        actions::vocabulary,
        legal::{ValueKind, prepare},
    },
    store::{
        RunDir, StoreError, Table, chunks,
        legal_moves::LegalMovesWriter,
        manifest::{ImportRecord, IngestRecord, InputRecord, SplitCounts, SplitManifest},
        writer::{BOARDS_PER_PART, PartWriter, part_file_name},
    },
    ui::{Report, group},
};

/// Rows per action_values part file.
const AV_ROWS_PER_PART: u64 = 1 << 24;
/// Rows per buffered batch.
const BATCH_ROWS: usize = 64 * 1024;

/// `chessbench bag import`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct ImportOptions {
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
    /// Memory for the import: it holds about 31 bytes per distinct board
    /// (the FEN-to-id table and the values) and refuses, before reading a
    /// record, an import that would need more.
    #[arg(long, value_name = "SIZE", default_value = crate::options::MEMORY_LIMIT)]
    pub memory_limit: crate::options::ByteSize,
}

impl ImportOptions {
    /// What to import: the sets found in `dir`, replaced by the files given
    /// per set.
    pub fn config(&self, progress: bool) -> Result<ImportConfig, BagSetError> {
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
            memory_limit: self.memory_limit.0,
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
        )
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
}

/// FEN hash to board id in 16 bytes a slot: an open-addressing table keyed
/// by 96 bits of the FEN's 128-bit xxh3 (the home slot comes from its low 32
/// bits, so the table can grow), with 32-bit ids. Two boards are confused
/// only if 96 hash bits agree: about 10^-11 for the paper's 530M boards.
struct BoardIds {
    high: Vec<u64>,
    low: Vec<u32>,
    ids: Vec<u32>,
    len: usize,
}

impl BoardIds {
    const EMPTY: u32 = u32::MAX;

    /// A table for about `boards` boards without growing.
    fn with_capacity(boards: u64) -> BoardIds {
        Self::empty(((boards.max(1024) as f64 / 0.8) as usize).next_power_of_two())
    }

    fn empty(slots: usize) -> BoardIds {
        BoardIds {
            high: vec![0; slots],
            low: vec![0; slots],
            ids: vec![Self::EMPTY; slots],
            len: 0,
        }
    }

    /// The key's slot: where it is, or the empty slot where it would go.
    fn slot(&self, high: u64, low: u32) -> usize {
        let mask = self.ids.len() - 1;
        // Spread the low bits (xxh3's are already uniform; this keeps a
        // table that grew as uniform as a new one).
        let mut i = (u64::from(low).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask;
        loop {
            if self.ids[i] == Self::EMPTY || (self.high[i] == high && self.low[i] == low) {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    fn split(key: u128) -> (u64, u32) {
        ((key >> 64) as u64, key as u32)
    }

    fn get(&self, key: u128) -> Option<u64> {
        let (high, low) = Self::split(key);
        let i = self.slot(high, low);
        (self.ids[i] != Self::EMPTY).then(|| u64::from(self.ids[i]))
    }

    fn insert(&mut self, key: u128, id: u64) -> Result<(), BagSetError> {
        let id = u32::try_from(id)
            .ok()
            .filter(|&id| id != Self::EMPTY)
            .ok_or(BagSetError::TooManyBoards)?;
        if (self.len + 1) * 5 > self.ids.len() * 4 {
            self.grow();
        }
        let (high, low) = Self::split(key);
        let i = self.slot(high, low);
        self.high[i] = high;
        self.low[i] = low;
        self.ids[i] = id;
        self.len += 1;
        Ok(())
    }

    /// Doubles the table (only when the state-value bag undercounted).
    fn grow(&mut self) {
        let old = std::mem::replace(self, Self::empty(self.ids.len() * 2));
        for ((high, low), id) in old.high.into_iter().zip(old.low).zip(old.ids) {
            if id != Self::EMPTY {
                let i = self.slot(high, low);
                self.high[i] = high;
                self.low[i] = low;
                self.ids[i] = id;
                self.len += 1;
            }
        }
    }
}

/// Boards seen so far, and the writers of boards / legal_moves.
struct Boards {
    ids: BoardIds,
    terminal: Vec<Option<ValueKind>>,
    dir: PathBuf,
    writer: Option<PartWriter>,
    moves: Option<LegalMovesWriter>,
    moves_dir: PathBuf,
    buf: BoardColumns,
    legal_moves: u64,
    with_moves: u64,
}

#[derive(Default)]
struct BoardColumns {
    board_id: Vec<u64>,
    fen: Vec<String>,
    side: Vec<&'static str>,
    num_moves: Vec<u8>,
    terminal: Vec<&'static str>,
}

impl Boards {
    fn len(&self) -> u64 {
        self.terminal.len() as u64
    }

    /// The id of a board, adding it (parsed, with its legal moves) if new.
    fn id(&mut self, fen: &str, at: &dyn Fn(String) -> BagSetError) -> Result<u64, BagSetError> {
        let key = xxh3_128(fen.as_bytes());
        if let Some(id) = self.ids.get(key) {
            return Ok(id);
        }
        let p = prepare(fen, None).map_err(|e| at(e.to_string()))?;
        let id = self.len();
        if id.is_multiple_of(BOARDS_PER_PART) {
            self.flush_part()?;
            let part = id / BOARDS_PER_PART;
            let path = self.dir.join(part_file_name(part));
            self.writer = Some(PartWriter::create(&path, Table::Boards)?);
            let path = self.moves_dir.join(part_file_name(part));
            self.moves = Some(LegalMovesWriter::create(&path)?);
        }
        let actions: Vec<u16> = p.moves.iter().map(|m| m.0).collect();
        if let Some(w) = self.moves.as_mut() {
            w.push(id, &actions)?;
        }
        self.legal_moves += actions.len() as u64;
        self.with_moves += u64::from(!actions.is_empty());
        self.ids.insert(key, id)?;
        self.terminal.push(p.terminal);
        let b = &mut self.buf;
        b.board_id.push(id);
        b.side.push(if fen.split(' ').nth(1) == Some("b") {
            "b"
        } else {
            "w"
        });
        b.num_moves.push(actions.len().min(255) as u8);
        b.terminal.push(match p.terminal {
            Some(ValueKind::Checkmate) => "checkmate",
            Some(ValueKind::Stalemate) => "stalemate",
            _ => "none",
        });
        b.fen.push(p.fen);
        if b.board_id.len() == BATCH_ROWS {
            self.flush_batch()?;
        }
        Ok(id)
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
            Arc::new(StringArray::from(b.fen)),
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
    writer: Option<&mut PartWriter>,
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
    let mut w = PartWriter::create(&dir.join(part_file_name(0)), table)?;
    let batch = RecordBatch::try_new(schema, columns)
        .map_err(|e| StoreError::Corrupt(dir.to_owned(), e.to_string()))?;
    w.write(&batch)?;
    w.finish()?;
    Ok(())
}

/// Boards the import will meet, to size the id table once: the state-value
/// records (one per board), else the behavioural-cloning records, else the
/// action values / 30 (legal moves per board).
fn expected_boards(inputs: &[(RecordSet, PathBuf)]) -> Result<u64, BagSetError> {
    let count = |set: RecordSet| -> Result<Option<u64>, BagSetError> {
        match inputs.iter().find(|(s, _)| *s == set) {
            Some((_, pattern)) => Ok(Some(records_in(pattern)?)),
            None => Ok(None),
        }
    };
    Ok(match count(RecordSet::StateValue)? {
        Some(n) => n,
        None => match count(RecordSet::BehavioralCloning)? {
            Some(n) => n,
            None => count(RecordSet::ActionValue)?.unwrap_or(0) / 30,
        },
    })
}

/// Records in every shard of an input (each opened, checked and closed).
fn records_in(pattern: &Path) -> Result<u64, BagSetError> {
    let mut n = 0;
    for p in shard_paths(pattern)? {
        n += BagReader::open(&p)?.len();
    }
    Ok(n)
}

/// Imports bag files into `config.split` of `config.run`.
pub fn import(config: &ImportConfig) -> Result<ImportSummary, BagSetError> {
    let started_at = crate::store::unix_now();
    let expected = expected_boards(&config.inputs)?;
    let need = expected * BYTES_PER_BOARD + IMPORT_BUFFERS;
    if need > config.memory_limit {
        return Err(BagSetError::Budget {
            boards: expected,
            need,
            limit: config.memory_limit,
        });
    }
    let run = RunDir::open(&config.run)?;
    let txn = run.begin()?;
    let split = &config.split;
    for table in [Table::Games, Table::Rejects] {
        write_empty(&txn.partition(table, split)?, table)?;
    }
    let mut boards = Boards {
        ids: BoardIds::with_capacity(expected),
        terminal: Vec::with_capacity(expected as usize),
        dir: txn.partition(Table::Boards, split)?,
        writer: None,
        moves: None,
        moves_dir: txn.partition(Table::LegalMoves, split)?,
        buf: BoardColumns::default(),
        legal_moves: 0,
        with_moves: 0,
    };
    let sv_dir = txn.partition(Table::StateValues, split)?;
    let av_dir = txn.partition(Table::ActionValues, split)?;
    let mut summary = ImportSummary {
        split: split.clone(),
        ..ImportSummary::default()
    };
    let mut inputs_record = Vec::new();
    // Sized once, so that growing never doubles them.
    let mut sv: Vec<f64> = Vec::with_capacity(expected as usize);
    let mut best: Vec<u16> = Vec::with_capacity(expected as usize);
    const NONE: u16 = u16::MAX;
    let mut record = Vec::new();

    let mut ordered = config.inputs.clone();
    ordered.sort_by_key(|(set, _)| *set);
    let mut av_writer: Option<PartWriter> = None;
    let mut av_part = 0u64;
    let mut av_rows_in_part = 0u64;
    let mut av = (Vec::new(), Vec::new(), Vec::new());
    // The legal actions of the last board an action value named (records of
    // one board are usually consecutive).
    let mut legal_cache: (u64, Vec<u16>) = (u64::MAX, Vec::new());

    for (set, pattern) in &ordered {
        // Shards are opened one at a time: the published action values are
        // 2,148 files.
        let total = records_in(pattern)?;
        let bar = super::progress(config.progress, total, *set);
        let mut done = 0;
        for shard in shard_paths(pattern)? {
            let mut reader = BagReader::open(&shard)?;
            inputs_record.push(InputRecord {
                source: reader.path().display().to_string(),
                split: split.clone(),
                zstd: is_compressed(reader.path()),
                bytes_read: fs::metadata(reader.path()).map_or(0, |m| m.len()),
                pgn_bytes: 0,
                games_read: 0,
                error: None,
            });
            let path = reader.path().to_owned();
            loop {
                let index = reader.position();
                if !reader.read(&mut record)? {
                    break;
                }
                let at = |reason: String| BagSetError::Record {
                    path: path.clone(),
                    index,
                    reason,
                };
                match set {
                    RecordSet::StateValue => {
                        let (fen, p) =
                            coder::decode_state_value(&record).map_err(|e| at(e.to_string()))?;
                        let id = boards.id(fen, &at)? as usize;
                        if sv.len() <= id {
                            sv.resize(id + 1, f64::NAN);
                        }
                        sv[id] = p;
                        summary.state_value_records += 1;
                    }
                    RecordSet::BehavioralCloning => {
                        let (fen, uci) = coder::decode_behavioral_cloning(&record)
                            .map_err(|e| at(e.to_string()))?;
                        let id = boards.id(fen, &at)?;
                        let action = legal_action(id, fen, uci, &mut legal_cache, &at)?;
                        let id = id as usize;
                        if best.len() <= id {
                            best.resize(id + 1, NONE);
                        }
                        best[id] = action;
                        summary.behavioral_cloning_records += 1;
                    }
                    RecordSet::ActionValue => {
                        let (fen, uci, p) =
                            coder::decode_action_value(&record).map_err(|e| at(e.to_string()))?;
                        let id = boards.id(fen, &at)?;
                        let action = legal_action(id, fen, uci, &mut legal_cache, &at)?;
                        if av_writer.is_none() || av_rows_in_part == AV_ROWS_PER_PART {
                            flush_av(&mut av, av_writer.as_mut(), &av_dir)?;
                            if let Some(w) = av_writer.take() {
                                w.finish()?;
                                av_part += 1;
                            }
                            av_writer = Some(PartWriter::create(
                                &av_dir.join(part_file_name(av_part)),
                                Table::ActionValues,
                            )?);
                            av_rows_in_part = 0;
                        }
                        av.0.push(id);
                        av.1.push(action);
                        av.2.push(p);
                        av_rows_in_part += 1;
                        if av.0.len() == BATCH_ROWS {
                            flush_av(&mut av, av_writer.as_mut(), &av_dir)?;
                        }
                        summary.action_value_records += 1;
                    }
                }
                if index % 4096 == 0 {
                    bar.set_position(done + index);
                }
            }
            done += reader.len();
            bar.set_position(done);
        }
        bar.finish_and_clear();
    }
    flush_av(&mut av, av_writer.as_mut(), &av_dir)?;
    match av_writer {
        Some(w) => {
            w.finish()?;
        }
        None => write_empty(&av_dir, Table::ActionValues)?,
    }
    boards.flush_part()?;
    if boards.len() == 0 {
        return Err(BagSetError::NothingToImport(config.run.clone()));
    }

    // state_values: one row per board with a state-value record, in id order.
    let mut w = PartWriter::create(&sv_dir.join(part_file_name(0)), Table::StateValues)?;
    let mut cols = SvColumns::default();
    for (id, &p) in sv.iter().enumerate() {
        if p.is_nan() {
            continue;
        }
        let kind = boards.terminal[id].unwrap_or(ValueKind::Search);
        cols.board_id.push(id as u64);
        cols.kind.push(kind.name());
        cols.win_prob.push(p);
        cols.best.push(best.get(id).copied().filter(|&a| a != NONE));
        if cols.board_id.len() == BATCH_ROWS {
            write_batch(
                Some(&mut w),
                Table::StateValues,
                std::mem::take(&mut cols).finish(),
                &sv_dir,
            )?;
        }
    }
    write_batch(Some(&mut w), Table::StateValues, cols.finish(), &sv_dir)?;
    w.finish()?;

    summary.boards = boards.len();
    summary.legal_moves = boards.legal_moves;
    summary.files = inputs_record
        .iter()
        .map(|i| PathBuf::from(&i.source))
        .collect();

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
                }),
                inputs: inputs_record,
                splits_written: vec![split.clone()],
            },
            counts: SplitCounts {
                games: 0,
                rejected: Default::default(),
                not_sampled: 0,
                positions: 0,
                state_value: boards.len(),
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
    // Chunk entries of an earlier annotation describe other boards.
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
    Ok(summary)
}

/// The action index of `uci`, which must be legal in board `id` (`fen`).
fn legal_action(
    id: u64,
    fen: &str,
    uci: &str,
    cache: &mut (u64, Vec<u16>),
    at: &dyn Fn(String) -> BagSetError,
) -> Result<u16, BagSetError> {
    let action = vocabulary().parse(uci).ok_or_else(|| {
        at(format!(
            "move {uci:?} is not one of ChessBench's 1968 actions"
        ))
    })?;
    if cache.0 != id {
        let p = prepare(fen, None).map_err(|e| at(e.to_string()))?;
        *cache = (id, p.moves.iter().map(|m| m.0).collect());
    }
    if cache.1.binary_search(&action).is_err() {
        return Err(at(format!("move {uci} is not legal in {fen}")));
    }
    Ok(action)
}

fn flush_av(
    av: &mut (Vec<u64>, Vec<u16>, Vec<f64>),
    writer: Option<&mut PartWriter>,
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
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id table finds what it stored, keeps keys apart that share 64 of
    /// their bits, and survives growing past its first size.
    #[test]
    fn board_ids_store_and_grow() {
        let mut t = BoardIds::with_capacity(1);
        let keys: Vec<u128> = (0..20_000u64).map(|i| xxh3_128(&i.to_le_bytes())).collect();
        for (id, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k), None);
            t.insert(k, id as u64).unwrap();
        }
        assert!(t.ids.len() > 20_000, "grew");
        for (id, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k), Some(id as u64));
        }
        // Same high 64 bits, other low bits: different boards.
        let a = keys[0];
        let b = a ^ 1;
        assert_eq!(t.get(b), None);
        t.insert(b, 7).unwrap();
        assert_eq!((t.get(a), t.get(b)), (Some(0), Some(7)));
        assert!(matches!(
            t.insert(xxh3_128(b"x"), u64::from(u32::MAX)),
            Err(BagSetError::TooManyBoards)
        ));
    }
}
