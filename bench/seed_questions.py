"""Answer, with numbers, each question of the seed documents (writes reports/seed_questions.md).

Predictions come from the bundled profile (measured by ``commsim calibrate --emulate 1gbit
--nodes 4``); measured cells come from ``reports/fidelity/fidelity.json`` when it exists.

    python bench/seed_questions.py [--profile P] [--out reports/seed_questions.md]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from commsim.api import Scenario, predict
from commsim.files import atomic_write_text
from commsim.profile import load, load_default
from commsim.units import fmt_bytes, fmt_rate, fmt_time

TASKS = (("Task 1 (single)", "single"), ("Task 2a (gather/scatter)", "ps"),
         ("Task 2b (all-reduce)", "ring"), ("Task 3 (DDP)", "ddp"))


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def measured_cells(path: Path) -> dict:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {(r["strategy"], r["nodes"], round((r["rate_Bps"] or 0) * 8 / 1e6)): r
            for r in data["main"]["rows"]}


def _task_trends(speed: dict) -> str:
    """What the speedups of the tasks' table ({strategy: {nodes: speedup}}) show, said from its
    numbers (the seed report: gather/scatter stops improving, all-reduce keeps improving, DDP is
    best)."""
    parts = []
    for s, name in (("ps", "gather/scatter"), ("ring", "all-reduce"), ("ddp", "DDP")):
        best = max(speed[s], key=speed[s].get)
        parts.append(f"{name} keeps improving up to 4 nodes" if best == 4 else
                     f"{name} is fastest at {best} nodes and slower beyond")
    fastest = {max(speed, key=lambda s: speed[s][n]) for n in (2, 3, 4)}
    why = ("; gather/scatter is limited by rank 0's link, which carries (p-1) copies of every "
           "gradient each way")
    if fastest == {"ddp"}:
        why += ", and DDP is fastest at every node count because it hides communication " \
               "behind backward"
    return "Predicted, a host per node: " + ", ".join(parts) + why + "."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile")
    ap.add_argument("--fidelity", default="reports/fidelity/fidelity.json")
    ap.add_argument("--traffic-accuracy", default="reports/traffic_accuracy.json")
    ap.add_argument("--out", default="reports/seed_questions.md")
    args = ap.parse_args(argv)
    prof = load(args.profile) if args.profile else load_default()
    measured = measured_cells(Path(args.fidelity))
    md = ["# The seed documents' questions, answered", "",
          f"Profile: `{prof.metadata.get('command', '?')}` ({prof.metadata.get('created', '?')}, "
          f"{prof.metadata.get('cores', '?')} cores, torch {prof.metadata.get('torch_version')}). "
          "Predicted by `commsim predict` unless marked measured. Regenerate: "
          "`python bench/seed_questions.py`.", ""]

    # 1. Tasks 1-3 at 1-4 nodes (report 000, Table 1 and Figures 2-4)
    md += ["## Time per iteration and speedup of the four tasks, 1-4 nodes (global batch 256)",
           ""]
    rows, speed = [], {}
    for label, strategy in TASKS:
        for n in ((1,) if strategy == "single" else (2, 3, 4)):
            r = predict(prof, strategy, n)
            speed.setdefault(strategy, {})[n] = r.speedup
            m = measured.get((strategy, n, 1000))
            rows.append([label, n, fmt_time(r.iteration_s), f"{r.speedup:.2f}",
                         fmt_time(m["predicted_s"]) if m else "-",
                         fmt_time(m["measured_s"]) if m else "-",
                         f"{m['error_pct']:+.1f}%" if m else "-"])
    md += [table(["task", "nodes", "predicted, a host per node", "speedup",
                  "predicted, emulated", "measured, emulated", "error"], rows), "",
           "*A host per node*: what the profile predicts for real machines like the calibrated "
           "one. *Emulated*: the same prediction for the cluster `bench/fidelity` really ran "
           "(every rank on this machine's 2 shared cores, 1 Gbit/s links), its live median, and "
           "the error of that prediction (see `reports/fidelity/fidelity.md`).", "",
           _task_trends({s: speed[s] for s in ("ps", "ring", "ddp")}), ""]

    # 2. Lab Q1: batch size vs epoch time on one worker
    md += ["## Batch size vs time per epoch on one worker (lab question 1)", ""]
    rows = []
    for b in (32, 128, 512):
        r = predict(prof, "single", 1, Scenario(global_batch=b))
        rows.append([b, fmt_time(r.iteration_s), r.iterations_per_epoch, fmt_time(r.epoch_s),
                     f"{b / r.iteration_s:.0f}"])
    md += [table(["batch", "iteration", "iterations/epoch", "epoch", "samples/s"], rows), "",
           "Larger batches amortise per-iteration fixed costs (optimizer step, per-layer "
           "overheads) over more samples until the CPU's caches are exceeded.", ""]

    # 3. Lab Q2/Q3: DataParallel on 1, 2, 4 devices per batch size (weak scaling)
    md += ["## Speedup, compute and communication on 2 and 4 devices (lab questions 2 and 3)", "",
           "`dp` (torch.nn.DataParallel through device 0) with the batch size per device fixed "
           "(weak scaling), on the calibrated link:", ""]
    rows = []
    for b in (32, 128, 512):
        one = predict(prof, "single", 1, Scenario(global_batch=b))
        for d in (2, 4):
            r = predict(prof, "dp", d, Scenario(batch_per_rank=b))
            epoch = r.epoch_s
            speed = (one.iteration_s / b) / (r.iteration_s / (b * d))
            rows.append([b, d, fmt_time(epoch), f"{speed:.2f}", fmt_time(r.compute_s),
                         fmt_time(r.comm_s), fmt_rate(r.busbw_Bps),
                         f"{r.link_utilization:.0%}"])
    md += [table(["batch/device", "devices", "epoch", "speedup (weak)", "compute/iter",
                  "comm/iter", "busbw", "device 0 link busy"], rows), "",
           "Weak scaling (fixed batch per device) is what this measures; strong scaling (fixed "
           "global batch) splits the same work finer, so communication weighs more and the "
           "speedup is lower: e.g. "
           + _strong_example(prof) + ".", "",
           "Bandwidth utilisation follows the all-reduce cost model of Patarasuk & Yuan: "
           "T = 2(p-1)·α + 2(p-1)/p·n·β (+ (p-1)/p·n·γ reduction); utilisation = "
           "2(p-1)/p·n / (T·bandwidth) (nccl-tests' busbw / link).", ""]

    # 4. Traffic vs accuracy for local aggregation (report 001)
    md += ["## Network traffic vs local aggregation k (report 001)", ""]
    rows = []
    for k in (1, 2, 4):
        for strategy in ("ring", "ddp"):
            r = predict(prof, strategy, 4, Scenario(sync_every=k))
            rows.append([k, strategy, fmt_bytes(r.bytes_sent_per_rank),
                         fmt_bytes(r.bytes_sent_per_rank * r.iterations_per_epoch),
                         fmt_time(r.iteration_s), fmt_time(r.epoch_s)])
    md += [table(["k", "strategy", "sent/rank/iteration", "sent/rank/epoch", "iteration",
                  "epoch"], rows), "",
           "Traffic falls as 1/k. VGG-11 accuracy needs real CIFAR-10 (not available "
           "offline here): `commsim live --data DIR` reports test accuracy for the runs it "
           "measures.", ""]
    md += _measured_traffic_accuracy(Path(args.traffic_accuracy))
    atomic_write_text(args.out, "\n".join(md) + "\n", force=True)
    print("\n".join(md))
    return 0


def _measured_traffic_accuracy(path: Path) -> list[str]:
    """The live measurement of traffic vs accuracy (``bench/traffic_accuracy.py``'s JSON), as
    a table: bytes from the interface counters and test accuracy per k and g."""
    if not path.exists():
        return [f"(No live traffic/accuracy measurement at {path}: run "
                "`python bench/traffic_accuracy.py --out reports`.)", ""]
    data = json.loads(path.read_text())
    meta = data["meta"]
    rows = [[r["sync_every"], r["group_size"] or "all", r["iterations"],
             fmt_bytes(r["bytes_sent_per_rank"]), fmt_bytes(r["predicted_bytes_sent_per_rank"]),
             f"{100 * r['test_accuracy']:.1f}%"] for r in data["rows"]]
    return [f"Measured live (`{meta['command']}`: {meta['strategy']} on {meta['nodes']} "
            f"emulated nodes at {meta['rate']}, {meta['model']}, {meta['data']}; one seed):", "",
            table(["k", "g", "iterations", "sent/rank/iteration (interface)",
                   "predicted payload", "test accuracy"], rows), "",
            "Network I/O falls as 1/k exactly as predicted (the interface also counts TCP/IP "
            "headers and ACKs).  Accuracy at equal iterations did not fall with k here: at the "
            "base lr every step averages k times more samples, which this small model and data "
            "favour; training 4x longer at k=4 reaches the highest accuracy.", ""]


def _strong_example(prof) -> str:
    one = predict(prof, "single", 1, Scenario(global_batch=128))
    weak = predict(prof, "dp", 4, Scenario(batch_per_rank=128))
    strong = predict(prof, "dp", 4, Scenario(global_batch=128))
    weak_speedup = (one.iteration_s / 128) / (weak.iteration_s / (128 * 4))
    return (f"4 devices at 128/device speed up {weak_speedup:.2f}x over one device at 128, "
            f"while a global batch of 128 split over 4 devices speeds up {strong.speedup:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
