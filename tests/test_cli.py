"""The CLI: answers on the bundled profile, and bad input gets one line and exit code 2."""
import json
import os
import subprocess
import sys

import pytest

from commsim.cli import main
from commsim.profile import save
from profiles import make_profile


@pytest.fixture()
def toy(tmp_path):
    path = tmp_path / "toy.json"
    save(make_profile(), path)
    return str(path)


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_json_has_the_promised_fields(toy, capsys):
    code, out, _ = run(["predict", "--strategy", "ring", "--nodes", "4", "--profile", toy,
                        "--json"], capsys)
    assert code == 0
    d = json.loads(out)
    for key in ("strategy", "nodes", "global_batch", "batch_per_rank", "iteration_s", "compute_s",
                "comm_s", "exposed_comm_s", "overlap_fraction", "speedup", "efficiency",
                "epoch_s", "bytes_sent_per_rank", "bytes_received_per_rank", "algbw_Bps",
                "busbw_Bps", "link_utilization"):
        assert key in d, key
    assert d["nodes"] == 4 and d["batch_per_rank"] == 64


def test_predict_on_the_bundled_profile_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-m", "commsim", "predict", "--strategy", "ring",
                          "--nodes", "8"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ring" in out.stdout and "speedup" in out.stdout


def test_sweep_csv(toy, capsys):
    code, out, _ = run(["sweep", "--profile", toy, "--nodes", "1,2,4", "--csv"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("strategy,")
    assert len(lines) == 1 + 1 + 3 * 3        # header, single at 1, three strategies x 3


@pytest.mark.parametrize("args, needle", [
    (["predict", "--strategy", "ring", "--nodes", "0"], "--nodes"),
    (["predict", "--strategy", "nope", "--nodes", "2"], "unknown strategy"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--bandwidth", "-1gbit"], "rate"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--bandwidth", "1"], "unit"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--latency", "soon"], "time"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--profile", "/no/such.json"],
     "does not exist"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--global-batch", "1"], "smaller"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--global-batch", "8",
      "--batch-per-rank", "4"], "not both"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--straggler", "5:2"], "rank 5"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--straggler", "1:1.5",
      "--straggler", "1:2"], "names 1 twice"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--slow-link", "0:1gbit",
      "--slow-link", "0:2gbit"], "names 0 twice"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--slow-link", "x"], "slow-link"),
    (["predict", "--strategy", "ring", "--nodes", "2", "--bucket-mb", "0"], "bucket"),
    (["predict", "--strategy", "ddp", "--nodes", "2", "--engine", "warp"], "engine"),
    (["sweep", "--nodes", "0,2"], "--nodes"),
    (["sweep", "--strategies", "ring,bogus"], "unknown strategy"),
    (["predict", "--nodes", "2"], "--strategy"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle, toy, capsys):
    if "--profile" not in args:
        args = args + ["--profile", toy]
    code, out, err = run(args, capsys)
    assert code == 2
    assert "Traceback" not in err and "Traceback" not in out
    assert len(err.strip().splitlines()) == 1
    assert needle in err


def test_corrupt_profile_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "commsim.profile", "schema_version": 1, "metadata": {}}')
    code, _, err = run(["predict", "--strategy", "ring", "--nodes", "2", "--profile", str(bad)],
                       capsys)
    assert code == 2 and "model" in err and len(err.strip().splitlines()) == 1


_BLAS_THREADS = """
import os, sys
import commsim.cli
from threadpoolctl import threadpool_info
blas = [p["num_threads"] for p in threadpool_info() if p["internal_api"] == "openblas"]
print(blas, os.environ.get("OPENBLAS_NUM_THREADS"))
"""


@pytest.mark.parametrize("preset, threads, left", [(None, "[1]", "None"), ("2", "[2]", "2")])
def test_the_cli_loads_numpy_on_one_blas_thread_and_leaves_the_environment(preset, threads,
                                                                           left):
    """OpenBLAS's thread per core costs CPU at every start; a user's own setting wins, and the
    processes a command starts see the environment as it was."""
    pytest.importorskip("threadpoolctl")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    out = subprocess.run([sys.executable, "-c", _BLAS_THREADS], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    if out[0] == "[]":
        pytest.skip("numpy here is not built on OpenBLAS")
    assert out == [threads, left]


def test_every_command_has_a_one_paragraph_help():
    """``commsim --help`` lists each command by its help: a docstring's hard line breaks would
    show there as breaks in mid-sentence (calibrate's did)."""
    import typer

    from commsim.cli import app

    def commands(group):
        for name, cmd in group.commands.items():
            yield name, cmd
            if hasattr(cmd, "commands"):
                yield from commands(cmd)

    for name, cmd in commands(typer.main.get_command(app)):
        assert cmd.help and "\n" not in cmd.help, (name, cmd.help)
