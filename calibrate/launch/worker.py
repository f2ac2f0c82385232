"""One rank of a launched run: ``python -m commsim.calibrate.launch.worker SPEC.json``.

1. Read the spec written by ``spawn.launch`` (worker name, config, world size, master
   address/port, timeouts, output folder); the rank comes from ``RANK``.
2. Pin the thread count (torch and OMP) before any work, so co-located ranks do not oversubscribe.
3. ``init_process_group("gloo")`` with an explicit timeout (which also bounds every collective);
   failures are turned into one line that names the master address and port.
4. Call ``fn(rank, world_size, config)`` and write its dict atomically to ``rank{r}.json``.
5. Any error: one line ``rank R: ...`` as the last stderr line, exit 2 (user error) or 1.

The same ``run_rank`` also runs in-process under torchrun (``torchrun.run_from_env``).
"""
from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path

from commsim.calibrate.launch.settings import runtime_info, set_threads
from commsim.errors import RunFailed, UserError
from commsim.files import atomic_write_text

EXIT_USER_ERROR = 2
EXIT_FAILED = 1


def _init_error(exc: BaseException, rank: int, addr: str, port: int, timeout_s: float):
    """Classify a failed rendezvous into one line naming the address and port."""
    text = " ".join(str(exc).split())
    low = text.lower()
    if "address already in use" in low or "errno 98" in low:
        return UserError(f"rank {rank}: cannot listen on master port {addr}:{port}: the port is "
                         f"in use; pick another master port")
    if "cannot assign requested address" in low or "errno 99" in low:
        return UserError(f"rank {rank}: master address {addr} is not an address of this host "
                         f"(rank 0 must run where MASTER_ADDR points)")
    if "timed out" in low or "timeout" in low or "connect" in low or "refused" in low \
            or "unreachable" in low:
        return RunFailed(f"rank {rank}: rendezvous with master {addr}:{port} failed within "
                         f"{timeout_s:g} s ({text[:160]}); is the address right and rank 0 up?")
    return RunFailed(f"rank {rank}: init_process_group via {addr}:{port} failed: {text[:200]}")


def check_master(rank: int, addr: str, port: int, timeout_s: float) -> None:
    """Fail within ``timeout_s`` (one line naming the address) when the master is unreachable.

    torch's TCPStore retries a failed connect once more after its whole timeout (plus a random
    delay), so a wrong MASTER_ADDR took 2-3x the timeout (81 s at 30 s) to be reported.  Rank 0
    only checks that the address is one of this host's (the store listens there); the others
    retry a plain TCP connect until the master answers or the deadline passes."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    if rank == 0:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((addr, 0))
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise UserError(f"rank 0: master address {addr} is not an address of this "
                                    f"host (rank 0 must run where MASTER_ADDR points)") from None
                if isinstance(exc, socket.gaierror):
                    raise UserError(f"rank 0: master address {addr!r} does not resolve: "
                                    f"{exc.strerror}") from None
        return
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, min(left, 5.0))):
                return
        except socket.gaierror as exc:
            raise UserError(f"rank {rank}: master address {addr!r} does not resolve: "
                            f"{exc.strerror}") from None
        except OSError as exc:
            if time.monotonic() + 0.2 >= deadline:
                raise RunFailed(f"rank {rank}: master {addr}:{port} did not answer within "
                                f"{timeout_s:g} s ({exc.strerror or exc}); is the address right "
                                f"and rank 0 up?") from None
        time.sleep(0.2)


def run_rank(worker: str, config: dict, *, rank: int, world_size: int, master_addr: str,
             master_port: int, timeout_s: float, threads: int | None = None,
             out_dir: str | Path | None = None) -> dict:
    """Join the Gloo group, run ``worker``, write ``rank{r}.json``; the worker's dict."""
    import torch.distributed as dist

    from commsim.calibrate.models import load_factory

    fn = load_factory(worker)
    runtime = set_threads(threads) if threads else runtime_info()
    if world_size > 1:
        check_master(rank, master_addr, master_port, timeout_s)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://{master_addr}:{master_port}",
                                rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
    except Exception as exc:  # torch raises several unrelated types for the same failures
        raise _init_error(exc, rank, master_addr, master_port, timeout_s) from None
    try:
        result = fn(rank, world_size, config)
        if not isinstance(result, dict):
            raise TypeError(f"worker {worker} returned {type(result).__name__}, not a dict")
        if out_dir is not None:
            envelope = {"rank": rank, "world_size": world_size, "runtime": runtime,
                        "result": result}
            atomic_write_text(Path(out_dir) / f"rank{rank}.json",
                              json.dumps(envelope, allow_nan=False), force=True)
        return result
    finally:
        dist.destroy_process_group()


def selftest(rank: int, world_size: int, config: dict) -> dict:
    """A tiny worker: all-reduce rank ids ``rounds`` times (checking the sum each time).

    ``die_rank``/``die_after`` make that rank SIGKILL itself after that many rounds, and
    ``sleep_s`` pauses between rounds: the launcher's failure handling is tested with it."""
    import torch
    import torch.distributed as dist

    expected = world_size * (world_size - 1) / 2
    for i in range(int(config.get("rounds", 3))):
        if rank == config.get("die_rank") and i >= int(config.get("die_after", 0)):
            os.kill(os.getpid(), signal.SIGKILL)
        t = torch.tensor([float(rank)])
        dist.all_reduce(t)
        if float(t) != expected:
            raise RunFailed(f"rank {rank}: all_reduce gave {float(t)}, expected {expected}")
        time.sleep(float(config.get("sleep_s", 0.0)))
    return {"rank": rank, "world_size": world_size, "sum": expected, **runtime_info()}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m commsim.calibrate.launch.worker SPEC.json", file=sys.stderr)
        return EXIT_USER_ERROR
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    rank = int(os.environ["RANK"])
    try:
        run_rank(spec["worker"], spec["config"], rank=rank, world_size=spec["world_size"],
                 master_addr=os.environ["MASTER_ADDR"], master_port=int(os.environ["MASTER_PORT"]),
                 timeout_s=spec["collective_timeout_s"], threads=spec.get("threads"),
                 out_dir=spec["out_dir"])
    except KeyboardInterrupt:
        return 130
    except UserError as exc:
        print_last_line(rank, exc)
        return EXIT_USER_ERROR
    except BaseException as exc:  # the parent shows the last line; keep it one line
        if os.environ.get("COMMSIM_WORKER_TRACEBACK"):
            import traceback
            traceback.print_exc()
        print_last_line(rank, exc)
        return EXIT_FAILED
    return 0


# Gloo/c10d prefix their messages with the C++ source location: noise in a one-line error.
_SOURCE_RE = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\]\s*")


def print_last_line(rank: int, exc: BaseException) -> None:
    """The rank's error as one stderr line (the launcher reports a failed rank's last line)."""
    text = _SOURCE_RE.sub("", " ".join(str(exc).split())) or type(exc).__name__
    if "timed out waiting" in text.lower():
        text += " (no answer from a peer within the collective timeout: a rank died or a link " \
                "is down)"
    if not text.startswith(f"rank {rank}"):
        text = f"rank {rank}: {type(exc).__name__}: {text}"
    print(text, file=sys.stderr, flush=True)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    if code == 0:
        # Out without the interpreter's finalization: the rank's result is written and its
        # process group destroyed, and finalizing torch's objects while Gloo's threads still
        # hold some can abort the process ("terminate called without an active exception")
        # after a good run.  (A failing rank exits as before: how long its peers take to
        # follow is how the launcher tells which failed first.)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    sys.exit(code)
