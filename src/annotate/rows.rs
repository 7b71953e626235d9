//! An annotated chunk's rows: the `state_values`, `action_values` and
//! `failures` rows of a chunk of boards, committed by the store's chunk
//! protocol ([`crate::store::chunks`]), with an entry recording what the
//! chunk cost.

use std::{path::Path, sync::Arc};

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, StringArray, UInt16Array, UInt32Array, UInt64Array,
};
use serde::{Deserialize, Serialize};

use crate::{
    store::{
        StoreError, Table, ValueSource,
        chunks::{self, Stem},
        unix_now,
    },
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
    let counts = [sv.len(), av.len(), fail.len()];
    let columns = vec![
        (Table::StateValues, sv.finish()),
        (Table::ActionValues, av.finish()),
        (Table::Failures, fail.finish()),
    ];
    chunks::write_chunk(run, split, Stem::Search, chunk, columns, |tables| {
        ChunkEntry {
            chunk,
            first_board,
            boards: boards.len() as u64,
            state_values: counts[0] as u64,
            action_values: counts[1] as u64,
            failures: counts[2] as u64,
            searches: work.searches,
            search_seconds: work.search_seconds,
            fallbacks: work.fallbacks,
            tables: tables.to_vec(),
            engine: by.engine.to_owned(),
            shard: by.shard.to_owned(),
            finished_at: unix_now(),
        }
    })
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
            ValueSource::Stockfish.column(n),
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
            ValueSource::Stockfish.column(n),
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
    use crate::store::commit::partition_dir;

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
            chunks::committed(run, "train", Stem::Search).unwrap(),
            std::collections::BTreeSet::from([7])
        );
        assert!(
            run.join(partition_dir(Table::Failures, "train"))
                .join("chunk-00000007.parquet")
                .is_file()
        );
    }
}
