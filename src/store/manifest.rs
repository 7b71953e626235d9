//! `manifest.json`: what a run directory holds and where it came from.
//!
//! One entry per split, written by the ingest (or `.bag` import) that
//! produced the split: the inputs (with byte counts and any read error), the
//! effective options, the record counts, and for an imported split what the
//! import read. The annotate stage adds its own section: the engine, the
//! settings and each shard's work. Every section is typed here, so a stage
//! reads what another wrote through these types, not through string keys.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::{error::StoreError, schema::SCHEMA_VERSION};

/// Identifies the file format.
pub(crate) const FORMAT: &str = "chessbench-run";

/// The run manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub format: String,
    pub schema_version: u32,
    #[serde(default)]
    pub splits: BTreeMap<String, SplitManifest>,
    /// What annotate did, once it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotate: Option<AnnotateRecord>,
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest {
            format: FORMAT.to_owned(),
            schema_version: SCHEMA_VERSION,
            splits: BTreeMap::new(),
            annotate: None,
        }
    }
}

/// A split's provenance and counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SplitManifest {
    pub ingest: IngestRecord,
    pub counts: SplitCounts,
    /// Present when the split was imported from ChessBench `.bag` files: its
    /// values came with it, so annotate leaves it alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<ImportRecord>,
}

/// What a `.bag` import read into a split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ImportRecord {
    /// `chessbench-bag`.
    pub format: String,
    pub state_value_records: u64,
    pub behavioral_cloning_records: u64,
    pub action_value_records: u64,
}

/// The annotate section: the engine, the settings every shard must share,
/// and per split each shard's latest work.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct AnnotateRecord {
    pub engine: EngineRecord,
    /// The settings fingerprint a split's chunks were annotated with (also in
    /// `annotate/split=S/settings.json`, which resumes check).
    #[serde(default)]
    pub settings: serde_json::Value,
    #[serde(default)]
    pub splits: BTreeMap<String, AnnotateSplitRecord>,
}

/// The engine annotate ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct EngineRecord {
    /// As the engine names itself (`id name`).
    pub name: String,
    pub path: PathBuf,
    pub threads: u32,
}

/// A split's annotation by shard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct AnnotateSplitRecord {
    pub chunks_total: u64,
    /// By shard `I/N`.
    #[serde(default)]
    pub shards: BTreeMap<String, ShardRecord>,
}

/// One shard's latest annotate invocation on a split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ShardRecord {
    pub finished_at: u64,
    /// `--shard`, a Slurm job array, a Kubernetes Indexed Job, or unsharded.
    pub source: String,
    /// Chunks of the split in this shard.
    pub chunks: u64,
    pub boards_annotated_now: u64,
    pub failures_now: u64,
    pub workers: usize,
    /// Time inside engine searches / (wall time x workers).
    pub utilisation: f64,
}

/// The ingest invocation that produced a split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IngestRecord {
    pub chessbench_version: String,
    /// Seconds since the Unix epoch.
    pub started_at: u64,
    pub finished_at: u64,
    /// The effective, validated options.
    pub options: serde_json::Value,
    pub inputs: Vec<InputRecord>,
    /// All splits this invocation wrote (e.g. train and a hashed test split).
    pub splits_written: Vec<String>,
}

/// One input of an ingest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRecord {
    pub source: String,
    pub split: String,
    pub zstd: bool,
    /// Bytes read from the file or stream (compressed size for .zst).
    pub bytes_read: u64,
    /// Bytes of PGN after decompression.
    pub pgn_bytes: u64,
    pub games_read: u64,
    /// A read error that ended the input early (e.g. a truncated .zst).
    pub error: Option<String>,
}

/// Record counts of a split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SplitCounts {
    /// Games written to `games` (accepted and, with sampling, drawn).
    pub games: u64,
    /// Games rejected, by reason (rejects are counted with their input's split).
    pub rejected: BTreeMap<String, u64>,
    /// Accepted games not drawn by `--sample-games`.
    pub not_sampled: u64,
    /// Boards of accepted games, duplicates included (sum of plies + 1).
    pub positions: u64,
    /// Distinct boards (state-value records).
    pub state_value: u64,
    /// Distinct boards with at least one legal move.
    pub behavioral_cloning: u64,
    /// Legal moves of those boards (action-value records).
    pub action_value: u64,
}

impl Manifest {
    /// Reads a manifest; a missing file is an empty manifest.
    pub(crate) fn read(path: &Path) -> Result<Manifest, StoreError> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(path.to_owned(), e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Manifest::default()),
            Err(e) => Err(StoreError::io(path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_round_trip() {
        let text = r#"{"format":"chessbench-run","schema_version":1,"splits":{},
            "annotate":{"engine":{"name":"Stockfish 15.1","path":"/usr/games/stockfish","threads":1},
            "settings":{"mode":"per_move"},
            "splits":{"train":{"chunks_total":8,"shards":{"0/1":{"finished_at":1,"source":"unsharded",
            "chunks":8,"boards_annotated_now":8192,"failures_now":0,"workers":2,"utilisation":0.9}}}}}}"#;
        let m: Manifest = serde_json::from_str(text).unwrap();
        let a = m.annotate.as_ref().unwrap();
        assert_eq!(a.engine.name, "Stockfish 15.1");
        assert_eq!(a.splits["train"].shards["0/1"].boards_annotated_now, 8192);
        let back: Manifest = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        // A run that was never annotated has no section.
        let m = Manifest::default();
        assert!(!serde_json::to_string(&m).unwrap().contains("annotate"));
    }
}
