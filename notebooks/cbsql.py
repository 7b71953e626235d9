"""Run the chessbench DuckDB SQL files (``sql/*.sql``) from Python.

    import cbsql
    con = cbsql.connect("runs/demo")            # views.sql loaded
    res = cbsql.run_file(con, "dataset_stats")  # {"figure_a1_action_values": DataFrame, ...}

Each query in a file is preceded by a comment line ``-- @name NAME``; results
are keyed by that name (``result_N`` for the N-th statement, counting from 0,
when it has none). Statements are split with DuckDB's own parser, never on
``;`` (comments may contain semicolons).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import duckdb
import polars as pl

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"

_NAME = re.compile(r"^\s*--\s*@name\s+(\S+)", re.MULTILINE)
_ROWS = duckdb.ExpectedResultType.QUERY_RESULT
_CHANGED = duckdb.ExpectedResultType.CHANGED_ROWS


def connect(run_dir: str | os.PathLike, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with ``sql/views.sql`` loaded for ``run_dir``.

    Views over tables without Parquet files raise ``chessbench: table ...``
    when queried (rejects and failures are empty instead). Re-run
    ``run_file(con, "views")`` after a pipeline stage adds tables.
    """
    con = duckdb.connect(database)
    con.execute("SET VARIABLE run_dir = ?", [os.path.abspath(run_dir)])
    run_file(con, "views")
    return con


def run_file(
    con: duckdb.DuckDBPyConnection, name: str, only: Iterable[str] | None = None
) -> dict[str, pl.DataFrame]:
    """Runs every statement of ``sql/NAME.sql`` in order.

    Returns the results of the statements that return rows, as polars
    DataFrames keyed by their ``-- @name`` (fallback ``result_N``); the other
    statements (SET, CREATE ...) are only executed. With ``only``, row-returning
    statements whose key is not listed are skipped (e.g. to leave out queries
    over tables a run does not have yet).
    """
    wanted = None if only is None else set(only)
    text = (SQL_DIR / f"{name}.sql").read_text()
    results: dict[str, pl.DataFrame] = {}
    for i, stmt in enumerate(con.extract_statements(text)):
        kinds = stmt.expected_result_type
        if _ROWS not in kinds or _CHANGED in kinds:  # SET, CREATE, INSERT ...
            con.execute(stmt)
            continue
        names = _NAME.findall(stmt.query)  # the statement's leading comments
        key = names[-1] if names else f"result_{i}"
        if wanted is None or key in wanted:
            results[key] = con.execute(stmt).pl()
    return results
