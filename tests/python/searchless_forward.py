#!/usr/bin/env python3
# chessbench: GPL-3.0-or-later. Runs google-deepmind/searchless_chess
# (Apache-2.0), which is not vendored: pass a checkout with --searchless.
"""searchless_chess's own model as the reference for chessbench's forward pass.

Draws parameters with searchless_chess's own `transformer.py` (haiku init,
seeded), writes them as a safetensors file named by haiku's parameter paths
(what `chessbench::model::haiku` reads), and writes the reference: the first
N records of an `action_value_data.bag` (or state_value / behavioral_cloning)
turned into sequences by their `data_loader` and the log-probabilities their
`predict` gives the last token of each.

    searchless_forward.py --searchless DIR --bag FILE --policy action_value \
        --layers 2 --d-model 64 --heads 4 --outputs 32 --seed 0 --records 1000 \
        --params OUT.safetensors --reference OUT.safetensors
"""

import argparse
import json
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--searchless", required=True)
    ap.add_argument("--bag", required=True)
    ap.add_argument(
        "--policy",
        default="action_value",
        choices=["action_value", "state_value", "behavioral_cloning"],
    )
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--params", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--steps", type=int, default=0, help="training steps on the records")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--learning-rate", type=float, default=2e-3)
    ap.add_argument("--trained", help="where to write the parameters after --steps")
    args = ap.parse_args()

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "bench"))
    sys.path.insert(0, str(root / "scripts"))
    import searchless_compat
    from orbax_to_safetensors import write_safetensors

    searchless_compat.load(args.searchless)

    import jax
    import numpy as np

    from searchless_chess.src import bagz, data_loader

    predictor, config = searchless_compat.predictor(
        policy=args.policy,
        layers=args.layers,
        d_model=args.d_model,
        heads=args.heads,
        buckets=args.buckets,
        seed=args.seed,
    )
    outputs = config.output_size
    params = predictor.initial_params(
        rng=jax.random.PRNGKey(config.seed),
        targets=np.zeros((1, 1), dtype=np.uint32),
    )
    flat = {
        f"{module}/{name}": np.asarray(value, dtype=np.float32)
        for module, leaves in params.items()
        for name, value in leaves.items()
    }
    recipe = {
        "layers": args.layers,
        "d_model": args.d_model,
        "heads": args.heads,
        "outputs": outputs,
        "policy": args.policy,
        "seed": args.seed,
        "source": "searchless_chess transformer.py initial_params",
    }
    write_safetensors(Path(args.params), flat, recipe)

    convert = data_loader._TRANSFORMATION_BY_POLICY[args.policy](
        num_return_buckets=args.buckets
    )
    source = bagz.BagDataSource(str(Path(args.bag).resolve()))
    n = min(args.records, len(source))
    sequences = np.stack([convert.map(source[i])[0] for i in range(n)]).astype(np.int32)
    log_probs = predictor.predict(params=params, targets=sequences, rng=None)[:, -1, :]
    reference = {"sequences": sequences, "log_probs": np.asarray(log_probs, dtype=np.float32)}
    if args.steps:
        # Their update: training.py's optimiser and training_utils' loss and
        # jitted update, on consecutive batches of the sequences.
        import optax

        from searchless_chess.src import training_utils

        optimizer = optax.chain(
            optax.clip_by_global_norm(1.0),
            optax.adam(args.learning_rate),
        )
        opt_state = optimizer.init(params)
        grad_fn = jax.value_and_grad(training_utils.make_loss_fn(predictor=predictor))
        mask = np.ones(sequences.shape, dtype=bool)
        mask[:, -1] = False
        losses = []
        ema = params
        for step in range(args.steps):
            rows = [(step * args.batch_size + i) % n for i in range(args.batch_size)]
            params, ema, opt_state, loss, _ = training_utils.update_parameters(
                params=params,
                params_ema=ema,
                opt_state=opt_state,
                sequences=sequences[rows],
                loss_mask=mask[rows],
                grad_fn=grad_fn,
                optimizer=optimizer,
            )
            losses.append(float(loss))
        reference["losses"] = np.asarray(losses, dtype=np.float32)
        trained = {
            f"{module}/{name}": np.asarray(value, dtype=np.float32)
            for module, leaves in params.items()
            for name, value in leaves.items()
        }
        write_safetensors(Path(args.trained), trained, recipe)
    write_safetensors(Path(args.reference), reference, recipe)
    print(json.dumps({"records": n, "seq_len": int(sequences.shape[1]), **recipe}))


if __name__ == "__main__":
    main()
