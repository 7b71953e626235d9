//! Run directories and atomic commits.
//!
//! A stage writes every file of its output into `RUN/.staging/<txn>/` and
//! commits with [`Transaction::commit`]: a journal listing the renames and the
//! new manifest is written (temp file, fsync, rename), then each partition
//! directory is renamed into place, then the manifest is replaced, then the
//! journal removed. If the process dies at any point, either nothing is
//! visible (before the journal exists) or the next [`RunDir::open`] finishes
//! the renames from the journal: readers never see half an ingest.
//!
//! `RUN/.lock` is held (an OS file lock) while a stage works on the run, so
//! two ingests cannot interleave. `RUN/.commit.lock` is held exclusively
//! while a commit renames directories and shared by readers
//! ([`RunDir::read`]), so a reader never sees half a commit.

use std::{
    fs::{self, File, TryLockError},
    io::Write,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};

use super::{error::StoreError, manifest::Manifest, schema::Table};

const STAGING: &str = ".staging";
const TRASH: &str = ".trash";
const JOURNAL: &str = ".commit-journal.json";
const LOCK: &str = ".lock";
const COMMIT_LOCK: &str = ".commit.lock";
/// File name of the run manifest.
pub(crate) const MANIFEST: &str = "manifest.json";

/// An open, locked run directory.
#[derive(Debug)]
pub(crate) struct RunDir {
    root: PathBuf,
    _lock: File,
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    renames: Vec<(PathBuf, PathBuf)>,
    manifest: Manifest,
}

/// Writes `bytes` to `path` atomically (temp file in the same directory,
/// fsync, rename). The temp name is unique to the process and call, so
/// concurrent writers of one file (annotate shards starting together) never
/// share, truncate or steal each other's temp file; the last rename wins.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    write_atomic_inner(path, bytes)
}

/// A step that makes data durable, in the order a thread takes them:
/// [`note`] records them for tests, which check that every commit point
/// becomes durable only after what it publishes (`store::chunks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// A file's data and metadata flushed (`fsync`).
    SyncFile(PathBuf),
    /// A directory flushed (`fsync`): the names created, renamed or
    /// removed in it are durable.
    SyncDir(PathBuf),
    /// A file renamed to this name.
    Rename(PathBuf),
}

#[cfg(test)]
thread_local! {
    static STEPS: std::cell::RefCell<Option<Vec<Step>>> = const { std::cell::RefCell::new(None) };
}

/// Records `step` while a test on this thread is [`recording`]; nothing
/// otherwise (outside tests the closure is never called).
pub(crate) fn note(step: impl FnOnce() -> Step) {
    #[cfg(test)]
    STEPS.with(|steps| {
        if let Some(steps) = steps.borrow_mut().as_mut() {
            steps.push(step());
        }
    });
    #[cfg(not(test))]
    let _ = step;
}

/// Runs `f`, returning what it returned and the durability steps it took
/// on this thread, in order.
#[cfg(test)]
pub(crate) fn recording<T>(f: impl FnOnce() -> T) -> (T, Vec<Step>) {
    STEPS.with(|steps| *steps.borrow_mut() = Some(Vec::new()));
    let out = f();
    (
        out,
        STEPS.with(|steps| steps.borrow_mut().take().unwrap_or_default()),
    )
}

/// `fs::rename`, noted as a durability [`Step`]: the new name is durable
/// once its directory is synced.
pub(crate) fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::rename(from, to)?;
    note(|| Step::Rename(to.to_owned()));
    Ok(())
}

fn write_atomic_inner(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}-{call}.tmp", std::process::id()));
    let tmp = path.with_file_name(name);
    let written = (|| {
        let mut f = File::create(&tmp).map_err(|e| StoreError::io(&tmp, e))?;
        f.write_all(bytes).map_err(|e| StoreError::io(&tmp, e))?;
        f.sync_all().map_err(|e| StoreError::io(&tmp, e))?;
        note(|| Step::SyncFile(tmp.clone()));
        rename(&tmp, path).map_err(|e| StoreError::io(path, e))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_dir(path.parent());
    Ok(())
}

/// Opens (creating) a lock file for `flock`, readable and writable and
/// never truncated: NFS v4 emulates `flock` with byte-range locks, which
/// need the file open for reading (shared locks) and writing (exclusive
/// ones); a lock file opened one way only fails there with EBADF.
pub(crate) fn open_lock_file(path: &Path) -> std::io::Result<File> {
    File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

pub(crate) fn sync_dir(dir: Option<&Path>) {
    // Best effort: directory fsync makes renames durable on Linux; some
    // filesystems refuse it, which only weakens durability, not atomicity.
    if let Some(dir) = dir
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
        note(|| Step::SyncDir(dir.to_owned()));
    }
}

/// Removes the file `path` if it exists, durably (the directory is synced):
/// a stage that rewrites several files withdraws the one that marks them
/// complete first, so a crash between them leaves no marker over a mix.
pub(crate) fn remove_file_if_exists(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Ok(()) => {
            sync_dir(path.parent());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

pub(crate) fn remove_dir_if_exists(path: &Path) -> Result<(), StoreError> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

impl RunDir {
    /// Opens (creating if needed) and locks a run directory, finishing any
    /// commit a crashed process left half done and removing stale staging.
    pub(crate) fn open(root: &Path) -> Result<RunDir, StoreError> {
        fs::create_dir_all(root).map_err(|e| StoreError::io(root, e))?;
        let lock_path = root.join(LOCK);
        let lock = open_lock_file(&lock_path).map_err(|e| StoreError::io(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Locked(root.to_owned()));
            }
            Err(TryLockError::Error(e)) => return Err(StoreError::io(&lock_path, e)),
        }
        let run = RunDir {
            root: root.to_owned(),
            _lock: lock,
        };
        run.recover()?;
        Ok(run)
    }

    /// Opens a run directory for reading. Holds a shared commit lock until
    /// the returned guard is dropped, so no commit can change the tables
    /// meanwhile; a commit a crashed process left half done is finished
    /// first.
    pub(crate) fn read(root: &Path) -> Result<RunReader, StoreError> {
        if !root.join(MANIFEST).is_file() {
            return Err(StoreError::NotARun(root.to_owned()));
        }
        loop {
            let guard = commit_lock(root, false)?;
            // A journal seen under the shared lock is a crashed commit (a
            // live one holds the lock exclusively from before its journal).
            if !root.join(JOURNAL).exists() {
                return Ok(RunReader {
                    root: root.to_owned(),
                    _guard: guard,
                });
            }
            drop(guard);
            drop(RunDir::open(root)?);
        }
    }

    /// The directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The current manifest (empty for a new run).
    pub(crate) fn manifest(&self) -> Result<Manifest, StoreError> {
        Manifest::read(&self.root.join(MANIFEST))
    }

    fn recover(&self) -> Result<(), StoreError> {
        let journal_path = self.root.join(JOURNAL);
        if journal_path.exists() {
            let _commit = commit_lock(&self.root, true)?;
            let text =
                fs::read_to_string(&journal_path).map_err(|e| StoreError::io(&journal_path, e))?;
            let journal: Journal = serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(journal_path.clone(), e.to_string()))?;
            self.apply(&journal)?;
        }
        remove_dir_if_exists(&self.root.join(STAGING))?;
        remove_dir_if_exists(&self.root.join(TRASH))?;
        Ok(())
    }

    fn apply(&self, journal: &Journal) -> Result<(), StoreError> {
        let trash = self.root.join(TRASH);
        for (i, (src, dst)) in journal.renames.iter().enumerate() {
            let (src, dst) = (self.root.join(src), self.root.join(dst));
            if !src.exists() {
                if dst.exists() {
                    continue; // moved before a crash
                }
                return Err(StoreError::Corrupt(
                    self.root.join(JOURNAL),
                    format!(
                        "neither {} nor {} exists; the run needs a fresh ingest of this split",
                        src.display(),
                        dst.display()
                    ),
                ));
            }
            if dst.exists() {
                let old = trash.join(i.to_string());
                fs::create_dir_all(&trash).map_err(|e| StoreError::io(&trash, e))?;
                fs::rename(&dst, &old).map_err(|e| StoreError::io(&dst, e))?;
            }
            if let Some(parent) = dst.parent() {
                fs::create_dir_all(parent).map_err(|e| StoreError::io(parent, e))?;
            }
            fs::rename(&src, &dst).map_err(|e| StoreError::io(&dst, e))?;
            sync_dir(dst.parent());
        }
        let bytes = serde_json::to_vec_pretty(&journal.manifest)
            .map_err(|e| StoreError::Corrupt(self.root.join(MANIFEST), e.to_string()))?;
        write_atomic(&self.root.join(MANIFEST), &bytes)?;
        let journal_path = self.root.join(JOURNAL);
        fs::remove_file(&journal_path).map_err(|e| StoreError::io(&journal_path, e))?;
        sync_dir(Some(&self.root));
        remove_dir_if_exists(&trash)
    }

    /// Starts a transaction with a fresh staging directory.
    pub(crate) fn begin(&self) -> Result<Transaction<'_>, StoreError> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("{}-{nanos}", std::process::id());
        let dir = self.root.join(STAGING).join(&name);
        fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(Transaction {
            run: self,
            rel: PathBuf::from(STAGING).join(name),
            dir,
            journaled: false,
        })
    }
}

/// How long [`RunDir::open_shared`] waits for an exclusive holder of `.lock`
/// to let go before reporting the run as locked.
pub(crate) const SHARED_OPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A stage that works beside others of its kind on a run (annotate shards):
/// holds `.lock` shared, so an ingest (which holds it exclusively) cannot
/// replace the boards underneath, while any number of shards run.
#[derive(Debug)]
pub(crate) struct SharedRun {
    _lock: File,
}

impl RunDir {
    /// Opens a run for a shared stage. Finishes a crashed commit first if no
    /// other process holds the run.
    pub(crate) fn open_shared(root: &Path) -> Result<SharedRun, StoreError> {
        if !root.join(MANIFEST).is_file() {
            return Err(StoreError::NotARun(root.to_owned()));
        }
        match RunDir::open(root) {
            Ok(run) => drop(run),
            Err(StoreError::Locked(_)) => {}
            Err(e) => return Err(e),
        }
        let lock_path = root.join(LOCK);
        let lock = open_lock_file(&lock_path).map_err(|e| StoreError::io(&lock_path, e))?;
        // Another shard starting at the same moment holds `.lock`
        // exclusively for the few milliseconds its crash recovery takes
        // (above): wait that out. A holder that keeps it (an ingest) is
        // reported after SHARED_OPEN_WAIT.
        let deadline = std::time::Instant::now() + SHARED_OPEN_WAIT;
        loop {
            match lock.try_lock_shared() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(StoreError::Locked(root.to_owned()));
                }
                Err(TryLockError::Error(e)) => return Err(StoreError::io(&lock_path, e)),
            }
        }
        if root.join(JOURNAL).exists() {
            return Err(StoreError::Corrupt(
                root.join(JOURNAL),
                "an interrupted commit is pending; stop the other chessbench processes on this run and retry".into(),
            ));
        }
        Ok(SharedRun { _lock: lock })
    }
}

/// Reads, changes and atomically rewrites the manifest under the exclusive
/// commit lock (for stages that add their own section).
pub(crate) fn update_manifest(
    root: &Path,
    change: impl FnOnce(&mut Manifest),
) -> Result<(), StoreError> {
    let _commit = commit_lock(root, true)?;
    let path = root.join(MANIFEST);
    let mut manifest = Manifest::read(&path)?;
    change(&mut manifest);
    let bytes = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| StoreError::Corrupt(path.clone(), e.to_string()))?;
    write_atomic(&path, &bytes)
}

/// A run directory open for reading (see [`RunDir::read`]).
#[derive(Debug)]
pub(crate) struct RunReader {
    root: PathBuf,
    _guard: Option<File>,
}

impl std::ops::Deref for RunReader {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.root
    }
}

/// Takes the commit lock, exclusive (commits) or shared (readers). On a
/// read-only run directory readers go without (nothing can commit there).
fn commit_lock(root: &Path, exclusive: bool) -> Result<Option<File>, StoreError> {
    let path = root.join(COMMIT_LOCK);
    let file = match open_lock_file(&path) {
        Ok(f) => f,
        Err(e)
            if !exclusive
                && matches!(
                    e.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(StoreError::io(&path, e)),
    };
    let locked = if exclusive {
        file.lock()
    } else {
        file.lock_shared()
    };
    locked.map_err(|e| StoreError::io(&path, e))?;
    Ok(Some(file))
}

/// Files staged for one atomic commit.
#[derive(Debug)]
pub(crate) struct Transaction<'a> {
    run: &'a RunDir,
    rel: PathBuf,
    dir: PathBuf,
    /// The journal points at the staging directory: keep it for roll-forward.
    journaled: bool,
}

/// `TABLE/split=NAME`, the hive partition directory.
pub(crate) fn partition_dir(table: Table, split: &str) -> PathBuf {
    PathBuf::from(table.name()).join(format!("split={split}"))
}

impl Transaction<'_> {
    /// The staging directory of a table partition, created on demand.
    pub(crate) fn partition(&self, table: Table, split: &str) -> Result<PathBuf, StoreError> {
        let dir = self.dir.join(partition_dir(table, split));
        fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(dir)
    }

    /// A scratch directory inside the staging area (spill files), removed
    /// with the transaction.
    pub(crate) fn scratch(&self, name: &str) -> Result<PathBuf, StoreError> {
        let dir = self.dir.join("scratch").join(name);
        fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(dir)
    }

    /// Publishes the staged partitions of `tables` x `splits` (replacing
    /// those partitions if they exist) and the new manifest, atomically.
    pub(crate) fn commit(
        mut self,
        tables: &[Table],
        splits: &[String],
        manifest: Manifest,
    ) -> Result<(), StoreError> {
        let mut renames = Vec::new();
        for &table in tables {
            for split in splits {
                let part = partition_dir(table, split);
                let staged = self.dir.join(&part);
                if !staged.is_dir() {
                    return Err(StoreError::Missing(staged));
                }
                renames.push((self.rel.join(&part), part));
            }
        }
        let journal = Journal { renames, manifest };
        let bytes = serde_json::to_vec_pretty(&journal)
            .map_err(|e| StoreError::Corrupt(self.run.root.join(JOURNAL), e.to_string()))?;
        let _commit = commit_lock(&self.run.root, true)?;
        write_atomic(&self.run.root.join(JOURNAL), &bytes)?;
        // From here the commit happens: if renaming fails (disk full, ...),
        // the staged files stay for the next open to roll forward.
        self.journaled = true;
        self.run.apply(&journal)?;
        remove_dir_if_exists(&self.dir)?;
        // Leave no empty staging directory behind (another transaction of
        // this process may still be using it, hence no error if not empty).
        let _ = fs::remove_dir(self.run.root.join(STAGING));
        Ok(())
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        // An abandoned (failed) transaction leaves nothing behind; after a
        // commit the directory is already gone; a journaled commit that
        // failed half-way keeps it for roll-forward.
        if !self.journaled {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"x").unwrap();
    }

    /// Writes a journal as a crashed commit would leave it.
    fn leave_journal(root: &Path, renames: Vec<(PathBuf, PathBuf)>) {
        let journal = Journal {
            renames,
            manifest: Manifest::default(),
        };
        fs::write(root.join(JOURNAL), serde_json::to_vec(&journal).unwrap()).unwrap();
    }

    /// Many writers of one file at once (annotate shards writing the same
    /// settings.json): every write succeeds, the file is one of them whole.
    #[test]
    fn concurrent_atomic_writes_of_one_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("settings.json");
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_atomic(path, &[i; 64]).unwrap();
                    }
                });
            }
        });
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 64);
        assert!(bytes.iter().all(|&b| b == bytes[0]));
        assert_eq!(
            fs::read_dir(tmp.path()).unwrap().count(),
            1,
            "no temp files left"
        );
    }

    #[test]
    fn commit_replaces_partitions_atomically() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::open(tmp.path()).unwrap();
        let txn = run.begin().unwrap();
        for t in Table::INGEST {
            touch(
                &txn.partition(t, "train")
                    .unwrap()
                    .join("part-00000.parquet"),
            );
        }
        txn.commit(&Table::INGEST, &["train".into()], Manifest::default())
            .unwrap();
        assert!(
            tmp.path()
                .join("boards/split=train/part-00000.parquet")
                .is_file()
        );
        assert!(tmp.path().join(MANIFEST).is_file());
        assert!(!tmp.path().join(JOURNAL).exists());
        assert!(!tmp.path().join(STAGING).join("x").exists());

        // A second commit replaces the partition (old file gone).
        let txn = run.begin().unwrap();
        for t in Table::INGEST {
            touch(
                &txn.partition(t, "train")
                    .unwrap()
                    .join("part-00001.parquet"),
            );
        }
        txn.commit(&Table::INGEST, &["train".into()], Manifest::default())
            .unwrap();
        assert!(
            !tmp.path()
                .join("boards/split=train/part-00000.parquet")
                .exists()
        );
        assert!(
            tmp.path()
                .join("boards/split=train/part-00001.parquet")
                .is_file()
        );
    }

    #[test]
    fn abandoned_transaction_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunDir::open(tmp.path()).unwrap();
        {
            let txn = run.begin().unwrap();
            touch(&txn.partition(Table::Boards, "train").unwrap().join("p"));
        }
        assert!(!tmp.path().join("boards").exists());
        assert_eq!(fs::read_dir(tmp.path().join(STAGING)).unwrap().count(), 0);
    }

    #[test]
    fn missing_source_and_destination_is_corruption_not_success() {
        let tmp = tempfile::tempdir().unwrap();
        leave_journal(
            tmp.path(),
            vec![(
                PathBuf::from(STAGING).join("gone/boards/split=train"),
                partition_dir(Table::Boards, "train"),
            )],
        );
        assert!(matches!(
            RunDir::open(tmp.path()),
            Err(StoreError::Corrupt(..))
        ));
        assert!(
            !tmp.path().join(MANIFEST).exists(),
            "no manifest for a broken commit"
        );
    }

    #[test]
    fn readers_finish_a_crashed_commit_first() {
        let tmp = tempfile::tempdir().unwrap();
        let staged = PathBuf::from(STAGING).join("dead");
        touch(
            &tmp.path()
                .join(&staged)
                .join(partition_dir(Table::Boards, "train"))
                .join("p"),
        );
        leave_journal(
            tmp.path(),
            vec![(
                staged.join(partition_dir(Table::Boards, "train")),
                partition_dir(Table::Boards, "train"),
            )],
        );
        fs::write(
            tmp.path().join(MANIFEST),
            b"{\"format\":\"chessbench-run\",\"schema_version\":1}",
        )
        .unwrap();
        let reader = RunDir::read(tmp.path()).unwrap();
        assert!(reader.join("boards/split=train/p").is_file());
        assert!(!tmp.path().join(JOURNAL).exists());
    }

    /// Regression (CI, Slurm job array): two shards starting together, one
    /// inside its brief exclusive recovery while the other asks for the
    /// shared lock, made the second fail with "locked".
    #[test]
    fn shared_open_waits_for_a_brief_exclusive_holder() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(
            tmp.path().join(MANIFEST),
            b"{\"format\":\"chessbench-run\",\"schema_version\":1}",
        )
        .unwrap();
        let run = RunDir::open(tmp.path()).unwrap();
        let root = tmp.path().to_owned();
        let shard = std::thread::spawn(move || RunDir::open_shared(&root));
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(run);
        let shared = shard.join().unwrap().unwrap();
        // Two shards share the run.
        let _second = RunDir::open_shared(tmp.path()).unwrap();
        // An exclusive open is still refused while shards hold it.
        assert!(matches!(
            RunDir::open(tmp.path()),
            Err(StoreError::Locked(_))
        ));
        drop(shared);
    }

    #[test]
    fn second_open_is_refused_while_locked() {
        let tmp = tempfile::tempdir().unwrap();
        let _run = RunDir::open(tmp.path()).unwrap();
        assert!(matches!(
            RunDir::open(tmp.path()),
            Err(StoreError::Locked(_))
        ));
    }

    #[test]
    fn crash_mid_commit_is_rolled_forward() {
        let tmp = tempfile::tempdir().unwrap();
        let staged = PathBuf::from(STAGING).join("dead");
        // Simulate: journal written, first rename done, second not.
        for (i, t) in [Table::Games, Table::Boards].iter().enumerate() {
            let part = partition_dir(*t, "train");
            let file = if i == 0 {
                tmp.path().join(&part).join("part-00000.parquet")
            } else {
                tmp.path()
                    .join(&staged)
                    .join(&part)
                    .join("part-00000.parquet")
            };
            touch(&file);
        }
        leave_journal(
            tmp.path(),
            [Table::Games, Table::Boards]
                .iter()
                .map(|t| {
                    (
                        staged.join(partition_dir(*t, "train")),
                        partition_dir(*t, "train"),
                    )
                })
                .collect(),
        );
        drop(RunDir::open(tmp.path()).unwrap());
        assert!(
            tmp.path()
                .join("games/split=train/part-00000.parquet")
                .is_file()
        );
        assert!(
            tmp.path()
                .join("boards/split=train/part-00000.parquet")
                .is_file()
        );
        assert!(tmp.path().join(MANIFEST).is_file());
        assert!(!tmp.path().join(JOURNAL).exists());
        assert!(!tmp.path().join(STAGING).exists());
    }
}
