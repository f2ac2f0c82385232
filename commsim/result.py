"""The prediction result and the metrics derived from an engine's Timing.

Definitions (per iteration; the *critical rank* is the one that finishes last, the lowest of
those that do to the clock's rounding):

* iteration_s: when the last rank finishes its optimizer step.
* compute_s: the critical rank's wall time in forward, backward and optimizer.
* comm_s: the critical rank's wall time with at least one collective in flight.
* exposed_comm_s: iteration_s - compute_s: the time the critical rank is not computing.
* overlap_fraction: 1 - exposed / comm: the share of communication hidden behind compute.
* speedup: samples per second over those of ``single`` on the same global batch.
* efficiency: speedup / ranks.
* epoch_s: iterations to see ``dataset_samples`` once (ceil) x iteration_s.
* bytes_sent_per_rank / bytes_received_per_rank: mean over ranks of gradient bytes sent/received
  (``*_max`` fields give the busiest rank: rank 0 for ps).
* algbw_Bps: gradient bytes synchronised / comm_s (nccl-tests' algorithm bandwidth).
* busbw_Bps: algbw x the strategy's bus factor (2(p-1)/p for all-reduce): comparable to the link.
* link_utilization: the busiest NIC direction's bytes / (its bandwidth x iteration_s).
* buffer_bytes_sent_per_rank: of bytes_sent_per_rank, DDP's per-iteration buffer broadcast.
* startup_bytes_received_per_rank: DDP's one-off broadcast of parameters and buffers from rank
  0 when it wraps the model (mean over ranks; not part of any iteration).
With local aggregation (sync_every k) one cycle of k iterations is simulated and every time and
byte count above is per iteration: the cycle's divided by k.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from commsim.strategies.base import Timing

# Ranks whose ends are this close (relative) end together: far below any time the model
# separates, far above the rounding of a sum of an iteration's spans.
FINISH_TIE_RTOL = 1e-12


class PerRank(Sequence):
    """Each rank's row, per iteration: {rank, finish_s, compute_s, comm_s, bytes_sent,
    bytes_received}, made when it is asked for (a row a rank made up front is most of what a
    65,536-rank prediction costs once its engine is done, and a sweep reads none of them)."""
    __slots__ = ("_timing", "_k")

    def __init__(self, timing: Timing, k: int):
        self._timing, self._k = timing, k

    def __len__(self) -> int:
        return len(self._timing.finish_s)

    def __getitem__(self, r):
        if isinstance(r, slice):
            return tuple(self[i] for i in range(*r.indices(len(self))))
        p = len(self)
        if not -p <= r < p:
            raise IndexError("rank out of range")
        r = int(r) % p
        t, k = self._timing, self._k
        return {"rank": r, "finish_s": t.finish_s[r] / k, "compute_s": t.compute_s[r] / k,
                "comm_s": t.comm_s[r] / k, "bytes_sent": t.sent_bytes[r] / k,
                "bytes_received": t.received_bytes[r] / k}

    def __repr__(self) -> str:
        return f"PerRank({len(self)} ranks)"


@dataclass(frozen=True)
class Result:
    strategy: str
    engine: str
    nodes: int
    ranks_per_host: int
    world_size: int
    global_batch: int
    batch_per_rank: int
    iteration_s: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    overlap_fraction: float
    speedup: float
    efficiency: float
    epoch_s: float
    iterations_per_epoch: int
    bytes_sent_per_rank: float
    bytes_received_per_rank: float
    bytes_sent_max: float
    bytes_received_max: float
    algbw_Bps: float
    busbw_Bps: float
    link_bandwidth_Bps: float
    link_utilization: float
    critical_rank: int
    buffer_bytes_sent_per_rank: float = 0.0
    startup_bytes_received_per_rank: float = 0.0
    sync_every: int = 1
    per_rank: tuple = field(default=(), compare=False)
    intervals: tuple = field(default=(), compare=False, repr=False)

    def to_dict(self, *, per_rank: bool = False) -> dict:
        # The flat fields only: asdict would deep-copy every rank's row and interval first,
        # most of a 65,536-rank prediction's time, to throw them away.
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("intervals", "per_rank")}
        if per_rank:
            d["per_rank"] = [dict(r) for r in self.per_rank]
        return d


def derive(strategy, spec, timing: Timing, *, engine: str, baseline_iteration_s: float | None,
           model_bytes: int, buffer_bytes: int = 0) -> Result:
    p = spec.world_size
    k = spec.sync_every
    # The last to finish, the lowest rank among those that tie with it to the clock's rounding
    # (the breakdown below is that rank's; two engines' sums of one rank's spans differ in
    # their last bits, and so would the rank they report).
    last = max(timing.finish_s)
    critical = next(rank for rank, end in enumerate(timing.finish_s)
                    if end >= last - FINISH_TIE_RTOL * abs(last))
    iteration = last / k
    compute = timing.compute_s[critical] / k
    comm = timing.comm_s[critical] / k
    exposed = max(0.0, iteration - compute)
    overlap = min(1.0, max(0.0, 1.0 - exposed / comm)) if comm > 0 else 0.0
    global_batch = spec.effective_global_batch
    if baseline_iteration_s is None:          # this *is* the baseline
        speedup = 1.0
    else:
        speedup = (global_batch / iteration) / (spec.requested_global_batch / baseline_iteration_s)
    iterations = math.ceil(spec.dataset_samples / global_batch)
    group = spec.group_size or p
    synced = model_bytes / k if group > 1 else 0
    algbw = synced / comm if comm > 0 else 0.0
    c = spec.cluster
    util = 0.0
    if iteration > 0:
        # The busiest direction of the hosts of each bandwidth (dividing by one positive number
        # keeps the order, to the rounding: the same maximum as host by host).
        busiest = list(map(max, timing.nic_tx_bytes, timing.nic_rx_bytes))
        slow = [(busiest[h], bw) for h, bw in c.slow_links_Bps.items()]
        for h in c.slow_links_Bps:
            busiest[h] = -math.inf
        for most, bw in (*slow, (max(busiest), c.nic_bandwidth_Bps)):
            if most > -math.inf:            # (every host slow: none at the nominal rate)
                util = max(util, most / k / (bw * iteration))
    ddp_buffers = (strategy.broadcasts_buffers and p > 1)
    buffer_sent = (buffer_bytes * (p - 1) / p / k
                   if ddp_buffers and spec.broadcast_buffers else 0.0)
    startup = (model_bytes + buffer_bytes) * (p - 1) / p if ddp_buffers else 0.0
    return Result(
        strategy=strategy.name, engine=engine, nodes=c.hosts, ranks_per_host=c.ranks_per_host,
        world_size=p, global_batch=global_batch, batch_per_rank=spec.per_rank_batch,
        iteration_s=iteration, compute_s=compute, comm_s=comm, exposed_comm_s=exposed,
        overlap_fraction=overlap, speedup=speedup, efficiency=speedup / p,
        epoch_s=iterations * iteration, iterations_per_epoch=iterations,
        bytes_sent_per_rank=sum(timing.sent_bytes) / p / k,
        bytes_received_per_rank=sum(timing.received_bytes) / p / k,
        bytes_sent_max=max(timing.sent_bytes) / k,
        bytes_received_max=max(timing.received_bytes) / k,
        algbw_Bps=algbw, busbw_Bps=algbw * strategy.bus_factor(group),
        link_bandwidth_Bps=c.nic_bandwidth_Bps, link_utilization=util, critical_rank=critical,
        buffer_bytes_sent_per_rank=buffer_sent, startup_bytes_received_per_rank=startup,
        sync_every=k, per_rank=PerRank(timing, k), intervals=timing.intervals)
