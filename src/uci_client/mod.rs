//! UCI, both directions: protocol lines as values ([`protocol`]), an engine
//! process driven with deadlines ([`engine`]), and the paper's oracle of one
//! board on top of it ([`oracle`]). Used by `annotate`, by evaluation (the
//! Stockfish oracle, games against Stockfish) and by the UCI server, which
//! parses the GUI's commands with the same [`Command`] type.

pub(crate) mod engine;
pub(crate) mod oracle;
pub(crate) mod protocol;

pub use engine::{Engine, EngineConfig, EngineError, EngineId, PvLine, SearchResult};
pub use protocol::{Bound, Command, EngineMessage, Info, Limit, Position, Score};
