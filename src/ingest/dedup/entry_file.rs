//! Spill and run files as streams of entries: [`EntryWriter`] appends
//! entries in a [`SpillFormat`], [`EntryReader`] reads them back in batches
//! (through the page cache or around it, [`ReadMode`]) and refuses a file
//! that is cut short or holds bytes no writer gives. Every error names the
//! file, and a corrupt one the bytes.

use std::{
    fs::File,
    io::{BufReader, Read, Write},
    path::{Path, PathBuf},
};

use super::{
    super::error::IngestError,
    entry::{Entry, SpillFormat},
};
use crate::store::direct::{DirectReader, DirectWriter};

/// An I/O error on the spill or run file at `path`.
pub(super) fn spill_err(path: &Path, source: std::io::Error) -> IngestError {
    IngestError::Spill {
        path: path.to_owned(),
        source,
    }
}

/// How an [`EntryReader`] reads its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadMode {
    /// Through the page cache, in a buffer of this many bytes, the page
    /// cache's readahead overlapping the disk with the reader's work: the
    /// dedup phase, whose threads each read one partition and work on it.
    Cached(usize),
    /// Around it ([`DirectReader`]), in reads of this many bytes: the merge
    /// of the run files while the boards are written, where reading through
    /// the page cache costs ~7% of ingest's CPU in the kernel (10^6 games:
    /// 16.6 s of system time through it, 8.1 s around it) and the reading
    /// thread is not the one the others wait on. Each run is read once
    /// there, so what was read is given back to the file system as the
    /// merge goes ([`DirectReader::open_once`]).
    Direct(usize),
}

/// An [`EntryReader`]'s file, opened as its [`ReadMode`] says (an enum
/// rather than a `dyn Read`: the run merge reads a few entries at a time).
enum Source {
    Cached(BufReader<File>),
    Direct(DirectReader),
}

impl Read for Source {
    #[inline]
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Cached(r) => r.read(out),
            Source::Direct(r) => r.read(out),
        }
    }
}

/// Reads entries from a spill or run file.
pub(super) struct EntryReader {
    reader: Source,
    path: PathBuf,
    format: SpillFormat,
    /// Bytes of the file read so far (where errors say they are).
    offset: u64,
}

impl EntryReader {
    pub(super) fn open(
        path: &Path,
        mode: ReadMode,
        format: SpillFormat,
    ) -> Result<EntryReader, IngestError> {
        let reader = match mode {
            ReadMode::Cached(buffer) => Source::Cached(BufReader::with_capacity(
                buffer,
                File::open(path).map_err(|e| spill_err(path, e))?,
            )),
            ReadMode::Direct(buffer) => Source::Direct(
                DirectReader::open_once(path, buffer).map_err(|e| spill_err(path, e))?,
            ),
        };
        Ok(EntryReader {
            reader,
            path: path.to_owned(),
            format,
            offset: 0,
        })
    }

    /// Replaces `out` with the next entries, as many as `buf` holds (a
    /// multiple of the format's entry size); empty at the end of the file.
    pub(super) fn next_batch(
        &mut self,
        buf: &mut [u8],
        out: &mut Vec<Entry>,
    ) -> Result<(), IngestError> {
        out.clear();
        let mut filled = 0;
        while filled < buf.len() {
            match self.reader.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(spill_err(&self.path, e)),
            }
        }
        let size = self.format.entry_bytes();
        if filled % size != 0 {
            return Err(spill_err(
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("spill file ends inside an entry ({size} bytes each)"),
                ),
            ));
        }
        let format = self.format;
        for bytes in buf[..filled].chunks_exact(size) {
            let Some(entry) = format.read(bytes) else {
                let at = self.offset + (out.len() * size) as u64;
                return Err(spill_err(
                    &self.path,
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "bytes {at}..{} are not a board ingest writes ({format:?} format, \
                             {size} bytes an entry): the file is corrupt",
                            at + size as u64
                        ),
                    ),
                ));
            };
            out.push(entry);
        }
        self.offset += filled as u64;
        Ok(())
    }
}

/// Entries appended to a new spill or run file in one [`SpillFormat`];
/// errors name the file.
pub(super) struct EntryWriter {
    file: DirectWriter,
    path: PathBuf,
    format: SpillFormat,
    /// One entry's bytes (reused).
    bytes: Vec<u8>,
}

impl EntryWriter {
    /// Creates (or truncates) `path`, with a buffer of about `buffer` bytes.
    pub(super) fn create(
        path: &Path,
        buffer: usize,
        format: SpillFormat,
    ) -> Result<EntryWriter, IngestError> {
        Ok(EntryWriter {
            file: DirectWriter::create(path, buffer).map_err(|e| spill_err(path, e))?,
            path: path.to_owned(),
            format,
            bytes: Vec::with_capacity(format.entry_bytes()),
        })
    }

    #[inline]
    pub(super) fn push(&mut self, e: &Entry) -> Result<(), IngestError> {
        self.bytes.clear();
        self.format.write(e, &mut self.bytes)?;
        (self.file.write_all(&self.bytes)).map_err(|err| spill_err(&self.path, err))
    }

    /// Writes the rest and closes the file.
    pub(super) fn finish(self) -> Result<(), IngestError> {
        self.file.finish().map_err(|e| spill_err(&self.path, e))
    }
}

/// A run: a file of distinct entries in order of first occurrence, read
/// by the merge. Either written as such, or a partition file read with its
/// [`Fix`]: the dedup phase then writes nothing.
#[derive(Debug)]
pub(crate) struct Run {
    pub path: PathBuf,
    pub fix: Option<Fix>,
}

impl Run {
    /// A run file written as such.
    pub(super) fn file(path: PathBuf) -> Run {
        Run { path, fix: None }
    }

    /// Memory the run holds until it is read: its fix.
    pub(super) fn held_bytes(&self) -> u64 {
        self.fix.as_ref().map_or(0, Fix::bytes)
    }
}

/// What makes a partition file its run: a partition holds each key's
/// occurrences across generations in order of first occurrence, so the run
/// is the file without the entries of keys met before (`skip`, their
/// positions in the file, ascending), each remaining entry's count raised
/// to the key's total where later ones added to it (`counts`: the entry's
/// place among the remaining ones, and the total, ascending). Most boards
/// occur in one generation only, so a fix is far smaller than the run it
/// stands for, which would otherwise be written and read once more.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Fix {
    pub skip: Vec<u32>,
    pub counts: Vec<(u32, u64)>,
}

impl Fix {
    /// Bytes held in memory.
    pub(super) fn bytes(&self) -> u64 {
        (self.skip.capacity() * 4 + self.counts.capacity() * 16) as u64
    }
}

/// Reads a [`Run`]: its file's entries, with its fix applied.
pub(super) struct SpilledRunReader {
    reader: EntryReader,
    fix: Option<Fix>,
    /// Position in the file of the next entry read.
    at: u64,
    /// Place among the entries kept of the next one kept.
    kept: u64,
    /// Next of `fix.skip` and of `fix.counts` to come.
    skip: usize,
    count: usize,
}

impl SpilledRunReader {
    pub(super) fn open(
        run: Run,
        mode: ReadMode,
        format: SpillFormat,
    ) -> Result<SpilledRunReader, IngestError> {
        Ok(SpilledRunReader {
            reader: EntryReader::open(&run.path, mode, format)?,
            fix: run.fix,
            at: 0,
            kept: 0,
            skip: 0,
            count: 0,
        })
    }

    /// [`EntryReader::next_batch`] of the run: empty only at its end.
    pub(super) fn next_batch(
        &mut self,
        buf: &mut [u8],
        out: &mut Vec<Entry>,
    ) -> Result<(), IngestError> {
        loop {
            self.reader.next_batch(buf, out)?;
            let n = out.len();
            let Some(fix) = &self.fix else {
                return Ok(());
            };
            // Most batches hold no duplicate and no count to raise: they
            // pass as read.
            let end = self.at + n as u64;
            let skips = fix.skip.get(self.skip).is_some_and(|&s| u64::from(s) < end);
            let counts = (fix.counts.get(self.count))
                .is_some_and(|&(k, _)| u64::from(k) < self.kept + n as u64);
            if !skips && !counts {
                self.at = end;
                self.kept += n as u64;
                return Ok(());
            }
            let mut kept = 0;
            for i in 0..n {
                let at = self.at + i as u64;
                if fix.skip.get(self.skip).is_some_and(|&s| u64::from(s) == at) {
                    self.skip += 1;
                    continue;
                }
                let mut e = out[i];
                if let Some(&(k, total)) = fix.counts.get(self.count)
                    && u64::from(k) == self.kept
                {
                    e.count = total;
                    self.count += 1;
                }
                self.kept += 1;
                out[kept] = e;
                kept += 1;
            }
            self.at += n as u64;
            out.truncate(kept);
            if kept > 0 || n == 0 {
                return Ok(());
            }
        }
    }
}

/// Writes `entries` to a new file at `path`, in order.
pub(super) fn write_entries(
    path: &Path,
    entries: &[Entry],
    format: SpillFormat,
) -> Result<(), IngestError> {
    let mut w = EntryWriter::create(path, 1 << 20, format)?;
    for e in entries {
        w.push(e)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use shakmaty::Chess;

    use super::{super::entry::first_seen, *};
    use crate::chess::BoardKey;

    #[test]
    fn a_spill_file_cut_inside_an_entry_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("partition-07.bin");
        let entry = Entry {
            key: BoardKey::from_position(&shakmaty::Chess::default()).unwrap(),
            first: 3,
            count: 2,
        };
        let modes = [ReadMode::Cached(64 << 10), ReadMode::Direct(64 << 10)];
        let formats = [SpillFormat::Plain, SpillFormat::Packed];
        for (mode, format) in modes.into_iter().flat_map(|m| formats.map(|f| (m, f))) {
            let size = format.entry_bytes();
            let mut bytes = Vec::new();
            format.write(&entry, &mut bytes).unwrap();
            format.write(&entry, &mut bytes).unwrap();
            assert_eq!(bytes.len(), 2 * size);
            bytes.truncate(size + 5);
            fs::write(&path, &bytes).unwrap();
            let mut reader = EntryReader::open(&path, mode, format).unwrap();
            let (mut buf, mut out) = (vec![0u8; size * 4], Vec::new());
            let err = reader
                .next_batch(&mut buf, &mut out)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("partition-07.bin") && err.contains("inside an entry"),
                "{mode:?}: {err}"
            );
            // Whole entries read back as written, then the end.
            bytes.truncate(size);
            fs::write(&path, &bytes).unwrap();
            let mut reader = EntryReader::open(&path, mode, format).unwrap();
            reader.next_batch(&mut buf, &mut out).unwrap();
            assert_eq!(out, vec![entry], "{mode:?}");
            reader.next_batch(&mut buf, &mut out).unwrap();
            assert!(out.is_empty(), "{mode:?}");
        }
    }

    #[test]
    fn corrupt_spill_files_are_errors_naming_the_file_and_the_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let start = BoardKey::from_position(&Chess::default()).unwrap();
        let good = Entry {
            key: start,
            first: first_seen(3, 4),
            count: 2,
        };
        for format in [SpillFormat::Plain, SpillFormat::Packed] {
            let size = format.entry_bytes();
            let mut bytes = Vec::new();
            for _ in 0..3 {
                format.write(&good, &mut bytes).unwrap();
            }
            // The second entry zeroed (a hole), or, packed, crowded with a
            // 33rd occupied square.
            let mut corrupt = vec![bytes.clone()];
            corrupt[0][size..2 * size].fill(0);
            if format == SpillFormat::Packed {
                let mut crowded = bytes.clone();
                crowded[size + 3] |= 1 << 4;
                corrupt.push(crowded);
            }
            for (i, file) in corrupt.iter().enumerate() {
                let path = tmp.path().join(format!("{format:?}-{i}.bin"));
                fs::write(&path, file).unwrap();
                let mut reader = EntryReader::open(&path, ReadMode::Cached(4096), format).unwrap();
                let mut buf = vec![0u8; size * 8];
                let err = reader
                    .next_batch(&mut buf, &mut Vec::new())
                    .unwrap_err()
                    .to_string();
                assert!(err.contains(&path.display().to_string()), "{err}");
                assert!(
                    err.contains(&format!("bytes {size}..{}", 2 * size)),
                    "{err}"
                );
                assert!(err.contains("corrupt"), "{err}");
            }
            // Read an entry at a time, the offset still counts from the
            // file's start.
            let path = tmp.path().join(format!("{format:?}-0.bin"));
            let mut reader = EntryReader::open(&path, ReadMode::Cached(4096), format).unwrap();
            let (mut buf, mut out) = (vec![0u8; size], Vec::new());
            reader.next_batch(&mut buf, &mut out).unwrap();
            assert_eq!(out, [good]);
            let err = reader.next_batch(&mut buf, &mut out).unwrap_err();
            assert!(
                err.to_string().contains(&format!("bytes {size}..")),
                "{err}"
            );
        }
    }
}
