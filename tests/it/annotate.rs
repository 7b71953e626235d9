//! The annotate stage with the real Stockfish: semantics on hand-checkable
//! boards, coverage of the legal moves, fault injection, SIGKILL and resume,
//! sharding. Skips (printing why) when no Stockfish is installed.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use arrow_array::{Array, Float64Array, Int32Array, StringArray, UInt16Array, UInt64Array};
use tempfile::TempDir;

use crate::util::{self, BIN, col, copy_dir, have_stockfish, python_has, read_table};

/// An ingested (not annotated) run of the pgn-reader Lichess sample, made
/// once and copied per test.
fn base_run() -> &'static Path {
    static BASE: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = BASE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("base");
        util::ingest(
            &run,
            &[util::lichess_1000k().to_str().unwrap(), "--split", "train"],
        );
        (dir, run)
    });
    path
}

fn fresh_run(dir: &TempDir, name: &str) -> PathBuf {
    let run = dir.path().join(name);
    copy_dir(base_run(), &run);
    run
}

/// Small, fast settings shared by the tests (nodes limit: deterministic).
const SMALL: [&str; 6] = [
    "--nodes",
    "300",
    "--max-boards",
    "192",
    "--chunk-boards",
    "32",
];

fn annotate(run: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["annotate", run.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let o = util::run(&args);
    assert!(
        o.status.success(),
        "annotate {extra:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// state_values as board_id -> (kind, win_prob, best_action).
fn state_values(run: &Path) -> BTreeMap<u64, (String, f64, Option<u16>)> {
    let mut out = BTreeMap::new();
    for b in read_table(run, "state_values", "train") {
        let ids = col::<UInt64Array>(&b, "board_id");
        let kind = col::<StringArray>(&b, "kind");
        let wp = col::<Float64Array>(&b, "win_prob");
        let best = col::<UInt16Array>(&b, "best_action");
        for i in 0..b.num_rows() {
            let prev = out.insert(
                ids.value(i),
                (
                    kind.value(i).to_owned(),
                    wp.value(i),
                    (!best.is_null(i)).then(|| best.value(i)),
                ),
            );
            assert!(
                prev.is_none(),
                "board {} twice in state_values",
                ids.value(i)
            );
        }
    }
    out
}

/// (board_id, action) -> (win_prob, cp, mate).
type ActionValues = BTreeMap<(u64, u16), (f64, Option<i32>, Option<i32>)>;

/// The action_values table of the train split.
fn action_values(run: &Path) -> ActionValues {
    let mut out = BTreeMap::new();
    for b in read_table(run, "action_values", "train") {
        let ids = col::<UInt64Array>(&b, "board_id");
        let act = col::<UInt16Array>(&b, "action");
        let wp = col::<Float64Array>(&b, "win_prob");
        let cp = col::<Int32Array>(&b, "cp");
        let mate = col::<Int32Array>(&b, "mate");
        for i in 0..b.num_rows() {
            let v = (
                wp.value(i),
                (!cp.is_null(i)).then(|| cp.value(i)),
                (!mate.is_null(i)).then(|| mate.value(i)),
            );
            let prev = out.insert((ids.value(i), act.value(i)), v);
            assert!(prev.is_none(), "({}, {}) twice", ids.value(i), act.value(i));
        }
    }
    out
}

fn failures(run: &Path) -> usize {
    let dir = run.join("failures/split=train");
    if !dir.exists() {
        return 0;
    }
    read_table(run, "failures", "train")
        .iter()
        .map(|b| b.num_rows())
        .sum()
}

/// legal_moves keys of boards below `max`.
fn legal_keys(run: &Path, max: u64) -> BTreeSet<(u64, u16)> {
    let b = read_table(run, "legal_moves", "train");
    let ids = util::u64s(&b, "board_id");
    let acts = util::u16s(&b, "action");
    ids.into_iter()
        .zip(acts)
        .filter(|(id, _)| *id < max)
        .collect()
}

/// A clean run with the SMALL settings, made once.
fn clean_run() -> &'static Path {
    static CLEAN: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = CLEAN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let run = fresh_run(&dir, "clean");
        annotate(&run, &SMALL);
        (dir, run)
    });
    path
}

#[test]
fn action_values_cover_exactly_the_legal_moves() {
    if !have_stockfish() {
        return;
    }
    let run = clean_run();
    let sv = state_values(run);
    assert_eq!(sv.len(), 192);
    assert_eq!(
        sv.keys().copied().collect::<Vec<_>>(),
        (0..192).collect::<Vec<_>>()
    );
    let av: BTreeSet<(u64, u16)> = action_values(run).into_keys().collect();
    assert_eq!(av, legal_keys(run, 192));
    assert_eq!(failures(run), 0);
    // The best action is the argmax of the board's action values.
    let avs = action_values(run);
    let mut terminal = 0;
    for (id, (kind, wp, best)) in &sv {
        if kind != "search" {
            terminal += 1;
            assert_eq!(*wp, if kind == "checkmate" { 0.0 } else { 0.5 });
            assert_eq!(*best, None);
            assert!(avs.range((*id, 0)..(*id + 1, 0)).next().is_none());
            continue;
        }
        let best = best.expect("non-terminal boards have a best action");
        let top = avs
            .range((*id, 0)..(*id + 1, 0))
            .map(|(_, v)| v.0)
            .fold(f64::MIN, f64::max);
        assert_eq!(avs[&(*id, best)].0, top, "board {id}");
    }
    assert!(
        terminal >= 1,
        "the sample has a checkmate among its first boards"
    );
    // Every stage's counts are in the stats.
    let stats = util::stats_json(run);
    assert_eq!(stats["splits"]["train"]["state_values"], 192);
    assert_eq!(stats["splits"]["train"]["action_values"], av.len() as u64);
}

#[test]
fn mate_in_one_and_checkmate() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pgn = dir.path().join("scholar.pgn");
    std::fs::write(
        &pgn,
        "[Event \"Scholar's mate\"]\n[Site \"https://lichess.org/abcdefgh\"]\n[Result \"1-0\"]\n\n\
         1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n",
    )
    .unwrap();
    let run = dir.path().join("run");
    util::ingest(&run, &[pgn.to_str().unwrap(), "--split", "train"]);
    annotate(&run, &["--nodes", "3000", "-j", "1"]);
    let sv = state_values(&run);
    assert_eq!(sv.len(), 8);
    // Board 6: before 4. Qxf7#, White to move; board 7: Black is mated.
    let vocab = chessbench::chess::actions::vocabulary();
    let mate = vocab.parse("h5f7").unwrap();
    let (kind, wp, best) = &sv[&6];
    assert_eq!((kind.as_str(), *wp, *best), ("search", 1.0, Some(mate)));
    let av = action_values(&run);
    let (mate_wp, _, mate_score) = av[&(6, mate)];
    assert_eq!((mate_wp, mate_score), (1.0, Some(1)));
    for ((id, action), (wp, _, mate_in)) in av.range((6, 0)..(7, 0)) {
        if *action != mate {
            assert!(
                *wp < 1.0 || mate_in.is_some_and(|m| m > 1),
                "board {id}: action {action} ties the mate in 1"
            );
        }
    }
    assert_eq!(sv[&7], ("checkmate".to_owned(), 0.0, None));
    assert!(av.range((7, 0)..(8, 0)).next().is_none());
}

#[test]
fn per_move_and_multipv_agree_on_clearly_decided_boards() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, "multipv");
    annotate(
        &run,
        &[
            "--mode",
            "multipv",
            "--nodes",
            "20000",
            "--max-boards",
            "192",
            "--chunk-boards",
            "32",
        ],
    );
    let per_move = action_values(clean_run());
    let per_move_sv = state_values(clean_run());
    let multipv_sv = state_values(&run);
    assert_eq!(
        action_values(&run).into_keys().collect::<Vec<_>>(),
        per_move.keys().copied().collect::<Vec<_>>()
    );
    let mut decided = 0;
    for (id, (_, _, best)) in &per_move_sv {
        let mut values: Vec<f64> = per_move
            .range((*id, 0)..(*id + 1, 0))
            .map(|(_, v)| v.0)
            .collect();
        values.sort_by(|a, b| b.total_cmp(a));
        // Clearly decided: one move wins, every other move loses badly.
        if values.len() >= 2 && values[0] - values[1] >= 0.5 {
            decided += 1;
            assert_eq!(
                multipv_sv[id].2, *best,
                "board {id}: per-move best {best:?} vs multipv"
            );
        }
    }
    assert!(decided >= 3, "only {decided} clearly decided boards");
}

fn assert_same_as_clean(run: &Path) {
    let clean = clean_run();
    let (a, b) = (state_values(run), state_values(clean));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    let (a, b) = (action_values(run), action_values(clean));
    assert_eq!(a.len(), b.len());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    // Nodes limit + ucinewgame per board: the values are reproducible too.
    let differ = a.iter().filter(|(k, v)| b[*k] != **v).count();
    assert_eq!(
        differ, 0,
        "{differ} action values differ from the clean run"
    );
    assert_eq!(failures(run), 0);
}

/// A fresh run named `name` and the flaky engine (a Python script, standard
/// library only) to annotate it with; None (a skip, or a failure under CI)
/// without Stockfish or python3.
fn flaky_setup(name: &str) -> Option<(TempDir, PathBuf, PathBuf)> {
    if !have_stockfish() || !python_has("sys") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, name);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/engines/flaky_engine.py");
    Some((dir, run, script))
}

#[test]
fn flaky_engine_gives_the_same_keys_and_counts() {
    let Some((_dir, run, script)) = flaky_setup("flaky") else {
        return;
    };
    let mut args = vec![
        "annotate",
        run.to_str().unwrap(),
        "--json",
        "--engine",
        script.to_str().unwrap(),
        "--max-attempts",
        "12",
        "--search-timeout-ms",
        "1500",
    ];
    args.extend_from_slice(&SMALL);
    let o = Command::new(BIN)
        .args(&args)
        .arg("--no-progress")
        .env("FLAKY_CRASH", "0.004")
        .env("FLAKY_HANG", "0.001")
        .env("FLAKY_GARBAGE", "0.004")
        .env("FLAKY_SEED", "7")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let retries = summary["retries"].as_u64().unwrap();
    assert!(retries >= 5, "the proxy should have misbehaved: {summary}");
    assert_same_as_clean(&run);
}

#[test]
fn a_board_that_always_fails_goes_to_failures() {
    let Some((_dir, run, script)) = flaky_setup("broken") else {
        return;
    };
    // The engine crashes on every search with FLAKY_CRASH=1, never with 0;
    // the proxy's other faults are off, so the mended engine never fails
    // (their defaults would fail a board now and then).
    let annotate = |crash: &str| {
        let o = Command::new(BIN)
            .args(["annotate", run.to_str().unwrap(), "--json", "--no-progress"])
            .args(["--engine", script.to_str().unwrap(), "--max-attempts", "2"])
            .args(["--nodes", "300", "--max-boards", "4", "--chunk-boards", "4"])
            .env("FLAKY_CRASH", crash)
            .env("FLAKY_HANG", "0")
            .env("FLAKY_GARBAGE", "0")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    annotate("1");
    let f = read_table(&run, "failures", "train");
    let reasons = util::strings(&f, "reason");
    assert_eq!(reasons.len(), 4, "every board is in failures");
    assert!(reasons.iter().all(|r| r.as_deref() == Some("crash")));
    let detail = util::strings(&f, "detail");
    assert!(
        detail[0]
            .as_deref()
            .unwrap()
            .contains("crashing on purpose"),
        "{detail:?}"
    );
    assert_eq!(state_values(&run).len(), 0);
    assert_eq!(util::stats_json(&run)["splits"]["train"]["failures"], 4);

    // The engine mended, the same command resumes by searching the failed
    // boards again; nothing of the failures is left.
    let summary = annotate("0");
    assert_eq!(summary["splits"][0][1]["chunks_retried"], 1, "{summary}");
    assert_eq!(summary["splits"][0][1]["boards_retried"], 4, "{summary}");
    assert_eq!(summary["splits"][0][1]["boards_annotated"], 4, "{summary}");
    assert_eq!(summary["splits"][0][1]["chunks_committed"], 1, "{summary}");
    assert_eq!(state_values(&run).len(), 4);
    assert_eq!(util::stats_json(&run)["splits"]["train"]["failures"], 0);
    assert!(!run.join("failures/split=train").exists() || failures(&run) == 0);
}

#[test]
fn an_annotation_under_another_shard_count_refuses_to_start() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, "counts");
    // A process annotating the run as one of 3 shards holds this lock.
    let entries = run.join("annotate");
    std::fs::create_dir_all(&entries).unwrap();
    let held = std::fs::File::create(entries.join(".shards-3.lock")).unwrap();
    held.lock_shared().unwrap();
    let o = Command::new(BIN)
        .args([
            "annotate",
            run.to_str().unwrap(),
            "--no-progress",
            "--shard",
            "1/2",
        ])
        .args(SMALL)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(
        stderr.contains("another process is annotating this run as one of 3 shards")
            && stderr.contains("(1/2) stops without writing anything"),
        "{stderr}"
    );
    assert!(!run.join("state_values").exists(), "nothing written");
    // The same count is no conflict: another shard of the 3 starts.
    let o = Command::new(BIN)
        .args([
            "annotate",
            run.to_str().unwrap(),
            "--no-progress",
            "--shard",
            "0/3",
        ])
        .args(SMALL)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(held);
}

#[test]
fn sigkill_and_resume_lose_and_duplicate_nothing() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, "killed");
    let mut child = Command::new(BIN)
        .args(["annotate", run.to_str().unwrap(), "--no-progress"])
        .args(SMALL)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let entries = run.join("annotate/split=train");
    let start = Instant::now();
    loop {
        let n = std::fs::read_dir(&entries)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref().is_ok_and(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        name.starts_with("chunk-") && name.ends_with(".json")
                    })
                })
                .count()
            })
            .unwrap_or(0);
        if n >= 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no chunk committed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let done_before = state_values(&run).len();
    assert!(done_before > 0 && done_before < 192, "{done_before}");
    let summary = annotate(&run, &SMALL);
    let train = &summary["splits"][0][1];
    assert!(
        train["chunks_already_done"].as_u64().unwrap() >= 2,
        "{summary}"
    );
    assert_same_as_clean(&run);
    // A third run has nothing left to do.
    let summary = annotate(&run, &SMALL);
    assert_eq!(summary["splits"][0][1]["chunks_committed"], 0);
}

#[test]
fn a_full_disk_names_the_file_leaves_nothing_half_written_and_resumes() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, "full");
    let mut args = vec!["annotate", run.to_str().unwrap()];
    args.extend_from_slice(&SMALL);
    // No file may grow past 4 KiB: a chunk's action values cannot be written.
    let o = crate::disk::run_with_file_limit(4096, &args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "annotate succeeded: {err}");
    assert!(
        err.contains("/split=train/chunk-0") && err.contains(".parquet.tmp: File too large"),
        "the error names the file: {err}"
    );
    assert!(err.contains("run the same command again"), "{err}");
    // Nothing of the failed chunk is left: no temporary file, no entry.
    let mut left = Vec::new();
    for table in ["state_values", "action_values", "failures", "annotate"] {
        let part = run.join(table).join("split=train");
        for e in std::fs::read_dir(&part).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("chunk-") {
                left.push(format!("{table}/{name}"));
            }
        }
    }
    assert!(left.is_empty(), "left behind: {left:?}");
    // With room again, the same command completes the split as a clean run.
    annotate(&run, &SMALL);
    assert_same_as_clean(&run);
}

#[test]
fn four_shards_equal_one_unsharded_run() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, "sharded");
    // Two shards at once (they share the run), then the other two via the
    // environment, as a Slurm array would run them.
    let spawn = |shard: &str| {
        Command::new(BIN)
            .args([
                "annotate",
                run.to_str().unwrap(),
                "--no-progress",
                "-j",
                "1",
            ])
            .args(["--shard", shard])
            .args(SMALL)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("0/4"), spawn("1/4"));
    for c in [a, b] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    for id in ["2", "3"] {
        let o = Command::new(BIN)
            .args(["annotate", run.to_str().unwrap(), "--no-progress", "--json"])
            .args(SMALL)
            .env("SLURM_ARRAY_TASK_ID", id)
            .env("SLURM_ARRAY_TASK_COUNT", "4")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(s["shard"], format!("{id}/4"));
        assert_eq!(s["shard_source"], "Slurm job array");
    }
    assert_same_as_clean(&run);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
    let shards = manifest["annotate"]["splits"]["train"]["shards"]
        .as_object()
        .unwrap();
    assert_eq!(shards.len(), 4, "{manifest}");
}

#[test]
fn changed_settings_and_bad_engines_are_clear_errors() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, "errors");
    let r = run.to_str().unwrap();
    let o = util::run(&[
        "annotate",
        r,
        "--engine",
        "/nonexistent/sf",
        "--nodes",
        "10",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/sf"), "{err}");
    annotate(
        &run,
        &["--nodes", "100", "--max-boards", "8", "--chunk-boards", "8"],
    );
    let o = util::run(&[
        "annotate",
        r,
        "--nodes",
        "200",
        "--max-boards",
        "8",
        "--chunk-boards",
        "8",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("other settings") && err.contains("--overwrite"),
        "{err}"
    );
    annotate(
        &run,
        &[
            "--nodes",
            "200",
            "--max-boards",
            "8",
            "--chunk-boards",
            "8",
            "--overwrite",
        ],
    );
    let o = util::run(&["annotate", dir.path().to_str().unwrap(), "--nodes", "10"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a chessbench run"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The evaluation database's coverage of a run: an evaluation file made
/// from real Stockfish searches of some of the run's boards (in the
/// database's form: four FEN fields, White's scores, castling as king takes
/// rook), a repeated position, a variation with an illegal move, the ten
/// real rows of the published sample as JSON lines and a malformed line.
/// Every board sharing a searched board's four FEN fields is covered once,
/// nothing else is, and a small memory limit (several passes over the file)
/// gives the same counts.
/// The evaluation file, in `dir`, with the boards' FENs and the searched
/// ones: see [`the_evaluation_database_covers_the_boards_that_share_its_positions`].
struct EvalsFile {
    path: PathBuf,
    fens: Vec<String>,
    searched: Vec<String>,
}

fn evals_file(run: &Path, dir: &Path) -> EvalsFile {
    use chessbench::uci_client::{Engine, Limit, Position, Score};
    use shakmaty::{CastlingMode, Chess, Color, Position as _, fen::Fen};

    let batches = read_table(run, "boards", "train");
    let fens: Vec<String> = util::strings(&batches, "fen")
        .into_iter()
        .map(Option::unwrap)
        .collect();
    let key = |fen: &str| fen.split(' ').take(4).collect::<Vec<_>>().join(" ");
    // Searched: every 997th board, and a board whose four fields another
    // board of the run shares (a transposition at another move number).
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for f in &fens {
        *by_key.entry(key(f)).or_default() += 1;
    }
    let shared = fens
        .iter()
        .find(|f| by_key[&key(f)] > 1)
        .expect("a transposition in 433 games")
        .clone();
    let mut searched: Vec<String> = fens.iter().step_by(997).cloned().collect();
    searched.push(shared.clone());
    let config = chessbench::testing::stockfish().unwrap();
    let mut engine = Engine::start(&config).unwrap();
    let mut file = String::new();
    for fen in &searched {
        let pos: Chess = Fen::from_ascii(fen.as_bytes())
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap();
        if pos.legal_moves().is_empty() {
            continue;
        }
        engine
            .set_position(Position::Fen {
                fen: fen.as_str().into(),
                moves: Vec::new().into(),
            })
            .unwrap();
        let r = engine
            .search(Limit::Nodes(2_000), &[], std::time::Duration::from_secs(30))
            .unwrap();
        let best = r.best().unwrap();
        let flip = if pos.turn() == Color::White { 1 } else { -1 };
        let mut p = pos.clone();
        let line: Vec<String> = best
            .pv
            .iter()
            .map(|u| {
                let m = u.to_move(&p).unwrap();
                p.play_unchecked(m);
                m.to_uci(CastlingMode::Chess960).to_string()
            })
            .collect();
        let mut pv = match best.score {
            Score::Cp(c) => serde_json::json!({ "cp": flip * c }),
            Score::Mate(n) => serde_json::json!({ "mate": flip * n }),
        };
        pv["line"] = line.join(" ").into();
        file.push_str(
            &serde_json::json!({
                "fen": key(fen),
                "evals": [{ "pvs": [pv], "knodes": r.nodes / 1000, "depth": best.depth }],
            })
            .to_string(),
        );
        file.push('\n');
    }
    engine.quit();
    // A position the file repeats counts once; one whose variation plays
    // an illegal move is a reject.
    let first_line = file.lines().next().unwrap().to_owned();
    file.push_str(&first_line);
    file.push('\n');
    file.push_str(
        &serde_json::json!({
            "fen": key(&shared),
            "evals": [{ "pvs": [{ "cp": 0, "line": "a1a1" }], "knodes": 1, "depth": 99 }],
        })
        .to_string(),
    );
    file.push('\n');
    // The published sample's ten positions, which this run does not hold.
    let mut csv = csv::Reader::from_path(util::data_file("lichess_evals_sample10.csv")).unwrap();
    for r in csv.records() {
        let r = r.unwrap();
        let score = if r[4].is_empty() {
            serde_json::json!({ "mate": r[5].parse::<f64>().unwrap() as i32 })
        } else {
            serde_json::json!({ "cp": r[4].parse::<f64>().unwrap() as i32 })
        };
        let mut pv = score;
        pv["line"] = r[1].into();
        file.push_str(
            &serde_json::json!({ "fen": &r[0], "evals": [{ "pvs": [pv], "knodes": r[3].parse::<u64>().unwrap(), "depth": r[2].parse::<u64>().unwrap() }] })
                .to_string(),
        );
        file.push('\n');
    }
    file.push_str("{\"fen\": \"not a fen\"\n");
    let path = dir.join("evals.jsonl.zst");
    std::fs::write(&path, util::zstd(file.as_bytes())).unwrap();
    EvalsFile {
        path,
        fens,
        searched,
    }
}

#[test]
fn the_evaluation_database_covers_the_boards_that_share_its_positions() {
    use chessbench::annotate::lichess_evals::reader::{
        EvalsFormat, EvalsReadError, INDEX_BYTES_PER_BOARD, coverage,
    };

    if !have_stockfish() {
        return;
    }
    let run = base_run();
    let batches = read_table(run, "boards", "train");
    let dir = tempfile::tempdir().unwrap();
    let EvalsFile {
        path,
        fens,
        searched,
    } = evals_file(run, dir.path());
    let key = |fen: &str| fen.split(' ').take(4).collect::<Vec<_>>().join(" ");

    let searched_keys: BTreeSet<String> = searched.iter().map(|f| key(f)).collect();
    let expected = fens
        .iter()
        .filter(|f| searched_keys.contains(&key(f)))
        .count() as u64;
    assert!(
        expected > searched_keys.len() as u64,
        "the shared key covers two boards"
    );
    let splits = ["train".to_owned()];
    let full = coverage(run, &splits, &path, EvalsFormat::JsonLines, 1 << 30, 1).unwrap();
    // Read on three threads, the same counts and rejects.
    let three = coverage(run, &splits, &path, EvalsFormat::JsonLines, 1 << 30, 3).unwrap();
    assert_eq!(three, full);
    let c = &full.splits["train"].all;
    assert_eq!(c.boards, fens.len() as u64);
    assert_eq!(
        c.legal_moves,
        util::u8s(&batches, "num_legal_moves")
            .iter()
            .map(|&n| u64::from(n))
            .sum::<u64>()
    );
    assert_eq!(c.covered, expected, "{full:?}");
    assert_eq!(c.action_values, expected, "one variation a position");
    // The phases partition the split: their counts add up to it, and the
    // every-997th sample reaches more than one phase.
    let phases = &full.splits["train"].phases;
    type Field = fn(&chessbench::annotate::lichess_evals::reader::Counts) -> u64;
    let fields: [Field; 2] = [|c| c.boards, |c| c.covered];
    for f in fields {
        assert_eq!(phases.values().map(f).sum::<u64>(), f(c), "{phases:?}");
    }
    assert!(
        phases.values().filter(|p| p.covered > 0).count() > 1,
        "{phases:?}"
    );
    assert_eq!(full.passes, 1);
    assert_eq!(
        full.pass.rejected,
        BTreeMap::from([("bad_json", 1), ("illegal_move", 1)]),
        "{full:?}"
    );
    // Within a limit that holds a third of the index: three passes, the
    // same counts.
    let small = fens.len() as u64 * INDEX_BYTES_PER_BOARD * 2 / 3 + 1;
    let parts = coverage(run, &splits, &path, EvalsFormat::JsonLines, small, 2).unwrap();
    assert!(parts.passes >= 2, "{parts:?}");
    assert_eq!(parts.splits, full.splits);
    // Standard input cannot be read twice.
    assert!(matches!(
        coverage(
            run,
            &splits,
            std::path::Path::new("-"),
            EvalsFormat::JsonLines,
            small,
            2
        ),
        Err(EvalsReadError::OnePass { .. })
    ));
}

/// `annotate --evals`: the boards the file covers (those sharing a searched
/// board's four FEN fields) get a state value and one action value per
/// variation's first move, with source `lichess_evals` and the search's
/// depth and nodes, in their own chunk files; `--plan` predicts the counts;
/// a rerun adds nothing; Stockfish with `--only-missing` then searches
/// exactly the boards left, so each board has one source; and SQL's label
/// sources, and a `.bag` export of both, see the two.
#[test]
fn evals_label_the_covered_boards_and_stockfish_fills_the_rest() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, "evals");
    let EvalsFile {
        path,
        fens,
        searched,
    } = evals_file(&run, dir.path());
    let file = path.to_str().unwrap();
    let key = |fen: &str| fen.split(' ').take(4).collect::<Vec<_>>().join(" ");
    let keys: BTreeSet<String> = searched.iter().map(|f| key(f)).collect();
    let covered: BTreeSet<u64> = fens
        .iter()
        .enumerate()
        .filter(|(_, f)| keys.contains(&key(f)))
        .map(|(id, _)| id as u64)
        .collect();

    let plan = annotate(&run, &["--evals", file, "--plan"]);
    assert_eq!(
        plan["splits"]["train"]["covered"],
        covered.len() as u64,
        "{plan}"
    );
    let first = annotate(&run, &["--evals", file, "--chunk-boards", "32"]);
    assert_eq!(
        first["splits"][0][1]["boards_labelled"],
        covered.len() as u64,
        "{first}"
    );
    assert_eq!(
        first["read"]["rejected"],
        serde_json::json!({"bad_json": 1, "illegal_move": 1})
    );
    let values = state_values(&run);
    assert_eq!(values.keys().copied().collect::<BTreeSet<_>>(), covered);
    let batches = read_table(&run, "state_values", "train");
    for b in &batches {
        let source = col::<StringArray>(b, "source");
        let depth = col::<UInt16Array>(b, "depth");
        for i in 0..b.num_rows() {
            assert_eq!(source.value(i), "lichess_evals");
            assert!(!depth.is_null(i) && depth.value(i) > 0);
        }
    }
    // One action value per variation (one each in this file), and it is
    // the best action.
    let actions = action_values(&run);
    assert_eq!(actions.len(), covered.len());
    for (id, action) in actions.keys() {
        assert_eq!(values[id].2, Some(*action));
    }
    assert!(
        std::fs::read_dir(run.join("state_values/split=train"))
            .unwrap()
            .all(|e| e
                .unwrap()
                .file_name()
                .to_str()
                .unwrap()
                .starts_with("evals-"))
    );

    // A rerun finds every chunk committed and writes nothing.
    let again = annotate(&run, &["--evals", file, "--chunk-boards", "32"]);
    assert_eq!(again["splits"][0][1]["chunks_committed"], 0, "{again}");
    assert_eq!(state_values(&run).len(), covered.len());
    let stats = util::stats_json(&run);
    assert_eq!(
        stats["splits"]["train"]["lichess_evals_state_values"],
        covered.len() as u64
    );
    assert_eq!(stats["splits"]["train"]["state_values"], 0);

    // Within a memory limit that holds a few chunks a pass: many passes
    // over the file, the same rows.
    let passes_run = fresh_run(&dir, "evals-passes");
    let many = annotate(
        &passes_run,
        &[
            "--evals",
            file,
            "--chunk-boards",
            "32",
            "--memory-limit",
            "256KiB",
        ],
    );
    assert!(many["passes"].as_u64().unwrap() > 10, "{many}");
    assert_eq!(state_values(&passes_run), values);
    assert_eq!(action_values(&passes_run), actions);
    // Another file is refused until --overwrite.
    let other = dir.path().join("other.jsonl.zst");
    std::fs::copy(&path, &other).unwrap();
    let o = util::run(&[
        "annotate",
        passes_run.to_str().unwrap(),
        "--evals",
        other.to_str().unwrap(),
        "--chunk-boards",
        "32",
    ]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--overwrite"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // Stockfish fills the boards the database left, and only those; its
    // plan counts only those.
    let mut args = SMALL.to_vec();
    args.extend(["--only-missing", "true"]);
    let below = covered.iter().filter(|&&id| id < 192).count() as u64;
    let mut plan_args = args.clone();
    plan_args.push("--plan");
    let plan = annotate(&run, &plan_args);
    assert_eq!(plan["splits"][0]["left_to_evals"], below, "{plan}");
    let sf = annotate(&run, &args);
    assert_eq!(sf["splits"][0][1]["left_to_evals"], below, "{sf}");
    assert_eq!(sf["splits"][0][1]["boards_annotated"], 192 - below, "{sf}");
    let mut sources: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for b in read_table(&run, "state_values", "train") {
        let ids = col::<UInt64Array>(&b, "board_id");
        let source = col::<StringArray>(&b, "source");
        for i in 0..b.num_rows() {
            sources
                .entry(ids.value(i))
                .or_default()
                .push(source.value(i).to_owned());
        }
    }
    for id in 0..192 {
        let want = if covered.contains(&id) {
            "lichess_evals"
        } else {
            "stockfish"
        };
        assert_eq!(sources[&id], [want], "board {id}");
    }

    // Starting Stockfish's annotation over keeps the database's labels.
    let mut over = args.clone();
    over.push("--overwrite");
    annotate(&run, &over);
    assert_eq!(
        util::stats_json(&run)["splits"]["train"]["lichess_evals_state_values"],
        covered.len() as u64
    );

    // Replacing the labels Stockfish left those boards to is refused, and
    // deletes nothing.
    let o = util::run(&[
        "annotate",
        run.to_str().unwrap(),
        "--evals",
        file,
        "--chunk-boards",
        "32",
        "--overwrite",
    ]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--only-missing"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        util::stats_json(&run)["splits"]["train"]["lichess_evals_state_values"],
        covered.len() as u64
    );

    // SQL: each source's coverage, and the `both` choice of the records.
    let o = util::run(&[
        "sql",
        run.to_str().unwrap(),
        "label_sources",
        "--only",
        "label_source_coverage",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let rows: serde_json::Value = serde_json::from_str(&text).unwrap();
    let all = |source: &str| {
        rows.as_array()
            .into_iter()
            .flatten()
            .chain(
                rows["label_source_coverage"]
                    .as_array()
                    .into_iter()
                    .flatten(),
            )
            .find(|r| r["phase"] == "all" && r["source"] == source)
            .map(|r| r["boards_labelled"].as_u64().unwrap())
    };
    assert_eq!(all("lichess_evals"), Some(covered.len() as u64), "{text}");
    assert_eq!(all("stockfish"), Some(192 - below), "{text}");
    let out = dir.path().join("bag");
    let o = util::run(&[
        "bag",
        "export",
        run.to_str().unwrap(),
        "--split",
        "train",
        "--set",
        "state_value",
        "--label-source",
        "both",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let exported: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        exported[0]["records"],
        (192 - below) + covered.len() as u64,
        "{exported}"
    );
}

/// Value files written before the `source` column existed read as
/// Stockfish's beside new files that have it, in every view: a run
/// annotated by an older chessbench can take the evaluation database's
/// labels.
#[test]
fn value_files_without_a_source_column_read_as_stockfish() {
    use std::sync::Arc;

    use parquet::arrow::{ArrowWriter, arrow_reader::ParquetRecordBatchReaderBuilder};

    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = fresh_run(&dir, "old");
    annotate(&run, &SMALL);
    // Chunk 0 as an older chessbench wrote it: no `source`.
    for table in ["state_values", "action_values"] {
        let path = run.join(table).join("split=train/chunk-00000000.parquet");
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<_> = reader.map(Result::unwrap).collect();
        let keep: Vec<usize> = (0..batches[0].num_columns())
            .filter(|&i| batches[0].schema().field(i).name() != "source")
            .collect();
        let schema = Arc::new(batches[0].schema().project(&keep).unwrap());
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None).unwrap();
        for b in &batches {
            w.write(&b.project(&keep).unwrap()).unwrap();
        }
        w.close().unwrap();
    }
    let evals = dir.path().join("one.jsonl");
    let fen = util::strings(&read_table(&run, "boards", "train"), "fen")[0]
        .clone()
        .unwrap();
    let key = fen.split(' ').take(4).collect::<Vec<_>>().join(" ");
    // The first board's best move by the run's own value, as one variation.
    let best = state_values(&run)[&0].2.unwrap();
    let uci = util::strings(&read_table(&run, "legal_moves", "train"), "uci");
    let actions = util::u16s(&read_table(&run, "legal_moves", "train"), "action");
    let ids = util::u64s(&read_table(&run, "legal_moves", "train"), "board_id");
    let line = (0..ids.len())
        .find(|&i| ids[i] == 0 && actions[i] == best)
        .map(|i| uci[i].clone().unwrap())
        .unwrap();
    std::fs::write(
        &evals,
        serde_json::json!({"fen": key, "evals": [{"pvs": [{"cp": 20, "line": line}], "knodes": 50, "depth": 30}]})
            .to_string()
            + "\n",
    )
    .unwrap();
    annotate(&run, &["--evals", evals.to_str().unwrap()]);
    let o = util::run(&[
        "sql",
        run.to_str().unwrap(),
        "-e",
        "SELECT source, count(*) AS n FROM state_values GROUP BY ALL ORDER BY ALL",
        "--format",
        "json",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["source"], "lichess_evals", "{rows}");
    assert!(rows[0]["n"].as_u64().unwrap() >= 1, "{rows}");
    assert_eq!(rows[1]["source"], "stockfish", "{rows}");
    assert_eq!(rows[1]["n"], 192, "{rows}");
    let agreement = util::run(&[
        "sql",
        run.to_str().unwrap(),
        "label_sources",
        "--only",
        "label_source_agreement",
        "--format",
        "json",
        "--quiet",
    ]);
    assert!(agreement.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&agreement.stdout).unwrap();
    let all = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == "all")
        .unwrap();
    assert!(all["boards_both"].as_u64().unwrap() >= 1, "{rows}");
    // Board 0's variation begins with Stockfish's own best move.
    assert!(all["same_best_move"].as_f64().unwrap() > 0.0, "{rows}");
}
