//! Evaluation and play: trained predictors scored as the paper
//! scores them, and played.
//!
//! - [`trained`]: a checkpoint loaded for inference (EMA weights by default);
//! - [`predict`]: the model's predictions for one board or many in shared
//!   forward passes, and the timing of those passes for `make bench-eval`;
//! - [`policy`]: the action-value, state-value and behavioural-cloning
//!   policies (and Stockfish) behind one [`policy::Player`] trait, with the
//!   paper's repetition and decisiveness workarounds;
//! - [`metrics`]: action accuracy, Kendall's tau, log-loss, L2, entropy
//!   and calibration on a split's annotated boards;
//! - [`puzzles`]: Lichess / ChessBench puzzle CSVs, solved and bucketed by
//!   rating (Figure 2);
//! - [`game`], [`tournament`], [`elo`]: games from ECO openings against
//!   Stockfish and other checkpoints, PGN, and a Bradley-Terry Elo fit;
//! - [`uci_server`]: `chessbench uci`, a model as a UCI engine;
//! - [`config`]: the `[eval]` recipe and its memory shares;
//! - [`run`]: `chessbench eval`'s parts, run in order;
//! - [`report`]: the summary and the report directory's files;
//! - `error`: [`EvalError`], what stops an evaluation;
//!   [`PlayerError`], what stops a player (a model or an engine) being
//!   built or choosing a move, which the UCI server shares; and
//!   [`EvalConfigError`], the options an evaluation refuses.

pub mod config;
pub(crate) mod elo;
mod error;
pub(crate) mod game;
pub(crate) mod metrics;
pub mod policy;
pub mod predict;
pub(crate) mod puzzles;
pub mod report;
pub mod run;
pub mod tournament;
pub mod trained;
pub mod uci_server;

pub use config::{EvalConfig, EvalOptions, MEMORY};
pub use error::{EvalConfigError, EvalError, PlayerError};
pub use report::EvalSummary;
pub use run::run;
pub use uci_server::UciOptions;
