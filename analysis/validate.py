"""Prediction vs measurement: run live training and the simulator on the same grid, compare.

Algorithm (``validate``):

1. Take a profile (``--profile``) or calibrate once at the start (on the emulated cluster at the
   first rate, or on local ranks over loopback).
2. For every link rate, every strategy and every node count of the grid: run ``commsim live``
   (real training, first iteration discarded, median over iterations of the slowest rank) and
   ``commsim predict`` with the cluster the live run really had: all ranks share this machine's
   cores (``shared_cpu_cores``) and slow each other as much as calibration measured when all
   of them computed at once (``cpu_efficiency`` at the run's batch), and the link is at that
   rate scaled by the efficiency the calibration measured (fitted bandwidth / shaped rate).
3. Each cell gets predicted, measured median and spread, and the signed error
   100·(predicted − measured)/measured.  The summary gives the median, 90th percentile and max of
   the absolute errors; ``passed`` is median <= tolerance.
4. With ``trace`` on the grid, every live rank also records its last timed iteration
   (``commsim live --trace``), the cell is predicted once more with its timeline, and the report
   carries both (``CellTimeline``): a trace of each cell with the predicted and the measured
   tracks side by side, and the rows of the report's predicted-vs-measured timeline pages.

The comparison functions are pure (they take numbers and return rows); only ``validate`` runs
anything.
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

from commsim.api import Scenario, predict
from commsim.profile import Profile
from commsim.spec import DEFAULT_GLOBAL_BATCH, DEFAULT_MODEL, MiB, measured_cpu_efficiency
from commsim.strategies import get_strategy
from commsim.units import fmt_time


@dataclass(frozen=True)
class ValidationGrid:
    """The cells to run: strategies x node counts (x link rates when emulated).

    rates_Bps:  emulated link rates; empty = local ranks over loopback (or a real cluster).
    what_if_rate_Bps: without emulated rates, the link rate the live cells really run at when
                it is not the profile's (a real cluster whose links were changed since it was
                calibrated): the predictions ask that rate, as ``predict --bandwidth`` would.
    iterations: timed live iterations per cell (the first, discarded, comes on top).
    sync_every, group_size, compression: the what-ifs ``live`` and ``predict`` both run.
    trace:      record each cell's last timed iteration live and predict its timeline.
    """
    strategies: tuple[str, ...] = ("ps", "ring", "ddp")
    nodes: tuple[int, ...] = (2, 3, 4)
    rates_Bps: tuple[float, ...] = ()
    iterations: int = 10
    global_batch: int = DEFAULT_GLOBAL_BATCH
    batch_per_rank: int | None = None
    bucket_mb: float = 25.0
    model: str | None = None
    data_dir: str | None = None
    timeout_s: float = 900.0
    sync_every: int = 1
    group_size: int | None = None
    compression: str | None = None
    what_if_rate_Bps: float | None = None
    trace: bool = False

    def live_kwargs(self, strategy: str) -> dict:
        """LiveConfig fields of one cell (``commsim.calibrate.live.LiveConfig(**...)``)."""
        kw = {"strategy": strategy, "global_batch": self.global_batch,
              "batch_per_rank": self.batch_per_rank, "bucket_mb": self.bucket_mb,
              "data_dir": self.data_dir, "sync_every": self.sync_every,
              "group_size": self.group_size, "compression": self.compression,
              # whole accumulation cycles: live times k passes per synchronised step
              "iterations": -(-self.iterations // self.sync_every) * self.sync_every,
              "trace_cycle": -1 if self.trace else None}   # the last timed cycle
        if self.model:
            kw["model"] = self.model
        return kw

    @property
    def variant(self) -> str:
        """The what-if in a few characters ("" for plain data parallelism)."""
        parts = [f"k={self.sync_every}"] if self.sync_every != 1 else []
        parts += [f"g={self.group_size}"] if self.group_size else []
        parts += [self.compression] if self.compression else []
        if self.model and self.model != DEFAULT_MODEL:   # another model than the seeds' VGG-11
            parts.append(self.model.rpartition(":")[2])
        return " ".join(parts)


@dataclass(frozen=True)
class CellTimeline:
    """One traced cell: its predicted iteration (a ``Result`` with intervals) and the live
    ranks' recorded one (``commsim.analysis.measured.MeasuredTimeline``)."""
    strategy: str
    nodes: int
    rate_Bps: float | None
    variant: str
    predicted: Any
    measured: Any

    @property
    def stem(self) -> str:
        """The cell's file name without extension: ``ddp_2nodes_100mbit``."""
        rate = "loopback" if not self.rate_Bps else f"{self.rate_Bps * 8 / 1e6:g}mbit"
        parts = [self.strategy, *self.variant.replace("=", "").split(), f"{self.nodes}nodes",
                 rate]
        return "_".join(parts)

    def rows(self) -> list[dict]:
        """Both timelines as flat Gantt rows, ``side`` "predicted" or "measured"."""
        from commsim.analysis.measured import timeline_rows as measured_rows
        from commsim.analysis.timeline import segment_rows, segments

        common = {"rate_Bps": self.rate_Bps, "variant": self.variant}
        p = self.predicted
        return (segment_rows(segments(p), strategy=self.strategy, nodes=self.nodes,
                             iteration_s=p.iteration_s, side="predicted", **common)
                + measured_rows(self.measured, side="measured", **common))


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[dict, ...]
    summary: dict
    profile_source: dict = field(default_factory=dict)
    timelines: tuple[CellTimeline, ...] = ()

    def to_dict(self) -> dict:
        out = {"rows": list(self.rows), "summary": self.summary, "profile": self.profile_source}
        if self.timelines:
            out["timelines"] = [row for cell in self.timelines for row in cell.rows()]
        return out


def error_pct(predicted_s: float, measured_s: float) -> float:
    """Signed error of a prediction, percent of the measurement (positive: predicted slower)."""
    if not measured_s > 0:
        return math.nan
    return 100.0 * (predicted_s - measured_s) / measured_s


def communication_free_compute_s(profile: Profile, nodes: int, scenario: Scenario) -> float:
    """The simulator's counterpart of live's DDP compute probe: every rank computing at once on
    the same cluster with no communication beside it.

    It is ring's compute on that cluster: ring all-reduces after backward, so its ranks compute
    together and no message, reduction or contention overlaps their compute; compression only
    changes the sync, so it is dropped."""
    return predict(profile, "ring", nodes, replace(scenario, compression=None)).compute_s


def compare(predicted: dict, measured: dict, *, rate_Bps: float | None = None,
            probe_compute_s: float | None = None) -> dict:
    """One row of the validation table from a ``predict --json`` and a ``live --json`` record.

    ``probe_compute_s``: where live timed compute apart (``Strategy.probed_compute``), the predicted
    compute defined the same way (``communication_free_compute_s``).  The compute/sync split of
    the row then compares like with like: exposed sync = iteration - that compute on both
    sides, so the slowdown of backward while buckets are in flight counts as sync, as live
    counts it; the simulator's own compute (with that slowdown) stays in
    ``predicted_compute_overlapped_s``."""
    row = {
        "strategy": measured["strategy"],
        "nodes": measured["nodes"],
        "rate_Bps": rate_Bps,
        "batch_per_rank": measured.get("batch_per_rank"),
        "predicted_s": predicted["iteration_s"],
        "measured_s": measured["iteration_s"],
        "measured_spread_s": measured.get("iteration_s_spread"),
        "error_pct": error_pct(predicted["iteration_s"], measured["iteration_s"]),
    }
    for key in ("compute_s", "comm_s", "exposed_comm_s", "bytes_sent_per_rank"):
        row[f"predicted_{key}"] = predicted.get(key)
        row[f"measured_{key}"] = measured.get(key)
    if probe_compute_s is not None:
        row["predicted_compute_overlapped_s"] = predicted.get("compute_s")
        row["predicted_compute_s"] = probe_compute_s
        row["predicted_exposed_comm_s"] = max(0.0, predicted["iteration_s"] - probe_compute_s)
    row.update(error_parts(row))
    return row


def error_parts(row: dict) -> dict:
    """Where the error comes from: the compute difference and the exposed-sync difference, each
    in percentage points of the measured iteration, adding up to ``error_pct``.

    Exposed sync is iteration - compute on both sides here, not the records' own
    ``exposed_comm_s``: live takes every time as its maximum over ranks, so its exposed sync
    can come from another rank than its compute (with DDP's per-rank compute probes 10-15%
    apart, the parts of a cell then summed to several times its error)."""
    measured = row.get("measured_s")
    p_c, m_c, p_it = row.get("predicted_compute_s"), row.get("measured_compute_s"), \
        row.get("predicted_s")
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (p_c, m_c, p_it, measured))
    if not (ok and measured > 0):
        return {"compute_error_pp": None, "sync_error_pp": None}
    compute = 100.0 * (p_c - m_c) / measured
    sync = 100.0 * ((p_it - p_c) - (measured - m_c)) / measured
    return {"compute_error_pp": compute, "sync_error_pp": sync}


def summarize(rows: Sequence[dict], tolerance_pct: float) -> dict:
    errors = sorted(abs(r["error_pct"]) for r in rows if math.isfinite(r["error_pct"]))
    if not errors:
        return {"cells": len(rows), "median_abs_error_pct": math.nan,
                "p90_abs_error_pct": math.nan, "max_abs_error_pct": math.nan,
                "tolerance_pct": tolerance_pct, "passed": False}
    p90 = errors[min(len(errors) - 1, math.ceil(0.9 * len(errors)) - 1)]
    median = statistics.median(errors)
    return {"cells": len(rows), "median_abs_error_pct": median, "p90_abs_error_pct": p90,
            "max_abs_error_pct": errors[-1], "tolerance_pct": tolerance_pct,
            "passed": median <= tolerance_pct}


def live_scenario(profile: Profile, grid: ValidationGrid, nodes: int, rate_Bps: float | None,
                  threads_per_rank: int | None, cores: float) -> Scenario:
    """The cluster a live run on this machine really is: every rank shares ``cores``, each
    with the ``threads_per_rank`` compute threads the run gave it (more nodes than calibrated
    on the same cores get fewer each; None: as calibrated)."""
    bandwidth = None
    calibrated_rate = profile.metadata.get("emulated_rate_Bps")
    if rate_Bps is not None:
        # Carry the calibrated efficiency (Gloo over tbf reaches ~96% of the shaped rate).
        efficiency = (profile.network.bandwidth_Bps / calibrated_rate) if calibrated_rate else 1.0
        bandwidth = rate_Bps * min(1.0, efficiency)
    batch = grid.batch_per_rank or grid.global_batch // nodes
    cap = max(1, round(grid.bucket_mb * MiB))
    return Scenario(global_batch=None if grid.batch_per_rank else grid.global_batch,
                    batch_per_rank=grid.batch_per_rank,
                    # live passes bucket_cap_mb explicitly, which caps DDP's first bucket too
                    bucket_bytes=cap, first_bucket_bytes=cap,
                    bandwidth_Bps=bandwidth, shared_cpu_cores=cores,
                    threads_per_rank=threads_per_rank,
                    cpu_efficiency=measured_cpu_efficiency(profile, batch),
                    sync_every=grid.sync_every, group_size=grid.group_size,
                    compression=grid.compression)


def validate(grid: ValidationGrid, profile: Profile, *, tolerance_pct: float = 10.0,
             run_live: Callable[..., dict] | None = None,
             cluster_for_rate: Callable[[float, int], Any] | None = None,
             progress: Callable[[str], None] = lambda _msg: None,
             cores: float | None = None) -> ValidationReport:
    """Run every cell of ``grid`` live and predicted; see the module docstring.  ``cores``:
    the cores the live runs share (None: this machine's; a re-prediction of runs measured on
    another machine gives that one's)."""
    if run_live is None:
        from commsim.calibrate.live import LiveConfig, run_live as _run

        def run_live(strategy, nodes, emulate):
            return _run(LiveConfig(**grid.live_kwargs(strategy)), nodes=nodes, emulate=emulate,
                        timeout_s=grid.timeout_s)
    cores = float(cores or os.cpu_count() or 1)
    rows, timelines = [], []
    for rate in (grid.rates_Bps or (None,)):
        emulate = cluster_for_rate(rate, max(grid.nodes)) if rate is not None else None
        for strategy in grid.strategies:
            for nodes in grid.nodes:
                progress(f"{strategy} on {nodes} nodes"
                         + (f" at {rate * 8 / 1e6:g} Mbit/s" if rate else ""))
                measured = run_live(strategy, nodes, emulate)
                asked = rate if rate is not None else grid.what_if_rate_Bps
                sc = live_scenario(profile, grid, nodes, asked,
                                   measured.get("threads_per_rank"), cores)
                result = predict(profile, strategy, nodes, sc, timeline=grid.trace)
                predicted = result.to_dict()
                probe = (communication_free_compute_s(profile, nodes, sc)
                         if get_strategy(strategy).probed_compute else None)
                rows.append({**compare(predicted, measured, rate_Bps=rate,
                                       probe_compute_s=probe),
                             "variant": grid.variant})
                if grid.trace:
                    from commsim.analysis.measured import from_live

                    timelines.append(CellTimeline(strategy, nodes, rate, grid.variant,
                                                  predicted=result, measured=from_live(measured)))
    source = {k: profile.metadata.get(k) for k in ("source", "created", "command", "nodes",
                                                     "emulated_rate_Bps")}
    return ValidationReport(rows=tuple(rows), summary=summarize(rows, tolerance_pct),
                            profile_source=source, timelines=tuple(timelines))


def rows_table(rows: Iterable[dict]) -> list[dict]:
    """Rows for the text table: what a reader needs, in order."""
    out = []
    for r in rows:
        parts = error_parts(r)
        out.append({"strategy": " ".join(filter(None, (r["strategy"], r.get("variant")))),
                    "nodes": r["nodes"],
                    "rate": "loopback" if not r["rate_Bps"] else f"{r['rate_Bps'] * 8 / 1e6:g}mbit",
                    "predicted_s": r["predicted_s"], "measured_s": r["measured_s"],
                    "spread_s": r["measured_spread_s"], "error_pct": r["error_pct"], **parts})
    return out


def _pp(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} pp"


def _spread(value: float | None) -> str:
    return "-" if value is None else fmt_time(value)


def table_columns() -> tuple:
    """``commsim.table.text_table`` columns for ``rows_table`` rows (validate and bench/fidelity
    print the same table): the error, and how much of it is compute and how much exposed sync
    (percentage points of the measured iteration)."""
    return (("strategy", "strategy", str), ("nodes", "nodes", str), ("link", "rate", str),
            ("predicted", "predicted_s", fmt_time), ("measured", "measured_s", fmt_time),
            ("spread", "spread_s", _spread),
            ("error", "error_pct", lambda v: f"{v:+.1f}%"),
            ("of it compute", "compute_error_pp", _pp), ("sync", "sync_error_pp", _pp))
