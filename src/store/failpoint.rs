//! Named points where a process can be made to die, so that tests kill a
//! real process exactly where a crash would hurt most: in the commit path
//! (`tests/slurm/faults.sh`, on a real cluster), after a chunk's files are
//! written and before its entry, or after the entry and before the files
//! are renamed; and in training, right after a step's metrics are logged
//! (the resume test).
//!
//! `CHESSBENCH_FAILPOINT=NAME` kills the process with SIGKILL the first time
//! it reaches point NAME; `NAME@N` the N-th time (counted over all threads).
//! Unset, each point costs one relaxed load of a cached value.

use std::sync::{
    OnceLock,
    atomic::{AtomicU64, Ordering},
};

/// The environment variable naming the point to die at.
pub(crate) const VAR: &str = "CHESSBENCH_FAILPOINT";

/// The points, in the order a chunk's commit passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// A chunk's `.tmp` files are written and synced; its entry is not.
    ChunkWritten,
    /// The chunk's entry (the commit point) is written; no file renamed.
    EntryWritten,
    /// The first of the chunk's files is renamed; the others are not.
    FirstRename,
    /// Training logged a step's metrics row (the N-th hit is the N-th row
    /// this process logs: step N of a fresh run logging every step).
    StepLogged,
}

impl Point {
    const ALL: [Point; 4] = [
        Point::ChunkWritten,
        Point::EntryWritten,
        Point::FirstRename,
        Point::StepLogged,
    ];

    fn name(self) -> &'static str {
        match self {
            Point::ChunkWritten => "chunk-written",
            Point::EntryWritten => "entry-written",
            Point::FirstRename => "first-rename",
            Point::StepLogged => "step-logged",
        }
    }
}

/// The armed point and the hit that kills, parsed once.
struct Armed {
    point: Point,
    at: u64,
    hits: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let value = std::env::var(VAR).ok()?;
            match parse(&value) {
                Ok((point, at)) => Some(Armed {
                    point,
                    at,
                    hits: AtomicU64::new(0),
                }),
                Err(message) => {
                    // A misspelt point must not pass silently as "no
                    // fault": the test relying on it would prove nothing.
                    eprintln!("error: {VAR}={value}: {message}");
                    std::process::exit(2);
                }
            }
        })
        .as_ref()
}

/// `NAME` or `NAME@N` (N >= 1).
fn parse(value: &str) -> Result<(Point, u64), String> {
    let (name, at) = match value.split_once('@') {
        Some((name, n)) => (
            name,
            n.parse::<u64>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("expected a hit number >= 1 after '@', got {n:?}"))?,
        ),
        None => (value, 1),
    };
    let point = Point::ALL
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = Point::ALL.iter().map(|p| p.name()).collect();
            format!("unknown point {name:?} (known: {})", names.join(", "))
        })?;
    Ok((point, at))
}

/// Parses `CHESSBENCH_FAILPOINT` now, so that a misspelt point stops the
/// process at its start (exit status 2) rather than after a chunk's work.
pub(crate) fn check() {
    armed();
}

/// Dies here, with SIGKILL, if `point` is armed and this is its fatal hit.
pub(crate) fn hit(point: Point) {
    let Some(armed) = armed() else { return };
    if armed.point != point || armed.hits.fetch_add(1, Ordering::Relaxed) + 1 != armed.at {
        return;
    }
    eprintln!(
        "{VAR}: killing this process at {} (hit {})",
        point.name(),
        armed.at
    );
    // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL cannot be caught; this is never reached.
    std::process::abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_hit_numbers() {
        assert_eq!(parse("chunk-written"), Ok((Point::ChunkWritten, 1)));
        assert_eq!(parse("entry-written@3"), Ok((Point::EntryWritten, 3)));
        assert_eq!(parse("first-rename@1"), Ok((Point::FirstRename, 1)));
        assert_eq!(parse("step-logged@9"), Ok((Point::StepLogged, 9)));
        assert!(
            parse("entry-writen")
                .unwrap_err()
                .contains("known: chunk-written")
        );
        assert!(parse("chunk-written@0").is_err());
        assert!(parse("chunk-written@x").is_err());
    }
}
