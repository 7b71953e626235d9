#!/usr/bin/env python3
"""chessbench's loader as a JAX data source: searchless_chess's batches
`(sequences, loss_mask)` straight from a run's tables, no `.bag` export,
fed to a jitted step (a bag-of-tokens linear value model, to keep it short;
searchless_chess's transformer takes the same arrays).

    pip install ./python jax        # see docs/python.md
    python3 examples/jax_source.py runs/demo
"""

import sys

import jax
import jax.numpy as jnp

import chessbench

run = sys.argv[1] if len(sys.argv) > 1 else "runs/demo"
K = 32
loader = chessbench.Loader(run, policy="action_value", batch_size=256, buckets=K, steps=20, seed=0)


def loss_fn(w, sequences, loss_mask):
    # Predict the value bucket (the last token) from the others.
    feats = jax.nn.one_hot(sequences[:, :-1], chessbench.NUM_ACTIONS).mean(axis=1)
    logp = jax.nn.log_softmax(feats @ w)
    nll = -jnp.take_along_axis(logp, sequences[:, -1:], axis=1)[:, 0]
    return nll.mean()


step = jax.jit(lambda w, s, m: w - 1.0 * jax.grad(loss_fn)(w, s, m))
w = jnp.zeros((chessbench.NUM_ACTIONS, K))
for i, batch in enumerate(loader):
    sequences, loss_mask = batch.searchless()  # numpy int32 [256, 79], bool [256, 79]
    s, m = jax.device_put(sequences), jax.device_put(loss_mask)
    if i % 5 == 0:
        print(f"batch {i}: loss {float(loss_fn(w, s, m)):.4f}")
    w = step(w, s, m)
print("final loss", float(loss_fn(w, s, m)))
