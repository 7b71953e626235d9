//! Chess domain core: the ChessBench encodings (tokens, actions, values) and
//! the board identity used for deduplication.

pub mod actions;
pub(crate) mod board_key;
pub mod generate;
pub(crate) mod legal;
pub mod lichess_evals;
pub(crate) mod movegen;
#[cfg(test)]
pub(crate) mod random_games;
pub(crate) mod records;
pub(crate) mod san;
pub mod tokens;
pub mod value;

pub use actions::{ActionVocabulary, NUM_ACTIONS, vocabulary};
pub(crate) use board_key::BoardKey;
pub use movegen::legal_actions_of;
pub use records::{RecordSet, push_sequence};
