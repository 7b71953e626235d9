//! Batches of the `boards` table ([`Table::Boards`]) built row by row: the
//! one place that knows the table's columns, for every stage that writes
//! boards (ingest's distinct boards, `bag import`'s boards of published
//! records). The batch's columns are matched to `store::schema` by name.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, RecordBatch,
    builder::{ArrayBuilder, StringBuilder, UInt8Builder, UInt32Builder, UInt64Builder},
};
use arrow_schema::ArrowError;

use super::schema::Table;

/// How a board ends the game when it has no legal move (`terminal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Terminal {
    /// It has a legal move.
    None,
    Checkmate,
    Stalemate,
}

impl Terminal {
    /// The `terminal` column's value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Terminal::None => "none",
            Terminal::Checkmate => "checkmate",
            Terminal::Stalemate => "stalemate",
        }
    }
}

/// Where a board was seen in the games it came from: ingest counts it, a
/// board imported from published records has none of it (nulls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Positions with this board over the split's games (`occurrences`).
    pub(crate) occurrences: u64,
    /// The game and ply where it first occurred.
    pub(crate) first_game_no: u64,
    pub(crate) first_ply: u32,
}

/// One board, as a row of `boards`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BoardRow<'a> {
    pub(crate) board_id: u64,
    pub(crate) fen: &'a str,
    pub(crate) white_to_move: bool,
    /// Legal moves (`num_legal_moves`, at most 218 in chess).
    pub(crate) legal_moves: usize,
    pub(crate) terminal: Terminal,
    pub(crate) seen: Option<Seen>,
}

/// The rows of one `boards` batch being built; [`BoardRows::finish`] takes
/// them as a batch and starts the next.
pub(crate) struct BoardRows {
    board_id: UInt64Builder,
    fen: StringBuilder,
    side_to_move: StringBuilder,
    occurrences: UInt64Builder,
    num_legal_moves: UInt8Builder,
    terminal: StringBuilder,
    first_game_no: UInt64Builder,
    first_ply: UInt32Builder,
}

impl BoardRows {
    /// Room for `rows` rows without growing (FENs of 64 bytes or less).
    pub(crate) fn with_capacity(rows: usize) -> BoardRows {
        BoardRows {
            board_id: UInt64Builder::with_capacity(rows),
            fen: StringBuilder::with_capacity(rows, rows * 64),
            side_to_move: StringBuilder::with_capacity(rows, rows),
            occurrences: UInt64Builder::with_capacity(rows),
            num_legal_moves: UInt8Builder::with_capacity(rows),
            terminal: StringBuilder::with_capacity(rows, rows * 4),
            first_game_no: UInt64Builder::with_capacity(rows),
            first_ply: UInt32Builder::with_capacity(rows),
        }
    }

    /// Rows pushed since the last batch.
    pub(crate) fn len(&self) -> usize {
        self.board_id.len()
    }

    pub(crate) fn push(&mut self, row: BoardRow<'_>) {
        self.board_id.append_value(row.board_id);
        self.fen.append_value(row.fen);
        self.side_to_move
            .append_value(if row.white_to_move { "w" } else { "b" });
        self.num_legal_moves
            .append_value(row.legal_moves.min(usize::from(u8::MAX)) as u8);
        self.terminal.append_value(row.terminal.name());
        self.occurrences
            .append_option(row.seen.map(|s| s.occurrences));
        self.first_game_no
            .append_option(row.seen.map(|s| s.first_game_no));
        self.first_ply.append_option(row.seen.map(|s| s.first_ply));
    }

    /// The rows pushed since the last batch, as a batch with the schema of
    /// [`Table::Boards`].
    pub(crate) fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let named: [(&str, ArrayRef); 8] = [
            ("board_id", Arc::new(self.board_id.finish())),
            ("fen", Arc::new(self.fen.finish())),
            ("side_to_move", Arc::new(self.side_to_move.finish())),
            ("occurrences", Arc::new(self.occurrences.finish())),
            ("num_legal_moves", Arc::new(self.num_legal_moves.finish())),
            ("terminal", Arc::new(self.terminal.finish())),
            ("first_game_no", Arc::new(self.first_game_no.finish())),
            ("first_ply", Arc::new(self.first_ply.finish())),
        ];
        let schema = Table::Boards.schema();
        let columns = schema
            .fields()
            .iter()
            .map(|field| {
                named
                    .iter()
                    .find(|(name, _)| name == field.name())
                    .map(|(_, column)| column.clone())
                    .ok_or_else(|| {
                        ArrowError::SchemaError(format!(
                            "boards: no column {} built for the table's schema",
                            field.name()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if columns.len() != named.len() {
            return Err(ArrowError::SchemaError(format!(
                "boards: {} columns built, the table's schema has {}",
                named.len(),
                columns.len()
            )));
        }
        RecordBatch::try_new(schema, columns)
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Array, StringArray, UInt8Array, UInt32Array, UInt64Array};

    use super::*;

    #[test]
    fn rows_become_a_batch_of_the_boards_schema_and_the_builder_starts_again() {
        let mut rows = BoardRows::with_capacity(2);
        rows.push(BoardRow {
            board_id: 0,
            fen: "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
            white_to_move: true,
            legal_moves: 20,
            terminal: Terminal::None,
            seen: Some(Seen {
                occurrences: 3,
                first_game_no: 7,
                first_ply: 0,
            }),
        });
        rows.push(BoardRow {
            board_id: 1,
            fen: "7k/5Q2/6K1/8/8/8/8/8 b - - 0 1",
            white_to_move: false,
            legal_moves: 0,
            terminal: Terminal::Stalemate,
            seen: None,
        });
        assert_eq!(rows.len(), 2);
        let batch = rows.finish().unwrap();
        assert_eq!(batch.schema(), Table::Boards.schema());
        assert_eq!(batch.num_rows(), 2);
        let column = |name: &str| batch.column_by_name(name).unwrap().clone();
        let side = column("side_to_move");
        let side = side.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!((side.value(0), side.value(1)), ("w", "b"));
        let legal = column("num_legal_moves");
        let legal = legal.as_any().downcast_ref::<UInt8Array>().unwrap();
        assert_eq!((legal.value(0), legal.value(1)), (20, 0));
        let terminal = column("terminal");
        let terminal = terminal.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(terminal.value(1), "stalemate");
        let occurrences = column("occurrences");
        let occurrences = occurrences.as_any().downcast_ref::<UInt64Array>().unwrap();
        assert_eq!(occurrences.value(0), 3);
        assert!(occurrences.is_null(1), "an imported board has no count");
        let ply = column("first_ply");
        let ply = ply.as_any().downcast_ref::<UInt32Array>().unwrap();
        assert!(ply.is_valid(0) && ply.is_null(1));
        // The next batch starts empty.
        assert_eq!(rows.len(), 0);
        assert_eq!(rows.finish().unwrap().num_rows(), 0);
    }
}
