"""Collective calibration: time Gloo collectives over message sizes and check every result.

For each collective and size (``measure``), on every rank of the default process group:
1. fill the input with a pattern that makes each rank's contribution recognisable
   (``i mod 251 + rank``);
2. warm up once and time it; all ranks agree (MAX all-reduce) on an inner loop count so that
   a timed repetition lasts about ``target_rep_s`` (tiny messages are timed in batches);
3. ``reps`` times: barrier, run the collective ``inner`` times back to back, take the mean;
   then check the result against the expected values (``#wrong`` counts bad repetitions, as in
   nccl-tests) and reset the buffers;
4. one MAX all-reduce gathers the per-repetition times (the slowest rank ends the collective)
   and one SUM the wrong counts, so rank 0 holds the record.
``sweep_sizes`` runs the sizes upward and stops before a size whose predicted time per call
exceeds ``max_call_s`` (the time grows ~linearly in size), so slow links keep the run short.

Sizes are message sizes per rank in bytes (float32, so ``count = bytes / 4``): the buffer being
reduced for all_reduce, each rank's piece for gather/scatter, the whole buffer for broadcast and
send/recv; barrier has no payload (size 0).  send/recv is a ping-pong between ranks 0 and 1 and
records the one-way time (round trip / 2).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
import torch.distributed as dist

OPS = ("all_reduce", "gather", "scatter", "broadcast", "send_recv", "barrier")
PATTERN_MOD = 251


@dataclass(frozen=True)
class CollectiveSpec:
    """The sweep: sizes in bytes, repetitions, and the time budgets that keep it short."""
    sizes_bytes: tuple[int, ...]
    reps: int = 5
    slow_reps: int = 3          # repetitions once a call takes longer than slow_call_s
    slow_call_s: float = 0.1
    target_rep_s: float = 0.005
    max_inner: int = 50
    max_call_s: float = 1.0


def log_sizes(smallest: int = 4, largest: int = 64 << 20, factor: int = 4) -> tuple[int, ...]:
    """4 B, 16 B, ... 64 MiB: log-spaced sizes (multiples of 4 bytes)."""
    sizes, n = [], smallest
    while n <= largest:
        sizes.append(n)
        n *= factor
    return tuple(sizes)


class _Op:
    """Buffers, the call itself, the expected result and a reset, for one op and size."""

    def __init__(self, op: str, nbytes: int, rank: int, world: int):
        self.op, self.rank, self.world = op, rank, world
        count = max(1, nbytes // 4)
        self.base = (torch.arange(count) % PATTERN_MOD).float()
        self.calls = 0
        self.x = self.base + rank
        self.out = torch.empty_like(self.base)
        self.parts = [torch.empty_like(self.base) for _ in range(world)] if rank == 0 else None
        self.sources = [self.base + r for r in range(world)] if rank == 0 else None
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        if self.op == "all_reduce":
            self.x.copy_(self.base + self.rank)
        self.out.fill_(-1.0)
        if self.parts is not None:
            for t in self.parts:
                t.fill_(-1.0)

    def call(self) -> None:
        op, rank = self.op, self.rank
        self.calls += 1
        if op == "all_reduce":
            dist.all_reduce(self.x)
        elif op == "gather":
            dist.gather(self.x, self.parts, dst=0)
        elif op == "scatter":
            dist.scatter(self.out, self.sources, src=0)
        elif op == "broadcast":
            dist.broadcast(self.x if rank == 0 else self.out, src=0)
        elif op == "send_recv":
            if rank == 0:
                dist.send(self.x, dst=1)
                dist.recv(self.out, src=1)
            elif rank == 1:
                dist.recv(self.out, src=0)
                dist.send(self.out, dst=0)
        elif op == "barrier":
            dist.barrier()
        else:  # pragma: no cover - OPS is closed
            raise ValueError(op)

    def wrong(self) -> int:
        """1 if this rank's result after ``calls`` calls is not the expected one, else 0."""
        op, rank, p, base = self.op, self.rank, self.world, self.base
        if op == "all_reduce":
            # After one call every rank holds S = p*base + p(p-1)/2; each further call sums p
            # copies of S.
            expected = (p * base.double() + p * (p - 1) / 2) * float(p) ** (self.calls - 1)
            return int(not torch.allclose(self.x.double(), expected, rtol=1e-5))
        if op == "gather" and rank == 0:
            return int(any(not torch.equal(t, base + r) for r, t in enumerate(self.parts)))
        if op == "scatter":
            return int(not torch.equal(self.out, base + rank))
        if op == "broadcast" and rank != 0:
            return int(not torch.equal(self.out, base))
        if op == "send_recv" and rank in (0, 1):
            return int(not torch.equal(self.out, base))  # rank 0's buffer, echoed back
        return 0

    def max_inner(self) -> int:
        """all_reduce multiplies the buffer by p per call: keep it far from float overflow."""
        if self.op != "all_reduce" or self.world < 2:
            return 1 << 30
        return 1 + int(math.log(1e30 / (PATTERN_MOD + self.world)) / math.log(self.world))


def _agree_max(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def measure(op: str, nbytes: int, spec: CollectiveSpec) -> dict:
    """Time one collective at one size on every rank; the agreed record (see module doc)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    bench = _Op(op, nbytes, rank, world)
    dist.barrier()
    t0 = time.perf_counter()
    bench.call()
    warm = _agree_max([time.perf_counter() - t0])[0]
    inner = int(min(spec.max_inner, bench.max_inner(),
                    max(1, math.ceil(spec.target_rep_s / max(warm, 1e-7)))))
    reps = spec.slow_reps if warm > spec.slow_call_s else spec.reps
    times, wrong = [], 0
    for _ in range(reps):
        bench.reset()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(inner):
            bench.call()
        times.append((time.perf_counter() - t0) / inner)
        wrong += bench.wrong()
    agreed = _agree_max(times)
    wrong_t = torch.tensor([wrong], dtype=torch.int64)
    dist.all_reduce(wrong_t)
    if op == "send_recv":
        agreed = [t / 2 for t in agreed]  # one way
    return {"op": op, "bytes": 0 if op == "barrier" else nbytes, "count": max(1, nbytes // 4),
            "world_size": world, "inner": inner, "reps": reps, "times_s": agreed,
            "wrong": int(wrong_t.item())}


def sweep_sizes(op: str, spec: CollectiveSpec, record_of: Callable[[int], dict]) -> Iterator[int]:
    """One op's sizes, smallest first, stopping before a size predicted to take longer than
    ``spec.max_call_s`` per call.  After each size is yielded, ``record_of(size)`` must give its
    record (measured, or resumed from an interrupted run): the prediction is made from them."""
    sizes = (0,) if op == "barrier" else spec.sizes_bytes
    records = []
    for i, n in enumerate(sizes):
        yield n
        records.append(record_of(n))
        if i + 1 < len(sizes) and _next_call_s(records, sizes[i + 1], op) > spec.max_call_s:
            return


def _next_call_s(records: list[dict], next_bytes: int, op: str) -> float:
    """Predicted seconds of one call at ``next_bytes``: affine through the last two sizes.

    Scaling the last time in proportion to size (as if it were all bandwidth) wrongly stops a
    sweep whose small sizes are latency-bound: 1.5 ms for 4 B under load became 6 s for 16 kB.
    The times are agreed across ranks, so every rank makes the same decision.
    """
    factor = 2 if op == "send_recv" else 1
    last = float(np.median(records[-1]["times_s"])) * factor
    if len(records) < 2:
        return last
    prev = float(np.median(records[-2]["times_s"])) * factor
    span = records[-1]["bytes"] - records[-2]["bytes"]
    slope = max(0.0, (last - prev) / span) if span > 0 else 0.0
    return last + slope * (next_bytes - records[-1]["bytes"])


# -- contention: the collective while the ranks' CPUs also compute -------------------------------

CONTENTION_BYTES = 8 << 20
CONTENTION_BURNS = (0, 1, 2, 3)


class _Burn:
    """``threads`` background threads running a small convolution forward+backward in a loop
    (the kind of work backward does), counting iterations, until stopped."""

    def __init__(self, threads: int):
        self.count = 0
        self._stop = False
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def _loop(self) -> None:
        conv = torch.nn.Conv2d(32, 32, 3, padding=1)
        x = torch.randn(4, 32, 16, 16)
        while not self._stop:
            conv(x).sum().backward()
            self.count += 1  # races between threads only lose a count: a rate, not a check

    def __enter__(self) -> "_Burn":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop = True
        for t in self._threads:
            t.join()

    def rate(self, seconds: float) -> float:
        """Burn iterations per second over the next ``seconds`` (nothing else running here)."""
        c0, t0 = self.count, time.perf_counter()
        time.sleep(seconds)
        return (self.count - c0) / (time.perf_counter() - t0)


def measure_contention(nbytes: int, burn_threads: int, spec: CollectiveSpec,
                       window_s: float = 0.3) -> dict:
    """A large all_reduce while every rank also runs ``burn_threads`` compute threads.

    Steps: start the burn threads and let them run one untimed window (their first
    iterations allocate); time one warm-up all_reduce and agree on ``inner`` calls per
    repetition so that one lasts about ``window_s`` (a burn iteration takes about a
    millisecond: shorter windows cannot count it); ``reps`` times: count the burn iterations
    alone for ``window_s`` (ranks wait in barriers around it, so no collective runs meanwhile),
    then run ``inner`` all_reduces back to back while counting them; stop the burns.  The rate
    alone is timed beside every window with the collective, not once: a single window right
    after the threads started put compute "kept" above 1 (1.07 at 4 ranks, 1.19 in the bundled
    profile) and let the same setting read 0.44-1.07 across calibrations.  The buffer is zeros
    (sums stay zero however many calls: no overflow; ``measure`` checks results).  Agreed like
    ``measure``: the slowest rank's times; burn rates: medians, averaged over ranks.
    """
    world = dist.get_world_size()
    x = torch.zeros(max(1, nbytes // 4))
    times, alone, during = [], [], []
    with _Burn(burn_threads) as burn:
        if burn_threads:
            burn.rate(window_s)
        dist.barrier()
        dist.all_reduce(x)
        t0 = time.perf_counter()
        dist.all_reduce(x)
        warm = _agree_max([time.perf_counter() - t0])[0]
        inner = max(1, min(spec.max_inner * 20, math.ceil(window_s / max(warm, 1e-6))))
        for _ in range(spec.slow_reps):
            dist.barrier()
            alone.append(burn.rate(window_s) if burn_threads else 0.0)
            dist.barrier()
            c0, t0 = burn.count, time.perf_counter()
            for _ in range(inner):
                dist.all_reduce(x)
            dt = time.perf_counter() - t0
            times.append(dt / inner)
            during.append((burn.count - c0) / dt)
    agreed = _agree_max(times)
    rates = torch.tensor([float(np.median(alone)), float(np.median(during))],
                         dtype=torch.float64)
    dist.all_reduce(rates)
    return {"op": "all_reduce", "bytes": nbytes, "world_size": world,
            "burn_threads": burn_threads, "inner": inner, "times_s": agreed,
            "burn_rate_alone": rates[0].item() / world,
            "burn_rate_during": rates[1].item() / world}
