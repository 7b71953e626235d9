"""ChessBench .bag interop, checked with an implementation independent of
chessbench's Rust code: Apache Beam's own coders (apache-beam from PyPI,
composed as searchless_chess's constants.py does) and a reader/writer of
the Bagz layout written here from bagz.py's description.

    python3 tests/python/test_bag_interop.py CHESSBENCH_BIN RUN_DIR SPLIT WORK_DIR

1. `chessbench bag export` of RUN_DIR/SPLIT: every file decodes with Beam's
   coders to exactly the records DuckDB reads from the Parquet tables
   (sv_records, bc_records, av_records), floats bit for bit, and
   re-encoding each record with Beam gives the same bytes.
2. Bags written here with Beam's coders (action values sharded @2) go
   through `chessbench bag import`; the imported run's record views hold
   exactly the records written.
Exits non-zero with a message on the first mismatch.
"""

import collections
import os
import struct
import subprocess
import sys
from pathlib import Path

import duckdb
from apache_beam import coders

# searchless_chess constants.py: the three record coders.
FEN, MOVE, WIN_PROB = coders.StrUtf8Coder(), coders.StrUtf8Coder(), coders.FloatCoder()
CODERS = {
    "state_value": coders.TupleCoder((FEN, WIN_PROB)),
    "behavioral_cloning": coders.TupleCoder((FEN, MOVE)),
    "action_value": coders.TupleCoder((FEN, MOVE, WIN_PROB)),
}
SQL_DIR = Path(__file__).resolve().parents[2] / "sql"


def read_bag(path):
    """Records of a Bagz file: data, then one little-endian int64 end offset
    per record; the last 8 bytes are the last end offset = the index start."""
    data = Path(path).read_bytes()
    if not data:
        return []
    (index_start,) = struct.unpack("<Q", data[-8:])
    n = (len(data) - index_start) // 8
    ends = struct.unpack(f"<{n}q", data[index_start:])
    starts = (0,) + ends[:-1]
    return [data[s:e] for s, e in zip(starts, ends)]


def write_bag(path, records):
    offsets, out = [], bytearray()
    for r in records:
        out += r
        offsets.append(len(out))
    out += struct.pack(f"<{len(offsets)}q", *offsets)
    Path(path).write_bytes(bytes(out))


def expand(pattern):
    """`x@N_data.bag` -> N shard names, as bagz.py's BagShardReader."""
    name = Path(pattern).name
    if "@" not in name:
        return [Path(pattern)]
    head, rest = name.split("@", 1)
    digits = "".join(c for c in rest if c.isdigit())
    n, tail = int(digits), rest[len(digits):]
    return [Path(pattern).parent / f"{head}-{i:05d}-of-{n:05d}{tail}" for i in range(n)]


def views(run):
    con = duckdb.connect()
    con.execute("SET VARIABLE run_dir = ?", [str(run)])
    con.execute((SQL_DIR / "views.sql").read_text())
    return con


def records_from_sql(con, split):
    return {
        "state_value": con.execute(
            "SELECT fen, win_prob FROM sv_records WHERE split = ? ORDER BY board_id", [split]).fetchall(),
        "behavioral_cloning": con.execute(
            "SELECT fen, move FROM bc_records WHERE split = ? ORDER BY board_id", [split]).fetchall(),
        "action_value": con.execute(
            "SELECT fen, move, win_prob FROM av_records WHERE split = ? ORDER BY board_id, action",
            [split]).fetchall(),
    }


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def check_equal(name, got, want):
    if len(got) != len(want):
        fail(f"{name}: {len(got)} records, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if tuple(g) != tuple(w) or any(
                isinstance(a, float) and struct.pack(">d", a) != struct.pack(">d", b) for a, b in zip(g, w)):
            fail(f"{name}: record {i}: {g!r} != {w!r}")


def main():
    binary, run, split, work = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    work.mkdir(parents=True, exist_ok=True)

    # 1. Export, read back with Beam.
    out = work / "export"
    subprocess.run([binary, "bag", "export", str(run), "--split", split, "--out", str(out),
                    "--records-per-shard", "5000", "--overwrite", "--no-progress"], check=True)
    want = records_from_sql(views(run), split)
    for set_name, coder in CODERS.items():
        files = sorted(out.glob(f"{set_name}*_data.bag"))
        if not files:
            fail(f"no {set_name} file in {out}")
        if len(files) > 1:
            pattern = out / f"{set_name}@{len(files)}_data.bag"
            if expand(pattern) != files:
                fail(f"shard names {files} do not follow {pattern}")
        raw = [r for f in files for r in read_bag(f)]
        decoded = [coder.decode(r) for r in raw]
        check_equal(f"export {set_name}", decoded, want[set_name])
        for r, d in zip(raw, decoded):
            if coder.encode(d) != r:
                fail(f"export {set_name}: Beam re-encodes {d!r} as {coder.encode(d).hex()}, file has {r.hex()}")
        print(f"export {set_name}: {len(raw)} records in {len(files)} file(s) decode with apache_beam coders")

    # 2. Write with Beam, import with chessbench.
    src = work / "beam"
    src.mkdir(exist_ok=True)
    written = {k: v[:400] for k, v in want.items()}
    # Action values of the boards written as state values, sharded @2.
    fens = {fen for fen, _ in written["state_value"]}
    written["action_value"] = [r for r in want["action_value"] if r[0] in fens]
    written["behavioral_cloning"] = [r for r in want["behavioral_cloning"] if r[0] in fens]
    write_bag(src / "state_value_data.bag", [CODERS["state_value"].encode(r) for r in written["state_value"]])
    write_bag(src / "behavioral_cloning_data.bag",
              [CODERS["behavioral_cloning"].encode(r) for r in written["behavioral_cloning"]])
    av = [CODERS["action_value"].encode(r) for r in written["action_value"]]
    half = len(av) // 2
    shards = expand(src / "action_value@2_data.bag")
    write_bag(shards[0], av[:half])
    write_bag(shards[1], av[half:])
    imported = work / "imported"
    subprocess.run([binary, "bag", "import", str(imported), "--split", "test", str(src), "--no-progress"],
                   check=True)
    got = records_from_sql(views(imported), "test")
    for set_name in CODERS:
        check_equal(f"import {set_name}", sorted(got[set_name]), sorted(written[set_name]))
        print(f"import {set_name}: {len(got[set_name])} records written by apache_beam read back exactly")
    print("OK")


if __name__ == "__main__":
    main()
