"""One rank of ``commsim calibrate``: every phase in turn, resumable (``calibrate_rank``).

The launched worker (``runner.WORKER``).  Rank 0 hands every rank the records of an interrupted
run (``--resume``); then, for each phase of ``PHASES`` in order:
1. a solo phase runs inside one heartbeat block (``launch.heartbeat``): the ranks that do not
   measure wait for rank 0 as long as it takes, and still notice a dead peer within the
   collective timeout;
2. each key the phase plans is measured unless a record of it was resumed; rank 0 appends the
   record to the samples log at once (fsynced: a killed run keeps it) and reports its progress
   (done of done + every phase's ``expected``);
3. the phase releases what it held; the model is freed after the last phase that times it.
Rank 0 returns every record, resumed and new, for the profile (``assemble``).
"""
from __future__ import annotations

import contextlib
import socket
from datetime import timedelta
from typing import Any, Iterator

from commsim.calibrate import compute as K
from commsim.calibrate.launch.heartbeat import heartbeat
from commsim.calibrate.launch.settings import runtime_info
from commsim.calibrate.models import build_model
from commsim.calibrate.phases import PHASES
from commsim.calibrate.phases.base import Phase, RankContext
from commsim.calibrate.samples import SampleLog
from commsim.progress import rank_progress


class PhaseProgress:
    """Rank 0's progress: keys measured so far, of those measured plus every phase's still
    expected (``Phase.expected``; resumed records are not work and count in neither), reported
    through ``commsim.progress.rank_progress`` (the launcher's display, or the rank's own)."""

    def __init__(self, enabled: bool, phases: list[Phase], ctx: RankContext):
        self.out = rank_progress("calibrate", enabled)
        self.enabled, self.phases, self.ctx = enabled, phases, ctx
        self.done = 0

    def start(self) -> None:
        self._update(0, f"{len(self.phases)} phases")

    def measured(self, index: int, phase: Phase, record: dict) -> None:
        self.done += 1
        self._update(index, phase.progress(record) or f"{type(phase).__name__.lower()}: "
                                                    f"{phase.key(record)}")

    def _update(self, index: int, text: str) -> None:
        if self.enabled:
            left = sum(phase.expected(self.ctx) for phase in self.phases[index:])
            self.out.update(self.done, self.done + left, text)

    def close(self) -> None:
        self.out.close()


def calibrate_rank(rank: int, world_size: int, config: dict) -> dict:
    """Measure every phase on this rank (see the module docstring); rank 0 returns all records."""
    import torch.distributed as dist

    log = SampleLog(config["samples_path"]) if rank == 0 else None
    holder = [config.get("done", []) if rank == 0 else None]
    dist.broadcast_object_list(holder, src=0)
    resumed: list[dict] = holder[0]
    hosts: list[Any] = [None] * world_size
    dist.all_gather_object(hosts, socket.gethostname())
    # Waiting for rank 0's solo phases can take minutes, longer than any collective timeout:
    # the ranks heartbeat on their own group meanwhile, so a dead link is still found quickly.
    beat_s = float(config["collective_timeout_s"])
    beat_group = dist.new_group(timeout=timedelta(seconds=beat_s))
    bench = K.ComputeBench(lambda: build_model(config["model"]), tuple(config["input_shape"]))
    ctx = RankContext(rank, world_size, config, hosts, lambda: heartbeat(beat_group, beat_s),
                      bench)
    phases: list[Phase] = [phase() for phase in PHASES]
    ctx.taken = {key: r for r in resumed for phase in phases
                 if (key := phase.key(r)) is not None}
    records = list(resumed) if rank == 0 else []
    shown = PhaseProgress(rank == 0, phases, ctx)
    shown.start()
    for i, phase in enumerate(phases):
        with ctx.heartbeat() if phase.solo else contextlib.nullcontext():
            try:
                for record in _measure(phase, ctx):
                    if log is not None:
                        log.append(record)
                        records.append(record)
                        shown.measured(i, phase, record)
            finally:
                phase.close()
        if not any(later.uses_model for later in phases[i + 1:]):
            ctx.bench = None  # the model and its activations: freed before the collectives
    shown.close()
    if rank != 0:
        return {"rank": rank}
    return {"rank": 0, "records": records, "ranks_per_host": ctx.colocated, "hosts": hosts,
            "runtime": runtime_info()}


def _measure(phase: Phase, ctx: RankContext) -> Iterator[dict]:
    """The records of the keys ``phase`` plans that were not resumed, each added to
    ``ctx.taken`` before the plan goes on (a plan may look at it)."""
    for key in phase.plan(ctx):
        if key in ctx.taken:
            continue
        record = phase.measure(ctx, key)
        if phase.key(record) != key:  # resume would measure it again, every time
            raise RuntimeError(f"{type(phase).__name__} measured {key} but its record reads as "
                               f"{phase.key(record)}")
        ctx.taken[key] = record
        yield record
