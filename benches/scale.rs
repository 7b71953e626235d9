//! `make bench-scale`: every stage at N/10 and N generated games
//! (SCALE_GAMES=N, default 100,000), one process per stage, with its wall
//! time, records per second, peak RSS (from the OS: `wait4`'s rusage of the
//! child), bytes on disk, and the ratio of N to N/10.
//!
//! Games: `chessbench generate-games`'s (real Lichess openings continued by
//! seeded random play, written as a Lichess dump with clocks), generated in
//! this process and cached in `bench-data/scale/`.
//!
//! Value stages need values, and Stockfish cannot annotate 10^8 moves here:
//! the bench writes the ingested boards as ChessBench `.bag` files with
//! **synthetic** values (a deterministic pseudo-random win probability per
//! board and move, the best move the highest of them). They stand in for the
//! published bags; nothing presents them as chess truth. Importing them is
//! exactly what a user of the published data does. Action values are written
//! for every SCALE_AV_EVERY-th board (default 10), so that the bags of 10^6
//! games fit this machine's disk (all of them would be ~127 GB).
//!
//! Ingest is compared with pgn-reader's `parallel_validate` example (parse
//! and validate every move, nothing written) on the same generated
//! `.pgn.zst`, run right after it (the target: >= 0.8x). Beside it
//! the bench prints the most any ingest writing these tables could reach:
//! the reference's CPU seconds against them plus the CPU seconds of the
//! work it cannot skip, timed on the ingested boards (their legal moves in
//! action order; zstd of the FEN text and action indices; see
//! [`floor_child`]).
//!
//! Read-only stages (the reference, the loader, `stats`, `sql`) that take
//! under 10 s are run 3 times and the median run kept.
//!
//! Before each stage the bench calls `sync` (untimed), so a stage does not
//! pay for writing back what the one before it wrote, and drops the bench's
//! files from the page cache, so every stage reads its inputs from the disk
//! at both sizes (at 10^5 games they would otherwise be cached, at 10^6 they
//! cannot be, and the ratio would mix the two); it prints CPU seconds
//! (user + system) beside wall time, and both ratios: where the wall ratio
//! exceeds the CPU ratio, the stage waited on the disk.
//!
//! The machine's memory is touched once before anything is timed (see
//! `warm_machine`: on a VM whose host backs memory on first touch, the first
//! stage to need it would otherwise pay for it).
//!
//! Peak RSS is the child's `ru_maxrss`. Linux starts a child's from its
//! parent's high-water mark, so this bench does no heavy work in its own
//! process (the synthetic bags and the loader run in children); its own
//! peak, printed at the end, is the floor under every figure.
//!
//! Stages: ingest, bag import, the training loader (one epoch of state
//! values, no model; a child of this bench), a short CPU training run,
//! `stats`, `sql` (table_a1, dataset_stats, overlap, sampling), bag export.
//! Every stage runs with the default memory budget (2 GiB) unless
//! SCALE_MEMORY sets another. SCALE_STAGES (comma-separated names from
//! [`STAGES`], default all) runs a subset: ingest and its reference always
//! run; `loader`, `train` and `export` need `import`. At 10^7 games the
//! value bags (~1.3 TB at every board) and `sampling`'s CSV (~65 GB) do not
//! fit an ordinary disk, while `SCALE_STAGES=stats,table_a1,overlap` does.
//! SCALE_REPEAT=R (default 1) runs ingest R times at each size and reports
//! the run of median wall time (its CPU time beside it, the highest peak
//! RSS of the R): on the project's VMs one ingest's time swings by ~10%
//! from run to run, and so did the single-run ratio (9.2-12.8 at 10^6).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use arrow_array::{Array, RecordBatch, StringArray, UInt16Array, UInt64Array};
use chessbench::{
    bag::{BagWriter, coder},
    chess::{RecordSet, legal_actions_of, vocabulary},
    train::{
        data::{DataConfig, Loader},
        sampler::{Position, Sampling},
    },
};
use parquet::arrow::{
    ProjectionMask,
    arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder},
};
use shakmaty::{CastlingMode, Chess, fen::Fen};
use xxhash_rust::xxh3::xxh3_64;

mod support;

const BIN: &str = env!("CARGO_BIN_EXE_chessbench");

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// A finished child: wall seconds, CPU seconds (user + system), peak RSS
/// in bytes, its stdout.
struct Child {
    secs: f64,
    cpu: f64,
    rss: u64,
    stdout: String,
}

/// Runs `cmd` to completion and reads its peak RSS with `wait4`; a failed
/// stage is its error's first line.
fn measure(cmd: &mut Command, log: &Path) -> Result<Child, String> {
    let out = log.with_extension("out");
    let err = log.with_extension("err");
    // What earlier stages left to write back is flushed first, outside the
    // timing: a stage pays only for its own writes.
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    // Both sizes read their inputs from the disk: at 10^6 games they do not
    // fit the page cache, at 10^5 they would, and the ratio would compare a
    // cold stage with a warm one.
    evict(&root().join("bench-data/scale"));
    let t = Instant::now();
    let child = cmd
        .stdout(Stdio::from(fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(fs::File::create(&err).unwrap()))
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, filled in by wait4 for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for the child spawned above; `child` is not waited on
    // elsewhere (it is forgotten below so its Drop does not reap it again).
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    std::mem::forget(child);
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(r, pid, "wait4 {cmd:?}");
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !ok {
        let text = fs::read_to_string(&err).unwrap_or_default();
        let first = text
            .lines()
            .find(|l| l.starts_with("error"))
            .unwrap_or("failed");
        println!("  FAILED after {secs:.1} s: {first}");
        return Err(first.to_owned());
    }
    // Only the head of stdout (summaries): `sql sampling` writes gigabytes,
    // and reading them here would raise this process's peak, which the next
    // children inherit.
    let mut head = Vec::new();
    if let Ok(f) = fs::File::open(&out) {
        let _ = std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut head);
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Child {
        secs,
        cpu: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        rss: usage.ru_maxrss as u64 * 1024,
        stdout: String::from_utf8_lossy(&head).into_owned(),
    })
}

/// Drops every file under `dir` from the page cache (`POSIX_FADV_DONTNEED`;
/// the pages are clean after `sync`), so the next stage reads its inputs
/// from the disk as a user's first run on a large input does.
fn evict(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => evict(&path),
            Ok(t) if t.is_file() => {
                if let Ok(f) = fs::File::open(&path) {
                    use std::os::fd::AsRawFd;
                    // SAFETY: a valid descriptor of an open file; the advice
                    // changes no data.
                    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                }
            }
            _ => {}
        }
    }
}

/// Stages shorter than this are run [`REPEATS`] times (read-only ones only).
const SHORT_SECS: f64 = 10.0;
const REPEATS: usize = 3;

/// [`measure`] for a stage that only reads: one that takes under
/// [`SHORT_SECS`] is run [`REPEATS`] times and the run with the median wall
/// time kept (its CPU and RSS with it), since half a second on this shared
/// VM swings by half its length from run to run.
fn measure_read_only(mut cmd: impl FnMut() -> Command, log: &Path) -> Result<Child, String> {
    let first = measure(&mut cmd(), log)?;
    if first.secs >= SHORT_SECS {
        return Ok(first);
    }
    let mut runs = vec![first];
    for _ in 1..REPEATS {
        runs.push(measure(&mut cmd(), log)?);
    }
    Ok(median_run(runs))
}

/// The run of median wall time (the upper one of an even count).
fn median_run(mut runs: Vec<Child>) -> Child {
    runs.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    runs.swap_remove(runs.len() / 2)
}

fn du(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_file() {
        return meta.len();
    }
    fs::read_dir(path)
        .map(|d| d.flatten().map(|e| du(&e.path())).sum())
        .unwrap_or(0)
}

/// Writes `bytes` of fresh memory (every page touched), then frees it.
fn warm(bytes: usize) {
    std::hint::black_box(vec![1u8; bytes]);
}

/// This project's machines are virtual machines whose host backs guest
/// memory only when it is first touched (measured: 20 GB touched in 41.8 s
/// the first time, 6.4 s the second). Whichever stage first needs that much
/// memory (page cache included) would pay for it, and the 10x ratio would
/// measure the VM's history. So before timing anything, a child touches 3/4
/// of the available memory once (SCALE_WARM=0 skips it; not timed).
fn warm_machine() {
    if std::env::var("SCALE_WARM").as_deref() == Ok("0") {
        return;
    }
    let available = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024);
    if available == 0 {
        return;
    }
    let bytes = available / 4 * 3;
    let t = Instant::now();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["warm", &bytes.to_string()])
        .status()
        .unwrap();
    println!(
        "warm-up (not timed): {:.1} GB of memory touched once in {:.1} s{}",
        bytes as f64 / 1e9,
        t.elapsed().as_secs_f64(),
        if status.success() { "" } else { " (failed)" }
    );
}

/// Generated games, cached: `bench-data/scale/lichesslike_N.pgn.zst`
/// (`chessbench generate-games --games N --seed 1`, zstd level 3).
fn games(n: u64) -> PathBuf {
    let dir = root().join("bench-data/scale");
    fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("lichesslike_{n}.pgn.zst"));
    if out.is_file() {
        return out;
    }
    let tmp = out.with_extension("tmp");
    let t = Instant::now();
    let file = fs::File::create(&tmp).unwrap();
    let mut zstd = zstd::stream::write::Encoder::new(file, 3).unwrap();
    let openings = chessbench::chess::generate::Openings::builtin();
    chessbench::chess::generate::write_games(&mut zstd, &openings, 1, n).expect("generating games");
    zstd.finish().unwrap().sync_all().unwrap();
    fs::rename(&tmp, &out).unwrap();
    println!(
        "generated {n} games in {:.1} s: {} ({:.0} MB)",
        t.elapsed().as_secs_f64(),
        out.display(),
        du(&out) as f64 / 1e6
    );
    out
}

/// The Parquet part files of `table`'s `split` in an ingested run, in order.
fn part_files(run: &Path, table: &str, split: &str) -> Vec<PathBuf> {
    let mut f: Vec<PathBuf> = fs::read_dir(run.join(table).join(format!("split={split}")))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    f.sort();
    f
}

/// Batches of 64k rows of `columns` of a Parquet file.
fn read_columns(path: &Path, columns: &[&str]) -> ParquetRecordBatchReader {
    let b = ParquetRecordBatchReaderBuilder::try_new(fs::File::open(path).unwrap()).unwrap();
    let indices: Vec<usize> = columns
        .iter()
        .map(|c| {
            (0..b.parquet_schema().num_columns())
                .find(|&i| b.parquet_schema().column(i).name() == *c)
                .unwrap()
        })
        .collect();
    let mask = ProjectionMask::leaves(b.parquet_schema(), indices);
    b.with_projection(mask)
        .with_batch_size(64 * 1024)
        .build()
        .unwrap()
}

/// Column `i` of a batch as its concrete array type.
fn column<T: 'static>(batch: &RecordBatch, i: usize) -> &T {
    batch.column(i).as_any().downcast_ref::<T>().unwrap()
}

/// CPU seconds this thread has used.
fn thread_cpu() -> f64 {
    // SAFETY: clock_gettime fills a plain struct.
    let t = unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
        t
    };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// `scale floor RUN`: the CPU seconds of work that any ingest writing RUN's
/// tables adds to `parallel_validate`'s (parsing and playing every move),
/// however it is built, on one thread (the ingest and the reference both
/// use every core, so CPU seconds compare as their speeds do). Two parts,
/// timed apart on the run's distinct boards (both splits), from positions
/// built beforehand (parsing the FENs is not counted):
/// - listing every board's legal moves as sorted actions, what
///   `legal_moves` holds, with the fastest generator this project has
///   ([`legal_actions_of`], ingest's; half the time of shakmaty's
///   `legal_moves` mapped to actions and sorted, about that of shakmaty's
///   generation alone);
/// - zstd level 1, as the tables use it, over the FEN text and the 16-bit
///   action indices in 128 KiB pages (what the two big columns compress).
///
/// Nothing else is counted: no deduplication, no FEN rendering, no Parquet
/// encoding, no disk. Prints `boards moves movegen_cpu_s zstd_cpu_s`.
fn floor_child(run: &Path) {
    let mut zstd = zstd::bulk::Compressor::new(1).unwrap();
    let (mut boards, mut movegen, mut packing) = (0u64, 0.0, 0.0);
    let (mut text, mut actions) = (Vec::new(), Vec::<u16>::new());
    let mut compressed = 0usize;
    let mut moves = 0u64;
    for split in ["train", "test"] {
        for file in part_files(run, "boards", split) {
            for batch in read_columns(&file, &["fen"]) {
                let batch = batch.unwrap();
                let fens = column::<StringArray>(&batch, 0);
                text.clear();
                let positions: Vec<Chess> = (0..fens.len())
                    .map(|i| {
                        text.extend_from_slice(fens.value(i).as_bytes());
                        let fen: Fen = fens.value(i).parse().unwrap();
                        fen.into_position(CastlingMode::Standard).unwrap()
                    })
                    .collect();
                actions.clear();
                let t = thread_cpu();
                for pos in &positions {
                    std::hint::black_box(legal_actions_of(pos, &mut actions));
                }
                movegen += thread_cpu() - t;
                boards += positions.len() as u64;
                moves += actions.len() as u64;
                let bytes: Vec<u8> = actions.iter().flat_map(|a| a.to_le_bytes()).collect();
                let t = thread_cpu();
                for page in text.chunks(128 << 10).chain(bytes.chunks(128 << 10)) {
                    compressed += zstd.compress(page).unwrap().len();
                }
                packing += thread_cpu() - t;
            }
        }
    }
    std::hint::black_box(compressed);
    println!("{boards} {moves} {movegen} {packing}");
}

/// A synthetic win probability in [0, 1) (not chess: a hash).
fn synthetic(key: &[u8]) -> f64 {
    (xxh3_64(key) >> 11) as f64 / (1u64 << 53) as f64
}

/// Writes the `train` split of an ingested run as the three ChessBench bags
/// with synthetic values; action values for every `av_every`-th board.
/// Returns the records written per set.
fn synth_bags(run: &Path, out: &Path, av_every: u64) -> [u64; 3] {
    fs::create_dir_all(out).unwrap();
    let vocab = vocabulary();
    let mut sv = BagWriter::create(&out.join("state_value_data.bag")).unwrap();
    let mut bc = BagWriter::create(&out.join("behavioral_cloning_data.bag")).unwrap();
    let mut av = BagWriter::create(&out.join("action_value_data.bag")).unwrap();
    let mut counts = [0u64; 3];
    let mut record = Vec::with_capacity(256);
    let files = |table: &str| part_files(run, table, "train");
    // legal_moves part N covers the same board ids as boards part N.
    for (boards, moves) in files("boards").iter().zip(files("legal_moves")) {
        let mut fens: Vec<String> = Vec::new();
        let mut first = None;
        for batch in read_columns(boards, &["board_id", "fen"]) {
            let batch = batch.unwrap();
            let ids = column::<UInt64Array>(&batch, 0);
            let f = column::<StringArray>(&batch, 1);
            first.get_or_insert(ids.value(0));
            fens.extend((0..batch.num_rows()).map(|i| f.value(i).to_owned()));
        }
        let first = first.unwrap_or(0);
        for fen in &fens {
            coder::encode_state_value(&mut record, fen, synthetic(fen.as_bytes()));
            sv.write(&record).unwrap();
            counts[0] += 1;
            record.clear();
        }
        // Legal moves, grouped by board id (sorted).
        let mut flush = |id: u64, actions: &mut Vec<u16>, counts: &mut [u64; 3]| {
            if actions.is_empty() {
                return;
            }
            let fen = &fens[(id - first) as usize];
            let score = |a: u16| {
                let uci = vocab.uci(a).unwrap();
                synthetic(format!("{fen} {uci}").as_bytes())
            };
            let best = actions
                .iter()
                .copied()
                .max_by(|&a, &b| score(a).total_cmp(&score(b)).then(b.cmp(&a)))
                .unwrap();
            coder::encode_behavioral_cloning(&mut record, fen, vocab.uci(best).unwrap());
            bc.write(&record).unwrap();
            record.clear();
            counts[1] += 1;
            if id.is_multiple_of(av_every) {
                for &a in actions.iter() {
                    coder::encode_action_value(&mut record, fen, vocab.uci(a).unwrap(), score(a));
                    av.write(&record).unwrap();
                    record.clear();
                    counts[2] += 1;
                }
            }
            actions.clear();
        };
        let (mut current, mut actions) = (u64::MAX, Vec::new());
        for batch in read_columns(&moves, &["board_id", "action"]) {
            let batch = batch.unwrap();
            let ids = column::<UInt64Array>(&batch, 0);
            let a = column::<UInt16Array>(&batch, 1);
            for i in 0..batch.num_rows() {
                if ids.value(i) != current {
                    flush(current, &mut actions, &mut counts);
                    current = ids.value(i);
                }
                actions.push(a.value(i));
            }
        }
        flush(current, &mut actions, &mut counts);
    }
    sv.finish().unwrap();
    bc.finish().unwrap();
    av.finish().unwrap();
    counts
}

/// `scale loader RUN MEMORY`: one epoch of the state-value loader of RUN's
/// imported split (a child of the bench, so its RSS is its own).
fn loader_child(run: &Path, memory: u64) {
    let config = DataConfig {
        run: run.to_owned(),
        split: "valued".into(),
        policy: RecordSet::StateValue,
        buckets: 128,
        batch_size: 1024,
        sampling: Sampling::Uniform,
        seed: 1,
        window: 16,
        workers: 2,
        memory_limit: memory,
        label_source: Default::default(),
        shard: chessbench::options::Shard::ALL,
    };
    let mut loader = Loader::new(config, Position::default()).expect("open the run");
    let batches = loader.records().div_ceil(1024);
    for _ in 0..batches {
        loader.next_batch().expect("batch");
    }
    println!("{} {}", batches * 1024, loader.peak_bytes());
}

struct Row {
    stage: &'static str,
    games: u64,
    secs: f64,
    cpu: f64,
    records: u64,
    rss: u64,
    disk: u64,
    failed: Option<String>,
}

impl Row {
    /// A stage's row: its measurement, or its failure.
    fn of(
        stage: &'static str,
        games: u64,
        c: &Result<Child, String>,
        records: u64,
        disk: u64,
    ) -> Row {
        match c {
            Ok(c) => Row {
                stage,
                games,
                secs: c.secs,
                cpu: c.cpu,
                records,
                rss: c.rss,
                disk,
                failed: None,
            },
            Err(e) => Row {
                stage,
                games,
                secs: f64::NAN,
                cpu: f64::NAN,
                records: 0,
                rss: 0,
                disk: 0,
                failed: Some(e.clone()),
            },
        }
    }
}

/// Stages SCALE_STAGES may name, in the order they run.
const STAGES: [&str; 9] = [
    "import",
    "loader",
    "train",
    "stats",
    "table_a1",
    "dataset_stats",
    "overlap",
    "sampling",
    "export",
];

/// The stages to run (besides ingest): SCALE_STAGES, or all of them.
fn stages() -> Vec<&'static str> {
    let Ok(list) = std::env::var("SCALE_STAGES") else {
        return STAGES.to_vec();
    };
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name == "ingest" {
            continue;
        }
        let Some(&stage) = STAGES.iter().find(|&&s| s == name) else {
            panic!("SCALE_STAGES: unknown stage {name:?}; expected ingest or one of {STAGES:?}");
        };
        chosen.push(stage);
    }
    for needy in ["loader", "train", "export"] {
        assert!(
            !chosen.contains(&needy) || chosen.contains(&"import"),
            "SCALE_STAGES: {needy} reads the imported values; add import"
        );
    }
    chosen
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("loader") {
        loader_child(Path::new(&args[2]), args[3].parse().unwrap());
        return;
    }
    if args.get(1).map(String::as_str) == Some("warm") {
        warm(args[2].parse().unwrap());
        return;
    }
    if args.get(1).map(String::as_str) == Some("floor") {
        floor_child(Path::new(&args[2]));
        return;
    }
    if args.get(1).map(String::as_str) == Some("synth") {
        let av_every = args[4].parse().unwrap();
        let counts = synth_bags(Path::new(&args[2]), Path::new(&args[3]), av_every);
        println!("{} {} {}", counts[0], counts[1], counts[2]);
        return;
    }
    let n = env_u64("SCALE_GAMES", 100_000);
    let av_every = env_u64("SCALE_AV_EVERY", 10).max(1);
    let memory = std::env::var("SCALE_MEMORY").unwrap_or_else(|_| "2GiB".into());
    let memory_bytes: u64 = memory
        .parse::<chessbench::options::ByteSize>()
        .expect("SCALE_MEMORY")
        .0;
    let repeat = env_u64("SCALE_REPEAT", 1).max(1);
    let stages = stages();
    let on = |stage: &str| stages.contains(&stage);
    let sizes = [n / 10, n];
    let mut rows: Vec<Row> = Vec::new();
    let mut floors: Vec<Floor> = Vec::new();
    let work = root().join("bench-data/scale/work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).unwrap();
    println!(
        "bench-scale: {} and {} generated games, memory budget {memory}, action values of every {av_every}th board (synthetic values); stages: ingest, {}",
        sizes[0],
        sizes[1],
        stages.join(", ")
    );
    println!(
        "machine: {}; chessbench {}",
        support::machine(),
        env!("CARGO_PKG_VERSION")
    );
    let (pv, pv_version) = support::build_parallel_validate(&target_dir().join("bench"));
    warm_machine();
    for &g in &sizes {
        let input = games(g);
        let dir = work.join(g.to_string());
        fs::create_dir_all(&dir).unwrap();
        let run = dir.join("run");
        let log = |name: &str| dir.join(name);
        // Ingest, `repeat` times into a fresh run; the run of median time
        // stands (the last run's tables are the ones the stages below read).
        let mut tries: Vec<Child> = Vec::new();
        for i in 1..=repeat {
            let _ = fs::remove_dir_all(&run);
            let name = if repeat > 1 {
                format!("ingest-{i}")
            } else {
                "ingest".to_owned()
            };
            tries.push(
                measure(
                    Command::new(BIN)
                        .args([
                            "ingest",
                            "--json",
                            "--no-progress",
                            "--test-fraction",
                            "0.05",
                        ])
                        .arg(&run)
                        .arg(&input)
                        .args(["--memory-limit", &memory]),
                    &log(&name),
                )
                .expect("ingest"),
            );
        }
        let peak = tries.iter().map(|c| c.rss).max().unwrap_or(0);
        if repeat > 1 {
            let mut times: Vec<f64> = tries.iter().map(|c| c.secs).collect();
            times.sort_by(f64::total_cmp);
            let times: Vec<String> = times.iter().map(|s| format!("{s:.2}")).collect();
            println!(
                "  {g} games: ingest {} s (sorted; the median stands)",
                times.join(", ")
            );
        }
        let mut c = median_run(tries);
        c.rss = peak;
        let s: serde_json::Value = serde_json::from_str(&c.stdout).unwrap();
        let boards: u64 = s["splits"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v["state_value"].as_u64().unwrap())
            .sum();
        rows.push(Row {
            stage: "ingest (games)",
            games: g,
            secs: c.secs,
            cpu: c.cpu,
            records: s["games_read"].as_u64().unwrap(),
            rss: c.rss,
            disk: du(&run),
            failed: None,
        });
        println!(
            "  {g} games: ingest {:.1} s, {boards} boards, peak RSS {:.0} MB; phases {}",
            c.secs,
            c.rss as f64 / 1e6,
            s["phases"]
        );
        // The reference: pgn-reader's parallel_validate on the same file.
        let c = measure_read_only(
            || {
                let mut c = Command::new(&pv);
                c.arg(&input);
                c
            },
            &log("parallel_validate"),
        )
        .expect("parallel_validate");
        rows.push(Row {
            stage: "parallel_validate (reference)",
            games: g,
            secs: c.secs,
            cpu: c.cpu,
            records: s["games_read"].as_u64().unwrap(),
            rss: c.rss,
            disk: 0,
            failed: None,
        });
        // What any ingest writing these tables adds to the reference's work
        // (a child: see floor_child).
        let f = measure(
            Command::new(std::env::current_exe().unwrap())
                .arg("floor")
                .arg(&run),
            &log("floor"),
        )
        .expect("the ingest floor");
        let v: Vec<f64> = f
            .stdout
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        floors.push(Floor {
            games: g,
            reference_cpu: c.cpu,
            boards: v[0] as u64,
            moves: v[1] as u64,
            movegen: v[2],
            zstd: v[3],
        });
        let mut counts = vec![0u64; 3];
        if on("import") {
            // Synthetic bags (not a stage: the stand-in for the published data).
            let bags = dir.join("bags");
            let t = Instant::now();
            // In a child: a child's peak RSS starts from its parent's (Linux
            // carries the parent's high-water mark across fork and exec), so
            // this process stays small and does no heavy work itself.
            let c = measure(
                Command::new(std::env::current_exe().unwrap())
                    .arg("synth")
                    .arg(&run)
                    .arg(&bags)
                    .arg(av_every.to_string()),
                &log("synth"),
            )
            .expect("writing the synthetic bags");
            counts = c
                .stdout
                .split_whitespace()
                .map(|n| n.parse().unwrap())
                .collect();
            println!(
                "  wrote synthetic bags in {:.1} s: {} state_value, {} behavioral_cloning, {} action_value records ({:.0} MB)",
                t.elapsed().as_secs_f64(),
                counts[0],
                counts[1],
                counts[2],
                du(&bags) as f64 / 1e6
            );
            // Import, into split `valued` of the same run (the SQL stages then
            // see ingested splits and values together).
            let before = du(&run);
            let c = measure(
                Command::new(BIN)
                    .args(["bag", "import", "--no-progress", "--split", "valued"])
                    .arg(&run)
                    .arg(&bags)
                    .args(["--memory-limit", &memory]),
                &log("import"),
            );
            let disk = du(&run).saturating_sub(before);
            rows.push(Row::of("bag import", g, &c, counts.iter().sum(), disk));
            // The bags are the bulk of the disk (19 GB at 10^6 games) and are
            // read only by the import: the export below needs the room.
            let _ = fs::remove_dir_all(&bags);
        }
        if on("loader") {
            // The loader: one epoch of state values (a child of this bench).
            let c = measure_read_only(
                || {
                    let mut c = Command::new(std::env::current_exe().unwrap());
                    c.arg("loader").arg(&run).arg(memory_bytes.to_string());
                    c
                },
                &log("loader"),
            );
            let served: u64 = c.as_ref().map_or(0, |c| {
                c.stdout
                    .split_whitespace()
                    .next()
                    .map_or(0, |n| n.parse().unwrap_or(0))
            });
            rows.push(Row::of("loader (1 SV epoch)", g, &c, served, 0));
        }
        if on("train") {
            // A short CPU training run on the imported action values.
            let c = measure(
                Command::new(BIN)
                    .args(["train", "--no-progress"])
                    .arg(&run)
                    .args([
                        "--split",
                        "valued",
                        "--eval-split",
                        "",
                        "--steps",
                        "20",
                        "--batch-size",
                        "256",
                        "--buckets",
                        "32",
                        "--memory-limit",
                        &memory,
                    ]),
                &log("train"),
            );
            rows.push(Row::of("train (20 steps)", g, &c, 20 * 256, 0));
        }
        // Table A1 and the SQL layer on the ingested run.
        if on("stats") {
            let c = measure_read_only(
                || {
                    let mut c = Command::new(BIN);
                    c.arg("stats").arg(&run);
                    c
                },
                &log("stats"),
            );
            rows.push(Row::of("stats", g, &c, boards, 0));
        }
        for query in ["table_a1", "dataset_stats", "overlap", "sampling"] {
            if !on(query) {
                continue;
            }
            let c = measure_read_only(
                || {
                    let mut c = Command::new(BIN);
                    c.arg("sql").arg(&run).args([
                        query,
                        "--quiet",
                        "--format",
                        "csv",
                        "--memory-limit",
                        &memory,
                    ]);
                    c
                },
                &log(query),
            );
            let stage = match query {
                "table_a1" => "sql table_a1",
                "dataset_stats" => "sql dataset_stats",
                "overlap" => "sql overlap",
                _ => "sql sampling",
            };
            rows.push(Row::of(stage, g, &c, boards, 0));
        }
        if on("export") {
            // Export the imported split back to bags.
            let exported = dir.join("exported");
            let c = measure(
                Command::new(BIN)
                    .args(["bag", "export", "--no-progress", "--split", "valued"])
                    .arg(&run)
                    .arg("--out")
                    .arg(&exported)
                    .args(["--memory-limit", &memory]),
                &log("export"),
            );
            let disk = du(&exported);
            rows.push(Row::of("bag export", g, &c, counts.iter().sum(), disk));
            // The next size needs the room.
            let _ = fs::remove_dir_all(&exported);
        }
    }
    println!(
        "\n| stage | games | wall s | CPU s | records/s | peak RSS MB | disk MB | time ratio {}x games | CPU ratio |",
        sizes[1] / sizes[0].max(1)
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        if let Some(e) = &r.failed {
            println!("| {} | {} | failed: {e} | | | | | | |", r.stage, r.games);
            continue;
        }
        let before = rows.iter().find(|x| {
            x.stage == r.stage && x.games == sizes[0] && r.games == sizes[1] && x.failed.is_none()
        });
        let ratio = |now: f64, then: f64| format!("{:.1}", now / then.max(1e-9));
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {:.1} | {} | {} |",
            r.stage,
            r.games,
            r.secs,
            r.cpu,
            r.records as f64 / r.secs.max(1e-9),
            r.rss as f64 / 1e6,
            r.disk as f64 / 1e6,
            before.map_or(String::new(), |b| ratio(r.secs, b.secs)),
            before.map_or(String::new(), |b| ratio(r.cpu, b.cpu)),
        );
    }
    // SAFETY: getrusage fills a plain struct for this process.
    let own = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_maxrss as f64 * 1024.0 / 1e6
    };
    println!("\n(the bench's own peak RSS, a floor under the RSS column: {own:.0} MB)");
    println!(
        "\ningest speed vs {pv_version} examples/parallel_validate on the same .pgn.zst (target >= 0.8x):"
    );
    for &g in &sizes {
        let secs = |stage: &str| {
            rows.iter()
                .find(|r| r.stage == stage && r.games == g)
                .map(|r| r.secs)
        };
        if let (Some(ours), Some(reference)) = (
            secs("ingest (games)"),
            secs("parallel_validate (reference)"),
        ) {
            println!("- {g} games: {:.2}x", reference / ours);
        }
    }
    println!(
        "\nthe most any ingest writing these tables could reach: parallel_validate's CPU seconds against them plus the work it cannot skip (one thread, see floor_child):"
    );
    for f in &floors {
        let bound = |extra: f64| f.reference_cpu / (f.reference_cpu + extra);
        println!(
            "- {} games: parallel_validate {:.2} CPU s; legal moves of {} boards ({} moves) {:.2} CPU s; zstd of their FEN text and action indices {:.2} CPU s: at most {:.2}x ({:.2}x with the compression)",
            f.games,
            f.reference_cpu,
            f.boards,
            f.moves,
            f.movegen,
            f.zstd,
            bound(f.movegen),
            bound(f.movegen + f.zstd),
        );
    }
}

/// The ingest floor of one size (see [`floor_child`]).
struct Floor {
    games: u64,
    reference_cpu: f64,
    boards: u64,
    moves: u64,
    movegen: f64,
    zstd: f64,
}
