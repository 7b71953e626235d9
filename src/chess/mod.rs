//! Chess domain core: the ChessBench encodings (tokens, actions, values) and
//! the board identity used for deduplication.

pub mod actions;
pub mod board_key;
pub mod tokens;
pub mod value;

pub use actions::{ActionVocabulary, NUM_ACTIONS, vocabulary};
pub use board_key::BoardKey;
pub use tokens::{SEQUENCE_LENGTH, tokenize};
pub use value::{ValueBuckets, centipawns_to_win_probability, hl_gauss_target};
