//! searchless_chess's own model against chessbench's (issue 15): their
//! `transformer.py` draws parameters (haiku init, seeded) and predicts, on
//! sequences their `data_loader` builds from our `.bag` export; chessbench
//! reads the same parameters (`chessbench::model::haiku`) and must give the
//! same log-probabilities within 1e-4, for every policy and for the tiny and
//! 9M shapes.
//!
//! Needs a searchless_chess checkout (`SEARCHLESS_CHESS=DIR`) and a Python
//! with jax and dm-haiku (`CHESSBENCH_JAX_PYTHON`, default `python3`); it
//! skips with the reason without them, and fails under
//! `REQUIRE_PUBLISHED=1` (`make test-published`).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use chessbench::{
    chess::RecordSet,
    model::{ModelShape, Preset, haiku},
};
use safetensors::SafeTensors;

use crate::{sql, util::have_stockfish};

/// The checkout and the Python, or why not.
fn reference() -> Option<(PathBuf, String)> {
    let python = std::env::var("CHESSBENCH_JAX_PYTHON").unwrap_or_else(|_| "python3".into());
    let why = match std::env::var_os("SEARCHLESS_CHESS").map(PathBuf::from) {
        None => "SEARCHLESS_CHESS (a searchless_chess checkout) is not set".to_owned(),
        Some(dir) if !dir.join("src/transformer.py").is_file() => {
            format!("{}: no src/transformer.py", dir.display())
        }
        Some(dir) => {
            let ok = Command::new(&python)
                .args(["-c", "import jax, haiku, grain, apache_beam"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return Some((dir, python));
            }
            format!("{python} cannot import jax, haiku, grain and apache_beam")
        }
    };
    assert!(
        std::env::var("REQUIRE_PUBLISHED").as_deref() != Ok("1"),
        "REQUIRE_PUBLISHED=1 but {why}"
    );
    eprintln!("skipped: {why}");
    None
}

fn tensor_f32(st: &SafeTensors, name: &str) -> Vec<f32> {
    st.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn tensor_i32(st: &SafeTensors, name: &str) -> Vec<i32> {
    st.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Largest |a - b| over two equally long slices.
fn max_gap(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// Runs `tests/python/searchless_forward.py` (their code) with `args`,
/// writing `dir/params.safetensors`; returns the reference file's bytes.
fn their_reference(python: &str, code: &Path, bag: &Path, dir: &Path, args: &[&str]) -> Vec<u8> {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/searchless_forward.py");
    let reference = dir.join("reference.safetensors");
    let o = Command::new(python)
        .arg(&script)
        .arg("--searchless")
        .arg(code)
        .arg("--bag")
        .arg(bag)
        .args(["--buckets", "32"])
        .args(args)
        .arg("--params")
        .arg(dir.join("params.safetensors"))
        .arg("--reference")
        .arg(&reference)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read(&reference).unwrap()
}

#[test]
fn searchless_chess_parameters_give_their_log_probabilities() {
    let Some((code, python)) = reference() else {
        return;
    };
    if !have_stockfish() {
        return;
    }
    let run = sql::annotated();
    let dir = tempfile::tempdir().unwrap();
    let bags = dir.path().join("bags");
    let o = sql::bag_export(run, &bags, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (preset, set, records, seed) in [
        (Preset::Tiny, RecordSet::ActionValue, 1000, 0),
        (Preset::Tiny, RecordSet::StateValue, 1000, 1),
        (Preset::Tiny, RecordSet::BehavioralCloning, 1000, 2),
        (Preset::M9, RecordSet::ActionValue, 100, 3),
    ] {
        let params = dir.path().join("params.safetensors");
        let shape = ModelShape::preset(preset, set, 32);
        let bytes = their_reference(
            &python,
            &code,
            &bags.join(format!("{}_data.bag", set.name())),
            dir.path(),
            &[
                "--policy",
                set.name(),
                "--layers",
                &shape.layers.to_string(),
                "--d-model",
                &shape.d_model.to_string(),
                "--heads",
                &shape.heads.to_string(),
                "--seed",
                &seed.to_string(),
                "--records",
                &records.to_string(),
            ],
        );
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let sequences = tensor_i32(&st, "sequences");
        let theirs = tensor_f32(&st, "log_probs");
        assert_eq!(
            sequences.len() % shape.seq_len,
            0,
            "{set:?}: sequence length"
        );
        let ours = haiku::log_probs(&params, &shape, &sequences).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{preset:?} {set:?}");
        let worst = max_gap(&ours, &theirs);
        eprintln!(
            "{preset:?} {set:?}: {} sequences, max |log p - theirs| = {worst:.2e}",
            sequences.len() / shape.seq_len
        );
        assert!(worst < 1e-4, "{preset:?} {set:?}: {worst}");
        // Their argmax is ours on every sequence.
        let argmax = |v: &[f32]| -> Vec<usize> {
            v.chunks(shape.outputs)
                .map(|r| {
                    r.iter()
                        .enumerate()
                        .max_by(|a, b| a.1.total_cmp(b.1))
                        .unwrap()
                        .0
                })
                .collect()
        };
        assert_eq!(argmax(&ours), argmax(&theirs), "{preset:?} {set:?}");
    }
    // Training: the same 30 steps from their initial parameters (batch 16,
    // Adam lr 2e-3, clip 1.0) give the same losses and parameters.
    let params = dir.path().join("params.safetensors");
    let trained = dir.path().join("trained.safetensors");
    let shape = ModelShape::preset(Preset::Tiny, RecordSet::ActionValue, 32);
    let bytes = their_reference(
        &python,
        &code,
        &bags.join("action_value_data.bag"),
        dir.path(),
        &[
            "--policy",
            "action_value",
            "--seed",
            "4",
            "--records",
            "256",
            "--steps",
            "30",
            "--batch-size",
            "16",
            "--learning-rate",
            "2e-3",
            "--trained",
            trained.to_str().unwrap(),
        ],
    );
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let sequences = tensor_i32(&st, "sequences");
    let their_losses = tensor_f32(&st, "losses");
    let (losses, ours) =
        chessbench::train::parity::haiku_steps(&params, &shape, &sequences, 16, 2e-3, 30).unwrap();
    let theirs = haiku::log_probs(&trained, &shape, &sequences).unwrap();
    let loss_gap = max_gap(&losses, &their_losses);
    let param_gap = max_gap(&ours, &theirs);
    eprintln!(
        "30 training steps: losses {:.4} -> {:.4} (theirs {:.4} -> {:.4}), max loss gap {loss_gap:.2e}, max log-prob gap after training {param_gap:.2e}",
        losses[0], losses[29], their_losses[0], their_losses[29]
    );
    assert!(loss_gap < 1e-3, "{losses:?}\n{their_losses:?}");
    assert!(param_gap < 1e-3, "{param_gap}");

    // `chessbench checkpoint import` makes them a checkpoint `uci` plays.
    let out = dir.path().join("imported");
    let o = crate::util::run(&[
        "checkpoint",
        "import",
        params.to_str().unwrap(),
        "--policy",
        "action_value",
        "--model",
        "tiny",
        "--buckets",
        "32",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut uci = Command::new(env!("CARGO_BIN_EXE_chessbench"))
        .args(["uci", "--checkpoint", out.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    uci.stdin
        .take()
        .unwrap()
        .write_all(b"uci\nposition startpos\ngo\nquit\n")
        .unwrap();
    let played = String::from_utf8(uci.wait_with_output().unwrap().stdout).unwrap();
    assert!(played.contains("bestmove "), "{played}");
    // A tree of another policy is refused and nothing is written.
    let refused = dir.path().join("refused");
    let o = crate::util::run(&[
        "checkpoint",
        "import",
        params.to_str().unwrap(),
        "--policy",
        "behavioral_cloning",
        "--model",
        "tiny",
        "--out",
        refused.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("linear_6/w"), "{err}");
    assert!(!refused.exists() && !dir.path().join(".refused.importing").exists());

    // Another policy's tree is refused, naming the tensor: the action-value
    // parameters read as a behavioural-cloning model (1968 outputs).
    let shape = ModelShape::preset(Preset::Tiny, RecordSet::BehavioralCloning, 32);
    let err = haiku::log_probs(&params, &shape, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("linear_6/w") && err.contains("1968"), "{err}");
}
