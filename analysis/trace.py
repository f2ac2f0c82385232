"""The simulated iteration as a Chrome trace (JSON object format; opens in Perfetto).

1. One process per host (``pid`` = host).  Its threads, in this order: for each of its ranks a
   compute track and one or more communication tracks (overlapping collectives get their own
   lane, ``commsim.analysis.timeline.assign_lanes``), then the NIC's transmit and receive
   directions.  Names and order come from ``process_name``/``thread_name``/``*_sort_index``
   metadata events (``"ph": "M"``).
2. Every compute, collective and wire transfer is a complete event (``"ph": "X"``), ``ts``/``dur``
   in microseconds (rounded to nanoseconds), so the events span exactly [0, iteration].
3. Counters (``"ph": "C"``) give the bytes in flight on each NIC direction: +bytes when a
   transfer starts, -bytes when it ends.
Events are sorted deterministically; the same result always gives the same JSON.
"""
from __future__ import annotations

import json
from collections import defaultdict

from commsim.analysis.timeline import assign_lanes
from commsim.result import Result

NIC_TRACKS = ("tx", "rx")
_US = 1e6


def _us(t_s: float) -> float:
    return round(t_s * _US, 3)


def _meta(pid: int, tid: int, name: str, value) -> dict:
    key = "sort_index" if name.endswith("sort_index") else "name"
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": {key: value}}


def chrome_trace(result: Result) -> dict:
    """``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`` for ``result``."""
    if not result.intervals:
        raise ValueError("the result has no intervals: predict it with timeline=True")
    rph = result.ranks_per_host
    host_of = lambda rank: rank // rph  # noqa: E731 - matches ClusterSpec.host_of
    tids: dict[tuple, int] = {}
    meta: list[dict] = []
    comm_lanes: dict[int, int] = {}
    by_rank = defaultdict(list)
    for iv in result.intervals:
        if iv.track == "comm":
            by_rank[iv.owner].append(iv)
    lane_of: dict[int, int] = {}   # id(interval) -> lane
    for rank, ivs in by_rank.items():
        for iv, lane in zip(ivs, assign_lanes([(iv.start, iv.end) for iv in ivs])):
            lane_of[id(iv)] = lane
        comm_lanes[rank] = max(lane_of[id(iv)] for iv in ivs) + 1

    hosts = result.nodes
    for host in range(hosts):
        meta.append(_meta(host, 0, "process_name", f"host {host}"))
        meta.append(_meta(host, 0, "process_sort_index", host))
        tid = 0
        names: list[tuple[tuple, str]] = []
        for rank in range(host * rph, (host + 1) * rph):
            names.append((("compute", rank, 0), f"rank {rank} compute"))
            lanes = comm_lanes.get(rank, 1)
            for lane in range(lanes):
                suffix = f" {lane + 1}" if lanes > 1 else ""
                names.append((("comm", rank, lane), f"rank {rank} comm{suffix}"))
        names.append((("tx", host, 0), "NIC tx (send)"))
        names.append((("rx", host, 0), "NIC rx (receive)"))
        for key, name in names:
            tid += 1
            tids[key] = tid
            meta.append(_meta(host, tid, "thread_name", name))
            meta.append(_meta(host, tid, "thread_sort_index", tid))

    events: list[dict] = []
    flight: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for iv in result.intervals:
        if iv.track in NIC_TRACKS:
            pid, key, cat = iv.owner, (iv.track, iv.owner, 0), "nic"
            flight[(pid, iv.track)] += [(iv.start, iv.args.get("bytes", 0.0)),
                                        (iv.end, -iv.args.get("bytes", 0.0))]
        else:
            pid, cat = host_of(iv.owner), iv.track
            key = (iv.track, iv.owner, lane_of.get(id(iv), 0))
        ts, end = _us(iv.start), _us(iv.end)
        args = {k: v for k, v in sorted(iv.args.items())}
        if iv.track in ("compute", "comm"):
            args["rank"] = iv.owner
        events.append({"ph": "X", "pid": pid, "tid": tids[key], "name": iv.name, "cat": cat,
                       "ts": ts, "dur": round(end - ts, 3), "args": args})
    for host in range(hosts):
        for track in NIC_TRACKS:   # every counter starts at zero with the iteration
            flight[(host, track)].insert(0, (0.0, 0.0))
    for (pid, track), changes in sorted(flight.items()):
        level = 0.0
        for t, delta in sorted(changes, key=lambda c: (c[0], c[1])):
            level += delta
            events.append({"ph": "C", "pid": pid, "tid": 0, "name": f"NIC {track} bytes in flight",
                           "ts": _us(t), "args": {"bytes": max(0.0, round(level, 3))}})
    events.sort(key=lambda e: (e["ts"], e["pid"], e["tid"], e["ph"], e["name"]))
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"strategy": result.strategy, "nodes": result.nodes,
                          "ranks_per_host": rph, "global_batch": result.global_batch,
                          "iteration_s": result.iteration_s, "generator": "commsim trace"}}


def trace_json(result: Result) -> str:
    return json.dumps(chrome_trace(result), indent=None, separators=(",", ":"),
                      sort_keys=True, allow_nan=False) + "\n"
