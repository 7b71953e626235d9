#!/usr/bin/env python3
# chessbench: GPL-3.0-or-later. Runs google-deepmind/searchless_chess
# (Apache-2.0), which is not vendored: pass a checkout with --searchless.
"""searchless_chess's checkpoint and engines as the reference for a model
chessbench imports from an Orbax checkpoint.

With THEIR code: draws parameters (`transformer.py`, haiku init, seeded) and
an EMA tree (another seed), saves both with THEIR checkpoint manager
(`training_utils.get_checkpoint_manager`, as `training.py` does), zips the
model directory like the published `9M.zip`, restores the parameters with
THEIR `training_utils.load_parameters` (the published models' loading path),
builds THEIR engine for the policy (`neural_engines.ENGINE_FROM_POLICY`, as
`engines/constants.py` does) and writes the move it plays on each FEN, for
`params` and for `params_ema`, with their score of every legal move.

    searchless_engines.py --searchless DIR --policy action_value --layers 2 \
        --d-model 64 --heads 4 --buckets 128 --seed 0 --step 1000 \
        --name tiny --zip OUT.zip --fens FENS.txt --moves OUT.json
"""

import argparse
import json
import sys
import tempfile
import zipfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--searchless", required=True)
    ap.add_argument(
        "--policy",
        default="action_value",
        choices=["action_value", "state_value", "behavioral_cloning"],
    )
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--buckets", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", type=int, default=1000)
    ap.add_argument("--name", default="model", help="the model directory in the zip")
    ap.add_argument("--zip", required=True, help="where to write the zipped checkpoint")
    ap.add_argument("--fens", required=True, help="one FEN per line")
    ap.add_argument("--moves", required=True, help="JSON: their moves per FEN")
    args = ap.parse_args()

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "bench"))
    import searchless_compat

    searchless_compat.load(args.searchless)

    import chess
    import jax
    import numpy as np
    import optax

    from searchless_chess.src import training_utils, utils
    from searchless_chess.src.engines import engine as engine_mod
    from searchless_chess.src.engines import neural_engines

    predictor, _ = searchless_compat.predictor(
        policy=args.policy,
        layers=args.layers,
        d_model=args.d_model,
        heads=args.heads,
        buckets=args.buckets,
        seed=args.seed,
    )
    dummy = np.zeros((1, 1), dtype=np.uint32)
    params = predictor.initial_params(rng=jax.random.PRNGKey(args.seed), targets=dummy)
    params_ema = predictor.initial_params(rng=jax.random.PRNGKey(args.seed + 1000), targets=dummy)
    opt_state = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-4)).init(params)

    with tempfile.TemporaryDirectory(prefix="searchless-ckpt-") as tmp:
        model_dir = Path(tmp) / args.name
        manager = training_utils.get_checkpoint_manager(
            ckpt_frequency=1, checkpoint_dir=str(model_dir)
        )
        manager.save(
            step=args.step,
            items=dict(params=params, params_ema=params_ema, opt_state=opt_state),
        )
        manager.wait_until_finished()
        manager.close()
        with zipfile.ZipFile(args.zip, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(model_dir.rglob("*")):
                z.write(path, path.relative_to(tmp))

        template = predictor.initial_params(rng=jax.random.PRNGKey(1), targets=np.ones((1, 1), dtype=np.uint32))
        _, bucket_values = utils.get_uniform_buckets_edges_values(args.buckets)
        fens = [line.strip() for line in Path(args.fens).read_text().splitlines() if line.strip()]
        moves, scores = {}, {}

        def move_scores(engine, board) -> dict:
            """`play`'s quantity per move: expected win probability (action
            and state value), log-probability (behavioural cloning)."""
            legal = [m.uci() for m in engine_mod.get_ordered_legal_moves(board)]
            analysis = engine.analyse(board)
            if args.policy == "action_value":
                values = np.inner(np.exp(analysis["log_probs"]), bucket_values)
            elif args.policy == "state_value":
                values = np.inner(np.exp(analysis["next_log_probs"]), bucket_values)
            else:
                values = np.asarray(analysis["log_probs"])
            return {m: float(v) for m, v in zip(legal, values)}

        for tree, use_ema in (("params", False), ("params_ema", True)):
            restored = training_utils.load_parameters(
                checkpoint_dir=str(model_dir),
                params=template,
                step=args.step,
                use_ema_params=use_ema,
            )
            engine = neural_engines.ENGINE_FROM_POLICY[args.policy](
                return_buckets_values=bucket_values,
                predict_fn=neural_engines.wrap_predict_fn(
                    predictor=predictor, params=restored, batch_size=32
                ),
            )
            moves[tree] = [engine.play(chess.Board(fen)).uci() for fen in fens]
            # Their score of every legal move (what `play` maximises), so a
            # differing choice can be told from a tie at float precision.
            scores[tree] = [move_scores(engine, chess.Board(fen)) for fen in fens]
    Path(args.moves).write_text(json.dumps({"fens": len(fens), **moves, "scores": scores}))


if __name__ == "__main__":
    main()
