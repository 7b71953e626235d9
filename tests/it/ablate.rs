//! `chessbench ablate`: a tiny grid on the annotated demo, end to end:
//! every variant trained and scored (a data-level one annotated again), a
//! failing variant recorded while the others go on, a rerun keeping what
//! finished, the same numbers for the same seed, the report, and bad grids
//! refused before anything runs.

use std::path::{Path, PathBuf};

use crate::{
    sql::annotated,
    util::{self, BIN, copy_dir, data_file, have_stockfish},
};

/// A grid over the annotated demo (96 boards per split at 200 nodes): the
/// base, a loss, the ConvNet, a search limit (the train split annotated
/// again at 50 nodes) and an axis value that fails when it runs.
fn grid(dir: &Path, name: &str, failing: bool) -> PathBuf {
    let file = dir.join(format!("{name}.toml"));
    let failing = if failing {
        "eval_split = [\"nosuch\"]\n"
    } else {
        ""
    };
    std::fs::write(
        &file,
        format!(
            "[ablate]\nrun = \"run\"\nseeds = [3]\n\
[ablate.axes]\nloss = [\"l2\"]\narchitecture = [\"cnn\"]\nnodes = [50]\n{failing}\
[annotate]\nnodes = 200\nmax_boards = 96\nchunk_boards = 32\n\
[train]\nbuckets = 32\nbatch_size = 16\nsteps = 4\nlog_every = 1\ncheckpoint_every = 2\neval_records = 64\n\
[eval]\nboards = 20\npuzzles = {:?}\nmax_puzzles = 5\nonly = [\"metrics\", \"puzzles\"]\n",
            data_file("lichess_db_puzzle_head1000.csv")
        ),
    )
    .unwrap();
    file
}

fn ablate(args: &[&str]) -> std::process::Output {
    util::run(&[&["ablate"], args].concat())
}

fn query(run: &Path, sql: &str) -> Vec<serde_json::Value> {
    let o = std::process::Command::new(BIN)
        .args([
            "sql",
            run.to_str().unwrap(),
            "-e",
            sql,
            "--format",
            "json",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `(variant, metric, value)` of the finished rows of grid `name`.
fn values(run: &Path, name: &str) -> Vec<(String, String, f64)> {
    query(
        run,
        &format!(
            "SELECT variant, metric, value FROM ablations WHERE grid = '{name}' AND value IS NOT NULL ORDER BY ALL"
        ),
    )
    .iter()
    .map(|r| {
        (
            r["variant"].as_str().unwrap().to_owned(),
            r["metric"].as_str().unwrap().to_owned(),
            r["value"].as_f64().unwrap(),
        )
    })
    .collect()
}

#[test]
fn a_tiny_grid_trains_and_scores_every_variant() {
    if !have_stockfish() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    copy_dir(annotated(), &run);
    let file = grid(tmp.path(), "tiny", true);
    let file = file.to_str().unwrap();

    let o = ablate(&[file]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a failed variant fails the command");
    assert!(stderr.contains("1 of 5 variants failed"), "{stderr}");

    // Every variant that could run was trained to its last step and scored.
    let rows = values(&run, "tiny");
    for variant in ["base", "loss=l2", "architecture=cnn", "nodes=50"] {
        for metric in [
            "puzzle_accuracy",
            "action_accuracy",
            "kendall_tau",
            "log_loss",
        ] {
            let v = rows
                .iter()
                .find(|r| r.0 == variant && r.1 == metric)
                .unwrap_or_else(|| panic!("{variant} {metric} in {rows:?}"));
            assert!(v.2.is_finite(), "{v:?}");
        }
        let checkpoints = if variant == "nodes=50" {
            run.join("ablate/tiny/data/nodes-50/train")
        } else {
            run.join("train")
        };
        let name = format!("tiny.{}.s3", variant.replace('=', "-"));
        assert!(
            checkpoints
                .join(&name)
                .join("checkpoints/step-000000004")
                .is_dir(),
            "{name}"
        );
    }
    let steps = query(
        &run,
        "SELECT DISTINCT step FROM ablations WHERE error IS NULL",
    );
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["step"], 4);

    // The failure is a row of its own, with its error.
    let failed = query(
        &run,
        "SELECT variant, error FROM ablations WHERE error IS NOT NULL",
    );
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["variant"], "eval_split=nosuch");
    assert!(
        failed[0]["error"].as_str().unwrap().contains("nosuch"),
        "{failed:?}"
    );

    // The data-level variant learnt from its own annotation (50 nodes) and
    // shares the base's test labels.
    let data = run.join("ablate/tiny/data/nodes-50");
    let nodes = |run: &Path| {
        query(
            run,
            "SELECT avg(nodes) AS n FROM state_values WHERE split = 'train'",
        )[0]["n"]
            .as_f64()
            .unwrap()
    };
    assert!(
        nodes(&data) < nodes(&run),
        "{} vs {}",
        nodes(&data),
        nodes(&run)
    );
    let link = std::fs::read_link(data.join("state_values/split=test")).unwrap();
    assert!(link.is_relative(), "{link:?}: the run directory may move");
    assert!(
        data.join("state_values/split=test").is_dir(),
        "test labels are the base's"
    );

    // A rerun keeps the finished variants and tries the failed one again.
    let results = run.join("ablate/tiny/results");
    let before = std::fs::read(results.join("tiny.base.s3.parquet")).unwrap();
    let o = ablate(&[file, "--json"]);
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["finished_before"], 4, "{summary}");
    assert_eq!(summary["failed"].as_array().unwrap().len(), 1);
    assert_eq!(
        std::fs::read(results.join("tiny.base.s3.parquet")).unwrap(),
        before
    );

    // A changed recipe makes the finished variants stale: they run again.
    let changed = tmp.path().join("changed.toml");
    std::fs::write(
        &changed,
        std::fs::read_to_string(file)
            .unwrap()
            .replace("[ablate]\n", "[ablate]\nname = \"tiny\"\n")
            .replace("steps = 4", "steps = 6"),
    )
    .unwrap();
    let o = ablate(&[changed.to_str().unwrap(), "--plan", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let states: Vec<&str> = plan["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["stale", "stale", "stale", "stale", "failed"],
        "{plan}"
    );

    // The same seed, variant and data give the same numbers, also with
    // variants trained at once.
    let again = grid(tmp.path(), "again", false);
    let o = ablate(&[again.to_str().unwrap(), "--parallel", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first = rows;
    let second = values(&run, "again");
    assert_eq!(first.len(), second.len());
    for (a, b) in first.iter().zip(&second) {
        assert_eq!((&a.0, &a.1), (&b.0, &b.1));
        assert_eq!(a.2, b.2, "{} {}", a.0, a.1);
    }

    // The report: the paper's table shape with the published values.
    let o = ablate(&[file, "--report"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = std::fs::read_to_string(run.join("ablate/tiny/report.md")).unwrap();
    assert!(report.contains("## `loss`"), "{report}");
    // Table 2's HL-Gauss and L2 rows, Table A2's transformer and ConvNet.
    assert!(report.contains("| 82.0 | 61.8 | 0.257 |"), "{report}");
    assert!(report.contains("| 80.8 | 58.9 | 0.240 |"), "{report}");
    assert!(report.contains("transformer (base)"), "{report}");
    assert!(report.contains("| 17.3 | 37.6 | 0.171 |"), "{report}");
    assert!(
        report.contains("`eval_split=nosuch` seed 3 failed"),
        "{report}"
    );
    assert!(report.contains("checks the machinery"), "{report}");
    let svg = std::fs::read_to_string(run.join("ablate/tiny/plots/train_loss.svg")).unwrap();
    // One line per trained run (the failing variant never trained).
    assert_eq!(svg.matches("<polyline").count(), 4);

    // The paper's table shape in SQL.
    let table = std::process::Command::new(BIN)
        .args([
            "sql",
            run.to_str().unwrap(),
            "ablations",
            "--only",
            "ablations",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    assert!(text.contains("(base)") && text.contains("l2"), "{text}");
}

#[test]
fn bad_grids_are_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bad.toml");
    let cases = [
        // An axis the trainer does not know.
        (
            "[ablate]\nrun = \"run\"\n[ablate.axes]\nbatch = [1]\n",
            ":4:",
            "`batch`",
        ),
        // A value it refuses.
        (
            "[ablate]\nrun = \"run\"\n[ablate.axes]\nbuckets = [1]\n",
            ":4:",
            "buckets",
        ),
        (
            "[ablate]\nrun = \"run\"\n[ablate.axes]\npolicy = [\"value\"]\n",
            ":4:",
            "policy",
        ),
        // A key [ablate] does not have.
        ("[ablate]\nrun = \"run\"\nseed = 1\n", ":3:", "seed"),
    ];
    for (text, line, key) in cases {
        std::fs::write(&file, text).unwrap();
        let o = ablate(&[file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(
            stderr.contains(&format!("bad.toml{line}")) && stderr.contains(key),
            "{text}: {stderr}"
        );
        assert!(!tmp.path().join("run").exists(), "nothing ran");
    }
}

#[test]
fn a_grid_over_a_directory_that_is_no_run_is_refused_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("grid.toml");
    std::fs::write(
        &file,
        "[ablate]\nrun = \"run\"\nseeds = [1, 2]\n[ablate.axes]\nloss = [\"l2\"]\n",
    )
    .unwrap();
    // Missing, and present but empty (no manifest.json).
    for make in [false, true] {
        let run = tmp.path().join("run");
        if make {
            std::fs::create_dir(&run).unwrap();
        }
        let o = ablate(&[file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(
            stderr.contains("not a chessbench run directory")
                && stderr.contains("chessbench ingest"),
            "{stderr}"
        );
        if make {
            let left: Vec<_> = std::fs::read_dir(&run).unwrap().collect();
            assert!(left.is_empty(), "wrote {left:?}");
        } else {
            assert!(!run.exists(), "created the run directory");
        }
    }
}
