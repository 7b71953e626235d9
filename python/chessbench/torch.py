"""chessbench's loader as a PyTorch ``IterableDataset``.

    from torch.utils.data import DataLoader
    from chessbench.torch import ChessbenchDataset

    ds = ChessbenchDataset("runs/demo", batch_size=1024, steps=1000)
    for tokens, targets, win_prob in DataLoader(ds, batch_size=None):
        ...

The dataset yields whole batches (``batch_size=None`` in ``DataLoader``);
tokens and win probabilities share the loader's memory. The loader prefetches on its own
threads (``jobs=N``), so ``num_workers=0`` is the usual choice; with worker
processes each takes its own shard of the stream. Under
``torch.distributed`` the rank and world size default to the process
group's, so each rank reads a disjoint part of every epoch.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional, Tuple

import torch
from torch.utils.data import IterableDataset, get_worker_info

from . import Loader


class ChessbenchDataset(IterableDataset):
    """Batches of a run's split as ``(tokens, targets, win_prob)`` tensors:
    int32 ``[B, T]`` and float32 ``[B]`` sharing the loader's arrays (no
    copy; ``nn.Embedding`` takes int32 indices), and int64 ``[B]`` targets
    (what ``nll_loss`` / ``cross_entropy`` take). The options are ``chessbench.Loader``'s (and so
    ``chessbench train``'s); ``steps`` bounds the batches per iteration
    across all DataLoader workers of this rank."""

    def __init__(
        self,
        run: "str | os.PathLike[str]",
        split: str = "train",
        *,
        steps: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        **options: Any,
    ) -> None:
        super().__init__()
        if rank is None or world_size is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world_size = dist.get_rank(), dist.get_world_size()
            else:
                rank, world_size = 0, 1
        self.run, self.split, self.steps = run, split, steps
        self.rank, self.world_size, self.options = rank, world_size, options
        # Opened once here so bad options fail at construction, not inside
        # a worker process; closed at once (its threads would prefetch, and
        # worker processes get a picklable dataset).
        probe = Loader(run, split, steps=0, rank=rank, world_size=world_size, **options)
        self._config, self._records = probe.config, probe.records
        del probe

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        steps = self.steps
        if steps is not None:
            steps = steps // workers + (1 if worker < steps % workers else 0)
        loader = Loader(
            self.run,
            self.split,
            steps=steps,
            rank=self.rank * workers + worker,
            world_size=self.world_size * workers,
            **self.options,
        )
        for batch in loader:
            yield (
                torch.from_numpy(batch.tokens),
                torch.from_numpy(batch.targets).long(),
                torch.from_numpy(batch.win_prob),
            )

    def __len__(self) -> int:
        if self.steps is None:
            raise TypeError("an unbounded ChessbenchDataset has no length; give steps=")
        return self.steps

    @property
    def config(self) -> dict:
        """The validated recipe."""
        return self._config

    @property
    def records(self) -> int:
        """Records per uniform epoch of the split (all ranks together)."""
        return self._records
