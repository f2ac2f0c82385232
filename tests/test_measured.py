"""Measured timelines: clock alignment, the measured trace, the merge with the prediction, the
report's pages, and one real traced live run whose events all lie within their rank's cycle."""
from __future__ import annotations

import json

import pytest

from commsim.analysis.measured import (from_live, from_trace, measured_trace, merged_trace,
                                       outside_iterations)
from commsim.analysis.trace import trace_problems
from commsim.api import Scenario, predict
from commsim.calibrate.live.timing import Recorder, offset_from_pings
from commsim.cli import main
from commsim.errors import UserError
from profiles import make_profile


def _rank(rank, start, end, events, offset=0.0, rtt=0.0):
    return {"rank": rank, "cycle": 1, "offset_s": offset, "rtt_s": rtt, "start_s": start,
            "end_s": end, "events": [{"track": t, "name": n, "start_s": s, "end_s": e,
                                      "args": a} for t, n, s, e, a in events]}


def live_record(strategy="ddp", global_batch=64):
    """Two ranks of a DDP cycle on rank 0's clock: rank 1 starts 1 s after rank 0 (100 s), and
    its bucket, launched later, ends when rank 0's does (an all-reduce ends together)."""
    r0 = _rank(0, 100.0, 100.5, [("compute", "forward", 100.0, 100.1, {}),
                                 ("compute", "backward", 100.1, 100.4, {}),
                                 ("comm", "bucket 0", 100.2, 100.35, {"bytes": 8000}),
                                 ("comm", "bucket 1", 100.3, 100.4, {"bytes": 4000}),
                                 ("compute", "optimizer", 100.4, 100.5, {})])
    r1 = _rank(1, 101.0, 101.45, [("compute", "forward", 101.0, 101.05, {}),
                                  ("compute", "backward", 101.05, 101.3, {}),
                                  ("comm", "bucket 0", 101.1, 101.35, {"bytes": 8000}),
                                  ("compute", "optimizer", 101.35, 101.45, {})],
               offset=0.002, rtt=0.0001)
    return {"strategy": strategy, "nodes": 2, "global_batch": global_batch, "sync_every": 1,
            "timeline": [r1, r0]}


def test_offset_is_the_midpoint_of_the_shortest_round_trip():
    # Round 1: 4 s round trip; round 2: 1 s, the root answered at 10.5 of its clock while this
    # clock read 0..1: the root is 10 s ahead, within half a second.
    assert offset_from_pings([(5.0, 100.0, 9.0), (0.0, 10.5, 1.0)]) == (10.0, 1.0)
    with pytest.raises(ValueError):
        offset_from_pings([])


def test_recorder_reports_on_rank_zeros_clock_sorted_by_start():
    rec = Recorder()
    rec.add("comm", "bucket 0", 3.0, 4.0, bytes=8)
    rec.add("compute", "forward", 1.0, 2.0)
    rec.start_s, rec.end_s = 1.0, 5.0
    d = rec.to_dict(rank=1, cycle=0, offset_s=10.0, rtt_s=0.5)
    assert (d["start_s"], d["end_s"], d["offset_s"], d["rtt_s"]) == (11.0, 15.0, 10.0, 0.5)
    assert [(e["name"], e["start_s"], e["end_s"]) for e in d["events"]] == [
        ("forward", 11.0, 12.0), ("bucket 0", 13.0, 14.0)]
    assert d["events"][1]["args"] == {"bytes": 8}
    with pytest.raises(ValueError):
        Recorder().to_dict(0, 0, 0.0, 0.0)


def test_ddp_backward_ends_at_the_last_gradient_and_the_rest_is_waiting():
    rec = Recorder(split_backward=True)
    rec.last_gradient_s = 3.0
    rec.backward(1.0, 4.0, local_step=0)
    assert [(e["name"], e["start_s"], e["end_s"]) for e in rec.events] == [
        ("backward", 1.0, 3.0), ("wait", 3.0, 4.0)]
    assert rec.events[1]["args"] == {"local_step": 0, "until": "buckets reduced"}
    # a stamp from another pass, or no split asked (ps, ring): backward is the whole call
    for rec in (Recorder(split_backward=True, last_gradient_s=0.5), Recorder(last_gradient_s=3.0)):
        rec.backward(1.0, 4.0)
        assert [(e["name"], e["start_s"], e["end_s"]) for e in rec.events] == [
            ("backward", 1.0, 4.0)]


def test_the_traced_cycle_must_be_a_timed_one():
    from commsim.calibrate.live import LiveConfig

    LiveConfig(iterations=4, sync_every=2, trace_cycle=-2).validate(2)   # cycles 0 and 1
    for cycle in (2, -3):
        with pytest.raises(UserError, match="trace_cycle"):
            LiveConfig(iterations=4, sync_every=2, trace_cycle=cycle).validate(2)


def test_measured_times_count_from_the_first_rank_to_start():
    m = from_live(live_record())
    assert m.rank_spans_s == (pytest.approx((0.0, 0.5)), pytest.approx((1.0, 1.45)))
    assert m.iteration_s == pytest.approx(1.45)
    assert (m.offsets_s, m.rtts_s) == ((0.0, 0.002), (0.0, 0.0001))
    b1 = [iv for iv in m.intervals if iv.owner == 1 and iv.name == "bucket 0"]
    assert len(b1) == 1 and (b1[0].start, b1[0].end) == (pytest.approx(1.1), pytest.approx(1.35))
    with pytest.raises(UserError, match="--trace"):
        from_live({"strategy": "ddp", "nodes": 2})


def test_measured_trace_has_commsim_traces_tracks_and_passes_the_checks():
    trace = measured_trace(from_live(live_record()))
    assert trace_problems(trace) == []
    assert outside_iterations(trace) == []
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"]
             if e["name"] in ("process_name", "thread_name")}
    # rank 0's buckets overlap: two lanes, as commsim trace names them; no NIC tracks
    assert names == {(0, "host 0"), (0, "rank 0 compute"), (0, "rank 0 comm 1"),
                     (0, "rank 0 comm 2"), (1, "host 1"), (1, "rank 1 compute"),
                     (1, "rank 1 comm")}
    x = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(x) == 9 and min(e["ts"] for e in x) == 0
    assert max(e["ts"] + e["dur"] for e in x) == pytest.approx(1.45e6)
    # the file reads back as the same measurement
    again = measured_trace(from_trace(json.loads(json.dumps(trace)), "t.json"))
    assert again["traceEvents"] == trace["traceEvents"]
    assert again["otherData"] == {**trace["otherData"], "iteration_s": pytest.approx(1.45)}


def test_an_event_outside_its_ranks_cycle_is_reported():
    record = live_record()
    record["timeline"][0]["events"].append({"track": "comm", "name": "late", "start_s": 101.4,
                                            "end_s": 101.5, "args": {}})
    problems = outside_iterations(measured_trace(from_live(record)))
    assert len(problems) == 1 and "rank 1's 'late'" in problems[0]
    assert outside_iterations({"traceEvents": [], "otherData": {}})


def test_merged_trace_puts_each_hosts_prediction_above_its_measurement():
    predicted = predict(make_profile(), "ddp", 2, Scenario(global_batch=64), timeline=True)
    trace = merged_trace(predicted, from_live(live_record()))
    assert trace_problems(trace) == []
    assert outside_iterations(trace) == []
    procs = sorted((e["args"]["sort_index"], e["pid"]) for e in trace["traceEvents"]
                   if e["name"] == "process_sort_index")
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}
    assert [names[pid] for _, pid in procs] == ["host 0 (predicted)", "host 0 (measured)",
                                                "host 1 (predicted)", "host 1 (measured)"]
    x = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sum(e["pid"] % 2 == 0 for e in x) == len(predicted.intervals)
    assert sum(e["pid"] % 2 == 1 for e in x) == 9
    threads = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"]
               if e["name"] == "thread_name"}
    assert (0, "NIC tx (send)") in threads and (1, "rank 0 compute") in threads
    assert not any(name.startswith("NIC") for pid, name in threads if pid % 2)
    with pytest.raises(UserError, match="ring"):
        merged_trace(predict(make_profile(), "ring", 2, Scenario(global_batch=64),
                             timeline=True), from_live(live_record()))
    with pytest.raises(UserError, match="--global-batch 32"):
        merged_trace(predicted, from_live(live_record(global_batch=32)))


def test_validate_with_trace_keeps_both_timelines_per_cell():
    from commsim.analysis.report import traced_cells
    from commsim.analysis.validate import ValidationGrid, validate

    def fake_live(strategy, nodes, emulate):
        return {**live_record(strategy), "batch_per_rank": 32, "iteration_s": 0.5,
                "iteration_s_spread": 0.01, "threads_per_rank": 1}

    grid = ValidationGrid(strategies=("ddp",), nodes=(2,), global_batch=64, trace=True)
    assert grid.live_kwargs("ddp")["trace_cycle"] == -1
    assert ValidationGrid().live_kwargs("ddp")["trace_cycle"] is None
    report = validate(grid, make_profile(), run_live=fake_live)
    (cell,) = report.timelines
    assert cell.stem == "ddp_2nodes_loopback"
    assert trace_problems(merged_trace(cell.predicted, cell.measured)) == []
    rows = report.to_dict()["timelines"]
    assert {r["side"] for r in rows} == {"predicted", "measured"}
    ((strategy, p, m),) = traced_cells(rows)
    assert strategy == "ddp" and p and m
    assert {r["name"] for r in m if r["kind"] == "comm"} == {"bucket 0", "bucket 1"}
    # an untraced validation keeps no timelines
    assert "timelines" not in validate(ValidationGrid(strategies=("ddp",), nodes=(2,)),
                                       make_profile(), run_live=fake_live).to_dict()


def test_report_loads_the_timelines_and_refuses_bad_rows(tmp_path):
    from commsim.analysis.compare import load_validation_extras

    good = {"rows": [], "summary": {"tolerance_pct": 15.0},
            "timelines": [{"strategy": "ddp", "nodes": 2, "side": "measured", "rank": 0,
                           "kind": "compute", "name": "forward", "start_s": 0.0, "end_s": 0.1,
                           "iteration_s": 0.5}]}
    path = tmp_path / "v.json"
    path.write_text(json.dumps(good))
    tolerance, rows = load_validation_extras(path)
    assert tolerance == 15.0 and rows == good["timelines"]
    for bad in ({"side": "guessed"}, {"rank": -1}, {"start_s": "0"}):
        path.write_text(json.dumps({**good, "timelines": [{**good["timelines"][0], **bad}]}))
        with pytest.raises(UserError, match="timelines: row 0"):
            load_validation_extras(path)


def test_report_draws_a_traced_cell_per_strategy_and_the_scatter(tmp_path):
    from commsim.analysis import plots
    from commsim.analysis.validate import CellTimeline

    predicted = predict(make_profile(), "ddp", 2, Scenario(global_batch=64), timeline=True)
    cell = CellTimeline("ddp", 2, 12.5e6, "", predicted, from_live(live_record()))
    rows = cell.rows()
    assert cell.stem == "ddp_2nodes_100mbit"
    fig = plots.timeline_pair_figure("ddp", [r for r in rows if r["side"] == "predicted"],
                                     [r for r in rows if r["side"] == "measured"])
    top, bottom = fig.axes[:2]
    assert top.get_xlim() == bottom.get_xlim()          # one time axis
    assert "100 Mbit/s" in fig._suptitle.get_text()
    cells = [{"strategy": "ddp", "nodes": 2, "predicted_s": 1.0, "measured_s": 1.05,
              "measured_spread_s": 0.01, "error_pct": -4.8}]
    scatter = plots.validation_scatter_figure(cells, 10.0)
    assert any("(1 of 1 cells)" in t.get_text() for t in scatter.texts)


def test_cli_trace_measured_merges_and_refuses_another_run(tmp_path, capsys):
    from commsim.profile import save

    save(make_profile(), tmp_path / "toy.json")
    (tmp_path / "m.json").write_text(json.dumps(measured_trace(from_live(live_record()))))
    out = tmp_path / "merged.json"
    base = ["trace", "--nodes", "2", "--profile", str(tmp_path / "toy.json"), "--global-batch",
            "64", "--measured", str(tmp_path / "m.json"), "--out", str(out)]
    assert main(base + ["--strategy", "ddp"]) == 0
    assert "beside the measured one" in capsys.readouterr().out
    merged = json.loads(out.read_text())
    assert trace_problems(merged) == [] and outside_iterations(merged) == []
    assert main(base + ["--strategy", "ring", "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert "ring" in err and "\n" not in err
    (tmp_path / "p.json").write_text(out.read_text())   # a merged trace is not a measurement
    assert main([*base[:-4], "--measured", str(tmp_path / "p.json"), "--out",
                 str(tmp_path / "x.json"), "--strategy", "ddp"]) == 2
    assert "commsim live --trace" in capsys.readouterr().err


def test_cli_trace_outputs_are_checked_before_the_runs(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["live", "--strategy", "ring", "--nodes", "2", "--trace",
                 str(blocker / "t.json")]) == 1
    assert str(blocker) in capsys.readouterr().err
    assert main(["validate", "--strategies", "ddp", "--nodes", "2", "--profile",
                 str(tmp_path / "none.json"), "--trace", str(blocker)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--trace" in err and "\n" not in err


@pytest.mark.torch
@pytest.mark.parametrize("strategy, names", [
    ("ddp", {"bucket 0"}),
    ("ring", {f"all_reduce p{i}" for i in range(4)}),
])
def test_live_trace_every_measured_event_lies_within_its_ranks_iteration(tmp_path, strategy,
                                                                         names):
    pytest.importorskip("torch")
    path = tmp_path / "live.json"
    assert main(["live", "--strategy", strategy, "--nodes", "2", "--model",
                 "commsim.calibrate.models:small_mlp", "--iterations", "2", "--global-batch",
                 "16", "--synthetic-size", "64", "--trace", str(path), "--json"]) == 0
    trace = json.loads(path.read_text())
    assert trace_problems(trace) == []
    assert outside_iterations(trace) == []
    m = from_trace(trace, str(path))
    assert m.strategy == strategy and m.nodes == 2 and m.cycle == 1   # the last of 2
    for rank in (0, 1):
        mine = [iv for iv in m.intervals if iv.owner == rank]
        compute = [iv.name for iv in mine if iv.track == "compute"]
        assert [n for n in compute if n != "wait"] == ["forward", "backward", "optimizer"]
        assert "wait" not in compute or strategy == "ddp"   # blocked until buckets reduced
        assert {iv.name for iv in mine if iv.track == "comm"} == names
        start, end = m.rank_spans_s[rank]
        # the optimizer ends the cycle: equal up to the trace's rounding to nanoseconds
        assert all(start - 1e-9 <= iv.start <= iv.end <= end + 1e-9 for iv in mine)
    # ranks share this machine's clock: the measured offset is within its half round trip
    assert abs(m.offsets_s[1]) <= m.rtts_s[1] / 2 + 1e-6


def test_the_committed_example_passes_the_checks():
    """reports/example_measured: every cell's trace loads under the format's own checks and
    every measured event lies within its rank's iteration; the report draws its pages."""
    from pathlib import Path

    from commsim.analysis.compare import load_validation, load_validation_extras
    from commsim.analysis.report import traced_cells

    root = Path(__file__).resolve().parent.parent / "reports" / "example_measured"
    traces = sorted((root / "traces").glob("*.json"))
    assert any(p.name.startswith("ddp_") for p in traces)
    for path in traces:
        trace = json.loads(path.read_text())
        assert trace_problems(trace) == [], path.name
        assert outside_iterations(trace) == [], path.name
    rows = load_validation(root / "validation.json")
    tolerance, timelines = load_validation_extras(root / "validation.json")
    assert tolerance is not None and {r["strategy"] for r in rows} >= {"ddp"}
    assert {s for s, _, _ in traced_cells(timelines)} == {r["strategy"] for r in rows}
