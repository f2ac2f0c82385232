"""commsim trace: one simulated iteration as a Chrome trace (open it in Perfetto)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commsim.cli import options as o


def register(app: typer.Typer) -> None:
    app.command(help="Write one simulated iteration as a Chrome trace JSON: a track per rank's "
                     "compute and communication and per NIC direction, with bytes in flight; "
                     "open it in ui.perfetto.dev or chrome://tracing.")(trace)


@o.with_scenario()
def trace(
    strategy: str = typer.Option(..., "--strategy", help="single, ps, ring, ddp or dp."),
    nodes: int = typer.Option(..., "--nodes", min=1, help="Hosts in the cluster."),
    out: Path = typer.Option(..., "--out", dir_okay=False, help="Trace file to write (JSON)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    profile: Optional[Path] = o.ProfileOpt,
    scenario=None,
) -> None:
    from commsim.analysis.trace import trace_json
    from commsim.api import predict
    from commsim.files import atomic_write_text, check_output
    from commsim.units import fmt_time

    check_output(out, force=force)
    prof = o.load_profile(profile)
    result = predict(prof, strategy, nodes, scenario, timeline=True)
    atomic_write_text(out, trace_json(result), force=force)
    k = result.sync_every
    span = (f"one iteration of {fmt_time(result.iteration_s)}" if k == 1 else
            f"one cycle of {k} iterations ({fmt_time(result.iteration_s * k)}: {k - 1} local "
            "then one synchronised)")
    typer.echo(f"wrote {out}: {result.strategy} on {result.nodes} node(s), {span}; open it in "
               "https://ui.perfetto.dev")
