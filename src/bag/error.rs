//! What stops `bag export` or `bag import`, and the progress bar both draw
//! over a set's records.

use std::path::PathBuf;

use indicatif::ProgressBar;
use thiserror::Error;

use super::bagz::BagError;

/// Failures of `bag export` / `bag import`.
#[derive(Debug, Error)]
pub enum BagSetError {
    #[error(transparent)]
    Bag(#[from] BagError),
    #[error(transparent)]
    Sql(#[from] crate::duckdb_session::SqlError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: record {index}: {reason}", path.display())]
    Record {
        path: PathBuf,
        index: u64,
        reason: String,
    },
    #[error("no {set} records in split {split:?} of run {} (is the split annotated? `chessbench stats` shows progress)", run.display())]
    Empty {
        set: &'static str,
        split: String,
        run: PathBuf,
    },
    #[error("{}: exists; pass --overwrite to replace it", .0.display())]
    Exists(PathBuf),
    #[error("{}: no ChessBench .bag files (state_value_data.bag, behavioral_cloning_data.bag, action_value_data.bag or -00000-of-N shards) to import", .0.display())]
    NothingToImport(PathBuf),
    #[error("unexpected column {0} in a record query result")]
    Column(usize),
    #[error("board {id} has values but is not in {}", dir.display())]
    NoBoard { id: u64, dir: PathBuf },
    #[error("action {0} is not in the 1968-move vocabulary")]
    Action(u16),
    #[error("more than 4,294,967,294 distinct boards in one split: split the import")]
    TooManyBoards,
    #[error(
        "resolving board ids in {partitions} partitions on disk needs {need} open files, more than the limit of {limit} (`ulimit -Hn`): raise --memory-limit (fewer partitions) or the limit"
    )]
    OpenFiles {
        partitions: usize,
        need: u64,
        limit: u64,
    },
}

/// A progress bar over the records of one set (hidden when disabled).
pub(crate) fn progress(enabled: bool, total: u64, name: &str) -> ProgressBar {
    let bar = crate::ui::bar(
        enabled,
        Some(total),
        "{prefix:>20} {wide_bar} {human_pos}/{human_len} records {per_sec} eta {eta}",
    );
    bar.set_prefix(name.to_owned());
    bar
}
