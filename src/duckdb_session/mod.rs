//! The query foundation: an embedded DuckDB over a run directory's Parquet
//! tables with the views of `sql/views.sql` loaded ([`Session`]), which
//! `chessbench sql`, the evaluation's board sampling and `bag export` share.
//!
//! The SQL files of `sql/` are compiled into the binary (`chessbench sql RUN
//! table_a1` works from anywhere) and also run unchanged in the DuckDB CLI or
//! Python duckdb after `SET VARIABLE run_dir = '...'` and `views.sql`.
//!
//! Before any query the run is checked: not a run, an ingested split whose
//! table has no files, or an annotate commit that is half done (committed
//! chunk files still under their temporary names) are errors naming the
//! table and the run. A table with no files at all is reported by the view
//! itself when a query touches it.

pub mod output;
pub(crate) mod script;

use std::{
    fs,
    path::{Path, PathBuf},
};

use arrow_array::RecordBatch;
use duckdb::Connection;
use thiserror::Error;

use crate::{
    options::{Consumer, Memory, Share},
    store::{RunDir, StoreError, Table, chunks, commit::RunReader, commit::partition_dir},
};
pub(crate) use output::Format;
pub(crate) use script::Statement;

pub use crate::store::sql_files::{BUILTIN, VIEWS_SQL};

/// Failures of the SQL layer.
#[derive(Debug, Error)]
pub enum SqlError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("table {table} in run {run} is partial: {detail}")]
    Partial {
        table: &'static str,
        run: PathBuf,
        detail: String,
    },
    /// Raised by a view over a table without files (see `views.sql`).
    #[error("{0}")]
    MissingTable(String),
    #[error("{source_name}:{line}: {message}")]
    Query {
        source_name: String,
        line: usize,
        message: String,
    },
    #[error("DuckDB: {0}")]
    Duckdb(#[from] duckdb::Error),
    #[error(
        "{0:?} is neither a SQL file nor a built-in query (built-ins: {names})",
        names = crate::store::sql_files::builtin_names()
    )]
    UnknownQuery(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("variable {0:?}: expected NAME=VALUE with NAME made of letters, digits and _")]
    BadVariable(String),
    #[error("give a SQL file, a built-in query name or -e SQL")]
    NoQuery,
}

/// The SQL a query argument names: an existing file, or a built-in name
/// (`table_a1`, `table_a1.sql`, `sql/table_a1.sql`). Returns (source name,
/// text).
pub(crate) fn query_text(arg: &str) -> Result<(String, String), SqlError> {
    let path = Path::new(arg);
    if path.is_file() {
        let text = fs::read_to_string(path).map_err(|source| SqlError::Io {
            path: path.to_owned(),
            source,
        })?;
        return Ok((arg.to_owned(), text));
    }
    let name = arg.trim_start_matches("sql/").trim_end_matches(".sql");
    BUILTIN
        .iter()
        .find(|b| b.name == name)
        .map(|b| (format!("sql/{}.sql", b.name), b.text.to_owned()))
        .ok_or_else(|| SqlError::UnknownQuery(arg.to_owned()))
}

/// Checks that a run's tables are complete enough to query: every split the
/// manifest lists has files for each ingest table, and no committed annotate
/// chunk still has its files under temporary names.
pub(crate) fn check_run(run: &Path) -> Result<RunReader, SqlError> {
    let reader = RunDir::read(run)?;
    let manifest = crate::store::Manifest::read(&run.join(crate::store::commit::MANIFEST))?;
    for split in manifest.splits.keys() {
        for table in [Table::Games, Table::Boards, Table::LegalMoves] {
            let dir = run.join(partition_dir(table, split));
            if !has_parquet(&dir)? {
                return Err(SqlError::Partial {
                    table: table.name(),
                    run: run.to_owned(),
                    detail: format!(
                        "manifest.json lists split {split:?} but {} holds no Parquet file \
                         (files were removed or copied incompletely): re-run `chessbench ingest` for that split",
                        dir.display()
                    ),
                });
            }
        }
    }
    if let Some(c) = chunks::interrupted_commit(run)? {
        return Err(SqlError::Partial {
            table: c.table.name(),
            run: run.to_owned(),
            detail: format!(
                "chunk {} of split {:?} is committed but its file is still \
                 {} (an annotate commit is in progress or was interrupted): wait for it, \
                 or run `chessbench annotate {}` to complete it",
                c.chunk,
                c.split,
                c.path.display(),
                run.display()
            ),
        });
    }
    Ok(reader)
}

fn has_parquet(dir: &Path) -> Result<bool, SqlError> {
    match fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "parquet"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(SqlError::Io {
            path: dir.to_owned(),
            source,
        }),
    }
}

/// Quotes a string as a SQL literal.
pub(crate) fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// One printed result of a script: the query's name and the rows it
/// returned (all of them, also those `--max-rows` did not show).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueryRows {
    pub name: String,
    pub rows: u64,
}

/// A split with some but not all of its boards annotated: its value tables
/// and record sets cover only the annotated boards.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartialSplit {
    pub split: String,
    pub boards: u64,
    /// Boards with a state value.
    pub annotated: u64,
    /// Boards whose annotation failed (the `failures` table).
    pub failed: u64,
}

impl std::fmt::Display for PartialSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "split {}: {} of {} boards annotated",
            self.split,
            crate::ui::group(self.annotated),
            crate::ui::group(self.boards)
        )?;
        if self.failed > 0 {
            write!(f, ", {} failed", crate::ui::group(self.failed))?;
        }
        f.write_str("; value tables and record sets cover those only")
    }
}

/// An embedded DuckDB with a run's views loaded. Holds the run's shared
/// commit lock, so no commit changes the tables while it is open.
pub(crate) struct Session {
    conn: Connection,
    run: PathBuf,
    /// Views dropped because their table has no files, with what to do.
    missing: Vec<(&'static str, &'static str)>,
    /// DuckDB's spill directory, removed with the session.
    spill: PathBuf,
    _reader: RunReader,
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.spill);
    }
}

/// Where a run's stages spill to disk: `RUN/.tmp/`.
pub(crate) fn spill_root(run: &Path) -> PathBuf {
    run.join(".tmp")
}

/// Tables whose absence is an error when a query uses them (rejects and
/// failures are legitimately empty), and the stage that writes them, in
/// the words of views.sql's own errors (a test holds them the same).
const REQUIRED: [(&str, &str); 5] = [
    (
        "games",
        "not ingested: run `chessbench ingest RUN INPUT` first",
    ),
    (
        "boards",
        "not ingested: run `chessbench ingest RUN INPUT` first",
    ),
    (
        "legal_moves",
        "not ingested: run `chessbench ingest RUN INPUT` first",
    ),
    (
        "state_values",
        "not annotated: run `chessbench annotate RUN` first",
    ),
    (
        "action_values",
        "not annotated: run `chessbench annotate RUN` first",
    ),
];

/// What a DuckDB session holds within the budget it is opened with
/// (`sql`'s and `bag export`'s whole limit, `eval`'s before any board is
/// scored). DuckDB's own `memory_limit` governs its buffer manager only:
/// allocations outside it (Parquet readers, result batches, this process)
/// came to about two fifths more at 10^6 games
/// (bench/results/amd2-2026-11-29/README.md, "Figures once kept in the
/// source"), so the buffer manager gets five eighths of the budget.
pub const MEMORY: Memory<2> = Memory([
    Consumer::new(
        "DuckDB's buffer manager (past it, sorts and joins spill into RUN/.tmp/)",
        Share::Part(5, 8),
    ),
    Consumer::new(
        "what DuckDB allocates outside it: Parquet readers, result batches",
        Share::Rest { at_least: (0, 1) },
    ),
]);

impl Session {
    /// Checks the run, opens an in-memory DuckDB that may use
    /// `memory_limit` bytes and spills past it into `RUN/.tmp/`, sets
    /// `run_dir` and the given variables, and loads `views.sql`.
    pub(crate) fn open(
        run: &Path,
        variables: &[(String, String)],
        memory_limit: u64,
    ) -> Result<Session, SqlError> {
        let reader = check_run(run)?;
        let conn = Connection::open_in_memory()?;
        let absolute = fs::canonicalize(run).map_err(|source| SqlError::Io {
            path: run.to_owned(),
            source,
        })?;
        let spill = spill_root(&absolute).join(format!("duckdb-{}", std::process::id()));
        // DuckDB creates the spill directory itself, but not its parent; a
        // read-only run simply cannot spill.
        let _ = fs::create_dir_all(spill_root(&absolute));
        // DuckDB wants memory per thread (~128 MiB for sorts and joins):
        // small budgets get fewer threads rather than out-of-memory errors.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let [duckdb_limit, _] = MEMORY.share(memory_limit, 1);
        let threads = (duckdb_limit / (128 << 20)).clamp(1, cores);
        let mut session = Session {
            conn,
            run: run.to_owned(),
            missing: Vec::new(),
            spill,
            _reader: reader,
        };
        let mut setup = format!(
            "SET memory_limit = '{}KiB';\nSET threads = {threads};\nSET temp_directory = {};\n\
             SET VARIABLE run_dir = {};\n",
            (duckdb_limit >> 10).max(1),
            literal(&session.spill.to_string_lossy()),
            literal(&absolute.to_string_lossy())
        );
        for (name, value) in variables {
            setup.push_str(&format!("SET VARIABLE {name} = {};\n", literal(value)));
        }
        session.execute_script("(variables)", &setup)?;
        session.execute_script("sql/views.sql", VIEWS_SQL)?;
        // views.sql turns a table without files into a view that raises an
        // error when a row is read, which a filter can skip; dropping the
        // view instead makes every query that uses it fail when bound, and
        // `error` turns DuckDB's catalog error into one naming the table.
        for (table, hint) in REQUIRED {
            let files: i64 = session.conn.query_row(
                &format!("SELECT getvariable('cb_n_{table}')"),
                [],
                |r| r.get(0),
            )?;
            if files == 0 {
                session.conn.execute_batch(&format!("DROP VIEW {table}"))?;
                session.missing.push((table, hint));
            }
        }
        Ok(session)
    }

    /// The run directory.
    pub(crate) fn run(&self) -> &Path {
        &self.run
    }

    /// The DuckDB connection (views loaded).
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// A DuckDB error as a SqlError: missing tables by name, others with
    /// the source and line of the statement.
    pub(crate) fn error(&self, source_name: &str, line: usize, e: duckdb::Error) -> SqlError {
        let message = e.to_string();
        if let Some(i) = message.find("chessbench: table ") {
            return SqlError::MissingTable(message[i + "chessbench: ".len()..].trim().to_owned());
        }
        for (table, hint) in &self.missing {
            if message.contains(&format!("Table with name {table} does not exist")) {
                return SqlError::MissingTable(format!(
                    "table {table} has no Parquet files in run {} ({hint}); \
                     {source_name}:{line} needs it",
                    self.run.display()
                ));
            }
        }
        SqlError::Query {
            source_name: source_name.to_owned(),
            line,
            message,
        }
    }

    /// Runs statements that return nothing worth printing.
    fn execute_script(&self, source_name: &str, text: &str) -> Result<(), SqlError> {
        for s in script::split(text) {
            self.conn
                .execute_batch(&s.sql)
                .map_err(|e| self.error(source_name, s.line, e))?;
        }
        Ok(())
    }

    /// Runs a script: statements that return rows stream their results
    /// into `out` in `format` as DuckDB produces them (only the one named
    /// `only`, if given); the others just run.
    pub(crate) fn run_script(
        &self,
        source_name: &str,
        text: &str,
        only: Option<&str>,
        format: Format,
        max_rows: usize,
        out: &mut dyn std::io::Write,
    ) -> Result<Vec<QueryRows>, SqlError> {
        let statements = script::split(text);
        let name_of = |s: &Statement, index: usize| {
            s.name.clone().unwrap_or_else(|| format!("result_{index}"))
        };
        // Which statements print a result (headers depend on how many).
        let mut index = 0;
        let printed: Vec<Option<String>> = statements
            .iter()
            .map(|s| {
                s.returns_rows().then(|| {
                    index += 1;
                    name_of(s, index)
                })
            })
            .map(|name| name.filter(|n| only.is_none_or(|o| o == n)))
            .collect();
        let expected = printed.iter().flatten().count();
        if let Some(o) = only
            && expected == 0
        {
            return Err(SqlError::UnknownQuery(format!(
                "{source_name}: no query named {o}"
            )));
        }
        let io = |source| SqlError::Io {
            path: PathBuf::from("(standard output)"),
            source,
        };
        let mut sink = output::Sink::new(out, format, max_rows, expected);
        let mut results = Vec::with_capacity(expected);
        for (s, name) in statements.iter().zip(&printed) {
            let err = |e| self.error(source_name, s.line, e);
            match name {
                Some(name) => {
                    let mut stmt = self.conn.prepare(&s.sql).map_err(err)?;
                    let stream = stmt.stream_arrow([]).map_err(err)?;
                    let schema = stream.get_schema();
                    drop(stream);
                    sink.begin(name, schema).map_err(io)?;
                    let mut rows = 0;
                    while let Some(batch) = stmt.step().map_err(err)? {
                        let batch = RecordBatch::from(batch);
                        rows += batch.num_rows() as u64;
                        sink.batch(&batch).map_err(io)?;
                    }
                    sink.end().map_err(io)?;
                    results.push(QueryRows {
                        name: name.clone(),
                        rows,
                    });
                }
                None if s.returns_rows() => {} // another query of --only's file
                None => self.conn.execute_batch(&s.sql).map_err(err)?,
            }
        }
        sink.finish().map_err(io)?;
        Ok(results)
    }

    /// Annotation coverage of the splits with some but not all boards
    /// annotated.
    pub(crate) fn partial_annotation(&self) -> Result<Vec<PartialSplit>, SqlError> {
        let sql = "WITH b AS (SELECT split, count(*) AS n FROM boards GROUP BY split), \
                   s AS (SELECT split, count(*) AS n FROM sv_chosen GROUP BY split), \
                   f AS (SELECT split, count(*) AS n FROM failures GROUP BY split) \
                   SELECT b.split, b.n, coalesce(s.n, 0), coalesce(f.n, 0) FROM b \
                   LEFT JOIN s USING (split) LEFT JOIN f USING (split) \
                   WHERE coalesce(s.n, 0) + coalesce(f.n, 0) < b.n ORDER BY 1";
        let annotated: i64 =
            self.conn
                .query_row("SELECT getvariable('cb_n_state_values')", [], |r| r.get(0))?;
        if annotated == 0 {
            return Ok(Vec::new()); // not annotated at all: nothing partial
        }
        let mut stmt = self.conn.prepare(sql)?;
        let rows = stmt.query_map([], |r| {
            Ok(PartialSplit {
                split: r.get(0)?,
                boards: r.get(1)?,
                annotated: r.get(2)?,
                failed: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table's columns and types as DuckDB binds `views.sql` over
    /// `run` (a view is bound, not run, by DESCRIBE, so a table without
    /// files gives its empty-view columns, not its error).
    fn described(run: &Path) -> Vec<(String, Vec<(String, String)>)> {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "SET VARIABLE run_dir = {};\n{VIEWS_SQL}",
            literal(&run.to_string_lossy())
        ))
        .unwrap();
        Table::ALL
            .iter()
            .map(|t| {
                let mut stmt = conn.prepare(&format!("DESCRIBE {}", t.name())).unwrap();
                let columns = stmt
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                    .unwrap()
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                (t.name().to_owned(), columns)
            })
            .collect()
    }

    /// A run without any table's files reads, through `views.sql`'s empty
    /// views, with the columns and types the same views give once each
    /// table has a file written with `store::schema`'s schema: the column
    /// lists written out in views.sql agree with the schema.
    #[test]
    fn empty_views_have_the_written_tables_columns() {
        let empty = tempfile::tempdir().unwrap();
        let written = tempfile::tempdir().unwrap();
        for table in Table::ALL {
            let dir = written.path().join(partition_dir(table, "train"));
            fs::create_dir_all(&dir).unwrap();
            let file = fs::File::create(dir.join("part-00000.parquet")).unwrap();
            let mut w = parquet::arrow::ArrowWriter::try_new(file, table.schema(), None).unwrap();
            w.write(&RecordBatch::new_empty(table.schema())).unwrap();
            w.close().unwrap();
        }
        // The hint for a dropped view is the one views.sql gives that table.
        for (table, hint) in REQUIRED {
            let at = VIEWS_SQL
                .find(&format!("VIEW {table} AS"))
                .unwrap_or_else(|| panic!("views.sql has no view {table}"));
            let view = &VIEWS_SQL[at..];
            let view = &view[..view.find(";\n").unwrap_or(view.len())];
            assert!(
                view.contains(hint),
                "{table}: {hint:?} is not views.sql's hint"
            );
        }
        let (empty, written) = (described(empty.path()), described(written.path()));
        for (table, ((name, columns), (_, expected))) in
            Table::ALL.iter().zip(empty.iter().zip(&written))
        {
            assert_eq!(columns, expected, "{name}: views.sql's empty view");
            assert_eq!(
                expected.len(),
                table.schema().fields().len() + 1,
                "{name}: the schema's columns and split"
            );
        }
    }

    /// views.sql's label-source macros agree with `store::source`: each
    /// source's chunk files read as its name, its rows under its own
    /// `label_source` and in its order of precedence; and `sv_chosen` /
    /// `av_chosen` choose, for every `label_source`, the rows the training
    /// loader reads ([`LabelSource::reads`], and under `both` no row of a
    /// board that a later source labels).
    #[test]
    fn views_choose_label_sources_as_the_loader_does() {
        use crate::store::{LabelSource, Source, ValueSource};
        let run = tempfile::tempdir().unwrap();
        // (file, boards): boards 2 and 3 have values from two sources.
        let files: Vec<(String, Vec<u64>)> = vec![
            (
                format!("{}00000000.parquet", Source::Stockfish.stem()),
                vec![1, 2, 3],
            ),
            (
                format!("{}00000000.parquet", Source::LichessEvals.stem()),
                vec![2, 3, 4],
            ),
            ("part-00000.parquet".to_owned(), vec![2, 5]),
        ];
        let conn = Connection::open_in_memory().unwrap();
        // The value columns views.sql's record views bind (values arbitrary).
        let values = "0.5 AS win_prob, NULL::INTEGER AS cp, NULL::INTEGER AS mate, \
                      0::USMALLINT AS depth, 0::UBIGINT AS nodes, 0::UINTEGER AS time_ms";
        for (table, columns) in [
            (
                Table::StateValues,
                "'full' AS kind, 0::USMALLINT AS best_action",
            ),
            (Table::ActionValues, "0::USMALLINT AS action"),
        ] {
            let dir = run.path().join(partition_dir(table, "train"));
            fs::create_dir_all(&dir).unwrap();
            for (file, boards) in &files {
                let ids: Vec<String> = boards.iter().map(|b| format!("({b})")).collect();
                conn.execute_batch(&format!(
                    "COPY (SELECT b::UBIGINT AS board_id, {columns}, {values} FROM (VALUES {}) t(b)) TO {} (FORMAT parquet)",
                    ids.join(", "),
                    literal(&dir.join(file).to_string_lossy())
                ))
                .unwrap();
            }
        }
        conn.execute_batch(&format!(
            "SET VARIABLE run_dir = {};\n{VIEWS_SQL}",
            literal(&run.path().to_string_lossy())
        ))
        .unwrap();
        let text = |sql: &str| -> String { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        for (i, source) in Source::ALL.into_iter().enumerate() {
            let file = format!("{}00000007.parquet", source.stem());
            assert_eq!(
                text(&format!("SELECT cb_source_of_file('{file}')")),
                source.name()
            );
            assert_eq!(
                text(&format!("SELECT cb_label_of('{source}')")),
                source.name()
            );
            let precedence: i64 = conn
                .query_row(&format!("SELECT cb_precedence('{source}')"), [], |r| {
                    r.get(0)
                })
                .unwrap();
            assert_eq!(precedence, i as i64, "{source}");
        }
        assert_eq!(
            text("SELECT cb_source_of_file('part-00000.parquet')"),
            ValueSource::Bag.name()
        );
        assert_eq!(
            text(&format!(
                "SELECT cb_label_of('{}')",
                ValueSource::Bag.name()
            )),
            Source::of_file("part-00000.parquet").name()
        );
        let choices = <LabelSource as clap::ValueEnum>::value_variants();
        for &choice in choices {
            let mut expected: Vec<(u64, String)> = Vec::new();
            for (file, boards) in &files {
                let source = Source::of_file(file);
                if !choice.reads(source) {
                    continue;
                }
                let overriding: Vec<u64> = files
                    .iter()
                    .filter(|(f, _)| source.overridden_by().any(|s| s == Source::of_file(f)))
                    .flat_map(|(_, b)| b.iter().copied())
                    .collect();
                let value = text(&format!("SELECT cb_source_of_file('{file}')"));
                for &b in boards {
                    if choice != LabelSource::Both || !overriding.contains(&b) {
                        expected.push((b, value.clone()));
                    }
                }
            }
            expected.sort();
            conn.execute_batch(&format!("SET VARIABLE label_source = '{choice}'"))
                .unwrap();
            for view in ["sv_chosen", "av_chosen"] {
                let mut stmt = conn
                    .prepare(&format!("SELECT board_id, source FROM {view} ORDER BY ALL"))
                    .unwrap();
                let got: Vec<(u64, String)> = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                assert_eq!(got, expected, "{view} under label_source {choice}");
            }
        }
        let names: Vec<&str> = choices.iter().map(|c| c.name()).collect();
        let (last, rest) = names.split_last().unwrap();
        conn.execute_batch("SET VARIABLE label_source = 'bag'")
            .unwrap();
        let err = conn
            .query_row("SELECT count(*) FROM sv_chosen", [], |r| r.get::<_, i64>(0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "label_source must be {} or {last}, not bag",
                rest.join(", ")
            )),
            "{err}"
        );
    }
}
