//! Part files whose row groups are encoded on a pool of threads and appended
//! in order, so that one thread producing rows is not also the one thread
//! compressing them.
//!
//! [`InOrder`] takes row-group encodings as closures, runs them on the pool
//! and appends their results in the order they were submitted (whichever
//! thread finishes the one the file waits for appends it and any after it
//! that are ready); at most `window` row groups are in flight, so a producer
//! faster than the pool waits. [`ParallelPartWriter`] cuts an Arrow table's
//! batches into row groups where [`PartWriter`](super::writer::PartWriter)
//! would, and [`ParallelMovesWriter`] cuts `legal_moves` rows into row
//! groups of 2^20: the files are the same bytes whatever the pool (inline
//! encoding included).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, Condvar, Mutex},
};

use arrow_array::RecordBatch;

use super::{
    error::StoreError,
    legal_moves::{self, Encode, LegalMovesWriter},
    schema::Table,
    writer::{self, RowGroupEncoder, RowGroupFile, properties},
};

/// A file taking pieces encoded elsewhere (row groups, batches of
/// records) in order.
pub(crate) trait OrderedFile: Send + 'static {
    type Piece: Send + 'static;
    /// What the finished file reports (its rows, say).
    type Done;
    type Error: Send + 'static;
    fn append(&mut self, piece: Self::Piece) -> Result<(), Self::Error>;
    fn finish(self) -> Result<Self::Done, Self::Error>;
    /// The error for a panicked encoder or a broken lock.
    fn broken(path: &Path, what: &str) -> Self::Error;
}

impl OrderedFile for RowGroupFile {
    type Piece = writer::EncodedRowGroup;
    type Done = u64;
    type Error = StoreError;
    fn append(&mut self, group: Self::Piece) -> Result<(), StoreError> {
        RowGroupFile::append(self, group)
    }
    fn finish(self) -> Result<u64, StoreError> {
        RowGroupFile::finish(self)
    }
    fn broken(path: &Path, what: &str) -> StoreError {
        StoreError::Corrupt(path.to_owned(), what.to_owned())
    }
}

impl OrderedFile for LegalMovesWriter {
    type Piece = legal_moves::EncodedMovesGroup;
    type Done = u64;
    type Error = StoreError;
    fn append(&mut self, group: Self::Piece) -> Result<(), StoreError> {
        LegalMovesWriter::append(self, group)
    }
    fn finish(self) -> Result<u64, StoreError> {
        LegalMovesWriter::finish(self)
    }
    fn broken(path: &Path, what: &str) -> StoreError {
        StoreError::Corrupt(path.to_owned(), what.to_owned())
    }
}

/// Where row groups are encoded: on the calling thread, or on a pool.
#[derive(Clone)]
pub(crate) enum Encoders {
    Inline,
    Pool {
        pool: Arc<rayon::ThreadPool>,
        /// Row groups of one file in flight at most.
        window: usize,
    },
}

impl Encoders {
    /// `threads` encoding threads (inline for one).
    pub(crate) fn new(threads: usize, name: &str) -> Result<Encoders, StoreError> {
        if threads <= 1 {
            return Ok(Encoders::Inline);
        }
        let name = name.to_owned();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("{name}-{i}"))
            .build()
            .map_err(|e| StoreError::Io {
                path: PathBuf::from("-"),
                source: std::io::Error::other(format!("cannot start encoding threads: {e}")),
            })?;
        Ok(Encoders::Pool {
            pool: Arc::new(pool),
            window: threads + 2,
        })
    }
}

struct State<F: OrderedFile> {
    file: Option<F>,
    /// The next row group to append, and those encoded ahead of it.
    next: usize,
    ready: BTreeMap<usize, F::Piece>,
    error: Option<F::Error>,
    /// Pieces whose task has ended, whatever its outcome.
    ended: usize,
    /// An error was handed to the writer's caller (and taken from `error`).
    failed: bool,
}

struct Shared<F: OrderedFile> {
    state: Mutex<State<F>>,
    changed: Condvar,
}

/// Row groups of one file encoded on [`Encoders`], appended in order.
pub(crate) struct InOrder<F: OrderedFile> {
    shared: Arc<Shared<F>>,
    encoders: Encoders,
    path: PathBuf,
    /// Row groups submitted.
    submitted: usize,
}

impl<F: OrderedFile> InOrder<F> {
    pub(crate) fn new(file: F, path: &Path, encoders: Encoders) -> InOrder<F> {
        InOrder {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    file: Some(file),
                    next: 0,
                    ready: BTreeMap::new(),
                    error: None,
                    ended: 0,
                    failed: false,
                }),
                changed: Condvar::new(),
            }),
            encoders,
            path: path.to_owned(),
            submitted: 0,
        }
    }

    fn poisoned(&self) -> F::Error {
        F::broken(&self.path, "a thread encoding the file panicked")
    }

    /// Encodes the next piece with `encode` (given its index in the file),
    /// on the pool when there is one; waits while the window is full.
    pub(crate) fn submit(
        &mut self,
        encode: impl FnOnce(usize) -> Result<F::Piece, F::Error> + Send + 'static,
    ) -> Result<(), F::Error> {
        // A piece is counted once it is appended (inline) or its task is
        // spawned: `finish` and `drop` wait for exactly those.
        let index = self.submitted;
        match &self.encoders {
            Encoders::Inline => {
                let group = encode(index)?;
                let mut state = self.shared.state.lock().map_err(|_| self.poisoned())?;
                state
                    .file
                    .as_mut()
                    .ok_or_else(|| self.poisoned())?
                    .append(group)?;
                state.next += 1;
                state.ended += 1;
                self.submitted += 1;
                Ok(())
            }
            Encoders::Pool { pool, window } => {
                {
                    let mut state = self.shared.state.lock().map_err(|_| self.poisoned())?;
                    while state.error.is_none() && !state.failed && index >= state.next + window {
                        state = self
                            .shared
                            .changed
                            .wait(state)
                            .map_err(|_| self.poisoned())?;
                    }
                    if let Some(e) = state.error.take() {
                        state.failed = true;
                        return Err(e);
                    }
                    if state.failed {
                        return Err(F::broken(&self.path, "an earlier piece failed"));
                    }
                }
                self.submitted += 1;
                let shared = Arc::clone(&self.shared);
                let path = self.path.clone();
                pool.spawn(move || {
                    let encoded =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| encode(index)))
                            .unwrap_or_else(|_| {
                                Err(F::broken(&path, "a thread encoding the file panicked"))
                            });
                    let Ok(mut state) = shared.state.lock() else {
                        return;
                    };
                    state.ended += 1;
                    match encoded {
                        Ok(group) => {
                            state.ready.insert(index, group);
                        }
                        Err(e) => {
                            state.error.get_or_insert(e);
                        }
                    }
                    while state.error.is_none() {
                        let next = state.next;
                        let Some(group) = state.ready.remove(&next) else {
                            break;
                        };
                        let appended = match state.file.as_mut() {
                            Some(file) => file.append(group),
                            None => Err(F::broken(&path, "written to after it was finished")),
                        };
                        match appended {
                            Ok(()) => state.next += 1,
                            Err(e) => {
                                state.error.get_or_insert(e);
                            }
                        }
                    }
                    drop(state);
                    shared.changed.notify_all();
                });
                Ok(())
            }
        }
    }

    /// Waits for every piece, then finishes the file.
    pub(crate) fn finish(self) -> Result<F::Done, F::Error> {
        let mut state = self.shared.state.lock().map_err(|_| self.poisoned())?;
        while state.error.is_none() && !state.failed && state.next < self.submitted {
            state = self
                .shared
                .changed
                .wait(state)
                .map_err(|_| self.poisoned())?;
        }
        if let Some(e) = state.error.take() {
            state.failed = true;
            return Err(e);
        }
        if state.failed {
            return Err(F::broken(&self.path, "an earlier piece failed"));
        }
        state.file.take().ok_or_else(|| self.poisoned())?.finish()
    }
}

impl<F: OrderedFile> Drop for InOrder<F> {
    /// A writer given up (an error elsewhere) waits for the pieces still
    /// being encoded and drops its file (an unfinished bag removes its
    /// temporary file then): nothing touches a new file of the same name
    /// afterwards.
    fn drop(&mut self) {
        let Ok(mut state) = self.shared.state.lock() else {
            return;
        };
        while state.ended < self.submitted {
            match self.shared.changed.wait(state) {
                Ok(s) => state = s,
                Err(_) => return,
            }
        }
        // The file goes now, not with the last task's reference to it.
        drop(state.file.take());
    }
}

/// An Arrow table's part file, batches cut into row groups at the table's
/// row-group size (as [`PartWriter`](super::writer::PartWriter) cuts them)
/// and encoded on [`Encoders`].
pub(crate) struct ParallelPartWriter {
    file: InOrder<RowGroupFile>,
    encoder: RowGroupEncoder,
    max_rows: usize,
    /// The batches (or slices) of the row group being gathered.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
}

impl ParallelPartWriter {
    /// Creates `path` (its directory must exist) for `table`.
    pub(crate) fn create(
        path: &Path,
        table: Table,
        encoders: Encoders,
    ) -> Result<ParallelPartWriter, StoreError> {
        let file = RowGroupFile::create(path, table)?;
        let encoder = file.encoder();
        let max_rows = properties(table)
            .max_row_group_row_count()
            .unwrap_or(usize::MAX)
            .max(1);
        Ok(ParallelPartWriter {
            file: InOrder::new(file, path, encoders),
            encoder,
            max_rows,
            pending: Vec::new(),
            pending_rows: 0,
        })
    }

    /// Appends a batch (its schema must be the table's).
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), StoreError> {
        let mut at = 0;
        while at < batch.num_rows() {
            let take = (self.max_rows - self.pending_rows).min(batch.num_rows() - at);
            self.pending.push(batch.slice(at, take));
            self.pending_rows += take;
            at += take;
            if self.pending_rows == self.max_rows {
                self.cut()?;
            }
        }
        Ok(())
    }

    fn cut(&mut self) -> Result<(), StoreError> {
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let encoder = self.encoder.clone();
        let path = self.file.path.clone();
        self.file.submit(move |index| {
            let mut group = encoder
                .begin(index)
                .map_err(|e| StoreError::parquet(&path, e))?;
            for b in &batches {
                group.write(b).map_err(|e| StoreError::parquet(&path, e))?;
            }
            group.finish().map_err(|e| StoreError::parquet(&path, e))
        })
    }

    /// Encodes the last row group and finishes the file.
    pub(crate) fn finish(mut self) -> Result<u64, StoreError> {
        if self.pending_rows > 0 {
            self.cut()?;
        }
        self.file.finish()
    }
}

/// A `legal_moves` part file written board by board: rows gathered into
/// row groups of [`legal_moves::ROW_GROUP_ROWS`] (a board's moves may span
/// two), each encoded on [`Encoders`].
pub(crate) struct ParallelMovesWriter {
    file: InOrder<LegalMovesWriter>,
    columns: [parquet::schema::types::ColumnDescPtr; 3],
    board_ids: Vec<u64>,
    actions: Vec<u16>,
}

impl ParallelMovesWriter {
    pub(crate) fn create(
        path: &Path,
        encoders: Encoders,
    ) -> Result<ParallelMovesWriter, StoreError> {
        let file = LegalMovesWriter::create(path)?;
        let columns = file.columns();
        Ok(ParallelMovesWriter {
            file: InOrder::new(file, path, encoders),
            columns,
            board_ids: Vec::with_capacity(legal_moves::ROW_GROUP_ROWS),
            actions: Vec::with_capacity(legal_moves::ROW_GROUP_ROWS),
        })
    }

    /// Appends the (sorted) legal actions of one board.
    pub(crate) fn push(&mut self, board_id: u64, actions: &[u16]) -> Result<(), StoreError> {
        let mut rest = actions;
        while !rest.is_empty() {
            let room = legal_moves::ROW_GROUP_ROWS - self.actions.len();
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.board_ids
                .extend(std::iter::repeat_n(board_id, now.len()));
            self.actions.extend_from_slice(now);
            if self.actions.len() == legal_moves::ROW_GROUP_ROWS {
                self.cut()?;
            }
            rest = later;
        }
        Ok(())
    }

    fn cut(&mut self) -> Result<(), StoreError> {
        let ids = std::mem::take(&mut self.board_ids);
        let actions = std::mem::take(&mut self.actions);
        self.board_ids.reserve(legal_moves::ROW_GROUP_ROWS);
        self.actions.reserve(legal_moves::ROW_GROUP_ROWS);
        let columns = self.columns.clone();
        let path = self.file.path.clone();
        // Inline, the writer's own two-thread split; on a pool, one task.
        let threads = match self.file.encoders {
            Encoders::Inline => Encode::Split,
            Encoders::Pool { .. } => Encode::Serial,
        };
        self.file.submit(move |_| {
            legal_moves::encode_row_group(&columns, &ids, &actions, threads)
                .map_err(|e| StoreError::parquet(&path, e))
        })
    }

    /// Encodes the last row group and finishes the file.
    pub(crate) fn finish(mut self) -> Result<u64, StoreError> {
        if !self.actions.is_empty() {
            self.cut()?;
        }
        self.file.finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Float64Array, Int32Array, UInt16Array, UInt32Array, UInt64Array};

    use super::*;
    use crate::store::writer::PartWriter;

    /// Action-value rows `from..from + n`.
    fn batch(from: u64, n: usize) -> RecordBatch {
        let ids: Vec<u64> = (from..from + n as u64).map(|i| i / 7).collect();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from(ids)),
            Arc::new(UInt16Array::from_iter_values(
                (0..n).map(|i| (i % 1968) as u16),
            )),
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|i| ((i * 37 % 1000) as f64) / 1000.0),
            )),
            Arc::new(Int32Array::new_null(n)),
            Arc::new(Int32Array::new_null(n)),
            Arc::new(UInt16Array::new_null(n)),
            Arc::new(UInt64Array::new_null(n)),
            Arc::new(UInt32Array::new_null(n)),
            crate::store::source::ValueSource::Bag.column(n),
        ];
        RecordBatch::try_new(Table::ActionValues.schema(), cols).unwrap()
    }

    #[test]
    fn row_groups_encoded_on_a_pool_give_the_writers_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        // Batches of odd sizes across several row groups (64Ki rows each).
        let sizes = [1000usize, 70_000, 5, 65_531, 130_000, 17];
        let reference = tmp.path().join("ref.parquet");
        let mut w = PartWriter::create(&reference, Table::ActionValues).unwrap();
        let mut from = 0;
        for &n in &sizes {
            w.write(&batch(from, n)).unwrap();
            from += n as u64;
        }
        w.finish().unwrap();
        let moves_ref = tmp.path().join("moves-ref.parquet");
        let mut m = ParallelMovesWriter::create(&moves_ref, Encoders::Inline).unwrap();
        let board = |i: u64| -> Vec<u16> { (0..(i % 40) as u16).map(|a| a * 40 + 3).collect() };
        for i in 0..120_000u64 {
            m.push(i, &board(i)).unwrap();
        }
        m.finish().unwrap();
        for threads in [1, 2, 5] {
            let encoders = Encoders::new(threads, "cb-test").unwrap();
            let path = tmp.path().join(format!("{threads}.parquet"));
            let mut w =
                ParallelPartWriter::create(&path, Table::ActionValues, encoders.clone()).unwrap();
            let mut from = 0;
            for &n in &sizes {
                w.write(&batch(from, n)).unwrap();
                from += n as u64;
            }
            assert_eq!(w.finish().unwrap(), from);
            assert!(
                std::fs::read(&path).unwrap() == std::fs::read(&reference).unwrap(),
                "{threads} threads: action values differ"
            );
            let path = tmp.path().join(format!("moves-{threads}.parquet"));
            let mut m = ParallelMovesWriter::create(&path, encoders).unwrap();
            for i in 0..120_000u64 {
                m.push(i, &board(i)).unwrap();
            }
            m.finish().unwrap();
            assert!(
                std::fs::read(&path).unwrap() == std::fs::read(&moves_ref).unwrap(),
                "{threads} threads: legal moves differ"
            );
        }
    }

    #[test]
    fn a_writer_given_up_waits_for_its_pieces() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.parquet");
        let file = RowGroupFile::create(&path, Table::ActionValues).unwrap();
        let encoder = file.encoder();
        let mut w = InOrder::new(file, &path, Encoders::new(3, "cb-test").unwrap());
        let ended = Arc::new(AtomicUsize::new(0));
        for _ in 0..6 {
            let (ended, encoder) = (Arc::clone(&ended), encoder.clone());
            w.submit(move |i| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let mut g = encoder.begin(i).unwrap();
                g.write(&batch(0, 10)).unwrap();
                ended.fetch_add(1, Ordering::SeqCst);
                Ok(g.finish().unwrap())
            })
            .unwrap();
        }
        drop(w);
        assert_eq!(ended.load(Ordering::SeqCst), 6);
    }

    /// A writer on `threads` threads whose first piece fails.
    fn failing_writer(dir: &Path, threads: usize) -> InOrder<RowGroupFile> {
        let path = dir.join("x.parquet");
        let file = RowGroupFile::create(&path, Table::ActionValues).unwrap();
        let mut w = InOrder::new(file, &path, Encoders::new(threads, "cb-test").unwrap());
        w.submit(|_| {
            Err(StoreError::Corrupt(
                PathBuf::from("x"),
                "broken row group".into(),
            ))
        })
        .unwrap();
        w
    }

    #[test]
    fn a_failed_piece_fails_the_next_submit_and_the_writer_drops() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = failing_writer(tmp.path(), 2);
        // A later submit sees the error (once); what is refused is not
        // counted, so dropping the writer does not wait for it.
        let err = loop {
            std::thread::sleep(std::time::Duration::from_millis(5));
            if let Err(e) =
                w.submit(|_| Err(StoreError::Corrupt(PathBuf::from("x"), "never run".into())))
            {
                break e;
            }
        };
        assert!(
            err.to_string().contains("broken row group") || err.to_string().contains("never run"),
            "{err}"
        );
        assert!(w.submit(|_| unreachable!()).is_err());
        drop(w);
    }

    #[test]
    fn an_encoding_error_reaches_the_writer() {
        let tmp = tempfile::tempdir().unwrap();
        let w = failing_writer(tmp.path(), 3);
        let err = w.finish().err().unwrap();
        assert!(err.to_string().contains("broken row group"), "{err}");
    }
}
