#!/usr/bin/env python3
"""PyTorch reference of chessbench's training step, for `make bench-train`.

The same architecture as src/train/model.rs (searchless_chess's predictor):
token embedding * sqrt(d) + learned positions, pre-LayerNorm blocks of
bias-free multi-head attention (no mask) and a bias-free SwiGLU MLP (4d),
final LayerNorm, a head with bias read at the last position, log-softmax.
The same step: HL-Gauss loss (sigma = 0.75 / K), Adam, clipping by the global
gradient norm (1.0), an EMA of the parameters (0.99).

It times steps on random token batches of the real shape and prints one JSON
line: samples/s, model FLOPs/s (the same count as ModelShape::
train_flops_per_sample) and the parameter count, so the Rust bench can print
burn / PyTorch on the same machine, batch and precision.

    python3 bench/torch_reference.py --preset 9m --batch 1024 --buckets 32 \
        --device cuda --precision f32 --steps 50
"""

import argparse
import csv
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"tiny": (2, 64, 4), "9m": (8, 256, 8), "136m": (8, 1024, 8), "270m": (16, 1024, 8)}
VOCAB = 1968


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.mlp_norm = nn.LayerNorm(d)
        self.gate_up = nn.Linear(d, 8 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out(ctx.transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Predictor(nn.Module):
    def __init__(self, layers, d, heads, seq_len, outputs):
        super().__init__()
        self.d = d
        self.tok = nn.Embedding(VOCAB, d)
        nn.init.normal_(self.tok.weight, std=0.02)
        self.pos = nn.Parameter(torch.randn(seq_len, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.final_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, outputs)

    def forward(self, seq):
        inp = torch.cat([torch.zeros_like(seq[:, :1]), seq[:, :-1]], dim=1)
        x = self.tok(inp) * math.sqrt(self.d) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return F.log_softmax(self.head(self.final_norm(x[:, -1])), dim=-1)


def train_flops_per_sample(layers, d, seq_len, outputs):
    ffn = 4 * d
    per_token_block = 2 * (4 * d * d + 3 * d * ffn) + 2 * 2 * seq_len * d
    return 3 * (layers * seq_len * per_token_block + 2 * d * outputs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", choices=PRESETS)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--buckets", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=79)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="f32", choices=["f32", "tf32", "bf16", "amp-bf16"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--profile-out", metavar="CSV",
                    help="after timing, run --steps more steps under torch.profiler and write each "
                         "GPU kernel's calls and total microseconds to CSV (name,calls,total_us)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layers, d, heads = PRESETS[args.preset]
    dev = torch.device(args.device)
    model = Predictor(layers, d, heads, args.seq_len, args.buckets).to(dev)
    if args.precision == "bf16":
        model = model.to(torch.bfloat16)
    # tf32: f32 parameters and activations, matrix products on TF32 tensor
    # cores (what burn-cuda and JAX do with f32 by default on this GPU).
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    ema = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, eps=1e-8)
    step_model = torch.compile(model) if args.compile else model
    k = args.buckets
    edges = torch.linspace(0, 1, k + 1, device=dev)
    sigma = 0.75 / k

    def batch():
        tokens = torch.randint(0, VOCAB, (args.batch, args.seq_len), device=dev)
        y = torch.rand(args.batch, device=dev)
        return tokens, y

    def step(tokens, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.precision == "amp-bf16"):
            logp = step_model(tokens).float()
        cdf = torch.erf((edges[None, :] - y[:, None]) / (math.sqrt(2) * sigma))
        target = (cdf[:, 1:] - cdf[:, :-1]) / (cdf[:, -1:] - cdf[:, :1])
        loss = -(target * logp).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(ema, list(model.parameters()), 0.01)
        return loss

    batches = [batch() for _ in range(4)]
    for i in range(args.warmup):
        step(*batches[i % 4])
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(*batches[i % 4])
    loss.item()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    rate = args.steps * args.batch / secs
    if args.profile_out:
        profile(args, step, batches)
    flops = train_flops_per_sample(layers, d, args.seq_len, k)
    print(json.dumps({
        "impl": "pytorch", "torch": torch.__version__, "device": str(dev),
        "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
        "preset": args.preset, "batch": args.batch, "buckets": k, "precision": args.precision,
        "params": sum(p.numel() for p in model.parameters()),
        "steps": args.steps, "seconds": secs, "samples_per_s": rate,
        "model_flops_per_s": rate * flops, "compile": args.compile,
    }))


def profile(args, step, batches):
    """--steps steps under torch.profiler: each GPU kernel's launches and
    time (on the CPU, each operator's own time)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = args.device.startswith("cuda")
    with torch_profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for i in range(args.steps):
            step(*batches[i % 4])
        if cuda:
            torch.cuda.synchronize()
    totals = {}
    for e in prof.events():
        if cuda:
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = e.time_range.elapsed_us()
        else:
            us = e.self_cpu_time_total
        calls, total = totals.get(e.name, (0, 0.0))
        totals[e.name] = (calls + 1, total + us)
    with open(args.profile_out, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["name", "calls", "total_us"])
        for name, (calls, us) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
            out.writerow([name, calls, f"{us:.3f}"])


if __name__ == "__main__":
    sys.exit(main())
