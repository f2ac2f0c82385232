"""Host side: the large collectives again with the emulated links' shaping taken off.

A byte of a collective costs line time on the link and CPU time on the hosts (copies, the TCP
stack, Gloo's bookkeeping); the shaped sweep (``collectives``) measures the larger of the two at
the calibrated rate, and a ``--bandwidth`` what-if should change only the first.  With the
shaping off (``cluster.unshaped``) the hosts are the bottleneck: all-reduce, gather and scatter
at 4 and 16 MiB give each collective's host rate (``CollectiveFit.host_bandwidth_Bps``: its bytes
term over the time left once the fitted per-call constant and, for all-reduce, the reductions
are taken off).  Only on an emulated cluster (a real one cannot be unshaped), and not with
``--quick`` (its sweep has no large sizes to compare with).
"""
from __future__ import annotations

import json
import statistics
from dataclasses import replace
from typing import Iterator

from commsim.calibrate import collectives as C
from commsim.calibrate.phases.base import Phase, ProfileParts, RankContext, left, median_text
from commsim.calibrate.phases.keys import HostSideKey
from commsim.closed_form import FORMS

OPS = ("all_reduce", "gather", "scatter")
SIZES_BYTES = (4 << 20, 16 << 20)
KEYS = tuple(HostSideKey(op, n) for op in OPS for n in SIZES_BYTES)


class HostSide(Phase):
    samples = "host_side"

    def key(self, record: dict) -> HostSideKey | None:
        return HostSideKey.of(record)

    @staticmethod
    def _runs(ctx: RankContext) -> bool:
        return (ctx.config.get("cluster") is not None and ctx.world_size > 1
                and not ctx.config.get("quick"))

    def expected(self, ctx: RankContext) -> int:
        return left(ctx, KEYS) if self._runs(ctx) else 0

    def plan(self, ctx: RankContext) -> Iterator[HostSideKey]:
        import torch.distributed as dist

        if not self._runs(ctx):
            return
        info = ctx.config["cluster"]
        from commsim.calibrate import cluster

        if all(k in ctx.taken for k in KEYS):   # a resumed run had them all
            yield from KEYS
            return
        dist.barrier()
        # Rank 0 takes the shaping off every link (root, from inside its node: ``tc -n``);
        # every rank measures; the shaping goes back on after the last key, or on an error.
        unshaped = cluster.unshaped(cluster.ClusterInfo.from_json(json.dumps(info))) \
            if ctx.rank == 0 else None
        try:
            if unshaped is not None:
                unshaped.__enter__()
            dist.barrier()
            yield from KEYS
            dist.barrier()
        finally:
            if unshaped is not None:
                unshaped.__exit__(None, None, None)

    def measure(self, ctx: RankContext, key: HostSideKey) -> dict:
        spec = C.CollectiveSpec(sizes_bytes=SIZES_BYTES, reps=3, slow_reps=3)
        return {"kind": "host_side", **C.measure(key.op, key.bytes, spec)}

    def progress(self, record: dict) -> str:
        return (f"host side {record['op']:10s} {record['bytes']:>9d} B unshaped: "
                f"{median_text(record['times_s'])}")

    def add_to_profile(self, records: list[dict], parts: ProfileParts) -> None:
        parts.samples[self.samples] = records
        for op in OPS:
            rates = [host_rate(r, parts) for r in records if r["op"] == op]
            rates = [x for x in rates if x is not None]
            if rates and op in parts.collectives:
                parts.collectives[op] = replace(parts.collectives[op],
                                                host_bandwidth_Bps=statistics.median(rates))


def host_rate(record: dict, parts: ProfileParts) -> float | None:
    """Bytes per second of one unshaped record's bytes term (None: nothing left to time)."""
    fit, p, n = parts.collectives.get(record["op"]), record["world_size"], record["bytes"]
    if fit is None or parts.network is None:
        return None
    form = FORMS[record["op"]]
    t = statistics.median(record["times_s"])
    left = (t - fit.overhead_s - form.latency_mult(p) * parts.network.latency_s
            - form.reduce_mult(p) * n * fit.reduction_s_per_B)
    return form.bytes_mult(p) * n / left if left > 0 else None
