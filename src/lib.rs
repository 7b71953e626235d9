//! chessbench: the ChessBench data pipeline and training recipe
//! (Ruoss et al., "Grandmaster-Level Chess Without Search", NeurIPS 2024).
//!
//! Foundations (`chess`, `store`, `uci`) at the bottom, stages (`ingest`,
//! `annotate`, `stats`) above them; the binary in `main.rs` only parses
//! arguments and reports.

pub mod annotate;
pub mod bag;
pub mod chess;
pub mod eval;
pub mod ingest;
pub mod metrics;
pub mod pipeline;
pub mod sql;
pub mod stats;
pub mod store;
#[doc(hidden)]
pub mod testing;
pub mod train;
pub mod uci;
