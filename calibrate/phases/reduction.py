"""The local reduction cost: ``a.add_(b)`` on one thread, and the parameter server's mean.

Gloo reduces on one thread; γ, its seconds per byte, is the reduction term of the all-reduce
model (``compute.measure_reduction``).  The parameter server's mean (stack and mean on rank 0) is
timed beside it, per byte gathered, for the gather's fit.  Rank 0 measures alone (``solo``).
"""
from __future__ import annotations

from commsim.calibrate import compute as K
from commsim.calibrate import fit as F
from commsim.calibrate.phases.base import Phase, ProfileParts, RankContext, left
from commsim.calibrate.phases.keys import ReductionKey


class Reduction(Phase):
    samples = "reduction"
    solo = True

    def key(self, record: dict) -> ReductionKey | None:
        return ReductionKey.of(record)

    def expected(self, ctx: RankContext) -> int:
        return left(ctx, self.plan(ctx))

    def plan(self, ctx: RankContext) -> list[ReductionKey]:
        return [ReductionKey()] if ctx.rank == 0 else []

    def measure(self, ctx: RankContext, key: ReductionKey) -> dict:
        return {"kind": "reduction", **K.measure_reduction(world=ctx.world_size)}

    def progress(self, record: dict) -> str:
        return f"local reduction over {len(record['sizes_bytes'])} sizes"

    def add_to_profile(self, records: list[dict], parts: ProfileParts) -> None:
        """γ and its interval (0 without a measurement); the record, for the gather's mean."""
        reduction = records[0] if records else None
        gamma, gamma_ci = (F.fit_reduction(reduction["sizes_bytes"], reduction["times_s"])
                           if reduction else (0.0, [0.0, 0.0]))
        parts.reduction, parts.reduction_s_per_B = reduction, gamma
        parts.samples[self.samples] = reduction
        parts.samples["reduction_s_per_B_ci95"] = gamma_ci

    def from_samples(self, samples: dict) -> list[dict]:
        return [samples["reduction"]] if samples.get("reduction") else []
