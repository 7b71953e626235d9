//! Stockfish's annotation: every board of a run's splits searched (Ruoss et
//! al. 2024, §2.1: each legal move on its own, 50 ms per move, best action
//! = argmax), chunk by chunk, by this process's shard of the chunks, with
//! one engine per worker ([`super::pool`]); each chunk is committed
//! atomically as it completes ([`super::rows`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::File,
    io::{self, Write},
    path::PathBuf,
    time::{Duration, Instant},
};

use indicatif::ProgressBar;
use serde::Serialize;

use super::{
    config::AnnotateConfig,
    error::{AnnotateError, Refusal, RunBusy},
    pool::{self, SplitWork, WorkerSettings},
    rows::{self, Outcome},
    splits::{boards_fingerprint, check_settings, evals_lock, remove_source, scope, try_lock},
};
use crate::{
    store::{
        Manifest, Source, StoreError, Table,
        chunks::{self as store_chunks, chunk_shard},
        commit::{MANIFEST, RunDir, open_lock_file, partition_dir, update_manifest},
        failpoint,
        manifest::{AnnotateRecord, EngineRecord, ShardRecord},
        unix_now,
    },
    uci_client::{
        Engine,
        oracle::{SearchSettings, Work},
    },
    ui::{Report, group},
};

/// Per-split result of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SplitSummary {
    pub boards_in_scope: u64,
    pub chunks_total: u64,
    pub chunks_of_shard: u64,
    pub chunks_already_done: u64,
    pub chunks_committed: u64,
    /// Committed chunks with failed boards that this run searched again.
    pub chunks_retried: u64,
    /// The failed boards of those chunks.
    pub boards_retried: u64,
    pub boards_annotated: u64,
    pub action_values: u64,
    pub failures: u64,
    /// Boards of this shard's pending chunks not searched because the
    /// evaluation database labels them (`--only-missing`).
    pub left_to_evals: u64,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// The run annotated.
    #[serde(skip)]
    pub run: PathBuf,
    pub engine: String,
    pub shard: String,
    pub shard_source: String,
    pub workers: usize,
    pub seconds: f64,
    pub searches: u64,
    pub search_seconds: f64,
    /// Time inside engine searches / (wall time x workers).
    pub utilisation: f64,
    pub fallbacks: u64,
    /// Failed tries that killed and restarted an engine.
    pub retries: u64,
    pub splits: Vec<(String, SplitSummary)>,
}

impl Summary {
    pub(crate) fn boards(&self) -> u64 {
        self.splits.iter().map(|s| s.1.boards_annotated).sum()
    }
    pub(crate) fn failures(&self) -> u64 {
        self.splits.iter().map(|s| s.1.failures).sum()
    }
}

/// The settings of Stockfish's annotation of a split, for [`check_settings`].
fn stockfish_settings(
    config: &AnnotateConfig,
    manifest: &Manifest,
    split: &str,
) -> serde_json::Value {
    serde_json::json!({
        "settings": config.fingerprint(),
        "boards": boards_fingerprint(manifest, split),
    })
}

/// Settings files of Stockfish's annotation written by earlier versions:
/// before enum values had one spelling the default mode was recorded as
/// `per-move`, and before Stockfish could leave boards to the evaluation
/// database `only_missing` was not recorded (every board was searched).
fn upgrade_stockfish_settings(existing: &mut serde_json::Value) {
    if existing["settings"]["mode"] == "per-move" {
        existing["settings"]["mode"] = "per_move".into();
    }
    if let Some(settings) = existing["settings"].as_object_mut() {
        settings.entry("only_missing").or_insert(false.into());
    }
}

/// This shard's committed chunks that hold boards the engine could not
/// annotate, with those boards: a resume searches them again (engine
/// crashes and timeouts included) and commits the chunk again with the
/// rest of its rows as they were ([`rows::recommit_chunk`]).
fn failed_chunks(
    config: &AnnotateConfig,
    split: &str,
    total: u64,
    done: &BTreeSet<u64>,
) -> Result<BTreeMap<u64, Vec<u64>>, AnnotateError> {
    let shard = config.shard;
    let mine =
        |c: u64| c < total && chunk_shard(c, shard.count) == shard.index && done.contains(&c);
    Ok(
        store_chunks::failed_boards(&config.run, split, Source::Stockfish, mine)?
            .into_iter()
            .collect(),
    )
}

/// The locks a shard holds while it works (released when dropped).
struct ShardLocks {
    _count: File,
    _shard: File,
}

/// How long a process retries another shard count's lock that it finds
/// held: a process of the same count probing it holds it for microseconds,
/// a process of that count working holds it for hours.
const COUNT_PROBE_WAIT: Duration = Duration::from_secs(2);

/// Takes this shard's lock, so that one shard has one process (a task
/// submitted twice refuses), after checking that no process works on the
/// run under another shard count: shards of different counts overlap, and
/// each recovers its own chunks' files, so two arrays of different sizes
/// must not run at once. Every process holds a shared lock on
/// `.shards-N.lock` for its count N and checks that it can take every other
/// count's lock exclusively; of two processes with different counts
/// starting together, at least one sees the other.
fn shard_lock(config: &AnnotateConfig) -> Result<ShardLocks, AnnotateError> {
    let shard = config.shard;
    let dir = config.run.join(store_chunks::ENTRIES);
    std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
    let own = dir.join(format!(".shards-{}.lock", shard.count));
    let count_lock = open_lock_file(&own).map_err(|e| StoreError::io(&own, e))?;
    count_lock
        .lock_shared()
        .map_err(|e| StoreError::io(&own, e))?;
    let listing = std::fs::read_dir(&dir).map_err(|e| StoreError::io(&dir, e))?;
    for entry in listing {
        let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
        let Some(count) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix(".shards-")?.strip_suffix(".lock"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if count == shard.count {
            continue;
        }
        let path = entry.path();
        let deadline = Instant::now() + COUNT_PROBE_WAIT;
        while try_lock(&path, false)?.is_none() {
            if Instant::now() >= deadline {
                return Err(RunBusy::ShardCountBusy {
                    path,
                    running: count,
                    mine: shard.to_string(),
                }
                .into());
            }
            // Jittered, so that probing siblings fall out of step.
            let jitter = u64::from(std::process::id() % 37);
            std::thread::sleep(Duration::from_millis(20 + jitter));
        }
    }
    let path = dir.join(format!(".shard-{}-of-{}.lock", shard.index, shard.count));
    match try_lock(&path, false)? {
        Some(shard_lock) => Ok(ShardLocks {
            _count: count_lock,
            _shard: shard_lock,
        }),
        None => Err(RunBusy::ShardBusy {
            path,
            shard: shard.to_string(),
        }
        .into()),
    }
}

/// Starts one engine to learn its name (and to fail fast on a bad path).
pub fn engine_name(config: &AnnotateConfig) -> Result<String, AnnotateError> {
    let engine = Engine::start(&config.engine).map_err(AnnotateError::Engine)?;
    let name = engine.id().name.clone();
    engine.quit();
    Ok(if name.is_empty() {
        config.engine.path.display().to_string()
    } else {
        name
    })
}

/// Chunks of boards `config` would still annotate (0: its annotation of
/// every split in scope is complete, by any number of shards).
pub fn missing_chunks(config: &AnnotateConfig) -> Result<u64, AnnotateError> {
    let manifest = Manifest::read(&config.run.join(MANIFEST))?;
    let mut missing = 0;
    for (name, n) in scope(config, &manifest)? {
        let expected = n.div_ceil(config.chunk_boards);
        let done = store_chunks::committed(&config.run, &name, Source::Stockfish)?
            .iter()
            .filter(|&&c| c < expected)
            .count() as u64;
        missing += expected - done;
    }
    Ok(missing)
}

/// Runs Stockfish's annotation.
pub fn run(config: &AnnotateConfig) -> Result<Summary, AnnotateError> {
    let started = Instant::now();
    let _run = RunDir::open_shared(&config.run)?;
    let manifest = Manifest::read(&config.run.join(MANIFEST))?;
    let scope = scope(config, &manifest)?;
    let shard = config.shard;
    if config.overwrite && shard.count > 1 {
        return Err(Refusal::OverwriteSharded(shard.to_string()).into());
    }
    failpoint::check();
    let _shard_lock = shard_lock(config)?;
    let engine = engine_name(config)?;
    let mut work = Vec::new();
    let mut summaries = Vec::new();
    // Per split, the committed chunks whose failed boards are searched
    // again.
    let mut retry_chunks: Vec<BTreeSet<u64>> = Vec::new();
    for (name, n) in &scope {
        let (split, retry, split_work) = plan_split(config, &manifest, name, *n)?;
        summaries.push((name.clone(), split));
        retry_chunks.push(retry);
        work.push(split_work);
    }
    let pending_boards: u64 = work
        .iter()
        .map(|w| {
            w.chunks
                .iter()
                .map(|&c| {
                    let (a, b) = pool::chunk_range(c, config.chunk_boards, w.boards);
                    b - a - pool::skipped(&w.skip, a, b)
                })
                .sum::<u64>()
        })
        .sum();
    let bar = progress_bar(config, pending_boards);
    let settings = WorkerSettings {
        engine: config.engine.clone(),
        search: SearchSettings {
            mode: config.mode,
            limit: config.limit,
            timeout: config.search_timeout,
            new_game: config.new_game_per_board,
        },
        max_attempts: config.max_attempts,
        backoff: Duration::from_millis(20),
    };
    let workers = config.workers;
    let pool_start = Instant::now();
    let mut tally = Tally::default();
    let names: Vec<String> = work.iter().map(|w| w.name.clone()).collect();
    let shard_name = shard.to_string();
    let run_dir = config.run.clone();
    let result = pool::run(
        work,
        config.chunk_boards,
        workers,
        settings,
        |_outcome: &Outcome, w| {
            tally.add(w);
            bar.set_position(tally.boards);
            if tally.boards.is_multiple_of(8) || tally.boards == pending_boards {
                let secs = pool_start.elapsed().as_secs_f64().max(1e-9);
                bar.set_message(tally.rates(secs, workers));
            }
        },
        |finished| {
            let commit = if retry_chunks[finished.split].contains(&finished.chunk) {
                rows::recommit_chunk
            } else {
                rows::commit_chunk
            };
            commit(
                &run_dir,
                &names[finished.split],
                finished.chunk,
                finished.first_board,
                &finished.boards,
                &finished.work,
                rows::Provenance {
                    engine: &engine,
                    shard: &shard_name,
                },
            )
            .map_err(|source| AnnotateError::Commit {
                split: names[finished.split].clone(),
                chunk: finished.chunk,
                first_board: finished.first_board,
                source,
            })?;
            // What this run wrote: the boards it searched (a chunk
            // committed again keeps its other rows).
            let s = &mut summaries[finished.split].1;
            s.chunks_committed += 1;
            for (_, outcome) in &finished.boards {
                match outcome {
                    Outcome::Annotated(a) => {
                        s.boards_annotated += 1;
                        s.action_values += a.actions.len() as u64;
                    }
                    Outcome::Failed(_) => s.failures += 1,
                }
            }
            Ok(())
        },
    );
    let pool_secs = pool_start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    result?;
    let summary = Summary {
        run: config.run.clone(),
        engine,
        shard: shard.to_string(),
        shard_source: config.shard_source.to_owned(),
        workers,
        seconds: started.elapsed().as_secs_f64(),
        searches: tally.searches,
        search_seconds: tally.search_time.as_secs_f64(),
        utilisation: if pool_secs > 0.0 && tally.searches > 0 {
            tally.search_time.as_secs_f64() / (pool_secs * workers as f64)
        } else {
            0.0
        },
        fallbacks: tally.fallbacks,
        retries: tally.retries,
        splits: summaries,
    };
    record(config, &summary)?;
    Ok(summary)
}

/// What the pool's boards added up to so far: for the progress bar and
/// the summary.
#[derive(Debug, Default)]
struct Tally {
    boards: u64,
    searches: u64,
    search_time: Duration,
    fallbacks: u64,
    retries: u64,
}

impl Tally {
    fn add(&mut self, w: &Work) {
        self.boards += 1;
        self.searches += w.searches;
        self.search_time += w.search_time;
        self.fallbacks += w.fallbacks;
        self.retries += w.retries;
    }

    /// The progress bar's message after `secs` seconds on `workers`
    /// engines.
    fn rates(&self, secs: f64, workers: usize) -> String {
        format!(
            "{:.1} boards/s, {:.0} searches/s, engines busy {:.1}%",
            self.boards as f64 / secs,
            self.searches as f64 / secs,
            100.0 * self.search_time.as_secs_f64() / (secs * workers as f64)
        )
    }
}

/// One split's part of a run: its summary so far, its committed chunks
/// whose failed boards are searched again, and the pool's work (this
/// shard's chunks not done, and the boards in them to skip: those the
/// evaluation database labels with `--only-missing`, and in a chunk with
/// failed boards all but those). With `--overwrite` the split's Stockfish
/// labels go first; settings that differ from the split's earlier ones
/// refuse.
fn plan_split(
    config: &AnnotateConfig,
    manifest: &Manifest,
    name: &str,
    n: u64,
) -> Result<(SplitSummary, BTreeSet<u64>, SplitWork), AnnotateError> {
    let shard = config.shard;
    if config.overwrite {
        // Stockfish's chunks and settings only: the evaluation
        // database's labels stay (`annotate --evals --overwrite` redoes
        // those).
        remove_source(&config.run, name, Source::Stockfish)?;
    }
    check_settings(
        &config.run,
        name,
        Source::Stockfish,
        stockfish_settings(config, manifest, name),
        upgrade_stockfish_settings,
    )?;
    let mut done = store_chunks::recover(
        &config.run,
        name,
        Source::Stockfish,
        (shard.index, shard.count),
    )?;
    let total = n.div_ceil(config.chunk_boards);
    let mine: Vec<u64> = (0..total)
        .filter(|&c| chunk_shard(c, shard.count) == shard.index)
        .collect();
    let failed = failed_chunks(config, name, total, &done)?;
    for chunk in failed.keys() {
        done.remove(chunk);
    }
    let todo: Vec<u64> = mine.iter().copied().filter(|c| !done.contains(c)).collect();
    let mut summary = SplitSummary {
        boards_in_scope: n,
        chunks_total: total,
        chunks_of_shard: mine.len() as u64,
        chunks_already_done: (mine.len() - todo.len()) as u64,
        chunks_retried: failed.len() as u64,
        boards_retried: failed.values().map(|b| b.len() as u64).sum(),
        ..SplitSummary::default()
    };
    let mut skip = if config.only_missing {
        // Under the evaluation database's lock (shared with the other
        // shards reading it), with its interrupted commits completed:
        // the boards it labels, all of them.
        let _evals = evals_lock(config, false)?;
        for source in Source::Stockfish.overridden_by() {
            store_chunks::recover(&config.run, name, source, (0, 1))?;
        }
        store_chunks::labelled_boards(&config.run, name, Source::Stockfish.overridden_by())?
    } else {
        Vec::new()
    };
    summary.left_to_evals = todo
        .iter()
        .filter(|c| !failed.contains_key(c))
        .map(|&c| {
            let (a, b) = pool::chunk_range(c, config.chunk_boards, n);
            pool::skipped(&skip, a, b)
        })
        .sum();
    // A chunk with failed boards searches only those: its other boards
    // keep the rows they have.
    for (&chunk, boards) in &failed {
        let (a, b) = pool::chunk_range(chunk, config.chunk_boards, n);
        skip.extend((a..b).filter(|id| boards.binary_search(id).is_err()));
    }
    if !failed.is_empty() {
        skip.sort_unstable();
        skip.dedup();
    }
    let work = SplitWork {
        name: name.to_owned(),
        boards_dir: config.run.join(partition_dir(Table::Boards, name)),
        boards: n,
        chunks: todo,
        skip,
    };
    Ok((summary, failed.into_keys().collect(), work))
}

/// Adds this shard's record to the manifest's `annotate` section.
fn record(config: &AnnotateConfig, summary: &Summary) -> Result<(), AnnotateError> {
    update_manifest(&config.run, |m| {
        let section = m.annotate.get_or_insert_with(AnnotateRecord::default);
        section.engine = EngineRecord {
            name: summary.engine.clone(),
            path: config.engine.path.clone(),
            threads: config.engine.threads,
        };
        section.settings = config.fingerprint();
        for (split, s) in &summary.splits {
            let entry = section.splits.entry(split.clone()).or_default();
            entry.chunks_total = s.chunks_total;
            entry.shards.insert(
                summary.shard.clone(),
                ShardRecord {
                    finished_at: unix_now(),
                    source: summary.shard_source.clone(),
                    chunks: s.chunks_of_shard,
                    boards_annotated_now: s.boards_annotated,
                    failures_now: s.failures,
                    workers: summary.workers,
                    utilisation: summary.utilisation,
                },
            );
        }
    })?;
    Ok(())
}

fn progress_bar(config: &AnnotateConfig, total: u64) -> ProgressBar {
    let bar = crate::ui::bar(
        config.progress,
        Some(total),
        "{spinner} annotate [{elapsed_precise}] {bar:30} {pos}/{len} boards, ETA {eta}  {msg}",
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

impl Report for Summary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let summary = self;
        writeln!(
            out,
            "annotated {} boards ({} failed) with {} on {} worker(s), shard {} ({}), in {:.1} s: {} searches, engines busy {:.1}% of the time{}{}",
            group(summary.boards()),
            group(summary.failures()),
            summary.engine,
            summary.workers,
            summary.shard,
            summary.shard_source,
            summary.seconds,
            group(summary.searches),
            100.0 * summary.utilisation,
            if summary.retries > 0 {
                format!(
                    "; {} tries failed (engine crashed, hung or sent garbage) and were retried on a restarted engine",
                    group(summary.retries)
                )
            } else {
                String::new()
            },
            if summary.fallbacks > 0 {
                format!(
                    "; {} MultiPV lines searched again on their own",
                    group(summary.fallbacks)
                )
            } else {
                String::new()
            }
        )?;
        for (name, s) in &summary.splits {
            writeln!(
                out,
                "  {name}: {} boards in scope, {} chunks ({} of this shard: {} done before, {} now{}); {} state values, {} action values, {} failures written now{}",
                group(s.boards_in_scope),
                group(s.chunks_total),
                group(s.chunks_of_shard),
                group(s.chunks_already_done),
                group(s.chunks_committed),
                if s.chunks_retried > 0 {
                    format!(
                        ", of which {} held failed boards, {} of them searched again",
                        group(s.chunks_retried),
                        group(s.boards_retried)
                    )
                } else {
                    String::new()
                },
                group(s.boards_annotated),
                group(s.action_values),
                group(s.failures),
                if s.left_to_evals > 0 {
                    format!(
                        "; {} boards left to the evaluation database",
                        group(s.left_to_evals)
                    )
                } else {
                    String::new()
                },
            )?;
        }
        writeln!(
            out,
            "wrote {} (run `chessbench stats {}` for the counts)",
            summary.run.display(),
            summary.run.display()
        )
    }
}
