//! The SQL shipped in `sql/`: `views.sql`, which names a run's tables and
//! the ChessBench record sets as DuckDB views over the Parquet files, and
//! the built-in queries (Table A1, the dataset statistics, ...). One list,
//! read by `chessbench sql` and by the Python package's `chessbench.open`.

/// `sql/views.sql`: run after `SET VARIABLE run_dir = '/abs/run'`.
pub const VIEWS_SQL: &str = include_str!("../../sql/views.sql");

/// A SQL file shipped in `sql/`.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// Its name: `sql/NAME.sql`, and what `chessbench sql RUN NAME` runs.
    pub name: &'static str,
    /// Its text.
    pub text: &'static str,
    /// What its queries give (for `chessbench sql --help`).
    pub about: &'static str,
}

/// The SQL files shipped in `sql/`: the views, then the built-in queries.
/// This is the only list of them; `chessbench sql`'s help and errors, and
/// the Python package, read it, and a test holds it against the files in
/// `sql/` and docs/query.md.
pub const BUILTIN: [Builtin; 8] = [
    Builtin {
        name: "views",
        text: VIEWS_SQL,
        about: "the views every query reads, preloaded",
    },
    Builtin {
        name: "table_a1",
        text: include_str!("../../sql/table_a1.sql"),
        about: "Table A1 per split, the numbers `chessbench stats` prints",
    },
    Builtin {
        name: "dataset_stats",
        text: include_str!("../../sql/dataset_stats.sql"),
        about: "Figure A1 histograms, phases, Elo and time controls, mate scores, failures",
    },
    Builtin {
        name: "overlap",
        text: include_str!("../../sql/overlap.sql"),
        about: "test boards also in train",
    },
    Builtin {
        name: "sampling",
        text: include_str!("../../sql/sampling.sql"),
        about: "uniform vs weighted sampler weights",
    },
    Builtin {
        name: "training",
        text: include_str!("../../sql/training.sql"),
        about: "the training runs of RUN/train/*/: where each stands, its loss curve, its \
                evaluations beside the predict-the-marginal baseline",
    },
    Builtin {
        name: "ablations",
        text: include_str!("../../sql/ablations.sql"),
        about: "`chessbench ablate` results in the paper's table shape",
    },
    Builtin {
        name: "label_sources",
        text: include_str!("../../sql/label_sources.sql"),
        about: "coverage of Stockfish and the Lichess evaluation database by split and phase, \
                and their agreement",
    },
];

/// The built-in queries' names, in [`BUILTIN`]'s order, joined by ", ".
pub fn builtin_names() -> String {
    BUILTIN.map(|b| b.name).join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql/` holds exactly the files [`BUILTIN`] names (a new file there
    /// needs its entry, with what it gives), and docs/query.md names each.
    #[test]
    fn builtin_list_is_the_sql_directory() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<String> = std::fs::read_dir(root.join("sql"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let mut names: Vec<String> = BUILTIN.iter().map(|b| format!("{}.sql", b.name)).collect();
        names.sort();
        assert_eq!(files, names, "sql/ against BUILTIN");
        let query_md = std::fs::read_to_string(root.join("docs/query.md")).unwrap();
        for b in BUILTIN {
            assert!(
                query_md.contains(&format!("`sql/{}.sql`", b.name)),
                "docs/query.md does not name sql/{}.sql",
                b.name
            );
            assert!(b.about.len() > 10, "{}: say what it gives", b.name);
        }
    }
}
