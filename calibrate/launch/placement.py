"""Where a launch's ranks run and how they reach rank 0: on this host, or one per emulated node.

Local: every rank on this host, the master 127.0.0.1 on a free port, Gloo on ``lo``.
Emulated: rank r in node r of the cluster (``ip netns exec``: ``cluster.exec_argv``), the master
node 0's address on port 29500, and Gloo pinned to the node's interface (GLOO_SOCKET_IFNAME), so
that every byte goes over the shaped links.  Either way every rank shares this host's cores, so
LOCAL_WORLD_SIZE is the whole world.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commsim.errors import UserError

if TYPE_CHECKING:  # the cluster needs root tools only when used
    from commsim.calibrate.cluster import ClusterInfo

EMULATED_MASTER_PORT = 29500


@dataclass(frozen=True)
class Placement:
    """The rendezvous address, the interface Gloo uses, and (emulated) the cluster whose node r
    runs rank r."""
    master_addr: str
    master_port: int
    interface: str
    cluster_prefix: str | None = None

    def argv(self, rank: int, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` as rank ``rank``."""
        if self.cluster_prefix is None:
            return argv
        from commsim.calibrate import cluster

        return cluster.exec_argv(rank, argv, prefix=self.cluster_prefix)

    def env(self, rank: int, world: int, threads: int) -> dict[str, str]:
        """The variables rank ``rank`` gets on top of the launcher's environment."""
        return dict(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                    LOCAL_WORLD_SIZE=str(world), MASTER_ADDR=self.master_addr,
                    MASTER_PORT=str(self.master_port), GLOO_SOCKET_IFNAME=self.interface,
                    OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                    PYTHONUNBUFFERED="1")


def place(nodes: int, emulate: "ClusterInfo | None" = None, *, master_addr: str | None = None,
          master_port: int | None = None) -> Placement:
    """Where ``nodes`` ranks run: on ``emulate``'s first nodes, or on this host (None).
    ``master_addr``/``master_port`` override the rendezvous (tests of a wrong address)."""
    if emulate is None:
        return Placement(master_addr or "127.0.0.1", master_port or free_port(), "lo")
    if nodes > emulate.nodes:
        raise UserError(f"--nodes {nodes} needs {nodes} emulated nodes; the cluster has "
                        f"{emulate.nodes} (commsim cluster up --nodes {nodes})")
    return Placement(master_addr or emulate.addresses[0], master_port or EMULATED_MASTER_PORT,
                     emulate.interface, emulate.prefix)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
