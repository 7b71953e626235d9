//! ChessBench's record encoding: Apache Beam coders, as searchless_chess's
//! `constants.py` composes them.
//!
//! ```text
//! state_value        = TupleCoder((StrUtf8Coder(), FloatCoder()))                 (fen, win_prob)
//! action_value       = TupleCoder((StrUtf8Coder(), StrUtf8Coder(), FloatCoder())) (fen, move, win_prob)
//! behavioral_cloning = TupleCoder((StrUtf8Coder(), StrUtf8Coder()))               (fen, move)
//! ```
//!
//! Beam encodes every component of a top-level tuple but the last in the
//! "nested" context, where a string carries an unsigned LEB128 varint length
//! prefix; the last component is unnested, so a trailing string is the rest
//! of the record without a prefix. `FloatCoder` writes an IEEE-754 double,
//! big-endian, in both contexts. Checked byte for byte against apache-beam's
//! own coders in `tests/python/test_bag_interop.py`.

use thiserror::Error;

/// A record that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum CoderError {
    #[error("record ends inside {0}")]
    Truncated(&'static str),
    #[error("varint longer than 10 bytes")]
    VarintTooLong,
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    #[error("{0} trailing bytes after the record")]
    Trailing(usize),
}

/// Appends an unsigned LEB128 varint (Beam's `VarIntCoder` layout).
pub(crate) fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a varint at `*pos`, advancing it.
pub(crate) fn read_varint(
    buf: &[u8],
    pos: &mut usize,
    what: &'static str,
) -> Result<u64, CoderError> {
    let mut n = 0u64;
    for shift in (0..70).step_by(7) {
        let Some(&b) = buf.get(*pos) else {
            return Err(CoderError::Truncated(what));
        };
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(CoderError::VarintTooLong);
        }
        n |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err(CoderError::VarintTooLong)
}

fn nested_str(out: &mut Vec<u8>, s: &str) {
    write_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn read_nested_str<'a>(
    buf: &'a [u8],
    pos: &mut usize,
    what: &'static str,
) -> Result<&'a str, CoderError> {
    let len = read_varint(buf, pos, what)?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| pos.checked_add(l))
        .filter(|&e| e <= buf.len())
        .ok_or(CoderError::Truncated(what))?;
    let s = std::str::from_utf8(&buf[*pos..end]).map_err(|_| CoderError::NotUtf8(what))?;
    *pos = end;
    Ok(s)
}

fn read_f64(buf: &[u8], pos: usize, what: &'static str) -> Result<f64, CoderError> {
    let bytes: [u8; 8] = buf
        .get(pos..pos + 8)
        .and_then(|b| b.try_into().ok())
        .ok_or(CoderError::Truncated(what))?;
    if buf.len() > pos + 8 {
        return Err(CoderError::Trailing(buf.len() - pos - 8));
    }
    Ok(f64::from_be_bytes(bytes))
}

/// Encodes a state-value record `(fen, win_prob)` into `out` (cleared).
pub fn encode_state_value(out: &mut Vec<u8>, fen: &str, win_prob: f64) {
    out.clear();
    nested_str(out, fen);
    out.extend_from_slice(&win_prob.to_be_bytes());
}

/// Encodes an action-value record `(fen, move, win_prob)` into `out`.
pub fn encode_action_value(out: &mut Vec<u8>, fen: &str, uci: &str, win_prob: f64) {
    out.clear();
    nested_str(out, fen);
    nested_str(out, uci);
    out.extend_from_slice(&win_prob.to_be_bytes());
}

/// Encodes a behavioural-cloning record `(fen, move)` into `out`; the move,
/// last, carries no length prefix.
pub fn encode_behavioral_cloning(out: &mut Vec<u8>, fen: &str, uci: &str) {
    out.clear();
    nested_str(out, fen);
    out.extend_from_slice(uci.as_bytes());
}

/// Decodes `(fen, win_prob)`.
pub(crate) fn decode_state_value(buf: &[u8]) -> Result<(&str, f64), CoderError> {
    let mut pos = 0;
    let fen = read_nested_str(buf, &mut pos, "the FEN")?;
    Ok((fen, read_f64(buf, pos, "the win probability")?))
}

/// Decodes `(fen, move, win_prob)`.
pub(crate) fn decode_action_value(buf: &[u8]) -> Result<(&str, &str, f64), CoderError> {
    let mut pos = 0;
    let fen = read_nested_str(buf, &mut pos, "the FEN")?;
    let uci = read_nested_str(buf, &mut pos, "the move")?;
    Ok((fen, uci, read_f64(buf, pos, "the win probability")?))
}

/// Decodes `(fen, move)`.
pub(crate) fn decode_behavioral_cloning(buf: &[u8]) -> Result<(&str, &str), CoderError> {
    let mut pos = 0;
    let fen = read_nested_str(buf, &mut pos, "the FEN")?;
    let uci = std::str::from_utf8(&buf[pos..]).map_err(|_| CoderError::NotUtf8("the move"))?;
    Ok((fen, uci))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Byte strings printed by apache-beam 2.77's coders (see module docs).
    #[test]
    fn matches_beam_bytes() {
        let mut out = Vec::new();
        encode_state_value(&mut out, "8/8/8/8/8/8/8/K6k w - - 0 1", 0.25);
        assert_eq!(
            hex(&out),
            "1b382f382f382f382f382f382f382f4b366b2077202d202d203020313fd0000000000000"
        );
        encode_behavioral_cloning(&mut out, "fen", "e2e4");
        assert_eq!(hex(&out), "0366656e65326534");
        encode_action_value(&mut out, "fen", "e2e4", 0.5);
        assert_eq!(hex(&out), "0366656e04653265343fe0000000000000");
        encode_state_value(&mut out, &"x".repeat(140), 0.0);
        assert_eq!(hex(&out[..2]), "8c01");
    }

    #[test]
    fn varints() {
        for (n, h) in [(0u64, "00"), (127, "7f"), (128, "8001"), (300, "ac02")] {
            let mut out = Vec::new();
            write_varint(&mut out, n);
            assert_eq!(hex(&out), h);
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos, "n").unwrap(), n);
        }
        let mut pos = 0;
        assert_eq!(
            read_varint(&[0x80, 0x80], &mut pos, "the FEN"),
            Err(CoderError::Truncated("the FEN"))
        );
    }

    #[test]
    fn malformed_records_are_errors() {
        assert!(decode_state_value(&[5, b'a']).is_err());
        assert!(decode_state_value(&[1, b'a', 0, 0]).is_err());
        assert_eq!(
            decode_state_value(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 9]),
            Err(CoderError::Trailing(1))
        );
        assert_eq!(
            decode_behavioral_cloning(&[1, 0xff]),
            Err(CoderError::NotUtf8("the FEN"))
        );
    }

    proptest! {
        #[test]
        fn round_trips(fen in "\\PC{0,200}", uci in "\\PC{0,8}", p in any::<f64>()) {
            let mut out = Vec::new();
            encode_state_value(&mut out, &fen, p);
            let (f, q) = decode_state_value(&out).unwrap();
            prop_assert_eq!(f, fen.as_str());
            prop_assert_eq!(q.to_bits(), p.to_bits());
            encode_action_value(&mut out, &fen, &uci, p);
            let (f, m, q) = decode_action_value(&out).unwrap();
            prop_assert_eq!((f, m, q.to_bits()), (fen.as_str(), uci.as_str(), p.to_bits()));
            encode_behavioral_cloning(&mut out, &fen, &uci);
            prop_assert_eq!(decode_behavioral_cloning(&out).unwrap(), (fen.as_str(), uci.as_str()));
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_state_value(&bytes);
            let _ = decode_action_value(&bytes);
            let _ = decode_behavioral_cloning(&bytes);
        }
    }
}
