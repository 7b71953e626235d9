//! Row sinks for the `games` and `rejects` tables: Arrow builders flushed as
//! record batches into rotating part files.

use std::{path::PathBuf, sync::Arc};

use arrow_array::{
    ArrayRef, RecordBatch,
    builder::{
        Date32Builder, StringBuilder, Time32SecondBuilder, UInt16Builder, UInt32Builder,
        UInt64Builder,
    },
};

use super::{error::IngestError, visitor::RejectReason, worker::GameMeta};
use crate::store::{
    Table,
    writer::{PartWriter, part_file_name},
};

const BATCH_ROWS: usize = 64 * 1024;
const PART_ROWS: u64 = 1 << 22;

/// Where a game was in its input.
#[derive(Debug, Clone, Copy)]
pub struct Position<'a> {
    pub game_no: u64,
    pub source: &'a str,
    pub game_index: u64,
    pub byte_offset: u64,
    pub line: u64,
}

/// Builds `games` batches.
pub(crate) struct GamesBuilder {
    game_no: UInt64Builder,
    id: StringBuilder,
    event: StringBuilder,
    white_elo: UInt16Builder,
    black_elo: UInt16Builder,
    time_control: StringBuilder,
    base_seconds: UInt32Builder,
    increment_seconds: UInt32Builder,
    speed: StringBuilder,
    result: StringBuilder,
    termination: StringBuilder,
    utc_date: Date32Builder,
    utc_time: Time32SecondBuilder,
    eco: StringBuilder,
    opening: StringBuilder,
    plies: UInt32Builder,
    source: StringBuilder,
    game_index: UInt64Builder,
    byte_offset: UInt64Builder,
    line: UInt64Builder,
    rows: usize,
}

impl Default for GamesBuilder {
    fn default() -> Self {
        GamesBuilder {
            game_no: UInt64Builder::new(),
            id: StringBuilder::new(),
            event: StringBuilder::new(),
            white_elo: UInt16Builder::new(),
            black_elo: UInt16Builder::new(),
            time_control: StringBuilder::new(),
            base_seconds: UInt32Builder::new(),
            increment_seconds: UInt32Builder::new(),
            speed: StringBuilder::new(),
            result: StringBuilder::new(),
            termination: StringBuilder::new(),
            utc_date: Date32Builder::new(),
            utc_time: Time32SecondBuilder::new(),
            eco: StringBuilder::new(),
            opening: StringBuilder::new(),
            plies: UInt32Builder::new(),
            source: StringBuilder::new(),
            game_index: UInt64Builder::new(),
            byte_offset: UInt64Builder::new(),
            line: UInt64Builder::new(),
            rows: 0,
        }
    }
}

impl GamesBuilder {
    pub(crate) fn push(&mut self, at: &Position<'_>, meta: &GameMeta) {
        self.game_no.append_value(at.game_no);
        self.id.append_option(meta.id.as_deref());
        self.event.append_option(meta.event.as_deref());
        self.white_elo.append_option(meta.white_elo);
        self.black_elo.append_option(meta.black_elo);
        self.time_control
            .append_option(meta.time_control.as_deref());
        self.base_seconds.append_option(meta.clock.map(|c| c.0));
        self.increment_seconds
            .append_option(meta.clock.map(|c| c.1));
        self.speed.append_option(meta.speed.map(|s| s.name()));
        self.result.append_option(meta.result.as_deref());
        self.termination.append_option(meta.termination.as_deref());
        self.utc_date.append_option(meta.utc_date);
        self.utc_time.append_option(meta.utc_time);
        self.eco.append_option(meta.eco.as_deref());
        self.opening.append_option(meta.opening.as_deref());
        self.plies.append_value(meta.plies);
        self.source.append_value(at.source);
        self.game_index.append_value(at.game_index);
        self.byte_offset.append_value(at.byte_offset);
        self.line.append_value(at.line);
        self.rows += 1;
    }

    fn finish(&mut self) -> Result<RecordBatch, IngestError> {
        self.rows = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.game_no.finish()),
            Arc::new(self.id.finish()),
            Arc::new(self.event.finish()),
            Arc::new(self.white_elo.finish()),
            Arc::new(self.black_elo.finish()),
            Arc::new(self.time_control.finish()),
            Arc::new(self.base_seconds.finish()),
            Arc::new(self.increment_seconds.finish()),
            Arc::new(self.speed.finish()),
            Arc::new(self.result.finish()),
            Arc::new(self.termination.finish()),
            Arc::new(self.utc_date.finish()),
            Arc::new(self.utc_time.finish()),
            Arc::new(self.eco.finish()),
            Arc::new(self.opening.finish()),
            Arc::new(self.plies.finish()),
            Arc::new(self.source.finish()),
            Arc::new(self.game_index.finish()),
            Arc::new(self.byte_offset.finish()),
            Arc::new(self.line.finish()),
        ];
        RecordBatch::try_new(Table::Games.schema(), columns)
            .map_err(|e| IngestError::Internal(format!("games batch: {e}")))
    }
}

/// Builds `rejects` batches.
pub(crate) struct RejectsBuilder {
    game_no: UInt64Builder,
    source: StringBuilder,
    game_index: UInt64Builder,
    byte_offset: UInt64Builder,
    line: UInt64Builder,
    reason: StringBuilder,
    detail: StringBuilder,
    ply: UInt32Builder,
    id: StringBuilder,
    rows: usize,
}

impl Default for RejectsBuilder {
    fn default() -> Self {
        RejectsBuilder {
            game_no: UInt64Builder::new(),
            source: StringBuilder::new(),
            game_index: UInt64Builder::new(),
            byte_offset: UInt64Builder::new(),
            line: UInt64Builder::new(),
            reason: StringBuilder::new(),
            detail: StringBuilder::new(),
            ply: UInt32Builder::new(),
            id: StringBuilder::new(),
            rows: 0,
        }
    }
}

impl RejectsBuilder {
    pub(crate) fn push(
        &mut self,
        at: &Position<'_>,
        reason: RejectReason,
        detail: Option<&str>,
        ply: Option<u32>,
        id: Option<&str>,
    ) {
        self.game_no.append_value(at.game_no);
        self.source.append_value(at.source);
        self.game_index.append_value(at.game_index);
        self.byte_offset.append_value(at.byte_offset);
        self.line.append_value(at.line);
        self.reason.append_value(reason.name());
        self.detail.append_option(detail);
        self.ply.append_option(ply);
        self.id.append_option(id);
        self.rows += 1;
    }

    fn finish(&mut self) -> Result<RecordBatch, IngestError> {
        self.rows = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.game_no.finish()),
            Arc::new(self.source.finish()),
            Arc::new(self.game_index.finish()),
            Arc::new(self.byte_offset.finish()),
            Arc::new(self.line.finish()),
            Arc::new(self.reason.finish()),
            Arc::new(self.detail.finish()),
            Arc::new(self.ply.finish()),
            Arc::new(self.id.finish()),
        ];
        RecordBatch::try_new(Table::Rejects.schema(), columns)
            .map_err(|e| IngestError::Internal(format!("rejects batch: {e}")))
    }
}

/// A builder that can be flushed into a batch.
pub(crate) trait BatchBuilder: Default {
    const TABLE: Table;
    fn rows(&self) -> usize;
    fn finish_batch(&mut self) -> Result<RecordBatch, IngestError>;
}

impl BatchBuilder for GamesBuilder {
    const TABLE: Table = Table::Games;
    fn rows(&self) -> usize {
        self.rows
    }
    fn finish_batch(&mut self) -> Result<RecordBatch, IngestError> {
        self.finish()
    }
}

impl BatchBuilder for RejectsBuilder {
    const TABLE: Table = Table::Rejects;
    fn rows(&self) -> usize {
        self.rows
    }
    fn finish_batch(&mut self) -> Result<RecordBatch, IngestError> {
        self.finish()
    }
}

/// Rows of one table partition, written to part files of up to 4M rows.
pub(crate) struct RowSink<B: BatchBuilder> {
    pub builder: B,
    dir: PathBuf,
    writer: Option<PartWriter>,
    next_part: u64,
    rows: u64,
}

impl<B: BatchBuilder> RowSink<B> {
    pub(crate) fn new(dir: PathBuf) -> RowSink<B> {
        RowSink {
            builder: B::default(),
            dir,
            writer: None,
            next_part: 0,
            rows: 0,
        }
    }

    /// Call after each pushed row.
    pub(crate) fn row_added(&mut self) -> Result<(), IngestError> {
        self.rows += 1;
        if self.builder.rows() >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), IngestError> {
        if self.builder.rows() == 0 && self.writer.is_some() {
            return Ok(());
        }
        let batch = self.builder.finish_batch()?;
        if self.writer.is_none() {
            let path = self.dir.join(part_file_name(self.next_part));
            self.next_part += 1;
            self.writer = Some(PartWriter::create(&path, B::TABLE)?);
        }
        if let Some(w) = self.writer.as_mut() {
            w.write(&batch)?;
            if w.rows() >= PART_ROWS
                && let Some(w) = self.writer.take()
            {
                w.finish()?;
            }
        }
        Ok(())
    }

    /// Flushes and closes; always leaves at least one (possibly empty) part.
    pub(crate) fn finish(mut self) -> Result<u64, IngestError> {
        if self.builder.rows() > 0 || self.next_part == 0 {
            self.flush()?;
        }
        if let Some(w) = self.writer.take() {
            w.finish()?;
        }
        Ok(self.rows)
    }
}
