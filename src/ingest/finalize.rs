//! Writes a split's distinct boards as `boards` and `legal_moves` parts.
//!
//! Board ids are assigned here, densely, in order of first occurrence. Part N
//! of both tables covers board ids [N * 2^20, (N + 1) * 2^20); a part's
//! boards are rendered in jobs on every thread and written in order, so the
//! layout does not depend on the thread count.

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use super::{
    IngestError,
    dedup::{BoardStream, Entry, split_first_seen},
    spawn_named,
};
use crate::{
    chess::movegen,
    store::{
        Table,
        legal_moves::LegalMovesWriter,
        writer::{BOARDS_PER_PART, PartWriter, part_file_name},
    },
};
use arrow_array::{
    ArrayRef, RecordBatch,
    builder::{StringBuilder, UInt8Builder, UInt32Builder, UInt64Builder},
};

/// Record counts of a split (Table A1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BoardTotals {
    /// Distinct boards.
    pub state_value: u64,
    /// Distinct boards with a legal move.
    pub behavioral_cloning: u64,
    /// Their legal moves.
    pub action_value: u64,
    /// Occurrences of all boards.
    pub positions: u64,
}

impl std::ops::AddAssign for BoardTotals {
    fn add_assign(&mut self, o: BoardTotals) {
        self.state_value += o.state_value;
        self.behavioral_cloning += o.behavioral_cloning;
        self.action_value += o.action_value;
        self.positions += o.positions;
    }
}

/// Boards rendered per job: the unit the boards are read, rendered and
/// written in (a part is `BOARDS_PER_PART / JOB_BOARDS` jobs, rendered in
/// parallel and written in order).
const JOB_BOARDS: usize = 16 * 1024;

/// Jobs of one part.
const JOBS_PER_PART: usize = (BOARDS_PER_PART as usize) / JOB_BOARDS;

/// Jobs the board reader may have read ahead of the renderers.
const READ_AHEAD_JOBS: usize = JOBS_PER_PART / 4;

/// A job's boards, or why the stream of boards broke off.
type Job = Result<Vec<Entry>, IngestError>;

/// Writes all parts of one split. `done` counts boards written (progress).
/// A thread reads the boards from `stream` (a k-way merge of run files when
/// deduplication spilled) a job at a time, ahead of the renderers; job
/// buffers go back to it, so the boards in memory are a few jobs' (about
/// 1 MB each), not whole parts.
pub(crate) fn write_split(
    stream: BoardStream,
    boards_dir: &Path,
    moves_dir: &Path,
    threads: usize,
    done: &Arc<AtomicU64>,
) -> Result<BoardTotals, IngestError> {
    let threads = threads.max(1);
    std::thread::scope(|scope| {
        // The reader may run a quarter of a part (~15 MB) ahead of the
        // renderers, riding out the moments the others have the cores.
        let (tx, rx) = crossbeam_channel::bounded::<Job>(READ_AHEAD_JOBS);
        let (back_tx, back_rx) =
            crossbeam_channel::bounded::<Vec<Entry>>(READ_AHEAD_JOBS + threads * 2 + 2);
        let reader = spawn_named(scope, "cb-boards-read", move || {
            let mut stream = stream;
            loop {
                let mut job = back_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(JOB_BOARDS));
                job.clear();
                for entry in stream.by_ref() {
                    match entry {
                        Ok(e) => job.push(e),
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                    if job.len() == JOB_BOARDS {
                        break;
                    }
                }
                let last = job.len() < JOB_BOARDS;
                if job.is_empty() || tx.send(Ok(job)).is_err() || last {
                    return;
                }
            }
        });
        let mut jobs = rx.into_iter().peekable();
        let mut totals = BoardTotals::default();
        let mut result = Ok(());
        // An empty split still gets part 0 (empty files).
        for part in 0.. {
            let part_jobs = jobs.by_ref().take(JOBS_PER_PART);
            match write_part(
                part, part_jobs, &back_tx, boards_dir, moves_dir, threads, done,
            ) {
                Ok(t) => totals += t,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            if jobs.peek().is_none() {
                break;
            }
        }
        drop(jobs); // the receiver: stops the reader if a part failed
        if reader.join().is_err() && result.is_ok() {
            result = Err(IngestError::Internal("board reader thread panicked".into()));
        }
        result.map(|()| totals)
    })
}

/// Legal moves of consecutive boards: `counts[i]` actions of board
/// `first_id + i`, concatenated in `actions`.
struct MovesChunk {
    first_id: u64,
    counts: Vec<u8>,
    actions: Vec<u16>,
}

/// Calls `f` on items numbered 0, 1, 2, ... in that order, whatever order
/// they arrive in from the render threads.
fn in_order<T>(
    items: crossbeam_channel::Receiver<(usize, T)>,
    mut f: impl FnMut(T) -> Result<(), IngestError>,
) -> Result<(), IngestError> {
    let mut pending = std::collections::BTreeMap::new();
    let mut next = 0usize;
    for (i, item) in items {
        pending.insert(i, item);
        while let Some(item) = pending.remove(&next) {
            f(item)?;
            next += 1;
        }
    }
    Ok(())
}

/// In-order writer for a `legal_moves` part, fed from several threads.
fn ordered_moves_writer(
    path: &Path,
    chunks: crossbeam_channel::Receiver<(usize, MovesChunk)>,
) -> Result<(), IngestError> {
    let mut out = LegalMovesWriter::create(path)?;
    in_order(chunks, |chunk| {
        let mut at = 0usize;
        for (j, &n) in chunk.counts.iter().enumerate() {
            let n = usize::from(n);
            out.push(chunk.first_id + j as u64, &chunk.actions[at..at + n])?;
            at += n;
        }
        Ok(())
    })?;
    out.finish()?;
    Ok(())
}

/// In-order writer for one table's part file, fed from several threads.
fn ordered_writer(
    path: &Path,
    table: Table,
    batches: crossbeam_channel::Receiver<(usize, RecordBatch)>,
) -> Result<(), IngestError> {
    let mut out = PartWriter::create(path, table)?;
    in_order(batches, |batch| Ok(out.write(&batch)?))?;
    if out.rows() == 0 {
        out.write(&RecordBatch::new_empty(table.schema()))?;
    }
    out.finish()?;
    Ok(())
}

/// Renders and writes part `part` from its jobs (boards with ids
/// part * 2^20 + i, every job but the split's last one full), handing each
/// job's buffer back through `back` once rendered.
fn write_part(
    part: u64,
    jobs: impl Iterator<Item = Job>,
    back: &crossbeam_channel::Sender<Vec<Entry>>,
    boards_dir: &Path,
    moves_dir: &Path,
    threads: usize,
    done: &AtomicU64,
) -> Result<BoardTotals, IngestError> {
    let name = part_file_name(part);
    let base = part * BOARDS_PER_PART;
    std::thread::scope(|scope| {
        let (job_tx, job_rx) = crossbeam_channel::bounded::<(usize, Vec<Entry>)>(threads);
        let (b_tx, b_rx) = crossbeam_channel::bounded::<(usize, RecordBatch)>(threads * 2);
        let (m_tx, m_rx) = crossbeam_channel::bounded::<(usize, MovesChunk)>(threads * 2);
        let boards_path = boards_dir.join(&name);
        let moves_path = moves_dir.join(&name);
        let boards_writer = spawn_named(scope, "cb-write-boards", move || {
            ordered_writer(&boards_path, Table::Boards, b_rx)
        });
        let moves_writer = spawn_named(scope, "cb-write-moves", move || {
            ordered_moves_writer(&moves_path, m_rx)
        });
        let renderers: Vec<_> = (0..threads)
            .map(|r| {
                let (job_rx, b_tx, m_tx) = (job_rx.clone(), b_tx.clone(), m_tx.clone());
                spawn_named(
                    scope,
                    &format!("cb-render-{r}"),
                    move || -> Result<BoardTotals, IngestError> {
                        let mut totals = BoardTotals::default();
                        for (i, job) in job_rx {
                            let first_id = base + (i * JOB_BOARDS) as u64;
                            let (boards, moves, t) = render(first_id, &job)?;
                            totals += t;
                            done.fetch_add(job.len() as u64, Ordering::Relaxed);
                            let _ = back.try_send(job);
                            if b_tx.send((i, boards)).is_err() || m_tx.send((i, moves)).is_err() {
                                break; // a writer failed; its error is reported below
                            }
                        }
                        Ok(totals)
                    },
                )
            })
            .collect();
        drop((job_rx, b_tx, m_tx));
        let mut first_err = None;
        for (i, job) in jobs.enumerate() {
            match job {
                Ok(job) => {
                    if job_tx.send((i, job)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        drop(job_tx);
        let mut totals = BoardTotals::default();
        let panicked = || IngestError::Internal("board writer thread panicked".into());
        for r in renderers {
            match r.join().unwrap_or_else(|_| Err(panicked())) {
                Ok(t) => totals += t,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        for w in [boards_writer, moves_writer] {
            if let Err(e) = w.join().unwrap_or_else(|_| Err(panicked())) {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(totals),
        }
    })
}

struct BoardColumns {
    board_id: UInt64Builder,
    fen: StringBuilder,
    side: StringBuilder,
    occurrences: UInt64Builder,
    legal: UInt8Builder,
    terminal: StringBuilder,
    first_game_no: UInt64Builder,
    first_ply: UInt32Builder,
    rows: usize,
}

impl BoardColumns {
    fn new(n: usize) -> BoardColumns {
        BoardColumns {
            board_id: UInt64Builder::with_capacity(n),
            fen: StringBuilder::with_capacity(n, n * 64),
            side: StringBuilder::with_capacity(n, n),
            occurrences: UInt64Builder::with_capacity(n),
            legal: UInt8Builder::with_capacity(n),
            terminal: StringBuilder::with_capacity(n, n * 4),
            first_game_no: UInt64Builder::with_capacity(n),
            first_ply: UInt32Builder::with_capacity(n),
            rows: 0,
        }
    }

    fn finish(&mut self) -> Result<RecordBatch, IngestError> {
        self.rows = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.board_id.finish()),
            Arc::new(self.fen.finish()),
            Arc::new(self.side.finish()),
            Arc::new(self.occurrences.finish()),
            Arc::new(self.legal.finish()),
            Arc::new(self.terminal.finish()),
            Arc::new(self.first_game_no.finish()),
            Arc::new(self.first_ply.finish()),
        ];
        RecordBatch::try_new(Table::Boards.schema(), columns)
            .map_err(|e| IngestError::Internal(format!("boards batch: {e}")))
    }
}

/// Renders boards `first_id..` into a boards batch and their legal moves.
fn render(
    first_id: u64,
    entries: &[Entry],
) -> Result<(RecordBatch, MovesChunk, BoardTotals), IngestError> {
    let mut b = BoardColumns::new(entries.len());
    let mut m = MovesChunk {
        first_id,
        counts: Vec::with_capacity(entries.len()),
        actions: Vec::with_capacity(entries.len() * 32),
    };
    let mut totals = BoardTotals::default();
    let mut fen = String::with_capacity(96);
    for (i, e) in entries.iter().enumerate() {
        let id = first_id + i as u64;
        fen.clear();
        e.key.write_fen(&mut fen);
        // The ~30 legal actions, in action order, straight from the key.
        let before = m.actions.len();
        let in_check = movegen::legal_actions(&e.key, &mut m.actions).map_err(|err| {
            IngestError::Internal(format!("board {id} ({fen}) cannot be rebuilt: {err}"))
        })?;
        let actions = &m.actions[before..];
        let terminal = match (actions.is_empty(), in_check) {
            (false, _) => "none",
            (true, true) => "checkmate",
            (true, false) => "stalemate",
        };
        let (first_game_no, first_ply) = split_first_seen(e.first);
        b.board_id.append_value(id);
        b.fen.append_value(&fen);
        b.side
            .append_value(if e.key.turn().is_white() { "w" } else { "b" });
        b.occurrences.append_value(e.count);
        b.legal.append_value(actions.len() as u8);
        b.terminal.append_value(terminal);
        b.first_game_no.append_value(first_game_no);
        b.first_ply.append_value(first_ply);
        b.rows += 1;
        m.counts.push(actions.len() as u8);
        totals.state_value += 1;
        totals.behavioral_cloning += u64::from(!actions.is_empty());
        totals.action_value += actions.len() as u64;
        totals.positions += e.count;
    }
    Ok((b.finish()?, m, totals))
}
