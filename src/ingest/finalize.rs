//! Writes a split's distinct boards as `boards` and `legal_moves` parts.
//!
//! Board ids are assigned here, densely, in order of first occurrence. Part N
//! of both tables covers board ids [N * 2^20, (N + 1) * 2^20).
//!
//! The work is cut into chunks of one `boards` row group (128Ki boards, 8 a
//! part). The calling thread reads the boards (a merge by first occurrence)
//! a chunk at a time; each chunk is rendered (FEN, legal moves in action
//! order) and its `boards` row group encoded and compressed as a task on a
//! pool of `threads` threads. Each part's files are assembled in order as
//! chunks finish: its `boards` row groups appended, its legal moves cut into
//! row groups of 2^20 rows whose encoding is again a task on the pool, and
//! appended in order. Several parts are in flight at once, each file written
//! by whichever thread finishes the piece it waits for, so no one thread
//! encodes or writes a whole table. Every row group is cut where a writer
//! fed one board after another would cut it, and encoded by the same
//! column writers, so the files are the same bytes whatever the thread
//! count.
//!
//! Memory: at most a few chunks more than there are threads are between
//! the reader and their part's files, and fewer threads work than `--jobs`
//! asks for when the memory limit leaves too little room ([`sizing`]).

use std::{
    collections::{BTreeMap, VecDeque},
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use super::{
    dedup::{Entry, split_first_seen},
    error::IngestError,
};
use crate::{
    chess::movegen,
    store::{
        Table,
        boards::{BoardRow, BoardRows, Seen, Terminal},
        legal_moves::{self, Encode, LegalMovesWriter},
        writer::{
            BOARDS_PER_PART, BOARDS_ROW_GROUP_ROWS, RowGroupEncoder, RowGroupFile, part_file_name,
        },
    },
};
use arrow_array::RecordBatch;

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

/// Where the files are cut: boards a chunk (the unit of work: one `boards`
/// row group), chunks a part, rows a `legal_moves` row group. Ingest uses
/// [`Layout::TABLES`]; tests cut smaller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub chunk_boards: usize,
    pub chunks_per_part: usize,
    pub moves_rows: usize,
}

impl Layout {
    /// The tables' layout: parts of 2^20 boards in row groups of 128Ki, and
    /// `legal_moves` row groups of 2^20 rows.
    pub(crate) const TABLES: Layout = Layout {
        chunk_boards: BOARDS_ROW_GROUP_ROWS,
        chunks_per_part: BOARDS_PER_PART as usize / BOARDS_ROW_GROUP_ROWS,
        moves_rows: legal_moves::ROW_GROUP_ROWS,
    };

    fn part_boards(&self) -> u64 {
        (self.chunk_boards * self.chunks_per_part) as u64
    }
}

const _: () = assert!(
    Layout::TABLES.chunk_boards * Layout::TABLES.chunks_per_part == BOARDS_PER_PART as usize
);

/// Memory a thread of the boards phase adds: the chunk it works on (56
/// bytes a board until it is rendered, then ~30 bytes of encoded row group
/// and ~64 of legal moves until its part takes them), the batch it renders and the row group it encodes,
/// a `legal_moves` row group's board ids and pages, and what its malloc
/// arena keeps of them between tasks; sized from the peak memory measured
/// from 2 to 16 threads (docs/benchmarks.md#constants).
const THREAD_BYTES: u64 = 48 << 20;

/// Threads and chunks in flight for the boards phase, given `threads`
/// (`--jobs`) and `room`: the bytes it may use beyond what
/// [`PIPELINE_FLOOR`] covers (the limit less the floor and whatever else is
/// still held: the boards of a split kept in memory, or its run files'
/// buffers). The floor covers two threads; each further one needs
/// [`THREAD_BYTES`]. Chunks in flight are two more than the threads, so
/// that the reader stays ahead.
///
/// [`PIPELINE_FLOOR`]: super::dedup::PIPELINE_FLOOR
pub(crate) fn sizing(threads: usize, room: u64) -> (usize, usize) {
    let fits = (room / THREAD_BYTES).min(1 << 16) as usize;
    let threads = threads.clamp(1, 2 + fits);
    (threads, threads + 2)
}

/// What the tasks of a split share: the first error (after which every
/// task returns at once) and the running totals.
struct Shared<'a> {
    failed: AtomicBool,
    error: Mutex<Option<IngestError>>,
    totals: Mutex<BoardTotals>,
    done: &'a AtomicU64,
    /// Chunk buffers; a chunk takes one from the reader until its part has
    /// taken it, so at most as many chunks are in flight as there are
    /// buffers.
    free: crossbeam_channel::Sender<Vec<Entry>>,
}

impl Shared<'_> {
    fn fail(&self, e: IngestError) {
        self.failed.store(true, Ordering::Release);
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(e);
        }
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Runs a task, turning its error or panic into the split's error.
    fn run(&self, task: impl FnOnce() -> Result<(), IngestError>) {
        if self.failed() {
            return;
        }
        match std::panic::catch_unwind(AssertUnwindSafe(task)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.fail(e),
            Err(_) => self.fail(IngestError::Internal(
                "a thread writing boards panicked".into(),
            )),
        }
    }
}

/// Writes all parts of one split with `threads` threads and at most
/// `in_flight` chunks in memory ([`sizing`]). `done` counts boards
/// rendered (progress).
pub(crate) fn write_split(
    mut stream: impl Iterator<Item = Result<Entry, IngestError>>,
    layout: Layout,
    boards_dir: &Path,
    moves_dir: &Path,
    threads: usize,
    in_flight: usize,
    done: &AtomicU64,
) -> Result<BoardTotals, IngestError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("cb-boards-{i}"))
        .build()
        .map_err(|e| IngestError::Internal(format!("board writer threads: {e}")))?;
    let in_flight = in_flight.max(1);
    let (free_tx, free_rx) = crossbeam_channel::bounded::<Vec<Entry>>(in_flight);
    for _ in 0..in_flight {
        let _ = free_tx.send(Vec::new());
    }
    let shared = Shared {
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        totals: Mutex::new(BoardTotals::default()),
        done,
        free: free_tx,
    };
    let mut parts: Vec<Arc<Part>> = Vec::new();
    pool.in_place_scope(|scope| {
        let shared = &shared;
        let mut part: Option<Arc<Part>> = None;
        // Chunks sent to the current part so far.
        let mut chunks_in_part = 0usize;
        for chunk_no in 0usize.. {
            // A buffer: waits while the tasks have `in_flight` chunks.
            let mut buffer = loop {
                match free_rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(b) => break Some(b),
                    Err(_) if shared.failed() => break None,
                    Err(_) => {}
                }
            };
            let Some(mut chunk) = buffer.take() else {
                break;
            };
            chunk.clear();
            chunk.reserve(layout.chunk_boards);
            for entry in stream.by_ref() {
                match entry {
                    Ok(e) => chunk.push(e),
                    Err(e) => {
                        shared.fail(e);
                        break;
                    }
                }
                if chunk.len() == layout.chunk_boards {
                    break;
                }
            }
            if shared.failed() {
                break;
            }
            let (index, in_part) = (
                chunk_no / layout.chunks_per_part,
                chunk_no % layout.chunks_per_part,
            );
            // An empty split still gets part 0 (empty files).
            if chunk.is_empty() && chunk_no > 0 {
                let _ = shared.free.send(chunk);
                break;
            }
            if in_part == 0 {
                if let Some(done) = part.take() {
                    done.close(chunks_in_part, shared, scope);
                }
                chunks_in_part = 0;
                match Part::create(index as u64, layout, boards_dir, moves_dir) {
                    Ok(p) => {
                        let p = Arc::new(p);
                        parts.push(Arc::clone(&p));
                        part = Some(p);
                    }
                    Err(e) => {
                        shared.fail(e);
                        break;
                    }
                }
            }
            let Some(this) = part.clone() else { break };
            if chunk.is_empty() {
                let _ = shared.free.send(chunk);
                this.close(0, shared, scope);
                part = None;
                break;
            }
            let last = chunk.len() < layout.chunk_boards;
            chunks_in_part += 1;
            scope.spawn(move |scope| {
                shared.run(|| {
                    let first_id =
                        this.index * layout.part_boards() + (in_part * layout.chunk_boards) as u64;
                    let (boards, moves) = render_chunk(&this, in_part, first_id, &chunk, shared)?;
                    let rendered = Rendered {
                        boards,
                        moves,
                        buffer: chunk,
                    };
                    this.take(Piece::Chunk(in_part, rendered), shared, scope)
                });
            });
            if last {
                break;
            }
        }
        // The stream ended: in a short chunk, or at a chunk's end.
        if let Some(p) = part.take()
            && !shared.failed()
        {
            p.close(chunks_in_part, shared, scope);
        }
    });
    drop(pool);
    if let Some(e) = shared.error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    if let Some(p) = parts.iter().find(|p| !p.finished()) {
        return Err(IngestError::Internal(format!(
            "part {} of {} was not finished",
            p.index,
            boards_dir.display()
        )));
    }
    let totals = *shared
        .totals
        .lock()
        .map_err(|_| IngestError::Internal("board totals poisoned".into()))?;
    Ok(totals)
}

/// Boards rendered at a time within a chunk, and written to its row group
/// as one batch (as a writer fed part by part in these batches would).
const RENDER_BOARDS: usize = 16 * 1024;

/// Renders a chunk (boards `first_id..`) and encodes its `boards` row
/// group, [`RENDER_BOARDS`] at a time; returns the row group and the legal
/// moves.
fn render_chunk(
    part: &Part,
    in_part: usize,
    first_id: u64,
    entries: &[Entry],
    shared: &Shared<'_>,
) -> Result<(crate::store::writer::EncodedRowGroup, MovesChunk), IngestError> {
    let mut moves = MovesChunk {
        first_id,
        counts: Vec::with_capacity(entries.len()),
        actions: Vec::with_capacity(entries.len() * 32),
    };
    let mut group = part
        .encoder
        .begin(in_part)
        .map_err(|e| part.parquet_err(e))?;
    let mut totals = BoardTotals::default();
    for (i, boards) in entries.chunks(RENDER_BOARDS).enumerate() {
        let (batch, t) = render(first_id + (i * RENDER_BOARDS) as u64, boards, &mut moves)?;
        group.write(&batch).map_err(|e| part.parquet_err(e))?;
        totals += t;
        shared
            .done
            .fetch_add(boards.len() as u64, Ordering::Relaxed);
    }
    let group = group.finish().map_err(|e| part.parquet_err(e))?;
    if let Ok(mut t) = shared.totals.lock() {
        *t += totals;
    }
    Ok((group, moves))
}

/// A chunk rendered, waiting to be taken by its part in order.
struct Rendered {
    boards: crate::store::writer::EncodedRowGroup,
    moves: MovesChunk,
    buffer: Vec<Entry>,
}

/// What a part's tasks hand it: a rendered chunk, or an encoded
/// `legal_moves` row group, each with its number in the part.
enum Piece {
    Chunk(usize, Rendered),
    Moves(usize, Box<legal_moves::EncodedMovesGroup>),
}

/// Legal moves of consecutive boards: `counts[i]` actions of board
/// `first_id + i`, concatenated in `actions`.
struct MovesChunk {
    first_id: u64,
    counts: Vec<u8>,
    actions: Vec<u16>,
}

/// Legal moves cut for one `legal_moves` row group: the actions, and the
/// boards they belong to as (board id, actions) runs.
struct MovesGroup {
    boards: Vec<(u64, u32)>,
    actions: Vec<u16>,
}

impl MovesGroup {
    fn new(rows: usize) -> MovesGroup {
        MovesGroup {
            boards: Vec::new(),
            actions: Vec::with_capacity(rows),
        }
    }

    /// The board id of every row.
    fn ids(&self) -> Vec<u64> {
        let mut ids = Vec::with_capacity(self.actions.len());
        for &(id, n) in &self.boards {
            ids.extend(std::iter::repeat_n(id, n as usize));
        }
        ids
    }
}

/// One part's two files, assembled in order from chunks finishing in any
/// order.
struct Part {
    index: u64,
    layout: Layout,
    encoder: RowGroupEncoder,
    moves_columns: [parquet::schema::types::ColumnDescPtr; 3],
    boards_path: PathBuf,
    sink: Mutex<PartSink>,
}

struct PartSink {
    boards: Option<RowGroupFile>,
    moves: Option<LegalMovesWriter>,
    /// Chunks of the part, once the reader knows.
    chunks: Option<usize>,
    /// The next chunk to take, and those rendered ahead of it.
    next_chunk: usize,
    ready: BTreeMap<usize, Rendered>,
    /// Legal moves not yet cut into a row group.
    group: MovesGroup,
    /// `legal_moves` row groups cut, the next to append, and those encoded
    /// ahead of it.
    groups_cut: usize,
    next_group: usize,
    encoded: BTreeMap<usize, legal_moves::EncodedMovesGroup>,
    /// The last row group is cut (every chunk taken).
    all_cut: bool,
    /// Buffers of chunks taken, each back to the reader once this many
    /// `legal_moves` row groups are appended.
    holding: VecDeque<(usize, Vec<Entry>)>,
    finished: bool,
}

impl Part {
    fn create(
        index: u64,
        layout: Layout,
        boards_dir: &Path,
        moves_dir: &Path,
    ) -> Result<Part, IngestError> {
        let name = part_file_name(index);
        let boards_path = boards_dir.join(&name);
        let boards = RowGroupFile::create(&boards_path, Table::Boards)?;
        let moves = LegalMovesWriter::create(&moves_dir.join(&name))?;
        Ok(Part {
            index,
            layout,
            encoder: boards.encoder(),
            moves_columns: moves.columns(),
            boards_path,
            sink: Mutex::new(PartSink {
                boards: Some(boards),
                moves: Some(moves),
                chunks: None,
                next_chunk: 0,
                ready: BTreeMap::new(),
                group: MovesGroup::new(layout.moves_rows),
                groups_cut: 0,
                next_group: 0,
                encoded: BTreeMap::new(),
                all_cut: false,
                holding: VecDeque::new(),
                finished: false,
            }),
        })
    }

    fn parquet_err(&self, e: parquet::errors::ParquetError) -> IngestError {
        crate::store::StoreError::parquet(&self.boards_path, e).into()
    }

    fn finished(&self) -> bool {
        self.sink.lock().map(|s| s.finished).unwrap_or(false)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, PartSink>, IngestError> {
        self.sink
            .lock()
            .map_err(|_| IngestError::Internal(format!("part {} poisoned", self.index)))
    }

    /// The reader's word that the part has `chunks` chunks.
    fn close<'s>(self: Arc<Self>, chunks: usize, shared: &'s Shared<'s>, scope: &rayon::Scope<'s>)
    where
        Self: 's,
    {
        let part = Arc::clone(&self);
        shared.run(move || {
            let mut sink = part.lock()?;
            sink.chunks = Some(chunks);
            part.advance(&mut sink, shared, scope)
        });
    }

    /// A rendered chunk or an encoded `legal_moves` row group for the
    /// part, taken now or when those before it are.
    fn take<'s>(
        self: &Arc<Self>,
        piece: Piece,
        shared: &'s Shared<'s>,
        scope: &rayon::Scope<'s>,
    ) -> Result<(), IngestError>
    where
        Self: 's,
    {
        let mut sink = self.lock()?;
        match piece {
            Piece::Chunk(i, chunk) => sink.ready.insert(i, chunk).is_none(),
            Piece::Moves(i, group) => sink.encoded.insert(i, *group).is_none(),
        };
        self.advance(&mut sink, shared, scope)
    }

    /// Takes what is ready in order: chunks (their `boards` row group
    /// appended, their legal moves cut into row groups sent to be encoded)
    /// and encoded `legal_moves` row groups; finishes both files once all is
    /// appended.
    fn advance<'s>(
        self: &Arc<Self>,
        sink: &mut PartSink,
        shared: &'s Shared<'s>,
        scope: &rayon::Scope<'s>,
    ) -> Result<(), IngestError>
    where
        Self: 's,
    {
        while let Some(chunk) = sink.ready.remove(&sink.next_chunk) {
            sink.next_chunk += 1;
            let Rendered {
                boards,
                moves,
                buffer,
            } = chunk;
            let file = sink.boards.as_mut().ok_or_else(|| self.closed())?;
            debug_assert_eq!(file.groups() + 1, sink.next_chunk);
            file.append(boards)?;
            // The buffer goes back to the reader: the chunk is no longer in
            // flight once its moves are cut below.
            let mut at = 0usize;
            for (i, &n) in moves.counts.iter().enumerate() {
                let id = moves.first_id + i as u64;
                let mut rest = &moves.actions[at..at + usize::from(n)];
                at += usize::from(n);
                while !rest.is_empty() {
                    let room = self.layout.moves_rows - sink.group.actions.len();
                    let (now, later) = rest.split_at(room.min(rest.len()));
                    sink.group.boards.push((id, now.len() as u32));
                    sink.group.actions.extend_from_slice(now);
                    if sink.group.actions.len() == self.layout.moves_rows {
                        self.cut(sink, shared, scope);
                    }
                    rest = later;
                }
            }
            // The chunk stays in flight until the row groups holding its
            // moves (all but those still gathering) are appended.
            sink.holding.push_back((sink.groups_cut, buffer));
        }
        if !sink.all_cut && sink.chunks == Some(sink.next_chunk) {
            if !sink.group.actions.is_empty() {
                self.cut(sink, shared, scope);
            }
            sink.all_cut = true;
        }
        while let Some(group) = sink.encoded.remove(&sink.next_group) {
            sink.next_group += 1;
            sink.moves
                .as_mut()
                .ok_or_else(|| self.closed())?
                .append(group)?;
        }
        while let Some((_, buffer)) = sink
            .holding
            .pop_front_if(|(groups, _)| *groups <= sink.next_group)
        {
            let _ = shared.free.send(buffer);
        }
        if sink.all_cut && sink.next_group == sink.groups_cut && !sink.finished {
            let (boards, moves) = (sink.boards.take(), sink.moves.take());
            boards.ok_or_else(|| self.closed())?.finish()?;
            moves.ok_or_else(|| self.closed())?.finish()?;
            sink.finished = true;
        }
        Ok(())
    }

    /// Sends the legal moves gathered so far to be encoded as the next row
    /// group.
    fn cut<'s>(
        self: &Arc<Self>,
        sink: &mut PartSink,
        shared: &'s Shared<'s>,
        scope: &rayon::Scope<'s>,
    ) where
        Self: 's,
    {
        let group = std::mem::replace(&mut sink.group, MovesGroup::new(self.layout.moves_rows));
        let number = sink.groups_cut;
        sink.groups_cut += 1;
        let part = Arc::clone(self);
        scope.spawn(move |scope| {
            shared.run(|| {
                let ids = group.ids();
                let encoded = legal_moves::encode_row_group(
                    &part.moves_columns,
                    &ids,
                    &group.actions,
                    Encode::Serial,
                )
                .map_err(|e| part.parquet_err(e))?;
                drop((ids, group));
                part.take(Piece::Moves(number, Box::new(encoded)), shared, scope)
            });
        });
    }

    fn closed(&self) -> IngestError {
        IngestError::Internal(format!(
            "part {} written to after it was finished",
            self.index
        ))
    }
}

/// Renders boards `first_id..` into a boards batch; their legal moves are
/// appended to `m`.
fn render(
    first_id: u64,
    entries: &[Entry],
    m: &mut MovesChunk,
) -> Result<(RecordBatch, BoardTotals), IngestError> {
    let mut b = BoardRows::with_capacity(entries.len());
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
            (false, _) => Terminal::None,
            (true, true) => Terminal::Checkmate,
            (true, false) => Terminal::Stalemate,
        };
        let (first_game_no, first_ply) = split_first_seen(e.first);
        b.push(BoardRow {
            board_id: id,
            fen: &fen,
            white_to_move: e.key.turn().is_white(),
            legal_moves: actions.len(),
            terminal,
            seen: Some(Seen {
                occurrences: e.count,
                first_game_no,
                first_ply,
            }),
        });
        m.counts.push(actions.len() as u8);
        totals.state_value += 1;
        totals.behavioral_cloning += u64::from(!actions.is_empty());
        totals.action_value += actions.len() as u64;
        totals.positions += e.count;
    }
    let batch = b
        .finish()
        .map_err(|e| IngestError::Internal(format!("boards batch: {e}")))?;
    Ok((batch, totals))
}

#[cfg(test)]
mod tests {
    use std::{collections::HashSet, fs};

    use shakmaty::{Chess, Position};

    use super::*;
    use crate::{chess::BoardKey, store::writer::PartWriter};

    /// `n` distinct boards of pseudo-random games, in order of first
    /// occurrence, some seen more than once.
    fn entries(n: usize) -> Vec<Entry> {
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(n);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for game in 0u64.. {
            let mut pos = Chess::default();
            for ply in 0..80u64 {
                let key = BoardKey::from_position(&pos).unwrap();
                if seen.insert(key) {
                    out.push(Entry {
                        key,
                        first: (game << 16) | ply,
                        count: 1 + next() % 3,
                    });
                    if out.len() == n {
                        return out;
                    }
                }
                let moves = pos.legal_moves();
                if moves.is_empty() {
                    break;
                }
                let m = moves[(next() % moves.len() as u64) as usize];
                pos.play_unchecked(m);
            }
        }
        unreachable!()
    }

    /// Writes `entries` into `dir` (boards/ and moves/); returns the totals.
    fn write(
        dir: &Path,
        entries: &[Entry],
        layout: Layout,
        threads: usize,
        in_flight: usize,
    ) -> Result<BoardTotals, IngestError> {
        let (boards, moves) = (dir.join("boards"), dir.join("moves"));
        fs::create_dir_all(&boards).unwrap();
        fs::create_dir_all(&moves).unwrap();
        let done = AtomicU64::new(0);
        let totals = write_split(
            entries.iter().copied().map(Ok),
            layout,
            &boards,
            &moves,
            threads,
            in_flight,
            &done,
        )?;
        assert_eq!(done.load(Ordering::Relaxed), entries.len() as u64);
        Ok(totals)
    }

    /// Every file under `dir`, by path relative to it, with its bytes.
    fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        for sub in ["boards", "moves"] {
            for f in fs::read_dir(dir.join(sub)).unwrap() {
                let f = f.unwrap().path();
                let name = format!("{sub}/{}", f.file_name().unwrap().to_string_lossy());
                out.insert(name, fs::read(&f).unwrap());
            }
        }
        out
    }

    /// Small parts, chunks and `legal_moves` row groups, so that parts,
    /// chunks, and row groups cutting a board's moves in two all occur.
    const SMALL: Layout = Layout {
        chunk_boards: 300,
        chunks_per_part: 4,
        moves_rows: 2000,
    };

    #[test]
    fn the_files_are_the_same_bytes_whatever_the_threads() {
        let tmp = tempfile::tempdir().unwrap();
        // 4 full parts and a part of 1 full and 1 short chunk.
        let boards = entries(4 * 1200 + 300 + 17);
        let reference = write(&tmp.path().join("one"), &boards, SMALL, 1, 1).unwrap();
        assert_eq!(reference.state_value, boards.len() as u64);
        assert_eq!(
            reference.positions,
            boards.iter().map(|e| e.count).sum::<u64>()
        );
        assert!(reference.action_value > 20 * boards.len() as u64);
        let expected = files(&tmp.path().join("one"));
        assert_eq!(expected.len(), 10, "5 parts of each table");
        for (threads, in_flight) in [(2, 4), (3, 2), (4, 6), (8, 3), (8, 10)] {
            let dir = tmp.path().join(format!("{threads}-{in_flight}"));
            let totals = write(&dir, &boards, SMALL, threads, in_flight).unwrap();
            assert_eq!(totals, reference, "{threads} threads");
            assert!(
                files(&dir) == expected,
                "{threads} threads, {in_flight} chunks in flight: files differ"
            );
        }
    }

    #[test]
    fn a_split_ending_at_a_part_or_chunk_boundary_or_empty_has_its_parts() {
        let tmp = tempfile::tempdir().unwrap();
        // Two full chunks after a full part: the stream ends at a chunk's
        // end inside a part.
        let boards = entries(1200 + 600);
        let totals = write(&tmp.path().join("chunk"), &boards, SMALL, 3, 5).unwrap();
        assert_eq!(totals.state_value, 1800);
        assert_eq!(files(&tmp.path().join("chunk")).len(), 4);
        let boards = entries(2 * 1200);
        write(&tmp.path().join("two"), &boards, SMALL, 3, 5).unwrap();
        let names: Vec<String> = files(&tmp.path().join("two")).into_keys().collect();
        assert_eq!(
            names,
            [
                "boards/part-00000.parquet",
                "boards/part-00001.parquet",
                "moves/part-00000.parquet",
                "moves/part-00001.parquet"
            ]
        );
        let totals = write(&tmp.path().join("none"), &[], SMALL, 2, 4).unwrap();
        assert_eq!(totals, BoardTotals::default());
        let empty = files(&tmp.path().join("none"));
        assert_eq!(empty.len(), 2, "an empty split still gets part 0");
        // The same bytes as a writer given no rows.
        let path = tmp.path().join("empty.parquet");
        let mut w = PartWriter::create(&path, Table::Boards).unwrap();
        w.write(&RecordBatch::new_empty(Table::Boards.schema()))
            .unwrap();
        w.finish().unwrap();
        assert!(empty["boards/part-00000.parquet"] == fs::read(&path).unwrap());
    }

    #[test]
    fn the_tables_layout_is_what_writers_fed_board_by_board_give() {
        let tmp = tempfile::tempdir().unwrap();
        let boards = entries(40_000);
        write(tmp.path(), &boards, Layout::TABLES, 4, 6).unwrap();
        let got = files(tmp.path());
        // The writers fed in order: batches of RENDER_BOARDS boards, the
        // legal moves board by board.
        let (b_path, m_path) = (tmp.path().join("b.parquet"), tmp.path().join("m.parquet"));
        let mut b = PartWriter::create(&b_path, Table::Boards).unwrap();
        let mut m = crate::store::parallel::ParallelMovesWriter::create(
            &m_path,
            crate::store::parallel::Encoders::Inline,
        )
        .unwrap();
        for (i, job) in boards.chunks(RENDER_BOARDS).enumerate() {
            let first_id = (i * RENDER_BOARDS) as u64;
            let mut moves = MovesChunk {
                first_id,
                counts: Vec::new(),
                actions: Vec::new(),
            };
            let (batch, _) = render(first_id, job, &mut moves).unwrap();
            b.write(&batch).unwrap();
            let mut at = 0;
            for (j, &n) in moves.counts.iter().enumerate() {
                m.push(first_id + j as u64, &moves.actions[at..at + n as usize])
                    .unwrap();
                at += n as usize;
            }
        }
        b.finish().unwrap();
        m.finish().unwrap();
        assert!(got["boards/part-00000.parquet"] == fs::read(&b_path).unwrap());
        assert!(got["moves/part-00000.parquet"] == fs::read(&m_path).unwrap());
    }

    #[test]
    fn a_broken_stream_fails_the_split_with_its_error() {
        let tmp = tempfile::tempdir().unwrap();
        let boards = entries(2000);
        for threads in [1, 4] {
            let dir = tmp.path().join(threads.to_string());
            let (b, m) = (dir.join("boards"), dir.join("moves"));
            fs::create_dir_all(&b).unwrap();
            fs::create_dir_all(&m).unwrap();
            let stream = boards.iter().enumerate().map(|(i, e)| {
                if i == 1500 {
                    Err(IngestError::Internal("run file 7 is cut short".into()))
                } else {
                    Ok(*e)
                }
            });
            let done = AtomicU64::new(0);
            let err = write_split(stream, SMALL, &b, &m, threads, 3, &done).unwrap_err();
            assert!(err.to_string().contains("run file 7 is cut short"), "{err}");
        }
    }

    #[test]
    fn fewer_threads_work_when_the_limit_leaves_no_room() {
        assert_eq!(sizing(16, 0), (2, 4));
        assert_eq!(sizing(1, 0), (1, 3));
        assert_eq!(sizing(16, 5 * THREAD_BYTES), (7, 9));
        assert_eq!(sizing(16, u64::MAX), (16, 18));
        assert_eq!(sizing(0, u64::MAX), (1, 3));
    }
}
