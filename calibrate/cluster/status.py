"""Which emulated cluster is up: its recorded spec, checked against what the kernel has.

``up`` records the spec it built in ``/run/commsim/<prefix>.json``.  ``status`` reads it back
and trusts it only when every namespace, port and qdisc it names is still there, so a half-built
or half-removed cluster reads as none.  ``locked`` serialises building and tearing down one cluster between processes.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import re
from pathlib import Path

from commsim.calibrate.cluster.commands import run
from commsim.calibrate.cluster.spec import ClusterInfo, check_prefix, switch_port

STATE_DIR = Path("/run/commsim")
NETNS_DIR = Path("/run/netns")


def state_path(prefix: str) -> Path:
    return STATE_DIR / f"{check_prefix(prefix)}.json"


@contextlib.contextmanager
def locked(prefix: str):
    """Serialise up/down of one cluster between processes (two launchers starting at once)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / f"{check_prefix(prefix)}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def existing_namespaces(prefix: str) -> list[str]:
    """Every namespace that belongs to the cluster ``prefix`` (nodes and bridge)."""
    pattern = re.compile(rf"{re.escape(check_prefix(prefix))}-(n\d+|br)")
    names = [p.name for p in NETNS_DIR.iterdir()] if NETNS_DIR.is_dir() else []
    return ns_order(n for n in names if pattern.fullmatch(n))


def ns_order(names) -> list[str]:
    # Deterministic order for comparison and teardown: nodes first, the bridge last.
    return sorted(names, key=lambda n: (n.endswith("-br"), n))


def healthy(info: ClusterInfo) -> bool:
    """True when every namespace, port and qdisc of ``info`` is there (and nothing extra is)."""
    if existing_namespaces(info.prefix) != ns_order([*info.namespaces, info.bridge_namespace]):
        return False
    wanted = [(info.bridge_namespace, {switch_port(i) for i in range(info.nodes)})]
    wanted += [(ns, {info.interface}) for ns in info.namespaces]
    for ns, devices in wanted:
        proc = run(["tc", "-n", ns, "-j", "qdisc", "show"], what=f"reading qdiscs of {ns}",
                   check=False)
        if proc.returncode != 0:
            return False
        shaped = {q.get("dev") for q in json.loads(proc.stdout or "[]")
                  if q.get("kind") == info.qdisc}
        if not shaped >= devices:
            return False
    return True


def status(prefix: str = "csim") -> ClusterInfo | None:
    """The cluster ``prefix`` that is up, or None (nothing up, or only a broken half of one)."""
    path = state_path(prefix)
    try:
        info = ClusterInfo.from_json(path.read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return info if healthy(info) else None
