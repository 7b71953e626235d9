//! Streaming the Lichess evaluation database
//! ([`crate::chess::lichess_evals`]) once, in bounded memory: its JSON lines
//! (`lichess_db_eval.jsonl`, plain or zstd, a file or standard input) or
//! its flattened rows (`fen,line,depth,knodes,cp,mate`: Parquet, or CSV
//! plain or zstd). Each position is offered by its key (the four FEN fields with en
//! passant only when legal, as a run's boards write them) before its
//! searches are parsed, so a pass over hundreds of millions of positions
//! parses in full only those a run wants. Malformed lines are counted and
//! handed to the caller with their reason; none stops the pass.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    fs::File,
    io::{self, BufRead, BufReader, Read},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use arrow_array::{Array, StringArray, UInt8Array, UInt32Array, UInt64Array};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Serialize;
use shakmaty::Chess;
use xxhash_rust::xxh3::xxh3_128;

pub use crate::annotate::error::EvalsReadError;
use crate::{
    chess::lichess_evals::{self, EvalsPosition, EvalsReject, FlatRow},
    options::{Consumer, Memory, Share},
    store::{
        StoreError, Table,
        commit::partition_dir,
        input::{Counting, ZSTD_MAGIC},
        open_columns, open_parquet, parquet_files,
    },
};

/// Which published form a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum EvalsFormat {
    /// `lichess_db_eval.jsonl`: one position a line, all its searches.
    JsonLines,
    /// One row per principal variation, `fen,line,depth,knodes,cp,mate`,
    /// as CSV with a header.
    FlatCsv,
    /// The same rows as Parquet, as Lichess publishes them on Hugging Face
    /// (columns by those names, numbers of any numeric type).
    FlatParquet,
}

impl EvalsFormat {
    /// The form a file name says: `.parquet` and `.csv` (or `.csv.zst`)
    /// are flattened rows, anything else (`.jsonl`, `.jsonl.zst`, standard
    /// input) JSON lines.
    pub fn of(path: &Path) -> Self {
        let name = path.to_string_lossy();
        let name = name.strip_suffix(".zst").unwrap_or(&name);
        if name.ends_with(".parquet") {
            EvalsFormat::FlatParquet
        } else if name.ends_with(".csv") {
            EvalsFormat::FlatCsv
        } else {
            EvalsFormat::JsonLines
        }
    }
}

/// What one pass read.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EvalsPass {
    /// Lines (JSON lines) or rows (flattened) read.
    pub lines: u64,
    /// Bytes read, decompressed.
    pub bytes: u64,
    /// Positions offered to the caller's filter.
    pub positions: u64,
    /// Positions the filter wanted, parsed in full.
    pub wanted: u64,
    /// Rejected lines or positions, by reason.
    pub rejected: BTreeMap<&'static str, u64>,
}

/// Opens `path` (`-`: standard input), plain or zstd (detected from the
/// first bytes).
fn open(path: &Path) -> io::Result<Box<dyn BufRead + Send>> {
    let raw: Box<dyn Read + Send> = if path == Path::new("-") {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path)?)
    };
    let mut reader = BufReader::with_capacity(1 << 20, raw);
    if reader.fill_buf()?.starts_with(&ZSTD_MAGIC) {
        Ok(Box::new(BufReader::with_capacity(
            1 << 20,
            zstd::stream::read::Decoder::with_buffer(reader)?,
        )))
    } else {
        Ok(Box::new(reader))
    }
}

/// The key a raw FEN matches boards by. Most database FENs are four
/// fields without an en passant square and are their own key, borrowed;
/// any other is parsed, and the square dropped unless a capture exists.
fn key_of(fen: &str) -> Result<Cow<'_, str>, EvalsReject> {
    if fen.bytes().filter(|&b| b == b' ').count() == 3 && fen.ends_with(" -") {
        return Ok(Cow::Borrowed(fen));
    }
    lichess_evals::position(fen).map(|(_, key)| Cow::Owned(key))
}

/// The rows of a flattened CSV file (its header skipped).
fn csv_rows(input: impl Read) -> impl Iterator<Item = io::Result<Result<FlatRow, EvalsReject>>> {
    let mut csv = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(input);
    let mut record = csv::StringRecord::new();
    std::iter::from_fn(move || match csv.read_record(&mut record) {
        Ok(false) => None,
        Ok(true) => {
            let fields: Vec<&str> = record.iter().collect();
            Some(Ok(lichess_evals::parse_flat_row(&fields)))
        }
        Err(e) => match e.into_kind() {
            csv::ErrorKind::Io(e) => Some(Err(e)),
            other => Some(Ok(Err(EvalsReject::Row(format!("{other:?}"))))),
        },
    })
}

/// The rows of a flattened Parquet file, a batch at a time.
fn parquet_rows(
    path: &Path,
) -> io::Result<impl Iterator<Item = io::Result<Result<FlatRow, EvalsReject>>>> {
    use arrow_array::{Array, Float64Array, RecordBatch, cast::AsArray, types::Float64Type};
    use arrow_schema::DataType;

    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)
        .map_err(|e| invalid(e.to_string()))?
        .with_batch_size(8192)
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    let columns = move |batch: &RecordBatch| -> io::Result<(Vec<StringArray>, Vec<Float64Array>)> {
        let column = |name: &str, to: &DataType| {
            let c = batch.column_by_name(name).ok_or_else(|| {
                invalid(format!(
                    "not the flattened form: no column {name} (expected fen, line, depth, knodes, cp, mate)"
                ))
            })?;
            arrow_cast::cast(c, to).map_err(|e| invalid(format!("column {name}: {e}")))
        };
        let strings = ["fen", "line"]
            .iter()
            .map(|n| Ok(column(n, &DataType::Utf8)?.as_string::<i32>().clone()))
            .collect::<io::Result<_>>()?;
        let numbers = ["depth", "knodes", "cp", "mate"]
            .iter()
            .map(|n| {
                Ok(column(n, &DataType::Float64)?
                    .as_primitive::<Float64Type>()
                    .clone())
            })
            .collect::<io::Result<_>>()?;
        Ok((strings, numbers))
    };
    let mut batches = reader;
    let mut current: Option<(Vec<StringArray>, Vec<Float64Array>, usize)> = None;
    Ok(std::iter::from_fn(move || {
        loop {
            if let Some((s, n, i)) = current.as_mut()
                && *i < s[0].len()
            {
                let r = *i;
                *i += 1;
                let number = |k: usize| (!n[k].is_null(r)).then(|| n[k].value(r));
                if s[0].is_null(r) {
                    return Some(Ok(Err(EvalsReject::Row("no fen".into()))));
                }
                return Some(Ok(lichess_evals::flat_row(
                    s[0].value(r),
                    if s[1].is_null(r) { "" } else { s[1].value(r) },
                    [number(0), number(1), number(2), number(3)],
                )));
            }
            match batches.next()? {
                Ok(batch) => match columns(&batch) {
                    Ok((s, n)) => current = Some((s, n, 0)),
                    Err(e) => return Some(Err(e)),
                },
                Err(e) => return Some(Err(invalid(e.to_string()))),
            }
        }
    }))
}

/// Reads the database at `path` once. `wanted(key)` says whether a
/// position is needed (a run has a board with that key); each wanted
/// position, set up and checked legal, goes to `position(line, key, pos,
/// eval)`, each rejected line or position to `rejected(line, reason)`
/// (lines numbered from 1; for flattened rows, the position's first row
/// after the header). A position nobody wants is not checked.
pub fn read(
    path: &Path,
    format: EvalsFormat,
    wanted: impl FnMut(&str) -> bool,
    position: impl FnMut(u64, &str, Chess, EvalsPosition),
    rejected: impl FnMut(u64, &EvalsReject),
) -> Result<EvalsPass, EvalsReadError> {
    let io_err = |source| EvalsReadError::Io {
        path: path.to_owned(),
        source,
    };
    let mut pass = Pass {
        stats: EvalsPass::default(),
        wanted,
        position,
        rejected,
    };
    match format {
        EvalsFormat::JsonLines => pass.json_lines(open(path).map_err(io_err)?),
        EvalsFormat::FlatCsv => {
            let read = Arc::new(AtomicU64::new(0));
            let input = Counting {
                inner: open(path).map_err(io_err)?,
                counter: read.clone(),
            };
            let done = pass.flat_rows(csv_rows(input));
            pass.stats.bytes = read.load(Ordering::Relaxed);
            done
        }
        EvalsFormat::FlatParquet => {
            if path == Path::new("-") {
                return Err(io_err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "Parquet is read from a file, not standard input",
                )));
            }
            let rows = parquet_rows(path).map_err(io_err)?;
            pass.stats.bytes = std::fs::metadata(path).map_or(0, |m| m.len());
            pass.flat_rows(rows)
        }
    }
    .map_err(io_err)?;
    Ok(pass.stats)
}

/// What one line of the JSON form is.
enum JsonLine {
    /// Empty or white space: neither a position nor a reject.
    Blank,
    /// A line without a readable key.
    Rejected(EvalsReject),
    /// A position nobody wants, left unparsed.
    Unwanted,
    /// A wanted position: its key and its searches with the position set
    /// up and checked legal, or why they could not be.
    Wanted(String, Result<(Chess, EvalsPosition), EvalsReject>),
}

/// Reads one line (`raw`, with or without its newline) as far as its key
/// and, when `wanted(key)`, in full. Both readers, one thread and many,
/// take every line through here, so they agree line for line.
fn json_line(raw: &[u8], wanted: &mut impl FnMut(&str) -> bool) -> JsonLine {
    // A line that starts with its FEN, as the database writes them: its
    // key is read from the FEN alone, and the rest of a line nobody wants
    // is not looked at (not even checked to be UTF-8).
    if let Some(rest) = raw.strip_prefix(b"{\"fen\":\"")
        && let Some(end) = memchr::memchr(b'"', rest)
        && let Ok(fen) = std::str::from_utf8(&rest[..end])
    {
        let key = match key_of(fen) {
            Ok(k) => k,
            Err(r) => return JsonLine::Rejected(r),
        };
        if !wanted(&key) {
            return JsonLine::Unwanted;
        }
        let set_up = std::str::from_utf8(raw)
            .map_err(|e| EvalsReject::Json(format!("not UTF-8: {e}")))
            .and_then(|text| lichess_evals::parse_json_line(text.trim_end()))
            .and_then(|e| lichess_evals::position(&e.fen).map(|(pos, _)| (pos, e)));
        return JsonLine::Wanted(key.into_owned(), set_up);
    }
    let text = match std::str::from_utf8(raw) {
        Ok(t) => t.trim_end(),
        Err(e) => return JsonLine::Rejected(EvalsReject::Json(format!("not UTF-8: {e}"))),
    };
    if text.is_empty() {
        return JsonLine::Blank;
    }
    // Any other line must parse in full to say its key.
    let e = match lichess_evals::parse_json_line(text) {
        Ok(e) => e,
        Err(r) => return JsonLine::Rejected(r),
    };
    let key = match key_of(&e.fen) {
        Ok(k) => k.into_owned(),
        Err(r) => return JsonLine::Rejected(r),
    };
    if !wanted(&key) {
        return JsonLine::Unwanted;
    }
    let set_up = lichess_evals::position(&e.fen).map(|(pos, _)| (pos, e));
    JsonLine::Wanted(key, set_up)
}

/// Decompressed bytes of JSON lines a parsing thread takes at a time
/// (whole lines: a block ends after its last newline).
const BLOCK_BYTES: usize = 1 << 20;

/// What [`read_parallel`] hands its caller, in file order.
pub enum ReadEvent<'a, T> {
    /// A wanted position (its line, its key) and what `work` made of it.
    Position(u64, &'a str, T),
    /// A rejected line or position (its line) and why.
    Rejected(u64, &'a EvalsReject),
    /// Positions read so far: after each block of lines (every 65,536
    /// positions for flattened rows and one thread), and at the end.
    Progress(u64),
}

/// Reads the database at `path` once, as [`read`] does, on `threads`
/// threads: for JSON lines, one thread decompresses and cuts the text into
/// blocks of whole lines, `threads` others read each line's key, ask
/// `wanted(key)`, and parse, set up and `work(key, position, eval)` each
/// wanted position, and the calling thread hands the results to
/// `event` in file order, each line numbered as [`read`] numbers it. At
/// most `2 * threads` blocks are in flight, so memory stays within
/// `2 * threads` MiB beside the results. Flattened rows, and one thread,
/// are read by [`read`] on the calling thread.
pub fn read_parallel<T: Send>(
    path: &Path,
    format: EvalsFormat,
    threads: usize,
    wanted: impl Fn(&str) -> bool + Sync,
    work: impl Fn(&str, Chess, EvalsPosition) -> T + Sync,
    event: impl FnMut(ReadEvent<'_, T>),
) -> Result<EvalsPass, EvalsReadError> {
    read_blocks(path, format, threads, BLOCK_BYTES, wanted, work, event)
}

/// A block of lines as a parsing thread read it: its counts, and its
/// positions and rejects with their line within the block (from 1).
struct Block<T> {
    /// The buffer the block was read into, its first `len` bytes the lines.
    text: Vec<u8>,
    len: usize,
    lines: u64,
    positions: u64,
    wanted: u64,
    found: Vec<(u64, Found<T>)>,
}

enum Found<T> {
    Position(String, T),
    Rejected(EvalsReject),
}

/// [`read_parallel`] with the block size given (small in the tests, so
/// that a small file makes many blocks).
fn read_blocks<T: Send>(
    path: &Path,
    format: EvalsFormat,
    threads: usize,
    block_bytes: usize,
    wanted: impl Fn(&str) -> bool + Sync,
    work: impl Fn(&str, Chess, EvalsPosition) -> T + Sync,
    mut event: impl FnMut(ReadEvent<'_, T>),
) -> Result<EvalsPass, EvalsReadError> {
    if format != EvalsFormat::JsonLines || threads <= 1 {
        let event = std::cell::RefCell::new(event);
        let mut positions = 0u64;
        let pass = read(
            path,
            format,
            |key| {
                positions += 1;
                if positions.is_multiple_of(1 << 16) {
                    (event.borrow_mut())(ReadEvent::Progress(positions));
                }
                wanted(key)
            },
            |line, key, pos, e| {
                let t = work(key, pos, e);
                (event.borrow_mut())(ReadEvent::Position(line, key, t));
            },
            |line, r| (event.borrow_mut())(ReadEvent::Rejected(line, r)),
        )?;
        (event.borrow_mut())(ReadEvent::Progress(pass.positions));
        return Ok(pass);
    }
    let io_err = |source| EvalsReadError::Io {
        path: path.to_owned(),
        source,
    };
    let input = open(path).map_err(io_err)?;
    let window = 2 * threads;
    let (free_tx, free_rx) = crossbeam_channel::bounded::<Vec<u8>>(window);
    for _ in 0..window {
        free_tx
            .send(Vec::new())
            .expect("the channel holds the window");
    }
    let (todo_tx, todo_rx) = crossbeam_channel::bounded::<(u64, Vec<u8>, usize)>(window);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<(u64, Block<T>)>();
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || cut_blocks(input, block_bytes, &free_rx, &todo_tx));
        for _ in 0..threads {
            let (todo_rx, done_tx) = (todo_rx.clone(), done_tx.clone());
            let (wanted, work) = (&wanted, &work);
            scope.spawn(move || {
                for (seq, text, len) in todo_rx {
                    let block = parse_block(text, len, wanted, work);
                    if done_tx.send((seq, block)).is_err() {
                        return;
                    }
                }
            });
        }
        drop((todo_rx, done_tx));
        // In file order: a block waits here until those before it are out.
        let mut stats = EvalsPass::default();
        let mut waiting = BTreeMap::new();
        let mut next = 0u64;
        for (seq, block) in &done_rx {
            waiting.insert(seq, block);
            while let Some(block) = waiting.remove(&next) {
                next += 1;
                let base = stats.lines;
                for (i, found) in block.found {
                    match found {
                        Found::Position(key, t) => event(ReadEvent::Position(base + i, &key, t)),
                        Found::Rejected(r) => {
                            *stats.rejected.entry(r.code()).or_default() += 1;
                            event(ReadEvent::Rejected(base + i, &r));
                        }
                    }
                }
                stats.lines += block.lines;
                stats.bytes += block.len as u64;
                stats.positions += block.positions;
                stats.wanted += block.wanted;
                event(ReadEvent::Progress(stats.positions));
                // The reader may have stopped on an error: nobody to return it to.
                let _ = free_tx.send(block.text);
            }
        }
        drop(free_tx);
        let read = reader.join().expect("the reading thread does not panic");
        read.map_err(io_err)?;
        assert!(waiting.is_empty(), "every block read was parsed");
        Ok(stats)
    })
}

/// Fills the buffers `free` returns with whole lines of `input` (each up
/// to `block_bytes`, cut after its last newline, or longer to hold one
/// long line; the last whatever is left) and sends them to `todo`,
/// numbered; stops at the input's end, or when nobody takes them.
fn cut_blocks(
    mut input: Box<dyn BufRead + Send>,
    block_bytes: usize,
    free: &crossbeam_channel::Receiver<Vec<u8>>,
    todo: &crossbeam_channel::Sender<(u64, Vec<u8>, usize)>,
) -> io::Result<()> {
    // The part of a line read past the last block's end.
    let mut carry = Vec::new();
    let mut seq = 0u64;
    loop {
        let Ok(mut text) = free.recv() else {
            return Ok(());
        };
        // A buffer keeps its length from block to block (only its first
        // `len` bytes are the block's), so it is zeroed only when it grows.
        let mut target = block_bytes.max(1).max(carry.len() + 1);
        if text.len() < target {
            text.resize(target, 0);
        }
        text[..carry.len()].copy_from_slice(&carry);
        let mut len = carry.len();
        carry.clear();
        let mut end = false;
        loop {
            // Decompressed straight into the block (a read at least as
            // large as the reader's buffer bypasses it).
            while len < target {
                let n = loop {
                    match input.read(&mut text[len..target]) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                };
                if n == 0 {
                    end = true;
                    break;
                }
                len += n;
            }
            if end {
                break;
            }
            if let Some(i) = memchr::memrchr(b'\n', &text[..len]) {
                carry.extend_from_slice(&text[i + 1..len]);
                len = i + 1;
                break;
            }
            // One line longer than the block: read on to its end.
            target = len + block_bytes.max(1);
            if text.len() < target {
                text.resize(target, 0);
            }
        }
        if len > 0 && todo.send((seq, text, len)).is_err() {
            return Ok(());
        }
        seq += 1;
        if end {
            return Ok(());
        }
    }
}

/// Reads one block's lines (split as `read_until` splits them).
fn parse_block<T>(
    text: Vec<u8>,
    len: usize,
    wanted: &impl Fn(&str) -> bool,
    work: &impl Fn(&str, Chess, EvalsPosition) -> T,
) -> Block<T> {
    let mut block = Block {
        text: Vec::new(),
        len: 0,
        lines: 0,
        positions: 0,
        wanted: 0,
        found: Vec::new(),
    };
    for raw in text[..len].split_inclusive(|&b| b == b'\n') {
        block.lines += 1;
        let line = block.lines;
        match json_line(raw, &mut |k| wanted(k)) {
            JsonLine::Blank => {}
            JsonLine::Rejected(r) => block.found.push((line, Found::Rejected(r))),
            JsonLine::Unwanted => block.positions += 1,
            JsonLine::Wanted(key, set_up) => {
                block.positions += 1;
                block.wanted += 1;
                let found = match set_up {
                    Ok((pos, e)) => {
                        let t = work(&key, pos, e);
                        Found::Position(key, t)
                    }
                    Err(r) => Found::Rejected(r),
                };
                block.found.push((line, found));
            }
        }
    }
    block.text = text;
    block.len = len;
    block
}

/// A position of flattened rows being gathered: its first row's number,
/// its key, whether it is wanted, and its rows (only the first when it is
/// not, to compare the next row's FEN with).
struct Group {
    line: u64,
    key: Result<String, EvalsReject>,
    wanted: bool,
    rows: Vec<FlatRow>,
}

/// One pass's counts and the caller's callbacks.
struct Pass<W, P, R> {
    stats: EvalsPass,
    wanted: W,
    position: P,
    rejected: R,
}

impl<W, P, R> Pass<W, P, R>
where
    W: FnMut(&str) -> bool,
    P: FnMut(u64, &str, Chess, EvalsPosition),
    R: FnMut(u64, &EvalsReject),
{
    fn reject(&mut self, line: u64, r: EvalsReject) {
        *self.stats.rejected.entry(r.code()).or_default() += 1;
        (self.rejected)(line, &r);
    }

    /// Hands a wanted position to the caller once its FEN sets up a legal
    /// position.
    fn deliver(&mut self, line: u64, key: &str, e: EvalsPosition) {
        match lichess_evals::position(&e.fen) {
            Ok((pos, _)) => (self.position)(line, key, pos, e),
            Err(r) => self.reject(line, r),
        }
    }

    fn json_lines(&mut self, mut input: Box<dyn BufRead + Send>) -> io::Result<()> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = input.read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(());
            }
            self.stats.lines += 1;
            self.stats.bytes += n as u64;
            let number = self.stats.lines;
            match json_line(&line, &mut self.wanted) {
                JsonLine::Blank => {}
                JsonLine::Rejected(r) => self.reject(number, r),
                JsonLine::Unwanted => self.stats.positions += 1,
                JsonLine::Wanted(key, set_up) => {
                    self.stats.positions += 1;
                    self.stats.wanted += 1;
                    match set_up {
                        Ok((pos, e)) => (self.position)(number, &key, pos, e),
                        Err(r) => self.reject(number, r),
                    }
                }
            }
        }
    }

    /// Flattened rows, in file order: consecutive rows of one FEN are one
    /// position. Each item is a row, or why it is not one; an error ends
    /// the pass.
    fn flat_rows(
        &mut self,
        rows: impl Iterator<Item = io::Result<Result<FlatRow, EvalsReject>>>,
    ) -> io::Result<()> {
        let mut group: Option<Group> = None;
        for row in rows {
            self.stats.lines += 1;
            let number = self.stats.lines;
            let row = match row? {
                Ok(r) => r,
                Err(r) => {
                    self.reject(number, r);
                    continue;
                }
            };
            if group.as_ref().is_none_or(|g| g.rows[0].fen != row.fen) {
                if let Some(g) = group.take() {
                    self.finish_group(g);
                }
                let key = key_of(&row.fen).map(Cow::into_owned);
                let wanted = match &key {
                    Ok(k) => {
                        self.stats.positions += 1;
                        (self.wanted)(k)
                    }
                    Err(_) => false,
                };
                group = Some(Group {
                    line: number,
                    key,
                    wanted,
                    rows: vec![row],
                });
            } else if let Some(g) = group.as_mut().filter(|g| g.wanted) {
                g.rows.push(row);
            }
        }
        if let Some(g) = group.take() {
            self.finish_group(g);
        }
        Ok(())
    }

    fn finish_group(&mut self, g: Group) {
        match g.key {
            Err(r) => self.reject(g.line, r),
            Ok(key) if g.wanted => {
                self.stats.wanted += 1;
                for e in lichess_evals::group_rows(g.rows) {
                    self.deliver(g.line, &key, e);
                }
            }
            Ok(_) => {}
        }
    }
}

/// Bytes the board index holds per board: its key's hash, its split and
/// id in a sorted list, and the hash's first position in a hash map.
pub const INDEX_BYTES_PER_BOARD: u64 = 64;

/// What `annotate --evals` holds within `--memory-limit` (its `--plan`
/// too).
pub const MEMORY: Memory<2> = Memory([
    Consumer::new(
        "a pass's boards: their index (64 bytes a board) and labels (96 more); boards that do \
         not fit are labelled in passes over the file",
        Share::Part(1, 2),
    ),
    Consumer::new(
        "the file's readers and the chunks being written",
        Share::Rest { at_least: (0, 1) },
    ),
]);

/// The boards of a run by key: every board whose FEN starts with a key's
/// four fields, so that one evaluation labels all of them.
pub(crate) struct BoardIndex {
    /// (key hash, board id, split, phase), sorted.
    entries: Vec<(u128, u64, u16, Phase)>,
    /// A key hash's first entry.
    first: HashMap<u128, u32>,
    /// Per split and phase: the indexed boards and their legal moves.
    totals: Vec<BTreeMap<Phase, Counts>>,
}

/// A board's game phase, for coverage by phase: the opening before ply 20
/// of the game it first occurred in, the endgame once at most six pieces
/// besides kings and pawns are left, the middlegame between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Opening,
    Middlegame,
    Endgame,
}

impl Phase {
    fn of(fen: &str, first_ply: Option<u32>) -> Phase {
        let placement = fen.split(' ').next().unwrap_or("");
        let pieces = placement
            .bytes()
            .filter(|b| matches!(b, b'n' | b'b' | b'r' | b'q' | b'N' | b'B' | b'R' | b'Q'))
            .count();
        if pieces <= 6 {
            Phase::Endgame
        } else if first_ply.is_some_and(|p| p < 20) {
            Phase::Opening
        } else {
            Phase::Middlegame
        }
    }
}

/// A key's hash, as the index keeps it.
pub(crate) fn key_hash(key: &str) -> u128 {
    xxh3_128(key.as_bytes())
}

/// The four FEN fields of a board's full FEN (already en passant only when
/// legal, as the boards table writes it).
fn board_key(fen: &str) -> &str {
    let mut end = 0;
    for (n, (i, _)) in fen.match_indices(' ').enumerate() {
        if n == 3 {
            end = i;
            break;
        }
    }
    if end == 0 { fen } else { &fen[..end] }
}

impl BoardIndex {
    /// The boards of `splits` that `keep(split index, board id, key hash)`
    /// keeps.
    pub(crate) fn load(
        run: &Path,
        splits: &[String],
        keep: impl Fn(usize, u64, u128) -> bool,
    ) -> Result<Self, EvalsReadError> {
        let mut entries = Vec::new();
        let mut totals = vec![BTreeMap::<Phase, Counts>::new(); splits.len()];
        for (s, split) in splits.iter().enumerate() {
            let dir = run.join(partition_dir(Table::Boards, split));
            for file in parquet_files(&dir)? {
                let reader =
                    open_columns(&file, &["board_id", "fen", "num_legal_moves", "first_ply"])?
                        .build()
                        .map_err(|e| StoreError::parquet(&file, e))?;
                for batch in reader {
                    let batch =
                        batch.map_err(|e| StoreError::Corrupt(file.clone(), e.to_string()))?;
                    let bad = || {
                        StoreError::Corrupt(file.clone(), "boards: unexpected column types".into())
                    };
                    let ids = batch
                        .column_by_name("board_id")
                        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                        .ok_or_else(bad)?;
                    let fens = batch
                        .column_by_name("fen")
                        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                        .ok_or_else(bad)?;
                    let moves = batch
                        .column_by_name("num_legal_moves")
                        .and_then(|c| c.as_any().downcast_ref::<UInt8Array>())
                        .ok_or_else(bad)?;
                    let plies = batch
                        .column_by_name("first_ply")
                        .and_then(|c| c.as_any().downcast_ref::<UInt32Array>())
                        .ok_or_else(bad)?;
                    for row in 0..batch.num_rows() {
                        if ids.is_null(row) || fens.is_null(row) {
                            continue;
                        }
                        let fen = fens.value(row);
                        let h = key_hash(board_key(fen));
                        if !keep(s, ids.value(row), h) {
                            continue;
                        }
                        let ply = (!plies.is_null(row)).then(|| plies.value(row));
                        let phase = Phase::of(fen, ply);
                        let t = totals[s].entry(phase).or_default();
                        t.boards += 1;
                        t.legal_moves += u64::from(moves.value(row));
                        entries.push((h, ids.value(row), s as u16, phase));
                    }
                }
            }
        }
        entries.sort_unstable();
        let mut first = HashMap::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            first.entry(e.0).or_insert(i as u32);
        }
        Ok(Self {
            entries,
            first,
            totals,
        })
    }

    /// Whether a board has this key.
    pub(crate) fn wants(&self, key: &str) -> bool {
        self.first.contains_key(&key_hash(key))
    }

    /// Boards indexed.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The boards with this key: (split index, board id, phase).
    pub(crate) fn boards(&self, key: &str) -> impl Iterator<Item = (usize, u64, Phase)> + '_ {
        let h = key_hash(key);
        let start = self
            .first
            .get(&h)
            .map_or(self.entries.len(), |&i| i as usize);
        self.entries[start..]
            .iter()
            .take_while(move |e| e.0 == h)
            .map(|e| (usize::from(e.2), e.1, e.3))
    }
}

/// Boards, their legal moves, and what the database labels of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Counts {
    pub boards: u64,
    /// Their legal moves: the action-value records they hold.
    pub legal_moves: u64,
    /// Boards a position of the database matches.
    pub covered: u64,
    /// Action values those boards get: a variation's first move each.
    pub action_values: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.boards += other.boards;
        self.legal_moves += other.legal_moves;
        self.covered += other.covered;
        self.action_values += other.action_values;
    }
}

/// How much of one split the database labels, in all and by game phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SplitCoverage {
    #[serde(flatten)]
    pub all: Counts,
    pub phases: BTreeMap<Phase, Counts>,
}

/// What the database covers of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Coverage {
    pub splits: BTreeMap<String, SplitCoverage>,
    /// The last pass over the database (every pass reads the same file),
    /// its rejects including positions whose searches cannot label them
    /// (`no_search`, `illegal_move`).
    pub pass: EvalsPass,
    /// Passes over the file: one per partition of the boards that fits in
    /// their share of `memory_limit` ([`MEMORY`]).
    pub passes: u64,
}

/// How much of `splits` of the run the database at `path` labels, in all
/// and by game phase ([`Phase`]), within
/// `memory_limit` bytes: the boards' index takes [`INDEX_BYTES_PER_BOARD`]
/// a board, and when the boards do not fit in their share ([`MEMORY`]) they are
/// indexed a hash partition at a time, with a pass over the file each
/// (standard input cannot be read twice, so it must fit in one). The file
/// is read on `threads` threads ([`read_parallel`]).
pub fn coverage(
    run: &Path,
    splits: &[String],
    path: &Path,
    format: EvalsFormat,
    memory_limit: u64,
    threads: usize,
) -> Result<Coverage, EvalsReadError> {
    let mut out = Coverage::default();
    let mut boards = 0u64;
    for split in splits {
        boards += parquet_files(&run.join(partition_dir(Table::Boards, split)))?
            .iter()
            .map(|f| open_parquet(f).map(|b| b.metadata().file_metadata().num_rows().max(0) as u64))
            .sum::<Result<u64, StoreError>>()?;
        out.splits.insert(split.clone(), SplitCoverage::default());
    }
    let [index, _] = MEMORY.share(memory_limit, threads);
    let room = index.max(1);
    out.passes = (boards * INDEX_BYTES_PER_BOARD).div_ceil(room).max(1);
    if out.passes > 1 && path == Path::new("-") {
        return Err(EvalsReadError::OnePass {
            boards,
            passes: out.passes,
        });
    }
    for part in 0..out.passes {
        let parts = u128::from(out.passes);
        let index = BoardIndex::load(run, splits, |_, _, h| (h % parts) as u64 == part)?;
        let mut counts = index.totals.clone();
        // A position the file repeats labels its boards once: the first.
        let mut seen = std::collections::HashSet::new();
        let mut unusable: BTreeMap<&'static str, u64> = BTreeMap::new();
        out.pass = read_parallel(
            path,
            format,
            threads,
            |key| index.wants(key),
            |_, pos, e| {
                lichess_evals::choose(&e.searches)
                    .ok_or(EvalsReject::NoSearch)
                    .and_then(|search| lichess_evals::labels(&pos, search))
                    .map(|labels| labels.actions.len() as u64)
            },
            |event| {
                let ReadEvent::Position(_, key, actions) = event else {
                    return;
                };
                let actions = match actions {
                    Ok(n) => n,
                    Err(r) => {
                        *unusable.entry(r.code()).or_default() += 1;
                        return;
                    }
                };
                if !seen.insert(key_hash(key)) {
                    return;
                }
                for (s, _, phase) in index.boards(key) {
                    let c = counts[s].entry(phase).or_default();
                    c.covered += 1;
                    c.action_values += actions;
                }
            },
        )?;
        for (reason, n) in unusable {
            *out.pass.rejected.entry(reason).or_default() += n;
        }
        for (split, phases) in splits.iter().zip(counts) {
            let c = out.splits.get_mut(split).expect("inserted above");
            for (phase, n) in phases {
                c.all.add(&n);
                c.phases.entry(phase).or_default().add(&n);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/lichess_evals_sample10.csv"
    );

    #[test]
    fn the_flattened_sample_reads_as_ten_positions() {
        let mut keys = Vec::new();
        let pass = read(
            Path::new(SAMPLE),
            EvalsFormat::of(Path::new(SAMPLE)),
            |_| true,
            |_, key, _, e| keys.push((key.to_owned(), e.searches[0].pvs.len())),
            |line, r| panic!("line {line}: {r}"),
        )
        .unwrap();
        assert_eq!((pass.lines, pass.positions, pass.wanted), (10, 10, 10));
        assert_eq!(keys.len(), 10);
        assert!(keys.iter().all(|(_, pvs)| *pvs == 1));
        assert!(pass.rejected.is_empty());
    }

    /// What a reader handed its caller, as comparable values.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Position(u64, String, EvalsPosition, String),
        Rejected(u64, EvalsReject),
    }

    #[test]
    fn many_threads_read_what_one_reads_line_for_line() {
        let search = r#"{"pvs":[{"cp":20,"line":"a2a3 a7a6"}],"knodes":10,"depth":20}"#;
        let long: Vec<String> = (0..300)
            .map(|i| format!(r#"{{"cp":{i},"line":"a2a3"}}"#))
            .collect();
        let long = format!(r#"{{"pvs":[{}],"knodes":1,"depth":9}}"#, long.join(","));
        let fens = [
            "8/8/6K1/8/7p/8/R7/6k1 b - -",
            // En passant written but not legal, and legal: both parsed
            // for their key.
            "rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq e6",
            "rnbqkbnr/ppp1pppp/8/8/2Pp4/8/PP1PPPPP/RNBQKBNR b KQkq c3",
            "8/8/8/8/8/8/8/8 w - -",
            "r3kbnr/pp1qpppp/2p5/5b2/3P4/2N5/PPP1BPPP/R1BQK2R w KQkq -",
        ];
        let mut bytes = Vec::new();
        for i in 0..240usize {
            let fen = fens[i % fens.len()];
            let line = match i % 11 {
                0 => "{broken".to_owned(),
                1 => String::new(),
                2 => format!(r#"{{"evals":[{search}],"fen":"{fen}"}}"#),
                3 => format!(r#"{{"fen":"{fen}","evals":[{long}]}}"#),
                4 => "  ".to_owned(),
                _ => format!(r#"{{"fen":"{fen}","evals":[{search}]}}"#),
            };
            bytes.extend_from_slice(line.as_bytes());
            if i % 37 == 5 {
                bytes.extend_from_slice(b"{\"fen\":\"\xff\"}");
            }
            bytes.extend_from_slice(if i % 13 == 0 { b"\r\n" } else { b"\n" });
        }
        // The last line without its newline.
        bytes
            .extend_from_slice(format!(r#"{{"fen":"{}","evals":[{search}]}}"#, fens[0]).as_bytes());
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("e.jsonl");
        std::fs::write(&plain, &bytes).unwrap();
        let packed = dir.path().join("e.jsonl.zst");
        std::fs::write(&packed, zstd::encode_all(&bytes[..], 3).unwrap()).unwrap();
        // Every other key wanted, by a rule each thread applies alike.
        let wanted = |key: &str| {
            key.len().is_multiple_of(2) || key.starts_with("8/8/6K1") || key.starts_with("8/8/8")
        };
        let board = |pos: &Chess| shakmaty::Position::board(pos).to_string();

        let one = std::cell::RefCell::new(Vec::new());
        let one_pass = read(
            &plain,
            EvalsFormat::JsonLines,
            wanted,
            |line, key, pos, e| {
                let seen = Seen::Position(line, key.to_owned(), e, board(&pos));
                one.borrow_mut().push(seen);
            },
            |line, r| one.borrow_mut().push(Seen::Rejected(line, r.clone())),
        )
        .unwrap();
        let one = one.into_inner();
        assert!(one_pass.wanted > 50 && one_pass.positions > one_pass.wanted);
        assert!(one_pass.rejected.len() >= 2, "{:?}", one_pass.rejected);
        for path in [&plain, &packed] {
            for (threads, block) in [(2, 1), (3, 64), (4, 700), (5, BLOCK_BYTES)] {
                let mut many = Vec::new();
                let mut progress = Vec::new();
                let pass = read_blocks(
                    path,
                    EvalsFormat::JsonLines,
                    threads,
                    block,
                    wanted,
                    |key, pos, e| (key.to_owned(), e, board(&pos)),
                    |event| match event {
                        ReadEvent::Position(line, key, (k, e, b)) => {
                            assert_eq!(key, k);
                            many.push(Seen::Position(line, k, e, b));
                        }
                        ReadEvent::Rejected(line, r) => many.push(Seen::Rejected(line, r.clone())),
                        ReadEvent::Progress(p) => progress.push(p),
                    },
                )
                .unwrap();
                let at = format!("{} on {threads} threads, blocks of {block}", path.display());
                assert_eq!(pass, one_pass, "{at}");
                assert_eq!(many, one, "{at}");
                assert!(
                    progress.is_sorted() && progress.last() == Some(&pass.positions),
                    "{at}"
                );
                if block < 1000 {
                    assert!(progress.len() > 20, "{at}: {} blocks", progress.len());
                }
            }
        }
        // A file cut short is an error on many threads as on one.
        let cut = dir.path().join("cut.jsonl.zst");
        let packed = std::fs::read(&packed).unwrap();
        std::fs::write(&cut, &packed[..packed.len() / 2]).unwrap();
        let one = read(
            &cut,
            EvalsFormat::JsonLines,
            wanted,
            |_, _, _, _| {},
            |_, _| {},
        );
        assert!(matches!(one, Err(EvalsReadError::Io { .. })), "{one:?}");
        let many = read_blocks(
            &cut,
            EvalsFormat::JsonLines,
            3,
            64,
            wanted,
            |_, _, _| (),
            |_| {},
        );
        assert!(matches!(many, Err(EvalsReadError::Io { .. })), "{many:?}");
    }

    #[test]
    fn json_lines_plain_and_zstd_read_alike_and_bad_lines_are_rejects() {
        let dir = tempfile::tempdir().unwrap();
        let good = r#"{"fen":"8/8/6K1/8/7p/8/R7/6k1 b - -","evals":[{"pvs":[{"mate":10,"line":"g1f1 g6g5"}],"knodes":147179,"depth":50}]}"#;
        let text = format!(
            "{good}\n{{broken\n{}\n\n{}\n",
            r#"{"fen":"8/8/8/8/8/8/8/8 w - -","evals":[]}"#,
            r#"{"evals":[],"fen":"r3kbnr/pp1qpppp/2p5/5b2/3P4/2N5/PPP1BPPP/R1BQK2R w KQkq -"}"#,
        );
        // A last line that is not UTF-8.
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(b"{\"fen\":\"\xff\"}\n");
        let plain = dir.path().join("e.jsonl");
        std::fs::write(&plain, &bytes).unwrap();
        let packed = dir.path().join("e.jsonl.zst");
        std::fs::write(&packed, zstd::encode_all(&bytes[..], 3).unwrap()).unwrap();
        let mut results = Vec::new();
        for path in [&plain, &packed] {
            let mut got = Vec::new();
            let mut bad = Vec::new();
            let pass = read(
                path,
                EvalsFormat::of(path),
                |key| key.starts_with("8/8/6K1") || key.starts_with("8/8/8/8/8"),
                |line, key, _, _| got.push((line, key.to_owned())),
                |line, r| bad.push((line, r.code())),
            )
            .unwrap();
            assert_eq!(got, vec![(1, "8/8/6K1/8/7p/8/R7/6k1 b - -".to_owned())]);
            assert_eq!(
                bad,
                vec![(2, "bad_json"), (3, "illegal_fen"), (6, "bad_json")]
            );
            // The empty board is wanted and rejected; the fifth position
            // (its FEN not first) is read and not wanted.
            assert_eq!((pass.lines, pass.positions, pass.wanted), (6, 3, 2));
            results.push(pass);
        }
        assert_eq!(results[0], results[1]);
    }

    /// The flattened form as Parquet, typed as Lichess's Hugging Face
    /// dataset types it (nullable integers), reads as the CSV does.
    #[test]
    fn the_flattened_rows_as_parquet_read_as_the_csv() {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
        use arrow_schema::{DataType, Field, Schema};
        use parquet::arrow::ArrowWriter;

        let rows: Vec<csv::StringRecord> = csv::Reader::from_path(SAMPLE)
            .unwrap()
            .records()
            .map(Result::unwrap)
            .collect();
        let text = |i: usize| -> ArrayRef {
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r[i].to_owned()),
            ))
        };
        let int = |i: usize| -> ArrayRef {
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| {
                (!r[i].is_empty()).then(|| r[i].parse::<f64>().unwrap() as i64)
            })))
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("fen", DataType::Utf8, false),
            Field::new("line", DataType::Utf8, false),
            Field::new("depth", DataType::Int64, false),
            Field::new("knodes", DataType::Int64, false),
            Field::new("cp", DataType::Int64, true),
            Field::new("mate", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![text(0), text(1), int(2), int(3), int(4), int(5)],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("evals.parquet");
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let collect = |path: &Path| {
            let mut got = Vec::new();
            let pass = read(
                path,
                EvalsFormat::of(path),
                |_| true,
                |line, key, _, e| got.push((line, key.to_owned(), e)),
                |line, r| panic!("line {line}: {r}"),
            )
            .unwrap();
            (pass.positions, pass.wanted, got)
        };
        assert_eq!(EvalsFormat::of(&path), EvalsFormat::FlatParquet);
        let parquet = collect(&path);
        assert_eq!(parquet.0, 10);
        assert_eq!(parquet, collect(Path::new(SAMPLE)));
    }

    #[test]
    fn phases_by_first_ply_and_pieces_left() {
        let start = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1";
        assert_eq!(Phase::of(start, Some(0)), Phase::Opening);
        assert_eq!(Phase::of(start, Some(40)), Phase::Middlegame);
        assert_eq!(Phase::of(start, None), Phase::Middlegame);
        // Six pieces besides kings and pawns: an endgame at any ply.
        let six = "r1b1k3/pp3ppp/8/8/8/8/PPP2PPP/R1B1K1N1 w - - 0 30";
        assert_eq!(Phase::of(six, Some(5)), Phase::Endgame);
        let seven = "r1bqkn2/pp3ppp/8/8/8/8/PPP2PPP/R1B1K1N1 w - - 0 30";
        assert_eq!(Phase::of(seven, Some(50)), Phase::Middlegame);
    }

    #[test]
    fn the_form_follows_the_file_name() {
        assert_eq!(
            EvalsFormat::of(Path::new("a.csv.zst")),
            EvalsFormat::FlatCsv
        );
        assert_eq!(EvalsFormat::of(Path::new("a.csv")), EvalsFormat::FlatCsv);
        assert_eq!(
            EvalsFormat::of(Path::new("train-00000.parquet")),
            EvalsFormat::FlatParquet
        );
        assert_eq!(
            EvalsFormat::of(Path::new("lichess_db_eval.jsonl.zst")),
            EvalsFormat::JsonLines
        );
        assert_eq!(EvalsFormat::of(Path::new("-")), EvalsFormat::JsonLines);
    }
    /// A small evaluation database made from real Stockfish output, in the
    /// database's own form (scores White's, castling king-takes-rook),
    /// reads back as Stockfish said it: each position's labels are its
    /// MultiPV lines' scores from the side to move's view, and a castling
    /// line's first move is ChessBench's two-square castling action.
    #[test]
    fn a_database_made_from_real_stockfish_output_reads_back_as_stockfish_said() {
        use shakmaty::{CastlingMode, Color, EnPassantMode, Position, fen::Fen, uci::UciMove};

        use crate::{
            chess::actions::vocabulary,
            uci_client::{self, Engine, Limit, Score},
        };

        let Some(config) = crate::testing::stockfish() else {
            return;
        };
        let mut engine = Engine::start(&config).unwrap();
        engine.set_multipv(3).unwrap();
        let side = |s: Score| match s {
            Score::Cp(c) => (Some(c), None),
            Score::Mate(n) => (None, Some(n)),
        };
        // Varied boards, and both sides able to castle either way.
        let mut positions = crate::testing::walk(8);
        for fen in [
            "r3k2r/pppq1ppp/2npbn2/2b1p3/2B1P3/2NPBN2/PPPQ1PPP/R3K2R w KQkq - 0 1",
            "r3k2r/pppq1ppp/2npbn2/2b1p3/2B1P3/2NPBN2/PPPQ1PPP/R3K2R b KQkq - 0 1",
        ] {
            positions.push(
                Fen::from_ascii(fen.as_bytes())
                    .unwrap()
                    .into_position(CastlingMode::Standard)
                    .unwrap(),
            );
        }
        let mut file = String::new();
        let mut expected = Vec::new();
        for pos in &positions {
            let fen = Fen::from_position(pos, EnPassantMode::Legal).to_string();
            engine
                .set_position(uci_client::Position::fen(&fen, &[]))
                .unwrap();
            // The castling boards search their two castlings and one other
            // move, so that castling lines are certain to come back.
            let castles: Vec<UciMove> = pos
                .legal_moves()
                .iter()
                .filter(|m| m.is_castle())
                .chain(pos.legal_moves().iter().filter(|m| !m.is_castle()).take(1))
                .map(|m| m.to_uci(CastlingMode::Standard))
                .collect();
            let only: &[UciMove] = if castles.len() == 3 { &castles } else { &[] };
            let r = engine
                .search(
                    Limit::Nodes(20_000),
                    only,
                    std::time::Duration::from_secs(30),
                )
                .unwrap();
            let mut lines = r.lines.clone();
            lines.sort_by_key(|l| l.multipv);
            let white = |s: Score| {
                let flip = if pos.turn() == Color::White { 1 } else { -1 };
                match s {
                    Score::Cp(c) => serde_json::json!({ "cp": flip * c }),
                    Score::Mate(n) => serde_json::json!({ "mate": flip * n }),
                }
            };
            let pvs: Vec<serde_json::Value> = lines
                .iter()
                .map(|l| {
                    // The line as the database writes it: each move in
                    // Chess960 notation (castling as king takes rook).
                    let mut p = pos.clone();
                    let words: Vec<String> =
                        l.pv.iter()
                            .map(|u| {
                                let m = u.to_move(&p).unwrap();
                                p.play_unchecked(m);
                                m.to_uci(CastlingMode::Chess960).to_string()
                            })
                            .collect();
                    let mut v = white(l.score);
                    v["line"] = words.join(" ").into();
                    v
                })
                .collect();
            let four: Vec<&str> = fen.split(' ').take(4).collect();
            file.push_str(
                &serde_json::json!({
                    "fen": four.join(" "),
                    "evals": [{ "pvs": pvs, "knodes": r.nodes / 1000, "depth": lines[0].depth }],
                })
                .to_string(),
            );
            file.push('\n');
            let mut actions: Vec<(u16, crate::chess::lichess_evals::SideScore)> = lines
                .iter()
                .map(|l| {
                    (
                        vocabulary().parse(&l.pv[0].to_string()).unwrap(),
                        side(l.score),
                    )
                })
                .collect();
            actions.sort_by_key(|a| a.0);
            expected.push((four.join(" "), side(lines[0].score), actions));
        }
        engine.quit();
        assert!(
            file.contains("e1h1") && file.contains("e8a8"),
            "castling written king-takes-rook: {file}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stockfish.jsonl");
        std::fs::write(&path, &file).unwrap();
        let mut got = Vec::new();
        let pass = read(
            &path,
            EvalsFormat::JsonLines,
            |_| true,
            |_, key, pos, e| {
                let search = lichess_evals::choose(&e.searches).unwrap();
                let l = lichess_evals::labels(&pos, search).unwrap();
                got.push((key.to_owned(), l.state, l.actions));
            },
            |line, r| panic!("line {line}: {r}"),
        )
        .unwrap();
        assert_eq!(pass.wanted, positions.len() as u64);
        assert_eq!(got, expected);
        let castle = vocabulary().parse("e1g1").unwrap();
        assert!(
            got.iter()
                .any(|(_, _, a)| a.iter().any(|(action, _)| *action == castle))
        );
    }
}
