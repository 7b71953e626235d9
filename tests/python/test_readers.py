"""A run directory's Parquet tables, read by three independent readers.

    python3 tests/python/test_readers.py RUN_DIR

For every table of schemas/v1 with files under RUN_DIR/TABLE/split=NAME/
(tables without files, e.g. failures of a run that had none, are skipped
with a note):

1. Schema: column names, order and types match schemas/v1/TABLE.json, in the
   Arrow schema the writer embedded (ARROW:schema), as pyarrow.dataset reads
   the files (hive partitioning), as polars reads them and as DuckDB reads
   them; the `split` partition column comes last. Non-nullable columns of
   the JSON are non-nullable in every file; all files of a table have one
   schema.
2. Rows per split agree between the Parquet footers, pyarrow.dataset, polars
   and DuckDB (read_parquet with hive_partitioning), and the split values
   are exactly the `split=NAME` directories.
3. Statistics: wherever a table has board_id, every row group of every file
   has min/max statistics for it, with no nulls, equal to the row group's
   actual smallest and largest board_id (the writer keeps chunk statistics
   for board_id on every table; legal_moves keeps them on board_id only, so
   no other column's statistics are asserted).

Needs pyarrow, polars and duckdb; no pytest. Prints one line per table and a
summary; exits 1 if any check failed.
"""

import base64
import json
import sys
import traceback
from collections import Counter
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "v1"
TABLES = ["games", "rejects", "boards", "legal_moves", "state_values", "action_values", "failures"]

# schemas/v1 type name -> (Arrow type as written, Arrow type pyarrow reads,
# polars dtype, DuckDB type). Parquet has no TIME in seconds: arrow-rs writes
# Time32(Second) as a plain INT32 and records the Arrow type only in the
# embedded ARROW:schema, which polars honours and pyarrow and DuckDB do not.
TYPES = {
    "uint8": (pa.uint8(), pa.uint8(), pl.UInt8, "UTINYINT"),
    "uint16": (pa.uint16(), pa.uint16(), pl.UInt16, "USMALLINT"),
    "uint32": (pa.uint32(), pa.uint32(), pl.UInt32, "UINTEGER"),
    "uint64": (pa.uint64(), pa.uint64(), pl.UInt64, "UBIGINT"),
    "int8": (pa.int8(), pa.int8(), pl.Int8, "TINYINT"),
    "int16": (pa.int16(), pa.int16(), pl.Int16, "SMALLINT"),
    "int32": (pa.int32(), pa.int32(), pl.Int32, "INTEGER"),
    "int64": (pa.int64(), pa.int64(), pl.Int64, "BIGINT"),
    "float32": (pa.float32(), pa.float32(), pl.Float32, "FLOAT"),
    "float64": (pa.float64(), pa.float64(), pl.Float64, "DOUBLE"),
    "bool": (pa.bool_(), pa.bool_(), pl.Boolean, "BOOLEAN"),
    "string": (pa.string(), pa.string(), pl.String, "VARCHAR"),
    "date": (pa.date32(), pa.date32(), pl.Date, "DATE"),
    "time_seconds": (pa.time32("s"), pa.int32(), pl.Time, "INTEGER"),
}


def sql_path(run, table):
    # The table's files as a DuckDB string literal's contents.
    return f"{run}/{table}/**/*.parquet".replace("'", "''")


def expected(table):
    spec = json.loads((SCHEMAS / f"{table}.json").read_text())
    assert spec["table"] == table and spec["partitioned_by"] == ["split"], spec["table"]
    for c in spec["columns"]:
        assert c["type"] in TYPES, f"{table}.{c['name']}: unknown schema type {c['type']!r}"
    return spec["columns"]


def embedded_schema(path):
    meta = pq.ParquetFile(path).metadata.metadata or {}
    assert b"ARROW:schema" in meta, f"{path}: no embedded ARROW:schema"
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(meta[b"ARROW:schema"])))


def check_schema(table, run, files, cols):
    names = [c["name"] for c in cols]
    # What the writer meant (embedded Arrow schema) and what each file holds.
    first = pq.read_schema(files[0])
    for f in files:
        emb = embedded_schema(f)
        assert emb.names == names, f"{f}: columns {emb.names} != {names}"
        for c in cols:
            got = emb.field(c["name"]).type
            assert got == TYPES[c["type"]][0], f"{f}: {c['name']} written as {got}, schema says {c['type']}"
        file_schema = pq.read_schema(f)
        assert file_schema.equals(first), f"{f}: schema differs from {files[0]}"
        for c in cols:
            if not c["nullable"]:
                assert not file_schema.field(c["name"]).nullable, f"{f}: {c['name']} nullable, schema says not"

    # pyarrow.dataset with hive partitioning.
    schema = ds.dataset(run / table, format="parquet", partitioning="hive").schema
    assert schema.names == names + ["split"], f"pyarrow columns {schema.names}"
    for c in cols:
        got = schema.field(c["name"]).type
        assert got == TYPES[c["type"]][1], f"pyarrow reads {c['name']} as {got}, schema says {c['type']}"

    # polars.
    pschema = pl.scan_parquet(f"{run}/{table}/**/*.parquet", hive_partitioning=True).collect_schema()
    assert list(pschema.names()) == names + ["split"], f"polars columns {pschema.names()}"
    for c in cols:
        got = pschema[c["name"]]
        assert got == TYPES[c["type"]][2], f"polars reads {c['name']} as {got}, schema says {c['type']}"
    assert pschema["split"] == pl.String, f"polars reads split as {pschema['split']}"

    # DuckDB.
    rows = duckdb.sql(
        f"DESCRIBE SELECT * FROM read_parquet('{sql_path(run, table)}', hive_partitioning = true)"
    ).fetchall()
    got = [(r[0], r[1]) for r in rows]
    want = [(c["name"], TYPES[c["type"]][3]) for c in cols] + [("split", "VARCHAR")]
    assert got == want, f"DuckDB reads {got}, want {want}"

    # Columns the files declare non-null although the JSON allows nulls
    # (stricter is fine: the JSON also covers other writers, e.g. bag import).
    return [c["name"] for c in cols if c["nullable"] and not first.field(c["name"]).nullable]


def check_counts(table, run, files):
    dirs = Counter()
    for f in files:
        name = f.parent.name
        assert name.startswith("split="), f"{f}: not under split=NAME/"
        dirs[name[len("split="):]] += pq.ParquetFile(f).metadata.num_rows
    footer = dict(dirs)

    dataset = ds.dataset(run / table, format="parquet", partitioning="hive")
    t = dataset.to_table(columns=["split"])
    by_pyarrow = {str(k): v for k, v in Counter(t.column("split").to_pylist()).items()}
    assert dataset.count_rows() == sum(footer.values())

    by_polars = dict(
        pl.scan_parquet(f"{run}/{table}/**/*.parquet", hive_partitioning=True)
        .group_by("split")
        .len()
        .collect()
        .iter_rows()
    )
    by_duckdb = dict(
        duckdb.sql(
            f"SELECT split, count(*) FROM read_parquet('{sql_path(run, table)}', "
            "hive_partitioning = true) GROUP BY split"
        ).fetchall()
    )
    # Directories whose files are all empty have no split value to read back.
    nonempty = {k: v for k, v in footer.items() if v}
    assert by_pyarrow == nonempty, f"pyarrow {by_pyarrow} != footers {nonempty}"
    assert by_polars == nonempty, f"polars {by_polars} != footers {nonempty}"
    assert by_duckdb == nonempty, f"DuckDB {by_duckdb} != footers {nonempty}"
    return footer


def check_board_id_stats(files):
    groups = 0
    for f in files:
        pf = pq.ParquetFile(f)
        md = pf.metadata
        j = pf.schema_arrow.get_field_index("board_id")
        for i in range(md.num_row_groups):
            col = md.row_group(i).column(j)
            assert col.path_in_schema == "board_id"
            st = col.statistics
            where = f"{f} row group {i}"
            assert st is not None and st.has_min_max, f"{where}: no min/max for board_id"
            assert st.null_count == 0, f"{where}: board_id null_count {st.null_count}"
            ids = pf.read_row_group(i, columns=["board_id"]).column(0)
            mm = pc.min_max(ids)
            assert (st.min, st.max) == (mm["min"].as_py(), mm["max"].as_py()), (
                f"{where}: statistics {st.min}..{st.max}, data {mm['min']}..{mm['max']}"
            )
            groups += 1
    return groups


def with_stats(files):
    # Columns with min/max in every row group (informational).
    have = None
    for f in files:
        md = pq.ParquetFile(f).metadata
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            s = {
                rg.column(j).path_in_schema
                for j in range(rg.num_columns)
                if rg.column(j).statistics is not None and rg.column(j).statistics.has_min_max
            }
            have = s if have is None else have & s
    return sorted(have or [])


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    run = Path(argv[1]).resolve()
    if not run.is_dir():
        print(f"no run directory {run}", file=sys.stderr)
        return 2
    passed, failed = 0, []

    def check(what, fn, *args):
        nonlocal passed
        try:
            out = fn(*args)
            passed += 1
            return out
        except Exception as e:  # a failed assert, or a reader refusing the files
            failed.append(what)
            print(f"FAIL {what}: {type(e).__name__}: {e}")
            if not isinstance(e, AssertionError):
                traceback.print_exc()
            return None

    for table in TABLES:
        files = sorted((run / table).glob("split=*/*.parquet"))
        if not files:
            print(f"skip {table}: no Parquet files")
            continue
        cols = check(f"{table}: schemas/v1/{table}.json", expected, table)
        if cols is None:
            continue
        stricter = check(f"{table}: schema", check_schema, table, run, files, cols)
        counts = check(f"{table}: rows per split", check_counts, table, run, files)
        groups = None
        if any(c["name"] == "board_id" for c in cols):
            groups = check(f"{table}: board_id statistics", check_board_id_stats, files)
        bad = any(w.startswith(f"{table}:") for w in failed)
        line = f"{'FAIL' if bad else 'ok  '} {table}: {len(files)} files"
        if counts is not None:
            line += ", rows " + ", ".join(f"{k}={v:,}" for k, v in sorted(counts.items()))
        if groups is not None:
            line += f"; board_id min/max in all {groups} row groups"
        print(line)
        print(f"       min/max statistics everywhere on: {', '.join(with_stats(files)) or '(none)'}")
        if stricter:
            print(f"       non-null in the files, nullable in the schema: {', '.join(stricter)}")

    print(f"{passed} checks passed, {len(failed)} failed" + (f": {'; '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
