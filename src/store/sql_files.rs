//! The SQL shipped in `sql/`: `views.sql`, which names a run's tables and
//! the ChessBench record sets as DuckDB views over the Parquet files, and
//! the built-in queries (Table A1, the dataset statistics, ...). One list,
//! read by `chessbench sql` and by the Python package's `chessbench.open`.

/// `sql/views.sql`: run after `SET VARIABLE run_dir = '/abs/run'`.
pub const VIEWS_SQL: &str = include_str!("../../sql/views.sql");

/// The SQL files shipped in `sql/`, by name.
pub const BUILTIN: [(&str, &str); 8] = [
    ("views", VIEWS_SQL),
    ("table_a1", include_str!("../../sql/table_a1.sql")),
    ("dataset_stats", include_str!("../../sql/dataset_stats.sql")),
    ("overlap", include_str!("../../sql/overlap.sql")),
    ("sampling", include_str!("../../sql/sampling.sql")),
    ("training", include_str!("../../sql/training.sql")),
    ("ablations", include_str!("../../sql/ablations.sql")),
    ("label_sources", include_str!("../../sql/label_sources.sql")),
];
