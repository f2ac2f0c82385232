"""Iterations as Chrome traces (JSON object format; opens in Perfetto), and the format's checks.

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

``host_events`` does steps 1-3 for any intervals (``commsim.sim.engine.Interval``) under any
process names, so the simulated iteration (``chrome_trace``), a measured one
(``commsim.analysis.measured``) and both side by side share one schema and one set of track
names.  ``trace_problems`` checks a trace against the format's own rules.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Callable, Sequence

from commsim.analysis.timeline import assign_lanes
from commsim.result import Result

NIC_TRACKS = ("tx", "rx")
_US = 1e6


def _us(t_s: float) -> float:
    return round(t_s * _US, 3)


def _meta(pid: int, tid: int, name: str, value) -> dict:
    key = "sort_index" if name.endswith("sort_index") else "name"
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": {key: value}}


def host_events(intervals: Sequence, *, hosts: int, ranks_per_host: int,
                pid: Callable[[int], int] = lambda host: host,
                process_name: Callable[[int], str] = lambda host: f"host {host}",
                nic: bool = True) -> tuple[list[dict], list[dict]]:
    """(metadata events, timed events) of ``intervals`` laid out a process per host.

    ``pid``/``process_name`` map a host to its process id and name (and the id is its sort
    index, so processes appear in id order); ``nic`` False leaves out the NIC tracks and
    counters (a measured iteration has no wire transfers).  Timed events are not sorted."""
    rph = ranks_per_host
    tids: dict[tuple, int] = {}
    meta: list[dict] = []
    comm_lanes: dict[int, int] = {}
    by_rank = defaultdict(list)
    for iv in intervals:
        if iv.track == "comm":
            by_rank[iv.owner].append(iv)
    lane_of: dict[int, int] = {}   # id(interval) -> lane
    for rank, ivs in by_rank.items():
        for iv, lane in zip(ivs, assign_lanes([(iv.start, iv.end) for iv in ivs])):
            lane_of[id(iv)] = lane
        comm_lanes[rank] = max(lane_of[id(iv)] for iv in ivs) + 1

    for host in range(hosts):
        meta.append(_meta(pid(host), 0, "process_name", process_name(host)))
        meta.append(_meta(pid(host), 0, "process_sort_index", pid(host)))
        tid = 0
        names: list[tuple[tuple, str]] = []
        for rank in range(host * rph, (host + 1) * rph):
            names.append((("compute", rank, 0), f"rank {rank} compute"))
            lanes = comm_lanes.get(rank, 1)
            for lane in range(lanes):
                suffix = f" {lane + 1}" if lanes > 1 else ""
                names.append((("comm", rank, lane), f"rank {rank} comm{suffix}"))
        if nic:
            names.append((("tx", host, 0), "NIC tx (send)"))
            names.append((("rx", host, 0), "NIC rx (receive)"))
        for key, name in names:
            tid += 1
            tids[key] = tid
            meta.append(_meta(pid(host), tid, "thread_name", name))
            meta.append(_meta(pid(host), tid, "thread_sort_index", tid))

    events: list[dict] = []
    flight: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for iv in intervals:
        if iv.track in NIC_TRACKS:
            if not nic:
                continue
            host, key, cat = iv.owner, (iv.track, iv.owner, 0), "nic"
            flight[(host, iv.track)] += [(iv.start, iv.args.get("bytes", 0.0)),
                                         (iv.end, -iv.args.get("bytes", 0.0))]
        else:
            host, cat = iv.owner // rph, iv.track   # matches ClusterSpec.host_of
            key = (iv.track, iv.owner, lane_of.get(id(iv), 0))
        ts, end = _us(iv.start), _us(iv.end)
        args = {k: v for k, v in sorted(iv.args.items())}
        if iv.track in ("compute", "comm"):
            args["rank"] = iv.owner
        events.append({"ph": "X", "pid": pid(host), "tid": tids[key], "name": iv.name,
                       "cat": cat, "ts": ts, "dur": round(end - ts, 3), "args": args})
    if nic:
        for host in range(hosts):
            for track in NIC_TRACKS:   # every counter starts at zero with the iteration
                flight[(host, track)].insert(0, (0.0, 0.0))
    for (host, track), changes in sorted(flight.items()):
        level = 0.0
        for t, delta in sorted(changes, key=lambda c: (c[0], c[1])):
            level += delta
            events.append({"ph": "C", "pid": pid(host), "tid": 0,
                           "name": f"NIC {track} bytes in flight", "ts": _us(t),
                           "args": {"bytes": max(0.0, round(level, 3))}})
    return meta, events


def document(meta: list[dict], events: list[dict], other: dict) -> dict:
    """The trace object: metadata first, then the timed events in a fixed order."""
    events = sorted(events, key=lambda e: (e["ts"], e["pid"], e["tid"], e["ph"], e["name"]))
    return {"traceEvents": meta + events, "displayTimeUnit": "ms", "otherData": other}


def result_data(result: Result) -> dict:
    """What a trace's ``otherData`` says about a predicted run."""
    return {"strategy": result.strategy, "nodes": result.nodes,
            "ranks_per_host": result.ranks_per_host, "global_batch": result.global_batch,
            "iteration_s": result.iteration_s}


def predicted_events(result: Result, **layout) -> tuple[list[dict], list[dict]]:
    """``host_events`` of a predicted result (``layout``: its ``pid``/``process_name``)."""
    if not result.intervals:
        raise ValueError("the result has no intervals: predict it with timeline=True")
    return host_events(result.intervals, hosts=result.nodes,
                       ranks_per_host=result.ranks_per_host, **layout)


def chrome_trace(result: Result) -> dict:
    """``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`` for ``result``."""
    meta, events = predicted_events(result)
    return document(meta, events, {**result_data(result), "generator": "commsim trace"})


def dumps(trace: dict) -> str:
    """Compact, key-sorted, strict JSON: equal traces give equal bytes."""
    return json.dumps(trace, indent=None, separators=(",", ":"), sort_keys=True,
                      allow_nan=False) + "\n"


def trace_json(result: Result) -> str:
    return dumps(chrome_trace(result))


# ----------------------------------------------------------------------------------------------
# The Chrome trace event format's own rules
# ----------------------------------------------------------------------------------------------

PHASES = set("BEXiICbnesStTpfPNODMVvRc()")   # every phase the format defines
_NUM = (int, float)
# Keys each phase we write needs, and their types (the format: "ph", "ts", "pid", "tid" on every
# event but metadata's "ts"; complete events also need "dur").
REQUIRED = {
    "X": {"name": str, "ph": str, "ts": _NUM, "dur": _NUM, "pid": int, "tid": int},
    "B": {"name": str, "ph": str, "ts": _NUM, "pid": int, "tid": int},
    "E": {"ph": str, "ts": _NUM, "pid": int, "tid": int},
    "C": {"name": str, "ph": str, "ts": _NUM, "pid": int, "args": dict},
    "M": {"name": str, "ph": str, "pid": int, "args": dict},
}
METADATA = {"process_name": "name", "process_labels": "labels", "thread_name": "name",
            "process_sort_index": "sort_index", "thread_sort_index": "sort_index"}


def _number(v) -> bool:
    return isinstance(v, _NUM) and not isinstance(v, bool) and math.isfinite(v)


def trace_problems(trace) -> list[str]:
    """Problems with ``trace`` as a Chrome trace in the JSON object format; [] if none.

    The format's rules: a ``traceEvents`` list; ``displayTimeUnit`` ms or ns; every event an
    object with a known phase and the keys that phase needs, of the right types; timestamps
    finite and not negative; complete events (X) with a non-negative ``dur``; counters (C) with
    numeric args; metadata (M) one of the defined names with its argument; begin/end (B/E)
    pairs matched per thread.  And one rule of ours: every complete event is on a thread that a
    ``thread_name`` event names (a track without a name is a track nobody can read)."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["top level must be an object with a traceEvents list"]
    problems = []
    if trace.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append("displayTimeUnit must be ms or ns")
    named_threads = set()
    open_slices: dict[tuple, int] = defaultdict(int)
    for i, ev in enumerate(trace["traceEvents"]):
        if not isinstance(ev, dict):
            problems.append(f"event {i}: not an object")
            continue
        ph = ev.get("ph")
        if ph not in PHASES:
            problems.append(f"event {i}: unknown phase {ph!r}")
            continue
        for key, kind in REQUIRED.get(ph, {"ph": str, "ts": _NUM, "pid": int}).items():
            if key not in ev:
                problems.append(f"event {i} ({ph}): missing {key}")
            elif not isinstance(ev[key], kind) or isinstance(ev[key], bool):
                problems.append(f"event {i} ({ph}): {key} has type {type(ev[key]).__name__}")
        if "ts" in ev and ph != "M" and not (_number(ev["ts"]) and ev["ts"] >= 0):
            problems.append(f"event {i}: bad ts {ev['ts']!r}")
        if ph == "X" and "dur" in ev and not (_number(ev["dur"]) and ev["dur"] >= 0):
            problems.append(f"event {i}: dur {ev['dur']!r} must be a number >= 0")
        if ph == "C" and isinstance(ev.get("args"), dict):
            if not ev["args"] or not all(_number(v) for v in ev["args"].values()):
                problems.append(f"event {i}: counter args must be numbers")
        if ph == "M" and isinstance(ev.get("args"), dict):
            if ev.get("name") not in METADATA or METADATA[ev["name"]] not in ev["args"]:
                problems.append(f"event {i}: bad metadata {ev.get('name')!r}")
            elif ev["name"] == "thread_name":
                named_threads.add((ev["pid"], ev.get("tid")))
        if ph == "B":
            open_slices[(ev.get("pid"), ev.get("tid"))] += 1
        if ph == "E":
            where = (ev.get("pid"), ev.get("tid"))
            if open_slices[where] == 0:
                problems.append(f"event {i}: end (E) without a begin (B) on thread {where}")
            else:
                open_slices[where] -= 1
    for ev in trace["traceEvents"]:
        if (isinstance(ev, dict) and ev.get("ph") == "X"
                and (ev.get("pid"), ev.get("tid")) not in named_threads):
            problems.append(f"X event {ev.get('name')!r} on an unnamed thread")
            break
    try:
        json.dumps(trace, allow_nan=False)
    except (TypeError, ValueError) as exc:
        problems.append(f"not strict JSON: {exc}")
    return problems
