"""Faults in distributed runs end cleanly, quickly, and lose nothing.

Each scenario runs the real CLI (``python -m commsim ...``) in a subprocess, injects one fault
(SIGKILL a rank, take its link down, a wrong master address, a master port already in use) and
asserts: the CLI and every rank it started are gone within ``EXIT_BOUND_S`` of the fault
(measured), the message names the rank or address, the exit code is 1 for a failed run and 2 for
a user error, no process the run started is left, and, for calibration, the samples saved before
the fault are all still there and ``--resume`` completes the run.

Scenarios on the emulated cluster use their own prefix (``csimf<pid>``) so a user's cluster is
never touched; they need root and iproute2 (``@pytest.mark.cluster``) and are skipped otherwise.
With ``COMMSIM_FAULTS_LOG`` set, each scenario appends one JSON line of its figures there
(``bench/faults.py`` prints them).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

import commsim.profile as P  # noqa: E402
from commsim.calibrate import cluster  # noqa: E402
from commsim.calibrate.launch.spawn import WORKER_MODULE  # noqa: E402
from commsim.calibrate.runner import samples_path  # noqa: E402

# Our own cluster, unique per test process: never a user's cluster, nor another run's of
# this suite (engineers run it concurrently; a shared prefix made their ranks meet ours).
PREFIX = f"csimf{os.getpid() % 100000}"
RATE = "1gbit"
SMALL = "commsim.calibrate.live:small_cnn"
EXIT_BOUND_S = 60.0
COLLECTIVE_TIMEOUT = "3"  # short Gloo timeouts keep link/master faults cheap to test
LOG_ENV = "COMMSIM_FAULTS_LOG"


def _can_build() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None


needs_cluster = [pytest.mark.cluster,
                 pytest.mark.skipif(not _can_build(), reason="needs root and iproute2")]


# --------------------------------------------------------------------------- running a fault

@dataclass
class Outcome:
    """What one faulty run did: exit code, output, seconds from the fault until the CLI and
    every process it started were gone, and the processes still alive after that bound."""
    returncode: int
    stdout: str
    stderr: str
    exit_s: float
    orphans: list[str] = field(default_factory=list)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _stray_workers(cwd: str) -> list[psutil.Process]:
    """Rank processes anywhere on the machine started from ``cwd`` (the test's tmp dir, which
    the CLI runs in and its ranks inherit), reparented or not."""
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        if WORKER_MODULE in " ".join(p.info["cmdline"] or []) and p.info["cwd"] == cwd:
            found.append(p)
    return found


def run_cli(args: list[str], tmp_path: Path, *, fault: Callable[[list], bool] | None = None,
            env: dict[str, str] | None = None, wrap: list[str] | None = None,
            limit_s: float = 150.0) -> Outcome:
    """Run ``commsim ARGS`` (under ``wrap``, e.g. ``ip netns exec NS``); call ``fault(procs)``
    with the live descendants every 50 ms until it returns True, then time the way out.

    Without ``fault`` the time is counted from the start.  Every descendant ever seen is
    tracked, so a rank that outlives the CLI (an orphan) is found even after reparenting."""
    argv = [*(wrap or []), sys.executable, "-m", "commsim", *args]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full_env, cwd=tmp_path, start_new_session=True)
    root = psutil.Process(proc.pid)
    seen: dict[int, psutil.Process] = {}
    fired_at = None if fault is not None else start
    try:
        while proc.poll() is None and time.monotonic() - start < limit_s:
            try:
                for child in root.children(recursive=True):
                    seen.setdefault(child.pid, child)
            except psutil.Error:
                pass
            if fired_at is None and fault([p for p in seen.values() if _alive(p)]):
                fired_at = time.monotonic()
            time.sleep(0.05)
        assert fired_at is not None, f"the run ended before the fault was injected: " \
                                     f"{proc.stderr.read() if proc.stderr else ''}"
        bound = fired_at + EXIT_BOUND_S
        try:
            out, err = proc.communicate(timeout=max(1.0, bound - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"commsim {' '.join(args)} still running {EXIT_BOUND_S:g} s after the "
                        f"fault: {err[-500:]}")
        while any(_alive(p) for p in seen.values()) and time.monotonic() < bound:
            time.sleep(0.05)
        gone_at = time.monotonic()
        left = [p for p in seen.values() if _alive(p)] + _stray_workers(str(tmp_path))
        orphans = sorted({f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in left if _alive(p)})
        return Outcome(proc.returncode, out, err, gone_at - fired_at, orphans)
    finally:
        # Whatever happened, leave nothing behind for the next test.
        for p in [*seen.values(), *_stray_workers(str(tmp_path))]:
            if _alive(p):
                p.kill()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def record(scenario: str, outcome: Outcome, *, samples_before: int = 0,
           samples_lost: int = 0) -> None:
    """Append the scenario's figures for bench/faults.py (no-op unless COMMSIM_FAULTS_LOG)."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"scenario": scenario, "returncode": outcome.returncode,
                                 "exit_s": round(outcome.exit_s, 2),
                                 "orphans": len(outcome.orphans),
                                 "samples_before": samples_before,
                                 "samples_lost": samples_lost,
                                 "message": outcome.stderr.strip().splitlines()[-1:]}) + "\n")


def assert_clean_exit(outcome: Outcome, code: int, names: str) -> None:
    """Exit code, one-line message naming ``names`` (regex), time bound, no orphans."""
    import re

    last = outcome.stderr.strip().splitlines()[-1] if outcome.stderr.strip() else ""
    assert outcome.returncode == code, (outcome.returncode, outcome.stderr[-2000:])
    assert "Traceback" not in outcome.stderr, outcome.stderr[-2000:]
    assert re.search(names, last), last
    assert outcome.exit_s < EXIT_BOUND_S
    assert outcome.orphans == []


# --------------------------------------------------------------------------- fault triggers

def rank_process(procs: list, rank: int):
    """The process of rank ``rank`` among ``procs`` (found by its RANK variable)."""
    for p in procs:
        try:
            if WORKER_MODULE in " ".join(p.cmdline()) and p.environ().get("RANK") == str(rank):
                return p
        except psutil.Error:
            continue
    return None


def _connected(pid: int) -> bool:
    """True once the process has an ESTABLISHED TCP connection (in its own network namespace:
    /proc/PID/net/tcp is that namespace's table, matched to the process's socket inodes)."""
    try:
        inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")
                  if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")}
        rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(r.split()[3] == "01" and r.split()[9] in inodes for r in rows)


class WhenTraining:
    """Fires ``action(rank_proc)`` once rank ``rank`` has joined the group and ``settle_s`` more
    have passed (model built, training under way)."""

    def __init__(self, rank: int, action: Callable, settle_s: float = 2.0):
        self.rank, self.action, self.settle_s, self.joined_at = rank, action, settle_s, None

    def __call__(self, procs: list) -> bool:
        p = rank_process(procs, self.rank)
        if p is None:
            return False
        if self.joined_at is None:
            if _connected(p.pid):
                self.joined_at = time.monotonic()
            return False
        if time.monotonic() - self.joined_at < self.settle_s:
            return False
        self.action(p)
        return True


class WhenSampled:
    """Fires ``action(rank_proc)`` once the calibration samples log holds ``marker``."""

    def __init__(self, log: Path, rank: int, action: Callable, marker: str):
        self.log, self.rank, self.action, self.marker = log, rank, action, marker

    def __call__(self, procs: list) -> bool:
        try:
            if self.marker not in self.log.read_text():
                return False
        except OSError:
            return False
        p = rank_process(procs, self.rank)
        if p is None:
            return False
        self.action(p)
        return True


def sigkill(p) -> None:
    os.kill(p.pid, signal.SIGKILL)


def link_down(node: int) -> Callable:
    return lambda _p: cluster.set_link(node, False, PREFIX)


# --------------------------------------------------------------------------- calibration

def _calibrate_args(out: Path, emulate: bool, batches: str = "2,4",
                    collective_timeout: str = COLLECTIVE_TIMEOUT) -> list[str]:
    args = ["calibrate", "--quick", "--nodes", "2", "--model", SMALL, "--batch-sizes", batches,
            "--out", str(out), "--collective-timeout", collective_timeout, "--timeout", "120"]
    return args + (["--emulate", RATE, "--cluster-prefix", PREFIX] if emulate else [])


def _sample_key(line: str) -> tuple:
    rec = json.loads(line)
    return tuple(rec.get(k) for k in ("kind", "mode", "batch_size", "round", "op", "bytes"))


def calibrate_fault_then_resume(tmp_path: Path, scenario: str, *, emulate: bool,
                                action: Callable, names: str, marker: str = '"collective"',
                                batches: str = "2,4", after: Callable = lambda: None):
    """A calibration hit by ``action`` once its samples log holds ``marker`` fails cleanly;
    ``--resume`` finishes it keeping every sample saved before the fault (none is lost, none is
    measured again)."""
    out = tmp_path / "p.json"
    log = samples_path(out)
    args = _calibrate_args(out, emulate, batches)
    outcome = run_cli(args, tmp_path, fault=WhenSampled(log, 1, action, marker))
    after()
    saved = [ln for ln in log.read_text().splitlines() if ln.strip()]
    assert_clean_exit(outcome, 1, names)
    assert not out.exists(), "a failed calibration must not write the profile"
    assert len(saved) > 1, "no sample was saved before the fault"
    # No fault in the resumed run, so no short collective timeout either (it is not part of
    # the samples' fingerprint): with two compute threads a rank on two loaded cores, the
    # contention phase once kept a peer from its recv for over 3 s.
    resume_args = _calibrate_args(out, emulate, batches, collective_timeout="60")
    resumed = subprocess.run([sys.executable, "-m", "commsim", *resume_args, "--resume"],
                             capture_output=True, text=True, timeout=150, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    final = [ln for ln in log.read_text().splitlines() if ln.strip()]
    lost = sum(1 for ln in saved if ln not in set(final))
    record(scenario, outcome, samples_before=len(saved) - 1, samples_lost=lost)
    assert lost == 0
    keys = [_sample_key(ln) for ln in final[1:]]
    again = {k for k in map(_sample_key, saved[1:]) if keys.count(k) > 1}
    assert not again, f"resume measured saved samples again: {again}"
    prof = P.load(out)
    assert prof.metadata["nodes"] == 2 and "send_recv" in prof.collectives


# --------------------------------------------------------------------------- live

def _live_args(emulate: bool, iterations: int = 3000) -> list[str]:
    args = ["live", "--strategy", "ring", "--nodes", "2", "--model", SMALL, "--global-batch",
            "8", "--iterations", str(iterations), "--collective-timeout", COLLECTIVE_TIMEOUT,
            "--timeout", "120", "--threads", "1"]
    return args + (["--emulate", RATE, "--cluster-prefix", PREFIX] if emulate else [])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_env(rank: int, addr: str, port: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": addr, "MASTER_PORT": str(port),
            "LOCAL_WORLD_SIZE": "1"}


# --------------------------------------------------------------------------- local scenarios

@pytest.mark.skipif(_can_build(), reason="TestOnTheCluster kills a live rank (cheaper: once)")
def test_local_live_rank_sigkilled_mid_run(tmp_path):
    outcome = run_cli(_live_args(False), tmp_path, fault=WhenTraining(1, sigkill))
    record("local live: SIGKILL rank 1", outcome)
    assert_clean_exit(outcome, 1, r"rank 1 was killed by SIGKILL")


def test_local_wrong_master_address_names_it(tmp_path):
    """A rank whose master (127.0.0.2, a closed port) never answers gives up within the
    collective timeout, naming the address."""
    port = _closed_port()
    outcome = run_cli(_live_args(False, 1), tmp_path,
                      env=_torchrun_env(1, "127.0.0.2", port))
    record("local: wrong master address", outcome)
    assert_clean_exit(outcome, 1, rf"rank 1.*127\.0\.0\.2:{port}")


def test_local_master_port_in_use_is_a_user_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        outcome = run_cli(_live_args(False, 1), tmp_path,
                          env=_torchrun_env(0, "127.0.0.1", port))
    record("local: master port in use", outcome)
    assert_clean_exit(outcome, 2, rf"127\.0\.0\.1:{port}.*in use")


# --------------------------------------------------------------------------- on the cluster

@pytest.fixture(scope="module")
def fault_cluster():
    cluster.down(PREFIX)
    info = cluster.up(2, 125e6, prefix=PREFIX)
    yield info
    cluster.down(PREFIX)
    # A torn-down cluster leaves no namespace behind (also after the faults above).
    netns = Path("/run/netns")
    assert not [p for p in netns.iterdir() if p.name.startswith(PREFIX + "-")] \
        if netns.is_dir() else True
    assert cluster.status(PREFIX) is None
    (cluster.STATE_DIR / f"{PREFIX}.lock").unlink(missing_ok=True)  # the prefix is single-use


@pytest.fixture
def links_restored(fault_cluster):
    yield fault_cluster
    for node in range(fault_cluster.nodes):
        cluster.set_link(node, True, PREFIX)


@pytest.mark.usefixtures("links_restored")
class TestOnTheCluster:
    pytestmark = needs_cluster

    def test_calibration_rank_sigkilled_then_resumed(self, tmp_path):
        calibrate_fault_then_resume(tmp_path, "cluster calibrate: SIGKILL rank 1", emulate=True,
                                    action=sigkill, names=r"rank 1 was killed by SIGKILL")

    def test_calibration_link_down_while_rank0_measures_alone_then_resumed(self, tmp_path):
        """Rank 1 waits (seconds, minutes for VGG-11) while rank 0 measures compute alone; its
        link going down then must still be found within the collective timeout."""
        calibrate_fault_then_resume(tmp_path, "cluster calibrate: link of node 1 down "
                                    "(compute phase)", emulate=True, action=link_down(1),
                                    names=r"rank \d", marker='"mode": "alone"',
                                    batches="2,512",
                                    after=lambda: cluster.set_link(1, True, PREFIX))

    def test_live_rank_sigkilled_mid_run(self, tmp_path):
        outcome = run_cli(_live_args(True), tmp_path, fault=WhenTraining(1, sigkill))
        record("cluster live: SIGKILL rank 1", outcome)
        assert_clean_exit(outcome, 1, r"rank 1 was killed by SIGKILL")

    def test_live_link_down_mid_run(self, tmp_path):
        outcome = run_cli(_live_args(True), tmp_path, fault=WhenTraining(1, link_down(1)))
        record("cluster live: link of node 1 down", outcome)
        assert_clean_exit(outcome, 1, r"rank \d")

    def test_wrong_master_address_names_it(self, tmp_path):
        """Node 1 told to meet a master at an unused address of the subnet."""
        wrong = f"{cluster.SUBNET}.200"
        outcome = run_cli(_live_args(False, 1), tmp_path, env=_torchrun_env(1, wrong, 29500),
                          wrap=cluster.exec_argv(1, ["true"], PREFIX)[:-1])
        record("cluster: wrong master address", outcome)
        assert_clean_exit(outcome, 1, rf"rank 1.*{wrong}:29500")

    def test_master_port_in_use_is_a_user_error(self, tmp_path, fault_cluster):
        """Something else listens on node 0's master port: rank 0 says so, rank 1 (connected
        to the squatter) is killed with it."""
        addr = fault_cluster.addresses[0]
        squat = subprocess.Popen(cluster.exec_argv(0, [
            sys.executable, "-c", "import socket,sys,time; s=socket.socket(); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('{addr}', 29500)); s.listen(); print('ok', flush=True); time.sleep(120)"],
            PREFIX), stdout=subprocess.PIPE, text=True)
        try:
            assert squat.stdout.readline().strip() == "ok"
            outcome = run_cli(_live_args(True, 1), tmp_path)
        finally:
            squat.kill()
            squat.wait()
        record("cluster: master port in use", outcome)
        assert_clean_exit(outcome, 2, rf"{addr}:29500.*in use")


# --------------------------------------------------------------------------- determinism
# (simulate's determinism is held by tests/test_properties.py.)

def test_live_training_depends_only_on_its_explicit_seed(monkeypatch):
    """Same seed, same losses and parameters, whatever the ambient torch RNG state; another
    seed, other ones; and the seed is recorded in the run's result."""
    import torch

    from commsim.calibrate import live

    # The worker would pin this (pytest's) process's threads for the tests after us: don't.
    threads = torch.get_num_threads()
    monkeypatch.setattr(live.worker, "pin_threads", lambda cfg: threads)

    cfg = live.LiveConfig(strategy="single", batch_per_rank=4, iterations=2, model=SMALL,
                          synthetic_size=64, seed=3, threads_per_rank=1)

    def train(c):
        r = live.live_worker(0, 1, c.to_dict())
        return r["loss"], r["params_checksum"]

    first = train(cfg)
    torch.manual_seed(12345)
    torch.rand(1000)  # disturb the global generator: the run must not depend on it
    assert train(cfg) == first
    assert train(live.LiveConfig(**{**cfg.to_dict(), "seed": 4})) != first
    per_rank = live.live_worker(0, 1, cfg.to_dict())
    assert live.aggregate([per_rank], cfg)["seed"] == 3


# --------------------------------------------------------------------------- the launcher dies

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_ranks_die_with_their_launcher(tmp_path, sig):
    """A launcher stopped by SIGTERM kills its ranks on the way out (exit 1, saying so); one
    stopped by SIGKILL cannot, and its ranks die with it anyway (no orphans either way)."""
    trigger = WhenTraining(1, lambda p: os.kill(p.parent().pid, sig))
    outcome = run_cli(_live_args(False), tmp_path, fault=trigger)
    record(f"local live: {signal.Signals(sig).name} to the launcher", outcome)
    if sig == signal.SIGTERM:
        assert_clean_exit(outcome, 1, r"interrupted by SIGTERM")
    else:
        assert outcome.returncode == -signal.SIGKILL and outcome.exit_s < EXIT_BOUND_S
        assert outcome.orphans == []
