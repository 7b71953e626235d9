//! ChessBench interop: export a split's record sets as the `.bag` files the
//! published searchless_chess loaders read, and import published `.bag`
//! files into a run (Ruoss et al. 2024; data at
//! https://storage.googleapis.com/searchless_chess/data/).

pub(crate) mod bagz;
pub mod coder;
mod decode;
mod error;
pub mod export;
mod ids;
pub mod import;

pub use bagz::{BagError, BagReader, BagWriter};
pub use error::BagSetError;
pub use export::BagExportOptions;
pub use import::BagImportOptions;
