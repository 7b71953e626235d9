//! Table A1 of the paper, read back from a run directory's tables.
//!
//! Per split: games, state_value records (distinct boards), behavioral_cloning
//! records (distinct boards with a legal move), action_value records (their
//! legal moves), and bytes on disk per table; plus the fraction of test boards
//! that also occur in train (the paper reports 14.7%). Counts come from the
//! Parquet files, not the manifest, so they check what is actually there.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::atomic::{AtomicUsize, Ordering},
};

use arrow_array::{Array, StringArray, UInt8Array};
use parquet::arrow::ProjectionMask;
use serde::Serialize;
use thiserror::Error;
use xxhash_rust::xxh3::xxh3_128;

use crate::{
    options::{Consumer, Memory, Share},
    store::{
        RunDir, Source, StoreError, Table, cache::prefetch, commit::RunReader, open_parquet,
        parquet_files,
    },
};

/// `chessbench stats`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct StatsOptions {
    /// A run directory written by `chessbench ingest`.
    #[arg(value_name = "RUN_DIR", value_hint = clap::ValueHint::DirPath)]
    pub run: PathBuf,
    #[command(flatten)]
    pub budget: crate::options::Budget,
}

/// `chessbench stats`'s options resolved: the run opened for reading (a
/// writer cannot replace its tables while it is read).
#[derive(Debug)]
pub struct StatsConfig {
    run: RunReader,
    /// The memory the test-in-train overlap may use, bytes.
    pub memory_limit: u64,
}

impl StatsOptions {
    /// Opens the run: a directory that is not one fails here.
    pub fn resolve(&self) -> Result<StatsConfig, StatsError> {
        Ok(StatsConfig {
            run: RunDir::read(&self.run)?,
            memory_limit: self.budget.bytes(),
        })
    }
}

/// Failures reading a run's tables.
#[derive(Debug, Error)]
pub enum StatsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}: expected column {column} of type {expected}", path.display())]
    Column {
        path: PathBuf,
        column: &'static str,
        expected: &'static str,
    },
}

/// Table A1 for one split.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SplitStats {
    pub games: u64,
    pub state_value: u64,
    pub behavioral_cloning: u64,
    pub action_value: u64,
    pub rejected: u64,
    /// Annotated boards (rows of `state_values` from Stockfish or imported
    /// `.bag` files; 0 before `annotate`).
    pub state_values: u64,
    /// Rows of `action_values` from Stockfish or imported `.bag` files.
    pub action_values: u64,
    /// Rows of the label sources besides Stockfish's (the Lichess
    /// evaluation database's `annotate --evals`), from their own chunk
    /// files: in JSON `SOURCE_state_values` and `SOURCE_action_values` for
    /// every such source (`lichess_evals_state_values`, ...).
    #[serde(flatten)]
    pub other_sources: OtherSources,
    /// Boards the engine could not annotate (rows of `failures`).
    pub failures: u64,
    /// Bytes on disk per table.
    pub bytes: BTreeMap<&'static str, u64>,
}

/// Table A1 for a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunStats {
    pub splits: BTreeMap<String, SplitStats>,
    /// Fraction of distinct test boards that are also train boards; null
    /// unless both a `train` and a `test` split exist.
    pub test_in_train: Option<f64>,
    /// Passes over train that fraction took (more than 1 when the test
    /// split's hashes did not fit `--memory-limit` at once).
    pub overlap_passes: Option<u64>,
}

/// A label source's rows in a split's value tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceRows {
    pub state_values: u64,
    pub action_values: u64,
}

/// The rows of every label source besides Stockfish's ([`Source::ALL`]),
/// zero for a source with none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherSources(pub BTreeMap<Source, SourceRows>);

impl Default for OtherSources {
    fn default() -> OtherSources {
        OtherSources(
            Source::ALL
                .into_iter()
                .filter(|s| *s != Source::Stockfish)
                .map(|s| (s, SourceRows::default()))
                .collect(),
        )
    }
}

impl OtherSources {
    /// All their state-value rows.
    pub fn state_values(&self) -> u64 {
        self.0.values().map(|r| r.state_values).sum()
    }

    /// All their action-value rows.
    pub fn action_values(&self) -> u64 {
        self.0.values().map(|r| r.action_values).sum()
    }
}

impl Serialize for OtherSources {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2 * self.0.len()))?;
        for (source, rows) in &self.0 {
            map.serialize_entry(
                &format!("{}_state_values", source.name()),
                &rows.state_values,
            )?;
            map.serialize_entry(
                &format!("{}_action_values", source.name()),
                &rows.action_values,
            )?;
        }
        map.end()
    }
}

/// Rows and bytes of a table partition, the rows by label source (of the
/// value tables' chunk files; imported `.bag` files' are Stockfish's, as are
/// every other table's).
fn rows_and_bytes(dir: &Path) -> Result<(BTreeMap<Source, u64>, u64), StatsError> {
    let (mut rows, mut bytes) = (BTreeMap::new(), 0u64);
    for path in parquet_files(dir)? {
        let b = open_parquet(&path)?;
        let n = b.metadata().file_metadata().num_rows() as u64;
        let source = Source::of_file(path.file_name().and_then(|n| n.to_str()).unwrap_or(""));
        *rows.entry(source).or_insert(0) += n;
        bytes += std::fs::metadata(&path)
            .map_err(|e| StoreError::io(&path, e))?
            .len();
    }
    Ok((rows, bytes))
}

/// Calls `f` on every batch of one column of a partition.
fn for_column(
    dir: &Path,
    column: &'static str,
    mut f: impl FnMut(&dyn Array, &Path) -> Result<(), StatsError>,
) -> Result<(), StatsError> {
    for path in parquet_files(dir)? {
        for_file_column(&path, column, &mut f)?;
    }
    Ok(())
}

/// Calls `f` on every batch of one column of a Parquet file.
fn for_file_column(
    path: &Path,
    column: &'static str,
    mut f: impl FnMut(&dyn Array, &Path) -> Result<(), StatsError>,
) -> Result<(), StatsError> {
    let b = open_parquet(path)?;
    let index = b
        .schema()
        .index_of(column)
        .map_err(|_| StatsError::Column {
            path: path.to_owned(),
            column,
            expected: "present",
        })?;
    let mask = ProjectionMask::roots(b.parquet_schema(), [index]);
    let reader = b
        .with_projection(mask)
        .with_batch_size(64 * 1024)
        .build()
        .map_err(|e| StoreError::parquet(path, e))?;
    for batch in reader {
        let batch = batch.map_err(|e| StoreError::parquet(path, e.into()))?;
        f(batch.column(0).as_ref(), path)?;
    }
    Ok(())
}

fn partition(run: &Path, table: Table, split: &str) -> PathBuf {
    run.join(crate::store::commit::partition_dir(table, split))
}

/// Splits present in a run (directories `boards/split=NAME`).
pub(crate) fn splits(run: &Path) -> Result<Vec<String>, StatsError> {
    let dir = run.join(Table::Boards.name());
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(StoreError::io(&dir, e).into()),
    };
    for entry in entries.flatten() {
        if let Some(name) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("split="))
        {
            out.push(name.to_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// Calls `f` with the 128-bit hashes of the FENs of a boards file, a record
/// batch at a time.
fn for_fen_hashes(path: &Path, mut f: impl FnMut(&[u128])) -> Result<(), StatsError> {
    let mut hashes = Vec::new();
    for_file_column(path, "fen", |col, path| {
        let fens =
            col.as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| StatsError::Column {
                    path: path.to_owned(),
                    column: "fen",
                    expected: "string",
                })?;
        hashes.clear();
        hashes.extend(fens.iter().flatten().map(|fen| xxh3_128(fen.as_bytes())));
        f(&hashes);
        Ok(())
    })
}

/// A set of 128-bit FEN hashes: open addressing (linear probing, at most
/// 2/3 full, any number of slots: the home slot is the low word scaled to
/// the table), lookups in batches that prefetch their slots first, so a set
/// far bigger than the CPU caches (26.5M test boards at 10^7 games) costs
/// about one overlapped miss per probe rather than a chain of them.
/// Read-only while probed, so threads share it. [`SLOT_BYTES_PER_MEMBER`]
/// bytes per member.
struct HashSet128 {
    /// 0 marks an empty slot; the hash 0 itself is `zero`.
    slots: Vec<u128>,
    len: usize,
    zero: bool,
}

/// Which members of a [`HashSet128`] one prober found: a bit per slot.
struct Found {
    slots: Vec<u64>,
    zero: bool,
}

/// Probes prefetched ahead in [`HashSet128::probe`].
const LOOKAHEAD: usize = 16;

/// Slots per member (load factor 2/3: an unsuccessful probe, the common case
/// when train is probed, reads 5 slots on average, 80 bytes).
const SLOTS_PER_MEMBER: (usize, usize) = (3, 2);

/// Bytes a [`HashSet128`] takes per member: 16-byte slots at
/// [`SLOTS_PER_MEMBER`].
const SLOT_BYTES_PER_MEMBER: usize = 16 * SLOTS_PER_MEMBER.0 / SLOTS_PER_MEMBER.1;

impl HashSet128 {
    fn with_capacity(n: usize) -> HashSet128 {
        let slots = (n * SLOTS_PER_MEMBER.0 / SLOTS_PER_MEMBER.1 + 1).max(16);
        HashSet128 {
            slots: vec![0; slots],
            len: 0,
            zero: false,
        }
    }

    fn len(&self) -> usize {
        self.len + usize::from(self.zero)
    }

    /// Where `h`'s probe sequence starts: its low word scaled to the table.
    #[inline]
    fn home(&self, h: u128) -> usize {
        ((u128::from(h as u64) * self.slots.len() as u128) >> 64) as usize
    }

    /// The slot holding `h`, or the empty slot where it goes.
    #[inline]
    fn slot(&self, h: u128) -> usize {
        let mut i = self.home(h);
        while self.slots[i] != 0 && self.slots[i] != h {
            i += 1;
            if i == self.slots.len() {
                i = 0;
            }
        }
        i
    }

    fn insert(&mut self, h: u128) {
        if h == 0 {
            self.zero = true;
            return;
        }
        // At most 2/3 full.
        if (self.len + 1) * SLOTS_PER_MEMBER.0 > self.slots.len() * SLOTS_PER_MEMBER.1 {
            let old = std::mem::take(&mut self.slots);
            let zero = self.zero;
            *self = HashSet128::with_capacity(2 * self.len.max(8));
            self.zero = zero;
            old.into_iter()
                .filter(|&h| h != 0)
                .for_each(|h| self.insert(h));
        }
        let i = self.slot(h);
        if self.slots[i] == 0 {
            self.slots[i] = h;
            self.len += 1;
        }
    }

    fn found(&self) -> Found {
        Found {
            slots: vec![0; self.slots.len().div_ceil(64)],
            zero: false,
        }
    }

    /// Marks in `found` every member among `hashes`.
    fn probe(&self, hashes: &[u128], found: &mut Found) {
        for chunk in hashes.chunks(LOOKAHEAD) {
            for &h in chunk {
                prefetch(self.slots.as_ptr().wrapping_add(self.home(h)));
            }
            for &h in chunk {
                if h == 0 {
                    found.zero |= self.zero;
                    continue;
                }
                let i = self.slot(h);
                if self.slots[i] == h {
                    found.slots[i / 64] |= 1 << (i % 64);
                }
            }
        }
    }

    /// Members found by any of `found`.
    fn count_found(&self, found: &[Found]) -> usize {
        let zero = found.iter().any(|f| f.zero);
        let slots: u32 = (0..self.slots.len().div_ceil(64))
            .map(|w| {
                found
                    .iter()
                    .fold(0u64, |acc, f| acc | f.slots[w])
                    .count_ones()
            })
            .sum();
        slots as usize + usize::from(zero)
    }
}

/// A blocked Bloom filter over the same 128-bit hashes (Putze, Sanders and
/// Singler 2007): each member sets [`BLOOM_PROBES`] bits of one 64-byte
/// block, so asking costs one cache line. In front of [`HashSet128`] it
/// answers most train probes (train boards that are not test boards, the
/// vast majority) from a table ~15x smaller, which stays closer to the
/// caches; a false positive (about 1%) only costs the exact lookup.
struct Bloom {
    blocks: Vec<[u64; 8]>,
}

/// Bits of [`Bloom`] per member.
const BLOOM_BITS_PER_MEMBER: usize = 10;

/// Bits a member sets in its block (9 bits of the hash's low word each).
const BLOOM_PROBES: usize = 6;

impl Bloom {
    fn with_capacity(n: usize) -> Bloom {
        Bloom {
            blocks: vec![[0; 8]; (n * BLOOM_BITS_PER_MEMBER).div_ceil(512).max(1)],
        }
    }

    /// The block of `h`: the high word's low half, scaled (its high half
    /// chooses the pass, [`pass_of`]; the low word chooses the bits and
    /// [`HashSet128`]'s slot).
    #[inline]
    fn block(&self, h: u128) -> usize {
        let x = ((h >> 64) as u64).rotate_left(32);
        ((u128::from(x) * self.blocks.len() as u128) >> 64) as usize
    }

    #[inline]
    fn bits(h: u128) -> impl Iterator<Item = usize> {
        let lo = h as u64;
        (0..BLOOM_PROBES).map(move |j| ((lo >> (9 * j)) & 511) as usize)
    }

    fn insert(&mut self, h: u128) {
        let b = self.block(h);
        for bit in Bloom::bits(h) {
            self.blocks[b][bit / 64] |= 1 << (bit % 64);
        }
    }

    #[inline]
    fn may_contain(&self, h: u128) -> bool {
        let block = &self.blocks[self.block(h)];
        Bloom::bits(h).all(|bit| block[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

/// The test split's hashes (one pass's): the exact set and its filter.
struct TestSet {
    set: HashSet128,
    bloom: Bloom,
}

impl TestSet {
    fn with_capacity(n: usize) -> TestSet {
        TestSet {
            set: HashSet128::with_capacity(n),
            bloom: Bloom::with_capacity(n),
        }
    }

    fn insert(&mut self, h: u128) {
        self.set.insert(h);
        self.bloom.insert(h);
    }

    /// Marks in `found` every member among `hashes`: the filter first (its
    /// blocks prefetched a chunk ahead), the exact set for what passes it.
    fn probe(&self, hashes: &[u128], found: &mut Found, maybe: &mut Vec<u128>) {
        maybe.clear();
        for chunk in hashes.chunks(LOOKAHEAD) {
            for &h in chunk {
                prefetch(self.bloom.blocks.as_ptr().wrapping_add(self.bloom.block(h)));
            }
            maybe.extend(chunk.iter().filter(|&&h| self.bloom.may_contain(h)));
        }
        self.set.probe(maybe, found);
    }
}

/// Memory [`overlap`] keeps for what is not its test set: the Parquet
/// readers' buffers and a batch of hashes per thread.
const OVERLAP_READERS_BYTES: u64 = 128 << 20;

/// What `stats` holds within `--memory-limit`: only the test-in-train
/// overlap grows with the run.
pub const MEMORY: Memory<2> = Memory([
    Consumer::new(
        "the Parquet readers' buffers and a batch of hashes a thread",
        Share::Buffers {
            first: OVERLAP_READERS_BYTES,
            each_thread: 0,
        },
    ),
    Consumer::new(
        "the test split's FEN hashes for the test-in-train overlap (a split that does not fit \
         is hashed in passes, train read once a pass)",
        Share::Rest { at_least: (1, 2) },
    ),
]);

/// How many passes [`overlap`] makes so that one pass's set of `test_boards`
/// hashes (and `threads` probers' found-bits) stays within its share of
/// `memory_limit` ([`MEMORY`]).
fn overlap_passes(test_boards: u64, threads: usize, memory_limit: u64) -> u64 {
    let per_member = SLOT_BYTES_PER_MEMBER as f64
        + BLOOM_BITS_PER_MEMBER as f64 / 8.0
        + threads as f64 * SLOTS_PER_MEMBER.0 as f64 / SLOTS_PER_MEMBER.1 as f64 / 8.0;
    let [_, hashes] = MEMORY.share(memory_limit, threads);
    let budget = hashes.max(1);
    ((test_boards as f64 * per_member / budget as f64).ceil() as u64).max(1)
}

/// Members to size one pass's set for: all `test_boards` in one pass; with
/// more, an even share plus 6 standard deviations of the binomial spread
/// (so a pass with more than its share does not double its set while it
/// fills: the passes were counted to fit the budget).
fn pass_capacity(test_boards: u64, passes: u64) -> usize {
    if passes <= 1 {
        return test_boards as usize;
    }
    let share = test_boards / passes;
    (share + 6 * (share as f64).sqrt().ceil() as u64 + 64) as usize
}

/// Which of `passes` passes a hash belongs to (its high word scaled).
#[inline]
fn pass_of(h: u128, passes: u64) -> u64 {
    ((u128::from((h >> 64) as u64) * u128::from(passes)) >> 64) as u64
}

/// Fraction of `test` boards that occur in `train`: a set of 128-bit FEN
/// hashes of the test split (the small one in the paper's setup), probed
/// with train's (collision odds below 1e-20 at ChessBench scale). The set
/// takes [`SLOT_BYTES_PER_MEMBER`] bytes per test board and its Bloom filter
/// [`BLOOM_BITS_PER_MEMBER`] bits; when that passes
/// `memory_limit`, the hashes are split by value into passes that each fit,
/// and train is read once per pass.
/// Returns the fraction (None without test boards) and the passes made.
pub(crate) fn overlap(
    run: &Path,
    train: &str,
    test: &str,
    memory_limit: u64,
) -> Result<(Option<f64>, u64), StatsError> {
    let test_dir = partition(run, Table::Boards, test);
    let rows: u64 = rows_and_bytes(&test_dir)?.0.values().sum();
    let test_files = parquet_files(&test_dir)?;
    // Train's files are probed by one thread per core.
    let files = parquet_files(&partition(run, Table::Boards, train))?;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len())
        .max(1);
    let passes = overlap_passes(rows, threads, memory_limit);
    let (mut members, mut found_members) = (0usize, 0usize);
    for pass in 0..passes {
        let mine = |h: &u128| passes == 1 || pass_of(*h, passes) == pass;
        let mut test_set = TestSet::with_capacity(pass_capacity(rows, passes));
        for path in &test_files {
            for_fen_hashes(path, |hashes| {
                hashes
                    .iter()
                    .filter(|h| mine(h))
                    .for_each(|&h| test_set.insert(h));
            })?;
        }
        if test_set.set.len() == 0 {
            continue;
        }
        let next = AtomicUsize::new(0);
        let set = &test_set;
        let found = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| -> Result<Found, StatsError> {
                        let mut found = set.set.found();
                        let (mut own, mut maybe) = (Vec::new(), Vec::new());
                        while let Some(path) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                            for_fen_hashes(path, |hashes| {
                                if passes == 1 {
                                    set.probe(hashes, &mut found, &mut maybe);
                                } else {
                                    own.clear();
                                    own.extend(hashes.iter().filter(|h| mine(h)));
                                    set.probe(&own, &mut found, &mut maybe);
                                }
                            })?;
                        }
                        Ok(found)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<Result<Vec<Found>, StatsError>>()
        })?;
        members += test_set.set.len();
        found_members += test_set.set.count_found(&found);
    }
    let fraction = (members > 0).then(|| found_members as f64 / members as f64);
    Ok((fraction, passes))
}

/// Computes Table A1 for the run within `config.memory_limit` bytes (the
/// test-in-train overlap is the only part whose memory grows with the run).
pub fn run(config: &StatsConfig) -> Result<RunStats, StatsError> {
    let (run, memory_limit): (&Path, u64) = (&config.run, config.memory_limit);
    let mut stats = RunStats::default();
    for split in splits(run)? {
        let mut s = SplitStats::default();
        for table in Table::ALL {
            let (by_source, bytes) = rows_and_bytes(&partition(run, table, &split))?;
            s.bytes.insert(table.name(), bytes);
            let rows = by_source.get(&Source::Stockfish).copied().unwrap_or(0);
            let others = s.other_sources.0.iter_mut();
            let others = others.map(|(source, r)| (r, by_source.get(source).copied().unwrap_or(0)));
            match table {
                Table::Games => s.games = rows,
                Table::Boards => s.state_value = rows,
                Table::LegalMoves => s.action_value = rows,
                Table::Rejects => s.rejected = rows,
                Table::StateValues => {
                    s.state_values = rows;
                    others.for_each(|(r, n)| r.state_values = n);
                }
                Table::ActionValues => {
                    s.action_values = rows;
                    others.for_each(|(r, n)| r.action_values = n);
                }
                Table::Failures => s.failures = rows,
            }
        }
        let mut bc = 0u64;
        for_column(
            &partition(run, Table::Boards, &split),
            "num_legal_moves",
            |col, path| {
                let n = col.as_any().downcast_ref::<UInt8Array>().ok_or_else(|| {
                    StatsError::Column {
                        path: path.to_owned(),
                        column: "num_legal_moves",
                        expected: "uint8",
                    }
                })?;
                bc += n.values().iter().filter(|&&v| v > 0).count() as u64;
                Ok(())
            },
        )?;
        s.behavioral_cloning = bc;
        stats.splits.insert(split, s);
    }
    if stats.splits.contains_key("train") && stats.splits.contains_key("test") {
        let (fraction, passes) = overlap(run, "train", "test", memory_limit)?;
        stats.test_in_train = fraction;
        stats.overlap_passes = Some(passes);
    }
    Ok(stats)
}

/// The paper's Table A1 (Ruoss et al. 2024), for comparison.
pub(crate) const PAPER_TABLE_A1: [(&str, u64, u64, u64, u64); 5] = [
    ("train 1e4", 10_000, 591_897, 589_130, 17_373_887),
    ("train 1e5", 100_000, 5_747_753, 5_720_672, 167_912_926),
    (
        "train 1e6",
        1_000_000,
        55_259_971,
        54_991_050,
        1_606_372_407,
    ),
    (
        "train 1e7",
        10_000_000,
        530_310_443,
        527_633_465,
        15_316_914_724,
    ),
    ("test 1e3", 1_000, 62_829, 62_561, 1_838_218),
];

/// Bytes per record of a table, or "-".
fn per_record(s: &SplitStats, table: &str, n: u64) -> String {
    if n == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}", *s.bytes.get(table).unwrap_or(&0) as f64 / n as f64)
    }
}

impl crate::ui::Report for RunStats {
    fn render(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(render(self).as_bytes())
    }
}

/// Human-readable Table A1 (and annotation progress, once there is some).
fn render(stats: &RunStats) -> String {
    use crate::ui::group;
    let mut out = String::new();
    out.push_str(&format!(
        "{:<12} {:>12} {:>14} {:>18} {:>16} {:>10} {:>10}\n",
        "split",
        "games",
        "state_value",
        "behavioral_cloning",
        "action_value",
        "SV B/rec",
        "AV B/rec"
    ));
    for (name, s) in &stats.splits {
        let per = |table: &str, n: u64| per_record(s, table, n);
        out.push_str(&format!(
            "{:<12} {:>12} {:>14} {:>18} {:>16} {:>10} {:>10}\n",
            name,
            group(s.games),
            group(s.state_value),
            group(s.behavioral_cloning),
            group(s.action_value),
            per("boards", s.state_value),
            per("legal_moves", s.action_value),
        ));
    }
    if stats
        .splits
        .values()
        .any(|s| s.state_values + s.failures + s.other_sources.state_values() > 0)
    {
        out.push_str(&format!(
            "\n{:<12} {:>14} {:>16} {:>10} {:>10}\n",
            "annotated", "state_values", "action_values", "failures", "AV B/rec"
        ));
        for (name, s) in &stats.splits {
            out.push_str(&format!(
                "{:<12} {:>14} {:>16} {:>10} {:>10}\n",
                name,
                format!("{}/{}", group(s.state_values), group(s.state_value)),
                group(s.action_values),
                group(s.failures),
                per_record(
                    s,
                    "action_values",
                    s.action_values + s.other_sources.action_values()
                ),
            ));
        }
    }
    for source in Source::ALL.into_iter().filter(|s| *s != Source::Stockfish) {
        let rows = |s: &SplitStats| s.other_sources.0.get(&source).copied().unwrap_or_default();
        if stats.splits.values().all(|s| rows(s).state_values == 0) {
            continue;
        }
        out.push_str(&format!(
            "\n{:<12} {:>14} {:>16}   (chessbench sql RUN label_sources)\n",
            source.name(),
            "state_values",
            "action_values"
        ));
        for (name, s) in &stats.splits {
            let r = rows(s);
            out.push_str(&format!(
                "{:<12} {:>14} {:>16}\n",
                name,
                format!("{}/{}", group(r.state_values), group(s.state_value)),
                group(r.action_values),
            ));
        }
    }
    match stats.test_in_train {
        Some(f) => out.push_str(&format!(
            "\ntest boards also in train: {:.1}% (the paper reports 14.7%)\n",
            100.0 * f
        )),
        None => out.push_str("\ntest boards also in train: n/a (needs a train and a test split)\n"),
    }
    out.push_str("\nPaper, Table A1 (for scale):\n");
    for (name, g, sv, bc, av) in PAPER_TABLE_A1 {
        out.push_str(&format!(
            "{:<12} {:>12} {:>14} {:>18} {:>16}\n",
            name,
            group(g),
            group(sv),
            group(bc),
            group(av)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_set_counts_distinct_members_found() {
        // Start small so the set grows; include 0 and repeats.
        let mut set = HashSet128::with_capacity(2);
        let member = |i: u128| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for i in (0..1000u128).chain(0..1000) {
            set.insert(member(i));
        }
        assert_eq!(set.len(), 1000);
        // Two probers: every third member (twice), every fifth, and
        // strangers; 0 (a member) by the second only.
        let (mut a, mut b) = (set.found(), set.found());
        let thirds: Vec<u128> = (1..1000u128).step_by(3).map(member).collect();
        let strangers: Vec<u128> = (1..500u128).map(|i| (i << 64) | 7).collect();
        set.probe(&thirds, &mut a);
        set.probe(&thirds, &mut a);
        set.probe(&strangers, &mut a);
        let fifths: Vec<u128> = (0..1000u128).step_by(5).map(member).collect();
        set.probe(&fifths, &mut b);
        let expected = (0..1000).filter(|i| i % 5 == 0 || i % 3 == 1).count();
        assert_eq!(set.count_found(&[a, b]), expected);
        // Never more than 2/3 full.
        assert!(
            3 * set.len <= 2 * set.slots.len(),
            "{} in {}",
            set.len,
            set.slots.len()
        );
    }

    #[test]
    fn bloom_filter_never_misses_a_member_and_rarely_admits_a_stranger() {
        let member = |i: u128| i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        let mut test = TestSet::with_capacity(10_000);
        (0..10_000u128).for_each(|i| test.insert(member(i)));
        assert!((0..10_000u128).all(|i| test.bloom.may_contain(member(i))));
        let strangers = (10_000..110_000u128)
            .filter(|&i| test.bloom.may_contain(member(i)))
            .count();
        assert!(
            strangers < 3_000,
            "{strangers} of 100,000 strangers admitted"
        );
        // Through the filter, the exact set still finds exactly the members.
        let (mut found, mut maybe) = (test.set.found(), Vec::new());
        let probes: Vec<u128> = (5_000..15_000u128).map(member).collect();
        test.probe(&probes, &mut found, &mut maybe);
        assert_eq!(test.set.count_found(&[found]), 5_000);
    }

    #[test]
    fn a_pass_with_more_than_its_share_fits_its_set() {
        let h = |i: u128| i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        for (n, passes) in [(30_000u64, 3u64), (92_459, 4), (1_000, 7)] {
            let mut counts = vec![0usize; passes as usize];
            (0..u128::from(n)).for_each(|i| counts[pass_of(h(i), passes) as usize] += 1);
            let most = counts.iter().max().copied().unwrap_or(0);
            assert!(
                most <= pass_capacity(n, passes),
                "{n} in {passes}: {counts:?}"
            );
        }
        assert_eq!(pass_capacity(1_000, 1), 1_000);
    }

    #[test]
    fn overlap_passes_fit_the_budget() {
        // 24 bytes a board plus 1.5 bits per prober: 26.5M test boards (10^7
        // games) fit 2 GiB in one pass, 100M do not.
        assert_eq!(overlap_passes(26_500_000, 2, 2 << 30), 1);
        assert_eq!(overlap_passes(100_000_000, 2, 2 << 30), 2);
        assert_eq!(overlap_passes(0, 2, 2 << 30), 1);
        // Small budgets keep half for the set.
        assert_eq!(overlap_passes(92_459, 1, 1200 << 10), 4);
        assert_eq!(overlap_passes(92_459, 2, 1200 << 10), 4);
        // Every hash falls in exactly one pass, and passes split evenly.
        let mut counts = [0u32; 3];
        for i in 0..30_000u128 {
            counts
                [pass_of(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835), 3) as usize] +=
                1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
    }
}
