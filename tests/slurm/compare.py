#!/usr/bin/env python3
"""Checks that two runs hold the same results, for the cluster tests.

  compare.py annotate BIN RUN REFERENCE
      The annotation of RUN (sharded, faulted, resumed) against REFERENCE
      (one unsharded process): the same counts per split (`chessbench
      stats`), the same chunk files, the same (board id) and (board id,
      action) keys, each once, and the same values (win_prob, cp, mate);
      `time_ms` and the search statistics are not part of the result.
  compare.py ablate RUN REFERENCE GRID_NAME
      An ablation grid's results: the same rows, every column but times
      (paths inside them taken relative to their run), none failed, and
      both reports written.

Prints one line per check; exits 1 if any fails. Needs duckdb (Python).
"""

import glob
import json
import os
import subprocess
import sys

import duckdb

failed = []


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failed.append(what)


def annotate(bin_, run, ref):
    stats = {}
    for name, path in (("run", run), ("reference", ref)):
        out = subprocess.run([bin_, "stats", path, "--json"], check=True,
                             capture_output=True, text=True).stdout
        stats[name] = json.loads(out)["splits"]
    a, b = stats["run"], stats["reference"]
    check(sorted(a) == sorted(b), f"same splits: {sorted(a)}")
    for split in sorted(set(a) & set(b)):
        for key in ("state_values", "action_values", "failures"):
            check(a[split][key] == b[split][key],
                  f"{split}: {key} {a[split][key]} == {b[split][key]} (reference)")
        check(a[split]["state_values"] > 0, f"{split}: annotated some boards")

    def files(root):
        out = set()
        for table in ("state_values", "action_values", "failures", "annotate"):
            for d, _, names in os.walk(os.path.join(root, table)):
                for n in names:
                    if n.startswith("chunk-"):
                        out.add(os.path.relpath(os.path.join(d, n), root))
        return out

    fa, fb = files(run), files(ref)
    check(fa == fb, f"same chunk files ({len(fa)}): only in run {sorted(fa - fb)[:5]}, "
          f"only in the reference {sorted(fb - fa)[:5]}")
    leftovers = [p for p in glob.glob(os.path.join(run, "*", "split=*", "*.tmp"))]
    check(not leftovers, f"no temporary files left ({leftovers[:3]})")

    con = duckdb.connect()

    def pattern(root, table):
        return os.path.join(root, table, "split=*", "*.parquet")

    def diff(table, key, cols):
        sel = ", ".join(["split"] + key + cols)
        q = f"""
            WITH a AS (SELECT {sel} FROM read_parquet('{pattern(run, table)}', hive_partitioning = true)),
                 b AS (SELECT {sel} FROM read_parquet('{pattern(ref, table)}', hive_partitioning = true))
            SELECT (SELECT count(*) FROM (SELECT * FROM a EXCEPT ALL SELECT * FROM b)),
                   (SELECT count(*) FROM (SELECT * FROM b EXCEPT ALL SELECT * FROM a)),
                   (SELECT count(*) FROM a),
                   (SELECT count(*) FROM (SELECT DISTINCT {', '.join(['split'] + key)} FROM a))
        """
        return con.execute(q).fetchone()

    for table, key in (("state_values", ["board_id"]),
                       ("action_values", ["board_id", "action"]),
                       ("failures", ["board_id"])):
        has_a, has_b = glob.glob(pattern(run, table)), glob.glob(pattern(ref, table))
        if not has_a and not has_b:
            check(True, f"{table}: no files in either run")
            continue
        check(bool(has_a) == bool(has_b), f"{table}: files in both runs or neither")
        if not (has_a and has_b):
            continue
        only_a, only_b, rows, distinct = diff(table, key, [])
        check(only_a == 0 and only_b == 0,
              f"{table}: same ({', '.join(key)}) keys ({rows} rows; {only_a} only in run, "
              f"{only_b} only in the reference)")
        check(distinct == rows, f"{table}: each key once ({distinct} distinct of {rows})")
        if table == "failures":
            continue
        for cols in (["win_prob"], ["cp", "mate"]):
            only_a, _, _, _ = diff(table, key, cols)
            check(only_a == 0, f"{table}: identical {'/'.join(cols)} ({only_a} rows differ)")


def ablate(run, ref, grid):
    con = duckdb.connect()
    for name, root in (("run", run), ("reference", ref)):
        results = os.path.join(root, "ablate", grid, "results")
        files = glob.glob(os.path.join(results, "**", "*.parquet"), recursive=True)
        check(bool(files), f"{name}: results written ({len(files)} files)")
        report = os.path.join(root, "ablate", grid, "report.md")
        check(os.path.isfile(report) and os.path.getsize(report) > 0, f"{name}: report.md written")
        if not files:
            return
        # Paths inside the rows name their run: compared relative to it.
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet({files!r}, union_by_name = true)")
        for col, kind in con.execute(f"SELECT column_name, data_type FROM information_schema.columns "
                                     f"WHERE table_name = '{name}'").fetchall():
            if kind == "VARCHAR":
                con.execute(f'UPDATE {name} SET "{col}" = replace("{col}", ?, \'RUN\')', [root])
    cols = [c for (c,) in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'run' "
        "INTERSECT SELECT column_name FROM information_schema.columns WHERE table_name = 'reference'"
    ).fetchall()]
    timing = ("second", "time", "_at", "per_s", "elapsed", "started", "finished")
    cols = sorted(c for c in cols if not any(t in c for t in timing))
    n_a = con.execute("SELECT count(*) FROM run").fetchone()[0]
    n_b = con.execute("SELECT count(*) FROM reference").fetchone()[0]
    check(n_a == n_b, f"same number of result rows ({n_a} == {n_b})")
    sel = ", ".join(f'"{c}"' for c in cols)
    differ = con.execute(f"SELECT {sel} FROM run EXCEPT ALL SELECT {sel} FROM reference").fetchall()
    check(not differ, f"identical results in {len(cols)} columns ({len(differ)} rows differ): {', '.join(cols)}")
    errors = con.execute("SELECT count(*) FROM run WHERE error IS NOT NULL").fetchone()[0]
    check(errors == 0, f"no variant failed ({errors} error rows)")
    for row in differ[:3]:
        print(f"    only in run: {str(row)[:300]}")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "annotate":
        annotate(*args)
    elif mode == "ablate":
        ablate(*args)
    else:
        sys.exit(f"unknown mode {mode!r} (annotate or ablate)")
    sys.exit(1 if failed else 0)
