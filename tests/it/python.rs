//! The Python package's loader (python/, `chessbench.Loader`) yields the
//! batches `chessbench train` draws, bit for bit: for each recipe below, the
//! options go once through the trainer's command line (clap, `resolve`,
//! `training_data`) into the library's loader here, and once as keyword
//! arguments through the installed package in a Python process; tokens,
//! targets, win probabilities and positions must be equal.
//!
//! Needs a Python with the package installed: `make test-python` builds it
//! in a fresh virtual environment and runs this test with
//! `CHESSBENCH_PYTHON` set to that interpreter (CI runs it there). Without
//! the variable it says so and passes.

use std::{path::Path, process::Command};

use chessbench::{
    options::{Env, Shard},
    train::{TrainOptions, data::Loader, sampler::Position, training_data},
};
use clap::{Args, FromArgMatches};

use crate::{sql::annotated, util::have_stockfish};

/// Draws `batches` batches in Python with `kwargs` (a Python dict literal)
/// and returns each batch's bytes: tokens (int32 LE), targets (int32 LE),
/// win probabilities (f32 LE) and the position, in that order.
fn python_batches(python: &str, run: &Path, kwargs: &str, batches: usize) -> Vec<[Vec<u8>; 4]> {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"
import json, sys, chessbench
loader = chessbench.Loader({run:?}, **{kwargs})
out = sys.argv[1]
for i in range({batches}):
    b = loader.next_batch()
    for name, array in (("tokens", b.tokens), ("targets", b.targets), ("win_prob", b.win_prob)):
        open(f"{{out}}/{{i}}.{{name}}", "wb").write(array.astype(array.dtype.newbyteorder("<")).tobytes())
    open(f"{{out}}/{{i}}.position", "w").write(json.dumps(list(b.position)))
"#,
        run = run.to_str().unwrap(),
    );
    let out = Command::new(python)
        .args(["-c", &script])
        .arg(dir.path())
        .output()
        .expect("run CHESSBENCH_PYTHON");
    assert!(
        out.status.success(),
        "python {kwargs}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (0..batches)
        .map(|i| {
            let read = |name: &str| std::fs::read(dir.path().join(format!("{i}.{name}"))).unwrap();
            [
                read("tokens"),
                read("targets"),
                read("win_prob"),
                read("position"),
            ]
        })
        .collect()
}

/// The same batches from the library, the options parsed as `chessbench
/// train`'s command line.
fn rust_batches(
    run: &Path,
    args: &[&str],
    shard: Shard,
    start: Position,
    batches: usize,
) -> Vec<[Vec<u8>; 4]> {
    let command = TrainOptions::augment_args(clap::Command::new("train").no_binary_name(true));
    let mut argv = vec![run.to_str().unwrap()];
    argv.extend_from_slice(args);
    let matches = command.try_get_matches_from(argv).unwrap();
    let options = TrainOptions::from_arg_matches(&matches).unwrap();
    let config = options.resolve(&Env::default()).unwrap();
    let mut loader = Loader::new(training_data(&config, shard), start).unwrap();
    (0..batches)
        .map(|_| {
            let b = loader.next_batch().unwrap();
            let le_i32 = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            let p = b.position;
            [
                le_i32(&b.tokens),
                le_i32(&b.targets),
                b.win_prob.iter().flat_map(|x| x.to_le_bytes()).collect(),
                format!("[{}, {}, {}]", p.epoch, p.window, p.offset).into_bytes(),
            ]
        })
        .collect()
}

#[test]
fn python_loader_yields_the_trainers_batches() {
    let Ok(python) = std::env::var("CHESSBENCH_PYTHON") else {
        eprintln!(
            "skipping: CHESSBENCH_PYTHON is not set (`make test-python` installs the package and runs this test)"
        );
        return;
    };
    if !have_stockfish() {
        return;
    }
    let run = annotated();
    let start = Position {
        epoch: 0,
        window: 4,
        offset: 17,
    };
    // (Python keyword arguments, the command line, the shard, the start.)
    let recipes: [(&str, &[&str], Shard, Position); 5] = [
        ("{}", &[], Shard::ALL, Position::default()),
        (
            "dict(policy='action_value', batch_size=100, buckets=16, seed=5, window=2, jobs=2)",
            &[
                "--policy",
                "action_value",
                "--batch-size",
                "100",
                "--buckets",
                "16",
                "--seed",
                "5",
                "--window",
                "2",
                "-j",
                "2",
            ],
            Shard::ALL,
            Position::default(),
        ),
        (
            "dict(policy='state_value', sampling='weighted', batch_size=300, buckets=64, seed=1)",
            &[
                "--policy",
                "state_value",
                "--sampling",
                "weighted",
                "--batch-size",
                "300",
                "--buckets",
                "64",
                "--seed",
                "1",
            ],
            Shard::ALL,
            Position::default(),
        ),
        (
            "dict(policy='behavioral_cloning', batch_size=64, window=1)",
            &[
                "--policy",
                "behavioral_cloning",
                "--batch-size",
                "64",
                "--window",
                "1",
            ],
            Shard::ALL,
            Position::default(),
        ),
        (
            "dict(batch_size=50, window=1, rank=1, world_size=3, start=(0, 4, 17))",
            &["--batch-size", "50", "--window", "1"],
            Shard { index: 1, count: 3 },
            start,
        ),
    ];
    for (kwargs, args, shard, start) in recipes {
        let n = 12;
        let theirs = python_batches(&python, run, kwargs, n);
        let ours = rust_batches(run, args, shard, start, n);
        for (i, (p, r)) in theirs.iter().zip(&ours).enumerate() {
            for (part, name) in ["tokens", "targets", "win_prob", "position"]
                .iter()
                .enumerate()
            {
                assert!(
                    p[part] == r[part],
                    "{kwargs}: batch {i}'s {name} differ from the trainer's"
                );
            }
        }
    }
}
