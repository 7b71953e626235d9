//! The `legal_moves` part writer.
//!
//! The table has one row per (board, legal move): ~30 rows per board,
//! billions at ChessBench scale, so its writer is specialised: it encodes
//! the three column chunks itself, as parquet's generic writers would lay
//! them out, at a fraction of their cost, and splices them into row groups.
//! - `board_id`: DELTA_BINARY_PACKED (ids are sorted and repeat ~30 times:
//!   1-2 bits per row before zstd), with min/max statistics;
//! - `action` and `uci`: both pure functions of the action number, so each
//!   has a dictionary page in action order (the numbers 0..1968 as PLAIN
//!   INT32; the 1968-move vocabulary as PLAIN strings) and its data pages'
//!   dictionary indices *are* the action numbers, bit-packed at 16 bits: no
//!   hashing per row, and the two columns' data pages are the same bytes,
//!   compressed once and written twice.

use std::{
    fs::File,
    io::BufWriter,
    path::Path,
    sync::{Arc, OnceLock},
};

use bytes::Bytes;
use parquet::{
    arrow::{ArrowSchemaConverter, add_encoded_arrow_schema_to_metadata},
    basic::{Compression, Encoding, ZstdLevel},
    column::{
        page::{CompressedPage, Page, PageWriter},
        writer::ColumnCloseResult,
    },
    errors::ParquetError,
    file::{
        metadata::ColumnChunkMetaData,
        statistics::Statistics,
        writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite},
    },
    schema::types::ColumnDescPtr,
};

use super::{error::StoreError, schema::Table, writer::properties};
use crate::chess::{NUM_ACTIONS, vocabulary};

/// Rows per row group.
pub(crate) const ROW_GROUP_ROWS: usize = 1 << 20;
/// Values per data page.
const PAGE_VALUES: usize = 64 * 1024;
/// Bits per dictionary index. 11 would do (1968 actions < 2^11), but at 16
/// the bit-packed groups are exactly little-endian u16s: a copy to encode,
/// and zstd compresses the byte-aligned indices to ~0.55 B/row against
/// ~0.97 for 11-bit packing.
const INDEX_BITS: u32 = 16;
const ZSTD_LEVEL: i32 = 1;

const _: () = assert!(NUM_ACTIONS <= 1 << INDEX_BITS);

/// One `legal_moves` part file, taking row groups encoded by
/// [`encode_row_group`] (on any thread) in order; rows are gathered board
/// by board into row groups of [`ROW_GROUP_ROWS`] by
/// [`ParallelMovesWriter`](super::parallel::ParallelMovesWriter).
pub(crate) struct LegalMovesWriter {
    writer: SerializedFileWriter<BufWriter<File>>,
    columns: [ColumnDescPtr; 3],
    rows: u64,
    path: std::path::PathBuf,
}

fn perr(path: &Path) -> impl Fn(ParquetError) -> StoreError + '_ {
    move |e| StoreError::parquet(path, e)
}

impl LegalMovesWriter {
    /// Creates `path`.
    pub(crate) fn create(path: &Path) -> Result<LegalMovesWriter, StoreError> {
        let schema = Table::LegalMoves.schema();
        let mut props = properties(Table::LegalMoves);
        add_encoded_arrow_schema_to_metadata(&schema, &mut props);
        let props = Arc::new(props);
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&schema)
            .map_err(perr(path))?;
        let columns = [0, 1, 2].map(|i| parquet_schema.column(i));
        let file = File::create(path).map_err(|e| StoreError::io(path, e))?;
        let writer = SerializedFileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            parquet_schema.root_schema_ptr(),
            props,
        )
        .map_err(perr(path))?;
        Ok(LegalMovesWriter {
            writer,
            columns,
            rows: 0,
            path: path.to_owned(),
        })
    }

    /// The column descriptors row groups are encoded for
    /// ([`encode_row_group`], on any thread).
    pub(crate) fn columns(&self) -> [ColumnDescPtr; 3] {
        self.columns.clone()
    }

    /// Appends a row group encoded by [`encode_row_group`] with this
    /// writer's [`columns`](Self::columns).
    pub(crate) fn append(&mut self, group: EncodedMovesGroup) -> Result<(), StoreError> {
        let path = &self.path;
        let mut rg = self.writer.next_row_group().map_err(perr(path))?;
        for (bytes, close) in group.chunks {
            rg.append_column(&bytes, close).map_err(perr(path))?;
        }
        rg.close().map_err(perr(path))?;
        self.rows += group.rows;
        Ok(())
    }

    /// Finishes and fsyncs the file; returns the number of rows.
    pub(crate) fn finish(self) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let buf = self.writer.into_inner().map_err(perr(&path))?;
        super::writer::sync_file(buf, &path)?;
        Ok(self.rows)
    }
}

/// An unsigned LEB128 varint.
fn put_uleb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A zigzag-encoded signed LEB128 varint.
fn put_zigzag(out: &mut Vec<u8>, v: i64) {
    put_uleb(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Packs the 32 values of a miniblock LSB first at `width` bits each.
fn pack_miniblock(values: &[u64; 32], width: u32, out: &mut Vec<u8>) {
    match width {
        0 => {}
        1 => {
            let word = values
                .iter()
                .enumerate()
                .fold(0u32, |w, (k, &v)| w | ((v as u32) << k));
            out.extend_from_slice(&word.to_le_bytes());
        }
        2..=32 => {
            let mut acc: u64 = 0;
            let mut bits = 0u32;
            for &v in values {
                acc |= v << bits;
                bits += width;
                if bits >= 32 {
                    out.extend_from_slice(&(acc as u32).to_le_bytes());
                    acc >>= 32;
                    bits -= 32;
                }
            }
            // 32 values of any width fill whole 32-bit words.
            debug_assert_eq!(bits, 0);
        }
        _ => {
            let mut acc: u128 = 0;
            let mut bits = 0u32;
            for &v in values {
                acc |= u128::from(v) << bits;
                bits += width;
                while bits >= 64 {
                    out.extend_from_slice(&(acc as u64).to_le_bytes());
                    acc >>= 64;
                    bits -= 64;
                }
            }
            // 32 values of an odd width end in half a 64-bit word.
            out.extend_from_slice(&(acc as u64).to_le_bytes()[..(bits / 8) as usize]);
        }
    }
}

/// DELTA_BINARY_PACKED encoding of one page: blocks of 128 deltas in 4
/// miniblocks of 32, each bit-packed at its own width above the block's
/// minimum delta (Parquet format spec, "Delta encoding"). Miniblocks past
/// the last value have width 0 and no data.
pub(crate) fn delta_binary_packed(values: &[i64], out: &mut Vec<u8>) {
    const BLOCK: usize = 128;
    const MINIBLOCKS: usize = 4;
    const MINI: usize = BLOCK / MINIBLOCKS;
    put_uleb(out, BLOCK as u64);
    put_uleb(out, MINIBLOCKS as u64);
    put_uleb(out, values.len() as u64);
    put_zigzag(out, values.first().copied().unwrap_or(0));
    let mut deltas = [0i64; BLOCK];
    let mut shifted = [0u64; MINI];
    let mut start = 1;
    while start < values.len() {
        let end = (start + BLOCK).min(values.len());
        let n = end - start;
        let mut min = i64::MAX;
        let pairs = values[start - 1..end - 1].iter().zip(&values[start..end]);
        for (d, (a, b)) in deltas[..n].iter_mut().zip(pairs) {
            *d = b.wrapping_sub(*a);
            min = min.min(*d);
        }
        start = end;
        put_zigzag(out, min);
        let widths_at = out.len();
        out.extend_from_slice(&[0u8; MINIBLOCKS]);
        for (m, mini) in deltas[..n].chunks(MINI).enumerate() {
            let mut or = 0u64;
            for (slot, &d) in shifted.iter_mut().zip(mini) {
                *slot = d.wrapping_sub(min) as u64;
                or |= *slot;
            }
            shifted[mini.len()..].fill(0);
            let width = 64 - or.leading_zeros();
            out[widths_at + m] = width as u8;
            pack_miniblock(&shifted, width, out);
        }
    }
}

/// A page compressed: its bytes, its size before compression, its values.
struct Packed {
    bytes: Bytes,
    raw_len: usize,
    values: u32,
}

/// One `legal_moves` row group, its three column chunks encoded and
/// compressed, ready to be appended ([`LegalMovesWriter::append`]).
pub(crate) struct EncodedMovesGroup {
    chunks: [(Bytes, ColumnCloseResult); 3],
    rows: u64,
}

/// How [`encode_row_group`] uses threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encode {
    /// `board_id` on a thread of its own beside the action pages: for a
    /// writer that encodes its row groups one after another.
    Split,
    /// All on the calling thread: for callers that encode several row
    /// groups at once on their own threads.
    Serial,
}

/// Encodes one row group: `ids[i]` is the board of action `actions[i]`
/// (at most [`ROW_GROUP_ROWS`] rows). A pure function of its inputs, so row
/// groups encoded on any thread and appended in order give the same file as
/// [`LegalMovesWriter::push`].
pub(crate) fn encode_row_group(
    columns: &[ColumnDescPtr; 3],
    ids: &[u64],
    actions: &[u16],
    threads: Encode,
) -> Result<EncodedMovesGroup, ParquetError> {
    debug_assert_eq!(ids.len(), actions.len());
    debug_assert!(actions.len() <= ROW_GROUP_ROWS);
    // The action indices' pages, shared by the action and uci columns, are
    // compressed once.
    let (board_id, pages) = match threads {
        Encode::Split => std::thread::scope(|scope| {
            let board_id = scope.spawn(|| board_id_chunk(ids, &columns[0]));
            let pages = index_pages(actions);
            let board_id = board_id
                .join()
                .unwrap_or_else(|_| Err(ParquetError::General("column encoder panicked".into())));
            (board_id, pages)
        }),
        Encode::Serial => (board_id_chunk(ids, &columns[0]), index_pages(actions)),
    };
    let pages = pages?;
    Ok(EncodedMovesGroup {
        chunks: [
            board_id?,
            action_chunk(&pages, &columns[1])?,
            uci_chunk(&pages, &columns[2])?,
        ],
        rows: actions.len() as u64,
    })
}

/// Compresses one page with a context kept by the caller.
fn zstd_page(
    zstd: &mut zstd::bulk::Compressor<'_>,
    raw: &[u8],
    values: u32,
) -> Result<Packed, ParquetError> {
    let bytes = zstd
        .compress(raw)
        .map_err(|e| ParquetError::External(Box::new(e)))?;
    Ok(Packed {
        bytes: Bytes::from(bytes),
        raw_len: raw.len(),
        values,
    })
}

fn compressor() -> Result<zstd::bulk::Compressor<'static>, ParquetError> {
    zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(|e| ParquetError::External(Box::new(e)))
}

/// Writes a column chunk: an optional dictionary page, then the compressed
/// data pages; returns its bytes and metadata.
fn write_chunk<'a>(
    descr: &ColumnDescPtr,
    dictionary: Option<&Packed>,
    pages: impl Iterator<Item = &'a Packed>,
    encoding: Encoding,
    encodings: Vec<Encoding>,
    statistics: Option<Statistics>,
) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
    let mut sink = TrackedWrite::new(Vec::new());
    let (mut compressed, mut uncompressed, mut values) = (0i64, 0i64, 0u64);
    let mut data_page_offset = 0i64;
    {
        let mut writer = SerializedPageWriter::new(&mut sink);
        let mut account = |spec: parquet::column::page::PageWriteSpec| {
            compressed += spec.bytes_written as i64;
            // Totals include page headers: header = written - compressed data.
            uncompressed += (spec.bytes_written as usize - spec.compressed_size
                + spec.uncompressed_size) as i64;
            spec.bytes_written as i64
        };
        if let Some(dict) = dictionary {
            let spec = writer.write_page(CompressedPage::new(
                Page::DictionaryPage {
                    buf: dict.bytes.clone(),
                    num_values: dict.values,
                    encoding: Encoding::PLAIN,
                    is_sorted: false,
                },
                dict.raw_len,
            ))?;
            data_page_offset = account(spec);
        }
        for page in pages {
            values += u64::from(page.values);
            let spec = writer.write_page(CompressedPage::new(
                Page::DataPage {
                    buf: page.bytes.clone(),
                    num_values: page.values,
                    encoding,
                    def_level_encoding: Encoding::RLE,
                    rep_level_encoding: Encoding::RLE,
                    statistics: None,
                },
                page.raw_len,
            ))?;
            account(spec);
        }
        writer.close()?;
    }
    let bytes_written = sink.bytes_written() as u64;
    let buf = sink.into_inner()?;
    let mut metadata = ColumnChunkMetaData::builder(descr.clone())
        .set_encodings(encodings)
        .set_num_values(values as i64)
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL)?))
        .set_total_compressed_size(compressed)
        .set_total_uncompressed_size(uncompressed)
        .set_data_page_offset(data_page_offset);
    if dictionary.is_some() {
        metadata = metadata.set_dictionary_page_offset(Some(0));
    }
    if let Some(stats) = statistics {
        metadata = metadata.set_statistics(stats);
    }
    Ok((
        Bytes::from(buf),
        ColumnCloseResult {
            bytes_written,
            rows_written: values,
            metadata: metadata.build()?,
            bloom_filter: None,
            column_index: None,
            offset_index: None,
        },
    ))
}

/// The `board_id` chunk: DELTA_BINARY_PACKED, with min/max statistics.
fn board_id_chunk(
    ids: &[u64],
    descr: &ColumnDescPtr,
) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
    // Ids are sorted: the first is the minimum, the last the maximum. They
    // stay below 2^63, so the signed INT64 storage orders them correctly.
    let stats = Statistics::int64(
        ids.first().map(|&v| v as i64),
        ids.last().map(|&v| v as i64),
        None,
        Some(0),
        false,
    );
    let mut zstd = compressor()?;
    let (mut values, mut raw) = (Vec::with_capacity(PAGE_VALUES), Vec::new());
    let pages = ids
        .chunks(PAGE_VALUES)
        .map(|page| {
            values.clear();
            values.extend(page.iter().map(|&v| v as i64));
            raw.clear();
            delta_binary_packed(&values, &mut raw);
            zstd_page(&mut zstd, &raw, page.len() as u32)
        })
        .collect::<Result<Vec<_>, _>>()?;
    write_chunk(
        descr,
        None,
        pages.iter(),
        Encoding::DELTA_BINARY_PACKED,
        vec![Encoding::RLE, Encoding::DELTA_BINARY_PACKED],
        Some(stats),
    )
}

/// The data pages of the `action` and `uci` columns: dictionary indices
/// (= action numbers) at [`INDEX_BITS`], [`PAGE_VALUES`] a page, compressed.
fn index_pages(actions: &[u16]) -> Result<Vec<Packed>, ParquetError> {
    let mut zstd = compressor()?;
    let mut raw = Vec::with_capacity(PAGE_VALUES * 2 + PAGE_VALUES / 256 + 16);
    actions
        .chunks(PAGE_VALUES)
        .map(|page| {
            raw.clear();
            raw.push(INDEX_BITS as u8);
            bit_pack(page, &mut raw);
            zstd_page(&mut zstd, &raw, page.len() as u32)
        })
        .collect()
}

/// A dictionary page, compressed once per process: the dictionaries are
/// constants (the action numbers, the vocabulary), the same in every row
/// group of every file.
fn dictionary_page(
    cell: &'static OnceLock<Packed>,
    plain: impl FnOnce() -> Vec<u8>,
) -> Result<&'static Packed, ParquetError> {
    if let Some(page) = cell.get() {
        return Ok(page);
    }
    let page = zstd_page(&mut compressor()?, &plain(), NUM_ACTIONS as u32)?;
    Ok(cell.get_or_init(|| page))
}

/// The `action` chunk: the action numbers as dictionary (PLAIN INT32 in
/// order), the shared index pages.
fn action_chunk(
    pages: &[Packed],
    descr: &ColumnDescPtr,
) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
    static DICT: OnceLock<Packed> = OnceLock::new();
    let dict = dictionary_page(&DICT, || {
        (0..NUM_ACTIONS as i32).flat_map(i32::to_le_bytes).collect()
    })?;
    write_chunk(
        descr,
        Some(dict),
        pages.iter(),
        Encoding::RLE_DICTIONARY,
        vec![Encoding::PLAIN, Encoding::RLE, Encoding::RLE_DICTIONARY],
        None,
    )
}

/// Appends `values` as dictionary indices in the RLE/bit-packing hybrid
/// encoding at [`INDEX_BITS`] = 16: runs of up to 63 groups of 8 values,
/// each run headed by `varint(groups << 1 | 1)` (one byte), values packed
/// LSB first, i.e. as little-endian u16; the last group is padded with zeros
/// (readers stop at the page's value count).
pub(crate) fn bit_pack(values: &[u16], out: &mut Vec<u8>) {
    const _: () = assert!(INDEX_BITS == 16);
    out.reserve(values.len() * 2 + values.len() / 256 + 16);
    for run in values.chunks(63 * 8) {
        let groups = run.len().div_ceil(8);
        out.push(((groups << 1) | 1) as u8);
        out.extend(run.iter().flat_map(|v| v.to_le_bytes()));
        out.resize(out.len() + 2 * (groups * 8 - run.len()), 0);
    }
}

/// The `uci` chunk: the vocabulary as dictionary (PLAIN strings in action
/// order), the shared index pages.
fn uci_chunk(
    pages: &[Packed],
    descr: &ColumnDescPtr,
) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
    static DICT: OnceLock<Packed> = OnceLock::new();
    let dict = dictionary_page(&DICT, || {
        let mut dict = Vec::with_capacity(NUM_ACTIONS * 9);
        for uci in vocabulary().iter_uci() {
            dict.extend_from_slice(&(uci.len() as u32).to_le_bytes());
            dict.extend_from_slice(uci.as_bytes());
        }
        dict
    })?;
    write_chunk(
        descr,
        Some(dict),
        pages.iter(),
        Encoding::RLE_DICTIONARY,
        vec![Encoding::PLAIN, Encoding::RLE, Encoding::RLE_DICTIONARY],
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, StringArray, UInt16Array, UInt64Array};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    #[test]
    fn bit_packing_matches_the_parquet_layout() {
        // 9 values of 16 bits: two groups (header 2 << 1 | 1), 16 values'
        // worth of little-endian u16, the last 7 zero padding.
        let mut out = Vec::new();
        bit_pack(&[1, 2, 3, 4, 5, 6, 7, 1967, 300], &mut out);
        assert_eq!(out.len(), 1 + 32);
        assert_eq!(out[0], 0b101);
        assert_eq!(&out[1..3], &[1, 0]);
        assert_eq!(&out[15..17], &1967u16.to_le_bytes());
        assert_eq!(&out[17..19], &300u16.to_le_bytes());
        assert!(out[19..].iter().all(|&b| b == 0));
        // Runs hold at most 63 groups (a one-byte header).
        let mut out = Vec::new();
        bit_pack(&vec![5u16; 63 * 8 + 1], &mut out);
        assert_eq!(out[0], (63 << 1) | 1);
        assert_eq!(out[1 + 63 * 16], 0b11);
    }

    #[test]
    fn delta_encoding_of_small_cases() {
        // Header: block 128, 4 miniblocks, 3 values, first 5; one block with
        // min delta 1 and widths [1, 0, 0, 0]: deltas 1, 2 -> 0, 1 packed.
        let mut out = Vec::new();
        delta_binary_packed(&[5, 6, 8], &mut out);
        assert_eq!(&out[..4], &[0x80, 0x01, 4, 3]);
        assert_eq!(out[4], 10); // zigzag(5)
        assert_eq!(out[5], 2); // zigzag(1)
        assert_eq!(&out[6..10], &[1, 0, 0, 0]);
        assert_eq!(out[10..], [0b10, 0, 0, 0]); // 32 values of 1 bit
    }

    #[test]
    fn delta_encoding_wide_values_round_trip() {
        // Large and negative deltas (widths up to 64) read back through the
        // arrow reader in round_trip_through_arrow_reader; here the layout:
        let values: Vec<i64> = (0..300)
            .map(|i| (i * i * 7919) % 100_003 - 50_000)
            .collect();
        let mut out = Vec::new();
        delta_binary_packed(&values, &mut out);
        // 3 blocks (299 deltas): each a min delta, 4 widths, packed data.
        assert!(out.len() > 300 && out.len() < 300 * 8);
    }

    #[test]
    fn round_trip_through_arrow_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("lm.parquet");
        let mut w = crate::store::parallel::ParallelMovesWriter::create(
            &path,
            crate::store::parallel::Encoders::Inline,
        )
        .unwrap();
        let mut expected = Vec::new();
        // Enough rows for two row groups and many pages, every action used;
        // now and then the id jumps far (wide deltas, up to 41 bits).
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
            board += if board % 1000 == 999 {
                1 << (board % 41)
            } else {
                1
            };
        }
        assert_eq!(w.finish().unwrap(), expected.len() as u64);
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        assert_eq!(
            reader.schema().fields(),
            Table::LegalMoves.schema().fields()
        );
        assert_eq!(reader.metadata().num_row_groups(), 2);
        // action and uci: dictionary pages, then the same compressed data
        // pages (written once, stored twice).
        let bytes = std::fs::read(&path).unwrap();
        for rg in reader.metadata().row_groups() {
            let (action, uci) = (rg.column(1), rg.column(2));
            for c in [action, uci] {
                assert!(c.encodings().any(|e| e == Encoding::RLE_DICTIONARY));
                assert!(c.dictionary_page_offset().is_some());
            }
            let data = |c: &ColumnChunkMetaData| {
                let (start, len) = c.byte_range();
                let pages = (c.data_page_offset() as u64 - start) as usize;
                &bytes[start as usize + pages..(start + len) as usize]
            };
            assert_eq!(data(action), data(uci));
        }
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
