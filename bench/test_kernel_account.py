#!/usr/bin/env python3
"""Tests of bench/kernel_account.py: python3 bench/test_kernel_account.py

The CubeCL excerpt is what cubecl-runtime 0.10.0 writes to its profiling
log: a line per launch from logging/server.rs
(`format!("| {duration:<10?} | {name}")`) and, at each device sync, the
summary table of logging/profiling.rs (`impl Display for Profiled`), here
for a set-up stretch (three launches, compiling) closed by the warm-up's
sync and two timed steps of eight launches closed by the last sync. It was
produced by a copy of those two formatting routines; Rust's Debug of a
Duration gives 900ns, 14.25µs (U+00B5), 1.701ms, 1.25s.
"""

import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_account as ka  # noqa: E402

CUBECL_LOG = """| 1.5ms      | PrngKernel | CudaRuntime
| 1.25s      | ElemwiseFuse | CudaRuntime
| 120ms      | AttentionForwardKernel | CudaRuntime
|⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺| 
| Name                                 | Duration | Num Computed | Ratio |
|⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼| 
| ElemwiseFuse | CudaRuntime           | 1.25s    | 1            | 91 %  |
| AttentionForwardKernel | CudaRuntime | 120ms    | 1            | 8 %   |
| PrngKernel | CudaRuntime             | 1.5ms    | 1            | 0 %   |
|⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼| 
| Total                                | 1.3715s  | 3            | 100 % |
|⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯| 

| 14.25µs    | GatherKernel | CudaRuntime
| 20µs       | LayerNormForwardKernel | CudaRuntime
| 850.5µs    | AttentionForwardKernel | CudaRuntime
| 11.5µs     | ElemwiseFuse | CudaRuntime
| 35µs       | SwigluBackwardKernel | CudaRuntime
| 22µs       | ReduceKernelBroadcasted | CudaRuntime
| 900ns      | UnaryNumeric | f32 | CubeTensor | Copy | CudaRuntime
| 12µs       | ElemwiseFuse | CudaRuntime
| 14.25µs    | GatherKernel | CudaRuntime
| 20µs       | LayerNormForwardKernel | CudaRuntime
| 850.5µs    | AttentionForwardKernel | CudaRuntime
| 11.5µs     | ElemwiseFuse | CudaRuntime
| 35µs       | SwigluBackwardKernel | CudaRuntime
| 22µs       | ReduceKernelBroadcasted | CudaRuntime
| 900ns      | UnaryNumeric | f32 | CubeTensor | Copy | CudaRuntime
| 12µs       | ElemwiseFuse | CudaRuntime
|⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺⎺| 
| Name                                                 | Duration | Num Computed | Ratio |
|⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼| 
| AttentionForwardKernel | CudaRuntime                 | 1.701ms  | 2            | 88 %  |
| SwigluBackwardKernel | CudaRuntime                   | 70µs     | 2            | 3 %   |
| ElemwiseFuse | CudaRuntime                           | 47µs     | 4            | 2 %   |
| ReduceKernelBroadcasted | CudaRuntime                | 44µs     | 2            | 2 %   |
| LayerNormForwardKernel | CudaRuntime                 | 40µs     | 2            | 2 %   |
| GatherKernel | CudaRuntime                           | 28.5µs   | 2            | 1 %   |
| UnaryNumeric | f32 | CubeTensor | Copy | CudaRuntime | 1.8µs    | 2            | 0 %   |
|⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼⎼| 
| Total                                                | 1.9323ms | 16           | 100 % |
|⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯⎯| 

"""

# nsys stats -r cuda_gpu_kern_sum -f csv, 10 steps.
NSYS_CSV = """Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
62.5,5000000,20,250000.0,250000.0,240000,260000,5000.0,sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_cublas
25.0,2000000,10,200000.0,200000.0,190000,210000,5000.0,attention_forward_kernel_f32
12.5,1000000,40,25000.0,25000.0,24000,26000,500.0,"void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel, at::detail::Array<char*, 2> >(int, T2, T3)"
"""

# bench/torch_reference.py --profile-out, 10 steps.
TORCH_CSV = """name,calls,total_us
triton_poi_fused_mul_silu_0,80,1200.000
triton_per_fused_native_layer_norm_backward_3,40,800.000
sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas,160,9000.000
"""


def write(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def table_rows(markdown, header):
    """The rows of the Markdown table whose header starts with header."""
    lines = markdown.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(header))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").replace("\\|", "\u2502").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


class Tmp(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()


class ParseCubecl(Tmp):
    def test_stretches_and_tables(self):
        stretches = ka.parse_cubecl(CUBECL_LOG.splitlines(True))
        self.assertEqual([len(ls) for ls, _ in stretches], [3, 16])
        setup, timed = stretches
        self.assertEqual(setup[0][0], ("PrngKernel | CudaRuntime", 1.5))
        self.assertEqual(setup[0][1], ("ElemwiseFuse | CudaRuntime", 1250.0))
        self.assertEqual(setup[1]["total"], (3, 1371.5))
        self.assertAlmostEqual(timed[0][0][1], 0.01425)
        self.assertEqual(timed[0][6], ("UnaryNumeric | f32 | CubeTensor | Copy | CudaRuntime", 0.0009))
        rows = {name: (n, ms) for name, n, ms in timed[1]["rows"]}
        self.assertEqual(len(rows), 7)
        self.assertEqual(rows["UnaryNumeric | f32 | CubeTensor | Copy | CudaRuntime"][0], 2)
        self.assertAlmostEqual(rows["UnaryNumeric | f32 | CubeTensor | Copy | CudaRuntime"][1], 0.0018)
        self.assertEqual(rows["ElemwiseFuse | CudaRuntime"][0], 4)
        self.assertAlmostEqual(rows["ElemwiseFuse | CudaRuntime"][1], 0.047)
        self.assertEqual(timed[1]["total"][0], 16)
        self.assertAlmostEqual(timed[1]["total"][1], 1.9323)

    def test_units(self):
        for text, ms in [("900ns", 0.0009), ("14.25µs", 0.01425), ("14.25us", 0.01425), ("1.701ms", 1.701),
                         ("1.000000001s", 1000.000001)]:
            (ls, _), = ka.parse_cubecl([f"| {text:<10} | K | CudaRuntime\n"])
            self.assertAlmostEqual(ls[0][1], ms, places=9)

    def test_other_lines_ignored(self):
        # CUBECL_DEBUG_LOG=FILE sends compilation (kernel sources) and
        # autotune lines to the same file.
        noise = ("Fastest result ElemwiseFuse-FuseKey. Context: x\n"
                 "    || (idx < len)\n| Name | not a table\nextern \"C\" __global__ void kernel() {\n")
        lines = CUBECL_LOG.splitlines(True)
        mixed = lines[:2] + [noise] + lines[2:20] + [noise] + lines[20:]
        self.assertEqual(ka.parse_cubecl("".join(mixed).splitlines(True)),
                         ka.parse_cubecl(lines))


class ReadCubecl(Tmp):
    def test_timed_steps(self):
        rows, notes = ka.read_cubecl(write(self.tmp, "a.log", CUBECL_LOG), skip_syncs=1)
        rows = {name: (n, round(ms, 6)) for name, n, ms in rows}
        self.assertEqual(rows, {
            "GatherKernel | CudaRuntime": (2, 0.0285),
            "LayerNormForwardKernel | CudaRuntime": (2, 0.04),
            "AttentionForwardKernel | CudaRuntime": (2, 1.701),
            "ElemwiseFuse | CudaRuntime": (4, 0.047),
            "SwigluBackwardKernel | CudaRuntime": (2, 0.07),
            "ReduceKernelBroadcasted | CudaRuntime": (2, 0.044),
            "UnaryNumeric | f32 | CubeTensor | Copy | CudaRuntime": (2, 0.0018),
        })
        self.assertIn("19 launches, 2 sync tables; kept 16 launches after sync 1 (3 dropped)", notes[0])
        self.assertFalse([n for n in notes if n.startswith("Warning")])

    def test_whole_log(self):
        rows, _ = ka.read_cubecl(write(self.tmp, "a.log", CUBECL_LOG))
        self.assertEqual(sum(n for _, n, _ in rows), 19)
        self.assertAlmostEqual(sum(ms for _, _, ms in rows), 1371.5 + 1.9323)

    def test_last_table_not_written(self):
        # The process may exit before its logger thread writes the last table.
        cut = CUBECL_LOG[: CUBECL_LOG.rindex("|\u23ba")]
        a, _ = ka.read_cubecl(write(self.tmp, "a.log", CUBECL_LOG), skip_syncs=1)
        b, notes = ka.read_cubecl(write(self.tmp, "b.log", cut), skip_syncs=1)
        self.assertEqual(sorted(a), sorted(b))
        self.assertIn("1 sync tables", notes[0])

    def test_tables_only(self):
        tables = "".join(l for l in CUBECL_LOG.splitlines(True) if not ka.LAUNCH_LINE.match(l))
        rows, notes = ka.read_cubecl(write(self.tmp, "a.log", tables), skip_syncs=1)
        self.assertEqual(sum(n for _, n, _ in rows), 16)
        self.assertAlmostEqual(sum(ms for _, _, ms in rows), 1.9323)
        self.assertIn("no per-launch lines", notes[0])

    def test_skip_launches(self):
        rows, _ = ka.read_cubecl(write(self.tmp, "a.log", CUBECL_LOG), skip_syncs=1, skip_launches=8)
        self.assertEqual(sum(n for _, n, _ in rows), 8)
        rows, _ = ka.read_cubecl(write(self.tmp, "a.log", CUBECL_LOG), skip_launches=3)
        self.assertEqual(sum(n for _, n, _ in rows), 16)

    def test_table_disagreeing_with_lines(self):
        log = CUBECL_LOG.replace("| 850.5\u00b5s    | AttentionForwardKernel | CudaRuntime\n", "", 1)
        _, notes = ka.read_cubecl(write(self.tmp, "a.log", log), skip_syncs=1)
        self.assertTrue(any(n.startswith("Warning: sync table 2 says 16 launches") for n in notes), notes)

    def test_errors(self):
        with self.assertRaises(SystemExit):
            ka.read_cubecl(write(self.tmp, "a.log", CUBECL_LOG), skip_syncs=3)
        with self.assertRaises(SystemExit):
            ka.read_cubecl(write(self.tmp, "e.log", "compiling\n"))


class Groups(unittest.TestCase):
    def test_names(self):
        cases = {
            # CubeCL's shortened type names (PascalCase kernel structs)
            "AttentionForwardKernel | CudaRuntime": "attention (fused)",
            "AttentionDqKernel | CudaRuntime": "attention (fused)",
            "AttentionDkdvKernel | CudaRuntime": "attention (fused)",
            "LayerNormForwardKernel | CudaRuntime": "layer norm",
            "LayerNormBackwardKernel | CudaRuntime": "layer norm",
            "ColumnSumsKernel | CudaRuntime": "layer norm",
            "SwigluForwardKernel | CudaRuntime": "SwiGLU (fused)",
            "SwigluBackwardKernel | CudaRuntime": "SwiGLU (fused)",
            "MatmulEntry | TensorArgs | CudaRuntime": "matrix products (CubeCL)",
            "ElemwiseFuse | CudaRuntime": "element-wise (fused)",
            "ReduceKernelFused | CudaRuntime": "reductions",
            "ReduceKernelBroadcasted | CudaRuntime": "reductions",
            "ReduceKernel | TensorArgs | CudaRuntime": "reductions",
            "SharedSumKernel | CudaRuntime": "reductions",
            "CastElement | CudaRuntime": "casts",
            "BoolCastKernel | CudaRuntime": "casts",
            "CopyKernel | CudaRuntime": "copies and layout",
            "CopyKernelPacked | CudaRuntime": "copies and layout",
            "UnaryNumeric | f32 | CubeTensor | Copy | CudaRuntime": "copies and layout",
            "SliceAssignKernel | CudaRuntime": "copies and layout",
            "BroadcastKernel | CudaRuntime": "copies and layout",
            "GatherKernel | CudaRuntime": "gather and scatter",
            "SelectKernel | CudaRuntime": "gather and scatter",
            "SelectAssignKernel | CudaRuntime": "gather and scatter",
            "ScatterKernel | CudaRuntime": "gather and scatter",
            "KernelBinop | CudaRuntime": "element-wise (fused)",
            "MaskWhereKernel | CudaRuntime": "element-wise (fused)",
            "LayerNormGammaKernel | CudaRuntime": "layer norm",
            "PrngKernel | CudaRuntime": "other",
            # snake-case names (CUDA entry points, nsys)
            "layer_norm_forward_kernel": "layer norm",
            "swiglu_backward_kernel": "SwiGLU (fused)",
            "column_sums_kernel": "layer norm",
            "attention_dkdv_kernel_f32": "attention (fused)",
            # vendor and PyTorch names
            "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_cublas": "matrix products (vendor)",
            "nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNT": "matrix products (vendor)",
            "triton_poi_fused_mul_silu_0": "element-wise (fused)",
            "triton_red_fused_sum_1": "reductions",
            "triton_per_fused__log_softmax_2": "softmax",
            "triton_poi_fused__to_copy_3": "casts",
            "triton_poi_fused_embedding_dense_backward_4": "gather and scatter",
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>": "copies and layout",
            "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimiser",
        }
        for name, group in cases.items():
            self.assertEqual(ka.group_of(name), group, name)


class Account(Tmp):
    def test_cubecl_per_step(self):
        rows, notes = ka.read_cubecl(write(self.tmp, "a.log", CUBECL_LOG), skip_syncs=1)
        md = ka.account(rows, 2, "burn 9M f32", notes=notes, wall_ms=1.5, cubecl=True)
        groups = table_rows(md, "| group |")
        # ms/step, share, kernels, launches/step, µs/launch
        self.assertEqual(groups["attention (fused)"], ["0.851", "88.0%", "1", "1.0", "850.5"])
        self.assertEqual(groups["element-wise (fused)"], ["0.024", "2.4%", "1", "2.0", "11.8"])
        self.assertEqual(groups["copies and layout"], ["0.001", "0.1%", "1", "1.0", "0.9"])
        self.assertEqual(groups["**CubeCL-timed kernels**"], ["**0.966**", "100%", "7", "8.0", "120.8"])
        self.assertEqual(list(groups)[0], "attention (fused)")  # largest first
        self.assertEqual(len(groups), 8)
        self.assertIn("Step wall time in this run: 1.500 ms; the kernels' times cover 0.966 ms (64.4%), "
                      "0.534 ms is in no kernel's time (cuBLASLt products", md)
        top = table_rows(md, "| kernel |")
        self.assertEqual(top["`UnaryNumeric \u2502 f32 \u2502 CubeTensor \u2502 Copy`"],
                         ["copies and layout", "0.001", "0.1%", "1.0", "0.9"])
        self.assertEqual(list(top)[0], "`AttentionForwardKernel`")

    def test_nsys(self):
        rows = ka.read_nsys(write(self.tmp, "k.csv", NSYS_CSV))
        self.assertEqual(rows[0], ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_cublas", 20, 5.0))
        self.assertTrue(rows[2][0].startswith("void at::native::vectorized_elementwise_kernel<4,"))
        groups = table_rows(ka.account(rows, 10), "| group |")
        self.assertEqual(groups["matrix products (vendor)"], ["0.500", "62.5%", "1", "2.0", "250.0"])
        self.assertEqual(groups["attention (fused)"], ["0.200", "25.0%", "1", "1.0", "200.0"])
        self.assertEqual(groups["element-wise (fused)"], ["0.100", "12.5%", "1", "4.0", "25.0"])
        self.assertEqual(groups["**GPU busy**"], ["**0.800**", "100%", "3", "7.0", "114.3"])

    def test_torch(self):
        rows = ka.read_torch(write(self.tmp, "t.csv", TORCH_CSV))
        self.assertEqual(rows[1], ("triton_per_fused_native_layer_norm_backward_3", 40, 0.8))
        groups = table_rows(ka.account(rows, 10), "| group |")
        self.assertEqual(groups["matrix products (vendor)"], ["0.900", "81.8%", "1", "16.0", "56.2"])
        self.assertEqual(groups["layer norm"], ["0.080", "7.3%", "1", "4.0", "20.0"])
        self.assertEqual(groups["element-wise (fused)"], ["0.120", "10.9%", "1", "8.0", "15.0"])

    def test_command_line(self):
        path = write(self.tmp, "a.log", CUBECL_LOG)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = ka.main(["--cubecl", path, "--skip-syncs", "1", "--steps", "2", "--title", "t", "--top", "3"])
        self.assertEqual(rc, 0)
        md = out.getvalue()
        self.assertTrue(md.startswith("### Kernel account: t (2 steps)\n"))
        self.assertEqual(len(table_rows(md, "| kernel |")), 3)
        self.assertIn("kept 16 launches after sync 1", md)


if __name__ == "__main__":
    unittest.main()
