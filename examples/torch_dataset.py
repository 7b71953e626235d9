#!/usr/bin/env python3
"""chessbench's loader as a PyTorch IterableDataset: a run's action-value
records, batched as `chessbench train` batches them.

    pip install ./python            # once (see docs/python.md)
    python3 examples/torch_dataset.py runs/demo
"""

import sys

from torch.utils.data import DataLoader

from chessbench.torch import ChessbenchDataset

run = sys.argv[1] if len(sys.argv) > 1 else "runs/demo"
# `chessbench train`'s options, same names and defaults; rank and world
# size come from torch.distributed when it is initialised.
ds = ChessbenchDataset(run, policy="action_value", batch_size=256, buckets=128, seed=0, steps=4)
print(ds.config["policy"], "records per epoch:", ds.records)
for tokens, targets, win_prob in DataLoader(ds, batch_size=None):
    # tokens int32 [256, 79]: 77 board tokens, the action, the value bucket.
    print(tuple(tokens.shape), tokens.dtype, targets[:4].tolist(), win_prob[:4].tolist())
