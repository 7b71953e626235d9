//! Cuts a PGN byte stream into blocks of whole games, so workers can parse
//! and play them in parallel (pgn-reader's own `parallel_validate` parses on
//! one thread; here every core parses) and so every game's raw bytes are at
//! hand for UTF-8 checks and exact positions.
//!
//! A game starts with a `[` at the start of a line preceded by a blank line
//! (how every PGN exporter, Lichess included, separates games). Blocks are
//! filled to a fixed size before cutting, so the cut points depend only on
//! the bytes, never on how the OS delivered them.

use std::io::{self, Read};

use memchr::memmem;

/// Bytes per block before cutting at the last game boundary.
pub(crate) const BLOCK_BYTES: usize = 1 << 20;

/// What a block holds.
#[derive(Debug)]
pub enum BlockKind {
    /// Whole games (the last one possibly cut off when `last` is set).
    Games,
    /// One game longer than `max_game_bytes`: its bytes were skipped, not
    /// kept; `data` holds its first bytes (for the id), `skipped` its length.
    Oversized { skipped: u64 },
}

/// A run of whole games from one input.
#[derive(Debug)]
pub struct Block {
    /// Position in the overall stream of blocks (all inputs, in order).
    pub seq: u64,
    /// Index of the input in the config.
    pub input: usize,
    pub data: Vec<u8>,
    pub kind: BlockKind,
    /// Newlines in the block (oversized blocks: in the skipped bytes).
    /// Workers count them for `Games` blocks.
    pub newlines: u64,
    /// The input ends after this block.
    pub last: bool,
    /// The input ended with this read error (a truncated .zst, say).
    pub error: Option<String>,
}

impl Block {
    /// Length of the input this block covers.
    pub(crate) fn span(&self) -> u64 {
        match self.kind {
            BlockKind::Games => self.data.len() as u64,
            BlockKind::Oversized { skipped } => skipped,
        }
    }
}

/// True if `data[i]` is a `[` starting a line after a blank line, and what
/// precedes the blank line is not a tag line: pgn-reader (like python-chess)
/// reads a tag section on through blank lines, so tags after tags belong to
/// the same game.
#[inline]
fn is_game_start(data: &[u8], i: usize) -> bool {
    let after_blank = i >= 2
        && data[i] == b'['
        && data[i - 1] == b'\n'
        && (data[i - 2] == b'\n' || (i >= 3 && data[i - 2] == b'\r' && data[i - 3] == b'\n'));
    if !after_blank {
        return false;
    }
    match data[..i].iter().rposition(|b| !b.is_ascii_whitespace()) {
        None => true,
        Some(j) => {
            let line_start = memchr::memrchr(b'\n', &data[..j]).map_or(0, |k| k + 1);
            data[line_start] != b'['
        }
    }
}

/// How a game start was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartRule {
    /// A `[` line after a blank line (how exporters separate games).
    BlankLine,
    /// A `[` line after a movetext line (PGN without blank lines).
    AfterMovetext,
}

/// The last game start in `data` after position 0 by the blank-line rule,
/// or, failing that, the last `[` line after a movetext line.
pub(crate) fn last_game_start(data: &[u8]) -> Option<(usize, StartRule)> {
    let finder = memmem::FinderRev::new(b"\n[");
    let mut fallback = None;
    let mut end = data.len();
    while let Some(nl) = finder.rfind(&data[..end]) {
        let i = nl + 1;
        if is_game_start(data, i) {
            return Some((i, StartRule::BlankLine));
        }
        if fallback.is_none() && nl > 0 && after_movetext_line(data, nl) {
            fallback = Some((i, StartRule::AfterMovetext));
        }
        end = nl;
    }
    fallback
}

/// True if the line before the newline at `nl` is movetext: not blank and
/// not a tag line (so a `[` line after it starts a game in PGN written
/// without blank lines between games).
fn after_movetext_line(data: &[u8], nl: usize) -> bool {
    let line_start = memchr::memrchr(b'\n', &data[..nl]).map_or(0, |j| j + 1);
    let prev = &data[line_start..nl];
    let prev = prev.strip_suffix(b"\r").unwrap_or(prev);
    !prev.is_empty() && prev[0] != b'['
}

/// The first game start in `data[from + 1..end]`, by either rule: after a
/// blank line, or after a movetext line.
pub(crate) fn next_game_start(data: &[u8], from: usize, end: usize) -> Option<usize> {
    let end = end.min(data.len());
    let mut at = from;
    while at < end {
        let nl = at + memmem::find(&data[at..end], b"\n[")?;
        let i = nl + 1;
        if i > from && (is_game_start(data, i) || after_movetext_line(data, nl)) {
            return Some(i);
        }
        at = i;
    }
    None
}

/// Every game start (blank-line rule) in `data`, in order.
pub(crate) fn game_starts(data: &[u8]) -> impl Iterator<Item = usize> + '_ {
    memmem::find_iter(data, b"\n[")
        .map(|nl| nl + 1)
        .filter(move |&i| is_game_start(data, i))
}

/// Produces the blocks of one input.
pub struct Chunker<R> {
    reader: R,
    input: usize,
    buf: Vec<u8>,
    /// Buffers of processed blocks, handed back for reuse (no page faults).
    recycle: Option<crossbeam_channel::Receiver<Vec<u8>>>,
    /// The input separates games with blank lines (seen once): then the
    /// after-movetext rule, which a multi-line comment can fool, is not used.
    blank_lines: bool,
    block_bytes: usize,
    max_game_bytes: usize,
    done: bool,
}

/// Outcome of filling the buffer.
enum Fill {
    Full,
    Eof,
    Error(String),
}

impl<R: Read> Chunker<R> {
    pub(crate) fn new(reader: R, input: usize, max_game_bytes: usize) -> Chunker<R> {
        Chunker::with_block_bytes(reader, input, max_game_bytes, BLOCK_BYTES)
    }

    /// A chunker with another block size (tests use tiny blocks to check
    /// that results do not depend on where blocks are cut).
    pub fn with_block_bytes(
        reader: R,
        input: usize,
        max_game_bytes: usize,
        block_bytes: usize,
    ) -> Chunker<R> {
        Chunker {
            reader,
            input,
            buf: Vec::with_capacity(2 * block_bytes),
            recycle: None,
            blank_lines: false,
            block_bytes: block_bytes.max(16),
            max_game_bytes,
            done: false,
        }
    }

    /// Reuses the buffers of processed blocks sent to `rx`.
    pub(crate) fn with_recycler(mut self, rx: crossbeam_channel::Receiver<Vec<u8>>) -> Chunker<R> {
        self.recycle = Some(rx);
        self
    }

    fn fresh_buffer(&self) -> Vec<u8> {
        match self.recycle.as_ref().and_then(|rx| rx.try_recv().ok()) {
            Some(mut buf) => {
                buf.clear();
                buf
            }
            None => Vec::with_capacity(2 * self.block_bytes),
        }
    }

    fn fill(&mut self, target: usize) -> Fill {
        let mut len = self.buf.len();
        if len >= target {
            return Fill::Full;
        }
        self.buf.resize(target, 0);
        let result = loop {
            if len == target {
                break Fill::Full;
            }
            match self.reader.read(&mut self.buf[len..]) {
                Ok(0) => break Fill::Eof,
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Fill::Error(e.to_string()),
            }
        };
        self.buf.truncate(len);
        result
    }

    fn block(&self, seq: u64, data: Vec<u8>, last: bool, error: Option<String>) -> Block {
        Block {
            seq,
            input: self.input,
            data,
            kind: BlockKind::Games,
            newlines: 0,
            last,
            error,
        }
    }

    /// The next block; `seq` is the sequence number to give it. `Ok(None)`
    /// at the end of the input. `Err` only when nothing at all could be read
    /// (the input is not readable): later read errors end the input with
    /// `Block::error` set.
    pub fn next_block(&mut self, seq: u64, first: bool) -> Result<Option<Block>, io::Error> {
        if self.done {
            return Ok(None);
        }
        let mut target = self.block_bytes;
        loop {
            match self.fill(target) {
                Fill::Error(e) if first && self.buf.is_empty() => {
                    self.done = true;
                    return Err(io::Error::other(e));
                }
                Fill::Error(e) => {
                    self.done = true;
                    let data = std::mem::take(&mut self.buf);
                    return Ok(Some(self.block(seq, data, true, Some(e))));
                }
                Fill::Eof => {
                    self.done = true;
                    if self.buf.is_empty() {
                        return Ok(None);
                    }
                    let data = std::mem::take(&mut self.buf);
                    return Ok(Some(self.block(seq, data, true, None)));
                }
                Fill::Full => {}
            }
            let cut = match last_game_start(&self.buf) {
                Some((i, StartRule::BlankLine)) => {
                    self.blank_lines = true;
                    Some(i)
                }
                Some((i, StartRule::AfterMovetext)) if !self.blank_lines => Some(i),
                _ => None,
            };
            if let Some(cut) = cut {
                let mut rest = self.fresh_buffer();
                rest.extend_from_slice(&self.buf[cut..]);
                self.buf.truncate(cut);
                let data = std::mem::replace(&mut self.buf, rest);
                return Ok(Some(self.block(seq, data, false, None)));
            }
            // No boundary: the pending game is longer than the buffer.
            if self.buf.len() >= self.max_game_bytes {
                return self.skip_oversized(seq).map(Some);
            }
            target = (self.buf.len() * 2).min(self.max_game_bytes.max(self.block_bytes));
        }
    }

    /// Skips one game that exceeds `max_game_bytes`, up to the next game
    /// start, keeping only its first bytes.
    fn skip_oversized(&mut self, seq: u64) -> Result<Block, io::Error> {
        let head_len = self.buf.len().min(4096);
        let head = self.buf[..head_len].to_vec();
        let mut skipped = 0u64;
        let mut newlines = 0u64;
        let mut error = None;
        let mut at_end = false;
        let last = loop {
            let next_start = if self.blank_lines {
                game_starts(&self.buf).next()
            } else {
                next_game_start(&self.buf, 0, self.buf.len())
            };
            if let Some(cut) = next_start {
                skipped += cut as u64;
                newlines += count_newlines(&self.buf[..cut]);
                self.buf.drain(..cut);
                break false;
            }
            if at_end {
                skipped += self.buf.len() as u64;
                newlines += count_newlines(&self.buf);
                self.buf.clear();
                self.done = true;
                break true;
            }
            // Keep the last 3 bytes: a blank line + '[' may straddle reads.
            let consumed = self.buf.len().saturating_sub(3);
            skipped += consumed as u64;
            newlines += count_newlines(&self.buf[..consumed]);
            self.buf.drain(..consumed);
            match self.fill(self.block_bytes) {
                Fill::Full => {}
                Fill::Eof => at_end = true,
                Fill::Error(e) => {
                    error = Some(e);
                    at_end = true;
                }
            }
        };
        Ok(Block {
            seq,
            input: self.input,
            data: head,
            kind: BlockKind::Oversized { skipped },
            newlines,
            last,
            error,
        })
    }
}

/// Number of `\n` bytes.
#[inline]
pub(crate) fn count_newlines(data: &[u8]) -> u64 {
    // SWAR: eight bytes at a time; a byte is 0x80 in `hit` iff it was '\n'.
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut chunks = data.chunks_exact(8);
    let mut count = 0u64;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word) ^ 0x0a0a_0a0a_0a0a_0a0a;
        let hit = !(((x & LOW7) + LOW7) | x | LOW7);
        count += u64::from(hit.count_ones());
    }
    count + chunks.remainder().iter().filter(|&&b| b == b'\n').count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_newlines_exactly() {
        let mut data = Vec::new();
        for i in 0..1000u32 {
            data.push((i * 37 % 256) as u8);
            if i % 7 == 0 {
                data.push(b'\n');
            }
        }
        for start in 0..9 {
            let slice = &data[start..];
            let want = slice.iter().filter(|&&b| b == b'\n').count() as u64;
            assert_eq!(count_newlines(slice), want);
        }
        assert_eq!(count_newlines(b"\n\x0b\x8a\n"), 2);
    }

    #[test]
    fn blank_lines_inside_a_tag_section_do_not_start_a_game() {
        // A cut-off header block, a blank line, then the next game's tags:
        // pgn-reader reads them as one tag section, so there is no start.
        let pgn = b"[Event \"a\"]\n[Round \"-\"]\n\n[Event \"b\"]\n\n1. e4 *\n\n[Event \"c\"]\n";
        let starts: Vec<usize> = game_starts(pgn).collect();
        assert_eq!(starts.len(), 1);
        assert!(pgn[starts[0]..].starts_with(b"[Event \"c\"]"));
    }

    #[test]
    fn finds_the_last_game_start() {
        let pgn = b"[Event \"a\"]\n[Site \"x\"]\n\n1. e4 *\n\n[Event \"b\"]\n\n1. d4 *\n";
        let (i, rule) = last_game_start(pgn).unwrap();
        assert_eq!(rule, StartRule::BlankLine);
        assert!(pgn[i..].starts_with(b"[Event \"b\"]"));
        let starts: Vec<usize> = game_starts(pgn).collect();
        assert_eq!(starts, vec![i]);
        // CRLF files.
        let crlf = b"[Event \"a\"]\r\n\r\n1. e4 *\r\n\r\n[Event \"b\"]\r\n";
        let (i, _) = last_game_start(crlf).unwrap();
        assert!(crlf[i..].starts_with(b"[Event \"b\"]"));
        // No blank lines between games: fall back to the previous line.
        let tight = b"[Event \"a\"]\n1. e4 *\n[Event \"b\"]\n1. d4 *\n";
        let (i, rule) = last_game_start(tight).unwrap();
        assert_eq!(rule, StartRule::AfterMovetext);
        assert!(tight[i..].starts_with(b"[Event \"b\"]"));
        assert_eq!(next_game_start(tight, 0, tight.len()), Some(i));
        assert_eq!(next_game_start(tight, i, tight.len()), None);
        // A single game has no cut point.
        assert_eq!(
            last_game_start(b"[Event \"a\"]\n[Site \"b\"]\n\n1. e4 *"),
            None
        );
    }

    fn games(n: usize, pad: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            out.extend_from_slice(
                format!("[Event \"{i}\"]\n\n1. e4 {{ {} }} *\n\n", "x".repeat(pad)).as_bytes(),
            );
        }
        out
    }

    #[test]
    fn blocks_cover_the_input_exactly_once() {
        let data = games(5000, 500);
        let mut chunker = Chunker::new(&data[..], 0, 1 << 20);
        let mut joined = Vec::new();
        let mut seq = 0;
        while let Some(block) = chunker.next_block(seq, seq == 0).unwrap() {
            if !block.last {
                assert!(block.data.len() <= BLOCK_BYTES);
            }
            // Each block after the first starts at a game.
            if seq > 0 {
                assert!(block.data.starts_with(b"[Event"));
            }
            joined.extend_from_slice(&block.data);
            seq += 1;
        }
        assert!(seq > 2);
        assert_eq!(joined, data);
    }

    #[test]
    fn oversized_game_is_skipped_not_kept() {
        let mut data = games(2, 10);
        data.extend_from_slice(b"[Event \"huge\"]\n\n1. e4 { ");
        data.extend(std::iter::repeat_n(b'y', 3 << 20));
        data.extend_from_slice(b"\n }\n*\n\n");
        let tail = games(3, 10);
        data.extend_from_slice(&tail);
        let mut chunker = Chunker::new(&data[..], 0, 1 << 20);
        let mut kinds = Vec::new();
        let mut total = 0u64;
        let mut seq = 0;
        while let Some(block) = chunker.next_block(seq, seq == 0).unwrap() {
            total += block.span();
            kinds.push(matches!(block.kind, BlockKind::Oversized { .. }));
            if let BlockKind::Oversized { .. } = block.kind {
                assert!(block.data.starts_with(b"[Event \"huge\"]"));
                assert_eq!(block.newlines, 6);
            }
            seq += 1;
        }
        assert_eq!(total, data.len() as u64);
        assert_eq!(kinds.iter().filter(|k| **k).count(), 1);
    }

    struct FailAfter<'a> {
        data: &'a [u8],
    }
    impl Read for FailAfter<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.data.is_empty() {
                return Err(io::Error::other("incomplete frame"));
            }
            let n = buf.len().min(self.data.len()).min(1000);
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn read_error_ends_the_input_with_the_error() {
        let data = games(10, 10);
        let mut chunker = Chunker::new(FailAfter { data: &data }, 0, 1 << 20);
        let block = chunker.next_block(0, true).unwrap().unwrap();
        assert!(block.last);
        assert_eq!(block.error.as_deref(), Some("incomplete frame"));
        assert_eq!(block.data, data);
        assert!(chunker.next_block(1, false).unwrap().is_none());
        // Nothing readable at all is an error for the caller.
        let mut chunker = Chunker::new(FailAfter { data: b"" }, 0, 1 << 20);
        assert!(chunker.next_block(0, true).is_err());
    }
}
