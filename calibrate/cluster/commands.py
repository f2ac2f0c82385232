"""Running iproute2 for the emulated cluster: every failure is one line naming what was being done.

The cluster is built and inspected only through ``ip`` and ``tc`` (``ip -n NS`` / ``tc -n NS``
reach into a namespace without entering it); ``check_prereqs`` says up front, in one line, why
they cannot work here (not root, a tool missing, no network namespaces).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from commsim.errors import UserError

COMMAND_TIMEOUT_S = 20.0


def run(argv: list[str], *, what: str, check: bool = True,
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


def ip_batch(ns: str, commands: list[str], *, what: str) -> None:
    """Run many ``ip`` commands in one process inside ``ns`` (one fork instead of dozens)."""
    run(["ip", "-n", ns, "-batch", "-"], what=f"{what} in namespace {ns}",
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
    proc = run(["ip", "netns", "list"], what="listing network namespaces", check=False)
    if proc.returncode != 0:
        raise UserError("'ip netns' does not work here: "
                        + (" ".join(proc.stderr.split()) or f"exit {proc.returncode}"))


def read_proc(key: str) -> str:
    """A sysctl of the host (``net/ipv4/...``), or "unknown"."""
    try:
        return Path("/proc/sys", key).read_text().strip()
    except OSError:
        return "unknown"
