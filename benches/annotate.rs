//! `make bench` (annotate): engine utilisation, bytes per action-value
//! record, and MultiPV against per-move annotation.
//!
//! 1. Per-move annotation (the paper's oracle) of the first
//!    CHESSBENCH_BENCH_BOARDS (default 2048) boards of the pgn-reader Lichess
//!    sample with a nodes limit (CHESSBENCH_BENCH_NODES, default 1000) on all
//!    cores. Utilisation = time inside engine searches (`go` to `bestmove`)
//!    / (wall time x workers). Target: >= 95%. Measured twice:
//!    with `ucinewgame` before every board (the default: reproducible
//!    values; Stockfish clears 16 MiB of hash and its histories, ~2 ms,
//!    outside any search) and without it (the pipeline's own overhead).
//! 2. Bytes per action-value record on disk, next to the same records
//!    encoded as ChessBench's `action_value_data.bag` (length-prefixed FEN
//!    and move, a big-endian double, plus the bag's 8-byte index entry),
//!    computed in the same run. Target: <= 8 B per record.
//! 3. MultiPV mode on the same boards, at the same nodes limit and at the
//!    per-move run's node budget per board: best-move agreement, mean
//!    Kendall tau-b of the action values per board, and the cost ratio
//!    (per-move engine time / MultiPV engine time).

use std::{
    collections::BTreeMap,
    fs::File,
    path::{Path, PathBuf},
    process::Command,
};

use arrow_array::{Array, Float64Array, StringArray, UInt16Array, UInt64Array};
use chessbench::{ingest::config::resolve_crate_path, ranking::kendall_tau_b};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const BIN: &str = env!("CARGO_BIN_EXE_chessbench");

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run(args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(args)
        .args(["--json", "--no-progress"])
        .output()
        .expect("run chessbench");
    assert!(
        out.status.success(),
        "chessbench {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON summary")
}

fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "parquet"));
    files.sort();
    files
}

fn for_batches(dir: &Path, mut f: impl FnMut(&arrow_array::RecordBatch)) {
    for path in parquet_files(dir) {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            f(&b.unwrap());
        }
    }
}

fn column<'a, T: 'static>(b: &'a arrow_array::RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .unwrap_or_else(|| panic!("column {name}"))
}

/// board -> [(action, win_prob)] and board -> best action.
type Values = (BTreeMap<u64, Vec<(u16, f64)>>, BTreeMap<u64, u16>);

fn values(run: &Path) -> Values {
    let mut av: BTreeMap<u64, Vec<(u16, f64)>> = BTreeMap::new();
    for_batches(&run.join("action_values/split=train"), |b| {
        let ids = column::<UInt64Array>(b, "board_id");
        let act = column::<UInt16Array>(b, "action");
        let wp = column::<Float64Array>(b, "win_prob");
        for i in 0..b.num_rows() {
            av.entry(ids.value(i))
                .or_default()
                .push((act.value(i), wp.value(i)));
        }
    });
    let mut best = BTreeMap::new();
    for_batches(&run.join("state_values/split=train"), |b| {
        let ids = column::<UInt64Array>(b, "board_id");
        let ba = column::<UInt16Array>(b, "best_action");
        for i in 0..b.num_rows() {
            if !ba.is_null(i) {
                best.insert(ids.value(i), ba.value(i));
            }
        }
    });
    (av, best)
}

fn dir_bytes(dir: &Path) -> u64 {
    parquet_files(dir)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

fn varint_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// Bytes of the same action-value records in ChessBench's .bag encoding.
fn bag_bytes(run: &Path, boards: u64) -> (u64, u64) {
    let mut fen_len = BTreeMap::new();
    for_batches(&run.join("boards/split=train"), |b| {
        let ids = column::<UInt64Array>(b, "board_id");
        let fens = column::<StringArray>(b, "fen");
        for i in 0..b.num_rows() {
            if ids.value(i) < boards {
                fen_len.insert(ids.value(i), fens.value(i).len());
            }
        }
    });
    let (mut bytes, mut records) = (0u64, 0u64);
    for_batches(&run.join("legal_moves/split=train"), |b| {
        let ids = column::<UInt64Array>(b, "board_id");
        let uci = column::<StringArray>(b, "uci");
        for i in 0..b.num_rows() {
            if let Some(&f) = fen_len.get(&ids.value(i)) {
                let m = uci.value(i).len();
                // record: varint + fen, varint + move, f64; bag index: u64.
                bytes += (varint_len(f) + f + varint_len(m) + m + 8 + 8) as u64;
                records += 1;
            }
        }
    });
    (bytes, records)
}

/// (best-move agreement, mean Kendall tau-b, boards compared).
fn agreement(a: &Values, b: &Values) -> (f64, f64, usize) {
    let (mut same, mut n, mut tau_sum, mut tau_n) = (0usize, 0usize, 0.0, 0usize);
    for (board, best) in &a.1 {
        if let Some(other) = b.1.get(board) {
            n += 1;
            same += usize::from(best == other);
        }
        if let (Some(x), Some(y)) = (a.0.get(board), b.0.get(board)) {
            let x: Vec<f64> = x.iter().map(|v| v.1).collect();
            let y: Vec<f64> = y.iter().map(|v| v.1).collect();
            if let Some(t) = kendall_tau_b(&x, &y) {
                tau_sum += t;
                tau_n += 1;
            }
        }
    }
    (
        same as f64 / n.max(1) as f64,
        tau_sum / tau_n.max(1) as f64,
        n,
    )
}

fn main() {
    let boards = env_u64("CHESSBENCH_BENCH_BOARDS", 2048);
    let nodes = env_u64("CHESSBENCH_BENCH_NODES", 1000);
    let work = tempfile::tempdir().unwrap();
    let pgn = resolve_crate_path("pgn-reader/benches/lichess_db_1000k.pgn")
        .expect("pgn-reader source via cargo metadata");
    let runs: Vec<PathBuf> = ["per-move", "multipv", "multipv-budget", "keep-hash"]
        .iter()
        .map(|n| work.path().join(n))
        .collect();
    for r in &runs {
        run(&[
            "ingest",
            r.to_str().unwrap(),
            pgn.to_str().unwrap(),
            "--split",
            "train",
        ]);
    }
    let (b, n) = (boards.to_string(), nodes.to_string());
    let common = ["--max-boards", b.as_str()];
    let per_move = run(&[
        &["annotate", runs[0].to_str().unwrap(), "--nodes", &n][..],
        &common[..],
    ]
    .concat());
    let searches = per_move["searches"].as_u64().unwrap();
    let workers = per_move["workers"].as_u64().unwrap();
    let util = per_move["utilisation"].as_f64().unwrap();
    let pm_secs = per_move["search_seconds"].as_f64().unwrap();
    let wall = per_move["seconds"].as_f64().unwrap();
    println!(
        "annotate bench: {boards} boards of lichess_db_1000k (pgn-reader), Stockfish `{}`, nodes {nodes}, {workers} workers",
        per_move["engine"].as_str().unwrap_or("?")
    );
    println!(
        "per-move: {searches} searches in {wall:.1} s ({:.0} searches/s); engine utilisation {:.1}% (target >= 95%) {}",
        searches as f64 / wall,
        100.0 * util,
        if util >= 0.95 { "MET" } else { "NOT MET" }
    );
    let keep = run(&[
        &[
            "annotate",
            runs[3].to_str().unwrap(),
            "--nodes",
            &n,
            "--new-game-per-board",
            "false",
        ][..],
        &common[..],
    ]
    .concat());
    let keep_util = keep["utilisation"].as_f64().unwrap();
    println!(
        "per-move without ucinewgame per board: engine utilisation {:.1}% {} (the ~2 ms hash clear per board is the difference)",
        100.0 * keep_util,
        if keep_util >= 0.95 { "MET" } else { "NOT MET" }
    );
    let av_dir = runs[0].join("action_values/split=train");
    let av_bytes = dir_bytes(&av_dir);
    let av_rows: u64 = per_move["splits"][0][1]["action_values"].as_u64().unwrap();
    let (bag, bag_records) = bag_bytes(&runs[0], boards);
    assert_eq!(bag_records, av_rows, "bag records = action values");
    let per_record = av_bytes as f64 / av_rows as f64;
    println!(
        "storage: action_values {per_record:.2} B/record (target <= 8) {}; the same records as ChessBench .bag: {:.1} B/record ({:.1}x larger)",
        if per_record <= 8.0 { "MET" } else { "NOT MET" },
        bag as f64 / bag_records as f64,
        bag as f64 / av_bytes as f64
    );
    let sv_bytes = dir_bytes(&runs[0].join("state_values/split=train"));
    println!(
        "storage: state_values {:.2} B/record",
        sv_bytes as f64 / boards as f64
    );
    let pm_values = values(&runs[0]);
    let moves_per_board = av_rows as f64 / pm_values.1.len().max(1) as f64;
    let budget = ((nodes as f64) * (1.0 + moves_per_board)).round() as u64;
    for (run_dir, limit, label) in [
        (&runs[1], nodes, "same nodes limit"),
        (&runs[2], budget, "per-move's node budget per board"),
    ] {
        let l = limit.to_string();
        let s = run(&[
            &[
                "annotate",
                run_dir.to_str().unwrap(),
                "--mode",
                "multipv",
                "--nodes",
                &l,
            ][..],
            &common[..],
        ]
        .concat());
        let secs = s["search_seconds"].as_f64().unwrap();
        let (agree, tau, compared) = agreement(&pm_values, &values(run_dir));
        println!(
            "multipv ({label}: nodes {limit}): best move agrees on {:.1}% of {compared} boards, mean Kendall tau-b {tau:.3}; cost: per-move / multipv engine time = {:.1}x ({} fallback searches)",
            100.0 * agree,
            pm_secs / secs,
            s["fallbacks"]
        );
    }
}
