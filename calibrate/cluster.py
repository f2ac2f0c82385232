"""An emulated cluster of N nodes on this machine: network namespaces, veth links, a bridge, tc.

Each node is a network namespace ``<prefix>-n<i>`` holding one interface ``eth0`` with address
198.18.0.<i+1>/24.  The switch is a Linux bridge in its own namespace ``<prefix>-br``; the host's
network namespace is never touched (the veth pairs are created inside the bridge namespace and the
node end is moved straight to its node).  Rank r of an emulated run runs in node r
(``exec_argv``).

Building (``up``), in order:
  1. check root, ``ip``, ``tc`` and network-namespace support (``check_prereqs``);
  2. if the recorded spec (``/run/commsim/<prefix>.json``) equals the requested one and every
     namespace, port and qdisc is still there, do nothing; otherwise tear down (``down``);
  3. create the namespaces, the bridge, one veth pair per node, addresses, ``lo`` up;
  4. shape BOTH directions of every link with a token bucket filter: the node side's egress
     (node -> switch) and the bridge port's egress (switch -> node), so that each node has a
     full-duplex link of the given rate, like a port on a real switch;
  5. record the spec atomically; on any failure tear everything down again and raise.

Shaping (``shaping``): tbf lets ``burst`` bytes leave at memory speed, so a large burst makes short
messages look faster than a real link would send them.  The burst is therefore the smallest one
that still lets Gloo's ring all-reduce reach the TCP payload ceiling (95.6% of the rate) with 4
ranks on 2 cores: ``MIN_BURST_FRAMES`` frames, or the bytes the link sends in ``BURST_TIME_S`` if
that is more (late timer wake-ups otherwise leave the link idle, and a small bucket caps the GSO
packets small, which costs CPU per byte).  Measured bus bandwidth, 4 ranks: 100mbit (1-16 MiB)
with 2 frames 88-89 Mbit/s, 4 frames 93, 8 frames 95; 1gbit (16-64 MiB, 4-6 runs each) with
100 µs (GSO 8 KB) 835-939 Mbit/s, 300 µs (GSO 25 KB) 938-952, 1 ms 948-955, 300 µs with GSO held
at 8 KB 883-916.  The price: a message sent after an idle gap gets up to ~1 ms (100mbit) or
300 µs (1gbit) of line time free, which a real NIC never gives.  The queue ``limit`` is a
switch-like buffer of ``QUEUE_TIME_S`` at line rate (at least ``QUEUE_MIN_BYTES``), enough for
TCP to keep the link busy and for incast (gather) to queue a little before dropping, like a
shallow-buffered switch port.  Every link end also caps its GSO packet size below the burst (and
at the kernel's 64 KiB): tbf must otherwise split each 64 KiB TCP super-packet into frames, which
under CPU contention (load 7 on 2 cores) cut 1gbit throughput to ~50%; with the cap it stays
~90%.  Measured figures: see ``bench/cluster_throughput.py``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from commsim.errors import UserError
from commsim.units import fmt_rate, tc_rate

STATE_DIR = Path("/run/commsim")
NETNS_DIR = Path("/run/netns")
INTERFACE = "eth0"
BRIDGE = "br0"
SUBNET = "198.18.0"
PREFIX_LEN = 24
MAX_NODES = 250
QDISC = "tbf"
# Frame on the wire as tbf counts it (IP MTU 1500 + Ethernet header).
FRAME_BYTES = 1514
MIN_BURST_FRAMES = 8
GSO_DEFAULT_BYTES = 65536  # the kernel's default gso_max_size
BURST_TIME_S = 300e-6
QUEUE_TIME_S = 5e-3
QUEUE_MIN_BYTES = 64 * 1024
# Reno, not the host's default: the host here runs BBR, whose pacing gain cycle and ProbeRTT left
# large Gloo all-reduces at 81-83% of 100mbit (2 ranks, 16-64 MiB) and 865-875 Mbit/s at 1gbit
# with 4 ranks, where Reno reaches 91% and 900-925 Mbit/s (5 timed all-reduces per size;
# docs/emulated-cluster.md).  Linux's usual default, CUBIC, behaves as Reno at LAN round-trip times
# (its TCP-friendly region) but may not be set in a namespace unless the host allows it; Reno
# always is allowed.
DEFAULT_TCP_CONGESTION = "reno"
COMMAND_TIMEOUT_S = 20.0
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


# --------------------------------------------------------------------------- names and plans

def _check_prefix(prefix: str) -> str:
    # Interface and namespace names stay short and shell-safe; the prefix also names the state file.
    if not _PREFIX_RE.fullmatch(prefix):
        raise UserError(f"cluster prefix {prefix!r} must be 1-10 lowercase letters/digits, "
                        f"starting with a letter")
    return prefix


def namespace(node: int, prefix: str = "csim") -> str:
    """Network namespace of node ``node``: ``csim-n0``, ``csim-n1``..."""
    if node < 0:
        raise UserError(f"node {node} must be >= 0")
    return f"{_check_prefix(prefix)}-n{node}"


def bridge_namespace(prefix: str = "csim") -> str:
    return f"{_check_prefix(prefix)}-br"


def address(node: int) -> str:
    """IPv4 address of node ``node`` (no prefix length): 198.18.0.<node+1>."""
    if not 0 <= node < MAX_NODES:
        raise UserError(f"node {node} out of range 0..{MAX_NODES - 1}")
    return f"{SUBNET}.{node + 1}"


def _port(node: int) -> str:
    """The bridge-side end of node ``node``'s link, inside the bridge namespace."""
    return f"p{node}"


def shaping(bandwidth_Bps: float) -> tuple[int, int, int]:
    """(burst_bytes, limit_bytes, gso_max_bytes) of each end of a link shaped to the rate.

    gso_max_bytes caps the size of the TSO/GSO super-packets TCP hands to the link so that one
    fits the bucket whole (at rates where the bucket holds at least three frames): tbf would otherwise cut every 64 KiB GSO packet into 1514-byte
    segments, and under CPU contention (ranks computing) that halved the 1gbit throughput."""
    burst = max(MIN_BURST_FRAMES * FRAME_BYTES, round(bandwidth_Bps * BURST_TIME_S))
    limit = max(QUEUE_MIN_BYTES, round(bandwidth_Bps * QUEUE_TIME_S), 2 * burst)
    # Two thirds: the headers tc adds back per segment stay within the burst.  A cap below two
    # frames would make TCP send one frame per packet, which cost ~3% at 100mbit, while tbf
    # splitting GSO packets is cheap at such low rates: keep the default there.
    gso = (min(burst * 2 // 3, GSO_DEFAULT_BYTES) if burst * 2 // 3 >= 2 * FRAME_BYTES
           else GSO_DEFAULT_BYTES)
    return int(burst), int(limit), int(gso)


def plan(nodes: int, bandwidth_Bps: float, prefix: str = "csim",
         tcp_congestion: str | None = None) -> ClusterInfo:
    """The ClusterInfo that ``up`` would build; validates the arguments.

    ``tcp_congestion`` None means ``DEFAULT_TCP_CONGESTION`` (Reno); another one must be in the
    host's net.ipv4.tcp_allowed_congestion_control (reno always is)."""
    _check_prefix(prefix)
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


def _read_proc(key: str) -> str:
    try:
        return Path("/proc/sys", key).read_text().strip()
    except OSError:
        return "unknown"


def _host_tcp_congestion() -> str:
    return _read_proc("net/ipv4/tcp_congestion_control")


def _state_path(prefix: str) -> Path:
    return STATE_DIR / f"{_check_prefix(prefix)}.json"


# --------------------------------------------------------------------------- running commands

def _run(argv: list[str], *, what: str, check: bool = True,
         stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run an iproute2 command; a failure becomes a one-line UserError naming ``what``."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              input=stdin)
    except FileNotFoundError:
        raise UserError(f"{argv[0]} not found; install iproute2") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"{what}: '{' '.join(argv)}' did not finish in {COMMAND_TIMEOUT_S:g} s")\
            from None
    if check and proc.returncode != 0:
        err = " ".join((proc.stderr or proc.stdout).split()) or f"exit code {proc.returncode}"
        raise UserError(f"{what}: '{' '.join(argv)}' failed: {err}")
    return proc


def _ip_batch(ns: str, commands: list[str], *, what: str) -> None:
    """Run many ``ip`` commands in one process inside ``ns`` (one fork instead of dozens)."""
    _run(["ip", "-n", ns, "-batch", "-"], what=f"{what} in namespace {ns}",
         stdin="\n".join(commands) + "\n")


def check_prereqs() -> None:
    """Raise UserError (one line) unless we are root and ``ip``, ``tc`` and netns work here."""
    if os.geteuid() != 0:
        raise UserError("the emulated cluster needs root (network namespaces and tc); "
                        "run as root, e.g. with sudo")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise UserError(f"'{tool}' not found; install iproute2 (apt-get install iproute2)")
    if not Path("/proc/self/ns/net").exists():
        raise UserError("this kernel does not support network namespaces (/proc/self/ns/net "
                        "is missing)")
    proc = _run(["ip", "netns", "list"], what="listing network namespaces", check=False)
    if proc.returncode != 0:
        raise UserError("'ip netns' does not work here: "
                        + (" ".join(proc.stderr.split()) or f"exit {proc.returncode}"))


def _existing_namespaces(prefix: str) -> list[str]:
    """Every namespace that belongs to the cluster ``prefix`` (nodes and bridge)."""
    pattern = re.compile(rf"{re.escape(_check_prefix(prefix))}-(n\d+|br)")
    names = [p.name for p in NETNS_DIR.iterdir()] if NETNS_DIR.is_dir() else []
    return _ns_order(n for n in names if pattern.fullmatch(n))


def _ns_order(names) -> list[str]:
    # Deterministic order for comparison and teardown: nodes first, the bridge last.
    return sorted(names, key=lambda n: (n.endswith("-br"), n))


# --------------------------------------------------------------------------- building

def _build(info: ClusterInfo) -> None:
    br = info.bridge_namespace
    rate = tc_rate(info.bandwidth_Bps)
    tbf = f"tbf rate {rate} burst {info.burst_bytes} limit {info.limit_bytes}"
    for ns in (br, *info.namespaces):
        _run(["ip", "netns", "add", ns], what=f"creating namespace {ns}")
    # addrgenmode none: no IPv6 link-local address, so no neighbour-discovery chatter shows up in
    # the byte counters that live runs report.
    cmds = ["link set lo up",
            f"link add {BRIDGE} type bridge forward_delay 0 stp_state 0",
            f"link set {BRIDGE} addrgenmode none"]
    for i, ns in enumerate(info.namespaces):
        # Created inside the bridge namespace, node end moved straight to its node: nothing ever
        # appears in the host namespace.
        cmds += [f"link add {_port(i)} type veth peer name {info.interface} netns {ns}",
                 f"link set {_port(i)} addrgenmode none gso_max_size {info.gso_max_bytes}",
                 f"link set {_port(i)} master {BRIDGE}",
                 f"link set {_port(i)} up"]
    cmds.append(f"link set {BRIDGE} up")
    _ip_batch(br, cmds, what="building the bridge")
    for i, ns in enumerate(info.namespaces):
        _ip_batch(ns, ["link set lo up",
                       f"link set {info.interface} addrgenmode none gso_max_size "
                       f"{info.gso_max_bytes}",
                       f"addr add {info.addresses[i]}/{PREFIX_LEN} dev {info.interface}",
                       f"link set {info.interface} up"], what=f"configuring node {i}")
        if info.tcp_congestion != _host_tcp_congestion():
            # Only those in the host's tcp_allowed_congestion_control may be set in a netns.
            _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                  f"net.ipv4.tcp_congestion_control={info.tcp_congestion}"],
                 what=f"setting TCP congestion control {info.tcp_congestion!r} in {ns} (allowed: "
                      f"{_read_proc('net/ipv4/tcp_allowed_congestion_control')})")
        _run(["tc", "-n", ns, "qdisc", "replace", "dev", info.interface, "root", *tbf.split()],
             what=f"shaping node {i} egress ({ns} {info.interface})")
        _run(["tc", "-n", br, "qdisc", "replace", "dev", _port(i), "root", *tbf.split()],
             what=f"shaping the switch port to node {i} ({br} {_port(i)})")


def _healthy(info: ClusterInfo) -> bool:
    """True when every namespace, port and qdisc of ``info`` is there (and nothing extra is)."""
    if _existing_namespaces(info.prefix) != _ns_order([*info.namespaces, info.bridge_namespace]):
        return False
    wanted = [(info.bridge_namespace, {_port(i) for i in range(info.nodes)})]
    wanted += [(ns, {info.interface}) for ns in info.namespaces]
    for ns, devices in wanted:
        proc = _run(["tc", "-n", ns, "-j", "qdisc", "show"], what=f"reading qdiscs of {ns}",
                    check=False)
        if proc.returncode != 0:
            return False
        shaped = {q.get("dev") for q in json.loads(proc.stdout or "[]")
                  if q.get("kind") == info.qdisc}
        if not shaped >= devices:
            return False
    return True


@contextlib.contextmanager
def _locked(prefix: str):
    """Serialise up/down of one cluster between processes (two launchers starting at once)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / f"{_check_prefix(prefix)}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def status(prefix: str = "csim") -> ClusterInfo | None:
    """The cluster ``prefix`` that is up, or None (nothing up, or only a broken half of one)."""
    path = _state_path(prefix)
    try:
        info = ClusterInfo.from_json(path.read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return info if _healthy(info) else None


def up(nodes: int, bandwidth_Bps: float, *, prefix: str = "csim",
       tcp_congestion: str | None = None) -> ClusterInfo:
    """Build (or keep) an emulated cluster of ``nodes`` nodes, each link shaped to the rate.

    ``tcp_congestion``: see ``plan``; Reno by default."""
    want = plan(nodes, bandwidth_Bps, prefix, tcp_congestion)
    check_prereqs()
    with _locked(prefix):
        if status(prefix) == want:
            # Same spec already up: only undo a fault injection that was left behind.
            for node, is_up in link_states(prefix).items():
                if not is_up:
                    set_link(node, True, prefix)
            return want
        _down_unlocked(prefix)
        try:
            _build(want)
            tmp = _state_path(prefix).with_suffix(".tmp")
            tmp.write_text(want.to_json())
            os.replace(tmp, _state_path(prefix))
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
        for node, is_up in link_states(prefix).items():
            if not is_up:  # a fault injection left behind
                set_link(node, True, prefix)
        return info
    return up(nodes, bandwidth_Bps, prefix=prefix)


def down(prefix: str = "csim") -> int:
    """Remove every namespace of cluster ``prefix`` (also a half-built one) and its state file.

    Returns the number of namespaces removed; never fails when nothing exists."""
    _check_prefix(prefix)
    if not NETNS_DIR.is_dir() and not _state_path(prefix).exists():
        return 0  # nothing was ever built: do not even create the lock file
    with _locked(prefix):
        return _down_unlocked(prefix)


def _down_unlocked(prefix: str) -> int:
    _state_path(prefix).unlink(missing_ok=True)
    names = _existing_namespaces(prefix)
    removed = 0
    for ns in names:
        # Deleting a namespace destroys the veth ends in it, and with them their peers.
        proc = _run(["ip", "netns", "delete", ns], what=f"deleting namespace {ns}", check=False)
        if proc.returncode == 0:
            removed += 1
        elif (NETNS_DIR / ns).exists():
            raise UserError(f"could not delete namespace {ns}: {' '.join(proc.stderr.split())}")
    return removed


# --------------------------------------------------------------------------- using a cluster

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
    proc = _run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", INTERFACE],
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
    proc = _run(["ip", "-n", bridge_namespace(prefix), "link", "set", _port(node),
                 "up" if up else "down"], what=f"setting node {node}'s link", check=False)
    if proc.returncode != 0:
        raise UserError(f"node {node} ({ns}) has no link on the switch; is the cluster up? "
                        f"(commsim cluster status)")


def link_states(prefix: str = "csim") -> dict[int, bool]:
    """{node: link is up at the switch} for every node port of cluster ``prefix`` ({} if none)."""
    proc = _run(["ip", "-n", bridge_namespace(prefix), "-j", "link", "show"],
                what="reading the switch ports", check=False)
    if proc.returncode != 0:
        return {}
    states = {}
    for link in json.loads(proc.stdout or "[]"):
        m = re.fullmatch(r"p(\d+)", link.get("ifname", ""))
        if m:
            states[int(m.group(1))] = "UP" in link.get("flags", [])
    return dict(sorted(states.items()))


# --------------------------------------------------------------------------- throughput test

_SERVER = r"""
import json, socket, sys, time
addr, timeout = sys.argv[1], float(sys.argv[2])
srv = socket.socket()
srv.bind((addr, 0))
srv.listen(1)
srv.settimeout(timeout)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.settimeout(timeout)
buf = bytearray(1 << 20)
first = conn.recv_into(buf)
t0 = time.perf_counter()
n = 0
while True:
    k = conn.recv_into(buf)
    if not k:
        break
    n += k
    t1 = time.perf_counter()
conn.close()
print(json.dumps({"bytes": n, "seconds": (t1 - t0) if n else 0.0}), flush=True)
"""

_CLIENT = r"""
import socket, sys, time
addr, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection((addr, port), timeout=5)
chunk = b"\0" * (256 * 1024)
end = time.perf_counter() + seconds
while time.perf_counter() < end:
    s.sendall(chunk)
s.shutdown(socket.SHUT_WR)
s.recv(1)
s.close()
"""


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
    server = subprocess.Popen(exec_argv(dst, [sys.executable, "-c", _SERVER, dst_addr,
                                              str(limit_s)], prefix),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        port = server.stdout.readline().strip()
        if not port.isdigit():
            server.wait(5)
            raise UserError(f"throughput server on node {dst} ({namespace(dst, prefix)}) did not "
                            f"start: {_last_line(server.stderr.read())}")
        client = subprocess.Popen(exec_argv(src, [sys.executable, "-c", _CLIENT, dst_addr, port,
                                                  str(seconds)], prefix),
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
