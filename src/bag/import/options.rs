//! `chessbench bag import`'s options, their config, the sizes the import
//! works in (part files, batches, buffers, bytes a board) and the bags found
//! in a directory.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::{
    bag::error::BagSetError,
    chess::RecordSet,
    options::{Consumer, Memory, Share},
};

/// Rows per action_values part file.
pub(super) const AV_ROWS_PER_PART: u64 = 1 << 24;
/// Rows per buffered batch.
pub(super) const BATCH_ROWS: usize = 64 * 1024;
/// Records ahead whose board-id slots are prefetched.
pub(super) const PREFETCH: usize = 16;

/// `chessbench bag import`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct BagImportOptions {
    /// Run directory to write (created if needed).
    #[arg(value_name = "RUN_DIR", value_hint = clap::ValueHint::DirPath)]
    pub run: PathBuf,
    /// Split to write (replaced if it exists).
    #[arg(long, value_name = "NAME")]
    pub split: String,
    /// Directory with ChessBench's file names (state_value_data.bag, ...).
    #[arg(
        value_name = "DIR",
        value_hint = clap::ValueHint::DirPath,
        required_unless_present_any = ["state_value", "behavioral_cloning", "action_value"]
    )]
    pub dir: Option<PathBuf>,
    /// state_value .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub state_value: Option<PathBuf>,
    /// behavioral_cloning .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub behavioral_cloning: Option<PathBuf>,
    /// action_value .bag file (or SET@N pattern).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub action_value: Option<PathBuf>,
    #[command(flatten)]
    pub jobs: crate::options::Jobs,
    #[command(flatten)]
    pub budget: crate::options::Budget,
}

impl BagImportOptions {
    /// What to import: the sets found in `dir`, replaced by the files given
    /// per set; `env` gives the progress bar.
    pub fn resolve(&self, env: &crate::options::Env) -> Result<ImportConfig, BagSetError> {
        let mut inputs = match &self.dir {
            Some(dir) => discover(dir)?,
            None => Vec::new(),
        };
        for (set, file) in [
            (RecordSet::StateValue, &self.state_value),
            (RecordSet::BehavioralCloning, &self.behavioral_cloning),
            (RecordSet::ActionValue, &self.action_value),
        ] {
            if let Some(f) = file {
                inputs.retain(|(s, _)| *s != set);
                inputs.push((set, f.clone()));
            }
        }
        Ok(ImportConfig {
            run: self.run.clone(),
            split: self.split.clone(),
            inputs,
            memory_limit: self.budget.bytes(),
            threads: self.jobs.or_cores(),
            progress: env.progress,
        })
    }
}

/// What to import.
#[derive(Debug, Clone)]
pub struct ImportConfig {
    pub run: PathBuf,
    pub split: String,
    /// Bag files (or `@N` patterns) per set; sets not given are not imported.
    pub inputs: Vec<(RecordSet, PathBuf)>,
    /// The memory budget, bytes.
    pub memory_limit: u64,
    /// Threads decoding records (`-j`); the tables are the same at any.
    pub threads: usize,
    pub progress: bool,
}

/// Bytes an import holds per distinct board: its id-table slot (16 B at
/// most 80% full), the state value (8), the best action (2), the terminal
/// kind (1).
pub(super) const BYTES_PER_BOARD: u64 = 31;
/// Buffers besides: a row group of legal moves (1M rows), batches of boards
/// and action values, the Parquet writers' encoded row groups, the bag
/// readers' buffers (records and index stream, never a whole index).
pub(super) const IMPORT_BUFFERS: u64 = 48 << 20;
/// Buffers each thread beyond the first adds (`-j`): the batches of
/// records being decoded and waiting to be applied, and the row groups
/// being encoded (up to `-j` + 2 of each file in flight); sized from the
/// peak memory measured from 2 to 16 threads (docs/benchmarks.md#constants).
pub(super) const THREAD_BUFFERS: u64 = 24 << 20;

/// What `bag import` holds within `--memory-limit`, at `-j` threads: the
/// buffers, and the boards' table in what they leave.
pub const MEMORY: Memory<2> = Memory([
    Consumer::new(
        "buffers: row groups of legal moves, batches of boards and values, the Parquet \
         writers' and the bags' readers' buffers",
        Share::Buffers {
            first: IMPORT_BUFFERS,
            each_thread: THREAD_BUFFERS,
        },
    ),
    Consumer::new(
        "the FEN-to-id table and the values (31 bytes a board), or past it partitions of the \
         records worked out on disk",
        Share::Rest { at_least: (1, 4) },
    ),
]);

/// Finds the ChessBench files of a directory: `SET_data.bag` or
/// `SET-00000-of-0000N_data.bag` (`.bagz` too), for each set present.
pub(crate) fn discover(dir: &Path) -> Result<Vec<(RecordSet, PathBuf)>, BagSetError> {
    let entries = fs::read_dir(dir).map_err(|source| BagSetError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    let mut found = Vec::new();
    for set in RecordSet::ALL {
        for ext in ["bag", "bagz"] {
            let single = format!("{}_data.{ext}", set.name());
            if names.contains(&single) {
                found.push((set, dir.join(single)));
                continue;
            }
            let prefix = format!("{}-00000-of-", set.name());
            let suffix = format!("_data.{ext}");
            if let Some(n) = names.iter().find_map(|n| {
                n.strip_prefix(&prefix)?
                    .strip_suffix(&suffix)?
                    .parse::<u32>()
                    .ok()
            }) {
                found.push((set, dir.join(format!("{}@{n}_data.{ext}", set.name()))));
            }
        }
    }
    if found.is_empty() {
        return Err(BagSetError::NothingToImport(dir.to_owned()));
    }
    Ok(found)
}
