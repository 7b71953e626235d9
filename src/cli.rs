//! The command line's shape: subcommands, their help, and the flags that
//! are not stage options (`--config`, `--json`, `--no-progress`, actions such
//! as `--plan`). Each stage's options are its own type, flattened in here
//! and layered over its pipeline table by [`chessbench::options::load`].

use std::path::PathBuf;

use chessbench::{
    ablate::AblateOptions,
    annotate::{self, AnnotateOptions},
    bag::{self, BagExportOptions, BagImportOptions},
    eval::{self, EvalOptions, UciOptions},
    ingest::{self, IngestOptions},
    sql::{self, SqlOptions},
    stats::{self, StatsOptions},
    train::{self, BenchStepOptions, TrainOptions},
};
use clap::{Args, Parser, Subcommand, ValueHint};

#[derive(Parser)]
#[command(
    name = "chessbench",
    version,
    about = "Rebuild ChessBench: Lichess PGN dumps to deduplicated Parquet tables, Stockfish values, \
SQL, training and evaluation of the paper's transformers.",
    long_about = "chessbench rebuilds the data pipeline and training recipe behind \
\"Grandmaster-Level Chess Without Search\" (Ruoss et al., NeurIPS 2024): `ingest` turns Lichess PGN \
dumps into Parquet tables of games, distinct boards and their legal moves; `annotate` adds Stockfish \
state and action values; `sql` queries the tables (Table A1, dataset statistics); `bag` exports and \
imports ChessBench's .bag files; `train` trains the paper's predictors; `eval` scores them and `uci` \
plays them.\n\n\
Stages that read a pipeline file (`--config pipeline/demo.toml`) take their defaults from its table \
([ingest], [annotate], [train], [eval]); options on the command line override it. A relative path is \
relative to the file that names it: the pipeline file's directory, or the working directory on the \
command line. Enum values are spelled the same in both (action_value, per_move, 9m)."
)]
pub struct Cli {
    /// Print the summary as JSON on standard output (for `sql`: --format
    /// json; for `uci` and `generate-games` to standard output: on standard
    /// error).
    #[arg(long, global = true)]
    pub json: bool,
    /// No progress bars on standard error.
    #[arg(long, global = true)]
    pub no_progress: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// `--config`: the pipeline file a stage reads its table from.
#[derive(Args)]
pub struct Pipeline {
    /// A pipeline file (pipeline/*.toml): its table for this stage gives the
    /// defaults, options given here override them.
    #[arg(short, long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub config: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Turn PGN dumps into games, boards, legal_moves and rejects tables.
    #[command(long_about = ingest_about(), mut_arg("memory_limit", memory_help(ingest::MEMORY)))]
    Ingest(Box<Staged<IngestOptions>>),
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
again with the same settings; a resume also searches again every board that failed. \
For a cluster, --shard I/N (or a Slurm job array, or a Kubernetes Indexed Job with \
CHESSBENCH_SHARD_COUNT) annotates a deterministic slice of the chunks; the shards of one count can \
all run on one run directory at once (a shard already running, or another shard count, refuses).\n\n\
Cost first: `chessbench annotate RUN --plan` counts the searches and CPU-days.\n\n\
Without an engine: `--evals lichess_db_eval.jsonl.zst` labels the boards the Lichess evaluation \
database holds (source lichess_evals, in its own chunk files; `--plan` prints its coverage by split \
and phase), and a later `--only-missing true` searches only the boards it left. \
`chessbench sql RUN label_sources` compares the two sources.",
        mut_arg("memory_limit", memory_help(annotate::memory_help()))
    )]
    Annotate(Box<AnnotateArgs>),
    /// Print Table A1 (record counts per split, bytes on disk, test-in-train overlap).
    #[command(mut_arg("memory_limit", memory_help(stats::MEMORY)))]
    Stats(StatsOptions),
    /// Query a run's tables in SQL (embedded DuckDB, views preloaded).
    #[command(long_about = crate::sql::long_about(), mut_arg("memory_limit", memory_help(sql::MEMORY)))]
    Sql(SqlOptions),
    /// Export or import ChessBench .bag files (state_value, behavioral_cloning, action_value).
    #[command(subcommand)]
    Bag(BagCommand),
    /// Import searchless_chess's models as chessbench checkpoints, or write random ones.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
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
  chessbench train runs/demo --policy behavioral_cloning --steps 500 --batch-size 256\n\
  chessbench train --config pipeline/ablation.toml --device cuda   # needs --features cuda",
        mut_arg("memory_limit", memory_help(train::MEMORY))
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
    BenchStep(BenchStepOptions),
    /// Write Lichess-like games for scale tests (real openings, seeded random play).
    #[command(
        long_about = "Write N Lichess-like games as PGN, for scale tests and benchmarks: each \
replays the first 0-24 plies of a real game from --openings, then plays seeded random legal moves \
(captures and promotions three times as likely as quiet moves) until checkmate, stalemate, \
insufficient material, the fifty-move rule or a drawn length (10-122 plies, mean 66), where the side \
three points down resigns. Written as a Lichess dump writes games: Lichess's tags (Event, Site, \
UTCDate, Elo, TimeControl, Termination, ...) and a [%clk] comment after every move. The games of one \
call are distinct; the output depends only on --seed, --games and the openings file, so processes with \
different seeds write a larger set in parallel.\n\n\
  chessbench generate-games --games 1000000 --seed 1 | zstd -T1 -3 -q -o games_1e6.pgn.zst\n\
  chessbench ingest runs/scale games_1e6.pgn.zst"
    )]
    GenerateGames(chessbench::generate_games::GenerateGamesOptions),
    /// Run a grid of ablations: train and score every variant, compare them in one table.
    #[command(
        long_about = "Run the paper's ablations (Table 2, Table A2) or any grid like them: a grid file \
names a base recipe (its [annotate], [train] and [eval] tables, as in a pipeline file) and, in \
[ablate.axes], the options varied one at a time around it (a variant per value, the rest at the base; \
`seeds` trains each one per seed). Every variant is trained with `train`, scored with `eval` on the same \
test boards and puzzles, and written as one row per metric to RUN_DIR/ablate/NAME/results/ (Parquet, one \
file per finished variant; query it with `chessbench sql RUN_DIR ablations`).\n\n\
An axis is any option of [train] (policy, loss, layers, buckets, sampling, window, ...) or a search \
limit of [annotate] (nodes, movetime_ms, depth): such a data-level variant annotates the train split \
again into RUN_DIR/ablate/NAME/data/SETTING/, which shares the ingest tables and the base's test labels. \
The whole grid is checked before anything runs. A variant that fails is recorded with its error and the \
others go on; started again, finished variants are kept and unfinished ones resume from their \
checkpoints.\n\n\
On a cluster, each task of a Slurm array or Kubernetes Indexed Job runs its share of the variants \
(--shard I/N or the scheduler's environment); grids with search-limit axes run `--phase data` first \
(pipeline/slurm/ablate.sbatch chains both).\n\n\
  chessbench ablate pipeline/ablations.toml --plan\n\
  chessbench ablate pipeline/ablations.toml\n\
  chessbench ablate pipeline/ablations.toml --report     # RUN_DIR/ablate/NAME/report.md"
    )]
    Ablate(AblateOptions),
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
  chessbench eval runs/demo --checkpoint runs/demo/train/av_tiny --puzzles data/lichess_db_puzzle_head1000.csv \\\n\
      --opponent stockfish:skill=0 --opponent stockfish:nodes=100 --only games",
        mut_arg("memory_limit", memory_help(eval::MEMORY))
    )]
    Eval(Box<Staged<EvalOptions>>),
    /// Play a checkpoint as a UCI engine on stdin/stdout.
    #[command(
        long_about = "Speak UCI on standard input/output with a trained model as the engine: \
uci, isready, ucinewgame, position startpos|fen ... [moves ...], go (limits and clocks are accepted and \
ignored: one forward pass per move), stop, quit. Malformed commands and illegal moves are answered \
with `info string error: ...`; the engine keeps running. For GUIs, cutechess-cli and lichess-bot:\n\n\
  cutechess-cli -engine cmd=chessbench arg=uci arg=--checkpoint arg=runs/demo/train/av_tiny ..."
    )]
    Uci(UciOptions),
    /// Print every command's --help as Markdown (docs/cli.md is this output).
    #[command(hide = true)]
    HelpMarkdown,
}

/// A stage that reads a pipeline file: `--config` and its options.
#[derive(Args)]
pub struct Staged<T: Args> {
    #[command(flatten)]
    pub pipeline: Pipeline,
    #[command(flatten)]
    pub options: T,
}

#[derive(Args)]
pub struct AnnotateArgs {
    #[command(flatten)]
    pub pipeline: Pipeline,
    #[command(flatten)]
    pub options: AnnotateOptions,
    /// Print the number of searches and the CPU-days they cost, then exit.
    #[arg(long)]
    pub plan: bool,
    /// Delete the splits' existing annotations and start over: Stockfish's,
    /// or with --evals the evaluation database's (the other source's stay).
    #[arg(long)]
    pub overwrite: bool,
}

#[derive(Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub pipeline: Pipeline,
    #[command(flatten)]
    pub options: TrainOptions,
    /// Discard the run's checkpoints and logs and start from step 0.
    #[arg(long)]
    pub restart: bool,
}

#[derive(Subcommand)]
pub enum CheckpointCommand {
    /// Write searchless_chess parameters (safetensors, haiku names) as a checkpoint.
    #[command(
        long_about = "Write a searchless_chess model's parameters as a chessbench checkpoint that \
`chessbench eval`, `chessbench uci` and `--opponent checkpoint:DIR` load. PARAMS is a safetensors \
file whose tensors are named by haiku's parameter paths (embed/embeddings, \
multi_head_dot_product_attention/linear/w, linear_6/b, ...), float32; --ema gives their EMA \
parameters. Every tensor must fit the preset, policy and buckets given: a file of another shape \
or policy is refused, naming the tensor and the shapes. The checkpoint appears only when complete.\n\n\
  chessbench checkpoint import av_9m.safetensors --ema av_9m_ema.safetensors \\\n\
      --policy action_value --model 9m --buckets 128 --step 6400000 --out models/av_9m"
    )]
    Import(chessbench::checkpoint::CheckpointImportOptions),
    /// Write a randomly initialised model of a preset as a checkpoint (to time evaluation).
    #[command(
        long_about = "Write a model of a preset with training's random initialisation (seeded) as a step-0 chessbench checkpoint that `chessbench eval`, `chessbench uci` and `--opponent checkpoint:DIR` load: to time evaluation or the UCI engine at a model size before training one (the scores mean nothing). The EMA equals the parameters; there is no optimiser state. The checkpoint appears only when complete. The 270M preset writes about 2 GB (parameters and EMA).\n\n\
  chessbench checkpoint init --policy action_value --model 270m --out models/av_270m_random\n\
  chessbench eval runs/demo --checkpoint models/av_270m_random --device cuda --precision bf16 --only puzzles"
    )]
    Init(chessbench::checkpoint::InitOptions),
}

#[derive(Subcommand)]
pub enum BagCommand {
    /// Write a split's record sets as ChessBench .bag files.
    #[command(
        long_about = "Write the annotated records of one split as the three ChessBench files \
state_value_data.bag (fen, win_prob), behavioral_cloning_data.bag (fen, best move) and \
action_value_data.bag (fen, move, win_prob), with searchless_chess's record encoding (Apache Beam \
TupleCoder of StrUtf8Coder / FloatCoder) and bagz.py's file layout, so its data loaders read them. \
Sets larger than --records-per-shard are sharded as SET-00000-of-0000N_data.bag (read them as \
SET@N_data.bag). Files appear under their final names only when complete.",
        mut_arg("memory_limit", memory_help(sql::MEMORY))
    )]
    Export(BagExportOptions),
    /// Read ChessBench .bag files into a split of a run directory.
    #[command(
        long_about = "Import published ChessBench .bag files (or ones exported here) into a run \
directory's Parquet layout: boards (with their legal moves), state_values, action_values, with \
best actions from behavioral_cloning records. Give a directory holding the ChessBench file names \
(e.g. the downloaded data/test/), or files per set; SET@N_data.bag stands for N shards. Every FEN is \
parsed and every move checked to be legal. Columns the .bag files do not carry (games, occurrence \
counts, centipawns, depths) are null. The split is committed atomically and replaces one of the \
same name.",
        mut_arg("memory_limit", memory_help(bag::import::MEMORY))
    )]
    Import(BagImportOptions),
}

/// `chessbench ingest --help`'s description, with what its memory limit
/// covers computed from the constants the budget uses.
fn ingest_about() -> String {
    format!(
        "Read Lichess PGN dumps (.pgn, .pgn.zst or '-' for standard input; zstd is detected from \
the data), keep Standard games from the standard start with at least one move, play every move and \
write, per split, hive-partitioned Parquet tables into RUN_DIR:\n\n\
  games/split=S/        one row per accepted game\n\
  boards/split=S/       one row per distinct board (full FEN): the state-value records\n\
  legal_moves/split=S/  one row per (board, legal move): the action-value records\n\
  rejects/split=S/      one row per skipped or malformed game, with reason and position\n\n\
Everything is staged and committed atomically with manifest.json; an interrupted ingest leaves no \
partial table. Inputs on the command line follow RUN_DIR.\n\n\
{}\n\n\
Stream a month from the web without storing it:\n\
  curl -sL https://database.lichess.org/standard/lichess_db_standard_rated_2023-01.pgn.zst \\\n\
    | chessbench ingest runs/2023-01 - --sample-games 10000 --seed 1",
        chessbench::ingest::config::memory_note()
    )
}

/// Every command's long help as one Markdown page: a section per command
/// (`## chessbench ingest`, linked as `cli.md#chessbench-ingest`) holding its
/// `--help` text, rendered 100 columns wide. `docs/cli.md` is this output, so
/// the flag reference is the code's.
pub fn markdown_reference() -> String {
    use clap::CommandFactory;
    let mut out = String::from(
        "# Command-line reference\n\n\
Generated from the code by `make docs` (`chessbench help-markdown`); a test fails when it is \
out of date. `chessbench COMMAND --help` prints the same text.\n",
    );
    fn section(out: &mut String, path: &str, command: &mut clap::Command) {
        if command.is_hide_set() {
            return;
        }
        let help = command.render_long_help().to_string();
        let help: Vec<&str> = help.lines().map(str::trim_end).collect();
        out.push_str(&format!(
            "\n## {path}\n\n```text\n{}\n```\n",
            help.join("\n").trim_end()
        ));
        let names: Vec<String> = command
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .filter(|n| n != "help")
            .collect();
        for name in names {
            let sub = command.find_subcommand_mut(&name).expect("listed");
            section(out, &format!("{path} {name}"), sub);
        }
    }
    let mut root = Cli::command().term_width(100).max_term_width(100);
    root.build();
    section(&mut out, "chessbench", &mut root);
    out
}

/// `--memory-limit`'s help followed by how the stage shares the limit out:
/// the consumers it declares ([`chessbench::options::Memory`]), which its
/// run divides the limit between. Each stage's command applies it to its
/// flag (`mut_arg`).
fn memory_help(list: impl std::fmt::Display) -> impl FnOnce(clap::Arg) -> clap::Arg {
    move |arg| {
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        arg.long_help(format!("{help}:\n{list}"))
    }
}
