//! The 1968-move action vocabulary of ChessBench.
//!
//! Ruoss et al. (2024), "Grandmaster-Level Chess Without Search", §2.1 and
//! `searchless_chess/src/utils.py::_compute_all_possible_actions`: for every
//! square from a1 to h8, the UCI moves to every square a queen on that square
//! attacks on an empty board (ascending), then every square a knight attacks
//! (ascending); after all 64 squares, the promotions: for rank pairs (2→1),
//! (7→8), for files a..h, the straight push then the left and right captures,
//! each with the pieces `q r b n` in that order.
//!
//! Worked example: action 0 is `a1b1` (the queen's first target from a1),
//! action 1967 is `h7g8n` (the last promotion).
//!
//! A move's index depends only on its UCI string (from, to, promotion), so
//! castling is the king's two-square move (`e1g1`) as in standard UCI.

use std::sync::LazyLock;

use shakmaty::{CastlingMode, Move, Role, Square, uci::UciMove};

/// Number of actions in the ChessBench vocabulary.
pub const NUM_ACTIONS: usize = 1968;

/// Marker for "no action" in the lookup table.
const NONE: u16 = u16::MAX;

/// The vocabulary: index -> UCI and (from, to, promotion) -> index.
#[derive(Debug)]
pub struct ActionVocabulary {
    uci: Vec<Box<str>>,
    /// The same moves as [`UciMove`]s.
    moves: Vec<UciMove>,
    /// Indexed by [`key`]: from (6 bits), to (6 bits), promotion code (3 bits).
    index: Vec<u16>,
}

/// Promotion code used in the lookup key: 0 = none, else shakmaty's role
/// number (knight 2, bishop 3, rook 4, queen 5).
fn promo_code(promotion: Option<Role>) -> usize {
    promotion.map_or(0, |r| r as usize)
}

fn key(from: Square, to: Square, promotion: Option<Role>) -> usize {
    (usize::from(from) << 9) | (usize::from(to) << 3) | promo_code(promotion)
}

fn queen_targets(sq: i32) -> impl Iterator<Item = i32> {
    let (f, r) = (sq % 8, sq / 8);
    let mut out: Vec<i32> = Vec::with_capacity(27);
    for (df, dr) in [
        (1, 0),
        (-1, 0),
        (0, 1),
        (0, -1),
        (1, 1),
        (1, -1),
        (-1, 1),
        (-1, -1),
    ] {
        let (mut nf, mut nr) = (f + df, r + dr);
        while (0..8).contains(&nf) && (0..8).contains(&nr) {
            out.push(nr * 8 + nf);
            nf += df;
            nr += dr;
        }
    }
    out.sort_unstable();
    out.into_iter()
}

fn knight_targets(sq: i32) -> impl Iterator<Item = i32> {
    let (f, r) = (sq % 8, sq / 8);
    let mut out: Vec<i32> = [
        (1, 2),
        (2, 1),
        (2, -1),
        (1, -2),
        (-1, -2),
        (-2, -1),
        (-2, 1),
        (-1, 2),
    ]
    .iter()
    .map(|(df, dr)| (f + df, r + dr))
    .filter(|(nf, nr)| (0..8).contains(nf) && (0..8).contains(nr))
    .map(|(nf, nr)| nr * 8 + nf)
    .collect();
    out.sort_unstable();
    out.into_iter()
}

fn square(index: i32) -> Square {
    // Callers only pass 0..64.
    Square::new(index as u32)
}

impl ActionVocabulary {
    fn build() -> ActionVocabulary {
        let mut moves: Vec<(Square, Square, Option<Role>)> = Vec::with_capacity(NUM_ACTIONS);
        for from in 0..64 {
            for to in queen_targets(from).chain(knight_targets(from)) {
                moves.push((square(from), square(to), None));
            }
        }
        let promotions = [Role::Queen, Role::Rook, Role::Bishop, Role::Knight];
        for (rank, next_rank) in [(1, 0), (6, 7)] {
            for file in 0..8 {
                let mut targets = vec![file];
                if file > 0 {
                    targets.push(file - 1);
                }
                if file < 7 {
                    targets.push(file + 1);
                }
                for to_file in targets {
                    for role in promotions {
                        moves.push((
                            square(rank * 8 + file),
                            square(next_rank * 8 + to_file),
                            Some(role),
                        ));
                    }
                }
            }
        }
        let mut index = vec![NONE; 1 << 15];
        let mut uci = Vec::with_capacity(moves.len());
        let mut uci_moves = Vec::with_capacity(moves.len());
        for (i, &(from, to, promotion)) in moves.iter().enumerate() {
            index[key(from, to, promotion)] = i as u16;
            let m = UciMove::Normal {
                from,
                to,
                promotion,
            };
            uci.push(m.to_string().into_boxed_str());
            uci_moves.push(m);
        }
        ActionVocabulary {
            uci,
            moves: uci_moves,
            index,
        }
    }

    /// The UCI string of an action, e.g. `uci(0) == Some("a1b1")`.
    pub fn uci(&self, action: u16) -> Option<&str> {
        self.uci.get(usize::from(action)).map(|s| &**s)
    }

    /// The move of an action (castling as the king's two-square move).
    pub(crate) fn uci_move(&self, action: u16) -> Option<UciMove> {
        self.moves.get(usize::from(action)).copied()
    }

    /// All UCI strings in action order.
    pub(crate) fn iter_uci(&self) -> impl Iterator<Item = &str> {
        self.uci.iter().map(|s| &**s)
    }

    /// The action of a (from, to, promotion) triple, if it is in the vocabulary.
    pub(crate) fn index_of(
        &self,
        from: Square,
        to: Square,
        promotion: Option<Role>,
    ) -> Option<u16> {
        let i = self.index[key(from, to, promotion)];
        (i != NONE).then_some(i)
    }

    /// The action of a UCI move (castling as the king's two-square move).
    pub(crate) fn index_of_uci(&self, uci: &UciMove) -> Option<u16> {
        match *uci {
            UciMove::Normal {
                from,
                to,
                promotion,
            } => self.index_of(from, to, promotion),
            UciMove::Put { .. } | UciMove::Null => None,
        }
    }

    /// The action of a legal move in standard chess. Every legal move of a
    /// standard position is in the vocabulary; `None` only for drops.
    pub fn index_of_move(&self, m: &Move) -> Option<u16> {
        match *m {
            Move::Normal {
                from,
                to,
                promotion,
                ..
            } => self.index_of(from, to, promotion),
            Move::EnPassant { from, to } => self.index_of(from, to, None),
            Move::Castle { .. } => self.index_of_uci(&m.to_uci(CastlingMode::Standard)),
            Move::Put { .. } => None,
        }
    }

    /// Parses a UCI string such as `e7e8q` into its action.
    pub fn parse(&self, uci: &str) -> Option<u16> {
        uci.parse::<UciMove>()
            .ok()
            .and_then(|m| self.index_of_uci(&m))
    }
}

static VOCABULARY: LazyLock<ActionVocabulary> = LazyLock::new(ActionVocabulary::build);

/// The process-wide action vocabulary.
pub fn vocabulary() -> &'static ActionVocabulary {
    &VOCABULARY
}

#[cfg(test)]
mod tests {
    use super::*;
    use shakmaty::{Chess, Position};

    #[test]
    fn size_and_endpoints() {
        let v = vocabulary();
        assert_eq!(v.uci(0), Some("a1b1"));
        assert_eq!(v.uci(1967), Some("h7g8n"));
        assert_eq!(v.uci(1968), None);
    }

    #[test]
    fn round_trip_every_action() {
        let v = vocabulary();
        for (i, uci) in v.iter_uci().enumerate() {
            assert_eq!(v.parse(uci), Some(i as u16), "{uci}");
        }
    }

    #[test]
    fn castling_is_king_two_squares() {
        let v = vocabulary();
        let pos: Chess = "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"
            .parse::<shakmaty::fen::Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap();
        let castles: Vec<&str> = pos
            .legal_moves()
            .iter()
            .filter(|m| m.is_castle())
            .map(|m| v.uci(v.index_of_move(m).unwrap()).unwrap())
            .collect();
        assert_eq!(castles.len(), 2);
        assert!(castles.contains(&"e1g1") && castles.contains(&"e1c1"));
    }

    /// `tokens.jsonl` lists each board's legal moves sorted by action index.
    #[test]
    fn legal_actions_match_golden() {
        let text = crate::testing::golden("tokens.jsonl");
        let v = vocabulary();
        let mut checked = 0;
        let mut terminal = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let fen = row["fen"].as_str().unwrap();
            let pos: Chess = fen
                .parse::<shakmaty::fen::Fen>()
                .unwrap()
                .into_position(CastlingMode::Standard)
                .unwrap();
            let mut ours: Vec<u64> = pos
                .legal_moves()
                .iter()
                .map(|m| u64::from(v.index_of_move(m).unwrap()))
                .collect();
            ours.sort_unstable();
            let want: Vec<u64> = row["legal_actions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_u64().unwrap())
                .collect();
            assert_eq!(ours, want, "{fen}");
            terminal += usize::from(want.is_empty());
            checked += 1;
        }
        assert!(
            checked >= 400 && terminal >= 2,
            "{checked} boards, {terminal} terminal"
        );
    }

    #[test]
    fn matches_golden_file() {
        let text = crate::testing::golden("actions.txt");
        let golden: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        let ours: Vec<&str> = vocabulary().iter_uci().collect();
        assert_eq!(ours, golden);
    }
}
