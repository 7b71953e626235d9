#!/usr/bin/env python3
"""The 9M training step's kernels and bytes, burn beside PyTorch eager,
measured without a GPU and extrapolated to batch 1,024.

burn: `chessbench bench-step --device wgpu --count-kernels` on Mesa's
lavapipe (a real Vulkan runtime; the same fusion engine, the same project
kernels and the same CubeCL launches as CUDA, except that the linear
layers' products are CubeCL's matmul here and cuBLASLt on CUDA): every
kernel launched after fusion, with the bytes of the buffers it binds
(vendor/cubecl-runtime logs them; model::gpu::kernel_log counts them), per
step and, with --profile, per phase of the step. mixed bf16 is CUDA's
alone; lavapipe has f16, whose kernels and bytes are bf16's (both 2 bytes,
the same casts), so f16 stands in for it.

PyTorch: bench/torch_account.py, eager PyTorch's operators for the same
network and step (bench/torch_reference.py's), on the CPU, one kernel per
operator that computes, the bytes of the tensors it reads and writes.

Every tensor of the step is a weight or optimiser state (the same at any
batch) or an activation (proportional to the batch), so each kernel's
bytes are a + b x batch exactly: both sides are measured at two small
batches and extrapolated to --target-batch (the launch counts must agree
between the two batches, or the script stops).

    bench/step_account.py run BIN OUT_DIR      # measure (about 15 minutes on 2 cores)
    bench/step_account.py render OUT_DIR       # Markdown tables from OUT_DIR/account.jsonl

The roofline is an H100 SXM's datasheet figures (3.35 TB/s HBM3; dense
TF32 495 and bf16 989 TFLOP/s): bytes / bandwidth + FLOPs / peak, a floor
the step cannot beat, beside what each side measured on an H100 on
2026-11-27 (bench/results/h100-2026-11-27).
"""

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_account import group_of  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BATCHES = (4, 8)
TARGET = 1024
BUCKETS = 32
# H100 SXM datasheet: HBM3 bandwidth, dense tensor-core peaks.
H100_BYTES_PER_S = 3.35e12
H100_PEAK = {"f32": 495e12, "bf16": 989e12}
# Measured on 2026-11-27 (bench/results/h100-2026-11-27), batch 1,024:
# samples/s -> ms per step.
H100_MEASURED_MS = {
    ("burn", "f32"): 1024 / 5945 * 1e3,
    ("pytorch", "f32"): 1024 / 14000 * 1e3,
    ("burn", "bf16"): 1024 / 7558 * 1e3,
    ("pytorch", "bf16"): 1024 / 25951 * 1e3,
}
# Phases, in order; PyTorch's names mapped onto bench-step's.
PHASES = ["forward+loss", "backward", "clip", "adam", "ema"]
TORCH_PHASE = {"forward": "forward+loss", "backward": "backward", "clip": "clip",
               "optimiser": "adam", "ema": "ema"}


def burn_run(binary, precision, batch, profile):
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    cmd = [binary, "bench-step", "--model", "9m", "--policy", "action_value", "--buckets", str(BUCKETS),
           "--device", "wgpu", "--precision", precision, "--batch-size", str(batch),
           "--steps", "1", "--warmup", "1", "--count-kernels", "--json"]
    if profile:
        cmd.append("--profile")
    print("==", " ".join(cmd[1:]), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    row = json.loads(done.stdout)
    k = row["kernels"]
    launches = dict(k["by_kernel"])
    kernels = {name: [launches[name], b] for name, b in k["bytes_by_kernel"]}
    phases = {p["phase"]: {n: [c, b] for n, c, b in p["by_kernel"]} for p in k["phases"]}
    flops = row["model_flops_per_s"] / row["samples_per_s"] * batch
    return {"side": "burn", "precision": "bf16" if precision == "f16" else precision,
            "measured_as": precision, "batch": batch, "profile": profile, "flops": flops,
            "kernels": kernels, "phases": phases, "attention": row["attention"],
            "layers": row["layers"], "products": row["products"]}


def torch_run(precision, batch):
    cmd = [sys.executable, os.path.join(HERE, "torch_account.py"), "--preset", "9m",
           "--batch", str(batch), "--buckets", str(BUCKETS), "--precision", precision]
    print("==", " ".join(cmd[1:]), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    kernels = defaultdict(lambda: [0, 0])
    phases = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    flops = 0
    for line in out.splitlines():
        op = json.loads(line)
        for into in (kernels[op["name"]], phases[TORCH_PHASE[op["phase"]]][op["name"]]):
            into[0] += 1
            into[1] += op["bytes"]
        flops += op["flops"]
    import torch
    return {"side": "pytorch", "precision": "bf16" if precision == "amp-bf16" else precision,
            "measured_as": precision, "batch": batch, "profile": True, "flops": flops,
            "kernels": dict(kernels), "phases": {p: dict(k) for p, k in phases.items()},
            "torch": torch.__version__}


def run(binary, out_dir):
    """Measures what OUT_DIR/account.jsonl lacks (a rerun resumes)."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "account.jsonl")
    done = set()
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)
            done.add((r["side"], r["measured_as"], r["batch"], r["profile"]))
    with open(path, "a") as f:
        for precision in ("f32", "f16"):
            for profile in (False, True):
                for batch in BATCHES:
                    if ("burn", precision, batch, profile) not in done:
                        f.write(json.dumps(burn_run(binary, precision, batch, profile)) + "\n")
                        f.flush()
        for precision in ("f32", "amp-bf16"):
            for batch in BATCHES:
                if ("pytorch", precision, batch, True) not in done:
                    f.write(json.dumps(torch_run(precision, batch)) + "\n")
                    f.flush()
    print(f"rows in {path}", file=sys.stderr)


def merged(kernels):
    """Kernels by name without the matmul's algorithm (`MatmulEntry[Simple,
    Unit]` -> `MatmulEntry`): autotuning may pick another algorithm at
    another batch, with the same buffers bound."""
    out = {}
    for name, (c, b) in kernels.items():
        into = out.setdefault(name.split("[")[0], [0, 0])
        into[0] += c
        into[1] += b
    return out


def extrapolate(small, large, what):
    """{name: [launches, bytes]} at two batches -> at TARGET."""
    b1, b2 = small["batch"], large["batch"]
    small = dict(small, **{what: merged(small[what])})
    large = dict(large, **{what: merged(large[what])})
    out = {}
    for name in sorted(set(small[what]) | set(large[what])):
        c1, y1 = small[what].get(name, [0, 0])
        c2, y2 = large[what].get(name, [0, 0])
        if c1 != c2:
            sys.exit(f"{small['side']} {small['precision']}: {name} launched {c1} times at batch {b1}, "
                     f"{c2} at batch {b2}: the step is not the same kernels at both batches")
        out[name] = [c1, y1 + (y2 - y1) / (b2 - b1) * (TARGET - b1)]
    return out


def at_target(rows, side, precision, profile):
    pair = sorted((r for r in rows if r["side"] == side and r["precision"] == precision
                   and r["profile"] == profile), key=lambda r: r["batch"])
    if len(pair) != 2:
        return None
    small, large = pair
    phases = {}
    for phase in PHASES:
        s = {"side": side, "precision": precision, "batch": small["batch"],
             "phase": small["phases"].get(phase, {})}
        l_ = {"side": side, "precision": precision, "batch": large["batch"],
              "phase": large["phases"].get(phase, {})}
        phases[phase] = extrapolate(s, l_, "phase")
    flops = small["flops"] + (large["flops"] - small["flops"]) / (large["batch"] - small["batch"]) * (
        TARGET - small["batch"])
    return {"kernels": extrapolate(small, large, "kernels"), "phases": phases, "flops": flops,
            "first": small}


def totals(kernels):
    return sum(c for c, _ in kernels.values()), sum(b for _, b in kernels.values())


# ATen operators kernel_account's patterns do not name.
ATEN_GROUPS = {
    "element-wise (fused)": {"add", "mul", "sub", "div", "neg", "silu", "silu_backward", "erf",
                             "reciprocal", "clamp", "where", "gelu", "exp", "pow", "sqrt", "rsqrt"},
    "copies and layout": {"clone", "copy_", "zeros_like", "ones_like", "zeros", "fill_", "zero_",
                          "_to_copy", "stack", "new_zeros", "select_backward"},
}


def kind_of(name):
    """kernel_account's group of a kernel or operator, the vendor's and
    CubeCL's matrix products as one."""
    kind = aten_kind(name)
    return "matrix products" if kind.startswith("matrix products") else kind


def aten_kind(name):
    if name.startswith("aten."):
        op = name.removeprefix("aten.")
        for group, ops in ATEN_GROUPS.items():
            if op in ops:
                return "casts" if op == "_to_copy" else group
        return group_of("aten::" + op)
    return group_of(name)


def by_group(kernels):
    groups = defaultdict(lambda: [0, 0.0])
    for name, (c, b) in kernels.items():
        g = groups[kind_of(name)]
        g[0] += c
        g[1] += b
    return groups


def gb(x):
    return f"{x / 1e9:,.2f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "-"


def render(out_dir):
    """The account's tables, as Markdown, from OUT_DIR/account.jsonl."""
    rows = [json.loads(line) for line in open(os.path.join(out_dir, "account.jsonl"))]
    lines = []

    def print(text=""):
        lines.extend(text.split("\n"))

    for precision in ("f32", "bf16"):
        burn = at_target(rows, "burn", precision, False)
        burn_phases = at_target(rows, "burn", precision, True)
        torch = at_target(rows, "pytorch", precision, True)
        if burn is None or torch is None:
            continue
        name = {"f32": "f32 (TF32 products)", "bf16": "mixed bf16 (burn measured in f16, the same bytes)"}
        print(f"\n**9M step, batch {TARGET:,}, K = {BUCKETS}, {name[precision]}**: burn "
              f"(attention {burn['first']['attention']}, layers {burn['first']['layers']}) "
              f"against PyTorch eager.\n")
        bk, bb = totals(burn["kernels"])
        tk, tb = totals(torch["kernels"])
        peak = H100_PEAK[precision]
        print("| | burn | PyTorch eager | burn / PyTorch |")
        print("|---|---:|---:|---:|")
        print(f"| kernels a step | {bk:,.0f} | {tk:,.0f} | {ratio(bk, tk)} |")
        print(f"| GB moved a step | {gb(bb)} | {gb(tb)} | **{ratio(bb, tb)}** |")
        print(f"| GFLOP a step (products, attention) | {burn['flops'] / 1e9:,.0f} | "
              f"{torch['flops'] / 1e9:,.0f} | {ratio(burn['flops'], torch['flops'])} |")
        rb = (bb / H100_BYTES_PER_S + burn["flops"] / peak) * 1e3
        rt = (tb / H100_BYTES_PER_S + torch["flops"] / peak) * 1e3
        print(f"| H100 roofline, ms (bytes at 3.35 TB/s + FLOPs at {peak / 1e12:.0f} TFLOP/s) | "
              f"{rb:.1f} | {rt:.1f} | {ratio(rb, rt)} |")
        mb, mt = H100_MEASURED_MS[("burn", precision)], H100_MEASURED_MS[("pytorch", precision)]
        print(f"| H100 measured 2026-11-27, ms | {mb:.1f} | {mt:.1f} | {ratio(mb, mt)} |")
        print("\nBy kind of kernel (kernels a step, GB a step):\n")
        print("| kind | burn kernels | burn GB | PyTorch kernels | PyTorch GB | GB burn - PyTorch |")
        print("|---|---:|---:|---:|---:|---:|")
        gbn, gtn = by_group(burn["kernels"]), by_group(torch["kernels"])
        for g in sorted(set(gbn) | set(gtn), key=lambda g: -(gbn[g][1] - gtn[g][1])):
            print(f"| {g} | {gbn[g][0]:,.0f} | {gb(gbn[g][1])} | {gtn[g][0]:,.0f} | {gb(gtn[g][1])} | "
                  f"{(gbn[g][1] - gtn[g][1]) / 1e9:+,.2f} |")
        if burn_phases:
            print("\nBy phase (burn's from a run synchronised between phases, which ends fusion's "
                  "groups there):\n")
            print("| phase | burn kernels | burn GB | PyTorch kernels | PyTorch GB | burn's largest |")
            print("|---|---:|---:|---:|---:|---|")
            for phase in PHASES:
                pb, pt = burn_phases["phases"][phase], torch["phases"][phase]
                kb, yb = totals(pb)
                kt, yt = totals(pt)
                top = sorted(pb.items(), key=lambda kv: -kv[1][1])[:3]
                tops = ", ".join(f"{n} {c:,.0f}x {gb(b)} GB" for n, (c, b) in top)
                print(f"| {phase} | {kb:,.0f} | {gb(yb)} | {kt:,.0f} | {gb(yt)} | {tops} |")
        print("\nburn's kernels by bytes (top 12):\n")
        print("| kernel | launches | GB |")
        print("|---|---:|---:|")
        for n, (c, b) in sorted(burn["kernels"].items(), key=lambda kv: -kv[1][1])[:12]:
            print(f"| {n} | {c:,.0f} | {gb(b)} |")
        print("\nPyTorch's operators by bytes (top 12):\n")
        print("| operator | launches | GB |")
        print("|---|---:|---:|")
        for n, (c, b) in sorted(torch["kernels"].items(), key=lambda kv: -kv[1][1])[:12]:
            print(f"| {n} | {c:,.0f} | {gb(b)} |")
    return "\n".join(lines).strip("\n") + "\n"


def main(argv):
    if len(argv) == 3 and argv[0] == "run":
        run(argv[1], argv[2])
        print(render(argv[2]), end="")
    elif len(argv) == 2 and argv[0] == "render":
        print(render(argv[1]), end="")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
