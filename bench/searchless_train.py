#!/usr/bin/env python3
# chessbench: GPL-3.0-or-later. Runs google-deepmind/searchless_chess
# (Apache-2.0), which is not vendored: pass a checkout with --searchless.
"""searchless_chess's own training, the reference for `chessbench train`.

Trains searchless_chess's transformer (`transformer.py`) with its own loss,
optimiser, EMA and update step (`training.py`, `training_utils.py`) and its
own grain data loader (`data_loader.py`) on a split chessbench exported with
`chessbench bag export`, then reports the EMA parameters' mean log-loss on
every record of the test bag, computed by its `make_loss_fn`. Only the loop
around `training.train` is ours: it keeps the last EMA parameters (the
function returns the raw ones) and reads the test bag in order.

Current JAX lacks two things the code at 90ae0e6 uses: the
`jax.sharding.PositionalSharding` class (replaced by one device's sharding,
which is what it amounts to on one CPU) and `jnp.clip(a_min=...)` (mapped to
`min=`).

    searchless_train.py --searchless DIR --train BAG --test BAG \
        --steps 800 --seed 0 [--layers 2 --d-model 64 --heads 4 \
        --buckets 32 --batch-size 128 --learning-rate 2e-3]

prints one JSON object: the recipe, the test log-loss and the wall time.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--searchless", required=True, help="searchless_chess checkout (with src/)")
    ap.add_argument("--train", required=True, help="action_value_data.bag to train on")
    ap.add_argument("--test", required=True, help="action_value_data.bag to evaluate")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--learning-rate", type=float, default=2e-3)
    ap.add_argument("--eval-batch", type=int, default=1024)
    args = ap.parse_args()

    code = Path(args.searchless).resolve()
    if not (code / "src" / "transformer.py").is_file():
        sys.exit(f"{code}: not a searchless_chess checkout (no src/transformer.py)")
    # Their modules import `searchless_chess.src.*`.
    pkg_root = Path(tempfile.mkdtemp(prefix="searchless-"))
    (pkg_root / "searchless_chess").symlink_to(code)
    sys.path.insert(0, str(pkg_root))

    import jax
    import jax.numpy as jnp
    import numpy as np

    class _OneDevice:
        """PositionalSharding's uses in training.py on one device."""

        def __init__(self, devices):
            self._sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])

        def reshape(self, *shape):
            return self

        def replicate(self):
            return self._sharding

    if not hasattr(jax.sharding, "PositionalSharding"):
        jax.sharding.PositionalSharding = _OneDevice
        constrain = jax.lax.with_sharding_constraint
        # On one device the constraint is a no-op.
        jax.lax.with_sharding_constraint = lambda x, s: (
            x if isinstance(s, _OneDevice) else constrain(x, s)
        )
    _clip = jnp.clip

    def clip(x, a_min=None, a_max=None, **kw):
        if a_min is not None:
            kw["min"] = a_min
        if a_max is not None:
            kw["max"] = a_max
        return _clip(x, **kw)

    jnp.clip = clip

    from searchless_chess.src import bagz
    from searchless_chess.src import config as config_lib
    from searchless_chess.src import data_loader, tokenizer, training, training_utils
    from searchless_chess.src import transformer, utils

    # Their loader reads ../data/{split}/{policy}_data.bag from the cwd.
    work = pkg_root / "work"
    (pkg_root / "data" / "train").mkdir(parents=True)
    work.mkdir()
    (pkg_root / "data" / "train" / "action_value_data.bag").symlink_to(
        Path(args.train).resolve()
    )
    os.chdir(work)

    predictor_config = transformer.TransformerConfig(
        vocab_size=utils.NUM_ACTIONS,
        output_size=args.buckets,
        pos_encodings=transformer.PositionalEncodings.LEARNED,
        max_sequence_length=tokenizer.SEQUENCE_LENGTH + 2,
        num_heads=args.heads,
        num_layers=args.layers,
        embedding_dim=args.d_model,
        apply_post_ln=True,
        apply_qk_layernorm=False,
        use_causal_mask=False,
        seed=args.seed,
    )
    train_config = config_lib.TrainConfig(
        learning_rate=args.learning_rate,
        data=config_lib.DataConfig(
            batch_size=args.batch_size,
            shuffle=True,
            seed=args.seed,
            worker_count=0,
            num_return_buckets=args.buckets,
            policy="action_value",
            split="train",
        ),
        # training.train runs steps 0..=num_steps.
        num_steps=args.steps - 1,
        ckpt_frequency=None,
        log_frequency=None,
    )

    last = {}
    update = training_utils.update_parameters

    def keep_ema(**kw):
        out = update(**kw)
        last["ema"] = out[1]
        last["steps"] = last.get("steps", 0) + 1
        return out

    training_utils.update_parameters = keep_ema
    t = time.time()
    training.train(
        train_config=train_config,
        predictor_config=predictor_config,
        build_data_loader=data_loader.build_data_loader,
    )
    train_secs = time.time() - t

    predictor = transformer.build_transformer_predictor(predictor_config)
    loss_fn = jax.jit(training_utils.make_loss_fn(predictor=predictor))
    convert = data_loader.ConvertActionValueDataToSequence(num_return_buckets=args.buckets)
    source = bagz.BagDataSource(str(Path(args.test).resolve()))
    n = len(source)
    total = 0.0
    for start in range(0, n, args.eval_batch):
        items = [convert.map(source[i]) for i in range(start, min(n, start + args.eval_batch))]
        seqs = np.stack([s for s, _ in items])
        masks = np.stack([m for _, m in items])
        total += float(loss_fn(last["ema"], seqs, masks)) * len(items)
    print(
        json.dumps(
            {
                "implementation": "searchless_chess",
                "steps": last["steps"],
                "seed": args.seed,
                "layers": args.layers,
                "d_model": args.d_model,
                "heads": args.heads,
                "buckets": args.buckets,
                "batch_size": args.batch_size,
                "learning_rate": args.learning_rate,
                "test_records": n,
                "test_log_loss": total / n,
                "train_seconds": round(train_secs, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
