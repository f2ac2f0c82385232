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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--window", type=float, default=5.0, help="seconds per window")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)

    import torch

    from commsim.calibrate.compute import ComputeBench
    from commsim.calibrate.models import VGG11_FACTORY, build_model

    torch.set_num_threads(1)
    bench = ComputeBench(lambda: build_model(VGG11_FACTORY), (3, 32, 32))
    x, y = bench.batch(args.batch)
    bench.iteration(x, y)
    speeds = []
    end = time.perf_counter() + 60.0 * args.minutes
    print(f"VGG-11, batch {args.batch}, one thread, {args.window:.0f} s windows:")
    while time.perf_counter() < end:
        before, start, n = stolen(), time.perf_counter(), 0
        while time.perf_counter() - start < args.window:
            bench.iteration(x, y)
            n += 1
        took, after = time.perf_counter() - start, stolen()
        speeds.append(1e3 * took / (n * args.batch))
        steal = (f"{100.0 * (after[0] - before[0]) / max(1, after[1] - before[1]):4.1f}%"
                 if before and after else "")
        print(f"  {time.strftime('%H:%M:%S')}  {speeds[-1]:6.2f} ms/sample  {n:3d} iterations"
              f"  stolen {steal}", flush=True)
    med = statistics.median(speeds)
    dev = [abs(s / med - 1.0) for s in speeds]
    print(f"{len(speeds)} windows: median {med:.2f} ms/sample, min {min(speeds):.2f}, max "
          f"{max(speeds):.2f} (max/min {max(speeds) / min(speeds):.2f}); largest deviation "
          f"from the median {max(dev):.1%}; windows more than 3% off: "
          f"{sum(d > 0.03 for d in dev)}/{len(dev)}, more than 8% off: "
          f"{sum(d > 0.08 for d in dev)}/{len(dev)}")


if __name__ == "__main__":
    main()
