//! The imported split's `boards` and `legal_moves`: each distinct board's
//! FEN parsed and its legal moves written, in id order, part by part.

use std::path::{Path, PathBuf};

use arrow_array::{ArrayRef, RecordBatch, new_empty_array};

use super::options::BATCH_ROWS;
use crate::{
    bag::{decode::Board, error::BagSetError},
    chess::legal::ValueKind,
    store::{
        StoreError, Table,
        boards::{BoardRow, BoardRows, Terminal},
        parallel::{Encoders, ParallelMovesWriter, ParallelPartWriter},
        writer::{BOARDS_PER_PART, part_file_name},
    },
};

/// Boards seen so far, and the writers of boards / legal_moves.
pub(super) struct Boards {
    /// Boards written so far (the next board's id).
    pub(super) count: u64,
    pub(super) dir: PathBuf,
    pub(super) writer: Option<ParallelPartWriter>,
    pub(super) moves: Option<ParallelMovesWriter>,
    pub(super) moves_dir: PathBuf,
    pub(super) buf: BoardRows,
    pub(super) legal_moves: u64,
    pub(super) with_moves: u64,
    /// Where the part files' row groups are encoded.
    pub(super) encoders: Encoders,
}

impl Boards {
    /// Writes a new board (parsed, with its legal moves) as board `id`,
    /// which must be the next; returns what kind of value it has.
    pub(super) fn add(
        &mut self,
        board: &Board<'_>,
        id: u64,
        at: &dyn Fn(String) -> BagSetError,
    ) -> Result<ValueKind, BagSetError> {
        if id != self.count {
            return Err(at(format!(
                "board ids out of step: new board {id}, expected {} (the scratch files changed under the import?)",
                self.count
            )));
        }
        if id.is_multiple_of(BOARDS_PER_PART) {
            self.flush_part()?;
            let part = id / BOARDS_PER_PART;
            let path = self.dir.join(part_file_name(part));
            self.writer = Some(ParallelPartWriter::create(
                &path,
                Table::Boards,
                self.encoders.clone(),
            )?);
            let path = self.moves_dir.join(part_file_name(part));
            self.moves = Some(ParallelMovesWriter::create(&path, self.encoders.clone())?);
        }
        let actions = board.actions;
        if let Some(w) = self.moves.as_mut() {
            w.push(id, actions)?;
        }
        self.legal_moves += actions.len() as u64;
        self.with_moves += u64::from(!actions.is_empty());
        self.count += 1;
        self.buf.push(BoardRow {
            board_id: id,
            fen: board.fen,
            white_to_move: !board.black_to_move,
            legal_moves: actions.len(),
            terminal: match board.terminal {
                Some(ValueKind::Checkmate) => Terminal::Checkmate,
                Some(ValueKind::Stalemate) => Terminal::Stalemate,
                _ => Terminal::None,
            },
            // Published records say nothing of the games.
            seen: None,
        });
        if self.buf.len() == BATCH_ROWS {
            self.flush_batch()?;
        }
        Ok(board.kind())
    }

    pub(super) fn flush_batch(&mut self) -> Result<(), BagSetError> {
        if self.buf.len() == 0 {
            return Ok(());
        }
        let batch = self
            .buf
            .finish()
            .map_err(|e| StoreError::Corrupt(self.dir.clone(), e.to_string()))?;
        write_to(self.writer.as_mut(), &batch, &self.dir)
    }

    pub(super) fn flush_part(&mut self) -> Result<(), BagSetError> {
        self.flush_batch()?;
        if let Some(w) = self.writer.take() {
            w.finish()?;
        }
        if let Some(w) = self.moves.take() {
            w.finish()?;
        }
        Ok(())
    }
}

/// Writes `columns` as a batch of `table` to the part file open in `dir`.
pub(super) fn write_batch(
    writer: Option<&mut ParallelPartWriter>,
    table: Table,
    columns: Vec<ArrayRef>,
    dir: &Path,
) -> Result<(), BagSetError> {
    let batch = RecordBatch::try_new(table.schema(), columns)
        .map_err(|e| StoreError::Corrupt(dir.to_owned(), e.to_string()))?;
    write_to(writer, &batch, dir)
}

/// Writes `batch` to the part file open in `dir` (none open is a bug in the
/// import's phases, reported as the missing file).
fn write_to(
    writer: Option<&mut ParallelPartWriter>,
    batch: &RecordBatch,
    dir: &Path,
) -> Result<(), BagSetError> {
    match writer {
        Some(w) => Ok(w.write(batch)?),
        None => Err(StoreError::Missing(dir.to_owned()).into()),
    }
}

/// Writes a table file with no rows (games and rejects of an imported split).
pub(super) fn write_empty(dir: &Path, table: Table) -> Result<(), BagSetError> {
    let schema = table.schema();
    let columns = schema
        .fields()
        .iter()
        .map(|f| new_empty_array(f.data_type()))
        .collect();
    let mut w = ParallelPartWriter::create(&dir.join(part_file_name(0)), table, Encoders::Inline)?;
    let batch = RecordBatch::try_new(schema, columns)
        .map_err(|e| StoreError::Corrupt(dir.to_owned(), e.to_string()))?;
    w.write(&batch)?;
    w.finish()?;
    Ok(())
}
