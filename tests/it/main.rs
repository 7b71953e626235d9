//! Integration tests: the real `chessbench` binary on real Lichess data.
//! Tests needing `../shared` skip (printing why) when it is absent.

mod annotate;
mod eval;
mod fuzz;
mod golden;
mod interop;
mod options;
mod rejects;
mod sql;
mod train;
mod util;
