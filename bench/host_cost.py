#!/usr/bin/env python3
"""The training step's host cost without a GPU: burn's stack beside PyTorch
eager's, per step and per operation (`make bench-host`).

burn: `chessbench bench-step --device wgpu` on Mesa's lavapipe, in the
two modes of the device handle (vendor/README.md, cubecl-common):

- `inline` (CUBECL_DEVICE_THREADS=0): burn-fusion's and CubeCL's services
  run on the thread that runs the step, so that thread does all of burn's
  host work (autodiff, fusion's planning, CubeCL's launch path, wgpu's
  command encoding), the same work it does on an H100, and nothing else;
  lavapipe runs the kernels on its own threads (llvmpipe's workers, its
  queue thread). The calling thread's CPU time per step is the host's cost
  (src/train/threads.rs). This is the row set beside PyTorch's.
- `threads` (the published default): the same work split over the step's
  thread, burn-fusion's runner (`DSU-…`) and CubeCL's (`DSD-…`), handed
  over through queues whose callers spin while they are full. The three
  threads' CPU time is reported, the spinning included: it is what the
  default costs a machine's cores, not the work.
The operations a step issues before fusion come from `bench-step
--count-ops` (the step built as on CUDA, counted on the CPU; f32 only) and
the kernels launched after fusion from `bench-step --count-kernels` (on
lavapipe), each from its own run so that counting costs no timed host time.
The counting run also picks the warm-up: the fewest steps after which no
kernel is compiled during the timed steps.

PyTorch: bench/torch_host.py, the same network and step on the `meta`
device (the dispatcher and autograd without data); its CPU time per step
is eager PyTorch's host cost, and its ATen operators per step the
operations it dispatches.

mixed bf16 is CUDA's alone; lavapipe has f16, whose operations are bf16's
(the same casts), so burn's mixed rows run f16 and PyTorch's `amp-bf16`.

With perf (Debian's linux-perf) installed, `profile` samples the host
thread of one burn step and attributes each sample to the innermost frame
of a known layer (chessbench, burn's autodiff, fusion and tensor crates,
CubeCL, wgpu, the Vulkan driver), so allocation, hashing and locking count
for the layer that called them.

    bench/host_cost.py run BIN OUT_DIR       # measure (resumes; OUT_DIR/host.jsonl)
    bench/host_cost.py profile BIN OUT_DIR [PRESET...]  # perf profile by layer and function (OUT_DIR/profile-*.txt)
    bench/host_cost.py render OUT_DIR        # Markdown table
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
BUCKETS = 32
# Batch of burn's timed steps on lavapipe: small, so the kernels' own time
# (on other threads) stays short; the host's work does not depend on it.
BURN_BATCH = 8
STEPS = {"tiny": 10, "9m": 5}
# perf's sampling rate per preset: the 9M step runs about 20 times longer
# on lavapipe, so fewer samples a second keep its record near the tiny one's.
PERF_HZ = {"tiny": 499, "9m": 47}
PRESETS = ("tiny", "9m")
PRECISIONS = (("f32", "f32", "f32"), ("mixed", "f16", "amp-bf16"))


# The device handle's modes: CUBECL_DEVICE_THREADS for each.
MODES = {"inline": "0", "threads": "1"}


def burn(binary, preset, precision, extra, device="wgpu", mode="inline"):
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
    env["CUBECL_DEVICE_THREADS"] = MODES[mode]
    cmd = [binary, "bench-step", "--model", preset, "--policy", "action_value", "--buckets", str(BUCKETS),
           "--device", device, "--precision", precision, "--batch-size", str(BURN_BATCH), "--json", *extra]
    print("==", " ".join(cmd[1:]), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def settled(binary, preset, precision, mode):
    """The fewest warm-up steps (of 2, 4, 8) after which a step compiles no
    kernel, and that run's kernel counts: lavapipe compiles each pipeline
    with LLVM on the thread that creates it, so a timed step that still
    compiles would count compilation as the host's work."""
    for warmup in (2, 4, 8):
        counted = burn(binary, preset, precision,
                       ["--steps", "2", "--warmup", str(warmup), "--count-kernels"], mode=mode)
        if counted["kernels"]["compiled_in_steps"] == 0:
            return warmup, counted
    sys.exit(f"{preset} {precision}: kernels still compile after 8 warm-up steps")


def burn_row(binary, preset, label, precision, mode):
    steps = STEPS[preset]
    warmup, kernels = settled(binary, preset, precision, mode)
    timed = burn(binary, preset, precision, ["--steps", str(steps), "--warmup", str(warmup)], mode=mode)
    host = timed.get("host_time")
    if host is None:
        sys.exit("bench-step reported no host_time (not Linux?)")
    if timed.get("device_threads") != (mode == "threads"):
        sys.exit(f"bench-step ran with device_threads {timed.get('device_threads')} where {mode} was asked "
                 "(a build without the vendored cubecl-common?)")
    # The runner threads' CPU (threads mode; none inline).
    runners = sum(t for name, t in host["others"] if name.startswith("DS"))
    ops = None
    # The operations a step issues do not depend on the device handle's
    # mode: counted once, with the inline row (the one set beside PyTorch).
    if precision == "f32" and mode == "inline":
        counted = burn(binary, preset, "f32", ["--steps", "1", "--warmup", "1", "--count-ops"], device="cpu")
        ops = counted["ops"]["launches"]
    return {"side": "burn", "mode": mode, "preset": preset, "precision": label, "measured_as": precision,
            "batch": BURN_BATCH, "steps": steps, "warmup": warmup,
            "wall_s_per_step": timed["seconds"] / steps, "host_s_per_step": host["host"],
            "runner_threads_s_per_step": runners,
            "others": host["others"], "ops_per_step": ops,
            "kernels_per_step": kernels["kernels"]["launched_per_step"],
            "attention": timed["attention"], "layers": timed["layers"], "products": timed["products"]}


def torch_row(preset, label, precision):
    cmd = [sys.executable, os.path.join(HERE, "torch_host.py"), "--preset", preset,
           "--buckets", str(BUCKETS), "--precision", precision]
    print("==", " ".join(cmd[1:]), file=sys.stderr, flush=True)
    row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return {"side": "pytorch", "preset": preset, "precision": label, "measured_as": precision,
            "batch": row["batch"], "steps": row["steps"], "wall_s_per_step": row["wall_s_per_step"],
            "host_s_per_step": row["host_s_per_step"], "ops_per_step": row["ops_per_step"],
            "torch": row["torch"]}


def run(binary, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "host.jsonl")
    done = set()
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)
            done.add((r["side"], r.get("mode"), r["preset"], r["precision"]))
    with open(path, "a") as f:
        for preset in PRESETS:
            for label, burn_precision, torch_precision in PRECISIONS:
                for mode in MODES:
                    if ("burn", mode, preset, label) not in done:
                        f.write(json.dumps(burn_row(binary, preset, label, burn_precision, mode)) + "\n")
                        f.flush()
                if ("pytorch", None, preset, label) not in done:
                    f.write(json.dumps(torch_row(preset, label, torch_precision)) + "\n")
                    f.flush()
    print(f"rows in {path}", file=sys.stderr)


# Layers of burn's stack by crate, innermost first when a frame matches
# several (a CubeCL frame inside a burn-fusion call counts for CubeCL).
LAYERS = [
    ("Vulkan driver (lavapipe)", re.compile(r"libvulkan_lvp|lvp_|vk_")),
    ("wgpu (hal, core)", re.compile(r"\bwgpu_hal::|\bwgpu_core::|\bwgpu::|\bnaga::|libvulkan\.so")),
    ("CubeCL runtime and wgpu server", re.compile(r"\bcubecl_runtime::|\bcubecl_wgpu::|\bcubecl_common::")),
    ("CubeCL kernel expansion", re.compile(r"\bcubecl_core::|\bcubecl_ir::|\bcubecl_opt::|\bcubek_")),
    ("burn-fusion", re.compile(r"\bburn_fusion::|\bburn_cubecl_fusion::")),
    ("burn-cubecl", re.compile(r"\bburn_cubecl::")),
    ("burn-autodiff", re.compile(r"\bburn_autodiff::")),
    ("burn-tensor and backend", re.compile(r"\bburn_tensor::|\bburn_backend::|\bburn_ir::|\bburn_router::|\bburn_std::")),
    ("chessbench", re.compile(r"\bchessbench::")),
]


def layer_of(frames):
    """The layer of a sample's stack (innermost frame first): the first
    frame that names one; otherwise its innermost frame's library."""
    for sym, lib in frames:
        for name, pattern in LAYERS:
            if pattern.search(sym) or pattern.search(lib):
                return name
    return "other: " + (os.path.basename(frames[0][1]) if frames else "?")


def self_of(frames):
    """Where the innermost frame is: allocation, hashing, locking, or the
    layer's own code."""
    sym = frames[0][0] if frames else ""
    if re.search(r"malloc|free|realloc|calloc|cfree|_int_|alloc::alloc|__rust_(de|re)?alloc", sym):
        return "allocation"
    if re.search(r"hash|Hash|hashbrown", sym):
        return "hashing"
    if re.search(r"mutex|Mutex|futex|lock|Lock|RwLock|parking_lot", sym):
        return "locks"
    if re.search(r"memcpy|memmove|memset", sym):
        return "memcpy/memset"
    return "own code"


def function_of(frames):
    """The innermost frame's function, generics and hashes dropped:
    `burn_fusion::stream::Foo<..>::bar::h12ab` -> `burn_fusion::stream::Foo::bar`."""
    sym = frames[0][0] if frames else "?"
    while True:
        shorter = re.sub(r"<[^<>]*>", "", sym)
        if shorter == sym:
            break
        sym = shorter
    return re.sub(r"::h[0-9a-f]{16}$", "", sym).split("+0x")[0]


def profile(binary, out_dir, presets=PRESETS):
    perf = shutil.which("perf")
    if perf is None:
        sys.exit("perf not found: install Debian's linux-perf")
    os.makedirs(out_dir, exist_ok=True)
    for preset in presets:
        data = os.path.join(out_dir, f"perf-{preset}.data")
        env = dict(os.environ)
        env.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp())
        # Inline: the host thread does all of burn's host work, and no
        # spinning on a runner's queue hides it.
        env["CUBECL_DEVICE_THREADS"] = "0"
        cmd = [perf, "record", "-q", "-e", "cpu-clock", "-F", str(PERF_HZ[preset]), "--call-graph", "dwarf,32768", "-o", data,
               binary, "bench-step", "--model", preset, "--policy", "action_value", "--buckets", str(BUCKETS),
               "--device", "wgpu", "--precision", "f32", "--batch-size", str(BURN_BATCH),
               "--steps", str(STEPS[preset]), "--warmup", "2", "--json"]
        print("==", " ".join(cmd), file=sys.stderr, flush=True)
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        host_tid = None
        script = subprocess.run([perf, "script", "-i", data, "-F", "tid,comm,ip,sym,dso"],
                                check=True, capture_output=True, text=True).stdout
        samples = parse_script(script)
        # The host is the main thread: its tid is the process id, the
        # smallest of the threads named after the binary (lavapipe's
        # workers take the process's name too; a name is 15 bytes at most).
        comm = os.path.basename(binary)[:15]
        pids = {tid for tid, c, _ in samples if c == comm}
        host_tid = min(pids) if pids else None
        by_layer = defaultdict(int)
        by_self = defaultdict(int)
        by_function = defaultdict(int)
        threads = defaultdict(int)
        for tid, comm, frames in samples:
            threads["host" if tid == host_tid else re.sub(r"\d+", "#", comm)] += 1
            if tid != host_tid:
                continue
            by_layer[layer_of(frames)] += 1
            by_self[(layer_of(frames), self_of(frames))] += 1
            by_function[function_of(frames)] += 1
        total = sum(by_layer.values()) or 1
        lines = [f"# perf profile of bench-step --model {preset} f32 on lavapipe, batch {BURN_BATCH}, "
                 "CUBECL_DEVICE_THREADS=0 (services inline): "
                 f"the host thread's samples by layer (innermost frame of a known layer; warm-up included)",
                 f"# bench-step: {json.loads(out).get('host_time')}", ""]
        for name, n in sorted(by_layer.items(), key=lambda kv: -kv[1]):
            lines.append(f"{100 * n / total:6.1f}%  {name}")
            for (layer, kind), m in sorted(by_self.items(), key=lambda kv: -kv[1]):
                if layer == name:
                    lines.append(f"          {100 * m / total:6.1f}%  {kind}")
        lines.append("")
        lines.append("# the host thread's 20 busiest functions (innermost frame)")
        for name, n in sorted(by_function.items(), key=lambda kv: -kv[1])[:20]:
            lines.append(f"{100 * n / total:6.1f}%  {name}")
        lines.append("")
        lines.append("# samples by thread (all threads)")
        for name, n in sorted(threads.items(), key=lambda kv: -kv[1]):
            lines.append(f"{n:8d}  {name}")
        text = "\n".join(lines) + "\n"
        open(os.path.join(out_dir, f"profile-{preset}.txt"), "w").write(text)
        print(text)
        os.remove(data)


def parse_script(text):
    """perf script's samples: (tid, comm, [(symbol, library), ...] innermost first)."""
    samples = []
    for block in text.split("\n\n"):
        lines = [l for l in block.splitlines() if l.strip()]
        if not lines:
            continue
        head = lines[0].split()
        try:
            tid = int(head[1]) if not head[0].isdigit() else int(head[0])
        except (IndexError, ValueError):
            continue
        comm = head[0] if not head[0].isdigit() else (head[1] if len(head) > 1 else "")
        frames = []
        for l in lines[1:]:
            m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", l)
            if m:
                frames.append((m.group(1), m.group(2)))
        samples.append((tid, comm, frames))
    return samples


def render(out_dir):
    rows = [json.loads(l) for l in open(os.path.join(out_dir, "host.jsonl"))]
    get = {(r["side"], r.get("mode"), r["preset"], r["precision"]): r for r in rows}
    print("| model | precision | burn host ms/step (inline) | burn operations / kernels a step "
          "| burn us per operation / kernel | PyTorch eager host ms/step (meta) | PyTorch operators a step "
          "| PyTorch us per operator | burn / PyTorch host | threads mode: step's thread + runners ms/step "
          "| wall s/step inline / threads |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for preset in PRESETS:
        for label, _, _ in PRECISIONS:
            b, t = get.get(("burn", "inline", preset, label)), get.get(("pytorch", None, preset, label))
            th = get.get(("burn", "threads", preset, label))
            if not b or not t:
                continue
            ops = b["ops_per_step"]
            per_op = f"{b['host_s_per_step'] / ops * 1e6:.1f}" if ops else "-"
            threads = (f"{th['host_s_per_step'] * 1e3:.1f} + {th['runner_threads_s_per_step'] * 1e3:.1f}"
                       if th else "-")
            walls = f"{b['wall_s_per_step']:.3f} / {th['wall_s_per_step']:.3f}" if th else "-"
            print(f"| {preset} | {label} | {b['host_s_per_step'] * 1e3:.1f} | {ops or '-'} / "
                  f"{b['kernels_per_step']:.0f} | {per_op} / {b['host_s_per_step'] / b['kernels_per_step'] * 1e6:.1f} "
                  f"| {t['host_s_per_step'] * 1e3:.2f} | {t['ops_per_step']} "
                  f"| {t['host_s_per_step'] / t['ops_per_step'] * 1e6:.1f} "
                  f"| **{b['host_s_per_step'] / t['host_s_per_step']:.2f}x** | {threads} | {walls} |")


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "profile":
        profile(sys.argv[2], sys.argv[3], tuple(sys.argv[4:]) or PRESETS)
    elif len(sys.argv) >= 3 and sys.argv[1] == "render":
        render(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
