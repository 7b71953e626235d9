"""A run's tables in DuckDB, with the views and built-in queries of
``chessbench sql`` (the SQL files ship inside the native module, so they are
the very text the binary runs)."""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Iterable, Optional

from . import _chessbench
from ._chessbench import ChessbenchError

_SQL = dict(_chessbench.sql_files())
_NAME = re.compile(r"^\s*--\s*@name\s+(\S+)", re.MULTILINE)
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: The run's tables and the ChessBench record sets, as views.
TABLES = (
    "games",
    "rejects",
    "boards",
    "legal_moves",
    "state_values",
    "action_values",
    "failures",
    "sv_records",
    "bc_records",
    "av_records",
)


def _duckdb():
    try:
        import duckdb
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ChessbenchError(
            "chessbench.open needs the duckdb package: pip install 'chessbench[sql]' (or duckdb pyarrow)"
        ) from e
    return duckdb


class Run:
    """A run directory opened in DuckDB: ``chessbench sql``'s session.

    Attribute access falls through to the DuckDB connection (``run.sql(...)``,
    ``run.execute(...)``), so a ``Run`` is used as the connection itself;
    ``run.con`` is that connection.
    """

    def __init__(self, path: str, con: Any, variables: Dict[str, str]) -> None:
        self.path = path
        self.con = con
        self.variables = variables

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)

    def reload(self) -> None:
        """Re-reads ``views.sql``: views are bound when read, so a table a
        stage added since ``open`` appears only after this."""
        _execute_script(self.con, _SQL["views"])

    def query(self, name: str, only: Optional[Iterable[str]] = None) -> Dict[str, Any]:
        """Runs a built-in query (``table_a1``, ``dataset_stats``, ``overlap``,
        ``sampling``, ``training``, ``ablations``, ``label_sources``) or a SQL
        file, statement by statement, as ``chessbench sql RUN NAME`` does.

        Returns each row-returning statement's result as a ``pyarrow.Table``
        keyed by its ``-- @name`` (``result_N`` without one); with ``only``,
        just those.
        """
        key = name[4:] if name.startswith("sql/") else name
        key = key[:-4] if key.endswith(".sql") else key
        if key in _SQL:
            text = _SQL[key]
        elif os.path.isfile(name):
            with open(name, encoding="utf-8") as f:
                text = f.read()
        else:
            raise ChessbenchError(
                f"{name!r} is neither a SQL file nor a built-in query (built-ins: {', '.join(_SQL)})"
            )
        return _execute_script(self.con, text, only)

    def arrow(self, table: str, where: str = "") -> Any:
        """A table or record-set view as a ``pyarrow.Table`` (``where``: an
        optional SQL condition, e.g. ``"split = 'test'"``)."""
        return _arrow_table(self._relation(table, where))

    def batches(self, table: str, where: str = "", rows_per_batch: int = 1 << 16) -> Any:
        """A table streamed as a ``pyarrow.RecordBatchReader`` (constant
        memory for tables larger than RAM)."""
        relation = self._relation(table, where)
        if hasattr(relation, "to_arrow_reader"):
            return relation.to_arrow_reader(rows_per_batch)
        return relation.fetch_arrow_reader(rows_per_batch)

    def polars(self, table: str, where: str = "") -> Any:
        """A table or record-set view as a polars DataFrame."""
        return self._relation(table, where).pl()

    def _relation(self, table: str, where: str) -> Any:
        if table not in TABLES:
            raise ChessbenchError(f"unknown table {table!r}: expected one of {', '.join(TABLES)}")
        sql = f"SELECT * FROM {table}" + (f" WHERE {where}" if where else "")
        return self.con.sql(sql)

    def __repr__(self) -> str:
        return f"chessbench.Run({self.path!r})"


def _arrow_table(result: Any) -> Any:
    """A DuckDB result as a ``pyarrow.Table`` (``arrow()`` gives a table in
    older duckdb releases, a ``RecordBatchReader`` in newer ones)."""
    if hasattr(result, "to_arrow_table"):
        return result.to_arrow_table()
    table = result.arrow()
    return table.read_all() if hasattr(table, "read_all") else table


def _execute_script(con: Any, text: str, only: Optional[Iterable[str]] = None) -> Dict[str, Any]:
    duckdb = _duckdb()
    rows = duckdb.ExpectedResultType.QUERY_RESULT
    changed = duckdb.ExpectedResultType.CHANGED_ROWS
    wanted = None if only is None else set(only)
    results: Dict[str, Any] = {}
    for i, stmt in enumerate(con.extract_statements(text)):
        kinds = stmt.expected_result_type
        if rows not in kinds or changed in kinds:  # SET, CREATE, ...
            con.execute(stmt)
            continue
        names = _NAME.findall(stmt.query)
        key = names[-1] if names else f"result_{i}"
        if wanted is None or key in wanted:
            results[key] = _arrow_table(con.execute(stmt))
    return results


def open(run: "str | os.PathLike[str]", label_source: Optional[str] = None, **variables: str) -> Run:
    """Opens a run directory in an in-memory DuckDB with ``sql/views.sql``
    loaded: the tables and record sets as views, as ``chessbench sql RUN``.

    ``label_source`` (``stockfish``, ``lichess_evals``, ``both``) chooses the
    values of the record views, and ``variables`` set more SQL variables, as
    ``--var NAME=VALUE`` does. Raises ``ChessbenchError`` if ``run`` is not a
    run directory.
    """
    path = os.path.abspath(os.fspath(run))
    _chessbench.check_run(path)
    duckdb = _duckdb()
    if label_source is not None:
        variables = dict(variables, label_source=label_source)
    for name in variables:
        if not _VARIABLE.match(name):
            raise ChessbenchError(
                f"variable {name!r}: expected a name made of letters, digits and _"
            )
    con = duckdb.connect()
    con.execute("SET VARIABLE run_dir = ?", [path])
    for name, value in variables.items():
        con.execute(f"SET VARIABLE {name} = ?", [str(value)])
    _execute_script(con, _SQL["views"])
    return Run(path, con, {k: str(v) for k, v in variables.items()})
