"""PyTorch DDP gradient bucketing, as a pure function.

DDP (torch/nn/parallel/distributed.py and reducer.cpp, ``compute_bucket_assignment_by_size``)
rebuilds its buckets after the first iteration in the order gradients became ready, which for a
feed-forward model is reverse registration order.  Steps:

1. walk the parameters in that order, appending each to the open bucket;
2. once the open bucket holds >= its cap, close it; the first bucket's cap is 1 MiB so that the
   earliest gradients start communicating soon, every later cap is ``bucket_cap_mb`` (25 MiB);
3. a bucket may overshoot its cap by the last tensor added (tensors are never split).

Each bucket becomes ready when its last gradient is ready, and is all-reduced as one buffer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from commsim.profile import ParamSpec


@dataclass(frozen=True)
class Bucket:
    index: int
    param_indices: tuple[int, ...]   # registration-order indices of its parameters
    bytes: int
    ready_fraction: float            # of backward, when its last gradient is ready


def assign_buckets(params: Sequence[ParamSpec], ready_fraction: Sequence[float],
                   bucket_bytes: int, first_bucket_bytes: int) -> tuple[Bucket, ...]:
    """Buckets in launch order (earliest-ready first)."""
    # Ready order: by ready time, ties broken by reverse registration (what autograd produces).
    order = sorted(range(len(params)), key=lambda i: (ready_fraction[i], -i))
    buckets: list[Bucket] = []
    members: list[int] = []
    size = 0
    cap = first_bucket_bytes
    for i in order:
        members.append(i)
        size += params[i].bytes
        if size >= cap:
            buckets.append(_bucket(len(buckets), members, size, ready_fraction))
            members, size, cap = [], 0, bucket_bytes
    if members:
        buckets.append(_bucket(len(buckets), members, size, ready_fraction))
    return tuple(buckets)


def _bucket(index: int, members: list[int], size: int, ready: Sequence[float]) -> Bucket:
    return Bucket(index=index, param_indices=tuple(members), bytes=size,
                  ready_fraction=max(ready[i] for i in members))
