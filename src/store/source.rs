//! Where a run's value labels come from. A label source ([`Source`]) owns
//! everything that tells its rows apart from another's: the stem of its
//! chunk files and entries (`chunk-NNNNNNNN`, `evals-NNNNNNNN`), the
//! settings file its resumes check, the name in the `source` column and in
//! `--label-source`, and its place in the order [`LabelSource::Both`]
//! chooses by. The chunk store, the training loader, `.bag` export,
//! `chessbench stats` and the SQL views (`sql/views.sql`, held against
//! this module by a test) all derive from it, so a further source is one
//! variant here and the module of `annotate/` that writes its chunks.

use std::{fmt, str::FromStr, sync::Arc};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A source of value labels with chunk files of its own in a run.
///
/// The order of [`Source::ALL`] is the order of precedence: where a board
/// has values from several sources, [`LabelSource::Both`] takes those of
/// the last source in it that labels the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// Stockfish's searches (`chessbench annotate`), and `.bag` files
    /// imported with `chessbench import` (Stockfish 16 at 50 ms a move):
    /// the paper's labels.
    Stockfish,
    /// The Lichess evaluation database (`chessbench annotate --evals`): the
    /// boards it labels, with the moves of its principal variations.
    LichessEvals,
}

impl Source {
    /// Every source, in order of precedence (lowest first).
    pub const ALL: [Source; 2] = [Source::Stockfish, Source::LichessEvals];

    /// The source's name: `--label-source`'s value, the `source` column of
    /// its rows and SQL's `label_source` variable.
    pub fn name(self) -> &'static str {
        match self {
            Source::Stockfish => "stockfish",
            Source::LichessEvals => "lichess_evals",
        }
    }

    /// What `--label-source NAME` chooses, for `--help`.
    fn about(self) -> &'static str {
        match self {
            Source::Stockfish => {
                "Stockfish's values (`chessbench annotate`, or imported `.bag` files): the paper's labels"
            }
            Source::LichessEvals => {
                "The Lichess evaluation database's only (`annotate --evals`): the boards it labels, with the moves of its principal variations"
            }
        }
    }

    /// The command that writes the source's labels into a run, for hints.
    pub(crate) fn how_to_label(self) -> &'static str {
        match self {
            Source::Stockfish => "`chessbench annotate RUN`",
            Source::LichessEvals => "`chessbench annotate RUN --evals FILE`",
        }
    }

    /// The prefix of the source's chunk files and entries
    /// (`TABLE/split=S/STEM-NNNNNNNN.parquet`, `annotate/split=S/STEM-NNNNNNNN.json`).
    pub(crate) fn stem(self) -> &'static str {
        match self {
            Source::Stockfish => "chunk-",
            Source::LichessEvals => "evals-",
        }
    }

    /// The file in `annotate/split=S/` recording the settings the split's
    /// chunks of this source were written with; a resume must agree.
    pub(crate) fn settings_file(self) -> &'static str {
        match self {
            Source::Stockfish => "settings.json",
            Source::LichessEvals => "evals-settings.json",
        }
    }

    /// The source of the value-table file named `file`: the source whose
    /// stem it starts with. Files of no source's stem (imported `.bag`
    /// files' `part-*`) hold Stockfish's values.
    pub(crate) fn of_file(file: &str) -> Source {
        Source::ALL
            .into_iter()
            .find(|s| file.starts_with(s.stem()))
            .unwrap_or(Source::Stockfish)
    }

    /// The sources after this one in order of precedence: under
    /// [`LabelSource::Both`] their values replace this one's.
    pub(crate) fn overridden_by(self) -> impl Iterator<Item = Source> {
        Source::ALL.into_iter().filter(move |s| *s > self)
    }

    /// The `source` column value of the rows this source's annotation
    /// writes.
    pub(crate) fn column_value(self) -> ValueSource {
        ValueSource::Annotated(self)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a value row came from: the `source` column of `state_values` and
/// `action_values`. Files written before the column existed hold Stockfish
/// values; readers take a missing column as Stockfish's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueSource {
    /// Written by a source's own annotation (`chessbench annotate`).
    Annotated(Source),
    /// ChessBench `.bag` files (`chessbench import`): Stockfish 16 at 50 ms
    /// a move, as the paper annotated them; the label source is Stockfish.
    Bag,
}

impl ValueSource {
    /// The column's value.
    pub fn name(self) -> &'static str {
        match self {
            ValueSource::Annotated(source) => source.name(),
            ValueSource::Bag => "bag",
        }
    }

    /// A `source` column of `rows` rows, all this source.
    pub(crate) fn column(self, rows: usize) -> arrow_array::ArrayRef {
        Arc::new(arrow_array::StringArray::from_iter_values(
            std::iter::repeat_n(self.name(), rows),
        ))
    }
}

/// Which values a consumer (the training loader, `.bag` export, the
/// evaluator's static metrics) uses when a board has values from more than
/// one source: `--label-source` and SQL's `label_source` variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelSource {
    /// One source's values only.
    Only(Source),
    /// Every source's, one source per board: for each board, the values of
    /// the last source in [`Source::ALL`] that labels it (the evaluation
    /// database's where it labels a board, Stockfish's elsewhere).
    Both,
}

impl Default for LabelSource {
    fn default() -> Self {
        LabelSource::Only(Source::Stockfish)
    }
}

/// Every choice: each source alone, then [`LabelSource::Both`].
const CHOICES: [LabelSource; Source::ALL.len() + 1] = {
    let mut choices = [LabelSource::Both; Source::ALL.len() + 1];
    let mut i = 0;
    while i < Source::ALL.len() {
        choices[i] = LabelSource::Only(Source::ALL[i]);
        i += 1;
    }
    choices
};

impl LabelSource {
    /// The spelling of options and of SQL's `label_source` variable.
    pub fn name(self) -> &'static str {
        match self {
            LabelSource::Only(source) => source.name(),
            LabelSource::Both => "both",
        }
    }

    /// The commands that write this choice's labels into a run, for hints.
    pub(crate) fn how_to_label(self) -> String {
        let commands: Vec<&str> = Source::ALL
            .into_iter()
            .filter(|s| self.reads(*s))
            .map(Source::how_to_label)
            .collect();
        commands.join(" or ")
    }

    /// Whether rows of `source` may be used. With [`LabelSource::Both`]
    /// every source's may, and a source's rows of boards a later source
    /// labels are skipped ([`Source::overridden_by`]).
    pub(crate) fn reads(self, source: Source) -> bool {
        match self {
            LabelSource::Only(only) => only == source,
            LabelSource::Both => true,
        }
    }
}

impl fmt::Display for LabelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LabelSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CHOICES.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<&str> = CHOICES.iter().map(|c| c.name()).collect();
            format!(
                "unknown label source {s:?}: expected one of {}",
                names.join(", ")
            )
        })
    }
}

impl clap::ValueEnum for LabelSource {
    fn value_variants<'a>() -> &'a [Self] {
        &CHOICES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let about = match self {
            LabelSource::Only(source) => source.about(),
            LabelSource::Both => {
                "The evaluation database's values where it labels a board, Stockfish's elsewhere"
            }
        };
        Some(clap::builder::PossibleValue::new(self.name()).help(about))
    }
}

impl Serialize for LabelSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for LabelSource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_file_has_the_source_of_its_stem() {
        for source in Source::ALL {
            assert_eq!(
                Source::of_file(&format!("{}00000003.parquet", source.stem())),
                source
            );
            assert!(LabelSource::Only(source).reads(source));
        }
        // Imported .bag files hold Stockfish's values.
        assert_eq!(Source::of_file("part-00000.parquet"), Source::Stockfish);
        assert!(!LabelSource::Only(Source::LichessEvals).reads(Source::Stockfish));
        assert!(LabelSource::Both.reads(Source::Stockfish));
    }

    #[test]
    fn stems_and_settings_files_are_distinct() {
        let mut stems: Vec<_> = Source::ALL.iter().map(|s| s.stem()).collect();
        let mut settings: Vec<_> = Source::ALL.iter().map(|s| s.settings_file()).collect();
        stems.dedup();
        settings.dedup();
        assert_eq!(stems.len(), Source::ALL.len());
        assert_eq!(settings.len(), Source::ALL.len());
        for stem in stems {
            assert!(stem.ends_with('-'), "{stem}");
        }
    }

    #[test]
    fn label_source_names_round_trip() {
        let names: Vec<&str> = CHOICES.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["stockfish", "lichess_evals", "both"]);
        for choice in CHOICES {
            assert_eq!(choice.name().parse::<LabelSource>(), Ok(choice));
            let json = serde_json::to_string(&choice).unwrap();
            assert_eq!(json, format!("\"{}\"", choice.name()));
            assert_eq!(serde_json::from_str::<LabelSource>(&json).unwrap(), choice);
        }
        let err = "cloud".parse::<LabelSource>().unwrap_err();
        assert!(err.contains("stockfish, lichess_evals, both"), "{err}");
        assert_eq!(LabelSource::default(), LabelSource::Only(Source::Stockfish));
    }

    #[test]
    fn only_later_sources_override() {
        assert_eq!(
            Source::Stockfish.overridden_by().collect::<Vec<_>>(),
            [Source::LichessEvals]
        );
        assert_eq!(Source::LichessEvals.overridden_by().count(), 0);
        assert_eq!(
            Source::LichessEvals.column_value().name(),
            Source::LichessEvals.name()
        );
        assert_eq!(ValueSource::Bag.name(), "bag");
    }
}
