//! The SQL layer and ChessBench interop on the demo data: every file of
//! `sql/` through `chessbench sql` against the numbers `chessbench stats`
//! computes in Rust; clear errors for missing and partial tables; `.bag`
//! export and import, checked with apache-beam's coders (Python) when
//! installed; the tables read by pyarrow and polars.
//!
//! The run: the demo pipeline's ingest (both splits), annotated by the real
//! Stockfish for the first 96 boards of each split. Skips (printing why)
//! without Stockfish.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
};

use tempfile::TempDir;

use crate::util::{self, BIN, copy_dir, have_stockfish, ingest_demo, python_has, stats_json};

/// The demo ingest (not annotated), made once.
fn ingested() -> &'static Path {
    static RUN: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("demo");
        ingest_demo(&run);
        (dir, run)
    });
    path
}

/// Annotates (or resumes annotating) the first 96 boards of each split.
fn annotate_small(run: &Path) {
    let o = util::run(&[
        "annotate",
        run.to_str().unwrap(),
        "--nodes",
        "200",
        "--max-boards",
        "96",
        "--chunk-boards",
        "32",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The demo ingest annotated for 96 boards per split, made once.
pub fn annotated() -> &'static Path {
    static RUN: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("demo");
        ingest_demo(&run);
        annotate_small(&run);
        (dir, run)
    });
    path
}

fn sql(run: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("sql")
        .arg(run)
        .args(args)
        .output()
        .expect("run chessbench sql")
}

fn sql_json(run: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json", "--quiet"]);
    let o = sql(run, &all);
    assert!(
        o.status.success(),
        "chessbench sql {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("expected an unsigned number, got {v}"))
}

#[test]
fn table_a1_sql_matches_rust_stats() {
    if !have_stockfish() {
        return;
    }
    let run = annotated();
    let stats = stats_json(run);
    let rows = sql_json(run, &["table_a1"]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let split = row["split"].as_str().unwrap();
        let s = &stats["splits"][split];
        for (col, key) in [
            ("games", "games"),
            ("state_value", "state_value"),
            ("behavioral_cloning", "behavioral_cloning"),
            ("action_value", "action_value"),
            ("rejected", "rejected"),
            ("state_values", "state_values"),
            ("action_values", "action_values"),
            ("failures", "failures"),
            ("lichess_evals_state_values", "lichess_evals_state_values"),
            ("lichess_evals_action_values", "lichess_evals_action_values"),
        ] {
            assert_eq!(u(&row[col]), u(&s[key]), "{split} {col}");
        }
        for table in [
            "games",
            "boards",
            "legal_moves",
            "state_values",
            "action_values",
        ] {
            assert_eq!(
                u(&row[format!("{table}_bytes")]),
                u(&s["bytes"][table]),
                "{split} {table} bytes"
            );
        }
        assert!(u(&row["state_values"]) == 96, "{row}");
    }
    let overlap = sql_json(run, &["overlap", "--only", "overlap"]);
    let f = overlap[0]["test_in_train"].as_f64().unwrap();
    assert!((f - stats["test_in_train"].as_f64().unwrap()).abs() < 1e-12);
}

#[test]
fn dataset_and_sampling_sql_agree_with_the_tables() {
    if !have_stockfish() {
        return;
    }
    let run = annotated();
    let stats = stats_json(run);
    let d = sql_json(run, &["dataset_stats"]);
    for split in ["train", "test"] {
        let s = &stats["splits"][split];
        let of = |name: &str| -> Vec<serde_json::Value> {
            d[name]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["split"] == split)
                .cloned()
                .collect()
        };
        let sum =
            |rows: &[serde_json::Value], col: &str| rows.iter().map(|r| u(&r[col])).sum::<u64>();
        // Figure A1: the histograms hold every value, in buckets 0..49.
        let av = of("figure_a1_action_values");
        assert_eq!(sum(&av, "records"), u(&s["action_values"]), "{split}");
        assert!(av.iter().all(|r| u(&r["bucket"]) < 50));
        assert_eq!(
            sum(&of("figure_a1_state_values"), "records"),
            u(&s["state_values"])
        );
        // Legal-move counts: boards sum to state_value, moves to action_value.
        let lm = of("figure_a1_legal_moves");
        assert_eq!(sum(&lm, "boards"), u(&s["state_value"]));
        let moves: u64 = lm
            .iter()
            .map(|r| u(&r["num_legal_moves"]) * u(&r["boards"]))
            .sum();
        assert_eq!(moves, u(&s["action_value"]));
        assert_eq!(sum(&of("boards_by_phase"), "boards"), u(&s["state_value"]));
        assert_eq!(sum(&of("games_by_speed"), "games"), u(&s["games"]));
        assert_eq!(sum(&of("games_by_elo"), "games"), u(&s["games"]));
        let cov = of("annotation_coverage");
        assert_eq!(u(&cov[0]["annotated"]), u(&s["state_values"]));
        assert_eq!(u(&cov[0]["failures"]), 0);
    }
    let sampling = sql_json(run, &["sampling", "--only", "sampling_summary"]);
    for row in sampling.as_array().unwrap() {
        let split = row["split"].as_str().unwrap();
        assert_eq!(u(&row["boards"]), u(&stats["splits"][split]["state_value"]));
        // The weighted sampler favours the opening (the paper's point).
        assert!(
            row["opening_share_weighted"].as_f64().unwrap()
                > row["opening_share_uniform"].as_f64().unwrap()
        );
    }
    let weights = sql_json(run, &["sampling", "--only", "sampling_weights"]);
    // One row per board, in (split, board_id) order without an ORDER BY.
    let keys: Vec<(String, u64)> = weights
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["split"].as_str().unwrap().to_owned(), u(&r["board_id"])))
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "not in (split, board_id) order"
    );
    let boards: u64 = ["train", "test"]
        .iter()
        .map(|s| u(&stats["splits"][s]["state_value"]))
        .sum();
    assert_eq!(keys.len() as u64, boards);
    let total: f64 = weights
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["split"] == "train")
        .map(|r| r["p_weighted"].as_f64().unwrap())
        .sum();
    assert!((total - 1.0).abs() < 1e-9, "{total}");
}

#[test]
fn record_views_follow_chessbench_definitions() {
    if !have_stockfish() {
        return;
    }
    let run = annotated();
    let r = sql_json(
        run,
        &[
            "-e",
            "SELECT (SELECT count(*) FROM sv_records) AS sv, \
                    (SELECT count(*) FROM state_values WHERE best_action IS NOT NULL) AS with_best, \
                    (SELECT count(*) FROM bc_records) AS bc, \
                    (SELECT count(*) FROM av_records) AS av, \
                    (SELECT count(*) FROM action_values) AS action_values, \
                    (SELECT count(*) FROM bc_records b JOIN av_records a USING (split, board_id, fen, move) \
                     WHERE a.win_prob < (SELECT max(win_prob) FROM av_records x \
                                         WHERE x.split = a.split AND x.board_id = a.board_id)) AS bc_not_best",
        ],
    );
    let r = &r[0];
    assert_eq!(u(&r["sv"]), 192);
    assert_eq!(u(&r["bc"]), u(&r["with_best"]));
    assert_eq!(u(&r["av"]), u(&r["action_values"]));
    assert_eq!(u(&r["bc_not_best"]), 0, "bc_records holds the best action");
}

#[test]
fn output_formats() {
    let run = ingested();
    let q = "SELECT split, count(*) AS games FROM games GROUP BY split ORDER BY split";
    let csv = sql(run, &["-e", q, "--format", "csv"]);
    assert!(csv.status.success());
    assert_eq!(
        String::from_utf8_lossy(&csv.stdout),
        "split,games\ntest,1108\ntrain,433\n"
    );
    let md = sql(run, &["-e", q, "--format", "markdown"]);
    assert!(
        String::from_utf8_lossy(&md.stdout)
            .starts_with("| split | games |\n| --- | ---: |\n| test | 1108 |")
    );
    let table = sql(run, &["-e", "SELECT * FROM range(100)", "--max-rows", "5"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(text.lines().count(), 2 + 5 + 1, "{text}");
    assert!(text.contains("100 rows, 5 shown"));
    // Variables reach the SQL.
    let v = sql_json(
        run,
        &["--var", "who=test", "-e", "SELECT getvariable('who') AS v"],
    );
    assert_eq!(v[0]["v"], "test");
    // A SQL file from disk, with a named query.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q.sql");
    std::fs::write(
        &file,
        "-- a; comment\nSET VARIABLE x = 2;\n-- @name two\nSELECT getvariable('x') * 21 AS n;\n",
    )
    .unwrap();
    let v = sql_json(run, &[file.to_str().unwrap()]);
    assert_eq!(v[0]["n"], 42);
}

#[test]
fn missing_and_partial_tables_are_clear_errors() {
    let run = ingested();
    // Not annotated: the value tables say so, naming table and run.
    let o = sql(run, &["-e", "SELECT count(*) FROM av_records"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("table state_values has no Parquet files in run")
            || err.contains("table action_values has no Parquet files in run"),
        "{err}"
    );
    assert!(err.contains(&run.display().to_string()), "{err}");
    assert!(err.contains("chessbench annotate"), "{err}");
    assert!(!err.contains("Invalid Input Error"), "{err}");
    // Ingest tables still query fine, failures is empty.
    let v = sql_json(run, &["-e", "SELECT count(*) AS n FROM failures"]);
    assert_eq!(v[0]["n"], 0);

    // Not a run at all.
    let dir = tempfile::tempdir().unwrap();
    let o = sql(dir.path(), &["table_a1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not a chessbench run directory"),
        "{err}"
    );

    // A split listed in the manifest whose boards files are gone: partial.
    let copy = dir.path().join("copy");
    copy_dir(run, &copy);
    for f in std::fs::read_dir(copy.join("boards/split=test")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let o = sql(&copy, &["table_a1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("table boards in run") && err.contains("is partial"),
        "{err}"
    );
    assert!(err.contains("\"test\""), "{err}");

    // Unknown query names list the built-ins.
    let o = sql(run, &["nope"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("table_a1, dataset_stats"), "{err}");
    // SQL errors name the file and line.
    let file = dir.path().join("bad.sql");
    std::fs::write(&file, "SELECT 1;\n\nSELECT nosuchcolumn FROM games;\n").unwrap();
    let o = sql(run, &[file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.sql:3:") && err.contains("nosuchcolumn"),
        "{err}"
    );
}

#[test]
fn an_interrupted_annotate_commit_is_reported() {
    if !have_stockfish() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    copy_dir(annotated(), &run);
    // As a crash between the entry (commit point) and the renames leaves it.
    let file = run.join("state_values/split=train/chunk-00000001.parquet");
    std::fs::rename(&file, file.with_extension("parquet.tmp")).unwrap();
    let o = sql(&run, &["table_a1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("table state_values in run") && err.contains("chunk 1 of split \"train\""),
        "{err}"
    );
    // The annotator's recovery completes the commit; then SQL works.
    annotate_small(&run);
    assert!(sql(&run, &["table_a1"]).status.success());
}

/// Records of a split as sorted JSON rows (fen, move, win_prob).
fn records(run: &Path, split: &str) -> [serde_json::Value; 3] {
    let q = |sql: &str| sql_json(run, &["--var", &format!("s={split}"), "-e", sql]);
    [
        q("SELECT fen, win_prob FROM sv_records WHERE split = getvariable('s') ORDER BY fen"),
        q("SELECT fen, move FROM bc_records WHERE split = getvariable('s') ORDER BY fen"),
        q(
            "SELECT fen, move, win_prob FROM av_records WHERE split = getvariable('s') ORDER BY fen, move",
        ),
    ]
}

/// `chessbench bag export RUN --split train --out OUT ARGS`.
pub fn bag_export(run: &Path, out: &Path, args: &[&str]) -> Output {
    let mut full = util::bag_export_args(run, out);
    full.extend_from_slice(args);
    util::run(&full)
}

/// DuckDB's budget bounds the export's memory (spilling into RUN/.tmp/),
/// never its bytes.
#[test]
fn bag_export_is_the_same_under_a_small_memory_budget() {
    if !have_stockfish() {
        return;
    }
    let run = annotated();
    let dir = tempfile::tempdir().unwrap();
    let export = |name: &str, limit: &str| {
        let out = dir.path().join(name);
        let o = bag_export(run, &out, &["--memory-limit", limit]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    };
    let (small, large) = (export("small", "64MiB"), export("large", "2GiB"));
    for set in ["state_value", "behavioral_cloning", "action_value"] {
        let file = format!("{set}_data.bag");
        let a = std::fs::read(small.join(&file)).unwrap();
        assert_eq!(a, std::fs::read(large.join(&file)).unwrap(), "{set}");
    }
    // The spill directories go with their sessions.
    let left: Vec<_> = std::fs::read_dir(run.join(".tmp"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// Value tables in board-id order are exported as stored (no sort); a table
/// whose files are out of order is sorted, to the same bytes.
#[test]
fn bag_export_sorts_only_value_rows_out_of_order() {
    if !have_stockfish() {
        return;
    }
    let run = annotated();
    let dir = tempfile::tempdir().unwrap();
    let export = |run: &Path, name: &str| {
        let out = dir.path().join(name);
        let o = bag_export(run, &out, &["--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let orders: Vec<String> = summary
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["order"].as_str().unwrap().to_owned())
            .collect();
        (out, orders)
    };
    let (stored, orders) = export(run, "stored");
    assert_eq!(orders, ["stored"; 3]);
    // The same run with the first and last annotate chunks' files swapped:
    // the scan meets board ids out of order.
    let shuffled = dir.path().join("shuffled");
    copy_dir(run, &shuffled);
    for table in ["state_values", "action_values"] {
        let part = shuffled.join(table).join("split=train");
        let mut files: Vec<_> = walk(&part)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
            .collect();
        files.sort();
        assert!(files.len() >= 2, "{files:?}");
        let (first, last) = (&files[0], &files[files.len() - 1]);
        let tmp = part.join("swap");
        std::fs::rename(first, &tmp).unwrap();
        std::fs::rename(last, first).unwrap();
        std::fs::rename(&tmp, last).unwrap();
    }
    let (sorted, orders) = export(&shuffled, "sorted");
    assert_eq!(orders, ["sorted"; 3]);
    for f in walk(&stored) {
        let name = f.file_name().unwrap();
        assert_eq!(
            std::fs::read(&f).unwrap(),
            std::fs::read(sorted.join(name)).unwrap(),
            "{name:?}"
        );
    }
}

#[test]
fn bag_export_import_round_trip() {
    if !have_stockfish() {
        return;
    }
    let run = annotated();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bags");
    let o = bag_export(run, &out, &["--records-per-shard", "1000", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let av = &summary[2];
    assert_eq!(av["set"], "action_value");
    let n = u(&av["records"]);
    assert_eq!(
        av["files"].as_array().unwrap().len() as u64,
        n.div_ceil(1000)
    );
    assert!(out.join("state_value_data.bag").is_file());
    assert!(
        out.join(format!(
            "action_value-00000-of-{:05}_data.bag",
            n.div_ceil(1000)
        ))
        .is_file()
    );
    // Exporting again refuses to overwrite.
    let o = bag_export(run, &out, &[]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--overwrite"));

    let imported = dir.path().join("imported");
    let o = util::run(&[
        "bag",
        "import",
        imported.to_str().unwrap(),
        "--split",
        "train",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(records(&imported, "train"), records(run, "train"));
    // The imported split is a complete run: Table A1, stats, legal moves.
    let stats = stats_json(&imported);
    assert_eq!(u(&stats["splits"]["train"]["state_value"]), 96);
    assert_eq!(u(&stats["splits"]["train"]["action_value"]), n);
    // Its values are there: annotate refuses to redo them.
    let o = util::run(&["annotate", imported.to_str().unwrap(), "--nodes", "10"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("imported from ChessBench .bag files"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // A corrupt record names the file and record.
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    let mut w = chessbench::bag::BagWriter::create(&bad.join("state_value_data.bag")).unwrap();
    let mut rec = Vec::new();
    chessbench::bag::coder::encode_state_value(
        &mut rec,
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
        0.5,
    );
    w.write(&rec).unwrap();
    chessbench::bag::coder::encode_state_value(&mut rec, "not a fen", 0.5);
    w.write(&rec).unwrap();
    w.finish().unwrap();
    let o = util::run(&[
        "bag",
        "import",
        dir.path().join("r2").to_str().unwrap(),
        "--split",
        "x",
        bad.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("state_value_data.bag: record 1") && err.contains("not a fen"),
        "{err}"
    );
}

/// The import's budget never changes its tables: a run imported under
/// budgets so small that board ids and values are worked out on disk (in
/// one and in many hash partitions and value buckets) holds the same
/// Parquet bytes as one imported in memory under the default, and leaves
/// no scratch files.
#[test]
fn bag_import_is_the_same_under_a_small_memory_budget() {
    if !have_stockfish() {
        return;
    }
    let run = annotated();
    let dir = tempfile::tempdir().unwrap();
    let bags = dir.path().join("bags");
    let o = bag_export(run, &bags, &["--records-per-shard", "500"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let import_from = |bags: &Path, name: &str, limit: &str, jobs: &str| {
        let out = dir.path().join(name);
        let o = util::run(&[
            "bag",
            "import",
            out.to_str().unwrap(),
            "--split",
            "train",
            bags.to_str().unwrap(),
            "--memory-limit",
            limit,
            "-j",
            jobs,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
        let options = m["splits"]["train"]["ingest"]["options"].clone();
        (out, options)
    };
    let import = |name: &str, limit: &str| import_from(&bags, name, limit, "2");
    let (large, options) = import("large", "2GiB");
    assert_eq!(options["board_id_partitions_on_disk"], 0, "in memory");
    let files = |root: &Path, table: &str| -> Vec<(std::ffi::OsString, Vec<u8>)> {
        let mut f: Vec<_> = std::fs::read_dir(root.join(table).join("split=train"))
            .unwrap()
            .flatten()
            .map(|e| (e.file_name(), std::fs::read(e.path()).unwrap()))
            .collect();
        f.sort();
        f
    };
    // 1 MiB: one partition, one bucket; 2 KiB: about 50 partitions and
    // two buckets of 93 boards for the 96 boards.
    for (limit, bytes, many) in [("1MiB", 1u64 << 20, false), ("2KiB", 2 << 10, true)] {
        let (small, options) = import(limit, limit);
        assert_eq!(
            options["memory_limit"], bytes,
            "the manifest records the budget"
        );
        let partitions = options["board_id_partitions_on_disk"].as_u64().unwrap();
        assert!(
            if many {
                partitions > 8
            } else {
                partitions == 1
            },
            "{limit}: {partitions} partitions"
        );
        for table in ["boards", "legal_moves", "state_values", "action_values"] {
            let a = files(&small, table);
            assert!(!a.is_empty(), "{table}");
            assert!(a == files(&large, table), "{limit}: {table} differs");
        }
        let staged: Vec<_> = std::fs::read_dir(&small)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        for d in staged {
            let left: Vec<_> = walk(&small.join(&d));
            assert!(left.is_empty(), "{limit}: scratch files left: {left:?}");
        }
    }
    // Nor does the thread count (records decoded and row groups encoded on
    // several threads), in memory or on disk; and bags, plain or
    // compressed, written on 1 or 3 threads (written by a pool, the FENs
    // decoded ahead, across shard boundaries), are the same bytes and
    // import to the same tables.
    let export = |jobs: &str, compress: bool| {
        let out = dir.path().join(format!("bag-{compress}-{jobs}"));
        let mut args = vec!["--records-per-shard", "500", "-j", jobs];
        if compress {
            args.push("--compress");
        }
        let o = bag_export(run, &out, &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    };
    let mut three = PathBuf::new();
    for (compress, extension) in [(false, "bag"), (true, "bagz")] {
        let one = export("1", compress);
        three = export("3", compress);
        let names: Vec<_> = walk(&one);
        assert!(
            names.len() > 3
                && names
                    .iter()
                    .all(|f| f.extension().is_some_and(|e| e == extension)),
            "{names:?}"
        );
        for f in &names {
            let name = f.file_name().unwrap();
            assert!(
                std::fs::read(f).unwrap() == std::fs::read(three.join(name)).unwrap(),
                "{name:?} differs between 1 and 3 threads"
            );
        }
    }
    for (name, from, limit, jobs) in [
        ("j1", &bags, "2GiB", "1"),
        ("j4", &bags, "2GiB", "4"),
        ("j3-disk", &bags, "2KiB", "3"),
        ("bagz-j3", &three, "2GiB", "3"),
    ] {
        let (got, _) = import_from(from, name, limit, jobs);
        for table in ["boards", "legal_moves", "state_values", "action_values"] {
            assert!(
                files(&got, table) == files(&large, table),
                "{name}: {table} differs"
            );
        }
    }
}

/// Files under a directory, recursively.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn python(script: &str, args: &[&str]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let o = Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    eprintln!("{out}");
    assert!(
        o.status.success(),
        "{script}: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The encoding against apache-beam's coders (an independent implementation).
#[test]
fn bag_files_match_apache_beam_coders() {
    if !have_stockfish() || !python_has("apache_beam, duckdb") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    python(
        "test_bag_interop.py",
        &[
            BIN,
            annotated().to_str().unwrap(),
            "train",
            dir.path().to_str().unwrap(),
        ],
    );
}

/// pyarrow and polars read the tables with the documented schemas.
#[test]
fn pyarrow_and_polars_read_the_tables() {
    if !have_stockfish() || !python_has("pyarrow, polars, duckdb") {
        return;
    }
    python("test_readers.py", &[annotated().to_str().unwrap()]);
}
