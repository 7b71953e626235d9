//! `make bench-evals`: how fast the Lichess evaluation database streams
//! (`chessbench::annotate::lichess_evals::reader::read` on one thread, `read_parallel` on
//! every core), and in how much memory.
//!
//! The input is **synthetic, Lichess-shaped**: CHESSBENCH_BENCH_LINES
//! (default 200,000) JSON lines in the database's form, each a position
//! reached by seeded random play (0-80 plies from the start), with one or
//! two searches of one to five principal variations of ten random legal
//! moves and random scores; zstd level 3, as the download is compressed.
//! Real lines carry the same fields; their lengths differ.
//!
//! Printed, per pass over the file on one thread and on every core (the
//! median of CHESSBENCH_BENCH_ROUNDS, default 3, interleaved): lines/s, MB
//! of JSON/s, the ratio against zstd's own rate decompressing the file on
//! one thread (the floor: the parallel reader decompresses on one thread
//! too), and the projected time per 10^8 lines; then the process's peak
//! RSS. Passes: every position skipped by its key (a run that wants
//! none), one in ten wanted (by its key's hash), every position wanted; a
//! wanted position is parsed in full and labelled as annotating it would
//! (its search chosen, every variation replayed).
//!
//! Then end to end, `chessbench annotate RUN --evals FILE` as a child
//! process: RUN holds the 2,500 real Lichess games of
//! `data/lichess_2022-06_head2500.pgn.zst`, FILE every other board of
//! theirs with synthetic searches (as above), between four synthetic
//! positions no board has for each (most of the real file is positions a
//! run lacks). Printed: wall time, lines/s, boards labelled/s, the ratio
//! against a keys-only pass over the same file in this process (the same
//! run's floor for reading it), and the child's peak RSS (`wait4`), at the
//! default memory limit (one pass) and at one that takes four passes.

use std::{
    io::{Read, Write},
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use chessbench::{
    annotate::lichess_evals::reader::{EvalsFormat, ReadEvent, read, read_parallel},
    chess::lichess_evals,
};
use shakmaty::{CastlingMode, Chess, EnPassantMode, Position, fen::Fen, uci::UciMove};

/// xorshift64*: a small seeded generator, so the file is the same each run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Ten random legal moves from `pos`, castling written king-takes-rook
/// as the database writes it.
fn line(pos: &Chess, rng: &mut Rng) -> String {
    let mut pos = pos.clone();
    let mut out = Vec::new();
    for _ in 0..10 {
        let moves = pos.legal_moves();
        if moves.is_empty() {
            break;
        }
        let m = moves[rng.below(moves.len() as u64) as usize];
        out.push(UciMove::from_move(m, CastlingMode::Chess960).to_string());
        pos.play_unchecked(m);
    }
    out.join(" ")
}

fn position(rng: &mut Rng) -> Chess {
    loop {
        let mut pos = Chess::default();
        let plies = rng.below(81);
        for _ in 0..plies {
            let moves = pos.legal_moves();
            if moves.is_empty() {
                break;
            }
            let m = moves[rng.below(moves.len() as u64) as usize];
            pos.play_unchecked(m);
        }
        if !pos.legal_moves().is_empty() {
            return pos;
        }
    }
}

fn write_input(path: &Path, lines: u64) -> u64 {
    let mut rng = Rng(0x5eed_c0de_1234_5678);
    let file = std::fs::File::create(path).expect("create the input");
    let mut out = zstd::stream::write::Encoder::new(file, 3).expect("zstd");
    let mut json_bytes = 0u64;
    for _ in 0..lines {
        let pos = position(&mut rng);
        let fen = Fen::from_position(&pos, EnPassantMode::Legal).to_string();
        let four: Vec<&str> = fen.split(' ').take(4).collect();
        let searches = 1 + rng.below(2);
        let mut evals = Vec::new();
        for _ in 0..searches {
            let pvs = 1 + rng.below(5);
            let pvs: Vec<String> = (0..pvs)
                .map(|_| {
                    let score = if rng.below(20) == 0 {
                        let n = 1 + rng.below(15) as i64;
                        format!("\"mate\":{}", if rng.below(2) == 0 { n } else { -n })
                    } else {
                        format!("\"cp\":{}", rng.below(1001) as i64 - 500)
                    };
                    format!("{{{score},\"line\":\"{}\"}}", line(&pos, &mut rng))
                })
                .collect();
            evals.push(format!(
                "{{\"pvs\":[{}],\"knodes\":{},\"depth\":{}}}",
                pvs.join(","),
                rng.below(300_000),
                10 + rng.below(40)
            ));
        }
        let text = format!(
            "{{\"fen\":\"{}\",\"evals\":[{}]}}\n",
            four.join(" "),
            evals.join(",")
        );
        json_bytes += text.len() as u64;
        out.write_all(text.as_bytes()).expect("write");
    }
    out.finish().expect("finish");
    json_bytes
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let lines: u64 = std::env::var("CHESSBENCH_BENCH_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("a scratch directory");
    let path = dir.path().join("evals.jsonl.zst");
    let t = Instant::now();
    let json_bytes = write_input(&path, lines);
    let packed = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!(
        "synthetic Lichess-shaped evaluation database: {lines} lines, {:.1} MB of JSON, {:.1} MB as .zst (written in {:.1} s)",
        json_bytes as f64 / 1e6,
        packed as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );

    let rounds: usize = std::env::var("CHESSBENCH_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    // Each pass `rounds` times, interleaved; the median of each is printed.
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let decompress = || {
        let t = Instant::now();
        let mut d = zstd::stream::read::Decoder::new(std::fs::File::open(&path).unwrap()).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        while d.read(&mut buf).unwrap() > 0 {}
        t.elapsed().as_secs_f64()
    };
    // Whether a position is wanted: one in `every` by its key's hash (none
    // for 0), the same rule on every thread.
    let wants = |key: &str, every: u64| {
        every != 0 && xxhash_rust::xxh3::xxh3_64(key.as_bytes()).is_multiple_of(every)
    };
    // What annotating a position takes: its search chosen, every
    // variation replayed.
    let label = |pos: Chess, e: lichess_evals::EvalsPosition| {
        let search = lichess_evals::choose(&e.searches).expect("a search");
        lichess_evals::labels(&pos, search)
            .expect("legal lines")
            .actions
            .len()
    };
    let pass = |every: u64, threads: usize| {
        let t = Instant::now();
        let mut actions = 0usize;
        let pass = if threads == 1 {
            read(
                &path,
                EvalsFormat::JsonLines,
                |key| wants(key, every),
                |_, _, pos, e| actions += label(pos, e),
                |line, r| panic!("line {line}: {r}"),
            )
        } else {
            read_parallel(
                &path,
                EvalsFormat::JsonLines,
                threads,
                |key| wants(key, every),
                |_, pos, e| label(pos, e),
                |event| match event {
                    ReadEvent::Position(_, _, n) => actions += n,
                    ReadEvent::Rejected(line, r) => panic!("line {line}: {r}"),
                    ReadEvent::Progress(_) => {}
                },
            )
        }
        .expect("read");
        assert_eq!(pass.lines, lines);
        std::hint::black_box(actions);
        t.elapsed().as_secs_f64()
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<usize> = if cores > 1 { vec![1, cores] } else { vec![1] };
    let passes = [
        ("keys only (no position wanted)", 0u64),
        ("10% of positions wanted", 10),
        ("every position wanted", 1),
    ];
    let mut times = vec![Vec::new(); 1 + passes.len() * threads.len()];
    for _ in 0..rounds {
        times[0].push(decompress());
        for (i, (_, every)) in passes.iter().enumerate() {
            for (j, &n) in threads.iter().enumerate() {
                times[1 + i * threads.len() + j].push(pass(*every, n));
            }
        }
    }
    let floor = median(times[0].clone());

    println!(
        "{:<34} {:>7} {:>8} {:>12} {:>8} {:>10} {:>14}",
        "pass (median)", "threads", "seconds", "lines/s", "MB/s", "vs floor", "per 10^8 lines"
    );
    let row = |name: &str, threads: usize, secs: f64| {
        println!(
            "{name:<34} {threads:>7} {secs:>8.2} {:>12.0} {:>8.1} {:>9.2}x {:>12.0} s",
            lines as f64 / secs,
            json_bytes as f64 / 1e6 / secs,
            floor / secs,
            secs / lines as f64 * 1e8
        );
    };
    row("zstd decompression (the floor)", 1, floor);
    for (i, (name, _)) in passes.iter().enumerate() {
        for (j, &n) in threads.iter().enumerate() {
            row(name, n, median(times[1 + i * threads.len() + j].clone()));
        }
    }
    println!("peak RSS of this process: {:.0} MB", peak_rss_mb());
    end_to_end(dir.path(), rounds);
}

/// The chessbench binary the end-to-end part runs: CHESSBENCH_BIN when set
/// (the bench carried to another machine, bench/cores.py), else the one
/// Cargo built beside this bench.
fn bin() -> std::path::PathBuf {
    std::env::var_os("CHESSBENCH_BIN").map_or_else(
        || env!("CARGO_BIN_EXE_chessbench").into(),
        std::path::PathBuf::from,
    )
}

/// Runs `args`, returning (wall seconds, peak RSS in MB, stdout).
fn child(args: &[&str]) -> (f64, f64, String) {
    let t = Instant::now();
    let out = std::env::temp_dir().join(format!("cb-evals-bench-{}.out", std::process::id()));
    let c = Command::new(bin())
        .args(args)
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run chessbench");
    let pid = c.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, filled in by wait4 for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for the child spawned above, which nothing else reaps
    // (it is forgotten below).
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    std::mem::forget(c);
    let secs = t.elapsed().as_secs_f64();
    assert!(
        r == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "chessbench {args:?} failed"
    );
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    (secs, usage.ru_maxrss as f64 / 1024.0, text)
}

/// The evaluation file for `run`'s boards: every other board with legal
/// moves, four synthetic positions no board has before each. Returns its
/// lines and the boards it labels.
fn write_run_input(run: &Path, path: &Path) -> (u64, u64) {
    use arrow_array::{Array, StringArray, UInt8Array};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let mut rng = Rng(0xc0ff_ee00_d15e_a5e5);
    let file = std::fs::File::create(path).expect("create the input");
    let mut out = zstd::stream::write::Encoder::new(file, 3).expect("zstd");
    let (mut lines, mut labelled) = (0u64, 0u64);
    let dir = run.join("boards/split=train");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the run's boards")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut n = 0u64;
    for f in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&f).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let fens = batch
                .column_by_name("fen")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .expect("fen")
                .clone();
            let moves = batch
                .column_by_name("num_legal_moves")
                .and_then(|c| c.as_any().downcast_ref::<UInt8Array>())
                .expect("num_legal_moves")
                .clone();
            for i in 0..batch.num_rows() {
                n += 1;
                if moves.value(i) == 0 || n.is_multiple_of(2) {
                    continue;
                }
                for _ in 0..4 {
                    let pos = position(&mut rng);
                    let fen = Fen::from_position(&pos, EnPassantMode::Legal).to_string();
                    out.write_all(evals_line(&fen, &pos, &mut rng).as_bytes())
                        .unwrap();
                    lines += 1;
                }
                let fen = fens.value(i);
                let pos: Chess = Fen::from_ascii(fen.as_bytes())
                    .unwrap()
                    .into_position(CastlingMode::Standard)
                    .unwrap();
                out.write_all(evals_line(fen, &pos, &mut rng).as_bytes())
                    .unwrap();
                lines += 1;
                labelled += 1;
            }
        }
    }
    out.finish().expect("finish");
    (lines, labelled)
}

/// One line of the database's form for `pos` (FEN `fen`, of which its
/// four fields are kept): one search of one to five variations.
fn evals_line(fen: &str, pos: &Chess, rng: &mut Rng) -> String {
    let four: Vec<&str> = fen.split(' ').take(4).collect();
    let pvs: Vec<String> = (0..1 + rng.below(5))
        .map(|_| {
            format!(
                "{{\"cp\":{},\"line\":\"{}\"}}",
                rng.below(1001) as i64 - 500,
                line(pos, rng)
            )
        })
        .collect();
    format!(
        "{{\"fen\":\"{}\",\"evals\":[{{\"pvs\":[{}],\"knodes\":{},\"depth\":{}}}]}}\n",
        four.join(" "),
        pvs.join(","),
        rng.below(300_000),
        10 + rng.below(40)
    )
}

fn end_to_end(dir: &Path, rounds: usize) {
    let run = dir.join("run");
    let games = chessbench::testing::data_file("lichess_2022-06_head2500.pgn.zst");
    let run_s = run.to_str().unwrap();
    child(&[
        "ingest",
        run_s,
        games.to_str().unwrap(),
        "--split",
        "train",
        "--no-progress",
    ]);
    let path = dir.join("run-evals.jsonl.zst");
    let (lines, labelled) = write_run_input(&run, &path);
    let file = path.to_str().unwrap();
    let boards: u64 = {
        let (_, _, text) = child(&["stats", run_s, "--json"]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["splits"]["train"]["state_value"].as_u64().unwrap()
    };
    println!(
        "\nend to end: `chessbench annotate RUN --evals FILE`, RUN = 2,500 real Lichess games ({boards} boards), FILE = {lines} synthetic lines labelling {labelled} of them"
    );
    // Four passes: the boards' index and labels in four parts.
    let four = format!(
        "{}B",
        2 * boards * chessbench::annotate::lichess_evals::BYTES_PER_BOARD / 4
    );
    let settings: [(&str, Vec<&str>); 2] = [
        ("default memory limit", vec![]),
        (
            "a quarter of one pass's room",
            vec!["--memory-limit", &four],
        ),
    ];
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut floor = Vec::new();
    let mut results = vec![(Vec::new(), 0f64, 0u64, Vec::new()); settings.len()];
    for _ in 0..rounds {
        let t = Instant::now();
        read(
            &path,
            EvalsFormat::JsonLines,
            |_| false,
            |_, _, _, _| {},
            |line, r| panic!("line {line}: {r}"),
        )
        .expect("read");
        floor.push(t.elapsed().as_secs_f64());
        for (i, (_, extra)) in settings.iter().enumerate() {
            let mut args = vec![
                "annotate",
                run_s,
                "--evals",
                file,
                "--overwrite",
                "--no-progress",
                "--json",
            ];
            args.extend(extra.iter().copied());
            let (secs, rss, text) = child(&args);
            let v: serde_json::Value = serde_json::from_str(&text).expect("the summary");
            let got = v["splits"][0][1]["boards_labelled"].as_u64().unwrap();
            assert!(
                got >= labelled,
                "{got} boards labelled, {labelled} at least"
            );
            results[i].0.push(secs);
            results[i].1 = results[i].1.max(rss);
            results[i].2 = v["passes"].as_u64().unwrap();
            results[i].3.push((
                v["read_seconds"].as_f64().unwrap(),
                v["commit_seconds"].as_f64().unwrap(),
            ));
        }
    }
    let floor = median(floor);
    println!(
        "{:<28} {:>7} {:>8} {:>10} {:>10} {:>12} {:>16} {:>20} {:>14}",
        "annotate --evals (median)",
        "passes",
        "seconds",
        "reading s",
        "commits s",
        "lines/s",
        "boards labelled/s",
        "vs keys-only passes",
        "peak RSS"
    );
    for ((name, _), (times, rss, passes, phases)) in settings.iter().zip(results) {
        let secs = median(times.clone());
        let at = times.iter().position(|&t| t == secs).unwrap_or(0);
        println!(
            "{name:<28} {passes:>7} {secs:>8.2} {:>10.2} {:>10.2} {:>12.0} {:>16.0} {:>19.2}x {:>11.0} MB",
            phases[at].0,
            phases[at].1,
            (lines * passes) as f64 / secs,
            labelled as f64 / secs,
            floor * passes as f64 / secs,
            rss,
        );
    }
    println!("keys-only pass over FILE in this process (the floor): {floor:.2} s");
}
