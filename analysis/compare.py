"""Predicted vs measured: read a validation result (written by ``commsim validate``).

The file is a JSON list of rows (or an object whose ``rows`` is that list); each row has at
least ``strategy, nodes, predicted_s, measured_s, measured_spread_s, error_pct``.  Extra keys are
kept.  Anything else is a one-line UserError naming the file, the row and the key.
"""
from __future__ import annotations

import math
from pathlib import Path

from commsim.errors import UserError
from commsim.files import read_json

REQUIRED = {"strategy": str, "nodes": int, "predicted_s": float, "measured_s": float,
            "measured_spread_s": float, "error_pct": float}


def _check(row, i: int, where: str, required: dict = REQUIRED) -> dict:
    if not isinstance(row, dict):
        raise UserError(f"{where}: row {i} must be an object, got {type(row).__name__}")
    for key, kind in required.items():
        if key not in row:
            raise UserError(f"{where}: row {i} has no '{key}' (need {', '.join(required)})")
        value = row[key]
        if kind is str:
            ok = isinstance(value, str) and value != ""
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        else:
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  and math.isfinite(value))
        if not ok:
            raise UserError(f"{where}: row {i} '{key}' must be "
                            f"{ {str: 'a name', int: 'an integer >= 1'}.get(kind, 'a number') }, "
                            f"got {value!r}")
    return dict(row)


def load_validation(path: str | Path) -> list[dict]:
    """The validated rows, sorted by (strategy, nodes) for stable output."""
    p = Path(path)
    data = read_json(p, "--validation")
    if isinstance(data, dict) and "rows" in data:
        data = data["rows"]
    if not isinstance(data, list) or not data:
        raise UserError(f"--validation {p}: expected a non-empty JSON list of rows")
    rows = [_check(row, i, f"--validation {p}") for i, row in enumerate(data)]
    return sorted(rows, key=lambda r: (r["strategy"], r["nodes"]))


def error_summary(rows: list[dict]) -> dict:
    """Mean and worst absolute error over the rows, in percent."""
    errs = [abs(r["error_pct"]) for r in rows]
    return {"rows": len(rows), "mean_abs_error_pct": sum(errs) / len(errs),
            "max_abs_error_pct": max(errs)}


TRAFFIC_REQUIRED = {"workers": int, "sync_every": int, "epochs": int, "measured_bytes": float,
                    "predicted_bytes": float, "accuracy_mean": float, "accuracy_min": float,
                    "accuracy_max": float}


def load_traffic_accuracy(path: str | Path) -> list[dict]:
    """The rows of ``bench/traffic_accuracy``'s JSON (its ``rows``), checked like a validation."""
    p = Path(path)
    data = read_json(p, "--traffic-accuracy")
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise UserError(f"--traffic-accuracy {p}: expected bench/traffic_accuracy's JSON, an "
                        "object with a non-empty 'rows' list")
    return [_check(row, i, f"--traffic-accuracy {p}", TRAFFIC_REQUIRED)
            for i, row in enumerate(rows)]
