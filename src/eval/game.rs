//! A game in progress: the moves from a start position, repetition
//! bookkeeping (for the threefold rule and the paper's repetition
//! workaround), the end-of-game rules and PGN output.
//!
//! A game ends as python-chess's `Board.outcome(claim_draw=True)` would end
//! it: checkmate, stalemate, insufficient material, a threefold repetition
//! or the fifty-move rule (both claimed at once), plus a cap on the game's
//! length (adjudicated a draw) so a shuffling pair of engines terminates.

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
pub enum Termination {
    Checkmate,
    Stalemate,
    InsufficientMaterial,
    ThreefoldRepetition,
    FiftyMoves,
    /// The length cap: adjudicated a draw.
    MaxPlies,
}

impl Termination {
    pub fn name(self) -> &'static str {
        match self {
            Termination::Checkmate => "checkmate",
            Termination::Stalemate => "stalemate",
            Termination::InsufficientMaterial => "insufficient material",
            Termination::ThreefoldRepetition => "threefold repetition",
            Termination::FiftyMoves => "fifty-move rule",
            Termination::MaxPlies => "adjudicated: length cap",
        }
    }
}

/// A finished game's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GameResult {
    WhiteWins,
    BlackWins,
    Draw,
}

impl GameResult {
    /// `1-0`, `0-1`, `1/2-1/2`.
    pub fn pgn(self) -> &'static str {
        match self {
            GameResult::WhiteWins => "1-0",
            GameResult::BlackWins => "0-1",
            GameResult::Draw => "1/2-1/2",
        }
    }

    /// White's score: 1, 0 or 0.5.
    pub fn white_score(self) -> f64 {
        match self {
            GameResult::WhiteWins => 1.0,
            GameResult::BlackWins => 0.0,
            GameResult::Draw => 0.5,
        }
    }
}

/// A game from a start position.
#[derive(Debug, Clone)]
pub struct Game {
    start: Chess,
    start_fen: String,
    position: Chess,
    moves: Vec<Move>,
    /// The key of every position so far, the start included.
    keys: Vec<RepetitionKey>,
}

/// `position`'s FEN as ChessBench writes boards (legal en passant only).
pub fn fen_of(position: &Chess) -> String {
    Fen::from_position(position, EnPassantMode::Legal).to_string()
}

/// Parses a FEN (standard chess, standard castling).
pub fn parse_fen(fen: &str) -> Result<Chess, String> {
    Fen::from_ascii(fen.trim().as_bytes())
        .map_err(|e| format!("invalid FEN {fen:?}: {e}"))?
        .into_position(CastlingMode::Standard)
        .map_err(|e| format!("illegal position {fen:?}: {e}"))
}

/// Parses a UCI move and checks it is legal in `pos`.
pub fn parse_uci_move(pos: &Chess, uci: &str) -> Result<Move, String> {
    let m: UciMove = uci
        .parse()
        .map_err(|_| format!("{uci:?} is not a UCI move"))?;
    m.to_move(pos)
        .map_err(|_| format!("{uci} is not legal in {}", fen_of(pos)))
}

impl Game {
    /// A game from `start`.
    pub fn new(start: Chess) -> Game {
        Game {
            start_fen: fen_of(&start),
            keys: vec![key(&start)],
            position: start.clone(),
            start,
            moves: Vec::new(),
        }
    }

    /// The current position.
    pub fn position(&self) -> &Chess {
        &self.position
    }

    /// The moves played so far.
    pub fn moves(&self) -> &[Move] {
        &self.moves
    }

    /// The start position's FEN.
    pub fn start_fen(&self) -> &str {
        &self.start_fen
    }

    /// Whether the game started from the standard initial position.
    pub fn from_startpos(&self) -> bool {
        self.start == Chess::default()
    }

    /// Plays `m`, which must be legal in the current position.
    pub fn play(&mut self, m: &Move) {
        self.position.play_unchecked(*m);
        self.keys.push(key(&self.position));
        self.moves.push(*m);
    }

    /// Plays a UCI move after checking it is legal.
    pub fn play_uci(&mut self, uci: &str) -> Result<Move, String> {
        let m = parse_uci_move(&self.position, uci)?;
        self.play(&m);
        Ok(m)
    }

    /// How often the position after `m` has occurred so far (2 means `m`
    /// allows a threefold repetition claim).
    pub fn occurrences_after(&self, m: &Move) -> usize {
        let mut next = self.position.clone();
        next.play_unchecked(*m);
        let k = key(&next);
        self.keys.iter().filter(|&x| *x == k).count()
    }

    /// The moves so far in UCI (standard castling notation).
    pub fn uci_moves(&self) -> Vec<UciMove> {
        self.moves
            .iter()
            .map(|m| m.to_uci(CastlingMode::Standard))
            .collect()
    }

    /// The result if the game is over (draws claimed at once), or a draw by
    /// adjudication after `max_plies` moves.
    pub fn outcome(&self, max_plies: usize) -> Option<(GameResult, Termination)> {
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
        if self.keys.iter().filter(|&k| k == now).count() >= 3 {
            return draw(Termination::ThreefoldRepetition);
        }
        if pos.halfmoves() >= 100 {
            return draw(Termination::FiftyMoves);
        }
        if self.moves.len() >= max_plies {
            return draw(Termination::MaxPlies);
        }
        None
    }

    /// The game as PGN: `headers` (in order) then SetUp/FEN for a non-
    /// standard start, then the movetext, wrapped at 80 columns.
    pub fn pgn(&self, headers: &[(&str, String)], result: &str) -> String {
        let mut out = String::new();
        for (k, v) in headers {
            let v = v.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(out, "[{k} \"{v}\"]");
        }
        if !self.from_startpos() {
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
        assert_eq!(g.outcome(500), None);
        // f6g8 returns to the start position for the third time.
        let m = parse_uci_move(g.position(), "f6g8").unwrap();
        assert_eq!(g.occurrences_after(&m), 2);
        g.play(&m);
        assert_eq!(
            g.outcome(500),
            Some((GameResult::Draw, Termination::ThreefoldRepetition))
        );
    }

    #[test]
    fn fools_mate_and_its_pgn() {
        let mut g = Game::new(Chess::default());
        play(&mut g, "f2f3 e7e5 g2g4 d8h4");
        assert_eq!(
            g.outcome(500),
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
            g.outcome(2),
            Some((GameResult::Draw, Termination::MaxPlies))
        );
        let pgn = g.pgn(&[], "1/2-1/2");
        assert!(pgn.contains("[FEN \"4k3/8/8/8/8/8/4P3/4K3 b - - 0 40\"]"));
        assert!(pgn.contains("40... Kd7 41. e4 1/2-1/2"), "{pgn}");
    }

    #[test]
    fn illegal_and_malformed_moves_are_errors() {
        let g = Game::new(Chess::default());
        assert!(
            parse_uci_move(g.position(), "e2e5")
                .unwrap_err()
                .contains("not legal")
        );
        assert!(
            parse_uci_move(g.position(), "xyz")
                .unwrap_err()
                .contains("not a UCI move")
        );
        assert!(parse_fen("not a fen").is_err());
    }
}
