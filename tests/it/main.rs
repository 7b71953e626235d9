//! Integration tests: the real `chessbench` binary on real Lichess data
//! (the pgn-reader crate's games and `data/`). Tests needing Stockfish or a
//! Python package skip (printing why) without it, and fail under `CI=true`
//! (see `chessbench::testing`).

mod ablate;
mod annotate;
mod disk;
mod eval;
mod fuzz;
mod golden;
mod interop;
mod options;
mod published;
mod python;
mod refuse;
mod rejects;
mod sql;
mod train;
mod util;
