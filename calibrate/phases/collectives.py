"""Collectives: every Gloo collective over the size sweep, each result checked.

The network half of the profile: send/recv fits the link (α, B), every other collective its own
form over that link (``fit``), with the reduction cost γ where it reduces.  Each op's sweep runs
its sizes upward and stops before one too slow to time (``collectives.sweep_sizes``); every rank
measures every key together.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Iterator

from commsim.calibrate import collectives as C
from commsim.calibrate import fit as F
from commsim.calibrate.phases.base import Phase, ProfileParts, RankContext, left, median_text
from commsim.calibrate.phases.keys import CollectiveKey
from commsim.errors import RunFailed


def collective_spec(ctx: RankContext) -> C.CollectiveSpec:
    return C.CollectiveSpec(sizes_bytes=tuple(ctx.config["sizes_bytes"]),
                            **ctx.config.get("collectives", {}))


class Collectives(Phase):
    samples = "collectives"

    def key(self, record: dict) -> CollectiveKey | None:
        return CollectiveKey.of(record)

    def expected(self, ctx: RankContext) -> int:
        # Every size of every op: a sweep stops early at sizes too slow to time.
        sizes = collective_spec(ctx).sizes_bytes
        return left(ctx, [CollectiveKey(op, n) for op in self._ops(ctx)
                          for n in ((0,) if op == "barrier" else sizes)])

    @staticmethod
    def _ops(ctx: RankContext) -> list[str]:
        return [op for op in C.OPS if not (op == "send_recv" and ctx.world_size < 2)]

    def plan(self, ctx: RankContext) -> Iterator[CollectiveKey]:
        import torch.distributed as dist

        spec = collective_spec(ctx)
        for op in self._ops(ctx):
            for n in C.sweep_sizes(op, spec, lambda n, op=op: ctx.taken[CollectiveKey(op, n)]):
                yield CollectiveKey(op, n)
            # Between ops, every rank checks in: a rank that is gone is named here.
            timeout = timedelta(seconds=float(ctx.config["collective_timeout_s"]))
            dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)

    def measure(self, ctx: RankContext, key: CollectiveKey) -> dict:
        return {"kind": "collective", **C.measure(key.op, key.bytes, collective_spec(ctx))}

    def progress(self, record: dict) -> str:
        return (f"{record['op']:10s} {record['bytes']:>9d} B: {median_text(record['times_s'])} "
                f"x{record['inner']} #wrong {record['wrong']}")

    def add_to_profile(self, records: list[dict], parts: ProfileParts) -> None:
        """The link from send/recv, then every other collective's fit over it."""
        by_op = {op: [r for r in records if r["op"] == op] for op in C.OPS}
        if len({r["bytes"] for r in by_op["send_recv"]}) < 2:
            raise RunFailed("send/recv was measured at fewer than 2 sizes: cannot fit the link")
        network, fits = F.fit_network(by_op["send_recv"])
        collectives = {"send_recv": fits}
        for op in ("all_reduce", "gather", "scatter", "broadcast", "barrier"):
            if by_op[op]:
                collectives[op] = F.fit_collective(op, by_op[op], world_size=parts.world_size,
                                                   network=network,
                                                   reduction_s_per_B=parts.reduction_s_per_B)
        reduction = parts.reduction
        if "gather" in collectives and reduction and "mean_times_s" in reduction:
            # The root's reduction after a gather is the parameter server's mean: per byte
            # gathered (world x size), not Gloo's in-place add.
            mean, _ = F.fit_reduction([n * reduction["world"] for n in reduction["sizes_bytes"]],
                                      reduction["mean_times_s"])
            collectives["gather"] = replace(collectives["gather"], reduction_s_per_B=mean)
        parts.network, parts.collectives = network, collectives
        parts.samples[self.samples] = records
        parts.samples["nccl_table"] = F.nccl_table(records)
