//! The merge by first occurrence: of run files ([`MergeRuns`], a k-way
//! merge on a heap: a split's deduplicated partitions, or the pieces of one
//! partition that was split) and of the shards' in-memory tables
//! ([`MemoryMerge`]). Each input is in order of first occurrence already
//! and holds keys no other input holds, so the merge is the split's
//! distinct boards in the order board ids follow ([`BoardStream`]).

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, binary_heap::PeekMut},
    path::PathBuf,
};

use super::{
    super::IngestError,
    entry::{Entry, SpillFormat},
    entry_file::{EntryReader, ReadMode},
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
    reader: EntryReader,
    batch: Vec<Entry>,
    at: usize,
}

impl MergeRuns {
    /// Opens the runs at `paths`, read as `mode` says, and reads each one's
    /// first batch.
    pub(super) fn new(
        paths: &[PathBuf],
        mode: ReadMode,
        format: SpillFormat,
    ) -> Result<MergeRuns, IngestError> {
        let mut bytes = vec![0u8; MERGE_BATCH * format.entry_bytes()];
        let mut runs = Vec::with_capacity(paths.len());
        let mut heads = BinaryHeap::with_capacity(paths.len());
        for (i, path) in paths.iter().enumerate() {
            let mut reader = EntryReader::open(path, mode, format)?;
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
        paths: Vec<PathBuf>,
        buffer: usize,
        format: SpillFormat,
    },
}

impl SplitBoards {
    /// The boards in order of first occurrence.
    pub(crate) fn open(self) -> Result<BoardStream, IngestError> {
        Ok(match self {
            SplitBoards::Memory(tables) => BoardStream::Memory(MemoryMerge::new(tables)),
            SplitBoards::Runs {
                paths,
                buffer,
                format,
            } => BoardStream::Merged(MergeRuns::new(&paths, ReadMode::Direct(buffer), format)?),
        })
    }
}

/// A split's distinct boards, in order of first occurrence.
pub(crate) enum BoardStream {
    Memory(MemoryMerge),
    Merged(MergeRuns),
}

impl Iterator for BoardStream {
    type Item = Result<Entry, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            BoardStream::Memory(it) => it.next().map(Ok),
            BoardStream::Merged(m) => m.next(),
        }
    }
}
