"""How much longer synchronous ranks wait for each iteration's slowest rank than the slowest
rank's median says (from a live result).

A live result (``commsim live --json``, or a line of ``bench/fidelity``'s live.jsonl) keeps every
rank's phases per timed iteration (``per_rank[i]["per_iteration"]``).  In ps and ring training
every rank starts syncing only when the slowest rank of *that* iteration has computed, while the
model's compute stands for the slowest rank's median.  ``straggler_wait``:
1. per rank, compute per iteration = forward + backward + step;
2. per iteration, the slowest rank's compute; their median over the iterations;
3. divided by the slowest of the ranks' median computes: 1.0 = no wait beyond it.
DDP's backward holds its overlapped sync, so its phases do not measure compute alone.
"""
from __future__ import annotations

from statistics import median


def straggler_wait(result: dict) -> float | None:
    """The ratio above, or None without two ranks' per-iteration phases."""
    ranks = [r.get("per_iteration") for r in result.get("per_rank") or ()]
    if len(ranks) < 2 or any(not r for r in ranks):
        return None
    compute = [[f + b + s for f, b, s in zip(r["forward_s"], r["backward_s"], r["step_s"])]
               for r in ranks]
    n = min(map(len, compute))
    if n == 0:
        return None
    slowest_each = [max(c[i] for c in compute) for i in range(n)]
    return median(slowest_each) / max(median(c[:n]) for c in compute)
