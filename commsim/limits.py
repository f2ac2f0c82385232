"""The physical range of every quantity a user gives: outside it the model means nothing.

One table, checked where a quantity enters the model (``spec`` for a run, ``api`` for the calls
that bypass a run), so the CLI and the Python API refuse the same inputs with the same message,
and no input that looks valid reaches a formula that would overflow, divide to zero or print
"0 bit/s".  The ranges are wide: far past any real cluster on both sides, but narrow enough that
every figure the model prints stays a finite, representable number.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from commsim.errors import UserError
from commsim.units import fmt_bytes, fmt_rate, fmt_time


def _count(value: float) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


@dataclass(frozen=True)
class Bound:
    """A closed range ``[lo, hi]`` of one quantity, with the formatter of its unit."""
    what: str
    lo: float
    hi: float
    fmt: Callable[[float], str] = _count

    def check(self, value, name: str | None = None):
        """``value`` if it is a finite number in range, else a UserError naming the range."""
        label = name or self.what
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{label} must be a number, got {value!r}")
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            shown = self.fmt(value) if math.isfinite(value) else repr(value)
            raise UserError(f"{label} {shown} is outside the range the model covers, "
                            f"{self.fmt(self.lo)} to {self.fmt(self.hi)}")
        return value


def _ratio(value: float) -> str:
    return f"{value:g}x"


def _time(value: float) -> str:
    return fmt_time(value) if value else "0 s"


def _cores(value: float) -> str:
    return f"{value:g} cores"


# Links: a 1 kbit/s modem to a 10 Tbit/s bundle; latency up to 10 s (a satellite hop is 0.3 s).
LINK_RATE_BPS = Bound("link rate", 1e3 / 8, 1e13 / 8, fmt_rate)
LATENCY_S = Bound("latency", 0.0, 10.0, _time)
# Messages, buckets and tensors: a byte to a tebibyte.
SIZE_BYTES = Bound("size", 1, 2**40, fmt_bytes)
BUCKET_MIB = Bound("--bucket-mb", SIZE_BYTES.lo / 2**20, SIZE_BYTES.hi / 2**20,
                   lambda v: f"{v:.3g} MiB")
# Samples in one iteration, per rank or over all ranks.
SAMPLES = Bound("samples per iteration", 1, 2**24)
# Machines and ranks: a million ranks is past the largest training runs.
HOSTS = Bound("nodes", 1, 2**20)
RANKS = Bound("ranks", 1, 2**20)
RANKS_PER_HOST = Bound("ranks per host", 1, 1024)
CORES = Bound("cores", 0.01, 2**16, _cores)
# A rank computing 1000x faster or slower than calibrated.
COMPUTE_FACTOR = Bound("compute factor", 1e-3, 1e3, _ratio)
SYNC_EVERY = Bound("--sync-every", 1, 10**6)
# Seconds a run may take before it is abandoned: a week.
TIMEOUT_S = Bound("timeout", 1.0, 7 * 24 * 3600.0, _time)
