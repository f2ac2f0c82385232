"""bench/fidelity: predicted vs measured iteration time on the emulated cluster.

Grid: strategies ps, ring, ddp x nodes 2, 3, 4 x link rates 100mbit and 1gbit; VGG-11 on
synthetic CIFAR-10-shaped data, global batch 256.  Steps:

1. calibrate once at the start: ``commsim calibrate --emulate 1gbit --nodes 4`` (the main
   profile) and ``--nodes 2`` (the extrapolation profile);
2. run every cell live once (``commsim live``: median of the timed iterations, first dropped);
3. predict every cell from the 4-node profile (other rate: the link scaled, the calibrated
   efficiency kept) and, separately, 3- and 4-node cells from the 2-node profile;
4. print both tables and the median / 90th percentile / max absolute error, and write
   ``reports/fidelity/fidelity.json`` and ``reports/fidelity/fidelity.md``.

Targets (issue 4): median |error| <= 3 %, max <= 8 %, for both.  Run as root:
    python bench/fidelity.py [--iterations 4] [--out reports/fidelity] [--quick]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from commsim.analysis.validate import ValidationGrid, rows_table, summarize, validate
from commsim.calibrate import cluster
from commsim.calibrate.live import LiveConfig, run_live
from commsim.calibrate.runner import CalibrateOptions, run as calibrate
from commsim.profile import atomic_write_text
from commsim.table import text_table
from commsim.units import fmt_time, parse_rate_Bps

TARGET_MEDIAN, TARGET_MAX = 3.0, 8.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--strategies", default="ps,ring,ddp")
    ap.add_argument("--nodes", default="2,3,4")
    ap.add_argument("--rates", default="100mbit,1gbit")
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="quick calibration sweeps")
    ap.add_argument("--out", default="reports/fidelity")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nodes = tuple(int(n) for n in args.nodes.split(","))
    rates = tuple(parse_rate_Bps(r) for r in args.rates.split(","))
    t0 = time.monotonic()

    def say(msg):
        print(f"[fidelity {time.monotonic() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    calib_rate = parse_rate_Bps("1gbit")
    profiles = {}
    for n in (max(nodes), 2):
        say(f"calibrating on {n} emulated nodes at 1gbit")
        path = out / f"profile_{n}nodes_1gbit.json"
        profiles[n] = calibrate(CalibrateOptions(out=path, nodes=n, emulate_Bps=calib_rate,
                                                 quick=args.quick, force=True,
                                                 command=f"bench/fidelity.py: commsim calibrate "
                                                         f"--emulate 1gbit --nodes {n}"),
                                progress=None)

    measured = {}

    def live(strategy, n, emulate):
        key = (strategy, n, emulate.bandwidth_Bps if emulate else None)
        if key not in measured:
            say(f"live {strategy} on {n} nodes at {key[2] * 8 / 1e6:g} Mbit/s")
            measured[key] = run_live(LiveConfig(strategy=strategy, global_batch=args.global_batch,
                                                iterations=args.iterations),
                                     nodes=n, emulate=emulate, timeout_s=1200)
        return measured[key]

    grid = ValidationGrid(strategies=tuple(args.strategies.split(",")), nodes=nodes,
                          rates_Bps=rates, iterations=args.iterations,
                          global_batch=args.global_batch)
    cluster_for_rate = lambda rate, n: cluster.up(n, rate)  # noqa: E731
    main_report = validate(grid, profiles[max(nodes)], tolerance_pct=TARGET_MEDIAN,
                           run_live=live, cluster_for_rate=cluster_for_rate, progress=say)
    ext_grid = ValidationGrid(strategies=grid.strategies, nodes=tuple(n for n in nodes if n > 2),
                              rates_Bps=rates, iterations=args.iterations,
                              global_batch=args.global_batch)
    ext_report = (validate(ext_grid, profiles[2], tolerance_pct=TARGET_MEDIAN, run_live=live,
                           cluster_for_rate=cluster_for_rate, progress=say)
                  if ext_grid.nodes else main_report.__class__(rows=(), summary={}))
    result = {"main": main_report.to_dict(), "extrapolation": ext_report.to_dict(),
              "targets": {"median_abs_error_pct": TARGET_MEDIAN, "max_abs_error_pct": TARGET_MAX},
              "wall_s": time.monotonic() - t0, "iterations": args.iterations,
              "command": "python bench/fidelity.py " + " ".join(argv or sys.argv[1:])}
    lines = ["# bench/fidelity", "", f"`{result['command'].strip()}`, wall "
             f"{result['wall_s']:.0f} s; VGG-11, synthetic data, global batch "
             f"{args.global_batch}, {args.iterations} timed iterations per cell.", ""]
    for title, report in (("Calibrated at 4 nodes", main_report),
                          ("Calibrated at 2 nodes, predicting 3 and 4 (extrapolation)",
                           ext_report)):
        if not report.rows:
            continue
        s = summarize(report.rows, TARGET_MEDIAN)
        table = text_table(rows_table(report.rows), columns=(
            ("strategy", "strategy", str), ("nodes", "nodes", str), ("link", "rate", str),
            ("predicted", "predicted_s", fmt_time), ("measured", "measured_s", fmt_time),
            ("spread", "spread_s", lambda v: "-" if v is None else fmt_time(v)),
            ("error", "error_pct", lambda v: f"{v:+.1f}%")))
        verdict = ("PASS" if s["median_abs_error_pct"] <= TARGET_MEDIAN
                   and s["max_abs_error_pct"] <= TARGET_MAX else "FAIL")
        summary = (f"|error| median {s['median_abs_error_pct']:.1f}%, p90 "
                   f"{s['p90_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}% over "
                   f"{s['cells']} cells (targets: median <= {TARGET_MEDIAN}%, max <= "
                   f"{TARGET_MAX}%): {verdict}")
        print(f"\n{title}\n{table}\n{summary}")
        lines += [f"## {title}", "", "```", table, "```", "", summary, ""]
    atomic_write_text(out / "fidelity.json", json.dumps(result, indent=1, sort_keys=True) + "\n",
                      force=True)
    atomic_write_text(out / "fidelity.md", "\n".join(lines), force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
