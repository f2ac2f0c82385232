"""bench/straggler: how much longer ps and ring ranks wait for each iteration's slowest rank
than the slowest rank's median compute (``analysis.straggler``), per live cell of a
``bench/fidelity`` run, and the median over them: the size a straggler term would have.

Usage: python bench/straggler.py [reports/fidelity/live.jsonl]
"""
from __future__ import annotations

import json
import statistics
import sys

from commsim.analysis.straggler import straggler_wait


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "reports/fidelity/live.jsonl"
    waits = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["strategy"] not in ("ps", "ring"):
                continue
            w = straggler_wait(r)
            if w is None:
                continue
            waits.append(w)
            print(f"pass {r.get('pass', '-')}  {r['rate_Bps'] * 8 / 1e6:6.0f} Mbit/s  "
                  f"{r['strategy']} {r.get('variant', '')} on {r['nodes']} nodes: {w:.3f}")
    if not waits:
        sys.exit(f"{path}: no ps or ring run with per-iteration phases of 2+ ranks")
    print(f"{len(waits)} runs: median {statistics.median(waits):.3f}, min {min(waits):.3f}, "
          f"max {max(waits):.3f}")


if __name__ == "__main__":
    main()
