"""commsim cluster up / down / status: the emulated cluster (network namespaces shaped by tc)."""
from __future__ import annotations

import json

import typer

PrefixOpt = typer.Option("csim", "--prefix", help="Name prefix of the namespaces "
                         "(<prefix>-n0.., <prefix>-br); lets tests use their own cluster.")

# The same choice for the commands that run on a cluster (calibrate, live --emulate).
ClusterPrefixOpt = typer.Option("csim", "--cluster-prefix", help="Which emulated cluster "
                                "--emulate uses (see 'commsim cluster up --prefix').")
# Gloo's timeout for rendezvous and every collective: how soon a dead link or master is found.
CollectiveTimeoutOpt = typer.Option(30.0, "--collective-timeout", min=1.0, max=3600.0,
                                    help="Seconds before rendezvous or one collective is "
                                    "declared failed (a downed link, a dead master).")


QuietOpt = typer.Option(False, "--quiet", help="Plain progress lines instead of the live "
                        "display (the default when stderr is not a terminal).")
VerboseOpt = typer.Option(False, "--verbose", help="Show torch's C++ log lines (c10d, Gloo) "
                          "from every rank; by default only its errors.")


def quiet_torch(verbose: bool) -> None:
    """Ranks (and this process) log torch's C++ messages at errors only unless ``verbose``:
    c10d's warnings ("The hostname of the client socket cannot be retrieved") mean nothing to
    a user, and a rank's real failure reaches the user anyway, as one line naming the rank.
    Set before torch is imported; the ranks inherit it; a value the user exported wins."""
    import os

    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "INFO" if verbose else "ERROR")


def register(app: typer.Typer) -> None:
    group = typer.Typer(no_args_is_help=True, help="An emulated cluster on this machine: one "
                        "network namespace per node on a bridge, every link shaped with tc "
                        "(needs root and iproute2).")
    group.command("up", help="Build (or keep) an emulated cluster; rank r of an emulated run "
                  "runs in node r.")(up)
    group.command("down", help="Remove the emulated cluster (always cleans up, also after a "
                  "half-built 'up').")(down)
    group.command("status", help="Show the emulated cluster that is up.")(status)
    app.add_typer(group, name="cluster")


def up(
    nodes: int = typer.Option(..., "--nodes", min=1, max=250, help="Number of nodes."),
    bandwidth: str = typer.Option(..., "--bandwidth", help="Rate of each direction of every "
                                  "node's link, tc spelling: 1gbit, 100mbit, 125MBps."),
    tcp_congestion: str = typer.Option(None, "--tcp-congestion", help="TCP congestion control "
                                       "inside the nodes (default: reno, which reaches ~91% of "
                                       "the rate with Gloo where the host's bbr reached ~82%; "
                                       "others must be allowed by the host)."),
    prefix: str = PrefixOpt,
) -> None:
    from commsim.calibrate import cluster
    from commsim.errors import UserError
    from commsim.units import UnitError, parse_rate_Bps

    try:
        rate = parse_rate_Bps(bandwidth)
    except UnitError as exc:
        raise UserError(f"--bandwidth: {exc}") from None
    cluster.check_prereqs()
    before = cluster.status(prefix)
    info = cluster.up(nodes, rate, prefix=prefix, tcp_congestion=tcp_congestion)
    verb = "already up" if before == info else "up"
    typer.echo(f"emulated cluster '{prefix}' {verb}")
    typer.echo(_table(info, cluster.link_states(prefix)))


def down(prefix: str = PrefixOpt) -> None:
    from commsim.calibrate import cluster

    cluster.check_prereqs()
    removed = cluster.down(prefix)
    typer.echo(f"removed {removed} namespace{'s' * (removed != 1)} of emulated cluster "
               f"'{prefix}'" if removed else f"no emulated cluster '{prefix}' to remove")


def status(
    prefix: str = PrefixOpt,
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    from dataclasses import asdict

    from commsim.calibrate import cluster

    cluster.check_prereqs()
    info = cluster.status(prefix)
    if info is None:
        typer.echo("null" if json_out else "no emulated cluster is up"
                   + (f" (prefix '{prefix}')" if prefix != "csim" else ""))
        return
    links = cluster.link_states(prefix)
    if json_out:
        typer.echo(json.dumps({**asdict(info), "link_up": [links.get(i, False)
                                                            for i in range(info.nodes)]},
                              indent=2))
        return
    typer.echo(_table(info, links))


def _table(info, links: dict[int, bool]) -> str:
    from commsim.calibrate.cluster import namespace
    from commsim.table import text_table
    from commsim.units import fmt_bytes, fmt_rate

    head = (f"{info.nodes} node{'s' * (info.nodes != 1)}, {fmt_rate(info.bandwidth_Bps)} each "
            f"way per link, qdisc {info.qdisc} (burst {fmt_bytes(info.burst_bytes)}, queue "
            f"{fmt_bytes(info.limit_bytes)}), TCP {info.tcp_congestion}, switch namespace "
            f"{info.bridge_namespace}")
    rows = [{"node": str(i), "namespace": namespace(i, info.prefix), "address": addr,
             "interface": info.interface, "rate": fmt_rate(info.bandwidth_Bps),
             "link": "up" if links.get(i, False) else "DOWN"}
            for i, addr in enumerate(info.addresses)]
    columns = tuple((k, k, str) for k in rows[0])
    return head + "\n" + text_table(rows, columns)
