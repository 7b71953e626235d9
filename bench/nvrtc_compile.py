#!/usr/bin/env python3
"""NVRTC's compile time for the project's CUDA kernels, on the CPU: a
regression check of a GPU process's cold start that needs no GPU.

Compiles every `.cu` file of DIR (the CUDA C cubecl-cuda hands NVRTC for
the kernel variants the 9M step runs: `make bench-nvrtc` writes them) with
NVRTC from the `nvidia-cuda-nvrtc` wheel, as cubecl-cuda does
(`--gpu-architecture=sm_90a`, the CUDA headers, `-lineinfo`): once to the
card's machine code (a CUBIN, what chessbench's cubecl-cuda loads) and
once to PTX only (`compute_90a`, which the driver must still assemble when
it loads it). Prints one JSON line per kernel and a total:

    bench/nvrtc_compile.py bench-data/nvrtc [--repeat 3]

Times are the median of --repeat compilations, in seconds.
"""

import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import time


def nvrtc_paths():
    import nvidia

    for root in nvidia.__path__:
        for sub in ("cu13", "cu12", "cuda_nvrtc"):
            lib = sorted(glob.glob(os.path.join(root, sub, "lib", "libnvrtc.so*")))
            include = os.path.join(root, sub, "include")
            if lib and os.path.exists(os.path.join(include, "cuda_bf16.h")):
                return lib[0], include
    sys.exit("no NVRTC: pip install nvidia-cuda-nvrtc (and the CUDA headers' wheel, nvidia-cuda-runtime)")


def compile_once(nvrtc, source, options):
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source, None, 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    start = time.perf_counter()
    status = nvrtc.nvrtcCompileProgram(prog, len(options), opts)
    seconds = time.perf_counter() - start
    size = ctypes.c_size_t()
    if status != 0:
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        sys.exit(f"NVRTC failed ({status}):\n{log.value.decode(errors='replace')[:4000]}")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--arch", default="90a")
    args = ap.parse_args()
    lib, include = nvrtc_paths()
    nvrtc = ctypes.CDLL(lib)
    version = (ctypes.c_int(), ctypes.c_int())
    nvrtc.nvrtcVersion(ctypes.byref(version[0]), ctypes.byref(version[1]))
    files = sorted(glob.glob(os.path.join(args.dir, "*.cu")))
    if not files:
        sys.exit(f"no .cu files in {args.dir}")
    common = [f"--include-path={include}", "-lineinfo"]
    cccl = os.path.join(include, "cccl")
    if os.path.isdir(cccl):
        common.append(f"--include-path={cccl}")
    totals = {"cubin": 0.0, "ptx": 0.0}
    for path in files:
        source = open(path, "rb").read()
        row = {"kernel": os.path.basename(path)[:-3]}
        for kind, arch in (("cubin", f"sm_{args.arch}"), ("ptx", f"compute_{args.arch}")):
            times = [compile_once(nvrtc, source, [f"--gpu-architecture={arch}"] + common) for _ in range(args.repeat)]
            row[f"{kind}_s"] = round(statistics.median(times), 4)
            totals[kind] += row[f"{kind}_s"]
        print(json.dumps(row), flush=True)
    print(json.dumps({"kernel": "total", "kernels": len(files), "cubin_s": round(totals["cubin"], 3),
                      "ptx_s": round(totals["ptx"], 3), "nvrtc": f"{version[0].value}.{version[1].value}",
                      "arch": args.arch}))


if __name__ == "__main__":
    main()
