"""Contention: a large all-reduce while every rank also computes (DDP overlaps the two).

With k compute threads per rank beside it (k = 0..3), the all-reduce's bandwidth and the
compute's speed both drop; ``fit.with_contention`` turns the records into the link's contention
curve.  Every rank measures every key together.
"""
from __future__ import annotations

from commsim.calibrate import collectives as C
from commsim.calibrate import fit as F
from commsim.calibrate.launch.settings import cpu_cores
from commsim.calibrate.phases.base import Phase, ProfileParts, RankContext, left, median_text
from commsim.calibrate.phases.collectives import collective_spec
from commsim.calibrate.phases.keys import ContentionKey


class Contention(Phase):
    samples = "contention"

    def key(self, record: dict) -> ContentionKey | None:
        return ContentionKey.of(record)

    def expected(self, ctx: RankContext) -> int:
        return left(ctx, self.plan(ctx))   # a fixed plan, nothing measured to make it

    def plan(self, ctx: RankContext) -> list[ContentionKey]:
        return [ContentionKey(k) for k in C.CONTENTION_BURNS] if ctx.world_size > 1 else []

    def measure(self, ctx: RankContext, key: ContentionKey) -> dict:
        spec = collective_spec(ctx)
        nbytes = min(C.CONTENTION_BYTES, max(spec.sizes_bytes))
        rec = C.measure_contention(nbytes, key.burn_threads, spec)
        return {"kind": "contention", "ranks_per_cpu": ctx.colocated, "cores": cpu_cores(),
                "threads": ctx.threads, **rec}

    def progress(self, record: dict) -> str:
        k, nbytes, took = record["burn_threads"], record["bytes"], median_text(record["times_s"])
        if not k:
            return f"contention alone: all_reduce {nbytes} B {took}"
        kept = record["burn_rate_during"] / max(record["burn_rate_alone"], 1e-9)
        return (f"contention {k} compute threads per rank: all_reduce {nbytes} B {took}, "
                f"compute kept {kept:.0%}")

    def add_to_profile(self, records: list[dict], parts: ProfileParts) -> None:
        """The link's bandwidth and the compute's speed under load, on top of the all-reduce's
        fit (nothing without one)."""
        if "all_reduce" in parts.collectives:
            parts.network = F.with_contention(parts.network, records,
                                              parts.collectives["all_reduce"].bandwidth_Bps)
        parts.samples[self.samples] = records
