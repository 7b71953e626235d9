//! Board deduplication that scales past memory.
//!
//! Boards arrive in game order (the collector orders them), so inserting
//! them into a hash table whose entries live in a `Vec` yields the distinct
//! boards in order of first occurrence — the order board ids follow — with
//! no sort. When the table is full (its share of `--memory-limit`, at most
//! [`STREAM_TABLE_BYTES`] while games stream in), its entries are written,
//! still in that order, to 64 partition files chosen by the key's hash (by
//! two threads, each half the files), and the table starts afresh
//! ("generations"). At the end each partition is
//! deduplicated on its own (the first occurrence of a key is in the earliest
//! generation, and a partition file is ordered by first occurrence across
//! generations), split by further hash bits if it is still too big (into
//! as many pieces as fit in one more pass, [`split_bits`]), and the
//! partitions' outputs are merged by first occurrence. The result
//! is the same stream of boards, byte for byte, whatever the memory limit.
//!
//! The work can be shared by several aggregators on their own threads
//! ([`Shard`]s): each counts the keys of its partitions only, within its share
//! of the limit, and writes only its partitions' files; their distinct boards
//! are merged by first occurrence at the end. Each key is counted by exactly
//! one shard, so the stream is again the same whatever the number of shards.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, binary_heap::PeekMut},
    fs::{self, File},
    io::{BufReader, Read, Write},
    path::{Path, PathBuf},
};

use std::sync::{
    Mutex,
    atomic::{AtomicUsize, Ordering},
};

use super::{IngestError, config::ConfigError, spawn_named};
use crate::{
    chess::{
        BoardKey,
        board_key::{KEY_BYTES, PACKED_KEY_BYTES, fast_bit_extract},
    },
    store::{
        cache::prefetch,
        direct::{DirectReader, DirectWriter},
    },
};

/// Memory per entry counted against the limit: the entry plus up to two
/// 8-byte index slots (load factor 1/4..1/2).
pub(crate) const BYTES_PER_ENTRY: u64 = ENTRY_SIZE + 16;
/// Bytes of an [`Entry`] in memory.
const ENTRY_SIZE: u64 = std::mem::size_of::<Entry>() as u64;
/// What the rest of ingest (input blocks, parsers, the collector, spill
/// buffers) may hold beside the tables under a large limit: the tables get
/// at least `--memory-limit` less this ([`table_bytes`]; the dedup phase
/// uses all of it, the stream phase at most [`STREAM_TABLE_BYTES`] a
/// shard). Measured beside a full table (2 GiB limit, before the stream
/// phase's tables were capped): ~110 MB at 10^6 generated games, ~260 MB at
/// 10^7 (both splits spilling); the key batches in flight carry each key's
/// hash too (8 of 48 bytes a board).
pub(crate) const PIPELINE_RESERVE: u64 = 320 << 20;
/// What ingest holds whatever the limit, file buffers aside: the binary's
/// and DuckDB's text (~15 MB), the blocks being parsed and their key
/// batches, the games being written, and once the tables are gone the
/// boards phase's renderers and Parquet writers. Measured under small
/// limits at 10^5 and 10^6 generated games: ~150-180 MB in each phase; at
/// 10^7 under 216MiB (tables as under 232MiB now) the stream phase crept up
/// to 221 MB (glibc's per-thread arenas growing) and the boards phase to
/// 207 MB, hence 16 MiB more than the 192 MiB that was kept before.
pub(crate) const PIPELINE_FLOOR: u64 = 208 << 20;
/// Most bytes one shard's tables (all splits) hold while games stream in,
/// whatever the limit; the dedup phase still gets the whole limit. A table
/// far bigger than the CPU caches costs a memory miss on every board, and
/// here (a VM whose host backs memory on first touch, ~2 ns a byte) seconds
/// to fault in; on unique games nearly every board goes to disk anyway
/// (10^6 generated games: 50.4M boards spilled, 50.2M distinct), so a big
/// table saved little writing. Measured at 10^6 generated games under the
/// 2 GiB default, one binary: tables of 4, 8, 16, 64, 256 MiB a shard took
/// 36.7, 35.1, 34.7-36.6, 37.7, 36.5 s, all the limit allowed (~850 MiB a
/// shard) ~42-45 s; at 10^5 (which then spills) 3.7-3.9 s against 3.4-3.7.
pub(crate) const STREAM_TABLE_BYTES: u64 = 16 << 20;
/// Buffer of each partition file of a split while spilling, unless the
/// tables are small ([`spill_buffer`]): written with `O_DIRECT` when full,
/// so it should not be small. A split spilling has PARTITIONS files (each
/// shard its own), so 32 MiB of buffers.
const SPILL_BUFFER: usize = 512 << 10;

const PARTITION_BITS: u32 = 6;
const PARTITIONS: usize = 1 << PARTITION_BITS;

/// The deduplication tables' memory under `memory_limit` for `splits`
/// splits (all of it for the dedup phase; the stream phase's tables are
/// capped lower, [`STREAM_TABLE_BYTES`]): as much as leaves the rest of
/// ingest room, [`PIPELINE_FLOOR`] and the spill buffers ([`spill_buffer`]:
/// an eighth of this, so up to 4 times the capped tables while spilling,
/// at least 64 KiB a file), and never less than the limit less
/// [`PIPELINE_RESERVE`]. Under [`least_limit`] the tables get their minimum
/// ([`min_table_bytes`]) and the limit is not honoured.
pub(crate) fn table_bytes(memory_limit: u64, splits: usize) -> u64 {
    fitted_table_bytes(memory_limit, splits)
        .max(memory_limit.saturating_sub(PIPELINE_RESERVE))
        .max(min_table_bytes(memory_limit))
}

/// The most the tables may take with the floor and the spill buffers
/// beside them within `memory_limit`.
fn fitted_table_bytes(memory_limit: u64, splits: usize) -> u64 {
    let room = memory_limit.saturating_sub(PIPELINE_FLOOR);
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
fn spill_buffer(table_bytes: u64, splits: usize) -> usize {
    buffer_share(table_bytes, splits.max(1) * PARTITIONS, SPILL_BUFFER)
}

/// An eighth of `bytes` shared by `files` buffers, each a multiple of 64 KiB
/// from 64 KiB to `max`: a file buffer's size when memory is short.
fn buffer_share(bytes: u64, files: usize, max: usize) -> usize {
    const STEP: u64 = 64 << 10;
    let share = bytes / 8 / files.max(1) as u64;
    (share.clamp(STEP, max as u64) / STEP * STEP) as usize
}

/// A distinct board being counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: BoardKey,
    /// [`first_seen`] of the first occurrence.
    pub first: u64,
    /// Occurrences.
    pub count: u64,
}

/// Packs (game_no, ply) so that integer order is occurrence order.
#[inline]
pub(crate) fn first_seen(game_no: u64, ply: u32) -> u64 {
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
    pub(crate) fn for_this_cpu() -> SpillFormat {
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
    /// when it is unset.
    pub(crate) fn from_env(value: Option<&std::ffi::OsStr>) -> Result<SpillFormat, IngestError> {
        let Some(value) = value else {
            return Ok(SpillFormat::for_this_cpu());
        };
        match value.to_str() {
            Some("plain") => Ok(SpillFormat::Plain),
            Some("packed") => Ok(SpillFormat::Packed),
            _ => Err(ConfigError::Invalid {
                option: SpillFormat::ENV,
                message: format!(
                    "{value:?}: expected \"plain\" or \"packed\" (or unset: this CPU's choice)"
                ),
            }
            .into()),
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
    fn write(self, e: &Entry, out: &mut Vec<u8>) -> Result<(), IngestError> {
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
    fn read(self, bytes: &[u8]) -> Option<Entry> {
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

fn spill_err(path: &Path, source: std::io::Error) -> IngestError {
    IngestError::Spill {
        path: path.to_owned(),
        source,
    }
}

/// Open-addressing index from board key to entry: each slot holds
/// `(fingerprint << 32) | (entry index + 1)`, 0 when empty; linear probing
/// at load factor <= 1/2. Its own table rather than a general hash map so a
/// batch of lookups can prefetch slots and entries ahead (the table and
/// entries far exceed the CPU caches at ChessBench scale).
struct Index {
    slots: Vec<u64>,
    mask: usize,
}

impl Index {
    fn with_slots(n: usize) -> Index {
        let n = n.next_power_of_two().max(16);
        let slots = vec![0; n];
        advise_huge_pages(slots.as_ptr(), slots.len());
        Index { slots, mask: n - 1 }
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        hash as usize & self.mask
    }

    #[inline]
    fn fingerprint(hash: u64) -> u64 {
        hash >> 32
    }

    #[inline]
    fn prefetch_slot(&self, hash: u64) {
        prefetch(self.slots.as_ptr().wrapping_add(self.home(hash)));
    }

    /// The entry index of `key`, or the empty slot where it goes.
    #[inline]
    fn find(&self, hash: u64, key: &BoardKey, entries: &[Entry]) -> Result<usize, usize> {
        let fp = Index::fingerprint(hash);
        let mut i = self.home(hash);
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return Err(i);
            }
            if slot >> 32 == fp {
                let at = (slot as u32 - 1) as usize;
                if same_key(&entries[at].key, key) {
                    return Ok(at);
                }
            }
            i = (i + 1) & self.mask;
        }
    }

    #[inline]
    fn put(&mut self, slot: usize, hash: u64, at: usize) {
        self.slots[slot] = (Index::fingerprint(hash) << 32) | (at as u64 + 1);
    }

    /// Indexes `entries` (distinct keys) in a table of `slots` slots: no
    /// key comparisons, each key takes the first free slot from its home,
    /// with home slots prefetched a batch ahead.
    ///
    /// The table grows in place within `reserve` slots of address space
    /// (reserved at the first growth): doubling into a new allocation would
    /// fault in, page by page, twice the final size; this faults in each
    /// page once.
    fn rebuild(&mut self, slots: usize, reserve: usize, entries: &[Entry]) {
        let n = slots.next_power_of_two().max(16);
        if self.slots.capacity() < n {
            let mut fresh: Vec<u64> = Vec::new();
            if fresh.try_reserve_exact(reserve.max(n)).is_err() {
                fresh.reserve_exact(n);
            }
            advise_huge_pages(fresh.as_ptr(), fresh.capacity());
            self.slots = fresh;
        }
        self.slots.clear();
        self.slots.resize(n, 0);
        self.mask = n - 1;
        let mut hashes = [0u64; LOOKAHEAD];
        for (c, chunk) in entries.chunks(LOOKAHEAD).enumerate() {
            for (h, e) in hashes.iter_mut().zip(chunk) {
                *h = e.key.hash64();
                self.prefetch_slot(*h);
            }
            for (j, &hash) in hashes[..chunk.len()].iter().enumerate() {
                let mut i = self.home(hash);
                while self.slots[i] != 0 {
                    i = (i + 1) & self.mask;
                }
                self.put(i, hash, c * LOOKAHEAD + j);
            }
        }
    }
}

#[inline]
fn same_key(a: &BoardKey, b: &BoardKey) -> bool {
    let (a, b) = (&a.0, &b.0);
    ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
}

/// Asks Linux to back a big table with 2 MiB pages (`MADV_HUGEPAGE`; the
/// machine's default is often `madvise`): lookups in a table of gigabytes
/// then miss the TLB far less. A hint only; failure changes nothing.
fn advise_huge_pages<T>(data: *const T, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let bytes = len * std::mem::size_of::<T>();
        if bytes < 2 * HUGE {
            return;
        }
        let start = data as usize;
        let aligned = start.next_multiple_of(HUGE);
        let end = (start + bytes) / HUGE * HUGE;
        if end > aligned {
            // SAFETY: the range lies inside the allocation of `len` items at
            // `data` (the caller's vector and its capacity); madvise
            // with MADV_HUGEPAGE does not change its contents.
            unsafe {
                libc::madvise(
                    aligned as *mut libc::c_void,
                    end - aligned,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (data, len);
}

/// The distinct boards of one split.
struct BoardSet {
    /// Allocated once for a whole generation where the system allows (pages
    /// are only touched as entries arrive), so growing never copies.
    entries: Vec<Entry>,
    /// Entries the table may hold now (what the memory limit counts).
    capacity: usize,
    index: Index,
    dir: PathBuf,
    generations: u32,
    /// The partition files, open from the first spill to the last (each
    /// keeps its last partial disk block until then).
    files: Vec<Option<EntryWriter>>,
    /// Each entry's partition while spilling (reused).
    partitions: Vec<u8>,
    /// Buffer of each partition file: a shard of `n` writes `64 / n` of them.
    spill_buffer: usize,
    format: SpillFormat,
}

/// Keys hashed ahead in [`Index::rebuild`].
const LOOKAHEAD: usize = 16;
/// How far ahead of the key being inserted [`upsert`] prefetches its home
/// index slot, and the entry that slot points at: far enough for a memory
/// access to complete (a table of gigabytes misses every cache).
const SLOT_AHEAD: usize = 16;
const ENTRY_AHEAD: usize = 8;
const RING: usize = 32;
const _: () = assert!(RING > SLOT_AHEAD && SLOT_AHEAD > ENTRY_AHEAD);

/// Inserts `items` into a table in order: an item whose key is in it is
/// `merge`d into its entry, any other becomes `make(i, item)`; `hash(i,
/// item)` is item i's key's [`BoardKey::hash64`]. A software
/// pipeline: the home slot of item i + SLOT_AHEAD and the entry of item
/// i + ENTRY_AHEAD are prefetched while item i is looked up, across the
/// whole slice, so lookups overlap instead of each waiting on memory.
/// The caller made room for every item.
fn upsert<T>(
    index: &mut Index,
    entries: &mut Vec<Entry>,
    items: &[T],
    hash: impl Fn(usize, &T) -> u64,
    key: impl Fn(&T) -> &BoardKey,
    mut merge: impl FnMut(&mut Entry, &T),
    mut make: impl FnMut(usize, &T) -> Entry,
) {
    let n = items.len();
    let mut ring = [0u64; RING];
    let prefetch_entry = |index: &Index, entries: &[Entry], hash: u64| {
        let slot = index.slots[index.home(hash)];
        if slot != 0 {
            prefetch(entries.as_ptr().wrapping_add((slot as u32 - 1) as usize));
        }
    };
    for (i, item) in items.iter().enumerate().take(SLOT_AHEAD) {
        let hash = hash(i, item);
        ring[i % RING] = hash;
        index.prefetch_slot(hash);
    }
    for &hash in ring.iter().take(n.min(ENTRY_AHEAD)) {
        prefetch_entry(index, entries, hash);
    }
    for (i, item) in items.iter().enumerate() {
        if let Some(ahead) = items.get(i + SLOT_AHEAD) {
            let hash = hash(i + SLOT_AHEAD, ahead);
            ring[(i + SLOT_AHEAD) % RING] = hash;
            index.prefetch_slot(hash);
        }
        if i + ENTRY_AHEAD < n {
            prefetch_entry(index, entries, ring[(i + ENTRY_AHEAD) % RING]);
        }
        let hash = ring[i % RING];
        match index.find(hash, key(item), entries) {
            Ok(at) => merge(&mut entries[at], item),
            Err(slot) => {
                index.put(slot, hash, entries.len());
                entries.push(make(i, item));
            }
        }
    }
}

impl BoardSet {
    /// Room for `n` more entries without growing.
    fn room(&self) -> usize {
        (self.capacity.saturating_sub(self.entries.len()))
            .min((self.index.slots.len() / 2).saturating_sub(self.entries.len()))
    }

    /// Inserts `keys`, the occurrence of `keys[i]` being `firsts[i]`; the
    /// caller made room for all of them.
    fn insert_all(&mut self, keys: &[BoardKey], hashes: &[u64], firsts: &[u64]) {
        debug_assert_eq!(keys.len(), firsts.len());
        debug_assert_eq!(keys.len(), hashes.len());
        upsert(
            &mut self.index,
            &mut self.entries,
            keys,
            |i, _| hashes[i],
            |key| key,
            |entry, _| entry.count += 1,
            |i, key| Entry {
                key: *key,
                first: firsts[i],
                count: 1,
            },
        );
    }

    /// Bytes the table holds (entries and index slots).
    fn bytes(&self) -> u64 {
        self.capacity as u64 * ENTRY_SIZE + self.index.slots.len() as u64 * 8
    }

    /// Grows to `capacity` entries and `slots` index slots (a power of two,
    /// at least twice `capacity`). The first growth reserves address space
    /// for `generation` entries: a `Vec` that grows by reallocating copies
    /// its entries, and for a moment holds both copies.
    fn grow_to(&mut self, capacity: usize, slots: usize, generation: usize) {
        if self.entries.capacity() < capacity {
            let len = self.entries.len();
            if self
                .entries
                .try_reserve_exact(generation.max(capacity) - len)
                .is_err()
            {
                self.entries.reserve_exact(capacity - len);
            }
            advise_huge_pages(self.entries.as_ptr(), self.entries.capacity());
        }
        self.capacity = capacity;
        if slots > self.index.slots.len() {
            self.index
                .rebuild(slots, (2 * generation).next_power_of_two(), &self.entries);
        }
    }

    /// Writes every entry to its partition file, in order, and empties the
    /// table. Two threads write, each half the partitions.
    fn spill(&mut self) -> Result<(), IngestError> {
        fs::create_dir_all(&self.dir).map_err(|e| spill_err(&self.dir, e))?;
        if self.files.is_empty() {
            if self.generations > 0 {
                // A new file would truncate the partitions written so far.
                return Err(IngestError::Internal(format!(
                    "spilling boards to {} after its partition files were closed",
                    self.dir.display()
                )));
            }
            self.files = (0..PARTITIONS).map(|_| None).collect();
        }
        // Two threads, each writing half the partitions (the top partition
        // bit: each shard of up to 32 owns partitions in both halves): a
        // thread alone waits on the disk about half its spill time.
        // Each key hashed once, for both.
        self.partitions.clear();
        (self.partitions).extend(
            self.entries
                .iter()
                .map(|e| partition_of(e.key.hash64()) as u8),
        );
        let (low, high) = self.files.split_at_mut(PARTITIONS / 2);
        let (entries, partitions) = (&self.entries[..], &self.partitions[..]);
        let (dir, buffer, format) = (&self.dir, self.spill_buffer, self.format);
        std::thread::scope(|scope| {
            let upper = spawn_named(scope, "cb-spill", move || {
                write_partitions(
                    entries,
                    partitions,
                    high,
                    PARTITIONS / 2,
                    dir,
                    buffer,
                    format,
                )
            });
            let lower = write_partitions(entries, partitions, low, 0, dir, buffer, format);
            let upper = upper.join().unwrap_or_else(|_| {
                Err(IngestError::Internal("spill writer thread panicked".into()))
            });
            lower.and(upper)
        })?;
        self.entries.clear();
        self.index.slots.fill(0);
        self.generations += 1;
        Ok(())
    }

    /// Completes the partition files after the last spill.
    fn close(&mut self) -> Result<(), IngestError> {
        for file in self.files.drain(..).flatten() {
            file.finish()?;
        }
        Ok(())
    }

    fn release(&mut self) {
        self.entries = Vec::new();
        self.partitions = Vec::new();
        self.capacity = 0;
        self.index = Index::with_slots(16);
    }
}

/// Appends each of `entries` whose partition (`partitions[j]` for
/// `entries[j]`) is `first + i` to `files[i]` (created in `dir` with
/// `buffer` bytes of buffer when first needed), in order; other entries are
/// some other writer's.
fn write_partitions(
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

/// The biggest table with room for `need` entries and at most `want`,
/// within `allowed` bytes: (entry capacity, index slots), slots a power of
/// two at least twice the capacity (load factor <= 1/2). `None` when even
/// `need` entries do not fit.
fn table_shape(need: usize, want: usize, allowed: u64) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    let mut slots = (2 * want.max(need)).next_power_of_two().max(16);
    while slots / 2 >= need {
        let index = slots as u64 * 8;
        if index < allowed {
            let capacity = (((allowed - index) / ENTRY_SIZE).min(u64::MAX >> 1) as usize)
                .min(slots / 2)
                .min(want.max(need));
            if capacity >= need && best.is_none_or(|(c, _)| capacity > c) {
                best = Some((capacity, slots));
            }
        }
        if slots <= 16 {
            break;
        }
        slots /= 2;
    }
    best
}

/// The spill partition of a key's hash: its top [`PARTITION_BITS`] bits.
#[inline]
fn partition_of(hash: u64) -> usize {
    (hash >> (64 - PARTITION_BITS)) as usize
}

/// The share of the boards one [`Aggregator`] counts: the keys whose
/// partition is `index` modulo `of` (all of them when `of` is 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shard {
    pub index: usize,
    pub of: usize,
}

impl Shard {
    /// Most shards: a shard owns whole partitions.
    pub(crate) const MAX: usize = PARTITIONS;

    #[inline]
    fn owns(&self, hash: u64) -> bool {
        self.of == 1 || partition_of(hash) % self.of == self.index
    }
}

fn partition_path(dir: &Path, p: usize) -> PathBuf {
    dir.join(format!("partition-{p:02}.bin"))
}

/// Counts the distinct boards of every split.
pub(crate) struct Aggregator {
    sets: Vec<BoardSet>,
    /// Bytes the tables (entries and index slots, all splits) may hold
    /// while games stream in: this shard's share of the limit, at most
    /// [`STREAM_TABLE_BYTES`].
    table_bytes: u64,
    /// Entries this shard's share of the limit holds: the dedup phase's
    /// partitions ([`finish`]) get all of it.
    max_entries: usize,
    /// Which keys this aggregator counts.
    shard: Shard,
    /// First occurrences of the run being inserted (reused).
    firsts: Vec<u64>,
    /// The run's keys when only some of a batch's are this shard's (reused).
    keys: Keys,
}

/// One accepted game's boards inside a [`KeyBatch`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchGame {
    pub split: u8,
    pub game_no: u64,
    pub boards: u32,
}

/// Boards of consecutive accepted games, in game order.
#[derive(Debug, Default)]
pub(crate) struct KeyBatch {
    pub keys: Keys,
    pub games: Vec<BatchGame>,
}

/// Board keys with their [`BoardKey::hash64`], hashed once where the keys
/// are made (on the parsing threads): every dedup shard reads every key's
/// hash to find its own, and the table needs it again to insert.
#[derive(Debug, Default)]
pub struct Keys {
    keys: Vec<BoardKey>,
    hashes: Vec<u64>,
}

impl Keys {
    #[inline]
    pub(crate) fn push(&mut self, key: BoardKey) {
        self.hashes.push(key.hash64());
        self.keys.push(key);
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys, in the order pushed.
    pub fn keys(&self) -> &[BoardKey] {
        &self.keys
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        self.keys.truncate(len);
        self.hashes.truncate(len);
    }

    pub(crate) fn clear(&mut self) {
        self.truncate(0);
    }

    pub(crate) fn reserve(&mut self, n: usize) {
        self.keys.reserve(n);
        self.hashes.reserve(n);
    }

    /// Keys `range` with their hashes.
    fn slice(&self, range: std::ops::Range<usize>) -> Option<(&[BoardKey], &[u64])> {
        Some((self.keys.get(range.clone())?, self.hashes.get(range)?))
    }
}

impl Aggregator {
    /// `scratch` receives spill files (one directory per split).
    #[cfg(test)]
    pub(crate) fn new(splits: usize, memory_limit: u64, scratch: &Path) -> Aggregator {
        Aggregator::sharded(
            splits,
            memory_limit,
            scratch,
            1,
            SpillFormat::for_this_cpu(),
        )
        .remove(0)
    }

    /// `shards` aggregators (at most [`Shard::MAX`]) that count the boards
    /// together, each within an equal share of `memory_limit`, to be fed the
    /// same batches on their own threads and finished with [`finish`],
    /// spilling entries as `format` lays them out.
    pub(crate) fn sharded(
        splits: usize,
        memory_limit: u64,
        scratch: &Path,
        shards: usize,
        format: SpillFormat,
    ) -> Vec<Aggregator> {
        let shards = shards.clamp(1, Shard::MAX);
        let all_tables = table_bytes(memory_limit, splits);
        let buffer = spill_buffer(all_tables, splits);
        let table_bytes = all_tables / shards as u64;
        (0..shards)
            .map(|index| {
                let shard = Shard { index, of: shards };
                Aggregator::shard(splits, table_bytes, buffer, scratch, shard, format)
            })
            .collect()
    }

    fn shard(
        splits: usize,
        table_bytes: u64,
        spill_buffer: usize,
        scratch: &Path,
        shard: Shard,
        format: SpillFormat,
    ) -> Aggregator {
        let table_bytes = table_bytes.max(1024 * BYTES_PER_ENTRY);
        let max_entries = (table_bytes / BYTES_PER_ENTRY).clamp(1024, u64::from(u32::MAX - 1));
        Aggregator {
            sets: (0..splits)
                .map(|s| BoardSet {
                    entries: Vec::new(),
                    capacity: 0,
                    index: Index::with_slots(16),
                    dir: scratch.join(format!("split-{s}")),
                    generations: 0,
                    files: Vec::new(),
                    partitions: Vec::new(),
                    spill_buffer,
                    format,
                })
                .collect(),
            table_bytes: table_bytes.min(STREAM_TABLE_BYTES),
            max_entries: max_entries as usize,
            shard,
            firsts: Vec::new(),
            keys: Keys::default(),
        }
    }

    /// Entries the tables hold while games stream in (a generation).
    fn stream_entries(&self) -> usize {
        (self.table_bytes / BYTES_PER_ENTRY) as usize
    }

    /// Makes room in split `s` for `n` more entries (n <= half a
    /// generation, [`Aggregator::stream_entries`]),
    /// spilling the biggest split when the memory limit is reached.
    fn make_room(&mut self, s: usize, n: usize) -> Result<(), IngestError> {
        let generation = self.stream_entries();
        loop {
            if self.sets[s].room() >= n {
                return Ok(());
            }
            let others: u64 = (self.sets.iter().enumerate())
                .filter(|&(i, _)| i != s)
                .map(|(_, set)| set.bytes())
                .sum();
            let set = &self.sets[s];
            let need = set.entries.len() + n;
            let want = need.max(2 * set.capacity).max(4096);
            let allowed = self.table_bytes.saturating_sub(others);
            if let Some((capacity, slots)) = table_shape(need, want, allowed) {
                self.sets[s].grow_to(capacity, slots, generation);
                continue;
            }
            // Out of memory: spill the biggest set (possibly this one).
            let victim = (0..self.sets.len())
                .max_by_key(|&i| self.sets[i].entries.len())
                .unwrap_or(s);
            if self.sets[victim].entries.is_empty() {
                // Nothing left to spill: free what empty sets still hold.
                for (i, set) in self.sets.iter_mut().enumerate() {
                    if i != s {
                        set.release();
                    }
                }
                if generation < need {
                    return Err(IngestError::Internal(format!(
                        "{n} boards do not fit in a generation of {generation}"
                    )));
                }
                let (capacity, slots) = table_shape(need, need, u64::MAX).ok_or_else(|| {
                    IngestError::Internal(format!("no table holds {need} boards"))
                })?;
                self.sets[s].grow_to(capacity, slots, generation);
                continue;
            }
            self.sets[victim].spill()?;
            if victim != s {
                self.sets[victim].release();
            }
        }
    }

    /// Adds the boards of a batch of games (this shard's share of them).
    /// Consecutive games of one split go in as one run (a pipelined insert
    /// is fastest on long runs).
    pub(crate) fn add(&mut self, batch: &KeyBatch) -> Result<(), IngestError> {
        // Runs of at most half a generation.
        let piece = self.stream_entries() / 2;
        let mut firsts = std::mem::take(&mut self.firsts);
        let mut keys = std::mem::take(&mut self.keys);
        firsts.clear();
        keys.clear();
        // The run being gathered: its split and, for a shard that owns every
        // key, where it starts in the batch (the run is then a slice of it).
        let (mut run_split, mut run_start, mut at) = (0usize, 0usize, 0usize);
        for game in &batch.games {
            let s = usize::from(game.split);
            let n = game.boards as usize;
            let Some((game_keys, game_hashes)) = batch.keys.slice(at..at + n) else {
                return Err(IngestError::Internal(
                    "key batch holds fewer boards than its games".into(),
                ));
            };
            if !firsts.is_empty() && (s != run_split || firsts.len() + n > piece) {
                self.insert_run(run_split, &batch.keys, run_start..at, &keys, &firsts)?;
                firsts.clear();
                keys.clear();
            }
            if firsts.is_empty() {
                (run_split, run_start) = (s, at);
            }
            let first = first_seen(game.game_no, 0);
            if n > piece {
                // A game longer than half a streaming table goes in pieces.
                for p in 0..n.div_ceil(piece) {
                    let range = p * piece..n.min((p + 1) * piece);
                    let ply = first + range.start as u64;
                    let (chunk, hashes) = (&game_keys[range.clone()], &game_hashes[range.clone()]);
                    self.take_keys(chunk, hashes, ply, &mut keys, &mut firsts);
                    let range = at + range.start..at + range.end;
                    self.insert_run(s, &batch.keys, range, &keys, &firsts)?;
                    firsts.clear();
                    keys.clear();
                }
            } else {
                self.take_keys(game_keys, game_hashes, first, &mut keys, &mut firsts);
            }
            at += n;
        }
        if !firsts.is_empty() {
            self.insert_run(run_split, &batch.keys, run_start..at, &keys, &firsts)?;
        }
        self.firsts = firsts;
        self.keys = keys;
        Ok(())
    }

    /// Appends this shard's keys of `game_keys` (consecutive boards, the
    /// first seen at `first`) to the run: their first occurrences to
    /// `firsts`, and the keys themselves to `keys` unless this shard owns
    /// every key (the run is then a slice of the batch).
    #[inline]
    fn take_keys(
        &self,
        game_keys: &[BoardKey],
        hashes: &[u64],
        first: u64,
        keys: &mut Keys,
        firsts: &mut Vec<u64>,
    ) {
        if self.shard.of == 1 {
            firsts.extend((0..game_keys.len() as u64).map(|j| first + j));
            return;
        }
        for (j, (key, &hash)) in game_keys.iter().zip(hashes).enumerate() {
            if self.shard.owns(hash) {
                keys.keys.push(*key);
                keys.hashes.push(hash);
                firsts.push(first + j as u64);
            }
        }
    }

    /// Inserts a run into split `s`: `batch`'s keys `range` when this shard
    /// owns every key, else the keys [`Aggregator::take_keys`] gathered.
    fn insert_run(
        &mut self,
        s: usize,
        batch: &Keys,
        range: std::ops::Range<usize>,
        taken: &Keys,
        firsts: &[u64],
    ) -> Result<(), IngestError> {
        let (keys, hashes) = if self.shard.of == 1 {
            batch.slice(range).ok_or_else(|| {
                IngestError::Internal("key batch holds fewer boards than its games".into())
            })?
        } else {
            (&taken.keys[..], &taken.hashes[..])
        };
        self.make_room(s, keys.len())?;
        self.sets[s].insert_all(keys, hashes, firsts);
        Ok(())
    }

    /// Whether any split spilled to disk.
    pub(crate) fn spilled(&self) -> bool {
        self.sets.iter().any(|s| s.generations > 0)
    }

    #[cfg(test)]
    fn finish(self, threads: usize) -> Result<Vec<SplitBoards>, IngestError> {
        finish(vec![self], threads)
    }
}

/// The distinct boards of each split, in order of first occurrence, from
/// the shards that counted them ([`Aggregator::sharded`]). A split that
/// any shard spilled is spilled by all of them, and its partitions are
/// deduplicated by `threads` threads at once, or twice as many
/// ([`dedup_workers`]), each within its share of the memory limit; a split
/// that stayed in memory is the merge of the shards' tables by first
/// occurrence.
pub(crate) fn finish(
    shards: Vec<Aggregator>,
    threads: usize,
) -> Result<Vec<SplitBoards>, IngestError> {
    let threads = threads.max(1);
    let max_entries: usize = shards.iter().map(|a| a.max_entries).sum();
    let splits = shards.first().map_or(0, |a| a.sets.len());
    // Every shard of one ingest spills in the format `sharded` gave them all.
    let format =
        (shards.first().and_then(|a| a.sets.first())).map_or(SpillFormat::Plain, |s| s.format);
    let mut by_split: Vec<Vec<BoardSet>> = (0..splits).map(|_| Vec::new()).collect();
    for aggregator in shards {
        for (s, set) in aggregator.sets.into_iter().enumerate() {
            by_split[s].push(set);
        }
    }
    let mut in_memory = Vec::with_capacity(splits);
    let mut jobs: Vec<(usize, PathBuf)> = Vec::new();
    for (s, sets) in by_split.into_iter().enumerate() {
        if sets.iter().all(|set| set.generations == 0) {
            in_memory.push(Some(sets.into_iter().map(|set| set.entries).collect()));
            continue;
        }
        let dir = sets[0].dir.clone();
        for mut set in sets {
            set.spill()?;
            set.close()?;
            set.release();
        }
        in_memory.push(None);
        for p in 0..PARTITIONS {
            let path = partition_path(&dir, p);
            if path.exists() {
                jobs.push((s, path));
            }
        }
    }
    let paths: Vec<&Path> = jobs.iter().map(|(_, p)| p.as_path()).collect();
    let workers = dedup_workers(&paths, max_entries, threads, format)?;
    let per_thread = (max_entries / workers).max(1024);
    let mut runs = dedup_partitions(&paths, per_thread, workers, format)?.into_iter();
    let mut out = Vec::with_capacity(in_memory.len());
    for (s, tables) in in_memory.into_iter().enumerate() {
        out.push(match tables {
            Some(tables) => SplitBoards::Memory(tables),
            None => {
                let n = jobs.iter().filter(|(js, _)| *js == s).count();
                SplitBoards::Runs {
                    paths: runs.by_ref().take(n).collect(),
                    buffer: run_buffer(max_entries as u64 * BYTES_PER_ENTRY, n),
                    format,
                }
            }
        });
    }
    Ok(out)
}

/// Threads deduplicating the partition files `paths`, for `threads`
/// threads' worth of CPU: twice as many when each one's share of the
/// tables' `max_entries` still holds the biggest partition in one pass
/// beside its file buffers ([`DEDUP_THREAD_IO`]), since a thread waits on
/// the disk about half the time (reading its partition, writing its run:
/// 46% I/O wait with one thread a core at 10^6 generated games); as many
/// otherwise, where more threads would split partitions that fit now,
/// reading and writing them twice more, or hold more buffers than the
/// limit has room for.
fn dedup_workers(
    paths: &[&Path],
    max_entries: usize,
    threads: usize,
    format: SpillFormat,
) -> Result<usize, IngestError> {
    let mut biggest = 0;
    for path in paths {
        let len = fs::metadata(path).map_err(|e| spill_err(path, e))?.len();
        biggest = biggest.max(len as usize / format.entry_bytes());
    }
    let doubled = threads.max(1).saturating_mul(2);
    let buffers = (DEDUP_THREAD_IO / BYTES_PER_ENTRY) as usize;
    let share = (max_entries / doubled).saturating_sub(buffers);
    Ok(if fits_in_memory(biggest, share) {
        doubled
    } else {
        threads
    })
}

/// File buffers of a thread deduplicating a partition in one pass: its
/// partition's read buffer (1 MiB) and batch (4,096 entries, bytes and
/// decoded), and its run's write buffer (1 MiB). Counted against the
/// thread's share of the tables only when the threads are doubled
/// ([`dedup_workers`]).
const DEDUP_THREAD_IO: u64 = 3 << 20;

/// Runs [`dedup_partition`] on every path, `threads` at a time; the runs
/// come back in the order of `paths`. The first failure stops the others
/// from taking new partitions and is returned.
fn dedup_partitions(
    paths: &[&Path],
    max_entries: usize,
    threads: usize,
    format: SpillFormat,
) -> Result<Vec<PathBuf>, IngestError> {
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Result<PathBuf, IngestError>>>> =
        paths.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(paths.len()))
            .map(|_| {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = paths.get(i) else { break };
                        let result = dedup_partition(path, PARTITION_BITS, max_entries, format);
                        let failed = result.is_err();
                        if let Ok(mut slot) = results[i].lock() {
                            *slot = Some(result);
                        }
                        if failed {
                            next.store(paths.len(), Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            if w.join().is_err() {
                next.store(paths.len(), Ordering::Relaxed);
            }
        }
    });
    let results: Vec<Option<Result<PathBuf, IngestError>>> = results
        .into_iter()
        .map(|slot| slot.into_inner().ok().flatten())
        .collect();
    let mut runs = Vec::with_capacity(paths.len());
    for (result, path) in results.into_iter().zip(paths) {
        match result {
            Some(run) => runs.push(run?),
            None => {
                return Err(IngestError::Internal(format!(
                    "a thread deduplicating spilled boards panicked (at {})",
                    path.display()
                )));
            }
        }
    }
    Ok(runs)
}

/// How an [`EntryReader`] reads its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadMode {
    /// Through the page cache, in a buffer of this many bytes, the page
    /// cache's readahead overlapping the disk with the reader's work: the
    /// dedup phase, whose threads each read one partition and work on it.
    Cached(usize),
    /// Around it ([`DirectReader`]), in reads of this many bytes: the merge
    /// of the run files while the boards are written, where reading through
    /// the page cache cost ~7% of ingest's CPU in the kernel (10^6 games:
    /// system time 16.6 -> 8.1 s) and the reading thread is not the one the
    /// others wait on. Each run is read once there, so what was read is
    /// given back to the file system as the merge goes
    /// ([`DirectReader::open_once`]).
    Direct(usize),
}

/// The read buffer of each run file in a merge (a split's, or a recursive
/// split's in the dedup phase): 1 MiB, whole reads the disk streams well,
/// unless the memory limit is small: the runs share an eighth of the
/// tables' memory (`table_bytes`), at least 64 KiB each.
fn run_buffer(table_bytes: u64, runs: usize) -> usize {
    buffer_share(table_bytes, runs, 1 << 20)
}

/// An [`EntryReader`]'s file, opened as its [`ReadMode`] says (an enum
/// rather than a `dyn Read`: the run merge reads a few entries at a time).
enum Source {
    Cached(BufReader<File>),
    Direct(DirectReader),
}

impl Read for Source {
    #[inline]
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Cached(r) => r.read(out),
            Source::Direct(r) => r.read(out),
        }
    }
}

/// Reads entries from a spill or run file.
struct EntryReader {
    reader: Source,
    path: PathBuf,
    format: SpillFormat,
    /// Bytes of the file read so far (where errors say they are).
    offset: u64,
}

impl EntryReader {
    fn open(path: &Path, mode: ReadMode, format: SpillFormat) -> Result<EntryReader, IngestError> {
        let reader = match mode {
            ReadMode::Cached(buffer) => Source::Cached(BufReader::with_capacity(
                buffer,
                File::open(path).map_err(|e| spill_err(path, e))?,
            )),
            ReadMode::Direct(buffer) => Source::Direct(
                DirectReader::open_once(path, buffer).map_err(|e| spill_err(path, e))?,
            ),
        };
        Ok(EntryReader {
            reader,
            path: path.to_owned(),
            format,
            offset: 0,
        })
    }

    /// Replaces `out` with the next entries, as many as `buf` holds (a
    /// multiple of the format's entry size); empty at the end of the file.
    fn next_batch(&mut self, buf: &mut [u8], out: &mut Vec<Entry>) -> Result<(), IngestError> {
        out.clear();
        let mut filled = 0;
        while filled < buf.len() {
            match self.reader.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(spill_err(&self.path, e)),
            }
        }
        let size = self.format.entry_bytes();
        if filled % size != 0 {
            return Err(spill_err(
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("spill file ends inside an entry ({size} bytes each)"),
                ),
            ));
        }
        let format = self.format;
        for bytes in buf[..filled].chunks_exact(size) {
            let Some(entry) = format.read(bytes) else {
                let at = self.offset + (out.len() * size) as u64;
                return Err(spill_err(
                    &self.path,
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "bytes {at}..{} are not a board ingest writes ({format:?} format, \
                             {size} bytes an entry): the file is corrupt",
                            at + size as u64
                        ),
                    ),
                ));
            };
            out.push(entry);
        }
        self.offset += filled as u64;
        Ok(())
    }
}

/// Entries appended to a new spill or run file in one [`SpillFormat`];
/// errors name the file.
struct EntryWriter {
    file: DirectWriter,
    path: PathBuf,
    format: SpillFormat,
    /// One entry's bytes (reused).
    bytes: Vec<u8>,
}

impl EntryWriter {
    /// Creates (or truncates) `path`, with a buffer of about `buffer` bytes.
    fn create(path: &Path, buffer: usize, format: SpillFormat) -> Result<EntryWriter, IngestError> {
        Ok(EntryWriter {
            file: DirectWriter::create(path, buffer).map_err(|e| spill_err(path, e))?,
            path: path.to_owned(),
            format,
            bytes: Vec::with_capacity(format.entry_bytes()),
        })
    }

    #[inline]
    fn push(&mut self, e: &Entry) -> Result<(), IngestError> {
        self.bytes.clear();
        self.format.write(e, &mut self.bytes)?;
        (self.file.write_all(&self.bytes)).map_err(|err| spill_err(&self.path, err))
    }

    /// Writes the rest and closes the file.
    fn finish(self) -> Result<(), IngestError> {
        self.file.finish().map_err(|e| spill_err(&self.path, e))
    }
}

fn write_entries(path: &Path, entries: &[Entry], format: SpillFormat) -> Result<(), IngestError> {
    let mut w = EntryWriter::create(path, 1 << 20, format)?;
    for e in entries {
        w.push(e)?;
    }
    w.finish()
}

/// The distinct entries of a partition file (ordered by first occurrence
/// across generations) with their counts summed, in the same order: the
/// earliest generation's entry keeps its first occurrence. Lookups are
/// pipelined by [`upsert`] (a partition is far bigger than the caches).
fn dedup_in_memory(
    path: &Path,
    len: usize,
    slots: usize,
    format: SpillFormat,
) -> Result<Vec<Entry>, IngestError> {
    let mut entries: Vec<Entry> = Vec::with_capacity(len);
    let mut index = Index::with_slots(slots);
    let mut reader = EntryReader::open(path, ReadMode::Cached(1 << 20), format)?;
    let mut buf = vec![0u8; format.entry_bytes() * 4096];
    let mut batch = Vec::with_capacity(4096);
    loop {
        reader.next_batch(&mut buf, &mut batch)?;
        if batch.is_empty() {
            return Ok(entries);
        }
        upsert(
            &mut index,
            &mut entries,
            &batch,
            |_, e| e.key.hash64(),
            |e| &e.key,
            |entry, e| entry.count += e.count,
            |_, e| *e,
        );
    }
}

/// The write buffer of each piece of a partition being split (written
/// with `O_DIRECT` when full): the pieces' buffers together take at most a
/// thread's table memory ([`split_bits`]), which is free while it splits.
const SPLIT_BUFFER: usize = 64 << 10;
/// The most pieces a partition is split into at once: each is an open
/// file, on every dedup thread, and then a run read by the merge.
const MOST_SPLIT_WAYS: u64 = 256;

/// The index slots of a partition of `len` entries: load factor <= 1/2.
fn index_slots(len: usize) -> usize {
    (2 * len).next_power_of_two().max(16)
}

/// Whether a partition of `len` entries and its index fit the share of the
/// limit that `max_entries` entries were given.
fn fits_in_memory(len: usize, max_entries: usize) -> bool {
    len as u64 * ENTRY_SIZE + index_slots(len) as u64 * 8 <= max_entries as u64 * BYTES_PER_ENTRY
}

/// The hash bits by which to split a partition of `len` entries that does
/// not fit the table memory of `max_entries` entries: enough that each
/// piece fits in one more pass (entries and an index at load factor 1/4,
/// an eighth to spare for the hash's unevenness), as far as the pieces'
/// write buffers fit that memory ([`SPLIT_BUFFER`] each, at least two
/// pieces, at most [`MOST_SPLIT_WAYS`]). A piece still too big is split
/// again. At 10^7 generated games under 232MiB a partition is ~90x a
/// thread's tables: a fixed 64-way split left pieces just too big, split
/// again 64 ways, reading and writing every entry twice more.
fn split_bits(len: usize, max_entries: usize) -> u32 {
    let tables = (max_entries as u64 * BYTES_PER_ENTRY).max(1);
    let need = (len as u64 * (ENTRY_SIZE + 32)).div_ceil(tables);
    let need = need + need / 8;
    // Rounded up: a share of whole entries falls a few bytes short.
    let most = tables
        .div_ceil(SPLIT_BUFFER as u64)
        .clamp(2, MOST_SPLIT_WAYS);
    let most = 1u64 << most.ilog2();
    need.next_power_of_two().clamp(2, most).ilog2()
}

/// Deduplicates one partition file into a run file ordered by first
/// occurrence; splits it by further hash bits when it exceeds the memory
/// limit, into as many pieces as one more pass needs ([`split_bits`]).
/// Returns the run's path and removes the partition file.
fn dedup_partition(
    path: &Path,
    bits_used: u32,
    max_entries: usize,
    format: SpillFormat,
) -> Result<PathBuf, IngestError> {
    let size = format.entry_bytes();
    let len = fs::metadata(path).map_err(|e| spill_err(path, e))?.len() as usize / size;
    let run = path.with_extension("run");
    let bits = split_bits(len, max_entries).min(64 - bits_used);
    if fits_in_memory(len, max_entries) || bits == 0 {
        let entries = dedup_in_memory(path, len, index_slots(len), format)?;
        write_entries(&run, &entries, format)?;
    } else {
        // Too big for memory: split by the next hash bits, keeping order.
        let dir = path.with_extension("split");
        fs::create_dir_all(&dir).map_err(|e| spill_err(&dir, e))?;
        let mut writers: Vec<Option<DirectWriter>> = (0..1usize << bits).map(|_| None).collect();
        let mut reader = EntryReader::open(path, ReadMode::Cached(1 << 20), format)?;
        let (mut block, mut batch) = (vec![0u8; size * 1024], Vec::with_capacity(1024));
        loop {
            reader.next_batch(&mut block, &mut batch)?;
            if batch.is_empty() {
                break;
            }
            // Each entry goes on as the bytes it was read from.
            let bytes = block[..batch.len() * size].chunks_exact(size);
            for (e, bytes) in batch.iter().zip(bytes) {
                let p = ((e.key.hash64() << bits_used) >> (64 - bits)) as usize;
                let w = match &mut writers[p] {
                    Some(w) => w,
                    slot @ None => {
                        let sub = partition_path(&dir, p);
                        slot.insert(
                            DirectWriter::create(&sub, SPLIT_BUFFER)
                                .map_err(|err| spill_err(&sub, err))?,
                        )
                    }
                };
                w.write_all(bytes)
                    .map_err(|err| spill_err(&partition_path(&dir, p), err))?;
            }
        }
        drop(reader);
        // Every piece is closed, its buffer freed, before any is counted.
        let mut pieces = Vec::new();
        for (p, w) in writers.into_iter().enumerate() {
            if let Some(w) = w {
                let sub = partition_path(&dir, p);
                w.finish().map_err(|e| spill_err(&sub, e))?;
                pieces.push(sub);
            }
        }
        let runs = pieces
            .iter()
            .map(|sub| dedup_partition(sub, bits_used + bits, max_entries, format))
            .collect::<Result<Vec<_>, _>>()?;
        // Up to MOST_SPLIT_WAYS sub-runs at once: their buffers share this
        // thread's table memory, which is free again (1 MiB each took
        // ~31 MB a thread at 10^6 games under 64MiB, beyond the budget).
        let buffer = run_buffer(max_entries as u64 * BYTES_PER_ENTRY, runs.len());
        let mut merged = MergeRuns::new(&runs, ReadMode::Cached(buffer), format)?;
        let mut w = EntryWriter::create(&run, 1 << 20, format)?;
        while let Some(e) = merged.next().transpose()? {
            w.push(&e)?;
        }
        w.finish()?;
        drop(merged);
        let _ = fs::remove_dir_all(&dir);
    }
    fs::remove_file(path).map_err(|e| spill_err(path, e))?;
    Ok(run)
}

/// Entries a merge decodes at a time from each run (3.5 KiB a run, beside
/// the run's read buffer).
const MERGE_BATCH: usize = 64;

/// K-way merge of run files by first occurrence.
pub(crate) struct MergeRuns {
    runs: Vec<RunCursor>,
    /// (first occurrence of the run's next entry, run), least on top.
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    /// Bytes of one batch, shared by the runs (one refills at a time).
    bytes: Vec<u8>,
}

/// A run's decoded entries not yet merged.
struct RunCursor {
    reader: EntryReader,
    batch: Vec<Entry>,
    at: usize,
}

impl MergeRuns {
    fn new(
        paths: &[PathBuf],
        mode: ReadMode,
        format: SpillFormat,
    ) -> Result<MergeRuns, IngestError> {
        let mut bytes = vec![0u8; MERGE_BATCH * format.entry_bytes()];
        let mut runs = Vec::with_capacity(paths.len());
        let mut heads = BinaryHeap::with_capacity(paths.len());
        for (i, path) in paths.iter().enumerate() {
            let mut reader = EntryReader::open(path, mode, format)?;
            let mut batch = Vec::with_capacity(MERGE_BATCH);
            reader.next_batch(&mut bytes, &mut batch)?;
            if let Some(e) = batch.first() {
                heads.push(Reverse((e.first, i)));
            }
            runs.push(RunCursor {
                reader,
                batch,
                at: 0,
            });
        }
        Ok(MergeRuns { runs, heads, bytes })
    }
}

impl Iterator for MergeRuns {
    type Item = Result<Entry, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        // The least head is replaced in place by its run's next entry (one
        // sift instead of a pop and a push), or popped at the run's end.
        let mut top = self.heads.peek_mut()?;
        let Reverse((_, i)) = *top;
        let run = &mut self.runs[i];
        let entry = run.batch[run.at];
        run.at += 1;
        if run.at == run.batch.len() {
            if let Err(e) = run.reader.next_batch(&mut self.bytes, &mut run.batch) {
                // The run ends here (its entry is lost with the error).
                PeekMut::pop(top);
                return Some(Err(e));
            }
            run.at = 0;
        }
        match run.batch.get(run.at) {
            Some(next) => *top = Reverse((next.first, i)),
            None => {
                PeekMut::pop(top);
            }
        }
        Some(Ok(entry))
    }
}

/// Merge by first occurrence of the shards' in-memory tables (each in
/// that order already; a handful of them, so a linear scan for the least).
pub(crate) struct MemoryMerge {
    tables: Vec<std::iter::Peekable<std::vec::IntoIter<Entry>>>,
}

impl MemoryMerge {
    fn new(tables: Vec<Vec<Entry>>) -> MemoryMerge {
        MemoryMerge {
            tables: tables
                .into_iter()
                .map(|t| t.into_iter().peekable())
                .collect(),
        }
    }
}

impl Iterator for MemoryMerge {
    type Item = Entry;

    #[inline]
    fn next(&mut self) -> Option<Entry> {
        if let [only] = self.tables.as_mut_slice() {
            return only.next();
        }
        let mut least: Option<(u64, usize)> = None;
        for (i, table) in self.tables.iter_mut().enumerate() {
            if let Some(e) = table.peek()
                && least.is_none_or(|(first, _)| e.first < first)
            {
                least = Some((e.first, i));
            }
        }
        self.tables[least?.1].next()
    }
}

/// A split's distinct boards, deduplicated, before they are read: the
/// shards' tables, or run files. Run files are opened only when their split
/// is written ([`SplitBoards::open`]), so the read buffers of one split's
/// runs are in memory at a time.
pub(crate) enum SplitBoards {
    Memory(Vec<Vec<Entry>>),
    /// Run files, each read `buffer` bytes at a time ([`run_buffer`]).
    Runs {
        paths: Vec<PathBuf>,
        buffer: usize,
        format: SpillFormat,
    },
}

impl SplitBoards {
    /// The boards in order of first occurrence.
    pub(crate) fn open(self) -> Result<BoardStream, IngestError> {
        Ok(match self {
            SplitBoards::Memory(tables) => BoardStream::Memory(MemoryMerge::new(tables)),
            SplitBoards::Runs {
                paths,
                buffer,
                format,
            } => BoardStream::Merged(MergeRuns::new(&paths, ReadMode::Direct(buffer), format)?),
        })
    }
}

/// A split's distinct boards, in order of first occurrence.
pub(crate) enum BoardStream {
    Memory(MemoryMerge),
    Merged(MergeRuns),
}

impl Iterator for BoardStream {
    type Item = Result<Entry, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            BoardStream::Memory(it) => it.next().map(Ok),
            BoardStream::Merged(m) => m.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shakmaty::{Chess, Position};

    /// Boards of a few pseudo-random games with many repeated positions.
    fn batch(games: u64) -> KeyBatch {
        let mut batch = KeyBatch::default();
        for g in 0..games {
            let mut pos = Chess::default();
            let mut n = 1;
            batch.keys.push(BoardKey::from_position(&pos).unwrap());
            for ply in 0..(10 + g % 30) {
                let moves = pos.legal_moves();
                if moves.is_empty() {
                    break;
                }
                let m = moves[((g * 7 + ply * 13) % moves.len() as u64) as usize];
                pos.play_unchecked(m);
                batch.keys.push(BoardKey::from_position(&pos).unwrap());
                n += 1;
            }
            batch.games.push(BatchGame {
                split: (g % 2) as u8,
                game_no: g * 3,
                boards: n,
            });
        }
        batch
    }

    /// The boards of `b` counted by one aggregator with room for all.
    fn in_memory(dir: &Path, b: &KeyBatch) -> Vec<Vec<Entry>> {
        let mut one = Aggregator::new(2, 1 << 30, dir);
        one.add(b).unwrap();
        assert!(!one.spilled());
        collect(one)
    }

    fn collect(agg: Aggregator) -> Vec<Vec<Entry>> {
        agg.finish(3)
            .unwrap()
            .into_iter()
            .map(|s| s.open().unwrap().collect::<Result<Vec<_>, _>>().unwrap())
            .collect()
    }

    #[test]
    fn the_tables_get_what_the_limit_leaves_beside_the_floor() {
        const MIB: u64 = 1 << 20;
        // The default limit: the limit less the reserve, as before.
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

    #[test]
    fn a_partition_too_big_is_split_so_that_its_pieces_fit() {
        const MIB: u64 = 1 << 20;
        let entries = |tables: u64| (tables / BYTES_PER_ENTRY) as usize;
        // Where the pieces' buffers allow it, every piece of the expected
        // size, and 5% more, fits in one pass.
        for tables in [8 * MIB, 20 * MIB, 64 * MIB] {
            for len in [entries(tables) + 1, 470_000, 2_000_000, 10_000_000] {
                let ways = 1usize << split_bits(len, entries(tables));
                let piece = len.div_ceil(ways) * 21 / 20;
                let fits = fits_in_memory(piece, entries(tables));
                let capped = ways as u64 * SPLIT_BUFFER as u64 >= tables.min(MOST_SPLIT_WAYS << 16);
                assert!(
                    fits || capped,
                    "{len} entries in {tables} bytes: {ways} ways"
                );
                assert!(ways >= 2);
            }
        }
        // 10^6 generated games under 232MiB (8 MiB of tables a thread):
        // partitions of ~470,000 entries, 8 pieces (64 before).
        assert_eq!(split_bits(470_000, entries(8 * MIB)), 3);
        // 10^7: ~10^7 entries, 128 pieces, all the buffers the tables allow
        // (two 64-way passes before).
        assert_eq!(split_bits(10_000_000, entries(8 * MIB)), 7);
        // Tiny tables still halve; large ones open at most 256 files.
        assert_eq!(split_bits(2_000, 1024), 1);
        assert_eq!(split_bits(usize::MAX / 128, entries(1 << 30)), 8);
    }

    #[test]
    fn the_dedup_phase_doubles_its_threads_only_when_partitions_still_fit() {
        let tmp = tempfile::tempdir().unwrap();
        let format = SpillFormat::Packed;
        let partition = |name: &str, entries: usize| {
            let path = tmp.path().join(name);
            let f = File::create(&path).unwrap();
            f.set_len((entries * format.entry_bytes()) as u64).unwrap();
            path
        };
        // 10^6 generated games under 2 GiB: ~0.9M entries a partition,
        // ~24M entries of tables over two cores.
        let small = partition("a", 900_000);
        let paths = [small.as_path()];
        assert_eq!(dedup_workers(&paths, 24_000_000, 2, format).unwrap(), 4);
        // 10^7: ~8.3M a partition, which a quarter of the tables would not
        // hold in one pass (half of them does).
        let big = partition("b", 8_300_000);
        let paths = [small.as_path(), big.as_path()];
        assert_eq!(dedup_workers(&paths, 24_000_000, 2, format).unwrap(), 2);
        // Tiny partitions but a small limit on many cores: 32 threads'
        // file buffers (3 MiB each) would not fit ~14 MB of tables.
        let tiny = partition("c", 1_000);
        let paths = [tiny.as_path()];
        assert_eq!(dedup_workers(&paths, 200_000, 16, format).unwrap(), 16);
        assert_eq!(dedup_workers(&paths, 24_000_000, 16, format).unwrap(), 32);
        let gone = tmp.path().join("gone");
        let err = dedup_workers(&[gone.as_path()], 1 << 20, 2, format).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }

    #[test]
    fn a_spill_file_cut_inside_an_entry_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("partition-07.bin");
        let entry = Entry {
            key: BoardKey::from_position(&shakmaty::Chess::default()).unwrap(),
            first: 3,
            count: 2,
        };
        let modes = [ReadMode::Cached(64 << 10), ReadMode::Direct(64 << 10)];
        let formats = [SpillFormat::Plain, SpillFormat::Packed];
        for (mode, format) in modes.into_iter().flat_map(|m| formats.map(|f| (m, f))) {
            let size = format.entry_bytes();
            let mut bytes = Vec::new();
            format.write(&entry, &mut bytes).unwrap();
            format.write(&entry, &mut bytes).unwrap();
            assert_eq!(bytes.len(), 2 * size);
            bytes.truncate(size + 5);
            fs::write(&path, &bytes).unwrap();
            let mut reader = EntryReader::open(&path, mode, format).unwrap();
            let (mut buf, mut out) = (vec![0u8; size * 4], Vec::new());
            let err = reader
                .next_batch(&mut buf, &mut out)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("partition-07.bin") && err.contains("inside an entry"),
                "{mode:?}: {err}"
            );
            // Whole entries read back as written, then the end.
            bytes.truncate(size);
            fs::write(&path, &bytes).unwrap();
            let mut reader = EntryReader::open(&path, mode, format).unwrap();
            reader.next_batch(&mut buf, &mut out).unwrap();
            assert_eq!(out, vec![entry], "{mode:?}");
            reader.next_batch(&mut buf, &mut out).unwrap();
            assert!(out.is_empty(), "{mode:?}");
        }
    }

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
        let err = env("Packed").unwrap_err().to_string();
        assert!(
            err.contains("CHESSBENCH_SPILL_FORMAT") && err.contains("\"plain\" or \"packed\""),
            "{err}"
        );
    }

    #[test]
    fn corrupt_spill_files_are_errors_naming_the_file_and_the_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let start = BoardKey::from_position(&Chess::default()).unwrap();
        let good = Entry {
            key: start,
            first: first_seen(3, 4),
            count: 2,
        };
        for format in [SpillFormat::Plain, SpillFormat::Packed] {
            let size = format.entry_bytes();
            let mut bytes = Vec::new();
            for _ in 0..3 {
                format.write(&good, &mut bytes).unwrap();
            }
            // The second entry zeroed (a hole), or, packed, crowded with a
            // 33rd occupied square.
            let mut corrupt = vec![bytes.clone()];
            corrupt[0][size..2 * size].fill(0);
            if format == SpillFormat::Packed {
                let mut crowded = bytes.clone();
                crowded[size + 3] |= 1 << 4;
                corrupt.push(crowded);
            }
            for (i, file) in corrupt.iter().enumerate() {
                let path = tmp.path().join(format!("{format:?}-{i}.bin"));
                fs::write(&path, file).unwrap();
                let mut reader = EntryReader::open(&path, ReadMode::Cached(4096), format).unwrap();
                let mut buf = vec![0u8; size * 8];
                let err = reader
                    .next_batch(&mut buf, &mut Vec::new())
                    .unwrap_err()
                    .to_string();
                assert!(err.contains(&path.display().to_string()), "{err}");
                assert!(
                    err.contains(&format!("bytes {size}..{}", 2 * size)),
                    "{err}"
                );
                assert!(err.contains("corrupt"), "{err}");
            }
            // Read an entry at a time, the offset still counts from the
            // file's start.
            let path = tmp.path().join(format!("{format:?}-0.bin"));
            let mut reader = EntryReader::open(&path, ReadMode::Cached(4096), format).unwrap();
            let (mut buf, mut out) = (vec![0u8; size], Vec::new());
            reader.next_batch(&mut buf, &mut out).unwrap();
            assert_eq!(out, [good]);
            let err = reader.next_batch(&mut buf, &mut out).unwrap_err();
            assert!(
                err.to_string().contains(&format!("bytes {size}..")),
                "{err}"
            );
        }
    }

    #[test]
    fn keys_carry_the_hash_of_each_key_through_truncation() {
        let b = batch(20);
        let mut keys = Keys::default();
        for &k in b.keys.keys() {
            keys.push(k);
        }
        keys.truncate(keys.len() - 3);
        let (ks, hs) = keys.slice(0..keys.len()).unwrap();
        assert_eq!(ks, &b.keys.keys()[..keys.len()]);
        assert!(ks.iter().zip(hs).all(|(k, &h)| k.hash64() == h));
        assert!(keys.slice(0..keys.len() + 1).is_none());
    }

    #[test]
    fn shards_give_the_same_boards_in_the_same_order() {
        let tmp = tempfile::tempdir().unwrap();
        let b = batch(3000);
        let expected = in_memory(&tmp.path().join("one"), &b);
        // In memory; all spilling (many generations); 48 shards of 1,024
        // entries each: the 16 with two partitions (of 64) spill, most of
        // the others, with one, do not (one split only).
        let mut one_split = batch(3000);
        one_split.games.iter_mut().for_each(|g| g.split = 0);
        let expected_one_split = in_memory(&tmp.path().join("one-split"), &one_split);
        for (shards, limit, spills) in [
            (3, 1 << 30, Some(false)),
            (2, 2048 * BYTES_PER_ENTRY, Some(true)),
            (48, 1 << 20, None),
        ] {
            let (b, expected) = match spills {
                Some(_) => (&b, &expected),
                None => (&one_split, &expected_one_split),
            };
            let dir = tmp.path().join(format!("{shards}-{limit}"));
            let format = SpillFormat::for_this_cpu();
            let mut aggregators = Aggregator::sharded(2, limit, &dir, shards, format);
            assert_eq!(aggregators.len(), shards);
            for a in &mut aggregators {
                a.add(b).unwrap();
            }
            let spilled: Vec<bool> = aggregators.iter().map(Aggregator::spilled).collect();
            match spills {
                Some(all) => assert!(spilled.iter().all(|&s| s == all), "{spilled:?}"),
                None => assert!(
                    spilled[..16].iter().all(|&s| s) && spilled[16..].contains(&false),
                    "{spilled:?}"
                ),
            }
            let got: Vec<Vec<Entry>> = finish(aggregators, 2)
                .unwrap()
                .into_iter()
                .map(|s| s.open().unwrap().collect::<Result<Vec<_>, _>>().unwrap())
                .collect();
            assert_eq!(&got, expected, "{shards} shards, limit {limit}");
        }
    }

    #[test]
    fn spilling_gives_the_same_boards_in_the_same_order() {
        let tmp = tempfile::tempdir().unwrap();
        let b = batch(3000);
        let expected = in_memory(&tmp.path().join("big"), &b);
        // 1024 entries per generation: many spills and recursive splits, in
        // both formats whatever this CPU would pick.
        for format in [SpillFormat::Plain, SpillFormat::Packed] {
            let dir = tmp.path().join(format!("small-{format:?}"));
            let mut small = Aggregator::sharded(2, 1024 * BYTES_PER_ENTRY, &dir, 1, format);
            let mut small = small.remove(0);
            small.add(&b).unwrap();
            assert!(small.spilled());
            let got = collect(small);
            assert_eq!(got, expected, "{format:?}");
        }
        for split in &expected {
            assert!(split.windows(2).all(|w| w[0].first < w[1].first));
            let total: u64 = split.iter().map(|e| e.count).sum();
            assert!(total > split.len() as u64, "expected repeated boards");
        }
        let distinct: std::collections::HashSet<_> = expected[0].iter().map(|e| e.key).collect();
        assert_eq!(distinct.len(), expected[0].len());
    }

    #[test]
    fn tables_stay_small_while_games_stream_in_whatever_the_limit() {
        const MIB: u64 = 1 << 20;
        let tmp = tempfile::tempdir().unwrap();
        let format = SpillFormat::for_this_cpu();
        let mut one = Aggregator::sharded(2, 2048 * MIB, tmp.path(), 1, format).remove(0);
        // The stream phase's tables are capped; the dedup phase keeps the
        // whole share of the limit.
        assert_eq!(one.table_bytes, STREAM_TABLE_BYTES);
        assert!(one.max_entries as u64 * BYTES_PER_ENTRY > 1024 * MIB);
        let b = batch(20_000);
        let mut distinct = vec![std::collections::HashSet::<BoardKey>::new(); 2];
        let mut at = 0;
        for game in &b.games {
            let n = game.boards as usize;
            distinct[usize::from(game.split)].extend(&b.keys.keys()[at..at + n]);
            at += n;
        }
        let held = STREAM_TABLE_BYTES / BYTES_PER_ENTRY;
        let total: usize = distinct.iter().map(|d| d.len()).sum();
        assert!(total as u64 > held, "{total} boards: too few to spill");
        one.add(&b).unwrap();
        assert!(one.spilled());
        let bytes: u64 = one.sets.iter().map(BoardSet::bytes).sum();
        assert!(bytes <= STREAM_TABLE_BYTES, "{bytes}");
        let got = collect(one);
        for (split, d) in got.iter().zip(&distinct) {
            assert_eq!(split.len(), d.len());
            assert!(split.windows(2).all(|w| w[0].first < w[1].first));
        }
    }

    #[test]
    fn a_partition_file_that_cannot_be_written_fails_the_spill_naming_it() {
        // A directory where a partition file goes, in the half each spill
        // thread writes: the spill fails, whichever thread met it, and the
        // error names the file.
        let b = batch(3000);
        for p in [3usize, 40] {
            let tmp = tempfile::tempdir().unwrap();
            let blocked = partition_path(&tmp.path().join("split-0"), p);
            fs::create_dir_all(&blocked).unwrap();
            let mut small = Aggregator::sharded(
                2,
                1024 * BYTES_PER_ENTRY,
                tmp.path(),
                1,
                SpillFormat::for_this_cpu(),
            )
            .remove(0);
            let err = small.add(&b).unwrap_err().to_string();
            assert!(err.contains(&blocked.display().to_string()), "{err}");
        }
    }
}
