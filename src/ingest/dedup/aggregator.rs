//! The aggregator: counts the distinct boards of every split as batches of
//! board keys arrive in game order ([`KeyBatch`]), each [`Aggregator`] the
//! keys of its own [`Shard`] of the partitions, spilling a split's table
//! when the shard's share of the memory limit is full; and [`finish`], which
//! gathers the shards' tables, deduplicates what they spilled, and hands
//! each split's boards on to be merged by first occurrence.

use std::path::{Path, PathBuf};

use super::{
    super::error::IngestError,
    budget::{BYTES_PER_ENTRY, STREAM_TABLE_BYTES, run_buffer, spill_buffer, table_bytes},
    entry::{SpillFormat, first_seen},
    merge::SplitBoards,
    partition::{PARTITIONS, partition_of, partition_path},
    spill::{DedupBusy, dedup_partitions, dedup_workers},
    table::{BoardSet, table_shape},
};
use crate::chess::BoardKey;

/// The share of the boards one [`Aggregator`] counts: the keys whose
/// partition is `index` modulo `of` (all of them when `of` is 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shard {
    index: usize,
    of: usize,
}

impl Shard {
    /// Most shards: a shard owns whole partitions.
    const MAX: usize = PARTITIONS;

    #[inline]
    fn owns(&self, hash: u64) -> bool {
        self.of == 1 || partition_of(hash) % self.of == self.index
    }
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
    fn new(splits: usize, memory_limit: u64, scratch: &Path) -> Aggregator {
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
                .map(|s| BoardSet::new(scratch.join(format!("split-{s}")), spill_buffer, format))
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
        finish(vec![self], threads).map(|(boards, _)| boards)
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
) -> Result<(Vec<SplitBoards>, Option<DedupBusy>), IngestError> {
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
    let started = std::time::Instant::now();
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
    let last_spill_s = started.elapsed().as_secs_f64();
    let paths: Vec<&Path> = jobs.iter().map(|(_, p)| p.as_path()).collect();
    // A sixteenth of the tables' memory is left to the runs' fixes: half
    // for the fixes kept, held until the boards are written, half for the
    // threads working them out.
    let fix_entries = max_entries / 16;
    let max_entries = max_entries - fix_entries;
    let fix_bytes = fix_entries as u64 * BYTES_PER_ENTRY / 2;
    let workers = dedup_workers(&paths, max_entries, threads, format)?;
    let per_thread = (max_entries / workers).max(1024);
    let (runs, mut busy) = dedup_partitions(&paths, per_thread, fix_bytes, workers, format)?;
    busy.last_spill_s = last_spill_s;
    let mut runs = runs.into_iter();
    let mut out = Vec::with_capacity(in_memory.len());
    for (s, tables) in in_memory.into_iter().enumerate() {
        out.push(match tables {
            Some(tables) => SplitBoards::Memory(tables),
            None => {
                let n = jobs.iter().filter(|(js, _)| *js == s).count();
                SplitBoards::Runs {
                    runs: runs.by_ref().take(n).collect(),
                    buffer: run_buffer(max_entries as u64 * BYTES_PER_ENTRY, n),
                    format,
                }
            }
        });
    }
    Ok((out, (!jobs.is_empty()).then_some(busy)))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use shakmaty::{Chess, Position};

    use super::{super::entry::Entry, *};

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

    /// The boards of each split, its runs merged on `merge` threads.
    fn collect_merged(agg: Aggregator, merge: usize) -> Vec<Vec<Entry>> {
        agg.finish(3)
            .unwrap()
            .into_iter()
            .map(|s| {
                s.open(merge)
                    .unwrap()
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap()
            })
            .collect()
    }

    fn collect(agg: Aggregator) -> Vec<Vec<Entry>> {
        collect_merged(agg, 1)
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
                .0
                .into_iter()
                .map(|s| s.open(1).unwrap().collect::<Result<Vec<_>, _>>().unwrap())
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
        // The runs merged on the calling thread, and on 2 and 3 threads
        // beside it (a tree of merges).
        for format in [SpillFormat::Plain, SpillFormat::Packed] {
            for merge in [1, 2, 3] {
                let dir = tmp.path().join(format!("small-{format:?}-{merge}"));
                let mut small = Aggregator::sharded(2, 1024 * BYTES_PER_ENTRY, &dir, 1, format);
                let mut small = small.remove(0);
                small.add(&b).unwrap();
                assert!(small.spilled());
                let got = collect_merged(small, merge);
                assert_eq!(got, expected, "{format:?}, {merge} merge threads");
            }
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
