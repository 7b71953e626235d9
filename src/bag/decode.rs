//! Reading `.bag` records on every core, in order.
//!
//! A thread reads the records of each set's shards as stored, a batch at a
//! time; the batches are decoded on `threads` threads (decompressed, the
//! record decoded, the FEN hashed, parsed and its legal moves listed once a
//! run of records of one board, the move checked to be legal) and handed to
//! the caller in record order. Everything that decides the import's output
//! (board ids, the order of rows) is done by the caller, on one thread, in
//! that order: the tables do not depend on the thread count.

use std::{collections::BTreeMap, path::PathBuf, sync::Arc, time::Instant};

use shakmaty::{CastlingMode, Chess, Position, fen::Fen};
use xxhash_rust::xxh3::xxh3_128;

use super::{
    bagz::{BagReader, RecordDecompressor, shard_paths},
    coder,
    error::{BagSetError, progress as records_bar},
};
use crate::chess::{
    RecordSet, actions::vocabulary, legal::PrepareError, legal::ValueKind, movegen,
};

/// Records decoded as one task.
const BATCH_RECORDS: usize = 4096;

/// A set to read: its records in every shard of `pattern`.
#[derive(Debug, Clone)]
pub(super) struct Input {
    pub set: RecordSet,
    pub pattern: PathBuf,
    pub records: u64,
}

/// What the decoding works out for each record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decode {
    /// The FEN's hash only (the board-id pass on disk).
    Keys,
    /// Everything: values, the board parsed, the move checked.
    Full,
}

/// Records of one shard as stored, read in one go.
struct RawBatch {
    set: RecordSet,
    path: Arc<PathBuf>,
    /// Index of the first record in its shard.
    first: u64,
    /// The first batch of its shard (possibly empty).
    shard_start: bool,
    compressed: bool,
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// A board as a batch first meets it: where its FEN and legal actions are
/// in the batch's buffers, its terminal kind (`None`: the game goes on) and
/// the side to move.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BoardAt {
    fen: std::ops::Range<usize>,
    actions: std::ops::Range<usize>,
    pub terminal: Option<ValueKind>,
    pub black_to_move: bool,
}

/// A board of a batch, borrowed from its buffers.
pub(super) struct Board<'a> {
    pub fen: &'a str,
    pub actions: &'a [u16],
    pub terminal: Option<ValueKind>,
    pub black_to_move: bool,
}

impl Board<'_> {
    /// The kind of value the board has.
    pub fn kind(&self) -> ValueKind {
        self.terminal.unwrap_or(ValueKind::Search)
    }
}

/// Parses `fen` into `batch`'s buffers.
fn parse_board(fen: &str, batch: &mut Batch) -> Result<(), PrepareError> {
    let pos: Chess = Fen::from_ascii(fen.as_bytes())
        .map_err(|e| PrepareError::Fen(fen.to_owned(), e.to_string()))?
        .into_position(CastlingMode::Standard)
        .map_err(|e| PrepareError::Fen(fen.to_owned(), e.to_string()))?;
    let from = batch.actions.len();
    let in_check = movegen::legal_actions_of(&pos, &mut batch.actions);
    let at = batch.fens.len();
    batch.fens.push_str(fen);
    let none = batch.actions.len() == from;
    batch.boards.push(BoardAt {
        fen: at..batch.fens.len(),
        actions: from..batch.actions.len(),
        terminal: none.then_some(if in_check {
            ValueKind::Checkmate
        } else {
            ValueKind::Stalemate
        }),
        black_to_move: pos.turn().is_black(),
    });
    Ok(())
}

/// One decoded record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    /// xxh3-128 of the FEN: the board's identity.
    pub key: u128,
    /// Win probability (state and action values).
    pub win_prob: f64,
    /// The move's action (behavioural cloning and action values).
    pub action: u16,
    /// The record's board in [`Batch::boards`] ([`Decode::Full`] only).
    pub board: u32,
}

/// A batch of records, decoded, in record order.
pub(super) struct Batch {
    pub set: RecordSet,
    pub path: Arc<PathBuf>,
    /// Index of the first record in its shard.
    pub first: u64,
    /// The first batch of its shard.
    pub shard_start: bool,
    pub records: Vec<Record>,
    /// The boards of the records, once a run of records of one board.
    boards: Vec<BoardAt>,
    /// Their FENs and legal actions, one after another.
    fens: String,
    actions: Vec<u16>,
}

impl Batch {
    /// Board `i` of the batch (a record's [`Record::board`]).
    pub fn board(&self, i: u32) -> Board<'_> {
        let b = &self.boards[i as usize];
        Board {
            fen: &self.fens[b.fen.clone()],
            actions: &self.actions[b.actions.clone()],
            terminal: b.terminal,
            black_to_move: b.black_to_move,
        }
    }

    /// An error at record `i` of the batch.
    pub fn error(&self, i: usize, reason: String) -> BagSetError {
        BagSetError::Record {
            path: self.path.as_ref().clone(),
            index: self.first + i as u64,
            reason,
        }
    }
}

/// Decodes a batch: the first bad record's error names its file and index.
fn decode(raw: &RawBatch, mode: Decode) -> Result<Batch, BagSetError> {
    let n = raw.ends.len();
    let mut batch = Batch {
        set: raw.set,
        path: Arc::clone(&raw.path),
        first: raw.first,
        shard_start: raw.shard_start,
        records: Vec::with_capacity(n),
        boards: Vec::new(),
        fens: String::new(),
        actions: Vec::new(),
    };
    let vocab = vocabulary();
    let mut plain = Vec::new();
    let mut zstd = match raw.compressed {
        true => Some(RecordDecompressor::new().map_err(|e| batch_error(raw, 0, e.to_string()))?),
        false => None,
    };
    let mut start = 0;
    for (i, &end) in raw.ends.iter().enumerate() {
        let stored = &raw.bytes[start..end];
        start = end;
        let bytes = match zstd.as_mut() {
            Some(zstd) => {
                zstd.decompress(stored, &mut plain, &raw.path, raw.first + i as u64)?;
                &plain[..]
            }
            None => stored,
        };
        let at = |reason: String| batch_error(raw, i, reason);
        let (fen, uci, win_prob) = match raw.set {
            RecordSet::StateValue => coder::decode_state_value(bytes)
                .map(|(fen, p)| (fen, None, p))
                .map_err(|e| at(e.to_string()))?,
            RecordSet::BehavioralCloning => coder::decode_behavioral_cloning(bytes)
                .map(|(fen, uci)| (fen, Some(uci), f64::NAN))
                .map_err(|e| at(e.to_string()))?,
            RecordSet::ActionValue => coder::decode_action_value(bytes)
                .map(|(fen, uci, p)| (fen, Some(uci), p))
                .map_err(|e| at(e.to_string()))?,
        };
        let key = xxh3_128(fen.as_bytes());
        if mode == Decode::Keys {
            batch.records.push(Record {
                key,
                win_prob,
                action: 0,
                board: 0,
            });
            continue;
        }
        // Records of one board are usually consecutive: parse it once.
        let same = batch.records.last().is_some_and(|r| r.key == key);
        if !same {
            parse_board(fen, &mut batch).map_err(|e| at(e.to_string()))?;
        }
        let board = batch.boards.len() - 1;
        let action = match uci {
            None => 0,
            Some(uci) => {
                let action = vocab.parse(uci).ok_or_else(|| {
                    at(format!(
                        "move {uci:?} is not one of ChessBench's 1968 actions"
                    ))
                })?;
                if batch
                    .board(board as u32)
                    .actions
                    .binary_search(&action)
                    .is_err()
                {
                    return Err(at(format!("move {uci} is not legal in {fen}")));
                }
                action
            }
        };
        batch.records.push(Record {
            key,
            win_prob,
            action,
            board: board as u32,
        });
    }
    Ok(batch)
}

fn batch_error(raw: &RawBatch, i: usize, reason: String) -> BagSetError {
    BagSetError::Record {
        path: raw.path.as_ref().clone(),
        index: raw.first + i as u64,
        reason,
    }
}

/// Seconds the two serial parts of a pass worked (waits left out): the
/// thread reading the files, and the one applying the batches. Past a few
/// decoding threads the larger bounds the pass's wall time.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct SerialBusy {
    pub read_s: f64,
    pub apply_s: f64,
}

/// Reads every record of `inputs` in order, decoded as `mode` says on
/// `threads` threads, and gives `apply` the batches in record order, with a
/// progress bar per set (`pass` added to its name). Shards are opened one
/// at a time (the published action values are 2,148 files). With one
/// thread everything is done on the calling thread.
pub(super) fn each_batch(
    inputs: &[Input],
    threads: usize,
    mode: Decode,
    progress: bool,
    pass: &str,
    mut apply: impl FnMut(&Batch) -> Result<(), BagSetError>,
) -> Result<SerialBusy, BagSetError> {
    let bars: Vec<_> = inputs
        .iter()
        .map(|input| {
            records_bar(
                progress,
                input.records,
                &format!("{}{pass}", input.set.name()),
            )
        })
        .collect();
    let set_index = |set: RecordSet| inputs.iter().position(|i| i.set == set).unwrap_or(0);
    let mut apply_s = 0.0;
    let mut applied = |batch: &Batch| -> Result<(), BagSetError> {
        let started = Instant::now();
        apply(batch)?;
        apply_s += started.elapsed().as_secs_f64();
        let bar = &bars[set_index(batch.set)];
        bar.inc(batch.records.len() as u64);
        Ok(())
    };
    let read_s = if threads <= 1 {
        read_batches(inputs, |raw| applied(&decode(&raw, mode)?))
    } else {
        parallel(inputs, threads, mode, &mut applied)
    };
    for bar in bars {
        bar.finish_and_clear();
    }
    Ok(SerialBusy {
        read_s: read_s?,
        apply_s,
    })
}

/// Reads the records of `inputs` in order, as stored, a batch at a time;
/// returns the seconds spent reading (`batch`'s own time left out).
fn read_batches(
    inputs: &[Input],
    mut batch: impl FnMut(RawBatch) -> Result<(), BagSetError>,
) -> Result<f64, BagSetError> {
    let mut reading = 0.0;
    for input in inputs {
        for path in shard_paths(&input.pattern)? {
            let mut started = Instant::now();
            let mut reader = BagReader::open(&path)?;
            let path = Arc::new(path);
            let mut first = 0u64;
            loop {
                let mut raw = RawBatch {
                    set: input.set,
                    path: Arc::clone(&path),
                    first,
                    shard_start: first == 0,
                    compressed: reader.compressed(),
                    bytes: Vec::new(),
                    ends: Vec::with_capacity(BATCH_RECORDS),
                };
                let n = reader.read_stored_batch(BATCH_RECORDS, &mut raw.bytes, &mut raw.ends)?;
                reading += started.elapsed().as_secs_f64();
                if n > 0 || first == 0 {
                    batch(raw)?;
                }
                first += n as u64;
                if n < BATCH_RECORDS {
                    break;
                }
                started = Instant::now();
            }
        }
    }
    Ok(reading)
}

/// [`each_batch`] on `threads` decoding threads beside a reading one; the
/// calling thread applies. Returns the reading thread's busy seconds.
fn parallel(
    inputs: &[Input],
    threads: usize,
    mode: Decode,
    apply: &mut dyn FnMut(&Batch) -> Result<(), BagSetError>,
) -> Result<f64, BagSetError> {
    // Batches in flight: enough to keep every thread busy while the
    // applying thread works through the oldest.
    let window = threads * 4;
    std::thread::scope(|scope| {
        let (raw_tx, raw_rx) = crossbeam_channel::bounded::<(usize, RawBatch)>(window);
        let (out_tx, out_rx) =
            crossbeam_channel::bounded::<(usize, Result<Batch, BagSetError>)>(window);
        // Slots: the reader waits for one before reading a batch, and the
        // applying thread gives one back per batch applied, so at most
        // `window` batches exist at a time.
        let (slot_tx, slot_rx) = crossbeam_channel::bounded::<()>(window);
        for _ in 0..window {
            let _ = slot_tx.send(());
        }
        let reader = std::thread::Builder::new()
            .name("cb-bag-read".into())
            .spawn_scoped(scope, move || -> Result<f64, BagSetError> {
                let mut seq = 0usize;
                let sent = read_batches(inputs, |raw| {
                    if slot_rx.recv().is_err() || raw_tx.send((seq, raw)).is_err() {
                        return Err(BagSetError::Io {
                            path: PathBuf::from("-"),
                            source: std::io::Error::other("import stopped"),
                        });
                    }
                    seq += 1;
                    Ok(())
                });
                drop(raw_tx);
                sent
            })
            .map_err(|e| BagSetError::Io {
                path: PathBuf::from("-"),
                source: e,
            })?;
        for t in 0..threads {
            let (raw_rx, out_tx) = (raw_rx.clone(), out_tx.clone());
            std::thread::Builder::new()
                .name(format!("cb-bag-{t}"))
                .spawn_scoped(scope, move || {
                    for (seq, raw) in raw_rx {
                        let decoded =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                decode(&raw, mode)
                            }))
                            .unwrap_or_else(|_| {
                                Err(batch_error(&raw, 0, "a decoding thread panicked".into()))
                            });
                        if out_tx.send((seq, decoded)).is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| BagSetError::Io {
                    path: PathBuf::from("-"),
                    source: e,
                })?;
        }
        drop((raw_rx, out_tx));
        let applied = (|| -> Result<(), BagSetError> {
            let mut pending = BTreeMap::new();
            let mut next = 0usize;
            for (seq, batch) in &out_rx {
                pending.insert(seq, batch);
                while let Some(batch) = pending.remove(&next) {
                    apply(&batch?)?;
                    next += 1;
                    let _ = slot_tx.send(());
                }
            }
            Ok(())
        })();
        // Stops the reader and the decoders if the apply failed.
        drop(out_rx);
        drop(slot_tx);
        let read = reader.join().unwrap_or_else(|_| {
            Err(BagSetError::Io {
                path: PathBuf::from("-"),
                source: std::io::Error::other("the bag reading thread panicked"),
            })
        });
        // The applying side's error comes first: a reader stopped by it
        // only says so.
        applied?;
        read
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boards_parse_with_their_actions_and_terminal_kind() {
        let mut batch = Batch {
            set: RecordSet::StateValue,
            path: Arc::new(PathBuf::from("x.bag")),
            first: 0,
            shard_start: true,
            records: Vec::new(),
            boards: Vec::new(),
            fens: String::new(),
            actions: Vec::new(),
        };
        parse_board(
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
            &mut batch,
        )
        .unwrap();
        parse_board(
            "rnb1kbnr/pppp1ppp/8/4p3/6Pq/5P2/PPPPP2P/RNBQKBNR w KQkq - 1 3",
            &mut batch,
        )
        .unwrap();
        parse_board(
            "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1",
            &mut batch,
        )
        .unwrap();
        assert!(parse_board("not a fen", &mut batch).is_err());
        let start = batch.board(0);
        assert_eq!(start.actions.len(), 20);
        assert!(start.actions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            (start.kind(), start.black_to_move),
            (ValueKind::Search, false)
        );
        assert_eq!(batch.board(1).kind(), ValueKind::Checkmate);
        assert!(batch.board(1).actions.is_empty());
        assert_eq!(
            batch.board(2).fen,
            "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
        );
        assert!(batch.board(2).black_to_move);
        assert_eq!(
            batch.boards.len(),
            3,
            "a FEN that does not parse adds no board"
        );
    }
}
