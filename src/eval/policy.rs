//! Playing moves: the paper's three neural policies (Ruoss et al. 2024,
//! §2.2; searchless_chess `neural_engines.py`) and Stockfish, behind one
//! [`Player`] trait used by puzzles, games and the UCI engine.
//!
//! - action-value: `argmax_a E[Q(s, a)]` over the legal moves, all of one
//!   board's moves in one batch;
//! - state-value: `argmin_a E[V(s')]` over the successors `s'` (the value
//!   is the opponent's), i.e. `argmax_a 1 - E[V(s')]`;
//! - behavioural cloning: `argmax` of the action distribution restricted to
//!   the legal moves.
//!
//! Legal moves are ordered by their UCI string and ties go to the first,
//! as searchless_chess's `get_ordered_legal_moves` + `np.argmax` do.
//!
//! The paper's two workarounds (§5, "Indecisiveness" and repetitions):
//! with `repetition_draw`, a move after which a draw by repetition can be
//! claimed scores 0.5 (searchless_chess's `_update_scores_with_repetitions`:
//! the position occurs a third time, or a reply of the opponent would
//! repeat one a third time); with `decisive`, when the
//! top five moves all score above 99%, Stockfish picks among them.

use std::time::Duration;

use shakmaty::{CastlingMode, Chess, Move, uci::UciMove};

use super::{
    error::PlayerError,
    game::{Game, fen_of},
    predict::{Prediction, predict_many},
    trained::Model,
};
use crate::{
    chess::RecordSet,
    uci_client::{Engine, EngineConfig, Limit, Position as UciPosition, SearchResult},
};

/// Something that picks moves in games.
///
/// A player keeps one game at a time ([`Player::new_game`], then
/// [`Player::choose`] for each of its moves), or several at once, each in a
/// slot of its own ([`Player::slots`] > 1: [`Player::new_game_in`],
/// [`Player::choose_many`]), choosing in each exactly as it would in that
/// game alone. Puzzles and tournaments advance many games together with
/// such players, so that a model scores many boards per forward pass.
pub(crate) trait Player {
    /// A name for PGN headers and rating tables.
    fn name(&self) -> &str;
    /// Called before each game.
    fn new_game(&mut self) -> Result<(), PlayerError>;
    /// A legal move in `game`'s current position (which has one).
    fn choose(&mut self, game: &Game) -> Result<Move, PlayerError>;
    /// The score (win probability) of the last chosen move, if the player
    /// has one (for UCI `info score`).
    fn last_score(&self) -> Option<f64> {
        None
    }
    /// Games this player can keep in progress at once: 1 when its games
    /// share state (an engine process and its hash table).
    fn slots(&self) -> usize {
        1
    }
    /// [`Player::new_game`] for the game in `slot` (below [`Player::slots`]).
    fn new_game_in(&mut self, _slot: usize) -> Result<(), PlayerError> {
        self.new_game()
    }
    /// A move in each of several games, given as `(slot, game)`.
    fn choose_many(&mut self, games: &[(usize, &Game)]) -> Result<Vec<Move>, PlayerError> {
        games.iter().map(|(_, g)| self.choose(g)).collect()
    }
}

/// Stockfish settings for the decisiveness workaround.
#[derive(Debug, Clone)]
pub(crate) struct Decisive {
    pub engine: EngineConfig,
    pub limit: Limit,
}

/// How a neural player turns predictions into moves.
#[derive(Debug, Clone, Default)]
pub(crate) struct PolicyOptions {
    /// Score a move that allows a threefold-repetition claim 0.5 (value
    /// policies).
    pub repetition_draw: bool,
    /// Let Stockfish choose among the top five when all exceed 99%.
    pub decisive: Option<Decisive>,
}

/// The decisiveness rule's thresholds (the paper: top five above 99%).
pub(crate) const DECISIVE_TOP: usize = 5;
pub(crate) const DECISIVE_THRESHOLD: f64 = 0.99;

/// A trained model playing moves, in any number of games at once (its
/// boards scored together, [`predict_many`]).
pub(crate) struct NeuralPlayer {
    pub model: Model,
    pub options: PolicyOptions,
    name: String,
    /// The decisiveness rule's Stockfish of each game slot, started on
    /// first use (its hash table belongs to that slot's game).
    decisive_engines: Vec<Option<Engine>>,
    /// Moves the decisiveness rule handed to Stockfish.
    pub decisive_moves: u64,
    /// Moves chosen where the two best scores were within [`FLOAT_TIE`](super::predict::FLOAT_TIE)
    /// (another summation order of the same pass could pick the other).
    pub near_ties: u64,
    last_score: Option<f64>,
}

impl NeuralPlayer {
    pub(crate) fn new(model: Model, options: PolicyOptions, name: Option<String>) -> NeuralPlayer {
        NeuralPlayer {
            name: name.unwrap_or_else(|| model.label()),
            model,
            options,
            decisive_engines: Vec::new(),
            decisive_moves: 0,
            near_ties: 0,
            last_score: None,
        }
    }

    /// The predictions of `games`' positions with the paper's repetition
    /// workaround applied to the scores.
    fn analyse_many(&self, games: &[(usize, &Game)]) -> Result<Vec<Prediction>, PlayerError> {
        let positions: Vec<&Chess> = games.iter().map(|(_, g)| g.position()).collect();
        let mut predictions = predict_many(&self.model, &positions)?;
        if self.options.repetition_draw && self.model.policy() != RecordSet::BehavioralCloning {
            for ((_, game), p) in games.iter().zip(&mut predictions) {
                for (m, s) in p.moves.iter().zip(p.scores.iter_mut()) {
                    if game.draw_claimable_after(m) {
                        *s = 0.5;
                    }
                }
            }
        }
        Ok(predictions)
    }

    /// The decisiveness rule's choice in `game` (slot `slot`), if it fires.
    fn decide_with_stockfish(
        &mut self,
        slot: usize,
        game: &Game,
        p: &Prediction,
    ) -> Result<Option<Move>, PlayerError> {
        let Some(decisive) = &self.options.decisive else {
            return Ok(None);
        };
        if self.model.policy() == RecordSet::BehavioralCloning {
            return Ok(None);
        }
        if self.decisive_engines.len() <= slot {
            self.decisive_engines.resize_with(slot + 1, || None);
        }
        let chosen = decisive_choice(&mut self.decisive_engines[slot], decisive, game, p)?;
        if chosen.is_some() {
            self.decisive_moves += 1;
        }
        Ok(chosen)
    }

    /// The move in `game` from its prediction `p`, and its score.
    fn pick(
        &mut self,
        slot: usize,
        game: &Game,
        p: &Prediction,
    ) -> Result<(Move, Option<f64>), PlayerError> {
        if let Some(m) = self.decide_with_stockfish(slot, game, p)? {
            let score = p.moves.iter().position(|x| *x == m).map(|i| p.scores[i]);
            return Ok((m, score));
        }
        let best = p.best().ok_or_else(|| PlayerError::Position {
            fen: fen_of(game.position()),
            message: "the model scored every move NaN".into(),
        })?;
        if p.near_tie() {
            self.near_ties += 1;
        }
        let score = (self.model.policy() != RecordSet::BehavioralCloning).then(|| p.scores[best]);
        Ok((p.moves[best], score))
    }
}

/// The decisiveness rule's trigger: the indices of the [`DECISIVE_TOP`]
/// best scores (best first, ties in move order) when every one of them
/// exceeds [`DECISIVE_THRESHOLD`], else `None` (also with fewer legal
/// moves than that).
pub(crate) fn decisive_candidates(scores: &[f64]) -> Option<Vec<usize>> {
    if scores.len() < DECISIVE_TOP {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    // NaN sorts last and fails the threshold.
    order.sort_by(|&a, &b| match (scores[a].is_nan(), scores[b].is_nan()) {
        (false, false) => scores[b].total_cmp(&scores[a]),
        (x, y) => x.cmp(&y),
    });
    order.truncate(DECISIVE_TOP);
    order
        .iter()
        .all(|&i| scores[i] > DECISIVE_THRESHOLD)
        .then_some(order)
}

/// Applies the decisiveness rule to a value policy's prediction: when
/// [`decisive_candidates`] fires, Stockfish (started in `engine` on first
/// use) searches only those moves (`go ... searchmoves`) and its choice is
/// returned; otherwise `None` and the policy's own argmax stands.
pub(crate) fn decisive_choice(
    engine: &mut Option<Engine>,
    decisive: &Decisive,
    game: &Game,
    p: &Prediction,
) -> Result<Option<Move>, PlayerError> {
    let Some(top) = decisive_candidates(&p.scores) else {
        return Ok(None);
    };
    if engine.is_none() {
        *engine =
            Some(Engine::start(&decisive.engine).map_err(|e| PlayerError::engine("starting", e))?);
    }
    let engine = engine.as_mut().expect("started above");
    let searchmoves: Vec<UciMove> = top
        .iter()
        .map(|&i| p.moves[i].to_uci(CastlingMode::Standard))
        .collect();
    stockfish_move(engine, game, decisive.limit, &searchmoves).map(Some)
}

impl Player for NeuralPlayer {
    fn name(&self) -> &str {
        &self.name
    }

    fn new_game(&mut self) -> Result<(), PlayerError> {
        self.new_game_in(0)
    }

    fn choose(&mut self, game: &Game) -> Result<Move, PlayerError> {
        let p = self.analyse_many(&[(0, game)])?.remove(0);
        let (m, score) = self.pick(0, game, &p)?;
        self.last_score = score;
        Ok(m)
    }

    fn last_score(&self) -> Option<f64> {
        self.last_score
    }

    fn slots(&self) -> usize {
        usize::MAX
    }

    fn new_game_in(&mut self, slot: usize) -> Result<(), PlayerError> {
        if let Some(Some(e)) = self.decisive_engines.get_mut(slot) {
            e.new_game(ENGINE_TIMEOUT)
                .map_err(|e| PlayerError::engine("ucinewgame", e))?;
        }
        Ok(())
    }

    fn choose_many(&mut self, games: &[(usize, &Game)]) -> Result<Vec<Move>, PlayerError> {
        let predictions = self.analyse_many(games)?;
        let mut moves = Vec::with_capacity(games.len());
        for ((slot, game), p) in games.iter().zip(&predictions) {
            let (m, score) = self.pick(*slot, game, p)?;
            self.last_score = score;
            moves.push(m);
        }
        Ok(moves)
    }
}

/// Deadline for one engine answer (searches are bounded by their limit).
pub(crate) const ENGINE_TIMEOUT: Duration = Duration::from_secs(120);

/// Sends `game` (start position and moves) to `engine` and searches it
/// (among `searchmoves` if given); `what` names the search in errors.
pub(crate) fn search_game(
    engine: &mut Engine,
    game: &Game,
    limit: Limit,
    searchmoves: &[UciMove],
    what: &str,
) -> Result<SearchResult, PlayerError> {
    let moves = game.uci_moves();
    engine
        .set_position(UciPosition::fen(game.start_fen(), &moves))
        .map_err(|e| PlayerError::engine("position", e))?;
    engine
        .search(limit, searchmoves, ENGINE_TIMEOUT)
        .map_err(|e| PlayerError::engine(what, e))
}

/// Asks `engine` for its move in `game` (among `searchmoves` if given).
pub(crate) fn stockfish_move(
    engine: &mut Engine,
    game: &Game,
    limit: Limit,
    searchmoves: &[UciMove],
) -> Result<Move, PlayerError> {
    let r = search_game(engine, game, limit, searchmoves, "searching")?;
    let fen = fen_of(game.position());
    let best = r.bestmove.ok_or_else(|| PlayerError::Position {
        fen: fen.clone(),
        message: "the engine answered bestmove (none)".into(),
    })?;
    best.to_move(game.position())
        .map_err(|_| PlayerError::Position {
            fen,
            message: format!("the engine played the illegal move {best}"),
        })
}

/// Stockfish (or any UCI engine) at a fixed limit.
pub(crate) struct EnginePlayer {
    engine: Engine,
    limit: Limit,
    name: String,
}

impl EnginePlayer {
    pub(crate) fn start(
        config: &EngineConfig,
        limit: Limit,
        name: String,
    ) -> Result<EnginePlayer, PlayerError> {
        let engine = Engine::start(config).map_err(|e| PlayerError::engine("starting", e))?;
        Ok(EnginePlayer {
            engine,
            limit,
            name,
        })
    }
}

impl Player for EnginePlayer {
    fn name(&self) -> &str {
        &self.name
    }

    fn new_game(&mut self) -> Result<(), PlayerError> {
        self.engine
            .new_game(ENGINE_TIMEOUT)
            .map_err(|e| PlayerError::engine("ucinewgame", e))
    }

    fn choose(&mut self, game: &Game) -> Result<Move, PlayerError> {
        stockfish_move(&mut self.engine, game, self.limit, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{game::parse_fen, predict::ordered_legal_moves};

    #[test]
    fn the_decisiveness_rule_fires_only_when_the_top_five_exceed_99_percent() {
        let high = [0.995, 0.2, 0.999, 0.991, 0.9999, 0.5, 0.993];
        assert_eq!(decisive_candidates(&high), Some(vec![4, 2, 0, 6, 3]));
        // The fifth best at exactly 0.99 does not exceed the threshold.
        let edge = [0.995, 0.2, 0.999, 0.99, 0.9999, 0.5, 0.993];
        assert_eq!(decisive_candidates(&edge), None);
        // NaN never counts as decisive, wherever it sorts.
        let nan = [0.995, f64::NAN, 0.999, 0.991, 0.9999, 0.993];
        assert_eq!(decisive_candidates(&nan), Some(vec![4, 2, 0, 5, 3]));
        let nan_in_top = [0.995, f64::NAN, 0.999, 0.991, 0.9999];
        assert_eq!(decisive_candidates(&nan_in_top), None);
        // Fewer than five legal moves: the policy decides alone.
        assert_eq!(decisive_candidates(&[1.0, 1.0, 1.0, 1.0]), None);
    }

    /// Scores every legal move of `game` 0.5, then `winners` (UCI) `score`.
    fn scored(game: &Game, winners: &[(&str, f64)]) -> Prediction {
        let legal = ordered_legal_moves(game.position()).unwrap();
        let scores = legal
            .iter()
            .map(|(uci, _, _)| {
                winners
                    .iter()
                    .find(|(w, _)| w == uci)
                    .map_or(0.5, |(_, s)| *s)
            })
            .collect();
        let (moves, actions) = legal.into_iter().map(|(_, m, a)| (m, a)).unzip();
        Prediction {
            moves,
            actions,
            scores,
            log_probs: Vec::new(),
        }
    }

    #[test]
    fn the_decisiveness_rule_lets_real_stockfish_pick_among_the_top_five() {
        let Some(engine) = crate::testing::stockfish() else {
            return;
        };
        let decisive = Decisive {
            engine,
            limit: Limit::Nodes(20_000),
        };
        // White to move mates with Ra8# (a1a8) and has many other winning
        // moves; the rule must search only the five the model put on top.
        let mut game = Game::new(parse_fen("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1").unwrap());
        let mut slot = None;
        let five = [
            ("a1a8", 0.995),
            ("a1a2", 0.999),
            ("a1b1", 0.998),
            ("g1f1", 0.997),
            ("h2h3", 0.996),
        ];
        let p = scored(&game, &five);
        let uci = |m: &Move| m.to_uci(CastlingMode::Standard).to_string();
        assert_eq!(p.best().map(|i| uci(&p.moves[i])), Some("a1a2".into()));
        let m = decisive_choice(&mut slot, &decisive, &game, &p).unwrap();
        assert_eq!(
            m.map(|m| m.to_uci(CastlingMode::Standard).to_string()),
            Some("a1a8".into())
        );
        assert!(slot.is_some(), "the engine starts on first use");

        // The mate ranked sixth: Stockfish may only choose among the five.
        let mut six = five.to_vec();
        six[0] = ("a1a8", 0.9905);
        six.push(("a1a3", 0.9999));
        let p = scored(&game, &six);
        let m = decisive_choice(&mut slot, &decisive, &game, &p)
            .unwrap()
            .unwrap();
        let uci = m.to_uci(CastlingMode::Standard).to_string();
        assert!(
            ["a1a2", "a1b1", "g1f1", "h2h3", "a1a3"].contains(&uci.as_str()),
            "{uci}"
        );

        // One of the five at 0.99 or below: the rule stays out.
        let mut low = five.to_vec();
        low[4] = ("h2h3", 0.98);
        assert!(
            decisive_choice(&mut slot, &decisive, &game, &scored(&game, &low))
                .unwrap()
                .is_none()
        );

        // The engine sees the game's moves, not just its start position:
        // after 1. Kf1 Kh8 Ra8# is still mate and Ke1 is legal.
        for m in ["g1f1", "g8h8"] {
            game.play_uci(m).unwrap();
        }
        let p = scored(
            &game,
            &[
                ("a1a8", 0.995),
                ("a1a2", 0.999),
                ("a1b1", 0.998),
                ("f1e1", 0.997),
                ("h2h3", 0.996),
            ],
        );
        let m = decisive_choice(&mut slot, &decisive, &game, &p).unwrap();
        assert_eq!(
            m.map(|m| m.to_uci(CastlingMode::Standard).to_string()),
            Some("a1a8".into())
        );
    }
}
