"""chessbench.Loader against searchless_chess's own data loader.

For each policy, one epoch of the Python package's loader (uniform
sampler) and one pass of searchless_chess's `data_loader.build_data_loader`
(its pygrain pipeline: BagDataSource, the policy's ConvertToSequence
transform, Batch) over `chessbench bag export` of the same run's split must
hold the same records: the same sequences (tokens, action, bucket) with
the same dtypes and loss masks, as multisets (the two samplers order an
epoch differently by design).

    python tests/python/test_searchless_loader.py CHESSBENCH_BIN RUN_DIR \
        --searchless CHECKOUT --jax-python PYTHON [--split train] [--buckets 32]

Run it with a Python that has the chessbench package installed; their side
runs in PYTHON (`make jax-deps`: JAX, grain, apache-beam), as
bench/searchless_train.py does (`make test-searchless-loader` runs both).
Exits non-zero on the first difference.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import chessbench

HERE = Path(__file__).resolve().parent
POLICIES = ("action_value", "state_value", "behavioral_cloning")

# Their side: searchless_chess's build_data_loader over the exported bags,
# one pass (num_records = the bag's length, no shuffle, batch = the bag's
# length so no record is dropped), saved as .npz.
THEIRS = r"""
import os, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
import searchless_compat
searchless_compat.load({checkout!r})
import numpy as np
from searchless_chess.src import bagz, config as config_lib, data_loader

work, out, buckets = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
os.chdir(work / "cwd")  # their loader reads ../data/SPLIT/POLICY_data.bag
for policy in {policies!r}:
    bag = work / "data" / "train" / f"{{policy}}_data.bag"
    n = len(bagz.BagDataSource(str(bag)))
    config = config_lib.DataConfig(batch_size=n, shuffle=False, seed=0, worker_count=0,
                                   num_return_buckets=buckets, policy=policy, split="train",
                                   num_records=n)
    sequences, mask = next(iter(data_loader.build_data_loader(config)))
    np.savez(out / f"{{policy}}.npz", sequences=sequences, mask=mask)
    print(policy, n, sequences.dtype, sequences.shape, flush=True)
"""


def sort_rows(a):
    return a[np.lexsort(a.T[::-1])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin")
    ap.add_argument("run")
    ap.add_argument("--searchless", required=True)
    ap.add_argument("--jax-python", required=True)
    ap.add_argument("--split", default="train")
    ap.add_argument("--buckets", type=int, default=32)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "cwd").mkdir()
        export = subprocess.run(
            [args.bin, "bag", "export", args.run, "--split", args.split, "--out",
             str(work / "data" / "train"), "--no-progress"],
            capture_output=True, text=True)
        if export.returncode != 0:
            sys.exit(f"chessbench bag export failed:\n{export.stderr}")
        theirs = subprocess.run(
            [args.jax_python, "-c", THEIRS.format(bench=str(HERE.parents[1] / "bench"),
                                                  checkout=args.searchless, policies=POLICIES),
             str(work), str(work), str(args.buckets)],
            capture_output=True, text=True)
        if theirs.returncode != 0:
            sys.exit(f"searchless_chess's loader failed:\n{theirs.stderr}")
        for policy in POLICIES:
            ref = np.load(work / f"{policy}.npz")
            loader = chessbench.Loader(args.run, args.split, policy=policy, buckets=args.buckets,
                                       batch_size=1000, seed=0)
            # One epoch: as many records as their pass (an epoch of ours that
            # differs in size makes the multisets differ below).
            n = len(ref["sequences"])
            seqs, masks, taken = [], [], 0
            while taken < n:
                s, m = loader.next_batch().searchless()
                take = min(n - taken, len(s))
                seqs.append(s[:take])
                masks.append(m[:take])
                taken += take
            ours, mask = np.concatenate(seqs), np.concatenate(masks)
            if ours.dtype != ref["sequences"].dtype or ours.shape != ref["sequences"].shape:
                sys.exit(f"{policy}: ours {ours.dtype} {ours.shape}, theirs "
                         f"{ref['sequences'].dtype} {ref['sequences'].shape}")
            if not np.array_equal(sort_rows(ours), sort_rows(ref["sequences"])):
                diff = len({r.tobytes() for r in ours} ^ {r.tobytes() for r in ref["sequences"]})
                sys.exit(f"{policy}: the sequences differ ({diff} rows in one set only)")
            if not np.array_equal(mask, np.broadcast_to(ref["mask"][0], mask.shape)) or \
                    not (ref["mask"] == ref["mask"][0]).all():
                sys.exit(f"{policy}: the loss masks differ")
            print(f"{policy}: {n} records, {ours.dtype} {ours.shape[1]} tokens: the same as searchless_chess's loader")


if __name__ == "__main__":
    main()
