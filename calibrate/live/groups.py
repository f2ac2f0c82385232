"""Whom a rank averages its gradients with: every rank, or its group of ``group_size``.

How it averages is its strategy's ``live_sync`` (``commsim.strategies``), which takes the
``Comm`` made here.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist


@dataclass(frozen=True)
class Comm:
    """Whom a rank averages its gradients with: ``group`` (None: every rank, the default
    process group) of ``size`` ranks; ``rank`` is the rank's global rank.  ``recorder``
    (``timing.Recorder``), on the cycle ``commsim live --trace`` records, takes the time of
    every collective ``live_sync`` brackets with ``span``."""
    rank: int
    size: int
    group: Any = None
    recorder: Any = None

    def span(self, name: str, nbytes: int):
        """Context manager around one collective: recorded on the "comm" track when tracing,
        nothing otherwise."""
        if self.recorder is None:
            return contextlib.nullcontext()
        return self.recorder.span("comm", name, bytes=nbytes)


def averaging_group(group_size: int | None, rank: int, world_size: int) -> Comm:
    """This rank's ``Comm`` for averaging within consecutive groups of ``group_size`` ranks
    (``RunSpec.group_of``; the last group is smaller when g does not divide the world).

    ``dist.new_group`` is collective over the whole world, so every rank creates every group,
    in the same order, and keeps its own."""
    g = group_size or world_size
    if g >= world_size:
        return Comm(rank, world_size)
    mine = Comm(rank, 1)
    for start in range(0, world_size, g):
        ranks = list(range(start, min(start + g, world_size)))
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = Comm(rank, len(ranks), group)
    return mine
