//! A fixed-size, cheap-to-compute identity for a board.
//!
//! ChessBench identifies a board by its full FEN (halfmove clock and fullmove
//! number included, en passant square only when a legal en passant capture
//! exists, as python-chess and shakmaty's `EnPassantMode::Legal` print it).
//! Rendering a FEN costs several times as much as this key; ingest needs the
//! identity of every ply, so it uses the key and renders the FEN once per
//! *distinct* board.
//! Equal keys <=> equal FENs (tested against the golden boards).
//!
//! Layout (five little-endian u64 words, 40 bytes):
//! - `w[0]`: white pieces;
//! - `w[1..4]`: the three bits of the piece's role code, one bit-plane each
//!   (pawn 1, knight 2, bishop 3, rook 4, queen 5, king 6; empty squares 0);
//! - `w[4]`: bit 0 side to move (1 = black), bits 1–4 castling rights
//!   (K, Q, k, q), bits 5–8 en passant file + 1 (0 = none), bits 9–31 halfmove
//!   clock, bits 32–63 fullmove number.
//!
//! This layout (or its packed form, [`BoardKey::pack`]) is part of ingest's
//! spill format only; it never reaches a table.

use std::num::NonZeroU32;

use shakmaty::{
    Bitboard, Board, ByColor, ByRole, CastlingMode, CastlingSide, Chess, Color, EnPassantMode,
    File, Position, Rank, Setup, Square,
};
use thiserror::Error;

/// Size of a key in bytes.
pub(crate) const KEY_BYTES: usize = 40;

const MAX_HALFMOVES: u32 = (1 << 23) - 1;

/// The identity of a board; see the module docs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct BoardKey(pub [u64; 5]);

/// Writes `v` in decimal at the start of `out`; returns the length.
fn write_decimal(mut v: u32, out: &mut [u8]) -> usize {
    let mut digits = [0u8; 10];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (v % 10) as u8;
        len += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..len {
        out[i] = digits[len - 1 - i];
    }
    len
}

/// A position that cannot be keyed or a key that is not a legal position.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BoardKeyError {
    #[error("halfmove clock {0} exceeds the supported maximum of {MAX_HALFMOVES}")]
    HalfmoveOverflow(u32),
    #[error("key does not describe a consistent board")]
    InconsistentBoard,
    #[error("key does not describe a legal standard chess position")]
    IllegalPosition,
}

/// FEN character of a piece code: the role code of the key's bit-planes
/// (bits 0-2: pawn 1 .. king 6) and white (bit 3); codes that no piece has
/// are never looked up.
const PIECE_CHARS: [u8; 16] = *b".pnbrqk..PNBRQK.";

/// Bit i of the index moved to bit 0 of byte i.
const SPREAD: [u64; 256] = {
    let mut out = [0u64; 256];
    let mut x = 0;
    while x < 256 {
        let mut bit = 0;
        while bit < 8 {
            if x & (1 << bit) != 0 {
                out[x] |= 1 << (bit * 8);
            }
            bit += 1;
        }
        x += 1;
    }
    out
};

/// A rank's FEN for each occupancy byte (bit i: file i occupied): indices
/// into a 16-byte table holding the 8 files' piece characters and then the
/// digits 1-8 (`8 + d - 1` for a run of d empty squares), and its length.
const RANK_TEMPLATES: [([u8; 8], u8); 256] = {
    let mut out = [([0u8; 8], 0u8); 256];
    let mut occ = 0;
    while occ < 256 {
        let (mut len, mut empty, mut file) = (0, 0, 0);
        while file < 8 {
            if occ & (1 << file) != 0 {
                if empty > 0 {
                    out[occ].0[len] = 8 + empty - 1;
                    len += 1;
                    empty = 0;
                }
                out[occ].0[len] = file as u8;
                len += 1;
            } else {
                empty += 1;
            }
            file += 1;
        }
        if empty > 0 {
            out[occ].0[len] = 8 + empty - 1;
            len += 1;
        }
        out[occ].1 = len as u8;
        occ += 1;
    }
    out
};

/// Size of a key packed for spill files ([`BoardKey::pack`]).
pub(crate) const PACKED_KEY_BYTES: usize = 32;

/// Whether this CPU runs BMI2's `pext`/`pdep` in a few cycles: Intel
/// since Haswell and AMD since Zen 3. AMD's earlier cores with BMI2
/// (Excavator, family 0x15; Zen 1 and 2, 0x17; Hygon's, 0x18) run them in
/// microcode, whose time grows with the mask's set bits (up to hundreds of
/// cycles each).
pub(crate) fn fast_bit_extract() -> bool {
    static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAST.get_or_init(detect_fast_bit_extract)
}

#[cfg(target_arch = "x86_64")]
fn detect_fast_bit_extract() -> bool {
    use std::arch::x86_64::__cpuid;
    if !std::arch::is_x86_feature_detected!("bmi2") {
        return false;
    }
    let leaf0 = __cpuid(0);
    let mut vendor = [0u8; 12];
    vendor[..4].copy_from_slice(&leaf0.ebx.to_le_bytes());
    vendor[4..8].copy_from_slice(&leaf0.edx.to_le_bytes());
    vendor[8..].copy_from_slice(&leaf0.ecx.to_le_bytes());
    fast_pext_for(&vendor, __cpuid(1).eax)
}

/// [`fast_bit_extract`]'s rule for a CPU with BMI2, from its CPUID vendor
/// string and leaf 1's EAX (family in bits 8-11, extended family in bits
/// 20-27 when the family is 0xf).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn fast_pext_for(vendor: &[u8; 12], eax: u32) -> bool {
    let base = (eax >> 8) & 0xf;
    let family = if base == 0xf {
        base + ((eax >> 20) & 0xff)
    } else {
        base
    };
    let amd = vendor == b"AuthenticAMD" || vendor == b"HygonGenuine";
    !(amd && family < 0x19)
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_fast_bit_extract() -> bool {
    false
}

/// Each plane's bits at the squares of `mask`, gathered to the low bits
/// in square order (`pext`), plane `i` in bits `32 i..32 i + 32` (one
/// `u128`, returned in registers: four 32-bit stores read back as one
/// 16-byte load stalled the spill writer); `mask` has at most 32 bits.
#[inline]
fn extract4(planes: [u64; 4], mask: u64) -> u128 {
    #[cfg(target_arch = "x86_64")]
    if fast_bit_extract() {
        // SAFETY: fast_bit_extract() is true only where the CPU has BMI2.
        return unsafe { extract4_bmi2(planes, mask) };
    }
    extract4_portable(planes, mask)
}

/// Inverse of [`extract4`] (`pdep`).
#[inline]
fn deposit4(packed: u128, mask: u64) -> [u64; 4] {
    #[cfg(target_arch = "x86_64")]
    if fast_bit_extract() {
        // SAFETY: fast_bit_extract() is true only where the CPU has BMI2.
        return unsafe { deposit4_bmi2(packed, mask) };
    }
    deposit4_portable(packed, mask)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
fn extract4_bmi2(planes: [u64; 4], mask: u64) -> u128 {
    use std::arch::x86_64::_pext_u64;
    let [a, b, c, d] = planes.map(|p| _pext_u64(p, mask));
    u128::from(a | (b << 32)) | (u128::from(c | (d << 32)) << 64)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
fn deposit4_bmi2(packed: u128, mask: u64) -> [u64; 4] {
    use std::arch::x86_64::_pdep_u64;
    [0, 32, 64, 96].map(|at| _pdep_u64(((packed >> at) as u64) & 0xffff_ffff, mask))
}

fn extract4_portable(planes: [u64; 4], mask: u64) -> u128 {
    let mut out = 0u128;
    let (mut m, mut i) = (mask, 0);
    while m != 0 && i < 32 {
        let sq = m.trailing_zeros();
        for (k, p) in planes.iter().enumerate() {
            out |= u128::from((p >> sq) & 1) << (32 * k + i);
        }
        m &= m - 1;
        i += 1;
    }
    out
}

fn deposit4_portable(packed: u128, mask: u64) -> [u64; 4] {
    let mut out = [0u64; 4];
    let (mut m, mut i) = (mask, 0);
    while m != 0 && i < 32 {
        let sq = m.trailing_zeros();
        for (k, o) in out.iter_mut().enumerate() {
            *o |= (((packed >> (32 * k + i)) & 1) as u64) << sq;
        }
        m &= m - 1;
        i += 1;
    }
    out
}

/// The key's piece words of a board: white pieces, then the three bit-planes
/// of the role code (see the module docs).
#[inline]
fn planes(board: &Board) -> [u64; 4] {
    let b0 = board.pawns() | board.bishops() | board.queens();
    let b1 = board.knights() | board.bishops() | board.kings();
    let b2 = board.rooks() | board.queens() | board.kings();
    [board.white().0, b0.0, b1.0, b2.0]
}

impl BoardKey {
    /// Keys a standard chess position.
    #[inline]
    pub(crate) fn from_position(pos: &Chess) -> Result<BoardKey, BoardKeyError> {
        let halfmoves = pos.halfmoves();
        if halfmoves > MAX_HALFMOVES {
            return Err(BoardKeyError::HalfmoveOverflow(halfmoves));
        }
        let mut key = BoardKey::placement(pos);
        key.0[4] |= u64::from(halfmoves) << 9;
        key.0[4] |= u64::from(pos.fullmoves().get()) << 32;
        Ok(key)
    }

    /// The key of a position's placement, side to move, castling rights
    /// and legal en passant file, with both clocks zero: all that decides
    /// its legal moves.
    #[inline]
    pub(crate) fn placement(pos: &Chess) -> BoardKey {
        let [white, b0, b1, b2] = planes(pos.board());
        let castles = pos.castles();
        let mut meta = u64::from(pos.turn() == Color::Black);
        meta |= u64::from(castles.has(Color::White, CastlingSide::KingSide)) << 1;
        meta |= u64::from(castles.has(Color::White, CastlingSide::QueenSide)) << 2;
        meta |= u64::from(castles.has(Color::Black, CastlingSide::KingSide)) << 3;
        meta |= u64::from(castles.has(Color::Black, CastlingSide::QueenSide)) << 4;
        if let Some(ep) = pos.ep_square(EnPassantMode::Legal) {
            meta |= (u64::from(u32::from(ep.file())) + 1) << 5;
        }
        BoardKey([white, b0, b1, b2, meta])
    }

    /// Side to move.
    pub(crate) fn turn(&self) -> Color {
        if self.0[4] & 1 == 1 {
            Color::Black
        } else {
            Color::White
        }
    }

    /// Halfmove clock.
    pub(crate) fn halfmoves(&self) -> u32 {
        ((self.0[4] >> 9) & u64::from(MAX_HALFMOVES)) as u32
    }

    /// Fullmove number.
    pub(crate) fn fullmoves(&self) -> u32 {
        (self.0[4] >> 32) as u32
    }

    /// The en passant square, recorded only when a legal capture exists.
    pub(crate) fn ep_square(&self) -> Option<Square> {
        let file = ((self.0[4] >> 5) & 0xf) as u32;
        if file == 0 {
            return None;
        }
        let rank = if self.turn() == Color::White {
            Rank::Sixth
        } else {
            Rank::Third
        };
        Some(Square::from_coords(File::new(file - 1), rank))
    }

    /// Appends the FEN (EnPassantMode::Legal, as python-chess prints it).
    /// Ingest writes one per distinct board (10^7 games: 521M), so it is
    /// written rank by rank from templates rather than by a loop over the
    /// occupied squares, which took about twice as long
    /// (bench/results/amd2-2026-11-29/README.md, "Figures once kept in the
    /// source").
    pub(crate) fn write_fen(&self, out: &mut String) {
        // At most 64 + 7 + 2 + 5 + 3 + 9 + 11 bytes (a rank's template
        // writes 8, of which it keeps its length); assembled on the stack.
        let mut buf = [0u8; 112];
        let mut n = 0;
        let [white, b0, b1, b2, meta] = self.0;
        let occupied = b0 | b1 | b2;
        for rank in (0..8u32).rev() {
            // Branch-free: the rank's 8 piece characters (by file) followed
            // by the digits 1-8, picked out by the occupancy's template.
            let byte = |bits: u64| SPREAD[((bits >> (rank * 8)) & 0xff) as usize];
            let codes = byte(b0) | byte(b1) << 1 | byte(b2) << 2 | byte(white) << 3;
            let mut lut = *b"........12345678";
            for (file, slot) in lut[..8].iter_mut().enumerate() {
                *slot = PIECE_CHARS[((codes >> (file * 8)) & 0xf) as usize];
            }
            let (template, len) = &RANK_TEMPLATES[((occupied >> (rank * 8)) & 0xff) as usize];
            for (i, &t) in template.iter().enumerate() {
                buf[n + i] = lut[usize::from(t)];
            }
            n += usize::from(*len);
            buf[n] = if rank > 0 { b'/' } else { b' ' };
            n += 1;
        }
        buf[n] = if meta & 1 == 1 { b'b' } else { b'w' };
        buf[n + 1] = b' ';
        n += 2;
        let castling = (meta >> 1) & 0xf;
        if castling == 0 {
            buf[n] = b'-';
            n += 1;
        } else {
            for (bit, ch) in [(1, b'K'), (2, b'Q'), (4, b'k'), (8, b'q')] {
                if castling & bit != 0 {
                    buf[n] = ch;
                    n += 1;
                }
            }
        }
        buf[n] = b' ';
        n += 1;
        match self.ep_square() {
            Some(sq) => {
                buf[n] = b'a' + u32::from(sq.file()) as u8;
                buf[n + 1] = b'1' + u32::from(sq.rank()) as u8;
                n += 2;
            }
            None => {
                buf[n] = b'-';
                n += 1;
            }
        }
        for number in [self.halfmoves(), self.fullmoves()] {
            buf[n] = b' ';
            n += 1;
            n += write_decimal(number, &mut buf[n..]);
        }
        // Only ASCII was written.
        out.push_str(std::str::from_utf8(&buf[..n]).unwrap_or_default());
    }

    /// The FEN as a new string.
    #[cfg(test)]
    pub(crate) fn fen(&self) -> String {
        let mut s = String::with_capacity(90);
        self.write_fen(&mut s);
        s
    }

    /// The squares of each role, either colour (decoded from the three
    /// role-code planes; a square holding code 7 is in none).
    #[inline]
    pub(crate) fn by_role(&self) -> ByRole<Bitboard> {
        let [_, b0, b1, b2, _] = self.0;
        ByRole {
            pawn: Bitboard(b0 & !b1 & !b2),
            knight: Bitboard(!b0 & b1 & !b2),
            bishop: Bitboard(b0 & b1 & !b2),
            rook: Bitboard(!b0 & !b1 & b2),
            queen: Bitboard(b0 & !b1 & b2),
            king: Bitboard(!b0 & b1 & b2),
        }
    }

    /// Rebuilds the position (for legal move generation).
    pub fn to_position(self) -> Result<Chess, BoardKeyError> {
        let [white, b0, b1, b2, meta] = self.0;
        let occupied = b0 | b1 | b2;
        let by_role = self.by_role();
        let by_color = ByColor {
            white: Bitboard(white),
            black: Bitboard(occupied & !white),
        };
        let board = Board::try_from_bitboards(by_role, by_color)
            .map_err(|_| BoardKeyError::InconsistentBoard)?;
        let mut castling_rights = Bitboard::EMPTY;
        for (bit, sq) in [
            (1, Square::H1),
            (2, Square::A1),
            (4, Square::H8),
            (8, Square::A8),
        ] {
            if (meta >> 1) & bit != 0 {
                castling_rights.add(sq);
            }
        }
        let fullmoves = NonZeroU32::new(self.fullmoves()).ok_or(BoardKeyError::IllegalPosition)?;
        let setup = Setup {
            board,
            promoted: Bitboard::EMPTY,
            pockets: None,
            turn: self.turn(),
            castling_rights,
            ep_square: self.ep_square(),
            remaining_checks: None,
            halfmoves: self.halfmoves(),
            fullmoves,
        };
        setup
            .position(CastlingMode::Standard)
            .map_err(|_| BoardKeyError::IllegalPosition)
    }

    /// A well-mixed 64-bit hash of the key (partitioning and hash tables).
    #[inline]
    pub(crate) fn hash64(&self) -> u64 {
        let mut h: u64 = 0x243f_6a88_85a3_08d3;
        for w in self.0 {
            h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
        // murmur3 fmix64
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    /// The key in [`PACKED_KEY_BYTES`] bytes, for spill files: the occupied
    /// squares (8 bytes), then the white plane and the three role planes
    /// each compressed to the occupied squares, 4 bytes a plane (bit `i` is
    /// the `i`-th occupied square), then the meta word (8 bytes). `None`
    /// when more than 32 squares are occupied or a white piece stands on an
    /// empty square: never for a key of a standard position (shakmaty's
    /// `Chess` holds at most 16 pieces a side). Compressing with BMI2's
    /// `pext` where [`fast_bit_extract`] says it is fast, bit by bit
    /// otherwise; both give the same bytes.
    #[inline]
    pub(crate) fn pack(&self) -> Option<[u8; PACKED_KEY_BYTES]> {
        let [white, b0, b1, b2, meta] = self.0;
        let occ = b0 | b1 | b2;
        if occ.count_ones() > 32 || white & !occ != 0 {
            return None;
        }
        let mut out = [0u8; PACKED_KEY_BYTES];
        out[..8].copy_from_slice(&occ.to_le_bytes());
        out[8..24].copy_from_slice(&extract4([white, b0, b1, b2], occ).to_le_bytes());
        out[24..].copy_from_slice(&meta.to_le_bytes());
        Some(out)
    }

    /// Inverse of [`BoardKey::pack`]. `None` for bytes `pack` never
    /// writes (more than 32 occupied squares, a plane with bits past the
    /// occupied squares' count, or an occupied square with no piece in the
    /// role planes): a corrupt spill file, which must not decode to some
    /// other board. The meta word (side, castling, en passant, clocks) is
    /// not checked.
    #[inline]
    pub(crate) fn unpack(bytes: &[u8; PACKED_KEY_BYTES]) -> Option<BoardKey> {
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let planes = u128::from_le_bytes(bytes[8..24].try_into().unwrap());
        let occ = word(0);
        let n = occ.count_ones();
        if n > 32 {
            return None;
        }
        // The low n bits of a 32-bit plane: one per occupied square.
        let used = u32::MAX.checked_shr(32 - n).unwrap_or(0);
        let [w, r0, r1, r2] = [0, 32, 64, 96].map(|at| (planes >> at) as u32);
        if w & !used != 0 || (r0 | r1 | r2) != used {
            return None;
        }
        let [white, b0, b1, b2] = deposit4(planes, occ);
        Some(BoardKey([white, b0, b1, b2, word(24)]))
    }

    /// Serialises to 40 little-endian bytes.
    pub(crate) fn to_bytes(self) -> [u8; KEY_BYTES] {
        let mut out = [0u8; KEY_BYTES];
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.0) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Inverse of [`BoardKey::to_bytes`].
    pub(crate) fn from_bytes(bytes: &[u8; KEY_BYTES]) -> BoardKey {
        let mut w = [0u64; 5];
        for (i, chunk) in bytes.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            w[i] = u64::from_le_bytes(b);
        }
        BoardKey(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shakmaty::fen::Fen;

    fn position(fen: &str) -> Chess {
        fen.parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap()
    }

    fn shakmaty_fen(pos: &Chess) -> String {
        Fen::from_position(pos, EnPassantMode::Legal).to_string()
    }

    #[test]
    fn start_position_round_trip() {
        let pos = Chess::default();
        let key = BoardKey::from_position(&pos).unwrap();
        assert_eq!(
            key.fen(),
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
        );
        assert_eq!(key.to_position().unwrap(), pos);
        assert_eq!(BoardKey::from_bytes(&key.to_bytes()), key);
    }

    #[test]
    fn en_passant_only_when_legal() {
        // After 1. e4 no black pawn can capture: no ep square in the FEN.
        let pos = position("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1");
        assert!(
            BoardKey::from_position(&pos)
                .unwrap()
                .fen()
                .contains(" b KQkq - ")
        );
        // With a black pawn on d4 the capture is legal.
        let pos = position("rnbqkbnr/ppp1pppp/8/8/3pP3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 3");
        let key = BoardKey::from_position(&pos).unwrap();
        assert!(key.fen().contains(" b KQkq e3 0 3"));
        assert_eq!(key.to_position().unwrap(), pos);
    }

    #[test]
    fn packed_keys_round_trip_and_both_extractions_agree() {
        let mut keys = 0;
        for seed in 0..300 {
            for pos in crate::chess::random_games::game(seed, 300) {
                let key = BoardKey::from_position(&pos).unwrap();
                let packed = key.pack().expect("a standard position packs");
                assert_eq!(BoardKey::unpack(&packed), Some(key), "{}", key.fen());
                let [white, b0, b1, b2, _] = key.0;
                let occ = b0 | b1 | b2;
                let planes = extract4_portable([white, b0, b1, b2], occ);
                assert_eq!(extract4([white, b0, b1, b2], occ), planes);
                assert_eq!(deposit4_portable(planes, occ), [white, b0, b1, b2]);
                assert_eq!(deposit4(planes, occ), [white, b0, b1, b2]);
                // The BMI2 path wherever the CPU has it, fast or not.
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("bmi2") {
                    // SAFETY: the CPU has BMI2 (checked just above).
                    let (got, back) = unsafe {
                        (
                            extract4_bmi2([white, b0, b1, b2], occ),
                            deposit4_bmi2(planes, occ),
                        )
                    };
                    assert_eq!(got, planes);
                    assert_eq!(back, [white, b0, b1, b2]);
                }
                keys += 1;
            }
        }
        assert!(keys > 50_000, "{keys}");
    }

    #[test]
    fn pext_counts_as_fast_except_on_amd_cores_before_zen_3() {
        // Leaf 1 EAX: family 6 (Intel), 0xf + extended family (AMD).
        let eax = |base: u32, ext: u32| (base << 8) | (ext << 20);
        assert!(fast_pext_for(b"GenuineIntel", eax(6, 0)));
        assert!(!fast_pext_for(b"AuthenticAMD", eax(0xf, 0x06))); // 0x15
        assert!(!fast_pext_for(b"AuthenticAMD", eax(0xf, 0x08))); // 0x17
        assert!(!fast_pext_for(b"HygonGenuine", eax(0xf, 0x09))); // 0x18
        assert!(fast_pext_for(b"AuthenticAMD", eax(0xf, 0x0a))); // 0x19
        assert!(fast_pext_for(b"AuthenticAMD", eax(0xf, 0x0b))); // 0x1a
    }

    #[test]
    fn keys_that_do_not_fit_the_packed_form_are_refused() {
        let start = BoardKey::from_position(&Chess::default()).unwrap();
        // 33 occupied squares: the start position plus a white pawn on e4.
        let mut crowded = start;
        crowded.0[0] |= 1 << 28;
        crowded.0[1] |= 1 << 28;
        assert_eq!(crowded.pack(), None);
        // A white piece on an empty square.
        let mut ghost = start;
        ghost.0[0] |= 1 << 28;
        assert_eq!(ghost.pack(), None);
        // 32 pieces, the most a standard position has, pack.
        assert!(start.pack().is_some());
    }

    #[test]
    fn bytes_that_pack_never_writes_do_not_unpack() {
        let start = BoardKey::from_position(&Chess::default()).unwrap();
        let packed = start.pack().unwrap();
        assert_eq!(BoardKey::unpack(&packed), Some(start));
        // 33 occupied squares.
        let mut crowded = packed;
        crowded[3] |= 1 << 4; // e4
        assert_eq!(BoardKey::unpack(&crowded), None);
        // 31 pieces (no rook on a1): bit 31 of every plane is past the
        // occupied squares, and set in any one plane it is refused.
        let fewer: Chess = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/1NBQKBNR w Kkq - 0 1"
            .parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap();
        let fewer = BoardKey::from_position(&fewer).unwrap();
        let packed = fewer.pack().unwrap();
        assert_eq!(BoardKey::unpack(&packed), Some(fewer));
        for plane in 0..4 {
            let mut stray = packed;
            stray[8 + 4 * plane + 3] |= 0x80;
            assert_eq!(BoardKey::unpack(&stray), None, "plane {plane}");
        }
        // An occupied square (the first, b1) with no piece in the role
        // planes: it would decode as an empty square.
        let mut hollow = packed;
        for plane in 1..4 {
            hollow[8 + 4 * plane] &= !1;
        }
        assert_eq!(BoardKey::unpack(&hollow), None);
        // A zeroed entry (a hole in a file) is the empty board: it unpacks,
        // and the spill reader refuses it for its zero count instead.
        assert!(BoardKey::unpack(&[0; PACKED_KEY_BYTES]).is_some());
    }

    #[test]
    fn golden_boards_round_trip() {
        let text = crate::testing::golden("tokens.jsonl");
        let mut seen = std::collections::HashMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let fen = v["fen"].as_str().unwrap();
            let pos = position(fen);
            let key = BoardKey::from_position(&pos).unwrap();
            assert_eq!(key.fen(), fen);
            assert_eq!(key.fen(), shakmaty_fen(&pos));
            assert_eq!(key.to_position().unwrap(), pos, "{fen}");
            assert_eq!(BoardKey::unpack(&key.pack().unwrap()), Some(key), "{fen}");
            // Distinct FENs get distinct keys and vice versa.
            if let Some(other) = seen.insert(key, fen.to_owned()) {
                assert_eq!(other, fen);
            }
        }
        assert!(seen.len() >= 400);
    }

    /// The key of an arbitrary placement (not a legal position: only the
    /// FEN's first field is meaningful), white to move, move 1.
    fn placement_key(board: &Board) -> BoardKey {
        let [white, b0, b1, b2] = planes(board);
        BoardKey([white, b0, b1, b2, 1 << 32])
    }

    fn placement(key: &BoardKey) -> String {
        key.fen().split(' ').next().unwrap().to_owned()
    }

    #[test]
    fn every_rank_occupancy_is_written_as_shakmaty_writes_it() {
        // Every occupancy of every rank, with pieces of every kind.
        let pieces: Vec<shakmaty::Piece> = "PNBRQKpnbrqk"
            .chars()
            .map(|c| shakmaty::Piece::from_char(c).unwrap())
            .collect();
        for rank in 0..8u32 {
            for occupancy in 0..256u32 {
                let mut board = Board::empty();
                for file in 0..8u32 {
                    if occupancy >> file & 1 == 1 {
                        let piece = pieces[((occupancy + file * 5 + rank) % 12) as usize];
                        board.set_piece_at(Square::new(rank * 8 + file), piece);
                    }
                }
                let expected = board.board_fen().to_string();
                assert_eq!(placement(&placement_key(&board)), expected);
            }
        }
    }

    proptest::proptest! {
        /// Random placements of any pieces on every square.
        #[test]
        fn any_placement_is_written_as_shakmaty_writes_it(squares in proptest::collection::vec(0usize..24, 64)) {
            let mut board = Board::empty();
            for (sq, &code) in squares.iter().enumerate() {
                if let Some(c) = "PNBRQKpnbrqk".chars().nth(code) {
                    board.set_piece_at(Square::new(sq as u32), shakmaty::Piece::from_char(c).unwrap());
                }
            }
            let expected = board.board_fen().to_string();
            proptest::prop_assert_eq!(placement(&placement_key(&board)), expected);
        }

        /// The FEN written from a key is shakmaty's, on the positions of
        /// random games.
        #[test]
        fn fen_matches_shakmaty_on_random_games(choices in proptest::collection::vec(0usize..1000, 1..200)) {
            let mut pos = Chess::default();
            for choice in choices {
                let moves = pos.legal_moves();
                if moves.is_empty() {
                    break;
                }
                pos.play_unchecked(moves[choice % moves.len()]);
                let key = BoardKey::from_position(&pos).unwrap();
                proptest::prop_assert_eq!(key.fen(), shakmaty_fen(&pos));
            }
        }
    }

    #[test]
    fn rejects_inconsistent_keys() {
        let mut key = BoardKey::from_position(&Chess::default()).unwrap();
        key.0[0] = u64::MAX; // white pieces on empty squares
        assert_eq!(key.to_position(), Err(BoardKeyError::InconsistentBoard));
    }
}
