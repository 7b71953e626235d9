#!/usr/bin/env python3
"""A UCI engine that crashes on one board: Stockfish behind a wrapper that
kills it (and exits) on every search of the position it was given at the
N-th search, counted over every copy of the wrapper, while a marker file
exists. `chessbench annotate --engine tests/slurm/crashing-engine.py` then
sees the engine die on that board on every try, as it would on a board that
crashes a real engine, and the rest of the shard goes on.

Environment:
  CRASH_ENGINE  the real engine (default: stockfish on PATH, else
                /usr/games/stockfish)
  CRASH_STATE   a directory shared by every copy (and every node):
                  at      N, the search whose position becomes the poison
                  armed   crash while this file exists (remove it to let a
                          resume annotate the board)
                  count   searches so far (written here)
                  poison  the poisoned `position ...` line (written here)
                  crashes one line per crash (written here)
"""

import fcntl
import os
import shutil
import subprocess
import sys

state = os.environ["CRASH_STATE"]
engine = os.environ.get("CRASH_ENGINE") or shutil.which("stockfish") or "/usr/games/stockfish"
child = subprocess.Popen([engine], stdin=subprocess.PIPE, text=True, bufsize=1)


def path(name):
    return os.path.join(state, name)


def read(name, default=""):
    try:
        with open(path(name)) as f:
            return f.read()
    except FileNotFoundError:
        return default


def crash_on(position):
    """Counts this search; whether it must crash."""
    with open(path("lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        count = int(read("count", "0") or 0) + 1
        with open(path("count"), "w") as f:
            f.write(str(count))
        if count == int(read("at", "0")) and not os.path.exists(path("poison")):
            with open(path("poison"), "w") as f:
                f.write(position)
        poison = read("poison")
        crash = os.path.exists(path("armed")) and poison == position
        if crash:
            with open(path("crashes"), "a") as f:
                f.write(f"{os.uname().nodename} pid {os.getpid()} search {count}\n")
        return crash


position = ""
for line in sys.stdin:
    if line.startswith("position "):
        position = line.strip()
    elif line.startswith("go") and crash_on(position):
        child.kill()
        os._exit(1)
    child.stdin.write(line)
    child.stdin.flush()
    if line.strip() == "quit":
        break
child.stdin.close()
sys.exit(child.wait())
