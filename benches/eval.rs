//! `make bench-eval`: evaluation throughput, boards per second through the
//! model (a board = all its legal moves scored), three ways, in the same
//! run:
//!
//! - **across boards**: many boards' legal-move sequences in each forward
//!   pass ([`predict_many`]: how `chessbench eval` scores metrics, puzzles
//!   and games);
//! - **per board**: one forward pass a board over its legal moves
//!   ([`predict`]: how the UCI engine answers a move);
//! - the reference, searchless_chess's own JAX predictor on the same boards
//!   (below).
//!
//! Positions: a fixed walk through pseudo-random play from the start (30
//! legal moves per board on average); action-value model with K = 128,
//! randomly initialised (throughput does not depend on the weights).
//!
//! Environment: BENCH_PRESETS (default "tiny,9m"), BENCH_BOARDS (default
//! 100), BENCH_MANY (boards of the across-boards path, default at least
//! 1,000, the same walk repeated, so its passes are full), BENCH_DEVICE (`cpu`, the default, or
//! `cuda`: `make bench-eval BENCH_DEVICE=cuda` builds with `--features
//! cuda`), BENCH_PRECISIONS (default `f32`; `bf16` is CUDA only: bf16
//! products and activations, f32 layer norms and log-softmax).
//!
//! Where the time goes, per preset and precision: the across-boards run's
//! three stages (preparing on one host thread, the model's passes,
//! finishing on another: [`predict_many_timed`]) with the model's waits for
//! the host; one pass with the device synchronised between copying the
//! tokens in, the network and copying the log-probabilities back
//! ([`pass_phases`]); and the host's work alone on one thread
//! ([`host_times`]: boards/s it prepares and finishes, which bounds what
//! any device can score through this path).
//!
//! Each measurement also prints a JSON line, `{"name":
//! "eval-PRESET-IMPL", "boards_per_s": ...}` with IMPL `burn-PRECISION`
//! (across boards, with its stages' seconds), `burn-PRECISION-perboard`,
//! `burn-PRECISION-pass` (one synchronised pass), `host` (the host alone)
//! or `jax-perboard` / `jax-f32` (JAX across boards): `bench/gpu.sh
//! evalbench` keeps them.
//!
//! JAX reference: with `SEARCHLESS_CHESS=DIR` (a
//! google-deepmind/searchless_chess checkout) and `CHESSBENCH_JAX_PYTHON` (a
//! Python with jax and dm-haiku, `make jax-deps`), their predictor, jitted,
//! runs the same boards (`bench/searchless_forward_speed.py`): one forward
//! pass per board as their engines do, and on a GPU also with the boards'
//! sequences packed into passes of the same size as ours (padded to one
//! shape, so XLA compiles once).

use std::{path::PathBuf, process::Command, time::Instant};

use chessbench::{
    chess::RecordSet,
    eval::{
        predict::{host_times, pass_phases, predict, predict_many, predict_many_timed},
        trained::Model,
    },
    model::{DeviceKind, Precision, Preset},
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

/// One measurement, printed as the JSON line `bench/gpu.sh` keeps.
fn json(name: &str, boards: usize, moves: usize, seconds: f64, extra: &str) {
    println!(
        "{{\"name\":\"{name}\",\"boards\":{boards},\"moves\":{moves},\"seconds\":{seconds:.4},\"boards_per_s\":{:.2},\"moves_per_s\":{:.1}{extra}}}",
        boards as f64 / seconds,
        moves as f64 / seconds
    );
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.into())
}

fn main() {
    let presets = env_or("BENCH_PRESETS", "tiny,9m");
    let n: usize = env_or("BENCH_BOARDS", "100")
        .parse()
        .expect("BENCH_BOARDS: a number of boards");
    let device = match std::env::var("BENCH_DEVICE").as_deref() {
        Ok("cuda") => DeviceKind::Cuda,
        Ok("wgpu") => DeviceKind::Wgpu,
        Ok("cpu") | Err(_) => DeviceKind::Cpu,
        Ok(other) => panic!("BENCH_DEVICE={other}: expected cpu, cuda or wgpu"),
    };
    let precisions: Vec<Precision> = env_or("BENCH_PRECISIONS", "f32")
        .split(',')
        .map(|p| match p.trim() {
            "f32" => Precision::F32,
            "bf16" => Precision::Bf16,
            "f16" => Precision::F16,
            other => panic!("BENCH_PRECISIONS: {other}: expected f32, bf16 or f16"),
        })
        .collect();
    let positions = boards(n);
    let moves: usize = positions.iter().map(|p| p.legal_moves().len()).sum();
    // The across-boards path on BENCH_MANY boards (default: at least
    // 1,000, the walk repeated).
    let many_n: usize = env_or("BENCH_MANY", &n.max(1000).to_string())
        .parse()
        .expect("BENCH_MANY: a number of boards");
    let many: Vec<&Chess> = positions.iter().cycle().take(many_n).collect();
    let many_moves: usize = many.iter().map(|p| p.legal_moves().len()).sum();
    let on = match device {
        DeviceKind::Cpu => format!(
            "CPU ({} threads)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        DeviceKind::Cuda => "CUDA device 0".to_owned(),
        DeviceKind::Wgpu => "wgpu's default adapter".to_owned(),
    };
    println!(
        "eval throughput, action-value policy, K=128, {on}: per board {n} boards ({moves} legal moves), across boards {} boards ({many_moves})",
        many.len()
    );
    host_row(&many, many_moves);
    for preset in presets.split(',') {
        let p = match preset.trim() {
            "tiny" => Preset::Tiny,
            "9m" => Preset::M9,
            "136m" => Preset::M136,
            "270m" => Preset::M270,
            other => panic!("unknown preset {other}"),
        };
        let mut across_f32 = None;
        for &precision in &precisions {
            let model = Model::random(p, RecordSet::ActionValue, 128, device)
                .and_then(|m| m.with_precision(precision))
                .unwrap_or_else(|e| panic!("a {preset} model on {on}: {e}"));
            let prec = format!("{precision:?}").to_lowercase();
            // Warm up both paths (a GPU compiles its kernels here).
            predict_many(&model, &many[..many.len().min(64)]).unwrap();
            let mut tokens = Vec::new();
            predict(&model, &positions[0], &mut tokens).unwrap();
            let (_, stages) = predict_many_timed(&model, &many).unwrap();
            let across = stages.wall_s;
            let t = Instant::now();
            for pos in &positions {
                predict(&model, pos, &mut tokens).unwrap();
            }
            let per_board = t.elapsed().as_secs_f64();
            println!(
                "  {preset:<5} {prec:<4} across boards {:9.1} boards/s ({:9.0} moves/s) | per board {:8.1} boards/s ({:.1} ms a UCI move) | {:.2}x",
                many.len() as f64 / across,
                many_moves as f64 / across,
                n as f64 / per_board,
                1e3 * per_board / n as f64,
                (many.len() as f64 / across) / (n as f64 / per_board)
            );
            let share = |s: f64| 100.0 * s / across;
            println!(
                "        across boards, {} batches: model passes {:.1}% of the wall time, waiting for preparation {:.1}% (the first batch's included), for finishing {:.1}%; host threads busy: preparing {:.1}%, finishing {:.1}%",
                stages.batches,
                share(stages.forward_s),
                share(stages.waited_for_prepare_s),
                share(stages.waited_for_finish_s),
                share(stages.prepare_s),
                share(stages.finish_s),
            );
            json(
                &format!("eval-{preset}-burn-{prec}"),
                many.len(),
                many_moves,
                across,
                &format!(
                    ",\"batches\":{},\"forward_s\":{:.4},\"prepare_s\":{:.4},\"finish_s\":{:.4},\"waited_for_prepare_s\":{:.4},\"waited_for_finish_s\":{:.4}",
                    stages.batches,
                    stages.forward_s,
                    stages.prepare_s,
                    stages.finish_s,
                    stages.waited_for_prepare_s,
                    stages.waited_for_finish_s
                ),
            );
            if device == DeviceKind::Cuda {
                pass_row(&model, preset, &prec, &many);
            }
            json(
                &format!("eval-{preset}-burn-{prec}-perboard"),
                n,
                moves,
                per_board,
                "",
            );
            if precision == Precision::F32 {
                across_f32 = Some((many.len() as f64 / across, n as f64 / per_board));
            }
        }
        if let Some(ours) = across_f32 {
            jax_reference(p, &positions, device, ours);
        }
    }
}

/// One synchronised pass on the device ([`pass_phases`]): copying the
/// tokens in, the network, copying the log-probabilities back.
fn pass_row(model: &Model, preset: &str, prec: &str, many: &[&Chess]) {
    let pass = pass_phases(model, many).unwrap();
    let pass_s = pass.upload_s + pass.forward_s + pass.download_s;
    println!(
        "        one pass of {} sequences, synchronised: copy in {:.2} ms, network {:.2} ms, copy back {:.2} ms ({:.1} MB moved, {:.1}% of the pass in copies)",
        pass.sequences,
        1e3 * pass.upload_s,
        1e3 * pass.forward_s,
        1e3 * pass.download_s,
        pass.bytes as f64 / 1e6,
        100.0 * (pass.upload_s + pass.download_s) / pass_s.max(1e-12)
    );
    println!(
        "{{\"name\":\"eval-{preset}-burn-{prec}-pass\",\"sequences\":{},\"upload_s\":{:.6},\"forward_s\":{:.6},\"download_s\":{:.6},\"bytes\":{}}}",
        pass.sequences, pass.upload_s, pass.forward_s, pass.download_s, pass.bytes
    );
}

/// The host's work alone on one thread ([`host_times`]): boards a second
/// prepared (legal moves, tokens) and finished (scores), against the
/// across-boards target for 9M on a GPU (2,000 boards/s). The same for
/// every preset (the tokens and the K = 128 read-out do not depend on the
/// network), so measured once, with the tiny model's shape.
fn host_row(many: &[&Chess], moves: usize) {
    let model = Model::random(Preset::Tiny, RecordSet::ActionValue, 128, DeviceKind::Cpu)
        .expect("a model on the CPU");
    let (prepare, finish) = host_times(&model, many).unwrap();
    let rate = |s: f64| many.len() as f64 / s.max(1e-12);
    println!(
        "  host, one thread: preparing {:9.0} boards/s, finishing {:9.0} boards/s ({:.1}x and {:.1}x the 9M GPU target of 2,000)",
        rate(prepare),
        rate(finish),
        rate(prepare) / 2000.0,
        rate(finish) / 2000.0
    );
    json("eval-host-prepare", many.len(), moves, prepare, "");
    json("eval-host-finish", many.len(), moves, finish, "");
}

/// Their predictor on the same boards (see the module docs), or why not:
/// one pass a board against our per-board path, and on a GPU also packed
/// into passes of our size against our across-boards path. `ours` is our
/// f32 (across boards, per board) boards/s.
fn jax_reference(preset: Preset, positions: &[Chess], device: DeviceKind, ours: (f64, f64)) {
    let Some(code) = std::env::var_os("SEARCHLESS_CHESS").map(PathBuf::from) else {
        println!("        JAX reference: skipped (SEARCHLESS_CHESS is not set)");
        return;
    };
    let shape = chessbench::model::ModelShape::preset(preset, RecordSet::ActionValue, 128);
    let label = match preset {
        Preset::Tiny => "tiny",
        Preset::M9 => "9m",
        Preset::M136 => "136m",
        Preset::M270 => "270m",
    };
    let dir = tempfile::tempdir().unwrap();
    let write_fens = |file: &str, boards: &[&Chess]| {
        let path = dir.path().join(file);
        let text: Vec<String> = boards
            .iter()
            .map(|p| Fen::from_position(*p, EnPassantMode::Legal).to_string())
            .collect();
        std::fs::write(&path, text.join("\n")).unwrap();
        path
    };
    let few: Vec<&Chess> = positions.iter().collect();
    let mut runs = vec![("perboard", write_fens("few.txt", &few), 0, ours.1)];
    if device == DeviceKind::Cuda {
        let many: Vec<&Chess> = positions
            .iter()
            .cycle()
            .take(positions.len().max(1000))
            .collect();
        let rows = chessbench::eval::trained::sequences_per_pass(&shape)
            .min(chessbench::eval::predict::BATCH_SEQUENCES);
        runs.push(("f32", write_fens("many.txt", &many), rows, ours.0));
    }
    let python = std::env::var("CHESSBENCH_JAX_PYTHON").unwrap_or_else(|_| "python3".into());
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/searchless_forward_speed.py");
    for (mode, fens, rows, ours) in runs {
        let out = Command::new(&python)
            .arg(&script)
            .arg("--searchless")
            .arg(&code)
            .arg("--fens")
            .arg(&fens)
            .args(["--layers", &shape.layers.to_string()])
            .args(["--d-model", &shape.d_model.to_string()])
            .args(["--heads", &shape.heads.to_string()])
            .args(["--rows-per-pass", &rows.to_string()])
            .output();
        let out = match out {
            Ok(o) if o.status.success() => o,
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                println!(
                    "        JAX reference ({mode}) failed: {}",
                    err.lines().last().unwrap_or("")
                );
                continue;
            }
            Err(e) => {
                println!("        JAX reference: cannot run {python}: {e}");
                return;
            }
        };
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let secs = v["seconds"].as_f64().unwrap();
        let boards = v["boards"].as_f64().unwrap();
        let moves = v["moves"].as_f64().unwrap();
        println!(
            "        JAX {} {mode} (their predictor, {}) {:9.1} boards/s ({:9.0} moves/s) | chessbench / JAX {:.2}x",
            v["jax"].as_str().unwrap_or("?"),
            v["devices"].as_str().unwrap_or("?"),
            boards / secs,
            moves / secs,
            ours / (boards / secs)
        );
        json(
            &format!("eval-{label}-jax-{mode}"),
            boards as usize,
            moves as usize,
            secs,
            &format!(",\"rows_per_pass\":{rows}"),
        );
    }
}
