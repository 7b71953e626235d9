//! A typed UCI client: protocol lines as values ([`protocol`]) and an engine
//! process driven with deadlines ([`engine`]). Used by `annotate`, and later
//! by evaluation games against Stockfish and the UCI server.

pub mod engine;
pub mod protocol;

pub use engine::{Engine, EngineConfig, EngineError, EngineId, PvLine, SearchResult};
pub use protocol::{Bound, Command, EngineMessage, Info, Limit, Position, Score};
