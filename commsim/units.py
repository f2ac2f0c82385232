"""Unit parsing and formatting. Units are converted once, at the boundary (CLI, profile load).

Rates follow tc(8) spelling: ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` are bits per
second (decimal: 1mbit = 10**6 bit/s); ``Bps``, ``KBps``, ``MBps``, ``GBps`` are bytes per second
(decimal).  Everything inside commsim is bytes per second (``*_Bps``) and seconds (``*_s``).
"""
from __future__ import annotations

import math
import re

_RATE_UNITS = {
    "bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
    "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12,
}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_SIZE_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
               "kib": 1024, "mib": 1024**2, "gib": 1024**3}
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


class UnitError(ValueError):
    """A quantity that cannot be parsed; the message says what was expected."""


def _parse(text: str, units: dict[str, float], what: str, default_unit: str | None) -> float:
    m = re.fullmatch(_NUM + r"\s*([A-Za-z/]*)", str(text).strip())
    if not m:
        raise UnitError(f"cannot read {what} {text!r}; expected a number and a unit, e.g. "
                        f"{_example(what)}")
    value, unit = float(m.group(1)), m.group(2).lower().replace("/s", "ps")
    if not unit:
        if default_unit is None:
            raise UnitError(f"{what} {text!r} needs a unit, e.g. {_example(what)}")
        unit = default_unit
    if unit not in units:
        raise UnitError(f"unknown unit {m.group(2)!r} in {what} {text!r}; "
                        f"use one of {', '.join(sorted(units))}")
    out = value * units[unit]
    if not math.isfinite(out) or out <= 0:
        raise UnitError(f"{what} must be positive and finite, got {text!r}")
    return out


def _example(what: str) -> str:
    return {"rate": "1gbit or 125MBps", "time": "50us or 0.2ms", "size": "25MiB"}[what]


def parse_rate_Bps(text: str) -> float:
    """'1gbit' -> 125e6 bytes/s.  A bare number is refused: bits or bytes must be explicit."""
    return _parse(text, _RATE_UNITS, "rate", None)


def parse_time_s(text: str) -> float:
    """'50us' -> 5e-5 s.  A bare number is seconds."""
    return _parse(text, _TIME_UNITS, "time", "s")


def parse_size_bytes(text: str) -> float:
    """'25MiB' -> 26214400.  A bare number is bytes."""
    return _parse(text, _SIZE_UNITS, "size", "b")


def tc_rate(bandwidth_Bps: float) -> str:
    """Bytes/s -> a rate string tc understands exactly (whole bits per second)."""
    return f"{round(bandwidth_Bps * 8)}bit"


def fmt_rate(bandwidth_Bps: float) -> str:
    bits = bandwidth_Bps * 8
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits:.3g} bit/s"


def fmt_time(seconds: float) -> str:
    if seconds >= 1e6:
        return f"{seconds:.3g} s"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def fmt_roughly(seconds: float) -> str:
    """A duration to a user's scale, for an estimate: "40 s", "12 minutes", "3 hours"."""
    for unit, scale, up_to in (("s", 1, 90), ("minutes", 60, 90 * 60),
                               ("hours", 3600, 48 * 3600), ("days", 86400, math.inf)):
        if seconds < up_to:
            return f"{max(1, round(seconds / scale))} {unit}"
    return f"{seconds:.3g} s"                  # (a NaN)


def fmt_bytes(n: float) -> str:
    if n >= 1024**5:
        return f"{n:.3g} B"
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"
