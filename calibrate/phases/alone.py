"""Compute alone: a training iteration's forward, backward and step times per batch size, with
nothing else running, and (CIFAR-shaped models) the time to load a batch.

The base of the profile's compute table.  With co-located ranks only rank 0 measures while the
others wait (``solo``): they would share its cores.  On separate hosts every rank measures at
once, which is the same thing, and rank 0's records are kept.  Sizes are timed in interleaved
rounds (``compute.RoundSweep``), one record per (size, round), so that a resumed run skips the
rounds it has; a size with a record of all its repetitions (logs from before the rounds) is done.
"""
from __future__ import annotations

from typing import Iterator

from commsim.calibrate import compute as K
from commsim.calibrate import fit as F
from commsim.calibrate.phases.base import Phase, ProfileParts, RankContext, left, median_text
from commsim.calibrate.phases.keys import ComputeKey
from commsim.errors import RunFailed

# The seeds' per-rank batch (256 over 4 nodes): where the gradient-ready shape is taken.
GRAD_READY_BATCH = 64
DATA_REPS = 3


class Alone(Phase):
    samples = "compute"
    solo = True
    uses_model = True

    def __init__(self):
        self.sweep: K.RoundSweep | None = None

    def key(self, record: dict) -> ComputeKey | None:
        return ComputeKey.of(record, "alone", "data")

    @staticmethod
    def _spec(ctx: RankContext) -> K.ComputeSpec:
        return K.ComputeSpec(model=ctx.config["model"], input_shape=ctx.input_shape,
                             batch_sizes=tuple(ctx.config["batch_sizes"]),
                             **ctx.config.get("compute", {}))

    def expected(self, ctx: RankContext) -> int:
        # Until the warm-ups have planned the rounds, each size at its usual repetitions.
        spec = self._spec(ctx)
        data = left(ctx, [ComputeKey("data", b) for b in spec.batch_sizes]) \
            if ctx.input_shape == K.CIFAR_SHAPE else 0
        if self.sweep is not None:
            return left(ctx, [ComputeKey("alone", b, r) for b, r in self.sweep.slots]) + data
        todo = [b for b in spec.batch_sizes if ComputeKey("alone", b) not in ctx.taken]
        return len(todo) * spec.reps + data

    def plan(self, ctx: RankContext) -> Iterator[ComputeKey]:
        spec = self._spec(ctx)
        todo = [b for b in spec.batch_sizes if ComputeKey("alone", b) not in ctx.taken]
        if not todo or not (ctx.rank == 0 or ctx.colocated == 1):
            return
        # The warm-ups plan the rounds; a resumed run keeps the plan its saved rounds were
        # taken in (re-planned on a machine whose speed has drifted, a size's repetitions
        # change, and with them the rounds it runs in: saved ones unused, new ones timed).
        saved = {key.batch_size: record["of"] for key, record in ctx.taken.items()
                 if isinstance(key, ComputeKey) and key.mode == "alone"
                 and key.round is not None}
        self.sweep = K.RoundSweep(ctx.bench, spec, todo, planned=saved)
        for b, r in self.sweep.slots:
            yield ComputeKey("alone", b, r)
        if ctx.input_shape == K.CIFAR_SHAPE:
            for b in todo:
                yield ComputeKey("data", b)

    def measure(self, ctx: RankContext, key: ComputeKey) -> dict:
        if key.mode == "data":
            return {"kind": "compute", "mode": "data", "batch_size": key.batch_size,
                    "data_s": K.measure_data(key.batch_size, reps=DATA_REPS)}
        return {"kind": "compute", "mode": "alone", "threads": ctx.threads,
                **self.sweep.measure(key.batch_size, key.round)}

    def progress(self, record: dict) -> str:
        if record["mode"] == "data":
            return (f"data loading    batch {record['batch_size']:4d}: "
                    f"{median_text(record['data_s'])}")
        total = record["forward_s"][0] + record["backward_s"][0] + record["optimizer_s"][0]
        return (f"compute alone   batch {record['batch_size']:4d} (round {record['round'] + 1}, "
                f"{record['of']} for this size): {total:.3f} s")

    def add_to_profile(self, records: list[dict], parts: ProfileParts) -> None:
        """The compute table: each size's median, smoothed across sizes where a curve fits
        (``fit.fit_compute``); the gradient-ready shape of the size nearest the seeds'."""
        alone = K.merge_rounds(records)
        if not alone:
            raise RunFailed("no compute samples were taken")
        table = K.summarize(alone)
        phases = tuple(k[:-2] for k in table if k.endswith("_s") and not k.endswith("spread_s"))
        parts.compute_fits["alone"] = F.fit_compute(alone, phases)
        table = F.smooth_compute(table, parts.compute_fits["alone"])
        parts.compute.update(threads_per_rank=int(alone[0].get("threads", 1)),
                             batch_sizes=tuple(table["batch_sizes"]),
                             **{k: tuple(v) for k, v in table.items() if k != "batch_sizes"})
        parts.grad_ready = min(alone, key=lambda r: (abs(r["batch_size"] - GRAD_READY_BATCH),
                                                     r["batch_size"]))
        parts.samples[self.samples] = alone
