//! `--plan`: what an annotation will cost before it runs.
//!
//! Searches are counted exactly from the boards table; the time per search
//! is the movetime limit, or, for nodes and depth limits, measured by
//! annotating a few of the run's boards with the real engine. The same rate
//! projected onto the paper's 10^7-game training set (Table A1: 527,633,465
//! non-terminal boards, 15,316,914,724 legal moves) gives about 8,700
//! CPU-days at 50 ms per move for the action values, as the paper says.

use std::{
    fs::File,
    io::{self, Write},
    time::Duration,
};

use arrow_array::{Array, StringArray, UInt8Array};
use parquet::arrow::{ProjectionMask, arrow_reader::ParquetRecordBatchReaderBuilder};
use serde::Serialize;

use super::{config::AnnotateConfig, error::AnnotateError};
use crate::{
    chess::legal,
    store::{Manifest, Table, commit::MANIFEST, commit::partition_dir, writer::part_file_name},
    uci_client::{
        Engine, Limit,
        oracle::{self, Mode, SearchSettings, Work},
    },
    ui::{Report, group},
};

/// Paper, Table A1, train 10^7 games: behavioural-cloning records
/// (non-terminal boards) and action-value records.
pub(crate) const PAPER_NONTERMINAL_BOARDS: u64 = 527_633_465;
pub(crate) const PAPER_ACTION_VALUES: u64 = 15_316_914_724;

/// The cost of one split.
#[derive(Debug, Clone, Serialize)]
pub struct SplitPlan {
    pub split: String,
    pub boards: u64,
    pub terminal_boards: u64,
    pub legal_moves: u64,
    /// Boards left out because the evaluation database labels them
    /// (`--only-missing`); the other counts leave them out too.
    pub left_to_evals: u64,
    pub searches: u64,
}

/// The cost of a configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub mode: Mode,
    pub limit: Limit,
    pub splits: Vec<SplitPlan>,
    pub searches: u64,
    /// Seconds of one engine thread per search.
    pub seconds_per_search: f64,
    /// "limit" (movetime) or "measured on N searches".
    pub rate_source: String,
    pub cpu_days: f64,
    pub wall_hours_with_workers: f64,
    pub workers: usize,
    pub shards: u32,
    /// The paper's 10^7-game set at this rate.
    pub paper_searches: u64,
    pub paper_cpu_days: f64,
    /// Of which the action values alone.
    pub paper_action_value_cpu_days: f64,
}

/// Terminal boards, legal moves, and a calibration sample of (FEN, moves).
type BoardsStats = (u64, u64, Vec<(String, u8)>);

/// The boards `0..n` of a split, but those in the sorted `skip`.
fn boards_stats(
    config: &AnnotateConfig,
    split: &str,
    n: u64,
    skip: &[u64],
) -> Result<BoardsStats, AnnotateError> {
    let dir = config.run.join(partition_dir(Table::Boards, split));
    let (mut terminal, mut moves) = (0u64, 0u64);
    let mut sample = Vec::new();
    let mut seen = 0u64;
    let mut part = 0;
    while seen < n {
        let path = dir.join(part_file_name(part));
        let bad = |m: String| AnnotateError::Boards {
            path: path.clone(),
            message: m,
        };
        let file = File::open(&path).map_err(|e| bad(e.to_string()))?;
        let b = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad(e.to_string()))?;
        let fen = b.schema().index_of("fen").map_err(|e| bad(e.to_string()))?;
        let nm = b
            .schema()
            .index_of("num_legal_moves")
            .map_err(|e| bad(e.to_string()))?;
        let mask = ProjectionMask::roots(b.parquet_schema(), [fen, nm]);
        let reader = b
            .with_projection(mask)
            .build()
            .map_err(|e| bad(e.to_string()))?;
        for batch in reader {
            let batch = batch.map_err(|e| bad(e.to_string()))?;
            let fens = batch.column(0).as_any().downcast_ref::<StringArray>();
            let counts = batch.column(1).as_any().downcast_ref::<UInt8Array>();
            let (Some(fens), Some(counts)) = (fens, counts) else {
                return Err(bad("unexpected column types".into()));
            };
            for i in 0..batch.num_rows() {
                if seen >= n {
                    break;
                }
                seen += 1;
                if skip.binary_search(&(seen - 1)).is_ok() {
                    continue;
                }
                let c = counts.value(i);
                if c == 0 {
                    terminal += 1;
                } else {
                    moves += u64::from(c);
                    // Every 97th board: a spread-out calibration sample.
                    if sample.len() < 16 && seen % 97 == 1 && !fens.is_null(i) {
                        sample.push((fens.value(i).to_owned(), c));
                    }
                }
            }
        }
        part += 1;
    }
    Ok((terminal, moves, sample))
}

/// Computes the plan (starting the engine to measure when the limit is not
/// a time).
pub fn plan(config: &AnnotateConfig) -> Result<Plan, AnnotateError> {
    let manifest = Manifest::read(&config.run.join(MANIFEST))?;
    let scope = super::splits::scope(config, &manifest)?;
    let mut splits = Vec::new();
    let mut sample = Vec::new();
    for (name, n) in scope {
        let skip = if config.only_missing {
            crate::store::chunks::labelled_boards(
                &config.run,
                &name,
                crate::store::Source::Stockfish.overridden_by(),
            )?
        } else {
            Vec::new()
        };
        let left_to_evals = super::pool::skipped(&skip, 0, n);
        let (terminal, legal_moves, s) = boards_stats(config, &name, n, &skip)?;
        if sample.is_empty() {
            sample = s;
        }
        let nonterminal = n - left_to_evals - terminal;
        let searches = match config.mode {
            Mode::PerMove => nonterminal + legal_moves,
            Mode::Multipv => nonterminal,
        };
        splits.push(SplitPlan {
            split: name,
            boards: n,
            terminal_boards: terminal,
            legal_moves,
            left_to_evals,
            searches,
        });
    }
    let (seconds_per_search, rate_source) = match config.limit {
        Limit::MoveTimeMs(ms) => (ms as f64 / 1000.0, "the movetime limit".to_owned()),
        _ => {
            let mut engine = Engine::start(&config.engine).map_err(AnnotateError::Engine)?;
            let settings = SearchSettings {
                mode: config.mode,
                limit: config.limit,
                timeout: config.search_timeout,
                new_game: config.new_game_per_board,
            };
            let mut work = Work::default();
            let start = std::time::Instant::now();
            for (fen, n) in &sample {
                let prepared = legal::prepare(fen, Some(usize::from(*n))).map_err(|source| {
                    AnnotateError::Prepare {
                        board_id: 0,
                        source,
                    }
                })?;
                oracle::annotate(&mut engine, &prepared, &settings, &mut work)
                    .map_err(AnnotateError::Engine)?;
                if start.elapsed() > Duration::from_secs(10) {
                    break;
                }
            }
            engine.quit();
            let per = if work.searches == 0 {
                0.0
            } else {
                start.elapsed().as_secs_f64() / work.searches as f64
            };
            (
                per,
                format!(
                    "measured: {} searches on {} of the run's boards, pipeline overhead included",
                    work.searches,
                    sample.len()
                ),
            )
        }
    };
    let searches: u64 = splits.iter().map(|s| s.searches).sum();
    let cpu_seconds = searches as f64 * seconds_per_search;
    let shards = config.shard.count;
    let paper_searches = match config.mode {
        Mode::PerMove => PAPER_NONTERMINAL_BOARDS + PAPER_ACTION_VALUES,
        Mode::Multipv => PAPER_NONTERMINAL_BOARDS,
    };
    let paper_av_searches = match config.mode {
        Mode::PerMove => PAPER_ACTION_VALUES,
        Mode::Multipv => 0,
    };
    Ok(Plan {
        mode: config.mode,
        limit: config.limit,
        splits,
        searches,
        seconds_per_search,
        rate_source,
        cpu_days: cpu_seconds / 86_400.0,
        wall_hours_with_workers: cpu_seconds / 3600.0 / (config.workers as f64 * shards as f64),
        workers: config.workers,
        shards,
        paper_searches,
        paper_cpu_days: paper_searches as f64 * seconds_per_search / 86_400.0,
        paper_action_value_cpu_days: paper_av_searches as f64 * seconds_per_search / 86_400.0,
    })
}

impl Report for Plan {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let p = self;
        writeln!(
            out,
            "plan: mode {}, limit `{}`, {} worker(s) x {} shard(s)",
            p.mode.name(),
            p.limit,
            p.workers,
            p.shards
        )?;
        for s in &p.splits {
            let left = if s.left_to_evals > 0 {
                format!(
                    " ({} more labelled by the evaluation database, not searched)",
                    group(s.left_to_evals)
                )
            } else {
                String::new()
            };
            writeln!(
                out,
                "  {}: {} boards ({} terminal), {} legal moves -> {} searches{left}",
                s.split,
                group(s.boards - s.left_to_evals),
                group(s.terminal_boards),
                group(s.legal_moves),
                group(s.searches)
            )?;
        }
        writeln!(
            out,
            "  total: {} searches x {:.2} ms ({}) = {:.3} CPU-days, {:.2} h of wall time",
            group(p.searches),
            p.seconds_per_search * 1000.0,
            p.rate_source,
            p.cpu_days,
            p.wall_hours_with_workers
        )?;
        writeln!(
            out,
            "  the paper's 10^7-game training set at this rate: {} searches = {:.0} CPU-days ({:.0} for the action values alone)",
            group(p.paper_searches),
            p.paper_cpu_days,
            p.paper_action_value_cpu_days
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn paper_projection_at_50ms_is_about_8700_cpu_days() {
        let av = super::PAPER_ACTION_VALUES as f64 * 0.05 / 86_400.0;
        assert!((8_700.0..9_000.0).contains(&av), "{av}");
    }
}
