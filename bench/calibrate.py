"""Benchmark ``commsim calibrate``: run time, all-reduce bus bandwidth vs the shaped rate, and
how well the compute table reproduces fresh measurements.

Steps (needs root for the emulated runs; prints every figure with its target):
1. time ``commsim calibrate --quick --nodes 2``                         (target < 45 s);
2. time ``commsim calibrate --emulate 1gbit --nodes 4``                 (target < 3 min);
3. for 100mbit and 1gbit, the fitted all-reduce bandwidth (the ring's bus bandwidth) vs the
   shaped rate                                                          (target within 10%);
   the 100mbit run uses --quick compute (only its collectives matter here);
4. compute-fit reproduction: re-time batch sizes between the measured ones on one rank with the
   profile's threads and compare with ``ComputeTable.time_s``            (target < 5%).
Usage: python bench/calibrate.py [--skip-emulated]
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import commsim.profile as P
from commsim.units import fmt_rate, parse_rate_Bps


def timed(argv: list[str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(["commsim", *argv], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"commsim {' '.join(argv)} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - start


def compute_error(profile: P.Profile) -> float:
    """Max relative error of forward+backward+optimizer between measured batch sizes."""
    import torch

    from commsim.calibrate.compute import ComputeBench, measure_batch
    from commsim.calibrate.models import build_model

    torch.set_num_threads(profile.compute.threads_per_rank)
    bench = ComputeBench(lambda: build_model(profile.model_name), profile.input_shape)
    sizes = profile.compute.batch_sizes
    worst = 0.0
    for lo, hi in zip(sizes, sizes[1:]):
        b = (lo + hi) // 2
        rec = measure_batch(bench, b, warmup=1, reps=3)
        import numpy as np
        measured = sum(float(np.median(rec[f"{ph}_s"]))
                       for ph in ("forward", "backward", "optimizer"))
        predicted = sum(profile.compute.time_s(ph, b)
                        for ph in ("forward", "backward", "optimizer"))
        err = abs(predicted - measured) / measured
        worst = max(worst, err)
        print(f"  batch {b:4d}: measured {measured:.4f} s, table {predicted:.4f} s, "
              f"error {err:.1%}")
    return worst


def main() -> None:
    skip_emulated = "--skip-emulated" in sys.argv
    tmp = Path(tempfile.mkdtemp(prefix="commsim-bench-"))
    t = timed(["calibrate", "--quick", "--nodes", "2", "--out", str(tmp / "quick.json")])
    print(f"calibrate --quick --nodes 2: {t:.1f} s (target < 45 s)")
    if skip_emulated:
        return
    t = timed(["calibrate", "--emulate", "1gbit", "--nodes", "4", "--out", str(tmp / "1g.json")])
    print(f"calibrate --emulate 1gbit --nodes 4: {t:.1f} s (target < 180 s)")
    timed(["calibrate", "--emulate", "100mbit", "--nodes", "4", "--quick",
           "--out", str(tmp / "100m.json")])
    for rate, name in (("1gbit", "1g.json"), ("100mbit", "100m.json")):
        prof = P.load(tmp / name)
        bw = prof.collectives["all_reduce"].bandwidth_Bps
        shaped = parse_rate_Bps(rate)
        print(f"all-reduce bus bandwidth at {rate}: fitted {fmt_rate(bw)} vs shaped "
              f"{fmt_rate(shaped)}: {bw / shaped - 1:+.1%} (target within 10%)")
    print("compute table vs fresh timings (between measured sizes):")
    print(f"compute-fit reproduction error: max {compute_error(P.load(tmp / '1g.json')):.1%} "
          f"(target < 5%)")


if __name__ == "__main__":
    main()
