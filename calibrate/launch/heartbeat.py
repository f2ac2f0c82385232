"""Ranks that wait for each other longer than a collective's timeout, yet notice a dead peer.

A calibration's ranks often wait minutes for one another (rank 0 timing compute alone, a slow
rank finishing its repetitions), far longer than the collective timeout that makes a dead rank or
a pulled cable show within seconds.  A ``heartbeat`` block lets them do both: each rank's thread
all-reduces "my block is done" on a group of its own every ``period_s`` until all are.
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import Iterator

from commsim.errors import RunFailed

# How often ranks waiting for a long solo phase check that the others are alive.
HEARTBEAT_S = 1.0


@dataclass(frozen=True)
class Beat:
    """What a ``heartbeat`` block sees: ``finish()`` says this rank's part is done before the
    block ends; ``everyone_finished()`` whether every rank has said so (within a period)."""
    _finished: threading.Event
    _everyone: threading.Event

    def finish(self) -> None:
        self._finished.set()

    def everyone_finished(self) -> bool:
        return self._everyone.is_set()


@contextlib.contextmanager
def heartbeat(group, timeout_s: float, period_s: float = HEARTBEAT_S) -> Iterator[Beat]:
    """Run the block on every rank of ``group``, however long each rank takes, without ever
    waiting longer than the group's (short) timeout for a message.

    A thread on every rank all-reduces (MIN) "my block is done" every ``period_s`` until all
    are, so the ranks leave together (a barrier) and a rank that dies or loses its link stops
    the others' heartbeats within ``timeout_s`` (the group's timeout).  A rank whose heartbeat
    fails exits at once: its main thread may be busy measuring for minutes."""
    import torch
    import torch.distributed as dist

    finished, everyone = threading.Event(), threading.Event()
    if dist.get_world_size(group) < 2:
        everyone.set()
        yield Beat(finished, everyone)
        return
    # Several beats per timeout, so a rank waiting on a slow peer's sleep never times out.
    period = min(period_s, timeout_s / 4)

    def beat() -> None:
        try:
            while True:
                flag = torch.tensor([1 if finished.is_set() else 0], dtype=torch.int32)
                dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
                if int(flag) == 1:
                    everyone.set()
                    return
                finished.wait(period)  # wakes at once when this rank's block ends
        except BaseException as exc:  # noqa: BLE001 - any failure ends this rank
            from commsim.calibrate.launch.worker import EXIT_FAILED, print_last_line

            rank = dist.get_rank()
            print_last_line(rank, RunFailed(f"rank {rank}: heartbeat with the other ranks "
                                            f"failed: {exc}"))
            os._exit(EXIT_FAILED)

    thread = threading.Thread(target=beat, name="commsim-heartbeat", daemon=True)
    thread.start()
    try:
        yield Beat(finished, everyone)
    finally:
        finished.set()
        thread.join()
