"""End to end: a quick local 2-rank calibration writes a loadable profile; a rank killed
mid-run ends the run naming it, the samples survive, and --resume finishes."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

import commsim.profile as P  # noqa: E402
from commsim.calibrate.runner import CalibrateOptions, refit_profile, run, samples_path  # noqa: E402
from commsim.calibrate.launch import cpu_cores  # noqa: E402
from commsim.errors import UserError  # noqa: E402
from commsim.spec import measured_cpu_efficiency  # noqa: E402

TINY = dict(nodes=2, quick=True, batch_sizes=(2, 4), sizes_bytes=(4, 4096, 262144),
            timeout_s=120)


def test_quick_two_rank_calibration_writes_a_profile_that_loads(tmp_path):
    out = tmp_path / "p.json"
    # With co-runners (off by default with --quick): the host loaded to twice its cores.
    run(CalibrateOptions(out=out, oversubscribe=2.0, **TINY))
    prof = P.load(out)
    assert prof.metadata["source"] == "commsim calibrate" and prof.metadata["nodes"] == 2
    assert prof.metadata["backend"] == "gloo" and prof.metadata["ranks_per_host"] == 2
    assert prof.compute.batch_sizes == (2, 4) and prof.compute.contended["ranks"] == 2
    t = prof.compute.threads_per_rank
    over = prof.compute.oversubscribed
    assert over["batch_sizes"] == [2] and over["busy_threads"] == t * math.ceil(2 * cpu_cores() / t)
    assert len(prof.samples["compute_oversubscribed"][0]["forward_s"]) == 2 * 3  # 2 ranks x 3
    assert measured_cpu_efficiency(prof)[-1][0] == 4 * t
    assert len(prof.grad_ready_fraction) == len(prof.params) == 34
    assert set(prof.collectives) == {"all_reduce", "gather", "scatter", "broadcast",
                                     "barrier", "send_recv"}
    assert all(row["wrong"] == 0 for row in prof.samples["nccl_table"])
    # Contention: the all-reduce alone (load 0) and with 1..3 compute threads per rank.
    net = prof.network
    assert net.contention_load[0] == 0 and len(net.contention_load) == 4
    assert net.contention_bandwidth_Bps[0] == prof.collectives["all_reduce"].bandwidth_Bps
    assert list(net.contention_bandwidth_Bps) == sorted(net.contention_bandwidth_Bps,
                                                        reverse=True)
    assert all(0 < s <= 1 for s in net.contention_compute_speed)
    # Samples were logged one per line as they were taken, after the header.
    lines = samples_path(out).read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "header" and len(lines) > 10
    # The profile's own raw samples fit it again to the same profile (bench/fidelity --repredict).
    again = refit_profile(prof)
    assert again.collectives == prof.collectives and again.compute == prof.compute
    assert again.network == prof.network and again.metadata == prof.metadata
    with pytest.raises(FileExistsError):
        run(CalibrateOptions(out=out, **TINY))


def _cli(out, *extra):
    return [sys.executable, "-c", "from commsim.cli import entry; entry()", "calibrate",
            "--quick", "--nodes", "2", "--batch-sizes", "2,4", "--out", str(out), *extra]


def test_killed_rank_names_it_and_resume_finishes_from_the_saved_samples(tmp_path):
    out = tmp_path / "k.json"
    log = samples_path(out)
    proc = subprocess.Popen(_cli(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    victim = None
    deadline = time.monotonic() + 90
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        # Once collectives are being logged, kill rank 1 (found by its RANK variable).
        if log.exists() and '"collective"' in log.read_text():
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if child.environ().get("RANK") == "1":
                        victim = child
                except psutil.Error:
                    continue
        time.sleep(0.05)
    assert victim is not None, "the run ended before rank 1 could be killed"
    killed_at = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - killed_at < 30
    assert proc.returncode == 1 and "rank 1 was killed by SIGKILL" in err
    assert not out.exists()
    taken = len(log.read_text().splitlines())
    done = subprocess.run(_cli(out, "--resume"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    prof = P.load(out)
    assert prof.metadata["nodes"] == 2
    # The resumed run did not measure the compute phase again.
    assert "compute alone" not in done.stderr
    assert len(log.read_text().splitlines()) > taken


def test_resume_refuses_samples_taken_with_other_settings(tmp_path):
    out = tmp_path / "r.json"
    samples_path(out).write_text(json.dumps({"kind": "header", "fingerprint": {"nodes": 9}})
                                 + "\n")
    with pytest.raises(UserError, match="different settings"):
        run(CalibrateOptions(out=out, resume=True, **TINY))
