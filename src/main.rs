//! The `chessbench` command line: parses arguments into the library's raw
//! options, lets the library validate them, runs the stage and reports.

use std::{
    io::{self, Write},
    path::PathBuf,
    process::ExitCode,
};

use anyhow::{Context, Result};
use chessbench::{
    ingest::{
        self,
        config::{IngestOptions, RawInput},
        group,
    },
    stats,
};
use clap::{Args, Parser, Subcommand};

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
    /// Print Table A1 (record counts per split, bytes on disk, test-in-train overlap).
    Stats(StatsArgs),
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
        Command::Stats(args) => stats_cmd(args),
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
