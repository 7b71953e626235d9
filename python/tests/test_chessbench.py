"""The Python package on a real annotated run (`make test-python`).

    CHESSBENCH_RUN=runs/demo CHESSBENCH_BIN=target/test/chessbench \
        python -m unittest discover -s python/tests -v

The run must hold annotated train and test splits (the demo pipeline's).
That the batches are bit for bit the trainer's is checked from the Rust
side (tests/it/python.rs drives this package beside the library), and
that they are searchless_chess's records by tests/python/
test_searchless_loader.py; this file checks the package's own promises:
options and errors, no copies, the GIL released, shards, resuming,
PyTorch and the SQL views.
"""

import json
import os
import subprocess
import sys
import threading
import time
import unittest
from collections import Counter
from pathlib import Path

import numpy as np

import chessbench

REPO = Path(__file__).resolve().parents[2]
RUN = os.environ.get("CHESSBENCH_RUN", str(REPO / "runs" / "demo"))
BIN = os.environ.get("CHESSBENCH_BIN", str(REPO / "target" / "release" / "chessbench"))
GOLDEN = REPO / "tests" / "golden"
REQUIRED = os.environ.get("CI") == "true"


def golden(name):
    return [json.loads(line) for line in (GOLDEN / name).read_text().splitlines() if line.strip()]


def optional(module):
    """An optional dependency: missing under CI fails, elsewhere skips."""
    try:
        return __import__(module)
    except ImportError:
        if REQUIRED:
            raise
        raise unittest.SkipTest(f"{module} is not installed")


class Encodings(unittest.TestCase):
    def test_tokens_match_the_golden_vectors(self):
        for case in golden("tokens.jsonl"):
            got = chessbench.tokenize(case["fen"])
            self.assertEqual(got.dtype, np.uint8)
            self.assertEqual(got.tolist(), case["tokens"], case["fen"])

    def test_actions_are_chessbench_order(self):
        expected = (GOLDEN / "actions.txt").read_text().split()
        self.assertEqual(chessbench.actions(), expected)
        self.assertEqual(chessbench.NUM_ACTIONS, 1968)
        self.assertEqual(chessbench.action_index(expected[1234]), 1234)
        with self.assertRaisesRegex(chessbench.ChessbenchError, "a1a1"):
            chessbench.action_index("a1a1")

    def test_win_probability_buckets_and_hl_gauss(self):
        for case in golden("win_prob.jsonl"):
            self.assertAlmostEqual(chessbench.win_probability(case["cp"]), case["win_prob"], places=12)
        for case in golden("buckets.jsonl"):
            if "bucket_values" in case:
                np.testing.assert_array_equal(chessbench.bucket_values(case["K"]), case["bucket_values"])
                continue
            edges = chessbench.bucket_edges(case["K"])
            self.assertEqual(int(np.searchsorted(edges, case["win_prob"], side="left")), case["bucket"])
        for case in golden("hl_gauss.jsonl"):
            got = chessbench.hl_gauss(np.array([case["y"]], dtype=np.float32), case["K"], case["sigma"])
            # The package takes float32 win probabilities (the loader's).
            np.testing.assert_allclose(got[0], case["target"], atol=2e-5)
        self.assertEqual(len(chessbench.bucket_values(128)), 128)
        with self.assertRaises(chessbench.ChessbenchError):
            chessbench.bucket_edges(1)


class LoaderOptions(unittest.TestCase):
    def test_defaults_are_chessbench_trains(self):
        loader = chessbench.Loader(RUN, steps=1)
        config = loader.config
        defaults = {key: default for key, default, _ in chessbench.train_options()}
        self.assertEqual(config["batch_size"], int(defaults["batch_size"]))
        self.assertEqual(config["buckets"], int(defaults["buckets"]))
        self.assertEqual(config["policy"], defaults["policy"])
        self.assertEqual(config["seed"], int(defaults["seed"]))
        batch = next(iter(loader))
        self.assertEqual(batch.tokens.shape, (config["batch_size"], 79))
        self.assertEqual(loader.seq_len, 79)
        self.assertIn("batch_size", chessbench.Loader.__doc__)

    def test_bad_input_raises_with_the_rust_message(self):
        cases = [
            (dict(run="/nonexistent/run"), "not a chessbench run directory"),
            (dict(run=RUN, split="nosuchsplit"), 'split "nosuchsplit"'),
            (dict(run=RUN, batchsize=3), "has no option `batchsize`"),
            (dict(run=RUN, policy="policy_value"), "unknown variant `policy_value`"),
            (dict(run=RUN, buckets=1), "buckets"),
            (dict(run=RUN, sampling=3), "sampling"),
            (dict(run=RUN, batch_size=[1]), "batch_size"),
            (dict(run=RUN, rank=3, world_size=3), "rank 3 of world size 3"),
            (dict(run=RUN, memory_limit="1KiB"), "memory limit"),
        ]
        for kwargs, message in cases:
            with self.subTest(kwargs=kwargs):
                with self.assertRaises(chessbench.ChessbenchError) as ctx:
                    loader = chessbench.Loader(**kwargs)
                    loader.next_batch()
                self.assertIn(message, str(ctx.exception))
        self.assertTrue(issubclass(chessbench.ChessbenchError, Exception))

    def test_steps_bound_iteration(self):
        loader = chessbench.Loader(RUN, batch_size=8, steps=3)
        self.assertEqual(len(loader), 3)
        self.assertEqual(len(list(loader)), 3)
        self.assertEqual(list(loader), [])
        with self.assertRaises(TypeError):
            len(chessbench.Loader(RUN, batch_size=8))


class LoaderBatches(unittest.TestCase):
    def test_arrays_own_the_rust_buffers(self):
        batch = chessbench.Loader(RUN, batch_size=64, buckets=32).next_batch()
        self.assertEqual(batch.tokens.dtype, np.int32)
        self.assertEqual(batch.targets.dtype, np.int32)
        self.assertEqual(batch.win_prob.dtype, np.float32)
        self.assertTrue(batch.tokens.flags.c_contiguous)
        # A view of the loader's one-dimensional buffer, not a copy.
        self.assertFalse(batch.tokens.flags.owndata)
        self.assertEqual(batch.tokens.base.shape, (64 * 79,))
        np.testing.assert_array_equal(batch.targets, batch.tokens[:, -1])
        self.assertTrue(((batch.targets >= 0) & (batch.targets < 32)).all())
        self.assertTrue(((batch.win_prob >= 0) & (batch.win_prob <= 1)).all())
        edges = chessbench.bucket_edges(32)
        np.testing.assert_array_equal(np.searchsorted(edges, batch.win_prob.astype(np.float64)), batch.targets)

    def test_searchless_layout(self):
        for policy, length, last in [("action_value", 79, 32), ("state_value", 78, 32),
                                     ("behavioral_cloning", 78, 1968)]:
            with self.subTest(policy=policy):
                batch = chessbench.Loader(RUN, policy=policy, buckets=32, batch_size=16).next_batch()
                sequences, mask = batch.searchless()
                self.assertEqual(sequences.shape, (16, length))
                self.assertEqual(mask.dtype, np.bool_)
                self.assertTrue(mask[:, :-1].all() and not mask[:, -1].any())
                self.assertTrue((sequences[:, -1] < last).all())
                if policy == "behavioral_cloning":
                    self.assertTrue(np.isnan(batch.win_prob).all())

    def test_the_gil_is_released_while_a_batch_is_built(self):
        loader = chessbench.Loader(RUN, batch_size=50_000, window=64, buckets=32)
        ticks = []
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks.append(time.perf_counter())

        t = threading.Thread(target=count)
        t.start()
        try:
            time.sleep(0.05)
            start = time.perf_counter()
            loader.next_batch()
            end = time.perf_counter()
        finally:
            stop.set()
            t.join()
        during = [x for x in ticks if start < x < end]
        # While Rust builds the batch the other thread keeps running; with
        # the GIL held it could not append at all.
        self.assertGreater(end - start, 0.01, "the batch took too little time to tell")
        self.assertGreater(len(during), 100, f"{len(during)} ticks in {end - start:.3f} s")

    def test_shards_partition_an_epoch_and_resume(self):
        world = 3
        seen = Counter()
        for rank in range(world):
            loader = chessbench.Loader(RUN, batch_size=1, window=1, rank=rank, world_size=world)
            while True:
                batch = loader.next_batch()
                if batch.position[0] > 0:
                    break
                seen[batch.tokens[0, :78].tobytes()] += 1
        records = chessbench.Loader(RUN).records
        self.assertEqual(len(seen), records)
        self.assertEqual(set(seen.values()), {1})
        # Resumed from a batch's position, the stream goes on unchanged.
        a = chessbench.Loader(RUN, batch_size=32, rank=1, world_size=2)
        for _ in range(5):
            position = a.next_batch().position
        b = chessbench.Loader(RUN, batch_size=32, rank=1, world_size=2, start=position)
        for _ in range(10):
            np.testing.assert_array_equal(a.next_batch().tokens, b.next_batch().tokens)

    def test_weighted_sampling_and_label_sources_pass_through(self):
        uniform = chessbench.Loader(RUN, policy="state_value", sampling="uniform", batch_size=256)
        weighted = chessbench.Loader(RUN, policy="state_value", sampling="weighted", batch_size=256)
        self.assertEqual(weighted.config["sampling"], "weighted")
        self.assertFalse(np.array_equal(uniform.next_batch().tokens, weighted.next_batch().tokens))
        self.assertEqual(chessbench.Loader(RUN, label_source="both").config["label_source"], "both")


class Torch(unittest.TestCase):
    def test_iterable_dataset_with_workers(self):
        torch = optional("torch")
        from torch.utils.data import DataLoader

        from chessbench.torch import ChessbenchDataset

        ds = ChessbenchDataset(RUN, batch_size=64, buckets=32, steps=6)
        # Picklable, for worker processes started by spawn.
        import pickle

        self.assertEqual(pickle.loads(pickle.dumps(ds)).records, ds.records)
        batches = list(DataLoader(ds, batch_size=None, num_workers=2))
        self.assertEqual(len(batches), 6)
        tokens, targets, win_prob = batches[0]
        self.assertEqual((tokens.dtype, targets.dtype, win_prob.dtype), (torch.int32, torch.int64, torch.float32))
        # The two workers read disjoint shards.
        rows = [bytes(t[i, :78].numpy()) for t, _, _ in batches for i in range(len(t))]
        self.assertEqual(len(rows), len(set(rows)))

    def test_the_training_example_runs(self):
        optional("torch")
        out = subprocess.run(
            [sys.executable, str(REPO / "examples" / "torch_train_av.py"), RUN, "--steps", "3",
             "--batch-size", "32", "--buckets", "32", "--log-every", "1", "--eval-records", "64",
             "--device", "cpu"],
            capture_output=True, text=True, timeout=600,
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        self.assertEqual([r["step"] for r in rows[:3]], [1, 2, 3])
        self.assertTrue(all(np.isfinite(r["loss"]) for r in rows[:3]))
        self.assertEqual(rows[3]["records"], 64)
        self.assertTrue(np.isfinite(rows[3]["log_loss"]))


class Sql(unittest.TestCase):
    def test_views_and_builtin_queries_match_chessbench_sql(self):
        optional("duckdb")
        pa = optional("pyarrow")
        run = chessbench.open(RUN)
        got = run.query("table_a1")
        self.assertTrue(got)
        out = subprocess.run([BIN, "sql", RUN, "table_a1", "--format", "json", "--quiet"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        expected, text, at = [], out.stdout, 0
        decoder = json.JSONDecoder()
        while text[at:].strip():
            value, at = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
            expected.extend(value if isinstance(value, list) else [value])
        rows = [row for table in got.values() for row in table.to_pylist()]
        self.assertEqual(rows, expected)
        # The tables, as Arrow and polars, and the connection itself.
        n = run.sql("SELECT count(*) FROM av_records WHERE split = 'train'").fetchone()[0]
        self.assertEqual(n, chessbench.Loader(RUN).records)
        self.assertIsInstance(run.arrow("boards"), pa.Table)
        self.assertEqual(run.arrow("av_records", "split = 'train'").num_rows, n)
        reader = run.batches("action_values", rows_per_batch=1000)
        self.assertEqual(sum(b.num_rows for b in reader), run.sql("SELECT count(*) FROM action_values").fetchone()[0])
        if REQUIRED or _has("polars"):
            self.assertEqual(run.polars("games").height, run.sql("SELECT count(*) FROM games").fetchone()[0])
        with self.assertRaisesRegex(chessbench.ChessbenchError, "unknown table"):
            run.arrow("nope")
        with self.assertRaisesRegex(chessbench.ChessbenchError, "built-in"):
            run.query("nope")
        with self.assertRaisesRegex(chessbench.ChessbenchError, "not a chessbench run"):
            chessbench.open("/nonexistent/run")


def _has(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


if __name__ == "__main__":
    unittest.main()
