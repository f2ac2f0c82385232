"""How ``predict`` scales with ranks: wall time and peak memory per strategy and node count.

Usage:  python bench/scale.py [--profile FILE] [--nodes 8,64,1024,16384,65536] [--engine auto]
                              [--strategies ps,ring,ddp] [--sweep]

Steps:
1. load the profile (``--profile``, else the bundled one, else VGG-11's real parameter shapes from
   ``commsim.calibrate.models`` with nominal compute times: the shapes, not the times, set the cost
   of a prediction);
2. for each strategy and node count, homogeneous and with one straggler (rank 1 computing 1.5x
   slower), run ``commsim.api.predict`` once, timing it with ``time.perf_counter`` and measuring
   the peak of Python allocations with ``tracemalloc`` (numpy's buffers included);
3. print the times, peaks, the ratio of each time to the 8-node time and the targets
   (1,024 ranks < 1 s; 65,536 < 30 s and < 2 GiB; one straggler at 1,024 < 5 s);
4. with ``--sweep``, time ``commsim.api.sweep`` over all strategies x pow2:65536 at 32 samples per
   rank (target < 60 s).
Process peak RSS (``resource.getrusage``) is printed at the end as a cross-check.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc

from commsim.api import Scenario, predict, sweep
from commsim.profile import (CollectiveFit, ComputeTable, NetworkFit, Profile, ProfileError, load,
                             load_default)

GiB = 1024 ** 3
TARGETS = {1024: 1.0, 65536: 30.0}      # seconds, homogeneous
STRAGGLER_TARGET = (1024, 5.0)


def bench_profile(path: str | None) -> Profile:
    if path:
        return load(path)
    try:
        return load_default()
    except ProfileError:
        return vgg11_nominal()


def vgg11_nominal() -> Profile:
    """VGG-11's parameters (torch builds them) with nominal CPU times and a 1 Gbit/s link."""
    from commsim.calibrate.models import param_specs, vgg11_cifar
    params = param_specs(vgg11_cifar())
    n = len(params)
    link = dict(latency_s=1e-4, bandwidth_Bps=125e6)
    colls = {name: CollectiveFit(**link, reduction_s_per_B=2e-10 if name == "all_reduce" else 0.0,
                                 overhead_s=2e-4)
             for name in ("all_reduce", "gather", "scatter")}
    return Profile(
        schema_version=1, metadata={"source": "bench/scale.py nominal VGG-11"},
        model_name="vgg11", input_shape=(3, 32, 32), params=params,
        compute=ComputeTable(threads_per_rank=1, batch_sizes=(1, 256), forward_s=(0.01, 1.2),
                             backward_s=(0.02, 2.4), optimizer_s=(0.05, 0.05)),
        grad_ready_fraction=tuple((n - i) / n for i in range(n)), grad_ready_batch_size=64,
        network=NetworkFit(**link), collectives=colls)


def measure(fn):
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, wall, peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile")
    ap.add_argument("--nodes", default="8,64,1024,16384,65536")
    ap.add_argument("--strategies", default="ps,ring,ddp")
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args(argv)
    prof = bench_profile(args.profile)
    nodes = [int(x) for x in args.nodes.split(",")]
    print(f"profile: {prof.model_name}, {len(prof.params)} tensors, {prof.model_bytes / 1e6:.1f} MB "
          f"({prof.metadata.get('source', '?')}); engine {args.engine}")
    print(f"{'strategy':8} {'case':10} {'ranks':>6} {'engine':6} {'wall_s':>9} {'peak_MiB':>9} "
          f"{'x 8-rank':>9} {'iteration_s':>12}  target")
    failures = []
    for strategy in args.strategies.split(","):
        for case, stragglers in (("homog", {}), ("straggler", {1: 1.5})):
            base = None
            for n in nodes:
                sc = Scenario(global_batch=max(256, n), stragglers=stragglers)
                r, wall, peak = measure(lambda: predict(prof, strategy, n, sc, engine=args.engine))
                base = wall if base is None else base
                target = ""
                if case == "homog" and n in TARGETS:
                    ok = wall < TARGETS[n] and (n != 65536 or peak < 2 * GiB)
                    target = f"< {TARGETS[n]:g} s" + (" & 2 GiB" if n == 65536 else "")
                    target += " ok" if ok else " MISSED"
                elif case == "straggler" and n == STRAGGLER_TARGET[0]:
                    ok = wall < STRAGGLER_TARGET[1]
                    target = f"< {STRAGGLER_TARGET[1]:g} s " + ("ok" if ok else "MISSED")
                if "MISSED" in target:
                    failures.append(f"{strategy} {case} {n}")
                print(f"{strategy:8} {case:10} {n:>6} {r.engine:6} {wall:9.3f} "
                      f"{peak / 2**20:9.1f} {wall / base:9.1f} {r.iteration_s:12.6g}  {target}",
                      flush=True)
    if args.sweep:
        strategies = ["single", "ps", "ring", "ddp"]
        node_list = [2 ** k for k in range(17)]
        # Weak scaling: a global batch of 256 cannot be split over more than 256 ranks.
        rows, wall, peak = measure(lambda: sweep(prof, strategies, node_list,
                                                 Scenario(global_batch=None, batch_per_rank=32),
                                                 engine=args.engine))
        ok = wall < 60
        if not ok:
            failures.append("sweep")
        print(f"sweep {','.join(strategies)} x pow2:65536 ({len(rows)} predictions): "
              f"{wall:.2f} s, peak {peak / 2**20:.1f} MiB  target < 60 s {'ok' if ok else 'MISSED'}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process peak RSS {rss:.0f} MiB" + ("" if not failures else
                                               f"; MISSED: {', '.join(failures)}"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
