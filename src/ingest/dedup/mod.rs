//! Board deduplication that scales past memory.
//!
//! Boards arrive in game order (the collector orders them), so inserting
//! them into a hash table whose entries live in a `Vec` yields the distinct
//! boards in order of first occurrence — the order board ids follow — with
//! no sort. When the table is full (its share of `--memory-limit`, at most
//! [`STREAM_TABLE_BYTES`] while games stream in), its entries are written,
//! still in that order, to 64 partition files chosen by the key's hash (by
//! two threads, each half the files), and the table starts afresh
//! ("generations"). At the end each partition is deduplicated on its own
//! (the first occurrence of a key is in the earliest generation, and a
//! partition file is ordered by first occurrence across generations), split
//! by further hash bits if it is still too big (into as many pieces as fit
//! in one more pass: `split_bits` in [`spill`]), and the partitions' outputs
//! are merged by first occurrence. A partition's output is the partition
//! file itself, read with the positions of its later duplicates to skip
//! and the counts to raise (a fix, [`entry_file::Run`]), while the fixes
//! fit their share of the memory; else a run file written for it. The
//! result is the same stream of boards, byte for byte, whatever the memory
//! limit.
//!
//! The work can be shared by several aggregators on their own threads
//! (shards, [`aggregator`]): each counts the keys of its partitions only,
//! within its share of the limit, and writes only its partitions' files;
//! their distinct boards are merged by first occurrence at the end. Each key
//! is counted by exactly one shard, so the stream is again the same whatever
//! the number of shards.
//!
//! The parts, one file each:
//! - [`budget`]: how the memory limit is shared among the tables, the file
//!   buffers and the rest of ingest;
//! - [`entry`]: a distinct board with its first occurrence and count, and
//!   its layout in spill and run files;
//! - [`entry_file`]: spill and run files read and written as entries, and
//!   a run read as a partition with its fix;
//! - [`table`]: the hash table, and one split's table that spills when full;
//! - [`aggregator`]: the shards that count the boards batch by batch, and
//!   the end of counting ([`finish`]);
//! - [`partition`]: which partition file a key goes to, and appending to
//!   them;
//! - [`spill`]: the partition files' deduplication into runs;
//! - [`merge`]: runs and in-memory tables merged by first occurrence.
//!
//! [`STREAM_TABLE_BYTES`]: budget::STREAM_TABLE_BYTES

mod aggregator;
mod budget;
mod entry;
mod entry_file;
mod merge;
mod partition;
mod spill;
mod table;

// The budget's sizes are also what `chessbench ingest --help` states
// (`ingest::config::memory_note`).
pub use self::budget::MEMORY;
pub(crate) use self::{
    aggregator::{Aggregator, BatchGame, KeyBatch, Keys, finish},
    budget::{MIN_TABLES, PIPELINE_FLOOR, PIPELINE_RESERVE, STREAM_TABLE_BYTES, least_limit},
    entry::{Entry, SpillFormat, split_first_seen},
    merge::SplitBoards,
    spill::DedupBusy,
};
