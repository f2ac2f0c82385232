"""Environment faults as a user meets them: every command, every option that names a path.

One list of scenarios, run by ``tests/test_environment_faults.py`` and counted by
``bench/faults.py``.  Each runs the real CLI (``python -m commsim ...``) in a subprocess, so that
the real standard output, exit code and interpreter shutdown are what is checked, with its
output folder in one of these states:

- ``missing``:  under /proc, where no folder can be made;
- ``readonly``: a read-only tmpfs, mounted in a private mount namespace (root, ``unshare``);
- ``full``:     a tmpfs filled to its last byte, in a private mount namespace (root);
- ``denied``:   a folder of another user, written with the capabilities that let root ignore
                permissions dropped (``setpriv``; root): what a non-root user meets;
- ``stdout-full`` / ``stdout-closed``: standard output is /dev/full, or a pipe closed after one
                line (``| head -1``);
- ``input``:    an input file that is hostile (nested deeper than any parser's stack) or
                unreadable.

Checks: the exit code (1 for the environment, 2 for bad input, 0 for a closed pipe), at most one
line on stderr naming the path, no traceback, and no file left behind in the output folder.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DROP = "dac_override,dac_read_search,fowner"


@dataclass(frozen=True)
class Scenario:
    """One fault: ``argv`` with ``{dir}`` (the faulty folder) and ``{ok}`` (a writable one)."""
    name: str
    where: str          # missing, readonly, full, denied, stdout-full, stdout-closed, input
    argv: tuple[str, ...]
    code: int           # the exit code expected
    names: str = "{dir}"  # what the one stderr line must contain

    @property
    def needs_root(self) -> bool:
        return self.where in ("readonly", "full", "denied", "input-denied")


@dataclass
class Outcome:
    scenario: Scenario
    returncode: int
    stderr: str
    left: list[str]     # files found in the output folder afterwards
    seconds: float

    def problems(self, names: str) -> list[str]:
        """What is wrong with this outcome (empty: the fault was handled as it should be)."""
        out = []
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        if self.returncode != self.scenario.code:
            out.append(f"exit code {self.returncode}, expected {self.scenario.code}")
        if "Traceback" in self.stderr or "Exception ignored" in self.stderr:
            out.append("a traceback on stderr")
        if self.scenario.code == 0:
            if lines:
                out.append(f"stderr is not empty: {lines[:2]}")
        elif len(lines) != 1:
            out.append(f"{len(lines)} lines on stderr, expected one: {lines[:3]}")
        elif names not in lines[0]:
            out.append(f"stderr does not name {names!r}: {lines[0]!r}")
        if self.left:
            out.append(f"left behind: {self.left}")
        return out


PROFILE_ARGS = ("--profile", "{ok}/nested.json")


def scenarios() -> list[Scenario]:
    s = []
    outputs = {
        "report --out": ("report", "--nodes", "1,2", "--strategies", "single,ring",
                         "--batch-sizes", "16", "--out", "{dir}/r.pdf"),
        "report --csv-dir": ("report", "--nodes", "1,2", "--strategies", "single,ring",
                             "--batch-sizes", "16", "--out", "{ok}/r.pdf",
                             "--csv-dir", "{dir}/csv"),
        "report --json-dir": ("report", "--nodes", "1,2", "--strategies", "single,ring",
                              "--batch-sizes", "16", "--out", "{ok}/r.pdf",
                              "--json-dir", "{dir}/json"),
        "trace --out": ("trace", "--strategy", "ddp", "--nodes", "4", "--out", "{dir}/t.json"),
        "validate --out": ("validate", "--profile", "{bundled}", "--out", "{dir}/v.json"),
        "live --out": ("live", "--strategy", "ring", "--nodes", "2", "--out", "{dir}/l.json"),
        "calibrate --out": ("calibrate", "--quick", "--out", "{dir}/p.json"),
    }
    for label, argv in outputs.items():
        for where in ("missing", "readonly", "denied", "full"):
            if where == "full" and label.startswith(("validate", "live")):
                continue  # these fail on a full disk only after their runs: preflight can't see
            folder = "{dir}/sub" if where == "missing" else "{dir}"
            s.append(Scenario(f"{label} ({where})", where,
                              tuple(a.replace("{dir}", folder) for a in argv), 1))
    s += [
        Scenario("predict --json > /dev/full", "stdout-full",
                 ("predict", "--strategy", "ring", "--nodes", "8", "--json"), 1,
                 names="standard output"),
        Scenario("sweep > /dev/full", "stdout-full", ("sweep", "--nodes", "1-16"), 1,
                 names="standard output"),
        Scenario("sweep | head -1", "stdout-closed", ("sweep", "--nodes", "1-64"), 0),
        Scenario("predict --per-rank | head -1", "stdout-closed",
                 ("predict", "--strategy", "ddp", "--nodes", "64", "--per-rank"), 0),
        Scenario("predict --profile nested 100000 deep", "input",
                 ("predict", "--strategy", "ring", "--nodes", "2") + PROFILE_ARGS, 2,
                 names="nested"),
        Scenario("report --validation nested 100000 deep", "input",
                 ("report", "--out", "{ok}/r.pdf", "--validation", "{ok}/nested.json"), 2,
                 names="nested"),
        Scenario("predict --profile larger than 64 MiB", "input",
                 ("predict", "--strategy", "ring", "--nodes", "2", "--profile", "{ok}/big.json"),
                 2, names="big.json"),
        Scenario("predict --profile unreadable", "input-denied",
                 ("predict", "--strategy", "ring", "--nodes", "2", "--profile",
                  "{dir}/locked.json"), 1, names="locked.json"),
    ]
    return s


def can_run(scenario: Scenario) -> str | None:
    """Why this machine cannot run the scenario (None: it can)."""
    if scenario.needs_root:
        if os.geteuid() != 0:
            return "needs root"
        if scenario.where in ("readonly", "full") and not shutil.which("unshare"):
            return "needs unshare"
        if scenario.where in ("denied", "input-denied") and not shutil.which("setpriv"):
            return "needs setpriv"
    return None


def _files(folder: Path) -> list[str]:
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name != "filler")


def run(scenario: Scenario, timeout_s: float = 120.0) -> Outcome:
    """Run one scenario in fresh temporary folders; its outcome (nothing is left on the host)."""
    from commsim.profile import default_profile_path

    with tempfile.TemporaryDirectory(prefix="commsim-envfault-") as tmp:
        base = Path(tmp)
        ok, bad = base / "ok", base / "bad"
        ok.mkdir()
        bad.mkdir()
        os.chmod(base, 0o755)
        (ok / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
        with open(ok / "big.json", "wb") as fh:  # sparse: takes no disk
            fh.truncate(65 * 1024 * 1024)
        folder = {"missing": Path("/proc"), "denied": bad, "input-denied": bad}.get(
            scenario.where, bad)
        if scenario.where == "input-denied":
            (bad / "locked.json").write_text("{}")
            os.chmod(bad / "locked.json", 0o600)
            os.chown(bad / "locked.json", 65534, 65534)
        if scenario.where == "denied":
            os.chown(bad, 65534, 65534)
            os.chmod(bad, 0o755)
        argv = [a.replace("{dir}", str(folder)).replace("{ok}", str(ok))
                .replace("{bundled}", str(default_profile_path())) for a in scenario.argv]
        cmd = [sys.executable, "-m", "commsim", *argv]
        listing = base / "listing.txt"
        if scenario.where in ("readonly", "full"):
            mount = (f"mount -t tmpfs -o size=64k tmpfs {bad} && "
                     + (f"(dd if=/dev/zero of={bad}/filler bs=4k >/dev/null 2>&1 || true) && "
                        if scenario.where == "full" else f"mount -o remount,ro {bad} && "))
            script = (f"{mount}{shlex.join(cmd)}; rc=$?; "
                      f"find {bad} -mindepth 1 ! -name filler > {listing}; exit $rc")
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
        elif scenario.where in ("denied", "input-denied"):
            cmd = ["setpriv", f"--inh-caps=-{DROP.replace(',', ',-')}",
                   f"--bounding-set=-{DROP.replace(',', ',-')}", *cmd]
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get(
            "PYTHONPATH", "")}
        start = time.monotonic()
        if scenario.where == "stdout-closed":
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=env, cwd=ok)
            proc.stdout.readline()
            proc.stdout.close()
            stderr = proc.stderr.read().decode("utf-8", "replace")
            code = proc.wait(timeout=timeout_s)
        else:
            out = open("/dev/full", "w") if scenario.where == "stdout-full" else subprocess.DEVNULL
            try:
                done = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, env=env, cwd=ok,
                                      timeout=timeout_s)
            finally:
                if out is not subprocess.DEVNULL:
                    out.close()
            code, stderr = done.returncode, done.stderr.decode("utf-8", "replace")
        seconds = time.monotonic() - start
        if scenario.where in ("readonly", "full"):  # the folder was only there, in its namespace
            left = sorted(ln for ln in listing.read_text().splitlines() if ln.strip())
        else:
            left = [f for f in _files(bad) if f != "locked.json"]
        left += [f"ok/{f}" for f in _files(ok) if f not in ("nested.json", "big.json")]
        return Outcome(scenario, code, stderr, left, seconds)


def expected_name(scenario: Scenario) -> str:
    """The text the stderr line must contain: the output's folder, or the named thing."""
    if scenario.names != "{dir}":
        return scenario.names
    if scenario.where == "missing":
        return "/proc/sub"
    return "/bad"
