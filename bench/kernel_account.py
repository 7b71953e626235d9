#!/usr/bin/env python3
"""Where a training step's GPU time goes, kernel by kernel, as Markdown.

Reads a per-kernel record of N timed steps and prints milliseconds and
launches per step by group of kernels (matrix products, attention, layer
norms, SwiGLU, softmax, gathers, reductions, casts, copies, optimiser,
element-wise, other) and the top kernels by time:

    bench/kernel_account.py --nsys account_cuda_gpu_kern_sum.csv --steps 10
    bench/kernel_account.py --torch account.csv --steps 10
    bench/kernel_account.py --cubecl account-cubecl.log --skip-syncs 1 --steps 10

--nsys: `nsys stats -r cuda_gpu_kern_sum -f csv` of a capture of the timed
steps (bench/gpu.sh's `account` part where the machine has nsys).

--torch: the CSV of `bench/torch_reference.py --profile-out`
(name,calls,total_us).

--cubecl: CubeCL's profile log (cubecl-runtime 0.10, profiling logger at
level basic or medium: `[profiling.logger] level = "basic"` and `file` in
cubecl.toml, or CUBECL_DEBUG_OPTION=profile with CUBECL_DEBUG_LOG=FILE).
CubeCL writes one line per kernel launch, `| {duration:<10?} | {name}`
(the duration in Rust's Debug format: 12.5µs, 1.25ms; the name is the
kernel's type name shortened: `ElemwiseFuse | CudaRuntime`), and at every
device sync a summary table of the kernels since the previous one (name,
total duration, number of launches, share). The tables split the log:
--skip-syncs K keeps the kernels launched after the K-th table (`chessbench
bench-step` syncs once after its warm-up steps and once after its timed
steps, so K = 1 keeps the timed steps), --skip-launches N then drops N more
launches. Rows come from the per-launch lines (a process may exit before
its last table is written); each table that closes a kept stretch is
checked against them.

CubeCL times each launch on the host: a device sync, the clock, the launch,
a device sync, the clock. A kernel's time therefore includes its launch and
the sync's latency (a few µs per launch, most of a small kernel's time),
and the step runs slower than without the profiler; anything put on the
stream outside CubeCL (the cuBLASLt products) and host time between
launches are in no kernel's time. --wall-ms (the step's wall time in the
same run) prints what the kernels leave out. A name is the kernel's Rust
type, not its instance: every fused element-wise kernel of burn's fusion
(the optimiser's included) is one row `ElemwiseFuse`, and types defined at
run time (f32, bf16) are not in it.

Groups are assigned from kernel names by the patterns in GROUPS (first
match wins, on the lower-cased name, so CubeCL's `LayerNormForwardKernel`
and a `layer_norm_forward_kernel` both match `layer_?norm`); the top-kernel
table shows the names, so a misgrouped kernel is visible.
"""

import argparse
import csv
import re
import sys

GROUPS = [
    # cuBLAS/cuBLASLt/CUTLASS kernels (nsys, torch); CubeCL never sees them.
    ("matrix products (vendor)",
     r"gemm|cutlass|xmma|nvjet|cublas|sm\d\d_|ampere_|hopper_|wgmma|aten::(add|b)?mm\b"),
    # chessbench's fused kernels (AttentionForwardKernel, AttentionDqKernel,
    # AttentionDkdvKernel), cubek-attention's, PyTorch's SDPA/flash.
    ("attention (fused)", r"flash|fmha|sdpa|attention"),
    # cubek-matmul (MatmulEntry, also burn-cubecl-fusion's fused products).
    ("matrix products (CubeCL)", r"matmul|cmma|wmma|(?<![a-z])mma"),
    # Fused layer norm forward/backward; column sums are its dgamma/dbeta
    # (sums over rows); PyTorch's GammaBetaBackward likewise.
    ("layer norm", r"layer_?norm|layernorm|rms_?norm|gammabeta|gamma_beta|column_?sums|norm_"),
    ("SwiGLU (fused)", r"swiglu"),
    ("softmax", r"softmax"),
    ("optimiser", r"adam|foreach|lerp|multi_tensor|clip"),
    # Embedding lookup and its gradient, the loss's target gather.
    ("gather and scatter", r"gather|scatter|select|embedding|index"),
    # cubek-reduce (ReduceKernel, SharedSumKernel), burn-cubecl-fusion's
    # ReduceKernelFused / ReduceKernelBroadcasted.
    ("reductions", r"reduce|sum|mean|argmax|argmin|max_|norm|cumulative|cumsum"),
    ("casts", r"(?<!broad)cast|_to_copy"),
    ("copies and layout",
     r"copy|contiguous|cat|slice|memcpy|memset|transpose|permute|fill|fullkernel|repeat|flip|identity|broadcast"),
    # burn-cubecl-fusion's ElemwiseFuse (most of burn's step, the optimiser
    # included), burn-cubecl's unary/binary kernels, PyTorch's and Triton's.
    ("element-wise (fused)",
     r"fuse|elemwise|elementwise|triton|vectorized|unrolled|unary|binop|binary|kernelscalar|kernelcmp|"
     r"kernelpredicate|mask|where|clamp"),
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


# Rust's Debug of a Duration: "850ns", "12.5µs", "1.25ms", "1.000000001s".
DURATION = r"(\d+(?:\.\d+)?)(ns|µs|μs|us|ms|s)"
UNIT_MS = {"ns": 1e-6, "µs": 1e-3, "μs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
# cubecl-runtime logging/server.rs: format!("| {duration:<10?} | {name}")
LAUNCH_LINE = re.compile(rf"^\| {DURATION} *\| (.+?)\s*$")
# logging/profiling.rs, a row of the summary table:
# "| {name:<w} | {duration:<w} | {num_computed:<w} | {ratio} % |"
SUMMARY_ROW = re.compile(rf"^\| (.+?) +\| {DURATION} +\| (\d+) +\| (\d+) % +\|\s*$")


def to_ms(value, unit):
    return float(value) * UNIT_MS[unit]


def parse_cubecl(lines):
    """CubeCL's profile log as stretches between device syncs.

    Returns a list of (launches, table): launches the (name, ms) of each
    per-launch line of the stretch; table the summary written at the sync
    that closed it, {"rows": [(name, launches, ms)], "total": (launches,
    ms)}, or None for a last stretch that no table closed."""
    stretches = []
    launches = []
    table = None
    for line in lines:
        line = line.rstrip("\r\n")
        if table is not None:
            if line.startswith("|⎯"):  # the table's last line
                stretches.append((launches, table))
                launches, table = [], None
                continue
            m = SUMMARY_ROW.match(line)
            if m:
                name, value, unit, count = m.group(1).rstrip(), m.group(2), m.group(3), int(m.group(4))
                if name == "Total":
                    table["total"] = (count, to_ms(value, unit))
                else:
                    table["rows"].append((name, count, to_ms(value, unit)))
            continue  # header, "|⎼" rules
        if line.startswith("|⎺"):  # a summary table starts
            table = {"rows": [], "total": None}
            continue
        m = LAUNCH_LINE.match(line)
        if m:
            launches.append((m.group(3), to_ms(m.group(1), m.group(2))))
    if table is not None:  # cut off inside a table
        stretches.append((launches, table))
    elif launches:
        stretches.append((launches, None))
    return stretches


def read_cubecl(path, skip_syncs=0, skip_launches=0):
    """(name, launches, total ms) of the launches after the first
    skip_syncs syncs and skip_launches more, and notes on what was kept."""
    with open(path, encoding="utf-8", errors="replace") as f:
        stretches = parse_cubecl(f)
    tables = sum(1 for _, t in stretches if t is not None)
    all_launches = sum(len(ls) for ls, _ in stretches)
    if not stretches:
        raise SystemExit(f"{path}: no CubeCL profile lines (is the profiling logger on, at level basic or medium?)")
    if skip_syncs > tables:
        raise SystemExit(f"{path}: --skip-syncs {skip_syncs} but the log has {tables} sync tables")
    kept = stretches[skip_syncs:]
    notes = []
    launches = [x for ls, _ in kept for x in ls]
    if launches:
        dropped = sum(len(ls) for ls, _ in stretches[:skip_syncs]) + min(skip_launches, len(launches))
        launches = launches[skip_launches:]
        totals = {}
        for name, ms in launches:
            t = totals.setdefault(name, [0, 0.0])
            t[0] += 1
            t[1] += ms
        rows = [(name, calls, ms) for name, (calls, ms) in totals.items()]
        notes.append(
            f"CubeCL log: {all_launches} launches, {tables} sync tables; kept {len(launches)} launches "
            f"after sync {skip_syncs}" + (f" and {skip_launches} more launches" if skip_launches else "")
            + f" ({dropped} dropped)."
        )
        # Each kept stretch that a table closed: the table against the lines.
        for i, (ls, table) in enumerate(kept):
            if table is None or table["total"] is None:
                continue
            count, ms = table["total"]
            line_ms = sum(x for _, x in ls)
            if count != len(ls) or abs(ms - line_ms) > 1e-3 * max(ms, 1e-9) + 1e-6:
                notes.append(
                    f"Warning: sync table {skip_syncs + i + 1} says {count} launches, {ms:.3f} ms; "
                    f"its lines {len(ls)} launches, {line_ms:.3f} ms."
                )
    else:
        # No per-launch lines: the tables' rows.
        if skip_launches:
            raise SystemExit(f"{path}: --skip-launches needs per-launch lines; the log has none")
        totals = {}
        for _, table in kept:
            for name, calls, ms in table["rows"] if table else []:
                t = totals.setdefault(name, [0, 0.0])
                t[0] += calls
                t[1] += ms
        rows = [(name, calls, ms) for name, (calls, ms) in totals.items()]
        notes.append(f"CubeCL log: no per-launch lines; the rows of sync tables {skip_syncs + 1}..{tables}.")
    if not rows:
        raise SystemExit(f"{path}: no launches after --skip-syncs {skip_syncs} --skip-launches {skip_launches}")
    return rows, notes


def display_name(name, width=90):
    short = re.sub(r" \| CudaRuntime$", "", name)
    short = short if len(short) <= width else short[: width - 3] + "..."
    return short.replace("|", "\\|")


def account(rows, steps, title="", top=25, notes=(), wall_ms=None, cubecl=False):
    """The Markdown account of rows (name, launches, total ms) over steps."""
    total = sum(ms for _, _, ms in rows) or 1e-9
    launches = sum(c for _, c, _ in rows)
    per = lambda ms: ms / steps
    us_per = lambda ms, calls: 1e3 * ms / max(calls, 1)
    groups = {}
    for name, calls, ms in rows:
        g = groups.setdefault(group_of(name), [0.0, 0, 0])
        g[0] += ms
        g[1] += calls
        g[2] += 1
    out = [f"### Kernel account: {title} ({steps} steps)", ""]
    out.append("| group | ms/step | share | kernels | launches/step | µs/launch |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for group, (ms, calls, kinds) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        out.append(f"| {group} | {per(ms):.3f} | {100 * ms / total:.1f}% | {kinds} | {calls / steps:.1f} "
                   f"| {us_per(ms, calls):.1f} |")
    label = "CubeCL-timed kernels" if cubecl else "GPU busy"
    out.append(f"| **{label}** | **{per(total):.3f}** | 100% | {len(rows)} | {launches / steps:.1f} "
               f"| {us_per(total, launches):.1f} |")
    out.append("")
    if wall_ms is not None:
        rest = wall_ms - per(total)
        out.append(f"Step wall time in this run: {wall_ms:.3f} ms; the kernels' times cover "
                   f"{per(total):.3f} ms ({100 * per(total) / max(wall_ms, 1e-9):.1f}%), "
                   f"{rest:.3f} ms is in no kernel's time"
                   + (" (cuBLASLt products, host work between launches)." if cubecl else "."))
        out.append("")
    if cubecl:
        out.append("CubeCL times each launch on the host between two device syncs: launch cost and sync "
                   "latency are in every kernel's time, the step runs slower than unprofiled, and what "
                   "runs outside CubeCL (cuBLASLt's products) is not here.")
        out.append("")
    for note in notes:
        out.append(note)
        out.append("")
    out.append(f"Top {top} kernels:")
    out.append("")
    out.append("| kernel | group | ms/step | share | launches/step | µs/launch |")
    out.append("|---|---|---:|---:|---:|---:|")
    for name, calls, ms in sorted(rows, key=lambda r: -r[2])[:top]:
        out.append(f"| `{display_name(name)}` | {group_of(name)} | {per(ms):.3f} | {100 * ms / total:.1f}% "
                   f"| {calls / steps:.1f} | {us_per(ms, calls):.1f} |")
    out.append("")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--nsys", metavar="CSV")
    src.add_argument("--torch", metavar="CSV")
    src.add_argument("--cubecl", metavar="LOG", help="CubeCL's profile log")
    ap.add_argument("--steps", type=int, required=True, help="steps the kept record covers")
    ap.add_argument("--skip-syncs", type=int, default=0, metavar="K",
                    help="--cubecl: keep the launches after the K-th sync table (bench-step: 1)")
    ap.add_argument("--skip-launches", type=int, default=0, metavar="N",
                    help="--cubecl: then drop N more launches")
    ap.add_argument("--wall-ms", type=float, metavar="MS", help="the step's wall time in the same run")
    ap.add_argument("--title", default="")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    notes = []
    if args.cubecl:
        rows, notes = read_cubecl(args.cubecl, args.skip_syncs, args.skip_launches)
    elif args.nsys:
        rows = read_nsys(args.nsys)
    else:
        rows = read_torch(args.torch)
    sys.stdout.write(account(rows, args.steps, args.title, args.top, notes, args.wall_ms, bool(args.cubecl)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
