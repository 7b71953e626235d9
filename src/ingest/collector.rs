//! The collector: block results in input order, numbered as games, into the
//! `games` and `rejects` tables and the sampler, with `--max-games`; board
//! keys go on to every deduplication shard ([`KeySink`]).

use std::{
    collections::{BTreeMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, Sender};
use indicatif::ProgressBar;

use super::{
    config::IngestConfig,
    dedup::{BatchGame, KeyBatch},
    error::IngestError,
    finalize::BoardTotals,
    sample::{Candidate, Reservoir},
    tables::{GamesBuilder, Position, RejectsBuilder, RowSink},
    worker::{BlockResult, Verdict, replay},
};
use crate::{
    store::{
        StoreError, Table,
        commit::Transaction,
        manifest::{InputRecord, SplitCounts},
    },
    ui::group,
};

/// Every board key batch goes to every dedup shard (each takes its keys).
pub(super) struct KeySink {
    pub(super) shards: Vec<Sender<Arc<KeyBatch>>>,
}

impl KeySink {
    pub(super) fn send(&self, batch: KeyBatch) -> Result<(), IngestError> {
        let batch = Arc::new(batch);
        for shard in &self.shards {
            shard
                .send(Arc::clone(&batch))
                .map_err(|_| IngestError::Internal("board aggregator stopped early".into()))?;
        }
        Ok(())
    }
}

/// Per-input state shared with the chunker thread.
#[derive(Default)]
pub(super) struct InputShared {
    pub(super) raw_bytes: Arc<AtomicU64>,
    pub(super) zstd: AtomicBool,
}

pub(super) struct InputState {
    pub(super) record: InputRecord,
    pub(super) game_index: u64,
    /// Newlines before the next block.
    pub(super) lines: u64,
}

/// Consumes block results in input order.
pub(super) struct Collector<'a> {
    pub(super) config: &'a IngestConfig,
    pub(super) inputs: Vec<InputState>,
    pub(super) input_splits: Vec<u8>,
    pub(super) games: Vec<RowSink<GamesBuilder>>,
    pub(super) rejects: Vec<RowSink<RejectsBuilder>>,
    pub(super) counts: Vec<SplitCounts>,
    /// Accepted games offered to the sampler, per split.
    pub(super) offered: Vec<u64>,
    pub(super) next_game_no: u64,
    pub(super) accepted: u64,
    pub(super) stopped: bool,
    pub(super) reservoir: Option<Reservoir>,
}

impl<'a> Collector<'a> {
    /// A collector of `config`'s inputs into the games and rejects tables of
    /// `splits` in `txn` (`input_splits`: each input's split, as an index of
    /// `splits`), with the sampler's reservoir when `--sample-games` asks.
    pub(super) fn new(
        config: &'a IngestConfig,
        txn: &Transaction<'_>,
        splits: &[String],
        input_splits: Vec<u8>,
    ) -> Result<Collector<'a>, IngestError> {
        Ok(Collector {
            config,
            inputs: config
                .inputs
                .iter()
                .map(|i| InputState {
                    record: InputRecord {
                        source: i.display.clone(),
                        split: i.split.clone(),
                        zstd: false,
                        bytes_read: 0,
                        pgn_bytes: 0,
                        games_read: 0,
                        error: None,
                    },
                    game_index: 0,
                    lines: 0,
                })
                .collect(),
            input_splits,
            games: splits
                .iter()
                .map(|s| Ok(RowSink::new(txn.partition(Table::Games, s)?)))
                .collect::<Result<_, StoreError>>()?,
            rejects: splits
                .iter()
                .map(|s| Ok(RowSink::new(txn.partition(Table::Rejects, s)?)))
                .collect::<Result<_, StoreError>>()?,
            counts: vec![SplitCounts::default(); splits.len()],
            offered: vec![0; splits.len()],
            next_game_no: 0,
            accepted: 0,
            stopped: false,
            reservoir: match config.selection.sample {
                Some(s) => Some(Reservoir::new(s.games, s.seed, &txn.scratch("sample")?)?),
                None => None,
            },
        })
    }
}

impl Collector<'_> {
    /// Closes the games and rejects tables and completes the counts: each
    /// input's bytes as the reading thread counted them, each split's
    /// records as the boards phase wrote them (its boards must be the ones
    /// the stream counted).
    pub(super) fn finish(
        self,
        shared: &[InputShared],
        totals: &[BoardTotals],
    ) -> Result<(Vec<InputRecord>, Vec<SplitCounts>), IngestError> {
        let Collector {
            inputs,
            games,
            rejects,
            mut counts,
            ..
        } = self;
        for sink in games {
            sink.finish()?;
        }
        for sink in rejects {
            sink.finish()?;
        }
        let mut inputs: Vec<InputRecord> = inputs.into_iter().map(|i| i.record).collect();
        for (record, sh) in inputs.iter_mut().zip(shared) {
            record.bytes_read = sh.raw_bytes.load(Ordering::Relaxed);
            record.zstd = sh.zstd.load(Ordering::Relaxed);
        }
        for (c, t) in counts.iter_mut().zip(totals) {
            let BoardTotals {
                state_value,
                behavioral_cloning,
                action_value,
                positions,
            } = *t;
            c.state_value = state_value;
            c.behavioral_cloning = behavioral_cloning;
            c.action_value = action_value;
            if c.positions != positions {
                return Err(IngestError::Internal(format!(
                    "{} boards were counted but {positions} written",
                    c.positions
                )));
            }
        }
        Ok((inputs, counts))
    }

    pub(super) fn collect(
        &mut self,
        results: Receiver<BlockResult>,
        tokens: &Receiver<()>,
        keys: &KeySink,
        stop: &AtomicBool,
        bar: &ProgressBar,
        shared: &[InputShared],
    ) -> Result<(), IngestError> {
        let mut pending: BTreeMap<u64, BlockResult> = BTreeMap::new();
        let mut next = 0u64;
        let mut outcome = Ok(());
        let started = Instant::now();
        let mut last_draw = Instant::now();
        for result in results {
            pending.insert(result.seq, result);
            while let Some(r) = pending.remove(&next) {
                next += 1;
                let _ = tokens.recv();
                if outcome.is_ok() && !stop.load(Ordering::Relaxed) {
                    outcome = self.process(r, keys);
                    if outcome.is_err() || self.stopped {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            if last_draw.elapsed() > Duration::from_millis(250) {
                last_draw = Instant::now();
                bar.set_position(
                    shared
                        .iter()
                        .map(|i| i.raw_bytes.load(Ordering::Relaxed))
                        .sum(),
                );
                let read: u64 = self.inputs.iter().map(|i| i.record.games_read).sum();
                let rejected: u64 = self.counts.iter().flat_map(|c| c.rejected.values()).sum();
                let rate = read as f64 / started.elapsed().as_secs_f64().max(1e-3);
                bar.set_message(format!(
                    "{} games ({} rejected), {:.0} games/s",
                    group(read),
                    group(rejected),
                    rate
                ));
            }
        }
        outcome
    }

    pub(super) fn process(&mut self, r: BlockResult, keys: &KeySink) -> Result<(), IngestError> {
        let input = r.input;
        let source = self.config.inputs[input].display.as_str();
        let reject_split = usize::from(self.input_splits[input]);
        let (base_offset, base_line) = {
            let st = &self.inputs[input];
            (st.record.pgn_bytes, st.lines + 1)
        };
        let mut batch_games = Vec::new();
        let (mut key_cursor, mut move_cursor) = (0usize, 0usize);
        for g in r.games {
            if self.stopped {
                break;
            }
            let game_no = self.next_game_no;
            self.next_game_no += 1;
            let st = &mut self.inputs[input];
            let at = Position {
                game_no,
                source,
                game_index: st.game_index,
                byte_offset: base_offset + g.offset,
                line: base_line + g.line,
            };
            st.game_index += 1;
            st.record.games_read += 1;
            match g.verdict {
                Verdict::Accepted {
                    meta,
                    split,
                    emitted,
                } => {
                    let s = usize::from(split);
                    let emitted = emitted as usize;
                    self.accepted += 1;
                    if let Some(reservoir) = self.reservoir.as_mut() {
                        self.offered[s] += 1;
                        let moves = r.moves[move_cursor..move_cursor + emitted].to_vec();
                        move_cursor += emitted;
                        reservoir.offer(&Candidate {
                            game_no,
                            split,
                            input: input as u32,
                            game_index: at.game_index,
                            byte_offset: at.byte_offset,
                            line: at.line,
                            meta: *meta,
                            moves,
                        })?;
                    } else {
                        self.games[s].builder.push(&at, &meta);
                        self.games[s].row_added()?;
                        self.counts[s].games += 1;
                        self.counts[s].positions += emitted as u64;
                        batch_games.push(BatchGame {
                            split,
                            game_no,
                            boards: emitted as u32,
                        });
                        key_cursor += emitted;
                    }
                    if self.config.selection.max_games == Some(self.accepted) {
                        self.stopped = true;
                    }
                }
                Verdict::Rejected {
                    reason,
                    detail,
                    ply,
                    id,
                } => {
                    self.rejects[reject_split].builder.push(
                        &at,
                        reason,
                        detail.as_deref(),
                        ply,
                        id.as_deref(),
                    );
                    self.rejects[reject_split].row_added()?;
                    *self.counts[reject_split]
                        .rejected
                        .entry(reason.name().to_owned())
                        .or_default() += 1;
                }
            }
        }
        let st = &mut self.inputs[input];
        st.record.pgn_bytes += r.span;
        st.lines += r.newlines;
        if r.last {
            st.record.error = r.error;
        }
        if !batch_games.is_empty() {
            let mut key_vec = r.keys;
            key_vec.truncate(key_cursor);
            let batch = KeyBatch {
                keys: key_vec,
                games: batch_games,
            };
            keys.send(batch)?;
        }
        Ok(())
    }

    /// With `--sample-games`: writes the drawn games and feeds their boards,
    /// in game order.
    pub(super) fn replay_sample(&mut self, keys: &KeySink) -> Result<(), IngestError> {
        let Some(reservoir) = self.reservoir.take() else {
            return Ok(());
        };
        let (selected, spool): (HashSet<u64>, _) = reservoir.finish()?;
        let mut batch = KeyBatch::default();
        for candidate in spool {
            let c = candidate?;
            if !selected.contains(&c.game_no) {
                continue;
            }
            let s = usize::from(c.split);
            let at = Position {
                game_no: c.game_no,
                source: self.config.inputs[c.input as usize].display.as_str(),
                game_index: c.game_index,
                byte_offset: c.byte_offset,
                line: c.line,
            };
            self.games[s].builder.push(&at, &c.meta);
            self.games[s].row_added()?;
            let before = batch.keys.len();
            replay(&c.moves, &mut batch.keys).map_err(|e| {
                IngestError::Internal(format!("replaying sampled game {}: {e}", c.game_no))
            })?;
            let boards = (batch.keys.len() - before) as u32;
            self.counts[s].games += 1;
            self.counts[s].positions += u64::from(boards);
            batch.games.push(BatchGame {
                split: c.split,
                game_no: c.game_no,
                boards,
            });
            if batch.keys.len() >= 1 << 16 {
                keys.send(std::mem::take(&mut batch))?;
            }
        }
        if !batch.games.is_empty() {
            keys.send(batch)?;
        }
        for (c, offered) in self.counts.iter_mut().zip(&self.offered) {
            c.not_sampled = offered - c.games;
        }
        Ok(())
    }
}
