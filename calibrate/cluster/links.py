"""Using an emulated cluster's nodes: run a command in one, read its link's counters, pull its
cable, and measure a link's TCP throughput.

These are what runs on the cluster (``launch`` runs rank r in node r with ``exec_argv``; live runs
read their own counters), what fault tests inject (``set_link``), and how the shaping is checked
(``measure_throughput``: one bulk TCP transfer between two nodes, its two ends run in the nodes as
``python -m commsim.calibrate.cluster.throughput``).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

from commsim.calibrate.cluster.commands import run
from commsim.calibrate.cluster.spec import (INTERFACE, address, bridge_namespace, namespace,
                                            switch_port)
from commsim.errors import UserError

THROUGHPUT_MODULE = "commsim.calibrate.cluster.throughput"


def exec_argv(node: int, argv: list[str], prefix: str = "csim") -> list[str]:
    """argv that runs ``argv`` inside node ``node``'s namespace."""
    if not argv:
        raise UserError("exec_argv needs a command to run")
    return ["ip", "netns", "exec", namespace(node, prefix), *map(str, argv)]


def interface_counters(node: int, prefix: str = "csim") -> dict:
    """Byte/packet counters of node ``node``'s interface (kernel statistics, as in
    /sys/class/net/eth0/statistics inside the namespace): rx_bytes, tx_bytes, rx_packets,
    tx_packets, rx_dropped, tx_dropped."""
    ns = namespace(node, prefix)
    proc = run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", INTERFACE],
               what=f"reading the counters of node {node}", check=False)
    if proc.returncode != 0:
        raise UserError(f"node {node} ({ns}) has no {INTERFACE}; is the cluster up? "
                        f"(commsim cluster status)")
    stats = json.loads(proc.stdout)[0]["stats64"]
    return {f"{d}_{k}": int(stats[d][k]) for d in ("rx", "tx")
            for k in ("bytes", "packets", "dropped")}


def set_link(node: int, up: bool, prefix: str = "csim") -> None:
    """Take node ``node``'s link down or up at the switch (like pulling its cable).

    The node keeps its address; its eth0 loses carrier, so packets are dropped silently and TCP
    connections time out instead of failing fast, as on a real cable fault."""
    ns = namespace(node, prefix)  # validates node and prefix
    proc = run(["ip", "-n", bridge_namespace(prefix), "link", "set", switch_port(node),
                "up" if up else "down"], what=f"setting node {node}'s link", check=False)
    if proc.returncode != 0:
        raise UserError(f"node {node} ({ns}) has no link on the switch; is the cluster up? "
                        f"(commsim cluster status)")


def link_states(prefix: str = "csim") -> dict[int, bool]:
    """{node: link is up at the switch} for every node port of cluster ``prefix`` ({} if none)."""
    proc = run(["ip", "-n", bridge_namespace(prefix), "-j", "link", "show"],
               what="reading the switch ports", check=False)
    if proc.returncode != 0:
        return {}
    states = {}
    for link in json.loads(proc.stdout or "[]"):
        m = re.fullmatch(r"p(\d+)", link.get("ifname", ""))
        if m:
            states[int(m.group(1))] = "UP" in link.get("flags", [])
    return dict(sorted(states.items()))


def measure_throughput(src: int, dst: int, seconds: float = 2.0, *,
                       prefix: str = "csim") -> float:
    """Bytes/s of one TCP bulk transfer from node ``src`` to node ``dst`` for ``seconds``.

    The receiver times from its first byte to the sender's close (so connection set-up is not
    counted); both processes are killed if they overrun, so this always returns or raises."""
    if src == dst:
        raise UserError(f"throughput test needs two different nodes, got {src} and {dst}")
    if not 0 < seconds <= 600:
        raise UserError(f"seconds {seconds} must be in (0, 600]")
    limit_s = seconds + 15.0
    dst_addr = address(dst)
    server = subprocess.Popen(exec_argv(dst, [sys.executable, "-m", THROUGHPUT_MODULE, "server",
                                              dst_addr, str(limit_s)], prefix),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        port = server.stdout.readline().strip()
        if not port.isdigit():
            server.wait(5)
            raise UserError(f"throughput server on node {dst} ({namespace(dst, prefix)}) did not "
                            f"start: {_last_line(server.stderr.read())}")
        client = subprocess.Popen(exec_argv(src, [sys.executable, "-m", THROUGHPUT_MODULE,
                                                  "client", dst_addr, port, str(seconds)], prefix),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # The client finishes first (it stops sending by itself); a client that cannot connect
        # or send fails fast, and then the server is not waited for.
        _, client_err = client.communicate(timeout=limit_s)
        if client.returncode != 0:
            raise UserError(f"throughput test: node {src} could not send to {dst_addr}: "
                            f"{_last_line(client_err)}")
        out, err = server.communicate(timeout=15.0)
        if server.returncode != 0:
            raise UserError(f"throughput test: node {dst} ({dst_addr}) failed to receive: "
                            f"{_last_line(err)}")
        result = json.loads(out.strip().splitlines()[-1])
        if result["seconds"] <= 0:
            raise UserError(f"throughput test node {src} -> {dst_addr} moved no data")
        return result["bytes"] / result["seconds"]
    except subprocess.TimeoutExpired:
        raise UserError(f"throughput test node {src} -> {dst_addr} did not finish in "
                        f"{limit_s:g} s") from None
    finally:
        for proc in (client, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "no message"
