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

mod boards;
mod options;
mod summary;
mod values;

pub use options::{BagImportOptions, ImportConfig, MEMORY};
pub use summary::ImportSummary;

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use arrow_array::{ArrayRef, Float64Array, Int32Array, UInt16Array, UInt32Array, UInt64Array};

use self::{
    boards::{Boards, write_batch, write_empty},
    options::{AV_ROWS_PER_PART, BATCH_ROWS, BYTES_PER_BOARD, PREFETCH},
    values::{Arrays, Values, write_state_values},
};
use super::{
    bagz::{BagReader, is_compressed, shard_paths},
    decode::{Board, Decode, Input, each_batch},
    error::BagSetError,
    ids::{BoardIds, Partitioner, Resolved, ensure_open_files, partitions_for},
};
use crate::{
    chess::{RecordSet, legal::ValueKind},
    store::{
        RunDir, StoreError, Table, ValueSource,
        boards::BoardRows,
        chunks,
        commit::Transaction,
        manifest::{ImportRecord, IngestRecord, InputRecord, SplitCounts, SplitManifest},
        parallel::{Encoders, ParallelPartWriter},
        writer::part_file_name,
    },
};

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
        buf: BoardRows::with_capacity(BATCH_ROWS),
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
    /// What the boards may use: the limit less the threads' buffers
    /// ([`MEMORY`]).
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
        let [buffers, room] = MEMORY.share(config.memory_limit, config.threads);
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
