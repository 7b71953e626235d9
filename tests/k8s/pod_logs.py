#!/usr/bin/env python3
"""Checks of tests/k8s/run.sh on the pods' logs (the runs' tables are
compared by tests/slurm/compare.py):

  pod_logs.py LOGS JOB N KIND [WORKERS]
      Each pod's JSON summary (LOGS/JOB-I.out) says it ran as shard I/N:
      KIND annotate (also: from the Kubernetes Indexed Job's environment,
      with WORKERS engines, and every chunk committed by exactly one pod),
      ablate-data or ablate-train (every variant finished by one pod).
"""

import glob
import json
import os
import sys

failed = []


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failed.append(what)


def pods(logs, job, n, kind, workers=None):
    summaries = []
    for i in range(n):
        path = os.path.join(logs, f"{job}-{i}.out")
        try:
            s = json.load(open(path))
        except (OSError, ValueError) as e:
            check(False, f"{job} pod {i}: a JSON summary in {path} ({e})")
            continue
        summaries.append(s)
        check(s.get("shard") == f"{i}/{n}", f"{job} pod {i}: ran as shard {s.get('shard')} (want {i}/{n})")
        if kind == "annotate":
            check(s.get("shard_source") == "Kubernetes Indexed Job",
                  f"{job} pod {i}: shard from {s.get('shard_source')!r} (JOB_COMPLETION_INDEX, CHESSBENCH_SHARD_COUNT)")
            if workers is not None:
                check(s.get("workers") == workers, f"{job} pod {i}: {s.get('workers')} engine(s) (want {workers})")
        else:
            check(s.get("phase") == kind.split("-")[1], f"{job} pod {i}: phase {s.get('phase')}")
            check(not s.get("failed"), f"{job} pod {i}: no failed variant ({s.get('failed')})")
    if len(summaries) != n:
        return
    if kind == "annotate":
        splits = {}
        for s in summaries:
            for split, st in s["splits"]:
                t = splits.setdefault(split, {"total": st["chunks_total"], "committed": 0, "boards": 0})
                t["committed"] += st["chunks_committed"]
                t["boards"] += st["boards_annotated"]
        for split, t in sorted(splits.items()):
            check(t["committed"] == t["total"] > 0,
                  f"{job}: {split}: the pods committed {t['committed']} of {t['total']} chunks, each once "
                  f"({t['boards']} boards)")
    elif kind == "ablate-train":
        done = sum(s.get("finished_now", 0) for s in summaries)
        check(done == n, f"{job}: the pods finished {done} variants, one each (want {n})")


def main():
    args = sys.argv[1:]
    if len(args) not in (4, 5):
        sys.exit("usage: pod_logs.py LOGS JOB N KIND [WORKERS]")
    pods(args[0], args[1], int(args[2]), args[3], int(args[4]) if len(args) > 4 else None)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
