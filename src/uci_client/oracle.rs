//! The paper's oracle for one board (Ruoss et al. 2024, §2.1): a state
//! value from one search, an action value per legal move from one search
//! restricted to that move (`searchmoves`), win probabilities from the
//! Lichess formula, the best action as the argmax. Used by the annotate
//! stage and by the evaluator's Stockfish oracle, so both compute the same
//! values.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shakmaty::uci::UciMove;

use super::{Engine, EngineError, Limit, Position, Score, SearchResult};
use crate::chess::{
    legal::{Prepared, ValueKind},
    value::{centipawns_to_win_probability, mate_to_win_probability},
};

/// How action values are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Mode {
    /// The paper's oracle: one search per legal move, restricted to it with
    /// `searchmoves`, plus one search for the state value.
    PerMove,
    /// One MultiPV search per board covering every legal move (far cheaper,
    /// shallower per move).
    Multipv,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::PerMove => "per_move",
            Mode::Multipv => "multipv",
        }
    }
}

/// One evaluation, raw and derived, from the side to move's point of view.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Eval {
    pub score: Option<Score>,
    pub win_prob: f64,
    pub depth: Option<u32>,
    /// Nodes and time of the search (None for MultiPV lines, which share
    /// one search, and for terminal boards).
    pub nodes: Option<u64>,
    pub time_ms: Option<u64>,
}

/// Win probability of a UCI score with the paper's formula; mates are
/// 1.0 (the side to move mates) or 0.0 (it is mated).
pub(crate) fn win_probability(score: Score) -> f64 {
    match score {
        Score::Cp(cp) => centipawns_to_win_probability(f64::from(cp)),
        Score::Mate(n) => mate_to_win_probability(n),
    }
}

impl Eval {
    fn terminal(win_prob: f64) -> Eval {
        Eval {
            score: None,
            win_prob,
            depth: None,
            nodes: None,
            time_ms: None,
        }
    }

    fn from_search(score: Score, depth: u32, r: Option<&SearchResult>) -> Eval {
        Eval {
            score: Some(score),
            win_prob: win_probability(score),
            depth: Some(depth),
            nodes: r.map(|r| r.nodes),
            time_ms: r.map(|r| r.time_ms),
        }
    }
}

/// A fully annotated board.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Annotated {
    pub kind: ValueKind,
    pub state: Eval,
    /// Sorted by action index.
    pub actions: Vec<(u16, Eval)>,
    pub best_action: Option<u16>,
}

/// The highest action value; ties in win probability go to the better raw
/// score (a faster mate), then to the lowest action index.
pub(crate) fn best_action(actions: &[(u16, Eval)]) -> Option<u16> {
    let key = |e: &Eval| e.score.map_or(i64::MIN, Score::order_key);
    let mut best: Option<&(u16, Eval)> = None;
    for a in actions {
        best = match best {
            None => Some(a),
            Some(b) => {
                let better = a.1.win_prob > b.1.win_prob
                    || (a.1.win_prob == b.1.win_prob && key(&a.1) > key(&b.1))
                    || (a.1.win_prob == b.1.win_prob && key(&a.1) == key(&b.1) && a.0 < b.0);
                Some(if better { a } else { b })
            }
        };
    }
    best.map(|b| b.0)
}

/// Engine time accounting for one board.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Work {
    pub searches: u64,
    /// Wall time inside searches (`go` to `bestmove`).
    pub search_time: Duration,
    /// Searches in MultiPV mode that had to fall back to a per-move search.
    pub fallbacks: u64,
    /// Failed tries (engine crashed, hung or sent garbage; killed and
    /// restarted).
    pub retries: u64,
}

/// Search settings for a board.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SearchSettings {
    pub mode: Mode,
    pub limit: Limit,
    pub timeout: Duration,
    pub new_game: bool,
}

fn implausible(what: String) -> EngineError {
    EngineError::Implausible {
        during: "annotating".into(),
        what,
    }
}

/// Annotates one prepared board with `engine`.
pub(crate) fn annotate(
    engine: &mut Engine,
    board: &Prepared,
    s: &SearchSettings,
    work: &mut Work,
) -> Result<Annotated, EngineError> {
    if let Some(kind) = board.terminal {
        let v = if kind == ValueKind::Checkmate {
            0.0
        } else {
            0.5
        };
        return Ok(Annotated {
            kind,
            state: Eval::terminal(v),
            actions: Vec::new(),
            best_action: None,
        });
    }
    if s.new_game {
        engine.new_game(s.timeout)?;
    }
    let mut search = |engine: &mut Engine, moves: &[UciMove]| {
        let r = engine.search(s.limit, moves, s.timeout)?;
        work.searches += 1;
        work.search_time += r.elapsed;
        Ok::<_, EngineError>(r)
    };
    let checked = |r: &SearchResult, what: &str| -> Result<(Score, u32), EngineError> {
        let line = r
            .lines
            .iter()
            .max_by_key(|l| l.score.order_key())
            .ok_or_else(|| implausible(format!("no exact score in the {what} search")))?;
        if line.score == Score::Mate(0) {
            return Err(implausible(format!(
                "'mate 0' for a board with legal moves ({what} search)"
            )));
        }
        Ok((line.score, line.depth))
    };
    let mut actions = Vec::with_capacity(board.moves.len());
    let state;
    match s.mode {
        Mode::PerMove => {
            engine.set_multipv(1)?;
            engine.set_position(Position::fen(&board.fen, &[]))?;
            let r = search(engine, &[])?;
            let (score, depth) = checked(&r, "state value")?;
            state = Eval::from_search(score, depth, Some(&r));
            for &(action, m) in &board.moves {
                let r = search(engine, std::slice::from_ref(&m))?;
                if r.bestmove != Some(m) {
                    return Err(implausible(format!(
                        "searchmoves {m} answered with bestmove {:?}",
                        r.bestmove.map(|b| b.to_string())
                    )));
                }
                let (score, depth) = checked(&r, "action value")?;
                actions.push((action, Eval::from_search(score, depth, Some(&r))));
            }
        }
        Mode::Multipv => {
            let n = board.moves.len() as u32;
            engine.set_multipv(n.min(engine.max_multipv()))?;
            engine.set_position(Position::fen(&board.fen, &[]))?;
            let r = search(engine, &[])?;
            let (score, depth) = checked(&r, "MultiPV")?;
            state = Eval::from_search(score, depth, Some(&r));
            let mut missing = Vec::new();
            for &(action, m) in &board.moves {
                match r.lines.iter().find(|l| l.pv.first() == Some(&m)) {
                    Some(l) if l.score != Score::Mate(0) => {
                        actions.push((action, Eval::from_search(l.score, l.depth, None)));
                    }
                    _ => missing.push((action, m)),
                }
            }
            if r.lines.len() > board.moves.len() {
                return Err(implausible(format!(
                    "MultiPV returned {} lines for {} legal moves",
                    r.lines.len(),
                    board.moves.len()
                )));
            }
            if !missing.is_empty() {
                // A search stopped before every root move got an exact
                // score (tiny limits): search those moves on their own.
                engine.set_multipv(1)?;
                for (action, m) in missing {
                    let r = search(engine, std::slice::from_ref(&m))?;
                    work.fallbacks += 1;
                    let (score, depth) = checked(&r, "fallback action value")?;
                    actions.push((action, Eval::from_search(score, depth, Some(&r))));
                }
                actions.sort_unstable_by_key(|a| a.0);
            }
        }
    }
    let best_action = best_action(&actions);
    Ok(Annotated {
        kind: ValueKind::Search,
        state,
        actions,
        best_action,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chess::{legal::prepare, vocabulary};

    fn eval(score: Score) -> Eval {
        Eval::from_search(score, 1, None)
    }

    #[test]
    fn best_action_prefers_value_then_faster_mate_then_lowest_index() {
        let a = [
            (7, eval(Score::Cp(30))),
            (3, eval(Score::Cp(30))),
            (9, eval(Score::Cp(-5))),
        ];
        assert_eq!(best_action(&a), Some(3));
        let a = [
            (1, eval(Score::Mate(3))),
            (5, eval(Score::Mate(1))),
            (2, eval(Score::Cp(900))),
        ];
        assert_eq!(best_action(&a), Some(5));
        assert_eq!(best_action(&[]), None);
    }

    #[test]
    fn win_probability_of_scores() {
        assert_eq!(win_probability(Score::Mate(1)), 1.0);
        assert_eq!(win_probability(Score::Mate(-3)), 0.0);
        assert_eq!(win_probability(Score::Cp(0)), 0.5);
    }

    #[test]
    fn both_modes_find_the_mate_in_one() {
        let Some(config) = crate::testing::stockfish() else {
            return;
        };
        let mut engine = Engine::start(&config).unwrap();
        let board = prepare("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1", None).unwrap();
        let mate = vocabulary().parse("a1a8").unwrap();
        for mode in [Mode::PerMove, Mode::Multipv] {
            let s = SearchSettings {
                mode,
                limit: Limit::Nodes(5000),
                timeout: Duration::from_secs(10),
                new_game: true,
            };
            let mut work = Work::default();
            let a = annotate(&mut engine, &board, &s, &mut work).unwrap();
            assert_eq!(a.best_action, Some(mate), "{mode:?}");
            assert_eq!(a.state.win_prob, 1.0);
            assert_eq!(a.actions.len(), board.moves.len());
            let (_, e) = a.actions.iter().find(|(i, _)| *i == mate).unwrap();
            assert_eq!(e.score, Some(Score::Mate(1)));
            assert_eq!(e.win_prob, 1.0);
            let searches = if mode == Mode::PerMove {
                1 + board.moves.len() as u64
            } else {
                1 + work.fallbacks
            };
            assert_eq!(work.searches, searches);
        }
    }
}
