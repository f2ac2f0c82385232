"""What an emulated cluster is: its names, addresses and shaping, before anything is built.

Each node is a network namespace ``<prefix>-n<i>`` holding one interface ``eth0`` with address
198.18.0.<i+1>/24; the switch is a Linux bridge in its own namespace ``<prefix>-br``, with one
port ``p<i>`` per node.  ``plan`` turns the user's request (nodes, rate, prefix, TCP congestion
control) into the ``ClusterInfo`` that ``namespaces.up`` builds and ``status`` reads back, and
validates it first, so that a bad request fails before any namespace exists.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

from commsim.calibrate.cluster.shaping import shaping
from commsim.errors import UserError
from commsim.units import fmt_rate

INTERFACE = "eth0"
BRIDGE = "br0"
SUBNET = "198.18.0"
PREFIX_LEN = 24
MAX_NODES = 250
QDISC = "tbf"
# Reno, not the host's default: the host here runs BBR, whose pacing gain cycle and ProbeRTT left
# large Gloo all-reduces at 81-83% of 100mbit (2 ranks, 16-64 MiB) and 865-875 Mbit/s at 1gbit
# with 4 ranks, where Reno reaches 91% and 900-925 Mbit/s (5 timed all-reduces per size;
# docs/emulated-cluster.md).  Linux's usual default, CUBIC, behaves as Reno at LAN round-trip times
# (its TCP-friendly region) but may not be set in a namespace unless the host allows it; Reno
# always is allowed.
DEFAULT_TCP_CONGESTION = "reno"
_PREFIX_RE = re.compile(r"[a-z][a-z0-9]{0,9}")


@dataclass(frozen=True)
class ClusterInfo:
    """The spec of an emulated cluster that is up: what ``status`` reads back.

    ``bandwidth_Bps`` is the shaped rate of each direction of each node's link; ``burst_bytes`` and
    ``limit_bytes`` are the tbf bucket and queue sizes on both ends of every link, and
    ``gso_max_bytes`` the largest GSO packet those ends accept (see ``shaping``)."""
    nodes: int
    bandwidth_Bps: float
    prefix: str
    addresses: tuple[str, ...]
    interface: str = INTERFACE
    qdisc: str = QDISC
    burst_bytes: int = 0
    limit_bytes: int = 0
    gso_max_bytes: int = 0
    bridge_namespace: str = ""
    tcp_congestion: str = ""

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(namespace(i, self.prefix) for i in range(self.nodes))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "ClusterInfo":
        data = json.loads(text)
        data["addresses"] = tuple(data["addresses"])
        return cls(**data)


def check_prefix(prefix: str) -> str:
    # Interface and namespace names stay short and shell-safe; the prefix also names the state file.
    if not _PREFIX_RE.fullmatch(prefix):
        raise UserError(f"cluster prefix {prefix!r} must be 1-10 lowercase letters/digits, "
                        f"starting with a letter")
    return prefix


def namespace(node: int, prefix: str = "csim") -> str:
    """Network namespace of node ``node``: ``csim-n0``, ``csim-n1``..."""
    if node < 0:
        raise UserError(f"node {node} must be >= 0")
    return f"{check_prefix(prefix)}-n{node}"


def bridge_namespace(prefix: str = "csim") -> str:
    return f"{check_prefix(prefix)}-br"


def address(node: int) -> str:
    """IPv4 address of node ``node`` (no prefix length): 198.18.0.<node+1>."""
    if not 0 <= node < MAX_NODES:
        raise UserError(f"node {node} out of range 0..{MAX_NODES - 1}")
    return f"{SUBNET}.{node + 1}"


def switch_port(node: int) -> str:
    """The bridge-side end of node ``node``'s link, inside the bridge namespace."""
    return f"p{node}"


def plan(nodes: int, bandwidth_Bps: float, prefix: str = "csim",
         tcp_congestion: str | None = None) -> ClusterInfo:
    """The ClusterInfo that ``up`` would build; validates the arguments.

    ``tcp_congestion`` None means ``DEFAULT_TCP_CONGESTION`` (Reno); another one must be in the
    host's net.ipv4.tcp_allowed_congestion_control (reno always is)."""
    check_prefix(prefix)
    if tcp_congestion is not None and not re.fullmatch(r"[a-z0-9_]{1,16}", tcp_congestion):
        raise UserError(f"--tcp-congestion {tcp_congestion!r} is not a congestion control name")
    if not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise UserError(f"--nodes {nodes} must be an integer in 1..{MAX_NODES}")
    if not (bandwidth_Bps > 0 and bandwidth_Bps < float("inf")):
        raise UserError(f"--bandwidth {bandwidth_Bps!r} B/s must be positive and finite")
    if bandwidth_Bps * 8 < 8000:
        raise UserError(f"--bandwidth {fmt_rate(bandwidth_Bps)} is below tc's useful range "
                        f"(use at least 8kbit)")
    burst, limit, gso = shaping(bandwidth_Bps)
    return ClusterInfo(nodes=nodes, bandwidth_Bps=float(bandwidth_Bps), prefix=prefix,
                       addresses=tuple(address(i) for i in range(nodes)), burst_bytes=burst,
                       limit_bytes=limit, gso_max_bytes=gso, bridge_namespace=bridge_namespace(prefix),
                       tcp_congestion=tcp_congestion or DEFAULT_TCP_CONGESTION)
