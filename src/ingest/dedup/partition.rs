//! Partitions of a split's spilled boards: which of [`PARTITIONS`] files a
//! key goes to (the top bits of its hash, so each key's occurrences across
//! generations land in one file), where that file is, and how a table's
//! entries are appended to their files ([`write_partitions`]).

use std::path::{Path, PathBuf};

use super::{
    super::error::IngestError,
    entry::{Entry, SpillFormat},
    entry_file::EntryWriter,
};

/// Hash bits that choose a key's partition.
pub(super) const PARTITION_BITS: u32 = 6;
/// Partition files of a split that spills.
pub(super) const PARTITIONS: usize = 1 << PARTITION_BITS;

/// The spill partition of a key's hash: its top [`PARTITION_BITS`] bits.
#[inline]
pub(super) fn partition_of(hash: u64) -> usize {
    (hash >> (64 - PARTITION_BITS)) as usize
}

/// The file of partition `p` in `dir` (or of piece `p` of a partition
/// being split, in that partition's own directory).
pub(super) fn partition_path(dir: &Path, p: usize) -> PathBuf {
    dir.join(format!("partition-{p:02}.bin"))
}

/// Appends each of `entries` whose partition (`partitions[j]` for
/// `entries[j]`) is `first + i` to `files[i]` (created in `dir` with
/// `buffer` bytes of buffer when first needed), in order; other entries are
/// some other writer's.
pub(super) fn write_partitions(
    entries: &[Entry],
    partitions: &[u8],
    files: &mut [Option<EntryWriter>],
    first: usize,
    dir: &Path,
    buffer: usize,
    format: SpillFormat,
) -> Result<(), IngestError> {
    for (e, &p) in entries.iter().zip(partitions) {
        let p = usize::from(p);
        let Some(slot) = p.checked_sub(first).and_then(|i| files.get_mut(i)) else {
            continue;
        };
        let file = match slot {
            Some(file) => file,
            slot => slot.insert(EntryWriter::create(
                &partition_path(dir, p),
                buffer,
                format,
            )?),
        };
        file.push(e)?;
    }
    Ok(())
}
