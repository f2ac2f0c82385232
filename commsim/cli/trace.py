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
    measured: Optional[Path] = typer.Option(None, "--measured", dir_okay=False, readable=False,
                                            help="A trace commsim live --trace wrote: put its "
                                                 "measured tracks beside the predicted ones "
                                                 "(process 'host N (measured)' after 'host N "
                                                 "(predicted)')."),
    profile: Optional[Path] = o.ProfileOpt,
    scenario=None,
) -> None:
    from commsim.analysis.trace import trace_json
    from commsim.api import predict
    from commsim.files import atomic_write_text, check_output, read_json
    from commsim.units import fmt_time

    check_output(out, force=force)
    recorded = None
    if measured is not None:
        from commsim.analysis.measured import check_matches, from_trace, merged_json

        recorded = from_trace(read_json(measured, "--measured"), f"--measured {measured}")
        check_matches(recorded, strategy, nodes, scenario.global_batch)
    prof = o.load_profile(profile)
    result = predict(prof, strategy, nodes, scenario, timeline=True)
    text = trace_json(result) if recorded is None else merged_json(result, recorded)
    atomic_write_text(out, text, force=force)
    k = result.sync_every
    span = (f"one iteration of {fmt_time(result.iteration_s)}" if k == 1 else
            f"one cycle of {k} iterations ({fmt_time(result.iteration_s * k)}: {k - 1} local "
            "then one synchronised)")
    beside = ("" if recorded is None else
              f", beside the measured one ({fmt_time(recorded.iteration_s)})")
    typer.echo(f"wrote {out}: {result.strategy} on {result.nodes} node(s), {span}{beside}; open "
               "it in https://ui.perfetto.dev")
