//! A game in progress: the moves from a start position, repetition
//! bookkeeping (for the threefold rule and the paper's repetition
//! workaround), the end-of-game rules and PGN output.
//!
//! A game ends where searchless_chess's `tournament.py` stops its loop
//! (`board.is_game_over() or board.can_claim_fifty_moves() or
//! board.is_repetition()` in python-chess): checkmate, stalemate,
//! insufficient material, a position occurring for the third time, or a
//! fifty-move claim (including "the next move makes it fifty"), plus an
//! optional cap on the game's length (adjudicated a draw). The Stockfish
//! adjudication that tournament applies after every move lives in
//! [`super::tournament::Adjudicator`].

use std::fmt::Write as _;

use shakmaty::{
    Bitboard, Board, CastlingMode, Chess, Color, EnPassantMode, Move, Position, Square, fen::Fen,
    san::SanPlus, uci::UciMove,
};

/// What a position is for repetition: pieces, side to move, castling
/// rights and a legal en-passant square (FIDE 9.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RepetitionKey {
    board: Board,
    turn: Color,
    castles: Bitboard,
    ep: Option<Square>,
}

fn key(pos: &Chess) -> RepetitionKey {
    RepetitionKey {
        board: pos.board().clone(),
        turn: pos.turn(),
        castles: pos.castles().castling_rights(),
        ep: pos.ep_square(EnPassantMode::Legal),
    }
}

/// How a game ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Termination {
    Checkmate,
    Stalemate,
    InsufficientMaterial,
    ThreefoldRepetition,
    FiftyMoves,
    /// The length cap: adjudicated a draw.
    MaxPlies,
    /// Stockfish's evaluation after a move was a mate or beyond the
    /// threshold (searchless_chess: 1300 centipawns).
    Adjudicated,
}

impl Termination {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Termination::Checkmate => "checkmate",
            Termination::Stalemate => "stalemate",
            Termination::InsufficientMaterial => "insufficient material",
            Termination::ThreefoldRepetition => "threefold repetition",
            Termination::FiftyMoves => "fifty-move rule",
            Termination::MaxPlies => "adjudicated: length cap",
            Termination::Adjudicated => "adjudicated: Stockfish evaluation",
        }
    }
}

/// A finished game's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) enum GameResult {
    WhiteWins,
    BlackWins,
    Draw,
}

impl GameResult {
    /// `1-0`, `0-1`, `1/2-1/2`.
    pub(crate) fn pgn(self) -> &'static str {
        match self {
            GameResult::WhiteWins => "1-0",
            GameResult::BlackWins => "0-1",
            GameResult::Draw => "1/2-1/2",
        }
    }
}

/// A game from a start position.
#[derive(Debug, Clone)]
pub(crate) struct Game {
    start: Chess,
    start_fen: String,
    position: Chess,
    moves: Vec<Move>,
    /// The key of every position so far, the start included.
    keys: Vec<RepetitionKey>,
}

/// `position`'s FEN as ChessBench writes boards (legal en passant only).
pub(crate) fn fen_of(position: &Chess) -> String {
    Fen::from_position(position, EnPassantMode::Legal).to_string()
}

/// A position or move that cannot be played.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlayError {
    #[error("invalid FEN {fen:?}: {reason}")]
    Fen { fen: String, reason: String },
    #[error("illegal position {fen:?}: {reason}")]
    Position { fen: String, reason: String },
    #[error("{0:?} is not a UCI move")]
    Uci(String),
    #[error("{token:?} is not a SAN move (after {moves} moves)")]
    San { token: String, moves: usize },
    #[error("{mv} is not legal in {fen}")]
    Illegal { mv: String, fen: String },
    #[error("{mv} is not legal in {fen} (after {moves} moves)")]
    IllegalSan {
        mv: String,
        fen: String,
        moves: usize,
    },
}

/// Parses a FEN (standard chess, standard castling).
pub(crate) fn parse_fen(fen: &str) -> Result<Chess, PlayError> {
    Fen::from_ascii(fen.trim().as_bytes())
        .map_err(|e| PlayError::Fen {
            fen: fen.to_owned(),
            reason: e.to_string(),
        })?
        .into_position(CastlingMode::Standard)
        .map_err(|e| PlayError::Position {
            fen: fen.to_owned(),
            reason: e.to_string(),
        })
}

/// Parses a UCI move and checks it is legal in `pos`.
pub(crate) fn parse_uci_move(pos: &Chess, uci: &str) -> Result<Move, PlayError> {
    let m: UciMove = uci.parse().map_err(|_| PlayError::Uci(uci.to_owned()))?;
    check_uci_move(pos, &m)
}

/// Checks that a UCI move is legal in `pos`.
pub(crate) fn check_uci_move(pos: &Chess, m: &UciMove) -> Result<Move, PlayError> {
    m.to_move(pos).map_err(|_| PlayError::Illegal {
        mv: m.to_string(),
        fen: fen_of(pos),
    })
}

impl Game {
    /// A game from `start`.
    pub(crate) fn new(start: Chess) -> Game {
        Game {
            start_fen: fen_of(&start),
            keys: vec![key(&start)],
            position: start.clone(),
            start,
            moves: Vec::new(),
        }
    }

    /// The current position.
    pub(crate) fn position(&self) -> &Chess {
        &self.position
    }

    /// The moves played so far.
    pub(crate) fn moves(&self) -> &[Move] {
        &self.moves
    }

    /// The start position's FEN.
    pub(crate) fn start_fen(&self) -> &str {
        &self.start_fen
    }

    /// Whether the game started from the standard initial position.
    pub(crate) fn starts_at_startpos(&self) -> bool {
        self.start == Chess::default()
    }

    /// Plays `m`, which must be legal in the current position.
    pub(crate) fn play(&mut self, m: &Move) {
        self.position.play_unchecked(*m);
        self.keys.push(key(&self.position));
        self.moves.push(*m);
    }

    /// Plays a UCI move after checking it is legal.
    pub(crate) fn play_uci(&mut self, uci: &str) -> Result<Move, PlayError> {
        let m = parse_uci_move(&self.position, uci)?;
        self.play(&m);
        Ok(m)
    }

    /// How often the position after `m` has occurred so far (2 means `m`
    /// repeats a position for the third time).
    #[cfg(test)]
    pub(crate) fn occurrences_after(&self, m: &Move) -> usize {
        let mut next = self.position.clone();
        next.play_unchecked(*m);
        self.count(&key(&next))
    }

    fn count(&self, k: &RepetitionKey) -> usize {
        self.keys.iter().filter(|&x| x == k).count()
    }

    /// Whether after `m` a draw by repetition could be claimed: python-
    /// chess's `is_fivefold_repetition() or can_claim_threefold_repetition()`
    /// on the board after `m`, which searchless_chess's engines use to score
    /// `m` 0.5. True when the position after `m` occurs for the third time,
    /// or when some reply of the opponent would repeat a position for the
    /// third time (counting the position after `m`).
    pub(crate) fn draw_claimable_after(&self, m: &Move) -> bool {
        let mut next = self.position.clone();
        next.play_unchecked(*m);
        let k = key(&next);
        if self.count(&k) + 1 >= 3 {
            return true;
        }
        next.legal_moves().into_iter().any(|reply| {
            // Captures and pawn moves cannot recreate an earlier position.
            if reply.is_zeroing() {
                return false;
            }
            let mut after = next.clone();
            after.play_unchecked(reply);
            let k2 = key(&after);
            self.count(&k2) + usize::from(k2 == k) >= 2
        })
    }

    /// python-chess's `can_claim_fifty_moves`: fifty moves without a capture
    /// or pawn move have been played, or the next (non-zeroing) move would
    /// complete them.
    fn can_claim_fifty_moves(&self) -> bool {
        let pos = &self.position;
        let h = pos.halfmoves();
        h >= 100 || (h >= 99 && pos.legal_moves().iter().any(|m| !m.is_zeroing()))
    }

    /// The moves so far in UCI (standard castling notation).
    pub(crate) fn uci_moves(&self) -> Vec<UciMove> {
        self.moves
            .iter()
            .map(|m| m.to_uci(CastlingMode::Standard))
            .collect()
    }

    /// The result if the game is over (draws claimed at once), or a draw by
    /// adjudication after `max_plies` moves (no cap when `None`).
    pub(crate) fn outcome(&self, max_plies: Option<usize>) -> Option<(GameResult, Termination)> {
        let pos = &self.position;
        if pos.is_checkmate() {
            let r = match pos.turn() {
                Color::White => GameResult::BlackWins,
                Color::Black => GameResult::WhiteWins,
            };
            return Some((r, Termination::Checkmate));
        }
        let draw = |t| Some((GameResult::Draw, t));
        if pos.is_stalemate() {
            return draw(Termination::Stalemate);
        }
        if pos.is_insufficient_material() {
            return draw(Termination::InsufficientMaterial);
        }
        let now = self
            .keys
            .last()
            .expect("the start position is always there");
        if self.count(now) >= 3 {
            return draw(Termination::ThreefoldRepetition);
        }
        if self.can_claim_fifty_moves() {
            return draw(Termination::FiftyMoves);
        }
        if max_plies.is_some_and(|cap| self.moves.len() >= cap) {
            return draw(Termination::MaxPlies);
        }
        None
    }

    /// The game as PGN: `headers` (in order) then SetUp/FEN for a non-
    /// standard start, then the movetext, wrapped at 80 columns.
    pub(crate) fn pgn(&self, headers: &[(&str, String)], result: &str) -> String {
        let mut out = String::new();
        for (k, v) in headers {
            // One line per tag: a newline would end the tag pair.
            let v = v
                .replace(['\n', '\r'], " ")
                .replace('\\', "\\\\")
                .replace('"', "\\\"");
            let _ = writeln!(out, "[{k} \"{v}\"]");
        }
        if !self.starts_at_startpos() {
            let _ = writeln!(out, "[SetUp \"1\"]");
            let _ = writeln!(out, "[FEN \"{}\"]", self.start_fen);
        }
        out.push('\n');
        let mut pos = self.start.clone();
        let mut line = String::new();
        let mut push = |token: &str, out: &mut String| {
            if !line.is_empty() && line.len() + 1 + token.len() > 80 {
                out.push_str(&line);
                out.push('\n');
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(token);
        };
        for (i, m) in self.moves.iter().enumerate() {
            let number = pos.fullmoves().get();
            if pos.turn() == Color::White {
                push(&format!("{number}."), &mut out);
            } else if i == 0 {
                push(&format!("{number}..."), &mut out);
            }
            let san = SanPlus::from_move_and_play_unchecked(&mut pos, *m);
            push(&san.to_string(), &mut out);
        }
        push(result, &mut out);
        out.push_str(&line);
        out.push_str("\n\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn play(game: &mut Game, moves: &str) {
        for m in moves.split_whitespace() {
            game.play_uci(m).unwrap();
        }
    }

    #[test]
    fn knight_shuffle_is_a_threefold_repetition() {
        let mut g = Game::new(Chess::default());
        play(&mut g, "g1f3 g8f6 f3g1 f6g8 g1f3 g8f6 f3g1");
        assert_eq!(g.outcome(Some(500)), None);
        // f6g8 returns to the start position for the third time.
        let m = parse_uci_move(g.position(), "f6g8").unwrap();
        assert_eq!(g.occurrences_after(&m), 2);
        g.play(&m);
        assert_eq!(
            g.outcome(Some(500)),
            Some((GameResult::Draw, Termination::ThreefoldRepetition))
        );
    }

    #[test]
    fn a_move_is_a_claimable_draw_when_a_reply_would_repeat_three_times() {
        let mut g = Game::new(Chess::default());
        // K = (Nf3, Ng8, Black to move) occurs twice: after 1. Nf3 and
        // after 3. Nf3 (from h4). The start position occurred once.
        play(&mut g, "g1f3 g8h6 f3h4 h6g8 h4f3 g8h6 f3g1");
        // ...Ng8 reaches the start position only a second time, but White's
        // reply Nf3 would reach K a third time: python-chess's
        // can_claim_threefold_repetition() is true after ...Ng8.
        let ng8 = parse_uci_move(g.position(), "h6g8").unwrap();
        assert_eq!(g.occurrences_after(&ng8), 1);
        assert!(g.draw_claimable_after(&ng8));
        // ...Nf5 is new and no reply recreates an old position.
        let nf5 = parse_uci_move(g.position(), "h6f5").unwrap();
        assert!(!g.draw_claimable_after(&nf5));
        // The third occurrence itself is claimable by the first clause.
        play(&mut g, "h6g8");
        let nf3 = parse_uci_move(g.position(), "g1f3").unwrap();
        assert_eq!(g.occurrences_after(&nf3), 2);
        assert!(g.draw_claimable_after(&nf3));
        g.play(&nf3);
        assert_eq!(
            g.outcome(None),
            Some((GameResult::Draw, Termination::ThreefoldRepetition))
        );
    }

    #[test]
    fn fifty_moves_are_claimable_one_move_early() {
        // Halfmove clock 99, White to move: Kf1 completes the fifty moves.
        let g = Game::new(parse_fen("4k3/8/8/8/8/8/8/R3K3 w - - 99 80").unwrap());
        assert_eq!(
            g.outcome(None),
            Some((GameResult::Draw, Termination::FiftyMoves))
        );
        // At 98 it is not.
        let g = Game::new(parse_fen("4k3/8/8/8/8/8/8/R3K3 w - - 98 80").unwrap());
        assert_eq!(g.outcome(None), None);
        // At 99 with only zeroing moves it is not: White's one legal move
        // is the capture Kxg2.
        let g = Game::new(parse_fen("7k/8/8/8/8/8/6r1/7K w - - 99 80").unwrap());
        assert_eq!(g.position().legal_moves().len(), 1);
        assert_eq!(g.outcome(None), None);
    }

    #[test]
    fn fools_mate_and_its_pgn() {
        let mut g = Game::new(Chess::default());
        play(&mut g, "f2f3 e7e5 g2g4 d8h4");
        assert_eq!(
            g.outcome(Some(500)),
            Some((GameResult::BlackWins, Termination::Checkmate))
        );
        let pgn = g.pgn(&[("White", "a".into()), ("Black", "b".into())], "0-1");
        assert!(pgn.contains("1. f3 e5 2. g4 Qh4# 0-1"), "{pgn}");
        assert!(!pgn.contains("FEN"));
    }

    #[test]
    fn length_cap_and_pgn_from_a_fen() {
        let start = parse_fen("4k3/8/8/8/8/8/4P3/4K3 b - - 0 40").unwrap();
        let mut g = Game::new(start);
        play(&mut g, "e8d7 e2e4");
        assert_eq!(
            g.outcome(Some(2)),
            Some((GameResult::Draw, Termination::MaxPlies))
        );
        let pgn = g.pgn(&[], "1/2-1/2");
        assert!(pgn.contains("[FEN \"4k3/8/8/8/8/8/4P3/4K3 b - - 0 40\"]"));
        assert!(pgn.contains("40... Kd7 41. e4 1/2-1/2"), "{pgn}");
    }

    #[test]
    fn illegal_and_malformed_moves_are_errors() {
        let g = Game::new(Chess::default());
        assert!(matches!(
            parse_uci_move(g.position(), "e2e5"),
            Err(PlayError::Illegal { .. })
        ));
        assert_eq!(
            parse_uci_move(g.position(), "xyz"),
            Err(PlayError::Uci("xyz".into()))
        );
        assert!(matches!(parse_fen("not a fen"), Err(PlayError::Fen { .. })));
    }
}
