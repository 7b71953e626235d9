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
pub mod config;
mod dedup;
pub(crate) mod finalize;
pub(crate) mod input;
pub(crate) mod sample;
pub(crate) mod tables;
pub mod visitor;
pub mod worker;

pub use config::IngestOptions;

use std::{
    collections::{BTreeMap, HashSet},
    io::{self, Write},
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use crossbeam_channel::{Receiver, Sender, bounded};
use indicatif::ProgressBar;
use thiserror::Error;

use self::{
    chunker::{Block, Chunker},
    config::{ConfigError, IngestConfig, Source},
    dedup::{Aggregator, BatchGame, KeyBatch, Keys, SpillFormat, SplitBoards},
    finalize::{BoardTotals, Layout, sizing, write_split},
    sample::{Candidate, Reservoir},
    tables::{GamesBuilder, Position, RejectsBuilder, RowSink},
    visitor::GameVisitor,
    worker::{BlockResult, Emit, Verdict, WorkerSettings, process_block, replay},
};
use crate::{
    store::{
        RunDir, StoreError, Table,
        commit::Transaction,
        manifest::{IngestRecord, InputRecord, SplitCounts, SplitManifest},
    },
    ui::{Report, group},
};

/// Ingest failures. Bad *games* are never errors (they go to `rejects`);
/// these are problems with inputs as a whole, the output or the machine.
#[derive(Debug, Error)]
pub enum IngestError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot read input {input}: {source}")]
    Input {
        input: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("spill file {}: {source}", path.display())]
    Spill {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

/// What an ingest did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The run directory written.
    pub out: PathBuf,
    pub splits: Vec<(String, SplitCounts)>,
    pub inputs: Vec<InputRecord>,
    pub seconds: f64,
    /// Board deduplication exceeded the memory limit and used disk.
    pub spilled: bool,
    /// Bytes of a spilled board on disk (the spill format in use: 44
    /// packed, 56 plain), whether or not ingest spilled.
    pub spill_entry_bytes: usize,
    /// Wall-clock seconds per phase: stream (read, parse, play, count
    /// boards), dedup (merge spilled partitions), boards (write boards and
    /// legal_moves), commit.
    pub phases: Vec<(&'static str, f64)>,
    /// Where the dedup phase's threads spent their time (when boards
    /// spilled).
    pub dedup_threads: Option<dedup::DedupBusy>,
    /// Peak resident memory of the process (Linux), bytes.
    pub peak_rss: Option<u64>,
    /// `--memory-limit`, bytes.
    pub memory_limit: u64,
    /// The least limit ingest stays within for these splits (the rest of
    /// the pipeline's floor and the smallest tables).
    pub least_memory_limit: u64,
}

/// Threads deduplicating boards while games stream in, for `threads`
/// parsing threads: one for each pair, up to 4. One thread inserting every
/// board (a hash, a probe, an insert; and a spill of its table every few
/// hundred thousand boards) would cap ingest at a few million boards a
/// second whatever the cores; shards split that work by hash. Each shard
/// still reads every batch (every key's hash, computed once by the parsers,
/// to find its own), hence the cap, and one shard keeps up with two
/// parsers: on 2 cores a second shard only added its reading of every
/// batch (bench/results/amd2-2026-11-29, "Ingest on 2 cores").
fn dedup_shards(threads: usize) -> usize {
    (threads / 2).clamp(1, 4)
}

/// Threads merging a split's spilled runs while its boards are written, for
/// `threads` threads writing them: one merge (the reading thread's own) up
/// to 3 threads, then one a pair of threads, up to 4. The reading thread
/// feeds every writer; alone, its merge would cap the boards phase at a
/// rate many writing threads exceed (bench/results/amd2-2026-11-29/README.md,
/// "Figures once kept in the source").
fn merge_threads(threads: usize) -> usize {
    (threads / 2).clamp(1, 4)
}

/// Every board key batch goes to every dedup shard (each takes its keys).
struct KeySink {
    shards: Vec<Sender<Arc<KeyBatch>>>,
}

impl KeySink {
    fn send(&self, batch: KeyBatch) -> Result<(), IngestError> {
        let batch = Arc::new(batch);
        for shard in &self.shards {
            shard
                .send(Arc::clone(&batch))
                .map_err(|_| IngestError::Internal("board aggregator stopped early".into()))?;
        }
        Ok(())
    }
}

/// Peak resident set size of this process (VmHWM), where /proc tells it.
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl Summary {
    /// Games read from all inputs.
    pub fn games_read(&self) -> u64 {
        self.inputs.iter().map(|i| i.games_read).sum()
    }
    /// Decompressed PGN bytes read.
    pub(crate) fn pgn_bytes(&self) -> u64 {
        self.inputs.iter().map(|i| i.pgn_bytes).sum()
    }
}

impl serde::Serialize for Summary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::json!({
            "out": self.out,
            "seconds": self.seconds,
            "games_read": self.games_read(),
            "pgn_bytes": self.pgn_bytes(),
            "spilled": self.spilled,
            "spill_entry_bytes": self.spill_entry_bytes,
            "peak_rss_bytes": self.peak_rss,
            "memory_limit": self.memory_limit,
            "least_memory_limit": self.least_memory_limit,
            "phases": self.phases.iter().cloned().collect::<BTreeMap<_, _>>(),
            "dedup_threads": self.dedup_threads,
            "inputs": self.inputs,
            "splits": self.splits.iter().cloned().collect::<BTreeMap<_, _>>(),
        })
        .serialize(s)
    }
}

impl Report for Summary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let secs = self.seconds.max(1e-9);
        writeln!(
            out,
            "ingested {} games ({:.1} MB of PGN) from {} input(s) in {:.2} s: {:.0} games/s, {:.1} MB/s{}",
            group(self.games_read()),
            self.pgn_bytes() as f64 / 1e6,
            self.inputs.len(),
            self.seconds,
            self.games_read() as f64 / secs,
            self.pgn_bytes() as f64 / 1e6 / secs,
            if self.spilled {
                format!(
                    " (board dedup spilled to disk, {} bytes a board)",
                    self.spill_entry_bytes
                )
            } else {
                String::new()
            }
        )?;
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(name, secs)| format!("{name} {secs:.2} s"))
            .collect();
        let peak = self
            .peak_rss
            .map(|b| format!("; peak memory {:.0} MB", b as f64 / 1e6))
            .unwrap_or_default();
        writeln!(out, "  phases: {}{peak}", phases.join(", "))?;
        if let Some(d) = &self.dedup_threads {
            writeln!(
                out,
                "  dedup: tables spilled in {:.2} s; {} partitions on {} threads in {:.2} s ({} kept with fixes of {:.1} MB), thread-seconds reading {:.2}, inserting {:.2}, writing {:.2}, splitting {:.2}",
                d.last_spill_s,
                d.partitions,
                d.threads,
                d.partitions_s,
                d.fixed,
                d.fix_bytes as f64 / 1e6,
                d.read_s,
                d.insert_s,
                d.write_s,
                d.split_s
            )?;
        }
        for (name, c) in &self.splits {
            let rejected: u64 = c.rejected.values().sum();
            let reasons: Vec<String> = c.rejected.iter().map(|(r, n)| format!("{r} {n}")).collect();
            writeln!(
                out,
                "  {name}: {} games, {} boards ({} with a legal move), {} legal moves; {} rejected{}{}",
                group(c.games),
                group(c.state_value),
                group(c.behavioral_cloning),
                group(c.action_value),
                group(rejected),
                if reasons.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", reasons.join(", "))
                },
                if c.not_sampled > 0 {
                    format!("; {} accepted but not sampled", group(c.not_sampled))
                } else {
                    String::new()
                }
            )?;
        }
        writeln!(
            out,
            "wrote {} (run `chessbench stats {}` for Table A1)",
            self.out.display(),
            self.out.display()
        )
    }

    fn warnings(&self) -> Vec<String> {
        let mib = |b: u64| b.div_ceil(1 << 20);
        let over = self.peak_rss.filter(|&peak| peak > self.memory_limit);
        let memory = over.map(|peak| {
            let why = if self.memory_limit < self.least_memory_limit {
                format!(
                    "that is under the least ingest keeps to ({} MiB: parsing, writing and \
                     the smallest deduplication tables), so the tables got their minimum",
                    mib(self.least_memory_limit)
                )
            } else {
                "ingest means to stay within it: please report this with the input's size".into()
            };
            format!(
                "peak memory {} MiB exceeded --memory-limit {} MiB: {why}",
                mib(peak),
                mib(self.memory_limit)
            )
        });
        let inputs = self.inputs.iter().filter_map(|input| {
            input.error.as_ref().map(|e| {
                format!(
                    "input {} ended early with a read error after {} games: {e} \
                     (a game cut off by it is in rejects as 'truncated')",
                    input.source, input.games_read
                )
            })
        });
        memory.into_iter().chain(inputs).collect()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Spawns a named scoped thread (names show in `top -H`, perf, panics).
pub(crate) fn spawn_named<'scope, 'env, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    f: impl FnOnce() -> T + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, T> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn_scoped(scope, f)
        .unwrap_or_else(|e| panic!("cannot start thread {name}: {e}"))
}

/// Per-input state shared with the chunker thread.
#[derive(Default)]
struct InputShared {
    raw_bytes: Arc<AtomicU64>,
    zstd: AtomicBool,
}

/// Runs an ingest and commits its splits into `config.out`, in four
/// phases, each timed in the summary: [`stream`] (read, parse and play
/// the games, write `games` and `rejects`, deduplicate boards as they
/// come), [`dedup::finish`] (merge what spilled), [`write_boards`]
/// (`boards` and `legal_moves`), and [`commit`].
pub fn run(config: &IngestConfig) -> Result<Summary, IngestError> {
    let clock = Instant::now();
    let started_at = now_secs();
    let spill_format = SpillFormat::from_env(std::env::var_os(SpillFormat::ENV).as_deref())?;
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
    let mut collector = Collector {
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
        input_splits: settings.input_splits.clone(),
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
    };
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

struct InputState {
    record: InputRecord,
    game_index: u64,
    /// Newlines before the next block.
    lines: u64,
}

/// Consumes block results in input order.
struct Collector<'a> {
    config: &'a IngestConfig,
    inputs: Vec<InputState>,
    input_splits: Vec<u8>,
    games: Vec<RowSink<GamesBuilder>>,
    rejects: Vec<RowSink<RejectsBuilder>>,
    counts: Vec<SplitCounts>,
    /// Accepted games offered to the sampler, per split.
    offered: Vec<u64>,
    next_game_no: u64,
    accepted: u64,
    stopped: bool,
    reservoir: Option<Reservoir>,
}

impl Collector<'_> {
    /// Closes the games and rejects tables and completes the counts: each
    /// input's bytes as the reading thread counted them, each split's
    /// records as the boards phase wrote them (its boards must be the ones
    /// the stream counted).
    fn finish(
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

    fn collect(
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

    fn process(&mut self, r: BlockResult, keys: &KeySink) -> Result<(), IngestError> {
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
    fn replay_sample(&mut self, keys: &KeySink) -> Result<(), IngestError> {
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

/// Hands the memory freed by the phase just ended back to the kernel
/// (glibc keeps it in per-thread arenas otherwise: the parsing threads' key
/// batches and blocks, the deduplication tables), so that the next phase's
/// buffers come on top of what is live rather than of what was.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
