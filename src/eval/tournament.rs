//! Games between a model and opponents (Stockfish at fixed limits, other
//! checkpoints) from ECO openings, each opening played twice with colours
//! swapped, written as PGN and rated with [`super::elo`].
//!
//! Games end as in searchless_chess's `tournament.py`: by the rules of
//! [`Game::outcome`] or, after any move, by Stockfish's adjudication
//! ([`Adjudicator`]: a mate score or more than 1300 centipawns either way,
//! searched for 10 ms there, ends the game as a win for that side).

use std::{
    fmt,
    path::{Path, PathBuf},
    str::FromStr,
};

use serde::Serialize;
use shakmaty::{Chess, Move, Position};

use super::{
    elo::GameRecord,
    error::{EvalConfigError, EvalError, PlayerError},
    game::{Game, GameResult, Termination, fen_of},
    policy::{ENGINE_TIMEOUT, Player, search_game},
    puzzles::play_pgn,
};
use crate::uci_client::{Engine, EngineConfig, Limit, Score};

/// searchless_chess's adjudication threshold (`_MIN_SCORE_TO_STOP`).
pub(crate) const ADJUDICATION_CP: i32 = 1300;

/// What Stockfish's evaluation of a position (side to move's view) says
/// about the game: `Some(true)` the side to move wins, `Some(false)` it
/// loses, `None` play on. A mate score always decides (`mate 0`, the side
/// to move is mated, loses); a centipawn score decides beyond
/// `threshold_cp` either way.
pub(crate) fn adjudicate(score: Score, threshold_cp: i32) -> Option<bool> {
    match score {
        Score::Mate(n) => Some(n > 0),
        Score::Cp(cp) if cp.abs() > threshold_cp => Some(cp > 0),
        Score::Cp(_) => None,
    }
}

/// Stockfish watching a game and stopping it once it is decided.
pub(crate) struct Adjudicator {
    engine: Engine,
    limit: Limit,
    threshold_cp: i32,
}

impl Adjudicator {
    pub(crate) fn start(
        config: &EngineConfig,
        limit: Limit,
        threshold_cp: i32,
    ) -> Result<Adjudicator, EvalError> {
        let engine = Engine::start(config).map_err(|e| PlayerError::engine("starting", e))?;
        Ok(Adjudicator {
            engine,
            limit,
            threshold_cp,
        })
    }

    /// The adjudicated result of `game` after its last move, if any. A
    /// position without legal moves is left to the rules (checkmate gives
    /// the same result; stalemate scores 0 and is a draw).
    pub(crate) fn verdict(&mut self, game: &Game) -> Result<Option<GameResult>, EvalError> {
        if game.position().legal_moves().is_empty() {
            return Ok(None);
        }
        let r = search_game(&mut self.engine, game, self.limit, &[], "adjudicating")?;
        let Some(line) = r.best() else {
            return Ok(None);
        };
        Ok(adjudicate(line.score, self.threshold_cp).map(|mover_wins| {
            match (game.position().turn().is_white(), mover_wins) {
                (true, true) | (false, false) => GameResult::WhiteWins,
                _ => GameResult::BlackWins,
            }
        }))
    }

    pub(crate) fn new_game(&mut self) -> Result<(), EvalError> {
        self.engine
            .new_game(ENGINE_TIMEOUT)
            .map_err(|e| PlayerError::engine("ucinewgame", e).into())
    }
}

/// An opening: a name and its moves from the standard start.
#[derive(Debug, Clone)]
pub(crate) struct Opening {
    pub name: String,
    pub moves: Vec<Move>,
}

/// A few common openings, used when no openings file is given.
pub(crate) const BUILTIN_OPENINGS: &[(&str, &str)] = &[
    ("C60 Ruy Lopez", "1. e4 e5 2. Nf3 Nc6 3. Bb5"),
    ("B20 Sicilian Defence", "1. e4 c5"),
    ("C00 French Defence", "1. e4 e6"),
    ("B10 Caro-Kann Defence", "1. e4 c6"),
    ("D06 Queen's Gambit", "1. d4 d5 2. c4"),
    ("E60 King's Indian Defence", "1. d4 Nf6 2. c4 g6"),
    ("A10 English Opening", "1. c4"),
    ("A04 Zukertort Opening", "1. Nf3"),
];

/// Reads openings: a PGN file of games (`eco_openings.pgn`; the main line
/// of each) or the Lichess openings TSV (`eco`, `name`, `pgn` columns).
/// Takes `count` spread evenly over the file (all when `count` is 0).
pub(crate) fn read_openings(path: Option<&Path>, count: usize) -> Result<Vec<Opening>, EvalError> {
    let err = |path: &Path, message: String| EvalError::Openings {
        path: path.to_owned(),
        message,
    };
    let mut all = Vec::new();
    match path {
        None => {
            for (name, pgn) in BUILTIN_OPENINGS {
                let (_, moves) =
                    play_pgn(pgn).map_err(|m| err(Path::new("(built-in)"), m.to_string()))?;
                all.push(Opening {
                    name: (*name).to_owned(),
                    moves,
                });
            }
        }
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()))?;
            if text.starts_with("eco\t") {
                for (i, line) in text.lines().enumerate().skip(1) {
                    let f: Vec<&str> = line.split('\t').collect();
                    if f.len() < 3 {
                        return Err(err(
                            path,
                            format!("line {}: expected eco, name, pgn", i + 1),
                        ));
                    }
                    let (_, moves) =
                        play_pgn(f[2]).map_err(|m| err(path, format!("line {}: {m}", i + 1)))?;
                    all.push(Opening {
                        name: format!("{} {}", f[0], f[1]),
                        moves,
                    });
                }
            } else {
                // Games are separated by their first header after movetext.
                let mut current = String::new();
                let mut start_line = 1;
                let mut in_moves = false;
                let mut flush = |current: &mut String, line: usize| -> Result<(), EvalError> {
                    if current.trim().is_empty() {
                        return Ok(());
                    }
                    let (_, moves) = play_pgn(current)
                        .map_err(|m| err(path, format!("game at line {line}: {m}")))?;
                    let name = current
                        .lines()
                        .find_map(|l| {
                            l.strip_prefix("[Opening \"")
                                .or_else(|| l.strip_prefix("[ECO \""))
                                .map(|s| s.trim_end_matches(']').trim_end_matches('"').to_owned())
                        })
                        .unwrap_or_else(|| format!("line {line}"));
                    all.push(Opening { name, moves });
                    current.clear();
                    Ok(())
                };
                for (i, line) in text.lines().enumerate() {
                    let header = line.trim_start().starts_with('[');
                    if header && in_moves {
                        flush(&mut current, start_line)?;
                        in_moves = false;
                        start_line = i + 1;
                    }
                    if !header && !line.trim().is_empty() {
                        in_moves = true;
                    }
                    current.push_str(line);
                    current.push('\n');
                }
                flush(&mut current, start_line)?;
                // Unnamed openings are named by their moves.
                for o in &mut all {
                    if o.name.starts_with("line ") {
                        let g = {
                            let mut g = Game::new(Chess::default());
                            for m in &o.moves {
                                g.play(m);
                            }
                            g
                        };
                        let pgn = g.pgn(&[], "*");
                        // One line: the name goes into PGN headers and CSV.
                        o.name = pgn
                            .trim()
                            .trim_end_matches('*')
                            .split_whitespace()
                            .collect::<Vec<_>>()
                            .join(" ");
                    }
                }
            }
        }
    }
    if all.is_empty() {
        return Err(err(
            path.unwrap_or(Path::new("(built-in)")),
            "no openings".into(),
        ));
    }
    if count == 0 || count >= all.len() {
        return Ok(all);
    }
    Ok((0..count)
        .map(|i| all[i * all.len() / count].clone())
        .collect())
}

/// An opponent, as written in pipeline files and on the command line:
/// `stockfish:nodes=1000`, `stockfish:skill=3,depth=8`,
/// `stockfish:movetime_ms=50`, or `checkpoint:PATH`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Opponent {
    Stockfish { limit: Limit, skill: Option<i32> },
    Checkpoint(PathBuf),
}

/// An opponent spec that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{spec:?}: {reason} (expected stockfish:nodes=N, stockfish:skill=S[,nodes=N|depth=D|movetime_ms=MS] or checkpoint:PATH)"
)]
pub struct SpecError {
    pub spec: String,
    pub reason: &'static str,
}

impl FromStr for Opponent {
    type Err = SpecError;
    fn from_str(spec: &str) -> Result<Opponent, SpecError> {
        let bad = |reason| SpecError {
            spec: spec.to_owned(),
            reason,
        };
        if let Some(path) = spec.strip_prefix("checkpoint:") {
            return Ok(Opponent::Checkpoint(PathBuf::from(path)));
        }
        let Some(rest) = spec.strip_prefix("stockfish:") else {
            return Err(bad("unknown kind"));
        };
        let (mut limit, mut skill) = (None, None);
        for kv in rest.split(',') {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad("expected key=value"))?;
            let num = |v: &str| v.trim().parse::<u64>().map_err(|_| bad("not a number"));
            match k.trim() {
                "nodes" => limit = Some(Limit::Nodes(num(v)?)),
                "depth" => limit = Some(Limit::Depth(num(v)? as u32)),
                "movetime_ms" => limit = Some(Limit::MoveTimeMs(num(v)?)),
                "skill" => {
                    let s = num(v)?;
                    if s > 20 {
                        return Err(bad("Skill Level is 0..=20"));
                    }
                    skill = Some(s as i32);
                }
                _ => return Err(bad("unknown key")),
            }
        }
        let limit = match (limit, skill) {
            (Some(l), _) => l,
            // Skill levels need some search to weaken.
            (None, Some(_)) => Limit::Depth(10),
            (None, None) => return Err(bad("no limit")),
        };
        Ok(Opponent::Stockfish { limit, skill })
    }
}

impl fmt::Display for Opponent {
    /// The spec, as [`Opponent::from_str`] reads it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Opponent::Stockfish { limit, skill } => {
                f.write_str("stockfish:")?;
                if let Some(s) = skill {
                    write!(f, "skill={s},")?;
                }
                match limit {
                    Limit::Nodes(n) => write!(f, "nodes={n}"),
                    Limit::Depth(d) => write!(f, "depth={d}"),
                    Limit::MoveTimeMs(ms) => write!(f, "movetime_ms={ms}"),
                }
            }
            Opponent::Checkpoint(p) => write!(f, "checkpoint:{}", p.display()),
        }
    }
}

impl Opponent {
    /// A Stockfish spec (the oracle, the adjudicator, the decisiveness
    /// rule), else the error naming `option`.
    pub(crate) fn engine(
        self,
        option: &'static str,
    ) -> Result<(Limit, Option<i32>), EvalConfigError> {
        match self {
            Opponent::Stockfish { limit, skill } => Ok((limit, skill)),
            other => Err(EvalConfigError::NotAnEngine {
                option,
                spec: other.to_string(),
            }),
        }
    }

    /// A display name, e.g. `stockfish-nodes-1000`.
    pub(crate) fn name(&self) -> String {
        match self {
            Opponent::Stockfish { limit, skill } => {
                let l = limit.to_string().replace(' ', "-");
                match skill {
                    Some(s) => format!("stockfish-skill-{s}-{l}"),
                    None => format!("stockfish-{l}"),
                }
            }
            Opponent::Checkpoint(p) => format!("checkpoint:{}", p.display()),
        }
    }
}

/// One finished game.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlayedGame {
    pub white: String,
    pub black: String,
    pub opening: String,
    pub result: &'static str,
    pub termination: &'static str,
    pub plies: usize,
    #[serde(skip)]
    pub pgn: String,
}

impl PlayedGame {
    pub(crate) fn record(&self) -> GameRecord {
        GameRecord {
            white: self.white.clone(),
            black: self.black.clone(),
            white_score: match self.result {
                "1-0" => 1.0,
                "0-1" => 0.0,
                _ => 0.5,
            },
        }
    }
}

/// Plays one game from `opening` between `white` and `black`, ended by the
/// rules, the optional length cap, or `adjudicator` after any move.
#[cfg(test)]
pub(crate) fn play_game(
    white: &mut dyn Player,
    black: &mut dyn Player,
    opening: &Opening,
    max_plies: Option<usize>,
    adjudicator: Option<&mut Adjudicator>,
    round: &str,
) -> Result<PlayedGame, EvalError> {
    let mut opponents: Vec<&mut dyn Player> = vec![black];
    let adjudicators: Vec<&mut Adjudicator> = adjudicator.into_iter().collect();
    let pairing = Pairing {
        opening,
        model_white: true,
        round: round.to_owned(),
    };
    Ok(play_games(
        white,
        &mut opponents,
        adjudicators,
        std::slice::from_ref(&pairing),
        max_plies,
        |_, _| {},
    )?
    .remove(0))
}

/// A game to play between the model and an opponent.
pub(crate) struct Pairing<'a> {
    pub opening: &'a Opening,
    pub model_white: bool,
    /// The PGN `Round` tag.
    pub round: String,
}

/// A game in progress in one slot.
struct Table<'a> {
    index: usize,
    pairing: &'a Pairing<'a>,
    game: Game,
}

/// Plays `pairings` between `model` and an opponent, several games at a
/// time, each exactly as it would be played alone: both players and the
/// adjudicator start it as a new game, the opening is played, then the side
/// to move chooses until the rules, the length cap or the adjudicator (after
/// any move, as searchless_chess's tournament) end it.
///
/// `opponents` holds one player that keeps every game at once
/// ([`Player::slots`], a checkpoint), or one player per slot (engines,
/// whose games share a process); `adjudicators` none, or one per slot. The
/// slots are as many as the opponents given (or the adjudicators, when the
/// one opponent keeps many games), at most as many as `model` keeps. On each
/// round the model chooses its move in every game where it is to move in
/// one batch. The games come back in the order of `pairings`; `done` hears
/// of each as it ends, with whether the model had white.
pub(crate) fn play_games(
    model: &mut dyn Player,
    opponents: &mut [&mut dyn Player],
    mut adjudicators: Vec<&mut Adjudicator>,
    pairings: &[Pairing],
    max_plies: Option<usize>,
    mut done: impl FnMut(&PlayedGame, bool),
) -> Result<Vec<PlayedGame>, EvalError> {
    assert!(!opponents.is_empty(), "a tournament needs an opponent");
    let shared = opponents.len() == 1 && opponents[0].slots() > 1;
    let mut slots = if shared {
        adjudicators.len().max(1)
    } else {
        opponents.len()
    };
    slots = slots.min(model.slots()).min(pairings.len()).max(1);
    assert!(
        adjudicators.is_empty() || adjudicators.len() >= slots,
        "one adjudicator per slot"
    );
    let model_name = model.name().to_owned();
    let opponent_name = opponents[0].name().to_owned();
    let mut results: Vec<Option<PlayedGame>> = (0..pairings.len()).map(|_| None).collect();
    let mut tables: Vec<Option<Table>> = (0..slots).map(|_| None).collect();
    let mut queued = 0;
    loop {
        // Finished games leave their slot; free slots take the next pairing.
        for slot in 0..slots {
            loop {
                if tables[slot].is_none() {
                    if queued == pairings.len() {
                        break;
                    }
                    let pairing = &pairings[queued];
                    model.new_game_in(slot)?;
                    if shared {
                        opponents[0].new_game_in(slot)?;
                    } else {
                        opponents[slot].new_game()?;
                    }
                    if let Some(a) = adjudicators.get_mut(slot) {
                        a.new_game()?;
                    }
                    let mut game = Game::new(Chess::default());
                    for m in &pairing.opening.moves {
                        game.play(m);
                    }
                    tables[slot] = Some(Table {
                        index: queued,
                        pairing,
                        game,
                    });
                    queued += 1;
                }
                let t = tables[slot].as_ref().expect("filled above");
                let Some(end) = t.game.outcome(max_plies) else {
                    break;
                };
                let t = tables[slot].take().expect("checked above");
                let played = finish(&t, &model_name, &opponent_name, end);
                done(&played, t.pairing.model_white);
                results[t.index] = Some(played);
            }
        }
        if tables.iter().all(Option::is_none) {
            break;
        }
        // Who is to move where.
        let model_to_move =
            |t: &Table| t.game.position().turn().is_white() == t.pairing.model_white;
        let model_turns: Vec<(usize, &Game)> = tables
            .iter()
            .enumerate()
            .filter_map(|(s, t)| {
                t.as_ref()
                    .filter(|t| model_to_move(t))
                    .map(|t| (s, &t.game))
            })
            .collect();
        let opponent_turns: Vec<(usize, &Game)> = tables
            .iter()
            .enumerate()
            .filter_map(|(s, t)| {
                t.as_ref()
                    .filter(|t| !model_to_move(t))
                    .map(|t| (s, &t.game))
            })
            .collect();
        let mut moves: Vec<(usize, Move, String)> = Vec::new();
        if !model_turns.is_empty() {
            let chosen = model.choose_many(&model_turns)?;
            moves.extend(
                model_turns
                    .iter()
                    .zip(chosen)
                    .map(|((s, _), m)| (*s, m, model_name.clone())),
            );
        }
        if shared && !opponent_turns.is_empty() {
            let chosen = opponents[0].choose_many(&opponent_turns)?;
            moves.extend(
                opponent_turns
                    .iter()
                    .zip(chosen)
                    .map(|((s, _), m)| (*s, m, opponent_name.clone())),
            );
        } else {
            for (s, game) in &opponent_turns {
                let m = opponents[*s].choose(game)?;
                moves.push((*s, m, opponent_name.clone()));
            }
        }
        for (slot, m, mover) in moves {
            let t = tables[slot].as_mut().expect("a game in every mover's slot");
            if !t.game.position().is_legal(m) {
                return Err(PlayerError::Position {
                    fen: fen_of(t.game.position()),
                    message: format!("{mover} chose the illegal move {m}"),
                }
                .into());
            }
            t.game.play(&m);
            // searchless_chess evaluates after every move, before its loop
            // checks the rules.
            if let Some(a) = adjudicators.get_mut(slot)
                && let Some(r) = a.verdict(&t.game)?
            {
                let t = tables[slot].take().expect("checked above");
                let played = finish(
                    &t,
                    &model_name,
                    &opponent_name,
                    (r, Termination::Adjudicated),
                );
                done(&played, t.pairing.model_white);
                results[t.index] = Some(played);
            }
        }
    }
    Ok(results
        .into_iter()
        .map(|g| g.expect("every pairing played"))
        .collect())
}

/// The record of a finished game.
fn finish(
    t: &Table,
    model: &str,
    opponent: &str,
    (result, termination): (GameResult, Termination),
) -> PlayedGame {
    let (white, black) = if t.pairing.model_white {
        (model, opponent)
    } else {
        (opponent, model)
    };
    let opening = &t.pairing.opening.name;
    let headers = [
        ("Event", "chessbench evaluation".to_owned()),
        ("Site", "chessbench".to_owned()),
        ("Date", "????.??.??".to_owned()),
        ("Round", t.pairing.round.clone()),
        ("White", white.to_owned()),
        ("Black", black.to_owned()),
        ("Result", result.pgn().to_owned()),
        ("Opening", opening.clone()),
        ("Termination", termination.name().to_owned()),
        ("PlyCount", t.game.moves().len().to_string()),
    ];
    PlayedGame {
        white: white.to_owned(),
        black: black.to_owned(),
        opening: opening.clone(),
        result: result.pgn(),
        termination: termination.name(),
        plies: t.game.moves().len(),
        pgn: t.game.pgn(&headers, result.pgn()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjudication_follows_the_sign_of_the_score() {
        assert_eq!(adjudicate(Score::Mate(3), 1300), Some(true));
        assert_eq!(adjudicate(Score::Mate(-2), 1300), Some(false));
        // `mate 0`: the side to move is mated.
        assert_eq!(adjudicate(Score::Mate(0), 1300), Some(false));
        assert_eq!(adjudicate(Score::Cp(1301), 1300), Some(true));
        assert_eq!(adjudicate(Score::Cp(-1301), 1300), Some(false));
        assert_eq!(adjudicate(Score::Cp(1300), 1300), None);
        assert_eq!(adjudicate(Score::Cp(-40), 1300), None);
    }

    #[test]
    fn stockfish_adjudicates_lost_positions_and_not_balanced_ones() {
        let Some(config) = crate::testing::stockfish() else {
            return;
        };
        let mut a = Adjudicator::start(&config, Limit::Nodes(5000), ADJUDICATION_CP).unwrap();
        let game = |fen: &str| Game::new(crate::eval::game::parse_fen(fen).unwrap());
        // Black to move against two queens: White wins, from either side's
        // view of the score.
        let g = game("4k3/8/8/8/8/8/8/QQ2K3 b - - 0 1");
        assert_eq!(a.verdict(&g).unwrap(), Some(GameResult::WhiteWins));
        let g = game("qq2k3/8/8/8/8/8/8/4K3 w - - 0 1");
        assert_eq!(a.verdict(&g).unwrap(), Some(GameResult::BlackWins));
        // The start position plays on; so does a mated position (the rules
        // decide it).
        assert_eq!(a.verdict(&Game::new(Chess::default())).unwrap(), None);
        let mut g = Game::new(Chess::default());
        for m in ["f2f3", "e7e5", "g2g4", "d8h4"] {
            g.play_uci(m).unwrap();
        }
        assert_eq!(a.verdict(&g).unwrap(), None);
        assert_eq!(
            g.outcome(None),
            Some((GameResult::BlackWins, Termination::Checkmate))
        );
    }

    #[test]
    fn adjudicated_games_stop_early_and_are_reproducible() {
        use crate::eval::policy::EnginePlayer;
        let Some(config) = crate::testing::stockfish() else {
            return;
        };
        let opening = &read_openings(None, 1).unwrap()[0];
        let play = |adjudicate: bool| {
            let mut w = EnginePlayer::start(&config, Limit::Nodes(1), "w".into()).unwrap();
            let mut b = EnginePlayer::start(&config, Limit::Nodes(1), "b".into()).unwrap();
            let mut a = adjudicate
                .then(|| Adjudicator::start(&config, Limit::Nodes(5000), ADJUDICATION_CP).unwrap());
            play_game(&mut w, &mut b, opening, Some(600), a.as_mut(), "1").unwrap()
        };
        let adjudicated = play(true);
        assert_eq!(adjudicated.termination, Termination::Adjudicated.name());
        assert_ne!(adjudicated.result, "1/2-1/2");
        // Deterministic at fixed node limits with one thread.
        assert_eq!(play(true).pgn, adjudicated.pgn);
        // Without adjudication the same moves continue past that point.
        let full = play(false);
        assert!(
            full.plies > adjudicated.plies,
            "{} vs {}",
            full.plies,
            adjudicated.plies
        );
        let moves = |pgn: &str| pgn.split("\n\n").nth(1).unwrap_or("").to_owned();
        let prefix = moves(&adjudicated.pgn);
        let prefix = prefix
            .trim_end()
            .rsplit_once(char::is_whitespace)
            .unwrap()
            .0
            .to_owned();
        assert!(moves(&full.pgn).starts_with(&prefix), "{prefix}");
        // An independent search agrees the final position is decided.
        let mut check = Engine::start(&config).unwrap();
        let mut g = Game::new(Chess::default());
        for m in play_pgn(&prefix).unwrap().1 {
            g.play(&m);
        }
        let r = search_game(&mut check, &g, Limit::Nodes(5000), &[], "checking").unwrap();
        let verdict = adjudicate(r.best().unwrap().score, ADJUDICATION_CP).unwrap();
        let white_won = adjudicated.result == "1-0";
        assert_eq!(verdict == g.position().turn().is_white(), white_won);
    }

    /// Games played several at a time (the model's boards scored in one
    /// pass, one engine and adjudicator per slot, or one checkpoint
    /// opponent keeping every game) are move for move the games played one
    /// at a time: real Stockfish at fixed node limits, one thread.
    #[test]
    fn games_played_together_equal_games_played_alone() {
        use crate::{
            chess::RecordSet,
            eval::{
                policy::{Decisive, EnginePlayer, NeuralPlayer, PolicyOptions},
                trained::Model,
            },
            model::{DeviceKind, Preset},
        };
        let Some(config) = crate::testing::stockfish() else {
            return;
        };
        let openings = read_openings(None, 3).unwrap();
        let pairings: Vec<Pairing> = openings
            .iter()
            .enumerate()
            .flat_map(|(i, opening)| {
                [true, false].map(|model_white| Pairing {
                    opening,
                    model_white,
                    round: format!("{}", i + 1),
                })
            })
            .collect();
        let player = |policy| {
            let model = Model::random(Preset::Tiny, policy, 32, DeviceKind::Cpu).unwrap();
            let options = PolicyOptions {
                repetition_draw: true,
                decisive: Some(Decisive {
                    engine: config.clone(),
                    limit: Limit::Nodes(200),
                }),
            };
            NeuralPlayer::new(model, options, None)
        };
        let mut model = player(RecordSet::ActionValue);
        let mut checkpoint = player(RecordSet::StateValue);
        let adjudicators = |slots: usize| -> Vec<Adjudicator> {
            (0..slots)
                .map(|_| Adjudicator::start(&config, Limit::Nodes(2000), ADJUDICATION_CP).unwrap())
                .collect()
        };
        let pgns = |games: Vec<PlayedGame>| games.into_iter().map(|g| g.pgn).collect::<Vec<_>>();
        let mut against_engines = |slots: usize| {
            let mut engines: Vec<EnginePlayer> = (0..slots)
                .map(|_| EnginePlayer::start(&config, Limit::Nodes(1), "sf".into()).unwrap())
                .collect();
            let mut opponents: Vec<&mut dyn Player> =
                engines.iter_mut().map(|e| e as &mut dyn Player).collect();
            let mut adjudicators = adjudicators(slots);
            let mut ended = 0;
            let games = play_games(
                &mut model,
                &mut opponents,
                adjudicators.iter_mut().collect(),
                &pairings,
                Some(80),
                |_, _| ended += 1,
            )
            .unwrap();
            assert_eq!(ended, pairings.len());
            pgns(games)
        };
        // Boards scored in another pass may sum in another order: a move
        // whose two best scores are within a float tie may differ, and the
        // games after it. With no such move the games are identical.
        let alone = against_engines(1);
        let together = against_engines(4);
        assert_eq!(alone.len(), pairings.len());
        let ties = std::mem::take(&mut model.near_ties);
        if ties == 0 {
            assert_eq!(alone, together);
        } else {
            println!("{ties} float ties: the games may part after one, not compared");
        }
        let mut against_checkpoint = |slots: usize| {
            let mut opponents: Vec<&mut dyn Player> = vec![&mut checkpoint];
            let mut adjudicators = adjudicators(slots);
            pgns(
                play_games(
                    &mut model,
                    &mut opponents,
                    adjudicators.iter_mut().collect(),
                    &pairings,
                    Some(80),
                    |_, _| {},
                )
                .unwrap(),
            )
        };
        let alone = against_checkpoint(1);
        let together = against_checkpoint(6);
        let ties = model.near_ties + checkpoint.near_ties;
        if ties == 0 {
            assert_eq!(alone, together);
        } else {
            println!("{ties} float ties: the games may part after one, not compared");
        }
        // The games are real games: some end before the cap, with moves.
        assert!(alone.iter().all(|pgn| pgn.contains("1. ")), "{alone:?}");
    }

    #[test]
    fn opponent_specs() {
        assert_eq!(
            Opponent::from_str("stockfish:nodes=1000").unwrap(),
            Opponent::Stockfish {
                limit: Limit::Nodes(1000),
                skill: None
            }
        );
        assert_eq!(
            Opponent::from_str("stockfish:skill=3").unwrap(),
            Opponent::Stockfish {
                limit: Limit::Depth(10),
                skill: Some(3)
            }
        );
        assert_eq!(
            Opponent::from_str("stockfish:nodes=1").unwrap().name(),
            "stockfish-nodes-1"
        );
        // The spec reads back as itself.
        for spec in [
            "stockfish:nodes=1000",
            "stockfish:skill=3,depth=1",
            "stockfish:movetime_ms=10",
            "checkpoint:runs/x",
        ] {
            assert_eq!(Opponent::from_str(spec).unwrap().to_string(), spec);
        }
        for bad in [
            "stockfish:",
            "stockfish:nodes=x",
            "stockfish:skill=40",
            "leela:1",
            "stockfish:speed=1",
        ] {
            assert!(Opponent::from_str(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn builtin_openings_are_legal_and_spread() {
        let all = read_openings(None, 0).unwrap();
        assert_eq!(all.len(), BUILTIN_OPENINGS.len());
        assert_eq!(all[0].moves.len(), 5);
        let two = read_openings(None, 2).unwrap();
        assert_eq!(two[1].name, all[all.len() / 2].name);
    }

    #[test]
    fn openings_from_pgn_and_tsv() {
        let dir = tempfile::tempdir().unwrap();
        let pgn = dir.path().join("o.pgn");
        std::fs::write(
            &pgn,
            "[Event \"?\"]\n[Result \"*\"]\n\n1. b3 *\n\n[Event \"?\"]\n\n1. e4 e5 2. Nf3 *\n\n\
             [Event \"?\"]\n\n1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. Ba4 Nf6 5. O-O Be7 6. Re1 b5 7. Bb3 d6\n\
             8. c3 O-O 9. h3 Nb8 *\n",
        )
        .unwrap();
        let o = read_openings(Some(&pgn), 0).unwrap();
        assert_eq!(o.len(), 3);
        assert_eq!(o[1].moves.len(), 3);
        assert_eq!(o[0].name, "1. b3");
        // Long main lines are named on one line (PGN headers, CSV rows).
        assert_eq!(o[2].moves.len(), 18);
        assert!(!o[2].name.contains('\n'), "{:?}", o[2].name);
        assert!(
            o[2].name.ends_with("8. c3 O-O 9. h3 Nb8"),
            "{:?}",
            o[2].name
        );
        let tsv = dir.path().join("a.tsv");
        std::fs::write(
            &tsv,
            "eco\tname\tpgn\nA00\tAmar Opening\t1. Nh3\nA00\tBad\t1. Nh4\n",
        )
        .unwrap();
        let e = read_openings(Some(&tsv), 0).unwrap_err().to_string();
        assert!(e.contains("line 3"), "{e}");
    }
}
