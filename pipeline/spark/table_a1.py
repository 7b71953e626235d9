#!/usr/bin/env python3
"""Table A1 of a chessbench run, computed by Spark SQL.

Reads a run's Parquet tables where chessbench wrote them, on any file
system Spark reads (a local path, file://, hdfs://, s3a://, gs://, abfss://):

    spark-submit pipeline/spark/table_a1.py RUN_URI [--json]
    python pipeline/spark/table_a1.py RUN_URI [--json]      (pyspark installed; local mode)

and prints the numbers `chessbench sql RUN table_a1` prints, per split, the
same columns (as BIGINT). The query is pipeline/spark/table_a1.sql.

Layout: RUN/TABLE/split=NAME/*.parquet. Only committed files are read: a
commit in progress leaves *.parquet.tmp files, which the *.parquet pattern
never matches. Each table with committed files is registered as a
temporary view of its name (games, rejects, boards, legal_moves,
state_values, action_values, failures; all splits, with a string `split`
column from the hive partition), beside the query's own inputs
(cb_listing, cb_parquet_rows); `--sql FILE` runs another Spark SQL query
against the same views. Files are listed through Hadoop's FileSystem, so
the same command works on a cluster reading shared or object storage.

In cluster deploy mode ship the query with the script:
    spark-submit --deploy-mode cluster --files pipeline/spark/table_a1.sql \
        pipeline/spark/table_a1.py s3a://bucket/runs/paper
"""

import argparse
import json
import os
import re
import sys

TABLES = ("games", "rejects", "boards", "legal_moves", "state_values", "action_values", "failures")
# RUN/TABLE/split=NAME/FILE.parquet, as Hadoop prints a path.
FILE_RE = re.compile(r"([^/]+)/split=([^/]+)/([^/]+)$")
QUERY = "table_a1.sql"


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Table A1 of a chessbench run by Spark SQL (the numbers of `chessbench sql RUN table_a1`).")
    p.add_argument("run", metavar="RUN_URI",
                   help="run directory: a path, or a Hadoop URI (file://, hdfs://, s3a://, ...)")
    p.add_argument("--json", action="store_true",
                   help="print the rows as a JSON array of objects (as `chessbench sql --format json`)")
    p.add_argument("--sql", metavar="FILE",
                   help=f"run this Spark SQL query against the views instead of {QUERY}")
    p.add_argument("--log-level", default=os.environ.get("SPARK_LOG_LEVEL", "WARN"),
                   help="Spark's log level once started (default: WARN, or $SPARK_LOG_LEVEL)")
    return p.parse_args(argv)


def query_text(spark, path):
    """The query's text: FILE, else table_a1.sql beside this script or shipped with --files."""
    candidates = [path] if path else [os.path.join(os.path.dirname(os.path.abspath(__file__)), QUERY)]
    if not path:
        from pyspark import SparkFiles
        try:
            candidates.append(SparkFiles.get(QUERY))
        except Exception:  # no SparkFiles directory: nothing was shipped
            pass
    for candidate in candidates:
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                return f.read().strip().rstrip(";")
    sys.exit(f"chessbench: query file not found: {candidates[0]}")


def register_views(spark, run):
    """Registers the run's tables and the query's inputs; returns the tables that have files."""
    from pyspark.errors import AnalysisException
    from pyspark.sql.types import StructType

    committed = f"{run}/*/split=*/*.parquet"
    try:
        # binaryFile's path and length come from the listing; `content` is
        # never selected, so no file is read.
        listing = (spark.read.format("binaryFile").option("pathGlobFilter", "*.parquet")
                   .load(committed).select("path", "length"))
    except AnalysisException as e:
        if "PATH_NOT_FOUND" in str(e):
            sys.exit(f"chessbench: no Parquet tables in run {run} (nothing matches {committed})")
        raise
    present = set()
    for f in listing.inputFiles():
        m = FILE_RE.search(f)
        if m:
            present.add(m.group(1))
    listing.createOrReplaceTempView("cb_listing")
    # Every row of every committed file, no column: the schema is empty, so
    # only the footers' row groups are touched.
    (spark.read.schema(StructType([])).option("pathGlobFilter", "*.parquet").parquet(committed)
     .selectExpr("_metadata.file_path AS path").createOrReplaceTempView("cb_parquet_rows"))

    for table in TABLES:
        if table not in present:
            continue
        (spark.read.option("basePath", f"{run}/{table}").option("pathGlobFilter", "*.parquet")
         .parquet(f"{run}/{table}/split=*").createOrReplaceTempView(table))
    if "boards" not in present:
        sys.exit(f"chessbench: table boards has no Parquet files in run {run} "
                 "(not ingested: run `chessbench ingest RUN INPUT` first)")
    return present


def quiet_glob_warnings(spark):
    """Spark warns, with a stack trace, that a glob path has no streaming
    metadata directory (`_spark_metadata`); every read here is a glob."""
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.sql.execution.streaming.FileStreamSink",
            jvm.org.apache.logging.log4j.Level.ERROR)
    except Exception:  # Spark Connect, or another logging backend: only noise is lost
        pass


def print_table(columns, rows):
    cells = [[str(r[c]) if r[c] is not None else "NULL" for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[c], int) or r[c] is None for r in rows) for c in columns]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    print(line(columns))
    print(line(["-" * w for w in widths]))
    for row in cells:
        print(line(row))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    run = args.run.rstrip("/") or "/"

    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.appName("chessbench-table-a1")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel(args.log_level)
    quiet_glob_warnings(spark)
    # `split` is a string, whatever the split's name looks like (hive_types
    # = {'split': VARCHAR} in sql/views.sql).
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
    try:
        register_views(spark, run)
        df = spark.sql(query_text(spark, args.sql))
        columns = df.columns
        rows = [r.asDict() for r in df.collect()]
    finally:
        spark.stop()

    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print_table(columns, rows)


if __name__ == "__main__":
    main()
