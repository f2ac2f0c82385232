"""One simulated iteration as Gantt segments per rank: compute, each collective, idle.

1. Compute and communication intervals come from the DES recorder (``Result.intervals``), the
   same events the result's numbers are computed from.
2. Communication that overlaps on one rank (DDP buckets in flight together) is split over lanes
   by greedy interval partitioning, so no two segments of a lane overlap.
3. Idle is every gap in [0, iteration] where the rank neither computes nor communicates.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from commsim.analysis.tables import Runs, union
from commsim.result import Result

COMPUTE, COMM, IDLE = "compute", "comm", "idle"


@dataclass(frozen=True)
class Segment:
    """A span of one rank's iteration; ``lane`` separates overlapping communication."""
    rank: int
    kind: str            # compute | comm | idle
    name: str            # forward, backward, optimizer, "bucket 3", "all_reduce p7", idle
    start_s: float
    end_s: float
    lane: int = 0
    bucket: int | None = None
    bytes: float | None = None


def _index(name: str) -> int | None:
    """The bucket/parameter number at the end of a collective's name ('bucket 3' -> 3)."""
    m = re.search(r"(\d+)\s*$", name)
    return int(m.group(1)) if m else None


def assign_lanes(spans: Sequence[tuple[float, float]]) -> list[int]:
    """Lane per span (in the given order) so that spans in one lane never overlap."""
    lane_end: list[float] = []
    lanes = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda k: (spans[k][0], spans[k][1], k)):
        s, e = spans[i]
        for lane, end in enumerate(lane_end):
            if end <= s:
                lanes[i], lane_end[lane] = lane, e
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(e)
    return lanes


def segments(result: Result) -> list[Segment]:
    """Every rank's compute, communication and idle segments, sorted by rank then time."""
    if not result.intervals:
        raise ValueError("the result has no intervals: predict it with timeline=True")
    return interval_segments(result.intervals, result.world_size, result.iteration_s)


def interval_segments(intervals: Sequence, world_size: int,
                      iteration_s: float) -> list[Segment]:
    """``segments`` of any intervals (``commsim.sim.engine.Interval``: simulated or measured)
    of ranks 0..world_size-1 over [0, iteration_s]."""
    out: list[Segment] = []
    for rank in range(world_size):
        mine = [iv for iv in intervals if iv.owner == rank and iv.track in (COMPUTE, COMM)]
        comms = [iv for iv in mine if iv.track == COMM]
        lanes = assign_lanes([(iv.start, iv.end) for iv in comms])
        for iv in mine:
            if iv.track == COMPUTE:
                out.append(Segment(rank, COMPUTE, iv.name, iv.start, iv.end,
                                   bucket=iv.args.get("bucket")))
        for iv, lane in zip(comms, lanes):
            out.append(Segment(rank, COMM, iv.name, iv.start, iv.end, lane=lane,
                               bucket=_index(iv.name), bytes=iv.args.get("bytes")))
        t = 0.0
        for s, e in union([(iv.start, iv.end) for iv in mine]) + [(iteration_s,) * 2]:
            if s > t:
                out.append(Segment(rank, IDLE, IDLE, t, s))
            t = max(t, e)
    out.sort(key=lambda g: (g.rank, g.start_s, g.kind, g.lane, g.name))
    return out


def timeline_rows(runs: Runs, strategies: Sequence[str], nodes: int) -> list[dict]:
    """The segments of each strategy's iteration on ``nodes`` nodes, as flat rows."""
    rows = []
    for strategy in strategies:
        n = 1 if strategy == "single" else nodes
        if not runs.fits(strategy, n):
            continue
        r = runs.get(strategy, n, timeline=True)
        rows += segment_rows(segments(r), strategy=strategy, nodes=n, iteration_s=r.iteration_s)
    return rows


def segment_rows(segs: Sequence[Segment], **common) -> list[dict]:
    """Segments as flat rows (the report's tables and Gantt pages), each with ``common``."""
    return [{**common, "rank": g.rank, "kind": g.kind, "name": g.name, "lane": g.lane,
             "bucket": g.bucket, "bytes": g.bytes, "start_s": g.start_s, "end_s": g.end_s}
            for g in segs]
