#!/usr/bin/env python3
"""The Python package's loader throughput, for `make bench-loader`.

Draws `--batches` batches of the train split's action values (batch 1024,
K = 128, window 4, seed 1: benches/loader.rs's configuration, with the
loader's memory budget equal to that bench's) through `chessbench.Loader`
into NumPy, after one warm-up batch, and prints one JSON line: samples/s,
the loader's peak bytes, and the process's peak resident memory.

    python bench/python_loader.py RUN --jobs 1 --batches 400
"""

import argparse
import json
import resource
import time

import chessbench


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--batches", type=int, default=400)
    args = ap.parse_args()
    # `chessbench train` gives the loader half the memory limit.
    loader = chessbench.Loader(args.run, policy="action_value", batch_size=1024, buckets=128,
                               seed=1, window=4, jobs=args.jobs, memory_limit="4GiB")
    loader.next_batch()
    t = time.perf_counter()
    rows = 0
    for _ in range(args.batches):
        rows += len(loader.next_batch().targets)
    secs = time.perf_counter() - t
    print(json.dumps({
        "impl": "python", "workers": args.jobs, "batches": args.batches,
        "samples_per_s": rows / secs, "loader_peak_bytes": loader.peak_bytes,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }))


if __name__ == "__main__":
    main()
