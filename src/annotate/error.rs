//! What stops an annotation, from any label source: a failure while it
//! runs ([`AnnotateError`]), what the run or the command refuses before
//! any label is written ([`Refusal`]), and another process holding the run
//! ([`RunBusy`]).

use std::{io, path::PathBuf};

use thiserror::Error;

use crate::{
    chess::legal::PrepareError,
    store::{Source, StoreError},
    uci_client::EngineError,
};

/// Annotate failures that stop the run (single boards that fail go to the
/// `failures` table instead).
#[derive(Debug, Error)]
pub enum AnnotateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the engine is unusable: {0}")]
    Engine(EngineError),
    #[error("boards table {}: {message}", path.display())]
    Boards { path: PathBuf, message: String },
    #[error("board {board_id}: {source} (is the boards table corrupt?)")]
    Prepare { board_id: u64, source: PrepareError },
    #[error(
        "split {split}, chunk {chunk} (boards from {first_board}): {source}; the chunks committed before it are kept: run the same command again to resume"
    )]
    Commit {
        split: String,
        chunk: u64,
        first_board: u64,
        source: StoreError,
    },
    #[error("{0}")]
    Thread(String),
    #[error(transparent)]
    EvalsRead(#[from] EvalsReadError),
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Busy(#[from] RunBusy),
}

/// What the run or the command refuses before any label is written: a
/// split that is not there or not annotatable, labels written with other
/// settings, or an option this kind of annotation cannot take.
#[derive(Debug, Error)]
pub enum Refusal {
    #[error("run {} has no boards yet; run `chessbench ingest` first", .0.display())]
    NoSplits(PathBuf),
    #[error("run has no split {split:?} (it has: {available})")]
    UnknownSplit { split: String, available: String },
    #[error(
        "split {0} was imported from ChessBench .bag files and already has its values; re-ingest it from PGN to annotate it here"
    )]
    Imported(String),
    #[error(
        "split {split}: its {label} labels were written with other settings ({existing}); now: {now}. Resume with the same settings (and file), or pass --overwrite to write that source's labels afresh (other sources' labels stay)"
    )]
    SettingsChanged {
        split: String,
        label: Source,
        existing: String,
        now: String,
    },
    #[error(
        "split {split}: its boards were re-ingested after annotation started; pass --overwrite to annotate them afresh"
    )]
    BoardsChanged { split: String },
    #[error("--overwrite deletes every shard's work; run it unsharded, not as shard {0}")]
    OverwriteSharded(String),
    #[error(
        "annotate --evals reads the whole evaluation database for every board at once; run it unsharded, not as shard {0}"
    )]
    EvalsSharded(String),
    #[error(
        "split {0}: Stockfish's annotation left the boards these labels cover to them (--only-missing); replacing the labels would leave those boards without values. Start Stockfish's annotation over first, searching every board (`annotate --overwrite` without --only-missing), or give the same file to resume"
    )]
    EvalsRelied(String),
}

/// Another process holds what this one would write: it stops before
/// writing anything.
#[derive(Debug, Error)]
pub enum RunBusy {
    #[error(
        "{}: shard {shard} is already being annotated by another process (a job submitted twice, or a task still running on a node thought dead); this one stops without writing anything",
        path.display()
    )]
    ShardBusy { path: PathBuf, shard: String },
    #[error(
        "{}: another process is annotating this run {}; this one ({mine}) stops without writing anything. Shards of different counts overlap: wait for that job to finish, or cancel it, and submit with one shard count",
        path.display(),
        if *running == 1 { "unsharded".to_string() } else { format!("as one of {running} shards") }
    )]
    ShardCountBusy {
        path: PathBuf,
        running: u32,
        mine: String,
    },
    #[error(
        "{}: another process holds the evaluation database's labels of this run ({}); wait for it to finish",
        path.display(),
        if *writing { "Stockfish shards with --only-missing are reading them" } else { "`annotate --evals` is writing them" }
    )]
    EvalsBusy {
        path: PathBuf,
        /// This process wants to write them (and readers hold them).
        writing: bool,
    },
}

/// A pass over the Lichess evaluation database that could not go on: the
/// input itself failed.
#[derive(Debug, Error)]
pub enum EvalsReadError {
    #[error("cannot read the evaluation database {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "the run's {boards} boards need {passes} passes over the evaluation database within the memory limit, and standard input can be read only once: give the file's path, or raise --memory-limit"
    )]
    OnePass { boards: u64, passes: u64 },
}
