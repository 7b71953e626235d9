//! chessbench: the ChessBench data pipeline and training recipe
//! (Ruoss et al., "Grandmaster-Level Chess Without Search", NeurIPS 2024).
//!
//! Foundations at the bottom: [`chess`] (the ChessBench encodings), [`store`]
//! (tables, run directories, atomic and chunked commits, the manifest),
//! [`uci_client`] (outside engines and the paper's oracle, over UCI), [`model`] (the predictor and
//! its checkpoints), [`duckdb_session`] (an embedded DuckDB over a run's tables and
//! views), [`options`] (how every stage's options are layered, and the
//! options stages share),
//! [`ui`] (progress, numbers, summaries) and [`ranking`]. Stages above them
//! ([`ingest`], [`annotate`], [`sql`], [`stats`], [`bag`], [`train`],
//! [`eval`]) talk to each other only through the tables and checkpoints they
//! write. The binary (`main.rs`, `cli.rs`) parses, dispatches and reports.
//!
//! The `sql` feature (on by default) links DuckDB and with it [`sql`],
//! [`bag`], [`eval`], [`ablate`] and the binary; without it the library is
//! the encodings, the tables and the training loader, which is what the
//! Python package (`python/`) is built from.

// Without `sql`, the helpers only the DuckDB stages call (the bag writers,
// the checkpoint summaries they print, ...) are unused; the default build,
// which CI lints, still catches dead code.
#![cfg_attr(not(feature = "sql"), allow(dead_code, unused_imports))]

#[cfg(feature = "sql")]
pub mod ablate;
pub mod annotate;
#[cfg(feature = "sql")]
pub mod bag;
pub mod checkpoint;
pub mod chess;
#[cfg(feature = "sql")]
pub mod duckdb_session;
#[cfg(feature = "sql")]
pub mod eval;
pub mod generate_games;
pub mod ingest;
pub mod model;
pub mod options;
pub mod ranking;
#[cfg(feature = "sql")]
pub mod sql;
pub mod stats;
pub mod store;
#[doc(hidden)]
pub mod testing;
pub mod train;
pub mod uci_client;
pub mod ui;

#[cfg(test)]
mod tests {
    /// Every enum an option takes is spelled the same in pipeline files and
    /// on the command line.
    #[test]
    fn one_spelling_for_enum_values() {
        fn check<T: clap::ValueEnum + serde::Serialize + std::fmt::Debug>() {
            for v in T::value_variants() {
                let cli = v.to_possible_value().unwrap().get_name().to_owned();
                let file = serde_json::to_value(v).unwrap();
                assert_eq!(file.as_str(), Some(cli.as_str()), "{v:?}");
            }
        }
        check::<crate::chess::RecordSet>();
        check::<crate::model::Preset>();
        check::<crate::model::DeviceKind>();
        check::<crate::model::Precision>();
        check::<crate::model::Weights>();
        check::<crate::train::loss::Loss>();
        check::<crate::train::sampler::Sampling>();
        check::<crate::uci_client::oracle::Mode>();
        #[cfg(feature = "sql")]
        check::<crate::eval::config::Part>();
        check::<crate::ingest::config::Speed>();
    }
}
