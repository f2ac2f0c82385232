"""Timing DDP's bucket all-reduces without changing them: a comm hook that wraps PyTorch's.

DDP launches a bucket's all-reduce from inside backward and overlaps it with the rest of
backward, so the time a bucket spends in flight cannot be read off the iteration's phases.
``timed_hook`` stamps each bucket from the hook taking it to its completion (including time
queued behind earlier buckets in Gloo's work threads); ``union_s`` adds up what was in flight.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable


class BucketTimer:
    """DDP comm hook state: the hook it times (PyTorch's ``allreduce_hook``, what DDP's built-in
    reducer does, or ``fp16_compress_hook``), the process group it runs on (None: every rank),
    and the (launch, completion) perf_counter pairs of every bucket.  Timing a hook does not
    change its arithmetic."""

    def __init__(self, hook: Callable, group: Any = None):
        self.hook = hook
        self.group = group
        self.intervals: list[tuple[float, float]] = []
        # (bucket index, bytes, launch, completion), for the cycle ``commsim live --trace`` draws
        self.buckets: list[tuple[int, int, float, float]] = []

    def take(self) -> list[tuple[float, float]]:
        """The cycle's (launch, completion) pairs; forgets them and the cycle's buckets."""
        out, self.intervals, self.buckets = self.intervals, [], []
        return out


def comm_hook(compression: str | None) -> Callable:
    """PyTorch's hook for ``compression``: divide by the group size and all-reduce, in fp32 or
    cast to fp16 and back (what the simulator's ddp models)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return {None: default_hooks.allreduce_hook,
            "fp16": default_hooks.fp16_compress_hook}[compression]


def timed_hook(state: BucketTimer, bucket):  # no annotation: DDP checks it literally
    # The start is before the hook's divide (and fp16 cast): the simulator counts both as
    # communication time.
    start = time.perf_counter()
    index, buffer = bucket.index(), bucket.buffer()
    nbytes = buffer.numel() * buffer.element_size()   # before any fp16 cast, as predict counts
    fut = state.hook(state.group, bucket)

    def done(f):
        # Runs when Gloo completes the work (and the cast back): the end of the time in flight.
        end = time.perf_counter()
        state.intervals.append((start, end))
        state.buckets.append((index, nbytes, start, end))
        return f.value()

    return fut.then(done)


def union_s(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals (buckets in flight together)."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
