//! One distinct board as deduplication counts it ([`Entry`]: its key, first
//! occurrence and count), and how entries are laid out in spill and run
//! files ([`SpillFormat`]). Both the tables and the files hold entries, so
//! the in-memory and the on-disk form live together.

use super::super::error::IngestError;
use crate::chess::{
    BoardKey,
    board_key::{KEY_BYTES, PACKED_KEY_BYTES, fast_bit_extract},
};

/// A distinct board being counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: BoardKey,
    /// [`first_seen`] of the first occurrence.
    pub first: u64,
    /// Occurrences.
    pub count: u64,
}

/// Bytes of an [`Entry`] in memory.
pub(super) const ENTRY_SIZE: u64 = std::mem::size_of::<Entry>() as u64;

/// Packs (game_no, ply) so that integer order is occurrence order.
#[inline]
pub(super) fn first_seen(game_no: u64, ply: u32) -> u64 {
    (game_no << 16) | u64::from(ply)
}

/// Inverse of [`first_seen`].
pub(crate) fn split_first_seen(first: u64) -> (u64, u32) {
    (first >> 16, (first & 0xffff) as u32)
}

/// How entries are laid out in spill and run files: scratch of one ingest,
/// written and read by the same process, so the format is chosen per
/// process ([`SpillFormat::for_this_cpu`]). Every spilled entry is written
/// and read twice (partition, then run), so its size sets the out-of-core
/// pass's disk traffic: 10^6 generated games spill ~57M entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpillFormat {
    /// The key's five words, first occurrence and count: 56 bytes.
    Plain,
    /// The key packed ([`BoardKey::pack`], 32 bytes), the first occurrence
    /// in 7 bytes and the count in 5: 44 bytes, a fifth less to write and
    /// read, for a `pext`/`pdep` per plane each way.
    Packed,
}

/// Largest first occurrence the packed format holds (game numbers below
/// 2^40).
const PACKED_FIRST_MAX: u64 = (1 << 56) - 1;
/// Largest count the packed format holds.
const PACKED_COUNT_MAX: u64 = (1 << 40) - 1;

impl SpillFormat {
    /// Packed where the CPU packs keys in a few cycles
    /// ([`fast_bit_extract`]), plain elsewhere (packing bit by bit costs
    /// more CPU than the disk time it saves).
    pub(super) fn for_this_cpu() -> SpillFormat {
        if fast_bit_extract() {
            SpillFormat::Packed
        } else {
            SpillFormat::Plain
        }
    }

    /// The environment variable that overrides [`SpillFormat::for_this_cpu`]
    /// (`plain` or `packed`): for tests that push both formats through the
    /// real binary, and for comparing them on one machine. Packed without a
    /// fast `pext` works, bit by bit.
    pub(crate) const ENV: &'static str = "CHESSBENCH_SPILL_FORMAT";

    /// The format named by [`SpillFormat::ENV`]'s value, or this CPU's
    /// when it is unset; `Err` says what the variable takes.
    pub(crate) fn from_env(value: Option<&std::ffi::OsStr>) -> Result<SpillFormat, String> {
        let Some(value) = value else {
            return Ok(SpillFormat::for_this_cpu());
        };
        match value.to_str() {
            Some("plain") => Ok(SpillFormat::Plain),
            Some("packed") => Ok(SpillFormat::Packed),
            _ => Err(format!(
                "{value:?}: expected \"plain\" or \"packed\" (or unset: this CPU's choice)"
            )),
        }
    }

    /// Bytes of one entry on disk.
    pub(crate) const fn entry_bytes(self) -> usize {
        match self {
            SpillFormat::Plain => KEY_BYTES + 16,
            SpillFormat::Packed => PACKED_KEY_BYTES + 12,
        }
    }

    /// Appends `e`'s bytes. Fails only for an entry the packed format
    /// cannot hold: more than 32 pieces (not a standard position), a game
    /// number of 2^40 or more, or a count of 2^40 or more.
    #[inline]
    pub(super) fn write(self, e: &Entry, out: &mut Vec<u8>) -> Result<(), IngestError> {
        match self {
            SpillFormat::Plain => {
                out.extend_from_slice(&e.key.to_bytes());
                out.extend_from_slice(&e.first.to_le_bytes());
                out.extend_from_slice(&e.count.to_le_bytes());
            }
            SpillFormat::Packed => {
                let key = e
                    .key
                    .pack()
                    .filter(|_| e.first <= PACKED_FIRST_MAX && e.count <= PACKED_COUNT_MAX);
                let Some(key) = key else {
                    let (game_no, ply) = split_first_seen(e.first);
                    return Err(IngestError::Internal(format!(
                        "board first seen in game {game_no} at ply {ply} (key {:?}, seen {} times) \
                         does not fit the packed spill format (at most 32 pieces, game numbers \
                         and counts below 2^40)",
                        e.key.0, e.count
                    )));
                };
                out.extend_from_slice(&key);
                out.extend_from_slice(&e.first.to_le_bytes()[..7]);
                out.extend_from_slice(&e.count.to_le_bytes()[..5]);
            }
        }
        Ok(())
    }

    /// Inverse of [`SpillFormat::write`]; `bytes` is one entry. `None` for
    /// bytes `write` never gives (a count of 0, as in a zeroed block, or a
    /// packed key [`BoardKey::unpack`] refuses): a corrupt spill file.
    #[inline]
    pub(super) fn read(self, bytes: &[u8]) -> Option<Entry> {
        let word = |at: usize, len: usize| {
            let mut b = [0u8; 8];
            b[..len].copy_from_slice(&bytes[at..at + len]);
            u64::from_le_bytes(b)
        };
        let entry = match self {
            SpillFormat::Plain => Entry {
                key: BoardKey::from_bytes(bytes[..KEY_BYTES].try_into().unwrap()),
                first: word(KEY_BYTES, 8),
                count: word(KEY_BYTES + 8, 8),
            },
            SpillFormat::Packed => Entry {
                key: BoardKey::unpack(bytes[..PACKED_KEY_BYTES].try_into().unwrap())?,
                first: word(PACKED_KEY_BYTES, 7),
                count: word(PACKED_KEY_BYTES + 7, 5),
            },
        };
        (entry.count > 0).then_some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spill_formats_hold_every_entry_and_refuse_what_packing_cannot() {
        let start = BoardKey::from_position(&shakmaty::Chess::default()).unwrap();
        let (mut bytes, mut n) = (Vec::new(), 0);
        for seed in 0..50 {
            for (ply, pos) in crate::chess::random_games::game(seed, 200)
                .iter()
                .enumerate()
            {
                let key = BoardKey::from_position(pos).unwrap();
                // The packed format's largest first occurrence and count.
                let (first, count) = match ply % 3 {
                    0 => (first_seen(seed, ply as u32), 1),
                    1 => (PACKED_FIRST_MAX, PACKED_COUNT_MAX),
                    _ => (first_seen((1 << 40) - 1, 0xffff), 1 << 39),
                };
                let entry = Entry { key, first, count };
                for format in [SpillFormat::Plain, SpillFormat::Packed] {
                    bytes.clear();
                    format.write(&entry, &mut bytes).unwrap();
                    assert_eq!(bytes.len(), format.entry_bytes());
                    assert_eq!(format.read(&bytes), Some(entry), "{format:?}");
                }
                n += 1;
            }
        }
        assert!(n > 5_000);
        let too_late = Entry {
            key: start,
            first: first_seen(1 << 40, 0),
            count: 1,
        };
        let too_many = Entry {
            key: start,
            first: 0,
            count: 1 << 40,
        };
        let mut crowded = start;
        crowded.0[1] |= 1 << 28;
        let crowded = Entry {
            key: crowded,
            first: first_seen(7, 12),
            count: 1,
        };
        for e in [too_late, too_many, crowded] {
            SpillFormat::Plain.write(&e, &mut bytes).unwrap();
            let err = SpillFormat::Packed
                .write(&e, &mut bytes)
                .unwrap_err()
                .to_string();
            assert!(err.contains("packed spill format"), "{err}");
        }
        let err = SpillFormat::Packed
            .write(&crowded, &mut bytes)
            .unwrap_err()
            .to_string();
        assert!(err.contains("game 7 at ply 12"), "{err}");
    }

    #[test]
    fn the_environment_picks_the_spill_format_or_says_what_it_takes() {
        use std::{ffi::OsStr, os::unix::ffi::OsStrExt};
        let env = |v: &str| SpillFormat::from_env(Some(OsStr::new(v)));
        let cpu = SpillFormat::for_this_cpu();
        assert_eq!(SpillFormat::from_env(None).unwrap(), cpu);
        assert_eq!(env("plain").unwrap(), SpillFormat::Plain);
        assert_eq!(env("packed").unwrap(), SpillFormat::Packed);
        let not_utf8 = SpillFormat::from_env(Some(OsStr::from_bytes(b"pack\xffed")));
        assert!(not_utf8.is_err());
        let err = env("Packed").unwrap_err();
        assert!(
            err.contains("\"Packed\"") && err.contains("\"plain\" or \"packed\""),
            "{err}"
        );
    }
}
