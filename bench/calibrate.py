"""Benchmark ``commsim calibrate``: run time, all-reduce bus bandwidth vs the shaped rate, and
how well the compute table reproduces fresh measurements.

Steps (needs root for the emulated runs; prints every figure with its target):
1. time ``commsim calibrate --quick --nodes 2``                         (target < 45 s);
2. time ``commsim calibrate --emulate 1gbit --nodes 4``                 (target < 3 min);
3. for 100mbit and 1gbit at 4 and 2 nodes, the fitted all-reduce bandwidth (the ring's bus
   bandwidth) vs the shaped rate                                        (target within 10%),
   and the bus bandwidth measured at the largest size the sweep reached (nccl-tests' figure);
   the runs other than step 2's time only batch sizes 16 and 32 (their collectives matter
   here; ``--quick`` would also cut the collective sweep at 256 KiB, below full rate);
4. compute-fit reproduction: the table (fwd+bwd+opt) against the calibration's own median at each
   measured batch size                                                  (target < 5%),
   with how much the repetitions varied and what that noise alone gives a table that is
   exactly right (repetitions drawn around the table, fitted the same way: median and 90th
   percentile of the worst size's miss, with the calibration's repetitions and with 3, 8, 20);
   held out: re-time the sizes halfway between measured ones, interleaved with the measured ones
   (one repetition of each per round, 5 rounds), and compare with ``ComputeTable.time_s``, raw and
   after the speed drift since calibrating that the measured neighbours show.
Usage: python bench/calibrate.py [--skip-emulated] [--profile P (step 4 only, on P)]
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




def fit_reproduction(profile: P.Profile) -> float:
    """Max relative error of the table (fwd+bwd+opt) against the calibration's own medians of
    the per-repetition totals at each measured batch size (what ``commsim calibrate`` prints),
    and what the machine's noise alone would give (``noise_only_misses``)."""
    from commsim.calibrate import fit as F

    print(F.format_compute_reproduction(profile))
    rows = F.profile_reproduction(profile)
    noise = F.repetition_noise(rows)
    typical, high, kept = noise_only_misses(profile, noise)
    print(f"  noise alone ({noise:.1%} rms repetitions, as many as the calibration took, "
          f"drawn around the table and fitted the same way): the worst size misses its median "
          f"by {typical:.1%} (median of 200 draws), {high:.1%} (90th percentile); "
          f"{_kept(kept)}")
    for n in (3, 8, 20):
        typical, high, kept = noise_only_misses(profile, noise, trials=100, reps=n)
        print(f"  the same with {n} repetitions of every size: {typical:.1%} (median), "
              f"{high:.1%} (90th percentile); {_kept(kept)}")
    return max(abs(r["error"]) for r in rows)


def _kept(kept: dict[str, float]) -> str:
    shares = ", ".join(f"{ph} {share:.0%}" for ph, share in kept.items() if share)
    return (f"draws whose fit missed a phase's medians by more than it is accepted within (the "
            f"table then keeps them): {shares or 'none'}")


def noise_only_misses(profile: P.Profile, noise: float, trials: int = 200, seed: int = 0,
                      reps: int | None = None) -> tuple[float, float, dict[str, float]]:
    """The table's worst miss of its medians if the table were exactly right and the machine's
    noise were all there is: per trial, every size gets as many repetitions as the calibration
    took (or ``reps``), drawn around the table (all phases of a repetition scaled by one
    log-normal factor of rms ``noise``: the machine's speed moves them together), fitted as
    ``calibrate`` fits them.
    Returns the median and the 90th percentile over trials of the worst size's miss, and per
    phase the fraction of trials in which its fit was rejected (that phase's table is then its
    medians, which it reproduces by construction: so noisier draws can miss less; a phase whose
    table is medians already, not smooth, is rejected in most)."""
    import numpy as np

    from commsim.calibrate import compute as K
    from commsim.calibrate import fit as F

    rng = np.random.default_rng(seed)
    shape = [(r["batch_size"], reps or len(r["forward_s"])) for r in profile.samples["compute"]]
    worst, kept = [], dict.fromkeys(P.PHASES, 0)
    for _ in range(trials):
        drawn = []
        for b, n in shape:
            speed = np.exp(noise * rng.standard_normal(n))
            drawn.append({"batch_size": b, **{f"{ph}_s": list(profile.compute.time_s(ph, b)
                                                                 * speed) for ph in P.PHASES}})
        fits = F.fit_compute(drawn, P.PHASES)
        for ph, f in fits.items():
            kept[ph] += not f["used"]
        table = F.smooth_compute(K.summarize(drawn), fits)
        fitted = dict(zip(table["batch_sizes"],
                          np.sum([table[f"{ph}_s"] for ph in P.PHASES], axis=0)))
        worst.append(max(abs(r["error"]) for r in F.compute_reproduction(drawn, fitted.get)))
    return (float(np.median(worst)), float(np.percentile(worst, 90)),
            {ph: k / trials for ph, k in kept.items()})


def held_out(profile: P.Profile, rounds: int = 5) -> tuple[float, float]:
    """Re-time, now, the batch sizes halfway between measured ones together with the measured
    ones, in ``rounds`` interleaved rounds (one repetition of every size per round, so a drift
    of the machine's speed reaches all sizes alike).  Returns (max error of the table at the
    halfway sizes, the same after scaling the table by the drift its neighbours show now)."""
    import numpy as np
    import torch

    from commsim.calibrate.compute import ComputeBench
    from commsim.calibrate.fit import table_total_s
    from commsim.calibrate.models import build_model

    torch.set_num_threads(profile.compute.threads_per_rank)
    bench = ComputeBench(lambda: build_model(profile.model_name), profile.input_shape)
    sizes = profile.compute.batch_sizes
    mids = [(lo + hi) // 2 for lo, hi in zip(sizes, sizes[1:])]
    every = sorted({*sizes, *mids})
    batches = {b: bench.batch(b) for b in every}
    for b in every:  # warm-up
        bench.iteration(*batches[b])
    times: dict[int, list[float]] = {b: [] for b in every}
    for _ in range(rounds):
        for b in every:
            f, bw, o, _ = bench.iteration(*batches[b])
            times[b].append(f + bw + o)
    fresh = {b: float(np.median(v)) for b, v in times.items()}
    table = {b: table_total_s(profile, b) for b in every}
    raw_worst = corrected_worst = 0.0
    for lo, mid, hi in zip(sizes, mids, sizes[1:]):
        drift = (fresh[lo] + fresh[hi]) / (table[lo] + table[hi])
        raw = abs(table[mid] - fresh[mid]) / fresh[mid]
        corrected = abs(table[mid] * drift - fresh[mid]) / fresh[mid]
        raw_worst, corrected_worst = max(raw_worst, raw), max(corrected_worst, corrected)
        print(f"  batch {mid:4d}: now {fresh[mid]:.4f} s, table {table[mid]:.4f} s, error "
              f"{raw:.1%}; neighbours now/table {drift:.3f}, error after that drift "
              f"{corrected:.1%}")
    return raw_worst, corrected_worst


def check_compute(prof: P.Profile) -> None:
    """Step 4 on one profile: print both compute checks with their figures."""
    print("compute table vs the calibration's own per-batch medians:")
    print(f"compute-fit reproduction error: max {fit_reproduction(prof):.1%} (target < 5%)")
    print("compute table vs fresh timings between the measured sizes (interleaved rounds):")
    raw, corrected = held_out(prof)
    print(f"held-out error: max {raw:.1%}; after the machine's drift since calibrating "
          f"(measured on the neighbouring sizes): max {corrected:.1%}")


def main() -> None:
    if "--profile" in sys.argv:
        check_compute(P.load(sys.argv[sys.argv.index("--profile") + 1]))
        return
    skip_emulated = "--skip-emulated" in sys.argv
    tmp = Path(tempfile.mkdtemp(prefix="commsim-bench-"))
    t = timed(["calibrate", "--quick", "--nodes", "2", "--out", str(tmp / "quick.json")])
    print(f"calibrate --quick --nodes 2: {t:.1f} s (target < 45 s)")
    if skip_emulated:
        return
    t = timed(["calibrate", "--emulate", "1gbit", "--nodes", "4", "--out", str(tmp / "1g.json")])
    print(f"calibrate --emulate 1gbit --nodes 4: {t:.1f} s (target < 180 s)")
    runs = [("1gbit", 4, "1g.json")]
    for rate, nodes in (("100mbit", 4), ("100mbit", 2), ("1gbit", 2)):
        name = f"{rate}_{nodes}.json"
        timed(["calibrate", "--emulate", rate, "--nodes", str(nodes), "--batch-sizes", "16,32",
               "--out", str(tmp / name)])
        runs.append((rate, nodes, name))
    for rate, nodes, name in runs:
        prof = P.load(tmp / name)
        bw = prof.collectives["all_reduce"].bandwidth_Bps
        shaped = parse_rate_Bps(rate)
        largest = max((r for r in prof.samples["nccl_table"] if r["op"] == "all_reduce"),
                      key=lambda r: r["size_bytes"])
        print(f"all-reduce bus bandwidth at {rate}, {nodes} nodes: fitted {fmt_rate(bw)} vs "
              f"shaped {fmt_rate(shaped)}: {bw / shaped - 1:+.1%} (target within 10%); "
              f"measured at {largest['size_bytes'] >> 20} MiB: "
              f"{fmt_rate(largest['busbw_Bps'])} ({largest['busbw_Bps'] / shaped - 1:+.1%})")
    check_compute(P.load(tmp / "1g.json"))


if __name__ == "__main__":
    main()
