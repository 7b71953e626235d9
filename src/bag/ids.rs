//! Board ids for `bag import`: dense, in order of first appearance, from an
//! in-memory FEN-hash table when the split's boards fit the memory budget,
//! else worked out on disk.
//!
//! On disk, [`Partitioner`] sees every record's FEN hash in record order (a
//! run of consecutive records of one board is one *entry*) and
//! [`Partitioner::resolve`] makes four passes over files in the import's
//! scratch directory, each holding at most one of P hash partitions in
//! memory:
//!
//! 1. each entry's 128-bit hash goes to its partition's file, and its
//!    partition number to a sequence file (while the import reads the bags);
//! 2. per partition, a hash table numbers the partition's boards in order of
//!    first appearance (local ids) and writes each entry's local id, flagged
//!    when the entry is the board's first;
//! 3. the sequence file replays the entries in record order: each first
//!    entry gets the next global id, appended to its partition's id list;
//! 4. per partition, its id list (4 bytes a board of the partition) turns
//!    each entry's local id into its global id.
//!
//! The import then reads the bags again and takes each entry's id from its
//! partition's stream ([`Resolved::id`]): the same ids the in-memory table
//! gives, so the tables written are byte for byte the same (tested). Disk:
//! 26 bytes an entry and 4 bytes a board, freed as the passes go.

use std::{
    fs::{self, File},
    io::{self, BufRead, BufReader, BufWriter, Read, Write},
    path::{Path, PathBuf},
};

use super::error::BagSetError;

/// The table's bytes per entry at worst: a 16-byte slot, at most 80% full,
/// rounded up to a power of two.
pub(super) const TABLE_BYTES_PER_ENTRY: u64 = 40;
/// Flags an entry that is its board's first (local ids are below 2^31).
const FIRST: u32 = 1 << 31;

/// FEN hash to board id in 16 bytes a slot: an open-addressing table keyed
/// by 96 bits of the FEN's 128-bit xxh3 (the home slot comes from its low 32
/// bits, so the table can grow), with 32-bit ids. Two boards are confused
/// only if 96 hash bits agree: about 10^-11 for the paper's 530M boards.
/// A slot holds its key and id together, so a lookup misses the caches
/// once, not once an array; the table asks for 2 MiB pages, so that it
/// misses the TLB rarely.
pub(super) struct BoardIds {
    slots: Vec<Slot>,
    len: usize,
}

/// A slot of [`BoardIds`]: the key's high 64 and low 32 bits, and its id
/// ([`BoardIds::EMPTY`] in an empty slot).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(16))]
struct Slot {
    high: u64,
    low: u32,
    id: u32,
}

impl BoardIds {
    const EMPTY: u32 = u32::MAX;

    /// A table for about `boards` boards without growing.
    pub(super) fn with_capacity(boards: u64) -> BoardIds {
        Self::empty(((boards.max(1024) as f64 / 0.8) as usize).next_power_of_two())
    }

    fn empty(slots: usize) -> BoardIds {
        let mut table = Vec::with_capacity(slots);
        crate::store::memory::advise_huge_pages(table.as_ptr(), slots);
        table.resize(
            slots,
            Slot {
                high: 0,
                low: 0,
                id: Self::EMPTY,
            },
        );
        BoardIds {
            slots: table,
            len: 0,
        }
    }

    pub(super) fn len(&self) -> u64 {
        self.len as u64
    }

    /// Where the probe for a key with these low bits starts.
    #[inline]
    fn first_slot(&self, low: u32) -> usize {
        // Spread the low bits (xxh3's are already uniform; this keeps a
        // table that grew as uniform as a new one).
        (u64::from(low).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (self.slots.len() - 1)
    }

    /// The key's slot: where it is, or the empty slot where it would go.
    #[inline]
    fn slot(&self, high: u64, low: u32) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.first_slot(low);
        loop {
            let s = &self.slots[i];
            if s.id == Self::EMPTY || (s.high == high && s.low == low) {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    fn split(key: u128) -> (u64, u32) {
        ((key >> 64) as u64, key as u32)
    }

    #[cfg(test)]
    fn get(&self, key: u128) -> Option<u64> {
        let (high, low) = Self::split(key);
        let s = self.slots[self.slot(high, low)];
        (s.id != Self::EMPTY).then(|| u64::from(s.id))
    }

    /// Stores `key` as `id` (tests: ids out of the import's order).
    #[cfg(test)]
    fn insert(&mut self, key: u128, id: u64) -> Result<(), BagSetError> {
        let id = u32::try_from(id)
            .ok()
            .filter(|&id| id != Self::EMPTY)
            .ok_or(BagSetError::TooManyBoards)?;
        if (self.len + 1) * 5 > self.slots.len() * 4 {
            self.grow();
        }
        let (high, low) = Self::split(key);
        let i = self.slot(high, low);
        self.slots[i] = Slot { high, low, id };
        self.len += 1;
        Ok(())
    }

    /// The id of `key`, numbering it next if it is new; and whether it was.
    pub(super) fn get_or_insert(&mut self, key: u128) -> Result<(u64, bool), BagSetError> {
        if (self.len + 1) * 5 > self.slots.len() * 4 {
            self.grow();
        }
        let (high, low) = Self::split(key);
        let i = self.slot(high, low);
        if self.slots[i].id != Self::EMPTY {
            return Ok((u64::from(self.slots[i].id), false));
        }
        let id = u32::try_from(self.len)
            .ok()
            .filter(|&id| id != Self::EMPTY)
            .ok_or(BagSetError::TooManyBoards)?;
        self.slots[i] = Slot { high, low, id };
        self.len += 1;
        Ok((u64::from(id), true))
    }

    /// Asks the CPU to fetch the cache line `key`'s lookup starts at, so
    /// that a lookup a few records later does not wait on memory (the
    /// table is far bigger than the caches).
    #[inline]
    pub(super) fn prefetch(&self, key: u128) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let (_, low) = Self::split(key);
            let i = self.first_slot(low);
            // SAFETY: prefetching is a hint; the address is in bounds.
            #[allow(unused_unsafe)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(self.slots.as_ptr().add(i).cast());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = key;
    }

    /// Doubles the table (only when the state-value bag undercounted).
    fn grow(&mut self) {
        let old = std::mem::replace(self, Self::empty(self.slots.len() * 2));
        for s in old.slots {
            if s.id != Self::EMPTY {
                let i = self.slot(s.high, s.low);
                self.slots[i] = s;
                self.len += 1;
            }
        }
    }
}

/// The partition of a hash: its high 64 bits scaled to `0..partitions`.
fn partition(key: u128, partitions: usize) -> usize {
    ((u128::from((key >> 64) as u64) * partitions as u128) >> 64) as usize
}

/// Partitions for `entries` entries at most, so that one partition's table
/// fits `table_budget` bytes (at most 2^16, one `u16` in the sequence file).
pub(super) fn partitions_for(entries: u64, table_budget: u64) -> usize {
    let n = (entries.max(1).saturating_mul(TABLE_BYTES_PER_ENTRY)).div_ceil(table_budget.max(1));
    n.clamp(1, 1 << 16) as usize
}

/// Raises the soft limit on open files to what `partitions` partitions
/// need (pass 3 holds 2P + 1 files), or says why it cannot.
pub(super) fn ensure_open_files(partitions: usize) -> Result<(), BagSetError> {
    let need = 2 * partitions as u64 + 64;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur >= need {
        return Ok(());
    }
    if limit.rlim_max >= need {
        let raised = libc::rlimit {
            rlim_cur: need,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(());
        }
    }
    Err(BagSetError::OpenFiles {
        partitions,
        need,
        limit: limit.rlim_max,
    })
}

/// A buffered file written sequentially.
pub(super) struct Out {
    w: BufWriter<File>,
    path: PathBuf,
}

impl Out {
    pub(super) fn create(path: PathBuf, buffer: usize) -> Result<Out, BagSetError> {
        let file = File::create(&path).map_err(|e| io_err(&path, e))?;
        Ok(Out {
            w: BufWriter::with_capacity(buffer, file),
            path,
        })
    }

    pub(super) fn put(&mut self, bytes: &[u8]) -> Result<(), BagSetError> {
        self.w.write_all(bytes).map_err(|e| io_err(&self.path, e))
    }

    pub(super) fn finish(mut self) -> Result<PathBuf, BagSetError> {
        self.w.flush().map_err(|e| io_err(&self.path, e))?;
        self.w
            .get_ref()
            .sync_data()
            .map_err(|e| io_err(&self.path, e))?;
        Ok(self.path)
    }
}

/// A buffered file read sequentially, in fixed-size items.
pub(super) struct In {
    r: BufReader<File>,
    path: PathBuf,
}

impl In {
    pub(super) fn open(path: PathBuf, buffer: usize) -> Result<In, BagSetError> {
        let file = File::open(&path).map_err(|e| io_err(&path, e))?;
        Ok(In {
            r: BufReader::with_capacity(buffer, file),
            path,
        })
    }

    /// The next item, or `None` at the end (a partial item is an error).
    pub(super) fn next<const N: usize>(&mut self) -> Result<Option<[u8; N]>, BagSetError> {
        let at_end = self
            .r
            .fill_buf()
            .map_err(|e| io_err(&self.path, e))?
            .is_empty();
        if at_end {
            return Ok(None);
        }
        let mut item = [0; N];
        self.r
            .read_exact(&mut item)
            .map_err(|e| io_err(&self.path, e))?;
        Ok(Some(item))
    }

    fn u32(&mut self) -> Result<u32, BagSetError> {
        match self.next::<4>()? {
            Some(b) => Ok(u32::from_le_bytes(b)),
            None => Err(io_err(
                &self.path,
                io::Error::new(io::ErrorKind::UnexpectedEof, "ended before its entries"),
            )),
        }
    }
}

fn io_err(path: &Path, source: io::Error) -> BagSetError {
    BagSetError::Io {
        path: path.to_owned(),
        source,
    }
}

pub(super) fn remove(path: &Path) -> Result<(), BagSetError> {
    fs::remove_file(path).map_err(|e| io_err(path, e))
}

/// Pass 1: the entries' hashes, by partition, and their partition sequence.
pub(super) struct Partitioner {
    dir: PathBuf,
    parts: Vec<Out>,
    entries: Vec<u64>,
    sequence: Out,
    last: Option<u128>,
    buffer: usize,
}

impl Partitioner {
    /// Files in `dir` for `partitions` partitions; `memory` bytes for the
    /// passes' buffers and one partition's table.
    pub(super) fn create(
        dir: &Path,
        partitions: usize,
        memory: u64,
    ) -> Result<Partitioner, BagSetError> {
        // A quarter of the budget for the 2P + 1 buffers pass 3 holds.
        let buffer = (memory / 4 / (2 * partitions as u64 + 1)).clamp(4 << 10, 1 << 20) as usize;
        let parts = (0..partitions)
            .map(|p| Out::create(dir.join(format!("hashes-{p:05}")), buffer))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Partitioner {
            dir: dir.to_owned(),
            parts,
            entries: vec![0; partitions],
            sequence: Out::create(dir.join("sequence"), buffer)?,
            last: None,
            buffer,
        })
    }

    /// A record's FEN hash, in record order.
    pub(super) fn push(&mut self, key: u128) -> Result<(), BagSetError> {
        if self.last == Some(key) {
            return Ok(());
        }
        self.last = Some(key);
        let p = partition(key, self.parts.len());
        self.parts[p].put(&key.to_le_bytes())?;
        self.sequence.put(&(p as u16).to_le_bytes())?;
        self.entries[p] += 1;
        Ok(())
    }

    /// Passes 2 to 4: every entry's global id, as streams per partition.
    pub(super) fn resolve(self, progress: bool) -> Result<Resolved, BagSetError> {
        let Partitioner {
            dir,
            parts,
            entries,
            sequence,
            buffer,
            ..
        } = self;
        let partitions = parts.len();
        let bar = crate::ui::bar(
            progress,
            Some(2 * partitions as u64 + 1),
            "{prefix:>20} {wide_bar} {pos}/{len} partition passes eta {eta}",
        );
        bar.set_prefix("board ids");
        let hashes = parts
            .into_iter()
            .map(Out::finish)
            .collect::<Result<Vec<_>, _>>()?;
        let sequence = sequence.finish()?;
        let locals: Vec<PathBuf> = (0..partitions)
            .map(|p| dir.join(format!("locals-{p:05}")))
            .collect();

        // Pass 2: local ids, first entries flagged.
        let mut distinct = vec![0u64; partitions];
        for p in 0..partitions {
            let mut table = BoardIds::with_capacity(entries[p]);
            let mut input = In::open(hashes[p].clone(), buffer)?;
            let mut out = Out::create(locals[p].clone(), buffer)?;
            while let Some(key) = input.next::<16>()? {
                let (id, first) = table.get_or_insert(u128::from_le_bytes(key))?;
                if id >= u64::from(FIRST) {
                    return Err(BagSetError::TooManyBoards);
                }
                let flag = if first { FIRST } else { 0 };
                out.put(&(id as u32 | flag).to_le_bytes())?;
            }
            distinct[p] = table.len();
            out.finish()?;
            remove(&hashes[p])?;
            bar.inc(1);
        }

        // Pass 3: global ids in record order.
        let gids: Vec<PathBuf> = (0..partitions)
            .map(|p| dir.join(format!("ids-{p:05}")))
            .collect();
        let mut local_in = locals
            .iter()
            .map(|path| In::open(path.clone(), buffer))
            .collect::<Result<Vec<_>, _>>()?;
        let mut gid_out = gids
            .iter()
            .map(|path| Out::create(path.clone(), buffer))
            .collect::<Result<Vec<_>, _>>()?;
        let mut seq = In::open(sequence.clone(), buffer)?;
        let mut boards: u64 = 0;
        while let Some(p) = seq.next::<2>()? {
            let p = usize::from(u16::from_le_bytes(p));
            let Some(input) = local_in.get_mut(p) else {
                return Err(io_err(
                    &sequence,
                    io::Error::new(io::ErrorKind::InvalidData, "partition out of range"),
                ));
            };
            if input.u32()? & FIRST != 0 {
                let id = u32::try_from(boards)
                    .ok()
                    .filter(|&id| id != u32::MAX)
                    .ok_or(BagSetError::TooManyBoards)?;
                gid_out[p].put(&id.to_le_bytes())?;
                boards += 1;
            }
        }
        drop(local_in);
        for out in gid_out {
            out.finish()?;
        }
        remove(&sequence)?;
        bar.inc(1);

        // Pass 4: each entry's global id.
        let mut resolved = Vec::with_capacity(partitions);
        for p in 0..partitions {
            let mut ids = Vec::with_capacity(distinct[p] as usize);
            let mut input = In::open(gids[p].clone(), buffer)?;
            while let Some(id) = input.next::<4>()? {
                ids.push(u32::from_le_bytes(id));
            }
            let path = dir.join(format!("resolved-{p:05}"));
            let mut out = Out::create(path.clone(), buffer)?;
            let mut input = In::open(locals[p].clone(), buffer)?;
            while let Some(local) = input.next::<4>()? {
                let local = (u32::from_le_bytes(local) & !FIRST) as usize;
                let Some(id) = ids.get(local) else {
                    return Err(io_err(
                        &locals[p],
                        io::Error::new(io::ErrorKind::InvalidData, "local id out of range"),
                    ));
                };
                out.put(&id.to_le_bytes())?;
            }
            resolved.push(out.finish()?);
            remove(&locals[p])?;
            remove(&gids[p])?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        let streams = resolved
            .into_iter()
            .map(|path| In::open(path, buffer))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Resolved {
            streams,
            last: None,
            next: 0,
            boards,
        })
    }
}

/// Every entry's global id, read back in record order.
pub(super) struct Resolved {
    streams: Vec<In>,
    last: Option<(u128, u64)>,
    /// The next new board's id.
    next: u64,
    /// Distinct boards of the import.
    pub(super) boards: u64,
}

impl Resolved {
    /// The id of the next record's board (records in the order the
    /// partitioner saw them), and whether it is the board's first record.
    pub(super) fn id(&mut self, key: u128) -> Result<(u64, bool), BagSetError> {
        if let Some((last, id)) = self.last
            && last == key
        {
            return Ok((id, false));
        }
        let p = partition(key, self.streams.len());
        let id = u64::from(self.streams[p].u32()?);
        self.last = Some((key, id));
        let first = id == self.next;
        if first {
            self.next += 1;
        }
        Ok((id, first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_128;

    /// The id table finds what it stored, keeps keys apart that share 64 of
    /// their bits, and survives growing past its first size.
    #[test]
    fn board_ids_store_and_grow() {
        let mut t = BoardIds::with_capacity(1);
        let keys: Vec<u128> = (0..20_000u64).map(|i| xxh3_128(&i.to_le_bytes())).collect();
        for (id, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k), None);
            t.insert(k, id as u64).unwrap();
        }
        assert!(t.slots.len() > 20_000, "grew");
        for (id, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k), Some(id as u64));
        }
        // Same high 64 bits, other low bits: different boards.
        let a = keys[0];
        let b = a ^ 1;
        assert_eq!(t.get(b), None);
        t.insert(b, 7).unwrap();
        assert_eq!((t.get(a), t.get(b)), (Some(0), Some(7)));
        assert!(matches!(
            t.insert(xxh3_128(b"x"), u64::from(u32::MAX)),
            Err(BagSetError::TooManyBoards)
        ));
    }

    /// The on-disk passes give every record the id the in-memory table
    /// gives, for any number of partitions, runs of one board and repeats
    /// far apart included.
    #[test]
    fn resolved_ids_are_the_in_memory_ids() {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut keys = Vec::new();
        for _ in 0..50_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // 5,000 boards; runs of up to 3 records.
            let key = xxh3_128(&(rng % 5_000).to_le_bytes());
            for _ in 0..=(rng >> 40) % 3 {
                keys.push(key);
            }
        }
        let mut table = BoardIds::with_capacity(16);
        let expected: Vec<(u64, bool)> = keys
            .iter()
            .map(|&k| table.get_or_insert(k).unwrap())
            .collect();
        for partitions in [1, 2, 7, 64] {
            let dir = tempfile::tempdir().unwrap();
            let mut p = Partitioner::create(dir.path(), partitions, 64 << 10).unwrap();
            for &k in &keys {
                p.push(k).unwrap();
            }
            let mut r = p.resolve(false).unwrap();
            assert_eq!(r.boards, table.len());
            let got: Vec<(u64, bool)> = keys.iter().map(|&k| r.id(k).unwrap()).collect();
            assert!(got == expected, "{partitions} partitions");
            let left: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            assert_eq!(
                left.len(),
                partitions,
                "only the resolved streams: {left:?}"
            );
        }
    }

    #[test]
    fn partitions_fit_the_budget() {
        assert_eq!(partitions_for(1000, 1 << 30), 1);
        assert_eq!(partitions_for(0, 1 << 20), 1);
        assert_eq!(partitions_for(1 << 30, 1 << 30), 40);
        assert_eq!(partitions_for(u64::MAX / 64, 1), 1 << 16);
    }
}
