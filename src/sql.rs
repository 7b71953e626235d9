//! `chessbench sql`: DuckDB SQL over a run directory's tables, with the
//! views of `sql/views.sql` preloaded (the session itself is the
//! [`crate::duckdb_session`] foundation's).

use std::path::PathBuf;

use serde::Serialize;

pub use crate::duckdb_session::{BUILTIN, MEMORY, SqlError, output::Format};
use crate::duckdb_session::{PartialSplit, QueryRows, Session, query_text};

/// `chessbench sql --help`'s long text: the views, the built-in queries
/// from [`BUILTIN`] with what each gives, and examples.
pub fn long_about() -> String {
    let builtins = BUILTIN
        .iter()
        .filter(|b| b.name != "views")
        .map(|b| format!("{} ({})", b.name, b.about))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "Run DuckDB SQL against a run directory. The views of sql/views.sql are preloaded: \
games, rejects, boards, legal_moves, state_values, action_values, failures (all splits, with a \
`split` column), board_phases, and ChessBench's record sets sv_records, bc_records and \
av_records (of the values the variable label_source chooses: stockfish, the default; \
lichess_evals; both).\n\n\
QUERY is a SQL file or one of the built-in files of sql/ by name: {builtins}. Each query in a \
file prints as its own result, named by a `-- @name NAME` comment.\n\n\
Examples:\n\
chessbench sql runs/demo table_a1\n\
chessbench sql runs/demo -e \"SELECT split, avg(win_prob) FROM sv_records GROUP BY ALL\"\n\
chessbench sql runs/demo sampling --only sampling_weights --format csv > weights.csv\n\n\
The same SQL runs in the DuckDB CLI or Python duckdb (DuckDB 1.5):\n\
duckdb -c \"SET VARIABLE run_dir = 'runs/demo'; .read sql/views.sql; .read sql/table_a1.sql\""
    )
}

/// `chessbench sql`'s options (command line only).
#[derive(Debug, Clone, clap::Args)]
pub struct SqlOptions {
    /// Run directory.
    #[arg(value_name = "RUN_DIR", value_hint = clap::ValueHint::DirPath)]
    pub run: PathBuf,
    #[arg(
        value_name = "QUERY",
        help = format!(
            "A SQL file, or a built-in query: {}",
            crate::store::sql_files::builtin_names()
        ),
        required_unless_present = "execute",
        conflicts_with = "execute"
    )]
    pub query: Option<String>,
    /// Run this SQL instead of a file.
    #[arg(short = 'e', long = "execute", value_name = "SQL")]
    pub execute: Option<String>,
    /// Output format (--json is --format json).
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Print only the result of the query named NAME (`-- @name NAME`).
    #[arg(long, value_name = "NAME")]
    pub only: Option<String>,
    /// Rows shown per result in table and markdown output (0: all).
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub max_rows: usize,
    /// Set a DuckDB variable before the query (getvariable('NAME')), e.g.
    /// --var test_split=holdout. Repeatable.
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_variable)]
    pub vars: Vec<(String, String)>,
    /// No notes on standard error (e.g. about partially annotated splits).
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub budget: crate::options::Budget,
}

/// `chessbench sql`'s options resolved: the query's text read and the run
/// opened in a DuckDB session with its views.
pub struct SqlConfig {
    /// The query's name in messages: its file, built-in name, or `-e`.
    source_name: String,
    text: String,
    session: Session,
    only: Option<String>,
    format: Format,
    max_rows: usize,
    quiet: bool,
}

impl SqlOptions {
    /// Reads the query and opens the run: an unknown query or a directory
    /// that is not a run fails here.
    pub fn resolve(&self) -> Result<SqlConfig, SqlError> {
        let (source_name, text) = match (&self.query, &self.execute) {
            (_, Some(sql)) => ("-e".to_owned(), sql.clone()),
            (Some(q), None) => query_text(q)?,
            (None, None) => return Err(SqlError::NoQuery),
        };
        Ok(SqlConfig {
            source_name,
            text,
            session: Session::open(&self.run, &self.vars, self.budget.bytes())?,
            only: self.only.clone(),
            format: self.format,
            max_rows: self.max_rows,
            quiet: self.quiet,
        })
    }
}

/// What `chessbench sql` ran: each printed result's rows, and the splits
/// whose annotation is partial (its notes, none with `--quiet`).
#[derive(Debug, Clone, Serialize)]
pub struct SqlSummary {
    /// The query's name in messages: its file, built-in name, or `-e`.
    pub source: String,
    pub results: Vec<QueryRows>,
    pub partial: Vec<PartialSplit>,
}

impl SqlSummary {
    /// What a person should know about the results (printed on standard
    /// error as `note: ...`): which splits they cover only in part.
    pub fn notes(&self) -> Vec<String> {
        self.partial.iter().map(ToString::to_string).collect()
    }
}

/// Runs `chessbench sql`: the query's results on `out`. The summary holds
/// the rows of each result and the notes about partially annotated splits.
pub fn run(config: &SqlConfig, out: &mut dyn std::io::Write) -> Result<SqlSummary, SqlError> {
    let session = &config.session;
    let partial = if config.quiet {
        Vec::new()
    } else {
        session.partial_annotation()?
    };
    // Block-buffered: standard output is line-buffered, one write(2) a row.
    let mut out = std::io::BufWriter::with_capacity(256 << 10, out);
    let results = session.run_script(
        &config.source_name,
        &config.text,
        config.only.as_deref(),
        config.format,
        config.max_rows,
        &mut out,
    )?;
    Ok(SqlSummary {
        source: config.source_name.clone(),
        results,
        partial,
    })
}

/// Parses `NAME=VALUE`.
fn parse_variable(s: &str) -> Result<(String, String), SqlError> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| SqlError::BadVariable(s.to_owned()))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(SqlError::BadVariable(s.to_owned()));
    }
    Ok((name.to_owned(), value.to_owned()))
}
