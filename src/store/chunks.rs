//! Chunked commits: how the value tables of a split are written chunk by
//! chunk, so that a killed process resumes where it stopped and any number
//! of shards (Slurm array tasks, Kubernetes pods) write one run at once.
//!
//! Chunk `c` of a split holds boards `[c * C, (c + 1) * C)` (C, a power of
//! two dividing the boards part size, so a chunk never straddles a part
//! file). Chunk `c` belongs to shard `xxh3(c) mod N`, a deterministic,
//! balanced slice that any number of processes compute independently.
//!
//! Each source of values has its own files over the same chunks, named by
//! its [`Source`]: `chunk-NNNNNNNN` for Stockfish's searches, `evals-NNNNNNNN`
//! for the Lichess evaluation database. A chunk of one source commits in three
//! steps:
//! 1. its rows are written to `TABLE/split=S/STEM-NNNNNNNN.parquet.tmp`
//!    ([`write_table`]), fsynced;
//! 2. its entry `annotate/split=S/STEM-NNNNNNNN.json` is written atomically
//!    ([`commit`]): this is the commit point;
//! 3. the `.tmp` files are renamed to their final names.
//!
//! Each step is durable before the next: the `.tmp` files are fsynced and
//! so are their directories (their names) before the entry is written; the
//! entry's file is fsynced, renamed into place and its directory fsynced;
//! the renames are followed by an fsync of each directory. A power loss
//! therefore never leaves a durable entry whose files are gone: at worst
//! it leaves `.tmp` files under an entry, which recovery rolls forward.
//!
//! On start, each process repairs its own shard's chunks ([`recover`]): an
//! entry with `.tmp` files left rolls forward (step 3), files without an
//! entry are deleted (`.tmp` files of a commit killed before step 2, and
//! files a withdrawal killed halfway left). A committed chunk is withdrawn
//! ([`uncommit`], to be written again) in the opposite order: its entry
//! first, then its files. Readers glob `*.parquet` and never see a `.tmp`;
//! [`interrupted_commit`] finds a commit caught between steps 2 and 3. A
//! chunk's rows exist exactly once, whatever was killed when.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_select::concat::concat_batches;
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::{
    commit::{
        partition_dir, remove_dir_if_exists, remove_file_if_exists, rename, sync_dir, write_atomic,
    },
    error::StoreError,
    failpoint,
    files::{open_columns, open_parquet, parquet_files},
    schema::Table,
    source::Source,
    writer::PartWriter,
};

/// Directory of chunk entries inside a run (the annotate stage's record of
/// committed chunks).
pub(crate) const ENTRIES: &str = "annotate";
const SHARD_SEED: u64 = 0x6368_6573_7362_656e; // "chessben"

/// The shard a chunk belongs to.
pub(crate) fn chunk_shard(chunk: u64, count: u32) -> u32 {
    if count <= 1 {
        return 0;
    }
    (xxh3_64_with_seed(&chunk.to_le_bytes(), SHARD_SEED) % u64::from(count)) as u32
}

/// `chunk-00000012`: a chunk's name among its source's files.
pub(crate) fn chunk_name(source: Source, chunk: u64) -> String {
    format!("{}{chunk:08}", source.stem())
}

/// `RUN/annotate/split=S`: the split's chunk entries (and its
/// `settings.json`).
pub(crate) fn entries_dir(run: &Path, split: &str) -> PathBuf {
    run.join(ENTRIES).join(format!("split={split}"))
}

fn entry_path(run: &Path, split: &str, source: Source, chunk: u64) -> PathBuf {
    entries_dir(run, split).join(format!("{}.json", chunk_name(source, chunk)))
}

fn data_path(
    run: &Path,
    table: Table,
    split: &str,
    source: Source,
    chunk: u64,
    tmp: bool,
) -> PathBuf {
    let name = format!(
        "{}.parquet{}",
        chunk_name(source, chunk),
        if tmp { ".tmp" } else { "" }
    );
    run.join(partition_dir(table, split)).join(name)
}

/// The chunk number of a file name `STEM-N.parquet` (`tmp` false) or
/// `STEM-N.parquet.tmp` (`tmp` true).
fn chunk_of(source: Source, name: &str) -> Option<(u64, bool)> {
    let rest = name.strip_prefix(source.stem())?;
    let (num, tmp) = match rest.strip_suffix(".parquet.tmp") {
        Some(n) => (n, true),
        None => (rest.strip_suffix(".parquet")?, false),
    };
    Some((num.parse().ok()?, tmp))
}

/// Committed chunks of a split and source (from the entries directory).
pub(crate) fn committed(
    run: &Path,
    split: &str,
    source: Source,
) -> Result<BTreeSet<u64>, StoreError> {
    let dir = entries_dir(run, split);
    let mut done = BTreeSet::new();
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(done),
        Err(e) => return Err(StoreError::io(&dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
        let name = entry.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix(source.stem()))
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            done.insert(n);
        }
    }
    Ok(done)
}

/// The files of a split's value tables of one source, as (table, chunk,
/// whether it is a `.tmp` file, path).
fn source_files(
    run: &Path,
    split: &str,
    source: Source,
) -> Result<Vec<(Table, u64, bool, PathBuf)>, StoreError> {
    let mut found = Vec::new();
    for table in Table::ANNOTATE {
        let dir = run.join(partition_dir(table, split));
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(StoreError::io(&dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
            if let Some((chunk, tmp)) = entry
                .file_name()
                .to_str()
                .and_then(|name| chunk_of(source, name))
            {
                found.push((table, chunk, tmp, entry.path()));
            }
        }
    }
    Ok(found)
}

/// The `.tmp` files of a split's value tables of one source, as (table,
/// chunk, path).
fn tmp_files(
    run: &Path,
    split: &str,
    source: Source,
) -> Result<Vec<(Table, u64, PathBuf)>, StoreError> {
    Ok(source_files(run, split, source)?
        .into_iter()
        .filter(|f| f.2)
        .map(|(table, chunk, _, path)| (table, chunk, path))
        .collect())
}

/// Repairs the chunks of one source and shard (index, count) after a crash:
/// rolls committed chunks forward, deletes the files of uncommitted ones
/// (`.tmp` files a crash left before the commit point, and files under
/// their final names whose entry [`uncommit`] or [`remove_source`] removed
/// before a crash). Returns the committed chunks.
pub(crate) fn recover(
    run: &Path,
    split: &str,
    source: Source,
    shard: (u32, u32),
) -> Result<BTreeSet<u64>, StoreError> {
    let done = committed(run, split, source)?;
    for (table, chunk, tmp, path) in source_files(run, split, source)? {
        if chunk_shard(chunk, shard.1) != shard.0 {
            continue; // another shard's, maybe being written right now
        }
        // A file that is gone meanwhile was repaired by another process
        // holding the same source's lock shared (the evaluation database's
        // readers): nothing left to do for it.
        let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        if done.contains(&chunk) {
            if tmp {
                let to = data_path(run, table, split, source, chunk, false);
                match rename(&path, &to) {
                    Err(e) if !gone(&e) => return Err(StoreError::io(&to, e)),
                    _ => {}
                }
                sync_dir(to.parent());
            }
        } else if tmp || !entry_path(run, split, source, chunk).exists() {
            // A final-name file is deleted only when its entry is missing
            // by its own name too, not just from the listing (a network
            // file system may list a directory from a stale cache).
            match fs::remove_file(&path) {
                Err(e) if !gone(&e) => return Err(StoreError::io(&path, e)),
                _ => {}
            }
        }
    }
    for path in entry_temporaries(run, split, source, shard)? {
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(StoreError::io(&path, e));
            }
            _ => {}
        }
    }
    Ok(done)
}

/// The temporary files of entries of `shard`'s chunks
/// (`chunk-00000002.json.PID-N.tmp`, [`crate::store::commit::write_atomic`]'s):
/// a writer killed between creating one and renaming it leaves it behind.
/// Its chunk has no entry, so recovery redoes the chunk; the file itself is
/// only debris, removed by the next writer of the shard, which holds the
/// shard's lock.
fn entry_temporaries(
    run: &Path,
    split: &str,
    source: Source,
    shard: (u32, u32),
) -> Result<Vec<PathBuf>, StoreError> {
    let dir = entries_dir(run, split);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(&dir, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
        let name = entry.file_name();
        let chunk = name
            .to_str()
            .filter(|n| n.ends_with(".tmp"))
            .and_then(|n| n.strip_prefix(source.stem()))
            .and_then(|n| n.split_once(".json."))
            .and_then(|(n, _)| n.parse::<u64>().ok());
        if let Some(chunk) = chunk
            && chunk_shard(chunk, shard.1) == shard.0
        {
            found.push(entry.path());
        }
    }
    Ok(found)
}

/// The entry of a committed chunk, or `None` if it has none.
pub(crate) fn read_entry<E: serde::de::DeserializeOwned>(
    run: &Path,
    split: &str,
    source: Source,
    chunk: u64,
) -> Result<Option<E>, StoreError> {
    let path = entry_path(run, split, source, chunk);
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(path, e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(&path, e)),
    }
}

/// Takes a committed chunk back, so that it is written again: its entry
/// goes first (the commit point, undone), then its files. A crash between
/// leaves files without an entry, which [`recover`] deletes.
pub(crate) fn uncommit(
    run: &Path,
    split: &str,
    source: Source,
    chunk: u64,
) -> Result<(), StoreError> {
    remove_file_if_exists(&entry_path(run, split, source, chunk))?;
    for table in Table::ANNOTATE {
        for tmp in [false, true] {
            remove_file_if_exists(&data_path(run, table, split, source, chunk, tmp))?;
        }
    }
    Ok(())
}

/// The rows of one table of a committed chunk (its file under the final
/// name), in file order; `None` when the chunk has no file for the table.
pub(crate) fn read_table(
    run: &Path,
    split: &str,
    source: Source,
    chunk: u64,
    table: Table,
) -> Result<Option<RecordBatch>, StoreError> {
    let path = data_path(run, table, split, source, chunk, false);
    if !path.exists() {
        return Ok(None);
    }
    let reader = open_parquet(&path)?
        .build()
        .map_err(|e| StoreError::parquet(&path, e))?;
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Corrupt(path.clone(), e.to_string()))?;
    concat_batches(&table.schema(), &batches)
        .map(Some)
        .map_err(|e| StoreError::Corrupt(path, e.to_string()))
}

/// The chunks of a split and source with a `failures` file (those holding a
/// board the engine could not annotate: a chunk without failures writes no
/// such file) that `wanted` accepts, each with its failed board ids. One
/// directory listing, then only the wanted files are read (a shard reads
/// its own).
pub(crate) fn failed_boards(
    run: &Path,
    split: &str,
    source: Source,
    wanted: impl Fn(u64) -> bool,
) -> Result<Vec<(u64, Vec<u64>)>, StoreError> {
    let mut found = Vec::new();
    for (table, chunk, tmp, _) in source_files(run, split, source)? {
        if table != Table::Failures || tmp || !wanted(chunk) {
            continue;
        }
        let Some(batch) = read_table(run, split, source, chunk, table)? else {
            continue;
        };
        let ids = batch
            .column(0)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| {
                StoreError::Corrupt(
                    data_path(run, table, split, source, chunk, false),
                    "board_id is not u64".into(),
                )
            })?;
        found.push((chunk, ids.values().to_vec()));
    }
    found.sort();
    Ok(found)
}

/// A chunk committed (its entry exists) whose file is still under its
/// temporary name: a commit in progress, or one a crash interrupted, which
/// the next annotate of that shard completes. Readers refuse such a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InterruptedCommit {
    pub table: Table,
    pub split: String,
    pub chunk: u64,
    pub path: PathBuf,
}

/// The first interrupted commit of any split of the run, if any.
pub(crate) fn interrupted_commit(run: &Path) -> Result<Option<InterruptedCommit>, StoreError> {
    let Ok(dirs) = fs::read_dir(run.join(ENTRIES)) else {
        return Ok(None);
    };
    for dir in dirs.flatten() {
        let name = dir.file_name();
        let Some(split) = name.to_str().and_then(|n| n.strip_prefix("split=")) else {
            continue;
        };
        for source in Source::ALL {
            let done = committed(run, split, source)?;
            if let Some((table, chunk, path)) = tmp_files(run, split, source)?
                .into_iter()
                .find(|(_, chunk, _)| done.contains(chunk))
            {
                return Ok(Some(InterruptedCommit {
                    table,
                    split: split.to_owned(),
                    chunk,
                    path,
                }));
            }
        }
    }
    Ok(None)
}

/// Deletes a split's value tables and chunk entries: they describe boards
/// that an ingest or import has just replaced, or the user asked to start
/// over.
pub(crate) fn remove_split(run: &Path, split: &str) -> Result<(), StoreError> {
    remove_dir_if_exists(&entries_dir(run, split))?;
    for table in Table::ANNOTATE {
        remove_dir_if_exists(&run.join(partition_dir(table, split)))?;
    }
    Ok(())
}

/// Deletes the committed chunks of one source of a split, entries and files
/// (the chunks of the other source stay). Entries go first: a crash between
/// leaves files without entries, which [`recover`] deletes, never entries
/// without their files.
pub(crate) fn remove_source(run: &Path, split: &str, source: Source) -> Result<(), StoreError> {
    for chunk in committed(run, split, source)? {
        let path = entry_path(run, split, source, chunk);
        fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
    }
    sync_dir(Some(&entries_dir(run, split)));
    for (_, _, _, path) in source_files(run, split, source)? {
        fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
    }
    Ok(())
}

/// Deletes the temporary files of a chunk that failed before its commit
/// point (a full disk, say), so that nothing of it is left taking room; the
/// next annotate would delete them too ([`recover`]). Best effort: a file
/// that cannot be removed is left for that.
pub(crate) fn discard(run: &Path, split: &str, source: Source, chunk: u64) {
    for table in Table::ANNOTATE {
        let _ = fs::remove_file(data_path(run, table, split, source, chunk, true));
    }
}

/// Step 1: writes one table's rows of a chunk under the temporary name
/// (fsynced); [`commit`] publishes it.
pub(crate) fn write_table(
    run: &Path,
    split: &str,
    source: Source,
    chunk: u64,
    table: Table,
    batch: &RecordBatch,
) -> Result<(), StoreError> {
    let dir = run.join(partition_dir(table, split));
    fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
    let path = data_path(run, table, split, source, chunk, true);
    let mut w = PartWriter::create(&path, table)?;
    w.write(batch)?;
    w.finish().map(drop)
}

/// Writes a chunk's tables and commits them with the entry
/// `entry(tables written)`: steps 1 to 3. A table without rows is left out,
/// but `state_values`, whose file marks the chunk as annotated for readers.
/// On an error before the commit point nothing of the chunk stays (on a
/// full disk its files' room is freed; a resume writes it again).
pub(crate) fn write_chunk<E: Serialize>(
    run: &Path,
    split: &str,
    source: Source,
    chunk: u64,
    columns: Vec<(Table, Vec<ArrayRef>)>,
    entry: impl FnOnce(&[Table]) -> E,
) -> Result<E, StoreError> {
    let mut tables = Vec::new();
    let written = columns.into_iter().try_for_each(|(table, columns)| {
        let batch = RecordBatch::try_new(table.schema(), columns).map_err(|e| {
            StoreError::Corrupt(run.join(partition_dir(table, split)), e.to_string())
        })?;
        if batch.num_rows() == 0 && table != Table::StateValues {
            return Ok(());
        }
        write_table(run, split, source, chunk, table, &batch)?;
        tables.push(table);
        Ok(())
    });
    if let Err(e) = written {
        discard(run, split, source, chunk);
        return Err(e);
    }
    failpoint::hit(failpoint::Point::ChunkWritten);
    let entry = entry(&tables);
    commit(run, split, source, chunk, &entry, &tables)?;
    Ok(entry)
}

/// Steps 2 and 3: writes the chunk's entry atomically (the commit point),
/// then renames the files [`write_table`] wrote for `tables`. If the entry
/// cannot be written the chunk's files are [`discard`]ed.
pub(crate) fn commit(
    run: &Path,
    split: &str,
    source: Source,
    chunk: u64,
    entry: &impl Serialize,
    tables: &[Table],
) -> Result<(), StoreError> {
    let dir = entries_dir(run, split);
    fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
    // The files' names durable before the entry that publishes them
    // (their data is: `write_table` fsynced each file), and the
    // directories' own names, up to the run's, which a first chunk created.
    let partitions = || {
        tables
            .iter()
            .map(|&table| run.join(partition_dir(table, split)))
            .collect::<BTreeSet<_>>()
    };
    for partition in partitions() {
        sync_dir(Some(&partition));
        sync_dir(partition.parent());
    }
    sync_dir(dir.parent());
    // The tables' and `annotate`'s own names, which a run's first chunk
    // may have created.
    sync_dir(Some(run));
    let bytes = serde_json::to_vec_pretty(entry)
        .map_err(|e| StoreError::Corrupt(dir.clone(), e.to_string()))?;
    if let Err(e) = write_atomic(&entry_path(run, split, source, chunk), &bytes) {
        discard(run, split, source, chunk);
        return Err(e);
    }
    failpoint::hit(failpoint::Point::EntryWritten);
    for (i, &table) in tables.iter().enumerate() {
        let to = data_path(run, table, split, source, chunk, false);
        rename(&data_path(run, table, split, source, chunk, true), &to)
            .map_err(|e| StoreError::io(&to, e))?;
        if i == 0 {
            failpoint::hit(failpoint::Point::FirstRename);
        }
    }
    for partition in partitions() {
        sync_dir(Some(&partition));
    }
    Ok(())
}

/// The board ids of a split that any of `sources` labels (their committed
/// state values), sorted and distinct: for the evaluation database, the
/// boards `--only-missing` leaves to it; for the sources that override
/// one under `--label-source both` ([`Source::overridden_by`]), the boards
/// whose rows of that one are skipped. 8 bytes a labelled board.
pub(crate) fn labelled_boards(
    run: &Path,
    split: &str,
    sources: impl IntoIterator<Item = Source>,
) -> Result<Vec<u64>, StoreError> {
    let sources: Vec<Source> = sources.into_iter().collect();
    let mut ids = Vec::new();
    for path in parquet_files(&run.join(partition_dir(Table::StateValues, split)))? {
        let labels = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| sources.contains(&Source::of_file(n)));
        if !labels {
            continue;
        }
        let reader = open_columns(&path, &["board_id"])?
            .build()
            .map_err(|e| StoreError::parquet(&path, e))?;
        for batch in reader {
            let batch = batch.map_err(|e| StoreError::Corrupt(path.clone(), e.to_string()))?;
            let col = batch
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| {
                    StoreError::Corrupt(path.clone(), "board_id is not uint64".into())
                })?;
            ids.extend(col.values().iter().copied());
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Source = Source::Stockfish;

    #[test]
    fn shards_partition_the_chunks_evenly() {
        let n = 4;
        let mut counts = [0u32; 4];
        for c in 0..4000 {
            let s = chunk_shard(c, n);
            counts[s as usize] += 1;
            assert_eq!(chunk_shard(c, 1), 0);
        }
        for c in counts {
            assert!((900..1100).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn file_names() {
        let s = Source::Stockfish;
        assert_eq!(chunk_of(s, "chunk-00000007.parquet"), Some((7, false)));
        assert_eq!(chunk_of(s, "chunk-00000007.parquet.tmp"), Some((7, true)));
        assert_eq!(chunk_of(s, "part-00000.parquet"), None);
        assert_eq!(chunk_of(s, "chunk-x.parquet"), None);
        assert_eq!(chunk_of(s, "evals-00000007.parquet"), None);
        assert_eq!(
            chunk_of(Source::LichessEvals, "evals-00000007.parquet"),
            Some((7, false))
        );
    }

    /// Each source's chunks commit, list and go on their own.
    #[test]
    fn stems_keep_their_own_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let batch = RecordBatch::new_empty(Table::StateValues.schema());
        for source in Source::ALL {
            write_table(run, "train", source, 3, Table::StateValues, &batch).unwrap();
            commit(
                run,
                "train",
                source,
                3,
                &serde_json::json!({}),
                &[Table::StateValues],
            )
            .unwrap();
        }
        write_table(
            run,
            "train",
            Source::LichessEvals,
            4,
            Table::StateValues,
            &batch,
        )
        .unwrap();
        assert_eq!(
            recover(run, "train", Source::Stockfish, (0, 1)).unwrap(),
            BTreeSet::from([3])
        );
        // Stockfish's recovery leaves the other source's files alone.
        assert!(
            data_path(
                run,
                Table::StateValues,
                "train",
                Source::LichessEvals,
                4,
                true
            )
            .exists()
        );
        assert_eq!(
            recover(run, "train", Source::LichessEvals, (0, 1)).unwrap(),
            BTreeSet::from([3])
        );
        assert!(
            !data_path(
                run,
                Table::StateValues,
                "train",
                Source::LichessEvals,
                4,
                true
            )
            .exists()
        );
        remove_source(run, "train", Source::LichessEvals).unwrap();
        assert!(
            committed(run, "train", Source::LichessEvals)
                .unwrap()
                .is_empty()
        );
        assert!(
            !data_path(
                run,
                Table::StateValues,
                "train",
                Source::LichessEvals,
                3,
                false
            )
            .exists()
        );
        assert_eq!(
            committed(run, "train", Source::Stockfish).unwrap(),
            BTreeSet::from([3])
        );
        assert!(
            data_path(
                run,
                Table::StateValues,
                "train",
                Source::Stockfish,
                3,
                false
            )
            .exists()
        );
    }

    #[test]
    fn an_uncommitted_chunk_is_gone_and_leftovers_of_a_killed_withdrawal_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let batch = RecordBatch::new_empty(Table::StateValues.schema());
        let entry = serde_json::json!({"chunk": 3, "failures": 1});
        for chunk in [3, 4] {
            write_table(run, "train", S, chunk, Table::StateValues, &batch).unwrap();
            commit(run, "train", S, chunk, &entry, &[Table::StateValues]).unwrap();
        }
        let read: Option<serde_json::Value> = read_entry(run, "train", S, 3).unwrap();
        assert_eq!(read, Some(entry));
        assert_eq!(
            read_entry::<serde_json::Value>(run, "train", S, 5).unwrap(),
            None
        );
        uncommit(run, "train", S, 3).unwrap();
        assert!(!data_path(run, Table::StateValues, "train", S, 3, false).exists());
        assert_eq!(committed(run, "train", S).unwrap(), BTreeSet::from([4]));
        // A crash between an uncommit's two steps: chunk 4's entry gone,
        // its file left under its final name; recovery deletes the file.
        fs::remove_file(entry_path(run, "train", S, 4)).unwrap();
        assert_eq!(recover(run, "train", S, (0, 1)).unwrap(), BTreeSet::new());
        assert!(!data_path(run, Table::StateValues, "train", S, 4, false).exists());
    }

    /// A chunk's commit is durable in order: every file's data and its
    /// directory's names before the entry, the entry's own file before its
    /// rename and its directory after it, then the renames, then their
    /// directories.
    #[test]
    fn a_commit_is_durable_before_it_is_published() {
        use crate::store::commit::{Step, recording};
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let batch = RecordBatch::new_empty(Table::StateValues.schema());
        let columns = || batch.columns().to_vec();
        let ((), steps) = recording(|| {
            write_chunk(
                run,
                "train",
                S,
                3,
                vec![
                    (Table::StateValues, columns()),
                    (Table::ActionValues, {
                        RecordBatch::new_empty(Table::ActionValues.schema())
                            .columns()
                            .to_vec()
                    }),
                ],
                |_| serde_json::json!({"chunk": 3}),
            )
            .map(drop)
            .unwrap()
        });
        let at = |wanted: &Step| {
            steps
                .iter()
                .position(|s| s == wanted)
                .unwrap_or_else(|| panic!("{wanted:?} not taken: {steps:#?}"))
        };
        let partition = run.join(partition_dir(Table::StateValues, "train"));
        let tmp = data_path(run, Table::StateValues, "train", S, 3, true);
        let file = data_path(run, Table::StateValues, "train", S, 3, false);
        let entry = entry_path(run, "train", S, 3);
        let entries = entries_dir(run, "train");
        let (sync_tmp, sync_names) = (
            at(&Step::SyncFile(tmp)),
            at(&Step::SyncDir(partition.clone())),
        );
        let publish = at(&Step::Rename(entry.clone()));
        assert!(
            at(&Step::SyncDir(run.to_owned())) < publish,
            "the run's directory synced before the entry: {steps:#?}"
        );
        let entry_synced = steps
            .iter()
            .position(|s| matches!(s, Step::SyncFile(p) if p.starts_with(&entries)))
            .expect("the entry's file synced");
        let entry_named = steps
            .iter()
            .rposition(|s| *s == Step::SyncDir(entries.clone()))
            .expect("the entries' directory synced");
        let renamed = at(&Step::Rename(file));
        let renames_synced = steps
            .iter()
            .rposition(|s| *s == Step::SyncDir(partition.clone()))
            .unwrap();
        assert!(sync_tmp < sync_names, "{steps:#?}");
        assert!(sync_names < publish, "{steps:#?}");
        assert!(
            entry_synced < publish && publish < entry_named,
            "{steps:#?}"
        );
        assert!(
            entry_named < renamed && renamed < renames_synced,
            "{steps:#?}"
        );
        // An empty action-values table is left out: one table, one rename.
        assert_eq!(
            steps
                .iter()
                .filter(|s| matches!(s, Step::Rename(p) if p.extension().is_some_and(|e| e == "parquet")))
                .count(),
            1
        );
        // Recovery's roll-forward syncs the directory after its rename.
        let batch = RecordBatch::new_empty(Table::StateValues.schema());
        write_table(run, "train", S, 5, Table::StateValues, &batch).unwrap();
        fs::write(entry_path(run, "train", S, 5), b"{}").unwrap();
        let (done, steps) = recording(|| recover(run, "train", S, (0, 1)).unwrap());
        assert_eq!(done, BTreeSet::from([3, 5]));
        let rolled = data_path(run, Table::StateValues, "train", S, 5, false);
        let renamed = steps
            .iter()
            .position(|s| *s == Step::Rename(rolled.clone()));
        let synced = steps
            .iter()
            .rposition(|s| *s == Step::SyncDir(partition.clone()));
        assert!(
            matches!((renamed, synced), (Some(r), Some(d)) if r < d),
            "{steps:#?}"
        );
    }

    #[test]
    fn uncommitted_files_are_removed_and_committed_ones_rolled_forward() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let batch = RecordBatch::new_empty(Table::StateValues.schema());
        for chunk in [7, 8] {
            write_table(run, "train", S, chunk, Table::StateValues, &batch).unwrap();
        }
        // Chunk 7: the entry is written, a crash comes before the rename.
        let entries = entries_dir(run, "train");
        fs::create_dir_all(&entries).unwrap();
        fs::write(entry_path(run, "train", S, 7), b"{}").unwrap();
        let interrupted = interrupted_commit(run).unwrap().unwrap();
        assert_eq!(
            (interrupted.split.as_str(), interrupted.chunk),
            ("train", 7)
        );
        // Chunk 8: a crash before the entry.
        let done = recover(run, "train", S, (0, 1)).unwrap();
        assert_eq!(done, BTreeSet::from([7]));
        assert!(data_path(run, Table::StateValues, "train", S, 7, false).exists());
        assert!(!data_path(run, Table::StateValues, "train", S, 8, true).exists());
        assert_eq!(interrupted_commit(run).unwrap(), None);
        // A writer killed while writing chunk 5's entry leaves its
        // temporary file: recovery by the shard's next writer removes it,
        // and leaves another shard's alone.
        let stray = entries.join(format!("{}.json.4242-7.tmp", chunk_name(S, 5)));
        fs::write(&stray, b"{").unwrap();
        let other = (0..100u64).find(|&c| chunk_shard(c, 2) == 1).unwrap();
        let mine = (0..100u64).find(|&c| chunk_shard(c, 2) == 0).unwrap();
        let theirs = entries.join(format!("{}.json.4242-8.tmp", chunk_name(S, other)));
        let ours = entries.join(format!("{}.json.4242-9.tmp", chunk_name(S, mine)));
        fs::write(&theirs, b"{").unwrap();
        fs::write(&ours, b"{").unwrap();
        recover(run, "train", S, (0, 1)).unwrap();
        assert!(!stray.exists());
        assert!(!ours.exists() && !theirs.exists());
        fs::write(&theirs, b"{").unwrap();
        fs::write(&ours, b"{").unwrap();
        recover(run, "train", S, (0, 2)).unwrap();
        assert!(!ours.exists(), "shard 0 removes its own");
        assert!(theirs.exists(), "shard 1's is left to shard 1");
        fs::remove_file(&theirs).unwrap();
        assert_eq!(committed(run, "train", S).unwrap(), BTreeSet::from([7]));
        // A clean commit renames its file.
        write_table(run, "train", S, 9, Table::StateValues, &batch).unwrap();
        commit(
            run,
            "train",
            S,
            9,
            &serde_json::json!({"chunk": 9}),
            &[Table::StateValues],
        )
        .unwrap();
        assert_eq!(committed(run, "train", S).unwrap(), BTreeSet::from([7, 9]));
        assert!(data_path(run, Table::StateValues, "train", S, 9, false).exists());
        remove_split(run, "train").unwrap();
        assert!(committed(run, "train", S).unwrap().is_empty());
        assert!(
            !run.join(partition_dir(Table::StateValues, "train"))
                .exists()
        );
    }
}
