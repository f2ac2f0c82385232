"""Compute contended: every co-located rank times the same batch size at once.

Ranks on one host share its cores, and a training iteration's compute on shared cores is what
the profile's ``contended`` table says.  Every other batch size only: contention scales the times
by a near-constant factor, and this phase is the slowest of a run on shared cores.  Each rank's
repetitions are kept; the table takes the slowest rank's (``slowest_rank``), because synchronous
training waits for it.  ``oversubscribed`` is this phase with co-runners beside the ranks.
"""
from __future__ import annotations

import statistics
from typing import Any

from commsim.calibrate import compute as K
from commsim.calibrate import fit as F
from commsim.calibrate.launch.heartbeat import Beat
from commsim.calibrate.phases.base import Phase, ProfileParts, RankContext, left, median_text
from commsim.calibrate.phases.keys import ComputeKey

# Repetitions per rank (pooled over ranks).  3, not 2: at 4 ranks on 2 cores two repetitions left
# batch 64 ~15% off the curve through 16 and 256.
CONTENDED_REPS = 3


class Contended(Phase):
    samples = "compute_contended"
    uses_model = True
    mode = "contended"
    # Fields of the records that the profile's table copies.
    table_fields: tuple[str, ...] = ("ranks",)

    def __init__(self):
        self.sizes: tuple[int, ...] = ()

    def key(self, record: dict) -> ComputeKey | None:
        return ComputeKey.of(record, self.mode)

    def expected(self, ctx: RankContext) -> int:
        return left(ctx, self.plan(ctx))   # a fixed plan (the oversubscribed one gathers)

    def _keys(self, ctx: RankContext) -> list[ComputeKey]:
        return [ComputeKey(self.mode, b) for b in tuple(ctx.config["batch_sizes"])[::2]]

    def plan(self, ctx: RankContext) -> list[ComputeKey]:
        self.sizes = tuple(ctx.config["batch_sizes"])[::2]
        return self._keys(ctx) if ctx.colocated > 1 else []

    def measure(self, ctx: RankContext, key: ComputeKey) -> dict:
        return self.all_ranks(ctx, key, ranks=ctx.colocated)

    def all_ranks(self, ctx: RankContext, key: ComputeKey, **fields) -> dict:
        """Every rank times the batch at once (``measure_together``); the record pools their
        repetitions and keeps each rank's under ``per_rank``."""
        import torch.distributed as dist

        dist.barrier()
        # A slower rank may take longer than a collective's timeout: heartbeat meanwhile.
        with ctx.heartbeat() as beat:
            rec = measure_together(ctx.bench, key.batch_size,
                                   int(ctx.config.get("contended_reps", CONTENDED_REPS)), beat)
        per_rank: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(per_rank, rec)
        merged = {f"{ph}_s": [x for r in per_rank for x in r[f"{ph}_s"]] for ph in K.PHASES}
        return {"kind": "compute", "mode": self.mode, "batch_size": key.batch_size, **fields,
                "threads": ctx.threads, **merged,
                "per_rank": {f"{ph}_s": [r[f"{ph}_s"] for r in per_rank] for ph in K.PHASES}}

    def progress(self, record: dict) -> str:
        return f"compute {record['ranks']} ranks " + self._batch_progress(record)

    def _batch_progress(self, record: dict) -> str:
        b = record["batch_size"]
        return (f"batch {b:4d} ({self.sizes.index(b) + 1}/{len(self.sizes)}): "
                f"fwd {median_text(record['forward_s'])} bwd {median_text(record['backward_s'])}")

    def add_to_profile(self, records: list[dict], parts: ProfileParts) -> None:
        """The table of every rank computing at once: the slowest rank's repetitions, fitted
        across batch sizes like the alone table (None when nothing was measured)."""
        parts.samples[self.samples] = records
        if not records:
            parts.compute[self.mode] = None
            return
        slow = [slowest_rank(r) for r in records]
        parts.compute_fits[self.mode] = F.fit_compute(slow, K.PHASES)
        t = F.smooth_compute(K.summarize(slow), parts.compute_fits[self.mode])
        parts.compute[self.mode] = {**{k: records[0][k] for k in self.table_fields},
                                    "batch_sizes": t["batch_sizes"],
                                    **{f"{ph}_s": t[f"{ph}_s"] for ph in K.PHASES}}


def measure_together(bench: K.ComputeBench, batch_size: int, reps: int, beat: Beat) -> dict:
    """Time ``reps`` iterations of ``batch_size`` while every rank computes: a rank done with
    its own keeps computing, untimed, until every rank is done.  Why: ranks drift apart by
    whole iterations, and a slow rank's last repetitions then ran on cores the others had left
    (a 4-rank calibration timed batch 64 at 1.35-1.7 s in some repetitions, below twice its
    0.95 s alone on 2 cores, where live 4-rank training computed it in 2.66 s)."""
    rec = K.measure_batch(bench, batch_size, warmup=1, reps=reps)
    beat.finish()
    x, y = bench.batch(batch_size)
    while not beat.everyone_finished():
        bench.iteration(x, y)
    return rec


def slowest_rank(record: dict) -> dict:
    """A record of every rank timing compute at once, with the repetitions of its slowest rank
    (highest median iteration) in place of the pooled ones; unchanged without ``per_rank``.

    Why: synchronous training waits for its slowest rank every iteration, and on shared cores
    ranks are not alike (here vCPU 0, which also takes the network's interrupts, runs 2-10%
    slower: live 2-rank cells computed 1.64 vs 1.84 s, 1.58 vs 1.52 s).  The slowest rank's
    median over the pooled median was 1.00-1.33 (median 1.05) over 32 calibrations, and
    re-predicting saved fidelity runs with it lowered the main tables' median error in most of
    them (docs/calibration.md).  The slowest rank of each repetition instead (a max of single
    noisy repetitions) over-predicted 4-node compute by 15-35%."""
    per_rank = record.get("per_rank")
    if not per_rank:
        return record
    totals = [statistics.median(sum(reps) for reps in zip(*(per_rank[f"{ph}_s"][k]
                                                            for ph in K.PHASES)))
              for k in range(len(per_rank["forward_s"]))]
    k = totals.index(max(totals))
    return {**record, **{f"{ph}_s": per_rank[f"{ph}_s"][k] for ph in K.PHASES}}
