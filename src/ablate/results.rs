//! The results table, `RUN/ablate/NAME/results/TRAIN_NAME.parquet`: one
//! file per finished variant and seed, one row per metric (or one row
//! holding the error of a variant that failed). A file appears, atomically,
//! only once its variant finished, so the table never holds half a variant;
//! a rerun keeps the finished ones and runs the rest.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use arrow_array::{
    Array, ArrayRef, Float64Array, RecordBatch, StringArray, UInt64Array,
    builder::{Float64Builder, StringBuilder, UInt64Builder},
};
use arrow_schema::{DataType, Field, Schema};
use parquet::{
    arrow::{ArrowWriter, arrow_reader::ParquetRecordBatchReaderBuilder},
    basic::{Compression, ZstdLevel},
    file::properties::WriterProperties,
};

use crate::store::{StoreError, commit::write_atomic};

/// One metric of one finished variant and seed (or its error).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    pub grid: String,
    /// `base` or `KEY=VALUE`.
    pub variant: String,
    pub axis: Option<String>,
    pub setting: Option<String>,
    /// base, model or data.
    pub level: String,
    pub seed: u64,
    /// The training run's name, `RUN/train/TRAIN_NAME` (the data-level
    /// variants': under their own run directory).
    pub train_name: String,
    /// puzzle_accuracy, action_accuracy, kendall_tau, log_loss, ...; `error`
    /// for a variant that failed.
    pub metric: String,
    pub value: Option<f64>,
    /// The training step the checkpoint was evaluated at.
    pub step: u64,
    /// The checkpoint directory evaluated.
    pub checkpoint: String,
    /// The training recipe, JSON (`config.json`).
    pub recipe: String,
    /// Why the variant failed (its `error` row).
    pub error: Option<String>,
    /// Wall time of the variant (training and evaluation), seconds.
    pub seconds: f64,
}

fn schema() -> Arc<Schema> {
    let s = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        s("grid", false),
        s("variant", false),
        s("axis", true),
        s("setting", true),
        s("level", false),
        Field::new("seed", DataType::UInt64, false),
        s("train_name", false),
        s("metric", false),
        Field::new("value", DataType::Float64, true),
        Field::new("step", DataType::UInt64, false),
        s("checkpoint", false),
        s("recipe", false),
        s("error", true),
        Field::new("seconds", DataType::Float64, false),
    ]))
}

/// The results file of the training run `train_name`.
pub(crate) fn path(dir: &Path, train_name: &str) -> PathBuf {
    dir.join("results").join(format!("{train_name}.parquet"))
}

fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_created_by(format!("chessbench {}", env!("CARGO_PKG_VERSION")))
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(true)
        .build()
}

/// Writes `rows` (one variant's) to `file`, atomically.
pub(crate) fn write(file: &Path, rows: &[Row]) -> Result<(), StoreError> {
    let text = |f: fn(&Row) -> &str| {
        let mut b = StringBuilder::new();
        rows.iter().for_each(|r| b.append_value(f(r)));
        Arc::new(b.finish()) as ArrayRef
    };
    let opt = |f: fn(&Row) -> Option<&str>| {
        let mut b = StringBuilder::new();
        rows.iter().for_each(|r| b.append_option(f(r)));
        Arc::new(b.finish()) as ArrayRef
    };
    let int = |f: fn(&Row) -> u64| {
        let mut b = UInt64Builder::new();
        rows.iter().for_each(|r| b.append_value(f(r)));
        Arc::new(b.finish()) as ArrayRef
    };
    let mut value = Float64Builder::new();
    rows.iter().for_each(|r| value.append_option(r.value));
    let mut seconds = Float64Builder::new();
    rows.iter().for_each(|r| seconds.append_value(r.seconds));
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            text(|r| &r.grid),
            text(|r| &r.variant),
            opt(|r| r.axis.as_deref()),
            opt(|r| r.setting.as_deref()),
            text(|r| &r.level),
            int(|r| r.seed),
            text(|r| &r.train_name),
            text(|r| &r.metric),
            Arc::new(value.finish()),
            int(|r| r.step),
            text(|r| &r.checkpoint),
            text(|r| &r.recipe),
            opt(|r| r.error.as_deref()),
            Arc::new(seconds.finish()),
        ],
    )
    .map_err(|e| StoreError::Corrupt(file.to_owned(), e.to_string()))?;
    let mut bytes = Vec::new();
    let corrupt =
        |e: parquet::errors::ParquetError| StoreError::Corrupt(file.to_owned(), e.to_string());
    let mut writer =
        ArrowWriter::try_new(&mut bytes, batch.schema(), Some(properties())).map_err(corrupt)?;
    writer.write(&batch).map_err(corrupt)?;
    writer.close().map_err(corrupt)?;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
    }
    write_atomic(file, &bytes)
}

/// Every row of the results files in `dir/results/` (none when it does
/// not exist), in file-name order.
pub(crate) fn read_all(dir: &Path) -> Result<Vec<Row>, StoreError> {
    let results = dir.join("results");
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&results) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::io(&results, e)),
    };
    files.sort();
    let mut rows = Vec::new();
    for file in files {
        rows.extend(read(&file)?);
    }
    Ok(rows)
}

/// Column `name` of `batch` as an array of type `T`.
fn typed<T: Array + Clone + 'static>(
    batch: &RecordBatch,
    name: &str,
    file: &Path,
) -> Result<T, StoreError> {
    let column = batch
        .column_by_name(name)
        .ok_or_else(|| StoreError::Corrupt(file.to_owned(), format!("no column {name}")))?;
    column.as_any().downcast_ref::<T>().cloned().ok_or_else(|| {
        StoreError::Corrupt(
            file.to_owned(),
            format!(
                "{name} is {}, not the type it is written with",
                column.data_type()
            ),
        )
    })
}

/// The rows of one results file.
pub(crate) fn read(file: &Path) -> Result<Vec<Row>, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(file.to_owned(), e);
    let f = std::fs::File::open(file).map_err(|e| StoreError::io(file, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .and_then(|b| b.build())
        .map_err(|e| corrupt(e.to_string()))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(e.to_string()))?;
        let strings = |name: &str| typed::<StringArray>(&batch, name, file);
        let ints = |name: &str| typed::<UInt64Array>(&batch, name, file);
        let floats = |name: &str| typed::<Float64Array>(&batch, name, file);
        let [
            grid,
            variant,
            axis,
            setting,
            level,
            train_name,
            metric,
            checkpoint,
            recipe,
            error,
        ] = [
            "grid",
            "variant",
            "axis",
            "setting",
            "level",
            "train_name",
            "metric",
            "checkpoint",
            "recipe",
            "error",
        ]
        .map(strings);
        let (grid, variant, axis, setting, level) = (grid?, variant?, axis?, setting?, level?);
        let (train_name, metric, checkpoint, recipe, error) =
            (train_name?, metric?, checkpoint?, recipe?, error?);
        let (seed, step) = (ints("seed")?, ints("step")?);
        let (value, seconds) = (floats("value")?, floats("seconds")?);
        let opt = |a: &StringArray, i| (!a.is_null(i)).then(|| a.value(i).to_owned());
        for i in 0..batch.num_rows() {
            rows.push(Row {
                grid: grid.value(i).to_owned(),
                variant: variant.value(i).to_owned(),
                axis: opt(&axis, i),
                setting: opt(&setting, i),
                level: level.value(i).to_owned(),
                seed: seed.value(i),
                train_name: train_name.value(i).to_owned(),
                metric: metric.value(i).to_owned(),
                value: (!value.is_null(i)).then(|| value.value(i)),
                step: step.value(i),
                checkpoint: checkpoint.value(i).to_owned(),
                recipe: recipe.value(i).to_owned(),
                error: opt(&error, i),
                seconds: seconds.value(i),
            });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let row = Row {
            grid: "g".into(),
            variant: "loss=l2".into(),
            axis: Some("loss".into()),
            setting: Some("l2".into()),
            level: "model".into(),
            seed: 1,
            train_name: "g.loss-l2.s1".into(),
            metric: "kendall_tau".into(),
            value: Some(0.25),
            step: 10,
            checkpoint: "c".into(),
            recipe: "{}".into(),
            error: None,
            seconds: 1.5,
        };
        let failed = Row {
            metric: "error".into(),
            value: None,
            error: Some("no space left on device".into()),
            axis: None,
            ..row.clone()
        };
        let file = path(dir.path(), "g.loss-l2.s1");
        write(&file, &[row.clone(), failed.clone()]).unwrap();
        assert_eq!(read_all(dir.path()).unwrap(), [row, failed]);
        assert!(read_all(&dir.path().join("none")).unwrap().is_empty());
    }
}
