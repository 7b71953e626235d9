//! What an import did ([`ImportSummary`]) and how it reads for a person.

use std::{
    collections::BTreeMap,
    io::{self, Write},
    path::PathBuf,
};

use serde::Serialize;

use crate::{
    bag::decode::SerialBusy,
    ui::{Report, group},
};

/// What an import wrote.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportSummary {
    pub split: String,
    pub boards: u64,
    pub legal_moves: u64,
    pub state_value_records: u64,
    pub behavioral_cloning_records: u64,
    pub action_value_records: u64,
    pub files: Vec<PathBuf>,
    /// Wall-clock seconds per phase: `ids` (the board-id passes on disk,
    /// when the boards do not fit), `records` (every record read, decoded
    /// and applied), `state_values` (written in id order), `commit`.
    pub phases: BTreeMap<&'static str, f64>,
    /// The records pass's serial parts: the reading thread's and the
    /// applying thread's busy seconds.
    pub serial: SerialBusy,
}

impl Report for ImportSummary {
    fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(
            out,
            "imported split {}: {} boards, {} legal moves; records: {} state_value, {} behavioral_cloning, {} action_value",
            self.split,
            group(self.boards),
            group(self.legal_moves),
            group(self.state_value_records),
            group(self.behavioral_cloning_records),
            group(self.action_value_records)
        )?;
        let phases: Vec<String> = ["ids", "records", "state_values", "commit"]
            .iter()
            .filter_map(|name| {
                let secs = self.phases.get(name)?;
                Some(if *name == "records" {
                    format!(
                        "{name} {secs:.2} s (reading {:.2} s, applying {:.2} s)",
                        self.serial.read_s, self.serial.apply_s
                    )
                } else {
                    format!("{name} {secs:.2} s")
                })
            })
            .collect();
        writeln!(out, "  phases: {}", phases.join(", "))
    }
}
