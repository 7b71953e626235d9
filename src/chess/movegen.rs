//! A keyed board's legal moves as ChessBench actions, in action order,
//! generated straight from the key's bit-planes.
//!
//! Ingest lists the legal moves of every distinct board it finds (the
//! action-value records of Table A1: 15.3B for the paper's 10^7 games).
//! Generating them straight from the key's planes skips rebuilding a
//! shakmaty position and looking up and sorting each move's action, which
//! took more than twice as long a board
//! (bench/results/amd2-2026-11-29/README.md, "Figures once kept in the
//! source"). The moves come out already sorted: the vocabulary lists actions by origin
//! square (a1..h8), and within one origin the destinations a queen reaches
//! in ascending order, then those a knight reaches in ascending order
//! ([`super::actions`]). A piece other than a knight moves only to queen
//! destinations of its square (castling is the king's two-square move), a
//! knight only to knight destinations, so walking our pieces by ascending
//! square and each piece's destinations by ascending square yields ascending
//! actions. Promotions, which come after every other action, are sorted
//! among themselves.
//!
//! Legality is decided as shakmaty decides it: a piece pinned to its king
//! keeps to the pin's line, a single check must be captured or blocked,
//! only the king moves out of a double check, the king never steps onto an
//! attacked square, castling never starts in, passes through or lands in
//! check, and an en passant capture is played out on the occupancy and kept
//! when the king is then not attacked. The tests compare every board with
//! shakmaty's legal moves: the positions of random games, random legal
//! placements, and perft trees of the standard test positions.

use std::sync::LazyLock;

use shakmaty::{Bitboard, Chess, Color, Role, Square, attacks};

use super::{
    actions::vocabulary,
    board_key::{BoardKey, BoardKeyError},
};

/// Action of each non-promotion move, by origin and destination (`u16::MAX`
/// where none); 8 KiB, so it stays in the L1 cache.
static NORMAL: LazyLock<[[u16; 64]; 64]> = LazyLock::new(|| {
    let vocab = vocabulary();
    let mut out = [[u16::MAX; 64]; 64];
    for (from, row) in out.iter_mut().enumerate() {
        for (to, slot) in row.iter_mut().enumerate() {
            if let Some(a) = vocab.index_of(Square::new(from as u32), Square::new(to as u32), None)
            {
                *slot = a;
            }
        }
    }
    out
});

/// Promotion pieces, in the order the vocabulary lists them.
const PROMOTIONS: [Role; 4] = [Role::Queen, Role::Rook, Role::Bishop, Role::Knight];

/// A board's pieces by role, taken from the key's planes.
struct Pieces {
    occupied: Bitboard,
    pawns: Bitboard,
    knights: Bitboard,
    kings: Bitboard,
    rooks_and_queens: Bitboard,
    bishops_and_queens: Bitboard,
}

impl Pieces {
    /// Pieces of `them` that attack `sq` with `occupied` as the occupancy;
    /// `us` is the side whose pawns' captures mirror theirs.
    #[inline]
    fn attackers(&self, sq: Square, us: Color, them: Bitboard, occupied: Bitboard) -> Bitboard {
        them & ((attacks::rook_attacks(sq, occupied) & self.rooks_and_queens)
            | (attacks::bishop_attacks(sq, occupied) & self.bishops_and_queens)
            | (attacks::knight_attacks(sq) & self.knights)
            | (attacks::king_attacks(sq) & self.kings)
            | (attacks::pawn_attacks(us, sq) & self.pawns))
    }
}

/// Appends the legal moves of `key`'s board to `out` as ascending action
/// indices, and says whether the side to move is in check (no moves and in
/// check: checkmate; no moves otherwise: stalemate).
///
/// Fails, appending nothing, on a key that holds no consistent board (a
/// square with two pieces' codes, a side without exactly one king, a pawn
/// on a back rank): ingest's keys come from positions shakmaty accepted,
/// so only a damaged spill file gives one.
pub(crate) fn legal_actions(key: &BoardKey, out: &mut Vec<u16>) -> Result<bool, BoardKeyError> {
    let [white, b0, b1, b2, meta] = key.0;
    let white = Bitboard(white);
    let occupied = Bitboard(b0 | b1 | b2);
    let roles = key.by_role();
    if b0 & b1 & b2 != 0 || (white & !occupied).any() {
        return Err(BoardKeyError::InconsistentBoard);
    }
    if (roles.king & white).count() != 1
        || (roles.king & !white).count() != 1
        || (roles.pawn & Bitboard::BACKRANKS).any()
    {
        return Err(BoardKeyError::IllegalPosition);
    }
    let turn = key.turn();
    let us = turn.fold_wb(white, occupied & !white);
    let them = occupied & !us;
    let p = Pieces {
        occupied,
        pawns: roles.pawn,
        knights: roles.knight,
        kings: roles.king,
        rooks_and_queens: roles.rook | roles.queen,
        bishops_and_queens: roles.bishop | roles.queen,
    };
    let king = Square::new((roles.king & us).0.trailing_zeros());
    let checkers = p.attackers(king, turn, them, p.occupied);
    // Our pieces that alone stand between the king and an enemy slider.
    let pinned = slider_blockers(
        king,
        p.occupied,
        p.rooks_and_queens & them,
        p.bishops_and_queens & them,
    ) & us;

    // Where a piece other than the king may go: anywhere not ours, onto or
    // in front of a single checker, nowhere in a double check.
    let target = match checkers.single_square() {
        _ if checkers.is_empty() => !us,
        Some(checker) => attacks::between(king, checker).with(checker),
        None => Bitboard(0),
    };
    let ep = key.ep_square();
    let (forward, start_rank, last_rank) = match turn {
        Color::White => (
            8,
            Bitboard::from_rank(shakmaty::Rank::Second),
            Bitboard::from_rank(shakmaty::Rank::Seventh),
        ),
        Color::Black => (
            -8,
            Bitboard::from_rank(shakmaty::Rank::Seventh),
            Bitboard::from_rank(shakmaty::Rank::Second),
        ),
    };

    // Each piece's destinations, worked out role by role (no branch on
    // the role per square), then read back in square order.
    let mut dests = [Bitboard(0); 64];
    let ours = |role: Bitboard| us & role;
    for from in ours(p.knights) {
        dests[usize::from(from)] = attacks::knight_attacks(from) & target;
    }
    for from in ours(p.bishops_and_queens) {
        dests[usize::from(from)] = attacks::bishop_attacks(from, p.occupied) & target;
    }
    for from in ours(p.rooks_and_queens) {
        dests[usize::from(from)] |= attacks::rook_attacks(from, p.occupied) & target;
    }
    for from in ours(p.pawns) {
        let mut d = attacks::pawn_attacks(turn, from) & them;
        let one = from.offset(forward).map(Bitboard::from_square);
        if let Some(one) = one.filter(|one| (*one & p.occupied).is_empty()) {
            d |= one;
            let two = one.shift(forward);
            if start_rank.contains(from) && (two & p.occupied).is_empty() {
                d |= two;
            }
        }
        dests[usize::from(from)] = d & target;
    }
    for from in pinned {
        dests[usize::from(from)] &= attacks::ray(king, from);
    }
    if let Some(ep) = ep {
        // Added after the pin and check masks: the capture is played out.
        for from in ours(p.pawns) & attacks::pawn_attacks(!turn, ep) {
            if en_passant_is_safe(&p, king, turn, them, from, ep) {
                dests[usize::from(from)].add(ep);
            }
        }
    }
    dests[usize::from(king)] =
        king_destinations(&p, king, turn, us, them, checkers.is_empty(), meta);

    // At most 218 legal moves; gathered on the stack, appended at once.
    let mut buf = [0u16; 256];
    let mut n = 0;
    let normal = &*NORMAL;
    let promoting = ours(p.pawns) & last_rank;
    for from in us & !promoting {
        let row = &normal[usize::from(from)];
        for to in dests[usize::from(from)] {
            buf[n] = row[usize::from(to)];
            n += 1;
        }
    }
    // Every promotion action comes after every other action.
    let promotions = n;
    for from in promoting {
        for to in dests[usize::from(from)] {
            for role in PROMOTIONS {
                buf[n] = vocab_promotion(from, to, role);
                n += 1;
            }
        }
    }
    buf[promotions..n].sort_unstable();
    out.extend_from_slice(&buf[..n]);
    Ok(checkers.any())
}

/// Appends the legal moves of `pos` to `out` as ascending ChessBench
/// action indices (what `legal_moves` holds for the board), and says
/// whether the side to move is in check. The same moves as shakmaty's
/// `legal_moves` mapped to actions and sorted, in about half the time.
pub fn legal_actions_of(pos: &Chess, out: &mut Vec<u16>) -> bool {
    // A position shakmaty accepted is a consistent board with both kings.
    legal_actions(&BoardKey::placement(pos), out).unwrap_or_default()
}

/// The promotion's action (every promotion of a pawn on its seventh rank to
/// the rank ahead is in the vocabulary).
#[cold]
fn vocab_promotion(from: Square, to: Square, role: Role) -> u16 {
    vocabulary()
        .index_of(from, to, Some(role))
        .unwrap_or(u16::MAX)
}

/// Pieces of either side that alone stand between `king` and an enemy
/// rook or queen (`rooks_and_queens`) or bishop or queen
/// (`bishops_and_queens`) on a line through it, as shakmaty counts them:
/// ours among them are pinned.
#[inline]
pub(crate) fn slider_blockers(
    king: Square,
    occupied: Bitboard,
    rooks_and_queens: Bitboard,
    bishops_and_queens: Bitboard,
) -> Bitboard {
    let snipers = (attacks::rook_attacks(king, Bitboard(0)) & rooks_and_queens)
        | (attacks::bishop_attacks(king, Bitboard(0)) & bishops_and_queens);
    let mut blockers = Bitboard(0);
    for sniper in snipers {
        let between = attacks::between(king, sniper) & occupied;
        if !between.more_than_one() {
            blockers |= between;
        }
    }
    blockers
}

/// Whether capturing en passant from `from` leaves our king unattacked:
/// played out on the occupancy, the captured pawn removed.
fn en_passant_is_safe(
    p: &Pieces,
    king: Square,
    turn: Color,
    them: Bitboard,
    from: Square,
    to: Square,
) -> bool {
    let captured = Square::from_coords(to.file(), from.rank());
    let occupied = p.occupied.without(from).without(captured).with(to);
    p.attackers(king, turn, them.without(captured), occupied)
        .is_empty()
}

/// The king's legal destinations: squares not ours and not attacked once
/// it has left its square, and the castling moves' destinations.
fn king_destinations(
    p: &Pieces,
    king: Square,
    turn: Color,
    us: Bitboard,
    them: Bitboard,
    not_in_check: bool,
    meta: u64,
) -> Bitboard {
    let without_king = p.occupied.without(king);
    let safe = |sq: Square| p.attackers(sq, turn, them, without_king).is_empty();
    let mut dest = Bitboard(0);
    for to in attacks::king_attacks(king) & !us {
        if safe(to) {
            dest.add(to);
        }
    }
    // Castling rights (meta bits 1-4: K, Q, k, q) exist only with the king
    // and that rook on their original squares in standard chess.
    let rights = ((meta >> 1) >> turn.fold_wb(0, 2)) & 0b11;
    if not_in_check && rights != 0 {
        let back = turn.fold_wb(0, 56);
        let sq = |file: u32| Square::new(back + file);
        // King side: f and g empty and safe. Queen side: b, c and d empty,
        // c and d safe.
        if rights & 1 != 0
            && (p.occupied & Bitboard::from_square(sq(5)).with(sq(6))).is_empty()
            && safe(sq(5))
            && safe(sq(6))
        {
            dest.add(sq(6));
        }
        if rights & 2 != 0
            && (p.occupied & Bitboard::from_square(sq(1)).with(sq(2)).with(sq(3))).is_empty()
            && safe(sq(3))
            && safe(sq(2))
        {
            dest.add(sq(2));
        }
    }
    dest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chess::random_games::game;
    use proptest::prelude::*;
    use shakmaty::{CastlingMode, EnPassantMode, Position, fen::Fen};

    /// Shakmaty's legal moves of `pos` as sorted actions, and its check.
    fn reference(pos: &Chess) -> (Vec<u16>, bool) {
        let vocab = vocabulary();
        let mut actions: Vec<u16> = pos
            .legal_moves()
            .iter()
            .map(|m| vocab.index_of_move(m).unwrap())
            .collect();
        actions.sort_unstable();
        (actions, pos.is_check())
    }

    /// Ours, from the board's key (as ingest calls it) and from the
    /// position, which must agree.
    fn ours(pos: &Chess) -> (Vec<u16>, bool) {
        let key = BoardKey::from_position(pos).unwrap();
        let mut out = vec![7]; // appended to, never touched
        let check = legal_actions(&key, &mut out).unwrap();
        assert_eq!(out[0], 7);
        out.remove(0);
        let mut of_pos = Vec::new();
        assert_eq!(legal_actions_of(pos, &mut of_pos), check);
        assert_eq!(of_pos, out);
        (out, check)
    }

    fn same(pos: &Chess) {
        assert_eq!(
            ours(pos),
            reference(pos),
            "{}",
            Fen::from_position(pos, EnPassantMode::Legal)
        );
    }

    fn parse(fen: &str) -> Chess {
        fen.parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap_or_else(|e| panic!("{fen}: {e}"))
    }

    #[test]
    fn every_board_of_random_games_has_shakmatys_moves() {
        for seed in 0..2000 {
            for pos in game(seed, 300) {
                same(&pos);
            }
        }
    }

    #[test]
    fn hand_picked_boards_have_shakmatys_moves() {
        for fen in [
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
            // Castling: through an attacked square, into one, b1 attacked
            // only (allowed), blocked.
            "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1",
            "r3k2r/8/8/8/8/5q2/8/R3K2R w KQkq - 0 1",
            "r3k2r/8/8/8/8/6q1/8/R3K2R w KQkq - 0 1",
            "r3k2r/8/8/8/8/1q6/8/R3K2R w KQkq - 0 1",
            "r3k2r/8/8/8/8/8/8/RN2K1NR w KQkq - 0 1",
            "r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1",
            // In check: no castling; evasions, blocks, captures.
            "r3k2r/8/8/8/8/8/4q3/R3K2R w KQkq - 0 1",
            "4k3/8/8/8/1b6/8/3N4/4K3 w - - 0 1",
            // Double check: the king alone moves.
            "4k3/8/8/8/1b6/8/4r3/4K3 w - - 0 1",
            // En passant: legal, exposing the king along the rank, by a
            // pawn pinned off its diagonal and along it, capturing a
            // checking pawn, both pawns able.
            "4k3/8/8/3pP3/8/8/8/4K3 w - d6 0 1",
            "8/8/8/K2pP2r/8/8/8/7k w - d6 0 1",
            "4k3/6b1/8/3pP3/8/8/1K6/8 w - d6 0 1",
            "4k3/2b5/8/3pP3/8/8/7K/8 w - d6 0 1",
            // Two pawns can capture en passant, one of them pinned: the key
            // records the file (a legal capture exists), one capture is not.
            "4k3/6b1/8/2PpP3/8/8/1K6/8 w - d6 0 1",
            "8/1k6/8/8/2pPp3/7K/6B1/8 b - d3 0 1",
            "8/8/8/2k5/3Pp3/8/8/4K3 b - d3 0 1",
            "4k3/8/8/2PpP3/8/8/8/4K3 w - d6 0 1",
            "8/8/3k4/2pP4/8/8/8/4K2B w - c6 0 1",
            // Promotions: pushes and captures, pinned, into check.
            "1n2k3/P7/8/8/8/8/8/4K3 w - - 0 1",
            "r3k3/1P6/8/8/8/8/8/4K3 w - - 0 1",
            "4k3/8/8/8/8/8/p7/1N2K3 b - - 0 1",
            "3k4/8/8/8/8/8/1p6/R1N1K3 b - - 0 1",
            // Pins along files, ranks and diagonals.
            "4r1k1/8/8/8/8/2N1N3/8/4K3 w - - 0 1",
            "4k3/8/8/8/b7/8/2P5/4K3 w - - 0 1",
            "4k3/8/8/8/8/8/8/r2QK3 w - - 0 1",
            // Mates and stalemates.
            "rnb1kbnr/pppp1ppp/8/4p3/6Pq/5P2/PPPPP2P/RNBQKBNR w KQkq - 1 3",
            "7k/5Q2/6K1/8/8/8/8/8 b - - 0 1",
            // Perft test positions (chessprogramming.org).
            "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
            "8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1",
            "r3k2r/Pppp1ppp/1b3nbN/nP6/BBP1P3/q4N2/Pp1P2PP/R2Q1RK1 w kq - 0 1",
            "rnbq1k1r/pp1Pbppp/2p5/8/2B5/8/PPP1NnPP/RNBQK2R w KQ - 1 8",
            "r4rk1/1pp1qppp/p1np1n2/2b1p1B1/2B1P1b1/P1NP1N2/1PP1QPPP/R4RK1 w - - 0 10",
        ] {
            same(&parse(fen));
        }
    }

    /// Perft of `pos` to `depth`, walking with shakmaty and checking our
    /// moves against shakmaty's at every node.
    fn perft(pos: &Chess, depth: u32) -> u64 {
        same(pos);
        if depth == 0 {
            return 1;
        }
        pos.legal_moves()
            .iter()
            .map(|m| {
                let mut next = pos.clone();
                next.play_unchecked(*m);
                perft(&next, depth - 1)
            })
            .sum()
    }

    #[test]
    fn perft_trees_of_the_standard_test_positions() {
        // Node counts from chessprogramming.org's perft results.
        for (fen, depth, nodes) in [
            (
                "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
                3,
                97_862,
            ),
            ("8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1", 4, 43_238),
            (
                "r3k2r/Pppp1ppp/1b3nbN/nP6/BBP1P3/q4N2/Pp1P2PP/R2Q1RK1 w kq - 0 1",
                3,
                9_467,
            ),
            (
                "rnbq1k1r/pp1Pbppp/2p5/8/2B5/8/PPP1NnPP/RNBQK2R w KQ - 1 8",
                3,
                62_379,
            ),
        ] {
            assert_eq!(perft(&parse(fen), depth), nodes, "{fen}");
        }
    }

    #[test]
    fn a_broken_key_is_an_error_and_appends_nothing() {
        let key = BoardKey::from_position(&Chess::default()).unwrap();
        let mut out = Vec::new();
        // g1's knight (code 2: the b1 plane) also gets b0 and b2: code 7.
        let mut two_codes = key;
        two_codes.0[1] |= 1 << 6;
        two_codes.0[3] |= 1 << 6;
        assert_eq!(
            legal_actions(&two_codes, &mut out),
            Err(BoardKeyError::InconsistentBoard)
        );
        let mut no_king = key;
        no_king.0[2] &= !(1 << 4);
        no_king.0[3] &= !(1 << 4);
        no_king.0[0] &= !(1 << 4);
        assert_eq!(
            legal_actions(&no_king, &mut out),
            Err(BoardKeyError::IllegalPosition)
        );
        assert!(out.is_empty());
    }

    /// A random placement: two kings and up to 20 other pieces anywhere,
    /// either side to move, any castling rights and en passant file; kept
    /// when shakmaty accepts it as a standard chess position.
    fn random_position(seed: u64) -> Option<Chess> {
        let mut rng = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut board = shakmaty::Board::empty();
        let mut free: Vec<Square> = Square::ALL.to_vec();
        let mut take = |next: &mut dyn FnMut(u64) -> u64| {
            let i = next(free.len() as u64) as usize;
            free.swap_remove(i)
        };
        board.set_piece_at(take(&mut next), Role::King.of(Color::White));
        board.set_piece_at(take(&mut next), Role::King.of(Color::Black));
        for _ in 0..next(21) {
            let role = [
                Role::Pawn,
                Role::Knight,
                Role::Bishop,
                Role::Rook,
                Role::Queen,
            ][next(5) as usize];
            let color = if next(2) == 0 {
                Color::White
            } else {
                Color::Black
            };
            board.set_piece_at(take(&mut next), role.of(color));
        }
        let turn = if next(2) == 0 {
            Color::White
        } else {
            Color::Black
        };
        let mut castling_rights = Bitboard(0);
        for sq in [Square::A1, Square::H1, Square::A8, Square::H8] {
            if next(2) == 0 {
                castling_rights.add(sq);
            }
        }
        let ep_square = (next(3) == 0).then(|| {
            Square::from_coords(
                shakmaty::File::new(next(8) as u32),
                turn.fold_wb(shakmaty::Rank::Sixth, shakmaty::Rank::Third),
            )
        });
        let setup = shakmaty::Setup {
            board,
            turn,
            castling_rights,
            ep_square,
            ..shakmaty::Setup::empty()
        };
        // Rights and en passant squares shakmaty would drop are dropped.
        match setup.position::<Chess>(CastlingMode::Standard) {
            Ok(pos) => Some(pos),
            Err(e) => e
                .ignore_invalid_castling_rights()
                .or_else(|e| e.ignore_invalid_ep_square().map_err(drop))
                .ok(),
        }
    }

    #[test]
    fn random_placements_have_shakmatys_moves() {
        let mut tested = 0;
        for seed in 0..200_000 {
            if let Some(pos) = random_position(seed) {
                same(&pos);
                tested += 1;
            }
        }
        assert!(tested > 50_000, "only {tested} placements were legal");
    }

    proptest! {
        #[test]
        fn boards_of_any_random_game_have_shakmatys_moves(seed: u64, plies in 0usize..400) {
            let positions = game(seed, plies);
            let pos = positions.last().unwrap();
            prop_assert_eq!(ours(pos), reference(pos));
        }
    }
}
