#!/usr/bin/env python3
"""PyTorch eager's host cost for chessbench's training step, without a GPU.

Runs bench/torch_reference.py's network and step (the same model, HL-Gauss
loss, clipping by the global norm, Adam and EMA as chessbench's step) on
PyTorch's `meta` device: every operator goes through the dispatcher,
autograd records and replays the graph, the optimiser and clipping run
their foreach implementations (what PyTorch picks on CUDA), but no operator
touches data. The CPU time of the thread that runs the step is then what
eager PyTorch's host spends per step before any kernel runs: the work that
on a GPU overlaps the kernels, or holds them up where it is the larger.

What meta leaves out: CUDA's own launch path (the driver call per kernel,
a few microseconds each) and the caching allocator's work; what it adds:
meta's shape functions, which CUDA runs too. Mixed precision: autocast has
no meta dispatch key, so `amp-bf16` casts the products' operands to bf16 by
hand where autocast would (the linear layers and attention; softmax and
layer norms in f32), the same operators autocast inserts.

Prints one JSON line:

    {"impl": "pytorch-meta", "preset": "9m", "precision": "f32",
     "host_s_per_step": ..., "wall_s_per_step": ..., "ops_per_step": ...}

ops_per_step counts the ATen operators one step dispatches below autograd
(views and allocations included), in a separate step from the timed ones.

    python3 bench/torch_host.py --preset 9m --precision f32 --steps 50
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import PRESETS, Predictor  # noqa: E402


class Count(TorchDispatchMode):
    """Counts the ATen operators dispatched below autograd."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def bf16_linear(x, weight, bias=None):
    """A linear layer as autocast runs it: bf16 operands, a bf16 result."""
    b = None if bias is None else bias.to(torch.bfloat16)
    return F.linear(x.to(torch.bfloat16), weight.to(torch.bfloat16), b)


def mixed(model):
    """Autocast's casts by hand: each nn.Linear's forward in bf16 (its
    input, weight and bias cast per call, as autocast does), attention on
    the bf16 projections; layer norms, softmax and the loss in f32."""
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.forward = (lambda lin: lambda x: bf16_linear(x, lin.weight, lin.bias))(m)
    return model


def clip_foreach(params, max_norm):
    """torch.nn.utils.clip_grad_norm_ as it runs on CUDA (its foreach path:
    one norm per tensor in one call, their norm, one scaling call), which
    the function itself refuses on meta tensors."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch._foreach_norm(grads, 2.0)
    total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="9m", choices=PRESETS)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=79)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", default="f32", choices=["f32", "amp-bf16"])
    args = ap.parse_args()
    torch.set_num_threads(1)
    layers, d, heads = PRESETS[args.preset]
    dev = torch.device("meta")
    model = Predictor(layers, d, heads, args.seq_len, args.buckets).to(dev)
    if args.precision == "amp-bf16":
        model = mixed(model)
    params = list(model.parameters())
    ema = [p.detach().clone() for p in params]
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-8, foreach=True)
    k = args.buckets
    edges = torch.linspace(0, 1, k + 1, device=dev)
    sigma = 0.75 / k
    tokens = torch.randint(0, 1968, (args.batch, args.seq_len), device=dev)
    y = torch.rand(args.batch, device=dev)

    def step():
        logp = model(tokens).float()
        cdf = torch.erf((edges[None, :] - y[:, None]) / (math.sqrt(2) * sigma))
        target = (cdf[:, 1:] - cdf[:, :-1]) / (cdf[:, -1:] - cdf[:, :1])
        loss = -(target * logp).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_foreach(params, 1.0)
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(ema, params, 0.01)

    for _ in range(args.warmup):
        step()
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    for _ in range(args.steps):
        step()
    cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    count = Count()
    with count:
        step()
    print(json.dumps({
        "impl": "pytorch-meta", "torch": torch.__version__, "preset": args.preset,
        "precision": args.precision, "batch": args.batch, "buckets": k, "steps": args.steps,
        "host_s_per_step": cpu / args.steps, "wall_s_per_step": wall / args.steps,
        "ops_per_step": count.ops,
    }))


if __name__ == "__main__":
    sys.exit(main())
