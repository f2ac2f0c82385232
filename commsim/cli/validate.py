"""commsim validate: live runs against predictions over a grid, with the error."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commsim.cli import options as o
from commsim.cli.cluster import ClusterPrefixOpt, QuietOpt, VerboseOpt, quiet_torch
from commsim.cli.live import data_and_model
from commsim.progress import Progress
from commsim.limits import TIMEOUT_S
from commsim.spec import DEFAULT_GLOBAL_BATCH, DEFAULT_MODEL


def register(app: typer.Typer) -> None:
    app.command(help="Run strategies x node counts (x link rates) live and predicted; report "
                     "predicted vs measured iteration time and the error.  Exit 1 when the "
                     "median absolute error exceeds --tolerance.")(validate)


def validate(
    strategies: str = typer.Option("ps,ring,ddp", "--strategies", help="Comma-separated."),
    nodes: str = typer.Option("2,3,4", "--nodes", help="Node counts, e.g. 2,3,4."),
    emulate: Optional[str] = typer.Option(None, "--emulate", help="Comma-separated link rates "
                                          "of an emulated cluster, e.g. 100mbit,1gbit (root)."),
    profile: Optional[Path] = typer.Option(None, "--profile", dir_okay=False, readable=False, help="Use this "
                                           "profile instead of calibrating first."),
    calibrate_nodes: Optional[int] = typer.Option(None, "--calibrate-nodes", min=2,
                                                  help="Ranks to calibrate on (default: the "
                                                       "largest of --nodes)."),
    quick: bool = typer.Option(False, "--quick", help="Quick calibration sweep."),
    iterations: int = typer.Option(10, "--iterations", min=1, max=10**6, help="Timed live iterations."),
    global_batch: Optional[int] = o.GlobalBatchOpt,
    batch_per_rank: Optional[int] = o.BatchPerRankOpt,
    bucket_mb: float = o.BucketOpt,
    model: Optional[str] = typer.Option(None, "--model", help="nn.Module factory module:function "
                                        "(default: the profile's model)."),
    data: Optional[Path] = typer.Option(None, "--data", file_okay=False,
                                        help="CIFAR-10 binary directory, or 'digits' (default "
                                        "synthetic)."),
    what_if_rate: Optional[str] = typer.Option(
        None, "--what-if-rate", metavar="RATE",
        help="The link rate the live cells run at, when it is not the profile's (a real "
        "cluster whose links you changed since calibrating): predictions ask for it as "
        "--bandwidth would, so one calibration checks a rate what-if.  With --emulate the "
        "emulated rates play this part."),
    tolerance: float = typer.Option(10.0, "--tolerance", min=0.0,
                                    help="Median absolute error allowed, percent."),
    timeout: float = typer.Option(900.0, "--timeout", min=1.0, max=TIMEOUT_S.hi,
                                 help="Seconds per live run."),
    out: Optional[Path] = typer.Option(None, "--out", dir_okay=False, help="Write the JSON here."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out (and --trace's files)."),
    trace: Optional[Path] = typer.Option(None, "--trace", file_okay=False, help="Record every "
                                         "cell's last live iteration and write, per cell, one "
                                         "Chrome trace with the predicted and the measured "
                                         "tracks of every rank side by side into this folder "
                                         "(and the timelines into --out, for commsim report)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    verbose: bool = VerboseOpt,
    cluster_prefix: str = ClusterPrefixOpt,
    quiet: bool = QuietOpt,
) -> None:
    import tempfile

    quiet_torch(verbose)

    from commsim.analysis.validate import (ValidationGrid, rows_table, table_columns,
                                          validate as run)
    from commsim.errors import UserError
    from commsim.files import check_output, write_files
    from commsim.profile import load
    from commsim.strategies import get_strategy
    from commsim.table import text_table
    from commsim.units import parse_rate_Bps

    names = tuple(s.strip() for s in strategies.split(",") if s.strip())
    for name in names:
        get_strategy(name)
    if "single" in names:
        raise UserError("--strategies: 'single' is the speedup reference, not a sync strategy "
                        "to validate; choose from ps, ring, ddp")
    node_list = tuple(o.parse_nodes(nodes))
    if min(node_list) < 2:
        raise UserError(f"--nodes {nodes!r}: validation needs at least 2 nodes per run")
    rates = tuple(parse_rate_Bps(r) for r in emulate.split(",")) if emulate else ()
    if what_if_rate is not None and rates:
        raise UserError("--what-if-rate is for a real cluster; with --emulate the emulated "
                        "rates are the rates asked")
    asked_Bps = None if what_if_rate is None else parse_rate_Bps(what_if_rate)
    if out is not None:
        check_output(out, force=force)  # before an hour of live runs, not after
    if trace is not None:
        check_output(trace, folder=True)
    sc = o.scenario(global_batch=global_batch, batch_per_rank=batch_per_rank, bucket_mb=bucket_mb,
                    bandwidth=None, latency=None, ranks_per_host=1, cores_per_host=None,
                    shared_cpu_cores=None, straggler=None, slow_link=None, no_overlap=False)

    cells = max(1, len(rates)) * len(names) * len(node_list)
    plain = True if quiet else None
    bar = Progress("validate", cells, plain=plain)

    if profile is not None:
        prof = load(profile)
    else:
        from commsim.calibrate.runner import CalibrateOptions, run as calibrate
        from commsim.progress import Relay
        tmp = Path(tempfile.mkdtemp(prefix="commsim-validate-")) / "profile.json"
        kw = {"model": model} if model else {}
        # The calibration's own display, closed before the cells' starts (one live display).
        with Relay(Progress("calibrate", plain=plain)) as shown:
            shown.progress.say(f"calibrating on {calibrate_nodes or max(node_list)} ranks")
            prof = calibrate(CalibrateOptions(out=tmp, nodes=calibrate_nodes or max(node_list),
                                              emulate_Bps=rates[0] if rates else None,
                                              quick=quick,
                                              cluster_prefix=cluster_prefix, **kw), progress=shown)
    factory = model or (prof.model_name if ":" in prof.model_name else None)
    data_dir, factory = data_and_model(data, factory or DEFAULT_MODEL)
    grid = ValidationGrid(strategies=names, nodes=node_list, rates_Bps=rates,
                          iterations=iterations, global_batch=sc.global_batch or DEFAULT_GLOBAL_BATCH,
                          batch_per_rank=sc.batch_per_rank, bucket_mb=bucket_mb, model=factory,
                          data_dir=data_dir, timeout_s=timeout,
                          what_if_rate_Bps=asked_Bps, trace=trace is not None)

    def cluster_for_rate(rate, n):
        from commsim.calibrate import cluster
        return cluster.up(n, rate, prefix=cluster_prefix)

    with bar:
        report = run(grid, prof, tolerance_pct=tolerance, cluster_for_rate=cluster_for_rate,
                     progress=bar.step)
    files = {} if out is None else {out: (o.dumps(report.to_dict()) + "\n").encode("utf-8")}
    if trace is not None:
        from commsim.analysis.measured import merged_json

        for cell in report.timelines:
            files[trace / f"{cell.stem}.json"] = merged_json(cell.predicted,
                                                             cell.measured).encode("utf-8")
    write_files(files, force=force)
    if json_out:
        typer.echo(o.dumps(report.to_dict()))
    else:
        typer.echo(text_table(rows_table(report.rows), columns=table_columns()))
        s = report.summary
        typer.echo(f"\n|error| median {s['median_abs_error_pct']:.1f}%, p90 "
                   f"{s['p90_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}% over "
                   f"{s['cells']} cells (tolerance {tolerance:g}%): "
                   f"{'PASS' if s['passed'] else 'FAIL'}")
    if not report.summary["passed"]:
        raise typer.Exit(1)
