//! `chessbench` on wgpu end to end, the binary driven as a user drives it:
//! the demo checkpoint's evaluation metrics and UCI scores on wgpu equal
//! to the CPU's (to 1e-4 relative), and close to them in mixed f16;
//! training and `bench-step --count-kernels` from the command line.
//!
//! Built only with `--features wgpu`; `make test-wgpu` runs it on Mesa's
//! lavapipe (software Vulkan) in CI, after the library's kernel and
//! training tests (`model::gpu::wgpu`), with `CHESSBENCH_DEMO_RUN` naming the
//! trained demo run (`make train`). Without an adapter, or without the
//! demo run, it fails: nothing here is skipped.
#![cfg(feature = "wgpu")]

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

const BIN: &str = env!("CARGO_BIN_EXE_chessbench");

/// The trained demo run (`make train`), from `CHESSBENCH_DEMO_RUN`.
fn demo_run() -> PathBuf {
    let run = std::env::var_os("CHESSBENCH_DEMO_RUN").map(PathBuf::from).expect(
        "CHESSBENCH_DEMO_RUN must name the trained demo run: `make test-wgpu` sets it (runs/demo after `make train`)",
    );
    assert!(
        run.join("train/av_tiny/summary.json").exists(),
        "{} has no trained av_tiny model: run `make train` first",
        run.display()
    );
    run
}

fn chessbench(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .expect("chessbench runs");
    assert!(
        out.status.success(),
        "chessbench {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("a JSON summary")
}

/// The demo checkpoint's static metrics on the test split's first 100
/// boards, on `device` in `precision`.
fn metrics(run: &Path, device: &str, precision: &str) -> serde_json::Value {
    let report = tempfile::tempdir().unwrap();
    let checkpoint = run.join("train/av_tiny");
    let out = chessbench(&[
        "eval",
        run.to_str().unwrap(),
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--only",
        "metrics",
        "--boards",
        "100",
        "--device",
        device,
        "--precision",
        precision,
        "--out",
        report.path().to_str().unwrap(),
        "--json",
    ]);
    json(&out)["metrics"].clone()
}

/// Relative difference, 0 for two zeros.
fn relative(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

#[test]
fn evaluation_on_wgpu_equals_the_cpu() {
    let run = demo_run();
    let cpu = metrics(&run, "cpu", "f32");
    let gpu = metrics(&run, "wgpu", "f32");
    let f16 = metrics(&run, "wgpu", "f16");
    println!("cpu: {cpu}\nwgpu: {gpu}\nwgpu f16: {f16}");
    assert_eq!(cpu["boards"], 100, "{cpu}");
    assert_eq!(gpu["boards"], cpu["boards"]);
    assert_eq!(gpu["moves"], cpu["moves"]);
    for field in [
        "action_accuracy",
        "kendall_tau",
        "log_loss",
        "l2_win_prob",
        "entropy",
    ] {
        let (a, b) = (gpu[field].as_f64(), cpu[field].as_f64());
        let (Some(a), Some(b)) = (a, b) else {
            panic!(
                "{field}: {:?} on wgpu, {:?} on the CPU",
                gpu[field], cpu[field]
            );
        };
        assert!(
            relative(a, b) <= 1e-4,
            "{field}: {a} on wgpu, {b} on the CPU"
        );
        // Mixed f16: 11 bits of mantissa in the products and activations.
        let h = f16[field].as_f64().unwrap();
        let bound = if field == "action_accuracy" || field == "kendall_tau" {
            0.05
        } else {
            1e-2
        };
        assert!(
            (h - b).abs() <= bound * b.abs().max(1.0),
            "{field}: {h} in f16, {b} on the CPU"
        );
    }
}

/// The `info ... score cp N ... pv MOVE` lines and best moves of a UCI
/// session on `device`.
fn uci_scores(checkpoint: &Path, device: &str) -> Vec<String> {
    let mut child = Command::new(BIN)
        .args([
            "uci",
            "--checkpoint",
            checkpoint.to_str().unwrap(),
            "--device",
            device,
        ])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chessbench uci starts");
    let script = "uci\nisready\nposition startpos\ngo\n\
        position startpos moves e2e4 e7e5 g1f3\ngo\n\
        position fen r1bqkbnr/pppp1ppp/2n5/4p3/2B1P3/5N2/PPPP1PPP/RNBQK2R b KQkq - 3 3\ngo\n\
        position fen 8/8/8/4k3/8/8/4P3/4K3 w - - 0 1\ngo\n\
        position fen 6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1\ngo\nquit\n";
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("bestmove") || l.contains(" score cp "))
        .map(|l| {
            // The search time differs between devices; the rest must not.
            let words: Vec<&str> = l.split_whitespace().collect();
            let mut kept = Vec::new();
            let mut skip = false;
            for w in words {
                if skip {
                    skip = false;
                } else if w == "time" {
                    skip = true;
                } else {
                    kept.push(w);
                }
            }
            kept.join(" ")
        })
        .collect()
}

#[test]
fn uci_on_wgpu_scores_as_the_cpu() {
    let checkpoint = demo_run().join("train/av_tiny");
    let cpu = uci_scores(&checkpoint, "cpu");
    let gpu = uci_scores(&checkpoint, "wgpu");
    println!("cpu: {cpu:#?}\nwgpu: {gpu:#?}");
    assert_eq!(
        cpu.len(),
        10,
        "five positions, a score and a move each: {cpu:?}"
    );
    assert_eq!(gpu, cpu);
}

/// A copy of the demo run's tables, without its models and reports.
fn run_copy(run: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if name == "train" || name == "report" || name == "ablate" {
                continue;
            }
            let target = to.join(&name);
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    copy_dir(run, copy.path());
    copy
}

#[test]
fn training_runs_on_wgpu_from_the_command_line() {
    let run = run_copy(&demo_run());
    let dir = run.path().to_str().unwrap();
    for precision in ["f32", "f16"] {
        let name = format!("wgpu_{precision}");
        let summary = json(&chessbench(&[
            "train",
            dir,
            "--name",
            &name,
            "--policy",
            "action_value",
            "--model",
            "tiny",
            "--buckets",
            "32",
            "--batch-size",
            "16",
            "--steps",
            "4",
            "--log-every",
            "1",
            "--eval-records",
            "64",
            "--device",
            "wgpu",
            "--precision",
            precision,
            "--json",
        ]));
        println!("{precision}: {summary}");
        let out = run.path().join("train").join(&name);
        assert!(out.join("summary.json").exists());
        let metrics = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
        let losses: Vec<f64> = metrics
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(3).unwrap().parse().unwrap())
            .collect();
        assert_eq!(losses.len(), 4, "{metrics}");
        assert!(
            losses.iter().all(|l| l.is_finite() && *l > 0.0),
            "{metrics}"
        );
    }
}

#[test]
fn bench_step_counts_the_kernels_of_a_step() {
    let out = chessbench(&[
        "bench-step",
        "--model",
        "tiny",
        "--buckets",
        "32",
        "--batch-size",
        "2",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--device",
        "wgpu",
        "--count-kernels",
        "--json",
    ]);
    let timing = json(&out);
    let kernels = &timing["kernels"];
    println!("{kernels}");
    assert!(
        kernels["launched_per_step"].as_f64().unwrap() > 50.0,
        "{kernels}"
    );
    assert!(kernels["compiled_cold"].as_u64().unwrap() > 10, "{kernels}");
    let names: Vec<&str> = kernels["by_kernel"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k[0].as_str().unwrap())
        .collect();
    for ours in [
        "AttentionForwardKernel",
        "AttentionDqKernel",
        "LayerNormForwardKernel",
        "SwigluForwardKernel",
    ] {
        assert!(names.contains(&ours), "{ours} not among {names:?}");
    }
    let variants = timing["kernel_variants"].as_array().unwrap();
    assert!(
        !variants.is_empty()
            && variants
                .iter()
                .all(|v| v.as_str().unwrap().ends_with("passed")),
        "{variants:?}"
    );
}
