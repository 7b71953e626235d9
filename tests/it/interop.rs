//! Other tools read the tables: DuckDB (through Python, as analysts use it)
//! loads `sql/views.sql`, runs `sql/table_a1.sql` and `sql/overlap.sql` and
//! gets the numbers `chessbench stats` prints.
//! Skipped, with the reason, when Python's duckdb module is not installed.

use std::{path::Path, process::Command};

use super::util::*;

#[test]
fn duckdb_reproduces_table_a1_from_the_parquet_tables() {
    if !python_has("duckdb") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("demo");
    ingest_demo(&run_dir);
    let sql_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let script = format!(
        r#"
import duckdb, json
con = duckdb.connect()
con.execute("SET VARIABLE run_dir = '{run}'")
con.execute(open('{sql}/views.sql').read())
rows = [r[:5] for r in con.execute(open('{sql}/table_a1.sql').read()).fetchall()]
marked, first = con.extract_statements(open('{sql}/overlap.sql').read())[:2]
con.execute(marked)
overlap = con.execute(first).fetchone()[2]
types = con.execute("DESCRIBE SELECT * FROM read_parquet('{run}/boards/*/*.parquet', hive_partitioning = true)").fetchall()
print(json.dumps({{"rows": rows, "overlap": overlap, "types": {{t[0]: t[1] for t in types}}}}))
"#,
        run = run_dir.display(),
        sql = sql_dir.display()
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stats = stats_json(&run_dir);
    for row in got["rows"].as_array().unwrap() {
        let split = row[0].as_str().unwrap();
        let want = counts(&stats, split);
        let have: Vec<u64> = row.as_array().unwrap()[1..]
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(have, want, "split {split}");
    }
    assert_eq!(got["rows"].as_array().unwrap().len(), 2);
    let overlap = got["overlap"].as_f64().unwrap();
    assert!((overlap - stats["test_in_train"].as_f64().unwrap()).abs() < 1e-12);
    // Unsigned ids and the hive partition column arrive with their types.
    assert_eq!(got["types"]["board_id"], "UBIGINT");
    assert_eq!(got["types"]["num_legal_moves"], "UTINYINT");
    assert_eq!(got["types"]["split"], "VARCHAR");
}
