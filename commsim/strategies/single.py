"""single: one rank trains on the whole global batch; no communication (the seeds' Task 1).

Steps: forward, backward, optimizer step.  The reference every speedup is measured against.
"""
from __future__ import annotations

from commsim.errors import UserError
from commsim.sim import fast
from commsim.strategies.base import (Strategy, accumulation_s, forward_backward, register,
                                     uniform_timing)


@register
class Single(Strategy):
    name = "single"
    summary = "one rank, whole global batch, no communication"
    label = "single node"
    color = "#444444"
    live = True

    def check(self, spec):
        if spec.world_size != 1:
            raise UserError(f"strategy 'single' runs on one rank, not {spec.world_size}; "
                            "use --nodes 1 (speedups of the others are measured against it)")

    def rank_process(self, ctx, rank):
        yield from forward_backward(ctx, rank)
        yield from ctx.compute(rank, "optimizer", ctx.costs.optimizer_s)
        ctx.finish(rank)

    def fast(self, spec, costs, reach):
        return fast.ring_like(spec, costs, buckets=False, reach=reach)

    def analytic(self, spec, costs):
        compute = (accumulation_s(spec, costs) + costs.forward_s + costs.backward_s
                   + costs.optimizer_s)
        return uniform_timing(1, compute, compute, 0.0, 0.0, 0.0)
