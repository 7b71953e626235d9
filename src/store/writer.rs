//! Parquet part writers with explicit, per-table properties.
//!
//! Every file is written inside a transaction's staging directory and only
//! becomes visible when the transaction commits (see [`super::commit`]).

use std::{
    fs::File,
    io::BufWriter,
    path::{Path, PathBuf},
    sync::Arc,
};

use arrow_array::RecordBatch;
use parquet::{
    arrow::{
        ArrowWriter,
        arrow_writer::{
            ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves,
        },
    },
    basic::{Compression, Encoding, ZstdLevel},
    file::{
        properties::{EnabledStatistics, WriterProperties, WriterVersion},
        writer::SerializedFileWriter,
    },
    schema::types::ColumnPath,
};

use super::{error::StoreError, schema::Table};

/// Rows per row group of the value tables (the training loader's units).
pub(crate) const VALUE_ROW_GROUP_ROWS: usize = 64 * 1024;

/// Boards per part file; legal_moves part N covers the same board ids.
pub(crate) const BOARDS_PER_PART: u64 = 1 << 20;

/// Rows per row group of `boards` (a part is 8 of them).
pub(crate) const BOARDS_ROW_GROUP_ROWS: usize = 128 * 1024;

fn zstd(level: i32) -> Compression {
    // Levels 1..=22 are valid; the constants below are in range.
    Compression::ZSTD(ZstdLevel::try_new(level).unwrap_or_default())
}

/// Writer properties for a table. Chosen per column from measurements on real
/// Lichess data (see README, "Benchmarks"):
/// - dense, sorted ids use DELTA_BINARY_PACKED (a few bits per row);
/// - low-cardinality strings (speed, result, uci, reason) use dictionaries;
/// - FENs are unique per split, so no dictionary, zstd does the work.
pub(crate) fn properties(table: Table) -> WriterProperties {
    let col = |name: &str| ColumnPath::from(name);
    let b = WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_1_0)
        .set_created_by(format!("chessbench {}", env!("CARGO_PKG_VERSION")))
        .set_statistics_enabled(EnabledStatistics::Chunk);
    match table {
        Table::Games => b
            .set_compression(zstd(1))
            .set_max_row_group_row_count(Some(128 * 1024))
            .set_column_dictionary_enabled(col("game_no"), false)
            .set_column_encoding(col("game_no"), Encoding::DELTA_BINARY_PACKED)
            .set_column_dictionary_enabled(col("id"), false)
            .set_column_dictionary_enabled(col("byte_offset"), false)
            .set_column_encoding(col("byte_offset"), Encoding::DELTA_BINARY_PACKED)
            .set_column_dictionary_enabled(col("line"), false)
            .set_column_encoding(col("line"), Encoding::DELTA_BINARY_PACKED)
            .set_column_dictionary_enabled(col("game_index"), false)
            .set_column_encoding(col("game_index"), Encoding::DELTA_BINARY_PACKED)
            .build(),
        Table::Boards => b
            // Level 1 is both faster and, on FEN columns, smaller than 3
            // (bench/results/amd2-2026-11-29/README.md, "Figures once kept
            // in the source").
            .set_compression(zstd(1))
            .set_max_row_group_row_count(Some(BOARDS_ROW_GROUP_ROWS))
            .set_column_dictionary_enabled(col("board_id"), false)
            .set_column_encoding(col("board_id"), Encoding::DELTA_BINARY_PACKED)
            .set_column_dictionary_enabled(col("fen"), false)
            .set_column_statistics_enabled(col("fen"), EnabledStatistics::None)
            .set_column_dictionary_enabled(col("first_game_no"), false)
            .set_column_encoding(col("first_game_no"), Encoding::DELTA_BINARY_PACKED)
            .build(),
        Table::LegalMoves => b
            .set_compression(zstd(1))
            .set_max_row_group_row_count(Some(1 << 20))
            .set_write_batch_size(64 * 1024)
            .set_statistics_enabled(EnabledStatistics::None)
            .set_column_statistics_enabled(col("board_id"), EnabledStatistics::Chunk)
            .set_column_dictionary_enabled(col("board_id"), false)
            .set_column_encoding(col("board_id"), Encoding::DELTA_BINARY_PACKED)
            // Written by store::legal_moves, which lays out the column
            // chunks itself (action and uci as 16-bit dictionary indices);
            // these settings give the file's schema and metadata.
            .build(),
        Table::Rejects | Table::Failures => b
            .set_compression(zstd(3))
            .set_max_row_group_row_count(Some(128 * 1024))
            .build(),
        // Annotation chunks: one row group per chunk file. Sorted ids are
        // delta encoded; values keep dictionaries (a few thousand distinct
        // centipawn scores and win probabilities per chunk); zstd 3 on the
        // pages, since these files are written once and read many times.
        // Row groups are the training loader's units (a window shuffles a
        // few together), so they stay small: an annotated chunk is one
        // (1,024 boards: ~30k action values), an imported split 64k rows.
        Table::StateValues | Table::ActionValues => b
            .set_compression(zstd(3))
            .set_max_row_group_row_count(Some(VALUE_ROW_GROUP_ROWS))
            .set_column_dictionary_enabled(col("board_id"), false)
            .set_column_encoding(col("board_id"), Encoding::DELTA_BINARY_PACKED)
            .set_column_dictionary_enabled(col("action"), false)
            .set_column_encoding(col("action"), Encoding::DELTA_BINARY_PACKED)
            .set_column_dictionary_enabled(col("nodes"), false)
            .set_column_encoding(col("nodes"), Encoding::DELTA_BINARY_PACKED)
            .build(),
    }
}

/// One Parquet file being written.
pub(crate) struct PartWriter {
    writer: ArrowWriter<BufWriter<File>>,
    path: PathBuf,
    rows: u64,
}

impl PartWriter {
    /// Creates `path` (its directory must exist) for `table`.
    pub(crate) fn create(path: &Path, table: Table) -> Result<PartWriter, StoreError> {
        let file = File::create(path).map_err(|e| StoreError::io(path, e))?;
        let writer = ArrowWriter::try_new(
            BufWriter::with_capacity(1 << 20, file),
            table.schema(),
            Some(properties(table)),
        )
        .map_err(|e| StoreError::parquet(path, e))?;
        Ok(PartWriter {
            writer,
            path: path.to_owned(),
            rows: 0,
        })
    }

    /// Appends a batch (its schema must be the table's).
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), StoreError> {
        self.rows += batch.num_rows() as u64;
        self.writer
            .write(batch)
            .map_err(|e| StoreError::parquet(&self.path, e))
    }

    /// Rows written so far.
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// Finishes the file and flushes it to stable storage.
    pub(crate) fn finish(self) -> Result<u64, StoreError> {
        let PartWriter { writer, path, rows } = self;
        let buf = writer
            .into_inner()
            .map_err(|e| StoreError::parquet(&path, e))?;
        sync_file(buf, &path)?;
        Ok(rows)
    }
}

/// Flushes a finished Parquet file's buffer and the file to stable storage.
pub(crate) fn sync_file(buf: BufWriter<File>, path: &Path) -> Result<(), StoreError> {
    let file = buf
        .into_inner()
        .map_err(|e| StoreError::io(path, e.into_error()))?;
    file.sync_all().map_err(|e| StoreError::io(path, e))?;
    super::commit::note(|| super::commit::Step::SyncFile(path.to_owned()));
    Ok(())
}

/// `part-00012.parquet`.
pub(crate) fn part_file_name(part: u64) -> String {
    format!("part-{part:05}.parquet")
}

/// A Parquet file whose row groups are encoded elsewhere, on any thread
/// ([`RowGroupEncoder`]), and appended here in order. The file is the one a
/// [`PartWriter`] gives for the same batches cut at the same row-group
/// boundaries: both encode with the same column writers and properties.
pub(crate) struct RowGroupFile {
    writer: SerializedFileWriter<BufWriter<File>>,
    encoder: RowGroupEncoder,
    path: PathBuf,
    rows: u64,
    groups: usize,
}

/// Encodes row groups of one [`RowGroupFile`]; cheap to clone, shareable
/// between threads.
#[derive(Clone)]
pub(crate) struct RowGroupEncoder {
    factory: Arc<ArrowRowGroupWriterFactory>,
    schema: arrow_schema::SchemaRef,
}

/// One encoded row group of a [`RowGroupFile`].
pub(crate) struct EncodedRowGroup {
    chunks: Vec<ArrowColumnChunk>,
    rows: u64,
}

impl RowGroupEncoder {
    /// Starts row group `index` of the file.
    pub(crate) fn begin(
        &self,
        index: usize,
    ) -> Result<RowGroupInProgress, parquet::errors::ParquetError> {
        Ok(RowGroupInProgress {
            writers: self.factory.create_column_writers(index)?,
            schema: self.schema.clone(),
            rows: 0,
        })
    }
}

/// A row group being encoded: batches written one after another, as a
/// [`PartWriter`] writes them.
pub(crate) struct RowGroupInProgress {
    writers: Vec<ArrowColumnWriter>,
    schema: arrow_schema::SchemaRef,
    rows: u64,
}

impl RowGroupInProgress {
    /// Encodes `batch` (the table's schema; the row group stays within the
    /// table's row-group size).
    pub(crate) fn write(
        &mut self,
        batch: &RecordBatch,
    ) -> Result<(), parquet::errors::ParquetError> {
        self.rows += batch.num_rows() as u64;
        let mut next = self.writers.iter_mut();
        for (field, column) in self.schema.fields().iter().zip(batch.columns()) {
            for leaf in compute_leaves(field.as_ref(), column)? {
                next.next()
                    .ok_or_else(|| {
                        parquet::errors::ParquetError::General(
                            "batch has more columns than the table".into(),
                        )
                    })?
                    .write(&leaf)?;
            }
        }
        Ok(())
    }

    /// Closes the column chunks.
    pub(crate) fn finish(self) -> Result<EncodedRowGroup, parquet::errors::ParquetError> {
        let chunks = self
            .writers
            .into_iter()
            .map(|w| w.close())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EncodedRowGroup {
            chunks,
            rows: self.rows,
        })
    }
}

impl RowGroupFile {
    /// Creates `path` (its directory must exist) for `table`.
    pub(crate) fn create(path: &Path, table: Table) -> Result<RowGroupFile, StoreError> {
        let file = File::create(path).map_err(|e| StoreError::io(path, e))?;
        let schema = table.schema();
        let (writer, factory) = ArrowWriter::try_new(
            BufWriter::with_capacity(1 << 20, file),
            schema.clone(),
            Some(properties(table)),
        )
        .and_then(ArrowWriter::into_serialized_writer)
        .map_err(|e| StoreError::parquet(path, e))?;
        Ok(RowGroupFile {
            writer,
            encoder: RowGroupEncoder {
                factory: Arc::new(factory),
                schema,
            },
            path: path.to_owned(),
            rows: 0,
            groups: 0,
        })
    }

    /// The encoder of this file's row groups.
    pub(crate) fn encoder(&self) -> RowGroupEncoder {
        self.encoder.clone()
    }

    /// Appends the next row group (encoded as row group
    /// [`groups`](Self::groups) of this file).
    pub(crate) fn append(&mut self, group: EncodedRowGroup) -> Result<(), StoreError> {
        let path = &self.path;
        let mut rg = self
            .writer
            .next_row_group()
            .map_err(|e| StoreError::parquet(path, e))?;
        for chunk in group.chunks {
            chunk
                .append_to_row_group(&mut rg)
                .map_err(|e| StoreError::parquet(path, e))?;
        }
        rg.close().map_err(|e| StoreError::parquet(path, e))?;
        self.rows += group.rows;
        self.groups += 1;
        Ok(())
    }

    /// Row groups appended so far.
    pub(crate) fn groups(&self) -> usize {
        self.groups
    }

    /// Finishes the file and flushes it to stable storage; returns the rows.
    pub(crate) fn finish(self) -> Result<u64, StoreError> {
        let RowGroupFile {
            writer, path, rows, ..
        } = self;
        let buf = writer
            .into_inner()
            .map_err(|e| StoreError::parquet(&path, e))?;
        sync_file(buf, &path)?;
        Ok(rows)
    }
}
