"""bench/fidelity: predicted vs measured iteration time on the emulated cluster.

Grid: strategies ps, ring, ddp x nodes 2, 3, 4 x link rates 100mbit and 1gbit; VGG-11 on
synthetic CIFAR-10-shaped data, global batch 256.  Steps:

1. per link rate (each is a different cluster), calibrate once before its cells:
   ``commsim calibrate --emulate RATE --nodes 4`` (the main profile) and ``--nodes 2`` (the
   extrapolation profile); print each calibration's all-reduce bus bandwidth against the rate;
2. run every cell of that rate live (``commsim live``: median of the timed iterations, first
   dropped) in ``--passes`` passes, the second in reverse order, so each cell is measured at two
   times a few minutes apart and drift of this shared machine's speed (~+-8% over tens of
   seconds) reaches the cells evenly; each pass times at least ``--iterations`` iterations and at
   least ``--min-seconds`` of them (from the cell's prediction).  A cell's measurement is the
   mean of its passes' medians; the passes' disagreement is printed as the noise floor (the
   error a perfect model would still show against one pass);
3. what-ifs, measured live too: the cells of a ``--third-rate`` (300 Mbit/s) that no profile
   was calibrated at, at the largest node count; with ``--second-model``, a second model
   calibrated with ``--model`` on the fastest link and its cells there;
4. predict every cell from its rate's 4-node profile; 3- and 4-node cells from its rate's
   2-node profile (node extrapolation); every cell from the *other* rates' 4-node profiles
   (link-rate what-ifs: both directions, and the third rate from both); the second model's
   cells from its own profile; and, unless ``--no-whatifs``, the what-ifs live runs support
   (ring and DDP with k=2 local aggregation, ring with groups of 2, DDP with the fp16 hook) on
   the fastest link at the largest node count;
5. between every calibration and every live run, time a fixed compute probe (VGG-11 on one
   thread, ``bench/noise.SpeedProbe``): the machine's own spread over the run is printed
   beside every table, and where it exceeds 3% the report says the bounds cannot be judged on
   this machine (the model is not tuned to such a run);
6. print the tables and the median / 90th percentile / max absolute error, and write
   ``reports/fidelity/fidelity.json`` and ``reports/fidelity/fidelity.md``; every live run's
   whole result (each rank's phases and iteration times) goes to ``live.jsonl`` beside them.

``--repredict DIR`` measures nothing: it re-fits DIR's calibrations from their raw samples and
predicts DIR's live cells again with the current model (how a model change is checked against
measurements already taken; the report says which run measured them).

Targets: calibrated cells (and the live what-ifs) median |error| <= 3 %, max <= 8 %; link-rate
what-ifs, node extrapolation and the second model median <= 5 %, max <= 10 %; judged only on a
machine whose own spread is <= 3 %.  Run as root:
    python bench/fidelity.py [--iterations 4] [--min-seconds 20] [--passes 2] [--out DIR] [--quick]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from commsim.analysis.validate import (ValidationGrid, live_scenario, rows_table, summarize,
                                      table_columns, validate)
from commsim import profile as P
from commsim.api import predict
from commsim.calibrate import cluster
from commsim.calibrate.live import LiveConfig, run_live
from commsim.calibrate.runner import CalibrateOptions, refit_profile, run as calibrate
from commsim.cli.cluster import quiet_torch
from commsim.files import atomic_write_text
from commsim.progress import Progress
from commsim.spec import measured_cpu_efficiency
from commsim.table import text_table
from commsim.units import fmt_rate, fmt_time, parse_rate_Bps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from noise import SpeedProbe, describe, spread  # noqa: E402  (bench/noise.py, beside this file)

TARGET_MEDIAN, TARGET_MAX = 3.0, 8.0          # calibrated cells
WHATIF_MEDIAN, WHATIF_MAX = 5.0, 10.0         # what was never measured: rates, nodes, models
SPREAD_BOUND = 0.03                           # a machine steadier than this can judge them


def rate_name(rate_Bps: float) -> str:
    """100mbit, 1000mbit: as ``--emulate`` takes it and fit for a file name."""
    return f"{rate_Bps * 8 / 1e6:g}mbit"


# Fields of a live record that ``validate.compare`` reads and that differ between passes.
PASS_MEANS = ("iteration_s", "compute_s", "comm_s", "exposed_comm_s", "bytes_sent_per_rank")


def combine(passes: list[dict]) -> dict:
    """Several live runs of one cell -> one record: the mean of the runs' medians (each the
    slowest rank's median over its iterations), the largest spread, and each pass's median
    under ``pass_iteration_s``."""
    out = dict(passes[0])
    for key in PASS_MEANS:
        vals = [r.get(key) for r in passes]
        out[key] = None if None in vals else statistics.fmean(vals)
    out["iteration_s_spread"] = max(r.get("iteration_s_spread") or 0.0 for r in passes)
    out["pass_iteration_s"] = [r["iteration_s"] for r in passes]
    return out


def noise_floor(measured: dict) -> list[dict]:
    """Per cell measured twice or more: how far its passes' medians are apart, in % of their
    mean (max - min): what even an exact model would show as error against one pass."""
    rows = []
    for (strategy, n, rate, variant), rec in measured.items():
        runs = rec.get("pass_iteration_s") or []
        if len(runs) > 1:
            rows.append({"strategy": " ".join(filter(None, (strategy, variant))), "nodes": n,
                         "rate_Bps": rate, "pass_iteration_s": runs,
                         "range_pct": 100 * (max(runs) - min(runs)) / statistics.fmean(runs)})
    return rows


LIVE_LOG = "live.jsonl"


def measure(cells, rate: float, profile, measured: dict, args, say, probe=None) -> None:
    """Every (grid, strategy, nodes) cell of one rate, live, in ``args.passes`` passes of
    alternating order; each pass times at least ``args.iterations`` iterations and, by the
    cell's prediction from ``profile``, ``args.min_seconds``.  Fills ``measured``."""
    emulate = cluster.up(max(n for _g, _s, n in cells), rate)
    runs: dict = {}
    for p in range(args.passes):
        for g, strategy, n in (cells if p % 2 == 0 else cells[::-1]):
            sc = live_scenario(profile, g, n, rate, None, float(os.cpu_count() or 1))
            its = max(args.iterations,
                      math.ceil(args.min_seconds / predict(profile, strategy, n, sc).iteration_s))
            say(f"live pass {p + 1}/{args.passes}: {strategy} {g.variant} on {n} nodes at "
                f"{rate_name(rate)}, {its} iterations")
            cfg = LiveConfig(**dataclasses.replace(g, iterations=its).live_kwargs(strategy))
            if probe is not None:
                probe(f"{strategy} {g.variant} {n} nodes {rate_name(rate)} pass {p + 1}")
            result = run_live(cfg, nodes=n, emulate=emulate, timeout_s=1200)
            runs.setdefault((strategy, n, rate, g.variant), []).append(result)
            # Every rank's phases and iterations, for questions the tables do not answer.
            with open(Path(args.out) / LIVE_LOG, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"pass": p + 1, "rate_Bps": rate, "variant": g.variant,
                                     **result}) + "\n")
    for key, passes in runs.items():
        measured[key] = combine(passes)


def profile_name(n: int, rate: float, model: str | None = None) -> str:
    """profile_4nodes_1000mbit.json; a second model's gets its factory's name appended."""
    suffix = f"_{model.rpartition(':')[2]}" if model else ""
    return f"profile_{n}nodes_{rate_name(rate)}{suffix}.json"


def machine_spread(probes: list[dict]) -> dict:
    """How steady the machine was over the run, from the compute probe timed before every
    calibration and live run: ``bench/noise.spread`` of the probe windows, and whether it is
    within ``SPREAD_BOUND`` (max/min - 1), the condition for judging the bounds."""
    import os as _os

    out = {"probes": probes, "cores": _os.cpu_count()}
    try:
        from commsim.calibrate.runner import cpu_model
        out["cpu"] = cpu_model()
    except Exception:  # noqa: BLE001 - a name for the report, nothing depends on it
        out["cpu"] = "unknown"
    speeds = [p["ms_per_sample"] for p in probes]
    if len(speeds) >= 2:
        out.update(spread(speeds))
        out["spread"] = out["max_over_min"] - 1.0
        out["judged"] = out["spread"] <= SPREAD_BOUND
    else:
        out["judged"] = False
    return out


def machine_verdict(m: dict) -> str:
    if "spread" not in m:
        return "not recorded by this run, so the bounds cannot be judged from it"
    return (f"{m['spread']:.1%} (max/min of {m['windows']} probes - 1)"
            + ("" if m["judged"] else f" exceeds {SPREAD_BOUND:.0%}: the bounds cannot be "
               "judged on this machine"))


def describe_machine(m: dict) -> str:
    head = f"Machine: {m.get('cpu', 'unknown')}, {m.get('cores')} cores."
    if "spread" not in m:
        return f"{head} Its compute speed was not probed during this run."
    return (f"{head} Compute speed over this run (VGG-11, one thread, before every "
            f"calibration and live cell): {describe(m)}; spread {machine_verdict(m)}.")


def calibration_row(prof, n: int, rate: float, wall_s: float, model: str | None = None) -> dict:
    """A calibration's figures for the Calibrations table (issue 3's busbw target)."""
    ar = prof.collectives["all_reduce"]
    return {"nodes": n, "rate_Bps": rate, "wall_s": wall_s, "model": model,
            "link_Bps": prof.network.bandwidth_Bps,
            "all_reduce_busbw_Bps": ar.bandwidth_Bps,
            "all_reduce_busbw_pct_of_rate": 100 * ar.bandwidth_Bps / rate,
            "contention_load": list(prof.network.contention_load),
            "contention_bandwidth_Bps": list(prof.network.contention_bandwidth_Bps),
            "contention_compute_speed": list(prof.network.contention_compute_speed),
            "cpu_efficiency": [list(p) for p in measured_cpu_efficiency(prof)]}


def measured_from_rows(data: dict, live: list[dict] = ()) -> dict:
    """The live measurements a fidelity.json holds (main, what-if, third-rate and second-model
    rows, the passes from the noise floor), keyed as ``main`` keys them: enough for
    ``validate.compare``; with the run's ``live`` records (``LIVE_LOG``), each cell's compute
    threads a rank too (what the prediction gives each rank)."""
    passes = {(r["strategy"], r["nodes"], r["rate_Bps"]): r["pass_iteration_s"]
              for r in data.get("noise_floor", {}).get("rows", [])}
    threads = {(r.get("strategy"), r.get("nodes"), r.get("rate_Bps"), r.get("variant", "")):
               r["threads_per_rank"] for r in live if r.get("threads_per_rank")}
    out = {}
    # The third rate's cells were calibrated at no rate: only the cross-rate rows hold them.
    third = [r for r in data.get("cross_rate", {}).get("rows", [])
             if r["rate_Bps"] == data.get("third_rate_Bps")]
    for row in (data["main"]["rows"] + data.get("whatifs", {}).get("rows", []) + third
                + data.get("second_model", {}).get("rows", [])):
        key = (row["strategy"], row["nodes"], row["rate_Bps"], row.get("variant", ""))
        rec = {"strategy": row["strategy"], "nodes": row["nodes"],
               "batch_per_rank": row["batch_per_rank"], "iteration_s": row["measured_s"],
               "iteration_s_spread": row["measured_spread_s"]}
        rec.update({k: row[f"measured_{k}"] for k in PASS_MEANS if k != "iteration_s"})
        if key in threads:
            rec["threads_per_rank"] = threads[key]
        label = " ".join(filter(None, (key[0], key[3])))
        if (label, key[1], key[2]) in passes:
            rec["pass_iteration_s"] = passes[(label, key[1], key[2])]
        out[key] = rec
    return out


class _Measured:
    """Stands in for the cluster when the cells were measured earlier (``--repredict``)."""

    def __init__(self, bandwidth_Bps: float):
        self.bandwidth_Bps = bandwidth_Bps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=4,
                    help="timed iterations per cell and pass, at least")
    ap.add_argument("--min-seconds", type=float, default=20.0,
                    help="time each cell's pass at least this long (iterations from the "
                         "prediction)")
    ap.add_argument("--passes", type=int, default=2,
                    help="measure every cell this many times, alternating the order")
    ap.add_argument("--strategies", default="ps,ring,ddp")
    ap.add_argument("--nodes", default="2,3,4")
    ap.add_argument("--rates", default="100mbit,1gbit")
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="quick calibration sweeps")
    ap.add_argument("--no-whatifs", dest="whatifs", action="store_false",
                    help="skip the what-if cells (k=2, g=2, fp16)")
    ap.add_argument("--third-rate", default="300mbit",
                    help="a link rate no profile is calibrated at: its cells (largest node "
                         "count) are predicted from the other rates' profiles ('' to skip)")
    ap.add_argument("--second-model", default="commsim.calibrate.models:wide_mlp",
                    help="a second --model factory (module:function), calibrated and measured "
                         "on the fastest link ('' to skip)")
    ap.add_argument("--probe-seconds", type=float, default=3.0,
                    help="the machine-speed probe's window before each calibration and cell")
    ap.add_argument("--repredict", metavar="DIR",
                    help="measure nothing: re-fit the calibrations saved in DIR from their raw "
                         "samples and predict DIR's live measurements again with this version "
                         "(to check a change to the model against measurements already taken)")
    ap.add_argument("--out", default="reports/fidelity")
    args = ap.parse_args(argv)
    quiet_torch(verbose=False)   # c10d's warnings from every rank mean nothing here
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nodes = tuple(int(n) for n in args.nodes.split(","))
    rates = tuple(parse_rate_Bps(r) for r in args.rates.split(","))
    strategies = tuple(args.strategies.split(","))
    command = "python bench/fidelity.py " + " ".join(argv or sys.argv[1:])
    t0 = time.monotonic()

    def grid(cell_nodes, rate, strategies=strategies, **whatif):
        return ValidationGrid(strategies=strategies, nodes=cell_nodes, rates_Bps=(rate,),
                              iterations=args.iterations, global_batch=args.global_batch,
                              **whatif)

    # The what-ifs that run live (issue 7): on the fastest link at the largest node count,
    # predicted from that rate's main profile.
    whatifs = [(grid((max(nodes),), max(rates), (st,), **w), st)
               for st, w in (("ring", {"sync_every": 2}), ("ring", {"group_size": 2}),
                             ("ddp", {"sync_every": 2}), ("ddp", {"compression": "fp16"}))
               ] if args.whatifs else []
    third = parse_rate_Bps(args.third_rate) if args.third_rate else None
    top = max(nodes)
    probes: list[dict] = []
    # The units of work, for the progress display: every calibration and every live run.
    cells = len(rates) * len(strategies) * len(nodes) + len(whatifs) \
        + (len(strategies) if third else 0) \
        + (len(strategies) * len(nodes) if args.second_model else 0)
    calibrations_planned = len(rates) * len({top, 2}) + (1 if args.second_model else 0)
    bar = Progress("fidelity", 0 if args.repredict else
                   calibrations_planned + args.passes * cells)
    say = bar.step
    measured_on: dict = {}                       # (a re-prediction: where its cells ran)
    if args.repredict:
        source = Path(args.repredict)
        data = json.loads((source / "fidelity.json").read_text())
        profiles, calibrations = {}, []
        for c in data["calibrations"]:
            name = profile_name(c["nodes"], c["rate_Bps"], c.get("model"))
            prof = refit_profile(P.load(source / name))
            if out.resolve() != source.resolve():  # the re-fitted profiles go with the report
                P.save(prof, out / name, force=True)
            profiles[(c["rate_Bps"], c["nodes"], c.get("model"))] = prof
            calibrations.append(calibration_row(prof, c["nodes"], c["rate_Bps"], c["wall_s"]))
        log = source / LIVE_LOG
        measured = measured_from_rows(data, [json.loads(line) for line in
                                             log.read_text().splitlines() if line.strip()]
                                      if log.exists() else [])
        probes = data.get("machine", {}).get("probes", [])
        third = data.get("third_rate_Bps")
        args.second_model = data.get("second_model_factory") or ""
        cluster_for_rate = lambda rate, n: _Measured(rate)  # noqa: E731
        measured_on = data.get("machine", {})   # (the machine the cells ran on, not this one)
        provenance = (f"`{command.strip()}`: the live cells and calibration samples of "
                      f"`{data['command'].strip()}` (wall {data['wall_s']:.0f} s, "
                      f"{data.get('passes', 1)} passes), predicted again from the re-fitted "
                      f"calibrations")
    else:
        speed = SpeedProbe()

        def probe(before: str) -> None:
            ms, _ = speed.window(args.probe_seconds)
            probes.append({"t_s": time.monotonic() - t0, "ms_per_sample": ms, "before": before})

        profiles, calibrations, measured = {}, [], {}
        cluster_for_rate = lambda rate, n: cluster.up(n, rate)  # noqa: E731
        (out / LIVE_LOG).unlink(missing_ok=True)   # this run's cells only (like fidelity.json)

        def calibrated(n: int, rate: float, model: str | None = None):
            say(f"calibrating on {n} emulated nodes at {rate_name(rate)}"
                + (f" ({model})" if model else ""))
            probe(f"calibration {n} nodes {rate_name(rate)}")
            started = time.monotonic()
            prof = calibrate(CalibrateOptions(
                out=out / profile_name(n, rate, model), nodes=n, emulate_Bps=rate,
                quick=args.quick, force=True, **({"model": model} if model else {}),
                command=f"bench/fidelity.py: commsim calibrate --emulate {rate_name(rate)} "
                        f"--nodes {n}" + (f" --model {model}" if model else "")), progress=None)
            calibrations.append(calibration_row(prof, n, rate, time.monotonic() - started,
                                                model))
            profiles[(rate, n, model)] = prof
            return prof

        # Each link rate is a different cluster: calibrate it once, right before its cells, at
        # the largest node count (main) and at 2 nodes (extrapolation), then measure its cells.
        for rate in rates:
            for n in dict.fromkeys((top, 2)):
                calibrated(n, rate)
            cells = [(grid(nodes, rate), st, n) for st in strategies for n in nodes]
            cells += [(g, st, top) for g, st in whatifs if rate == max(rates)]
            measure(cells, rate, profiles[(rate, top, None)], measured, args, say, probe)
        if third is not None:  # calibrated at no rate: its cells are what-ifs only
            measure([(grid((top,), third), st, top) for st in strategies], third,
                    profiles[(max(rates), top, None)], measured, args, say, probe)
        if args.second_model:
            second = calibrated(top, max(rates), args.second_model)
            measure([(grid(nodes, max(rates), model=args.second_model), st, n)
                     for st in strategies for n in nodes], max(rates), second, measured,
                    args, say, probe)
        provenance = f"`{command.strip()}`, wall {time.monotonic() - t0:.0f} s"

    def check(g: ValidationGrid, profile):
        def live(strategy, n, emulate):
            return measured[(strategy, n, emulate.bandwidth_Bps, g.variant)]
        return validate(g, profile, tolerance_pct=TARGET_MEDIAN, run_live=live,
                        cluster_for_rate=cluster_for_rate, progress=lambda _msg: None,
                        cores=measured_on.get("cores")).rows

    ext_nodes = tuple(n for n in nodes if n > 2)
    main_rows = [row for rate in rates
                 for row in check(grid(nodes, rate), profiles[(rate, top, None)])]
    ext_rows = [row for rate in rates if ext_nodes
                for row in check(grid(ext_nodes, rate), profiles[(rate, 2, None)])]
    whatif_rows = [row for g, _st in whatifs
                   for row in check(g, profiles[(max(rates), top, None)])]
    # Another link rate from one profile (the what-if a user asks): the same live cells,
    # predicted from the profile of every other rate, and the third rate's from all of them.
    # Each row says which profile predicted it (the table lists them in this order).
    cross_rows = [{**row, "profile_rate_Bps": other} for rate in rates for other in rates
                  if other != rate
                  for row in check(grid(nodes, rate), profiles[(other, top, None)])]
    cross_rows += [{**row, "profile_rate_Bps": other} for other in rates if third is not None
                   for row in check(grid((top,), third), profiles[(other, top, None)])]
    second_rows = ([row for row in check(grid(nodes, max(rates), model=args.second_model),
                                         profiles[(max(rates), top, args.second_model)])]
                   if args.second_model else [])
    targets = (TARGET_MEDIAN, TARGET_MAX)
    whatif_targets = (WHATIF_MEDIAN, WHATIF_MAX)
    sections = (("Calibrated at 4 nodes on each link", main_rows, targets),
                ("Calibrated at 2 nodes, predicting 3 and 4 (extrapolation)", ext_rows,
                 whatif_targets),
                ("Calibrated on another link rate (link-rate what-if): each rate's cells "
                 "from the other rate's profile, then the third rate's from each profile, "
                 "slowest link first", cross_rows,
                 whatif_targets),
                ("A second model, calibrated with --model", second_rows, whatif_targets),
                ("What-ifs run live: local aggregation (k), groups (g), fp16 compression",
                 whatif_rows, targets))
    machine = {**machine_spread(probes),
               **{k: measured_on[k] for k in ("cores", "cpu") if k in measured_on}}
    result = {"main": {"rows": main_rows, "summary": summarize(main_rows, TARGET_MEDIAN)},
              "extrapolation": {"rows": ext_rows, "summary": summarize(ext_rows, WHATIF_MEDIAN)},
              "whatifs": {"rows": whatif_rows, "summary": summarize(whatif_rows, TARGET_MEDIAN)},
              "cross_rate": {"rows": cross_rows,
                             "summary": summarize(cross_rows, WHATIF_MEDIAN)},
              "second_model": {"rows": second_rows,
                               "summary": summarize(second_rows, WHATIF_MEDIAN)},
              "calibrations": calibrations, "machine": machine, "third_rate_Bps": third,
              "second_model_factory": args.second_model or None,
              "noise_floor": {"rows": noise_floor(measured)},
              "targets": {"median_abs_error_pct": TARGET_MEDIAN, "max_abs_error_pct": TARGET_MAX,
                          "whatif_median_abs_error_pct": WHATIF_MEDIAN,
                          "whatif_max_abs_error_pct": WHATIF_MAX,
                          "machine_spread": SPREAD_BOUND},
              "wall_s": time.monotonic() - t0, "iterations": args.iterations,
              "min_seconds": args.min_seconds, "passes": args.passes,
              "command": command, "provenance": provenance}
    if args.repredict:
        result.update({k: data.get(k) for k in ("wall_s", "iterations", "min_seconds",
                                                 "passes")})
        result["measured_by"] = data["command"]
    lines = ["# bench/fidelity", "", f"{provenance}; VGG-11, synthetic data, global batch "
             f"{args.global_batch}; each cell measured in {result['passes']} passes (alternating "
             f"order), each timing at least {result['iterations']} iterations and "
             f"{result['min_seconds']:g} s.", ""]
    cal_table = text_table(calibrations, columns=(
        ("nodes", "nodes", str), ("link", "rate_Bps", rate_name),
        ("calibrate", "wall_s", lambda v: f"{v:.0f} s"),
        ("link fit", "link_Bps", fmt_rate), ("all_reduce busbw", "all_reduce_busbw_Bps", fmt_rate),
        ("% of rate", "all_reduce_busbw_pct_of_rate", lambda v: f"{v:.1f}%"),
        ("busbw under load", "contention_bandwidth_Bps",
         lambda v: ", ".join(fmt_rate(x) for x in v[1:]) or "-"),
        ("compute kept", "contention_compute_speed",
         lambda v: ", ".join(f"{x:.0%}" for x in v[1:]) or "-"),
        ("CPU efficiency", "cpu_efficiency",
         lambda v: ", ".join(f"{x:.2f} at {b:g}" for b, x in (v or [])[1:]) or "-")))
    print(f"\nCalibrations (issue 3: all-reduce busbw within 10% of the rate)\n{cal_table}")
    lines += ["## Calibrations", "", "```", cal_table, "```", "",
              "busbw under load / compute kept: with 1, 2, 3 compute threads per rank "
              "(the contention the simulator applies while DDP overlaps).  CPU efficiency: "
              "compute speed beyond what sharing the cores explains, at that many busy "
              "threads (all ranks computing; 2 nodes: with co-runners to 4).", ""]
    machine_line = describe_machine(machine)
    print(f"\n{machine_line}")
    lines += [machine_line, ""]
    for title, rows, (med_target, max_target) in sections:
        if not rows:
            continue
        s = summarize(rows, med_target)
        table = text_table(rows_table(rows), columns=table_columns())
        verdict = ("PASS" if s["median_abs_error_pct"] <= med_target
                   and s["max_abs_error_pct"] <= max_target else "FAIL")
        summary = (f"|error| median {s['median_abs_error_pct']:.1f}%, p90 "
                   f"{s['p90_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}% over "
                   f"{s['cells']} cells (targets: median <= {med_target}%, max <= "
                   f"{max_target}%): {verdict}")
        links = sorted({r["rate_Bps"] for r in rows})
        if len(links) > 1:  # the links' noise differs: each one's own summary
            summary += "; by link: " + ", ".join(
                f"{rate_name(rate)} median {b['median_abs_error_pct']:.1f}% max "
                f"{b['max_abs_error_pct']:.1f}%"
                for rate in links
                for b in [summarize([r for r in rows if r["rate_Bps"] == rate], med_target)])
        summary += f"; machine spread {machine_verdict(machine)}"
        print(f"\n{title}\n{table}\n{summary}")
        lines += [f"## {title}", "", "```", table, "```", "", summary, ""]
    floor = result["noise_floor"]["rows"]
    if floor:
        ranges = sorted(r["range_pct"] for r in floor)
        result["noise_floor"].update(median_range_pct=statistics.median(ranges),
                                     max_range_pct=ranges[-1])
        table = text_table(floor, columns=(
            ("strategy", "strategy", str), ("nodes", "nodes", str),
            ("link", "rate_Bps", rate_name),
            ("passes", "pass_iteration_s", lambda v: ", ".join(fmt_time(x) for x in v)),
            ("range", "range_pct", lambda v: f"{v:.1f}%")))
        by_link = ", ".join(
            f"{rate_name(rate)} median {statistics.median(v):.1f}% max {max(v):.1f}%"
            for rate in sorted({r["rate_Bps"] for r in floor})
            for v in [[r["range_pct"] for r in floor if r["rate_Bps"] == rate]])
        summary = (f"passes apart (max - min, % of their mean): median "
                   f"{statistics.median(ranges):.1f}%, max {ranges[-1]:.1f}% over {len(ranges)} "
                   f"cells ({by_link}): the noise floor of one pass; the tables above use the "
                   f"mean of the passes")
        print(f"\nNoise floor: the same cell measured in each pass\n{table}\n{summary}")
        lines += ["## Noise floor: the same cell measured in each pass", "", "```", table, "```",
                  "", summary, ""]
    bar.close()
    atomic_write_text(out / "fidelity.json", json.dumps(result, indent=1, sort_keys=True) + "\n",
                      force=True)
    atomic_write_text(out / "fidelity.md", "\n".join(lines), force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
