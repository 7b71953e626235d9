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

`bench/searchless_compat.py` imports their code under current JAX.

    searchless_train.py --searchless DIR --train BAG --test BAG \
        --steps 800 --seed 0 [--layers 2 --d-model 64 --heads 4 \
        --buckets 32 --batch-size 128 --learning-rate 2e-3]

prints one JSON object: the recipe, the test log-loss and the wall time.

With `--pair DIR` it also writes what a paired run of chessbench needs
(`make parity-paired`): their initial parameters (`init.safetensors`,
haiku names), every batch's sequences in the order their loader gave them
with each step's training loss (`batches.safetensors`) and the test
sequences (`test.safetensors`).
"""

import argparse
import json
import os
import sys
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
    ap.add_argument("--pair", help="directory for the paired run's inputs (see above)")
    args = ap.parse_args()

    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    sys.path.insert(0, str(here.parent / "scripts"))
    import searchless_compat

    pkg_root = searchless_compat.load(args.searchless)

    import jax
    import numpy as np

    from searchless_chess.src import bagz
    from searchless_chess.src import config as config_lib
    from searchless_chess.src import data_loader, training, training_utils, transformer

    # Their loader reads ../data/{split}/{policy}_data.bag from the cwd.
    work = pkg_root / "work"
    (pkg_root / "data" / "train").mkdir(parents=True)
    work.mkdir()
    (pkg_root / "data" / "train" / "action_value_data.bag").symlink_to(
        Path(args.train).resolve()
    )
    os.chdir(work)

    predictor_config = searchless_compat.transformer_config(
        layers=args.layers,
        d_model=args.d_model,
        heads=args.heads,
        outputs=args.buckets,
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

    batches = []
    losses = []

    def keep_ema(**kw):
        if args.pair:
            if not batches:
                last["init"] = jax.tree.map(np.asarray, kw["params"])
            batches.append(np.asarray(kw["sequences"], dtype=np.int32))
        out = update(**kw)
        if args.pair:
            losses.append(float(out[3]))
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
    tests = []
    for start in range(0, n, args.eval_batch):
        items = [convert.map(source[i]) for i in range(start, min(n, start + args.eval_batch))]
        seqs = np.stack([s for s, _ in items])
        masks = np.stack([m for _, m in items])
        total += float(loss_fn(last["ema"], seqs, masks)) * len(items)
        if args.pair:
            tests.append(seqs.astype(np.int32))
    if args.pair:
        from orbax_to_safetensors import flatten, write_safetensors

        out = Path(args.pair)
        out.mkdir(parents=True, exist_ok=True)
        recipe = {"seed": args.seed, "steps": last["steps"], "batch_size": args.batch_size}
        write_safetensors(out / "init.safetensors", flatten(last["init"]), recipe)
        write_safetensors(
            out / "batches.safetensors",
            {
                "sequences": np.concatenate(batches),
                "losses": np.asarray(losses, dtype=np.float32),
            },
            recipe,
        )
        write_safetensors(out / "test.safetensors", {"sequences": np.concatenate(tests)}, recipe)
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
