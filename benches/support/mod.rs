//! Helpers shared by the benchmarks (`mod support;` in each that needs them).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use chessbench::ingest::config::resolve_crate_path;

/// Runs `cmd`, panicking with its stderr if it fails.
pub fn sh(cmd: &mut Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds pgn-reader's parallel_validate example from the crate's source.
pub fn build_parallel_validate(work: &Path) -> (PathBuf, String) {
    let manifest =
        resolve_crate_path("pgn-reader/Cargo.toml").expect("pgn-reader source via cargo metadata");
    let src = manifest.parent().unwrap();
    let version = src
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("pgn-reader")
        .to_owned();
    // Build a copy: the registry's sources are read-only by convention.
    std::fs::create_dir_all(work).expect("creating the benchmark's work directory");
    let copy = work.join(&version);
    if !copy.join("Cargo.toml").exists() {
        sh(Command::new("cp").arg("-r").arg(src).arg(&copy));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("building {version} examples/parallel_validate.rs ...");
    sh(Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "--example",
            "parallel_validate",
        ])
        .arg("--manifest-path")
        .arg(copy.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(work.join("pv-target"))
        .env_remove("CARGO_TARGET_DIR"));
    (
        work.join("pv-target/release/examples/parallel_validate"),
        version,
    )
}

/// The machine, for benchmark headers: cores, CPU model, rustc.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {rustc}")
}
