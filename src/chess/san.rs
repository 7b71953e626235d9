//! Resolving a game's SAN moves without generating a move list.
//!
//! Ingest plays every move of every game: ~66 per Lichess game, 4.4 billion
//! for the paper's 10^7 games. shakmaty's [`San::to_move`] resolves a SAN by
//! generating the candidate moves to its destination into a 256-entry move
//! list that it returns by value and then filters: on Lichess games about a
//! fifth of a parse thread's time (`perf`), a quarter of that copying the
//! list. [`to_move`] finds the same move from attack sets for the common
//! case (not in check; a piece, pawn or king move; no en passant capture)
//! and hands everything else (check, castling, en passant, drops) to
//! shakmaty, so its answer, move or error, is shakmaty's in every position:
//! the tests compare the two on every legal move of random games written
//! every way, on every SAN to every square, and on arbitrary SANs. Ingest of
//! the Lichess sample repeated 40 times: 1.86 -> 1.69 CPU s, 0.99 -> 0.91 s
//! (medians of 8 interleaved runs, 2 cores).

use super::movegen;
use shakmaty::{
    Bitboard, Chess, Color, EnPassantMode, Move, Position as _, Role, Square, attacks,
    san::{San, SanError},
};

/// The move `san` denotes in `pos`, exactly as [`San::to_move`] resolves it.
#[inline]
pub(crate) fn to_move(san: San, pos: &Chess) -> Result<Move, SanError> {
    let San::Normal {
        role,
        file,
        rank,
        capture,
        to,
        promotion,
    } = san
    else {
        return san.to_move(pos);
    };
    let board = pos.board();
    let turn = pos.turn();
    if pos.us().contains(to) {
        // No legal move, evasion or not, lands on one's own piece.
        return Err(SanError::IllegalSan);
    }
    let occupied = board.occupied();
    let Some(king) = board.king_of(turn) else {
        return san.to_move(pos);
    };
    if (role == Role::Pawn && pos.ep_square(EnPassantMode::Always) == Some(to))
        || board.attacks_to(king, turn.other(), occupied).any()
    {
        return san.to_move(pos);
    }
    let target = board.role_at(to);
    // Every candidate below captures what stands on `to` (en passant was
    // handed over above), so the SAN's capture flag decides them all.
    if capture != target.is_some() {
        return Err(SanError::IllegalSan);
    }
    let mut from = match role {
        Role::Pawn => {
            // A pawn reaching the back rank must promote (to a piece), and
            // only there.
            let legal_promotion = if Bitboard::BACKRANKS.contains(to) {
                promotion.is_some_and(|p| p != Role::Pawn && p != Role::King)
            } else {
                promotion.is_none()
            };
            if !legal_promotion {
                return Err(SanError::IllegalSan);
            }
            pawn_sources(pos, turn, to, capture, occupied)
        }
        Role::King => {
            if promotion.is_some() || board.attacks_to(to, turn.other(), occupied).any() {
                return Err(SanError::IllegalSan);
            }
            attacks::king_attacks(to) & pos.our(Role::King)
        }
        Role::Knight | Role::Bishop | Role::Rook | Role::Queen => {
            if promotion.is_some() {
                return Err(SanError::IllegalSan);
            }
            let reach = match role {
                Role::Knight => attacks::knight_attacks(to),
                Role::Bishop => attacks::bishop_attacks(to, occupied),
                Role::Rook => attacks::rook_attacks(to, occupied),
                _ => attacks::queen_attacks(to, occupied), // the queen
            };
            reach & pos.our(role)
        }
    };
    if let Some(f) = file {
        from &= Bitboard::from_file(f);
    }
    if let Some(r) = rank {
        from &= Bitboard::from_rank(r);
    }
    if from.any() && role != Role::King {
        // A piece pinned to its king moves only along the pin.
        let pinned = movegen::slider_blockers(
            king,
            occupied,
            board.rooks_and_queens() & pos.them(),
            board.bishops_and_queens() & pos.them(),
        );
        from = from
            .into_iter()
            .filter(|&sq| !pinned.contains(sq) || attacks::aligned(sq, to, king))
            .collect();
    }
    match from.single_square() {
        Some(from) => Ok(Move::Normal {
            role,
            from,
            capture: target,
            to,
            promotion,
        }),
        None if from.any() => Err(SanError::AmbiguousSan),
        None => Err(SanError::IllegalSan),
    }
}

/// Our pawns that move to `to` (empty or holding an enemy piece): diagonally
/// onto an enemy piece, or straight ahead by one or, from their second rank,
/// two empty squares.
fn pawn_sources(
    pos: &Chess,
    turn: Color,
    to: Square,
    capture: bool,
    occupied: Bitboard,
) -> Bitboard {
    let pawns = pos.our(Role::Pawn);
    if capture {
        return attacks::pawn_attacks(turn.other(), to) & pawns;
    }
    let back = turn.fold_wb(-8, 8);
    let one = Bitboard::from_square(to).shift(back);
    let single = one & pawns;
    // Two squares: `to` in the pawn's half of the board (its fourth rank
    // for a pawn on its second), the square between empty.
    let half = turn.fold_wb(Bitboard::SOUTH, Bitboard::NORTH);
    let double = if half.contains(to) && !(one & occupied).any() {
        one.shift(back) & pawns
    } else {
        Bitboard(0)
    };
    single | double
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chess::random_games::game;
    use proptest::prelude::*;
    use shakmaty::{CastlingMode, File, Rank, fen::Fen};

    fn same(san: San, pos: &Chess) {
        assert_eq!(
            to_move(san, pos),
            san.to_move(pos),
            "{san} in {}",
            Fen::from_position(pos, EnPassantMode::Legal)
        );
    }

    /// Every way of writing every legal move (minimal and fully
    /// disambiguated SAN, the capture flag flipped, each promotion), and
    /// each under-disambiguated, resolves as shakmaty resolves it.
    fn every_legal_move(pos: &Chess) {
        for m in pos.legal_moves() {
            let minimal = San::from_move(pos, m);
            same(minimal, pos);
            if let San::Normal {
                role,
                capture,
                to,
                promotion,
                ..
            } = minimal
            {
                let from = m.from().unwrap();
                for (file, rank) in [
                    (None, None),
                    (Some(from.file()), None),
                    (None, Some(from.rank())),
                    (Some(from.file()), Some(from.rank())),
                ] {
                    for capture in [capture, !capture] {
                        for promotion in [promotion, None, Some(Role::Queen), Some(Role::King)] {
                            same(
                                San::Normal {
                                    role,
                                    file,
                                    rank,
                                    capture,
                                    to,
                                    promotion,
                                },
                                pos,
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn resolves_every_move_of_random_games_as_shakmaty() {
        for seed in 0..300 {
            for pos in game(seed, 200) {
                every_legal_move(&pos);
            }
        }
    }

    /// Every destination for every role, with and without the capture flag
    /// and a promotion, undisambiguated (and for pawns from every file):
    /// mostly SANs no legal move matches.
    #[test]
    fn resolves_every_san_to_every_square_as_shakmaty() {
        for seed in 1000..1020 {
            for pos in game(seed, 200) {
                for (role, to) in Role::ALL
                    .into_iter()
                    .flat_map(|r| Square::ALL.map(|sq| (r, sq)))
                {
                    // Pawns also from every file (0: none given).
                    let files = if role == Role::Pawn { 9 } else { 1 };
                    for capture in [false, true] {
                        for promotion in [None, Some(Role::Queen), Some(Role::Knight)] {
                            for file in 0..files {
                                let san = San::Normal {
                                    role,
                                    file: u32::checked_sub(file, 1).map(File::new),
                                    rank: None,
                                    capture,
                                    to,
                                    promotion,
                                };
                                same(san, &pos);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pins_en_passant_promotions_and_checks() {
        for fen in [
            // Two knights reach d5 and d1, one of them pinned: Nd5, not Ncd5.
            "4r1k1/8/8/8/8/2N1N3/8/4K3 w - - 0 1",
            // Rook pinned but moving along the pin.
            "4r1k1/8/8/8/8/8/4R3/4K3 w - - 0 1",
            // En passant that would expose the king along the rank.
            "8/8/8/K2pP2r/8/8/8/7k w - d6 0 1",
            // En passant available and legal.
            "4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 1",
            // Promotions by push and capture, to a piece and not.
            "1n2k3/P7/8/8/8/8/8/4K3 w - - 0 1",
            // In check: evasions go to shakmaty.
            "4k3/8/8/8/8/8/4q3/4K3 w - - 0 1",
            // Castling both ways and a king next to an attacked square.
            "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1",
            // Double push blocked on the third rank.
            "4k3/8/8/8/8/4n3/4P3/4K3 w - - 0 1",
            // Black to move: pawns go down the board.
            "4k3/4p3/8/8/8/8/8/4K3 b - - 0 1",
        ] {
            let pos: Chess = fen
                .parse::<Fen>()
                .unwrap()
                .into_position(CastlingMode::Standard)
                .unwrap();
            every_legal_move(&pos);
        }
    }

    fn role() -> impl Strategy<Value = Role> {
        (0usize..6).prop_map(|i| Role::ALL[i])
    }

    proptest! {
        /// Any SAN at all, legal or not, in positions of random games.
        #[test]
        fn arbitrary_sans_resolve_as_shakmaty(
            seed in 0u64..1000,
            ply in 0usize..120,
            role in role(),
            file in proptest::option::of(0u32..8),
            rank in proptest::option::of(0u32..8),
            capture: bool,
            to in 0u32..64,
            promotion in proptest::option::of(role()),
        ) {
            let positions = game(seed, ply);
            let pos = positions.last().unwrap();
            let san = San::Normal {
                role,
                file: file.map(File::new),
                rank: rank.map(Rank::new),
                capture,
                to: Square::new(to),
                promotion,
            };
            prop_assert_eq!(to_move(san, pos), san.to_move(pos));
        }
    }
}
