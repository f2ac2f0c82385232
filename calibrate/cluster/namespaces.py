"""Building and tearing down an emulated cluster: namespaces, veth links, a bridge, tc.

The host's network namespace is never touched: the veth pairs are created inside the bridge
namespace and the node end is moved straight to its node.  ``up``, in order:
  1. check root, ``ip``, ``tc`` and network-namespace support (``check_prereqs``);
  2. if the recorded spec equals the requested one and every namespace, port and qdisc is still
     there (``status``), do nothing; otherwise tear down (``down``);
  3. create the namespaces, the bridge, one veth pair per node, addresses, ``lo`` up;
  4. shape BOTH directions of every link with a token bucket filter (``shaping``): the node side's
     egress (node -> switch) and the bridge port's egress (switch -> node), so that each node has
     a full-duplex link of the given rate, like a port on a real switch;
  5. record the spec atomically; on any failure tear everything down again and raise.
"""
from __future__ import annotations

import contextlib
import os

from commsim.calibrate.cluster.commands import check_prereqs, ip_batch, read_proc, run
from commsim.calibrate.cluster.links import link_states, set_link
from commsim.calibrate.cluster.spec import (BRIDGE, PREFIX_LEN, ClusterInfo, check_prefix, plan,
                                            switch_port)
from commsim.calibrate.cluster.status import (NETNS_DIR, existing_namespaces, locked, state_path,
                                              status)
from commsim.errors import UserError
from commsim.units import tc_rate


def up(nodes: int, bandwidth_Bps: float, *, prefix: str = "csim",
       tcp_congestion: str | None = None) -> ClusterInfo:
    """Build (or keep) an emulated cluster of ``nodes`` nodes, each link shaped to the rate.

    ``tcp_congestion``: see ``plan``; Reno by default."""
    want = plan(nodes, bandwidth_Bps, prefix, tcp_congestion)
    check_prereqs()
    with locked(prefix):
        if status(prefix) == want:
            # Same spec already up: only undo a fault injection that was left behind.
            _restore_links(prefix)
            return want
        _down_unlocked(prefix)
        try:
            _build(want)
            tmp = state_path(prefix).with_suffix(".tmp")
            tmp.write_text(want.to_json())
            os.replace(tmp, state_path(prefix))
        except BaseException:
            _down_unlocked(prefix)
            raise
    return want


def ensure(nodes: int, bandwidth_Bps: float, *, prefix: str = "csim") -> ClusterInfo:
    """The cluster ``prefix`` if it is up with at least ``nodes`` nodes at this rate, else ``up``.

    Runs use nodes 0..nodes-1 of a bigger cluster as they are, so a run on 2 nodes does not
    tear down (and rebuild smaller) a 4-node cluster that a user has up."""
    info = status(prefix)
    if info is not None and info.nodes >= nodes and \
            abs(info.bandwidth_Bps - bandwidth_Bps) <= 1e-6 * bandwidth_Bps:
        _restore_links(prefix)
        return info
    return up(nodes, bandwidth_Bps, prefix=prefix)


def down(prefix: str = "csim") -> int:
    """Remove every namespace of cluster ``prefix`` (also a half-built one) and its state file.

    Returns the number of namespaces removed; never fails when nothing exists."""
    check_prefix(prefix)
    if not NETNS_DIR.is_dir() and not state_path(prefix).exists():
        return 0  # nothing was ever built: do not even create the lock file
    with locked(prefix):
        return _down_unlocked(prefix)


def _restore_links(prefix: str) -> None:
    """Bring up every node link a fault injection (``set_link``) left down."""
    for node, is_up in link_states(prefix).items():
        if not is_up:
            set_link(node, True, prefix)


def _down_unlocked(prefix: str) -> int:
    state_path(prefix).unlink(missing_ok=True)
    names = existing_namespaces(prefix)
    removed = 0
    for ns in names:
        # Deleting a namespace destroys the veth ends in it, and with them their peers.
        proc = run(["ip", "netns", "delete", ns], what=f"deleting namespace {ns}", check=False)
        if proc.returncode == 0:
            removed += 1
        elif (NETNS_DIR / ns).exists():
            raise UserError(f"could not delete namespace {ns}: {' '.join(proc.stderr.split())}")
    return removed


def shape(info: ClusterInfo, node: int, shaped: bool = True) -> None:
    """Shape both ends of ``node``'s link as ``info`` says (tbf), or take the shaping off
    (``shaped=False``: the link runs as fast as the hosts can feed it)."""
    tbf = (f"tbf rate {tc_rate(info.bandwidth_Bps)} burst {info.burst_bytes} "
           f"limit {info.limit_bytes}")
    ends = ((info.namespaces[node], info.interface, f"node {node} egress"),
            (info.bridge_namespace, switch_port(node), f"the switch port to node {node}"))
    for ns, dev, what in ends:
        if shaped:
            run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", *tbf.split()],
                what=f"shaping {what} ({ns} {dev})")
        else:
            run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"],
                what=f"unshaping {what} ({ns} {dev})", check=False)


@contextlib.contextmanager
def unshaped(info: ClusterInfo):
    """Every link of ``info`` without its shaping for the block, shaped again after (also on an
    error): what a collective costs the hosts alone, with the link out of the way."""
    try:
        for node in range(info.nodes):
            shape(info, node, shaped=False)
        yield
    finally:
        for node in range(info.nodes):
            shape(info, node)


def _build(info: ClusterInfo) -> None:
    br = info.bridge_namespace
    for ns in (br, *info.namespaces):
        run(["ip", "netns", "add", ns], what=f"creating namespace {ns}")
    # addrgenmode none: no IPv6 link-local address, so no neighbour-discovery chatter shows up in
    # the byte counters that live runs report.
    cmds = ["link set lo up",
            f"link add {BRIDGE} type bridge forward_delay 0 stp_state 0",
            f"link set {BRIDGE} addrgenmode none"]
    for i, ns in enumerate(info.namespaces):
        # Created inside the bridge namespace, node end moved straight to its node: nothing ever
        # appears in the host namespace.
        port = switch_port(i)
        cmds += [f"link add {port} type veth peer name {info.interface} netns {ns}",
                 f"link set {port} addrgenmode none gso_max_size {info.gso_max_bytes}",
                 f"link set {port} master {BRIDGE}",
                 f"link set {port} up"]
    cmds.append(f"link set {BRIDGE} up")
    ip_batch(br, cmds, what="building the bridge")
    for i, ns in enumerate(info.namespaces):
        ip_batch(ns, ["link set lo up",
                      f"link set {info.interface} addrgenmode none gso_max_size "
                      f"{info.gso_max_bytes}",
                      f"addr add {info.addresses[i]}/{PREFIX_LEN} dev {info.interface}",
                      f"link set {info.interface} up"], what=f"configuring node {i}")
        if info.tcp_congestion != read_proc("net/ipv4/tcp_congestion_control"):
            # Only those in the host's tcp_allowed_congestion_control may be set in a netns.
            run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                 f"net.ipv4.tcp_congestion_control={info.tcp_congestion}"],
                what=f"setting TCP congestion control {info.tcp_congestion!r} in {ns} (allowed: "
                     f"{read_proc('net/ipv4/tcp_allowed_congestion_control')})")
        shape(info, i)
