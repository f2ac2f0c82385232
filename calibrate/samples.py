"""The samples log ``<out>.samples.jsonl``: every measurement on disk the moment it is taken.

A header line ``{"kind": "header", "fingerprint": ..., "command": ...}``, then one JSON record per
measurement, appended and fsynced by rank 0 as soon as it has it, so a run that is killed keeps
everything it measured.  ``--resume`` reads the records back (``open_samples``) when the
fingerprint (the settings that change what is measured) is the same, and the calibration skips
what they cover (``phases.loop``); a partial last line, from a kill mid-write, is dropped.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from commsim.errors import UserError
from commsim.files import atomic_write_text, parse_json, read_text

if TYPE_CHECKING:
    from commsim.calibrate.options import CalibrateOptions

SAMPLES_SUFFIX = ".samples.jsonl"


def samples_path(out: Path) -> Path:
    return out.with_name(out.name + SAMPLES_SUFFIX)


class SampleLog:
    """Append-only JSON lines, flushed and fsynced per record so a killed run keeps them."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _fingerprint(opts: "CalibrateOptions", world_size: int) -> dict:
    return {"nodes": world_size, "emulated_rate_Bps": opts.emulate_Bps, "model": opts.model,
            "input_shape": list(opts.input_shape), "batch_sizes": list(opts.batches),
            "sizes_bytes": list(opts.sizes), "quick": opts.quick,
            "oversubscribe": opts.oversubscribe,
            # Only when set: logs taken before the option existed still resume.
            **({"compute_reps": opts.compute_reps} if opts.compute_reps else {})}


def open_samples(opts: "CalibrateOptions", world_size: int) -> list[dict]:
    """Start the samples log (or, with --resume, read its records); the records to reuse."""
    path = samples_path(opts.out)
    fingerprint = _fingerprint(opts, world_size)
    if opts.resume and path.exists():
        text = read_text(path, "samples log", max_bytes=1024**3)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        rows = []
        for i, line in enumerate(lines):
            try:
                rows.append(parse_json(line, f"{path} line {i + 1}"))
            except UserError:
                if i < len(lines) - 1:
                    raise
                # A run killed mid-write leaves a partial last line: drop it, keep the rest.
        if not rows or rows[0].get("kind") != "header":
            raise UserError(f"{path} is not a commsim samples log (no header line)")
        if rows[0].get("fingerprint") != fingerprint:
            raise UserError(f"{path} was taken with different settings "
                            f"({rows[0].get('fingerprint')}); rerun with the same options or "
                            f"--force to start over")
        return rows[1:]
    if path.exists() and not opts.force:
        raise UserError(f"{path} exists (samples of an earlier run): pass --resume to continue "
                        f"it or --force to start over")
    atomic_write_text(path, json.dumps({"kind": "header", "fingerprint": fingerprint,
                                        "command": opts.command}) + "\n", force=True)
    return []
