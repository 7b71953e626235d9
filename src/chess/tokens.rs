//! The 77-token FEN encoding of ChessBench.
//!
//! Ruoss et al. (2024), §2.1 and `searchless_chess/src/tokenizer.py`: the
//! side to move (1 token), the 64 squares from a8 to h1 (digits expanded to
//! that many `.`), castling padded with `.` to 4 tokens (`-` is four `.`),
//! en passant as 2 tokens (`-` is two `.`), halfmove clock and fullmove
//! number each right-padded with `.` to 3 tokens. Each character maps to its
//! index in [`CHARACTERS`].
//!
//! Worked example: the start position
//! `rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1` begins
//! `[29 (w), 20 (r), 19 (n), 11 (b), 22 (q), 21 (k), ...]` and ends with
//! `[..., 0 (0), 30, 30, 1 (1), 30, 30]`.

use thiserror::Error;

/// Number of tokens per board.
pub(crate) const SEQUENCE_LENGTH: usize = 77;

/// The token alphabet; a token is the index of its character here. `b` is
/// shared by the black bishop, the black side to move and the b-file.
pub(crate) const CHARACTERS: [u8; 31] = *b"0123456789abcdefghpnrkqPBNRQKw.";

const DOT: u8 = 30;

const fn build_index() -> [u8; 256] {
    let mut table = [u8::MAX; 256];
    let mut i = 0;
    while i < CHARACTERS.len() {
        table[CHARACTERS[i] as usize] = i as u8;
        i += 1;
    }
    table
}

static INDEX: [u8; 256] = build_index();

/// Why a FEN could not be tokenized.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TokenizeError {
    #[error("expected 6 space-separated FEN fields, found {found}")]
    FieldCount { found: usize },
    #[error("character {ch:?} in the {field} field is not in the ChessBench alphabet")]
    BadCharacter { field: &'static str, ch: char },
    #[error("the {field} field {value:?} is longer than the {max} tokens ChessBench reserves")]
    TooLong {
        field: &'static str,
        value: String,
        max: usize,
    },
    #[error("board field expands to {found} squares, expected 64")]
    BoardSize { found: usize },
}

fn push_chars(
    out: &mut [u8; SEQUENCE_LENGTH],
    pos: &mut usize,
    field: &'static str,
    text: &str,
    width: usize,
) -> Result<(), TokenizeError> {
    if text.len() > width {
        return Err(TokenizeError::TooLong {
            field,
            value: text.to_owned(),
            max: width,
        });
    }
    for ch in text.bytes() {
        let t = INDEX[usize::from(ch)];
        if t == u8::MAX {
            return Err(TokenizeError::BadCharacter {
                field,
                ch: char::from(ch),
            });
        }
        out[*pos] = t;
        *pos += 1;
    }
    for _ in text.len()..width {
        out[*pos] = DOT;
        *pos += 1;
    }
    Ok(())
}

/// Tokenizes a FEN into ChessBench's 77 tokens.
///
/// Fails where the Python reference would raise (more than 3 digits in a
/// move counter, unknown characters, a malformed board).
pub fn tokenize(fen: &str) -> Result<[u8; SEQUENCE_LENGTH], TokenizeError> {
    let fields: Vec<&str> = fen.split(' ').collect();
    let &[board, side, castling, en_passant, halfmoves, fullmoves] = fields.as_slice() else {
        return Err(TokenizeError::FieldCount {
            found: fields.len(),
        });
    };
    let mut out = [DOT; SEQUENCE_LENGTH];
    let mut pos = 0;
    push_chars(&mut out, &mut pos, "side to move", side, 1)?;
    let mut squares = 0usize;
    for ch in board.bytes() {
        match ch {
            b'/' => {}
            b'1'..=b'8' => {
                let n = usize::from(ch - b'0');
                squares += n;
                if squares > 64 {
                    return Err(TokenizeError::BoardSize { found: squares });
                }
                pos += n; // already DOT
            }
            _ => {
                let t = INDEX[usize::from(ch)];
                if !b"pnbrqkPNBRQK".contains(&ch) {
                    return Err(TokenizeError::BadCharacter {
                        field: "board",
                        ch: char::from(ch),
                    });
                }
                squares += 1;
                if squares > 64 {
                    return Err(TokenizeError::BoardSize { found: squares });
                }
                out[pos] = t;
                pos += 1;
            }
        }
    }
    if squares != 64 {
        return Err(TokenizeError::BoardSize { found: squares });
    }
    let castling = if castling == "-" { "" } else { castling };
    push_chars(&mut out, &mut pos, "castling", castling, 4)?;
    let en_passant = if en_passant == "-" { "" } else { en_passant };
    push_chars(&mut out, &mut pos, "en passant", en_passant, 2)?;
    push_chars(&mut out, &mut pos, "halfmove clock", halfmoves, 3)?;
    push_chars(&mut out, &mut pos, "fullmove number", fullmoves, 3)?;
    debug_assert_eq!(pos, SEQUENCE_LENGTH);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_position() {
        let t = tokenize("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1").unwrap();
        assert_eq!(&t[..6], &[29, 20, 19, 11, 22, 21]);
        // castling KQkq, no en passant, "0..", "1.."
        assert_eq!(&t[65..], &[28, 27, 21, 22, 30, 30, 0, 30, 30, 1, 30, 30]);
    }

    #[test]
    fn rejects_what_the_reference_rejects() {
        assert!(matches!(
            tokenize("8/8/8/8/8/8/8/K6k w - - 0 1000"),
            Err(TokenizeError::TooLong { .. })
        ));
        assert!(matches!(
            tokenize("8/8/8/8/8/8/8/K6k w - - 0"),
            Err(TokenizeError::FieldCount { found: 5 })
        ));
        assert!(matches!(
            tokenize("8/8/8/8/8/8/8/K6kx w - - 0 1"),
            Err(TokenizeError::BadCharacter { .. })
        ));
        assert!(matches!(
            tokenize("8/8/8/8/8/8/8/K7k w - - 0 1"),
            Err(TokenizeError::BoardSize { .. })
        ));
    }

    #[test]
    fn matches_golden_tokens() {
        let text = crate::testing::golden("tokens.jsonl");
        let mut n = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let fen = v["fen"].as_str().unwrap();
            let want: Vec<u8> = v["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u8)
                .collect();
            assert_eq!(tokenize(fen).unwrap().to_vec(), want, "{fen}");
            n += 1;
        }
        assert!(n >= 400, "expected the 404 golden boards, read {n}");
    }
}
