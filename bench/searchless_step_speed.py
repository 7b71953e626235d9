#!/usr/bin/env python3
# chessbench: GPL-3.0-or-later. Runs google-deepmind/searchless_chess
# (Apache-2.0), which is not vendored: pass a checkout with --searchless.
"""searchless_chess's own training step, timed: the reference for
`chessbench bench-step` on a GPU.

Their predictor (`transformer.py`, the config of their train.py: learned
positions, no causal mask, final LayerNorm), their loss (`make_loss_fn`),
their optimiser (`optax.chain(clip_by_global_norm(1.0), adam)` as in
`training.py`) and their jitted `update_parameters` (gradients, Adam, EMA),
on random action-value sequences of the real shape (77 state tokens, an
action, a return bucket; the loss on the bucket only, as their data loader
masks it). bf16: the parameters are cast to bfloat16, so the whole step
(Adam moments too) runs in bf16, as chessbench's bf16 does.

Only the step is imported: their data loader and checkpointing need grain
and apache-beam, which are replaced by empty modules (training_utils and
constants import them at module level for loading and type annotations).

    searchless_step_speed.py --searchless DIR --preset 9m --batch 1024 \
        --buckets 32 --precision f32 --steps 30

prints one JSON line (samples/s, model FLOPs/s with chessbench's count).
"""

import argparse
import functools
import json
import sys
import time
import types
from pathlib import Path

PRESETS = {"tiny": (2, 64, 4), "9m": (8, 256, 8), "136m": (8, 1024, 8), "270m": (16, 1024, 8)}
NUM_ACTIONS = 1968
SEQ_LEN = 79  # 77 state tokens + action + return bucket (their tokenizer + 2)


class _Anything:
    """Stands for any attribute or call of a module that is not installed."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args, **kwargs):
        return _Anything()


def stub_module(name: str) -> None:
    if name in sys.modules:
        return
    try:
        __import__(name)
        return
    except ImportError:
        pass
    module = types.ModuleType(name)
    def attribute(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Anything()

    module.__getattr__ = attribute
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def train_flops_per_sample(layers: int, d: int, seq_len: int, outputs: int) -> float:
    """chessbench's ModelShape::train_flops_per_sample (and torch_reference.py's)."""
    ffn = 4 * d
    per_token_block = 2 * (4 * d * d + 3 * d * ffn) + 2 * 2 * seq_len * d
    return 3 * (layers * seq_len * per_token_block + 2 * d * outputs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--searchless", required=True, help="searchless_chess checkout (with src/)")
    ap.add_argument("--preset", default="9m", choices=PRESETS)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()

    for name in ("grain", "grain.python", "apache_beam", "apache_beam.coders"):
        stub_module(name)
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    import searchless_compat

    searchless_compat.load(args.searchless)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from searchless_chess.src import training_utils, transformer

    layers, d, heads = PRESETS[args.preset]
    # Their vocabulary and sequence length given, so python-chess (which
    # their tokenizer needs) is not.
    config = searchless_compat.transformer_config(
        layers=layers, d_model=d, heads=heads, outputs=args.buckets, seed=0,
        vocab_size=NUM_ACTIONS, max_sequence_length=SEQ_LEN,
    )
    predictor = transformer.build_transformer_predictor(config)
    params = predictor.initial_params(
        rng=jax.random.PRNGKey(0), targets=np.zeros((1, 1), dtype=np.uint32)
    )
    if args.precision == "bf16":
        params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)
    params_ema = jax.tree.map(jnp.copy, params)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-4))
    opt_state = optimizer.init(params)
    grad_fn = jax.value_and_grad(training_utils.make_loss_fn(predictor=predictor))
    update = functools.partial(
        training_utils.update_parameters, grad_fn=grad_fn, optimizer=optimizer
    )

    rng = np.random.default_rng(42)

    def batch():
        seq = np.empty((args.batch, SEQ_LEN), dtype=np.int32)
        seq[:, :77] = rng.integers(0, 31, size=(args.batch, 77))
        seq[:, 77] = rng.integers(0, NUM_ACTIONS, size=args.batch)
        seq[:, 78] = rng.integers(0, args.buckets, size=args.batch)
        mask = np.ones((args.batch, SEQ_LEN), dtype=bool)
        mask[:, -1] = False
        return jax.device_put(seq), jax.device_put(mask)

    batches = [batch() for _ in range(4)]
    t_compile = time.perf_counter()
    for i in range(args.warmup):
        params, params_ema, opt_state, loss, _ = update(
            params=params, params_ema=params_ema, opt_state=opt_state,
            sequences=batches[i % 4][0], loss_mask=batches[i % 4][1],
        )
    jax.block_until_ready(params)
    warmup_secs = time.perf_counter() - t_compile
    t0 = time.perf_counter()
    for i in range(args.steps):
        params, params_ema, opt_state, loss, _ = update(
            params=params, params_ema=params_ema, opt_state=opt_state,
            sequences=batches[i % 4][0], loss_mask=batches[i % 4][1],
        )
    jax.block_until_ready((params, params_ema, opt_state, loss))
    secs = time.perf_counter() - t0
    rate = args.steps * args.batch / secs
    flops = train_flops_per_sample(layers, d, SEQ_LEN, args.buckets)
    print(json.dumps({
        "impl": "searchless_chess (jax/haiku)", "jax": jax.__version__,
        "device": str(jax.devices()[0]), "preset": args.preset, "batch": args.batch,
        "buckets": args.buckets, "precision": args.precision,
        "params": int(sum(p.size for p in jax.tree.leaves(params))),
        "steps": args.steps, "seconds": secs, "warmup_seconds": warmup_secs,
        "samples_per_s": rate, "model_flops_per_s": rate * flops,
        "loss": float(loss),
    }))


if __name__ == "__main__":
    main()
