"""How long ``commsim report`` takes (target: under 20 s on the bundled profile).

1. Run ``commsim report`` in a fresh process (imports included, as a user would) on the bundled
   profile, or ``--profile``, with the default pages (nodes 1,2,3,4,8,16) plus CSV and JSON,
   into a temporary directory; ``--reps`` times.
2. Print wall and CPU seconds per run, the median, and the machine's load average (other work
   on the machine inflates wall time), then whether the median is under the target.
3. Check that the runs wrote byte-identical PDFs.

Usage:  python bench/report.py [--profile P] [--reps 2]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 20.0


def one_run(profile: str | None, folder: Path) -> tuple[float, float]:
    args = [sys.executable, "-m", "commsim", "report", "--out", str(folder / "report.pdf"),
            "--csv-dir", str(folder / "csv"), "--json-dir", str(folder / "json")]
    if profile:
        args += ["--profile", profile]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"commsim report failed ({done.returncode}): {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", help="profile JSON (default: the bundled one)")
    ap.add_argument("--reps", type=int, default=2)
    a = ap.parse_args()
    walls, pdfs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.reps):
            folder = Path(tmp) / str(k)
            wall, cpu = one_run(a.profile, folder)
            walls.append(wall)
            pdfs.append((folder / "report.pdf").read_bytes())
            print(f"run {k + 1}: wall {wall:.2f} s, cpu {cpu:.2f} s, "
                  f"pdf {len(pdfs[-1]) / 1024:.0f} KiB, "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    median = statistics.median(walls)
    print(f"commsim report on {a.profile or 'the bundled profile'}: median wall {median:.2f} s "
          f"(target < {TARGET_S:.0f} s: {'met' if median < TARGET_S else 'NOT met'}); "
          f"PDFs byte-identical: {all(p == pdfs[0] for p in pdfs)}")


if __name__ == "__main__":
    main()
