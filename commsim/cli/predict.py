"""commsim predict / sweep: the simulator, from the command line."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from commsim.cli import options as o
from commsim.strategies import SEED_STRATEGIES


def register(app: typer.Typer) -> None:
    app.command(help="Predict one training iteration: time, speedup, compute vs communication, "
                     "bytes on the wire and link utilisation.")(predict)
    app.command(help="Predict strategies x node counts in one table.")(sweep)
    app.command(help="Which all-reduce algorithm is fastest for a tensor of a given size.")(
        algorithms)
    app.command(help="Find the DDP bucket size (and Horovod-style fusion threshold) that "
                     "minimises iteration time on a cluster.")(tune)


@o.with_scenario(("global_batch", "batch_per_rank", "bandwidth", "latency", "ranks_per_host",
                  "cores_per_host", "algorithm", "compute_scale"))
def tune(
    nodes: int = typer.Option(..., "--nodes", min=2, help="Hosts in the cluster."),
    profile: Optional[Path] = o.ProfileOpt,
    top: int = typer.Option(10, "--top", min=1, help="Rows to show."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    scenario=None,
) -> None:
    from commsim.api import tune_buckets
    from commsim.table import text_table
    from commsim.units import fmt_time

    prof = o.load_profile(profile)
    rows = tune_buckets(prof, nodes, scenario)
    if json_out:
        typer.echo(o.dumps(rows))
        return
    default = next(r for r in rows if r["mode"] == "ddp" and r["bucket_mb"] == 25)
    best = rows[0]
    typer.echo(text_table(rows[:top], columns=(
        ("mode", "mode", str), ("bucket MiB", "bucket_mb", lambda v: f"{v:g}"),
        ("buckets", "buckets", str), ("iteration", "iteration_s", fmt_time),
        ("exposed", "exposed_comm_s", fmt_time), ("overlap", "overlap_fraction",
                                                  lambda v: f"{v:.0%}"))))
    typer.echo(f"\nbest: {best['mode']} with {best['bucket_mb']:g} MiB buckets, "
               f"{fmt_time(best['iteration_s'])} per iteration vs {fmt_time(default['iteration_s'])}"
               f" with DDP's default 25 MiB ({default['iteration_s'] / best['iteration_s']:.2f}x)")


def algorithms(
    size: str = typer.Option("25MiB", "--size", help="Tensor size: 4KiB, 25MiB, 1000000."),
    nodes: int = typer.Option(8, "--nodes", min=2, help="Ranks (one per host)."),
    profile: Optional[Path] = o.ProfileOpt,
    bandwidth: Optional[str] = o.BandwidthOpt,
    latency: Optional[str] = o.LatencyOpt,
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    from commsim.api import parse_latency_s, rank_allreduce_algorithms
    from commsim.table import text_table
    from commsim.units import fmt_bytes, fmt_time, parse_rate_Bps, parse_size_bytes

    prof = o.load_profile(profile)
    rows = rank_allreduce_algorithms(
        prof, parse_size_bytes(size), nodes,
        bandwidth_Bps=None if bandwidth is None else parse_rate_Bps(bandwidth),
        latency_s=None if latency is None else parse_latency_s(latency))
    if json_out:
        typer.echo(o.dumps(rows))
        return
    best = rows[0]["time_s"]
    for r in rows:
        r["vs_best"] = r["time_s"] / best
    typer.echo(text_table(rows, columns=(
        ("algorithm", "algorithm", str), ("bytes", "bytes", fmt_bytes), ("ranks", "ranks", str),
        ("time", "time_s", fmt_time), ("vs best", "vs_best", lambda v: f"{v:.2f}x"))))


@o.with_scenario()
def predict(
    strategy: str = typer.Option(..., "--strategy", help="single, ps, ring, ddp or dp."),
    nodes: int = typer.Option(..., "--nodes", min=1, help="Hosts in the cluster."),
    profile: Optional[Path] = o.ProfileOpt,
    engine: str = o.EngineOpt,
    per_rank: bool = typer.Option(False, "--per-rank", help="Also list every rank."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    scenario=None,
) -> None:
    from commsim.api import predict as run
    from commsim.table import text_table
    from commsim.units import fmt_bytes, fmt_rate, fmt_time

    prof = o.load_profile(profile)
    result = run(prof, strategy, nodes, scenario, engine=engine)
    if json_out:
        typer.echo(o.dumps(result.to_dict(per_rank=per_rank)))
        return
    r = result
    src = prof.metadata.get("source", "unknown")
    typer.echo(f"commsim predict: {r.strategy} on {r.nodes} node(s) x {r.ranks_per_host} rank(s), "
               f"global batch {r.global_batch} ({r.batch_per_rank}/rank), "
               f"link {fmt_rate(r.link_bandwidth_Bps)}, engine {r.engine}")
    typer.echo(f"profile: {prof.model_name}, {fmt_bytes(prof.model_bytes)} of gradients in "
               f"{len(prof.params)} tensors; source: {src}")
    typer.echo("")
    typer.echo(text_table([r.to_dict()]))
    typer.echo("")
    typer.echo(f"iteration {fmt_time(r.iteration_s)} = compute {fmt_time(r.compute_s)} + exposed "
               f"communication {fmt_time(r.exposed_comm_s)}; {r.overlap_fraction:.0%} of "
               f"{fmt_time(r.comm_s)} communication hidden behind compute")
    typer.echo(f"speedup {r.speedup:.2f}x over one rank ({r.efficiency:.0%} efficiency); "
               f"epoch of {r.iterations_per_epoch} iterations: {fmt_time(r.epoch_s)}")
    typer.echo(f"per rank: sent {fmt_bytes(r.bytes_sent_per_rank)} (busiest "
               f"{fmt_bytes(r.bytes_sent_max)}), algbw {fmt_rate(r.algbw_Bps)}, busbw "
               f"{fmt_rate(r.busbw_Bps)}, busiest link {r.link_utilization:.0%} used")
    if r.buffer_bytes_sent_per_rank or r.startup_bytes_received_per_rank:
        typer.echo(f"of which buffer broadcast {fmt_bytes(r.buffer_bytes_sent_per_rank)}/iteration;"
                   f" once at start: parameters+buffers "
                   f"{fmt_bytes(r.startup_bytes_received_per_rank)} per rank")
    if r.sync_every > 1:
        typer.echo(f"local aggregation: one sync every {r.sync_every} iterations; figures are "
                   "per iteration (the cycle / k)")
    if per_rank:
        typer.echo("")
        typer.echo(text_table(list(r.per_rank), columns=(
            ("rank", "rank", str), ("finish", "finish_s", fmt_time),
            ("compute", "compute_s", fmt_time), ("comm", "comm_s", fmt_time),
            ("sent", "bytes_sent", fmt_bytes), ("received", "bytes_received", fmt_bytes))))


@o.with_scenario(o.HOMOGENEOUS)
def sweep(
    strategies: str = typer.Option(",".join(SEED_STRATEGIES), "--strategies",
                                   help="Comma-separated strategies."),
    nodes: str = typer.Option("1,2,3,4,8,16", "--nodes",
                              help="Node counts: 1,2,4,8 or 1-4 or pow2:64."),
    profile: Optional[Path] = o.ProfileOpt,
    engine: str = o.EngineOpt,
    csv_out: bool = typer.Option(False, "--csv", help="Print CSV."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    scenario=None,
) -> None:
    from commsim.api import strategy_names, sweep as run
    from commsim.errors import UserError
    from commsim.strategies import get_strategy
    from commsim.table import csv_text, text_table

    names = [s.strip() for s in strategies.split(",") if s.strip()]
    if not names:
        raise UserError("--strategies is empty; choose from " + ", ".join(strategy_names()))
    for name in names:
        get_strategy(name)
    node_list = o.parse_nodes(nodes)
    prof = o.load_profile(profile)
    sc = scenario
    skipped: list = []
    rows = [r.to_dict() for r in run(prof, names, node_list, sc, engine=engine, skipped=skipped)]
    for why in dict.fromkeys(why for _, _, why in skipped):      # each reason once, in order
        cells = [(strategy, n) for strategy, n, reason in skipped if reason == why]
        where = ", ".join(f"{strategy} at {sorted(n for s, n in cells if s == strategy)}"
                          for strategy in dict.fromkeys(s for s, _ in cells))
        typer.echo(f"commsim sweep: left out {len(cells)} cell(s) ({where} nodes): {why}",
                   err=True)
    if json_out:
        typer.echo(o.dumps(rows))
    elif csv_out:
        typer.echo(csv_text(rows), nl=False)
    else:
        typer.echo(text_table(rows))
