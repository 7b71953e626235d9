//! How a stage shares out its `--memory-limit`.
//!
//! Each stage declares what holds memory at the same time as what: a
//! [`Memory`], a list of [`Consumer`]s with the [`Share`] each gets. One
//! function, [`Memory::share`], divides a limit between them, the same way
//! for every stage, and the binary prints each stage's list under its
//! `--memory-limit` help ([`Memory`]'s `Display`), so the help, the docs
//! (docs/cli.md is that help) and the division are one declaration.
//!
//! A stage's finer model of one consumer stays with the stage (ingest's
//! deduplication tables beside their spill buffers, `ingest::dedup`'s
//! budget): the share says how much that consumer has to work within.

use std::fmt;

/// How much of the limit one consumer gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// `num / den` of the limit (rounded down: `limit / den * num`).
    Part(u64, u64),
    /// Buffers the stage sizes itself, taken first: `first` bytes, and
    /// `each_thread` more for every thread past the first (capped at the
    /// limit).
    Buffers { first: u64, each_thread: u64 },
    /// What the consumers beside it leave, and never less than `num / den`
    /// of the limit: under a small limit the stage then goes over it rather
    /// than leaving this consumer nothing. At most one a stage.
    Rest { at_least: (u64, u64) },
    /// The whole limit, while nothing else of the stage holds memory (a
    /// DuckDB session opened and closed before the rest starts).
    Alone,
}

/// One thing that holds memory within a stage's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consumer {
    /// What it holds, as `--help` names it.
    pub holds: &'static str,
    pub share: Share,
}

impl Consumer {
    pub const fn new(holds: &'static str, share: Share) -> Consumer {
        Consumer { holds, share }
    }
}

/// A stage's consumers of its memory limit, in a fixed order: [`share`]
/// gives their bytes in the same order.
///
/// [`share`]: Memory::share
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory<const N: usize>(pub [Consumer; N]);

impl<const N: usize> Memory<N> {
    /// Each consumer's bytes under `limit`, with `threads` threads (for
    /// [`Share::Buffers`]), in the order declared.
    pub fn share(&self, limit: u64, threads: usize) -> [u64; N] {
        let fixed = |share: Share| match share {
            Share::Part(num, den) => Some(limit / den.max(1) * num),
            Share::Buffers { first, each_thread } => Some(
                first
                    .saturating_add(each_thread.saturating_mul(threads.saturating_sub(1) as u64))
                    .min(limit),
            ),
            Share::Rest { .. } | Share::Alone => None,
        };
        let taken: u64 = self.0.iter().filter_map(|c| fixed(c.share)).sum();
        self.0.map(|c| match c.share {
            Share::Rest {
                at_least: (num, den),
            } => limit.saturating_sub(taken).max(limit / den.max(1) * num),
            Share::Alone => limit,
            share => fixed(share).expect("a fixed share"),
        })
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = super::values::ByteSize;
        match *self {
            Share::Part(num, den) => write!(f, "{num}/{den}"),
            Share::Buffers {
                first,
                each_thread: 0,
            } => write!(f, "{}", size(first)),
            Share::Buffers { first, each_thread } => {
                write!(
                    f,
                    "{}, and {} for each thread past the first",
                    size(first),
                    size(each_thread)
                )
            }
            Share::Rest { at_least: (0, _) } => f.write_str("the rest"),
            Share::Rest {
                at_least: (num, den),
            } => write!(f, "the rest, at least {num}/{den}"),
            Share::Alone => f.write_str("all of it, alone"),
        }
    }
}

/// `--help`'s list: `  - SHARE: WHAT` a line.
impl<const N: usize> fmt::Display for Memory<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "  - {}: {}", c.share, c.holds)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn parts_and_buffers_come_first_and_the_rest_gets_what_they_leave() {
        let m = Memory([
            Consumer::new(
                "buffers",
                Share::Buffers {
                    first: 64 * MIB,
                    each_thread: 16 * MIB,
                },
            ),
            Consumer::new("index", Share::Part(1, 4)),
            Consumer::new("table", Share::Rest { at_least: (1, 4) }),
            Consumer::new("session", Share::Alone),
        ]);
        let limit = 1024 * MIB;
        assert_eq!(
            m.share(limit, 3),
            [96 * MIB, 256 * MIB, (1024 - 96 - 256) * MIB, limit]
        );
        // Under a small limit the rest keeps its floor, and buffers are
        // capped at the limit.
        assert_eq!(
            m.share(80 * MIB, 3),
            [80 * MIB, 20 * MIB, 20 * MIB, 80 * MIB]
        );
    }

    #[test]
    fn a_part_rounds_as_the_stages_always_divided() {
        let m = Memory([
            Consumer::new("duckdb", Share::Part(5, 8)),
            Consumer::new("rest", Share::Rest { at_least: (0, 1) }),
        ]);
        for limit in [0, 1, 7, 8, 1001, 2 << 30, u64::MAX] {
            let [duckdb, rest] = m.share(limit, 1);
            assert_eq!(duckdb, limit / 8 * 5);
            assert_eq!(rest, limit - limit / 8 * 5);
        }
    }

    #[test]
    fn the_list_reads_as_help() {
        let m = Memory([
            Consumer::new(
                "the readers' buffers",
                Share::Buffers {
                    first: 128 * MIB,
                    each_thread: 0,
                },
            ),
            Consumer::new("the test split's hashes", Share::Rest { at_least: (1, 2) }),
        ]);
        assert_eq!(
            m.to_string(),
            "  - 128MiB: the readers' buffers\n  - the rest, at least 1/2: the test split's hashes"
        );
    }
}
