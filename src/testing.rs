//! Helpers for tests that read the shared reference material.

use std::path::PathBuf;

/// `../shared` next to the project root, if present. Tests that need it call
/// this and skip (printing why) when it is absent.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} is absent (shared golden vectors and data live there)",
            dir.display()
        );
        None
    }
}

/// `../shared/golden`, if present.
pub fn golden_dir() -> Option<PathBuf> {
    shared_dir().map(|d| d.join("golden"))
}
