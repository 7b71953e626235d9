//! `chessbench uci`: a trained model as a UCI engine (for GUIs, cutechess,
//! lichess-bot). One `go` = one forward pass over the legal moves (one
//! board: its latency is the `time` of the `info` line before `bestmove`);
//! time controls and limits are accepted and ignored (the policy does not
//! search). Bad commands are answered with `info string error: ...` and the
//! engine keeps going.

use std::{
    io::{BufRead, Write},
    path::PathBuf,
};

use shakmaty::{CastlingMode, Chess, uci::UciMove};

use super::{
    error::PlayerError,
    game::{Game, PlayError, check_uci_move, parse_fen},
    policy::{NeuralPlayer, Player, PolicyOptions},
    trained::Model,
};
use serde::Serialize;

use crate::{
    chess::value::centipawns_to_win_probability,
    model::Weights,
    uci_client::{Command, Position},
    ui::{Report, group},
};

/// Inverse of the paper's win-probability formula, for `info score cp`.
pub(crate) fn win_probability_to_centipawns(p: f64) -> i32 {
    let p = p.clamp(1e-6, 1.0 - 1e-6);
    // p = 1 / (1 + exp(-a cp))  =>  cp = ln(p / (1 - p)) / a
    let a = 0.003_682_08;
    let cp = (p / (1.0 - p)).ln() / a;
    debug_assert!((centipawns_to_win_probability(cp) - p).abs() < 1e-9);
    cp.round() as i32
}

/// `chessbench uci`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct UciOptions {
    /// A checkpoint directory, or a training run (its newest checkpoint).
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub checkpoint: PathBuf,
    /// Which parameters to play: their EMA or the raw ones.
    #[arg(long, value_enum, default_value_t = Weights::Ema)]
    pub weights: Weights,
    /// Score moves that allow a threefold repetition as draws (the paper's
    /// workaround); --no-repetition-draw turns it off.
    #[arg(long = "no-repetition-draw", action = clap::ArgAction::SetFalse)]
    pub repetition_draw: bool,
    #[command(flatten)]
    pub compute: crate::options::Compute,
}

/// Why `chessbench uci` stopped, or could not start. A bad command is no
/// error: it is answered with `info string error: ...`.
#[derive(Debug, thiserror::Error)]
pub enum UciError {
    /// Loading the checkpoint, or computing in the precision asked for.
    #[error(transparent)]
    Model(PlayerError),
    /// Reading a command or writing an answer.
    #[error("uci {stream}")]
    Io {
        /// `standard input` or `standard output`.
        stream: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The player could not start a new game (`ucinewgame`).
    #[error("starting a new game")]
    NewGame(#[source] PlayerError),
}

/// What a `chessbench uci` session did, printed on standard error when it
/// ends (standard output is the protocol's).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Served {
    /// The model's label (`id name chessbench ...`).
    pub engine: String,
    /// Commands read (blank lines aside).
    pub commands: u64,
    /// Moves played (`bestmove` other than `0000`).
    pub moves: u64,
    /// Commands answered with `info string error: ...`.
    pub errors: u64,
}

impl Report for Served {
    fn render(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "uci: {} played {} moves in answer to {} commands ({} refused)",
            self.engine,
            group(self.moves),
            group(self.commands),
            group(self.errors)
        )
    }
}

/// Serves UCI on standard input and output with the model `config` holds,
/// until `quit` or the end of standard input.
pub fn run(config: UciConfig) -> Result<Served, UciError> {
    let name = config.model.label();
    let mut player = NeuralPlayer::new(
        config.model,
        PolicyOptions {
            repetition_draw: config.repetition_draw,
            decisive: None,
        },
        None,
    );
    serve(
        &mut player,
        &name,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
    )
}

/// `chessbench uci`'s options resolved: the checkpoint loaded.
pub struct UciConfig {
    model: Model,
    repetition_draw: bool,
}

impl UciOptions {
    /// Loads the checkpoint in the precision asked for: a missing or
    /// malformed checkpoint fails here, before the engine answers `uci`.
    pub fn resolve(&self) -> Result<UciConfig, UciError> {
        let model = Model::load(&self.checkpoint, self.weights, self.compute.device)
            .and_then(|m| m.with_precision(self.compute.precision))
            .map_err(UciError::Model)?;
        Ok(UciConfig {
            model,
            repetition_draw: self.repetition_draw,
        })
    }
}

/// The engine's state between commands.
struct Session {
    game: Option<Game>,
}

/// Why a `position` command could not be set up.
#[derive(Debug, thiserror::Error)]
enum PositionError {
    #[error(transparent)]
    Start(PlayError),
    #[error("move {n} of the position command: {source}")]
    Move { n: usize, source: PlayError },
}

fn position(start: Option<&str>, moves: &[UciMove]) -> Result<Game, PositionError> {
    let start: Chess = match start {
        None => Chess::default(),
        Some(f) => parse_fen(f).map_err(PositionError::Start)?,
    };
    let mut game = Game::new(start);
    for (i, m) in moves.iter().enumerate() {
        let m = check_uci_move(game.position(), m)
            .map_err(|source| PositionError::Move { n: i + 1, source })?;
        game.play(&m);
    }
    Ok(game)
}

/// Serves UCI on `input`/`output` until `quit` or end of input.
pub(crate) fn serve(
    player: &mut dyn Player,
    name: &str,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<Served, UciError> {
    let io = |source: std::io::Error| UciError::Io {
        stream: "standard output",
        source,
    };
    let mut s = Session { game: None };
    let mut served = Served {
        engine: name.to_owned(),
        ..Served::default()
    };
    let mut say = |out: &mut dyn Write, text: &str| -> Result<(), UciError> {
        if text.starts_with("info string error:") {
            served.errors += 1;
        } else if text.starts_with("bestmove ") && text != "bestmove 0000" {
            served.moves += 1;
        }
        writeln!(out, "{text}").map_err(io)?;
        out.flush().map_err(io)
    };
    let mut commands = 0;
    for line in input.lines() {
        let line = line.map_err(|source| UciError::Io {
            stream: "standard input",
            source,
        })?;
        let cmd = match Command::parse(&line) {
            Ok(Some(c)) => {
                commands += 1;
                c
            }
            Ok(None) => continue,
            Err(e) => {
                commands += 1;
                // A bad `position` leaves no position: `go` must not play
                // in the previous one.
                if line.split_whitespace().next() == Some("position") {
                    s.game = None;
                }
                say(&mut output, &format!("info string error: {e}"))?;
                continue;
            }
        };
        match cmd {
            Command::Uci => {
                say(&mut output, &format!("id name chessbench {name}"))?;
                say(&mut output, "id author chessbench")?;
                say(&mut output, "uciok")?;
            }
            Command::IsReady => say(&mut output, "readyok")?,
            Command::UciNewGame => {
                s.game = None;
                player.new_game().map_err(UciError::NewGame)?;
            }
            Command::Position(p) => match match &p {
                Position::StartPos { moves } => position(None, moves),
                Position::Fen { fen, moves } => position(Some(fen), moves),
            } {
                Ok(g) => s.game = Some(g),
                Err(e) => {
                    s.game = None;
                    say(&mut output, &format!("info string error: {e}"))?;
                }
            },
            Command::Go { .. } => {
                let Some(game) = &s.game else {
                    say(
                        &mut output,
                        "info string error: no valid position (send `position` first)",
                    )?;
                    say(&mut output, "bestmove 0000")?;
                    continue;
                };
                if game.outcome(None).is_some_and(|(_, t)| {
                    matches!(
                        t,
                        super::game::Termination::Checkmate | super::game::Termination::Stalemate
                    )
                }) {
                    say(&mut output, "info string the game is over: no legal moves")?;
                    say(&mut output, "bestmove 0000")?;
                    continue;
                }
                // One forward pass over this board's legal moves: its
                // latency is the move's `time` (ms).
                let started = std::time::Instant::now();
                match player.choose(game) {
                    Ok(m) => {
                        let ms = started.elapsed().as_millis();
                        let uci = m.to_uci(CastlingMode::Standard);
                        match player.last_score() {
                            Some(p) => say(
                                &mut output,
                                &format!(
                                    "info depth 1 score cp {} nodes 1 time {ms} pv {uci}",
                                    win_probability_to_centipawns(p)
                                ),
                            )?,
                            None => say(
                                &mut output,
                                &format!("info depth 1 nodes 1 time {ms} pv {uci}"),
                            )?,
                        }
                        say(&mut output, &format!("bestmove {uci}"))?;
                    }
                    // --require-fused: a fallback stops the engine, said
                    // to the GUI first.
                    Err(e @ PlayerError::Compute(crate::model::ComputeError::NotFused(_))) => {
                        say(&mut output, &format!("info string error: {e}"))?;
                        return Err(UciError::Model(e));
                    }
                    Err(e) => {
                        say(&mut output, &format!("info string error: {e}"))?;
                        say(&mut output, "bestmove 0000")?;
                    }
                }
            }
            Command::Stop
            | Command::PonderHit
            | Command::Debug(_)
            | Command::Register
            | Command::SetOption { .. } => {}
            Command::Quit => break,
        }
    }
    served.commands = commands;
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::predict::ordered_legal_moves;
    use shakmaty::Move;

    /// Plays the first legal move in UCI order: exercises the protocol, not
    /// a policy (the real model is driven in tests/it/eval.rs).
    struct First;
    impl Player for First {
        fn name(&self) -> &str {
            "first"
        }
        fn new_game(&mut self) -> Result<(), PlayerError> {
            Ok(())
        }
        fn choose(&mut self, game: &Game) -> Result<Move, PlayerError> {
            Ok(ordered_legal_moves(game.position())?[0].1)
        }
        fn last_score(&self) -> Option<f64> {
            Some(0.5)
        }
    }

    fn run(input: &str) -> String {
        let mut out = Vec::new();
        serve(&mut First, "test", input.as_bytes(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_summary_counts_commands_moves_and_refusals() {
        let mut out = Vec::new();
        let script = "uci\n\nposition startpos\ngo\nposition startpos moves e2e9\ngo\nfoo\nquit\n";
        let served = serve(&mut First, "test", script.as_bytes(), &mut out).unwrap();
        assert_eq!(served.engine, "test");
        // Blank lines are no command; `quit` is.
        assert_eq!(served.commands, 7);
        assert_eq!(served.moves, 1, "bestmove 0000 is no move");
        // The bad move, the `go` without a position, the unknown command.
        assert_eq!(served.errors, 3);
    }

    #[test]
    fn handshake_position_go() {
        let out = run(
            "uci\nisready\nucinewgame\nposition startpos moves e2e4 e7e5\ngo wtime 1000 btime 1000\nquit\ngo\n",
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "id name chessbench test");
        assert!(lines.contains(&"uciok") && lines.contains(&"readyok"));
        assert_eq!(lines.last(), Some(&"bestmove a2a3"));
        // The move's latency is reported as its `time` (ms).
        let info = out
            .lines()
            .find(|l| l.starts_with("info depth 1 score cp 0 nodes 1 time "))
            .unwrap_or_else(|| panic!("no info line with a time: {out}"));
        let ms: u64 = info.split(' ').nth(9).unwrap().parse().unwrap();
        assert!(ms < 60_000, "{info}");
        assert!(info.ends_with(" pv a2a3"), "{info}");
        assert_eq!(out.matches("bestmove").count(), 1, "nothing after quit");
    }

    #[test]
    fn bad_commands_get_errors_and_the_engine_keeps_answering() {
        let out = run(
            "position startpos moves e2e5\ngo\nfoo bar\nposition fen not a fen\nposition\nsetoption value 3\n\
             position fen 7k/5Q2/6K1/8/8/8/8/8 b - - 0 1\ngo\n\
             position fen 8/8/8/8/8/8/8/K6k w - - 0 1 moves a1b1\nisready\ngo\n",
        );
        assert!(
            out.contains("info string error: move 1 of the position command: e2e5 is not legal"),
            "{out}"
        );
        assert!(
            out.contains("info string error: malformed UCI line (unknown command): \"foo bar\"")
        );
        assert!(out.contains("invalid FEN"));
        assert!(out.contains("(expected `position startpos [moves ...]`"));
        assert!(out.contains("(expected `setoption name N [value V]`)"));
        assert!(out.contains("no legal moves"), "stalemate: {out}");
        assert!(out.contains("readyok"));
        assert!(out.trim_end().ends_with("bestmove h1g1"), "{out}");
    }

    /// Every `go` gets a `bestmove`, and a `position` that does not parse
    /// leaves no position to play in.
    #[test]
    fn every_go_is_answered_and_bad_positions_clear_the_last_one() {
        let out = run("position startpos\ngo perft 3\nposition startpos moves e2e9\ngo\n");
        let best: Vec<&str> = out.lines().filter(|l| l.starts_with("bestmove")).collect();
        assert_eq!(best, ["bestmove a2a3", "bestmove 0000"], "{out}");
    }

    #[test]
    fn centipawns_round_trip() {
        assert_eq!(win_probability_to_centipawns(0.5), 0);
        for cp in [-800, -120, 35, 600] {
            let p = centipawns_to_win_probability(f64::from(cp));
            assert_eq!(win_probability_to_centipawns(p), cp);
        }
    }
}
