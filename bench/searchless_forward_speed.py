#!/usr/bin/env python3
# chessbench: GPL-3.0-or-later. Runs google-deepmind/searchless_chess
# (Apache-2.0), which is not vendored: pass a checkout with --searchless.
"""The reference for `make bench-eval`: searchless_chess's own predictor
(JAX/XLA, jitted, on its default device) on the same boards: one forward pass
per board over all its legal moves (the action-value sequences their
ActionValueEngine builds), or with --rows-per-pass R the boards' sequences
packed in order into passes of R rows, the last padded, so XLA compiles one
program (how an evaluation at GPU scale would batch them).

Prints JSON: boards, moves, seconds (timed pass; a first pass compiles the
XLA programs, one per distinct number of legal moves per board, and is not
timed).

    searchless_forward_speed.py --searchless DIR --fens FENS.txt \
        --layers 8 --d-model 256 --heads 8 --buckets 128 [--rows-per-pass R]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--searchless", required=True)
    ap.add_argument("--fens", required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--buckets", type=int, default=128)
    ap.add_argument("--rows-per-pass", type=int, default=0, help="0: a pass per board")
    args = ap.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import searchless_compat

    searchless_compat.load(args.searchless)

    import chess
    import jax
    import numpy as np

    from searchless_chess.src import tokenizer, utils
    from searchless_chess.src.engines import engine

    predictor, _ = searchless_compat.predictor(
        policy="action_value",
        layers=args.layers,
        d_model=args.d_model,
        heads=args.heads,
        buckets=args.buckets,
        seed=0,
    )
    params = predictor.initial_params(
        rng=jax.random.PRNGKey(0), targets=np.zeros((1, 1), dtype=np.uint32)
    )
    predict = jax.jit(predictor.predict)

    batches = []
    for fen in Path(args.fens).read_text().split("\n"):
        if not fen.strip():
            continue
        board = chess.Board(fen)
        moves = engine.get_ordered_legal_moves(board)
        actions = np.array([[utils.MOVE_TO_ACTION[m.uci()]] for m in moves], dtype=np.int32)
        fen_tokens = np.stack([tokenizer.tokenize(board.fen()).astype(np.int32)] * len(moves))
        batches.append(np.concatenate([fen_tokens, actions, np.zeros_like(actions)], axis=1))

    moves_total = int(sum(len(b) for b in batches))
    if args.rows_per_pass > 0:
        rows = np.concatenate(batches)
        r = args.rows_per_pass
        pad = (-len(rows)) % r
        rows = np.concatenate([rows, np.zeros((pad, rows.shape[1]), dtype=rows.dtype)])
        passes = [rows[i : i + r] for i in range(0, len(rows), r)]
    else:
        passes = batches

    def run() -> None:
        for sequences in passes:
            predict(params=params, targets=sequences, rng=None)[:, -1].block_until_ready()

    run()
    t = time.perf_counter()
    run()
    seconds = time.perf_counter() - t
    print(
        json.dumps(
            {
                "boards": len(batches),
                "moves": moves_total,
                "rows_per_pass": args.rows_per_pass,
                "seconds": seconds,
                "jax": jax.__version__,
                "devices": str(jax.devices()),
                "threads": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
