"""Predicted vs measured: read a validation result (written by ``commsim validate``).

The file is a JSON list of rows (or an object whose ``rows`` is that list); each row has at
least ``strategy, nodes, predicted_s, measured_s, measured_spread_s, error_pct``.  Extra keys are
kept.  Anything else is a one-line UserError naming the file, the row and the key.  A traced
validation (``commsim validate --trace``) also holds ``timelines``: both sides' Gantt rows of
every cell (``load_validation_extras``).
"""
from __future__ import annotations

import math
from pathlib import Path

from commsim.errors import UserError
from commsim.files import read_json


class Index:
    """A required key's kind: an integer >= 0 (a rank)."""


KIND_WORDS = {str: "a name", int: "an integer >= 1", Index: "an integer >= 0"}
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
        elif kind in (int, Index):
            ok = (isinstance(value, int) and not isinstance(value, bool)
                  and value >= (1 if kind is int else 0))
        else:
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  and math.isfinite(value))
        if not ok:
            raise UserError(f"{where}: row {i} '{key}' must be "
                            f"{KIND_WORDS.get(kind, 'a number')}, got {value!r}")
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


TIMELINE_REQUIRED = {"strategy": str, "nodes": int, "side": str, "rank": Index, "kind": str,
                     "name": str, "start_s": float, "end_s": float, "iteration_s": float}
SIDES = ("predicted", "measured")


def load_validation_extras(path: str | Path) -> tuple[float | None, list[dict]]:
    """The tolerance the validation was judged by (None if the file does not say) and the
    traced cells' timeline rows (``commsim validate --trace``; [] if it was not traced)."""
    p = Path(path)
    data = read_json(p, "--validation")
    if not isinstance(data, dict):
        return None, []
    tolerance = (data.get("summary") or {}).get("tolerance_pct")
    if not (isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool)
            and math.isfinite(tolerance) and tolerance >= 0):
        tolerance = None
    raw = data.get("timelines") or []
    if not isinstance(raw, list):
        raise UserError(f"--validation {p}: 'timelines' must be a list of rows")
    rows = []
    for i, row in enumerate(raw):
        checked = _check(row, i, f"--validation {p} timelines", TIMELINE_REQUIRED)
        if checked["side"] not in SIDES:
            raise UserError(f"--validation {p} timelines: row {i} 'side' must be predicted or "
                            f"measured, got {checked['side']!r}")
        rows.append(checked)
    return tolerance, rows


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
