#!/usr/bin/env python3
"""PyTorch eager's training step, operator by operator: bytes and FLOPs.

Runs one training step of bench/torch_reference.py's network (the same
model, loss, clipping, Adam and EMA as chessbench's step) on the CPU under a
TorchDispatchMode that sees every ATen operator eager PyTorch dispatches,
forward, backward and optimiser, with the shapes of the batch asked for,
and prints one JSON line per operator:

    {"name": "aten.mm", "phase": "...", "bytes": 4194304, "flops": 1.1e9,
     "buffers": 3, "dtype": "float32"}

followed by nothing else (the caller extrapolates and totals).

A GPU kernel is what eager PyTorch launches for an operator on CUDA, so
the account counts one kernel for each operator that computes something
and none for views (an operator whose output aliases an input without
writing it: view, permute, transpose, expand, split, ...) or for
allocation without initialisation (empty). The optimiser and clipping run
the foreach implementation PyTorch picks on CUDA (`foreach=True`), and the
attention PyTorch's scaled_dot_product_attention (on the CPU its flash
kernel for the CPU; on an H100 in f32 the memory-efficient kernel, with the
same operands). Two approximations, both stated where the account is
printed: a foreach operator counts as one launch (CUDA launches one per
chunk of tensors), and an operator that launches more than one kernel on
CUDA (layer norm's backward: two) counts as one.

Bytes: each distinct tensor an operator reads or writes, counted once, by
its elements (a broadcast tensor by the memory it spans): the traffic of
an operator that reads its inputs and writes its outputs once,
which is what a memory-bound kernel costs. The same measure is taken of
burn's kernels (the buffers CubeCL binds to each launch), so the two
columns compare like with like.

FLOPs: PyTorch's own formulas (torch.utils.flop_counter) for products and
attention; element-wise operators count none.

    python3 bench/torch_account.py --preset 9m --batch 8 --buckets 32 --precision f32
"""

import argparse
import json
import math
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import PRESETS, Predictor  # noqa: E402

# Operators that allocate without writing, or only read metadata.
NO_KERNEL = {"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.detach",
             "aten.lift_fresh", "aten._local_scalar_dense", "aten.alias", "aten.set_",
             "aten.is_same_size", "aten.new_empty", "aten.new_empty_strided", "aten._unsafe_view"}


def is_view(func):
    """An operator whose result aliases an argument it does not write."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


def tensor_bytes(t):
    """The bytes an operator moves for a tensor: its elements, or for a
    broadcast tensor (a stride of 0) the memory it spans, whichever is
    less. A strided view (q, k or v sliced from one projection) counts its
    own elements, not the projection's span."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))
    return min(span, t.numel()) * t.element_size()


class Account(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.rows = []
        self.phase = "other"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func._overloadpacket)
        if name in NO_KERNEL or name.startswith("profiler.") or is_view(func):
            return out
        seen = {}
        for t in tree_flatten((args, kwargs, out))[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                key = (t.data_ptr(), tensor_bytes(t))
                seen[key] = t
        flops = 0
        packet = func._overloadpacket
        if packet in flop_registry:
            flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
        dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in seen.values()})
        self.rows.append({
            "name": name,
            "phase": self.phase,
            "bytes": sum(k[1] for k in seen),
            "buffers": len(seen),
            "flops": flops,
            "dtype": "+".join(dtypes),
        })
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="9m", choices=PRESETS)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=79)
    ap.add_argument("--precision", default="f32", choices=["f32", "amp-bf16"])
    args = ap.parse_args()
    torch.manual_seed(0)
    layers, d, heads = PRESETS[args.preset]
    model = Predictor(layers, d, heads, args.seq_len, args.buckets)
    ema = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-8, foreach=True)
    k = args.buckets
    edges = torch.linspace(0, 1, k + 1)
    sigma = 0.75 / k
    tokens = torch.randint(0, 1968, (args.batch, args.seq_len))
    y = torch.rand(args.batch)

    def step(account):
        account.phase = "forward"
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "amp-bf16"):
            logp = model(tokens).float()
        cdf = torch.erf((edges[None, :] - y[:, None]) / (math.sqrt(2) * sigma))
        target = (cdf[:, 1:] - cdf[:, :-1]) / (cdf[:, -1:] - cdf[:, :1])
        loss = -(target * logp).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        account.phase = "backward"
        loss.backward()
        account.phase = "clip"
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        account.phase = "optimiser"
        opt.step()
        account.phase = "ema"
        with torch.no_grad():
            torch._foreach_lerp_(ema, list(model.parameters()), 0.01)

    # One step outside the account: Adam's state exists from the first
    # step on, as in a timed step.
    step(Account())
    account = Account()
    with account:
        step(account)
    for row in account.rows:
        print(json.dumps(row))


if __name__ == "__main__":
    sys.exit(main())
