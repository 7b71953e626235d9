//! `make bench` (SQL layer and interop), on an annotated run
//! (CHESSBENCH_BENCH_RUN, default runs/demo-long; `make bench-sql` makes it).
//!
//! 1. Table A1 query time: `chessbench sql RUN table_a1` (embedded DuckDB,
//!    views loaded, Parquet footers plus one column scan), against the
//!    reference measured in the same run: `chessbench stats RUN --json`,
//!    the Rust implementation of the same numbers. Median of 5.
//! 2. Bytes per record of each ChessBench set in Parquet against the same
//!    records as `.bag` files exported by `chessbench bag export` in this
//!    run. Parquet is measured two ways: (a) the annotated run's value
//!    table alone (state_values / action_values, which keep raw cp, mate,
//!    depth, nodes, time besides win_prob); (b) self-contained: the bags
//!    imported back with `chessbench bag import`, so exactly the records'
//!    information, counting every table needed to rebuild them (boards for
//!    the FEN, legal_moves for the move, the value table).
//!    Target: action values >= 10x smaller in Parquet.
//!    Export and import throughput are printed too.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

const BIN: &str = env!("CARGO_BIN_EXE_chessbench");

fn run(args: &[&str]) -> (Vec<u8>, f64) {
    let t = Instant::now();
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run chessbench");
    let secs = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "chessbench {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.stdout, secs)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn dir_bytes(dir: &Path, ext: &str) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                total += dir_bytes(&p, ext);
            } else if p.extension().is_some_and(|x| x == ext) {
                total += e.metadata().map_or(0, |m| m.len());
            }
        }
    }
    total
}

fn main() {
    let run_dir = PathBuf::from(
        std::env::var("CHESSBENCH_BENCH_RUN").unwrap_or_else(|_| "runs/demo-long".to_owned()),
    );
    if !run_dir.join("state_values").is_dir() {
        eprintln!(
            "bench sql: {} is not an annotated run; `make annotate` (or set CHESSBENCH_BENCH_RUN)",
            run_dir.display()
        );
        std::process::exit(1);
    }
    let r = run_dir.to_str().unwrap();
    let (stats_json, _) = run(&["stats", r, "--json"]);
    let stats: serde_json::Value = serde_json::from_slice(&stats_json).unwrap();
    let records: u64 = stats["splits"]
        .as_object()
        .unwrap()
        .values()
        .map(|s| s["action_value"].as_u64().unwrap())
        .sum();
    println!(
        "run {} ({} MB of Parquet, {records} legal moves)",
        run_dir.display(),
        dir_bytes(&run_dir, "parquet") / 1_000_000
    );

    // 1. Table A1.
    let sql: Vec<f64> = (0..5)
        .map(|_| run(&["sql", r, "table_a1", "--format", "json", "--quiet"]).1)
        .collect();
    let rust: Vec<f64> = (0..5).map(|_| run(&["stats", r, "--json"]).1).collect();
    let (sql, rust) = (median(sql), median(rust));
    println!("\nTable A1 (median of 5, whole command incl. process start)");
    println!("  chessbench sql RUN table_a1   {:>8.1} ms", sql * 1e3);
    println!(
        "  chessbench stats RUN (Rust)   {:>8.1} ms   (reference)",
        rust * 1e3
    );
    println!("  ratio sql / stats             {:>8.2}x", sql / rust);

    // 2. Bytes per record, Parquet vs .bag.
    let tmp = tempfile::tempdir().unwrap();
    let splits: Vec<String> = stats["splits"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, s)| s["state_values"].as_u64().unwrap_or(0) > 0)
        .map(|(k, _)| k.clone())
        .collect();
    println!("\nBytes per record, Parquet vs ChessBench .bag exported in this run");
    println!(
        "{:<8} {:<20} {:>10} {:>9} {:>12} {:>7} {:>14} {:>7}",
        "split",
        "set",
        "records",
        "bag B/rec",
        "values B/rec",
        "ratio",
        "self-cont. B/rec",
        "ratio"
    );
    let mut av_ratios = Vec::new();
    for split in &splits {
        let out = tmp.path().join(format!("bag-{split}"));
        let o = out.to_str().unwrap();
        let (summary, export_secs) = run(&[
            "bag",
            "export",
            r,
            "--split",
            split,
            "--out",
            o,
            "--json",
            "--no-progress",
        ]);
        let summary: serde_json::Value = serde_json::from_slice(&summary).unwrap();
        let imported = tmp.path().join(format!("imported-{split}"));
        let i = imported.to_str().unwrap();
        let (_, import_secs) = run(&["bag", "import", i, "--split", split, o, "--no-progress"]);
        let total: u64 = summary
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["records"].as_u64().unwrap())
            .sum();
        let part = |run: &Path, table: &str| {
            dir_bytes(&run.join(table).join(format!("split={split}")), "parquet")
        };
        for set in summary.as_array().unwrap() {
            let name = set["set"].as_str().unwrap();
            let n = set["records"].as_u64().unwrap() as f64;
            let bag = set["bytes"].as_u64().unwrap() as f64 / n;
            let (value_table, tables): (&str, &[&str]) = match name {
                "state_value" => ("state_values", &["boards", "state_values"]),
                "behavioral_cloning" => {
                    ("state_values", &["boards", "legal_moves", "state_values"])
                }
                _ => ("action_values", &["boards", "legal_moves", "action_values"]),
            };
            let values = part(&run_dir, value_table) as f64 / n;
            let own: u64 = tables.iter().map(|t| part(&imported, t)).sum();
            let own = own as f64 / n;
            println!(
                "{:<8} {:<20} {:>10} {:>9.1} {:>12.2} {:>6.1}x {:>14.2} {:>6.1}x",
                split,
                name,
                n,
                bag,
                values,
                bag / values,
                own,
                bag / own
            );
            if name == "action_value" {
                av_ratios.push((bag / values, bag / own));
            }
        }
        println!(
            "         export {:.0} records/s, import {:.0} records/s",
            total as f64 / export_secs,
            total as f64 / import_secs
        );
    }
    let worst = av_ratios
        .iter()
        .map(|r| r.0.min(r.1))
        .fold(f64::INFINITY, f64::min);
    println!(
        "\naction values: Parquet {worst:.1}x smaller than .bag at worst (target >= 10x): {}",
        if worst >= 10.0 { "met" } else { "NOT met" }
    );
}
