//! Labels from the Lichess evaluation database (`annotate --evals FILE`):
//! state values for every board whose four FEN fields match a position of
//! the database (many boards may share one position), and action values
//! for the moves that begin one of its principal variations
//! ([`crate::chess::lichess_evals`]). Rows carry source `lichess_evals`, the
//! search's depth and nodes (knodes x 1000), and go to their own chunk files
//! (`evals-NNNNNNNN.parquet`, [`SOURCE`]) beside Stockfish's, so the
//! two sources never overwrite each other and SQL can compare them.
//!
//! The file is read once per pass. A pass holds the board index and the
//! labels of as many pending chunks as fit in their share of
//! `--memory-limit` ([`reader::MEMORY`], [`BYTES_PER_BOARD`]); after the pass its chunks are committed one by
//! one, each atomically, so a killed run loses at most the pass it was in
//! and a rerun skips the chunks already committed: nothing is added twice.

use std::{
    collections::{BTreeMap, HashSet},
    io::{self, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, StringArray, UInt16Array, UInt32Array, UInt64Array,
};
use serde::Serialize;

pub mod reader;

use reader::{BoardIndex, EvalsFormat, EvalsPass, ReadEvent};

use super::{
    config::AnnotateConfig,
    error::{AnnotateError, EvalsReadError, Refusal},
    splits::scope,
};
use crate::{
    chess::lichess_evals::{self, EvalsLabels, EvalsReject, SideScore},
    store::{
        Manifest, Source, StoreError, Table, chunks,
        commit::{MANIFEST, RunDir},
        unix_now,
    },
    uci_client::{
        Score,
        oracle::{self, Eval, win_probability},
    },
    ui::{Report, group},
};

/// The source these labels are.
const SOURCE: Source = Source::LichessEvals;

/// Bytes a pass holds per board of its chunks: the board index's entry
/// ([`reader::INDEX_BYTES_PER_BOARD`]) and, for a labelled board, its id, the
/// index of its labels, and a share of the labels themselves (a depth,
/// knodes, a state score and one score per variation's first move; the
/// database has one to five variations a position).
pub const BYTES_PER_BOARD: u64 = reader::INDEX_BYTES_PER_BOARD + 96;

/// A committed chunk's record (`annotate/split=S/evals-NNNNNNNN.json`).
#[derive(Debug, Clone, Serialize)]
struct EvalsEntry {
    chunk: u64,
    first_board: u64,
    boards: u64,
    state_values: u64,
    action_values: u64,
    file: String,
    finished_at: u64,
}

/// One split's share of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EvalsSplit {
    pub boards_in_scope: u64,
    pub chunks_total: u64,
    pub chunks_already_done: u64,
    pub chunks_committed: u64,
    /// Boards given a state value now.
    pub boards_labelled: u64,
    pub action_values: u64,
}

/// What `annotate --evals` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EvalsSummary {
    #[serde(skip)]
    pub run: PathBuf,
    pub file: PathBuf,
    pub format: Option<EvalsFormat>,
    pub passes: u64,
    /// Every pass's reading, summed (rejects included: lines that are not
    /// positions, and positions whose searches cannot label them).
    pub read: EvalsPass,
    /// The first line rejected for each reason, with why.
    pub first_rejects: BTreeMap<&'static str, (u64, String)>,
    pub seconds: f64,
    /// Of which reading the file (index built, lines read and labelled).
    pub read_seconds: f64,
    /// And writing and committing the chunks.
    pub commit_seconds: f64,
    pub splits: Vec<(String, EvalsSplit)>,
}

/// The settings a split's evaluation-database chunks are written with
/// (for [`super::splits::check_settings`]); a rerun must agree, or start over with
/// `--overwrite`.
fn evals_settings(
    config: &AnnotateConfig,
    manifest: &Manifest,
    split: &str,
    file: &Path,
) -> serde_json::Value {
    serde_json::json!({
        "file": file.file_name().map(|n| n.to_string_lossy().into_owned()),
        "bytes": std::fs::metadata(file).ok().filter(|m| m.is_file()).map(|m| m.len()),
        "chunk_boards": config.chunk_boards,
        "max_boards": config.max_boards,
        "boards": super::splits::boards_fingerprint(manifest, split),
    })
}

/// A split's pending chunks.
struct Pending {
    name: String,
    boards: u64,
    chunks: Vec<u64>,
}

/// The chunks one pass takes: (split index, chunk), in order.
fn passes(pending: &[Pending], chunk_boards: u64, room: u64) -> Vec<Vec<(usize, u64)>> {
    let per_pass = (room / (chunk_boards * BYTES_PER_BOARD)).max(1) as usize;
    let all: Vec<(usize, u64)> = pending
        .iter()
        .enumerate()
        .flat_map(|(s, p)| p.chunks.iter().map(move |&c| (s, c)))
        .collect();
    all.chunks(per_pass).map(<[_]>::to_vec).collect()
}

/// Writes `annotate --evals`' rows for the run's boards.
pub fn run(config: &AnnotateConfig) -> Result<EvalsSummary, AnnotateError> {
    let started = Instant::now();
    let file = config.evals.clone().expect("run only with --evals");
    let format = EvalsFormat::of(&file);
    if file != Path::new("-") && !file.is_file() {
        return Err(EvalsReadError::Io {
            path: file.clone(),
            source: io::Error::new(io::ErrorKind::NotFound, "no such file"),
        }
        .into());
    }
    if config.shard.count > 1 {
        return Err(Refusal::EvalsSharded(config.shard.to_string()).into());
    }
    let _run = RunDir::open_shared(&config.run)?;
    let _lock = super::splits::evals_lock(config, true)?;
    let manifest = Manifest::read(&config.run.join(MANIFEST))?;
    let scope = scope(config, &manifest)?;
    let mut summary = EvalsSummary {
        run: config.run.clone(),
        file: file.clone(),
        format: Some(format),
        ..EvalsSummary::default()
    };
    if config.overwrite {
        // Checked before anything is deleted: labels that Stockfish relied
        // on, and a second pass standard input cannot give.
        for (name, _) in &scope {
            if left_to_evals(config, name)? {
                return Err(Refusal::EvalsRelied(name.clone()).into());
            }
        }
        let all: Vec<Pending> = scope
            .iter()
            .map(|(name, n)| Pending {
                name: name.clone(),
                boards: *n,
                chunks: (0..n.div_ceil(config.chunk_boards)).collect(),
            })
            .collect();
        one_pass_if_stdin(config, &file, &all)?;
    }
    let mut pending = Vec::new();
    for (name, n) in &scope {
        if config.overwrite {
            super::splits::remove_source(&config.run, name, SOURCE)?;
        }
        super::splits::check_settings(
            &config.run,
            name,
            SOURCE,
            evals_settings(config, &manifest, name, &file),
            |_| {},
        )?;
        let done = chunks::recover(&config.run, name, SOURCE, (0, 1))?;
        let total = n.div_ceil(config.chunk_boards);
        let todo: Vec<u64> = (0..total).filter(|c| !done.contains(c)).collect();
        summary.splits.push((
            name.clone(),
            EvalsSplit {
                boards_in_scope: *n,
                chunks_total: total,
                chunks_already_done: total - todo.len() as u64,
                ..EvalsSplit::default()
            },
        ));
        pending.push(Pending {
            name: name.clone(),
            boards: *n,
            chunks: todo,
        });
    }
    let plan = one_pass_if_stdin(config, &file, &pending)?;
    let names: Vec<String> = pending.iter().map(|p| p.name.clone()).collect();
    let bar = crate::ui::bar(
        config.progress,
        None,
        "{spinner} annotate --evals [{elapsed_precise}] {msg}",
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    for (number, chunks_of_pass) in plan.iter().enumerate() {
        let reading = Instant::now();
        let pass = read_pass(
            config,
            &file,
            format,
            &names,
            chunks_of_pass,
            &mut summary,
            |positions, labelled| {
                bar.set_message(format!(
                    "pass {} of {}: {} positions read, {} boards labelled",
                    number + 1,
                    plan.len(),
                    group(positions),
                    group(labelled)
                ));
            },
        )?;
        summary.read_seconds += reading.elapsed().as_secs_f64();
        let committing = Instant::now();
        for &(s, chunk) in chunks_of_pass {
            let (first, end) =
                super::pool::chunk_range(chunk, config.chunk_boards, pending[s].boards);
            let rows = pass.rows_of(s, first, end);
            let entry = commit_chunk(
                config,
                &names[s],
                chunk,
                first,
                end - first,
                &pass,
                rows,
                &file,
            )
            .map_err(|source| AnnotateError::Commit {
                split: names[s].clone(),
                chunk,
                first_board: first,
                source,
            })?;
            let split = &mut summary.splits[s].1;
            split.chunks_committed += 1;
            split.boards_labelled += entry.state_values;
            split.action_values += entry.action_values;
        }
        summary.commit_seconds += committing.elapsed().as_secs_f64();
    }
    bar.finish_and_clear();
    summary.passes = plan.len() as u64;
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// The passes over the file that `pending` takes; more than one is an
/// error for standard input, which can be read once.
fn one_pass_if_stdin(
    config: &AnnotateConfig,
    file: &Path,
    pending: &[Pending],
) -> Result<Vec<Vec<(usize, u64)>>, AnnotateError> {
    let [boards, _] = reader::MEMORY.share(config.memory_limit, config.workers);
    let plan = passes(pending, config.chunk_boards, boards.max(1));
    if plan.len() > 1 && file == Path::new("-") {
        let boards = pending
            .iter()
            .map(|p| p.chunks.len() as u64 * config.chunk_boards)
            .sum();
        return Err(EvalsReadError::OnePass {
            boards,
            passes: plan.len() as u64,
        }
        .into());
    }
    Ok(plan)
}

/// Whether Stockfish's annotation of the split left boards to these labels
/// (`--only-missing`) in chunks it has committed: replacing the labels
/// would leave those boards without a value.
fn left_to_evals(config: &AnnotateConfig, split: &str) -> Result<bool, AnnotateError> {
    let path = chunks::entries_dir(&config.run, split).join(Source::Stockfish.settings_file());
    let only_missing = match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str::<serde_json::Value>(&text)
                .map_err(|e| StoreError::Corrupt(path.clone(), e.to_string()))?["settings"]["only_missing"]
                == true
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(StoreError::io(&path, e).into()),
    };
    Ok(only_missing && !chunks::committed(&config.run, split, Source::Stockfish)?.is_empty())
}

/// One pass's labels: the distinct labels read, and per split the boards
/// they label as (board id, labels index), sorted after the pass.
struct PassLabels {
    labels: Vec<EvalsLabels>,
    boards: Vec<Vec<(u64, u32)>>,
}

impl PassLabels {
    /// The labelled boards of a split with ids in `[first, end)`.
    fn rows_of(&self, split: usize, first: u64, end: u64) -> &[(u64, u32)] {
        let b = &self.boards[split];
        let lo = b.partition_point(|r| r.0 < first);
        let hi = b.partition_point(|r| r.0 < end);
        &b[lo..hi]
    }
}

/// Reads the file once for the boards of `chunks_of_pass`.
fn read_pass(
    config: &AnnotateConfig,
    file: &Path,
    format: EvalsFormat,
    names: &[String],
    chunks_of_pass: &[(usize, u64)],
    summary: &mut EvalsSummary,
    mut progress: impl FnMut(u64, u64),
) -> Result<PassLabels, AnnotateError> {
    let wanted: HashSet<(usize, u64)> = chunks_of_pass.iter().copied().collect();
    let chunk_boards = config.chunk_boards;
    let index = BoardIndex::load(&config.run, names, |s, id, _| {
        wanted.contains(&(s, id / chunk_boards)) && config.max_boards.is_none_or(|m| id < m)
    })?;
    let mut out = PassLabels {
        labels: Vec::new(),
        boards: vec![Vec::new(); names.len()],
    };
    if index.len() == 0 {
        return Ok(out);
    }
    let mut seen = HashSet::new();
    let mut unusable: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut labelled = 0u64;
    let mut shown = 0u64;
    let mut first_rejects = std::mem::take(&mut summary.first_rejects);
    let mut note = |line: u64, r: &EvalsReject| {
        first_rejects
            .entry(r.code())
            .or_insert_with(|| (line, r.to_string()));
    };
    // Keys are read and positions labelled on every worker thread; the
    // labels reach this thread in file order, so the first of a repeated
    // position labels its boards, as on one thread.
    let pass = reader::read_parallel(
        file,
        format,
        config.workers,
        |key| index.wants(key),
        |_, pos, e| {
            lichess_evals::choose(&e.searches)
                .ok_or(EvalsReject::NoSearch)
                .and_then(|search| lichess_evals::labels(&pos, search))
        },
        |event| match event {
            ReadEvent::Position(line, key, result) => {
                let labels = match result {
                    Ok(l) => l,
                    Err(r) => {
                        *unusable.entry(r.code()).or_default() += 1;
                        note(line, &r);
                        return;
                    }
                };
                // A position the file repeats labels its boards once: the first.
                if !seen.insert(reader::key_hash(key)) {
                    return;
                }
                let at = out.labels.len() as u32;
                out.labels.push(labels);
                for (s, id, _) in index.boards(key) {
                    out.boards[s].push((id, at));
                    labelled += 1;
                }
            }
            ReadEvent::Rejected(line, r) => note(line, r),
            ReadEvent::Progress(positions) => {
                if positions >= shown + (1 << 16) {
                    shown = positions;
                    progress(positions, labelled);
                }
            }
        },
    )?;
    progress(pass.positions, labelled);
    summary.first_rejects = first_rejects;
    let read = &mut summary.read;
    read.lines += pass.lines;
    read.bytes += pass.bytes;
    read.positions += pass.positions;
    read.wanted += pass.wanted;
    for (reason, n) in pass.rejected.into_iter().chain(unusable) {
        *read.rejected.entry(reason).or_default() += n;
    }
    for b in &mut out.boards {
        b.sort_unstable();
    }
    Ok(out)
}

/// Side-to-move score columns and win probability.
fn score(s: SideScore) -> (Option<i32>, Option<i32>, f64) {
    match s {
        (Some(cp), _) => (Some(cp), None, win_probability(Score::Cp(cp))),
        (None, Some(m)) => (None, Some(m), win_probability(Score::Mate(m))),
        (None, None) => (None, None, 0.5),
    }
}

/// The move a position's labels rank best, as Stockfish's annotation
/// ranks them ([`oracle::best_action`]): the highest win probability, then
/// the faster mate, then the lowest action.
fn best_action(l: &EvalsLabels) -> Option<u16> {
    let evals: Vec<(u16, Eval)> = l
        .actions
        .iter()
        .map(|&(action, s)| {
            let score = match s {
                (Some(cp), _) => Some(Score::Cp(cp)),
                (None, Some(m)) => Some(Score::Mate(m)),
                (None, None) => None,
            };
            let eval = Eval {
                score,
                win_prob: self::score(s).2,
                depth: None,
                nodes: None,
                time_ms: None,
            };
            (action, eval)
        })
        .collect();
    oracle::best_action(&evals)
}

/// A chunk's value columns being gathered (`best_action` for state
/// values, `action` for action values).
#[derive(Default)]
struct ValueColumns {
    board_id: Vec<u64>,
    action: Vec<u16>,
    win_prob: Vec<f64>,
    cp: Vec<Option<i32>>,
    mate: Vec<Option<i32>>,
    depth: Vec<u16>,
    nodes: Vec<u64>,
    best_action: Vec<Option<u16>>,
}

impl ValueColumns {
    fn push(&mut self, board_id: u64, s: SideScore, depth: u16, nodes: u64) {
        let (cp, mate, p) = score(s);
        self.board_id.push(board_id);
        self.win_prob.push(p);
        self.cp.push(cp);
        self.mate.push(mate);
        self.depth.push(depth);
        self.nodes.push(nodes);
    }
}

/// Writes and commits one chunk's rows (`rows`: its labelled boards, by
/// id); a chunk without any still commits, so it is not read for again.
#[allow(clippy::too_many_arguments)]
fn commit_chunk(
    config: &AnnotateConfig,
    split: &str,
    chunk: u64,
    first_board: u64,
    boards: u64,
    pass: &PassLabels,
    rows: &[(u64, u32)],
    file: &Path,
) -> Result<EvalsEntry, StoreError> {
    let run = &config.run;
    let n = rows.len();
    let mut sv = ValueColumns::default();
    let mut av = ValueColumns::default();
    for &(id, at) in rows {
        let l = &pass.labels[at as usize];
        let nodes = l.knodes.saturating_mul(1000);
        sv.push(id, l.state, l.depth, nodes);
        sv.best_action.push(best_action(l));
        for &(action, s) in &l.actions {
            av.push(id, s, l.depth, nodes);
            av.action.push(action);
        }
    }
    let source = SOURCE.column_value();
    let m = av.board_id.len();
    let sv_columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from(sv.board_id)),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            "search", n,
        ))),
        Arc::new(Float64Array::from(sv.win_prob)),
        Arc::new(Int32Array::from(sv.cp)),
        Arc::new(Int32Array::from(sv.mate)),
        Arc::new(UInt16Array::from(sv.depth)),
        Arc::new(UInt64Array::from(sv.nodes)),
        Arc::new(UInt32Array::new_null(n)),
        Arc::new(UInt16Array::from(sv.best_action)),
        source.column(n),
    ];
    let av_columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from(av.board_id)),
        Arc::new(UInt16Array::from(av.action)),
        Arc::new(Float64Array::from(av.win_prob)),
        Arc::new(Int32Array::from(av.cp)),
        Arc::new(Int32Array::from(av.mate)),
        Arc::new(UInt16Array::from(av.depth)),
        Arc::new(UInt64Array::from(av.nodes)),
        Arc::new(UInt32Array::new_null(m)),
        source.column(m),
    ];
    let columns = vec![
        (Table::StateValues, sv_columns),
        (Table::ActionValues, av_columns),
    ];
    chunks::write_chunk(run, split, SOURCE, chunk, columns, |_| EvalsEntry {
        chunk,
        first_board,
        boards,
        state_values: n as u64,
        action_values: m as u64,
        file: file.display().to_string(),
        finished_at: unix_now(),
    })
}

/// `annotate --evals FILE --plan`: how much of the run's splits the file
/// labels, per split and game phase ([`reader::coverage`]), before any row
/// is written.
pub fn plan(config: &AnnotateConfig) -> Result<reader::Coverage, AnnotateError> {
    let file = config.evals.clone().expect("plan only with --evals");
    let _run = RunDir::open_shared(&config.run)?;
    let manifest = Manifest::read(&config.run.join(MANIFEST))?;
    let names: Vec<String> = scope(config, &manifest)?.into_iter().map(|s| s.0).collect();
    Ok(reader::coverage(
        &config.run,
        &names,
        &file,
        EvalsFormat::of(&file),
        config.memory_limit,
        config.workers,
    )?)
}

impl Report for reader::Coverage {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let share = |a: u64, b: u64| {
            if b == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}%", 100.0 * a as f64 / b as f64)
            }
        };
        let r = &self.pass;
        writeln!(
            out,
            "the evaluation database ({} lines, {} positions, {} rejected; {} pass{}) labels:",
            group(r.lines),
            group(r.positions),
            group(r.rejected.values().sum()),
            self.passes,
            if self.passes == 1 { "" } else { "es" },
        )?;
        writeln!(
            out,
            "  {:<12} {:<11} {:>12} {:>9} {:>14} {:>15} {:>9}",
            "split", "phase", "boards", "labelled", "legal moves", "action values", "of moves"
        )?;
        for (split, c) in &self.splits {
            let rows =
                std::iter::once(("all".to_owned(), c.all)).chain(c.phases.iter().map(|(p, n)| {
                    (
                        serde_json::to_value(p)
                            .unwrap()
                            .as_str()
                            .unwrap_or("")
                            .to_owned(),
                        *n,
                    )
                }));
            for (phase, n) in rows {
                writeln!(
                    out,
                    "  {:<12} {:<11} {:>12} {:>9} {:>14} {:>15} {:>9}",
                    split,
                    phase,
                    group(n.boards),
                    share(n.covered, n.boards),
                    group(n.legal_moves),
                    group(n.action_values),
                    share(n.action_values, n.legal_moves),
                )?;
            }
        }
        for (reason, n) in &r.rejected {
            writeln!(out, "  rejected {reason}: {}", group(*n))?;
        }
        Ok(())
    }
}

impl Report for EvalsSummary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let r = &self.read;
        let labelled: u64 = self.splits.iter().map(|s| s.1.boards_labelled).sum();
        let actions: u64 = self.splits.iter().map(|s| s.1.action_values).sum();
        writeln!(
            out,
            "labelled {} boards with {} action values from {} in {:.1} s (reading {:.1} s, committing {:.1} s; {} pass{}: {} lines, {} positions, {} wanted, {} rejected)",
            group(labelled),
            group(actions),
            self.file.display(),
            self.seconds,
            self.read_seconds,
            self.commit_seconds,
            self.passes,
            if self.passes == 1 { "" } else { "es" },
            group(r.lines),
            group(r.positions),
            group(r.wanted),
            group(r.rejected.values().sum()),
        )?;
        for (reason, n) in &r.rejected {
            let example = self
                .first_rejects
                .get(reason)
                .map(|(line, why)| format!(" (first: line {line}, {why})"))
                .unwrap_or_default();
            writeln!(out, "  rejected {reason}: {}{example}", group(*n))?;
        }
        for (name, s) in &self.splits {
            writeln!(
                out,
                "  {name}: {} boards in scope, {} chunks ({} done before, {} now); {} boards labelled, {} action values written now",
                group(s.boards_in_scope),
                group(s.chunks_total),
                group(s.chunks_already_done),
                group(s.chunks_committed),
                group(s.boards_labelled),
                group(s.action_values),
            )?;
        }
        writeln!(
            out,
            "wrote {} (source lichess_evals; `chessbench sql {} label_sources` compares it with Stockfish)",
            self.run.display(),
            self.run.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_hold_what_fits() {
        let pending = vec![
            Pending {
                name: "train".into(),
                boards: 5000,
                chunks: vec![0, 2, 4],
            },
            Pending {
                name: "test".into(),
                boards: 100,
                chunks: vec![0],
            },
        ];
        let one = passes(&pending, 1024, 1 << 30);
        assert_eq!(one, vec![vec![(0, 0), (0, 2), (0, 4), (1, 0)]]);
        let two_a_pass = passes(&pending, 1024, 2 * 1024 * BYTES_PER_BOARD);
        assert_eq!(two_a_pass, vec![vec![(0, 0), (0, 2)], vec![(0, 4), (1, 0)]]);
        // Never less than a chunk a pass.
        assert_eq!(passes(&pending, 1024, 1).len(), 4);
    }

    #[test]
    fn the_best_action_is_the_highest_win_probability() {
        let l = EvalsLabels {
            depth: 20,
            knodes: 1,
            state: (Some(30), None),
            actions: vec![
                (5, (Some(-10), None)),
                (7, (None, Some(3))),
                (9, (Some(30), None)),
            ],
        };
        assert_eq!(best_action(&l), Some(7));
        assert_eq!(score((None, Some(-2))).2, 0.0);
        // Equal win probabilities: the faster mate, then the lower action.
        let mates = EvalsLabels {
            actions: vec![
                (5, (None, Some(5))),
                (7, (None, Some(1))),
                (9, (None, Some(1))),
            ],
            ..l
        };
        assert_eq!(best_action(&mates), Some(7));
    }
}
