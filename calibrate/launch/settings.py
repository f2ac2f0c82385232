"""What every rank runs with, however it was launched: its threads and the collective timeout.

Co-located ranks share the host's cores: each gets ``cores // ranks on this host`` torch threads
(``default_threads``), pinned before any work (``set_threads``) so that they do not oversubscribe.
``runtime_info`` is what a rank reports about itself (recorded in profiles and live results).
"""
from __future__ import annotations

import os
import socket
from typing import Any

# Gloo's timeout for rendezvous and for every collective: how long a rank waits for a dead peer.
DEFAULT_COLLECTIVE_TIMEOUT_S = 30.0


def cpu_cores() -> int:
    """Cores this process may use (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_threads(ranks_per_host: int) -> int:
    """Threads per rank so that co-located ranks share the cores without oversubscription."""
    return max(1, cpu_cores() // max(1, ranks_per_host))


def set_threads(threads: int) -> dict[str, Any]:
    """Pin torch's intra-op threads (and OMP/MKL for libraries started later); report them."""
    import torch

    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    return runtime_info()


def runtime_info() -> dict[str, Any]:
    """What the rank runs with: threads, host, interface (recorded in profiles and traces)."""
    import torch

    return {"torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "host": socket.gethostname(),
            "interface": os.environ.get("GLOO_SOCKET_IFNAME"),
            "pid": os.getpid()}
