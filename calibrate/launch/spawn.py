"""Start one process per rank, watch them, and never leave one behind (local or emulated).

``launch``:
1. writes a spec file (worker ``"module:function"``, its JSON config, world size, timeouts) to
   ``out_dir`` and starts ``python -m commsim.calibrate.launch.worker SPEC`` once per rank, each
   in its own process group (``start_new_session``), where its ``Placement`` puts it (this host,
   or node r of an emulated cluster) with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and thread
   counts in its environment;
2. watches the children (stderr goes to ``rank{r}.log``; rank 0's is relayed live to the
   caller's ``progress`` stream, with its progress as ``commsim.progress`` relay lines):
   as soon as one exits non-zero or is killed, it kills every other process group and raises
   ``RunFailed`` (``UserError`` when the rank reported one) naming the rank and its last stderr
   line.  Past ``timeout_s`` it kills them all and says which ranks were still running.
3. reads ``rank{r}.json`` (written atomically by each rank) and returns the per-rank dicts.

Never hangs: Gloo's own timeout (``collective_timeout_s``) bounds rendezvous and every
collective inside the ranks, and the parent's ``timeout_s`` bounds the whole run.  Children
are killed on every way out of ``launch`` (including KeyboardInterrupt and SIGTERM), and
die with the launcher if it is SIGKILLed (PR_SET_PDEATHSIG), so none is orphaned.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from commsim.calibrate.launch.placement import Placement, place
from commsim.calibrate.launch.settings import DEFAULT_COLLECTIVE_TIMEOUT_S, default_threads
from commsim.errors import RunFailed, UserError
from commsim.files import atomic_write_text
from commsim.progress import RELAY_ENV, RELAY_PREFIX, Relay

if TYPE_CHECKING:  # the cluster module needs root tools only when used
    from commsim.calibrate.cluster import ClusterInfo

# What a rank runs (its name is also how a rank's process is recognised in a process list).
WORKER_MODULE = "commsim.calibrate.launch.worker"
POLL_S = 0.1
# After one rank fails, give the others this long to fail too, so the root cause (a rank that
# was killed) is reported rather than a peer's "connection reset".
SETTLE_S = 0.3
KILL_GRACE_S = 2.0
_C10_LOG_RE = re.compile(r"\[[IWEF]\d{4} \d")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def launch(worker: str, config: dict, *, nodes: int, emulate: "ClusterInfo | None" = None,
           timeout_s: float, out_dir: Path, master_port: int | None = None,
           threads_per_rank: int | None = None, master_addr: str | None = None,
           collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
           progress: IO[str] | None = None) -> list[dict]:
    """Run ``worker(rank, nodes, config)`` on ``nodes`` ranks; their dicts in rank order.

    ``master_addr`` overrides the rendezvous address (tests of a wrong address); ``progress``
    receives rank 0's stderr as it is written, whole lines (a ``commsim.progress.Relay`` shows
    its progress; None: its other lines go to sys.stderr)."""
    if nodes < 1:
        raise UserError(f"--nodes must be >= 1, got {nodes}")
    placement = place(nodes, emulate, master_addr=master_addr, master_port=master_port)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for r in range(nodes):
        (out / f"rank{r}.json").unlink(missing_ok=True)
    threads = threads_per_rank or default_threads(nodes)
    spec = {"worker": worker, "config": config, "world_size": nodes, "out_dir": str(out),
            "collective_timeout_s": collective_timeout_s, "threads": threads}
    spec_path = out / "spec.json"
    atomic_write_text(spec_path, json.dumps(spec, allow_nan=False), force=True)
    children: list[_Child] = []
    try:
        with _terminate_raises():
            for r in range(nodes):
                children.append(_start(r, nodes, spec_path, out, placement, threads))
            _watch(children, timeout_s, progress if progress is not None else Relay())
    finally:
        _kill_all(children)
    return [_read_result(out / f"rank{r}.json", r) for r in range(nodes)]


@contextlib.contextmanager
def _terminate_raises():
    """SIGTERM (kill, a batch system's time limit) raises RunFailed while the ranks run, so
    ``launch`` still kills them on the way out; Python's default would just exit, orphaning
    them (they run in their own sessions)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise RunFailed(f"interrupted by {signal.Signals(signum).name}; every rank was killed")
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the launcher dies, even by SIGKILL (Linux)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - not Linux: no such safety net
        pass


@dataclass
class _Child:
    rank: int
    proc: subprocess.Popen
    log: Path
    log_fh: IO[bytes]
    relayed: int = 0


def _start(rank: int, world: int, spec_path: Path, out: Path, placement: Placement,
           threads: int) -> _Child:
    # Rank 0 reports progress as relay lines, which ``_relay`` hands to the caller's stream.
    env = {**os.environ, **placement.env(rank, world, threads), RELAY_ENV: "1"}
    argv = placement.argv(rank, [sys.executable, "-m", WORKER_MODULE, str(spec_path)])
    log = out / f"rank{rank}.log"
    fh = open(log, "wb")
    try:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                                start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as exc:
        fh.close()
        raise UserError(f"cannot start rank {rank} ({argv[0]}): {exc.strerror or exc}") from None
    return _Child(rank, proc, log, fh)


def _watch(children: list[_Child], timeout_s: float, progress: IO[str]) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        _relay(children[0], progress)
        failed = [c for c in children if c.proc.poll() not in (None, 0)]
        if failed:
            first = {c.rank for c in failed}
            time.sleep(SETTLE_S)
            failed = [c for c in children if c.proc.poll() not in (None, 0)]
            _relay(children[0], progress)
            raise _failure(failed, first)
        if all(c.proc.poll() == 0 for c in children):
            _relay(children[0], progress)
            return
        if time.monotonic() > deadline:
            running = [c.rank for c in children if c.proc.poll() is None]
            raise RunFailed(f"run timed out after {timeout_s:g} s; rank(s) "
                            f"{', '.join(map(str, running))} still running (killed)")
        time.sleep(POLL_S)


# Signals a process gets from outside (a user, the OOM killer, a scheduler).  A rank that dies by
# another one (SIGSEGV, SIGBUS) crashed on its own; SIGABRT is mostly a consequence: Gloo aborts
# a rank (std::terminate) when a peer it was talking to vanished.
_SENT_SIGNALS = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _failure(failed: list[_Child], first=frozenset()) -> Exception:
    """The run's failure, naming its cause among the ``failed`` ranks (``first``: the ranks
    seen failed before the others had time to follow)."""
    # A rank killed from outside is the cause; then one that failed before the others; then
    # one that crashed by a signal, one that exited with an error, one Gloo aborted.
    def precedence(c: _Child) -> tuple:
        rc = c.proc.returncode
        kind = (0 if rc < 0 and -rc in _SENT_SIGNALS else 3 if rc == -signal.SIGABRT
                else 1 if rc < 0 else 2)
        return (kind > 0, c.rank not in first, kind)

    cause = min(failed, key=precedence)
    rc = cause.proc.returncode
    how = (f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}")
    line = _last_line(cause.log)
    message = f"rank {cause.rank} {how}" + (f": {line}" if line else "")
    from commsim.calibrate.launch.worker import EXIT_USER_ERROR

    return UserError(message) if rc == EXIT_USER_ERROR else RunFailed(message)


def _relay(child: _Child, progress: IO[str]) -> None:
    """Copy what rank 0 wrote to stderr since the last call (its progress lines)."""
    try:
        with open(child.log, "rb") as fh:
            fh.seek(child.relayed)
            data = fh.read()
    except OSError:
        return
    # Only whole lines, so a line being written is not split.
    end = data.rfind(b"\n") + 1
    if end:
        progress.write(data[:end].decode("utf-8", "replace"))
        progress.flush()
        child.relayed += end


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    # c10d's own log lines ("[W1122 02:55:53.61 socket.cpp:207] ...") are not the rank's error,
    # nor is rank 0's progress.
    lines = [ln for ln in lines if ln and not _C10_LOG_RE.match(ln)
             and not ln.startswith(RELAY_PREFIX)]
    return lines[-1][:300] if lines else ""


def _kill_all(children: list[_Child]) -> None:
    """SIGTERM every rank's process group, then SIGKILL what is left; reap them all."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [c for c in children if c.proc.poll() is None]
        for c in alive:
            try:
                os.killpg(c.proc.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + KILL_GRACE_S
        while alive and time.monotonic() < deadline:
            alive = [c for c in alive if c.proc.poll() is None]
            time.sleep(0.05)
    for c in children:
        try:
            c.proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            pass
        c.log_fh.close()


def _read_result(path: Path, rank: int) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))["result"]
    except (OSError, ValueError, KeyError) as exc:
        raise RunFailed(f"rank {rank} exited cleanly but left no result in {path} ({exc})") \
            from None
