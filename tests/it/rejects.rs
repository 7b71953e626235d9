//! Bad input never panics and never vanishes: every game read is accepted
//! or in `rejects` with a reason and a position; unreadable inputs are clear
//! errors naming the file; interrupted ingests leave no partial tables.

use std::{
    io::Write,
    process::{Command, Stdio},
    time::Duration,
};

use super::util::*;

const GOOD: &str = "[Event \"Rated Blitz game\"]\n[Site \"https://lichess.org/goodgame\"]\n[Result \"1-0\"]\n\n1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n";

fn bad_pgn() -> Vec<u8> {
    let mut pgn = Vec::new();
    pgn.extend_from_slice(GOOD.as_bytes()); // line 1
    // line 7: an illegal move at ply 3 (2. Ke3 is not legal).
    pgn.extend_from_slice(b"[Event \"Illegal\"]\n[Site \"https://lichess.org/illegal1\"]\n\n1. e4 e5 2. Ke3 Nc6 *\n\n");
    // line 12: another variant.
    pgn.extend_from_slice(b"[Event \"Atomic\"]\n[Variant \"Atomic\"]\n\n1. e4 e5 *\n\n");
    // line 17: from a set-up position.
    pgn.extend_from_slice(b"[Event \"Setup\"]\n[SetUp \"1\"]\n[FEN \"4k3/8/8/8/8/8/8/4K2R w K - 0 1\"]\n\n1. O-O *\n\n");
    // line 23: a 10 MB comment.
    pgn.extend_from_slice(b"[Event \"Huge comment\"]\n\n1. e4 { ");
    pgn.extend(std::iter::repeat_n(b'z', 10 << 20));
    pgn.extend_from_slice(b" } e5 *\n\n");
    // line 27: a non-UTF-8 byte in a player name.
    pgn.extend_from_slice(b"[Event \"Latin-1\"]\n[White \"Jos\xe9\"]\n\n1. d4 d5 *\n\n");
    // line 32: another good game.
    pgn.extend_from_slice(GOOD.as_bytes());
    // line 38: the input ends inside the headers.
    pgn.extend_from_slice(
        b"[Event \"Cut\"]\n[Site \"https://lichess.org/cutoffgm\"]\n[Date \"2022.06",
    );
    pgn
}

#[test]
fn every_bad_game_is_rejected_with_reason_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("bad.pgn");
    std::fs::write(&input, bad_pgn()).unwrap();
    let run_dir = tmp.path().join("run");
    let summary = ingest(&run_dir, &[input.to_str().unwrap()]);
    assert_eq!(summary["games_read"], 8);
    assert_eq!(summary["splits"]["train"]["games"], 2);
    let rejects = read_table(&run_dir, "rejects", "train");
    let reasons: Vec<String> = strings(&rejects, "reason").into_iter().flatten().collect();
    assert_eq!(
        reasons,
        [
            "illegal_move",
            "variant",
            "non_standard_start",
            "comment_too_long",
            "invalid_utf8",
            "truncated"
        ]
    );
    assert_eq!(u64s(&rejects, "line"), [7, 12, 17, 23, 27, 38]);
    assert_eq!(u64s(&rejects, "game_index"), [1, 2, 3, 4, 5, 7]);
    let details: Vec<String> = strings(&rejects, "detail").into_iter().flatten().collect();
    assert!(
        details[0].starts_with("2. Ke3: illegal san in "),
        "{}",
        details[0]
    );
    assert_eq!(details[1], "Atomic");
    assert!(
        details[2].contains("4k3/8/8/8/8/8/8/4K2R"),
        "{}",
        details[2]
    );
    let ids = strings(&rejects, "id");
    assert_eq!(ids[0].as_deref(), Some("illegal1"));
    assert_eq!(ids[5].as_deref(), Some("cutoffgm"));
    // Byte offsets point at each game's first byte.
    let data = bad_pgn();
    for offset in u64s(&rejects, "byte_offset") {
        assert!(data[offset as usize..].starts_with(b"[Event \""));
    }
    // Both good games are in `games`.
    let games = read_table(&run_dir, "games", "train");
    assert_eq!(u64s(&games, "game_index"), [0, 6]);
    assert_eq!(u64s(&games, "line"), [1, 32]);
}

#[test]
fn truncated_zst_keeps_what_was_read_and_records_the_error() {
    let data = std::fs::read(lichess_1000k()).unwrap();
    let compressed = zstd(&data);
    let cut = &compressed[..compressed.len() * 3 / 5];
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("cut.pgn.zst");
    std::fs::write(&input, cut).unwrap();
    let run_dir = tmp.path().join("run");
    let o = run(&[
        "ingest",
        "--json",
        run_dir.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("read error") && stderr.contains("cut.pgn.zst"),
        "{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let read = summary["games_read"].as_u64().unwrap();
    assert!(read > 100 && read < 438, "{read}");
    assert!(summary["inputs"][0]["error"].is_string());
    let split = &summary["splits"]["train"];
    let rejected = rejected_total(split);
    assert_eq!(split["games"].as_u64().unwrap() + rejected, read);
    assert_eq!(split["rejected"]["truncated"], 1);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["splits"]["train"]["ingest"]["inputs"][0]["error"].is_string());
}

#[test]
fn unreadable_inputs_are_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let run_dir = run_dir.to_str().unwrap();
    let missing = tmp.path().join("no-such-month.pgn.zst");
    let o = run(&["ingest", run_dir, missing.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no-such-month.pgn.zst") && err.contains("No such file"),
        "{err}"
    );

    let o = run(&["ingest", run_dir, tmp.path().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a directory"));

    // zstd magic followed by garbage: nothing can be decoded at all.
    let junk = tmp.path().join("junk.pgn.zst");
    std::fs::write(&junk, [0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap();
    let o = run(&["ingest", run_dir, junk.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("junk.pgn.zst"), "{err}");
    // Nothing was committed.
    assert!(!std::path::Path::new(run_dir).join("manifest.json").exists());
    assert!(!std::path::Path::new(run_dir).join("games").exists());
}

/// Starts an ingest reading stdin, feeds it part of a stream, waits until it
/// has certainly consumed it, and kills it.
fn kill_mid_ingest(run_dir: &std::path::Path, data: &[u8]) {
    let mut child = Command::new(BIN)
        .args(["ingest", "--no-progress"])
        .arg(run_dir)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&data[..data.len() / 2]).unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    child.kill().unwrap(); // SIGKILL: no cleanup code runs
    child.wait().unwrap();
    drop(stdin);
}

#[test]
fn killed_ingest_leaves_no_partial_tables() {
    let data = std::fs::read(lichess_1000k()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    kill_mid_ingest(&run_dir, &data);
    // Only the lock and the abandoned staging area may exist.
    for entry in std::fs::read_dir(&run_dir).unwrap() {
        let name = entry.unwrap().file_name();
        let name = name.to_str().unwrap();
        assert!(name == ".lock" || name == ".staging", "left behind: {name}");
    }
    // A full ingest then works and cleans up.
    ingest(&run_dir, &[lichess_1000k().to_str().unwrap()]);
    assert!(!run_dir.join(".staging").exists());
    let before = snapshot(&run_dir);
    let manifest_before = std::fs::read(run_dir.join("manifest.json")).unwrap();
    // Killing a second ingest into the same run keeps the first one intact.
    kill_mid_ingest(&run_dir, &data);
    assert!(snapshot(&run_dir) == before);
    assert_eq!(
        std::fs::read(run_dir.join("manifest.json")).unwrap(),
        manifest_before
    );
    assert_eq!(counts(&stats_json(&run_dir), "train")[0], 433);
}

#[test]
fn a_second_ingest_adds_a_split_and_keeps_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let lichess = lichess_1000k();
    let twic = crate_file("benches/twic1599_1000k.pgn");
    ingest(tmp.path(), &[lichess.to_str().unwrap()]);
    ingest(tmp.path(), &["--split", "test", twic.to_str().unwrap()]);
    let stats = stats_json(tmp.path());
    assert_eq!(counts(&stats, "train")[0], 433);
    assert_eq!(counts(&stats, "test")[0], 1_108);
    assert!(stats["test_in_train"].as_f64().unwrap() > 0.0);
    // Re-ingesting train replaces it (here: with fewer games).
    ingest(
        tmp.path(),
        &["--max-games", "10", lichess.to_str().unwrap()],
    );
    let stats = stats_json(tmp.path());
    assert_eq!(counts(&stats, "train")[0], 10);
    assert_eq!(counts(&stats, "test")[0], 1_108);
}

#[test]
fn stats_on_a_directory_that_is_not_a_run_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args(["stats"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a chessbench run directory"));
}
