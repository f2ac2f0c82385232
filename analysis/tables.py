"""The report's tables as data (lists of flat dicts, SI units in the keys), no plotting.

1. ``Runs`` predicts each (strategy, nodes, batch) once, because several tables and figures
   look at the same run: with engine ``auto`` (the fast engine, exactly the DES's numbers, where
   it applies) for numbers, with the DES and its timeline where intervals are needed.
2. ``scaling_table``: iteration, speedup and efficiency per strategy and node count, strong
   (fixed global batch) or weak (fixed batch per rank) scaling.
3. ``compute_comm_table``: per rank, where the iteration went: compute, communication hidden
   behind compute (overlapped), communication the rank waited for (exposed), and idle time.
4. ``bandwidth_table``: algbw, busbw and the fraction of the link they reach.
5. ``compute_table`` / ``compute_curve``: the profile's compute times vs batch size, and the
   interpolation the simulator uses between them.
Rows are sorted the same way every time so that CSV/JSON outputs are byte-identical.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from commsim.api import Scenario, predict
from commsim.profile import PHASES, Profile
from commsim.result import Result
from commsim.spec import DEFAULT_GLOBAL_BATCH

STRONG, WEAK = "strong", "weak"
DEFAULT_WEAK_BATCH = 64      # its per-node batch on 4 nodes


@dataclass
class Runs:
    """Memoised predictions of one profile under one base scenario.

    global_batch:  strong scaling's samples per iteration over all ranks.
    weak_batch:    weak scaling's samples per rank.
    """
    profile: Profile
    base: Scenario = field(default_factory=Scenario)
    global_batch: int = DEFAULT_GLOBAL_BATCH
    weak_batch: int = DEFAULT_WEAK_BATCH
    _cache: dict = field(default_factory=dict, repr=False)

    def get(self, strategy: str, nodes: int, *, batch_per_rank: int | None = None,
            timeline: bool = False) -> Result:
        """One run: strong scaling unless ``batch_per_rank`` is given; ``timeline`` runs the DES
        and keeps its intervals (a timeline run also answers later plain requests)."""
        world = self.world(nodes)
        if batch_per_rank is None and self.global_batch % world == 0:
            # The same run as weak scaling at global/world per rank (same spec, same baseline):
            # share it, the DES is the report's main cost.
            batch_per_rank = self.global_batch // world
        key = (strategy, nodes, batch_per_rank)
        with_timeline = key + (True,)
        if with_timeline in self._cache:
            return self._cache[with_timeline]
        key += (timeline,)
        if key not in self._cache:
            sc = replace(self.base, global_batch=None if batch_per_rank else self.global_batch,
                         batch_per_rank=batch_per_rank)
            self._cache[key] = predict(self.profile, strategy, nodes, sc, timeline=timeline,
                                       engine="des" if timeline else "auto")
        return self._cache[key]

    def fits(self, strategy: str, nodes: int, *, batch_per_rank: int | None = None) -> bool:
        """Whether the run exists: ``single`` is one rank; a strong batch needs a sample a rank."""
        world = nodes * self.base.ranks_per_host
        if strategy == "single" and world != 1:
            return False
        return batch_per_rank is not None or self.global_batch >= world

    def world(self, nodes: int) -> int:
        return nodes * self.base.ranks_per_host


def scaling_table(runs: Runs, strategies: Sequence[str], nodes: Sequence[int], *,
                  mode: str = STRONG) -> list[dict]:
    """Time per iteration, speedup and efficiency for every strategy and node count.

    Speedup and efficiency are ``Result``'s: samples per second over one rank running the same
    global batch, and speedup / ranks.
    """
    if mode not in (STRONG, WEAK):
        raise ValueError(f"mode must be {STRONG!r} or {WEAK!r}, got {mode!r}")
    batch = runs.weak_batch if mode == WEAK else None
    rows = []
    for strategy in strategies:
        for n in nodes:
            if not runs.fits(strategy, n, batch_per_rank=batch):
                continue
            r = runs.get(strategy, n, batch_per_rank=batch)
            rows.append({"scaling": mode, "strategy": strategy, "nodes": n,
                         "world_size": r.world_size, "global_batch": r.global_batch,
                         "batch_per_rank": r.batch_per_rank, "iteration_s": r.iteration_s,
                         "compute_s": r.compute_s, "exposed_comm_s": r.exposed_comm_s,
                         "speedup": r.speedup, "efficiency": r.efficiency,
                         "epoch_s": r.epoch_s})
    return rows


# ----------------------------------------------------------------------------------------------
# Interval arithmetic (unions of [start, end) spans)
# ----------------------------------------------------------------------------------------------

def union(spans) -> list[tuple[float, float]]:
    """Sorted, merged, non-empty spans."""
    out: list[list[float]] = []
    for s, e in sorted((s, e) for s, e in spans if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(spans) -> float:
    return sum(e - s for s, e in union(spans))


def intersection_length(a, b) -> float:
    """Length of (union a) ∩ (union b), by a merge of the two sorted lists."""
    a, b = union(a), union(b)
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def rank_breakdown(result: Result) -> list[dict]:
    """Per rank: compute, overlapped and exposed communication, idle.

    overlapped = time with a collective in flight while the rank computes; exposed = in flight
    while it does not; idle = neither (waiting for another rank, or finished early).  The four
    add up to the iteration time.  From the intervals when the result has them; otherwise from
    the per-rank totals, counting the time not computing as communication first: exact for
    even clusters the fast engine runs (tests hold it to the intervals), see ``breakdown``.
    """
    if not result.intervals:
        return [_from_totals(result, pr) for pr in result.per_rank]
    rows = []
    for rank in range(result.world_size):
        comp = [(iv.start, iv.end) for iv in result.intervals
                if iv.track == "compute" and iv.owner == rank]
        comm = [(iv.start, iv.end) for iv in result.intervals
                if iv.track == "comm" and iv.owner == rank]
        compute_s = length(comp)
        comm_s = length(comm)
        overlapped = intersection_length(comp, comm)
        busy = length(comp + comm)
        rows.append({"rank": rank, "compute_s": compute_s, "comm_s": comm_s,
                     "overlapped_comm_s": overlapped, "exposed_comm_s": comm_s - overlapped,
                     "idle_s": max(0.0, result.iteration_s - busy),
                     "critical": rank == result.critical_rank})
    return rows


def _from_totals(result: Result, pr: dict) -> dict:
    free = result.iteration_s - pr["compute_s"]
    exposed = min(pr["comm_s"], free)
    return {"rank": pr["rank"], "compute_s": pr["compute_s"], "comm_s": pr["comm_s"],
            "overlapped_comm_s": pr["comm_s"] - exposed, "exposed_comm_s": exposed,
            "idle_s": max(0.0, free - exposed), "critical": pr["rank"] == result.critical_rank}


def breakdown(runs: Runs, strategy: str, nodes: int, batch_per_rank: int) -> tuple:
    """(result, rank rows): from the per-rank totals for even clusters the fast engine ran,
    else from the DES's intervals (with a straggler or a slow link a rank can both overlap
    communication and wait idle, which its totals cannot tell apart)."""
    r = runs.get(strategy, nodes, batch_per_rank=batch_per_rank)
    even = not runs.base.stragglers and not runs.base.slow_links_Bps
    if not r.intervals and (r.engine == "des" or not even):
        r = runs.get(strategy, nodes, batch_per_rank=batch_per_rank, timeline=True)
    return r, rank_breakdown(r)


def compute_comm_table(runs: Runs, strategies: Sequence[str], nodes: Sequence[int],
                       batch_sizes: Sequence[int]) -> list[dict]:
    """Every rank's breakdown for every strategy, node count and batch size per rank."""
    rows = []
    for batch in batch_sizes:
        for strategy in strategies:
            for n in nodes:
                if not runs.fits(strategy, n, batch_per_rank=batch):
                    continue
                r, ranks = breakdown(runs, strategy, n, batch)
                for row in ranks:
                    rows.append({"strategy": strategy, "nodes": n, "batch_per_rank": batch,
                                 "iteration_s": r.iteration_s, **row})
    return rows


def critical_rows(rows: Sequence[dict]) -> list[dict]:
    """The critical rank's row of each run (what the iteration time is made of)."""
    return [r for r in rows if r["critical"]]


def bandwidth_table(runs: Runs, strategies: Sequence[str], nodes: Sequence[int],
                    batch_sizes: Sequence[int]) -> list[dict]:
    """Bandwidth of every multi-rank run: bytes synchronised, algbw, busbw, share of the link.

    busbw_fraction = busbw / link bandwidth (nccl-tests' yardstick: 1.0 means the collective
    ran at wire speed); link_utilization = the busiest NIC direction's busy share of the
    iteration (low when compute dominates, even if the collective itself is efficient).
    """
    rows = []
    for strategy in strategies:
        for n in nodes:
            if runs.world(n) < 2:
                continue
            for batch in batch_sizes:
                if not runs.fits(strategy, n, batch_per_rank=batch):
                    continue
                r = runs.get(strategy, n, batch_per_rank=batch)
                rows.append({"strategy": strategy, "nodes": n, "batch_per_rank": batch,
                             "bytes_synced": runs.profile.model_bytes, "comm_s": r.comm_s,
                             "algbw_Bps": r.algbw_Bps, "busbw_Bps": r.busbw_Bps,
                             "link_bandwidth_Bps": r.link_bandwidth_Bps,
                             "busbw_fraction": r.busbw_Bps / r.link_bandwidth_Bps,
                             "link_utilization": r.link_utilization})
    return rows


# ----------------------------------------------------------------------------------------------
# Compute vs batch size
# ----------------------------------------------------------------------------------------------


def compute_table(profile: Profile) -> list[dict]:
    """The measured compute table: one row per batch size, with spreads where measured."""
    c = profile.compute
    rows = []
    for i, b in enumerate(c.batch_sizes):
        row = {"batch_size": b}
        for phase in PHASES:
            row[f"{phase}_s"] = getattr(c, f"{phase}_s")[i]
            spread = getattr(c, f"{phase}_spread_s")
            row[f"{phase}_spread_s"] = spread[i] if spread else None
        row["total_s"] = sum(row[f"{p}_s"] for p in PHASES)
        row["samples_per_s"] = b / row["total_s"]
        rows.append(row)
    return rows


def compute_curve(profile: Profile, points: int = 96) -> list[dict]:
    """What the simulator uses between and beyond the measured sizes (1 .. 1.25 x largest)."""
    top = profile.compute.batch_sizes[-1] * 1.25
    rows = []
    for k in range(points):
        b = 1 + (top - 1) * k / (points - 1)
        row = {"batch_size": b}
        for phase in PHASES:
            row[f"{phase}_s"] = profile.compute.time_s(phase, b)
        row["total_s"] = sum(row[f"{p}_s"] for p in PHASES)
        rows.append(row)
    return rows
