"""commsim trace: a valid Chrome trace whose complete events cover exactly the iteration."""
import json
from collections import defaultdict

import pytest

from commsim.analysis.trace import chrome_trace, trace_json, trace_problems
from commsim.api import Scenario, predict
from commsim.cli import main
from commsim.profile import save
from profiles import make_profile

validate = trace_problems   # the format's own checks, as the library runs them


def result(strategy="ddp", nodes=4, **kw):
    sc = Scenario(global_batch=64, **kw)
    prof = make_profile(param_bytes=(400_000, 800_000, 1_600_000), bandwidth_Bps=1e8)
    return predict(prof, strategy, nodes, sc, timeline=True)


def test_the_validator_catches_bad_traces():
    assert validate({"events": []})
    assert validate({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": -1, "pid": 0,
                                      "tid": 0}]})
    assert validate({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "pid": 0, "tid": 0}]})
    assert validate({"traceEvents": [{"ph": "C", "name": "c", "ts": 0, "pid": 0,
                                      "args": {"bytes": "1"}}]})
    assert validate({"traceEvents": [{"ph": "Q", "name": "a", "ts": 0, "pid": 0, "tid": 0}]})
    assert validate({"traceEvents": [{"ph": "E", "ts": 0, "pid": 0, "tid": 0}]})
    assert validate({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0,
                                      "args": {}}]})
    assert validate({"traceEvents": [{"ph": "X", "name": "a", "ts": -1, "dur": 1, "pid": 0,
                                      "tid": 0}]})
    assert validate({"traceEvents": [], "displayTimeUnit": "s"})
    named = {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "t"}}
    assert validate({"traceEvents": [named, {"ph": "X", "name": "a", "ts": 0, "dur": 0,
                                             "pid": 0, "tid": 0}]}) == []


@pytest.mark.parametrize("strategy, nodes, kw", [
    ("ddp", 4, {}), ("ring", 3, {}), ("ps", 2, {}), ("single", 1, {}),
    ("ddp", 2, {"ranks_per_host": 2}), ("ddp", 3, {"bucket_bytes": 500_000}),
])
def test_trace_is_valid_and_covers_exactly_the_iteration(strategy, nodes, kw):
    r = result(strategy, nodes, **kw)
    trace = json.loads(trace_json(r))
    assert validate(trace) == []
    assert trace["displayTimeUnit"] == "ms"
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert min(e["ts"] for e in xs) == 0
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(r.iteration_s * 1e6, abs=2e-3)
    # every simulated interval is one complete event
    assert len(xs) == len(r.intervals)
    # one compute track per rank, comm tracks per rank, tx and rx per host
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    for rank in range(r.world_size):
        assert f"rank {rank} compute" in names.values()
    for host in range(r.nodes):
        assert (host, max(t for p, t in names if p == host)) in names
        assert {"NIC tx (send)", "NIC rx (receive)"} <= {n for (p, _), n in names.items()
                                                        if p == host}


def test_events_on_one_track_never_overlap():
    """Overlapping DDP buckets go to separate comm lanes so Perfetto draws them all."""
    r = result("ddp", 4, bucket_bytes=500_000)
    tracks = defaultdict(list)
    for e in chrome_trace(r)["traceEvents"]:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(spans, spans[1:]))


def test_overlapping_collectives_get_their_own_lane():
    from dataclasses import replace

    from commsim.sim.engine import Interval
    r = result("ddp", 2)
    comm = next(iv for iv in r.intervals if iv.track == "comm" and iv.owner == 1)
    extra = Interval("comm", 1, "extra", comm.start, (comm.start + comm.end) / 2, {})
    trace = chrome_trace(replace(r, intervals=r.intervals + (extra,)))
    assert validate(trace) == []
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"rank 1 comm 1", "rank 1 comm 2", "rank 0 comm"} <= names
    tids = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"
            and e["name"] in ("extra", comm.name) and e["args"].get("rank") == 1}
    assert len(tids) == 2


def test_counters_follow_the_nic_transfers():
    r = result("ring", 3)
    trace = chrome_trace(r)
    counters = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "C":
            counters[(e["pid"], e["name"])].append((e["ts"], e["args"]["bytes"]))
    assert set(counters) == {(h, f"NIC {d} bytes in flight") for h in range(3)
                             for d in ("tx", "rx")}
    tx_bytes = defaultdict(float)
    for iv in r.intervals:
        if iv.track == "tx":
            tx_bytes[iv.owner] += iv.args["bytes"]
    for (host, name), values in counters.items():
        assert values[0] == (0, 0) and values[-1][1] == 0      # starts and ends empty
        assert all(v >= 0 for _, v in values)
        if "tx" in name:   # the rises add up to the bytes the host sent
            rises = sum(max(0.0, b - a) for (_, a), (_, b) in zip(values, values[1:]))
            assert rises == pytest.approx(tx_bytes[host])


def test_same_result_same_bytes():
    assert trace_json(result()) == trace_json(result())


def test_cli_writes_and_refuses_to_overwrite(tmp_path, capsys):
    save(make_profile(), tmp_path / "toy.json")
    out = tmp_path / "trace.json"
    args = ["trace", "--strategy", "ddp", "--nodes", "4", "--profile", str(tmp_path / "toy.json"),
            "--global-batch", "64", "--out", str(out)]
    assert main(args) == 0
    assert "ui.perfetto.dev" in capsys.readouterr().out
    trace = json.loads(out.read_text())
    assert validate(trace) == [] and trace["otherData"]["strategy"] == "ddp"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--force" in err and len(err.strip().splitlines()) == 1
    assert main(args + ["--force", "--straggler", "1:2"]) == 0
    slowed = json.loads(out.read_text())["otherData"]["iteration_s"]
    assert slowed > trace["otherData"]["iteration_s"]


def test_cli_bad_strategy_is_one_line(tmp_path, capsys):
    save(make_profile(), tmp_path / "toy.json")
    code = main(["trace", "--strategy", "allgather", "--nodes", "2", "--profile",
                 str(tmp_path / "toy.json"), "--out", str(tmp_path / "t.json")])
    err = capsys.readouterr().err
    assert code == 2 and "allgather" in err and not (tmp_path / "t.json").exists()
