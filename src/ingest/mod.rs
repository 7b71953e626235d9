//! The ingest stage: Lichess PGN dumps to deduplicated Parquet tables.
//!
//! ```text
//! inputs ──> chunker ──blocks──> workers (parse, check, play; N threads)
//!                                   │ results, any order
//!                                   v
//!            collector (input order: game numbers, games + rejects tables,
//!                       --max-games, --sample-games)
//!                                   │ board keys, game order (to every shard)
//!                                   v
//!            aggregators (one per hash shard, up to 4 threads: distinct
//!                         boards, first occurrence, spill when their table
//!                         is full: at most 16 MiB, less under a small
//!                         --memory-limit)
//!                                   │ distinct boards, first occurrence
//!                                   v   (spilled runs merged on up to 4 threads)
//!            finalize (N threads: chunks rendered and encoded on any
//!                      thread, each part's files assembled in order)
//! ```
//! Everything is written into a staging directory and committed atomically
//! with the manifest (see [`crate::store::commit`]).

pub mod chunker;
mod collector;
pub mod config;
mod dedup;
mod error;
pub(crate) mod finalize;
pub(crate) mod input;
mod process;
pub(crate) mod sample;
mod summary;
pub(crate) mod tables;
pub mod visitor;
pub mod worker;

pub use config::IngestOptions;
pub use dedup::MEMORY;
pub use error::IngestError;
pub use summary::Summary;

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use crossbeam_channel::{Receiver, Sender, bounded};
use indicatif::ProgressBar;

use self::{
    chunker::{Block, Chunker},
    collector::{Collector, InputShared, KeySink},
    config::{IngestConfig, Source},
    dedup::{Aggregator, KeyBatch, Keys, SpillFormat, SplitBoards},
    finalize::{BoardTotals, Layout, sizing, write_split},
    process::{dedup_shards, merge_threads, peak_rss, release_free_memory, spawn_named},
    visitor::GameVisitor,
    worker::{BlockResult, Emit, WorkerSettings, process_block},
};
use crate::{
    store::{
        RunDir, Table,
        commit::Transaction,
        manifest::{IngestRecord, InputRecord, SplitCounts, SplitManifest},
    },
    ui::group,
};
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs an ingest and commits its splits into `config.out`, in four
/// phases, each timed in the summary: [`stream`] (read, parse and play
/// the games, write `games` and `rejects`, deduplicate boards as they
/// come), [`dedup::finish`] (merge what spilled), [`write_boards`]
/// (`boards` and `legal_moves`), and [`commit`].
pub fn run(config: &IngestConfig) -> Result<Summary, IngestError> {
    let clock = Instant::now();
    let started_at = now_secs();
    let spill_format = config.spill_format;
    let run_dir = RunDir::open(&config.out)?;
    let txn = run_dir.begin()?;
    let splits = config.splits();
    if splits.len() > usize::from(u8::MAX) {
        return Err(IngestError::Internal("more than 255 splits".into()));
    }
    let bar = progress_bar(config);
    let mut phases = PhaseClock {
        lap: clock,
        phases: Vec::new(),
    };

    let Streamed {
        collector,
        aggregators,
        shared,
    } = stream(config, &txn, &splits, spill_format, &bar)?;
    let spilled = aggregators.iter().any(Aggregator::spilled);
    release_free_memory();
    phases.mark("stream");

    if spilled {
        bar.set_message("merging spilled boards");
    }
    let (split_boards, dedup_threads) = dedup::finish(aggregators, config.threads)?;
    release_free_memory();
    phases.mark("dedup");

    let totals = write_boards(config, &txn, &splits, split_boards, &bar)?;
    phases.mark("boards");

    let (inputs, counts) = collector.finish(&shared, &totals)?;
    bar.set_message("committing");
    commit(config, &run_dir, txn, &splits, &counts, &inputs, started_at)?;
    phases.mark("commit");
    bar.finish_and_clear();
    Ok(Summary {
        out: config.out.clone(),
        least_memory_limit: dedup::least_limit(splits.len()),
        splits: splits.into_iter().zip(counts).collect(),
        inputs,
        seconds: clock.elapsed().as_secs_f64(),
        spilled,
        spill_entry_bytes: spill_format.entry_bytes(),
        phases: phases.phases,
        dedup_threads,
        peak_rss: peak_rss(),
        memory_limit: config.memory_limit,
    })
}

/// Wall-clock seconds per phase, each from the end of the one before.
struct PhaseClock {
    lap: Instant,
    phases: Vec<(&'static str, f64)>,
}

impl PhaseClock {
    fn mark(&mut self, name: &'static str) {
        self.phases.push((name, self.lap.elapsed().as_secs_f64()));
        self.lap = Instant::now();
    }
}

/// What the stream phase leaves: the games and rejects written (their
/// sinks still open), each split's boards deduplicated (in memory or
/// spilled), and what the reading thread counted per input.
struct Streamed<'a> {
    collector: Collector<'a>,
    aggregators: Vec<Aggregator>,
    shared: Vec<InputShared>,
}

/// The stream phase: a reading thread cuts the inputs into blocks,
/// `config.threads` workers parse, check and play them ([`parse_blocks`]),
/// the calling thread collects their results in input order (games and
/// rejects, `--max-games`, `--sample-games`) and sends the board keys to
/// the aggregators, one thread per hash shard.
fn stream<'a>(
    config: &'a IngestConfig,
    txn: &Transaction<'_>,
    splits: &[String],
    spill_format: SpillFormat,
    bar: &ProgressBar,
) -> Result<Streamed<'a>, IngestError> {
    let split_of = |name: &str| splits.iter().position(|s| s == name).unwrap_or(0) as u8;
    let settings = WorkerSettings {
        filter: config.filter.clone(),
        limits: config.limits,
        input_splits: config.inputs.iter().map(|i| split_of(&i.split)).collect(),
        test: config
            .test_fraction
            .map(|f| (f, split_of(&config.test_split))),
        emit: if config.selection.sample.is_some() {
            Emit::Moves
        } else {
            Emit::Keys
        },
    };
    let mut collector = Collector::new(config, txn, splits, settings.input_splits.clone())?;
    let aggregators = Aggregator::sharded(
        splits.len(),
        config.memory_limit,
        &txn.scratch("boards")?,
        dedup_shards(config.threads),
        spill_format,
    );
    let shared: Vec<InputShared> = config
        .inputs
        .iter()
        .map(|_| InputShared::default())
        .collect();
    let stop = AtomicBool::new(false);
    let fatal: Mutex<Option<IngestError>> = Mutex::new(None);

    let (collected, aggregated) = std::thread::scope(|scope| {
        let threads = config.threads.max(1);
        let (block_tx, block_rx) = bounded::<Block>(threads);
        let (result_tx, result_rx) = bounded::<BlockResult>(threads);
        let (token_tx, token_rx) = bounded::<()>(threads * 4);
        let (key_txs, key_rxs): (Vec<_>, Vec<_>) = aggregators
            .iter()
            .map(|_| bounded::<Arc<KeyBatch>>(4))
            .unzip();
        let keys = KeySink { shards: key_txs };
        // Buffers go back for reuse: block bytes to the reader, key vectors
        // to the workers (saves a page fault per 4 KiB of input).
        let (recycle_tx, recycle_rx) = bounded::<Vec<u8>>(threads * 4);
        let (keys_back_tx, keys_back_rx) = bounded::<Keys>(threads * 4);
        let (stop, fatal, shared, settings) = (&stop, &fatal, &shared, &settings);

        spawn_named(scope, "cb-read", move || {
            chunk_inputs(config, shared, block_tx, token_tx, recycle_rx, stop, fatal)
        });
        for w in 0..threads {
            let worker = ParseWorker {
                config,
                settings,
                blocks: block_rx.clone(),
                results: result_tx.clone(),
                recycle_blocks: recycle_tx.clone(),
                recycled_keys: keys_back_rx.clone(),
                stop,
                fatal,
            };
            spawn_named(scope, &format!("cb-parse-{w}"), move || {
                parse_blocks(worker)
            });
        }
        drop((block_rx, result_tx, recycle_tx));
        let aggregating: Vec<_> = aggregators
            .into_iter()
            .zip(key_rxs)
            .enumerate()
            .map(|(i, (mut aggregator, key_rx))| {
                let keys_back_tx = keys_back_tx.clone();
                spawn_named(
                    scope,
                    &format!("cb-dedup-{i}"),
                    move || -> Result<Aggregator, IngestError> {
                        for batch in key_rx {
                            aggregator.add(&batch)?;
                            // The last shard done with a batch recycles it.
                            if let Some(batch) = Arc::into_inner(batch) {
                                let _ = keys_back_tx.try_send(batch.keys);
                            }
                        }
                        Ok(aggregator)
                    },
                )
            })
            .collect();
        drop(keys_back_tx);
        let mut result = collector.collect(result_rx, &token_rx, &keys, stop, bar, shared);
        if result.is_ok() && fatal.lock().map_or(true, |f| f.is_none()) {
            result = collector.replay_sample(&keys);
        }
        drop(keys);
        let aggregated: Result<Vec<Aggregator>, IngestError> = aggregating
            .into_iter()
            .map(|shard| {
                shard
                    .join()
                    .unwrap_or_else(|_| Err(IngestError::Internal("aggregator panicked".into())))
            })
            .collect();
        (result, aggregated)
    });
    if let Some(e) = fatal.lock().ok().and_then(|mut f| f.take()) {
        return Err(e);
    }
    // The aggregator's error is the cause when both failed (the collector
    // then only saw its channel close).
    let aggregators = aggregated?;
    collected?;
    Ok(Streamed {
        collector,
        aggregators,
        shared,
    })
}

/// One parsing thread's channels and the flags every thread shares.
struct ParseWorker<'s> {
    config: &'s IngestConfig,
    settings: &'s WorkerSettings,
    blocks: Receiver<Block>,
    results: Sender<BlockResult>,
    recycle_blocks: Sender<Vec<u8>>,
    recycled_keys: Receiver<Keys>,
    stop: &'s AtomicBool,
    fatal: &'s Mutex<Option<IngestError>>,
}

/// A parsing thread: parses, checks and plays each block's games until the
/// blocks run out. Once the ingest stops it answers each block with an
/// empty result, so the collector's order never waits on it.
fn parse_blocks(w: ParseWorker<'_>) {
    let (settings, stop) = (w.settings, w.stop);
    let mut visitor = GameVisitor::new(settings.filter.clone(), settings.limits);
    for block in w.blocks {
        let result = if stop.load(Ordering::Relaxed) {
            BlockResult {
                seq: block.seq,
                ..BlockResult::default()
            }
        } else {
            let keys = w.recycled_keys.try_recv().unwrap_or_default();
            // A panic is a bug, but it must fail the ingest with a
            // message, not leave the other threads waiting.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                process_block(&block, settings, &mut visitor, keys)
            }))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                if let Ok(mut f) = w.fatal.lock() {
                    f.get_or_insert(IngestError::Internal(format!(
                        "worker panicked on block {} of input {}: {what}",
                        block.seq, w.config.inputs[block.input].display
                    )));
                }
                stop.store(true, Ordering::Relaxed);
                visitor = GameVisitor::new(settings.filter.clone(), settings.limits);
                BlockResult {
                    seq: block.seq,
                    ..BlockResult::default()
                }
            })
        };
        let _ = w.recycle_blocks.try_send(block.data);
        if w.results.send(result).is_err() {
            break;
        }
    }
}

/// The boards phase: each split's distinct boards written as `boards` and
/// `legal_moves`, split by split, each within the memory the splits not
/// yet written leave; a thread reports progress until it ends.
fn write_boards(
    config: &IngestConfig,
    txn: &Transaction<'_>,
    splits: &[String],
    split_boards: Vec<SplitBoards>,
    bar: &ProgressBar,
) -> Result<Vec<BoardTotals>, IngestError> {
    let done = AtomicU64::new(0);
    let mut totals = Vec::with_capacity(splits.len());
    std::thread::scope(|scope| -> Result<(), IngestError> {
        // Progress: boards written so far, until the writers are done (the
        // channel closes then, waking the thread at once).
        let (finished_tx, finished_rx) = bounded::<()>(0);
        let done = &done;
        spawn_named(scope, "cb-progress", move || {
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                finished_rx.recv_timeout(Duration::from_millis(200))
            {
                bar.set_message(format!(
                    "writing boards and legal moves: {} boards",
                    group(done.load(Ordering::Relaxed))
                ));
            }
        });
        let result = (|| {
            // What the splits not yet written hold (their tables, or their
            // runs' buffers once open) is not the boards phase's to use.
            let mut held: u64 = split_boards.iter().map(|b| b.held_bytes()).sum();
            for (s, boards) in split_boards.into_iter().enumerate() {
                let room = config
                    .memory_limit
                    .saturating_sub(dedup::PIPELINE_FLOOR + held);
                held -= boards.held_bytes();
                let (threads, in_flight) = sizing(config.threads, room);
                totals.push(write_split(
                    boards.open(merge_threads(config.threads))?,
                    Layout::TABLES,
                    &txn.partition(Table::Boards, &splits[s])?,
                    &txn.partition(Table::LegalMoves, &splits[s])?,
                    threads,
                    in_flight,
                    done,
                )?);
            }
            Ok(())
        })();
        drop(finished_tx);
        result
    })?;
    Ok(totals)
}

/// The commit: the manifest records the ingest for every split it wrote,
/// the tables replace the splits' old ones in one step, and the old
/// splits' annotations, which no longer apply, go.
fn commit(
    config: &IngestConfig,
    run_dir: &RunDir,
    txn: Transaction<'_>,
    splits: &[String],
    counts: &[SplitCounts],
    inputs: &[InputRecord],
    started_at: u64,
) -> Result<(), IngestError> {
    let record = IngestRecord {
        chessbench_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at,
        finished_at: now_secs(),
        options: config.options_json(),
        inputs: inputs.to_vec(),
        splits_written: splits.to_vec(),
    };
    let mut manifest = run_dir.manifest()?;
    for (name, c) in splits.iter().zip(counts) {
        manifest.splits.insert(
            name.clone(),
            SplitManifest {
                ingest: record.clone(),
                counts: c.clone(),
                import: None,
            },
        );
    }
    txn.commit(&Table::INGEST, splits, manifest)?;
    // `annotate` also checks, should this be interrupted.
    for split in splits {
        crate::store::chunks::remove_split(&config.out, split)?;
    }
    Ok(())
}

fn progress_bar(config: &IngestConfig) -> ProgressBar {
    if !config.progress {
        return ProgressBar::hidden();
    }
    let total: Option<u64> = config
        .inputs
        .iter()
        .map(|i| match &i.source {
            Source::Path(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            Source::Stdin => None,
        })
        .sum();
    let template = if total.is_some() {
        "{spinner} [{elapsed_precise}] {bar:30} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} | {msg}"
    } else {
        "{spinner} [{elapsed_precise}] {bytes} read {bytes_per_sec} | {msg}"
    };
    let bar = crate::ui::bar(true, total, template);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Reads every input in order and sends its blocks.
fn chunk_inputs(
    config: &IngestConfig,
    shared: &[InputShared],
    blocks: Sender<Block>,
    tokens: Sender<()>,
    recycled: Receiver<Vec<u8>>,
    stop: &AtomicBool,
    fatal: &Mutex<Option<IngestError>>,
) {
    let mut seq = 0u64;
    let fail = |e: IngestError| {
        if let Ok(mut f) = fatal.lock() {
            f.get_or_insert(e);
        }
        stop.store(true, Ordering::Relaxed);
    };
    for (i, spec) in config.inputs.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let opened = match input::open(spec, shared[i].raw_bytes.clone()) {
            Ok(o) => o,
            Err(e) => return fail(e),
        };
        shared[i].zstd.store(opened.zstd, Ordering::Relaxed);
        let mut chunker = Chunker::new(opened.reader, i, config.limits.max_game_bytes)
            .with_recycler(recycled.clone());
        let mut first = true;
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let block = match chunker.next_block(seq, first) {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(source) => {
                    return fail(IngestError::Input {
                        input: spec.display.clone(),
                        source,
                    });
                }
            };
            first = false;
            seq += 1;
            if tokens.send(()).is_err() || blocks.send(block).is_err() {
                return;
            }
        }
    }
}
