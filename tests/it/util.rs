//! Helpers: run the real binary, find the real data, read the tables back.

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use arrow_array::{Array, RecordBatch, StringArray, UInt8Array, UInt16Array, UInt64Array};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

pub const BIN: &str = env!("CARGO_BIN_EXE_chessbench");

/// A file in the pgn-reader crate's source. The crate's directory is found
/// with `cargo metadata` once per test process (half a second a call, and
/// the fuzz properties ask for every case).
pub fn crate_file(rel: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        chessbench::ingest::config::resolve_crate_path("pgn-reader/Cargo.toml")
            .expect("pgn-reader source")
            .parent()
            .expect("a manifest's directory")
            .to_path_buf()
    });
    let path = dir.join(rel);
    assert!(path.is_file(), "{} does not exist", path.display());
    path
}

/// The crate's 438 Lichess games (2025-05-01).
pub fn lichess_1000k() -> PathBuf {
    crate_file("benches/lichess_db_1000k.pgn")
}

/// `data/NAME`: real data the repository ships (see data/README.md).
pub fn data_file(name: &str) -> PathBuf {
    chessbench::testing::data_file(name)
}

/// Runs `chessbench ARGS` and returns its output.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--no-progress")
        .output()
        .expect("run chessbench")
}

/// Runs `chessbench stats` (which takes no --no-progress).
pub fn stats_json(run_dir: &Path) -> serde_json::Value {
    stats_json_with(run_dir, &[])
}

/// Runs `chessbench stats --json ARGS RUN_DIR`.
pub fn stats_json_with(run_dir: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["stats", "--json"])
        .args(args)
        .arg(run_dir)
        .output()
        .expect("run chessbench stats");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stats --json output")
}

/// Runs `chessbench ingest DIR ARGS --json`, asserting success.
pub fn ingest(out: &Path, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["ingest", "--json", out.to_str().unwrap()];
    full.extend_from_slice(args);
    let o = run(&full);
    assert!(
        o.status.success(),
        "ingest {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("ingest --json output")
}

/// Runs ingest reading `input` from standard input.
pub fn ingest_stdin(out: &Path, input: &[u8], args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(["ingest", "--json", "--no-progress"])
        .arg(out)
        .arg("-")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chessbench");
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait");
    writer.join().unwrap();
    out
}

/// All batches of a table partition, in part-file order.
pub fn read_table(run: &Path, table: &str, split: &str) -> Vec<RecordBatch> {
    let dir = run.join(table).join(format!("split={split}"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&f).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            out.push(b.unwrap());
        }
    }
    out
}

pub fn col<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> &'a T {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("column {name} has another type"))
}

pub fn strings(batches: &[RecordBatch], name: &str) -> Vec<Option<String>> {
    batches
        .iter()
        .flat_map(|b| {
            let c = col::<StringArray>(b, name);
            (0..c.len())
                .map(|i| c.is_valid(i).then(|| c.value(i).to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

pub fn u64s(batches: &[RecordBatch], name: &str) -> Vec<u64> {
    batches
        .iter()
        .flat_map(|b| col::<UInt64Array>(b, name).values().to_vec())
        .collect()
}

pub fn u16s(batches: &[RecordBatch], name: &str) -> Vec<u16> {
    batches
        .iter()
        .flat_map(|b| col::<UInt16Array>(b, name).values().to_vec())
        .collect()
}

pub fn u8s(batches: &[RecordBatch], name: &str) -> Vec<u8> {
    batches
        .iter()
        .flat_map(|b| col::<UInt8Array>(b, name).values().to_vec())
        .collect()
}

/// Every table of every split, as (table, split, batches), for comparing
/// whole runs.
pub fn snapshot(run: &Path) -> Vec<(String, String, Vec<RecordBatch>)> {
    let mut out = Vec::new();
    for table in ["games", "boards", "legal_moves", "rejects"] {
        let mut splits: Vec<String> = std::fs::read_dir(run.join(table))
            .unwrap()
            .map(|e| {
                e.unwrap()
                    .file_name()
                    .to_str()
                    .unwrap()
                    .trim_start_matches("split=")
                    .to_owned()
            })
            .collect();
        splits.sort();
        for split in splits {
            let batches = read_table(run, table, &split);
            // Compare rows, not batch boundaries.
            let schema = batches
                .first()
                .map(|b| b.schema())
                .unwrap_or_else(|| std::sync::Arc::new(arrow_schema::Schema::empty()));
            let merged = arrow_select::concat::concat_batches(&schema, &batches).unwrap();
            out.push((table.to_owned(), split, vec![merged]));
        }
    }
    out
}

/// Table A1 counts of a split from `stats --json`.
pub fn counts(stats: &serde_json::Value, split: &str) -> [u64; 4] {
    let s = &stats["splits"][split];
    ["games", "state_value", "behavioral_cloning", "action_value"].map(|k| {
        s[k].as_u64()
            .unwrap_or_else(|| panic!("{k} missing in {s}"))
    })
}

/// zstd-compresses bytes.
pub fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 3).unwrap()
}

/// Games rejected in a split of an ingest summary (`--json`), all reasons.
pub fn rejected_total(split: &serde_json::Value) -> u64 {
    split["rejected"]
        .as_object()
        .map_or(0, |r| r.values().map(|v| v.as_u64().unwrap()).sum())
}

/// Runs the longer demo's ingest (pipeline/demo-long.toml: the Lichess
/// games as train, the master games as test) into `out`.
pub fn ingest_demo(out: &Path) {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipeline/demo-long.toml");
    let o = run(&[
        "ingest",
        "--config",
        config.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Whether Stockfish can be started (else the caller skips, or under CI
/// fails).
pub fn have_stockfish() -> bool {
    chessbench::testing::stockfish().is_some()
}

/// Copies a run directory, without its lock files.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| n.starts_with(".lock") || n.starts_with(".commit"))
        {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// Whether python3 can import `modules` (else the caller skips, or under
/// CI fails).
pub fn python_has(modules: &str) -> bool {
    chessbench::testing::python_has(modules)
}

/// The arguments of `chessbench bag export RUN --split train --out OUT`.
pub fn bag_export_args<'a>(run: &'a Path, out: &'a Path) -> Vec<&'a str> {
    vec![
        "bag",
        "export",
        run.to_str().unwrap(),
        "--split",
        "train",
        "--out",
        out.to_str().unwrap(),
    ]
}
