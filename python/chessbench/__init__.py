"""chessbench from Python: a run's tables as training data.

    import chessbench
    loader = chessbench.Loader("runs/demo", batch_size=256, steps=100)
    for batch in loader:
        batch.tokens      # int32 [256, 79]: searchless_chess's sequences
        batch.targets     # int32 [256]: the value bucket (or the action)
        batch.win_prob    # float32 [256]: the record's win probability

    run = chessbench.open("runs/demo")   # DuckDB with chessbench's views
    run.query("table_a1")                # a built-in query, as `chessbench sql`
    run.arrow("action_values")           # a table as a pyarrow Table

The loader is the one `chessbench train` draws its batches from, built in
Rust: the same options with the same defaults and checks (see
``chessbench.Loader``), the same batches for the same seed, prefetched on
its own threads with the GIL released. ``chessbench.torch`` wraps it as a
PyTorch ``IterableDataset``; ``Batch.searchless()`` gives searchless_chess's
``(sequences, loss_mask)`` for JAX.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, NamedTuple, Optional, Tuple

import numpy as np

from . import _chessbench
from ._chessbench import (
    NUM_ACTIONS,
    ChessbenchError,
    action_index,
    actions,
    tokenize,
    win_probability,
)

__all__ = [
    "NUM_ACTIONS",
    "Batch",
    "ChessbenchError",
    "Loader",
    "Run",
    "action_index",
    "actions",
    "bucket_edges",
    "bucket_values",
    "hl_gauss",
    "open",
    "tokenize",
    "train_options",
    "win_probability",
]

Position = Tuple[int, int, int]


class Batch(NamedTuple):
    """One batch of records, rows in the sampler's order."""

    tokens: np.ndarray
    """int32 ``[B, T]``: 77 board tokens, then the action (action values,
    behavioural cloning), then the value bucket (value policies)."""
    targets: np.ndarray
    """int32 ``[B]``: the last token of each row (bucket or action)."""
    win_prob: np.ndarray
    """float32 ``[B]``: the record's win probability (NaN for behavioural
    cloning)."""
    position: Position
    """``(epoch, window, offset)`` after this batch: pass it as ``start=`` to
    resume the stream right after it."""
    policy: str
    """``action_value``, ``state_value`` or ``behavioral_cloning``."""

    def searchless(self) -> Tuple[np.ndarray, np.ndarray]:
        """searchless_chess's batch: ``(sequences, loss_mask)`` as its
        ``data_loader.py`` yields them from a ``.bag``, dtypes included:
        ``sequences`` ``[B, T]``, int64 for the value policies (its bucket
        is int64) and int32 for behavioural cloning (a copy for the value
        policies), and ``loss_mask`` bool ``[B, T]``, True everywhere but the
        last column."""
        mask = np.ones(self.tokens.shape, dtype=bool)
        mask[:, -1] = False
        if self.policy == "behavioral_cloning":
            return self.tokens, mask
        return self.tokens.astype(np.int64), mask


def train_options() -> list:
    """``chessbench train``'s options as ``(key, default, help)``: what
    ``Loader`` accepts (options of the model and the optimiser are accepted
    and ignored, so one ``[train]`` table serves both)."""
    return _chessbench.train_options()


#: The options of ``chessbench train`` that choose its batches (the others
#: configure the model, the optimiser, logs and the device).
DATA_OPTIONS = ("policy", "buckets", "batch_size", "sampling", "label_source", "seed", "window",
                "jobs", "memory_limit")


def _options_doc() -> str:
    lines = []
    for key, default, help_text in train_options():
        if key not in DATA_OPTIONS:
            continue
        shown = "" if default is None else f" (default {default})"
        text = " ".join(help_text.split())
        lines.append(f"    {key}{shown}: {text}")
    return "\n".join(lines)


class Loader:
    """Batches of a run's split, exactly as ``chessbench train`` draws them.

    ``Loader(run, split="train", *, steps=None, rank=0, world_size=1,
    start=None, **options)``

    - ``run``: the run directory (``chessbench ingest`` / ``annotate`` output).
    - ``split``: the split to read.
    - ``steps``: stop iterating after this many batches (None: never; the
      stream crosses epochs, as the trainer's does).
    - ``rank``, ``world_size``: the data-parallel shard: of each window of
      shuffled records, rank ``r`` serves those at positions ``r, r + N,
      ...`` (N the world size), so the ranks together serve each record of
      an epoch once, in near-equal parts. A rank resumes from its own
      batches' positions.
    - ``start``: a batch's ``position``, to resume right after it.
    - ``options``: ``chessbench train``'s options by their pipeline-file keys,
      with its defaults and checks; unknown keys and bad values raise
      ``ChessbenchError`` naming them. These choose the batches (the rest,
      the model's and the optimiser's, are accepted and change nothing
      here, so a pipeline file's ``[train]`` table can be passed whole):

{options}

    Iterating yields ``Batch`` tuples of NumPy arrays that own the loader's
    buffers (no copy); ``next_batch()`` draws one regardless of ``steps``.
    """

    def __init__(
        self,
        run: "str | os.PathLike[str]",
        split: str = "train",
        *,
        steps: Optional[int] = None,
        rank: int = 0,
        world_size: int = 1,
        start: Optional[Position] = None,
        **options: Any,
    ) -> None:
        if steps is not None and steps < 0:
            raise ChessbenchError(f"steps: expected a count >= 0, got {steps}")
        options = dict(options, run=os.fspath(run), split=split)
        self._inner = _chessbench.Loader(options, rank=rank, world_size=world_size, start=start)
        self.steps = steps
        self.served = 0
        self.position: Position = tuple(start) if start is not None else (0, 0, 0)
        self.rank, self.world_size = rank, world_size
        self._policy = self.config["policy"]

    def next_batch(self) -> Batch:
        """The next batch of the stream."""
        tokens, targets, win_prob, position = self._inner.next_batch()
        self.served += 1
        self.position = position
        return Batch(tokens, targets, win_prob, position, self._policy)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self.steps is not None and self.served >= self.steps:
            raise StopIteration
        return self.next_batch()

    def __len__(self) -> int:
        if self.steps is None:
            raise TypeError("an unbounded Loader has no length; give steps=")
        return self.steps

    @property
    def config(self) -> dict:
        """The validated recipe (``chessbench train``'s ``config.json``)."""
        return json.loads(self._inner.config_json)

    @property
    def records(self) -> int:
        """Records per uniform epoch of the split (all ranks together)."""
        return self._inner.records

    @property
    def peak_bytes(self) -> int:
        """The most bytes the loader's windows held at once."""
        return self._inner.peak_bytes

    @property
    def seq_len(self) -> int:
        return self._inner.seq_len

    @property
    def batch_size(self) -> int:
        return self._inner.batch_size

    def hl_gauss(self, batch: Batch) -> np.ndarray:
        """HL-Gauss targets of a batch ``[B, K]`` (float32), K this loader's
        buckets, sigma = 0.75 / K: the distribution the trainer fits."""
        return hl_gauss(batch.win_prob, self.config["buckets"])

    def __repr__(self) -> str:
        c = self.config
        return (
            f"chessbench.Loader({c['run']!r}, split={c['split']!r}, policy={c['policy']!r}, "
            f"batch_size={c['batch_size']}, records={self.records}, rank={self.rank}/{self.world_size}, "
            f"position={self.position})"
        )


try:
    Loader.__doc__ = Loader.__doc__.replace("{options}", _options_doc())
except ChessbenchError:  # pragma: no cover - the options always describe
    pass


def bucket_edges(k: int) -> np.ndarray:
    """The K - 1 interior edges of K uniform value buckets
    (``linspace(0, 1, K + 1)[1:-1]``); a win probability's bucket is
    ``searchsorted(edges, p, side="left")``."""
    return _chessbench.bucket_edges_values(k)[0]


def bucket_values(k: int) -> np.ndarray:
    """The K bucket centres (the value each bucket stands for)."""
    return _chessbench.bucket_edges_values(k)[1]


def hl_gauss(win_prob: np.ndarray, k: int, sigma: Optional[float] = None) -> np.ndarray:
    """HL-Gauss targets ``[N, K]`` (float32) of win probabilities: the mass of
    N(p, sigma^2) in each of K uniform bins, renormalised to [0, 1];
    sigma = 0.75 / K unless given."""
    return _chessbench.hl_gauss(np.ascontiguousarray(win_prob, dtype=np.float32), k, sigma)


from ._sql import Run, open  # noqa: E402  (after the loader: _sql imports from here)
