//! Chunks: the unit of sharding, resumption and commit.
//!
//! Chunk `c` of a split holds boards `[c * C, (c + 1) * C)` (C =
//! `chunk_boards`, a power of two dividing the boards part size, so a chunk
//! never straddles a part file). Chunk `c` belongs to shard
//! `xxh3(c) mod N`, a deterministic, balanced slice that any number of
//! processes can compute independently (Slurm array tasks, Kubernetes
//! indexed pods).
//!
//! A chunk commits in three steps:
//! 1. its rows are written to `TABLE/split=S/chunk-NNNNNNNN.parquet.tmp`
//!    (state_values, action_values, failures if any), fsynced;
//! 2. its entry `annotate/split=S/chunk-NNNNNNNN.json` is written
//!    atomically: this is the commit point;
//! 3. the `.tmp` files are renamed to their final names.
//!
//! On start, each process repairs its own shard's chunks: an entry with
//! `.tmp` files left rolls forward (step 3), `.tmp` files without an entry
//! are deleted. Readers glob `*.parquet` and never see a `.tmp`; a chunk's
//! rows exist exactly once, whatever was killed when.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    sync::Arc,
};

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, RecordBatch, StringArray, UInt16Array, UInt32Array,
    UInt64Array,
};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::board::{Annotated, Eval};
use crate::store::{
    StoreError, Table,
    commit::{ANNOTATE_ENTRIES, partition_dir, remove_annotations, write_atomic},
    writer::PartWriter,
};

/// Directory of chunk entries inside a run.
pub const ENTRIES: &str = ANNOTATE_ENTRIES;
const SHARD_SEED: u64 = 0x6368_6573_7362_656e; // "chessben"

/// The shard a chunk belongs to.
pub fn chunk_shard(chunk: u64, count: u32) -> u32 {
    if count <= 1 {
        return 0;
    }
    (xxh3_64_with_seed(&chunk.to_le_bytes(), SHARD_SEED) % u64::from(count)) as u32
}

/// `chunk-00000012`.
pub fn chunk_stem(chunk: u64) -> String {
    format!("chunk-{chunk:08}")
}

/// `RUN/annotate/split=S`.
pub fn entries_dir(run: &Path, split: &str) -> PathBuf {
    run.join(ENTRIES).join(format!("split={split}"))
}

fn entry_path(run: &Path, split: &str, chunk: u64) -> PathBuf {
    entries_dir(run, split).join(format!("{}.json", chunk_stem(chunk)))
}

fn data_path(run: &Path, table: Table, split: &str, chunk: u64, tmp: bool) -> PathBuf {
    let name = format!(
        "{}.parquet{}",
        chunk_stem(chunk),
        if tmp { ".tmp" } else { "" }
    );
    run.join(partition_dir(table, split)).join(name)
}

/// A committed chunk's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkEntry {
    pub chunk: u64,
    pub first_board: u64,
    pub boards: u64,
    pub state_values: u64,
    pub action_values: u64,
    pub failures: u64,
    pub searches: u64,
    pub search_seconds: f64,
    pub fallbacks: u64,
    /// Tables with a file for this chunk.
    pub tables: Vec<Table>,
    pub engine: String,
    pub shard: String,
    pub finished_at: u64,
}

/// A board that could not be annotated.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub fen: String,
    pub reason: &'static str,
    pub attempts: u32,
    pub detail: String,
}

/// The outcome for one board.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Annotated(Annotated),
    Failed(Failure),
}

/// Committed chunks of a split (from the entries directory).
pub fn committed(run: &Path, split: &str) -> Result<BTreeSet<u64>, StoreError> {
    let dir = entries_dir(run, split);
    let mut done = BTreeSet::new();
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(done),
        Err(e) => return Err(StoreError::io(&dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
        let name = entry.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix("chunk-"))
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            done.insert(n);
        }
    }
    Ok(done)
}

/// Reads a chunk's entry.
pub fn read_entry(run: &Path, split: &str, chunk: u64) -> Result<ChunkEntry, StoreError> {
    let path = entry_path(run, split, chunk);
    let text = fs::read_to_string(&path).map_err(|e| StoreError::io(&path, e))?;
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(path, e.to_string()))
}

/// Repairs the chunks of one shard after a crash: rolls committed chunks
/// forward, deletes uncommitted files. Returns the committed chunks.
pub fn recover(run: &Path, split: &str, shard: (u32, u32)) -> Result<BTreeSet<u64>, StoreError> {
    let done = committed(run, split)?;
    for table in Table::ANNOTATE {
        let dir = run.join(partition_dir(table, split));
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(StoreError::io(&dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(rest) = name.strip_prefix("chunk-") else {
                continue;
            };
            let (num, tmp) = match rest.strip_suffix(".parquet.tmp") {
                Some(n) => (n, true),
                None => match rest.strip_suffix(".parquet") {
                    Some(n) => (n, false),
                    None => continue,
                },
            };
            let Ok(chunk) = num.parse::<u64>() else {
                continue;
            };
            if chunk_shard(chunk, shard.1) != shard.0 {
                continue; // another shard's, maybe being written right now
            }
            let path = entry.path();
            match (done.contains(&chunk), tmp) {
                (true, true) => {
                    let to = data_path(run, table, split, chunk, false);
                    fs::rename(&path, &to).map_err(|e| StoreError::io(&to, e))?;
                }
                (false, _) => fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?,
                (true, false) => {}
            }
        }
    }
    Ok(done)
}

/// Deletes every annotation of a split (`--overwrite`).
pub fn remove_split(run: &Path, split: &str) -> Result<(), StoreError> {
    remove_annotations(run, split)
}

/// Accounting that goes into a chunk's entry.
#[derive(Debug, Clone, Default)]
pub struct ChunkWork {
    pub searches: u64,
    pub search_seconds: f64,
    pub fallbacks: u64,
}

/// Who annotated a chunk (recorded in its entry).
#[derive(Debug, Clone, Copy)]
pub struct Provenance<'a> {
    pub engine: &'a str,
    pub shard: &'a str,
}

/// Writes and commits one chunk. `boards` must be sorted by board id.
pub fn commit_chunk(
    run: &Path,
    split: &str,
    chunk: u64,
    first_board: u64,
    boards: &[(u64, Outcome)],
    work: &ChunkWork,
    by: Provenance<'_>,
) -> Result<ChunkEntry, StoreError> {
    let mut sv = SvColumns::default();
    let mut av = AvColumns::default();
    let mut fail = FailColumns::default();
    for (board_id, outcome) in boards {
        match outcome {
            Outcome::Annotated(a) => {
                sv.push(*board_id, a);
                for (action, e) in &a.actions {
                    av.push(*board_id, *action, e);
                }
            }
            Outcome::Failed(f) => fail.push(*board_id, f),
        }
    }
    let mut tables = Vec::new();
    let mut written = Vec::new();
    let batches = [
        (Table::StateValues, sv.len(), sv.finish()),
        (Table::ActionValues, av.len(), av.finish()),
        (Table::Failures, fail.len(), fail.finish()),
    ];
    let counts = [batches[0].1, batches[1].1, batches[2].1];
    for (table, rows, columns) in batches {
        if rows == 0 && table != Table::StateValues {
            continue;
        }
        let dir = run.join(partition_dir(table, split));
        fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        let path = data_path(run, table, split, chunk, true);
        let batch = RecordBatch::try_new(table.schema(), columns)
            .map_err(|e| StoreError::Corrupt(path.clone(), e.to_string()))?;
        let mut w = PartWriter::create(&path, table)?;
        w.write(&batch)?;
        w.finish()?;
        tables.push(table);
        written.push((path, data_path(run, table, split, chunk, false)));
    }
    let entry = ChunkEntry {
        chunk,
        first_board,
        boards: boards.len() as u64,
        state_values: counts[0] as u64,
        action_values: counts[1] as u64,
        failures: counts[2] as u64,
        searches: work.searches,
        search_seconds: work.search_seconds,
        fallbacks: work.fallbacks,
        tables,
        engine: by.engine.to_owned(),
        shard: by.shard.to_owned(),
        finished_at: crate::annotate::unix_now(),
    };
    let dir = entries_dir(run, split);
    fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
    let bytes = serde_json::to_vec_pretty(&entry)
        .map_err(|e| StoreError::Corrupt(dir.clone(), e.to_string()))?;
    write_atomic(&entry_path(run, split, chunk), &bytes)?;
    for (from, to) in written {
        fs::rename(&from, &to).map_err(|e| StoreError::io(&to, e))?;
    }
    Ok(entry)
}

#[derive(Default)]
struct SvColumns {
    board_id: Vec<u64>,
    kind: Vec<&'static str>,
    win_prob: Vec<f64>,
    cp: Vec<Option<i32>>,
    mate: Vec<Option<i32>>,
    depth: Vec<Option<u16>>,
    nodes: Vec<Option<u64>>,
    time_ms: Vec<Option<u32>>,
    best_action: Vec<Option<u16>>,
}

fn score_columns(e: &Eval) -> (Option<i32>, Option<i32>) {
    match e.score {
        Some(crate::uci::Score::Cp(cp)) => (Some(cp), None),
        Some(crate::uci::Score::Mate(m)) => (None, Some(m)),
        None => (None, None),
    }
}

fn depth16(d: Option<u32>) -> Option<u16> {
    d.map(|d| d.min(u32::from(u16::MAX)) as u16)
}

fn ms32(t: Option<u64>) -> Option<u32> {
    t.map(|t| t.min(u64::from(u32::MAX)) as u32)
}

impl SvColumns {
    fn len(&self) -> usize {
        self.board_id.len()
    }
    fn push(&mut self, board_id: u64, a: &Annotated) {
        let (cp, mate) = score_columns(&a.state);
        self.board_id.push(board_id);
        self.kind.push(a.kind.name());
        self.win_prob.push(a.state.win_prob);
        self.cp.push(cp);
        self.mate.push(mate);
        self.depth.push(depth16(a.state.depth));
        self.nodes.push(a.state.nodes);
        self.time_ms.push(ms32(a.state.time_ms));
        self.best_action.push(a.best_action);
    }
    fn finish(self) -> Vec<ArrayRef> {
        vec![
            Arc::new(UInt64Array::from(self.board_id)),
            Arc::new(StringArray::from(self.kind)),
            Arc::new(Float64Array::from(self.win_prob)),
            Arc::new(Int32Array::from(self.cp)),
            Arc::new(Int32Array::from(self.mate)),
            Arc::new(UInt16Array::from(self.depth)),
            Arc::new(UInt64Array::from(self.nodes)),
            Arc::new(UInt32Array::from(self.time_ms)),
            Arc::new(UInt16Array::from(self.best_action)),
        ]
    }
}

#[derive(Default)]
struct AvColumns {
    board_id: Vec<u64>,
    action: Vec<u16>,
    win_prob: Vec<f64>,
    cp: Vec<Option<i32>>,
    mate: Vec<Option<i32>>,
    depth: Vec<u16>,
    nodes: Vec<Option<u64>>,
    time_ms: Vec<Option<u32>>,
}

impl AvColumns {
    fn len(&self) -> usize {
        self.board_id.len()
    }
    fn push(&mut self, board_id: u64, action: u16, e: &Eval) {
        let (cp, mate) = score_columns(e);
        self.board_id.push(board_id);
        self.action.push(action);
        self.win_prob.push(e.win_prob);
        self.cp.push(cp);
        self.mate.push(mate);
        self.depth.push(depth16(e.depth).unwrap_or(0));
        self.nodes.push(e.nodes);
        self.time_ms.push(ms32(e.time_ms));
    }
    fn finish(self) -> Vec<ArrayRef> {
        vec![
            Arc::new(UInt64Array::from(self.board_id)),
            Arc::new(UInt16Array::from(self.action)),
            Arc::new(Float64Array::from(self.win_prob)),
            Arc::new(Int32Array::from(self.cp)),
            Arc::new(Int32Array::from(self.mate)),
            Arc::new(UInt16Array::from(self.depth)),
            Arc::new(UInt64Array::from(self.nodes)),
            Arc::new(UInt32Array::from(self.time_ms)),
        ]
    }
}

#[derive(Default)]
struct FailColumns {
    board_id: Vec<u64>,
    fen: Vec<String>,
    reason: Vec<&'static str>,
    attempts: Vec<u32>,
    detail: Vec<String>,
}

impl FailColumns {
    fn len(&self) -> usize {
        self.board_id.len()
    }
    fn push(&mut self, board_id: u64, f: &Failure) {
        self.board_id.push(board_id);
        self.fen.push(f.fen.clone());
        self.reason.push(f.reason);
        self.attempts.push(f.attempts);
        self.detail.push(f.detail.clone());
    }
    fn finish(self) -> Vec<ArrayRef> {
        vec![
            Arc::new(UInt64Array::from(self.board_id)),
            Arc::new(StringArray::from(self.fen)),
            Arc::new(StringArray::from(self.reason)),
            Arc::new(UInt32Array::from(self.attempts)),
            Arc::new(StringArray::from(self.detail)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_chunks_evenly() {
        let n = 4;
        let mut counts = [0u32; 4];
        for c in 0..4000 {
            let s = chunk_shard(c, n);
            counts[s as usize] += 1;
            assert_eq!(chunk_shard(c, 1), 0);
        }
        for c in counts {
            assert!((900..1100).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn uncommitted_files_are_removed_and_committed_ones_rolled_forward() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let board = Outcome::Failed(Failure {
            fen: "x".into(),
            reason: "timeout",
            attempts: 3,
            detail: "d".into(),
        });
        commit_chunk(
            run,
            "train",
            7,
            7 * 64,
            &[(448, board)],
            &ChunkWork::default(),
            Provenance {
                engine: "e",
                shard: "0/1",
            },
        )
        .unwrap();
        // Simulate a crash after the entry of chunk 7 but before its renames,
        // and a crash before the entry of chunk 8.
        let fin = data_path(run, Table::Failures, "train", 7, false);
        fs::rename(&fin, data_path(run, Table::Failures, "train", 7, true)).unwrap();
        let stray = data_path(run, Table::StateValues, "train", 8, true);
        fs::write(&stray, b"partial").unwrap();
        let done = recover(run, "train", (0, 1)).unwrap();
        assert_eq!(done, BTreeSet::from([7]));
        assert!(fin.exists());
        assert!(!stray.exists());
        assert_eq!(read_entry(run, "train", 7).unwrap().failures, 1);
    }
}
