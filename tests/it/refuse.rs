//! Every stage refuses input that is not what it reads (a directory that
//! is no run, a missing checkpoint, a missing input file) before it writes
//! anything: the error names the path and what to run first, and the
//! working directory is as it was.

use std::{path::Path, process::Command};

use crate::util::BIN;

/// Every path below `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path.clone());
            }
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out.sort();
    out
}

#[test]
fn every_stage_refuses_what_it_cannot_read_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A directory that exists but holds no run, and a grid over it.
    std::fs::create_dir(dir.join("empty")).unwrap();
    std::fs::write(
        dir.join("grid.toml"),
        "[ablate]\nrun = \"empty\"\nseeds = [1]\n[ablate.axes]\nloss = [\"l2\"]\n",
    )
    .unwrap();
    let before = listing(dir);
    let not_a_run =
        "not a chessbench run directory (no manifest.json); run `chessbench ingest` first";
    let no_checkpoint = "no such checkpoint or training run";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["annotate", "norun"], not_a_run),
        (vec!["annotate", "empty"], not_a_run),
        (vec!["stats", "empty"], not_a_run),
        (vec!["sql", "norun", "table_a1"], not_a_run),
        (vec!["sql", "empty", "table_a1"], not_a_run),
        (
            vec!["bag", "export", "empty", "--split", "train", "-o", "out"],
            not_a_run,
        ),
        (vec!["train", "norun"], not_a_run),
        (vec!["train", "empty"], not_a_run),
        (
            vec!["eval", "empty", "--checkpoint", "empty/train/x"],
            no_checkpoint,
        ),
        (vec!["uci", "--checkpoint", "empty/train/x"], no_checkpoint),
        (vec!["ablate", "grid.toml"], not_a_run),
        (vec!["ingest", "newrun", "nosuch.pgn"], "nosuch.pgn"),
        (
            vec!["bag", "import", "newrun", "--split", "train", "nosuch"],
            "nosuch",
        ),
    ];
    for (args, expected) in cases {
        let o = Command::new(BIN)
            .args(&args)
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run chessbench");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(listing(dir), before, "{args:?} wrote files");
    }
}
