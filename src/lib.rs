//! chessbench: the ChessBench data pipeline and training recipe
//! (Ruoss et al., "Grandmaster-Level Chess Without Search", NeurIPS 2024).
//!
//! Foundations at the bottom: [`chess`] (the ChessBench encodings), [`store`]
//! (tables, run directories, atomic and chunked commits, the manifest),
//! [`uci`] (engines and the paper's oracle), [`model`] (the predictor and
//! its checkpoints), [`options`] (how every stage's options are layered),
//! [`ui`] (progress, numbers, summaries) and [`metrics`]. Stages above them
//! ([`ingest`], [`annotate`], [`sql`], [`stats`], [`bag`], [`train`],
//! [`eval`]) talk to each other only through the tables and checkpoints they
//! write. The binary (`main.rs`, `cli.rs`) parses, dispatches and reports.

pub mod annotate;
pub mod bag;
pub mod chess;
pub mod eval;
pub mod ingest;
pub mod metrics;
pub mod model;
pub mod options;
pub mod sql;
pub mod stats;
pub mod store;
#[doc(hidden)]
pub mod testing;
pub mod train;
pub mod uci;
pub mod ui;
