//! Spilled partitions deduplicated: when a table is full its entries go,
//! in order, to one of the partition files (module
//! [`partition`](super::partition)), so each key's occurrences across
//! generations land in one file, ordered by first occurrence. At the end
//! each partition is deduplicated on its own ([`dedup_partition`]), by
//! several threads ([`dedup_partitions`], [`dedup_workers`]), into its run:
//! the partition file itself with a fix, or a run file written for it. A
//! partition too big for a thread's share of the memory limit is first
//! split by further hash bits ([`split_bits`]) and its pieces' runs merged.

use std::{
    fs,
    io::Write,
    path::Path,
    sync::{
        Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

use super::{
    super::error::IngestError,
    budget::{BYTES_PER_ENTRY, run_buffer},
    entry::{ENTRY_SIZE, Entry, SpillFormat},
    entry_file::{EntryReader, EntryWriter, Fix, ReadMode, Run, spill_err, write_entries},
    merge::MergeRuns,
    partition::{PARTITION_BITS, partition_path},
    table::{Index, upsert},
};
use crate::store::direct::DirectWriter;

/// Threads deduplicating the partition files `paths`, for `threads`
/// threads' worth of CPU: twice as many when each one's share of the
/// tables' `max_entries` still holds the biggest partition in one pass
/// beside its file buffers ([`DEDUP_THREAD_IO`]), since a thread waits on
/// the disk about half the time (reading its partition, writing its run;
/// docs/benchmarks.md#constants); as many
/// otherwise, where more threads would split partitions that fit now,
/// reading and writing them twice more, or hold more buffers than the
/// limit has room for.
pub(super) fn dedup_workers(
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

/// Where the dedup phase's threads spent their time, in seconds summed
/// over them: whether the phase waits on the disk (`read_s`, `write_s`) or
/// computes (`insert_s`) shows in its ingest summary (`dedup_threads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DedupBusy {
    /// Threads deduplicating partitions at once.
    pub threads: usize,
    /// Partition files deduplicated.
    pub partitions: usize,
    /// Of those, the ones kept as their runs with a [`Fix`] (no run
    /// written), and the bytes of those fixes.
    pub fixed: usize,
    pub fix_bytes: u64,
    /// Wall-clock seconds spilling the tables still in memory when games
    /// stopped coming, before the partitions are deduplicated.
    pub last_spill_s: f64,
    /// Wall-clock seconds from the first partition taken to the last done.
    pub partitions_s: f64,
    /// Reading partition files (in-memory passes).
    pub read_s: f64,
    /// Inserting their entries into the tables.
    pub insert_s: f64,
    /// Writing the runs.
    pub write_s: f64,
    /// Splitting partitions too big for a thread's tables, and merging
    /// their pieces' runs.
    pub split_s: f64,
}

impl DedupBusy {
    fn add(&mut self, other: &DedupBusy) {
        self.partitions += other.partitions;
        self.fixed += other.fixed;
        self.fix_bytes += other.fix_bytes;
        self.read_s += other.read_s;
        self.insert_s += other.insert_s;
        self.write_s += other.write_s;
        self.split_s += other.split_s;
    }
}

/// The memory the fixes of a dedup phase's runs may still take, and what
/// one thread may hold while it works one out.
pub(super) struct FixRoom {
    left: AtomicU64,
    a_thread: u64,
}

/// Runs [`dedup_partition`] on every path, `threads` at a time; the runs
/// come back in the order of `paths`, with where the threads' time went.
/// Their fixes share `fix_bytes` bytes, and a thread working one out holds
/// at most its share of them. The first failure stops the others from
/// taking new partitions and is returned.
pub(super) fn dedup_partitions(
    paths: &[&Path],
    max_entries: usize,
    fix_bytes: u64,
    threads: usize,
    format: SpillFormat,
) -> Result<(Vec<Run>, DedupBusy), IngestError> {
    let fix_room = FixRoom {
        left: AtomicU64::new(fix_bytes),
        a_thread: fix_bytes / threads.max(1) as u64,
    };
    let started = Instant::now();
    let busy = Mutex::new(DedupBusy {
        threads: threads.min(paths.len()),
        ..DedupBusy::default()
    });
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Result<Run, IngestError>>>> =
        paths.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(paths.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = DedupBusy::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = paths.get(i) else { break };
                        mine.partitions += 1;
                        let result = dedup_partition(
                            path,
                            PARTITION_BITS,
                            max_entries,
                            format,
                            Some(&fix_room),
                            &mut mine,
                        );
                        let failed = result.is_err();
                        if let Ok(mut slot) = results[i].lock() {
                            *slot = Some(result);
                        }
                        if failed {
                            next.store(paths.len(), Ordering::Relaxed);
                        }
                    }
                    if let Ok(mut busy) = busy.lock() {
                        busy.add(&mine);
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
    let results: Vec<Option<Result<Run, IngestError>>> = results
        .into_iter()
        .map(|slot| slot.into_inner().ok().flatten())
        .collect();
    let mut busy = busy.into_inner().unwrap_or_default();
    busy.partitions_s = started.elapsed().as_secs_f64();
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
    Ok((runs, busy))
}

/// The distinct entries of a partition file (ordered by first occurrence
/// across generations) with their counts summed, in the same order: the
/// earliest generation's entry keeps its first occurrence; and the [`Fix`]
/// that makes the file those entries, unless it would take more than
/// `fix_limit` bytes. Lookups are pipelined by [`upsert`] (a partition is
/// far bigger than the caches).
fn dedup_in_memory(
    path: &Path,
    len: usize,
    slots: usize,
    format: SpillFormat,
    fix_limit: u64,
    busy: &mut DedupBusy,
) -> Result<(Vec<Entry>, Option<Fix>), IngestError> {
    let mut entries: Vec<Entry> = Vec::with_capacity(len);
    let mut fix = Fix::default();
    // Each later occurrence adds 4 bytes to each list; past the limit no
    // fix is kept.
    let most = if len <= u32::MAX as usize {
        (fix_limit / 8) as usize
    } else {
        0
    };
    let mut whole = most > 0;
    // Entries whose count later occurrences raised, and where the batch
    // read starts in the file.
    let mut grown: Vec<u32> = Vec::new();
    let mut at = 0u64;
    let mut index = Index::with_slots(slots);
    let mut reader = EntryReader::open(path, ReadMode::Cached(1 << 20), format)?;
    let mut buf = vec![0u8; format.entry_bytes() * 4096];
    let mut batch = Vec::with_capacity(4096);
    loop {
        let started = Instant::now();
        reader.next_batch(&mut buf, &mut batch)?;
        let read = Instant::now();
        busy.read_s += (read - started).as_secs_f64();
        if batch.is_empty() {
            if !whole {
                return Ok((entries, None));
            }
            grown.sort_unstable();
            grown.dedup();
            fix.counts = grown
                .iter()
                .map(|&k| (k, entries[k as usize].count))
                .collect();
            fix.skip.shrink_to_fit();
            return Ok((entries, Some(fix)));
        }
        let skip = &mut fix.skip;
        let whole_before = whole;
        upsert(
            &mut index,
            &mut entries,
            &batch,
            |_, e| e.key.hash64(),
            |e| &e.key,
            |i, k, entry, e| {
                entry.count += e.count;
                if skip.len() == most {
                    whole = false;
                } else if whole {
                    // Positions and places fit: a partition of 2^32 entries
                    // or more gets no fix (`most` is 0).
                    skip.push((at + i as u64) as u32);
                    grown.push(k as u32);
                }
            },
            |_, e| *e,
        );
        at += batch.len() as u64;
        if whole_before && !whole {
            fix = Fix::default();
            grown = Vec::new();
        }
        busy.insert_s += read.elapsed().as_secs_f64();
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
/// thread's tables: a fixed 64-way split would leave pieces just too big,
/// each split again 64 ways, reading and writing every entry twice more.
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
/// Returns the run; adds where its time went to `busy`. A partition that
/// fits in memory is its own run with a [`Fix`] when `fix_room` (bytes the
/// fixes may still take) has room for it, and nothing is written; else
/// its run is written and the partition file removed.
fn dedup_partition(
    path: &Path,
    bits_used: u32,
    max_entries: usize,
    format: SpillFormat,
    fix_room: Option<&FixRoom>,
    busy: &mut DedupBusy,
) -> Result<Run, IngestError> {
    let size = format.entry_bytes();
    let len = fs::metadata(path).map_err(|e| spill_err(path, e))?.len() as usize / size;
    let run = path.with_extension("run");
    let bits = split_bits(len, max_entries).min(64 - bits_used);
    if fits_in_memory(len, max_entries) || bits == 0 {
        let fix_limit = fix_room.map_or(0, |room| {
            room.left.load(Ordering::Relaxed).min(room.a_thread)
        });
        let (entries, fix) = dedup_in_memory(path, len, index_slots(len), format, fix_limit, busy)?;
        if let (Some(fix), Some(room)) = (fix, fix_room) {
            let bytes = fix.bytes();
            let reserved = room
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(bytes)
                })
                .is_ok();
            if reserved {
                busy.fixed += 1;
                busy.fix_bytes += bytes;
                return Ok(Run {
                    path: path.to_owned(),
                    fix: Some(fix),
                });
            }
        }
        let started = Instant::now();
        write_entries(&run, &entries, format)?;
        busy.write_s += started.elapsed().as_secs_f64();
    } else {
        let started = Instant::now();
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
        busy.split_s += started.elapsed().as_secs_f64();
        let runs = pieces
            .iter()
            .map(|sub| dedup_partition(sub, bits_used + bits, max_entries, format, None, busy))
            .collect::<Result<Vec<_>, _>>()?;
        let started = Instant::now();
        // Up to MOST_SPLIT_WAYS sub-runs at once: their buffers share this
        // thread's table memory, which is free again (1 MiB each would take
        // ~31 MB a thread at 10^6 games under 64MiB, beyond the budget).
        let buffer = run_buffer(max_entries as u64 * BYTES_PER_ENTRY, runs.len());
        let mut merged = MergeRuns::new(runs, ReadMode::Cached(buffer), format)?;
        let mut w = EntryWriter::create(&run, 1 << 20, format)?;
        while let Some(e) = merged.next().transpose()? {
            w.push(&e)?;
        }
        w.finish()?;
        drop(merged);
        let _ = fs::remove_dir_all(&dir);
        busy.split_s += started.elapsed().as_secs_f64();
    }
    fs::remove_file(path).map_err(|e| spill_err(path, e))?;
    Ok(Run::file(run))
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;

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
        // partitions of ~470,000 entries, 8 pieces.
        assert_eq!(split_bits(470_000, entries(8 * MIB)), 3);
        // 10^7: ~10^7 entries, 128 pieces, all the buffers the tables allow
        // (a fixed 64-way split would need a second pass).
        assert_eq!(split_bits(10_000_000, entries(8 * MIB)), 7);
        // Tiny tables still halve; large ones open at most 256 files.
        assert_eq!(split_bits(2_000, 1024), 1);
        assert_eq!(split_bits(usize::MAX / 128, entries(1 << 30)), 8);
    }

    /// Reads a run to the end, `batch` entries at a time.
    fn read_run(run: Run, batch: usize, format: SpillFormat) -> Vec<Entry> {
        let mut reader = super::super::entry_file::SpilledRunReader::open(
            run,
            ReadMode::Cached(1 << 16),
            format,
        )
        .unwrap();
        let (mut buf, mut out, mut all) = (vec![0u8; batch * format.entry_bytes()], vec![], vec![]);
        loop {
            reader.next_batch(&mut buf, &mut out).unwrap();
            if out.is_empty() {
                return all;
            }
            all.extend_from_slice(&out);
        }
    }

    #[test]
    fn a_partition_with_its_fix_reads_as_the_run_written_for_it() {
        use shakmaty::{Chess, Position};

        use crate::chess::BoardKey;
        let tmp = tempfile::tempdir().unwrap();
        let format = SpillFormat::for_this_cpu();
        // Three generations over 40 boards: each generation's entries in
        // order of first occurrence, boards 0..8 in every generation (their
        // counts add up), the others in one generation each.
        let mut pos = Chess::default();
        let mut keys = Vec::new();
        while keys.len() < 40 {
            let moves = pos.legal_moves();
            if moves.is_empty() {
                pos = Chess::default();
                continue;
            }
            pos.play_unchecked(moves[keys.len() % moves.len()]);
            let key = BoardKey::from_position(&pos).unwrap();
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let mut file = Vec::new();
        let mut first = 0;
        for generation in 0..3usize {
            let own = 8 + generation * 10..18 + generation * 10;
            for k in (0..8).chain(own) {
                first += 1;
                let count = 1 + (k as u64 % 3);
                file.push(Entry {
                    key: keys[k],
                    first,
                    count,
                });
            }
        }
        let expected_boards: Vec<BoardKey> = (0..38).map(|k| keys[k]).collect();
        for (fixes, batch) in [(1 << 20, 4), (1 << 20, 1024), (0, 7)] {
            let path = partition_path(tmp.path(), 5);
            write_entries(&path, &file, format).unwrap();
            let room = FixRoom {
                left: AtomicU64::new(fixes),
                a_thread: fixes,
            };
            let mut busy = DedupBusy::default();
            let run = dedup_partition(
                &path,
                PARTITION_BITS,
                1 << 20,
                format,
                Some(&room),
                &mut busy,
            )
            .unwrap();
            assert_eq!(run.fix.is_some(), fixes > 0);
            assert_eq!(busy.fixed, usize::from(fixes > 0));
            if let Some(fix) = &run.fix {
                // 16 later occurrences of boards 0..8 skipped, and each of
                // those 8 boards' counts raised (1 + k % 3, three times).
                assert_eq!(fix.skip.len(), 16);
                assert_eq!(fix.counts.len(), 8);
                assert_eq!(run.path, path);
            } else {
                assert!(!path.exists(), "the partition of a run written is removed");
            }
            let got = read_run(run, batch, format);
            let boards: Vec<BoardKey> = got.iter().map(|e| e.key).collect();
            assert_eq!(boards, expected_boards, "fix {fixes}, batch {batch}");
            for (k, e) in got.iter().enumerate() {
                let once = 1 + (k as u64 % 3);
                let count = if k < 8 { 3 * once } else { once };
                assert_eq!(e.count, count, "board {k}");
                assert_eq!(e.first, file.iter().find(|f| f.key == e.key).unwrap().first);
            }
            let _ = fs::remove_file(&path);
            let _ = fs::remove_file(path.with_extension("run"));
        }
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
}
