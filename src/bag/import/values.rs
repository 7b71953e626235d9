//! The imported values: each board's state value and best action kept in
//! memory or, past the budget, in buckets of ids on disk ([`Values`]), and
//! written as `state_values` once every bag is read.

use std::{path::Path, sync::Arc};

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, StringArray, UInt16Array, UInt32Array, UInt64Array,
};

use super::{boards::write_batch, options::BATCH_ROWS};
use crate::{
    bag::{
        error::BagSetError,
        ids::{In, Out, remove},
    },
    chess::legal::ValueKind,
    store::{
        StoreError, Table, ValueSource,
        parallel::{Encoders, ParallelPartWriter},
        writer::part_file_name,
    },
};

/// No best action.
pub(super) const NONE: u16 = u16::MAX;

/// The state_values columns of a range of board ids.
#[derive(Default)]
pub(super) struct Arrays {
    /// Win probability; NaN: no state-value record.
    pub(super) sv: Vec<f64>,
    /// [`kind_code`] of the board's value.
    pub(super) kind: Vec<u8>,
    /// Best action, [`NONE`] if none.
    pub(super) best: Vec<u16>,
}

pub(super) fn kind_code(kind: ValueKind) -> u8 {
    match kind {
        ValueKind::Search => 1,
        ValueKind::Checkmate => 2,
        ValueKind::Stalemate => 3,
    }
}

pub(super) fn code_kind(code: u8) -> ValueKind {
    match code {
        2 => ValueKind::Checkmate,
        3 => ValueKind::Stalemate,
        _ => ValueKind::Search,
    }
}

impl Arrays {
    pub(super) fn with_capacity(n: u64) -> Arrays {
        let n = n as usize;
        Arrays {
            sv: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            best: Vec::with_capacity(n),
        }
    }

    /// A state value (the last record of a board wins); `kind` comes with
    /// the board's first record, later ones keep it.
    pub(super) fn set_state_value(&mut self, i: usize, p: f64, kind: Option<ValueKind>) {
        if self.sv.len() <= i {
            self.sv.resize(i + 1, f64::NAN);
            self.kind.resize(i + 1, 0);
        }
        self.sv[i] = p;
        if let Some(k) = kind {
            self.kind[i] = kind_code(k);
        }
    }

    pub(super) fn set_best(&mut self, i: usize, action: u16) {
        if self.best.len() <= i {
            self.best.resize(i + 1, NONE);
        }
        self.best[i] = action;
    }

    /// Calls `row` for each board with a state value, ids from `start`.
    pub(super) fn rows(
        &self,
        start: u64,
        row: &mut dyn FnMut(u64, f64, ValueKind, Option<u16>) -> Result<(), BagSetError>,
    ) -> Result<(), BagSetError> {
        for (i, &p) in self.sv.iter().enumerate() {
            if p.is_nan() {
                continue;
            }
            let best = self.best.get(i).copied().filter(|&a| a != NONE);
            row(start + i as u64, p, code_kind(self.kind[i]), best)?;
        }
        Ok(())
    }
}

/// Bytes of a spilled value: board id (4), what (1: 0 state value, 1 best
/// action), kind code (1), value (8: the f64's bits or the action).
pub(super) const VALUE_ENTRY: usize = 14;
/// Bytes a board of a bucket takes in [`Arrays`].
pub(super) const VALUE_BYTES_PER_BOARD: u64 = 11;

/// Per-board values of the state_values table, by board id: in memory, or
/// appended to buckets of `width` ids on disk and gathered a bucket at a
/// time at the end.
pub(super) enum Values {
    Memory(Arrays),
    Disk {
        width: u64,
        boards: u64,
        buckets: Vec<Out>,
    },
}

impl Values {
    /// Buckets in `dir` for `boards` boards, each gathered in half of
    /// `memory`.
    pub(super) fn on_disk(dir: &Path, boards: u64, memory: u64) -> Result<Values, BagSetError> {
        let width = (memory / 2 / VALUE_BYTES_PER_BOARD).max(1);
        let n = boards.div_ceil(width).max(1);
        let buffer = (memory / 8 / n).clamp(4 << 10, 1 << 20) as usize;
        let buckets = (0..n)
            .map(|b| Out::create(dir.join(format!("values-{b:05}")), buffer))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Values::Disk {
            width,
            boards,
            buckets,
        })
    }

    pub(super) fn put(
        &mut self,
        id: u64,
        what: u8,
        kind: u8,
        value: u64,
    ) -> Result<(), BagSetError> {
        let Values::Disk { width, buckets, .. } = self else {
            return Ok(());
        };
        let mut entry = [0u8; VALUE_ENTRY];
        entry[..4].copy_from_slice(&(id as u32).to_le_bytes());
        entry[4] = what;
        entry[5] = kind;
        entry[6..].copy_from_slice(&value.to_le_bytes());
        buckets[(id / *width) as usize].put(&entry)
    }

    pub(super) fn state_value(
        &mut self,
        id: u64,
        p: f64,
        kind: Option<ValueKind>,
    ) -> Result<(), BagSetError> {
        match self {
            Values::Memory(a) => {
                a.set_state_value(id as usize, p, kind);
                Ok(())
            }
            Values::Disk { .. } => self.put(id, 0, kind.map_or(0, kind_code), p.to_bits()),
        }
    }

    pub(super) fn best(&mut self, id: u64, action: u16) -> Result<(), BagSetError> {
        match self {
            Values::Memory(a) => {
                a.set_best(id as usize, action);
                Ok(())
            }
            Values::Disk { .. } => self.put(id, 1, 0, u64::from(action)),
        }
    }

    /// Calls `row` for each board with a state value, in id order.
    pub(super) fn finish(
        self,
        mut row: impl FnMut(u64, f64, ValueKind, Option<u16>) -> Result<(), BagSetError>,
    ) -> Result<(), BagSetError> {
        match self {
            Values::Memory(a) => a.rows(0, &mut row),
            Values::Disk {
                width,
                boards,
                buckets,
            } => {
                for (b, out) in buckets.into_iter().enumerate() {
                    let path = out.finish()?;
                    let start = b as u64 * width;
                    let mut a = Arrays::with_capacity(width.min(boards.saturating_sub(start)));
                    let mut input = In::open(path.clone(), 1 << 16)?;
                    while let Some(e) = input.next::<VALUE_ENTRY>()? {
                        let id = u64::from(u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
                        let i = id
                            .checked_sub(start)
                            .filter(|&i| i < width)
                            .ok_or_else(|| {
                                StoreError::Corrupt(
                                    path.clone(),
                                    format!("board {id} in bucket {b}"),
                                )
                            })? as usize;
                        let mut value = [0u8; 8];
                        value.copy_from_slice(&e[6..]);
                        let value = u64::from_le_bytes(value);
                        if e[4] == 0 {
                            let kind = (e[5] != 0).then(|| code_kind(e[5]));
                            a.set_state_value(i, f64::from_bits(value), kind);
                        } else {
                            a.set_best(i, value as u16);
                        }
                    }
                    drop(input);
                    remove(&path)?;
                    a.rows(start, &mut row)?;
                }
                Ok(())
            }
        }
    }
}

/// `state_values`: one row per board with a state-value record, in id
/// order.
pub(super) fn write_state_values(
    values: Values,
    dir: &Path,
    encoders: &Encoders,
) -> Result<(), BagSetError> {
    let mut w = ParallelPartWriter::create(
        &dir.join(part_file_name(0)),
        Table::StateValues,
        encoders.clone(),
    )?;
    let mut cols = SvColumns::default();
    values.finish(|id, p, kind, best| {
        cols.board_id.push(id);
        cols.kind.push(kind.name());
        cols.win_prob.push(p);
        cols.best.push(best);
        if cols.board_id.len() == BATCH_ROWS {
            write_batch(
                Some(&mut w),
                Table::StateValues,
                std::mem::take(&mut cols).finish(),
                dir,
            )?;
        }
        Ok(())
    })?;
    write_batch(Some(&mut w), Table::StateValues, cols.finish(), dir)?;
    w.finish()?;
    Ok(())
}

#[derive(Default)]
pub(super) struct SvColumns {
    pub(super) board_id: Vec<u64>,
    pub(super) kind: Vec<&'static str>,
    pub(super) win_prob: Vec<f64>,
    pub(super) best: Vec<Option<u16>>,
}

impl SvColumns {
    pub(super) fn finish(self) -> Vec<ArrayRef> {
        let n = self.board_id.len();
        vec![
            Arc::new(UInt64Array::from(self.board_id)),
            Arc::new(StringArray::from(self.kind)),
            Arc::new(Float64Array::from(self.win_prob)),
            Arc::new(Int32Array::new_null(n)),
            Arc::new(Int32Array::new_null(n)),
            Arc::new(UInt16Array::new_null(n)),
            Arc::new(UInt64Array::new_null(n)),
            Arc::new(UInt32Array::new_null(n)),
            Arc::new(UInt16Array::from(self.best)),
            ValueSource::Bag.column(n),
        ]
    }
}
