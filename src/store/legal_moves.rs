//! The `legal_moves` part writer.
//!
//! The table has one row per (board, legal move): ~30 rows per board,
//! billions at ChessBench scale, so its writer is specialised. `board_id` and
//! `action` go through parquet's Arrow column writers (DELTA_BINARY_PACKED
//! ids, plain u16 actions, zstd). `uci` is a pure function of `action`, so
//! its column chunk is written directly: one dictionary page holding the
//! 1968-move vocabulary in action order, and data pages whose dictionary
//! indices *are* the action numbers, bit-packed at 11 bits. That is the
//! layout a dictionary encoder would produce (indices in another order), read
//! by every Parquet reader, without hashing 4-5 byte strings per row.

use std::{fs::File, io::BufWriter, path::Path, sync::Arc};

use arrow_array::{ArrayRef, UInt16Array, UInt64Array};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use parquet::{
    arrow::{
        ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata,
        arrow_writer::{ArrowRowGroupWriterFactory, compute_leaves},
    },
    basic::{Compression, Encoding, ZstdLevel},
    column::{
        page::{CompressedPage, Page, PageWriter},
        writer::ColumnCloseResult,
    },
    file::{
        metadata::ColumnChunkMetaData,
        writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite},
    },
    schema::types::ColumnDescPtr,
};

use super::{StoreError, schema::Table, writer::properties};
use crate::chess::{NUM_ACTIONS, vocabulary};

/// Rows per row group.
pub const ROW_GROUP_ROWS: usize = 1 << 20;
/// Values per `uci` data page.
const PAGE_VALUES: usize = 64 * 1024;
/// Bits per dictionary index (1968 actions < 2^11).
const INDEX_BITS: u32 = 11;
const ZSTD_LEVEL: i32 = 1;

const _: () = assert!(NUM_ACTIONS <= 1 << INDEX_BITS);

/// Writes one `legal_moves` part file.
pub struct LegalMovesWriter {
    writer: SerializedFileWriter<BufWriter<File>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    uci_descr: ColumnDescPtr,
    board_ids: Vec<u64>,
    actions: Vec<u16>,
    rows: u64,
    row_groups: usize,
    path: std::path::PathBuf,
}

fn perr(path: &Path) -> impl Fn(parquet::errors::ParquetError) -> StoreError + '_ {
    move |e| StoreError::parquet(path, e)
}

impl LegalMovesWriter {
    /// Creates `path`.
    pub fn create(path: &Path) -> Result<LegalMovesWriter, StoreError> {
        let schema = Table::LegalMoves.schema();
        let mut props = properties(Table::LegalMoves);
        add_encoded_arrow_schema_to_metadata(&schema, &mut props);
        let props = Arc::new(props);
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&schema)
            .map_err(perr(path))?;
        let uci_descr = parquet_schema.column(2);
        let file = File::create(path).map_err(|e| StoreError::io(path, e))?;
        let writer = SerializedFileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            parquet_schema.root_schema_ptr(),
            props,
        )
        .map_err(perr(path))?;
        let factory = ArrowRowGroupWriterFactory::new(&writer, Arc::clone(&schema));
        Ok(LegalMovesWriter {
            writer,
            factory,
            schema,
            uci_descr,
            board_ids: Vec::with_capacity(ROW_GROUP_ROWS),
            actions: Vec::with_capacity(ROW_GROUP_ROWS),
            rows: 0,
            row_groups: 0,
            path: path.to_owned(),
        })
    }

    /// Appends the (sorted) legal actions of one board.
    pub fn push(&mut self, board_id: u64, actions: &[u16]) -> Result<(), StoreError> {
        let mut rest = actions;
        while !rest.is_empty() {
            let room = ROW_GROUP_ROWS - self.actions.len();
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.board_ids
                .extend(std::iter::repeat_n(board_id, now.len()));
            self.actions.extend_from_slice(now);
            if self.actions.len() == ROW_GROUP_ROWS {
                self.flush()?;
            }
            rest = later;
        }
        Ok(())
    }

    /// Rows written so far (flushed or pending).
    pub fn rows(&self) -> u64 {
        self.rows + self.actions.len() as u64
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.actions.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let ids: ArrayRef = Arc::new(UInt64Array::from(std::mem::take(&mut self.board_ids)));
        let actions = std::mem::take(&mut self.actions);
        let (uci_bytes, uci_close) = uci_chunk(&actions, &self.uci_descr).map_err(perr(&path))?;
        let action_array: ArrayRef = Arc::new(UInt16Array::from(actions));
        let mut writers = self
            .factory
            .create_column_writers(self.row_groups)
            .map_err(perr(&path))?;
        let mut rg = self.writer.next_row_group().map_err(perr(&path))?;
        let fields = self.schema.fields();
        for (i, array) in [&ids, &action_array].into_iter().enumerate() {
            let writer = &mut writers[i];
            for leaf in compute_leaves(&fields[i], array).map_err(perr(&path))? {
                writer.write(&leaf).map_err(perr(&path))?;
            }
        }
        let mut writers = writers.into_iter();
        for _ in 0..2 {
            if let Some(w) = writers.next() {
                w.close()
                    .map_err(perr(&path))?
                    .append_to_row_group(&mut rg)
                    .map_err(perr(&path))?;
            }
        }
        rg.append_column(&uci_bytes, uci_close)
            .map_err(perr(&path))?;
        rg.close().map_err(perr(&path))?;
        self.rows += action_array.len() as u64;
        self.row_groups += 1;
        self.board_ids = Vec::with_capacity(ROW_GROUP_ROWS);
        self.actions = Vec::with_capacity(ROW_GROUP_ROWS);
        Ok(())
    }

    /// Flushes and fsyncs the file; returns the number of rows.
    pub fn finish(mut self) -> Result<u64, StoreError> {
        self.flush()?;
        let path = self.path.clone();
        let buf = self.writer.into_inner().map_err(perr(&path))?;
        let file = buf
            .into_inner()
            .map_err(|e| StoreError::io(&path, e.into_error()))?;
        file.sync_all().map_err(|e| StoreError::io(&path, e))?;
        Ok(self.rows)
    }
}

/// Appends `values` bit-packed at [`INDEX_BITS`] in the RLE/bit-packing
/// hybrid encoding: runs of up to 63 groups of 8 values, each run headed by
/// `varint(groups << 1 | 1)` (one byte), values packed LSB first; the last
/// group is padded with zeros (readers stop at the page's value count).
pub fn bit_pack(values: &[u16], out: &mut Vec<u8>) {
    for run in values.chunks(63 * 8) {
        let groups = run.len().div_ceil(8);
        out.push(((groups << 1) | 1) as u8);
        let mut acc: u64 = 0;
        let mut bits = 0u32;
        for i in 0..groups * 8 {
            acc |= u64::from(run.get(i).copied().unwrap_or(0)) << bits;
            bits += INDEX_BITS;
            while bits >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                bits -= 8;
            }
        }
        debug_assert_eq!(bits, 0, "8 values of 11 bits are 11 whole bytes");
    }
}

fn zstd_page(raw: &[u8]) -> Result<Bytes, parquet::errors::ParquetError> {
    zstd::bulk::compress(raw, ZSTD_LEVEL)
        .map(Bytes::from)
        .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
}

/// The encoded `uci` column chunk of a row group and its metadata.
fn uci_chunk(
    actions: &[u16],
    descr: &ColumnDescPtr,
) -> Result<(Bytes, ColumnCloseResult), parquet::errors::ParquetError> {
    let mut sink = TrackedWrite::new(Vec::with_capacity(actions.len() * 2));
    let (mut compressed, mut uncompressed) = (0i64, 0i64);
    let data_page_offset;
    {
        let mut pages = SerializedPageWriter::new(&mut sink);
        // Dictionary page: the vocabulary in action order, PLAIN encoded.
        let mut dict = Vec::with_capacity(NUM_ACTIONS * 9);
        for uci in vocabulary().iter_uci() {
            dict.extend_from_slice(&(uci.len() as u32).to_le_bytes());
            dict.extend_from_slice(uci.as_bytes());
        }
        let spec = pages.write_page(CompressedPage::new(
            Page::DictionaryPage {
                buf: zstd_page(&dict)?,
                num_values: NUM_ACTIONS as u32,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            },
            dict.len(),
        ))?;
        compressed += spec.bytes_written as i64;
        uncompressed +=
            (spec.bytes_written as usize - spec.compressed_size + spec.uncompressed_size) as i64;
        data_page_offset = spec.bytes_written as i64;
        let mut raw = Vec::with_capacity(PAGE_VALUES * 2);
        for page in actions.chunks(PAGE_VALUES) {
            raw.clear();
            raw.push(INDEX_BITS as u8);
            bit_pack(page, &mut raw);
            let spec = pages.write_page(CompressedPage::new(
                Page::DataPage {
                    buf: zstd_page(&raw)?,
                    num_values: page.len() as u32,
                    encoding: Encoding::RLE_DICTIONARY,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    statistics: None,
                },
                raw.len(),
            ))?;
            compressed += spec.bytes_written as i64;
            uncompressed += (spec.bytes_written as usize - spec.compressed_size
                + spec.uncompressed_size) as i64;
        }
        pages.close()?;
    }
    let bytes_written = sink.bytes_written() as u64;
    let buf = sink.into_inner()?;
    let metadata = ColumnChunkMetaData::builder(descr.clone())
        .set_encodings(vec![
            Encoding::PLAIN,
            Encoding::RLE,
            Encoding::RLE_DICTIONARY,
        ])
        .set_num_values(actions.len() as i64)
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL)?))
        .set_total_compressed_size(compressed)
        .set_total_uncompressed_size(uncompressed)
        .set_dictionary_page_offset(Some(0))
        .set_data_page_offset(data_page_offset)
        .build()?;
    Ok((
        Bytes::from(buf),
        ColumnCloseResult {
            bytes_written,
            rows_written: actions.len() as u64,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, StringArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    #[test]
    fn bit_packing_matches_the_parquet_layout() {
        // 8 values of 11 bits: 11 bytes after a 1-byte header (1 group).
        let mut out = Vec::new();
        bit_pack(&[1, 2, 3, 4, 5, 6, 7, 2047], &mut out);
        assert_eq!(out.len(), 12);
        assert_eq!(out[0], 0b11);
        assert_eq!(out[1], 1); // value 0, low 8 bits
        assert_eq!(out[2] & 0b111, 0); // value 0, high 3 bits
        assert_eq!(out[2] >> 3, 2 & 0b11111); // value 1 starts at bit 11
        assert_eq!(*out.last().unwrap(), 0xff); // 2047's top bits
    }

    #[test]
    fn round_trip_through_arrow_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("lm.parquet");
        let mut w = LegalMovesWriter::create(&path).unwrap();
        let mut expected = Vec::new();
        // Enough rows for two row groups and many pages, every action used.
        let mut board = 0u64;
        while expected.len() < ROW_GROUP_ROWS + 70_000 {
            let actions: Vec<u16> = (0..37u16)
                .map(|j| ((board as u32 * 131 + u32::from(j) * 53) % NUM_ACTIONS as u32) as u16)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            for &a in &actions {
                expected.push((board, a));
            }
            w.push(board, &actions).unwrap();
            board += 1;
        }
        assert_eq!(w.finish().unwrap(), expected.len() as u64);
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        assert_eq!(
            reader.schema().fields(),
            Table::LegalMoves.schema().fields()
        );
        assert_eq!(reader.metadata().num_row_groups(), 2);
        let vocab = vocabulary();
        let mut got = Vec::new();
        for batch in reader.build().unwrap() {
            let batch = batch.unwrap();
            let ids = batch
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .unwrap();
            let acts = batch
                .column(1)
                .as_any()
                .downcast_ref::<UInt16Array>()
                .unwrap();
            let uci = batch
                .column(2)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap();
            for i in 0..batch.num_rows() {
                assert_eq!(Some(uci.value(i)), vocab.uci(acts.value(i)));
                got.push((ids.value(i), acts.value(i)));
            }
            assert_eq!(uci.null_count(), 0);
        }
        assert_eq!(got, expected);
    }
}
