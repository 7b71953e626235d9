//! The deduplication hash table: an open-addressing [`Index`] over a `Vec`
//! of entries, the pipelined [`upsert`] that fills it (used both while games
//! stream in and when a spilled partition is deduplicated), the sizing of a
//! table within a byte budget ([`table_shape`]), and [`BoardSet`], one
//! split's table, which grows within its share of the limit and writes its
//! entries to the partition files when it is full.
//!
//! Entries are appended in insertion order and keep their place, so a table
//! fed boards in game order holds the distinct boards in order of first
//! occurrence.

use std::{fs, path::PathBuf};

use super::{
    super::{error::IngestError, process::spawn_named},
    entry::{ENTRY_SIZE, Entry, SpillFormat},
    entry_file::{EntryWriter, spill_err},
    partition::{PARTITIONS, partition_of, write_partitions},
};
use crate::{chess::BoardKey, store::cache::prefetch};

/// Open-addressing index from board key to entry: each slot holds
/// `(fingerprint << 32) | (entry index + 1)`, 0 when empty; linear probing
/// at load factor <= 1/2. Its own table rather than a general hash map so a
/// batch of lookups can prefetch slots and entries ahead (the table and
/// entries far exceed the CPU caches at ChessBench scale).
pub(super) struct Index {
    slots: Vec<u64>,
    mask: usize,
}

impl Index {
    pub(super) fn with_slots(n: usize) -> Index {
        let n = n.next_power_of_two().max(16);
        let slots = vec![0; n];
        crate::store::memory::advise_huge_pages(slots.as_ptr(), slots.len());
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
            crate::store::memory::advise_huge_pages(fresh.as_ptr(), fresh.capacity());
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

/// Keys hashed ahead in [`Index::rebuild`].
const LOOKAHEAD: usize = 16;
/// How far ahead of the key being inserted [`upsert`] prefetches its home
/// index slot, and the entry that slot points at: far enough for a memory
/// access to complete (a table of gigabytes misses every cache).
const SLOT_AHEAD: usize = 16;
const ENTRY_AHEAD: usize = 8;
const RING: usize = 32;
const _: () = assert!(RING > SLOT_AHEAD && SLOT_AHEAD > ENTRY_AHEAD);

/// Inserts `items` into a table in order: item i whose key is in it is
/// `merge(i, at, entry, item)`d into its entry (`entries[at]`), any other
/// becomes `make(i, item)`; `hash(i,
/// item)` is item i's key's [`BoardKey::hash64`]. A software
/// pipeline: the home slot of item i + SLOT_AHEAD and the entry of item
/// i + ENTRY_AHEAD are prefetched while item i is looked up, across the
/// whole slice, so lookups overlap instead of each waiting on memory.
/// The caller made room for every item.
pub(super) fn upsert<T>(
    index: &mut Index,
    entries: &mut Vec<Entry>,
    items: &[T],
    hash: impl Fn(usize, &T) -> u64,
    key: impl Fn(&T) -> &BoardKey,
    mut merge: impl FnMut(usize, usize, &mut Entry, &T),
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
            Ok(at) => merge(i, at, &mut entries[at], item),
            Err(slot) => {
                index.put(slot, hash, entries.len());
                entries.push(make(i, item));
            }
        }
    }
}

/// The biggest table with room for `need` entries and at most `want`,
/// within `allowed` bytes: (entry capacity, index slots), slots a power of
/// two at least twice the capacity (load factor <= 1/2). `None` when even
/// `need` entries do not fit.
pub(super) fn table_shape(need: usize, want: usize, allowed: u64) -> Option<(usize, usize)> {
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

/// The distinct boards of one split.
pub(super) struct BoardSet {
    /// Allocated once for a whole generation where the system allows (pages
    /// are only touched as entries arrive), so growing never copies.
    pub(super) entries: Vec<Entry>,
    /// Entries the table may hold now (what the memory limit counts).
    pub(super) capacity: usize,
    index: Index,
    /// Where the split's partition files go.
    pub(super) dir: PathBuf,
    /// Spills so far: each wrote one generation of the table to the
    /// partition files.
    pub(super) generations: u32,
    /// The partition files, open from the first spill to the last (each
    /// keeps its last partial disk block until then).
    files: Vec<Option<EntryWriter>>,
    /// Each entry's partition while spilling (reused).
    partitions: Vec<u8>,
    /// Buffer of each partition file: a shard of `n` writes `64 / n` of them.
    spill_buffer: usize,
    pub(super) format: SpillFormat,
}

impl BoardSet {
    /// An empty table whose partition files go in `dir`, each with
    /// `spill_buffer` bytes of buffer, entries laid out as `format` says.
    pub(super) fn new(dir: PathBuf, spill_buffer: usize, format: SpillFormat) -> BoardSet {
        BoardSet {
            entries: Vec::new(),
            capacity: 0,
            index: Index::with_slots(16),
            dir,
            generations: 0,
            files: Vec::new(),
            partitions: Vec::new(),
            spill_buffer,
            format,
        }
    }

    /// Room for `n` more entries without growing.
    pub(super) fn room(&self) -> usize {
        (self.capacity.saturating_sub(self.entries.len()))
            .min((self.index.slots.len() / 2).saturating_sub(self.entries.len()))
    }

    /// Inserts `keys`, the occurrence of `keys[i]` being `firsts[i]`; the
    /// caller made room for all of them.
    pub(super) fn insert_all(&mut self, keys: &[BoardKey], hashes: &[u64], firsts: &[u64]) {
        debug_assert_eq!(keys.len(), firsts.len());
        debug_assert_eq!(keys.len(), hashes.len());
        upsert(
            &mut self.index,
            &mut self.entries,
            keys,
            |i, _| hashes[i],
            |key| key,
            |_, _, entry, _| entry.count += 1,
            |i, key| Entry {
                key: *key,
                first: firsts[i],
                count: 1,
            },
        );
    }

    /// Bytes the table holds (entries and index slots).
    pub(super) fn bytes(&self) -> u64 {
        self.capacity as u64 * ENTRY_SIZE + self.index.slots.len() as u64 * 8
    }

    /// Grows to `capacity` entries and `slots` index slots (a power of two,
    /// at least twice `capacity`). The first growth reserves address space
    /// for `generation` entries: a `Vec` that grows by reallocating copies
    /// its entries, and for a moment holds both copies.
    pub(super) fn grow_to(&mut self, capacity: usize, slots: usize, generation: usize) {
        if self.entries.capacity() < capacity {
            let len = self.entries.len();
            if self
                .entries
                .try_reserve_exact(generation.max(capacity) - len)
                .is_err()
            {
                self.entries.reserve_exact(capacity - len);
            }
            crate::store::memory::advise_huge_pages(self.entries.as_ptr(), self.entries.capacity());
        }
        self.capacity = capacity;
        if slots > self.index.slots.len() {
            self.index
                .rebuild(slots, (2 * generation).next_power_of_two(), &self.entries);
        }
    }

    /// Writes every entry to its partition file, in order, and empties the
    /// table. Two threads write, each half the partitions.
    pub(super) fn spill(&mut self) -> Result<(), IngestError> {
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
    pub(super) fn close(&mut self) -> Result<(), IngestError> {
        for file in self.files.drain(..).flatten() {
            file.finish()?;
        }
        Ok(())
    }

    pub(super) fn release(&mut self) {
        self.entries = Vec::new();
        self.partitions = Vec::new();
        self.capacity = 0;
        self.index = Index::with_slots(16);
    }
}
