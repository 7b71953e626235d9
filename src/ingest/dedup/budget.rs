//! The memory budget: how `--memory-limit` is shared between the
//! deduplication tables, the spill and run files' buffers and the rest of
//! ingest, and the least limit that can be honoured. Every size the other
//! files allocate against the limit is worked out here, so that the whole
//! sum can be read (and tested) in one place.

use super::{entry::ENTRY_SIZE, partition::PARTITIONS};
use crate::options::{Consumer, Memory, Share};

/// What `ingest` holds within `--memory-limit`: the tables' share is what
/// [`fitted_table_bytes`] fits the tables and their spill buffers into
/// (`chessbench ingest --help` says how, [`table_bytes`] does it).
pub const MEMORY: Memory<2> = Memory([
    Consumer::new(
        "what ingest holds whatever the limit: the blocks being parsed, the boards in flight, \
         the writers",
        Share::Buffers {
            first: PIPELINE_FLOOR,
            each_thread: 0,
        },
    ),
    Consumer::new(
        "the board deduplication tables and their spill buffers",
        Share::Rest { at_least: (0, 1) },
    ),
]);

/// Memory per entry counted against the limit: the entry plus up to two
/// 8-byte index slots (load factor 1/4..1/2).
pub(super) const BYTES_PER_ENTRY: u64 = ENTRY_SIZE + 16;

/// What the rest of ingest (input blocks, parsers, the collector, spill
/// buffers) may hold beside the tables under a large limit: the tables get
/// at least `--memory-limit` less this ([`table_bytes`]; the dedup phase
/// uses all of it, the stream phase at most [`STREAM_TABLE_BYTES`] a
/// shard). Sized from measurements at 10^6 and 10^7 generated games
/// (docs/benchmarks.md#constants).
pub(crate) const PIPELINE_RESERVE: u64 = 320 << 20;

/// What ingest holds whatever the limit, file buffers aside: the binary's
/// and DuckDB's text (~15 MB), the blocks being parsed and their key
/// batches, the games being written, and once the tables are gone the
/// boards phase's renderers and Parquet writers. Sized from the peaks
/// measured under small limits up to 10^7 generated games
/// (docs/benchmarks.md#constants).
pub(crate) const PIPELINE_FLOOR: u64 = 208 << 20;

/// Most bytes one shard's tables (all splits) hold while games stream in,
/// whatever the limit; the dedup phase still gets the whole limit. A table
/// far bigger than the CPU caches costs a memory miss on every board, and
/// here seconds to fault in; on unique games nearly every board goes to
/// disk anyway, so a big table saves little writing. 16 MiB was as fast
/// as any size tried (docs/benchmarks.md#constants).
pub(crate) const STREAM_TABLE_BYTES: u64 = 16 << 20;

/// Buffer of each partition file of a split while spilling, unless the
/// tables are small ([`spill_buffer`]): written with `O_DIRECT` when full,
/// so it should not be small. A split spilling has [`PARTITIONS`] files (each
/// shard its own), so 32 MiB of buffers.
const SPILL_BUFFER: usize = 512 << 10;

/// The deduplication tables' memory under `memory_limit` for `splits`
/// splits (all of it for the dedup phase; the stream phase's tables are
/// capped lower, [`STREAM_TABLE_BYTES`]): as much as leaves the rest of
/// ingest room, [`PIPELINE_FLOOR`] and the spill buffers ([`spill_buffer`]:
/// an eighth of this, so up to 4 times the capped tables while spilling,
/// at least 64 KiB a file), and never less than the limit less
/// [`PIPELINE_RESERVE`]. Under [`least_limit`] the tables get their minimum
/// ([`min_table_bytes`]) and the limit is not honoured.
pub(super) fn table_bytes(memory_limit: u64, splits: usize) -> u64 {
    fitted_table_bytes(memory_limit, splits)
        .max(memory_limit.saturating_sub(PIPELINE_RESERVE))
        .max(min_table_bytes(memory_limit))
}

/// The most the tables may take with the floor and the spill buffers
/// beside them within `memory_limit`.
fn fitted_table_bytes(memory_limit: u64, splits: usize) -> u64 {
    let [_, room] = MEMORY.share(memory_limit, 1);
    (room / 9 * 8).min(room.saturating_sub(least_spill_buffers(splits)))
}

/// The spill buffers of `splits` splits at their smallest (64 KiB a file).
fn least_spill_buffers(splits: usize) -> u64 {
    (splits.max(1) * PARTITIONS) as u64 * (64 << 10)
}

/// The least the tables get: a quarter of the limit, at most
/// [`MIN_TABLES`].
fn min_table_bytes(memory_limit: u64) -> u64 {
    (memory_limit / 4).min(MIN_TABLES)
}

/// The tables' memory below which a limit is not honoured.
pub(crate) const MIN_TABLES: u64 = 16 << 20;

/// The least `--memory-limit` ingest stays within for `splits` splits:
/// [`PIPELINE_FLOOR`], [`MIN_TABLES`] and the spill buffers at their
/// smallest (232 MiB for two splits). Under it the tables get their minimum
/// and the process takes about this much whatever the limit.
pub(crate) fn least_limit(splits: usize) -> u64 {
    PIPELINE_FLOOR + (MIN_TABLES + least_spill_buffers(splits)).max(MIN_TABLES / 8 * 9)
}

/// The buffer of each partition file: [`SPILL_BUFFER`], or less when the
/// tables are small: all splits' files together take at most an eighth of
/// the tables' memory.
pub(super) fn spill_buffer(table_bytes: u64, splits: usize) -> usize {
    buffer_share(table_bytes, splits.max(1) * PARTITIONS, SPILL_BUFFER)
}

/// An eighth of `bytes` shared by `files` buffers, each a multiple of 64 KiB
/// from 64 KiB to `max`: a file buffer's size when memory is short.
fn buffer_share(bytes: u64, files: usize, max: usize) -> usize {
    const STEP: u64 = 64 << 10;
    let share = bytes / 8 / files.max(1) as u64;
    (share.clamp(STEP, max as u64) / STEP * STEP) as usize
}

/// The read buffer of each run file in a merge (a split's, or a recursive
/// split's in the dedup phase): 1 MiB, whole reads the disk streams well,
/// unless the memory limit is small: the runs share an eighth of the
/// tables' memory (`table_bytes`), at least 64 KiB each.
pub(super) fn run_buffer(table_bytes: u64, runs: usize) -> usize {
    buffer_share(table_bytes, runs, 1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_get_what_the_limit_leaves_beside_the_floor() {
        const MIB: u64 = 1 << 20;
        // The default limit: the limit less the reserve.
        assert_eq!(table_bytes(2048 * MIB, 2), 2048 * MIB - PIPELINE_RESERVE);
        assert!(2048 * MIB >= least_limit(2));
        // Limits that are kept: floor + tables + spill buffers fit.
        for splits in [1, 2, 3] {
            let least = least_limit(splits);
            for limit in [
                least,
                least + 1,
                256 * MIB,
                384 * MIB,
                512 * MIB,
                1024 * MIB,
            ] {
                let tables = table_bytes(limit, splits);
                let buffers = (splits * PARTITIONS * spill_buffer(tables, splits)) as u64;
                assert!(
                    PIPELINE_FLOOR + tables + buffers <= limit,
                    "{limit}: {tables} of tables, {buffers} of buffers"
                );
                assert!(tables >= MIN_TABLES);
                assert!(tables >= limit.saturating_sub(PIPELINE_RESERVE));
            }
            // One byte less and the tables would be under their minimum.
            assert!(fitted_table_bytes(least - 1, splits) < MIN_TABLES);
        }
        assert_eq!(table_bytes(256 * MIB, 2), 40 * MIB);
        assert_eq!(least_limit(2), 232 * MIB);
        assert_eq!(least_limit(1), 228 * MIB);
        // Under the least limit: a quarter of the limit, at most 16 MiB.
        assert_eq!(table_bytes(208 * MIB, 2), 16 * MIB);
        assert_eq!(table_bytes(16 * MIB, 2), 4 * MIB);
        assert_eq!(table_bytes(MIB, 1), MIB / 4);
    }

    #[test]
    fn file_buffers_shrink_only_when_memory_is_short() {
        // Spill files: 2 GiB of tables, two splits: 128 files of 512 KiB
        // (64 MiB); 256 MiB: an eighth over 128 files, 256 KiB each; tiny
        // tables 64 KiB each, whatever the split count.
        assert_eq!(spill_buffer(2 << 30, 2), 512 << 10);
        assert_eq!(spill_buffer(256 << 20, 2), 256 << 10);
        assert_eq!(spill_buffer(16 << 20, 2), 64 << 10);
        assert_eq!(spill_buffer(1 << 20, 0), 64 << 10);
        // Run files: 2 GiB of tables over 64 runs: whole 1 MiB reads; 64 MiB:
        // 128 KiB each; shares round down to 64 KiB multiples.
        assert_eq!(run_buffer(2 << 30, 64), 1 << 20);
        assert_eq!(run_buffer(64 << 20, 64), 128 << 10);
        assert_eq!(run_buffer(4 << 20, 64), 64 << 10);
        assert_eq!(run_buffer(100 << 20, 64), 192 << 10);
        assert_eq!(run_buffer(1 << 40, 0), 1 << 20);
    }
}
