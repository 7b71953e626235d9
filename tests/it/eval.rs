//! Evaluation and play on checkpoints trained from a run annotated by the
//! real Stockfish: `chessbench eval` (metrics, the Stockfish oracle check,
//! puzzles, games against Stockfish, the report) and `chessbench uci`
//! driven by real UCI clients (chessbench's own, and python-chess's).

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use chessbench::uci_client::{Engine, EngineConfig, Limit, Position};
use shakmaty::{Chess, Position as _, uci::UciMove};

use crate::{
    sql::annotated,
    util::{BIN, data_file, have_stockfish, python_has, run},
};

/// A checkpoint of `policy` trained for a few steps on the annotated run.
fn checkpoint(name: &str, policy: &str) -> PathBuf {
    let o = run(&[
        "train",
        annotated().to_str().unwrap(),
        "--name",
        name,
        "--policy",
        policy,
        "--buckets",
        "32",
        "--batch-size",
        "32",
        "--steps",
        "4",
        "--eval-records",
        "64",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    annotated().join("train").join(name)
}

fn av_checkpoint() -> &'static Path {
    static CKPT: OnceLock<PathBuf> = OnceLock::new();
    CKPT.get_or_init(|| checkpoint("eval_av", "action_value"))
}

const PUZZLES: &str = "PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl,OpeningTags\n\
00008,r6k/pp2r2p/4Rp1Q/3p4/8/1N1P2R1/PqP2bPP/7K b - - 0 24,f2g3 e6e7 b2b1 b3c1 b1c1 h6c1,1800,77,95,8421,crushing,https://lichess.org/787zsVup/black#48,\n\
0000D,5rk1/1p3ppp/pq3b2/8/8/1P1Q1N2/P4PPP/3R2K1 w - - 2 27,d3d6 f8d8 d6d8 f6d8,1492,74,96,33381,advantage,https://lichess.org/F8M8OS71#53,\n";

fn eval_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["eval", "--json"];
    all.extend_from_slice(args);
    let o = run(&all);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn eval_scores_metrics_oracle_puzzles_and_games_and_writes_the_report() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let puzzles = dir.path().join("puzzles.csv");
    std::fs::write(&puzzles, PUZZLES).unwrap();
    let out = dir.path().join("report");
    let s = eval_json(&[
        annotated().to_str().unwrap(),
        "--checkpoint",
        av_checkpoint().to_str().unwrap(),
        "--boards",
        "40",
        // The labels' own setting (tests/it/sql.rs annotates at 200 nodes).
        "--oracle",
        "stockfish:nodes=200",
        "--puzzles",
        puzzles.to_str().unwrap(),
        "--puzzle-engine",
        "stockfish:nodes=20000",
        "--opponent",
        "stockfish:nodes=1",
        "--openings-count",
        "1",
        "--adjudicate",
        "stockfish:nodes=5000",
        "--max-plies",
        "120",
        "--out",
        out.to_str().unwrap(),
    ]);
    let m = &s["metrics"];
    assert_eq!(m["boards"], 40);
    let acc = m["action_accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&acc));
    let tau = m["kendall_tau"].as_f64().unwrap();
    assert!((-1.0..=1.0).contains(&tau));
    assert!(m["log_loss"].as_f64().unwrap() > 0.0);
    assert!(m["entropy"].as_f64().unwrap() > 0.0);
    // Stockfish re-searching at the labels' node limit reproduces them.
    let o = &s["oracle"];
    assert_eq!(o["boards"], 40);
    assert_eq!(o["action_accuracy"], 1.0, "{o}");
    assert_eq!(o["kendall_tau"], 1.0, "{o}");
    assert_eq!(o["l2_win_prob"], 0.0, "{o}");
    // Puzzles: the model and Stockfish (which solves both easy ones).
    let p = s["puzzles"].as_array().unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0]["puzzles"], 2);
    assert_eq!(p[1]["player"], "stockfish-nodes-20000");
    assert_eq!(p[1]["solved"], 2, "{}", p[1]);
    // Games: one opening, both colours, and an Elo table.
    let g = &s["games"][0];
    assert_eq!(g["games"], 2);
    assert_eq!(s["ratings"].as_array().unwrap().len(), 2);
    assert_eq!(s["anchor"], "stockfish-nodes-1");
    for f in [
        "eval.json",
        "eval.md",
        "calibration.csv",
        "puzzles.csv",
        "puzzles_by_rating.csv",
        "games.pgn",
        "games.csv",
        "elo.csv",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let pgn = std::fs::read_to_string(out.join("games.pgn")).unwrap();
    assert_eq!(pgn.matches("[Event ").count(), 2);
    // A model four steps old loses material fast: Stockfish's adjudication
    // (a mate score or beyond 1300 cp) ends its games before the cap.
    let games_csv = std::fs::read_to_string(out.join("games.csv")).unwrap();
    assert!(
        games_csv.contains("adjudicated: Stockfish evaluation"),
        "{games_csv}"
    );
    assert!(!games_csv.contains("length cap"), "{games_csv}");
    assert!(pgn.contains("[White \"eval_av@4\"]") && pgn.contains("[Black \"eval_av@4\"]"));
    let md = std::fs::read_to_string(out.join("eval.md")).unwrap();
    assert!(md.contains("Kendall tau") && md.contains("stockfish-nodes-200"));
    let puzzles_csv = std::fs::read_to_string(out.join("puzzles.csv")).unwrap();
    assert_eq!(puzzles_csv.lines().count(), 1 + 4);
}

#[test]
fn state_value_and_cloning_policies_evaluate() {
    if !have_stockfish() {
        return;
    }
    for (name, policy) in [
        ("eval_sv", "state_value"),
        ("eval_bc", "behavioral_cloning"),
    ] {
        let ckpt = checkpoint(name, policy);
        let dir = tempfile::tempdir().unwrap();
        let s = eval_json(&[
            annotated().to_str().unwrap(),
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--boards",
            "20",
            "--only",
            "metrics",
            "--out",
            dir.path().to_str().unwrap(),
        ]);
        let m = &s["metrics"];
        assert_eq!(m["boards"], 20, "{name}");
        assert!(m["log_loss"].as_f64().unwrap() > 0.0, "{name}");
        assert_eq!(
            m["l2_win_prob"].is_null(),
            policy == "behavioral_cloning",
            "{name}"
        );
    }
}

/// A report rewritten over an earlier one that fails half-way (here a
/// directory where `games.pgn` goes, after the CSVs were replaced) names the
/// file and leaves no `eval.json`: the marker never stands over a mix of
/// two evaluations.
#[test]
fn a_report_that_fails_half_way_withdraws_the_earlier_marker() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let args = [
        "eval",
        annotated().to_str().unwrap(),
        "--checkpoint",
        av_checkpoint().to_str().unwrap(),
        "--boards",
        "10",
        "--only",
        "metrics",
        "--out",
        out.to_str().unwrap(),
    ];
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.join("eval.json").is_file());
    std::fs::remove_file(out.join("games.pgn")).unwrap();
    std::fs::create_dir_all(out.join("games.pgn").join("in-the-way")).unwrap();
    let o = run(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("games.pgn"), "{err}");
    assert!(
        !out.join("eval.json").exists(),
        "the earlier eval.json outlived a failed rewrite"
    );
    // The files written before the failure are whole (no temporary left).
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "calibration.csv",
            "elo.csv",
            "eval.md",
            "games.csv",
            "games.pgn",
            "puzzles.csv",
            "puzzles_by_rating.csv"
        ]
    );
}

#[test]
fn eval_on_the_shared_lichess_puzzles() {
    if !have_stockfish() {
        return;
    }
    let puzzles = data_file("lichess_db_puzzle_head1000.csv");
    let dir = tempfile::tempdir().unwrap();
    let s = eval_json(&[
        annotated().to_str().unwrap(),
        "--checkpoint",
        av_checkpoint().to_str().unwrap(),
        "--only",
        "puzzles",
        "--puzzles",
        puzzles.to_str().unwrap(),
        "--max-puzzles",
        "50",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let p = &s["puzzles"][0];
    assert_eq!(p["puzzles"], 50);
    let buckets = p["by_rating"].as_array().unwrap();
    assert!(buckets.len() > 3, "{p}");
    let n: u64 = buckets.iter().map(|b| b["puzzles"].as_u64().unwrap()).sum();
    assert_eq!(n, 50);
}

#[test]
fn missing_checkpoint_and_bad_puzzles_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "eval",
        dir.path().to_str().unwrap(),
        "--checkpoint",
        dir.path().join("nope").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no such checkpoint") && err.contains("nope"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    if !have_stockfish() {
        return;
    }
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "PuzzleId,FEN,Moves,Rating\nx,8/8/8/8/8/8/8/K6k w - - 0 1,a1a3 h1h2,1000\n",
    )
    .unwrap();
    let o = run(&[
        "eval",
        annotated().to_str().unwrap(),
        "--checkpoint",
        av_checkpoint().to_str().unwrap(),
        "--only",
        "puzzles",
        "--puzzles",
        bad.to_str().unwrap(),
        "--out",
        dir.path().join("r").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.csv:2") && err.contains("a1a3 is not legal"),
        "{err}"
    );
    let o = run(&[
        "eval",
        annotated().to_str().unwrap(),
        "--checkpoint",
        av_checkpoint().to_str().unwrap(),
        "--adjudicate",
        "checkpoint:x",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("adjudicate: expected a stockfish"), "{err}");
    let o = Command::new(BIN)
        .args([
            "uci",
            "--checkpoint",
            dir.path().join("nope").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such checkpoint"));
}

#[test]
fn uci_engine_plays_through_chessbench_own_uci_client() {
    if !have_stockfish() {
        return;
    }
    let config = EngineConfig {
        path: PathBuf::from(BIN),
        args: vec![
            "uci".into(),
            "--checkpoint".into(),
            av_checkpoint().to_str().unwrap().into(),
        ],
        ..EngineConfig::default()
    };
    let mut engine = Engine::start(&config).unwrap();
    assert!(engine.id().name.contains("eval_av@4"), "{:?}", engine.id());
    let mut pos = Chess::default();
    let mut moves: Vec<UciMove> = Vec::new();
    // Play a few moves against itself through the protocol.
    for _ in 0..6 {
        engine.set_position(Position::startpos(&moves)).unwrap();
        let r = engine
            .search(Limit::Nodes(1), &[], Duration::from_secs(60))
            .unwrap();
        let best = r.bestmove.expect("a move");
        let m = best.to_move(&pos).expect("a legal move");
        pos.play_unchecked(m);
        moves.push(best);
        assert!(r.best().is_some(), "an info line with a score");
    }
    engine.quit();
}

/// What `chessbench uci --checkpoint CHECKPOINT` writes when `script` is
/// its whole standard input (the engine must exit cleanly).
fn uci_session(checkpoint: &Path, script: &[u8]) -> String {
    let mut child = Command::new(BIN)
        .args(["uci", "--checkpoint"])
        .arg(checkpoint)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(script).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn uci_engine_survives_bad_commands_and_speaks_to_python_chess() {
    if !have_stockfish() {
        return;
    }
    let out = uci_session(
        av_checkpoint(),
        b"uci\nposition startpos moves e2e4 e7e4\ngo\nnonsense\nposition fen 8/8\n\
          position startpos moves e2e4\nisready\ngo movetime 10\nquit\n",
    );
    assert!(out.contains("uciok") && out.contains("readyok"), "{out}");
    assert!(
        out.contains("info string error: move 2 of the position command: e7e4 is not legal"),
        "{out}"
    );
    assert!(
        out.contains("bestmove 0000"),
        "go without a valid position: {out}"
    );
    assert!(out.contains("(unknown command): \"nonsense\""), "{out}");
    let last = out.lines().last().unwrap();
    let best = last.strip_prefix("bestmove ").expect(last);
    let mut pos = Chess::default();
    pos.play_unchecked(
        shakmaty::uci::UciMove::from_ascii(b"e2e4")
            .unwrap()
            .to_move(&pos)
            .unwrap(),
    );
    assert!(
        best.parse::<UciMove>().unwrap().to_move(&pos).is_ok(),
        "a legal reply to 1. e4: {best}"
    );

    // python-chess's engine module, if installed.
    let script = format!(
        "import chess, chess.engine\n\
         e = chess.engine.SimpleEngine.popen_uci([{bin:?}, 'uci', '--checkpoint', {ckpt:?}])\n\
         b = chess.Board()\n\
         for _ in range(4):\n    r = e.play(b, chess.engine.Limit(time=1.0))\n    assert r.move in b.legal_moves\n    b.push(r.move)\n\
         e.quit()\nprint('ok', b.fen())\n",
        bin = BIN,
        ckpt = av_checkpoint().to_str().unwrap()
    );
    if !python_has("chess.engine") {
        return;
    }
    let o = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "python-chess: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("ok "));
}

/// `chessbench checkpoint init` writes a random model that `uci` plays, driven by the latency script
/// the GPU benchmark uses, and `eval` scores, counting the boards it
/// chose moves in; it refuses to overwrite.
#[test]
fn a_random_checkpoint_plays_uci_and_evaluates() {
    let dir = tempfile::tempdir().unwrap();
    let init = |name: &str, seed: &str| {
        let out = dir.path().join(name);
        let o = run(&[
            "checkpoint",
            "init",
            "--policy",
            "action_value",
            "--model",
            "tiny",
            "--buckets",
            "32",
            "--seed",
            seed,
            "--out",
            out.to_str().unwrap(),
            "--json",
        ]);
        (out, o)
    };
    let (a, o) = init("a", "1");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["shape"]["outputs"], 32, "{s}");
    // Training's initialisation, seeded: the same seed plays the same
    // scores, another seed others (each process seeds burn's generator
    // alone).
    let play = |run: &Path| {
        let text = uci_session(
            run,
            b"uci\nposition startpos\ngo\nposition startpos moves e2e4 c7c5\ngo\n\
              position fen 8/8/4k3/8/8/3QK3/8/8 w - - 0 1\ngo\nquit\n",
        );
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("info") || l.starts_with("bestmove"))
            .map(|l| {
                // Everything but the milliseconds taken.
                let words: Vec<&str> = l.split_whitespace().collect();
                let at = words.iter().position(|w| *w == "time");
                let kept = words
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| at.is_none_or(|t| *i != t + 1))
                    .map(|(_, w)| *w);
                kept.collect::<Vec<_>>().join(" ")
            })
            .collect();
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("bestmove")).count(),
            3,
            "{text}"
        );
        lines
    };
    let (b, _) = init("b", "1");
    let (c, _) = init("c", "2");
    assert_eq!(play(&a), play(&b), "the same seed, the same scores");
    assert_ne!(play(&a), play(&c), "another seed, other scores");
    let (_, again) = init("a", "1");
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("exists"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/uci_latency.py");
    let o = Command::new("python3")
        .arg(&script)
        .args([
            "--positions",
            data_file("lichess_db_puzzle_head1000.csv")
                .to_str()
                .unwrap(),
        ])
        .args([
            "--count",
            "5",
            "--name",
            "uci-tiny",
            "--",
            BIN,
            "uci",
            "--checkpoint",
        ])
        .arg(&a)
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let l: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (l["name"].as_str(), l["moves"].as_u64()),
        (Some("uci-tiny"), Some(5))
    );
    assert!(l["median_ms"].as_f64().unwrap() > 0.0, "{l}");

    if !have_stockfish() {
        return;
    }
    let s = eval_json(&[
        annotated().to_str().unwrap(),
        "--checkpoint",
        a.to_str().unwrap(),
        "--only",
        "puzzles",
        "--puzzles",
        data_file("lichess_db_puzzle_head1000.csv")
            .to_str()
            .unwrap(),
        "--max-puzzles",
        "40",
        "--out",
        dir.path().join("report").to_str().unwrap(),
    ]);
    let p = &s["puzzles"][0];
    let (boards, most) = (
        p["boards"].as_u64().unwrap(),
        p["boards_if_all_solved"].as_u64().unwrap(),
    );
    assert!(40 <= boards && boards <= most && most > 40, "{p}");
}
