//! `manifest.json`: what a run directory holds and where it came from.
//!
//! One entry per split, written by the ingest that produced the split:
//! the inputs (with byte counts and any read error), the effective options,
//! and the record counts. Unknown fields (added by later stages) are kept.

use std::{collections::BTreeMap, path::Path};

use serde::{Deserialize, Serialize};

use super::{StoreError, schema::SCHEMA_VERSION};

/// Identifies the file format.
pub const FORMAT: &str = "chessbench-run";

/// The run manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub schema_version: u32,
    #[serde(default)]
    pub splits: BTreeMap<String, SplitManifest>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest {
            format: FORMAT.to_owned(),
            schema_version: SCHEMA_VERSION,
            splits: BTreeMap::new(),
            extra: BTreeMap::new(),
        }
    }
}

/// A split's provenance and counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitManifest {
    pub ingest: IngestRecord,
    pub counts: SplitCounts,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// The ingest invocation that produced a split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestRecord {
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
    pub fn read(path: &Path) -> Result<Manifest, StoreError> {
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
    fn unknown_fields_survive_a_round_trip() {
        let text =
            r#"{"format":"chessbench-run","schema_version":1,"splits":{},"annotate":{"x":1}}"#;
        let m: Manifest = serde_json::from_str(text).unwrap();
        assert_eq!(m.extra["annotate"]["x"], 1);
        let back = serde_json::to_string(&m).unwrap();
        assert!(back.contains("\"annotate\""));
    }
}
