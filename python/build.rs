//! Nothing to build: the script exists so that `[build-dependencies]` in
//! Cargo.toml (serde for the host, for build-cache parity with
//! chessbench's test build; see scripts/feature-parity) take effect.
fn main() {}
