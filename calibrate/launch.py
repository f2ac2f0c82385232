"""Launch one process per rank (locally, in an emulated cluster, or join a torchrun job).

Used by ``commsim calibrate`` and by live training.  ``launch``:

1. writes a spec file (worker ``"module:function"``, its JSON config, world size, timeouts) to
   ``out_dir`` and starts ``python -m commsim.calibrate.worker SPEC`` once per rank, each in its
   own process group (``start_new_session``) with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and
   thread counts in its environment.  Local mode: master 127.0.0.1 on a free port.  Emulated
   mode: rank r runs in node r via ``cluster.exec_argv``, master = node 0's address, and Gloo is
   pinned to the node's interface (GLOO_SOCKET_IFNAME).
2. watches the children (stderr goes to ``rank{r}.log``; rank 0's is relayed live as progress):
   as soon as one exits non-zero or is killed, it kills every other process group and raises
   ``RunFailed`` (``UserError`` when the rank reported one) naming the rank and its last stderr
   line.  Past ``timeout_s`` it kills them all and says which ranks were still running.
3. reads ``rank{r}.json`` (written atomically by each rank) and returns the per-rank dicts.

Never hangs: Gloo's own timeout (``collective_timeout_s``) bounds rendezvous and every
collective inside the ranks, and the parent's ``timeout_s`` bounds the whole run.  Children
are killed on every way out of ``launch`` (including KeyboardInterrupt and SIGTERM), and
die with the launcher if it is SIGKILLed (PR_SET_PDEATHSIG), so none is orphaned.

``from_env``/``run_from_env``: under torchrun the current process is the rank.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from commsim.errors import RunFailed, UserError
from commsim.files import atomic_write_text

if TYPE_CHECKING:  # the cluster module needs root tools only when used
    from commsim.calibrate.cluster import ClusterInfo

DEFAULT_COLLECTIVE_TIMEOUT_S = 30.0
POLL_S = 0.1
# After one rank fails, give the others this long to fail too, so the root cause (a rank that
# was killed) is reported rather than a peer's "connection reset".
SETTLE_S = 0.3
KILL_GRACE_S = 2.0
_C10_LOG_RE = re.compile(r"\[[IWEF]\d{4} \d")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class EnvRank:
    """This process's place in a torchrun (env://) job."""
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    local_world_size: int


def cpu_cores() -> int:
    """Cores this process may use (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_threads(ranks_per_host: int) -> int:
    """Threads per rank so that co-located ranks share the cores without oversubscription."""
    return max(1, cpu_cores() // max(1, ranks_per_host))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def from_env(environ: dict[str, str] | None = None) -> EnvRank | None:
    """The torchrun rank described by RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or None."""
    env = os.environ if environ is None else environ
    keys = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    if not all(env.get(k) for k in keys):
        return None
    try:
        rank, world, port = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["MASTER_PORT"])
        local = int(env.get("LOCAL_WORLD_SIZE") or 1)
    except ValueError:
        raise UserError("RANK, WORLD_SIZE, MASTER_PORT and LOCAL_WORLD_SIZE must be integers "
                        f"(got RANK={env['RANK']!r} WORLD_SIZE={env['WORLD_SIZE']!r} "
                        f"MASTER_PORT={env['MASTER_PORT']!r})") from None
    if not 0 <= rank < world or not 0 < port < 65536:
        raise UserError(f"RANK={rank} must be in 0..WORLD_SIZE-1={world - 1} and MASTER_PORT="
                        f"{port} in 1..65535")
    return EnvRank(rank, world, env["MASTER_ADDR"], port, local)


def run_from_env(worker: str, config: dict, env: EnvRank, *, out_dir: str | Path | None = None,
                 collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
                 threads_per_rank: int | None = None) -> dict:
    """Run ``worker`` as this torchrun rank; torchrun itself watches and kills the ranks."""
    from commsim.calibrate.worker import run_rank

    threads = threads_per_rank or int(os.environ.get("OMP_NUM_THREADS") or 0) \
        or default_threads(env.local_world_size)
    return run_rank(worker, config, rank=env.rank, world_size=env.world_size,
                    master_addr=env.master_addr, master_port=env.master_port,
                    timeout_s=collective_timeout_s, threads=threads, out_dir=out_dir)


def launch(worker: str, config: dict, *, nodes: int, emulate: "ClusterInfo | None" = None,
           timeout_s: float, out_dir: Path, master_port: int | None = None,
           threads_per_rank: int | None = None, master_addr: str | None = None,
           collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
           progress: IO[str] | None = None) -> list[dict]:
    """Run ``worker(rank, nodes, config)`` on ``nodes`` ranks; their dicts in rank order.

    ``master_addr`` overrides the rendezvous address (tests of a wrong address); ``progress``
    receives rank 0's stderr as it is written (None: sys.stderr)."""
    if nodes < 1:
        raise UserError(f"--nodes must be >= 1, got {nodes}")
    if emulate is not None and nodes > emulate.nodes:
        raise UserError(f"--nodes {nodes} needs {nodes} emulated nodes; the cluster has "
                        f"{emulate.nodes} (commsim cluster up --nodes {nodes})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for r in range(nodes):
        (out / f"rank{r}.json").unlink(missing_ok=True)
    threads = threads_per_rank or default_threads(nodes)
    if emulate is not None:
        addr = master_addr or emulate.addresses[0]
        port = master_port or 29500
    else:
        addr = master_addr or "127.0.0.1"
        port = master_port or free_port()
    spec = {"worker": worker, "config": config, "world_size": nodes, "out_dir": str(out),
            "collective_timeout_s": collective_timeout_s, "threads": threads}
    spec_path = out / "spec.json"
    atomic_write_text(spec_path, json.dumps(spec, allow_nan=False), force=True)
    children: list[_Child] = []
    try:
        with _terminate_raises():
            for r in range(nodes):
                children.append(_start(r, nodes, spec_path, out, addr, port, threads, emulate))
            _watch(children, timeout_s, progress if progress is not None else sys.stderr)
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


def _start(rank: int, world: int, spec_path: Path, out: Path, addr: str, port: int,
           threads: int, emulate: "ClusterInfo | None") -> _Child:
    env = dict(os.environ)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
               MASTER_ADDR=addr, MASTER_PORT=str(port), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    env.pop("LOCAL_WORLD_SIZE", None)
    argv = [sys.executable, "-m", "commsim.calibrate.worker", str(spec_path)]
    if emulate is not None:
        from commsim.calibrate import cluster

        env["GLOO_SOCKET_IFNAME"] = emulate.interface
        env["LOCAL_WORLD_SIZE"] = str(world)  # every namespace shares this host's cores
        argv = cluster.exec_argv(rank, argv, prefix=emulate.prefix)
    else:
        env["GLOO_SOCKET_IFNAME"] = "lo"
        env["LOCAL_WORLD_SIZE"] = str(world)
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
            time.sleep(SETTLE_S)
            failed = [c for c in children if c.proc.poll() not in (None, 0)]
            _relay(children[0], progress)
            raise _failure(failed)
        if all(c.proc.poll() == 0 for c in children):
            _relay(children[0], progress)
            return
        if time.monotonic() > deadline:
            running = [c.rank for c in children if c.proc.poll() is None]
            raise RunFailed(f"run timed out after {timeout_s:g} s; rank(s) "
                            f"{', '.join(map(str, running))} still running (killed)")
        time.sleep(POLL_S)


# Signals a process gets from outside (a user, the OOM killer, a scheduler).  A rank that dies by
# another one (SIGABRT, SIGSEGV) mostly crashed on its own, often as a consequence: Gloo aborts a
# rank (std::terminate) when a peer it was talking to vanished.
_SENT_SIGNALS = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _failure(failed: list[_Child]) -> Exception:
    # A rank killed from outside is the cause, then one that crashed by a signal; its peers'
    # errors are consequences.
    def precedence(c: _Child) -> int:
        rc = c.proc.returncode
        return 0 if rc < 0 and -rc in _SENT_SIGNALS else 1 if rc < 0 else 2

    cause = min(failed, key=precedence)
    rc = cause.proc.returncode
    how = (f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}")
    line = _last_line(cause.log)
    message = f"rank {cause.rank} {how}" + (f": {line}" if line else "")
    from commsim.calibrate.worker import EXIT_USER_ERROR

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
    # c10d's own log lines ("[W1122 02:55:53.61 socket.cpp:207] ...") are not the rank's error.
    lines = [ln for ln in lines if ln and not _C10_LOG_RE.match(ln)]
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
