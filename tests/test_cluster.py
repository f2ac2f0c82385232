"""The emulated cluster: names, argument checks, and (as root) a real 2-node cluster.

The real-cluster tests use their own prefix (``csimtest``) so they never touch a cluster a user
has up, and check that the host's network namespace is left exactly as it was.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commsim.calibrate import cluster
from commsim.cli import main
from commsim.errors import UserError

PREFIX = "csimtest"
RATE_Bps = 100e6 / 8  # 100mbit


# --------------------------------------------------------------------------- pure parts

def test_names_and_addresses():
    assert cluster.namespace(0) == "csim-n0"
    assert cluster.namespace(3, "csimtest") == "csimtest-n3"
    assert cluster.address(0) == "198.18.0.1"
    assert cluster.address(3) == "198.18.0.4"
    assert cluster.exec_argv(1, ["python", "-c", "pass"], "csimtest") == [
        "ip", "netns", "exec", "csimtest-n1", "python", "-c", "pass"]


@pytest.mark.parametrize("call", [
    lambda: cluster.plan(0, RATE_Bps),
    lambda: cluster.plan(251, RATE_Bps),
    lambda: cluster.plan(2, 0.0),
    lambda: cluster.plan(2, float("inf")),
    lambda: cluster.plan(2, RATE_Bps, prefix="Bad-Prefix"),
    lambda: cluster.namespace(-1),
    lambda: cluster.address(250),
    lambda: cluster.exec_argv(0, []),
])
def test_bad_arguments_are_user_errors(call):
    with pytest.raises(UserError):
        call()


@pytest.mark.parametrize("rate_Bps", [1e6 / 8, 100e6 / 8, 1e9 / 8, 10e9 / 8])
def test_shaping_burst_is_small_and_queue_holds_it(rate_Bps):
    burst, limit, gso = cluster.shaping(rate_Bps)
    if burst >= 3 * cluster.FRAME_BYTES:  # a GSO packet fits the bucket whole
        assert 2 * cluster.FRAME_BYTES <= gso < burst
    else:
        assert gso == cluster.GSO_DEFAULT_BYTES
    assert burst >= 2 * cluster.FRAME_BYTES  # a full frame must always fit
    # Short messages get at most max(MIN_BURST_FRAMES frames, BURST_TIME_S) of free line time.
    frames_s = cluster.MIN_BURST_FRAMES * cluster.FRAME_BYTES / rate_Bps
    assert burst / rate_Bps <= max(frames_s, cluster.BURST_TIME_S) + 1e-9
    assert gso <= cluster.GSO_DEFAULT_BYTES  # IPv4 TCP never builds larger GSO packets
    assert limit >= 2 * burst


def test_plan_records_the_spec():
    info = cluster.plan(3, RATE_Bps, prefix=PREFIX)
    assert info.addresses == ("198.18.0.1", "198.18.0.2", "198.18.0.3")
    assert info.namespaces == ("csimtest-n0", "csimtest-n1", "csimtest-n2")
    assert cluster.ClusterInfo.from_json(info.to_json()) == info


def test_not_root_is_a_one_line_user_error(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="root"):
        cluster.check_prereqs()
    assert main(["cluster", "status"]) == 2
    err = capsys.readouterr().err
    assert "root" in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_tc_is_a_user_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "tc" else real_which(name))
    with pytest.raises(UserError, match="iproute2"):
        cluster.check_prereqs()


def test_cli_bad_bandwidth_names_the_option(capsys):
    assert main(["cluster", "up", "--nodes", "2", "--bandwidth", "100"]) == 2
    assert "--bandwidth" in capsys.readouterr().err


# --------------------------------------------------------------------------- a real cluster

def _can_build() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None


needs_root = [pytest.mark.cluster,
              pytest.mark.skipif(not _can_build(), reason="needs root and iproute2")]


def _host_links() -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True)
    return {link["ifname"] for link in json.loads(out.stdout)}


def _our_namespaces() -> list[str]:
    netns = Path("/run/netns")
    return sorted(p.name for p in netns.iterdir() if p.name.startswith(PREFIX + "-")) \
        if netns.is_dir() else []


_CONNECT = """
import socket, sys
srv = socket.socket(); srv.bind((sys.argv[1], 0)); srv.listen(1); srv.settimeout(10)
print(srv.getsockname()[1], flush=True)
c, peer = srv.accept(); c.sendall(peer[0].encode()); c.close()
"""
_DIAL = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
print(s.recv(64).decode())
"""


def _tcp_connect(src: int, dst: int, timeout_s: float = 5.0) -> str:
    """Connect from node src to node dst over TCP; return the source address dst saw."""
    server = subprocess.Popen(cluster.exec_argv(dst, [sys.executable, "-c", _CONNECT,
                                                      cluster.address(dst)], PREFIX),
                              stdout=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        dial = subprocess.run(cluster.exec_argv(src, [sys.executable, "-c", _DIAL,
                                                      cluster.address(dst), port,
                                                      str(timeout_s)], PREFIX),
                              capture_output=True, text=True, timeout=timeout_s + 10)
        if dial.returncode != 0:
            raise ConnectionError(dial.stderr.strip().splitlines()[-1])
        return dial.stdout.strip()
    finally:
        server.kill()
        server.wait()


@pytest.fixture(scope="module")
def two_nodes():
    host_before = _host_links()
    cluster.down(PREFIX)
    info = cluster.up(2, RATE_Bps, prefix=PREFIX)
    yield info
    cluster.down(PREFIX)
    assert _host_links() == host_before, "the host's network namespace was changed"


@pytest.mark.usefixtures("two_nodes")
class TestRealCluster:
    pytestmark = needs_root

    def test_namespaces_and_addresses_exist(self, two_nodes):
        assert _our_namespaces() == ["csimtest-br", "csimtest-n0", "csimtest-n1"]
        for i in range(2):
            out = subprocess.run(["ip", "-n", cluster.namespace(i, PREFIX), "-j", "addr", "show",
                                  "dev", two_nodes.interface], capture_output=True, text=True,
                                 check=True)
            addrs = [a["local"] for a in json.loads(out.stdout)[0]["addr_info"]
                     if a["family"] == "inet"]
            assert addrs == [cluster.address(i)]

    def test_both_directions_are_shaped(self, two_nodes):
        for ns, dev in ((cluster.namespace(0, PREFIX), "eth0"), (two_nodes.bridge_namespace,
                                                                  "p0")):
            out = subprocess.run(["tc", "-n", ns, "-j", "qdisc", "show", "dev", dev],
                                 capture_output=True, text=True, check=True)
            assert [q["kind"] for q in json.loads(out.stdout)] == ["tbf"]
            link = subprocess.run(["ip", "-n", ns, "-d", "-j", "link", "show", "dev", dev],
                                  capture_output=True, text=True, check=True)
            assert json.loads(link.stdout)[0]["gso_max_size"] == two_nodes.gso_max_bytes

    def test_tcp_connect_between_nodes(self):
        assert _tcp_connect(0, 1) == cluster.address(0)
        assert _tcp_connect(1, 0) == cluster.address(1)

    def test_status_reads_back_the_spec(self, two_nodes):
        assert cluster.status(PREFIX) == two_nodes
        assert cluster.status("csimnone") is None

    def test_up_again_is_a_no_op(self, two_nodes):
        inode = Path("/run/netns/csimtest-n0").stat().st_ino
        assert cluster.up(2, RATE_Bps, prefix=PREFIX) == two_nodes
        assert Path("/run/netns/csimtest-n0").stat().st_ino == inode

    def test_link_down_blocks_traffic_and_up_restores_it(self):
        cluster.set_link(1, False, PREFIX)
        try:
            assert cluster.link_states(PREFIX) == {0: True, 1: False}
            with pytest.raises(ConnectionError):
                _tcp_connect(0, 1, timeout_s=1.0)
        finally:
            cluster.set_link(1, True, PREFIX)
        assert _tcp_connect(0, 1) == cluster.address(0)

    def test_throughput_and_counters_at_the_shaped_rate(self, two_nodes):
        before = cluster.interface_counters(0, PREFIX)
        rate = cluster.measure_throughput(0, 1, 1.0, prefix=PREFIX)
        after = cluster.interface_counters(0, PREFIX)
        assert 0.85 <= rate / two_nodes.bandwidth_Bps <= 1.01, rate / two_nodes.bandwidth_Bps
        sent = after["tx_bytes"] - before["tx_bytes"]
        assert sent >= 0.85 * two_nodes.bandwidth_Bps  # >= ~1 s of payload went out of eth0


@pytest.mark.cluster
@pytest.mark.skipif(not _can_build(), reason="needs root and iproute2")
def test_rebuild_and_down_clean_up_everything():
    prefix = "csimtest2"
    host_before = _host_links()
    try:
        # A half-built cluster (a stray node namespace, no bridge, no state file) is cleaned up.
        subprocess.run(["ip", "netns", "add", f"{prefix}-n7"], check=True)
        assert cluster.status(prefix) is None
        assert cluster.down(prefix) == 1
        three = cluster.up(3, RATE_Bps, prefix=prefix)
        assert cluster.status(prefix) == three
        # A different spec rebuilds: fewer nodes, no node namespace left over.
        t0 = time.monotonic()
        two = cluster.up(2, 2 * RATE_Bps, prefix=prefix)
        assert time.monotonic() - t0 < 10
        assert cluster.status(prefix) == two and two != three
        assert not Path(f"/run/netns/{prefix}-n2").exists()
    finally:
        removed = cluster.down(prefix)
    assert removed == 3
    assert cluster.down(prefix) == 0
    assert cluster.status(prefix) is None
    assert not [p for p in Path("/run/netns").iterdir() if p.name.startswith(prefix + "-")]
    assert _host_links() == host_before


@pytest.mark.cluster
@pytest.mark.skipif(not _can_build(), reason="needs root and iproute2")
def test_concurrent_up_builds_once():
    from concurrent.futures import ThreadPoolExecutor

    prefix = "csimtest3"
    try:
        with ThreadPoolExecutor(3) as pool:
            infos = list(pool.map(lambda _: cluster.up(2, RATE_Bps, prefix=prefix), range(3)))
        assert infos[0] == infos[1] == infos[2] == cluster.status(prefix)
    finally:
        assert cluster.down(prefix) == 3
