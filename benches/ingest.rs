//! `make bench`: ingest throughput against two references measured in the
//! same run, and Parquet bytes per record against ChessBench's .bag files.
//!
//! References:
//! - `zstd -dc` of the same input: the decompression floor;
//! - pgn-reader's `parallel_validate` example, built from the crate's own
//!   source: parse and validate every move, nothing written.
//!
//! Targets: ingest (parse, play, dedup, write) >= 0.8x the speed of
//! parallel_validate on `.pgn.zst`;
//! legal_moves <= 3 bytes per record.
//!
//! Commands run interleaved, `ROUNDS` times each; the median counts.
//! Environment: CHESSBENCH_BENCH_REPEAT (default 40) copies of the shared
//! 2022-06 sample (5.7 MB each), CHESSBENCH_BENCH_ROUNDS (default 5).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

/// The speed ingest should reach, as a fraction of parallel_validate's.
const SPEED_TARGET: f64 = 0.8;

mod support;

use support::{build_parallel_validate, machine, sh};

const BIN: &str = env!("CARGO_BIN_EXE_chessbench");

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// The benchmark input: the 2022-06 sample of data/ repeated, plain and .zst.
fn prepare_input(work: &Path, repeat: usize) -> (PathBuf, PathBuf, PathBuf, u64) {
    let sample = chessbench::testing::data_file("lichess_2022-06_head2500.pgn.zst");
    let one = zstd::decode_all(std::fs::File::open(&sample).unwrap()).unwrap();

    let unique = work.join("unique.pgn");
    std::fs::write(&unique, &one).unwrap();
    let plain = work.join(format!("repeat{repeat}.pgn"));
    let zst = work.join(format!("repeat{repeat}.pgn.zst"));
    if !zst.exists() || !plain.exists() {
        let mut data = Vec::with_capacity(one.len() * repeat + repeat);
        for _ in 0..repeat {
            data.extend_from_slice(&one);
            data.push(b'\n');
        }
        std::fs::write(&plain, &data).unwrap();
        std::fs::write(&zst, zstd::encode_all(&data[..], 3).unwrap()).unwrap();
    }
    let bytes = std::fs::metadata(&plain).unwrap().len();
    (plain, zst, unique, bytes)
}

fn time(cmd: &mut Command) -> f64 {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let start = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let secs = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    secs
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn ingest_cmd(input: &Path, out: &Path) -> Command {
    let _ = std::fs::remove_dir_all(out);
    let mut c = Command::new(BIN);
    c.arg("ingest").arg(out).arg(input).arg("--no-progress");
    c
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let repeat = env_usize("CHESSBENCH_BENCH_REPEAT", 40);
    let rounds = env_usize("CHESSBENCH_BENCH_ROUNDS", 5);
    let work = target_dir().join("bench");
    std::fs::create_dir_all(&work).unwrap();
    let (pv, pv_version) = build_parallel_validate(&work);
    let (plain, zst, unique, pgn_bytes) = prepare_input(&work, repeat);
    let zst_bytes = std::fs::metadata(&zst).unwrap().len();
    let have_zstd_cli = Command::new("zstd")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let out = work.join("run");

    // Games in the input, from a first ingest (also warms the page cache).
    let o = sh(Command::new(BIN)
        .arg("ingest")
        .arg(&out)
        .arg(&zst)
        .args(["--no-progress", "--json"]));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let games = summary["games_read"].as_u64().unwrap();
    eprintln!(
        "input: {} x 2022-06 sample = {:.1} MB PGN, {games} games; .zst {:.1} MB; {rounds} rounds",
        repeat,
        pgn_bytes as f64 / 1e6,
        zst_bytes as f64 / 1e6
    );

    let names = [
        "zstd -dc (decompression floor)",
        "parallel_validate .pgn.zst",
        "chessbench ingest .pgn.zst",
        "parallel_validate .pgn",
        "chessbench ingest .pgn",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        eprintln!("round {}/{rounds}", round + 1);
        if have_zstd_cli {
            times[0].push(time(Command::new("zstd").arg("-dc").arg(&zst)));
        }
        times[1].push(time(Command::new(&pv).arg(&zst)));
        times[2].push(time(&mut ingest_cmd(&zst, &out)));
        times[3].push(time(Command::new(&pv).arg(&plain)));
        times[4].push(time(&mut ingest_cmd(&plain, &out)));
    }
    // Per-round ratios (each round runs both commands back to back), to show
    // how much this machine's speed varies.
    let round_ratios = |pv: usize, ours: usize| -> (f64, f64) {
        let r: Vec<f64> = times[pv]
            .iter()
            .zip(&times[ours])
            .map(|(a, b)| a / b)
            .collect();
        (
            r.iter().copied().fold(f64::INFINITY, f64::min),
            r.iter().copied().fold(0.0, f64::max),
        )
    };
    let spread = [round_ratios(1, 2), round_ratios(3, 4)];
    let med: Vec<Option<f64>> = times
        .iter_mut()
        .map(|t| (!t.is_empty()).then(|| median(t)))
        .collect();

    println!("\n## chessbench ingest benchmark\n");
    println!("machine: {}", machine());
    println!(
        "chessbench {}, reference: {pv_version} examples/parallel_validate (1 parser + 3 validator threads)",
        env!("CARGO_PKG_VERSION")
    );
    println!(
        "input: Lichess 2022-06 sample x {repeat} = {:.1} MB PGN ({games} games), zstd -3: {:.1} MB; median of {rounds} interleaved runs\n",
        pgn_bytes as f64 / 1e6,
        zst_bytes as f64 / 1e6
    );
    println!(
        "| command | seconds | games/s | MB/s (PGN) | speed vs parallel_validate (rounds: min-max) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let Some(t) = med[i] else {
            println!("| {name} | (zstd CLI not installed) | | | |");
            continue;
        };
        let reference = match i {
            2 => med[1],
            4 => med[3],
            _ => None,
        };
        let ratio = reference.map(|r| r / t);
        if let Some(r) = ratio {
            ratios.push((name, r));
        }
        let range = match i {
            2 => format!(" ({:.2}-{:.2})", spread[0].0, spread[0].1),
            4 => format!(" ({:.2}-{:.2})", spread[1].0, spread[1].1),
            _ => String::new(),
        };
        println!(
            "| {name} | {t:.3} | {:.0} | {:.0} | {}{range} |",
            games as f64 / t,
            pgn_bytes as f64 / 1e6 / t,
            ratio.map_or("".into(), |r| format!("{r:.2}x"))
        );
    }

    // Bytes per record and throughput on unique games (no repeated boards).
    let uout = work.join("unique-run");
    let mut cmd = ingest_cmd(&unique, &uout);
    let start = Instant::now();
    let o = sh(cmd.arg("--json"));
    let unique_secs = start.elapsed().as_secs_f64();
    let usum: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = sh(Command::new(BIN).arg("stats").arg(&uout).arg("--json"));
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &stats["splits"]["train"];
    let per = |table: &str, n: &str| s["bytes"][table].as_f64().unwrap() / s[n].as_f64().unwrap();
    let unique_mb = std::fs::metadata(&unique).unwrap().len() as f64 / 1e6;
    println!(
        "\nunique games (one copy, {} games, {:.1} MB, no repeated boards beyond openings): {:.3} s, {:.0} games/s, {:.1} MB/s; phases {}",
        usum["games_read"],
        unique_mb,
        unique_secs,
        usum["games_read"].as_f64().unwrap() / unique_secs,
        unique_mb / unique_secs,
        usum["phases"]
    );
    println!("\n| table | records | bytes | bytes/record | ChessBench .bag (Table A1 sizes) |");
    println!("|---|---:|---:|---:|---:|");
    let lm = per("legal_moves", "action_value");
    println!(
        "| boards (state_value) | {} | {} | {:.1} | ~74 |",
        s["state_value"],
        s["bytes"]["boards"],
        per("boards", "state_value")
    );
    println!(
        "| legal_moves (action_value) | {} | {} | {lm:.2} | ~81 |",
        s["action_value"], s["bytes"]["legal_moves"]
    );
    println!(
        "| games | {} | {} | {:.1} | - |",
        s["games"],
        s["bytes"]["games"],
        per("games", "games")
    );

    println!("\n### targets");
    for (name, r) in &ratios {
        println!(
            "- {name}: {r:.2}x parallel_validate (target >= {SPEED_TARGET}x): {}",
            if *r >= SPEED_TARGET { "met" } else { "NOT MET" }
        );
    }
    println!(
        "- legal_moves: {lm:.2} B/record (target <= 3): {}",
        if lm <= 3.0 { "met" } else { "NOT MET" }
    );
    let json = serde_json::json!({
        "machine": machine(),
        "input_mb": pgn_bytes as f64 / 1e6,
        "games": games,
        "median_seconds": names.iter().zip(&med).map(|(n, t)| (n.to_string(), *t)).collect::<std::collections::BTreeMap<_, _>>(),
        "ratios": ratios.iter().map(|(n, r)| (n.to_string(), *r)).collect::<std::collections::BTreeMap<_, _>>(),
        "legal_moves_bytes_per_record": lm,
        "boards_bytes_per_record": per("boards", "state_value"),
        "unique_seconds": unique_secs,
    });
    let path = work.join("ingest.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
    println!("\n(machine-readable: {})", path.display());
}
