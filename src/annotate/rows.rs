//! An annotated chunk's rows: the `state_values`, `action_values` and
//! `failures` rows of a chunk of boards, committed by the store's chunk
//! protocol ([`crate::store::chunks`]), with an entry recording what the
//! chunk cost.

use std::{path::Path, sync::Arc};

use arrow_array::{
    Array, ArrayRef, Float64Array, Int32Array, RecordBatch, StringArray, UInt16Array, UInt32Array,
    UInt64Array,
};
use serde::{Deserialize, Serialize};

use crate::{
    store::{Source, StoreError, Table, chunks, unix_now},
    uci_client::oracle::{Annotated, Eval},
};

/// A committed chunk's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChunkEntry {
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
pub(crate) struct Failure {
    pub fen: String,
    pub reason: &'static str,
    pub attempts: u32,
    pub detail: String,
}

/// The outcome for one board.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Annotated(Annotated),
    Failed(Failure),
}

/// Accounting that goes into a chunk's entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChunkWork {
    pub searches: u64,
    pub search_seconds: f64,
    pub fallbacks: u64,
}

/// Who annotated a chunk (recorded in its entry).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Provenance<'a> {
    pub engine: &'a str,
    pub shard: &'a str,
}

/// Writes and commits one chunk. `boards` must be sorted by board id.
pub(crate) fn commit_chunk(
    run: &Path,
    split: &str,
    chunk: u64,
    first_board: u64,
    boards: &[(u64, Outcome)],
    work: &ChunkWork,
    by: Provenance<'_>,
) -> Result<ChunkEntry, StoreError> {
    let [sv, av, fail] = outcome_columns(boards);
    let base = ChunkEntry {
        chunk,
        first_board,
        boards: boards.len() as u64,
        state_values: 0,
        action_values: 0,
        failures: 0,
        searches: work.searches,
        search_seconds: work.search_seconds,
        fallbacks: work.fallbacks,
        tables: Vec::new(),
        engine: by.engine.to_owned(),
        shard: by.shard.to_owned(),
        finished_at: 0,
    };
    write(run, split, [sv, av, fail], base)
}

/// Commits again a chunk whose failed boards were searched again
/// (`retried`, sorted by board id, only those boards): the rows of the
/// boards that had values are kept as they were, the retried boards'
/// rows join them in board order, and `failures` keeps only the boards
/// that failed again. The old chunk is withdrawn first ([`chunks::uncommit`]):
/// a crash before the new commit leaves the chunk to be annotated whole.
pub(crate) fn recommit_chunk(
    run: &Path,
    split: &str,
    chunk: u64,
    first_board: u64,
    retried: &[(u64, Outcome)],
    work: &ChunkWork,
    by: Provenance<'_>,
) -> Result<ChunkEntry, StoreError> {
    let old: ChunkEntry =
        chunks::read_entry(run, split, Source::Stockfish, chunk)?.ok_or_else(|| {
            StoreError::Missing(
                chunks::entries_dir(run, split).join(chunks::chunk_name(Source::Stockfish, chunk)),
            )
        })?;
    let [sv, av, fail] = outcome_columns(retried);
    let mut merged = Vec::with_capacity(2);
    for (table, new) in [(Table::StateValues, sv), (Table::ActionValues, av)] {
        let kept = chunks::read_table(run, split, Source::Stockfish, chunk, table)?;
        merged
            .push(merge_by_board(kept, new).map_err(|e| {
                StoreError::Corrupt(chunks::entries_dir(run, split), e.to_string())
            })?);
    }
    chunks::uncommit(run, split, Source::Stockfish, chunk)?;
    let [sv, av]: [Vec<ArrayRef>; 2] = merged.try_into().expect("two tables");
    let base = ChunkEntry {
        chunk,
        first_board,
        boards: old.boards,
        searches: old.searches + work.searches,
        search_seconds: old.search_seconds + work.search_seconds,
        fallbacks: old.fallbacks + work.fallbacks,
        engine: by.engine.to_owned(),
        shard: by.shard.to_owned(),
        ..old
    };
    write(run, split, [sv, av, fail], base)
}

/// Writes the chunk's three tables and commits them with `base` (its
/// counts and tables filled in from the columns).
fn write(
    run: &Path,
    split: &str,
    [sv, av, fail]: [Vec<ArrayRef>; 3],
    base: ChunkEntry,
) -> Result<ChunkEntry, StoreError> {
    let rows = |c: &[ArrayRef]| c.first().map_or(0, |a| a.len()) as u64;
    let counts = [rows(&sv), rows(&av), rows(&fail)];
    let columns = vec![
        (Table::StateValues, sv),
        (Table::ActionValues, av),
        (Table::Failures, fail),
    ];
    chunks::write_chunk(
        run,
        split,
        Source::Stockfish,
        base.chunk,
        columns,
        |tables| ChunkEntry {
            state_values: counts[0],
            action_values: counts[1],
            failures: counts[2],
            tables: tables.to_vec(),
            finished_at: unix_now(),
            ..base
        },
    )
}

/// The `state_values`, `action_values` and `failures` columns of boards'
/// outcomes.
fn outcome_columns(boards: &[(u64, Outcome)]) -> [Vec<ArrayRef>; 3] {
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
    [sv.finish(), av.finish(), fail.finish()]
}

/// The rows of `kept` and `new` (each sorted by board id, column 0, and
/// about disjoint boards) merged in board order.
fn merge_by_board(
    kept: Option<RecordBatch>,
    new: Vec<ArrayRef>,
) -> Result<Vec<ArrayRef>, arrow_schema::ArrowError> {
    let Some(kept) = kept else { return Ok(new) };
    let ids = |a: &ArrayRef| {
        a.as_any()
            .downcast_ref::<UInt64Array>()
            .map(|a| a.values().clone())
            .ok_or_else(|| arrow_schema::ArrowError::SchemaError("board_id is not u64".into()))
    };
    let (a, b) = (ids(kept.column(0))?, ids(&new[0])?);
    let mut order = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if j == b.len() || (i < a.len() && a[i] <= b[j]) {
            order.push((0, i));
            i += 1;
        } else {
            order.push((1, j));
            j += 1;
        }
    }
    kept.columns()
        .iter()
        .zip(&new)
        .map(|(k, n)| arrow_select::interleave::interleave(&[k.as_ref(), n.as_ref()], &order))
        .collect()
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
        Some(crate::uci_client::Score::Cp(cp)) => (Some(cp), None),
        Some(crate::uci_client::Score::Mate(m)) => (None, Some(m)),
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
        let n = self.board_id.len();
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
            Source::Stockfish.column_value().column(n),
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
        let n = self.board_id.len();
        vec![
            Arc::new(UInt64Array::from(self.board_id)),
            Arc::new(UInt16Array::from(self.action)),
            Arc::new(Float64Array::from(self.win_prob)),
            Arc::new(Int32Array::from(self.cp)),
            Arc::new(Int32Array::from(self.mate)),
            Arc::new(UInt16Array::from(self.depth)),
            Arc::new(UInt64Array::from(self.nodes)),
            Arc::new(UInt32Array::from(self.time_ms)),
            Source::Stockfish.column_value().column(n),
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
    use crate::chess::legal::ValueKind;
    use crate::store::commit::partition_dir;

    fn annotated(win_prob: f64) -> Outcome {
        let eval = Eval {
            score: Some(crate::uci_client::Score::Cp(10)),
            win_prob,
            depth: Some(5),
            nodes: Some(100),
            time_ms: Some(1),
        };
        Outcome::Annotated(Annotated {
            kind: ValueKind::Search,
            state: eval,
            actions: vec![(3, eval), (7, eval)],
            best_action: Some(3),
        })
    }

    fn failed() -> Outcome {
        Outcome::Failed(Failure {
            fen: "x".into(),
            reason: "crash",
            attempts: 3,
            detail: "d".into(),
        })
    }

    fn ids(batch: &RecordBatch) -> Vec<u64> {
        let a = batch.column(0).as_any().downcast_ref::<UInt64Array>();
        a.unwrap().values().to_vec()
    }

    #[test]
    fn a_recommitted_chunk_keeps_its_rows_and_adds_the_retried_boards_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let by = Provenance {
            engine: "e",
            shard: "0/1",
        };
        let work = ChunkWork {
            searches: 9,
            ..ChunkWork::default()
        };
        let boards = [
            (8, annotated(0.1)),
            (9, failed()),
            (10, annotated(0.3)),
            (11, failed()),
        ];
        let first = commit_chunk(run, "train", 2, 8, &boards, &work, by).unwrap();
        assert_eq!((first.state_values, first.failures), (2, 2));
        assert_eq!(
            chunks::failed_boards(run, "train", Source::Stockfish, |_| true).unwrap(),
            vec![(2, vec![9, 11])]
        );
        // Board 9 annotated now, board 11 fails again.
        let retried = [(9, annotated(0.2)), (11, failed())];
        let again = recommit_chunk(run, "train", 2, 8, &retried, &work, by).unwrap();
        assert_eq!(
            (
                again.boards,
                again.state_values,
                again.action_values,
                again.failures
            ),
            (4, 3, 6, 1)
        );
        assert_eq!(again.searches, 18);
        let table = |t| chunks::read_table(run, "train", Source::Stockfish, 2, t).unwrap();
        let sv = table(Table::StateValues).unwrap();
        assert_eq!(ids(&sv), [8, 9, 10]);
        let wp = sv
            .column(2)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        assert_eq!(wp.values().to_vec(), [0.1, 0.2, 0.3]);
        assert_eq!(
            ids(&table(Table::ActionValues).unwrap()),
            [8, 8, 9, 9, 10, 10]
        );
        assert_eq!(ids(&table(Table::Failures).unwrap()), [11]);
        // All retried boards annotated: no failures file is left.
        let last = recommit_chunk(run, "train", 2, 8, &[(11, annotated(0.4))], &work, by).unwrap();
        assert_eq!((last.state_values, last.failures), (4, 0));
        assert!(table(Table::Failures).is_none());
        assert!(
            chunks::failed_boards(run, "train", Source::Stockfish, |_| true)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_failed_board_commits_its_failure_row() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let board = Outcome::Failed(Failure {
            fen: "x".into(),
            reason: "timeout",
            attempts: 3,
            detail: "d".into(),
        });
        let entry = commit_chunk(
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
        assert_eq!(entry.failures, 1);
        assert_eq!(entry.tables, [Table::StateValues, Table::Failures]);
        assert_eq!(
            chunks::committed(run, "train", Source::Stockfish).unwrap(),
            std::collections::BTreeSet::from([7])
        );
        assert!(
            run.join(partition_dir(Table::Failures, "train"))
                .join("chunk-00000007.parquet")
                .is_file()
        );
    }
}
