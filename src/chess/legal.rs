//! A board's legal moves as ChessBench actions: what the oracle searches,
//! what a `.bag` import checks, what the evaluator scores.

use shakmaty::{CastlingMode, Chess, EnPassantMode, fen::Fen, uci::UciMove};

use super::{actions::vocabulary, movegen::legal_actions_of};

/// What kind of value a state value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueKind {
    /// From an engine search.
    Search,
    /// Terminal: the side to move is checkmated (win probability 0).
    Checkmate,
    /// Terminal: stalemate (win probability 0.5).
    Stalemate,
}

impl ValueKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ValueKind::Search => "search",
            ValueKind::Checkmate => "checkmate",
            ValueKind::Stalemate => "stalemate",
        }
    }
}

/// A board ready for the engine: its legal moves with their action indices
/// and UCI (standard castling notation, e1g1), sorted by action index.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub fen: String,
    pub moves: Vec<(u16, UciMove)>,
    pub terminal: Option<ValueKind>,
}

/// Why a board could not be prepared (a corrupt boards table).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error("invalid FEN {0:?}: {1}")]
    Fen(String, String),
    #[error("FEN {fen:?} has {actual} legal moves, but the boards table says {expected}")]
    MoveCount {
        fen: String,
        actual: usize,
        expected: usize,
    },
    #[error("FEN {0:?}: a legal move has no ChessBench action index")]
    NoAction(String),
}

/// Parses a FEN and lists its legal moves.
pub(crate) fn prepare(fen: &str, expected_moves: Option<usize>) -> Result<Prepared, PrepareError> {
    let pos: Chess = Fen::from_ascii(fen.as_bytes())
        .map_err(|e| PrepareError::Fen(fen.to_owned(), e.to_string()))?
        .into_position(CastlingMode::Standard)
        .map_err(|e| PrepareError::Fen(fen.to_owned(), e.to_string()))?;
    let mut actions = Vec::with_capacity(64);
    let in_check = legal_actions_of(&pos, &mut actions);
    if let Some(expected) = expected_moves
        && expected != actions.len()
    {
        return Err(PrepareError::MoveCount {
            fen: fen.to_owned(),
            actual: actions.len(),
            expected,
        });
    }
    let vocab = vocabulary();
    let mut moves = Vec::with_capacity(actions.len());
    for a in actions {
        let m = vocab
            .uci_move(a)
            .ok_or_else(|| PrepareError::NoAction(fen.to_owned()))?;
        moves.push((a, m));
    }
    let terminal = moves.is_empty().then_some(if in_check {
        ValueKind::Checkmate
    } else {
        ValueKind::Stalemate
    });
    // The engine gets the FEN as shakmaty prints it (legal en passant only).
    let _ = EnPassantMode::Legal;
    Ok(Prepared {
        fen: fen.to_owned(),
        moves,
        terminal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_lists_moves_by_action_and_detects_terminals() {
        let p = prepare(
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
            Some(20),
        )
        .unwrap();
        assert_eq!(p.moves.len(), 20);
        assert!(p.moves.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(p.terminal, None);
        // Fool's mate: White is checkmated.
        let p = prepare(
            "rnb1kbnr/pppp1ppp/8/4p3/6Pq/5P2/PPPPP2P/RNBQKBNR w KQkq - 1 3",
            Some(0),
        )
        .unwrap();
        assert_eq!(p.terminal, Some(ValueKind::Checkmate));
        let p = prepare("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", None).unwrap();
        assert_eq!(p.terminal, Some(ValueKind::Stalemate));
        assert!(matches!(
            prepare("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", Some(3)),
            Err(PrepareError::MoveCount { .. })
        ));
        // Castling goes to the engine as e1g1.
        let p = prepare("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1", None).unwrap();
        assert!(p.moves.iter().any(|(_, m)| m.to_string() == "e1g1"));
    }
}
