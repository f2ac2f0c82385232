"""bench/noise: how steady this machine's compute speed is with nothing else of ours running.

Why: ``bench/fidelity`` holds predictions to 3% median and 8% max error, and no model can be
closer to a live run than the machine is to itself.  This times what every live cell spends
most of its time in, VGG-11 forward + backward + SGD step (one thread, batch ``--batch``), back to
back for ``--minutes``, and reports the speed of each ``--window``-second window:
1. one untimed iteration, then windows: iterations until the window is full; per window the
   milliseconds per sample and the CPU time the hypervisor stole meanwhile (``/proc/stat``,
   % of all CPUs' time; Linux only, else blank);
2. summary: median, min and max over the windows, max / min, the largest deviation from the
   median, and the share of windows more than 3% and 8% from the median (the bounds of
   ``bench/fidelity``: a window like that is what a perfect model's error against one live run
   of that length would be).

Usage: python bench/noise.py [--minutes 2] [--window 5] [--batch 64]
"""
from __future__ import annotations

import argparse
import statistics
import time


def stolen() -> tuple[int, int] | None:
    """(steal, all) jiffies since boot, or None where /proc/stat is not there."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except OSError:
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


class SpeedProbe:
    """VGG-11 training iterations on one thread: the machine's compute speed now, in ms a
    sample.  ``bench/fidelity`` times one between its cells to know how steady the machine
    was over a run."""

    def __init__(self, batch: int = 64):
        import torch

        from commsim.calibrate.compute import ComputeBench
        from commsim.calibrate.models import VGG11_FACTORY, build_model

        torch.set_num_threads(1)
        self.batch = batch
        self.bench = ComputeBench(lambda: build_model(VGG11_FACTORY), (3, 32, 32))
        self.x, self.y = self.bench.batch(batch)
        self.bench.iteration(self.x, self.y)   # untimed: allocations, caches

    def window(self, seconds: float) -> tuple[float, int]:
        """(ms a sample, iterations) over iterations until ``seconds`` have passed."""
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            self.bench.iteration(self.x, self.y)
            n += 1
        return 1e3 * (time.perf_counter() - start) / (n * self.batch), n


def spread(speeds: list[float]) -> dict:
    """How far a run's probe windows were apart: median, max/min, the largest deviation from
    the median, and the share of windows more than 3% and 8% off (``bench/fidelity``'s
    bounds)."""
    med = statistics.median(speeds)
    dev = [abs(s / med - 1.0) for s in speeds]
    return {"windows": len(speeds), "median_ms": med, "min_ms": min(speeds),
            "max_ms": max(speeds), "max_over_min": max(speeds) / min(speeds),
            "largest_deviation": max(dev), "over_3pct": sum(d > 0.03 for d in dev),
            "over_8pct": sum(d > 0.08 for d in dev)}


def describe(s: dict) -> str:
    return (f"{s['windows']} windows: median {s['median_ms']:.2f} ms/sample, min "
            f"{s['min_ms']:.2f}, max {s['max_ms']:.2f} (max/min {s['max_over_min']:.2f}); "
            f"largest deviation from the median {s['largest_deviation']:.1%}; windows more "
            f"than 3% off: {s['over_3pct']}/{s['windows']}, more than 8% off: "
            f"{s['over_8pct']}/{s['windows']}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--window", type=float, default=5.0, help="seconds per window")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)

    probe = SpeedProbe(args.batch)
    speeds = []
    end = time.perf_counter() + 60.0 * args.minutes
    print(f"VGG-11, batch {args.batch}, one thread, {args.window:.0f} s windows:")
    while time.perf_counter() < end:
        before = stolen()
        ms, n = probe.window(args.window)
        after = stolen()
        speeds.append(ms)
        steal = (f"{100.0 * (after[0] - before[0]) / max(1, after[1] - before[1]):4.1f}%"
                 if before and after else "")
        print(f"  {time.strftime('%H:%M:%S')}  {speeds[-1]:6.2f} ms/sample  {n:3d} iterations"
              f"  stolen {steal}", flush=True)
    print(describe(spread(speeds)))


if __name__ == "__main__":
    main()
