"""Network traffic vs accuracy for local gradient aggregation (k) and group averaging (g), live.

The seed documents' trade-off (report 001): syncing every k iterations, or averaging within
groups of g workers, puts fewer bytes on the network and costs accuracy.  This trains a small
model for real on an emulated cluster and prints, per run: the bytes each rank sent and received
per iteration (its interface counters), what ``commsim predict`` says it sends (the same model's
parameters), the test accuracy reached and the time per iteration.

Steps:
1. build an emulated cluster of ``--nodes`` nodes at ``--rate`` under its own prefix (root);
2. for k in ``--ks`` (g = all) and then g in ``--groups`` (k = 1): ``run_live`` the strategy on
   learnable synthetic data (or ``--data``), ``--iterations`` iterations, the same seed; then,
   with ``--longer N``, the largest k again for N iterations (does accuracy recover?);
3. predict each run's bytes with ``commsim.api.predict`` on the bundled profile whose model is
   replaced by the live one (parameters, buffers, gradient order): bytes depend on the model and
   the algorithm only, so the profile's VGG-11 timings play no part (predicted times are not
   shown, they would be VGG-11's);
4. tear the cluster down (finally) and write ``traffic_accuracy.md``/``.json`` to ``--out``.

Measured bytes include what predict does not model: TCP/IP and Ethernet headers, ACKs and
Gloo's own rendezvous and control messages, so small messages (a small model's per-parameter
all-reduces) measure well above their payload; the ratios between k's are the comparison.

    sudo python bench/traffic_accuracy.py [--nodes 4] [--iterations 200] [--out reports]
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from commsim.api import Scenario, predict
from commsim.calibrate import cluster
from commsim.calibrate.live import LiveConfig, run_live
from commsim.calibrate.models import buffer_specs, load_factory, param_specs
from commsim.files import atomic_write_text, check_output
from commsim.profile import Profile, load_default
from commsim.units import fmt_bytes, fmt_time, parse_rate_Bps

PREFIX = "trafacc"  # our own cluster: never touch one a user has up


def model_profile(profile: Profile, model_spec: str) -> Profile:
    """``profile`` with its model replaced by ``model_spec``'s parameters and buffers, gradients
    ready in reverse registration order (what the byte counts depend on)."""
    model = load_factory(model_spec)()
    params = param_specs(model)
    n = len(params)
    return replace(profile, model_name=model_spec, params=params, buffers=buffer_specs(model),
                   grad_ready_fraction=tuple((n - i) / n for i in range(n)))


def runs(ks, groups, iterations: int, longer: int | None):
    """(sync_every, group_size, iterations) of every run: each k over all ranks, then each g at
    k = 1, then the largest k for ``longer`` iterations."""
    out = [(k, None, iterations) for k in ks] + [(1, g, iterations) for g in groups]
    return out + ([(max(ks), None, longer)] if longer else [])


def label(row: dict) -> str:
    return (f"k={row['sync_every']}" if row["group_size"] is None else f"g={row['group_size']}") \
        + f" ({row['iterations']} it)"


def table(header, rows) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def render(meta: dict, rows: list[dict]) -> str:
    md = ["# Network traffic vs accuracy: local aggregation (k) and group averaging (g)", "",
          f"`{meta['command']}`: {meta['strategy']} on {meta['nodes']} emulated nodes at "
          f"{meta['rate']}, {meta['model']}, {meta['data']}, global batch "
          f"{meta['global_batch']}, seed {meta['seed']}, "
          f"{meta['wall_s']:.0f} s in all.", "",
          "Bytes are per rank per iteration (mean over ranks; with k, a k-iteration cycle's / k). "
          "Measured: the rank's interface counters, headers and ACKs included. Predicted: "
          "`commsim predict` payload for the same model.", ""]
    md += table(("k", "g", "iterations", "sent/it measured", "recv/it measured",
                 "sent/it predicted", "measured/predicted", "samples/step", "test accuracy",
                 "final train loss", "iteration", "epoch"),
                [(r["sync_every"], r["group_size"] or "all", r["iterations"],
                  fmt_bytes(r["bytes_sent_per_rank"]), fmt_bytes(r["bytes_received_per_rank"]),
                  fmt_bytes(r["predicted_bytes_sent_per_rank"]),
                  f"{r['bytes_sent_per_rank'] / r['predicted_bytes_sent_per_rank']:.2f}"
                  if r["predicted_bytes_sent_per_rank"] else "n/a",
                  r["lr_schedule"]["update_batch"],
                  f"{r['test_accuracy']:.1%}", "diverged" if r["final_train_loss"] is None
                  else f"{r['final_train_loss']:.3f}",
                  fmt_time(r["iteration_s"]), fmt_time(r["epoch_s"])) for r in rows])
    base = rows[0]

    def ratio(r, key):
        return r[key] / base[key] if base[key] else float("nan")

    md += ["", "Sent bytes relative to the first run: " + ", ".join(
        f"{label(r)} {ratio(r, 'bytes_sent_per_rank'):.2f} "
        f"(predicted {ratio(r, 'predicted_bytes_sent_per_rank'):.2f})" for r in rows) + ".", "",
        "Accuracy is on the learnable synthetic test split (chance: 10%) unless `--data` was "
        "given; with g < nodes the groups' models differ and it is their mean.  Every run "
        "uses the base lr 0.1: a step's gradient is the mean over samples/step (batch per rank "
        "x ranks averaged x k), so k and g change the optimisation as well as the traffic "
        "(fewer, larger steps; smaller groups, noisier steps).  One seed: differences of a "
        "few points are noise.", ""]
    return "\n".join(md)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategy", default="ddp", choices=("ring", "ddp"))
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--ks", default="1,2,4")
    ap.add_argument("--groups", default="2")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--longer", type=int, help="Iterations of one more run at the largest k")
    ap.add_argument("--global-batch", type=int, default=128)
    ap.add_argument("--model", default="commsim.calibrate.live:small_cnn")
    ap.add_argument("--data", help="CIFAR-10 binary directory (default: learnable synthetic)")
    ap.add_argument("--synthetic-size", type=int, default=10000)
    ap.add_argument("--test-samples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="reports")
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",") if k]
    groups = [int(g) for g in args.groups.split(",") if g]
    rate = parse_rate_Bps(args.rate)
    profile = model_profile(load_default(), args.model)
    base = LiveConfig(strategy=args.strategy, global_batch=args.global_batch,
                      iterations=args.iterations, model=args.model, data_dir=args.data,
                      synthetic="learnable", synthetic_size=args.synthetic_size,
                      test_samples=args.test_samples, seed=args.seed,
                      # Flips mirror the synthetic classes' templates into other patterns:
                      # augment real images only.
                      augment=args.data is not None)
    plan = runs(ks, groups, args.iterations, args.longer)
    for k, g, n in plan:  # refuse a bad combination before building anything
        replace(base, sync_every=k, group_size=g, iterations=n).validate(args.nodes)
    for name in ("traffic_accuracy.md", "traffic_accuracy.json"):  # and an unwritable --out
        check_output(Path(args.out) / name, force=True)

    start = time.perf_counter()
    rows = []
    try:
        info = cluster.up(args.nodes, rate, prefix=PREFIX)
        for k, g, n in plan:
            print(f"traffic_accuracy: k={k} g={g or 'all'}, {n} iterations ...",
                  file=sys.stderr, flush=True)
            m = run_live(replace(base, sync_every=k, group_size=g, iterations=n),
                         nodes=args.nodes,
                         emulate=info, timeout_s=600, progress=io.StringIO())
            p = predict(profile, args.strategy, args.nodes,
                        Scenario(global_batch=args.global_batch, bandwidth_Bps=rate,
                                 sync_every=k, group_size=g))
            rows.append({"sync_every": k, "group_size": g, "iterations": n,
                         "iteration_s": m["iteration_s"],
                         "epoch_s": m["epoch_s"], "test_accuracy": m["test_accuracy"],
                         "test_loss": m["test_loss"],
                         "final_train_loss": m["loss"][-1],
                         "bytes_sent_per_rank": m["bytes_sent_per_rank"],
                         "bytes_received_per_rank": m["bytes_received_per_rank"],
                         "bytes_sent_max": m["bytes_sent_max"],
                         "predicted_bytes_sent_per_rank": p.bytes_sent_per_rank,
                         "predicted_bytes_received_per_rank": p.bytes_received_per_rank,
                         "predicted_buffer_bytes_sent_per_rank": p.buffer_bytes_sent_per_rank,
                         "lr_schedule": {key: m["lr_schedule"][key]
                                         for key in ("rule", "base", "peak", "update_batch")}})
            r = rows[-1]
            print(f"  sent/it {fmt_bytes(r['bytes_sent_per_rank'])} (predicted "
                  f"{fmt_bytes(r['predicted_bytes_sent_per_rank'])}), accuracy "
                  f"{r['test_accuracy']:.1%}, iteration {fmt_time(r['iteration_s'])}",
                  file=sys.stderr, flush=True)
    finally:
        cluster.down(PREFIX)
        (cluster.STATE_DIR / f"{PREFIX}.lock").unlink(missing_ok=True)  # single-use prefix
    meta = {"command": "python bench/traffic_accuracy.py " + " ".join(argv or sys.argv[1:]),
            "strategy": args.strategy, "nodes": args.nodes, "rate": args.rate,
            "model": args.model, "data": args.data or "learnable synthetic data",
            "global_batch": args.global_batch, "iterations": args.iterations,
            "seed": args.seed, "wall_s": time.perf_counter() - start}
    text = render(meta, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "traffic_accuracy.md", text, force=True)
    atomic_write_text(out / "traffic_accuracy.json",
                      json.dumps({"meta": meta, "rows": rows}, indent=2, sort_keys=True) + "\n",
                      force=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
