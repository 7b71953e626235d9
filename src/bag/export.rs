//! `chessbench bag export`: a split's record sets as ChessBench `.bag` files,
//! read through the SQL layer's record views (`sv_records`, `bc_records`,
//! `av_records`) and streamed out of DuckDB batch by batch.

use std::{
    fs,
    io::{self, Write},
    path::PathBuf,
};

use arrow_array::{Array, Float64Array, RecordBatch, StringArray, cast::AsArray};
use serde::Serialize;

use super::{
    BagSetError,
    bagz::{BagWriter, shard_file_name},
    coder,
};
use crate::{
    chess::RecordSet,
    sql::{Session, SqlError, literal},
    ui::{Report, group},
};

/// `chessbench bag export`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct ExportOptions {
    /// Run directory.
    #[arg(value_name = "RUN_DIR", value_hint = clap::ValueHint::DirPath)]
    pub run: PathBuf,
    /// Split to export.
    #[arg(long, value_name = "NAME")]
    pub split: String,
    /// Output directory [default: RUN_DIR/bag/SPLIT].
    #[arg(short, long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: Option<PathBuf>,
    /// Record sets to write [default: all three].
    #[arg(long = "set", value_enum, value_delimiter = ',')]
    pub sets: Vec<RecordSet>,
    /// Shard a set into files of at most this many records (ChessBench's
    /// train action values: ~7.1M per shard).
    #[arg(long, value_name = "N", default_value_t = 7_200_000)]
    pub records_per_shard: u64,
    /// Zstd-compress every record (.bagz files).
    #[arg(long)]
    pub compress: bool,
    /// Replace existing files.
    #[arg(long)]
    pub overwrite: bool,
    /// Memory for DuckDB's sort of the records; past it, it spills into
    /// RUN/.tmp/.
    #[arg(long, value_name = "SIZE", default_value = crate::options::MEMORY_LIMIT)]
    pub memory_limit: crate::options::ByteSize,
}

impl ExportOptions {
    /// What to export, with the defaults filled in.
    pub fn config(&self, progress: bool) -> ExportConfig {
        ExportConfig {
            run: self.run.clone(),
            split: self.split.clone(),
            out: self
                .out
                .clone()
                .unwrap_or_else(|| self.run.join("bag").join(&self.split)),
            sets: if self.sets.is_empty() {
                RecordSet::ALL.to_vec()
            } else {
                self.sets.clone()
            },
            records_per_shard: self.records_per_shard,
            compress: self.compress,
            overwrite: self.overwrite,
            memory_limit: self.memory_limit.0,
            progress,
        }
    }
}

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub run: PathBuf,
    pub split: String,
    pub out: PathBuf,
    pub sets: Vec<RecordSet>,
    /// Records per shard; a set with more is split into
    /// `-0000i-of-0000N` files (ChessBench's train action values: ~7.1M).
    pub records_per_shard: u64,
    /// Zstd-compress each record (`.bagz`).
    pub compress: bool,
    pub overwrite: bool,
    /// DuckDB's memory budget, bytes.
    pub memory_limit: u64,
    pub progress: bool,
}

/// One exported set.
#[derive(Debug, Clone, Serialize)]
pub struct ExportedSet {
    pub set: &'static str,
    pub records: u64,
    pub bytes: u64,
    pub files: Vec<PathBuf>,
}

fn query(set: RecordSet, split: &str) -> String {
    let split = literal(split);
    match set {
        RecordSet::StateValue => {
            format!("SELECT fen, win_prob FROM sv_records WHERE split = {split} ORDER BY board_id")
        }
        RecordSet::BehavioralCloning => {
            format!("SELECT fen, move FROM bc_records WHERE split = {split} ORDER BY board_id")
        }
        RecordSet::ActionValue => format!(
            "SELECT fen, move, win_prob FROM av_records WHERE split = {split} ORDER BY board_id, action"
        ),
    }
}

fn count(session: &Session, set: RecordSet, split: &str) -> Result<u64, SqlError> {
    let view = match set {
        RecordSet::StateValue => "sv_records",
        RecordSet::BehavioralCloning => "bc_records",
        RecordSet::ActionValue => "av_records",
    };
    let sql = format!(
        "SELECT count(*) FROM {view} WHERE split = {}",
        literal(split)
    );
    session
        .connection()
        .query_row(&sql, [], |r| r.get::<_, u64>(0))
        .map_err(|e| session_error(session, e))
}

fn session_error(session: &Session, e: duckdb::Error) -> SqlError {
    session.error(&format!("bag export of {}", session.run().display()), 1, e)
}

/// What an export wrote (as JSON: the list of sets).
#[derive(Debug, Clone)]
pub struct ExportSummary {
    pub out: PathBuf,
    pub sets: Vec<ExportedSet>,
}

impl Serialize for ExportSummary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.sets.serialize(s)
    }
}

impl Report for ExportSummary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        for set in &self.sets {
            writeln!(
                out,
                "{:<20} {:>14} records {:>14} bytes {:>6.1} B/record  {} file(s) in {}",
                set.set,
                group(set.records),
                group(set.bytes),
                set.bytes as f64 / set.records.max(1) as f64,
                set.files.len(),
                self.out.display()
            )?;
        }
        Ok(())
    }
}

/// Exports the sets of one split. Files are written under temporary names
/// and renamed when complete; if any set fails (a full disk, say), the files
/// this call completed are removed too, so an export is all or nothing.
pub fn export(config: &ExportConfig) -> Result<ExportSummary, BagSetError> {
    let session = Session::open(&config.run, &[], config.memory_limit)?;
    fs::create_dir_all(&config.out).map_err(|source| BagSetError::Io {
        path: config.out.clone(),
        source,
    })?;
    // Every set's size and file names first: an empty set or an existing
    // file is refused before anything is written.
    let mut plans = Vec::new();
    for &set in &config.sets {
        let n = count(&session, set, &config.split)?;
        if n == 0 {
            return Err(BagSetError::Empty {
                set: set.name(),
                split: config.split.clone(),
                run: config.run.clone(),
            });
        }
        let shards = n.div_ceil(config.records_per_shard.max(1)).max(1) as u32;
        let files: Vec<PathBuf> = (0..shards)
            .map(|i| {
                config
                    .out
                    .join(shard_file_name(set.name(), i, shards, config.compress))
            })
            .collect();
        if !config.overwrite
            && let Some(f) = files.iter().find(|f| f.exists())
        {
            return Err(BagSetError::Exists(f.clone()));
        }
        plans.push((set, n, files));
    }
    let mut done = Vec::new();
    for (set, n, files) in plans {
        match export_set(config, &session, set, n, &files) {
            Ok(exported) => done.push(exported),
            Err(e) => {
                for f in done
                    .iter()
                    .flat_map(|d: &ExportedSet| &d.files)
                    .chain(&files)
                {
                    let _ = fs::remove_file(f);
                }
                return Err(e);
            }
        }
    }
    Ok(ExportSummary {
        out: config.out.clone(),
        sets: done,
    })
}

/// Writes one set's `n` records into `files` (its shards).
fn export_set(
    config: &ExportConfig,
    session: &Session,
    set: RecordSet,
    n: u64,
    files: &[PathBuf],
) -> Result<ExportedSet, BagSetError> {
    let bar = super::progress(config.progress, n, set);
    let mut stmt = session
        .connection()
        .prepare(&query(set, &config.split))
        .map_err(|e| session_error(session, e))?;
    drop(
        stmt.stream_arrow([])
            .map_err(|e| session_error(session, e))?,
    );
    let mut shard = 0usize;
    let mut writer = BagWriter::create(&files[0])?;
    let per_shard = n.div_ceil(files.len() as u64);
    let mut record = Vec::with_capacity(128);
    let (mut written, mut bytes) = (0u64, 0u64);
    while let Some(batch) = stmt.step().map_err(|e| session_error(session, e))? {
        let batch = RecordBatch::from(batch);
        let fen = string_column(&batch, 0)?;
        for row in 0..batch.num_rows() {
            match set {
                RecordSet::StateValue => coder::encode_state_value(
                    &mut record,
                    fen.value(row),
                    f64_column(&batch, 1)?.value(row),
                ),
                RecordSet::BehavioralCloning => coder::encode_behavioral_cloning(
                    &mut record,
                    fen.value(row),
                    string_column(&batch, 1)?.value(row),
                ),
                RecordSet::ActionValue => coder::encode_action_value(
                    &mut record,
                    fen.value(row),
                    string_column(&batch, 1)?.value(row),
                    f64_column(&batch, 2)?.value(row),
                ),
            }
            if writer.len() == per_shard && shard + 1 < files.len() {
                bytes += writer.finish()?.1;
                shard += 1;
                writer = BagWriter::create(&files[shard])?;
            }
            writer.write(&record)?;
            written += 1;
        }
        bar.inc(batch.num_rows() as u64);
    }
    bytes += writer.finish()?.1;
    // Sets smaller than expected leave no stale shard names behind.
    for f in &files[shard + 1..] {
        BagWriter::create(f)?.finish()?;
    }
    bar.finish_and_clear();
    Ok(ExportedSet {
        set: set.name(),
        records: written,
        bytes,
        files: files.to_vec(),
    })
}

fn string_column(batch: &RecordBatch, i: usize) -> Result<&StringArray, BagSetError> {
    batch
        .column(i)
        .as_string_opt::<i32>()
        .filter(|c| c.null_count() == 0)
        .ok_or(BagSetError::Column(i))
}

fn f64_column(batch: &RecordBatch, i: usize) -> Result<&Float64Array, BagSetError> {
    batch
        .column(i)
        .as_primitive_opt::<arrow_array::types::Float64Type>()
        .filter(|c| c.null_count() == 0)
        .ok_or(BagSetError::Column(i))
}
