//! Table A1 counts reproduce `tests/golden/table_a1_reference.json`
//! exactly, from files, from stdin, and whatever the memory limit or thread
//! count.

use super::util::*;

/// Reference counts from the golden file, checked against the values this
/// test states.
fn reference(key_prefix: &str, fallback: [u64; 4]) -> [u64; 4] {
    let text = chessbench::testing::golden("table_a1_reference.json");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let (_, c) = v["reference_counts"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with(key_prefix))
        .unwrap_or_else(|| panic!("no reference for {key_prefix}"));
    let got = ["games", "state_value", "behavioral_cloning", "action_value"]
        .map(|k| c[k].as_u64().unwrap());
    assert_eq!(got, fallback, "golden file and test disagree");
    got
}

#[test]
fn lichess_1000k_matches_table_a1_reference() {
    let want = reference("pgn-reader crate", [433, 26_981, 26_874, 798_435]);
    let tmp = tempfile::tempdir().unwrap();
    let summary = ingest(tmp.path(), &[lichess_1000k().to_str().unwrap()]);
    assert_eq!(counts(&stats_json(tmp.path()), "train"), want);
    // games read = accepted + rejected
    let split = &summary["splits"]["train"];
    let rejected = rejected_total(split);
    assert_eq!(summary["games_read"], 438);
    assert_eq!(split["games"].as_u64().unwrap() + rejected, 438);
    assert_eq!(split["rejected"]["no_moves"], 5);
}

#[test]
fn lichess_2022_06_zst_matches_table_a1_reference() {
    let path = data_file("lichess_2022-06_head2500.pgn.zst");
    let want = reference(
        "shared/data/lichess_2022-06",
        [2_489, 151_284, 150_638, 4_468_085],
    );
    let tmp = tempfile::tempdir().unwrap();
    let summary = ingest(tmp.path(), &[path.to_str().unwrap()]);
    assert_eq!(counts(&stats_json(tmp.path()), "train"), want);
    assert_eq!(summary["games_read"], 2500);
    assert_eq!(summary["inputs"][0]["zstd"], true);
    let split = &summary["splits"]["train"];
    assert_eq!(split["rejected"]["no_moves"], 10);
    // The file ends inside the headers of game 2,500.
    assert_eq!(split["rejected"]["truncated"], 1);
    let rejects = read_table(tmp.path(), "rejects", "train");
    let reasons = strings(&rejects, "reason");
    let last = reasons
        .iter()
        .position(|r| r.as_deref() == Some("truncated"))
        .unwrap();
    assert_eq!(u64s(&rejects, "game_index")[last], 2499);
    // The cut-off game starts on a line whose text is its [Event tag.
    let line = u64s(&rejects, "line")[last] as usize;
    let text = zstd::decode_all(std::fs::File::open(&path).unwrap()).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.lines().nth(line - 1).unwrap().starts_with("[Event "));
}

#[test]
fn stdin_gives_the_same_tables_as_a_file() {
    let path = lichess_1000k();
    let data = std::fs::read(&path).unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    ingest(a.path(), &[path.to_str().unwrap()]);
    // Compressed on the fly: zstd is detected from the stream itself.
    let out = ingest_stdin(b.path(), &zstd(&data), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sa = snapshot(a.path());
    let sb = snapshot(b.path());
    // Same rows except the `source` column ('-' vs the path).
    for ((ta, _, ba), (tb, _, bb)) in sa.iter().zip(&sb) {
        assert_eq!(ta, tb);
        if ta == "boards" || ta == "legal_moves" {
            assert_eq!(ba, bb, "{ta} differs");
        } else {
            assert_eq!(ba[0].num_rows(), bb[0].num_rows(), "{ta} differs");
        }
    }
}

/// Every Parquet file of a run, by path within it, with its bytes.
fn parquet_files(run: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(
        dir: &std::path::Path,
        run: &std::path::Path,
        out: &mut std::collections::BTreeMap<String, Vec<u8>>,
    ) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, run, out);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                let name = p.strip_prefix(run).unwrap().to_string_lossy().into_owned();
                out.insert(name, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(run, run, &mut out);
    out
}

#[test]
fn output_does_not_depend_on_memory_limit_or_threads() {
    let path = data_file("lichess_2022-06_head2500.pgn.zst");
    let path = path.to_str().unwrap();
    let base = tempfile::tempdir().unwrap();
    let summary = ingest(base.path(), &[path, "-j", "2"]);
    assert_eq!(summary["spilled"], false);
    let expected = snapshot(base.path());
    // 1 MiB holds ~15k boards: dozens of spills, partitions merged from disk.
    let small = tempfile::tempdir().unwrap();
    let small_out = small.path().to_str().unwrap();
    let args = ["ingest", "--json", small_out, path, "-j", "1"];
    let o = run(&[&args[..], &["--memory-limit", "1MiB"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["spilled"], true);
    assert!(snapshot(small.path()) == expected, "spilled run differs");
    // 1 MiB is under what ingest needs whatever the limit, and it says so
    // (one split: the floor, 16 MiB of tables, 64 spill files of 64 KiB).
    assert_eq!(summary["memory_limit"], 1 << 20);
    assert_eq!(summary["least_memory_limit"], 228 << 20);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(
            "exceeded --memory-limit 1 MiB: that is under the least ingest keeps to (228 MiB"
        ),
        "{stderr}"
    );
    // The files themselves are the same bytes at every thread count and
    // limit (the boards phase writes row groups from several threads).
    let expected_files = parquet_files(base.path());
    assert!(expected_files.len() >= 4);
    assert!(
        parquet_files(small.path()) == expected_files,
        "1 thread, 1 MiB: files differ"
    );
    let three = tempfile::tempdir().unwrap();
    ingest(three.path(), &[path, "-j", "3"]);
    assert!(snapshot(three.path()) == expected, "3-thread run differs");
    assert!(
        parquet_files(three.path()) == expected_files,
        "3 threads: files differ"
    );
    // 8 threads: boards deduplicated by 4 shards, each spilling its own
    // partitions, in both spill formats whatever this CPU would pick.
    for (format, bytes) in [("plain", 56), ("packed", 44)] {
        let four = tempfile::tempdir().unwrap();
        let o = std::process::Command::new(BIN)
            .env("CHESSBENCH_SPILL_FORMAT", format)
            .args(["ingest", "--json", "--no-progress"])
            .arg(four.path())
            .args([path, "-j", "8", "--memory-limit", "1MiB"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(summary["spilled"], true);
        assert_eq!(summary["spill_entry_bytes"], bytes, "{format}");
        assert!(
            snapshot(four.path()) == expected,
            "4-shard spilled run ({format} spill entries) differs"
        );
        assert!(
            parquet_files(four.path()) == expected_files,
            "8 threads, 1 MiB, {format}: files differ"
        );
    }
}

#[test]
fn boards_are_consistent_with_legal_moves_and_games() {
    let tmp = tempfile::tempdir().unwrap();
    ingest(tmp.path(), &[lichess_1000k().to_str().unwrap()]);
    let boards = read_table(tmp.path(), "boards", "train");
    let moves = read_table(tmp.path(), "legal_moves", "train");
    let games = read_table(tmp.path(), "games", "train");
    let ids = u64s(&boards, "board_id");
    assert_eq!(ids, (0..ids.len() as u64).collect::<Vec<_>>(), "dense ids");
    // Ids follow first occurrence; the first board is the start position.
    let firsts: Vec<(u64, u64)> = u64s(&boards, "first_game_no")
        .into_iter()
        .zip(boards.iter().flat_map(|b| {
            col::<arrow_array::UInt32Array>(b, "first_ply")
                .values()
                .iter()
                .map(|&p| u64::from(p))
                .collect::<Vec<_>>()
        }))
        .collect();
    assert!(firsts.windows(2).all(|w| w[0] < w[1]));
    let fens = strings(&boards, "fen");
    assert_eq!(
        fens[0].as_deref(),
        Some("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1")
    );
    // Occurrences add up to the boards of all games (plies + 1 each).
    let occurrences: u64 = u64s(&boards, "occurrences").iter().sum();
    let plies: u64 = games
        .iter()
        .flat_map(|b| {
            col::<arrow_array::UInt32Array>(b, "plies")
                .values()
                .to_vec()
        })
        .map(u64::from)
        .sum();
    assert_eq!(occurrences, plies + 433);
    // legal_moves rows = sum of num_legal_moves, sorted by (board, action),
    // and the UCI column agrees with the action vocabulary.
    let n_legal = u8s(&boards, "num_legal_moves");
    let move_ids = u64s(&moves, "board_id");
    let actions = u16s(&moves, "action");
    let uci = strings(&moves, "uci");
    assert_eq!(
        move_ids.len() as u64,
        n_legal.iter().map(|&n| u64::from(n)).sum::<u64>()
    );
    let pairs: Vec<(u64, u16)> = move_ids
        .iter()
        .copied()
        .zip(actions.iter().copied())
        .collect();
    assert!(pairs.windows(2).all(|w| w[0] < w[1]));
    let vocab = chessbench::chess::vocabulary();
    for (a, u) in actions.iter().zip(&uci) {
        assert_eq!(vocab.uci(*a), u.as_deref());
    }
    // Terminal boards have no moves and say why.
    let terminal = strings(&boards, "terminal");
    for (n, t) in n_legal.iter().zip(&terminal) {
        assert_eq!(*n == 0, t.as_deref() != Some("none"));
    }
    assert!(terminal.iter().any(|t| t.as_deref() == Some("checkmate")));
}

#[test]
fn written_files_carry_the_documented_schemas() {
    use chessbench::store::Table;
    let tmp = tempfile::tempdir().unwrap();
    ingest(tmp.path(), &[lichess_1000k().to_str().unwrap()]);
    for table in Table::INGEST {
        let dir = tmp.path().join(table.name()).join("split=train");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                std::fs::File::open(&path).unwrap(),
            )
            .unwrap();
            assert_eq!(
                builder.schema().fields(),
                table.schema().fields(),
                "{}",
                path.display()
            );
            let meta = builder.metadata();
            let created_by = meta.file_metadata().created_by().unwrap_or_default();
            assert!(created_by.starts_with("chessbench"), "{created_by}");
            for rg in meta.row_groups() {
                for c in rg.columns() {
                    assert!(
                        matches!(c.compression(), parquet::basic::Compression::ZSTD(_)),
                        "{}: {} is not zstd",
                        path.display(),
                        c.column_path()
                    );
                }
            }
        }
    }
}

#[test]
fn demo_pipeline_config_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("demo");
    ingest_demo(&out);
    let stats = stats_json(&out);
    assert_eq!(counts(&stats, "train"), [433, 26_981, 26_874, 798_435]);
    // The master games: cross-checked with python-chess 1.11.
    assert_eq!(counts(&stats, "test"), [1_108, 92_459, 92_417, 2_791_790]);
    let overlap = stats["test_in_train"].as_f64().unwrap();
    // Exact overlap, recomputed here from the FEN columns.
    let fens = |split| -> std::collections::HashSet<String> {
        strings(&read_table(&out, "boards", split), "fen")
            .into_iter()
            .flatten()
            .collect()
    };
    let (train, test) = (fens("train"), fens("test"));
    let shared = test.iter().filter(|f| train.contains(*f)).count();
    assert_eq!(overlap, shared as f64 / test.len() as f64);
    assert!(shared > 0);
    assert_eq!(stats["overlap_passes"], 1);
    // A budget the test split's hashes (92,459 x ~25.5 bytes) do not fit:
    // the same fraction in 4 passes over train.
    let small = stats_json_with(&out, &["--memory-limit", "1200KiB"]);
    assert_eq!(small["overlap_passes"], 4, "{small}");
    assert_eq!(small["test_in_train"].as_f64().unwrap(), overlap);
}

/// `chessbench generate-games` writes games that ingest accepts, every one,
/// with the Table A1 counts python-chess gives for the same file
/// (`bench/table_a1_python.py`); the same seed writes the same file, to a
/// file or to standard output (the summary then goes to standard error).
#[test]
fn generated_games_have_python_chess_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("games.pgn");
    let o = run(&[
        "generate-games",
        "--games",
        "300",
        "--seed",
        "5",
        "-o",
        file.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["games"], 300, "{summary}");
    let o = run(&["generate-games", "--games", "300", "--seed", "5"]);
    assert!(o.status.success());
    assert!(
        o.stdout == std::fs::read(&file).unwrap(),
        "stdout and -o differ"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("generated 300 games"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let out = tmp.path().join("run");
    let ingested = ingest(&out, &[file.to_str().unwrap()]);
    assert_eq!(
        rejected_total(&ingested["splits"]["train"]),
        0,
        "{ingested}"
    );
    let ours = counts(&stats_json(&out), "train");
    assert_eq!(ours[0], 300);
    if !python_has("chess") {
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/table_a1_python.py");
    let o = std::process::Command::new("python3")
        .arg(script)
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let theirs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let theirs = ["games", "state_value", "behavioral_cloning", "action_value"]
        .map(|k| theirs[k].as_u64().unwrap());
    assert_eq!(ours, theirs, "chessbench's counts, then python-chess's");
}
