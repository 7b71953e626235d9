//! A training run's two CSV logs, one typed row each: `metrics.csv`
//! ([`MetricsRow`], one per `log_every` steps) and `eval.csv` ([`EvalRow`],
//! one per evaluation of the EMA parameters on the eval split).
//!
//! `chessbench train` writes the rows ([`MetricsRow::line`],
//! [`EvalRow::line`]) and reads them back: a resumed run cuts both logs to
//! its checkpoint's step, and a run resumed after it finished reports its
//! last evaluation. `chessbench ablate` plots them ([`read`]), and
//! sql/training.sql reads them by column name. Each header is its row's
//! field names, in order (a test holds them), and the step is always the
//! first column.

use std::path::Path;

use serde::{Deserialize, Serialize, de::DeserializeOwned};

/// One row of `metrics.csv`: the mean over the steps since the previous row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MetricsRow {
    pub step: u64,
    /// Samples seen over the records of an epoch.
    pub epoch: f64,
    pub samples: u64,
    /// Mean training loss.
    pub loss: f64,
    /// Gradient norm before clipping, at the row's last step.
    pub grad_norm: Option<f64>,
    pub learning_rate: f64,
    pub samples_per_s: f64,
    /// Share of the time spent waiting for batches.
    pub data_wait_share: f64,
    /// Seconds of training so far, earlier sessions of a resumed run included.
    pub elapsed_s: f64,
}

impl MetricsRow {
    /// The header line.
    pub(crate) const HEADER: &'static str =
        "step,epoch,samples,loss,grad_norm,learning_rate,samples_per_s,data_wait_share,elapsed_s";

    /// The row as a line (no newline); numbers in Rust's shortest form that
    /// reads back exactly, a missing value empty.
    pub(crate) fn line(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{}",
            self.step,
            self.epoch,
            self.samples,
            self.loss,
            optional(self.grad_norm),
            self.learning_rate,
            self.samples_per_s,
            self.data_wait_share,
            self.elapsed_s
        )
    }
}

/// Evaluation of one parameter set on the eval split (a row of `eval.csv`
/// without its time, and `summary.json`'s `eval`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalResult {
    pub step: u64,
    pub split: String,
    pub records: usize,
    /// Mean negative log-likelihood of the target token (bucket or action).
    pub log_loss: f64,
    /// The same for the train split's marginal distribution of targets.
    pub marginal_log_loss: f64,
    /// argmax == target (value bucket or action).
    pub accuracy: f64,
    /// Mean squared error of the expected win probability (value policies).
    pub value_mse: Option<f64>,
}

/// One row of `eval.csv`: an evaluation ([`EvalResult`]'s fields, written
/// out because csv cannot read a flattened field) and when it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EvalRow {
    pub step: u64,
    pub split: String,
    pub records: usize,
    pub log_loss: f64,
    pub marginal_log_loss: f64,
    pub accuracy: f64,
    pub value_mse: Option<f64>,
    pub elapsed_s: f64,
}

impl EvalRow {
    /// The row of `result`, which ended `elapsed_s` into the run.
    pub(crate) fn new(result: EvalResult, elapsed_s: f64) -> EvalRow {
        let EvalResult {
            step,
            split,
            records,
            log_loss,
            marginal_log_loss,
            accuracy,
            value_mse,
        } = result;
        EvalRow {
            step,
            split,
            records,
            log_loss,
            marginal_log_loss,
            accuracy,
            value_mse,
            elapsed_s,
        }
    }

    /// The header line.
    pub(crate) const HEADER: &'static str =
        "step,split,records,log_loss,marginal_log_loss,accuracy,value_mse,elapsed_s";

    /// The row as a line (no newline), as [`MetricsRow::line`] writes one.
    pub(crate) fn line(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{}",
            self.step,
            self.split,
            self.records,
            self.log_loss,
            self.marginal_log_loss,
            self.accuracy,
            optional(self.value_mse),
            self.elapsed_s
        )
    }
}

impl From<EvalRow> for EvalResult {
    fn from(row: EvalRow) -> EvalResult {
        EvalResult {
            step: row.step,
            split: row.split,
            records: row.records,
            log_loss: row.log_loss,
            marginal_log_loss: row.marginal_log_loss,
            accuracy: row.accuracy,
            value_mse: row.value_mse,
        }
    }
}

fn optional(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The rows of a log, read by its header's column names; none when the
/// file is missing, and a row that does not parse (a line cut by a crash
/// mid-write) is skipped.
pub(crate) fn read<R: DeserializeOwned>(path: &Path) -> Vec<R> {
    let Ok(mut reader) = csv::Reader::from_path(path) else {
        return Vec::new();
    };
    reader.deserialize().filter_map(Result::ok).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each header names its row's fields in order, and a row written by
    /// `line` reads back as itself, a missing value included.
    #[test]
    fn rows_read_back_under_their_headers() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = MetricsRow {
            step: 20,
            epoch: 0.0000012,
            samples: 640,
            loss: 3.1991,
            grad_norm: None,
            learning_rate: 0.0003,
            samples_per_s: 1234.5,
            data_wait_share: 0.0,
            elapsed_s: 12.25,
        };
        let eval = EvalRow {
            step: 20,
            split: "test".into(),
            records: 8192,
            log_loss: 3.2,
            marginal_log_loss: 3.2482,
            accuracy: 0.109,
            value_mse: Some(0.0709),
            elapsed_s: 13.5,
        };
        let path = dir.path().join("metrics.csv");
        std::fs::write(
            &path,
            format!("{}\n{}\n", MetricsRow::HEADER, metrics.line()),
        )
        .unwrap();
        assert_eq!(read::<MetricsRow>(&path), std::slice::from_ref(&metrics));
        let path = dir.path().join("eval.csv");
        std::fs::write(&path, format!("{}\n{}\n", EvalRow::HEADER, eval.line())).unwrap();
        assert_eq!(read::<EvalRow>(&path), std::slice::from_ref(&eval));
        // Serde's own names are the headers'.
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(&metrics).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next(), Some(MetricsRow::HEADER));
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(&eval).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next(), Some(EvalRow::HEADER));
        // Rust's shortest form, as the logs have always been written.
        assert_eq!(
            metrics.line(),
            "20,0.0000012,640,3.1991,,0.0003,1234.5,0,12.25"
        );
        assert!(read::<EvalRow>(&dir.path().join("missing.csv")).is_empty());
    }
}
