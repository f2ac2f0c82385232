"""A rank's measured timeline of one training cycle, on a clock shared by every rank.

``commsim live --trace`` records one timed cycle per rank (by default the last) as events in
the simulator's terms, so that it can be drawn beside the predicted one
(``commsim.analysis.measured``):

* track "compute": forward and backward of every pass of the cycle (``local_step`` as the
  simulator numbers them), then "optimizer".  Under DDP, ``backward()`` returns only when every
  bucket is reduced; the backward event ends when the last gradient was accumulated
  (``watch_gradients``) and a "wait" event covers the rest, where the rank computes nothing and
  waits for its buckets (where the simulator's rank is idle);
* track "comm": every collective as the strategy's ``live_sync`` issues it (ps: "gather+scatter
  p<i>" per parameter, gather, mean on the root and scatter; ring: "all_reduce p<i>" per
  parameter, the divide included), and DDP's "bucket <i>" from the comm hook taking the bucket
  to its completion (``hooks.timed_hook``); the names are the simulator's;
* the cycle's own span (``start_s``/``end_s``): from zeroing the gradients to the end of the
  optimizer step, which every event lies in.

Clocks.  Each rank stamps with ``time.perf_counter``.  Before training, ``clock_offset``
estimates the offset of this rank's clock from rank 0's by a ping-pong with rank 0 (the NTP
estimate: rank r sends its time t0, rank 0 answers with its time t1, r reads t2; offset = t1 -
(t0 + t2)/2), repeated ``PINGS`` times, keeping the round with the shortest round trip: its
error is at most half that round trip, which is reported beside the offset.  Every time the
rank reports is in rank 0's clock (its own + offset).  On one machine (ranks over loopback or
an emulated cluster, whose namespaces share the monotonic clock) the true offset is zero and
the estimate is within the reported half round trip of it.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

PINGS = 16   # rounds per rank: a busy moment delays some rounds, rarely all 16


def offset_from_pings(pings: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """(offset of this clock from the root's, round trip) from (t0, t1, t2) ping-pongs.

    t0: sent, on this clock; t1: the root's reply, on the root's clock; t2: received, on this
    clock.  The round with the shortest round trip t2 - t0 wins: the root's t1 lies inside it,
    so the midpoint is off by at most half of it."""
    if not pings:
        raise ValueError("no ping-pong rounds")
    t0, t1, t2 = min(pings, key=lambda p: p[2] - p[0])
    return t1 - (t0 + t2) / 2.0, t2 - t0


def clock_offset(rank: int, world_size: int, pings: int = PINGS) -> tuple[float, float]:
    """This rank's (offset, round trip) against rank 0 (``offset_from_pings``), by point-to-point
    messages on the default process group; rank 0 serves ranks 1..p-1 in turn.  (0, 0) on rank 0
    and when there is no process group."""
    import torch
    import torch.distributed as dist

    if world_size < 2 or not dist.is_initialized():
        return 0.0, 0.0
    buf = torch.zeros(1, dtype=torch.float64)
    if rank == 0:
        for peer in range(1, world_size):
            for _ in range(pings):
                dist.recv(buf, src=peer)
                buf[0] = time.perf_counter()
                dist.send(buf, dst=peer)
        dist.barrier()
        return 0.0, 0.0
    rounds = []
    for _ in range(pings):
        t0 = time.perf_counter()
        buf[0] = t0
        dist.send(buf, dst=0)
        dist.recv(buf, src=0)
        rounds.append((t0, float(buf[0]), time.perf_counter()))
    dist.barrier()
    return offset_from_pings(rounds)


@dataclass
class Recorder:
    """The events of one rank's traced cycle, on this rank's perf_counter (``to_dict`` moves
    them onto rank 0's clock).  Mutable: the training loop and the hooks add to it.
    ``split_backward``: end backward at the last gradient and record the rest as "wait" (DDP);
    ``last_gradient_s``: when a gradient was last accumulated (``watch_gradients``)."""
    events: list[dict] = field(default_factory=list)
    start_s: float | None = None
    end_s: float | None = None
    split_backward: bool = False
    last_gradient_s: float | None = None

    def gradient_ready(self) -> None:
        self.last_gradient_s = time.perf_counter()

    def backward(self, start_s: float, end_s: float, **args) -> None:
        """One backward pass that ran from ``start_s`` until ``backward()`` returned at
        ``end_s``: with ``split_backward``, compute until the last gradient, then "wait"."""
        grad = self.last_gradient_s
        if not (self.split_backward and grad is not None and start_s < grad < end_s):
            grad = end_s
        self.add("compute", "backward", start_s, grad, **args)
        if grad < end_s:
            self.add("compute", "wait", grad, end_s, **args, until="buckets reduced")

    def add(self, track: str, name: str, start_s: float, end_s: float, **args) -> None:
        self.events.append({"track": track, "name": name, "start_s": start_s, "end_s": end_s,
                            "args": args})

    @contextlib.contextmanager
    def span(self, track: str, name: str, **args) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(track, name, start, time.perf_counter(), **args)

    def to_dict(self, rank: int, cycle: int, offset_s: float, rtt_s: float) -> dict:
        """JSON-able, every time on rank 0's clock; events sorted by start."""
        if self.start_s is None or self.end_s is None:
            raise ValueError("the traced cycle never ran")
        moved = [{**e, "start_s": e["start_s"] + offset_s, "end_s": e["end_s"] + offset_s}
                 for e in self.events]
        moved.sort(key=lambda e: (e["start_s"], e["end_s"], e["track"], e["name"]))
        return {"rank": rank, "cycle": cycle, "offset_s": offset_s, "rtt_s": rtt_s,
                "start_s": self.start_s + offset_s, "end_s": self.end_s + offset_s,
                "events": moved}


def watch_gradients(model, recorder: Callable[[], "Recorder | None"]) -> None:
    """Stamp ``recorder()`` (when there is one) each time a gradient is accumulated into a
    parameter of ``model``: the last stamp of a backward pass is where its compute ended."""
    def hook(_param) -> None:
        rec = recorder()
        if rec is not None:
            rec.gradient_ready()

    for param in model.parameters():
        if param.requires_grad:
            param.register_post_accumulate_grad_hook(hook)
