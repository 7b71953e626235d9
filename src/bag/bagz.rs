//! The Bagz file layout of searchless_chess's `bagz.py`.
//!
//! ```text
//! [record 0][record 1]...[record n-1][end_0 u64 LE][end_1]...[end_{n-1}]
//! ```
//!
//! `end_i` is the byte offset where record i ends (record i spans
//! `[end_{i-1}, end_i)`, with 0 before the first). The last 8 bytes, the last
//! end offset, are therefore where the index starts, which is how readers
//! find it; an empty file holds no records. In a `.bagz` file each record is
//! a zstd frame of its own (with the content size in the frame header, which
//! python-zstandard's `decompress` needs) and the offsets are into the
//! compressed data. Sharded sets are named with `@N`: `action_value@4_data.bag`
//! stands for `action_value-00000-of-00004_data.bag` ... `-00003-of-00004`.

use std::{
    fs::{self, File},
    io::{self, BufWriter, Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
    sync::mpsc::{Receiver, SyncSender, sync_channel},
    thread::JoinHandle,
};

use thiserror::Error;

/// Failures reading or writing bag files, naming the file.
#[derive(Debug, Error)]
pub enum BagError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: not a bag file: {reason}", path.display())]
    Format { path: PathBuf, reason: String },
    #[error("{}: record {index}: {reason}", path.display())]
    Record {
        path: PathBuf,
        index: u64,
        reason: String,
    },
    #[error(
        "{0}: expected a shard count after '@' (e.g. action_value@2148_data.bag) between 1 and 99999"
    )]
    ShardPattern(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BagError + '_ {
    move |source| BagError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Whether a name means zstd-compressed records (`.bagz`).
pub(crate) fn is_compressed(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "bagz")
}

/// zstd level of `.bagz` records (bagz.py's default).
const RECORD_LEVEL: i32 = 3;

/// Compresses `.bagz` records one at a time with one reused context (a
/// fresh context a record costs more than the compression itself).
pub(crate) struct RecordCompressor {
    zstd: zstd::bulk::Compressor<'static>,
    out: Vec<u8>,
}

impl RecordCompressor {
    pub(crate) fn new() -> std::io::Result<RecordCompressor> {
        Ok(RecordCompressor {
            zstd: zstd::bulk::Compressor::new(RECORD_LEVEL)?,
            out: Vec::new(),
        })
    }

    /// The record compressed as a `.bagz` stores it (an empty record stays
    /// empty); the buffer is reused by the next call.
    pub(crate) fn compress(&mut self, record: &[u8]) -> std::io::Result<&mut Vec<u8>> {
        self.out.clear();
        if !record.is_empty() {
            self.out
                .reserve(zstd::zstd_safe::compress_bound(record.len()));
            self.zstd.compress_to_buffer(record, &mut self.out)?;
        }
        Ok(&mut self.out)
    }

    fn give_back(&mut self, buffer: Vec<u8>) {
        self.out = buffer;
    }
}

/// Decompresses `.bagz` records with one reused context.
pub(crate) struct RecordDecompressor(zstd::bulk::Decompressor<'static>);

impl RecordDecompressor {
    pub(crate) fn new() -> std::io::Result<RecordDecompressor> {
        Ok(RecordDecompressor(zstd::bulk::Decompressor::new()?))
    }

    /// A record as stored, decompressed into `out` (record `index` of
    /// `path`, for errors). Frames that do not state their size (other
    /// writers' streaming frames) are decoded as a stream.
    pub(crate) fn decompress(
        &mut self,
        stored: &[u8],
        out: &mut Vec<u8>,
        path: &Path,
        index: u64,
    ) -> Result<(), BagError> {
        out.clear();
        if stored.is_empty() {
            return Ok(());
        }
        let err = |e: std::io::Error| BagError::Record {
            path: path.to_owned(),
            index,
            reason: format!("zstd: {e}"),
        };
        match zstd::zstd_safe::get_frame_content_size(stored) {
            Ok(Some(n)) if n <= 1 << 30 => {
                out.reserve(n as usize);
                self.0.decompress_to_buffer(stored, out).map_err(err)?;
            }
            _ => zstd::stream::copy_decode(stored, &mut *out).map_err(err)?,
        }
        Ok(())
    }
}

/// Expands `name@N` into its N shard paths (`name-0000i-of-0000N`); a path
/// without `@` is itself.
pub(crate) fn shard_paths(pattern: &Path) -> Result<Vec<PathBuf>, BagError> {
    let text = pattern.to_string_lossy();
    let name = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(at) = name.find('@') else {
        return Ok(vec![pattern.to_owned()]);
    };
    let digits: String = name[at + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let count: u32 = digits
        .parse()
        .ok()
        .filter(|&n| (1..100_000).contains(&n))
        .ok_or_else(|| BagError::ShardPattern(text.to_string()))?;
    let rest = &name[at + 1 + digits.len()..];
    let dir = pattern.parent().unwrap_or(Path::new(""));
    Ok((0..count)
        .map(|i| dir.join(format!("{}-{i:05}-of-{count:05}{rest}", &name[..at])))
        .collect())
}

/// `stem-0000i-of-0000N_data.bag`, or `stem_data.bag` for a single shard.
pub(crate) fn shard_file_name(stem: &str, shard: u32, count: u32, compressed: bool) -> String {
    let ext = if compressed { "bagz" } else { "bag" };
    if count <= 1 {
        format!("{stem}_data.{ext}")
    } else {
        format!("{stem}-{shard:05}-of-{count:05}_data.{ext}")
    }
}

/// Writes one bag file: records go to `PATH.tmp`, end offsets to a side
/// file; `finish` appends the index and renames the file into place.
pub struct BagWriter {
    path: PathBuf,
    tmp: PathBuf,
    limits_path: PathBuf,
    records: BufWriter<File>,
    limits: BufWriter<File>,
    offset: u64,
    count: u64,
    /// Compresses records (`.bagz`), one context reused for all of them.
    compressor: Option<RecordCompressor>,
    /// Records written back to the disk up to here ([`WRITE_BEHIND`]).
    written_back: u64,
    /// Write-back started up to here.
    started: u64,
}

/// Bytes a [`BagWriter`] lets accumulate before it starts their write-back
/// (`sync_file_range`) and drops the range written before them from the page
/// cache. A 1.1 TB export then streams through a few dozen MiB of page cache
/// instead of filling it and making the kernel reclaim pages under every
/// write, which multiplied the kernel's time per byte written at 10^6 games
/// (bench/results/amd2-2026-11-29/README.md, "Figures once kept in the
/// source").
const WRITE_BEHIND: u64 = 32 << 20;

impl BagWriter {
    /// Creates a writer; `.bagz` names get zstd-compressed records.
    pub fn create(path: &Path) -> Result<BagWriter, BagError> {
        let tmp = path.with_extension(format!(
            "{}.tmp",
            path.extension()
                .map(|e| e.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        let limits_path = path.with_extension("limits.tmp");
        let records = File::create(&tmp).map_err(io_err(&tmp))?;
        let limits = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&limits_path)
            .map_err(io_err(&limits_path))?;
        Ok(BagWriter {
            path: path.to_owned(),
            tmp,
            limits_path,
            records: BufWriter::with_capacity(1 << 20, records),
            limits: BufWriter::with_capacity(1 << 16, limits),
            offset: 0,
            count: 0,
            compressor: if is_compressed(path) {
                Some(RecordCompressor::new().map_err(io_err(path))?)
            } else {
                None
            },
            written_back: 0,
            started: 0,
        })
    }

    /// Starts writing back the records written since the last call, waits
    /// for the range started the time before (long done, as a rule) and
    /// drops it from the page cache. Advice only: the data is the same
    /// whether or not the kernel takes it, so its errors are ignored here
    /// and `finish`'s fsync reports real ones.
    #[cfg(target_os = "linux")]
    fn write_behind(&mut self) -> Result<(), BagError> {
        use std::os::fd::AsRawFd;
        self.records.flush().map_err(io_err(&self.tmp))?;
        let fd = self.records.get_ref().as_raw_fd();
        let (done, started, end) = (self.written_back, self.started, self.offset);
        // SAFETY: plain system calls on our own open descriptor; ranges
        // within what was written.
        unsafe {
            libc::sync_file_range(
                fd,
                started as i64,
                (end - started) as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            );
            if started > done {
                libc::sync_file_range(
                    fd,
                    done as i64,
                    (started - done) as i64,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                );
                libc::posix_fadvise(
                    fd,
                    done as i64,
                    (started - done) as i64,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
        }
        self.written_back = started;
        self.started = end;
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    fn write_behind(&mut self) -> Result<(), BagError> {
        self.started = self.offset;
        Ok(())
    }

    /// Appends one record (compressed first in a `.bagz`).
    pub fn write(&mut self, record: &[u8]) -> Result<(), BagError> {
        match self.compressor.as_mut() {
            Some(c) => {
                let data = c.compress(record).map_err(io_err(&self.tmp))?;
                // The compressor's buffer, borrowed while appended.
                let data = std::mem::take(data);
                let result = self.write_stored(&data);
                if let Some(c) = self.compressor.as_mut() {
                    c.give_back(data);
                }
                result
            }
            None => self.write_stored(record),
        }
    }

    /// Appends one record as it is stored: compressed by a
    /// [`RecordCompressor`] in a `.bagz` (elsewhere, on any thread), as is
    /// in a `.bag`.
    pub(crate) fn write_stored(&mut self, data: &[u8]) -> Result<(), BagError> {
        self.records.write_all(data).map_err(io_err(&self.tmp))?;
        self.offset += data.len() as u64;
        self.limits
            .write_all(&self.offset.to_le_bytes())
            .map_err(io_err(&self.limits_path))?;
        self.count += 1;
        if self.offset - self.started >= WRITE_BEHIND {
            self.write_behind()?;
        }
        Ok(())
    }

    /// Appends the index, syncs and renames the file into place. Returns the
    /// number of records and the file's size.
    pub fn finish(mut self) -> Result<(u64, u64), BagError> {
        self.limits.flush().map_err(io_err(&self.limits_path))?;
        let limits = self.limits.get_mut();
        limits
            .seek(SeekFrom::Start(0))
            .map_err(io_err(&self.limits_path))?;
        io::copy(limits, &mut self.records).map_err(io_err(&self.tmp))?;
        self.records.flush().map_err(io_err(&self.tmp))?;
        self.records
            .get_ref()
            .sync_all()
            .map_err(io_err(&self.tmp))?;
        fs::remove_file(&self.limits_path).map_err(io_err(&self.limits_path))?;
        fs::rename(&self.tmp, &self.path).map_err(io_err(&self.path))?;
        Ok((self.count, self.offset + 8 * self.count))
    }
}

impl Drop for BagWriter {
    fn drop(&mut self) {
        // Unfinished writers leave nothing behind (finish renamed `tmp`).
        let _ = fs::remove_file(&self.tmp);
        let _ = fs::remove_file(&self.limits_path);
    }
}

/// Reads a byte range of a file on a thread of its own, up to
/// [`READ_AHEAD_BLOCKS`] blocks ahead of its consumer, so that the disk reads
/// while the consumer decodes: an import of bags that are not in the page
/// cache (the published train set is 1.1 TB) then costs the larger of its
/// reading and its decoding, not their sum.
struct ReadAhead {
    blocks: Receiver<io::Result<Vec<u8>>>,
    /// Blocks handed back to the reading thread for reuse.
    spare: SyncSender<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
    thread: Option<JoinHandle<()>>,
}

/// Blocks a [`ReadAhead`] reads before its consumer takes them.
const READ_AHEAD_BLOCKS: usize = 3;

impl ReadAhead {
    /// Reads `len` bytes of `file` from `start`, in blocks of `block` bytes.
    fn new(mut file: File, start: u64, len: u64, block: usize) -> io::Result<ReadAhead> {
        file.seek(SeekFrom::Start(start))?;
        let (send, blocks) = sync_channel(READ_AHEAD_BLOCKS);
        let (spare, spares) = sync_channel::<Vec<u8>>(READ_AHEAD_BLOCKS + 2);
        let thread = std::thread::Builder::new()
            .name("bag-read-ahead".into())
            .spawn(move || {
                let mut left = len;
                while left > 0 {
                    let n = (block as u64).min(left) as usize;
                    let mut buf = spares.try_recv().unwrap_or_default();
                    buf.resize(n, 0);
                    let read = file.read_exact(&mut buf).map(|()| buf);
                    let failed = read.is_err();
                    if send.send(read).is_err() || failed {
                        return; // the reader was dropped, or the error is sent
                    }
                    left -= n as u64;
                }
            })?;
        Ok(ReadAhead {
            blocks,
            spare,
            current: Vec::new(),
            pos: 0,
            thread: Some(thread),
        })
    }
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.current.len() {
            match self.blocks.recv() {
                Ok(block) => {
                    let used = std::mem::replace(&mut self.current, block?);
                    let _ = self.spare.try_send(used);
                    self.pos = 0;
                }
                Err(_) => return Ok(0), // the range is read
            }
        }
        let n = out.len().min(self.current.len() - self.pos);
        out[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing the channel stops a thread waiting to send.
        drop(std::mem::replace(&mut self.blocks, sync_channel(0).1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one bag file sequentially, holding neither its records nor its
/// index in memory: a second stream reads the index (8 bytes a record)
/// beside the records, each a few blocks ahead on a thread of its own
/// ([`ReadAhead`]), so a reader costs a few MiB whatever the file's size.
pub struct BagReader {
    path: PathBuf,
    file: ReadAhead,
    /// The index, positioned at the next record's limit.
    index: ReadAhead,
    /// Records in the file.
    len: u64,
    /// Where the index starts (the records' end).
    records_end: u64,
    next: u64,
    start: u64,
    compressed: bool,
    /// A batch's index entries ([`BagReader::read_stored_batch`]).
    limits: Vec<u8>,
}

impl BagReader {
    /// Opens a bag file and checks its index's bounds (its entries are
    /// checked as they are read).
    pub(crate) fn open(path: &Path) -> Result<BagReader, BagError> {
        let mut file = File::open(path).map_err(io_err(path))?;
        let size = file.metadata().map_err(io_err(path))?.len();
        let format = |reason: String| BagError::Format {
            path: path.to_owned(),
            reason,
        };
        let (mut len, mut records_end) = (0, 0);
        if size > 0 {
            if size < 8 {
                return Err(format(format!("{size} bytes, too small for an index")));
            }
            file.seek(SeekFrom::End(-8)).map_err(io_err(path))?;
            let mut last = [0u8; 8];
            file.read_exact(&mut last).map_err(io_err(path))?;
            let index_start = u64::from_le_bytes(last);
            if index_start > size - 8 || (size - index_start) % 8 != 0 {
                return Err(format(format!(
                    "the last 8 bytes point at offset {index_start}, which is no index start for a \
                     {size}-byte file"
                )));
            }
            len = (size - index_start) / 8;
            records_end = index_start;
        }
        let index = File::open(path).map_err(io_err(path))?;
        Ok(BagReader {
            path: path.to_owned(),
            file: ReadAhead::new(file, 0, records_end, 4 << 20).map_err(io_err(path))?,
            index: ReadAhead::new(index, records_end, len * 8, 1 << 20).map_err(io_err(path))?,
            len,
            records_end,
            next: 0,
            start: 0,
            compressed: is_compressed(path),
            limits: Vec::new(),
        })
    }

    /// Number of records.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Whether records are stored zstd-compressed ([`decompress`] them).
    pub(crate) fn compressed(&self) -> bool {
        self.compressed
    }

    /// Appends up to `max` next records as stored to `bytes`, each one's end
    /// (in `bytes`) to `ends`; returns how many, 0 at the end. Two reads a
    /// batch (its index entries, then its records, which are contiguous)
    /// instead of two a record: the reading thread of a parallel import
    /// handles every record of the file.
    pub(crate) fn read_stored_batch(
        &mut self,
        max: usize,
        bytes: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<usize, BagError> {
        let n = (self.len - self.next).min(max as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let mut limits = std::mem::take(&mut self.limits);
        limits.resize(n * 8, 0);
        self.index
            .read_exact(&mut limits)
            .map_err(io_err(&self.path))?;
        let first = self.start;
        let at = bytes.len();
        ends.reserve(n);
        for (i, limit) in limits.chunks_exact(8).enumerate() {
            let end = u64::from_le_bytes(limit.try_into().expect("8 bytes"));
            if end < self.start || end > self.records_end {
                return Err(BagError::Format {
                    path: self.path.clone(),
                    reason: format!(
                        "index entry {} ({end}) is out of order or past the records ({} bytes)",
                        self.next + i as u64,
                        self.records_end
                    ),
                });
            }
            self.start = end;
            ends.push(at + (end - first) as usize);
        }
        self.limits = limits;
        bytes.resize(at + (self.start - first) as usize, 0);
        self.file
            .read_exact(&mut bytes[at..])
            .map_err(io_err(&self.path))?;
        self.next += n as u64;
        Ok(n)
    }

    /// Reads the next record into `buf`, decompressed; false at the end.
    #[cfg(test)]
    pub(crate) fn read(&mut self, buf: &mut Vec<u8>) -> Result<bool, BagError> {
        let index = self.next;
        let mut stored = Vec::new();
        if self.read_stored_batch(1, &mut stored, &mut Vec::new())? == 0 {
            return Ok(false);
        }
        if self.compressed {
            RecordDecompressor::new()
                .map_err(io_err(&self.path))?
                .decompress(&stored, buf, &self.path, index)?;
        } else {
            *buf = stored;
        }
        Ok(true)
    }
}

/// Records as a bag stores them, one after another: what
/// [`BagWriter::write_stored`] takes, a batch at a time.
#[derive(Debug, Default)]
pub(crate) struct StoredRecords {
    pub bytes: Vec<u8>,
    /// Each record's end in `bytes`.
    pub ends: Vec<usize>,
}

impl StoredRecords {
    /// Room for `records` records of `bytes` bytes in all.
    pub(crate) fn with_capacity(bytes: usize, records: usize) -> StoredRecords {
        StoredRecords {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(records),
        }
    }

    pub(crate) fn push(&mut self, record: &[u8]) {
        self.bytes.extend_from_slice(record);
        self.ends.push(self.bytes.len());
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The records, each compressed as a `.bagz` stores it.
    pub(crate) fn compressed(&self, zstd: &mut RecordCompressor) -> std::io::Result<StoredRecords> {
        let mut out = StoredRecords {
            bytes: Vec::with_capacity(self.bytes.len() / 2),
            ends: Vec::with_capacity(self.ends.len()),
        };
        let mut start = 0;
        for &end in &self.ends {
            out.push(zstd.compress(&self.bytes[start..end])?);
            start = end;
        }
        Ok(out)
    }
}

impl crate::store::parallel::OrderedFile for BagWriter {
    type Piece = StoredRecords;
    /// Records and bytes, as [`BagWriter::finish`] says.
    type Done = (u64, u64);
    type Error = BagError;
    fn append(&mut self, records: StoredRecords) -> Result<(), BagError> {
        let mut start = 0;
        for &end in &records.ends {
            self.write_stored(&records.bytes[start..end])?;
            start = end;
        }
        Ok(())
    }
    fn finish(self) -> Result<(u64, u64), BagError> {
        BagWriter::finish(self)
    }
    fn broken(path: &Path, what: &str) -> BagError {
        BagError::Io {
            path: path.to_owned(),
            source: io::Error::other(what.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_bagz_py() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x_data.bag");
        let mut w = BagWriter::create(&path).unwrap();
        for r in [&b"abc"[..], b"", b"defgh"] {
            w.write(r).unwrap();
        }
        assert_eq!(w.finish().unwrap(), (3, 32));
        let bytes = fs::read(&path).unwrap();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "6162636465666768030000000000000003000000000000000800000000000000"
        );
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp files left"
        );
        let mut r = BagReader::open(&path).unwrap();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        while r.read(&mut buf).unwrap() {
            got.push(buf.clone());
        }
        assert_eq!(got, [b"abc".to_vec(), vec![], b"defgh".to_vec()]);
    }

    #[test]
    fn compressed_and_empty_bags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x_data.bagz");
        let mut w = BagWriter::create(&path).unwrap();
        w.write(b"hello hello hello").unwrap();
        w.write(b"").unwrap();
        w.finish().unwrap();
        let mut r = BagReader::open(&path).unwrap();
        let mut buf = Vec::new();
        assert!(r.read(&mut buf).unwrap());
        assert_eq!(buf, b"hello hello hello");
        assert!(r.read(&mut buf).unwrap());
        assert!(buf.is_empty());
        assert!(!r.read(&mut buf).unwrap());

        let empty = dir.path().join("e.bag");
        BagWriter::create(&empty).unwrap().finish().unwrap();
        assert_eq!(fs::metadata(&empty).unwrap().len(), 0);
        assert_eq!(BagReader::open(&empty).unwrap().len(), 0);
    }

    #[test]
    fn read_ahead_spans_blocks_and_stops_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big_data.bag");
        // 24 MiB of records of varied sizes: several 4 MiB read-ahead blocks,
        // records straddling their edges.
        let record = |i: u32| -> Vec<u8> {
            let n = 1000 + (i as usize * 7919) % 3000;
            (0..n).map(|j| (i as usize + j) as u8).collect()
        };
        let mut w = BagWriter::create(&path).unwrap();
        let mut n = 0;
        let mut bytes = 0;
        while bytes < 24 << 20 {
            let r = record(n);
            bytes += r.len();
            w.write(&r).unwrap();
            n += 1;
        }
        w.finish().unwrap();
        let mut r = BagReader::open(&path).unwrap();
        let mut buf = Vec::new();
        for i in 0..n {
            assert!(r.read(&mut buf).unwrap());
            assert_eq!(buf, record(i), "record {i}");
        }
        assert!(!r.read(&mut buf).unwrap());
        // A reader dropped after one record: its threads, blocked on full
        // channels, end (this test would hang otherwise).
        let mut r = BagReader::open(&path).unwrap();
        assert!(r.read(&mut buf).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(r);
    }

    #[test]
    fn corrupt_bags_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.bag");
        fs::write(&path, b"abc").unwrap();
        assert!(matches!(
            BagReader::open(&path),
            Err(BagError::Format { .. })
        ));
        // One record whose limit (255) lies past the records' 8 bytes.
        fs::write(
            &path,
            [
                1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0,
            ],
        )
        .unwrap();
        let mut r = BagReader::open(&path).unwrap();
        assert_eq!(r.len(), 2);
        let e = r.read(&mut Vec::new()).err().unwrap().to_string();
        assert!(e.contains("bad.bag") && e.contains("index entry 0"), "{e}");
    }

    #[test]
    fn shard_names() {
        let p = shard_paths(Path::new("d/action_value@3_data.bag")).unwrap();
        assert_eq!(
            p,
            [
                PathBuf::from("d/action_value-00000-of-00003_data.bag"),
                PathBuf::from("d/action_value-00001-of-00003_data.bag"),
                PathBuf::from("d/action_value-00002-of-00003_data.bag"),
            ]
        );
        assert!(shard_paths(Path::new("a@0_data.bag")).is_err());
        assert_eq!(shard_paths(Path::new("a_data.bag")).unwrap().len(), 1);
        assert_eq!(
            shard_file_name("action_value", 7, 2148, false),
            "action_value-00007-of-02148_data.bag"
        );
        assert_eq!(
            shard_file_name("state_value", 0, 1, false),
            "state_value_data.bag"
        );
    }
}
