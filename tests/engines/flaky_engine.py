#!/usr/bin/env python3
"""A real UCI engine behind a proxy that misbehaves at random points.

Used by the fault-injection tests: it starts the real engine (FLAKY_ENGINE,
default Stockfish) and forwards the protocol both ways, but on each `go`
it may, with the given probabilities:
  FLAKY_CRASH    kill the engine and exit (a crash mid-search),
  FLAKY_HANG     stop answering forever (a hang: the caller's deadline fires),
  FLAKY_GARBAGE  replace the engine's next line with garbage.
The values that do come back are the real engine's, untouched.
"""
import os
import random
import shutil
import subprocess
import sys
import threading
import time

engine = os.environ.get("FLAKY_ENGINE") or shutil.which("stockfish") or "/usr/games/stockfish"
p_crash = float(os.environ.get("FLAKY_CRASH", "0.003"))
p_hang = float(os.environ.get("FLAKY_HANG", "0.002"))
p_garbage = float(os.environ.get("FLAKY_GARBAGE", "0.003"))
rng = random.Random(int(os.environ.get("FLAKY_SEED", "0")) * 1_000_003 + os.getpid())

proc = subprocess.Popen([engine], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
state = {"garbage": False, "hang": False}
out = sys.stdout.buffer


def pump():
    for line in proc.stdout:
        if state["hang"]:
            continue
        if state["garbage"]:
            state["garbage"] = False
            line = b"info depth \xff\xfe garbage from the flaky proxy\n"
        out.write(line)
        out.flush()
    if not state["hang"]:
        os._exit(0)


threading.Thread(target=pump, daemon=True).start()
for line in sys.stdin.buffer:
    if line.startswith(b"go"):
        r = rng.random()
        if r < p_crash:
            proc.kill()
            sys.stderr.write("flaky proxy: crashing on purpose\n")
            sys.stderr.flush()
            os._exit(1)
        elif r < p_crash + p_hang:
            state["hang"] = True
        elif r < p_crash + p_hang + p_garbage:
            state["garbage"] = True
    if state["hang"]:
        continue
    proc.stdin.write(line)
    proc.stdin.flush()
# stdin closed: quit like an engine does.
proc.kill()
while state["hang"]:
    time.sleep(1)
