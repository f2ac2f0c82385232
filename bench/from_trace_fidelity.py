"""Does a profile built from a profiler trace predict as well as one from ``commsim calibrate``?

The check of ``calibrate --from-trace``: on one link rate of the emulated cluster, the same live
cells are predicted from two profiles that share the network half and differ in where compute
comes from, and their median |error| is compared.  Target: the trace's within 2 points of the
calibration's (not worse by more than 2).

Steps:
1. calibrate on the largest node count at RATE (``commsim calibrate --emulate RATE``): profile A;
2. record VGG-11 training under ``torch.profiler`` in one process, with the threads a live rank
   gets, one trace per per-rank batch size of the cells (``bench/record_trace.record``), and
   build profile B from them with A's link and collective fits (``calibrate --from-trace
   TRACES --network A``): B's compute, gradient sizes and ready times come from the traces only;
3. run every cell (strategies x node counts at RATE) live, once;
4. predict every cell from A and from B (``analysis.validate``) and print both tables, each
   median / max |error|, and whether B's median is within 2 points of A's.
Before each step and cell a fixed compute probe (``bench/noise.SpeedProbe``) times the machine;
its spread is printed beside the result, and above bench/fidelity's bound (3 %) the result says
the machine was too unsteady to judge it.  Writes OUT/from_trace.md, OUT/from_trace.json, OUT/live.jsonl and both
profiles (the traces themselves stay in a temporary folder unless ``--keep-traces``).

Usage:  python bench/from_trace_fidelity.py [--rate 1gbit] [--nodes 2,3,4]
            [--strategies ps,ring,ddp] [--iterations 3] [--min-seconds 8] [--quick]
            [--cluster-prefix csim] [--out reports/from_trace]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from commsim.analysis.validate import (ValidationGrid, live_scenario, rows_table,  # noqa: E402
                                       summarize, table_columns, validate)
from commsim.api import predict  # noqa: E402
from commsim.cli.cluster import quiet_torch  # noqa: E402
from commsim.files import check_output  # noqa: E402
from commsim.profile import save  # noqa: E402
from commsim.progress import Progress  # noqa: E402
from commsim.spec import DEFAULT_GLOBAL_BATCH  # noqa: E402
from commsim.table import text_table  # noqa: E402
from commsim.units import parse_rate_Bps  # noqa: E402
# The machine probe, its verdict and the rate names are bench/fidelity's (beside this file).
from fidelity import describe_machine, machine_spread, machine_verdict, rate_name  # noqa: E402
from noise import SpeedProbe  # noqa: E402  (bench/noise.py)
from record_trace import record  # noqa: E402  (bench/record_trace.py)

WITHIN_POINTS = 2.0       # B's median |error| may exceed A's by at most this


def median_abs(rows: list[dict]) -> float:
    return summarize(rows, WITHIN_POINTS)["median_abs_error_pct"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="1gbit", help="the emulated link rate of every cell")
    ap.add_argument("--nodes", default="2,3,4", help="node counts of the cells; the largest "
                    "is calibrated")
    ap.add_argument("--strategies", default="ps,ring,ddp")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=8.0,
                    help="each live cell times at least this long (more iterations)")
    ap.add_argument("--global-batch", type=int, default=DEFAULT_GLOBAL_BATCH)
    ap.add_argument("--trace-iterations", type=int, default=6)
    ap.add_argument("--probe-seconds", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="quick calibration sweep (a smoke "
                    "test of this script, not a result)")
    ap.add_argument("--keep-traces", action="store_true", help="write the traces to OUT too")
    ap.add_argument("--cluster-prefix", default="csim", help="the emulated cluster to use "
                    "(another prefix keeps clear of one that other work is using)")
    ap.add_argument("--out", default="reports/from_trace")
    args = ap.parse_args(argv)
    quiet_torch(verbose=False)
    out = Path(args.out)
    for name in ("from_trace.md", "from_trace.json"):
        check_output(out / name, force=True)
    out.mkdir(parents=True, exist_ok=True)
    rate = parse_rate_Bps(args.rate)
    nodes = tuple(int(n) for n in args.nodes.split(","))
    strategies = tuple(args.strategies.split(","))
    top = max(nodes)
    command = "python bench/from_trace_fidelity.py " + " ".join(argv or sys.argv[1:])

    from commsim.calibrate import cluster
    from commsim.calibrate.from_trace import profile_from_traces
    from commsim.calibrate.launch.settings import default_threads
    from commsim.calibrate.live import LiveConfig, run_live
    from commsim.calibrate.runner import CalibrateOptions, run as calibrate

    t0 = time.monotonic()
    speed, probes = SpeedProbe(), []

    def probe(before: str) -> None:
        ms, _ = speed.window(args.probe_seconds)
        probes.append({"t_s": round(time.monotonic() - t0, 1), "ms_per_sample": ms,
                       "before": before})

    grid = ValidationGrid(strategies=strategies, nodes=nodes, rates_Bps=(rate,),
                          iterations=args.iterations, global_batch=args.global_batch)
    cells = len(strategies) * len(nodes)
    bar = Progress("from_trace", 2 + cells)
    with bar:
        bar.step(f"calibrating on {top} emulated nodes at {rate_name(rate)}")
        probe("calibration")
        cal_path = out / f"profile_calibrate_{top}nodes_{rate_name(rate)}.json"
        started = time.monotonic()
        a = calibrate(CalibrateOptions(
            out=cal_path, nodes=top, emulate_Bps=rate, quick=args.quick, force=True,
            cluster_prefix=args.cluster_prefix,
            command=f"bench/from_trace_fidelity.py: commsim calibrate --emulate "
                    f"{rate_name(rate)} --nodes {top}"))
        calibrate_s = time.monotonic() - started

        # The threads a live rank computes with: every rank of the emulated cluster shares
        # this machine's cores, so the most ranks set it (every cell's count gives the same
        # on a small machine; the trace is recorded once per batch size).
        threads = default_threads(top)
        batches = sorted({-(-args.global_batch // n) for n in nodes})
        bar.step(f"recording VGG-11 traces at batch {', '.join(map(str, batches))}, "
                 f"{threads} thread(s)")
        probe("traces")
        folder = out / "traces" if args.keep_traces else Path(
            tempfile.mkdtemp(prefix="commsim-from-trace-"))
        direct, paths = {}, []
        started = time.monotonic()
        for b in batches:
            path, timed = record(b, folder / f"vgg11_cpu_b{b}.json",
                                 iterations=args.trace_iterations, threads=threads)
            paths.append(path)
            direct[b] = timed
        trace_s = time.monotonic() - started
        b_prof = profile_from_traces(paths, network=a, metadata={
            "command": f"bench/from_trace_fidelity.py: commsim calibrate --from-trace "
                       f"{' '.join(p.name for p in paths)} --network {cal_path.name}"})
        save(b_prof, out / "profile_from_trace.json", force=True)

        measured: dict[tuple, dict] = {}
        live_log = out / "live.jsonl"
        live_log.unlink(missing_ok=True)
        info = cluster.up(top, rate, prefix=args.cluster_prefix)
        for st in strategies:
            for n in nodes:
                bar.step(f"live {st} on {n} nodes at {rate_name(rate)}")
                probe(f"{st} {n} nodes")
                sc = live_scenario(a, grid, n, rate, None, float(os.cpu_count() or 1))
                its = max(args.iterations,
                          math.ceil(args.min_seconds / predict(a, st, n, sc).iteration_s))
                kw = {**grid.live_kwargs(st), "iterations": its}
                result = run_live(LiveConfig(**kw), nodes=n, emulate=info, timeout_s=1200)
                measured[(st, n)] = result
                with open(live_log, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"rate_Bps": rate, **result}) + "\n")
        probe("end")

    def rows(profile) -> list[dict]:
        return validate(grid, profile, run_live=lambda st, n, _e: measured[(st, n)],
                        cluster_for_rate=lambda r, n: info, tolerance_pct=100.0).rows

    rows_a, rows_b = rows(a), rows(b_prof)
    med_a, med_b = median_abs(rows_a), median_abs(rows_b)
    machine = machine_spread(probes)
    ok = med_b <= med_a + WITHIN_POINTS
    verdict = (f"median |error| from the trace {med_b:.1f}% vs from calibrate {med_a:.1f}% "
               f"({med_b - med_a:+.1f} points; target within {WITHIN_POINTS:g}): "
               f"{'PASS' if ok else 'FAIL'}")
    noise = f"machine spread {machine_verdict(machine)}"
    def ms(x: float) -> str:
        return f"{1e3 * x:.1f} ms"
    compute_rows = [{"batch": b, "fwd_t": b_prof.compute.time_s("forward", b),
                     "fwd_c": a.compute.time_s("forward", b),
                     "bwd_t": b_prof.compute.time_s("backward", b),
                     "bwd_c": a.compute.time_s("backward", b),
                     "direct": sum(direct[b]["plain"])} for b in batches]
    compute_columns = (("batch/rank", "batch", str), ("forward: trace", "fwd_t", ms),
                       ("calibrate", "fwd_c", ms), ("backward: trace", "bwd_t", ms),
                       ("calibrate", "bwd_c", ms),
                       ("timed beside the trace (fwd+bwd+opt)", "direct", ms))
    md = [f"# `calibrate --from-trace` against `calibrate`, {rate_name(rate)}", "",
          f"`{command.strip()}`, wall {time.monotonic() - t0:.0f} s (calibration "
          f"{calibrate_s:.0f} s, traces {trace_s:.0f} s); VGG-11, synthetic data, global batch "
          f"{args.global_batch}; every cell measured once and predicted from both profiles.", "",
          describe_machine(machine), "",
          "## Compute per rank: read from the traces vs timed by calibrate", "", "```",
          text_table(compute_rows, columns=compute_columns), "```", "",
          "## Predicted from `commsim calibrate`", "", "```",
          text_table(rows_table(rows_a), columns=table_columns()), "```", "",
          "## Predicted from `commsim calibrate --from-trace` (same link and collective fits)",
          "", "```", text_table(rows_table(rows_b), columns=table_columns()), "```", "",
          f"**{verdict}**; {noise}.", ""]
    (out / "from_trace.md").write_text("\n".join(md), encoding="utf-8")
    (out / "from_trace.json").write_text(json.dumps({
        "command": command.strip(), "rate_Bps": rate, "nodes": list(nodes),
        "strategies": list(strategies), "threads": threads, "batches": batches,
        "calibrate_s": calibrate_s, "trace_s": trace_s, "direct": direct,
        "rows_calibrate": rows_a, "rows_from_trace": rows_b,
        "median_abs_error_pct": {"calibrate": med_a, "from_trace": med_b},
        "within_points": WITHIN_POINTS, "passed": ok, "machine": machine,
        "steady": machine["judged"]}, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
