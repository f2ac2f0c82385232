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
