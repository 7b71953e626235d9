#!/usr/bin/env python3
"""A UCI engine's latency per move, as a GUI sees it.

Starts ENGINE (the command after `--`), says `uci` and `isready`, then for
each of the first COUNT positions sends `position fen FEN` and `go movetime
1000` and times the wait for `bestmove`. The first move is timed apart (a
GPU compiles its kernels there); the rest give the median, the 90th
percentile and the mean. Prints one JSON line:

  {"name": NAME, "moves": N, "first_ms": ..., "median_ms": ..., "p90_ms": ...,
   "mean_ms": ..., "startup_ms": ...}

POSITIONS is a Lichess puzzle CSV (its FEN column) or a file of FENs, one a
line. Standard library only (the GPU machine has no python-chess).

  python3 bench/uci_latency.py --positions data/lichess_db_puzzle_head1000.csv \\
      --count 100 --name uci-270m-bf16 -- chessbench uci --checkpoint DIR --device cuda
"""

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time


def read_fens(path, count):
    """The first `count` FENs of a puzzle CSV (header with FEN) or a FEN list."""
    with open(path, newline="") as f:
        first = f.readline()
        f.seek(0)
        if "FEN" in first.split(","):
            fens = [row["FEN"] for row in csv.DictReader(f)]
        else:
            fens = [line.strip() for line in f if line.strip()]
    if not fens:
        sys.exit(f"{path}: no positions")
    return fens[:count]


class Engine:
    """A UCI engine process, line by line."""

    def __init__(self, command):
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_for(self, prefix, what):
        """Reads lines until one starts with `prefix`; returns it."""
        while True:
            line = self.proc.stdout.readline()
            if not line:
                code = self.proc.wait()
                sys.exit(f"the engine exited ({code}) while {what}")
            line = line.strip()
            if line.startswith("info string error"):
                sys.exit(f"the engine reported {line!r} while {what}")
            if line.startswith(prefix):
                return line

    def close(self):
        try:
            self.send("quit")
            self.proc.wait(timeout=30)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--positions", required=True, help="a puzzle CSV or a FEN list")
    ap.add_argument("--count", type=int, default=100, help="moves timed (default 100)")
    ap.add_argument("--name", default="uci", help="the JSON line's name")
    ap.add_argument("engine", nargs="+", help="the engine's command, after --")
    args = ap.parse_args()
    fens = read_fens(args.positions, args.count + 1)

    t0 = time.perf_counter()
    engine = Engine(args.engine)
    engine.send("uci")
    engine.wait_for("uciok", "starting (uci)")
    engine.send("isready")
    engine.wait_for("readyok", "loading the model (isready)")
    startup = time.perf_counter() - t0

    times = []
    for i, fen in enumerate(fens):
        engine.send(f"position fen {fen}")
        t = time.perf_counter()
        engine.send("go movetime 1000")
        engine.wait_for("bestmove", f"choosing a move in {fen} (position {i + 1})")
        times.append(time.perf_counter() - t)
    engine.close()

    first, rest = times[0], sorted(times[1:]) or times
    ms = lambda s: round(1e3 * s, 2)  # noqa: E731
    print(
        json.dumps(
            {
                "name": args.name,
                "moves": len(rest),
                "startup_ms": ms(startup),
                "first_ms": ms(first),
                "median_ms": ms(statistics.median(rest)),
                "p90_ms": ms(rest[min(len(rest) - 1, int(0.9 * len(rest)))]),
                "mean_ms": ms(statistics.fmean(rest)),
            }
        )
    )


if __name__ == "__main__":
    main()
