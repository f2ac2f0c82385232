"""What a new user meets in the first hour: no machine paths in the bundled profile, torch's C++
warnings kept out of the way, and (below, as they land) profile inspection and compute what-ifs."""
from __future__ import annotations

import re
import shlex

import pytest

from commsim.profile import load_default


def test_bundled_profile_metadata_names_no_machine_path():
    meta = load_default().metadata
    for key, value in meta.items():
        if isinstance(value, str):
            assert not re.search(r"(^|[\s=])/(tmp|home|root|work|var|usr)\b", value), (key, value)
    assert meta["source"] == "commsim calibrate"


def test_public_command_keeps_the_options_and_drops_the_folders():
    pytest.importorskip("torch")
    from commsim.calibrate.runner import public_command
    argv = shlex.split("commsim calibrate --emulate 1gbit --out /home/me/runs/p.json "
                       "--data=/data/cifar --nodes 4")
    assert public_command(argv) == ("commsim calibrate --emulate 1gbit --out p.json "
                                    "--data=cifar --nodes 4")


def test_torch_logs_errors_only_unless_verbose(monkeypatch):
    import os

    from commsim.cli.cluster import quiet_torch
    monkeypatch.delenv("TORCH_CPP_LOG_LEVEL", raising=False)
    quiet_torch(False)
    assert os.environ["TORCH_CPP_LOG_LEVEL"] == "ERROR"
    monkeypatch.delenv("TORCH_CPP_LOG_LEVEL")
    quiet_torch(True)
    assert os.environ["TORCH_CPP_LOG_LEVEL"] == "INFO"
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "WARNING")   # the user's own choice wins
    quiet_torch(False)
    assert os.environ["TORCH_CPP_LOG_LEVEL"] == "WARNING"


# ------------------------------------------------------------------ compute what-if

FIELDS = ("iteration_s", "compute_s", "comm_s", "exposed_comm_s", "bytes_sent_per_rank",
          "link_utilization")


@pytest.mark.parametrize("strategy, nodes", [("ps", 3), ("ring", 4), ("ddp", 4), ("dp", 3)])
@pytest.mark.parametrize("engine", ["des", "auto"])
@pytest.mark.parametrize("scale", [0.5, 2.5])
def test_compute_scale_is_a_straggler_factor_on_every_rank(strategy, nodes, engine, scale):
    from commsim.api import Scenario, predict
    prof = load_default()
    scaled = predict(prof, strategy, nodes, Scenario(compute_scale=scale), engine=engine)
    everyone = predict(prof, strategy, nodes,
                       Scenario(stragglers={r: scale for r in range(nodes)}), engine="des")
    for name in FIELDS:
        assert getattr(scaled, name) == pytest.approx(getattr(everyone, name), rel=1e-12), name
    if engine == "des":  # the same events in the same engine: the same numbers, bit for bit
        assert [r["finish_s"] for r in scaled.per_rank] == \
            [r["finish_s"] for r in everyone.per_rank]


def test_compute_scale_scales_the_baseline_too():
    """'My nodes are twice as fast': the single node they are compared with is too."""
    import commsim
    fast = commsim.predict("single", 1, compute_scale=0.5)
    assert fast.iteration_s == pytest.approx(commsim.predict("single", 1).iteration_s * 0.5)
    assert fast.speedup == pytest.approx(1.0)


def test_compute_scale_in_every_predicting_command(capsys):
    from commsim.cli import main
    for argv in (["predict", "--strategy", "ring", "--nodes", "4"], ["sweep", "--nodes", "1,2"],
                 ["tune", "--nodes", "4", "--top", "1"]):
        assert main([*argv, "--compute-scale", "0.5", "--json"]) == 0, argv
    capsys.readouterr()
    assert main(["predict", "--strategy", "ring", "--nodes", "4", "--compute-scale", "0"]) == 2
    assert "--compute-scale" in capsys.readouterr().err


# ------------------------------------------------------------------ inspecting profiles

def _modified_copy(tmp_path):
    from dataclasses import replace

    from commsim.profile import save
    prof = load_default()
    changed = replace(prof, network=replace(prof.network, bandwidth_Bps=prof.network.bandwidth_Bps
                                            * 2),
                      metadata={**prof.metadata, "host": "other"})
    path = tmp_path / "copy.json"
    save(changed, path)
    return path


def test_profile_show_says_what_the_bundled_profile_holds(capsys):
    import json

    from commsim.cli import main
    assert main(["profile", "show"]) == 0
    text = capsys.readouterr().out
    for words in ("9,231,114 parameters", "34 tensors", "all_reduce", "per sample",
                  "commsim calibrate --emulate 1gbit --nodes 4"):
        assert words in text
    assert main(["profile", "show", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    prof = load_default()
    assert s["model"]["gradient_bytes"] == prof.model_bytes
    assert s["network"]["bandwidth_Bps"] == prof.network.bandwidth_Bps
    assert sorted(s["compute"]["per_batch"]) == sorted(map(str, prof.compute.batch_sizes))


def test_profile_diff_finds_exactly_what_changed(tmp_path, capsys):
    import json

    from commsim.cli import main
    from commsim.profile import default_profile_path
    copy = _modified_copy(tmp_path)
    assert main(["profile", "diff", str(default_profile_path()), str(copy), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["field"] for r in rows} == {"network.bandwidth_Bps", "measured.host"}
    bw = next(r for r in rows if r["field"] == "network.bandwidth_Bps")
    assert bw["change"] == pytest.approx(1.0)
    assert main(["profile", "diff", str(copy), str(copy)]) == 0
    assert "the same" in capsys.readouterr().out
    assert main(["profile", "diff", str(default_profile_path()), str(copy)]) == 0
    assert "+100.0%" in capsys.readouterr().out


def test_profile_show_of_a_missing_file_is_one_line(capsys):
    from commsim.cli import main
    assert main(["profile", "show", "/nonexistent/p.json"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_seed_table1_worked_example_runs(tmp_path):
    """bench/seed_table1.py (docs/seed-table1.md): the single cell matches by construction and
    the fitted link rate lies inside the search bounds."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "seed_table1.py"
    spec = importlib.util.spec_from_file_location("seed_table1", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "t1.md"
    assert mod.main(["--out", str(out)]) == 0
    text = out.read_text()
    assert "| Task 1, single node | 1 | 1.855 s | 1.855 s | +0.0% |" in text
    rate = float(text.split("--bandwidth ")[1].split("mbit")[0]) * 1e6 / 8
    assert 10 ** 5 < rate < 10 ** 11


# ------------------------------------------------------------------ progress

class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_without_a_terminal_is_plain_lines_with_time_left():
    import io

    from commsim.progress import Progress
    out, clock = io.StringIO(), _Clock()
    with Progress("validate", 4, stream=out, clock=clock) as bar:
        for i, cell in enumerate(("ps 2", "ps 3", "ring 2", "ring 3")):
            clock.t = 10.0 * i
            bar.step(cell)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[validate      0s] 1/4 ps 2"
    # two units done in 20 s: 10 s each, two left
    assert lines[2] == "[validate     20s] 3/4 ring 2 (~20 s left)"
    assert len(lines) == 4


def test_progress_on_a_terminal_is_one_live_display():
    import io

    from commsim.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    with Progress("calibrate", 3, stream=out) as bar:
        assert not bar.plain
        bar.step("compute alone")
        bar.say("a note")
        bar.step("collectives")
    assert "calibrate" in out.getvalue() and "a note" in out.getvalue()
    plain = Tty()
    with Progress("calibrate", 3, stream=plain, plain=True) as bar:   # --quiet
        bar.step("compute alone")
    assert plain.getvalue().startswith("[calibrate")


def test_relay_turns_rank_zero_lines_into_one_progress_display():
    """The launcher writes rank 0's stderr into a Relay in whatever pieces it read: relay lines
    become updates (done/total, resumed work left out of the time per unit), other lines are
    passed on, a line split across writes is kept whole."""
    import io

    from commsim.progress import Progress, Relay, relay_line
    out, clock = io.StringIO(), _Clock()
    relay = Relay(Progress("calibrate", stream=out, clock=clock))
    relay.write(relay_line(3, 10, "7 phases"))            # 3 resumed: not timed
    clock.t = 20.0
    text = relay_line(5, 10, "all_reduce 4 B") + "rank 0: a warning\n" + relay_line(6, 12, "gat")
    relay.write(text[:30])
    relay.write(text[30:] + relay_line(12, 12, "done"))
    relay.close()
    assert out.getvalue().splitlines() == [
        "[calibrate      0s] 3/10 7 phases",
        "[calibrate     20s] 5/10 all_reduce 4 B (~50 s left)",   # 2 units in 20 s, 5 left
        "[calibrate     20s] rank 0: a warning",
        "[calibrate     20s] 6/12 gat (~40 s left)",
        "[calibrate     20s] 12/12 done"]


def test_a_launched_rank_reports_relay_lines_and_a_torchrun_rank_its_own_progress(monkeypatch):
    import io

    from commsim.progress import RELAY_ENV, Progress, parse_relay_line, rank_progress
    monkeypatch.setenv(RELAY_ENV, "1")
    out = io.StringIO()
    rank_progress("calibrate", True, stream=out).update(4, 9, "scatter 1024 B")
    assert parse_relay_line(out.getvalue().rstrip("\n")) == (4, 9, "scatter 1024 B")
    quiet = io.StringIO()
    rank_progress("calibrate", False, stream=quiet).update(1, 2, "x")    # ranks other than 0
    assert quiet.getvalue() == ""
    monkeypatch.delenv(RELAY_ENV)
    assert isinstance(rank_progress("calibrate", True, stream=io.StringIO()), Progress)
    assert parse_relay_line("[W1123 socket.cpp:207] [c10d] The hostname ...") is None


def test_a_failed_ranks_last_line_is_its_error_not_its_progress(tmp_path):
    """A rank killed right after reporting progress is named with the last line it wrote that
    was not a progress update (nor c10d's log)."""
    from commsim.calibrate.launch.spawn import _last_line
    from commsim.progress import relay_line
    log = tmp_path / "rank0.log"
    log.write_text("RuntimeError: Gloo connectFullMesh failed\n" + relay_line(3, 9, "x")
                   + "[W1123 10:00:00.1 socket.cpp:207] [c10d] hostname\n")
    assert _last_line(log) == "RuntimeError: Gloo connectFullMesh failed"
