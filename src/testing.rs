//! What tests need from outside the code, in one place: the golden vectors
//! (`tests/golden/`) and data files (`data/`) the repository ships, and the
//! external programs some tests drive (Stockfish, Python packages).
//!
//! A test whose external program is missing skips with the reason, except
//! under CI (`CI=true`, as `.ci/run` sets it), where it fails: CI proves every
//! test ran. Golden vectors and data are in the repository, so a test never
//! skips for them.

use std::path::PathBuf;

/// The repository's root (where Cargo.toml is): CHESSBENCH_ROOT when set (a
/// bench binary carried to another machine with a copy of the repository,
/// bench/cores.py), else where it was built.
fn root() -> PathBuf {
    std::env::var_os("CHESSBENCH_ROOT")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// `tests/golden/`: the reference vectors (see its README).
pub(crate) fn golden_dir() -> PathBuf {
    root().join("tests").join("golden")
}

/// `tests/golden/NAME`, read whole.
pub fn golden(name: &str) -> String {
    let path = golden_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the golden vectors ship in the repository)",
            path.display()
        )
    })
}

/// `data/NAME`: the small real data the demo and tests use (see
/// `data/README.md`).
pub fn data_file(name: &str) -> PathBuf {
    let path = root().join("data").join(name);
    assert!(
        path.is_file(),
        "{} is missing (it ships in the repository)",
        path.display()
    );
    path
}

/// Whether this is a CI run (`CI=true`), where nothing may be skipped.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Reports that `what` is missing: under CI a failure, else a printed reason
/// for the caller to skip.
pub fn missing(what: &str) {
    assert!(
        !in_ci(),
        "{what}, and CI=true: CI must run every test (install it, see .ci/run)"
    );
    eprintln!("skipping: {what}");
}

/// Real Stockfish: `EngineConfig::default()` with its path resolved to the
/// program it starts (`/usr/games/stockfish` when that is not on PATH), or
/// `None` after [`missing`].
pub fn stockfish() -> Option<crate::uci_client::EngineConfig> {
    let mut config = crate::uci_client::EngineConfig::default();
    // The program the engine starts, so tests can name it in scripts.
    config.path = crate::uci_client::engine::program(&config.path);
    match crate::uci_client::Engine::start(&config) {
        Ok(e) => {
            e.quit();
            Some(config)
        }
        Err(e) => {
            missing(&format!("no stockfish ({e}); apt-get install stockfish"));
            None
        }
    }
}

/// Whether python3 can import `modules` (else [`missing`]).
pub fn python_has(modules: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        missing(&format!(
            "python3 cannot import {modules} (pip install -r notebooks/requirements.txt)"
        ));
    }
    ok
}

/// Positions of a pseudo-random walk from the start (restarted after 40
/// plies without a capture or pawn move, or at the end of a game): varied
/// boards with 1 to 40-odd legal moves, the same every time.
pub fn walk(n: usize) -> Vec<shakmaty::Chess> {
    use shakmaty::Position;
    let mut out = Vec::new();
    let mut pos = shakmaty::Chess::default();
    let mut i = 7usize;
    while out.len() < n {
        let moves = pos.legal_moves();
        if moves.is_empty() || pos.halfmoves() > 40 {
            pos = shakmaty::Chess::default();
            continue;
        }
        out.push(pos.clone());
        i = i.wrapping_mul(31).wrapping_add(17);
        pos.play_unchecked(moves[i % moves.len()]);
    }
    out
}
