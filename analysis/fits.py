"""Calibration fits for the report: measured points and fitted line per collective.

1. The fitted numbers come from ``profile.collectives`` (and ``profile.network`` for send/recv).
2. Raw points come from ``profile.samples["collectives"]`` when calibrate stored them: either a
   list of records ``{"op", "bytes", "times_s": [...]}`` (what ``commsim.calibrate.collectives``
   measures) or a mapping ``op -> [records]``; a record may give one ``time_s`` instead.
   Anything else is ignored: a profile without raw samples still gets its fitted lines.
3. The line is ``commsim.calibrate.fit.predict`` (the same form the fit used) over the sampled
   size range, or 4 B .. 64 MiB without samples.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from commsim.profile import CollectiveFit, Profile

DEFAULT_SIZES = (4, 64 << 20)


@dataclass(frozen=True)
class FitView:
    """One collective: its fit, its measured (bytes, seconds) points, and the fitted line."""
    op: str
    fit: CollectiveFit
    points: tuple[tuple[float, float], ...]
    line: tuple[tuple[float, float], ...]


def _records(samples: Any) -> list[dict]:
    raw = samples.get("collectives") if isinstance(samples, dict) else None
    if isinstance(raw, dict):
        raw = [dict(r, op=op) for op, recs in sorted(raw.items()) if isinstance(recs, list)
               for r in recs if isinstance(r, dict)]
    return [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def sample_points(profile: Profile) -> dict[str, list[tuple[float, float]]]:
    """op -> sorted (bytes, seconds) points, one per timed repetition."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in _records(profile.samples):
        op, n = r.get("op"), r.get("bytes", r.get("size_bytes"))
        times = r.get("times_s", [r.get("time_s")])
        if not isinstance(op, str) or not _num(n) or not isinstance(times, list):
            continue
        out.setdefault(op, []).extend((float(n), float(t)) for t in times if _num(t) and t > 0)
    return {op: sorted(pts) for op, pts in sorted(out.items()) if pts}


def _line(op: str, fit: CollectiveFit, lo: float, hi: float, steps: int = 48):
    from commsim.calibrate.fit import FORMS, predict  # numpy/scipy: only when drawing fits
    if op not in FORMS:
        return ()
    lo, hi = max(lo, 1.0), max(hi, lo * 2)
    sizes = [lo * (hi / lo) ** (k / (steps - 1)) for k in range(steps)]
    return tuple((n, predict(op, fit, n)) for n in sizes)


def fit_views(profile: Profile) -> list[FitView]:
    """Every fitted collective (plus send/recv when measured), in name order."""
    points = sample_points(profile)
    fits = dict(profile.collectives)
    if "send_recv" in points and "send_recv" not in fits:
        fits["send_recv"] = CollectiveFit(latency_s=profile.network.latency_s,
                                          bandwidth_Bps=profile.network.bandwidth_Bps)
    views = []
    for op in sorted(fits):
        pts = tuple(points.get(op, ()))
        sized = [n for n, _ in pts if n > 0]
        lo, hi = (min(sized), max(sized)) if sized else DEFAULT_SIZES
        views.append(FitView(op, fits[op], pts, _line(op, fits[op], lo, hi)))
    return views


def fit_rows(views: list[FitView]) -> list[dict]:
    """The fitted numbers, one row per collective (CSV/JSON and the figure's legend)."""
    rows = []
    for v in views:
        f = v.fit
        ci = dict(f.ci95 or {})
        bw_ci = ci.get("bandwidth_Bps") or [None, None]
        rows.append({"op": v.op, "world_size": f.world_size, "latency_s": f.latency_s,
                     "bandwidth_Bps": f.bandwidth_Bps, "bandwidth_ci95_lo_Bps": bw_ci[0],
                     "bandwidth_ci95_hi_Bps": bw_ci[1],
                     "reduction_s_per_B": f.reduction_s_per_B, "overhead_s": f.overhead_s,
                     "r2": f.r2, "samples": len(v.points)})
    return rows


def sample_rows(views: list[FitView]) -> list[dict]:
    return [{"op": v.op, "bytes": n, "time_s": t} for v in views for n, t in v.points]
