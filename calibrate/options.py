"""What ``commsim calibrate`` is asked to do (``CalibrateOptions``), and the defaults it fills in.

The options are the run's whole description: ``runner.run`` validates them, the samples log's
fingerprint is taken from them (``samples``), and the profile records the command they came from
(``public_command``: paths reduced to file names, so a profile names no machine's folders).
"""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from commsim.calibrate import collectives as C
from commsim.calibrate import compute as K
from commsim.calibrate.launch import DEFAULT_COLLECTIVE_TIMEOUT_S
from commsim.calibrate.models import VGG11_FACTORY

DEFAULT_BATCH_SIZES = (16, 32, 64, 128, 256, 512)
QUICK_BATCH_SIZES = (4, 8)
DEFAULT_SIZES = C.log_sizes(4, 64 << 20, 4)
QUICK_SIZES = C.log_sizes(4, 256 << 10, 16)

# Options whose value is a path on the machine that ran the command.
PATH_OPTIONS = ("--out", "--data", "--profile", "--network")


def public_command(argv: list[str]) -> str:
    """The command as the profile's metadata records it: every path reduced to its file name,
    so a profile says how it was made without naming a machine's folders."""
    out, after_path = [], False
    for arg in argv:
        name, eq, value = arg.partition("=")
        if after_path:
            arg = Path(arg).name
        elif eq and name in PATH_OPTIONS:
            arg = f"{name}={Path(value).name}"
        after_path = arg in PATH_OPTIONS
        out.append(arg)
    return shlex.join(out)


@dataclass(frozen=True)
class CalibrateOptions:
    """Everything ``commsim calibrate`` was asked to do."""
    out: Path
    nodes: int = 2
    emulate_Bps: float | None = None
    quick: bool = False
    force: bool = False
    resume: bool = False
    model: str = VGG11_FACTORY
    input_shape: tuple[int, ...] = (3, 32, 32)
    batch_sizes: tuple[int, ...] | None = None
    sizes_bytes: tuple[int, ...] | None = None
    timeout_s: float = 900.0
    collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S
    threads_per_rank: int | None = None
    # Co-runners load each host to this many times its cores (the oversubscribed phase); None:
    # phases.oversubscribed.OVERSUBSCRIBE, or 0 (off) with --quick.
    oversubscribe: float | None = None
    # Which emulated cluster --emulate uses (tests use their own, never a user's "csim").
    cluster_prefix: str = "csim"
    # Timed repetitions of every batch size alone; None: ``ComputeSpec``'s rule (3, 2 past 2 s
    # an iteration, more for fast sizes), or 2 with --quick.
    compute_reps: int | None = None
    command: str = field(default_factory=lambda: public_command(["commsim", *sys.argv[1:]]))

    @property
    def batches(self) -> tuple[int, ...]:
        return self.batch_sizes or (QUICK_BATCH_SIZES if self.quick else DEFAULT_BATCH_SIZES)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.sizes_bytes or (QUICK_SIZES if self.quick else DEFAULT_SIZES)

    @property
    def compute(self) -> dict:
        """``ComputeSpec`` fields that differ from its defaults."""
        n = self.compute_reps
        if n:
            # Every size at least n times, slow ones included; fast ones still fill
            # ``min_measure_s`` (up to ``max_reps``, raised to n if below).
            return {"reps": n, "min_reps": n, "max_reps": max(K.ComputeSpec.max_reps, n)}
        return {"reps": 2} if self.quick else {}
