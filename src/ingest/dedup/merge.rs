//! The merge by first occurrence: of run files ([`MergeRuns`], a k-way
//! merge on a heap: a split's deduplicated partitions, or the pieces of one
//! partition that was split) and of the shards' in-memory tables
//! ([`MemoryMerge`]). Each input is in order of first occurrence already
//! and holds keys no other input holds, so the merge is the split's
//! distinct boards in the order board ids follow ([`BoardStream`]).

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, binary_heap::PeekMut},
};

use super::{
    super::error::IngestError,
    entry::{Entry, SpillFormat},
    entry_file::{ReadMode, Run, SpilledRunReader},
};

/// Entries a merge decodes at a time from each run (3.5 KiB a run, beside
/// the run's read buffer).
const MERGE_BATCH: usize = 64;

/// K-way merge of run files by first occurrence.
pub(crate) struct MergeRuns {
    runs: Vec<RunCursor>,
    /// (first occurrence of the run's next entry, run), least on top.
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    /// Bytes of one batch, shared by the runs (one refills at a time).
    bytes: Vec<u8>,
}

/// A run's decoded entries not yet merged.
struct RunCursor {
    reader: SpilledRunReader,
    batch: Vec<Entry>,
    at: usize,
}

impl MergeRuns {
    /// Opens `runs`, read as `mode` says, and reads each one's first
    /// batch.
    pub(super) fn new(
        runs: Vec<Run>,
        mode: ReadMode,
        format: SpillFormat,
    ) -> Result<MergeRuns, IngestError> {
        let mut bytes = vec![0u8; MERGE_BATCH * format.entry_bytes()];
        let paths = runs;
        let mut runs = Vec::with_capacity(paths.len());
        let mut heads = BinaryHeap::with_capacity(paths.len());
        for (i, run) in paths.into_iter().enumerate() {
            let mut reader = SpilledRunReader::open(run, mode, format)?;
            let mut batch = Vec::with_capacity(MERGE_BATCH);
            reader.next_batch(&mut bytes, &mut batch)?;
            if let Some(e) = batch.first() {
                heads.push(Reverse((e.first, i)));
            }
            runs.push(RunCursor {
                reader,
                batch,
                at: 0,
            });
        }
        Ok(MergeRuns { runs, heads, bytes })
    }
}

impl Iterator for MergeRuns {
    type Item = Result<Entry, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        // The least head is replaced in place by its run's next entry (one
        // sift instead of a pop and a push), or popped at the run's end.
        let mut top = self.heads.peek_mut()?;
        let Reverse((_, i)) = *top;
        let run = &mut self.runs[i];
        let entry = run.batch[run.at];
        run.at += 1;
        if run.at == run.batch.len() {
            if let Err(e) = run.reader.next_batch(&mut self.bytes, &mut run.batch) {
                // The run ends here (its entry is lost with the error).
                PeekMut::pop(top);
                return Some(Err(e));
            }
            run.at = 0;
        }
        match run.batch.get(run.at) {
            Some(next) => *top = Reverse((next.first, i)),
            None => {
                PeekMut::pop(top);
            }
        }
        Some(Ok(entry))
    }
}

/// Merge by first occurrence of the shards' in-memory tables (each in
/// that order already; a handful of them, so a linear scan for the least).
pub(crate) struct MemoryMerge {
    tables: Vec<std::iter::Peekable<std::vec::IntoIter<Entry>>>,
}

impl MemoryMerge {
    fn new(tables: Vec<Vec<Entry>>) -> MemoryMerge {
        MemoryMerge {
            tables: tables
                .into_iter()
                .map(|t| t.into_iter().peekable())
                .collect(),
        }
    }
}

impl Iterator for MemoryMerge {
    type Item = Entry;

    #[inline]
    fn next(&mut self) -> Option<Entry> {
        if let [only] = self.tables.as_mut_slice() {
            return only.next();
        }
        let mut least: Option<(u64, usize)> = None;
        for (i, table) in self.tables.iter_mut().enumerate() {
            if let Some(e) = table.peek()
                && least.is_none_or(|(first, _)| e.first < first)
            {
                least = Some((e.first, i));
            }
        }
        self.tables[least?.1].next()
    }
}

/// A split's distinct boards, deduplicated, before they are read: the
/// shards' tables, or run files. Run files are opened only when their split
/// is written ([`SplitBoards::open`]), so the read buffers of one split's
/// runs are in memory at a time.
pub(crate) enum SplitBoards {
    Memory(Vec<Vec<Entry>>),
    /// Run files, each read `buffer` bytes at a time
    /// ([`run_buffer`](super::budget::run_buffer)).
    Runs {
        runs: Vec<Run>,
        buffer: usize,
        format: SpillFormat,
    },
}

/// Entries a sub-merge hands the final merge at a time (224 KiB).
const TREE_BATCH: usize = 4096;

/// Batches a sub-merge may have ready ahead of the final merge.
const TREE_AHEAD: usize = 4;

/// A merge of run files split over threads: each of a few threads merges
/// its share of the runs ([`MergeRuns`]) and hands its entries over in
/// batches; the calling thread merges those few streams by first
/// occurrence (a linear scan). Reading, decoding and most comparisons are
/// thus spread over the threads, and what is left on the calling thread is
/// a handful of comparisons an entry.
pub(crate) struct TreeMerge {
    streams: Vec<TreeStream>,
    /// The sub-merges' threads; they stop when their channel closes.
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// One sub-merge's entries as they arrive.
struct TreeStream {
    rx: crossbeam_channel::Receiver<Result<Vec<Entry>, IngestError>>,
    back: crossbeam_channel::Sender<Vec<Entry>>,
    batch: Vec<Entry>,
    at: usize,
    /// The sub-merge has no more entries.
    done: bool,
}

impl TreeStream {
    /// The next entry's first occurrence, waiting for a batch if need be;
    /// `None` at the end of the stream.
    fn head(&mut self) -> Result<Option<u64>, IngestError> {
        while self.at == self.batch.len() {
            if self.done {
                return Ok(None);
            }
            match self.rx.recv() {
                Ok(Ok(batch)) => {
                    let old = std::mem::replace(&mut self.batch, batch);
                    let _ = self.back.try_send(old);
                    self.at = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => self.done = true,
            }
        }
        Ok(Some(self.batch[self.at].first))
    }
}

impl TreeMerge {
    /// Merges `runs` on `groups` threads (the runs dealt round-robin).
    fn new(
        runs: Vec<Run>,
        groups: usize,
        mode: ReadMode,
        format: SpillFormat,
    ) -> Result<TreeMerge, IngestError> {
        let groups = groups.clamp(1, runs.len().max(1));
        let mut streams = Vec::with_capacity(groups);
        let mut threads = Vec::with_capacity(groups);
        let mut dealt: Vec<Vec<Run>> = (0..groups).map(|_| Vec::new()).collect();
        for (i, run) in runs.into_iter().enumerate() {
            dealt[i % groups].push(run);
        }
        for (g, mine) in dealt.into_iter().enumerate() {
            // Opened here, so that a run that cannot be opened fails at once.
            let mut merge = MergeRuns::new(mine, mode, format)?;
            let (tx, rx) = crossbeam_channel::bounded(TREE_AHEAD);
            let (back_tx, back_rx) = crossbeam_channel::bounded::<Vec<Entry>>(TREE_AHEAD + 2);
            let thread = std::thread::Builder::new()
                .name(format!("cb-merge-{g}"))
                .spawn(move || {
                    loop {
                        let mut batch = back_rx
                            .try_recv()
                            .unwrap_or_else(|_| Vec::with_capacity(TREE_BATCH));
                        batch.clear();
                        for entry in merge.by_ref() {
                            match entry {
                                Ok(e) => batch.push(e),
                                Err(e) => {
                                    let _ = tx.send(Err(e));
                                    return;
                                }
                            }
                            if batch.len() == TREE_BATCH {
                                break;
                            }
                        }
                        let last = batch.len() < TREE_BATCH;
                        if (!batch.is_empty() && tx.send(Ok(batch)).is_err()) || last {
                            return;
                        }
                    }
                })
                .map_err(|e| IngestError::Internal(format!("cannot start a merge thread: {e}")))?;
            streams.push(TreeStream {
                rx,
                back: back_tx,
                batch: Vec::new(),
                at: 0,
                done: false,
            });
            threads.push(thread);
        }
        Ok(TreeMerge { streams, threads })
    }
}

impl Iterator for TreeMerge {
    type Item = Result<Entry, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut least: Option<(u64, usize)> = None;
        for (i, stream) in self.streams.iter_mut().enumerate() {
            match stream.head() {
                Ok(Some(first)) => {
                    if least.is_none_or(|(f, _)| first < f) {
                        least = Some((first, i));
                    }
                }
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        let stream = &mut self.streams[least?.1];
        let entry = stream.batch[stream.at];
        stream.at += 1;
        Some(Ok(entry))
    }
}

impl Drop for TreeMerge {
    fn drop(&mut self) {
        // Closing the channels stops the sub-merges at their next batch.
        self.streams.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl SplitBoards {
    /// Memory the boards hold until they are written: the tables kept in
    /// memory, or the run files' read buffers and the runs' fixes.
    pub(crate) fn held_bytes(&self) -> u64 {
        match self {
            SplitBoards::Memory(tables) => tables
                .iter()
                .map(|t| (t.capacity() * std::mem::size_of::<Entry>()) as u64)
                .sum(),
            SplitBoards::Runs { runs, buffer, .. } => {
                (runs.len() * buffer) as u64 + runs.iter().map(Run::held_bytes).sum::<u64>()
            }
        }
    }

    /// The boards in order of first occurrence. Run files are merged on
    /// `threads` threads beside the caller's ([`TreeMerge`]) when there are
    /// more than one, else on the caller's.
    pub(crate) fn open(self, threads: usize) -> Result<BoardStream, IngestError> {
        Ok(match self {
            SplitBoards::Memory(tables) => BoardStream::Memory(MemoryMerge::new(tables)),
            SplitBoards::Runs {
                runs,
                buffer,
                format,
            } if threads > 1 => BoardStream::Tree(TreeMerge::new(
                runs,
                threads,
                ReadMode::Direct(buffer),
                format,
            )?),
            SplitBoards::Runs {
                runs,
                buffer,
                format,
            } => BoardStream::Merged(MergeRuns::new(runs, ReadMode::Direct(buffer), format)?),
        })
    }
}

/// A split's distinct boards, in order of first occurrence.
pub(crate) enum BoardStream {
    Memory(MemoryMerge),
    Merged(MergeRuns),
    Tree(TreeMerge),
}

impl Iterator for BoardStream {
    type Item = Result<Entry, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            BoardStream::Memory(it) => it.next().map(Ok),
            BoardStream::Merged(m) => m.next(),
            BoardStream::Tree(t) => t.next(),
        }
    }
}
