#!/usr/bin/env python3
"""Where a training step's GPU time goes, kernel by kernel, as Markdown.

Reads a per-kernel summary of N timed steps and prints milliseconds per
step by group of kernels (matrix products, attention, softmax, layer
norms, reductions, element-wise, copies, optimiser, other) and the top
kernels by time:

    bench/kernel_account.py --nsys account_cuda_gpu_kern_sum.csv --steps 10
    bench/kernel_account.py --torch account.csv --steps 10

--nsys: `nsys stats -r cuda_gpu_kern_sum -f csv` of a capture of the timed
steps (bench/gpu.sh's `account` part); --torch: the CSV of
`bench/torch_reference.py --profile-out` (name,calls,total_us). Groups are
assigned from kernel names by the patterns in GROUPS (first match wins);
the top-kernel table shows the names, so a misgrouped kernel is visible.
"""

import argparse
import csv
import re
import sys

GROUPS = [
    ("matrix products (vendor)", r"gemm|cutlass|xmma|nvjet|cublas|sm\d\d_|ampere_|hopper_|wgmma|aten::(add|b)?mm\b"),
    ("attention (fused)", r"flash|fmha|sdpa|attention|efficient_attention"),
    ("matrix products (CubeCL)", r"matmul|mma"),
    ("softmax", r"softmax"),
    ("layer norm", r"layer_?norm|layernorm|norm_"),
    ("reductions", r"reduce|sum|mean|argmax|max_|norm"),
    ("copies and layout", r"copy|contiguous|cat|slice|gather|scatter|index|memcpy|memset|transpose|permute|fill"),
    ("optimiser", r"adam|foreach|lerp|multi_tensor|clip"),
    ("element-wise (fused)", r"fused|elemwise|elementwise|triton|vectorized|unrolled|unary|binary|kernel"),
]


def group_of(name):
    low = name.lower()
    for group, pattern in GROUPS:
        if re.search(pattern, low):
            return group
    return "other"


def read_nsys(path):
    """(name, launches, total ms) from nsys's cuda_gpu_kern_sum CSV."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            total = next(v for k, v in row.items() if k.startswith("Total Time"))
            rows.append((row["Name"], int(row["Instances"]), float(total) / 1e6))
    return rows


def read_torch(path):
    """(name, launches, total ms) from torch_reference.py --profile-out."""
    with open(path, newline="") as f:
        return [(r["name"], int(r["calls"]), float(r["total_us"]) / 1e3) for r in csv.DictReader(f)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--nsys", metavar="CSV")
    src.add_argument("--torch", metavar="CSV")
    ap.add_argument("--steps", type=int, required=True, help="steps the summary covers")
    ap.add_argument("--title", default="")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = read_nsys(args.nsys) if args.nsys else read_torch(args.torch)
    total = sum(ms for _, _, ms in rows) or 1e-9
    per = lambda ms: ms / args.steps
    groups = {}
    for name, calls, ms in rows:
        g = groups.setdefault(group_of(name), [0.0, 0, 0])
        g[0] += ms
        g[1] += calls
        g[2] += 1
    print(f"### Kernel account: {args.title} ({args.steps} steps)\n")
    print("| group | ms/step | share | kernels | launches/step |")
    print("|---|---:|---:|---:|---:|")
    for group, (ms, calls, kinds) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        print(f"| {group} | {per(ms):.3f} | {100 * ms / total:.1f}% | {kinds} | {calls / args.steps:.0f} |")
    launches = sum(c for _, c, _ in rows)
    print(f"| **GPU busy** | **{per(total):.3f}** | 100% | {len(rows)} | {launches / args.steps:.0f} |\n")
    print(f"Top {args.top} kernels:\n")
    print("| kernel | group | ms/step | share | launches/step |")
    print("|---|---|---:|---:|---:|")
    for name, calls, ms in sorted(rows, key=lambda r: -r[2])[: args.top]:
        short = name if len(name) <= 90 else name[:87] + "..."
        short = short.replace("|", "\\|")
        print(f"| `{short}` | {group_of(name)} | {per(ms):.3f} | {100 * ms / total:.1f}% | {calls / args.steps:.1f} |")
    print()


if __name__ == "__main__":
    sys.exit(main())
