//! `make bench-eval`: evaluation throughput on this machine's CPU: boards
//! per second through the model with each board's legal moves in one batch
//! (how `chessbench eval`, puzzles, games and the UCI engine run), against
//! the reference measured in the same run: the same boards with one
//! sequence per forward pass. Positions: a fixed walk through 1,000 plies
//! of pseudo-random play from the start (30 legal moves per board on
//! average).
//!
//! On a GPU: `BENCH_DEVICE=cuda cargo bench --features cuda --bench eval`
//! (or `make bench-eval BENCH_DEVICE=cuda`), or `chessbench eval ...
//! --device cuda` on a real checkpoint (the report's boards/s column).
//!
//! Environment: BENCH_PRESETS (default "tiny,9m"), BENCH_BOARDS (default
//! 100), BENCH_DEVICE (`cpu`, the default, or `cuda`).
//!
//! JAX reference (issue 15: chessbench >= 1.0x JAX's CPU throughput on the
//! 9M shape): with `SEARCHLESS_CHESS=DIR` (a google-deepmind/searchless_chess
//! checkout) and `CHESSBENCH_JAX_PYTHON` (a Python with jax and dm-haiku,
//! `make jax-deps`), their own predictor runs the same boards, one jitted
//! forward pass per board over its legal moves
//! (`bench/searchless_forward_speed.py`), right after ours.

use std::{path::PathBuf, process::Command, time::Instant};

use chessbench::{
    chess::{RecordSet, push_sequence},
    eval::{model::Model, policy::predict},
    model::{DeviceKind, Preset},
};
use shakmaty::{Chess, EnPassantMode, Position, fen::Fen};

fn boards(n: usize) -> Vec<Chess> {
    let mut out = Vec::new();
    let mut pos = Chess::default();
    let mut i = 0usize;
    while out.len() < n {
        let moves = pos.legal_moves();
        if moves.is_empty() || pos.halfmoves() > 60 {
            pos = Chess::default();
            continue;
        }
        out.push(pos.clone());
        i = i.wrapping_mul(31).wrapping_add(17);
        pos.play_unchecked(moves[i % moves.len()]);
    }
    out
}

fn main() {
    let presets = std::env::var("BENCH_PRESETS").unwrap_or_else(|_| "tiny,9m".into());
    let n: usize = std::env::var("BENCH_BOARDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let device = match std::env::var("BENCH_DEVICE").as_deref() {
        Ok("cuda") => DeviceKind::Cuda,
        Ok("cpu") | Err(_) => DeviceKind::Cpu,
        Ok(other) => panic!("BENCH_DEVICE={other}: expected cpu or cuda"),
    };
    let positions = boards(n);
    let moves: usize = positions.iter().map(|p| p.legal_moves().len()).sum();
    let on = match device {
        DeviceKind::Cpu => format!(
            "CPU ({} threads)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        DeviceKind::Cuda => "CUDA device 0".to_owned(),
    };
    println!("eval throughput, action-value policy, K=128, {n} boards ({moves} legal moves), {on}");
    for preset in presets.split(',') {
        let p = match preset.trim() {
            "tiny" => Preset::Tiny,
            "9m" => Preset::M9,
            "136m" => Preset::M136,
            "270m" => Preset::M270,
            other => panic!("unknown preset {other}"),
        };
        let model = Model::random(p, RecordSet::ActionValue, 128, device)
            .unwrap_or_else(|e| panic!("a {preset} model on {on}: {e}"));
        let mut tokens = Vec::new();
        // Warm up.
        predict(&model, &positions[0], &mut tokens).unwrap();
        let t = Instant::now();
        for pos in &positions {
            predict(&model, pos, &mut tokens).unwrap();
        }
        let batched = t.elapsed().as_secs_f64();
        // Reference: one sequence per forward pass.
        let t = Instant::now();
        for pos in &positions {
            let fen = Fen::from_position(pos, EnPassantMode::Legal).to_string();
            let board = chessbench::chess::tokens::tokenize(&fen).unwrap();
            let vocab = chessbench::chess::actions::vocabulary();
            for m in pos.legal_moves() {
                tokens.clear();
                push_sequence(
                    RecordSet::ActionValue,
                    &board,
                    vocab.index_of_move(&m).unwrap(),
                    0,
                    &mut tokens,
                );
                model.log_probs(&tokens).unwrap();
            }
        }
        let single = t.elapsed().as_secs_f64();
        println!(
            "  {preset:<5} batched {:8.1} boards/s ({:8.0} moves/s) | one sequence per pass {:7.1} boards/s | ratio {:.2}x",
            n as f64 / batched,
            moves as f64 / batched,
            n as f64 / single,
            single / batched
        );
        if device == DeviceKind::Cpu {
            jax_reference(p, &positions, batched);
        }
    }
}

/// Their predictor on the same boards (see the module docs), or why not.
fn jax_reference(preset: Preset, positions: &[Chess], ours: f64) {
    let Some(code) = std::env::var_os("SEARCHLESS_CHESS").map(PathBuf::from) else {
        println!("        JAX reference: skipped (SEARCHLESS_CHESS is not set)");
        return;
    };
    let python = std::env::var("CHESSBENCH_JAX_PYTHON").unwrap_or_else(|_| "python3".into());
    let shape = chessbench::model::ModelShape::preset(preset, RecordSet::ActionValue, 128);
    let dir = tempfile::tempdir().unwrap();
    let fens = dir.path().join("fens.txt");
    let text: Vec<String> = positions
        .iter()
        .map(|p| Fen::from_position(p, EnPassantMode::Legal).to_string())
        .collect();
    std::fs::write(&fens, text.join("\n")).unwrap();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/searchless_forward_speed.py");
    let out = Command::new(&python)
        .arg(script)
        .arg("--searchless")
        .arg(&code)
        .arg("--fens")
        .arg(&fens)
        .args(["--layers", &shape.layers.to_string()])
        .args(["--d-model", &shape.d_model.to_string()])
        .args(["--heads", &shape.heads.to_string()])
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            println!(
                "        JAX reference failed: {}",
                err.lines().last().unwrap_or("")
            );
            return;
        }
        Err(e) => {
            println!("        JAX reference: cannot run {python}: {e}");
            return;
        }
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let secs = v["seconds"].as_f64().unwrap();
    let boards = v["boards"].as_f64().unwrap();
    println!(
        "        JAX {} (their predictor, XLA CPU) {:8.1} boards/s ({:8.0} moves/s) | chessbench / JAX {:.2}x",
        v["jax"].as_str().unwrap_or("?"),
        boards / secs,
        v["moves"].as_f64().unwrap() / secs,
        secs / ours
    );
}
