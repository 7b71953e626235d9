//! `chessbench uci`: a trained model as a UCI engine (for GUIs, cutechess,
//! lichess-bot). One `go` = one forward pass over the legal moves; time
//! controls and limits are accepted and ignored (the policy does not
//! search). Bad commands are answered with `info string error: ...` and the
//! engine keeps going.

use std::io::{BufRead, Write};

use shakmaty::{CastlingMode, Chess};

use super::{
    EvalError,
    game::{Game, parse_fen},
    policy::Player,
};
use crate::chess::value::centipawns_to_win_probability;

/// A UCI command as the server understands it.
#[derive(Debug, Clone, PartialEq)]
pub enum UciCommand {
    Uci,
    IsReady,
    NewGame,
    /// `position startpos|fen F [moves ...]`: the start FEN (None for
    /// startpos) and the moves, as text (checked when applied).
    Position {
        fen: Option<String>,
        moves: Vec<String>,
    },
    Go,
    Stop,
    Quit,
    SetOption {
        name: String,
        value: Option<String>,
    },
    /// Commands that need no answer (`debug`, `register`, `ponderhit`).
    Ignored,
    Empty,
}

/// Parses one line (UCI tolerates unknown leading tokens; we report them).
pub fn parse_command(line: &str) -> Result<UciCommand, String> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let Some(&first) = tokens.first() else {
        return Ok(UciCommand::Empty);
    };
    Ok(match first {
        "uci" => UciCommand::Uci,
        "isready" => UciCommand::IsReady,
        "ucinewgame" => UciCommand::NewGame,
        "go" => UciCommand::Go,
        "stop" => UciCommand::Stop,
        "quit" => UciCommand::Quit,
        "debug" | "register" | "ponderhit" => UciCommand::Ignored,
        "setoption" => {
            let rest = &tokens[1..];
            if rest.first() != Some(&"name") {
                return Err("setoption: expected `setoption name N [value V]`".into());
            }
            let v = rest.iter().position(|&t| t == "value");
            let name = rest[1..v.unwrap_or(rest.len())].join(" ");
            let value = v.map(|i| rest[i + 1..].join(" "));
            UciCommand::SetOption { name, value }
        }
        "position" => {
            let rest = &tokens[1..];
            let m = rest.iter().position(|&t| t == "moves");
            let moves = m.map_or_else(Vec::new, |i| {
                rest[i + 1..].iter().map(|s| (*s).to_owned()).collect()
            });
            let head = &rest[..m.unwrap_or(rest.len())];
            let fen = match head.first() {
                Some(&"startpos") if head.len() == 1 => None,
                Some(&"fen") if head.len() >= 2 => Some(head[1..].join(" ")),
                _ => {
                    return Err(
                        "position: expected `position startpos [moves ...]` or `position fen FEN [moves ...]`"
                            .into(),
                    );
                }
            };
            UciCommand::Position { fen, moves }
        }
        other => return Err(format!("unknown command {other:?}")),
    })
}

/// Inverse of the paper's win-probability formula, for `info score cp`.
pub fn win_probability_to_centipawns(p: f64) -> i32 {
    let p = p.clamp(1e-6, 1.0 - 1e-6);
    // p = 1 / (1 + exp(-a cp))  =>  cp = ln(p / (1 - p)) / a
    let a = 0.003_682_08;
    let cp = (p / (1.0 - p)).ln() / a;
    debug_assert!((centipawns_to_win_probability(cp) - p).abs() < 1e-9);
    cp.round() as i32
}

/// The engine's state between commands.
struct Session {
    game: Option<Game>,
}

fn position(fen: Option<&str>, moves: &[String]) -> Result<Game, String> {
    let start: Chess = match fen {
        None => Chess::default(),
        Some(f) => parse_fen(f)?,
    };
    let mut game = Game::new(start);
    for (i, m) in moves.iter().enumerate() {
        game.play_uci(m)
            .map_err(|e| format!("move {} of the position command: {e}", i + 1))?;
    }
    Ok(game)
}

/// Serves UCI on `input`/`output` until `quit` or end of input.
pub fn serve(
    player: &mut dyn Player,
    name: &str,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<(), EvalError> {
    let io = |e: std::io::Error| EvalError::Io {
        path: "(uci stdout)".into(),
        source: e,
    };
    let mut s = Session { game: None };
    let say = |out: &mut dyn Write, text: &str| -> Result<(), EvalError> {
        writeln!(out, "{text}").map_err(io)?;
        out.flush().map_err(io)
    };
    for line in input.lines() {
        let line = line.map_err(|e| EvalError::Io {
            path: "(uci stdin)".into(),
            source: e,
        })?;
        let cmd = match parse_command(&line) {
            Ok(c) => c,
            Err(e) => {
                say(&mut output, &format!("info string error: {e}"))?;
                continue;
            }
        };
        match cmd {
            UciCommand::Uci => {
                say(&mut output, &format!("id name chessbench {name}"))?;
                say(&mut output, "id author chessbench")?;
                say(&mut output, "uciok")?;
            }
            UciCommand::IsReady => say(&mut output, "readyok")?,
            UciCommand::NewGame => {
                s.game = None;
                player.new_game()?;
            }
            UciCommand::Position { fen, moves } => match position(fen.as_deref(), &moves) {
                Ok(g) => s.game = Some(g),
                Err(e) => {
                    s.game = None;
                    say(&mut output, &format!("info string error: {e}"))?;
                }
            },
            UciCommand::Go => {
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
                match player.choose(game) {
                    Ok(m) => {
                        let uci = m.to_uci(CastlingMode::Standard);
                        if let Some(p) = player.last_score() {
                            say(
                                &mut output,
                                &format!(
                                    "info depth 1 score cp {} nodes 1 pv {uci}",
                                    win_probability_to_centipawns(p)
                                ),
                            )?;
                        }
                        say(&mut output, &format!("bestmove {uci}"))?;
                    }
                    Err(e) => {
                        say(&mut output, &format!("info string error: {e}"))?;
                        say(&mut output, "bestmove 0000")?;
                    }
                }
            }
            UciCommand::Stop | UciCommand::Ignored | UciCommand::Empty => {}
            UciCommand::SetOption { .. } => {}
            UciCommand::Quit => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::policy::ordered_legal_moves;
    use shakmaty::Move;

    /// Plays the first legal move in UCI order: exercises the protocol, not
    /// a policy (the real model is driven in tests/it/eval.rs).
    struct First;
    impl Player for First {
        fn name(&self) -> &str {
            "first"
        }
        fn new_game(&mut self) -> Result<(), EvalError> {
            Ok(())
        }
        fn choose(&mut self, game: &Game) -> Result<Move, EvalError> {
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
    fn handshake_position_go() {
        let out = run(
            "uci\nisready\nucinewgame\nposition startpos moves e2e4 e7e5\ngo wtime 1000 btime 1000\nquit\ngo\n",
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "id name chessbench test");
        assert!(lines.contains(&"uciok") && lines.contains(&"readyok"));
        assert_eq!(lines.last(), Some(&"bestmove a2a3"));
        assert!(out.contains("info depth 1 score cp 0 nodes 1 pv a2a3"));
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
        assert!(out.contains("info string error: unknown command \"foo\""));
        assert!(out.contains("invalid FEN"));
        assert!(out.contains("info string error: position: expected"));
        assert!(out.contains("info string error: setoption"));
        assert!(out.contains("no legal moves"), "stalemate: {out}");
        assert!(out.contains("readyok"));
        assert!(out.trim_end().ends_with("bestmove h1g1"), "{out}");
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
