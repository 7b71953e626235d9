//! chessbench: the ChessBench data pipeline and training recipe
//! (Ruoss et al., "Grandmaster-Level Chess Without Search", NeurIPS 2024).
//!
//! Foundations (`chess`, `store`) at the bottom, stages (`ingest`, `stats`)
//! above them; the binary in `main.rs` only parses arguments and reports.

pub mod chess;
pub mod ingest;
pub mod stats;
pub mod store;
#[doc(hidden)]
pub mod testing;
