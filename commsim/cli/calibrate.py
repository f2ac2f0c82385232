"""``commsim calibrate``: parse options, call ``commsim.calibrate.runner.run``, print a summary.

No torch import here: the library is imported inside the command (the CLI starts fast)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from commsim.cli.cluster import (ClusterPrefixOpt, CollectiveTimeoutOpt, QuietOpt, VerboseOpt,
                                 quiet_torch)
from commsim.errors import UserError
from commsim.limits import TIMEOUT_S
from commsim.spec import DEFAULT_MODEL


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"{option} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise UserError(f"{option} must list positive integers, got {text!r}")
    return values


def register(app: typer.Typer) -> None:
    @app.command("calibrate", help="Measure compute and Gloo collectives on N ranks, fit the "
                 "cost model, write a profile (schema v1).  Under torchrun it joins the job "
                 "instead of spawning ranks.")
    def calibrate(
        nodes: int = typer.Option(2, "--nodes", min=2, max=250, help="Ranks to run (local processes, "
                                  "or emulated nodes with --emulate)."),
        emulate: Optional[str] = typer.Option(None, "--emulate", metavar="RATE",
                                              help="Run each rank in a node of an emulated "
                                              "cluster shaped to RATE (e.g. 1gbit); needs root."),
        quick: bool = typer.Option(False, "--quick", help="A small sweep (seconds)."),
        out: Path = typer.Option(Path("profile.json"), "--out", help="Profile to write."),
        force: bool = typer.Option(False, "--force", help="Overwrite --out and its samples."),
        resume: bool = typer.Option(False, "--resume",
                                    help="Continue an interrupted run from <out>.samples.jsonl."),
        model: str = typer.Option(DEFAULT_MODEL, "--model",
                                  help="nn.Module factory, module:function."),
        input_shape: str = typer.Option("3,32,32", "--input-shape",
                                        help="One sample's shape, e.g. 3,32,32."),
        batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes",
                                                  help="Per-rank batch sizes (default "
                                                  "16,32,...,512; --quick: 4,8)."),
        timeout: float = typer.Option(900.0, "--timeout", min=1.0, max=TIMEOUT_S.hi,
                                      help="Seconds before the whole run is abandoned."),
        oversubscribe: Optional[float] = typer.Option(
            None, "--oversubscribe", min=0.0, max=64.0, metavar="X",
            help="Also time compute with co-runner processes beside the ranks until each host "
            "has X times its cores busy, so that predictions for more ranks than cores use a "
            "measured cost (default 2; --quick: 0 = off)."),
        compute_reps: Optional[int] = typer.Option(
            None, "--compute-reps", min=1, max=1000, metavar="N",
            help="Time every batch size alone at least N times (default 3, 2 for sizes past "
            "2 s an iteration, more for fast ones): on a host whose speed varies between "
            "repetitions, more make a steadier table and a longer run."),
        collective_timeout: float = CollectiveTimeoutOpt,
        cluster_prefix: str = ClusterPrefixOpt,
        verbose: bool = VerboseOpt,
        quiet: bool = QuietOpt,
        from_trace: Optional[List[Path]] = typer.Option(
            None, "--from-trace", dir_okay=False, readable=False, metavar="TRACE",
            help="Build the profile from a PyTorch profiler trace of your own training "
            "(export_chrome_trace, record_shapes=True; CPU or GPU) instead of measuring: one "
            "per batch size, repeatable.  Needs --network or --bandwidth."),
        network: Optional[Path] = typer.Option(
            None, "--network", dir_okay=False, readable=False, metavar="PROFILE",
            help="With --from-trace: take the link and collective fits from this profile."),
        bandwidth: Optional[str] = typer.Option(
            None, "--bandwidth", help="With --from-trace: the link rate (tc spelling, 10gbit), "
            "instead of or over --network's."),
        latency: Optional[str] = typer.Option(None, "--latency",
                                              help="With --from-trace: the link latency."),
    ) -> None:
        """``commsim calibrate`` (its help is the command's, above: one paragraph)."""
        if from_trace:
            return _from_trace(from_trace, out=out, force=force, network=network,
                               bandwidth=bandwidth, latency=latency)
        if network is not None or bandwidth is not None or latency is not None:
            raise UserError("--network, --bandwidth and --latency go with --from-trace "
                            "(a measured calibration fits the link itself)")
        quiet_torch(verbose)
        from commsim.calibrate.fit import format_compute_reproduction, format_nccl_table
        from commsim.calibrate.runner import CalibrateOptions, run
        from commsim.units import fmt_rate, fmt_time, parse_rate_Bps

        opts = CalibrateOptions(
            out=out, nodes=nodes, emulate_Bps=parse_rate_Bps(emulate) if emulate else None,
            quick=quick, force=force, resume=resume, model=model,
            input_shape=_ints(input_shape, "--input-shape"),
            batch_sizes=_ints(batch_sizes, "--batch-sizes") if batch_sizes else None,
            timeout_s=timeout, collective_timeout_s=collective_timeout,
            oversubscribe=oversubscribe, cluster_prefix=cluster_prefix,
            compute_reps=compute_reps)
        from commsim.progress import Progress, Relay

        with Relay(Progress("calibrate", plain=True if quiet else None)) as shown:
            profile = run(opts, progress=shown)
        if profile is None:  # a torchrun rank other than 0
            return
        typer.echo(format_nccl_table(profile.samples["nccl_table"]))
        net = profile.network
        typer.echo(f"link: latency {fmt_time(net.latency_s)}, bandwidth "
                   f"{fmt_rate(net.bandwidth_Bps)}")
        for name, fit in sorted(profile.collectives.items()):
            typer.echo(f"{name:10s} bandwidth {fmt_rate(fit.bandwidth_Bps):>13s}  overhead "
                       f"{fmt_time(fit.overhead_s):>9s}  gamma {fit.reduction_s_per_B:.3g} s/B")
        typer.echo(format_compute_reproduction(profile))
        typer.echo(f"wrote {out} (samples: {out}.samples.jsonl)")


def _from_trace(traces: list[Path], *, out: Path, force: bool, network: Optional[Path],
                bandwidth: Optional[str], latency: Optional[str]) -> None:
    """``calibrate --from-trace``: a profile from the user's own profiler traces (no torch)."""
    from commsim.analysis.inspect import format_summary, summary
    from commsim.api import parse_latency_s
    from commsim.calibrate.from_trace import profile_from_traces
    from commsim.calibrate.runner import public_command
    from commsim.files import check_output
    from commsim.profile import load, save
    from commsim.units import parse_rate_Bps

    check_output(out, force=force)
    profile = profile_from_traces(
        traces, network=None if network is None else load(network),
        bandwidth_Bps=None if bandwidth is None else parse_rate_Bps(bandwidth),
        latency_s=None if latency is None else parse_latency_s(latency),
        metadata={"command": public_command(["commsim", *sys.argv[1:]])})
    save(profile, out, force=force)
    typer.echo(format_summary(summary(profile), str(out)))
    typer.echo(f"wrote {out}")
