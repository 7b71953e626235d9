//! The `chessbench` command line: parses arguments into the library's raw
//! options, lets the library validate them, runs the stage and reports.

use std::{
    io::{self, Write},
    path::PathBuf,
    process::ExitCode,
};

use anyhow::{Context, Result};
use chessbench::{
    annotate::{
        self,
        config::{AnnotateOptions, Mode},
        plan,
    },
    bag::{self, RecordSet},
    ingest::{
        self,
        config::{IngestOptions, RawInput},
        group,
    },
    sql::{self, Format},
    stats,
    train::{
        config::{DeviceKind, Precision, TrainOptions},
        data::Policy,
        loss::Loss,
        model_config::{ModelShape, Preset},
        run::{self as train_run, RunOptions},
        sampler::Sampling,
        throughput::{StepBench, bench_steps},
    },
};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "chessbench",
    version,
    about = "Rebuild the ChessBench data pipeline: Lichess PGN dumps to deduplicated Parquet tables, Table A1 statistics.",
    long_about = "chessbench rebuilds the data pipeline behind \"Grandmaster-Level Chess Without Search\" \
(Ruoss et al., NeurIPS 2024). `ingest` turns Lichess PGN dumps into Parquet tables of games, distinct \
boards and their legal moves (the state-value, behavioural-cloning and action-value record sets); \
`stats` prints their Table A1 counts."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Turn PGN dumps into games, boards, legal_moves and rejects tables.
    #[command(
        long_about = "Read Lichess PGN dumps (.pgn, .pgn.zst or '-' for standard input; zstd is \
detected from the data), keep Standard games from the standard start with at least one move, play every \
move and write, per split, hive-partitioned Parquet tables into RUN_DIR:\n\n\
  games/split=S/        one row per accepted game\n\
  boards/split=S/       one row per distinct board (full FEN): the state-value records\n\
  legal_moves/split=S/  one row per (board, legal move): the action-value records\n\
  rejects/split=S/      one row per skipped or malformed game, with reason and position\n\n\
Everything is staged and committed atomically with manifest.json; an interrupted ingest leaves no \
partial table. Board deduplication spills to disk past --memory-limit.\n\n\
Stream a month from the web without storing it:\n\
  curl -sL https://database.lichess.org/standard/lichess_db_standard_rated_2023-01.pgn.zst \\\n\
    | chessbench ingest - --out runs/2023-01 --sample-games 10000 --seed 1"
    )]
    Ingest(Box<IngestArgs>),
    /// Stockfish state values and action values for every board of a run.
    #[command(
        long_about = "Annotate the boards of a run with a UCI engine (default: Stockfish), as \
the paper's oracle: per board one search for the state value and, per legal move, one search restricted \
to that move with `searchmoves` (the action value); win probability from the centipawn score with \
Lichess's formula (mates: 1.0 / 0.0); checkmate 0.0 and stalemate 0.5 without a search. Writes, per \
split:\n\n\
  state_values/split=S/   one row per board: value, raw cp/mate, depth, nodes, time, best action\n\
  action_values/split=S/  one row per (board, legal move)\n\
  failures/split=S/       boards the engine could not annotate after --max-attempts tries\n\n\
Work is committed per chunk of boards, so a killed run resumes where it stopped when started \
again with the same settings. For a cluster, --shard I/N (or a Slurm job array, or a Kubernetes \
Indexed Job with CHESSBENCH_SHARD_COUNT) annotates a deterministic slice of the chunks; any number \
of shards can run on one run directory at once.\n\n\
Cost first: `chessbench annotate RUN --plan` counts the searches and CPU-days."
    )]
    Annotate(Box<AnnotateArgs>),
    /// Print Table A1 (record counts per split, bytes on disk, test-in-train overlap).
    Stats(StatsArgs),
    /// Query a run's tables in SQL (embedded DuckDB, views preloaded).
    #[command(
        long_about = "Run DuckDB SQL against a run directory. The views of sql/views.sql are \
preloaded: games, rejects, boards, legal_moves, state_values, action_values, failures (all splits, \
with a `split` column) and ChessBench's record sets sv_records, bc_records and av_records.\n\n\
QUERY is a SQL file or one of the built-in files of sql/ by name: table_a1 (Table A1 per split, \
the numbers `chessbench stats` prints), dataset_stats (Figure A1 histograms, phases, Elo and time \
controls, mate scores, failures), overlap (test boards also in train), sampling (uniform vs \
weighted sampler weights). Each query in a file prints as its own result, named by a \
`-- @name NAME` comment.\n\n\
Examples:\n\
  chessbench sql runs/demo table_a1\n\
  chessbench sql runs/demo -e \"SELECT split, avg(win_prob) FROM sv_records GROUP BY ALL\"\n\
  chessbench sql runs/demo sampling --only sampling_weights --format csv > weights.csv\n\n\
The same SQL runs in the DuckDB CLI or Python duckdb (DuckDB 1.5):\n\
  duckdb -c \"SET VARIABLE run_dir = 'runs/demo'; .read sql/views.sql; .read sql/table_a1.sql\""
    )]
    Sql(SqlArgs),
    /// Export or import ChessBench .bag files (state_value, behavioral_cloning, action_value).
    #[command(subcommand)]
    Bag(BagCommand),
    /// Train a predictor (action value, state value or behavioural cloning) on a run's tables.
    #[command(
        long_about = "Train one of the paper's predictors with burn on the annotated tables of a run: \
a decoder-only transformer reading the 77 FEN tokens (+ the action) and predicting the value bucket \
(action value, state value) or the best action (behavioural cloning). Adam with global-norm \
clipping, an EMA of the parameters (evaluated), HL-Gauss / cross-entropy / L2 losses.\n\n\
Writes RUN/train/NAME/: config.json, metrics.csv (loss, grad norm, lr, samples/s per log step), \
eval.csv (eval-split log-loss next to the predict-the-marginal baseline), checkpoints/step-N/ \
(model, EMA, optimiser, sampler position) and summary.json. Started again, it resumes from the newest \
checkpoint and continues the identical trajectory; --steps can be raised to train longer.\n\n\
Recipes live in the [train] table of a pipeline file (pipeline/demo.toml: tiny model, minutes on 2 \
cores; pipeline/ablation.toml: the paper's 9M ablation; pipeline/paper.toml: the main setup); \
options given here override the file.\n\n\
  chessbench train --config pipeline/demo.toml\n\
  chessbench train --run runs/demo --policy behavioral-cloning --steps 500 --batch-size 256\n\
  chessbench train --config pipeline/ablation.toml --device cuda   # needs --features cuda"
    )]
    Train(Box<TrainArgs>),
    /// Time the training step alone (random batches, no data loader): samples/s and model FLOP/s.
    #[command(
        long_about = "Time the full training step (forward, loss, backward, global-norm clip, \
Adam, EMA) on random token batches of the real shape, without the data loader, and print \
samples/s and model FLOP/s. --profile synchronises after each phase and prints where the time \
goes. bench/torch_reference.py times the same step in PyTorch; `make bench-train` compares them.\n\n\
  chessbench bench-step --model 9m --buckets 32 --batch-size 1024 --device cuda --steps 50"
    )]
    BenchStep(BenchStepArgs),
    /// Score a checkpoint: static metrics, Lichess puzzles, games and Elo; write a report.
    #[command(
        long_about = "Evaluate a trained checkpoint as the paper does and write RUN/report/ \
(or --out):\n\n\
  static metrics on a split's annotated boards: action accuracy, Kendall tau-b (per board, averaged), \
log-loss, L2 win-probability error, entropy, calibration; optionally Stockfish itself re-searching \
every move (--oracle stockfish:nodes=N: at the labels' own node limit it must score 1 and 1)\n\
  puzzles (Lichess CSV PuzzleId,FEN,Moves,Rating or ChessBench's PGN,Moves,Rating): accuracy overall \
and per 200-point rating bucket; --puzzle-engine scores Stockfish on the same puzzles\n\
  games against --opponent specs (stockfish:nodes=N, stockfish:skill=S[,depth=D], \
checkpoint:PATH) from ECO openings with colours swapped, PGN, and a Bradley-Terry Elo fit with 95% \
intervals anchored to --anchor\n\n\
Files: eval.json, eval.md, calibration.csv, puzzles.csv, puzzles_by_rating.csv, games.pgn, games.csv, \
elo.csv. `make eval` also draws the plots (notebooks/eval.ipynb).\n\n\
  chessbench eval --config pipeline/demo.toml\n\
  chessbench eval runs/demo --checkpoint runs/demo/train/av_tiny --puzzles puzzles.csv \\\n\
      --opponent stockfish:skill=0 --opponent stockfish:nodes=100 --only games"
    )]
    Eval(Box<EvalArgs>),
    /// Play a checkpoint as a UCI engine on stdin/stdout.
    #[command(
        long_about = "Speak UCI on standard input/output with a trained model as the engine: \
uci, isready, ucinewgame, position startpos|fen ... [moves ...], go (limits and clocks are accepted and \
ignored: one forward pass per move), stop, quit. Malformed commands and illegal moves are answered \
with `info string error: ...`; the engine keeps running. For GUIs, cutechess-cli and lichess-bot:\n\n\
  cutechess-cli -engine cmd=chessbench arg=uci arg=--checkpoint arg=runs/demo/train/av_tiny ..."
    )]
    Uci(UciArgs),
}

#[derive(Args)]
struct BenchStepArgs {
    #[arg(long, value_enum, default_value = "tiny")]
    model: PresetArg,
    #[arg(long, value_enum, default_value = "action-value")]
    policy: PolicyArg,
    #[arg(long, default_value_t = 128)]
    buckets: usize,
    #[arg(long, value_enum, default_value = "hl-gauss")]
    loss: LossArg,
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    /// Timed steps.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
    /// bf16 (CUDA only).
    #[arg(long)]
    bf16: bool,
    /// Synchronise after each phase and report seconds per phase.
    #[arg(long)]
    profile: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct TrainArgs {
    /// Pipeline file with a [train] table (paths in it are relative to the file).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Run directory with annotated tables (overrides the file's `run`).
    #[arg(long, value_name = "RUN_DIR")]
    run: Option<PathBuf>,
    /// Name of the training run: outputs go to RUN/train/NAME [default: POLICY_MODEL, e.g. av_tiny].
    #[arg(long)]
    name: Option<String>,
    /// Split to train on [default: train].
    #[arg(long)]
    split: Option<String>,
    /// Split to evaluate on; "" for none [default: test].
    #[arg(long)]
    eval_split: Option<String>,
    /// Predictor [default: action-value].
    #[arg(long, value_enum)]
    policy: Option<PolicyArg>,
    /// Model size [default: tiny].
    #[arg(long, value_enum)]
    model: Option<PresetArg>,
    /// K value buckets [default: 128].
    #[arg(long)]
    buckets: Option<usize>,
    /// Loss [default: hl-gauss for value predictors, cross-entropy for behavioural cloning].
    #[arg(long, value_enum)]
    loss: Option<LossArg>,
    /// Records per step [default: 1024].
    #[arg(long)]
    batch_size: Option<usize>,
    /// Adam learning rate [default: 1e-4].
    #[arg(long)]
    learning_rate: Option<f64>,
    /// Total optimiser steps [default: 1000]; raise it to continue a finished run.
    #[arg(long)]
    steps: Option<u64>,
    /// Record sampler [default: uniform].
    #[arg(long, value_enum)]
    sampling: Option<SamplingArg>,
    /// Seed of the initialisation and the sampler [default: 0].
    #[arg(long)]
    seed: Option<u64>,
    /// Loader threads [default: 1].
    #[arg(long)]
    workers: Option<usize>,
    /// Log a metrics row every N steps [default: 10].
    #[arg(long, value_name = "N")]
    log_every: Option<u64>,
    /// Checkpoint every N steps (and at the end) [default: 1000].
    #[arg(long, value_name = "N")]
    checkpoint_every: Option<u64>,
    /// Evaluate the EMA every N steps; 0: at the end only [default: 0].
    #[arg(long, value_name = "N")]
    eval_every: Option<u64>,
    /// Records of the eval split per evaluation [default: 16384].
    #[arg(long, value_name = "N")]
    eval_records: Option<usize>,
    /// Backend [default: cpu].
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// bf16 parameters and activations (CUDA only) [default: f32].
    #[arg(long)]
    bf16: bool,
    /// Discard the run's checkpoints and logs and start from step 0.
    #[arg(long)]
    restart: bool,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Test hook: abort the process right after logging step N (simulates a crash).
    #[arg(long, hide = true, value_name = "N")]
    abort_after_step: Option<u64>,
}

#[derive(Clone, Copy, ValueEnum)]
enum PolicyArg {
    ActionValue,
    StateValue,
    BehavioralCloning,
}

#[derive(Clone, Copy, ValueEnum)]
enum PresetArg {
    Tiny,
    #[value(name = "9m")]
    M9,
    #[value(name = "136m")]
    M136,
    #[value(name = "270m")]
    M270,
}

#[derive(Clone, Copy, ValueEnum)]
enum LossArg {
    HlGauss,
    CrossEntropy,
    L2,
}

#[derive(Clone, Copy, ValueEnum)]
enum SamplingArg {
    Uniform,
    Weighted,
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    Cpu,
    Cuda,
}

#[derive(Args)]
struct SqlArgs {
    /// Run directory.
    #[arg(value_name = "RUN_DIR")]
    run: PathBuf,
    /// A SQL file, or a built-in query: table_a1, dataset_stats, overlap, sampling, views.
    #[arg(
        value_name = "QUERY",
        required_unless_present = "execute",
        conflicts_with = "execute"
    )]
    query: Option<String>,
    /// Run this SQL instead of a file.
    #[arg(short = 'e', long = "execute", value_name = "SQL")]
    execute: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
    /// Print only the result of the query named NAME (`-- @name NAME`).
    #[arg(long, value_name = "NAME")]
    only: Option<String>,
    /// Rows shown per result in table and markdown output (0: all).
    #[arg(long, value_name = "N", default_value_t = 40)]
    max_rows: usize,
    /// Set a DuckDB variable before the query (getvariable('NAME')), e.g.
    /// --var test_split=holdout. Repeatable.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    /// No notes on standard error (e.g. about partially annotated splits).
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum OutputFormat {
    Table,
    Csv,
    Json,
    Markdown,
}

#[derive(Subcommand)]
enum BagCommand {
    /// Write a split's record sets as ChessBench .bag files.
    #[command(
        long_about = "Write the annotated records of one split as the three ChessBench files \
state_value_data.bag (fen, win_prob), behavioral_cloning_data.bag (fen, best move) and \
action_value_data.bag (fen, move, win_prob), with searchless_chess's record encoding (Apache Beam \
TupleCoder of StrUtf8Coder / FloatCoder) and bagz.py's file layout, so its data loaders read them. \
Sets larger than --records-per-shard are sharded as SET-00000-of-0000N_data.bag (read them as \
SET@N_data.bag). Files appear under their final names only when complete."
    )]
    Export(BagExportArgs),
    /// Read ChessBench .bag files into a split of a run directory.
    #[command(
        long_about = "Import published ChessBench .bag files (or ones exported here) into a run \
directory's Parquet layout: boards (with their legal moves), state_values, action_values, with \
best actions from behavioral_cloning records. Give a directory holding the ChessBench file names \
(e.g. the downloaded data/test/), or files per set; SET@N_data.bag stands for N shards. Every FEN is \
parsed and every move checked to be legal. Columns the .bag files do not carry (games, occurrence \
counts, centipawns, depths) are null. The split is committed atomically and replaces one of the \
same name."
    )]
    Import(BagImportArgs),
}

#[derive(Args)]
struct BagExportArgs {
    /// Run directory.
    #[arg(value_name = "RUN_DIR")]
    run: PathBuf,
    /// Split to export.
    #[arg(long, value_name = "NAME")]
    split: String,
    /// Output directory [default: RUN_DIR/bag/SPLIT].
    #[arg(short, long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Record sets to write [default: all three].
    #[arg(long = "set", value_enum, value_delimiter = ',')]
    sets: Vec<SetArg>,
    /// Shard a set into files of at most this many records (ChessBench's
    /// train action values: ~7.1M per shard).
    #[arg(long, value_name = "N", default_value_t = 7_200_000)]
    records_per_shard: u64,
    /// Zstd-compress every record (.bagz files).
    #[arg(long)]
    compress: bool,
    /// Replace existing files.
    #[arg(long)]
    overwrite: bool,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BagImportArgs {
    /// Run directory to write (created if needed).
    #[arg(value_name = "RUN_DIR")]
    run: PathBuf,
    /// Split to write (replaced if it exists).
    #[arg(long, value_name = "NAME")]
    split: String,
    /// Directory with ChessBench's file names (state_value_data.bag, ...).
    #[arg(value_name = "DIR", required_unless_present_any = ["state_value", "behavioral_cloning", "action_value"])]
    dir: Option<PathBuf>,
    /// state_value .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE")]
    state_value: Option<PathBuf>,
    /// behavioral_cloning .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE")]
    behavioral_cloning: Option<PathBuf>,
    /// action_value .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE")]
    action_value: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum SetArg {
    StateValue,
    BehavioralCloning,
    ActionValue,
}

impl From<SetArg> for RecordSet {
    fn from(s: SetArg) -> RecordSet {
        match s {
            SetArg::StateValue => RecordSet::StateValue,
            SetArg::BehavioralCloning => RecordSet::BehavioralCloning,
            SetArg::ActionValue => RecordSet::ActionValue,
        }
    }
}

#[derive(Args)]
struct IngestArgs {
    /// PGN inputs: .pgn or .pgn.zst files, or '-' for standard input.
    #[arg(value_name = "INPUT")]
    inputs: Vec<String>,
    /// Run directory to write (created if needed; the splits written replace
    /// existing ones, other splits are kept).
    #[arg(short, long, value_name = "RUN_DIR")]
    out: Option<PathBuf>,
    /// Pipeline file whose [ingest] table gives defaults (inputs with their
    /// splits, out, filters); options given here override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Split the inputs' games go to.
    #[arg(long, value_name = "NAME", help_heading = "Splits")]
    split: Option<String>,
    /// Move this fraction of games to the test split, by a stable hash of the
    /// Lichess game id (or of Event/Site/Date/Round/White/Black elsewhere).
    #[arg(long, value_name = "F", help_heading = "Splits")]
    test_fraction: Option<f64>,
    /// Name of the split --test-fraction fills.
    #[arg(long, value_name = "NAME", help_heading = "Splits")]
    test_split: Option<String>,
    /// Keep only rated games (Event not "Casual ...", both Elos known).
    #[arg(long, help_heading = "Filters")]
    rated_only: bool,
    /// Keep only these speed classes (Lichess: base + 40 x increment):
    /// ultrabullet, bullet, blitz, rapid, classical, correspondence.
    #[arg(
        long = "speed",
        value_name = "SPEED",
        value_delimiter = ',',
        help_heading = "Filters"
    )]
    speeds: Vec<String>,
    /// Both players' Elo must be at least this.
    #[arg(long, value_name = "ELO", help_heading = "Filters")]
    min_elo: Option<u16>,
    /// Both players' Elo must be at most this.
    #[arg(long, value_name = "ELO", help_heading = "Filters")]
    max_elo: Option<u16>,
    /// Stop after N accepted games (in input order).
    #[arg(long, value_name = "N", help_heading = "Selection")]
    max_games: Option<u64>,
    /// Keep a uniform random sample of N accepted games (one pass,
    /// deterministic for a given --seed), like the paper's 10^4..10^7 draws.
    #[arg(long, value_name = "N", help_heading = "Selection")]
    sample_games: Option<u64>,
    /// Seed for --sample-games.
    #[arg(long, value_name = "S", help_heading = "Selection")]
    seed: Option<u64>,
    /// Reject games with a comment longer than this [default: 1MiB].
    #[arg(long, value_name = "SIZE", help_heading = "Limits")]
    max_comment_bytes: Option<String>,
    /// Reject, without parsing, games longer than this [default: 32MiB].
    #[arg(long, value_name = "SIZE", help_heading = "Limits")]
    max_game_bytes: Option<String>,
    /// Worker threads [default: number of cores].
    #[arg(short = 'j', long, value_name = "N", help_heading = "Resources")]
    threads: Option<usize>,
    /// Memory for board deduplication before spilling to disk, e.g. 512MiB
    /// [default: 4GiB].
    #[arg(long, value_name = "SIZE", help_heading = "Resources")]
    memory_limit: Option<String>,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AnnotateArgs {
    /// Run directory written by `chessbench ingest`.
    #[arg(value_name = "RUN_DIR")]
    run: Option<PathBuf>,
    /// Pipeline file whose [annotate] table gives defaults; options given
    /// here override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Splits to annotate [default: all].
    #[arg(long = "split", value_name = "NAME", value_delimiter = ',')]
    splits: Vec<String>,
    /// Print the number of searches and the CPU-days they cost, then exit.
    #[arg(long)]
    plan: bool,
    /// Milliseconds per search (the paper: 50) [default limit: 50 ms].
    #[arg(long, value_name = "MS", help_heading = "Search")]
    movetime_ms: Option<u64>,
    /// Nodes per search (deterministic with --new-game-per-board).
    #[arg(long, value_name = "N", help_heading = "Search")]
    nodes: Option<u64>,
    /// Depth per search.
    #[arg(long, value_name = "D", help_heading = "Search")]
    depth: Option<u32>,
    /// per-move (the paper: one searchmoves search per legal move) or
    /// multipv (one MultiPV search per board, far cheaper, shallower).
    #[arg(long, value_enum, help_heading = "Search")]
    mode: Option<ModeArg>,
    /// Send ucinewgame (clear hash and history) before every board, so a
    /// board's values do not depend on which boards a worker saw before
    /// [default: true].
    #[arg(long, value_name = "BOOL", help_heading = "Search")]
    new_game_per_board: Option<bool>,
    /// Engine executable [default: stockfish, or /usr/games/stockfish].
    #[arg(long, value_name = "PATH", help_heading = "Engine")]
    engine: Option<PathBuf>,
    /// Engine hash table size in MiB [default: 16].
    #[arg(long, value_name = "MIB", help_heading = "Engine")]
    hash_mb: Option<u32>,
    /// Engine processes, one search thread each [default: number of cores].
    #[arg(short = 'j', long, value_name = "N", help_heading = "Resources")]
    workers: Option<usize>,
    /// Annotate slice I of N (0-based); also read from SLURM_ARRAY_TASK_ID /
    /// SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX / CHESSBENCH_SHARD_COUNT.
    #[arg(long, value_name = "I/N", help_heading = "Resources")]
    shard: Option<String>,
    /// Boards per committed chunk, a power of two [default: 1024].
    #[arg(long, value_name = "N", help_heading = "Resources")]
    chunk_boards: Option<u64>,
    /// Annotate only the first N boards of each split (ids 0..N).
    #[arg(long, value_name = "N", help_heading = "Resources")]
    max_boards: Option<u64>,
    /// Tries per board before it goes to `failures` [default: 3].
    #[arg(long, value_name = "N", help_heading = "Faults")]
    max_attempts: Option<u32>,
    /// Deadline per search in ms [default: 3 x movetime + 2 s; 10 s for
    /// nodes limits].
    #[arg(long, value_name = "MS", help_heading = "Faults")]
    search_timeout_ms: Option<u64>,
    /// Delete the splits' existing annotations and start over.
    #[arg(long)]
    overwrite: bool,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Print the summary (or the plan) as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ModeArg {
    PerMove,
    Multipv,
}

#[derive(Args)]
struct StatsArgs {
    /// A run directory written by `chessbench ingest`.
    #[arg(value_name = "RUN_DIR")]
    run: PathBuf,
    /// Print JSON: {"splits": {"train": {"games", "state_value",
    /// "behavioral_cloning", "action_value", ...}}, "test_in_train": ...}.
    #[arg(long)]
    json: bool,
}

fn ingest_cmd(args: IngestArgs) -> Result<()> {
    let cli = IngestOptions {
        inputs: args
            .inputs
            .iter()
            .map(|p| RawInput {
                path: p.clone(),
                split: None,
            })
            .collect(),
        out: args.out.clone(),
        split: args.split,
        rated_only: args.rated_only.then_some(true),
        speeds: (!args.speeds.is_empty()).then_some(args.speeds),
        min_elo: args.min_elo,
        max_elo: args.max_elo,
        max_games: args.max_games,
        sample_games: args.sample_games,
        seed: args.seed,
        test_fraction: args.test_fraction,
        test_split: args.test_split,
        max_comment_bytes: args.max_comment_bytes,
        max_game_bytes: args.max_game_bytes,
        threads: args.threads,
        memory_limit: args.memory_limit,
        progress: Some(!args.no_progress),
        base_dir: None,
    };
    let options = match &args.config {
        Some(path) => IngestOptions::from_pipeline_file(path)?.merge(cli),
        None => cli,
    };
    let config = options.validate(args.out.is_some())?;
    let out = config.out.clone();
    let summary =
        ingest::run(&config).with_context(|| format!("ingest into {} failed", out.display()))?;
    for input in &summary.inputs {
        if let Some(e) = &input.error {
            eprintln!(
                "warning: input {} ended early with a read error after {} games: {e} \
                 (a game cut off by it is in rejects as 'truncated')",
                input.source, input.games_read
            );
        }
    }
    let mut stdout = io::stdout().lock();
    if args.json {
        let json = serde_json::json!({
            "out": out,
            "seconds": summary.seconds,
            "games_read": summary.games_read(),
            "pgn_bytes": summary.pgn_bytes(),
            "spilled": summary.spilled,
            "peak_rss_bytes": summary.peak_rss,
            "phases": summary.phases.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "inputs": summary.inputs,
            "splits": summary.splits.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        });
        writeln!(stdout, "{}", serde_json::to_string_pretty(&json)?)?;
        return Ok(());
    }
    let secs = summary.seconds.max(1e-9);
    writeln!(
        stdout,
        "ingested {} games ({:.1} MB of PGN) from {} input(s) in {:.2} s: {:.0} games/s, {:.1} MB/s{}",
        group(summary.games_read()),
        summary.pgn_bytes() as f64 / 1e6,
        summary.inputs.len(),
        summary.seconds,
        summary.games_read() as f64 / secs,
        summary.pgn_bytes() as f64 / 1e6 / secs,
        if summary.spilled {
            " (board dedup spilled to disk)"
        } else {
            ""
        }
    )?;
    let phases: Vec<String> = summary
        .phases
        .iter()
        .map(|(name, secs)| format!("{name} {secs:.2} s"))
        .collect();
    let peak = summary
        .peak_rss
        .map(|b| format!("; peak memory {:.0} MB", b as f64 / 1e6))
        .unwrap_or_default();
    writeln!(stdout, "  phases: {}{peak}", phases.join(", "))?;
    for (name, c) in &summary.splits {
        let rejected: u64 = c.rejected.values().sum();
        let reasons: Vec<String> = c.rejected.iter().map(|(r, n)| format!("{r} {n}")).collect();
        writeln!(
            stdout,
            "  {name}: {} games, {} boards ({} with a legal move), {} legal moves; {} rejected{}{}",
            group(c.games),
            group(c.state_value),
            group(c.behavioral_cloning),
            group(c.action_value),
            group(rejected),
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join(", "))
            },
            if c.not_sampled > 0 {
                format!("; {} accepted but not sampled", group(c.not_sampled))
            } else {
                String::new()
            }
        )?;
    }
    writeln!(
        stdout,
        "wrote {} (run `chessbench stats {}` for Table A1)",
        out.display(),
        out.display()
    )?;
    Ok(())
}

fn annotate_cmd(args: AnnotateArgs) -> Result<()> {
    let cli = AnnotateOptions {
        run: args.run.clone(),
        splits: (!args.splits.is_empty()).then_some(args.splits),
        engine: args.engine,
        hash_mb: args.hash_mb,
        movetime_ms: args.movetime_ms,
        nodes: args.nodes,
        depth: args.depth,
        mode: args.mode.map(|m| match m {
            ModeArg::PerMove => Mode::PerMove,
            ModeArg::Multipv => Mode::Multipv,
        }),
        workers: args.workers,
        chunk_boards: args.chunk_boards,
        max_boards: args.max_boards,
        max_attempts: args.max_attempts,
        search_timeout_ms: args.search_timeout_ms,
        new_game_per_board: args.new_game_per_board,
        shard: args.shard,
        progress: Some(!args.no_progress),
        overwrite: args.overwrite.then_some(true),
        ..AnnotateOptions::default()
    };
    let options = match &args.config {
        Some(path) => AnnotateOptions::from_pipeline_file(path)?.merge(cli),
        None => cli,
    };
    let config = options.validate(|k| std::env::var(k).ok())?;
    let mut stdout = io::stdout().lock();
    if args.plan {
        let p = plan::plan(&config)
            .with_context(|| format!("planning the annotation of {}", config.run.display()))?;
        if args.json {
            writeln!(stdout, "{}", serde_json::to_string_pretty(&p)?)?;
        } else {
            write!(stdout, "{}", plan::render(&p))?;
        }
        return Ok(());
    }
    let summary =
        annotate::run(&config).with_context(|| format!("annotating {}", config.run.display()))?;
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&summary)?)?;
    } else {
        write!(stdout, "{}", annotate::render(&summary, &config.run))?;
    }
    Ok(())
}

fn stats_cmd(args: StatsArgs) -> Result<()> {
    let stats =
        stats::compute(&args.run).with_context(|| format!("reading run {}", args.run.display()))?;
    let mut stdout = io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&stats)?)?;
    } else {
        write!(stdout, "{}", stats::render(&stats))?;
    }
    Ok(())
}

fn sql_cmd(args: SqlArgs) -> Result<()> {
    let variables = args
        .vars
        .iter()
        .map(|v| sql::parse_variable(v))
        .collect::<Result<Vec<_>, _>>()?;
    let (source_name, text) = match (&args.query, &args.execute) {
        (_, Some(sql)) => ("-e".to_owned(), sql.clone()),
        (Some(q), None) => sql::resolve(q)?,
        (None, None) => anyhow::bail!("give a SQL file, a built-in query name or -e SQL"),
    };
    let session = sql::Session::open(&args.run, &variables)
        .with_context(|| format!("opening run {}", args.run.display()))?;
    if !args.quiet {
        for (split, boards, annotated, failed) in session.partial_annotation()? {
            eprintln!(
                "note: split {split}: {} of {} boards annotated{}; value tables and record sets cover those only",
                group(annotated),
                group(boards),
                if failed > 0 {
                    format!(", {} failed", group(failed))
                } else {
                    String::new()
                }
            );
        }
    }
    let results = session.run_script(&source_name, &text, args.only.as_deref())?;
    let format = match args.format {
        OutputFormat::Table => Format::Table,
        OutputFormat::Csv => Format::Csv,
        OutputFormat::Json => Format::Json,
        OutputFormat::Markdown => Format::Markdown,
    };
    let mut stdout = io::BufWriter::new(io::stdout().lock());
    sql::output::write(&mut stdout, &results, format, args.max_rows)?;
    stdout.flush()?;
    Ok(())
}

fn bag_cmd(command: BagCommand) -> Result<()> {
    match command {
        BagCommand::Export(args) => {
            let sets = if args.sets.is_empty() {
                RecordSet::ALL.to_vec()
            } else {
                args.sets.iter().map(|&s| s.into()).collect()
            };
            let config = bag::export::ExportConfig {
                out: args
                    .out
                    .clone()
                    .unwrap_or_else(|| bag::export::default_out(&args.run, &args.split)),
                run: args.run.clone(),
                split: args.split.clone(),
                sets,
                records_per_shard: args.records_per_shard,
                compress: args.compress,
                overwrite: args.overwrite,
                progress: !args.no_progress,
            };
            let done = bag::export::export(&config).with_context(|| {
                format!(
                    "exporting split {} of run {}",
                    args.split,
                    args.run.display()
                )
            })?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&done)?);
            } else {
                for set in &done {
                    eprintln!(
                        "{:<20} {:>14} records {:>14} bytes {:>6.1} B/record  {} file(s) in {}",
                        set.set,
                        group(set.records),
                        group(set.bytes),
                        set.bytes as f64 / set.records.max(1) as f64,
                        set.files.len(),
                        config.out.display()
                    );
                }
            }
        }
        BagCommand::Import(args) => {
            let mut inputs = match &args.dir {
                Some(dir) => bag::import::discover(dir)?,
                None => Vec::new(),
            };
            for (set, file) in [
                (RecordSet::StateValue, &args.state_value),
                (RecordSet::BehavioralCloning, &args.behavioral_cloning),
                (RecordSet::ActionValue, &args.action_value),
            ] {
                if let Some(f) = file {
                    inputs.retain(|(s, _)| *s != set);
                    inputs.push((set, f.clone()));
                }
            }
            let config = bag::import::ImportConfig {
                run: args.run.clone(),
                split: args.split.clone(),
                inputs,
                progress: !args.no_progress,
            };
            let summary = bag::import::import(&config).with_context(|| {
                format!(
                    "importing into split {} of run {}",
                    args.split,
                    args.run.display()
                )
            })?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                eprintln!(
                    "imported split {}: {} boards, {} legal moves; records: {} state_value, {} behavioral_cloning, {} action_value",
                    summary.split,
                    group(summary.boards),
                    group(summary.legal_moves),
                    group(summary.state_value_records),
                    group(summary.behavioral_cloning_records),
                    group(summary.action_value_records)
                );
            }
        }
    }
    Ok(())
}

fn train_cmd(args: TrainArgs) -> Result<()> {
    let cli = TrainOptions {
        run: args.run,
        name: args.name,
        split: args.split,
        eval_split: args.eval_split,
        policy: args.policy.map(policy_of),
        model: args.model.map(preset_of),
        buckets: args.buckets,
        loss: args.loss.map(loss_of),
        batch_size: args.batch_size,
        learning_rate: args.learning_rate,
        steps: args.steps,
        sampling: args.sampling.map(|s| match s {
            SamplingArg::Uniform => Sampling::Uniform,
            SamplingArg::Weighted => Sampling::Weighted,
        }),
        seed: args.seed,
        workers: args.workers,
        log_every: args.log_every,
        checkpoint_every: args.checkpoint_every,
        eval_every: args.eval_every,
        eval_records: args.eval_records,
        device: args.device.map(device_of),
        precision: args.bf16.then_some(Precision::Bf16),
        ..TrainOptions::default()
    };
    let options = match &args.config {
        Some(path) => TrainOptions::from_pipeline_file(path)?.merge(cli),
        None => cli,
    };
    let config = options.resolve()?;
    let run_options = RunOptions {
        progress: !args.no_progress,
        restart: args.restart,
        abort_after_step: args.abort_after_step,
    };
    let summary = train_run::train(&config, &run_options)
        .with_context(|| format!("training {}", config.out_dir().display()))?;
    let mut stdout = io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&summary)?)?;
        return Ok(());
    }
    let resumed = summary
        .resumed_from
        .map(|s| format!(", resumed from step {s}"))
        .unwrap_or_default();
    writeln!(
        stdout,
        "trained {} ({:?}, {:.2}M parameters): step {} of {}, {} samples{resumed}",
        summary.name,
        summary.policy,
        summary.params as f64 / 1e6,
        summary.step,
        config.steps,
        group(summary.samples),
    )?;
    if let (Some(loss), Some(rate)) = (summary.last_loss, summary.samples_per_s) {
        writeln!(
            stdout,
            "  last train loss {loss:.4}; {rate:.0} samples/s ({:.2} GFLOP/s of model FLOPs) on {}; waiting for data {:.1}% of the time",
            rate * summary.train_flops_per_sample / 1e9,
            summary.device,
            100.0 * summary.data_wait_share.unwrap_or(0.0)
        )?;
    }
    if let Some(e) = &summary.eval {
        let verdict = if e.log_loss < e.marginal_log_loss {
            "beats"
        } else {
            "does not beat"
        };
        writeln!(
            stdout,
            "  {} split ({} records, EMA parameters): log-loss {:.4}, {verdict} the marginal baseline {:.4}; accuracy {:.3}{}",
            e.split,
            group(e.records as u64),
            e.log_loss,
            e.marginal_log_loss,
            e.accuracy,
            e.value_mse
                .map(|m| format!("; win% MSE {m:.4}"))
                .unwrap_or_default()
        )?;
    }
    writeln!(stdout, "  wrote {}", summary.out_dir.display())?;
    Ok(())
}

fn policy_of(p: PolicyArg) -> Policy {
    match p {
        PolicyArg::ActionValue => Policy::ActionValue,
        PolicyArg::StateValue => Policy::StateValue,
        PolicyArg::BehavioralCloning => Policy::BehavioralCloning,
    }
}

fn preset_of(m: PresetArg) -> Preset {
    match m {
        PresetArg::Tiny => Preset::Tiny,
        PresetArg::M9 => Preset::M9,
        PresetArg::M136 => Preset::M136,
        PresetArg::M270 => Preset::M270,
    }
}

fn loss_of(l: LossArg) -> Loss {
    match l {
        LossArg::HlGauss => Loss::HlGauss,
        LossArg::CrossEntropy => Loss::CrossEntropy,
        LossArg::L2 => Loss::L2,
    }
}

fn device_of(d: DeviceArg) -> DeviceKind {
    match d {
        DeviceArg::Cpu => DeviceKind::Cpu,
        DeviceArg::Cuda => DeviceKind::Cuda,
    }
}

fn bench_step_cmd(args: BenchStepArgs) -> Result<()> {
    let policy = policy_of(args.policy);
    let bench = StepBench {
        shape: ModelShape::preset(preset_of(args.model), policy, args.buckets),
        loss: if policy == Policy::BehavioralCloning {
            Loss::CrossEntropy
        } else {
            loss_of(args.loss)
        },
        batch_size: args.batch_size.max(1),
        steps: args.steps.max(1),
        warmup: args.warmup,
        device: device_of(args.device),
        precision: if args.bf16 {
            Precision::Bf16
        } else {
            Precision::F32
        },
        profile: args.profile,
    };
    let t = bench_steps(&bench).context("timing training steps")?;
    let mut stdout = io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string(&t)?)?;
        return Ok(());
    }
    writeln!(
        stdout,
        "{:.2}M parameters, batch {}: {:.0} samples/s, {:.2} model TFLOP/s ({} steps in {:.2} s on {})",
        t.params as f64 / 1e6,
        bench.batch_size,
        t.samples_per_s,
        t.model_flops_per_s / 1e12,
        bench.steps,
        t.seconds,
        t.device
    )?;
    if let Some(phases) = &t.phases {
        let total: f64 = phases.iter().map(|(_, s)| s).sum();
        for (name, s) in phases {
            writeln!(
                stdout,
                "  {name:<13} {:>9.3} ms/step {:>5.1}%",
                s * 1e3,
                100.0 * s / total.max(1e-12)
            )?;
        }
    }
    Ok(())
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ingest(args) => ingest_cmd(*args),
        Command::Annotate(args) => annotate_cmd(*args),
        Command::Stats(args) => stats_cmd(args),
        Command::Sql(args) => sql_cmd(args),
        Command::Bag(command) => bag_cmd(command),
        Command::Train(args) => train_cmd(*args),
        Command::BenchStep(args) => bench_step_cmd(args),
        Command::Eval(args) => eval_cmd(*args),
        Command::Uci(args) => uci_cmd(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PartArg {
    Metrics,
    Puzzles,
    Games,
}

#[derive(Args)]
struct EvalArgs {
    /// The annotated run whose split the static metrics use.
    run: Option<PathBuf>,
    /// A pipeline file with an [eval] table (flags override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A checkpoint directory, or a training run (its newest checkpoint).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Evaluate the raw parameters instead of their EMA.
    #[arg(long)]
    raw_weights: bool,
    /// Split scored by the static metrics [default: test].
    #[arg(long)]
    split: Option<String>,
    /// Boards scored by the static metrics (0: skip) [default: 1000].
    #[arg(long)]
    boards: Option<usize>,
    /// Also score Stockfish as a predictor, e.g. stockfish:nodes=200.
    #[arg(long)]
    oracle: Option<String>,
    /// Puzzle CSV (Lichess or ChessBench format).
    #[arg(long)]
    puzzles: Option<PathBuf>,
    /// Puzzles solved (the first N) [default: 200].
    #[arg(long)]
    max_puzzles: Option<usize>,
    /// Stockfish on the same puzzles, e.g. stockfish:nodes=1000.
    #[arg(long)]
    puzzle_engine: Option<String>,
    /// Openings: a PGN file (main lines) or the Lichess openings TSV [default: built-in list].
    #[arg(long)]
    openings: Option<PathBuf>,
    /// Openings per opponent, each played with both colours [default: 4].
    #[arg(long)]
    openings_count: Option<usize>,
    /// An opponent (repeatable): stockfish:nodes=N, stockfish:skill=S[,depth=D], checkpoint:PATH.
    #[arg(long = "opponent")]
    opponents: Vec<String>,
    /// Game length cap in plies; longer games are adjudicated draws [default: 0, no cap, as
    /// searchless_chess].
    #[arg(long)]
    max_plies: Option<usize>,
    /// Stockfish adjudicating games after every move: a mate score or more than --adjudicate-cp
    /// ends the game as a win (searchless_chess's tournament) [default: stockfish:movetime=10;
    /// `none` to play to the end].
    #[arg(long)]
    adjudicate: Option<String>,
    /// The adjudication threshold in centipawns [default: 1300].
    #[arg(long)]
    adjudicate_cp: Option<i32>,
    /// The player whose Elo is fixed [default: the first opponent].
    #[arg(long)]
    anchor: Option<String>,
    /// The anchor's Elo [default: 0].
    #[arg(long)]
    anchor_elo: Option<f64>,
    /// Do not score moves that allow a threefold repetition as draws.
    #[arg(long)]
    no_repetition_draw: bool,
    /// Let Stockfish pick among the top five moves when all exceed 99%, e.g. stockfish:nodes=1000.
    #[arg(long)]
    decisive: Option<String>,
    /// The UCI engine (Stockfish) [default: stockfish on PATH, else /usr/games/stockfish].
    #[arg(long)]
    engine: Option<PathBuf>,
    /// Where the model runs.
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// Report directory [default: RUN/report].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only these parts (repeatable) [default: all].
    #[arg(long, value_enum)]
    only: Vec<PartArg>,
    /// No progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

fn eval_cmd(args: EvalArgs) -> Result<()> {
    use chessbench::eval::run::{EvalOptions, Part, evaluate};
    let cli = EvalOptions {
        run: args.run,
        checkpoint: args.checkpoint,
        weights: args.raw_weights.then(|| "raw".to_owned()),
        split: args.split,
        boards: args.boards,
        oracle: args.oracle,
        puzzles: args.puzzles.clone(),
        max_puzzles: args.max_puzzles,
        puzzle_engine: args.puzzle_engine,
        openings: args.openings,
        openings_count: args.openings_count,
        opponents: (!args.opponents.is_empty()).then_some(args.opponents),
        max_plies: args.max_plies,
        adjudicate: args.adjudicate,
        adjudicate_cp: args.adjudicate_cp,
        anchor: args.anchor,
        anchor_elo: args.anchor_elo,
        repetition_draw: args.no_repetition_draw.then_some(false),
        decisive: args.decisive,
        engine: args.engine,
        device: args.device.map(device_of),
        out: args.out,
        base_dir: None,
    };
    let options = match &args.config {
        Some(path) => EvalOptions::from_pipeline_file(path)?.merge(cli),
        None => cli,
    };
    let parts = args
        .only
        .iter()
        .map(|p| match p {
            PartArg::Metrics => Part::Metrics,
            PartArg::Puzzles => Part::Puzzles,
            PartArg::Games => Part::Games,
        })
        .collect();
    let config = options.resolve(parts, args.puzzles.is_some())?;
    let s = evaluate(&config, !args.no_progress)
        .with_context(|| format!("evaluating {}", config.checkpoint.display()))?;
    let mut out = io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&s)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "evaluated {} step {} ({:?}, {:.2}M parameters) in {:.0} s",
        s.name,
        s.step,
        s.policy,
        s.params as f64 / 1e6,
        s.seconds
    )?;
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"));
    for m in s.metrics.iter().chain(&s.oracle) {
        writeln!(
            out,
            "  {:<24} {} boards of {}: action accuracy {:.4}, Kendall tau {}, log-loss {}, L2 {}, entropy {} ({:.0} boards/s)",
            m.predictor,
            m.boards,
            m.split,
            m.action_accuracy,
            f(m.kendall_tau),
            f(m.log_loss),
            f(m.l2_win_prob),
            f(m.entropy),
            m.boards_per_s
        )?;
    }
    for p in &s.puzzles {
        writeln!(
            out,
            "  {:<24} puzzles: {}/{} solved ({:.1}%)",
            p.player,
            p.solved,
            p.puzzles,
            100.0 * p.accuracy
        )?;
    }
    for g in &s.games {
        writeln!(
            out,
            "  vs {:<21} +{} ={} -{} (score {:.3})",
            g.opponent, g.wins, g.draws, g.losses, g.score
        )?;
    }
    for r in &s.ratings {
        writeln!(out, "  Elo {:<20} {:>7.0} ± {:.0}", r.player, r.elo, r.ci95)?;
    }
    for x in &s.skipped {
        writeln!(out, "  skipped: {x}")?;
    }
    writeln!(out, "report: {}", s.report.join("eval.md").display())?;
    Ok(())
}

#[derive(Args)]
struct UciArgs {
    /// A checkpoint directory, or a training run (its newest checkpoint).
    #[arg(long)]
    checkpoint: PathBuf,
    /// Use the raw parameters instead of their EMA.
    #[arg(long)]
    raw_weights: bool,
    /// Do not score moves that allow a threefold repetition as draws.
    #[arg(long)]
    no_repetition_draw: bool,
    /// Where the model runs.
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
}

fn uci_cmd(args: UciArgs) -> Result<()> {
    use chessbench::eval::{
        model::{Model, Weights},
        policy::{NeuralPlayer, PolicyOptions},
        uci_server::serve,
    };
    let weights = if args.raw_weights {
        Weights::Raw
    } else {
        Weights::Ema
    };
    let model = Model::load(&args.checkpoint, weights, device_of(args.device))
        .with_context(|| format!("loading {}", args.checkpoint.display()))?;
    let name = model.label();
    let mut player = NeuralPlayer::new(
        model,
        PolicyOptions {
            repetition_draw: !args.no_repetition_draw,
            decisive: None,
        },
        None,
    );
    let stdin = io::stdin().lock();
    let stdout = io::stdout().lock();
    serve(&mut player, &name, stdin, stdout)?;
    Ok(())
}
