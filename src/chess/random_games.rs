//! Positions of pseudo-random games, for the tests that compare this
//! module's chess code with shakmaty's on many boards.

use shakmaty::{Chess, Position as _};

/// The positions of a pseudo-random game from the start (the start
/// included), picked by `seed`, at most `plies` moves long. A third of the
/// moves are picked among the captures, promotions and en passant captures
/// when there are any, so that games reach endgames, promotions and en
/// passant more often than uniform play does.
pub(crate) fn game(seed: u64, plies: usize) -> Vec<Chess> {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut pos = Chess::default();
    let mut out = vec![pos.clone()];
    for _ in 0..plies {
        let moves = pos.legal_moves();
        if moves.is_empty() {
            break;
        }
        let sharp: Vec<_> = moves
            .iter()
            .filter(|m| m.is_capture() || m.is_promotion() || m.is_en_passant())
            .collect();
        let m = if !sharp.is_empty() && next() % 3 == 0 {
            *sharp[(next() % sharp.len() as u64) as usize]
        } else {
            moves[(next() % moves.len() as u64) as usize]
        };
        pos.play_unchecked(m);
        out.push(pos.clone());
    }
    out
}
