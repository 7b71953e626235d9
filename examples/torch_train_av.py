#!/usr/bin/env python3
"""Trains the paper's action-value network in PyTorch on a chessbench run.

The network is `bench/torch_reference.py`'s (searchless_chess's predictor:
pre-LayerNorm transformer, bias-free attention and SwiGLU, learned
positions; the 9M preset is 8 layers, width 256, 8 heads), the step is
`chessbench train`'s recipe (HL-Gauss loss with sigma = 0.75 / K, Adam
1e-4, global-norm clip 1.0, an EMA of the parameters at 0.99), and the
batches come from chessbench's loader: the trainer's own, for the same
options and seed.

    pip install ./python            # see docs/python.md
    python3 examples/torch_train_av.py runs/demo --steps 1000 --device cuda

It prints a JSON line per logged step (train loss, samples/s) and at the end
the EMA model's mean log-loss of the value bucket on the eval split beside
the predict-the-marginal baseline's; `--out FILE` saves the EMA weights.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import chessbench
from chessbench.torch import ChessbenchDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from torch_reference import PRESETS, Predictor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a chessbench run directory with annotated action values")
    ap.add_argument("--preset", default="9m", choices=PRESETS)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--buckets", type=int, default=128)
    ap.add_argument("--learning-rate", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="loader threads")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-split", default="test")
    ap.add_argument("--eval-records", type=int, default=16384)
    ap.add_argument("--out", help="save the EMA model's state_dict here")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    k = args.buckets
    data = ChessbenchDataset(
        args.run,
        policy="action_value",
        batch_size=args.batch_size,
        buckets=k,
        seed=args.seed,
        jobs=args.jobs,
        steps=args.steps,
    )
    layers, d, heads = PRESETS[args.preset]
    model = Predictor(layers, d, heads, seq_len=79, outputs=k).to(dev)
    ema = Predictor(layers, d, heads, seq_len=79, outputs=k).to(dev)
    ema.load_state_dict(model.state_dict())
    ema.requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-8)
    edges = torch.linspace(0, 1, k + 1, device=dev)
    sigma = 0.75 / k

    def hl_gauss(win_prob):
        cdf = torch.erf((edges[None, :] - win_prob[:, None]) / (math.sqrt(2) * sigma))
        return (cdf[:, 1:] - cdf[:, :-1]) / (cdf[:, -1:] - cdf[:, :1])

    t0, seen = time.perf_counter(), 0
    for step, (tokens, _, win_prob) in enumerate(torch.utils.data.DataLoader(data, batch_size=None), 1):
        tokens, win_prob = tokens.to(dev, non_blocking=True), win_prob.to(dev, non_blocking=True)
        # The model reads the board and the action; the bucket is the target.
        logp = model(tokens)
        loss = -(hl_gauss(win_prob) * logp).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.01)
        seen += tokens.shape[0]
        if step % args.log_every == 0 or step == args.steps:
            rate = seen / (time.perf_counter() - t0)
            print(json.dumps({"step": step, "loss": loss.item(), "samples_per_s": round(rate, 1)}), flush=True)

    if args.eval_split:
        print(json.dumps(evaluate(args, ema, dev, k)), flush=True)
    if args.out:
        torch.save(ema.state_dict(), args.out)


@torch.no_grad()
def evaluate(args, model, dev, k):
    """Mean log-loss of the true bucket on the eval split's first records
    (one fixed order), beside the marginal baseline fitted on them."""
    loader = chessbench.Loader(args.run, args.eval_split, policy="action_value", buckets=k, batch_size=1024, seed=0)
    n = min(args.eval_records, loader.records)
    total, counts, done = 0.0, np.zeros(k), 0
    model.eval()
    while done < n:
        batch = loader.next_batch()
        take = min(n - done, len(batch.targets))
        tokens = torch.from_numpy(batch.tokens[:take]).to(dev)
        targets = torch.from_numpy(batch.targets[:take]).long().to(dev)
        total += F.nll_loss(model(tokens), targets, reduction="sum").item()
        counts += np.bincount(batch.targets[:take], minlength=k)
        done += take
    p = counts / counts.sum()
    marginal = -(counts[counts > 0] * np.log(p[counts > 0])).sum() / counts.sum()
    return {"eval_split": args.eval_split, "records": n, "log_loss": total / n, "marginal_log_loss": marginal}


if __name__ == "__main__":
    main()
