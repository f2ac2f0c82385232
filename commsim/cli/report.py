"""commsim report: the multi-page PDF (plus CSV/JSON tables) from a profile and a validation."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commsim.cli import options as o
from commsim.spec import DEFAULT_GLOBAL_BATCH
from commsim.strategies import SEED_STRATEGIES


def register(app: typer.Typer) -> None:
    app.command(help="Write a PDF report: scaling, speedup table, compute vs communication, "
                     "bandwidth, timelines, calibration fits, compute vs batch and (with "
                     "--validation) predicted vs measured; --csv-dir/--json-dir add every "
                     "table.")(report)


def _ints(text: str, option: str) -> tuple[int, ...]:
    from commsim.errors import UserError
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError:
        raise UserError(f"{option} takes comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1:
        raise UserError(f"{option} must list integers >= 1, got {text!r}")
    return values


@o.with_scenario(("bucket_mb", "bandwidth", "latency", "ranks_per_host", "cores_per_host",
                  "shared_cpu_cores"))
def report(
    out: Path = typer.Option(..., "--out", dir_okay=False, help="PDF file to write."),
    profile: Optional[Path] = o.ProfileOpt,
    validation: Optional[Path] = typer.Option(None, "--validation", dir_okay=False, readable=False,
                                              help="Validation result JSON (commsim validate) "
                                                   "for the predicted-vs-measured pages."),
    traffic_accuracy: Optional[Path] = typer.Option(
        None, "--traffic-accuracy", dir_okay=False, readable=False,
        help="bench/traffic_accuracy's JSON: a page of network traffic against accuracy per "
        "worker count."),
    nodes: str = typer.Option("1,2,3,4,8,16", "--nodes",
                              help="Node counts: 1,2,4,8 or 1-4 or pow2:64."),
    strategies: str = typer.Option(",".join(SEED_STRATEGIES), "--strategies",
                                   help="Comma-separated strategies."),
    batch_sizes: str = typer.Option("16,64,128", "--batch-sizes",
                                    help="Samples per rank for the compute/communication and "
                                         "bandwidth pages."),
    global_batch: int = typer.Option(DEFAULT_GLOBAL_BATCH, "--global-batch", min=1,
                                     help="Strong scaling: samples per iteration over all ranks."),
    weak_batch: int = typer.Option(64, "--weak-batch", min=1,
                                   help="Weak scaling: samples per rank per iteration."),
    timeline_nodes: Optional[int] = typer.Option(None, "--timeline-nodes", min=1,
                                                 help="Nodes of the timeline and per-rank "
                                                      "pages (default 4 if listed, else the "
                                                      "largest)."),
    csv_dir: Optional[Path] = typer.Option(None, "--csv-dir", file_okay=False,
                                           help="Also write every table as CSV here."),
    json_dir: Optional[Path] = typer.Option(None, "--json-dir", file_okay=False,
                                            help="Also write every table as JSON here."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing outputs."),
    scenario=None,
) -> None:
    import time

    from commsim.analysis.compare import (load_traffic_accuracy, load_validation,
                                          load_validation_extras)
    from commsim.analysis.report import ReportOptions, build_report, check_outputs, write_report
    from commsim.errors import UserError
    from commsim.strategies import get_strategy

    t0 = time.perf_counter()
    check_outputs(out, csv_dir=csv_dir, json_dir=json_dir, force=force)
    names = tuple(s.strip() for s in strategies.split(",") if s.strip())
    if not names:
        raise UserError("--strategies is empty")
    for name in names:
        get_strategy(name)
    from dataclasses import replace
    sc = replace(scenario, global_batch=global_batch)
    rows = None if validation is None else load_validation(validation)
    tolerance, timelines = (None, []) if validation is None else load_validation_extras(validation)
    opts = ReportOptions(nodes=tuple(o.parse_nodes(nodes)), strategies=names,
                         batch_sizes=_ints(batch_sizes, "--batch-sizes"),
                         global_batch=global_batch, weak_batch=weak_batch,
                         timeline_nodes=timeline_nodes, scenario=sc,
                         validation_name=None if validation is None else validation.name,
                         **({} if tolerance is None else {"validation_tolerance_pct": tolerance}))
    prof = o.load_profile(profile)
    traffic = None if traffic_accuracy is None else load_traffic_accuracy(traffic_accuracy)
    data = build_report(prof, opts, rows, traffic, timelines)
    paths = write_report(data, out, csv_dir=csv_dir, json_dir=json_dir, force=force)
    extra = f" and {len(paths) - 1} table files" if len(paths) > 1 else ""
    typer.echo(f"wrote {out}{extra} in {time.perf_counter() - t0:.1f} s")
