//! Table schemas. `schemas/v1/*.json` documents the same columns for people
//! and other tools; a test checks the two agree, and another that written
//! Parquet files carry exactly these schemas.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

/// Version of the on-disk table layout (directory `schemas/v{N}`).
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// The tables a run directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Table {
    /// One row per accepted game.
    Games,
    /// One row per distinct board (full FEN) per split.
    Boards,
    /// One row per (board, legal move): the action-value record skeleton.
    LegalMoves,
    /// One row per game that was skipped or malformed.
    Rejects,
    /// One row per annotated board: its state value (annotate stage).
    StateValues,
    /// One row per (board, legal move): its action value (annotate stage).
    ActionValues,
    /// One row per board the engine could not annotate, with the reason.
    Failures,
}

impl Table {
    /// The tables `ingest` writes, in commit order.
    pub const INGEST: [Table; 4] = [
        Table::Games,
        Table::Boards,
        Table::LegalMoves,
        Table::Rejects,
    ];

    /// The tables `annotate` writes.
    pub(crate) const ANNOTATE: [Table; 3] =
        [Table::StateValues, Table::ActionValues, Table::Failures];

    /// Every table.
    pub(crate) const ALL: [Table; 7] = [
        Table::Games,
        Table::Boards,
        Table::LegalMoves,
        Table::Rejects,
        Table::StateValues,
        Table::ActionValues,
        Table::Failures,
    ];

    /// Directory name of the table inside a run directory.
    pub fn name(self) -> &'static str {
        match self {
            Table::Games => "games",
            Table::Boards => "boards",
            Table::LegalMoves => "legal_moves",
            Table::Rejects => "rejects",
            Table::StateValues => "state_values",
            Table::ActionValues => "action_values",
            Table::Failures => "failures",
        }
    }

    /// The Arrow schema of the table's Parquet files (the hive partition
    /// column `split` comes from the directory name, not the files).
    pub fn schema(self) -> SchemaRef {
        let utf8 = || DataType::Utf8;
        let fields = match self {
            Table::Games => vec![
                Field::new("game_no", DataType::UInt64, false),
                Field::new("id", utf8(), true),
                Field::new("event", utf8(), true),
                Field::new("white_elo", DataType::UInt16, true),
                Field::new("black_elo", DataType::UInt16, true),
                Field::new("time_control", utf8(), true),
                Field::new("base_seconds", DataType::UInt32, true),
                Field::new("increment_seconds", DataType::UInt32, true),
                Field::new("speed", utf8(), true),
                Field::new("result", utf8(), true),
                Field::new("termination", utf8(), true),
                Field::new("utc_date", DataType::Date32, true),
                Field::new("utc_time", DataType::Time32(TimeUnit::Second), true),
                Field::new("eco", utf8(), true),
                Field::new("opening", utf8(), true),
                Field::new("plies", DataType::UInt32, false),
                Field::new("source", utf8(), false),
                Field::new("game_index", DataType::UInt64, false),
                Field::new("byte_offset", DataType::UInt64, false),
                Field::new("line", DataType::UInt64, false),
            ],
            Table::Boards => vec![
                Field::new("board_id", DataType::UInt64, false),
                Field::new("fen", utf8(), false),
                Field::new("side_to_move", utf8(), false),
                Field::new("occurrences", DataType::UInt64, true),
                Field::new("num_legal_moves", DataType::UInt8, false),
                Field::new("terminal", utf8(), false),
                Field::new("first_game_no", DataType::UInt64, true),
                Field::new("first_ply", DataType::UInt32, true),
            ],
            Table::LegalMoves => vec![
                Field::new("board_id", DataType::UInt64, false),
                Field::new("action", DataType::UInt16, false),
                Field::new("uci", utf8(), false),
            ],
            Table::Rejects => vec![
                Field::new("game_no", DataType::UInt64, false),
                Field::new("source", utf8(), false),
                Field::new("game_index", DataType::UInt64, false),
                Field::new("byte_offset", DataType::UInt64, false),
                Field::new("line", DataType::UInt64, false),
                Field::new("reason", utf8(), false),
                Field::new("detail", utf8(), true),
                Field::new("ply", DataType::UInt32, true),
                Field::new("id", utf8(), true),
            ],
            Table::StateValues => vec![
                Field::new("board_id", DataType::UInt64, false),
                Field::new("kind", utf8(), false),
                Field::new("win_prob", DataType::Float64, false),
                Field::new("cp", DataType::Int32, true),
                Field::new("mate", DataType::Int32, true),
                Field::new("depth", DataType::UInt16, true),
                Field::new("nodes", DataType::UInt64, true),
                Field::new("time_ms", DataType::UInt32, true),
                Field::new("best_action", DataType::UInt16, true),
                Field::new("source", utf8(), false),
            ],
            Table::ActionValues => vec![
                Field::new("board_id", DataType::UInt64, false),
                Field::new("action", DataType::UInt16, false),
                Field::new("win_prob", DataType::Float64, false),
                Field::new("cp", DataType::Int32, true),
                Field::new("mate", DataType::Int32, true),
                Field::new("depth", DataType::UInt16, true),
                Field::new("nodes", DataType::UInt64, true),
                Field::new("time_ms", DataType::UInt32, true),
                Field::new("source", utf8(), false),
            ],
            Table::Failures => vec![
                Field::new("board_id", DataType::UInt64, false),
                Field::new("fen", utf8(), false),
                Field::new("reason", utf8(), false),
                Field::new("attempts", DataType::UInt32, false),
                Field::new("detail", utf8(), false),
            ],
        };
        Arc::new(Schema::new(fields))
    }
}

/// The JSON type names used in `schemas/v1/*.json`.
#[cfg(test)]
pub(crate) fn type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::UInt8 => "uint8".into(),
        DataType::UInt16 => "uint16".into(),
        DataType::UInt32 => "uint32".into(),
        DataType::UInt64 => "uint64".into(),
        DataType::Utf8 => "string".into(),
        DataType::Int32 => "int32".into(),
        DataType::Float64 => "float64".into(),
        DataType::Date32 => "date".into(),
        DataType::Time32(TimeUnit::Second) => "time_seconds".into(),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `schemas/v1/<table>.json` lists the same columns, types and nullability.
    #[test]
    fn schema_files_match_code() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("schemas")
            .join(format!("v{SCHEMA_VERSION}"));
        for table in Table::ALL {
            let path = dir.join(format!("{}.json", table.name()));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(doc["table"], table.name());
            assert_eq!(doc["version"], SCHEMA_VERSION);
            assert_eq!(doc["partitioned_by"], serde_json::json!(["split"]));
            let columns = doc["columns"].as_array().unwrap();
            let schema = table.schema();
            assert_eq!(columns.len(), schema.fields().len(), "{}", path.display());
            for (col, field) in columns.iter().zip(schema.fields()) {
                assert_eq!(col["name"], field.name().as_str(), "{}", path.display());
                assert_eq!(
                    col["type"],
                    type_name(field.data_type()),
                    "{}",
                    field.name()
                );
                assert_eq!(col["nullable"], field.is_nullable(), "{}", field.name());
                assert!(
                    col["description"].as_str().is_some_and(|d| d.len() > 10),
                    "{} needs a description",
                    field.name()
                );
            }
        }
    }
}
