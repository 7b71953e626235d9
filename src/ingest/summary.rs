//! What an ingest did ([`Summary`]): the splits' counts, the inputs, each
//! phase's time, memory, and how it reads for a person.

use std::{
    collections::BTreeMap,
    io::{self, Write},
    path::PathBuf,
};

use super::dedup;
use crate::{
    store::manifest::{InputRecord, SplitCounts},
    ui::{Report, group},
};

/// What an ingest did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The run directory written.
    pub out: PathBuf,
    pub splits: Vec<(String, SplitCounts)>,
    pub inputs: Vec<InputRecord>,
    pub seconds: f64,
    /// Board deduplication exceeded the memory limit and used disk.
    pub spilled: bool,
    /// Bytes of a spilled board on disk (the spill format in use: 44
    /// packed, 56 plain), whether or not ingest spilled.
    pub spill_entry_bytes: usize,
    /// Wall-clock seconds per phase: stream (read, parse, play, count
    /// boards), dedup (merge spilled partitions), boards (write boards and
    /// legal_moves), commit.
    pub phases: Vec<(&'static str, f64)>,
    /// Where the dedup phase's threads spent their time (when boards
    /// spilled).
    pub dedup_threads: Option<dedup::DedupBusy>,
    /// Peak resident memory of the process (Linux), bytes.
    pub peak_rss: Option<u64>,
    /// `--memory-limit`, bytes.
    pub memory_limit: u64,
    /// The least limit ingest stays within for these splits (the rest of
    /// the pipeline's floor and the smallest tables).
    pub least_memory_limit: u64,
}

impl Summary {
    /// Games read from all inputs.
    pub fn games_read(&self) -> u64 {
        self.inputs.iter().map(|i| i.games_read).sum()
    }
    /// Decompressed PGN bytes read.
    pub(crate) fn pgn_bytes(&self) -> u64 {
        self.inputs.iter().map(|i| i.pgn_bytes).sum()
    }
}

impl serde::Serialize for Summary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::json!({
            "out": self.out,
            "seconds": self.seconds,
            "games_read": self.games_read(),
            "pgn_bytes": self.pgn_bytes(),
            "spilled": self.spilled,
            "spill_entry_bytes": self.spill_entry_bytes,
            "peak_rss_bytes": self.peak_rss,
            "memory_limit": self.memory_limit,
            "least_memory_limit": self.least_memory_limit,
            "phases": self.phases.iter().cloned().collect::<BTreeMap<_, _>>(),
            "dedup_threads": self.dedup_threads,
            "inputs": self.inputs,
            "splits": self.splits.iter().cloned().collect::<BTreeMap<_, _>>(),
        })
        .serialize(s)
    }
}

impl Report for Summary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        let secs = self.seconds.max(1e-9);
        writeln!(
            out,
            "ingested {} games ({:.1} MB of PGN) from {} input(s) in {:.2} s: {:.0} games/s, {:.1} MB/s{}",
            group(self.games_read()),
            self.pgn_bytes() as f64 / 1e6,
            self.inputs.len(),
            self.seconds,
            self.games_read() as f64 / secs,
            self.pgn_bytes() as f64 / 1e6 / secs,
            if self.spilled {
                format!(
                    " (board dedup spilled to disk, {} bytes a board)",
                    self.spill_entry_bytes
                )
            } else {
                String::new()
            }
        )?;
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(name, secs)| format!("{name} {secs:.2} s"))
            .collect();
        let peak = self
            .peak_rss
            .map(|b| format!("; peak memory {:.0} MB", b as f64 / 1e6))
            .unwrap_or_default();
        writeln!(out, "  phases: {}{peak}", phases.join(", "))?;
        if let Some(d) = &self.dedup_threads {
            writeln!(
                out,
                "  dedup: tables spilled in {:.2} s; {} partitions on {} threads in {:.2} s ({} kept with fixes of {:.1} MB), thread-seconds reading {:.2}, inserting {:.2}, writing {:.2}, splitting {:.2}",
                d.last_spill_s,
                d.partitions,
                d.threads,
                d.partitions_s,
                d.fixed,
                d.fix_bytes as f64 / 1e6,
                d.read_s,
                d.insert_s,
                d.write_s,
                d.split_s
            )?;
        }
        for (name, c) in &self.splits {
            let rejected: u64 = c.rejected.values().sum();
            let reasons: Vec<String> = c.rejected.iter().map(|(r, n)| format!("{r} {n}")).collect();
            writeln!(
                out,
                "  {name}: {} games, {} boards ({} with a legal move), {} legal moves; {} rejected{}{}",
                group(c.games),
                group(c.state_value),
                group(c.behavioral_cloning),
                group(c.action_value),
                group(rejected),
                if reasons.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", reasons.join(", "))
                },
                if c.not_sampled > 0 {
                    format!("; {} accepted but not sampled", group(c.not_sampled))
                } else {
                    String::new()
                }
            )?;
        }
        writeln!(
            out,
            "wrote {} (run `chessbench stats {}` for Table A1)",
            self.out.display(),
            self.out.display()
        )
    }

    fn warnings(&self) -> Vec<String> {
        let mib = |b: u64| b.div_ceil(1 << 20);
        let over = self.peak_rss.filter(|&peak| peak > self.memory_limit);
        let memory = over.map(|peak| {
            let why = if self.memory_limit < self.least_memory_limit {
                format!(
                    "that is under the least ingest keeps to ({} MiB: parsing, writing and \
                     the smallest deduplication tables), so the tables got their minimum",
                    mib(self.least_memory_limit)
                )
            } else {
                "ingest means to stay within it: please report this with the input's size".into()
            };
            format!(
                "peak memory {} MiB exceeded --memory-limit {} MiB: {why}",
                mib(peak),
                mib(self.memory_limit)
            )
        });
        let inputs = self.inputs.iter().filter_map(|input| {
            input.error.as_ref().map(|e| {
                format!(
                    "input {} ended early with a read error after {} games: {e} \
                     (a game cut off by it is in rejects as 'truncated')",
                    input.source, input.games_read
                )
            })
        });
        memory.into_iter().chain(inputs).collect()
    }
}
