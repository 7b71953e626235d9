//! The UCI protocol as typed values, both directions.
//!
//! Engine to GUI: every line parses into an [`EngineMessage`] (fishnet's
//! habit: no string matching outside this module). GUI to engine:
//! [`Command`] renders the lines chessbench sends to Stockfish, and parses
//! the lines a GUI sends to `chessbench uci`. Reference: the UCI
//! specification (Stefan Meyer-Kahlen, April 2006) and Stockfish's
//! `uci.cpp`.

use std::{borrow::Cow, fmt};

use shakmaty::uci::UciMove;
use thiserror::Error;

/// A score as the engine reports it, from the side to move's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Score {
    /// Centipawns.
    Cp(i32),
    /// Mate in N moves (N > 0: the side to move mates; N <= 0: it is mated).
    Mate(i32),
}

impl Score {
    /// A total order over scores, higher is better for the side to move:
    /// faster mates above slower ones above every centipawn score, and
    /// being mated later above being mated sooner.
    pub(crate) fn order_key(self) -> i64 {
        const MATE: i64 = 1 << 40;
        match self {
            Score::Mate(n) if n > 0 => MATE - i64::from(n),
            Score::Mate(n) => -MATE - i64::from(n),
            Score::Cp(cp) => i64::from(cp),
        }
    }
}

/// Whether a score is exact or only a bound (aspiration window fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bound {
    #[default]
    Exact,
    Lower,
    Upper,
}

/// An `info` line. Fields the engine did not send are `None` / empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    pub depth: Option<u32>,
    pub seldepth: Option<u32>,
    pub multipv: Option<u32>,
    pub score: Option<Score>,
    pub bound: Bound,
    pub nodes: Option<u64>,
    pub nps: Option<u64>,
    pub time_ms: Option<u64>,
    pub hashfull: Option<u32>,
    pub tbhits: Option<u64>,
    pub currmove: Option<UciMove>,
    pub pv: Vec<UciMove>,
    /// `info string ...`: free text for humans.
    pub string: Option<String>,
}

/// The type of an engine option (`option name N type T ...`).
#[derive(Debug, Clone, PartialEq)]
pub enum OptionKind {
    Check {
        default: Option<bool>,
    },
    Spin {
        default: Option<i64>,
        min: Option<i64>,
        max: Option<i64>,
    },
    Combo {
        default: Option<String>,
        vars: Vec<String>,
    },
    Button,
    String {
        default: Option<String>,
    },
}

/// An option the engine declares.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionDecl {
    pub name: String,
    pub kind: OptionKind,
}

/// One line from the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineMessage {
    IdName(String),
    IdAuthor(String),
    UciOk,
    ReadyOk,
    Option(OptionDecl),
    Info(Box<Info>),
    /// `bestmove M [ponder P]`; `None` for `(none)` / `0000` (no legal move).
    BestMove {
        best: Option<UciMove>,
        ponder: Option<UciMove>,
    },
    /// A line that is not UCI (banners such as "Stockfish 15.1 by ...").
    Unknown(String),
}

/// A malformed UCI line.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("malformed UCI line ({what}): {line:?}")]
pub struct ProtocolError {
    pub line: String,
    pub what: &'static str,
}

fn err(line: &str, what: &'static str) -> ProtocolError {
    ProtocolError {
        line: line.chars().take(200).collect(),
        what,
    }
}

fn num<T: std::str::FromStr>(
    line: &str,
    token: Option<&str>,
    what: &'static str,
) -> Result<T, ProtocolError> {
    token
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| err(line, what))
}

fn uci_move(line: &str, token: Option<&str>) -> Result<UciMove, ProtocolError> {
    token
        .and_then(|t| UciMove::from_ascii(t.as_bytes()).ok())
        .ok_or_else(|| err(line, "bad move"))
}

impl EngineMessage {
    /// Parses one line (without its line terminator).
    pub(crate) fn parse(line: &str) -> Result<EngineMessage, ProtocolError> {
        let line = line.trim_end_matches(['\r', '\n']);
        let mut tokens = line.split_ascii_whitespace();
        match tokens.next() {
            Some("info") => parse_info(line, tokens).map(|i| EngineMessage::Info(Box::new(i))),
            Some("bestmove") => {
                let best = match tokens.next() {
                    Some("(none)" | "0000") => None,
                    t @ Some(_) => Some(uci_move(line, t)?),
                    None => return Err(err(line, "bestmove without a move")),
                };
                let ponder = match (tokens.next(), tokens.next()) {
                    (Some("ponder"), Some("(none)" | "0000")) => None,
                    (Some("ponder"), t @ Some(_)) => Some(uci_move(line, t)?),
                    (None, _) => None,
                    _ => return Err(err(line, "unexpected tokens after bestmove")),
                };
                Ok(EngineMessage::BestMove { best, ponder })
            }
            Some("uciok") => Ok(EngineMessage::UciOk),
            Some("readyok") => Ok(EngineMessage::ReadyOk),
            Some("id") => {
                let rest = |key: &str| {
                    line.trim_start()
                        .strip_prefix("id")
                        .map(str::trim_start)
                        .and_then(|r| r.strip_prefix(key))
                        .map(|r| r.trim().to_owned())
                        .unwrap_or_default()
                };
                match tokens.next() {
                    Some("name") => Ok(EngineMessage::IdName(rest("name"))),
                    Some("author") => Ok(EngineMessage::IdAuthor(rest("author"))),
                    _ => Ok(EngineMessage::Unknown(line.to_owned())),
                }
            }
            Some("option") => parse_option(line).map(EngineMessage::Option),
            _ => Ok(EngineMessage::Unknown(line.to_owned())),
        }
    }
}

fn parse_info<'a>(
    line: &str,
    mut tokens: impl Iterator<Item = &'a str>,
) -> Result<Info, ProtocolError> {
    let mut info = Info::default();
    while let Some(token) = tokens.next() {
        match token {
            "depth" => info.depth = Some(num(line, tokens.next(), "depth")?),
            "seldepth" => info.seldepth = Some(num(line, tokens.next(), "seldepth")?),
            "multipv" => info.multipv = Some(num(line, tokens.next(), "multipv")?),
            "nodes" => info.nodes = Some(num(line, tokens.next(), "nodes")?),
            "nps" => info.nps = Some(num(line, tokens.next(), "nps")?),
            "time" => info.time_ms = Some(num(line, tokens.next(), "time")?),
            "hashfull" => info.hashfull = Some(num(line, tokens.next(), "hashfull")?),
            "tbhits" => info.tbhits = Some(num(line, tokens.next(), "tbhits")?),
            "sbhits" | "cpuload" | "currmovenumber" => {
                let _: i64 = num(line, tokens.next(), "number")?;
            }
            "currmove" => info.currmove = Some(uci_move(line, tokens.next())?),
            "score" => {
                info.score = Some(match tokens.next() {
                    Some("cp") => Score::Cp(num(line, tokens.next(), "score cp")?),
                    Some("mate") => Score::Mate(num(line, tokens.next(), "score mate")?),
                    _ => return Err(err(line, "score without cp or mate")),
                });
            }
            "lowerbound" => info.bound = Bound::Lower,
            "upperbound" => info.bound = Bound::Upper,
            "wdl" => {
                for _ in 0..3 {
                    let _: u32 = num(line, tokens.next(), "wdl")?;
                }
            }
            "pv" => {
                for t in tokens.by_ref() {
                    info.pv.push(uci_move(line, Some(t))?);
                }
            }
            "string" => {
                let text = line
                    .split_once(" string")
                    .map(|(_, r)| r.trim().to_owned())
                    .unwrap_or_default();
                info.string = Some(text);
                break;
            }
            // Move lists we do not use; they run to the end of the line.
            "refutation" | "currline" => break,
            _ => return Err(err(line, "unknown info field")),
        }
    }
    Ok(info)
}

fn parse_option(line: &str) -> Result<OptionDecl, ProtocolError> {
    // option name <words...> type <t> [default <words...>] [min n] [max n] [var <words>]*
    let rest = line
        .trim_start()
        .strip_prefix("option")
        .and_then(|r| r.trim_start().strip_prefix("name"))
        .ok_or_else(|| err(line, "option without name"))?;
    let (name, rest) = rest
        .split_once(" type ")
        .ok_or_else(|| err(line, "option without type"))?;
    let mut words = rest.split_ascii_whitespace();
    let kind = words
        .next()
        .ok_or_else(|| err(line, "option without type"))?;
    // Split the remainder into (keyword, value words) pairs.
    let mut fields: Vec<(&str, String)> = Vec::new();
    for w in words {
        match w {
            "default" | "min" | "max" | "var" => fields.push((w, String::new())),
            _ => match fields.last_mut() {
                Some((_, v)) => {
                    if !v.is_empty() {
                        v.push(' ');
                    }
                    v.push_str(w);
                }
                None => return Err(err(line, "option value without keyword")),
            },
        }
    }
    let get = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    };
    let int = |key: &str| get(key).and_then(|v| v.parse::<i64>().ok());
    let default_string = get("default").filter(|v| v != "<empty>");
    let kind = match kind {
        "check" => OptionKind::Check {
            default: get("default").map(|v| v == "true"),
        },
        "spin" => OptionKind::Spin {
            default: int("default"),
            min: int("min"),
            max: int("max"),
        },
        "combo" => OptionKind::Combo {
            default: default_string,
            vars: fields
                .iter()
                .filter(|(k, _)| *k == "var")
                .map(|(_, v)| v.clone())
                .collect(),
        },
        "button" => OptionKind::Button,
        "string" => OptionKind::String {
            default: default_string,
        },
        _ => return Err(err(line, "unknown option type")),
    };
    Ok(OptionDecl {
        name: name.trim().to_owned(),
        kind,
    })
}

/// Limits of one search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `go movetime MS` (the paper: 50 ms per move).
    MoveTimeMs(u64),
    /// `go nodes N`: deterministic with one thread and a cleared hash.
    Nodes(u64),
    /// `go depth D`.
    Depth(u32),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::MoveTimeMs(ms) => write!(f, "movetime {ms}"),
            Limit::Nodes(n) => write!(f, "nodes {n}"),
            Limit::Depth(d) => write!(f, "depth {d}"),
        }
    }
}

/// The position a search starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position<'a> {
    StartPos {
        moves: Cow<'a, [UciMove]>,
    },
    Fen {
        fen: Cow<'a, str>,
        moves: Cow<'a, [UciMove]>,
    },
}

impl<'a> Position<'a> {
    /// `position fen FEN [moves ...]`.
    pub(crate) fn fen(fen: &'a str, moves: &'a [UciMove]) -> Position<'a> {
        Position::Fen {
            fen: Cow::Borrowed(fen),
            moves: Cow::Borrowed(moves),
        }
    }

    /// `position startpos [moves ...]`.
    pub fn startpos(moves: &'a [UciMove]) -> Position<'a> {
        Position::StartPos {
            moves: Cow::Borrowed(moves),
        }
    }
}

/// A line to the engine: what chessbench sends Stockfish, and what a GUI
/// sends `chessbench uci` ([`Command::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    Uci,
    /// `debug on|off`.
    Debug(bool),
    IsReady,
    SetOption {
        name: Cow<'a, str>,
        value: Option<Cow<'a, str>>,
    },
    /// `register ...` (nothing to register here).
    Register,
    UciNewGame,
    Position(Position<'a>),
    /// `go`: a fixed limit if one was given (clock and `infinite` tokens are
    /// accepted and carry no limit), and the moves to restrict the search to.
    Go {
        limit: Option<Limit>,
        searchmoves: Cow<'a, [UciMove]>,
    },
    Stop,
    PonderHit,
    Quit,
}

impl Command<'static> {
    /// Parses a line a GUI sends (`None` for a blank line). Moves are
    /// checked for syntax here and for legality by whoever plays them.
    pub(crate) fn parse(line: &str) -> Result<Option<Command<'static>>, ProtocolError> {
        let line = line.trim_end_matches(['\r', '\n']);
        let tokens: Vec<&str> = line.split_ascii_whitespace().collect();
        let Some((&first, rest)) = tokens.split_first() else {
            return Ok(None);
        };
        let moves = |tokens: &[&str]| -> Result<Vec<UciMove>, ProtocolError> {
            tokens.iter().map(|t| uci_move(line, Some(t))).collect()
        };
        Ok(Some(match first {
            "uci" => Command::Uci,
            "debug" => Command::Debug(rest.first() != Some(&"off")),
            "isready" => Command::IsReady,
            "register" => Command::Register,
            "ucinewgame" => Command::UciNewGame,
            "stop" => Command::Stop,
            "ponderhit" => Command::PonderHit,
            "quit" => Command::Quit,
            "setoption" => {
                if rest.first() != Some(&"name") {
                    return Err(err(line, "expected `setoption name N [value V]`"));
                }
                let v = rest.iter().position(|&t| t == "value");
                let name = rest[1..v.unwrap_or(rest.len())].join(" ");
                let value = v.map(|i| Cow::Owned(rest[i + 1..].join(" ")));
                Command::SetOption {
                    name: Cow::Owned(name),
                    value,
                }
            }
            "position" => {
                let m = rest.iter().position(|&t| t == "moves");
                let moves =
                    Cow::Owned(m.map_or_else(|| Ok(Vec::new()), |i| moves(&rest[i + 1..]))?);
                let head = &rest[..m.unwrap_or(rest.len())];
                Command::Position(match head.first() {
                    Some(&"startpos") if head.len() == 1 => Position::StartPos { moves },
                    Some(&"fen") if head.len() >= 2 => Position::Fen {
                        fen: Cow::Owned(head[1..].join(" ")),
                        moves,
                    },
                    _ => {
                        return Err(err(
                            line,
                            "expected `position startpos [moves ...]` or `position fen FEN [moves ...]`",
                        ));
                    }
                })
            }
            "go" => {
                // A GUI waits for `bestmove` after any `go`: parameters this
                // side does not use (clocks, `infinite`, unknown or
                // malformed ones) are skipped, never an error.
                let mut limit = None;
                let mut searchmoves = Vec::new();
                let mut i = 0;
                while i < rest.len() {
                    let value = rest.get(i + 1).and_then(|v| v.parse::<u64>().ok());
                    match rest[i] {
                        "nodes" => limit = value.map(Limit::Nodes).or(limit),
                        "depth" => {
                            let depth = value.and_then(|d| u32::try_from(d).ok());
                            limit = depth.map(Limit::Depth).or(limit);
                        }
                        "movetime" => limit = value.map(Limit::MoveTimeMs).or(limit),
                        "searchmoves" => {
                            searchmoves = rest[i + 1..]
                                .iter()
                                .map_while(|t| UciMove::from_ascii(t.as_bytes()).ok())
                                .collect();
                            i += 1 + searchmoves.len();
                            continue;
                        }
                        _ => {}
                    }
                    i += 1;
                }
                Command::Go {
                    limit,
                    searchmoves: Cow::Owned(searchmoves),
                }
            }
            _ => return Err(err(line, "unknown command")),
        }))
    }
}

impl fmt::Display for Command<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let moves = |f: &mut fmt::Formatter<'_>, moves: &[UciMove]| -> fmt::Result {
            if !moves.is_empty() {
                f.write_str(" moves")?;
                for m in moves {
                    write!(f, " {m}")?;
                }
            }
            Ok(())
        };
        match self {
            Command::Uci => f.write_str("uci"),
            Command::Debug(on) => f.write_str(if *on { "debug on" } else { "debug off" }),
            Command::IsReady => f.write_str("isready"),
            Command::Register => f.write_str("register later"),
            Command::PonderHit => f.write_str("ponderhit"),
            Command::SetOption { name, value } => {
                write!(f, "setoption name {name}")?;
                if let Some(v) = value {
                    write!(f, " value {v}")?;
                }
                Ok(())
            }
            Command::UciNewGame => f.write_str("ucinewgame"),
            Command::Position(Position::StartPos { moves: m }) => {
                f.write_str("position startpos")?;
                moves(f, m)
            }
            Command::Position(Position::Fen { fen, moves: m }) => {
                write!(f, "position fen {fen}")?;
                moves(f, m)
            }
            Command::Go { limit, searchmoves } => {
                f.write_str("go")?;
                if let Some(limit) = limit {
                    write!(f, " {limit}")?;
                }
                if !searchmoves.is_empty() {
                    f.write_str(" searchmoves")?;
                    for m in searchmoves.iter() {
                        write!(f, " {m}")?;
                    }
                }
                Ok(())
            }
            Command::Stop => f.write_str("stop"),
            Command::Quit => f.write_str("quit"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(s: &str) -> UciMove {
        UciMove::from_ascii(s.as_bytes()).unwrap()
    }

    #[test]
    fn parses_stockfish_info_lines() {
        let m = EngineMessage::parse(
            "info depth 12 seldepth 17 multipv 2 score cp -31 upperbound nodes 81234 nps 1021000 hashfull 12 tbhits 0 time 79 pv e7e5 g1f3 b8c6",
        )
        .unwrap();
        let EngineMessage::Info(info) = m else {
            panic!("{m:?}")
        };
        assert_eq!(info.depth, Some(12));
        assert_eq!(info.seldepth, Some(17));
        assert_eq!(info.multipv, Some(2));
        assert_eq!(info.score, Some(Score::Cp(-31)));
        assert_eq!(info.bound, Bound::Upper);
        assert_eq!(info.nodes, Some(81234));
        assert_eq!(info.time_ms, Some(79));
        assert_eq!(info.pv, vec![mv("e7e5"), mv("g1f3"), mv("b8c6")]);

        let EngineMessage::Info(info) =
            EngineMessage::parse("info depth 3 score mate -2 nodes 10 pv a1a8").unwrap()
        else {
            panic!()
        };
        assert_eq!(info.score, Some(Score::Mate(-2)));
        assert_eq!(info.bound, Bound::Exact);
        let EngineMessage::Info(info) =
            EngineMessage::parse("info string NNUE evaluation using nn.nnue enabled").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            info.string.as_deref(),
            Some("NNUE evaluation using nn.nnue enabled")
        );
        let EngineMessage::Info(info) = EngineMessage::parse(
            "info depth 1 seldepth 1 multipv 1 score cp 20 wdl 50 900 50 nodes 20 nps 10000 time 2 pv e2e4",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(info.score, Some(Score::Cp(20)));
    }

    #[test]
    fn parses_the_other_messages() {
        assert_eq!(
            EngineMessage::parse("id name Stockfish 15.1").unwrap(),
            EngineMessage::IdName("Stockfish 15.1".into())
        );
        assert_eq!(
            EngineMessage::parse("bestmove e2e4 ponder e7e5").unwrap(),
            EngineMessage::BestMove {
                best: Some(mv("e2e4")),
                ponder: Some(mv("e7e5"))
            }
        );
        assert_eq!(
            EngineMessage::parse("bestmove (none)").unwrap(),
            EngineMessage::BestMove {
                best: None,
                ponder: None
            }
        );
        assert_eq!(
            EngineMessage::parse("uciok\r").unwrap(),
            EngineMessage::UciOk
        );
        assert_eq!(
            EngineMessage::parse("option name Hash type spin default 16 min 1 max 33554432")
                .unwrap(),
            EngineMessage::Option(OptionDecl {
                name: "Hash".into(),
                kind: OptionKind::Spin {
                    default: Some(16),
                    min: Some(1),
                    max: Some(33554432)
                }
            })
        );
        assert_eq!(
            EngineMessage::parse("option name Debug Log File type string default <empty>").unwrap(),
            EngineMessage::Option(OptionDecl {
                name: "Debug Log File".into(),
                kind: OptionKind::String { default: None }
            })
        );
        assert!(matches!(
            EngineMessage::parse("Stockfish 15.1 by the Stockfish developers").unwrap(),
            EngineMessage::Unknown(_)
        ));
    }

    #[test]
    fn rejects_garbage() {
        for line in [
            "info depth x",
            "info score cp",
            "info score 12",
            "info depth 3 frobnicate 7",
            "info pv e2e9",
            "bestmove",
            "bestmove zz",
            "option name X type nonsense",
        ] {
            assert!(EngineMessage::parse(line).is_err(), "{line}");
        }
    }

    #[test]
    fn renders_commands() {
        let moves = [mv("e2e4"), mv("e7e5")];
        assert_eq!(
            Command::Position(Position::fen("8/8/8/8/8/8/8/K6k w - - 0 1", &moves)).to_string(),
            "position fen 8/8/8/8/8/8/8/K6k w - - 0 1 moves e2e4 e7e5"
        );
        assert_eq!(
            Command::Go {
                limit: Some(Limit::Nodes(1000)),
                searchmoves: Cow::Borrowed(&moves[..1])
            }
            .to_string(),
            "go nodes 1000 searchmoves e2e4"
        );
        assert_eq!(
            Command::SetOption {
                name: "Hash".into(),
                value: Some("16".into())
            }
            .to_string(),
            "setoption name Hash value 16"
        );
    }

    /// What a GUI sends parses into the same values chessbench sends, and
    /// renders back to the same line.
    #[test]
    fn parses_gui_commands() {
        for line in [
            "uci",
            "isready",
            "ucinewgame",
            "position startpos",
            "position startpos moves e2e4 e7e5",
            "position fen 8/8/8/8/8/8/8/K6k w - - 0 1 moves a1b1",
            "go nodes 1000 searchmoves e2e4 d2d4",
            "go depth 3",
            "setoption name Skill Level value 3",
            "stop",
            "quit",
        ] {
            let c = Command::parse(line).unwrap().unwrap();
            assert_eq!(c.to_string(), line);
        }
        assert_eq!(Command::parse("  ").unwrap(), None);
        assert_eq!(
            Command::parse("go wtime 1000 btime 1000 winc 0 binc 0").unwrap(),
            Some(Command::Go {
                limit: None,
                searchmoves: Cow::Owned(Vec::new())
            })
        );
        for lenient in ["go infinite", "go nodes x", "go frobnicate 3", "go perft 3"] {
            assert_eq!(
                Command::parse(lenient).unwrap().unwrap().to_string(),
                "go",
                "{lenient}"
            );
        }
        assert_eq!(
            Command::parse("go searchmoves e2e4 d2d4 depth 3")
                .unwrap()
                .unwrap()
                .to_string(),
            "go depth 3 searchmoves e2e4 d2d4"
        );
        for bad in [
            "foo bar",
            "position",
            "position fen",
            "position startpos moves e2e9",
            "setoption value 3",
        ] {
            assert!(Command::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn score_order() {
        let mut s = [
            Score::Cp(10),
            Score::Mate(3),
            Score::Mate(-1),
            Score::Mate(1),
            Score::Cp(-500),
            Score::Mate(-4),
        ];
        s.sort_by_key(|s| std::cmp::Reverse(s.order_key()));
        assert_eq!(
            s,
            [
                Score::Mate(1),
                Score::Mate(3),
                Score::Cp(10),
                Score::Cp(-500),
                Score::Mate(-4),
                Score::Mate(-1)
            ]
        );
    }
}
