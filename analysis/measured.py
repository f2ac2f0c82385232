"""Measured timelines: a live run's recorded cycle as a Chrome trace, and beside the prediction.

``commsim live --trace`` has every rank record one timed cycle (``commsim.calibrate.live.timing``:
forward, backward, optimizer, each collective or DDP bucket, all on rank 0's clock).  Here:

1. ``from_live`` turns a live record's ``timeline`` into a ``MeasuredTimeline``: the ranks'
   events as ``commsim.sim.engine.Interval`` (the simulator's own record type, so everything
   that draws a predicted iteration draws a measured one), in seconds since the earliest rank
   started the cycle.
2. ``measured_trace`` writes it in the schema of ``commsim trace`` (``analysis.trace``: a process
   per host, "rank N compute" and "rank N comm" tracks; no NIC tracks: nothing measured them);
   ``from_trace`` reads such a file back.
3. ``merged_trace`` puts a prediction and a measurement in one trace, "host N (predicted)" and
   "host N (measured)" next to each other, both starting at 0.
4. ``outside_iterations`` lists the measured events that leave their rank's cycle (there should
   be none), from the trace alone (``otherData.measured``).
"""
from __future__ import annotations

from dataclasses import dataclass

from commsim.analysis.timeline import interval_segments, segment_rows
from commsim.analysis.trace import _us, document, dumps, host_events, predicted_events, result_data
from commsim.errors import UserError
from commsim.result import Result
from commsim.sim.engine import Interval

TRACKS = ("compute", "comm")
_SLACK_US = 0.002   # two rounding steps of the trace's nanosecond timestamps


@dataclass(frozen=True)
class MeasuredTimeline:
    """One recorded cycle of a live run, every rank's events in seconds since the earliest
    rank began it.  ``rank_spans_s``: each rank's own cycle (start, end); ``offsets_s`` and
    ``rtts_s``: each rank's clock offset from rank 0's and the round trip that bounds its error
    (half of it); ``cycle``: which timed cycle was recorded (0: the first)."""
    strategy: str
    nodes: int
    ranks_per_host: int
    global_batch: int
    sync_every: int
    cycle: int
    intervals: tuple[Interval, ...]
    rank_spans_s: tuple[tuple[float, float], ...]
    offsets_s: tuple[float, ...]
    rtts_s: tuple[float, ...]

    @property
    def iteration_s(self) -> float:
        """From the first rank's start of the cycle to the last rank's end."""
        return max(end for _, end in self.rank_spans_s)

    def about(self) -> dict:
        """What a trace's ``otherData`` says about the measurement (``from_trace`` reads it)."""
        return {"strategy": self.strategy, "nodes": self.nodes,
                "ranks_per_host": self.ranks_per_host, "global_batch": self.global_batch,
                "sync_every": self.sync_every, "cycle": self.cycle,
                "iteration_s": self.iteration_s,
                "rank_spans_us": [[_us(s), _us(e)] for s, e in self.rank_spans_s],
                "clock_offsets_s": list(self.offsets_s), "clock_rtts_s": list(self.rtts_s)}


def from_live(record: dict) -> MeasuredTimeline:
    """The measured timeline of a ``commsim live --json`` record of a traced run."""
    ranks = record.get("timeline")
    if not ranks:
        raise UserError("the live record has no timeline: run commsim live with --trace")
    ranks = sorted(ranks, key=lambda r: r["rank"])
    origin = min(r["start_s"] for r in ranks)
    intervals = tuple(Interval(e["track"], r["rank"], e["name"], e["start_s"] - origin,
                               e["end_s"] - origin, dict(e.get("args") or {}))
                      for r in ranks for e in r["events"])
    return MeasuredTimeline(
        strategy=record["strategy"], nodes=record["nodes"], ranks_per_host=1,
        global_batch=record["global_batch"], sync_every=record.get("sync_every", 1),
        cycle=ranks[0]["cycle"], intervals=intervals,
        rank_spans_s=tuple((r["start_s"] - origin, r["end_s"] - origin) for r in ranks),
        offsets_s=tuple(r["offset_s"] for r in ranks), rtts_s=tuple(r["rtt_s"] for r in ranks))


def _measured_events(m: MeasuredTimeline, **layout) -> tuple[list[dict], list[dict]]:
    return host_events(m.intervals, hosts=m.nodes // m.ranks_per_host,
                       ranks_per_host=m.ranks_per_host, nic=False, **layout)


def measured_trace(m: MeasuredTimeline) -> dict:
    """The measured cycle as a Chrome trace, in ``commsim trace``'s schema."""
    meta, events = _measured_events(m)
    hosts = list(range(m.nodes // m.ranks_per_host))
    return document(meta, events, {**m.about(), "generator": "commsim live --trace",
                                   "measured": {"pids": hosts}})


def merged_trace(predicted: Result, m: MeasuredTimeline) -> dict:
    """Prediction and measurement in one trace: per host "host N (predicted)" (pid 2N) then
    "host N (measured)" (pid 2N+1), both from 0, so Perfetto shows them one above the other."""
    check_matches(m, predicted.strategy, predicted.nodes, predicted.global_batch)
    p_meta, p_events = predicted_events(predicted, pid=lambda h: 2 * h,
                                        process_name=lambda h: f"host {h} (predicted)")
    m_meta, m_events = _measured_events(m, pid=lambda h: 2 * h + 1,
                                        process_name=lambda h: f"host {h} (measured)")
    hosts = range(m.nodes // m.ranks_per_host)
    other = {"generator": "commsim trace --measured", "predicted": result_data(predicted),
             "measured": {**m.about(), "pids": [2 * h + 1 for h in hosts]},
             "predicted_pids": [2 * h for h in hosts]}
    return document(p_meta + m_meta, p_events + m_events, other)


def check_matches(m: MeasuredTimeline, strategy: str, nodes: int,
                  global_batch: int | None) -> None:
    """Refuse to set a measurement beside a prediction of another run (UserError)."""
    if (strategy, nodes) != (m.strategy, m.nodes):
        raise UserError(f"the measurement is {m.strategy} on {m.nodes} node(s), the prediction "
                        f"{strategy} on {nodes}")
    if global_batch is not None and global_batch != m.global_batch:
        raise UserError(f"the measurement's global batch is {m.global_batch}, the "
                        f"prediction's {global_batch}: pass --global-batch {m.global_batch}")


def merged_json(predicted: Result, m: MeasuredTimeline) -> str:
    return dumps(merged_trace(predicted, m))


def measured_json(m: MeasuredTimeline) -> str:
    return dumps(measured_trace(m))


def from_trace(trace: dict, where: str) -> MeasuredTimeline:
    """A ``MeasuredTimeline`` back from a trace ``commsim live --trace`` wrote (its measured
    processes; ``where`` names the file in errors)."""
    other = trace.get("otherData") if isinstance(trace, dict) else None
    if not isinstance(other, dict) or other.get("generator") != "commsim live --trace":
        raise UserError(f"{where}: not a trace written by commsim live --trace")
    try:
        intervals = tuple(
            Interval(e["cat"], e["args"]["rank"], e["name"], e["ts"] / 1e6,
                     (e["ts"] + e["dur"]) / 1e6,
                     {k: v for k, v in e["args"].items() if k != "rank"})
            for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in TRACKS)
        spans = tuple((s / 1e6, e / 1e6) for s, e in other["rank_spans_us"])
        return MeasuredTimeline(
            strategy=other["strategy"], nodes=int(other["nodes"]),
            ranks_per_host=int(other["ranks_per_host"]),
            global_batch=int(other["global_batch"]), sync_every=int(other["sync_every"]),
            cycle=int(other["cycle"]), intervals=intervals, rank_spans_s=spans,
            offsets_s=tuple(other["clock_offsets_s"]), rtts_s=tuple(other["clock_rtts_s"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{where}: malformed measured trace ({exc!r})") from None


def outside_iterations(trace: dict) -> list[str]:
    """Measured complete events that start before or end after their rank's cycle; [] if none.

    The measured processes and the ranks' cycles come from ``otherData.measured`` (or the top
    of ``otherData`` for ``commsim live --trace``'s own file); an event's rank is its
    ``args.rank``."""
    other = trace.get("otherData", {})
    about = other.get("measured", {})
    pids = set(about.get("pids", ()))
    spans = about.get("rank_spans_us") or other.get("rank_spans_us")
    if not pids or not spans:
        return ["the trace has no measured processes (otherData.measured)"]
    problems = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("pid") not in pids:
            continue
        rank = e.get("args", {}).get("rank")
        if not isinstance(rank, int) or not 0 <= rank < len(spans):
            problems.append(f"{e.get('name')!r} at {e.get('ts')} us has no rank")
            continue
        start, end = spans[rank]
        if e["ts"] < start - _SLACK_US or e["ts"] + e["dur"] > end + _SLACK_US:
            problems.append(f"rank {rank}'s {e['name']!r} [{e['ts']}, {e['ts'] + e['dur']}] us "
                            f"leaves its cycle [{start}, {end}] us")
    return problems


def timeline_rows(m: MeasuredTimeline, **common) -> list[dict]:
    """The measured cycle as the report's Gantt rows (``analysis.timeline.segment_rows``)."""
    segs = interval_segments(m.intervals, m.nodes, m.iteration_s)
    return segment_rows(segs, strategy=m.strategy, nodes=m.nodes, iteration_s=m.iteration_s,
                        **common)
