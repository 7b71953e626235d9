//! The worker pool: a reader streams boards out of the `boards` table, one
//! engine per worker annotates them (restarting crashed or hung engines with
//! backoff), and the collector commits each chunk as soon as its last board
//! is in. Workers never wait for a chunk to finish, so engines stay busy
//! until the last board.

use std::{
    collections::HashMap,
    fs::File,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use arrow_array::{Array, StringArray, UInt8Array, UInt64Array};
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use parquet::arrow::{
    ProjectionMask,
    arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector},
};

use super::{
    error::AnnotateError,
    rows::{ChunkWork, Failure, Outcome},
};
use crate::{
    chess::legal,
    store::writer::{BOARDS_PER_PART, part_file_name},
    uci_client::{
        Engine, EngineConfig, EngineError,
        oracle::{self, SearchSettings, Work},
    },
};

/// A split's share of the work.
#[derive(Debug, Clone)]
pub(super) struct SplitWork {
    pub name: String,
    pub boards_dir: PathBuf,
    /// Boards in scope (ids `0..n`).
    pub boards: u64,
    /// Chunks to annotate, ascending.
    pub chunks: Vec<u64>,
    /// Board ids not to search (labelled by the evaluation database),
    /// sorted.
    pub skip: Vec<u64>,
}

/// How many of the sorted ids `skip` fall in `[start, end)`.
pub(super) fn skipped(skip: &[u64], start: u64, end: u64) -> u64 {
    (skip.partition_point(|&id| id < end) - skip.partition_point(|&id| id < start)) as u64
}

pub(super) struct Job {
    split: usize,
    chunk: u64,
    board_id: u64,
    fen: String,
    legal_moves: u8,
}

pub(super) enum Msg {
    ChunkStart {
        split: usize,
        chunk: u64,
        first_board: u64,
        boards: usize,
    },
    Board {
        split: usize,
        chunk: u64,
        board_id: u64,
        outcome: Outcome,
        work: Work,
    },
    Fatal(AnnotateError),
}

/// Chunk `chunk`'s board ids in a split of `n` boards.
pub(super) fn chunk_range(chunk: u64, chunk_boards: u64, n: u64) -> (u64, u64) {
    let start = chunk * chunk_boards;
    (start, (start + chunk_boards).min(n))
}

fn corrupt(path: &std::path::Path, message: impl Into<String>) -> AnnotateError {
    AnnotateError::Boards {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// Streams the boards of `work`'s chunks into `jobs`, announcing each chunk
/// to the collector first.
pub(super) fn read_boards(
    work: &[SplitWork],
    chunk_boards: u64,
    jobs: &Sender<Job>,
    msgs: &Sender<Msg>,
    cancel: &AtomicBool,
) -> Result<(), AnnotateError> {
    for (si, split) in work.iter().enumerate() {
        let mut i = 0;
        while i < split.chunks.len() {
            let part = split.chunks[i] * chunk_boards / BOARDS_PER_PART;
            let mut j = i;
            while j < split.chunks.len() && split.chunks[j] * chunk_boards / BOARDS_PER_PART == part
            {
                j += 1;
            }
            let chunks = &split.chunks[i..j];
            i = j;
            let path = split.boards_dir.join(part_file_name(part));
            let file = File::open(&path).map_err(|e| corrupt(&path, e.to_string()))?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| corrupt(&path, e.to_string()))?;
            let schema = builder.parquet_schema();
            let index = |name: &str| {
                builder
                    .schema()
                    .index_of(name)
                    .map_err(|_| corrupt(&path, format!("no column {name}")))
            };
            let cols = [index("board_id")?, index("fen")?, index("num_legal_moves")?];
            let mask = ProjectionMask::roots(schema, cols);
            let part_start = part * BOARDS_PER_PART;
            let mut selectors = Vec::new();
            let mut at = part_start;
            let mut ranges = Vec::new();
            for &c in chunks {
                let (start, end) = chunk_range(c, chunk_boards, split.boards);
                if start > at {
                    selectors.push(RowSelector::skip((start - at) as usize));
                }
                selectors.push(RowSelector::select((end - start) as usize));
                at = end;
                ranges.push((c, start, end));
            }
            let reader = builder
                .with_projection(mask)
                .with_row_selection(RowSelection::from(selectors))
                .with_batch_size(chunk_boards.clamp(1024, 65536) as usize)
                .build()
                .map_err(|e| corrupt(&path, e.to_string()))?;
            let mut ranges = ranges.into_iter();
            let mut current: Option<(u64, u64, u64)> = None; // chunk, next id, end
            for batch in reader {
                let batch = batch.map_err(|e| corrupt(&path, e.to_string()))?;
                let ids = batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .ok_or_else(|| corrupt(&path, "board_id is not uint64"))?;
                let fens = batch
                    .column(1)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(|| corrupt(&path, "fen is not a string"))?;
                let nmoves = batch
                    .column(2)
                    .as_any()
                    .downcast_ref::<UInt8Array>()
                    .ok_or_else(|| corrupt(&path, "num_legal_moves is not uint8"))?;
                for row in 0..batch.num_rows() {
                    if cancel.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    if current.is_none_or(|(_, next, end)| next == end) {
                        let (c, start, end) = ranges
                            .next()
                            .ok_or_else(|| corrupt(&path, "more rows than selected"))?;
                        let _ = msgs.send(Msg::ChunkStart {
                            split: si,
                            chunk: c,
                            first_board: start,
                            boards: (end - start - skipped(&split.skip, start, end)) as usize,
                        });
                        current = Some((c, start, end));
                    }
                    let Some((c, next, end)) = current else {
                        continue;
                    };
                    let id = ids.value(row);
                    if id != next || fens.is_null(row) {
                        return Err(corrupt(
                            &path,
                            format!(
                                "expected board_id {next} at this row, found {id}: board ids must be dense (written by chessbench ingest)"
                            ),
                        ));
                    }
                    if split.skip.binary_search(&id).is_ok() {
                        current = Some((c, next + 1, end));
                        continue;
                    }
                    let job = Job {
                        split: si,
                        chunk: c,
                        board_id: id,
                        fen: fens.value(row).to_owned(),
                        legal_moves: nmoves.value(row),
                    };
                    if jobs.send(job).is_err() {
                        return Ok(()); // workers gone: cancelled
                    }
                    current = Some((c, next + 1, end));
                }
            }
            if ranges.next().is_some() || current.is_some_and(|(_, next, end)| next != end) {
                return Err(corrupt(
                    &path,
                    format!(
                        "fewer rows than the manifest's {} boards of split {}",
                        split.boards, split.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Settings shared by the workers.
#[derive(Debug, Clone)]
pub(super) struct WorkerSettings {
    pub engine: EngineConfig,
    pub search: SearchSettings,
    pub max_attempts: u32,
    pub backoff: Duration,
}

/// Engine start failures in a row after which the run stops (the engine
/// itself is broken, not one board).
const MAX_START_FAILURES: u32 = 5;

fn worker(jobs: Receiver<Job>, msgs: Sender<Msg>, s: Arc<WorkerSettings>, cancel: Arc<AtomicBool>) {
    let mut engine: Option<Engine> = None;
    let mut backoff = s.backoff;
    let sleep_backoff = |backoff: &mut Duration| {
        thread::sleep(*backoff);
        *backoff = (*backoff * 2).min(Duration::from_secs(2));
    };
    for job in jobs {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        let prepared = match legal::prepare(&job.fen, Some(usize::from(job.legal_moves))) {
            Ok(p) => p,
            Err(source) => {
                let _ = msgs.send(Msg::Fatal(AnnotateError::Prepare {
                    board_id: job.board_id,
                    source,
                }));
                return;
            }
        };
        let mut work = Work::default();
        let mut attempts = 0;
        let outcome = loop {
            if engine.is_none() {
                let mut failures = 0;
                while engine.is_none() {
                    match Engine::start(&s.engine) {
                        Ok(e) => engine = Some(e),
                        Err(e @ EngineError::Spawn { .. }) => {
                            let _ = msgs.send(Msg::Fatal(AnnotateError::Engine(e)));
                            return;
                        }
                        Err(e) => {
                            failures += 1;
                            if failures >= MAX_START_FAILURES || cancel.load(Ordering::Relaxed) {
                                let _ = msgs.send(Msg::Fatal(AnnotateError::Engine(e)));
                                return;
                            }
                            sleep_backoff(&mut backoff);
                        }
                    }
                }
            }
            let Some(e) = engine.as_mut() else { continue };
            attempts += 1;
            match oracle::annotate(e, &prepared, &s.search, &mut work) {
                Ok(a) => {
                    backoff = s.backoff;
                    break Outcome::Annotated(a);
                }
                Err(err) => {
                    engine = None; // dropping kills the process
                    work.retries += 1;
                    if attempts >= s.max_attempts {
                        break Outcome::Failed(Failure {
                            fen: job.fen.clone(),
                            reason: err.reason(),
                            attempts,
                            detail: err.to_string(),
                        });
                    }
                    sleep_backoff(&mut backoff);
                }
            }
        };
        if msgs
            .send(Msg::Board {
                split: job.split,
                chunk: job.chunk,
                board_id: job.board_id,
                outcome,
                work,
            })
            .is_err()
        {
            break;
        }
    }
    if let Some(e) = engine {
        e.quit();
    }
}

/// A chunk being collected.
struct Pending {
    first_board: u64,
    expected: usize,
    boards: Vec<(u64, Outcome)>,
    work: ChunkWork,
}

/// What the collector hands to the caller per finished chunk.
pub(super) struct FinishedChunk {
    pub split: usize,
    pub chunk: u64,
    pub first_board: u64,
    pub boards: Vec<(u64, Outcome)>,
    pub work: ChunkWork,
}

/// Runs the pool. `on_board` sees every board as it arrives (progress);
/// `on_chunk` commits each complete chunk.
pub(super) fn run(
    work: Vec<SplitWork>,
    chunk_boards: u64,
    workers: usize,
    settings: WorkerSettings,
    mut on_board: impl FnMut(&Outcome, &Work),
    mut on_chunk: impl FnMut(FinishedChunk) -> Result<(), AnnotateError>,
) -> Result<(), AnnotateError> {
    let cancel = Arc::new(AtomicBool::new(false));
    let (job_tx, job_rx) = bounded::<Job>(workers * 8);
    let (msg_tx, msg_rx) = unbounded::<Msg>();
    let settings = Arc::new(settings);
    let mut handles = Vec::new();
    for i in 0..workers {
        let (rx, tx, s, c) = (
            job_rx.clone(),
            msg_tx.clone(),
            Arc::clone(&settings),
            Arc::clone(&cancel),
        );
        handles.push(
            thread::Builder::new()
                .name(format!("cb-annotate-{i}"))
                .spawn(move || worker(rx, tx, s, c))
                .map_err(|e| AnnotateError::Thread(e.to_string()))?,
        );
    }
    drop(job_rx);
    {
        let (tx, c) = (msg_tx.clone(), Arc::clone(&cancel));
        handles.push(
            thread::Builder::new()
                .name("cb-annotate-read".into())
                .spawn(move || {
                    if let Err(e) = read_boards(&work, chunk_boards, &job_tx, &tx, &c) {
                        let _ = tx.send(Msg::Fatal(e));
                    }
                })
                .map_err(|e| AnnotateError::Thread(e.to_string()))?,
        );
    }
    drop(msg_tx);
    let mut pending: HashMap<(usize, u64), Pending> = HashMap::new();
    let mut error: Option<AnnotateError> = None;
    for msg in &msg_rx {
        let result = match msg {
            Msg::ChunkStart {
                split,
                chunk,
                first_board,
                boards,
            } => {
                if boards == 0 {
                    // Every board of the chunk was left to another source:
                    // it commits empty, so a resume does not read it again.
                    on_chunk(FinishedChunk {
                        split,
                        chunk,
                        first_board,
                        boards: Vec::new(),
                        work: ChunkWork::default(),
                    })
                } else {
                    pending.insert(
                        (split, chunk),
                        Pending {
                            first_board,
                            expected: boards,
                            boards: Vec::with_capacity(boards),
                            work: ChunkWork::default(),
                        },
                    );
                    Ok(())
                }
            }
            Msg::Board {
                split,
                chunk,
                board_id,
                outcome,
                work,
            } => {
                on_board(&outcome, &work);
                let Some(p) = pending.get_mut(&(split, chunk)) else {
                    continue;
                };
                p.boards.push((board_id, outcome));
                p.work.searches += work.searches;
                p.work.search_seconds += work.search_time.as_secs_f64();
                p.work.fallbacks += work.fallbacks;
                if p.boards.len() == p.expected
                    && let Some(mut p) = pending.remove(&(split, chunk))
                {
                    p.boards.sort_unstable_by_key(|b| b.0);
                    on_chunk(FinishedChunk {
                        split,
                        chunk,
                        first_board: p.first_board,
                        boards: p.boards,
                        work: p.work,
                    })
                } else {
                    Ok(())
                }
            }
            Msg::Fatal(e) => Err(e),
        };
        if let Err(e) = result {
            cancel.store(true, Ordering::Relaxed);
            error.get_or_insert(e);
        }
    }
    for h in handles {
        let _ = h.join();
    }
    if let Some(e) = error {
        return Err(e);
    }
    if !pending.is_empty() {
        return Err(AnnotateError::Thread(format!(
            "{} chunk(s) left incomplete",
            pending.len()
        )));
    }
    Ok(())
}
