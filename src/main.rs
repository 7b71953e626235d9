//! The `chessbench` binary: parses the command line ([`cli`]), layers each
//! stage's options over its pipeline table, runs the stage, and prints its
//! summary (text or `--json`) on standard output. Errors go to standard
//! error with their chain and exit 1; a closed pipe exits 0; usage errors
//! exit 2 (clap).

mod cli;

use std::{
    io::{self, Write},
    process::ExitCode,
};

use anyhow::{Context, Result};
use chessbench::{
    ablate,
    annotate::{self, AnnotateOptions},
    bag,
    eval::{self, EvalOptions},
    ingest::{self, IngestOptions},
    options::{self, Env},
    sql, stats,
    train::{self, TrainOptions},
    ui::{Report, describe, emit},
};
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::cli::{BagCommand, CheckpointCommand, Cli, Command};

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let (_, stage) = matches.subcommand().expect("clap requires a subcommand");
    match run(cli, stage) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", describe(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Runs the stage `cli` names; `m` holds its arguments (for layering).
/// Each stage's config is resolved from its options and the invocation
/// ([`Env`]: progress bars, `--overwrite` / `--restart`, the process
/// environment), then run, then its summary printed.
fn run(cli: Cli, m: &ArgMatches) -> Result<()> {
    let json = cli.json;
    let env = Env::from_process(!cli.no_progress);
    match cli.command {
        Command::Ingest(a) => {
            let options: IngestOptions = options::load(m, a.pipeline.config.as_deref())?;
            let config = options.resolve(&env)?;
            let summary = ingest::run(&config)
                .with_context(|| format!("ingest into {} failed", config.out.display()))?;
            emit(&summary, json)?;
        }
        Command::Annotate(a) => {
            let options: AnnotateOptions = options::load(m, a.pipeline.config.as_deref())?;
            let config = options.resolve(&env.overwriting(a.overwrite))?;
            let task = if a.plan {
                annotate::Task::Plan
            } else {
                annotate::Task::Write
            };
            let outcome = annotate::execute(&config, task).with_context(|| config.doing(task))?;
            emit(&outcome, json)?;
        }
        Command::Stats(a) => {
            let stats = a
                .resolve()
                .and_then(|config| stats::run(&config))
                .with_context(|| format!("reading run {}", a.run.display()))?;
            emit(&stats, json)?;
        }
        Command::Sql(mut a) => {
            if json {
                a.format = sql::Format::Json;
            }
            let summary = sql::run(&a.resolve()?, &mut io::stdout().lock())?;
            // The results are the output; the notes go beside them.
            for note in summary.notes() {
                eprintln!("note: {note}");
            }
        }
        Command::Bag(BagCommand::Export(a)) => {
            let summary = bag::export::run(&a.resolve(&env)).with_context(|| {
                format!("exporting split {} of run {}", a.split, a.run.display())
            })?;
            emit(&summary, json)?;
        }
        Command::Bag(BagCommand::Import(a)) => {
            let summary = bag::import::run(&a.resolve(&env)?).with_context(|| {
                format!(
                    "importing into split {} of run {}",
                    a.split,
                    a.run.display()
                )
            })?;
            emit(&summary, json)?;
        }
        Command::Checkpoint(CheckpointCommand::Import(a)) => {
            let summary =
                chessbench::checkpoint::import(&a).context("importing a searchless_chess model")?;
            emit(&summary, json)?;
        }
        Command::Checkpoint(CheckpointCommand::Init(a)) => {
            let summary =
                chessbench::checkpoint::init(&a).context("writing a randomly initialised model")?;
            emit(&summary, json)?;
        }
        Command::Train(a) => {
            let options: TrainOptions = options::load(m, a.pipeline.config.as_deref())?;
            let config = options.resolve(&env.overwriting(a.restart))?;
            require_fused(&options.compute)?;
            let summary = train::run(&config)
                .with_context(|| format!("training {}", config.out_dir().display()))?;
            emit(&summary, json)?;
        }
        Command::GenerateGames(a) => {
            let summary = chessbench::generate_games::run(&a).context("generating games")?;
            if a.out.is_some() {
                emit(&summary, json)?;
            } else {
                // The games went to standard output: the summary goes to
                // standard error.
                emit_to_stderr(&summary, json)?;
            }
        }
        Command::BenchStep(a) => {
            require_fused(&a.compute)?;
            let timing = train::bench_steps(&a.bench()).context("timing training steps")?;
            emit(&timing, json)?;
        }
        Command::Eval(a) => {
            let options: EvalOptions = options::load(m, a.pipeline.config.as_deref())?;
            let config = options.resolve(&env)?;
            require_fused(&options.compute)?;
            let summary = eval::run(&config)
                .with_context(|| format!("evaluating {}", config.checkpoint.display()))?;
            emit(&summary, json)?;
        }
        Command::Ablate(a) => {
            let config = a.resolve(&env)?;
            let done = ablate::execute(&config).with_context(|| config.doing())?;
            emit(&done, json)?;
            if let Some(failures) = done.failures() {
                anyhow::bail!(failures);
            }
        }
        Command::Uci(a) => {
            require_fused(&a.compute)?;
            let served = a
                .resolve()
                .and_then(eval::uci_server::run)
                .with_context(|| format!("playing {}", a.checkpoint.display()))?;
            // Standard output is the protocol's: the summary goes beside it.
            emit_to_stderr(&served, json)?;
        }
        Command::HelpMarkdown => print!("{}", cli::markdown_reference()),
    }
    Ok(())
}

/// `--require-fused`: makes the process require the fused kernels (or
/// refuses at once where they cannot run).
fn require_fused(compute: &options::Compute) -> anyhow::Result<()> {
    if compute.require_fused {
        chessbench::model::require_fused(compute.device)?;
    }
    Ok(())
}

/// Prints `report` on standard error, for the commands whose standard
/// output is their data (games, the UCI protocol).
fn emit_to_stderr(report: &impl Report, json: bool) -> io::Result<()> {
    let mut err = io::stderr().lock();
    if json {
        serde_json::to_writer_pretty(&mut err, report)?;
        writeln!(err)?;
    } else {
        report.render(&mut err)?;
    }
    Ok(())
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
