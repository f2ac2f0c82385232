"""Compute oversubscribed: every rank computing at once, with co-runners beside them.

Co-runners (``corunner``) load each host to ``OVERSUBSCRIBE`` x its cores, so that what 4 ranks
on 2 cores cost is measured by a 2-rank calibration instead of assumed (``spec.
measured_cpu_efficiency``).  Skipped where the ranks alone reach that load, or where a rank would
need more than ``MAX_CORUNNERS`` co-runners (a host with many cores per rank: it is not going to
be oversubscribed).  Otherwise it is the contended phase, with the busy threads recorded.
"""
from __future__ import annotations

from typing import Any

from commsim.calibrate import corunner
from commsim.calibrate.launch.settings import cpu_cores
from commsim.calibrate.phases.contended import Contended
from commsim.calibrate.phases.base import RankContext, left
from commsim.calibrate.phases.keys import ComputeKey

OVERSUBSCRIBE = 2.0
MAX_CORUNNERS = 2


class Oversubscribed(Contended):
    samples = "compute_oversubscribed"
    mode = "oversubscribed"
    table_fields = ("ranks", "busy_threads")

    def __init__(self):
        super().__init__()
        self.helpers = 0   # co-runners beside this rank
        self.busy = 0      # busy threads on rank 0's host while it measures
        self.runners: list[corunner.CoRunner] = []

    def expected(self, ctx: RankContext) -> int:
        # Rank 0's own co-runners stand for every rank's (plan asks them all).
        return left(ctx, self._keys(ctx)) if self._helpers(ctx) else 0

    @staticmethod
    def _helpers(ctx: RankContext) -> int:
        return corunner.helpers_per_rank(
            ctx.local_index, ctx.colocated, cpu_cores(), ctx.threads,
            float(ctx.config.get("oversubscribe", OVERSUBSCRIBE)), MAX_CORUNNERS)

    def plan(self, ctx: RankContext) -> list[ComputeKey]:
        import torch.distributed as dist

        self.helpers = self._helpers(ctx)
        every: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(every, self.helpers)
        self.busy = sum(1 + n for n, h in zip(every, ctx.hosts) if h == ctx.hosts[0]) * ctx.threads
        self.sizes = tuple(ctx.config["batch_sizes"])[::2]
        return self._keys(ctx) if any(every) else []

    def measure(self, ctx: RankContext, key: ComputeKey) -> dict:
        # A co-runner's first iteration at a new size may take longer than a collective's
        # timeout: heartbeat meanwhile, apart from the timed block (which starts with a barrier).
        with ctx.heartbeat():
            if not self.runners:
                self.runners = [corunner.CoRunner(ctx.config["model"], ctx.input_shape,
                                                  ctx.threads) for _ in range(self.helpers)]
            for r in self.runners:
                r.set_batch(key.batch_size)
        return self.all_ranks(ctx, key, ranks=ctx.colocated, busy_threads=self.busy)

    def progress(self, record: dict) -> str:
        return f"compute {record['busy_threads']} busy threads " + self._batch_progress(record)

    def close(self) -> None:
        for r in self.runners:
            r.close()
        self.runners = []
