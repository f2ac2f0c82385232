"""What the environment does never ends in a traceback, and never leaves half a file.

The scenarios (``tests/envfaults.py``) run the real CLI in a subprocess for every command and
every option that names a path: a folder that cannot be made, a read-only or full file system, a
folder another user owns, standard output full or closed, a hostile or unreadable input.  The
in-process tests below pin the pieces: all-or-nothing writes, bounded JSON reading, the ranges.
"""
from __future__ import annotations

import errno
import os

import pytest

import envfaults
from commsim import files
from commsim.cli import main
from commsim.errors import EnvironmentFault, UserError
from commsim.limits import LINK_RATE_BPS, SIZE_BYTES

SCENARIOS = envfaults.scenarios()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_environment_fault_is_one_line_and_leaves_nothing(scenario):
    why = envfaults.can_run(scenario)
    if why:
        pytest.skip(why)
    outcome = envfaults.run(scenario)
    assert outcome.problems(envfaults.expected_name(scenario)) == [], outcome.stderr


def test_every_command_that_writes_has_a_scenario():
    covered = {s.name.split(" (")[0] for s in SCENARIOS}
    for label in ("report --out", "report --csv-dir", "report --json-dir", "trace --out",
                  "validate --out", "live --out", "calibrate --out"):
        assert label in covered


# ------------------------------------------------------------------ all-or-nothing writing

def test_write_files_writes_all(tmp_path):
    files.write_files({tmp_path / "a.txt": b"a", tmp_path / "new" / "b.txt": b"b"})
    assert (tmp_path / "a.txt").read_bytes() == b"a"
    assert (tmp_path / "new" / "b.txt").read_bytes() == b"b"


def test_a_failing_file_leaves_none_and_restores_what_force_replaced(tmp_path, monkeypatch):
    (tmp_path / "old.txt").write_bytes(b"old")
    real = files._stage

    def stage(p, data):
        if p.name == "c.txt":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(p, data)

    monkeypatch.setattr(files, "_stage", stage)
    with pytest.raises(EnvironmentFault, match=r"cannot write .*c\.txt: No space left"):
        files.write_files({tmp_path / "old.txt": b"new", tmp_path / "sub" / "b.txt": b"b",
                           tmp_path / "sub" / "c.txt": b"c"}, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]  # sub/ removed again
    assert (tmp_path / "old.txt").read_bytes() == b"old"


def test_a_failure_while_placing_restores_the_replaced_file(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_bytes(b"old a")
    real = os.link

    def link(src, dst):  # a.txt is replaced first; then placing the new b.txt fails
        if str(dst).endswith("b.txt"):
            raise OSError(errno.EIO, "Input/output error")
        return real(src, dst)

    monkeypatch.setattr(files.os, "link", link)
    with pytest.raises(EnvironmentFault, match="Input/output error"):
        files.write_files({tmp_path / "a.txt": b"new a", tmp_path / "b.txt": b"b"},
                          force=True)
    monkeypatch.setattr(files.os, "link", real)
    assert (tmp_path / "a.txt").read_bytes() == b"old a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_existing_file_is_refused_before_any_is_written(tmp_path):
    (tmp_path / "b.txt").write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        files.write_files({tmp_path / "a.txt": b"a", tmp_path / "b.txt": b"b"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt"]
    assert (tmp_path / "b.txt").read_bytes() == b"keep"


def test_check_output(tmp_path):
    files.check_output(tmp_path / "new" / "deeper" / "x.pdf")   # made later: fine
    assert not (tmp_path / "new").exists()                       # the check makes nothing
    (tmp_path / "f").write_text("")
    with pytest.raises(EnvironmentFault, match="is a file, not a folder"):
        files.check_output(tmp_path / "f" / "x.pdf")
    with pytest.raises(UserError, match="is a folder"):
        files.check_output(tmp_path)
    with pytest.raises(UserError, match="is a file; name a folder"):
        files.check_output(tmp_path / "f", folder=True)
    with pytest.raises(EnvironmentFault, match="folder /proc/nope does not exist"):
        files.check_output("/proc/nope/x.pdf")
    assert list(tmp_path.iterdir()) == [tmp_path / "f"]  # no probe left


# ------------------------------------------------------------------ bounded reading

def test_json_depth_skips_strings():
    assert files.json_depth('{"a": [1, {"b": "[[[["}]}') == 3
    assert files.json_depth("3") == 0


def test_nested_json_is_refused_before_parsing():
    with pytest.raises(UserError, match="nested 100000 levels deep"):
        files.parse_json("[" * 100_000 + "]" * 100_000, "x")
    assert files.parse_json("[" * 10 + "]" * 10, "x") == [[[[[[[[[[]]]]]]]]]]


def test_read_text_refuses_large_and_binary_files(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(100)
    with pytest.raises(UserError, match="is 100 bytes; at most 10"):
        files.read_text(big, "profile", max_bytes=10)
    with pytest.raises(UserError, match="not UTF-8"):
        (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
        files.read_text(tmp_path / "bin", "profile")
    with pytest.raises(UserError, match="does not exist"):
        files.read_text(tmp_path / "none", "profile")


# ------------------------------------------------------------------ ranges

@pytest.mark.parametrize("argv, option", [
    (["predict", "--strategy", "ring", "--nodes", "4", "--bucket-mb", "1e308"], "--bucket-mb"),
    (["predict", "--strategy", "ring", "--nodes", "4", "--global-batch",
      "9223372036854775807"], "--global-batch"),
    (["predict", "--strategy", "ring", "--nodes", "4", "--bandwidth", "1e-300bit"],
     "--bandwidth"),
    (["predict", "--strategy", "ps", "--nodes", "4", "--latency", "1e300s"], "--latency"),
    (["predict", "--strategy", "ring", "--nodes", "4", "--straggler", "0:1e300"],
     "--straggler"),
    (["predict", "--strategy", "ring", "--nodes", "4", "--cores-per-host", "1e-300"],
     "--cores-per-host"),
    (["predict", "--strategy", "ring", "--nodes", "4", "--slow-link", "1:1e-300bit"],
     "--slow-link"),
    (["predict", "--strategy", "ring", "--nodes", "4", "--sync-every", "100000000"],
     "--sync-every"),
    (["predict", "--strategy", "ring", "--nodes", "4000000"], "--nodes"),
    (["sweep", "--nodes", "1-100000000000"], "--nodes"),
    (["algorithms", "--size", "1e300"], "--size"),
    (["algorithms", "--bandwidth", "1e30gbit"], "--bandwidth"),
    (["tune", "--nodes", "4", "--batch-per-rank", "100000000"], "--batch-per-rank"),
])
def test_out_of_range_inputs_are_refused_with_the_range(argv, option, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert option in err and "outside the range the model covers" in err


def test_the_edges_of_the_ranges_give_finite_figures(capsys):
    import json
    import math
    for argv in (["--bandwidth", "1kbit"], ["--bandwidth", "10tbit"], ["--latency", "10s"],
                 ["--global-batch", str(2**24)], ["--bucket-mb", "1048576"]):
        assert main(["predict", "--strategy", "ddp", "--nodes", "4", "--json", *argv]) == 0
        result = json.loads(capsys.readouterr().out)
        figures = [v for v in result.values() if isinstance(v, float)]
        assert figures and all(math.isfinite(v) for v in figures), argv
        assert result["algbw_Bps"] > 0 and result["iteration_s"] > 0, argv


def test_bounds_name_their_range():
    with pytest.raises(UserError, match=r"1 kbit/s to 10 Tbit/s"):
        LINK_RATE_BPS.check(1.0, "--bandwidth")
    assert SIZE_BYTES.check(1024) == 1024
    with pytest.raises(UserError, match="must be a number"):
        SIZE_BYTES.check("big")


def test_ranges_bound_what_ifs_not_what_calibration_measured():
    """A quick calibration on one machine can fit a link faster than any real one: its profile
    still predicts; only a what-if the user types is held to the range."""
    from profiles import make_profile

    from commsim.api import Scenario, predict
    prof = make_profile(bandwidth_Bps=4e22, latency_s=20.0)
    assert predict(prof, "ring", 2).iteration_s > 0
    with pytest.raises(UserError, match="--bandwidth"):
        predict(prof, "ring", 2, Scenario(bandwidth_Bps=4e22))
